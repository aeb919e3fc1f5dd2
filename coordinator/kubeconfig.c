/*
 * kubeconfig.c - see kubeconfig.h.
 */
#include "coordinator/kubeconfig.h"
#include "common/file.h"
#include "coordinator/yaml.h"

#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A whole small file, NUL-terminated; NULL with err set when unreadable. */
static char *slurp(const char *path, size_t max, size_t *len, rs_err *err)
{
	char *buf;
	return rs_file_read(path, max, &buf, len, err) == RS_OK ? buf : NULL;
}

static char *dup_path(const char *base_dir, const char *p)
{
	char buf[PATH_MAX];
	if (!p)
		return NULL;
	if (p[0] == '/' || !base_dir)
		return strdup(p);
	snprintf(buf, sizeof(buf), "%s/%s", base_dir, p);
	return strdup(buf);
}

/* Base64 (standard alphabet, padding optional, whitespace ignored) into a malloc'd buffer. */
static char *unbase64(const char *in, size_t *len)
{
	size_t n = strlen(in), o = 0;
	unsigned char *out = malloc(n / 4 * 3 + 4);
	unsigned acc = 0;
	int bits = 0;
	if (!out)
		return NULL;
	for (const char *c = in; *c; c++) {
		int v;
		if (*c >= 'A' && *c <= 'Z')
			v = *c - 'A';
		else if (*c >= 'a' && *c <= 'z')
			v = *c - 'a' + 26;
		else if (*c >= '0' && *c <= '9')
			v = *c - '0' + 52;
		else if (*c == '+')
			v = 62;
		else if (*c == '/')
			v = 63;
		else if (*c == '=' || *c == '\n' || *c == '\r' || *c == ' ')
			continue;
		else {
			free(out);
			return NULL;
		}
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (unsigned char)(acc >> bits);
		}
	}
	out[o] = 0;
	*len = o;
	return (char *)out;
}

char **rs_strv_dup(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	char **out = v ? calloc(n + 1, sizeof(char *)) : NULL;
	for (size_t i = 0; out && i < n; i++)
		if (!(out[i] = strdup(v[i]))) {
			rs_strv_free(out);
			return NULL;
		}
	return out;
}

void rs_strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

void rs_kube_config_free(rs_kube_config *c)
{
	free(c->server);
	free(c->ca_file);
	free(c->ca_data);
	free(c->token);
	free(c->token_file);
	free(c->cert_file);
	free(c->key_file);
	free(c->cert_data);
	free(c->key_data);
	free(c->namespace);
	rs_strv_free(c->exec_argv);
	rs_strv_free(c->exec_env);
	free(c->exec_api);
	memset(c, 0, sizeof(*c));
}

static char *trimmed(char *s)
{
	size_t n = s ? strlen(s) : 0;
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
		s[--n] = 0;
	return s;
}

rs_status rs_kube_config_in_cluster(const char *sa_dir, rs_kube_config *c, rs_err *err)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
	char path[PATH_MAX];
	memset(c, 0, sizeof(*c));
	if (!host || !*host || !port || !*port)
		return rs_err_set(err, RS_ENOTFOUND, "not in a cluster: KUBERNETES_SERVICE_HOST and _PORT are not set");
	size_t n = strlen(host) + strlen(port) + 16;
	if (!(c->server = malloc(n)))
		return RS_ENOMEM;
	/* an IPv6 service address needs brackets */
	snprintf(c->server, n, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
	snprintf(path, sizeof(path), "%s/token", sa_dir);
	c->token_file = strdup(path);
	snprintf(path, sizeof(path), "%s/ca.crt", sa_dir);
	c->ca_file = strdup(path);
	snprintf(path, sizeof(path), "%s/namespace", sa_dir);
	c->namespace = trimmed(slurp(path, 4096, NULL, err));
	if (!c->token_file || !c->ca_file || !c->namespace) {
		rs_kube_config_free(c);
		return rs_err_set(err, RS_EIO, "in-cluster configuration: cannot read %s", path);
	}
	snprintf(c->source, sizeof(c->source), "in-cluster (%s)", sa_dir);
	return RS_OK;
}

/* The entry of `list` (an array of {"name", KEY: {...}}) named `name`, its KEY object; NULL when absent. */
static json_t *named(json_t *root, const char *list, const char *name, const char *key)
{
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(root, list), i, e) {
		const char *n = json_string_value(json_object_get(e, "name"));
		if (n && !strcmp(n, name))
			return json_object_get(e, key);
	}
	return NULL;
}

