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
 *
 * --schedule "50:4,120:3" rescales the job live: each generation is started
 * to pause at the next scheduled step; when every worker has paused there,
 * the coordinator starts the workers a larger world needs, replans
 * incrementally from the current plan, and starts the next generation over
 * the union of old and new members: workers move exactly the rows the plan
 * diff says, members beyond the new world hand their rows over and leave,
 * and training resumes at the same step. (The Kubernetes membership source
 * comes with its issue.)
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
	char addr[300];         /* where its transport listens for the next generation */
	int done, paused;
	int64_t step;
} member;

typedef struct job {
	const rs_config *cfg;
	int32_t n;
	member m[MAX_WORKERS];
	int32_t joined, done, paused;
	int64_t generation;
	int64_t resume_step;    /* after a reshard: the step training resumes at, -1 once it did */
	int64_t paused_step;    /* where the workers paused */
	int32_t scale_to;       /* a rowshiftctl scale request not yet carried out, or 0 */
	double pause_started;   /* when the first worker paused */
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
		RS_DEBUG("control: '%s' joined (not a worker of this job)", worker);
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
	if (!strcmp(type, "scale")) {
		json_int_t n = 0;
		json_error_t jerr;
		json_t *reply;
		if (json_unpack_ex(msg, &jerr, JSON_STRICT, "{s:s, s:I}", "type", &type, "workers", &n) != 0 || n < 1 ||
		    n > MAX_WORKERS) {
			reply = json_pack("{s:s, s:s}", "type", "error", "reason", "scale needs \"workers\": 1..256");
		} else {
			RS_INFO("%s asks for %lld workers", rs_conn_worker(c), (long long)n);
			j->scale_to = (int32_t)n;
			json_t *pause = json_pack("{s:s}", "type", "pause");
			for (int32_t i = 0; pause && i < j->n; i++)
				if (j->m[i].conn && !j->m[i].done)
					rs_server_send(j->m[i].conn, pause);
			json_decref(pause);
			reply = json_pack("{s:s, s:I}", "type", "scaling", "workers", n);
		}
		if (reply)
			rs_server_send(c, reply);
		json_decref(reply);
		return;
	}
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
		if (j->resume_step >= 0 && step >= j->resume_step) {
			printf("generation %lld resumed at step %lld: paused %.3f s for the reshard\n", (long long)j->generation,
			       (long long)j->resume_step, rs_now() - j->pause_started);
			j->resume_step = -1;
		}
		if (pr.teacher_auc >= 0)
			printf("teacher AUC on the held-out samples (the ceiling): %.4f\n", pr.teacher_auc);
		if (auc >= 0)
			printf("step %5lld  loss %.5f  auc %.4f  %8.0f samples/s\n", (long long)step + 1, loss, auc, sps);
		else
			printf("step %5lld  loss %.5f              %8.0f samples/s\n", (long long)step + 1, loss, sps);
		fflush(stdout);
		if (j->log_json) {
			json_t *line = json_pack("{s:I, s:I, s:f, s:f}", "generation", (json_int_t)j->generation, "step",
						 (json_int_t)(step + 1), "loss", loss, "samples_per_s", sps);
			if (line && auc >= 0)
				json_object_set_new(line, "auc", json_real(auc));
			if (line && json_dumpf(line, j->log_json, JSON_COMPACT) == 0)
				fputc('\n', j->log_json);
			fflush(j->log_json);
			json_decref(line);
		}
	} else if (!strcmp(type, "paused")) {
		rs_msg_paused pa;
		rs_err err = {0};
		if (rs_proto_paused(msg, &pa, &err) != RS_OK) {
			fail_job(j, "%s: %s", m->name, err.msg);
			return;
		}
		if (!m->paused) {
			if (j->paused == 0)
				j->pause_started = rs_now();
			m->paused = 1;
			j->paused++;
			j->paused_step = pa.step;
			snprintf(m->addr, sizeof(m->addr), "%s", pa.addr);
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

/* Tell rowshiftctl where this job is and how to join it: {"url", "token"}, readable by this user only. */
static rs_status write_admin_file(const char *path, const char *url, const char *token, rs_err *err)
{
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	json_t *j = json_pack("{s:s, s:s}", "url", url, "token", token);
	int bad = fd < 0 || !j || json_dumpfd(j, fd, JSON_COMPACT) != 0;
	if (fd >= 0 && close(fd) != 0)
		bad = 1;
	json_decref(j);
	if (bad || rename(tmp, path) != 0) {
		unlink(tmp);
		return rs_err_set(err, RS_EIO, "--admin-file %s: %s", path, strerror(errno));
	}
	return RS_OK;
}

/* Name member i worker-i and start its process. */
static rs_status start_member(job *j, int32_t i, const char *bin, const char *url, const char *config, const char *token,
			      rs_err *err)
{
	if (i >= MAX_WORKERS)
		return rs_err_set(err, RS_EINVAL, "more than %d workers", MAX_WORKERS);
	memset(&j->m[i], 0, sizeof(j->m[i]));
	snprintf(j->m[i].name, sizeof(j->m[i].name), "worker-%d", i);
	j->m[i].pid = spawn(bin, url, config, j->m[i].name, token);
	if (j->m[i].pid < 0)
		return rs_err_set(err, RS_ESYS, "fork: %s", strerror(errno));
	if (i >= j->n)
		j->n = i + 1;
	return RS_OK;
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

/*
 * Start generation j->generation on the union of members `order` (union
 * rank -> member index): a world of `world` ranks training steps
 * [first, steps), resharded from `prev` when it is not NULL.
 */
static rs_status send_starts(job *j, const int32_t *order, int32_t nunion, int32_t world, const rs_plan *plan,
			     const rs_plan *prev, int64_t first, int64_t steps, int last)
{
	const rs_config *cfg = j->cfg;
	rs_status st = RS_OK;
	json_t *peers = json_array(), *jp = rs_plan_to_json(plan), *jprev = prev ? rs_plan_to_json(prev) : NULL;
	if (!peers || !jp || (prev && !jprev))
		st = RS_ENOMEM;
	for (int32_t r = 0; st == RS_OK && r < nunion; r++)
		json_array_append_new(peers, json_string(j->m[order[r]].addr));
	for (int32_t r = 0; st == RS_OK && r < nunion; r++) {
		json_t *msg = json_pack("{s:s, s:I, s:i, s:i, s:i, s:O, s:O, s:I, s:I, s:I, s:I, s:b}", "type", "start",
					"generation", (json_int_t)j->generation, "rank", r, "world", world, "union_world",
					nunion, "peers", peers, "plan", jp, "first_step", (json_int_t)first, "steps",
					(json_int_t)steps, "eval_every", (json_int_t)cfg->data.eval_every, "eval_samples",
					(json_int_t)cfg->data.eval_samples, "last", last);
		if (msg && jprev)
			json_object_set(msg, "previous_plan", jprev);
		if (msg && j->save)
			json_object_set_new(msg, "save", json_string(j->save));
		member *m = &j->m[order[r]];
		st = msg && m->conn ? rs_server_send(m->conn, msg) : RS_ENOMEM;
		json_decref(msg);
		m->paused = 0;
	}
	j->paused = 0;
	json_decref(jprev);
	json_decref(jp);
	json_decref(peers);
	return st;
}

/* Run the event loop until cond(j) holds, the job fails, or timeout_ms passes (which fails it). */
static void serve_until(job *j, rs_server *srv, int (*cond)(const job *), int64_t timeout_ms, const char *what)
{
	double deadline = rs_now() + (double)timeout_ms / 1000;
	while (!j->failed && !cond(j)) {
		rs_server_service(srv, 50);
		reap(j);
		if (rs_now() > deadline)
			fail_job(j, "%s: nothing for %lld ms", what, (long long)timeout_ms);
	}
}

static int all_joined(const job *j) { return j->joined == j->n; }

/* Parse "STEP:WORKERS,..." with increasing steps. */
static rs_status parse_schedule(const char *s, int64_t *step, int32_t *workers, int *n, rs_err *err)
{
	*n = 0;
	while (s && *s) {
		char *end;
		long long st = strtoll(s, &end, 10);
		if (end == s || *end != ':')
			return rs_err_set(err, RS_EINVAL, "--schedule: expected STEP:WORKERS at '%s'", s);
		long w = strtol(end + 1, &end, 10);
		if (st <= 0 || w < 1 || w > MAX_WORKERS || (*n && st <= step[*n - 1]) || *n >= 64 || (*end && *end != ','))
			return rs_err_set(err, RS_EINVAL, "--schedule: bad entry at '%s' (steps increase, 1..%d workers)", s,
					  MAX_WORKERS);
		step[*n] = st;
		workers[(*n)++] = (int32_t)w;
		s = *end ? end + 1 : end;
	}
	return RS_OK;
}

int main(int argc, char **argv)
{
	const char *config = NULL, *listen = "127.0.0.1:0", *log_json = NULL, *worker_bin = NULL, *save = NULL;
	const char *schedule = NULL, *admin_file = NULL;
	char admin_default[128];
	snprintf(admin_default, sizeof(admin_default), "/tmp/rowshift-%d.json", (int)getuid());
	admin_file = admin_default;
	int64_t workers = 2, steps = -1, timeout_ms = 60000;
	bool local = false, help = false;
	rs_param params[] = {
		RS_PARAM("--local", NULL, RS_PARAM_FLAG, NULL, NULL, "run the workers as processes on this machine", &local),
		RS_PARAM("--workers", "ROWSHIFT_WORKERS", RS_PARAM_INT, "2", "N", "number of workers (local mode)", &workers),
		RS_PARAM("--config", "ROWSHIFT_CONFIG", RS_PARAM_STR, NULL, "FILE", "model config (JSON)", &config),
		RS_PARAM("--steps", "ROWSHIFT_STEPS", RS_PARAM_INT, "-1", "S", "steps to train (-1: the config's train.steps)", &steps),
		RS_PARAM("--listen", "ROWSHIFT_LISTEN", RS_PARAM_STR, "127.0.0.1:0", "HOST:PORT", "where the control channel listens (port 0: any)", &listen),
		RS_PARAM("--log-json", NULL, RS_PARAM_STR, NULL, "FILE", "write one JSON line per progress report", &log_json),
		RS_PARAM("--schedule", NULL, RS_PARAM_STR, NULL, "STEP:N,...", "rescale live: at STEP go to N workers (local mode)", &schedule),
		RS_PARAM("--admin-file", "ROWSHIFT_ADMIN_FILE", RS_PARAM_STR, NULL, "FILE", "where rowshiftctl finds this job (URL and token, mode 0600; default /tmp/rowshift-UID.json)", &admin_file),
		RS_PARAM("--save", "ROWSHIFT_SAVE", RS_PARAM_STR, NULL, "DIR", "write a checkpoint (safetensors) here at the end", &save),
		RS_PARAM("--worker-bin", "ROWSHIFT_WORKER_BIN", RS_PARAM_STR, NULL, "PATH", "the worker binary (default: beside this one)", &worker_bin),
		RS_PARAM("--timeout-ms", "ROWSHIFT_TIMEOUT_MS", RS_PARAM_INT, "60000", "MS", "longest wait for workers to join or make progress", &timeout_ms),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshift-coordinator --local --workers N --config FILE [--steps S] [--schedule STEP:N,...]\n"
			    "       [--listen HOST:PORT] [--log-json FILE] [--save DIR]";
	static job j;
	rs_err err = {0};
	const char *pos[1];
	int npos, rc = 1;
	rs_config *cfg = NULL;
	rs_plan *plan = NULL, *prev = NULL;
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
	int64_t sched_step[64];
	int32_t sched_world[64];
	int nsched = 0;
	RSCHECKGOTO(parse_schedule(schedule, sched_step, sched_world, &nsched, &err), st, fail);
	rs_world w = rs_world_make(cfg, j.n, 0, 0, 0);
	RSCHECKGOTO(rs_planner_plan(cfg, &w, NULL, NULL, &plan, &err), st, fail);
	if (make_token(token, sizeof(token)) != RS_OK) {
		st = rs_err_set(&err, RS_ESYS, "cannot read /dev/urandom for the join token");
		goto fail;
	}
	rs_server_handler h = {.ctx = &j, .on_join = on_join, .on_message = on_message, .on_close = on_close};
	RSCHECKGOTO(rs_server_create(listen, token, &h, &srv, &err), st, fail);
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d", rs_server_port(srv));
	RSCHECKGOTO(write_admin_file(admin_file, url, token, &err), st, fail);
	RS_INFO("control channel on %s; starting %d workers; plan imbalance %.3f", url, j.n, plan->summary.imbalance);
	int32_t world = j.n, nunion = j.n, order[MAX_WORKERS];
	for (int32_t i = 0; i < world; i++) {
		order[i] = i;
		RSCHECKGOTO(start_member(&j, i, worker_bin, url, config, token, &err), st, fail);
	}
	serve_until(&j, srv, all_joined, timeout_ms, "waiting for the workers to join");
	j.generation = 1;
	j.resume_step = -1;
	int64_t first = 0, expect_done = 0;
	for (int k = 0; !j.failed;) {
		while (k < nsched && sched_step[k] <= first)
			k++; /* a scale request got there first */
		int64_t until = k < nsched && sched_step[k] < steps ? sched_step[k] : steps;
		int last = until >= steps;
		if (send_starts(&j, order, nunion, world, plan, prev, first, until, last) != RS_OK)
			fail_job(&j, "cannot start generation %lld", (long long)j.generation);
		rs_plan_free(prev);
		prev = NULL;
		expect_done += nunion - world; /* members beyond the world hand their rows over and leave */
		j.last_progress = rs_now();
		/* train to the boundary: every member paused (scheduled or asked for), or at the end done */
		int finished = 0;
		while (!j.failed) {
			if (j.done == expect_done && j.paused == world)
				break;
			if (last && j.done == expect_done + world) {
				finished = 1;
				break;
			}
			rs_server_service(srv, 50);
			reap(&j);
			if (rs_now() - j.last_progress > (double)timeout_ms / 1000)
				fail_job(&j, "no progress for %lld ms", (long long)timeout_ms);
		}
		if (finished || j.failed)
			break;
		/* the next generation: new members join, the plan moves as little as balance allows */
		int32_t next;
		first = j.paused_step;
		if (j.scale_to) {
			next = j.scale_to;
			j.scale_to = 0;
		} else {
			next = sched_world[k++];
		}
		for (int32_t i = world; i < next; i++) {
			order[i] = j.n;
			RSCHECKGOTO(start_member(&j, j.n, worker_bin, url, config, token, &err), st, fail);
		}
		serve_until(&j, srv, all_joined, timeout_ms, "waiting for new workers to join");
		int32_t map[MAX_WORKERS];
		rs_plan *np_ = NULL;
		w = rs_world_make(cfg, next, 0, 0, 0);
		RSCHECKGOTO(rs_planner_rank_map(world, next, NULL, 0, map, &err), st, fail);
		RSCHECKGOTO(rs_planner_plan(cfg, &w, plan, map, &np_, &err), st, fail);
		printf("generation %lld: %d -> %d workers at step %lld; the plan moves %.2f MiB (lower bound %.2f MiB)\n",
		       (long long)j.generation + 1, world, next, (long long)first, np_->summary.moved_bytes / 1048576.0,
		       np_->summary.min_moved_bytes / 1048576.0);
		fflush(stdout);
		prev = plan;
		plan = np_;
		nunion = world > next ? world : next;
		world = next;
		j.generation++;
		j.resume_step = first;
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
	printf("training done: %d workers, %lld steps, %lld generation(s)\n", world, (long long)steps, (long long)j.generation);
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
	if (srv)
		unlink(admin_file);
	rs_server_destroy(srv);
	if (j.log_json)
		fclose(j.log_json);
	rs_plan_free(prev);
	rs_plan_free(plan);
	rs_config_free(cfg);
	return rc;
}
