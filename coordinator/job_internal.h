/*
 * job_internal.h - the job's insides, shared by its parts:
 *   job.c           life cycle, the server glue, the tick
 *   job_members.c   who the members are, who is wanted, when a change is ready
 *   job_cycle.c     the generation cycle: start, pause, attempt, commit, abort
 *   job_precopy.c   a reshard pre-copied while the old world trains
 *   job_dispatch.c  what members say on the control channel
 *   job_persist.c   the persisted state, and recovery from it
 *   job_events.c    one event fan-out to every report sink
 *   job_status.c    the status stream's snapshot, /metrics, /readyz, dashboard
 *   job_ckpt.c      periodic checkpoints: the ranks' files gathered, the index written last
 *   job_recover.c   a world member lost: the world rolled back to the latest checkpoint
 * Nothing else includes this; names here carry the rs__ prefix where they
 * are not static.
 */
#ifndef RS_JOB_INTERNAL_H
#define RS_JOB_INTERNAL_H

#include "coordinator/job.h"
#include "common/limits.h"
#include "common/plan.h"
#include "common/proto.h"

#include <stdarg.h>

/* Periodic checkpoints gathered at once (job_ckpt.c). */
#define RS_CKPT_GATHERS 4

typedef enum phase {
	P_STARTING,
	P_TRAINING,
	P_PAUSED,
	P_MIGRATING,
	P_COMMITTING,
	P_ABORTING,
	P_RECOVERING, /* a world member was lost: waiting for the survivors and replacements */
	P_DONE,
	P_FAILED,
} phase;

/* The phases' names, for logs, the status stream and /metrics. */
extern const char *const rs__phase_names[];

/* What a member last reported. */
typedef enum mstate {
	M_UNKNOWN,   /* recovered from the state, not heard from since */
	M_IDLE,      /* joined, outside the world, listening at addr */
	M_TRAINING,
	M_PAUSED,
	M_STAGING,
	M_STAGED,
	M_COMMITTED,
	M_DONE,
} mstate;

typedef struct member {
	char name[64];
	rs_conn *conn;            /* NULL while disconnected */
	char addr[300];           /* where its transport listens for the next generation */
	mstate st;
	int64_t gen, step;        /* the generation and step it last reported */
	int64_t start_gen;        /* the generation whose start (or finish) went out on its present connection,
				     not answered yet (job_cycle.c, tick_migrating), or 0 */
	int leaving;              /* it asked to leave (SIGTERM) */
	int exited;               /* the membership source saw its process go */
	int replaced;             /* a new process took its name: the one that held its rows is gone */
	int killed;               /* its process died of a signal: the likely first cause of a failure */
	int64_t pid;              /* of the process that joined under this name, 0 when not known */
	char incarnation[65];     /* its random per-process value, "" when not known */
	double away_since;        /* disconnected since (0: connected) */
	uint64_t *paused_sum;     /* per table, its rows' checksum at its last pause */
	uint64_t *held_sum;       /* ... and that of every copy it holds (2D), when has_held */
	int has_held;
	int64_t prepared;         /* paused one step short, that step prepared: the step it can catch up to (0: none) */
	int64_t catching;         /* the step it was asked to catch up to since its last pause report (0: none) */
	double catching_at;       /* ... when */
	int lost;                 /* of the current world, its rows gone: healing rebuilds them from replicas */
	int staged_ok;
	char staged_why[256];
	uint64_t *staged_sum;     /* per table, its staged rows' checksum; NULL when it holds none */
	int64_t precopied;        /* the generation whose background rounds it finished (pre-copy) */
	int64_t said_gen;         /* the generation it last said it trains */
	int64_t done_gen;         /* the generation whose last step it said "done" (kept through a restart of it), or 0 */
	int64_t addr_gen;         /* ... and the one it said so with an addr: it listens there and can pre-copy */
	rs_msg_staged staged;     /* the numbers of its last "staged" (strings and JSON not kept) */
	double samples_per_s;     /* from its last progress report */
} member;

/* One point of the loss/AUC/throughput history the status stream replays. */
typedef struct history_point {
	int64_t generation, step;
	double loss, auc, samples_per_s; /* auc < 0 when not evaluated */
} history_point;

#define HISTORY_MAX 2000
#define RESHARDS_MAX 256

