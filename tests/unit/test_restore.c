/*
 * test_restore.c - tests the partial recovery reshard (worker/reshard.c,
 * spec->restore): a world of 2 ranks trains 5 steps, writes a checkpoint,
 * trains 5 more; rank 1 is then lost. Its replacement and the survivor
 * stage the same plan again over a new union, rank 1's rows marked lost
 * with every copy: the survivor keeps every row it held (equal to its
 * model at step 10), the replacement's rows are exactly those of the
 * checkpoint of step 5 (weights, optimizer state, ZCH identities and
 * eviction metadata: the same per-table checksums rank 1 had then), it
 * gets the survivor's dense network of step 10, and the restored rows'
 * checksums and count are reported apart. Without a checkpoint to restore
 * from, the same stage fails naming the rows lost with every copy.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/plan.h"
#include "common/planner.h"
#include "tests/unit/scratch.h"
#include "tests/unit/world_harness.h"
#include "worker/train.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NT 16 /* tables at most */

static const char *config_path = "tests/data/train-model.json";
static rs_config *cfg;
static rs_plan *plan;
static char dir[64], ckpt[128];
static rs_trainer *survivor; /* rank 0's model at step 10, inherited by the processes of the second world */
static int restoring;       /* the second world restores from ckpt (else: no checkpoint given) */

static int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	if (rs_scratch_make(dir, sizeof(dir), "restore") != 0 || rs_config_load(config_path, &cfg, &err) != RS_OK ||
	    cfg->ntables > NT)
		return -1;
	snprintf(ckpt, sizeof(ckpt), "%s/ck", dir);
	rs_world w = rs_world_make(cfg, 2, 0, 0, 0);
	return mkdir(ckpt, 0700) == 0 && rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err) == RS_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rs_plan_free(plan);
	rs_config_free(cfg);
	return rs_scratch_remove(dir);
}

static int write_sums(const char *name, const uint64_t *v)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	for (int t = 0; f && t < cfg->ntables; t++)
		fprintf(f, "%016" PRIx64 "\n", v[t]);
	return f && fclose(f) == 0 ? 0 : 1;
}

/* The second world: the survivor (rank 0, old rank 0) and the replacement (rank 1); old rank 1 is lost. */
static int heal_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	static const int32_t union_of_old[2] = {0, -1};
	rs_err err = {0};
	rs_trainer *nt = NULL;
	rs_reshard_stats stats;
	uint64_t restored[NT + 1] = {0}, sums[NT + 1];
	char path[160];
	if (st != RS_OK) {
		fprintf(stderr, "heal rank %d: transport: %s\n", rank, msg);
		return 100;
	}
	rs_reshard_spec spec = {.old_plan = plan, .new_plan = plan, .union_of_old = union_of_old, .uni = t, .train_t = t,
				.chunk_bytes = 4096, .restore = restoring ? ckpt : NULL, .restored = restored};
	st = rs_trainer_stage(cfg, rank == 0 ? survivor : NULL, &spec, &nt, &stats, &err);
	if (!restoring) /* every member computes the same diff: both refuse, naming the rows */
		return st == RS_ENOTFOUND && strstr(err.msg, "lost with every copy") ? 0 : 110;
	if (st != RS_OK) {
		fprintf(stderr, "heal rank %d: %s\n", rank, err.msg);
		return 101;
	}
	rs_trainer_checksum(nt, sums);
	snprintf(path, sizeof(path), "%s/healed-r%d", dir, rank);
	int rc = rs_trainer_dump(nt, path) != RS_OK || write_sums(rank ? "healed-sums-r1" : "healed-sums-r0", sums) ? 102
	       : write_sums(rank ? "restored-r1" : "restored-r0", restored)                                      ? 103
																  : 0;
	snprintf(path, sizeof(path), "%s/restored-rows-r%d", dir, rank);
	FILE *f = fopen(path, "w");
	if (!f || fprintf(f, "%lld\n", (long long)stats.restored_rows) < 0 || fclose(f) != 0)
		rc = 104;
	rs_trainer_destroy(nt);
	return rc;
}

