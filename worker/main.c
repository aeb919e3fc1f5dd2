/*
 * rowshift-worker - one per pod (per GPU; a CPU process in local mode).
 * This file is flags and start-up: the engine (--device), the transport
 * kind (--transport), signal handling, the connection to the coordinator;
 * then one agent (worker/agent.h) does what the coordinator says,
 * generation after generation, until its part is over.
 *
 * Built with RS_HAVE_CUDA, it can put shards and kernels on a CUDA device
 * (worker/engine_cuda.h); with RS_HAVE_NCCL too, each generation's
 * transport can be an NCCL communicator, bootstrapped over the
 * generation's TCP mesh (worker/transport_nccl.h). The Makefile defines
 * both where nvcc exists.
 *
 * SIGTERM (what Kubernetes sends a pod it deletes) only sets a flag the
 * agent reads between steps: it asks the coordinator to drain its rows and
 * exits after they are handed over (at once when it holds none).
 */
#include "common/config.h"
#include "common/control.h"
#include "common/log.h"
#include "common/param.h"
#include "common/wsmsg.h"
#include "worker/agent.h"
#include "worker/engine.h"
#ifdef RS_HAVE_CUDA
#include "worker/engine_cuda.h"
#endif
#ifdef RS_HAVE_NCCL
#include "worker/transport_nccl.h"
#endif
#include "worker/train.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t terminated;

static void on_sigterm(int sig)
{
	(void)sig;
	terminated = 1;
}

/*
 * The engine `spec` names: cpu, cuda, cuda:N, or auto (CUDA device 0 when
 * this build has CUDA and the machine a device, else the CPU).
 */
static rs_status open_engine(const char *spec, rs_engine **out, int *cuda_device, rs_err *err)
{
	*out = rs_engine_cpu();
	*cuda_device = -1;
	if (!strcmp(spec, "cpu"))
		return RS_OK;
	int device = 0;
	if (strcmp(spec, "auto") && strcmp(spec, "cuda")) {
		char *end;
		if (strncmp(spec, "cuda:", 5) || !spec[5] || (device = (int)strtol(spec + 5, &end, 10)) < 0 || *end)
			return rs_err_set(err, RS_EINVAL, "--device: '%s' is not auto, cpu, cuda or cuda:N", spec);
	}
#ifdef RS_HAVE_CUDA
	const char *why;
	if (!strcmp(spec, "auto") && !rs_cuda_devices(&why)) {
		RS_INFO("device: the CPU (no CUDA device: %s)", why);
		return RS_OK;
	}
	rs_status st = rs_engine_cuda_create(device, out, err);
	if (st == RS_OK)
		*cuda_device = device;
	if (st != RS_OK && !strcmp(spec, "auto")) {
		RS_WARN("device: the CPU (CUDA device 0 cannot be used: %s)", err->msg);
		*out = rs_engine_cpu();
		err->msg[0] = 0;
		return RS_OK;
	}
	return st;
#else
	if (!strcmp(spec, "auto"))
		return RS_OK;
	return rs_err_set(err, RS_EUNSUPPORTED, "--device %s: this worker was built without CUDA", spec);
#endif
}

#ifdef RS_HAVE_NCCL
/* The agent's connect function for --transport nccl (ctx: the CUDA device): the TCP mesh, then NCCL over it. */
static rs_status connect_nccl(void *ctx, const rs_tcp_config *tc, rs_transport **out, rs_err *err)
{
	rs_transport *boot;
	RSCHECK(rs_tcp_transport_create(tc, &boot, err));
	/* rank 0's unique id goes to the others over the TCP mesh their join token admitted */
	rs_status st = rs_nccl_transport_bootstrap(boot, *(const int *)ctx, tc->generation, tc->timeout_ms, out, err);
	if (st != RS_OK)
		rs_transport_destroy(boot);
	else
		RS_INFO("generation %llu: NCCL communicator, rank %d of %d", (unsigned long long)tc->generation,
			(*out)->rank, (*out)->world);
	return st;
}
#endif

/* --transport: tcp (the agent's default), or nccl on a CUDA device where this build has NCCL. */
static rs_status choose_transport(const char *kind, const rs_engine *engine, const int *cuda_device,
				  rs_agent_config *ac, rs_err *err)
{
	if (!strcmp(kind, "tcp"))
		return RS_OK;
	if (strcmp(kind, "nccl"))
		return rs_err_set(err, RS_EINVAL, "--transport: '%s' is not tcp or nccl", kind);
	if (*cuda_device < 0)
		return rs_err_set(err, RS_EINVAL, "--transport nccl needs the worker on a CUDA device (it is on %s)",
				  engine->name);
#ifdef RS_HAVE_NCCL
	ac->connect = connect_nccl;
	ac->connect_ctx = (void *)cuda_device;
	return RS_OK;
#else
	(void)ac;
	return rs_err_set(err, RS_EUNSUPPORTED, "--transport nccl: this worker was built without NCCL");
#endif
}

