/*
 * job_events.c - one fan-out for everything the job reports (see
 * job_event_kind in job_internal.h). rs__emit hands an event to every sink
 * in turn; each sink shows its part of it:
 *
 *   report   the human-readable lines on stdout (or o.report): progress,
 *            each reshard's plan, verification, commit and pause
 *   log      the log's lines (stderr): members coming and going, failures
 *   json     --log-json: one line per progress report, reshard and abort
 *   status   the status stream: phases, members, progress, migration
 *            progress, reshards, and a fresh snapshot after every commit;
 *            also the history and reshard records late clients replay
 *   source   the membership source's events (Kubernetes Events on the
 *            StatefulSet): each reshard, each recovery
 *
 * The cycle decides what happened; the wording of every report lives here.
 */
#include "coordinator/job_internal.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---- report: the human-readable lines --------------------------------------------------- */

/* " in R replica groups of S" for a 2D plan, "" for 1D. */
static const char *layout(const rs_plan *p, char *buf, size_t n)
{
	const rs_world *w = &p->world;
	if (w->sharding_group == w->ranks)
		return "";
	snprintf(buf, n, " in %d replica groups of %d", w->ranks / w->sharding_group, w->sharding_group);
	return buf;
}

static void report(rs_job *j, const job_event *ev)
{
	char buf[64];
	FILE *f = j->o.report ? j->o.report : stdout;
	const reshard_record *r = ev->record;
	switch (ev->kind) {
	case EV_FIRST_STEP:
		fprintf(f, "generation 1 made its first step %.3f s after its %d workers were started (start, join, plan, %s"
			   "first step)\n", ev->seconds, j->cur.nworld, j->o.load ? "load, " : "");
		break;
	case EV_RESHARDED:
		fprintf(f, "generation %lld resumed at step %lld: paused %.3f s for the reshard", (long long)r->generation,
			(long long)r->step, r->pause_s);
		/* the pause ends with rank 0's first step: what the world stopped for, and that step */
		if (r->stopped_s > 0 && r->pause_s > r->stopped_s)
			fprintf(f, " (stopped %.3f s, then its first step %.3f s)", r->stopped_s, r->pause_s - r->stopped_s);
		if (j->mem.scale_at > 0)
			fprintf(f, " (%.3f s from the scale request)", rs__job_now(j) - j->mem.scale_at);
		fprintf(f, "\n");
		break;
	case EV_TEACHER_AUC:
		fprintf(f, "teacher AUC on the held-out samples (the ceiling): %.4f\n", ev->auc);
		break;
	case EV_PROGRESS:
		if (ev->auc >= 0)
			fprintf(f, "step %5lld  loss %.5f  auc %.4f  %8.0f samples/s\n", (long long)ev->step, ev->loss, ev->auc,
				ev->samples_per_s);
		else
			fprintf(f, "step %5lld  loss %.5f              %8.0f samples/s\n", (long long)ev->step, ev->loss,
				ev->samples_per_s);
		break;
	case EV_SCHEDULE:
		fprintf(f, "schedule: at step %lld, scale to %d workers\n", (long long)ev->step, (int)ev->workers);
		break;
	case EV_CHECKPOINT:
		fprintf(f, "checkpoint of step %lld complete: %s (%.2f MiB, %.3f s from the first rank's files to the "
			   "index)\n", (long long)ev->step, ev->detail, ev->moved / 1048576.0, ev->seconds);
		break;
	case EV_ATTEMPT: {
		char restores[64] = "";
		if (j->att.restored_bytes) /* partial recovery */
			snprintf(restores, sizeof(restores), " and restores %.2f MiB from the checkpoint",
				 j->att.restored_bytes / 1048576.0);
		fprintf(f, "generation %lld: %d -> %d workers%s at step %lld; the plan moves %.2f MiB%s (lower bound %.2f MiB), "
			   "planned in %.1f ms\n",
			(long long)j->att.generation, j->cur.nworld, j->att.nworld, layout(j->att.plan, buf, sizeof(buf)),
			(long long)j->cur.step, j->att.plan->summary.moved_bytes / 1048576.0, restores,
			j->att.plan->summary.min_moved_bytes / 1048576.0, j->t.plan_s * 1e3);
		break;
	}
	case EV_ABORTED:
		fprintf(f, "generation %lld aborted: %s; every member keeps generation %lld\n", (long long)j->att.generation,
			ev->reason, (long long)j->cur.generation);
		break;
	case EV_STAGED: {
		double mib = ev->moved / 1048576.0, migrate = j->t.staged - j->t.attempt;
		int64_t rounds = 0, again = 0, again_bytes = 0; /* pre-copy: the most rounds a member ran while training */
		for (int32_t u = 0; u < j->att.nuni; u++) {
			const rs_msg_staged *s = &j->mem.v[j->att.uni[u]].staged;
			rounds = s->background_rounds > rounds ? s->background_rounds : rounds;
			again += s->dirty_rows, again_bytes += s->dirty_bytes;
		}
		fprintf(f, "generation %lld: staged and verified: moved %.2f MiB (%" PRIu64 " B; the plan diff: %" PRIu64
			   " B) in %.3f s (connect %.3f s, prepare %.3f s, move %.3f s", (long long)j->att.generation, mib,
			ev->moved, ev->diff, migrate, ev->connect_s, ev->prepare_s, ev->move_s);
		if (j->att.precopy) /* most of it moved before the pause: a rate over the pause's move would mean nothing */
			fprintf(f, " for what was left); every table's checksum matches; pre-copied in %lld rounds while "
				   "training, %lld rows (%.2f MiB) updated since sent again at the pause\n",
				(long long)rounds, (long long)again, (double)again_bytes / 1048576.0);
		else
			fprintf(f, " at %.0f MiB/s); every table's checksum matches\n", ev->move_s > 0 ? mib / ev->move_s : 0.0);
		break;
	}
	case EV_COMMITTED: {
		double drain = j->t.paused - j->t.first_paused, wait = j->t.attempt - j->t.paused - j->t.plan_s;
		fprintf(f, "generation %lld committed: %d -> %d workers; so far: drain %.3f s, waiting for members %.3f s, "
			   "plan %.3f s, migrate %.3f s, commit %.3f s\n",
			(long long)j->cur.generation, j->t.from, j->cur.nworld, drain, wait > 0 ? wait : 0, j->t.plan_s,
			j->t.staged - j->t.attempt, j->t.committed - j->t.staged);
		break;
	}
	case EV_RECOVERING:
		if (j->rec.partial)
			fprintf(f, "recovery: %s; restoring the rows lost with every copy from the latest checkpoint, the "
				   "others keep theirs, no rollback\n", ev->reason);
		else if (j->rec.replica)
			fprintf(f, "recovery: %s; rebuilding its rows from their replicas, no rollback\n", ev->reason);
		else
			fprintf(f, "recovery: %s; rolling back to %s (step %lld)\n", ev->reason,
				ev->detail ? ev->detail : "the start", (long long)ev->step);
		break;
	case EV_RECOVERED:
		if (j->rec.partial)
			fprintf(f, "recovered: generation %lld (%d worker%s) made step %lld, %.3f s after the loss (partial: "
				   "%lld stale rows restored from step %lld, %lld steps old; no step lost)\n",
				(long long)j->cur.generation, j->cur.nworld, j->cur.nworld == 1 ? "" : "s", (long long)ev->step,
				ev->seconds, (long long)j->rec.stale_rows, (long long)j->rec.restored_step,
				(long long)(j->rec.to - j->rec.restored_step));
		else if (j->rec.replica)
			fprintf(f, "recovered: generation %lld (%d worker%s) made step %lld, %.3f s after the loss (healed from "
				   "replicas, no step lost)\n",
				(long long)j->cur.generation, j->cur.nworld, j->cur.nworld == 1 ? "" : "s", (long long)ev->step,
				ev->seconds);
		else
			fprintf(f, "recovered: generation %lld (%d worker%s) made step %lld, %.3f s after the loss (rolled back "
				   "%lld steps)\n",
				(long long)j->cur.generation, j->cur.nworld, j->cur.nworld == 1 ? "" : "s", (long long)ev->step,
				ev->seconds, (long long)(j->rec.from - j->rec.to));
		break;
	case EV_DONE:
		fprintf(f, "training done: %d workers, %lld steps, %lld generation(s), %d reshard(s)\n", j->cur.nworld,
			(long long)j->o.steps, (long long)j->cur.generation, j->rep.reshards);
		break;
	default:
		return;
	}
	fflush(f);
}

