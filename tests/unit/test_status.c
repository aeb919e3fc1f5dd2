/*
 * test_status.c - tests common/status.c: status names and rs_err.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/status.h"

#include <string.h>

static void test_names(void **state)
{
	(void)state;
	for (int s = 0; s < RS_STATUS_COUNT; s++) {
		assert_non_null(rs_status_str((rs_status)s));
		assert_true(strlen(rs_status_str((rs_status)s)) > 0);
	}
	assert_string_equal(rs_status_str(RS_OK), "ok");
	assert_string_equal(rs_status_str((rs_status)999), "unknown status");
}

static void test_first_message_wins(void **state)
{
	(void)state;
	rs_err err = {0};
	assert_int_equal(rs_err_set(&err, RS_EINVAL, "inner %d", 1), RS_EINVAL);
	assert_int_equal(rs_err_set(&err, RS_EIO, "outer"), RS_EIO);
	assert_string_equal(err.msg, "inner 1");
	assert_int_equal(rs_err_set(NULL, RS_ENOMEM, "nowhere"), RS_ENOMEM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_first_message_wins),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
