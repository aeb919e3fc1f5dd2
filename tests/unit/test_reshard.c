/*
 * test_reshard.c - tests rs_trainer_reshard (worker/train.c) with worker
 * processes on loopback: training on 2 workers, growing to 4 at step 50 and
 * shrinking to 3 at step 120 (every generation a new transport over the
 * union of old and new members; joining workers start empty, the leaving
 * one hands its rows over and exits) ends, after 200 steps, with the same
 * weights as 200 steps on 2 workers, for tables of every sharding type and
 * a ZCH table: nothing was lost, duplicated or reset by the moves. And a
 * move corrupted in flight makes every member abort the reshard, while the
 * old members carry on with their old model as if nothing had happened.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/plan.h"
#include "common/planner.h"
#include "tests/unit/dumps.h"
#include "tests/unit/world_harness.h"
#include "worker/train.h"
#include "worker/transport_tcp.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GENS 3
static const int32_t world_of[GENS] = {2, 4, 3};
static const int64_t first_step[GENS + 1] = {0, 50, 120, 200};

/* A small model with a table of every sharding type and a ZCH table small enough to evict. */
static const char *config_path = "tests/data/train-model.json";

static rs_config *cfg;
static rs_plan *plans[GENS];
static char dir[64];
static int lfd[GENS][MAXW];
static char addr_buf[GENS][MAXW][32];
static const char *addrs[GENS][MAXW];

static int32_t union_of(int g) { return g == 0 ? world_of[0] : world_of[g] > world_of[g - 1] ? world_of[g] : world_of[g - 1]; }

