/*
 * agent_reshard.c - a reshard as one member of the union lives it (see
 * agent_internal.h): staging at the pause (phase one), commit or abort
 * (phase two), and pre-copy, which does most of phase one while the old
 * world trains.
 */
#include "worker/agent_internal.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct progress_ctx {
	rs_agent *a;
	int64_t generation;
	double last;
} progress_ctx;

/*
 * Between rounds of a reshard: tell the coordinator (at most ten times a
 * second) how far the sends are. The link may be a keeper's meanwhile:
 * rs_link_post alone may touch it (whether it is up too).
 */
static void on_progress(void *ctx, const uint64_t *sent, const uint64_t *total, int32_t npeers)
{
	progress_ctx *p = ctx;
	double now = rs_now();
	if (now - p->last < 0.1)
		return;
	p->last = now;
	json_t *pairs = rs_proto_migrating_sent(sent, total, npeers);
	rs_link_post(&p->a->link, pairs ? rs_proto_make_migrating(p->generation, pairs) : NULL);
	json_decref(pairs);
}

/* The start message's union_of_old, checked against the previous plan; *out is the caller's to free. */
static rs_status union_of_old(const rs_msg_start *s, const rs_plan *prev, int32_t **out, rs_err *err)
{
	size_t nold = json_array_size(s->union_of_old);
	if ((int64_t)nold != prev->world.ranks)
		return rs_err_set(err, RS_EINVAL, "start: union_of_old has %zu ranks, the previous plan %d", nold,
				  prev->world.ranks);
	if (!(*out = malloc(sizeof(int32_t) * nold)))
		return RS_ENOMEM;
	for (size_t i = 0; i < nold; i++)
		(*out)[i] = (int32_t)json_integer_value(json_array_get(s->union_of_old, i));
	return RS_OK;
}

/* A reshard's start: the plan rows move from and union_of_old (*prev, *uoo: the caller's to free). */
static rs_status previous_of(const rs_agent *a, const rs_msg_start *s, rs_plan **prev, int32_t **uoo, rs_err *err)
{
	RSCHECK(rs_plan_from_json(s->previous_plan, a->c.cfg, "start message previous plan", prev, err));
	return union_of_old(s, *prev, uoo, err);
}

/* The transports of the start's union (a->st_uni) and, for a member of the new world, of that world (a->st_t). */
static rs_status union_transport(rs_agent *a, const rs_msg_start *s, rs_err *err)
{
	RSCHECK(rs__agent_connect_peers(a, s, &a->st_uni, err));
	return s->rank < s->world ? rs_transport_subset(a->st_uni, (int32_t)s->world, &a->st_t) : RS_OK;
}

/*
 * The work of phase one: a transport over the union, the new plan's
 * trainer staged over it (a->st_uni, a->st_t, a->st_tr). *connect_s gets
 * the time from t0 until the transport was up (or failed).
 */
static rs_status stage_rows(rs_agent *a, const rs_msg_start *s, double t0, rs_reshard_stats *rst, double *connect_s,
			    uint64_t *restored, rs_err *err)
{
	rs_plan *prev = NULL;
	int32_t *uoo = NULL;
	rs_status st = RS_OK;
	RSCHECKGOTO(previous_of(a, s, &prev, &uoo, err), st, out);
	if (a->c.stall_connect_ms > 0)
		rs_sleep(a->c.stall_connect_ms / 1000.0); /* test hook: a window to act on the listeners */
	rs_status cst = union_transport(a, s, err);
	*connect_s = rs_now() - t0;
	RSCHECKGOTO(cst, st, out);
	if (a->c.stall_ms > 0)
		rs_sleep(a->c.stall_ms / 1000.0); /* test hook: a window to kill someone during MIGRATE */
	progress_ctx pc = {a, s->generation, 0};
	rs_reshard_spec spec = {.old_plan = prev, .new_plan = a->st_plan, .union_of_old = uoo, .uni = a->st_uni,
				.train_t = a->st_t, .engine = a->engine, .progress = on_progress, .progress_ctx = &pc,
				.restore = s->restore, .restored = restored};
	rs_link_keeper keeper;
	rs_link_keep_start(&keeper, &a->link); /* a large model's new shards take a while to build and fill */
	rs_checkpointer_drop_spare(a->ckpt);   /* not held beside two models; of other sizes after the commit */
	st = rs_trainer_stage(a->c.cfg, a->tr, &spec, &a->st_tr, rst, err);
	rs_link_keep_stop(&keeper);
out:
	free(uoo);
	rs_plan_free(prev);
	return st;
}

