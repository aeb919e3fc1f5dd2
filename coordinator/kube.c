/*
 * kube.c - see kube.h.
 */
#include "coordinator/kube.h"
#include "common/file.h"
#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/secret.h"
#include "common/version.h"
#include "coordinator/kube_exec.h"
#include "coordinator/watch.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Every curl call is checked: log the call and what curl said, and fail. */
#define CURLCHECK(call)                                                                  \
	do {                                                                             \
		CURLcode rs__c = (call);                                                 \
		if (rs__c != CURLE_OK) {                                                 \
			RS_ERROR("%s failed: %s", #call, curl_easy_strerror(rs__c));     \
			return RS_ECURL;                                                 \
		}                                                                        \
	} while (0)

#define WATCH_TIMEOUT_S 300    /* each watch asks the server to end it after this; it is then resumed */
/*
 * A watch that says nothing for this long (not even a BOOKMARK, which an
 * API server sends about once a minute) is taken for a connection dropped
 * without a word (a NAT or a load balancer forgot it) and resumed from
 * the last resourceVersion. ROWSHIFT_KUBE_WATCH_IDLE_S overrides it (tests).
 */
#define WATCH_IDLE_S 150
#define TOKEN_REREAD_S 60.0
#define BACKOFF_MAX_S 30.0
#define WRITE_TIMEOUT_MS RS_KUBE_WRITE_TIMEOUT_MS
#define MAX_LIST_BYTES ((size_t)256 << 20)

typedef enum kstate { K_IDLE, K_LISTING, K_WATCHING } kstate;

/* A response body as it arrives. */
typedef struct buffer {
	char *data;
	size_t len, cap;
} buffer;

/* An Event being posted: the loop does not wait for it (rs_kube_event). */
typedef struct posting {
	CURL *easy;                /* NULL: a free slot */
	int added;                 /* on the multi handle (rs_kube_poll adds it: never from inside a callback) */
	struct curl_slist *headers;
	char what[160];            /* the event's message, for a warning */
} posting;

#define MAX_POSTINGS 16

typedef struct pod_entry {
	rs_kube_pod pod;
	int gone_reported;
} pod_entry;

struct rs_kube {
	rs_kube_config cfg;
	char *ns, *sts, *selector;
	char sts_uid[64];       /* the StatefulSet's, once read: events name it, so `kubectl describe` shows them */
	rs_rng rng;             /* the backoff's jitter, seeded from the kernel: coordinators apart back off apart */
	rs_kube_handler h;
	CURLM *multi;
	CURL *easy;                /* the list or watch in flight, or NULL */
	struct curl_slist *headers;
	char errbuf[CURL_ERROR_SIZE];
	kstate state;
	buffer body;               /* the list's body */
	rs_watch_parser wp;
	int stream_bad;            /* the watch stream was damaged or said 410: list again */
	double watch_bytes_at;     /* when the watch last said something (or began) */
	int idle_cuts;             /* watches cut for their silence: the next one connects afresh */
	int fresh;
	char rv[256];              /* the resourceVersion to watch from */
	int synced, need_list;
	double retry_at;
	int failures;
	char *token;               /* the bearer token in use */
	double token_read_at;
	double token_expires;      /* an exec plugin's token: its expiry (seconds since the epoch; 0: none said) */
	pod_entry *pods;
	size_t npods, cap;
	posting posts[MAX_POSTINGS];
	char error[512];
};

/* ---- the bearer token and the common options -------------------------------------------- */

static void read_token(rs_kube *k)
{
	char *buf = NULL;
	size_t n = 0;
	rs_err err = {0};
	if (!k->cfg.token_file)
		return;
	k->token_read_at = rs_now();
	if (rs_file_read(k->cfg.token_file, 16384, &buf, &n, &err) != RS_OK) {
		RS_WARN("kubernetes: cannot read the token file: %s", err.msg);
		return;
	}
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = 0;
	if (!n) {
		RS_WARN("kubernetes: the token file %s is empty", k->cfg.token_file);
		free(buf);
		return;
	}
	free(k->token);
	k->token = buf;
}

/* Run the exec plugin for a fresh token (kube_exec.h): RS_OK, or the old token stays (err says why). */
static rs_status exec_token(rs_kube *k, rs_err *err)
{
	char *tok = NULL;
	double exp = 0;
	k->token_read_at = rs_now();
	RSCHECK(rs_kube_exec_run(k->cfg.exec_argv, k->cfg.exec_env, k->cfg.exec_api, RS_KUBE_EXEC_TIMEOUT_MS, &tok, &exp,
				 err));
	free(k->token);
	k->token = tok, k->token_expires = exp;
	return RS_OK;
}

/* Authorization and TLS on an easy handle, as the configuration says. */
static rs_status setup_easy(rs_kube *k, CURL *e, struct curl_slist **headers, const char *content_type)
{
	char auth[16500];
	const rs_kube_config *c = &k->cfg;
	*headers = NULL;
	if (k->token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", k->token);
		*headers = curl_slist_append(*headers, auth);
	}
	*headers = curl_slist_append(*headers, "Accept: application/json");
	if (content_type) {
		snprintf(auth, sizeof(auth), "Content-Type: %s", content_type);
		*headers = curl_slist_append(*headers, auth);
	}
	if (!*headers)
		return RS_ENOMEM;
	CURLCHECK(curl_easy_setopt(e, CURLOPT_HTTPHEADER, *headers));
	CURLCHECK(curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L));
	CURLCHECK(curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L));
	CURLCHECK(curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L)); /* a peer host gone is noticed in about 2 min */
	CURLCHECK(curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 10L));
	CURLCHECK(curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 3000L));
	CURLCHECK(curl_easy_setopt(e, CURLOPT_USERAGENT, "rowshift-coordinator/" RS_VERSION " (linux) rowshift/" RS_VERSION));
	/* TLS is verified against the cluster's CA unless the kubeconfig said insecure-skip-tls-verify */
	CURLCHECK(curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, c->insecure ? 0L : 1L));
	CURLCHECK(curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, c->insecure ? 0L : 2L));
	if (c->ca_file)
		CURLCHECK(curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file));
	if (c->ca_data) {
		struct curl_blob b = {c->ca_data, c->ca_data_len, CURL_BLOB_COPY};
		CURLCHECK(curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &b));
	}
	if (c->cert_file)
		CURLCHECK(curl_easy_setopt(e, CURLOPT_SSLCERT, c->cert_file));
	if (c->key_file)
		CURLCHECK(curl_easy_setopt(e, CURLOPT_SSLKEY, c->key_file));
	if (c->cert_data) {
		struct curl_blob b = {c->cert_data, c->cert_data_len, CURL_BLOB_COPY};
		CURLCHECK(curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &b));
	}
	if (c->key_data) {
		struct curl_blob b = {c->key_data, c->key_data_len, CURL_BLOB_COPY};
		CURLCHECK(curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &b));
	}
	return RS_OK;
}

