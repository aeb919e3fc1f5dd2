/*
 * agent_harness.h - what the agent's tests (test_agent.c: one rank,
 * test_agent_pair.c: two ranks in two processes) share: a fake
 * coordinator connection (rs_coord_conn) whose "coordinator" is a react
 * function, called with every message the agent sends (and a join message
 * at every join), that queues the answers; the coordinator's messages; and
 * running an agent to its end. The trainer is the real one on
 * tests/data/train-model.json.
 */
#ifndef RS_TEST_AGENT_HARNESS_H
#define RS_TEST_AGENT_HARNESS_H

#include "common/planner.h"
#include "common/proto.h"
#include "worker/agent.h"

#include <jansson.h>
#include <signal.h>
#include <stdint.h>

#define FOREVER 100000000 /* steps: training that only a pause or a stop ends */

/* Made by agent_setup, freed by agent_teardown. */
typedef struct agent_fixture {
	rs_config *cfg;
	rs_plan *p1, *p2; /* 1 rank; 2 ranks grown from p1 */
	rs_plan *q2, *q1; /* 2 ranks; 1 rank shrunk from q2 */
	char dir[64];     /* a scratch folder */
	const char *ready_file; /* the agents' c.ready_file (NULL: none); a test sets it and clears it */
} agent_fixture;

extern agent_fixture AF;

/* ---- the fake coordinator -------------------------------------------------------- */

typedef struct fake fake;

/* The coordinator's part: called with every message the agent sends, and a join at every join. */
typedef void (*react_fn)(fake *f, json_t *msg);

struct fake {
	rs_coord_conn base;
	react_fn react;
	int me;                        /* a member of a two-process world: 0 or 1 */
	int joined, joins;
	rs_status refuse;              /* non-OK: every join is refused with it */
	int away;                      /* joins that find nobody before one succeeds */
	int drop;                      /* the next receive or poll finds the connection closed */
	json_t *inbox;                 /* for the agent */
	json_t *sent;                  /* everything the agent sent, in order */
	size_t sent_at_join[8];        /* len(sent) at each join */
	char join_addr[8][64];         /* the address each join announced */
	int seen[RS_MSG_TYPE_COUNT];   /* per type, how many came so far (joins included) */
	double deadline;               /* past it, the fake refuses the agent: no test hangs */
	char failed[256];              /* what the react function found wrong */
	volatile sig_atomic_t leave;   /* the agent's SIGTERM flag */
};

/* A fake for member me (0 or 1) of a world, react its coordinator; it refuses the agent after 60 s. */
void fake_init(fake *f, react_fn react, int me);
void fake_free(fake *f);

/* Queue msg (stolen) for the agent. */
void fake_say(fake *f, json_t *msg);

/* What the react function found wrong: the agent is refused from now on, so it ends. */
void fake_fail(fake *f, const char *what);

/* The k-th (0-based) message of type t the agent sent, or NULL: borrowed. */
json_t *fake_sent(const fake *f, rs_msg_type t, int k);

static inline int64_t jint(const json_t *m, const char *key) { return json_integer_value(json_object_get(m, key)); }
static inline const char *jstr(const json_t *m, const char *key) { return json_string_value(json_object_get(m, key)); }

/* ---- the coordinator's messages ---------------------------------------------------- */

typedef struct start_spec {
	int64_t generation, rank, world, first_step, steps;
	int last;
	const rs_plan *plan, *prev;  /* prev: a reshard from prev */
	const char *peers[2];
	int npeers;                  /* the union's size */
	int32_t union_of_old[2];     /* a reshard: per old rank, its union rank */
	int64_t eval_every, eval_samples;
	const char *save;
	const char *checkpoint_dir;  /* periodic checkpoints (NULL: none) ... */
	int64_t checkpoint_every;    /* ... at every multiple of it */
} start_spec;

/* The start message s describes (a new reference). */
json_t *msg_start(const start_spec *s);

/* A fresh start of generation 1 on a world of one rank listening on addr. */
json_t *msg_fresh(const char *addr, int64_t steps, int last);

/* At the first join (m), a fresh start of `steps` steps on the address it announced. 1 when m was a join. */
int fake_start_at_first_join(fake *f, json_t *m, int64_t steps, int last);

/* A reshard of the world of one rank to itself (the same plan: every row kept) as generation gen. */
json_t *msg_restage(int64_t gen, const char *addr, int64_t first, int64_t steps);

/* A resume of generation gen to `steps`; an abort/commit/... of generation gen. */
json_t *msg_resume(int64_t gen, int64_t steps, int last);
json_t *msg_generation(rs_msg_type t, int64_t gen);

/* ---- running an agent ---------------------------------------------------------------- */

typedef struct outcome {
	rs_status st;
	rs_agent_end end;
	rs_err err;
} outcome;

/* Create an agent over f, run it to its end, destroy it. */
outcome agent_run_over(fake *f, int grace_ms);

/* Run an agent in this process with react as its coordinator; the fake's findings fail the test. */
outcome agent_run_one(fake *f, react_fn react, int grace_ms);

/* The agent ended this way, without an error; it failed with st, its error saying `says`. */
void assert_agent_ended(const outcome *o, rs_agent_end end);
void assert_agent_failed(const outcome *o, rs_status st, const char *says);

/* cmocka group set-up and tear-down: AF */
int agent_setup(void **state);
int agent_teardown(void **state);

#endif