/*
 * Report how phase one of generation gen went (st, and why when it
 * failed): with the staged rows' checksums, what moved and what it took.
 * restored: partial recovery's checksums of the rows it restored, or NULL.
 */
static rs_status report_staged(rs_agent *a, int64_t gen, rs_status st, const rs_reshard_stats *rst, double connect_s,
			       const uint64_t *restored, const char *restore, const rs_err *why, double t0, rs_err *err)
{
	a->st_ok = st == RS_OK;
	rs_msg_staged m = {.generation = gen, .ok = a->st_ok};
	if (a->st_ok) {
		RS_INFO("generation %lld staged in %.3f s: sent %.1f MiB, received %.1f MiB in %d rounds, kept %.1f MiB",
			(long long)gen, rs_now() - t0, rst->sent_bytes / 1048576.0, rst->recv_bytes / 1048576.0, rst->rounds,
			rst->kept_bytes / 1048576.0);
		if (rst->background_rounds > 0 || rst->dirty_rows > 0)
			RS_INFO("generation %lld: pre-copied in %d rounds while training; %llu rows (%.1f MiB) updated since "
				"they were sent went again at the pause, %llu (%.1f MiB) while training",
				(long long)gen, rst->background_rounds, (unsigned long long)rst->dirty_rows,
				rst->dirty_bytes / 1048576.0, (unsigned long long)rst->resent_rows,
				rst->resent_bytes / 1048576.0);
		m.sent_bytes = (int64_t)rst->sent_bytes, m.recv_bytes = (int64_t)rst->recv_bytes;
		m.wire_bytes = (int64_t)rst->wire_bytes, m.kept_bytes = (int64_t)rst->kept_bytes;
		m.connect_s = connect_s, m.copy_s = rst->copy_s, m.move_s = rst->move_s;
		m.background_rounds = rst->background_rounds;
		m.dirty_rows = (int64_t)rst->dirty_rows, m.dirty_bytes = (int64_t)rst->dirty_bytes;
		m.checksum = a->st_tr ? rs__agent_checksums(a, a->st_tr, NULL) : NULL;
		if (rst->restored_rows > 0) {
			RS_INFO("generation %lld: %lld rows lost with every copy restored from %s", (long long)gen,
				(long long)rst->restored_rows, restore);
			m.restored_rows = rst->restored_rows;
			m.restored = rs_proto_checksums_to_json(restored, a->c.cfg->ntables);
		}
		if ((a->st_tr && !m.checksum) || (rst->restored_rows > 0 && !m.restored))
			/* unverifiable: the coordinator must abort, not count it as holding nothing */
			a->st_ok = m.ok = 0, m.reason = "out of memory computing the staged rows' checksum";
	} else {
		m.reason = why->msg[0] ? why->msg : rs_status_str(st);
		RS_WARN("generation %lld: staging failed: %s", (long long)gen, m.reason);
	}
	json_t *j = rs_proto_make_staged(&m);
	json_decref(m.checksum);
	json_decref(m.restored);
	rs_status said = rs_link_status(&a->link, j, err);
	/*
	 * Then the others must not wait for this member's chunks: they fail at once. Said first, the cause (a damaged
	 * chunk) is what the coordinator hears first, and names in the abort, rather than a peer's broken pipe.
	 */
	if (!a->st_ok && a->st_uni)
		rs_transport_abort(a->st_uni);
	return said;
}

