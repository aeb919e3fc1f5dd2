/*
 * job_dispatch.c - what members say on the control channel: a join (a new
 * worker, the same process reconnecting, or a new process under an old
 * name), each report a worker sends (a switch on its type, each validated
 * by its common/proto.h parser), rowshiftctl's scale request, and a closed
 * connection. Reports only update what the member last said; the cycle
 * (job_cycle.c) acts on them at the next tick.
 */
#include "coordinator/job_internal.h"
#include "common/log.h"

#include <string.h>

static const char *conn_name(const rs_job *j, rs_conn *c)
{
	return j->io.conn_name ? j->io.conn_name(j->io.ctx, c) : "a connection";
}

static void send_conn(rs_job *j, rs_conn *c, json_t *msg)
{
	if (msg && j->io.send)
		j->io.send(j->io.ctx, c, msg);
	json_decref(msg);
}

/* Answer a bad message with an error; the connection stays. */
static void reply_error(rs_job *j, rs_conn *c, const char *what)
{
	RS_WARN("control: from %s: %s", conn_name(j, c), what);
	send_conn(j, c, rs_proto_make_reason(RS_MSG_ERROR, what));
}

void rs__dispatch_join(void *ctx, rs_conn *c, const rs_msg_join *jm)
{
	rs_job *j = ctx;
	if (!jm->addr[0])
		return; /* a tool (rowshiftctl), not a worker */
	int i = rs__member_add(j, jm->worker);
	if (i < 0) {
		RS_ERROR("control: no room for worker %s", jm->worker);
		return;
	}
	member *m = &j->mem.v[i];
	int holds = rs__member_in_world(j, i) || rs__member_in_union(j, i);
	/* the same process rejoining carries the same incarnation (and pid); a restarted pod has a new one */
	int fresh = jm->incarnation[0] ? m->incarnation[0] && strcmp(m->incarnation, jm->incarnation) != 0
				       : m->pid && jm->pid != m->pid;
	if (fresh) {
		/* a new process under an old name (a restarted pod): a fresh worker, whatever the old one held */
		int lost = rs__member_in_world(j, i) || (j->ph == P_COMMITTING && rs__member_in_union(j, i));
		if (lost && !m->replaced)
			RS_WARN("%s came back as a new process", jm->worker);
		m->replaced = lost;
		m->st = M_IDLE, m->gen = 0, m->leaving = 0, m->killed = 0;
		holds = lost;
	}
	m->pid = jm->pid;
	snprintf(m->incarnation, sizeof(m->incarnation), "%s", jm->incarnation);
	m->conn = c, m->start_gen = 0; /* nothing sent on this connection yet */
	m->away_since = 0;
	m->exited = 0;
	rs__member_early_exit(j, jm->worker, 0);
	if (m->st == M_UNKNOWN && !holds)
		m->st = M_IDLE; /* a fresh worker says nothing more until it is given work */
	snprintf(m->addr, sizeof(m->addr), "%s", jm->addr);
	if (j->src.joined)
		j->src.joined(j->src.ctx, jm->worker, jm->pid);
	if (!holds)
		rs__members_changed(j);
	rs__emit(j, &(job_event){.kind = EV_MEMBER, .what = "joined", .name = jm->worker, .addr = jm->addr});
	if (j->ph == P_DONE || j->ph == P_FAILED) /* the job is over: nothing to train (a restarted pod) */
		rs__job_send(j, m, rs_proto_make_plain(RS_MSG_STOP));
	else if (j->ph == P_RECOVERING && !fresh)
		rs__recover_rejoined(j, i); /* the same process: it may have missed the word to drop the lost world */
	if (j->cur.stale_gen && !fresh) /* the old members call the copy off and train on, the joiners go idle */
		rs__job_send(j, m, rs_proto_make_generation(RS_MSG_ABORT, j->cur.stale_gen, 0,
							 "the coordinator restarted during this pre-copy"));
}

void rs__dispatch_close(void *ctx, rs_conn *c)
{
	rs_job *j = ctx;
	int i = rs__member_at(j, c);
	if (i < 0)
		return;
	member *m = &j->mem.v[i];
	m->conn = NULL, m->start_gen = 0; /* a start sent on it may be lost */
	m->away_since = rs__job_now(j);
	if (m->st != M_DONE)
		RS_INFO("%s disconnected", m->name);
	if (!rs__member_in_world(j, i))
		rs__members_changed(j);
}