/* ---- log: the log's lines --------------------------------------------------------------- */

/* At the job's end, done or failed: what the coordinator itself took, for sizing it (its process: no worker counted). */
static void log_usage(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		RS_INFO("the coordinator used %.2f s of CPU (user %.2f, system %.2f) and at most %.1f MiB of memory",
			(double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
			ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
			ru.ru_maxrss / 1024.0);
}

static void log_line(rs_job *j, const job_event *ev)
{
	char buf[64];
	if (ev->kind == EV_DONE || ev->kind == EV_FAILED)
		log_usage();
	switch (ev->kind) {
	case EV_MEMBER:
		if (ev->quiet)
			break;
		if (!strcmp(ev->what, "joined"))
			RS_INFO("%s joined (transport at %s)", ev->name, ev->addr);
		else if (!strcmp(ev->what, "draining"))
			RS_INFO("%s asks to leave (%s)", ev->name, ev->detail);
		else
			RS_INFO("%s %s", ev->name, ev->detail);
		break;
	case EV_STARTED:
		RS_INFO("generation 1: %d workers%s; plan imbalance %.3f", j->cur.nworld, layout(j->cur.plan, buf, sizeof(buf)),
			j->cur.plan->summary.imbalance);
		break;
	case EV_RESUMED:
		RS_INFO("generation %lld resumes at step %lld (no membership change to act on)", (long long)j->cur.generation,
			(long long)j->cur.step);
		break;
	case EV_FAILED:
		RS_ERROR("%s", j->why);
		break;
	default:
		break;
	}
}

/* ---- json: --log-json ------------------------------------------------------------------- */

/* A recovery's event as --log-json and the status stream show it (a new reference, or NULL). */
static json_t *recovery_json(const rs_job *j, const job_event *ev, const char *what)
{
	/* a partial recovery's checkpoint is chosen when its reshard begins: named once it trains on */
	int named = j->rec.load[0] && (!j->rec.partial || ev->kind == EV_RECOVERED);
	json_t *e = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s?}", "event", what, "kind", rs__recovery_kind(j), "from_step",
			      (json_int_t)j->rec.from, "to_step", (json_int_t)j->rec.to, "generation",
			      (json_int_t)j->cur.generation, "checkpoint", named ? j->rec.load : NULL);
	if (e && ev->kind == EV_RECOVERING)
		json_object_set_new(e, "reason", json_string(ev->reason));
	if (e && ev->kind == EV_RECOVERED) {
		json_object_set_new(e, "seconds", json_real(ev->seconds));
		json_object_set_new(e, "workers", json_integer(j->cur.nworld));
	}
	if (e && j->rec.partial && ev->kind == EV_RECOVERED) {
		json_object_set_new(e, "restored_step", json_integer(j->rec.restored_step));
		json_object_set_new(e, "stale_rows", json_integer(j->rec.stale_rows));
	}
	return e;
}

