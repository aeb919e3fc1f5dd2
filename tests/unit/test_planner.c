/*
 * test_planner.c - tests common/planner.c (with common/plan.c and
 * common/plandiff.c): every sharding type covers its table exactly once,
 * pins, co-location, memory caps, 2D layouts, determinism, incremental
 * replanning and the plan diff it reports.
 *
 * Configs are written as JSON and loaded with the real config parser, so
 * the tests read like the files users write.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/config.h"
#include "common/plan.h"
#include "common/plandiff.h"
#include "common/planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static rs_config *load(const char *json)
{
	rs_config *cfg = NULL;
	rs_err err = {0};
	rs_status st = rs_config_parse(json, strlen(json), "test.json", &cfg, &err);
	if (st != RS_OK)
		fail_msg("config did not load: %s", err.msg);
	return cfg;
}

static rs_plan *plan_ok(const rs_config *cfg, int32_t ranks, int32_t rpn, uint64_t mem, int32_t group,
			const rs_plan *prev, const int32_t *map)
{
	rs_world w = rs_world_make(cfg, ranks, rpn, mem, group);
	rs_plan *plan = NULL;
	rs_err err = {0};
	rs_status st = rs_planner_plan(cfg, &w, prev, map, &plan, &err);
	if (st != RS_OK)
		fail_msg("planning %d ranks failed: %s", ranks, err.msg);
	err.msg[0] = 0;
	if (rs_plan_validate(plan, cfg, &err) != RS_OK)
		fail_msg("invalid plan: %s", err.msg);
	return plan;
}

/* xorshift for reproducible random configs */
static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static int64_t rnd_range(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

/* A random config: `n` tables of every type (the first ones forced), some ZCH. */
static char *random_config(int n, int forced)
{
	static const char *const types[] = {"table_wise", "row_wise", "column_wise", "table_row_wise",
					    "grid", "data_parallel"};
	size_t cap = 256 + (size_t)n * 256, len = 0;
	char *s = malloc(cap);
	len += (size_t)snprintf(s + len, cap - len, "{\"tables\": [");
	for (int i = 0; i < n; i++) {
		int64_t rows = rnd_range(1, 5000);
		int dim = 4 * (int)rnd_range(1, 64);
		char sharding[64] = "";
		if (forced && i < 6)
			snprintf(sharding, sizeof(sharding), ", \"sharding\": \"%s\"", types[i]);
		if (i == 6) {
			len += (size_t)snprintf(s + len, cap - len,
						"%s{\"name\": \"t%d\", \"dim\": %d, \"features\": [\"f%d\"], "
						"\"zch\": {\"buckets\": %d, \"slots\": %d}}",
						i ? ", " : "", i, dim, i, 48, 48 * 20);
			continue;
		}
		len += (size_t)snprintf(s + len, cap - len,
					"%s{\"name\": \"t%d\", \"rows\": %lld, \"dim\": %d, \"features\": [\"f%d\"], "
					"\"pooling_factor\": %d%s}",
					i ? ", " : "", i, (long long)rows, dim, i, (int)rnd_range(1, 30), sharding);
	}
	snprintf(s + len, cap - len, "]}");
	return s;
}

/* A cell-level check of a table's ownership, for small tables: count holders of each (row, col). */
static void check_cover(const rs_table_plan *tp, int32_t replicas)
{
	for (int32_t rep = 0; rep < replicas; rep++) {
		unsigned char *cnt = calloc((size_t)(tp->rows * tp->dim), 1);
		for (int k = 0; k < tp->nshards; k++) {
			const rs_shard *s = &tp->shards[k];
			if (s->replica != rep)
				continue;
			for (int64_t r = s->row_offset; r < s->row_offset + s->rows; r++)
				for (int32_t c = s->col_offset; c < s->col_offset + s->cols; c++)
					cnt[r * tp->dim + c]++;
		}
		for (int64_t i = 0; i < tp->rows * tp->dim; i++)
			if (tp->sharding != RS_SHARD_DP && cnt[i] != 1)
				fail_msg("table %s replica %d: cell %lld held %d times", tp->name, rep,
					 (long long)i, cnt[i]);
		free(cnt);
	}
}

/* ---- sharding types ------------------------------------------------------------ */

static void test_every_type_covers_exactly_once(void **state)
{
	(void)state;
	for (int trial = 0; trial < 12; trial++) {
		char *json = random_config(10, 1);
		rs_config *cfg = load(json);
		for (int32_t ranks = 1; ranks <= 9; ranks++) {
			rs_plan *plan = plan_ok(cfg, ranks, 4, 0, 0, NULL, NULL);
			for (int t = 0; t < cfg->ntables; t++) {
				const rs_table_plan *tp = &plan->tables[t];
				check_cover(tp, 1);
				if (cfg->tables[t].sharding != RS_SHARD_AUTO)
					assert_int_equal(tp->sharding, cfg->tables[t].sharding);
				if (tp->sharding == RS_SHARD_CW || tp->sharding == RS_SHARD_GRID)
					for (int k = 0; k < tp->nshards; k++)
						assert_true(tp->shards[k].col_offset % 4 == 0);
				if (tp->sharding == RS_SHARD_TWRW)
					for (int k = 1; k < tp->nshards; k++) /* one node */
						assert_int_equal(tp->shards[k].rank / 4, tp->shards[0].rank / 4);
				if (tp->sharding == RS_SHARD_DP)
					assert_int_equal(tp->nshards, ranks);
				if (tp->sharding == RS_SHARD_TW)
					assert_int_equal(tp->nshards, 1);
			}
			rs_plan_free(plan);
		}
		rs_config_free(cfg);
		free(json);
	}
}

static void test_auto_choices(void **state)
{
	(void)state;
	/* many small tables, one huge narrow table, one huge wide table */
	char json[8192];
	size_t n = (size_t)snprintf(json, sizeof(json), "{\"tables\": [");
	for (int i = 0; i < 40; i++)
		n += (size_t)snprintf(json + n, sizeof(json) - n,
				      "{\"name\": \"small%d\", \"rows\": 1000, \"dim\": 16, \"features\": [\"s%d\"]}, ",
				      i, i);
	snprintf(json + n, sizeof(json) - n,
		 "{\"name\": \"huge\", \"rows\": 100000000, \"dim\": 16, \"features\": [\"h\"], \"pooling_factor\": 50},"
		 "{\"name\": \"wide\", \"rows\": 100000, \"dim\": 512, \"features\": [\"w\"], \"pooling_factor\": 20}],"
		 "\"cluster\": {\"memory_per_rank\": \"8GiB\"}}");
	rs_config *cfg = load(json);
	rs_plan *plan = plan_ok(cfg, 16, 8, 0, 0, NULL, NULL);
	for (int t = 0; t < 40; t++)
		assert_int_equal(plan->tables[t].sharding, RS_SHARD_TW);
	rs_sharding huge = plan->tables[40].sharding, wide = plan->tables[41].sharding;
	assert_true(huge == RS_SHARD_RW || huge == RS_SHARD_TWRW);
	assert_true(wide == RS_SHARD_CW || wide == RS_SHARD_GRID);
	rs_plan_free(plan);
	rs_config_free(cfg);
}

/* ---- pins, co-location, memory ------------------------------------------------- */

static void test_pins_and_colocation(void **state)
{
	(void)state;
	rs_config *cfg = load("{\"tables\": ["
			      "{\"name\": \"user\", \"rows\": 5000, \"dim\": 16, \"features\": [\"u\"], \"colocate\": \"user\"},"
			      "{\"name\": \"history\", \"rows\": 9000, \"dim\": 16, \"features\": [\"h\"], \"colocate\": \"user\"},"
			      "{\"name\": \"profile\", \"rows\": 300, \"dim\": 16, \"features\": [\"p\"], \"colocate\": \"user\", \"rank\": 3},"
			      "{\"name\": \"ads\", \"rows\": 7000, \"dim\": 32, \"features\": [\"a\"], \"rank\": 1},"
			      "{\"name\": \"wide\", \"rows\": 700, \"dim\": 64, \"features\": [\"w\"], \"sharding\": \"column_wise\", \"rank\": 2},"
			      "{\"name\": \"other\", \"rows\": 70000, \"dim\": 32, \"features\": [\"o\"]}]}");
	for (int32_t ranks = 4; ranks <= 6; ranks++) {
		rs_plan *plan = plan_ok(cfg, ranks, 8, 0, 0, NULL, NULL);
		for (int t = 0; t < 3; t++) {
			assert_int_equal(plan->tables[t].nshards, 1);
			assert_int_equal(plan->tables[t].shards[0].rank, 3);
		}
		assert_int_equal(plan->tables[3].shards[0].rank, 1);
		assert_true(plan->tables[4].nshards >= 2);
		for (int k = 0; k < plan->tables[4].nshards; k++)
			assert_int_equal(plan->tables[4].shards[k].rank, 2);
		rs_plan_free(plan);
	}
	/* a pin outside the world */
	rs_world w = rs_world_make(cfg, 3, 8, 0, 0);
	rs_plan *plan = NULL;
	rs_err err = {0};
	assert_int_equal(rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err), RS_EINVAL);
	assert_null(plan);
	print_message("pin outside the world: %s\n", err.msg);
	assert_non_null(strstr(err.msg, "profile"));
	assert_non_null(strstr(err.msg, "rank"));
	rs_config_free(cfg);
}

