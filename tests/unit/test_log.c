/*
 * test_log.c - tests common/log.c: what a message may quote from a peer
 * (control characters, malformed UTF-8, the code points a terminal acts
 * on) is escaped, so one call writes one line and nothing in it drives a
 * terminal; well-formed text stays as it is.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/log.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void escapes(const char *in, size_t n, const char *want)
{
	char out[256];
	size_t len = rs_log_escape(in, n, out, sizeof(out));
	assert_string_equal(out, want);
	assert_int_equal(len, strlen(want));
}

static void test_escape(void **state)
{
	(void)state;
	escapes("plain text: 1, 2 (3)", 20, "plain text: 1, 2 (3)");
	escapes("a\nb\rc\td", 7, "a\\x0ab\\x0dc\\x09d");
	escapes("\x1b[31mred\x1b[0m", 12, "\\x1b[31mred\\x1b[0m");
	escapes("del\x7f", 4, "del\\x7f");
	escapes("nul\0after", 9, "nul\\x00after");
	escapes("na\xc3\xafve \xe2\x82\xac \xf0\x9f\x99\x82", 15, "na\xc3\xafve \xe2\x82\xac \xf0\x9f\x99\x82"); /* UTF-8 stays */
	escapes("\xc2\x9b" "31m", 5, "\\xc2\\x9b31m");              /* C1 CSI */
	escapes("a\xe2\x80\xa8" "b", 5, "a\\xe2\\x80\\xa8b");      /* line separator */
	escapes("\xe2\x80\xae" "txt", 6, "\\xe2\\x80\\xaetxt");    /* right-to-left override */
	escapes("\xe2\x81\xa6x", 4, "\\xe2\\x81\\xa6x");           /* left-to-right isolate */
	escapes("\xff\xfe", 2, "\\xff\\xfe");                       /* not UTF-8 */
	escapes("\xc0\xaf", 2, "\\xc0\\xaf");                       /* overlong '/' */
	escapes("\xed\xa0\x80", 3, "\\xed\\xa0\\x80");              /* a surrogate */
	escapes("end\xe2\x82", 5, "end\\xe2\\x82");                 /* cut short */
}

static void test_escape_fits(void **state)
{
	(void)state;
	char out[8];
	assert_int_equal(rs_log_escape("abcdefghij", 10, out, sizeof(out)), 7);
	assert_string_equal(out, "abcdefg");
	assert_int_equal(rs_log_escape("abcde\n", 6, out, sizeof(out)), 5); /* "\x0a" does not fit: stops before it */
	assert_string_equal(out, "abcde");
	assert_int_equal(rs_log_escape("ab\xe2\x82\xac", 5, out, 5), 2);    /* nor a character cut in two */
	assert_string_equal(out, "ab");
	assert_int_equal(rs_log_escape("x", 1, out, 1), 0);
	assert_string_equal(out, "");
}

/* One rs_log call, one line, whatever the message holds. */
static void test_one_line(void **state)
{
	(void)state;
	char path[] = "/tmp/rs_test_log_XXXXXX", text[4096];
	int f = mkstemp(path);
	assert_true(f >= 0);
	fflush(stderr);
	int saved = dup(2);
	assert_true(saved >= 0 && dup2(f, 2) == 2);
	rs_log_init("test", RS_LOG_DEBUG);
	RS_WARN("peer said '%s'", "hi\n12:00:00.000 INFO  coordinator forged\r\x1b[2J");
	char big[3000];
	memset(big, '\n', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	RS_INFO("%s", big); /* longer than a line once escaped: cut, still one line */
	fflush(stderr);
	assert_true(dup2(saved, 2) == 2);
	close(saved);
	ssize_t n = pread(f, text, sizeof(text) - 1, 0);
	close(f);
	unlink(path);
	assert_true(n > 0);
	text[n] = 0;
	int lines = 0;
	for (char *p = text; (p = strchr(p, '\n')); p++)
		lines++;
	assert_int_equal(lines, 2);
	assert_non_null(strstr(text, "peer said 'hi\\x0a12:00:00.000 INFO  coordinator forged\\x0d\\x1b[2J'\n"));
	assert_null(strchr(text, '\x1b'));
	assert_null(strchr(text, '\r'));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_escape_fits),
		cmocka_unit_test(test_one_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
