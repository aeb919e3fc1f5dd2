/*
 * test_rng.c - tests common/rng.c: streams are pure functions of their
 * tuple, and the Zipf sampler matches the exact distribution.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/rng.h"

#include <math.h>
#include <stdlib.h>

static void test_streams_are_deterministic(void **state)
{
	(void)state;
	rs_rng a = rs_rng_make(1, 2, 3), b = rs_rng_make(1, 2, 3), c = rs_rng_make(1, 2, 4);
	int same = 0;
	for (int i = 0; i < 100; i++) {
		uint64_t x = rs_rng_u64(&a);
		assert_true(x == rs_rng_u64(&b));
		same += x == rs_rng_u64(&c);
	}
	assert_int_equal(same, 0);
}

/* Chi-square of sampled frequencies against the exact Zipf probabilities. */
static void check_zipf(uint64_t n, double alpha)
{
	rs_zipf z;
	rs_zipf_init(&z, n, alpha);
	rs_rng r = rs_rng_make(42, n, (uint64_t)(alpha * 1000));
	const int draws = 400000, bins = 20;
	double norm = 0, expect[21] = {0};
	long got[21] = {0};
	for (uint64_t k = 0; k < n; k++) {
		double p = pow((double)k + 1, -alpha);
		norm += p;
		expect[k < (uint64_t)bins ? k : (uint64_t)bins] += p;
	}
	for (int i = 0; i < draws; i++) {
		uint64_t k = rs_zipf_sample(&z, &r);
		assert_true(k < n);
		got[k < (uint64_t)bins ? k : (uint64_t)bins]++;
	}
	double chi = 0;
	for (int b = 0; b <= bins; b++) {
		double e = expect[b] / norm * draws;
		if (e > 0)
			chi += (got[b] - e) * (got[b] - e) / e;
	}
	/* 20 degrees of freedom: p = 0.001 at 45.3 */
	if (chi > 45.3)
		fail_msg("zipf n=%llu alpha=%.2f: chi-square %.1f", (unsigned long long)n, alpha, chi);
}

static void test_zipf_distribution(void **state)
{
	(void)state;
	check_zipf(1000, 1.05);
	check_zipf(100000, 1.05);
	check_zipf(50, 0.5);
	check_zipf(10000, 1.0);
	check_zipf(10000, 2.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_streams_are_deterministic),
		cmocka_unit_test(test_zipf_distribution),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