/* A committed reshard, as the status stream and /metrics report it. */
typedef struct reshard_record {
	int64_t generation, step;
	int32_t from, to;
	double pause_s, migrate_s;
	uint64_t moved_bytes;
	double stopped_s; /* of pause_s, until every member had committed (the rest: rank 0's first step) */
} reshard_record;

/* One (sender, receiver) pair of the attempt in flight: union ranks, and its progress. */
typedef struct pair_progress {
	int32_t src, dst;
	uint64_t bytes, total;
} pair_progress;

struct rs_job {
	rs_job_options o;         /* as given (max_attempts defaulted) */
	const rs_config *cfg;
	int ntables;
	rs_job_source src;        /* where workers come from */
	rs_job_io io;             /* how messages reach them and status clients */
	phase ph;
	double ph_at;             /* when the phase began */
	char why[512];            /* a failed job's reason */
	int state_broken;         /* it failed because its state could not be saved: a restart resumes it */
	struct {                  /* a save that may wait (rs__persist_soon) and failed: tried again from the tick */
		double due;           /* when; 0: none pending */
		double wait;          /* the wait before the try after that */
		const char *why;
	} later;

	/* the members: every worker that joined (or that the state named) */
	struct {
		member *v;
		size_t n, cap;
		double last_change;   /* when the candidates for the next world last changed */
		double scale_at;      /* the last scale request (rowshiftctl or the schedule), 0 when none pending */
		int32_t initial;      /* workers to start with; asked of the source at the first tick */
		double loss_seen_at;  /* when a world member was first seen gone */
		struct early_exit {   /* per worker that exited before it joined: how often in a row (src.early_exits_max) */
			char name[64];
			int n;
		} *early;
		size_t nearly, early_cap;
	} mem;

	/* the committed generation and its run */
	struct {
		int64_t generation;
		rs_plan *plan;
		int32_t *world;       /* member index per rank */
		int32_t nworld;
		int64_t step, bound;  /* the run: from `step` (where it last started or paused) to `bound` */
		int next_sched;       /* the schedule's next entry */
		int pause_sent;
		int pausing;          /* a world member reported paused since training last (re)started */
		int64_t resume_step;  /* after a commit: the step training resumes at, -1 once it did */
		int64_t stale_gen;    /* recovered: a generation the last coordinator handed out for a pre-copy, never resolved */
		int sched_asked;      /* pre-copy: 1 + the schedule entry whose workers were asked for ahead, 0: none */
	} cur;

	/* the reshard attempt in flight (generation 0: none) */
	struct {
		int64_t generation;
		int64_t last_generation; /* the highest generation number handed out */
		rs_plan *plan;
		int32_t *uni, nuni;   /* the union: the new world in rank order, then the members that leave */
		int32_t nworld;       /* the new world's size */
		int32_t *union_of_old; /* per old rank, its union rank */
		uint64_t *before;     /* per table, the old world's checksum */
		int64_t bound;
		int failures;         /* attempts aborted in a row */
		char last_abort[256];
		pair_progress *pairs; /* sender -> receiver progress, from the plan diff */
		int npairs;
		uint64_t restored_bytes; /* partial recovery: what the plan diff reads from the checkpoint instead */
		int64_t restored_rows;   /* ... and how many distinct table rows that is (ZCH tables: slots) */
		int precopy;          /* pre-copied: the old world trains on until it pauses, then "finish" */
	} att;

	/*
	 * The periodic checkpoints being gathered (job_ckpt.c): several at
	 * once, since a rank with little or nothing to write (a replica group
	 * other than 0) reports the next one before a slow writer reports this.
	 */
	struct {
		struct ckpt_gather {
			int64_t step, generation; /* step 0: a free slot */
			int32_t nworld, ngot;
			unsigned char *got;   /* per rank of that generation: its files are in */
			json_t *sums;         /* {file: {"crc32c", "bytes"}} of the files reported so far */
			int64_t dense_params;
			double started;       /* when its first report came */
		} g[RS_CKPT_GATHERS];
		int64_t last_complete; /* the step of the latest complete checkpoint, 0: none */
		int64_t known;        /* the furthest step the state of an earlier coordinator of this job says it reached */
		int complete;         /* complete checkpoints so far */
		struct {              /* the world the last reshard replaced: its checkpoints in flight may complete */
			rs_plan *plan;  /* NULL: none kept */
			int32_t *world, n;
			int64_t generation;
		} prev;
	} ck;

