/*
 * rowshift-worker - one per pod (per GPU; a CPU process in local mode):
 * joins the coordinator with the join token and does what it says,
 * generation after generation:
 *
 *   start (fresh)      connect the transport, build the trainer, train
 *   start (a reshard)  connect a transport over the union of old and new
 *                      members, stage the new plan's trainer (rows move
 *                      with their optimizer state, chunk by chunk, each
 *                      checked), report "staged", keep the old model
 *   commit / abort     swap the staged trainer in (a leaving member then
 *                      exits: its rows are with the others) / drop it and
 *                      report "paused" again, the old model intact
 *   resume             go on training the current generation
 *   pause, stop        pause at the next step boundary (agreed with the
 *                      other ranks inside the step) / exit
 *
 * SIGTERM (what Kubernetes sends a pod it deletes) does not stop the step
 * under way: the worker tells the coordinator it wants to leave and keeps
 * training until the coordinator has drained its rows to the others; it
 * exits after that commit. A worker that holds no rows exits at once.
 *
 * When the control connection drops, the worker keeps its model and keeps
 * training where it can, and reconnects for --coordinator-grace-ms: a
 * restarted coordinator finds it, and the worker repeats its last status
 * ("paused", "staged", ...) so that an interrupted reshard can be resolved.
 * Only when the coordinator stays away past the grace period does it exit.
 */
#include "common/config.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "common/plan.h"
#include "common/proto.h"
#include "common/control.h"
#include "worker/engine.h"
#ifdef RS_HAVE_CUDA
#include "worker/engine_cuda.h"
#include "worker/transport_nccl.h"
#endif
#include "worker/train.h"
#include "worker/transport_tcp.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t terminated;

static void on_sigterm(int sig)
{
	(void)sig;
	terminated = 1;
}

/* ---- the link to the coordinator ------------------------------------------------- */

typedef struct coord_link {
	const char *url, *token, *name;
	const char *addr;       /* announced in the join: where this worker's transport listens now */
	rs_control *ctl;        /* NULL while disconnected */
	int tmo, grace_ms;
	double lost_at;         /* when the connection dropped (0: connected) */
	double next_try;        /* the next reconnection attempt while training */
	json_t *status;         /* the last status message, repeated after a reconnection */
	int leave_sent;
} coord_link;

static void link_drop(coord_link *l)
{
	if (!l->ctl)
		return;
	rs_control_close(l->ctl);
	l->ctl = NULL;
	l->lost_at = rs_now();
	RS_WARN("lost the coordinator at %s; reconnecting for up to %d ms", l->url, l->grace_ms);
}

/* Send msg (borrowed) if connected, waiting until it is written; a failure drops the connection. */
static void link_push(coord_link *l, json_t *msg)
{
	if (l->ctl && msg && (rs_control_send(l->ctl, msg) != RS_OK || rs_control_flush(l->ctl, l->tmo) != RS_OK))
		link_drop(l);
}

/* One attempt to (re)join; on success repeat the status and a pending leave. */
static rs_status link_try(coord_link *l, int timeout_ms, rs_err *err)
{
	RSCHECK(rs_control_connect(l->url, l->token, l->name, l->addr, timeout_ms, &l->ctl, err));
	if (l->lost_at > 0)
		RS_INFO("joined %s after %.1f s", l->url, rs_now() - l->lost_at);
	l->lost_at = 0;
	link_push(l, l->status);
	if (l->leave_sent && l->ctl) {
		json_t *leave = json_pack("{s:s, s:s}", "type", "leave", "reason", "SIGTERM");
		link_push(l, leave);
		json_decref(leave);
	}
	return l->ctl ? RS_OK : RS_EPEER;
}

/* Reconnect until the grace period since the loss runs out. A refused join is final. */
static rs_status link_reconnect(coord_link *l, rs_err *err)
{
	while (!l->ctl) {
		rs_err e = {0};
		rs_status st = link_try(l, l->tmo < 2000 ? l->tmo : 2000, &e);
		if (st == RS_EINVAL)
			return rs_err_set(err, st, "%s", e.msg);
		if (st == RS_OK)
			break;
		if (rs_now() - l->lost_at > l->grace_ms / 1000.0)
			return rs_err_set(err, RS_EPEER, "the coordinator at %s stayed away for %d ms (%s)", l->url,
					  l->grace_ms, e.msg[0] ? e.msg : rs_status_str(st));
		rs_sleep(0.1);
	}
	return RS_OK;
}

