/*
 * engine_cuda.c - the CUDA engine (see engine_cuda.h).
 *
 * A call copies its batch (offsets, ids, gradients) into device buffers
 * that grow to the largest batch seen, runs the kernel on the engine's
 * stream, copies the outputs back and waits: the trainer's host code may
 * touch shard memory as soon as a call returns. Bad ids, which only the
 * device sees, are reported by the same call (rs_cuda_emb_ws_check).
 */
#include "worker/engine_cuda.h"
#include "common/log.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding_cuda.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_engine {
	rs_engine base;
	int device;
	cudaStream_t stream;
	rs_cuda_emb_ws *ws;
	int64_t ws_ids;         /* what ws was made for */
	int32_t ws_dim;
	void *d_buf;            /* the batch on the device: offsets, ids, rows, gradients, outputs */
	size_t d_cap;
	cublasHandle_t blas;    /* the dense network's products */
	float *g_buf;           /* their operands and result */
	size_t g_cap;
} cuda_engine;

/*
 * cuBLAS is opened when the first CUDA engine is made, not linked: its
 * libraries are large (loading them costs a CPU worker 200 MB and a tenth
 * of a second), and only GPU workers use them.
 */
#define CUBLAS_SONAME "libcublas.so." RS__STR(CUBLAS_VER_MAJOR)
#define RS__STR(x) RS__STR2(x)
#define RS__STR2(x) #x

static struct {
	cublasStatus_t (*create)(cublasHandle_t *);
	cublasStatus_t (*destroy)(cublasHandle_t);
	cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
	cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
	cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
				const float *, int, const float *, int, const float *, float *, int);
	const char *(*status_string)(cublasStatus_t);
	char why[256];      /* empty when loaded */
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void load_blas(void)
{
	void *h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(blas.why, sizeof(blas.why), "dlopen(%s): %s", CUBLAS_SONAME, dlerror());
		return;
	}
	struct {
		const char *name;
		void **fn;
	} syms[] = {{"cublasCreate_v2", (void **)&blas.create},         {"cublasDestroy_v2", (void **)&blas.destroy},
		    {"cublasSetStream_v2", (void **)&blas.set_stream},  {"cublasSetMathMode", (void **)&blas.set_math_mode},
		    {"cublasSgemm_v2", (void **)&blas.sgemm},           {"cublasGetStatusString", (void **)&blas.status_string}};
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if (!(*syms[i].fn = dlsym(h, syms[i].name))) {
			snprintf(blas.why, sizeof(blas.why), "%s has no %s", CUBLAS_SONAME, syms[i].name);
			return;
		}
}

/* CUBLASCHECK(err, call): a cuBLAS call, failing the function with RS_ECUDA and naming the call, file and line. */
#define CUBLASCHECK(err, call)                                                                               \
	do {                                                                                                 \
		cublasStatus_t rs__bs = (call);                                                              \
		if (rs__bs != CUBLAS_STATUS_SUCCESS)                                                         \
			return rs_err_set(err, RS_ECUDA, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call, \
					  blas.status_string(rs__bs));                                       \
	} while (0)

int rs_cuda_devices(const char **why)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		if (why)
			*why = cudaGetErrorString(e);
		return 0;
	}
	if (why)
		*why = n ? "" : "no CUDA device";
	return n;
}

static struct cudaMemLocation on_device(int device)
{
	struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = device};
	return loc;
}

/* Make this thread use the engine's device (threads of one process may hold engines of several). */
static rs_status use_device(cuda_engine *c, rs_err *err)
{
	CUDACHECK(err, cudaSetDevice(c->device));
	return RS_OK;
}

static void *cuda_alloc(rs_engine *e, size_t len, rs_err *err)
{
	cuda_engine *c = (cuda_engine *)e;
	void *p = NULL;
	if (use_device(c, err) != RS_OK)
		return NULL;
	cudaError_t ce = cudaMallocManaged(&p, len, cudaMemAttachGlobal);
	if (ce != cudaSuccess) {
		rs_err_set(err, RS_ENOMEM, "shard memory: cudaMallocManaged of %zu bytes: %s", len, cudaGetErrorString(ce));
		return NULL;
	}
	/* pages live on the device; the host's rare accesses migrate them */
	ce = cudaMemAdvise(p, len, cudaMemAdviseSetPreferredLocation, on_device(c->device));
	if (ce == cudaSuccess)
		ce = cudaMemsetAsync(p, 0, len, c->stream);
	if (ce == cudaSuccess)
		ce = cudaStreamSynchronize(c->stream);
	if (ce != cudaSuccess) {
		rs_err_set(err, RS_ECUDA, "shard memory of %zu bytes: %s", len, cudaGetErrorString(ce));
		cudaFree(p);
		return NULL;
	}
	return p;
}