static void on_scale(rs_job *j, rs_conn *c, json_t *msg)
{
	int32_t n;
	rs_err err = {0};
	if (rs_proto_scale(msg, &n, &err) != RS_OK) {
		send_conn(j, c, rs_proto_make_reason(RS_MSG_ERROR, err.msg));
	} else if (j->ph == P_DONE || j->ph == P_FAILED || !j->src.scale) {
		send_conn(j, c, rs_proto_make_reason(RS_MSG_ERROR, "the job is not running"));
	} else if (j->src.scale(j->src.ctx, n, &err) != RS_OK) {
		send_conn(j, c, rs_proto_make_reason(RS_MSG_ERROR, err.msg));
	} else {
		RS_INFO("%s asks for %d workers", conn_name(j, c), (int)n);
		j->mem.scale_at = rs__job_now(j);
		rs__members_changed(j);
		rs__persist(j, j->ph == P_MIGRATING ? RS_STATE_MIGRATING
			       : j->ph == P_COMMITTING ? RS_STATE_COMMITTING
						       : RS_STATE_TRAINING);
		send_conn(j, c, rs_proto_make_scaling(n));
	}
}

static rs_status on_progress(rs_job *j, member *m, json_t *msg, rs_err *err)
{
	rs_msg_progress pr;
	RSCHECK(rs_proto_progress(msg, &pr, err));
	m->step = pr.step + 1;
	m->samples_per_s = pr.samples_per_s;
	if (pr.rank != 0 || j->cur.nworld == 0 || &j->mem.v[j->cur.world[0]] != m)
		return RS_OK; /* rank 0 speaks for the job: every rank reports the same loss */
	rs__cycle_progress(j, pr.step);
	if (pr.teacher_auc >= 0)
		rs__emit(j, &(job_event){.kind = EV_TEACHER_AUC, .auc = pr.teacher_auc});
	rs__emit(j, &(job_event){.kind = EV_PROGRESS, .step = pr.step + 1, .loss = pr.loss, .auc = pr.auc,
				 .samples_per_s = pr.samples_per_s});
	return RS_OK;
}

static rs_status on_paused(rs_job *j, member *m, json_t *msg, rs_err *err)
{
	rs_msg_paused pa;
	RSCHECK(rs_proto_paused(msg, &pa, err));
	if (pa.checksum)
		RSCHECK(rs_proto_checksums(pa.checksum, m->paused_sum, j->ntables, err));
	m->has_held = 0;
	if (pa.held) {
		RSCHECK(rs_proto_checksums(pa.held, m->held_sum, j->ntables, err));
		m->has_held = 1;
	}
	/*
	 * The pause began when the first member of the world stopped, before it
	 * computed its checksums: its stopped_s, from the world's generation
	 * alone, and never more than a wait for a worker may take (a figure only:
	 * the pause's reports, not the cycle, read it).
	 */
	double most = j->o.timeout_ms / 1000.0, took = pa.stopped_s < most ? pa.stopped_s : most;
	int counts = pa.generation == j->cur.generation && rs__member_in_world(j, (int)(m - j->mem.v));
	double stopped = rs__job_now(j) - (counts ? took : 0);
	if (j->ph == P_TRAINING && !j->cur.pausing && counts) {
		j->t.first_paused = stopped;
		j->cur.pausing = 1;
	} else if (j->cur.pausing && counts && stopped < j->t.first_paused) {
		j->t.first_paused = stopped;
	}
	m->st = M_PAUSED, m->gen = pa.generation, m->step = pa.step;
	m->prepared = pa.prepared, m->catching = 0;
	snprintf(m->addr, sizeof(m->addr), "%s", pa.addr);
	return RS_OK;
}

