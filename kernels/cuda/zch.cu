/*
 * zch.cu - the ZCH table on the device (see zch_cuda.h); kernels/zch.c is
 * the reference, and this file mirrors its layout and its loop.
 *
 * find-or-insert, for a batch of n IDs:
 *   1. bucket_kernel: every position i gets the key bucket_of(ids[i]) (the
 *      CPU's hash, __umul64hi for the 128-bit product) and the value i;
 *   2. a stable radix sort of the (bucket, position) pairs groups the batch
 *      by bucket keeping batch order inside a bucket;
 *   3. run-length encoding and an exclusive scan give each distinct bucket
 *      its segment of positions;
 *   4. run_kernel: one thread per distinct bucket replays zch.c's loop over
 *      that bucket's IDs in batch order (LFU decay, probe, insert, victim,
 *      backward-shift deletion, count and last-step updates, overflow),
 *      writing slots[i] and a fresh flag per position. The CPU's decisions
 *      for an ID depend only on its bucket's state, so the slots are the
 *      CPU's; statistics are sums, added with atomics;
 *   5. DeviceSelect::Flagged compacts the fresh positions' slots in position
 *      order, which is the order in which the CPU appends them.
 * find: one thread per position, read-only probes, misses counted.
 *
 * The per-bucket code is __host__ __device__ so that it can be run against
 * zch.c on a machine without a device.
 */
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/zch_cuda.h"
#include "kernels/zch_hash.h"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_THREADS 256
/* run_kernel's threads each replay a whole bucket: small blocks spread them over the SMs */
#define RUN_THREADS 64
/* the first scratch capacity, in IDs */
#define MIN_CAP 1024

enum { ST_INSERTS, ST_HITS, ST_EVICTIONS, ST_MISSES, ST_OVERFLOWS, ST_COUNT };

/* Device-side counters and the results the host reads back after a call. */
struct zch_scalars {
	unsigned long long stats[ST_COUNT]; /* ST_*: rs_zch_stats' fields */
	int64_t nfresh;                     /* fresh slots selected by the last find-or-insert */
	int32_t nruns;                      /* distinct buckets of the last batch */
	uint32_t notfound;                  /* nonzero: an ID of the last call had a bucket not owned */
};

/* The table's geometry and device arrays, as the kernels get them (by value). */
struct zch_dev {
	uint32_t nbuckets, spb;   /* buckets, slots per bucket */
	uint32_t imask;           /* index entries per block - 1 (a power of two >= 2 * spb, minus one) */
	uint32_t decay_steps;     /* LFU counts halve every decay_steps steps */
	int lfu;                  /* eviction: 1 LFU, 0 LRU */
	const int32_t *local;     /* per bucket: its block, or -1 when not owned */
	uint64_t *ids;            /* per block, spb: the slot's ID */
	uint32_t *last;           /* per block, spb: last step seen + 1; 0 = free slot */
	uint32_t *count;          /* per block, spb: LFU count */
	uint32_t *nused;          /* per block: slots [0, nused) are taken */
	uint32_t *epoch;          /* per block: LFU decay epoch applied */
	uint32_t *index;          /* per block, imask + 1: slot + 1; 0 = empty */
};

struct rs_cuda_zch {
	zch_dev d;
	uint32_t nlocal;          /* owned buckets (blocks) */
	int end_bit;              /* bits of the largest bucket index, for the radix sort */
	int sms;                  /* multiprocessors of the device */
	int32_t *h_local;         /* host copy of d.local */
	zch_scalars *sc;          /* device */
	zch_scalars *h_sc;        /* pinned host copy */
	/* scratch for batches of up to cap IDs, grown on demand */
	int64_t cap;
	uint32_t *keys_in, *keys_out, *uniq;
	int32_t *pos_in, *pos_out, *counts, *starts;
	unsigned char *flags;     /* per position: its slot is fresh */
	void *tmp;                /* cub's scratch */
	size_t tmp_bytes;
};

