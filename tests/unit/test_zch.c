/*
 * test_zch.c - tests kernels/zch.c: zero collisions on adversarial ID sets,
 * stable slots, even spread over buckets, eviction order (LRU, LFU with
 * decay, pinning within a step), resharding N -> M through bucket
 * serialization with the values of every live ID preserved, corrupted
 * buckets rejected without touching the table, and the table's eviction
 * (a queue and a lazy heap, no scan) choosing, call by call and counter by
 * counter, what zch.h's rule (a scan of every slot, as the CUDA version
 * does) chooses, on skewed and Zipf streams, across saves, loads and
 * restores, also of buckets last seen at later steps than those to come.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/buckets.h"
#include "common/rng.h"
#include "kernels/zch.h"
#include "kernels/zch_internal.h" /* hint_of */

#include <stdlib.h>
#include <string.h>

static rs_zch_table *make(uint32_t buckets, uint64_t slots, rs_eviction ev, int own_all)
{
	rs_zch_config cfg = {.buckets = buckets, .slots = slots, .eviction = ev, .lfu_decay_steps = 1000};
	rs_zch_table *z = NULL;
	rs_err err = {0};
	assert_int_equal(rs_zch_create(&cfg, &z, &err), RS_OK);
	for (uint32_t b = 0; own_all && b < buckets; b++)
		assert_int_equal(rs_zch_add_bucket(z, b), RS_OK);
	return z;
}

/* ---- zero collisions ---------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void insert_all_and_check(const uint64_t *ids, size_t n, const char *what)
{
	/* room for all: 768 buckets x 2048 slots = 1.57M slots for 1M IDs */
	rs_zch_table *z = make(768, 768 * 2048, RS_EVICT_LRU, 1);
	int64_t *slots = malloc(sizeof(int64_t) * n), *again = malloc(sizeof(int64_t) * n);
	const size_t batch = 65536;
	for (size_t i = 0; i < n; i += batch) {
		size_t k = n - i < batch ? n - i : batch;
		assert_int_equal(rs_zch_find_or_insert(z, ids + i, k, (uint32_t)(i / batch), slots + i, NULL, NULL), RS_OK);
	}
	rs_zch_stats st = rs_zch_get_stats(z);
	if (st.overflows || st.evictions)
		fail_msg("%s: %llu overflows, %llu evictions with room for every ID", what,
			 (unsigned long long)st.overflows, (unsigned long long)st.evictions);
	/* every live ID keeps its slot on lookup, and no slot holds two IDs */
	assert_int_equal(rs_zch_find(z, ids, n, again), RS_OK);
	for (size_t i = 0; i < n; i++) {
		if (again[i] != slots[i])
			fail_msg("%s: ID %llu moved from slot %lld to %lld", what, (unsigned long long)ids[i],
				 (long long)slots[i], (long long)again[i]);
		int live;
		assert_true(rs_zch_slot_id(z, slots[i], &live) == ids[i] && live);
	}
	qsort(again, n, sizeof(int64_t), cmp_i64);
	for (size_t i = 1; i < n; i++)
		if (again[i] == again[i - 1])
			fail_msg("%s: two IDs share slot %lld", what, (long long)again[i]);
	/* spread: the fullest bucket holds at most 1.25x the mean */
	uint32_t *per = calloc(768, sizeof(uint32_t)), mx = 0;
	for (size_t i = 0; i < n; i++)
		per[slots[i] / 2048]++;
	for (int b = 0; b < 768; b++)
		mx = per[b] > mx ? per[b] : mx;
	if (mx > 1.25 * (double)n / 768)
		fail_msg("%s: fullest bucket has %u IDs, mean %.0f", what, mx, (double)n / 768);
	free(per);
	free(again);
	free(slots);
	rs_zch_destroy(z);
}

static void test_zero_collisions_adversarial(void **state)
{
	(void)state;
	const size_t n = 1000000;
	uint64_t *ids = malloc(sizeof(uint64_t) * n);
	for (size_t i = 0; i < n; i++)
		ids[i] = i;
	insert_all_and_check(ids, n, "sequential");
	for (size_t i = 0; i < n; i++)
		ids[i] = (uint64_t)i * 768;
	insert_all_and_check(ids, n, "multiples of 768");
	for (size_t i = 0; i < n; i++)
		ids[i] = 5 + (uint64_t)i * 768 * 4096; /* all equal mod 768 and mod 4096 */
	insert_all_and_check(ids, n, "same residue");
	for (size_t i = 0; i < n; i++)
		ids[i] = UINT64_MAX - i; /* the top of the ID space, 0 and ~0 included below */
	ids[0] = 0;
	insert_all_and_check(ids, n, "top of the range");
	free(ids);
}

