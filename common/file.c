/*
 * file.c - see file.h.
 */
#include "common/file.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

rs_status rs_file_open_regular(const char *path, int nofollow, int *fd, rs_err *err)
{
	struct stat sb;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores it */
	*fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
	if (*fd < 0)
		return rs_err_set(err, errno == ENOENT ? RS_ENOTFOUND : errno == ELOOP ? RS_EINVAL : RS_EIO, "%s: %s", path,
				  errno == ELOOP ? "a symbolic link (refused)" : strerror(errno));
	rs_status st;
	if (fstat(*fd, &sb) != 0)
		st = rs_err_set(err, RS_EIO, "%s: %s", path, strerror(errno));
	else if (!S_ISREG(sb.st_mode))
		st = rs_err_set(err, RS_EINVAL, "%s: not a regular file", path);
	else
		return RS_OK;
	close(*fd);
	*fd = -1;
	return st;
}

rs_status rs_file_read(const char *path, size_t max, char **buf, size_t *len, rs_err *err)
{
	struct stat sb;
	char *b = NULL;
	size_t n = 0;
	rs_status st = RS_OK;
	int fd;
	*buf = NULL;
	RSCHECK(rs_file_open_regular(path, 0, &fd, err));
	if (fstat(fd, &sb) != 0)
		RSFAILGOTO(st, rs_err_set(err, RS_EIO, "%s: %s", path, strerror(errno)), out);
	if ((uint64_t)sb.st_size > max)
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: larger than %zu bytes", path, max), out);
	/* the size may change under us: read to the end, never past max */
	size_t cap = (size_t)sb.st_size + 1;
	RSALLOCGOTO(b = malloc(cap), st, out);
	for (;;) {
		if (n + 1 == cap) {
			char probe;
			ssize_t more = n == max ? read(fd, &probe, 1) : 0;
			if (more < 0 && errno != EINTR)
				RSFAILGOTO(st, rs_err_set(err, RS_EIO, "%s: %s", path, strerror(errno)), out);
			if (more > 0)
				RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: larger than %zu bytes", path, max), out);
			if (n == max && more == 0)
				break;
			if (n == max)
				continue; /* EINTR: probe again */
			size_t ncap = cap * 2 < max + 1 ? cap * 2 : max + 1;
			char *nb = realloc(b, ncap);
			RSALLOCGOTO(nb, st, out);
			b = nb, cap = ncap;
		}
		ssize_t got = read(fd, b + n, cap - 1 - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			RSFAILGOTO(st, rs_err_set(err, RS_EIO, "%s: %s", path, strerror(errno)), out);
		if (got == 0)
			break;
		n += (size_t)got;
	}
	b[n] = 0;
	*buf = b, b = NULL;
	if (len)
		*len = n;
out:
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "%s: out of memory", path);
	free(b);
	close(fd);
	return st;
}

rs_status rs_file_read_json(const char *path, size_t max, json_t **out, rs_err *err)
{
	char *text;
	size_t len;
	json_error_t jerr;
	*out = NULL;
	RSCHECK(rs_file_read(path, max, &text, &len, err));
	*out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	if (!*out)
		return rs_err_set(err, RS_EINVAL, "%s:%d: %s", path, jerr.line, jerr.text);
	return RS_OK;
}

rs_status rs_file_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return RS_EIO;
		}
		p += w;
		n -= (size_t)w;
	}
	return RS_OK;
}

rs_status rs_file_sync_dir(const char *dir, rs_err *err)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) != 0) {
		int e = errno;
		if (dfd >= 0)
			close(dfd);
		return rs_err_set(err, RS_EIO, "%s: cannot sync the directory: %s", dir, strerror(e));
	}
	close(dfd);
	return RS_OK;
}

rs_status rs_file_sync_parent(const char *path, rs_err *err)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	return rs_file_sync_dir(dirname(dir), err);
}

rs_status rs_file_remove(const char *path, rs_err *err)
{
	if (unlink(path) != 0)
		return errno == ENOENT ? RS_OK : rs_err_set(err, RS_EIO, "cannot remove %s: %s", path, strerror(errno));
	return rs_file_sync_parent(path, err);
}