static void test_memory_caps(void **state)
{
	(void)state;
	/* 24 tables of 1000 x 64 fp32 + rowwise adagrad = 260,000 bytes each */
	char json[8192];
	size_t n = (size_t)snprintf(json, sizeof(json), "{\"tables\": [");
	for (int i = 0; i < 24; i++)
		n += (size_t)snprintf(json + n, sizeof(json) - n,
				      "%s{\"name\": \"t%d\", \"rows\": 1000, \"dim\": 64, \"features\": [\"f%d\"], \"sharding\": \"table_wise\", \"pooling_factor\": %d}",
				      i ? ", " : "", i, i, 1 + (i % 7) * 5);
	snprintf(json + n, sizeof(json) - n, "]}");
	rs_config *cfg = load(json);
	uint64_t table = 1000 * (64 * 4 + 4);
	/* room for exactly 6 tables per rank on 4 ranks: cost balance must yield to memory */
	rs_plan *plan = plan_ok(cfg, 4, 8, 6 * table, 0, NULL, NULL);
	for (int32_t r = 0; r < 4; r++)
		assert_true(plan->ranks[r].memory <= 6 * table);
	rs_plan_free(plan);
	/* room for 5 per rank: 24 tables cannot fit on 4 ranks */
	rs_world w = rs_world_make(cfg, 4, 8, 5 * table + 10, 0);
	rs_err err = {0};
	assert_int_equal(rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err), RS_ENOSPACE);
	assert_non_null(strstr(err.msg, "fits no rank"));
	/* a single table bigger than a rank */
	w = rs_world_make(cfg, 4, 8, table / 2, 0);
	err.msg[0] = 0;
	assert_int_equal(rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err), RS_ENOSPACE);
	assert_non_null(strstr(err.msg, "'t"));
	rs_config_free(cfg);
}

