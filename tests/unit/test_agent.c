/*
 * test_agent.c - tests worker/agent.c (and its link, worker/link.c)
 * without a coordinator process: each agent talks to a fake connection
 * (rs_coord_conn) whose "coordinator" is a react function, called with
 * every message the agent sends (and a join message at every join), that
 * queues the answers. The trainer is the real one on
 * tests/data/train-model.json; a world of one rank runs in this process,
 * a world of two in two forked processes that meet through shared memory.
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
 *   - SIGTERM (the leave flag) with no rows: leave and end at once; while
 *     training: one leave request, repeated after a rejoin, training goes
 *     on;
 *   - two processes, 1 -> 2: the joiner and the old member stage, the
 *     attempt is aborted (the old member paused with its old checksum,
 *     the joiner idle), staged again and committed: the rows the old
 *     member sent are the ones the joiner received, the staged checksums
 *     add up to the old model's, a repeated commit is ignored, both train
 *     to the end;
 *   - two processes, 2 -> 1: one member gets SIGTERM mid-training, asks to
 *     leave, is drained in a reshard and ends after the commit, its rows
 *     in the survivor's model.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/planner.h"
#include "common/proto.h"
#include "tests/unit/scratch.h"
#include "worker/agent.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FOREVER 100000000 /* steps: training that only a pause or a stop ends */

static rs_config *cfg;
static rs_plan *p1, *p2; /* 1 rank; 2 ranks grown from p1 */
static rs_plan *q2, *q1; /* 2 ranks; 1 rank shrunk from q2 */
static char dir[64];

/* ---- the fake coordinator -------------------------------------------------------- */

typedef struct fake fake;

/* The coordinator's part: called with every message the agent sends, and a join at every join. */
typedef void (*react_fn)(fake *f, json_t *msg);

struct fake {
	rs_coord_conn base;
	react_fn react;
	int me;                        /* a member of a two-process world: 0 or 1 */
	int joined, joins;
	rs_status refuse;              /* non-OK: every join is refused with it */
	int away;                      /* joins that find nobody before one succeeds */
	int drop;                      /* the next receive or poll finds the connection closed */
	json_t *inbox;                 /* for the agent */
	json_t *sent;                  /* everything the agent sent, in order */
	size_t sent_at_join[8];        /* len(sent) at each join */
	char join_addr[8][64];         /* the address each join announced */
	int seen[RS_MSG_TYPE_COUNT];   /* per type, how many came so far (joins included) */
	double deadline;               /* past it, the fake refuses the agent: no test hangs */
	char failed[256];              /* what the react function found wrong */
	volatile sig_atomic_t leave;   /* the agent's SIGTERM flag */
};

