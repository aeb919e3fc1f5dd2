/*
 * job_internal.h - the job's insides, shared by job.c (the resharding
 * cycle) and job_status.c (what the status stream, /metrics and the
 * dashboard show of it). Nothing else includes this; names here carry
 * the rs__ prefix where they are not static.
 */
#ifndef RS_JOB_INTERNAL_H
#define RS_JOB_INTERNAL_H

#include "coordinator/job.h"
#include "common/plan.h"
#include "common/proto.h"

#define MAX_MEMBERS 4096

typedef enum phase {
	P_STARTING,
	P_TRAINING,
	P_PAUSED,
	P_MIGRATING,
	P_COMMITTING,
	P_ABORTING,
	P_DONE,
	P_FAILED,
} phase;

/* The phases' names, for logs, the status stream and /metrics. */
extern const char *const rs__phase_names[];

/* What a member last reported. */
typedef enum mstate {
	M_UNKNOWN,   /* recovered from the state file, not heard from since */
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
	int leaving;              /* it asked to leave (SIGTERM) */
	int exited;               /* the membership source saw its process go */
	int replaced;             /* a new process took its name: the one that held its rows is gone */
	int killed;               /* its process died of a signal: the likely first cause of a failure */
	int64_t pid;              /* of the process that joined under this name, 0 when not known */
	char incarnation[65];     /* its random per-process value, "" when not known */
	double away_since;        /* disconnected since (0: connected) */
	double paused_at;
	uint64_t *paused_sum;     /* per table, its rows' checksum at its last pause */
	int staged_ok;
	char staged_why[256];
	uint64_t *staged_sum;     /* per table, its staged rows' checksum; NULL when it holds none */
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
} reshard_record;

/* One (sender, receiver) pair of the attempt in flight: union ranks, and its progress. */
typedef struct pair_progress {
	int32_t src, dst;
	uint64_t bytes, total;
} pair_progress;

struct rs_job {
	rs_job_options o;
	const rs_config *cfg;
	rs_job_source src;
	int ntables;
	member *m;
	size_t nm, cap;
	phase ph;
	double ph_at;             /* when the phase began */
	/* the committed generation */
	int64_t generation;
	rs_plan *plan;
	int32_t *world;           /* member index per rank */
	int32_t nworld;
	int64_t step, bound;      /* the world's run: from `step` (where it last started or paused) to `bound` */
	int next_sched;
	int pause_sent;
	/* the attempt in flight */
	int64_t agen, last_gen;
	rs_plan *aplan;
	int32_t *uni, nuni, aworld;
	int32_t *union_of_old;
	uint64_t *before;         /* per table, the old world's checksum */
	int64_t abound;
	int attempts;
	char last_abort[256];
	/* membership changes */
	double last_change;       /* the last time the candidates changed */
	double scale_at;          /* the last scale request (rowshiftctl or the schedule), 0 when none pending */
	/* timings of the cycle in flight, for the report */
	double t_first_paused, t_paused, t_attempt, t_staged, plan_s;
	int pausing;              /* a world member reported paused since training last (re)started */
	int64_t resume_step;      /* after a commit: the step training resumes at, -1 once it did */
	double t_committed;
	int reshards;
	int32_t initial;          /* workers to start with; asked of the source at the first tick */
	double loss_seen_at;      /* when a world member was first seen gone */
	double t_started;         /* when the first workers were asked for; 0 once generation 1 made a step */
	char why[512];
	/* what the status stream, /metrics and the dashboard show */
	rs_server *srv;           /* where events are published; NULL until set */
	history_point *history;   /* a ring of HISTORY_MAX */
	size_t nhistory, history_head;
	reshard_record reshard_log[RESHARDS_MAX];
	int nreshard_log;
	uint64_t moved_total;     /* bytes moved by committed reshards */
	int aborts;               /* attempts aborted, in all */
	double pause_sum;
	int pause_buckets[10];    /* pauses per /metrics histogram bucket (see job_status.c) */
	pair_progress *pairs;     /* the attempt's pairs */
	int npairs;
	double last_migration_event;
	history_point last;       /* the latest progress report */
	double last_auc;
	int32_t reshard_from;     /* the committed reshard's old world size, for its record */
	uint64_t reshard_moved;   /* and the bytes it moved */
};

/* The snapshot the status stream starts with (README, "Status stream"): a new reference. */
json_t *rs__job_snapshot(const rs_job *j);

/* Where training stands: the last step reported, or where the current run started. */
int64_t rs__job_step(const rs_job *j);

/* Publish ev (stolen) to the status stream. */
void rs__job_publish(rs_job *j, json_t *ev);

/* Record a progress report of rank 0 and publish it. */
void rs__job_progress(rs_job *j, int64_t step, double loss, double auc, double samples_per_s);

/* Record a committed reshard (for /metrics and late-joining status clients) and publish it. */
void rs__job_reshard(rs_job *j, const reshard_record *r);

/* The attempt's pairs from its plan diff (begin_attempt); progress from "migrating" reports. */
void rs__job_pairs_reset(rs_job *j);
void rs__job_migration_event(rs_job *j, int force);

/* GET handler of the coordinator's HTTP server: the dashboard, /metrics, /readyz. */
int rs__job_http_get(void *ctx, const char *path, char **body, size_t *len, const char **content_type);


#endif
