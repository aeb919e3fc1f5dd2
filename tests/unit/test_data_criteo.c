/*
 * test_data_criteo.c - tests worker/data_criteo.c on fixture files: good
 * lines parse exactly (values computed here independently), empty fields
 * give empty bags and zero features, bad lines are counted and skipped,
 * samples wrap around the training lines, held-out lines are the last ones,
 * and a file of only bad lines, a missing one, a device or a FIFO is a
 * clear error (never a hang).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "worker/data_criteo.h"
#include "tests/unit/scratch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static rs_config *load(const char *paths, int eval)
{
	char json[1024];
	snprintf(json, sizeof(json),
		 "{\"tables\": [{\"name\": \"a\", \"rows\": 1000, \"dim\": 4, \"features\": [\"C1\"]},"
		 "{\"name\": \"b\", \"rows\": 50, \"dim\": 4, \"features\": [\"C3\", \"x\"]},"
		 "{\"name\": \"z\", \"dim\": 4, \"features\": [\"C2\"], \"zch\": {\"buckets\": 4, \"slots\": 64}}],"
		 "\"data\": {\"source\": \"criteo\", \"paths\": [%s], \"eval_samples\": %d}}", paths, eval);
	rs_config *cfg = NULL;
	rs_err err = {0};
	if (rs_config_parse(json, strlen(json), "t.json", &cfg, &err) != RS_OK)
		fail_msg("%s", err.msg);
	return cfg;
}

static void test_parse_line(void **state)
{
	(void)state;
	rs_criteo_sample s;
	const char *why = NULL;
	char line[1024] = "1\t5\t0\t\t-3\t100";
	for (int i = 0; i < 8; i++)
		strcat(line, "\t1");
	strcat(line, "\t68fd1e64\t\tFF");
	for (int i = 0; i < 23; i++)
		strcat(line, "\t0");
	strcat(line, "\r\n");
	assert_int_equal(rs_criteo_parse_line(line, strlen(line), &s, &why), RS_OK);
	assert_true(s.label == 1.0f);
	assert_true(fabsf(s.dense[0] - (float)log1p(5)) < 1e-7f);
	assert_true(s.dense[1] == 0 && s.dense[2] == 0 && s.dense[3] == 0); /* 0, empty, negative */
	assert_true(fabsf(s.dense[4] - (float)log1p(100)) < 1e-6f);
	assert_true(s.present[0] && s.cat[0] == 0x68fd1e64ull);
	assert_false(s.present[1]);
	assert_true(s.present[2] && s.cat[2] == 0xff);
	/* the last: a 19-digit integer (found by the fuzzer: it overflowed) */
	static const char *const bad[] = {"", "1", "x\t", "0\t1\t2", "1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\t1\tgg",
					  "1\t77\t7\t\t\t7\t9999999999999999990\t1\t"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why = NULL;
		assert_int_equal(rs_criteo_parse_line(bad[i], strlen(bad[i]), &s, &why), RS_EINVAL);
		assert_non_null(why);
	}
}

static void test_file(void **state)
{
	(void)state;
	rs_config *cfg = load("\"tests/data/criteo/small.tsv\"", 10);
	rs_data *d;
	rs_err err = {0};
	assert_int_equal(rs_data_open(cfg, &d, &err), RS_OK);
	/* 47 lines, 4 malformed (3, 4, 5, 47) */
	assert_int_equal(rs_criteo_lines(d), 43);
	rs_batch b;
	assert_int_equal(rs_batch_init(&b, d->nfeatures), RS_OK);
	assert_int_equal(rs_data_fill(d, 0, 3, &b), RS_OK);
	/* sample 0 is line 1: C1 = 68fd1e64, C2 = 80e26c9b, C3 empty; feature "x" (4th) reads C4 */
	assert_true(b.labels[0] == 1 && b.labels[1] == 0 && b.labels[2] == 1);
	assert_true(fabsf(b.dense[0] - (float)log1p(5)) < 1e-7f);
	assert_int_equal(b.offsets[0][1] - b.offsets[0][0], 1);
	assert_true(b.ids[0][0] >= 0 && b.ids[0][0] < 1000);
	assert_int_equal(b.offsets[1][1] - b.offsets[1][0], 0); /* empty C3 */
	assert_int_equal(b.offsets[3][1] - b.offsets[3][0], 1); /* the ZCH feature on C2 */
	/* sample 1 (line 2) has every field empty: empty bags, zero features */
	for (int f = 0; f < 4; f++)
		assert_int_equal(b.offsets[f][2] - b.offsets[f][1], 0);
	for (int k = 0; k < RS_NUM_DENSE; k++)
		assert_true(b.dense[RS_NUM_DENSE + k] == 0);
	/* training wraps after 33 lines; evaluation reads the last 10 good lines */
	rs_batch w;
	assert_int_equal(rs_batch_init(&w, d->nfeatures), RS_OK);
	assert_int_equal(rs_data_fill(d, 33, 1, &w), RS_OK);
	assert_memory_equal(w.dense, b.dense, sizeof(float) * RS_NUM_DENSE);
	assert_int_equal(rs_data_fill(d, RS_EVAL_BASE, 10, &w), RS_OK);
	assert_int_equal(w.size, 10);
	rs_batch_free(&w);
	rs_batch_free(&b);
	rs_data_close(d);
	rs_config_free(cfg);
}

