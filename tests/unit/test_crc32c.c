/*
 * test_crc32c.c - tests common/crc32c.c against published check values and
 * a bit-at-a-time reference, at every alignment and length split, on each
 * of its paths this CPU has.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/crc32c.h"

#include <stdlib.h>
#include <string.h>

static uint32_t reference(const unsigned char *p, size_t n)
{
	uint32_t c = 0xFFFFFFFFu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
	}
	return ~c;
}

static void test_known_values(void **state)
{
	(void)state;
	assert_int_equal(rs_crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(rs_crc32c_portable(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(rs_crc32c(0, "", 0), 0);
	unsigned char zeros[32] = {0}, ones[32];
	memset(ones, 0xff, sizeof(ones));
	assert_int_equal(rs_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
	assert_int_equal(rs_crc32c(0, ones, 32), 0x62A8AB43u);
}

static void test_matches_reference_any_split(void **state)
{
	(void)state;
	unsigned char buf[300];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	for (size_t off = 0; off < 8; off++)
		for (size_t n = 0; n + off <= sizeof(buf); n += 13) {
			uint32_t want = reference(buf + off, n);
			assert_int_equal(rs_crc32c(0, buf + off, n), want);
			assert_int_equal(rs_crc32c_portable(0, buf + off, n), want);
			size_t cut = n / 3;
			assert_int_equal(rs_crc32c(rs_crc32c(0, buf + off, cut), buf + off + cut, n - cut), want);
		}
}

/* Long buffers take the three-lane path: it must agree with the byte-at-a-time reference around every boundary. */
static void test_long_buffers(void **state)
{
	(void)state;
	size_t cap = 3 * 8192 * 4 + 64;
	unsigned char *buf = malloc(cap);
	assert_non_null(buf);
	for (size_t i = 0; i < cap; i++)
		buf[i] = (unsigned char)((i * 2654435761u) >> 13);
	static const size_t lens[] = {3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 3 * 8192 + 8, 6 * 8192, 6 * 8192 + 13,
				      3 * 8192 * 4};
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
		for (size_t off = 0; off < 3; off++) {
			uint32_t want = reference(buf + off, lens[k]);
			assert_int_equal(rs_crc32c(0, buf + off, lens[k]), want);
			assert_int_equal(rs_crc32c_portable(0, buf + off, lens[k]), want);
			assert_int_equal(rs_crc32c(rs_crc32c(0, buf + off, 100), buf + off + 100, lens[k] - 100), want);
		}
	free(buf);
}

/* CRC of p[0..n) from crc through `path`, which this CPU has (the caller checked). */
static uint32_t by(const char *path, uint32_t crc, const unsigned char *p, size_t n)
{
	uint32_t out = 0;
	assert_true(rs_crc32c_by(path, crc, p, n, &out));
	return out;
}

/*
 * One path alone (the state names it), skipped (reported so) on a CPU
 * without it: every length around the steps of every path (the fold's
 * 256-byte rounds, its 16-byte blocks and the bytes under one; the three
 * lanes' 24 KiB), at several alignments, whole and cut in two (a register
 * that is not zero), agrees with the reference.
 */
static void test_path(void **state)
{
	const char *path = *state;
	uint32_t probe;
	if (!rs_crc32c_by(path, 0, "", 0, &probe)) {
		print_message("not on this CPU (rs_crc32c takes %s)\n", rs_crc32c_impl());
		skip();
	}
	assert_int_equal(by(path, 0, (const unsigned char *)"123456789", 9), 0xE3069283u);
	size_t cap = (1u << 20) + 64;
	unsigned char *buf = malloc(cap);
	assert_non_null(buf);
	for (size_t i = 0; i < cap; i++)
		buf[i] = (unsigned char)((i * 2654435761u) >> 11);
	for (size_t n = 0; n <= 1100; n += n < 240 ? 7 : 1)
		for (size_t off = 0; off < 4; off++) {
			uint32_t want = reference(buf + off, n), cut = (uint32_t)(n / 3);
			assert_int_equal(by(path, 0, buf + off, n), want);
			assert_int_equal(by(path, by(path, 0, buf + off, cut), buf + off + cut, n - cut), want);
		}
	static const size_t lens[] = {4096, 4096 + 15, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 13, 65536 + 17, (1u << 20) - 1,
				      1u << 20};
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		uint32_t want = reference(buf + 3, lens[k]);
		assert_int_equal(by(path, 0, buf + 3, lens[k]), want);
		assert_int_equal(by(path, by(path, 0, buf + 3, 300), buf + 303, lens[k] - 300), want);
	}
	memset(buf, 0, 4096); /* all zeros: only the starting register shapes the result (RFC 3720 B.4 for 32) */
	assert_int_equal(by(path, 0, buf, 32), 0x8A9136AAu);
	assert_int_equal(by(path, 0, buf, 4096), reference(buf, 4096));
	assert_false(rs_crc32c_by("no such path", 0, buf, 1, &probe));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_values),
		cmocka_unit_test(test_matches_reference_any_split),
		cmocka_unit_test(test_long_buffers),
		{"path vpclmulqdq", test_path, NULL, NULL, "vpclmulqdq"},
		{"path sse4.2", test_path, NULL, NULL, "sse4.2"},
		{"path portable", test_path, NULL, NULL, "portable"},
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
