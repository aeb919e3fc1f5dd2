/*
 * zch_cuda.h - the ZCH table (kernels/zch.h) on the device: the same
 * per-bucket layout (slot IDs, last step seen, LFU count, used-slot count,
 * decay epoch, open-addressing index), in device memory, with find-or-insert
 * and find as CUDA kernels queued on a caller's stream. kernels/zch.c is the
 * reference and the results are its own, bit for bit: the same slots, the
 * same fresh-slot list in the same order, the same statistics and the same
 * table state after every call. Plain C11: host code includes this header
 * and links build/lib/librowshift_cuda.a with -lcudart.
 *
 * How the device matches a sequential CPU loop: what the CPU decides for an
 * ID depends only on the state of that ID's bucket and on the earlier IDs of
 * the batch in the same bucket. A kernel computes each ID's bucket, a stable
 * radix sort groups the batch positions by bucket keeping their order, and
 * one thread per distinct bucket then replays the CPU loop over that
 * bucket's IDs. Fresh slots are compacted in batch order.
 *
 * Differences from the CPU functions:
 *  - ids, slots and fresh are DEVICE arrays; *nfresh is host memory.
 *  - Calls wait for their stream before they return (the host needs the
 *    fresh count and whether an ID was in a bucket this table does not own).
 *  - RS_EINVAL for bad arguments, at the call, with err; RS_ECUDA when a
 *    CUDA call fails (err names the call, file and line; the call waits for
 *    its stream before it returns). RS_ENOTFOUND, as on the CPU, leaves err
 *    alone.
 *  - A table lives on the device that was current at rs_cuda_zch_create and
 *    is used with that device current, by one host thread and one stream at
 *    a time (its scratch buffers are shared by its calls).
 *  - The owned buckets are fixed at creation; a table starts empty.
 */
#ifndef RS_ZCH_CUDA_H
#define RS_ZCH_CUDA_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/types.h"
#include "common/status.h"
#include "kernels/zch.h"

typedef struct rs_cuda_zch rs_cuda_zch;

/*
 * A table for cfg's geometry (checked as rs_zch_create checks it) owning the
 * nbuckets_owned buckets listed in buckets (each < cfg->buckets; a bucket
 * listed twice is owned once), all empty, on the current device. Device
 * memory: per owned bucket, 16 bytes per slot and 4 per index entry (a power
 * of two >= 2 slots per bucket), plus 4 bytes per bucket of cfg for the
 * bucket -> block map. The call waits for the device.
 */
rs_status rs_cuda_zch_create(const rs_zch_config *cfg, const uint32_t *buckets, uint32_t nbuckets_owned,
			     rs_cuda_zch **out, rs_err *err);
void rs_cuda_zch_destroy(rs_cuda_zch *z);

uint32_t rs_cuda_zch_buckets(const rs_cuda_zch *z);
uint32_t rs_cuda_zch_slots_per_bucket(const rs_cuda_zch *z);
uint32_t rs_cuda_zch_owned(const rs_cuda_zch *z);  /* number of owned buckets */
int rs_cuda_zch_owns(const rs_cuda_zch *z, uint32_t bucket);

/*
 * rs_zch_find_or_insert on the device: slots[i] = the row of ids[i] (n
 * device entries each, n in [0, INT32_MAX]), inserting, evicting and
 * marking IDs seen at `step` exactly as the CPU does. When fresh is non-NULL
 * (device, capacity n) the slots given to new IDs are written to
 * fresh[0..*nfresh) in batch order and nfresh must be non-NULL; when fresh
 * is NULL, *nfresh (if given) is 0. RS_ENOTFOUND when some ID's bucket is
 * not owned (its slot is -1), after processing the rest.
 */
rs_status rs_cuda_zch_find_or_insert(rs_cuda_zch *z, const uint64_t *ids, int64_t n, uint32_t step, int64_t *slots,
				     int64_t *fresh, int64_t *nfresh, cudaStream_t stream, rs_err *err);

/*
 * rs_zch_find on the device: slots[i] = the row of ids[i] or -1, counting
 * misses; RS_ENOTFOUND when some ID's bucket is not owned.
 */
rs_status rs_cuda_zch_find(rs_cuda_zch *z, const uint64_t *ids, int64_t n, int64_t *slots, cudaStream_t stream,
			   rs_err *err);

/* The statistics, as rs_zch_get_stats gives them. Waits for stream. */
rs_status rs_cuda_zch_get_stats(rs_cuda_zch *z, rs_zch_stats *stats, cudaStream_t stream, rs_err *err);

/*
 * Copy the state of one owned bucket to the host: its slots' IDs, last step
 * seen + 1 (0: free slot) and LFU counts (host arrays of slots-per-bucket
 * entries each), the number of used slots (slots [0, *nused) are live) and
 * the LFU decay epoch, laid out as rs_zch_bucket_save writes them. Any
 * output may be NULL. RS_EINVAL for a bucket this table does not own.
 * Waits for stream.
 */
rs_status rs_cuda_zch_download(rs_cuda_zch *z, uint32_t bucket, uint64_t *ids, uint32_t *last, uint32_t *count,
			       uint32_t *nused, uint32_t *epoch, cudaStream_t stream, rs_err *err);

#ifdef __cplusplus
}
#endif

#endif
