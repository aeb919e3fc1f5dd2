/*
 * rowshift-coordinator - holds the membership and the plan, runs the
 * resharding cycle (coordinator/job.h) and serves the workers' control
 * channel, the status stream and the dashboard (coordinator/server.h).
 *
 * One start-up for both modes; each mode is a membership source:
 *   --local       the workers are processes on this machine, kept like a
 *                 StatefulSet's pods (coordinator/local.h), scaled by
 *                 `rowshiftctl scale` or a --schedule; a coordinator
 *                 started again on its --state carries the job on
 *   --kubernetes  the pods of a StatefulSet (coordinator/kube_members.h):
 *                 `kubectl scale` changes the world; the state lives in a
 *                 ConfigMap, so a restarted pod carries on; reshards are Events
 */
#include "common/checkpoint.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/log.h"
#include "common/secret.h"
#include "coordinator/flags.h"
#include "coordinator/job.h"
#include "coordinator/kube_members.h"
#include "coordinator/local.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) { (void)sig, interrupted = 1; }

/* What start-up builds from the command line. */
typedef struct coord {
	rs_coord_flags f;
	const char *config, *listen, *save; /* the flags', or the recovered job's */
	int64_t workers, steps;
	char token[1100], url[300], listen_buf[300], state_name[300], admin[4096], load[4096];
	rs_state state;           /* a previous coordinator's, when recovering */
	int recovering, usage;    /* usage: the command line (or the state) contradicts itself: exit 2 */
	int over;                 /* --local on the state of a job that is done: nothing to train, exit 0 */
	rs_job_options o;
	rs_job_source src;
	rs_local_members lm;      /* --local */
	rs_kube_members km;       /* --kubernetes */
	rs_kube_config kc;
	rs_config *cfg;
	FILE *log;
	rs_job *job;
	rs_server *srv;
	const char *status_token;
	char *token_buf;          /* the status token file's contents */
} coord;

/* The command line (or the state it names) contradicts itself: say so, and exit 2. */
static __attribute__((format(printf, 3, 4))) rs_status bad_usage(coord *c, rs_err *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	rs_err_vset(err, RS_EINVAL, fmt, ap);
	va_end(ap);
	c->usage = 1;
	return RS_EINVAL;
}

/* --local: the state file (if any) decides the job; the workers are started here. */
static rs_status open_local(coord *c, rs_err *err)
{
	rs_status st = c->f.state_path ? rs_state_read(c->f.state_path, &c->state, err) : RS_ENOTFOUND;
	if (st != RS_OK && st != RS_ENOTFOUND)
		return st;
	if (st == RS_OK && c->state.phase == RS_STATE_FAILED)
		return rs_err_set(err, RS_EINVAL, "the job of %s failed: %s (remove the file to start afresh)", c->f.state_path,
				  c->state.error);
	c->recovering = st == RS_OK;
	err->msg[0] = 0;
	if (c->recovering) { /* the job as it was started; the command line may not contradict it */
		if (rs_state_local_resume(&c->state, c->f.state_path, c->config, c->steps, &c->over, err) != RS_OK) {
			c->usage = 1;
			return RS_EINVAL;
		}
		if (c->over) { /* as in Kubernetes, a job that ended is not trained again */
			RS_WARN("%s", err->msg);
			return RS_OK;
		}
		c->config = c->state.config, c->steps = c->state.steps, c->save = c->state.save;
		if (!c->f.checkpoint_dir && c->state.ckpt_dir) /* the job's checkpoints, unless the command line moves them */
			c->f.checkpoint_dir = c->state.ckpt_dir, c->f.checkpoint_every = c->state.ckpt_every,
			c->f.checkpoint_interval = c->state.ckpt_interval, c->f.checkpoint_keep = c->state.ckpt_keep;
		snprintf(c->token, sizeof(c->token), "%s", c->state.token);
		const char *colon = strrchr(c->state.url, ':');
		snprintf(c->listen_buf, sizeof(c->listen_buf), "127.0.0.1:%d", colon ? atoi(colon + 1) : 0);
		c->listen = c->listen_buf;
		memcpy(c->o.sched_step, c->state.sched_step, sizeof(c->o.sched_step));
		memcpy(c->o.sched_workers, c->state.sched_workers, sizeof(c->o.sched_workers));
		c->o.nsched = c->state.nsched;
	} else if (rs_job_parse_schedule(c->f.schedule, &c->o, err) != RS_OK) {
		return bad_usage(c, err, "%s", "");
	} else if (rs_secret_hex(c->token, sizeof(c->token), 16) != RS_OK) {
		return rs_err_set(err, RS_ESYS, "cannot draw a join token from the kernel");
	}
	if (!c->config || c->workers < 1 || c->workers > RS_MAX_WORKERS)
		return bad_usage(c, err, "--config and --workers 1..%d are required", RS_MAX_WORKERS);
	/* the workers read the URL from c->url, filled once the server listens */
	rs_local_options lo = {.worker_bin = c->f.worker_bin, .url = c->url, .config = c->config, .token = c->token,
			       .timeout_ms = c->f.timeout_ms / 2, .grace_ms = c->f.grace_ms};
	RSCHECK(rs_local_create(&lo, &c->lm.local, err));
	c->lm.state_path = c->f.state_path;
	for (int i = 0; c->recovering && i < c->state.nworkers; i++)
		RSCHECK(rs_local_adopt(c->lm.local, c->state.workers[i].name, c->state.workers[i].pid, err));
	c->src = rs_local_members_source(&c->lm);
	return RS_OK;
}

