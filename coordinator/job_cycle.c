/*
 * job_cycle.c - the generation cycle (job.h): start generation 1, pause
 * the world when a membership change is ready, plan the next generation
 * and send every member of the union its part, commit when every member
 * staged and nothing was lost or duplicated, abort otherwise. One tick
 * function per phase; each only reads what members last reported (see
 * job_members.c), so a recovered job resolves its cycle the same way.
 */
#include "coordinator/job_internal.h"
#include "common/log.h"
#include "common/plandiff.h"
#include "common/planner.h"
#include "common/zjson.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* How long the multi-member phases (staging, committing, returning after an abort) may take. */
double rs__cycle_phase_timeout(const rs_job *j) { return 4 * (j->o.timeout_ms / 1000.0); }

int64_t rs__cycle_bound_after(const rs_job *j, int64_t step)
{
	for (int k = j->cur.next_sched; k < j->o.nsched; k++)
		if (j->o.sched_step[k] > step)
			return j->o.sched_step[k] < j->o.steps ? j->o.sched_step[k] : j->o.steps;
	return j->o.steps;
}

void rs__cycle_send_world(rs_job *j, json_t *msg)
{
	for (int32_t r = 0; r < j->cur.nworld; r++)
		rs__job_send(j, &j->mem.v[j->cur.world[r]], json_incref(msg));
	json_decref(msg);
}

void rs__cycle_send_union(rs_job *j, json_t *msg)
{
	for (int32_t u = 0; u < j->att.nuni; u++)
		rs__job_send(j, &j->mem.v[j->att.uni[u]], json_incref(msg));
	json_decref(msg);
}

/* The addresses of the members uni (n), in union rank order: the same for every start message (NULL without memory). */
static json_t *peers_json(const rs_job *j, const int32_t *uni, int32_t n)
{
	json_t *peers = json_array();
	for (int32_t k = 0; peers && k < n; k++)
		if (json_array_append_new(peers, json_string(j->mem.v[uni[k]].addr)) != 0)
			json_decref(peers), peers = NULL;
	return peers;
}

/* A reshard's union rank of each old rank: the same for every start message (NULL without memory). */
static json_t *union_of_old_json(const rs_job *j)
{
	json_t *uoo = json_array();
	for (int32_t r = 0; uoo && r < j->cur.nworld; r++)
		if (json_array_append_new(uoo, json_integer(j->att.union_of_old[r])) != 0)
			json_decref(uoo), uoo = NULL;
	return uoo;
}

/*
 * The start message of union rank u (a world rank when u < world). peers,
 * jplan, and for a reshard jprev and uoo, are borrowed (built once for
 * every member); load (a fresh start's checkpoint) too.
 */
static json_t *start_msg(const rs_job *j, int64_t gen, int32_t u, int32_t world, int32_t nuni, json_t *peers,
			 json_t *jplan, json_t *jprev, json_t *uoo, const char *load, int64_t first, int64_t bound)
{
	rs_msg_start m = {.generation = gen, .rank = u, .world = world, .union_world = nuni, .peers = peers,
			  .plan = jplan, .previous_plan = jprev, .union_of_old = uoo, .first_step = first,
			  .steps = bound, .eval_every = j->cfg->data.eval_every, .eval_samples = j->cfg->data.eval_samples,
			  .save = j->o.save, .load = load, .last = bound >= j->o.steps,
			  .restore = jprev && j->rec.healing && j->rec.partial ? j->rec.load : NULL,
			  .checkpoint_dir = j->o.ckpt_dir, .checkpoint_every = j->o.ckpt_dir ? j->o.ckpt_every : 0,
			  .checkpoint_interval = j->o.ckpt_dir ? j->o.ckpt_interval : 0};
	return rs_proto_make_start(&m);
}

/* A plan as start messages carry it: a zjson string, deflated once for every member (NULL without memory). */
static json_t *deflated_plan(const rs_plan *p)
{
	json_t *v = rs_plan_to_json(p), *s = NULL;
	char *z = v ? rs_zjson_encode(v) : NULL;
	if (z)
		s = json_string(z);
	free(z);
	json_decref(v);
	return s;
}

