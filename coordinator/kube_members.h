/*
 * kube_members.h - Kubernetes as the job's membership source: the worker
 * StatefulSet's pods (coordinator/kube.h) say which workers are wanted
 * (a pod that exists, is not being deleted and has not ended), pods that
 * appear restart the debounce, pods that go are reported to the job; the
 * job's state lives in a ConfigMap; each committed reshard is posted as an
 * Event on the StatefulSet. Scaling is the StatefulSet's business
 * (`kubectl scale`), with one exception: a job that is done scales it to 0,
 * so that no worker pod restarts into it; the coordinator's Role allows
 * patching that StatefulSet's scale and nothing more.
 */
#ifndef RS_KUBE_MEMBERS_H
#define RS_KUBE_MEMBERS_H

#include "coordinator/job.h"
#include "coordinator/kube.h"
#include "coordinator/kube_lease.h"
#include "coordinator/server.h"
#include "coordinator/state.h"

#include <signal.h>

#define RS_KUBE_UNANSWERED_MAX 8 /* unanswered state writes remembered (the oldest forgotten first) */

typedef struct rs_kube_members {
	rs_kube *kube;
	rs_job *job;             /* set once the job exists; events before that are only cached */
	const char *statefulset; /* the worker StatefulSet (Events go on it) */
	const char *configmap;   /* where the state is kept, key "state.json" */
	const char *lease_name;  /* the Lease that makes this coordinator the one acting (kube_lease.h) */
	/* set by rs_kube_members_load */
	rs_lease lease;
	json_t *cm;              /* the state ConfigMap as this coordinator last read or wrote it (its resourceVersion) */
	int64_t term;            /* this coordinator's term: the state's + 1; workers refuse a lower one than they saw */
	char *unanswered[RS_KUBE_UNANSWERED_MAX]; /* the texts of the state writes that got no answer (or a 5xx) */
	int nunanswered;         /* ... since the last that did: any of them may have landed all the same */
} rs_kube_members;

/* The job's source and the client's handler, both over m (which must outlive them). */
rs_job_source rs_kube_members_source(rs_kube_members *m);
rs_kube_handler rs_kube_members_handler(rs_kube_members *m);

/*
 * Become the acting coordinator, then read the state a previous one saved
 * (RS_ENOTFOUND when there is none). The Lease is waited for as long as
 * another coordinator holds it (until *stop); an API server that does not
 * answer yet (the coordinator pod may start first) is waited for up to
 * timeout_ms. A state found is claimed at once: written back with this
 * coordinator's term, on the version just read, so that a predecessor
 * still running (frozen past its Lease) can no longer write it.
 *
 * From then on every state write is fenced: made on the version this
 * coordinator last wrote, never retried on a newer one. A conflict means
 * another coordinator took over, and so does a Lease lost: this process
 * exits at once (status 3) without a word to the workers, which are the
 * successor's now.
 */
rs_status rs_kube_members_load(rs_kube_members *m, rs_state *s, int timeout_ms, const volatile sig_atomic_t *stop,
			       rs_err *err);

/*
 * The job is done: it stays done. The worker StatefulSet
 * is scaled to 0 (retried while the API refuses), workers that still join
 * are told to stop, and the coordinator keeps serving its status (srv) in
 * that phase, since a Deployment restarts a process that exits, until
 * *stop becomes nonzero (SIGTERM).
 */
void rs_kube_members_ended(rs_kube_members *m, rs_server *srv, const volatile sig_atomic_t *stop);

/* A Warning event on the worker StatefulSet (kubectl describe lists it), e.g. CannotStart before an exit. */
void rs_kube_members_warn(rs_kube_members *m, const char *reason, const char *message);

#endif
