/*
 * link.h - the worker's link to the coordinator: a connection that
 * outlives the coordinator going away for a while.
 *
 * Two layers:
 *
 *   rs_coord_conn   one connection: join, send, flush, receive, poll, drop.
 *                   An interface (a struct of function pointers), so the
 *                   agent runs against a fake in the unit tests
 *                   (tests/unit/test_agent.c); the real one is the
 *                   WebSocket client of common/control.h
 *                   (rs_coord_conn_control).
 *   rs_link         what the agent talks through. It remembers the last
 *                   status message ("paused", "staged", ...) and repeats it
 *                   after every rejoin (after the last checkpoint report,
 *                   repeated too), which is how a restarted
 *                   coordinator learns where this worker stands; it sends a
 *                   leave request once SIGTERM came (and again after a
 *                   rejoin); when the connection drops it rejoins for up to
 *                   the grace period, then gives up. A refused rejoin is
 *                   final.
 *
 * Everything runs on the agent's thread, but a keeper's (below), which
 * services the connection while the agent's thread is busy for long.
 * *leave is the only thing another context (a signal handler) may change.
 */
#ifndef RS_LINK_H
#define RS_LINK_H

#include "common/status.h"

#include <jansson.h>
#include <pthread.h>
#include <signal.h>

typedef struct rs_coord_conn rs_coord_conn;

typedef struct rs_coord_conn_ops {
	/*
	 * Connect, join (announcing addr, where this worker's transport
	 * listens now) and wait at most timeout_ms for the welcome. RS_EINVAL
	 * when refused (err: the coordinator's reason), RS_ETIMEDOUT or
	 * RS_EPEER when it cannot be reached. Called only while not joined.
	 */
	rs_status (*join)(rs_coord_conn *c, const char *addr, int timeout_ms, rs_err *err);
	/* Queue msg (borrowed) without waiting; RS_EPEER once the connection closed. */
	rs_status (*send)(rs_coord_conn *c, const json_t *msg);
	/* Wait at most timeout_ms until everything queued is written. */
	rs_status (*flush)(rs_coord_conn *c, int timeout_ms);
	/*
	 * The next message (a new reference for the caller), waiting at most
	 * timeout_ms: RS_EPEER once the connection closed, another status when
	 * none came.
	 */
	rs_status (*recv)(rs_coord_conn *c, int timeout_ms, json_t **msg);
	/* Service the connection without blocking: RS_EPEER once it closed. */
	rs_status (*poll)(rs_coord_conn *c);
	/* Why the connection closed, once recv or poll said RS_EPEER ("" when unknown); NULL: never known. */
	const char *(*why)(rs_coord_conn *c);
	/* Close the connection; a later join opens a new one. */
	void (*drop)(rs_coord_conn *c);
	/* Close and free (NULL-safe through rs_coord_conn_destroy). */
	void (*destroy)(rs_coord_conn *c);
} rs_coord_conn_ops;

struct rs_coord_conn {
	const rs_coord_conn_ops *ops;
	const char *where; /* the coordinator, for messages ("ws://10.0.0.1:7000"), borrowed */
};

/*
 * The real connection: common/control.h's client to url ("ws://host:port"),
 * joining with the join token, this worker's name and its model config's
 * digest (rs_config_digest). The strings are
 * borrowed and must outlive the connection. RS_ENOMEM is the only failure
 * (nothing connects before the first join).
 */
rs_status rs_coord_conn_control(const char *url, const char *token, const char *name, const char *model,
			       rs_coord_conn **out);

static inline void rs_coord_conn_destroy(rs_coord_conn *c)
{
	if (c)
		c->ops->destroy(c);
}

typedef struct rs_link {
	rs_coord_conn *conn;                /* borrowed */
	const char *addr;                   /* borrowed: the transport address each join announces (the agent updates it) */
	int tmo;                            /* bound on a write or a join attempt, ms */
	int grace_ms;                       /* how long the coordinator may stay away */
	const volatile sig_atomic_t *leave; /* non-zero: ask the coordinator to drain this worker (NULL: never) */
	int up;                             /* joined */
	double lost_at;                     /* when the connection dropped (0: joined) */
	double next_try;                    /* the next rejoin attempt while training */
	json_t *status;                     /* the last status message, repeated after a rejoin (owned) */
	json_t *report;                     /* the last checkpoint report, repeated before it (owned) */
	int leave_sent;
	pthread_mutex_t *kept;              /* while a keeper runs: the lock rs_link_post takes (else NULL) */
} rs_link;