int rs__cycle_start(rs_job *j, const int32_t *c, int32_t n, int64_t gen, const char *load, int64_t step)
{
	rs_err err = {0};
	rs_world w = rs_world_make(j->cfg, n, 0, 0, 0);
	rs_plan *plan = NULL;
	int32_t *world = malloc(sizeof(int32_t) * (size_t)n);
	if (!world || rs_planner_plan(j->cfg, &w, NULL, NULL, &plan, &err) != RS_OK) {
		free(world);
		rs__job_fail(j, "planning %d workers: %s", n, world ? err.msg : "out of memory");
		return 0;
	}
	memcpy(world, c, sizeof(int32_t) * (size_t)n);
	rs_plan_free(j->cur.plan);
	free(j->cur.world);
	j->cur.plan = plan;
	j->cur.world = world;
	j->cur.nworld = n;
	j->cur.generation = j->att.last_generation = gen;
	j->cur.step = step;
	j->cur.bound = rs__cycle_bound_after(j, j->cur.step);
	j->cur.pause_sent = 0;
	j->cur.resume_step = -1;
	if (!rs__persist(j, RS_STATE_TRAINING))
		return 0;
	json_t *jp = deflated_plan(j->cur.plan), *peers = peers_json(j, j->cur.world, n);
	if (!jp || !peers) {
		json_decref(jp), json_decref(peers);
		rs__job_fail(j, "out of memory sending the plan of generation %lld", (long long)gen);
		return 0;
	}
	for (int32_t r = 0; r < n; r++) {
		member *m = &j->mem.v[c[r]];
		rs__job_send(j, m, start_msg(j, gen, r, n, n, peers, jp, NULL, NULL, load, j->cur.step, j->cur.bound));
		m->st = M_TRAINING, m->gen = gen; /* until it reports otherwise: an "idle" from now on means it lost this one */
		m->step = j->cur.step; /* its reports from here on, not an earlier process's or world's */
	}
	json_decref(jp), json_decref(peers);
	rs__job_set_phase(j, P_TRAINING);
	return 1;
}

/* Paused with nothing to change: go on. */
static void resume(rs_job *j)
{
	j->cur.bound = rs__cycle_bound_after(j, j->cur.step);
	rs__emit(j, &(job_event){.kind = EV_RESUMED});
	if (!rs__persist(j, RS_STATE_TRAINING))
		return;
	rs_msg_resume r = {j->cur.generation, j->cur.bound, j->cur.bound >= j->o.steps};
	rs__cycle_send_world(j, rs_proto_make_resume(&r));
	for (int32_t k = 0; k < j->cur.nworld; k++)
		j->mem.v[j->cur.world[k]].st = M_TRAINING; /* until they report otherwise: their "paused" is stale now */
	j->cur.pause_sent = 0;
	rs__job_set_phase(j, P_TRAINING);
}

void rs__cycle_free_attempt(rs_job *j)
{
	rs_plan_free(j->att.plan);
	free(j->att.uni);
	free(j->att.union_of_old);
	free(j->att.before);
	free(j->att.pairs);
	j->att.plan = NULL, j->att.uni = NULL, j->att.union_of_old = NULL, j->att.before = NULL, j->att.pairs = NULL;
	j->att.nuni = j->att.nworld = j->att.npairs = 0;
	j->att.generation = 0;
	j->att.precopy = 0;
}

/*
 * The new world's rank order: the candidates' (survivors, then joiners),
 * except between 2D worlds of one sharding group, where survivors keep
 * their role (the rows they hold) and joiners fill the other ranks.
 */
static void place_members(const rs_job *j, const int32_t *c, int32_t n, int32_t *placed)
{
	rs_world w = rs_world_make(j->cfg, n, 0, 0, 0);
	int32_t old_rank[RS_MAX_WORKERS], order[RS_MAX_WORKERS], at[RS_MAX_WORKERS], nsurv = 0, njoin = 0;
	memcpy(placed, c, sizeof(int32_t) * (size_t)n);
	if (!rs_planner_same_groups(j->cur.plan, &w))
		return;
	for (int32_t k = 0; k < n; k++)
		for (int32_t r = 0; r < j->cur.nworld; r++)
			if (j->cur.world[r] == c[k] && !j->mem.v[c[k]].lost) {
				old_rank[nsurv] = r;
				order[nsurv++] = c[k];
			}
	for (int32_t k = 0; k < n; k++)
		if (!rs__member_in_world(j, c[k]) || j->mem.v[c[k]].lost)
			order[nsurv + njoin++] = c[k];
	const rs_world *pw = &j->cur.plan->world;
	rs_planner_place_members(pw->ranks / pw->sharding_group, n / w.sharding_group, w.sharding_group, old_rank, nsurv,
				 n, at);
	for (int32_t i = 0; i < n; i++)
		placed[at[i]] = order[i];
}