static rs_status fake_join(rs_coord_conn *c, const char *addr, int timeout_ms, rs_err *err)
{
	fake *f = (fake *)c;
	(void)timeout_ms;
	if (rs_now() > f->deadline)
		return rs_err_set(err, RS_EINVAL, "the test's deadline passed");
	if (f->refuse != RS_OK)
		return rs_err_set(err, f->refuse, "refused: this worker's incarnation is unknown here");
	if (f->away > 0) {
		f->away--;
		return rs_err_set(err, RS_ETIMEDOUT, "cannot connect: nobody listens");
	}
	f->joined = 1;
	if (f->joins < 8) {
		f->sent_at_join[f->joins] = json_array_size(f->sent);
		snprintf(f->join_addr[f->joins], sizeof(f->join_addr[f->joins]), "%s", addr);
	}
	f->joins++;
	rs_msg_join j = {.worker = "w", .addr = addr, .pid = 1, .nonce = "0123456789abcdef0123456789abcdef",
			 .proof = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
	json_t *m = rs_proto_make_join(&j);
	f->seen[RS_MSG_JOIN]++;
	f->react(f, m);
	json_decref(m);
	return RS_OK;
}

static rs_status fake_send(rs_coord_conn *c, const json_t *msg)
{
	fake *f = (fake *)c;
	if (!f->joined)
		return RS_EPEER;
	json_array_append(f->sent, (json_t *)msg);
	f->seen[rs_proto_kind(msg)]++;
	f->react(f, (json_t *)msg);
	return RS_OK;
}

static rs_status fake_flush(rs_coord_conn *c, int timeout_ms)
{
	(void)timeout_ms;
	return ((fake *)c)->joined ? RS_OK : RS_EPEER;
}

/* Joined and not told to drop (nor past the deadline)? */
static int fake_up(fake *f)
{
	if (rs_now() > f->deadline && !f->failed[0]) {
		snprintf(f->failed, sizeof(f->failed), "the test's deadline passed");
		f->refuse = RS_EINVAL, f->drop = 1;
	}
	if (f->joined && f->drop)
		f->joined = f->drop = 0;
	return f->joined;
}

static rs_status fake_recv(rs_coord_conn *c, int timeout_ms, json_t **msg)
{
	fake *f = (fake *)c;
	if (!fake_up(f))
		return RS_EPEER;
	if (json_array_size(f->inbox)) {
		*msg = json_incref(json_array_get(f->inbox, 0));
		json_array_remove(f->inbox, 0);
		return RS_OK;
	}
	if (timeout_ms > 0)
		rs_sleep(0.002);
	return RS_ETIMEDOUT;
}

static rs_status fake_poll(rs_coord_conn *c) { return fake_up((fake *)c) ? RS_OK : RS_EPEER; }

static void fake_drop(rs_coord_conn *c) { ((fake *)c)->joined = 0; }

static void fake_destroy(rs_coord_conn *c) { (void)c; }

static const rs_coord_conn_ops fake_ops = {
	.join = fake_join,
	.send = fake_send,
	.flush = fake_flush,
	.recv = fake_recv,
	.poll = fake_poll,
	.drop = fake_drop,
	.destroy = fake_destroy,
};

static void fake_init(fake *f, react_fn react, int me)
{
	*f = (fake){.base = {.ops = &fake_ops, .where = "fake://coordinator"}, .react = react, .me = me,
		    .inbox = json_array(), .sent = json_array(), .deadline = rs_now() + 60};
}

static void fake_free(fake *f)
{
	json_decref(f->inbox);
	json_decref(f->sent);
}

/* Queue msg (stolen) for the agent. */
static void say(fake *f, json_t *msg)
{
	json_array_append_new(f->inbox, msg);
}

/* What the react function found wrong: the agent is refused from now on, so it ends. */
static void fake_fail(fake *f, const char *what)
{
	if (!f->failed[0])
		snprintf(f->failed, sizeof(f->failed), "%s", what);
	f->refuse = RS_EINVAL, f->drop = 1;
}

/* The k-th (0-based) message of type t the agent sent, or NULL: borrowed. */
static json_t *sent_nth(const fake *f, rs_msg_type t, int k)
{
	size_t i;
	json_t *m;
	json_array_foreach(f->sent, i, m)
		if (rs_proto_kind(m) == t && k-- == 0)
			return m;
	return NULL;
}

static int64_t jint(const json_t *m, const char *key) { return json_integer_value(json_object_get(m, key)); }
static const char *jstr(const json_t *m, const char *key) { return json_string_value(json_object_get(m, key)); }

/* ---- the coordinator's messages ---------------------------------------------------- */

typedef struct start_spec {
	int64_t generation, rank, world, first_step, steps;
	int last;
	const rs_plan *plan, *prev;  /* prev: a reshard from prev */
	const char *peers[2];
	int npeers;                  /* the union's size */
	int32_t union_of_old[2];     /* a reshard: per old rank, its union rank */
	int64_t eval_every, eval_samples;
	const char *save;
} start_spec;

static json_t *start_msg(const start_spec *s)
{
	json_t *peers = json_array(), *plan = rs_plan_to_json(s->plan), *prev = NULL, *uoo = NULL;
	for (int i = 0; i < s->npeers; i++)
		json_array_append_new(peers, json_string(s->peers[i]));
	if (s->prev) {
		prev = rs_plan_to_json(s->prev);
		uoo = json_array();
		for (int32_t r = 0; r < s->prev->world.ranks; r++)
			json_array_append_new(uoo, json_integer(s->union_of_old[r]));
	}
	rs_msg_start m = {.generation = s->generation, .rank = s->rank, .world = s->world, .first_step = s->first_step,
			  .steps = s->steps, .eval_every = s->eval_every, .eval_samples = s->eval_samples,
			  .union_world = s->npeers, .peers = peers, .plan = plan, .previous_plan = prev, .union_of_old = uoo,
			  .save = s->save, .last = s->last};
	json_t *j = rs_proto_make_start(&m);
	json_decref(peers);
	json_decref(plan);
	json_decref(prev);
	json_decref(uoo);
	return j;
}

/* A fresh start of generation 1 on a world of one rank listening on addr. */
static json_t *fresh(const char *addr, int64_t steps, int last)
{
	start_spec s = {.generation = 1, .world = 1, .steps = steps, .last = last, .plan = p1, .peers = {addr}, .npeers = 1};
	return start_msg(&s);
}

/* At the first join (m), a fresh start of `steps` steps on the address it announced. 1 when m was a join. */
static int start_at_first_join(fake *f, json_t *m, int64_t steps, int last)
{
	if (rs_proto_kind(m) != RS_MSG_JOIN)
		return 0;
	if (f->joins == 1)
		say(f, fresh(jstr(m, "addr"), steps, last));
	return 1;
}

/* A reshard of the world of one rank to itself (the same plan: every row kept) as generation gen. */
static json_t *restage(int64_t gen, const char *addr, int64_t first, int64_t steps)
{
	start_spec s = {.generation = gen, .world = 1, .first_step = first, .steps = steps, .last = 1, .plan = p1,
			.prev = p1, .peers = {addr}, .npeers = 1};
	return start_msg(&s);
}

static json_t *resume(int64_t gen, int64_t steps, int last)
{
	rs_msg_resume r = {gen, steps, last};
	return rs_proto_make_resume(&r);
}

static json_t *gen_msg(rs_msg_type t, int64_t gen) { return rs_proto_make_generation(t, gen, 0, "a test abort"); }

/* ---- running an agent ---------------------------------------------------------------- */

typedef struct outcome {
	rs_status st;
	rs_agent_end end;
	rs_err err;
} outcome;

/* Create an agent over f, run it to its end, destroy it. */
static outcome run_agent(fake *f, int grace_ms)
{
	rs_agent_config c = {.cfg = cfg, .conn = &f->base, .host = "127.0.0.1", .token = "t", .timeout_ms = 10000,
			     .grace_ms = grace_ms, .leave = &f->leave};
	rs_agent *a;
	outcome o = {.end = -1};
	o.st = rs_agent_create(&c, &a, &o.err);
	if (o.st == RS_OK) {
		o.st = rs_agent_run(a, &o.end, &o.err);
		rs_agent_destroy(a);
	}
	return o;
}

/* Run an agent in this process with react as its coordinator; the fake's findings fail the test. */
static outcome run_one(fake *f, react_fn react, int grace_ms)
{
	fake_init(f, react, 0);
	outcome o = run_agent(f, grace_ms);
	if (f->failed[0])
		fail_msg("the fake coordinator: %s (the agent: %s)", f->failed, o.err.msg);
	return o;
}

static void assert_ended(const outcome *o, rs_agent_end end)
{
	if (o->st != RS_OK)
		fail_msg("the agent failed: %s: %s", rs_status_str(o->st), o->err.msg);
	assert_int_equal(o->end, end);
}

static void assert_failed(const outcome *o, rs_status st, const char *says)
{
	assert_int_equal(o->st, st);
	if (!strstr(o->err.msg, says))
		fail_msg("the agent's error '%s' does not say '%s'", o->err.msg, says);
}

/* ---- set-up ---------------------------------------------------------------------------- */

static int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	int32_t grow[1], shrink[2];
	rs_log_init("test-agent", RS_LOG_WARN);
	if (rs_scratch_make(dir, sizeof(dir), "agent") != 0 || rs_config_load("tests/data/train-model.json", &cfg, &err))
		return -1;
	rs_world w1 = rs_world_make(cfg, 1, 0, 0, 0), w2 = rs_world_make(cfg, 2, 0, 0, 0);
	if (rs_planner_plan(cfg, &w1, NULL, NULL, &p1, &err) != RS_OK ||
	    rs_planner_rank_map(1, 2, NULL, 0, grow, &err) != RS_OK ||
	    rs_planner_plan(cfg, &w2, p1, grow, &p2, &err) != RS_OK ||
	    rs_planner_plan(cfg, &w2, NULL, NULL, &q2, &err) != RS_OK ||
	    rs_planner_rank_map(2, 1, NULL, 0, shrink, &err) != RS_OK ||
	    rs_planner_plan(cfg, &w1, q2, shrink, &q1, &err) != RS_OK) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rs_plan_free(p1);
	rs_plan_free(p2);
	rs_plan_free(q1);
	rs_plan_free(q2);
	rs_config_free(cfg);
	return rs_scratch_remove(dir);
}

