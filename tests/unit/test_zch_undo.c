/*
 * test_zch_undo.c - tests the ZCH table's undo of a failed step
 * (rs_zch_journal, rs_zch_undo in kernels/zch.h): a table that looks up a
 * batch of a step and takes it back must go on exactly as a table that
 * never saw that batch, slot for slot, identities, eviction metadata and
 * later choices alike, through inserts, evictions, overflows, repeated IDs
 * and LFU decay; and an undo across a change of buckets refuses and
 * changes nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/rng.h"
#include "kernels/zch.h"

#include <stdlib.h>
#include <string.h>

#define BUCKETS 4
#define SLOTS 32 /* 8 per bucket: full after a few batches, then evicting */
#define BATCH 24

static rs_zch_table *make(rs_eviction ev)
{
	rs_zch_config cfg = {.buckets = BUCKETS, .slots = SLOTS, .eviction = ev, .lfu_decay_steps = 3};
	rs_zch_table *z = NULL;
	rs_err err = {0};
	assert_int_equal(rs_zch_create(&cfg, &z, &err), RS_OK);
	for (uint32_t b = 0; b < BUCKETS; b++)
		assert_int_equal(rs_zch_add_bucket(z, b), RS_OK);
	return z;
}

/* Every slot of a and b: the same ID (or both free) and the same eviction metadata. */
static void assert_same_tables(const rs_zch_table *a, const rs_zch_table *b, int step)
{
	for (int64_t s = 0; s < SLOTS; s++) {
		int la, lb;
		uint64_t ia = rs_zch_slot_id(a, s, &la), ib = rs_zch_slot_id(b, s, &lb);
		uint32_t ma[3], mb[3];
		rs_zch_slot_meta(a, s, ma);
		rs_zch_slot_meta(b, s, mb);
		if (la != lb || ia != ib || memcmp(ma, mb, sizeof(ma)) != 0)
			fail_msg("step %d, slot %lld: %s ID %llu (last %u, count %u) beside %s ID %llu (last %u, count %u)", step,
				 (long long)s, la ? "live" : "free", (unsigned long long)ia, ma[0], ma[1], lb ? "live" : "free",
				 (unsigned long long)ib, mb[0], mb[1]);
	}
}

/* A batch of IDs from 96 (3x the slots), hot ones more often, repeats within it. */
static void draw(rs_rng *rng, uint64_t *ids)
{
	for (int i = 0; i < BATCH; i++) {
		uint64_t r = rs_rng_u64(rng);
		ids[i] = 1000 + (r % 4 == 0 ? r % 8 : r % 96);
	}
}

static void undone_equals_never_seen(rs_eviction ev)
{
	rs_zch_table *a = make(ev), *b = make(ev);
	rs_rng rng = rs_rng_make(7, 8, 9);
	uint64_t ids[BATCH], bad[BATCH];
	int64_t sa[BATCH], sb[BATCH], fa[BATCH], fb[BATCH];
	int undone = 0, evicted_then_undone = 0;
	for (int step = 0; step < 200; step++) {
		draw(&rng, ids);
		rs_zch_journal(a, 1);
		if (step % 3 == 1) { /* a failed attempt at this step: other IDs, then taken back */
			draw(&rng, bad);
			uint64_t ev_before = rs_zch_get_stats(a).evictions;
			(void)rs_zch_find_or_insert(a, bad, BATCH, (uint32_t)step, sa, NULL, NULL);
			evicted_then_undone += rs_zch_get_stats(a).evictions > ev_before;
			assert_int_equal(rs_zch_undo(a), RS_OK);
			assert_same_tables(a, b, step);
			undone++;
		}
		size_t na = 0, nb = 0;
		assert_int_equal(rs_zch_find_or_insert(a, ids, BATCH, (uint32_t)step, sa, fa, &na), RS_OK);
		assert_int_equal(rs_zch_find_or_insert(b, ids, BATCH, (uint32_t)step, sb, fb, &nb), RS_OK);
		assert_memory_equal(sa, sb, sizeof(sa));
		assert_int_equal(na, nb);
		assert_memory_equal(fa, fb, sizeof(int64_t) * na);
		assert_same_tables(a, b, step);
	}
	/* the undone attempts evicted: the test went through the hard case */
	assert_true(undone > 60 && evicted_then_undone > 20);
	rs_zch_stats st = rs_zch_get_stats(b);
	assert_true(st.evictions > 0 && st.overflows > 0);
	rs_zch_destroy(a);
	rs_zch_destroy(b);
}