/* Set up l over conn (nothing is sent yet); the arguments are as in rs_link's fields. */
void rs_link_init(rs_link *l, rs_coord_conn *conn, const char *addr, int timeout_ms, int grace_ms,
		  const volatile sig_atomic_t *leave);

/* Write what is queued (at most a second), drop the connection and free the messages l holds. */
void rs_link_close(rs_link *l);

/*
 * The first join. The coordinator may not be up yet: it is retried as a
 * rejoin is, for up to the grace period. RS_EINVAL when refused, RS_EPEER
 * when the coordinator never came; err says which.
 */
rs_status rs_link_join(rs_link *l, rs_err *err);

/*
 * Send a status message (stolen) if joined, waiting until it is written,
 * and remember it: it is repeated after every rejoin. Never waits for a
 * rejoin. RS_ENOMEM, saying so in err, when msg is NULL (a builder ran
 * out of memory: a status never goes missing silently), else RS_OK,
 * whether it went out or not.
 */
rs_status rs_link_status(rs_link *l, json_t *msg, rs_err *err);

/*
 * Cut off, rejoin now (for what is left of the grace period since the
 * loss), which repeats the last report and status: for a process about to exit,
 * whose last word ("done") would otherwise go unheard. RS_OK when joined;
 * else rs_link_join's failures.
 */
rs_status rs_link_deliver(rs_link *l, rs_err *err);

/*
 * Send msg (stolen) if joined and hand it to the socket without waiting:
 * progress that is not worth waiting for, and not repeated. A closed
 * connection is dropped (the next receive or poll rejoins). The one call
 * allowed while a keeper runs (it takes the keeper's turn).
 */
void rs_link_post(rs_link *l, json_t *msg);

/*
 * rs_link_post for a checkpoint's report (msg stolen; NULL: nothing), also
 * kept until the next replaces it and repeated after every rejoin, before
 * the status: the coordinator counts a rank's report once, and a copy lost
 * with the connection would leave that checkpoint incomplete for good (a
 * coordinator started again completes one from the repeated reports).
 * Not while a keeper runs.
 */
void rs_link_report(rs_link *l, json_t *msg);

/* No report is repeated any more (a fresh start: the earlier generations' checkpoints are settled). */
void rs_link_forget_report(rs_link *l);

/* Once *leave is set: send the leave request, once (rs_link_join repeats it after a rejoin). */
void rs_link_leave(rs_link *l);

/*
 * The next message (a new reference) within timeout_ms: RS_ETIMEDOUT when
 * none came. While the connection is down it rejoins, bounded by the grace
 * period: RS_EPEER once the coordinator stayed away past it, RS_EINVAL when
 * it refuses the rejoin (err says which). Sends a pending leave first.
 */
rs_status rs_link_recv(rs_link *l, int timeout_ms, json_t **msg, rs_err *err);

/*
 * Between training steps, without waiting: a message that already arrived
 * (a new reference), or *msg = NULL. Cut off, it tries to rejoin every half
 * second and lets training go on meanwhile: RS_EPEER once the grace period
 * ran out, RS_EINVAL when the rejoin was refused. Sends a pending leave first.
 */
rs_status rs_link_poll(rs_link *l, json_t **msg);

/*
 * Keeping the link alive while the agent's thread is busy for long (a model
 * built or staged, a checkpoint loaded or saved: minutes for a large model
 * on a slow volume): a thread of its own services the connection a few
 * times a second, so the coordinator's PINGs are answered (it hangs up
 * 600 s after the last answer, common/wsmsg.h), a leave asked for by
 * SIGTERM is sent, and the coordinator's messages wait in the connection
 * for the next receive. From start to stop the agent's thread may only
 * rs_link_post. A connection that closes meanwhile is dropped as any
 * other, and the grace period to rejoin it starts at the stop (nothing
 * could rejoin before). When no thread can be started the link is left
 * alone, with a warning.
 */
typedef struct rs_link_keeper {
	rs_link *l;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	int stop, running, was_up;
} rs_link_keeper;

void rs_link_keep_start(rs_link_keeper *k, rs_link *l);
void rs_link_keep_stop(rs_link_keeper *k);

#endif
