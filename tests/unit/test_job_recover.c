/*
 * test_job_recover.c - tests the coordinator's recovery from a lost world
 * member (coordinator/job_recover.c) on the job harness: a member lost
 * while training, migrating, committing or aborting, or gone idle in the
 * world, rolls the world back (no checkpoints here: to step 0) over the
 * survivors and the replacements; a recovered coordinator tells a
 * replacement from the original; recoveries back to the same step give up;
 * a loss after a member finished the last step completes the job. A
 * coordinator started again hears a worker's "done" and completes a
 * checkpoint from the reports its workers repeat on their rejoin.
 * A 2 x 2 world whose survivors stopped at different steps heals at the
 * step every role has a copy at: one short of it with the step prepared
 * catches up, one ahead takes its rows again; it rolls back when no step
 * has a copy of every row.
 */
#include "tests/unit/job_harness.h"
#include "tests/unit/scratch.h"

#include <stdlib.h>
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
	rs_job_exited(H.job, "worker-1", NULL, 0, "killed by signal 9");
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

/*
 * A pod's deletion seen late (the watch was down), after a new pod of the
 * same name joined: it is not the joined worker's end. Workers in pods
 * join with their pod's uid first in their incarnation; the deletion of
 * the pod a member joined from is a loss as before.
 */
static void test_an_earlier_pods_deletion_spares_its_successor(void **state)
{
	(void)state;
	create(&source, 2);
	join_as(0, "0a0a-01.5eed0");
	join_as(1, "1b1b-02.5eed1");
	tick(0.01);
	assert_phase("training");
	rs_job_exited(H.job, "worker-1", "1b1b-01", -1, "pod deleted"); /* the pod before it */
	rs_job_exited(H.job, "worker-1", "1b1b", -1, "pod deleted");    /* a prefix is another uid */
	tick(0.1);
	tick(0.6);
	assert_phase("training");
	rs_job_exited(H.job, "worker-1", "1b1b-02", -1, "pod deleted");
	tick(0.1);
	tick(0.6);
	assert_recovering("worker-1 was lost");
}

