/*
 * agent.c - see agent.h: the generation state machine. A message from the
 * coordinator is dispatched by its type (handle); a fresh start, a commit
 * or a resume leads to training (train), which polls the link between
 * steps for "pause" and "stop".
 */
#include "worker/agent_internal.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/plan.h"
#include "common/proto.h"
#include "worker/checkpointer.h"
#include "worker/train.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static int leave_requested(const rs_agent *a) { return a->c.leave && *a->c.leave; }

/* Listen for the next generation's transport (a fresh socket: the last one went to a transport). */
rs_status rs__agent_relisten(rs_agent *a, rs_err *err)
{
	int port;
	if (a->lfd >= 0)
		return RS_OK;
	RSCHECK(rs_tcp_listen(a->c.host, 0, &a->lfd, &port, err));
	snprintf(a->addr, sizeof(a->addr), strchr(a->c.host, ':') ? "[%s]:%d" : "%s:%d", a->c.host, port);
	return RS_OK;
}

/*
 * The model's per-table checksums as JSON (new references; NULL without
 * memory), and with held those of every copy this rank holds (2D healing).
 */
json_t *rs__agent_checksums(const rs_agent *a, const rs_trainer *tr, json_t **held)
{
	size_t n = (size_t)a->c.cfg->ntables;
	uint64_t *v = calloc(2 * n + 1, sizeof(uint64_t));
	json_t *j = NULL;
	if (v) {
		rs_trainer_checksums(tr, v, held ? v + n : NULL);
		j = rs_proto_checksums_to_json(v, a->c.cfg->ntables);
		if (held)
			*held = rs_proto_checksums_to_json(v + n, a->c.cfg->ntables);
	}
	free(v);
	return j;
}

/* Paused at a->cur.step, listening for the next generation: tell the coordinator, with the model's checksum. */
rs_status rs__agent_report_paused(rs_agent *a, rs_err *err)
{
	double t0 = rs_now();
	RSCHECK(rs__agent_relisten(a, err));
	int heals = rs_trainer_can_heal(a->tr);
	rs_msg_paused m = {.rank = a->cur.rank, .generation = a->cur.generation, .step = a->cur.step, .addr = a->addr,
			   .prepared = a->tr ? rs_trainer_prepared(a->tr) : 0};
	m.checksum = rs__agent_checksums(a, a->tr, heals ? &m.held : NULL);
	double took = rs_now() - t0; /* the world is stopped for this too: the coordinator counts it in the pause */
	m.stopped_s = took < 3600 ? took : 3600; /* what the message may say */
	/* never a pause without the model's checksums */
	json_t *j = m.checksum && (m.held || !heals) ? rs_proto_make_paused(&m) : NULL;
	json_decref(m.checksum);
	json_decref(m.held);
	return rs_link_status(&a->link, j, err);
}

void rs__agent_drop_staged(rs_agent *a)
{
	rs_precopy_free(a->pc); /* first: it points at the plans and transports below */
	rs_plan_free(a->pc_prev);
	free(a->pc_uoo);
	json_decref(a->pc_start);
	a->pc = NULL, a->pc_prev = NULL, a->pc_uoo = NULL, a->pc_start = NULL, a->pc_said = 0;
	a->pc_bounded = 0;
	rs_trainer_destroy(a->st_tr);
	rs_transport_destroy(a->st_t);
	rs_transport_destroy(a->st_uni);
	rs_plan_free(a->st_plan);
	a->st_tr = NULL, a->st_t = a->st_uni = NULL, a->st_plan = NULL;
	a->st_gen = 0;
}

/* Send the report of a periodic checkpoint whose files are written (wait: the one in flight, once written). */
static void ckpt_collect(rs_agent *a, int wait)
{
	json_t *report;
	rs_err err = {0};
	rs_link_keeper keeper;
	int keep = wait && rs_checkpointer_busy(a->ckpt); /* the write in flight may take minutes */
	if (keep)
		rs_link_keep_start(&keeper, &a->link);
	rs_status st = rs_checkpointer_done(a->ckpt, wait, &report, &err);
	if (keep)
		rs_link_keep_stop(&keeper);
	if (st == RS_EABORTED)
		RS_INFO("%s: its generation is lost", err.msg);
	else if (st != RS_OK)
		RS_WARN("%s (training goes on; this checkpoint stays incomplete and is never read)", err.msg);
	rs_link_report(&a->link, report); /* repeated after a rejoin: the coordinator counts it once */
}

