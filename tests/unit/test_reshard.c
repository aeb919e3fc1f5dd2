/*
 * test_reshard.c - tests live resharding (worker/reshard.c) with worker
 * processes on loopback. Four member processes go through three
 * generations: members 0 and 1 train; members 2 and 3 join at step 50; at
 * step 120 member 1 drains and leaves (not the highest rank: the survivors
 * are renumbered, as after a graceful leave). Every generation stages the
 * new trainer over the union of old and new members in small chunks, the
 * members vote on the outcome over the union (the coordinator's part in a
 * real job), and commit. The test checks that, after 200 steps, the weights
 * equal those of 200 steps on 2 workers, for tables of every sharding type
 * and a ZCH table; that the whole-model checksum is the same before and
 * after each reshard (nothing lost or duplicated); that the bytes the
 * members sent and received equal the plan diff's; and that a chunk
 * corrupted in flight makes every member abort, the old members carrying on
 * with their old model as if nothing had happened.
 *
 * The same run with pre-copy: the old members start each reshard PRE steps
 * early and move rows two rounds per step while they train; at the switch
 * the rows updated since they were sent go again. The result must still
 * equal the static run's, every row the receivers hold must be the
 * senders' at the switch (the checksums), some rows must have been sent
 * again (the test exercises what it checks), and a corrupted chunk during
 * the background rounds or a corrupted delta at the switch must abort with
 * the old model intact. Once more with the hot rows exactly the moving
 * ones (every sample's IDs drawn from the rows the next reshard moves):
 * equal to the static run on the same samples, most moving rows sent again.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/plan.h"
#include "common/plandiff.h"
#include "common/planner.h"
#include "tests/unit/dumps.h"
#include "tests/unit/world_harness.h"
#include "worker/train.h"
#include "worker/train_internal.h"
#include "worker/transport_tcp.h"
#include "tests/unit/scratch.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GENS 3
#define MEMBERS 4
#define CHUNK_BYTES 4096 /* small, so that every move goes in many chunks and rounds */
static const int32_t world_of[GENS] = {2, 4, 3};
static const int64_t first_step[GENS + 1] = {0, 50, 120, 200};
/* union rank -> member, per generation: the new world first, then who leaves */
static const int union_member[GENS][MEMBERS] = {{0, 1, -1, -1}, {0, 1, 2, 3}, {0, 2, 3, 1}};
static const int32_t removed_at[GENS] = {-1, -1, 1}; /* old rank that leaves (-1: none or the highest) */

/* A small model with a table of every sharding type and a ZCH table small enough to evict. */
static const char *config_path = "tests/data/train-model.json";

static rs_config *cfg;
static rs_plan *plans[GENS];
static int32_t union_of_old[GENS][MEMBERS]; /* old rank -> union rank */
static char dir[64];
static int lfd[GENS][MEMBERS];
static char addr_buf[GENS][MEMBERS][32];
static const char *addrs[GENS][MEMBERS];

static int32_t union_size(int g)
{
	int32_t n = 0;
	while (n < MEMBERS && union_member[g][n] >= 0)
		n++;
	return n;
}

/* Where member m sits in generation g's union, or -1. */
static int32_t union_rank(int g, int m)
{
	for (int32_t u = 0; u < union_size(g); u++)
		if (union_member[g][u] == m)
			return u;
	return -1;
}

/*
 * Hot rows that are the moving ones: with `hot` set, every trainer reads
 * its samples through this source, the synthetic ones with each ID of a
 * plain table replaced by one of the rows the next reshard moves (the
 * first reshard's before step first_step[1], the second's after it), so
 * the rows the background rounds send are the rows every step updates.
 */
static int hot;
static int64_t *hot_rows[GENS][64], nhot[GENS][64]; /* per reshard g >= 1, per table: the rows it moves */

typedef struct hot_data {
	rs_data base;
	rs_data *inner;
} hot_data;

static rs_status hot_fill(rs_data *d, int64_t first, int32_t count, rs_batch *b)
{
	hot_data *h = (hot_data *)d;
	RSCHECK(rs_data_fill(h->inner, first, count, b));
	int g = first / cfg->train.global_batch < first_step[1] ? 1 : 2;
	for (int t = 0, f = 0; t < cfg->ntables; f += cfg->tables[t].nfeatures, t++)
		for (int k = 0; nhot[g][t] > 0 && !cfg->tables[t].has_zch && k < cfg->tables[t].nfeatures; k++)
			for (int32_t i = 0; i < b->offsets[f + k][count]; i++)
				b->ids[f + k][i] = hot_rows[g][t][b->ids[f + k][i] % nhot[g][t]];
	return RS_OK;
}

