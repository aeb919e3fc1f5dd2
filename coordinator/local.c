/*
 * local.c - see local.h.
 */
#include "coordinator/local.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/grow.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/wsmsg.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NAME_MAX_BYTES 64
#define RESTART_BACKOFF_S 0.2  /* doubled at each restart of the same ordinal, up to 5 s */
#define LOCAL_EARLY_EXITS 5     /* a worker that exits before joining this many times in a row fails the start (3 s of backoff) */
/*
 * Processes started at once, by rs_local_scale or one rs_local_poll: the
 * loop serves its connections between batches. Started all at once, 1,024
 * took 31 s on 2 cores busy with the first ones' start, and those gave up
 * joining a coordinator that answered no one meanwhile.
 */
#define SPAWN_BATCH 8

typedef struct proc {
	char name[NAME_MAX_BYTES];
	int32_t ordinal;
	pid_t pid;          /* 0 when not running */
	int adopted;        /* not our child: liveness by kill(pid, 0) */
	int terminating;    /* SIGTERM sent */
	int restarts;
	double restart_at;  /* when it may be started again */
	int pending;        /* wanted and never started: rs_local_poll starts it */
} proc;

struct rs_local {
	rs_local_options o;
	char bin[PATH_MAX];     /* the worker binary when o.worker_bin is NULL: beside this program */
	proc *p;
	size_t n, cap;
	int32_t replicas;
	int restart;
};

rs_status rs_local_create(const rs_local_options *o, rs_local **out, rs_err *err)
{
	rs_local *l = calloc(1, sizeof(*l));
	if (!l)
		return rs_err_set(err, RS_ENOMEM, "local workers: out of memory");
	l->o = *o;
	l->restart = 1;
	if (!o->worker_bin) {
		ssize_t n = readlink("/proc/self/exe", l->bin, sizeof(l->bin) - 1);
		if (n <= 0 || n + sizeof("/rowshift-worker") > sizeof(l->bin)) {
			free(l);
			return rs_err_set(err, RS_EINVAL, "cannot find the worker binary; pass --worker-bin");
		}
		l->bin[n] = 0;
		strcpy(strrchr(l->bin, '/'), "/rowshift-worker");
		l->o.worker_bin = l->bin;
	}
	*out = l;
	return RS_OK;
}

void rs_local_destroy(rs_local *l)
{
	if (!l)
		return;
	free(l->p);
	free(l);
}

static int ordinal_of(const char *name)
{
	char *end;
	if (strncmp(name, "worker-", 7) != 0 || !name[7])
		return -1;
	long k = strtol(name + 7, &end, 10);
	return *end || k < 0 || k >= RS_MAX_WORKERS ? -1 : (int)k;
}

static proc *find(rs_local *l, int32_t ordinal)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->p[i].ordinal == ordinal)
			return &l->p[i];
	return NULL;
}

static proc *slot(rs_local *l, int32_t ordinal)
{
	proc *p = find(l, ordinal);
	if (p || rs_grow(&l->p, &l->cap, l->n + 1, sizeof(*l->p)) != RS_OK)
		return p;
	p = &l->p[l->n++];
	*p = (proc){.ordinal = ordinal};
	snprintf(p->name, sizeof(p->name), "worker-%d", ordinal);
	return p;
}

static rs_status spawn(rs_local *l, proc *p, rs_err *err)
{
	char tmo[32], grace[32], hangup[32];
	snprintf(tmo, sizeof(tmo), "%lld", (long long)l->o.timeout_ms);
	snprintf(grace, sizeof(grace), "%lld", (long long)l->o.grace_ms);
	snprintf(hangup, sizeof(hangup), "%d", (int)rs_ws_idle_policy()->secs_since_valid_hangup); /* the coordinator's */
	pid_t pid = fork();
	if (pid < 0)
		return rs_err_set(err, RS_ESYS, "fork for %s: %s", p->name, strerror(errno));
	if (pid == 0) {
		/* nothing of the coordinator's (its listening socket, its connections, its files) goes to a worker */
		if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
			for (int fd = 3; fd < 65536; fd++)
				close(fd);
		setenv("ROWSHIFT_JOIN_TOKEN", l->o.token, 1);
		execl(l->o.worker_bin, l->o.worker_bin, "--coordinator", l->o.url, "--config", l->o.config, "--name",
		      p->name, "--timeout-ms", tmo, "--coordinator-grace-ms", grace, "--ws-hangup-s", hangup, (char *)NULL);
		fprintf(stderr, "rowshift-coordinator: cannot run %s: %s\n", l->o.worker_bin, strerror(errno));
		_exit(127);
	}
	p->pid = pid;
	p->adopted = 0;
	p->terminating = 0;
	RS_DEBUG("started %s (pid %d)", p->name, (int)pid);
	return RS_OK;
}