static void cuda_free(rs_engine *e, void *p, size_t len)
{
	cuda_engine *c = (cuda_engine *)e;
	cudaError_t ce = cudaSetDevice(c->device);
	if (ce == cudaSuccess)
		ce = cudaFree(p);
	if (ce != cudaSuccess)
		RS_WARN("cudaFree of %zu bytes of shard memory: %s", len, cudaGetErrorString(ce));
}

/* Managed pages are at most this large; a range released is cut inward to it. */
#define MANAGED_PAGE ((uintptr_t)2 << 20)

static void cuda_release(rs_engine *e, void *p, size_t len)
{
	cuda_engine *c = (cuda_engine *)e;
	uintptr_t lo = ((uintptr_t)p + MANAGED_PAGE - 1) / MANAGED_PAGE * MANAGED_PAGE;
	uintptr_t hi = ((uintptr_t)p + len) / MANAGED_PAGE * MANAGED_PAGE;
	if (hi <= lo)
		return;
	/* the rows that moved away: their pages go back, device and host alike */
	void *ptr = (void *)lo;
	size_t n = (size_t)(hi - lo);
	cudaError_t ce = cudaSetDevice(c->device);
	if (ce == cudaSuccess)
		ce = cudaMemDiscardBatchAsync(&ptr, &n, 1, 0, c->stream);
	if (ce == cudaSuccess)
		ce = cudaStreamSynchronize(c->stream);
	if (ce != cudaSuccess) /* the memory stays taken until its last shard goes */
		RS_WARN("discarding %zu unused bytes of shard memory: %s", n, cudaGetErrorString(ce));
}

static void cuda_prefetch(rs_engine *e, void *p, size_t len, int to_host)
{
	cuda_engine *c = (cuda_engine *)e;
	struct cudaMemLocation loc = to_host ? (struct cudaMemLocation){.type = cudaMemLocationTypeHost, .id = 0}
					     : on_device(c->device);
	cudaError_t ce = cudaSetDevice(c->device);
	if (ce == cudaSuccess && len)
		ce = cudaMemPrefetchAsync(p, len, loc, 0, c->stream);
	if (ce == cudaSuccess)
		ce = cudaStreamSynchronize(c->stream);
	if (ce != cudaSuccess) /* only a hint: the pages still migrate on access */
		RS_WARN("prefetching %zu bytes of shard memory to the %s: %s", len, to_host ? "host" : "device",
			cudaGetErrorString(ce));
}

/* Device room for `bytes` of batch, and a workspace for nids ids of width dim. */
static rs_status reserve(cuda_engine *c, size_t bytes, int64_t nids, int32_t dim, rs_err *err)
{
	RSCHECK(use_device(c, err));
	if (bytes > c->d_cap) {
		size_t cap = bytes > 2 * c->d_cap ? bytes : 2 * c->d_cap;
		CUDACHECK(err, cudaFree(c->d_buf));
		c->d_buf = NULL, c->d_cap = 0;
		CUDACHECK(err, cudaMalloc(&c->d_buf, cap));
		c->d_cap = cap;
	}
	if (nids < 1)
		nids = 1;
	if (!c->ws || nids > c->ws_ids || dim > c->ws_dim) {
		int64_t ids = c->ws_ids;
		if (nids > ids) /* grown by doubling, within the kernels' int32 counts */
			ids = nids > 2 * ids ? nids : 2 * ids < INT32_MAX ? 2 * ids : INT32_MAX;
		int32_t d = dim > c->ws_dim ? dim : c->ws_dim;
		rs_cuda_emb_ws_destroy(c->ws);
		c->ws = NULL;
		RSCHECK(rs_cuda_emb_ws_create(ids, d, &c->ws, err));
		c->ws_ids = ids, c->ws_dim = d;
	}
	return RS_OK;
}

