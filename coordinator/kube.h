/*
 * kube.h - the coordinator's Kubernetes client (libcurl + jansson): the
 * worker pods, listed then watched, and the few writes the coordinator
 * makes (its state ConfigMap, Events).
 *
 * Pods are those of one StatefulSet in one namespace, selected by a label
 * selector and named STATEFULSET-ORDINAL. The client lists them, then
 * watches from the list's resourceVersion with allowWatchBookmarks and a
 * timeoutSeconds, parsing the event stream as it arrives
 * (coordinator/watch.h). A watch that ends is resumed from the last
 * resourceVersion seen; a 410 (too old) or a damaged stream makes it list
 * again and rebuild its cache (pods that vanished meanwhile are reported
 * gone); a refused connection or a 5xx backs off exponentially with jitter
 * (up to 30 s). resourceVersions are opaque. A token file is read again
 * every minute (projected service-account tokens rotate).
 *
 * Single-threaded and non-blocking: rs_kube_poll drives the list and the
 * watch (resumed after WATCH_IDLE_S of silence: a connection dropped
 * without a word) and the Events being posted from the coordinator's loop;
 * only the state's and the Lease's writes block, each bounded by a few
 * seconds (the state must be saved before the job goes on).
 */
#ifndef RS_KUBE_H
#define RS_KUBE_H

#include "common/status.h"
#include "coordinator/kubeconfig.h"

#include <jansson.h>
#include <stdint.h>

typedef struct rs_kube rs_kube;

#define RS_KUBE_WRITE_TIMEOUT_MS 5000 /* a ConfigMap or Event write, a read of one object */

/* What the coordinator needs of a pod. */
typedef struct rs_kube_pod {
	char name[254];
	char uid[64];         /* metadata.uid: a pod replaced under the same name has another ("" when absent) */
	int ordinal;          /* the STATEFULSET-ORDINAL suffix */
	int ready;            /* the Ready condition is True */
	int terminating;      /* metadata.deletionTimestamp is set: it is being deleted (a graceful leave) */
	int ended;            /* phase Succeeded or Failed */
} rs_kube_pod;

typedef struct rs_kube_handler {
	void *ctx;
	/* A pod appeared or changed. */
	void (*pod_changed)(void *ctx, const rs_kube_pod *pod);
	/* A pod is gone: deleted, replaced, or its phase ended (clean: 1 Succeeded, 0 Failed, -1 deleted); uid: its. */
	void (*pod_gone)(void *ctx, const char *name, const char *uid, int clean, const char *how);
	/* Optional: called at every rs_kube_poll (the coordinator's lease is renewed from it). */
	void (*tick)(void *ctx);
	/* Optional: called by rs_kube_destroy before the client goes (the lease is given back). */
	void (*closing)(void *ctx);
} rs_kube_handler;

/*
 * A client for the pods of `statefulset` in `ns` matching `selector` (a
 * label selector, e.g. "app.kubernetes.io/component=worker"). cfg is
 * copied. Nothing is sent before the first rs_kube_poll.
 */
rs_status rs_kube_create(const rs_kube_config *cfg, const char *ns, const char *statefulset, const char *selector,
			 const rs_kube_handler *h, rs_kube **out, rs_err *err);
void rs_kube_destroy(rs_kube *k);

/* Drive the list and the watch without blocking. */
void rs_kube_poll(rs_kube *k);

/* 1 once a list has been seen (the cache is meaningful), 0 before. */
int rs_kube_synced(const rs_kube *k);

/* The pod called name in the cache, or NULL. */
const rs_kube_pod *rs_kube_pod_named(const rs_kube *k, const char *name);

/* Pods in the cache, and one of them by index. */
int rs_kube_npods(const rs_kube *k);
const rs_kube_pod *rs_kube_pod_at(const rs_kube *k, int i);

/*
 * ConfigMap `name` as its JSON object (a new reference) into *obj, within
 * timeout_ms (RS_KUBE_WRITE_TIMEOUT_MS: as other reads); RS_ENOTFOUND when
 * it does not exist.
 */
rs_status rs_kube_configmap_read(rs_kube *k, const char *name, int timeout_ms, json_t **obj, rs_err *err);

/*
 * Write ConfigMap `name` within timeout_ms, fenced: *obj without metadata.resourceVersion
 * creates it, and fails if it exists; with one, it replaces the ConfigMap
 * only if nobody wrote it since that version (never retried with a newer
 * one: the caller decides what a conflict means). Either failure is
 * RS_EABORTED; a refusal that trying again will not mend (4xx: too large,
 * forbidden, invalid) is RS_EINVAL; the API away, RS_ECURL or RS_EIO. On
 * success *obj is replaced by the stored object (its new resourceVersion).
 */
rs_status rs_kube_configmap_write(rs_kube *k, const char *name, int timeout_ms, json_t **obj, rs_err *err);

/*
 * One blocking request (bounded by a few seconds) to path under the API
 * server: *code the HTTP status, *body the answer (free it; NULL when none).
 * Fails only when no answer came (RS_ECURL) or without memory.
 */
rs_status rs_kube_request(rs_kube *k, const char *method, const char *path, const char *content_type,
			  const char *data, long *code, char **body, rs_err *err);
/* The same, bounded by timeout_ms instead. */
rs_status rs_kube_request_within(rs_kube *k, const char *method, const char *path, const char *content_type,
				 const char *data, int timeout_ms, long *code, char **body, rs_err *err);

/* Read a token file again when it is due (rs_kube_poll does it; a loop that does not poll calls this). */
void rs_kube_refresh_token(rs_kube *k);

/*
 * One object call, bounded by timeout_ms: `send` (or nothing) as JSON to
 * path; *code the HTTP status; on a 2xx *got the answer as an object (a
 * new reference; NULL when it is not one), otherwise *got NULL and msg the
 * Status's message. Fails only when no answer came (RS_ECURL) or without
 * memory; the caller says what each code means.
 */
rs_status rs_kube_object(rs_kube *k, const char *method, const char *path, const json_t *send, int timeout_ms,
			 long *code, json_t **got, char *msg, size_t n, rs_err *err);

/* The message of a Status error body into buf, for error messages ("no message" when it has none). */
const char *rs_kube_status_message(const char *body, char *buf, size_t n);

/* The namespace the client works in. */
const char *rs_kube_namespace(const rs_kube *k);

/* Set the worker StatefulSet's replicas through its scale subresource (a merge patch). */
rs_status rs_kube_scale(rs_kube *k, int32_t replicas, rs_err *err);

/*
 * Post an Event about `kind`/`name` without waiting for the answer (best
 * effort: a failure is logged, not returned; rs_kube_destroy gives those in
 * flight 2 s to go out).
 */
void rs_kube_event(rs_kube *k, const char *kind, const char *name, const char *type, const char *reason,
		   const char *message);

#endif