rs_status rs_local_scale(rs_local *l, int32_t n, rs_err *err)
{
	if (n < 0 || n > RS_MAX_WORKERS)
		return rs_err_set(err, RS_EINVAL, "local workers: %d replicas is outside 0..%d", n, RS_MAX_WORKERS);
	l->replicas = n;
	int batch = SPAWN_BATCH, later = 0;
	for (int32_t k = 0; k < n; k++) {
		proc *p = slot(l, k);
		if (!p)
			return rs_err_set(err, RS_ENOMEM, "local workers: out of memory");
		if (!p->pid) {
			p->restarts = 0;
			p->restart_at = 0;
			p->pending = batch == 0;
			later += p->pending;
			if (!p->pending) {
				batch--;
				RSCHECK(spawn(l, p, err));
			}
		}
	}
	if (later)
		RS_INFO("%d more workers to start, %d at each turn of the loop", later, SPAWN_BATCH);
	for (size_t i = 0; i < l->n; i++) {
		proc *p = &l->p[i];
		if (p->ordinal >= n && p->pid && !p->terminating) {
			p->terminating = 1;
			/*
			 * Only a process this coordinator started is signalled: an adopted pid
			 * may have been reused by a bystander. An adopted worker that is no
			 * longer wanted is resharded out all the same, and leaves after that commit.
			 */
			if (p->adopted)
				continue;
			RS_INFO("scale to %d: SIGTERM to %s", n, p->name);
			if (kill(p->pid, SIGTERM) != 0 && errno != ESRCH)
				RS_WARN("kill %s (pid %d): %s", p->name, (int)p->pid, strerror(errno));
		}
	}
	return RS_OK;
}

int32_t rs_local_replicas(const rs_local *l) { return l->replicas; }

int rs_local_wanted(const rs_local *l, const char *name)
{
	int k = ordinal_of(name);
	return k >= 0 && k < l->replicas;
}

rs_status rs_local_adopt(rs_local *l, const char *name, int64_t pid, rs_err *err)
{
	int k = ordinal_of(name);
	if (k < 0 || pid < 1 || pid > INT32_MAX)
		return rs_err_set(err, RS_EINVAL, "local workers: cannot adopt '%s' (pid %lld)", name, (long long)pid);
	proc *p = slot(l, k);
	if (!p)
		return rs_err_set(err, RS_ENOMEM, "local workers: out of memory");
	p->pid = (pid_t)pid;
	p->adopted = 1;
	p->pending = 0;
	return RS_OK;
}

void rs_local_set_restart(rs_local *l, int on) { l->restart = on; }

