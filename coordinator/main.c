/*
 * rowshift-coordinator - holds the membership and the plan, starts
 * generations and collects progress.
 *
 * Local mode (--local) runs the job on this machine: it starts --workers
 * worker processes, waits for them to join its control channel with the join
 * token, gives each its rank, the plan and the transport addresses of its
 * peers, prints their progress (and writes it as JSON lines with
 * --log-json), and ends when training is done. A worker that dies or
 * disconnects stops the job with an error; every wait is bounded.
 * (Scaling mid-run and the Kubernetes membership source come with their
 * issues.)
 */
#include "common/config.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "common/plan.h"
#include "common/planner.h"
#include "common/proto.h"
#include "coordinator/server.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORKERS 256

typedef struct member {
	char name[64];
	pid_t pid;
	rs_conn *conn;
	char addr[300];
	int done;
	int64_t step;
} member;

typedef struct job {
	const rs_config *cfg;
	int32_t n;
	member m[MAX_WORKERS];
	int32_t joined, done;
	int failed;
	char why[256];          /* what the coordinator saw first */
	char root[128];         /* a worker killed by a signal: the likely root cause */
	FILE *log_json;
	const char *save;       /* checkpoint directory, or NULL */
	double last_progress;
} job;

static void fail_job(job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_job(job *j, const char *fmt, ...)
{
	va_list ap;
	if (j->failed)
		return;
	va_start(ap, fmt);
	vsnprintf(j->why, sizeof(j->why), fmt, ap);
	va_end(ap);
	j->failed = 1;
}

static member *find(job *j, const char *name)
{
	for (int32_t i = 0; i < j->n; i++)
		if (!strcmp(j->m[i].name, name))
			return &j->m[i];
	return NULL;
}

static void on_join(void *ctx, rs_conn *c, const char *worker, const char *addr, int64_t pid)
{
	job *j = ctx;
	member *m = find(j, worker);
	(void)pid;
	if (!m || m->conn) {
		RS_WARN("control: unexpected worker '%s' joined; ignoring it", worker);
		return;
	}
	m->conn = c;
	snprintf(m->addr, sizeof(m->addr), "%s", addr);
	j->joined++;
	RS_INFO("%s joined (%d of %d), transport at %s", worker, j->joined, j->n, addr);
}

static void on_message(void *ctx, rs_conn *c, json_t *msg)
{
	job *j = ctx;
	member *m = find(j, rs_conn_worker(c));
	const char *type = json_string_value(json_object_get(msg, "type"));
	if (!m)
		return;
	if (!strcmp(type, "progress")) {
		rs_msg_progress pr;
		rs_err err = {0};
		if (rs_proto_progress(msg, &pr, &err) != RS_OK) {
			RS_WARN("control: from %s: %s", m->name, err.msg);
			return;
		}
		int64_t rank = pr.rank, step = pr.step;
		double loss = pr.loss, sps = pr.samples_per_s, auc = pr.auc;
		m->step = step;
		j->last_progress = rs_now();
		if (rank != 0)
			return; /* rank 0 speaks for the job: every rank reports the same loss */
		if (pr.teacher_auc >= 0)
			printf("teacher AUC on the held-out samples (the ceiling): %.4f\n", pr.teacher_auc);
		if (auc >= 0)
			printf("step %5lld  loss %.5f  auc %.4f  %8.0f samples/s\n", (long long)step + 1, loss, auc, sps);
		else
			printf("step %5lld  loss %.5f              %8.0f samples/s\n", (long long)step + 1, loss, sps);
		fflush(stdout);
		if (j->log_json) {
			json_t *line = json_pack("{s:i, s:I, s:f, s:f}", "generation", 1, "step", (json_int_t)(step + 1), "loss", loss,
						 "samples_per_s", sps);
			if (line && auc >= 0)
				json_object_set_new(line, "auc", json_real(auc));
			if (line && json_dumpf(line, j->log_json, JSON_COMPACT) == 0)
				fputc('\n', j->log_json);
			fflush(j->log_json);
			json_decref(line);
		}
	} else if (!strcmp(type, "done")) {
		if (!m->done) {
			m->done = 1;
			j->done++;
		}
	} else {
		RS_WARN("control: from %s: unknown message type '%s'", m->name, type);
	}
}

static void on_close(void *ctx, rs_conn *c)
{
	job *j = ctx;
	member *m = find(j, rs_conn_worker(c));
	if (!m)
		return;
	m->conn = NULL;
	if (!m->done)
		fail_job(j, "%s disconnected before training ended (at step %lld)", m->name, (long long)m->step);
}

static pid_t spawn(const char *bin, const char *url, const char *config, const char *name, const char *token)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	setenv("ROWSHIFT_JOIN_TOKEN", token, 1);
	execl(bin, bin, "--coordinator", url, "--config", config, "--name", name, (char *)NULL);
	fprintf(stderr, "rowshift-coordinator: cannot run %s: %s\n", bin, strerror(errno));
	_exit(127);
}

