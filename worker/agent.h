/*
 * agent.h - the worker's agent: it joins the coordinator and does what it
 * says, generation after generation. rowshift-worker (worker/main.c) is
 * flags and start-up around one agent; the unit tests drive an agent
 * directly, with a fake coordinator behind its link (tests/unit/test_agent.c).
 *
 * The generation state machine:
 *
 *   start (fresh)      connect the transport, build the trainer (loading a
 *                      checkpoint when told), train
 *   start (a reshard)  connect a transport over the union of old and new
 *                      members, stage the new plan's trainer (rows move
 *                      with their optimizer state, chunk by chunk, each
 *                      checked), report "staged", keep the old model
 *   commit / abort     swap the staged trainer in (a leaving member then
 *                      ends: its rows are with the others) / drop it and
 *                      report "paused" again, the old model intact (a
 *                      joiner, which has no old model, reports "idle")
 *   resume             go on training the current generation
 *   pause, stop        pause at the next step boundary (agreed with the
 *                      other ranks inside the step) / end
 *
 * Training reports "training", "progress" now and then, and ends "paused"
 * (with the model's checksum, listening for the next generation) or "done".
 * A message that does not fit where the agent stands (a commit of a
 * generation not staged, a resume of another generation, a malformed
 * start) is an error: the agent ends with RS_EINVAL and says why.
 *
 * SIGTERM (*leave set) does not stop the step under way: the agent asks the
 * coordinator to drain its rows and keeps training until the commit that
 * hands them over; an agent holding no rows ends at once.
 *
 * When the coordinator's connection drops, the agent keeps its model, keeps
 * training where it can and rejoins for the grace period, repeating its
 * last status (see link.h); past the grace period, or when the rejoin is
 * refused, it ends with an error.
 *
 * Seams: the coordinator behind an rs_coord_conn (link.h); each
 * generation's transport through a connect function (the TCP mesh unless
 * told otherwise; rowshift-worker wraps it with the NCCL bootstrap); time
 * is common/clock.h's. The agent never includes CUDA or NCCL headers.
 *
 * One thread: the agent's calls, its link and its trainer all run on the
 * thread that calls rs_agent_run.
 */
#ifndef RS_AGENT_H
#define RS_AGENT_H

#include "common/config.h"
#include "worker/engine.h"
#include "worker/link.h"
#include "worker/transport_tcp.h"

#include <signal.h>

typedef struct rs_agent rs_agent;

/*
 * How a generation's transport is made: the mesh over tc->addrs (one per
 * rank), listening on tc->listen_fd. The function owns tc->listen_fd from
 * the call on, whatever it returns (rs_tcp_transport_create's contract).
 */
typedef rs_status (*rs_agent_connect_fn)(void *ctx, const rs_tcp_config *tc, rs_transport **out, rs_err *err);

typedef struct rs_agent_config {
	const rs_config *cfg;                /* the model (borrowed, outlives the agent) */
	rs_engine *engine;                   /* where the shards live and the kernels run (borrowed; NULL: the CPU) */
	rs_coord_conn *conn;                 /* the connection to the coordinator (borrowed, not joined yet) */
	const char *host;                    /* the address peers reach this worker's transport on (borrowed) */
	const char *token;                   /* the join token: every transport handshake proves it knows it (borrowed) */
	int timeout_ms;                      /* bound on every wait for a peer or the coordinator's answer */
	int grace_ms;                        /* how long a lost coordinator may stay away */
	const volatile sig_atomic_t *leave;  /* becomes non-zero on SIGTERM: drain and leave; NULL: never */
	rs_agent_connect_fn connect;         /* NULL: rs_tcp_transport_create */
	void *connect_ctx;
	int64_t stall_ms;                    /* tests: every reshard waits this long before rows move */
	int64_t stall_connect_ms;            /* tests: and this long before it connects its transport */
	int64_t exit_after_checkpoint;       /* tests: once the checkpoint of this step is complete, exit at once
						(a worker lost right after a checkpoint); 0: never */
	int exit_before_done;                /* tests: after the last step and the final save, exit at once without
						saying "done" (a worker lost after the end) */
	/*
	 * NULL, or a file that exists exactly while this worker holds a model
	 * of the job: from its first generation's start (or the commit that
	 * brought it in) until it hands its rows over, loses its model or ends.
	 * A Kubernetes readiness probe tests it: Ready means joined, so a
	 * PodDisruptionBudget counts a worker still joining as unavailable.
	 */
	const char *ready_file;
} rs_agent_config;

/* Why rs_agent_run ended well. */
typedef enum rs_agent_end {
	RS_AGENT_DONE,     /* the last step was trained (and the checkpoint asked for written) */
	RS_AGENT_STOPPED,  /* the coordinator said stop */
	RS_AGENT_LEFT,     /* a leaving member's rows were handed over (the commit after its SIGTERM or a shrink) */
	RS_AGENT_NO_ROWS,  /* SIGTERM came while this worker held no rows */
} rs_agent_end;

/*
 * An agent with c's settings (copied; what they point to is borrowed),
 * listening for its first generation's transport on c->host. Nothing is
 * sent yet. RS_ESYS when it cannot listen, RS_ENOMEM; err says why.
 */
rs_status rs_agent_create(const rs_agent_config *c, rs_agent **out, rs_err *err);

/*
 * Join the coordinator (retried for the grace period: it may not be up
 * yet) and follow it until this worker's part is over: RS_OK with *end
 * saying how. On an error (a refused join, a coordinator away past the
 * grace period, a failed step, a message out of place) err says what, and
 * the current generation's transport is aborted so that the other ranks
 * do not wait for this one. Call once.
 */
rs_status rs_agent_run(rs_agent *a, rs_agent_end *end, rs_err *err);

/*
 * Write what is still queued to the coordinator (at most a second), then
 * free everything: the models, transports, plans, the listening socket.
 * NULL-safe. The conn, engine and config stay the caller's.
 */
void rs_agent_destroy(rs_agent *a);

#endif
