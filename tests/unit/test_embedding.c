/*
 * test_embedding.c - tests kernels/embedding_cpu.c against a naive reference
 * (double accumulation, one id at a time) on random jagged batches: empty
 * bags, repeated ids within and across bags, very long bags, mean pooling,
 * id -1, every dtype, every optimizer, output strides wider than dim; the
 * split backward (gradients from two sources) equals one fused backward;
 * results are bit-identical across runs; fp16/bf16 conversions round to
 * nearest even.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/rng.h"
#include "kernels/embedding.h"

#include <math.h>
#include <stdlib.h>

typedef struct batch {
	int32_t nbags;
	int32_t *offsets;
	int64_t *ids;
} batch;

static batch random_batch(rs_rng *r, int32_t nbags, int64_t nrows, int with_misses)
{
	batch b = {.nbags = nbags, .offsets = malloc(sizeof(int32_t) * (size_t)(nbags + 1))};
	int32_t total = 0;
	b.offsets[0] = 0;
	for (int32_t i = 0; i < nbags; i++) {
		uint64_t kind = rs_rng_u64(r) % 10;
		int32_t len = kind == 0 ? 0 : kind == 1 ? 300 + (int32_t)(rs_rng_u64(r) % 200) : 1 + (int32_t)(rs_rng_u64(r) % 8);
		total += len;
		b.offsets[i + 1] = total;
	}
	b.ids = malloc(sizeof(int64_t) * (size_t)(total + 1));
	for (int32_t j = 0; j < total; j++) {
		/* a small hot set makes repeats within and across bags common */
		uint64_t u = rs_rng_u64(r);
		b.ids[j] = u % 4 == 0 ? (int64_t)(u >> 8) % 5 : (int64_t)((u >> 8) % (uint64_t)nrows);
		if (with_misses && u % 17 == 0)
			b.ids[j] = -1;
	}
	return b;
}

static void free_batch(batch *b)
{
	free(b->offsets);
	free(b->ids);
}

static rs_emb_shard make_shard(rs_rng *r, rs_dtype dt, int64_t nrows, int32_t dim, rs_optimizer opt)
{
	int esz = rs_dtype_size(dt);
	rs_emb_shard s = {.weights = malloc((size_t)(nrows * dim * esz)), .dtype = dt, .nrows = nrows, .dim = dim};
	for (int64_t i = 0; i < nrows * dim; i++)
		rs_emb_set(s.weights, dt, i, (float)(rs_rng_uniform(r) * 2 - 1));
	int64_t sf = rs_emb_state_floats(opt, dim);
	s.state = sf ? calloc((size_t)(nrows * sf), sizeof(float)) : NULL;
	return s;
}

static double tolerance(rs_dtype dt)
{
	return dt == RS_DTYPE_FP32 ? 1e-5 : dt == RS_DTYPE_FP16 ? 2e-3 : 1.6e-2;
}

static void expect_close(double got, double want, double tol, const char *what, int64_t i)
{
	if (fabs(got - want) > tol * fmax(1.0, fabs(want)))
		fail_msg("%s[%lld]: got %.9g, want %.9g", what, (long long)i, got, want);
}

static void test_forward_matches_reference(void **state)
{
	(void)state;
	rs_rng r = rs_rng_make(1, 2, 3);
	rs_dtype dts[] = {RS_DTYPE_FP32, RS_DTYPE_FP16, RS_DTYPE_BF16};
	for (int d = 0; d < 3; d++)
		for (int pool = 0; pool < 2; pool++) {
			int32_t dim = 4 + 4 * (int32_t)(rs_rng_u64(&r) % 16) + d; /* odd widths too */
			int64_t nrows = 500;
			rs_emb_shard s = make_shard(&r, dts[d], nrows, dim, RS_OPT_SGD);
			batch b = random_batch(&r, 300, nrows, 1);
			int64_t stride = dim + 7;
			float *out = malloc(sizeof(float) * (size_t)(b.nbags * stride));
			assert_int_equal(rs_emb_forward(&s, b.offsets, b.nbags, b.ids, (rs_pooling)pool, out, stride), RS_OK);
			for (int32_t i = 0; i < b.nbags; i++)
				for (int32_t c = 0; c < dim; c++) {
					double acc = 0;
					int32_t n = b.offsets[i + 1] - b.offsets[i];
					for (int32_t j = b.offsets[i]; j < b.offsets[i + 1]; j++)
						if (b.ids[j] >= 0)
							acc += rs_emb_get(s.weights, s.dtype, b.ids[j] * dim + c);
					if (pool == RS_POOL_MEAN && n > 0)
						acc /= n;
					expect_close(out[i * stride + c], acc, 1e-5, "forward", i * dim + c);
				}
			free(out);
			free_batch(&b);
			free(s.weights);
			free(s.state);
		}
}

