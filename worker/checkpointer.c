/*
 * checkpointer.c - see checkpointer.h.
 */
#include "worker/checkpointer.h"
#include "common/checkpoint.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/log.h"
#include "common/proto.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct rs_checkpointer {
	pthread_t thread;
	int running;             /* started and not joined */
	atomic_int finished;     /* the thread is done with the write */
	/* the write in flight: what the thread reads, then what it leaves */
	rs_snapshot *snap;
	char dir[4096];
	int64_t generation, step, rank;
	double seconds, cpu_seconds; /* the write's, wall clock and the thread's CPU time */
	rs_status st;
	rs_err err;
	rs_snapshot *spare; /* the last one written, for the next snapshot's copies (rs_checkpointer_spare) */
};

/* mkdir that takes an existing directory for success; a new one's name synced into its parent when sync. */
static rs_status make_dir(const char *path, int sync, rs_err *err)
{
	if (mkdir(path, 0700) == 0)
		return sync ? rs_file_sync_parent(path, err) : RS_OK;
	if (errno != EEXIST)
		return rs_err_set(err, RS_EIO, "checkpoint: cannot create %s: %s", path, strerror(errno));
	return RS_OK;
}

static void *write_thread(void *arg)
{
	rs_checkpointer *c = arg;
	double t0 = rs_now();
	/* the lowest priority: training threads come first, the write takes what CPU they leave */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) != 0)
		RS_DEBUG("checkpoint: cannot lower the writer's priority: %s", strerror(errno));
	char root[4096];
	snprintf(root, sizeof(root), "%s", c->dir);
	char *slash = strrchr(root, '/');
	if (slash)
		*slash = 0;
	c->st = make_dir(root, 1, &c->err);
	if (c->st == RS_OK) /* the step's directory is synced into the root with its files, after them */
		c->st = make_dir(c->dir, 0, &c->err);
	if (c->st == RS_OK) /* every rank removes an earlier index (rs_checkpoint_drop_index); the coordinator writes it */
		c->st = rs_checkpoint_drop_index(c->dir, &c->err);
	if (c->st == RS_OK)
		c->st = rs_snapshot_write(c->snap, c->dir, &c->err);
	if (c->st == RS_OK) /* its name went to disk with the files (one journal commit for all, on ext4) */
		c->st = rs_file_sync_parent(c->dir, &c->err);
	c->seconds = rs_now() - t0;
	struct timespec cpu;
	c->cpu_seconds = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0 ? (double)cpu.tv_sec + cpu.tv_nsec / 1e9 : 0;
	atomic_store(&c->finished, 1);
	return NULL;
}

rs_status rs_checkpointer_create(rs_checkpointer **out, rs_err *err)
{
	*out = calloc(1, sizeof(**out));
	return *out ? RS_OK : rs_err_set(err, RS_ENOMEM, "checkpointer: out of memory");
}

int rs_checkpointer_busy(const rs_checkpointer *c) { return c->running; }

void rs_checkpointer_cancel(rs_checkpointer *c)
{
	if (c->running)
		rs_snapshot_cancel(c->snap); /* the snapshot is the thread's until joined; the flag is atomic */
}

rs_status rs_checkpointer_start(rs_checkpointer *c, rs_snapshot *s, const char *root, int64_t generation,
				int64_t step, int64_t rank, rs_err *err)
{
	if (c->running) {
		rs_snapshot_free(s);
		return rs_err_set(err, RS_EINVAL, "checkpoint of step %lld: the one before is still being written",
				  (long long)step);
	}
	c->snap = s;
	rs_checkpoint_step_dir(root, step, c->dir, sizeof(c->dir));
	c->generation = generation, c->step = step, c->rank = rank;
	c->st = RS_OK;
	c->err.msg[0] = 0;
	atomic_store(&c->finished, 0);
	int e = pthread_create(&c->thread, NULL, write_thread, c);
	if (e != 0) {
		rs_snapshot_free(s);
		c->snap = NULL;
		return rs_err_set(err, RS_ESYS, "checkpoint of step %lld: cannot start its writer: %s", (long long)step,
				  strerror(e));
	}
	c->running = 1;
	return RS_OK;
}

/* The "checkpointed" message of the finished write, or NULL without memory. */
static json_t *report_of(const rs_checkpointer *c)
{
	const rs_ckpt_file_report *files;
	int n = rs_snapshot_files(c->snap, &files);
	rs_msg_checkpointed m = {.generation = c->generation, .rank = c->rank, .step = c->step,
				 .dense_params = rs_snapshot_dense_params(c->snap), .files = (rs_ckpt_file_report *)files,
				 .nfiles = n};
	return rs_proto_make_checkpointed(&m);
}

rs_status rs_checkpointer_done(rs_checkpointer *c, int wait, json_t **report, rs_err *err)
{
	*report = NULL;
	if (!c->running || (!wait && !atomic_load(&c->finished)))
		return RS_OK;
	pthread_join(c->thread, NULL);
	c->running = 0;
	rs_status st = c->st;
	if (st != RS_OK)
		rs_err_set(err, st, "checkpoint of step %lld: %s", (long long)c->step, c->err.msg);
	else if (!(*report = report_of(c)))
		st = rs_err_set(err, RS_ENOMEM, "checkpoint of step %lld: out of memory for its report", (long long)c->step);
	else
		RS_INFO("checkpoint of step %lld: this rank's files written to %s in %.3f s, %.3f s of CPU (%zu MiB copied, "
			"%zu MiB of it into the last one's memory)", (long long)c->step, c->dir, c->seconds, c->cpu_seconds,
			rs_snapshot_bytes(c->snap) >> 20, rs_snapshot_reused(c->snap) >> 20);
	rs_snapshot_free(c->spare);
	c->spare = c->snap;
	c->snap = NULL;
	return st;
}

rs_snapshot *rs_checkpointer_spare(rs_checkpointer *c)
{
	rs_snapshot *s = c->spare;
	c->spare = NULL;
	return s;
}

void rs_checkpointer_drop_spare(rs_checkpointer *c)
{
	rs_snapshot_free(c->spare);
	c->spare = NULL;
}

void rs_checkpointer_destroy(rs_checkpointer *c)
{
	if (!c)
		return;
	if (c->running)
		pthread_join(c->thread, NULL);
	rs_snapshot_free(c->snap);
	rs_snapshot_free(c->spare);
	free(c);
}
