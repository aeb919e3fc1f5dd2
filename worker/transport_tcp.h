/*
 * transport_tcp.h - the TCP backend of transport.h: a full mesh of TCP
 * connections between the members of one generation, set up from the
 * addresses the coordinator hands out.
 *
 * Set-up: rank i connects to every lower rank (retrying while they come up)
 * and accepts every higher one, so no two ranks wait on each other. Each
 * connection opens with a mutual challenge-response (common/auth.h): both
 * sides prove they hold the join token, bound to the generation, both
 * ranks and a fresh nonce from each, and neither ever sends the token. A
 * peer from another generation or without the token is refused. A
 * listener never stops accepting and runs up to 256 handshakes side by
 * side without blocking: the hello is due within 500 ms of the accept, the
 * rest within 5 s of the hello, and when every slot is taken a new
 * connection replaces the least promising one (no hello before a hello,
 * the oldest first, never one of the 64 newest), so an idle or hostile
 * flood never keeps the real peers out. A connecting rank never blocks:
 * each attempt is bounded (2 s), and it connects again with backoff until
 * the mesh deadline when a listener closed it. The data path is
 * non-blocking sockets driven by poll(),
 * every message framed with a sequence number and its length, so a
 * desynchronized peer is detected (RS_ECORRUPT) instead of misread.
 */
#ifndef RS_TRANSPORT_TCP_H
#define RS_TRANSPORT_TCP_H

#include "worker/transport.h"

typedef struct rs_tcp_config {
	int32_t rank, world;
	const char *const *addrs; /* world entries, "host:port" or "[v6]:port" */
	int listen_fd;            /* a listening socket for addrs[rank], or -1 to bind one here; the transport owns it */
	const char *token;        /* the shared join token (at most 1024 bytes); never sent */
	uint64_t generation;
	int timeout_ms;           /* bound on every wait; 0 means 30000 */
} rs_tcp_config;

/*
 * Connect the mesh. Returns RS_ETIMEDOUT when some peer did not show up (or
 * was refused) before the timeout, RS_EINVAL for a bad config, RS_ESYS for a
 * failed socket call; err names the peer and the cause.
 */
rs_status rs_tcp_transport_create(const rs_tcp_config *cfg, rs_transport **out, rs_err *err);

/* A listening socket on host:port (port 0: ephemeral); *port gets the bound port. */
rs_status rs_tcp_listen(const char *host, int port, int *fd, int *bound_port, rs_err *err);

#endif
