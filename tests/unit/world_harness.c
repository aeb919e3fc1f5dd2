/*
 * world_harness.c - see world_harness.h.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/world_harness.h"
#include "worker/transport_tcp.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double world_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fork one process per rank, on pre-bound loopback ports; collect exit codes (-9 for a killed rank). */
void world_run(world *w)
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
	double deadline = world_now() + GUARD_SECONDS;
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
			if (world_now() > deadline) {
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