/* Plan the next generation over the candidates and send every member of the union its part. */
/* The old world's checksums per table, from what each member reported at its pause. */
void rs__cycle_old_sums(rs_job *j)
{
	memset(j->att.before, 0, sizeof(uint64_t) * (size_t)j->ntables);
	for (int32_t r = 0; r < j->cur.nworld; r++)
		for (int t = 0; t < j->ntables; t++)
			j->att.before[t] += j->mem.v[j->cur.world[r]].paused_sum[t];
}

/*
 * The attempt for the candidates cand (n): the union, the old rows'
 * checksums (from the last pause), the plan and its diff, a generation
 * number. 0 when the job failed or gave up.
 */
int rs__cycle_plan_attempt(rs_job *j, const int32_t *cand, int32_t n)
{
	rs_err err = {0};
	int32_t map[RS_MAX_WORKERS], c[RS_MAX_WORKERS];
	place_members(j, cand, n, c);
	rs__cycle_free_attempt(j);
	j->att.uni = malloc(sizeof(int32_t) * (size_t)(n + j->cur.nworld));
	j->att.union_of_old = malloc(sizeof(int32_t) * (size_t)j->cur.nworld + 1);
	j->att.before = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	if (!j->att.uni || !j->att.union_of_old || !j->att.before) {
		rs__job_fail(j, "out of memory");
		return 0;
	}
	/* the union: the new world in rank order, then the members that leave; not the lost (healing) */
	memcpy(j->att.uni, c, sizeof(int32_t) * (size_t)n);
	j->att.nuni = n;
	j->att.nworld = n;
	int healing = 0;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		int32_t u = -1;
		if (j->mem.v[j->cur.world[r]].lost) {
			j->att.union_of_old[r] = -1, map[r] = RS_PLAN_LOST, healing = 1;
			continue;
		}
		for (int32_t k = 0; k < n; k++)
			if (c[k] == j->cur.world[r])
				u = k;
		if (u < 0) {
			u = j->att.nuni;
			j->att.uni[j->att.nuni++] = j->cur.world[r];
		}
		j->att.union_of_old[r] = u;
		map[r] = u < n ? u : -1;
	}
	/* the old rows' checksums: each member's count; healing, the copies the survivors hold of every role */
	if (!healing)
		rs__cycle_old_sums(j);
	if (healing && !rs__heal_sums(j, j->att.before)) {
		rs__heal_give_up(j, "the surviving copies of the lost rows disagree (their checksums differ)");
		return 0;
	}
	if (healing && j->rec.partial && !rs__restore_newest(j)) {
		rs__heal_give_up(j, "no complete checkpoint to restore the lost rows from");
		return 0;
	}
	double t0 = rs__job_now(j);
	rs_world w = rs_world_make(j->cfg, n, 0, 0, 0);
	if (rs_planner_plan(j->cfg, &w, j->cur.plan, map, &j->att.plan, &err) != RS_OK) {
		rs__job_fail(j, "replanning %d -> %d workers: %s", j->cur.nworld, n, err.msg);
		return 0;
	}
	j->t.plan_s = rs__job_now(j) - t0;
	if (rs__cycle_pairs_reset(j) != RS_OK) {
		rs__job_fail(j, "replanning %d -> %d workers: the plan diff: out of memory", j->cur.nworld, n);
		return 0;
	}
	j->att.generation = ++j->att.last_generation;
	j->att.bound = rs__cycle_bound_after(j, j->cur.step);
	return 1;
}