/*
 * Send a status message (stolen) if connected, and remember it: it is
 * repeated after a reconnection, which is how a restarted coordinator
 * learns where this worker stands. Never waits for a reconnection.
 */
static rs_status link_status(coord_link *l, json_t *msg)
{
	if (!msg)
		return RS_ENOMEM;
	json_decref(l->status);
	l->status = msg;
	link_push(l, msg);
	return RS_OK;
}

/* Tell the coordinator (once, repeated after a reconnection) that SIGTERM came and the rows must be drained. */
static void link_leave(coord_link *l)
{
	if (l->leave_sent || !terminated)
		return;
	json_t *leave = json_pack("{s:s, s:s}", "type", "leave", "reason", "SIGTERM");
	RS_INFO("SIGTERM: asking the coordinator to drain my rows before I leave");
	l->leave_sent = 1;
	link_push(l, leave);
	json_decref(leave);
}

/*
 * The next message within timeout_ms (RS_ETIMEDOUT when none came),
 * reconnecting when the connection drops; RS_EPEER once the coordinator
 * stayed away past the grace period, RS_EINVAL when it refuses the rejoin.
 */
static rs_status link_recv(coord_link *l, int timeout_ms, json_t **msg, rs_err *err)
{
	double until = rs_now() + timeout_ms / 1000.0;
	for (;;) {
		link_leave(l);
		if (!l->ctl)
			RSCHECK(link_reconnect(l, err));
		double left = until - rs_now();
		rs_status st = rs_control_recv(l->ctl, left <= 0 ? 0 : left > 0.2 ? 200 : (int)(left * 1000), msg);
		if (st == RS_OK)
			return RS_OK;
		if (st == RS_EPEER)
			link_drop(l);
		else if (rs_now() >= until)
			return rs_err_set(err, RS_ETIMEDOUT, "no word from the coordinator for %d ms", timeout_ms);
	}
}

/*
 * Between steps: a message that already arrived, or *msg = NULL. Cut off,
 * it tries to rejoin every half second and lets training go on meanwhile;
 * RS_EPEER once the grace period ran out, RS_EINVAL when the rejoin is refused.
 */
static rs_status link_poll(coord_link *l, json_t **msg)
{
	*msg = NULL;
	link_leave(l);
	if (!l->ctl && rs_now() >= l->next_try) {
		rs_err e = {0};
		l->next_try = rs_now() + 0.5;
		if (link_try(l, 200, &e) == RS_EINVAL)
			return RS_EINVAL;
	}
	if (!l->ctl)
		return rs_now() - l->lost_at > l->grace_ms / 1000.0 ? RS_EPEER : RS_OK;
	if (rs_control_poll(l->ctl) != RS_OK) {
		link_drop(l);
		return RS_OK;
	}
	if (rs_control_recv(l->ctl, 0, msg) != RS_OK)
		*msg = NULL;
	return RS_OK;
}

/* ---- the worker ------------------------------------------------------------------- */

/* A generation as the coordinator started it, and where training stands in it. */
typedef struct run {
	int64_t generation, rank, step, steps, eval_every, eval_samples;
	int last;
	char save[4096];        /* "" for no checkpoint at the end */
} run;

typedef struct worker {
	const rs_config *cfg;
	rs_engine *engine;      /* where the shards live and the kernels run */
	int cuda_device;        /* the engine's CUDA device, or -1 */
	int nccl;               /* the generations' transports are NCCL communicators (bootstrapped over TCP) */
	coord_link link;
	const char *host;
	int tmo;
	int lfd;                /* listening for the next generation's transport, or -1 */
	char addr[300];
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
	int64_t stall_ms;       /* test hook: pause this long inside every reshard, before rows move */
} worker;

/* Listen for the next generation's transport (a fresh socket: the last one went to a transport). */
static rs_status relisten(worker *w, rs_err *err)
{
	int port;
	if (w->lfd >= 0)
		return RS_OK;
	RSCHECK(rs_tcp_listen(w->host, 0, &w->lfd, &port, err));
	snprintf(w->addr, sizeof(w->addr), strchr(w->host, ':') ? "[%s]:%d" : "%s:%d", w->host, port);
	return RS_OK;
}

static json_t *checksum_json(const worker *w, const rs_trainer *tr)
{
	uint64_t *v = calloc((size_t)w->cfg->ntables, sizeof(uint64_t));
	json_t *j = NULL;
	if (v) {
		rs_trainer_checksum(tr, v);
		j = rs_proto_checksums_to_json(v, w->cfg->ntables);
	}
	free(v);
	return j;
}