static const char *sget(json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* user.exec into c: {command, args?, env?: [{name, value}], apiVersion}; a relative command path anchored to dir. */
static rs_status exec_of(json_t *x, const char *path, const char *dir, const char *user, rs_kube_config *c, rs_err *err)
{
	const char *cmd = sget(x, "command"), *api = sget(x, "apiVersion");
	json_t *args = json_object_get(x, "args"), *env = json_object_get(x, "env"), *e;
	size_t i;
	if (!cmd || !*cmd)
		return rs_err_set(err, RS_EINVAL, "%s: user '%s': exec needs a command", path, user);
	if (!api || (strcmp(api, "client.authentication.k8s.io/v1") && strcmp(api, "client.authentication.k8s.io/v1beta1")))
		return rs_err_set(err, RS_EINVAL, "%s: user '%s': exec apiVersion must be client.authentication.k8s.io/v1 or "
				  "v1beta1", path, user);
	if ((args && !json_is_array(args)) || (env && !json_is_array(env)) || json_array_size(args) > 256 ||
	    json_array_size(env) > 256)
		return rs_err_set(err, RS_EINVAL, "%s: user '%s': exec args and env must be lists", path, user);
	c->exec_argv = calloc(json_array_size(args) + 2, sizeof(char *));
	c->exec_env = calloc(json_array_size(env) + 1, sizeof(char *));
	if (!c->exec_argv || !c->exec_env || !(c->exec_api = strdup(api)))
		return RS_ENOMEM;
	/* a command with a slash is a path: relative to the kubeconfig (as client-go does); else looked up in PATH */
	if (!(c->exec_argv[0] = strchr(cmd, '/') ? dup_path(dir, cmd) : strdup(cmd)))
		return RS_ENOMEM;
	json_array_foreach(args, i, e) {
		if (!json_is_string(e))
			return rs_err_set(err, RS_EINVAL, "%s: user '%s': exec args[%zu] is not a string", path, user, i);
		if (!(c->exec_argv[i + 1] = strdup(json_string_value(e))))
			return RS_ENOMEM;
	}
	json_array_foreach(env, i, e) {
		const char *n = sget(e, "name"), *v = sget(e, "value");
		if (!n || !*n || strchr(n, '=') || !v)
			return rs_err_set(err, RS_EINVAL, "%s: user '%s': exec env[%zu] needs a name (no '=') and a value", path,
					  user, i);
		size_t len = strlen(n) + strlen(v) + 2;
		if (!(c->exec_env[i] = malloc(len)))
			return RS_ENOMEM;
		snprintf(c->exec_env[i], len, "%s=%s", n, v);
	}
	return RS_OK;
}

/* The configuration a parsed kubeconfig (root, which it takes) names; dir anchors relative paths. */
static rs_status from_root(json_t *root, const char *path, const char *dir, const char *context, rs_kube_config *c,
			   rs_err *err)
{
	rs_status st;
	const char *ctx_name = context ? context : sget(root, "current-context");
	json_t *ctx = ctx_name ? named(root, "contexts", ctx_name, "context") : NULL;
	const char *cluster_name = sget(ctx, "cluster"), *user_name = sget(ctx, "user");
	json_t *cluster = cluster_name ? named(root, "clusters", cluster_name, "cluster") : NULL;
	json_t *user = user_name ? named(root, "users", user_name, "user") : NULL;
	st = RS_EINVAL;
	if (!json_is_object(root)) {
		rs_err_set(err, st, "%s: not a kubeconfig (a mapping with clusters, users and contexts)", path);
		goto out;
	}
	if (!ctx_name || !json_is_object(ctx)) {
		rs_err_set(err, st, "%s: no context %s%s%s", path, ctx_name ? "'" : "(current-context is not set)",
			   ctx_name ? ctx_name : "", ctx_name ? "'" : "");
		goto out;
	}
	if (!json_is_object(cluster) || !sget(cluster, "server")) {
		rs_err_set(err, st, "%s: context '%s': no cluster '%s' with a server", path, ctx_name,
			   cluster_name ? cluster_name : "?");
		goto out;
	}
	if (user_name && !json_is_object(user) && !json_is_null(user)) {
		rs_err_set(err, st, "%s: context '%s': no user '%s'", path, ctx_name, user_name);
		goto out;
	}
	if (json_object_get(user, "auth-provider")) {
		rs_err_set(err, RS_EUNSUPPORTED, "%s: user '%s': auth-provider plugins are not supported (kubectl removed "
			   "them too): use its exec plugin, a token, a token file or a client certificate", path, user_name);
		st = RS_EUNSUPPORTED;
		goto out;
	}
	if (json_object_get(user, "exec") && (st = exec_of(json_object_get(user, "exec"), path, dir, user_name, c, err)) != RS_OK)
		goto out;
	st = RS_EINVAL;
	const char *server = sget(cluster, "server");
	const char *host = !strncmp(server, "https://", 8) ? server + 8 : !strncmp(server, "http://", 7) ? server + 7 : NULL;
	if (!host || !*host || *host == '/') {
		rs_err_set(err, st, "%s: cluster '%s': server '%s' is not an http(s) URL with a host", path, cluster_name, server);
		goto out;
	}
	c->server = strdup(server);
	if (c->server && c->server[strlen(c->server) - 1] == '/')
		c->server[strlen(c->server) - 1] = 0;
	c->insecure = json_is_true(json_object_get(cluster, "insecure-skip-tls-verify"));
	c->ca_file = dup_path(dir, sget(cluster, "certificate-authority"));
	c->token = sget(user, "token") ? strdup(sget(user, "token")) : NULL;
	c->token_file = dup_path(dir, sget(user, "tokenFile"));
	c->cert_file = dup_path(dir, sget(user, "client-certificate"));
	c->key_file = dup_path(dir, sget(user, "client-key"));
	c->namespace = sget(ctx, "namespace") ? strdup(sget(ctx, "namespace")) : NULL;
	static const char *const b64[3] = {"certificate-authority-data", "client-certificate-data", "client-key-data"};
	char **dst[3] = {&c->ca_data, &c->cert_data, &c->key_data};
	size_t *lens[3] = {&c->ca_data_len, &c->cert_data_len, &c->key_data_len};
	for (int k = 0; k < 3; k++) {
		const char *v = sget(k ? user : cluster, b64[k]);
		if (v && !(*dst[k] = unbase64(v, lens[k]))) {
			rs_err_set(err, st, "%s: '%s' is not base64", path, b64[k]);
			goto out;
		}
	}
	if ((c->cert_file || c->cert_data) != (c->key_file || c->key_data)) {
		rs_err_set(err, st, "%s: user '%s': a client certificate needs its key, and a key its certificate", path,
			   user_name ? user_name : "?");
		goto out;
	}
	snprintf(c->source, sizeof(c->source), "kubeconfig %s, context %s", path, ctx_name);
	st = c->server ? RS_OK : RS_ENOMEM;
out:
	json_decref(root);
	if (st != RS_OK)
		rs_kube_config_free(c);
	return st;
}

rs_status rs_kube_config_parse(const char *text, size_t len, const char *path, const char *context,
			       rs_kube_config *c, rs_err *err)
{
	json_t *root = NULL;
	char dirbuf[PATH_MAX];
	memset(c, 0, sizeof(*c));
	RSCHECK(rs_yaml_parse(text, len, path, &root, err));
	snprintf(dirbuf, sizeof(dirbuf), "%s", path);
	return from_root(root, path, dirname(dirbuf), context, c, err);
}

/* In every entry of root's `list`, the path fields relative to dir made absolute (a merged file loses its dir). */
static void absolutize(json_t *root, const char *list, const char *key, const char *const *fields, const char *dir)
{
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(root, list), i, e) {
		json_t *o = json_object_get(e, key);
		for (int f = 0; fields[f] && json_is_object(o); f++) {
			const char *v = sget(o, fields[f]);
			char *abs = v && v[0] != '/' ? dup_path(dir, v) : NULL;
			if (abs)
				json_object_set_new(o, fields[f], json_string(abs));
			free(abs);
		}
	}
}

