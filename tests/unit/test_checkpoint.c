/*
 * test_checkpoint.c - tests common/checkpoint.c's index: a good index
 * parses; every malformed case a hostile or damaged checkpoint may hold is
 * refused with a message naming the file and the field (a table without a
 * name, sizes and offsets that overflow, a file name that leaves the
 * directory, a shard listed twice hiding a missing one, duplicate tables,
 * gaps); `checkpoint diff` neither follows a link out of the checkpoint
 * nor blocks on a FIFO; the periodic checkpoints of a directory are its
 * step-NNNNNNNNN subdirectories only (a link or a file so named is not
 * one: pruning would follow it), and resolving takes the newest complete
 * one of a step at most the one asked for.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/checkpoint.h"
#include "tests/unit/scratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A two-table index; %s are the pieces each case replaces. */
#define INDEX                                                                                                    \
	"{\"format\": \"rowshift-checkpoint\", \"version\": 1, \"step\": 40, \"tables\": ["                      \
	"{%s \"rows\": %s, \"dim\": 8, \"dtype\": \"fp32\", \"optimizer\": \"sgd\", \"shards\": ["               \
	"{\"file\": \"%s\", \"row_offset\": %s, \"rows\": 60, \"col_offset\": 0, \"cols\": 8},"                  \
	"{\"file\": \"u.r60\", \"row_offset\": %s, \"rows\": 40, \"col_offset\": 0, \"cols\": 8}]},"            \
	"{\"name\": \"%s\", \"rows\": 10, \"dim\": 8, \"dtype\": \"fp32\", \"optimizer\": \"sgd\", \"shards\": [" \
	"{\"file\": \"a.c0\", \"row_offset\": 0, \"rows\": 10, \"col_offset\": 0, \"cols\": 4},"                 \
	"{\"file\": \"a.c4\", \"row_offset\": 0, \"rows\": 10, \"col_offset\": %s, \"cols\": 4}]}],"            \
	"\"dense\": {\"file\": \"dense.safetensors\", \"params\": 5}}"

typedef struct piece {
	const char *name_field, *rows, *file, *row0, *row1, *name2, *col1;
} piece;

static const piece good = {"\"name\": \"user\",", "100", "u.r0", "0", "60", "ad", "4"};

static rs_status parse(piece p, rs_ckpt_index *ix, rs_err *err)
{
	char text[4096];
	snprintf(text, sizeof(text), INDEX, p.name_field, p.rows, p.file, p.row0, p.row1, p.name2, p.col1);
	return rs_checkpoint_index_parse(text, strlen(text), "ck/index.json", ix, err);
}

static void test_good_index(void **state)
{
	(void)state;
	rs_ckpt_index ix;
	rs_err err = {0};
	assert_int_equal(parse(good, &ix, &err), RS_OK);
	assert_int_equal(ix.step, 40);
	assert_int_equal(ix.ntables, 2);
	assert_string_equal(ix.tables[1].name, "ad");
	assert_int_equal(ix.tables[1].shards[1].col_offset, 4);
	assert_non_null(rs_checkpoint_index_table(&ix, "user"));
	assert_null(rs_checkpoint_index_table(&ix, "nope"));
	rs_checkpoint_index_free(&ix);
}

static void refused(piece p, const char *why)
{
	rs_ckpt_index ix;
	rs_err err = {0};
	assert_int_equal(parse(p, &ix, &err), RS_EINVAL);
	assert_null(ix.tables);
	if (!strstr(err.msg, "ck/index.json") || !strstr(err.msg, why))
		fail_msg("expected a message naming the file and '%s', got: %s", why, err.msg);
}

