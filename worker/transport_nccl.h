/*
 * transport_nccl.h - the NCCL backend of transport.h: one NCCL communicator
 * per generation between the GPUs of its members, one process per GPU.
 * Built only where the CUDA toolkit and NCCL are (build/lib/librowshift_cuda.a).
 *
 * Set-up: rank 0 of a generation makes an ncclUniqueId
 * (rs_nccl_unique_id) and every member calls rs_nccl_transport_create with
 * it; rs_nccl_transport_bootstrap does both, handing the id out over the
 * generation's TCP transport (what the worker uses). The communicator is non-blocking
 * (ncclConfig_t.blocking = 0): every NCCL call returns at once and the
 * transport polls ncclCommGetAsyncError and the stream, bounded by the
 * timeout; a dead or hung peer, an NCCL error or rs_transport_abort makes
 * the transport call ncclCommAbort and fail the call (RS_EPEER, RS_ENCCL,
 * RS_ETIMEDOUT, RS_EABORTED) instead of hanging.
 *
 * Buffers: exchange takes device memory (used in place by ncclSend/ncclRecv,
 * no copy) or host memory (staged through a device buffer the transport
 * keeps), told apart with cudaPointerGetAttributes, so the conformance suite
 * and the host-side collectives of transport.c work unchanged. A message to
 * self is an NCCL send/receive to self. Receive lengths are the caller's
 * promise (NCCL does not frame messages): a mismatch is not detected.
 *
 * rs_transport_allreduce_sum (transport.c, built on exchange) keeps its
 * rank-order guarantee on this backend. rs_nccl_allreduce_sum is the native
 * ncclAllReduce: bit-identical on every rank but summed in NCCL's order.
 *
 * Subset views (rs_transport_subset) share the parent's communicator and
 * stream: point-to-point traffic among ranks < n needs no new communicator.
 * rs_nccl_transport_split makes a real one (ncclCommSplit), collectively
 * over every rank of the parent.
 */
#ifndef RS_TRANSPORT_NCCL_H
#define RS_TRANSPORT_NCCL_H

#include "worker/transport.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

typedef struct rs_nccl_config {
	int32_t rank, world;
	ncclUniqueId id;       /* this generation's id, the same on every rank */
	int device;            /* CUDA device ordinal, or -1 for the current device */
	cudaStream_t stream;   /* stream the transfers are queued on, or NULL: the transport makes its own */
	uint64_t generation;   /* for messages only */
	int timeout_ms;        /* bound on every wait, set-up included; 0 means 30000 */
} rs_nccl_config;

/* A fresh unique id (rank 0 of a generation calls this and hands it out). */
rs_status rs_nccl_unique_id(ncclUniqueId *id, rs_err *err);

/*
 * The worker's way in: collective over every rank of `boot` (the
 * generation's TCP transport, whose peers joined with the join token): rank
 * 0 makes the unique id and sends it to the others over boot, then every
 * rank creates its communicator on `device`. On success *out owns boot
 * (destroyed and aborted with it); on failure boot is still the caller's.
 */
rs_status rs_nccl_transport_bootstrap(rs_transport *boot, int device, uint64_t generation, int timeout_ms,
				      rs_transport **out, rs_err *err);

/*
 * Create this rank's communicator and wait (bounded) until every rank has
 * joined. RS_ETIMEDOUT when some rank did not join in time, RS_EINVAL for a
 * bad config, RS_ECUDA / RS_ENCCL for a failed call; err names the call.
 */
rs_status rs_nccl_transport_create(const rs_nccl_config *cfg, rs_transport **out, rs_err *err);

/*
 * In-place sum of n floats (device or host memory) with ncclAllReduce. On a
 * subset view: RS_EUNSUPPORTED (the communicator has other ranks; use
 * rs_transport_allreduce_sum or a split).
 */
rs_status rs_nccl_allreduce_sum(rs_transport *t, float *buf, size_t n);

/*
 * Collective over every rank of t: ranks < n get a transport over a new
 * communicator of ranks 0..n-1 in *out, the others get NULL. t stays usable
 * and must outlive nothing: the two are independent.
 */
rs_status rs_nccl_transport_split(rs_transport *t, int32_t n, rs_transport **out);

#endif