/* What fn writes, in a new temporary file beside path (its name in tmp, PATH_MAX), with `mode`; *fd left open. */
static rs_status write_temp(const char *path, mode_t mode, rs_file_writer fn, void *ctx, char *tmp, int *fd,
			    rs_err *err)
{
	if (snprintf(tmp, PATH_MAX, "%s.XXXXXX", path) >= PATH_MAX)
		return rs_err_set(err, RS_EINVAL, "%s: path too long", path);
	/* mkostemp: a new name, O_EXCL (never someone else's file or link), mode 0600 until fchmod */
	*fd = mkostemp(tmp, O_CLOEXEC);
	if (*fd < 0)
		return rs_err_set(err, RS_EIO, "%s: cannot create a temporary file: %s", path, strerror(errno));
	rs_status st = fchmod(*fd, mode) == 0 ? fn(*fd, ctx) : RS_EIO;
	if (st != RS_OK) {
		int e = errno;
		close(*fd);
		unlink(tmp);
		return rs_err_set(err, st, "%s: cannot write: %s", path, st == RS_ENOMEM ? "out of memory" : strerror(e));
	}
	return RS_OK;
}

/*
 * A file written, not yet in place. It stays open until its fsync, so the
 * fsync is the writing descriptor's: a writeback error on the way is
 * reported to it, never lost with an inode the kernel evicted between a
 * close and a reopen. Past BATCH_OPEN files a batch syncs and closes each
 * as it is written (a commit each: slower, as durable).
 */
#define BATCH_OPEN 64

struct rs_file_staged {
	char *tmp, *path;
	int fd; /* -1: synced and closed */
};

atomic_ulong rs_file_batch_syncs_for_tests;

/* fsync and close fd (always closed); RS_EIO naming path on a failure of either. */
static rs_status sync_close(int fd, const char *path, rs_err *err)
{
	atomic_fetch_add(&rs_file_batch_syncs_for_tests, 1);
	int synced = fsync(fd), e = errno;
	if (close(fd) != 0 && synced == 0)
		synced = -1, e = errno;
	return synced == 0 ? RS_OK : rs_err_set(err, RS_EIO, "%s: cannot write it durably: %s", path, strerror(e));
}

rs_status rs_file_batch_write(rs_file_batch *b, const char *path, mode_t mode, rs_file_writer fn, void *ctx,
			      rs_err *err)
{
	char tmp[PATH_MAX];
	int fd = -1;
	if (b->n == b->cap) {
		int cap = b->cap ? 2 * b->cap : 8;
		struct rs_file_staged *v = realloc(b->v, sizeof(*v) * (size_t)cap);
		if (!v)
			return rs_err_set(err, RS_ENOMEM, "%s: out of memory", path);
		b->v = v, b->cap = cap;
	}
	RSCHECK(write_temp(path, mode, fn, ctx, tmp, &fd, err));
	struct rs_file_staged f = {strdup(tmp), strdup(path), fd};
	if (!f.tmp || !f.path) {
		close(fd);
		unlink(tmp);
		free(f.tmp);
		free(f.path);
		return rs_err_set(err, RS_ENOMEM, "%s: out of memory", path);
	}
	if (b->n >= BATCH_OPEN) { /* descriptors are finite: this one synced now */
		f.fd = -1;
		rs_status st = sync_close(fd, path, err);
		if (st != RS_OK) {
			unlink(tmp);
			free(f.tmp);
			free(f.path);
			return st;
		}
	} else if (sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) != 0 && errno != ENOSYS && errno != EINVAL &&
		   errno != ESPIPE) {
		/* its blocks are given now, in the journal's running transaction: the commit's first fsync takes
		 * them all; where the file system cannot, the commit's fsync does it all */
		RS_DEBUG("%s: cannot start its writeback: %s", tmp, strerror(errno));
	}
	b->v[b->n++] = f;
	return RS_OK;
}

/* Whether paths a and b are in the same directory (their text up to the last '/'). */
static int same_dir(const char *a, const char *b)
{
	const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
	size_t la = sa ? (size_t)(sa - a) : 0, lb = sb ? (size_t)(sb - b) : 0;
	return la == lb && !memcmp(a, b, la);
}