/* Send every member of the union its start of the attempt (pre-copied or not); 0 when the job failed. */
int rs__cycle_send_starts(rs_job *j)
{
	json_t *jp = deflated_plan(j->att.plan), *jprev = deflated_plan(j->cur.plan);
	json_t *peers = peers_json(j, j->att.uni, j->att.nuni), *uoo = union_of_old_json(j);
	if (!jp || !jprev || !peers || !uoo) {
		json_decref(jp), json_decref(jprev), json_decref(peers), json_decref(uoo);
		rs__job_fail(j, "out of memory sending the plan of generation %lld", (long long)j->att.generation);
		return 0;
	}
	for (int32_t u = 0; u < j->att.nuni; u++) {
		member *m = &j->mem.v[j->att.uni[u]];
		if (!m->conn)
			break; /* the tick aborts: it is gone */
		json_t *msg = start_msg(j, j->att.generation, u, j->att.nworld, j->att.nuni, peers, jp, jprev, uoo, NULL,
					j->cur.step, j->att.bound);
		if (msg && j->att.precopy && json_object_set_new(msg, "precopy", json_true()) != 0)
			json_decref(msg), msg = NULL;
		m->start_gen = rs__job_send(j, m, msg) ? j->att.generation : 0;
		m->staged_ok = 0;
		m->precopied = 0;
		m->step = j->cur.step; /* its reports from here on (install_attempt reads the new rank 0's) */
		if (!j->att.precopy || !rs__member_in_world(j, j->att.uni[u]))
			m->st = M_STAGING, m->gen = j->att.generation; /* the old world trains on while it pre-copies */
	}
	json_decref(jp), json_decref(jprev), json_decref(peers), json_decref(uoo);
	return 1;
}

static void begin_attempt(rs_job *j, const int32_t *cand, int32_t n)
{
	if (!rs__cycle_plan_attempt(j, cand, n) || !rs__persist(j, RS_STATE_MIGRATING) || !rs__cycle_send_starts(j))
		return;
	j->t.attempt = rs__job_now(j);
	rs__emit(j, &(job_event){.kind = EV_ATTEMPT});
	rs__job_set_phase(j, P_MIGRATING);
}

static void abort_attempt(rs_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The attempt in flight is over (why): reported, persisted as training when asked, the union told; 0: the job failed. */
int rs__cycle_end_attempt(rs_job *j, int persist, const char *fmt, va_list ap)
{
	vsnprintf(j->att.last_abort, sizeof(j->att.last_abort), fmt, ap);
	rs__emit(j, &(job_event){.kind = EV_ABORTED, .reason = j->att.last_abort});
	if (persist && !rs__persist(j, RS_STATE_TRAINING))
		return 0;
	rs__cycle_send_union(j, rs_proto_make_generation(RS_MSG_ABORT, j->att.generation, 0, j->att.last_abort));
	j->att.failures++;
	j->rep.aborts++;
	return 1;
}

static void abort_attempt(rs_job *j, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (rs__cycle_end_attempt(j, 1, fmt, ap))
		rs__job_set_phase(j, P_ABORTING);
	va_end(ap);
}

static int cmp_table_row(const void *a, const void *b)
{
	const rs_move *x = a, *y = b;
	if (x->table != y->table)
		return x->table - y->table;
	return (x->row_offset > y->row_offset) - (x->row_offset < y->row_offset);
}

/* The table rows moves mv[0..n) cover, each once (column blocks and replica groups overlap); sorts mv. */
static int64_t distinct_rows(rs_move *mv, int n)
{
	int64_t rows = 0, end = 0;
	qsort(mv, (size_t)n, sizeof(*mv), cmp_table_row);
	for (int i = 0; i < n; i++) {
		if (i == 0 || mv[i].table != mv[i - 1].table)
			end = 0;
		int64_t lo = mv[i].row_offset > end ? mv[i].row_offset : end, hi = mv[i].row_offset + mv[i].rows;
		rows += hi > lo ? hi - lo : 0;
		end = hi > end ? hi : end;
	}
	return rows;
}

rs_status rs__cycle_pairs_reset(rs_job *j)
{
	int32_t map[RS_MAX_WORKERS];
	rs_move *mv = NULL;
	int n = 0;
	rs_err err = {0};
	free(j->att.pairs);
	j->att.pairs = NULL;
	j->att.npairs = 0;
	j->att.restored_bytes = 0;
	j->att.restored_rows = 0;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		int32_t u = j->att.union_of_old[r];
		map[r] = u == -1 ? RS_PLAN_LOST : u < j->att.nworld ? u : -1; /* lost (healing): sends nothing */
	}
	RSCHECK(rs_plan_diff_restoring(j->cfg, j->cur.plan, j->att.plan, map, j->rec.healing && j->rec.partial, &mv, &n,
				       &err));
	if (!(j->att.pairs = calloc((size_t)n + 1, sizeof(*j->att.pairs)))) {
		free(mv);
		return RS_ENOMEM;
	}
	int nrest = 0;
	for (int i = 0; i < n; i++) {
		if (mv[i].src == RS_MOVE_RESTORE) { /* read from the checkpoint, not sent */
			j->att.restored_bytes += mv[i].bytes;
			mv[nrest++] = mv[i]; /* gathered at the front (nrest <= i): for restored_rows */
			continue;
		}
		int32_t src = j->att.union_of_old[mv[i].src], dst = mv[i].dst, k = 0;
		while (k < j->att.npairs && !(j->att.pairs[k].src == src && j->att.pairs[k].dst == dst))
			k++;
		if (k == j->att.npairs)
			j->att.pairs[j->att.npairs++] = (pair_progress){src, dst, 0, 0};
		j->att.pairs[k].total += mv[i].bytes;
	}
	j->att.restored_rows = distinct_rows(mv, nrest);
	free(mv);
	return RS_OK;
}