/* ---- one rank: start, train, pause, resume, stop ---------------------------------------- */

static char ckpt[128];

static void react_train_to_done(fake *f, json_t *m)
{
	if (rs_proto_kind(m) == RS_MSG_JOIN && f->joins == 1) {
		start_spec s = {.generation = 1, .world = 1, .steps = 12, .last = 1, .plan = p1, .peers = {jstr(m, "addr")},
				.npeers = 1, .eval_every = 5, .eval_samples = 300, .save = ckpt};
		say(f, start_msg(&s));
	}
}

static void test_fresh_start_trains_to_done(void **state)
{
	(void)state;
	fake f;
	snprintf(ckpt, sizeof(ckpt), "%s/ckpt", dir);
	assert_int_equal(mkdir(ckpt, 0700), 0);
	outcome o = run_one(&f, react_train_to_done, 3000);
	assert_ended(&o, RS_AGENT_DONE);
	json_t *first = json_array_get(f.sent, 0), *last = json_array_get(f.sent, json_array_size(f.sent) - 1);
	assert_int_equal(rs_proto_kind(first), RS_MSG_TRAINING);
	assert_int_equal(jint(first, "generation"), 1);
	assert_int_equal(jint(first, "step"), 0);
	assert_int_equal(rs_proto_kind(last), RS_MSG_DONE);
	assert_int_equal(jint(last, "step"), 12);
	assert_true(f.seen[RS_MSG_PROGRESS] >= 3); /* the first step, step 9, evaluations, the last */
	int evaluated = 0;
	for (int k = 0; sent_nth(&f, RS_MSG_PROGRESS, k); k++)
		evaluated += json_object_get(sent_nth(&f, RS_MSG_PROGRESS, k), "auc") != NULL;
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
	if (start_at_first_join(f, m, FOREVER, 0))
		return;
	switch (rs_proto_kind(m)) {
	case RS_MSG_PROGRESS:
		if (f->seen[RS_MSG_PROGRESS] == 1)
			say(f, rs_proto_make_plain(RS_MSG_PAUSE));
		break;
	case RS_MSG_PAUSED:
		say(f, rs_proto_make_plain(RS_MSG_PAUSE)); /* late: the boundary it asked for is past; ignored */
		say(f, resume(1, jint(m, "step") + 3, 1));
		break;
	default:
		break;
	}
}