/* ---- 2D -------------------------------------------------------------------------- */

static void test_2d_layout(void **state)
{
	(void)state;
	char *json = random_config(12, 1);
	rs_config *cfg = load(json);
	struct { int32_t ranks, rpn, group; } cases[] = {{8, 4, 4}, {16, 8, 4}, {12, 6, 4}, {8, 8, 2}, {6, 2, 3}};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		rs_plan *plan = plan_ok(cfg, cases[c].ranks, cases[c].rpn, 0, cases[c].group, NULL, NULL);
		int32_t R = cases[c].ranks / cases[c].group;
		for (int t = 0; t < cfg->ntables; t++) {
			const rs_table_plan *tp = &plan->tables[t];
			check_cover(tp, R);
			/* replica k of a shard sits on the rank right after replica k-1, on the same node */
			for (int k = 0; k < tp->nshards; k++) {
				const rs_shard *s = &tp->shards[k];
				int32_t base = s->rank - s->replica;
				assert_int_equal(s->rank % R, s->replica);
				assert_int_equal(base / cases[c].rpn, s->rank / cases[c].rpn);
			}
		}
		rs_plan_free(plan);
	}
	/* replica groups that cannot share a node */
	rs_world w = rs_world_make(cfg, 12, 4, 0, 4); /* R = 3 does not divide 4 */
	rs_plan *plan = NULL;
	rs_err err = {0};
	assert_int_equal(rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "replica"));
	rs_config_free(cfg);
	free(json);
}

/* Bytes one replica group holds: the ranks of group 0. */
static uint64_t group_bytes(const rs_plan *plan)
{
	uint64_t b = 0;
	int32_t r = plan->world.ranks / plan->world.sharding_group;
	for (int32_t k = 0; k < plan->world.ranks; k += r)
		b += plan->ranks[k].memory;
	return b;
}