/* Offsets (rounded up to 8 bytes), then ids: the layout at the start of the batch buffer. */
static size_t ids_at(int32_t nbags) { return ((sizeof(int32_t) * (size_t)(nbags + 1)) + 7) / 8 * 8; }

/*
 * A batch of nbags > 0 bags on the device: its offsets (*d_off) and ids
 * (*d_ids, *nids of them) copied in, and room for one row of s->dim floats
 * per bag after them (*d_rows: the outputs or the gradients).
 */
static rs_status load_bags(cuda_engine *c, const rs_emb_shard *s, const int32_t *offsets, int32_t nbags,
			   const int64_t *ids, const int32_t **d_off, const int64_t **d_ids, int64_t *nids,
			   float **d_rows, rs_err *err)
{
	*nids = offsets[nbags];
	size_t at_rows = ids_at(nbags) + sizeof(int64_t) * (size_t)*nids;
	RSCHECK(reserve(c, at_rows + sizeof(float) * (size_t)s->dim * (size_t)nbags, *nids, s->dim, err));
	char *d = c->d_buf;
	CUDACHECK(err, cudaMemcpyAsync(d, offsets, sizeof(int32_t) * (size_t)(nbags + 1), cudaMemcpyHostToDevice,
				       c->stream));
	if (*nids)
		CUDACHECK(err, cudaMemcpyAsync(d + ids_at(nbags), ids, sizeof(int64_t) * (size_t)*nids,
					       cudaMemcpyHostToDevice, c->stream));
	*d_off = (const int32_t *)d;
	*d_ids = (const int64_t *)(d + ids_at(nbags));
	*d_rows = (float *)(d + at_rows);
	return RS_OK;
}

static rs_status run_forward(rs_engine *e, const rs_emb_shard *s, const int32_t *offsets, int32_t nbags,
			      const int64_t *ids, rs_pooling pooling, float *out, int64_t out_stride, rs_err *err)
{
	cuda_engine *c = (cuda_engine *)e;
	const int32_t *d_off;
	const int64_t *d_ids;
	float *d_out;
	int64_t nids;
	size_t row = sizeof(float) * (size_t)s->dim;
	if (nbags <= 0)
		return RS_OK;
	RSCHECK(load_bags(c, s, offsets, nbags, ids, &d_off, &d_ids, &nids, &d_out, err));
	RSCHECK(rs_cuda_emb_forward(s, d_off, nbags, d_ids, nids, pooling, d_out, s->dim, c->ws, c->stream, err));
	CUDACHECK(err, cudaMemcpy2DAsync(out, sizeof(float) * (size_t)out_stride, d_out, row, row, (size_t)nbags,
					 cudaMemcpyDeviceToHost, c->stream));
	return rs_cuda_emb_ws_check(c->ws, c->stream, err);
}

static rs_status run_backward(rs_engine *e, rs_emb_shard *s, rs_emb_workspace *ws, rs_emb_grad *g,
			       const int32_t *offsets, int32_t nbags, const int64_t *ids, rs_pooling pooling,
			       const float *grad_out, int64_t grad_stride, const rs_optimizer_config *opt, int64_t step,
			       rs_err *err)
{
	cuda_engine *c = (cuda_engine *)e;
	const int32_t *d_off;
	const int64_t *d_ids;
	float *d_grad;
	int64_t nids;
	size_t row = sizeof(float) * (size_t)s->dim;
	(void)ws, (void)g; /* the CPU's scratch: the device has its own */
	if (nbags <= 0)
		return RS_OK;
	RSCHECK(load_bags(c, s, offsets, nbags, ids, &d_off, &d_ids, &nids, &d_grad, err));
	CUDACHECK(err, cudaMemcpy2DAsync(d_grad, row, grad_out, sizeof(float) * (size_t)grad_stride, row, (size_t)nbags,
					 cudaMemcpyHostToDevice, c->stream));
	RSCHECK(rs_cuda_emb_backward(s, d_off, nbags, d_ids, nids, pooling, d_grad, s->dim, opt, step, c->ws, c->stream,
				     err));
	return rs_cuda_emb_ws_check(c->ws, c->stream, err);
}