/* The reference update: accumulate per row in double in bag order, then apply. */
static void reference_backward(rs_emb_shard *s, const batch *b, rs_pooling pool, const float *gout, int64_t stride,
			       const rs_optimizer_config *opt, int64_t step)
{
	int32_t d = s->dim;
	double *g = calloc((size_t)(s->nrows * d), sizeof(double));
	char *touched = calloc((size_t)s->nrows, 1);
	for (int32_t i = 0; i < b->nbags; i++) {
		int32_t n = b->offsets[i + 1] - b->offsets[i];
		for (int32_t j = b->offsets[i]; j < b->offsets[i + 1]; j++) {
			if (b->ids[j] < 0)
				continue;
			touched[b->ids[j]] = 1;
			for (int32_t c = 0; c < d; c++)
				g[b->ids[j] * d + c] += gout[i * stride + c] * (pool == RS_POOL_MEAN ? 1.0 / n : 1.0);
		}
	}
	for (int64_t row = 0; row < s->nrows; row++) {
		if (!touched[row])
			continue;
		double *gr = g + row * d, f = opt->lr;
		if (opt->kind == RS_OPT_ROWWISE_ADAGRAD) {
			double sq = 0;
			for (int32_t c = 0; c < d; c++)
				sq += gr[c] * gr[c];
			s->state[row] += (float)(sq / d);
			f = opt->lr / (sqrt(s->state[row]) + opt->eps);
		}
		for (int32_t c = 0; c < d; c++) {
			double w = rs_emb_get(s->weights, s->dtype, row * d + c), u = f * gr[c];
			if (opt->kind == RS_OPT_ADAM) {
				float *m = s->state + row * 2 * d, *v = m + d;
				m[c] = (float)(opt->beta1 * m[c] + (1 - opt->beta1) * gr[c]);
				v[c] = (float)(opt->beta2 * v[c] + (1 - opt->beta2) * gr[c] * gr[c]);
				u = opt->lr * (m[c] / (1 - pow(opt->beta1, (double)step))) /
				    (sqrt(v[c] / (1 - pow(opt->beta2, (double)step))) + opt->eps);
			}
			rs_emb_set(s->weights, s->dtype, row * d + c, (float)(w - u));
		}
	}
	free(touched);
	free(g);
}

static void test_backward_matches_reference(void **state)
{
	(void)state;
	rs_rng r = rs_rng_make(4, 5, 6);
	rs_dtype dts[] = {RS_DTYPE_FP32, RS_DTYPE_FP16, RS_DTYPE_BF16};
	rs_optimizer opts[] = {RS_OPT_SGD, RS_OPT_ROWWISE_ADAGRAD, RS_OPT_ADAM};
	for (int d = 0; d < 3; d++)
		for (int o = 0; o < 3; o++)
			for (int pool = 0; pool < 2; pool++) {
				int32_t dim = 8 + 4 * (int32_t)(rs_rng_u64(&r) % 8);
				int64_t nrows = 300;
				rs_optimizer_config opt = {.kind = opts[o], .lr = 0.05f, .eps = 1e-8f, .beta1 = 0.9f, .beta2 = 0.999f};
				rs_rng r2 = r;
				rs_emb_shard a = make_shard(&r, dts[d], nrows, dim, opts[o]);
				rs_emb_shard ref = make_shard(&r2, dts[d], nrows, dim, opts[o]); /* same values */
				rs_emb_workspace ws;
				rs_emb_grad g = {0};
				assert_int_equal(rs_emb_workspace_init(&ws, nrows), RS_OK);
				for (int64_t step = 1; step <= 3; step++) {
					batch b = random_batch(&r, 200, nrows, 1);
					int64_t stride = dim + 3;
					float *gout = malloc(sizeof(float) * (size_t)(b.nbags * stride));
					for (int64_t i = 0; i < b.nbags * stride; i++)
						gout[i] = (float)(rs_rng_uniform(&r) - 0.5);
					assert_int_equal(rs_emb_backward(&a, &ws, &g, b.offsets, b.nbags, b.ids, (rs_pooling)pool,
									 gout, stride, &opt, step), RS_OK);
					reference_backward(&ref, &b, (rs_pooling)pool, gout, stride, &opt, step);
					free(gout);
					free_batch(&b);
				}
				for (int64_t i = 0; i < nrows * dim; i++)
					expect_close(rs_emb_get(a.weights, a.dtype, i), rs_emb_get(ref.weights, ref.dtype, i),
						     tolerance(dts[d]), "weights", i);
				for (int64_t i = 0; a.state && i < nrows * rs_emb_state_floats(opts[o], dim); i++)
					expect_close(a.state[i], ref.state[i], 1e-4, "state", i);
				rs_emb_grad_free(&g);
				rs_emb_workspace_free(&ws);
				free(a.weights);
				free(a.state);
				free(ref.weights);
				free(ref.state);
			}
}

