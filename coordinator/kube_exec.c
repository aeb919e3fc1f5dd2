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

/* n decimal digits at s into *v (no sign, no space). */
static int digits(const char *s, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		*v = *v * 10 + (s[i] - '0');
	}
	return 1;
}

/* RFC 3339 (2026-11-27T05:23:00Z, fractions and numeric offsets allowed) in seconds since the epoch; -1 if not. */
static double rfc3339(const char *s)
{
	static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int y, mo, d, h, mi, se;
	if (strlen(s) < 20 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
	    !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't') || !digits(s + 11, 2, &h) || s[13] != ':' ||
	    !digits(s + 14, 2, &mi) || s[16] != ':' || !digits(s + 17, 2, &se))
		return -1;
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap) || h > 23 ||
	    mi > 59 || se > 59)
		return -1;
	const char *p = s + 19;
	double frac = 0, scale = 0.1;
	if (*p == '.') {
		if (p[1] < '0' || p[1] > '9')
			return -1;
		for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
			frac += (*p - '0') * scale;
	}
	int off = 0, oh, om;
	if ((*p == 'Z' || *p == 'z') && !p[1])
		off = 0;
	else if ((*p == '+' || *p == '-') && strlen(p) == 6 && digits(p + 1, 2, &oh) && p[3] == ':' && digits(p + 4, 2, &om) &&
		 oh < 24 && om < 60)
		off = (*p == '+' ? 1 : -1) * (oh * 3600 + om * 60);
	else
		return -1;
	struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = se};
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
	if (!root) /* not jerr.text: it may quote the output, a token printed bare */
		rs_err_set(err, st, "exec credential: the plugin's output is not JSON (line %d, column %d)", jerr.line,
			   jerr.column);
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
		if (fds[1] < 3 && (fds[1] = fcntl(fds[1], F_DUPFD, 3)) < 0) /* stdout closed here: not the pipe's place */
			_exit(127);
		if (null < 0 || dup2(null, 0) < 0 || dup2(fds[1], 1) < 0)
			_exit(127);
		setpgid(0, 0);                 /* its group: a timeout kills what it started too */
		signal(SIGPIPE, SIG_DFL);      /* ours is ignored, and that survives exec */
		close_range(3, ~0U, 0);        /* none of our sockets, files or the listener */
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
	/* its exit, within what is left of the timeout: a plugin that closed its stdout and lingers is killed */
	int status = 0;
	pid_t done = 0;
	while (st == RS_OK && (done = waitpid(pid, &status, WNOHANG)) == 0 && rs_now() < until)
		rs_sleep(0.005);
	if (st == RS_OK && done == 0)
		st = rs_err_set(err, RS_ETIMEDOUT, "exec credential: %s did not exit within %d ms", argv[0], timeout_ms);
	if (done <= 0) {
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	}
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
