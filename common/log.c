/*
 * log.c - see log.h. One formatted line per call, written atomically, with
 * whatever could forge or garble a line escaped (rs_log_escape).
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdint.h>
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

/* The length of the well-formed UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
	static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
	if (!len || s[0] > 0xf4 || len > n)
		return 0;
	uint32_t c = s[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < least[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

/* Code points a terminal or a log viewer acts on: C1 controls, line and paragraph separators, bidi overrides. */
static int unsafe_code_point(uint32_t c)
{
	return c <= 0x9f || c == 0x2028 || c == 0x2029 || (c >= 0x202a && c <= 0x202e) ||
	       (c >= 0x2066 && c <= 0x2069) || c == 0x200e || c == 0x200f || c == 0x061c;
}

size_t rs_log_escape(const char *in, size_t n, char *out, size_t cap)
{
	const unsigned char *s = (const unsigned char *)in;
	size_t o = 0;
	if (!cap)
		return 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp = 0;
		size_t len = s[i] >= 0x80 ? utf8_len(s + i, n - i, &cp) : 1;
		int keep = s[i] < 0x80 ? s[i] >= 0x20 && s[i] != 0x7f : len && !unsafe_code_point(cp);
		if (keep) {
			if (o + len >= cap)
				break;
			memcpy(out + o, s + i, len);
			o += len;
			i += len;
		} else {
			if (o + 4 >= cap)
				break;
			snprintf(out + o, 5, "\\x%02x", s[i]);
			o += 4;
			i++;
		}
	}
	out[o] = 0;
	return o;
}

void rs_log(rs_log_level level, const char *file, int line, const char *fmt, ...)
{
	static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
	char buf[2048], text[2048];
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
	/* the message may carry a peer's words: nothing in it may end the line or reach the terminal */
	va_start(ap, fmt);
	int t = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	size_t tn = t < 0 ? 0 : (size_t)t < sizeof(text) ? (size_t)t : sizeof(text) - 1;
	if (n < sizeof(buf))
		n += rs_log_escape(text, tn, buf + n, sizeof(buf) - n);
	if (n >= sizeof(buf) - 1)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	/* One write per line so concurrent processes and threads interleave whole lines. */
	ssize_t w = write(STDERR_FILENO, buf, n);
	(void)w;
}
