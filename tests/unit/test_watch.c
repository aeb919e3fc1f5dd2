/*
 * test_watch.c - tests coordinator/watch.c on a recorded pod watch stream
 * (tests/data/k8s/watch-pods.ndjson: pods added, becoming ready, a bookmark,
 * a pod draining and deleted, then a 410 ERROR): the same events whatever
 * the chunking (cut at every byte boundary, and fed byte by byte), several
 * events in one chunk, and malformed streams refused with a reason.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "coordinator/watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *stream;
static size_t stream_len;

static int setup(void **state)
{
	(void)state;
	FILE *f = fopen("tests/data/k8s/watch-pods.ndjson", "rb");
	if (!f)
		return -1;
	stream = malloc(1 << 16);
	stream_len = fread(stream, 1, 1 << 16, f);
	fclose(f);
	return stream_len ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(stream);
	return 0;
}

/* What the callback saw, as text: one "TYPE name rv code" per event. */
typedef struct seen {
	char text[4096];
	size_t len;
	int n;
} seen;

static void record(void *ctx, const rs_watch_event *ev)
{
	static const char *const names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
	seen *s = ctx;
	s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len, "%s %s %s %d|", names[ev->type], ev->name,
				   ev->resource_version, ev->code);
	s->n++;
}

static void feed_in(const size_t *cuts, int ncuts, seen *s)
{
	rs_watch_parser p = {0};
	rs_err err = {0};
	size_t at = 0;
	for (int k = 0; k <= ncuts; k++) {
		size_t end = k < ncuts ? cuts[k] : stream_len;
		assert_int_equal(rs_watch_feed(&p, stream + at, end - at, record, s, &err), RS_OK);
		at = end;
	}
	assert_int_equal(rs_watch_pending(&p), 0);
	rs_watch_free(&p);
}

static void test_whole_stream(void **state)
{
	(void)state;
	seen s = {0};
	feed_in(NULL, 0, &s);
	assert_int_equal(s.n, 7);
	assert_string_equal(s.text, "ADDED rowshift-worker-2 1001 0|MODIFIED rowshift-worker-2 1002 0|"
				    "MODIFIED rowshift-worker-2 1003 0|BOOKMARK  1010 0|MODIFIED rowshift-worker-1 1011 0|"
				    "DELETED rowshift-worker-1 1012 0|ERROR   410|");
}

static void test_every_split(void **state)
{
	(void)state;
	seen whole = {0};
	feed_in(NULL, 0, &whole);
	for (size_t cut = 0; cut <= stream_len; cut++) {
		seen s = {0};
		feed_in(&cut, 1, &s);
		if (strcmp(s.text, whole.text) != 0)
			fail_msg("cut at byte %zu: %s", cut, s.text);
	}
	/* two cuts: every pair around each event boundary */
	for (size_t a = 0; a < stream_len; a += 37)
		for (size_t b = a; b <= stream_len; b += 53) {
			size_t cuts[2] = {a, b};
			seen s = {0};
			feed_in(cuts, 2, &s);
			if (strcmp(s.text, whole.text) != 0)
				fail_msg("cuts at %zu and %zu differ", a, b);
		}
}

static void test_byte_by_byte(void **state)
{
	(void)state;
	seen whole = {0}, s = {0};
	feed_in(NULL, 0, &whole);
	rs_watch_parser p = {0};
	rs_err err = {0};
	for (size_t i = 0; i < stream_len; i++)
		assert_int_equal(rs_watch_feed(&p, stream + i, 1, record, &s, &err), RS_OK);
	assert_string_equal(s.text, whole.text);
	rs_watch_free(&p);
}

static void test_cut_off_event_is_pending(void **state)
{
	(void)state;
	rs_watch_parser p = {0};
	rs_err err = {0};
	seen s = {0};
	assert_int_equal(rs_watch_feed(&p, stream, 100, record, &s, &err), RS_OK);
	assert_int_equal(s.n, 0);
	assert_int_equal(rs_watch_pending(&p), 100);
	rs_watch_reset(&p); /* a new stream after a reconnection starts clean */
	assert_int_equal(rs_watch_pending(&p), 0);
	rs_watch_free(&p);
}

static void refused(const char *text, const char *why)
{
	rs_watch_parser p = {0};
	rs_err err = {0};
	seen s = {0};
	if (rs_watch_feed(&p, text, strlen(text), record, &s, &err) != RS_ECORRUPT)
		fail_msg("accepted %s", text);
	if (!strstr(err.msg, why))
		fail_msg("%s: '%s' does not say '%s'", text, err.msg, why);
	rs_watch_free(&p);
}

static void test_malformed(void **state)
{
	(void)state;
	refused("{not json\n", "malformed JSON");
	refused("[1,2]\n", "not {");
	refused("{\"type\":\"ADDED\"}\n", "not {");
	refused("{\"type\":\"CHANGED\",\"object\":{}}\n", "not {");
	refused("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\"}}}\n", "resourceVersion");
	refused("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"1\"}}}\n", "metadata.name");
	refused("{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\"}}\n", "Status code");
	refused("{\"type\":\"ADDED\",\"type\":\"DELETED\",\"object\":{}}\n", "malformed");
	/* a line without end, past the limit */
	rs_watch_parser p = {.max_line = 64};
	rs_err err = {0};
	seen s = {0};
	char big[100];
	memset(big, 'x', sizeof(big));
	assert_int_equal(rs_watch_feed(&p, big, sizeof(big), record, &s, &err), RS_ECORRUPT);
	assert_non_null(strstr(err.msg, "longer than 64"));
	rs_watch_free(&p);
	/* blank lines and CRLF are fine */
	rs_watch_parser q = {0};
	const char *ok = "\r\n\n{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}\r\n\n";
	assert_int_equal(rs_watch_feed(&q, ok, strlen(ok), record, &s, &err), RS_OK);
	assert_int_equal(s.n, 1);
	rs_watch_free(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_stream),
		cmocka_unit_test(test_every_split),
		cmocka_unit_test(test_byte_by_byte),
		cmocka_unit_test(test_cut_off_event_is_pending),
		cmocka_unit_test(test_malformed),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