static double hot_teacher(rs_data *d, int64_t sample) { return ((hot_data *)d)->inner->ops->teacher_prob(((hot_data *)d)->inner, sample); }

static void hot_destroy(rs_data *d)
{
	rs_data_close(((hot_data *)d)->inner);
	free(d);
}

static const rs_data_ops hot_ops = {.name = "hot", .fill = hot_fill, .teacher_prob = hot_teacher, .destroy = hot_destroy};

/* With `hot` set: tr reads through the hot source (once; a trainer that shares its old one's source has it). */
static void hot_install(rs_trainer *tr)
{
	if (!hot || !tr || tr->data->ops == &hot_ops)
		return;
	hot_data *h = malloc(sizeof(*h));
	if (!h)
		abort();
	h->base = (rs_data){.ops = &hot_ops, .nfeatures = tr->data->nfeatures};
	h->inner = tr->data;
	tr->data = &h->base;
}

/* The rows each reshard moves, per table (from the plan diff). */
static int hot_setup(void)
{
	for (int g = 1; g < GENS; g++) {
		int32_t map[MEMBERS];
		rs_move *mv = NULL;
		int nmv = 0;
		rs_err err = {0};
		for (int32_t r = 0; r < world_of[g - 1]; r++)
			map[r] = union_of_old[g][r] < world_of[g] ? union_of_old[g][r] : -1;
		if (rs_plan_diff(cfg, plans[g - 1], plans[g], map, &mv, &nmv, &err) != RS_OK)
			return -1;
		for (int t = 0; t < cfg->ntables; t++) {
			char *moving = calloc((size_t)cfg->tables[t].rows, 1);
			hot_rows[g][t] = malloc(sizeof(int64_t) * (size_t)cfg->tables[t].rows);
			if (!moving || !hot_rows[g][t])
				return -1;
			for (int i = 0; i < nmv; i++)
				for (int64_t r = mv[i].row_offset; mv[i].table == t && r < mv[i].row_offset + mv[i].rows; r++)
					moving[r] = 1;
			for (int64_t r = 0; r < cfg->tables[t].rows; r++)
				if (moving[r])
					hot_rows[g][t][nhot[g][t]++] = r;
			free(moving);
		}
		free(mv);
	}
	return 0;
}

static int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	if (rs_scratch_make(dir, sizeof(dir), "reshard") != 0 || rs_config_load(config_path, &cfg, &err) != RS_OK)
		return -1;
	for (int g = 0; g < GENS; g++) {
		rs_world w = rs_world_make(cfg, world_of[g], 0, 0, 0);
		int32_t map[MEMBERS];
		if (g > 0 && rs_planner_rank_map(world_of[g - 1], world_of[g], removed_at[g] >= 0 ? &removed_at[g] : NULL,
						 removed_at[g] >= 0, map, &err) != RS_OK)
			return -1;
		if (rs_planner_plan(cfg, &w, g ? plans[g - 1] : NULL, g ? map : NULL, &plans[g], &err) != RS_OK)
			return -1;
		for (int32_t r = 0; g > 0 && r < world_of[g - 1]; r++)
			union_of_old[g][r] = union_rank(g, union_member[g - 1][r]);
	}
	return hot_setup();
}

static int teardown(void **state)
{
	(void)state;
	for (int g = 0; g < GENS; g++) {
		rs_plan_free(plans[g]);
		for (int t = 0; t < 64; t++)
			free(hot_rows[g][t]);
	}
	rs_config_free(cfg);
	return rs_scratch_remove(dir);
}

/* Append "TAG G v0 v1 ..." to this member's record file. */
static void record(int m, const char *tag, int g, const uint64_t *v, int n)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/record-m%d", dir, m);
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	fprintf(f, "%s %d", tag, g);
	for (int i = 0; i < n; i++)
		fprintf(f, " %" PRIu64, v[i]);
	fputc('\n', f);
	fclose(f);
}