/* Bytes the plan diff of the attempt moves: its pairs' totals (a recovered plan does not carry its summary). */
static uint64_t diff_bytes(const rs_job *j)
{
	uint64_t total = 0;
	for (int i = 0; i < j->att.npairs; i++)
		total += j->att.pairs[i].total;
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
	for (int32_t u = 0; u < j->att.nuni; u++) {
		const member *m = &j->mem.v[j->att.uni[u]];
		for (int t = 0; u < j->att.nworld && t < j->ntables; t++)
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
		if (after[t] != j->att.before[t])
			bad = t, bad_after = after[t];
	free(after);
	if (bad >= 0) {
		abort_attempt(j, "table '%s': the staged rows' checksum %016" PRIx64 " is not the old rows' %016" PRIx64
				 " (rows lost or duplicated)",
			      j->cfg->tables[bad].name, bad_after, j->att.before[bad]);
		return;
	}
	uint64_t diff = diff_bytes(j);
	if (sent != recv || sent != diff)
		RS_WARN("generation %lld: members sent %" PRIu64 " B and received %" PRIu64 " B; the plan diff is %" PRIu64 " B",
			(long long)j->att.generation, sent, recv, diff);
	j->t.staged = rs__job_now(j);
	j->t.moved = sent;
	if (j->rec.healing && j->rec.partial)
		j->rec.stale_rows = j->att.restored_rows;
	for (int i = 0; i < j->att.npairs; i++)
		j->att.pairs[i].bytes = j->att.pairs[i].total;
	rs__emit(j, &(job_event){.kind = EV_MIGRATION, .force = 1});
	if (!rs__persist(j, RS_STATE_COMMITTING))
		return;
	rs__cycle_send_union(j, rs_proto_make_generation(RS_MSG_COMMIT, j->att.generation, 0, NULL));
	rs__emit(j, &(job_event){.kind = EV_STAGED, .moved = sent, .diff = diff, .connect_s = connect,
				 .prepare_s = prepare, .move_s = move});
	rs__job_set_phase(j, P_COMMITTING);
}

/* Every member took the commit: the attempt is the generation now. */
static void install_attempt(rs_job *j)
{
	int32_t *w = malloc(sizeof(int32_t) * (size_t)j->att.nworld + 1);
	if (!w) {
		rs__job_fail(j, "out of memory");
		return;
	}
	memcpy(w, j->att.uni, sizeof(int32_t) * (size_t)j->att.nworld);
	j->t.from = j->cur.nworld;
	rs__ckpt_keep_world(j); /* the old world and its plan (taken), for its checkpoints still being written */
	free(j->cur.world);
	rs_plan_free(j->cur.plan);
	j->cur.plan = j->att.plan;
	j->att.plan = NULL;
	j->cur.world = w;
	j->cur.nworld = j->att.nworld;
	rs__members_clear_lost(j); /* healed: every row has its copies again */
	j->cur.generation = j->att.generation;
	j->cur.bound = j->att.bound;
	rs__cycle_free_attempt(j);
	j->att.failures = 0;
	j->cur.pause_sent = 0;
	j->t.committed = rs__job_now(j);
	j->cur.resume_step = j->cur.step;
	j->rep.reshards++;
	if (!rs__persist(j, RS_STATE_TRAINING))
		return;
	rs__emit(j, &(job_event){.kind = EV_COMMITTED});
	rs__job_set_phase(j, P_TRAINING);
	/* rank 0 made its first step before the last member's "committed" came in: it was not yet rank 0 then */
	if (j->mem.v[w[0]].step > j->cur.resume_step)
		rs__cycle_progress(j, j->mem.v[w[0]].step - 1);
}

void rs__cycle_progress(rs_job *j, int64_t step)
{
	if (j->t.started > 0) {
		rs__emit(j, &(job_event){.kind = EV_FIRST_STEP, .seconds = rs__job_now(j) - j->t.started});
		j->t.started = 0;
	}
	if (j->rec.in_a_row && step >= j->rec.from)
		j->rec.in_a_row = 0; /* trained past the loss: the next one is a new story */
	if (j->rec.started > 0 && j->ph == P_TRAINING) {
		double s = rs__job_now(j) - j->rec.started;
		j->rec.last_s = s;
		j->rec.seconds_sum += s;
		j->rec.done++;
		j->rec.started = 0;
		if (j->rec.replica && j->rec.partial)
			j->rec.stale_total += j->rec.stale_rows;
		rs__emit(j, &(job_event){.kind = EV_RECOVERED, .seconds = s, .step = step + 1});
		j->rec.healing = 0;
	}
	if (j->cur.resume_step < 0 || step < j->cur.resume_step)
		return;
	double now = rs__job_now(j);
	reshard_record rec = {j->cur.generation, j->cur.resume_step, j->t.from, j->cur.nworld, now - j->t.first_paused,
			      j->t.staged - j->t.attempt, j->t.moved, j->t.committed - j->t.first_paused};
	j->cur.resume_step = -1; /* resumed: the record has it */
	rs__emit(j, &(job_event){.kind = EV_RESHARDED, .record = &rec});
	j->mem.scale_at = 0;
}

/* ---- one tick per phase --------------------------------------------------------------- */

static void tick_starting(rs_job *j)
{
	int32_t c[RS_MAX_WORKERS], nc;
	int pending;
	if (j->mem.initial) {
		rs_err err = {0};
		if (j->src.scale && j->src.scale(j->src.ctx, j->mem.initial, &err) != RS_OK) {
			rs__job_fail(j, "starting %d workers: %s", j->mem.initial, err.msg);
			return;
		}
		j->mem.initial = 0;
		j->ph_at = j->t.started = rs__job_now(j);
	}
	nc = rs__members_candidates(j, c, &pending);
	if (nc > 0 && pending == 0) {
		if (rs__cycle_start(j, c, nc, 1, j->o.load, j->o.load ? j->o.load_step : 0))
			rs__emit(j, &(job_event){.kind = EV_STARTED});
		return;
	}
	if (rs__job_now(j) - j->ph_at > j->o.timeout_ms / 1000.0)
		rs__job_fail(j, "waiting for the workers to join: %d of %d after %d ms", nc, nc + pending, j->o.timeout_ms);
}

void rs__cycle_complete(rs_job *j)
{
	if (j->att.precopy)
		rs__cycle_precopy_call_off(j, "training ended first");
	if (j->src.ending)
		j->src.ending(j->src.ctx);
	if (!rs__persist(j, RS_STATE_DONE))
		return; /* failed: the job is not done until its state says so */
	rs__emit(j, &(job_event){.kind = EV_DONE});
	rs__job_set_phase(j, P_DONE);
}

static void tick_training(rs_job *j)
{
	int32_t c[RS_MAX_WORKERS], nc;
	int all_done = 1, all_paused = 1;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		const member *m = &j->mem.v[j->cur.world[r]];
		all_done &= m->st == M_DONE || m->done_gen == j->cur.generation; /* or it did, and came back anew */
		all_paused &= m->st == M_PAUSED && m->gen == j->cur.generation;
	}
	if (all_done) {
		rs__cycle_complete(j);
		return;
	}
	if (all_paused) {
		j->t.paused = rs__job_now(j);
		j->cur.step = j->mem.v[j->cur.world[0]].step;
		if (j->att.precopy)
			rs__cycle_precopy_finish(j);
		else
			rs__job_set_phase(j, P_PAUSED);
		return;
	}
	if (j->att.precopy) {
		rs__cycle_precopy_tick(j);
		return;
	}
	rs__cycle_precopy_ask_schedule_ahead(j);
	int ready = !j->cur.pause_sent && rs__members_change_ready(j, c, &nc), pre = ready ? rs__cycle_precopy_can(j, c, nc) : 0;
	if (pre < 0)
		return; /* the old world is still starting its run: pre-copy once it says where it listens */
	if (ready && pre == 0 && j->cur.sched_asked == j->cur.next_sched + 1 &&
	    nc == j->o.sched_workers[j->cur.next_sched])
		return; /* the scheduled change, asked for ahead, that cannot be pre-copied after all: at its step, as planned */
	if (pre > 0) {
		rs__cycle_precopy_begin(j, c, nc);
		return;
	}
	if (ready) {
		RS_INFO("membership change: %d -> %d workers; pausing at the next step boundary", j->cur.nworld, nc);
		rs__cycle_pause_world(j);
	}
}

