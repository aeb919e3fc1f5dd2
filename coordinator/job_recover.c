/*
 * job_recover.c - recovery from a lost world member (README, "Recovery").
 *
 * A 2D world with exact replica sync heals instead when every role (the
 * shards one rank of a replica group holds) keeps a live holder: its
 * survivors keep their models (a step that fails changes nothing), report
 * paused at the last step done, and a reshard rebuilds the lost members'
 * shards from their copies in the other groups onto the replacements (or
 * the survivors alone), training on from the step the most roles reach:
 * survivors whose step failed only in its last exchange (the votes) catch
 * up to it first, any other survivor not at it takes its rows again. It
 * rolls back after all when that leaves some rows with no copy, their
 * copies disagree, or the healing reshards keep failing.
 *
 * Partial recovery (cluster.recovery "partial", CPR) heals the same way
 * when some rows lost every copy (any world, 1D too): the reshard loads
 * those from the latest complete checkpoint, every other row keeps its
 * current value, and training goes on from the survivors' step; the rows
 * restored are reported as stale.
 *
 * The rollback:
 * A worker that dies without handing its rows over (SIGKILL, the OOM
 * killer, its node gone, its pod deleted) takes the only copy of its
 * shards with it, and its peers' next step fails: they drop the
 * generation and report idle (worker/agent.c). The world then goes back
 * to the latest complete periodic checkpoint whose files all match their
 * checksums (the one before, when the newest is damaged), or to where the
 * job started when there is none: a new generation over the survivors and
 * the replacements (a StatefulSet recreates the pod, local mode restarts
 * the ordinal), planned afresh, loads it and trains again from its step.
 * The data is addressed by global sample index, so the run ends where an
 * undisturbed one would. A job that keeps failing back to the same step
 * gives up after max_attempts recoveries in a row.
 */
#include "coordinator/job_internal.h"
#include "common/checkpoint.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void rs__recover_free(rs_job *j)
{
	free(j->rec.old);
	free(j->rec.att);
	rs_plan_free(j->rec.old_plan);
	j->rec.old = j->rec.att = NULL;
	j->rec.old_plan = NULL;
	j->rec.nold = j->rec.natt = 0;
	j->rec.att_gen = 0;
}

/*
 * Where the world goes back to: the latest verified complete checkpoint of
 * a step this run reached (<= near; into load, its step into *step), else
 * the job's own --load, else step 0 ("" in load). 0 (the job failed, every
 * file kept) when a checkpoint cannot be read at all: an I/O error is not
 * damage, and going back further would throw good ones away.
 */
/* The latest verified complete periodic checkpoint of a step <= near (into load, its step into *step). */
static rs_status latest_checkpoint(const rs_job *j, int64_t near, char *load, size_t n, int64_t *step, rs_err *err)
{
	rs_status st = j->o.ckpt_dir ? rs_checkpoint_find(j->o.ckpt_dir, near, load, n, step, err) : RS_ENOTFOUND;
	if (st != RS_OK)
		load[0] = 0, *step = 0;
	return st;
}

static int rollback_point(rs_job *j, int64_t near, char *load, size_t n, int64_t *step)
{
	rs_err err = {0};
	rs_status st = latest_checkpoint(j, near, load, n, step, &err);
	if (st == RS_OK)
		return 1;
	if (j->o.ckpt_dir) {
		if (st != RS_ENOTFOUND) {
			rs__job_fail(j, "%s; recovery cannot read the checkpoints: %s", j->rec.why, err.msg);
			return 0;
		}
		RS_WARN("recovery: no complete checkpoint under %s yet", j->o.ckpt_dir);
	}
	if (j->o.load) {
		snprintf(load, n, "%s", j->o.load);
		*step = j->o.load_step;
	}
	return 1;
}

/*
 * The lost generation's members drop what they hold: a staged attempt is
 * aborted, and every member of the world is told its generation is over
 * (an "abort" of the current generation): one whose peers are all alive
 * (the one declared lost may only have been cut off from the coordinator)
 * would train on headless otherwise.
 */
