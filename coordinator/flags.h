/*
 * flags.h - rowshift-coordinator's command line: every flag with its
 * environment variable, default and help text in one table (common/param.h),
 * so --help, the README and the Helm chart's values agree.
 */
#ifndef RS_COORD_FLAGS_H
#define RS_COORD_FLAGS_H

#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct rs_coord_flags {
	bool local, kubernetes, help;
	const char *config, *listen, *log_json, *worker_bin, *save, *schedule, *admin_file, *state_path, *load;
	const char *status_token_file, *allowed_hosts, *tls_cert, *tls_key, *checkpoint_dir;
	/* Kubernetes mode */
	const char *kubeconfig, *context, *api_server, *kube_token_file, *kube_ca, *ns, *statefulset, *selector;
	const char *state_cm, *lease;
	int64_t workers, steps, timeout_ms, debounce_ms, grace_ms, max_attempts, checkpoint_every, checkpoint_keep,
		checkpoint_interval, sharding_group, ws_hangup_s;
} rs_coord_flags;

extern const char *const rs_coord_usage;

/*
 * Parse argv (and the environment) into f. Returns -1 to go on, else the
 * exit status: 0 after --help, 2 for a bad command line (said on stderr).
 */
int rs_coord_flags_parse(rs_coord_flags *f, int argc, char **argv);

/*
 * The status token: from --status-token-file (trailing newlines trimmed;
 * *buf holds it, the caller frees it), else ROWSHIFT_STATUS_TOKEN, else
 * none (*token NULL).
 */
rs_status rs_coord_status_token(const rs_coord_flags *f, char **buf, const char **token, rs_err *err);

#endif