static void json_line(rs_job *j, const job_event *ev)
{
	json_t *line = NULL;
	const reshard_record *r = ev->record;
	if (!j->o.log_json)
		return;
	switch (ev->kind) {
	case EV_PROGRESS:
		line = json_pack("{s:I, s:I, s:f, s:f}", "generation", (json_int_t)j->cur.generation, "step",
				 (json_int_t)ev->step, "loss", ev->loss, "samples_per_s", ev->samples_per_s);
		if (line && ev->auc >= 0)
			json_object_set_new(line, "auc", json_real(ev->auc));
		break;
	case EV_RESHARDED:
		line = json_pack("{s:s, s:I, s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "event", "reshard", "generation",
				 (json_int_t)r->generation, "step", (json_int_t)r->step, "workers", (int)r->to, "pause_s",
				 r->pause_s, "stopped_s", r->stopped_s, "plan_s", j->t.plan_s, "migrate_s", r->migrate_s, "commit_s",
				 j->t.committed - j->t.staged, "resume_s", rs__job_now(j) - j->t.committed);
		break;
	case EV_ABORTED:
		line = json_pack("{s:s, s:I, s:s}", "event", "abort", "generation", (json_int_t)j->att.generation, "reason",
				 ev->reason);
		break;
	case EV_CHECKPOINT:
		line = json_pack("{s:s, s:I, s:s, s:I}", "event", "checkpoint", "step", (json_int_t)ev->step, "dir",
				 ev->detail, "bytes", (json_int_t)ev->moved);
		break;
	case EV_RECOVERING:
		line = recovery_json(j, ev, "recovering");
		break;
	case EV_RECOVERED:
		line = recovery_json(j, ev, "recovered");
		break;
	default:
		return;
	}
	if (line && json_dumpf(line, j->o.log_json, JSON_COMPACT) == 0) {
		fputc('\n', j->o.log_json);
		fflush(j->o.log_json);
	}
	json_decref(line);
}

/* ---- status: the status stream and what late clients replay ----------------------------- */

static void publish(rs_job *j, json_t *ev)
{
	if (ev && j->io.publish) {
		json_object_set_new(ev, "time", json_real(rs__unix_now()));
		j->io.publish(j->io.ctx, ev);
	}
	json_decref(ev);
}

