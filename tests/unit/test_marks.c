/*
 * test_marks.c - tests worker/marks.h against a plain array of flags: after
 * random sets, unsets and range unsets, every scan finds exactly the marked
 * rows of its range, and a word's summary bit is set exactly when the word
 * holds a mark.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/rng.h"
#include "worker/marks.h"

/* The summary says exactly which words hold marks. */
static void check_summary(const rs__marks *m, int64_t n)
{
	int64_t words = (n + 63) / 64;
	for (int64_t w = 0; w < words; w++)
		assert_int_equal((m->any[w >> 6] >> (w & 63)) & 1, m->bit[w] != 0);
	if (n & 63) /* nothing marked past the last row, nor past the last word */
		assert_int_equal(m->bit[words - 1] >> (n & 63), 0);
	if (words & 63)
		assert_int_equal(m->any[words >> 6] >> (words & 63), 0);
}

/* Every marked row of [lo, hi), in order, and nothing else. */
static void check_scan(const rs__marks *m, const unsigned char *want, int64_t lo, int64_t hi)
{
	int64_t r = rs__marks_next(m, lo, hi);
	for (int64_t i = lo; i < hi; i++) {
		if (!want[i])
			continue;
		assert_int_equal(r, i);
		r = rs__marks_next(m, r + 1, hi);
	}
	assert_int_equal(r, hi);
}

static void random_ops(int64_t n, int all, uint64_t seed)
{
	rs__marks m;
	unsigned char *want = calloc((size_t)n + 1, 1);
	rs_rng rng = rs_rng_make(seed, 7, 1);
	assert_non_null(want);
	assert_true(rs__marks_init(&m, n, all));
	for (int64_t i = 0; all && i < n; i++)
		want[i] = 1;
	check_summary(&m, n);
	check_scan(&m, want, 0, n);
	for (int round = 0; round < 400; round++) {
		int64_t i = n ? (int64_t)(rs_rng_u64(&rng) % (uint64_t)n) : 0;
		int64_t len = n ? (int64_t)(rs_rng_u64(&rng) % (uint64_t)(n - i + 1)) : 0;
		switch (rs_rng_u64(&rng) % 4) {
		case 0: /* a few rows marked, clustered as a step's updates are not */
		case 1:
			for (int k = 0; n && k < 20; k++) {
				int64_t r = (i + (int64_t)(rs_rng_u64(&rng) % 300)) % n;
				rs__marks_set(&m, r);
				want[r] = 1;
			}
			break;
		case 2:
			if (n && want[i])
				rs__marks_unset(&m, i);
			if (n)
				want[i] = 0;
			break;
		default:
			rs__marks_unset_range(&m, i, len);
			for (int64_t k = i; k < i + len; k++)
				want[k] = 0;
		}
		check_summary(&m, n);
		int64_t lo = n ? (int64_t)(rs_rng_u64(&rng) % (uint64_t)n) : 0;
		int64_t hi = lo + (n ? (int64_t)(rs_rng_u64(&rng) % (uint64_t)(n - lo + 1)) : 0);
		check_scan(&m, want, lo, hi);
	}
	check_scan(&m, want, 0, n);
	free(m.bit);
	free(want);
}

static void test_marks_match_flags(void **state)
{
	(void)state;
	/* sizes around a word (64 rows) and a summary word's reach (4096 rows) */
	const int64_t sizes[] = {0, 1, 63, 64, 65, 4095, 4096, 4097, 3 * 4096 + 17, 100000};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (int all = 0; all < 2; all++)
			random_ops(sizes[s], all, 11 + s * 2 + (uint64_t)all);
}

/* A mark far past long empty stretches is found, and none past the range's end. */
static void test_marks_far_apart(void **state)
{
	(void)state;
	rs__marks m;
	int64_t n = 1 << 22;
	assert_true(rs__marks_init(&m, n, 0));
	assert_int_equal(rs__marks_next(&m, 0, n), n);
	rs__marks_set(&m, 5);
	rs__marks_set(&m, n - 1);
	assert_int_equal(rs__marks_next(&m, 0, n), 5);
	assert_int_equal(rs__marks_next(&m, 6, n), n - 1);
	assert_int_equal(rs__marks_next(&m, 6, n - 1), n - 1); /* the end, not the mark at it */
	rs__marks_unset(&m, n - 1);
	assert_int_equal(rs__marks_next(&m, 6, n), n);
	assert_int_equal(m.any[(n - 1) >> 12], 0);
	free(m.bit);
}

/* Every range of 300 rows unmarked from all marked: exactly its rows go, none beside it (a word's edges, whole words). */
static void test_marks_every_range(void **state)
{
	(void)state;
	const int64_t n = 300;
	for (int64_t i = 0; i <= n; i++)
		for (int64_t len = 0; i + len <= n; len++) {
			rs__marks m;
			assert_true(rs__marks_init(&m, n, 1));
			rs__marks_unset_range(&m, i, len);
			for (int64_t r = 0; r < n; r++)
				assert_int_equal((m.bit[r >> 6] >> (r & 63)) & 1, r < i || r >= i + len);
			check_summary(&m, n);
			free(m.bit);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_marks_match_flags),
		cmocka_unit_test(test_marks_far_apart),
		cmocka_unit_test(test_marks_every_range),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