rs_status rs_file_batch_commit(rs_file_batch *b, rs_err *err)
{
	rs_status st = RS_OK;
	for (int i = 0; i < b->n && st == RS_OK; i++) { /* every file's contents, then every name */
		if (b->v[i].fd >= 0)
			st = sync_close(b->v[i].fd, b->v[i].path, err);
		b->v[i].fd = -1;
	}
	for (int i = 0; i < b->n && st == RS_OK; i++) {
		if (rename(b->v[i].tmp, b->v[i].path) != 0)
			st = rs_err_set(err, RS_EIO, "%s: cannot put it in place: %s", b->v[i].path, strerror(errno));
		else
			free(b->v[i].tmp), b->v[i].tmp = NULL;
	}
	for (int i = 0; i < b->n && st == RS_OK; i++) /* each directory once (they are usually one) */
		if (i == 0 || !same_dir(b->v[i].path, b->v[i - 1].path))
			st = rs_file_sync_parent(b->v[i].path, err);
	rs_file_batch_free(b); /* removes the files not in place */
	return st;
}

void rs_file_batch_free(rs_file_batch *b)
{
	for (int i = 0; i < b->n; i++) {
		if (b->v[i].fd >= 0)
			close(b->v[i].fd);
		if (b->v[i].tmp)
			unlink(b->v[i].tmp);
		free(b->v[i].tmp);
		free(b->v[i].path);
	}
	free(b->v);
	*b = (rs_file_batch){0};
}

rs_status rs_file_write_atomic(const char *path, mode_t mode, rs_file_writer fn, void *ctx, rs_err *err)
{
	rs_file_batch one = {0};
	rs_status st = rs_file_batch_write(&one, path, mode, fn, ctx, err);
	if (st != RS_OK) {
		rs_file_batch_free(&one);
		return st;
	}
	return rs_file_batch_commit(&one, err);
}

typedef struct buf_ctx {
	const void *buf;
	size_t len;
} buf_ctx;

static rs_status write_buf(int fd, void *ctx)
{
	buf_ctx *b = ctx;
	return rs_file_write_all(fd, b->buf, b->len);
}

rs_status rs_file_write_buf(const char *path, mode_t mode, const void *buf, size_t len, rs_err *err)
{
	buf_ctx b = {buf, len};
	return rs_file_write_atomic(path, mode, write_buf, &b, err);
}

rs_status rs_file_write_json(const char *path, mode_t mode, const json_t *j, size_t flags, rs_err *err)
{
	char *text = json_dumps(j, flags);
	if (!text)
		return rs_err_set(err, RS_ENOMEM, "%s: out of memory", path);
	size_t n = strlen(text);
	char *t = realloc(text, n + 2);
	if (!t) {
		free(text);
		return rs_err_set(err, RS_ENOMEM, "%s: out of memory", path);
	}
	t[n] = '\n', t[n + 1] = 0;
	rs_status st = rs_file_write_buf(path, mode, t, n + 1, err);
	free(t);
	return st;
}

rs_status rs_file_private_dir(const char *name, char *out, size_t n, rs_err *err)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	struct stat sb;
	int len = xdg && xdg[0] == '/' ? snprintf(out, n, "%s/%s", xdg, name)
					: snprintf(out, n, "/tmp/%s-%d", name, (int)getuid());
	if (len < 0 || (size_t)len >= n)
		return rs_err_set(err, RS_EINVAL, "%s: path too long", out);
	if (mkdir(out, 0700) != 0 && errno != EEXIST)
		return rs_err_set(err, RS_EIO, "%s: %s", out, strerror(errno));
	if (lstat(out, &sb) != 0)
		return rs_err_set(err, RS_EIO, "%s: %s", out, strerror(errno));
	if (!S_ISDIR(sb.st_mode) || sb.st_uid != getuid() || (sb.st_mode & 077))
		return rs_err_set(err, RS_EINVAL, "%s: not a private directory of this user (a link, someone else's, or "
				  "open to others): refused", out);
	return RS_OK;
}
