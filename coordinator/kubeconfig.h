/*
 * kubeconfig.h - how the coordinator reaches the Kubernetes API, found the
 * way client-go finds it:
 *   1. --api-server URL (tests): the token from --kube-token-file, TLS
 *      verified against --kube-ca when given;
 *   2. in-cluster: KUBERNETES_SERVICE_HOST and _PORT, and the service
 *      account's token, ca.crt and namespace files;
 *   3. a kubeconfig file (--kubeconfig, else $KUBECONFIG, a colon-separated
 *      list merged as kubectl merges it, else ~/.kube/config): its current
 *      context (or --context) picks the
 *      cluster (server, certificate-authority or -data,
 *      insecure-skip-tls-verify) and the user (token, tokenFile,
 *      client-certificate and -key, or their -data).
 * TLS is verified against the cluster's CA; verification is off only when
 * the kubeconfig says insecure-skip-tls-verify: true. An exec credential
 * plugin (client.authentication.k8s.io/v1 or v1beta1) is run for a token
 * (kube_exec.h); auth-provider plugins (removed from kubectl) are refused
 * with a clear message.
 */
#ifndef RS_KUBECONFIG_H
#define RS_KUBECONFIG_H

#include "common/status.h"

#include <stddef.h>

#define RS_KUBE_SERVICE_ACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct rs_kube_config {
	char *server;            /* https://HOST:PORT, no trailing slash */
	char *ca_file;           /* PEM file, or NULL */
	char *ca_data;           /* PEM bytes (decoded), or NULL */
	size_t ca_data_len;
	char *token;             /* a static bearer token, or NULL */
	char *token_file;        /* a token file re-read as it rotates, or NULL */
	char *cert_file, *key_file;
	char *cert_data, *key_data; /* PEM bytes (decoded), or NULL */
	size_t cert_data_len, key_data_len;
	int insecure;            /* skip TLS verification: only when the kubeconfig asks */
	char *namespace;         /* the context's or the service account's namespace, or NULL */
	/* an exec credential plugin (kube_exec.h): its command and args, env ("NAME=value"), apiVersion; or NULL */
	char **exec_argv, **exec_env, *exec_api;
	char source[512];        /* for messages: "in-cluster", "kubeconfig FILE, context C" */
} rs_kube_config;

/* In-cluster configuration from the environment and the service-account directory `sa_dir`. */
rs_status rs_kube_config_in_cluster(const char *sa_dir, rs_kube_config *c, rs_err *err);

/*
 * A kubeconfig's text (YAML or JSON). `path` names it in messages and
 * anchors relative file paths; `context` NULL means current-context.
 */
rs_status rs_kube_config_parse(const char *text, size_t len, const char *path, const char *context,
			       rs_kube_config *c, rs_err *err);

/* Read and parse a kubeconfig file. */
rs_status rs_kube_config_load(const char *path, const char *context, rs_kube_config *c, rs_err *err);

/*
 * A KUBECONFIG list ("a:b:c"), merged as kubectl merges it: files that do
 * not exist are skipped; the first file to name a cluster, user or context
 * wins, and the first to set current-context; relative paths stay anchored
 * to the file that holds them. RS_ENOTFOUND when none exists.
 */
rs_status rs_kube_config_load_list(const char *list, const char *context, rs_kube_config *c, rs_err *err);

/* How to reach the API when the command line names it: --api-server, --kube-token-file, --kube-ca. */
typedef struct rs_kube_config_flags {
	const char *api_server, *token_file, *ca;
	const char *kubeconfig, *context;     /* --kubeconfig (or KUBECONFIG), --context */
} rs_kube_config_flags;

/*
 * The configuration client-go would pick: an explicit --api-server, else
 * in-cluster (the service account), else the kubeconfig (--kubeconfig,
 * else ~/.kube/config) and its context.
 */
rs_status rs_kube_config_find(const rs_kube_config_flags *f, rs_kube_config *c, rs_err *err);

void rs_kube_config_free(rs_kube_config *c);

/* NULL-terminated string vectors (exec_argv, exec_env): a deep copy (NULL without memory or for NULL), and its free. */
char **rs_strv_dup(char *const *v);
void rs_strv_free(char **v);

#endif