/* Phase one of a reshard: stage the new plan's trainer (takes plan), then report how it went. */
rs_status rs__agent_stage(rs_agent *a, const rs_msg_start *s, rs_plan *plan, rs_err *err)
{
	rs_reshard_stats rst = {0};
	rs_err why = {0};
	double t0 = rs_now(), connect_s = 0;
	rs__agent_drop_staged(a);
	a->st_gen = s->generation;
	a->st_plan = plan;
	RSCHECK(rs__agent_relisten(a, err));
	RSCHECK(rs_link_status(&a->link, rs_proto_make_generation(RS_MSG_STAGING, s->generation, 0, NULL), err));
	uint64_t *restored = calloc((size_t)a->c.cfg->ntables + 1, sizeof(uint64_t));
	rs_status st = restored ? stage_rows(a, s, t0, &rst, &connect_s, restored, &why) : RS_ENOMEM;
	rs__agent_take_run(&a->staged, s);
	st = report_staged(a, s->generation, st, &rst, connect_s, restored, s->restore, &why, t0, err);
	free(restored);
	return st;
}

#define LEAVER_STEPS 3        /* a leaver frees its model this many of its recent steps after its commit */
#define LEAVER_WAIT_MAX_S 1.0 /* but no later than this */

/* Phase two: the coordinator committed the staged generation. *left when this worker handed its rows over. */
rs_status rs__agent_commit(rs_agent *a, int64_t gen, int *left, rs_err *err)
{
	*left = 0;
	if (gen != a->st_gen || !a->st_ok)
		return rs_err_set(err, RS_EINVAL, "commit of generation %lld, which is not staged here", (long long)gen);
	rs_status said = RS_OK;
	if (!a->st_tr) { /* leaving: say so first, then let the old model go behind the workers that train on */
		said = rs_link_status(&a->link, rs_proto_make_generation(RS_MSG_COMMITTED, gen, 0, NULL), err);
		/* this thread's (the one that frees), for good: the process exits next */
		if (setpriority(PRIO_PROCESS, 0, 10) != 0)
			RS_WARN("leaving: cannot lower this worker's priority: %s", strerror(errno));
		/*
		 * and the world's first step goes by before it does: workers sharing
		 * a host's cores (local mode; several to a node) waited for the
		 * freeing. bench-1g's 4 -> 3 here: that step took 13-23 ms beside
		 * 10-13 ms with the freeing three steps later.
		 */
		double wait = LEAVER_STEPS * a->pace.step_s;
		rs_sleep(wait < LEAVER_WAIT_MAX_S ? wait : LEAVER_WAIT_MAX_S);
	}
	rs_trainer_commit(a->st_tr, a->tr);
	rs_checkpointer_drop_spare(a->ckpt); /* of the old shards' sizes (one taken during a pre-copy) */
	rs_transport_destroy(a->t);
	rs_transport_destroy(a->uni);
	rs_plan_free(a->plan);
	a->tr = a->st_tr, a->t = a->st_t, a->uni = a->st_uni, a->plan = a->st_plan;
	a->st_tr = NULL, a->st_t = a->st_uni = NULL, a->st_plan = NULL, a->st_gen = 0;
	a->cur = a->staged;
	a->stalled = 0; /* a new transport */
	*left = a->tr == NULL;
	rs__agent_set_ready(a, !*left);
	return *left ? said : rs_link_status(&a->link, rs_proto_make_generation(RS_MSG_COMMITTED, gen, 0, NULL), err);
}

/* The coordinator aborted the staged generation: back to the old model, paused where it was. */
rs_status rs__agent_abort_staged(rs_agent *a, int64_t gen, const char *why, rs_err *err)
{
	if (gen != a->st_gen)
		return RS_OK; /* already dropped */
	RS_WARN("generation %lld aborted by the coordinator (%s); the old model stands", (long long)gen,
		why ? why : "no reason given");
	rs__agent_drop_staged(a);
	if (!a->tr) { /* a joiner: nothing to go back to; it waits for the next start, listening anew */
		RSCHECK(rs__agent_relisten(a, err));
		return rs_link_status(&a->link, rs_proto_make_idle(a->addr), err);
	}
	return rs__agent_report_paused(a, err);
}

/* ---- pre-copy ----------------------------------------------------------------------- */

/* The most background rounds an old member runs between two steps (each at most one chunk per peer). */
#define PRECOPY_MAX_ROUNDS_PER_STEP 16