/* A random join token from /dev/urandom. */
static rs_status make_token(char *out, size_t n)
{
	unsigned char raw[16];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return RS_ESYS;
	ssize_t got = read(fd, raw, sizeof(raw));
	close(fd);
	if (got != (ssize_t)sizeof(raw))
		return RS_ESYS;
	for (size_t i = 0; i < sizeof(raw) && 2 * i + 2 < n; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	return RS_OK;
}

/* Reap exited workers; a worker that exits before it reported done fails the job. */
static void reap(job *j)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		for (int32_t i = 0; i < j->n; i++)
			if (j->m[i].pid == pid) {
				j->m[i].pid = 0;
				int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
				if (WIFSIGNALED(status) && !j->root[0])
					snprintf(j->root, sizeof(j->root), "%s was killed (signal %d)", j->m[i].name,
						 WTERMSIG(status));
				if (!j->m[i].done || !ok)
					fail_job(j, "%s exited (%s %d) at step %lld", j->m[i].name,
						 WIFEXITED(status) ? "status" : "signal",
						 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), (long long)j->m[i].step);
			}
}

static rs_status send_start(job *j, rs_conn *c, int32_t rank, const rs_plan *plan, int64_t steps)
{
	const rs_config *cfg = j->cfg;
	json_t *peers = json_array();
	for (int32_t i = 0; peers && i < j->n; i++)
		json_array_append_new(peers, json_string(j->m[i].addr));
	json_t *msg = json_pack("{s:s, s:i, s:i, s:i, s:o, s:o, s:i, s:I, s:I, s:I}", "type", "start", "generation", 1,
				"rank", rank, "world", j->n, "peers", peers, "plan", rs_plan_to_json(plan), "first_step", 0,
				"steps", (json_int_t)steps, "eval_every", (json_int_t)cfg->data.eval_every, "eval_samples",
				(json_int_t)cfg->data.eval_samples);
	if (msg && j->save)
		json_object_set_new(msg, "save", json_string(j->save));
	rs_status st = msg ? rs_server_send(c, msg) : RS_ENOMEM;
	json_decref(msg);
	return st;
}