/*
 * Elastic 2D: with the same sharding group, adding a replica group copies
 * one group's state (and no less is possible), removing one moves nothing,
 * and going from 1D to 2D keeps every row where it is.
 */
static void test_2d_replan_changes_groups_only(void **state)
{
	(void)state;
	char *json = random_config(12, 1);
	rs_config *cfg = load(json);
	int32_t map[16], at[16], old_rank[16];
	/* 4 ranks in 2 groups of 2 -> 6 ranks in 3 groups: the coordinator's placement keeps every member's role */
	rs_plan *a = plan_ok(cfg, 4, 6, 0, 2, NULL, NULL);
	for (int32_t r = 0; r < 4; r++)
		old_rank[r] = r;
	rs_planner_place_members(2, 3, 2, old_rank, 4, 6, at);
	for (int32_t r = 0; r < 4; r++) {
		assert_int_equal(at[r] / 3, r / 2); /* the same role */
		map[r] = at[r];
	}
	assert_true(at[4] != at[5] && at[4] % 3 == 2 && at[5] % 3 == 2); /* the joiners make up group 2 */
	rs_plan *b = plan_ok(cfg, 6, 6, 0, 2, a, map);
	assert_int_equal(b->world.sharding_group, 2);
	assert_int_equal(b->summary.moved_bytes, group_bytes(a));
	assert_int_equal(b->summary.min_moved_bytes, b->summary.moved_bytes);
	/* back to 2 groups: group 2 (ranks 2 and 5) leaves */
	int32_t back[6] = {0, 1, -1, 2, 3, -1};
	rs_plan *c = plan_ok(cfg, 4, 6, 0, 2, b, back);
	assert_int_equal(c->summary.moved_bytes, 0);
	/* 1D on 2 ranks -> 2 groups of 2: the survivors keep their rows */
	rs_plan *d = plan_ok(cfg, 2, 6, 0, 0, NULL, NULL);
	old_rank[0] = 0, old_rank[1] = 1;
	rs_planner_place_members(1, 2, 2, old_rank, 2, 4, at);
	int32_t grow[2] = {at[0], at[1]};
	assert_int_equal(at[0] % 2, 0);
	assert_int_equal(at[1] % 2, 0);
	rs_plan *e = plan_ok(cfg, 4, 6, 0, 2, d, grow);
	assert_int_equal(e->summary.moved_bytes, group_bytes(d));
	rs_plan_free(a);
	rs_plan_free(b);
	rs_plan_free(c);
	rs_plan_free(d);
	rs_plan_free(e);
	rs_config_free(cfg);
	free(json);
}

/*
 * Healing: a lost rank sends nothing; its rows come from the other replica
 * group's copy, and rows with no live copy are an error naming the table.
 */
static void test_diff_takes_lost_rows_from_replicas(void **state)
{
	(void)state;
	char *json = random_config(12, 1);
	rs_config *cfg = load(json);
	rs_plan *p = plan_ok(cfg, 4, 2, 0, 2, NULL, NULL);
	int32_t map[4] = {0, RS_PLAN_LOST, 2, 3}; /* rank 1 (role 0, group 1) died; its replacement is new rank 1 */
	rs_move *mv = NULL;
	int nmv = 0;
	rs_err err = {0};
	assert_int_equal(rs_plan_diff(cfg, p, p, map, &mv, &nmv, &err), RS_OK);
	uint64_t bytes = 0;
	for (int i = 0; i < nmv; i++) {
		assert_int_equal(mv[i].dst, 1);
		assert_true(mv[i].src != 1);
		if (p->tables[mv[i].table].sharding != RS_SHARD_DP)
			assert_int_equal(mv[i].src, 0); /* the copy in group 0; a data-parallel table: any live copy */
		bytes += mv[i].bytes;
	}
	assert_int_equal(bytes, p->ranks[1].memory);
	free(mv);
	/* both copies of role 0 lost */
	int32_t both[4] = {RS_PLAN_LOST, RS_PLAN_LOST, 2, 3};
	assert_int_equal(rs_plan_diff(cfg, p, p, both, &mv, &nmv, &err), RS_ENOTFOUND);
	assert_non_null(strstr(err.msg, "lost with every copy"));
	/* restoring (partial recovery): role 0's rows come from the checkpoint, data-parallel ones from a live copy */
	assert_int_equal(rs_plan_diff_restoring(cfg, p, p, both, 1, &mv, &nmv, &err), RS_OK);
	uint64_t restored = 0, copied = 0;
	for (int i = 0; i < nmv; i++) {
		int dp = p->tables[mv[i].table].sharding == RS_SHARD_DP;
		assert_true(mv[i].dst == 0 || mv[i].dst == 1);
		assert_int_equal(mv[i].src, dp ? mv[i].src : RS_MOVE_RESTORE);
		assert_true(!dp || mv[i].src == 2 || mv[i].src == 3);
		*(dp ? &copied : &restored) += mv[i].bytes;
	}
	assert_true(restored > 0);
	assert_int_equal(restored + copied, p->ranks[0].memory + p->ranks[1].memory);
	free(mv);
	rs_plan_free(p);
	rs_config_free(cfg);
	free(json);
}