static void test_pause_at_a_step_boundary_then_resume(void **state)
{
	(void)state;
	fake f;
	outcome o = run_one(&f, react_pause_resume, 3000);
	assert_ended(&o, RS_AGENT_DONE);
	assert_int_equal(f.seen[RS_MSG_PAUSED], 1);
	json_t *paused = sent_nth(&f, RS_MSG_PAUSED, 0), *done = sent_nth(&f, RS_MSG_DONE, 0);
	rs_msg_paused p;
	rs_err err = {0};
	assert_int_equal(rs_proto_paused(paused, &p, &err), RS_OK);
	assert_int_equal(p.generation, 1);
	assert_true(p.step >= 1 && p.step < 100);
	uint64_t sums[16];
	assert_non_null(p.checksum);
	assert_int_equal(rs_proto_checksums(p.checksum, sums, cfg->ntables, &err), RS_OK);
	/* the first generation's socket went to its transport: the next one listens anew */
	assert_string_not_equal(p.addr, f.join_addr[0]);
	assert_int_equal(jint(done, "step"), p.step + 3);
	assert_non_null(sent_nth(&f, RS_MSG_TRAINING, 1)); /* the resume trained */
	assert_int_equal(jint(sent_nth(&f, RS_MSG_TRAINING, 1), "step"), p.step);
	fake_free(&f);
}

static void react_stop_training(fake *f, json_t *m)
{
	if (!start_at_first_join(f, m, FOREVER, 1) && rs_proto_kind(m) == RS_MSG_PROGRESS && f->seen[RS_MSG_PROGRESS] == 2)
		say(f, rs_proto_make_plain(RS_MSG_STOP));
}

static void react_stop_paused(fake *f, json_t *m)
{
	if (!start_at_first_join(f, m, 3, 0) && rs_proto_kind(m) == RS_MSG_PAUSED)
		say(f, rs_proto_make_plain(RS_MSG_STOP));
}

static void test_stop(void **state)
{
	(void)state;
	fake f;
	outcome o = run_one(&f, react_stop_training, 3000);
	assert_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(f.seen[RS_MSG_DONE] + f.seen[RS_MSG_PAUSED], 0);
	fake_free(&f);
	o = run_one(&f, react_stop_paused, 3000);
	assert_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(jint(sent_nth(&f, RS_MSG_PAUSED, 0), "step"), 3);
	fake_free(&f);
}

/* ---- one rank: stage, abort, commit -------------------------------------------------------- */

