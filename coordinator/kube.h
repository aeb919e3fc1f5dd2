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
 * watch from the coordinator's loop; only the writes block, each bounded
 * by a few seconds.
 */
#ifndef RS_KUBE_H
#define RS_KUBE_H

#include "common/status.h"
#include "coordinator/kubeconfig.h"

#include <stdint.h>

typedef struct rs_kube rs_kube;

/* What the coordinator needs of a pod. */
typedef struct rs_kube_pod {
	char name[254];
	int ordinal;          /* the STATEFULSET-ORDINAL suffix */
	int ready;            /* the Ready condition is True */
	int terminating;      /* metadata.deletionTimestamp is set: it is being deleted (a graceful leave) */
	int ended;            /* phase Succeeded or Failed */
} rs_kube_pod;

typedef struct rs_kube_handler {
	void *ctx;
	/* A pod appeared or changed. */
	void (*pod_changed)(void *ctx, const rs_kube_pod *pod);
	/* A pod is gone: deleted, or its phase ended (clean: 1 Succeeded, 0 Failed, -1 deleted). */
	void (*pod_gone)(void *ctx, const char *name, int clean, const char *how);
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

/* ConfigMap `name`'s data[key] (a malloc'd string) into *value; RS_ENOTFOUND when the map or key is absent. */
rs_status rs_kube_configmap_get(rs_kube *k, const char *name, const char *key, char **value, rs_err *err);

/* Create ConfigMap `name` with data[key] = value, or replace that key (optimistic concurrency, retried). */
rs_status rs_kube_configmap_put(rs_kube *k, const char *name, const char *key, const char *value, rs_err *err);

/* Set the worker StatefulSet's replicas through its scale subresource (a merge patch). */
rs_status rs_kube_scale(rs_kube *k, int32_t replicas, rs_err *err);

/* Post an Event about `kind`/`name` (best effort: a failure is logged, not returned). */
void rs_kube_event(rs_kube *k, const char *kind, const char *name, const char *type, const char *reason,
		   const char *message);

#endif