/* Set "type" of ev (a new reference, or NULL) and return it. */
static json_t *typed(json_t *ev, const char *type)
{
	if (ev)
		json_object_set_new(ev, "type", json_string(type));
	return ev;
}

static json_t *phase_event(const rs_job *j)
{
	json_t *ev = json_pack("{s:s, s:s, s:I, s:I, s:i}", "type", "phase", "phase", rs__phase_names[j->ph], "generation",
			       (json_int_t)j->cur.generation, "step", (json_int_t)rs__job_step(j), "world",
			       (int)j->cur.nworld);
	if (ev && j->att.generation && (j->ph == P_MIGRATING || j->ph == P_COMMITTING || j->ph == P_ABORTING)) {
		json_object_set_new(ev, "attempt", json_integer(j->att.generation));
		json_object_set_new(ev, "to", json_integer(j->att.nworld));
	}
	if (ev && j->ph == P_FAILED)
		json_object_set_new(ev, "error", json_string(j->why));
	return ev;
}

/* Keep a progress report for the history late clients replay. */
static void record_progress(rs_job *j, const job_event *ev)
{
	history_point h = {j->cur.generation, ev->step, ev->loss, ev->auc, ev->samples_per_s};
	j->rep.last = h;
	if (ev->auc >= 0)
		j->rep.last_auc = ev->auc;
	if (!j->rep.history && !(j->rep.history = calloc(HISTORY_MAX, sizeof(*j->rep.history))))
		return;
	j->rep.history[(j->rep.history_head + j->rep.nhistory) % HISTORY_MAX] = h;
	if (j->rep.nhistory < HISTORY_MAX)
		j->rep.nhistory++;
	else
		j->rep.history_head = (j->rep.history_head + 1) % HISTORY_MAX;
}

/* Keep a committed reshard for /metrics and late clients. */
static void record_reshard(rs_job *j, const reshard_record *r)
{
	if (j->rep.nlog == RESHARDS_MAX) {
		memmove(j->rep.log, j->rep.log + 1, sizeof(j->rep.log[0]) * (RESHARDS_MAX - 1));
		j->rep.nlog--;
	}
	j->rep.log[j->rep.nlog++] = *r;
	j->rep.moved_total += r->moved_bytes;
	j->rep.pause_sum += r->pause_s;
	j->rep.stopped_sum += r->stopped_s;
	int b = 0;
	while (b < 9 && r->pause_s > rs__pause_bounds[b])
		b++;
	j->rep.pause_buckets[b]++;
}

void rs__job_status_hold(rs_job *j)
{
	int stopped = j->ph != P_DONE && j->ph != P_FAILED &&
		      (j->cur.pause_sent || j->cur.pausing || j->cur.resume_step >= 0);
	if (j->io.hold)
		j->io.hold(j->io.ctx, stopped);
}

#define MIGRATION_EVERY_S 0.1 /* the least time between two migration messages but the last */

static void status(rs_job *j, const job_event *ev)
{
	if (ev->kind == EV_RESHARDED)
		record_reshard(j, ev->record);
	if (ev->kind == EV_PROGRESS)
		record_progress(j, ev);
	rs__job_status_hold(j);
	if (!j->io.publish)
		return; /* no status stream (a test's job, or before the server is up): nothing to build */
	switch (ev->kind) {
	case EV_PHASE:
		publish(j, phase_event(j));
		break;
	case EV_MEMBER: {
		json_t *m = json_pack("{s:s, s:s, s:s, s:I}", "type", "member", "event", ev->what, "name", ev->name,
				      "generation", (json_int_t)j->cur.generation);
		if (m && ev->detail)
			json_object_set_new(m, "detail", json_string(ev->detail));
		publish(j, m);
		break;
	}
	case EV_PROGRESS:
		publish(j, typed(rs__history_json(&j->rep.last), "progress"));
		break;
	case EV_MIGRATION: {
		double now = rs__job_now(j);
		j->rep.migration_held = !ev->force && now - j->rep.last_migration_event < MIGRATION_EVERY_S;
		if (j->rep.migration_held)
			break; /* at most ten a second, whatever the workers send: the latest goes once it may */
		j->rep.last_migration_event = now;
		publish(j, typed(rs__job_migration_json(j), "migration"));
		break;
	}
	case EV_RESHARDED:
		publish(j, typed(rs__reshard_json(ev->record), "reshard"));
		break;
	case EV_ABORTED: /* the attempt is over: a pre-copy's ends while the phase stays training */
		publish(j, json_pack("{s:s, s:I, s:s, s:I}", "type", "aborted", "generation", (json_int_t)j->att.generation,
				     "reason", ev->reason, "kept", (json_int_t)j->cur.generation));
		break;
	case EV_CHECKPOINT:
		publish(j, json_pack("{s:s, s:I, s:s, s:I}", "type", "checkpoint", "step", (json_int_t)ev->step, "dir",
				     ev->detail, "bytes", (json_int_t)ev->moved));
		break;
	case EV_RECOVERING:
	case EV_RECOVERED: {
		json_t *e = recovery_json(j, ev, ev->kind == EV_RECOVERING ? "recovering" : "recovered");
		if (e)
			json_object_del(e, "event");
		publish(j, typed(e, ev->kind == EV_RECOVERING ? "recovering" : "recovered"));
		if (ev->kind == EV_RECOVERED)
			publish(j, rs__job_snapshot(j)); /* a new world and plan */
		break;
	}
	case EV_STARTED:
	case EV_COMMITTED:
		publish(j, rs__job_snapshot(j)); /* a new world and plan: status clients start over from it */
		break;
	default:
		break;
	}
}

