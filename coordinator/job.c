/*
 * job.c - see job.h.
 *
 * Members are the workers that joined (tools such as rowshiftctl join too,
 * but have no transport address and never become members). Each member
 * keeps what it last reported; the phase logic in rs_job_tick only reads
 * those reports, so the same code runs a fresh job and a recovered one,
 * whose members report again as they rejoin.
 */
#include "coordinator/job_internal.h"
#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/plan.h"
#include "common/plandiff.h"
#include "common/planner.h"
#include "common/proto.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const rs__phase_names[] = {"starting", "training", "paused", "migrating",
				       "committing", "aborting", "done", "failed"};

/* ---- helpers ----------------------------------------------------------------- */

static void set_phase(rs_job *j, phase p)
{
	if (j->ph != p)
		RS_DEBUG("phase %s -> %s", rs__phase_names[j->ph], rs__phase_names[p]);
	if (p == P_TRAINING)
		j->pausing = 0;
	int changed_phase = j->ph != p;
	j->ph = p;
	j->ph_at = rs_now();
	if (!changed_phase)
		return;
	json_t *ev = json_pack("{s:s, s:s, s:I, s:I, s:i}", "type", "phase", "phase", rs__phase_names[p], "generation",
			       (json_int_t)j->generation, "step", (json_int_t)rs__job_step(j), "world", (int)j->nworld);
	if (ev && j->agen && (p == P_MIGRATING || p == P_COMMITTING || p == P_ABORTING)) {
		json_object_set_new(ev, "attempt", json_integer(j->agen));
		json_object_set_new(ev, "to", json_integer(j->aworld));
	}
	if (ev && p == P_FAILED)
		json_object_set_new(ev, "error", json_string(j->why));
	rs__job_publish(j, ev);
}

/* Tell the status stream about a member: joined, draining, lost or left. */
static void member_event(rs_job *j, const char *name, const char *event, const char *detail)
{
	json_t *ev = json_pack("{s:s, s:s, s:s, s:I}", "type", "member", "event", event, "name", name, "generation",
			       (json_int_t)j->generation);
	if (ev && detail)
		json_object_set_new(ev, "detail", json_string(detail));
	rs__job_publish(j, ev);
}