/* ---- eviction --------------------------------------------------------------------- */

/* One bucket of four slots: hand-built histories. */
static void test_lru_order(void **state)
{
	(void)state;
	rs_zch_table *z = make(1, 4, RS_EVICT_LRU, 1);
	uint64_t a[] = {10, 11, 12, 13};
	int64_t s[4], fresh[4], got;
	size_t nf;
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(rs_zch_find_or_insert(z, &a[i], 1, i + 1, &s[i], fresh, &nf), RS_OK);
	/* touch 10 at step 5: 11 is now the least recently used */
	assert_int_equal(rs_zch_find_or_insert(z, &a[0], 1, 5, &got, fresh, &nf), RS_OK);
	assert_int_equal(nf, 0);
	uint64_t x = 99;
	assert_int_equal(rs_zch_find_or_insert(z, &x, 1, 6, &got, fresh, &nf), RS_OK);
	assert_int_equal(got, s[1]);
	assert_int_equal(nf, 1);
	assert_int_equal(fresh[0], s[1]); /* the caller must re-initialize this row */
	int64_t f;
	assert_int_equal(rs_zch_find(z, &a[1], 1, &f), RS_OK);
	assert_int_equal(f, -1); /* evicted: a zero row, not another ID's */
	/* next victims in order: 12 (step 3), 13 (step 4), 10 (step 5) */
	uint64_t y[] = {100, 101, 102};
	int64_t want[] = {s[2], s[3], s[0]};
	for (int i = 0; i < 3; i++) {
		assert_int_equal(rs_zch_find_or_insert(z, &y[i], 1, 7 + (uint32_t)i, &got, NULL, NULL), RS_OK);
		assert_int_equal(got, want[i]);
	}
	rs_zch_stats st = rs_zch_get_stats(z);
	assert_int_equal(st.inserts, 4);
	assert_int_equal(st.evictions, 4);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.misses, 1);
	rs_zch_destroy(z);
}

static void test_lfu_order_and_decay(void **state)
{
	(void)state;
	rs_zch_config cfg = {.buckets = 1, .slots = 3, .eviction = RS_EVICT_LFU, .lfu_decay_steps = 100};
	rs_zch_table *z;
	rs_err err = {0};
	assert_int_equal(rs_zch_create(&cfg, &z, &err), RS_OK);
	assert_int_equal(rs_zch_add_bucket(z, 0), RS_OK);
	/* counts: 1 seen 3 times, 2 once, 3 twice (all in epoch 0) */
	uint64_t hist[] = {1, 2, 3, 1, 3, 1};
	int64_t s[6], got;
	for (uint32_t i = 0; i < 6; i++)
		assert_int_equal(rs_zch_find_or_insert(z, &hist[i], 1, i, &s[i], NULL, NULL), RS_OK);
	uint64_t x = 50;
	assert_int_equal(rs_zch_find_or_insert(z, &x, 1, 10, &got, NULL, NULL), RS_OK);
	assert_int_equal(got, s[1]); /* ID 2, the least frequent */
	/* ID 50 (count 1) is next; after a decay to epoch 4 (counts >> 4 = 0 for all) ties go to the oldest */
	uint64_t y = 51;
	assert_int_equal(rs_zch_find_or_insert(z, &y, 1, 11, &got, NULL, NULL), RS_OK);
	assert_int_equal(got, s[1]);
	uint64_t w = 52;
	assert_int_equal(rs_zch_find_or_insert(z, &w, 1, 400, &got, NULL, NULL), RS_OK);
	/* all counts decayed to 0: the oldest last step among 1 (step 5), 3 (step 4), 51 (step 11) is 3 */
	assert_int_equal(got, s[2]);
	rs_zch_destroy(z);
}

static void test_pinned_within_step(void **state)
{
	(void)state;
	rs_zch_table *z = make(1, 2, RS_EVICT_LRU, 1);
	uint64_t ids[] = {1, 2, 3, 1};
	int64_t s[4];
	assert_int_equal(rs_zch_find_or_insert(z, ids, 4, 1, s, NULL, NULL), RS_OK);
	assert_true(s[0] >= 0 && s[1] >= 0 && s[0] != s[1]);
	assert_int_equal(s[2], -1); /* both slots were seen this step */
	assert_int_equal(s[3], s[0]);
	assert_int_equal(rs_zch_get_stats(z).overflows, 1);
	/* the next step 3 gets a slot: both were last seen at step 1, so the tie goes to the lowest slot */
	assert_int_equal(rs_zch_find_or_insert(z, &ids[2], 1, 2, s, NULL, NULL), RS_OK);
	assert_int_equal(s[0], 0);
	rs_zch_destroy(z);
}

/* ---- resharding ------------------------------------------------------------------ */

