/*
 * test_dense.c - tests worker/dense.c: every parameter gradient and the
 * gradient with respect to the pooled embeddings against central finite
 * differences of the loss, for both interactions; determinism; the SGD
 * step; the "dot" dimension check.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/rng.h"
#include "worker/dense.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static rs_config *load(const char *json)
{
	rs_config *cfg = NULL;
	rs_err err = {0};
	if (rs_config_parse(json, strlen(json), "t.json", &cfg, &err) != RS_OK)
		fail_msg("%s", err.msg);
	return cfg;
}

static double loss_of(rs_dense *m, const float *dense, const float *pooled, const float *labels, int32_t n)
{
	float *dp = malloc(sizeof(float) * (size_t)n * (size_t)rs_dense_emb_width(m));
	float *saved = malloc(sizeof(float) * rs_dense_nparams(m));
	double loss;
	memcpy(saved, rs_dense_grads(m), sizeof(float) * rs_dense_nparams(m));
	assert_int_equal(rs_dense_forward_backward(m, dense, pooled, labels, n, dp, &loss), RS_OK);
	memcpy(rs_dense_grads(m), saved, sizeof(float) * rs_dense_nparams(m));
	free(saved);
	free(dp);
	return loss;
}

static int close_enough(double num, double ana)
{
	return fabs(num - ana) <= 2e-2 * fmax(0.05, fabs(ana));
}

static void gradient_check(const char *json)
{
	rs_config *cfg = load(json);
	rs_dense *m;
	rs_err err = {0};
	assert_int_equal(rs_dense_create(cfg, 7, &m, &err), RS_OK);
	const int32_t n = 6, ew = rs_dense_emb_width(m);
	float dense[6 * RS_NUM_DENSE], labels[6], *pooled = malloc(sizeof(float) * (size_t)(n * ew));
	float *dp = malloc(sizeof(float) * (size_t)(n * ew));
	rs_rng r = rs_rng_make(1, 2, 3);
	for (int i = 0; i < n * RS_NUM_DENSE; i++)
		dense[i] = (float)(rs_rng_uniform(&r) * 2 - 1);
	for (int i = 0; i < n * ew; i++)
		pooled[i] = (float)(rs_rng_uniform(&r) * 2 - 1);
	for (int i = 0; i < n; i++)
		labels[i] = (float)(i % 2);
	double loss;
	memset(rs_dense_grads(m), 0, sizeof(float) * rs_dense_nparams(m));
	assert_int_equal(rs_dense_forward_backward(m, dense, pooled, labels, n, dp, &loss), RS_OK);
	float *g = malloc(sizeof(float) * rs_dense_nparams(m));
	memcpy(g, rs_dense_grads(m), sizeof(float) * rs_dense_nparams(m));
	int bad = 0, checked = 0;
	const float eps = 1e-3f;
	float *p = rs_dense_params(m);
	for (size_t i = 0; i < rs_dense_nparams(m); i++) {
		float keep = p[i];
		p[i] = keep + eps;
		double up = loss_of(m, dense, pooled, labels, n);
		p[i] = keep - eps;
		double down = loss_of(m, dense, pooled, labels, n);
		p[i] = keep;
		checked++;
		bad += !close_enough((up - down) / (2 * eps), g[i]);
		if (getenv("RS_DEBUG_GRAD") && !close_enough((up - down) / (2 * eps), g[i]))
			print_message("param %zu: numeric %g analytic %g\n", i, (up - down) / (2 * eps), g[i]);
	}
	for (int i = 0; i < n * ew; i++) {
		float keep = pooled[i];
		pooled[i] = keep + eps;
		double up = loss_of(m, dense, pooled, labels, n);
		pooled[i] = keep - eps;
		double down = loss_of(m, dense, pooled, labels, n);
		pooled[i] = keep;
		checked++;
		bad += !close_enough((up - down) / (2 * eps), dp[i]);
	}
	/* a finite difference straddling a ReLU kink may disagree: allow 1% of the checks */
	if (bad > checked / 100)
		fail_msg("%d of %d gradients disagree with finite differences", bad, checked);
	assert_true(checked > 100);
	free(g);
	free(dp);
	free(pooled);
	rs_dense_destroy(m);
	rs_config_free(cfg);
}