/* ---- the pod cache ------------------------------------------------------------------------ */

static pod_entry *find_pod(const rs_kube *k, const char *name)
{
	for (size_t i = 0; i < k->npods; i++)
		if (!strcmp(k->pods[i].pod.name, name))
			return &k->pods[i];
	return NULL;
}

/* The ordinal of STATEFULSET-N, or -1 for a pod of another owner. */
static int ordinal_of(const rs_kube *k, const char *name)
{
	size_t n = strlen(k->sts);
	char *end;
	if (strncmp(name, k->sts, n) != 0 || name[n] != '-' || !name[n + 1])
		return -1;
	long v = strtol(name + n + 1, &end, 10);
	return *end || v < 0 || v > 1000000 ? -1 : (int)v;
}

/* A pod object as the coordinator sees it; 0 when it is not one of ours. */
static int read_pod(const rs_kube *k, json_t *obj, rs_kube_pod *p)
{
	json_t *md = json_object_get(obj, "metadata"), *status = json_object_get(obj, "status"), *c;
	const char *name = json_string_value(json_object_get(md, "name"));
	const char *phase = json_string_value(json_object_get(status, "phase"));
	size_t i;
	memset(p, 0, sizeof(*p));
	if (!name || strlen(name) >= sizeof(p->name) || (p->ordinal = ordinal_of(k, name)) < 0)
		return 0;
	snprintf(p->name, sizeof(p->name), "%s", name);
	const char *uid = json_string_value(json_object_get(md, "uid"));
	if (uid && strlen(uid) < sizeof(p->uid))
		snprintf(p->uid, sizeof(p->uid), "%s", uid);
	p->terminating = json_object_get(md, "deletionTimestamp") && !json_is_null(json_object_get(md, "deletionTimestamp"));
	p->ended = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
	json_array_foreach(json_object_get(status, "conditions"), i, c) {
		const char *t = json_string_value(json_object_get(c, "type")), *s = json_string_value(json_object_get(c, "status"));
		if (t && s && !strcmp(t, "Ready"))
			p->ready = !strcmp(s, "True");
	}
	return 1;
}

/* e's pod is gone, once: that pod (uid), or "" where every pod of its name is (a relist has none). */
static void report_gone(rs_kube *k, pod_entry *e, const char *uid, int clean, const char *how)
{
	if (e->gone_reported)
		return;
	e->gone_reported = 1;
	if (k->h.pod_gone)
		k->h.pod_gone(k->h.ctx, e->pod.name, uid, clean, how);
}