/* ---- the hash and one bucket's operations, zch.c's code ----------------------------------- */

/* rs_zch_bucket_of: the high 64 bits of the 128-bit product hash * buckets */
__host__ __device__ static inline uint32_t bucket_of(uint64_t id, uint32_t nbuckets)
{
	uint64_t h = hash_id(id);
#ifdef __CUDA_ARCH__
	return (uint32_t)__umul64hi((unsigned long long)h, (unsigned long long)nbuckets);
#else
	return (uint32_t)(((unsigned __int128)h * nbuckets) >> 64);
#endif
}

__host__ __device__ static inline uint32_t home_of(const zch_dev &z, uint64_t id)
{
	return (uint32_t)(mix64(hash_id(id)) & z.imask);
}

/* Index position holding id, or the empty position where it would go; *found says which. */
__host__ __device__ static inline uint32_t probe(const zch_dev &z, const uint32_t *index, const uint64_t *ids,
						 uint64_t id, bool *found)
{
	uint32_t p = home_of(z, id);
	for (;;) {
		uint32_t e = index[p];
		if (e == 0) {
			*found = false;
			return p;
		}
		if (ids[e - 1] == id) {
			*found = true;
			return p;
		}
		p = (p + 1) & z.imask;
	}
}

/* Backward-shift deletion of index position i (linear probing, no tombstones). */
__host__ __device__ static inline void index_delete(const zch_dev &z, uint32_t *index, const uint64_t *ids,
						    uint32_t i)
{
	uint32_t j = i;
	for (;;) {
		j = (j + 1) & z.imask;
		if (index[j] == 0)
			break;
		uint32_t k = home_of(z, ids[index[j] - 1]);
		/* move j's entry back to i unless its home lies cyclically in (i, j] */
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (!stays) {
			index[i] = index[j];
			i = j;
		}
	}
	index[i] = 0;
}

/* The slot to evict from a full block at step, or -1 when every slot was seen this step. */
__host__ __device__ static inline int64_t pick_victim(const zch_dev &z, const uint32_t *last,
						      const uint32_t *count, uint32_t step)
{
	int64_t best = -1;
	uint32_t blast = 0, bcount = 0;
	for (uint32_t s = 0; s < z.spb; s++) {
		uint32_t ls = last[s], cs = count[s];
		if (ls == step + 1)
			continue; /* seen this step: pinned */
		bool better = best < 0 || (z.lfu ? (cs < bcount || (cs == bcount && ls < blast)) : ls < blast);
		if (better) {
			best = s;
			blast = ls;
			bcount = cs;
		}
	}
	return best;
}

/*
 * zch.c's find-or-insert loop over the positions pos[beg..end) of the batch,
 * all in bucket b, in that order. cnt gets the ST_* counts; *notfound = 1
 * when b is not owned.
 */
