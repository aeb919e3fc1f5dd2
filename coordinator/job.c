/*
 * job.c - the job's life cycle: creating one (fresh, or recovered in
 * job_persist.c), the server glue (messages in, messages and status events
 * out through rs_job_io), the tick that drives the cycle, and the
 * helpers every part shares. See job.h and job_internal.h.
 */
#include "coordinator/job_internal.h"
#include "common/clock.h"
#include "common/log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const rs__phase_names[] = {"starting", "training", "paused", "migrating",
				       "committing", "aborting", "recovering", "done", "failed"};

double rs__job_now(const rs_job *j) { return j->o.now ? j->o.now() : rs_now(); }

double rs__unix_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int rs__job_send(rs_job *j, member *m, json_t *msg)
{
	if (!msg) { /* a word of the cycle that never goes out would leave it waiting: fail (the state stands) */
		rs__job_fail(j, "out of memory building a message to %s", m->name);
		return 0;
	}
	int queued = m->conn && j->io.send && j->io.send(j->io.ctx, m->conn, msg) == RS_OK;
	if (m->conn && !queued)
		RS_WARN("control: cannot queue a message to %s", m->name);
	json_decref(msg);
	return queued;
}

int64_t rs__job_step(const rs_job *j) { return j->rep.last.step > j->cur.step ? j->rep.last.step : j->cur.step; }

void rs__job_set_phase(rs_job *j, phase p)
{
	if (j->ph == P_FAILED || j->ph == P_DONE)
		return; /* the ends are final: a step of the cycle that failed midway does not undo its failure */
	int changed = j->ph != p;
	if (changed)
		RS_DEBUG("phase %s -> %s", rs__phase_names[j->ph], rs__phase_names[p]);
	if (p == P_TRAINING)
		j->cur.pausing = 0;
	j->ph = p;
	j->ph_at = rs__job_now(j);
	if (changed)
		rs__emit(j, &(job_event){.kind = EV_PHASE});
}

void rs__job_fail(rs_job *j, const char *fmt, ...)
{
	va_list ap;
	if (j->ph == P_FAILED || j->ph == P_DONE)
		return;
	va_start(ap, fmt);
	vsnprintf(j->why, sizeof(j->why), fmt, ap);
	va_end(ap);
	rs__emit(j, &(job_event){.kind = EV_FAILED});
	rs__job_set_phase(j, P_FAILED);
	if (j->src.failure_final && !j->state_broken) /* a restart reports it instead of training again */
		rs__persist(j, RS_STATE_FAILED);
	if (j->src.ending)
		j->src.ending(j->src.ctx);
}

/* ---- the server glue ------------------------------------------------------------------ */

static rs_status server_send(void *ctx, rs_conn *c, const json_t *msg)
{
	(void)ctx;
	return rs_server_send(c, msg);
}

static void server_publish(void *ctx, const json_t *ev) { rs_server_publish(ctx, ev); }
static void server_hold(void *ctx, int hold) { rs_server_status_hold(ctx, hold); }
static int server_clients(void *ctx) { return rs_server_status_clients(ctx); }

static const char *server_conn_name(void *ctx, rs_conn *c)
{
	(void)ctx;
	return rs_conn_worker(c);
}

void rs_job_set_server(rs_job *j, rs_server *srv)
{
	j->io = (rs_job_io){.ctx = srv, .send = server_send, .publish = server_publish, .hold = server_hold,
			    .status_clients = server_clients, .conn_name = server_conn_name};
}

void rs_job_set_io(rs_job *j, const rs_job_io *io) { j->io = *io; }

static json_t *status_snapshot(void *ctx) { return rs__job_snapshot(ctx); }

rs_server_handler rs_job_server_handler(rs_job *j)
{
	return (rs_server_handler){.ctx = j, .on_join = rs__dispatch_join, .on_message = rs__dispatch_message,
				   .on_close = rs__dispatch_close, .status_snapshot = status_snapshot,
				   .http_get = rs__job_http_get};
}

/* ---- life cycle ----------------------------------------------------------------------- */

rs_status rs_job_create(const rs_job_options *o, const rs_job_source *src, int32_t workers, rs_job **out,
			rs_err *err)
{
	rs_job *j = calloc(1, sizeof(*j));
	*out = NULL;
	if (!j)
		return rs_err_set(err, RS_ENOMEM, "job: out of memory");
	j->o = *o;
	j->cfg = o->cfg;
	j->src = *src;
	j->ntables = o->cfg->ntables;
	j->cur.resume_step = -1;
	j->ph_at = rs__job_now(j);
	if (j->cfg->cluster.partial_recovery && !o->ckpt_dir && !o->load)
		RS_WARN("the config asks for partial recovery, but there is no --checkpoint-dir (nor --load) to restore "
			"lost rows from: a lost worker rolls the job back to step 0");
	if (j->o.max_attempts < 1)
		j->o.max_attempts = 3;
	j->mem.initial = workers;
	rs__job_set_phase(j, P_STARTING);
	*out = j;
	return RS_OK;
}

void rs_job_destroy(rs_job *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->mem.n; i++) {
		free(j->mem.v[i].paused_sum);
		free(j->mem.v[i].held_sum);
		free(j->mem.v[i].staged_sum);
	}
	free(j->mem.v);
	free(j->mem.early);
	free(j->cur.world);
	free(j->rep.history);
	rs_plan_free(j->cur.plan);
	rs__cycle_free_attempt(j);
	rs__ckpt_free(j);
	rs__recover_free(j);
	free(j);
}

rs_status rs_job_parse_schedule(const char *s, rs_job_options *o, rs_err *err)
{
	o->nsched = 0;
	while (s && *s) {
		char *end;
		long long st = strtoll(s, &end, 10);
		if (end == s || *end != ':')
			return rs_err_set(err, RS_EINVAL, "--schedule: expected STEP:WORKERS at '%s'", s);
		long w = strtol(end + 1, &end, 10);
		if (st <= 0 || w < 1 || w > RS_MAX_WORKERS || (o->nsched && st <= o->sched_step[o->nsched - 1]) ||
		    o->nsched >= RS_STATE_MAX_SCHEDULE || (*end && *end != ','))
			return rs_err_set(err, RS_EINVAL, "--schedule: bad entry at '%s' (steps increase, 1..%d workers)", s,
					  RS_MAX_WORKERS);
		o->sched_step[o->nsched] = st;
		o->sched_workers[o->nsched++] = (int32_t)w;
		s = *end ? end + 1 : end;
	}
	return RS_OK;
}

void rs_job_changed(rs_job *j) { rs__members_changed(j); }

void rs_job_tick(rs_job *j)
{
	rs__persist_tick(j);
	rs__cycle_tick(j);
	rs__job_status_tick(j);
}

int rs_job_finished(const rs_job *j) { return j->ph == P_DONE ? 1 : j->ph == P_FAILED ? -1 : 0; }

const char *rs_job_error(const rs_job *j) { return j->why; }

const char *rs_job_phase(const rs_job *j) { return rs__phase_names[j->ph]; }

int64_t rs_job_generation(const rs_job *j) { return j->cur.generation; }

int64_t rs_job_step(const rs_job *j) { return rs__job_step(j); }

int32_t rs_job_world(const rs_job *j) { return j->cur.nworld; }

void rs_job_stop_all(rs_job *j)
{
	for (size_t i = 0; i < j->mem.n; i++)
		rs__job_send(j, &j->mem.v[i], rs_proto_make_plain(RS_MSG_STOP));
}
