/*
 * test_train_2d.c - tests training in a 2D layout (worker/replica.c) with
 * worker processes on loopback, on a model with a table of every sharding
 * type and a ZCH table that evicts:
 *   - exact sync: 2 replica groups of 2 ranks end where 4 ranks in 1D do
 *     (bounded relative difference, every table, the dense network and the
 *     loss curve), and the two replicas of every shard are bitwise equal;
 *   - every K steps: the replicas drift apart between syncs and are bitwise
 *     equal right after one;
 *   - a rank whose votes of a step failed after the others got through
 *     them catches up (rs_trainer_catch_up) and the world ends with the
 *     undisturbed run's bits;
 *   - a step that fails on every rank right after its lookup (ZCH slots
 *     given out, ids marked seen), or in its votes and is then dropped
 *     (rs_trainer_drop_prepared), leaves every rank's held tables as the
 *     step before left them (rs__zch_undo), and trained again the world
 *     ends with the undisturbed run's bits;
 *   - pre-copy refuses a change that would feed two replicas of a row from
 *     one copy (1D turning 2D), and takes the same change in 1D.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/plan.h"
#include "common/planner.h"
#include "tests/unit/dumps.h"
#include "tests/unit/scratch.h"
#include "tests/unit/world_harness.h"
#include "worker/train.h"
#include "worker/train_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define STEPS 30
#define W 4
#define S 2

static const char *config_path = "tests/data/train-model.json";

static rs_config *cfg;
static rs_plan *plan;
static char dir[64];
static int64_t steps;
static const char *tag;
static int32_t vote_lost_rank = -1; /* this rank's votes of step VOTE_LOST fail after they came through */
#define VOTE_LOST 10
static int fail_all;            /* every rank's step FAILED fails: 1 right after its lookup, 2 in its votes */
#define FAILED 12

static int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	if (rs_scratch_make(dir, sizeof(dir), "train2d") != 0)
		return -1;
	return rs_config_load(config_path, &cfg, &err) == RS_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (rs_scratch_remove(dir) != 0)
		return -1;
	rs_config_free(cfg);
	return 0;
}

/*
 * Train `steps` steps. Each rank dumps its shards as DIR/TAG-gG-rI: replica
 * group G = rank % R, I its index in the group; rank 0 adds the loss curve
 * and the dense parameters. In 1D (R = 1) that is TAG-g0-rRANK.
 */
static int body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	rs_trainer *tr;
	rs_err err = {0};
	char path[160];
	int32_t r = plan->world.ranks / plan->world.sharding_group;
	if (st != RS_OK) {
		fprintf(stderr, "rank %d: transport: %s\n", rank, msg);
		return 100;
	}
	if (rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK) {
		fprintf(stderr, "rank %d: trainer: %s\n", rank, err.msg);
		return 101;
	}
	snprintf(path, sizeof(path), "%s/%s-loss", dir, tag);
	FILE *lf = rank == 0 ? fopen(path, "w") : NULL;
	if (rank == vote_lost_rank)
		tr->vote_lost = VOTE_LOST + 1;
	if (fail_all == 1)
		tr->zch_lost = FAILED + 1;
	if (fail_all == 2)
		tr->vote_lost = FAILED + 1;
	uint64_t before[16], after[16];
	if (cfg->ntables > 16)
		return 105;
	for (int64_t s = 0; s < steps; s++) {
		rs_step_stats stats;
		if (fail_all && s == FAILED)
			rs_trainer_checksums(tr, NULL, before);
		rs_status done = rs_trainer_step(tr, s, &stats, &err);
		if (fail_all && s == FAILED) {
			if (done == RS_OK || (fail_all == 2) != (rs_trainer_prepared(tr) == s + 1)) {
				fprintf(stderr, "rank %d: step %lld did not fail as planted\n", rank, (long long)s);
				rs_trainer_destroy(tr);
				return 106;
			}
			if (fail_all == 2 && rs_trainer_drop_prepared(tr, &err) != RS_OK) { /* the world goes on from s */
				fprintf(stderr, "rank %d: dropping the prepared step: %s\n", rank, err.msg);
				rs_trainer_destroy(tr);
				return 107;
			}
			rs_trainer_checksums(tr, NULL, after);
			if (memcmp(before, after, sizeof(uint64_t) * (size_t)cfg->ntables) != 0) {
				fprintf(stderr, "rank %d: the failed step %lld changed the tables it holds\n", rank, (long long)s);
				rs_trainer_destroy(tr);
				return 104;
			}
			done = rs_trainer_step(tr, s, &stats, &err); /* every rank stopped at the same point: again */
		}
		if (done != RS_OK && rank == vote_lost_rank && s == VOTE_LOST && rs_trainer_prepared(tr) == s + 1)
			done = rs_trainer_catch_up(tr, &err); /* the others finished the step and wait in the next */
		if (done != RS_OK) {
			fprintf(stderr, "rank %d step %lld: %s\n", rank, (long long)s, err.msg);
			rs_trainer_destroy(tr);
			return 102;
		}
		if (lf)
			fprintf(lf, "%.9g\n", stats.loss);
	}
	if (lf)
		fclose(lf);
	snprintf(path, sizeof(path), "%s/%s-g%d-r%d", dir, tag, rank % r, rank / r);
	int rc = rs_trainer_dump(tr, path) == RS_OK ? 0 : 103;
	rs_trainer_destroy(tr);
	return rc;
}

