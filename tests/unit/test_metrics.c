/*
 * test_metrics.c - tests worker/metrics.c: AUC against a brute-force count
 * over all pairs (ties counting one half), edge cases, log loss.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/rng.h"
#include "worker/metrics.h"

#include <math.h>
#include <stdlib.h>

static double brute_auc(const float *s, const float *l, size_t n)
{
	double num = 0, pairs = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++)
			if (l[i] > 0.5f && l[j] < 0.5f) {
				pairs++;
				num += s[i] > s[j] ? 1 : s[i] == s[j] ? 0.5 : 0;
			}
	return pairs ? num / pairs : 0.5;
}

static void test_auc_matches_brute_force(void **state)
{
	(void)state;
	rs_rng r = rs_rng_make(9, 9, 9);
	for (int trial = 0; trial < 50; trial++) {
		size_t n = 1 + (size_t)(rs_rng_u64(&r) % 300);
		float *s = malloc(sizeof(float) * n), *l = malloc(sizeof(float) * n);
		for (size_t i = 0; i < n; i++) {
			s[i] = (float)(rs_rng_u64(&r) % 20) / 20; /* many ties */
			l[i] = rs_rng_uniform(&r) < 0.3 + 0.4 * s[i] ? 1.0f : 0.0f;
		}
		assert_true(fabs(rs_auc(s, l, n) - brute_auc(s, l, n)) < 1e-12);
		free(s);
		free(l);
	}
}

static void test_auc_edges(void **state)
{
	(void)state;
	float s[] = {0.1f, 0.2f, 0.3f, 0.4f}, up[] = {0, 0, 1, 1}, down[] = {1, 1, 0, 0}, ones[] = {1, 1, 1, 1};
	float same[] = {0.5f, 0.5f, 0.5f, 0.5f};
	assert_true(rs_auc(s, up, 4) == 1.0);
	assert_true(rs_auc(s, down, 4) == 0.0);
	assert_true(rs_auc(s, ones, 4) == 0.5);
	assert_true(rs_auc(same, up, 4) == 0.5);
	float nan_scores[4] = {0.1f, NAN, 0.3f, 0.4f};
	assert_true(isnan(rs_auc(nan_scores, up, 4))); /* once an endless loop */
	float p[] = {0.9f, 0.1f};
	float y[] = {1, 0};
	assert_true(fabs(rs_logloss(p, y, 2) - (-log(0.9))) < 1e-6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_auc_matches_brute_force),
		cmocka_unit_test(test_auc_edges),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
