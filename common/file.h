/*
 * file.h - the one way rowshift reads and writes whole files.
 *
 * Reading: a whole file into memory, NUL-terminated, with a size limit,
 * regular files only (a FIFO or a device is refused without blocking on
 * it). Writing: atomically, so a reader sees the old file or the new one,
 * never a torn one, also across a crash: the data goes to a fresh
 * temporary file beside the target (created exclusively, never following a
 * link), which is fsynced, renamed over the target, and then the
 * directory is fsynced so the rename itself is durable.
 *
 * Every error names the file and what failed, in err.
 */
#ifndef RS_FILE_H
#define RS_FILE_H

#include "common/status.h"

#include <jansson.h>
#include <stddef.h>
#include <stdatomic.h>
#include <sys/types.h>

/*
 * Read the whole regular file at path, at most max bytes. *buf gets a new
 * NUL-terminated buffer (the caller frees it), *len its length without the
 * NUL (len may be NULL). RS_ENOTFOUND when the file does not exist,
 * RS_EINVAL when it is larger than max or not a regular file, RS_EIO when
 * it cannot be read, RS_ENOMEM.
 */
rs_status rs_file_read(const char *path, size_t max, char **buf, size_t *len, rs_err *err);

/*
 * Open path for reading, a regular file only: a FIFO or a device is
 * refused without blocking on it (and a symbolic link too when nofollow).
 * *fd the descriptor (close-on-exec) for the caller to close; RS_ENOTFOUND,
 * RS_EINVAL (not a regular file, a link) or RS_EIO, naming the file.
 */
rs_status rs_file_open_regular(const char *path, int nofollow, int *fd, rs_err *err);

/* Parse the JSON file at path (at most max bytes, duplicate keys refused): *out a new reference. */
rs_status rs_file_read_json(const char *path, size_t max, json_t **out, rs_err *err);

/* Writes the file's contents to fd; returns RS_OK or the failure (errno kept for the message). */
typedef rs_status (*rs_file_writer)(int fd, void *ctx);

/* Replace path atomically and durably with what fn writes, with `mode` (e.g. 0600): a batch of one (below). */
rs_status rs_file_write_atomic(const char *path, mode_t mode, rs_file_writer fn, void *ctx, rs_err *err);

/*
 * Several files into one directory, durable together at a journal commit
 * or two instead of one each (each costs the disk a cache flush, and the
 * CPU a commit: measured on ext4 on a 2-core VM, the per-file fsyncs were
 * half of what a checkpoint took from training). rs_file_batch_write writes each file
 * to a temporary name beside its path (PATH.XXXXXX) and starts its
 * writeback, keeping it open (past 64 files, each is synced and closed as
 * it is written); rs_file_batch_commit syncs them all, renames each into place
 * and syncs their directory. Until the commit returns, a crash leaves each
 * path as it was, or (renamed, its directory not yet synced) the new file
 * complete.
 * A failed write or commit removes the files not in place; so does
 * rs_file_batch_free, for a batch given up before its commit. A batch
 * starts zeroed; the commit frees it.
 */
typedef struct rs_file_batch {
	struct rs_file_staged *v;
	int n, cap;
} rs_file_batch;

rs_status rs_file_batch_write(rs_file_batch *b, const char *path, mode_t mode, rs_file_writer fn, void *ctx,
			      rs_err *err);
rs_status rs_file_batch_commit(rs_file_batch *b, rs_err *err);
void rs_file_batch_free(rs_file_batch *b);
/* How many files batches have fsynced, in this process (a test's check that a commit syncs before it renames). */
extern atomic_ulong rs_file_batch_syncs_for_tests;

/* Make the names made or removed in directory dir survive a crash (RS_EIO naming it). */
rs_status rs_file_sync_dir(const char *dir, rs_err *err);
/* The same for the directory path is in. */
rs_status rs_file_sync_parent(const char *path, rs_err *err);

/* The same with len bytes of buf. */
rs_status rs_file_write_buf(const char *path, mode_t mode, const void *buf, size_t len, rs_err *err);

/* The same with j as JSON text (json_dumps flags, e.g. JSON_COMPACT), and a final newline. */
rs_status rs_file_write_json(const char *path, mode_t mode, const json_t *j, size_t flags, rs_err *err);

/* Remove path, durably (its directory synced); a path already gone is RS_OK. */
rs_status rs_file_remove(const char *path, rs_err *err);

/*
 * A directory only this user can use, for files that hold secrets (the
 * admin files of local jobs): $XDG_RUNTIME_DIR/NAME when the session has a
 * runtime directory, else /tmp/NAME-UID. Created mode 0700 when missing;
 * refused (RS_EINVAL, saying why) when it is a link, not ours, or open to
 * others, as someone else may have made it first.
 */
rs_status rs_file_private_dir(const char *name, char *out, size_t n, rs_err *err);

/* Write all n bytes to fd, riding out short writes and EINTR: RS_EIO with errno set on failure. */
rs_status rs_file_write_all(int fd, const void *buf, size_t n);

#endif