static void test_gradients_dot(void **state)
{
	(void)state;
	gradient_check("{\"tables\": [{\"name\": \"a\", \"rows\": 9, \"dim\": 4, \"features\": [\"x\", \"y\"]},"
		       "{\"name\": \"b\", \"rows\": 9, \"dim\": 4, \"features\": [\"z\"]}],"
		       "\"dense\": {\"bottom_mlp\": [8, 4], \"top_mlp\": [6], \"interaction\": \"dot\"}}");
}

static void test_gradients_cat(void **state)
{
	(void)state;
	gradient_check("{\"tables\": [{\"name\": \"a\", \"rows\": 9, \"dim\": 4, \"features\": [\"x\"]},"
		       "{\"name\": \"b\", \"rows\": 9, \"dim\": 8, \"features\": [\"z\"]}],"
		       "\"dense\": {\"bottom_mlp\": [5], \"top_mlp\": [6, 3]}}");
}

static void test_dot_needs_equal_dims(void **state)
{
	(void)state;
	/* the config loader checks explicit "dot"; the model checks what "auto" resolved to as well */
	rs_config *cfg = load("{\"tables\": [{\"name\": \"a\", \"rows\": 9, \"dim\": 4, \"features\": [\"x\"]}],"
			      "\"dense\": {\"bottom_mlp\": [4], \"interaction\": \"dot\"}}");
	cfg->tables[0].dim = 8;
	rs_dense *m = NULL;
	rs_err err = {0};
	assert_int_equal(rs_dense_create(cfg, 1, &m, &err), RS_EINVAL);
	assert_null(m);
	assert_non_null(strstr(err.msg, "dot"));
	rs_config_free(cfg);
}

static void test_sgd_and_determinism(void **state)
{
	(void)state;
	rs_config *cfg = load("{\"tables\": [{\"name\": \"a\", \"rows\": 9, \"dim\": 8, \"features\": [\"x\"]}]}");
	rs_dense *a, *b;
	rs_err err = {0};
	assert_int_equal(rs_dense_create(cfg, 3, &a, &err), RS_OK);
	assert_int_equal(rs_dense_create(cfg, 3, &b, &err), RS_OK);
	assert_memory_equal(rs_dense_params(a), rs_dense_params(b), sizeof(float) * rs_dense_nparams(a));
	float dense[4 * RS_NUM_DENSE], pooled[4 * 8], labels[4] = {1, 0, 1, 1}, dp[32], prob[4];
	for (int i = 0; i < 4 * RS_NUM_DENSE; i++)
		dense[i] = (float)i / 50;
	for (int i = 0; i < 32; i++)
		pooled[i] = (float)(i % 5) / 10;
	double l0, l1 = 0;
	for (int step = 0; step < 30; step++) {
		double la, lb;
		assert_int_equal(rs_dense_forward_backward(a, dense, pooled, labels, 4, dp, &la), RS_OK);
		assert_int_equal(rs_dense_forward_backward(b, dense, pooled, labels, 4, dp, &lb), RS_OK);
		assert_true(la == lb);
		if (step == 0)
			l0 = la;
		l1 = la;
		rs_dense_sgd(a, 0.1f, 0.25f);
		rs_dense_sgd(b, 0.1f, 0.25f);
	}
	assert_true(l1 < l0); /* it learns */
	for (size_t i = 0; i < rs_dense_nparams(a); i++)
		assert_true(rs_dense_grads(a)[i] == 0);
	assert_int_equal(rs_dense_predict(a, dense, pooled, 4, prob), RS_OK);
	for (int i = 0; i < 4; i++)
		assert_true(prob[i] > 0 && prob[i] < 1);
	rs_dense_destroy(a);
	rs_dense_destroy(b);
	rs_config_free(cfg);
}

/* The gemm hook's contract, written the plainest way (row-major, op = transpose when asked). */
static int gemm_calls;
static rs_status plain_gemm(void *ctx, int ta, int tb, int32_t m, int32_t n, int32_t k, const float *a, const float *b,
			    float beta, float *c)
{
	(void)ctx;
	gemm_calls++;
	for (int32_t i = 0; i < m; i++)
		for (int32_t j = 0; j < n; j++) {
			double s = 0;
			for (int32_t l = 0; l < k; l++)
				s += (double)(ta ? a[(size_t)l * (size_t)m + (size_t)i] : a[(size_t)i * (size_t)k + (size_t)l]) *
				     (double)(tb ? b[(size_t)j * (size_t)k + (size_t)l] : b[(size_t)l * (size_t)n + (size_t)j]);
			c[(size_t)i * (size_t)n + (size_t)j] = (float)s + beta * c[(size_t)i * (size_t)n + (size_t)j];
		}
	return RS_OK;
}

