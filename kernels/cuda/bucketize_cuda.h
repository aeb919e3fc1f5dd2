/*
 * bucketize_cuda.h - the input all-to-all's bucketize and permute on the
 * device: one feature's jagged ids grouped by the rank that owns their rows
 * (TorchRec's block_bucketize_sparse_features, for row ranges of any sizes).
 *
 * Rows [row_start[k], row_start[k + 1]) belong to rank owner[k], for k <
 * nranges (row_start sorted, row_start[0] = 0, row_start[nranges] = the
 * table's rows; a rank may own several ranges, as after incremental
 * replans). Then:
 *   out_ids[nids]      the ids, owner by owner (rank order), each owner's in
 *                      input order (bag by bag, in bag order)
 *   out_lengths[nowners * nbags]
 *                      per owner and bag, how many of the bag's ids go there
 *                      (the jagged lengths each owner receives)
 *   perm[nids]         where input id j went in out_ids, to scatter the
 *                      answers and gradients back
 *   owner_counts[nowners]  (host) ids per owner: the all-to-all's sizes
 * Every array but owner_counts is device memory; the call waits for the
 * stream (the counts are needed on the host). An id outside [0, rows) is
 * RS_EINVAL after the call (it is counted nowhere; the outputs are then
 * undefined).
 */
#ifndef RS_BUCKETIZE_CUDA_H
#define RS_BUCKETIZE_CUDA_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/status.h"

rs_status rs_cuda_bucketize(const int32_t *offsets, int32_t nbags, const int64_t *ids, int64_t nids,
			    const int64_t *row_start, const int32_t *owner, int32_t nranges, int32_t nowners,
			    int64_t *out_ids, int32_t *out_lengths, int32_t *perm, int64_t *owner_counts,
			    cudaStream_t stream, rs_err *err);

#ifdef __cplusplus
}
#endif

#endif