static void react_stage_abort_commit(fake *f, json_t *m)
{
	if (start_at_first_join(f, m, 3, 0))
		return;
	switch (rs_proto_kind(m)) {
	case RS_MSG_PAUSED:
		if (f->seen[RS_MSG_PAUSED] == 1) {
			say(f, restage(2, jstr(m, "addr"), 3, 6));
		} else {
			say(f, gen_msg(RS_MSG_ABORT, 2)); /* again: already dropped, ignored */
			say(f, restage(3, jstr(m, "addr"), 3, 6));
		}
		break;
	case RS_MSG_STAGED:
		if (!json_is_true(json_object_get(m, "ok")))
			fake_fail(f, "staging failed");
		else if (jint(m, "generation") == 2)
			say(f, gen_msg(RS_MSG_ABORT, 2));
		else
			say(f, gen_msg(RS_MSG_COMMIT, 3));
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
	outcome o = run_one(&f, react_stage_abort_commit, 3000);
	assert_ended(&o, RS_AGENT_DONE);
	assert_int_equal(f.seen[RS_MSG_STAGING], 2);
	assert_int_equal(f.seen[RS_MSG_PAUSED], 2); /* after training, after the abort; not after the stale abort */
	json_t *before = sent_nth(&f, RS_MSG_PAUSED, 0), *after = sent_nth(&f, RS_MSG_PAUSED, 1);
	assert_int_equal(jint(after, "generation"), 1);
	assert_int_equal(jint(after, "step"), 3);
	assert_true(json_equal(json_object_get(before, "checksum"), json_object_get(after, "checksum")));
	for (int k = 0; k < 2; k++) {
		rs_msg_staged s;
		assert_int_equal(rs_proto_staged(sent_nth(&f, RS_MSG_STAGED, k), &s, &err), RS_OK);
		assert_true(s.ok);
		assert_int_equal(s.generation, 2 + k);
		assert_true(s.kept_bytes > 0); /* one rank keeps every row */
		assert_int_equal(s.sent_bytes, 0);
		assert_int_equal(s.recv_bytes, 0);
		assert_true(json_equal(s.checksum, json_object_get(before, "checksum")));
	}
	json_t *committed = sent_nth(&f, RS_MSG_COMMITTED, 0), *training = sent_nth(&f, RS_MSG_TRAINING, 1);
	assert_int_equal(jint(committed, "generation"), 3);
	assert_int_equal(jint(training, "generation"), 3);
	assert_int_equal(jint(training, "step"), 3);
	assert_int_equal(jint(sent_nth(&f, RS_MSG_DONE, 0), "step"), 6);
	fake_free(&f);
}

/* ---- one rank: messages out of place ------------------------------------------------------- */

static int misplaced; /* which case react_misplaced plays */

static void react_misplaced(fake *f, json_t *m)
{
	rs_msg_type t = rs_proto_kind(m);
	if (t == RS_MSG_JOIN && f->joins == 1) {
		if (misplaced == 2)
			say(f, resume(1, 5, 1));
		else if (misplaced == 3)
			say(f, json_pack("{s:s, s:i}", "type", "start", "generation", 1));
		else if (misplaced == 5) {
			say(f, json_pack("{s:s}", "type", "bogus"));
			say(f, rs_proto_make_plain(RS_MSG_STOP));
		} else
			say(f, fresh(jstr(m, "addr"), 2, 0));
	} else if (t == RS_MSG_PAUSED) {
		if (misplaced == 0)
			say(f, gen_msg(RS_MSG_COMMIT, 5));
		else if (misplaced == 1)
			say(f, resume(7, 9, 1));
		else if (misplaced == 4)
			say(f, fresh(jstr(m, "addr"), 4, 1));
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
		{RS_EINVAL, "a fresh start for a worker that already trains generation 1"},
		{RS_OK, NULL}, /* an unknown message is ignored; the stop after it ends the agent */
	};
	for (misplaced = 0; misplaced < (int)(sizeof(want) / sizeof(want[0])); misplaced++) {
		fake f;
		outcome o = run_one(&f, react_misplaced, 3000);
		if (want[misplaced].st == RS_OK)
			assert_ended(&o, RS_AGENT_STOPPED);
		else
			assert_failed(&o, want[misplaced].st, want[misplaced].says);
		fake_free(&f);
	}
}

/* ---- one rank: the coordinator lost and back ---------------------------------------------- */

static void react_lost_while_paused(fake *f, json_t *m)
{
	if (start_at_first_join(f, m, 2, 0) || rs_proto_kind(m) != RS_MSG_PAUSED)
		return;
	if (f->seen[RS_MSG_PAUSED] == 1)
		f->drop = 1, f->away = 2; /* gone; two rejoins find nobody, the third gets in */
	else
		say(f, resume(1, 4, 1));
}

static void test_coordinator_lost_while_paused_comes_back(void **state)
{
	(void)state;
	fake f;
	outcome o = run_one(&f, react_lost_while_paused, 5000);
	assert_ended(&o, RS_AGENT_DONE);
	assert_int_equal(f.joins, 2);
	json_t *paused = sent_nth(&f, RS_MSG_PAUSED, 0);
	/* the rejoin announces where the agent listens now; the first thing it says: the last status, again */
	assert_string_equal(f.join_addr[1], jstr(paused, "addr"));
	assert_true(json_equal(json_array_get(f.sent, f.sent_at_join[1]), paused));
	assert_int_equal(jint(sent_nth(&f, RS_MSG_DONE, 0), "step"), 4);
	fake_free(&f);
}

static int64_t dropped_at; /* the last step reported before the connection dropped */

static void react_lost_while_training(fake *f, json_t *m)
{
	if (start_at_first_join(f, m, FOREVER, 1))
		return;
	switch (rs_proto_kind(m)) {
	case RS_MSG_PROGRESS:
		if (f->seen[RS_MSG_PROGRESS] == 3)
			dropped_at = jint(m, "step"), f->drop = 1, f->away = 1;
		break;
	case RS_MSG_TRAINING:
		if (f->seen[RS_MSG_TRAINING] == 2) /* repeated after the rejoin */
			say(f, rs_proto_make_plain(RS_MSG_PAUSE));
		break;
	case RS_MSG_PAUSED:
		say(f, rs_proto_make_plain(RS_MSG_STOP));
		break;
	default:
		break;
	}
}

static void test_coordinator_lost_while_training_comes_back(void **state)
{
	(void)state;
	fake f;
	outcome o = run_one(&f, react_lost_while_training, 5000);
	assert_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(f.joins, 2);
	json_t *again = json_array_get(f.sent, f.sent_at_join[1]);
	assert_true(json_equal(again, sent_nth(&f, RS_MSG_TRAINING, 0)));
	/* training went on while cut off (the rejoin came half a second later): paused well past the drop */
	print_message("dropped after step %lld, paused at %lld\n", (long long)dropped_at,
		      (long long)jint(sent_nth(&f, RS_MSG_PAUSED, 0), "step"));
	assert_true(jint(sent_nth(&f, RS_MSG_PAUSED, 0), "step") > dropped_at + 2);
	fake_free(&f);
}

static int lost_case; /* 0: away while paused, 1: away while training, 2: refused while paused, 3: refused while training */

static void react_lost_for_good(fake *f, json_t *m)
{
	rs_msg_type t = rs_proto_kind(m);
	if (start_at_first_join(f, m, lost_case % 2 ? FOREVER : 2, 0))
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
		outcome o = run_one(&f, react_lost_for_good, 300);
		assert_failed(&o, want[lost_case].st, want[lost_case].says);
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
	if (start_at_first_join(f, m, FOREVER, 1))
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
			say(f, rs_proto_make_plain(RS_MSG_STOP));
		break;
	default:
		break;
	}
}

