/*
 * test_pace.c - tests the pacing of a pre-copy's background rounds
 * (rs__precopy_pace, worker/agent_reshard.c): the share of the time, the
 * rounds due before the generation's end (a scheduled change's step), the
 * last pass held for the last steps but never longer than its bound (the
 * joiners wait in its exchange), and nothing asked without a copy or after
 * the last step.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "worker/agent_internal.h"

/* A member 10 ms a step, 20 ms a round, a fifth of its time for rounds, far from its generation's end. */
static rs_pace_in member(void)
{
	return (rs_pace_in){.share = 0.2, .pending = 30, .steps_left = 100000, .step_s = 0.010, .round_s = 0.020,
			    .since_round = 0.001, .timeout_ms = 30000};
}

static void test_share_of_the_time(void **state)
{
	(void)state;
	rs_pace_in in = member();
	/* 0.2 / 0.8 of a 10 ms step is 2.5 ms: a 20 ms round every 8 steps */
	assert_float_equal(rs__precopy_pace(&in), 0.125, 1e-6);
	in.round_s = 0; /* not measured yet: one a step */
	assert_float_equal(rs__precopy_pace(&in), 1, 1e-6);
	in = member();
	in.share = 1; /* all of it: as many as a step allows */
	assert_float_equal(rs__precopy_pace(&in), 16, 1e-6);
	in = member();
	in.round_s = 1e-6; /* rounds nearly free: still at most 16 after a step */
	assert_float_equal(rs__precopy_pace(&in), 16, 1e-6);
}

static void test_nothing_to_ask(void **state)
{
	(void)state;
	rs_pace_in in = member();
	in.pending = 0;
	assert_float_equal(rs__precopy_pace(&in), 0, 0);
	in = member();
	in.steps_left = 0; /* after the generation's last step: a resume would run what was asked then */
	assert_float_equal(rs__precopy_pace(&in), 0, 0);
}

static void test_due_before_the_end(void **state)
{
	(void)state;
	rs_pace_in in = member();
	in.steps_left = 100;
	in.round_s = 0.5; /* measured far too high (the first round waited for the joiners): the share asks 0.005 */
	/* 30 rounds over four fifths of 100 steps */
	assert_float_equal(rs__precopy_pace(&in), 30 / 80.0, 1e-6);
	in.round_s = 0.001; /* the share asks more than is due: the share */
	assert_float_equal(rs__precopy_pace(&in), 2.5, 1e-6);
	in = member();
	in.steps_left = 1; /* one step left for 30 rounds: as many as a step allows */
	assert_float_equal(rs__precopy_pace(&in), 16, 1e-6);
}

static void test_last_pass_held(void **state)
{
	(void)state;
	rs_pace_in in = member();
	in.pending = 1, in.last_pass_left = 1;
	/* far from the end (1000 s of steps): not held, paced as any round */
	assert_true(rs__precopy_pace(&in) > 0);
	in.steps_left = 100; /* the end in 1 s: held */
	assert_float_equal(rs__precopy_pace(&in), 0, 0);
	in.since_round = 0.9; /* ... until the joiners' wait and the steps left pass 2 s: then at once */
	assert_float_equal(rs__precopy_pace(&in), 0, 0);
	in.since_round = 1.1;
	assert_float_equal(rs__precopy_pace(&in), 1, 0);
	in.since_round = 0.1, in.steps_left = 3; /* the last steps: due, so it runs after the last one */
	assert_true(rs__precopy_pace(&in) > 0);
	in.steps_left = 100, in.timeout_ms = 2000; /* the bound is a quarter of the timeout at most: 0.5 s; 1 s away */
	assert_float_equal(rs__precopy_pace(&in), 0.125, 1e-6);
	in.steps_left = 30; /* 0.3 s + 0.1 s waited: held */
	assert_float_equal(rs__precopy_pace(&in), 0, 0);
	in.since_round = 0.25; /* 0.55 s: at once */
	assert_float_equal(rs__precopy_pace(&in), 1, 0);
	in = member();
	in.pending = 2, in.steps_left = 100; /* the first pass (two left) is never held: it finds a lost member early */
	assert_true(rs__precopy_pace(&in) > 0);
	in.pending = 1, in.last_pass_left = 1, in.step_s = 0; /* steps not measured yet: not held */
	assert_true(rs__precopy_pace(&in) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_share_of_the_time),
		cmocka_unit_test(test_nothing_to_ask),
		cmocka_unit_test(test_due_before_the_end),
		cmocka_unit_test(test_last_pass_held),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