/*
 * The coordinator's part, played through files: member m of generation g's
 * union votes, then waits for every member's vote. 1 when all staged, 0
 * when one did not, -1 when a vote never came.
 */
static int vote(int g, int m, int32_t members, int ok)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/vote-g%d-m%d", dir, g, m);
	FILE *f = fopen(path, "w");
	if (!f || fputc(ok ? '1' : '0', f) == EOF || fclose(f) != 0)
		return -1;
	int all = 1;
	for (int32_t u = 0; u < members; u++) {
		snprintf(path, sizeof(path), "%s/vote-g%d-m%d", dir, g, union_member[g][u]);
		int v = -1;
		for (double until = world_now() + 60; v < 0 && world_now() < until;) {
			FILE *in = fopen(path, "r");
			v = in ? fgetc(in) : -1;
			if (in)
				fclose(in);
			if (v < 0)
				usleep(2000);
		}
		if (v < 0)
			return -1;
		all &= v == '1';
	}
	return all;
}

/* Member m's transports of generation g: the union's, and the new world's when it is in it. */
static int connect_union(int g, int m, rs_transport **uni, rs_transport **t)
{
	int32_t u = union_rank(g, m);
	rs_err err = {0};
	for (int32_t o = 0; o < union_size(g); o++)
		if (o != u)
			close(lfd[g][o]);
	rs_tcp_config tc = {.rank = u, .world = union_size(g), .addrs = addrs[g], .listen_fd = lfd[g][u],
			    .token = "s3cret", .generation = (uint64_t)g + 1, .timeout_ms = 20000};
	*uni = *t = NULL;
	if (rs_tcp_transport_create(&tc, uni, &err) != RS_OK) {
		fprintf(stderr, "member %d gen %d: %s\n", m, g, err.msg);
		return 100;
	}
	if (u < world_of[g] && rs_transport_subset(*uni, world_of[g], t) != RS_OK)
		return 101;
	return 0;
}

/* After an aborted reshard into generation g: old member u trains 10 more steps on its old model, dumps it. */
static int roll_back(int g, int32_t u, rs_trainer *tr, rs_transport *t, rs_transport *uni)
{
	char path[128];
	int rc = 0;
	for (int64_t s = first_step[g]; rc == 0 && s < first_step[g] + 10; s++)
		if (rs_trainer_step(tr, s, NULL, NULL) != RS_OK)
			rc = 105;
	snprintf(path, sizeof(path), "%s/rollback-r%d", dir, u);
	if (rc == 0 && rs_trainer_dump(tr, path) != RS_OK)
		rc = 104;
	rs_trainer_destroy(tr);
	rs_transport_destroy(t);
	rs_transport_destroy(uni);
	return rc;
}

/* Whole pages of [a, b): in *pages, and of those, resident ones in *resident. */
static void count_pages(char *a, char *b, uint64_t *pages, uint64_t *resident)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t p0 = ((uintptr_t)a + page - 1) / page * page, p1 = (uintptr_t)b / page * page;
	if (p1 <= p0)
		return;
	size_t n = (p1 - p0) / page;
	unsigned char *vec = malloc(n);
	if (!vec || mincore((void *)p0, p1 - p0, vec) != 0) {
		*resident += n; /* unknown counts against */
		free(vec);
		return;
	}
	*pages += n;
	for (size_t i = 0; i < n; i++)
		*resident += vec[i] & 1;
	free(vec);
}

/*
 * Once generation g's commit has freed what it listed: the whole pages of
 * tr's shard memory outside the rows its shards use (those of rows that
 * moved away), and how many of them are still resident (should be none).
 */
static void record_outside(int m, int g, rs_trainer *tr)
{
	uint64_t v[2] = {0, 0};
	rs__later_wait(tr);
	for (int i = 0; i < tr->nshards; i++) {
		rs__mem *mem[2] = {tr->shards[i].wmem, tr->shards[i].smem};
		char *lo, *hi;
		for (int k = 0; k < 2; k++)
			if (mem[k] && rs__mem_used(tr, mem[k], &lo, &hi)) {
				count_pages(mem[k]->base, lo, &v[0], &v[1]);
				count_pages(hi, (char *)mem[k]->base + mem[k]->len, &v[0], &v[1]);
			}
	}
	record(m, "outside", g, v, 2);
}