static rs_status run_apply(rs_engine *e, rs_emb_shard *s, const rs_emb_grad *g, const rs_optimizer_config *opt,
			    int64_t step, rs_err *err)
{
	cuda_engine *c = (cuda_engine *)e;
	if (g->n <= 0)
		return RS_OK;
	if (g->n > INT32_MAX)
		return rs_err_set(err, RS_EUNSUPPORTED, "cuda apply: %lld rows at once", (long long)g->n);
	int32_t n = (int32_t)g->n;
	size_t rows_b = sizeof(int64_t) * (size_t)n, grad_b = sizeof(float) * (size_t)n * (size_t)s->dim;
	RSCHECK(reserve(c, 8 + rows_b + grad_b, 1, s->dim, err));
	char *d = c->d_buf;
	CUDACHECK(err, cudaMemcpyAsync(d, &n, sizeof(n), cudaMemcpyHostToDevice, c->stream));
	CUDACHECK(err, cudaMemcpyAsync(d + 8, g->rows, rows_b, cudaMemcpyHostToDevice, c->stream));
	CUDACHECK(err, cudaMemcpyAsync(d + 8 + rows_b, g->grad, grad_b, cudaMemcpyHostToDevice, c->stream));
	RSCHECK(rs_cuda_emb_apply(s, (const int64_t *)(d + 8), (const float *)(d + 8 + rows_b), (const int32_t *)d, n,
				  opt, step, c->stream, err));
	/* the host's n and rows must outlive the copies: wait */
	CUDACHECK(err, cudaStreamSynchronize(c->stream));
	return RS_OK;
}

/*
 * Row-major C[m x n] = op(A) op(B) + beta C with cuBLAS (column-major): the
 * same memory read column-major is C^T = op(B)^T op(A)^T, so B goes first.
 * IEEE fp32 arithmetic (no TF32): the dense network is small, and CPU and
 * GPU runs should differ by summation order only.
 */
static rs_status run_gemm(cuda_engine *c, int ta, int tb, int32_t m, int32_t n, int32_t k, const float *a,
			  const float *b, float beta, float *cm, rs_err *err)
{
	size_t na = (size_t)m * (size_t)k, nb = (size_t)k * (size_t)n, nc = (size_t)m * (size_t)n;
	if (m <= 0 || n <= 0)
		return RS_OK;
	RSCHECK(use_device(c, err));
	if (na + nb + nc > c->g_cap) {
		size_t cap = na + nb + nc > 2 * c->g_cap ? na + nb + nc : 2 * c->g_cap;
		CUDACHECK(err, cudaFree(c->g_buf));
		c->g_buf = NULL, c->g_cap = 0;
		CUDACHECK(err, cudaMalloc((void **)&c->g_buf, sizeof(float) * cap));
		c->g_cap = cap;
	}
	float *da = c->g_buf, *db = da + na, *dc = db + nb, one = 1.0f;
	if (k > 0) {
		CUDACHECK(err, cudaMemcpyAsync(da, a, sizeof(float) * na, cudaMemcpyHostToDevice, c->stream));
		CUDACHECK(err, cudaMemcpyAsync(db, b, sizeof(float) * nb, cudaMemcpyHostToDevice, c->stream));
	}
	if (beta != 0)
		CUDACHECK(err, cudaMemcpyAsync(dc, cm, sizeof(float) * nc, cudaMemcpyHostToDevice, c->stream));
	if (k > 0) {
		CUBLASCHECK(err, blas.sgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
					     &one, db, tb ? k : n, da, ta ? m : k, &beta, dc, n));
	} else if (beta == 0) {
		CUDACHECK(err, cudaMemsetAsync(dc, 0, sizeof(float) * nc, c->stream));
	}
	CUDACHECK(err, cudaMemcpyAsync(cm, dc, sizeof(float) * nc, cudaMemcpyDeviceToHost, c->stream));
	CUDACHECK(err, cudaStreamSynchronize(c->stream));
	return RS_OK;
}


static void cuda_destroy(rs_engine *e)
{
	cuda_engine *c = (cuda_engine *)e;
	if (cudaSetDevice(c->device) == cudaSuccess) {
		if (c->blas)
			blas.destroy(c->blas);
		cudaFree(c->g_buf);
		rs_cuda_emb_ws_destroy(c->ws);
		cudaFree(c->d_buf);
		if (c->stream)
			cudaStreamDestroy(c->stream);
	}
	free(c);
}

/*
 * After a failed call: wait for what it queued (copies may still read the
 * caller's buffers) and clear the flags it may have raised, so that the
 * next call starts clean.
 */
