/*
 * server.h - the coordinator's one HTTP/WebSocket server (libwebsockets):
 *   WebSocket "rowshift-control"  the workers' control channel (and rowshiftctl's)
 *   WebSocket "rowshift-status"   the read-only status stream (README, "Status stream")
 *   GET /healthz                  "ok"
 *   GET anything else             the owner's http_get hook (the dashboard, /metrics, /readyz)
 *
 * Single-threaded: rs_server_service() runs the event loop for a while and
 * calls the handler from inside it.
 *
 * The control channel: a connection's first message must be a join
 * proving the shared join token (the handshake in common/proto.h), within
 * 2 s and 4 KiB; anything else (a wrong proof, malformed JSON, another
 * message, more bytes) is answered {"type":"refused"} unsigned and closed,
 * and nothing reaches the handler. At most 64 connections wait for their
 * join, 8 from one remote address (loopback excepted): past that the
 * oldest is closed, so idle connections cannot lock joiners out. After the
 * join, malformed or oversized messages are logged and answered
 * {"type":"error"}, and never stop the server. What unauthenticated peers
 * cause is logged at a bounded rate, and every log line is escaped
 * (common/log.h).
 *
 * Browsers: a WebSocket upgrade with an Origin (a web page's) must come from
 * the coordinator's own page under a Host this server answers to, and so
 * must a request for the page or /metrics: an IP address, localhost, the
 * --listen host, or a name given to rs_server_create. A page of
 * another site that DNS rebinding points here is refused.
 *
 * The status stream: at most RS_STATUS_MAX_CLIENTS clients,
 * RS_STATUS_MAX_PER_PEER from one remote address (loopback excepted). A
 * client gets a snapshot when it connects, then every event
 * rs_server_publish sends. Every message is serialized once and shared by
 * all clients (one snapshot serves every client for up to a second, with
 * the events since), and written in fragments of RS_STATUS_FRAGMENT bytes
 * only while the client's socket takes them, so a client that does not
 * read holds references and a fragment, never copies. Each client's queue
 * is bounded (RS_STATUS_MAX_QUEUED messages, RS_STATUS_MAX_BYTES bytes): a
 * client that falls behind loses its queue and gets a fresh snapshot when
 * it drains; one that takes no message in RS_STATUS_STALL_S seconds is
 * closed. While the stream is held (rs_server_status_hold: a reshard has
 * the job's world stopped), events queue but nothing is written (a new
 * client's snapshot neither), so that neither the writes nor what clients
 * do with them take time from the pause; they go out in order when it is
 * released, or every RS_STATUS_HOLD_MAX_S held (the message a client was
 * in the middle of when the hold began is finished).
 * Anything a status client sends is ignored (over
 * RS_STATUS_MAX_INCOMING bytes closes it). With a status token set, a
 * client must present it as "Authorization: Bearer TOKEN" or as the
 * subprotocol "bearer.BASE64URL(TOKEN)".
 *
 * Control messages (JSON text frames):
 *   worker -> coordinator  {"type":"join","token","worker","addr","pid"}
 *                          anything else, after the join: the handler's
 *   coordinator -> worker  {"type":"welcome","worker_id"} | {"type":"refused","reason"}
 *                          | {"type":"error","reason"} | the handler's
 */
#ifndef RS_SERVER_H
#define RS_SERVER_H

#include "common/proto.h"
#include "common/status.h"

#include <jansson.h>
#include <stdint.h>

#define RS_STATUS_MAX_QUEUED 256
#define RS_STATUS_MAX_BYTES ((size_t)1 << 20)
#define RS_STATUS_MAX_INCOMING 4096
#define RS_STATUS_MAX_CLIENTS 512
#define RS_STATUS_MAX_PER_PEER 32
#define RS_STATUS_FRAGMENT 16384
#define RS_STATUS_STALL_S 30
#define RS_STATUS_HOLD_MAX_S 0.5

typedef struct rs_server rs_server;
typedef struct rs_conn rs_conn;

