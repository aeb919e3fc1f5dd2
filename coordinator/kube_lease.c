/* kube_lease.c - see kube_lease.h. */
#include "coordinator/kube_lease.h"
#include "common/clock.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A MicroTime as the API writes it: 2026-11-27T05:01:02.123456Z. */
static void micro_time(char *out, size_t n)
{
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + k, n - k, ".%06ldZ", ts.tv_nsec / 1000);
}

void rs_lease_init(rs_lease *l, rs_kube *kube, const char *name, const char *identity)
{
	memset(l, 0, sizeof(*l));
	l->kube = kube;
	snprintf(l->name, sizeof(l->name), "%s", name);
	const char *env = getenv("ROWSHIFT_POD_NAME");
	char host[254] = "";
	if (!identity)
		identity = env && *env ? env : getenv("HOSTNAME") && *getenv("HOSTNAME") ? getenv("HOSTNAME") : NULL;
	if (!identity && gethostname(host, sizeof(host) - 1) == 0)
		identity = host;
	snprintf(l->identity, sizeof(l->identity), "%s", identity && *identity ? identity : "rowshift-coordinator");
	const char *d = getenv("ROWSHIFT_LEASE_DURATION_S");
	l->duration_s = d && atoi(d) >= 3 && atoi(d) <= 3600 ? atoi(d) : RS_LEASE_DURATION_S;
}

static const char *spec_str(const json_t *lease, const char *key)
{
	const char *v = json_string_value(json_object_get(json_object_get(lease, "spec"), key));
	return v ? v : "";
}

static void path_of(const rs_lease *l, int named, char *out, size_t n)
{
	snprintf(out, n, "/apis/coordination.k8s.io/v1/namespaces/%s/leases%s%s", rs_kube_namespace(l->kube),
		 named ? "/" : "", named ? l->name : "");
}

static double deadline_s(const rs_lease *l) { return l->duration_s * 2.0 / 3.0; }

/* Seconds before the deadline of the last renewal (negative past it). */
static double time_left(const rs_lease *l) { return l->renewed + deadline_s(l) - rs_now(); }

int rs_lease_held(const rs_lease *l) { return l->obj && !l->lost && time_left(l) > 0; }

/*
 * A request's bound: 5 s, and while held, half the time left before the
 * deadline (at least 100 ms): a renewal stuck on a pooled connection that
 * died silently (a NAT that forgot it) leaves time to try again on a new
 * one (libcurl closes a connection whose transfer timed out).
 */
static int bound_ms(const rs_lease *l)
{
	double left = l->obj ? time_left(l) * 1000 / 2 : 5000;
	return left > 5000 ? 5000 : left < 100 ? 100 : (int)left;
}

/*
 * Write `lease` with us as its holder (create when it has no
 * resourceVersion): 1 when it is ours now (l->obj the stored object), 0
 * when someone wrote first (409), -1 when the API is away or blinks, -2
 * when it refuses for good (403: the Role lacks it; 422), -3 when the
 * Lease to replace is gone (404), all but 1 with err.
 */
static int write_ours(rs_lease *l, json_t *lease, int transition, rs_err *err)
{
	char now[64], path[1024], msg[256];
	double sent = rs_now();
	micro_time(now, sizeof(now));
	json_t *spec = json_object_get(lease, "spec");
	if (!json_is_object(spec))
		json_object_set_new(lease, "spec", spec = json_object());
	json_int_t transitions = json_integer_value(json_object_get(spec, "leaseTransitions"));
	json_object_set_new(spec, "holderIdentity", json_string(l->identity));
	json_object_set_new(spec, "leaseDurationSeconds", json_integer(l->duration_s));
	json_object_set_new(spec, "renewTime", json_string(now));
	if (transition) {
		json_object_set_new(spec, "acquireTime", json_string(now));
		json_object_set_new(spec, "leaseTransitions", json_integer(transitions + 1));
	}
	json_t *md = json_object_get(lease, "metadata"), *labels = json_object_get(md, "labels");
	if (json_is_object(md) && !json_is_object(labels))
		json_object_set_new(md, "labels", labels = json_object());
	for (int i = 0; i < 4 && json_is_object(labels); i++)
		if (l->label_keys[i] && l->label_values[i][0])
			json_object_set_new(labels, l->label_keys[i], json_string(l->label_values[i]));
	int create = !json_object_get(md, "resourceVersion");
	long code = 0;
	json_t *got = NULL;
	path_of(l, !create, path, sizeof(path));
	if (rs_kube_object(l->kube, create ? "POST" : "PUT", path, lease, bound_ms(l), &code, &got, msg, sizeof(msg),
			   err) != RS_OK)
		return -1;
	if (got) {
		json_decref(l->obj);
		l->obj = got;
		l->renewed = sent; /* a waiter saw the record change no earlier than this */
		l->next = sent + l->duration_s / 6.0;
		return 1;
	}
	if (code == 409)
		return 0;
	int r = code == 404 && !create ? -3 : code / 100 == 4 && code != 429 ? -2 : -1;
	rs_err_set(err, r == -2 ? RS_EINVAL : RS_EIO, "lease %s: writing it: HTTP %ld: %s", l->name, code,
		   code / 100 == 2 ? "the answer is not an object" : msg);
	return r;
}