__host__ __device__ static inline void replay_bucket(const zch_dev &z, uint32_t b, const uint64_t *ids,
						     const int32_t *pos, int32_t beg, int32_t end, uint32_t step,
						     int64_t *slots, unsigned char *flags, unsigned long long *cnt,
						     uint32_t *notfound)
{
	int32_t l = z.local[b];
	if (l < 0) {
		for (int32_t j = beg; j < end; j++) {
			slots[pos[j]] = -1;
			flags[pos[j]] = 0;
		}
		*notfound = 1;
		return;
	}
	size_t S = z.spb;
	uint64_t *bids = z.ids + (size_t)l * S;
	uint32_t *last = z.last + (size_t)l * S, *count = z.count + (size_t)l * S;
	uint32_t *index = z.index + (size_t)l * ((size_t)z.imask + 1);
	uint32_t nused = z.nused[l];
	if (z.lfu) { /* lfu_decay: the CPU runs it before every ID of the bucket; only the first can change anything */
		uint32_t e = step / z.decay_steps;
		if (e > z.epoch[l]) {
			uint32_t shift = e - z.epoch[l];
			for (uint32_t s = 0; s < nused; s++)
				count[s] = shift >= 32 ? 0 : count[s] >> shift;
			z.epoch[l] = e;
		}
	}
	for (int32_t j = beg; j < end; j++) {
		int32_t i = pos[j];
		uint64_t id = ids[i];
		bool found;
		uint32_t p = probe(z, index, bids, id, &found);
		uint32_t s;
		unsigned char fresh = 0;
		if (found) {
			s = index[p] - 1;
			cnt[ST_HITS]++;
		} else {
			if (nused < z.spb) {
				s = nused++;
				cnt[ST_INSERTS]++;
			} else {
				int64_t v = pick_victim(z, last, count, step);
				if (v < 0) {
					slots[i] = -1;
					flags[i] = 0;
					cnt[ST_OVERFLOWS]++;
					continue;
				}
				s = (uint32_t)v;
				bool vf;
				index_delete(z, index, bids, probe(z, index, bids, bids[s], &vf));
				p = probe(z, index, bids, id, &found); /* the hole may have moved */
				cnt[ST_EVICTIONS]++;
			}
			bids[s] = id;
			count[s] = 0;
			index[p] = s + 1;
			fresh = 1;
		}
		last[s] = step + 1;
		if (count[s] != UINT32_MAX)
			count[s]++;
		slots[i] = (int64_t)b * (int64_t)z.spb + s;
		flags[i] = fresh;
	}
	z.nused[l] = nused;
}

/* rs_zch_find for one ID: its slot or -1; *miss = 1 when -1, *notfound = 1 when its bucket is not owned. */
__host__ __device__ static inline int64_t find_one(const zch_dev &z, uint64_t id, unsigned long long *miss,
						   uint32_t *notfound)
{
	uint32_t b = bucket_of(id, z.nbuckets);
	int32_t l = z.local[b];
	if (l < 0) {
		*notfound = 1;
		(*miss)++;
		return -1;
	}
	const uint64_t *bids = z.ids + (size_t)l * z.spb;
	const uint32_t *index = z.index + (size_t)l * ((size_t)z.imask + 1);
	bool found;
	uint32_t p = probe(z, index, bids, id, &found);
	if (!found) {
		(*miss)++;
		return -1;
	}
	return (int64_t)b * (int64_t)z.spb + (index[p] - 1);
}

/* ---- kernels ------------------------------------------------------------------------------ */

__global__ void bucket_kernel(const uint64_t *__restrict__ ids, int64_t n, uint32_t nbuckets, uint32_t *keys,
			      int32_t *pos)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		keys[i] = bucket_of(ids[i], nbuckets);
		pos[i] = (int32_t)i;
	}
}

/* One thread per distinct bucket of the batch (grid-stride over sc->nruns runs). */
__global__ void run_kernel(zch_dev z, const uint64_t *__restrict__ ids, const int32_t *__restrict__ pos,
			   const uint32_t *__restrict__ uniq, const int32_t *__restrict__ counts,
			   const int32_t *__restrict__ starts, uint32_t step, int64_t *slots, unsigned char *flags,
			   zch_scalars *sc)
{
	int64_t nruns = sc->nruns;
	unsigned long long cnt[ST_COUNT] = {0, 0, 0, 0, 0};
	uint32_t notfound = 0;
	for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < nruns; k += (int64_t)gridDim.x * blockDim.x)
		replay_bucket(z, uniq[k], ids, pos, starts[k], starts[k] + counts[k], step, slots, flags, cnt, &notfound);
	for (int c = 0; c < ST_COUNT; c++)
		if (cnt[c])
			atomicAdd(&sc->stats[c], cnt[c]);
	if (notfound)
		atomicOr(&sc->notfound, 1u);
}

