/*
 * test_agent.c - tests worker/agent.c (and its link, worker/link.c)
 * without a coordinator process, on a world of one rank in this process
 * (tests/unit/agent_harness.h: a fake coordinator connection and the real
 * trainer; test_agent_pair.c has the worlds of two ranks):
 *
 *   - a fresh start trains to the end: training, progress (with AUC when
 *     evaluated), the checkpoint, done;
 *   - pause at a step boundary -> paused with the checksum, on a new
 *     address; resume -> done; stop while training and while paused;
 *   - stage a reshard -> staged with counters; abort -> paused with the
 *     old model (the same checksum); a stale abort is ignored; stage
 *     again, commit -> training the new generation to done;
 *   - messages out of place are errors that say why: a commit of a
 *     generation not staged, a resume of another generation or before
 *     any start, a malformed start, a second fresh start; an unknown
 *     message is ignored;
 *   - the coordinator lost while paused and back within the grace period:
 *     the agent rejoins on its current address and repeats "paused"; lost
 *     while training: training goes on, and the rejoin repeats "training";
 *     away past the grace period, or refusing the rejoin: the agent ends
 *     with an error saying so;
 *   - an abort of the generation in training (a member lost elsewhere):
 *     idle on a new address; a later fresh start trains to the end;
 *   - SIGTERM (the leave flag) with no rows: leave and end at once; while
 *     training: one leave request, repeated after a rejoin, training goes
 *     on;
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/log.h"
#include "tests/unit/agent_harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- one rank: start, train, pause, resume, stop ---------------------------------------- */

static char ckpt[128];

static void react_train_to_done(fake *f, json_t *m)
{
	if (rs_proto_kind(m) == RS_MSG_JOIN && f->joins == 1) {
		start_spec s = {.generation = 1, .world = 1, .steps = 12, .last = 1, .plan = AF.p1, .peers = {jstr(m, "addr")},
				.npeers = 1, .eval_every = 5, .eval_samples = 300, .save = ckpt};
		fake_say(f, msg_start(&s));
	}
}

static void test_fresh_start_trains_to_done(void **state)
{
	(void)state;
	fake f;
	snprintf(ckpt, sizeof(ckpt), "%s/ckpt", AF.dir);
	assert_int_equal(mkdir(ckpt, 0700), 0);
	outcome o = agent_run_one(&f, react_train_to_done, 3000);
	assert_agent_ended(&o, RS_AGENT_DONE);
	json_t *first = json_array_get(f.sent, 0), *last = json_array_get(f.sent, json_array_size(f.sent) - 1);
	assert_int_equal(rs_proto_kind(first), RS_MSG_TRAINING);
	assert_int_equal(jint(first, "generation"), 1);
	assert_int_equal(jint(first, "step"), 0);
	assert_int_equal(rs_proto_kind(last), RS_MSG_DONE);
	assert_int_equal(jint(last, "step"), 12);
	assert_true(f.seen[RS_MSG_PROGRESS] >= 3); /* the first step, step 9, evaluations, the last */
	int evaluated = 0;
	for (int k = 0; fake_sent(&f, RS_MSG_PROGRESS, k); k++)
		evaluated += json_object_get(fake_sent(&f, RS_MSG_PROGRESS, k), "auc") != NULL;
	assert_int_equal(evaluated, 3); /* steps 5, 10 and the last */
	assert_int_equal(f.seen[RS_MSG_PAUSED], 0);
	char index[192];
	struct stat sb;
	snprintf(index, sizeof(index), "%s/index.json", ckpt);
	assert_int_equal(stat(index, &sb), 0);
	fake_free(&f);
}

static void react_pause_resume(fake *f, json_t *m)
{
	if (fake_start_at_first_join(f, m, FOREVER, 0))
		return;
	switch (rs_proto_kind(m)) {
	case RS_MSG_PROGRESS:
		if (f->seen[RS_MSG_PROGRESS] == 1)
			fake_say(f, rs_proto_make_plain(RS_MSG_PAUSE));
		break;
	case RS_MSG_PAUSED:
		fake_say(f, rs_proto_make_plain(RS_MSG_PAUSE)); /* late: the boundary it asked for is past; ignored */
		fake_say(f, msg_resume(1, jint(m, "step") + 3, 1));
		break;
	default:
		break;
	}
}

