/*
 * job_ckpt.c - periodic checkpoints, the coordinator's half. Every rank of
 * the world copies its part at the same step boundary and writes it off
 * its training thread into DIR/step-NNNNNNNNN/ (worker/checkpointer.h),
 * then reports its files with their CRC-32C. Once every rank of that
 * generation has, the coordinator writes the index (with every file's
 * checksum) last, atomically and fsynced: only then is the checkpoint
 * complete, and only a complete one is ever read. One still being written
 * when a reshard commits completes with the replaced world's reports
 * (rs__ckpt_keep_world). A checkpoint a rank never finishes (it died, left
 * at that reshard, a write failed, a rollback came first) stays without its
 * index. One whose last report comes after a newer one completed (a
 * shrink's leaver writing its part at a lower priority) completes all the
 * same, unless --checkpoint-keep newer ones are complete (it would be
 * deleted at once). Then the oldest are deleted, keeping --checkpoint-keep
 * complete ones (and anything newer, which may be in flight); one of a
 * step past any this run reached is another run's, and left alone. The
 * state records how far the job reached before a checkpoint's index is
 * written, so a restarted coordinator knows its checkpoints for its own.
 */
#include "coordinator/job_internal.h"
#include "common/checkpoint.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct ckpt_gather gather;

static void gather_free(gather *g)
{
	free(g->got);
	json_decref(g->sums);
	*g = (gather){0};
}

/* Stop gathering g, which will never complete (a newer one did, or room was needed). */
static void give_up(gather *g)
{
	RS_WARN("checkpoint of step %lld stays incomplete: %d of %d ranks reported their files", (long long)g->step,
		g->ngot, g->nworld);
	gather_free(g);
}

int rs__ckpt_completing(const rs_job *j)
{
	for (size_t k = 0; k < RS_CKPT_GATHERS; k++) {
		const gather *g = &j->ck.g[k];
		int can = g->step > j->ck.last_complete && g->generation == j->cur.generation &&
			  g->nworld == j->cur.nworld;
		for (int32_t r = 0; can && r < g->nworld; r++)
			can = g->got[r] || !j->mem.v[j->cur.world[r]].lost;
		if (can)
			return 1;
	}
	return 0;
}

void rs__ckpt_free(rs_job *j)
{
	for (size_t k = 0; k < RS_CKPT_GATHERS; k++)
		gather_free(&j->ck.g[k]);
	rs__ckpt_drop_world(j);
}

void rs__ckpt_drop_world(rs_job *j)
{
	rs_plan_free(j->ck.prev.plan);
	free(j->ck.prev.world);
	j->ck.prev.plan = NULL, j->ck.prev.world = NULL, j->ck.prev.n = 0;
}

/*
 * A checkpoint the world took shortly before a reshard may still be
 * written when the reshard commits (its ranks write off the training
 * thread): its files are of the old world's shards, whole and consistent.
 * The old world and its plan are kept so that its ranks' reports still
 * count and its index describes their shards; the next reshard, a
 * rollback or the job's end lets them go.
 */
void rs__ckpt_keep_world(rs_job *j)
{
	if (!j->o.ckpt_dir || !j->cur.plan)
		return;
	rs__ckpt_drop_world(j);
	j->ck.prev.plan = j->cur.plan, j->ck.prev.world = j->cur.world;
	j->ck.prev.n = j->cur.nworld, j->ck.prev.generation = j->cur.generation;
	j->cur.plan = NULL, j->cur.world = NULL;
}

/*
 * The world (member index per rank, *n ranks) and plan of generation gen, if
 * its checkpoints may still complete: the current one, or the one the last
 * reshard replaced (rs__ckpt_keep_world); NULL otherwise.
 */
static const rs_plan *world_of(const rs_job *j, int64_t gen, const int32_t **world, int32_t *n)
{
	if (gen == j->cur.generation)
		return *world = j->cur.world, *n = j->cur.nworld, j->cur.plan;
	if (j->ck.prev.plan && gen == j->ck.prev.generation)
		return *world = j->ck.prev.world, *n = j->ck.prev.n, j->ck.prev.plan;
	return *world = NULL, *n = 0, NULL;
}

/* The gather of (generation, step): the one under way, else a new one (in a free slot or the oldest's). */
static rs_status gather_of(rs_job *j, int64_t generation, int32_t nworld, int64_t step, gather **out)
{
	gather *g = NULL;
	for (size_t k = 0; k < RS_CKPT_GATHERS; k++)
		if (j->ck.g[k].step == step && j->ck.g[k].generation == generation) {
			*out = &j->ck.g[k];
			return RS_OK;
		}
	for (size_t k = 0; k < RS_CKPT_GATHERS; k++)
		if (!g || !j->ck.g[k].step || (g->step && j->ck.g[k].step < g->step))
			g = &j->ck.g[k];
	if (g->step)
		give_up(g);
	g->got = calloc((size_t)nworld + 1, 1);
	g->sums = json_object();
	if (!g->got || !g->sums) {
		gather_free(g);
		return RS_ENOMEM;
	}
	g->step = step, g->generation = generation, g->nworld = nworld;
	g->dense_params = -1;
	g->started = rs__job_now(j);
	*out = g;
	return RS_OK;
}