__global__ void find_kernel(zch_dev z, const uint64_t *__restrict__ ids, int64_t n, int64_t *slots, zch_scalars *sc)
{
	unsigned long long miss = 0;
	uint32_t notfound = 0;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		slots[i] = find_one(z, ids[i], &miss, &notfound);
	if (miss)
		atomicAdd(&sc->stats[ST_MISSES], miss);
	if (notfound)
		atomicOr(&sc->notfound, 1u);
}

/* ---- host side ---------------------------------------------------------------------------- */

static int grid_for(int64_t items, int per_block, int cap)
{
	int64_t g = (items + per_block - 1) / per_block;
	return (int)(g < 1 ? 1 : g > cap ? cap : g);
}

/* Each cub call in one place, so that the size query and the run instantiate the same templates. */
static cudaError_t cub_sort(const rs_cuda_zch *z, void *tmp, size_t &bytes, int n, cudaStream_t stream)
{
	return cub::DeviceRadixSort::SortPairs(tmp, bytes, z->keys_in, z->keys_out, z->pos_in, z->pos_out, n, 0,
					       z->end_bit, stream);
}

static cudaError_t cub_runs(const rs_cuda_zch *z, void *tmp, size_t &bytes, int n, cudaStream_t stream)
{
	return cub::DeviceRunLengthEncode::Encode(tmp, bytes, z->keys_out, z->uniq, z->counts, &z->sc->nruns, n, stream);
}

static cudaError_t cub_starts(const rs_cuda_zch *z, void *tmp, size_t &bytes, int n, cudaStream_t stream)
{
	return cub::DeviceScan::ExclusiveSum(tmp, bytes, z->counts, z->starts, n, stream);
}

static cudaError_t cub_fresh(const rs_cuda_zch *z, void *tmp, size_t &bytes, const int64_t *slots, int64_t *fresh,
			     int64_t n, cudaStream_t stream)
{
	return cub::DeviceSelect::Flagged(tmp, bytes, slots, (const unsigned char *)z->flags, fresh, &z->sc->nfresh, n,
					  stream);
}

static void scratch_free(rs_cuda_zch *z)
{
	void *dev[] = {z->tmp, z->flags, z->starts, z->counts, z->pos_out, z->pos_in, z->uniq, z->keys_out, z->keys_in};
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
		cudaError_t e = cudaFree(dev[i]);
		if (e != cudaSuccess)
			RS_WARN("cudaFree of the cuda zch scratch: %s", cudaGetErrorString(e));
	}
	z->tmp = NULL;
	z->flags = NULL;
	z->starts = z->counts = z->pos_out = z->pos_in = NULL;
	z->uniq = z->keys_out = z->keys_in = NULL;
	z->tmp_bytes = 0;
	z->cap = 0;
}

static rs_status scratch_alloc(rs_cuda_zch *z, int64_t cap, rs_err *err)
{
	size_t n = (size_t)cap, a = 0, b = 0, c = 0, d = 0;
	CUDACHECK(err, cudaMalloc((void **)&z->keys_in, n * sizeof(uint32_t)));
	CUDACHECK(err, cudaMalloc((void **)&z->keys_out, n * sizeof(uint32_t)));
	CUDACHECK(err, cudaMalloc((void **)&z->uniq, n * sizeof(uint32_t)));
	CUDACHECK(err, cudaMalloc((void **)&z->pos_in, n * sizeof(int32_t)));
	CUDACHECK(err, cudaMalloc((void **)&z->pos_out, n * sizeof(int32_t)));
	CUDACHECK(err, cudaMalloc((void **)&z->counts, n * sizeof(int32_t)));
	CUDACHECK(err, cudaMalloc((void **)&z->starts, n * sizeof(int32_t)));
	CUDACHECK(err, cudaMalloc((void **)&z->flags, n));
	CUDACHECK(err, cub_sort(z, NULL, a, (int)cap, 0));
	CUDACHECK(err, cub_runs(z, NULL, b, (int)cap, 0));
	CUDACHECK(err, cub_starts(z, NULL, c, (int)cap, 0));
	CUDACHECK(err, cub_fresh(z, NULL, d, NULL, NULL, cap, 0));
	z->tmp_bytes = a > b ? a : b;
	z->tmp_bytes = c > z->tmp_bytes ? c : z->tmp_bytes;
	z->tmp_bytes = d > z->tmp_bytes ? d : z->tmp_bytes;
	CUDACHECK(err, cudaMalloc(&z->tmp, z->tmp_bytes));
	z->cap = cap;
	return RS_OK;
}