#define RB 768
#define RS_SPB 8
#define DIM 2

/* Row values an ID's row holds: a function of the ID, so values can be checked after moves. */
static void row_of(uint64_t id, float *row)
{
	row[0] = (float)(id % 1000003);
	row[1] = (float)(id / 7 % 999983);
}

typedef struct rank {
	rs_zch_table *z;
	float *rows; /* RB * RS_SPB * DIM: indexed by global slot, only owned buckets meaningful */
} rank;

static void reshard_pair(int32_t n, int32_t m, const uint64_t *ids, size_t nids)
{
	rank *r = calloc((size_t)(n > m ? n : m), sizeof(rank));
	int32_t *owner = malloc(sizeof(int32_t) * RB), *next = malloc(sizeof(int32_t) * RB);
	rs_err err = {0};
	assert_int_equal(rs_buckets_assign(RB, n, NULL, NULL, owner, &err), RS_OK);
	for (int32_t k = 0; k < (n > m ? n : m); k++) {
		r[k].z = make(RB, RB * RS_SPB, RS_EVICT_LRU, 0);
		r[k].rows = calloc(RB * RS_SPB * DIM, sizeof(float));
	}
	for (uint32_t b = 0; b < RB; b++)
		assert_int_equal(rs_zch_add_bucket(r[owner[b]].z, b), RS_OK);
	/* insert every ID at its owner and give its row the ID's values */
	for (size_t i = 0; i < nids; i++) {
		int32_t k = owner[rs_zch_bucket_of(ids[i], RB)];
		int64_t slot;
		assert_int_equal(rs_zch_find_or_insert(r[k].z, &ids[i], 1, (uint32_t)i, &slot, NULL, NULL), RS_OK);
		if (slot >= 0)
			row_of(ids[i], &r[k].rows[slot * DIM]);
	}
	/* ranks 0..min(n,m)-1 stay; move buckets to the new assignment through save/load */
	for (uint32_t b = 0; b < RB; b++)
		next[b] = owner[b] < m ? owner[b] : -1;
	assert_int_equal(rs_buckets_assign(RB, m, next, NULL, next, &err), RS_OK);
	uint32_t moved = 0, expect = 0;
	int32_t *prev = malloc(sizeof(int32_t) * RB);
	for (uint32_t b = 0; b < RB; b++)
		prev[b] = owner[b] < m ? owner[b] : -1;
	expect = rs_buckets_min_moves(RB, m, prev);
	size_t cap = rs_zch_bucket_bytes(r[0].z, DIM * sizeof(float));
	unsigned char *buf = malloc(cap);
	for (uint32_t b = 0; b < RB; b++) {
		if (next[b] == owner[b])
			continue;
		size_t len;
		rank *src = &r[owner[b]], *dst = &r[next[b]];
		assert_int_equal(rs_zch_bucket_save(src->z, b, &src->rows[(size_t)b * RS_SPB * DIM], DIM * sizeof(float),
						    buf, cap, &len), RS_OK);
		uint32_t got;
		assert_int_equal(rs_zch_bucket_load(dst->z, buf, len, &dst->rows[(size_t)b * RS_SPB * DIM],
						    DIM * sizeof(float), &got, &err), RS_OK);
		assert_int_equal(got, b);
		assert_int_equal(rs_zch_drop_bucket(src->z, b), RS_OK);
		moved++;
	}
	assert_int_equal(moved, expect);
	/* balance: bucket counts within one */
	uint32_t lo = RB, hi = 0;
	for (int32_t k = 0; k < m; k++) {
		uint32_t c = rs_zch_owned(r[k].z);
		lo = c < lo ? c : lo;
		hi = c > hi ? c : hi;
	}
	assert_true(hi - lo <= 1);
	for (int32_t k = m; k < n; k++)
		assert_int_equal(rs_zch_owned(r[k].z), 0);
	/* every live ID resolves to a row with its own values */
	for (size_t i = 0; i < nids; i++) {
		int32_t k = next[rs_zch_bucket_of(ids[i], RB)];
		int64_t slot;
		assert_int_equal(rs_zch_find(r[k].z, &ids[i], 1, &slot), RS_OK);
		if (slot < 0)
			continue; /* evicted by a later ID of its bucket: not live */
		float want[DIM];
		row_of(ids[i], want);
		assert_memory_equal(&r[k].rows[slot * DIM], want, sizeof(want));
	}
	free(buf);
	free(prev);
	for (int32_t k = 0; k < (n > m ? n : m); k++) {
		rs_zch_destroy(r[k].z);
		free(r[k].rows);
	}
	free(next);
	free(owner);
	free(r);
}

