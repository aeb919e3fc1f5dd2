/*
 * link.c - see link.h: the reconnecting link, and the real connection
 * over common/control.h.
 */
#include "worker/link.h"
#include "common/clock.h"
#include "common/control.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/wsmsg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the real connection: common/control.h's WebSocket client ---------------------- */

typedef struct control_conn {
	rs_coord_conn base;
	const char *token, *name, *model;
	rs_control *ctl; /* NULL while not joined */
} control_conn;

static rs_status cc_join(rs_coord_conn *c, const char *addr, int timeout_ms, rs_err *err)
{
	control_conn *cc = (control_conn *)c;
	return rs_control_connect(c->where, cc->token, cc->name, addr, cc->model, timeout_ms, &cc->ctl, err);
}

static rs_status cc_send(rs_coord_conn *c, const json_t *msg) { return rs_control_send(((control_conn *)c)->ctl, msg); }

static rs_status cc_flush(rs_coord_conn *c, int timeout_ms)
{
	return rs_control_flush(((control_conn *)c)->ctl, timeout_ms);
}

static rs_status cc_recv(rs_coord_conn *c, int timeout_ms, json_t **msg)
{
	return rs_control_recv(((control_conn *)c)->ctl, timeout_ms, msg);
}

static rs_status cc_poll(rs_coord_conn *c) { return rs_control_poll(((control_conn *)c)->ctl); }

static const char *cc_why(rs_coord_conn *c) { return rs_control_why(((control_conn *)c)->ctl); }

static void cc_drop(rs_coord_conn *c)
{
	control_conn *cc = (control_conn *)c;
	rs_control_close(cc->ctl);
	cc->ctl = NULL;
}

static void cc_destroy(rs_coord_conn *c)
{
	cc_drop(c);
	free(c);
}

static const rs_coord_conn_ops control_ops = {
	.join = cc_join,
	.send = cc_send,
	.flush = cc_flush,
	.recv = cc_recv,
	.poll = cc_poll,
	.why = cc_why,
	.drop = cc_drop,
	.destroy = cc_destroy,
};

rs_status rs_coord_conn_control(const char *url, const char *token, const char *name, const char *model,
			       rs_coord_conn **out)
{
	control_conn *cc = calloc(1, sizeof(*cc));
	*out = NULL;
	if (!cc)
		return RS_ENOMEM;
	*cc = (control_conn){.base = {.ops = &control_ops, .where = url}, .token = token, .name = name,
			      .model = model};
	*out = &cc->base;
	return RS_OK;
}

/* ---- the link ------------------------------------------------------------------------ */

void rs_link_init(rs_link *l, rs_coord_conn *conn, const char *addr, int timeout_ms, int grace_ms,
		  const volatile sig_atomic_t *leave)
{
	*l = (rs_link){.conn = conn, .addr = addr, .tmo = timeout_ms, .grace_ms = grace_ms, .leave = leave};
}

static void link_drop(rs_link *l)
{
	char why[400] = "";
	if (!l->up)
		return;
	if (l->conn->ops->why) /* read before the drop, which frees it */
		snprintf(why, sizeof(why), "%s", l->conn->ops->why(l->conn));
	l->conn->ops->drop(l->conn);
	l->up = 0;
	l->lost_at = rs_now();
	RS_WARN("lost the coordinator at %s%s%s; reconnecting for up to %d ms", l->conn->where, why[0] ? ": " : "", why,
		l->grace_ms);
}

void rs_link_close(rs_link *l)
{
	if (l->up)
		l->conn->ops->flush(l->conn, 1000);
	if (l->up)
		l->conn->ops->drop(l->conn);
	l->up = 0;
	json_decref(l->status);
	json_decref(l->report);
	l->status = l->report = NULL;
}