/* Paused at w->cur.step, listening for the next generation: tell the coordinator, with the model's checksum. */
static rs_status report_paused(worker *w, rs_err *err)
{
	RSCHECK(relisten(w, err));
	json_t *m = json_pack("{s:s, s:I, s:I, s:I, s:s, s:o*}", "type", "paused", "rank", (json_int_t)w->cur.rank,
			      "generation", (json_int_t)w->cur.generation, "step", (json_int_t)w->cur.step, "addr", w->addr,
			      "checksum", checksum_json(w, w->tr));
	return link_status(&w->link, m);
}

static void drop_staged(worker *w)
{
	rs_trainer_destroy(w->st_tr);
	rs_transport_destroy(w->st_t);
	rs_transport_destroy(w->st_uni);
	rs_plan_free(w->st_plan);
	w->st_tr = NULL, w->st_t = w->st_uni = NULL, w->st_plan = NULL;
	w->st_gen = 0;
}

/* A transport over peers (one per rank of `world`), on the listening socket. */
static rs_status connect_peers(worker *w, const rs_msg_start *s, rs_transport **out, rs_err *err)
{
	const char **addrs = malloc(sizeof(char *) * (size_t)s->union_world);
	if (!addrs)
		return RS_ENOMEM;
	for (int64_t i = 0; i < s->union_world; i++)
		addrs[i] = json_string_value(json_array_get(s->peers, (size_t)i));
	rs_tcp_config tc = {.rank = (int32_t)s->rank, .world = (int32_t)s->union_world, .addrs = addrs,
			    .listen_fd = w->lfd, .token = w->link.token, .generation = (uint64_t)s->generation,
			    .timeout_ms = w->tmo};
	w->lfd = -1; /* the transport owns it now, even when it fails */
	rs_status st = rs_tcp_transport_create(&tc, out, err);
	free(addrs);
#ifdef RS_HAVE_CUDA
	rs_transport *nt;
	if (st == RS_OK && w->nccl) {
		/* rank 0's unique id goes to the others over the TCP mesh their join token admitted */
		if ((st = rs_nccl_transport_bootstrap(*out, w->cuda_device, (uint64_t)s->generation, w->tmo, &nt, err)) ==
		    RS_OK)
			*out = nt;
		else
			rs_transport_destroy(*out), *out = NULL;
	}
#endif
	return st;
}

static void take_run(run *r, const rs_msg_start *s)
{
	r->rank = s->rank, r->generation = s->generation, r->step = s->first_step, r->steps = s->steps;
	r->last = s->last, r->eval_every = s->eval_every, r->eval_samples = s->eval_samples;
	snprintf(r->save, sizeof(r->save), "%s", s->save ? s->save : "");
}

/* A fresh start: this worker's first generation. */
static rs_status start_fresh(worker *w, const rs_msg_start *s, rs_plan *plan, rs_err *err)
{
	if (w->tr)
		return rs_err_set(err, RS_EINVAL, "a fresh start for a worker that already trains generation %lld",
				  (long long)w->cur.generation);
	RSCHECK(relisten(w, err));
	rs_status st = connect_peers(w, s, &w->t, err);
	if (st == RS_OK)
		st = rs_trainer_create(w->cfg, plan, w->t, w->engine, &w->tr, err);
	if (st == RS_OK && s->load) {
		int64_t step;
		double t0 = rs_now();
		st = rs_trainer_load(w->tr, s->load, &step, err);
		if (st == RS_OK && step != s->first_step)
			st = rs_err_set(err, RS_EINVAL, "%s is a checkpoint of step %lld, not %lld", s->load, (long long)step,
					(long long)s->first_step);
		if (st == RS_OK)
			RS_INFO("loaded %s (step %lld) in %.3f s", s->load, (long long)step, rs_now() - t0);
	}
	if (st != RS_OK) {
		rs_plan_free(plan);
		return st;
	}
	w->plan = plan;
	take_run(&w->cur, s);
	return RS_OK;
}

typedef struct progress_ctx {
	worker *w;
	int64_t generation;
	double last;
} progress_ctx;