/* A pod added or modified: into the cache; an ended phase is reported once. */
static void upsert(rs_kube *k, json_t *obj)
{
	rs_kube_pod p;
	if (!read_pod(k, obj, &p))
		return;
	pod_entry *e = find_pod(k, p.name);
	int news = !e;
	if (!e) {
		if (rs_grow(&k->pods, &k->cap, k->npods + 1, sizeof(*k->pods)) != RS_OK)
			return;
		e = &k->pods[k->npods++];
		memset(e, 0, sizeof(*e));
	} else if (e->pod.uid[0] && p.uid[0] && strcmp(e->pod.uid, p.uid)) {
		/* a new pod of that name, its predecessor's deletion unseen (a relist after the watch was down) */
		report_gone(k, e, e->pod.uid, -1, "pod replaced by a new one of that name");
		e->gone_reported = 0;
		news = 1;
	} else if (!p.ended && e->pod.ended) {
		e->gone_reported = 0; /* its container runs again */
	}
	/* only what membership depends on is a change: status updates that keep it (a restart count, a
	   condition's timestamp) must not keep restarting the coordinator's debounce */
	news |= e->pod.ready != p.ready || e->pod.terminating != p.terminating || e->pod.ended != p.ended;
	e->pod = p;
	if (news && k->h.pod_changed)
		k->h.pod_changed(k->h.ctx, &e->pod);
	if (p.ended) {
		const char *phase = json_string_value(json_object_get(json_object_get(obj, "status"), "phase"));
		char how[64];
		snprintf(how, sizeof(how), "pod phase %s", phase ? phase : "?");
		report_gone(k, e, e->pod.uid, !strcmp(phase ? phase : "", "Succeeded"), how);
	}
}

/* The pod name is gone: the pod uid (a watch's deletion), or "": every pod of that name (a relist has none). */
static void remove_pod(rs_kube *k, const char *name, const char *uid, const char *how)
{
	pod_entry *e = find_pod(k, name);
	if (!e)
		return;
	if (uid[0] && e->pod.uid[0] && strcmp(uid, e->pod.uid)) {
		if (k->h.pod_gone) /* an earlier pod of that name, its successor cached (reported when it was) */
			k->h.pod_gone(k->h.ctx, name, uid, -1, how);
		return;
	}
	report_gone(k, e, uid, -1, how);
	*e = k->pods[--k->npods];
}

/* ---- list and watch -------------------------------------------------------------------------- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
	buffer *b = ctx;
	size_t n = size * nmemb;
	if (b->len + n > MAX_LIST_BYTES || rs_grow(&b->data, &b->cap, b->len + n + 1, 1) != RS_OK)
		return 0; /* aborts the transfer */
	memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = 0;
	return n;
}

static void on_event(void *ctx, const rs_watch_event *ev)
{
	rs_kube *k = ctx;
	if (ev->type == RS_WATCH_ERROR) {
		RS_WARN("kubernetes: the pod watch says %d: %s%s", ev->code, ev->message,
			ev->code == 410 ? " (listing again)" : "");
		k->stream_bad = 1;
		if (ev->code == 410)
			k->need_list = 1;
		return;
	}
	snprintf(k->rv, sizeof(k->rv), "%s", ev->resource_version);
	if (ev->type == RS_WATCH_ADDED || ev->type == RS_WATCH_MODIFIED) {
		upsert(k, ev->object);
	} else if (ev->type == RS_WATCH_DELETED) {
		const char *uid = json_string_value(json_object_get(json_object_get(ev->object, "metadata"), "uid"));
		remove_pod(k, ev->name, uid ? uid : "", "pod deleted");
	}
}

static size_t on_stream(char *data, size_t size, size_t nmemb, void *ctx)
{
	rs_kube *k = ctx;
	rs_err err = {0};
	size_t n = size * nmemb;
	long code = 0;
	k->watch_bytes_at = rs_now();
	if (k->stream_bad)
		return 0;
	/* an error answer (a 503, a 401) is a Status, not an event stream: finished() deals with its code */
	if (curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code != 200)
		return n;
	if (rs_watch_feed(&k->wp, data, n, on_event, k, &err) != RS_OK) {
		RS_WARN("kubernetes: %s; listing again", err.msg);
		k->stream_bad = 1;
		k->need_list = 1;
		return 0;
	}
	return k->stream_bad ? 0 : n;
}

static void end_request(rs_kube *k)
{
	if (k->easy) {
		curl_multi_remove_handle(k->multi, k->easy);
		curl_easy_cleanup(k->easy);
	}
	curl_slist_free_all(k->headers);
	k->easy = NULL;
	k->headers = NULL;
	k->state = K_IDLE;
}