void rs__cycle_pause_world(rs_job *j)
{
	rs__cycle_send_world(j, rs_proto_make_plain(RS_MSG_PAUSE));
	j->cur.pause_sent = 1;
	rs__job_status_hold(j); /* from now on, not from the next event */
}

static void tick_paused(rs_job *j)
{
	int32_t c[RS_MAX_WORKERS], nc;
	int pending;
	if (j->cur.step >= j->o.steps) {
		resume(j); /* a run that ended exactly at the end: let the workers finish */
		return;
	}
	if (j->cur.next_sched < j->o.nsched && j->o.sched_step[j->cur.next_sched] == j->cur.step) {
		int32_t n = j->o.sched_workers[j->cur.next_sched++];
		rs_err err = {0};
		if (j->cur.sched_asked != j->cur.next_sched) /* not announced ahead already */
			rs__emit(j, &(job_event){.kind = EV_SCHEDULE, .step = j->cur.step, .workers = n});
		if (j->src.scale && j->src.scale(j->src.ctx, n, &err) != RS_OK) {
			rs__job_fail(j, "schedule: %s", err.msg);
			return;
		}
		j->mem.scale_at = rs__job_now(j);
		rs__members_changed(j);
		return;
	}
	nc = rs__members_candidates(j, c, &pending);
	if (nc == 0) {
		if (rs__job_now(j) - j->ph_at > j->o.timeout_ms / 1000.0)
			rs__job_fail(j, "no worker left to hold the rows at step %lld", (long long)j->cur.step);
		return; /* every member is leaving or gone: wait for replacements */
	}
	/* paused, waiting costs training time: only for joiners on their way, at most the debounce */
	double waited = rs__job_now(j) - (j->mem.last_change > j->ph_at ? j->mem.last_change : j->ph_at);
	int settled = pending == 0 || waited >= j->o.debounce_ms / 1000.0;
	if (rs__members_same_world(j, c, nc)) {
		if (settled)
			resume(j);
		return;
	}
	if (!settled)
		return;
	if (j->att.failures >= j->o.max_attempts && j->rec.healing) {
		rs__heal_give_up(j, j->att.last_abort);
		return;
	}
	if (j->att.failures >= j->o.max_attempts) {
		rs__job_fail(j, "gave up after %d aborted reshard attempts in a row; the last: %s", j->att.failures,
			     j->att.last_abort);
		return;
	}
	begin_attempt(j, c, nc);
}