static void test_sigterm(void **state)
{
	(void)state;
	fake f;
	outcome o = run_one(&f, react_leave_without_rows, 3000);
	assert_ended(&o, RS_AGENT_NO_ROWS);
	assert_int_equal(json_array_size(f.sent), 1);
	assert_string_equal(jstr(sent_nth(&f, RS_MSG_LEAVE, 0), "reason"), "SIGTERM");
	fake_free(&f);

	o = run_one(&f, react_leave_while_training, 5000);
	assert_ended(&o, RS_AGENT_STOPPED);
	assert_int_equal(f.seen[RS_MSG_LEAVE], 2); /* once, and once after the rejoin */
	assert_int_equal(f.joins, 2);
	/* the rejoin repeats the status, then the leave */
	assert_int_equal(rs_proto_kind(json_array_get(f.sent, f.sent_at_join[1])), RS_MSG_TRAINING);
	assert_int_equal(rs_proto_kind(json_array_get(f.sent, f.sent_at_join[1] + 1)), RS_MSG_LEAVE);
	fake_free(&f);
}

/* ---- two ranks, two processes ----------------------------------------------------------------- */

enum { S_READY1, S_STAGED1, S_READY2, S_STAGED2, S_PAUSED, S_END, NSLOT };

/* What the two members tell each other (and the parent): per member, per slot, a message as JSON text. */
typedef struct shared {
	volatile int set[2][NSLOT];
	char note[2][NSLOT][2048];
} shared;

static shared *sh;

static void publish(int me, int slot, const json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	snprintf(sh->note[me][slot], sizeof(sh->note[me][slot]), "%s", text ? text : "null");
	free(text);
	__sync_synchronize();
	sh->set[me][slot] = 1;
}

/* The other member's note (a new reference), waiting for it; NULL when it never came. */
static json_t *await_note(int who, int slot)
{
	for (double until = rs_now() + 30; !sh->set[who][slot]; rs_sleep(0.002))
		if (rs_now() > until)
			return NULL;
	__sync_synchronize();
	return json_loads(sh->note[who][slot], 0, NULL);
}

/* Publish msg as mine, wait for the other's note in the same slot: its "addr" into peers[other]. */
static json_t *meet(fake *f, int slot, json_t *msg, const char **peers)
{
	publish(f->me, slot, msg);
	json_t *theirs = await_note(1 - f->me, slot);
	if (!theirs) {
		fake_fail(f, "the other member never came");
		return NULL;
	}
	peers[f->me] = jstr(msg, "addr");
	peers[1 - f->me] = jstr(theirs, "addr");
	return theirs;
}

/* Both members staged: the next word to both is the same (abort or commit of gen). */
static void after_staged(fake *f, json_t *m, int slot, rs_msg_type next)
{
	publish(f->me, slot, m);
	json_t *theirs = await_note(1 - f->me, slot);
	if (!theirs || !json_is_true(json_object_get(m, "ok")) || !json_is_true(json_object_get(theirs, "ok")))
		fake_fail(f, "a member did not stage");
	else
		say(f, gen_msg(next, jint(m, "generation")));
	json_decref(theirs);
}

/* Start generation gen of the 1 -> 2 growth: member 0 keeps its rows, member 1 joins. */
static void start_growth(fake *f, int64_t gen, const char **peers)
{
	start_spec s = {.generation = gen, .rank = f->me, .world = 2, .first_step = 4, .steps = 8, .last = 0, .plan = p2,
			.prev = p1, .peers = {peers[0], peers[1]}, .npeers = 2, .union_of_old = {0}};
	say(f, start_msg(&s));
}

