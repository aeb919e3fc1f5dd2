/*
 * embedding.cu - the CUDA embedding-bag kernels (see embedding_cuda.h):
 * forward, backward with fused SGD / row-wise Adagrad / Adam, and row pack
 * and unpack for migration. kernels/embedding_cpu.c is the reference; every
 * floating-point step here is written with explicit round-to-nearest
 * intrinsics (__fadd_rn, __fmul_rn, ...) in the CPU's order so the compiler
 * cannot contract or reorder it, which makes the results equal the CPU's.
 *
 * Backward: each id position j of the batch becomes a (row, j) pair; a
 * stable radix sort groups the pairs by row keeping bag order; run-length
 * encoding and a scan give each distinct row its segment; one block per
 * segment sums the segment's gradient column by column, in bag order, into
 * shared memory and applies the optimizer to that row. Bad and -1 ids get
 * the key nrows, which sorts last and is skipped.
 */
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding_cuda.h"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda_fp16.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define FLAG_BAD_ID 1u
#define FLAG_BAD_ROW 2u
/* A distinct row's gradient lives in shared memory while it is applied. */
#define MAX_DIM 8192
#define BLOCK_THREADS 256

struct rs_cuda_emb_ws {
	int64_t max_ids;
	int32_t max_dim;
	int sms;                  /* multiprocessors of the device, for grid-stride grids */
	uint64_t *keys_in, *keys_out;
	int32_t *pos_in, *pos_out;
	int32_t *bag_of;          /* per id position: its bag, or -1 */
	uint64_t *uniq;           /* distinct keys, ascending (the rows, then maybe the sentinel nrows) */
	int32_t *counts, *starts; /* per distinct key: how many positions, where they start */
	int32_t *nruns, *nvalid;  /* distinct keys; distinct rows (without the sentinel) */
	void *tmp;                /* cub's scratch */
	size_t tmp_bytes;
	float *grad;              /* rs_cuda_emb_grad_reduce's output, max_ids * max_dim, lazily */
	unsigned *flags;          /* FLAG_* met since the last check */
	unsigned *rowcheck;       /* nonzero: the current pack/unpack has a row outside the shard */
	unsigned *h_flags;        /* pinned host copy of flags */
};

/* ---- element access, the CPU's conversions ---------------------------------------- */

template <int DT> __device__ __forceinline__ float load_w(const void *w, int64_t i)
{
	if (DT == RS_DTYPE_FP16)
		return __half2float(__ushort_as_half(((const unsigned short *)w)[i]));
	if (DT == RS_DTYPE_BF16)
		return __uint_as_float((unsigned)((const uint16_t *)w)[i] << 16);
	return ((const float *)w)[i];
}

/* rs_f32_to_bf16, bit for bit */
__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* fp16: __float2half_rn rounds to nearest even as rs_f32_to_f16 does (NaN payloads may differ). */
template <int DT> __device__ __forceinline__ void store_w(void *w, int64_t i, float v)
{
	if (DT == RS_DTYPE_FP16)
		((unsigned short *)w)[i] = __half_as_ushort(__float2half_rn(v));
	else if (DT == RS_DTYPE_BF16)
		((uint16_t *)w)[i] = f32_to_bf16(v);
	else
		((float *)w)[i] = v;
}

/* ---- forward ---------------------------------------------------------------------- */

/* blockDim.x threads over the columns of a bag, blockDim.y bags per block. */
template <int DT>
__global__ void forward_kernel(const void *__restrict__ w, int64_t nrows, int32_t dim,
			       const int32_t *__restrict__ offsets, int32_t nbags, const int64_t *__restrict__ ids,
			       int mean, float *__restrict__ out, int64_t out_stride, unsigned *flags)
{
	int32_t i = (int32_t)blockIdx.x * (int32_t)blockDim.y + (int32_t)threadIdx.y;
	if (i >= nbags)
		return;
	int32_t b = offsets[i], e = offsets[i + 1];
	bool bad = false;
	for (int32_t c0 = 0; c0 < dim; c0 += (int32_t)blockDim.x) {
		int32_t c = c0 + (int32_t)threadIdx.x;
		float acc = 0.0f;
		for (int32_t j = b; j < e; j++) {
			int64_t r = ids[j];
			if (r < 0 || r >= nrows) {
				bad |= r != -1;
				continue;
			}
			if (c < dim)
				acc = __fadd_rn(acc, load_w<DT>(w, r * dim + c));
		}
		if (c < dim) {
			if (mean && e > b)
				acc = __fmul_rn(acc, __fdiv_rn(1.0f, (float)(e - b)));
			out[(int64_t)i * out_stride + c] = acc;
		}
	}
	if (bad && threadIdx.x == 0)
		atomicOr(flags, FLAG_BAD_ID);
}