/* Between rounds of a reshard: tell the coordinator (at most ten times a second) how far the sends are. */
static void on_progress(void *ctx, const uint64_t *sent, const uint64_t *total, int32_t npeers)
{
	progress_ctx *p = ctx;
	coord_link *l = &p->w->link;
	double now = rs_now();
	if (now - p->last < 0.1 || !l->ctl)
		return;
	p->last = now;
	json_t *pairs = json_array();
	for (int32_t u = 0; pairs && u < npeers; u++)
		if (total[u])
			json_array_append_new(pairs, json_pack("[i, I]", (int)u, (json_int_t)sent[u]));
	json_t *m = json_pack("{s:s, s:I, s:o}", "type", "migrating", "generation", (json_int_t)p->generation, "sent", pairs);
	if (m && rs_control_send(l->ctl, m) == RS_OK)
		rs_control_poll(l->ctl); /* hand it to the socket now; never wait */
	json_decref(m);
}

/* Phase one of a reshard: stage the new plan's trainer, then report how it went. */
static rs_status stage(worker *w, const rs_msg_start *s, rs_plan *plan, rs_err *err)
{
	rs_plan *prev = NULL;
	rs_reshard_stats rst = {0};
	rs_err why = {0};
	int32_t *union_of_old = NULL;
	double t0 = rs_now(), connect_s = 0;
	drop_staged(w);
	w->st_gen = s->generation;
	w->st_plan = plan;
	rs_status st = relisten(w, err);
	if (st != RS_OK)
		return st;
	link_status(&w->link, json_pack("{s:s, s:I}", "type", "staging", "generation", (json_int_t)s->generation));
	st = rs_plan_from_json(s->previous_plan, w->cfg, "start message previous plan", &prev, &why);
	size_t nold = json_array_size(s->union_of_old);
	if (st == RS_OK && (int64_t)nold != prev->world.ranks)
		st = rs_err_set(&why, RS_EINVAL, "start: union_of_old has %zu ranks, the previous plan %d", nold,
				prev->world.ranks);
	if (st == RS_OK && !(union_of_old = malloc(sizeof(int32_t) * nold)))
		st = RS_ENOMEM;
	for (size_t i = 0; st == RS_OK && i < nold; i++)
		union_of_old[i] = (int32_t)json_integer_value(json_array_get(s->union_of_old, i));
	if (st == RS_OK)
		st = connect_peers(w, s, &w->st_uni, &why);
	connect_s = rs_now() - t0;
	if (st == RS_OK && s->rank < s->world)
		st = rs_transport_subset(w->st_uni, (int32_t)s->world, &w->st_t);
	if (st == RS_OK && w->stall_ms > 0)
		rs_sleep(w->stall_ms / 1000.0); /* test hook: a window to kill someone during MIGRATE */
	if (st == RS_OK) {
		progress_ctx pc = {w, s->generation, 0};
		rs_reshard_spec spec = {.old_plan = prev, .new_plan = plan, .union_of_old = union_of_old,
					.uni = w->st_uni, .train_t = w->st_t, .engine = w->engine, .progress = on_progress,
					.progress_ctx = &pc};
		st = rs_trainer_stage(w->cfg, w->tr, &spec, &w->st_tr, &rst, &why);
	}
	free(union_of_old);
	rs_plan_free(prev);
	w->st_ok = st == RS_OK;
	take_run(&w->staged, s);
	json_t *m;
	if (w->st_ok) {
		RS_INFO("generation %lld staged in %.3f s: sent %.1f MiB, received %.1f MiB in %d rounds, kept %.1f MiB",
			(long long)s->generation, rs_now() - t0, rst.sent_bytes / 1048576.0, rst.recv_bytes / 1048576.0,
			rst.rounds, rst.kept_bytes / 1048576.0);
		m = json_pack("{s:s, s:I, s:b, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "type", "staged", "generation",
			      (json_int_t)s->generation, "ok", 1, "sent_bytes", (json_int_t)rst.sent_bytes, "recv_bytes",
			      (json_int_t)rst.recv_bytes, "wire_bytes", (json_int_t)rst.wire_bytes, "kept_bytes",
			      (json_int_t)rst.kept_bytes, "connect_s", connect_s, "copy_s", rst.copy_s, "move_s", rst.move_s);
		if (m && w->st_tr)
			json_object_set_new(m, "checksum", checksum_json(w, w->st_tr));
	} else {
		RS_WARN("generation %lld: staging failed: %s", (long long)s->generation,
			why.msg[0] ? why.msg : rs_status_str(st));
		if (w->st_uni)
			rs_transport_abort(w->st_uni); /* the others must not wait for this member's chunks */
		m = json_pack("{s:s, s:I, s:b, s:s}", "type", "staged", "generation", (json_int_t)s->generation, "ok", 0,
			      "reason", why.msg[0] ? why.msg : rs_status_str(st));
	}
	return link_status(&w->link, m);
}