static void dissolve(rs_job *j)
{
	rs__recover_free(j);
	rs__ckpt_drop_world(j); /* a checkpoint of the world before the last reshard must not complete mid-rollback */
	if (j->att.generation) { /* kept: a member that reconnects later is told again */
		j->rec.att = j->att.uni, j->rec.natt = j->att.nuni, j->rec.att_gen = j->att.generation;
		j->att.uni = NULL;
		rs__cycle_free_attempt(j);
	}
	j->att.failures = 0;
	j->rec.old = j->cur.world, j->rec.nold = j->cur.nworld, j->rec.old_gen = j->cur.generation;
	for (size_t i = 0; i < j->mem.n; i++)
		rs__recover_rejoined(j, (int)i);
	j->rec.old_plan = j->cur.plan;
	j->cur.world = NULL, j->cur.nworld = 0;
	j->cur.plan = NULL;
	j->cur.pause_sent = j->cur.pausing = 0;
	j->cur.resume_step = -1;
	j->mem.loss_seen_at = 0;
	for (size_t i = 0; i < j->mem.n; i++)
		j->mem.v[i].replaced = 0; /* nobody holds rows now: a new process under an old name is a fresh worker */
}

/* The progress reports of the steps after `to` describe a model that is gone: the history ends at `to`. */
static void forget_progress_after(rs_job *j, int64_t to)
{
	while (j->rep.nhistory > 0 &&
	       j->rep.history[(j->rep.history_head + j->rep.nhistory - 1) % HISTORY_MAX].step > to)
		j->rep.nhistory--;
	if (j->rep.last.step > to)
		j->rep.last.step = to;
}

/* ---- healing a 2D world from its replicas ------------------------------------------- */

const char *rs__recovery_kind(const rs_job *j)
{
	return !j->rec.replica ? "rollback" : j->rec.partial ? "partial" : "replica";
}

static int32_t groups(const rs_plan *p) { return p->world.ranks / p->world.sharding_group; }

/*
 * Mark the world members whose rows are gone (gone, or idle: they dropped
 * their model). 1 when every role keeps a live holder; 0 when some role
 * lost every holder (partial recovery restores it); -1 when nothing can
 * heal: a member finished, or none lives.
 */
static int mark_lost(rs_job *j)
{
	const rs_plan *p = j->cur.plan;
	int32_t s = p->world.sharding_group, r0 = groups(p);
	char *held = calloc((size_t)s, 1);
	int whole = held ? 1 : -1, live = 0;
	for (int32_t r = 0; whole >= 0 && r < j->cur.nworld; r++) {
		member *m = &j->mem.v[j->cur.world[r]];
		if (m->st == M_DONE)
			whole = -1;
		else if (m->lost || rs__member_gone(j, m) || m->st == M_IDLE)
			m->lost = 1, m->replaced = 0; /* a new process under its name comes back as a fresh worker */
		else
			held[r / r0] = 1, live++;
	}
	for (int32_t l = 0; whole > 0 && l < s; l++)
		whole = held[l];
	free(held);
	return live ? whole : -1;
}

/*
 * Whether a loss can heal, training or paused: a 2D world with exact sync
 * (copies that differ, local SGD's, cannot stand in for each other), or a
 * 1D one with partial recovery asked for.
 */
static int can_heal(const rs_job *j)
{
	const rs_plan *p = j->cur.plan;
	return p && (groups(p) > 1 ? j->cfg->cluster.replica_sync_every == 0 : j->cfg->cluster.partial_recovery) &&
	       (j->ph == P_TRAINING || j->ph == P_PAUSED || (j->ph == P_RECOVERING && j->rec.healing));
}

/*
 * Some rows lost every copy: heal partially when the config asks for it
 * and a checkpoint exists to restore them from (which one is chosen when
 * the reshard begins: rs__restore_newest).
 */
static int go_partial(rs_job *j)
{
	if (j->rec.partial)
		return 1;
	if (!j->cfg->cluster.partial_recovery)
		return 0;
	char load[sizeof(j->rec.load)];
	int64_t step;
	if (!rs__ckpt_newest_indexed(j, rs__ckpt_near(j), load, sizeof(load), &step) && !j->o.load) {
		RS_WARN("partial recovery: no complete checkpoint yet: rolling back instead");
		return 0;
	}
	j->rec.partial = 1, j->rec.partials++;
	j->rec.load[0] = 0;
	j->rec.restored_step = -1;
	return 1;
}

