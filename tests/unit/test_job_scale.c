/*
 * test_job_scale.c - the coordinator's job with a world of 1,024 members
 * (RS_SCALE_MEMBERS overrides it): the whole cycle on the job harness
 * (tests/unit/job_harness.h: members that send what real workers send,
 * in-process, without sockets or training): 1,024 join and the plan starts
 * them; a scale to 1,100 (+7.4%) pauses, stages and commits; a scale to
 * 1,000 drains 100 and commits. Each step's coordinator time and the
 * process's peak memory are printed ("bench job_cycle ..." lines, which
 * `make bench` collects through tests/bench/bench_coordinator.sh); no
 * timing is asserted.
 *
 * The times and the memory include the harness's own work (its mailboxes
 * keep every message each member got), and leave out the server's (each
 * message serialized and sent: the size of one reshard's start message,
 * which every member gets, is printed too).
 */
#include "tests/unit/job_harness.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long peak_kib(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

static int members(void)
{
	const char *v = getenv("RS_SCALE_MEMBERS");
	int n = v ? atoi(v) : 1024;
	return n >= 4 && n * 1100 / 1024 < WORKERS ? n : 1024;
}

static void say_each(int from, int to, int64_t gen, rs_msg_type t)
{
	for (int k = from; k < to; k++)
		say(k, rs_proto_make_generation(t, gen, 0, NULL));
}

static void test_cycle(void **state)
{
	(void)state;
	int n = members(), grown = n * 1100 / 1024, shrunk = n * 1000 / 1024;
	double t0 = wall();
	start(n); /* n join; the plan for n; every member gets its start */
	double t_start = wall() - t0;
	forget_mail();

	/* grow: n -> grown, one reshard */
	t0 = wall();
	to_migrating(n, grown); /* joins, pause, every old member paused at step 40, the attempt started */
	double t_pause = wall() - t0;
	char *text = json_dumps(last(0, RS_MSG_START), JSON_COMPACT); /* what the server sends each member */
	size_t start_bytes = text ? strlen(text) : 0;
	free(text);
	t0 = wall();
	all_staged(n, grown, 0);
	tick(0.01);
	assert_phase("committing");
	say_each(0, grown, 2, RS_MSG_COMMITTED);
	tick(0.01);
	assert_phase("training");
	assert_int_equal(rs_job_generation(H.job), 2);
	double t_commit = wall() - t0;
	char want[96];
	snprintf(want, sizeof(want), "generation 2 committed: %d -> %d workers", n, grown);
	assert_true(reported(want));
	forget_mail();

	/* shrink: grown -> shrunk, the members past it drained */
	t0 = wall();
	H.replicas = shrunk;
	tick(0.05);
	tick(0.2);
	for (int k = 0; k < grown; k++) {
		assert_non_null(last(k, RS_MSG_PAUSE));
		paused(k, 2, k, 80, 10 * (uint64_t)k + 1, 10 * (uint64_t)k + 2);
	}
	tick(0.01);
	tick(0.01);
	assert_phase("migrating");
	for (int k = 0; k < grown; k++) {
		json_t *s = last(k, RS_MSG_START);
		assert_non_null(s);
		assert_int_equal(field(s, "generation"), 3);
		assert_int_equal(field(s, "world"), shrunk);
	}
	say_each(0, grown, 3, RS_MSG_STAGING);
	double t_pause2 = wall() - t0;
	t0 = wall();
	uint64_t a = before_sum(grown, 0), b = before_sum(grown, 1);
	for (int k = 0; k < shrunk; k++)
		staged(k, 3, 1, 1, k ? 0 : a, k ? 0 : b);
	for (int k = shrunk; k < grown; k++)
		staged(k, 3, 1, 0, 0, 0);
	tick(0.01);
	assert_phase("committing");
	say_each(0, grown, 3, RS_MSG_COMMITTED);
	for (int k = shrunk; k < grown; k++) { /* the drained hand their rows over and exit */
		char name[32];
		snprintf(name, sizeof(name), "worker-%d", k);
		rs_job_exited(H.job, name, NULL, 1, "exited with status 0");
	}
	tick(0.01);
	assert_phase("training");
	assert_int_equal(rs_job_generation(H.job), 3);
	double t_commit2 = wall() - t0;
	snprintf(want, sizeof(want), "generation 3 committed: %d -> %d workers", grown, shrunk);
	assert_true(reported(want));
	long kib = peak_kib();
	printf("bench job_cycle_start_s members=%d %.3f\n", n, t_start);
	printf("bench job_cycle_grow_s members=%d->%d pause_and_plan %.3f stage_and_commit %.3f\n", n, grown, t_pause,
	       t_commit);
	printf("bench job_cycle_shrink_s members=%d->%d pause_and_plan %.3f stage_and_commit %.3f\n", grown, shrunk,
	       t_pause2, t_commit2);
	printf("bench job_cycle_peak_rss_mib members=%d %.1f\n", n, kib / 1024.0);
	printf("bench job_cycle_start_message_kib members=%d->%d %.1f (each member's; %.1f MiB for the world)\n", n, grown,
	       start_bytes / 1024.0, start_bytes * (double)grown / 1048576.0);
}

int main(void)
{
	if (!getenv("RS_LOG_LEVEL")) /* a line per member otherwise */
		rs_log_init("test_job_scale", RS_LOG_WARN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cycle, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
