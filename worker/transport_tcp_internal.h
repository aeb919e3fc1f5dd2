/*
 * transport_tcp_internal.h - what the TCP transport's two halves share: the
 * mesh set-up (transport_tcp.c) and the data path (transport_tcp_io.c).
 */
#ifndef RS_TRANSPORT_TCP_INTERNAL_H
#define RS_TRANSPORT_TCP_INTERNAL_H

#include "worker/transport_tcp.h"
#include "common/clock.h"

#include <stdatomic.h>

typedef struct tcp {
	rs_transport base;
	int *fd;              /* per peer; -1 for self */
	int wake[2];          /* abort writes here to interrupt poll */
	atomic_int aborted;
	int broken;           /* a failed call leaves the mesh unusable */
	uint64_t seq;         /* exchanges so far: both ends count the same */
	int borrowed;         /* a subset view: the connections are its parent's */
} tcp;

/* Say what went wrong in t's error (printf-style) and mark the mesh unusable; returns st. */
rs_status rs__tcp_fail(tcp *t, rs_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The milliseconds left before deadline (rs_now_ms's clock), for poll. */
static inline int rs__tcp_left_ms(int64_t deadline)
{
	int64_t l = deadline - rs_now_ms();
	return l < 0 ? 0 : l > 1000000 ? 1000000 : (int)l;
}

/* transport.h's exchange. */
rs_status rs__tcp_exchange(rs_transport *base, const rs_xfer *sends, int nsends, const rs_xfer *recvs, int nrecvs);

#endif