static void react_growth(fake *f, json_t *m)
{
	const char *peers[2];
	json_t *theirs = NULL;
	switch (rs_proto_kind(m)) {
	case RS_MSG_JOIN:
		if (f->me == 0) /* the old member trains alone first */
			say(f, fresh(jstr(m, "addr"), 4, 0));
		else if ((theirs = meet(f, S_READY1, m, peers)))
			start_growth(f, 2, peers);
		break;
	case RS_MSG_PAUSED:
		if (jint(m, "generation") == 3) { /* both trained the committed generation to step 8 */
			say(f, gen_msg(RS_MSG_COMMIT, 3)); /* a restarted coordinator repeating itself: ignored */
			say(f, resume(3, 10, 1));
		} else if (f->seen[RS_MSG_PAUSED] == 1 && (theirs = meet(f, S_READY1, m, peers))) {
			publish(0, S_PAUSED, m); /* the old member, alone at step 4 */
			start_growth(f, 2, peers);
		} else if (f->seen[RS_MSG_PAUSED] == 2 && (theirs = meet(f, S_READY2, m, peers))) {
			start_growth(f, 3, peers); /* after the abort */
		}
		break;
	case RS_MSG_IDLE: /* the joiner after the abort */
		if ((theirs = meet(f, S_READY2, m, peers)))
			start_growth(f, 3, peers);
		break;
	case RS_MSG_STAGED:
		after_staged(f, m, jint(m, "generation") == 2 ? S_STAGED1 : S_STAGED2,
			     jint(m, "generation") == 2 ? RS_MSG_ABORT : RS_MSG_COMMIT);
		break;
	default:
		break;
	}
	json_decref(theirs);
}

/* Generation 1 on two ranks, both from the start; then 2 -> 1, member 1 drained (it got SIGTERM). */
static void react_shrink(fake *f, json_t *m)
{
	const char *peers[2];
	json_t *theirs = NULL;
	switch (rs_proto_kind(m)) {
	case RS_MSG_JOIN:
		if ((theirs = meet(f, S_READY1, m, peers))) {
			start_spec s = {.generation = 1, .rank = f->me, .world = 2, .steps = 4, .last = 0, .plan = q2,
					.peers = {peers[0], peers[1]}, .npeers = 2};
			say(f, start_msg(&s));
		}
		break;
	case RS_MSG_PROGRESS:
		if (f->me == 1 && f->seen[RS_MSG_PROGRESS] == 1)
			f->leave = 1;
		break;
	case RS_MSG_PAUSED:
		if ((theirs = meet(f, S_READY2, m, peers))) {
			publish(f->me, S_PAUSED, m);
			start_spec s = {.generation = 2, .rank = f->me, .world = 1, .first_step = 4, .steps = 8, .last = 1,
					.plan = q1, .prev = q2, .peers = {peers[0], peers[1]}, .npeers = 2,
					.union_of_old = {0, 1}};
			say(f, start_msg(&s));
		}
		break;
	case RS_MSG_STAGED:
		after_staged(f, m, S_STAGED1, RS_MSG_COMMIT);
		break;
	default:
		break;
	}
	json_decref(theirs);
}

/* Member me's process: an agent with react as its coordinator; its end goes into slot S_END. */
static void member(int me, react_fn react)
{
	fake f;
	fake_init(&f, react, me);
	outcome o = run_agent(&f, 5000);
	json_t *end = json_pack("{s:i, s:i, s:s, s:s, s:i}", "st", (int)o.st, "end", (int)o.end, "err", o.err.msg, "failed",
				f.failed, "leaves", f.seen[RS_MSG_LEAVE]);
	publish(me, S_END, end);
	json_decref(end);
	fake_free(&f);
}

/* Run both members in two processes; fail unless both exit and report. */
static void run_pair(react_fn react)
{
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	pid_t pid[2];
	for (int me = 0; me < 2; me++) {
		fflush(NULL);
		pid[me] = fork();
		assert_true(pid[me] >= 0);
		if (pid[me] == 0) {
			member(me, react);
			_exit(0);
		}
	}
	double until = rs_now() + 120;
	int done[2] = {0, 0}, status;
	while ((!done[0] || !done[1]) && rs_now() < until) {
		for (int me = 0; me < 2; me++)
			if (!done[me] && waitpid(pid[me], &status, WNOHANG) == pid[me])
				done[me] = 1;
		rs_sleep(0.01);
	}
	for (int me = 0; me < 2; me++)
		if (!done[me]) {
			kill(pid[me], SIGKILL);
			waitpid(pid[me], &status, 0);
		}
	if (!done[0] || !done[1])
		fail_msg("a member hung");
	for (int me = 0; me < 2; me++) {
		json_t *end = await_note(me, S_END);
		if (!end)
			fail_msg("member %d exited without an outcome", me);
		if (jstr(end, "failed")[0])
			fail_msg("member %d's fake coordinator: %s (the agent: %s)", me, jstr(end, "failed"), jstr(end, "err"));
		json_decref(end);
	}
}