static void fail(rs_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(rs_job *j, const char *fmt, ...)
{
	va_list ap;
	if (j->ph == P_FAILED)
		return;
	va_start(ap, fmt);
	vsnprintf(j->why, sizeof(j->why), fmt, ap);
	va_end(ap);
	RS_ERROR("%s", j->why);
	set_phase(j, P_FAILED);
	if (j->src.ending)
		j->src.ending(j->src.ctx);
}

static int find(const rs_job *j, const char *name)
{
	for (size_t i = 0; i < j->nm; i++)
		if (!strcmp(j->m[i].name, name))
			return (int)i;
	return -1;
}

static int add_member(rs_job *j, const char *name)
{
	int i = find(j, name);
	if (i >= 0)
		return i;
	if (j->nm >= MAX_MEMBERS || rs_grow(&j->m, &j->cap, j->nm + 1, sizeof(*j->m)) != RS_OK)
		return -1;
	member *m = &j->m[j->nm];
	memset(m, 0, sizeof(*m));
	m->paused_sum = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	m->staged_sum = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	if (!m->paused_sum || !m->staged_sum) {
		free(m->paused_sum);
		free(m->staged_sum);
		return -1;
	}
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->away_since = rs_now();
	return (int)j->nm++;
}

static int in_world(const rs_job *j, int i)
{
	for (int32_t r = 0; r < j->nworld; r++)
		if (j->world[r] == i)
			return 1;
	return 0;
}

static int in_union(const rs_job *j, int i)
{
	for (int32_t u = 0; u < j->nuni; u++)
		if (j->uni[u] == i)
			return 1;
	return 0;
}

/* The ordinal of "worker-K" (or any NAME-K), for ordering joiners; large when there is none. */
static long ordinal(const char *name)
{
	const char *dash = strrchr(name, '-');
	char *end;
	long k = dash ? strtol(dash + 1, &end, 10) : -1;
	return dash && dash[1] && !*end && k >= 0 ? k : 1L << 30;
}

/*
 * Gone for good: its process exited, or it stayed disconnected longer than
 * the timeout (a restarting coordinator's workers get that long to rejoin).
 */
static int gone(const rs_job *j, const member *m)
{
	return m->exited || m->replaced || (!m->conn && rs_now() - m->away_since > j->o.timeout_ms / 1000.0);
}

static void send_to(rs_job *j, member *m, json_t *msg)
{
	(void)j;
	if (m->conn && msg && rs_server_send(m->conn, msg) != RS_OK)
		RS_WARN("control: cannot queue a message to %s", m->name);
}

/* Where a run starting at `step` stops: the next schedule step after it, or the end. */
static int64_t bound_after(const rs_job *j, int64_t step)
{
	for (int k = j->next_sched; k < j->o.nsched; k++)
		if (j->o.sched_step[k] > step)
			return j->o.sched_step[k] < j->o.steps ? j->o.sched_step[k] : j->o.steps;
	return j->o.steps;
}

static void log_json(rs_job *j, json_t *line)
{
	if (j->o.log_json && line && json_dumpf(line, j->o.log_json, JSON_COMPACT) == 0) {
		fputc('\n', j->o.log_json);
		fflush(j->o.log_json);
	}
	json_decref(line);
}

/* Table names whose rows member i holds in the current plan, for messages. */
static void tables_of(const rs_job *j, int i, char *buf, size_t n)
{
	int32_t rank = -1;
	size_t len = 0;
	buf[0] = 0;
	for (int32_t r = 0; r < j->nworld; r++)
		if (j->world[r] == i)
			rank = r;
	for (int t = 0; j->plan && rank >= 0 && t < j->plan->ntables && len + 1 < n; t++)
		for (int k = 0; k < j->plan->tables[t].nshards; k++)
			if (j->plan->tables[t].shards[k].rank == rank) {
				len += (size_t)snprintf(buf + len, n - len, "%s'%s'", len ? ", " : "", j->plan->tables[t].name);
				break;
			}
	if (len >= n)
		buf[n - 1] = 0;
}

/* ---- persistence ------------------------------------------------------------------ */

static json_t *plan_json(const rs_plan *p) { return p ? rs_plan_to_json(p) : NULL; }

/* Persist the job as it stands; a failure to persist fails the job (a restart could not resolve it). */
static int persist(rs_job *j, rs_state_phase ph)
{
	if (!j->o.state_path && !j->o.save_state)
		return 1;
	rs_state s = {.phase = ph, .generation = j->generation, .step = j->step, .bound = j->bound,
		      .attempts = j->attempts, .next_schedule = j->next_sched, .steps = j->o.steps,
		      .replicas = j->src.replicas ? j->src.replicas(j->src.ctx) : 0, .nsched = j->o.nsched};
	const char *wnames[MAX_MEMBERS];
	int64_t pids[MAX_MEMBERS];
	rs_state_worker workers[MAX_MEMBERS];
	char *world[MAX_MEMBERS], *uni[MAX_MEMBERS];
	rs_err err = {0};
	s.config = (char *)j->o.config_path, s.save = (char *)j->o.save, s.url = (char *)j->o.url;
	s.token = (char *)j->o.token;
	memcpy(s.sched_step, j->o.sched_step, sizeof(s.sched_step));
	memcpy(s.sched_workers, j->o.sched_workers, sizeof(s.sched_workers));
	s.plan = plan_json(j->plan);
	for (int32_t r = 0; r < j->nworld; r++)
		world[r] = j->m[j->world[r]].name;
	s.world = world, s.nworld = j->nworld;
	if (ph == RS_STATE_MIGRATING || ph == RS_STATE_COMMITTING) {
		s.attempt_generation = j->agen;
		s.attempt_plan = plan_json(j->aplan);
		for (int32_t u = 0; u < j->nuni; u++)
			uni[u] = j->m[j->uni[u]].name;
		s.uni = uni, s.nuni = j->nuni, s.attempt_world = j->aworld;
		s.union_of_old = j->union_of_old;
		s.before = j->before, s.nbefore = j->ntables;
	}
	int n = j->src.list ? j->src.list(j->src.ctx, wnames, pids, MAX_MEMBERS) : 0;
	for (int i = 0; i < n && i < MAX_MEMBERS; i++)
		workers[i] = (rs_state_worker){(char *)wnames[i], pids[i]};
	s.workers = workers, s.nworkers = n < MAX_MEMBERS ? n : MAX_MEMBERS;
	rs_status st = !s.plan || (s.attempt_generation && !s.attempt_plan) ? RS_ENOMEM
		       : j->o.save_state ? j->o.save_state(j->o.save_ctx, &s, &err)
					 : rs_state_write(j->o.state_path, &s, &err);
	json_decref(s.plan);
	json_decref(s.attempt_plan);
	if (st != RS_OK) {
		fail(j, "cannot persist the job's state: %s", err.msg[0] ? err.msg : rs_status_str(st));
		return 0;
	}
	return 1;
}

/* ---- membership ---------------------------------------------------------------------- */

/*
 * The members the next world should have: the current world's members that
 * stay (wanted, not leaving, not gone), in rank order, then the wanted idle
 * joiners by ordinal. Returns the count; *pending gets how many wanted
 * workers have not joined (or not said where they listen) yet.
 */
static int32_t candidates(const rs_job *j, int32_t *out, int *pending)
{
	int32_t n = 0;
	int32_t idle[MAX_MEMBERS];
	int nidle = 0, joined_wanted = 0;
	for (int32_t r = 0; r < j->nworld; r++) {
		const member *m = &j->m[j->world[r]];
		int stays = !m->leaving && !gone(j, m) && (!j->src.wanted || j->src.wanted(j->src.ctx, m->name));
		if (stays)
			out[n++] = j->world[r];
	}
	for (size_t i = 0; i < j->nm; i++) {
		const member *m = &j->m[i];
		if (in_world(j, (int)i) || m->leaving || gone(j, m))
			continue;
		if (j->src.wanted && !j->src.wanted(j->src.ctx, m->name))
			continue;
		if (m->st == M_IDLE && m->conn && m->addr[0] && nidle < MAX_MEMBERS)
			idle[nidle++] = (int32_t)i;
	}
	/* joiners by ordinal: worker-2 before worker-10 */
	for (int a = 1; a < nidle; a++)
		for (int b = a; b > 0 && ordinal(j->m[idle[b]].name) < ordinal(j->m[idle[b - 1]].name); b--) {
			int32_t t = idle[b];
			idle[b] = idle[b - 1];
			idle[b - 1] = t;
		}
	for (int a = 0; a < nidle; a++)
		out[n++] = idle[a];
	joined_wanted = n;
	int32_t want = j->src.replicas ? j->src.replicas(j->src.ctx) : n;
	/* leaving members are not replaced by waiting: they are wanted, but on their way out */
	int leaving_wanted = 0;
	for (size_t i = 0; i < j->nm; i++)
		leaving_wanted += j->m[i].leaving && !gone(j, &j->m[i]) && j->src.wanted &&
				  j->src.wanted(j->src.ctx, j->m[i].name);
	*pending = want - leaving_wanted - joined_wanted > 0 ? want - leaving_wanted - joined_wanted : 0;
	return n;
}

static int same_world(const rs_job *j, const int32_t *c, int32_t n)
{
	if (n != j->nworld)
		return 0;
	for (int32_t r = 0; r < n; r++)
		if (c[r] != j->world[r])
			return 0;
	return 1;
}

/*
 * While training, a change is ready to act on once it is quiet: nobody it
 * waits for is pending and nothing changed for a tenth of the debounce (so
 * that leaves or joins arriving together make one reshard), or nothing
 * changed for the whole debounce (stragglers are left for a later reshard).
 */
static int change_ready(rs_job *j, int32_t *c, int32_t *nc)
{
	int pending;
	double quiet = rs_now() - j->last_change, debounce = j->o.debounce_ms / 1000.0;
	*nc = candidates(j, c, &pending);
	if (*nc == 0 || same_world(j, c, *nc))
		return 0;
	return (pending == 0 && quiet >= debounce / 10) || quiet >= debounce;
}

static void changed(rs_job *j) { j->last_change = rs_now(); }

/* ---- the cycle ------------------------------------------------------------------------- */

static void send_world(rs_job *j, json_t *msg)
{
	for (int32_t r = 0; r < j->nworld; r++)
		send_to(j, &j->m[j->world[r]], msg);
	json_decref(msg);
}

static json_t *start_msg(const rs_job *j, int64_t gen, int32_t rank, int32_t world, const int32_t *uni, int32_t nuni,
			 json_t *jplan, json_t *jprev, int64_t first, int64_t bound)
{
	json_t *peers = json_array();
	for (int32_t u = 0; peers && u < nuni; u++)
		json_array_append_new(peers, json_string(j->m[uni[u]].addr));
	json_t *msg = json_pack("{s:s, s:I, s:i, s:i, s:i, s:o, s:O, s:I, s:I, s:I, s:I, s:b}", "type", "start",
				"generation", (json_int_t)gen, "rank", (int)rank, "world", (int)world, "union_world",
				(int)nuni, "peers", peers, "plan", jplan, "first_step", (json_int_t)first, "steps",
				(json_int_t)bound, "eval_every", (json_int_t)j->cfg->data.eval_every, "eval_samples",
				(json_int_t)j->cfg->data.eval_samples, "last", bound >= j->o.steps);
	if (msg && jprev) {
		json_t *uoo = json_array();
		for (int32_t r = 0; uoo && r < j->nworld; r++)
			json_array_append_new(uoo, json_integer(j->union_of_old[r]));
		json_object_set(msg, "previous_plan", jprev);
		json_object_set_new(msg, "union_of_old", uoo);
	}
	if (msg && j->o.save)
		json_object_set_new(msg, "save", json_string(j->o.save));
	return msg;
}

/* Generation 1 over the joined workers. */
static void start_first(rs_job *j, const int32_t *c, int32_t n)
{
	rs_err err = {0};
	rs_world w = rs_world_make(j->cfg, n, 0, 0, 0);
	if (rs_planner_plan(j->cfg, &w, NULL, NULL, &j->plan, &err) != RS_OK) {
		fail(j, "planning %d workers: %s", n, err.msg);
		return;
	}
	j->world = malloc(sizeof(int32_t) * (size_t)n);
	if (!j->world) {
		fail(j, "out of memory");
		return;
	}
	memcpy(j->world, c, sizeof(int32_t) * (size_t)n);
	j->nworld = n;
	j->generation = j->last_gen = 1;
	j->step = j->o.load ? j->o.load_step : 0;
	j->bound = bound_after(j, j->step);
	if (!persist(j, RS_STATE_TRAINING))
		return;
	json_t *jp = rs_plan_to_json(j->plan);
	for (int32_t r = 0; jp && r < n; r++) {
		json_t *msg = start_msg(j, 1, r, n, j->world, n, jp, NULL, j->step, j->bound);
		if (msg && j->o.load)
			json_object_set_new(msg, "load", json_string(j->o.load));
		send_to(j, &j->m[c[r]], msg);
		json_decref(msg);
	}
	json_decref(jp);
	RS_INFO("generation 1: %d workers; plan imbalance %.3f", n, j->plan->summary.imbalance);
	rs__job_publish(j, rs__job_snapshot(j));
	j->pause_sent = 0;
	set_phase(j, P_TRAINING);
}

static void resume(rs_job *j)
{
	j->bound = bound_after(j, j->step);
	RS_INFO("generation %lld resumes at step %lld (no membership change to act on)", (long long)j->generation,
		(long long)j->step);
	if (!persist(j, RS_STATE_TRAINING))
		return;
	send_world(j, json_pack("{s:s, s:I, s:I, s:b}", "type", "resume", "generation", (json_int_t)j->generation,
				"steps", (json_int_t)j->bound, "last", j->bound >= j->o.steps));
	for (int32_t r = 0; r < j->nworld; r++)
		j->m[j->world[r]].st = M_TRAINING; /* until they report otherwise: their "paused" is stale now */
	j->pause_sent = 0;
	set_phase(j, P_TRAINING);
}

static void free_attempt(rs_job *j)
{
	rs_plan_free(j->aplan);
	free(j->uni);
	free(j->union_of_old);
	free(j->before);
	j->aplan = NULL, j->uni = NULL, j->union_of_old = NULL, j->before = NULL;
	j->nuni = j->aworld = 0;
	j->agen = 0;
}

/* Plan the next generation over the candidates and send every member of the union its part. */
static void begin_attempt(rs_job *j, const int32_t *c, int32_t n)
{
	rs_err err = {0};
	int32_t map[MAX_MEMBERS];
	free_attempt(j);
	j->uni = malloc(sizeof(int32_t) * (size_t)(n + j->nworld));
	j->union_of_old = malloc(sizeof(int32_t) * (size_t)j->nworld + 1);
	j->before = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	if (!j->uni || !j->union_of_old || !j->before) {
		fail(j, "out of memory");
		return;
	}
	/* the union: the new world in rank order, then the members that leave */
	memcpy(j->uni, c, sizeof(int32_t) * (size_t)n);
	j->nuni = n;
	j->aworld = n;
	for (int32_t r = 0; r < j->nworld; r++) {
		int32_t u = -1;
		for (int32_t k = 0; k < n; k++)
			if (c[k] == j->world[r])
				u = k;
		if (u < 0) {
			u = j->nuni;
			j->uni[j->nuni++] = j->world[r];
		}
		j->union_of_old[r] = u;
		map[r] = u < n ? u : -1;
		for (int t = 0; t < j->ntables; t++)
			j->before[t] += j->m[j->world[r]].paused_sum[t];
	}
	double t0 = rs_now();
	rs_world w = rs_world_make(j->cfg, n, 0, 0, 0);
	if (rs_planner_plan(j->cfg, &w, j->plan, map, &j->aplan, &err) != RS_OK) {
		fail(j, "replanning %d -> %d workers: %s", j->nworld, n, err.msg);
		return;
	}
	j->plan_s = rs_now() - t0;
	j->agen = ++j->last_gen;
	rs__job_pairs_reset(j);
	j->abound = bound_after(j, j->step);
	if (!persist(j, RS_STATE_MIGRATING))
		return;
	json_t *jp = rs_plan_to_json(j->aplan), *jprev = rs_plan_to_json(j->plan);
	for (int32_t u = 0; jp && jprev && u < j->nuni; u++) {
		member *m = &j->m[j->uni[u]];
		json_t *msg = start_msg(j, j->agen, u, n, j->uni, j->nuni, jp, jprev, j->step, j->abound);
		if (!m->conn) {
			json_decref(msg);
			break; /* the abort below catches it: it is gone */
		}
		send_to(j, m, msg);
		json_decref(msg);
		m->staged_ok = 0;
		m->st = M_STAGING;
		m->gen = j->agen;
	}
	json_decref(jp);
	json_decref(jprev);
	j->t_attempt = rs_now();
	printf("generation %lld: %d -> %d workers at step %lld; the plan moves %.2f MiB (lower bound %.2f MiB), "
	       "planned in %.1f ms\n",
	       (long long)j->agen, j->nworld, n, (long long)j->step, j->aplan->summary.moved_bytes / 1048576.0,
	       j->aplan->summary.min_moved_bytes / 1048576.0, j->plan_s * 1e3);
	fflush(stdout);
	set_phase(j, P_MIGRATING);
}

static void abort_attempt(rs_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void abort_attempt(rs_job *j, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(j->last_abort, sizeof(j->last_abort), fmt, ap);
	va_end(ap);
	printf("generation %lld aborted: %s; every member keeps generation %lld\n", (long long)j->agen, j->last_abort,
	       (long long)j->generation);
	fflush(stdout);
	log_json(j, json_pack("{s:s, s:I, s:s}", "event", "abort", "generation", (json_int_t)j->agen, "reason",
			      j->last_abort));
	if (!persist(j, RS_STATE_TRAINING))
		return;
	json_t *msg = json_pack("{s:s, s:I, s:s}", "type", "abort", "generation", (json_int_t)j->agen, "reason",
				j->last_abort);
	for (int32_t u = 0; u < j->nuni; u++)
		send_to(j, &j->m[j->uni[u]], msg);
	json_decref(msg);
	j->attempts++;
	j->aborts++;
	set_phase(j, P_ABORTING);
}

/* Bytes the plan diff of the attempt moves (a recovered plan does not carry its summary). */
static uint64_t diff_bytes(const rs_job *j)
{
	int32_t map[MAX_MEMBERS];
	rs_move *mv = NULL;
	int n = 0;
	uint64_t total = 0;
	rs_err err = {0};
	for (int32_t r = 0; r < j->nworld; r++)
		map[r] = j->union_of_old[r] < j->aworld ? j->union_of_old[r] : -1;
	if (rs_plan_diff(j->cfg, j->plan, j->aplan, map, &mv, &n, &err) != RS_OK)
		return 0;
	for (int i = 0; i < n; i++)
		total += mv[i].bytes;
	free(mv);
	return total;
}

/* Every member staged: check that nothing was lost or duplicated, persist the decision, commit. */
static void commit_attempt(rs_job *j)
{
	uint64_t *after = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	uint64_t sent = 0, recv = 0;
	double connect = 0, prepare = 0, move = 0;
	if (!after) {
		abort_attempt(j, "out of memory");
		return;
	}
	for (int32_t u = 0; u < j->nuni; u++) {
		const member *m = &j->m[j->uni[u]];
		for (int t = 0; u < j->aworld && t < j->ntables; t++)
			after[t] += m->staged_sum[t];
		sent += (uint64_t)m->staged.sent_bytes;
		recv += (uint64_t)m->staged.recv_bytes;
		connect = m->staged.connect_s > connect ? m->staged.connect_s : connect;
		prepare = m->staged.copy_s > prepare ? m->staged.copy_s : prepare;
		/* the receivers' rounds: a sender's also include waiting for its receivers to prepare */
		if (m->staged.recv_bytes > 0)
			move = m->staged.move_s > move ? m->staged.move_s : move;
	}
	int bad = -1;
	uint64_t bad_after = 0;
	for (int t = 0; t < j->ntables && bad < 0; t++)
		if (after[t] != j->before[t])
			bad = t, bad_after = after[t];
	free(after);
	if (bad >= 0) {
		abort_attempt(j, "table '%s': the staged rows' checksum %016" PRIx64 " is not the old rows' %016" PRIx64
				 " (rows lost or duplicated)",
			      j->cfg->tables[bad].name, bad_after, j->before[bad]);
		return;
	}
	uint64_t diff = diff_bytes(j);
	if (sent != recv || sent != diff)
		RS_WARN("generation %lld: members sent %" PRIu64 " B and received %" PRIu64 " B; the plan diff is %" PRIu64 " B",
			(long long)j->agen, sent, recv, diff);
	j->t_staged = rs_now();
	j->reshard_moved = sent;
	for (int i = 0; i < j->npairs; i++)
		j->pairs[i].bytes = j->pairs[i].total;
	rs__job_migration_event(j, 1);
	if (!persist(j, RS_STATE_COMMITTING))
		return;
	json_t *msg = json_pack("{s:s, s:I}", "type", "commit", "generation", (json_int_t)j->agen);
	for (int32_t u = 0; u < j->nuni; u++)
		send_to(j, &j->m[j->uni[u]], msg);
	json_decref(msg);
	double mib = sent / 1048576.0, migrate = j->t_staged - j->t_attempt;
	printf("generation %lld: staged and verified: moved %.2f MiB (%" PRIu64 " B; the plan diff: %" PRIu64 " B) in %.3f s "
	       "(connect %.3f s, prepare %.3f s, move %.3f s at %.0f MiB/s); every table's checksum matches\n",
	       (long long)j->agen, mib, sent, diff, migrate, connect, prepare, move, move > 0 ? mib / move : 0.0);
	fflush(stdout);
	set_phase(j, P_COMMITTING);
}

/* Every member took the commit: the attempt is the generation now. */
static void install_attempt(rs_job *j)
{
	int32_t from = j->nworld, to = j->aworld;
	j->reshard_from = from;
	rs_plan_free(j->plan);
	j->plan = j->aplan;
	j->aplan = NULL;
	int32_t *w = realloc(j->world, sizeof(int32_t) * (size_t)j->aworld);
	if (!w) {
		fail(j, "out of memory");
		return;
	}
	memcpy(w, j->uni, sizeof(int32_t) * (size_t)j->aworld);
	j->world = w;
	j->nworld = j->aworld;
	j->generation = j->agen;
	j->bound = j->abound;
	free_attempt(j);
	j->attempts = 0;
	j->pause_sent = 0;
	j->t_committed = rs_now();
	j->resume_step = j->step;
	j->reshards++;
	if (!persist(j, RS_STATE_TRAINING))
		return;
	rs__job_publish(j, rs__job_snapshot(j)); /* a new world and plan: status clients start over from it */
	double drain = j->t_paused - j->t_first_paused, wait = j->t_attempt - j->t_paused - j->plan_s;
	printf("generation %lld committed: %d -> %d workers; so far: drain %.3f s, waiting for members %.3f s, "
	       "plan %.3f s, migrate %.3f s, commit %.3f s\n",
	       (long long)j->generation, from, to, drain, wait > 0 ? wait : 0, j->plan_s, j->t_staged - j->t_attempt,
	       j->t_committed - j->t_staged);
	fflush(stdout);
	set_phase(j, P_TRAINING);
}

/* The world member at rank r died or vanished without handing its rows over. */
static void lost_rows(rs_job *j, int i)
{
	char tables[256];
	tables_of(j, i, tables, sizeof(tables));
	int64_t step = j->m[i].step > j->step ? j->m[i].step : j->step;
	fail(j, "%s was lost holding the only copy of rows of %s (generation %lld, near step %lld): restart the "
		"job from a checkpoint (recovery from replicas or checkpoints is not built yet)",
	     j->m[i].name, tables[0] ? tables : "its tables", (long long)j->generation, (long long)step);
}

static void tick_training(rs_job *j)
{
	int32_t c[MAX_MEMBERS], nc;
	int all_done = 1, all_paused = 1;
	for (int32_t r = 0; r < j->nworld; r++) {
		const member *m = &j->m[j->world[r]];
		all_done &= m->st == M_DONE;
		all_paused &= m->st == M_PAUSED && m->gen == j->generation;
	}
	if (all_done) {
		if (j->src.ending)
			j->src.ending(j->src.ctx);
		persist(j, RS_STATE_DONE);
		printf("training done: %d workers, %lld steps, %lld generation(s), %d reshard(s)\n", j->nworld,
		       (long long)j->o.steps, (long long)j->generation, j->reshards);
		fflush(stdout);
		set_phase(j, P_DONE);
		return;
	}
	if (all_paused) {
		j->t_paused = rs_now();
		j->step = j->m[j->world[0]].step;
		set_phase(j, P_PAUSED);
		return;
	}
	if (!j->pause_sent && change_ready(j, c, &nc)) {
		RS_INFO("membership change: %d -> %d workers; pausing at the next step boundary", j->nworld, nc);
		send_world(j, json_pack("{s:s}", "type", "pause"));
		j->pause_sent = 1;
	}
}

static void tick_paused(rs_job *j)
{
	int32_t c[MAX_MEMBERS], nc;
	int pending;
	if (j->step >= j->o.steps) {
		resume(j); /* a run that ended exactly at the end: let the workers finish */
		return;
	}
	if (j->next_sched < j->o.nsched && j->o.sched_step[j->next_sched] == j->step) {
		int32_t n = j->o.sched_workers[j->next_sched++];
		rs_err err = {0};
		printf("schedule: at step %lld, scale to %d workers\n", (long long)j->step, n);
		fflush(stdout);
		if (j->src.scale && j->src.scale(j->src.ctx, n, &err) != RS_OK) {
			fail(j, "schedule: %s", err.msg);
			return;
		}
		j->scale_at = rs_now();
		changed(j);
		return;
	}
	nc = candidates(j, c, &pending);
	if (nc == 0) {
		if (rs_now() - j->ph_at > j->o.timeout_ms / 1000.0)
			fail(j, "no worker left to hold the rows at step %lld", (long long)j->step);
		return; /* every member is leaving or gone: wait for replacements */
	}
	/* paused, waiting costs training time: only for joiners on their way, at most the debounce */
	double waited = rs_now() - (j->last_change > j->ph_at ? j->last_change : j->ph_at);
	int settled = pending == 0 || waited >= j->o.debounce_ms / 1000.0;
	if (same_world(j, c, nc)) {
		if (settled)
			resume(j);
		return;
	}
	if (settled) {
		if (j->attempts >= j->o.max_attempts) {
			fail(j, "gave up after %d aborted reshard attempts in a row; the last: %s", j->attempts, j->last_abort);
			return;
		}
		begin_attempt(j, c, nc);
	}
}

static void tick_migrating(rs_job *j)
{
	int all = 1;
	for (int32_t u = 0; u < j->nuni; u++) {
		member *m = &j->m[j->uni[u]];
		if (gone(j, m)) {
			if (u >= j->aworld || in_world(j, j->uni[u])) {
				lost_rows(j, j->uni[u]); /* an old member: its rows are gone */
				return;
			}
			abort_attempt(j, "%s (joining) was lost during the migration", m->name);
			return;
		}
		if (m->st == M_STAGED && m->gen == j->agen && !m->staged_ok) {
			abort_attempt(j, "%s: %s", m->name, m->staged_why);
			return;
		}
		if ((m->st == M_PAUSED || m->st == M_TRAINING || m->st == M_IDLE) && m->gen != j->agen) {
			abort_attempt(j, "%s never started staging generation %lld", m->name, (long long)j->agen);
			return;
		}
		all &= m->st == M_STAGED && m->gen == j->agen;
	}
	if (all) {
		commit_attempt(j);
		return;
	}
	if (rs_now() - j->ph_at > 4 * (j->o.timeout_ms / 1000.0))
		abort_attempt(j, "not every member staged within %d ms", 4 * j->o.timeout_ms);
}

static void tick_committing(rs_job *j)
{
	int all = 1;
	for (int32_t u = 0; u < j->nuni; u++) {
		member *m = &j->m[j->uni[u]];
		int took = (m->st == M_COMMITTED || m->st == M_TRAINING || m->st == M_PAUSED || m->st == M_DONE) &&
			   m->gen == j->agen;
		if (u >= j->aworld) /* a leaver: it exits once committed */
			took |= m->exited && m->st == M_STAGED;
		else if (gone(j, m) && !took) {
			fail(j, "%s was lost right after the commit of generation %lld, holding the only copy of its rows",
			     m->name, (long long)j->agen);
			return;
		}
		all &= took;
	}
	if (all)
		install_attempt(j);
	else if (rs_now() - j->ph_at > 4 * (j->o.timeout_ms / 1000.0))
		fail(j, "members did not confirm the commit of generation %lld within %d ms", (long long)j->agen,
		     4 * j->o.timeout_ms);
}

static void tick_aborting(rs_job *j)
{
	int all = 1;
	for (int32_t r = 0; r < j->nworld; r++) {
		member *m = &j->m[j->world[r]];
		if (gone(j, m)) {
			lost_rows(j, j->world[r]);
			return;
		}
		all &= m->st == M_PAUSED && m->gen == j->generation;
	}
	if (!all) {
		if (rs_now() - j->ph_at > 4 * (j->o.timeout_ms / 1000.0))
			fail(j, "the members did not return to generation %lld after the abort", (long long)j->generation);
		return;
	}
	free_attempt(j);
	changed(j); /* the next attempt plans from what is there now */
	set_phase(j, P_PAUSED);
}

static void tick_starting(rs_job *j)
{
	int32_t c[MAX_MEMBERS], nc;
	int pending;
	if (j->initial) {
		rs_err err = {0};
		if (j->src.scale && j->src.scale(j->src.ctx, j->initial, &err) != RS_OK) {
			fail(j, "starting %d workers: %s", j->initial, err.msg);
			return;
		}
		j->initial = 0;
		j->ph_at = j->t_started = rs_now();
	}
	nc = candidates(j, c, &pending);
	if (nc > 0 && pending == 0) {
		start_first(j, c, nc);
		return;
	}
	if (rs_now() - j->ph_at > j->o.timeout_ms / 1000.0)
		fail(j, "waiting for the workers to join: %d of %d after %d ms", nc, nc + pending, j->o.timeout_ms);
}

void rs_job_tick(rs_job *j)
{
	/*
	 * A world member that is gone without handing its rows over: nothing can
	 * bring them back here. When several went at once (peers fail right
	 * after a member dies), name one killed by a signal: the likely cause.
	 */
	if (j->ph == P_TRAINING || j->ph == P_PAUSED) {
		int lost = -1;
		for (int32_t r = 0; r < j->nworld; r++) {
			const member *m = &j->m[j->world[r]];
			if (gone(j, m) && m->st != M_DONE && (lost < 0 || (m->killed && !j->m[lost].killed)))
				lost = j->world[r];
		}
		/* peers of a dead member fail within milliseconds: give the first cause a moment to surface */
		if (lost >= 0 && !j->loss_seen_at)
			j->loss_seen_at = rs_now();
		if (lost >= 0 && (j->m[lost].killed || rs_now() - j->loss_seen_at > 0.5)) {
			lost_rows(j, lost);
			return;
		}
	}
	switch (j->ph) {
	case P_STARTING:
		tick_starting(j);
		break;
	case P_TRAINING:
		tick_training(j);
		break;
	case P_PAUSED:
		tick_paused(j);
		break;
	case P_MIGRATING:
		tick_migrating(j);
		break;
	case P_COMMITTING:
		tick_committing(j);
		break;
	case P_ABORTING:
		tick_aborting(j);
		break;
	case P_DONE:
	case P_FAILED:
		break;
	}
}

/* ---- the control channel ------------------------------------------------------------ */

static void on_join(void *ctx, rs_conn *c, const rs_msg_join *jm)
{
	rs_job *j = ctx;
	const char *worker = jm->worker, *addr = jm->addr;
	int64_t pid = jm->pid;
	if (!addr[0])
		return; /* a tool (rowshiftctl), not a worker */
	int i = find(j, worker);
	if (i < 0 && (i = add_member(j, worker)) < 0) {
		RS_ERROR("control: no room for worker %s", worker);
		return;
	}
	member *m = &j->m[i];
	int holds = in_world(j, i) || in_union(j, i);
	/* the same process rejoining carries the same incarnation (and pid); a restarted pod has a new one */
	int fresh = jm->incarnation[0] ? m->incarnation[0] && strcmp(m->incarnation, jm->incarnation) != 0
				       : m->pid && pid != m->pid;
	if (fresh) {
		/* a new process under an old name (a restarted pod): a fresh worker, whatever the old one held */
		int lost = in_world(j, i) || (j->ph == P_COMMITTING && in_union(j, i));
		if (lost && !m->replaced)
			RS_WARN("%s came back as a new process", worker);
		m->replaced = lost;
		m->st = M_IDLE, m->gen = 0, m->leaving = 0;
		holds = lost;
	}
	m->pid = pid;
	snprintf(m->incarnation, sizeof(m->incarnation), "%s", jm->incarnation);
	m->conn = c;
	m->away_since = 0;
	m->exited = 0;
	if (m->st == M_UNKNOWN && !holds)
		m->st = M_IDLE; /* a fresh worker says nothing more until it is given work */
	snprintf(m->addr, sizeof(m->addr), "%s", addr);
	if (j->src.joined)
		j->src.joined(j->src.ctx, worker, pid);
	if (!holds)
		changed(j);
	RS_INFO("%s joined (transport at %s)", worker, addr);
	member_event(j, worker, "joined", NULL);
}

/* Answer a bad message with an error; the connection stays. */
static void reply_error(rs_conn *c, const char *what)
{
	RS_WARN("control: from %s: %s", rs_conn_worker(c), what);
	json_t *e = json_pack("{s:s, s:s}", "type", "error", "reason", what);
	if (e)
		rs_server_send(c, e);
	json_decref(e);
}

static void on_close(void *ctx, rs_conn *c)
{
	rs_job *j = ctx;
	for (size_t i = 0; i < j->nm; i++)
		if (j->m[i].conn == c) {
			j->m[i].conn = NULL;
			j->m[i].away_since = rs_now();
			if (j->m[i].st != M_DONE)
				RS_INFO("%s disconnected", j->m[i].name);
			if (!in_world(j, (int)i))
				changed(j);
		}
}

static void on_scale(rs_job *j, rs_conn *c, json_t *msg)
{
	json_int_t n = 0;
	json_error_t jerr;
	const char *type;
	rs_err err = {0};
	json_t *reply;
	if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I}", "type", &type, "workers", &n) != 0 || n < 1 ||
	    n > MAX_MEMBERS) {
		reply = json_pack("{s:s, s:s}", "type", "error", "reason", "scale needs \"workers\": 1..4096");
	} else if (j->ph == P_DONE || j->ph == P_FAILED || !j->src.scale) {
		reply = json_pack("{s:s, s:s}", "type", "error", "reason", "the job is not running");
	} else if (j->src.scale(j->src.ctx, (int32_t)n, &err) != RS_OK) {
		reply = json_pack("{s:s, s:s}", "type", "error", "reason", err.msg);
	} else {
		RS_INFO("%s asks for %lld workers", rs_conn_worker(c), (long long)n);
		j->scale_at = rs_now();
		changed(j);
		persist(j, j->ph == P_MIGRATING ? RS_STATE_MIGRATING : j->ph == P_COMMITTING ? RS_STATE_COMMITTING
											  : RS_STATE_TRAINING);
		reply = json_pack("{s:s, s:I}", "type", "scaling", "workers", n);
	}
	if (reply)
		rs_server_send(c, reply);
	json_decref(reply);
}