/* Send msg (borrowed) if joined, waiting until it is written; a failure drops the connection. */
static void link_push(rs_link *l, const json_t *msg)
{
	if (l->up && msg &&
	    (l->conn->ops->send(l->conn, msg) != RS_OK || l->conn->ops->flush(l->conn, l->tmo) != RS_OK))
		link_drop(l);
}

/* 0 when the message could not be built (out of memory): the caller tries again later. */
static int push_leave(rs_link *l)
{
	json_t *leave = rs_proto_make_generation(RS_MSG_LEAVE, 0, 0, "SIGTERM");
	if (!leave)
		return 0;
	link_push(l, leave);
	json_decref(leave);
	return 1;
}

/* One attempt to (re)join; on success repeat the status and a pending leave. */
static rs_status link_try(rs_link *l, int timeout_ms, rs_err *err)
{
	RSCHECK(l->conn->ops->join(l->conn, l->addr, timeout_ms, err));
	l->up = 1;
	if (l->lost_at > 0)
		RS_INFO("joined %s after %.1f s", l->conn->where, rs_now() - l->lost_at);
	l->lost_at = 0;
	link_push(l, l->report); /* first: a "done" may end the job */
	link_push(l, l->status);
	if (l->leave_sent)
		l->leave_sent = push_leave(l);
	return l->up ? RS_OK : RS_EPEER;
}

/* Rejoin until the grace period since the loss runs out. A refused join is final. */
static rs_status link_reconnect(rs_link *l, rs_err *err)
{
	while (!l->up) {
		rs_err e = {0};
		rs_status st = link_try(l, l->tmo < 2000 ? l->tmo : 2000, &e);
		if (st == RS_EINVAL)
			return rs_err_set(err, st, "%s", e.msg);
		if (st == RS_OK)
			break;
		if (rs_now() - l->lost_at > l->grace_ms / 1000.0)
			return rs_err_set(err, RS_EPEER, "the coordinator at %s stayed away for %d ms (%s)", l->conn->where,
					  l->grace_ms, e.msg[0] ? e.msg : rs_status_str(st));
		rs_sleep(0.1);
	}
	return RS_OK;
}

rs_status rs_link_join(rs_link *l, rs_err *err)
{
	l->lost_at = rs_now();
	return link_reconnect(l, err);
}

rs_status rs_link_status(rs_link *l, json_t *msg, rs_err *err)
{
	if (!msg)
		return rs_err_set(err, RS_ENOMEM, "out of memory building a status message for the coordinator");
	json_decref(l->status);
	l->status = msg;
	link_push(l, msg);
	return RS_OK;
}

rs_status rs_link_deliver(rs_link *l, rs_err *err) { return link_reconnect(l, err); }

void rs_link_report(rs_link *l, json_t *msg)
{
	if (!msg)
		return;
	json_decref(l->report);
	l->report = json_incref(msg);
	rs_link_post(l, msg);
}

void rs_link_forget_report(rs_link *l)
{
	json_decref(l->report);
	l->report = NULL;
}

void rs_link_post(rs_link *l, json_t *msg)
{
	if (l->kept)
		pthread_mutex_lock(l->kept);
	if (l->up && msg) {
		rs_status st = l->conn->ops->send(l->conn, msg);
		if (st == RS_OK)
			st = l->conn->ops->poll(l->conn); /* hand it to the socket now; never wait */
		if (st == RS_EPEER)
			link_drop(l);
	}
	if (l->kept)
		pthread_mutex_unlock(l->kept);
	json_decref(msg);
}

void rs_link_leave(rs_link *l)
{
	if (l->leave_sent || !l->leave || !*l->leave)
		return;
	RS_INFO("SIGTERM: asking the coordinator to drain my rows before I leave");
	l->leave_sent = push_leave(l); /* a leave lost here would lose the rows: tried at every receive until built */
}

