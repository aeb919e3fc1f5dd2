/*
 * test_kubeconfig.c - tests coordinator/yaml.c and coordinator/kubeconfig.c:
 * the YAML kubectl writes (compact sequences, quoted scalars, comments,
 * {}), kubeconfig contexts, clusters and users (CA data, insecure only when
 * asked, tokens, client certificates, relative paths), JSON kubeconfigs,
 * in-cluster configuration from a service-account directory, and what is
 * refused with a reason (auth-provider plugins, exec without its apiVersion,
 * tabs, anchors, broken files); exec credential plugins run.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "coordinator/kube_exec.h"
#include "coordinator/kubeconfig.h"
#include "coordinator/yaml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static json_t *yaml(const char *text)
{
	json_t *j = NULL;
	rs_err err = {0};
	if (rs_yaml_parse(text, strlen(text), "t.yaml", &j, &err) != RS_OK)
		fail_msg("%s: %s", text, err.msg);
	return j;
}

static void yaml_equals(const char *text, const char *json_text)
{
	json_t *got = yaml(text), *want = json_loads(json_text, JSON_DECODE_ANY, NULL);
	assert_non_null(want);
	if (!json_equal(got, want)) {
		char *g = json_dumps(got, JSON_COMPACT);
		fail_msg("%s\ngave %s\nwanted %s", text, g, json_text);
	}
	json_decref(got);
	json_decref(want);
}

static void yaml_refused(const char *text, const char *why)
{
	json_t *j = NULL;
	rs_err err = {0};
	assert_int_equal(rs_yaml_parse(text, strlen(text), "t.yaml", &j, &err), RS_EINVAL);
	assert_null(j);
	if (!strstr(err.msg, why) || !strstr(err.msg, "t.yaml:"))
		fail_msg("'%s' does not name the line and say '%s'", err.msg, why);
}

static void test_yaml(void **state)
{
	(void)state;
	yaml_equals("a: 1\nb: x y\n", "{\"a\":\"1\",\"b\":\"x y\"}");
	yaml_equals("---\n# c\na:\n  b: c # trailing\n  d: 'it''s'\ne: \"q\\\"x\\n\"\n",
		    "{\"a\":{\"b\":\"c\",\"d\":\"it's\"},\"e\":\"q\\\"x\\n\"}");
	yaml_equals("l:\n- x\n- y\nm: {}\nn: []\nt: true\nf: false\nz: null\nw: ~\n",
		    "{\"l\":[\"x\",\"y\"],\"m\":{},\"n\":[],\"t\":true,\"f\":false,\"z\":null,\"w\":null}");
	yaml_equals("l:\n  - a: 1\n    b: 2\n  - c: 3\n", "{\"l\":[{\"a\":\"1\",\"b\":\"2\"},{\"c\":\"3\"}]}");
	yaml_equals("l:\n- a:\n    x: y\n  b: c\n", "{\"l\":[{\"a\":{\"x\":\"y\"},\"b\":\"c\"}]}");
	yaml_equals("url: https://h:6443/p#frag\nk: v:w\n", "{\"url\":\"https://h:6443/p#frag\",\"k\":\"v:w\"}");
	yaml_equals("{\"json\": [1, 2]}", "{\"json\":[1,2]}");
	yaml_equals("- - a\n  - b\n- c\n", "[[\"a\",\"b\"],\"c\"]");
	yaml_equals("", "null");
	yaml_refused("a:\n\tb: c\n", "tab");
	yaml_refused("a: &anchor x\n", "anchors");
	yaml_refused("a: {b: c}\n", "flow collections");
	yaml_refused("a: 'open\n", "unterminated");
	yaml_refused("a: b\na: c\n", "twice");
	yaml_refused("a: b\n  c: d\n", "unexpected indentation");
	yaml_refused("just text\nmore: x\n", "unexpected indentation");
	yaml_refused("a: |\n  block\n", "block scalars");
}

static void test_kubectl_kubeconfig(void **state)
{
	(void)state;
	rs_kube_config c;
	rs_err err = {0};
	assert_int_equal(rs_kube_config_load("tests/data/k8s/kubeconfig-kubectl.yaml", NULL, &c, &err), RS_OK);
	assert_string_equal(c.server, "https://10.0.0.1:6443");
	assert_string_equal(c.namespace, "training");
	assert_string_equal(c.token, "abc.def-ghi");
	assert_int_equal(c.insecure, 0); /* verified unless the kubeconfig says otherwise */
	assert_non_null(c.ca_data);
	assert_non_null(strstr(c.ca_data, "-----BEGIN CERTIFICATE-----"));
	assert_null(c.cert_file);
	assert_non_null(strstr(c.source, "context prod-trainer"));
	rs_kube_config_free(&c);
	/* another context: insecure because it says so; client certificate files relative to the kubeconfig */
	assert_int_equal(rs_kube_config_load("tests/data/k8s/kubeconfig-kubectl.yaml", "dev", &c, &err), RS_OK);
	assert_string_equal(c.server, "https://127.0.0.1:6443");
	assert_int_equal(c.insecure, 1);
	assert_string_equal(c.cert_file, "tests/data/k8s/certs/client.crt");
	assert_string_equal(c.key_file, "tests/data/k8s/certs/client.key");
	assert_null(c.token);
	rs_kube_config_free(&c);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_kube_config_load("tests/data/k8s/kubeconfig-kubectl.yaml", "nope", &c, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "no context 'nope'"));
}