/* Gradients accumulated from two halves of a batch, then applied, equal the fused backward. */
static void test_split_backward(void **state)
{
	(void)state;
	rs_rng r = rs_rng_make(7, 8, 9), r2;
	int32_t dim = 16;
	rs_optimizer_config opt = {.kind = RS_OPT_ROWWISE_ADAGRAD, .lr = 0.1f, .eps = 1e-8f};
	r2 = r;
	rs_emb_shard a = make_shard(&r, RS_DTYPE_FP32, 100, dim, opt.kind);
	rs_emb_shard b = make_shard(&r2, RS_DTYPE_FP32, 100, dim, opt.kind);
	batch bt = random_batch(&r, 64, 100, 0);
	float *gout = malloc(sizeof(float) * 64 * (size_t)dim);
	for (int i = 0; i < 64 * dim; i++)
		gout[i] = (float)rs_rng_uniform(&r);
	rs_emb_workspace ws;
	rs_emb_grad g = {0};
	assert_int_equal(rs_emb_workspace_init(&ws, 100), RS_OK);
	assert_int_equal(rs_emb_backward(&a, &ws, &g, bt.offsets, 64, bt.ids, RS_POOL_SUM, gout, dim, &opt, 1), RS_OK);
	/* the second half's offsets continue from the first's: pass them shifted */
	assert_int_equal(rs_emb_grad_accumulate(&ws, &g, dim, bt.offsets, 32, bt.ids, RS_POOL_SUM, gout, dim), RS_OK);
	assert_int_equal(rs_emb_grad_accumulate(&ws, &g, dim, bt.offsets + 32, 32, bt.ids, RS_POOL_SUM,
						gout + 32 * dim, dim), RS_OK);
	rs_emb_apply(&b, &g, &opt, 1);
	rs_emb_grad_clear(&ws, &g);
	for (int i = 0; i < 100 * dim; i++)
		assert_true(fabsf(((float *)a.weights)[i] - ((float *)b.weights)[i]) <= 1e-6f);
	for (int64_t row = 0; row < 100; row++)
		assert_int_equal(ws.slot_of_row[row], -1); /* workspace left clean */
	rs_emb_grad_free(&g);
	rs_emb_workspace_free(&ws);
	free(gout);
	free_batch(&bt);
	free(a.weights);
	free(a.state);
	free(b.weights);
	free(b.state);
}

static void test_deterministic(void **state)
{
	(void)state;
	uint64_t sums[2];
	for (int run = 0; run < 2; run++) {
		rs_rng r = rs_rng_make(11, 12, 13);
		rs_emb_shard s = make_shard(&r, RS_DTYPE_FP32, 1000, 32, RS_OPT_ADAM);
		rs_optimizer_config opt = {.kind = RS_OPT_ADAM, .lr = 0.01f, .eps = 1e-8f, .beta1 = 0.9f, .beta2 = 0.99f};
		rs_emb_workspace ws;
		rs_emb_grad g = {0};
		assert_int_equal(rs_emb_workspace_init(&ws, 1000), RS_OK);
		batch b = random_batch(&r, 500, 1000, 0);
		float *gout = malloc(sizeof(float) * 500 * 32);
		for (int i = 0; i < 500 * 32; i++)
			gout[i] = (float)rs_rng_uniform(&r);
		assert_int_equal(rs_emb_backward(&s, &ws, &g, b.offsets, 500, b.ids, RS_POOL_MEAN, gout, 32, &opt, 1), RS_OK);
		sums[run] = 0;
		for (int i = 0; i < 1000 * 32; i++) {
			uint32_t u;
			memcpy(&u, &((float *)s.weights)[i], 4);
			sums[run] = sums[run] * 31 + u;
		}
		rs_emb_grad_free(&g);
		rs_emb_workspace_free(&ws);
		free(gout);
		free_batch(&b);
		free(s.weights);
		free(s.state);
	}
	assert_true(sums[0] == sums[1]);
}

