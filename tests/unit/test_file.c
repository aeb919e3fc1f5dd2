/*
 * test_file.c - tests common/file.c: whole files read within their limit,
 * FIFOs and directories refused without blocking, atomic writes with the
 * mode asked for and no temporary file left (their directory synced
 * then, or later for several), removal (gone already is
 * fine; what cannot go is named), and the private directory
 * refused when someone could have prepared it (a link, a directory open to
 * others).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/file.h"
#include "tests/unit/scratch.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static int setup(void **state)
{
	(void)state;
	return rs_scratch_make(dir, sizeof(dir), "file");
}

static int teardown(void **state)
{
	(void)state;
	return rs_scratch_remove(dir);
}

static void test_read_and_write(void **state)
{
	(void)state;
	char path[128], *buf;
	size_t len;
	rs_err err = {0};
	snprintf(path, sizeof(path), "%s/a.txt", dir);
	assert_int_equal(rs_file_read(path, 10, &buf, &len, &err), RS_ENOTFOUND);
	assert_int_equal(rs_file_write_buf(path, 0600, "hello", 5, &err), RS_OK);
	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(rs_file_read(path, 5, &buf, &len, &err), RS_OK); /* exactly at the limit */
	assert_int_equal(len, 5);
	assert_string_equal(buf, "hello");
	free(buf);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_file_read(path, 4, &buf, &len, &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "larger than 4 bytes"));
	/* replaced whole, and no temporary file left beside it */
	assert_int_equal(rs_file_write_buf(path, 0644, "bye", 3, &err), RS_OK);
	assert_int_equal(rs_file_read(path, 100, &buf, &len, &err), RS_OK);
	assert_string_equal(buf, "bye");
	free(buf);
	DIR *d = opendir(dir);
	int entries = 0;
	for (struct dirent *e; (e = readdir(d));)
		entries += e->d_name[0] != '.';
	closedir(d);
	assert_int_equal(entries, 1);
	/* an empty file reads as "" */
	assert_int_equal(rs_file_write_buf(path, 0600, "", 0, &err), RS_OK);
	assert_int_equal(rs_file_read(path, 100, &buf, &len, &err), RS_OK);
	assert_int_equal(len, 0);
	free(buf);
}

static void test_not_regular_files(void **state)
{
	(void)state;
	char path[128], *buf;
	rs_err err = {0};
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(rs_file_read(path, 100, &buf, NULL, &err), RS_EINVAL); /* at once: no writer is waited for */
	assert_non_null(strstr(err.msg, "not a regular file"));
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_file_read(dir, 100, &buf, NULL, &err), RS_EINVAL);
	json_t *j;
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_file_read_json(path, 100, &j, &err), RS_EINVAL);
}

static void test_remove(void **state)
{
	(void)state;
	char path[128];
	rs_err err = {0};
	snprintf(path, sizeof(path), "%s/gone", dir);
	assert_int_equal(rs_file_write_buf(path, 0600, "x", 1, &err), RS_OK);
	assert_int_equal(rs_file_remove(path, &err), RS_OK);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(rs_file_remove(path, &err), RS_OK); /* already gone */
	snprintf(path, sizeof(path), "%s/a-dir", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(rs_file_remove(path, &err), RS_EIO);
	assert_non_null(strstr(err.msg, path));
	assert_int_equal(rmdir(path), 0);
}

static rs_status write_two(int fd, void *ctx)
{
	(void)ctx;
	return rs_file_write_all(fd, "two", 3);
}

/* Files in dir named PREFIX.XXXXXX: a batch's temporary files. */
static int temps(const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	size_t len = strlen(prefix);
	if (!d)
		return -1; /* never what a check expects */
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, len) && e->d_name[len] == '.' && strlen(e->d_name + len) == 7;
	closedir(d);
	return n;
}

static rs_status write_fails(int fd, void *ctx)
{
	(void)fd, (void)ctx;
	errno = ENOSPC;
	return RS_EIO;
}

static void expect_text(const char *path, const char *text)
{
	char *buf;
	size_t len;
	rs_err err = {0};
	assert_int_equal(rs_file_read(path, 100, &buf, &len, &err), RS_OK);
	assert_string_equal(buf, text);
	free(buf);
}

/*
 * A batch replaces its files only at its commit, all of them, with their
 * mode, leaving no temporary file; one that fails, or is given up,
 * replaces nothing and leaves nothing behind; each failure names its file.
 */
