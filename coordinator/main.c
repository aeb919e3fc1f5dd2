/*
 * rowshift-coordinator - holds the membership and the plan, runs the
 * resharding cycle (coordinator/job.h) and serves the workers' control
 * channel (coordinator/server.h).
 *
 * Local mode (--local) runs the job on this machine: its workers are
 * processes kept like a StatefulSet's pods (coordinator/local.h), scaled by
 * `rowshiftctl scale --workers N` or a --schedule, and SIGTERM to one of
 * them drains it as a pod deletion would. With --state FILE the job's
 * generation, phase and plan are persisted; a coordinator started again
 * with the same --state finds its workers (they wait --grace for it) and
 * resolves whatever cycle was in flight.
 *
 * Kubernetes mode (--kubernetes) watches the pods of the worker StatefulSet
 * (coordinator/kube_members.h): `kubectl scale` changes the world, a deleted
 * pod drains first; the state lives in a ConfigMap, so a restarted
 * coordinator pod carries on; every reshard is an Event on the StatefulSet.
 */
#include "common/config.h"
#include "common/checkpoint.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "coordinator/job.h"
#include "coordinator/kube_members.h"
#include "coordinator/local.h"
#include "coordinator/server.h"
#include "coordinator/state.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_WORKERS 4096

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* ---- the local membership source, as the job sees it ----------------------------- */

static rs_status src_scale(void *ctx, int32_t n, rs_err *err) { return rs_local_scale(ctx, n, err); }
static int32_t src_replicas(void *ctx) { return rs_local_replicas(ctx); }
static int src_wanted(void *ctx, const char *name) { return rs_local_wanted(ctx, name); }
static void src_ending(void *ctx) { rs_local_set_restart(ctx, 0); }

static int src_list(void *ctx, const char **names, int64_t *pids, int max)
{
	return rs_local_list(ctx, names, pids, max);
}

/* A worker this coordinator did not start (its predecessor did): watch it by pid. */
static void src_joined(void *ctx, const char *name, int64_t pid)
{
	const char *names[MAX_WORKERS];
	int64_t pids[MAX_WORKERS];
	int n = rs_local_list(ctx, names, pids, MAX_WORKERS);
	rs_err err = {0};
	for (int i = 0; i < n && i < MAX_WORKERS; i++)
		if (!strcmp(names[i], name))
			return;
	if (rs_local_adopt(ctx, name, pid, &err) != RS_OK)
		RS_WARN("%s", err.msg);
}

static void on_exit_cb(void *ctx, const char *name, int clean, const char *how)
{
	rs_job_exited(ctx, name, clean, how);
}

/* ---- set-up ------------------------------------------------------------------------ */