static void test_bad_ids(void **state)
{
	(void)state;
	rs_rng r = rs_rng_make(1, 1, 1);
	rs_emb_shard s = make_shard(&r, RS_DTYPE_FP32, 10, 4, RS_OPT_SGD);
	int32_t off[] = {0, 2};
	int64_t ids[] = {3, 10};
	float out[4];
	assert_int_equal(rs_emb_forward(&s, off, 1, ids, RS_POOL_SUM, out, 4), RS_EINVAL);
	ids[1] = -2;
	assert_int_equal(rs_emb_forward(&s, off, 1, ids, RS_POOL_SUM, out, 4), RS_EINVAL);
	free(s.weights);
}

static void test_half_conversions(void **state)
{
	(void)state;
	/* every finite fp16 survives fp16 -> fp32 -> fp16 */
	for (uint32_t h = 0; h < 65536; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue; /* NaN payloads */
		assert_int_equal(rs_f32_to_f16(rs_f16_to_f32((uint16_t)h)), h);
	}
	/* rounding to nearest even at the midpoints, subnormals, overflow */
	assert_true(rs_f16_to_f32(rs_f32_to_f16(1.0f + 1.0f / 2048)) == 1.0f);              /* tie, even is 1.0 */
	assert_true(rs_f16_to_f32(rs_f32_to_f16(1.0f + 3.0f / 2048)) == 1.0f + 2.0f / 1024); /* tie, rounds up to even */
	assert_true(rs_f16_to_f32(rs_f32_to_f16(5.96046448e-8f)) == 5.96046448e-8f);        /* smallest subnormal */
	assert_true(rs_f32_to_f16(2.98023224e-8f) == 0);                                    /* half of it: ties to 0 */
	assert_int_equal(rs_f32_to_f16(65520.0f), 0x7c00);
	assert_int_equal(rs_f32_to_f16(65519.0f), 0x7bff);
	assert_true(rs_bf16_to_f32(rs_f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
	assert_true(rs_bf16_to_f32(rs_f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
	assert_true(isnan(rs_bf16_to_f32(rs_f32_to_bf16(NAN))));
	assert_true(isnan(rs_f16_to_f32(rs_f32_to_f16(NAN))));
}

static void test_pack_unpack_rows(void **state)
{
	(void)state;
	rs_rng r = rs_rng_make(21, 22, 23);
	rs_dtype dts[] = {RS_DTYPE_FP32, RS_DTYPE_BF16};
	rs_optimizer opts[] = {RS_OPT_SGD, RS_OPT_ROWWISE_ADAGRAD, RS_OPT_ADAM};
	for (int d = 0; d < 2; d++)
		for (int o = 0; o < 3; o++) {
			rs_emb_shard a = make_shard(&r, dts[d], 50, 12, opts[o]);
			rs_emb_shard b = make_shard(&r, dts[d], 80, 12, opts[o]);
			int64_t sf = rs_emb_state_floats(opts[o], 12);
			for (int64_t i = 0; i < 50 * sf; i++)
				a.state[i] = (float)i;
			int64_t from[] = {3, 49, 0, 7}, to[] = {79, 0, 40, 41};
			size_t rb = rs_emb_packed_row_bytes(&a, opts[o]);
			unsigned char *buf = malloc(4 * rb);
			assert_int_equal(rs_emb_pack_rows(&a, opts[o], from, 4, buf, 4 * rb), RS_OK);
			assert_int_equal(rs_emb_unpack_rows(&b, opts[o], to, 4, buf, 4 * rb), RS_OK);
			for (int k = 0; k < 4; k++) {
				for (int c = 0; c < 12; c++)
					assert_true(rs_emb_get(a.weights, a.dtype, from[k] * 12 + c) ==
						    rs_emb_get(b.weights, b.dtype, to[k] * 12 + c));
				for (int64_t q = 0; q < sf; q++)
					assert_true(a.state[from[k] * sf + q] == b.state[to[k] * sf + q]);
			}
			assert_int_equal(rs_emb_pack_rows(&a, opts[o], from, 4, buf, 4 * rb - 1), RS_ENOSPACE);
			int64_t outside[] = {50};
			assert_int_equal(rs_emb_pack_rows(&a, opts[o], outside, 1, buf, rb), RS_EINVAL);
			free(buf);
			free(a.weights);
			free(a.state);
			free(b.weights);
			free(b.state);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forward_matches_reference),
		cmocka_unit_test(test_backward_matches_reference),
		cmocka_unit_test(test_split_backward),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_bad_ids),
		cmocka_unit_test(test_half_conversions),
		cmocka_unit_test(test_pack_unpack_rows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