static void back_off(rs_kube *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void back_off(rs_kube *k, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(k->error, sizeof(k->error), fmt, ap);
	va_end(ap);
	double wait = 0.5 * (double)(1 << (k->failures < 6 ? k->failures : 6));
	wait = wait > BACKOFF_MAX_S ? BACKOFF_MAX_S : wait;
	wait *= 0.5 + rs_rng_uniform(&k->rng); /* jitter: many coordinators do not retry in step */
	k->failures++;
	k->retry_at = rs_now() + wait;
	RS_WARN("kubernetes: %s; trying again in %.1f s", k->error, wait);
}

/* URL-encode s into out. */
static void urlenc(const char *s, char *out, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	for (; *s && o + 4 < n; s++) {
		unsigned char ch = (unsigned char)*s;
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("-_.~", ch))
			out[o++] = (char)ch;
		else
			out[o++] = '%', out[o++] = hex[ch >> 4], out[o++] = hex[ch & 15];
	}
	out[o] = 0;
}

static long watch_idle_s(void)
{
	const char *v = getenv("ROWSHIFT_KUBE_WATCH_IDLE_S");
	return v && atol(v) >= 1 && atol(v) <= WATCH_TIMEOUT_S ? atol(v) : WATCH_IDLE_S;
}

static rs_status start_request(rs_kube *k, int watch)
{
	char url[4096], sel[1024];
	urlenc(k->selector, sel, sizeof(sel));
	if (watch)
		snprintf(url, sizeof(url), "%s/api/v1/namespaces/%s/pods?labelSelector=%s&watch=1&allowWatchBookmarks=true"
			 "&timeoutSeconds=%d&resourceVersion=%s", k->cfg.server, k->ns, sel, WATCH_TIMEOUT_S, k->rv);
	else
		snprintf(url, sizeof(url), "%s/api/v1/namespaces/%s/pods?labelSelector=%s", k->cfg.server, k->ns, sel);
	if (!(k->easy = curl_easy_init()))
		return RS_ENOMEM;
	rs_status st = setup_easy(k, k->easy, &k->headers, NULL);
	if (st != RS_OK) {
		end_request(k);
		return st;
	}
	k->errbuf[0] = 0;
	if (curl_easy_setopt(k->easy, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(k->easy, CURLOPT_ERRORBUFFER, k->errbuf) != CURLE_OK ||
	    curl_easy_setopt(k->easy, CURLOPT_WRITEFUNCTION, watch ? on_stream : on_body) != CURLE_OK ||
	    curl_easy_setopt(k->easy, CURLOPT_WRITEDATA, watch ? (void *)k : (void *)&k->body) != CURLE_OK ||
	    /* a watch the server forgot to end (a silent partition) is cut a minute after it should have ended */
	    curl_easy_setopt(k->easy, CURLOPT_TIMEOUT_MS, watch ? (WATCH_TIMEOUT_S + 60) * 1000L : 30000L) != CURLE_OK ||
	    curl_easy_setopt(k->easy, CURLOPT_LOW_SPEED_LIMIT, watch ? 1L : 0L) != CURLE_OK ||
	    curl_easy_setopt(k->easy, CURLOPT_FRESH_CONNECT, k->fresh ? 1L : 0L) != CURLE_OK ||
	    curl_easy_setopt(k->easy, CURLOPT_LOW_SPEED_TIME, watch ? watch_idle_s() : 0L) != CURLE_OK ||
	    curl_multi_add_handle(k->multi, k->easy) != CURLM_OK) {
		end_request(k);
		return RS_ECURL;
	}
	k->state = watch ? K_WATCHING : K_LISTING;
	k->watch_bytes_at = rs_now();
	k->fresh = 0;
	k->body.len = 0;
	k->stream_bad = 0;
	rs_watch_reset(&k->wp);
	RS_DEBUG("kubernetes: %s pods%s%s", watch ? "watching" : "listing", watch ? " from " : "", watch ? k->rv : "");
	return RS_OK;
}

/* A list arrived: the cache becomes it (pods missing from it are gone), and the watch starts from its version. */
static void apply_list(rs_kube *k)
{
	json_error_t jerr;
	json_t *root = json_loadb(k->body.data, k->body.len, 0, &jerr), *items = json_object_get(root, "items"), *it;
	const char *rv = json_string_value(json_object_get(json_object_get(root, "metadata"), "resourceVersion"));
	size_t i;
	if (!json_is_array(items) || !rv) {
		back_off(k, "the pod list is not a PodList with a resourceVersion (%s)", root ? "fields missing" : jerr.text);
		json_decref(root);
		return;
	}
	/* pods the list no longer has went while nobody watched */
	for (size_t p = 0; p < k->npods;) {
		int still = 0;
		json_array_foreach(items, i, it) {
			const char *n = json_string_value(json_object_get(json_object_get(it, "metadata"), "name"));
			still |= n && !strcmp(n, k->pods[p].pod.name);
		}
		if (still)
			p++;
		else
			remove_pod(k, k->pods[p].pod.name, "", "pod deleted (seen on a relist)");
	}
	json_array_foreach(items, i, it)
		upsert(k, it);
	snprintf(k->rv, sizeof(k->rv), "%s", rv);
	if (!k->synced)
		RS_INFO("kubernetes: %zu pods of %s in %s (%s)", k->npods, k->sts, k->ns, k->cfg.source);
	k->synced = 1;
	k->need_list = 0;
	k->failures = 0;
	k->error[0] = 0;
	json_decref(root);
}

/* The list or watch in flight ended: why, and what comes next. */
static void finished(rs_kube *k, CURLcode res)
{
	long code = 0;
	curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &code);
	kstate was = k->state;
	char why[CURL_ERROR_SIZE + 64];
	snprintf(why, sizeof(why), "%s", k->errbuf[0] ? k->errbuf : curl_easy_strerror(res));
	end_request(k);
	if (code == 401 && k->cfg.token_file)
		read_token(k); /* a rotated token */
	if (code == 401 && k->cfg.exec_argv && rs_now() - k->token_read_at > 10) { /* refused: ask the plugin again */
		rs_err e = {0};
		if (exec_token(k, &e) != RS_OK)
			RS_WARN("kubernetes: %s", e.msg);
	}
	if (was == K_LISTING) {
		if (res == CURLE_OK && code == 200)
			apply_list(k);
		else
			back_off(k, "listing pods: %s", res == CURLE_OK ? (code == 401 ? "401 Unauthorized" : "HTTP error") : why);
		if (res == CURLE_OK && code != 200)
			snprintf(k->error + strlen(k->error), sizeof(k->error) - strlen(k->error), " (HTTP %ld)", code);
		return;
	}
	if (k->need_list) {
		k->retry_at = rs_now(); /* 410 or a damaged stream: list at once */
		return;
	}
	if (res == CURLE_OK && code == 200) {
		k->failures = 0; /* the server ended the watch (timeoutSeconds): resume from where it was */
		k->retry_at = rs_now();
		return;
	}
	if (res == CURLE_OK && code == 410) {
		k->need_list = 1;
		k->retry_at = rs_now();
		return;
	}
	if (res == CURLE_OPERATION_TIMEDOUT && k->watch_bytes_at + watch_idle_s() - 1 <= rs_now()) {
		/* a warning the first time; an API server that sends no bookmarks makes this routine */
		rs_log(k->idle_cuts++ ? RS_LOG_INFO : RS_LOG_WARN, __FILE__, __LINE__,
		       "kubernetes: the pod watch said nothing for %ld s (not even a bookmark): taken for a connection "
		       "dropped without a word; watching again from resourceVersion %s, on a new connection",
		       watch_idle_s(), k->rv);
		k->fresh = 1; /* not on a pooled connection that may be as dead (HTTP/2 multiplexes) */
		k->retry_at = rs_now();
		return;
	}
	if (res == CURLE_OK)
		back_off(k, "watching pods: HTTP %ld", code);
	else
		back_off(k, "watching pods: %s", why);
}

