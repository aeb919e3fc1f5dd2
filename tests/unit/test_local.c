/*
 * test_local.c - tests coordinator/local.c, local mode's worker processes:
 * a scale starts a batch of them at once and each poll of the loop the next
 * batch, so that the coordinator serves its connections between batches
 * (1,024 started in one go kept it from answering anyone for 31 s on 2
 * cores). The "worker" is a shell script that sleeps until signalled (30 s
 * at most).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "coordinator/local.h"
#include "tests/unit/scratch.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static char dir[256], bin[300];
static rs_local *L; /* stopped by the teardown too, should an assertion end the test early */

static int setup(void **state)
{
	(void)state;
	if (rs_scratch_make(dir, sizeof(dir), "local") != 0)
		return -1;
	snprintf(bin, sizeof(bin), "%s/worker.sh", dir);
	FILE *f = fopen(bin, "w");
	if (!f)
		return -1;
	/* gone in 30 s at most, should a failed test leave it running */
	fputs("#!/bin/sh\ntrap 'exit 0' TERM\nfor i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do sleep 2; done\n", f);
	return fclose(f) == 0 && chmod(bin, 0700) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	if (L) {
		rs_err err = {0};
		rs_local_scale(L, 0, &err);
		rs_local_stop_all(L, 5000);
		rs_local_destroy(L);
	}
	return rs_scratch_remove(dir);
}

/* How many workers have a process; with name, whether that one has. */
static int running_named(rs_local *l, const char *name)
{
	const char *names[64];
	int64_t pids[64];
	int n = rs_local_list(l, names, pids, 64);
	if (!name)
		return n;
	for (int i = 0; i < n && i < 64; i++)
		if (!strcmp(names[i], name))
			return 1;
	return 0;
}
static int running(rs_local *l) { return running_named(l, NULL); }

/* 20 wanted: 8 at the scale, 8 more at each poll, none past 20; a scale down wants the rest no more. */
static void test_starts_in_batches(void **state)
{
	(void)state;
	rs_local_options o = {.worker_bin = bin, .url = "ws://127.0.0.1:1", .config = "none.json", .token = "t",
			      .timeout_ms = 1000, .grace_ms = 1000};
	rs_err err = {0};
	assert_int_equal(rs_local_create(&o, &L, &err), RS_OK);
	rs_local *l = L;
	assert_int_equal(rs_local_scale(l, 20, &err), RS_OK);
	assert_int_equal(running(l), 8);
	rs_local_poll(l, NULL, NULL);
	assert_int_equal(running(l), 16);
	rs_local_poll(l, NULL, NULL);
	assert_int_equal(running(l), 20);
	rs_local_poll(l, NULL, NULL);
	assert_int_equal(running(l), 20);
	assert_true(rs_local_wanted(l, "worker-19"));
	/* down to 2 before the next batch of a scale to 30 went: those not started stay unstarted */
	assert_int_equal(rs_local_scale(l, 30, &err), RS_OK);
	assert_int_equal(running(l), 28);
	assert_int_equal(rs_local_scale(l, 2, &err), RS_OK);
	for (int i = 0; i < 3; i++)
		rs_local_poll(l, NULL, NULL);
	assert_true(!running_named(l, "worker-28") && !running_named(l, "worker-29"));
	assert_false(rs_local_wanted(l, "worker-29"));
	assert_int_equal(rs_local_scale(l, 0, &err), RS_OK);
	rs_local_stop_all(l, 5000);
	assert_int_equal(running(l), 0);
	rs_local_destroy(l);
	L = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_starts_in_batches),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
