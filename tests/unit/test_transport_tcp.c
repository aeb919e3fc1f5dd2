/*
 * test_transport_tcp.c - tests worker/transport_tcp.c: the conformance
 * suite for 1 to 4 ranks, each a forked process on loopback; and the
 * faults: a peer killed mid-collective, a hung peer, a peer that never
 * shows up, a stranger with the wrong token or generation, an abort from
 * another thread, a desynchronized peer. Every failure must come back as a
 * status within a bounded time; the harness kills any rank still running
 * after a generous guard, which fails the test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/transport_conformance.h"
#include "worker/transport_tcp.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXW 8
#define GUARD_SECONDS 60

typedef int (*rank_body)(int32_t rank, rs_transport *t, rs_status create_st, const char *create_msg);

typedef struct world {
	int32_t n;
	int timeout_ms;
	int32_t absent;          /* a rank that never starts, or -1 */
	int32_t bad_token;       /* a rank presenting another token, or -1 */
	int32_t bad_generation;  /* a rank from another generation, or -1 */
	int32_t reap_last;       /* a rank expected to hang: killed once the others are done, or -1 */
	rank_body body;
	int exit_code[MAXW];
} world;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fork one process per rank, on pre-bound loopback ports; collect exit codes (-9 for a killed rank). */
static void run_world(world *w)
{
	int lfd[MAXW], port[MAXW];
	char addr_buf[MAXW][32];
	const char *addrs[MAXW];
	pid_t pid[MAXW] = {0};
	for (int32_t r = 0; r < w->n; r++) {
		rs_err err = {0};
		assert_int_equal(rs_tcp_listen("127.0.0.1", 0, &lfd[r], &port[r], &err), RS_OK);
		snprintf(addr_buf[r], sizeof(addr_buf[r]), "127.0.0.1:%d", port[r]);
		addrs[r] = addr_buf[r];
	}
	for (int32_t r = 0; r < w->n; r++) {
		if (r == w->absent)
			continue;
		pid[r] = fork();
		assert_true(pid[r] >= 0);
		if (pid[r] == 0) {
			for (int32_t o = 0; o < w->n; o++)
				if (o != r)
					close(lfd[o]);
			rs_tcp_config cfg = {.rank = r, .world = w->n, .addrs = addrs, .listen_fd = lfd[r],
					     .token = r == w->bad_token ? "not-the-token" : "s3cret",
					     .generation = r == w->bad_generation ? 6 : 5, .timeout_ms = w->timeout_ms};
			rs_transport *t = NULL;
			rs_err err = {0};
			rs_status st = rs_tcp_transport_create(&cfg, &t, &err);
			int rc = w->body(r, t, st, err.msg);
			rs_transport_destroy(t);
			_exit(rc);
		}
	}
	for (int32_t r = 0; r < w->n; r++)
		close(lfd[r]);
	double deadline = now_s() + GUARD_SECONDS;
	for (int32_t k = 0; k < w->n; k++) {
		/* the rank expected to hang goes last, killed after the others finished */
		int32_t r = w->reap_last < 0 ? k : k == w->n - 1 ? w->reap_last : k < w->reap_last ? k : k + 1;
		w->exit_code[r] = 0;
		if (!pid[r])
			continue;
		if (r == w->reap_last)
			kill(pid[r], SIGKILL);
		int status;
		while (waitpid(pid[r], &status, WNOHANG) == 0) {
			if (now_s() > deadline) {
				for (int32_t o = 0; o < w->n; o++)
					if (pid[o])
						kill(pid[o], SIGKILL);
				fail_msg("rank %d still running after %d s: a hang", r, GUARD_SECONDS);
			}
			usleep(10000);
		}
		w->exit_code[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
	}
}

/* ---- conformance ------------------------------------------------------------------ */

static int conformance_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	if (st != RS_OK) {
		fprintf(stderr, "rank %d: create: %s\n", rank, msg);
		return 100;
	}
	return rs_transport_conformance(t) ? 1 : 0;
}

static void test_conformance(void **state)
{
	(void)state;
	for (int32_t n = 1; n <= 4; n++) {
		world w = {.n = n, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
			   .body = conformance_body};
		run_world(&w);
		for (int32_t r = 0; r < n; r++)
			if (w.exit_code[r] != 0)
				fail_msg("world %d: rank %d exited %d", n, r, w.exit_code[r]);
	}
}

/* ---- faults ------------------------------------------------------------------------ */

/* Rank 2 dies with SIGKILL (or stops, for a hang) after the first barrier; the others keep reducing. */
static int victim_signal;