/* Free an Event's slot: off the multi handle, its request and headers gone. */
static void drop_posting(rs_kube *k, posting *p)
{
	if (p->added)
		curl_multi_remove_handle(k->multi, p->easy);
	curl_easy_cleanup(p->easy);
	curl_slist_free_all(p->headers);
	memset(p, 0, sizeof(*p));
}

/* An Event's POST ended: free its slot, and say so if it was refused. */
static void posted(rs_kube *k, CURL *e, CURLcode res)
{
	for (int i = 0; i < MAX_POSTINGS; i++) {
		posting *p = &k->posts[i];
		if (p->easy != e)
			continue;
		long code = 0;
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
		if (res != CURLE_OK || code / 100 != 2)
			RS_WARN("kubernetes: could not post the event '%s' (%s%ld)", p->what,
				res != CURLE_OK ? curl_easy_strerror(res) : "HTTP ", res != CURLE_OK ? 0L : code);
		drop_posting(k, p);
	}
}

/* The Events made since the last poll go on the multi handle (here: never inside one of its callbacks). */
static void add_postings(rs_kube *k)
{
	for (int i = 0; i < MAX_POSTINGS; i++) {
		posting *p = &k->posts[i];
		if (!p->easy || p->added)
			continue;
		if (curl_multi_add_handle(k->multi, p->easy) == CURLM_OK) {
			p->added = 1;
			continue;
		}
		RS_WARN("kubernetes: could not post the event '%s' (curl refused the request)", p->what);
		drop_posting(k, p);
	}
}

static size_t discard(char *data, size_t size, size_t nmemb, void *ctx)
{
	(void)data, (void)ctx;
	return size * nmemb;
}