static void test_pause_at_a_step_boundary_then_resume(void **state)
{
	(void)state;
	fake f;
	outcome o = agent_run_one(&f, react_pause_resume, 3000);
	assert_agent_ended(&o, RS_AGENT_DONE);
	assert_int_equal(f.seen[RS_MSG_PAUSED], 1);
	json_t *paused = fake_sent(&f, RS_MSG_PAUSED, 0), *done = fake_sent(&f, RS_MSG_DONE, 0);
	rs_msg_paused p;
	rs_err err = {0};
	assert_int_equal(rs_proto_paused(paused, &p, &err), RS_OK);
	assert_int_equal(p.generation, 1);
	assert_true(p.step >= 1 && p.step < 100);
	uint64_t sums[16];
	assert_non_null(p.checksum);
	assert_int_equal(rs_proto_checksums(p.checksum, sums, AF.cfg->ntables, &err), RS_OK);
	/* the first generation's socket went to its transport: the next one listens anew */
	assert_string_not_equal(p.addr, f.join_addr[0]);
	assert_int_equal(jint(done, "step"), p.step + 3);
	assert_non_null(fake_sent(&f, RS_MSG_TRAINING, 1)); /* the resume trained */
	assert_int_equal(jint(fake_sent(&f, RS_MSG_TRAINING, 1), "step"), p.step);
	fake_free(&f);
}

static void react_stop_training(fake *f, json_t *m)
{
	if (!fake_start_at_first_join(f, m, FOREVER, 1) && rs_proto_kind(m) == RS_MSG_PROGRESS && f->seen[RS_MSG_PROGRESS] == 2)
		fake_say(f, rs_proto_make_plain(RS_MSG_STOP));
}

static void react_stop_paused(fake *f, json_t *m)
{
	if (!fake_start_at_first_join(f, m, 3, 0) && rs_proto_kind(m) == RS_MSG_PAUSED)
		fake_say(f, rs_proto_make_plain(RS_MSG_STOP));
}

static void test_stop(void **state)
{
	(void)state;
	fake f;
	outcome o = agent_run_one(&f, react_stop_training, 3000);
	assert_agent_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(f.seen[RS_MSG_DONE] + f.seen[RS_MSG_PAUSED], 0);
	fake_free(&f);
	o = agent_run_one(&f, react_stop_paused, 3000);
	assert_agent_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(jint(fake_sent(&f, RS_MSG_PAUSED, 0), "step"), 3);
	fake_free(&f);
}

/* A member was lost elsewhere: an abort of the generation in training drops it; a later fresh start trains. */
static void react_drop_then_restart(fake *f, json_t *m)
{
	if (!fake_start_at_first_join(f, m, FOREVER, 1) && rs_proto_kind(m) == RS_MSG_PROGRESS && f->seen[RS_MSG_PROGRESS] == 2)
		fake_say(f, msg_generation(RS_MSG_ABORT, 1));
	if (rs_proto_kind(m) == RS_MSG_IDLE) {
		start_spec s = {.generation = 2, .world = 1, .steps = 12, .last = 1, .plan = AF.p1, .peers = {jstr(m, "addr")},
				.npeers = 1};
		fake_say(f, msg_start(&s));
	}
}

/*
 * The ready file (a readiness probe's) exists exactly while the worker holds
 * a model: in generation 1, not once the coordinator dropped it (idle), again
 * in generation 2, not after the end.
 */
static char ready[128];
static int ready_seen[3]; /* exists: at generation 1's 2nd progress, at the idle, at generation 2's 1st training */

static void react_ready(fake *f, json_t *m)
{
	int exists = access(ready, F_OK) == 0;
	if (rs_proto_kind(m) == RS_MSG_JOIN && f->joins == 1 && exists)
		fake_fail(f, "ready before it joined (a stale ready file was kept)");
	if (rs_proto_kind(m) == RS_MSG_PROGRESS && f->seen[RS_MSG_PROGRESS] == 2 && !f->seen[RS_MSG_IDLE])
		ready_seen[0] = exists;
	if (rs_proto_kind(m) == RS_MSG_IDLE)
		ready_seen[1] = exists;
	if (rs_proto_kind(m) == RS_MSG_TRAINING && f->seen[RS_MSG_IDLE])
		ready_seen[2] = exists;
	react_drop_then_restart(f, m);
}

