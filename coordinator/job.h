/*
 * job.h - the coordinator's job: its members, the current generation and
 * plan, and the resharding cycle (README.md, "Scaling a running job"),
 * driven by what the workers report on the control channel and
 * what the membership source says about their processes or pods:
 *
 *   STARTING     wait for the wanted workers to join; plan; start generation 1
 *   TRAINING     the world trains; a membership change (a scale request, a
 *                worker asking to leave, a joiner) that has settled, or that
 *                has waited --debounce-ms for stragglers, asks the world to
 *                pause, so that a burst of changes is one reshard
 *   PAUSED       every member stopped at the same step boundary; apply the
 *                schedule's scaling if this is its step; then replan from the
 *                current plan over the new members, or resume if nothing
 *                changed after all
 *   MIGRATING    attempt A: the union of old and new members stages the new
 *                plan (rows move with their optimizer state, in checked
 *                chunks); the old model stays untouched everywhere
 *   COMMITTING   every member staged and the per-table checksums of the
 *                staged rows equal those of the old ones: the decision is
 *                persisted, then "commit" goes out; leaving members exit
 *   (abort)      any failure before that (a member lost, a staging error, a
 *                checksum mismatch, a timeout) sends "abort": every member
 *                keeps its old model, the world is PAUSED again, and the next
 *                attempt plans from the new reality
 *   DONE/FAILED  training ended / a member died holding the only copy of
 *                rows, or too many attempts failed: the reason is kept
 *
 * Generation, phase, plan and the attempt in flight are persisted through
 * the membership source (a state file, a ConfigMap) before every decision,
 * so a coordinator killed at any point and restarted (rs_job_recover) finds
 * its workers again as they rejoin and resolves the cycle: it commits an
 * attempt that was decided, or one every member reports staged; otherwise
 * it aborts it.
 *
 * The job is built from parts (job_internal.h): membership (job_members.c),
 * the cycle (job_cycle.c), control messages (job_dispatch.c), persistence
 * and recovery (job_persist.c), one event fan-out to every report sink
 * (job_events.c) and what the status stream, /metrics and the dashboard
 * show (job_status.c).
 *
 * Single-threaded: every function runs on the coordinator's loop thread.
 */
#ifndef RS_JOB_H
#define RS_JOB_H

#include "common/config.h"
#include "common/status.h"
#include "coordinator/server.h"
#include "coordinator/state.h"

#include <stdint.h>
#include <stdio.h>

typedef struct rs_job rs_job;

/*
 * The job's membership source: local processes (local.h) or the pods of a
 * StatefulSet (kube_members.h). Every callback but replicas may be NULL.
 */
typedef struct rs_job_source {
	void *ctx;
	/* Want n workers (a StatefulSet's replicas). */
	rs_status (*scale)(void *ctx, int32_t n, rs_err *err);
	int32_t (*replicas)(void *ctx);
	/* 1 when a worker of this name is wanted (its ordinal is below the replicas). */
	int (*wanted)(void *ctx, const char *name);
	/* A worker joined with this pid (local mode adopts processes a previous coordinator started). */
	void (*joined)(void *ctx, const char *name, int64_t pid);
	/* The workers' processes for the state: up to max; returns the count. */
	int (*list)(void *ctx, const char **names, int64_t *pids, int max);
	/* Stop restarting workers that exit (the job is ending). */
	void (*ending)(void *ctx);
	/* Something a platform engineer should see (Kubernetes: an Event on the StatefulSet). */
	void (*event)(void *ctx, int warning, const char *reason, const char *message);
	/*
	 * Persist the job's state (a file, a ConfigMap); NULL: not persisted.
	 * patient: a decision's save, which the cycle waits for: transient
	 * failures (RS_ECURL, RS_EIO: an API server that blinks) are tried
	 * again for a while. 0: one try, and a transient failure is returned
	 * at once; the job tries again later from its tick, with whatever its
	 * state is by then, while it goes on serving its members.
	 */
	rs_status (*save_state)(void *ctx, const rs_state *s, int patient, rs_err *err);
	/*
	 * A failure is final: the state says "failed" with the reason, and a
	 * restart refuses it (local mode). Without, a failure leaves the state
	 * last saved, and a restart (Kubernetes: the Deployment's) resumes it.
	 */
	int failure_final;
	/*
	 * While the job starts, a worker that exits before joining this many
	 * times in a row fails it (local mode: a worker that cannot run, a bad
	 * option or config, fails the same way each time). 0: never
	 * (Kubernetes: a pod's restarts are the cluster's).
	 */
	int early_exits_max;
} rs_job_source;