typedef struct rs_server_handler {
	void *ctx;
	/* A worker joined with the right token. */
	void (*on_join)(void *ctx, rs_conn *c, const rs_msg_join *join);
	/* A message from a joined worker; msg is borrowed, valid during the call. */
	void (*on_message)(void *ctx, rs_conn *c, json_t *msg);
	/* A joined worker's connection closed; c is invalid afterwards. */
	void (*on_close)(void *ctx, rs_conn *c);
	/* The status stream's snapshot: a new reference, or NULL for none. May be NULL. */
	json_t *(*status_snapshot)(void *ctx);
	/*
	 * Answer GET path (not /healthz): return the HTTP status and fill *body
	 * (malloc'd; the server frees it), *len and *content_type (a constant
	 * string). May be NULL (then 404).
	 */
	int (*http_get)(void *ctx, const char *path, char **body, size_t *len, const char **content_type);
} rs_server_handler;

typedef struct rs_server_opts {
	const char *listen; /* "host:port" (port 0: ephemeral; see rs_server_port) */
	const char *token;  /* the shared join token */
	/*
	 * The job's model config digest (rs_config_digest), or NULL: a worker
	 * whose join carries another is refused (signed, so that it stops),
	 * the refusal naming the sections that differ. A join without one (a
	 * tool such as rowshiftctl) is not checked.
	 */
	const char *model;
	/*
	 * NULL: none; or "name,name,..." (letters, digits, '.', '-'; 2 KiB at
	 * most), the host names a browser may reach this server by besides IP
	 * addresses, localhost and the --listen host (a Service's DNS name, an
	 * ingress); see "Browsers" above.
	 */
	const char *hosts;
	/*
	 * PEM files of the server's certificate (chain) and private key: with
	 * both, the port speaks TLS only (wss://, https://: the control channel,
	 * the status stream, the dashboard, /metrics and the probes); with
	 * neither, plain.
	 */
	const char *tls_cert, *tls_key;
	/*
	 * The coordinator's term (Kubernetes mode: one more than its
	 * predecessor's, kube_members.h; 0 in local mode), in every challenge
	 * and bound into the handshake's proofs: a worker refuses a coordinator
	 * of a lower term than one it has joined, a deposed one.
	 */
	int64_t term;
	/*
	 * Control connections that may wait for their join at once (0: the
	 * default, RS_MAX_WORKERS, the largest world, all of it starting at
	 * once, or a quarter of the descriptors the process may open when that is
	 * fewer; tests set less). Past it the oldest goes, so idle connections,
	 * however many, delay an honest joiner by one round trip at most
	 * instead of locking it out. One costs about 8 KiB until it joins.
	 */
	int max_unjoined;
} rs_server_opts;

rs_status rs_server_create(const rs_server_opts *o, const rs_server_handler *h, rs_server **out, rs_err *err);

/*
 * Whether the PEM certificate in cert_file names ip (an IP address its
 * clients will verify it against): RS_EINVAL saying how to make one that
 * does, otherwise.
 */
rs_status rs_server_cert_names(const char *cert_file, const char *ip, rs_err *err);
void rs_server_destroy(rs_server *s);
int rs_server_port(const rs_server *s);

/* Run the event loop for at most timeout_ms. */
void rs_server_service(rs_server *s, int timeout_ms);

/* Queue a message to a worker (sent from the event loop). RS_ENOSPACE when its queue is full. */
rs_status rs_server_send(rs_conn *c, const json_t *msg);

/* Require this token of status clients (NULL or "": none). */
rs_status rs_server_set_status_token(rs_server *s, const char *token);

/* Send an event (borrowed) to every status client, serialized once. */
void rs_server_publish(rs_server *s, const json_t *event);

/*
 * Hold the status stream (1) or release it (0): see above. Held for
 * RS_STATUS_HOLD_MAX_S, what waits goes out and the hold goes on.
 */
void rs_server_status_hold(rs_server *s, int hold);

/* Status clients connected now, the bytes waiting for them, and the snapshots built so far. */
int rs_server_status_clients(const rs_server *s);
size_t rs_server_status_queued(const rs_server *s);
unsigned long rs_server_snapshots_built(const rs_server *s);

/* The worker name the connection joined with. */
const char *rs_conn_worker(const rs_conn *c);

#endif