/* Merge src into dst as client-go merges a KUBECONFIG list: the first file to name an entry, or to set current-context, wins. */
static void merge(json_t *dst, json_t *src)
{
	static const char *const lists[] = {"clusters", "users", "contexts"};
	for (int l = 0; l < 3; l++) {
		json_t *to = json_object_get(dst, lists[l]), *e;
		size_t i;
		if (!json_is_array(to))
			json_object_set_new(dst, lists[l], to = json_array());
		json_array_foreach(json_object_get(src, lists[l]), i, e) {
			const char *n = sget(e, "name");
			size_t k;
			json_t *have;
			int dup = 0;
			json_array_foreach(to, k, have) dup |= n && sget(have, "name") && !strcmp(n, sget(have, "name"));
			if (n && !dup)
				json_array_append(to, e);
		}
	}
	const char *cur = sget(src, "current-context");
	if (cur && *cur && !(sget(dst, "current-context") && *sget(dst, "current-context")))
		json_object_set_new(dst, "current-context", json_string(cur));
}

rs_status rs_kube_config_load_list(const char *list, const char *context, rs_kube_config *c, rs_err *err)
{
	static const char *const cluster_paths[] = {"certificate-authority", NULL};
	static const char *const user_paths[] = {"tokenFile", "client-certificate", "client-key", NULL};
	json_t *merged = json_object();
	char *copy = strdup(list), *save = NULL, label[600];
	int files = 0;
	rs_status st = merged && copy ? RS_OK : RS_ENOMEM;
	memset(c, 0, sizeof(*c));
	for (char *p = copy ? strtok_r(copy, ":", &save) : NULL; p && st == RS_OK; p = strtok_r(NULL, ":", &save)) {
		size_t len;
		char *text = NULL, dirbuf[PATH_MAX];
		json_t *root = NULL;
		if (rs_file_read(p, RS_YAML_MAX_BYTES, &text, &len, err) == RS_ENOTFOUND) { /* client-go skips those */
			err->msg[0] = 0;
			continue;
		}
		st = text ? rs_yaml_parse(text, len, p, &root, err) : RS_EIO;
		free(text);
		if (st == RS_OK && !json_is_object(root))
			st = rs_err_set(err, RS_EINVAL, "%s: not a kubeconfig (a mapping with clusters, users and contexts)", p);
		/* its paths are relative to it, not to here: made absolute as kubectl does (links not followed) */
		char cwd[PATH_MAX], *abs = NULL;
		if (st == RS_OK && p[0] != '/' && !getcwd(cwd, sizeof(cwd)))
			st = rs_err_set(err, RS_EIO, "%s: the current directory: %s", p, strerror(errno));
		if (st == RS_OK && !(abs = p[0] == '/' ? strdup(p) : dup_path(cwd, p)))
			st = RS_ENOMEM;
		if (st == RS_OK) {
			snprintf(dirbuf, sizeof(dirbuf), "%s", abs);
			const char *dir = dirname(dirbuf);
			absolutize(root, "clusters", "cluster", cluster_paths, dir);
			absolutize(root, "users", "user", user_paths, dir);
			size_t u;
			json_t *e;
			json_array_foreach(json_object_get(root, "users"), u, e) { /* a command with a slash is a path too */
				json_t *x = json_object_get(json_object_get(e, "user"), "exec");
				const char *cmd = sget(x, "command");
				char *absc = cmd && cmd[0] != '/' && strchr(cmd, '/') ? dup_path(dir, cmd) : NULL;
				if (absc)
					json_object_set_new(x, "command", json_string(absc));
				free(absc);
			}
			merge(merged, root);
			files++;
		}
		free(abs);
		json_decref(root);
	}
	free(copy);
	if (st == RS_OK && !files)
		st = rs_err_set(err, RS_ENOTFOUND, "KUBECONFIG %s: none of its files exists", list);
	if (st != RS_OK) {
		json_decref(merged);
		return st;
	}
	snprintf(label, sizeof(label), "KUBECONFIG %s", list);
	return from_root(merged, label, "/", context, c, err);
}

