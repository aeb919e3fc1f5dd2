/*
 * job_persist.c - the job's persisted state (coordinator/state.h), saved
 * through the membership source before every decision of the cycle, and a
 * job recovered from it after a coordinator restart: the committed
 * generation, its plan and world, and the attempt in flight, with every
 * member "unknown" until it rejoins and reports again.
 */
#include "coordinator/job_internal.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/* The job's state in phase ph, through the membership source (patient: see rs_job_source.save_state). */
static rs_status save(rs_job *j, rs_state_phase ph, int patient, rs_err *err)
{
	if (!j->src.save_state || !j->cur.plan)
		return RS_OK; /* nothing committed yet: a restarted coordinator starts the job afresh */
	const char *wnames[RS_MAX_WORKERS];
	int64_t pids[RS_MAX_WORKERS];
	rs_state_worker workers[RS_MAX_WORKERS];
	char *world[RS_MAX_WORKERS], *uni[RS_MAX_WORKERS];
	rs_state s = {.phase = ph, .generation = j->cur.generation, .step = j->cur.step, .bound = j->cur.bound,
		      .attempts = j->att.failures, .next_schedule = j->cur.next_sched, .steps = j->o.steps,
		      .last_generation = j->att.last_generation,
		      .reached = rs__ckpt_near(j),
		      .error = ph == RS_STATE_FAILED ? j->why : NULL,
		      .replicas = j->src.replicas ? j->src.replicas(j->src.ctx) : 0, .nsched = j->o.nsched,
		      .config = (char *)j->o.config_path, .save = (char *)j->o.save, .url = (char *)j->o.url,
		      .token = (char *)j->o.token, .ckpt_dir = (char *)j->o.ckpt_dir, .ckpt_every = j->o.ckpt_every,
		      .ckpt_interval = j->o.ckpt_interval, .ckpt_keep = j->o.ckpt_keep};
	char model[RS_CONFIG_DIGEST_LEN + 1];
	rs_config_digest(j->o.cfg, model);
	s.model = model;
	memcpy(s.sched_step, j->o.sched_step, sizeof(s.sched_step));
	memcpy(s.sched_workers, j->o.sched_workers, sizeof(s.sched_workers));
	s.plan = rs_plan_to_json(j->cur.plan);
	for (int32_t r = 0; r < j->cur.nworld; r++)
		world[r] = j->mem.v[j->cur.world[r]].name;
	s.world = world, s.nworld = j->cur.nworld;
	if (ph == RS_STATE_MIGRATING || ph == RS_STATE_COMMITTING) {
		s.attempt_generation = j->att.generation;
		s.attempt_plan = j->att.plan ? rs_plan_to_json(j->att.plan) : NULL;
		for (int32_t u = 0; u < j->att.nuni; u++)
			uni[u] = j->mem.v[j->att.uni[u]].name;
		s.uni = uni, s.nuni = j->att.nuni, s.attempt_world = j->att.nworld;
		s.union_of_old = j->att.union_of_old;
		s.before = j->att.before, s.nbefore = j->ntables;
		s.restore = j->rec.healing && j->rec.partial ? j->rec.load : NULL;
	}
	/* the incarnations of the members that hold rows (the world and the union): a replacement is told apart */
	char *inc_names[2 * RS_MAX_WORKERS], *inc_values[2 * RS_MAX_WORKERS];
	for (size_t i = 0; i < j->mem.n; i++)
		if (j->mem.v[i].incarnation[0] && (rs__member_in_world(j, (int)i) || rs__member_in_union(j, (int)i))) {
			inc_names[s.ninc] = j->mem.v[i].name;
			inc_values[s.ninc++] = j->mem.v[i].incarnation;
		}
	s.inc_names = inc_names, s.inc_values = inc_values;
	int n = j->src.list ? j->src.list(j->src.ctx, wnames, pids, RS_MAX_WORKERS) : 0;
	s.nworkers = n < RS_MAX_WORKERS ? n : RS_MAX_WORKERS;
	for (int i = 0; i < s.nworkers; i++)
		workers[i] = (rs_state_worker){(char *)wnames[i], pids[i]};
	s.workers = workers;
	rs_status st = !s.plan || (s.attempt_generation && !s.attempt_plan) ? rs_err_set(err, RS_ENOMEM, "out of memory")
									   : j->src.save_state(j->src.ctx, &s, patient, err);
	json_decref(s.plan);
	json_decref(s.attempt_plan);
	return st;
}