static void test_ready_file(void **state)
{
	(void)state;
	fake f;
	snprintf(ready, sizeof(ready), "%s/ready", AF.dir);
	AF.ready_file = ready;
	FILE *stale = fopen(ready, "w"); /* left by a crashed process: not ready until it joins */
	assert_non_null(stale);
	fclose(stale);
	memset(ready_seen, 0xff, sizeof(ready_seen));
	outcome o = agent_run_one(&f, react_ready, 3000);
	AF.ready_file = NULL;
	assert_agent_ended(&o, RS_AGENT_DONE);
	assert_int_equal(ready_seen[0], 1); /* training generation 1 */
	assert_int_equal(ready_seen[1], 0); /* dropped: waiting, no model */
	assert_int_equal(ready_seen[2], 1); /* training generation 2 */
	assert_int_not_equal(access(ready, F_OK), 0); /* ended */
	fake_free(&f);
}

static void test_dropped_generation_then_a_fresh_start(void **state)
{
	(void)state;
	fake f;
	outcome o = agent_run_one(&f, react_drop_then_restart, 3000);
	assert_agent_ended(&o, RS_AGENT_DONE);
	assert_int_equal(f.seen[RS_MSG_IDLE], 1); /* it dropped generation 1 and listened anew */
	json_t *second = fake_sent(&f, RS_MSG_TRAINING, 1);
	assert_non_null(second);
	assert_int_equal(jint(second, "generation"), 2);
	assert_int_equal(jint(second, "step"), 0);
	assert_int_equal(jint(fake_sent(&f, RS_MSG_DONE, 0), "step"), 12);
	fake_free(&f);
}

/* ---- one rank: stage, abort, commit -------------------------------------------------------- */

static void react_stage_abort_commit(fake *f, json_t *m)
{
	if (fake_start_at_first_join(f, m, 3, 0))
		return;
	switch (rs_proto_kind(m)) {
	case RS_MSG_PAUSED:
		if (f->seen[RS_MSG_PAUSED] == 1) {
			fake_say(f, msg_restage(2, jstr(m, "addr"), 3, 6));
		} else {
			fake_say(f, msg_generation(RS_MSG_ABORT, 2)); /* again: already dropped, ignored */
			fake_say(f, msg_restage(3, jstr(m, "addr"), 3, 6));
		}
		break;
	case RS_MSG_STAGED:
		if (!json_is_true(json_object_get(m, "ok")))
			fake_fail(f, "staging failed");
		else if (jint(m, "generation") == 2)
			fake_say(f, msg_generation(RS_MSG_ABORT, 2));
		else
			fake_say(f, msg_generation(RS_MSG_COMMIT, 3));
		break;
	default:
		break;
	}
}

static void test_stage_abort_commit(void **state)
{
	(void)state;
	fake f;
	rs_err err = {0};
	outcome o = agent_run_one(&f, react_stage_abort_commit, 3000);
	assert_agent_ended(&o, RS_AGENT_DONE);
	assert_int_equal(f.seen[RS_MSG_STAGING], 2);
	assert_int_equal(f.seen[RS_MSG_PAUSED], 2); /* after training, after the abort; not after the stale abort */
	json_t *before = fake_sent(&f, RS_MSG_PAUSED, 0), *after = fake_sent(&f, RS_MSG_PAUSED, 1);
	assert_int_equal(jint(after, "generation"), 1);
	assert_int_equal(jint(after, "step"), 3);
	assert_true(json_equal(json_object_get(before, "checksum"), json_object_get(after, "checksum")));
	for (int k = 0; k < 2; k++) {
		rs_msg_staged s;
		assert_int_equal(rs_proto_staged(fake_sent(&f, RS_MSG_STAGED, k), &s, &err), RS_OK);
		assert_true(s.ok);
		assert_int_equal(s.generation, 2 + k);
		assert_true(s.kept_bytes > 0); /* one rank keeps every row */
		assert_int_equal(s.sent_bytes, 0);
		assert_int_equal(s.recv_bytes, 0);
		assert_true(json_equal(s.checksum, json_object_get(before, "checksum")));
	}
	json_t *committed = fake_sent(&f, RS_MSG_COMMITTED, 0), *training = fake_sent(&f, RS_MSG_TRAINING, 1);
	assert_int_equal(jint(committed, "generation"), 3);
	assert_int_equal(jint(training, "generation"), 3);
	assert_int_equal(jint(training, "step"), 3);
	assert_int_equal(jint(fake_sent(&f, RS_MSG_DONE, 0), "step"), 6);
	fake_free(&f);
}

/* ---- one rank: messages out of place ------------------------------------------------------- */

