/*
 * agent_internal.h - the agent's state, shared by agent.c (the generation
 * state machine, training) and agent_reshard.c (staging, commit and abort
 * of a reshard, pre-copy). Nothing else includes this.
 */
#ifndef RS_AGENT_INTERNAL_H
#define RS_AGENT_INTERNAL_H

#include "worker/agent.h"
#include "common/proto.h"
#include "worker/checkpointer.h"
#include "worker/train.h"

/* A generation as the coordinator started it, and where training stands in it. */
typedef struct run {
	int64_t generation, rank, step, steps, eval_every, eval_samples;
	int last;
	char save[4096];        /* "" for no checkpoint at the end */
	char ckpt_dir[4096];    /* periodic checkpoints: under this directory ("": none) */
	int64_t ckpt_every;     /* ... at every multiple of this step (0: none) */
	int64_t ckpt_interval;  /* ... and once this many seconds passed since the last (0: none) */
} run;

struct rs_agent {
	rs_agent_config c;
	rs_engine *engine;      /* c.engine, or the CPU */
	rs_link link;
	int lfd;                /* listening for the next generation's transport, or -1 */
	char addr[300];         /* where lfd listens, announced in every join, "paused" and "idle" */
	/* the model, its generation and where training stands */
	rs_trainer *tr;
	rs_transport *t, *uni;
	rs_plan *plan;
	run cur;                /* the generation this worker trains */
	/* a staged reshard waiting for commit or abort */
	int64_t st_gen;         /* 0: none */
	int st_ok;
	rs_trainer *st_tr;
	rs_transport *st_t, *st_uni;
	rs_plan *st_plan;
	run staged;
	/*
	 * A pre-copied reshard (agent_reshard.c): its start message while the
	 * world has not yet agreed to begin, then the copy in flight (of
	 * generation st_gen, into st_uni / st_t / st_plan).
	 */
	json_t *pc_start;       /* NULL: none waiting */
	rs_precopy *pc;         /* NULL: none in flight */
	rs_plan *pc_prev;       /* what pc's spec points to: the previous plan, union_of_old */
	int32_t *pc_uoo;
	int pc_said;            /* "precopied" was sent */
	int pc_bounded;         /* a round went through: the rounds between two steps wait a quarter timeout in all */
	double pc_reported;     /* when its progress was last reported */
	struct {                /* pacing the background rounds (rs__precopy_step) */
		double mark;    /* when the last step's rounds ended */
		double step_s;  /* a step's time without rounds, recent (0: not measured yet) */
		double round_s; /* a round's time, recent (0: not measured yet) */
		double round_at; /* when the last round ended */
		double credit;  /* rounds owed: every rank adds the same mean rate, so all run the same rounds */
		double before_s; /* a step's time before the copy began */
		int64_t steps;  /* steps while rounds were left, and their time with their rounds */
		double busy_s;
	} pace;
	rs_checkpointer *ckpt;  /* periodic checkpoints, written off the training thread */
	double ckpt_at;         /* when this worker last took one (or its generation started) */
	int64_t ckpt_gen;       /* the generation ckpt_at is of */
	int dropped;            /* the coordinator ended the generation in training: no healing, drop the model */
	int ready;              /* c.ready_file exists */
	int stalled;            /* its step failed and the model was kept (stall): the transport is stopped */
};

/* agent.c */
rs_status rs__agent_relisten(rs_agent *a, rs_err *err);
/* The model's per-table checksums as JSON (new references; NULL without memory), with held those of every copy (2D). */
json_t *rs__agent_checksums(const rs_agent *a, const rs_trainer *tr, json_t **held);
/* Paused at a->cur.step, listening for the next generation: tell the coordinator, with the model's checksum. */
rs_status rs__agent_report_paused(rs_agent *a, rs_err *err);
/* Forget the staged reshard (or the pre-copy in flight): its trainer, transports and plan. */
void rs__agent_drop_staged(rs_agent *a);
void rs__agent_set_ready(rs_agent *a, int on);
/* A transport over the start message's peers (one per union rank), on the listening socket. */
rs_status rs__agent_connect_peers(rs_agent *a, const rs_msg_start *s, rs_transport **out, rs_err *err);
void rs__agent_take_run(run *r, const rs_msg_start *s);

/* agent_reshard.c */
/* Phase one of a reshard: stage the new plan's trainer (takes plan), then report how it went. */
rs_status rs__agent_stage(rs_agent *a, const rs_msg_start *s, rs_plan *plan, rs_err *err);
/* Phase two: the coordinator committed the staged generation. *left when this worker handed its rows over. */
rs_status rs__agent_commit(rs_agent *a, int64_t gen, int *left, rs_err *err);
/* The coordinator aborted the staged generation: back to the old model, paused where it was. */
rs_status rs__agent_abort_staged(rs_agent *a, int64_t gen, const char *why, rs_err *err);
/*
 * Pre-copy. In training, a start with "precopy" is kept and the world
 * votes to begin (rs__precopy_offer); after each step rs__precopy_step
 * begins it once all agreed, then runs its rounds, and says "precopied"
 * when they are done. A member not training (a joiner, or an old member
 * paused at its bound) begins at once and runs its rounds back to back
 * (rs__precopy_now). "finish" ends it (rs__precopy_finish) and reports
 * staged as rs__agent_stage does. A failure of the copy never fails
 * training: the copy is dropped (its connections closed, so the others
 * fail at once) and "staged" not ok tells the coordinator.
 */
void rs__precopy_offer(rs_agent *a, json_t *start);
/* An abort of generation gen: a pre-copy of it (waiting or in flight) is called off (1), or there is none (0). */
int rs__precopy_call_off(rs_agent *a, int64_t gen);
rs_status rs__precopy_step(rs_agent *a, const rs_step_stats *stats, rs_err *err);

/* What the pacing of a member's background rounds goes by, after a step (rs__precopy_step). */
typedef struct rs_pace_in {
	double share;           /* the config's precopy_share */
	int64_t pending;        /* rounds left, the passes included */
	int last_pass_left;     /* only the last pass is */
	int64_t steps_left;     /* before the generation ends (where a scheduled change pauses the world) */
	double step_s, round_s; /* a step's and a round's recent time (0: not measured yet) */
	double since_round;     /* seconds since the last round ended (the joiners' wait in the next one) */
	int timeout_ms;         /* the member's bound on every wait */
} rs_pace_in;

/* The rounds per step a member asks for (agent_reshard.c says how): the world runs the mean of its ranks' asks. */
float rs__precopy_pace(const rs_pace_in *in);
rs_status rs__precopy_now(rs_agent *a, const rs_msg_start *s, rs_plan *plan, rs_err *err);
/* Paused (at the run's end) before the world agreed to begin a kept start: begin it now. */
rs_status rs__precopy_paused(rs_agent *a, rs_err *err);
rs_status rs__precopy_finish(rs_agent *a, json_t *msg, rs_err *err);

#endif