/* Member m's end (rc so far): its final model dumped as TAG-rN (N its last rank), when it has one; the exit code. */
static int dump_and_end(int m, const char *tag, rs_trainer *tr, rs_transport *t, rs_transport *uni, int rc)
{
	if (tr && rc == 0) {
		char path[128];
		snprintf(path, sizeof(path), "%s/%s-r%d", dir, tag, union_rank(GENS - 1, m));
		rc = rs_trainer_dump(tr, path) == RS_OK ? 0 : 104;
	}
	rs_trainer_destroy(tr);
	rs_transport_destroy(t);
	rs_transport_destroy(uni);
	return rc;
}

/* One member through every generation it belongs to. */
static int elastic_member(int m)
{
	rs_trainer *tr = NULL;
	rs_transport *uni = NULL, *t = NULL;
	rs_err err = {0};
	uint64_t sums[64];
	for (int g = 0; g < GENS; g++) {
		if (union_rank(g, m) < 0)
			continue; /* not a member yet */
		rs_transport *nuni = NULL, *nt_t = NULL;
		rs_trainer *ntr = NULL;
		rs_reshard_stats rst;
		int rc = connect_union(g, m, &nuni, &nt_t);
		if (rc)
			return rc;
		rs_status st;
		if (g == 0) {
			st = rs_trainer_create(cfg, plans[0], nt_t, NULL, &ntr, &err);
		} else {
			rs_reshard_spec spec = {.old_plan = plans[g - 1], .new_plan = plans[g], .union_of_old = union_of_old[g],
						.uni = nuni, .train_t = nt_t, .chunk_bytes = CHUNK_BYTES};
			if (tr) {
				rs_trainer_checksum(tr, sums);
				record(m, "before", g, sums, cfg->ntables);
			}
			st = rs_trainer_stage(cfg, tr, &spec, &ntr, &rst, &err);
			if (st != RS_OK)
				fprintf(stderr, "member %d gen %d: %s\n", m, g, err.msg);
			/* the vote the coordinator holds in a real job: commit only when every member staged */
			if (st != RS_OK)
				rs_transport_abort(nuni); /* the others must not wait for this member's chunks */
			int ok = vote(g, m, union_size(g), st == RS_OK);
			if (ok < 0)
				return 106;
			if (!ok) {
				/* aborted everywhere: the old members still hold the old model */
				rs_trainer_destroy(ntr);
				rs_transport_destroy(nt_t);
				rs_transport_destroy(nuni);
				return tr ? roll_back(g, union_rank(g, m), tr, t, uni) : 42;
			}
			uint64_t moved[2] = {rst.sent_bytes, rst.recv_bytes};
			record(m, "moved", g, moved, 2);
			if (ntr) {
				rs_trainer_checksum(ntr, sums);
				record(m, "after", g, sums, cfg->ntables);
			}
		}
		if (st != RS_OK) {
			fprintf(stderr, "member %d gen %d: %s\n", m, g, err.msg);
			return 102;
		}
		rs_trainer_commit(ntr, tr);
		rs_transport_destroy(t);
		rs_transport_destroy(uni);
		tr = ntr;
		t = nt_t;
		uni = nuni;
		if (!tr)
			break; /* this member left the world */
		record_outside(m, g, tr);
		for (int64_t s = first_step[g]; s < first_step[g + 1]; s++)
			if (rs_trainer_step(tr, s, NULL, &err) != RS_OK) {
				fprintf(stderr, "member %d step %lld: %s\n", m, (long long)s, err.msg);
				return 103;
			}
	}
	return dump_and_end(m, "elastic", tr, t, uni, 0);
}

#define PRE 12 /* pre-copy starts this many steps before each switch */

/* A member whose part failed closes its connections: the others fail at once (RS_EPEER), not at a timeout. */
static void drop_union(rs_transport **nuni, rs_transport **nt_t)
{
	rs_transport_destroy(*nt_t);
	rs_transport_destroy(*nuni);
	*nuni = *nt_t = NULL;
}

/*
 * Pre-copy, for old member m: its part of generation g starts: the union's
 * transports, and the background copy (*pc NULL and 1 returned if either
 * failed: the member votes no at the switch).
 */
