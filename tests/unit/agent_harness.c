/*
 * agent_harness.c - the agent tests' fake coordinator, the coordinator's
 * messages and running an agent (tests/unit/agent_harness.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/log.h"
#include "tests/unit/agent_harness.h"
#include "tests/unit/scratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

agent_fixture AF;

/* ---- the fake coordinator -------------------------------------------------------- */


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

void fake_init(fake *f, react_fn react, int me)
{
	*f = (fake){.base = {.ops = &fake_ops, .where = "fake://coordinator"}, .react = react, .me = me,
		    .inbox = json_array(), .sent = json_array(), .deadline = rs_now() + 60};
}

void fake_free(fake *f)
{
	json_decref(f->inbox);
	json_decref(f->sent);
}

/* Queue msg (stolen) for the agent. */
void fake_say(fake *f, json_t *msg)
{
	json_array_append_new(f->inbox, msg);
}

/* What the react function found wrong: the agent is refused from now on, so it ends. */
void fake_fail(fake *f, const char *what)
{
	if (!f->failed[0])
		snprintf(f->failed, sizeof(f->failed), "%s", what);
	f->refuse = RS_EINVAL, f->drop = 1;
}

/* The k-th (0-based) message of type t the agent sent, or NULL: borrowed. */
json_t *fake_sent(const fake *f, rs_msg_type t, int k)
{
	size_t i;
	json_t *m;
	json_array_foreach(f->sent, i, m)
		if (rs_proto_kind(m) == t && k-- == 0)
			return m;
	return NULL;
}


/* ---- the coordinator's messages ---------------------------------------------------- */


json_t *msg_start(const start_spec *s)
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
			  .save = s->save, .checkpoint_dir = s->checkpoint_dir, .checkpoint_every = s->checkpoint_every,
			  .last = s->last};
	json_t *j = rs_proto_make_start(&m);
	json_decref(peers);
	json_decref(plan);
	json_decref(prev);
	json_decref(uoo);
	return j;
}

/* A fresh start of generation 1 on a world of one rank listening on addr. */
json_t *msg_fresh(const char *addr, int64_t steps, int last)
{
	start_spec s = {.generation = 1, .world = 1, .steps = steps, .last = last, .plan = AF.p1, .peers = {addr}, .npeers = 1};
	return msg_start(&s);
}

/* At the first join (m), a fresh start of `steps` steps on the address it announced. 1 when m was a join. */
int fake_start_at_first_join(fake *f, json_t *m, int64_t steps, int last)
{
	if (rs_proto_kind(m) != RS_MSG_JOIN)
		return 0;
	if (f->joins == 1)
		fake_say(f, msg_fresh(jstr(m, "addr"), steps, last));
	return 1;
}

/* A reshard of the world of one rank to itself (the same plan: every row kept) as generation gen. */
json_t *msg_restage(int64_t gen, const char *addr, int64_t first, int64_t steps)
{
	start_spec s = {.generation = gen, .world = 1, .first_step = first, .steps = steps, .last = 1, .plan = AF.p1,
			.prev = AF.p1, .peers = {addr}, .npeers = 1};
	return msg_start(&s);
}

json_t *msg_resume(int64_t gen, int64_t steps, int last)
{
	rs_msg_resume r = {gen, steps, last};
	return rs_proto_make_resume(&r);
}

json_t *msg_generation(rs_msg_type t, int64_t gen) { return rs_proto_make_generation(t, gen, 0, "a test abort"); }

/* ---- running an agent ---------------------------------------------------------------- */


/* Create an agent over f, run it to its end, destroy it. */
outcome agent_run_over(fake *f, int grace_ms)
{
	rs_agent_config c = {.cfg = AF.cfg, .conn = &f->base, .host = "127.0.0.1", .token = "t", .timeout_ms = 10000,
			     .grace_ms = grace_ms, .leave = &f->leave, .ready_file = AF.ready_file};
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
outcome agent_run_one(fake *f, react_fn react, int grace_ms)
{
	fake_init(f, react, 0);
	outcome o = agent_run_over(f, grace_ms);
	if (f->failed[0])
		fail_msg("the fake coordinator: %s (the agent: %s)", f->failed, o.err.msg);
	return o;
}

void assert_agent_ended(const outcome *o, rs_agent_end end)
{
	if (o->st != RS_OK)
		fail_msg("the agent failed: %s: %s", rs_status_str(o->st), o->err.msg);
	assert_int_equal(o->end, end);
}

void assert_agent_failed(const outcome *o, rs_status st, const char *says)
{
	assert_int_equal(o->st, st);
	if (!strstr(o->err.msg, says))
		fail_msg("the agent's error '%s' does not say '%s'", o->err.msg, says);
}

/* ---- set-up ---------------------------------------------------------------------------- */

int agent_setup(void **state)
{
	(void)state;
	rs_err err = {0};
	int32_t grow[1], shrink[2];
	rs_log_init("test-agent", RS_LOG_WARN);
	if (rs_scratch_make(AF.dir, sizeof(AF.dir), "agent") != 0 || rs_config_load("tests/data/train-model.json", &AF.cfg, &err))
		return -1;
	rs_world w1 = rs_world_make(AF.cfg, 1, 0, 0, 0), w2 = rs_world_make(AF.cfg, 2, 0, 0, 0);
	if (rs_planner_plan(AF.cfg, &w1, NULL, NULL, &AF.p1, &err) != RS_OK ||
	    rs_planner_rank_map(1, 2, NULL, 0, grow, &err) != RS_OK ||
	    rs_planner_plan(AF.cfg, &w2, AF.p1, grow, &AF.p2, &err) != RS_OK ||
	    rs_planner_plan(AF.cfg, &w2, NULL, NULL, &AF.q2, &err) != RS_OK ||
	    rs_planner_rank_map(2, 1, NULL, 0, shrink, &err) != RS_OK ||
	    rs_planner_plan(AF.cfg, &w1, AF.q2, shrink, &AF.q1, &err) != RS_OK) {
		fprintf(stderr, "setup: %s\n", err.msg);
		return -1;
	}
	return 0;
}

int agent_teardown(void **state)
{
	(void)state;
	rs_plan_free(AF.p1);
	rs_plan_free(AF.p2);
	rs_plan_free(AF.q1);
	rs_plan_free(AF.q2);
	rs_config_free(AF.cfg);
	return rs_scratch_remove(AF.dir);
}
