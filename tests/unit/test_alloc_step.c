/*
 * test_alloc_step.c - torture test of the training step (worker/train.c,
 * rs_trainer_step and rs_trainer_evaluate): with the N-th allocation
 * failing, for every N until the operation completes without reaching N,
 * it must return an error with a message (never RS_OK), not crash, and
 * leak nothing (make asan). The model is tests/data/train-model.json (a
 * table of every sharding type and a ZCH table) on a world of one rank.
 *
 * Which allocations a step makes depends on what it must grow, so three
 * operations are tortured, each on a fresh trainer:
 *   - the first step after create: every buffer grows from nothing;
 *   - a later step: the buffers are grown, only the per-step allocations
 *     are left (the packed requests, the scratch arrays, the data-parallel
 *     gradients);
 *   - an evaluation of more samples than a training batch, after a step:
 *     the lookup's buffers grow again, past their first size;
 *   - the first step of a trainer that may heal (partial recovery): its ZCH
 *     changes are recorded as it goes (rs__zch_mark, rs__zch_keep_row, the
 *     tables' journals, growing from nothing), and a step that failed must
 *     have changed nothing (the model's checksum, ZCH identities and
 *     metadata included, is the fresh trainer's) unless the trainer says it
 *     cannot heal; trained again without failures, the step then ends
 *     where an undisturbed one does.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/config.h"
#include "common/planner.h"
#include "tests/unit/alloc/alloc_fail.h"
#include "worker/train.h"
#include "worker/transport_tcp.h"

#include <stdio.h>
#include <string.h>

#define EVAL_SAMPLES 1000 /* more than the global batch of 256: the lookup grows past a step's size */

static rs_config *cfg;
static rs_plan *plan;

static int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	if (rs_config_load("tests/data/train-model.json", &cfg, &err) != RS_OK)
		return -1;
	rs_world w = rs_world_make(cfg, 1, 0, 0, 0);
	return rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err) == RS_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	rs_plan_free(plan);
	rs_config_free(cfg);
	return 0;
}

/* What is tortured: the first step, a later step, an evaluation after a step, a first step that may heal. */
typedef enum op { FIRST_STEP, LATER_STEP, EVALUATION, HEALABLE_STEP } op;

static const char *const op_name[] = {"the first step", "a later step", "an evaluation",
				      "the first step of a trainer that may heal"};

/* A trainer of world 1 over its own transport, made without failures; NULL t/tr on error. */
static void make_trainer(rs_transport **t, rs_trainer **tr)
{
	const char *addr = "127.0.0.1:0";
	rs_tcp_config tc = {.rank = 0, .world = 1, .addrs = &addr, .listen_fd = -1, .token = "t", .generation = 1};
	rs_err err = {0};
	*tr = NULL;
	assert_int_equal(rs_tcp_transport_create(&tc, t, &err), RS_OK);
	assert_int_equal(rs_trainer_create(cfg, plan, *t, NULL, tr, &err), RS_OK);
}

/* The operation itself, after its untortured warm-up (a step for LATER_STEP and EVALUATION). */
static rs_status run_op(rs_trainer *tr, op o, rs_err *err)
{
	double auc, ll;
	if (o == EVALUATION)
		return rs_trainer_evaluate(tr, EVAL_SAMPLES, &auc, &ll, err);
	return rs_trainer_step(tr, o == FIRST_STEP || o == HEALABLE_STEP ? 0 : 1, NULL, err);
}

/* The model's per-table checksum, folded into one value. */
static uint64_t model_sum(const rs_trainer *tr)
{
	uint64_t per[64] = {0}, sum = 0;
	assert_true(cfg->ntables <= 64);
	rs_trainer_checksum(tr, per);
	for (int t = 0; t < cfg->ntables; t++)
		sum = sum * 1000003u ^ per[t];
	return sum;
}

/*
 * HEALABLE_STEP, allocation n failed in step 0 (st): unless the trainer
 * says it cannot heal, the model is the fresh trainer's (before), and step
 * 0 trained again ends at after. 1 when it checked that.
 */