static void on_progress(rs_job *j, member *m, json_t *msg)
{
	rs_msg_progress pr;
	rs_err err = {0};
	if (rs_proto_progress(msg, &pr, &err) != RS_OK) {
		RS_WARN("control: from %s: %s", m->name, err.msg);
		return;
	}
	m->step = pr.step + 1;
	m->samples_per_s = pr.samples_per_s;
	if (pr.rank != 0 || j->nworld == 0 || &j->m[j->world[0]] != m)
		return; /* rank 0 speaks for the job: every rank reports the same loss */
	rs__job_progress(j, pr.step + 1, pr.loss, pr.auc, pr.samples_per_s);
	if (j->t_started > 0) {
		printf("generation 1 made its first step %.3f s after its %d workers were started (start, join, plan, %s"
		       "first step)\n", rs_now() - j->t_started, j->nworld, j->o.load ? "load, " : "");
		j->t_started = 0;
	}
	if (j->resume_step >= 0 && pr.step >= j->resume_step) {
		double now = rs_now();
		printf("generation %lld resumed at step %lld: paused %.3f s for the reshard", (long long)j->generation,
		       (long long)j->resume_step, now - j->t_first_paused);
		if (j->scale_at > 0)
			printf(" (%.3f s from the scale request)", now - j->scale_at);
		printf("\n");
		log_json(j, json_pack("{s:s, s:I, s:I, s:i, s:f, s:f, s:f, s:f, s:f}", "event", "reshard", "generation",
				      (json_int_t)j->generation, "step", (json_int_t)j->resume_step, "workers",
				      (int)j->nworld, "pause_s", now - j->t_first_paused, "plan_s", j->plan_s,
				      "migrate_s", j->t_staged - j->t_attempt, "commit_s", j->t_committed - j->t_staged,
				      "resume_s", now - j->t_committed));
		reshard_record rec = {j->generation, j->resume_step, j->reshard_from, j->nworld, now - j->t_first_paused,
				      j->t_staged - j->t_attempt, j->reshard_moved};
		rs__job_reshard(j, &rec);
		if (j->src.resharded) {
			char words[256];
			snprintf(words, sizeof(words), "Resharded generation %lld: %d -> %d workers, moved %.2f MiB in %.2f s "
				 "(paused %.2f s)", (long long)j->generation, rec.from, rec.to, rec.moved_bytes / 1048576.0,
				 rec.migrate_s, rec.pause_s);
			j->src.resharded(j->src.ctx, words);
		}
		j->resume_step = -1;
		j->scale_at = 0;
	}
	if (pr.teacher_auc >= 0)
		printf("teacher AUC on the held-out samples (the ceiling): %.4f\n", pr.teacher_auc);
	if (pr.auc >= 0)
		printf("step %5lld  loss %.5f  auc %.4f  %8.0f samples/s\n", (long long)pr.step + 1, pr.loss, pr.auc,
		       pr.samples_per_s);
	else
		printf("step %5lld  loss %.5f              %8.0f samples/s\n", (long long)pr.step + 1, pr.loss,
		       pr.samples_per_s);
	fflush(stdout);
	json_t *line = json_pack("{s:I, s:I, s:f, s:f}", "generation", (json_int_t)j->generation, "step",
				 (json_int_t)(pr.step + 1), "loss", pr.loss, "samples_per_s", pr.samples_per_s);
	if (line && pr.auc >= 0)
		json_object_set_new(line, "auc", json_real(pr.auc));
	log_json(j, line);
}

