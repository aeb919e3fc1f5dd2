/*
 * log.c - see log.h. One formatted line per call, written atomically.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char log_component[48] = "rowshift";
static int log_level = -1;

static int level_from_env(void)
{
	const char *s = getenv("RS_LOG_LEVEL");
	if (!s)
		return RS_LOG_INFO;
	if (!strcmp(s, "error"))
		return RS_LOG_ERROR;
	if (!strcmp(s, "warn"))
		return RS_LOG_WARN;
	if (!strcmp(s, "debug"))
		return RS_LOG_DEBUG;
	return RS_LOG_INFO;
}

void rs_log_init(const char *component, int level)
{
	if (component)
		snprintf(log_component, sizeof(log_component), "%s", component);
	log_level = level >= 0 ? level : level_from_env();
}

int rs_log_enabled(rs_log_level level)
{
	if (log_level < 0)
		log_level = level_from_env();
	return (int)level <= log_level;
}

void rs_log(rs_log_level level, const char *file, int line, const char *fmt, ...)
{
	static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
	char buf[2048];
	struct timespec ts;
	struct tm tm;
	size_t n;
	va_list ap;

	if (!rs_log_enabled(level))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, ".%03ld %-5s %s ",
			      ts.tv_nsec / 1000000, names[level], log_component);
	if (level <= RS_LOG_WARN || level == RS_LOG_DEBUG)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "(%s:%d) ", file, line);
	if (n < sizeof(buf)) {
		va_start(ap, fmt);
		n += (size_t)vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
		va_end(ap);
	}
	if (n >= sizeof(buf) - 1)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	/* One write per line so concurrent processes and threads interleave whole lines. */
	ssize_t w = write(STDERR_FILENO, buf, n);
	(void)w;
}