/* Phase two: the coordinator committed the staged generation. *left when this worker handed its rows over. */
static rs_status commit(worker *w, int64_t gen, int *left, rs_err *err)
{
	*left = 0;
	if (gen != w->st_gen || !w->st_ok)
		return rs_err_set(err, RS_EINVAL, "commit of generation %lld, which is not staged here", (long long)gen);
	rs_trainer_commit(w->st_tr, w->tr);
	rs_transport_destroy(w->t);
	rs_transport_destroy(w->uni);
	rs_plan_free(w->plan);
	w->tr = w->st_tr, w->t = w->st_t, w->uni = w->st_uni, w->plan = w->st_plan;
	w->st_tr = NULL, w->st_t = w->st_uni = NULL, w->st_plan = NULL, w->st_gen = 0;
	w->cur = w->staged;
	*left = w->tr == NULL;
	return link_status(&w->link, json_pack("{s:s, s:I}", "type", "committed", "generation", (json_int_t)gen));
}

/* The coordinator aborted the staged generation: back to the old model, paused where it was. */
static rs_status abort_staged(worker *w, int64_t gen, const char *why, rs_err *err)
{
	if (gen != w->st_gen)
		return RS_OK; /* already dropped */
	RS_WARN("generation %lld aborted by the coordinator (%s); the old model stands", (long long)gen,
		why ? why : "no reason given");
	drop_staged(w);
	if (!w->tr) { /* a joiner: nothing to go back to; it waits for the next start, listening anew */
		RSCHECK(relisten(w, err));
		return link_status(&w->link, json_pack("{s:s, s:s}", "type", "idle", "addr", w->addr));
	}
	return report_paused(w, err);
}

/* Progress is not worth waiting for: sent when connected, dropped when the queue is full. */
static void report_progress(worker *w, int64_t step, double loss, double sps, double auc, double teacher_auc)
{
	json_t *j = json_pack("{s:s, s:I, s:I, s:f, s:f}", "type", "progress", "rank", (json_int_t)w->cur.rank, "step",
			      (json_int_t)step, "loss", loss, "samples_per_s", sps);
	if (j && auc >= 0)
		json_object_set_new(j, "auc", json_real(auc));
	if (j && teacher_auc >= 0)
		json_object_set_new(j, "teacher_auc", json_real(teacher_auc));
	if (j && w->link.ctl && rs_control_send(w->link.ctl, j) == RS_EPEER)
		link_drop(&w->link);
	json_decref(j);
}

/*
 * Train from w->cur.step to w->cur.steps, evaluating and reporting as configured,
 * handling "pause" and "stop" between steps. Ends paused (w->cur.step < steps,
 * or == steps when not last), done (*done) or stopped (*stop).
 */