/* KUBECONFIG=a:b: merged as kubectl merges it (first name wins, first current-context wins, paths per file). */
static void test_kubeconfig_list(void **state)
{
	(void)state;
	char dir[] = "/tmp/rs-kclist-XXXXXX", a[96], b[96], list[400];
	assert_non_null(mkdtemp(dir));
	snprintf(a, sizeof(a), "%s/a/config", dir);
	snprintf(b, sizeof(b), "%s/b.yaml", dir);
	char sub[96];
	snprintf(sub, sizeof(sub), "%s/a", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	FILE *f = fopen(a, "w"); /* no current-context; the user, a relative CA; a cluster b names too */
	assert_non_null(f);
	fputs("apiVersion: v1\nkind: Config\nclusters:\n- name: c1\n  cluster:\n    server: https://a.example:6443\n"
	      "    certificate-authority: ca.crt\nusers:\n- name: u1\n  user:\n    tokenFile: tok\n- name: u2\n  user:\n"
	      "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./plug\n", f);
	fclose(f);
	f = fopen(b, "w");
	assert_non_null(f);
	fputs("apiVersion: v1\nkind: Config\ncurrent-context: ctx\nclusters:\n- name: c1\n  cluster:\n"
	      "    server: https://b.example:6443\ncontexts:\n- name: ctx\n  context:\n    cluster: c1\n    user: u1\n"
	      "    namespace: ns-b\n- name: ctx2\n  context:\n    cluster: c1\n    user: u2\n", f);
	fclose(f);
	snprintf(list, sizeof(list), "%s/missing.yaml:%s:%s", dir, a, b);
	rs_kube_config_flags fl = {.kubeconfig = list};
	rs_kube_config c;
	rs_err err = {0};
	if (rs_kube_config_find(&fl, &c, &err) != RS_OK)
		fail_msg("%s", err.msg);
	assert_string_equal(c.server, "https://a.example:6443"); /* c1: the first file's */
	assert_string_equal(c.namespace, "ns-b");                /* the context, from b */
	char want[128];
	snprintf(want, sizeof(want), "%s/a/ca.crt", dir);         /* relative to a, not to here or to b */
	assert_string_equal(c.ca_file, want);
	snprintf(want, sizeof(want), "%s/a/tok", dir);
	assert_string_equal(c.token_file, want);
	assert_non_null(strstr(c.source, "KUBECONFIG"));
	rs_kube_config_free(&c);
	fl.context = "ctx2"; /* an exec command with a slash: relative to its own file too */
	if (rs_kube_config_find(&fl, &c, &err) != RS_OK)
		fail_msg("%s", err.msg);
	snprintf(want, sizeof(want), "%s/a/./plug", dir);
	assert_string_equal(c.exec_argv[0], want);
	rs_kube_config_free(&c);
	fl.context = NULL;
	snprintf(list, sizeof(list), "%s/none1:%s/none2", dir, dir);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_kube_config_find(&fl, &c, &err), RS_ENOTFOUND);
	assert_non_null(strstr(err.msg, "none of its files exists"));
	unlink(a), unlink(b), rmdir(sub), rmdir(dir);
}