static void on_message(void *ctx, rs_conn *c, json_t *msg)
{
	rs_job *j = ctx;
	const char *type = rs_proto_type(msg);
	rs_err err = {0};
	if (!strcmp(type, "scale")) {
		on_scale(j, c, msg);
		return;
	}
	int i = -1;
	for (size_t k = 0; k < j->nm; k++)
		if (j->m[k].conn == c)
			i = (int)k;
	if (i < 0) {
		RS_WARN("control: '%s' from %s, which is not a worker of this job", type, rs_conn_worker(c));
		return;
	}
	member *m = &j->m[i];
	if (!strcmp(type, "progress")) {
		on_progress(j, m, msg);
	} else if (!strcmp(type, "paused")) {
		rs_msg_paused pa;
		if (rs_proto_paused(msg, &pa, &err) != RS_OK ||
		    (pa.checksum && rs_proto_checksums(pa.checksum, m->paused_sum, j->ntables, &err) != RS_OK))
			goto bad;
		if (j->ph == P_TRAINING && !j->pausing) {
			j->t_first_paused = rs_now();
			j->pausing = 1;
		}
		m->st = M_PAUSED, m->gen = pa.generation, m->step = pa.step;
		snprintf(m->addr, sizeof(m->addr), "%s", pa.addr);
	} else if (!strcmp(type, "staged")) {
		rs_msg_staged s;
		if (rs_proto_staged(msg, &s, &err) != RS_OK)
			goto bad;
		memset(m->staged_sum, 0, sizeof(uint64_t) * (size_t)j->ntables);
		if (s.checksum && rs_proto_checksums(s.checksum, m->staged_sum, j->ntables, &err) != RS_OK)
			goto bad;
		m->st = M_STAGED, m->gen = s.generation, m->staged_ok = s.ok;
		snprintf(m->staged_why, sizeof(m->staged_why), "%s", s.reason ? s.reason : "");
		m->staged = s;
		m->staged.reason = NULL, m->staged.checksum = NULL;
		if (s.generation != j->agen || !(j->ph == P_MIGRATING || j->ph == P_COMMITTING)) {
			/* staged for an attempt this coordinator did not decide: it cannot be committed */
			send_to(j, m, json_pack("{s:s, s:I, s:s}", "type", "abort", "generation", (json_int_t)s.generation,
						"reason", "that attempt is over"));
		} else if (j->ph == P_COMMITTING && s.ok) {
			/* a restarted coordinator repeats the commit it had decided */
			send_to(j, m, json_pack("{s:s, s:I}", "type", "commit", "generation", (json_int_t)j->agen));
		}
	} else if (!strcmp(type, "staging") || !strcmp(type, "committed") || !strcmp(type, "training")) {
		int64_t gen, step;
		if (rs_proto_generation(msg, &gen, &step, NULL, &err) != RS_OK)
			goto bad;
		m->st = !strcmp(type, "staging") ? M_STAGING : !strcmp(type, "committed") ? M_COMMITTED : M_TRAINING;
		m->gen = gen;
		if (step >= 0)
			m->step = step;
	} else if (!strcmp(type, "migrating")) {
		int64_t gen;
		json_t *sent;
		if (rs_proto_migrating(msg, &gen, &sent, &err) != RS_OK)
			goto bad;
		int32_t src = -1;
		for (int32_t u = 0; u < j->nuni; u++)
			if (j->uni[u] == i)
				src = u;
		for (size_t k = 0; gen == j->agen && src >= 0 && k < json_array_size(sent); k++) {
			json_t *e = json_array_get(sent, k);
			int32_t dst = (int32_t)json_integer_value(json_array_get(e, 0));
			for (int p = 0; p < j->npairs; p++)
				if (j->pairs[p].src == src && j->pairs[p].dst == dst)
					j->pairs[p].bytes = (uint64_t)json_integer_value(json_array_get(e, 1));
		}
		if (gen == j->agen)
			rs__job_migration_event(j, 0);
	} else if (!strcmp(type, "idle")) {
		const char *addr;
		if (rs_proto_idle(msg, &addr, &err) != RS_OK)
			goto bad;
		m->st = M_IDLE;
		m->gen = 0;
		snprintf(m->addr, sizeof(m->addr), "%s", addr);
		changed(j);
	} else if (!strcmp(type, "leave")) {
		if (rs_proto_generation(msg, NULL, NULL, NULL, &err) != RS_OK)
			goto bad;
		if (!m->leaving)
			RS_INFO("%s asks to leave (%s)", m->name, in_world(j, i) ? "its rows will be drained first" : "it holds no rows");
		if (!m->leaving)
			member_event(j, m->name, "draining", in_world(j, i) ? "its rows will be drained first" : "holds no rows");
		m->leaving = 1;
		changed(j);
		if (!in_world(j, i) && j->ph != P_MIGRATING && j->ph != P_COMMITTING)
			send_to(j, m, json_pack("{s:s}", "type", "stop"));
	} else if (!strcmp(type, "done")) {
		m->st = M_DONE;
		if (j->src.ending)
			j->src.ending(j->src.ctx);
	} else {
		char what[128];
		snprintf(what, sizeof(what), "unknown message type '%.64s'", type);
		reply_error(c, what);
	}
	return;
bad:
	reply_error(c, err.msg);
}

