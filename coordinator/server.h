/*
 * server.h - the coordinator's one HTTP/WebSocket server (libwebsockets):
 *   WebSocket "rowshift-control"  the workers' control channel (and rowshiftctl's)
 *   WebSocket "rowshift-status"   the read-only status stream (README, "Status stream")
 *   GET /healthz                  "ok"
 *   GET anything else             the owner's http_get hook (the dashboard, /metrics, /readyz)
 *
 * Single-threaded: rs_server_service() runs the event loop for a while and
 * calls the handler from inside it. A connection's first message must be a
 * join carrying the shared join token (compared in constant time); a wrong
 * token is answered {"type":"refused"} and the connection closed, and
 * nothing reaches the handler. Malformed or oversized messages are logged,
 * answered {"type":"error"} where possible, and never stop the server.
 *
 * The status stream: a client gets the owner's snapshot when it connects,
 * then every event rs_server_publish sends, serialized once and shared by
 * all clients. Each client's queue is bounded (RS_STATUS_MAX_QUEUED
 * messages, RS_STATUS_MAX_BYTES bytes): a client that falls behind loses
 * its queue and gets a fresh snapshot when it can take one, so a slow or
 * stalled client costs bounded memory and never slows the loop. Anything a
 * status client sends is ignored (over RS_STATUS_MAX_INCOMING bytes closes
 * it). With a status token set, a client must present it as
 * "Authorization: Bearer TOKEN" or "?token=TOKEN".
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

/* Listen on "host:port" (port 0: ephemeral; see rs_server_port). */
rs_status rs_server_create(const char *listen, const char *token, const rs_server_handler *h, rs_server **out,
			   rs_err *err);
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

/* Status clients connected now, and the bytes waiting in their queues. */
int rs_server_status_clients(const rs_server *s);
size_t rs_server_status_queued(const rs_server *s);

/* The worker name the connection joined with. */
const char *rs_conn_worker(const rs_conn *c);

#endif