	/* recovery from a lost world member (job_recover.c) */
	struct {
		int32_t *old, nold;   /* the lost generation's world, while recovering */
		int64_t old_gen;      /* ... and its number */
		rs_plan *old_plan;    /* ... and its plan */
		int32_t *att, natt;   /* the union of the attempt that was in flight (if any) ... */
		int64_t att_gen;      /* ... and its generation (0: none) */
		char load[4096];      /* the checkpoint the world starts again from ("": none, from step 0) */
		int64_t from, to;     /* the step training was near, and the one it goes back to */
		double started;       /* when the loss was acted on; 0 once the new generation made a step */
		int total, done;      /* recoveries begun, and those whose generation made its first step */
		int in_a_row;         /* back to the same step without training past the loss between */
		double seconds_sum, last_s;
		char why[512];        /* what was lost */
		int healing;          /* the recovery in flight rebuilds from replicas (no rollback) */
		int healed;           /* recoveries begun that way */
		int replica;          /* the last recovery's kind: from replicas (1) or a rollback (0) */
		/*
		 * Partial recovery (cluster.recovery "partial"), a kind of healing:
		 * rows lost with every copy come back from the checkpoint in load
		 * (of step restored_step); the others keep their current values.
		 */
		int partial;          /* the recovery in flight (or the last one) restores rows so */
		int partials;         /* recoveries begun that way (counted in healed too) */
		int64_t restored_step;
		int64_t stale_rows;   /* distinct rows the last one restored (ZCH: slots), known at its commit */
		int64_t stale_total;  /* ... and those of every one that trained on */
	} rec;

	/* timings of the cycle in flight, for its report */
	struct {
		double started;       /* when the first workers were asked for; 0 once generation 1 made a step */
		double first_paused, paused, attempt, staged, committed;
		double plan_s;
		int32_t from;         /* the committed reshard's old world size */
		uint64_t moved;       /* and the bytes it moved */
	} t;

	/* what the reports show */
	struct {
		int reshards;         /* committed */
		int aborts;           /* attempts aborted, in all */
		history_point *history; /* a ring of HISTORY_MAX */
		size_t nhistory, history_head;
		reshard_record log[RESHARDS_MAX];
		int nlog;
		uint64_t moved_total; /* bytes moved by committed reshards */
		double pause_sum, stopped_sum;
		int pause_buckets[10]; /* pauses per /metrics histogram bucket (see job_status.c) */
		double last_migration_event;
		int migration_held;   /* progress came within the limit: sent once it allows (rs__job_status_tick) */
		history_point last;   /* the latest progress report */
		double last_auc;
	} rep;
};

/* ---- job.c ---------------------------------------------------------------------------- */

/* The job's clock (monotonic seconds), and the wall clock for the time stamps of status events. */
double rs__job_now(const rs_job *j);
double rs__unix_now(void);

/* Queue msg (stolen) to member m, when connected: 1 when queued. */
int rs__job_send(rs_job *j, member *m, json_t *msg);

/* Where training stands: the last step reported, or where the current run started. */
int64_t rs__job_step(const rs_job *j);

/* Enter phase p (and tell the status stream when it changed). */
void rs__job_set_phase(rs_job *j, phase p);