void rs_kube_poll(rs_kube *k)
{
	int running;
	if (k->h.tick)
		k->h.tick(k->h.ctx);
	rs_kube_refresh_token(k);
	add_postings(k);
	if (k->state == K_IDLE && rs_now() >= k->retry_at) {
		rs_status st = start_request(k, k->synced && !k->need_list);
		if (st != RS_OK)
			back_off(k, "cannot start a request: %s", rs_status_str(st));
	}
	if (curl_multi_perform(k->multi, &running) != CURLM_OK) {
		RS_ERROR("curl_multi_perform failed");
		return;
	}
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(k->multi, &left)))
		if (m->msg == CURLMSG_DONE && m->easy_handle == k->easy)
			finished(k, m->data.result);
		else if (m->msg == CURLMSG_DONE)
			posted(k, m->easy_handle, m->data.result);
}

/* ---- life cycle and accessors ---------------------------------------------------------------- */

rs_status rs_kube_create(const rs_kube_config *cfg, const char *ns, const char *statefulset, const char *selector,
			 const rs_kube_handler *h, rs_kube **out, rs_err *err)
{
	static int curl_ready;
	if (!curl_ready) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			return rs_err_set(err, RS_ECURL, "curl_global_init failed");
		curl_ready = 1;
	}
	rs_kube *k = calloc(1, sizeof(*k));
	if (!k)
		return RS_ENOMEM;
	k->cfg = *cfg;
	/* the copy owns its own strings: duplicate every pointer */
	char **fields[] = {&k->cfg.server, &k->cfg.ca_file, &k->cfg.token, &k->cfg.token_file, &k->cfg.cert_file,
			   &k->cfg.key_file, &k->cfg.namespace};
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		*fields[i] = *fields[i] ? strdup(*fields[i]) : NULL;
	k->cfg.exec_argv = rs_strv_dup(cfg->exec_argv), k->cfg.exec_env = rs_strv_dup(cfg->exec_env);
	k->cfg.exec_api = cfg->exec_api ? strdup(cfg->exec_api) : NULL;
	char **blobs[] = {&k->cfg.ca_data, &k->cfg.cert_data, &k->cfg.key_data};
	size_t lens[] = {cfg->ca_data_len, cfg->cert_data_len, cfg->key_data_len};
	for (size_t i = 0; i < 3; i++)
		if (*blobs[i]) {
			char *b = malloc(lens[i] + 1);
			if (b) {
				memcpy(b, *blobs[i], lens[i]);
				b[lens[i]] = 0;
			}
			*blobs[i] = b;
		}
	uint64_t seed[3] = {0};
	if (rs_secret_bytes(seed, sizeof(seed)) != RS_OK) /* then the time and pid: apart enough */
		seed[0] = (uint64_t)(rs_now() * 1e9), seed[1] = (uint64_t)getpid();
	k->rng = rs_rng_make(seed[0], seed[1], seed[2]);
	k->ns = strdup(ns);
	k->sts = strdup(statefulset);
	k->selector = strdup(selector);
	k->h = *h;
	k->multi = curl_multi_init();
	k->token = cfg->token ? strdup(cfg->token) : NULL;
	if (!k->ns || !k->sts || !k->selector || !k->multi || !k->cfg.server) {
		rs_kube_destroy(k);
		return rs_err_set(err, RS_ENOMEM, "kubernetes client: out of memory");
	}
	read_token(k);
	if (k->cfg.token_file && !k->token) {
		rs_kube_destroy(k);
		return rs_err_set(err, RS_EIO, "kubernetes: cannot read the token file %s", cfg->token_file);
	}
	if ((cfg->exec_argv && (!k->cfg.exec_argv || !k->cfg.exec_api || (cfg->exec_env && !k->cfg.exec_env))) ||
	    (k->cfg.exec_argv && exec_token(k, err) != RS_OK)) {
		rs_status st = k->cfg.exec_argv && k->cfg.exec_api ? RS_EIO : RS_ENOMEM;
		rs_kube_destroy(k);
		return st == RS_ENOMEM ? rs_err_set(err, st, "kubernetes client: out of memory") : st;
	}
	*out = k;
	return RS_OK;
}

void rs_kube_destroy(rs_kube *k)
{
	if (!k)
		return;
	rs_kube_handler h = k->h;
	memset(&k->h, 0, sizeof(k->h)); /* no pod news from here on: the job may be gone already */
	if (h.closing)
		h.closing(h.ctx);
	end_request(k);
	add_postings(k);
	/* the events still being posted (a Failed one, just before the exit) get 2 s to go out */
	for (double until = rs_now() + 2; rs_now() < until;) {
		int busy = 0, running;
		for (int i = 0; i < MAX_POSTINGS; i++)
			busy |= k->posts[i].easy != NULL;
		if (!busy || curl_multi_perform(k->multi, &running) != CURLM_OK ||
		    curl_multi_poll(k->multi, NULL, 0, 50, NULL) != CURLM_OK)
			break;
		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(k->multi, &left)))
			if (m->msg == CURLMSG_DONE && m->easy_handle != k->easy)
				posted(k, m->easy_handle, m->data.result);
	}
	for (int i = 0; i < MAX_POSTINGS; i++)
		if (k->posts[i].easy) {
			RS_WARN("kubernetes: the event '%s' was not posted in time", k->posts[i].what);
			drop_posting(k, &k->posts[i]);
		}
	end_request(k);
	if (k->multi)
		curl_multi_cleanup(k->multi);
	rs_kube_config_free(&k->cfg);
	rs_watch_free(&k->wp);
	free(k->ns);
	free(k->sts);
	free(k->selector);
	free(k->body.data);
	free(k->token);
	free(k->pods);
	free(k);
}