static void run(const char *name, int32_t group, int32_t every, int64_t n)
{
	rs_world wd = rs_world_make(cfg, W, 0, 0, group);
	rs_err err = {0};
	cfg->cluster.replica_sync_every = every;
	assert_int_equal(rs_planner_plan(cfg, &wd, NULL, NULL, &plan, &err), RS_OK);
	tag = name;
	steps = n;
	world wo = {.n = W, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		    .body = body};
	world_run(&wo);
	for (int32_t r = 0; r < W; r++)
		if (wo.exit_code[r] != 0)
			fail_msg("%s: rank %d exited %d", name, r, wo.exit_code[r]);
	rs_plan_free(plan);
	plan = NULL;
	cfg->cluster.replica_sync_every = 0;
}

/* The largest relative difference over the tables of two assembled models; the dense parameters too when both have them. */
static double model_diff(float **a, float **b, size_t dense_n, const char *what)
{
	double worst = 0;
	for (int i = 0; i <= cfg->ntables; i++) {
		size_t n = i < cfg->ntables ? (size_t)(cfg->tables[i].rows * cfg->tables[i].dim) : dense_n;
		double d = n ? dumps_max_rel_diff(a[i], b[i], n) : 0;
		print_message("%s: %s max_rel %.3g\n", what, i < cfg->ntables ? cfg->tables[i].name : "dense", d);
		worst = fmax(worst, d);
	}
	return worst;
}

static float **assemble(const char *name, int group, int nranks, size_t *dense_n)
{
	char t[64];
	snprintf(t, sizeof(t), "%s-g%d", name, group);
	return dumps_assemble(cfg, dir, t, nranks, dense_n);
}

