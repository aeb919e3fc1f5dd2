/*
 * kube_lease.h - at most one acting coordinator: a coordination.k8s.io/v1 Lease
 * (client-go's leader election, in our own C).
 *
 * A coordinator acquires the Lease before it reads the job's state, and
 * holds it by renewing it every duration/6. Another coordinator (a
 * replacement started while the old pod may still run: an eviction, a
 * node that stopped answering) waits: it takes the Lease only once it was
 * released, or its record (holder, renewTime) stayed unchanged for a whole
 * leaseDurationSeconds on the waiter's own clock (no clock is compared with
 * another machine's). The holder gives up first: once 2/3 of the duration
 * passed since its last successful renewal (each renewal's request is
 * bounded by the time left, and a frozen process finds the time passed when
 * it wakes), or the Lease names another holder, it stops acting
 * (rs_lease_tick says so) before any waiter can take over. A blocking call
 * of the coordinator (a state save that retries) checks rs_lease_held
 * between its tries, and ticks. The state's writes are fenced on top of this (kube_members.c): a
 * coordinator writes only on the version it last wrote itself, so even a
 * process frozen past its Lease cannot overwrite its successor's state.
 *
 * The holder's identity is the pod's name (ROWSHIFT_POD_NAME, from the
 * downward API; else HOSTNAME; else the host name): a container restarted
 * in the same pod takes its own Lease back at once, a new pod waits.
 */
#ifndef RS_KUBE_LEASE_H
#define RS_KUBE_LEASE_H

#include "common/status.h"
#include "coordinator/kube.h"

#include <jansson.h>
#include <signal.h>

#define RS_LEASE_DURATION_S 30 /* ROWSHIFT_LEASE_DURATION_S overrides it (tests: a few seconds) */

typedef struct rs_lease {
	rs_kube *kube;
	char name[254], identity[254];
	int duration_s;
	json_t *obj;           /* the Lease as last read or written by us; NULL while not held */
	double renewed;        /* rs_now() when the last successful renewal was sent */
	double next;           /* when to renew next */
	int lost;              /* 1 once it was lost: this coordinator must stop acting */
	/*
	 * Labels every renewal writes (NULL values: none): the job's phase,
	 * generation, step and workers, so `kubectl get lease -L ...` shows
	 * where the job stands, as fresh as the last renewal.
	 */
	const char *label_keys[4];
	char label_values[4][64];
} rs_lease;

/* Set up l for Lease `name` (nothing is sent yet). identity NULL: from the environment, as above. */
void rs_lease_init(rs_lease *l, rs_kube *kube, const char *name, const char *identity);

/*
 * Wait until l is held (or *stop becomes nonzero: RS_EABORTED). While
 * another coordinator holds it, says so once and polls every second. An
 * API that refuses (403: the Role lacks the Lease) is RS_EINVAL.
 */
rs_status rs_lease_acquire(rs_lease *l, const volatile sig_atomic_t *stop, rs_err *err);

/*
 * Renew when due (a blocking write of at most the time left before the
 * deadline). 0 while held, -1 once lost (the log says why). A Lease that
 * was deleted is created again (it is still ours until someone else has it).
 */
int rs_lease_tick(rs_lease *l);

/* 1 while l is held and its deadline has not passed (no request is made). */
int rs_lease_held(const rs_lease *l);

/* Give the Lease back (best effort), so that a successor need not wait for it to expire; frees l's memory. */
void rs_lease_release(rs_lease *l);

#endif