/* A migration progress held back by the limit goes out once the limit allows, while its attempt lasts. */
void rs__job_status_tick(rs_job *j)
{
	if (!j->rep.migration_held || rs__job_now(j) - j->rep.last_migration_event < MIGRATION_EVERY_S)
		return;
	j->rep.migration_held = 0;
	if (j->att.generation && j->att.plan)
		rs__emit(j, &(job_event){.kind = EV_MIGRATION});
}

/* ---- source: the membership source's events --------------------------------------------- */

static void source(rs_job *j, const job_event *ev)
{
	const reshard_record *r = ev->record;
	char words[1024];
	int warning = 0;
	const char *reason = NULL;
	if (!j->src.event)
		return;
	switch (ev->kind) {
	case EV_STARTED:
		reason = "Started";
		snprintf(words, sizeof(words), "Generation 1: %d workers train from step %lld", j->cur.nworld,
			 (long long)j->cur.step);
		break;
	case EV_MEMBER:
		if (strcmp(ev->what, "lost") != 0 || ev->quiet) /* quiet: drained and committed out, or finished */
			return;
		warning = 1, reason = "WorkerLost";
		snprintf(words, sizeof(words), "%s was lost: %s", ev->name, ev->detail ? ev->detail : "it went away");
		break;
	case EV_ABORTED:
		warning = 1, reason = "ReshardAborted";
		snprintf(words, sizeof(words), "Generation %lld aborted: %s; every member keeps generation %lld",
			 (long long)j->att.generation, ev->reason, (long long)j->cur.generation);
		break;
	case EV_RESHARDED:
		reason = "Resharded";
		snprintf(words, sizeof(words), "Resharded generation %lld: %d -> %d workers, moved %.2f MiB in %.2f s "
			 "(paused %.2f s)", (long long)r->generation, r->from, r->to, r->moved_bytes / 1048576.0, r->migrate_s,
			 r->pause_s);
		break;
	case EV_RECOVERING:
		warning = 1, reason = "Recovering";
		if (j->rec.partial)
			snprintf(words, sizeof(words), "%s; restoring the rows lost with every copy from the latest "
				 "checkpoint, the others keep theirs", ev->reason);
		else if (j->rec.replica)
			snprintf(words, sizeof(words), "%s; rebuilding its rows from their replicas", ev->reason);
		else
			snprintf(words, sizeof(words), "%s; rolling back to step %lld%s%s", ev->reason, (long long)ev->step,
				 ev->detail ? " from " : "", ev->detail ? ev->detail : "");
		break;
	case EV_RECOVERED:
		reason = "Recovered";
		snprintf(words, sizeof(words), "Generation %lld (%d workers) trains again from step %lld, %.2f s "
			 "after the loss", (long long)j->cur.generation, j->cur.nworld, (long long)j->rec.to, ev->seconds);
		break;
	case EV_DONE:
		reason = "Completed";
		snprintf(words, sizeof(words), "Trained to step %lld on %d workers in %lld generation(s)%s%s; the worker "
			 "StatefulSet is scaled to 0 next", (long long)j->o.steps, j->cur.nworld, (long long)j->cur.generation,
			 j->o.save ? "; the model is in " : "", j->o.save ? j->o.save : "");
		break;
	case EV_FAILED:
		warning = 1, reason = "Failed";
		snprintf(words, sizeof(words), "The job failed: %s", j->why);
		break;
	default:
		return;
	}
	j->src.event(j->src.ctx, warning, reason, words);
}

void rs__emit(rs_job *j, const job_event *ev)
{
	log_line(j, ev);
	report(j, ev);
	json_line(j, ev);
	status(j, ev);
	source(j, ev);
}