rs_status rs_kube_config_load(const char *path, const char *context, rs_kube_config *c, rs_err *err)
{
	size_t len;
	char *text = slurp(path, RS_YAML_MAX_BYTES, &len, err);
	memset(c, 0, sizeof(*c));
	if (!text)
		return RS_EIO;
	rs_status st = rs_kube_config_parse(text, len, path, context, c, err);
	free(text);
	return st;
}

rs_status rs_kube_config_find(const rs_kube_config_flags *f, rs_kube_config *c, rs_err *err)
{
	char path[PATH_MAX];
	memset(c, 0, sizeof(*c));
	if (f->api_server) {
		c->server = strdup(f->api_server);
		c->token_file = f->token_file ? strdup(f->token_file) : NULL;
		c->ca_file = f->ca ? strdup(f->ca) : NULL;
		snprintf(c->source, sizeof(c->source), "--api-server %s", f->api_server);
		if (!c->server || (f->token_file && !c->token_file) || (f->ca && !c->ca_file)) {
			rs_kube_config_free(c);
			return rs_err_set(err, RS_ENOMEM, "kubernetes: out of memory");
		}
		return RS_OK;
	}
	if (!f->kubeconfig) {
		rs_status st = rs_kube_config_in_cluster(RS_KUBE_SERVICE_ACCOUNT_DIR, c, err);
		if (st != RS_ENOTFOUND)
			return st;
		err->msg[0] = 0;
	}
	const char *home = getenv("HOME");
	snprintf(path, sizeof(path), "%s/.kube/config", home ? home : "");
	if (f->kubeconfig && strchr(f->kubeconfig, ':')) /* KUBECONFIG=a:b, merged as kubectl merges it */
		return rs_kube_config_load_list(f->kubeconfig, f->context, c, err);
	return rs_kube_config_load(f->kubeconfig ? f->kubeconfig : path, f->context, c, err);
}