int rs__restore_newest(rs_job *j)
{
	rs_err err = {0};
	char load[sizeof(j->rec.load)];
	int64_t at = 0;
	/* the first try reads no file here (a checkpoint may be terabytes): the workers check what they restore;
	 * a retry (that check may have failed) takes the newest whose every file passes */
	rs_status st = j->att.failures == 0 && rs__ckpt_newest_indexed(j, j->cur.step, load, sizeof(load), &at)
			       ? RS_OK
			       : latest_checkpoint(j, j->cur.step, load, sizeof(load), &at, &err);
	if (st == RS_ENOTFOUND && j->o.load)
		snprintf(load, sizeof(load), "%s", j->o.load), at = j->o.load_step, st = RS_OK;
	if (st != RS_OK) {
		RS_WARN("partial recovery: %s", st == RS_ENOTFOUND ? "no complete checkpoint is left" : err.msg);
		return 0;
	}
	if (strcmp(load, j->rec.load) != 0)
		RS_WARN("healing: the rows lost with every copy come back from %s (step %lld)", load, (long long)at);
	snprintf(j->rec.load, sizeof(j->rec.load), "%s", load);
	j->rec.restored_step = at;
	return 1;
}

static int heal_begin(rs_job *j, int i, const char *why)
{
	if (!can_heal(j))
		return 0;
	int whole = mark_lost(j), partial = j->rec.healing ? j->rec.partial : 0;
	if (!j->rec.healing)
		j->rec.partial = 0; /* the last recovery's */
	if (whole < 0 || (!whole && !go_partial(j))) {
		rs__members_clear_lost(j);
		j->rec.partial = partial;
		return 0;
	}
	if (j->rec.healing) { /* one more loss while healing, every role still held (or restored): go on */
		rs__job_set_phase(j, P_RECOVERING);
		return 1;
	}
	char tables[256];
	int64_t at = rs__job_step(j);
	/* a fault that comes back every time (a poison batch, a replacement that dies): after max_attempts, roll back */
	int in_a_row = j->rec.total && j->rec.replica && at == j->rec.to ? j->rec.in_a_row + 1 : 1;
	if (in_a_row > (j->o.max_attempts > 0 ? j->o.max_attempts : 3)) {
		RS_WARN("healing: %d losses in a row at step %lld: rolling back instead", in_a_row - 1, (long long)at);
		rs__members_clear_lost(j);
		j->rec.partials -= j->rec.partial;
		j->rec.partial = 0;
		return 0;
	}
	j->rec.in_a_row = in_a_row;
	if (j->ph == P_TRAINING && j->att.precopy && j->att.generation) { /* its joiners are free to come in the heal */
		int failures = j->att.failures; /* not an attempt of the heal's: it keeps all of --max-attempts */
		rs__cycle_precopy_call_off(j, "%s %s during the pre-copy", j->mem.v[i].name, why);
		j->att.failures = failures;
	}
	rs__member_tables(j, i, tables, sizeof(tables));
	snprintf(j->rec.why, sizeof(j->rec.why), "%s %s holding %s of rows of %s (generation %lld, near step %lld)",
		 j->mem.v[i].name, why, groups(j->cur.plan) > 1 ? "a copy" : "the only copy", tables[0] ? tables : "its tables",
		 (long long)j->cur.generation, (long long)at);
	j->rec.healing = j->rec.replica = 1;
	if (whole)
		j->rec.load[0] = 0;
	j->rec.from = j->rec.to = at;
	j->rec.started = rs__job_now(j);
	j->rec.total++, j->rec.healed++;
	rs__emit(j, &(job_event){.kind = EV_RECOVERING, .reason = j->rec.why, .step = at});
	/* a survivor still training (its peers' loss not yet met in a collective) stops at the next boundary */
	for (int32_t r = 0; r < j->cur.nworld; r++)
		if (!j->mem.v[j->cur.world[r]].lost)
			rs__job_send(j, &j->mem.v[j->cur.world[r]], rs_proto_make_plain(RS_MSG_PAUSE));
	rs__job_set_phase(j, P_RECOVERING);
	return 1;
}

/*
 * The checksum of table t that the live members of world ranks [from, to)
 * all hold (into *v): 0 when they disagree, one has not reported it, or
 * none lives.
 */
