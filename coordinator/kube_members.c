/*
 * kube_members.c - see kube_members.h.
 */
#include "coordinator/kube_members.h"
#include "common/clock.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

#define STATE_KEY "state.json"
#define SAVE_PATIENCE_S 30.0 /* how long a state write keeps trying */

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

static rs_status save_state(void *ctx, const rs_state *s, rs_err *err);

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

static void pod_gone(void *ctx, const char *name, int clean, const char *how)
{
	rs_kube_members *m = ctx;
	if (m->job)
		rs_job_exited(m->job, name, clean, how);
}

rs_kube_handler rs_kube_members_handler(rs_kube_members *m)
{
	return (rs_kube_handler){.ctx = m, .pod_changed = pod_changed, .pod_gone = pod_gone};
}

/* The source's save_state: the state document into the ConfigMap, retried while the API blinks. */
static rs_status save_state(void *ctx, const rs_state *s, rs_err *err)
{
	rs_kube_members *m = ctx;
	rs_state open = *s;
	open.token = NULL; /* a ConfigMap is no place for a secret: a restart reads the token from its Secret again */
	json_t *j = rs_state_to_json(&open);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text)
		return rs_err_set(err, RS_ENOMEM, "state: out of memory");
	/* an API server that blinks must not fail the job: try for a while (the loop is blocked meanwhile) */
	rs_status st;
	rs_err e = {0}; /* each attempt's own: the error returned is the last one's */
	double until = rs_now() + SAVE_PATIENCE_S, wait = 0.25;
	while ((st = rs_kube_configmap_put(m->kube, m->configmap, STATE_KEY, text, &e)) != RS_OK &&
	       st != RS_ENOMEM && rs_now() + wait < until) {
		RS_WARN("%s; trying again in %.2f s", e.msg, wait);
		e.msg[0] = 0;
		rs_sleep(wait);
		wait = wait * 2 > 4 ? 4 : wait * 2;
	}
	free(text);
	return st == RS_OK ? RS_OK : rs_err_set(err, st, "%s", e.msg);
}

static rs_status load_once(rs_kube_members *m, rs_state *s, rs_err *err)
{
	char *text = NULL, name[300];
	memset(s, 0, sizeof(*s));
	RSCHECK(rs_kube_configmap_get(m->kube, m->configmap, STATE_KEY, &text, err));
	snprintf(name, sizeof(name), "configmap %s", m->configmap);
	rs_status st = rs_state_parse(text, strlen(text), name, s, err);
	free(text);
	return st;
}

rs_status rs_kube_members_load(rs_kube_members *m, rs_state *s, int timeout_ms, const volatile sig_atomic_t *stop,
			       rs_err *err)
{
	for (double until = rs_now() + timeout_ms / 1000.0;;) {
		rs_status st = load_once(m, s, err);
		if (st == RS_OK || (st != RS_ECURL && st != RS_EIO) || rs_now() + 1 > until || *stop)
			return st;
		RS_WARN("%s; trying again in 1 s", err->msg);
		err->msg[0] = 0;
		rs_sleep(1);
	}
}

void rs_kube_members_ended(rs_kube_members *m, rs_server *srv, const volatile sig_atomic_t *stop)
{
	int scaled = 0;
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
			next = rs_now() + wait;
			wait = wait < 30 ? wait * 2 : 60;
		}
	}
}
