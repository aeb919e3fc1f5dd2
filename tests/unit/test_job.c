/*
 * test_job.c - tests the coordinator's job (coordinator/job.h) without
 * processes or sockets, on the job harness (tests/unit/job_harness.h: a
 * fake membership source, a fake post office in place of the server and a
 * clock the test moves). Every phase transition of the cycle and every
 * abort path is driven by the messages real workers would send, and
 * checked by what the job sends back, what it persists and the phase it
 * reaches. Recovery from a lost member: test_job_recover.c; the status
 * stream's pacing: test_job_status.c.
 */
#include "tests/unit/job_harness.h"
#include "tests/unit/scratch.h"
#include "common/checkpoint.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_grow_commits(void **state)
{
	(void)state;
	to_committing();
	assert_true(H.held); /* the world is stopped: the status stream waits */
	assert_int_equal(H.saved[H.nsaved - 1], RS_STATE_COMMITTING); /* persisted before "commit" went out */
	for (int k = 0; k < 3; k++)
		assert_int_equal(field(last(k, RS_MSG_COMMIT), "generation"), 2);
	assert_true(reported("generation 2: staged and verified"));
	for (int k = 0; k < 3; k++)
		say(k, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	tick(0.01);
	assert_phase("training");
	assert_int_equal(rs_job_generation(H.job), 2);
	assert_int_equal(H.saved[H.nsaved - 1], RS_STATE_TRAINING);
	assert_true(reported("generation 2 committed: 2 -> 3 workers"));
	assert_true(H.held); /* until the first step after the pause */
	/* rank 0's first report at the resume step completes the reshard's report, and the source's event */
	rs_msg_progress p = {.rank = 0, .step = 40, .loss = 0.5, .samples_per_s = 100, .auc = -1, .teacher_auc = -1};
	say(0, rs_proto_make_progress(&p));
	assert_true(reported("generation 2 resumed at step 40"));
	assert_false(H.held);
	assert_non_null(strstr(H.event, "Normal Resharded: Resharded generation 2: 2 -> 3 workers"));
	assert_true(H.published > 0);
}

/* Worker k of generation gen at step 40 says it paused, having stopped `stopped_s` before (its checksums). */
static void paused_after(int k, int64_t gen, double stopped_s)
{
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", 3000 + k);
	json_t *cs = sums(10 * (uint64_t)k + 1, 10 * (uint64_t)k + 2);
	rs_msg_paused p = {.rank = k, .generation = gen, .step = 40, .addr = addr, .checksum = cs, .stopped_s = stopped_s};
	say(k, rs_proto_make_paused(&p));
	json_decref(cs);
}

/*
 * The pause counts from the earliest stop of a member of the world: its
 * "paused" says how long it had stopped before it (its checksums), and a
 * later message can tell of an earlier stop.
 */
static void test_pause_counts_from_the_first_stop(void **state)
{
	(void)state;
	start(2);
	H.replicas = 3;
	join(2);
	tick(0.05);
	tick(0.2);
	double t0 = H.now;
	paused_after(0, 1, 0.25); /* stopped a quarter second ago */
	tick(0.1);
	paused_after(1, 1, 0.5); /* came later, but had stopped earlier still: the pause began then */
	tick(0.01);
	tick(0.01);
	assert_phase("migrating");
	for (int k = 0; k < 3; k++)
		say(k, rs_proto_make_generation(RS_MSG_STAGING, 2, 0, NULL));
	all_staged(2, 3, 0);
	tick(0.01);
	for (int k = 0; k < 3; k++)
		say(k, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	tick(0.01);
	assert_phase("training");
	rs_msg_progress p = {.rank = 0, .step = 40, .loss = 0.5, .samples_per_s = 100, .auc = -1, .teacher_auc = -1};
	say(0, rs_proto_make_progress(&p));
	char want[128];
	snprintf(want, sizeof(want), "generation 2 resumed at step 40: paused %.3f s", H.now - (t0 + 0.1 - 0.5));
	assert_true(reported(want));
}

/* Rank 0's first step reported before the last member's "committed" arrives still completes the report. */
static void test_first_step_before_the_last_commit(void **state)
{
	(void)state;
	to_committing();
	say(0, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	rs_msg_progress p = {.rank = 0, .step = 40, .loss = 0.5, .samples_per_s = 100, .auc = -1, .teacher_auc = -1};
	say(0, rs_proto_make_progress(&p)); /* its step needed every member: they committed, the coordinator lags */
	say(1, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	say(2, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	tick(0.01);
	assert_phase("training");
	assert_true(reported("generation 2 resumed at step 40"));
}

/* A member that commits the last generation and finishes before the others' "committed" came in: its done counts. */
static void test_done_before_the_last_commit(void **state)
{
	(void)state;
	to_committing();
	say(0, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	say(0, rs_proto_make_done(2, 0, 100)); /* its last steps ran as soon as it committed */
	assert_null(last(0, RS_MSG_ERROR));
	say(1, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	say(2, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	tick(0.01);
	say(1, rs_proto_make_done(2, 1, 100));
	say(2, rs_proto_make_done(2, 2, 100));
	tick(0.01);
	assert_phase("done");
}

static void test_leave_drains_and_exits(void **state)
{
	(void)state;
	start(3);
	say(2, rs_proto_make_generation(RS_MSG_LEAVE, 0, 0, "SIGTERM"));
	tick(0.05);
	tick(0.2);
	world_paused(3);
	tick(0.01);
	tick(0.01);
	assert_phase("migrating");
	json_t *s = last(2, RS_MSG_START);
	assert_int_equal(field(s, "world"), 2); /* the leaver is in the union only */
	assert_int_equal(field(s, "rank"), 2);
	all_staged(3, 2, 0);
	tick(0.01);
	assert_phase("committing");
	say(0, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	say(1, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	rs_job_exited(H.job, "worker-2", NULL, 1, "exited with status 0"); /* it handed its rows over and left */
	tick(0.01);
	assert_phase("training");
	assert_true(reported("generation 2 committed: 3 -> 2 workers"));
}

static void test_abort_when_a_member_fails_to_stage(void **state)
{
	(void)state;
	start(2);
	to_migrating(2, 3);
	staged(0, 2, 1, 1, before_sum(2, 0), before_sum(2, 1));
	staged(1, 2, 1, 1, 0, 0);
	staged(2, 2, 0, 0, 0, 0);
	tick(0.01);
	assert_phase("aborting");
	for (int k = 0; k < 3; k++)
		assert_int_equal(field(last(k, RS_MSG_ABORT), "generation"), 2);
	assert_true(reported("generation 2 aborted: worker-2: a chunk failed its CRC; every member keeps generation 1"));
	const json_t *ab = published("aborted"); /* status clients are told the attempt is over */
	assert_non_null(ab);
	assert_int_equal(json_integer_value(json_object_get(ab, "generation")), 2);
	assert_int_equal(json_integer_value(json_object_get(ab, "kept")), 1);
	assert_string_equal(json_string_value(json_object_get(ab, "reason")), "worker-2: a chunk failed its CRC");
	/* the old world returns to generation 1, paused */
	paused(0, 1, 0, 40, 1, 2);
	tick(0.01);
	assert_phase("aborting");
	paused(1, 1, 1, 40, 11, 12);
	tick(0.01);
	assert_phase("paused");
	assert_int_equal(rs_job_generation(H.job), 1);
	/* the joiner listens anew; the next attempt is generation 3 */
	say(2, rs_proto_make_idle("127.0.0.1:4002"));
	tick(2);
	assert_phase("migrating");
	assert_int_equal(field(last(2, RS_MSG_START), "generation"), 3);
}

static void test_abort_on_checksum_mismatch(void **state)
{
	(void)state;
	to_aborting();
	assert_true(reported("table 'users': the staged rows' checksum"));
}

static void test_abort_when_a_joiner_is_lost(void **state)
{
	(void)state;
	start(2);
	to_migrating(2, 3);
	rs_job_exited(H.job, "worker-2", NULL, 0, "killed by signal 9");
	tick(0.01);
	assert_phase("aborting");
	assert_true(reported("worker-2 (joining) was lost during the migration"));
}

/*
 * A report of the generation before, come after the start on the same
 * connection and before the member's answer to it, answers something sent
 * before the start (an abort of a called-off pre-copy): the member stages
 * next, the attempt waits for it. Once it answered, or after it rejoined
 * (the start may be lost), the same report ends the attempt at once.
 */
static void test_a_late_report_is_not_a_refusal(void **state)
{
	(void)state;
	start(2);
	to_migrating_but(2, 3, 1);
	paused(1, 1, 1, 40, 11, 12);
	tick(0.01);
	assert_phase("migrating");
	say(1, rs_proto_make_generation(RS_MSG_STAGING, 2, 0, NULL));
	all_staged(2, 3, 0);
	tick(0.01);
	assert_phase("committing");
}

static void test_a_joiners_late_idle_is_not_a_refusal(void **state)
{
	(void)state;
	start(2);
	to_migrating_but(2, 3, 2);
	say(2, rs_proto_make_idle("127.0.0.1:2002")); /* its answer to the abort of a called-off pre-copy */
	tick(0.01);
	assert_phase("migrating");
	tick(41); /* it never stages: the phase's timeout still ends the wait */
	assert_phase("aborting");
	assert_true(reported("not every member staged within 40000 ms"));
}

/* Worker-1 says it paused on generation 1, during generation 2's migration: the attempt ends at once. */
static void worker1_reports_generation_1_and_is_refused(void)
{
	paused(1, 1, 1, 40, 11, 12);
	tick(0.01);
	assert_phase("aborting");
	assert_true(reported("worker-1 is not staging generation 2 (it reports generation 1)"));
}

static void test_a_report_after_the_answer_is_a_refusal(void **state)
{
	(void)state;
	start(2);
	to_migrating(2, 3); /* each said it stages */
	worker1_reports_generation_1_and_is_refused();
}

static void test_a_report_after_a_rejoin_is_a_refusal(void **state)
{
	(void)state;
	start(2);
	to_migrating_but(2, 3, 1);
	H.h.on_close(H.h.ctx, conn(1)); /* its connection drops, the start on it perhaps lost */
	join(1);                      /* the same process, on a new connection */
	worker1_reports_generation_1_and_is_refused();
}

static void test_abort_on_staging_timeout_then_give_up(void **state)
{
	(void)state;
	start(2);
	to_migrating(2, 3);
	tick(39); /* 4 x --timeout-ms */
	assert_phase("migrating");
	tick(2);
	assert_phase("aborting");
	assert_true(reported("not every member staged within 40000 ms"));
	world_paused(2);
	say(2, rs_proto_make_idle("127.0.0.1:4002"));
	tick(0.01);
	tick(2);
	assert_phase("migrating"); /* attempt 2 of --max-attempts 2 */
	tick(41);
	assert_phase("aborting");
	world_paused(2);
	say(2, rs_proto_make_idle("127.0.0.1:4002"));
	tick(0.01);
	tick(2);
	assert_phase("failed");
	assert_non_null(strstr(rs_job_error(H.job), "gave up after 2 aborted reshard attempts in a row"));
	assert_true(H.ending);
}


static void test_commit_timeout_fails(void **state)
{
	(void)state;
	to_committing();
	say(0, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	tick(41);
	assert_phase("failed");
	assert_non_null(strstr(rs_job_error(H.job), "did not confirm the commit of generation 2"));
}

static void test_aborting_times_out(void **state)
{
	(void)state;
	to_aborting();
	paused(0, 1, 0, 40, 1, 2); /* worker-1 never returns to generation 1 */
	tick(39);
	assert_phase("aborting");
	tick(2);
	assert_phase("failed");
	assert_non_null(strstr(rs_job_error(H.job), "did not return to generation 1 after the abort"));
}

static void test_no_worker_left_while_paused_fails(void **state)
{
	(void)state;
	start(1);
	H.replicas = 0;
	say(0, rs_proto_make_generation(RS_MSG_LEAVE, 0, 0, "SIGTERM"));
	tick(0.05);
	tick(0.2);
	world_paused(1);
	tick(0.01);
	assert_phase("paused");
	tick(5);
	assert_phase("paused"); /* waiting for a replacement, up to --timeout-ms */
	tick(6);
	assert_phase("failed");
	assert_non_null(strstr(rs_job_error(H.job), "no worker left to hold the rows at step 40"));
}

static void test_resume_when_nothing_changes(void **state)
{
	(void)state;
	start(2);
	/* a joiner that goes away after the world paused for it: nothing to change after all */
	H.replicas = 3;
	join(2);
	tick(0.3);
	assert_non_null(last(0, RS_MSG_PAUSE));
	assert_true(H.held); /* from the "pause" sent, before any member's answer */
	H.h.on_close(H.h.ctx, conn(2));
	world_paused(2);
	tick(0.01);
	assert_phase("paused");
	tick(0.5);
	assert_phase("paused"); /* waiting for it, up to the debounce */
	assert_true(H.held);
	tick(0.6);
	assert_phase("training");
	assert_false(H.held); /* going on without a reshard lets the status stream go too */
	json_t *r = last(1, RS_MSG_RESUME);
	assert_non_null(r);
	assert_int_equal(field(r, "generation"), 1);
	assert_int_equal(field(r, "steps"), 100);
	assert_null(last(2, RS_MSG_START));
}

/*
 * A 2D job (groups of 2) asked for 6 workers from 4, whose second joiner is
 * slow: 5 would train 1D (its whole model planned afresh), so the change
 * waits for it past the debounce, up to --timeout-ms (10 s here); it goes
 * ahead as soon as the group is whole, or with 5 at the timeout.
 */
static void test_2d_growth_waits_for_whole_groups(void **state)
{
	(void)state;
	for (int slow = 0; slow < 2; slow++) {
		if (slow) {
			teardown(NULL);
			setup(NULL);
		}
		H.cfg->cluster.sharding_group = 2;
		start(4);
		H.replicas = 6;
		join(4);
		tick(0.6);
		tick(0.6); /* past the debounce */
		assert_phase("training");
		assert_null(last(0, RS_MSG_PAUSE));
		if (!slow) {
			join(5);
			tick(0.2); /* nobody pending: a tenth of the debounce */
			assert_non_null(last(0, RS_MSG_PAUSE));
			continue;
		}
		tick(5);
		assert_null(last(0, RS_MSG_PAUSE));
		tick(5); /* --timeout-ms since the last change: with the 5 it has */
		assert_non_null(last(0, RS_MSG_PAUSE));
	}
}

static void test_schedule_scales_at_its_step(void **state)
{
	(void)state;
	H.o.sched_step[0] = 40, H.o.sched_workers[0] = 3, H.o.nsched = 1;
	start(2);
	assert_int_equal(field(last(0, RS_MSG_START), "steps"), 40); /* the run stops at the schedule's step */
	world_paused(2);
	tick(0.01);
	tick(0.01);
	assert_true(reported("schedule: at step 40, scale to 3 workers"));
	assert_int_equal(H.replicas, 3);
	join(2);
	tick(0.01);
	assert_phase("migrating");
}

static void test_done(void **state)
{
	(void)state;
	start(2);
	say(0, rs_proto_make_done(1, 0, 100));
	tick(0.01);
	assert_phase("training");
	say(1, rs_proto_make_done(1, 1, 100));
	tick(0.01);
	assert_phase("done");
	assert_int_equal(rs_job_finished(H.job), 1);
	assert_int_equal(H.saved[H.nsaved - 1], RS_STATE_DONE);
	assert_true(reported("training done: 2 workers, 100 steps, 1 generation(s), 0 reshard(s)"));
}

static void test_done_is_not_reported_unless_persisted(void **state)
{
	(void)state;
	start(2);
	say(0, rs_proto_make_done(1, 0, 100));
	say(1, rs_proto_make_done(1, 1, 100));
	H.save_fails = 1;
	tick(0.01);
	assert_phase("failed");
	assert_non_null(strstr(rs_job_error(H.job), "cannot persist the job's state: the disk is full"));
	assert_false(reported("training done"));
}

/*
 * A checkpoint whose last rank reports after a newer one completed (a
 * shrink's leaver writes at a lower priority than the world that trains
 * on) completes all the same, unless --checkpoint-keep newer ones are
 * complete; a report of a checkpoint already complete changes nothing.
 */
static void test_a_checkpoint_completes_after_a_newer_one(void **state)
{
	(void)state;
	char root[256];
	start_checkpointing(root, sizeof(root), 2);
	checkpointed_by(root, 0, 1, 10); /* rank 1's part of step 10 comes late */
	checkpointed(root, 2, 20);
	assert_true(indexed(root, 20));
	assert_false(indexed(root, 10));
	checkpointed_by(root, 1, 2, 10);
	assert_true(indexed(root, 10));
	assert_int_equal(reported_times("checkpoint of step 10 complete"), 1);
	checkpointed(root, 2, 10); /* again: already complete */
	assert_int_equal(reported_times("checkpoint of step 10 complete"), 1);

	/* with 2 newer complete ones (--checkpoint-keep 2), a late one is not indexed, only to be deleted */
	checkpointed_by(root, 0, 1, 30);
	checkpointed(root, 2, 40);
	checkpointed(root, 2, 50);
	checkpointed_by(root, 1, 2, 30);
	assert_false(indexed(root, 30));
	assert_false(reported("checkpoint of step 30 complete"));
	assert_true(indexed(root, 40) && indexed(root, 50));
	assert_phase("training");
	assert_int_equal(rs_scratch_remove(root), 0);
}

/*
 * A checkpoint's save (its step "reached") while the API server is down is
 * tried once, not waited for: the job goes on serving its members and
 * tries again from its tick, with a growing wait, saving the state as it
 * is by then (a later checkpoint's step included). A decision's save,
 * which is patient, makes a pending one moot.
 */
static void test_a_checkpoint_save_does_not_wait_for_the_api(void **state)
{
	(void)state;
	char root[256], index[600], dir[512];
	start_checkpointing(root, sizeof(root), 5);
	int saved = H.nsaved, tries = H.save_tries;
	assert_int_equal(H.impatient, 0); /* the cycle's decisions wait for theirs */
	H.api_down = 1;
	checkpointed(root, 2, 10);
	assert_int_equal(H.save_tries, tries + 1);
	assert_int_equal(H.impatient, 1);
	rs_checkpoint_step_dir(root, 10, dir, sizeof(dir));
	snprintf(index, sizeof(index), "%s/index.json", dir);
	assert_int_equal(access(index, F_OK), 0); /* complete all the same */
	assert_phase("training");
	say(0, rs_proto_make_progress(&(rs_msg_progress){.rank = 0, .step = 15, .auc = -1, .teacher_auc = -1}));
	assert_int_equal(rs_job_step(H.job), 16); /* step 15 done: the loop serves its members meanwhile */
	tick(0.2);
	assert_int_equal(H.save_tries, tries + 1); /* not due before 0.25 s */
	checkpointed(root, 2, 20);
	assert_int_equal(H.save_tries, tries + 1); /* one is pending: this one's step is in its next try */
	tick(0.1);
	assert_int_equal(H.save_tries, tries + 2); /* due: tried again, and failed */
	tick(0.4);
	assert_int_equal(H.save_tries, tries + 2); /* the wait doubled: 0.5 s */
	H.api_down = 0;
	tick(0.2);
	assert_int_equal(H.save_tries, tries + 3);
	assert_int_equal(H.nsaved, saved + 1);
	assert_int_equal(H.saved[H.nsaved - 1], RS_STATE_TRAINING);
	assert_int_equal(json_integer_value(json_object_get(H.state, "reached")), 20);
	tick(30);
	assert_int_equal(H.save_tries, tries + 3); /* landed: nothing pending */
	assert_phase("training");

	/* pending again; a decision's save (a scale asked for) holds all it would have added */
	H.api_down = 1;
	checkpointed(root, 2, 30);
	assert_int_equal(H.save_tries, tries + 4);
	H.api_down = 0;
	rs_msg_join tool = {.worker = "rowshiftctl", .addr = "", .pid = 1, .incarnation = ""};
	H.h.on_join(H.h.ctx, conn(WORKERS), &tool);
	say(WORKERS, rs_proto_make_scale(3));
	assert_int_equal(H.save_tries, tries + 5);
	assert_int_equal(json_integer_value(json_object_get(H.state, "reached")), 30);
	tick(30);
	assert_int_equal(H.save_tries, tries + 5);
	assert_int_equal(H.impatient, 4); /* the checkpoints' three tries and one; the scale's was patient */

	/* refused for good (too large, forbidden): warned, not tried again until the next save */
	H.save_refused = 1;
	checkpointed(root, 2, 40);
	assert_int_equal(H.save_tries, tries + 6);
	tick(30);
	assert_int_equal(H.save_tries, tries + 6);
	assert_phase("training");
	assert_int_equal(rs_scratch_remove(root), 0);
}

static void test_scale_while_starting(void **state)
{
	(void)state;
	create(&source, 2);
	rs_msg_join tool = {.worker = "rowshiftctl", .addr = "", .pid = 1, .incarnation = ""};
	H.h.on_join(H.h.ctx, conn(WORKERS), &tool);
	json_t *sc = rs_proto_make_scale(3);
	H.h.on_message(H.h.ctx, conn(WORKERS), sc);
	json_decref(sc);
	assert_int_equal(field(last(WORKERS, RS_MSG_SCALING), "workers"), 3);
	assert_int_equal(H.nsaved, 0); /* nothing committed yet: nothing to persist */
	for (int k = 0; k < 3; k++)
		join(k);
	tick(0.01);
	assert_phase("training");
	assert_int_equal(field(last(0, RS_MSG_START), "world"), 3);
}

/*
 * A worker that exits before it joins, time after time (a bad option, a
 * config the worker refuses), fails the start at once where the source
 * says so (local mode), not after the join timeout; each worker counts for
 * itself, its join starts its count again, and an exit with status 0 does
 * not count.
 */
static void test_workers_that_never_join_fail_the_start(void **state)
{
	(void)state;
	rs_job_source src = source;
	src.early_exits_max = 3;
	create(&src, 2);
	for (int k = 0; k < 4; k++) /* twice each */
		rs_job_exited(H.job, k % 2 ? "worker-1" : "worker-0", NULL, 0, "exited with status 2");
	rs_job_exited(H.job, "worker-0", NULL, 1, "exited with status 0");
	assert_phase("starting");
	join(0); /* worker-0 starts counting again */
	rs_job_exited(H.job, "worker-0", NULL, 0, "exited with status 2");
	rs_job_exited(H.job, "worker-0", NULL, 0, "exited with status 2");
	assert_phase("starting");
	rs_job_exited(H.job, "worker-1", NULL, 0, "exited with status 2");
	assert_phase("failed");
	assert_non_null(strstr(rs_job_error(H.job), "worker-1 exited with status 2 before it joined, 3 times in a row"));

	/* without the source's word (Kubernetes), only the join timeout ends the start */
	rs_job_destroy(H.job);
	H.job = NULL;
	create(&source, 2);
	for (int k = 0; k < 20; k++)
		rs_job_exited(H.job, "worker-1", NULL, 0, "exited with status 2");
	assert_phase("starting");
}

static void test_starting_times_out(void **state)
{
	(void)state;
	create(&source, 2);
	join(0);
	tick(5);
	assert_phase("starting");
	tick(6);
	assert_phase("failed");
	assert_non_null(strstr(rs_job_error(H.job), "waiting for the workers to join: 1 of 2"));
}

static void test_persist_failure_fails_the_job(void **state)
{
	(void)state;
	start(2);
	H.save_fails = 1;
	H.replicas = 3;
	join(2);
	tick(0.3);
	world_paused(2);
	tick(0.01);
	tick(0.01);
	assert_phase("failed");
	assert_non_null(strstr(rs_job_error(H.job), "cannot persist the job's state: the disk is full"));
	assert_null(last(2, RS_MSG_START)); /* nothing goes out that a restart could not resolve */
}

static void test_messages_checked(void **state)
{
	(void)state;
	start(2);
	/* rowshiftctl: a tool joins without an address and asks to scale */
	rs_msg_join tool = {.worker = "rowshiftctl", .addr = "", .pid = 1, .incarnation = ""};
	H.h.on_join(H.h.ctx, conn(WORKERS), &tool);
	json_t *sc = rs_proto_make_scale(5);
	H.h.on_message(H.h.ctx, conn(WORKERS), sc);
	json_decref(sc);
	assert_int_equal(field(last(WORKERS, RS_MSG_SCALING), "workers"), 5);
	assert_int_equal(H.replicas, 5);
	json_t *bad = json_pack("{s:s, s:i}", "type", "scale", "workers", 0);
	H.h.on_message(H.h.ctx, conn(WORKERS), bad);
	json_decref(bad);
	assert_non_null(last(WORKERS, RS_MSG_ERROR));
	/* a worker's message from the tool's connection: an error, and no effect */
	say(WORKERS, json_pack("{s:s, s:I, s:I}", "type", "done", "rank", (json_int_t)0, "step", (json_int_t)H.o.steps));
	assert_non_null(strstr(json_string_value(json_object_get(last(WORKERS, RS_MSG_ERROR), "reason")),
			       "not a worker of this job"));
	assert_int_equal(H.ending, 0);
	/* a worker's unknown or malformed message is answered with an error; the job goes on */
	say(0, json_pack("{s:s}", "type", "dance"));
	assert_non_null(strstr(json_string_value(json_object_get(last(0, RS_MSG_ERROR), "reason")), "dance"));
	say(1, json_pack("{s:s, s:s}", "type", "paused", "rank", "zero"));
	assert_non_null(last(1, RS_MSG_ERROR));
	say(1, json_pack("{s:s, s:I, s:I, s:I, s:s, s:[s]}", "type", "paused", "rank", (json_int_t)1, "generation",
			 (json_int_t)1, "step", (json_int_t)1, "addr", "h:1", "checksum", "nothex"));
	assert_int_equal(H.box[1].n, 3); /* start, and two errors */
	assert_phase("training");
}

static void test_recovered_decision_is_repeated(void **state)
{
	(void)state;
	to_committing();
	restart_coordinator();
	assert_phase("committing");
	/* the workers rejoin and repeat their last status: the decided commit goes out again */
	for (int k = 0; k < 3; k++)
		join(k);
	all_staged(2, 3, 0);
	for (int k = 0; k < 3; k++)
		assert_int_equal(field(last(k, RS_MSG_COMMIT), "generation"), 2);
	for (int k = 0; k < 3; k++)
		say(k, rs_proto_make_generation(RS_MSG_COMMITTED, 2, 0, NULL));
	tick(0.01);
	assert_phase("training");
	assert_int_equal(rs_job_generation(H.job), 2);
}

static void test_recovered_undecided_attempt_commits_when_all_staged(void **state)
{
	(void)state;
	start(2);
	to_migrating(2, 3);
	restart_coordinator();
	assert_phase("migrating");
	for (int k = 0; k < 3; k++)
		join(k);
	all_staged(2, 3, 0);
	tick(0.01);
	assert_phase("committing");
}

static void test_recovered_job_aborts_what_it_did_not_decide(void **state)
{
	(void)state;
	start(2);
	restart_coordinator(); /* persisted in TRAINING: no attempt in flight */
	assert_phase("training");
	join(0);
	staged(0, 2, 1, 1, 1, 2); /* a worker staged an attempt no coordinator decided */
	assert_int_equal(field(last(0, RS_MSG_ABORT), "generation"), 2);
	assert_string_equal(json_string_value(json_object_get(last(0, RS_MSG_ABORT), "reason")), "that attempt is over");
}

/*
 * The state names the model config it was saved with: a coordinator started
 * again on it with another (here a different global batch) refuses it at
 * once, naming the section, instead of planning the old tables onto the new
 * model; the same config recovers.
 */
static void test_recovery_refuses_another_model(void **state)
{
	(void)state;
	rs_state st;
	rs_err err = {0};
	rs_job *j = NULL;
	start(2);
	char *text = json_dumps(H.state, JSON_COMPACT);
	assert_non_null(text);
	assert_int_equal(rs_state_parse(text, strlen(text), "state", &st, &err), RS_OK);
	free(text);
	assert_non_null(st.model);
	H.cfg->train.global_batch *= 2;
	assert_int_equal(rs_job_recover(&H.o, &source, &st, &j, &err), RS_EINVAL);
	assert_null(j);
	assert_non_null(strstr(err.msg, "the job was started with another model config (it differs from"));
	assert_non_null(strstr(err.msg, " in train); a changed model is a new job"));
	H.cfg->train.global_batch /= 2;
	assert_int_equal(rs_job_recover(&H.o, &source, &st, &j, &err), RS_OK);
	rs_job_destroy(j);
	rs_state_free(&st);
}

static void test_recovery_refuses_more_members_than_a_job_has(void **state)
{
	(void)state;
	rs_state st = {0};
	rs_err err = {0};
	rs_job *j = (rs_job *)&st; /* must come back NULL */
	static char *names[RS_MAX_WORKERS + 1];
	static char buf[RS_MAX_WORKERS + 1][24];
	start(1);
	char *text = json_dumps(H.state, JSON_COMPACT);
	assert_int_equal(rs_state_parse(text, strlen(text), "state", &st, &err), RS_OK);
	free(text);
	/* a union naming more workers than any job may have (the state parser bounds each list on its own) */
	for (int k = 0; k <= RS_MAX_WORKERS; k++) {
		snprintf(buf[k], sizeof(buf[k]), "worker-%d", k);
		names[k] = buf[k];
	}
	char **world = st.world;
	st.uni = names, st.nuni = RS_MAX_WORKERS + 1, st.attempt_generation = 2, st.attempt_world = 1;
	st.attempt_plan = json_incref(st.plan);
	uint64_t before[NTABLES] = {0};
	int32_t uoo[1] = {0};
	st.before = before, st.nbefore = NTABLES, st.union_of_old = uoo;
	assert_int_equal(rs_job_recover(&H.o, &source, &st, &j, &err), RS_EINVAL);
	assert_null(j);
	char want[64];
	snprintf(want, sizeof(want), "more than %d workers", RS_MAX_WORKERS);
	assert_non_null(strstr(err.msg, want));
	st.uni = NULL, st.nuni = 0, st.before = NULL, st.union_of_old = NULL, st.world = world;
	rs_state_free(&st);
}

/* Both workers of generation 1 say they train, listening for a pre-copy. */
static void training_with_addr(void)
{
	for (int k = 0; k < 2; k++) {
		char addr[32];
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", 3000 + k);
		say(k, rs_proto_make_training(1, 0, addr));
	}
}

/* Once the change is ready (a tenth of the debounce, nobody pending): member k's start, of generation gen. */
static json_t *started(int k, int64_t gen)
{
	tick(0.05);
	tick(0.2);
	json_t *s = last(k, RS_MSG_START);
	assert_non_null(s);
	assert_int_equal(field(s, "generation"), gen);
	return s;
}

/* Pre-copy on, 2 workers training; a third joins: generation 2 is pre-copied while they train. */
static void precopy_2_to_3(void)
{
	H.cfg->cluster.precopy = 1;
	start(2);
	training_with_addr();
	H.replicas = 3;
	join(2);
	assert_true(json_is_true(json_object_get(started(2, 2), "precopy")));
	assert_phase("training");
}

/*
 * A coordinator restarted during a pre-copy (never persisted as an attempt)
 * tells the members that rejoin to drop it, and does not hand its
 * generation out again.
 */
static void test_restart_during_precopy_never_reuses_its_generation(void **state)
{
	(void)state;
	precopy_2_to_3();
	restart_coordinator(); /* from the state saved as the pre-copy began */
	forget_mail();
	for (int k = 0; k < 3; k++) { /* each rejoining member is told to drop the copy the last coordinator began */
		join(k);
		json_t *a = last(k, RS_MSG_ABORT);
		assert_non_null(a);
		assert_int_equal(field(a, "generation"), 2);
	}
	training_with_addr();
	started(2, 3);
}

/*
 * A pre-copy called off because the membership changed again is no failed
 * attempt: the next change is pre-copied too, and --max-attempts counts
 * nothing. A lost joiner's call-off is one: the retry moves at the pause.
 */
static void test_precopy_called_off_by_a_change_is_no_failure(void **state)
{
	(void)state;
	precopy_2_to_3();
	H.replicas = 4; /* another worker comes while generation 2 is copied */
	join(3);
	tick(0.05);
	assert_true(reported("generation 2 aborted: the membership changed during the pre-copy"));
	for (int k = 0; k < 3; k++)
		assert_int_equal(field(last(k, RS_MSG_ABORT), "generation"), 2);
	say(2, rs_proto_make_idle("127.0.0.1:2002")); /* the joiner drops its copy */
	forget_mail();
	/* pre-copied again, the old world training */
	assert_true(json_is_true(json_object_get(started(3, 3), "precopy")));
	assert_phase("training");
	/* a joiner lost during this copy fails it: the retry is at the pause */
	rs_job_exited(H.job, "worker-3", NULL, 1, "killed by signal 9");
	tick(0.05);
	assert_true(reported("generation 3 aborted: worker-3 (joining) was lost during the pre-copy"));
	say(2, rs_proto_make_idle("127.0.0.1:2002"));
	forget_mail();
	rejoin_new(3); /* started again */
	tick(0.05);
	tick(0.2);
	assert_null(last(3, RS_MSG_START)); /* not while the world trains: */
	for (int k = 0; k < 2; k++)
		assert_non_null(last(k, RS_MSG_PAUSE)); /* first the pause */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_checkpoint_save_does_not_wait_for_the_api, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_checkpoint_completes_after_a_newer_one, setup, teardown),
		cmocka_unit_test_setup_teardown(test_workers_that_never_join_fail_the_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovery_refuses_another_model, setup, teardown),
		cmocka_unit_test_setup_teardown(test_grow_commits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_first_step_before_the_last_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pause_counts_from_the_first_stop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_done_before_the_last_commit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leave_drains_and_exits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort_when_a_member_fails_to_stage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort_on_checksum_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort_when_a_joiner_is_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_late_report_is_not_a_refusal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_joiners_late_idle_is_not_a_refusal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_report_after_the_answer_is_a_refusal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_report_after_a_rejoin_is_a_refusal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort_on_staging_timeout_then_give_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commit_timeout_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_aborting_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_worker_left_while_paused_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resume_when_nothing_changes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_2d_growth_waits_for_whole_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(test_schedule_scales_at_its_step, setup, teardown),
		cmocka_unit_test_setup_teardown(test_done, setup, teardown),
		cmocka_unit_test_setup_teardown(test_done_is_not_reported_unless_persisted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scale_while_starting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_starting_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_persist_failure_fails_the_job, setup, teardown),
		cmocka_unit_test_setup_teardown(test_messages_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovered_decision_is_repeated, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovered_undecided_attempt_commits_when_all_staged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovered_job_aborts_what_it_did_not_decide, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recovery_refuses_more_members_than_a_job_has, setup, teardown),
		cmocka_unit_test_setup_teardown(test_restart_during_precopy_never_reuses_its_generation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_precopy_called_off_by_a_change_is_no_failure, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
