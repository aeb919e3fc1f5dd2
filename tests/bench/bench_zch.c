/*
 * bench_zch.c - ZCH find-or-insert throughput on Zipf(1.05) IDs (LRU and LFU) beside a
 * plain `id % slots` lookup of the same IDs in the same run (the
 * collision-prone baseline, with the collision rate it would have had),
 * each also over its batches after every slot was taken (`_full`: the
 * state of a long run, where new IDs evict), and
 * the same with every change recorded for an undo (a 2D step that may fail), and
 * bucket resharding 768 buckets 8 -> 12 -> 9 -> 16 against the minimum and
 * against TorchRec's rule (world size must divide the bucket count, re-split
 * by checkpoint reload).
 *
 * Wrong results fail the benchmark: two live IDs sharing a slot, an ID whose
 * slot changes while it is live, a reshard moving more than the minimum or
 * leaving buckets unbalanced.
 */
#include "common/buckets.h"
#include "common/rng.h"
#include "kernels/zch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 65536
#define BUCKETS 768

static int wrong;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* The baseline's collisions (distinct IDs whose id % slots is shared) beside ZCH's none. */
static void report_collisions(const uint64_t *ids, size_t n, uint64_t slots, const rs_zch_stats *st, uint64_t acc)
{
	uint64_t *d = malloc(sizeof(uint64_t) * n);
	memcpy(d, ids, sizeof(uint64_t) * n);
	qsort(d, n, sizeof(uint64_t), cmp_u64);
	size_t nd = 0;
	for (size_t i = 0; i < n; i++)
		if (i == 0 || d[i] != d[i - 1])
			d[nd++] = d[i];
	for (size_t i = 0; i < nd; i++)
		d[i] %= slots;
	qsort(d, nd, sizeof(uint64_t), cmp_u64);
	size_t shared = 0;
	for (size_t i = 0; i < nd; i++)
		if ((i > 0 && d[i] == d[i - 1]) || (i + 1 < nd && d[i] == d[i + 1]))
			shared++;
	printf("bench zch_collisions: 0 live IDs share a slot (%zu distinct IDs, %llu evictions, %llu hits) | "
	       "id %% slots baseline: %.1f%% of distinct IDs share a slot (checksum %llu)\n",
	       nd, (unsigned long long)st->evictions, (unsigned long long)st->hits,
	       100.0 * (double)shared / (double)nd, (unsigned long long)(acc & 0xff));
	free(d);
}

static void bench_lookup(int batches, rs_eviction eviction, int journal, const char *name)
{
	const uint64_t universe = 100000000, slots = (uint64_t)BUCKETS * 1024;
	size_t n = (size_t)batches * BATCH;
	uint64_t *ids = malloc(sizeof(uint64_t) * n);
	int64_t *out = malloc(sizeof(int64_t) * BATCH);
	uint32_t *rowmap = calloc(slots, sizeof(uint32_t));
	rs_zipf zipf;
	rs_rng rng = rs_rng_make(1, 2, 3);
	rs_zipf_init(&zipf, universe, 1.05);
	/* hot ranks become scattered raw IDs, as real user and item IDs are */
	for (size_t i = 0; i < n; i++)
		ids[i] = rs_mix64(rs_zipf_sample(&zipf, &rng) + 12345);

	rs_zch_config cfg = {.buckets = BUCKETS, .slots = slots, .eviction = eviction};
	rs_zch_table *z;
	rs_err err = {0};
	if (rs_zch_create(&cfg, &z, &err) != RS_OK) {
		fprintf(stderr, "%s\n", err.msg);
		exit(1);
	}
	for (uint32_t b = 0; b < BUCKETS; b++)
		rs_zch_add_bucket(z, b);

	/* the batches after every slot was taken (each new ID then evicts one) are also timed on their own */
	double t0 = now(), full_s = 0;
	int full_batches = 0;
	uint64_t full_evictions = 0;
	for (int k = 0; k < batches; k++) {
		double b0 = now();
		rs_zch_stats before = rs_zch_get_stats(z);
		if (journal) /* a step that may be undone (a healing 2D world): every change recorded */
			rs_zch_journal(z, 1);
		rs_zch_find_or_insert(z, ids + (size_t)k * BATCH, BATCH, (uint32_t)k, out, NULL, NULL);
		if (before.inserts == slots) {
			full_s += now() - b0;
			full_batches++;
			full_evictions += rs_zch_get_stats(z).evictions - before.evictions;
		}
	}
	double zch_s = now() - t0; /* the whole run, as before */

	/* the baseline: a modulo and a read of the row it picks */
	uint64_t acc = 0;
	t0 = now();
	for (int k = 0; k < batches; k++)
		for (size_t i = 0; i < BATCH; i++) {
			uint64_t s = ids[(size_t)k * BATCH + i] % slots;
			acc += rowmap[s] + s;
			out[i] = (int64_t)s;
		}
	double mod_s = now() - t0;

	/* correctness: the last batch's IDs are live, and each slot holds its own ID */
	const uint64_t *last = ids + (size_t)(batches - 1) * BATCH;
	int64_t *again = malloc(sizeof(int64_t) * BATCH);
	rs_zch_find(z, last, BATCH, again);
	for (size_t i = 0; i < BATCH; i++) {
		if (again[i] < 0) {
			wrong++;
			continue;
		}
		int live;
		if (rs_zch_slot_id(z, again[i], &live) != last[i] || !live)
			wrong++;
	}

	rs_zch_stats st = rs_zch_get_stats(z);
	double zr = (double)n / zch_s / 1e6, mr = (double)n / mod_s / 1e6;
	printf("bench %s: %.1f M IDs/s | id %% slots baseline %.1f M IDs/s | ratio %.2f | "
	       "target >= 50 M IDs/s on one core and ratio >= 0.20 %s\n", name, zr, mr, zr / mr,
	       zr >= 50 && zr / mr >= 0.20 ? "MET" : "MISSED");
	if (full_batches) {
		double fr = (double)full_batches * BATCH / full_s / 1e6;
		printf("bench %s_full: %.1f M IDs/s over the last %d batches, every slot taken (%.0f%% of their IDs evicted "
		       "one) | id %% slots baseline %.1f M IDs/s | ratio %.2f\n", name, fr, full_batches,
		       100.0 * (double)full_evictions / ((double)full_batches * BATCH), mr, fr / mr);
	} else {
		printf("bench %s_full: not measured (no batch after every slot was taken)\n", name);
	}
	if (eviction == RS_EVICT_LRU && !journal)
		report_collisions(ids, n, slots, &st, acc);
	free(again);
	rs_zch_destroy(z);
	free(rowmap);
	free(out);
	free(ids);
}

