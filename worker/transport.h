/*
 * transport.h - how workers move bytes to each other, for training (the
 * input and output all-to-alls, the dense all-reduce) and for migration
 * (rows sent to their new owners). One interface, several backends: TCP
 * between processes (transport_tcp.c) and NCCL between GPUs (transport_nccl.c). All
 * backends pass the same conformance suite (tests/unit/transport_conformance.c).
 *
 * A transport connects the members of one generation, ranks 0..world-1.
 * Every operation is collective-style: all ranks involved call it in the
 * same order. Every wait is bounded by the transport's timeout; a peer that
 * dies or closes makes the call fail with RS_EPEER instead of hanging, a
 * wait past the deadline fails with RS_ETIMEDOUT, and after rs_transport_abort
 * every call fails with RS_EABORTED (over TCP, a peer's wait on this rank
 * fails at once with RS_EPEER: the connections are shut down). After any
 * failure the transport is unusable: destroy it (the coordinator then plans
 * the next generation).
 * rs_transport_error() says what went wrong, naming the peer.
 *
 * One thread uses a transport at a time; rs_transport_abort may be called
 * from any other thread or from a signal handler.
 */
#ifndef RS_TRANSPORT_H
#define RS_TRANSPORT_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rs_transport rs_transport;

/*
 * One message of a grouped exchange: len bytes to or from peer. With crc
 * set, the transport extends *crc (CRC-32C, rs_crc32c) over the message's
 * bytes: a send's as they go out, a receive's once they landed. TCP hashes
 * each piece of at most 1 MiB right after it moves, while it is in cache,
 * instead of a pass of its own over the whole buffer before or after; NCCL
 * hashes each message on the host, a send before it is posted, a receive
 * after the exchange. *crc is final when the message is done: a later
 * message to the same peer may carry it (its bytes are read when it
 * starts). The bytes must be readable by the host (NCCL fails a crc on
 * device-only memory with RS_EINVAL).
 */
typedef struct rs_xfer {
	int32_t peer;
	void *buf;
	size_t len;
	uint32_t *crc;
} rs_xfer;

typedef struct rs_transport_ops {
	const char *name;
	/*
	 * Post every send and receive, then wait for all of them: messages to
	 * one peer are delivered in posting order, and a receive must be posted
	 * with exactly the length the peer sends. Sends and receives progress
	 * together, so any pattern completes (no deadlock on full buffers).
	 * A message to self is a copy.
	 */
	rs_status (*exchange)(rs_transport *t, const rs_xfer *sends, int nsends, const rs_xfer *recvs, int nrecvs);
	void (*abort)(rs_transport *t);
	void (*destroy)(rs_transport *t);
	/*
	 * A transport over ranks 0..n-1 of t, sharing its connections (as
	 * ncclCommSplit does): how the union of old and new members of a
	 * resharding becomes the new world. The caller's rank must be < n; t
	 * must outlive the view and not be used while the view is. Aborting
	 * the view shuts down the connections it shares: t is then of no use.
	 */
	rs_status (*subset)(rs_transport *t, int32_t n, rs_transport **out);
} rs_transport_ops;

struct rs_transport {
	const rs_transport_ops *ops;
	int32_t rank, world;
	int timeout_ms; /* the bound on each call's waits (rs_transport_timeout) */
	char error[256];
};

static inline rs_status rs_transport_exchange(rs_transport *t, const rs_xfer *sends, int nsends,
					      const rs_xfer *recvs, int nrecvs)
{
	return t->ops->exchange(t, sends, nsends, recvs, nrecvs);
}

static inline void rs_transport_abort(rs_transport *t) { t->ops->abort(t); }

static inline void rs_transport_destroy(rs_transport *t)
{
	if (t)
		t->ops->destroy(t);
}

/* The bound on each later call's waits: ms > 0 sets it; returns the one before (ms 0: only reads it). */
static inline int rs_transport_timeout(rs_transport *t, int ms)
{
	int was = t->timeout_ms;
	t->timeout_ms = ms > 0 ? ms : was;
	return was;
}

static inline const char *rs_transport_error(const rs_transport *t) { return t->error; }

static inline rs_status rs_transport_subset(rs_transport *t, int32_t n, rs_transport **out)
{
	return t->ops->subset(t, n, out);
}

/*
 * Tests only: the next checksummed message (rs_xfer.crc) this process
 * receives gets one bit flipped once it landed, before it is hashed, as if
 * damaged on the way; then this goes back to 0. Every backend honours it.
 */
extern int rs_transport_damage_for_tests;

/* ---- collectives built on exchange (transport.c) -------------------------------- */

/*
 * All-to-all with variable sizes: send_counts[p] bytes from sendbuf (packed
 * in rank order) go to p; recv_counts[p] bytes from p land in recvbuf (packed
 * in rank order). Both sides must agree on every count: exchange the counts
 * first with rs_transport_alltoall_counts when they are not known.
 */
rs_status rs_transport_alltoallv(rs_transport *t, const void *sendbuf, const size_t *send_counts, void *recvbuf,
				 const size_t *recv_counts);

/* recv_counts[p] = the send_counts[me] of every peer p. */
rs_status rs_transport_alltoall_counts(rs_transport *t, const size_t *send_counts, size_t *recv_counts);

/*
 * In-place sum of n floats over all ranks. The result is bit-identical on
 * every rank and does not depend on timing: each element is summed in rank
 * order 0, 1, ..., world-1 (a reduce-scatter then an all-gather, so each
 * rank sends about 2n floats whatever the world size).
 */
rs_status rs_transport_allreduce_sum(rs_transport *t, float *buf, size_t n);

/* The same for n int64s (wrapping): exact, so the result does not depend on the order either. */
rs_status rs_transport_allreduce_i64(rs_transport *t, int64_t *buf, size_t n);

/* Every rank's len bytes, in rank order, into all (world * len bytes). */
rs_status rs_transport_allgather(rs_transport *t, const void *mine, size_t len, void *all);

rs_status rs_transport_barrier(rs_transport *t);

#endif
