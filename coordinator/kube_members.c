/*
 * kube_members.c - see kube_members.h.
 */
#include "coordinator/kube_members.h"
#include "common/clock.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATE_KEY "state.json"
#define SAVE_PATIENCE_S 30.0 /* how long a patient state write keeps trying */
#define SOON_TIMEOUT_MS 2000 /* an impatient one's request: the loop is blocked meanwhile */

/* A worker is wanted while its pod exists, is not being deleted and runs. */
static int usable(const rs_kube_pod *p) { return p && !p->terminating && !p->ended; }

static int32_t replicas(void *ctx)
{
	rs_kube_members *m = ctx;
	int32_t n = 0;
	for (int i = 0; rs_kube_synced(m->kube) && i < rs_kube_npods(m->kube); i++)
		n += usable(rs_kube_pod_at(m->kube, i));
	return n;
}

static int wanted(void *ctx, const char *name)
{
	rs_kube_members *m = ctx;
	return rs_kube_synced(m->kube) && usable(rs_kube_pod_named(m->kube, name));
}

static rs_status scale(void *ctx, int32_t n, rs_err *err)
{
	rs_kube_members *m = ctx;
	(void)n;
	return rs_err_set(err, RS_EUNSUPPORTED, "in Kubernetes the StatefulSet decides: kubectl scale statefulset/%s "
			  "--replicas=N", m->statefulset);
}

static void event(void *ctx, int warning, const char *reason, const char *message)
{
	rs_kube_members *m = ctx;
	rs_kube_event(m->kube, "StatefulSet", m->statefulset, warning ? "Warning" : "Normal", reason, message);
}

void rs_kube_members_warn(rs_kube_members *m, const char *reason, const char *message) { event(m, 1, reason, message); }

static rs_status save_state(void *ctx, const rs_state *s, int patient, rs_err *err);

rs_job_source rs_kube_members_source(rs_kube_members *m)
{
	return (rs_job_source){.ctx = m, .scale = scale, .replicas = replicas, .wanted = wanted, .event = event,
			       .save_state = save_state};
}

static void pod_changed(void *ctx, const rs_kube_pod *pod)
{
	rs_kube_members *m = ctx;
	(void)pod;
	if (m->job)
		rs_job_changed(m->job);
}

static void pod_gone(void *ctx, const char *name, const char *uid, int clean, const char *how)
{
	rs_kube_members *m = ctx;
	if (m->job)
		rs_job_exited(m->job, name, uid, clean, how);
}

/*
 * Another coordinator acts now: stop at once, without a word to the
 * workers (they are the successor's) and without giving back a Lease that
 * is not ours. Status 3; a Deployment's restart waits for the Lease.
 */
static void deposed(const char *why)
{
	RS_ERROR("another coordinator took the job over (%s): this one stops acting and exits", why);
	fflush(NULL);
	_exit(3);
}

static void tick(void *ctx)
{
	rs_kube_members *m = ctx;
	static const char *const keys[4] = {"rowshift.io/phase", "rowshift.io/generation", "rowshift.io/step",
					    "rowshift.io/workers"};
	if (m->job) { /* where the job stands, in the Lease's labels at its next renewal */
		rs_lease *l = &m->lease;
		memcpy(l->label_keys, keys, sizeof(keys));
		snprintf(l->label_values[0], sizeof(l->label_values[0]), "%s", rs_job_phase(m->job));
		snprintf(l->label_values[1], sizeof(l->label_values[1]), "%lld", (long long)rs_job_generation(m->job));
		snprintf(l->label_values[2], sizeof(l->label_values[2]), "%lld", (long long)rs_job_step(m->job));
		snprintf(l->label_values[3], sizeof(l->label_values[3]), "%d", (int)rs_job_world(m->job));
	}
	if (rs_lease_tick(&m->lease) < 0)
		deposed("the lease was lost");
}

static void forget_unanswered(rs_kube_members *m)
{
	for (int i = 0; i < m->nunanswered; i++)
		free(m->unanswered[i]);
	m->nunanswered = 0;
}

/* text was written and no answer came: it may have landed (kept, the oldest given up when full). */
static void remember_unanswered(rs_kube_members *m, const char *text)
{
	if (m->nunanswered && !strcmp(m->unanswered[m->nunanswered - 1], text))
		return;
	char *copy = strdup(text);
	if (!copy)
		return; /* then a conflict it caused ends this coordinator: safe, a restart resumes the job */
	if (m->nunanswered == RS_KUBE_UNANSWERED_MAX) {
		free(m->unanswered[0]);
		memmove(m->unanswered, m->unanswered + 1, sizeof(char *) * (RS_KUBE_UNANSWERED_MAX - 1));
		m->nunanswered--;
	}
	m->unanswered[m->nunanswered++] = copy;
}

