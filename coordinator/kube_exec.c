/* kube_exec.c - see kube_exec.h. */
#include "coordinator/kube_exec.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* RFC 3339 (2026-11-27T05:23:00Z, fractions and numeric offsets allowed) in seconds since the epoch; -1 if not. */
static double rfc3339(const char *s)
{
	struct tm tm = {0};
	int n = 0;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
		   &tm.tm_sec, &n) != 6 || n != 19)
		return -1;
	const char *p = s + 19;
	double frac = 0;
	if (*p == '.') {
		char *end;
		frac = strtod(p, &end);
		if (end == p + 1)
			return -1;
		p = end;
	}
	int off = 0, oh, om;
	if (*p == 'Z' && !p[1])
		off = 0;
	else if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d", &oh, &om) == 2 && strlen(p) == 6 && oh < 24 && om < 60)
		off = (*p == '+' ? 1 : -1) * (oh * 3600 + om * 60);
	else
		return -1;
	if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
	    tm.tm_sec > 60 || tm.tm_year < 1970)
		return -1;
	tm.tm_year -= 1900, tm.tm_mon -= 1;
	return (double)timegm(&tm) - off + frac;
}

rs_status rs_kube_exec_parse(const char *text, size_t len, const char *api, char **token, double *expires,
			     rs_err *err)
{
	json_error_t jerr;
	*token = NULL, *expires = 0;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), *status = json_object_get(root, "status");
	const char *v = json_string_value(json_object_get(root, "apiVersion")), *kind = json_string_value(json_object_get(root, "kind"));
	const char *tok = json_string_value(json_object_get(status, "token"));
	const char *exp = json_string_value(json_object_get(status, "expirationTimestamp"));
	rs_status st = RS_EINVAL;
	if (!root)
		rs_err_set(err, st, "exec credential: not JSON (line %d: %s)", jerr.line, jerr.text);
	else if (!v || strcmp(v, api) || !kind || strcmp(kind, "ExecCredential"))
		rs_err_set(err, st, "exec credential: not an ExecCredential of %s", api);
	else if (json_object_get(status, "clientCertificateData") || json_object_get(status, "clientKeyData"))
		rs_err_set(err, RS_EUNSUPPORTED, "exec credential: a client certificate from a plugin is not supported "
			   "(a token is)"), st = RS_EUNSUPPORTED;
	else if (!tok || !*tok || strlen(tok) > 16000 || strpbrk(tok, "\r\n\t "))
		rs_err_set(err, st, "exec credential: no status.token (a non-empty string without spaces, at most 16000 bytes)");
	else if (exp && (*expires = rfc3339(exp)) < 0)
		rs_err_set(err, st, "exec credential: status.expirationTimestamp is not an RFC 3339 time");
	else
		st = (*token = strdup(tok)) ? RS_OK : RS_ENOMEM;
	if (st != RS_OK)
		*expires = 0;
	json_decref(root);
	return st;
}

rs_status rs_kube_exec_run(char *const *argv, char *const *env, const char *api, int timeout_ms, char **token,
			   double *expires, rs_err *err)
{
	int fds[2];
	*token = NULL, *expires = 0;
	if (!argv || !argv[0])
		return rs_err_set(err, RS_EINVAL, "exec credential: no command");
	if (pipe2(fds, O_CLOEXEC) != 0)
		return rs_err_set(err, RS_ESYS, "exec credential: pipe: %s", strerror(errno));
	char info[320];
	snprintf(info, sizeof(info),
		 "KUBERNETES_EXEC_INFO={\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\",\"spec\":{\"interactive\":false}}", api);
	/* the environment, made before the fork: ours, the plugin's env (which wins), the exec info */
	size_t ne = 0, nx = 0;
	while (environ[ne])
		ne++;
	while (env && env[nx])
		nx++;
	char **envp = calloc(ne + nx + 2, sizeof(char *));
	if (!envp) {
		close(fds[0]), close(fds[1]);
		return RS_ENOMEM;
	}
	size_t k = 0;
	for (size_t i = 0; i < nx; i++)
		envp[k++] = env[i];
	envp[k++] = info;
	for (size_t i = 0; i < ne; i++) { /* ours, unless the plugin's env or the exec info names it */
		size_t eq = strcspn(environ[i], "=");
		int shadowed = !strncmp(environ[i], "KUBERNETES_EXEC_INFO=", 21);
		for (size_t x = 0; x < nx && !shadowed; x++)
			shadowed = !strncmp(env[x], environ[i], eq + 1);
		if (!shadowed)
			envp[k++] = environ[i];
	}
	pid_t pid = fork();
	if (pid < 0) {
		free(envp);
		close(fds[0]), close(fds[1]);
		return rs_err_set(err, RS_ESYS, "exec credential: fork: %s", strerror(errno));
	}
	if (pid == 0) { /* the child: only async-signal-safe calls, then exec */
		int null = open("/dev/null", O_RDONLY);
		if (null < 0 || dup2(null, 0) < 0 || dup2(fds[1], 1) < 0)
			_exit(127);
		execvpe(argv[0], argv, envp);
		_exit(127);
	}
	free(envp);
	close(fds[1]);
	char *out = malloc(RS_KUBE_EXEC_MAX_OUTPUT + 1);
	size_t len = 0;
	rs_status st = out ? RS_OK : RS_ENOMEM;
	double until = rs_now() + timeout_ms / 1000.0;
	for (;;) {
		struct pollfd p = {.fd = fds[0], .events = POLLIN};
		int left = (int)((until - rs_now()) * 1000);
		int r = st == RS_OK && left > 0 ? poll(&p, 1, left) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (st == RS_OK)
				st = rs_err_set(err, RS_ETIMEDOUT, "exec credential: %s gave no answer within %d ms", argv[0],
						timeout_ms);
			break;
		}
		ssize_t n = read(fds[0], out + len, RS_KUBE_EXEC_MAX_OUTPUT + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len > RS_KUBE_EXEC_MAX_OUTPUT) {
			st = rs_err_set(err, RS_EINVAL, "exec credential: %s printed more than %d bytes", argv[0],
					RS_KUBE_EXEC_MAX_OUTPUT);
			break;
		}
	}
	close(fds[0]);
	int status = 0;
	if (st != RS_OK)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (st == RS_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
		st = rs_err_set(err, RS_EIO, "exec credential: %s %s %d%s", argv[0],
				WIFEXITED(status) ? "exited with status" : "was killed by signal",
				WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
				WIFEXITED(status) && WEXITSTATUS(status) == 127 ? " (not found, or not executable?)" : "");
	if (st == RS_OK)
		st = rs_kube_exec_parse(out, len, api, token, expires, err);
	free(out);
	return st;
}
