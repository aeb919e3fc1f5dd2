/*
 * job_status.c - what the job shows: the status stream's snapshot and
 * events (README, "Status stream"), the Prometheus text of /metrics,
 * /readyz, and the dashboard page (coordinator/dashboard.html, built into
 * the binary). Everything here reads the job's state; nothing changes the
 * training, so the status stream stays read-only by construction.
 */
#include "coordinator/job_internal.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/plandiff.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double unix_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void rs__job_publish(rs_job *j, json_t *ev)
{
	if (j->srv && ev) {
		json_object_set_new(ev, "time", json_real(unix_now()));
		rs_server_publish(j->srv, ev);
	}
	json_decref(ev);
}

int64_t rs__job_step(const rs_job *j) { return j->last.step > j->step ? j->last.step : j->step; }

static int32_t rank_of(const rs_job *j, int i)
{
	for (int32_t r = 0; r < j->nworld; r++)
		if (j->world[r] == i)
			return r;
	return -1;
}

static json_t *history_json(const history_point *h)
{
	json_t *p = json_pack("{s:I, s:I, s:f, s:f}", "generation", (json_int_t)h->generation, "step",
			      (json_int_t)h->step, "loss", h->loss, "samples_per_s", h->samples_per_s);
	if (p && h->auc >= 0)
		json_object_set_new(p, "auc", json_real(h->auc));
	return p;
}

static json_t *reshard_json(const reshard_record *r)
{
	return json_pack("{s:I, s:I, s:i, s:i, s:f, s:f, s:I}", "generation", (json_int_t)r->generation, "step",
			 (json_int_t)r->step, "from", (int)r->from, "to", (int)r->to, "pause_s", r->pause_s, "migrate_s",
			 r->migrate_s, "moved_bytes", (json_int_t)r->moved_bytes);
}

/* The attempt's progress: per pair (by worker name) and in all. */
static json_t *migration_json(const rs_job *j)
{
	json_t *pairs = json_array();
	uint64_t moved = 0, total = 0;
	for (int i = 0; pairs && i < j->npairs; i++) {
		const pair_progress *p = &j->pairs[i];
		moved += p->bytes;
		total += p->total;
		json_array_append_new(pairs, json_pack("{s:s, s:s, s:I, s:I}", "src", j->m[j->uni[p->src]].name, "dst",
						       j->m[j->uni[p->dst]].name, "bytes", (json_int_t)p->bytes, "total",
						       (json_int_t)p->total));
	}
	return json_pack("{s:I, s:i, s:i, s:I, s:I, s:o}", "generation", (json_int_t)j->agen, "from", (int)j->nworld,
			 "to", (int)j->aworld, "moved", (json_int_t)moved, "total", (json_int_t)total, "pairs",
			 pairs ? pairs : json_array());
}