/* ---- determinism and JSON ------------------------------------------------------- */

static char *dump_without_time(const rs_plan *plan)
{
	json_t *j = rs_plan_to_json(plan);
	assert_non_null(j);
	json_object_del(json_object_get(j, "summary"), "plan_seconds");
	char *s = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
	json_decref(j);
	return s;
}

static void test_deterministic_and_json_round_trip(void **state)
{
	(void)state;
	char *json = random_config(30, 1);
	rs_config *cfg = load(json);
	rs_plan *a = plan_ok(cfg, 7, 4, 0, 0, NULL, NULL);
	rs_plan *b = plan_ok(cfg, 7, 4, 0, 0, NULL, NULL);
	char *da = dump_without_time(a), *db = dump_without_time(b);
	assert_string_equal(da, db);

	rs_plan *c = NULL;
	rs_err err = {0};
	assert_int_equal(rs_plan_parse(da, strlen(da), cfg, "a.json", &c, &err), RS_OK);
	char *dc = dump_without_time(c);
	assert_string_equal(da, dc);
	for (int32_t r = 0; r < 7; r++)
		assert_true(c->ranks[r].memory == a->ranks[r].memory);

	free(da);
	free(db);
	free(dc);
	rs_plan_free(a);
	rs_plan_free(b);
	rs_plan_free(c);
	rs_config_free(cfg);
	free(json);
}

static void test_bad_plan_json(void **state)
{
	(void)state;
	rs_config *cfg = load("{\"tables\": [{\"name\": \"a\", \"rows\": 10, \"dim\": 8, \"features\": [\"x\"]}]}");
	static const char *const bad[] = {
		"[]",
		"{\"world\": {\"ranks\": 2, \"ranks_per_node\": 8, \"memory_per_rank\": 100}}",
		/* rows 0..4 twice, 5..9 never */
		"{\"world\": {\"ranks\": 2, \"ranks_per_node\": 8, \"memory_per_rank\": 1000000}, \"tables\": ["
		"{\"name\": \"a\", \"sharding\": \"row_wise\", \"rows\": 10, \"dim\": 8, \"shards\": ["
		"{\"rank\": 0, \"row_offset\": 0, \"rows\": 5, \"col_offset\": 0, \"cols\": 8},"
		"{\"rank\": 1, \"row_offset\": 0, \"rows\": 5, \"col_offset\": 0, \"cols\": 8}]}]}",
		/* a shard on a rank outside the world */
		"{\"world\": {\"ranks\": 2, \"ranks_per_node\": 8, \"memory_per_rank\": 1000000}, \"tables\": ["
		"{\"name\": \"a\", \"sharding\": \"table_wise\", \"rows\": 10, \"dim\": 8, \"shards\": ["
		"{\"rank\": 5, \"row_offset\": 0, \"rows\": 10, \"col_offset\": 0, \"cols\": 8}]}]}",
		/* another table */
		"{\"world\": {\"ranks\": 2, \"ranks_per_node\": 8, \"memory_per_rank\": 1000000}, \"tables\": ["
		"{\"name\": \"b\", \"sharding\": \"table_wise\", \"rows\": 10, \"dim\": 8, \"shards\": ["
		"{\"rank\": 0, \"row_offset\": 0, \"rows\": 10, \"col_offset\": 0, \"cols\": 8}]}]}",
		/* an unknown key in a shard */
		"{\"world\": {\"ranks\": 2, \"ranks_per_node\": 8, \"memory_per_rank\": 1000000}, \"tables\": ["
		"{\"name\": \"a\", \"sharding\": \"table_wise\", \"rows\": 10, \"dim\": 8, \"shards\": ["
		"{\"rank\": 0, \"row_offset\": 0, \"rows\": 10, \"col_offset\": 0, \"cols\": 8, \"x\": 1}]}]}",
		"{\"world\": {\"ranks\": 2, \"ranks_per_node\": 8, \"memory_per_rank\": 1000000}, \"tables\": [",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rs_plan *p = NULL;
		rs_err err = {0};
		assert_int_equal(rs_plan_parse(bad[i], strlen(bad[i]), cfg, "bad.json", &p, &err), RS_EINVAL);
		assert_null(p);
		if (!strstr(err.msg, "bad.json"))
			fail_msg("case %zu: message does not name the file: %s", i, err.msg);
	}
	rs_config_free(cfg);
}