static void test_reshard_any_sizes(void **state)
{
	(void)state;
	const size_t nids = 1500;
	uint64_t *ids = malloc(sizeof(uint64_t) * nids);
	for (size_t i = 0; i < nids; i++)
		ids[i] = 0x1234567ull * (i + 1) ^ (i << 40);
	for (int32_t n = 1; n <= 64; n++)
		for (int32_t m = 1; m <= 64; m++)
			reshard_pair(n, m, ids, nids);
	reshard_pair(8, 5, ids, nids);
	reshard_pair(5, 7, ids, nids);
	reshard_pair(7, 5, ids, nids);
	reshard_pair(64, 63, ids, nids);
	free(ids);
}

/* ---- bad input ---------------------------------------------------------------------- */

static void test_bad_geometry(void **state)
{
	(void)state;
	rs_zch_table *z = NULL;
	rs_err err = {0};
	rs_zch_config zero = {.buckets = 0, .slots = 768};
	assert_int_equal(rs_zch_create(&zero, &z, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "bucket"));
	rs_zch_config odd = {.buckets = 768, .slots = 1000};
	err.msg[0] = 0;
	assert_int_equal(rs_zch_create(&odd, &z, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "multiple"));
	assert_null(z);
}

static void test_corrupt_bucket_rejected(void **state)
{
	(void)state;
	rs_zch_table *a = make(8, 64, RS_EVICT_LRU, 1), *b = make(8, 64, RS_EVICT_LRU, 0);
	uint64_t ids[40];
	int64_t slots[40];
	for (int i = 0; i < 40; i++)
		ids[i] = (uint64_t)i * 31 + 7;
	assert_int_equal(rs_zch_find_or_insert(a, ids, 40, 1, slots, NULL, NULL), RS_OK);
	uint32_t bk = rs_zch_bucket_of(ids[0], 8);
	float rows[8 * 3], out[8 * 3];
	for (int i = 0; i < 24; i++)
		rows[i] = (float)i, out[i] = -1;
	size_t cap = rs_zch_bucket_bytes(a, 3 * sizeof(float)), len;
	unsigned char *buf = malloc(cap), *bad = malloc(cap);
	assert_int_equal(rs_zch_bucket_save(a, bk, rows, 3 * sizeof(float), buf, cap, &len), RS_OK);

	struct { const char *what; size_t len; size_t flip; size_t rowb; rs_status want; } cases[] = {
		{"truncated", 20, (size_t)-1, 12, RS_ECORRUPT},
		{"one byte short", 0, (size_t)-1, 12, RS_ECORRUPT},
		{"payload bit flipped", 0, 100, 12, RS_ECORRUPT},
		{"checksum bit flipped", 0, 1, 12, RS_ECORRUPT},
		{"magic", 0, 0, 12, RS_ECORRUPT},
		{"other row size", 0, (size_t)-1, 16, RS_EINVAL},
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		memcpy(bad, buf, len);
		size_t l = cases[c].len ? cases[c].len : len;
		if (!strcmp(cases[c].what, "one byte short"))
			l = len - 1;
		if (cases[c].flip == 1)
			bad[len - 1] ^= 0x10;
		else if (cases[c].flip != (size_t)-1)
			bad[cases[c].flip] ^= 0x01;
		uint32_t got = 999;
		rs_err err = {0};
		rs_status st = rs_zch_bucket_load(b, bad, l, out, cases[c].rowb, &got, &err);
		if (st != cases[c].want)
			fail_msg("%s: status %s: %s", cases[c].what, rs_status_str(st), err.msg);
		assert_true(err.msg[0] != 0);
		assert_int_equal(rs_zch_owned(b), 0); /* untouched */
		assert_true(out[0] == -1.0f);
	}
	/* the intact buffer loads, and IDs resolve to the same slots */
	uint32_t got;
	rs_err err = {0};
	assert_int_equal(rs_zch_bucket_load(b, buf, len, out, 3 * sizeof(float), &got, &err), RS_OK);
	assert_int_equal(got, bk);
	assert_memory_equal(out, rows, sizeof(rows));
	for (int i = 0; i < 40; i++) {
		if (rs_zch_bucket_of(ids[i], 8) != bk)
			continue;
		int64_t s;
		assert_int_equal(rs_zch_find(b, &ids[i], 1, &s), RS_OK);
		assert_int_equal(s, slots[i]);
	}
	free(bad);
	free(buf);
	rs_zch_destroy(a);
	rs_zch_destroy(b);
}

/*
 * A checkpoint's view of a bucket (slot IDs and metadata, rs_zch_slot_meta)
 * restores it: the same IDs in the same slots, and the same LRU victim next;
 * malformed views are refused without touching the table.
 */