static int precopy_start(int g, int m, rs_trainer *tr, rs_transport **nuni, rs_transport **nt_t, rs_precopy **pc)
{
	rs_err err = {0};
	int rc = connect_union(g, m, nuni, nt_t);
	if (rc)
		return rc;
	rs_reshard_spec spec = {.old_plan = plans[g - 1], .new_plan = plans[g], .union_of_old = union_of_old[g],
				.uni = *nuni, .train_t = *nt_t, .chunk_bytes = CHUNK_BYTES};
	if (rs_precopy_begin(cfg, tr, &spec, pc, &err) != RS_OK) {
		fprintf(stderr, "member %d gen %d: %s\n", m, g, err.msg);
		drop_union(nuni, nt_t);
		return -1;
	}
	return 0;
}

/* n background rounds (all that are left when n < 0); on a failure, the copy stops and the others are told. */
static void precopy_rounds(int m, rs_precopy **pc, rs_transport **nuni, rs_transport **nt_t, int n)
{
	rs_err err = {0};
	for (int r = 0; *pc && rs_precopy_pending(*pc) > 0 && (n < 0 || r < n); r++)
		if (rs_precopy_round(*pc, &err) != RS_OK) {
			fprintf(stderr, "member %d: background round: %s\n", m, err.msg);
			rs_precopy_free(*pc);
			*pc = NULL;
			drop_union(nuni, nt_t);
		}
}

/* One member through every generation it belongs to, each reshard pre-copied over the last PRE steps before it. */
/* Whether tr's checksums (from a pre-copy's cached row hashes) equal the ones hashed afresh from every row. */
static int sums_hold(int m, const char *what, const rs_trainer *tr, const uint64_t *sums)
{
	uint64_t fresh[64] = {0};
	for (int i = 0; i < tr->nshards; i++)
		if (rs__counted(tr, i))
			fresh[tr->shards[i].table] += rs__rows_sum(tr, &tr->shards[i], 0, tr->shards[i].s.rows);
	for (int t = 0; t < cfg->ntables; t++)
		if (fresh[t] != sums[t]) {
			fprintf(stderr, "member %d, %s: table '%s': cached hashes sum to %016llx, the rows to %016llx\n", m,
				what, cfg->tables[t].name, (unsigned long long)sums[t], (unsigned long long)fresh[t]);
			return 0;
		}
	return 1;
}

static int precopy_member(int m)
{
	rs_trainer *tr = NULL;
	rs_transport *uni = NULL, *t = NULL;
	rs_err err = {0};
	uint64_t sums[64];
	int rc = 0;
	if (union_rank(0, m) >= 0) {
		if ((rc = connect_union(0, m, &uni, &t)) != 0)
			return rc;
		if (rs_trainer_create(cfg, plans[0], t, NULL, &tr, &err) != RS_OK)
			return 102;
		hot_install(tr);
	}
	for (int g = 1; g < GENS; g++) {
		rs_transport *nuni = NULL, *nt_t = NULL;
		rs_precopy *pc = NULL;
		rs_trainer *ntr = NULL;
		rs_reshard_stats rst = {0};
		if (!tr) { /* joining: the rounds back to back, each as soon as the old members send it */
			if ((rc = precopy_start(g, m, NULL, &nuni, &nt_t, &pc)) > 0)
				return rc;
			precopy_rounds(m, &pc, &nuni, &nt_t, -1);
		}
		for (int64_t s = first_step[g - 1]; tr && s < first_step[g]; s++) {
			if (s == first_step[g] - PRE && (rc = precopy_start(g, m, tr, &nuni, &nt_t, &pc)) > 0)
				return rc;
			if (rs_trainer_step(tr, s, NULL, &err) != RS_OK) {
				fprintf(stderr, "member %d step %lld: %s\n", m, (long long)s, err.msg);
				return 103;
			}
			precopy_rounds(m, &pc, &nuni, &nt_t, 2);
		}
		/* the switch: the pause of a real job */
		if (tr) {
			rs_trainer_checksum(tr, sums);
			if (!sums_hold(m, "at the pause", tr, sums))
				return 107;
			record(m, "before", g, sums, cfg->ntables);
		}
		int staged = pc && rs_precopy_finish(pc, &ntr, &rst, &err) == RS_OK;
		int copying = pc != NULL;
		rs_precopy_free(pc);
		if (!staged && copying) {
			fprintf(stderr, "member %d gen %d: %s\n", m, g, err.msg);
			drop_union(&nuni, &nt_t);
		}
		int ok = vote(g, m, union_size(g), staged);
		if (ok < 0)
			return 106;
		if (!ok) {
			rs_trainer_destroy(ntr);
			rs_transport_destroy(nt_t);
			rs_transport_destroy(nuni);
			return tr ? roll_back(g, union_rank(g, m), tr, t, uni) : 42;
		}
		uint64_t moved[2] = {rst.sent_bytes, rst.recv_bytes}, again[2] = {rst.dirty_rows,
										   (uint64_t)rst.background_rounds};
		record(m, "moved", g, moved, 2);
		record(m, "again", g, again, 2);
		if (ntr) {
			rs_trainer_checksum(ntr, sums);
			if (!sums_hold(m, "staged", ntr, sums))
				return 108;
			record(m, "after", g, sums, cfg->ntables);
		}
		rs_trainer_commit(ntr, tr);
		rs_transport_destroy(t);
		rs_transport_destroy(uni);
		tr = ntr, t = nt_t, uni = nuni;
		if (!tr)
			break; /* this member left the world */
		record_outside(m, g, tr);
		hot_install(tr); /* a joiner's trainer opened its own source */
	}
	for (int64_t s = first_step[GENS - 1]; tr && rc == 0 && s < first_step[GENS]; s++)
		if (rs_trainer_step(tr, s, NULL, &err) != RS_OK)
			rc = 103;
	return dump_and_end(m, hot ? "hot" : "precopy", tr, t, uni, rc);
}