static int dying_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	if (st != RS_OK) {
		fprintf(stderr, "rank %d: create: %s\n", rank, msg);
		return 100;
	}
	if (rs_transport_barrier(t) != RS_OK)
		return 101;
	if (rank == 2)
		raise(victim_signal);
	float v[1024] = {0};
	double t0 = now_s();
	for (int i = 0; i < 100000; i++) {
		rs_status s = rs_transport_allreduce_sum(t, v, 1024);
		if (s != RS_OK) {
			fprintf(stderr, "rank %d: after %.2f s: %s: %s\n", rank, now_s() - t0, rs_status_str(s),
				rs_transport_error(t));
			return s == (victim_signal == SIGKILL ? RS_EPEER : RS_ETIMEDOUT) ? 42 : 43;
		}
	}
	return 44; /* never noticed */
}

static void test_dead_peer_aborts_others(void **state)
{
	(void)state;
	victim_signal = SIGKILL;
	world w = {.n = 3, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1, .body = dying_body};
	run_world(&w);
	assert_int_equal(w.exit_code[2], -SIGKILL);
	assert_int_equal(w.exit_code[0], 42); /* RS_EPEER, well before the 20 s timeout would fire */
	assert_int_equal(w.exit_code[1], 42);
}

static void test_hung_peer_times_out(void **state)
{
	(void)state;
	victim_signal = SIGSTOP;
	world w = {.n = 3, .timeout_ms = 1000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = 2,
		   .body = dying_body};
	run_world(&w);
	assert_int_equal(w.exit_code[0], 42);
	assert_int_equal(w.exit_code[1], 42);
}

static int expect_create_failure(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)t;
	fprintf(stderr, "rank %d: create: %s (%s)\n", rank, rs_status_str(st), msg);
	if (rank == 0)
		return st == RS_ETIMEDOUT ? (strstr(msg, "refused") ? 10 : 11) : 12;
	return st == RS_OK ? 20 : 21;
}

static void test_absent_peer(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 500, .absent = 1, .bad_token = -1, .bad_generation = -1, .reap_last = -1,
		   .body = expect_create_failure};
	run_world(&w);
	assert_int_equal(w.exit_code[0], 11); /* timed out, nobody refused */
}

static void test_strangers_refused(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 1000, .absent = -1, .bad_token = 1, .bad_generation = -1, .reap_last = -1,
		   .body = expect_create_failure};
	run_world(&w);
	assert_int_equal(w.exit_code[0], 10); /* timed out, having refused the stranger */
	assert_int_equal(w.exit_code[1], 21);
	world g = {.n = 2, .timeout_ms = 1000, .absent = -1, .bad_token = -1, .bad_generation = 1, .reap_last = -1,
		   .body = expect_create_failure};
	run_world(&g);
	assert_int_equal(g.exit_code[0], 10);
	assert_int_equal(g.exit_code[1], 21);
}

static void *abort_later(void *arg)
{
	usleep(200000);
	rs_transport_abort(arg);
	return NULL;
}

static int abort_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	if (st != RS_OK)
		return 100;
	if (rank == 1) {
		usleep(1500000); /* never sends; exits after rank 0 gave up */
		return 0;
	}
	pthread_t th;
	pthread_create(&th, NULL, abort_later, t);
	uint32_t v;
	rs_xfer r = {1, &v, sizeof(v)};
	double t0 = now_s();
	rs_status s = rs_transport_exchange(t, NULL, 0, &r, 1);
	double took = now_s() - t0;
	pthread_join(th, NULL);
	if (s != RS_EABORTED)
		return 30;
	if (rs_transport_barrier(t) != RS_EABORTED)
		return 31; /* stays aborted */
	return took < 1.0 ? 0 : 32;
}

static void test_abort_from_another_thread(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 20000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1, .body = abort_body};
	run_world(&w);
	assert_int_equal(w.exit_code[0], 0);
}

static int desync_body(int32_t rank, rs_transport *t, rs_status st, const char *msg)
{
	(void)msg;
	if (st != RS_OK)
		return 100;
	uint64_t big = 7;
	uint32_t small;
	if (rank == 0) {
		rs_xfer s = {1, &big, sizeof(big)};
		rs_status r = rs_transport_exchange(t, &s, 1, NULL, 0);
		return r == RS_OK || r == RS_EPEER ? 0 : 50;
	}
	rs_xfer r = {0, &small, sizeof(small)}; /* expects 4 bytes, gets 8 */
	return rs_transport_exchange(t, NULL, 0, &r, 1) == RS_ECORRUPT ? 0 : 51;
}

static void test_desync_detected(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 5000, .absent = -1, .bad_token = -1, .bad_generation = -1, .reap_last = -1, .body = desync_body};
	run_world(&w);
	assert_int_equal(w.exit_code[0], 0);
	assert_int_equal(w.exit_code[1], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conformance),
		cmocka_unit_test(test_dead_peer_aborts_others),
		cmocka_unit_test(test_hung_peer_times_out),
		cmocka_unit_test(test_absent_peer),
		cmocka_unit_test(test_strangers_refused),
		cmocka_unit_test(test_abort_from_another_thread),
		cmocka_unit_test(test_desync_detected),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