/* ---- backward: sort, segments, fused optimizer ------------------------------------ */

/* Every id position j: its key (row, or nrows for -1 / bad / outside every bag) and its bag. */
__global__ void expand_kernel(const int32_t *__restrict__ offsets, int32_t nbags, const int64_t *__restrict__ ids,
			      int64_t nids, int64_t nrows, uint64_t *keys, int32_t *pos, int32_t *bag_of,
			      unsigned *flags)
{
	for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < nids; j += (int64_t)gridDim.x * blockDim.x) {
		/* the last bag i with offsets[i] <= j (empty bags before it are skipped) */
		int32_t lo = 0, hi = nbags + 1;
		while (lo < hi) {
			int32_t mid = (lo + hi) / 2;
			if (offsets[mid] <= j)
				lo = mid + 1;
			else
				hi = mid;
		}
		int32_t i = lo - 1;
		uint64_t key = (uint64_t)nrows;
		if (i >= 0 && i < nbags && j < offsets[i + 1]) {
			int64_t r = ids[j];
			if (r >= 0 && r < nrows)
				key = (uint64_t)r;
			else if (r != -1)
				atomicOr(flags, FLAG_BAD_ID);
		} else {
			i = -1;
		}
		keys[j] = key;
		pos[j] = (int32_t)j;
		bag_of[j] = i;
	}
}

/* nvalid = distinct keys without the sentinel (which sorts last). */
__global__ void count_valid_kernel(const uint64_t *uniq, const int32_t *nruns, int64_t nrows, int32_t *nvalid)
{
	int32_t n = *nruns;
	*nvalid = n > 0 && uniq[n - 1] == (uint64_t)nrows ? n - 1 : n;
}

/* Optimizer constants, computed on the host exactly as rs_emb_apply computes them. */
struct opt_params {
	float lr, eps, beta1, beta2, one_minus_beta1, one_minus_beta2, bc1, bc2;
};

/*
 * One optimizer update of row r by g[0..dim) (shared memory), by the whole
 * block. Ends with a barrier, so g may be rewritten after it.
 */
template <int DT, int OPT>
__device__ void apply_row(void *w, float *state, int32_t dim, int64_t r, const float *g, const opt_params &p)
{
	__shared__ float factor;
	float f = p.lr;
	if (OPT == RS_OPT_ROWWISE_ADAGRAD) {
		if (threadIdx.x == 0) { /* the CPU's sequential sum, for the same rounding */
			float sq = 0.0f;
			for (int32_t c = 0; c < dim; c++)
				sq = __fadd_rn(sq, __fmul_rn(g[c], g[c]));
			float acc = __fadd_rn(state[r], __fdiv_rn(sq, (float)dim));
			state[r] = acc;
			factor = __fdiv_rn(p.lr, __fadd_rn(__fsqrt_rn(acc), p.eps));
		}
		__syncthreads();
		f = factor;
	}
	for (int32_t c = threadIdx.x; c < dim; c += blockDim.x) {
		int64_t i = r * dim + c;
		if (OPT == RS_OPT_ADAM) {
			float *m = state + r * 2 * dim, *v = m + dim;
			float mc = __fadd_rn(__fmul_rn(p.beta1, m[c]), __fmul_rn(p.one_minus_beta1, g[c]));
			float vc = __fadd_rn(__fmul_rn(p.beta2, v[c]), __fmul_rn(__fmul_rn(p.one_minus_beta2, g[c]), g[c]));
			m[c] = mc;
			v[c] = vc;
			float u = __fdiv_rn(__fmul_rn(p.lr, __fdiv_rn(mc, p.bc1)),
					    __fadd_rn(__fsqrt_rn(__fdiv_rn(vc, p.bc2)), p.eps));
			store_w<DT>(w, i, __fsub_rn(load_w<DT>(w, i), u));
		} else {
			store_w<DT>(w, i, __fsub_rn(load_w<DT>(w, i), __fmul_rn(f, g[c])));
		}
	}
	__syncthreads();
}

/*
 * One block per distinct row (grid-stride): its gradient, summed in bag
 * order as rs_emb_grad_accumulate sums it, then either applied (APPLY) or
 * written to rows_out/grad_rows.
 */