static int64_t static_steps;

static int static_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	rs_trainer *tr;
	rs_err err = {0};
	char path[128];
	if (st != RS_OK || rs_trainer_create(cfg, plans[0], t, NULL, &tr, &err) != RS_OK) {
		fprintf(stderr, "rank %d: %s %s\n", rank, msg, err.msg);
		return 100;
	}
	hot_install(tr);
	for (int64_t s = 0; s < static_steps; s++)
		if (rs_trainer_step(tr, s, NULL, NULL) != RS_OK)
			return 101;
	snprintf(path, sizeof(path), "%s/static%lld-r%d", dir, (long long)static_steps, rank);
	int rc = rs_trainer_dump(tr, path) == RS_OK ? 0 : 102;
	rs_trainer_destroy(tr);
	return rc;
}

static void run_static(int64_t steps)
{
	world ws = {.n = 2, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		    .body = static_body};
	static_steps = steps;
	world_run(&ws);
	assert_int_equal(ws.exit_code[0], 0);
	assert_int_equal(ws.exit_code[1], 0);
}

static void compare(const char *tag_a, int ranks_a, const char *tag_b, int ranks_b, const char *what)
{
	size_t na = 0, nb = 0;
	float **a = dumps_assemble(cfg, dir, tag_a, ranks_a, &na);
	float **b = dumps_assemble(cfg, dir, tag_b, ranks_b, &nb);
	assert_true(na == nb && na > 0);
	double worst = 0;
	for (int i = 0; i <= cfg->ntables; i++) {
		size_t n = i < cfg->ntables ? (size_t)(cfg->tables[i].rows * cfg->tables[i].dim) : na;
		double d = dumps_max_rel_diff(a[i], b[i], n);
		worst = d > worst ? d : worst;
		if (d > 1e-5)
			fail_msg("%s: %s differs by %.3g (relative)", what, i < cfg->ntables ? cfg->tables[i].name : "dense", d);
	}
	print_message("%s: max relative difference %.3g\n", what, worst);
	dumps_free(cfg, a);
	dumps_free(cfg, b);
}