/* Buckets whose owner changes when contiguous equal blocks over n become blocks over m. */
static uint32_t torchrec_resplit_moves(int32_t n, int32_t m)
{
	uint32_t moved = 0;
	for (uint32_t b = 0; b < BUCKETS; b++)
		moved += b / (BUCKETS / (uint32_t)n) != b / (BUCKETS / (uint32_t)m);
	return moved;
}

static void bench_reshard(void)
{
	int32_t path[] = {8, 12, 9, 16};
	int32_t owner[BUCKETS], prev[BUCKETS];
	rs_err err = {0};
	rs_buckets_assign(BUCKETS, path[0], NULL, NULL, owner, &err);
	int torchrec_possible = 1;
	for (size_t i = 1; i < sizeof(path) / sizeof(path[0]); i++) {
		int32_t n = path[i - 1], m = path[i];
		for (uint32_t b = 0; b < BUCKETS; b++)
			prev[b] = owner[b] < m ? owner[b] : -1;
		uint32_t min = rs_buckets_min_moves(BUCKETS, m, prev);
		rs_buckets_assign(BUCKETS, m, prev, NULL, owner, &err);
		uint32_t moved = 0, cnt[64] = {0}, lo = BUCKETS, hi = 0;
		for (uint32_t b = 0; b < BUCKETS; b++) {
			moved += owner[b] != prev[b];
			cnt[owner[b]]++;
		}
		for (int32_t k = 0; k < m; k++) {
			lo = cnt[k] < lo ? cnt[k] : lo;
			hi = cnt[k] > hi ? cnt[k] : hi;
		}
		if (moved != min || hi - lo > 1)
			wrong++;
		char tr[128];
		if (BUCKETS % m || BUCKETS % n || !torchrec_possible) {
			snprintf(tr, sizeof(tr), "TorchRec: not possible (%s), checkpoint save and reload",
				 BUCKETS % m ? "world size does not divide 768" : "no such previous state");
			torchrec_possible = 0;
		} else {
			snprintf(tr, sizeof(tr), "TorchRec: %u buckets by checkpoint reload", torchrec_resplit_moves(n, m));
		}
		printf("bench zch_reshard_%d_to_%d: moved %u buckets live | minimum %u | ratio %.2f | target equal %s | %s\n",
		       n, m, moved, min, min ? (double)moved / min : 1.0, moved == min ? "MET" : "MISSED", tr);
	}
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && !strcmp(argv[1], "--quick");
	bench_lookup(quick ? 4 : 60, RS_EVICT_LRU, 0, "zch_find_or_insert");
	bench_lookup(quick ? 4 : 60, RS_EVICT_LFU, 0, "zch_find_or_insert_lfu");
	bench_lookup(quick ? 4 : 60, RS_EVICT_LRU, 1, "zch_find_or_insert_recorded");
	bench_lookup(quick ? 4 : 60, RS_EVICT_LFU, 1, "zch_find_or_insert_lfu_recorded"); /* its decays recorded too */
	bench_reshard();
	if (wrong)
		fprintf(stderr, "bench zch: %d wrong results\n", wrong);
	return wrong ? 1 : 0;
}