/* user.exec: the plugin runs (its args, its env, KUBERNETES_EXEC_INFO) and its ExecCredential's token is used. */
static void test_exec_plugin(void **state)
{
	(void)state;
	char dir[] = "/tmp/rs-exec-XXXXXX", plugin[96], kc[96], text[1024];
	assert_non_null(mkdtemp(dir));
	snprintf(plugin, sizeof(plugin), "%s/get-token", dir);
	FILE *f = fopen(plugin, "w");
	assert_non_null(f);
	/* it checks what client-go gives a plugin, and answers with its arguments and env in the token */
	fputs("#!/bin/sh\ncase \"$KUBERNETES_EXEC_INFO\" in *'\"interactive\":false'*) ;; *) exit 3;; esac\n"
	      "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":"
	      "{\"token\":\"tok-%s-%s\",\"expirationTimestamp\":\"2030-01-02T03:04:05Z\"}}' \"$1\" \"$CLUSTER\"\n", f);
	fclose(f);
	assert_int_equal(chmod(plugin, 0700), 0);
	snprintf(kc, sizeof(kc), "%s/config", dir);
	snprintf(text, sizeof(text), "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n"
		 "    server: https://k.example:443\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
		 "users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
		 "      command: ./get-token\n      args:\n      - eks\n      env:\n      - name: CLUSTER\n        value: prod\n");
	f = fopen(kc, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	rs_kube_config c;
	rs_err err = {0};
	if (rs_kube_config_load(kc, NULL, &c, &err) != RS_OK)
		fail_msg("%s", err.msg);
	char want[128];
	snprintf(want, sizeof(want), "%s/./get-token", dir);
	assert_string_equal(c.exec_argv[0], want); /* relative to the kubeconfig */
	assert_string_equal(c.exec_argv[1], "eks");
	assert_string_equal(c.exec_env[0], "CLUSTER=prod");
	char *tok = NULL;
	double exp = 0;
	if (rs_kube_exec_run(c.exec_argv, c.exec_env, c.exec_api, 5000, &tok, &exp, &err) != RS_OK)
		fail_msg("%s", err.msg);
	assert_string_equal(tok, "tok-eks-prod");
	assert_true(exp == 1893553445.0); /* 2030-01-02T03:04:05Z */
	free(tok);
	/* a plugin that fails, or that hangs, is an error naming it; nothing is returned */
	f = fopen(plugin, "w");
	fputs("#!/bin/sh\necho 'no credentials' >&2\nexit 1\n", f);
	fclose(f);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_kube_exec_run(c.exec_argv, c.exec_env, c.exec_api, 5000, &tok, &exp, &err), RS_EIO);
	assert_non_null(strstr(err.msg, "exited with status 1"));
	assert_null(tok);
	f = fopen(plugin, "w");
	fputs("#!/bin/sh\nexec sleep 30\n", f);
	fclose(f);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_kube_exec_run(c.exec_argv, c.exec_env, c.exec_api, 300, &tok, &exp, &err), RS_ETIMEDOUT);
	/* one that answers, closes its stdout and lingers is not waited for past the timeout either */
	f = fopen(plugin, "w");
	fputs("#!/bin/sh\nprintf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
	      "\"status\":{\"token\":\"t\"}}'\nexec >&- 2>&-\nsleep 30\n", f);
	fclose(f);
	memset(&err, 0, sizeof(err));
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(rs_kube_exec_run(c.exec_argv, c.exec_env, c.exec_api, 500, &tok, &exp, &err), RS_ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(t1.tv_sec - t0.tv_sec < 5); /* killed at 0.5 s, not after its 30 s */
	assert_non_null(strstr(err.msg, "did not exit"));
	rs_kube_config_free(&c);
	unlink(plugin), unlink(kc), rmdir(dir);
}

/* What a plugin prints, parsed strictly. */
static void test_exec_credential_parse(void **state)
{
	(void)state;
	static const char *const api = "client.authentication.k8s.io/v1beta1";
	static const struct {
		const char *text;
		rs_status want;
		double exp;
	} cases[] = {
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}", RS_OK, 0},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\","
		 "\"expirationTimestamp\":\"2030-01-02T04:04:05.5+01:00\"}}", RS_OK, 1893553445.5},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}", RS_EINVAL, 0},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{}}", RS_EINVAL, 0},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"a b\"}}", RS_EINVAL, 0},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\","
		 "\"expirationTimestamp\":\"tomorrow\"}}", RS_EINVAL, 0},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":"
		 "{\"clientCertificateData\":\"x\",\"clientKeyData\":\"y\"}}", RS_EUNSUPPORTED, 0},
		{"not json", RS_EINVAL, 0},
		/* times RFC 3339 does not allow: no normalising, no exponents, no signs or spaces in fields */
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\","
		 "\"expirationTimestamp\":\"2030-02-30T00:00:00Z\"}}", RS_EINVAL, 0},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\","
		 "\"expirationTimestamp\":\"2030-01-02T03:04:05.5e9Z\"}}", RS_EINVAL, 0},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\","
		 "\"expirationTimestamp\":\"2030-01-02T+3:04:05Z\"}}", RS_EINVAL, 0},
		{"{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\","
		 "\"expirationTimestamp\":\"2028-02-29T00:00:00Z\"}}", RS_OK, 1835395200},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *tok = NULL;
		double exp = -1;
		rs_err err = {0};
		rs_status st = rs_kube_exec_parse(cases[i].text, strlen(cases[i].text), api, &tok, &exp, &err);
		if (st != cases[i].want)
			fail_msg("case %zu: %s (%s)", i, rs_status_str(st), err.msg);
		assert_true(st == RS_OK ? tok != NULL && exp == cases[i].exp : tok == NULL && err.msg[0]);
		free(tok);
	}
}

