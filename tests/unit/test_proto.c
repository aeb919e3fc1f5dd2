/*
 * test_proto.c - tests common/proto.c: each message type's schema, and
 * malformed or unexpected messages rejected with a reason.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/proto.h"

#include <string.h>

static json_t *parse_ok(const char *text, const char *want_type)
{
	json_t *m;
	const char *type;
	rs_err err = {0};
	if (rs_proto_parse(text, strlen(text), &m, &type, &err) != RS_OK)
		fail_msg("%s: %s", text, err.msg);
	assert_string_equal(type, want_type);
	return m;
}

static void test_parse(void **state)
{
	(void)state;
	static const char *const bad[] = {"", "{", "[]", "42", "{\"type\": 7}", "{\"kind\": \"join\"}",
					  "{\"type\": \"a\", \"type\": \"b\"}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *m = NULL;
		const char *type;
		rs_err err = {0};
		assert_int_equal(rs_proto_parse(bad[i], strlen(bad[i]), &m, &type, &err), RS_EINVAL);
		assert_null(m);
		assert_true(err.msg[0] != 0);
	}
}

static void test_join(void **state)
{
	(void)state;
	json_t *m = parse_ok("{\"type\":\"join\",\"token\":\"t\",\"worker\":\"w-0\",\"addr\":\"h:1\",\"pid\":3}", "join");
	rs_msg_join j;
	rs_err err = {0};
	assert_int_equal(rs_proto_join(m, &j, &err), RS_OK);
	assert_string_equal(j.worker, "w-0");
	assert_int_equal(j.pid, 3);
	json_decref(m);
	static const char *const bad[] = {
		"{\"type\":\"join\",\"token\":\"t\",\"worker\":\"w\",\"addr\":\"h:1\"}",                 /* no pid */
		"{\"type\":\"join\",\"token\":\"t\",\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3,\"x\":1}", /* extra key */
		"{\"type\":\"join\",\"token\":5,\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3}",            /* wrong type */
		"{\"type\":\"join\",\"token\":\"t\",\"worker\":\"\",\"addr\":\"h:1\",\"pid\":3}",          /* empty name */
		"{\"type\":\"progress\",\"token\":\"t\",\"worker\":\"w\",\"addr\":\"h:1\",\"pid\":3}",     /* not a join */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *type;
		rs_err e = {0};
		assert_int_equal(rs_proto_parse(bad[i], strlen(bad[i]), &m, &type, &e), RS_OK);
		assert_int_equal(rs_proto_join(m, &j, &e), RS_EINVAL);
		assert_true(e.msg[0] != 0);
		json_decref(m);
	}
}

static void test_start_and_progress(void **state)
{
	(void)state;
	json_t *m = parse_ok("{\"type\":\"start\",\"generation\":2,\"rank\":1,\"world\":2,\"peers\":[\"a:1\",\"b:2\"],"
			     "\"plan\":{},\"first_step\":5,\"steps\":9,\"eval_every\":3,\"eval_samples\":10}", "start");
	rs_msg_start s;
	rs_err err = {0};
	assert_int_equal(rs_proto_start(m, &s, &err), RS_OK);
	assert_int_equal(s.rank, 1);
	assert_null(s.save);
	json_decref(m);
	m = parse_ok("{\"type\":\"start\",\"generation\":2,\"rank\":2,\"world\":2,\"peers\":[\"a:1\",\"b:2\"],"
		     "\"plan\":{},\"first_step\":5,\"steps\":9,\"eval_every\":3,\"eval_samples\":10}", "start");
	assert_int_equal(rs_proto_start(m, &s, &err), RS_EINVAL); /* rank outside the world */
	json_decref(m);
	m = parse_ok("{\"type\":\"start\",\"generation\":2,\"rank\":0,\"world\":2,\"peers\":[\"a:1\"],"
		     "\"plan\":{},\"first_step\":5,\"steps\":9,\"eval_every\":3,\"eval_samples\":10}", "start");
	assert_int_equal(rs_proto_start(m, &s, &err), RS_EINVAL); /* one peer short */
	json_decref(m);
	m = parse_ok("{\"type\":\"progress\",\"rank\":0,\"step\":9,\"loss\":0.5,\"samples_per_s\":100}", "progress");
	rs_msg_progress p;
	assert_int_equal(rs_proto_progress(m, &p, &err), RS_OK);
	assert_true(p.auc < 0 && p.step == 9 && p.loss == 0.5);
	json_decref(m);
	m = parse_ok("{\"type\":\"progress\",\"rank\":0,\"step\":9,\"loss\":\"x\",\"samples_per_s\":100}", "progress");
	assert_int_equal(rs_proto_progress(m, &p, &err), RS_EINVAL);
	json_decref(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_join),
		cmocka_unit_test(test_start_and_progress),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
