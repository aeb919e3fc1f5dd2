/*
 * bucketize.cu - see bucketize_cuda.h.
 *
 * Each id finds its row range by binary search and its bag by binary
 * search over the offsets; a stable radix sort of the positions by owner
 * groups the ids without reordering any owner's; the lengths and counts are
 * integer atomics (exact, whatever the order).
 */
#include "kernels/cuda/bucketize_cuda.h"
#include "kernels/cuda/cuda_check.h"

#include <cub/device/device_radix_sort.cuh>

#define THREADS 256

/* The last k in [0, n) with a[k] <= x (a sorted, a[0] <= x). */
template <typename T> __device__ __forceinline__ int32_t last_le(const T *a, int32_t n, T x)
{
	int32_t lo = 0, hi = n - 1;
	while (lo < hi) {
		int32_t mid = (lo + hi + 1) / 2;
		if (a[mid] <= x)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Per id: its owner (the sort key; nowners for a bad id, sorted last) and its bag's count. */
__global__ void owner_kernel(const int32_t *__restrict__ offsets, int32_t nbags, const int64_t *__restrict__ ids,
			     int32_t nids, const int64_t *__restrict__ row_start, const int32_t *__restrict__ owner,
			     int32_t nranges, int32_t nowners, int32_t *__restrict__ key, int32_t *__restrict__ pos,
			     int32_t *__restrict__ lengths, unsigned long long *__restrict__ counts,
			     unsigned *__restrict__ bad)
{
	for (int32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < nids; j += gridDim.x * blockDim.x) {
		int64_t id = ids[j];
		pos[j] = j;
		if (id < 0 || id >= row_start[nranges]) {
			key[j] = nowners;
			atomicOr(bad, 1u);
			continue;
		}
		int32_t o = owner[last_le(row_start, nranges, id)];
		if (o < 0 || o >= nowners) {
			key[j] = nowners;
			atomicOr(bad, 2u);
			continue;
		}
		key[j] = o;
		int32_t bag = last_le(offsets, nbags, (int32_t)j); /* offsets[0] = 0 <= j */
		atomicAdd(&lengths[(int64_t)o * nbags + bag], 1);
		atomicAdd(&counts[o], 1ull);
	}
}

/* out_ids[k] = ids[sorted[k]], perm[sorted[k]] = k. */
__global__ void permute_kernel(const int64_t *__restrict__ ids, const int32_t *__restrict__ sorted, int32_t nids,
			       int64_t *__restrict__ out_ids, int32_t *__restrict__ perm)
{
	for (int32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < nids; k += gridDim.x * blockDim.x) {
		int32_t j = sorted[k];
		out_ids[k] = ids[j];
		perm[j] = k;
	}
}

static unsigned grid_of(int64_t n)
{
	int64_t g = (n + THREADS - 1) / THREADS;
	return (unsigned)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

rs_status rs_cuda_bucketize(const int32_t *offsets, int32_t nbags, const int64_t *ids, int64_t nids,
			    const int64_t *row_start, const int32_t *owner, int32_t nranges, int32_t nowners,
			    int64_t *out_ids, int32_t *out_lengths, int32_t *perm, int64_t *owner_counts,
			    cudaStream_t stream, rs_err *err)
{
	if (nbags < 1 || nids < 0 || nids > INT32_MAX || nranges < 1 || nowners < 1 || nowners >= INT32_MAX ||
	    !offsets || !row_start || !owner || !out_lengths || !owner_counts || (nids && (!ids || !out_ids || !perm)))
		return rs_err_set(err, RS_EINVAL, "cuda bucketize: %d bags, %lld ids, %d ranges, %d owners", nbags,
				  (long long)nids, nranges, nowners);
	int32_t n = (int32_t)nids;
	int end_bit = 1;
	while (end_bit < 31 && (1 << end_bit) <= nowners)
		end_bit++;
	/* scratch: keys and positions in and out, the counts, the bad flag, cub's temporary storage */
	size_t temp = 0;
	CUDACHECK(err, cub::DeviceRadixSort::SortPairs(NULL, temp, (int32_t *)NULL, (int32_t *)NULL, (int32_t *)NULL,
						      (int32_t *)NULL, n, 0, end_bit, stream));
	size_t ints = sizeof(int32_t) * (size_t)(n + 1);
	size_t bytes = 4 * ints + sizeof(unsigned long long) * (size_t)nowners + 8 + temp;
	char *s = NULL;
	unsigned long long *counts_h = (unsigned long long *)malloc(sizeof(unsigned long long) * (size_t)nowners);
	unsigned bad_h = 0;
	rs_status st = RS_OK;
	if (!counts_h)
		return rs_err_set(err, RS_ENOMEM, "cuda bucketize: out of memory");
	CUDACHECKGOTO(err, cudaMallocAsync((void **)&s, bytes, stream), st, out);
	{
		int32_t *key = (int32_t *)s, *key_out = (int32_t *)(s + ints);
		int32_t *pos = (int32_t *)(s + 2 * ints), *sorted = (int32_t *)(s + 3 * ints);
		unsigned long long *counts = (unsigned long long *)(s + 4 * ints);
		unsigned *bad = (unsigned *)(counts + nowners);
		void *tmp = (char *)bad + 8;
		CUDACHECKGOTO(err, cudaMemsetAsync(out_lengths, 0, sizeof(int32_t) * (size_t)nowners * (size_t)nbags, stream),
			      st, out);
		CUDACHECKGOTO(err, cudaMemsetAsync(counts, 0, sizeof(unsigned long long) * (size_t)nowners + 8, stream), st,
			      out);
		if (n) {
			owner_kernel<<<grid_of(n), THREADS, 0, stream>>>(offsets, nbags, ids, n, row_start, owner, nranges,
									 nowners, key, pos, out_lengths, counts, bad);
			CUDACHECKGOTO(err, cudaGetLastError(), st, out);
			CUDACHECKGOTO(err, cub::DeviceRadixSort::SortPairs(tmp, temp, key, key_out, pos, sorted, n, 0, end_bit,
									  stream),
				      st, out);
			permute_kernel<<<grid_of(n), THREADS, 0, stream>>>(ids, sorted, n, out_ids, perm);
			CUDACHECKGOTO(err, cudaGetLastError(), st, out);
		}
		CUDACHECKGOTO(err, cudaMemcpyAsync(counts_h, counts, sizeof(unsigned long long) * (size_t)nowners,
						   cudaMemcpyDeviceToHost, stream),
			      st, out);
		CUDACHECKGOTO(err, cudaMemcpyAsync(&bad_h, bad, sizeof(unsigned), cudaMemcpyDeviceToHost, stream), st, out);
	}
out:
	if (s) {
		cudaError_t ce = cudaFreeAsync(s, stream);
		if (ce != cudaSuccess && st == RS_OK) {
			RS__CUDA_FAIL(err, ce, "cudaFreeAsync(s, stream)");
			st = RS_ECUDA;
		}
	}
	cudaError_t ce = cudaStreamSynchronize(stream); /* also when failing: the copies write our stack */
	if (ce != cudaSuccess && st == RS_OK) {
		RS__CUDA_FAIL(err, ce, "cudaStreamSynchronize(stream)");
		st = RS_ECUDA;
	}
	if (st == RS_OK) {
		for (int32_t o = 0; o < nowners; o++)
			owner_counts[o] = (int64_t)counts_h[o];
		if (bad_h & 1u)
			st = rs_err_set(err, RS_EINVAL, "cuda bucketize: an id outside the table's rows");
		else if (bad_h & 2u)
			st = rs_err_set(err, RS_EINVAL, "cuda bucketize: a row range owned by no rank in [0, %d)", nowners);
	}
	free(counts_h);
	return st;
}
