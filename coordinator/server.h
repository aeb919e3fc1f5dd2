/*
 * server.h - the coordinator's one HTTP/WebSocket server (libwebsockets),
 * serving the workers' control channel (subprotocol "rowshift-control").
 *
 * Single-threaded: rs_server_service() runs the event loop for a while and
 * calls the handler from inside it. A connection's first message must be a
 * join carrying the shared join token (compared in constant time); a wrong
 * token is answered {"type":"refused"} and the connection closed, and
 * nothing reaches the handler. Malformed or oversized messages are logged,
 * answered {"type":"error"} where possible, and never stop the server.
 *
 * Messages (JSON text frames):
 *   worker -> coordinator  {"type":"join","token","worker","addr","pid"}
 *                          anything else, after the join: the handler's
 *   coordinator -> worker  {"type":"welcome","worker_id"} | {"type":"refused","reason"}
 *                          | {"type":"error","reason"} | the handler's
 */
#ifndef RS_SERVER_H
#define RS_SERVER_H

#include "common/status.h"

#include <jansson.h>
#include <stdint.h>

typedef struct rs_server rs_server;
typedef struct rs_conn rs_conn;

typedef struct rs_server_handler {
	void *ctx;
	/* A worker joined with the right token. */
	void (*on_join)(void *ctx, rs_conn *c, const char *worker, const char *addr, int64_t pid);
	/* A message from a joined worker; msg is borrowed, valid during the call. */
	void (*on_message)(void *ctx, rs_conn *c, json_t *msg);
	/* A joined worker's connection closed; c is invalid afterwards. */
	void (*on_close)(void *ctx, rs_conn *c);
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

/* The worker name the connection joined with. */
const char *rs_conn_worker(const rs_conn *c);

#endif