static int agreed(const rs_job *j, int t, int32_t from, int32_t to, uint64_t *v)
{
	const member *first = NULL;
	for (int32_t r = from; r < to; r++) {
		const member *m = &j->mem.v[j->cur.world[r]];
		if (m->lost)
			continue;
		if (!m->has_held)
			return 0;
		if (first && first->held_sum[t] != m->held_sum[t]) {
			RS_WARN("healing: table '%s': %s and %s hold copies that differ", j->cfg->tables[t].name, first->name,
				m->name);
			return 0;
		}
		first = first ? first : m;
	}
	*v = first ? first->held_sum[t] : 0;
	return first != NULL || j->rec.partial; /* none lives: restored, and left out of the check (job_dispatch.c) */
}

int rs__heal_sums(rs_job *j, uint64_t *before)
{
	const rs_plan *p = j->cur.plan;
	int32_t r0 = groups(p);
	for (int t = 0; t < j->ntables; t++) {
		uint64_t v;
		before[t] = 0;
		if (p->tables[t].sharding == RS_SHARD_DP) { /* every rank holds the table */
			if (!agreed(j, t, 0, j->cur.nworld, &v))
				return 0;
			before[t] = v;
			continue;
		}
		for (int32_t l = 0; l < p->world.sharding_group; l++) { /* role l: ranks l*R .. l*R + R - 1 */
			if (!agreed(j, t, l * r0, (l + 1) * r0, &v))
				return 0;
			before[t] += v;
		}
	}
	return 1;
}

static void rollback(rs_job *j, int i, const char *why);

void rs__heal_give_up(rs_job *j, const char *why)
{
	int lost = -1;
	RS_WARN("healing failed (%s): rolling back", why);
	for (int32_t r = 0; r < j->cur.nworld && lost < 0; r++)
		if (j->mem.v[j->cur.world[r]].lost)
			lost = j->cur.world[r];
	j->rec.healing = 0;
	j->rec.total--, j->rec.healed--; /* counted again as the rollback */
	j->rec.partials -= j->rec.partial;
	j->rec.partial = 0;
	rs__members_clear_lost(j);
	rollback(j, lost >= 0 ? lost : j->cur.world[0], "was lost, and healing could not rebuild its rows");
}


/* Whether member m stopped at `step`, or can catch up to it (its step failed only in its votes). */
static int reaches(const member *m, int64_t step)
{
	return m->step == step || (m->prepared > 0 && m->prepared == step);
}

/* How many roles (the shards one rank of a replica group holds) have a survivor that reaches `step`. */
static int roles_at(const rs_job *j, int64_t step)
{
	int32_t r0 = groups(j->cur.plan), n = 0;
	for (int32_t l = 0; l < j->cur.plan->world.sharding_group; l++) {
		int held = 0;
		for (int32_t r = l * r0; r < (l + 1) * r0 && !held; r++) {
			const member *m = &j->mem.v[j->cur.world[r]];
			held = !m->lost && reaches(m, step);
		}
		n += held;
	}
	return n;
}

/* Member m of the world drops its model (an abort of the generation) and takes its rows again, as a replacement. */
static void drop_model(rs_job *j, member *m)
{
	m->lost = 1;
	rs__job_send(j, m, rs_proto_make_generation(RS_MSG_ABORT, j->cur.generation, 0, j->rec.why));
}

/*
 * The step the world heals at: the one where the most roles keep a copy,
 * the furthest of equals. A survivor whose step failed only in its last
 * exchange (the votes' all-reduce) holds everything the step's updates
 * need: it counts at that step too, and is asked to catch up to it (it
 * reports paused again, caught up or not). One that prepared a step the
 * heal does not take is asked to catch up to the step it stopped at: it
 * drops the prepared step, whose lookup changed its ZCH tables, and
 * reports paused again with the checksums of the step before. One asked
 * that has not answered within a quarter of --timeout-ms, or was asked
 * for another step than the heal now takes, drops its model. The step
 * into *at; 0 while a survivor is asked or was just dropped (the next tick
 * counts again).
 */
