/*
 * job_members.c - the job's members: every worker that joined (tools such
 * as rowshiftctl join too, but have no transport address and never become
 * members). Each member keeps what it last reported; the cycle only reads
 * those reports, so the same code runs a fresh job and a recovered one,
 * whose members report again as they rejoin. Also here: who the next world
 * should be, and when a change of it is ready to act on (the debounce).
 */
#include "coordinator/job_internal.h"
#include "common/control.h"
#include "common/grow.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

int rs__member_find(const rs_job *j, const char *name)
{
	for (size_t i = 0; i < j->mem.n; i++)
		if (!strcmp(j->mem.v[i].name, name))
			return (int)i;
	return -1;
}

int rs__member_add(rs_job *j, const char *name)
{
	int i = rs__member_find(j, name);
	if (i >= 0)
		return i;
	if (j->mem.n >= RS_MAX_WORKERS || rs_grow(&j->mem.v, &j->mem.cap, j->mem.n + 1, sizeof(*j->mem.v)) != RS_OK)
		return -1;
	member *m = &j->mem.v[j->mem.n];
	memset(m, 0, sizeof(*m));
	m->paused_sum = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	m->held_sum = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	m->staged_sum = calloc((size_t)j->ntables + 1, sizeof(uint64_t));
	if (!m->paused_sum || !m->held_sum || !m->staged_sum) {
		free(m->paused_sum);
		free(m->held_sum);
		free(m->staged_sum);
		return -1;
	}
	snprintf(m->name, sizeof(m->name), "%s", name);
	m->away_since = rs__job_now(j);
	return (int)j->mem.n++;
}

int rs__member_in_world(const rs_job *j, int i)
{
	for (int32_t r = 0; r < j->cur.nworld; r++)
		if (j->cur.world[r] == i)
			return 1;
	return 0;
}

int rs__member_in_union(const rs_job *j, int i)
{
	for (int32_t u = 0; u < j->att.nuni; u++)
		if (j->att.uni[u] == i)
			return 1;
	return 0;
}

int rs__member_at(const rs_job *j, const rs_conn *c)
{
	for (size_t k = 0; k < j->mem.n; k++)
		if (j->mem.v[k].conn == c)
			return (int)k;
	return -1;
}

/*
 * Gone for good: its process exited, or it stayed disconnected longer than
 * the timeout (a restarting coordinator's workers get that long to rejoin).
 */
int rs__member_gone(const rs_job *j, const member *m)
{
	return m->exited || m->replaced || (!m->conn && rs__job_now(j) - m->away_since > j->o.timeout_ms / 1000.0);
}

/* The ordinal of "worker-K" (or any NAME-K), for ordering joiners; large when there is none. */
static long ordinal(const char *name)
{
	const char *dash = strrchr(name, '-');
	char *end;
	long k = dash ? strtol(dash + 1, &end, 10) : -1;
	return dash && dash[1] && !*end && k >= 0 ? k : 1L << 30;
}

static int wanted(const rs_job *j, const member *m) { return !j->src.wanted || j->src.wanted(j->src.ctx, m->name); }

int32_t rs__members_candidates(const rs_job *j, int32_t *out, int *pending)
{
	int32_t n = 0;
	int32_t idle[RS_MAX_WORKERS];
	int nidle = 0;
	for (int32_t r = 0; r < j->cur.nworld; r++) {
		const member *m = &j->mem.v[j->cur.world[r]];
		if (!m->leaving && !m->lost && !rs__member_gone(j, m) && wanted(j, m))
			out[n++] = j->cur.world[r];
	}
	/* joiners: idle members outside the world, and lost ones back as fresh workers */
	for (size_t i = 0; i < j->mem.n; i++) {
		const member *m = &j->mem.v[i];
		if ((rs__member_in_world(j, (int)i) && !m->lost) || m->leaving || rs__member_gone(j, m) || !wanted(j, m))
			continue;
		if (m->st == M_IDLE && m->conn && m->addr[0] && nidle < RS_MAX_WORKERS)
			idle[nidle++] = (int32_t)i;
	}
	/* joiners by ordinal: worker-2 before worker-10 */
	for (int a = 1; a < nidle; a++)
		for (int b = a; b > 0 && ordinal(j->mem.v[idle[b]].name) < ordinal(j->mem.v[idle[b - 1]].name); b--) {
			int32_t t = idle[b];
			idle[b] = idle[b - 1];
			idle[b - 1] = t;
		}
	for (int a = 0; a < nidle; a++)
		out[n++] = idle[a];
	int32_t want = j->src.replicas ? j->src.replicas(j->src.ctx) : n;
	/* leaving members are not replaced by waiting: they are wanted, but on their way out */
	int leaving_wanted = 0;
	for (size_t i = 0; i < j->mem.n; i++)
		leaving_wanted += j->mem.v[i].leaving && !rs__member_gone(j, &j->mem.v[i]) && j->src.wanted &&
				  j->src.wanted(j->src.ctx, j->mem.v[i].name);
	*pending = want - leaving_wanted - n > 0 ? want - leaving_wanted - n : 0;
	return n;
}

void rs__members_clear_lost(rs_job *j)
{
	for (size_t i = 0; i < j->mem.n; i++)
		j->mem.v[i].lost = 0;
}