template <int DT, int OPT, bool APPLY>
__global__ void segment_kernel(void *w, float *state, int32_t dim, const uint64_t *__restrict__ uniq,
			       const int32_t *__restrict__ counts, const int32_t *__restrict__ starts,
			       const int32_t *__restrict__ nvalid, const int32_t *__restrict__ pos,
			       const int32_t *__restrict__ bag_of, const int32_t *__restrict__ offsets, int mean,
			       const float *__restrict__ grad_out, int64_t grad_stride, opt_params p, int64_t *rows_out,
			       float *grad_rows)
{
	extern __shared__ float g[];
	int32_t n = *nvalid;
	for (int32_t k = blockIdx.x; k < n; k += gridDim.x) {
		int64_t r = (int64_t)uniq[k];
		int32_t start = starts[k], cnt = counts[k];
		for (int32_t c = threadIdx.x; c < dim; c += blockDim.x) {
			float acc = 0.0f;
			for (int32_t t = 0; t < cnt; t++) {
				int32_t i = bag_of[pos[start + t]];
				float scale = 1.0f;
				if (mean) {
					int32_t len = offsets[i + 1] - offsets[i];
					scale = __fdiv_rn(1.0f, (float)len);
				}
				float v = __fmul_rn(grad_out[(int64_t)i * grad_stride + c], scale);
				acc = t == 0 ? v : __fadd_rn(acc, v);
			}
			if (APPLY)
				g[c] = acc;
			else
				grad_rows[(int64_t)k * dim + c] = acc;
		}
		if (APPLY) {
			__syncthreads();
			apply_row<DT, OPT>(w, state, dim, r, g, p);
		} else if (threadIdx.x == 0) {
			rows_out[k] = r;
		}
	}
}

/* rs_cuda_emb_apply: rows[k] updated by grad[k*dim..], k < *n_dev. */
template <int DT, int OPT>
__global__ void apply_kernel(void *w, float *state, int64_t nrows, int32_t dim, const int64_t *__restrict__ rows,
			     const float *__restrict__ grad, const int32_t *__restrict__ n_dev, opt_params p)
{
	extern __shared__ float g[];
	int32_t n = *n_dev;
	for (int32_t k = blockIdx.x; k < n; k += gridDim.x) {
		int64_t r = rows[k];
		if (r < 0 || r >= nrows)
			continue; /* the same for the whole block */
		for (int32_t c = threadIdx.x; c < dim; c += blockDim.x)
			g[c] = grad[(int64_t)k * dim + c];
		__syncthreads();
		apply_row<DT, OPT>(w, state, dim, r, g, p);
	}
}

/* ---- pack / unpack ---------------------------------------------------------------- */

__global__ void check_rows_kernel(const int64_t *__restrict__ rows, int64_t n, int64_t nrows, unsigned *rowcheck,
				  unsigned *flags)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		if (rows[i] < 0 || rows[i] >= nrows) {
			atomicOr(rowcheck, 1u);
			atomicOr(flags, FLAG_BAD_ROW);
		}
}

/* One block per row (grid-stride), copying U-sized units; nothing at all when a row was bad. */
template <typename U, bool UNPACK>
__global__ void rows_copy_kernel(char *weights, char *state, const int64_t *__restrict__ rows, int64_t n, int64_t wb,
				 int64_t sb, char *buf, const unsigned *rowcheck)
{
	if (*rowcheck)
		return;
	int64_t wu = wb / (int64_t)sizeof(U), su = sb / (int64_t)sizeof(U);
	for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
		int64_t r = rows[i];
		U *sw = (U *)(weights + r * wb), *bw = (U *)(buf + i * wb);
		for (int64_t u = threadIdx.x; u < wu; u += blockDim.x) {
			if (UNPACK)
				sw[u] = bw[u];
			else
				bw[u] = sw[u];
		}
		if (su) {
			U *ss = (U *)(state + r * sb), *bs = (U *)(buf + n * wb + i * sb);
			for (int64_t u = threadIdx.x; u < su; u += blockDim.x) {
				if (UNPACK)
					ss[u] = bs[u];
				else
					bs[u] = ss[u];
			}
		}
	}
}

/* ---- host side -------------------------------------------------------------------- */

static int grid_cap(const rs_cuda_emb_ws *ws) { return ws->sms * 32; }

static int grid_for(int64_t items, int per_block, int cap)
{
	int64_t g = (items + per_block - 1) / per_block;
	return (int)(g < 1 ? 1 : g > cap ? cap : g);
}

/* Column threads per bag: dim rounded up to a warp, at most a block. */
static dim3 bag_block(int32_t dim)
{
	int x = (dim + 31) / 32 * 32;
	if (x > BLOCK_THREADS)
		x = BLOCK_THREADS;
	return dim3((unsigned)x, (unsigned)(BLOCK_THREADS / x));
}