/* The job failed: keep the reason, stop restarting workers. */
void rs__job_fail(rs_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- job_members.c -------------------------------------------------------------------- */

int rs__member_find(const rs_job *j, const char *name);
/* The member of this name, added when new; -1 when the job is full or memory ran out. */
int rs__member_add(rs_job *j, const char *name);
int rs__member_in_world(const rs_job *j, int i);
int rs__member_in_union(const rs_job *j, int i);
/* Gone for good: its process exited, or it stayed away past the timeout. */
int rs__member_gone(const rs_job *j, const member *m);
/* name exited before it joined (exited: 1; returns how often in a row), or joined (0: the count starts again). */
int rs__member_early_exit(rs_job *j, const char *name, int exited);
/* The member at connection c, or -1. */
int rs__member_at(const rs_job *j, const rs_conn *c);

/*
 * The members the next world should have: the current world's members that
 * stay, in rank order, then the wanted idle joiners by ordinal. Returns the
 * count; *pending gets how many wanted workers have not joined yet.
 */
int32_t rs__members_candidates(const rs_job *j, int32_t *out, int *pending);
/* No member is marked lost any more (healed, or rolled back). */
void rs__members_clear_lost(rs_job *j);
int rs__members_same_world(const rs_job *j, const int32_t *c, int32_t n);
/* While training: whether a membership change is ready to act on (the candidates in c). */
int rs__members_change_ready(rs_job *j, int32_t *c, int32_t *nc);
/* The candidates changed: restart the debounce. */
void rs__members_changed(rs_job *j);
/* Table names whose rows member i holds in the current plan, for messages. */
void rs__member_tables(const rs_job *j, int i, char *buf, size_t n);

/* ---- job_cycle.c ---------------------------------------------------------------------- */

void rs__cycle_tick(rs_job *j);
/*
 * Generation `gen` over the candidates c (n, in rank order) with a fresh
 * plan, training from `step`, loading `load` first when not NULL. 1 when
 * started, 0 when the job failed.
 */
int rs__cycle_start(rs_job *j, const int32_t *c, int32_t n, int64_t gen, const char *load, int64_t step);
/* Where a run starting at `step` stops: the next schedule step after it, or the end. */
int64_t rs__cycle_bound_after(const rs_job *j, int64_t step);
void rs__cycle_free_attempt(rs_job *j);
/*
 * The job's last step ended on every rank (every member of the world said
 * "done", or one did after the final save's barrier): the state says done,
 * the membership source is told (it stops the workers), the phase is done.
 */
void rs__cycle_complete(rs_job *j);
/* Rank 0 reported a step: a resumed generation may complete its reshard's report. */
void rs__cycle_progress(rs_job *j, int64_t step);
/* The attempt's sender -> receiver pairs from its plan diff, their progress at 0 (RS_ENOMEM). */
rs_status rs__cycle_pairs_reset(rs_job *j);
/* How long the multi-member phases (staging, committing, returning after an abort) may take, in seconds. */
double rs__cycle_phase_timeout(const rs_job *j);
/* msg (a new reference, taken) to every member of the current world, or of the attempt's union. */
void rs__cycle_send_world(rs_job *j, json_t *msg);
void rs__cycle_send_union(rs_job *j, json_t *msg);
/* "pause" to every member of the world, and the status stream held until the pause is over. */
void rs__cycle_pause_world(rs_job *j);
/* The attempt over the candidates cand (n) planned: 1, or 0 when it could not be (aborted, or the job failed). */
int rs__cycle_plan_attempt(rs_job *j, const int32_t *cand, int32_t n);
/* Every union member sent its start message: 1, or 0 (the attempt aborted). */
int rs__cycle_send_starts(rs_job *j);
/* The attempt in flight is over (why: fmt, ap): reported, persisted as training when asked, the union told; 0: the job failed. */
int rs__cycle_end_attempt(rs_job *j, int persist, const char *fmt, va_list ap);
/* The old world's checksums, taken at this pause. */
void rs__cycle_old_sums(rs_job *j);

/* ---- job_precopy.c -------------------------------------------------------------------- */

/* Whether the candidates c (n) can be pre-copied to: 1 yes, 0 no, -1 not yet (the world still starts). */
int rs__cycle_precopy_can(const rs_job *j, const int32_t *c, int32_t n);
/* Plan the attempt over c (n) and start its pre-copy beside training. */
void rs__cycle_precopy_begin(rs_job *j, const int32_t *c, int32_t n);
/* The pre-copy in flight is called off: the union drops it, the old world trains on, the change waits. */
void rs__cycle_precopy_call_off(rs_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A member's pre-copy of the attempt in flight failed: the attempt is called off, the world trains on. */
void rs__cycle_precopy_failed(rs_job *j, const member *m, const char *why);
/* Training with a pre-copy in flight: call it off, or pause when every member's rounds are done. */
void rs__cycle_precopy_tick(rs_job *j);
/* The old world paused with a pre-copy in flight: the union finishes it and stages. */
void rs__cycle_precopy_finish(rs_job *j);
/* A schedule's workers asked for as the run toward its step starts, so that the reshard pre-copies. */
void rs__cycle_precopy_ask_schedule_ahead(rs_job *j);

/* ---- job_dispatch.c ------------------------------------------------------------------- */

void rs__dispatch_join(void *ctx, rs_conn *c, const rs_msg_join *jm);
void rs__dispatch_message(void *ctx, rs_conn *c, json_t *msg);
void rs__dispatch_close(void *ctx, rs_conn *c);

/* ---- job_persist.c -------------------------------------------------------------------- */

/* Persist the job as it stands; 0 (the job failed) when that fails: a restart could not resolve it. */
int rs__persist(rs_job *j, rs_state_phase ph);
/*
 * Persist the job in the phase it is in, where a failure only costs what the
 * save would have added: one try (the loop goes on serving its members);
 * one that fails is warned, naming why, and when the failure may pass (the
 * API away, a 5xx: RS_ECURL, RS_EIO) tried again from the tick with a
 * growing wait, with the state as it is by then, until a save lands or a
 * decision's save (rs__persist) makes it moot.
 */
void rs__persist_soon(rs_job *j, const char *why);
/* The save rs__persist_soon left for later, when it is due. */
void rs__persist_tick(rs_job *j);

/* ---- job_events.c --------------------------------------------------------------------- */

/*
 * Everything the job reports goes through one fan-out: each event is
 * handed to every sink (the human-readable report, the log, --log-json,
 * the status stream, the membership source's events), and each sink
 * writes what it shows of that kind.
 */
typedef enum job_event_kind {
	EV_PHASE,       /* the phase changed */
	EV_MEMBER,      /* a member joined (addr), asks to drain, was lost or left: what, name, detail; quiet: no log line */
	EV_STARTED,     /* generation 1 started */
	EV_FIRST_STEP,  /* generation 1 made its first step: seconds (since its workers were asked for) */
	EV_PROGRESS,    /* rank 0's report: step, loss, auc (< 0: none), samples_per_s */
	EV_TEACHER_AUC, /* synthetic data's ceiling: auc */
	EV_SCHEDULE,    /* the schedule scales: step, workers */
	EV_RESUMED,     /* a generation resumed without a reshard */
	EV_ATTEMPT,     /* an attempt began */
	EV_MIGRATION,   /* the attempt's progress (force: the last one) */
	EV_STAGED,      /* every member staged and the checksums match: moved, diff, and the phase times */
	EV_ABORTED,     /* the attempt aborted: reason */
	EV_COMMITTED,   /* the attempt is the generation now */
	EV_RESHARDED,   /* training resumed after a reshard: the reshard's record */
	EV_DONE,        /* training ended */
	EV_FAILED,      /* the job failed: j->why */
	EV_CHECKPOINT,  /* a periodic checkpoint is complete: step, detail (its directory), moved (its bytes), seconds (since its first rank's report) */
	EV_RECOVERING,  /* a world member was lost: reason (what), step (rolled back to), detail (the checkpoint, NULL: none) */
	EV_RECOVERED,   /* the recovered generation made its first step: seconds (since the loss was acted on) */
} job_event_kind;

typedef struct job_event {
	job_event_kind kind;
	const char *what, *name, *detail, *addr;    /* EV_MEMBER */
	int quiet;                                  /* EV_MEMBER */
	const char *reason;                         /* EV_ABORTED */
	int64_t step;
	int32_t workers;
	double seconds, loss, auc, samples_per_s;
	uint64_t moved, diff;                       /* EV_STAGED */
	double connect_s, prepare_s, move_s;        /* EV_STAGED */
	int force;                                  /* EV_MIGRATION */
	const reshard_record *record;               /* EV_RESHARDED */
} job_event;

void rs__emit(rs_job *j, const job_event *ev);

/*
 * Hold the status stream while a reshard has the world stopped, or is about
 * to: from the pause asked for (or a member's, at a scheduled step) to the
 * first step after it (EV_RESHARDED), or to going on without a reshard;
 * let it go otherwise (rs_server_status_hold). Recovery is not held: its
 * world is lost, not paused, and it is told as it goes. At every event.
 */
void rs__job_status_hold(rs_job *j);
/* Send the migration progress the ten-a-second limit held back, once it allows (each tick). */
void rs__job_status_tick(rs_job *j);

/* ---- job_ckpt.c ----------------------------------------------------------------------- */

/* A world member's "checkpointed": its files of the checkpoint at a step are in place. */
rs_status rs__job_checkpointed(rs_job *j, int member_index, json_t *msg, rs_err *err);

/* Forget the checkpoint being gathered (the job ends). */
/*
 * Whether a periodic checkpoint of this generation is being gathered that
 * can still complete: every rank whose part is missing is alive (a partial
 * recovery waits for it: the newer, the less stale).
 */
int rs__ckpt_completing(const rs_job *j);
void rs__ckpt_free(rs_job *j);
/*
 * A reshard replaces the current world: keep it (takes j->cur.plan and j->cur.world, leaving them NULL) for
 * its checkpoints still being written; rs__ckpt_drop_world lets it go (a rollback: nothing of it may complete).
 */
void rs__ckpt_keep_world(rs_job *j);
void rs__ckpt_drop_world(rs_job *j);

/*
 * Forget the checkpoint being gathered (the next complete one is after
 * step); with `remove`, delete the periodic checkpoints a rollback to step
 * abandons: those of steps in (step, reached], and any newer one without
 * its index.
 */
void rs__ckpt_rollback(rs_job *j, int64_t step, int64_t reached, int remove);
/*
 * The newest periodic checkpoint of a step <= near whose index is written
 * (its directory into dir, its step into *step), its files not read: the
 * workers check those they restore from. 0 when there is none.
 */
int rs__ckpt_newest_indexed(const rs_job *j, int64_t near, char *dir, size_t n, int64_t *step);
/* The highest step this run's checkpoints reached: complete, being gathered, or as an earlier coordinator's state says (0: none). */
int64_t rs__ckpt_reached(const rs_job *j);
/* The furthest step this run is known to have reached: by rank 0's reports, or by its checkpoints (rs__ckpt_reached). */
int64_t rs__ckpt_near(const rs_job *j);

/* ---- job_recover.c -------------------------------------------------------------------- */

/*
 * World member i was lost (died, vanished, or lost its generation: why)
 * holding rows nobody else has: roll the world back to the latest complete
 * checkpoint, or fail the job when that cannot help.
 */
void rs__recover(rs_job *j, int i, const char *why);
/* Healing a 2D world: the lost rows' checksums as their surviving copies report them (1), or 0 when copies disagree. */
int rs__heal_sums(rs_job *j, uint64_t *before);
/* "replica", "partial" or "rollback": the last recovery's kind, as events and /metrics name it. */
const char *rs__recovery_kind(const rs_job *j);
/* The healing reshards keep failing: roll back instead. */
void rs__heal_give_up(rs_job *j, const char *why);
/*
 * Partial recovery, as its reshard begins (and begins again): the newest
 * complete checkpoint of a step <= the survivors' (the least stale) into
 * rec.load (1), or 0 when none is left; on a retry, the newest whose files
 * all pass their checksums.
 */
int rs__restore_newest(rs_job *j);
/*
 * A restarted coordinator found a healing attempt in its state (lost
 * members; restore: the checkpoint of a partial one, or NULL): the
 * recovery goes on as one of this coordinator's, reported when it ends.
 */
void rs__recover_resumed(rs_job *j, const char *restore);
void rs__recover_tick(rs_job *j);
/* Member i (re)joined while recovering: a member of the lost world is told again to drop it. */
void rs__recover_rejoined(rs_job *j, int i);
/* Forget the recovery's state (the job ends). */
void rs__recover_free(rs_job *j);

/* ---- job_status.c --------------------------------------------------------------------- */

/* The snapshot the status stream starts with (README, "Status stream"): a new reference. */
json_t *rs__job_snapshot(const rs_job *j);

/* The attempt's progress as the status stream shows it: a new reference. */
json_t *rs__job_migration_json(const rs_job *j);
json_t *rs__history_json(const history_point *h);
json_t *rs__reshard_json(const reshard_record *r);

/* Upper bounds (seconds) of the /metrics histogram of reshard pauses; the last bucket is +Inf. */
extern const double rs__pause_bounds[9];

/* GET handler of the coordinator's HTTP server: the dashboard, /metrics, /readyz. */
int rs__job_http_get(void *ctx, const char *path, char **body, size_t *len, const char **content_type);

#endif