/* --kubernetes: how to reach the API (client-go's order), the pods, and the state in its ConfigMap. */
static rs_status open_kube(coord *c, rs_err *err)
{
	const char *token = getenv("ROWSHIFT_JOIN_TOKEN");
	if (!c->config || !c->f.statefulset || !token || !*token)
		return bad_usage(c, err, "Kubernetes mode needs --config, --statefulset and ROWSHIFT_JOIN_TOKEN");
	if (strlen(token) < 32 || strstr(token, "REPLACE-ME")) /* short: guessable offline from a captured proof */
		return bad_usage(c, err, "ROWSHIFT_JOIN_TOKEN is %s: put 32 or more random characters in the Secret "
			   "(openssl rand -hex 32)", strstr(token, "REPLACE-ME") ? "the manifests' placeholder" : "too short");
	snprintf(c->token, sizeof(c->token), "%s", token);
	rs_kube_config_flags kf = {c->f.api_server, c->f.kube_token_file, c->f.kube_ca, c->f.kubeconfig, c->f.context};
	RSCHECK(rs_kube_config_find(&kf, &c->kc, err));
	const char *ns = c->f.ns ? c->f.ns : c->kc.namespace ? c->kc.namespace : "default";
	snprintf(c->state_name, sizeof(c->state_name), "%s%s", c->f.state_cm ? c->f.state_cm : c->f.statefulset,
		 c->f.state_cm ? "" : "-state");
	c->km.statefulset = c->f.statefulset, c->km.configmap = c->state_name, c->km.lease_name = c->f.lease;
	rs_kube_handler kh = rs_kube_members_handler(&c->km);
	RSCHECK(rs_kube_create(&c->kc, ns, c->f.statefulset, c->f.selector, &kh, &c->km.kube, err));
	RS_INFO("kubernetes: %s, namespace %s, statefulset %s, state in configmap %s", c->kc.source, ns, c->f.statefulset,
		c->state_name);
	rs_status st = rs_kube_members_load(&c->km, &c->state, (int)c->f.timeout_ms, &interrupted, err);
	if (st != RS_OK && st != RS_ENOTFOUND)
		return st;
	c->recovering = st == RS_OK; /* an ended job too: it stays ended (rs_kube_members_ended) */
	err->msg[0] = 0;
	snprintf(c->url, sizeof(c->url), "%s://%s", c->f.tls_cert ? "wss" : "ws", c->listen);
	c->workers = 0; /* the StatefulSet's pods are the workers */
	c->src = rs_kube_members_source(&c->km);
	return RS_OK;
}