static rs_status on_staged(rs_job *j, member *m, json_t *msg, rs_err *err)
{
	rs_msg_staged s;
	RSCHECK(rs_proto_staged(msg, &s, err));
	memset(m->staged_sum, 0, sizeof(uint64_t) * (size_t)j->ntables);
	if (s.checksum)
		RSCHECK(rs_proto_checksums(s.checksum, m->staged_sum, j->ntables, err));
	if (s.restored) {
		/*
		 * Rows restored from a checkpoint (partial recovery) are taken out:
		 * the rest must add up to the old rows' checksum; the restored ones
		 * passed their files' checksums.
		 */
		uint64_t *r = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
		rs_status st = r ? rs_proto_checksums(s.restored, r, j->ntables, err) : RS_ENOMEM;
		for (int t = 0; st == RS_OK && t < j->ntables; t++)
			m->staged_sum[t] -= r[t];
		free(r);
		RSCHECK(st);
	}
	if (s.generation == j->att.generation && j->att.precopy && j->ph == P_TRAINING) {
		if (!s.ok) /* its copy failed while the world trained (an old member trains on) */
			rs__cycle_precopy_failed(j, m, s.reason);
		return RS_OK;
	}
	if (!s.ok && s.generation != j->att.generation && j->ph == P_TRAINING &&
	    rs__member_in_world(j, (int)(m - j->mem.v)))
		return RS_OK; /* a copy called off already, failing late under a member that trains on */
	m->st = M_STAGED, m->gen = s.generation, m->staged_ok = s.ok;
	if (s.generation == m->start_gen) /* answered (see on_generation) */
		m->start_gen = 0;
	snprintf(m->staged_why, sizeof(m->staged_why), "%s", s.reason ? s.reason : "");
	m->staged = s;
	m->staged.reason = NULL, m->staged.checksum = m->staged.restored = NULL;
	if (s.generation != j->att.generation || !(j->ph == P_MIGRATING || j->ph == P_COMMITTING))
		/* staged for an attempt this coordinator did not decide: it cannot be committed */
		rs__job_send(j, m, rs_proto_make_generation(RS_MSG_ABORT, s.generation, 0, "that attempt is over"));
	else if (j->ph == P_COMMITTING && s.ok)
		/* a restarted coordinator repeats the commit it had decided */
		rs__job_send(j, m, rs_proto_make_generation(RS_MSG_COMMIT, j->att.generation, 0, NULL));
	return RS_OK;
}

/* staging, committed, training: the member's generation (and step) moved on. */
static rs_status on_generation(rs_job *j, member *m, rs_msg_type type, json_t *msg, rs_err *err)
{
	int64_t gen, step;
	const char *addr;
	RSCHECK(rs_proto_generation(msg, &gen, &step, &addr, err));
	if (type == RS_MSG_PRECOPIED) {
		m->precopied = gen;
		if (j->att.precopy && j->ph == P_TRAINING && gen == j->att.generation) /* status clients see it at once */
			rs__emit(j, &(job_event){.kind = EV_MIGRATION, .force = 1});
		return RS_OK;
	}
	if (type == RS_MSG_TRAINING)
		m->said_gen = gen;
	if (type == RS_MSG_TRAINING && addr) { /* where it listens meanwhile: a pre-copy connects there */
		snprintf(m->addr, sizeof(m->addr), "%s", addr);
		m->addr_gen = gen;
	}
	m->st = type == RS_MSG_STAGING ? M_STAGING : type == RS_MSG_COMMITTED ? M_COMMITTED : M_TRAINING;
	m->gen = gen;
	if (gen == m->start_gen) /* answered: what it says of another generation from here on is news */
		m->start_gen = 0;
	if (step >= 0)
		m->step = step;
	return RS_OK;
}

static rs_status on_migrating(rs_job *j, int i, json_t *msg, rs_err *err)
{
	int64_t gen;
	json_t *sent;
	RSCHECK(rs_proto_migrating(msg, &gen, &sent, err));
	if (gen != j->att.generation)
		return RS_OK;
	int32_t src = -1;
	for (int32_t u = 0; u < j->att.nuni; u++)
		if (j->att.uni[u] == i)
			src = u;
	for (size_t k = 0; src >= 0 && k < json_array_size(sent); k++) {
		json_t *e = json_array_get(sent, k);
		int32_t dst = (int32_t)json_integer_value(json_array_get(e, 0));
		for (int p = 0; p < j->att.npairs; p++)
			if (j->att.pairs[p].src == src && j->att.pairs[p].dst == dst)
				j->att.pairs[p].bytes = (uint64_t)json_integer_value(json_array_get(e, 1));
	}
	rs__emit(j, &(job_event){.kind = EV_MIGRATION});
	return RS_OK;
}

static rs_status on_idle(rs_job *j, member *m, json_t *msg, rs_err *err)
{
	const char *addr;
	RSCHECK(rs_proto_idle(msg, &addr, err));
	m->st = M_IDLE;
	m->gen = 0;
	snprintf(m->addr, sizeof(m->addr), "%s", addr);
	rs__members_changed(j);
	return RS_OK;
}