rs_status rs_link_recv(rs_link *l, int timeout_ms, json_t **msg, rs_err *err)
{
	double until = rs_now() + timeout_ms / 1000.0;
	for (;;) {
		rs_link_leave(l);
		if (!l->up)
			RSCHECK(link_reconnect(l, err));
		double left = until - rs_now();
		rs_status st = l->conn->ops->recv(l->conn, left <= 0 ? 0 : left > 0.2 ? 200 : (int)(left * 1000), msg);
		if (st == RS_OK)
			return RS_OK;
		if (st == RS_EPEER)
			link_drop(l);
		else if (rs_now() >= until)
			return rs_err_set(err, RS_ETIMEDOUT, "no word from the coordinator for %d ms", timeout_ms);
	}
}

rs_status rs_link_poll(rs_link *l, json_t **msg)
{
	*msg = NULL;
	rs_link_leave(l);
	if (!l->up && rs_now() >= l->next_try) {
		rs_err e = {0};
		l->next_try = rs_now() + 0.5;
		if (link_try(l, 200, &e) == RS_EINVAL)
			return RS_EINVAL;
	}
	if (!l->up)
		return rs_now() - l->lost_at > l->grace_ms / 1000.0 ? RS_EPEER : RS_OK;
	if (l->conn->ops->poll(l->conn) != RS_OK) {
		link_drop(l);
		return RS_OK;
	}
	if (l->conn->ops->recv(l->conn, 0, msg) != RS_OK)
		*msg = NULL;
	return RS_OK;
}

/* ---- the keeper ------------------------------------------------------------------------ */

#define KEEP_EVERY_MS 250

/* The keeper's thread: k->mu held but while it waits, so that rs_link_post takes turns with it. */
static void *keep(void *arg)
{
	rs_link_keeper *k = arg;
	pthread_mutex_lock(&k->mu);
	while (!k->stop) {
		rs_link_leave(k->l);
		if (k->l->up && k->l->conn->ops->poll(k->l->conn) != RS_OK)
			link_drop(k->l);
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += KEEP_EVERY_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		while (!k->stop && pthread_cond_timedwait(&k->wake, &k->mu, &until) == 0)
			; /* woken for nothing: wait on until the time or the stop */
	}
	pthread_mutex_unlock(&k->mu);
	return NULL;
}

void rs_link_keep_start(rs_link_keeper *k, rs_link *l)
{
	pthread_condattr_t ca;
	int e;
	*k = (rs_link_keeper){.l = l, .was_up = l->up};
	if ((e = pthread_condattr_init(&ca)) == 0) {
		e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		if (e == 0)
			e = pthread_cond_init(&k->wake, &ca);
		pthread_condattr_destroy(&ca);
	}
	if (e == 0 && (e = pthread_mutex_init(&k->mu, NULL)) != 0)
		pthread_cond_destroy(&k->wake);
	if (e == 0) {
		l->kept = &k->mu; /* before the thread: it is the agent's to read */
		if ((e = pthread_create(&k->thread, NULL, keep, k)) != 0) {
			l->kept = NULL;
			pthread_mutex_destroy(&k->mu);
			pthread_cond_destroy(&k->wake);
		}
	}
	k->running = e == 0;
	if (e != 0)
		RS_WARN("no thread to keep the link to the coordinator alive (%s): a wait past %d s loses it", strerror(e),
			rs_ws_idle_policy()->secs_since_valid_hangup - rs_ws_idle_policy()->secs_since_valid_ping);
}

void rs_link_keep_stop(rs_link_keeper *k)
{
	if (!k->running)
		return;
	pthread_mutex_lock(&k->mu);
	k->stop = 1;
	pthread_cond_signal(&k->wake);
	pthread_mutex_unlock(&k->mu);
	pthread_join(k->thread, NULL);
	pthread_mutex_destroy(&k->mu);
	pthread_cond_destroy(&k->wake);
	k->l->kept = NULL;
	if (k->was_up && !k->l->up)
		k->l->lost_at = rs_now(); /* the grace period to rejoin starts now: nothing could rejoin meanwhile */
	k->running = 0;
}