/* Whether p's process is gone; fills clean and how. */
static int gone(proc *p, int *clean, char *how, size_t n)
{
	int status;
	if (p->adopted) {
		if (kill(p->pid, 0) == 0 || errno != ESRCH)
			return 0;
		*clean = -1;
		snprintf(how, n, "exited (status unknown: started by an earlier coordinator)");
		return 1;
	}
	pid_t r = waitpid(p->pid, &status, WNOHANG);
	if (r == 0 || (r < 0 && errno == EINTR))
		return 0;
	if (r < 0) {
		*clean = -1;
		snprintf(how, n, "cannot be waited for: %s", strerror(errno));
		return 1;
	}
	*clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	if (WIFEXITED(status))
		snprintf(how, n, "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(how, n, "killed by signal %d", WTERMSIG(status));
	return 1;
}

void rs_local_poll(rs_local *l, rs_local_exit_fn fn, void *ctx)
{
	double now = rs_now();
	int batch = SPAWN_BATCH;
	for (size_t i = 0; i < l->n; i++) {
		proc *p = &l->p[i];
		char how[128];
		int clean;
		if (p->pid && gone(p, &clean, how, sizeof(how))) {
			p->pid = 0;
			double backoff = RESTART_BACKOFF_S * (double)(1 << (p->restarts < 5 ? p->restarts : 5));
			p->restart_at = now + (backoff < 5 ? backoff : 5);
			if (fn)
				fn(ctx, p->name, clean, how);
		}
		if (!p->pid && l->restart && p->ordinal < l->replicas && now >= p->restart_at && batch > 0) {
			rs_err err = {0};
			batch--;
			if (!p->pending) {
				p->restarts++;
				RS_INFO("%s is wanted (replicas %d) but gone: starting it again", p->name, l->replicas);
			}
			if (spawn(l, p, &err) == RS_OK) {
				p->pending = 0;
			} else { /* tried again after a second (a first start stays one: it never ran) */
				RS_WARN("%s", err.msg);
				p->restart_at = now + 1;
			}
		}
	}
}

int rs_local_list(const rs_local *l, const char **names, int64_t *pids, int max)
{
	int k = 0;
	for (size_t i = 0; i < l->n; i++)
		if (l->p[i].pid) {
			if (k < max) {
				names[k] = l->p[i].name;
				pids[k] = l->p[i].pid;
			}
			k++;
		}
	return k;
}

void rs_local_stop_all(rs_local *l, int timeout_ms)
{
	double until = rs_now() + timeout_ms / 1000.0;
	l->restart = 0;
	for (;;) {
		int left = 0;
		rs_local_poll(l, NULL, NULL);
		for (size_t i = 0; i < l->n; i++)
			left += l->p[i].pid != 0;
		if (!left || rs_now() >= until)
			break;
		rs_sleep(0.02);
	}
	for (size_t i = 0; i < l->n; i++) {
		proc *p = &l->p[i];
		if (!p->pid)
			continue;
		if (p->adopted) {
			/* not ours to kill (its pid may be someone else's by now): it stops on its own, at the latest
			 * when its grace period for a coordinator runs out */
			RS_WARN("%s (pid %d, started by an earlier coordinator) is left to stop on its own", p->name,
				(int)p->pid);
		} else {
			RS_WARN("%s (pid %d) did not exit: SIGKILL", p->name, (int)p->pid);
			kill(p->pid, SIGKILL);
			waitpid(p->pid, NULL, 0);
		}
		p->pid = 0;
	}
}

/* ---- the job's membership source ------------------------------------------------------- */

static rs_status src_scale(void *ctx, int32_t n, rs_err *err) { return rs_local_scale(((rs_local_members *)ctx)->local, n, err); }
static int32_t src_replicas(void *ctx) { return rs_local_replicas(((rs_local_members *)ctx)->local); }
static int src_wanted(void *ctx, const char *name) { return rs_local_wanted(((rs_local_members *)ctx)->local, name); }
static void src_ending(void *ctx) { rs_local_set_restart(((rs_local_members *)ctx)->local, 0); }

static int src_list(void *ctx, const char **names, int64_t *pids, int max)
{
	return rs_local_list(((rs_local_members *)ctx)->local, names, pids, max);
}

/* A worker this coordinator did not start (its predecessor did): watch it by pid. */
static void src_joined(void *ctx, const char *name, int64_t pid)
{
	rs_local *l = ((rs_local_members *)ctx)->local;
	rs_err err = {0};
	for (size_t i = 0; i < l->n; i++)
		if (l->p[i].pid && !strcmp(l->p[i].name, name))
			return;
	if (rs_local_adopt(l, name, pid, &err) != RS_OK)
		RS_WARN("%s", err.msg);
}

static rs_status src_save(void *ctx, const rs_state *s, int patient, rs_err *err)
{
	(void)patient; /* a local file: nothing to wait for */
	return rs_state_write(((rs_local_members *)ctx)->state_path, s, err);
}

rs_job_source rs_local_members_source(rs_local_members *m)
{
	return (rs_job_source){.ctx = m, .scale = src_scale, .replicas = src_replicas, .wanted = src_wanted,
			       .joined = src_joined, .list = src_list, .ending = src_ending,
			       .save_state = m->state_path ? src_save : NULL, .failure_final = 1, .early_exits_max = LOCAL_EARLY_EXITS};
}

static void on_exit_cb(void *ctx, const char *name, int clean, const char *how)
{
	rs_local_members *m = ctx;
	if (m->job)
		rs_job_exited(m->job, name, NULL, clean, how);
}

void rs_local_members_poll(rs_local_members *m) { rs_local_poll(m->local, on_exit_cb, m); }

void rs_local_members_end(rs_local_members *m, rs_server *srv)
{
	rs_local_set_restart(m->local, 0);
	for (double until = rs_now() + 10; rs_now() < until;) {
		const char *names[1];
		int64_t pids[1];
		rs_local_members_poll(m);
		if (!rs_local_list(m->local, names, pids, 1))
			break;
		rs_server_service(srv, 50);
	}
	rs_local_stop_all(m->local, 0);
}

rs_status rs_local_write_admin_file(const char *path, const char *url, const char *token, const char *status_token,
				    const char *tls_ca, const char *model, rs_err *err)
{
	json_t *j = json_pack("{s:s, s:s, s:s*, s:s*, s:s}", "url", url, "token", token, "status_token", status_token,
			      "tls_ca", tls_ca, "model", model);
	if (!j)
		return rs_err_set(err, RS_ENOMEM, "--admin-file %s: out of memory", path);
	rs_status st = rs_file_write_json(path, 0600, j, JSON_COMPACT, err);
	json_decref(j);
	return st;
}