/* ---- incremental replanning ----------------------------------------------------- */

/*
 * Apply the moves to the old plan's ownership, cell by cell, and check that
 * every new shard's cells are then held by its rank, that every move's source
 * held what it sends, and that no destination receives what it already held.
 */
static void check_diff_applies(const rs_config *cfg, const rs_plan *old, const rs_plan *new,
			       const int32_t *map, const rs_move *moves, int nmoves)
{
	for (int t = 0; t < cfg->ntables; t++) {
		const rs_table_plan *ot = &old->tables[t], *nt = &new->tables[t];
		int64_t cells = ot->rows * ot->dim;
		int32_t nw = new->world.ranks, ow = old->world.ranks;
		unsigned char *oldh = calloc((size_t)(cells * ow), 1);  /* [cell][old rank] */
		unsigned char *newh = calloc((size_t)(cells * nw), 1);  /* [cell][new rank] */
		for (int k = 0; k < ot->nshards; k++) {
			const rs_shard *s = &ot->shards[k];
			for (int64_t r = s->row_offset; r < s->row_offset + s->rows; r++)
				for (int32_t c = s->col_offset; c < s->col_offset + s->cols; c++) {
					oldh[(r * ot->dim + c) * ow + s->rank] = 1;
					if (map[s->rank] >= 0)
						newh[(r * ot->dim + c) * nw + map[s->rank]] = 1;
				}
		}
		for (int i = 0; i < nmoves; i++) {
			const rs_move *m = &moves[i];
			if (m->table != t)
				continue;
			for (int64_t r = m->row_offset; r < m->row_offset + m->rows; r++)
				for (int32_t c = m->col_offset; c < m->col_offset + m->cols; c++) {
					int64_t cell = r * ot->dim + c;
					if (!oldh[cell * ow + m->src])
						fail_msg("table %s: move from old rank %d of a cell it did not hold", nt->name, m->src);
					if (newh[cell * nw + m->dst])
						fail_msg("table %s: move to new rank %d of a cell it already held", nt->name, m->dst);
					newh[cell * nw + m->dst] = 1;
				}
		}
		for (int k = 0; k < nt->nshards; k++) {
			const rs_shard *s = &nt->shards[k];
			for (int64_t r = s->row_offset; r < s->row_offset + s->rows; r++)
				for (int32_t c = s->col_offset; c < s->col_offset + s->cols; c++)
					if (!newh[(r * nt->dim + c) * nw + s->rank])
						fail_msg("table %s: new rank %d lacks row %lld col %d after the moves",
							 nt->name, s->rank, (long long)r, c);
		}
		free(oldh);
		free(newh);
	}
}