static rs_status check_shard(const rs_emb_shard *s, rs_err *err)
{
	if (!s || !s->weights || s->nrows < 0 || s->dim < 1 || (unsigned)s->dtype > RS_DTYPE_BF16)
		return rs_err_set(err, RS_EINVAL, "cuda embedding: bad shard");
	return RS_OK;
}

static rs_status check_batch(const rs_emb_shard *s, int32_t nbags, int64_t nids, const rs_cuda_emb_ws *ws,
			     rs_err *err)
{
	RSCHECK(check_shard(s, err));
	if (nbags < 0 || nids < 0)
		return rs_err_set(err, RS_EINVAL, "cuda embedding: %d bags, %lld ids", nbags, (long long)nids);
	if (!ws)
		return rs_err_set(err, RS_EINVAL, "cuda embedding: no workspace");
	if (nids > ws->max_ids)
		return rs_err_set(err, RS_ENOSPACE, "cuda embedding: %lld ids, the workspace takes %lld",
				  (long long)nids, (long long)ws->max_ids);
	if (s->dim > MAX_DIM)
		return rs_err_set(err, RS_EUNSUPPORTED, "cuda embedding: dim %d, at most %d", s->dim, MAX_DIM);
	return RS_OK;
}

static rs_status check_opt(const rs_emb_shard *s, const rs_optimizer_config *opt, int64_t step, rs_err *err)
{
	if (!opt || (unsigned)opt->kind > RS_OPT_ADAM || (opt->kind != RS_OPT_SGD && !s->state) ||
	    (opt->kind == RS_OPT_ADAM && step < 1))
		return rs_err_set(err, RS_EINVAL, "cuda embedding: bad optimizer (or no state for it)");
	return RS_OK;
}

static opt_params params_of(const rs_optimizer_config *opt, int64_t step)
{
	opt_params p;
	p.lr = opt->lr;
	p.eps = opt->eps;
	p.beta1 = opt->beta1;
	p.beta2 = opt->beta2;
	p.one_minus_beta1 = 1 - opt->beta1;
	p.one_minus_beta2 = 1 - opt->beta2;
	p.bc1 = p.bc2 = 1.0f;
	if (opt->kind == RS_OPT_ADAM) { /* as rs_emb_apply: powf in float */
		p.bc1 = 1.0f - powf(opt->beta1, (float)step);
		p.bc2 = 1.0f - powf(opt->beta2, (float)step);
	}
	return p;
}

