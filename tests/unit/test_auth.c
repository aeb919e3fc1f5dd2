/*
 * test_auth.c - tests common/auth.c: proofs match an independent HMAC-SHA256
 * (Python's hmac, computed once: the vector below), any change to the
 * token, the label or a part changes the proof, parts cannot be shifted
 * across their separators, nonces are fresh and well-formed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/auth.h"

#include <string.h>

static void test_known_vector(void **state)
{
	(void)state;
	char p[RS_AUTH_PROOF_HEX + 1];
	const char *parts[] = {"a", "b"};
	/* python3 -c "import hmac,hashlib; print(hmac.new(b'key', b'lbl\0a\0b\0', hashlib.sha256).hexdigest())" */
	assert_int_equal(rs_auth_proof("key", "lbl", parts, 2, p), RS_OK);
	assert_string_equal(p, "01f7b4cc801766b04dc58a38dbc40f2c9c6d2161f90fe191513305c91369703d");
	assert_true(rs_auth_check("key", "lbl", parts, 2, p));
}

static void test_everything_is_bound(void **state)
{
	(void)state;
	char p[RS_AUTH_PROOF_HEX + 1];
	const char *parts[] = {"nonce-1", "nonce-2", "worker-0"};
	const char *shifted[] = {"nonce-1nonce-2", "", "worker-0"};
	const char *other[] = {"nonce-1", "nonce-3", "worker-0"};
	assert_int_equal(rs_auth_proof("s3cret", "rowshift join", parts, 3, p), RS_OK);
	assert_true(rs_auth_check("s3cret", "rowshift join", parts, 3, p));
	assert_false(rs_auth_check("s3cret!", "rowshift join", parts, 3, p));
	assert_false(rs_auth_check("s3cret", "rowshift welcome", parts, 3, p));
	assert_false(rs_auth_check("s3cret", "rowshift join", other, 3, p));
	assert_false(rs_auth_check("s3cret", "rowshift join", shifted, 3, p));
	assert_false(rs_auth_check("s3cret", "rowshift join", parts, 2, p));
	assert_false(rs_auth_check("s3cret", "rowshift join", parts, 3, NULL));
	p[10] ^= 1;
	assert_false(rs_auth_check("s3cret", "rowshift join", parts, 3, p));
	assert_int_equal(rs_auth_proof("", "x", parts, 1, p), RS_EINVAL);
}

static void test_nonces(void **state)
{
	(void)state;
	char a[RS_AUTH_NONCE_HEX + 1], b[RS_AUTH_NONCE_HEX + 1];
	assert_int_equal(rs_auth_nonce(a), RS_OK);
	assert_int_equal(rs_auth_nonce(b), RS_OK);
	assert_true(rs_auth_nonce_ok(a));
	assert_string_not_equal(a, b);
	assert_false(rs_auth_nonce_ok("abc"));
	assert_false(rs_auth_nonce_ok("0123456789ABCDEF0123456789abcdef"));
	assert_false(rs_auth_nonce_ok(NULL));
	assert_true(rs_auth_equal("same", "same"));
	assert_false(rs_auth_equal("same", "sam"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_vector),
		cmocka_unit_test(test_everything_is_bound),
		cmocka_unit_test(test_nonces),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