static rs_status train(worker *w, int *done, int *stop, rs_err *err)
{
	const rs_config *cfg = w->cfg;
	double teacher_auc = w->cur.rank == 0 && w->cur.step == 0 ? rs_trainer_teacher_auc(w->tr, w->cur.eval_samples) : -1;
	double t0 = rs_now();
	int64_t since = w->cur.step, first = w->cur.step;
	rs_status st;
	*done = *stop = 0;
	link_status(&w->link, json_pack("{s:s, s:I, s:I}", "type", "training", "generation", (json_int_t)w->cur.generation,
					 "step", (json_int_t)w->cur.step));
	RS_INFO("rank %lld, generation %lld: training steps %lld..%lld", (long long)w->cur.rank, (long long)w->cur.generation,
		(long long)w->cur.step, (long long)w->cur.steps - 1);
	while (w->cur.step < w->cur.steps) {
		int64_t step = w->cur.step;
		rs_step_stats stats;
		rs_err why = {0};
		if ((st = rs_trainer_step(w->tr, step, &stats, &why)) != RS_OK)
			return rs_err_set(err, st, "step %lld: %s", (long long)step, why.msg[0] ? why.msg : rs_status_str(st));
		w->cur.step = step + 1;
		int end = w->cur.step == w->cur.steps;
		int eval = w->cur.eval_every > 0 && (w->cur.step % w->cur.eval_every == 0 || (end && w->cur.last));
		double auc = -1, ll;
		if (eval && (st = rs_trainer_evaluate(w->tr, w->cur.eval_samples, &auc, &ll, &why)) != RS_OK)
			return rs_err_set(err, st, "evaluation at step %lld: %s", (long long)step,
					  why.msg[0] ? why.msg : rs_status_str(st));
		double t1 = rs_now();
		if (eval || step % 10 == 9 || end || step == first) {
			double sps = (double)cfg->train.global_batch * (double)(w->cur.step - since) / (t1 - t0);
			report_progress(w, step, stats.loss, sps, auc, teacher_auc);
			teacher_auc = -1;
			t0 = t1;
			since = w->cur.step;
		}
		json_t *m;
		st = link_poll(&w->link, &m);
		if (st == RS_EINVAL)
			return rs_err_set(err, st, "the coordinator refused this worker's rejoin");
		if (st != RS_OK)
			return rs_err_set(err, st, "the coordinator stayed away for more than %d ms (at step %lld)",
					  w->link.grace_ms, (long long)w->cur.step);
		for (; m; link_poll(&w->link, &m)) {
			const char *type = rs_proto_type(m);
			if (!strcmp(type, "pause"))
				rs_trainer_request_pause(w->tr);
			else if (!strcmp(type, "stop"))
				*stop = 1;
			else
				RS_WARN("ignoring a '%s' message during training", type);
			json_decref(m);
		}
		if (*stop)
			return RS_OK;
		if (stats.pause && !end)
			break;
	}
	if (w->cur.step == w->cur.steps && w->cur.last) {
		if (w->cur.save[0]) {
			double s0 = rs_now();
			RSCHECK(rs_trainer_save(w->tr, w->cur.save, w->cur.steps, err));
			RS_INFO("checkpoint written to %s in %.3f s", w->cur.save, rs_now() - s0);
		}
		*done = 1;
		return link_status(&w->link, json_pack("{s:s, s:I, s:I}", "type", "done", "rank", (json_int_t)w->cur.rank, "step",
						       (json_int_t)w->cur.steps));
	}
	return report_paused(w, err);
}

/* Handle one message from the coordinator; *exit_now when the worker's part is over. */
static rs_status handle(worker *w, json_t *msg, int *exit_now, rs_err *err)
{
	const char *type = rs_proto_type(msg);
	int64_t gen;
	const char *why;
	*exit_now = 0;
	if (!strcmp(type, "stop")) {
		RS_INFO("stopped by the coordinator");
		*exit_now = 1;
		return RS_OK;
	}
	if (!strcmp(type, "start")) {
		rs_msg_start s;
		rs_plan *plan = NULL;
		RSCHECK(rs_proto_start(msg, &s, err));
		RSCHECK(rs_plan_from_json(s.plan, w->cfg, "start message plan", &plan, err));
		if (s.previous_plan)
			return stage(w, &s, plan, err);
		RSCHECK(start_fresh(w, &s, plan, err));
	} else if (!strcmp(type, "commit")) {
		int left;
		RSCHECK(rs_proto_generation(msg, &gen, NULL, NULL, err));
		if (gen == w->cur.generation && gen != w->st_gen)
			return RS_OK; /* committed already: a restarted coordinator repeating itself */
		RSCHECK(commit(w, gen, &left, err));
		if (left) {
			RS_INFO("handed my rows over in generation %lld; leaving", (long long)gen);
			*exit_now = 1;
			return RS_OK;
		}
	} else if (!strcmp(type, "abort")) {
		RSCHECK(rs_proto_generation(msg, &gen, NULL, &why, err));
		return abort_staged(w, gen, why, err);
	} else if (!strcmp(type, "resume")) {
		rs_msg_resume r;
		RSCHECK(rs_proto_resume(msg, &r, err));
		if (!w->tr || r.generation != w->cur.generation || r.steps < w->cur.step)
			return rs_err_set(err, RS_EINVAL, "resume of generation %lld to step %lld: this worker is at %lld/%lld",
					  (long long)r.generation, (long long)r.steps, (long long)w->cur.generation,
					  (long long)w->cur.step);
		w->cur.steps = r.steps;
		w->cur.last = r.last;
	} else {
		if (strcmp(type, "pause") != 0) /* a pause that came after the step boundary it asked for */
			RS_WARN("ignoring a '%s' message", type);
		return RS_OK;
	}
	/* a fresh start, a commit or a resume: train */
	int done, stop;
	RSCHECK(train(w, &done, &stop, err));
	*exit_now = done || stop;
	if (stop)
		RS_INFO("stopped by the coordinator at step %lld", (long long)w->cur.step);
	return RS_OK;
}