/* Start members 0..3 on `member` and collect their exit codes. */
static void run_members(int (*member)(int), int *codes)
{
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -f %s/record-m* %s/vote-*", dir, dir);
	assert_int_equal(system(cmd), 0);
	for (int g = 0; g < GENS; g++)
		for (int32_t u = 0; u < union_size(g); u++) {
			int port;
			rs_err err = {0};
			assert_int_equal(rs_tcp_listen("127.0.0.1", 0, &lfd[g][u], &port, &err), RS_OK);
			snprintf(addr_buf[g][u], sizeof(addr_buf[g][u]), "127.0.0.1:%d", port);
			addrs[g][u] = addr_buf[g][u];
		}
	pid_t pid[MEMBERS];
	for (int m = 0; m < MEMBERS; m++) {
		pid[m] = fork();
		assert_true(pid[m] >= 0);
		if (pid[m] == 0)
			_exit(member(m));
	}
	for (int g = 0; g < GENS; g++)
		for (int32_t u = 0; u < union_size(g); u++)
			close(lfd[g][u]);
	double deadline = world_now() + GUARD_SECONDS;
	for (int m = 0; m < MEMBERS; m++) {
		int status;
		while (waitpid(pid[m], &status, WNOHANG) == 0) {
			if (world_now() > deadline) {
				for (int k = 0; k < MEMBERS; k++)
					kill(pid[k], SIGKILL);
				fail_msg("member %d hung", m);
			}
			usleep(10000);
		}
		codes[m] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	}
}

/* Sum, over every member's record, the values of TAG for generation g (wrapping); returns the lines found. */
static int sum_records(const char *tag, int g, uint64_t *sum, int n)
{
	int found = 0;
	memset(sum, 0, sizeof(uint64_t) * (size_t)n);
	for (int m = 0; m < MEMBERS; m++) {
		char path[128], line[4096];
		snprintf(path, sizeof(path), "%s/record-m%d", dir, m);
		FILE *f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f)) {
			char *save, *t = strtok_r(line, " \n", &save), *gs = strtok_r(NULL, " \n", &save);
			if (!t || !gs || strcmp(t, tag) != 0 || atoi(gs) != g)
				continue;
			for (int i = 0; i < n; i++) {
				char *v = strtok_r(NULL, " \n", &save);
				sum[i] += v ? strtoull(v, NULL, 10) : 0;
			}
			found++;
		}
		if (f)
			fclose(f);
	}
	return found;
}

/* Run `member` for 2 -> 4 -> 3; the result is the static run's, and every reshard moved what it had to. */
static void check_elastic(int (*member)(int), const char *tag)
{
	int codes[MEMBERS];
	char what[64];
	run_static(first_step[GENS]);
	run_members(member, codes);
	for (int m = 0; m < MEMBERS; m++)
		if (codes[m] != 0)
			fail_msg("%s: member %d failed (%d)", tag, m, codes[m]);
	snprintf(what, sizeof(what), "%s 2 -> 4 -> 3 vs static 2", tag);
	compare("static200", 2, tag, world_of[GENS - 1], what);
	for (int g = 1; g < GENS; g++) {
		/* nothing lost or duplicated: the checksum of every table is what it was */
		uint64_t before[64], after[64];
		assert_int_equal(sum_records("before", g, before, cfg->ntables), world_of[g - 1]);
		assert_int_equal(sum_records("after", g, after, cfg->ntables), world_of[g]);
		for (int t = 0; t < cfg->ntables; t++)
			if (before[t] != after[t])
				fail_msg("generation %d: table '%s' checksum %016" PRIx64 " before, %016" PRIx64 " after", g,
					 cfg->tables[t].name, before[t], after[t]);
		/* minimal movement: what moved is the plan diff, and the diff is within the planner's bound */
		uint64_t moved[2];
		assert_int_equal(sum_records("moved", g, moved, 2), union_size(g));
		rs_move *mv = NULL;
		int nmv = 0;
		int32_t map[MEMBERS];
		rs_err err = {0};
		for (int32_t r = 0; r < world_of[g - 1]; r++)
			map[r] = union_of_old[g][r] < world_of[g] ? union_of_old[g][r] : -1;
		assert_int_equal(rs_plan_diff(cfg, plans[g - 1], plans[g], map, &mv, &nmv, &err), RS_OK);
		uint64_t diff = 0;
		for (int i = 0; i < nmv; i++)
			diff += mv[i].bytes;
		free(mv);
		print_message("generation %d: sent %" PRIu64 " B, received %" PRIu64 " B, plan diff %" PRIu64
			      " B, lower bound %" PRIu64 " B\n", g, moved[0], moved[1], diff, plans[g]->summary.min_moved_bytes);
		assert_true(diff > 0);
		assert_true(moved[0] == diff && moved[1] == diff);
		assert_true(plans[g]->summary.moved_bytes == diff);
		assert_true(diff >= plans[g]->summary.min_moved_bytes);
		/* the pages of the rows that moved away went back to the system */
		uint64_t outside[2];
		assert_int_equal(sum_records("outside", g, outside, 2), world_of[g]);
		print_message("generation %d: %" PRIu64 " pages of shard memory outside the rows kept, %" PRIu64
			      " still resident\n", g, outside[0], outside[1]);
		assert_true(outside[0] > 0);
		assert_int_equal(outside[1], 0);
	}
}