static int catch_up(rs_job *j, int64_t *at)
{
	double now = rs__job_now(j), patience = j->o.timeout_ms / 4000.0;
	int64_t to = -1;
	int most = -1, waiting = 0;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		const member *m = &j->mem.v[j->cur.world[r]];
		for (int k = 0; k < 2 && !m->lost; k++) {
			int64_t step = k ? m->prepared : m->step;
			int n = k && step <= 0 ? -1 : roles_at(j, step);
			if (n >= 0 && (n > most || (n == most && step > to)))
				most = n, to = step;
		}
	}
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		member *m = &j->mem.v[j->cur.world[r]];
		if (m->lost || (m->step == to && m->prepared <= 0))
			continue;
		if (m->catching && (m->catching != to || now - m->catching_at > patience)) {
			RS_WARN("healing: %s %s: it drops its model and takes its rows again from their copies", m->name,
				m->catching != to ? "was asked to catch up to another step" : "did not catch up in time");
			drop_model(j, m);
			waiting = 1;
		} else if (m->step == to) { /* at the step, with the next prepared: that step goes, its ZCH changes too */
			if (!m->catching) {
				RS_INFO("healing: %s stopped at step %lld with step %lld prepared: it drops that step",
					m->name, (long long)m->step, (long long)m->prepared);
				rs__job_send(j, m, rs_proto_make_generation(RS_MSG_CATCH_UP, j->cur.generation, to, NULL));
				m->catching = to, m->catching_at = now;
			}
			waiting = 1;
		} else if (reaches(m, to)) {
			if (!m->catching) {
				RS_INFO("healing: %s stopped at step %lld with step %lld prepared: it catches up", m->name,
					(long long)m->step, (long long)to);
				rs__job_send(j, m, rs_proto_make_generation(RS_MSG_CATCH_UP, j->cur.generation, to, NULL));
				m->catching = to, m->catching_at = now;
			}
			waiting = 1;
		}
	}
	*at = to;
	return !waiting;
}

/*
 * A survivor at another step than `step` drops its model and takes its
 * rows again from their copies at `step`; 0 (healing given up) when some
 * rows are then left with no copy and no checkpoint.
 */
static int drop_apart(rs_job *j, int64_t step)
{
	int apart = 0;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		member *m = &j->mem.v[j->cur.world[r]];
		if (m->lost || m->step == step)
			continue;
		RS_WARN("healing: %s stopped at step %lld, another at step %lld: it drops its model and takes its rows "
			"again from their copies", m->name, (long long)m->step, (long long)step);
		drop_model(j, m);
		apart = 1;
	}
	int whole = apart ? mark_lost(j) : 1;
	if (whole < 0 || (!whole && !go_partial(j))) {
		rs__heal_give_up(j, "the survivors stopped at different steps, and some rows have no copy at either");
		return 0;
	}
	return 1;
}

/*
 * Healing: wait until every survivor reports paused in the lost generation
 * (its step failed, or it stopped at a boundary), bring them to one step
 * (catch_up, drop_apart), check their copies are equal, wait for the
 * replacements (a quarter of --timeout-ms at most); then the paused
 * phase's reshard rebuilds the world (begin_attempt treats the lost
 * members as sending nothing).
 */
static void heal_tick(rs_job *j)
{
	double timeout = j->o.timeout_ms / 1000.0, waited = rs__job_now(j) - j->ph_at;
	int32_t c[RS_MAX_WORKERS];
	int all = 1, pending;
	int64_t step = -1;
	int whole = mark_lost(j);
	if (whole < 0 || (!whole && !go_partial(j))) {
		rs__heal_give_up(j, whole < 0 ? "a member finished, or none lives" : "every copy of some rows is lost");
		return;
	}
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		const member *m = &j->mem.v[j->cur.world[r]];
		all &= m->lost || (m->st == M_PAUSED && m->gen == j->cur.generation);
	}
	int caught_up = all && catch_up(j, &step);
	if (!caught_up) {
		if (waited > timeout)
			rs__heal_give_up(j, "the survivors did not stop within --timeout-ms");
		return;
	}
	if (!drop_apart(j, step))
		return;
	uint64_t *sums = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	int agree = sums && rs__heal_sums(j, sums);
	free(sums);
	if (!agree) {
		rs__heal_give_up(j, "the surviving copies of the lost rows disagree (their checksums differ)");
		return;
	}
	rs__members_candidates(j, c, &pending);
	if ((pending > 0 || (j->rec.partial && rs__ckpt_completing(j))) && waited < timeout / 4)
		return; /* a replacement on its way (one reshard instead of two), or a newer checkpoint to restore from */
	RS_WARN("healing: the survivors stopped at step %lld; rebuilding the lost rows from %s", (long long)step,
		j->rec.partial ? "their replicas, or the newest complete checkpoint where no copy is left" : "their replicas");
	j->cur.step = j->rec.from = j->rec.to = step;
	j->t.first_paused = j->t.paused = rs__job_now(j);
	forget_progress_after(j, step);
	rs__job_set_phase(j, P_PAUSED);
}

