/*
 * job_precopy.c - a reshard pre-copied while the old world trains
 * (worker/precopy.c does the moving): whether the world can, the attempt
 * planned and started beside training, called off when its membership
 * changes or a member fails it, the pause once every member's background
 * rounds are done, and the finish that stages it as at any reshard.
 */
#include "coordinator/job_internal.h"
#include "common/planner.h"
#include "common/log.h"

#include <stdarg.h>

/*
 * Whether the old world can pre-copy: on in the config, not healing, not
 * after an aborted attempt (the retry is at the pause), every member
 * training this generation and saying where it listens (one that cannot
 * pre-copy, of a 2D world averaged every K steps, says no address). 1:
 * yes; 0: no; -1: not yet (one is still starting).
 * can_precopy: and the candidates c (n) connected and listening.
 */
static int world_can_precopy(const rs_job *j)
{
	if (!j->cfg->cluster.precopy || j->att.failures > 0 || j->rec.healing)
		return 0;
	int wait = 0;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		const member *m = &j->mem.v[j->cur.world[r]];
		if (m->lost || !m->conn || m->st != M_TRAINING || m->gen != j->cur.generation ||
		    (m->said_gen == j->cur.generation && m->addr_gen != j->cur.generation)) /* it cannot (2D every K) */
			return 0;
		wait |= m->said_gen != j->cur.generation; /* it has not said it trains this generation yet */
	}
	return wait && rs__job_now(j) - j->ph_at < j->o.timeout_ms / 1000.0 ? -1 : !wait;
}

/*
 * Whether the layout stays what it is: 1D to 1D, or replica groups of the
 * same size to more or fewer of them. A world that turns 2D or 1D (a 2D
 * job through a size that is not whole groups) moves its rows at the pause:
 * turning 2D feeds two replicas from one copy of a row, which one dirty mark
 * cannot follow (worker/precopy.c refuses such a copy; pre-copied, 3 -> 4
 * workers in groups of 2 failed its checksums).
 */
static int same_layout(const rs_job *j, int32_t n)
{
	const rs_world *old = &j->cur.plan->world;
	rs_world w = rs_world_make(j->cfg, n, 0, 0, 0);
	return rs_planner_same_groups(j->cur.plan, &w) || /* groups added or removed (one group of S to two too) */
	       (old->sharding_group == old->ranks && w.sharding_group == w.ranks); /* 1D to 1D */
}

int rs__cycle_precopy_can(const rs_job *j, const int32_t *c, int32_t n)
{
	int world = world_can_precopy(j);
	if (world && (!j->cur.plan || !same_layout(j, n)))
		return 0;
	for (int32_t k = 0; world && k < n; k++)
		if (!j->mem.v[c[k]].conn || !j->mem.v[c[k]].addr[0])
			return 0;
	return world;
}

void rs__cycle_precopy_begin(rs_job *j, const int32_t *c, int32_t n)
{
	if (!rs__cycle_plan_attempt(j, c, n) || !rs__persist(j, RS_STATE_TRAINING)) /* its generation: never handed out again */
		return;
	j->att.precopy = 1;
	if (!rs__cycle_send_starts(j))
		return;
	j->t.attempt = rs__job_now(j);
	RS_INFO("membership change: %d -> %d workers; generation %lld pre-copies while generation %lld trains "
		"(from step %lld; planned in %.1f ms)", j->cur.nworld, n, (long long)j->att.generation,
		(long long)j->cur.generation, (long long)rs__job_step(j), j->t.plan_s * 1e3);
}

/*
 * The pre-copy in flight is called off: the union drops it, the old world
 * trains on, the change waits. One that failed counts toward
 * --max-attempts, and the retry moves its rows at the pause; one that a
 * newer change outdated does neither.
 */
static void call_off(rs_job *j, int failed, const char *fmt, va_list ap)
{
	int failures = j->att.failures;
	rs__cycle_end_attempt(j, 0, fmt, ap); /* no attempt was persisted: only its generation */
	if (!failed)
		j->att.failures = failures;
	rs__cycle_free_attempt(j);
	rs__members_changed(j);
}

void rs__cycle_precopy_call_off(rs_job *j, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	call_off(j, 1, fmt, ap);
	va_end(ap);
}