/* Whether root/step-S holds its index: complete. */
static int complete_at(const char *root, int64_t step)
{
	char dir[4096], index[4200];
	rs_checkpoint_step_dir(root, step, dir, sizeof(dir));
	snprintf(index, sizeof(index), "%s/index.json", dir);
	return access(index, F_OK) == 0;
}

int rs__ckpt_newest_indexed(const rs_job *j, int64_t near, char *dir, size_t n, int64_t *step)
{
	int64_t *steps = NULL;
	size_t k = 0;
	int found = 0;
	rs_err err = {0};
	if (j->o.ckpt_dir && rs_checkpoint_steps(j->o.ckpt_dir, &steps, &k, &err) == RS_OK)
		for (size_t i = 0; i < k && !found; i++) /* newest first */
			if ((found = steps[i] <= near && complete_at(j->o.ckpt_dir, steps[i]))) {
				rs_checkpoint_step_dir(j->o.ckpt_dir, steps[i], dir, n);
				*step = steps[i];
			}
	free(steps);
	return found;
}

/* Delete root/step-S: its files, then it. */
static void remove_step(const char *root, int64_t step)
{
	char dir[4096], path[4400];
	rs_checkpoint_step_dir(root, step, dir, sizeof(dir));
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			if (unlink(path) != 0)
				RS_WARN("checkpoint: cannot delete %s: %s", path, strerror(errno));
		}
	if (d)
		closedir(d);
	if (rmdir(dir) != 0)
		RS_WARN("checkpoint: cannot delete %s: %s", dir, strerror(errno));
}

/*
 * Keep the newest o.ckpt_keep complete checkpoints (those with an index)
 * and whatever is newer than the oldest of them; delete the rest. Only
 * this run's count: one past the step it reached (an earlier run's in the
 * same directory, or a run a rollback abandoned while a member still wrote)
 * is neither kept in their place nor deleted.
 */
static void prune(rs_job *j)
{
	const char *root = j->o.ckpt_dir;
	int64_t *steps, oldest_kept = -1, top = rs__ckpt_reached(j);
	size_t n;
	int kept = 0;
	rs_err err = {0};
	if (rs_checkpoint_steps(root, &steps, &n, &err) != RS_OK) {
		RS_WARN("%s (nothing deleted)", err.msg);
		return;
	}
	for (size_t i = 0; i < n && kept < j->o.ckpt_keep; i++)
		if (steps[i] <= top && complete_at(root, steps[i]))
			kept++, oldest_kept = steps[i];
	for (size_t i = 0; kept == j->o.ckpt_keep && i < n; i++)
		if (steps[i] < oldest_kept && !(j->rec.healing && j->rec.partial && j->rec.restored_step == steps[i]))
			remove_step(root, steps[i]); /* not the one a partial recovery in flight restores from */
	free(steps);
}

/* How many complete checkpoints of this run are newer than step. */
static int newer_complete(const rs_job *j, int64_t step)
{
	int64_t *steps, top = rs__ckpt_reached(j);
	size_t n;
	int newer = 0;
	rs_err err = {0};
	if (rs_checkpoint_steps(j->o.ckpt_dir, &steps, &n, &err) != RS_OK)
		return 0;
	for (size_t i = 0; i < n; i++)
		newer += steps[i] > step && steps[i] <= top && complete_at(j->o.ckpt_dir, steps[i]);
	free(steps);
	return newer;
}

/*
 * The state records the step of a checkpoint about to complete (its
 * "reached") before its index is written: a coordinator started again on
 * that state rolls back to it, not to a checkpoint from before the
 * generation began (the state is otherwise saved only at the cycle's
 * decisions). A save that fails costs only that (the index is written all
 * the same: a checkpoint past "reached" is neither taken nor deleted by a
 * restarted coordinator until its run passes it), so it does not fail the
 * job, nor does it wait: it is tried again from the tick (rs__persist_soon).
 * In a phase whose state is its own (starting, recovering), the next save
 * (a decision's, or the next checkpoint's) catches up.
 *
 * Every rank reported: save how far the job reached, write the index
 * (last), report the checkpoint, prune the old ones.
 */