/* How the job reaches workers and status clients: the coordinator's server (rs_job_set_server) or a test's. */
typedef struct rs_job_io {
	void *ctx;
	/* Queue msg (borrowed) to the member on connection c. */
	rs_status (*send)(void *ctx, rs_conn *c, const json_t *msg);
	/* Send a status event (borrowed) to every status client. */
	void (*publish)(void *ctx, const json_t *ev);
	/* Hold the status events (1: the world is stopped) or let them go (0); may be NULL. */
	void (*hold)(void *ctx, int hold);
	int (*status_clients)(void *ctx);
	/* Who is on c, for messages. */
	const char *(*conn_name)(void *ctx, rs_conn *c);
} rs_job_io;

typedef struct rs_job_options {
	const rs_config *cfg;
	const char *config_path;  /* for the state and a restart */
	const char *url, *token;  /* the control channel, for the state */
	int64_t steps;
	const char *save;         /* checkpoint directory at the end, or NULL */
	const char *load;         /* a checkpoint generation 1 starts from, or NULL */
	const char *ckpt_dir;     /* periodic checkpoints: under this directory (step-NNNNNNNNN/), or NULL */
	int64_t ckpt_every;       /* ... at every multiple of this step (0: none) */
	int64_t ckpt_interval;    /* ... and when this many seconds passed since the last (0: none; one of them with ckpt_dir) */
	int ckpt_keep;            /* ... the newest this many complete ones kept, older ones deleted (>= 1) */
	int64_t load_step;        /* its step: where training starts */
	int debounce_ms;          /* longest wait for the rest of a membership change before acting */
	int timeout_ms;           /* bound on each wait for workers (joining, pausing, staging, rejoining) */
	int max_attempts;         /* reshard attempts aborted in a row before the job fails (0: 3) */
	int64_t sched_step[RS_STATE_MAX_SCHEDULE];
	int32_t sched_workers[RS_STATE_MAX_SCHEDULE];
	int nsched;
	FILE *log_json;           /* one JSON line per progress report and per reshard, or NULL */
	FILE *report;             /* the human-readable report (progress, reshards); NULL: stdout */
	double (*now)(void);      /* the clock (seconds, monotonic); NULL: rs_now */
} rs_job_options;

/*
 * A new job that starts with `workers` workers (asked of the source at the
 * first tick; 0: with the workers the source already has, as in
 * Kubernetes). o and src are borrowed and must outlive it; o's strings may
 * be filled in until then (the URL is known once the server listens).
 */
rs_status rs_job_create(const rs_job_options *o, const rs_job_source *src, int32_t workers, rs_job **out,
			rs_err *err);

/*
 * A job that resumes from a persisted state (rs_state_read, or the
 * source's); s stays the caller's. On failure *out is NULL and err says
 * what in the state was wrong (RS_EINVAL) or RS_ENOMEM.
 */
rs_status rs_job_recover(const rs_job_options *o, const rs_job_source *src, const rs_state *s, rs_job **out,
			 rs_err *err);

void rs_job_destroy(rs_job *j);

/* Parse a --schedule "STEP:WORKERS,..." (increasing steps) into o. */
rs_status rs_job_parse_schedule(const char *text, rs_job_options *o, rs_err *err);

/*
 * The server's handler for this job (pass it to rs_server_create): control
 * messages feed the job; the status stream's snapshot, the dashboard,
 * /metrics and /readyz read it.
 */
rs_server_handler rs_job_server_handler(rs_job *j);

/* Reach members and status clients through srv (after rs_server_create). */
void rs_job_set_server(rs_job *j, rs_server *srv);

/* Or through io (tests); io is copied. */
void rs_job_set_io(rs_job *j, const rs_job_io *io);

/* The membership source saw something change (a pod appeared): restart the debounce. */
void rs_job_changed(rs_job *j);

/*
 * The membership source saw a worker's process or pod go (clean: 1, 0, or
 * -1 unknown). uid: the pod's (NULL: not a pod): a member that joined from
 * another pod of the same name (its incarnation says) is not the one gone.
 */
void rs_job_exited(rs_job *j, const char *name, const char *uid, int clean, const char *how);

/* Advance the cycle: call after every round of the event loop. */
void rs_job_tick(rs_job *j);

/* 0 while running; 1 when training is done; -1 when the job failed (rs_job_error says why). */
int rs_job_finished(const rs_job *j);
const char *rs_job_error(const rs_job *j);

/* The phase's name ("starting", "training", ...), the committed generation, its step and its world's size. */
const char *rs_job_phase(const rs_job *j);
int64_t rs_job_generation(const rs_job *j);
int64_t rs_job_step(const rs_job *j);
int32_t rs_job_world(const rs_job *j);

/* Tell every connected member to stop (the job failed or is being torn down). */
void rs_job_stop_all(rs_job *j);

#endif