static void closing(void *ctx)
{
	rs_kube_members *m = ctx;
	rs_lease_release(&m->lease);
	json_decref(m->cm);
	m->cm = NULL;
	forget_unanswered(m);
}

rs_kube_handler rs_kube_members_handler(rs_kube_members *m)
{
	return (rs_kube_handler){.ctx = m, .pod_changed = pod_changed, .pod_gone = pod_gone, .tick = tick,
				 .closing = closing};
}

/*
 * A write whose answer was lost may have landed, and a write after it on
 * the version before it then conflicts. Whether the ConfigMap holds exactly
 * the text of one of those writes (only this coordinator wrote them): 1,
 * and m->cm becomes it, its resourceVersion ours to write on; 0 when it
 * holds anything else (another coordinator wrote it); -1 when it could not
 * be read (e with why).
 */
static int ours(rs_kube_members *m, int timeout_ms, rs_err *e)
{
	json_t *cur = NULL;
	rs_status st = rs_kube_configmap_read(m->kube, m->configmap, timeout_ms, &cur, e);
	const char *stored = st == RS_OK ? json_string_value(json_object_get(json_object_get(cur, "data"), STATE_KEY))
					 : NULL;
	int same = 0;
	for (int i = 0; stored && i < m->nunanswered && !same; i++)
		same = !strcmp(stored, m->unanswered[i]);
	if (same) {
		json_decref(m->cm);
		m->cm = cur, cur = NULL;
		RS_INFO("a state write landed though its answer was lost");
	}
	json_decref(cur);
	return same ? 1 : st == RS_OK || st == RS_ENOTFOUND ? 0 : -1;
}

/* No answer, or a 5xx: the API may come back, and the write may have landed all the same. */
static int transient(rs_status st) { return st == RS_ECURL || st == RS_EIO; }

/* text as the state in m->cm (made when there is none yet); 0: out of memory. */
static int put_text(rs_kube_members *m, const char *text)
{
	if (!m->cm) /* none yet: created, which fails if another coordinator created it first */
		m->cm = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{}}", "apiVersion", "v1", "kind", "ConfigMap",
				  "metadata", "name", m->configmap, "namespace", rs_kube_namespace(m->kube), "labels",
				  "app.kubernetes.io/part-of", "rowshift", "data");
	json_t *data = json_object_get(m->cm, "data");
	if (m->cm && !json_is_object(data))
		json_object_set_new(m->cm, "data", data = json_object());
	return data && json_object_set_new(data, STATE_KEY, json_string(text)) == 0;
}

/*
 * The source's save_state: the state document into the ConfigMap, always
 * on the version this coordinator last wrote. A patient save tries again
 * while the API blinks (the loop is blocked meanwhile, so the Lease is
 * renewed between the tries, and a Lease lost ends it); an impatient one
 * tries once and leaves the next try to the job.
 */
static rs_status save_state(void *ctx, const rs_state *s, int patient, rs_err *err)
{
	rs_kube_members *m = ctx;
	rs_state open = *s;
	open.token = NULL; /* a ConfigMap is no place for a secret: a restart reads the token from its Secret again */
	open.term = m->term;
	json_t *j = rs_state_to_json(&open);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text || !put_text(m, text)) {
		free(text);
		return rs_err_set(err, RS_ENOMEM, "state: out of memory");
	}
	rs_status st;
	rs_err e = {0}; /* each attempt's own: the error returned is the last one's */
	double until = rs_now() + (patient ? SAVE_PATIENCE_S : 0), wait = 0.25;
	int timeout_ms = patient ? RS_KUBE_WRITE_TIMEOUT_MS : SOON_TIMEOUT_MS;
	tick(m); /* a Lease past its deadline: no write at all */
	for (;;) {
		e.msg[0] = 0;
		st = rs_kube_configmap_write(m->kube, m->configmap, timeout_ms, &m->cm, &e);
		if (transient(st))
			remember_unanswered(m, text);
		else if (st == RS_OK)
			forget_unanswered(m);
		if (st == RS_EABORTED && m->nunanswered) {
			int o = ours(m, timeout_ms, &e);
			if (o < 0) {
				st = RS_EIO; /* not known yet: the unanswered writes are kept, and asked about again */
			} else if (o > 0) {
				forget_unanswered(m); /* a conflict from here on is another coordinator's doing */
				if (!put_text(m, text)) {
					st = rs_err_set(&e, RS_ENOMEM, "state: out of memory");
					break;
				}
				tick(m);
				continue; /* at once, on the version it landed as */
			}
		}
		if (!transient(st) || rs_now() + wait >= until)
			break;
		RS_WARN("%s; trying again in %.2f s", e.msg, wait);
		for (double t = rs_now() + wait; rs_now() < t; rs_sleep(0.05))
			tick(m);
		wait = wait * 2 > 4 ? 4 : wait * 2;
	}
	free(text);
	if (st == RS_EABORTED)
		deposed(e.msg);
	return st == RS_OK ? RS_OK : rs_err_set(err, st, "%s", e.msg);
}