static int misplaced; /* which case react_misplaced plays */

static void react_misplaced(fake *f, json_t *m)
{
	rs_msg_type t = rs_proto_kind(m);
	if (t == RS_MSG_JOIN && f->joins == 1) {
		if (misplaced == 2)
			fake_say(f, msg_resume(1, 5, 1));
		else if (misplaced == 3)
			fake_say(f, json_pack("{s:s, s:i}", "type", "start", "generation", 1));
		else if (misplaced == 5) {
			fake_say(f, json_pack("{s:s}", "type", "bogus"));
			fake_say(f, rs_proto_make_plain(RS_MSG_STOP));
		} else
			fake_say(f, msg_fresh(jstr(m, "addr"), 2, 0));
	} else if (t == RS_MSG_PAUSED) {
		if (misplaced == 0)
			fake_say(f, msg_generation(RS_MSG_COMMIT, 5));
		else if (misplaced == 1)
			fake_say(f, msg_resume(7, 9, 1));
		else if (misplaced == 4)
			fake_say(f, msg_fresh(jstr(m, "addr"), 4, 1));
	}
}

static void test_messages_out_of_place(void **state)
{
	(void)state;
	static const struct {
		rs_status st;
		const char *says;
	} want[] = {
		{RS_EINVAL, "commit of generation 5, which is not staged here"},
		{RS_EINVAL, "resume of generation 7 to step 9: this worker is at 1/2"},
		{RS_EINVAL, "resume of generation 1 to step 5: this worker is at 0/0"},
		{RS_EINVAL, "start: "},
		{RS_EINVAL, "a fresh start of generation 1 for a worker that trains generation 1"},
		{RS_OK, NULL}, /* an unknown message is ignored; the stop after it ends the agent */
	};
	for (misplaced = 0; misplaced < (int)(sizeof(want) / sizeof(want[0])); misplaced++) {
		fake f;
		outcome o = agent_run_one(&f, react_misplaced, 3000);
		if (want[misplaced].st == RS_OK)
			assert_agent_ended(&o, RS_AGENT_STOPPED);
		else
			assert_agent_failed(&o, want[misplaced].st, want[misplaced].says);
		fake_free(&f);
	}
}

/* ---- one rank: the coordinator lost and back ---------------------------------------------- */

static void react_lost_while_paused(fake *f, json_t *m)
{
	if (fake_start_at_first_join(f, m, 2, 0) || rs_proto_kind(m) != RS_MSG_PAUSED)
		return;
	if (f->seen[RS_MSG_PAUSED] == 1)
		f->drop = 1, f->away = 2; /* gone; two rejoins find nobody, the third gets in */
	else
		fake_say(f, msg_resume(1, 4, 1));
}

static void test_coordinator_lost_while_paused_comes_back(void **state)
{
	(void)state;
	fake f;
	outcome o = agent_run_one(&f, react_lost_while_paused, 5000);
	assert_agent_ended(&o, RS_AGENT_DONE);
	assert_int_equal(f.joins, 2);
	json_t *paused = fake_sent(&f, RS_MSG_PAUSED, 0);
	/* the rejoin announces where the agent listens now; the first thing it says: the last status, again */
	assert_string_equal(f.join_addr[1], jstr(paused, "addr"));
	assert_true(json_equal(json_array_get(f.sent, f.sent_at_join[1]), paused));
	assert_int_equal(jint(fake_sent(&f, RS_MSG_DONE, 0), "step"), 4);
	fake_free(&f);
}

static int64_t dropped_at; /* the last step reported before the connection dropped */

static void react_lost_while_training(fake *f, json_t *m)
{
	if (fake_start_at_first_join(f, m, FOREVER, 1))
		return;
	switch (rs_proto_kind(m)) {
	case RS_MSG_PROGRESS:
		if (f->seen[RS_MSG_PROGRESS] == 3)
			dropped_at = jint(m, "step"), f->drop = 1, f->away = 1;
		break;
	case RS_MSG_TRAINING:
		if (f->seen[RS_MSG_TRAINING] == 2) /* repeated after the rejoin */
			fake_say(f, rs_proto_make_plain(RS_MSG_PAUSE));
		break;
	case RS_MSG_PAUSED:
		fake_say(f, rs_proto_make_plain(RS_MSG_STOP));
		break;
	default:
		break;
	}
}