json_t *rs__job_snapshot(const rs_job *j)
{
	json_t *members = json_array(), *history = json_array(), *reshards = json_array();
	for (size_t i = 0; members && i < j->nm; i++) {
		const member *m = &j->m[i];
		int32_t r = rank_of(j, (int)i);
		uint64_t mem = j->plan && r >= 0 && r < j->plan->world.ranks ? j->plan->ranks[r].memory : 0;
		json_array_append_new(members,
				      json_pack("{s:s, s:o, s:s, s:b, s:b, s:b, s:I, s:f, s:I}", "name", m->name, "rank",
						r >= 0 ? json_integer(r) : json_null(), "state", member_states[m->st],
						"connected", m->conn != NULL, "leaving", m->leaving, "gone",
						m->exited || m->replaced, "step", (json_int_t)m->step, "samples_per_s",
						m->samples_per_s, "memory", (json_int_t)mem));
	}
	for (size_t k = 0; history && k < j->nhistory; k++)
		json_array_append_new(history, history_json(&j->history[(j->history_head + k) % HISTORY_MAX]));
	for (int k = 0; reshards && k < j->nreshard_log; k++)
		json_array_append_new(reshards, reshard_json(&j->reshard_log[k]));
	json_t *snap = json_pack("{s:s, s:i, s:f, s:{s:s, s:I, s:s?}, s:s, s:I, s:I, s:i, s:o, s:o, s:o, s:o, s:o, s:i, s:s?}",
				 "type", "snapshot", "version", 1, "time", unix_now(), "job", "config",
				 j->o.config_path ? j->o.config_path : "", "steps", (json_int_t)j->o.steps, "save", j->o.save,
				 "phase", rs__phase_names[j->ph], "generation", (json_int_t)j->generation, "step",
				 (json_int_t)rs__job_step(j), "world", (int)j->nworld, "members", members ? members : json_array(),
				 "plan", j->plan ? rs_plan_to_json(j->plan) : json_null(), "attempt",
				 j->agen && j->aplan ? migration_json(j) : json_null(), "history",
				 history ? history : json_array(), "reshards", reshards ? reshards : json_array(),
				 "status_clients", j->srv ? rs_server_status_clients(j->srv) : 0, "error",
				 j->ph == P_FAILED ? j->why : NULL);
	return snap;
}

void rs__job_progress(rs_job *j, int64_t step, double loss, double auc, double samples_per_s)
{
	if (!j->history && !(j->history = calloc(HISTORY_MAX, sizeof(*j->history))))
		return;
	history_point h = {j->generation, step, loss, auc, samples_per_s};
	j->history[(j->history_head + j->nhistory) % HISTORY_MAX] = h;
	if (j->nhistory < HISTORY_MAX)
		j->nhistory++;
	else
		j->history_head = (j->history_head + 1) % HISTORY_MAX;
	j->last = h;
	if (auc >= 0)
		j->last_auc = auc;
	json_t *ev = history_json(&h);
	if (ev)
		json_object_set_new(ev, "type", json_string("progress"));
	rs__job_publish(j, ev);
}

/* Upper bounds (seconds) of the /metrics histogram of reshard pauses; the last is +Inf. */
static const double pause_bounds[9] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

void rs__job_reshard(rs_job *j, const reshard_record *r)
{
	if (j->nreshard_log == RESHARDS_MAX) {
		memmove(j->reshard_log, j->reshard_log + 1, sizeof(j->reshard_log[0]) * (RESHARDS_MAX - 1));
		j->nreshard_log--;
	}
	j->reshard_log[j->nreshard_log++] = *r;
	j->moved_total += r->moved_bytes;
	j->pause_sum += r->pause_s;
	int b = 0;
	while (b < 9 && r->pause_s > pause_bounds[b])
		b++;
	j->pause_buckets[b]++;
	json_t *ev = reshard_json(r);
	if (ev)
		json_object_set_new(ev, "type", json_string("reshard"));
	rs__job_publish(j, ev);
}

void rs__job_pairs_reset(rs_job *j)
{
	free(j->pairs);
	j->pairs = NULL;
	j->npairs = 0;
	if (!j->aplan)
		return;
	int32_t map[MAX_MEMBERS];
	rs_move *mv = NULL;
	int n = 0;
	rs_err err = {0};
	for (int32_t r = 0; r < j->nworld; r++)
		map[r] = j->union_of_old[r] < j->aworld ? j->union_of_old[r] : -1;
	if (rs_plan_diff(j->cfg, j->plan, j->aplan, map, &mv, &n, &err) != RS_OK)
		return;
	j->pairs = calloc((size_t)n + 1, sizeof(*j->pairs));
	for (int i = 0; j->pairs && i < n; i++) {
		int32_t src = j->union_of_old[mv[i].src], dst = mv[i].dst, k = 0;
		while (k < j->npairs && !(j->pairs[k].src == src && j->pairs[k].dst == dst))
			k++;
		if (k == j->npairs)
			j->pairs[j->npairs++] = (pair_progress){src, dst, 0, 0};
		j->pairs[k].total += mv[i].bytes;
	}
	free(mv);
}