/* The state ConfigMap into m->cm (kept when it has no state yet) and its state into s. */
static rs_status load_once(rs_kube_members *m, rs_state *s, rs_err *err)
{
	char name[300];
	memset(s, 0, sizeof(*s));
	json_decref(m->cm);
	m->cm = NULL;
	RSCHECK(rs_kube_configmap_read(m->kube, m->configmap, RS_KUBE_WRITE_TIMEOUT_MS, &m->cm, err));
	const char *text = json_string_value(json_object_get(json_object_get(m->cm, "data"), STATE_KEY));
	if (!text)
		return RS_ENOTFOUND;
	snprintf(name, sizeof(name), "configmap %s", m->configmap);
	return rs_state_parse(text, strlen(text), name, s, err);
}

rs_status rs_kube_members_load(rs_kube_members *m, rs_state *s, int timeout_ms, const volatile sig_atomic_t *stop,
			       rs_err *err)
{
	char lease[300];
	snprintf(lease, sizeof(lease), "%s%s", m->lease_name ? m->lease_name : m->statefulset,
		 m->lease_name ? "" : "-leader");
	rs_lease_init(&m->lease, m->kube, lease, NULL);
	RSCHECK(rs_lease_acquire(&m->lease, stop, err));
	for (double until = rs_now() + timeout_ms / 1000.0;;) {
		rs_status st = load_once(m, s, err);
		if (st == RS_OK || (st != RS_ECURL && st != RS_EIO) || rs_now() + 1 > until || *stop) {
			if (st != RS_OK && st != RS_ENOTFOUND)
				return st;
			m->term = (st == RS_OK ? s->term : 0) + 1;
			RS_INFO("acting coordinator, term %lld", (long long)m->term);
			if (st == RS_OK) { /* claimed: a predecessor's write after this one conflicts (it is deposed) */
				rs_status ws = save_state(m, s, 1, err);
				if (ws != RS_OK)
					return ws;
			}
			return st;
		}
		RS_WARN("%s; trying again in 1 s", err->msg);
		err->msg[0] = 0;
		rs_sleep(1);
	}
}

void rs_kube_members_ended(rs_kube_members *m, rs_server *srv, const volatile sig_atomic_t *stop)
{
	int scaled = 0, told = 0, failures = 0;
	double next = 0, wait = 1;
	while (!*stop) {
		rs_server_service(srv, 100);
		rs_kube_poll(m->kube);
		if (scaled || rs_now() < next)
			continue;
		rs_err err = {0};
		if (rs_kube_scale(m->kube, 0, &err) == RS_OK) {
			RS_INFO("the job is over: statefulset %s scaled to 0; serving the status until stopped", m->statefulset);
			scaled = 1;
		} else {
			RS_WARN("the job is over, but %s; trying again in %.0f s", err.msg, wait);
			if (!told && (strstr(err.msg, "HTTP 403") || ++failures >= 5)) { /* once, where `kubectl describe` shows it */
				char msg[1200];
				snprintf(msg, sizeof(msg), "The job is over, but the workers could not be scaled to 0 (%s): "
					 "scale them (kubectl scale statefulset/%s --replicas=0) or grant the coordinator patch "
					 "on statefulsets/scale; trying again meanwhile", err.msg, m->statefulset);
				event(m, 1, "ScaleFailed", msg);
				told = 1;
			}
			next = rs_now() + wait;
			wait = wait < 30 ? wait * 2 : 60;
		}
	}
}
