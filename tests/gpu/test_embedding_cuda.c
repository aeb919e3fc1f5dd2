/*
 * test_embedding_cuda.c - tests kernels/cuda/embedding.cu against the CPU
 * reference (kernels/embedding_cpu.c) on random inputs: forward, the fused
 * backward for SGD / row-wise Adagrad / Adam, the split backward
 * (grad_reduce then apply), and pack/unpack, for fp32, fp16 and bf16
 * weights, sum and mean pooling. Edge cases: empty bags (mean pooling of
 * empty bags included), repeated ids in one bag and across bags, a very long
 * bag, -1 ids, offsets not starting at 0, dims that are not a multiple of a
 * warp or exceed a block, bad ids and bad rows reported, a too small buffer.
 *
 * The kernels are written to give the CPU's results bit for bit, so the
 * tolerance is 0 ulps; RS_GPU_ULP=N relaxes it (every case prints the
 * largest difference it saw either way).
 */
#include "common/config.h"
#include "kernels/cuda/embedding_cuda.h"
#include "kernels/embedding.h"
#include "tests/gpu/gpu_test.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)((double)(gpu_test_rand() >> 11) / 9007199254740992.0); }

static int64_t ulp_tol;

/* Distance in units in the last place between two floats (0 when bit-equal). */
static int64_t ulps32(float a, float b)
{
	int32_t ia, ib;
	memcpy(&ia, &a, 4);
	memcpy(&ib, &b, 4);
	if (ia < 0)
		ia = (int32_t)(0x80000000u - (uint32_t)ia);
	if (ib < 0)
		ib = (int32_t)(0x80000000u - (uint32_t)ib);
	return llabs((int64_t)ia - (int64_t)ib);
}

static int64_t ulps16(uint16_t a, uint16_t b)
{
	int32_t ia = a & 0x8000 ? -(int32_t)(a & 0x7fff) : a, ib = b & 0x8000 ? -(int32_t)(b & 0x7fff) : b;
	return llabs((int64_t)ia - (int64_t)ib);
}

/* Largest ulp distance between two arrays of n elements of dtype dt (16-bit or fp32). */
static int64_t max_ulps(const void *a, const void *b, int64_t n, int elem16)
{
	int64_t m = 0;
	for (int64_t i = 0; i < n; i++) {
		int64_t d = elem16 ? ulps16(((const uint16_t *)a)[i], ((const uint16_t *)b)[i])
				   : ulps32(((const float *)a)[i], ((const float *)b)[i]);
		if (d > m)
			m = d;
	}
	return m;
}