/* A new Lease object of ours to create (no resourceVersion), or NULL without memory. */
static json_t *new_lease(const rs_lease *l)
{
	return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{}}", "apiVersion", "coordination.k8s.io/v1", "kind",
			 "Lease", "metadata", "name", l->name, "namespace", rs_kube_namespace(l->kube), "labels",
			 "app.kubernetes.io/part-of", "rowshift", "spec");
}

/* GET the Lease into *out (NULL when it does not exist): RS_OK, or an error. */
static rs_status read_lease(rs_lease *l, json_t **out, rs_err *err)
{
	char path[1024], msg[256];
	long code;
	path_of(l, 1, path, sizeof(path));
	RSCHECK(rs_kube_object(l->kube, "GET", path, NULL, bound_ms(l), &code, out, msg, sizeof(msg), err));
	if (code == 200 && !*out)
		return rs_err_set(err, RS_EIO, "lease %s: the answer is not an object", l->name);
	if (code != 200 && code != 404) {
		json_decref(*out), *out = NULL; /* a 2xx other than 200 */
		return rs_err_set(err, code == 403 ? RS_EINVAL : RS_EIO, "lease %s: reading it: HTTP %ld: %s", l->name,
				  code, msg);
	}
	return RS_OK;
}

rs_status rs_lease_acquire(rs_lease *l, const volatile sig_atomic_t *stop, rs_err *err)
{
	char seen[600] = "", said[300] = "";
	double seen_at = rs_now(), wait = 1;
	while (!*stop) {
		json_t *lease = NULL;
		rs_err e = {0};
		rs_kube_refresh_token(l->kube); /* a wait may outlast a projected token */
		rs_status st = read_lease(l, &lease, &e);
		if (st == RS_EINVAL) {
			json_decref(lease);
			return rs_err_set(err, st, "%s", e.msg);
		}
		int r = -1;
		if (st == RS_OK && !lease) { /* none yet: create it */
			lease = new_lease(l);
			r = lease ? write_ours(l, lease, 0, &e) : -1;
		} else if (st == RS_OK) {
			const char *holder = spec_str(lease, "holderIdentity");
			char record[600];
			snprintf(record, sizeof(record), "%s|%s", holder, spec_str(lease, "renewTime"));
			if (strcmp(record, seen) != 0) /* it changed: its holder is alive, as far as we can tell */
				snprintf(seen, sizeof(seen), "%s", record), seen_at = rs_now();
			json_int_t d = json_integer_value(json_object_get(json_object_get(lease, "spec"), "leaseDurationSeconds"));
			int mine = !strcmp(holder, l->identity), free_ = !*holder;
			if (mine || free_ || rs_now() - seen_at > (d > 0 ? (double)d : l->duration_s)) {
				if (!mine && !free_)
					RS_WARN("lease %s: %s has not renewed it for %lld s: taking over", l->name, holder,
						(long long)(d > 0 ? d : l->duration_s));
				r = write_ours(l, lease, !mine, &e);
			} else {
				if (strcmp(said, holder) != 0)
					RS_WARN("lease %s is held by %s: waiting for it to be released or to expire (%lld s "
						"without renewal) before acting", l->name, holder, (long long)d);
				snprintf(said, sizeof(said), "%s", holder);
				r = 0;
			}
		}
		json_decref(lease);
		if (r == 1) {
			RS_INFO("lease %s: held by %s (renewed every %.0f s)", l->name, l->identity, l->duration_s / 6.0);
			return RS_OK;
		}
		if (r == -2)
			return rs_err_set(err, RS_EINVAL, "%s", e.msg);
		r = r == -3 ? -1 : r; /* deleted meanwhile: read it again */
		if (r < 0)
			RS_WARN("%s; trying again in %.0f s", e.msg[0] ? e.msg : "lease: out of memory", wait);
		rs_sleep(r < 0 ? wait : 1);
		wait = r < 0 && wait < 8 ? wait * 2 : r < 0 ? wait : 1;
	}
	return rs_err_set(err, RS_EABORTED, "interrupted while waiting for lease %s", l->name);
}

