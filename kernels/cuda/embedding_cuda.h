/*
 * embedding_cuda.h - the CUDA embedding-bag kernels: the same operations and
 * numerics as kernels/embedding.h (embedding_cpu.c is the reference), on
 * device memory, queued on a caller's stream. Plain C11: host code includes
 * this header and links build/lib/librowshift_cuda.a with -lcudart.
 *
 * Arguments mirror the CPU functions, with these differences:
 *  - Every array (the shard's weights and state, offsets, ids, outputs,
 *    gradients, row lists, packed buffers) is DEVICE memory. The shard and
 *    optimizer structs themselves are host structs, read at the call.
 *  - Calls only queue work on `stream` and return at once. RS_EINVAL,
 *    RS_ENOSPACE and RS_EUNSUPPORTED for bad arguments the host can see
 *    (sizes, counts, dim) are returned at the call; RS_ECUDA when a CUDA
 *    call fails (err says which call, file and line).
 *  - Bad ids or rows, which only the device sees, are flagged in the
 *    workspace: rs_cuda_emb_ws_check() waits for the stream and returns
 *    RS_EINVAL if any call since the last check met one. An id outside
 *    [-1, nrows) is treated like -1 (zero contribution, no update); pack and
 *    unpack with a row outside the shard copy nothing.
 *  - The ids of a call must be counted on the host: nids = offsets[nbags]
 *    (the length of ids), at most the workspace's max_ids.
 *
 * Numerics are the CPU's, bit for bit where the CPU is deterministic: each
 * output element is summed in id order, duplicate rows of a batch are
 * gathered by a stable sort and their gradients added in bag order (one
 * block per distinct row, so no update is lost and no atomics are used),
 * fp32 arithmetic is done without fused multiply-adds, and conversions
 * round to nearest even.
 *
 * Threads: a workspace belongs to one stream at a time.
 */
#ifndef RS_EMBEDDING_CUDA_H
#define RS_EMBEDDING_CUDA_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/types.h"
#include "common/status.h"
#include "kernels/embedding.h"

/* Device scratch for the kernels: sort buffers, the distinct-row gradient, the error flags. */
typedef struct rs_cuda_emb_ws rs_cuda_emb_ws;

/*
 * A workspace for batches of at most max_ids ids and shards of width at
 * most max_dim, on the current device. Allocates about 40 bytes per id now;
 * the gradient buffer of rs_cuda_emb_grad_reduce (max_ids * max_dim floats)
 * is allocated on its first use.
 */
rs_status rs_cuda_emb_ws_create(int64_t max_ids, int32_t max_dim, rs_cuda_emb_ws **out, rs_err *err);
void rs_cuda_emb_ws_destroy(rs_cuda_emb_ws *ws);

/*
 * Wait for stream, then report the bad ids or rows met since the last check:
 * RS_EINVAL with err naming the first kind met, RS_OK otherwise. Clears the flags.
 */
rs_status rs_cuda_emb_ws_check(rs_cuda_emb_ws *ws, cudaStream_t stream, rs_err *err);

/* out[i*out_stride .. +dim) = pooled rows of bag i (rs_emb_forward). */
rs_status rs_cuda_emb_forward(const rs_emb_shard *s, const int32_t *offsets, int32_t nbags, const int64_t *ids,
			      int64_t nids, rs_pooling pooling, float *out, int64_t out_stride, rs_cuda_emb_ws *ws,
			      cudaStream_t stream, rs_err *err);

/*
 * Fused backward (rs_emb_backward): the gradient of every distinct row of
 * the batch, then one optimizer update per distinct row. To combine
 * several sources (the row-wise shard's peers), concatenate their bags in
 * source order: the sums are then those of rs_emb_grad_accumulate over the
 * sources in that order.
 */
rs_status rs_cuda_emb_backward(rs_emb_shard *s, const int32_t *offsets, int32_t nbags, const int64_t *ids,
			       int64_t nids, rs_pooling pooling, const float *grad_out, int64_t grad_stride,
			       const rs_optimizer_config *opt, int64_t step, rs_cuda_emb_ws *ws, cudaStream_t stream,
			       rs_err *err);

/*
 * The first half alone (rs_emb_grad_accumulate into an empty gradient):
 * on return (once stream reaches it) *rows points at the distinct rows in
 * ascending order, *grad at their gradients (row k at grad[k*dim]), *n_dev
 * at their count, all device memory owned by ws and valid until its next
 * call. nrows is the shard's row count (ids at or past it are bad).
 */
rs_status rs_cuda_emb_grad_reduce(int64_t nrows, int32_t dim, const int32_t *offsets, int32_t nbags,
				  const int64_t *ids, int64_t nids, rs_pooling pooling, const float *grad_out,
				  int64_t grad_stride, rs_cuda_emb_ws *ws, cudaStream_t stream, const int64_t **rows,
				  const float **grad, const int32_t **n_dev, rs_err *err);

/*
 * The second half (rs_emb_apply): one update of row rows[k] by grad[k*dim ..
 * +dim) for k < *n_dev, with at most max_n rows. Rows must be distinct.
 */
rs_status rs_cuda_emb_apply(rs_emb_shard *s, const int64_t *rows, const float *grad, const int32_t *n_dev,
			    int64_t max_n, const rs_optimizer_config *opt, int64_t step, cudaStream_t stream,
			    rs_err *err);

/*
 * rs_emb_pack_rows / rs_emb_unpack_rows on the device, in the same layout
 * (n rows' weights, then their optimizer state), so a packed buffer is
 * byte-identical to the CPU's and either side can unpack the other's.
 * RS_ENOSPACE at the call when n * rs_emb_packed_row_bytes exceeds cap.
 */
rs_status rs_cuda_emb_pack_rows(const rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n, void *buf,
				size_t cap, rs_cuda_emb_ws *ws, cudaStream_t stream, rs_err *err);
rs_status rs_cuda_emb_unpack_rows(rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n,
				  const void *buf, size_t len, rs_cuda_emb_ws *ws, cudaStream_t stream, rs_err *err);

#ifdef __cplusplus
}
#endif

#endif