static json_t *status_snapshot(void *ctx) { return rs__job_snapshot(ctx); }

void rs_job_set_server(rs_job *j, rs_server *srv) { j->srv = srv; }

rs_server_handler rs_job_server_handler(rs_job *j)
{
	return (rs_server_handler){.ctx = j, .on_join = on_join, .on_message = on_message, .on_close = on_close,
				   .status_snapshot = status_snapshot, .http_get = rs__job_http_get};
}

void rs_job_changed(rs_job *j) { changed(j); }

void rs_job_exited(rs_job *j, const char *name, int clean, const char *how)
{
	int i = find(j, name);
	if (i < 0) {
		if (!clean)
			RS_WARN("%s %s before it joined", name, how);
		return;
	}
	member *m = &j->m[i];
	m->exited = 1;
	m->killed = clean == 0 && strstr(how, "signal") != NULL;
	int left = clean == 1 || m->st == M_DONE;
	member_event(j, name, left ? "left" : "lost", how);
	if (m->st != M_DONE && !(m->st == M_COMMITTED && !in_world(j, i)))
		RS_INFO("%s %s", name, how);
	if (!in_world(j, i))
		changed(j);
}

/* ---- life cycle -------------------------------------------------------------------------- */

static rs_job *job_new(const rs_job_options *o, const rs_job_source *src)
{
	rs_job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->o = *o;
	j->cfg = o->cfg;
	j->src = *src;
	j->ntables = o->cfg->ntables;
	j->resume_step = -1;
	j->ph_at = rs_now();
	if (j->o.max_attempts < 1)
		j->o.max_attempts = 3;
	return j;
}

