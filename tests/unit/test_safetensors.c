/*
 * test_safetensors.c - tests common/safetensors.c: round trips of every
 * dtype and odd shapes, the file layout byte for byte (as Python's
 * safetensors expects it), atomic writes, and every kind of corrupt header
 * rejected with a message naming the problem.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/safetensors.h"
#include "tests/unit/scratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static int setup(void **state)
{
	(void)state;
	return rs_scratch_make(dir, sizeof(dir), "st");
}

static int teardown(void **state)
{
	(void)state;
	return rs_scratch_remove(dir);
}

static void test_round_trip(void **state)
{
	(void)state;
	float f[6] = {1, -2, 3.5f, 4, 5, 6};
	uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0};
	int64_t l[3] = {-1, 0, INT64_MAX};
	uint8_t empty[1] = {0};
	rs_st_tensor_in in[] = {
		{"weight", RS_ST_F32, 2, {2, 3}, f},
		{"half", RS_ST_F16, 1, {4}, h},
		{"ids", RS_ST_I64, 1, {3}, l},
		{"nothing", RS_ST_U8, 2, {0, 5}, empty},
	};
	json_t *meta = json_pack("{s:s}", "table", "user");
	char path[128];
	rs_err err = {0};
	snprintf(path, sizeof(path), "%s/a.safetensors", dir);
	assert_int_equal(rs_st_write(path, in, 4, meta, &err), RS_OK);
	json_decref(meta);
	char tmp[160];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	assert_int_equal(access(tmp, F_OK), -1); /* renamed into place */

	rs_st_file *fl;
	assert_int_equal(rs_st_open(path, &fl, &err), RS_OK);
	assert_int_equal(fl->ntensors, 4);
	assert_string_equal(json_string_value(json_object_get(fl->metadata, "table")), "user");
	assert_true(fl->data_start % 8 == 0); /* the header is padded to 8 bytes */
	int k = rs_st_find(fl, "weight");
	assert_true(k >= 0);
	assert_int_equal(fl->tensors[k].ndim, 2);
	assert_int_equal(fl->tensors[k].shape[1], 3);
	float back[6];
	assert_int_equal(rs_st_read(fl, k, back, &err), RS_OK);
	assert_memory_equal(back, f, sizeof(f));
	int64_t lb[3];
	assert_int_equal(rs_st_read(fl, rs_st_find(fl, "ids"), lb, &err), RS_OK);
	assert_memory_equal(lb, l, sizeof(l));
	assert_int_equal(rs_st_find(fl, "missing"), -1);
	rs_st_close(fl);
}

/* Build a file from a header text and a data size. */
static rs_status parse_text(const char *hdr, uint64_t data, rs_err *err)
{
	size_t hl = strlen(hdr);
	unsigned char *buf = calloc(8 + hl + data + 1, 1);
	uint64_t n = hl;
	memcpy(buf, &n, 8);
	memcpy(buf + 8, hdr, hl);
	rs_st_file *f = NULL;
	rs_status st = rs_st_parse(buf, 8 + hl + data, 8 + hl + data, "x.safetensors", &f, err);
	rs_st_close(f);
	free(buf);
	return st;
}

static void test_corrupt_headers(void **state)
{
	(void)state;
	static const struct {
		const char *hdr;
		uint64_t data;
		const char *want;
	} bad[] = {
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]", 8, "header"},
		{"[]", 0, "not a JSON object"},
		{"{\"a\": {\"dtype\": \"Q7\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, "unknown dtype"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8, "need 12 bytes"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 8]}}", 8, "shape[0]"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", 8, "begin <= end"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
		 " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12, "overlap"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "hole"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 16, "cover 8 bytes"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4, "cover 8 bytes"},
		{"{\"a\": {\"dtype\": \"U8\", \"shape\": [4294967296, 4294967296, 4294967296], \"data_offsets\": [0, 8]}}", 8, "need"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
		 " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 16, "header"},
		{"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8], \"extra\": 1}}", 8, "'a'"},
		{"{\"__metadata__\": {\"k\": 5}}", 0, "__metadata__"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rs_err err = {0};
		if (parse_text(bad[i].hdr, bad[i].data, &err) != RS_EINVAL)
			fail_msg("case %zu accepted: %s", i, bad[i].hdr);
		if (!strstr(err.msg, bad[i].want) || !strstr(err.msg, "x.safetensors"))
			fail_msg("case %zu: message '%s' lacks '%s'", i, err.msg, bad[i].want);
	}
	/* a header length beyond the file */
	unsigned char b[16] = {0};
	uint64_t huge = 1000;
	memcpy(b, &huge, 8);
	rs_st_file *f = NULL;
	rs_err err = {0};
	assert_int_equal(rs_st_parse(b, sizeof(b), sizeof(b), "x.safetensors", &f, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "does not fit"));
	assert_int_equal(rs_st_parse(b, 4, 4, "x.safetensors", &f, &err), RS_EINVAL);
	assert_null(f);
	/* a valid one, for contrast */
	assert_int_equal(parse_text("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, &err),
			 RS_OK);
}

static void test_python_reads_our_files(void **state)
{
	(void)state;
	if (system("python3 -c 'import json, struct' >/dev/null 2>&1") != 0)
		skip();
	float f[4] = {0.5f, 1.5f, -2.5f, 8};
	rs_st_tensor_in in = {"weight", RS_ST_F32, 2, {2, 2}, f};
	char path[128], cmd[512];
	rs_err err = {0};
	snprintf(path, sizeof(path), "%s/py.safetensors", dir);
	assert_int_equal(rs_st_write(path, &in, 1, NULL, &err), RS_OK);
	snprintf(cmd, sizeof(cmd), "python3 tests/integration/safetensors_check.py %s weight 2,2 0.5,1.5,-2.5,8", path);
	assert_int_equal(system(cmd), 0);
	/* and the other way: a file Python wrote (the fuzz seed, made with struct and json) */
	rs_st_file *fl;
	assert_int_equal(rs_st_open("tests/fuzz/corpus/safetensors/two.safetensors", &fl, &err), RS_OK);
	int k = rs_st_find(fl, "momentum1");
	float m[2];
	assert_true(k >= 0);
	assert_int_equal(rs_st_read(fl, k, m, &err), RS_OK);
	assert_true(m[0] == 0.5f && m[1] == 0.25f);
	rs_st_close(fl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_corrupt_headers),
		cmocka_unit_test(test_python_reads_our_files),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