/* Tell rowshiftctl where this job is and how to join it: {"url", "token", "status_token"?}, readable by this user only. */
static rs_status write_admin_file(const char *path, const char *url, const char *token, const char *status_token,
				  rs_err *err)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return rs_err_set(err, RS_EINVAL, "--admin-file %s: path too long", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	json_t *j = json_pack("{s:s, s:s, s:s*}", "url", url, "token", token, "status_token", status_token);
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

/* Parse "STEP:WORKERS,..." with increasing steps. */
static rs_status parse_schedule(const char *s, rs_job_options *o, rs_err *err)
{
	o->nsched = 0;
	while (s && *s) {
		char *end;
		long long st = strtoll(s, &end, 10);
		if (end == s || *end != ':')
			return rs_err_set(err, RS_EINVAL, "--schedule: expected STEP:WORKERS at '%s'", s);
		long w = strtol(end + 1, &end, 10);
		if (st <= 0 || w < 1 || w > MAX_WORKERS || (o->nsched && st <= o->sched_step[o->nsched - 1]) ||
		    o->nsched >= RS_STATE_MAX_SCHEDULE || (*end && *end != ','))
			return rs_err_set(err, RS_EINVAL, "--schedule: bad entry at '%s' (steps increase, 1..%d workers)", s,
					  MAX_WORKERS);
		o->sched_step[o->nsched] = st;
		o->sched_workers[o->nsched++] = (int32_t)w;
		s = *end ? end + 1 : end;
	}
	return RS_OK;
}

/* The port of "ws://HOST:PORT", for listening where a previous coordinator did. */
static int url_port(const char *url)
{
	const char *colon = strrchr(url, ':');
	return colon ? atoi(colon + 1) : 0;
}

/* ---- Kubernetes mode ------------------------------------------------------------------------ */

typedef struct kube_args {
	const char *config, *listen, *log_json, *status_token;
	const char *kubeconfig, *context, *api_server, *token_file, *ca;
	const char *ns, *statefulset, *selector, *state_cm;
	int64_t steps;
	int debounce_ms, timeout_ms, max_attempts;
} kube_args;

/* How to reach the API: --api-server, else in-cluster, else a kubeconfig (client-go's order). */
static rs_status kube_config(const kube_args *a, rs_kube_config *kc, rs_err *err)
{
	if (a->api_server) {
		memset(kc, 0, sizeof(*kc));
		kc->server = strdup(a->api_server);
		kc->token_file = a->token_file ? strdup(a->token_file) : NULL;
		kc->ca_file = a->ca ? strdup(a->ca) : NULL;
		snprintf(kc->source, sizeof(kc->source), "--api-server %s", a->api_server);
		return kc->server ? RS_OK : RS_ENOMEM;
	}
	if (!a->kubeconfig) {
		rs_status st = rs_kube_config_in_cluster(RS_KUBE_SERVICE_ACCOUNT_DIR, kc, err);
		if (st != RS_ENOTFOUND)
			return st;
		err->msg[0] = 0;
	}
	char path[PATH_MAX];
	const char *home = getenv("HOME");
	snprintf(path, sizeof(path), "%s/.kube/config", home ? home : "");
	return rs_kube_config_load(a->kubeconfig ? a->kubeconfig : path, a->context, kc, err);
}

/* The status stream's last events (the job is done) reach its clients before the server goes: at most 1 s. */
static void flush_status(rs_server *srv)
{
	for (double until = rs_now() + 1; rs_now() < until && rs_server_status_queued(srv) > 0;)
		rs_server_service(srv, 20);
}

/* A failed job: tell every member to stop, and give the messages a moment to leave. */
static void stop_members(rs_job *job, rs_server *srv)
{
	if (!job || !srv)
		return;
	rs_job_stop_all(job);
	for (int k = 0; k < 10; k++)
		rs_server_service(srv, 20);
}

/* --kubernetes: the workers are the pods of a StatefulSet; the job is kept in a ConfigMap. The exit status. */
static int run_kubernetes(const kube_args *a)
{
	static rs_job_options o;
	static rs_kube_members mem;
	rs_err err = {0};
	rs_kube_config kc = {0};
	rs_config *cfg = NULL;
	rs_kube *kube = NULL;
	rs_server *srv = NULL;
	rs_job *job = NULL;
	rs_state state = {0};
	FILE *log = NULL;
	char state_name[300], url[300];
	const char *token = getenv("ROWSHIFT_JOIN_TOKEN");
	int rc = 1;
	rs_status st;

	if (!a->config || !a->statefulset || !token || !*token) {
		fprintf(stderr, "rowshift-coordinator: Kubernetes mode needs --config, --statefulset and ROWSHIFT_JOIN_TOKEN\n");
		return 2;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR || sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
		fprintf(stderr, "rowshift-coordinator: cannot set up signal handling\n");
		return 1;
	}
	RSCHECKGOTO(rs_config_load(a->config, &cfg, &err), st, fail);
	RSCHECKGOTO(kube_config(a, &kc, &err), st, fail);
	const char *ns = a->ns ? a->ns : kc.namespace ? kc.namespace : "default";
	snprintf(state_name, sizeof(state_name), "%s", a->state_cm ? a->state_cm : "");
	if (!a->state_cm)
		snprintf(state_name, sizeof(state_name), "%s-state", a->statefulset);
	mem.statefulset = a->statefulset;
	mem.configmap = state_name;
	rs_kube_handler kh = rs_kube_members_handler(&mem);
	RSCHECKGOTO(rs_kube_create(&kc, ns, a->statefulset, a->selector, &kh, &kube, &err), st, fail);
	mem.kube = kube;
	RS_INFO("kubernetes: %s, namespace %s, statefulset %s, state in configmap %s", kc.source, ns, a->statefulset,
		state_name);
	/* a previous coordinator's unfinished job carries on */
	/* an API server not answering yet (the coordinator pod may start first) is waited for, up to --timeout-ms */
	for (double until = rs_now() + a->timeout_ms / 1000.0;;) {
		st = rs_kube_members_load(&mem, &state, &err);
		if (st == RS_OK || st == RS_ENOTFOUND || (st != RS_ECURL && st != RS_EIO) || rs_now() + 1 > until ||
		    interrupted)
			break;
		RS_WARN("%s; trying again in 1 s", err.msg);
		rs_sleep(1);
	}
	if (st != RS_OK && st != RS_ENOTFOUND)
		goto fail;
	int recovering = st == RS_OK && state.phase != RS_STATE_DONE;
	err.msg[0] = 0;
	if (a->log_json && !(log = fopen(a->log_json, "a"))) {
		st = rs_err_set(&err, RS_EIO, "%s: %s", a->log_json, strerror(errno));
		goto fail;
	}
	snprintf(url, sizeof(url), "ws://%s", a->listen);
	o = (rs_job_options){.cfg = cfg, .config_path = a->config, .url = url, .token = token,
			     .steps = a->steps >= 0 ? a->steps : cfg->train.steps, .debounce_ms = a->debounce_ms,
			     .timeout_ms = a->timeout_ms, .max_attempts = a->max_attempts, .log_json = log,
			     .save_state = rs_kube_members_save, .save_ctx = &mem};
	rs_job_source src = rs_kube_members_source(&mem);
	if (recovering)
		RSCHECKGOTO(rs_job_recover(&o, &src, &state, &job, &err), st, fail);
	else
		RSCHECKGOTO(rs_job_create(&o, &src, 0, &job, &err), st, fail);
	mem.job = job;
	rs_server_handler h = rs_job_server_handler(job);
	RSCHECKGOTO(rs_server_create(a->listen, token, &h, &srv, &err), st, fail);
	if (a->status_token && rs_server_set_status_token(srv, a->status_token) != RS_OK) {
		st = rs_err_set(&err, RS_EINVAL, "--status-token: longer than 1024 bytes");
		goto fail;
	}
	rs_job_set_server(job, srv);
	RS_INFO("control channel, status and dashboard on port %d; %s", rs_server_port(srv),
		recovering ? "resuming the job in the state configmap" : "waiting for the worker pods");
	while (!rs_job_finished(job) && !interrupted) {
		rs_server_service(srv, 20);
		rs_kube_poll(kube);
		rs_job_tick(job);
	}
	if (interrupted) {
		/* a coordinator pod being replaced: the workers wait for the next one, which reads the state */
		RS_WARN("interrupted: the workers carry on and wait for the next coordinator");
		rc = 0;
		goto out;
	}
	if (rs_job_finished(job) < 0) {
		st = rs_err_set(&err, RS_EABORTED, "%s", rs_job_error(job));
		goto fail;
	}
	flush_status(srv);
	rc = 0;
	goto out;
fail:
	RS_ERROR("%s", err.msg[0] ? err.msg : rs_status_str(st));
	stop_members(job, srv);
out:
	rs_server_destroy(srv);
	rs_job_destroy(job);
	rs_kube_destroy(kube);
	rs_kube_config_free(&kc);
	rs_state_free(&state);
	if (log)
		fclose(log);
	rs_config_free(cfg);
	return rc;
}

int main(int argc, char **argv)
{
	const char *config = NULL, *listen = "127.0.0.1:0", *log_json = NULL, *worker_bin = NULL, *save = NULL;
	const char *schedule = NULL, *admin_file = NULL, *state_path = NULL, *load = NULL, *status_token = NULL;
	const char *kubeconfig = NULL, *kube_context = NULL, *api_server = NULL, *kube_token_file = NULL, *kube_ca = NULL;
	const char *ns = NULL, *statefulset = NULL, *selector = "app.kubernetes.io/component=worker", *state_cm = NULL;
	char admin_default[128];
	snprintf(admin_default, sizeof(admin_default), "/tmp/rowshift-%d.json", (int)getuid());
	admin_file = admin_default;
	int64_t workers = 2, steps = -1, timeout_ms = 60000, debounce_ms = 1000, grace_ms = 60000, max_attempts = 3;
	bool local = false, kubernetes = false, help = false;
	rs_param params[] = {
		RS_PARAM("--local", NULL, RS_PARAM_FLAG, NULL, NULL, "run the workers as processes on this machine", &local),
		RS_PARAM("--kubernetes", NULL, RS_PARAM_FLAG, NULL, NULL, "the workers are the pods of a StatefulSet (see --statefulset)", &kubernetes),
		RS_PARAM("--statefulset", "ROWSHIFT_STATEFULSET", RS_PARAM_STR, NULL, "NAME", "the worker StatefulSet (Kubernetes mode)", &statefulset),
		RS_PARAM("--selector", "ROWSHIFT_SELECTOR", RS_PARAM_STR, "app.kubernetes.io/component=worker", "LABELS", "label selector of the worker pods (Kubernetes mode)", &selector),
		RS_PARAM("--namespace", "POD_NAMESPACE", RS_PARAM_STR, NULL, "NS", "the namespace (default: the service account's, or the kubeconfig context's)", &ns),
		RS_PARAM("--state-configmap", "ROWSHIFT_STATE_CONFIGMAP", RS_PARAM_STR, NULL, "NAME", "the ConfigMap keeping the job's state (Kubernetes mode; default STATEFULSET-state)", &state_cm),
		RS_PARAM("--kubeconfig", "KUBECONFIG", RS_PARAM_STR, NULL, "FILE", "reach the API as this kubeconfig says (default: in-cluster, else ~/.kube/config)", &kubeconfig),
		RS_PARAM("--context", NULL, RS_PARAM_STR, NULL, "NAME", "the kubeconfig context (default: its current-context)", &kube_context),
		RS_PARAM("--api-server", "ROWSHIFT_API_SERVER", RS_PARAM_STR, NULL, "URL", "the API server's URL (tests; with --kube-token-file and --kube-ca)", &api_server),
		RS_PARAM("--kube-token-file", NULL, RS_PARAM_STR, NULL, "FILE", "bearer token for --api-server", &kube_token_file),
		RS_PARAM("--kube-ca", NULL, RS_PARAM_STR, NULL, "FILE", "CA certificate for --api-server (TLS is verified)", &kube_ca),
		RS_PARAM("--workers", "ROWSHIFT_WORKERS", RS_PARAM_INT, "2", "N", "number of workers to start with (local mode)", &workers),
		RS_PARAM("--config", "ROWSHIFT_CONFIG", RS_PARAM_STR, NULL, "FILE", "model config (JSON)", &config),
		RS_PARAM("--steps", "ROWSHIFT_STEPS", RS_PARAM_INT, "-1", "S", "steps to train (-1: the config's train.steps)", &steps),
		RS_PARAM("--listen", "ROWSHIFT_LISTEN", RS_PARAM_STR, "127.0.0.1:0", "HOST:PORT", "where the control channel listens (port 0: any)", &listen),
		RS_PARAM("--log-json", NULL, RS_PARAM_STR, NULL, "FILE", "write one JSON line per progress report and per reshard", &log_json),
		RS_PARAM("--schedule", NULL, RS_PARAM_STR, NULL, "STEP:N,...", "rescale live: at STEP go to N workers (local mode)", &schedule),
		RS_PARAM("--state", "ROWSHIFT_STATE", RS_PARAM_STR, NULL, "FILE", "persist generation, phase and plan here; started again with an unfinished FILE, resume that job", &state_path),
		RS_PARAM("--debounce-ms", "ROWSHIFT_DEBOUNCE_MS", RS_PARAM_INT, "1000", "MS", "longest wait for the rest of a membership change (e.g. the 4 new pods of a scale 4 -> 8) before resharding", &debounce_ms),
		RS_PARAM("--max-attempts", "ROWSHIFT_MAX_ATTEMPTS", RS_PARAM_INT, "3", "N", "reshard attempts aborted in a row before the job fails", &max_attempts),
		RS_PARAM("--grace-ms", "ROWSHIFT_COORDINATOR_GRACE_MS", RS_PARAM_INT, "60000", "MS", "how long workers wait for a lost coordinator to come back (local mode)", &grace_ms),
		RS_PARAM("--status-token", "ROWSHIFT_STATUS_TOKEN", RS_PARAM_STR, NULL, "TOKEN", "require this bearer token of status stream clients (default: none)", &status_token),
		RS_PARAM("--admin-file", "ROWSHIFT_ADMIN_FILE", RS_PARAM_STR, NULL, "FILE", "where rowshiftctl finds this job (URL and token, mode 0600; default /tmp/rowshift-UID.json)", &admin_file),
		RS_PARAM("--load", "ROWSHIFT_LOAD", RS_PARAM_STR, NULL, "DIR", "start from this checkpoint (any world size; training goes on from its step)", &load),
		RS_PARAM("--save", "ROWSHIFT_SAVE", RS_PARAM_STR, NULL, "DIR", "write a checkpoint (safetensors) here at the end", &save),
		RS_PARAM("--worker-bin", "ROWSHIFT_WORKER_BIN", RS_PARAM_STR, NULL, "PATH", "the worker binary (default: beside this one)", &worker_bin),
		RS_PARAM("--timeout-ms", "ROWSHIFT_TIMEOUT_MS", RS_PARAM_INT, "60000", "MS", "longest wait for workers to join, pause, stage or rejoin", &timeout_ms),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshift-coordinator --local --workers N --config FILE [--steps S] [--schedule STEP:N,...]\n"
			    "       [--state FILE] [--listen HOST:PORT] [--log-json FILE] [--save DIR]\n"
			    "       rowshift-coordinator --kubernetes --statefulset NAME --config FILE [--listen HOST:PORT]\n"
			    "       [--kubeconfig FILE | --api-server URL] [--namespace NS] [--state-configmap NAME]\n"
			    "  the join token comes from ROWSHIFT_JOIN_TOKEN in Kubernetes mode";
	rs_err err = {0};
	const char *pos[1];
	int npos, rc = 1;
	rs_config *cfg = NULL;
	rs_server *srv = NULL;
	rs_local *lw = NULL;
	rs_job *job = NULL;
	rs_state state = {0};
	int recovering = 0;
	char token[1100] = "", url[300], bin[PATH_MAX], listen_buf[300];
	FILE *log = NULL;
	rs_status st;
	static rs_job_options o;

	rs_log_init("coordinator", -1);
	if (rs_params_parse(params, np, argc, argv, 1, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshift-coordinator: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	if (local == kubernetes) {
		fprintf(stderr, "rowshift-coordinator: choose --local or --kubernetes\n%s\n", usage);
		return 2;
	}
	if (kubernetes)
		return run_kubernetes(&(kube_args){config, listen, log_json, status_token, kubeconfig, kube_context, api_server,
						   kube_token_file, kube_ca, ns, statefulset, selector, state_cm, steps,
						   (int)debounce_ms, (int)timeout_ms, (int)max_attempts});
	if (state_path) {
		st = rs_state_read(state_path, &state, &err);
		if (st == RS_OK && state.phase != RS_STATE_DONE) {
			recovering = 1;
		} else if (st != RS_OK && st != RS_ENOTFOUND) {
			fprintf(stderr, "rowshift-coordinator: %s\n", err.msg);
			return 1;
		}
		err.msg[0] = 0;
	}
	if (recovering) {
		/* the job as it was started; the command line may not contradict it */
		if (config && strcmp(config, state.config) != 0) {
			fprintf(stderr, "rowshift-coordinator: --config %s, but %s resumes a job of %s\n", config, state_path,
				state.config);
			rs_state_free(&state);
			return 2;
		}
		config = state.config;
		steps = state.steps;
		save = state.save;
		snprintf(token, sizeof(token), "%s", state.token);
		snprintf(listen_buf, sizeof(listen_buf), "127.0.0.1:%d", url_port(state.url));
		listen = listen_buf;
		memcpy(o.sched_step, state.sched_step, sizeof(o.sched_step));
		memcpy(o.sched_workers, state.sched_workers, sizeof(o.sched_workers));
		o.nsched = state.nsched;
	} else if (parse_schedule(schedule, &o, &err) != RS_OK) {
		fprintf(stderr, "rowshift-coordinator: %s\n", err.msg);
		return 2;
	}
	if (!config || workers < 1 || workers > MAX_WORKERS || debounce_ms < 0 || timeout_ms < 100 || grace_ms < 0) {
		fprintf(stderr, "rowshift-coordinator: --config and --workers 1..%d are required\n%s\n", MAX_WORKERS, usage);
		rs_state_free(&state);
		return 2;
	}
	if (!worker_bin) {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n <= 0) {
			fprintf(stderr, "rowshift-coordinator: cannot find the worker binary; pass --worker-bin\n");
			rs_state_free(&state);
			return 2;
		}
		self[n] = 0;
		snprintf(bin, sizeof(bin), "%s/rowshift-worker", dirname(self));
		worker_bin = bin;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR || sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
		fprintf(stderr, "rowshift-coordinator: cannot set up signal handling\n");
		rs_state_free(&state);
		return 1;
	}
	RSCHECKGOTO(rs_config_load(config, &cfg, &err), st, fail);
	if (save && !recovering && mkdir(save, 0755) != 0 && errno != EEXIST) {
		st = rs_err_set(&err, RS_EIO, "--save %s: %s", save, strerror(errno));
		goto fail;
	}
	if (steps < 0)
		steps = cfg->train.steps;
	if (load && !recovering) {
		json_t *index;
		RSCHECKGOTO(rs_checkpoint_read_index(load, &index, &o.load_step, &err), st, fail);
		json_decref(index);
		if (o.load_step > steps) {
			st = rs_err_set(&err, RS_EINVAL, "--load %s is at step %lld, past --steps %lld", load,
					(long long)o.load_step, (long long)steps);
			goto fail;
		}
		o.load = load;
	}
	if (log_json && !(log = fopen(log_json, recovering ? "a" : "w"))) {
		st = rs_err_set(&err, RS_EIO, "%s: %s", log_json, strerror(errno));
		goto fail;
	}
	if (!token[0] && make_token(token, sizeof(token)) != RS_OK) {
		st = rs_err_set(&err, RS_ESYS, "cannot read /dev/urandom for the join token");
		goto fail;
	}
	o.cfg = cfg;
	o.config_path = config;
	o.token = token;
	o.url = url;
	o.steps = steps;
	o.save = save;
	o.debounce_ms = (int)debounce_ms;
	o.timeout_ms = (int)timeout_ms;
	o.max_attempts = (int)max_attempts;
	o.log_json = log;
	o.state_path = state_path;
	rs_local_options lo = {.worker_bin = worker_bin, .url = url, .config = config, .token = token,
			       .timeout_ms = timeout_ms / 2, .grace_ms = grace_ms};
	RSCHECKGOTO(rs_local_create(&lo, &lw, &err), st, fail);
	rs_job_source src = {.ctx = lw, .scale = src_scale, .replicas = src_replicas, .wanted = src_wanted,
			     .joined = src_joined, .list = src_list, .ending = src_ending};
	/* the job and the workers read the URL from `url`, filled once the server is listening */
	if (recovering) {
		for (int i = 0; i < state.nworkers; i++)
			if (rs_local_adopt(lw, state.workers[i].name, state.workers[i].pid, &err) != RS_OK)
				goto fail;
		RSCHECKGOTO(rs_job_recover(&o, &src, &state, &job, &err), st, fail);
	} else {
		RSCHECKGOTO(rs_job_create(&o, &src, (int32_t)workers, &job, &err), st, fail);
	}
	rs_server_handler h = rs_job_server_handler(job);
	RSCHECKGOTO(rs_server_create(listen, token, &h, &srv, &err), st, fail);
	if (status_token && rs_server_set_status_token(srv, status_token) != RS_OK) {
		st = rs_err_set(&err, RS_EINVAL, "--status-token: longer than 1024 bytes");
		goto fail;
	}
	rs_job_set_server(job, srv);
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d", rs_server_port(srv));
	if (recovering) /* the wanted workers that are missing start now */
		RSCHECKGOTO(rs_local_scale(lw, state.replicas, &err), st, fail);
	RSCHECKGOTO(write_admin_file(admin_file, url, token, status_token, &err), st, fail);
	RS_INFO("control channel on %s; dashboard and status at http://127.0.0.1:%d/; %s", url, rs_server_port(srv),
		recovering ? "resuming the job in the state file" : "starting the workers");

	while (!rs_job_finished(job) && !interrupted) {
		rs_server_service(srv, 20);
		rs_local_poll(lw, on_exit_cb, job);
		rs_job_tick(job);
	}
	if (interrupted && state_path) {
		/* the job goes on without us: the workers wait --grace-ms for a coordinator started on the same state */
		RS_WARN("interrupted: leaving the workers running; start again with --state %s to carry on", state_path);
		rs_local_destroy(lw);
		lw = NULL;
		rc = 0;
		goto out;
	}
	if (interrupted) {
		st = rs_err_set(&err, RS_EABORTED, "interrupted");
		goto fail;
	}
	if (rs_job_finished(job) < 0) {
		st = rs_err_set(&err, RS_EABORTED, "%s", rs_job_error(job));
		goto fail;
	}
	rc = 0;
	flush_status(srv);
	rs_server_service(srv, 0);
	goto out;
fail:
	RS_ERROR("%s", err.msg[0] ? err.msg : rs_status_str(st));
	stop_members(job, srv);
out:
	/* workers exit on their own when done or told to stop; bound the wait */
	if (lw) {
		rs_local_set_restart(lw, 0);
		for (double until = rs_now() + 10; rs_now() < until;) {
			const char *names[1];
			int64_t pids[1];
			rs_local_poll(lw, job ? on_exit_cb : NULL, job);
			if (!rs_local_list(lw, names, pids, 1))
				break;
			if (srv)
				rs_server_service(srv, 50);
			else
				rs_sleep(0.05);
		}
		rs_local_stop_all(lw, 0);
	}
	if (srv)
		unlink(admin_file);
	rs_server_destroy(srv);
	rs_job_destroy(job);
	rs_local_destroy(lw);
	if (log)
		fclose(log);
	rs_config_free(cfg);
	rs_state_free(&state);
	return rc;
}