static void test_coordinator_lost_while_training_comes_back(void **state)
{
	(void)state;
	fake f;
	outcome o = agent_run_one(&f, react_lost_while_training, 5000);
	assert_agent_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(f.joins, 2);
	json_t *again = json_array_get(f.sent, f.sent_at_join[1]);
	assert_true(json_equal(again, fake_sent(&f, RS_MSG_TRAINING, 0)));
	/* training went on while cut off (the rejoin came half a second later): paused well past the drop */
	print_message("dropped after step %lld, paused at %lld\n", (long long)dropped_at,
		      (long long)jint(fake_sent(&f, RS_MSG_PAUSED, 0), "step"));
	assert_true(jint(fake_sent(&f, RS_MSG_PAUSED, 0), "step") > dropped_at + 2);
	fake_free(&f);
}

/* cut off by the last step's progress report: the first rejoin finds nobody, the second gets in */
static void react_lost_before_done(fake *f, json_t *m)
{
	if (fake_start_at_first_join(f, m, 6, 1))
		return;
	if (rs_proto_kind(m) == RS_MSG_PROGRESS && jint(m, "step") == 5) /* the last step's (steps 0..5) */
		f->drop = 1, f->away = 1;
}

/*
 * A worker cut off at its last step rejoins before it exits, and says
 * "done" there: before, it exited unheard (status 0) and the coordinator
 * took it for lost, rolling the job back to its latest checkpoint.
 */
static void test_coordinator_lost_before_done_hears_it(void **state)
{
	(void)state;
	fake f;
	outcome o = agent_run_one(&f, react_lost_before_done, 3000);
	assert_agent_ended(&o, RS_AGENT_DONE);
	assert_int_equal(f.joins, 2);
	assert_int_equal(f.seen[RS_MSG_DONE], 1);
	json_t *done = fake_sent(&f, RS_MSG_DONE, 0);
	assert_int_equal(jint(done, "step"), 6);
	assert_true(json_equal(json_array_get(f.sent, f.sent_at_join[1]), done)); /* the first word on the rejoin */
	fake_free(&f);
}

/* a checkpoint every 1,000 steps; the first one's report sent, the connection drops: the first rejoin finds nobody */
static void react_lost_after_report(fake *f, json_t *m)
{
	if (rs_proto_kind(m) == RS_MSG_JOIN && f->joins == 1) {
		start_spec s = {.generation = 1, .world = 1, .steps = FOREVER, .last = 1, .plan = AF.p1,
				.peers = {jstr(m, "addr")}, .npeers = 1, .checkpoint_dir = ckpt, .checkpoint_every = 1000};
		fake_say(f, msg_start(&s));
	}
	if (rs_proto_kind(m) == RS_MSG_CHECKPOINTED && f->seen[RS_MSG_CHECKPOINTED] == 1)
		f->drop = 1, f->away = 1;
	if (rs_proto_kind(m) == RS_MSG_TRAINING && f->joins == 2) /* the rejoin's status */
		fake_say(f, rs_proto_make_plain(RS_MSG_STOP));
}

/*
 * A checkpoint's report is repeated after a rejoin, before the status: the
 * coordinator, which counts a rank's report once, may not have read it
 * before the connection dropped (its checkpoint would stay incomplete). A
 * report made while cut off (a newer checkpoint's) goes out there too.
 */
static void test_checkpoint_report_repeated_after_rejoin(void **state)
{
	(void)state;
	fake f;
	snprintf(ckpt, sizeof(ckpt), "%s/periodic", AF.dir);
	assert_int_equal(mkdir(ckpt, 0700), 0);
	outcome o = agent_run_one(&f, react_lost_after_report, 5000);
	assert_agent_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(f.joins, 2);
	json_t *first = fake_sent(&f, RS_MSG_CHECKPOINTED, 0), *again = json_array_get(f.sent, f.sent_at_join[1]);
	assert_int_equal(jint(first, "step"), 1000);
	assert_int_equal(rs_proto_kind(again), RS_MSG_CHECKPOINTED);
	/* the same report; a newer one only if the agent trained 1,000 steps while cut off (half a second) */
	print_message("reported step %lld, again after the rejoin: step %lld\n", (long long)jint(first, "step"),
		      (long long)jint(again, "step"));
	assert_true(jint(again, "step") == 1000 ? json_equal(again, first) : jint(again, "step") % 1000 == 0);
	assert_int_equal(rs_proto_kind(json_array_get(f.sent, f.sent_at_join[1] + 1)), RS_MSG_TRAINING);
	fake_free(&f);
}