static json_t *note(int who, int slot)
{
	json_t *j = sh->set[who][slot] ? json_loads(sh->note[who][slot], 0, NULL) : NULL;
	if (!j)
		fail_msg("member %d left no note in slot %d", who, slot);
	return j;
}

static void assert_member_ended(int who, rs_agent_end end)
{
	json_t *j = note(who, S_END);
	if (jint(j, "st") != RS_OK)
		fail_msg("member %d failed: %s", who, jstr(j, "err"));
	assert_int_equal(jint(j, "end"), end);
	json_decref(j);
}

/* The per-table checksums in message m's "checksum", into v. */
static void checksums_of(const json_t *m, uint64_t *v)
{
	rs_err err = {0};
	if (rs_proto_checksums(json_object_get(m, "checksum"), v, cfg->ntables, &err) != RS_OK)
		fail_msg("a checksum: %s", err.msg);
}

static void test_two_processes_grow_abort_commit(void **state)
{
	(void)state;
	run_pair(react_growth);
	assert_member_ended(0, RS_AGENT_DONE);
	assert_member_ended(1, RS_AGENT_DONE);
	json_t *paused = note(0, S_PAUSED), *after_abort = note(0, S_READY2), *idle = note(1, S_READY2);
	json_t *st[2] = {note(0, S_STAGED2), note(1, S_STAGED2)}, *first = note(0, S_STAGED1);
	/* the abort left the old member's model as it was; the joiner went back to idle */
	assert_int_equal(rs_proto_kind(after_abort), RS_MSG_PAUSED);
	assert_int_equal(jint(after_abort, "step"), 4);
	assert_true(json_equal(json_object_get(paused, "checksum"), json_object_get(after_abort, "checksum")));
	assert_int_equal(rs_proto_kind(idle), RS_MSG_IDLE);
	assert_true(json_is_true(json_object_get(first, "ok")));
	/* what the old member sent is what the joiner received; the staged models add up to the old one */
	assert_true(jint(st[0], "sent_bytes") > 0);
	assert_true(jint(st[0], "kept_bytes") > 0);
	assert_int_equal(jint(st[0], "sent_bytes"), jint(st[1], "recv_bytes"));
	assert_int_equal(jint(st[1], "sent_bytes"), 0);
	uint64_t old[16], a[16], b[16];
	checksums_of(paused, old);
	checksums_of(st[0], a);
	checksums_of(st[1], b);
	for (int t = 0; t < cfg->ntables; t++)
		assert_true(a[t] + b[t] == old[t]);
	json_decref(paused);
	json_decref(after_abort);
	json_decref(idle);
	json_decref(st[0]);
	json_decref(st[1]);
	json_decref(first);
	munmap(sh, sizeof(*sh));
}

static void test_two_processes_shrink_drains_the_leaver(void **state)
{
	(void)state;
	run_pair(react_shrink);
	assert_member_ended(0, RS_AGENT_DONE);
	assert_member_ended(1, RS_AGENT_LEFT);
	json_t *end = note(1, S_END);
	assert_int_equal(jint(end, "leaves"), 1); /* SIGTERM mid-training: asked once */
	json_decref(end);
	json_t *pa = note(0, S_PAUSED), *pb = note(1, S_PAUSED), *sa = note(0, S_STAGED1), *sb = note(1, S_STAGED1);
	assert_null(json_object_get(sb, "checksum")); /* the leaver holds nothing in the new world */
	assert_true(jint(sb, "sent_bytes") > 0);
	uint64_t a[16], b[16], now[16];
	checksums_of(pa, a);
	checksums_of(pb, b);
	checksums_of(sa, now);
	for (int t = 0; t < cfg->ntables; t++)
		assert_true(now[t] == a[t] + b[t]);
	json_decref(pa);
	json_decref(pb);
	json_decref(sa);
	json_decref(sb);
	munmap(sh, sizeof(*sh));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fresh_start_trains_to_done),
		cmocka_unit_test(test_pause_at_a_step_boundary_then_resume),
		cmocka_unit_test(test_stop),
		cmocka_unit_test(test_stage_abort_commit),
		cmocka_unit_test(test_messages_out_of_place),
		cmocka_unit_test(test_coordinator_lost_while_paused_comes_back),
		cmocka_unit_test(test_coordinator_lost_while_training_comes_back),
		cmocka_unit_test(test_coordinator_lost_for_good),
		cmocka_unit_test(test_sigterm),
		cmocka_unit_test(test_two_processes_grow_abort_commit),
		cmocka_unit_test(test_two_processes_shrink_drains_the_leaver),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