int rs__members_same_world(const rs_job *j, const int32_t *c, int32_t n)
{
	if (n != j->cur.nworld)
		return 0;
	for (int32_t r = 0; r < n; r++)
		if (j->mem.v[j->cur.world[r]].lost)
			return 0; /* healing: a lost member back under its name holds nothing */
	for (int32_t r = 0; r < n; r++)
		if (c[r] != j->cur.world[r])
			return 0;
	return 1;
}

/* Whether n workers of a job whose config asks for replica groups would train 1D (not whole groups). */
static int short_of_groups(const rs_job *j, int32_t n)
{
	if (j->cfg->cluster.sharding_group <= 1)
		return 0;
	rs_world w = rs_world_make(j->cfg, n, 0, 0, 0);
	return w.sharding_group == w.ranks;
}

/*
 * While training, a change is ready to act on once it is quiet: nobody it
 * waits for is pending and nothing changed for a tenth of the debounce (so
 * that leaves or joins arriving together make one reshard), or nothing
 * changed for the whole debounce (stragglers are left for a later reshard),
 * except that a 2D job short of whole groups waits for its stragglers up to
 * --timeout-ms.
 */
int rs__members_change_ready(rs_job *j, int32_t *c, int32_t *nc)
{
	int pending;
	double quiet = rs__job_now(j) - j->mem.last_change, debounce = j->o.debounce_ms / 1000.0;
	*nc = rs__members_candidates(j, c, &pending);
	if (*nc == 0 || rs__members_same_world(j, c, *nc))
		return 0;
	/* a wanted worker still on its way, and without it no whole replica groups: wait for it, up to --timeout-ms
	 * (a slow joiner would otherwise turn a 2D world 1D, its whole model planned afresh) */
	if (pending > 0 && short_of_groups(j, *nc))
		return quiet >= j->o.timeout_ms / 1000.0;
	return (pending == 0 && quiet >= debounce / 10) || quiet >= debounce;
}

void rs__members_changed(rs_job *j) { j->mem.last_change = rs__job_now(j); }

void rs__member_tables(const rs_job *j, int i, char *buf, size_t n)
{
	int32_t rank = -1;
	size_t len = 0;
	buf[0] = 0;
	for (int32_t r = 0; r < j->cur.nworld; r++)
		if (j->cur.world[r] == i)
			rank = r;
	for (int t = 0; j->cur.plan && rank >= 0 && t < j->cur.plan->ntables && len + 1 < n; t++)
		for (int k = 0; k < j->cur.plan->tables[t].nshards; k++)
			if (j->cur.plan->tables[t].shards[k].rank == rank) {
				len += (size_t)snprintf(buf + len, n - len, "%s'%s'", len ? ", " : "", j->cur.plan->tables[t].name);
				break;
			}
	if (len >= n)
		buf[n - 1] = 0;
}

/* ---- what the membership source reports ----------------------------------------------- */

int rs__member_early_exit(rs_job *j, const char *name, int exited)
{
	size_t k = 0;
	while (k < j->mem.nearly && strcmp(j->mem.early[k].name, name))
		k++;
	if (!exited) { /* it joined: it starts counting again */
		if (k < j->mem.nearly)
			j->mem.early[k] = j->mem.early[--j->mem.nearly];
		return 0;
	}
	if (k == j->mem.nearly) {
		if (rs_grow(&j->mem.early, &j->mem.early_cap, k + 1, sizeof(*j->mem.early)) != RS_OK)
			return 0; /* out of memory: not counted; the join timeout still ends the start */
		snprintf(j->mem.early[k].name, sizeof(j->mem.early[k].name), "%s", name);
		j->mem.early[k].n = 0;
		j->mem.nearly++;
	}
	return ++j->mem.early[k].n;
}

void rs_job_exited(rs_job *j, const char *name, const char *uid, int clean, const char *how)
{
	int i = rs__member_find(j, name);
	if (i >= 0 && !rs_incarnation_of_pod(j->mem.v[i].incarnation, uid)) {
		/* the pod was replaced and its successor's worker joined before the deletion was seen: that one runs on */
		char words[512];
		snprintf(words, sizeof(words), "%s (an earlier pod of that name): %s; the worker that joined since is another "
			 "pod's, and runs on", name, how);
		RS_INFO("%s", words);
		if (j->src.event) /* the pod's loss is news all the same (kubectl describe) */
			j->src.event(j->src.ctx, 1, "WorkerLost", words);
		return;
	}
	if (i < 0) {
		if (clean)
			return;
		RS_WARN("%s %s before it joined", name, how);
		int n = j->ph == P_STARTING && j->src.early_exits_max > 0 ? rs__member_early_exit(j, name, 1) : 0;
		if (n >= j->src.early_exits_max && n > 0)
			rs__job_fail(j, "%s %s before it joined, %d times in a row (its output above says why)", name, how, n);
		return;
	}
	member *m = &j->mem.v[i];
	m->exited = 1;
	m->killed = clean == 0 && strstr(how, "signal") != NULL;
	int left = clean == 1 || m->st == M_DONE;
	/* a member that finished, or handed its rows over and left, goes quietly */
	int quiet = m->st == M_DONE || (m->st == M_COMMITTED && !rs__member_in_world(j, i));
	rs__emit(j, &(job_event){.kind = EV_MEMBER, .what = left ? "left" : "lost", .name = name, .detail = how,
				 .quiet = quiet});
	if (!rs__member_in_world(j, i))
		rs__members_changed(j);
}