static void test_exact_sync_equals_1d(void **state)
{
	(void)state;
	size_t n1 = 0, n2 = 0, n3 = 0;
	run("oned", W, 0, STEPS);
	run("exact", S, 0, STEPS);
	float **ref = assemble("oned", 0, W, &n1);
	float **g0 = assemble("exact", 0, S, &n2);
	float **g1 = assemble("exact", 1, S, &n3);
	assert_true(n1 > 0 && n2 == n1);
	/* the replicas of every shard: the same bits (group 1 has no dense parameters of its own) */
	assert_true(model_diff(g0, g1, 0, "2x2 exact: replica 0 vs 1") == 0);
	for (int i = 0; i < cfg->ntables; i++)
		assert_memory_equal(g0[i], g1[i], sizeof(float) * (size_t)(cfg->tables[i].rows * cfg->tables[i].dim));
	assert_true(model_diff(ref, g0, n1, "2x2 exact vs 1x4") <= 1e-5);
	char pa[128], pb[128];
	snprintf(pa, sizeof(pa), "%s/oned-loss", dir);
	snprintf(pb, sizeof(pb), "%s/exact-loss", dir);
	FILE *a = fopen(pa, "r"), *b = fopen(pb, "r");
	assert_non_null(a);
	assert_non_null(b);
	double la, lb, worst = 0;
	int lines = 0;
	while (fscanf(a, "%lf", &la) == 1 && fscanf(b, "%lf", &lb) == 1) {
		worst = fmax(worst, fabs(la - lb) / la);
		lines++;
	}
	fclose(a);
	fclose(b);
	assert_int_equal(lines, STEPS);
	print_message("loss curves: max relative difference %.3g\n", worst);
	assert_true(worst < 1e-5);
	dumps_free(cfg, ref);
	/* rank 2's votes of step 10 fail after they came through (the others finished the step): it catches up */
	vote_lost_rank = 2;
	run("caught", S, 0, STEPS);
	vote_lost_rank = -1;
	float **c0 = assemble("caught", 0, S, &n2), **c1 = assemble("caught", 1, S, &n3);
	for (int i = 0; i < cfg->ntables; i++) {
		size_t bytes = sizeof(float) * (size_t)(cfg->tables[i].rows * cfg->tables[i].dim);
		assert_memory_equal(c0[i], g0[i], bytes);
		assert_memory_equal(c1[i], g1[i], bytes);
	}
	print_message("a rank that caught up on a step whose votes it lost ends with the undisturbed run's bits\n");
	dumps_free(cfg, c0);
	dumps_free(cfg, c1);
	/*
	 * every rank's step 12 fails after its lookup, then in its votes (prepared, then dropped): its ZCH changes are
	 * undone (each rank checks), and trained again
	 */
	for (int how = 1; how <= 2; how++) {
		const char *name = how == 1 ? "undone" : "dropped";
		fail_all = how;
		run(name, S, 0, STEPS);
		fail_all = 0;
		c0 = assemble(name, 0, S, &n2), c1 = assemble(name, 1, S, &n3);
		for (int i = 0; i < cfg->ntables; i++) {
			size_t bytes = sizeof(float) * (size_t)(cfg->tables[i].rows * cfg->tables[i].dim);
			assert_memory_equal(c0[i], g0[i], bytes);
			assert_memory_equal(c1[i], g1[i], bytes);
		}
		print_message("a step failed on every rank %s, undone and trained again, ends with the undisturbed run's "
			      "bits\n", how == 1 ? "after its lookup" : "in its votes (prepared, then dropped)");
		dumps_free(cfg, c0);
		dumps_free(cfg, c1);
	}
	dumps_free(cfg, g0);
	dumps_free(cfg, g1);
}

static void test_every_k_replicas_equal_after_sync(void **state)
{
	(void)state;
	fail_all = 0, vote_lost_rank = -1; /* whatever a failed test before left */
	size_t n0 = 0, n1 = 0;
	/* 28 steps: the last sync was after step 24 (of 0..27), the replicas have trained apart since */
	run("every-mid", S, 5, 28);
	float **a0 = assemble("every-mid", 0, S, &n0);
	float **a1 = assemble("every-mid", 1, S, &n1);
	double apart = model_diff(a0, a1, 0, "every 5, 3 steps after a sync: replica 0 vs 1");
	assert_true(apart > 0);
	dumps_free(cfg, a0);
	dumps_free(cfg, a1);
	/* 30 steps: synced after step 29 */
	run("every", S, 5, 30);
	a0 = assemble("every", 0, S, &n0);
	a1 = assemble("every", 1, S, &n1);
	for (int i = 0; i < cfg->ntables; i++)
		assert_memory_equal(a0[i], a1[i], sizeof(float) * (size_t)(cfg->tables[i].rows * cfg->tables[i].dim));
	print_message("every 5, right after a sync: replicas bitwise equal (apart by %.3g 3 steps after one)\n", apart);
	dumps_free(cfg, a0);
	dumps_free(cfg, a1);
}