static void *to_dev(const void *h, size_t bytes)
{
	void *d = NULL;
	GPU_CUDA(cudaMalloc(&d, bytes ? bytes : 1));
	if (bytes)
		GPU_CUDA(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	return d;
}

static void from_dev(void *h, const void *d, size_t bytes)
{
	if (bytes)
		GPU_CUDA(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

typedef struct gcase {
	const char *name;
	int64_t nrows;
	int32_t dim;
	rs_dtype dtype;
	rs_pooling pooling;
	rs_optimizer opt;
	int32_t nbags;
	int32_t max_len;     /* bag lengths uniform in [0, max_len] */
	int64_t id_range;    /* ids drawn from [0, id_range): small means many repeats */
	int neg_every;       /* every this many ids is -1 (0: none) */
	int32_t first_offset; /* offsets[0] */
	int32_t long_bag;    /* length of one extra very long bag (0: none) */
} gcase;

/* A shard on the host with random weights and plausible optimizer state. */
static rs_emb_shard make_shard(const gcase *c)
{
	rs_emb_shard s = {0};
	int64_t n = c->nrows * c->dim, sf = rs_emb_state_floats(c->opt, c->dim);
	s.dtype = c->dtype;
	s.nrows = c->nrows;
	s.dim = c->dim;
	s.weights = malloc((size_t)n * (size_t)rs_dtype_size(c->dtype) + 1);
	for (int64_t i = 0; i < n; i++)
		rs_emb_set(s.weights, c->dtype, i, uniform(-1.0f, 1.0f));
	if (sf) {
		s.state = malloc(sizeof(float) * (size_t)(c->nrows * sf));
		for (int64_t r = 0; r < c->nrows; r++)
			for (int64_t k = 0; k < sf; k++) /* Adagrad's accumulator and Adam's v are >= 0 */
				s.state[r * sf + k] = c->opt == RS_OPT_ADAM && k < c->dim ? uniform(-0.1f, 0.1f)
											 : uniform(0.0f, 0.5f);
	}
	return s;
}

static size_t weight_bytes(const rs_emb_shard *s) { return (size_t)(s->nrows * s->dim) * (size_t)rs_dtype_size(s->dtype); }
static size_t state_bytes(const rs_emb_shard *s, rs_optimizer o) { return sizeof(float) * (size_t)(s->nrows * rs_emb_state_floats(o, s->dim)); }

/* A device copy of a host shard (same struct, device pointers). */
static rs_emb_shard shard_to_dev(const rs_emb_shard *h, rs_optimizer o)
{
	rs_emb_shard d = *h;
	d.weights = to_dev(h->weights, weight_bytes(h));
	d.state = h->state ? to_dev(h->state, state_bytes(h, o)) : NULL;
	return d;
}

static void shard_dev_free(rs_emb_shard *d)
{
	GPU_CUDA(cudaFree(d->weights));
	if (d->state)
		GPU_CUDA(cudaFree(d->state));
}

/* Compare a device shard with a host one; returns the largest ulp distance seen. */
static int64_t compare_shard(const char *what, const gcase *c, const rs_emb_shard *h, const rs_emb_shard *d)
{
	size_t wb = weight_bytes(h), sb = state_bytes(h, c->opt);
	void *w = malloc(wb + 1), *st = malloc(sb + 1);
	from_dev(w, d->weights, wb);
	from_dev(st, d->state, sb);
	int64_t mw = max_ulps(h->weights, w, h->nrows * h->dim, h->dtype != RS_DTYPE_FP32);
	int64_t ms = sb ? max_ulps(h->state, st, (int64_t)(sb / 4), 0) : 0;
	GPU_CHECK(mw <= ulp_tol, "%s: %s: weights differ from the CPU's by %lld ulps", c->name, what, (long long)mw);
	GPU_CHECK(ms <= ulp_tol, "%s: %s: optimizer state differs from the CPU's by %lld ulps", c->name, what, (long long)ms);
	free(st);
	free(w);
	return mw > ms ? mw : ms;
}

static void run_case(const gcase *c)
{
	rs_err err = {{0}};
	rs_status st;
	int32_t nbags = c->nbags + (c->long_bag ? 1 : 0);
	int32_t *offsets = malloc(sizeof(int32_t) * (size_t)(nbags + 1));
	offsets[0] = c->first_offset;
	for (int32_t i = 0; i < nbags; i++) {
		int32_t len = i == c->nbags / 2 && c->long_bag ? c->long_bag : (int32_t)(gpu_test_rand() % (uint64_t)(c->max_len + 1));
		if (i == c->nbags && c->long_bag) /* the extra bag: short, after the long one */
			len = 1;
		offsets[i + 1] = offsets[i] + len;
	}
	int64_t nids = offsets[nbags];
	int64_t *ids = malloc(sizeof(int64_t) * (size_t)(nids + 1));
	for (int64_t j = 0; j < nids; j++)
		ids[j] = c->neg_every && j % c->neg_every == 0 ? -1 : (int64_t)(gpu_test_rand() % (uint64_t)c->id_range);
	float *grad_out = malloc(sizeof(float) * (size_t)nbags * (size_t)c->dim + 1);
	for (int64_t k = 0; k < (int64_t)nbags * c->dim; k++)
		grad_out[k] = uniform(-1.0f, 1.0f);
	rs_optimizer_config opt = {.kind = c->opt, .lr = 0.05f, .eps = 1e-8f, .beta1 = 0.9f, .beta2 = 0.999f};
	int64_t step = 3;

	rs_emb_shard hs = make_shard(c), ds = shard_to_dev(&hs, c->opt);
	int32_t *d_off = to_dev(offsets, sizeof(int32_t) * (size_t)(nbags + 1));
	int64_t *d_ids = to_dev(ids, sizeof(int64_t) * (size_t)nids);
	float *d_gout = to_dev(grad_out, sizeof(float) * (size_t)nbags * (size_t)c->dim);
	rs_cuda_emb_ws *ws = NULL;
	cudaStream_t stream;
	GPU_CUDA(cudaStreamCreate(&stream));
	st = rs_cuda_emb_ws_create(nids > 0 ? nids : 1, c->dim, &ws, &err);
	GPU_CHECK(st == RS_OK, "%s: workspace: %s", c->name, err.msg);
	if (st != RS_OK)
		exit(gpu_test_summary("test_embedding_cuda"));

	/* forward (into a strided output, to check out_stride) */
	int64_t stride = c->dim + 3;
	size_t ob = sizeof(float) * (size_t)nbags * (size_t)stride + 1;
	float *out_cpu = calloc(1, ob), *out_gpu = calloc(1, ob), *d_out = to_dev(out_cpu, ob);
	st = rs_emb_forward(&hs, offsets, nbags, ids, c->pooling, out_cpu, stride);
	GPU_CHECK(st == RS_OK, "%s: CPU forward: %s", c->name, rs_status_str(st));
	st = rs_cuda_emb_forward(&ds, d_off, nbags, d_ids, nids, c->pooling, d_out, stride, ws, stream, &err);
	GPU_CHECK(st == RS_OK, "%s: forward: %s", c->name, err.msg);
	st = rs_cuda_emb_ws_check(ws, stream, &err);
	GPU_CHECK(st == RS_OK, "%s: forward flagged: %s", c->name, err.msg);
	from_dev(out_gpu, d_out, ob);
	int64_t fwd = 0;
	for (int32_t i = 0; i < nbags; i++) {
		int64_t m = max_ulps(out_cpu + (int64_t)i * stride, out_gpu + (int64_t)i * stride, c->dim, 0);
		fwd = m > fwd ? m : fwd;
		for (int64_t k = c->dim; k < stride; k++) /* the gap between rows is not written */
			GPU_CHECK(out_gpu[(int64_t)i * stride + k] == 0.0f, "%s: forward wrote past dim in bag %d", c->name, i);
	}
	GPU_CHECK(fwd <= ulp_tol, "%s: forward differs from the CPU's by %lld ulps", c->name, (long long)fwd);

	/* the gradient alone: distinct rows and their sums, against rs_emb_grad_accumulate */
	rs_emb_workspace cws;
	rs_emb_grad g = {0};
	rs_emb_workspace_init(&cws, hs.nrows);
	st = rs_emb_grad_accumulate(&cws, &g, c->dim, offsets, nbags, ids, c->pooling, grad_out, c->dim);
	GPU_CHECK(st == RS_OK, "%s: CPU accumulate", c->name);
	const int64_t *d_rows;
	const float *d_grad;
	const int32_t *d_n;
	st = rs_cuda_emb_grad_reduce(hs.nrows, c->dim, d_off, nbags, d_ids, nids, c->pooling, d_gout, c->dim, ws, stream,
				     &d_rows, &d_grad, &d_n, &err);
	GPU_CHECK(st == RS_OK, "%s: grad_reduce: %s", c->name, err.msg);
	GPU_CUDA(cudaStreamSynchronize(stream));
	int32_t gn = 0;
	from_dev(&gn, d_n, sizeof(gn));
	GPU_CHECK(gn == g.n, "%s: %d distinct rows on the GPU, %lld on the CPU", c->name, gn, (long long)g.n);
	int64_t grad_ulps = 0;
	if (gn == g.n && gn > 0) {
		int64_t *rows = malloc(sizeof(int64_t) * (size_t)gn);
		float *gg = malloc(sizeof(float) * (size_t)gn * (size_t)c->dim);
		from_dev(rows, d_rows, sizeof(int64_t) * (size_t)gn);
		from_dev(gg, d_grad, sizeof(float) * (size_t)gn * (size_t)c->dim);
		for (int64_t k = 0; k < g.n; k++) {
			int32_t slot = cws.slot_of_row[rows[k]];
			GPU_CHECK(slot >= 0 && (k == 0 || rows[k] > rows[k - 1]), "%s: GPU row %lld not a CPU row, or out of order",
				  c->name, (long long)rows[k]);
			if (slot < 0)
				break;
			int64_t m = max_ulps(g.grad + (int64_t)slot * c->dim, gg + k * c->dim, c->dim, 0);
			grad_ulps = m > grad_ulps ? m : grad_ulps;
		}
		GPU_CHECK(grad_ulps <= ulp_tol, "%s: row gradients differ from the CPU's by %lld ulps", c->name,
			  (long long)grad_ulps);
		free(gg);
		free(rows);
	}

	/* split backward on a copy: apply the reduced gradient */
	rs_emb_shard ds2 = shard_to_dev(&hs, c->opt);
	st = rs_cuda_emb_apply(&ds2, d_rows, d_grad, d_n, nids, &opt, step, stream, &err);
	GPU_CHECK(st == RS_OK, "%s: apply: %s", c->name, err.msg);

	/* fused backward against the CPU's */
	st = rs_emb_backward(&hs, &cws, &g, offsets, nbags, ids, c->pooling, grad_out, c->dim, &opt, step);
	GPU_CHECK(st == RS_OK, "%s: CPU backward", c->name);
	st = rs_cuda_emb_backward(&ds, d_off, nbags, d_ids, nids, c->pooling, d_gout, c->dim, &opt, step, ws, stream, &err);
	GPU_CHECK(st == RS_OK, "%s: backward: %s", c->name, err.msg);
	st = rs_cuda_emb_ws_check(ws, stream, &err);
	GPU_CHECK(st == RS_OK, "%s: backward flagged: %s", c->name, err.msg);
	int64_t bwd = compare_shard("fused backward", c, &hs, &ds);
	int64_t split = compare_shard("grad_reduce + apply", c, &hs, &ds2);

	/* pack: random rows, runs of consecutive rows among them; byte-identical to the CPU's */
	int64_t np = c->nrows < 300 ? c->nrows : 300;
	int64_t *prow = malloc(sizeof(int64_t) * (size_t)np);
	for (int64_t i = 0; i < np; i++)
		prow[i] = i % 5 && i > 0 ? (prow[i - 1] + 1) % c->nrows : (int64_t)(gpu_test_rand() % (uint64_t)c->nrows);
	size_t pb = (size_t)np * rs_emb_packed_row_bytes(&hs, c->opt);
	char *pcpu = malloc(pb + 1), *pgpu = malloc(pb + 1);
	int64_t *d_prow = to_dev(prow, sizeof(int64_t) * (size_t)np);
	char *d_pbuf;
	GPU_CUDA(cudaMalloc((void **)&d_pbuf, pb + 1));
	/* the device shard now equals the host one up to ulp_tol: pack the host's to have the same bytes */
	shard_dev_free(&ds);
	ds = shard_to_dev(&hs, c->opt);
	GPU_CHECK(rs_emb_pack_rows(&hs, c->opt, prow, np, pcpu, pb) == RS_OK, "%s: CPU pack", c->name);
	st = rs_cuda_emb_pack_rows(&ds, c->opt, d_prow, np, d_pbuf, pb, ws, stream, &err);
	GPU_CHECK(st == RS_OK && rs_cuda_emb_ws_check(ws, stream, &err) == RS_OK, "%s: pack: %s", c->name, err.msg);
	from_dev(pgpu, d_pbuf, pb);
	GPU_CHECK(!memcmp(pcpu, pgpu, pb), "%s: packed rows differ from the CPU's", c->name);
	/* unpack the CPU's bytes into a zeroed device shard; the CPU unpacks into a zeroed host one */
	rs_emb_shard hz = hs, dz;
	hz.weights = calloc(1, weight_bytes(&hs) + 1);
	hz.state = hs.state ? calloc(1, state_bytes(&hs, c->opt) + 4) : NULL;
	dz = shard_to_dev(&hz, c->opt);
	GPU_CUDA(cudaMemcpy(d_pbuf, pcpu, pb, cudaMemcpyHostToDevice));
	GPU_CHECK(rs_emb_unpack_rows(&hz, c->opt, prow, np, pcpu, pb) == RS_OK, "%s: CPU unpack", c->name);
	st = rs_cuda_emb_unpack_rows(&dz, c->opt, d_prow, np, d_pbuf, pb, ws, stream, &err);
	GPU_CHECK(st == RS_OK && rs_cuda_emb_ws_check(ws, stream, &err) == RS_OK, "%s: unpack: %s", c->name, err.msg);
	{
		size_t wb = weight_bytes(&hz), sb = state_bytes(&hz, c->opt);
		char *w = malloc(wb + 1), *s = malloc(sb + 1);
		from_dev(w, dz.weights, wb);
		from_dev(s, dz.state, sb);
		GPU_CHECK(!memcmp(w, hz.weights, wb) && (!sb || !memcmp(s, hz.state, sb)),
			  "%s: unpacked shard differs from the CPU's", c->name);
		free(s);
		free(w);
	}
	/* a too small buffer, and a row outside the shard: nothing copied, reported */
	st = rs_cuda_emb_pack_rows(&ds, c->opt, d_prow, np, d_pbuf, pb - 1, ws, stream, &err);
	GPU_CHECK(np == 0 || st == RS_ENOSPACE, "%s: pack into a short buffer: %s", c->name, rs_status_str(st));
	if (np > 0) {
		int64_t bad = c->nrows;
		GPU_CUDA(cudaMemcpy(d_prow + np - 1, &bad, sizeof(bad), cudaMemcpyHostToDevice));
		GPU_CUDA(cudaMemset(d_pbuf, 0x5a, pb));
		memset(&err, 0, sizeof(err));
		st = rs_cuda_emb_unpack_rows(&dz, c->opt, d_prow, np, d_pbuf, pb, ws, stream, &err);
		GPU_CHECK(st == RS_OK, "%s: unpack with a bad row: queued", c->name);
		st = rs_cuda_emb_ws_check(ws, stream, &err);
		GPU_CHECK(st == RS_EINVAL, "%s: unpack with a bad row: %s", c->name, rs_status_str(st));
		char *w = malloc(weight_bytes(&hz) + 1);
		from_dev(w, dz.weights, weight_bytes(&hz));
		GPU_CHECK(!memcmp(w, hz.weights, weight_bytes(&hz)), "%s: unpack with a bad row wrote rows", c->name);
		free(w);
	}
	memset(&err, 0, sizeof(err));

	printf("%-28s %7lld ids %5d bags  dim %4d %-4s %-4s %-15s  max ulps: fwd %lld grad %lld bwd %lld split %lld\n",
	       c->name, (long long)nids, nbags, c->dim, rs_dtype_name(c->dtype), c->pooling == RS_POOL_MEAN ? "mean" : "sum",
	       rs_optimizer_name(c->opt), (long long)fwd, (long long)grad_ulps, (long long)bwd, (long long)split);

	shard_dev_free(&dz);
	free(hz.weights);
	free(hz.state);
	GPU_CUDA(cudaFree(d_pbuf));
	GPU_CUDA(cudaFree(d_prow));
	free(pgpu);
	free(pcpu);
	free(prow);
	shard_dev_free(&ds2);
	rs_emb_grad_free(&g);
	rs_emb_workspace_free(&cws);
	GPU_CUDA(cudaFree(d_out));
	free(out_gpu);
	free(out_cpu);
	rs_cuda_emb_ws_destroy(ws);
	GPU_CUDA(cudaStreamDestroy(stream));
	GPU_CUDA(cudaFree(d_gout));
	GPU_CUDA(cudaFree(d_ids));
	GPU_CUDA(cudaFree(d_off));
	shard_dev_free(&ds);
	free(hs.weights);
	free(hs.state);
	free(grad_out);
	free(ids);
	free(offsets);
}

/* Ids outside [-1, nrows) are flagged by forward and backward, and do not update anything. */
static void bad_ids(void)
{
	rs_err err = {{0}};
	gcase c = {.name = "bad ids", .nrows = 10, .dim = 8, .opt = RS_OPT_SGD};
	rs_emb_shard hs = make_shard(&c), ds = shard_to_dev(&hs, c.opt);
	int32_t off[3] = {0, 2, 4};
	int64_t bad[2][4] = {{1, 10, 2, 3}, {1, -2, 2, 3}};
	float gout[16];
	for (int i = 0; i < 16; i++)
		gout[i] = 1.0f;
	rs_optimizer_config opt = {.kind = RS_OPT_SGD, .lr = 0.5f};
	int32_t *d_off = to_dev(off, sizeof(off));
	float *d_g = to_dev(gout, sizeof(gout)), *d_out;
	GPU_CUDA(cudaMalloc((void **)&d_out, sizeof(float) * 16));
	rs_cuda_emb_ws *ws;
	GPU_CHECK(rs_cuda_emb_ws_create(4, 8, &ws, &err) == RS_OK, "bad ids: workspace: %s", err.msg);
	for (int k = 0; k < 2; k++) {
		int64_t *d_ids = to_dev(bad[k], sizeof(bad[k]));
		memset(&err, 0, sizeof(err));
		rs_status st = rs_cuda_emb_forward(&ds, d_off, 2, d_ids, 4, RS_POOL_SUM, d_out, 8, ws, 0, &err);
		GPU_CHECK(st == RS_OK && rs_cuda_emb_ws_check(ws, 0, &err) == RS_EINVAL, "forward with id %lld not flagged",
			  (long long)bad[k][1]);
		GPU_CHECK(rs_cuda_emb_ws_check(ws, 0, &err) == RS_OK, "the flag is not cleared by a check");
		st = rs_cuda_emb_backward(&ds, d_off, 2, d_ids, 4, RS_POOL_SUM, d_g, 8, &opt, 1, ws, 0, &err);
		GPU_CHECK(st == RS_OK && rs_cuda_emb_ws_check(ws, 0, &err) == RS_EINVAL, "backward with id %lld not flagged",
			  (long long)bad[k][1]);
		GPU_CUDA(cudaFree(d_ids));
	}
	/* rows 1, 2, 3 were updated twice (once per call), every other row never */
	float *w = malloc(sizeof(float) * 80);
	from_dev(w, ds.weights, sizeof(float) * 80);
	for (int64_t r = 0; r < 10; r++)
		for (int c2 = 0; c2 < 8; c2++) {
			float want = ((float *)hs.weights)[r * 8 + c2];
			if (r >= 1 && r <= 3)
				want = (want - 0.5f) - 0.5f;
			GPU_CHECK(w[r * 8 + c2] == want, "bad ids: row %lld col %d is %g, want %g", (long long)r, c2, w[r * 8 + c2],
				  want);
		}
	/* host-visible argument errors come back at the call */
	memset(&err, 0, sizeof(err));
	GPU_CHECK(rs_cuda_emb_forward(&ds, d_off, 2, NULL, 5, RS_POOL_SUM, d_out, 8, ws, 0, &err) == RS_ENOSPACE,
		  "more ids than the workspace takes");
	GPU_CHECK(rs_cuda_emb_forward(&ds, d_off, 2, NULL, 4, RS_POOL_SUM, d_out, 7, ws, 0, &err) == RS_EINVAL,
		  "out_stride below dim");
	free(w);
	rs_cuda_emb_ws_destroy(ws);
	GPU_CUDA(cudaFree(d_out));
	GPU_CUDA(cudaFree(d_g));
	GPU_CUDA(cudaFree(d_off));
	shard_dev_free(&ds);
	free(hs.weights);
	free(hs.state);
}

int main(void)
{
	gpu_test_require_device("test_embedding_cuda");
	const char *tol = getenv("RS_GPU_ULP");
	ulp_tol = tol ? atoll(tol) : 0;
	static const gcase cases[] = {
		{"fp32 sum sgd", 1000, 64, RS_DTYPE_FP32, RS_POOL_SUM, RS_OPT_SGD, 512, 20, 1000, 0, 0, 0},
		{"fp32 mean adagrad, repeats", 500, 128, RS_DTYPE_FP32, RS_POOL_MEAN, RS_OPT_ROWWISE_ADAGRAD, 400, 30, 50, 7, 0, 0},
		{"fp16 sum adagrad", 2000, 32, RS_DTYPE_FP16, RS_POOL_SUM, RS_OPT_ROWWISE_ADAGRAD, 300, 10, 2000, 0, 0, 0},
		{"bf16 mean adam, dim 100", 700, 100, RS_DTYPE_BF16, RS_POOL_MEAN, RS_OPT_ADAM, 256, 12, 300, 11, 0, 0},
		{"fp32 adam, dim 1", 64, 1, RS_DTYPE_FP32, RS_POOL_SUM, RS_OPT_ADAM, 100, 8, 64, 0, 0, 0},
		{"fp16 sgd, dim 33", 300, 33, RS_DTYPE_FP16, RS_POOL_MEAN, RS_OPT_SGD, 200, 6, 300, 0, 0, 0},
		{"empty bags, mean", 100, 16, RS_DTYPE_FP32, RS_POOL_MEAN, RS_OPT_ROWWISE_ADAGRAD, 64, 0, 100, 0, 0, 0},
		{"no bags", 100, 16, RS_DTYPE_FP32, RS_POOL_SUM, RS_OPT_SGD, 0, 0, 100, 0, 0, 0},
		{"very long bag", 5000, 16, RS_DTYPE_FP32, RS_POOL_SUM, RS_OPT_ROWWISE_ADAGRAD, 64, 4, 100, 0, 0, 200000},
		{"very long bag, mean bf16", 5000, 48, RS_DTYPE_BF16, RS_POOL_MEAN, RS_OPT_SGD, 32, 4, 5000, 13, 0, 100000},
		{"offsets from 7", 400, 24, RS_DTYPE_FP32, RS_POOL_MEAN, RS_OPT_ADAM, 150, 9, 400, 0, 7, 0},
		{"dim 300 (> a block)", 800, 300, RS_DTYPE_FP32, RS_POOL_MEAN, RS_OPT_ROWWISE_ADAGRAD, 128, 10, 200, 0, 0, 0},
		{"one row, all repeats", 1, 8, RS_DTYPE_FP16, RS_POOL_SUM, RS_OPT_ROWWISE_ADAGRAD, 50, 5, 1, 4, 0, 0},
		{"big random batch", 100000, 128, RS_DTYPE_FP32, RS_POOL_SUM, RS_OPT_ROWWISE_ADAGRAD, 8192, 40, 100000, 0, 0, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i]);
	bad_ids();
	return gpu_test_summary("test_embedding_cuda");
}
