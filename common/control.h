/*
 * control.h - the client end of the coordinator's WebSocket server: the
 * control channel (a worker's link, rowshiftctl's requests) and the
 * read-only status stream. A libwebsockets client serviced from the
 * caller's own thread, between training steps (rs_control_poll) or while
 * it waits for a message (rs_control_recv). Every wait is bounded; a closed
 * connection is RS_EPEER, so a worker whose coordinator went away notices.
 * Messages are built and read with proto.h.
 */
#ifndef RS_CONTROL_H
#define RS_CONTROL_H

#include "common/status.h"

#include <jansson.h>

typedef struct rs_control rs_control;

/*
 * Connect to url ("ws://HOST:PORT", or "wss://HOST:PORT" over TLS) and join, announcing the worker's name,
 * its transport address and its model config's digest (model: rs_config_digest; NULL for a tool that
 * trains nothing), proving knowledge of the token without
 * sending it and checking the coordinator's own proof (proto.h, "The join
 * handshake"). RS_EINVAL (with the reason) when refused for good: by a
 * coordinator that proved itself, or before any coordinator ever did in
 * this process (a wss:// certificate that fails verification then too). RS_EPEER when the peer did not prove it holds the token
 * (an impostor: try again later), RS_ETIMEDOUT / RS_EPEER when nobody
 * answers. Until the coordinator's proven welcome, the peer may send one
 * message of at most 4 KiB at a time (the challenge, then the answer): a
 * larger, malformed or unasked-for message hangs up (RS_EPEER), so an
 * impostor on the coordinator's address costs a few KiB. After it, messages
 * up to 64 MiB (a plan).
 */
rs_status rs_control_connect(const char *url, const char *token, const char *worker, const char *addr,
			     const char *model, int timeout_ms, rs_control **out, rs_err *err);
void rs_control_close(rs_control *c);

/*
 * Connect to the coordinator's read-only status stream (ws://HOST:PORT,
 * path /status, subprotocol "rowshift-status"), presenting token as a
 * bearer token when not NULL. Messages arrive through rs_control_recv (the
 * snapshot first); nothing needs to be sent.
 */
rs_status rs_control_open_status(const char *url, const char *token, int timeout_ms, rs_control **out, rs_err *err);

/*
 * The CA certificates (a PEM file) that a wss:// coordinator's certificate
 * must chain to; NULL or "": the system's. The server's certificate and its
 * host name (or IP address) are always verified. For the whole process;
 * the file is read now, so a missing or malformed one is reported here.
 */
rs_status rs_control_set_tls_ca(const char *file, rs_err *err);

/*
 * This process's pod (its metadata.uid; NULL or "": none), before its first
 * join: every join's incarnation then begins with it and a dot, so that
 * the coordinator applies a pod's deletion to that pod's worker only
 * (rs_incarnation_of_pod). For the whole process.
 */
#define RS_POD_UID_MAX 40
rs_status rs_control_set_pod_uid(const char *uid, rs_err *err);

/* Whether a worker that joined with incarnation may run in pod uid (NULL or "": any): 0 only when it names another. */
int rs_incarnation_of_pod(const char *incarnation, const char *uid);

/* Queue a message (msg stays the caller's). */
rs_status rs_control_send(rs_control *c, const json_t *msg);

/* The next message (a new reference for the caller), waiting at most timeout_ms. */
rs_status rs_control_recv(rs_control *c, int timeout_ms, json_t **msg);

/* Service the connection without blocking: RS_EPEER once it closed. */
rs_status rs_control_poll(rs_control *c);

/* Wait until every queued message is written (at most timeout_ms). */
rs_status rs_control_flush(rs_control *c, int timeout_ms);

/*
 * Why the connection closed, once it has (RS_EPEER): the coordinator's
 * close and its status, the connection ending without one, or this end's
 * idle check hanging up (common/wsmsg.h); "" while it is open.
 */
const char *rs_control_why(const rs_control *c);

#endif
