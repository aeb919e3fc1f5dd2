/*
 * test_buckets.c - tests common/buckets.c: fresh assignments are balanced
 * contiguous ranges; reassignments from any N to any M keep counts within
 * one and move exactly rs_buckets_min_moves buckets, which brute force
 * confirms is the fewest any balanced assignment can move.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/buckets.h"

#include <stdlib.h>
#include <string.h>

static void check_balanced(const int32_t *owner, uint32_t nb, int32_t m)
{
	uint32_t *cnt = calloc((size_t)m, sizeof(uint32_t)), lo = UINT32_MAX, hi = 0;
	for (uint32_t b = 0; b < nb; b++) {
		assert_true(owner[b] >= 0 && owner[b] < m);
		cnt[owner[b]]++;
	}
	for (int32_t k = 0; k < m; k++) {
		lo = cnt[k] < lo ? cnt[k] : lo;
		hi = cnt[k] > hi ? cnt[k] : hi;
	}
	assert_true(hi - lo <= 1);
	free(cnt);
}

static void test_fresh_is_contiguous(void **state)
{
	(void)state;
	int32_t owner[768];
	rs_err err = {0};
	for (int32_t m = 1; m <= 64; m++) {
		assert_int_equal(rs_buckets_assign(768, m, NULL, NULL, owner, &err), RS_OK);
		check_balanced(owner, 768, m);
		for (uint32_t b = 1; b < 768; b++)
			assert_true(owner[b] == owner[b - 1] || owner[b] == owner[b - 1] + 1);
	}
}

static void test_any_n_to_m_moves_minimum(void **state)
{
	(void)state;
	int32_t cur[768], prev[768], next[768];
	rs_err err = {0};
	for (int32_t n = 1; n <= 64; n++) {
		assert_int_equal(rs_buckets_assign(768, n, NULL, NULL, cur, &err), RS_OK);
		for (int32_t m = 1; m <= 64; m++) {
			for (uint32_t b = 0; b < 768; b++)
				prev[b] = cur[b] < m ? cur[b] : -1; /* ranks >= m left */
			assert_int_equal(rs_buckets_assign(768, m, prev, NULL, next, &err), RS_OK);
			check_balanced(next, 768, m);
			uint32_t moved = 0, orphans = 0;
			for (uint32_t b = 0; b < 768; b++) {
				moved += next[b] != prev[b];
				orphans += prev[b] < 0;
			}
			assert_int_equal(moved, rs_buckets_min_moves(768, m, prev));
			/* at least the removed members' buckets, and at least what added members need */
			assert_true(moved >= orphans);
			if (m > n)
				assert_true(moved >= (uint32_t)(m - n) * (768 / (uint32_t)m));
		}
	}
	/* in place: owner may alias prev */
	for (uint32_t b = 0; b < 768; b++)
		prev[b] = b % 3 ? (int32_t)(b % 5) : -1;
	memcpy(next, prev, sizeof(prev));
	assert_int_equal(rs_buckets_assign(768, 5, next, NULL, next, &err), RS_OK);
	check_balanced(next, 768, 5);
	uint32_t moved = 0;
	for (uint32_t b = 0; b < 768; b++)
		moved += next[b] != prev[b];
	assert_int_equal(moved, rs_buckets_min_moves(768, 5, prev));
}

/* Fewest moves over every balanced assignment, by enumeration. */
static uint32_t brute_min(uint32_t nb, int32_t m, const int32_t *prev)
{
	uint32_t best = UINT32_MAX, total = 1;
	int32_t a[8];
	for (uint32_t i = 0; i < nb; i++)
		total *= (uint32_t)m;
	for (uint32_t code = 0; code < total; code++) {
		uint32_t c = code, moves = 0, cnt[4] = {0}, lo = UINT32_MAX, hi = 0;
		for (uint32_t b = 0; b < nb; b++) {
			a[b] = (int32_t)(c % (uint32_t)m);
			c /= (uint32_t)m;
			cnt[a[b]]++;
			moves += a[b] != prev[b];
		}
		for (int32_t k = 0; k < m; k++) {
			lo = cnt[k] < lo ? cnt[k] : lo;
			hi = cnt[k] > hi ? cnt[k] : hi;
		}
		if (hi - lo <= 1 && moves < best)
			best = moves;
	}
	return best;
}

static void test_minimum_by_brute_force(void **state)
{
	(void)state;
	srand(7);
	for (int trial = 0; trial < 400; trial++) {
		uint32_t nb = 1 + (uint32_t)(rand() % 7);
		int32_t m = 1 + rand() % 4, prev[8], owner[8];
		for (uint32_t b = 0; b < nb; b++)
			prev[b] = rand() % (m + 2) - 1; /* -1, members, and members that left */
		for (uint32_t b = 0; b < nb; b++)
			if (prev[b] >= m)
				prev[b] = -1;
		rs_err err = {0};
		uint32_t want = brute_min(nb, m, prev);
		assert_int_equal(rs_buckets_min_moves(nb, m, prev), want);
		assert_int_equal(rs_buckets_assign(nb, m, prev, NULL, owner, &err), RS_OK);
		uint32_t moved = 0;
		for (uint32_t b = 0; b < nb; b++)
			moved += owner[b] != prev[b];
		assert_int_equal(moved, want);
	}
}

static void test_bad_arguments(void **state)
{
	(void)state;
	int32_t owner[4];
	rs_err err = {0};
	assert_int_equal(rs_buckets_assign(0, 3, NULL, NULL, owner, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "bucket"));
	err.msg[0] = 0;
	assert_int_equal(rs_buckets_assign(4, 0, NULL, NULL, owner, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "member"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fresh_is_contiguous),
		cmocka_unit_test(test_any_n_to_m_moves_minimum),
		cmocka_unit_test(test_minimum_by_brute_force),
		cmocka_unit_test(test_bad_arguments),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