/* Both modes: the config, the job (fresh or recovered), the server. */
static rs_status start(coord *c, rs_err *err)
{
	RSCHECK(rs_config_load(c->config, &c->cfg, err));
	if (c->f.sharding_group > 0) /* the workers learn it from the plan */
		c->cfg->cluster.sharding_group = (int32_t)c->f.sharding_group;
	if (c->steps < 0)
		c->steps = c->cfg->train.steps;
	if (c->f.load && !c->recovering) { /* a checkpoint, or the newest complete one of periodic checkpoints */
		RSCHECK(rs_checkpoint_find(c->f.load, -1, c->load, sizeof(c->load), &c->o.load_step, err));
		if (c->o.load_step > c->steps)
			return rs_err_set(err, RS_EINVAL, "--load %s is at step %lld, past --steps %lld", c->f.load,
					  (long long)c->o.load_step, (long long)c->steps);
		c->o.load = c->load;
	}
	if (c->f.log_json && !(c->log = fopen(c->f.log_json, c->recovering || c->f.kubernetes ? "a" : "w")))
		return rs_err_set(err, RS_EIO, "%s: %s", c->f.log_json, strerror(errno));
	c->o.cfg = c->cfg, c->o.config_path = c->config, c->o.token = c->token, c->o.url = c->url;
	c->o.steps = c->steps, c->o.save = c->save, c->o.log_json = c->log;
	c->o.ckpt_dir = c->f.checkpoint_dir, c->o.ckpt_every = c->f.checkpoint_every,
	c->o.ckpt_interval = c->f.checkpoint_interval, c->o.ckpt_keep = (int)c->f.checkpoint_keep;
	const char *dirs[2][2] = {{"--save", c->save}, {"--checkpoint-dir", c->o.ckpt_dir}}; /* both modes: a volume in Kubernetes */
	for (int i = 0; i < 2; i++)
		if (dirs[i][1] && mkdir(dirs[i][1], 0700) != 0 && errno != EEXIST)
			return rs_err_set(err, RS_EIO, "%s %s: %s", dirs[i][0], dirs[i][1], strerror(errno));
	c->o.debounce_ms = (int)c->f.debounce_ms, c->o.timeout_ms = (int)c->f.timeout_ms, c->o.max_attempts = (int)c->f.max_attempts;
	if (c->recovering)
		RSCHECK(rs_job_recover(&c->o, &c->src, &c->state, &c->job, err));
	else
		RSCHECK(rs_job_create(&c->o, &c->src, (int32_t)c->workers, &c->job, err));
	c->lm.job = c->km.job = c->job;
	rs_server_handler h = rs_job_server_handler(c->job);
	char model[RS_CONFIG_DIGEST_LEN + 1]; /* workers must join with the same (the server keeps a copy) */
	rs_config_digest(c->cfg, model);
	rs_server_opts so = {.listen = c->listen, .token = c->token, .model = model, .hosts = c->f.allowed_hosts,
			     .tls_cert = c->f.tls_cert, .tls_key = c->f.tls_key, .term = c->km.term};
	RSCHECK(rs_server_create(&so, &h, &c->srv, err));
	RSCHECK(rs_coord_status_token(&c->f, &c->token_buf, &c->status_token, err));
	if (c->status_token && rs_server_set_status_token(c->srv, c->status_token) != RS_OK)
		return rs_err_set(err, RS_EINVAL, "the status token is longer than 1024 bytes");
	rs_job_set_server(c->job, c->srv);
	if (c->f.local) {
		snprintf(c->url, sizeof(c->url), "%s://127.0.0.1:%d", c->f.tls_cert ? "wss" : "ws", rs_server_port(c->srv));
		if (c->f.tls_cert) { /* the workers started here reach 127.0.0.1 and trust the certificate itself, unless told otherwise */
			RSCHECK(rs_server_cert_names(c->f.tls_cert, "127.0.0.1", err));
			char *abs = realpath(c->f.tls_cert, NULL); /* by its full path: rowshiftctl runs elsewhere */
			setenv("ROWSHIFT_TLS_CA", abs ? abs : c->f.tls_cert, 0);
			free(abs);
		}
		if (c->recovering) /* the wanted workers that are missing start now (8 at a time) */
			RSCHECK(rs_local_scale(c->lm.local, c->state.replicas, err));
		if (c->f.admin_file)
			snprintf(c->admin, sizeof(c->admin), "%s", c->f.admin_file);
		else if (rs_file_private_dir("rowshift", c->admin, sizeof(c->admin) - 32, err) == RS_OK)
			snprintf(c->admin + strlen(c->admin), 32, "/job-%d.json", rs_server_port(c->srv));
		else
			return RS_EINVAL;
		RSCHECK(rs_local_write_admin_file(c->admin, c->url, c->token, c->status_token,
						  c->f.tls_cert ? getenv("ROWSHIFT_TLS_CA") : NULL, model, err));
	}
	RS_INFO("control channel, status and dashboard on port %d; %s", rs_server_port(c->srv),
		c->recovering ? "recovering the job from its state" : "starting");
	return RS_OK;
}

