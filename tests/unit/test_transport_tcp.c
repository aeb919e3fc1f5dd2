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
#include "tests/unit/world_harness.h"
#include "worker/transport_tcp.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
		world_run(&w);
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
	double t0 = world_now();
	for (int i = 0; i < 100000; i++) {
		rs_status s = rs_transport_allreduce_sum(t, v, 1024);
		if (s != RS_OK) {
			fprintf(stderr, "rank %d: after %.2f s: %s: %s\n", rank, world_now() - t0, rs_status_str(s),
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
	world_run(&w);
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
	world_run(&w);
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
	world_run(&w);
	assert_int_equal(w.exit_code[0], 11); /* timed out, nobody refused */
}

static void test_strangers_refused(void **state)
{
	(void)state;
	world w = {.n = 2, .timeout_ms = 1000, .absent = -1, .bad_token = 1, .bad_generation = -1, .reap_last = -1,
		   .body = expect_create_failure};
	world_run(&w);
	assert_int_equal(w.exit_code[0], 10); /* timed out, having refused the stranger */
	assert_int_equal(w.exit_code[1], 21);
	world g = {.n = 2, .timeout_ms = 1000, .absent = -1, .bad_token = -1, .bad_generation = 1, .reap_last = -1,
		   .body = expect_create_failure};
	world_run(&g);
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
	double t0 = world_now();
	rs_status s = rs_transport_exchange(t, NULL, 0, &r, 1);
	double took = world_now() - t0;
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
	world_run(&w);
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
	world_run(&w);
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