static void test_elastic_equals_static(void **state)
{
	(void)state;
	check_elastic(elastic_member, "elastic");
}

/*
 * Pre-copy: the same result, the same bytes in the chunks (the plan diff),
 * and rows sent again: some rows were updated after they were sent (else
 * nothing here checks that they are sent again).
 */
static void test_precopy_equals_static(void **state)
{
	(void)state;
	check_elastic(precopy_member, "precopy");
	uint64_t again[2], rows = 0, rounds = 0;
	for (int g = 1; g < GENS; g++) {
		assert_int_equal(sum_records("again", g, again, 2), union_size(g));
		print_message("generation %d: %" PRIu64 " rows sent again at the switch, %" PRIu64
			      " member-rounds in the background\n", g, again[0], again[1]);
		rows += again[0];
		rounds += again[1];
	}
	assert_true(rows > 0);
	assert_true(rounds > 0);
}

/*
 * Pre-copy where the hot rows are exactly the moving ones (hot_fill): every
 * step updates rows the background rounds have sent, and the result is
 * still the static run's (trained on the same samples).
 */
static void test_precopy_hot_rows_are_the_moving_ones(void **state)
{
	(void)state;
	hot = 1;
	check_elastic(precopy_member, "hot");
	hot = 0;
	uint64_t again[2];
	for (int g = 1; g < GENS; g++) {
		int64_t moving = 0;
		for (int t = 0; t < cfg->ntables; t++)
			moving += cfg->tables[t].has_zch ? 0 : nhot[g][t];
		assert_int_equal(sum_records("again", g, again, 2), union_size(g));
		print_message("generation %d: %" PRIu64 " rows sent again at the switch, of %" PRId64 " moving rows\n", g,
			      again[0], moving);
		assert_true(again[0] * 2 > (uint64_t)moving); /* most of them went again: what the pause sends is exercised */
	}
}

/* With fault hook `fault` planted, every member aborts generation 2; members 0 and 1 go on with the old plan. */
static void assert_fault_rolls_back(int (*member)(int), int fault)
{
	int codes[MEMBERS];
	run_static(first_step[1] + 10);
	rs_reshard_fault_for_tests = fault;
	run_members(member, codes);
	rs_reshard_fault_for_tests = 0;
	for (int m = 0; m < MEMBERS; m++)
		if (codes[m] != (m < 2 ? 0 : 42))
			fail_msg("fault %d: member %d exited %d", fault, m, codes[m]);
	compare("static60", 2, "rollback", 2, "after an aborted reshard vs static 2");
}

/* A corrupted chunk: every member aborts generation 2; members 0 and 1 go on with the old plan for 10 steps. */
static void test_corrupt_chunk_aborts_and_rolls_back(void **state)
{
	(void)state;
	assert_fault_rolls_back(elastic_member, 1);
}

/* A damaged copy of the dense network at a joiner: caught by its CRC, the attempt aborts as for a chunk. */
static void test_corrupt_dense_network_aborts(void **state)
{
	(void)state;
	assert_fault_rolls_back(elastic_member, 2);
}

/* Pre-copy: a chunk corrupted in a background round, and the rows sent again damaged at the switch. */
static void test_precopy_faults_roll_back(void **state)
{
	(void)state;
	assert_fault_rolls_back(precopy_member, 1);
	assert_fault_rolls_back(precopy_member, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_elastic_equals_static),
		cmocka_unit_test(test_corrupt_chunk_aborts_and_rolls_back),
		cmocka_unit_test(test_corrupt_dense_network_aborts),
		cmocka_unit_test(test_precopy_equals_static),
		cmocka_unit_test(test_precopy_hot_rows_are_the_moving_ones),
		cmocka_unit_test(test_precopy_faults_roll_back),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