void rs__recover_resumed(rs_job *j, const char *restore)
{
	rs_err err = {0};
	char dir[sizeof(j->rec.load)];
	j->rec.healing = j->rec.replica = 1;
	j->rec.partial = restore != NULL;
	snprintf(j->rec.load, sizeof(j->rec.load), "%s", restore ? restore : "");
	j->rec.restored_step = -1;
	if (restore && rs_checkpoint_find(restore, -1, dir, sizeof(dir), &j->rec.restored_step, &err) != RS_OK)
		/* the staging fails on it too: the attempt aborts, and the retry chooses again */
		RS_WARN("healing: the checkpoint %s of the attempt in flight cannot be read: %s", restore, err.msg);
	j->rec.from = j->rec.to = j->cur.step;
	j->rec.started = rs__job_now(j);
	j->rec.total++, j->rec.healed++, j->rec.partials += j->rec.partial;
	snprintf(j->rec.why, sizeof(j->rec.why), "a world member was lost before the coordinator restarted "
		 "(generation %lld, step %lld)", (long long)j->cur.generation, (long long)j->cur.step);
}

/* ---- rolling back --------------------------------------------------------------------- */

/*
 * A member of the lost world said "done" (done_gen: also when it has come
 * back since as a new process): it passed the last step's final collective
 * and the final save, whose ranks agree that every rank's files are
 * written, so every rank ended the last step: the loss came after the end,
 * and the job is complete, in the lost world (taken back when a rollback
 * had dissolved it). 1 when so. Going back instead could not end: finished
 * members exit.
 */
static int ended_anyway(rs_job *j)
{
	int dissolved = !j->cur.world;
	const int32_t *world = dissolved ? j->rec.old : j->cur.world;
	int32_t n = dissolved ? j->rec.nold : j->cur.nworld, r = 0;
	int64_t gen = dissolved ? j->rec.old_gen : j->cur.generation;
	while (r < n && j->mem.v[world[r]].done_gen != gen)
		r++;
	if (r == n)
		return 0;
	RS_WARN("%s; but %s finished the last step, so every rank did: the job is complete", j->rec.why,
		j->mem.v[world[r]].name);
	/* a recovery begun is undone, uncounted: it never ran, and the job stands at its end */
	if (j->rec.healing)
		j->rec.total--, j->rec.healed--, j->rec.partials -= j->rec.partial;
	else if (dissolved)
		j->rec.total--;
	if (dissolved) {
		j->cur.world = j->rec.old, j->cur.nworld = j->rec.nold, j->cur.plan = j->rec.old_plan;
		j->rec.old = NULL, j->rec.nold = 0, j->rec.old_plan = NULL;
	}
	j->rec.started = 0, j->rec.in_a_row = 0;
	j->cur.step = j->o.steps;
	j->rec.healing = j->rec.partial = j->rec.replica = 0;
	rs__members_clear_lost(j);
	rs__recover_free(j);
	rs__cycle_complete(j);
	return 1;
}

void rs__recover(rs_job *j, int i, const char *why)
{
	if (!heal_begin(j, i, why))
		rollback(j, i, why);
}