static rs_status settle(cuda_engine *c, rs_status st)
{
	if (st == RS_OK)
		return st;
	if (c->ws)
		(void)rs_cuda_emb_ws_check(c->ws, c->stream, NULL);
	else
		(void)cudaStreamSynchronize(c->stream);
	return st;
}

static rs_status cuda_forward(rs_engine *e, const rs_emb_shard *s, const int32_t *offsets, int32_t nbags,
			      const int64_t *ids, rs_pooling pooling, float *out, int64_t out_stride, rs_err *err)
{
	return settle((cuda_engine *)e, run_forward(e, s, offsets, nbags, ids, pooling, out, out_stride, err));
}

static rs_status cuda_backward(rs_engine *e, rs_emb_shard *s, rs_emb_workspace *ws, rs_emb_grad *g,
			       const int32_t *offsets, int32_t nbags, const int64_t *ids, rs_pooling pooling,
			       const float *grad_out, int64_t grad_stride, const rs_optimizer_config *opt, int64_t step,
			       rs_err *err)
{
	return settle((cuda_engine *)e, run_backward(e, s, ws, g, offsets, nbags, ids, pooling, grad_out, grad_stride,
						     opt, step, err));
}

static rs_status cuda_apply(rs_engine *e, rs_emb_shard *s, const rs_emb_grad *g, const rs_optimizer_config *opt,
			    int64_t step, rs_err *err)
{
	return settle((cuda_engine *)e, run_apply(e, s, g, opt, step, err));
}

static rs_status cuda_gemm(void *e, int ta, int tb, int32_t m, int32_t n, int32_t k, const float *a, const float *b,
			   float beta, float *cm)
{
	cuda_engine *c = e;
	rs_err err = {0};
	rs_status st = settle(c, run_gemm(c, ta, tb, m, n, k, a, b, beta, cm, &err));
	if (st != RS_OK)
		RS_ERROR("dense network: %s", err.msg);
	return st;
}

static const rs_engine_ops cuda_ops = {
	.alloc = cuda_alloc,
	.free = cuda_free,
	.release = cuda_release,
	.prefetch = cuda_prefetch,
	.forward = cuda_forward,
	.backward = cuda_backward,
	.apply = cuda_apply,
	.gemm = cuda_gemm,
	.destroy = cuda_destroy,
};

rs_status rs_engine_cuda_create(int device, rs_engine **out, rs_err *err)
{
	const char *why;
	int n = rs_cuda_devices(&why);
	*out = NULL;
	if (device < 0 || device >= n)
		return rs_err_set(err, RS_ECUDA, "CUDA device %d: %s", device,
				  n ? "no such device" : why);
	int managed = 0;
	CUDACHECK(err, cudaDeviceGetAttribute(&managed, cudaDevAttrConcurrentManagedAccess, device));
	if (!managed)
		return rs_err_set(err, RS_EUNSUPPORTED,
				  "CUDA device %d: no concurrent managed access (shards live in managed memory)", device);
	cuda_engine *c = calloc(1, sizeof(*c));
	if (!c)
		return rs_err_set(err, RS_ENOMEM, "CUDA engine: out of memory");
	c->base.ops = &cuda_ops;
	c->device = device;
	snprintf(c->base.name, sizeof(c->base.name), "cuda:%d", device);
	rs_status st;
	CUDACHECKGOTO(err, cudaSetDevice(device), st, fail);
	CUDACHECKGOTO(err, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), st, fail);
	if (pthread_once(&blas_once, load_blas) != 0 || blas.why[0]) {
		st = rs_err_set(err, RS_ECUDA, "cuBLAS: %s", blas.why[0] ? blas.why : "pthread_once failed");
		goto fail;
	}
	cublasStatus_t bs = blas.create(&c->blas);
	if (bs == CUBLAS_STATUS_SUCCESS)
		bs = blas.set_stream(c->blas, c->stream);
	if (bs == CUBLAS_STATUS_SUCCESS)
		bs = blas.set_math_mode(c->blas, CUBLAS_PEDANTIC_MATH);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		st = rs_err_set(err, RS_ECUDA, "%s:%d: setting up cuBLAS failed: %s", __FILE__, __LINE__,
				blas.status_string(bs));
		goto fail;
	}
	*out = &c->base;
	return RS_OK;
fail:
	cuda_destroy(&c->base);
	return st;
}
