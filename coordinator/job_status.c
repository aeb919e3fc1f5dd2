/*
 * job_status.c - what the job shows: the status stream's snapshot and the
 * JSON of its events (README, "Status stream"), the Prometheus text of /metrics,
 * /readyz, and the dashboard page (coordinator/dashboard.html, built into
 * the binary). Everything here reads the job's state; nothing changes the
 * training, so the status stream stays read-only by construction.
 */
#include "coordinator/job_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The dashboard page, embedded at build time (see the Makefile's rule for this object). */
__asm__(".section .rodata\n"
	".global rs_dashboard_html\n"
	".global rs_dashboard_html_end\n"
	"rs_dashboard_html:\n"
	".incbin \"coordinator/dashboard.html\"\n"
	"rs_dashboard_html_end:\n"
	".previous\n");
extern const char rs_dashboard_html[], rs_dashboard_html_end[];

static const char *const member_states[] = {"unknown", "idle", "training", "paused", "staging", "staged",
					     "committed", "done"};

static int32_t rank_of(const rs_job *j, int i)
{
	for (int32_t r = 0; r < j->cur.nworld; r++)
		if (j->cur.world[r] == i)
			return r;
	return -1;
}

json_t *rs__history_json(const history_point *h)
{
	json_t *p = json_pack("{s:I, s:I, s:f, s:f}", "generation", (json_int_t)h->generation, "step",
			      (json_int_t)h->step, "loss", h->loss, "samples_per_s", h->samples_per_s);
	if (p && h->auc >= 0)
		json_object_set_new(p, "auc", json_real(h->auc));
	return p;
}

json_t *rs__reshard_json(const reshard_record *r)
{
	return json_pack("{s:I, s:I, s:i, s:i, s:f, s:f, s:f, s:I}", "generation", (json_int_t)r->generation, "step",
			 (json_int_t)r->step, "from", (int)r->from, "to", (int)r->to, "pause_s", r->pause_s, "stopped_s",
			 r->stopped_s, "migrate_s", r->migrate_s, "moved_bytes", (json_int_t)r->moved_bytes);
}

/* The last recovery as the status stream's recovering/recovered events show it, or JSON null (a new reference). */
static json_t *last_recovery(const rs_job *j)
{
	if (!j->rec.total)
		return json_null();
	json_t *r = json_pack("{s:s, s:s, s:I, s:I, s:s}", "type", j->rec.started > 0 ? "recovering" : "recovered",
			      "kind", rs__recovery_kind(j), "from_step", (json_int_t)j->rec.from, "to_step", (json_int_t)j->rec.to,
			      "reason", j->rec.why);
	if (r && !(j->rec.started > 0))
		json_object_set_new(r, "seconds", json_real(j->rec.last_s));
	if (r && j->rec.replica && j->rec.partial && !(j->rec.started > 0)) {
		json_object_set_new(r, "restored_step", json_integer(j->rec.restored_step));
		json_object_set_new(r, "stale_rows", json_integer(j->rec.stale_rows));
	}
	return r ? r : json_null();
}

/* The attempt's progress: per pair (by worker name) and in all. */
json_t *rs__job_migration_json(const rs_job *j)
{
	json_t *pairs = json_array();
	uint64_t moved = 0, total = 0;
	for (int i = 0; pairs && i < j->att.npairs; i++) {
		const pair_progress *p = &j->att.pairs[i];
		moved += p->bytes;
		total += p->total;
		json_array_append_new(pairs, json_pack("{s:s, s:s, s:I, s:I}", "src", j->mem.v[j->att.uni[p->src]].name, "dst",
						       j->mem.v[j->att.uni[p->dst]].name, "bytes", (json_int_t)p->bytes, "total",
						       (json_int_t)p->total));
	}
	int done = 0; /* pre-copy: the members whose background rounds are done */
	for (int32_t u = 0; j->att.precopy && u < j->att.nuni; u++)
		done += j->mem.v[j->att.uni[u]].precopied == j->att.generation;
	return json_pack("{s:I, s:i, s:i, s:I, s:I, s:o, s:b, s:i, s:i}", "generation", (json_int_t)j->att.generation,
			 "from", (int)j->cur.nworld, "to", (int)j->att.nworld, "moved", (json_int_t)moved, "total",
			 (json_int_t)total, "pairs", pairs ? pairs : json_array(), "precopy", j->att.precopy, "members",
			 (int)j->att.nuni, "precopied", done);
}