static void test_undo_lru(void **state)
{
	(void)state;
	undone_equals_never_seen(RS_EVICT_LRU);
}

static void test_undo_lfu(void **state)
{
	(void)state;
	undone_equals_never_seen(RS_EVICT_LFU);
}

/* A step taken back twice in a row, and an undo with nothing recorded, change nothing more. */
static void test_undo_twice(void **state)
{
	(void)state;
	rs_zch_table *a = make(RS_EVICT_LRU), *b = make(RS_EVICT_LRU);
	rs_rng rng = rs_rng_make(1, 2, 3);
	uint64_t ids[BATCH];
	int64_t s[BATCH];
	for (int step = 0; step < 10; step++) {
		draw(&rng, ids);
		assert_int_equal(rs_zch_find_or_insert(a, ids, BATCH, (uint32_t)step, s, NULL, NULL), RS_OK);
		assert_int_equal(rs_zch_find_or_insert(b, ids, BATCH, (uint32_t)step, s, NULL, NULL), RS_OK);
	}
	rs_zch_journal(a, 1);
	draw(&rng, ids);
	(void)rs_zch_find_or_insert(a, ids, BATCH, 10, s, NULL, NULL);
	assert_int_equal(rs_zch_undo(a), RS_OK);
	assert_int_equal(rs_zch_undo(a), RS_OK);
	assert_same_tables(a, b, 10);
	/* not recording: nothing to take back */
	rs_zch_journal(a, 0);
	(void)rs_zch_find_or_insert(a, ids, BATCH, 10, s, NULL, NULL);
	(void)rs_zch_find_or_insert(b, ids, BATCH, 10, s, NULL, NULL);
	assert_int_equal(rs_zch_undo(a), RS_OK);
	assert_same_tables(a, b, 10);
	rs_zch_destroy(a);
	rs_zch_destroy(b);
}

/* Buckets dropped while recording: the undo refuses, and what find-or-insert did stays. */
static void test_undo_across_buckets_refused(void **state)
{
	(void)state;
	rs_zch_table *a = make(RS_EVICT_LRU), *b = make(RS_EVICT_LRU);
	rs_rng rng = rs_rng_make(4, 5, 6);
	uint64_t ids[BATCH];
	int64_t s[BATCH];
	draw(&rng, ids);
	rs_zch_journal(a, 1);
	(void)rs_zch_find_or_insert(a, ids, BATCH, 0, s, NULL, NULL);
	(void)rs_zch_find_or_insert(b, ids, BATCH, 0, s, NULL, NULL);
	assert_int_equal(rs_zch_drop_bucket(a, 1), RS_OK);
	assert_int_equal(rs_zch_drop_bucket(b, 1), RS_OK);
	assert_int_equal(rs_zch_undo(a), RS_EINVAL);
	assert_same_tables(a, b, 0);
	/* the record starts again empty: a later step undoes */
	(void)rs_zch_find_or_insert(a, ids, BATCH, 1, s, NULL, NULL);
	assert_int_equal(rs_zch_undo(a), RS_OK);
	assert_same_tables(a, b, 1);
	rs_zch_destroy(a);
	rs_zch_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_undo_lru),
		cmocka_unit_test(test_undo_lfu),
		cmocka_unit_test(test_undo_twice),
		cmocka_unit_test(test_undo_across_buckets_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