int rs_kube_synced(const rs_kube *k) { return k->synced; }
int rs_kube_npods(const rs_kube *k) { return (int)k->npods; }
const rs_kube_pod *rs_kube_pod_at(const rs_kube *k, int i) { return &k->pods[i].pod; }

const rs_kube_pod *rs_kube_pod_named(const rs_kube *k, const char *name)
{
	const pod_entry *e = find_pod(k, name);
	return e ? &e->pod : NULL;
}

/* ---- writes ------------------------------------------------------------------------------------- */

/* One blocking request; *body gets the response (malloc'd). */
rs_status rs_kube_request(rs_kube *k, const char *method, const char *path, const char *content_type, const char *data,
			 long *code, char **body, rs_err *err)
{
	return rs_kube_request_within(k, method, path, content_type, data, WRITE_TIMEOUT_MS, code, body, err);
}

rs_status rs_kube_request_within(rs_kube *k, const char *method, const char *path, const char *content_type,
				 const char *data, int timeout_ms, long *code, char **body, rs_err *err)
{
	char url[4096];
	CURL *e = curl_easy_init();
	struct curl_slist *headers = NULL;
	buffer got = {0};
	rs_status st;
	*body = NULL;
	*code = 0;
	if (!e)
		return rs_err_set(err, RS_ENOMEM, "kubernetes: out of memory");
	snprintf(url, sizeof(url), "%s%s", k->cfg.server, path);
	st = setup_easy(k, e, &headers, content_type);
	if (st == RS_OK && (curl_easy_setopt(e, CURLOPT_URL, url) != CURLE_OK ||
			    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method) != CURLE_OK ||
			    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 1)) != CURLE_OK ||
			    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
			    curl_easy_setopt(e, CURLOPT_WRITEDATA, &got) != CURLE_OK ||
			    (data && curl_easy_setopt(e, CURLOPT_POSTFIELDS, data) != CURLE_OK)))
		st = RS_ECURL;
	if (st == RS_OK) {
		CURLcode res = curl_easy_perform(e);
		if (res != CURLE_OK)
			st = rs_err_set(err, RS_ECURL, "kubernetes: %s %s: %s", method, path, curl_easy_strerror(res));
		else
			curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, code);
	}
	curl_slist_free_all(headers);
	curl_easy_cleanup(e);
	*body = got.data;
	return st;
}

const char *rs_kube_status_message(const char *body, char *buf, size_t n)
{
	json_t *j = body ? json_loads(body, 0, NULL) : NULL;
	snprintf(buf, n, "%s", json_string_value(json_object_get(j, "message")) ? json_string_value(json_object_get(j, "message"))
									       : "no message");
	json_decref(j);
	return buf;
}

const char *rs_kube_namespace(const rs_kube *k) { return k->ns; }

void rs_kube_refresh_token(rs_kube *k)
{
	if (k->cfg.token_file && rs_now() - k->token_read_at > TOKEN_REREAD_S)
		read_token(k);
	/* an exec plugin's token 5 minutes before it expires (once every 10 s at most while the plugin fails) */
	if (k->cfg.exec_argv && k->token_expires > 0 && (double)time(NULL) > k->token_expires - 300 &&
	    rs_now() - k->token_read_at > 10) {
		rs_err e = {0};
		if (exec_token(k, &e) != RS_OK)
			RS_WARN("kubernetes: %s (the old token is kept)", e.msg);
	}
}

rs_status rs_kube_object(rs_kube *k, const char *method, const char *path, const json_t *send, int timeout_ms,
			 long *code, json_t **got, char *msg, size_t n, rs_err *err)
{
	char *text = send ? json_dumps(send, JSON_COMPACT) : NULL, *body = NULL;
	*got = NULL, *code = 0;
	snprintf(msg, n, "%s", "");
	if (send && !text)
		return rs_err_set(err, RS_ENOMEM, "kubernetes: out of memory");
	rs_status st = rs_kube_request_within(k, method, path, send ? "application/json" : NULL, text, timeout_ms, code,
					      &body, err);
	free(text);
	if (st == RS_OK && *code / 100 == 2) {
		*got = json_loads(body ? body : "", 0, NULL);
		if (!json_is_object(*got))
			json_decref(*got), *got = NULL;
	} else if (st == RS_OK) {
		rs_kube_status_message(body, msg, n);
	}
	free(body);
	return st;
}