rs_status rs_job_create(const rs_job_options *o, const rs_job_source *src, int32_t workers, rs_job **out,
			rs_err *err)
{
	rs_job *j = job_new(o, src);
	if (!j)
		return rs_err_set(err, RS_ENOMEM, "job: out of memory");
	j->initial = workers;
	set_phase(j, P_STARTING);
	*out = j;
	return RS_OK;
}

rs_status rs_job_recover(const rs_job_options *o, const rs_job_source *src, const rs_state *s, rs_job **out,
			 rs_err *err)
{
	rs_job *j = job_new(o, src);
	rs_status st = RS_ENOMEM;
	if (!j)
		return rs_err_set(err, RS_ENOMEM, "job: out of memory");
	RSCHECKGOTO(rs_plan_from_json(s->plan, o->cfg, "state: plan", &j->plan, err), st, fail);
	if (j->plan->world.ranks != s->nworld) {
		st = rs_err_set(err, RS_EINVAL, "state: the plan has %d ranks, the world %d members", j->plan->world.ranks,
				s->nworld);
		goto fail;
	}
	if (!(j->world = malloc(sizeof(int32_t) * (size_t)s->nworld)))
		goto fail;
	for (int32_t r = 0; r < s->nworld; r++)
		if ((j->world[r] = add_member(j, s->world[r])) < 0)
			goto fail;
	j->nworld = s->nworld;
	j->generation = j->last_gen = s->generation;
	j->step = s->step;
	j->bound = s->bound;
	j->attempts = s->attempts;
	j->next_sched = s->next_schedule;
	if (s->attempt_generation) {
		RSCHECKGOTO(rs_plan_from_json(s->attempt_plan, o->cfg, "state: attempt plan", &j->aplan, err), st, fail);
		j->uni = malloc(sizeof(int32_t) * (size_t)s->nuni);
		j->union_of_old = malloc(sizeof(int32_t) * (size_t)s->nworld);
		j->before = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
		if (!j->uni || !j->union_of_old || !j->before)
			goto fail;
		if (s->nbefore != j->ntables || j->aplan->world.ranks != s->attempt_world) {
			st = rs_err_set(err, RS_EINVAL, "state: the attempt does not match the config's tables or its plan");
			goto fail;
		}
		for (int32_t u = 0; u < s->nuni; u++)
			if ((j->uni[u] = add_member(j, s->uni[u])) < 0)
				goto fail;
		memcpy(j->union_of_old, s->union_of_old, sizeof(int32_t) * (size_t)s->nworld);
		memcpy(j->before, s->before, sizeof(uint64_t) * (size_t)j->ntables);
		j->nuni = s->nuni;
		j->aworld = s->attempt_world;
		j->agen = j->last_gen = s->attempt_generation;
		j->abound = bound_after(j, j->step);
	}
	j->t_attempt = j->t_paused = j->t_first_paused = rs_now();
	switch (s->phase) {
	case RS_STATE_TRAINING:
		set_phase(j, P_TRAINING);
		break;
	case RS_STATE_MIGRATING:
		set_phase(j, P_MIGRATING);
		break;
	case RS_STATE_COMMITTING:
		j->t_staged = rs_now();
		set_phase(j, P_COMMITTING);
		break;
	case RS_STATE_DONE:
		set_phase(j, P_DONE);
		break;
	}
	RS_INFO("recovered generation %lld (%d workers) in phase %s%s; waiting for the workers to rejoin",
		(long long)j->generation, j->nworld, rs_state_phase_name(s->phase), j->agen ? " with an attempt in flight" : "");
	changed(j);
	*out = j;
	return RS_OK;
fail:
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "job: out of memory");
	rs_job_destroy(j);
	return st;
}

void rs_job_destroy(rs_job *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->nm; i++) {
		free(j->m[i].paused_sum);
		free(j->m[i].staged_sum);
	}
	free(j->m);
	free(j->world);
	free(j->history);
	free(j->pairs);
	rs_plan_free(j->plan);
	free_attempt(j);
	free(j);
}

int rs_job_finished(const rs_job *j) { return j->ph == P_DONE ? 1 : j->ph == P_FAILED ? -1 : 0; }

const char *rs_job_error(const rs_job *j) { return j->why; }

void rs_job_stop_all(rs_job *j)
{
	json_t *stop = json_pack("{s:s}", "type", "stop");
	for (size_t i = 0; i < j->nm; i++)
		send_to(j, &j->m[i], stop);
	json_decref(stop);
}