rs_status rs_cuda_emb_ws_create(int64_t max_ids, int32_t max_dim, rs_cuda_emb_ws **out, rs_err *err)
{
	rs_status st = RS_OK;
	int dev = 0;
	size_t a = 0, b = 0, c = 0;
	*out = NULL;
	if (max_ids < 1 || max_ids > INT32_MAX || max_dim < 1 || max_dim > MAX_DIM)
		return rs_err_set(err, RS_EINVAL, "cuda embedding workspace: %lld ids of dim %d (ids in [1, 2^31), dim in [1, %d])",
				  (long long)max_ids, max_dim, MAX_DIM);
	rs_cuda_emb_ws *ws = (rs_cuda_emb_ws *)calloc(1, sizeof(*ws));
	if (!ws)
		return rs_err_set(err, RS_ENOMEM, "cuda embedding workspace: out of host memory");
	ws->max_ids = max_ids;
	ws->max_dim = max_dim;
	size_t n = (size_t)max_ids;
	CUDACHECKGOTO(err, cudaGetDevice(&dev), st, fail);
	CUDACHECKGOTO(err, cudaDeviceGetAttribute(&ws->sms, cudaDevAttrMultiProcessorCount, dev), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->keys_in, n * sizeof(uint64_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->keys_out, n * sizeof(uint64_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->uniq, n * sizeof(uint64_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->pos_in, n * sizeof(int32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->pos_out, n * sizeof(int32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->bag_of, n * sizeof(int32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->counts, n * sizeof(int32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->starts, n * sizeof(int32_t)), st, fail);
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->nruns, 2 * sizeof(int32_t)), st, fail);
	ws->nvalid = ws->nruns + 1;
	CUDACHECKGOTO(err, cudaMalloc((void **)&ws->flags, 2 * sizeof(unsigned)), st, fail);
	ws->rowcheck = ws->flags + 1;
	CUDACHECKGOTO(err, cudaMemset(ws->flags, 0, 2 * sizeof(unsigned)), st, fail);
	/* that memset ran on the legacy stream, which the caller's non-blocking streams do not wait for */
	CUDACHECKGOTO(err, cudaDeviceSynchronize(), st, fail);
	CUDACHECKGOTO(err, cudaMallocHost((void **)&ws->h_flags, sizeof(unsigned)), st, fail);
	CUDACHECKGOTO(err, cub::DeviceRadixSort::SortPairs(NULL, a, ws->keys_in, ws->keys_out, ws->pos_in, ws->pos_out,
							   (int)max_ids, 0, 64),
		      st, fail);
	CUDACHECKGOTO(err, cub::DeviceRunLengthEncode::Encode(NULL, b, ws->keys_out, ws->uniq, ws->counts, ws->nruns,
							      (int)max_ids),
		      st, fail);
	CUDACHECKGOTO(err, cub::DeviceScan::ExclusiveSum(NULL, c, ws->counts, ws->starts, (int)max_ids), st, fail);
	ws->tmp_bytes = a > b ? a : b;
	if (c > ws->tmp_bytes)
		ws->tmp_bytes = c;
	CUDACHECKGOTO(err, cudaMalloc(&ws->tmp, ws->tmp_bytes), st, fail);
	*out = ws;
	return RS_OK;
fail:
	rs_cuda_emb_ws_destroy(ws);
	return st;
}

void rs_cuda_emb_ws_destroy(rs_cuda_emb_ws *ws)
{
	if (!ws)
		return;
	/* frees of NULL are no-ops; a failing free leaves nothing to do but log */
	void *dev[] = {ws->tmp, ws->grad, ws->flags, ws->nruns, ws->starts, ws->counts, ws->bag_of,
		       ws->pos_out, ws->pos_in, ws->uniq, ws->keys_out, ws->keys_in};
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) {
		cudaError_t e = cudaFree(dev[i]);
		if (e != cudaSuccess)
			RS_WARN("cudaFree in rs_cuda_emb_ws_destroy: %s", cudaGetErrorString(e));
	}
	if (ws->h_flags) {
		cudaError_t e = cudaFreeHost(ws->h_flags);
		if (e != cudaSuccess)
			RS_WARN("cudaFreeHost in rs_cuda_emb_ws_destroy: %s", cudaGetErrorString(e));
	}
	free(ws);
}

rs_status rs_cuda_emb_ws_check(rs_cuda_emb_ws *ws, cudaStream_t stream, rs_err *err)
{
	CUDACHECK(err, cudaMemcpyAsync(ws->h_flags, ws->flags, sizeof(unsigned), cudaMemcpyDeviceToHost, stream));
	CUDACHECK(err, cudaMemsetAsync(ws->flags, 0, sizeof(unsigned), stream));
	CUDACHECK(err, cudaStreamSynchronize(stream));
	unsigned f = *ws->h_flags;
	if (f & FLAG_BAD_ID)
		return rs_err_set(err, RS_EINVAL, "cuda embedding: an id outside [-1, nrows) (treated as -1)");
	if (f & FLAG_BAD_ROW)
		return rs_err_set(err, RS_EINVAL, "cuda embedding: pack/unpack of a row outside the shard (nothing copied)");
	return RS_OK;
}

rs_status rs_cuda_emb_forward(const rs_emb_shard *s, const int32_t *offsets, int32_t nbags, const int64_t *ids,
			      int64_t nids, rs_pooling pooling, float *out, int64_t out_stride, rs_cuda_emb_ws *ws,
			      cudaStream_t stream, rs_err *err)
{
	RSCHECK(check_batch(s, nbags, nids, ws, err));
	if (out_stride < s->dim)
		return rs_err_set(err, RS_EINVAL, "cuda embedding forward: out_stride %lld < dim %d", (long long)out_stride,
				  s->dim);
	if (nbags == 0)
		return RS_OK;
	dim3 block = bag_block(s->dim);
	dim3 grid((unsigned)((nbags + (int32_t)block.y - 1) / (int32_t)block.y));
	int mean = pooling == RS_POOL_MEAN;
	switch (s->dtype) {
	case RS_DTYPE_FP16:
		forward_kernel<RS_DTYPE_FP16><<<grid, block, 0, stream>>>(s->weights, s->nrows, s->dim, offsets, nbags, ids,
									 mean, out, out_stride, ws->flags);
		break;
	case RS_DTYPE_BF16:
		forward_kernel<RS_DTYPE_BF16><<<grid, block, 0, stream>>>(s->weights, s->nrows, s->dim, offsets, nbags, ids,
									 mean, out, out_stride, ws->flags);
		break;
	default:
		forward_kernel<RS_DTYPE_FP32><<<grid, block, 0, stream>>>(s->weights, s->nrows, s->dim, offsets, nbags, ids,
									 mean, out, out_stride, ws->flags);
	}
	CUDACHECK_LAUNCH(err, "forward_kernel");
	return RS_OK;
}

/* Keys, stable sort, runs and their starts, the count of distinct rows: everything before the segments. */
static rs_status group_by_row(int64_t nrows, const int32_t *offsets, int32_t nbags, const int64_t *ids, int64_t nids,
			      rs_cuda_emb_ws *ws, cudaStream_t stream, rs_err *err)
{
	int end_bit = 1;
	while (end_bit < 64 && ((uint64_t)nrows >> end_bit) != 0)
		end_bit++; /* keys go up to nrows itself, the sentinel */
	size_t tmp = ws->tmp_bytes;
	int n = (int)nids;
	expand_kernel<<<grid_for(nids, BLOCK_THREADS, grid_cap(ws)), BLOCK_THREADS, 0, stream>>>(
		offsets, nbags, ids, nids, nrows, ws->keys_in, ws->pos_in, ws->bag_of, ws->flags);
	CUDACHECK_LAUNCH(err, "expand_kernel");
	CUDACHECK(err, cub::DeviceRadixSort::SortPairs(ws->tmp, tmp, ws->keys_in, ws->keys_out, ws->pos_in, ws->pos_out,
						       n, 0, end_bit, stream));
	tmp = ws->tmp_bytes;
	CUDACHECK(err, cudaMemsetAsync(ws->counts, 0, (size_t)n * sizeof(int32_t), stream));
	CUDACHECK(err, cub::DeviceRunLengthEncode::Encode(ws->tmp, tmp, ws->keys_out, ws->uniq, ws->counts, ws->nruns, n,
							  stream));
	tmp = ws->tmp_bytes;
	CUDACHECK(err, cub::DeviceScan::ExclusiveSum(ws->tmp, tmp, ws->counts, ws->starts, n, stream));
	count_valid_kernel<<<1, 1, 0, stream>>>(ws->uniq, ws->nruns, nrows, ws->nvalid);
	CUDACHECK_LAUNCH(err, "count_valid_kernel");
	return RS_OK;
}

template <int DT, int OPT, bool APPLY>
static void launch_segments(rs_emb_shard *s, const int32_t *offsets, int mean, const float *grad_out,
			    int64_t grad_stride, const opt_params &p, rs_cuda_emb_ws *ws, int64_t nids,
			    cudaStream_t stream)
{
	dim3 block = bag_block(s->dim);
	block.y = 1;
	segment_kernel<DT, OPT, APPLY><<<grid_for(nids, 1, grid_cap(ws)), block, (size_t)s->dim * sizeof(float), stream>>>(
		s->weights, s->state, s->dim, ws->uniq, ws->counts, ws->starts, ws->nvalid, ws->pos_out, ws->bag_of,
		offsets, mean, grad_out, grad_stride, p, (int64_t *)ws->keys_in, ws->grad);
}

template <int DT>
static void launch_segments_apply(rs_emb_shard *s, rs_optimizer kind, const int32_t *offsets, int mean,
				  const float *grad_out, int64_t grad_stride, const opt_params &p, rs_cuda_emb_ws *ws,
				  int64_t nids, cudaStream_t stream)
{
	switch (kind) {
	case RS_OPT_SGD:
		launch_segments<DT, RS_OPT_SGD, true>(s, offsets, mean, grad_out, grad_stride, p, ws, nids, stream);
		break;
	case RS_OPT_ROWWISE_ADAGRAD:
		launch_segments<DT, RS_OPT_ROWWISE_ADAGRAD, true>(s, offsets, mean, grad_out, grad_stride, p, ws, nids,
								  stream);
		break;
	case RS_OPT_ADAM:
		launch_segments<DT, RS_OPT_ADAM, true>(s, offsets, mean, grad_out, grad_stride, p, ws, nids, stream);
		break;
	}
}

rs_status rs_cuda_emb_backward(rs_emb_shard *s, const int32_t *offsets, int32_t nbags, const int64_t *ids,
			       int64_t nids, rs_pooling pooling, const float *grad_out, int64_t grad_stride,
			       const rs_optimizer_config *opt, int64_t step, rs_cuda_emb_ws *ws, cudaStream_t stream,
			       rs_err *err)
{
	RSCHECK(check_batch(s, nbags, nids, ws, err));
	RSCHECK(check_opt(s, opt, step, err));
	if (grad_stride < s->dim)
		return rs_err_set(err, RS_EINVAL, "cuda embedding backward: grad_stride %lld < dim %d",
				  (long long)grad_stride, s->dim);
	if (nids == 0 || nbags == 0)
		return RS_OK;
	RSCHECK(group_by_row(s->nrows, offsets, nbags, ids, nids, ws, stream, err));
	opt_params p = params_of(opt, step);
	int mean = pooling == RS_POOL_MEAN;
	switch (s->dtype) {
	case RS_DTYPE_FP16:
		launch_segments_apply<RS_DTYPE_FP16>(s, opt->kind, offsets, mean, grad_out, grad_stride, p, ws, nids, stream);
		break;
	case RS_DTYPE_BF16:
		launch_segments_apply<RS_DTYPE_BF16>(s, opt->kind, offsets, mean, grad_out, grad_stride, p, ws, nids, stream);
		break;
	default:
		launch_segments_apply<RS_DTYPE_FP32>(s, opt->kind, offsets, mean, grad_out, grad_stride, p, ws, nids, stream);
	}
	CUDACHECK_LAUNCH(err, "segment_kernel");
	return RS_OK;
}

rs_status rs_cuda_emb_grad_reduce(int64_t nrows, int32_t dim, const int32_t *offsets, int32_t nbags,
				  const int64_t *ids, int64_t nids, rs_pooling pooling, const float *grad_out,
				  int64_t grad_stride, rs_cuda_emb_ws *ws, cudaStream_t stream, const int64_t **rows,
				  const float **grad, const int32_t **n_dev, rs_err *err)
{
	rs_emb_shard shape = {(void *)1, NULL, RS_DTYPE_FP32, nrows, dim}; /* for the argument checks only */
	RSCHECK(check_batch(&shape, nbags, nids, ws, err));
	if (dim > ws->max_dim || grad_stride < dim)
		return rs_err_set(err, RS_EINVAL, "cuda embedding grad: dim %d (workspace max %d), grad_stride %lld", dim,
				  ws->max_dim, (long long)grad_stride);
	if (!ws->grad)
		CUDACHECK(err, cudaMalloc((void **)&ws->grad, (size_t)ws->max_ids * (size_t)ws->max_dim * sizeof(float)));
	*rows = (const int64_t *)ws->keys_in; /* free once sorted: reused for the row list */
	*grad = ws->grad;
	*n_dev = ws->nvalid;
	if (nids == 0 || nbags == 0) {
		CUDACHECK(err, cudaMemsetAsync(ws->nvalid, 0, sizeof(int32_t), stream));
		return RS_OK;
	}
	RSCHECK(group_by_row(nrows, offsets, nbags, ids, nids, ws, stream, err));
	opt_params p = {};
	launch_segments<RS_DTYPE_FP32, RS_OPT_SGD, false>(&shape, offsets, pooling == RS_POOL_MEAN, grad_out, grad_stride,
							  p, ws, nids, stream);
	CUDACHECK_LAUNCH(err, "segment_kernel (gradient only)");
	return RS_OK;
}

template <int DT>
static void launch_apply(rs_emb_shard *s, rs_optimizer kind, const int64_t *rows, const float *grad,
			 const int32_t *n_dev, int grid, const opt_params &p, cudaStream_t stream)
{
	dim3 block = bag_block(s->dim);
	block.y = 1;
	size_t smem = (size_t)s->dim * sizeof(float);
	switch (kind) {
	case RS_OPT_SGD:
		apply_kernel<DT, RS_OPT_SGD><<<grid, block, smem, stream>>>(s->weights, s->state, s->nrows, s->dim, rows,
									    grad, n_dev, p);
		break;
	case RS_OPT_ROWWISE_ADAGRAD:
		apply_kernel<DT, RS_OPT_ROWWISE_ADAGRAD><<<grid, block, smem, stream>>>(s->weights, s->state, s->nrows,
											s->dim, rows, grad, n_dev, p);
		break;
	case RS_OPT_ADAM:
		apply_kernel<DT, RS_OPT_ADAM><<<grid, block, smem, stream>>>(s->weights, s->state, s->nrows, s->dim, rows,
									     grad, n_dev, p);
		break;
	}
}

rs_status rs_cuda_emb_apply(rs_emb_shard *s, const int64_t *rows, const float *grad, const int32_t *n_dev,
			    int64_t max_n, const rs_optimizer_config *opt, int64_t step, cudaStream_t stream,
			    rs_err *err)
{
	int dev = 0, sms = 1;
	RSCHECK(check_shard(s, err));
	RSCHECK(check_opt(s, opt, step, err));
	if (s->dim > MAX_DIM)
		return rs_err_set(err, RS_EUNSUPPORTED, "cuda embedding: dim %d, at most %d", s->dim, MAX_DIM);
	if (max_n <= 0)
		return RS_OK;
	CUDACHECK(err, cudaGetDevice(&dev));
	CUDACHECK(err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	opt_params p = params_of(opt, step);
	int grid = grid_for(max_n, 1, sms * 32);
	switch (s->dtype) {
	case RS_DTYPE_FP16:
		launch_apply<RS_DTYPE_FP16>(s, opt->kind, rows, grad, n_dev, grid, p, stream);
		break;
	case RS_DTYPE_BF16:
		launch_apply<RS_DTYPE_BF16>(s, opt->kind, rows, grad, n_dev, grid, p, stream);
		break;
	default:
		launch_apply<RS_DTYPE_FP32>(s, opt->kind, rows, grad, n_dev, grid, p, stream);
	}
	CUDACHECK_LAUNCH(err, "apply_kernel");
	return RS_OK;
}

/* The widest unit that divides every size and address the copy touches. */
static size_t copy_unit(size_t wb, size_t sb, const void *a, const void *b, const void *c)
{
	size_t u = 16;
	while (u > 1 && (wb % u || sb % u || (uintptr_t)a % u || (uintptr_t)b % u || (uintptr_t)c % u))
		u /= 2;
	return u;
}

template <bool UNPACK>
static rs_status rows_copy(const rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n, const void *buf,
			   size_t cap, rs_cuda_emb_ws *ws, cudaStream_t stream, rs_err *err)
{
	RSCHECK(check_shard(s, err));
	if (!ws || n < 0 || (unsigned)opt > RS_OPT_ADAM || (opt != RS_OPT_SGD && !s->state))
		return rs_err_set(err, RS_EINVAL, "cuda embedding %s: bad arguments", UNPACK ? "unpack" : "pack");
	size_t wb = (size_t)s->dim * (size_t)rs_dtype_size(s->dtype);
	size_t sb = sizeof(float) * (size_t)rs_emb_state_floats(opt, s->dim);
	if ((size_t)n * (wb + sb) > cap)
		return rs_err_set(err, RS_ENOSPACE, "cuda embedding %s: %lld rows of %zu bytes, buffer of %zu",
				  UNPACK ? "unpack" : "pack", (long long)n, wb + sb, cap);
	if (n == 0)
		return RS_OK;
	CUDACHECK(err, cudaMemsetAsync(ws->rowcheck, 0, sizeof(unsigned), stream));
	check_rows_kernel<<<grid_for(n, BLOCK_THREADS, grid_cap(ws)), BLOCK_THREADS, 0, stream>>>(rows, n, s->nrows,
												  ws->rowcheck, ws->flags);
	CUDACHECK_LAUNCH(err, "check_rows_kernel");
	char *w = (char *)s->weights, *st = (char *)s->state, *b = (char *)buf;
	int grid = grid_for(n, 1, grid_cap(ws));
	int64_t iwb = (int64_t)wb, isb = (int64_t)sb;
	switch (copy_unit(wb, sb, w, sb ? st : NULL, b)) {
	case 16:
		rows_copy_kernel<uint4, UNPACK><<<grid, 128, 0, stream>>>(w, st, rows, n, iwb, isb, b, ws->rowcheck);
		break;
	case 8:
		rows_copy_kernel<uint2, UNPACK><<<grid, 128, 0, stream>>>(w, st, rows, n, iwb, isb, b, ws->rowcheck);
		break;
	case 4:
		rows_copy_kernel<uint32_t, UNPACK><<<grid, 128, 0, stream>>>(w, st, rows, n, iwb, isb, b, ws->rowcheck);
		break;
	case 2:
		rows_copy_kernel<uint16_t, UNPACK><<<grid, 128, 0, stream>>>(w, st, rows, n, iwb, isb, b, ws->rowcheck);
		break;
	default:
		rows_copy_kernel<uint8_t, UNPACK><<<grid, 128, 0, stream>>>(w, st, rows, n, iwb, isb, b, ws->rowcheck);
	}
	CUDACHECK_LAUNCH(err, "rows_copy_kernel");
	return RS_OK;
}

rs_status rs_cuda_emb_pack_rows(const rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n, void *buf,
				size_t cap, rs_cuda_emb_ws *ws, cudaStream_t stream, rs_err *err)
{
	return rows_copy<false>(s, opt, rows, n, buf, cap, ws, stream, err);
}

rs_status rs_cuda_emb_unpack_rows(rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n,
				  const void *buf, size_t len, rs_cuda_emb_ws *ws, cudaStream_t stream, rs_err *err)
{
	return rows_copy<true>(s, opt, rows, n, buf, len, ws, stream, err);
}
