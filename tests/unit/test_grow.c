/*
 * test_grow.c - tests common/grow.c: capacity doubles, contents survive,
 * impossible sizes fail without touching the array.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/grow.h"

#include <stdlib.h>

static void test_grow(void **state)
{
	(void)state;
	int64_t *v = NULL;
	size_t cap = 0;
	for (size_t n = 0; n < 10000; n++) {
		assert_int_equal(rs_grow(&v, &cap, n + 1, sizeof(*v)), RS_OK);
		assert_true(cap >= n + 1);
		v[n] = (int64_t)n * 3;
	}
	for (size_t n = 0; n < 10000; n++)
		assert_true(v[n] == (int64_t)n * 3);
	assert_true(cap < 2 * 10000 + 16); /* doubling, not more */
	int64_t *before = v;
	size_t cap_before = cap;
	assert_int_equal(rs_grow(&v, &cap, SIZE_MAX / 4, sizeof(*v)), RS_ENOMEM);
	assert_ptr_equal(v, before);
	assert_int_equal(cap, cap_before);
	assert_int_equal(rs_grow(&v, &cap, 5, sizeof(*v)), RS_OK); /* already room */
	assert_ptr_equal(v, before);
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_grow)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