int rs__persist(rs_job *j, rs_state_phase ph)
{
	rs_err err = {0};
	rs_status st = save(j, ph, 1, &err);
	if (st != RS_OK) {
		j->state_broken = 1; /* the API (or disk) may come back: the state that was saved stands, not "failed" */
		rs__job_fail(j, "cannot persist the job's state: %s", err.msg[0] ? err.msg : rs_status_str(st));
		return 0;
	}
	j->later.due = 0; /* a save left for later: this one holds all it would have */
	return 1;
}

#define LATER_FIRST_S 0.25 /* the first wait after a save that may wait failed; doubled up to LATER_MAX_S */
#define LATER_MAX_S 8.0

/* The phase the state is saved in while the job is in its phase; -1: none (a phase whose state is its own). */
static int state_phase(const rs_job *j)
{
	switch (j->ph) {
	case P_TRAINING:
	case P_PAUSED:
	case P_ABORTING: /* the abort saved the training state already */
		return RS_STATE_TRAINING;
	case P_MIGRATING:
		return RS_STATE_MIGRATING;
	case P_COMMITTING:
		return RS_STATE_COMMITTING;
	default: /* starting, recovering: the next decision's save catches up; done, failed: saved as such */
		return -1;
	}
}

/* A save that may wait failed (st, err): tried again in j->later.wait when the failure may pass, else given up. */
static void later(rs_job *j, rs_status st, const rs_err *err)
{
	int passes = st == RS_ECURL || st == RS_EIO; /* the API away, or its 5xx; a disk's error */
	j->later.due = passes ? rs__job_now(j) + j->later.wait : 0;
	if (passes)
		RS_WARN("cannot save the job's state (%s): %s; the state saved before stands; trying again in %.2f s",
			j->later.why, err->msg[0] ? err->msg : rs_status_str(st), j->later.wait);
	else
		RS_WARN("cannot save the job's state (%s): %s; the state saved before stands until the next save",
			j->later.why, err->msg[0] ? err->msg : rs_status_str(st));
}

void rs__persist_soon(rs_job *j, const char *why)
{
	int ph = state_phase(j);
	if (ph < 0) {
		j->later.due = 0;
		return;
	}
	if (j->later.due) { /* one is pending already: its try, when due, saves the state as it is then */
		j->later.why = why;
		return;
	}
	rs_err err = {0};
	rs_status st = save(j, (rs_state_phase)ph, 0, &err);
	if (st == RS_OK)
		return;
	j->later.wait = LATER_FIRST_S;
	j->later.why = why;
	later(j, st, &err);
}

void rs__persist_tick(rs_job *j)
{
	if (!j->later.due || rs__job_now(j) < j->later.due)
		return;
	int ph = state_phase(j);
	rs_err err = {0};
	rs_status st = ph < 0 ? RS_OK : save(j, (rs_state_phase)ph, 0, &err);
	if (st == RS_OK) {
		if (ph >= 0)
			RS_INFO("the job's state is saved again (%s)", j->later.why);
		j->later.due = 0;
		return;
	}
	j->later.wait = j->later.wait * 2 > LATER_MAX_S ? LATER_MAX_S : j->later.wait * 2;
	later(j, st, &err);
}

/* The members the state names, in its order: *out[k] the member index of names[k]. */
static rs_status add_members(rs_job *j, char *const *names, int32_t n, int32_t *out, const char *field, rs_err *err)
{
	for (int32_t k = 0; k < n; k++)
		if ((out[k] = rs__member_add(j, names[k])) < 0)
			return j->mem.n >= RS_MAX_WORKERS
				       ? rs_err_set(err, RS_EINVAL, "state: %s: more than %d workers", field, RS_MAX_WORKERS)
				       : RS_ENOMEM;
	return RS_OK;
}