void rs__job_migration_event(rs_job *j, int force)
{
	double now = rs_now();
	if (!force && now - j->last_migration_event < 0.1)
		return; /* at most ten a second, whatever the workers send */
	j->last_migration_event = now;
	json_t *ev = migration_json(j);
	if (ev)
		json_object_set_new(ev, "type", json_string("migration"));
	rs__job_publish(j, ev);
}

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
	gauge(&t, "rowshift_generation", "The committed generation.", (double)j->generation);
	gauge(&t, "rowshift_members", "Workers in the current generation's world.", (double)j->nworld);
	add(&t, "# HELP rowshift_phase The job's phase (1 for the current one).\n# TYPE rowshift_phase gauge\n");
	for (int p = 0; p <= P_FAILED; p++)
		add(&t, "rowshift_phase{phase=\"%s\"} %d\n", rs__phase_names[p], (int)j->ph == p);
	add(&t, "# HELP rowshift_reshards_total Reshards committed.\n# TYPE rowshift_reshards_total counter\n"
		"rowshift_reshards_total %d\n", j->reshards);
	add(&t, "# HELP rowshift_reshard_aborts_total Reshard attempts aborted.\n"
		"# TYPE rowshift_reshard_aborts_total counter\nrowshift_reshard_aborts_total %d\n", j->aborts);
	add(&t, "# HELP rowshift_reshard_pause_seconds Training time lost to each reshard.\n"
		"# TYPE rowshift_reshard_pause_seconds histogram\n");
	int cum = 0;
	for (int b = 0; b < 10; b++) {
		cum += j->pause_buckets[b];
		if (b < 9)
			add(&t, "rowshift_reshard_pause_seconds_bucket{le=\"%g\"} %d\n", pause_bounds[b], cum);
		else
			add(&t, "rowshift_reshard_pause_seconds_bucket{le=\"+Inf\"} %d\n", cum);
	}
	add(&t, "rowshift_reshard_pause_seconds_sum %.6f\nrowshift_reshard_pause_seconds_count %d\n", j->pause_sum, cum);
	add(&t, "# HELP rowshift_moved_bytes_total Bytes of rows and optimizer state moved by committed reshards.\n"
		"# TYPE rowshift_moved_bytes_total counter\nrowshift_moved_bytes_total %llu\n",
	    (unsigned long long)j->moved_total);
	gauge(&t, "rowshift_step", "The last step rank 0 reported.", (double)j->last.step);
	gauge(&t, "rowshift_samples_per_second", "Training throughput at the last report.", j->last.samples_per_s);
	gauge(&t, "rowshift_loss", "Mean log loss of the last reported step.", j->last.loss);
	if (j->last_auc > 0)
		gauge(&t, "rowshift_auc", "Held-out AUC at the last evaluation.", j->last_auc);
	add(&t, "# HELP rowshift_member_step_lag Steps a member's last report trails rank 0's.\n"
		"# TYPE rowshift_member_step_lag gauge\n");
	for (int32_t r = 0; r < j->nworld; r++) {
		const member *m = &j->m[j->world[r]];
		add(&t, "rowshift_member_step_lag{member=\"%s\",rank=\"%d\"} %lld\n", m->name, r,
		    (long long)(j->last.step - m->step > 0 ? j->last.step - m->step : 0));
	}
	gauge(&t, "rowshift_status_clients", "Clients of the status stream.",
	      j->srv ? (double)rs_server_status_clients(j->srv) : 0);
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
		int ready = j->ph != P_STARTING && j->ph != P_FAILED && j->ph != P_DONE;
		*body = strdup(ready ? "ready\n" : "not ready\n");
		*len = *body ? strlen(*body) : 0;
		*content_type = "text/plain";
		return ready ? 200 : 503;
	}
	return 404;
}
