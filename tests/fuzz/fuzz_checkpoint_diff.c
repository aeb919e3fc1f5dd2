/*
 * fuzz_checkpoint_diff.c - libFuzzer target for what `rowshiftctl
 * checkpoint diff` and `checkpoint export` read (common/checkpoint.c, rs_checkpoint_diff; checkpoint_export.c): a
 * whole checkpoint made of the input, compared with itself. The input is
 * index.json, a NUL, the first shard file's bytes, a NUL, the dense
 * network file's bytes (the seed in corpus/checkpoint_diff/ is a real
 * checkpoint written by a worker). The files are written into a private
 * scratch directory under the names the index gives them (validated plain
 * names: nothing lands outside it). Any input is a diff or a clear error;
 * a checkpoint that reads compares equal to itself (0, or NaN where the
 * file holds NaN).
 */
#include "common/checkpoint.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void put(const char *name, const uint8_t *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		abort();
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			abort();
		p += w, n -= (size_t)w;
	}
	close(fd);
}

static void drop(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	unlink(path);
}

/* The next part of the input up to a NUL (or its end). */
static const uint8_t *part(const uint8_t **at, const uint8_t *end, size_t *n)
{
	const uint8_t *p = *at, *z = p < end ? memchr(p, 0, (size_t)(end - p)) : NULL;
	*n = (size_t)((z ? z : end) - p);
	*at = z ? z + 1 : end;
	return p;
}

static void remove_dir(void) { rmdir(dir); } /* emptied after every input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/fuzz-ckpt-diff-XXXXXX");
		if (!mkdtemp(dir) || atexit(remove_dir) != 0)
			abort();
	}
	const uint8_t *at = data, *end = data + size;
	size_t ni, ns, nd;
	const uint8_t *index = part(&at, end, &ni), *shard = part(&at, end, &ns), *dense = part(&at, end, &nd);
	put("index.json", index, ni);
	/* the names the index gives, when it parses (else no file but the index: the diff must refuse it) */
	rs_ckpt_index ix;
	rs_err err = {0};
	char sname[256] = "", dname[256] = "";
	if (rs_checkpoint_index_parse((const char *)index, ni, "fuzz", &ix, &err) == RS_OK) {
		snprintf(sname, sizeof(sname), "%s", ix.tables[0].nshards ? ix.tables[0].shards[0].file : "");
		snprintf(dname, sizeof(dname), "%s", ix.dense_file);
		rs_checkpoint_index_free(&ix);
	}
	if (sname[0])
		put(sname, shard, ns);
	if (dname[0] && strcmp(dname, sname) != 0)
		put(dname, dense, nd);
	json_t *out = NULL;
	memset(&err, 0, sizeof(err));
	rs_status st = rs_checkpoint_diff(dir, dir, &out, &err);
	if (st != RS_OK) {
		if (!err.msg[0] || out)
			abort(); /* an error says what, and leaves nothing behind */
	} else {
		double a = json_real_value(json_object_get(out, "max_abs"));
		if (!out || !(a == 0 || isnan(a)))
			abort(); /* a checkpoint differs from itself */
		json_decref(out);
	}
	/* the export reads the same files: an error says what; a success leaves one file, removed here */
	rs_ckpt_export_report rep;
	char outp[128];
	snprintf(outp, sizeof(outp), "%s.export", dir);
	memset(&err, 0, sizeof(err));
	if (rs_checkpoint_export(dir, outp, &rep, &err) != RS_OK) {
		if (!err.msg[0])
			abort();
	} else if (unlink(outp) != 0) {
		abort();
	}
	drop("index.json");
	if (sname[0])
		drop(sname);
	if (dname[0])
		drop(dname);
	return 0;
}