static void test_restore_from_checkpoint(void **state)
{
	(void)state;
	rs_zch_table *z = make(1, 4, RS_EVICT_LRU, 1), *r = make(1, 4, RS_EVICT_LRU, 0);
	uint64_t a[] = {10, 11, 12};
	int64_t s[3], ids[4], got, want;
	uint32_t meta[12];
	rs_err err = {0};
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(rs_zch_find_or_insert(z, &a[i], 1, i + 1, &s[i], NULL, NULL), RS_OK);
	assert_int_equal(rs_zch_find_or_insert(z, &a[0], 1, 5, &got, NULL, NULL), RS_OK); /* 11 is now the LRU */
	for (int64_t k = 0; k < 4; k++) {
		int live;
		uint64_t id = rs_zch_slot_id(z, k, &live);
		ids[k] = live ? (int64_t)id : -1;
		rs_zch_slot_meta(z, k, meta + 3 * k);
	}
	assert_int_equal(ids[3], -1);
	assert_int_equal(rs_zch_bucket_restore(r, 0, ids, meta, &err), RS_OK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(rs_zch_find(r, &a[i], 1, &got), RS_OK);
		assert_int_equal(got, s[i]);
	}
	/* the free slot fills first, then the LRU victim is the same in both */
	uint64_t x[] = {98, 99};
	for (int i = 0; i < 2; i++) {
		assert_int_equal(rs_zch_find_or_insert(z, &x[i], 1, 6 + (uint32_t)i, &want, NULL, NULL), RS_OK);
		assert_int_equal(rs_zch_find_or_insert(r, &x[i], 1, 6 + (uint32_t)i, &got, NULL, NULL), RS_OK);
		assert_int_equal(got, want);
	}
	assert_int_equal(got, s[1]);
	/* malformed: an ID after a free slot, a duplicate, a live slot without a last step */
	rs_zch_table *e = make(1, 4, RS_EVICT_LRU, 0);
	int64_t gap[4] = {10, -1, 11, -1}, twice[4] = {10, 10, -1, -1};
	uint32_t nolast[12] = {0};
	err.msg[0] = 0;
	assert_int_equal(rs_zch_bucket_restore(e, 0, gap, NULL, &err), RS_ECORRUPT);
	assert_non_null(strstr(err.msg, "after a free slot"));
	assert_int_equal(rs_zch_bucket_restore(e, 0, twice, NULL, &err), RS_ECORRUPT);
	assert_int_equal(rs_zch_bucket_restore(e, 0, ids, nolast, &err), RS_ECORRUPT);
	assert_int_equal(rs_zch_bucket_restore(e, 1, ids, meta, &err), RS_EINVAL); /* no such bucket */
	assert_int_equal(rs_zch_owned(e), 0); /* nothing changed */
	rs_zch_destroy(e);
	rs_zch_destroy(z);
	rs_zch_destroy(r);
}

/* ---- eviction against the rule itself -------------------------------------------- */

/* zch.h's rule written as plainly as possible: every bucket a list of slots, every victim a scan. */
typedef struct ref_zch {
	uint32_t nb, spb, decay;
	int lfu;
	uint64_t *id;
	uint32_t *last, *count, *nused, *epoch;
	rs_zch_stats st; /* counted as the table counts */
} ref_zch;

static ref_zch ref_make(uint32_t nb, uint32_t spb, int lfu, uint32_t decay)
{
	ref_zch r = {.nb = nb, .spb = spb, .decay = decay, .lfu = lfu};
	r.id = calloc((size_t)nb * spb, sizeof(uint64_t));
	r.last = calloc((size_t)nb * spb, sizeof(uint32_t));
	r.count = calloc((size_t)nb * spb, sizeof(uint32_t));
	r.nused = calloc(nb, sizeof(uint32_t));
	r.epoch = calloc(nb, sizeof(uint32_t));
	assert_true(r.id && r.last && r.count && r.nused && r.epoch);
	return r;
}

static void ref_free(ref_zch *r)
{
	free(r->id);
	free(r->last);
	free(r->count);
	free(r->nused);
	free(r->epoch);
}