static void complete(rs_job *j, gather *g)
{
	char dir[4096];
	rs_err err = {0};
	int64_t step = g->step;
	rs_checkpoint_step_dir(j->o.ckpt_dir, step, dir, sizeof(dir));
	uint64_t bytes = 0;
	const char *file;
	json_t *v;
	json_object_foreach(g->sums, file, v)
		bytes += (uint64_t)json_integer_value(json_object_get(v, "bytes"));
	const int32_t *world;
	int32_t n;
	const rs_plan *plan = world_of(j, g->generation, &world, &n);
	if (!plan)
		rs_err_set(&err, RS_EINVAL, "its world's plan is gone");
	else if (g->dense_params < 0)
		rs_err_set(&err, RS_EINVAL, "rank 0 did not report the dense network");
	if (!err.msg[0])
		rs__persist_soon(j, "a checkpoint's step");
	if (err.msg[0] ||
	    rs_checkpoint_write_index(dir, j->cfg, plan, step, (size_t)g->dense_params, g->sums, &err) != RS_OK) {
		RS_WARN("checkpoint of step %lld stays incomplete: %s", (long long)step, err.msg);
		gather_free(g);
		return;
	}
	double seconds = rs__job_now(j) - g->started;
	if (step > j->ck.last_complete)
		j->ck.last_complete = step;
	j->ck.complete++;
	gather_free(g);
	rs__emit(j, &(job_event){.kind = EV_CHECKPOINT, .step = step, .detail = dir, .moved = bytes, .seconds = seconds});
	prune(j);
}

rs_status rs__job_checkpointed(rs_job *j, int i, json_t *msg, rs_err *err)
{
	rs_msg_checkpointed m;
	RSCHECK(rs_proto_checkpointed(msg, &m, err));
	rs_status st = RS_OK;
	/* only the word of the current world, or of the one a reshard just replaced, counts: each rank for itself */
	const int32_t *world;
	int32_t n;
	if (!j->o.ckpt_dir || !world_of(j, m.generation, &world, &n) || m.rank >= n || world[m.rank] != i ||
	    (!j->o.ckpt_interval && m.step % j->o.ckpt_every != 0) || m.step == j->ck.last_complete ||
	    complete_at(j->o.ckpt_dir, m.step) ||
	    (m.step < j->ck.last_complete && newer_complete(j, m.step) >= j->o.ckpt_keep)) { /* older than every one kept */
		RS_DEBUG("checkpoint: a report of step %lld from %s ignored (stale or not of this world)", (long long)m.step,
			 j->mem.v[i].name);
		goto out;
	}
	gather *g;
	if ((st = gather_of(j, m.generation, n, m.step, &g)) != RS_OK)
		goto out;
	if ((st = rs_checkpoint_sums_add(g->sums, m.files, m.nfiles)) != RS_OK)
		goto out;
	if (m.rank == 0)
		g->dense_params = m.dense_params;
	if (!g->got[m.rank]) {
		g->got[m.rank] = 1;
		g->ngot++;
	}
	if (g->ngot == g->nworld)
		complete(j, g);
out:
	free(m.files);
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "checkpoint: out of memory");
	return st;
}

int64_t rs__ckpt_reached(const rs_job *j)
{
	int64_t reached = j->ck.last_complete > j->ck.known ? j->ck.last_complete : j->ck.known;
	for (size_t k = 0; k < RS_CKPT_GATHERS; k++)
		reached = j->ck.g[k].step > reached ? j->ck.g[k].step : reached;
	return reached;
}

int64_t rs__ckpt_near(const rs_job *j)
{
	int64_t reached = rs__ckpt_reached(j); /* progress is reported every 10 steps, checkpoints when they are taken */
	return reached > rs__job_step(j) ? reached : rs__job_step(j);
}

void rs__ckpt_rollback(rs_job *j, int64_t step, int64_t reached, int remove)
{
	int64_t *steps;
	size_t n;
	rs_err err = {0};
	rs__ckpt_free(j);
	j->ck.last_complete = step;
	j->ck.known = 0; /* what lies past step is the abandoned run's, deleted below */
	if (!j->o.ckpt_dir || !remove)
		return;
	if (rs_checkpoint_steps(j->o.ckpt_dir, &steps, &n, &err) != RS_OK) {
		RS_WARN("%s (nothing deleted)", err.msg);
		return;
	}
	for (size_t i = 0; i < n; i++)
		/* of the abandoned run (the world writes its own again), or never complete */
		if (steps[i] > step && (steps[i] <= reached || !complete_at(j->o.ckpt_dir, steps[i]))) {
			RS_INFO("checkpoint: deleting step %lld, newer than the rollback's", (long long)steps[i]);
			remove_step(j->o.ckpt_dir, steps[i]);
		}
	free(steps);
}