json_t *rs__job_snapshot(const rs_job *j)
{
	json_t *members = json_array(), *history = json_array(), *reshards = json_array();
	for (size_t i = 0; members && i < j->mem.n; i++) {
		const member *m = &j->mem.v[i];
		int32_t r = rank_of(j, (int)i);
		/* one that left (drained and committed out, or gone) and holds nothing: in the events, not the members */
		if (r < 0 && !rs__member_in_union(j, (int)i) && (m->leaving || rs__member_gone(j, m)))
			continue;
		uint64_t mem = j->cur.plan && r >= 0 && r < j->cur.plan->world.ranks ? j->cur.plan->ranks[r].memory : 0;
		json_array_append_new(members,
				      json_pack("{s:s, s:o, s:s, s:b, s:b, s:b, s:I, s:f, s:I}", "name", m->name, "rank",
						r >= 0 ? json_integer(r) : json_null(), "state", member_states[m->st],
						"connected", m->conn != NULL, "leaving", m->leaving, "gone",
						m->exited || m->replaced, "step", (json_int_t)m->step, "samples_per_s",
						m->samples_per_s, "memory", (json_int_t)mem));
	}
	for (size_t k = 0; history && k < j->rep.nhistory; k++)
		json_array_append_new(history, rs__history_json(&j->rep.history[(j->rep.history_head + k) % HISTORY_MAX]));
	for (int k = 0; reshards && k < j->rep.nlog; k++)
		json_array_append_new(reshards, rs__reshard_json(&j->rep.log[k]));
	json_t *snap = json_pack("{s:s, s:i, s:f, s:{s:s, s:I, s:s?}, s:s, s:I, s:I, s:i, s:o, s:o, s:o, s:o, s:o, s:i, s:s?, s:o}",
				 "type", "snapshot", "version", 1, "time", rs__unix_now(), "job", "config",
				 j->o.config_path ? j->o.config_path : "", "steps", (json_int_t)j->o.steps, "save", j->o.save,
				 "phase", rs__phase_names[j->ph], "generation", (json_int_t)j->cur.generation, "step",
				 (json_int_t)rs__job_step(j), "world", (int)j->cur.nworld, "members", members ? members : json_array(),
				 "plan", j->cur.plan ? rs_plan_to_json(j->cur.plan) : json_null(), "attempt",
				 j->att.generation && j->att.plan ? rs__job_migration_json(j) : json_null(), "history",
				 history ? history : json_array(), "reshards", reshards ? reshards : json_array(),
				 "status_clients", j->io.status_clients ? j->io.status_clients(j->io.ctx) : 0, "error",
				 j->ph == P_FAILED ? j->why : NULL, "recovery", last_recovery(j));
	return snap;
}

const double rs__pause_bounds[9] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

/* ---- HTTP ---------------------------------------------------------------------------------- */