/* cells: also check the moves cell by cell (costs rows x dim x ranks per table: small configs only) */
static void replan_and_check(const rs_config *cfg, const rs_plan *old, int32_t n, const int32_t *removed,
			     int nremoved, int cells, double *worst_ratio)
{
	int32_t *map = malloc(sizeof(int32_t) * (size_t)old->world.ranks);
	rs_err err = {0};
	assert_int_equal(rs_planner_rank_map(old->world.ranks, n, removed, nremoved, map, &err), RS_OK);
	rs_plan *new = plan_ok(cfg, n, old->world.ranks_per_node, old->world.memory_per_rank, 0, old, map);
	rs_move *moves = NULL;
	int nmoves = 0;
	assert_int_equal(rs_plan_diff(cfg, old, new, map, &moves, &nmoves, &err), RS_OK);
	uint64_t bytes = 0;
	for (int i = 0; i < nmoves; i++)
		bytes += moves[i].bytes;
	assert_true(bytes == new->summary.moved_bytes);
	if (new->summary.min_moved_bytes > 0) {
		double ratio = (double)new->summary.moved_bytes / (double)new->summary.min_moved_bytes;
		if (ratio > *worst_ratio)
			*worst_ratio = ratio;
		/* RS_DEBUG_REPLAN=1 lists the moves of replans far from the bound */
		if (getenv("RS_DEBUG_REPLAN") && (ratio > 1.5 || ratio < 1)) {
			print_message("%d -> %d (%d removed): moved %llu min %llu\n", old->world.ranks, n, nremoved,
				      (unsigned long long)new->summary.moved_bytes, (unsigned long long)new->summary.min_moved_bytes);
			for (int i = 0; i < nmoves; i++)
				print_message("  %s (%s) %d->%d rows %lld+%lld cols %d+%d bytes %llu\n", cfg->tables[moves[i].table].name,
					      rs_sharding_name(new->tables[moves[i].table].sharding), moves[i].src, moves[i].dst,
					      (long long)moves[i].row_offset, (long long)moves[i].rows, moves[i].col_offset, moves[i].cols,
					      (unsigned long long)moves[i].bytes);
		}
	}
	if (new->summary.moved_bytes < new->summary.min_moved_bytes)
		fail_msg("%d -> %d: moved %llu bytes, below the lower bound %llu", old->world.ranks, n,
			 (unsigned long long)new->summary.moved_bytes,
			 (unsigned long long)new->summary.min_moved_bytes);
	if (cells)
		check_diff_applies(cfg, old, new, map, moves, nmoves);
	/* nothing stays with a removed member: every shard of the new plan is in the new world */
	for (int t = 0; t < cfg->ntables; t++)
		for (int k = 0; k < new->tables[t].nshards; k++)
			assert_true(new->tables[t].shards[k].rank < n);
	free(moves);
	rs_plan_free(new);
	free(map);
}

static void test_replan_growth_and_shrink(void **state)
{
	(void)state;
	double worst = 1.0;
	for (int trial = 0; trial < 6; trial++) {
		char *json = random_config(16, trial % 2);
		rs_config *cfg = load(json);
		int32_t sizes[] = {1, 2, 3, 4, 5, 7, 8};
		for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
			rs_plan *old = plan_ok(cfg, sizes[a], 4, 0, 0, NULL, NULL);
			for (size_t b = 0; b < sizeof(sizes) / sizeof(sizes[0]); b++)
				replan_and_check(cfg, old, sizes[b], NULL, 0, 1, &worst);
			if (sizes[a] >= 3) {
				int32_t removed[] = {1};
				replan_and_check(cfg, old, sizes[a] - 1, removed, 1, 1, &worst);
				replan_and_check(cfg, old, sizes[a] + 1, removed, 1, 1, &worst);
			}
			rs_plan_free(old);
		}
		rs_config_free(cfg);
		free(json);
	}
	print_message("worst moved / lower bound over all replans: %.3f\n", worst);
}

/*
 * One member more for many small tables (the benchmark's 64 -> 65 at a
 * unit test's size), 8 random configs: each rank sheds its excess with the
 * fewest bytes it finds, on average within 1.33x the bound (which lets
 * items be cut: no plan reaches it). Shedding one item at a time, the first
 * way, averaged 1.41x here (1.17x in the benchmark); the new way 1.27x,
 * better in 7 of the 8.
 */
static void test_replan_one_more_moves_near_bound(void **state)
{
	(void)state;
	double sum = 0;
	for (int k = 0; k < 8; k++) {
		rng_state = 88172645463325252ull + (uint64_t)k * 7919; /* these configs, whatever ran before */
		char *json = random_config(600, 0);
		rs_config *cfg = load(json);
		rs_plan *old = plan_ok(cfg, 16, 8, 0, 0, NULL, NULL);
		double ratio = 1.0;
		replan_and_check(cfg, old, 17, NULL, 0, 0, &ratio);
		print_message("seed %d: 600 tables, 16 -> 17 ranks: moved / lower bound %.3f\n", k, ratio);
		sum += ratio;
		rs_plan_free(old);
		rs_config_free(cfg);
		free(json);
	}
	print_message("mean %.3f\n", sum / 8);
	assert_true(sum / 8 <= 1.33);
}