/* The end: the status stream's last events go out (at most 1 s), or a failed job's members are stopped. */
static void finish(coord *c, int failed)
{
	if (!c->srv || !c->job)
		return;
	if (failed)
		rs_job_stop_all(c->job);
	for (double until = rs_now() + 1; rs_now() < until && (failed || rs_server_status_queued(c->srv) > 0);) {
		rs_server_service(c->srv, 20);
		failed = failed && rs_now() < until - 0.8; /* stop messages: 0.2 s */
	}
	if (c->lm.local)
		rs_local_members_end(&c->lm, c->srv);
}

int main(int argc, char **argv)
{
	static coord c;
	rs_err err = {0};
	int rc;
	rs_status st;
	rs_log_init("coordinator", -1);
	if ((rc = rs_coord_flags_parse(&c.f, argc, argv)) >= 0)
		return rc;
	rc = 1, c.config = c.f.config, c.listen = c.f.listen, c.save = c.f.save, c.workers = c.f.workers, c.steps = c.f.steps;
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR || sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
		fprintf(stderr, "rowshift-coordinator: cannot set up signal handling\n");
		return 1;
	}
	st = c.f.local ? open_local(&c, &err) : open_kube(&c, &err);
	if (c.usage || c.over) {
		if (c.usage)
			fprintf(stderr, "rowshift-coordinator: %s\n%s\n", err.msg, rs_coord_usage);
		rc = c.usage ? 2 : 0;
		goto out;
	}
	if (st == RS_OK && (st = start(&c, &err)) != RS_OK && c.km.kube) /* e.g. a changed model refusing the state */
		rs_kube_members_warn(&c.km, "CannotStart", err.msg[0] ? err.msg : rs_status_str(st));
	while (st == RS_OK && !rs_job_finished(c.job) && !interrupted) {
		if (c.f.local) /* first: a coordinator deposed while it was blocked or frozen stops before it says more */
			rs_local_members_poll(&c.lm);
		else
			rs_kube_poll(c.km.kube);
		rs_server_service(c.srv, 20);
		rs_job_tick(c.job);
	}
	if (st == RS_OK && c.f.kubernetes && rs_job_finished(c.job) > 0) {
		rs_kube_members_ended(&c.km, c.srv, &interrupted); /* done: until SIGTERM (a failure exits, to be restarted) */
		rc = 0;
	} else if (st == RS_OK && interrupted && (c.f.kubernetes || c.f.state_path)) {
		/* the job goes on without us: the workers wait for a coordinator started on the same state */
		RS_WARN("interrupted: the workers carry on and wait for the next coordinator%s%s",
			c.f.local ? "; start again with --state " : "", c.f.local ? c.f.state_path : "");
		rs_local_destroy(c.lm.local);
		c.lm.local = NULL;
		rc = 0;
	} else if (st == RS_OK && interrupted) {
		st = rs_err_set(&err, RS_EABORTED, "interrupted");
	} else if (st == RS_OK && rs_job_finished(c.job) < 0) {
		st = rs_err_set(&err, RS_EABORTED, "%s", rs_job_error(c.job));
	} else if (st == RS_OK) {
		rc = 0;
	}
	if (st != RS_OK)
		RS_ERROR("%s", err.msg[0] ? err.msg : rs_status_str(st));
	if (rc != 0 || !interrupted)
		finish(&c, st != RS_OK);
out:
	if (c.admin[0])
		unlink(c.admin);
	rs_server_destroy(c.srv);
	rs_job_destroy(c.job);
	rs_local_destroy(c.lm.local);
	rs_kube_destroy(c.km.kube);
	rs_kube_config_free(&c.kc);
	if (c.log)
		fclose(c.log);
	rs_config_free(c.cfg);
	rs_state_free(&c.state);
	free(c.token_buf);
	return rc;
}