static rs_status failing_gemm(void *ctx, int ta, int tb, int32_t m, int32_t n, int32_t k, const float *a,
			      const float *b, float beta, float *c)
{
	(void)ctx, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)b, (void)beta, (void)c;
	return RS_ECUDA;
}

/*
 * With the products handed to a gemm (the CUDA engine hands them to
 * cuBLAS), 20 steps of both interactions reach the loops' parameters, loss
 * and embedding gradients to float rounding; a failing gemm fails the step.
 */
static void test_gemm_hook(void **state)
{
	(void)state;
	const char *cfgs[] = {"{\"tables\": [{\"name\": \"a\", \"rows\": 9, \"dim\": 8, \"features\": [\"x\", \"y\"]}],"
			      " \"dense\": {\"bottom_mlp\": [16, 8], \"top_mlp\": [12, 6], \"interaction\": \"dot\"}}",
			      "{\"tables\": [{\"name\": \"a\", \"rows\": 9, \"dim\": 3, \"features\": [\"x\"]}],"
			      " \"dense\": {\"bottom_mlp\": [5], \"top_mlp\": [7], \"interaction\": \"cat\"}}"};
	for (size_t c = 0; c < 2; c++) {
		rs_config *cfg = load(cfgs[c]);
		rs_dense *a, *b;
		rs_err err = {0};
		assert_non_null(cfg);
		assert_int_equal(rs_dense_create(cfg, 5, &a, &err), RS_OK);
		assert_int_equal(rs_dense_create(cfg, 5, &b, &err), RS_OK);
		rs_dense_set_gemm(b, plain_gemm, NULL);
		int32_t n = 6, w = rs_dense_emb_width(a);
		float dense[6 * RS_NUM_DENSE], labels[6] = {1, 0, 0, 1, 1, 0};
		float *pooled = malloc(sizeof(float) * (size_t)(n * w)), *da = malloc(sizeof(float) * (size_t)(n * w));
		float *db = malloc(sizeof(float) * (size_t)(n * w));
		for (int i = 0; i < n * RS_NUM_DENSE; i++)
			dense[i] = (float)((i * 7) % 11) / 10 - 0.4f;
		for (int i = 0; i < n * w; i++)
			pooled[i] = (float)((i * 5) % 9) / 9 - 0.5f;
		gemm_calls = 0;
		double worst = 0;
		for (int step = 0; step < 20; step++) {
			double la, lb;
			assert_int_equal(rs_dense_forward_backward(a, dense, pooled, labels, n, da, &la), RS_OK);
			assert_int_equal(rs_dense_forward_backward(b, dense, pooled, labels, n, db, &lb), RS_OK);
			worst = fmax(worst, fabs(la - lb) / fabs(la));
			for (int i = 0; i < n * w; i++)
				worst = fmax(worst, fabs((double)da[i] - db[i]) / (fabs((double)da[i]) + 1e-3));
			rs_dense_sgd(a, 0.5f, 1.0f / (float)n);
			rs_dense_sgd(b, 0.5f, 1.0f / (float)n);
		}
		for (size_t i = 0; i < rs_dense_nparams(a); i++)
			worst = fmax(worst, fabs((double)rs_dense_params(a)[i] - rs_dense_params(b)[i]) /
						    (fabs((double)rs_dense_params(a)[i]) + 1e-3));
		print_message("%s: gemm hook vs loops, 20 steps: max relative difference %.3g (%d products)\n",
			      c ? "cat" : "dot", worst, gemm_calls);
		assert_true(gemm_calls > 0);
		assert_true(worst < 1e-4);
		rs_dense_set_gemm(b, failing_gemm, NULL);
		double l;
		assert_int_equal(rs_dense_forward_backward(b, dense, pooled, labels, n, db, &l), RS_ECUDA);
		assert_int_equal(rs_dense_predict(b, dense, pooled, n, db), RS_ECUDA);
		free(pooled), free(da), free(db);
		rs_dense_destroy(a);
		rs_dense_destroy(b);
		rs_config_free(cfg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gradients_dot),
		cmocka_unit_test(test_gradients_cat),
		cmocka_unit_test(test_dot_needs_equal_dims),
		cmocka_unit_test(test_sgd_and_determinism),
		cmocka_unit_test(test_gemm_hook),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