static void tick_migrating(rs_job *j)
{
	int all = 1;
	for (int32_t u = 0; u < j->att.nuni; u++) {
		member *m = &j->mem.v[j->att.uni[u]];
		if (rs__member_gone(j, m)) {
			if (u >= j->att.nworld || (rs__member_in_world(j, j->att.uni[u]) && !m->lost)) {
				rs__recover(j, j->att.uni[u], "was lost during the migration"); /* an old member: its rows are gone */
				return;
			}
			abort_attempt(j, "%s (joining) was lost during the migration", m->name);
			return;
		}
		if (m->st == M_STAGED && m->gen == j->att.generation && !m->staged_ok) {
			abort_attempt(j, "%s: %s", m->name, m->staged_why);
			return;
		}
		/*
		 * A report of another generation between the start going out and
		 * the member's answer to it answers something sent before the start
		 * (an abort of a called-off pre-copy, say): on one connection,
		 * messages keep their order, and the member stages next. Otherwise
		 * (it answered already, or rejoined since and the start may be
		 * lost) it is not staging.
		 */
		if ((m->st == M_PAUSED || m->st == M_TRAINING || m->st == M_IDLE) && m->gen != j->att.generation &&
		    m->start_gen != j->att.generation) {
			abort_attempt(j, "%s is not staging generation %lld (it reports generation %lld)", m->name,
				      (long long)j->att.generation, (long long)m->gen);
			return;
		}
		all &= m->st == M_STAGED && m->gen == j->att.generation;
	}
	if (all)
		commit_attempt(j);
	else if (rs__job_now(j) - j->ph_at > rs__cycle_phase_timeout(j))
		abort_attempt(j, "not every member staged within %d ms", 4 * j->o.timeout_ms);
}