rs_status rs_kube_scale(rs_kube *k, int32_t replicas, rs_err *err)
{
	char path[1024], data[64], msg[256];
	long code;
	char *body;
	snprintf(path, sizeof(path), "/apis/apps/v1/namespaces/%s/statefulsets/%s/scale", k->ns, k->sts);
	snprintf(data, sizeof(data), "{\"spec\":{\"replicas\":%d}}", (int)replicas);
	rs_status st = rs_kube_request(k, "PATCH", path, "application/merge-patch+json", data, &code, &body, err);
	if (st != RS_OK) {
		free(body);
		return st;
	}
	st = code == 200 ? RS_OK
				   : rs_err_set(err, RS_EIO, "kubernetes: scaling statefulset %s to %d: HTTP %ld: %s",
						k->sts, (int)replicas, code, rs_kube_status_message(body, msg, sizeof(msg)));
	free(body);
	return st;
}

/* The worker StatefulSet's uid into k->sts_uid, read once ("" while it cannot be read). */
static const char *sts_uid(rs_kube *k)
{
	char path[1024];
	long code;
	char *body;
	rs_err err = {0};
	if (k->sts_uid[0])
		return strcmp(k->sts_uid, "-") ? k->sts_uid : ""; /* "-": it could not be read; events go without it */
	snprintf(path, sizeof(path), "/apis/apps/v1/namespaces/%s/statefulsets/%s", k->ns, k->sts);
	if (rs_kube_request(k, "GET", path, NULL, NULL, &code, &body, &err) == RS_OK && code == 200) {
		json_t *j = json_loads(body ? body : "", 0, NULL);
		const char *uid = json_string_value(json_object_get(json_object_get(j, "metadata"), "uid"));
		snprintf(k->sts_uid, sizeof(k->sts_uid), "%s", uid && strlen(uid) < sizeof(k->sts_uid) ? uid : "");
		json_decref(j);
	} else if (code == 403 || code == 404) { /* said once: `kubectl describe` will not list the events */
		RS_WARN("kubernetes: cannot read statefulset %s (HTTP %ld): its events go without its uid, and `kubectl "
			"describe statefulset` will not list them (the Role needs get on it)", k->sts, code);
		snprintf(k->sts_uid, sizeof(k->sts_uid), "-");
	} else {
		RS_DEBUG("kubernetes: reading statefulset %s for its uid: %s", k->sts, err.msg[0] ? err.msg : "refused");
	}
	free(body);
	return strcmp(k->sts_uid, "-") ? k->sts_uid : "";
}

void rs_kube_event(rs_kube *k, const char *kind, const char *name, const char *type, const char *reason,
		   const char *message)
{
	char path[4200], now[64], gen[300];
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(gen, sizeof(gen), "%s.", name);
	json_t *ev = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s}, s:s, s:s, s:s, s:s, s:s, s:i, s:{s:s}, "
			       "s:s}",
			       "apiVersion", "v1", "kind", "Event", "metadata", "generateName", gen, "namespace", k->ns,
			       "involvedObject", "apiVersion", !strcmp(kind, "Pod") ? "v1" : "apps/v1", "kind", kind, "name",
			       name, "namespace", k->ns, "type", type, "reason", reason, "message", message,
			       "firstTimestamp", now, "lastTimestamp", now, "count", 1, "source", "component",
			       "rowshift-coordinator", "reportingComponent", "rowshift-coordinator");
	const char *uid = !strcmp(kind, "StatefulSet") && !strcmp(name, k->sts) ? sts_uid(k) : "";
	if (ev && uid[0]) /* without it the event is stored, but `kubectl describe` does not list it */
		json_object_set_new(json_object_get(ev, "involvedObject"), "uid", json_string(uid));
	char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	posting *p = NULL;
	for (int i = 0; i < MAX_POSTINGS && !p; i++)
		p = k->posts[i].easy ? NULL : &k->posts[i];
	snprintf(path, sizeof(path), "%s/api/v1/namespaces/%s/events", k->cfg.server, k->ns);
	CURL *e = p && text ? curl_easy_init() : NULL;
	if (!e || setup_easy(k, e, &p->headers, "application/json") != RS_OK ||
	    curl_easy_setopt(e, CURLOPT_URL, path) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, text) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)WRITE_TIMEOUT_MS) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard) != CURLE_OK) {
		RS_WARN("kubernetes: could not post the event '%s' (%s)", message,
			!p ? "too many in flight" : "out of memory, or a curl option refused");
		if (p)
			curl_slist_free_all(p->headers), p->headers = NULL;
		curl_easy_cleanup(e);
	} else { /* posted as the loop goes on: rs_kube_poll adds it and reaps it (this may run inside a callback) */
		p->easy = e;
		snprintf(p->what, sizeof(p->what), "%s", message);
	}
	free(text);
}