/*
 * Pre-copy marks each row dirty once and clears the mark as the row is sent:
 * one mark follows one copy. A world of 1 leaving its rows to 2 replica
 * groups of 1 would feed two copies of every row from one: the worker
 * refuses (one_copy_each in worker/precopy.c) and the change moves at the
 * pause; the same 1 -> 2 in 1D (each row to one rank) is pre-copied. The
 * member is the leaver (union rank 2 of 3): its rows go only by moves.
 */
/* The union of the guard's test: nothing may be sent before the copy's rounds; a call fails, and the test with it. */
static rs_status no_exchange(rs_transport *t, const rs_xfer *sends, int nsends, const rs_xfer *recvs, int nrecvs)
{
	(void)sends, (void)nsends, (void)recvs, (void)nrecvs;
	snprintf(t->error, sizeof(t->error), "the union was used before the copy's rounds");
	return RS_EINVAL;
}
static void no_abort(rs_transport *t) { (void)t; }
static rs_status no_subset(rs_transport *t, int32_t n, rs_transport **out)
{
	(void)t, (void)n, (void)out;
	return RS_EINVAL;
}
static const rs_transport_ops unused_ops = {
	.name = "unused", .exchange = no_exchange, .abort = no_abort, .destroy = no_abort, .subset = no_subset};

static int guard_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	rs_trainer *tr;
	rs_err err = {0};
	rs_plan *to[2] = {NULL, NULL};
	int rc = 0;
	if (st != RS_OK || rs_trainer_create(cfg, plan, t, NULL, &tr, &err) != RS_OK) {
		fprintf(stderr, "rank %d: %s %s\n", rank, msg, err.msg);
		return 100;
	}
	for (int k = 0; k < 2; k++) { /* to[0]: 2 replica groups of 1; to[1]: 1D on 2 */
		rs_world w = rs_world_make(cfg, 2, 0, 0, k + 1);
		if (rs_planner_plan(cfg, &w, NULL, NULL, &to[k], &err) != RS_OK) {
			fprintf(stderr, "plan: %s\n", err.msg);
			rc = 101;
		}
	}
	rs_transport uni = {.ops = &unused_ops, .rank = 2, .world = 3}; /* the copy begins; nothing is sent before its rounds */
	int32_t union_of_old[1] = {2};
	for (int k = 0; k < 2 && !rc; k++) {
		rs_reshard_spec spec = {.old_plan = plan, .new_plan = to[k], .union_of_old = union_of_old, .uni = &uni};
		rs_precopy *pc = NULL;
		err = (rs_err){0};
		st = rs_precopy_begin(cfg, tr, &spec, &pc, &err);
		print_message("1 -> 2 %s: %s\n", k ? "in 1D" : "in 2 replica groups", st == RS_OK ? "copy began" : err.msg);
		if (k == 0 && (st != RS_EINVAL || !strstr(err.msg, "more than one copy")))
			rc = 102;
		if (k == 1 && st != RS_OK)
			rc = 103;
		rs_precopy_free(pc);
	}
	rs_plan_free(to[0]);
	rs_plan_free(to[1]);
	rs_trainer_destroy(tr);
	return rc;
}

static void test_precopy_refuses_two_copies_from_one(void **state)
{
	(void)state;
	rs_err err = {0};
	rs_world w = rs_world_make(cfg, 1, 0, 0, 1);
	assert_int_equal(rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err), RS_OK);
	world wo = {.n = 1, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		    .body = guard_body};
	world_run(&wo);
	rs_plan_free(plan);
	plan = NULL;
	assert_int_equal(wo.exit_code[0], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exact_sync_equals_1d),
		cmocka_unit_test(test_every_k_replicas_equal_after_sync),
		cmocka_unit_test(test_precopy_refuses_two_copies_from_one),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
