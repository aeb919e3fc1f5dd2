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
#include "worker/transport_tcp.h"
#include "tests/unit/scratch.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int g = 0; g < GENS; g++)
		rs_plan_free(plans[g]);
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

/* One member through every generation it belongs to. */
static int elastic_member(int m)
{
	rs_trainer *tr = NULL;
	rs_transport *uni = NULL, *t = NULL;
	rs_err err = {0};
	uint64_t sums[64];
	for (int g = 0; g < GENS; g++) {
		int32_t u = union_rank(g, m);
		if (u < 0)
			continue; /* not a member yet */
		for (int32_t o = 0; o < union_size(g); o++)
			if (o != u)
				close(lfd[g][o]);
		rs_tcp_config tc = {.rank = u, .world = union_size(g), .addrs = addrs[g], .listen_fd = lfd[g][u],
				    .token = "s3cret", .generation = (uint64_t)g + 1, .timeout_ms = 20000};
		rs_transport *nuni = NULL, *nt_t = NULL;
		rs_trainer *ntr = NULL;
		rs_reshard_stats rst;
		if (rs_tcp_transport_create(&tc, &nuni, &err) != RS_OK) {
			fprintf(stderr, "member %d gen %d: %s\n", m, g, err.msg);
			return 100;
		}
		if (u < world_of[g] && rs_transport_subset(nuni, world_of[g], &nt_t) != RS_OK)
			return 101;
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
				if (!tr)
					return 42;
				for (int64_t s = first_step[g]; s < first_step[g] + 10; s++)
					if (rs_trainer_step(tr, s, NULL, NULL) != RS_OK)
						return 105;
				char path[128];
				snprintf(path, sizeof(path), "%s/rollback-r%d", dir, u);
				int rc = rs_trainer_dump(tr, path) == RS_OK ? 0 : 104;
				rs_trainer_destroy(tr);
				rs_transport_destroy(t);
				rs_transport_destroy(uni);
				return rc;
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
		for (int64_t s = first_step[g]; s < first_step[g + 1]; s++)
			if (rs_trainer_step(tr, s, NULL, &err) != RS_OK) {
				fprintf(stderr, "member %d step %lld: %s\n", m, (long long)s, err.msg);
				return 103;
			}
	}
	int rc = 0;
	if (tr) {
		char path[128];
		snprintf(path, sizeof(path), "%s/elastic-r%d", dir, union_rank(GENS - 1, m));
		rc = rs_trainer_dump(tr, path) == RS_OK ? 0 : 104;
	}
	rs_trainer_destroy(tr);
	rs_transport_destroy(t);
	rs_transport_destroy(uni);
	return rc;
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

/* Start members 0..3 on elastic_member and collect their exit codes. */
static void run_elastic(int *codes)
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
			_exit(elastic_member(m));
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

static void test_elastic_equals_static(void **state)
{
	(void)state;
	int codes[MEMBERS];
	run_static(first_step[GENS]);
	run_elastic(codes);
	for (int m = 0; m < MEMBERS; m++)
		if (codes[m] != 0)
			fail_msg("member %d failed (%d)", m, codes[m]);
	compare("static200", 2, "elastic", world_of[GENS - 1], "2 -> 4 -> 3 vs static 2");
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
	}
}

/* With fault hook `fault` planted, every member aborts generation 2; members 0 and 1 go on with the old plan. */
static void assert_fault_rolls_back(int fault)
{
	int codes[MEMBERS];
	run_static(first_step[1] + 10);
	rs_reshard_fault_for_tests = fault;
	run_elastic(codes);
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
	assert_fault_rolls_back(1);
}

/* A damaged copy of the dense network at a joiner: caught by its CRC, the attempt aborts as for a chunk. */
static void test_corrupt_dense_network_aborts(void **state)
{
	(void)state;
	assert_fault_rolls_back(2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_elastic_equals_static),
		cmocka_unit_test(test_corrupt_chunk_aborts_and_rolls_back),
		cmocka_unit_test(test_corrupt_dense_network_aborts),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