/*
 * The engine `spec` names: cpu, cuda, cuda:N, or auto (CUDA device 0 when
 * this build has CUDA and the machine a device, else the CPU).
 */
static rs_status open_engine(const char *spec, rs_engine **out, int *cuda_device, rs_err *err)
{
	*out = rs_engine_cpu();
	*cuda_device = -1;
	if (!strcmp(spec, "cpu"))
		return RS_OK;
	int device = 0;
	if (strcmp(spec, "auto") && strcmp(spec, "cuda")) {
		char *end;
		if (strncmp(spec, "cuda:", 5) || !spec[5] || (device = (int)strtol(spec + 5, &end, 10)) < 0 || *end)
			return rs_err_set(err, RS_EINVAL, "--device: '%s' is not auto, cpu, cuda or cuda:N", spec);
	}
#ifdef RS_HAVE_CUDA
	const char *why;
	if (!strcmp(spec, "auto") && !rs_cuda_devices(&why)) {
		RS_INFO("device: the CPU (no CUDA device: %s)", why);
		return RS_OK;
	}
	rs_status st = rs_engine_cuda_create(device, out, err);
	if (st == RS_OK)
		*cuda_device = device;
	if (st != RS_OK && !strcmp(spec, "auto")) {
		RS_WARN("device: the CPU (CUDA device 0 cannot be used: %s)", err->msg);
		*out = rs_engine_cpu();
		err->msg[0] = 0;
		return RS_OK;
	}
	return st;
#else
	if (!strcmp(spec, "auto"))
		return RS_OK;
	return rs_err_set(err, RS_EUNSUPPORTED, "--device %s: this worker was built without CUDA", spec);
#endif
}

