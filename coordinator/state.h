/*
 * state.h - what the coordinator persists so that a restarted coordinator
 * resolves an interrupted resharding cycle and carries on: the committed
 * generation and its plan and members, the cycle's phase, the attempt in
 * flight (its plan, its union of members, the checksums the rows had
 * before), and in local mode what it needs to find its workers again.
 *
 * One JSON document, written whole to a temporary file, fsync'd and renamed
 * over the old one (then the directory fsync'd), so a crash leaves either
 * the old state or the new one, never a mix. In Kubernetes mode the same
 * document lives in a ConfigMap (kube_members.c). The membership source
 * persists it: the job hands it over at every decision (job.h).
 *
 *   {"format": "rowshift-coordinator-state", "version": 2,
 *    "phase": "training" | "migrating" | "committing" | "done" | "failed", "error"? (failed: why),
 *    "generation": G, "step": S, "bound": B, "plan": {plan}, "world": [names by rank],
 *    "attempt": {"generation", "plan", "union": [names], "world": W, "union_of_old": [ranks],
 *                "before": [checksums], "restore": dir (partial recovery)} (migrating, committing),
 *    "attempts": K, "next_schedule": I, "term"?: T (absent: 0),
 *    "reached"?: R (the furthest step the job is known to have reached, a
 *    periodic checkpoint's at least, saved before that checkpoint's index is
 *    written: a restarted coordinator's rollback looks for checkpoints up
 *    to it; absent: 0),
 *    "model"?: D (rs_config_digest of the model config the job trains: a
 *    coordinator started again on the state with another refuses it, naming
 *    the sections that differ; absent: an earlier rowshift's, not checked),
 *    "job": {"config", "steps", "save", "url", "token", "schedule": [[step, workers]...],
 *            "replicas", "workers": [{"name", "pid"}],
 *            "checkpoints"?: {"dir", "every", "interval", "keep"} (the periodic
 *            checkpoints' options: a local coordinator started again with
 *            --state alone keeps taking them, and rolls back to them)}}
 *
 * "token" (the join token) is there only in local mode's state file (0600):
 * in Kubernetes the state is a ConfigMap, and the token comes from its
 * Secret again on a restart.
 *
 * Each {plan} is a string: the plan's JSON deflated and base64-encoded
 * (zjson.h), about an eighth of its size, so that the state of 2,000 tables
 * on 1,024 workers in the middle of a reshard (two plans) takes 0.3 MB, well
 * under the 1 MiB of a ConfigMap (tests/unit/test_state.c measures it).
 * Version 1 (plans as JSON objects) is still read. Inflated, plans are JSON
 * (their reader needs the model config, which the state names):
 * rs_plan_from_json turns them into plans.
 */
#ifndef RS_STATE_H
#define RS_STATE_H

#include "common/limits.h"
#include "common/status.h"

#include <jansson.h>
#include <stdint.h>

#define RS_STATE_MAX_BYTES ((size_t)512 << 20)
#define RS_STATE_MAX_MEMBERS RS_MAX_WORKERS
#define RS_STATE_MAX_SCHEDULE 64

typedef enum rs_state_phase {
	RS_STATE_TRAINING,   /* generation G runs (or is paused between steps) */
	RS_STATE_MIGRATING,  /* attempt A is being staged: undecided; a restart commits only if every member staged */
	RS_STATE_COMMITTING, /* attempt A is decided: a restart commits it */
	RS_STATE_DONE,       /* training ended: a restart does not train again (Kubernetes: it reports the end) */
	RS_STATE_FAILED,     /* the job failed, for `error`: final too */
} rs_state_phase;

typedef struct rs_state_worker {
	char *name;
	int64_t pid;
} rs_state_worker;

typedef struct rs_state {
	rs_state_phase phase;
	char *error;                /* failed: why */
	int64_t generation, step, bound;
	int64_t last_generation;    /* the highest generation handed out (a pre-copy's included): never again; 0: generation */
	int64_t term;               /* Kubernetes: the term of the coordinator that wrote it (kube_members.h); 0 elsewhere */
	int64_t reached;            /* the furthest step known reached (a checkpoint's at least); 0: none known */
	char *model;                /* the model config's digest (rs_config_digest); NULL: not recorded */
	json_t *plan;               /* owned */
	char **world;
	int32_t nworld;
	/* the attempt in flight (migrating, committing) */
	int64_t attempt_generation; /* 0 when none */
	json_t *attempt_plan;       /* owned */
	char **uni;
	int32_t nuni, attempt_world;
	int32_t *union_of_old;      /* nworld entries; -1: lost with its rows (healing from replicas) */
	uint64_t *before;           /* nbefore per-table checksums of the old world */
	char *restore;              /* partial recovery: the checkpoint the lost rows come back from, or NULL */
	int nbefore;
	int attempts, next_schedule;
	/* the job */
	char *config, *save, *url, *token;
	int64_t steps;
	char *ckpt_dir;             /* the periodic checkpoints' directory, or NULL: none; and their options */
	int64_t ckpt_every, ckpt_interval, ckpt_keep;
	int64_t sched_step[RS_STATE_MAX_SCHEDULE];
	int32_t sched_workers[RS_STATE_MAX_SCHEDULE];
	int nsched;
	int32_t replicas;
	rs_state_worker *workers;
	int nworkers;
	/*
	 * The incarnation each member of the world and the union last joined
	 * with (a random id per worker process): a restarted coordinator tells
	 * a worker rejoining from the same process from a replacement that
	 * took its name and holds none of its rows.
	 */
	char **inc_names, **inc_values;
	int ninc;
} rs_state;

const char *rs_state_phase_name(rs_state_phase p);

/* s as its JSON document; a new reference, NULL without memory. */
json_t *rs_state_to_json(const rs_state *s);

/*
 * Write s to path atomically (temporary file, fsync, rename, fsync of the
 * directory), readable by this user only: it holds the join token.
 */
rs_status rs_state_write(const char *path, const rs_state *s, rs_err *err);

/*
 * Parse a state document (len bytes, need not be NUL-terminated). Every
 * field is checked (types, ranges, counts that must agree, names); the
 * first problem is reported naming `name` and the field. On success *out
 * is filled (free it with rs_state_free); on failure it is left empty.
 */
rs_status rs_state_parse(const char *buf, size_t len, const char *name, rs_state *out, rs_err *err);

/* Read and parse path. RS_ENOTFOUND when it does not exist. */
rs_status rs_state_read(const char *path, rs_state *out, rs_err *err);

/*
 * Whether a local coordinator started on s (read from path) with the
 * command line's --config (NULL: not given) and --steps (-1: not given)
 * carries its job on: RS_OK with *done 0. RS_OK with *done 1 when the job
 * is done, err saying so (nothing to train: the same command run again
 * does nothing). RS_EINVAL with err when the command line contradicts the
 * state (another config; other steps for a job that is done) or s is not a
 * local job's (no join token: a Kubernetes one).
 */
rs_status rs_state_local_resume(const rs_state *s, const char *path, const char *config, int64_t steps, int *done,
				rs_err *err);

/* Free what s owns and zero it. */
void rs_state_free(rs_state *s);

#endif