static void outdated(rs_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outdated(rs_job *j, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	call_off(j, 0, fmt, ap);
	va_end(ap);
}

void rs__cycle_precopy_failed(rs_job *j, const member *m, const char *why)
{
	if (j->ph == P_TRAINING && j->att.precopy && j->att.generation)
		rs__cycle_precopy_call_off(j, "%s: %s", m->name, why);
}

/* Whether the next world should no longer be the attempt's: a new joiner, or one of its members leaving or gone. */
static int precopy_outdated(const rs_job *j)
{
	int32_t c[RS_MAX_WORKERS];
	int pending;
	int32_t nc = rs__members_candidates(j, c, &pending);
	for (int32_t k = 0; k < nc; k++) {
		int in = 0;
		for (int32_t u = 0; u < j->att.nworld && !in; u++)
			in = j->att.uni[u] == c[k];
		if (!in)
			return 1;
	}
	for (int32_t u = 0; u < j->att.nworld; u++)
		if (j->mem.v[j->att.uni[u]].leaving || rs__member_gone(j, &j->mem.v[j->att.uni[u]]))
			return 1;
	return 0;
}

/* Pre-copy in flight: pause once every member's rounds are done (or it takes long), unless a scheduled step will. */
void rs__cycle_precopy_tick(rs_job *j)
{
	int all = 1;
	for (int32_t u = 0; u < j->att.nuni; u++) {
		const member *m = &j->mem.v[j->att.uni[u]];
		if (rs__member_gone(j, m) && !rs__member_in_world(j, j->att.uni[u])) {
			rs__cycle_precopy_call_off(j, "%s (joining) was lost during the pre-copy", m->name);
			return;
		}
		all &= m->precopied == j->att.generation;
	}
	if (precopy_outdated(j)) {
		outdated(j, "the membership changed during the pre-copy");
		return;
	}
	int scheduled = j->cur.sched_asked == j->cur.next_sched + 1;
	int late = rs__job_now(j) - j->t.attempt > rs__cycle_phase_timeout(j);
	if ((all || late) && !scheduled && !j->cur.pause_sent) {
		RS_INFO("generation %lld: %s; pausing at the next step boundary", (long long)j->att.generation,
			all ? "every member pre-copied" : "the pre-copy takes long: the pause finishes it");
		rs__cycle_pause_world(j);
	}
}

/* The old world paused with a pre-copy in flight: every member finishes it, then stages as at any reshard. */
void rs__cycle_precopy_finish(rs_job *j)
{
	rs__cycle_old_sums(j); /* at this pause, not the last one before the copy began */
	if (j->cur.next_sched < j->o.nsched && j->o.sched_step[j->cur.next_sched] == j->cur.step)
		j->cur.next_sched++; /* the scheduled change is this one */
	j->cur.sched_asked = 0;
	j->att.bound = rs__cycle_bound_after(j, j->cur.step);
	if (!rs__persist(j, RS_STATE_MIGRATING))
		return;
	rs__emit(j, &(job_event){.kind = EV_ATTEMPT}); /* now that its step is known */
	j->t.plan_s = 0; /* planned long before the pause: not part of it */
	rs_msg_finish f = {j->att.generation, j->cur.step, j->att.bound, j->att.bound >= j->o.steps};
	json_t *fin = rs_proto_make_finish(&f);
	for (int32_t u = 0; u < j->att.nuni; u++) {
		member *m = &j->mem.v[j->att.uni[u]];
		m->start_gen = rs__job_send(j, m, json_incref(fin)) ? j->att.generation : 0;
		m->st = M_STAGING, m->gen = j->att.generation, m->staged_ok = 0;
	}
	json_decref(fin);
	j->t.attempt = rs__job_now(j);
	RS_INFO("generation %lld: the world paused at step %lld; finishing the pre-copy", (long long)j->att.generation,
		(long long)j->cur.step);
	rs__job_set_phase(j, P_MIGRATING);
}

/*
 * With pre-copy, a schedule's workers are asked for as the run toward its
 * step starts (after the last reshard's report, which times from the
 * request), so the reshard pre-copies while the world trains to that step.
 */
void rs__cycle_precopy_ask_schedule_ahead(rs_job *j)
{
	int k = j->cur.next_sched;
	if (k >= j->o.nsched || j->cur.sched_asked == k + 1 || !j->src.scale || j->o.sched_step[k] != j->cur.bound ||
	    j->cur.resume_step >= 0 || world_can_precopy(j) != 1)
		return;
	rs_err err = {0};
	int32_t n = j->o.sched_workers[k];
	j->cur.sched_asked = k + 1;
	rs__emit(j, &(job_event){.kind = EV_SCHEDULE, .step = j->o.sched_step[k], .workers = n});
	if (j->src.scale(j->src.ctx, n, &err) != RS_OK) {
		rs__job_fail(j, "schedule: %s", err.msg);
		return;
	}
	j->mem.scale_at = rs__job_now(j);
	rs__members_changed(j);
}
