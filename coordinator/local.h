/*
 * local.h - local mode's workers: processes on this machine, kept the way
 * a Kubernetes StatefulSet keeps pods, so that the coordinator's job logic
 * (job.h) is the same in both modes.
 *
 * There are `replicas` workers named worker-0 .. worker-(replicas-1).
 * Scaling up starts the missing ordinals (8 at once, the next 8 at each
 * rs_local_poll, so that the loop serves its connections between); scaling
 * down sends SIGTERM to the ordinals at or past the new count (each drains
 * its rows and exits once the coordinator committed the reshard that took
 * them out). A worker that exits while its ordinal is still wanted is
 * started again after a back-off, as a StatefulSet recreates a deleted pod.
 * A restarted coordinator adopts the processes its predecessor started, by
 * pid, for their liveness only: it never signals a process it did not start itself
 * (a pid may have been reused by a bystander since); an adopted worker that
 * is no longer wanted is resharded out and leaves after that commit.
 *
 * rs_local_members makes them the job's membership source, the
 * counterpart of the Kubernetes pods (kube_members.h): the job scales
 * them, learns when one exits, and persists its state in a file.
 *
 * Single-threaded: call everything from the coordinator's loop.
 */
#ifndef RS_LOCAL_H
#define RS_LOCAL_H

#include "common/status.h"
#include "coordinator/job.h"

#include <stdint.h>

typedef struct rs_local rs_local;

typedef struct rs_local_options {
	const char *worker_bin;   /* the rowshift-worker binary; NULL: the one beside this program */
	const char *url;          /* the coordinator's control channel */
	const char *config;       /* the model config path */
	const char *token;        /* the join token, handed over in the environment */
	int64_t timeout_ms;       /* the workers' --timeout-ms */
	int64_t grace_ms;         /* the workers' --coordinator-grace-ms */
} rs_local_options;

/* The strings in o are borrowed and must outlive l. */
rs_status rs_local_create(const rs_local_options *o, rs_local **out, rs_err *err);

/* Free l; running processes are left alone (see rs_local_stop_all). */
void rs_local_destroy(rs_local *l);

/* Want n workers: start the missing ordinals (the first 8 now, the rest at the next polls), SIGTERM those >= n. */
rs_status rs_local_scale(rs_local *l, int32_t n, rs_err *err);
int32_t rs_local_replicas(const rs_local *l);

/* 1 when a worker of this name is wanted: worker-K with K < replicas. */
int rs_local_wanted(const rs_local *l, const char *name);

/* Take over a process a previous coordinator started (liveness by pid from then on). */
rs_status rs_local_adopt(rs_local *l, const char *name, int64_t pid, rs_err *err);

/* Whether exited workers that are still wanted are started again (on by default; off at the end of a job). */
void rs_local_set_restart(rs_local *l, int on);

/*
 * Reap exited workers, telling fn about each: clean is 1 for exit status
 * 0, 0 for a failure or a signal, -1 when unknown (an adopted process);
 * `how` says which ("exited with status 3", "killed by signal 9"). Then
 * start, 8 at most, the wanted workers that are missing: those never
 * started yet, and again, after their back-off, those that exited.
 */
typedef void (*rs_local_exit_fn)(void *ctx, const char *name, int clean, const char *how);
void rs_local_poll(rs_local *l, rs_local_exit_fn fn, void *ctx);

/* The processes running now: up to max names and pids; returns how many there are. */
int rs_local_list(const rs_local *l, const char **names, int64_t *pids, int max);

/* Wait up to timeout_ms for every process to exit, then SIGKILL the rest it started (adopted ones are left). */
void rs_local_stop_all(rs_local *l, int timeout_ms);

/* ---- the job's membership source ------------------------------------------------------- */

typedef struct rs_local_members {
	rs_local *local;
	rs_job *job;             /* set once the job exists; exits before that are only logged */
	const char *state_path;  /* --state FILE, or NULL: the job is not persisted */
} rs_local_members;

/* The job's source over m (which must outlive it). */
rs_job_source rs_local_members_source(rs_local_members *m);

/* After every round of the loop: reap exited workers (telling the job) and restart the wanted ones. */
void rs_local_members_poll(rs_local_members *m);

/*
 * The job is over: no more restarts; wait (at most 10 s) for the workers
 * to exit on their own (done, or told to stop), serving srv meanwhile,
 * then stop the rest this coordinator started.
 */
void rs_local_members_end(rs_local_members *m, rs_server *srv);

/*
 * Tell rowshiftctl where this job is and how to join it: path gets
 * {"url", "token", "status_token"?, "tls_ca"?, "model"}, readable by this
 * user only (tls_ca: the CA file a wss:// url's certificate is verified
 * against; model: the model config's digest a worker's join carries).
 */
rs_status rs_local_write_admin_file(const char *path, const char *url, const char *token, const char *status_token,
				    const char *tls_ca, const char *model, rs_err *err);

#endif