static int check_taken_back(rs_trainer *tr, long n, rs_status st, uint64_t before, uint64_t after)
{
	rs_err err = {0};
	if (st == RS_OK || !rs_trainer_can_heal(tr))
		return 0;
	if (model_sum(tr) != before)
		fail_msg("%s: allocation %ld failed, and the model is not the step before's", op_name[HEALABLE_STEP], n);
	assert_int_equal(rs_trainer_step(tr, 0, NULL, &err), RS_OK);
	if (model_sum(tr) != after)
		fail_msg("%s: allocation %ld failed; trained again, the step does not end where an undisturbed one does",
			 op_name[HEALABLE_STEP], n);
	return 1;
}

/* Fail allocation N of the operation for N = 1, 2, ...; returns how many allocations it makes. */
static long torture(op o)
{
	long n, checked = 0, survivals = 0;
	uint64_t before = 0, after = 0;
	cfg->cluster.partial_recovery = o == HEALABLE_STEP; /* rs_trainer_can_heal: a 1D world with partial recovery */
	if (o == HEALABLE_STEP) { /* the undisturbed step's checksums, before and after */
		rs_transport *t;
		rs_trainer *tr;
		rs_err err = {0};
		make_trainer(&t, &tr);
		before = model_sum(tr);
		assert_int_equal(rs_trainer_step(tr, 0, NULL, &err), RS_OK);
		after = model_sum(tr);
		assert_true(after != before);
		rs_trainer_destroy(tr);
		rs_transport_destroy(t);
	}
	for (n = 1;; n++) {
		rs_transport *t;
		rs_trainer *tr;
		rs_err err = {0};
		make_trainer(&t, &tr);
		if (o == LATER_STEP || o == EVALUATION)
			assert_int_equal(rs_trainer_step(tr, 0, NULL, &err), RS_OK);
		rs_alloc_fail_at(n);
		rs_status st = run_op(tr, o, &err);
		int failed = rs_alloc_failed();
		rs_alloc_fail_reset();
		/* the record of ZCH changes may fail and the step succeed: it only loses the means to take it back */
		int survived = o == HEALABLE_STEP && failed && st == RS_OK;
		if (survived && model_sum(tr) != after)
			fail_msg("%s: allocation %ld failed, and the step succeeded elsewhere than an undisturbed one", op_name[o],
				 n);
		survivals += survived;
		if (o == HEALABLE_STEP && failed && st != RS_OK)
			checked += check_taken_back(tr, n, st, before, after);
		rs_trainer_destroy(tr);
		rs_transport_destroy(t);
		if (!failed) {
			assert_int_equal(st, RS_OK);
			break;
		}
		if (st == RS_OK && !survived)
			fail_msg("%s: allocation %ld failed, and it reported success", op_name[o], n);
		if (survived)
			continue;
		if (!err.msg[0])
			fail_msg("%s: allocation %ld failed with %s, and no message", op_name[o], n, rs_status_str(st));
	}
	print_message("%s: %ld allocations, each failed in turn\n", op_name[o], n - 1);
	if (o == HEALABLE_STEP) {
		print_message("%s: %ld failed steps left the model unchanged and trained again to the same end; %ld "
			      "failures only lost the record of the ZCH changes, the step succeeding\n", op_name[o], checked,
			      survivals);
		assert_true(checked > 0);
	}
	cfg->cluster.partial_recovery = 0;
	return n - 1;
}

static void test_first_step(void **state)
{
	(void)state;
	long first = torture(FIRST_STEP);
	assert_true(first > 20); /* every buffer of the lookup, the bags, the dense network */
}

static void test_later_step(void **state)
{
	(void)state;
	assert_true(torture(LATER_STEP) > 0);
}

static void test_evaluation(void **state)
{
	(void)state;
	assert_true(torture(EVALUATION) > 0);
}

static void test_healable_step(void **state)
{
	(void)state;
	assert_true(torture(HEALABLE_STEP) > torture(FIRST_STEP)); /* the recording's own allocations besides */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_step),
		cmocka_unit_test(test_later_step),
		cmocka_unit_test(test_evaluation),
		cmocka_unit_test(test_healable_step),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
