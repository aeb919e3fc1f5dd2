/*
 * test_wsmsg.c - tests the outgoing queue of common/wsmsg.h: every message
 * queued is its JSON, whole: small ones, and objects whose long plain
 * string members (a start message's deflated plans) go in by copy, beside
 * long strings that need escaping, several long members, only long ones;
 * the queue's bound.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/wsmsg.h"

#include <stdlib.h>
#include <string.h>

static char *filled(size_t n, char c)
{
	char *s = malloc(n + 1);
	assert_non_null(s);
	memset(s, c, n);
	s[n] = 0;
	return s;
}

/* Push j, and check the text queued last parses back to j. */
static void round_trip(rs_wsmsg *q, json_t *j)
{
	assert_int_equal(rs_wsmsg_push(q, j), RS_OK);
	json_error_t e;
	json_t *back = json_loadb(q->tail->buf + LWS_PRE, q->tail->len, JSON_REJECT_DUPLICATES, &e);
	if (!back)
		fail_msg("not JSON (%s): %.200s", e.text, q->tail->buf + LWS_PRE);
	assert_true(json_equal(back, j));
	json_decref(back);
	json_decref(j);
}

static void test_messages_queue_whole(void **state)
{
	(void)state;
	rs_wsmsg q;
	rs_wsmsg_init(&q, 1 << 20, 16);
	char *big = filled(100000, 'A'), *quoted = filled(5000, 'B'), *five[5];
	quoted[100] = '"', quoted[200] = '\\', quoted[300] = '\n';
	for (int i = 0; i < 5; i++)
		five[i] = filled(4096 + (size_t)i, (char)('a' + i));
	round_trip(&q, json_pack("{s:s, s:i}", "type", "pause", "n", 3));
	round_trip(&q, json_pack("{s:s, s:s, s:[i, i], s:s}", "type", "start", "plan", big, "peers", 1, 2, "previous_plan", big));
	assert_non_null(memmem(q.tail->buf + LWS_PRE, q.tail->len, big, 100000)); /* as it stands, copied */
	round_trip(&q, json_pack("{s:s, s:s}", "type", "x", "quoted", quoted)); /* escaped by jansson */
	round_trip(&q, json_pack("{s:s}", "plan", big));                         /* nothing else in it */
	round_trip(&q, json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "a", five[0], "b", five[1], "c", five[2], "d", five[3],
				 "e", five[4], "n", 1)); /* more long members than are copied */
	round_trip(&q, json_pack("{s:s, s:s}", "k\"ey", big, "type", "x")); /* a key that needs escaping */
	round_trip(&q, json_pack("[s, i]", big, 1));                           /* not an object */
	json_t *nul = json_pack("{s:i}", "t", 1); /* a key with a NUL in it: all of it encoded by jansson, as it was */
	json_object_setn_new(nul, "a\0b", 3, json_string(big));
	assert_int_equal(rs_wsmsg_push(&q, nul), RS_OK);
	char *want = json_dumps(nul, JSON_COMPACT);
	assert_true(q.tail->len == strlen(want) && !memcmp(q.tail->buf + LWS_PRE, want, q.tail->len));
	free(want);
	json_decref(nul);
	json_t *j = json_pack("{s:s}", "type", "x");
	for (int i = 0; i < 16 - 8; i++)
		assert_int_equal(rs_wsmsg_push(&q, j), RS_OK);
	assert_int_equal(rs_wsmsg_push(&q, j), RS_ENOSPACE); /* the queue's bound */
	json_decref(j);
	rs_wsmsg_free(&q);
	free(big), free(quoted);
	for (int i = 0; i < 5; i++)
		free(five[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_messages_queue_whole),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