/* The generation a start message names (0 when it names none). */
static int64_t start_generation(const json_t *start)
{
	return json_integer_value(json_object_get(start, "generation"));
}

/* Between background rounds: the same progress reports as a reshard's at the pause. */
static void on_precopy_progress(void *ctx, const uint64_t *sent, const uint64_t *total, int32_t npeers)
{
	rs_agent *a = ctx;
	progress_ctx p = {a, a->st_gen, a->pc_reported};
	on_progress(&p, sent, total, npeers);
	a->pc_reported = p.last;
}

/*
 * An old member's budget for the waits of the background rounds it runs
 * between two steps, all of them together: a quarter of its timeout. The
 * others wait for it in the next step for at most their own; a joiner that
 * stops answering (a stopped process, a node gone silent) must fail the
 * copy, which can be done again at the pause, well before that, not the
 * training world. Not before the first round has gone through: that one
 * waits for the joiners to build and fault in their shards, which may take
 * a large model longer (rs__precopy_step). The pause that finishes the copy
 * waits as long as any reshard's (rs__precopy_finish). Joiners keep their
 * own: nothing trains on them.
 */
static double precopy_budget_s(const rs_agent *a) { return a->c.timeout_ms / 4000.0; }

/* The bound on the waits of the copy's next exchanges, over the union and in the new world. */
static void copy_timeout(rs_agent *a, int ms)
{
	if (a->st_uni)
		rs_transport_timeout(a->st_uni, ms);
	if (a->st_t)
		rs_transport_timeout(a->st_t, ms);
}

/* Bound the waits of the copy's next exchanges to what is left of the budget that ends at `until`. */
static void precopy_bound(rs_agent *a, double until)
{
	double left_ms = (until - rs_now()) * 1e3;
	copy_timeout(a, left_ms < 1 ? 1 : left_ms > a->c.timeout_ms ? a->c.timeout_ms : (int)left_ms);
}

/*
 * Begin the copy of start s (takes plan): the union's transports, then the
 * copy set up (rs_precopy_begin), into st_uni / st_t / st_plan / pc.
 */
static rs_status precopy_begin(rs_agent *a, const rs_msg_start *s, rs_plan *plan, rs_err *why)
{
	rs__agent_drop_staged(a);
	a->st_gen = s->generation;
	a->st_plan = plan;
	a->st_ok = 0;
	rs__agent_take_run(&a->staged, s);
	RSCHECK(previous_of(a, s, &a->pc_prev, &a->pc_uoo, why));
	RSCHECK(union_transport(a, s, why));
	a->pc_bounded = 0;
	rs_reshard_spec spec = {.old_plan = a->pc_prev, .new_plan = plan, .union_of_old = a->pc_uoo, .uni = a->st_uni,
				.train_t = a->st_t, .engine = a->engine, .progress = on_precopy_progress, .progress_ctx = a};
	a->pc_reported = 0;
	a->pace.credit = a->pace.round_s = a->pace.busy_s = 0, a->pace.steps = 0;
	a->pace.before_s = a->pace.step_s;
	rs_checkpointer_drop_spare(a->ckpt); /* not held beside two models */
	RSCHECK(rs_precopy_begin(a->c.cfg, a->tr, &spec, &a->pc, why));
	RS_INFO("generation %lld: pre-copy began (%lld rounds)", (long long)s->generation,
		(long long)rs_precopy_pending(a->pc));
	return RS_OK;
}

/*
 * The copy failed: drop it, closing its connections (the others fail at
 * once, not at a timeout), and tell the coordinator, which aborts the attempt.
 */
static rs_status precopy_failed(rs_agent *a, int64_t gen, const char *why, rs_err *err)
{
	RS_WARN("generation %lld: pre-copy failed: %s%s", (long long)gen, why, a->tr ? "; the model in training stands" : "");
	/* said before the connections close, so that the cause is what the coordinator hears first (see report_staged) */
	rs_msg_staged m = {.generation = gen, .ok = 0, .reason = why};
	rs_status said = rs_link_status(&a->link, rs_proto_make_staged(&m), err);
	rs__agent_drop_staged(a);
	a->st_gen = gen, a->st_ok = 0; /* its abort is answered as any failed staging's: paused, or idle */
	if (a->lfd >= 0) { /* a peer connecting to it is refused at once, not kept waiting (listening anew on need) */
		close(a->lfd);
		a->lfd = -1;
	}
	return said;
}