static void rollback(rs_job *j, int i, const char *why)
{
	member *m = &j->mem.v[i];
	if (j->rec.healing) /* whatever healing was under way: the rollback replaces it, and is counted instead */
		j->rec.total--, j->rec.healed--, j->rec.partials -= j->rec.partial;
	j->rec.healing = j->rec.partial = j->rec.replica = 0;
	rs__members_clear_lost(j);
	char tables[256];
	int64_t near = m->step > rs__ckpt_near(j) ? m->step : rs__ckpt_near(j);
	rs__member_tables(j, i, tables, sizeof(tables));
	snprintf(j->rec.why, sizeof(j->rec.why), "%s %s holding the only copy of rows of %s (generation %lld, near step %lld)",
		 m->name, why, tables[0] ? tables : "its tables", (long long)j->cur.generation, (long long)near);
	if (ended_anyway(j))
		return;
	char load[sizeof(j->rec.load)];
	int64_t to;
	if (!rollback_point(j, near, load, sizeof(load), &to))
		return;
	j->rec.in_a_row = j->rec.total && to == j->rec.to ? j->rec.in_a_row + 1 : 1;
	int limit = j->o.max_attempts > 0 ? j->o.max_attempts : 3;
	if (j->rec.in_a_row > limit) {
		rs__job_fail(j, "%s; gave up after %d recoveries in a row back to step %lld", j->rec.why, limit, (long long)to);
		return;
	}
	dissolve(j);
	j->rec.replica = 0;
	snprintf(j->rec.load, sizeof(j->rec.load), "%s", load);
	j->rec.from = near, j->rec.to = to;
	j->rec.started = rs__job_now(j);
	j->rec.total++;
	/* the schedule's entries already acted on stay done: a rollback does not scale the job again */
	forget_progress_after(j, to);
	rs__emit(j, &(job_event){.kind = EV_RECOVERING, .reason = j->rec.why, .step = to, .detail = load[0] ? load : NULL});
	rs__members_changed(j);
	rs__job_set_phase(j, P_RECOVERING);
}

void rs__recover_rejoined(rs_job *j, int i)
{
	for (int32_t u = 0; u < j->rec.natt; u++) /* first the attempt's: a member that committed it trains it */
		if (j->rec.att[u] == i)
			rs__job_send(j, &j->mem.v[i], rs_proto_make_generation(RS_MSG_ABORT, j->rec.att_gen, 0, j->rec.why));
	for (int32_t r = 0; r < j->rec.nold; r++)
		if (j->rec.old[r] == i)
			rs__job_send(j, &j->mem.v[i], rs_proto_make_generation(RS_MSG_ABORT, j->rec.old_gen, 0, j->rec.why));
}

/*
 * Wait until no member still works in the lost generation (told to drop
 * it, each reports idle once its step failed or it stopped, and a write
 * in flight ended), and for the replacements (a quarter of --timeout-ms
 * at most); then start the new generation over every idle member.
 */
void rs__recover_tick(rs_job *j)
{
	if (ended_anyway(j))
		return;
	if (j->rec.healing) {
		heal_tick(j);
		return;
	}
	int32_t c[RS_MAX_WORKERS];
	int pending, busy = 0;
	double now = rs__job_now(j), timeout = j->o.timeout_ms / 1000.0, waited = now - j->ph_at;
	for (size_t i = 0; i < j->mem.n; i++) {
		const member *m = &j->mem.v[i];
		busy += !rs__member_gone(j, m) && m->st != M_IDLE && m->st != M_DONE;
	}
	if (busy && waited < timeout)
		return;
	int32_t n = rs__members_candidates(j, c, &pending);
	if (n == 0 || (pending > 0 && waited < timeout / 4)) {
		if (n == 0 && waited > 4 * timeout)
			rs__job_fail(j, "%s; no worker came to take its place within %d ms", j->rec.why, 4 * j->o.timeout_ms);
		return;
	}
	RS_WARN("recovery: generation %lld over %d workers, from %s (step %lld; training was near step %lld)",
		(long long)j->att.last_generation + 1, (int)n, j->rec.load[0] ? j->rec.load : "the start",
		(long long)j->rec.to, (long long)j->rec.from);
	/* deleting only when every member's writes of the lost world have ended: it reported idle after them */
	rs__ckpt_rollback(j, j->rec.to, j->rec.from, !busy);
	if (busy)
		RS_WARN("recovery: %d member(s) never gave up the lost generation; its checkpoints after step %lld stay "
			"(complete ones are of the lost run: a later rollback may take one)", busy, (long long)j->rec.to);
	if (rs__cycle_start(j, c, n, j->att.last_generation + 1, j->rec.load[0] ? j->rec.load : NULL, j->rec.to))
		rs__recover_free(j);
}
