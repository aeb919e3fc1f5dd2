/*
 * test_job_recover.c - tests the coordinator's recovery from a lost world
 * member (coordinator/job_recover.c) on the job harness: a member lost
 * while training, migrating, committing or aborting, or gone idle in the
 * world, rolls the world back (no checkpoints here: to step 0) over the
 * survivors and the replacements; a recovered coordinator tells a
 * replacement from the original; recoveries back to the same step give up.
 */
#include "tests/unit/job_harness.h"

#include <string.h>

/* Worker k was sent an abort of generation gen. */
static int aborted(int k, int64_t gen)
{
	for (int i = 0; i < H.box[k].n; i++)
		if (rs_proto_kind(H.box[k].msg[i]) == RS_MSG_ABORT && field(H.box[k].msg[i], "generation") == gen)
			return 1;
	return 0;
}

static void test_old_member_lost_while_migrating_rolls_back(void **state)
{
	(void)state;
	start(2);
	to_migrating(2, 3);
	rs_job_exited(H.job, "worker-1", 0, "killed by signal 9");
	tick(0.01);
	assert_recovering("worker-1 was lost during the migration holding the only copy of rows");
	/* the attempt's members are told to drop what they staged, the old world's its generation */
	assert_int_equal(field(last(2, RS_MSG_ABORT), "generation"), 2);
	assert_true(aborted(0, 2) && aborted(0, 1) && !aborted(2, 1));
	forget_mail();
	join(0); /* reconnecting (it may have missed them): told both again */
	join(2);
	assert_true(aborted(0, 2) && aborted(0, 1) && aborted(2, 2) && !aborted(2, 1));
}

static void test_world_member_lost_while_training_rolls_back(void **state)
{
	(void)state;
	start(2);
	rs_job_exited(H.job, "worker-0", 0, "exited with status 3");
	tick(0.1);
	assert_phase("training"); /* peers of a dead member fail within milliseconds: the cause gets a moment */
	tick(0.6);
	assert_recovering("worker-0 was lost holding the only copy of rows of 'users'");
	assert_non_null(strstr(H.event, "Warning Recovering: worker-0 was lost"));
	assert_true(aborted(1, 1)); /* the survivor is told to drop the lost generation */
	forget_mail();
	join(1); /* the same process reconnecting (it missed nothing, or did): told again */
	assert_true(aborted(1, 1));
	forget_mail();
	tick(1);
	assert_null(last(1, RS_MSG_START)); /* worker-1 still trains the lost generation: wait for it */
	say(1, rs_proto_make_idle("127.0.0.1:2101")); /* its step failed: it dropped the generation */
	rejoin_new(0);
	tick(0.01);
	assert_phase("training");
	for (int k = 0; k < 2; k++) {
		json_t *m = last(k, RS_MSG_START);
		assert_non_null(m);
		assert_int_equal(field(m, "generation"), 2);
		assert_int_equal(field(m, "rank"), k);
		assert_int_equal(field(m, "first_step"), 0);
		assert_null(json_object_get(m, "previous_plan")); /* a fresh start over a fresh plan */
	}
	rs_msg_progress p = {.rank = 0, .step = 0, .loss = 0.6, .samples_per_s = 1000, .auc = -1, .teacher_auc = -1};
	say(0, rs_proto_make_progress(&p));
	assert_true(reported("recovered: generation 2 (2 workers) made step 1"));
	assert_non_null(strstr(H.event, "Normal Recovered: Generation 2 (2 workers) trains again from step 0"));
}

static void test_member_idle_in_the_world_rolls_back(void **state)
{
	(void)state;
	start(2);
	say(1, rs_proto_make_idle("127.0.0.1:2101")); /* a peer failed under it, and nobody exited */
	tick(0.1);
	assert_phase("training");
	tick(0.6);
	assert_phase("recovering");
	assert_true(reported("worker-1 lost its generation (a peer failed under it)"));
}

static void test_recoveries_to_the_same_step_give_up(void **state)
{
	(void)state;
	start(2);
	for (int round = 0; round < 3; round++) {
		rs_job_exited(H.job, "worker-1", 0, "killed by signal 9");
		tick(0.01);
		if (round == 2)
			break;
		assert_phase("recovering");
		say(0, rs_proto_make_idle("127.0.0.1:2100"));
		rejoin_new(1);
		tick(0.01);
		assert_phase("training");
	}
	assert_phase("failed"); /* --max-attempts 2 here */
	assert_non_null(strstr(rs_job_error(H.job), "gave up after 2 recoveries in a row back to step 0"));
}

static void test_member_lost_while_committing_rolls_back(void **state)
{
	(void)state;
	to_committing();
	say(0, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	say(1, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	tick(0.01);
	assert_phase("committing"); /* worker-2 has not confirmed yet */
	rs_job_exited(H.job, "worker-2", 0, "killed by signal 9");
	tick(0.01);
	assert_recovering("worker-2 was lost right after the commit holding the only copy of rows");
}

static void test_world_member_lost_while_aborting_rolls_back(void **state)
{
	(void)state;
	to_aborting();
	rs_job_exited(H.job, "worker-1", 0, "killed by signal 9");
	tick(0.01);
	assert_recovering("worker-1 was lost during the abort holding the only copy of rows");
}

static void test_recovered_job_tells_a_replacement_from_the_original(void **state)
{
	(void)state;
	start(2);
	restart_coordinator(); /* as in Kubernetes: no process exits are seen, pods come back under their names */
	join(0); /* the same process: its incarnation is the one the state kept */
	rs_msg_join j = {.worker = "worker-1", .addr = "127.0.0.1:2001", .pid = 101, .incarnation = "a-new-process"};
	H.h.on_join(H.h.ctx, conn(1), &j);
	tick(0.01);
	tick(0.6); /* a loss not by a signal gets a moment for its first cause to surface */
	assert_recovering("worker-1 was lost holding the only copy of rows");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_old_member_lost_while_migrating_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_world_member_lost_while_training_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_idle_in_the_world_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recoveries_to_the_same_step_give_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_lost_while_committing_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_world_member_lost_while_aborting_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovered_job_tells_a_replacement_from_the_original, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