/*
 * Scratch for batches of n IDs. Called only between calls, when no work of
 * this table is queued (every call waits for its stream), so the old buffers
 * are idle when they are freed.
 */
static rs_status scratch_reserve(rs_cuda_zch *z, int64_t n, rs_err *err)
{
	if (n <= z->cap)
		return RS_OK;
	int64_t cap = z->cap * 2 > MIN_CAP ? z->cap * 2 : MIN_CAP;
	if (cap < n)
		cap = n;
	if (cap > INT32_MAX)
		cap = INT32_MAX;
	scratch_free(z);
	rs_status st = scratch_alloc(z, cap, err);
	if (st != RS_OK)
		scratch_free(z);
	return st;
}

rs_status rs_cuda_zch_create(const rs_zch_config *cfg, const uint32_t *buckets, uint32_t nbuckets_owned,
			     rs_cuda_zch **out, rs_err *err)
{
	rs_status st = RS_OK;
	int dev = 0;
	if (out)
		*out = NULL;
	if (!cfg || !out || (nbuckets_owned > 0 && !buckets))
		return rs_err_set(err, RS_EINVAL, "cuda zch: create without a config, an output or the owned buckets");
	if (cfg->buckets == 0)
		return rs_err_set(err, RS_EINVAL, "cuda zch: the bucket count must be >= 1");
	if (cfg->slots == 0 || cfg->slots % cfg->buckets != 0)
		return rs_err_set(err, RS_EINVAL, "cuda zch: slots (%llu) must be a positive multiple of buckets (%u)",
				  (unsigned long long)cfg->slots, cfg->buckets);
	if (cfg->slots / cfg->buckets > (1u << 30))
		return rs_err_set(err, RS_EINVAL, "cuda zch: at most 2^30 slots per bucket");
	if ((unsigned)cfg->eviction > RS_EVICT_LFU)
		return rs_err_set(err, RS_EINVAL, "cuda zch: unknown eviction policy %d", (int)cfg->eviction);
	for (uint32_t k = 0; k < nbuckets_owned; k++)
		if (buckets[k] >= cfg->buckets)
			return rs_err_set(err, RS_EINVAL, "cuda zch: owned bucket %u, the table has %u", buckets[k],
					  cfg->buckets);

	rs_cuda_zch *z = (rs_cuda_zch *)calloc(1, sizeof(*z));
	if (!z)
		return rs_err_set(err, RS_ENOMEM, "cuda zch: out of host memory");
	z->d.nbuckets = cfg->buckets;
	z->d.spb = (uint32_t)(cfg->slots / cfg->buckets);
	uint32_t isize = 2; /* 2 is enough here: an eviction deletes before it inserts (the CPU's inserts first: 4) */
	while (isize < 2 * z->d.spb)
		isize <<= 1;
	z->d.imask = isize - 1;
	z->d.decay_steps = cfg->lfu_decay_steps ? cfg->lfu_decay_steps : 1000;
	z->d.lfu = cfg->eviction == RS_EVICT_LFU;
	z->end_bit = 1;
	while (z->end_bit < 32 && ((cfg->buckets - 1) >> z->end_bit) != 0)
		z->end_bit++;
	z->h_local = (int32_t *)malloc(sizeof(int32_t) * cfg->buckets);
	if (!z->h_local) {
		free(z);
		return rs_err_set(err, RS_ENOMEM, "cuda zch: out of host memory");
	}
	for (uint32_t b = 0; b < cfg->buckets; b++)
		z->h_local[b] = -1;
	for (uint32_t k = 0; k < nbuckets_owned; k++) /* blocks in the order rs_zch_add_bucket would give them */
		if (z->h_local[buckets[k]] < 0)
			z->h_local[buckets[k]] = (int32_t)z->nlocal++;

	size_t nl = z->nlocal ? z->nlocal : 1, S = z->d.spb, nb = cfg->buckets;
	int32_t *local = NULL;
	CUDACHECKGOTO(err, cudaGetDevice(&dev), st, fail);
	CUDACHECKGOTO(err, cudaDeviceGetAttribute(&z->sms, cudaDevAttrMultiProcessorCount, dev), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&local, nb * sizeof(int32_t)), st, fail);
	z->d.local = local;
	CUDACHECKGOTO(err, cudaMalloc((void **)&z->d.ids, nl * S * sizeof(uint64_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&z->d.last, nl * S * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&z->d.count, nl * S * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&z->d.nused, nl * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&z->d.epoch, nl * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&z->d.index, nl * isize * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&z->sc, sizeof(zch_scalars)), st, fail);
	CUDACHECKGOTO(err, cudaMallocHost((void **)&z->h_sc, sizeof(zch_scalars)), st, fail);
	CUDACHECKGOTO(err, cudaMemcpy(local, z->h_local, nb * sizeof(int32_t), cudaMemcpyHostToDevice), st, fail);
	CUDACHECKGOTO(err, cudaMemset(z->d.ids, 0, nl * S * sizeof(uint64_t)), st, fail);
	CUDACHECKGOTO(err, cudaMemset(z->d.last, 0, nl * S * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMemset(z->d.count, 0, nl * S * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMemset(z->d.nused, 0, nl * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMemset(z->d.epoch, 0, nl * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMemset(z->d.index, 0, nl * isize * sizeof(uint32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMemset(z->sc, 0, sizeof(zch_scalars)), st, fail);
	/* those ran on the legacy stream, which the caller's non-blocking streams do not wait for */
	CUDACHECKGOTO(err, cudaDeviceSynchronize(), st, fail);
	*out = z;
	return RS_OK;
fail:
	rs_cuda_zch_destroy(z);
	return st;
}

void rs_cuda_zch_destroy(rs_cuda_zch *z)
{
	if (!z)
		return;
	scratch_free(z);
	/* frees of NULL are no-ops; a failing free leaves nothing to do but log */
	void *dev[] = {z->sc, z->d.index, z->d.epoch, z->d.nused, z->d.count, z->d.last, z->d.ids, (void *)z->d.local};
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
		cudaError_t e = cudaFree(dev[i]);
		if (e != cudaSuccess)
			RS_WARN("cudaFree in rs_cuda_zch_destroy: %s", cudaGetErrorString(e));
	}
	if (z->h_sc) {
		cudaError_t e = cudaFreeHost(z->h_sc);
		if (e != cudaSuccess)
			RS_WARN("cudaFreeHost in rs_cuda_zch_destroy: %s", cudaGetErrorString(e));
	}
	free(z->h_local);
	free(z);
}

uint32_t rs_cuda_zch_buckets(const rs_cuda_zch *z) { return z->d.nbuckets; }
uint32_t rs_cuda_zch_slots_per_bucket(const rs_cuda_zch *z) { return z->d.spb; }
uint32_t rs_cuda_zch_owned(const rs_cuda_zch *z) { return z->nlocal; }

int rs_cuda_zch_owns(const rs_cuda_zch *z, uint32_t bucket)
{
	return bucket < z->d.nbuckets && z->h_local[bucket] >= 0;
}

/* After a failed call: let its queued work finish, so nothing still uses the scratch. */
static rs_status drained(rs_status st, cudaStream_t stream)
{
	cudaError_t e = cudaStreamSynchronize(stream);
	if (e != cudaSuccess)
		RS_WARN("cuda zch: waiting for the stream after a failed call: %s", cudaGetErrorString(e));
	return st;
}

/* Queue the whole find-or-insert, read the scalars back and wait. */
static rs_status find_or_insert_queue(rs_cuda_zch *z, const uint64_t *ids, int64_t n, uint32_t step, int64_t *slots,
				      int64_t *fresh, cudaStream_t stream, rs_err *err)
{
	size_t tmp;
	int ni = (int)n;
	int cap = z->sms * 32;
	CUDACHECK(err, cudaMemsetAsync(&z->sc->notfound, 0, sizeof(uint32_t), stream));
	bucket_kernel<<<grid_for(n, BLOCK_THREADS, cap), BLOCK_THREADS, 0, stream>>>(ids, n, z->d.nbuckets, z->keys_in,
										     z->pos_in);
	CUDACHECK_LAUNCH(err, "bucket_kernel");
	tmp = z->tmp_bytes;
	CUDACHECK(err, cub_sort(z, z->tmp, tmp, ni, stream));
	/* the scan reads every count, and only the first nruns are written */
	CUDACHECK(err, cudaMemsetAsync(z->counts, 0, (size_t)n * sizeof(int32_t), stream));
	tmp = z->tmp_bytes;
	CUDACHECK(err, cub_runs(z, z->tmp, tmp, ni, stream));
	tmp = z->tmp_bytes;
	CUDACHECK(err, cub_starts(z, z->tmp, tmp, ni, stream));
	int64_t most_runs = n < (int64_t)z->d.nbuckets ? n : (int64_t)z->d.nbuckets;
	run_kernel<<<grid_for(most_runs, RUN_THREADS, cap), RUN_THREADS, 0, stream>>>(
		z->d, ids, z->pos_out, z->uniq, z->counts, z->starts, step, slots, z->flags, z->sc);
	CUDACHECK_LAUNCH(err, "run_kernel");
	if (fresh) {
		tmp = z->tmp_bytes;
		CUDACHECK(err, cub_fresh(z, z->tmp, tmp, slots, fresh, n, stream));
	}
	CUDACHECK(err, cudaMemcpyAsync(z->h_sc, z->sc, sizeof(zch_scalars), cudaMemcpyDeviceToHost, stream));
	CUDACHECK(err, cudaStreamSynchronize(stream));
	return RS_OK;
}

rs_status rs_cuda_zch_find_or_insert(rs_cuda_zch *z, const uint64_t *ids, int64_t n, uint32_t step, int64_t *slots,
				     int64_t *fresh, int64_t *nfresh, cudaStream_t stream, rs_err *err)
{
	if (nfresh)
		*nfresh = 0;
	if (!z || n < 0 || n > INT32_MAX)
		return rs_err_set(err, RS_EINVAL, "cuda zch find_or_insert: %s%lld ids (0 to 2^31 - 1)",
				  z ? "" : "no table, ", (long long)n);
	if (n > 0 && (!ids || !slots))
		return rs_err_set(err, RS_EINVAL, "cuda zch find_or_insert: %lld ids without the ids or slots array",
				  (long long)n);
	if (fresh && !nfresh)
		return rs_err_set(err, RS_EINVAL, "cuda zch find_or_insert: a fresh array without nfresh");
	if (n == 0)
		return RS_OK;
	RSCHECK(scratch_reserve(z, n, err));
	rs_status st = find_or_insert_queue(z, ids, n, step, slots, fresh, stream, err);
	if (st != RS_OK)
		return drained(st, stream);
	if (fresh)
		*nfresh = z->h_sc->nfresh;
	return z->h_sc->notfound ? RS_ENOTFOUND : RS_OK;
}

static rs_status find_queue(rs_cuda_zch *z, const uint64_t *ids, int64_t n, int64_t *slots, cudaStream_t stream,
			    rs_err *err)
{
	CUDACHECK(err, cudaMemsetAsync(&z->sc->notfound, 0, sizeof(uint32_t), stream));
	find_kernel<<<grid_for(n, BLOCK_THREADS, z->sms * 32), BLOCK_THREADS, 0, stream>>>(z->d, ids, n, slots, z->sc);
	CUDACHECK_LAUNCH(err, "find_kernel");
	CUDACHECK(err, cudaMemcpyAsync(z->h_sc, z->sc, sizeof(zch_scalars), cudaMemcpyDeviceToHost, stream));
	CUDACHECK(err, cudaStreamSynchronize(stream));
	return RS_OK;
}

rs_status rs_cuda_zch_find(rs_cuda_zch *z, const uint64_t *ids, int64_t n, int64_t *slots, cudaStream_t stream,
			   rs_err *err)
{
	if (!z || n < 0 || n > INT32_MAX)
		return rs_err_set(err, RS_EINVAL, "cuda zch find: %s%lld ids (0 to 2^31 - 1)", z ? "" : "no table, ",
				  (long long)n);
	if (n > 0 && (!ids || !slots))
		return rs_err_set(err, RS_EINVAL, "cuda zch find: %lld ids without the ids or slots array", (long long)n);
	if (n == 0)
		return RS_OK;
	rs_status st = find_queue(z, ids, n, slots, stream, err);
	if (st != RS_OK)
		return drained(st, stream);
	return z->h_sc->notfound ? RS_ENOTFOUND : RS_OK;
}

rs_status rs_cuda_zch_get_stats(rs_cuda_zch *z, rs_zch_stats *stats, cudaStream_t stream, rs_err *err)
{
	if (!z || !stats)
		return rs_err_set(err, RS_EINVAL, "cuda zch stats: no table or no output");
	CUDACHECK(err, cudaMemcpyAsync(z->h_sc->stats, z->sc->stats, sizeof(z->h_sc->stats), cudaMemcpyDeviceToHost,
				       stream));
	CUDACHECK(err, cudaStreamSynchronize(stream));
	stats->inserts = z->h_sc->stats[ST_INSERTS];
	stats->hits = z->h_sc->stats[ST_HITS];
	stats->evictions = z->h_sc->stats[ST_EVICTIONS];
	stats->misses = z->h_sc->stats[ST_MISSES];
	stats->overflows = z->h_sc->stats[ST_OVERFLOWS];
	return RS_OK;
}

rs_status rs_cuda_zch_download(rs_cuda_zch *z, uint32_t bucket, uint64_t *ids, uint32_t *last, uint32_t *count,
			       uint32_t *nused, uint32_t *epoch, cudaStream_t stream, rs_err *err)
{
	if (!z)
		return rs_err_set(err, RS_EINVAL, "cuda zch download: no table");
	if (!rs_cuda_zch_owns(z, bucket))
		return rs_err_set(err, RS_EINVAL, "cuda zch download: bucket %u is not owned (the table has %u)", bucket,
				  z->d.nbuckets);
	size_t l = (size_t)z->h_local[bucket], S = z->d.spb;
	if (ids)
		CUDACHECK(err, cudaMemcpyAsync(ids, z->d.ids + l * S, S * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream));
	if (last)
		CUDACHECK(err, cudaMemcpyAsync(last, z->d.last + l * S, S * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
	if (count)
		CUDACHECK(err,
			  cudaMemcpyAsync(count, z->d.count + l * S, S * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
	if (nused)
		CUDACHECK(err, cudaMemcpyAsync(nused, z->d.nused + l, sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
	if (epoch)
		CUDACHECK(err, cudaMemcpyAsync(epoch, z->d.epoch + l, sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
	CUDACHECK(err, cudaStreamSynchronize(stream));
	return RS_OK;
}