static int lost_case; /* 0: away while paused, 1: away while training, 2: refused while paused, 3: refused while training */

static void react_lost_for_good(fake *f, json_t *m)
{
	rs_msg_type t = rs_proto_kind(m);
	if (fake_start_at_first_join(f, m, lost_case % 2 ? FOREVER : 2, 0))
		return;
	if ((t == RS_MSG_PAUSED && lost_case % 2 == 0) || (t == RS_MSG_PROGRESS && f->seen[t] == 1 && lost_case % 2)) {
		f->drop = 1;
		if (lost_case < 2)
			f->away = 1000000;
		else
			f->refuse = RS_EINVAL;
	}
}

static void test_coordinator_lost_for_good(void **state)
{
	(void)state;
	static const struct {
		rs_status st;
		const char *says;
	} want[] = {
		{RS_EPEER, "the coordinator at fake://coordinator stayed away for 300 ms"},
		{RS_EPEER, "the coordinator stayed away for more than 300 ms"},
		{RS_EINVAL, "refused: this worker's incarnation is unknown here"},
		{RS_EINVAL, "the coordinator refused this worker's rejoin"},
	};
	for (lost_case = 0; lost_case < 4; lost_case++) {
		fake f;
		double t0 = rs_now();
		outcome o = agent_run_one(&f, react_lost_for_good, 300);
		assert_agent_failed(&o, want[lost_case].st, want[lost_case].says);
		assert_true(rs_now() - t0 < 20);
		fake_free(&f);
	}
}

/* ---- one rank: SIGTERM -------------------------------------------------------------------- */

static void react_leave_without_rows(fake *f, json_t *m)
{
	if (rs_proto_kind(m) == RS_MSG_JOIN)
		f->leave = 1; /* before any start: this worker holds no rows */
}

static void react_leave_while_training(fake *f, json_t *m)
{
	if (fake_start_at_first_join(f, m, FOREVER, 1))
		return;
	switch (rs_proto_kind(m)) {
	case RS_MSG_PROGRESS:
		if (f->seen[RS_MSG_PROGRESS] == 2)
			f->leave = 1;
		break;
	case RS_MSG_LEAVE:
		if (f->seen[RS_MSG_LEAVE] == 1)
			f->drop = 1; /* lost: the rejoin must ask again */
		else
			fake_say(f, rs_proto_make_plain(RS_MSG_STOP));
		break;
	default:
		break;
	}
}

static void test_sigterm(void **state)
{
	(void)state;
	fake f;
	outcome o = agent_run_one(&f, react_leave_without_rows, 3000);
	assert_agent_ended(&o, RS_AGENT_NO_ROWS);
	assert_int_equal(json_array_size(f.sent), 1);
	assert_string_equal(jstr(fake_sent(&f, RS_MSG_LEAVE, 0), "reason"), "SIGTERM");
	fake_free(&f);

	o = agent_run_one(&f, react_leave_while_training, 5000);
	assert_agent_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(f.seen[RS_MSG_LEAVE], 2); /* once, and once after the rejoin */
	assert_int_equal(f.joins, 2);
	/* the rejoin repeats the status, then the leave */
	assert_int_equal(rs_proto_kind(json_array_get(f.sent, f.sent_at_join[1])), RS_MSG_TRAINING);
	assert_int_equal(rs_proto_kind(json_array_get(f.sent, f.sent_at_join[1] + 1)), RS_MSG_LEAVE);
	fake_free(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fresh_start_trains_to_done),
		cmocka_unit_test(test_pause_at_a_step_boundary_then_resume),
		cmocka_unit_test(test_stop),
		cmocka_unit_test(test_dropped_generation_then_a_fresh_start),
		cmocka_unit_test(test_ready_file),
		cmocka_unit_test(test_stage_abort_commit),
		cmocka_unit_test(test_messages_out_of_place),
		cmocka_unit_test(test_coordinator_lost_while_paused_comes_back),
		cmocka_unit_test(test_coordinator_lost_while_training_comes_back),
		cmocka_unit_test(test_coordinator_lost_before_done_hears_it),
		cmocka_unit_test(test_checkpoint_report_repeated_after_rejoin),
		cmocka_unit_test(test_coordinator_lost_for_good),
		cmocka_unit_test(test_sigterm),
	};
	return cmocka_run_group_tests(tests, agent_setup, agent_teardown);
}