/* The attempt in flight, as the state has it. */
static rs_status recover_attempt(rs_job *j, const rs_state *s, rs_err *err)
{
	rs_status st = RS_OK;
	RSCHECK(rs_plan_from_json(s->attempt_plan, j->cfg, "state: attempt plan", &j->att.plan, err));
	if (s->nbefore != j->ntables || j->att.plan->world.ranks != s->attempt_world)
		return rs_err_set(err, RS_EINVAL, "state: the attempt does not match the config's tables or its plan");
	RSALLOCGOTO(j->att.uni = malloc(sizeof(int32_t) * (size_t)s->nuni + 1), st, out);
	RSALLOCGOTO(j->att.union_of_old = malloc(sizeof(int32_t) * (size_t)s->nworld + 1), st, out);
	RSALLOCGOTO(j->att.before = calloc((size_t)j->ntables + 1, sizeof(uint64_t)), st, out);
	RSCHECKGOTO(add_members(j, s->uni, s->nuni, j->att.uni, "attempt.union", err), st, out);
	memcpy(j->att.union_of_old, s->union_of_old, sizeof(int32_t) * (size_t)s->nworld);
	int healing = 0;
	for (int32_t r = 0; r < s->nworld; r++)
		if (s->union_of_old[r] == -1) /* an attempt healing the world: that member's rows are gone */
			j->mem.v[j->cur.world[r]].lost = 1, healing = 1;
	if (healing)
		rs__recover_resumed(j, s->restore);
	memcpy(j->att.before, s->before, sizeof(uint64_t) * (size_t)j->ntables);
	j->att.nuni = s->nuni;
	j->att.nworld = s->attempt_world;
	j->att.generation = s->attempt_generation;
	if (j->att.last_generation < s->attempt_generation)
		j->att.last_generation = s->attempt_generation;
	j->att.bound = rs__cycle_bound_after(j, j->cur.step);
	RSCHECKGOTO(rs__cycle_pairs_reset(j), st, out);
out:
	return st;
}

rs_status rs_job_recover(const rs_job_options *o, const rs_job_source *src, const rs_state *s, rs_job **out,
			 rs_err *err)
{
	rs_job *j;
	rs_status st = RS_OK;
	*out = NULL;
	if (s->model) { /* its plan, members and checkpoints are of that model */
		char model[RS_CONFIG_DIGEST_LEN + 1], sections[128];
		rs_config_digest(o->cfg, model);
		if (rs_config_digest_diff(s->model, model, sections, sizeof(sections)))
			return rs_err_set(err, RS_EINVAL, "state: the job was started with another model config (it differs "
				"from %s in %s); a changed model is a new job: restore that config, or start afresh without "
				"this state", o->config_path ? o->config_path : "this one", sections);
	}
	RSCHECK(rs_job_create(o, src, 0, &j, err));
	RSCHECKGOTO(rs_plan_from_json(s->plan, o->cfg, "state: plan", &j->cur.plan, err), st, fail);
	if (j->cur.plan->world.ranks != s->nworld)
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "state: the plan has %d ranks, the world %d members",
					  j->cur.plan->world.ranks, s->nworld), fail);
	RSALLOCGOTO(j->cur.world = malloc(sizeof(int32_t) * (size_t)s->nworld), st, fail);
	RSCHECKGOTO(add_members(j, s->world, s->nworld, j->cur.world, "world", err), st, fail);
	j->cur.nworld = s->nworld;
	j->cur.generation = s->generation;
	j->att.last_generation = s->last_generation > s->generation ? s->last_generation : s->generation;
	j->cur.step = s->step;
	j->cur.bound = s->bound;
	j->ck.known = s->reached; /* the checkpoints it reached stay this run's (rs__ckpt_reached) */
	j->att.failures = s->attempts;
	j->cur.next_sched = s->next_schedule;
	if (s->attempt_generation)
		RSCHECKGOTO(recover_attempt(j, s, err), st, fail);
	else if (j->att.last_generation > j->cur.generation)
		j->cur.stale_gen = j->att.last_generation; /* a pre-copy in flight: its members are told to drop it */
	for (int i = 0; i < s->ninc; i++) {
		int k = rs__member_find(j, s->inc_names[i]);
		if (k >= 0)
			snprintf(j->mem.v[k].incarnation, sizeof(j->mem.v[k].incarnation), "%s", s->inc_values[i]);
	}
	j->t.attempt = j->t.paused = j->t.first_paused = rs__job_now(j);
	static const phase phases[] = {[RS_STATE_TRAINING] = P_TRAINING, [RS_STATE_MIGRATING] = P_MIGRATING,
				       [RS_STATE_COMMITTING] = P_COMMITTING, [RS_STATE_DONE] = P_DONE,
				       [RS_STATE_FAILED] = P_FAILED};
	if (s->phase == RS_STATE_FAILED)
		snprintf(j->why, sizeof(j->why), "%s", s->error);
	if (s->phase == RS_STATE_COMMITTING)
		j->t.staged = rs__job_now(j);
	rs__job_set_phase(j, phases[s->phase]);
	RS_INFO("recovered generation %lld (%d workers) in phase %s%s%s", (long long)j->cur.generation, j->cur.nworld,
		rs_state_phase_name(s->phase), j->att.generation ? " with an attempt in flight" : "",
		s->phase >= RS_STATE_DONE ? ": the job is over, nothing more to train" : "; waiting for the workers to rejoin");
	rs__members_changed(j);
	*out = j;
	return RS_OK;
fail:
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "job: out of memory");
	rs_job_destroy(j);
	return st;
}