int main(int argc, char **argv)
{
	const char *url = NULL, *config = NULL, *name = NULL, *host = NULL, *fault = NULL, *device = NULL;
	const char *transport = NULL, *tls_ca = NULL, *ready_file = NULL, *pod_uid = NULL;
	int64_t timeout_ms = 30000, grace_ms = 60000, ws_hangup_s = RS_WS_HANGUP_S;
	bool help = false, check_device = false;
	rs_param params[] = {
		RS_PARAM("--coordinator", "ROWSHIFT_COORDINATOR", RS_PARAM_STR, NULL, "URL", "the coordinator's control channel, ws://HOST:PORT (wss:// over TLS: HOST a name or an IPv4 address)", &url),
		RS_PARAM("--tls-ca", "ROWSHIFT_TLS_CA", RS_PARAM_STR, NULL, "FILE", "CA certificates (PEM) a wss:// coordinator's certificate must chain to (default: the system's); its name is verified too", &tls_ca),
		RS_PARAM("--config", "ROWSHIFT_CONFIG", RS_PARAM_STR, NULL, "FILE", "model config (JSON)", &config),
		RS_PARAM("--name", "POD_NAME", RS_PARAM_STR, NULL, "NAME", "this worker's name (the pod name)", &name),
		RS_PARAM("--pod-uid", "POD_UID", RS_PARAM_STR, NULL, "UID", "this worker's pod's metadata.uid: the coordinator tells this pod's deletion from an earlier one's of the same name", &pod_uid),
		RS_PARAM("--host", "POD_IP", RS_PARAM_STR, "127.0.0.1", "ADDR", "address peers reach this worker's transport on", &host),
		RS_PARAM("--timeout-ms", "ROWSHIFT_TIMEOUT_MS", RS_PARAM_INT, "30000", "MS", "bound on every wait for a peer or the coordinator's answer (at the final save, plus the whole model at 10 MiB/s)", &timeout_ms),
		RS_PARAM("--coordinator-grace-ms", "ROWSHIFT_COORDINATOR_GRACE_MS", RS_PARAM_INT, "60000", "MS", "how long to wait for a lost coordinator to come back before exiting", &grace_ms),
		RS_PARAM("--ws-hangup-s", "ROWSHIFT_WS_HANGUP_S", RS_PARAM_INT, RS_WS_HANGUP_TEXT, "S", "close the connection to the coordinator S s after its last PONG (a PING goes after max(1, S/20) s of silence; 3..3600): the coordinator's --ws-hangup-s", &ws_hangup_s),
		RS_PARAM("--device", "ROWSHIFT_DEVICE", RS_PARAM_STR, "auto", "DEV", "where the shards live and the kernels run: auto (a CUDA device if there is one), cpu, cuda or cuda:N", &device),
		RS_PARAM("--fault", "ROWSHIFT_FAULT", RS_PARAM_STR, NULL, "HOOK", "tests only: corrupt-chunk (the first chunk received is damaged), stall-ms=N (every reshard waits N ms before moving rows), stall-connect-ms=N (before connecting its transport), checkpoint-stall-ms=N[@STEP] (a checkpoint's writer, after its first file; only STEP's), exit-after-checkpoint=STEP[@NAME] (exit once the checkpoint of STEP is complete) or exit-before-done[@NAME] (exit after the last step and the final save, before saying done)", &fault),
		RS_PARAM("--transport", "ROWSHIFT_TRANSPORT", RS_PARAM_STR, "tcp", "KIND", "between workers: tcp, or nccl (one worker per GPU; needs a CUDA --device)", &transport),
		RS_PARAM("--ready-file", "ROWSHIFT_READY_FILE", RS_PARAM_STR, NULL, "FILE", "exists exactly while this worker holds a model of the job (joined, until it hands its rows over): for a readiness probe", &ready_file),
		RS_PARAM("--check-device", NULL, RS_PARAM_FLAG, NULL, NULL, "open the --device, say which it is and exit (0: usable)", &check_device),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *usage = "usage: rowshift-worker --coordinator ws://HOST:PORT --config FILE [--name NAME]\n"
			    "  the join token comes from ROWSHIFT_JOIN_TOKEN";
	rs_err err = {0};
	const char *pos[1];
	int npos, rc = 1, cuda_device = -1;
	char buf[64];
	rs_config *cfg = NULL;
	char model[RS_CONFIG_DIGEST_LEN + 1]; /* its digest, which the joins carry */
	rs_engine *engine = NULL;
	rs_coord_conn *conn = NULL;
	rs_agent *agent = NULL;
	rs_agent_end end;
	rs_agent_config ac = {.leave = &terminated};
	rs_status st = RS_OK;

	if (rs_params_parse(params, np, argc, argv, 1, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshift-worker: %s\n", err.msg);
		return 2;
	}
	if (help) {
		rs_params_usage(stdout, usage, params, np);
		return 0;
	}
	if (check_device) {
		if (open_engine(device, &engine, &cuda_device, &err) != RS_OK) {
			fprintf(stderr, "rowshift-worker: %s\n", err.msg);
			return 1;
		}
		printf("%s\n", engine->name);
		rs_engine_destroy(engine);
		return 0;
	}
	/* a mistyped value is refused, not replaced by a default (the coordinator's ranges) */
	const char *range = timeout_ms < 100 || timeout_ms > 3600000		? "--timeout-ms: 100..3600000"
			    : grace_ms < 0 || grace_ms > 86400000 ? "--coordinator-grace-ms: 0..86400000"
			    : ws_hangup_s < RS_WS_HANGUP_MIN_S || ws_hangup_s > RS_WS_HANGUP_MAX_S ? "--ws-hangup-s: 3..3600"
								  : NULL;
	if (range) {
		fprintf(stderr, "rowshift-worker: %s\n%s\n", range, usage);
		return 2;
	}
	const char *token = getenv("ROWSHIFT_JOIN_TOKEN");
	if (!url || !config || !token || !*token) {
		fprintf(stderr, "rowshift-worker: --coordinator, --config and ROWSHIFT_JOIN_TOKEN are required\n%s\n", usage);
		return 2;
	}
	if (rs_control_set_tls_ca(tls_ca, &err) != RS_OK) {
		fprintf(stderr, "rowshift-worker: %s\n", err.msg);
		return 2;
	}
	if (fault && !strcmp(fault, "corrupt-chunk")) {
		rs_reshard_fault_for_tests = 1;
	} else if (fault && !strncmp(fault, "stall-ms=", 9)) {
		ac.stall_ms = atoll(fault + 9);
	} else if (fault && !strncmp(fault, "stall-connect-ms=", 17)) {
		ac.stall_connect_ms = atoll(fault + 17);
	} else if (fault && !strncmp(fault, "checkpoint-stall-ms=", 20)) {
		rs_checkpoint_stall_ms_for_tests = atoll(fault + 20);
		const char *at = strchr(fault, '@');
		if (at)
			rs_checkpoint_stall_step_for_tests = atoll(at + 1);
	} else if (fault && !strncmp(fault, "exit-after-checkpoint=", 22)) {
		const char *at = strchr(fault, '@'); /* STEP@NAME: only the worker of that name */
		if (!at || (name && !strcmp(at + 1, name)))
			ac.exit_after_checkpoint = atoll(fault + 22);
	} else if (fault && !strncmp(fault, "exit-before-done", 16) && (!fault[16] || fault[16] == '@')) {
		ac.exit_before_done = !fault[16] || (name && !strcmp(fault + 17, name));
	} else if (fault) {
		fprintf(stderr, "rowshift-worker: --fault: unknown hook '%s'\n", fault);
		return 2;
	}
	if (!name) {
		snprintf(buf, sizeof(buf), "worker-%d", (int)getpid());
		name = buf;
	}
	rs_log_init(name, -1);
	rs_ws_set_hangup((uint16_t)ws_hangup_s); /* before the control connection's context */
	if (rs_control_set_pod_uid(pod_uid, &err) != RS_OK) { /* a help to the coordinator, not a need: go on without */
		RS_WARN("%s: ignored (a late deletion of an earlier pod of this name may then be taken for this worker's end)",
			err.msg);
		err = (rs_err){0};
	}
	struct sigaction sa = {.sa_handler = on_sigterm};
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) != 0 || signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
		fprintf(stderr, "rowshift-worker: cannot set up signal handling\n");
		return 1;
	}

	RSCHECKGOTO(rs_config_load(config, &cfg, &err), st, fail);
	RSCHECKGOTO(open_engine(device, &engine, &cuda_device, &err), st, fail);
	RS_INFO("shards and kernels on %s", engine->name);
	RSCHECKGOTO(choose_transport(transport, engine, &cuda_device, &ac, &err), st, fail);
	rs_config_digest(cfg, model);
	if (rs_coord_conn_control(url, token, name, model, &conn) != RS_OK)
		RSFAILGOTO(st, rs_err_set(&err, RS_ENOMEM, "out of memory"), fail);
	ac.cfg = cfg, ac.engine = engine, ac.conn = conn, ac.host = host, ac.token = token;
	ac.timeout_ms = (int)timeout_ms, ac.grace_ms = (int)grace_ms, ac.ready_file = ready_file;
	RSCHECKGOTO(rs_agent_create(&ac, &agent, &err), st, fail);
	RSCHECKGOTO(rs_agent_run(agent, &end, &err), st, fail);
	rc = 0;
	goto out;
fail:
	RS_ERROR("%s", err.msg[0] ? err.msg : rs_status_str(st));
out:
	rs_agent_destroy(agent);
	rs_coord_conn_destroy(conn);
	rs_engine_destroy(engine);
	rs_config_free(cfg);
	return rc;
}