/* Once every background round is done: say so, once. */
static rs_status precopy_said(rs_agent *a, rs_err *err)
{
	if (!a->pc || a->pc_said || rs_precopy_pending(a->pc) > 0)
		return RS_OK;
	a->pc_said = 1;
	return rs_link_status(&a->link, rs_proto_make_generation(RS_MSG_PRECOPIED, a->st_gen, 0, NULL), err);
}

void rs__precopy_offer(rs_agent *a, json_t *start)
{
	json_decref(a->pc_start);
	a->pc_start = json_incref(start);
	rs_trainer_ready_to_precopy(a->tr, 1);
}

int rs__precopy_call_off(rs_agent *a, int64_t gen)
{
	int pending = a->pc_start && start_generation(a->pc_start) == gen;
	if (!pending && a->st_gen != gen)
		return 0;
	RS_WARN("generation %lld: the coordinator called the pre-copy off; training goes on", (long long)gen);
	if (a->tr)
		rs_trainer_ready_to_precopy(a->tr, 0);
	rs__agent_drop_staged(a);
	return 1;
}

/*
 * Begin the kept start message: between steps (its rounds then run between
 * the next ones), or, paused, now (rs__precopy_now: back to back).
 */
static rs_status begin_kept(rs_agent *a, int paused, rs_err *err)
{
	json_t *msg = a->pc_start;
	int64_t gen = start_generation(msg);
	rs_msg_start s;
	rs_plan *plan = NULL;
	rs_err why = {0};
	a->pc_start = NULL;
	rs_trainer_ready_to_precopy(a->tr, 0);
	rs_status st = rs_proto_start(msg, &s, &why);
	if (st == RS_OK)
		st = rs_plan_from_json(s.plan, a->c.cfg, "start message plan", &plan, &why);
	if (st == RS_OK && paused) {
		st = rs__precopy_now(a, &s, plan, err); /* reports its own failure; an error here is the link's */
		json_decref(msg);
		return st;
	}
	if (st == RS_OK)
		st = precopy_begin(a, &s, plan, &why);
	json_decref(msg);
	return st == RS_OK ? RS_OK : precopy_failed(a, gen, why.msg[0] ? why.msg : rs_status_str(st), err);
}

rs_status rs__precopy_paused(rs_agent *a, rs_err *err) { return a->pc_start && a->tr ? begin_kept(a, 1, err) : RS_OK; }

/* A recent-value average. */
static double recent(double avg, double x) { return avg > 0 ? 0.7 * avg + 0.3 * x : x; }

/* The longest the last pass waits for the last steps before a pause (joiners wait in its exchange meanwhile). */
#define LAST_PASS_HELD_S 2.0
/* ... and how many steps before it it is asked for: the rate asked then (one step late) runs it after the last step. */
#define LAST_PASS_LEAD 3

/*
 * The rounds per step to ask for (see agent_internal.h): the share of the
 * time (precopy_share) over a round's time, in steps; one until both are
 * measured, none without a copy. And at least what is due: the rounds left
 * over four fifths of the steps left before this generation ends, where a
 * scheduled change pauses the world and whatever is left moves at the
 * pause (a round's time measured too high, as when the first waited for the
 * joiners to start, would otherwise leave most of it there). Every world
 * runs the mean of its ranks' asks, so each may ask its own.
 *
 * The last pass (the rows updated since sent) waits for the generation's
 * last steps when it ends within LAST_PASS_HELD_S (a scheduled change): run
 * right away, it would leave the pause every row updated since, as many
 * steps' worth as the copy was early (6 MiB of bench-1g's 4 -> 3). The
 * joiners wait in its exchange from the round before: once that wait and
 * the steps left would pass LAST_PASS_HELD_S (a quarter of the timeout at
 * most), as a checkpoint or an evaluation on the way may make them, it
 * runs at once. The first pass is not held: waiting on every member, it
 * finds a lost one while the world trains (the copy is called off), not at
 * the pause. None after the generation's last step: a resume would run
 * what was asked then.
 */