static void test_bad_indexes(void **state)
{
	(void)state;
	piece p;
	p = good, p.name_field = "";
	refused(p, "tables[0]"); /* no name: once a NULL strcmp */
	p = good, p.name_field = "\"name\": \"../x\",";
	refused(p, "'name' is not a valid table name");
	p = good, p.rows = "2305843009213693952"; /* rows x dim overflows 64 bits */
	refused(p, "is not a table this reader takes");
	p = good, p.row0 = "9223372036854775800"; /* row_offset + rows overflows */
	refused(p, "lie outside the table");
	p = good, p.row0 = "-5";
	refused(p, "lie outside the table");
	p = good, p.file = "../../etc/passwd";
	refused(p, "field 'file' must be a plain file name");
	p = good, p.file = ".hidden";
	refused(p, "field 'file' must be a plain file name");
	p = good, p.file = "a\\u001bb"; /* an escape character in a name that reaches logs */
	refused(p, "field 'file' must be a plain file name");
	p = good, p.row1 = "0"; /* rows 0..59 listed twice, 60..99 missing: a sum of sizes would not see it */
	refused(p, "rows 0..59 of columns 0..7 are covered twice");
	p = good, p.row0 = "1"; /* row 0 in no shard */
	refused(p, "rows 0..0 of columns 0..7 are not covered");
	p = good, p.col1 = "3"; /* overlapping column blocks */
	refused(p, "table 'ad': columns 3..3 are covered twice");
	p = good, p.name2 = "user";
	refused(p, "table 'user' is listed twice");
	rs_ckpt_index ix;
	rs_err err = {0};
	assert_int_equal(rs_checkpoint_index_parse("{\"format\": 1}", 13, "x", &ix, &err), RS_EINVAL);
	assert_int_equal(rs_checkpoint_index_parse("[", 1, "x", &ix, &err), RS_EINVAL);
}

static void test_files_are_not_trusted(void **state)
{
	(void)state;
	char dir[64], path[256], text[4096];
	rs_err err = {0};
	json_t *out = NULL;
	assert_int_equal(rs_scratch_make(dir, sizeof(dir), "ckpt"), 0);
	/* a FIFO where index.json should be: refused at once, never waited on */
	snprintf(path, sizeof(path), "%s/index.json", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	rs_ckpt_index ix;
	assert_int_equal(rs_checkpoint_index_read(dir, &ix, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "not a regular file"));
	unlink(path);
	/* a valid index whose shard is a link to a file outside: refused, nothing read through it */
	snprintf(text, sizeof(text), INDEX, good.name_field, good.rows, good.file, good.row0, good.row1, good.name2, good.col1);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/u.r0", dir);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	memset(&err, 0, sizeof(err));
	assert_int_not_equal(rs_checkpoint_diff(dir, dir, &out, &err), RS_OK);
	assert_null(out);
	assert_non_null(strstr(err.msg, "u.r0"));
	assert_non_null(strstr(err.msg, "symbolic link"));
	/* a FIFO as a shard: refused, not waited on */
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	memset(&err, 0, sizeof(err));
	assert_int_not_equal(rs_checkpoint_diff(dir, dir, &out, &err), RS_OK);
	assert_non_null(strstr(err.msg, "not a regular file"));
	assert_int_equal(rs_scratch_remove(dir), 0);
}

/* Write the good index into dir/index.json. */
static void write_index(const char *dir)
{
	char path[400], text[4096];
	snprintf(text, sizeof(text), INDEX, good.name_field, good.rows, good.file, good.row0, good.row1, good.name2, good.col1);
	snprintf(path, sizeof(path), "%.256s/index.json", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_periodic_steps(void **state)
{
	(void)state;
	char root[64], path[256], out[4096];
	rs_err err = {0};
	int64_t *steps;
	size_t n;
	assert_int_equal(rs_scratch_make(root, sizeof(root), "ckpt-steps"), 0);
	static const char *const dirs[] = {"step-000000010", "step-000000030", "elsewhere", "step-000000040"};
	for (int i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s", root, dirs[i]);
		assert_int_equal(mkdir(path, 0700), 0);
		if (i != 3) /* step 40 has no index: incomplete */
			write_index(path);
	}
	snprintf(path, sizeof(path), "%s/step-000000050", root); /* a link to another directory */
	assert_int_equal(symlink("elsewhere", path), 0);
	snprintf(path, sizeof(path), "%s/step-000000070", root); /* a file */
	fclose(fopen(path, "w"));
	assert_int_equal(rs_checkpoint_steps(root, &steps, &n, &err), RS_OK);
	assert_int_equal(n, 3);
	assert_true(steps[0] == 40 && steps[1] == 30 && steps[2] == 10);
	free(steps);
	assert_int_equal(rs_checkpoint_resolve(root, -1, out, sizeof(out), &err), RS_OK);
	assert_non_null(strstr(out, "step-000000030"));
	assert_int_equal(rs_checkpoint_resolve(root, 29, out, sizeof(out), &err), RS_OK);
	assert_non_null(strstr(out, "step-000000010"));
	assert_int_equal(rs_checkpoint_resolve(root, 9, out, sizeof(out), &err), RS_ENOTFOUND);
	assert_int_equal(rs_scratch_remove(root), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_index),
		cmocka_unit_test(test_bad_indexes),
		cmocka_unit_test(test_files_are_not_trusted),
		cmocka_unit_test(test_periodic_steps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