static void test_world_member_lost_while_training_rolls_back(void **state)
{
	(void)state;
	start(2);
	rs_job_exited(H.job, "worker-0", NULL, 0, "exited with status 3");
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

/* A peer failed under worker-1 and worker-0's connection dropped, not known gone (its pod's deletion unseen): worker-0 is named. */
static void test_a_member_that_went_away_is_named_not_its_peer(void **state)
{
	(void)state;
	start(2);
	H.h.on_close(H.h.ctx, conn(0));
	say(1, rs_proto_make_idle("127.0.0.1:2101"));
	tick(0.1);
	assert_phase("training");
	tick(0.6);
	assert_phase("recovering");
	assert_true(reported("recovery: worker-0 went away (its connection dropped as its peers' generation failed)"));
	assert_false(reported("worker-1 lost its generation"));
}

static void test_recoveries_to_the_same_step_give_up(void **state)
{
	(void)state;
	start(2);
	for (int round = 0; round < 3; round++) {
		rs_job_exited(H.job, "worker-1", NULL, 0, "killed by signal 9");
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
	rs_job_exited(H.job, "worker-2", NULL, 0, "killed by signal 9");
	tick(0.01);
	assert_recovering("worker-2 was lost right after the commit holding the only copy of rows");
}

static void test_world_member_lost_while_aborting_rolls_back(void **state)
{
	(void)state;
	to_aborting();
	rs_job_exited(H.job, "worker-1", NULL, 0, "killed by signal 9");
	tick(0.01);
	assert_recovering("worker-1 was lost during the abort holding the only copy of rows");
}

/*
 * A member lost after another said "done" (it passed the last step's final
 * collective, so every rank ended it): the job is complete, not rolled
 * back to a world whose finished members have exited.
 */
static void test_loss_after_a_member_finished_completes_the_job(void **state)
{
	(void)state;
	start(2);
	say(1, rs_proto_make_done(1, 1, 50)); /* not the job's last step: refused, it ends nothing */
	assert_non_null(last(1, RS_MSG_ERROR));
	say(0, rs_proto_make_done(1, 0, 100));
	rs_job_exited(H.job, "worker-0", NULL, 1, "exited with status 0");
	rs_job_exited(H.job, "worker-1", NULL, 0, "killed by signal 9");
	tick(0.01);
	assert_phase("done");
	assert_true(H.ending);
	assert_int_equal(H.saved[H.nsaved - 1], RS_STATE_DONE);
	assert_true(reported("training done: 2 workers, 100 steps"));
}

/* The same with the "done" after the loss: the rollback under way gives way to the end. */
static void test_done_during_the_rollback_completes_the_job(void **state)
{
	(void)state;
	start(2);
	rs_job_exited(H.job, "worker-1", NULL, 0, "killed by signal 9");
	tick(0.01);
	assert_recovering("worker-1 was lost holding the only copy of rows");
	say(0, rs_proto_make_done(1, 0, 100)); /* it had passed the final save's barrier before worker-1 died */
	rs_job_exited(H.job, "worker-0", NULL, 1, "exited with status 0");
	tick(0.01);
	assert_phase("done");
	assert_true(H.ending);
	assert_int_equal(H.saved[H.nsaved - 1], RS_STATE_DONE);
	/* the rollback begun is not counted: it never ran */
	rs_server_handler h = rs_job_server_handler(H.job);
	char *body = NULL;
	size_t len = 0;
	const char *type = NULL;
	assert_int_equal(h.http_get(h.ctx, "/metrics", &body, &len, &type), 200);
	assert_non_null(strstr(body, "rowshift_recoveries_total{kind=\"rollback\"} 0\n"));
	free(body);
	forget_mail();
	rejoin_new(1); /* a replacement for the lost one: nothing to train */
	tick(100);
	assert_phase("done");
	assert_null(last(1, RS_MSG_START));
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

/*
 * Worker k of a 2 x 2 world (replicas of a role: ranks 0-1, 2-3) pauses at step (the next one prepared, when
 * prepared), holding copies that checksum a, b.
 */
static void paused_holding(int k, int64_t step, int prepared, uint64_t a, uint64_t b)
{
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", 2000 + k);
	json_t *cs = sums(a, b), *held = sums(a, b);
	rs_msg_paused p = {.rank = k, .generation = 1, .step = step, .addr = addr, .checksum = cs, .held = held,
			   .prepared = prepared ? step + 1 : 0};
	say(k, rs_proto_make_paused(&p));
	json_decref(cs);
	json_decref(held);
}

/*
 * A 2 x 2 world (the replicas of a role: ranks 0-1, 2-3) loses worker-3; survivor k pauses at step[k] (with
 * the next step prepared when prepared[k]), holding copies whose checksums follow the step and the role.
 */
static void survivors_pause_at(const int64_t step[3], const int prepared[3])
{
	H.cfg->cluster.sharding_group = 2;
	start(4);
	rs_job_exited(H.job, "worker-3", NULL, 0, "killed by signal 9");
	tick(0.01);
	assert_phase("recovering");
	assert_true(reported("rebuilding its rows from their replicas, no rollback"));
	for (int k = 0; k < 3; k++)
		paused_holding(k, step[k], prepared[k], (uint64_t)(10 * step[k] + k / 2), (uint64_t)(10 * step[k] + k / 2 + 1));
	tick(0.01);
}

/* The replacement worker-3 comes, and the heal reshards to generation 2 from step, with no rollback. */
static void heals_from(int64_t step)
{
	rejoin_new(3);
	tick(0.01);
	assert_phase("paused");
	tick(0.01);
	for (int k = 0; k < 4; k++) {
		json_t *m = last(k, RS_MSG_START);
		assert_non_null(m);
		assert_int_equal(field(m, "generation"), 2);
		assert_int_equal(field(m, "first_step"), step);
	}
	assert_false(reported("rolling back"));
}

/* Worker k was asked to catch up to step. */
static int asked_to_catch_up(int k, int64_t step)
{
	json_t *m = last(k, RS_MSG_CATCH_UP);
	return m && field(m, "generation") == 1 && field(m, "step") == step;
}

/* Worker-0 finished step 41 before the loss reached it; its replica (worker-1) and worker-2 failed it. */
static void test_survivor_a_step_ahead_takes_its_rows_again(void **state)
{
	(void)state;
	survivors_pause_at((int64_t[3]){41, 40, 40}, (int[3]){0, 0, 0});
	assert_true(aborted(0, 1)); /* it drops its model, a step ahead of its rows' copies */
	assert_false(aborted(1, 1) || aborted(2, 1));
	say(0, rs_proto_make_idle("127.0.0.1:2000"));
	heals_from(40); /* where both roles have a copy */
}

/* Workers 0 and 1 got through step 41's votes; worker-2's failed, the step prepared: it catches up. */
static void test_survivor_a_step_short_catches_up(void **state)
{
	(void)state;
	survivors_pause_at((int64_t[3]){41, 41, 40}, (int[3]){0, 0, 1});
	assert_true(asked_to_catch_up(2, 41));
	assert_false(asked_to_catch_up(0, 41) || asked_to_catch_up(1, 41) || aborted(2, 1));
	forget_mail();
	tick(0.01);
	assert_null(last(2, RS_MSG_CATCH_UP)); /* asked once */
	assert_phase("recovering");
	paused_holding(2, 41, 0, 411, 412); /* caught up */
	heals_from(41);
}

/* Worker-1 prepared step 41 (worker-0, the other copy of its role, finished it) and never answers the catch-up. */
static void test_catch_up_unanswered_drops_the_member(void **state)
{
	(void)state;
	survivors_pause_at((int64_t[3]){41, 40, 41}, (int[3]){0, 1, 0});
	assert_true(asked_to_catch_up(1, 41));
	tick(2); /* a quarter of --timeout-ms (10 s here) not yet past */
	assert_false(aborted(1, 1));
	tick(0.6);
	assert_true(aborted(1, 1)); /* it drops its model, and takes its rows again from worker-0 */
	say(1, rs_proto_make_idle("127.0.0.1:2001"));
	heals_from(41);
}

/*
 * Worker-0's votes of step 41 failed (prepared) but worker-2, role 1's last copy, failed before them: the
 * world heals at step 40, and worker-0 is told to drop its prepared step (its ZCH changes), then pauses again.
 */
static void test_prepared_step_not_taken_is_dropped(void **state)
{
	(void)state;
	survivors_pause_at((int64_t[3]){40, 40, 40}, (int[3]){1, 0, 0});
	assert_true(asked_to_catch_up(0, 40));
	assert_false(asked_to_catch_up(1, 40) || asked_to_catch_up(2, 40) || aborted(0, 1));
	tick(0.01);
	assert_phase("recovering"); /* waiting for it */
	paused_holding(0, 40, 0, 400, 401); /* the prepared step dropped */
	heals_from(40);
}

/* Both copies of role 0 finished a step that worker-2 (role 1's last copy) failed: no copy is at one step. */
static void test_no_copy_at_the_survivors_step_rolls_back(void **state)
{
	(void)state;
	survivors_pause_at((int64_t[3]){41, 41, 40}, (int[3]){0, 0, 0});
	assert_true(reported("rolling back to the start (step 0)"));
}

/*
 * Workers cut off from a coordinator that is started again, that train
 * through their last step meanwhile: their first word on the rejoin is
 * "done" (worker/agent.c's finish), with the generation it ends, which the
 * new coordinator has not heard from them yet. It counts; without a
 * generation (an older worker's) it is refused, as before.
 */
static void test_recovered_job_hears_done_on_the_rejoin(void **state)
{
	(void)state;
	start(2);
	restart_coordinator(); /* persisted in TRAINING, generation 1 */
	join(0);
	join(1);
	say(1, json_pack("{s:s, s:I, s:I}", "type", "done", "rank", (json_int_t)1, "step", (json_int_t)100));
	assert_non_null(strstr(json_string_value(json_object_get(last(1, RS_MSG_ERROR), "reason")), "no world"));
	say(0, rs_proto_make_done(1, 0, 100));
	say(1, rs_proto_make_done(1, 1, 100));
	assert_null(last(0, RS_MSG_ERROR));
	tick(0.01);
	assert_phase("done");
	assert_true(reported("training done: 2 workers, 100 steps"));
}

/*
 * A checkpoint half reported when the coordinator went away: its workers
 * repeat their reports on the rejoin (rs_link_report), and the coordinator
 * started again completes it from them.
 */
static void test_recovered_job_completes_a_repeated_checkpoint(void **state)
{
	(void)state;
	char root[256];
	start_checkpointing(root, sizeof(root), 2);
	checkpointed_by(root, 0, 1, 10); /* rank 1's report was lost with the coordinator */
	restart_coordinator();
	join(0);
	join(1);
	checkpointed(root, 2, 10); /* both repeated on the rejoin */
	assert_true(indexed(root, 10));
	assert_int_equal(reported_times("checkpoint of step 10 complete"), 1);
	assert_int_equal(rs_scratch_remove(root), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_old_member_lost_while_migrating_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_earlier_pods_deletion_spares_its_successor, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_member_that_went_away_is_named_not_its_peer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_world_member_lost_while_training_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_idle_in_the_world_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recoveries_to_the_same_step_give_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_member_lost_while_committing_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_world_member_lost_while_aborting_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_loss_after_a_member_finished_completes_the_job, setup, teardown),
		cmocka_unit_test_setup_teardown(test_done_during_the_rollback_completes_the_job, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovered_job_tells_a_replacement_from_the_original, setup, teardown),
		cmocka_unit_test_setup_teardown(test_survivor_a_step_ahead_takes_its_rows_again, setup, teardown),
		cmocka_unit_test_setup_teardown(test_survivor_a_step_short_catches_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_catch_up_unanswered_drops_the_member, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prepared_step_not_taken_is_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_copy_at_the_survivors_step_rolls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovered_job_hears_done_on_the_rejoin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovered_job_completes_a_repeated_checkpoint, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