int main(int argc, char **argv)
{
	const char *url = NULL, *config = NULL, *name = NULL, *host = NULL, *fault = NULL, *device = NULL;
	const char *transport = NULL;
	int64_t timeout_ms = 30000, grace_ms = 60000;
	bool help = false, check_device = false;
	rs_param params[] = {
		RS_PARAM("--coordinator", "ROWSHIFT_COORDINATOR", RS_PARAM_STR, NULL, "URL", "the coordinator's control channel, ws://HOST:PORT", &url),
		RS_PARAM("--config", "ROWSHIFT_CONFIG", RS_PARAM_STR, NULL, "FILE", "model config (JSON)", &config),
		RS_PARAM("--name", "POD_NAME", RS_PARAM_STR, NULL, "NAME", "this worker's name (the pod name)", &name),
		RS_PARAM("--host", "POD_IP", RS_PARAM_STR, "127.0.0.1", "ADDR", "address peers reach this worker's transport on", &host),
		RS_PARAM("--timeout-ms", "ROWSHIFT_TIMEOUT_MS", RS_PARAM_INT, "30000", "MS", "bound on every wait for a peer or the coordinator's answer", &timeout_ms),
		RS_PARAM("--coordinator-grace-ms", "ROWSHIFT_COORDINATOR_GRACE_MS", RS_PARAM_INT, "60000", "MS", "how long to wait for a lost coordinator to come back before exiting", &grace_ms),
		RS_PARAM("--device", "ROWSHIFT_DEVICE", RS_PARAM_STR, "auto", "DEV", "where the shards live and the kernels run: auto (a CUDA device if there is one), cpu, cuda or cuda:N", &device),
		RS_PARAM("--fault", "ROWSHIFT_FAULT", RS_PARAM_STR, NULL, "HOOK", "tests only: corrupt-chunk (the first chunk received is damaged) or stall-ms=N (every reshard waits N ms before moving rows)", &fault),
		RS_PARAM("--transport", "ROWSHIFT_TRANSPORT", RS_PARAM_STR, "tcp", "KIND", "between workers: tcp, or nccl (one worker per GPU; needs a CUDA --device)", &transport),
		RS_PARAM("--check-device", NULL, RS_PARAM_FLAG, NULL, NULL, "open the --device, say which it is and exit (0: usable)", &check_device),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshift-worker --coordinator ws://HOST:PORT --config FILE [--name NAME]\n"
			    "  the join token comes from ROWSHIFT_JOIN_TOKEN";
	rs_err err = {0};
	const char *pos[1];
	int npos, rc = 1;
	char buf[64];
	rs_config *cfg = NULL;
	static worker w;
	rs_status st;

	if (rs_params_parse(params, np, argc, argv, 1, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshift-worker: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	if (check_device) {
		rs_engine *e;
		int dev;
		if (open_engine(device, &e, &dev, &err) != RS_OK) {
			fprintf(stderr, "rowshift-worker: %s\n", err.msg);
			return 1;
		}
		printf("%s\n", e->name);
		rs_engine_destroy(e);
		return 0;
	}
	const char *token = getenv("ROWSHIFT_JOIN_TOKEN");
	if (!url || !config || !token || !*token) {
		fprintf(stderr, "rowshift-worker: --coordinator, --config and ROWSHIFT_JOIN_TOKEN are required\n%s\n", usage);
		return 2;
	}
	if (fault && !strcmp(fault, "corrupt-chunk")) {
		rs_reshard_fault_for_tests = 1;
	} else if (fault && !strncmp(fault, "stall-ms=", 9)) {
		w.stall_ms = atoll(fault + 9);
	} else if (fault) {
		fprintf(stderr, "rowshift-worker: --fault: unknown hook '%s'\n", fault);
		return 2;
	}
	if (!name) {
		snprintf(buf, sizeof(buf), "worker-%d", (int)getpid());
		name = buf;
	}
	rs_log_init(name, -1);
	int tmo = (int)(timeout_ms > 0 && timeout_ms < 3600000 ? timeout_ms : 30000);
	struct sigaction sa = {.sa_handler = on_sigterm};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) != 0 || signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
		fprintf(stderr, "rowshift-worker: cannot set up signal handling\n");
		return 1;
	}

	w.lfd = -1;
	w.host = host;
	w.tmo = tmo;
	w.link = (coord_link){.url = url, .token = token, .name = name, .addr = w.addr, .tmo = tmo,
			.grace_ms = (int)(grace_ms > 0 && grace_ms < 86400000 ? grace_ms : 60000)};
	RSCHECKGOTO(rs_config_load(config, &cfg, &err), st, fail);
	w.cfg = cfg;
	RSCHECKGOTO(open_engine(device, &w.engine, &w.cuda_device, &err), st, fail);
	RS_INFO("shards and kernels on %s", w.engine->name);
	if (!strcmp(transport, "nccl")) {
		w.nccl = 1;
		if (w.cuda_device < 0) {
			st = rs_err_set(&err, RS_EINVAL, "--transport nccl needs the worker on a CUDA device (it is on %s)",
					w.engine->name);
			goto fail;
		}
	} else if (strcmp(transport, "tcp")) {
		st = rs_err_set(&err, RS_EINVAL, "--transport: '%s' is not tcp or nccl", transport);
		goto fail;
	}
	RSCHECKGOTO(relisten(&w, &err), st, fail);
	/* the coordinator may not be up yet: the grace period covers the first join too */
	w.link.lost_at = rs_now();
	RSCHECKGOTO(link_reconnect(&w.link, &err), st, fail);
	RS_INFO("transport on %s", w.addr);

	for (;;) {
		json_t *msg = NULL;
		int exit_now = 0;
		if (terminated && !w.tr && !w.st_gen) {
			link_leave(&w.link);
			RS_INFO("SIGTERM: I hold no rows; leaving");
			rc = 0;
			goto out;
		}
		/* connected, the coordinator decides how long this takes; cut off, the grace period bounds it */
		st = link_recv(&w.link, 1000, &msg, &err);
		if (st == RS_ETIMEDOUT)
			continue;
		if (st != RS_OK) {
			rs_err_set(&err, st, "waiting for the coordinator: %s", err.msg);
			goto fail;
		}
		st = handle(&w, msg, &exit_now, &err);
		json_decref(msg);
		if (st != RS_OK)
			goto fail;
		if (exit_now) {
			rc = 0;
			goto out;
		}
	}
fail:
	RS_ERROR("%s", err.msg[0] ? err.msg : rs_status_str(st));
	if (w.t)
		rs_transport_abort(w.t);
out:
	if (w.link.ctl)
		rs_control_flush(w.link.ctl, 1000);
	drop_staged(&w);
	rs_trainer_destroy(w.tr);
	rs_engine_destroy(w.engine);
	rs_transport_destroy(w.t);
	rs_transport_destroy(w.uni);
	rs_plan_free(w.plan);
	if (w.lfd >= 0)
		close(w.lfd);
	rs_control_close(w.link.ctl);
	json_decref(w.link.status);
	rs_config_free(cfg);
	return rc;
}