static void kubeconfig_refused(const char *text, rs_status want, const char *why)
{
	rs_kube_config c;
	rs_err err = {0};
	assert_int_equal(rs_kube_config_parse(text, strlen(text), "/etc/kc", NULL, &c, &err), want);
	if (!strstr(err.msg, why))
		fail_msg("'%s' does not say '%s'", err.msg, why);
	assert_null(c.server);
}

static void test_refused(void **state)
{
	(void)state;
	rs_kube_config c;
	rs_err err = {0};
	/* an exec plugin without its apiVersion (kubectl refuses it too) */
	assert_int_equal(rs_kube_config_load("tests/data/k8s/kubeconfig-exec.yaml", NULL, &c, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "exec apiVersion must be client.authentication.k8s.io/v1"));
	kubeconfig_refused("current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\nclusters:\n"
			   "- name: c\n  cluster:\n    server: https://h\nusers:\n- name: u\n  user:\n    auth-provider:\n"
			   "      name: gcp\n", RS_EUNSUPPORTED, "auth-provider plugins are not supported");
	kubeconfig_refused("a: b\n", RS_EINVAL, "current-context is not set");
	kubeconfig_refused("- 1\n", RS_EINVAL, "not a kubeconfig");
	kubeconfig_refused("current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n", RS_EINVAL,
			   "no cluster 'c'");
	kubeconfig_refused("current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\nclusters:\n- name: c\n"
			   "  cluster:\n    server: ftp://h\n", RS_EINVAL, "not an http(s) URL");
	kubeconfig_refused("current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\nclusters:\n"
			   "- name: c\n  cluster:\n    server: https://h\n    certificate-authority-data: '***'\n", RS_EINVAL,
			   "not base64");
	kubeconfig_refused("current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\nclusters:\n"
			   "- name: c\n  cluster:\n    server: https://h\n", RS_EINVAL, "no user 'u'");
	kubeconfig_refused("current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\nclusters:\n"
			   "- name: c\n  cluster:\n    server: https://h\nusers:\n- name: u\n  user:\n    client-certificate: a\n",
			   RS_EINVAL, "needs its key");
	/* a JSON kubeconfig is fine */
	const char *js = "{\"current-context\":\"x\",\"contexts\":[{\"name\":\"x\",\"context\":{\"cluster\":\"c\"}}],"
			 "\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":\"http://127.0.0.1:1\"}}]}";
	assert_int_equal(rs_kube_config_parse(js, strlen(js), "kc.json", NULL, &c, &err), RS_OK);
	assert_string_equal(c.server, "http://127.0.0.1:1");
	rs_kube_config_free(&c);
}

static void test_in_cluster(void **state)
{
	(void)state;
	char dir[64], path[128];
	rs_kube_config c;
	rs_err err = {0};
	snprintf(dir, sizeof(dir), "/tmp/rs-test-sa-%d", (int)getpid());
	assert_int_equal(mkdir(dir, 0700), 0);
	unsetenv("KUBERNETES_SERVICE_HOST");
	assert_int_equal(rs_kube_config_in_cluster(dir, &c, &err), RS_ENOTFOUND);
	setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
	setenv("KUBERNETES_SERVICE_PORT", "443", 1);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_kube_config_in_cluster(dir, &c, &err), RS_EIO); /* no namespace file */
	snprintf(path, sizeof(path), "%s/namespace", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("rowshift\n", f);
	fclose(f);
	assert_int_equal(rs_kube_config_in_cluster(dir, &c, &err), RS_OK);
	assert_string_equal(c.server, "https://10.96.0.1:443");
	assert_string_equal(c.namespace, "rowshift");
	assert_non_null(strstr(c.token_file, "/token"));
	assert_non_null(strstr(c.ca_file, "/ca.crt"));
	rs_kube_config_free(&c);
	setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
	assert_int_equal(rs_kube_config_in_cluster(dir, &c, &err), RS_OK);
	assert_string_equal(c.server, "https://[fd00::1]:443");
	rs_kube_config_free(&c);
	unsetenv("KUBERNETES_SERVICE_HOST");
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_yaml),
		cmocka_unit_test(test_kubectl_kubeconfig),
		cmocka_unit_test(test_kubeconfig_list),
		cmocka_unit_test(test_exec_plugin),
		cmocka_unit_test(test_exec_credential_parse),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_in_cluster),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