/* The slot of id at step (-1: every slot pinned); *fresh says whether it was given to id now. */
static int64_t ref_find_or_insert(ref_zch *r, uint64_t id, uint32_t step, int *fresh)
{
	uint32_t b = rs_zch_bucket_of(id, r->nb), S = r->spb;
	uint64_t *ids = r->id + (size_t)b * S;
	uint32_t *last = r->last + (size_t)b * S, *count = r->count + (size_t)b * S;
	if (r->lfu && step / r->decay > r->epoch[b]) {
		uint32_t shift = step / r->decay - r->epoch[b];
		for (uint32_t s = 0; s < r->nused[b]; s++)
			count[s] = shift >= 32 ? 0 : count[s] >> shift;
		r->epoch[b] = step / r->decay;
	}
	*fresh = 0;
	for (uint32_t s = 0; s < r->nused[b]; s++)
		if (ids[s] == id) {
			last[s] = step + 1;
			count[s] += count[s] != UINT32_MAX;
			r->st.hits++;
			return (int64_t)b * S + s;
		}
	int64_t v = -1;
	if (r->nused[b] < S) {
		v = r->nused[b]++;
		r->st.inserts++;
	} else {
		for (uint32_t s = 0; s < S; s++) {
			if (last[s] == step + 1)
				continue;
			if (v < 0 || (r->lfu ? count[s] < count[v] || (count[s] == count[v] && last[s] < last[v]) :
					       last[s] < last[v]))
				v = s;
		}
		if (v < 0) {
			r->st.overflows++;
			return -1;
		}
		r->st.evictions++;
	}
	ids[v] = id;
	last[v] = step + 1;
	count[v] = 1;
	*fresh = 1;
	return (int64_t)b * S + v;
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* A copy of z through one of the ways a bucket travels: saved and loaded, or restored from a checkpoint's slots. */
static rs_zch_table *travel(rs_zch_table *z, const rs_zch_config *cfg, int how)
{
	uint32_t nb = cfg->buckets, S = (uint32_t)(cfg->slots / nb);
	rs_zch_table *t = NULL;
	rs_err err = {0};
	assert_int_equal(rs_zch_create(cfg, &t, &err), RS_OK);
	size_t cap = rs_zch_bucket_bytes(z, 0), len;
	unsigned char *buf = malloc(cap), row = 0;
	int64_t *ids = malloc(sizeof(int64_t) * S);
	uint32_t *meta = malloc(sizeof(uint32_t) * 3 * S), got;
	assert_true(buf && ids && meta);
	for (uint32_t k = 0; k < nb; k++) {
		uint32_t b = nb - 1 - k; /* the other order: other blocks */
		if (how == 0) {
			assert_int_equal(rs_zch_bucket_save(z, b, &row, 0, buf, cap, &len), RS_OK);
			assert_int_equal(rs_zch_bucket_load(t, buf, len, &row, 0, &got, &err), RS_OK);
			continue;
		}
		for (uint32_t s = 0; s < S; s++) {
			int live;
			uint64_t id = rs_zch_slot_id(z, (int64_t)b * S + s, &live);
			ids[s] = live ? (int64_t)id : -1;
			rs_zch_slot_meta(z, (int64_t)b * S + s, meta + 3 * s);
		}
		assert_int_equal(rs_zch_bucket_restore(t, b, ids, meta, &err), RS_OK);
	}
	/* and a bucket given up and taken back, which moves the last block into the hole */
	assert_int_equal(rs_zch_bucket_save(t, 0, &row, 0, buf, cap, &len), RS_OK);
	assert_int_equal(rs_zch_drop_bucket(t, nb - 1), RS_OK);
	assert_int_equal(rs_zch_drop_bucket(t, 0), RS_OK);
	assert_int_equal(rs_zch_bucket_load(t, buf, len, &row, 0, &got, &err), RS_OK);
	assert_int_equal(rs_zch_bucket_save(z, nb - 1, &row, 0, buf, cap, &len), RS_OK);
	assert_int_equal(rs_zch_bucket_load(t, buf, len, &row, 0, &got, &err), RS_OK);
	free(meta);
	free(ids);
	free(buf);
	rs_zch_destroy(z);
	return t;
}

/*
 * One run of the table and the rule side by side. IDs: skewed (a few hot,
 * a long tail) or Zipf(1.05) over a universe several times the table, with
 * repeats within a batch; steps that stay, advance or jump (past several
 * decay epochs); every `travel` calls the table is copied (saved and
 * loaded, or restored); with `unowned`, the last bucket is not the table's.
 */
typedef struct rule_run {
	uint32_t nb, S, decay, calls, maxn, travel;
	int lfu, zipf, unowned;
	uint32_t step; /* the first */
} rule_run;

/* Run c through z and r (the rule in the same state): z afterwards (maybe another table: travels copy it). */
static rs_zch_table *run_against_rule(const rule_run *c, uint64_t x, rs_zch_table *z, ref_zch *r, uint64_t *evictions,
				      uint64_t *overflows)
{
	rs_zch_config cfg = {.buckets = c->nb, .slots = (uint64_t)c->nb * c->S,
			     .eviction = c->lfu ? RS_EVICT_LFU : RS_EVICT_LRU, .lfu_decay_steps = c->decay};
	uint64_t universe = (c->zipf ? 20 : 4) * (uint64_t)c->nb * c->S;
	uint64_t *ids = malloc(sizeof(uint64_t) * c->maxn);
	int64_t *got = malloc(sizeof(int64_t) * c->maxn), *fresh = malloc(sizeof(int64_t) * c->maxn);
	rs_zipf zipf;
	rs_rng rng = rs_rng_make(x, 7, 11);
	rs_zipf_init(&zipf, universe, 1.05);
	assert_true(ids && got && fresh);
	uint32_t step = c->step;
	const char *name = c->lfu ? "LFU" : "LRU";
	for (uint32_t call = 0; call < c->calls; call++) {
		uint64_t k = rnd(&x) % 16;
		step += k < 5 ? 0 : k < 14 ? 1 : k < 15 ? 2 : 7 * c->decay; /* 0: more IDs in the same step */
		size_t n = 1 + rnd(&x) % c->maxn, nfresh, nf = 0;
		for (size_t i = 0; i < n; i++) {
			uint64_t u = rnd(&x) % universe;
			ids[i] = c->zipf ? rs_mix64(rs_zipf_sample(&zipf, &rng)) : 1000 + (rnd(&x) % 2 ? u % (c->S + 1) : u);
		}
		rs_zch_stats before = rs_zch_get_stats(z), rb = r->st;
		rs_status st = rs_zch_find_or_insert(z, ids, n, step, got, fresh, &nfresh), want_st = RS_OK;
		for (size_t i = 0; i < n; i++) {
			int isfresh = 0;
			int64_t want = -1;
			if (c->unowned && rs_zch_bucket_of(ids[i], c->nb) == c->nb - 1)
				want_st = RS_ENOTFOUND;
			else
				want = ref_find_or_insert(r, ids[i], step, &isfresh);
			if (got[i] != want)
				fail_msg("%s S=%u call %u step %u id %zu: slot %lld, the rule says %lld", name, c->S, call, step,
					 i, (long long)got[i], (long long)want);
			if (isfresh) {
				assert_true(nf < nfresh);
				assert_int_equal(fresh[nf++], want);
			}
		}
		assert_int_equal(nf, nfresh);
		assert_int_equal(st, want_st);
		rs_zch_stats after = rs_zch_get_stats(z);
		if (after.hits - before.hits != r->st.hits - rb.hits || after.inserts - before.inserts != r->st.inserts - rb.inserts ||
		    after.evictions - before.evictions != r->st.evictions - rb.evictions ||
		    after.overflows - before.overflows != r->st.overflows - rb.overflows || after.misses != before.misses)
			fail_msg("%s S=%u call %u: statistics differ from the rule's", name, c->S, call);
		*evictions += after.evictions - before.evictions;
		*overflows += after.overflows - before.overflows;
		if (c->travel && call % c->travel == c->travel - 1)
			z = travel(z, &cfg, call / c->travel % 2);
	}
	free(fresh);
	free(got);
	free(ids);
	return z;
}

/* A table and the rule, both empty, for run_against_rule. */
static void check_against_rule(const rule_run *c, uint64_t seed, uint64_t min_evictions, int want_overflows)
{
	rs_zch_config cfg = {.buckets = c->nb, .slots = (uint64_t)c->nb * c->S,
			     .eviction = c->lfu ? RS_EVICT_LFU : RS_EVICT_LRU, .lfu_decay_steps = c->decay};
	rs_zch_table *z = NULL;
	rs_err err = {0};
	uint64_t evictions = 0, overflows = 0;
	assert_int_equal(rs_zch_create(&cfg, &z, &err), RS_OK);
	for (uint32_t b = 0; b < c->nb - (c->unowned ? 1 : 0); b++)
		assert_int_equal(rs_zch_add_bucket(z, b), RS_OK);
	ref_zch r = ref_make(c->nb, c->S, c->lfu, c->decay);
	rs_zch_destroy(run_against_rule(c, seed, z, &r, &evictions, &overflows));
	/* the run must have exercised what it checks */
	if (evictions < min_evictions || (want_overflows && overflows == 0))
		fail_msg("%s S=%u: %llu evictions, %llu overflows", c->lfu ? "LFU" : "LRU", c->S,
			 (unsigned long long)evictions, (unsigned long long)overflows);
	ref_free(&r);
}

static void test_eviction_matches_rule(void **state)
{
	(void)state;
	const uint32_t spbs[] = {1, 5, 37, 64};
	for (int lfu = 0; lfu < 2; lfu++)
		for (size_t g = 0; g < sizeof(spbs) / sizeof(spbs[0]); g++) {
			uint32_t S = spbs[g], maxn = 3 * 3 * S < 256 ? 3 * 3 * S : 256;
			rule_run c = {.nb = 3, .S = S, .decay = 4, .calls = 600, .maxn = maxn, .travel = 97, .lfu = lfu};
			check_against_rule(&c, 0x9E3779B97F4A7C15ull + S, 100, S > 1);
		}
}

/*
 * Larger buckets, Zipf IDs in batches far longer than the lookup's
 * pipeline, with and without travels (a loaded LRU slot hit since is in
 * both of the table's orders), and with a bucket the table does not own.
 */
static void test_eviction_matches_rule_zipf(void **state)
{
	(void)state;
	for (int lfu = 0; lfu < 2; lfu++) {
		rule_run plain = {.nb = 4, .S = 128, .decay = 8, .calls = 120, .maxn = 2048, .lfu = lfu, .zipf = 1};
		check_against_rule(&plain, 0x1234 + (uint64_t)lfu, 1000, 1);
		rule_run moved = plain;
		moved.travel = 9;
		moved.decay = 1000;
		check_against_rule(&moved, 0x5678 + (uint64_t)lfu, 1000, 1);
		rule_run unowned = plain;
		unowned.unowned = 1;
		unowned.step = 0xFFFFF000u; /* steps near the top of their range (40 calls stay below it) */
		unowned.calls = 40;
		check_against_rule(&unowned, 0x9ABC + (uint64_t)lfu, 100, 1);
	}
}

/*
 * Buckets restored from a checkpoint whose slots were last seen at later
 * steps than those that follow (then a slot's order is not that of the
 * steps to come, and some slots count as seen in a step before any lookup):
 * the table still chooses as the rule does.
 */
static void test_restore_from_later_steps(void **state)
{
	(void)state;
	for (int lfu = 0; lfu < 2; lfu++) {
		rule_run c = {.nb = 3, .S = 50, .decay = 5, .calls = 300, .maxn = 200, .lfu = lfu, .zipf = 1, .step = 100};
		rs_zch_config cfg = {.buckets = c.nb, .slots = (uint64_t)c.nb * c.S,
				     .eviction = lfu ? RS_EVICT_LFU : RS_EVICT_LRU, .lfu_decay_steps = c.decay};
		rs_zch_table *z = NULL;
		rs_err err = {0};
		uint64_t evictions = 0, overflows = 0;
		assert_int_equal(rs_zch_create(&cfg, &z, &err), RS_OK);
		for (uint32_t b = 0; b < c.nb; b++)
			assert_int_equal(rs_zch_add_bucket(z, b), RS_OK);
		ref_zch r = ref_make(c.nb, c.S, lfu, c.decay);
		z = run_against_rule(&c, 0x4242 + (uint64_t)lfu, z, &r, &evictions, &overflows);
		for (int how = 0; how < 2; how++) {
			z = travel(z, &cfg, how);
			c.step = 10 + (uint32_t)how;
			z = run_against_rule(&c, 0x4343 + (uint64_t)how, z, &r, &evictions, &overflows);
		}
		assert_true(evictions > 1000 && overflows > 0);
		rs_zch_destroy(z);
		ref_free(&r);
	}
}

/*
 * The index's hint is the ID hash's low bits, its bucket the high ones
 * (zch_internal.h): among the IDs of one bucket, the homes of a 1,024-entry
 * index spread evenly. A bucket taken from the low bits (h % buckets)
 * would leave them on 1 home in 64.
 */
static void test_hint_spreads_within_a_bucket(void **state)
{
	(void)state;
	enum { BUCKETS = 64, HOMES = 1024, PER = 16 };
	uint32_t *count = calloc(HOMES, sizeof(uint32_t)), n = 0, used = 0, most = 0;
	assert_non_null(count);
	for (uint64_t id = 1; n < HOMES * PER; id++)
		if (rs_zch_bucket_of(id, BUCKETS) == 5)
			count[hint_of(id) & (HOMES - 1)]++, n++;
	for (uint32_t k = 0; k < HOMES; k++) {
		used += count[k] > 0;
		most = count[k] > most ? count[k] : most;
	}
	assert_true(used > HOMES * 99 / 100); /* Poisson(16): a home left empty once in 9 million */
	assert_true(most < 4 * PER);
	free(count);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_zero_collisions_adversarial),
		cmocka_unit_test(test_lru_order),
		cmocka_unit_test(test_lfu_order_and_decay),
		cmocka_unit_test(test_pinned_within_step),
		cmocka_unit_test(test_reshard_any_sizes),
		cmocka_unit_test(test_bad_geometry),
		cmocka_unit_test(test_corrupt_bucket_rejected),
		cmocka_unit_test(test_restore_from_checkpoint),
		cmocka_unit_test(test_eviction_matches_rule),
		cmocka_unit_test(test_eviction_matches_rule_zipf),
		cmocka_unit_test(test_restore_from_later_steps),
		cmocka_unit_test(test_hint_spreads_within_a_bucket),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