typedef struct text {
	char *buf;
	size_t len, cap;
	int oom;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		size_t room = t->cap - t->len;
		va_start(ap, fmt);
		int n = t->oom ? 0 : vsnprintf(t->buf ? t->buf + t->len : NULL, room, fmt, ap);
		va_end(ap);
		if (t->oom || n < 0)
			return;
		if ((size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = (t->cap + (size_t)n + 1) * 2;
		char *nb = realloc(t->buf, cap);
		if (!nb) {
			t->oom = 1;
			return;
		}
		t->buf = nb;
		t->cap = cap;
	}
}

static void gauge(text *t, const char *name, const char *help, double v)
{
	add(t, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static char *metrics(const rs_job *j, size_t *len)
{
	text t = {0};
	gauge(&t, "rowshift_generation", "The committed generation.", (double)j->cur.generation);
	gauge(&t, "rowshift_members", "Workers in the current generation's world.", (double)j->cur.nworld);
	add(&t, "# HELP rowshift_phase The job's phase (1 for the current one).\n# TYPE rowshift_phase gauge\n");
	for (int p = 0; p <= P_FAILED; p++)
		add(&t, "rowshift_phase{phase=\"%s\"} %d\n", rs__phase_names[p], (int)j->ph == p);
	add(&t, "# HELP rowshift_reshards_total Reshards committed.\n# TYPE rowshift_reshards_total counter\n"
		"rowshift_reshards_total %d\n", j->rep.reshards);
	add(&t, "# HELP rowshift_reshard_aborts_total Reshard attempts aborted.\n"
		"# TYPE rowshift_reshard_aborts_total counter\nrowshift_reshard_aborts_total %d\n", j->rep.aborts);
	add(&t, "# HELP rowshift_recoveries_total Recoveries from a lost world member, by kind.\n"
		"# TYPE rowshift_recoveries_total counter\nrowshift_recoveries_total{kind=\"rollback\"} %d\n"
		"rowshift_recoveries_total{kind=\"replica\"} %d\nrowshift_recoveries_total{kind=\"partial\"} %d\n",
		j->rec.total - j->rec.healed, j->rec.healed - j->rec.partials, j->rec.partials);
	add(&t, "# HELP rowshift_recovery_stale_rows_total Rows restored from a checkpoint by partial recoveries "
		"(ZCH tables: slots).\n# TYPE rowshift_recovery_stale_rows_total counter\n"
		"rowshift_recovery_stale_rows_total %lld\n", (long long)j->rec.stale_total);
	add(&t, "# HELP rowshift_recovery_seconds Time from a loss to the recovered generation's first step.\n"
		"# TYPE rowshift_recovery_seconds summary\nrowshift_recovery_seconds_sum %.6f\n"
		"rowshift_recovery_seconds_count %d\n", j->rec.seconds_sum, j->rec.done);
	add(&t, "# HELP rowshift_reshard_pause_seconds Training time lost to each reshard.\n"
		"# TYPE rowshift_reshard_pause_seconds histogram\n");
	int cum = 0;
	for (int b = 0; b < 10; b++) {
		cum += j->rep.pause_buckets[b];
		if (b < 9)
			add(&t, "rowshift_reshard_pause_seconds_bucket{le=\"%g\"} %d\n", rs__pause_bounds[b], cum);
		else
			add(&t, "rowshift_reshard_pause_seconds_bucket{le=\"+Inf\"} %d\n", cum);
	}
	add(&t, "rowshift_reshard_pause_seconds_sum %.6f\nrowshift_reshard_pause_seconds_count %d\n", j->rep.pause_sum, cum);
	add(&t, "# HELP rowshift_reshard_stopped_seconds_total Of the reshards' pauses, the time until every member had "
		"committed (the rest: rank 0's first step after it).\n# TYPE rowshift_reshard_stopped_seconds_total counter\n"
		"rowshift_reshard_stopped_seconds_total %.6f\n", j->rep.stopped_sum);
	add(&t, "# HELP rowshift_moved_bytes_total Bytes of rows and optimizer state moved by committed reshards.\n"
		"# TYPE rowshift_moved_bytes_total counter\nrowshift_moved_bytes_total %llu\n",
	    (unsigned long long)j->rep.moved_total);
	gauge(&t, "rowshift_step", "The last step rank 0 reported.", (double)j->rep.last.step);
	gauge(&t, "rowshift_samples_per_second", "Training throughput at the last report.", j->rep.last.samples_per_s);
	gauge(&t, "rowshift_loss", "Mean log loss of the last reported step.", j->rep.last.loss);
	if (j->rep.last_auc > 0)
		gauge(&t, "rowshift_auc", "Held-out AUC at the last evaluation.", j->rep.last_auc);
	add(&t, "# HELP rowshift_member_step_lag Steps a member's last report trails rank 0's.\n"
		"# TYPE rowshift_member_step_lag gauge\n");
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		const member *m = &j->mem.v[j->cur.world[r]];
		add(&t, "rowshift_member_step_lag{member=\"%s\",rank=\"%d\"} %lld\n", m->name, r,
		    (long long)(j->rep.last.step - m->step > 0 ? j->rep.last.step - m->step : 0));
	}
	gauge(&t, "rowshift_status_clients", "Clients of the status stream.",
	      j->io.status_clients ? (double)j->io.status_clients(j->io.ctx) : 0);
	if (t.oom) {
		free(t.buf);
		return NULL;
	}
	*len = t.len;
	return t.buf;
}

int rs__job_http_get(void *ctx, const char *path, char **body, size_t *len, const char **content_type)
{
	const rs_job *j = ctx;
	*body = NULL;
	if (!strcmp(path, "/") || !strcmp(path, "/index.html")) {
		*len = (size_t)(rs_dashboard_html_end - rs_dashboard_html);
		if ((*body = malloc(*len + 1)))
			memcpy(*body, rs_dashboard_html, *len);
		*content_type = "text/html; charset=utf-8";
		return 200;
	}
	if (!strcmp(path, "/metrics")) {
		*body = metrics(j, len);
		*content_type = "text/plain; version=0.0.4";
		return 200;
	}
	if (!strcmp(path, "/readyz")) {
		int ready = j->ph != P_STARTING && j->ph != P_FAILED; /* done: serving the status is its job then */
		*body = strdup(ready ? "ready\n" : "not ready\n");
		*len = *body ? strlen(*body) : 0;
		*content_type = "text/plain";
		return ready ? 200 : 503;
	}
	return 404;
}