/* The first world: 5 steps, a checkpoint, 5 more; rank 1 then goes, rank 0 heals with a replacement. */
static int train_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	rs_err err = {0};
	rs_trainer *tr;
	uint64_t sums[NT + 1];
	char path[160];
	if (st != RS_OK || rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK) {
		fprintf(stderr, "rank %d: %s %s\n", rank, msg, err.msg);
		return 100;
	}
	for (int64_t s = 0; s < 10; s++) {
		if (rs_trainer_step(tr, s, NULL, &err) != RS_OK) {
			fprintf(stderr, "rank %d step %lld: %s\n", rank, (long long)s, err.msg);
			return 101;
		}
		if (s == 4) { /* the checkpoint of step 5, and what rank 1 held then */
			if (rs_trainer_save(tr, ckpt, 5, &err) != RS_OK)
				return 102;
			rs_trainer_checksum(tr, sums);
			snprintf(path, sizeof(path), "%s/ckpt-r%d", dir, rank);
			if (rs_trainer_dump(tr, path) != RS_OK || write_sums(rank ? "ckpt-sums-r1" : "ckpt-sums-r0", sums))
				return 103;
		}
	}
	snprintf(path, sizeof(path), "%s/live-r%d", dir, rank);
	rs_trainer_checksum(tr, sums);
	if (rs_trainer_dump(tr, path) != RS_OK || write_sums(rank ? "live-sums-r1" : "live-sums-r0", sums))
		return 104;
	if (rank == 1)
		return 0; /* lost: its rows at step 10 go with it */
	survivor = tr;
	int rc = 0;
	for (restoring = 0; restoring < 2 && !rc; restoring++) {
		world heal = {.n = 2, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1,
			      .reap_last = -1, .body = heal_body};
		world_run(&heal);
		rc = heal.exit_code[0] || heal.exit_code[1] ? 110 + restoring : 0;
		if (rc)
			fprintf(stderr, "heal (restoring %d): exit codes %d %d\n", restoring, heal.exit_code[0],
				heal.exit_code[1]);
	}
	rs_trainer_destroy(tr);
	return rc;
}

static char *slurp(const char *name, size_t *n)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	*n = 0;
	if (f && fseek(f, 0, SEEK_END) == 0) {
		long len = ftell(f);
		buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
		if (buf && fseek(f, 0, SEEK_SET) == 0 && fread(buf, 1, (size_t)len, f) == (size_t)len)
			*n = (size_t)len, buf[len] = 0;
	}
	if (f)
		fclose(f);
	if (!buf)
		fail_msg("cannot read %s", path);
	return buf;
}

static int same(const char *a, const char *b)
{
	size_t na, nb;
	char *x = slurp(a, &na), *y = slurp(b, &nb);
	int eq = na == nb && na > 0 && memcmp(x, y, na) == 0;
	free(x);
	free(y);
	return eq;
}

/* The per-table checksum lines of a sums file; 0 for a data-parallel table, whose copy rank 0 counts. */
static void sums_of(const char *name, uint64_t *v)
{
	size_t n;
	char *text = slurp(name, &n), *p = text;
	for (int t = 0; t < cfg->ntables; t++) {
		v[t] = strtoull(p, &p, 16);
		if (plan->tables[t].sharding == RS_SHARD_DP)
			v[t] = 0;
	}
	free(text);
}

static void test_restore_lost_rows_from_checkpoint(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		   .body = train_body};
	world_run(&w);
	assert_int_equal(w.exit_code[0], 0);
	assert_int_equal(w.exit_code[1], 0);
	/* the survivor kept its model of step 10, every row and the dense network */
	assert_true(same("healed-r0", "live-r0"));
	/* the replacement holds rank 1's rows as the checkpoint of step 5 had them, not as they were at step 10 */
	uint64_t ck[NT], healed[NT], live[NT], restored[NT];
	sums_of("ckpt-sums-r1", ck);
	sums_of("healed-sums-r1", healed);
	sums_of("live-sums-r1", live);
	sums_of("restored-r1", restored);
	int tables = 0;
	for (int t = 0; t < cfg->ntables; t++) {
		if (plan->tables[t].sharding == RS_SHARD_DP)
			continue;
		if (healed[t] != ck[t])
			fail_msg("table '%s': the replacement's rows are not the checkpoint's", cfg->tables[t].name);
		if (restored[t] != healed[t]) /* every counted row it holds was restored */
			fail_msg("table '%s': the restored rows' checksum is not reported", cfg->tables[t].name);
		tables += ck[t] != 0 && live[t] != ck[t]; /* a table rank 1 holds that moved on after the checkpoint */
	}
	assert_true(tables > 0);
	uint64_t none[NT];
	sums_of("restored-r0", none);
	for (int t = 0; t < cfg->ntables; t++)
		assert_true(none[t] == 0);
	size_t n;
	char *rows = slurp("restored-rows-r1", &n);
	int64_t want = 0;
	for (int t = 0; t < cfg->ntables; t++)
		for (int i = 0; plan->tables[t].sharding != RS_SHARD_DP && i < plan->tables[t].nshards; i++)
			want += plan->tables[t].shards[i].rank == 1 ? plan->tables[t].shards[i].rows : 0;
	assert_int_equal(strtoll(rows, NULL, 10), want);
	free(rows);
	rows = slurp("restored-rows-r0", &n);
	assert_int_equal(strtoll(rows, NULL, 10), 0);
	free(rows);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_restore_lost_rows_from_checkpoint),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