static rs_status on_leave(rs_job *j, int i, json_t *msg, rs_err *err)
{
	member *m = &j->mem.v[i];
	RSCHECK(rs_proto_generation(msg, NULL, NULL, NULL, err));
	int holds = rs__member_in_world(j, i);
	if (!m->leaving)
		rs__emit(j, &(job_event){.kind = EV_MEMBER, .what = "draining", .name = m->name,
					 .detail = holds ? "its rows will be drained first" : "holds no rows"});
	m->leaving = 1;
	rs__members_changed(j);
	if (!holds && j->ph != P_MIGRATING && j->ph != P_COMMITTING)
		rs__job_send(j, m, rs_proto_make_plain(RS_MSG_STOP));
	return RS_OK;
}

static rs_status on_done(rs_job *j, member *m, json_t *msg, rs_err *err)
{
	int64_t gen, rank, step;
	RSCHECK(rs_proto_done(msg, &gen, &rank, &step, err));
	/* the first word of a worker cut off at its last step, to a coordinator started again: its generation */
	int64_t said = m->gen == 0 && gen > 0 ? gen : m->gen;
	/*
	 * One "done" can end the job (a peer lost after it): only the last step
	 * of the world in training counts, of the one being committed (its
	 * members train as soon as they commit, before the coordinator has
	 * heard from them all), or of the one a rollback just left.
	 */
	int i = (int)(m - j->mem.v), in = rs__member_in_world(j, i) && said == j->cur.generation;
	for (int32_t u = 0; !in && j->att.generation && said == j->att.generation && u < j->att.nworld; u++)
		in = j->att.uni[u] == i;
	for (int32_t r = 0; !in && !j->cur.world && said == j->rec.old_gen && r < j->rec.nold; r++)
		in = j->rec.old[r] == i;
	if (step != j->o.steps)
		return rs_err_set(err, RS_EINVAL, "done at step %lld, but the job ends at step %lld", (long long)step,
				  (long long)j->o.steps);
	if (!in)
		return rs_err_set(err, RS_EINVAL, "done from a member of no world that trains (generation %lld)",
				  (long long)said);
	(void)rank;
	m->gen = said;
	m->st = M_DONE;
	m->done_gen = m->gen;
	if (j->src.ending)
		j->src.ending(j->src.ctx);
	return RS_OK;
}

void rs__dispatch_message(void *ctx, rs_conn *c, json_t *msg)
{
	rs_job *j = ctx;
	rs_msg_type type = rs_proto_kind(msg);
	rs_err err = {0};
	if (type == RS_MSG_SCALE) {
		on_scale(j, c, msg);
		return;
	}
	int i = rs__member_at(j, c);
	if (i < 0) { /* a tool's connection, or one that never joined as a worker: told, as the protocol says */
		char what[96];
		snprintf(what, sizeof(what), "'%.32s' from a connection that is not a worker of this job", rs_proto_type(msg));
		reply_error(j, c, what);
		return;
	}
	member *m = &j->mem.v[i];
	rs_status st;
	switch (type) {
	case RS_MSG_PROGRESS:
		st = on_progress(j, m, msg, &err);
		break;
	case RS_MSG_PAUSED:
		st = on_paused(j, m, msg, &err);
		break;
	case RS_MSG_STAGED:
		st = on_staged(j, m, msg, &err);
		break;
	case RS_MSG_STAGING:
	case RS_MSG_COMMITTED:
	case RS_MSG_TRAINING:
	case RS_MSG_PRECOPIED:
		st = on_generation(j, m, type, msg, &err);
		break;
	case RS_MSG_MIGRATING:
		st = on_migrating(j, i, msg, &err);
		break;
	case RS_MSG_IDLE:
		st = on_idle(j, m, msg, &err);
		break;
	case RS_MSG_LEAVE:
		st = on_leave(j, i, msg, &err);
		break;
	case RS_MSG_DONE:
		st = on_done(j, m, msg, &err);
		break;
	case RS_MSG_CHECKPOINTED:
		st = rs__job_checkpointed(j, i, msg, &err);
		break;
	default:
		st = rs_err_set(&err, RS_EINVAL, "unknown message type '%.64s'", rs_proto_type(msg));
		break;
	}
	if (st != RS_OK && type == RS_MSG_PROGRESS)
		RS_WARN("control: from %s: %s", m->name, err.msg); /* progress is not worth an answer */
	else if (st != RS_OK)
		reply_error(j, c, err.msg[0] ? err.msg : rs_status_str(st));
}