/* Lost: say why once; this coordinator must stop acting. */
static int lose(rs_lease *l, const char *fmt, const char *a, const char *b)
{
	char why[600];
	snprintf(why, sizeof(why), fmt, a, b);
	RS_ERROR("lease %s: %s: this coordinator no longer acts", l->name, why);
	l->lost = 1;
	return -1;
}

int rs_lease_tick(rs_lease *l)
{
	if (l->lost || !l->obj)
		return l->lost ? -1 : 0;
	char since[64];
	snprintf(since, sizeof(since), "%.1f", rs_now() - l->renewed);
	if (!rs_lease_held(l)) /* a process frozen, or a loop blocked, past the deadline: a waiter may act by now */
		return lose(l, "not renewed for %s s (%s)", since, "past 2/3 of its duration");
	if (rs_now() < l->next)
		return 0;
	rs_err e = {0};
	json_t *lease = json_deep_copy(l->obj);
	int r = lease ? write_ours(l, lease, 0, &e) : -1;
	json_decref(lease);
	if (r == -3) { /* deleted: still ours until someone else has it; a create that conflicts means they have */
		json_t *fresh = new_lease(l);
		r = fresh ? write_ours(l, fresh, 1, &e) : -1;
		json_decref(fresh);
		if (r == 0)
			return lose(l, "it was deleted and %s%s", "someone else created it first", "");
	}
	if (r == 0) { /* written meanwhile: still ours (a label edited) or taken over */
		json_t *cur = NULL;
		if (read_lease(l, &cur, &e) == RS_OK) {
			if (cur && !strcmp(spec_str(cur, "holderIdentity"), l->identity))
				r = write_ours(l, cur, 0, &e);
			else if (cur)
				r = *spec_str(cur, "holderIdentity")
					    ? lose(l, "now held by %s%s", spec_str(cur, "holderIdentity"), "")
					    : lose(l, "written by another coordinator meanwhile, and given back%s%s", "", "");
		}
		json_decref(cur);
	}
	if (r == 1 || l->lost)
		return l->lost ? -1 : 0;
	snprintf(since, sizeof(since), "%.1f", rs_now() - l->renewed);
	if (!rs_lease_held(l))
		return lose(l, "not renewed for %s s (%s)", since, e.msg[0] ? e.msg : "refused");
	double again = time_left(l) / 4; /* 1 s, or sooner near the deadline */
	again = again < 1 ? again : 1;
	RS_WARN("lease %s: renewal failed (%s); trying again in %.2f s", l->name, e.msg[0] ? e.msg : "refused", again);
	l->next = rs_now() + again;
	return 0;
}

void rs_lease_release(rs_lease *l)
{
	if (l->obj && !l->lost) {
		rs_err e = {0};
		json_t *lease = json_deep_copy(l->obj), *spec = json_object_get(lease, "spec");
		char path[1024], *text = NULL, *body = NULL;
		long code = 0;
		if (json_is_object(spec)) { /* no holder: a successor takes it at once */
			json_object_set_new(spec, "holderIdentity", json_string(""));
			json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
			text = json_dumps(lease, JSON_COMPACT);
		}
		path_of(l, 1, path, sizeof(path));
		if (!text || rs_kube_request(l->kube, "PUT", path, "application/json", text, &code, &body, &e) != RS_OK ||
		    code != 200)
			RS_WARN("lease %s: could not give it back (%s): a successor waits for it to expire", l->name,
				e.msg[0] ? e.msg : "refused");
		else
			RS_INFO("lease %s: given back", l->name);
		free(text);
		free(body);
		json_decref(lease);
	}
	json_decref(l->obj);
	l->obj = NULL;
}
