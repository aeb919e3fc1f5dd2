/*
 * test_param.c - tests common/param.c: flags, environment, defaults, sizes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/param.h"

#include <stdlib.h>
#include <string.h>

static void test_precedence(void **state)
{
	(void)state;
	const char *name = NULL;
	int64_t n = 0;
	uint64_t mem = 0;
	bool verbose = false;
	rs_param params[] = {
		RS_PARAM("--name", "RS_TEST_NAME", RS_PARAM_STR, "default", "S", "a name", &name),
		RS_PARAM("--n", "RS_TEST_N", RS_PARAM_INT, "3", "N", "a count", &n),
		RS_PARAM("--mem", NULL, RS_PARAM_BYTES, "1KiB", "B", "a size", &mem),
		RS_PARAM("--verbose", NULL, RS_PARAM_FLAG, NULL, NULL, "talk", &verbose),
	};
	const char *pos[2];
	int npos;
	rs_err err = {0};

	setenv("RS_TEST_N", "7", 1);
	unsetenv("RS_TEST_NAME");
	char *argv1[] = {"prog", "sub", "file.json", "--name=x", "--mem", "16GiB", "--verbose"};
	assert_int_equal(rs_params_parse(params, 4, 7, argv1, 2, pos, 2, &npos, &err), RS_OK);
	assert_string_equal(name, "x");
	assert_int_equal(n, 7); /* environment over default */
	assert_true(mem == 16ull << 30);
	assert_true(verbose);
	assert_true(params[0].set && params[1].set && params[2].set);
	assert_int_equal(npos, 1);
	assert_string_equal(pos[0], "file.json");

	char *argv2[] = {"prog", "--n", "9"};
	assert_int_equal(rs_params_parse(params, 4, 3, argv2, 1, pos, 2, &npos, &err), RS_OK);
	assert_int_equal(n, 9); /* command line over environment */
	assert_string_equal(name, "default");
	assert_true(mem == 1024);
	unsetenv("RS_TEST_N");
}

static void test_errors_name_the_flag(void **state)
{
	(void)state;
	int64_t n = 0;
	rs_param params[] = {RS_PARAM("--n", NULL, RS_PARAM_INT, NULL, "N", "a count", &n)};
	const char *pos[1];
	int npos;
	struct {
		int argc;
		char *argv[3];
		const char *want;
	} cases[] = {
		{2, {"p", "--bogus"}, "--bogus"},
		{2, {"p", "--n"}, "--n"},
		{3, {"p", "--n", "12x"}, "12x"},
		{3, {"p", "a", "b"}, "'b'"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rs_err err = {0};
		assert_int_equal(rs_params_parse(params, 1, cases[i].argc, cases[i].argv, 1, pos, 1, &npos, &err),
				 RS_EINVAL);
		assert_non_null(strstr(err.msg, cases[i].want));
	}
}

static void test_bytes(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(rs_parse_bytes("4096", &v), RS_OK);
	assert_true(v == 4096);
	assert_int_equal(rs_parse_bytes("80GB", &v), RS_OK);
	assert_true(v == 80000000000ull);
	assert_int_equal(rs_parse_bytes("1.5KiB", &v), RS_OK);
	assert_true(v == 1536);
	assert_int_equal(rs_parse_bytes("512MiB", &v), RS_OK);
	assert_true(v == 512ull << 20);
	static const char *const bad[] = {"", "-1", "1.3", "12 GiB", "1e30", "GiB", "1XB", "nan", "inf"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(rs_parse_bytes(bad[i], &v), RS_EINVAL);
	int64_t x;
	assert_int_equal(rs_parse_int("-5", -10, 10, &x), RS_OK);
	assert_int_equal(x, -5);
	assert_int_equal(rs_parse_int("11", -10, 10, &x), RS_EINVAL);
	assert_int_equal(rs_parse_int("", -10, 10, &x), RS_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_precedence),
		cmocka_unit_test(test_errors_name_the_flag),
		cmocka_unit_test(test_bytes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