int main(int argc, char **argv)
{
	const char *config = NULL, *listen = "127.0.0.1:0", *log_json = NULL, *worker_bin = NULL, *save = NULL;
	int64_t workers = 2, steps = -1, timeout_ms = 60000;
	bool local = false, help = false;
	rs_param params[] = {
		RS_PARAM("--local", NULL, RS_PARAM_FLAG, NULL, NULL, "run the workers as processes on this machine", &local),
		RS_PARAM("--workers", "ROWSHIFT_WORKERS", RS_PARAM_INT, "2", "N", "number of workers (local mode)", &workers),
		RS_PARAM("--config", "ROWSHIFT_CONFIG", RS_PARAM_STR, NULL, "FILE", "model config (JSON)", &config),
		RS_PARAM("--steps", "ROWSHIFT_STEPS", RS_PARAM_INT, "-1", "S", "steps to train (-1: the config's train.steps)", &steps),
		RS_PARAM("--listen", "ROWSHIFT_LISTEN", RS_PARAM_STR, "127.0.0.1:0", "HOST:PORT", "where the control channel listens (port 0: any)", &listen),
		RS_PARAM("--log-json", NULL, RS_PARAM_STR, NULL, "FILE", "write one JSON line per progress report", &log_json),
		RS_PARAM("--save", "ROWSHIFT_SAVE", RS_PARAM_STR, NULL, "DIR", "write a checkpoint (safetensors) here at the end", &save),
		RS_PARAM("--worker-bin", "ROWSHIFT_WORKER_BIN", RS_PARAM_STR, NULL, "PATH", "the worker binary (default: beside this one)", &worker_bin),
		RS_PARAM("--timeout-ms", "ROWSHIFT_TIMEOUT_MS", RS_PARAM_INT, "60000", "MS", "longest wait for workers to join or make progress", &timeout_ms),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshift-coordinator --local --workers N --config FILE [--steps S] [--listen HOST:PORT]";
	static job j;
	rs_err err = {0};
	const char *pos[1];
	int npos, rc = 1;
	rs_config *cfg = NULL;
	rs_plan *plan = NULL;
	rs_server *srv = NULL;
	char token[64] = "", url[128], bin[PATH_MAX];
	rs_status st;

	rs_log_init("coordinator", -1);
	if (rs_params_parse(params, np, argc, argv, 1, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshift-coordinator: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	if (!local) {
		fprintf(stderr, "rowshift-coordinator: only --local mode exists so far (Kubernetes mode comes later)\n%s\n", usage);
		return 2;
	}
	if (!config || workers < 1 || workers > MAX_WORKERS) {
		fprintf(stderr, "rowshift-coordinator: --config and --workers 1..%d are required\n%s\n", MAX_WORKERS, usage);
		return 2;
	}
	if (!worker_bin) {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n <= 0) {
			fprintf(stderr, "rowshift-coordinator: cannot find the worker binary; pass --worker-bin\n");
			return 2;
		}
		self[n] = 0;
		snprintf(bin, sizeof(bin), "%s/rowshift-worker", dirname(self));
		worker_bin = bin;
	}
	signal(SIGPIPE, SIG_IGN);
	RSCHECKGOTO(rs_config_load(config, &cfg, &err), st, fail);
	j.cfg = cfg;
	j.n = (int32_t)workers;
	if (save) {
		if (mkdir(save, 0755) != 0 && errno != EEXIST) {
			st = rs_err_set(&err, RS_EIO, "--save %s: %s", save, strerror(errno));
			goto fail;
		}
		j.save = save;
	}
	if (steps < 0)
		steps = cfg->train.steps;
	if (log_json && !(j.log_json = fopen(log_json, "w"))) {
		st = rs_err_set(&err, RS_EIO, "%s: %s", log_json, strerror(errno));
		goto fail;
	}
	rs_world w = rs_world_make(cfg, j.n, 0, 0, 0);
	RSCHECKGOTO(rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err), st, fail);
	if (make_token(token, sizeof(token)) != RS_OK) {
		st = rs_err_set(&err, RS_ESYS, "cannot read /dev/urandom for the join token");
		goto fail;
	}
	rs_server_handler h = {.ctx = &j, .on_join = on_join, .on_message = on_message, .on_close = on_close};
	RSCHECKGOTO(rs_server_create(listen, token, &h, &srv, &err), st, fail);
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d", rs_server_port(srv));
	RS_INFO("control channel on %s; starting %d workers; plan imbalance %.3f", url, j.n, plan->summary.imbalance);
	for (int32_t i = 0; i < j.n; i++) {
		snprintf(j.m[i].name, sizeof(j.m[i].name), "worker-%d", i);
		j.m[i].pid = spawn(worker_bin, url, config, j.m[i].name, token);
		if (j.m[i].pid < 0) {
			st = rs_err_set(&err, RS_ESYS, "fork: %s", strerror(errno));
			goto fail;
		}
	}
	/* join, then start the generation */
	double deadline = rs_now() + (double)timeout_ms / 1000;
	while (!j.failed && j.joined < j.n) {
		rs_server_service(srv, 50);
		reap(&j);
		if (rs_now() > deadline)
			fail_job(&j, "only %d of %d workers joined within %lld ms", j.joined, j.n, (long long)timeout_ms);
	}
	for (int32_t r = 0; !j.failed && r < j.n; r++)
		if (send_start(&j, j.m[r].conn, r, plan, steps) != RS_OK)
			fail_job(&j, "cannot send the start to %s", j.m[r].name);
	j.last_progress = rs_now();
	while (!j.failed && j.done < j.n) {
		rs_server_service(srv, 50);
		reap(&j);
		if (rs_now() - j.last_progress > (double)timeout_ms / 1000)
			fail_job(&j, "no progress for %lld ms", (long long)timeout_ms);
	}
	if (j.failed) {
		/* a dead worker's peers fail right after it: give the cause a moment to surface */
		for (double until = rs_now() + 0.5; rs_now() < until && !j.root[0];) {
			rs_server_service(srv, 20);
			reap(&j);
		}
		if (j.root[0])
			st = rs_err_set(&err, RS_EABORTED, "%s; first seen: %s", j.root, j.why);
		else
			st = rs_err_set(&err, RS_EABORTED, "%s", j.why);
		goto fail;
	}
	printf("training done: %d workers, %lld steps\n", j.n, (long long)steps);
	rc = 0;
	goto out;
fail:
	RS_ERROR("%s", err.msg[0] ? err.msg : rs_status_str(st));
	/* tell the others to stop, then make sure they do */
	json_t *stop = json_pack("{s:s}", "type", "stop");
	for (int32_t i = 0; stop && i < j.n; i++)
		if (j.m[i].conn)
			rs_server_send(j.m[i].conn, stop);
	json_decref(stop);
	for (int k = 0; srv && k < 10; k++)
		rs_server_service(srv, 20);
out:
	/* workers exit on their own when done or when the coordinator goes; bound the wait */
	for (double until = rs_now() + 10; rs_now() < until;) {
		int left = 0;
		reap(&j);
		for (int32_t i = 0; i < j.n; i++)
			left += j.m[i].pid > 0;
		if (!left)
			break;
		if (srv)
			rs_server_service(srv, 50);
		else
			usleep(50000);
	}
	for (int32_t i = 0; i < j.n; i++)
		if (j.m[i].pid > 0) {
			kill(j.m[i].pid, SIGKILL);
			waitpid(j.m[i].pid, NULL, 0);
		}
	rs_server_destroy(srv);
	if (j.log_json)
		fclose(j.log_json);
	rs_plan_free(plan);
	rs_config_free(cfg);
	return rc;
}
