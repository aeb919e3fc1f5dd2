/*
 * kube_exec.h - client-go's exec credential plugins: the kubeconfig's
 * user.exec, as EKS (`aws eks get-token`), GKE (gke-gcloud-auth-plugin)
 * and AKS (kubelogin) write it, so that a coordinator run from a laptop
 * reaches those clusters.
 *
 * The command runs with its args, its env added to ours and
 * KUBERNETES_EXEC_INFO set (interactive: false), stdin from /dev/null, its
 * stderr ours, none of our other descriptors, in a process group of its own
 * (a timeout kills the group); it must exit 0 within the timeout, printing at most 64
 * KiB: an ExecCredential of the configured apiVersion whose status.token is
 * the bearer token, good until status.expirationTimestamp (none: until the
 * API refuses it with a 401). A plugin that returns a client certificate
 * instead is refused, saying so.
 */
#ifndef RS_KUBE_EXEC_H
#define RS_KUBE_EXEC_H

#include "common/status.h"

#define RS_KUBE_EXEC_TIMEOUT_MS 10000 /* it blocks the loop: well under a third of the Lease's 30 s */
#define RS_KUBE_EXEC_MAX_OUTPUT (64 * 1024)

/*
 * Parse a plugin's output (len bytes). *token gets a new string; *expires
 * the expiry in seconds since the epoch, or 0 when none was given.
 */
rs_status rs_kube_exec_parse(const char *text, size_t len, const char *api, char **token, double *expires,
			     rs_err *err);

/* Run the plugin argv (argv[0] looked up in PATH), env "NAME=value" entries added (NULL-terminated, or NULL). */
rs_status rs_kube_exec_run(char *const *argv, char *const *env, const char *api, int timeout_ms, char **token,
			   double *expires, rs_err *err);

#endif