static int setup(void **state)
{
	(void)state;
	rs_err err = {0};
	snprintf(dir, sizeof(dir), "/tmp/rs-test-reshard-%d", (int)getpid());
	if (mkdir(dir, 0700) != 0 || rs_config_load(config_path, &cfg, &err) != RS_OK)
		return -1;
	for (int g = 0; g < GENS; g++) {
		rs_world w = rs_world_make(cfg, world_of[g], 0, 0, 0);
		int32_t map[MAXW];
		if (g > 0 && rs_planner_rank_map(world_of[g - 1], world_of[g], NULL, 0, map, &err) != RS_OK)
			return -1;
		if (rs_planner_plan(cfg, &w, g ? plans[g - 1] : NULL, g ? map : NULL, &plans[g], &err) != RS_OK)
			return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	for (int g = 0; g < GENS; g++)
		rs_plan_free(plans[g]);
	rs_config_free(cfg);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* One rank through every generation it belongs to. */
static int elastic_rank(int32_t r)
{
	rs_trainer *tr = NULL;
	rs_transport *uni = NULL, *t = NULL;
	rs_err err = {0};
	for (int g = 0; g < GENS; g++) {
		if (r >= union_of(g))
			continue; /* not a member yet */
		for (int32_t o = 0; o < union_of(g); o++)
			if (o != r)
				close(lfd[g][o]);
		rs_tcp_config tc = {.rank = r, .world = union_of(g), .addrs = addrs[g], .listen_fd = lfd[g][r],
				    .token = "s3cret", .generation = (uint64_t)g + 1, .timeout_ms = 20000};
		rs_transport *nuni = NULL, *nt_t = NULL;
		rs_trainer *ntr = NULL;
		if (rs_tcp_transport_create(&tc, &nuni, &err) != RS_OK) {
			fprintf(stderr, "rank %d gen %d: %s\n", r, g, err.msg);
			return 100;
		}
		if (r < world_of[g] && rs_transport_subset(nuni, world_of[g], &nt_t) != RS_OK)
			return 101;
		rs_status st = g == 0 ? rs_trainer_create(cfg, plans[0], nt_t, &ntr, &err)
				      : rs_trainer_reshard(cfg, tr, plans[g - 1], plans[g], nuni, nt_t, &ntr, &err);
		if (st != RS_OK && rs_reshard_fault_for_tests && (st == RS_ECORRUPT || st == RS_EABORTED)) {
			/* the reshard aborted everywhere: the old members still hold the old model */
			rs_transport_destroy(nt_t);
			rs_transport_destroy(nuni);
			if (!tr)
				return 42;
			for (int64_t s = first_step[g]; s < first_step[g] + 10; s++)
				if (rs_trainer_step(tr, s, NULL) != RS_OK)
					return 105;
			char path[128];
			snprintf(path, sizeof(path), "%s/rollback-r%d", dir, r);
			int rc = rs_trainer_dump(tr, path) == RS_OK ? 0 : 104;
			rs_trainer_destroy(tr);
			rs_transport_destroy(t);
			rs_transport_destroy(uni);
			return rc;
		}
		if (st != RS_OK) {
			fprintf(stderr, "rank %d gen %d: %s\n", r, g, err.msg);
			return 102;
		}
		rs_trainer_destroy(tr);
		rs_transport_destroy(t);
		rs_transport_destroy(uni);
		tr = ntr;
		t = nt_t;
		uni = nuni;
		if (!tr)
			break; /* this rank left the world */
		for (int64_t s = first_step[g]; s < first_step[g + 1]; s++)
			if (rs_trainer_step(tr, s, NULL) != RS_OK) {
				fprintf(stderr, "rank %d step %lld: %s\n", r, (long long)s, rs_transport_error(t));
				return 103;
			}
	}
	int rc = 0;
	if (tr) {
		char path[128];
		snprintf(path, sizeof(path), "%s/elastic-r%d", dir, r);
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
	if (st != RS_OK || rs_trainer_create(cfg, plans[0], t, &tr, &err) != RS_OK) {
		fprintf(stderr, "rank %d: %s %s\n", rank, msg, err.msg);
		return 100;
	}
	for (int64_t s = 0; s < static_steps; s++)
		if (rs_trainer_step(tr, s, NULL) != RS_OK)
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

/* Start ranks 0..3 on elastic_rank and collect their exit codes. */
static void run_elastic(int *codes)
{
	for (int g = 0; g < GENS; g++)
		for (int32_t r = 0; r < union_of(g); r++) {
			int port;
			rs_err err = {0};
			assert_int_equal(rs_tcp_listen("127.0.0.1", 0, &lfd[g][r], &port, &err), RS_OK);
			snprintf(addr_buf[g][r], sizeof(addr_buf[g][r]), "127.0.0.1:%d", port);
			addrs[g][r] = addr_buf[g][r];
		}
	pid_t pid[4];
	for (int32_t r = 0; r < 4; r++) {
		pid[r] = fork();
		assert_true(pid[r] >= 0);
		if (pid[r] == 0)
			_exit(elastic_rank(r));
	}
	for (int g = 0; g < GENS; g++)
		for (int32_t r = 0; r < union_of(g); r++)
			close(lfd[g][r]);
	double deadline = world_now() + GUARD_SECONDS;
	for (int32_t r = 0; r < 4; r++) {
		int status;
		while (waitpid(pid[r], &status, WNOHANG) == 0) {
			if (world_now() > deadline) {
				for (int32_t k = 0; k < 4; k++)
					kill(pid[k], SIGKILL);
				fail_msg("rank %d hung", r);
			}
			usleep(10000);
		}
		codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	}
}

static void test_elastic_equals_static(void **state)
{
	(void)state;
	int codes[4];
	run_static(first_step[GENS]);
	run_elastic(codes);
	for (int32_t r = 0; r < 4; r++)
		if (codes[r] != 0)
			fail_msg("elastic rank %d failed (%d)", r, codes[r]);
	compare("static200", 2, "elastic", world_of[GENS - 1], "2 -> 4 -> 3 vs static 2");
}

/* A corrupted move: every member aborts generation 2; ranks 0 and 1 go on with the old plan for 10 steps. */
static void test_corrupt_move_aborts_and_rolls_back(void **state)
{
	(void)state;
	int codes[4];
	run_static(first_step[1] + 10);
	rs_reshard_fault_for_tests = 1;
	run_elastic(codes);
	rs_reshard_fault_for_tests = 0;
	for (int32_t r = 0; r < 4; r++)
		if (codes[r] != (r < 2 ? 0 : 42))
			fail_msg("rank %d exited %d", r, codes[r]);
	compare("static60", 2, "rollback", 2, "after an aborted reshard vs static 2");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_elastic_equals_static),
		cmocka_unit_test(test_corrupt_move_aborts_and_rolls_back),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