static void test_bad_files(void **state)
{
	(void)state;
	rs_config *cfg = load("\"tests/data/criteo/bad.tsv\"", 10);
	rs_data *d = NULL;
	rs_err err = {0};
	assert_int_equal(rs_data_open(cfg, &d, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "no good Criteo lines"));
	assert_null(d);
	rs_config_free(cfg);
	cfg = load("\"tests/data/criteo/missing.tsv\"", 10);
	err.msg[0] = 0;
	assert_int_equal(rs_data_open(cfg, &d, &err), RS_ENOTFOUND);
	assert_non_null(strstr(err.msg, "missing.tsv"));
	rs_config_free(cfg);
	/* a device would feed the worker forever, a FIFO block it in open(): refused at once */
	cfg = load("\"/dev/zero\"", 10);
	err.msg[0] = 0;
	assert_int_equal(rs_data_open(cfg, &d, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "/dev/zero: not a regular file"));
	rs_config_free(cfg);
	char dir[64], fifo[128], paths[160];
	assert_int_equal(rs_scratch_make(dir, sizeof(dir), "criteo-fifo"), 0);
	snprintf(fifo, sizeof(fifo), "%s/data.tsv", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	snprintf(paths, sizeof(paths), "\"%s\"", fifo);
	cfg = load(paths, 10);
	err.msg[0] = 0;
	assert_int_equal(rs_data_open(cfg, &d, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "not a regular file"));
	rs_config_free(cfg);
	assert_int_equal(rs_scratch_remove(dir), 0);
}

/* One good line: it is the training data and the held-out data both, never an index past it. */
static void test_one_good_line(void **state)
{
	(void)state;
	char dir[64], path[128], paths[160];
	assert_int_equal(rs_scratch_make(dir, sizeof(dir), "criteo1"), 0);
	snprintf(path, sizeof(path), "%s/one.tsv", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("1\t5\t\t\t\t\t\t\t\t\t\t\t\t\t68fd1e64\t80e26c9b\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", f);
	fclose(f);
	snprintf(paths, sizeof(paths), "\"%s\"", path);
	rs_config *cfg = load(paths, 10);
	rs_data *d;
	rs_batch b;
	rs_err err = {0};
	assert_int_equal(rs_data_open(cfg, &d, &err), RS_OK);
	assert_int_equal(rs_criteo_lines(d), 1);
	rs_batch e;
	assert_int_equal(rs_batch_init(&b, d->nfeatures), RS_OK);
	assert_int_equal(rs_batch_init(&e, d->nfeatures), RS_OK);
	assert_int_equal(rs_data_fill(d, 0, 4, &b), RS_OK);
	assert_int_equal(rs_data_fill(d, RS_EVAL_BASE, 4, &e), RS_OK);
	assert_true(b.labels[0] == 1 && e.labels[3] == 1);
	assert_memory_equal(e.dense + 3 * RS_NUM_DENSE, b.dense, sizeof(float) * RS_NUM_DENSE); /* the same line */
	rs_batch_free(&b);
	rs_batch_free(&e);
	rs_data_close(d);
	rs_config_free(cfg);
	assert_int_equal(rs_scratch_remove(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_line),
		cmocka_unit_test(test_file),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_one_good_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