static void tick_committing(rs_job *j)
{
	int all = 1;
	for (int32_t u = 0; u < j->att.nuni; u++) {
		member *m = &j->mem.v[j->att.uni[u]];
		int took = (m->st == M_COMMITTED || m->st == M_TRAINING || m->st == M_PAUSED || m->st == M_DONE) &&
			   m->gen == j->att.generation;
		if (u >= j->att.nworld) /* a leaver: it exits once committed */
			took |= m->exited && m->st == M_STAGED;
		else if (rs__member_gone(j, m) && !took) {
			rs__recover(j, j->att.uni[u], "was lost right after the commit");
			return;
		}
		all &= took;
	}
	if (all)
		install_attempt(j);
	else if (rs__job_now(j) - j->ph_at > rs__cycle_phase_timeout(j))
		rs__job_fail(j, "members did not confirm the commit of generation %lld within %d ms",
			     (long long)j->att.generation, 4 * j->o.timeout_ms);
}

static void tick_aborting(rs_job *j)
{
	int all = 1;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		member *m = &j->mem.v[j->cur.world[r]];
		if (m->lost)
			continue; /* healing: it holds nothing to go back to */
		if (rs__member_gone(j, m)) {
			rs__recover(j, j->cur.world[r], "was lost during the abort");
			return;
		}
		all &= m->st == M_PAUSED && m->gen == j->cur.generation;
	}
	if (!all) {
		if (rs__job_now(j) - j->ph_at > rs__cycle_phase_timeout(j))
			rs__job_fail(j, "the members did not return to generation %lld after the abort",
				     (long long)j->cur.generation);
		return;
	}
	rs__cycle_free_attempt(j);
	rs__members_changed(j); /* the next attempt plans from what is there now */
	rs__job_set_phase(j, P_PAUSED);
}

/*
 * A world member that is gone without handing its rows over, or that lost
 * its generation (a peer died under it): its rows are gone. When several
 * went at once (peers fail right after a member dies), name one killed by
 * a signal: the likely cause, which gets a moment to surface. Where none is
 * known gone by then (a pod's deletion unseen while the API is away), a
 * member whose connection dropped is the likely cause, not its peers. 1
 * when the job recovers (or failed).
 */
static int world_lost(rs_job *j)
{
	int lost = -1, lost_gone = 0, away = -1;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		const member *m = &j->mem.v[j->cur.world[r]];
		int gone = rs__member_gone(j, m) && m->st != M_DONE, idle = m->st == M_IDLE;
		if (m->lost)
			continue; /* known: healing */
		if (!m->conn && !gone && m->st != M_DONE && away < 0)
			away = j->cur.world[r];
		/* the gone before the idle (their peers), and among those the killed */
		if ((gone || idle) && (lost < 0 || (gone && !lost_gone) ||
				       (gone == lost_gone && m->killed && !j->mem.v[lost].killed)))
			lost = j->cur.world[r], lost_gone = gone;
	}
	if (lost >= 0 && !j->mem.loss_seen_at)
		j->mem.loss_seen_at = rs__job_now(j);
	if (lost >= 0 && (j->mem.v[lost].killed || rs__job_now(j) - j->mem.loss_seen_at > 0.5)) {
		if (!lost_gone && away >= 0)
			rs__recover(j, away, "went away (its connection dropped as its peers' generation failed)");
		else
			rs__recover(j, lost, lost_gone ? "was lost" : "lost its generation (a peer failed under it)");
		return 1;
	}
	return 0;
}

void rs__cycle_tick(rs_job *j)
{
	if ((j->ph == P_TRAINING || j->ph == P_PAUSED) && world_lost(j))
		return;
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
	case P_RECOVERING:
		rs__recover_tick(j);
		break;
	case P_DONE:
	case P_FAILED:
		break;
	}
}