/* Create or remove c.ready_file (the readiness probe's), when that changes it. */
void rs__agent_set_ready(rs_agent *a, int on)
{
	if (!a->c.ready_file || a->ready == on)
		return;
	int fd = on ? open(a->c.ready_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
	if (on ? fd < 0 : unlink(a->c.ready_file) != 0 && errno != ENOENT) {
		RS_WARN("readiness: cannot %s %s: %s", on ? "create" : "remove", a->c.ready_file, strerror(errno));
		return;
	}
	if (fd >= 0)
		close(fd);
	a->ready = on;
}

/* Forget the generation this worker trains: its model, transports and plan (the rows go with them). */
static void drop_model(rs_agent *a)
{
	rs__agent_set_ready(a, 0);
	rs_checkpointer_cancel(a->ckpt); /* a periodic write in flight stops at its next file ... */
	ckpt_collect(a, 1);              /* ... and ends first: no file of the lost world lands later */
	rs_checkpointer_drop_spare(a->ckpt);
	rs__agent_drop_staged(a);
	if (a->t)
		rs_transport_abort(a->t); /* the other ranks must not wait for this one */
	rs_trainer_destroy(a->tr);
	rs_transport_destroy(a->t);
	rs_transport_destroy(a->uni);
	rs_plan_free(a->plan);
	a->tr = NULL, a->t = a->uni = NULL, a->plan = NULL;
	a->stalled = 0;
}

/*
 * The generation failed under this worker (a peer died, the mesh broke):
 * its rows are of no use without the others'. Drop it, listen anew and
 * tell the coordinator this worker is idle: it rolls the world back to
 * its latest checkpoint (README, "Recovery").
 */
static rs_status lose_generation(rs_agent *a, const char *why, rs_err *err)
{
	RS_WARN("generation %lld lost at step %lld: %s; waiting for the coordinator to recover",
		(long long)a->cur.generation, (long long)a->cur.step, why);
	drop_model(a);
	RSCHECK(rs__agent_relisten(a, err));
	return rs_link_status(&a->link, rs_proto_make_idle(a->addr), err);
}

/*
 * The generation failed under this worker, but its model is whole (the
 * failed step changed nothing), and either every row of a lost peer has a
 * copy in another replica group (2D, exact sync) or partial recovery
 * restores it from a checkpoint: keep the model, stop the transport (the
 * others must not wait for this rank) and report paused at the last step
 * done. The coordinator rebuilds the world with a reshard, or rolls it
 * back after all (an abort of this generation, which drops the model then).
 * A checkpoint write in flight goes on, reported when it ends (a partial
 * recovery waits for the checkpoint when it can still complete).
 */
static rs_status stall(rs_agent *a, const char *why, rs_err *err)
{
	RS_WARN("generation %lld stopped at step %lld: %s; keeping the model for the world to heal", (long long)a->cur.generation,
		(long long)a->cur.step, why);
	if (a->t)
		rs_transport_abort(a->t);
	a->stalled = 1;
	ckpt_collect(a, 0);
	return rs__agent_report_paused(a, err);
}

/*
 * Healing: the world goes on from the step this one stopped short of, its
 * votes failed (rs_trainer_prepared): make the step's updates, and report
 * paused again, caught up or not (the coordinator then gives it its rows
 * again). Asked for the step it stopped at instead, it drops the prepared
 * one (rs_trainer_drop_prepared) and reports the model of that step.
 */
static rs_status catch_up(rs_agent *a, json_t *msg, rs_err *err)
{
	int64_t gen, step;
	rs_err why = {0};
	RSCHECK(rs_proto_generation(msg, &gen, &step, NULL, err));
	if (!a->tr)
		return RS_OK; /* no model: it said idle */
	if (!a->stalled || gen != a->cur.generation) /* nothing to catch up: where it is, for the coordinator to count */
		return rs__agent_report_paused(a, err);
	if (step == a->cur.step + 1 && rs_trainer_prepared(a->tr) == step) {
		if (rs_trainer_catch_up(a->tr, &why) != RS_OK)
			return lose_generation(a, why.msg, err);
		a->cur.step = step;
		RS_WARN("generation %lld: caught up to step %lld (its votes had failed; its updates are made)",
			(long long)gen, (long long)step);
	} else if (step == a->cur.step && rs_trainer_prepared(a->tr) > step) {
		if (rs_trainer_drop_prepared(a->tr, &why) != RS_OK)
			return lose_generation(a, why.msg, err);
		RS_WARN("generation %lld: the world goes on from step %lld: the step prepared after it is dropped, its "
			"ZCH changes taken back", (long long)gen, (long long)step);
	}
	return rs__agent_report_paused(a, err);
}

/* A transport over the start message's peers (one per union rank), on the listening socket. */
rs_status rs__agent_connect_peers(rs_agent *a, const rs_msg_start *s, rs_transport **out, rs_err *err)
{
	const char **addrs = malloc(sizeof(char *) * (size_t)s->union_world);
	if (!addrs)
		return RS_ENOMEM;
	for (int64_t i = 0; i < s->union_world; i++)
		addrs[i] = json_string_value(json_array_get(s->peers, (size_t)i));
	rs_tcp_config tc = {.rank = (int32_t)s->rank, .world = (int32_t)s->union_world, .addrs = addrs,
			    .listen_fd = a->lfd, .token = a->c.token, .generation = (uint64_t)s->generation,
			    .timeout_ms = a->c.timeout_ms};
	a->lfd = -1; /* the transport owns it now, even when it fails */
	rs_status st = a->c.connect ? a->c.connect(a->c.connect_ctx, &tc, out, err) : rs_tcp_transport_create(&tc, out, err);
	free(addrs);
	return st;
}

void rs__agent_take_run(run *r, const rs_msg_start *s)
{
	r->rank = s->rank, r->generation = s->generation, r->step = s->first_step, r->steps = s->steps;
	r->last = s->last, r->eval_every = s->eval_every, r->eval_samples = s->eval_samples;
	snprintf(r->save, sizeof(r->save), "%s", s->save ? s->save : "");
	snprintf(r->ckpt_dir, sizeof(r->ckpt_dir), "%s", s->checkpoint_dir ? s->checkpoint_dir : "");
	r->ckpt_every = s->checkpoint_dir ? s->checkpoint_every : 0;
	r->ckpt_interval = s->checkpoint_dir ? s->checkpoint_interval : 0;
}


/* A fresh start's checkpoint: loaded into a->tr, which must be of the step the start names. */
static rs_status load_checkpoint(rs_agent *a, const rs_msg_start *s, rs_err *err)
{
	int64_t step;
	double t0 = rs_now();
	RSCHECK(rs_trainer_load(a->tr, s->load, &step, err));
	if (step != s->first_step)
		return rs_err_set(err, RS_EINVAL, "%s is a checkpoint of step %lld, not %lld", s->load, (long long)step,
				  (long long)s->first_step);
	RS_INFO("loaded %s (step %lld) in %.3f s", s->load, (long long)step, rs_now() - t0);
	return RS_OK;
}

/* A fresh start: this worker's first generation. Takes plan. */
static rs_status start_fresh(rs_agent *a, const rs_msg_start *s, rs_plan *plan, rs_err *err)
{
	rs_status st = RS_OK;
	if (a->tr && s->generation <= a->cur.generation) {
		rs_plan_free(plan);
		return rs_err_set(err, RS_EINVAL, "a fresh start of generation %lld for a worker that trains generation %lld",
				  (long long)s->generation, (long long)a->cur.generation);
	}
	if (a->tr || a->st_gen) { /* a rollback: the world starts again from a checkpoint */
		RS_INFO("generation %lld starts afresh from step %lld: dropping generation %lld", (long long)s->generation,
			(long long)s->first_step, (long long)a->cur.generation);
		drop_model(a);
	}
	rs_link_forget_report(&a->link); /* the checkpoints of earlier generations: completed, or rolled back past */
	RSCHECKGOTO(rs__agent_relisten(a, err), st, fail);
	RSCHECKGOTO(rs__agent_connect_peers(a, s, &a->t, err), st, fail);
	rs_link_keeper keeper;
	rs_link_keep_start(&keeper, &a->link); /* a large model takes a while to build, and longer to load */
	st = (s->load ? rs_trainer_create_for_load : rs_trainer_create)(a->c.cfg, plan, a->t, a->engine, &a->tr, err);
	if (st == RS_OK && s->load)
		st = load_checkpoint(a, s, err);
	rs_link_keep_stop(&keeper);
	if (st != RS_OK)
		goto fail;
	a->plan = plan;
	rs__agent_take_run(&a->cur, s);
	return RS_OK;
fail:
	drop_model(a); /* what it built so far; the others must not wait for it */
	rs_plan_free(plan);
	return st;
}

/*
 * The messages the coordinator may send during training: a pause request,
 * stop (*stop), or an abort of this very generation (a member was lost:
 * *dropped gets why).
 */
static void between_steps(rs_agent *a, json_t *m, int *stop, rs_err *dropped)
{
	int64_t gen;
	const char *why;
	switch (rs_proto_kind(m)) {
	case RS_MSG_PAUSE:
		rs_trainer_request_pause(a->tr);
		break;
	case RS_MSG_STOP:
		*stop = 1;
		break;
	case RS_MSG_START: /* the next generation, pre-copied: the world agrees on the step to begin at */
		if (json_is_true(json_object_get(m, "precopy")))
			rs__precopy_offer(a, m);
		else
			RS_WARN("ignoring a start message during training");
		break;
	case RS_MSG_ABORT:
		if (rs_proto_generation(m, &gen, NULL, &why, NULL) == RS_OK && rs__precopy_call_off(a, gen))
			break;
		if (rs_proto_generation(m, &gen, NULL, &why, NULL) == RS_OK && gen == a->cur.generation) {
			a->dropped = 1;
			rs_err_set(dropped, RS_EABORTED, "the coordinator dropped generation %lld (%s)", (long long)gen,
				   why ? why : "no reason given");
		}
		break;
	default:
		RS_WARN("ignoring a '%s' message during training", rs_proto_type(m));
	}
}

/*
 * The coordinator's messages waiting on the link, each handled by
 * between_steps; the link's status (not RS_OK: it is down or refused).
 */
static rs_status poll_between_steps(rs_agent *a, int *stop, rs_err *lost)
{
	json_t *m;
	rs_status st = rs_link_poll(&a->link, &m);
	for (; st == RS_OK && m; rs_link_poll(&a->link, &m)) {
		between_steps(a, m, stop, lost);
		json_decref(m);
	}
	return st;
}

/*
 * train.min_step_ms: the rest of the step idle until `until`, listening to
 * the coordinator meanwhile (a stop or an abort is not held up; a pause
 * asked for is taken at the next step's end, as without the idle). The
 * link's trouble is left to the caller's poll.
 */
static void idle_out(rs_agent *a, double until, int *stop, rs_err *lost)
{
	for (double now = rs_now(); now < until && !*stop && !lost->msg[0]; now = rs_now()) {
		if (poll_between_steps(a, stop, lost) != RS_OK)
			return;
		rs_sleep(until - now < 0.005 ? until - now : 0.005);
	}
}

/*
 * One write at a time: wait for the one in flight, listening to the
 * coordinator meanwhile, so that a stop or an abort of this generation (a
 * member was lost) is not held up by a slow write (*stop, lost). 0 when
 * the wait was cut short.
 */
static int ckpt_wait_previous(rs_agent *a, int *stop, rs_err *lost)
{
	while (rs_checkpointer_busy(a->ckpt)) {
		ckpt_collect(a, 0);
		if (!rs_checkpointer_busy(a->ckpt))
			break;
		if (poll_between_steps(a, stop, lost) != RS_OK) {
			ckpt_collect(a, 1); /* the link's trouble is the training loop's to report */
			break;
		}
		if (*stop || lost->msg[0])
			return 0;
		rs_sleep(0.005);
	}
	return 1;
}

/* A periodic checkpoint at this step boundary: copy this rank's part now, write it off the training thread. */
static void ckpt_take(rs_agent *a, int *stop, rs_err *lost)
{
	rs_snapshot *s;
	rs_err err = {0};
	double t0 = rs_now();
	if (!ckpt_wait_previous(a, stop, lost))
		return;
	if (rs_trainer_snapshot(a->tr, rs_checkpointer_spare(a->ckpt), &s, &err) != RS_OK ||
	    rs_checkpointer_start(a->ckpt, s, a->cur.ckpt_dir, a->cur.generation, a->cur.step, a->cur.rank, &err) != RS_OK) {
		RS_WARN("%s (training goes on without this checkpoint)", err.msg);
		return;
	}
	RS_DEBUG("checkpoint of step %lld: copied in %.3f s", (long long)a->cur.step, rs_now() - t0);
}

/*
 * Test hook (--fault exit-after-checkpoint=STEP@NAME): once this worker's
 * part of the checkpoint of this step is written and reported, die as
 * abruptly as a SIGKILL would, before the next step: the survivors stop at
 * exactly this step (and report their parts when they do).
 */
static void exit_after_checkpoint(rs_agent *a)
{
	ckpt_collect(a, 1);
	rs_link_close(&a->link); /* the report goes out first */
	RS_WARN("test hook: exiting after the checkpoint of step %lld", (long long)a->cur.step);
	_exit(137);
}

/* At the end of the last step: the checkpoint asked for, then "done". */
static rs_status finish(rs_agent *a, rs_err *err)
{
	ckpt_collect(a, 1); /* the last periodic checkpoint is reported before "done" */
	rs_checkpointer_drop_spare(a->ckpt); /* the final save copies what it cannot borrow */
	if (a->cur.save[0]) {
		double s0 = rs_now();
		rs_link_keeper keeper;
		rs_link_keep_start(&keeper, &a->link); /* a large model's save takes minutes on a slow volume */
		rs_status st = rs_trainer_save(a->tr, a->cur.save, a->cur.steps, err);
		rs_link_keep_stop(&keeper);
		RSCHECK(st);
		RS_INFO("checkpoint written to %s in %.3f s", a->cur.save, rs_now() - s0);
	}
	if (a->c.exit_before_done) { /* test hook (--fault exit-before-done[@NAME]) */
		RS_WARN("test hook: exiting after the last step, before saying done");
		_exit(137);
	}
	RSCHECK(rs_link_status(&a->link, rs_proto_make_done(a->cur.generation, a->cur.rank, a->cur.steps), err));
	rs_err why = {0};
	if (rs_link_deliver(&a->link, &why) != RS_OK) /* cut off meanwhile: this worker exits next, its "done" heard */
		RS_WARN("trained to the last step, but the coordinator did not hear it: %s", why.msg);
	return RS_OK;
}

/*
 * Train from a->cur.step to a->cur.steps, evaluating and reporting as
 * configured, handling "pause" and "stop" between steps. Ends paused
 * (a->cur.step < steps, or == steps when not last), done (*done),
 * stopped (*stop), or with the generation lost (a step or an evaluation
 * failed: *lost gets why).
 */
static rs_status train(rs_agent *a, int *done, int *stop, rs_err *lost, rs_err *err)
{
	run *r = &a->cur;
	double teacher_auc = r->rank == 0 && r->step == 0 ? rs_trainer_teacher_auc(a->tr, r->eval_samples) : -1;
	double t0 = rs_now();
	int64_t since = r->step, first = r->step;
	rs_status st;
	*done = *stop = 0;
	rs__agent_set_ready(a, 1); /* before it says so: a probe never lags the coordinator's view */
	/*
	 * Listening meanwhile, and saying where: a pre-copied reshard connects while the world trains. Not a 2D
	 * world whose replicas are averaged every K steps (rs_trainer_can_precopy): it moves its rows at the pause.
	 */
	int can_precopy = rs_trainer_can_precopy(a->tr);
	if (can_precopy)
		RSCHECK(rs__agent_relisten(a, err));
	RSCHECK(rs_link_status(&a->link, rs_proto_make_training(r->generation, r->step, can_precopy ? a->addr : NULL),
			       err));
	if (r->generation != a->ckpt_gen) /* a new generation: its interval counts from its start */
		a->ckpt_at = rs_now(), a->ckpt_gen = r->generation;
	RS_INFO("rank %lld, generation %lld: training steps %lld..%lld", (long long)r->rank, (long long)r->generation,
		(long long)r->step, (long long)r->steps - 1);
	a->pace.mark = 0; /* the time since the last step is not a step's */
	while (r->step < r->steps) {
		int64_t step = r->step;
		double began = rs_now();
		rs_step_stats stats;
		rs_err why = {0};
		if (r->ckpt_interval > 0 && rs_now() - a->ckpt_at >= (double)r->ckpt_interval)
			rs_trainer_request_checkpoint(a->tr); /* the world takes it after this step if any rank asks */
		if ((st = rs_trainer_step(a->tr, step, &stats, &why)) != RS_OK) {
			rs_err_set(lost, st, "step %lld: %s", (long long)step, why.msg[0] ? why.msg : rs_status_str(st));
			return RS_OK;
		}
		r->step = step + 1;
		RSCHECK(rs__precopy_step(a, &stats, err)); /* at the same boundary on every rank */
		int end = r->step == r->steps;
		int eval = r->eval_every > 0 && (r->step % r->eval_every == 0 || (end && r->last));
		double auc = -1, ll;
		if (eval && (st = rs_trainer_evaluate(a->tr, r->eval_samples, &auc, &ll, &why)) != RS_OK) {
			rs_err_set(lost, st, "evaluation at step %lld: %s", (long long)step,
				   why.msg[0] ? why.msg : rs_status_str(st));
			return RS_OK;
		}
		if ((r->ckpt_every > 0 && r->step % r->ckpt_every == 0) || stats.checkpoint) {
			ckpt_take(a, stop, lost);
			a->ckpt_at = rs_now();
			if (a->c.exit_after_checkpoint == r->step)
				exit_after_checkpoint(a);
			if (*stop || lost->msg[0])
				return RS_OK;
		}
		ckpt_collect(a, 0);
		double t1 = rs_now();
		if (eval || step % 10 == 9 || end || step == first) {
			double sps = (double)a->c.cfg->train.global_batch * (double)(r->step - since) / (t1 - t0);
			rs_msg_progress p = {.rank = r->rank, .step = step, .loss = stats.loss, .samples_per_s = sps,
					     .auc = auc, .teacher_auc = teacher_auc};
			rs_link_post(&a->link, rs_proto_make_progress(&p)); /* progress is not worth waiting for */
			teacher_auc = -1;
			t0 = t1;
			since = r->step;
		}
		if (a->c.cfg->train.min_step_ms > 0 && !stats.pause && !end) /* not before a pause or the end */
			idle_out(a, began + (double)a->c.cfg->train.min_step_ms / 1e3, stop, lost);
		st = poll_between_steps(a, stop, lost);
		if (st == RS_EINVAL)
			return rs_err_set(err, st, "the coordinator refused this worker's rejoin");
		if (st != RS_OK)
			return rs_err_set(err, st, "the coordinator stayed away for more than %d ms (at step %lld)",
					  a->link.grace_ms, (long long)r->step);
		if (*stop || lost->msg[0])
			return RS_OK;
		if (stats.pause && !end)
			break;
	}
	if (r->step == r->steps && r->last) {
		*done = 1;
		return finish(a, err);
	}
	return rs__agent_report_paused(a, err);
}

/* A start: a fresh one trains at once (*train), a reshard's is staged. */
static rs_status on_start(rs_agent *a, json_t *msg, int *train_next, rs_err *err)
{
	rs_msg_start s;
	rs_plan *plan = NULL;
	RSCHECK(rs_proto_start(msg, &s, err));
	RSCHECK(rs_plan_from_json(s.plan, a->c.cfg, "start message plan", &plan, err));
	if (s.previous_plan)
		return (s.precopy ? rs__precopy_now : rs__agent_stage)(a, &s, plan, err);
	/* after a generation it trained, a later one's fresh start is a rollback: its failure is not this worker's end */
	int recovering = a->cur.generation > 0 && s.generation > a->cur.generation;
	rs_err why = {0};
	rs_status st = start_fresh(a, &s, plan, &why);
	if (st != RS_OK && recovering && st != RS_ENOMEM) {
		a->cur.generation = s.generation; /* the generation it lost */
		return lose_generation(a, why.msg, err);
	}
	if (st != RS_OK)
		return rs_err_set(err, st, "%s", why.msg);
	*train_next = 1;
	return RS_OK;
}

/* A commit: train the committed generation (*train), or end (*end) when this worker handed its rows over. */
static rs_status on_commit(rs_agent *a, json_t *msg, int *train_next, int *over, rs_agent_end *end, rs_err *err)
{
	int64_t gen;
	int left;
	RSCHECK(rs_proto_generation(msg, &gen, NULL, NULL, err));
	if (gen == a->cur.generation && gen != a->st_gen)
		return RS_OK; /* committed already: a restarted coordinator repeating itself */
	RSCHECK(rs__agent_commit(a, gen, &left, err));
	if (left) {
		RS_INFO("handed my rows over in generation %lld; leaving", (long long)gen);
		/* a periodic checkpoint of the world it left is written and reported first: its part completes it */
		ckpt_collect(a, 1);
		*over = 1, *end = RS_AGENT_LEFT;
		return RS_OK;
	}
	*train_next = 1;
	return RS_OK;
}

/* A resume: go on training the current generation to its new end (*train). */
static rs_status on_resume(rs_agent *a, json_t *msg, int *train_next, rs_err *err)
{
	rs_msg_resume r;
	RSCHECK(rs_proto_resume(msg, &r, err));
	if (a->tr && a->stalled && r.generation == a->cur.generation)
		/* the same world again, but this rank stopped its transport when the step failed: nothing to go on with */
		return lose_generation(a, "resumed after its step failed, with its transport stopped", err);
	if (!a->tr || r.generation != a->cur.generation || r.steps < a->cur.step)
		return rs_err_set(err, RS_EINVAL, "resume of generation %lld to step %lld: this worker is at %lld/%lld",
				  (long long)r.generation, (long long)r.steps, (long long)a->cur.generation,
				  (long long)a->cur.step);
	a->cur.steps = r.steps;
	a->cur.last = r.last;
	*train_next = 1;
	return RS_OK;
}

/* Handle one message from the coordinator; *over (and *end) when the worker's part is over. */
static rs_status handle(rs_agent *a, json_t *msg, int *over, rs_agent_end *end, rs_err *err)
{
	int64_t gen;
	const char *why;
	int train_next = 0;
	switch (rs_proto_kind(msg)) {
	case RS_MSG_STOP:
		RS_INFO("stopped by the coordinator");
		*over = 1, *end = RS_AGENT_STOPPED;
		return RS_OK;
	case RS_MSG_START:
		RSCHECK(on_start(a, msg, &train_next, err));
		break;
	case RS_MSG_COMMIT:
		RSCHECK(on_commit(a, msg, &train_next, over, end, err));
		break;
	case RS_MSG_ABORT:
		RSCHECK(rs_proto_generation(msg, &gen, NULL, &why, err));
		if (a->tr && gen == a->cur.generation && gen != a->st_gen) { /* a member was lost: this world is over */
			char what[600];
			snprintf(what, sizeof(what), "the coordinator dropped it (%s)", why ? why : "no reason given");
			return lose_generation(a, what, err);
		}
		return rs__agent_abort_staged(a, gen, why, err);
	case RS_MSG_RESUME:
		RSCHECK(on_resume(a, msg, &train_next, err));
		break;
	case RS_MSG_PAUSE:
		return RS_OK; /* a pause that came after the step boundary it asked for */
	case RS_MSG_FINISH:
		return rs__precopy_finish(a, msg, err);
	case RS_MSG_CATCH_UP:
		return catch_up(a, msg, err);
	default:
		RS_WARN("ignoring a '%s' message", rs_proto_type(msg));
		return RS_OK;
	}
	if (!train_next)
		return RS_OK;
	int done, stop;
	rs_err lost = {0};
	a->dropped = 0;
	RSCHECK(train(a, &done, &stop, &lost, err));
	if (lost.msg[0])
		return !a->dropped && rs_trainer_can_heal(a->tr) ? stall(a, lost.msg, err) : lose_generation(a, lost.msg, err);
	if (stop)
		RS_INFO("stopped by the coordinator at step %lld", (long long)a->cur.step);
	if (done || stop)
		*over = 1, *end = done ? RS_AGENT_DONE : RS_AGENT_STOPPED;
	return *over ? RS_OK : rs__precopy_paused(a, err);
}

rs_status rs_agent_create(const rs_agent_config *c, rs_agent **out, rs_err *err)
{
	rs_agent *a = calloc(1, sizeof(*a));
	*out = NULL;
	if (!a)
		return rs_err_set(err, RS_ENOMEM, "agent: out of memory");
	a->c = *c;
	a->engine = rs_engine_or_cpu(c->engine);
	a->lfd = -1;
	a->ready = 1;
	rs__agent_set_ready(a, 0); /* one a crashed process left (an emptyDir outlives a container restart) */
	rs_link_init(&a->link, c->conn, a->addr, c->timeout_ms, c->grace_ms, c->leave);
	rs_status st = rs_checkpointer_create(&a->ckpt, err);
	if (st == RS_OK)
		st = rs__agent_relisten(a, err);
	if (st != RS_OK) {
		rs_checkpointer_destroy(a->ckpt);
		free(a);
		return st;
	}
	*out = a;
	return RS_OK;
}

rs_status rs_agent_run(rs_agent *a, rs_agent_end *end, rs_err *err)
{
	rs_status st = RS_OK;
	int over = 0;
	RSCHECKGOTO(rs_link_join(&a->link, err), st, fail);
	RS_INFO("transport on %s", a->addr);
	while (!over) {
		json_t *msg = NULL;
		rs_err why = {0};
		if (leave_requested(a) && !a->tr && !a->st_gen) {
			rs_link_leave(&a->link);
			RS_INFO("SIGTERM: I hold no rows; leaving");
			*end = RS_AGENT_NO_ROWS;
			return RS_OK;
		}
		/* joined, the coordinator decides how long this takes; cut off, the grace period bounds it */
		/* a checkpoint write in flight is reported soon after it ends: a recovery may wait for it */
		st = rs_link_recv(&a->link, rs_checkpointer_busy(a->ckpt) ? 20 : 1000, &msg, &why);
		ckpt_collect(a, 0); /* a write that ended while this worker was paused */
		if (st == RS_ETIMEDOUT)
			continue;
		if (st != RS_OK)
			RSFAILGOTO(st, rs_err_set(err, st, "waiting for the coordinator: %s", why.msg), fail);
		rs_status hst = handle(a, msg, &over, end, err);
		json_decref(msg);
		RSCHECKGOTO(hst, st, fail);
	}
	return RS_OK;
fail:
	if (a->t)
		rs_transport_abort(a->t); /* the other ranks must not wait for this one */
	return st;
}

void rs_agent_destroy(rs_agent *a)
{
	if (!a)
		return;
	rs__agent_set_ready(a, 0);
	rs_checkpointer_destroy(a->ckpt); /* waits for a write in flight: its files stay whole */
	rs_link_close(&a->link);
	rs__agent_drop_staged(a);
	rs_trainer_destroy(a->tr);
	rs_transport_destroy(a->t);
	rs_transport_destroy(a->uni);
	rs_plan_free(a->plan);
	if (a->lfd >= 0)
		close(a->lfd);
	free(a);
}
