/*
 * server_internal.h - what the two halves of the coordinator's server
 * share: server.c (the control channel, the browser checks, HTTP, the
 * event loop) and server_status.c (the status stream). The server's state
 * and a few helpers, prefixed rs__; nothing here is for other modules
 * (coordinator/server.h is the interface).
 */
#ifndef RS_SERVER_INTERNAL_H
#define RS_SERVER_INTERNAL_H

#include "common/config.h"
#include "common/auth.h"
#include "coordinator/server.h"

#include <libwebsockets.h>
#include <stddef.h>
#include <stdint.h>

#define RS__PEER_LEN 64

/* A status message, serialized once and shared by every client that sends it. */
typedef struct shared_msg {
	int refs;
	size_t len;
	char text[];
} shared_msg;

/* One status client (lws's per-session data of the status protocol). */
typedef struct status_client {
	rs_server *srv;
	struct lws *wsi;
	shared_msg *q[RS_STATUS_MAX_QUEUED];
	size_t head, n, bytes;
	shared_msg *cur;          /* the message being written, in fragments, and how much of it is out */
	size_t off;
	int needs_snapshot;       /* its queue was dropped (or it just came): a snapshot goes next */
	int flushing;             /* writing all it has though the stream is held (its hold ran out) */
	size_t rx;                /* bytes of the message it is sending us (ignored) */
	char peer[RS__PEER_LEN];
	struct status_client *prev, *next;
} status_client;

struct rs_server {
	struct lws_context *ctx;
	rs_server_handler h;
	char token[1025];
	char model[RS_CONFIG_DIGEST_LEN + 1]; /* the job's model config digest ("": not checked) */
	char status_token[1025];
	char status_protocol[1500]; /* "bearer.BASE64URL(status token)": how a browser presents it */
	char hosts[2048];         /* the host names a browser may use besides IP addresses and localhost: "a,b" */
	int port;
	int64_t next_id;
	char epoch[RS_AUTH_NONCE_HEX + 1]; /* this coordinator process's: every handshake is bound to it */
	int64_t term;                      /* rs_server_opts' */
	int max_unjoined;                  /* rs_server_opts', its default applied */
	char bound_epoch[RS_AUTH_NONCE_HEX + 32]; /* what the proofs cover: epoch and term (rs_proto_bound_epoch) */
	int unjoined;             /* control connections in their handshake */
	rs_conn *oldest, *newest; /* ... listed, oldest first */
	double refusal_tokens;    /* refusals that may be logged now (REFUSAL_BURST at most, one more a second) */
	double refusal_at;        /* when the tokens were counted, and a refusal last logged */
	double logged_at;
	int refusals_unlogged;    /* refusals not logged since */
	status_client *clients;   /* every status client, for broadcasting */
	int nclients;
	uint64_t seq;             /* events published so far */
	shared_msg *ring[RS_STATUS_MAX_QUEUED]; /* the latest events (the last seq), RS_STATUS_MAX_BYTES at most */
	size_t ring_head, ring_n, ring_bytes;
	shared_msg *snap;         /* the latest snapshot, as of event snap_seq, built at snap_at */
	uint64_t snap_seq;
	double snap_at;
	unsigned long snapshots;  /* snapshots built */
	int held;                 /* rs_server_status_hold: events wait, since held_at */
	double held_at;
	unsigned char frag[LWS_PRE + RS_STATUS_FRAGMENT]; /* a status fragment on its way to lws_write */
};

/* Log what an unauthenticated peer caused, at a bounded rate (see server.c). */
void rs__server_refusal(rs_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The remote address of wsi ("" when unknown), an IPv4-mapped address as IPv4. */
void rs__server_peer(struct lws *wsi, char out[RS__PEER_LEN]);

/*
 * Whether a peer is this machine: local mode's workers all are, and so is
 * everything that reaches a pod through `kubectl port-forward`. Per-peer
 * limits do not apply to it (the global ones do).
 */
int rs__server_loopback(const char *peer);

/* Whether a WebSocket upgrade may proceed as far as browsers go (server.c, origin_allowed); refusals are logged. */
int rs__server_origin_allowed(rs_server *s, struct lws *wsi);

/* ---- server_status.c ---- */

/* lws's callback of the "rowshift-status" protocol. */
int rs__status_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);

/* Whether a request presents the status token (or none is set). */
int rs__status_authorized(rs_server *s, struct lws *wsi);

/* From the event loop: a hold that ran out lets what waits go. */
void rs__status_tick(rs_server *s);

/* Free the shared snapshot and events, once every client is closed. */
void rs__status_free(rs_server *s);

#endif
