/*
 * bench_embedding.c - embedding-bag forward + backward (fused row-wise
 * Adagrad) on one CPU core: batch 4096, pooling factor 20, dims 16/64/128,
 * 1M-row fp32 tables, Zipf(1.05) ids. Reported as rows/s and GB/s beside
 * this machine's memory bandwidth measured in the same run (a STREAM-like
 * copy), and beside torch.nn.EmbeddingBag (sum, sparse gradients, SGD) on
 * the same shapes when Debian's python3-torch is installed.
 *
 * GB/s counts the row bytes the kernels must touch: every lookup reads a
 * row forward, and backward reads and writes each distinct row once. The
 * forward output is checked against a naive sum; a mismatch fails the run.
 */
#include "common/rng.h"
#include "kernels/embedding.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NROWS 1000000
#define BATCH 4096
#define POOL 20

static int wrong;
static const char *torch_python; /* a python3 that imports torch (Debian's python3-torch lives in /usr/bin/python3) */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Copy bandwidth (read + write bytes per second) over buffers far larger than the caches. */
static double stream_copy_gbs(void)
{
	size_t n = (size_t)64 << 20;
	char *a = malloc(n), *b = malloc(n);
	memset(a, 1, n);
	memset(b, 2, n);
	double best = 0;
	for (int rep = 0; rep < 5; rep++) {
		double t0 = now();
		memcpy(b, a, n);
		double t = now() - t0;
		best = fmax(best, 2.0 * (double)n / t / 1e9);
		a[rep] = b[n - 1 - (size_t)rep]; /* keep the copies observable */
	}
	free(a);
	free(b);
	return best;
}

/* torch.nn.EmbeddingBag on the same shapes: seconds per forward+backward+step, or < 0 when unavailable. */
static double torch_seconds(int32_t dim, int iters)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s tests/bench/torch_embedding_bag.py %d %d %d %d %d 2>/dev/null", torch_python,
		 NROWS, dim, BATCH, POOL, iters);
	FILE *p = popen(cmd, "r");
	double s = -1;
	if (!p)
		return -1;
	if (fscanf(p, "%lf", &s) != 1)
		s = -1;
	if (pclose(p) != 0)
		s = -1;
	return s;
}

static void bench_dim(int32_t dim, int iters, double mem_gbs, int have_torch)
{
	rs_rng r = rs_rng_make(3, (uint64_t)dim, 5);
	rs_zipf z;
	rs_zipf_init(&z, NROWS, 1.05);
	float *w = malloc(sizeof(float) * (size_t)NROWS * (size_t)dim), *acc = calloc(NROWS, sizeof(float));
	for (size_t i = 0; i < (size_t)NROWS * (size_t)dim; i++)
		w[i] = (float)(rs_rng_uniform(&r) - 0.5) * 0.01f;
	rs_emb_shard s = {.weights = w, .state = acc, .dtype = RS_DTYPE_FP32, .nrows = NROWS, .dim = dim};
	int32_t *off = malloc(sizeof(int32_t) * (BATCH + 1));
	int64_t *ids = malloc(sizeof(int64_t) * BATCH * POOL);
	float *out = malloc(sizeof(float) * BATCH * (size_t)dim), *gout = malloc(sizeof(float) * BATCH * (size_t)dim);
	for (int i = 0; i <= BATCH; i++)
		off[i] = i * POOL;
	for (int i = 0; i < BATCH * POOL; i++)
		ids[i] = (int64_t)(rs_mix64(rs_zipf_sample(&z, &r)) % NROWS); /* hot rows scattered */
	for (int i = 0; i < BATCH * dim; i++)
		gout[i] = (float)(rs_rng_uniform(&r) - 0.5);
	rs_emb_workspace ws;
	rs_emb_grad g = {0};
	rs_emb_workspace_init(&ws, NROWS);
	rs_optimizer_config opt = {.kind = RS_OPT_ROWWISE_ADAGRAD, .lr = 0.01f, .eps = 1e-8f};

	/* correctness of the forward on a few bags */
	rs_emb_forward(&s, off, BATCH, ids, RS_POOL_SUM, out, dim);
	for (int i = 0; i < BATCH; i += 97)
		for (int c = 0; c < dim; c++) {
			double want = 0;
			for (int j = off[i]; j < off[i + 1]; j++)
				want += w[ids[j] * dim + c];
			if (fabs(out[i * dim + c] - want) > 1e-4)
				wrong++;
		}

	double t0 = now();
	int64_t distinct = 0;
	for (int it = 0; it < iters; it++) {
		rs_emb_forward(&s, off, BATCH, ids, RS_POOL_SUM, out, dim);
		rs_emb_grad_clear(&ws, &g);
		rs_emb_grad_accumulate(&ws, &g, dim, off, BATCH, ids, RS_POOL_SUM, gout, dim);
		distinct = g.n;
		rs_emb_apply(&s, &g, &opt, it + 1);
	}
	double t = (now() - t0) / iters;
	rs_emb_grad_clear(&ws, &g);
	double lookups = (double)BATCH * POOL;
	double bytes = lookups * dim * 4 + 2.0 * (double)distinct * dim * 4;
	double gbs = bytes / t / 1e9;
	printf("bench embedding_cpu_dim%d: %.1f M rows/s, %.2f GB/s (%.2f ms per step, %lld distinct rows) | "
	       "memory copy %.2f GB/s | ratio %.2f",
	       dim, lookups / t / 1e6, gbs, t * 1e3, (long long)distinct, mem_gbs, gbs / mem_gbs);
	if (have_torch) {
		double ts = torch_seconds(dim, iters);
		if (ts > 0)
			printf(" | torch.nn.EmbeddingBag %.2f ms | speedup %.2fx | target faster than torch %s\n",
			       ts * 1e3, ts / t, ts > t ? "MET" : "MISSED");
		else
			printf(" | torch: failed to run\n");
	} else {
		printf(" | torch: not installed (apt-get install python3-torch)\n");
	}
	rs_emb_grad_free(&g);
	rs_emb_workspace_free(&ws);
	free(gout);
	free(out);
	free(ids);
	free(off);
	free(acc);
	free(w);
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "--quick");
	static const char *const pythons[] = {"/usr/bin/python3", "python3"};
	int have_torch = 0;
	for (size_t i = 0; i < 2 && !have_torch; i++) {
		char probe[256];
		snprintf(probe, sizeof(probe), "%s -c 'import torch' >/dev/null 2>&1", pythons[i]);
		if (system(probe) == 0) {
			torch_python = pythons[i];
			have_torch = 1;
		}
	}
	double mem = stream_copy_gbs();
	int32_t dims[] = {16, 64, 128};
	for (int i = 0; i < 3; i++)
		bench_dim(dims[i], quick ? 3 : 20, mem, have_torch);
	if (wrong)
		fprintf(stderr, "bench embedding: %d wrong results\n", wrong);
	return wrong ? 1 : 0;
}