float rs__precopy_pace(const rs_pace_in *in)
{
	double held = LAST_PASS_HELD_S < in->timeout_ms / 4000.0 ? LAST_PASS_HELD_S : in->timeout_ms / 4000.0;
	if (in->pending == 0 || in->steps_left <= 0)
		return 0;
	if (in->last_pass_left && in->steps_left > LAST_PASS_LEAD && in->step_s > 0 &&
	    (double)in->steps_left * in->step_s < held)
		return in->since_round + (double)in->steps_left * in->step_s < held ? 0 : 1;
	double r = PRECOPY_MAX_ROUNDS_PER_STEP; /* a share of 1: all of it */
	if (in->step_s <= 0 || in->round_s <= 0)
		r = 1;
	else if (in->share < 1)
		r = in->share / (1 - in->share) * in->step_s / in->round_s;
	double due = (double)in->pending / (0.8 * (double)in->steps_left);
	r = r > due ? r : due;
	return (float)(r < PRECOPY_MAX_ROUNDS_PER_STEP ? r : PRECOPY_MAX_ROUNDS_PER_STEP);
}

/* What this member asks for after its step. */
static float pace_asked(const rs_agent *a)
{
	rs_pace_in in = {.share = a->c.cfg->cluster.precopy_share,
			 .pending = a->pc ? rs_precopy_pending(a->pc) : 0,
			 .last_pass_left = a->pc && rs_precopy_last_pass_left(a->pc),
			 .steps_left = a->cur.steps - a->cur.step,
			 .step_s = a->pace.step_s,
			 .round_s = a->pace.round_s,
			 .since_round = rs_now() - a->pace.round_at,
			 .timeout_ms = a->c.timeout_ms};
	return rs__precopy_pace(&in);
}

rs_status rs__precopy_step(rs_agent *a, const rs_step_stats *stats, rs_err *err)
{
	rs_err why = {0};
	double t0 = rs_now();
	int left = a->pc && rs_precopy_pending(a->pc) > 0;
	if (a->pace.mark > 0) { /* a step and what came after it (an evaluation, a checkpoint: at most 4 steps' worth) */
		double s = t0 - a->pace.mark;
		a->pace.step_s = recent(a->pace.step_s, a->pace.step_s > 0 && s > 4 * a->pace.step_s ? 4 * a->pace.step_s : s);
	}
	if (a->pc_start && stats->precopy) /* every rank has the start: they all begin now */
		RSCHECK(begin_kept(a, 0, err));
	/* the rounds the world's mean rate owes, the same on every rank */
	a->pace.credit += a->pc ? stats->precopy_rate : 0;
	if (a->pace.credit > PRECOPY_MAX_ROUNDS_PER_STEP)
		a->pace.credit = PRECOPY_MAX_ROUNDS_PER_STEP;
	int n = (int)a->pace.credit;
	a->pace.credit -= n;
	double until = rs_now() + precopy_budget_s(a);
	for (int k = 0; a->pc && k < n && rs_precopy_pending(a->pc) > 0; k++) {
		double r0 = rs_now();
		if (a->pc_bounded)
			precopy_bound(a, until);
		if (rs_precopy_round(a->pc, &why) != RS_OK)
			return precopy_failed(a, a->st_gen, why.msg, err);
		a->pc_bounded = 1;
		a->pace.round_at = rs_now();
		a->pace.round_s = recent(a->pace.round_s, a->pace.round_at - r0);
	}
	double t1 = rs_now();
	if (left && a->pace.mark > 0)
		a->pace.steps++, a->pace.busy_s += t1 - a->pace.mark;
	a->pace.mark = t1;
	rs_trainer_ask_precopy_rate(a->tr, pace_asked(a));
	return precopy_said(a, err);
}