/* Row-wise and ZCH tables move exactly the minimum a balanced split allows. */
static void test_replan_rowwise_moves_minimum(void **state)
{
	(void)state;
	rs_config *cfg = load("{\"tables\": ["
			      "{\"name\": \"rw\", \"rows\": 100003, \"dim\": 8, \"features\": [\"a\"], \"sharding\": \"row_wise\"},"
			      "{\"name\": \"z\", \"dim\": 8, \"features\": [\"b\"], \"zch\": {\"buckets\": 768, \"slots\": 76800}}]}");
	int32_t path[] = {8, 12, 9, 16, 5, 7, 1, 3};
	rs_plan *cur = plan_ok(cfg, path[0], 8, 0, 0, NULL, NULL);
	for (size_t i = 1; i < sizeof(path) / sizeof(path[0]); i++) {
		int32_t *map = malloc(sizeof(int32_t) * (size_t)cur->world.ranks);
		rs_err err = {0};
		assert_int_equal(rs_planner_rank_map(cur->world.ranks, path[i], NULL, 0, map, &err), RS_OK);
		rs_plan *next = plan_ok(cfg, path[i], 8, 0, 0, cur, map);
		assert_true(next->summary.moved_bytes == next->summary.min_moved_bytes);
		/* balance: row counts per rank within one row (bucket) of each other */
		for (int t = 0; t < 2; t++) {
			int64_t lo = INT64_MAX, hi = 0;
			for (int32_t r = 0; r < path[i]; r++) {
				int64_t rows = 0;
				for (int k = 0; k < next->tables[t].nshards; k++)
					if (next->tables[t].shards[k].rank == r)
						rows += next->tables[t].shards[k].rows;
				lo = rows < lo ? rows : lo;
				hi = rows > hi ? rows : hi;
			}
			assert_true(hi - lo <= (t == 0 ? 1 : 100));
		}
		rs_plan_free(cur);
		cur = next;
		free(map);
	}
	rs_plan_free(cur);
	rs_config_free(cfg);
}

static void test_rank_map(void **state)
{
	(void)state;
	int32_t map[6];
	rs_err err = {0};
	assert_int_equal(rs_planner_rank_map(6, 4, NULL, 0, map, &err), RS_OK);
	int32_t want1[] = {0, 1, 2, 3, -1, -1};
	assert_memory_equal(map, want1, sizeof(want1));
	int32_t removed[] = {1, 4};
	assert_int_equal(rs_planner_rank_map(6, 5, removed, 2, map, &err), RS_OK);
	int32_t want2[] = {0, -1, 1, 2, -1, 3};
	assert_memory_equal(map, want2, sizeof(want2));
	int32_t twice[] = {2, 2};
	assert_int_equal(rs_planner_rank_map(6, 5, twice, 2, map, &err), RS_EINVAL);
	int32_t outside[] = {9};
	assert_int_equal(rs_planner_rank_map(6, 5, outside, 1, map, &err), RS_EINVAL);
	/* the survivors must fit in the new world */
	assert_int_equal(rs_planner_rank_map(6, 3, outside, 0, map, &err), RS_EINVAL);
	int32_t one[] = {0};
	err.msg[0] = 0;
	assert_int_equal(rs_planner_rank_map(6, 3, one, 1, map, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "survive"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_type_covers_exactly_once),
		cmocka_unit_test(test_auto_choices),
		cmocka_unit_test(test_pins_and_colocation),
		cmocka_unit_test(test_memory_caps),
		cmocka_unit_test(test_2d_layout),
		cmocka_unit_test(test_2d_replan_changes_groups_only),
		cmocka_unit_test(test_diff_takes_lost_rows_from_replicas),
		cmocka_unit_test(test_deterministic_and_json_round_trip),
		cmocka_unit_test(test_bad_plan_json),
		cmocka_unit_test(test_replan_growth_and_shrink),
		cmocka_unit_test(test_replan_rowwise_moves_minimum),
		cmocka_unit_test(test_replan_one_more_moves_near_bound),
		cmocka_unit_test(test_rank_map),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
