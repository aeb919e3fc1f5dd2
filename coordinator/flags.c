/*
 * flags.c - see flags.h.
 */
#include "coordinator/flags.h"
#include "common/file.h"
#include "common/limits.h"
#include "common/param.h"
#include "common/wsmsg.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *const rs_coord_usage =
	"usage: rowshift-coordinator --local --workers N --config FILE [--steps S] [--schedule STEP:N,...]\n"
	"       [--state FILE] [--listen HOST:PORT] [--log-json FILE] [--save DIR]\n"
	"       rowshift-coordinator --kubernetes --statefulset NAME --config FILE [--listen HOST:PORT]\n"
	"       [--kubeconfig FILE | --api-server URL] [--namespace NS] [--state-configmap NAME] [--lease NAME]\n"
	"  the join token comes from ROWSHIFT_JOIN_TOKEN in Kubernetes mode";

int rs_coord_flags_parse(rs_coord_flags *c, int argc, char **argv)
{
	rs_param params[] = {
		RS_PARAM("--local", NULL, RS_PARAM_FLAG, NULL, NULL, "run the workers as processes on this machine", &c->local),
		RS_PARAM("--kubernetes", NULL, RS_PARAM_FLAG, NULL, NULL, "the workers are the pods of a StatefulSet (see --statefulset)", &c->kubernetes),
		RS_PARAM("--statefulset", "ROWSHIFT_STATEFULSET", RS_PARAM_STR, NULL, "NAME", "the worker StatefulSet (Kubernetes mode)", &c->statefulset),
		RS_PARAM("--selector", "ROWSHIFT_SELECTOR", RS_PARAM_STR, "app.kubernetes.io/component=worker", "LABELS", "label selector of the worker pods (Kubernetes mode)", &c->selector),
		RS_PARAM("--namespace", "POD_NAMESPACE", RS_PARAM_STR, NULL, "NS", "the namespace (default: the service account's, or the kubeconfig context's)", &c->ns),
		RS_PARAM("--state-configmap", "ROWSHIFT_STATE_CONFIGMAP", RS_PARAM_STR, NULL, "NAME", "the ConfigMap keeping the job's state (Kubernetes mode; default STATEFULSET-state)", &c->state_cm),
		RS_PARAM("--lease", "ROWSHIFT_LEASE", RS_PARAM_STR, NULL, "NAME", "the Lease that keeps a second coordinator from acting (Kubernetes mode; default STATEFULSET-leader)", &c->lease),
		RS_PARAM("--kubeconfig", "KUBECONFIG", RS_PARAM_STR, NULL, "FILE", "reach the API as this kubeconfig says (default: in-cluster, else ~/.kube/config)", &c->kubeconfig),
		RS_PARAM("--context", NULL, RS_PARAM_STR, NULL, "NAME", "the kubeconfig context (default: its current-context)", &c->context),
		RS_PARAM("--api-server", "ROWSHIFT_API_SERVER", RS_PARAM_STR, NULL, "URL", "the API server's URL (tests; with --kube-token-file and --kube-ca)", &c->api_server),
		RS_PARAM("--kube-token-file", NULL, RS_PARAM_STR, NULL, "FILE", "bearer token for --api-server", &c->kube_token_file),
		RS_PARAM("--kube-ca", NULL, RS_PARAM_STR, NULL, "FILE", "CA certificate for --api-server (TLS is verified)", &c->kube_ca),
		RS_PARAM("--workers", "ROWSHIFT_WORKERS", RS_PARAM_INT, "2", "N", "number of workers to start with (local mode)", &c->workers),
		RS_PARAM("--config", "ROWSHIFT_CONFIG", RS_PARAM_STR, NULL, "FILE", "model config (JSON)", &c->config),
		RS_PARAM("--steps", "ROWSHIFT_STEPS", RS_PARAM_INT, "-1", "S", "steps to train (-1: the config's train.steps)", &c->steps),
		RS_PARAM("--listen", "ROWSHIFT_LISTEN", RS_PARAM_STR, "127.0.0.1:0", "HOST:PORT", "where the control channel listens (port 0: any)", &c->listen),
		RS_PARAM("--log-json", NULL, RS_PARAM_STR, NULL, "FILE", "write one JSON line per progress report and per reshard", &c->log_json),
		RS_PARAM("--schedule", NULL, RS_PARAM_STR, NULL, "STEP:N,...", "rescale live: at STEP go to N workers (local mode)", &c->schedule),
		RS_PARAM("--state", "ROWSHIFT_STATE", RS_PARAM_STR, NULL, "FILE", "persist generation, phase and plan here; started again on FILE, resume its job (a job that is done: say so, exit 0)", &c->state_path),
		RS_PARAM("--debounce-ms", "ROWSHIFT_DEBOUNCE_MS", RS_PARAM_INT, "1000", "MS", "longest wait for the rest of a membership change (e.g. the 4 new pods of a scale 4 -> 8) before resharding", &c->debounce_ms),
		RS_PARAM("--sharding-group", "ROWSHIFT_SHARDING_GROUP", RS_PARAM_INT, "0", "S", "2D layout: replica groups of S workers, whenever the world is a multiple of S whose groups divide cluster.ranks_per_node (else 1D); 0: the config's cluster.sharding_group, if any", &c->sharding_group),
		RS_PARAM("--max-attempts", "ROWSHIFT_MAX_ATTEMPTS", RS_PARAM_INT, "3", "N", "reshard attempts aborted in a row, and recoveries back to the same step, before the job fails", &c->max_attempts),
		RS_PARAM("--grace-ms", "ROWSHIFT_COORDINATOR_GRACE_MS", RS_PARAM_INT, "60000", "MS", "how long workers wait for a lost coordinator to come back (local mode)", &c->grace_ms),
		RS_PARAM("--status-token-file", "ROWSHIFT_STATUS_TOKEN_FILE", RS_PARAM_STR, NULL, "FILE", "require the bearer token in FILE of status stream and /metrics clients (or the token itself in ROWSHIFT_STATUS_TOKEN; never on the command line; default: none)", &c->status_token_file),
		RS_PARAM("--allowed-hosts", "ROWSHIFT_ALLOWED_HOSTS", RS_PARAM_STR, NULL, "NAME,...", "host names a browser may reach the dashboard, the status stream and /metrics by, besides IP addresses, localhost and the --listen host (a Service's DNS name, an ingress); a page under any other name is refused (DNS rebinding)", &c->allowed_hosts),
		RS_PARAM("--tls-cert", "ROWSHIFT_TLS_CERT", RS_PARAM_STR, NULL, "FILE", "serve TLS only (wss://, https://) with this PEM certificate (chain); workers and rowshiftctl verify it against ROWSHIFT_TLS_CA or the system's CAs (local mode: the certificate itself when ROWSHIFT_TLS_CA is unset)", &c->tls_cert),
		RS_PARAM("--tls-key", "ROWSHIFT_TLS_KEY", RS_PARAM_STR, NULL, "FILE", "the PEM private key of --tls-cert", &c->tls_key),
		RS_PARAM("--admin-file", "ROWSHIFT_ADMIN_FILE", RS_PARAM_STR, NULL, "FILE", "where rowshiftctl finds this job (URL and token, mode 0600; default: job-PORT.json in $XDG_RUNTIME_DIR/rowshift or /tmp/rowshift-UID, this user's only)", &c->admin_file),
		RS_PARAM("--load", "ROWSHIFT_LOAD", RS_PARAM_STR, NULL, "DIR", "start from this checkpoint (any world size; training goes on from its step)", &c->load),
		RS_PARAM("--checkpoint-dir", "ROWSHIFT_CHECKPOINT_DIR", RS_PARAM_STR, NULL, "DIR", "periodic checkpoints (with --checkpoint-every or --checkpoint-interval) go to DIR/step-NNNNNNNNN/, written by every worker off its training thread; the index, written last once every worker's files are in, makes one complete (a directory every worker reaches: a shared volume in Kubernetes)", &c->checkpoint_dir),
		RS_PARAM("--checkpoint-every", "ROWSHIFT_CHECKPOINT_EVERY", RS_PARAM_INT, "0", "N", "take a periodic checkpoint at every multiple of N steps (0: none)", &c->checkpoint_every),
		RS_PARAM("--checkpoint-interval", "ROWSHIFT_CHECKPOINT_INTERVAL", RS_PARAM_INT, "0", "SECONDS", "also take one at the first step after SECONDS since the last (the workers agree on the step in that step's all-reduce; 0: none)", &c->checkpoint_interval),
		RS_PARAM("--checkpoint-keep", "ROWSHIFT_CHECKPOINT_KEEP", RS_PARAM_INT, "2", "K", "keep the newest K complete periodic checkpoints, delete older ones", &c->checkpoint_keep),
		RS_PARAM("--save", "ROWSHIFT_SAVE", RS_PARAM_STR, NULL, "DIR", "write a checkpoint (safetensors) here at the end", &c->save),
		RS_PARAM("--worker-bin", "ROWSHIFT_WORKER_BIN", RS_PARAM_STR, NULL, "PATH", "the worker binary (default: beside this one)", &c->worker_bin),
		RS_PARAM("--timeout-ms", "ROWSHIFT_TIMEOUT_MS", RS_PARAM_INT, "60000", "MS", "longest wait for workers to join, pause, stage or rejoin", &c->timeout_ms),
		RS_PARAM("--ws-hangup-s", "ROWSHIFT_WS_HANGUP_S", RS_PARAM_INT, RS_WS_HANGUP_TEXT, "S", "close a worker's or client's connection S s after its last PONG (a PING goes after max(1, S/20) s of silence; 3..3600); local workers get the same (in Kubernetes the chart's wsHangupSeconds sets both); a coordinator busy for longer than about S loses its members", &c->ws_hangup_s),
		RS_PARAM("--help", NULL, RS_PARAM_FLAG, NULL, NULL, "show this help", &c->help),
	};
	const int np = (int)(sizeof(params) / sizeof(params[0]));
	const char *pos[1];
	int npos;
	rs_err err = {0};
	if (rs_params_parse(params, np, argc, argv, 1, pos, 0, &npos, &err) != RS_OK) {
		fprintf(stderr, "rowshift-coordinator: %s\n", err.msg);
		return 2;
	}
	if (c->help) {
		rs_params_usage(stdout, rs_coord_usage, params, np);
		return 0;
	}
	/* the same ranges in both modes: a mistyped value is refused, not taken */
	const char *bad = c->local == c->kubernetes ? "choose --local or --kubernetes"
			  : c->debounce_ms < 0 || c->debounce_ms > 3600000 ? "--debounce-ms: 0..3600000"
			  : c->timeout_ms < 100 || c->timeout_ms > 3600000 ? "--timeout-ms: 100..3600000"
			  : c->grace_ms < 0 || c->grace_ms > 86400000 ? "--grace-ms: 0..86400000"
			  : c->max_attempts < 1 || c->max_attempts > 1000 ? "--max-attempts: 1..1000"
			  : c->sharding_group < 0 || c->sharding_group > RS_MAX_RANKS ? "--sharding-group: 0..65536"
			  : c->ws_hangup_s < RS_WS_HANGUP_MIN_S || c->ws_hangup_s > RS_WS_HANGUP_MAX_S ? "--ws-hangup-s: 3..3600"
			  : c->steps < -1 ? "--steps: -1 (the config's) or more"
			  : c->checkpoint_every < 0 || c->checkpoint_every > ((int64_t)1 << 40) ? "--checkpoint-every: 0..2^40"
			  : c->checkpoint_interval < 0 || c->checkpoint_interval > 31536000 ? "--checkpoint-interval: 0..31536000"
			  : c->checkpoint_keep < 1 || c->checkpoint_keep > 1000 ? "--checkpoint-keep: 1..1000"
			  : (c->checkpoint_every > 0 || c->checkpoint_interval > 0) != (c->checkpoint_dir != NULL)
			  ? "--checkpoint-dir goes with --checkpoint-every or --checkpoint-interval (or both)"
			  : c->checkpoint_keep != 2 && !c->checkpoint_dir ? "--checkpoint-keep goes with --checkpoint-dir"
									 : NULL;
	if (bad) {
		fprintf(stderr, "rowshift-coordinator: %s\n%s\n", bad, rs_coord_usage);
		return 2;
	}
	rs_ws_set_hangup((uint16_t)c->ws_hangup_s); /* before the server's context */
	return -1;
}

rs_status rs_coord_status_token(const rs_coord_flags *f, char **buf, const char **token, rs_err *err)
{
	size_t n;
	*token = getenv("ROWSHIFT_STATUS_TOKEN");
	if (!f->status_token_file)
		return RS_OK;
	RSCHECK(rs_file_read(f->status_token_file, 4096, buf, &n, err));
	while (n && ((*buf)[n - 1] == '\n' || (*buf)[n - 1] == '\r'))
		(*buf)[--n] = 0;
	if (!n)
		return rs_err_set(err, RS_EINVAL, "--status-token-file %s is empty", f->status_token_file);
	*token = *buf;
	return RS_OK;
}