static void test_batch(void **state)
{
	(void)state;
	char a[128], b[128], bad[128];
	rs_err err = {0};
	rs_file_batch batch = {0};
	snprintf(a, sizeof(a), "%s/batch-a", dir);
	snprintf(b, sizeof(b), "%s/batch-b", dir);
	assert_int_equal(rs_file_write_buf(a, 0600, "one", 3, &err), RS_OK);
	assert_int_equal(rs_file_write_buf(b, 0600, "one", 3, &err), RS_OK);
	unsigned long syncs = atomic_load(&rs_file_batch_syncs_for_tests);
	assert_int_equal(rs_file_batch_write(&batch, a, 0640, write_two, NULL, &err), RS_OK);
	assert_int_equal(rs_file_batch_write(&batch, b, 0640, write_two, NULL, &err), RS_OK);
	expect_text(a, "one"); /* not before the commit */
	assert_int_equal(temps("batch-a"), 1);
	assert_int_equal(temps("batch-b"), 1);
	assert_int_equal(atomic_load(&rs_file_batch_syncs_for_tests), syncs); /* synced together, at the commit */
	assert_int_equal(rs_file_batch_commit(&batch, &err), RS_OK);
	assert_int_equal(atomic_load(&rs_file_batch_syncs_for_tests), syncs + 2);
	expect_text(a, "two");
	expect_text(b, "two");
	struct stat sb;
	assert_int_equal(stat(a, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0640);
	assert_int_equal(stat(b, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0640);
	assert_int_equal(temps("batch-a") + temps("batch-b"), 0);
	assert_null(batch.v);

	/* a writer that fails: its file is gone at once; the batch given up takes the rest with it */
	assert_int_equal(rs_file_batch_write(&batch, a, 0600, write_two, NULL, &err), RS_OK);
	assert_int_equal(rs_file_batch_write(&batch, b, 0600, write_fails, NULL, &err), RS_EIO);
	assert_non_null(strstr(err.msg, b));
	assert_int_equal(temps("batch-b"), 0);
	assert_int_equal(temps("batch-a"), 1);
	rs_file_batch_free(&batch);
	assert_int_equal(temps("batch-a"), 0);

	/* a directory that is not there */
	memset(&err, 0, sizeof(err));
	snprintf(bad, sizeof(bad), "%s/no-such-dir/x", dir);
	assert_int_equal(rs_file_batch_write(&batch, bad, 0600, write_two, NULL, &err), RS_EIO);
	assert_non_null(strstr(err.msg, "no-such-dir"));
	rs_file_batch_free(&batch);

	/* a commit that cannot put a file in place (its path became a directory) names it, leaves no temporary file */
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_file_write_buf(a, 0600, "one", 3, &err), RS_OK);
	assert_int_equal(unlink(b), 0);
	assert_int_equal(rs_file_batch_write(&batch, a, 0600, write_two, NULL, &err), RS_OK);
	assert_int_equal(rs_file_batch_write(&batch, b, 0600, write_two, NULL, &err), RS_OK);
	assert_int_equal(mkdir(b, 0700), 0); /* a file is not renamed onto a directory (EISDIR) */
	assert_int_equal(rs_file_batch_commit(&batch, &err), RS_EIO);
	assert_non_null(strstr(err.msg, b));
	assert_int_equal(temps("batch-a") + temps("batch-b"), 0);
	assert_null(batch.v);
	expect_text(a, "two"); /* put in place before it */

	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_file_sync_dir(a, &err), RS_EIO); /* a file, not a directory */
	assert_non_null(strstr(err.msg, a));
	assert_int_equal(rmdir(b), 0);
	assert_int_equal(unlink(a), 0);
}

/* More files than a batch keeps open: those past its limit are synced as they are written, and all land. */
static void test_batch_of_many(void **state)
{
	(void)state;
	char path[128];
	rs_err err = {0};
	rs_file_batch batch = {0};
	unsigned long syncs = atomic_load(&rs_file_batch_syncs_for_tests);
	for (int i = 0; i < 70; i++) {
		snprintf(path, sizeof(path), "%s/many-%02d", dir, i);
		assert_int_equal(rs_file_batch_write(&batch, path, 0600, write_two, NULL, &err), RS_OK);
	}
	assert_int_equal(atomic_load(&rs_file_batch_syncs_for_tests), syncs + 6); /* the 65th on, as written */
	assert_int_equal(rs_file_batch_commit(&batch, &err), RS_OK);
	assert_int_equal(atomic_load(&rs_file_batch_syncs_for_tests), syncs + 70);
	for (int i = 0; i < 70; i++) {
		snprintf(path, sizeof(path), "%s/many-%02d", dir, i);
		expect_text(path, "two");
		snprintf(path, sizeof(path), "many-%02d", i);
		assert_int_equal(temps(path), 0);
		snprintf(path, sizeof(path), "%s/many-%02d", dir, i);
		assert_int_equal(unlink(path), 0);
	}
}

static void test_private_dir(void **state)
{
	(void)state;
	char xdg[128], out[256], link_to[128];
	rs_err err = {0};
	snprintf(xdg, sizeof(xdg), "%s/run", dir);
	assert_int_equal(mkdir(xdg, 0700), 0);
	setenv("XDG_RUNTIME_DIR", xdg, 1);
	assert_int_equal(rs_file_private_dir("rs", out, sizeof(out), &err), RS_OK);
	struct stat sb;
	assert_int_equal(lstat(out, &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	assert_int_equal(sb.st_mode & 0777, 0700);
	assert_int_equal(rs_file_private_dir("rs", out, sizeof(out), &err), RS_OK); /* again: found as it is */
	/* prepared by someone else: open to others, or a link to elsewhere */
	assert_int_equal(chmod(out, 0777), 0);
	assert_int_equal(rs_file_private_dir("rs", out, sizeof(out), &err), RS_EINVAL);
	assert_non_null(strstr(err.msg, "not a private directory"));
	snprintf(link_to, sizeof(link_to), "%s/elsewhere", dir);
	assert_int_equal(mkdir(link_to, 0700), 0);
	snprintf(out, sizeof(out), "%s/linked", xdg);
	assert_int_equal(symlink(link_to, out), 0);
	memset(&err, 0, sizeof(err));
	assert_int_equal(rs_file_private_dir("linked", out, sizeof(out), &err), RS_EINVAL);
	unsetenv("XDG_RUNTIME_DIR");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_and_write),
		cmocka_unit_test(test_not_regular_files),
		cmocka_unit_test(test_remove),
		cmocka_unit_test(test_batch),
		cmocka_unit_test(test_batch_of_many),
		cmocka_unit_test(test_private_dir),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