rs_status rs__precopy_now(rs_agent *a, const rs_msg_start *s, rs_plan *plan, rs_err *err)
{
	rs_err why = {0};
	rs_status st = rs__agent_relisten(a, err);
	/* a joiner says it is staging; an old member stays paused in the coordinator's eyes until "finish" */
	if (st == RS_OK && !a->tr)
		st = rs_link_status(&a->link, rs_proto_make_generation(RS_MSG_STAGING, s->generation, 0, NULL), err);
	if (st != RS_OK) {
		rs_plan_free(plan);
		return st;
	}
	rs_link_keeper keeper;
	rs_link_keep_start(&keeper, &a->link); /* its new shards are built and filled back to back: minutes, for some */
	st = precopy_begin(a, s, plan, &why);
	if (st == RS_OK && a->c.stall_ms > 0)
		rs_sleep(a->c.stall_ms / 1000.0); /* test hook: the others' background rounds wait for this one */
	while (st == RS_OK && rs_precopy_pending(a->pc) > 0)
		st = rs_precopy_round(a->pc, &why);
	rs_link_keep_stop(&keeper);
	if (st != RS_OK)
		return precopy_failed(a, s->generation, why.msg[0] ? why.msg : rs_status_str(st), err);
	return precopy_said(a, err);
}

rs_status rs__precopy_finish(rs_agent *a, json_t *msg, rs_err *err)
{
	rs_msg_finish f;
	rs_reshard_stats rst = {0};
	rs_err why = {0};
	double t0 = rs_now();
	RSCHECK(rs_proto_finish(msg, &f, err));
	if (a->st_gen && f.generation != a->st_gen) { /* not this member's copy: leave that one alone */
		RS_WARN("a finish of generation %lld, while this worker's pre-copy is of %lld", (long long)f.generation,
			(long long)a->st_gen);
		rs_msg_staged m = {.generation = f.generation, .ok = 0, .reason = "no pre-copy of that generation here"};
		return rs_link_status(&a->link, rs_proto_make_staged(&m), err);
	}
	if (!a->pc)
		return precopy_failed(a, f.generation, "no pre-copy of that generation here", err);
	if (a->tr && f.first_step != a->cur.step) {
		char why_step[128];
		snprintf(why_step, sizeof(why_step), "finish names step %lld; this member paused at step %lld",
			 (long long)f.first_step, (long long)a->cur.step);
		return precopy_failed(a, f.generation, why_step, err);
	}
	if (!a->tr && a->c.stall_ms > 0)
		rs_sleep(a->c.stall_ms / 1000.0); /* test hook: a joiner keeps the others waiting at the pause */
	if (a->tr && a->pace.steps > 0 && a->pace.busy_s > 0 && a->pace.before_s > 0) {
		double batch = (double)a->c.cfg->train.global_batch, during = batch * (double)a->pace.steps / a->pace.busy_s;
		RS_INFO("generation %lld: training ran at %.0f samples/s over the %lld steps of the background copy, "
			"%.0f before it (%.2fx; precopy_share %.2f)", (long long)f.generation, during,
			(long long)a->pace.steps, batch / a->pace.before_s, during * a->pace.before_s / batch,
			a->c.cfg->cluster.precopy_share);
	}
	/* the world is paused: the copy's waits are bounded as any reshard's, and so are the new world's after it */
	copy_timeout(a, a->c.timeout_ms);
	rs_link_keeper keeper;
	rs_link_keep_start(&keeper, &a->link); /* the rounds left, the rows updated since and the staging */
	rs_status st = rs_precopy_finish(a->pc, &a->st_tr, &rst, &why);
	rs_link_keep_stop(&keeper);
	rs_precopy_free(a->pc);
	rs_plan_free(a->pc_prev); /* what pc pointed to: no longer needed */
	free(a->pc_uoo);
	a->pc = NULL, a->pc_prev = NULL, a->pc_uoo = NULL;
	a->staged.step = f.first_step, a->staged.steps = f.steps, a->staged.last = f.last;
	rs_status said = report_staged(a, f.generation, st, &rst, 0, NULL, NULL, &why, t0, err);
	if (st != RS_OK) { /* said, and aborted (report_staged): closed now, the others must not wait for this one's rows */
		rs_transport_destroy(a->st_t);
		rs_transport_destroy(a->st_uni);
		a->st_t = a->st_uni = NULL;
	}
	return said;
}
