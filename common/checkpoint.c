/*
 * checkpoint.c - see checkpoint.h.
 */
#include "common/checkpoint.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/file.h"
#include "common/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void rs_checkpoint_shard_file(const rs_table_config *t, const rs_shard *s, char *buf, size_t n)
{
	snprintf(buf, n, "%s.r%lld.c%d.safetensors", t->name, (long long)s->row_offset, s->col_offset);
}

/* Add a file's "crc32c" and "bytes" from sums ({file: {"crc32c", "bytes"}}) to o; RS_EINVAL when it has none. */
static rs_status add_sum(json_t *o, const json_t *sums, const char *file, rs_err *err)
{
	if (!sums)
		return RS_OK;
	json_t *e = json_object_get(sums, file);
	if (!e)
		return rs_err_set(err, RS_EINVAL, "checkpoint index: no worker reported writing %s", file);
	if (json_object_set(o, "crc32c", json_object_get(e, "crc32c")) || json_object_set(o, "bytes", json_object_get(e, "bytes")))
		return RS_ENOMEM;
	return RS_OK;
}

rs_status rs_checkpoint_write_index(const char *dir, const rs_config *cfg, const rs_plan *plan, int64_t step,
				    size_t dense_params, const json_t *sums, rs_err *err)
{
	json_t *tables = json_array();
	json_t *root = json_pack("{s:s, s:i, s:I, s:o, s:{s:s, s:I}}", "format", "rowshift-checkpoint", "version", 1,
				 "step", (json_int_t)step, "tables", tables, "dense", "file", "dense.safetensors",
				 "params", (json_int_t)dense_params);
	rs_status st = RS_ENOMEM;
	char path[4096], file[512];
	if (!root)
		return RS_ENOMEM;
	if ((st = add_sum(json_object_get(root, "dense"), sums, "dense.safetensors", err)) != RS_OK)
		goto out;
	st = RS_ENOMEM;
	for (int t = 0; t < cfg->ntables; t++) {
		const rs_table_config *tc = &cfg->tables[t];
		const rs_table_plan *tp = &plan->tables[t];
		json_t *shards = json_array();
		json_t *jt = json_pack("{s:s, s:I, s:i, s:s, s:s, s:o}", "name", tc->name, "rows", (json_int_t)tc->rows,
				       "dim", tc->dim, "dtype", rs_dtype_name(tc->dtype), "optimizer",
				       rs_optimizer_name(cfg->optimizer.kind), "shards", shards);
		if (!jt || json_array_append_new(tables, jt))
			goto out;
		for (int k = 0; k < tp->nshards; k++) {
			const rs_shard *s = &tp->shards[k];
			if (s->replica != 0 || (tp->sharding == RS_SHARD_DP && s->rank != 0))
				continue;
			rs_checkpoint_shard_file(tc, s, file, sizeof(file));
			json_t *js = json_pack("{s:s, s:I, s:I, s:i, s:i}", "file", file, "row_offset", (json_int_t)s->row_offset,
					       "rows", (json_int_t)s->rows, "col_offset", s->col_offset, "cols", s->cols);
			if (json_array_append_new(shards, js) || (st = add_sum(js, sums, file, err)) != RS_OK)
				goto out;
			st = RS_ENOMEM;
		}
	}
	snprintf(path, sizeof(path), "%s/index.json", dir);
	st = rs_file_write_json(path, 0600, root, JSON_INDENT(1), err);
out:
	json_decref(root);
	return st;
}

rs_status rs_checkpoint_sums_add(json_t *sums, const rs_ckpt_file_report *files, int n)
{
	for (int k = 0; k < n; k++) {
		json_t *e = json_pack("{s:I, s:I}", "crc32c", (json_int_t)files[k].crc32c, "bytes", (json_int_t)files[k].bytes);
		if (!e || json_object_set_new(sums, files[k].file, e) != 0)
			return RS_ENOMEM;
	}
	return RS_OK;
}

rs_status rs_checkpoint_drop_index(const char *dir, rs_err *err)
{
	char path[4200];
	if (snprintf(path, sizeof(path), "%s/index.json", dir) >= (int)sizeof(path))
		return rs_err_set(err, RS_EINVAL, "checkpoint: directory name too long: %.64s...", dir);
	rs_err why = {0};
	rs_status st = rs_file_remove(path, &why);
	return st == RS_OK ? RS_OK : rs_err_set(err, st, "checkpoint: the earlier index: %s", why.msg);
}

rs_status rs_checkpoint_verify_file(const char *dir, const char *file, const rs_ckpt_sum *sum, rs_err *err)
{
	char path[4096];
	int fd;
	if (!sum->has)
		return RS_OK;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	RSCHECK(rs_file_open_regular(path, 1, &fd, err));
	enum { CHUNK = 1 << 20 };
	unsigned char *buf = malloc(CHUNK);
	uint32_t crc = 0;
	int64_t n = 0;
	ssize_t got = 0;
	while (buf && (got = read(fd, buf, CHUNK)) > 0) {
		crc = rs_crc32c(crc, buf, (size_t)got);
		n += got;
	}
	int e = errno;
	close(fd);
	free(buf);
	if (!buf)
		return rs_err_set(err, RS_ENOMEM, "%s: out of memory", path);
	if (got < 0)
		return rs_err_set(err, RS_EIO, "%s: %s", path, strerror(e));
	if (n != sum->bytes || crc != sum->crc32c)
		return rs_err_set(err, RS_ECORRUPT, "%s: %lld bytes with CRC-32C %08x, but the index says %lld bytes with %08x: "
				  "a torn or damaged file", path, (long long)n, crc, (long long)sum->bytes, sum->crc32c);
	return RS_OK;
}

rs_status rs_checkpoint_verify(const char *dir, const rs_ckpt_index *ix, rs_err *err)
{
	for (int t = 0; t < ix->ntables; t++)
		for (int k = 0; k < ix->tables[t].nshards; k++)
			RSCHECK(rs_checkpoint_verify_file(dir, ix->tables[t].shards[k].file, &ix->tables[t].shards[k].sum, err));
	return rs_checkpoint_verify_file(dir, ix->dense_file, &ix->dense_sum, err);
}

void rs_checkpoint_step_dir(const char *root, int64_t step, char *buf, size_t n)
{
	snprintf(buf, n, "%s/step-%09lld", root, (long long)step);
}

static int cmp_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

rs_status rs_checkpoint_steps(const char *root, int64_t **steps, size_t *n, rs_err *err)
{
	DIR *d = opendir(root);
	*steps = NULL, *n = 0;
	if (!d)
		return rs_err_set(err, errno == ENOENT ? RS_ENOTFOUND : RS_EIO, "checkpoint %s: %s", root, strerror(errno));
	size_t cap = 0;
	struct dirent *e;
	struct stat sb;
	while ((e = readdir(d))) {
		const char *name = e->d_name;
		if (strncmp(name, "step-", 5) != 0 || strlen(name) != 14 || strspn(name + 5, "0123456789") != 9)
			continue;
		/* a directory of its own: never a link to somewhere else, which pruning would empty */
		if (fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode)) {
			RS_WARN("checkpoint %s/%s is not a directory: ignored", root, name);
			continue;
		}
		if (*n == cap) {
			int64_t *p = realloc(*steps, sizeof(**steps) * (cap = cap ? 2 * cap : 16));
			if (!p) {
				closedir(d);
				free(*steps);
				*steps = NULL, *n = 0;
				return rs_err_set(err, RS_ENOMEM, "checkpoint %s: out of memory", root);
			}
			*steps = p;
		}
		(*steps)[(*n)++] = strtoll(name + 5, NULL, 10);
	}
	closedir(d);
	qsort(*steps, *n, sizeof(**steps), cmp_desc);
	return RS_OK;
}

rs_status rs_checkpoint_resolve(const char *path, int64_t max_step, char *out, size_t n, rs_err *err)
{
	char index[4200];
	snprintf(index, sizeof(index), "%s/index.json", path);
	if (access(index, F_OK) == 0) {
		snprintf(out, n, "%s", path);
		return RS_OK;
	}
	int64_t *steps;
	size_t k;
	RSCHECK(rs_checkpoint_steps(path, &steps, &k, err));
	for (size_t i = 0; i < k; i++) {
		char dir[4096];
		rs_ckpt_index ix;
		rs_err why = {0};
		if (max_step >= 0 && steps[i] > max_step)
			continue;
		rs_checkpoint_step_dir(path, steps[i], dir, sizeof(dir));
		rs_status st = rs_checkpoint_index_read(dir, &ix, &why);
		if (st == RS_OK) {
			st = rs_checkpoint_verify(dir, &ix, &why);
			rs_checkpoint_index_free(&ix);
			if (st == RS_OK) {
				snprintf(out, n, "%s", dir);
				free(steps);
				return RS_OK;
			}
		}
		if (st != RS_ENOTFOUND && st != RS_EINVAL && st != RS_ECORRUPT) { /* unreadable, not damaged: say so */
			free(steps);
			return rs_err_set(err, st, "checkpoint %s cannot be read: %s", dir, why.msg);
		}
		RS_WARN("checkpoint %s passed over: %s", dir, why.msg);
	}
	free(steps);
	return rs_err_set(err, RS_ENOTFOUND, "%s holds no index.json and no complete periodic checkpoint "
			  "(step-NNNNNNNNN/ with its index, every file matching its checksum)", path);
}

rs_status rs_checkpoint_find(const char *path, int64_t max_step, char *out, size_t n, int64_t *step, rs_err *err)
{
	rs_ckpt_index ix;
	RSCHECK(rs_checkpoint_resolve(path, max_step, out, n, err));
	RSCHECK(rs_checkpoint_index_read(out, &ix, err));
	*step = ix.step;
	rs_checkpoint_index_free(&ix);
	return RS_OK;
}

/* ---- diff ------------------------------------------------------------------------ */

static double element(const void *buf, rs_st_dtype dt, size_t i)
{
	uint16_t h;
	uint32_t u;
	float f;
	switch (dt) {
	case RS_ST_F32:
		return ((const float *)buf)[i];
	case RS_ST_F64:
		return ((const double *)buf)[i];
	case RS_ST_BF16:
		h = ((const uint16_t *)buf)[i];
		u = (uint32_t)h << 16;
		memcpy(&f, &u, 4);
		return f;
	case RS_ST_F16: {
		h = ((const uint16_t *)buf)[i];
		int e = (h >> 10) & 0x1f, m = h & 0x3ff;
		double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
		return h & 0x8000 ? -v : v;
	}
	case RS_ST_I64:
		return (double)((const int64_t *)buf)[i];
	case RS_ST_I32:
		return ((const int32_t *)buf)[i];
	case RS_ST_U32:
		return ((const uint32_t *)buf)[i];
	case RS_ST_U8:
		return ((const uint8_t *)buf)[i];
	default:
		return NAN;
	}
}

/* The exact bits of element i: an integer's own, a float's as a double (every float has its own double). */
static uint64_t element_bits(const void *buf, rs_st_dtype dt, size_t i)
{
	uint64_t u;
	if (dt == RS_ST_I64)
		return (uint64_t)((const int64_t *)buf)[i];
	double d = element(buf, dt, i);
	memcpy(&u, &d, sizeof(u));
	return u;
}

/* What a tensor holds per row: the table's cells, one value per column block, or `width` values of whole rows. */
enum { CELLS = 0, PER_BLOCK = -1 };

/* The distinct column offsets of t's shards, ascending, into offs (t->dim + 1 entries); returns how many. */
static int col_blocks(const rs_ckpt_table *t, int32_t *offs)
{
	int n = 0;
	for (int i = 0; i < t->nshards; i++) {
		int32_t c = t->shards[i].col_offset;
		int k = 0;
		while (k < n && offs[k] < c)
			k++;
		if (k < n && offs[k] == c)
			continue;
		memmove(offs + k + 1, offs + k, sizeof(int32_t) * (size_t)(n - k));
		offs[k] = c;
		n++;
	}
	return n;
}

/*
 * Assemble tensor `name` of table t into a rows x width array of doubles,
 * and their exact bits: width = dim for the cells (per = CELLS), the
 * number of column blocks for per-row state kept per block (PER_BLOCK),
 * or `per` values of whole-width rows. Returns RS_ENOTFOUND when the tensor
 * is absent or a whole-width tensor meets column blocks. The index was
 * validated: the shards tile the table and name plain files in dir.
 */
static rs_status assemble(const char *dir, const rs_ckpt_table *t, const char *name, int per, double **out,
			  uint64_t **bits_out, size_t *n_out, rs_st_dtype *dtype, rs_err *err)
{
	int32_t *offs = malloc(sizeof(int32_t) * ((size_t)t->dim + 1));
	int nb = offs ? col_blocks(t, offs) : 0;
	int64_t width = per == CELLS ? t->dim : per == PER_BLOCK ? nb : per;
	double *a = calloc((size_t)(t->rows * width + 1), sizeof(double));
	uint64_t *bits = calloc((size_t)(t->rows * width + 1), sizeof(uint64_t));
	rs_status st = RS_OK;
	*out = NULL;
	*bits_out = NULL;
	if (!a || !bits || !offs) {
		free(a);
		free(bits);
		free(offs);
		return rs_err_set(err, RS_ENOMEM, "%s: table '%s': out of memory", dir, t->name);
	}
	for (int i = 0; i < t->nshards && st == RS_OK; i++) {
		const rs_ckpt_shard *s = &t->shards[i];
		char path[4096];
		rs_st_file *f = NULL;
		void *buf = NULL;
		if (per > 0 && s->cols != t->dim) {
			st = RS_ENOTFOUND; /* whole-row values of column blocks */
			break;
		}
		int blk = 0;
		while (blk < nb && offs[blk] != s->col_offset)
			blk++;
		snprintf(path, sizeof(path), "%s/%s", dir, s->file);
		RSCHECKGOTO(rs_st_open(path, &f, err), st, next);
		int k = rs_st_find(f, name);
		if (k < 0)
			RSFAILGOTO(st, RS_ENOTFOUND, next);
		rs_st_tensor *ts = &f->tensors[k];
		int64_t want_cols = per == CELLS ? s->cols : per == PER_BLOCK ? 1 : per;
		int want_ndim = per == PER_BLOCK || per == 1 ? 1 : 2;
		if (!(ts->ndim == want_ndim && ts->shape[0] == s->rows && (want_ndim == 1 || ts->shape[1] == want_cols)))
			RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: tensor '%s' has the wrong shape for its shard", path, name),
				   next);
		RSALLOCGOTO(buf = malloc((size_t)(ts->end - ts->begin) + 1), st, next);
		RSCHECKGOTO(rs_st_read(f, k, buf, err), st, next);
		*dtype = ts->dtype;
		for (int64_t r = 0; r < s->rows; r++)
			for (int64_t c = 0; c < want_cols; c++) {
				int64_t at = (s->row_offset + r) * width + (per == CELLS ? s->col_offset + c : per == PER_BLOCK ? blk : c);
				a[at] = element(buf, ts->dtype, (size_t)(r * want_cols + c));
				bits[at] = element_bits(buf, ts->dtype, (size_t)(r * want_cols + c));
			}
next:
		if (st == RS_ENOMEM)
			rs_err_set(err, st, "%s: out of memory", path);
		free(buf);
		rs_st_close(f);
	}
	free(offs);
	if (st != RS_OK) {
		free(a);
		free(bits);
		return st;
	}
	*out = a;
	*bits_out = bits;
	*n_out = (size_t)(t->rows * width);
	return RS_OK;
}

/* The largest differences between a and b (n values each). */
static void compare(const double *a, const double *b, size_t n, double *max_abs, double *max_rel)
{
	double d = 0, m = 0;
	for (size_t i = 0; i < n; i++) {
		/* NaN on one side only is as far apart as it gets (fmax would drop it) */
		double x = isnan(a[i]) != isnan(b[i]) ? INFINITY : fabs(a[i] - b[i]);
		d = fmax(d, x);
		m = fmax(m, fabs(a[i]));
	}
	*max_abs = d;
	*max_rel = m > 0 ? d / m : (d > 0 ? INFINITY : 0);
}

/* Whether per-block state of ta and tb can be compared: the same column blocks. */
static int same_blocks(const rs_ckpt_table *ta, const rs_ckpt_table *tb)
{
	int32_t *oa = malloc(sizeof(int32_t) * ((size_t)ta->dim + 1)), *ob = malloc(sizeof(int32_t) * ((size_t)tb->dim + 1));
	int same = oa && ob;
	if (same) {
		int na = col_blocks(ta, oa), nb = col_blocks(tb, ob);
		same = na == nb && !memcmp(oa, ob, sizeof(int32_t) * (size_t)na);
	}
	free(oa);
	free(ob);
	return same;
}

rs_status rs_checkpoint_diff(const char *dir_a, const char *dir_b, json_t **out, rs_err *err)
{
	static const struct {
		const char *name;
		int per; /* CELLS, PER_BLOCK or values per whole row */
	} tensors[] = {{"weight", CELLS},	   {"momentum1", PER_BLOCK}, {"exp_avg", CELLS},
		       {"exp_avg_sq", CELLS}, {"zch_ids", 1},		  {"zch_meta", 3}};
	rs_ckpt_index ia, ib;
	json_t *res = json_object(), *tables = json_object();
	rs_status st = RS_OK;
	double all_abs = 0, all_rel = 0;
	int identical = 1; /* every tensor bit for bit */
	json_t *left_out = json_array(); /* tensors that could not be compared */

	*out = NULL;
	memset(&ib, 0, sizeof(ib));
	RSCHECKGOTO(rs_checkpoint_index_read(dir_a, &ia, err), st, out_a);
	RSCHECKGOTO(rs_checkpoint_index_read(dir_b, &ib, err), st, out);
	RSCHECKGOTO(rs_checkpoint_verify(dir_a, &ia, err), st, out);
	RSCHECKGOTO(rs_checkpoint_verify(dir_b, &ib, err), st, out);
	RSALLOCGOTO(res, st, out);
	RSALLOCGOTO(tables, st, out);
	if (ia.ntables != ib.ntables)
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s and %s hold different numbers of tables", dir_a, dir_b), out);
	for (int i = 0; i < ia.ntables; i++) {
		const rs_ckpt_table *ta = &ia.tables[i], *tb = rs_checkpoint_index_table(&ib, ta->name);
		const char *name = ta->name;
		if (!tb)
			RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "table '%s' is in %s but not in %s", name, dir_a, dir_b), out);
		if (ta->rows != tb->rows || ta->dim != tb->dim || ta->dtype != tb->dtype)
			RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "table '%s': shapes or dtypes differ between %s and %s", name,
						  dir_a, dir_b), out);
		json_t *per = json_object();
		double t_abs = 0, t_rel = 0;
		for (size_t k = 0; k < sizeof(tensors) / sizeof(tensors[0]); k++) {
			double *a = NULL, *b = NULL, ma, mr;
			uint64_t *ba = NULL, *bb = NULL;
			size_t na = 0, nb = 0;
			rs_st_dtype da = RS_ST_F32, db = RS_ST_F32;
			if (tensors[k].per == PER_BLOCK && !same_blocks(ta, tb)) {
				/* per-block state of column blocks that differ: not comparable, so not known to be identical */
				identical = 0;
				json_array_append_new(left_out, json_sprintf("%s.%s", name, tensors[k].name));
				continue;
			}
			rs_status sa = assemble(dir_a, ta, tensors[k].name, tensors[k].per, &a, &ba, &na, &da, err);
			rs_status sb = sa == RS_OK || sa == RS_ENOTFOUND
					       ? assemble(dir_b, tb, tensors[k].name, tensors[k].per, &b, &bb, &nb, &db, err)
					       : sa;
			rs_status bad = sa != RS_OK && sa != RS_ENOTFOUND ? sa : sb != RS_OK && sb != RS_ENOTFOUND ? sb : RS_OK;
			if (bad == RS_OK && !strcmp(tensors[k].name, "weight") && (sa != RS_OK || sb != RS_OK))
				bad = rs_err_set(err, RS_EINVAL, "table '%s': weights missing", name);
			if (bad != RS_OK) {
				free(a);
				free(b);
				free(ba);
				free(bb);
				json_decref(per);
				RSFAILGOTO(st, bad, out);
			}
			/* in one and not the other (or whole-row values of column blocks): not known to be identical */
			identical &= sa == sb && da == db;
			if (sa != sb)
				json_array_append_new(left_out, json_sprintf("%s.%s", name, tensors[k].name));
			if (sa == RS_OK && sb == RS_OK) {
				compare(a, b, na < nb ? na : nb, &ma, &mr);
				int same = na == nb && !memcmp(ba, bb, sizeof(uint64_t) * na);
				identical &= same;
				if (tensors[k].per == 1 || tensors[k].per == 3) { /* ZCH ids and metadata: equal or not, no figures */
					json_object_set_new(per, tensors[k].name, json_pack("{s:b}", "identical", same));
				} else {
					json_object_set_new(per, tensors[k].name, json_pack("{s:f, s:f}", "max_abs", ma, "max_rel", mr));
					t_abs = fmax(t_abs, ma);
					t_rel = fmax(t_rel, mr);
				}
			}
			free(a);
			free(b);
			free(ba);
			free(bb);
		}
		json_object_set_new(tables, name, json_pack("{s:f, s:f, s:o}", "max_abs", t_abs, "max_rel", t_rel, "tensors", per));
		all_abs = fmax(all_abs, t_abs);
		all_rel = fmax(all_rel, t_rel);
	}
	/* the dense network, compared like a table named "(dense)" */
	{
		double *d[2] = {NULL, NULL}, ma = 0, mr = 0;
		size_t cnt[2] = {0, 0};
		const char *dirs[2] = {dir_a, dir_b};
		for (int k = 0; k < 2; k++) {
			char path[4096];
			rs_st_file *f;
			snprintf(path, sizeof(path), "%s/%s", dirs[k], (k ? &ib : &ia)->dense_file);
			if (rs_st_open(path, &f, err) != RS_OK)
				break;
			int idx = rs_st_find(f, "params");
			void *buf = idx >= 0 ? malloc((size_t)(f->tensors[idx].end - f->tensors[idx].begin) + 1) : NULL;
			if (buf && rs_st_read(f, idx, buf, err) == RS_OK) {
				cnt[k] = (size_t)(f->tensors[idx].end - f->tensors[idx].begin) / (size_t)rs_st_dtype_size(f->tensors[idx].dtype);
				d[k] = malloc(sizeof(double) * (cnt[k] + 1));
				for (size_t e = 0; d[k] && e < cnt[k]; e++)
					d[k][e] = element(buf, f->tensors[idx].dtype, e);
			}
			free(buf);
			rs_st_close(f);
		}
		if (!d[0] || !d[1] || cnt[0] != cnt[1]) {
			free(d[0]);
			free(d[1]);
			RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "the dense parameters of %s and %s are missing or differ in size",
						  dir_a, dir_b), out);
		}
		compare(d[0], d[1], cnt[0], &ma, &mr);
		identical &= !memcmp(d[0], d[1], sizeof(double) * cnt[0]); /* floats: a double each keeps its bits */
		free(d[0]);
		free(d[1]);
		json_object_set_new(tables, "(dense)", json_pack("{s:f, s:f}", "max_abs", ma, "max_rel", mr));
		all_abs = fmax(all_abs, ma);
		all_rel = fmax(all_rel, mr);
	}
	json_object_set_new(res, "max_abs", json_real(all_abs));
	json_object_set_new(res, "max_rel", json_real(all_rel));
	json_object_set_new(res, "identical", json_boolean(identical));
	json_object_set_new(res, "steps", json_pack("[I, I]", (json_int_t)ia.step, (json_int_t)ib.step));
	json_object_set_new(res, "not_compared", left_out);
	left_out = NULL;
	json_object_set(res, "tables", tables);
	*out = res;
	res = NULL;
out:
	rs_checkpoint_index_free(&ib);
	rs_checkpoint_index_free(&ia);
out_a:
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "checkpoint diff: out of memory");
	json_decref(left_out);
	json_decref(tables);
	json_decref(res);
	return st;
}

/* ---- the index, validated --------------------------------------------------------------- */

/* A plain name of a file in the checkpoint's directory: no path, not hidden, printable. */
static int plain_file_name(const json_t *j)
{
	const char *s = json_string_value(j);
	size_t n = s ? strlen(s) : 0;
	if (!s || n == 0 || n > 255 || n != json_string_length(j) || s[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '/' || (unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return 1;
}

static int cmp_shard(const void *a, const void *b)
{
	const rs_ckpt_shard *x = a, *y = b;
	if (x->col_offset != y->col_offset)
		return x->col_offset < y->col_offset ? -1 : 1;
	if (x->cols != y->cols)
		return x->cols < y->cols ? -1 : 1;
	if (x->row_offset != y->row_offset)
		return x->row_offset < y->row_offset ? -1 : 1;
	if (x->rows != y->rows)
		return x->rows > y->rows ? -1 : 1; /* the longer first: the overlap is what follows */
	return strcmp(x->file, y->file);
}

/* The shards tile the table exactly: column blocks over [0, dim), each cut into row ranges over [0, rows). */
static rs_status check_tiling(rs_ckpt_table *t, const char *name, rs_err *err)
{
	int32_t col = 0;
	qsort(t->shards, (size_t)t->nshards, sizeof(*t->shards), cmp_shard);
	for (int k = 0; k < t->nshards;) {
		const rs_ckpt_shard *first = &t->shards[k];
		if (first->col_offset != col)
			return rs_err_set(err, RS_EINVAL, "%s: table '%s': columns %d..%d are %s", name, t->name,
					  first->col_offset > col ? col : first->col_offset,
					  first->col_offset > col ? first->col_offset - 1 : col - 1,
					  first->col_offset > col ? "not covered" : "covered twice");
		int64_t row = 0;
		for (; k < t->nshards && t->shards[k].col_offset == first->col_offset && t->shards[k].cols == first->cols; k++) {
			int64_t at = t->shards[k].row_offset;
			if (at != row)
				return rs_err_set(err, RS_EINVAL, "%s: table '%s': rows %lld..%lld of columns %d..%d are %s (file %s)",
						  name, t->name, (long long)(at > row ? row : at), (long long)(at > row ? at - 1 : row - 1),
						  first->col_offset, first->col_offset + first->cols - 1,
						  at > row ? "not covered" : "covered twice", t->shards[k].file);
			row += t->shards[k].rows;
		}
		if (row != t->rows)
			return rs_err_set(err, RS_EINVAL, "%s: table '%s': rows %lld..%lld of columns %d..%d are not covered",
					  name, t->name, (long long)row, (long long)t->rows - 1, first->col_offset,
					  first->col_offset + first->cols - 1);
		col += first->cols;
	}
	if (col != t->dim)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': columns %d..%d are not covered", name, t->name, col,
				  t->dim - 1);
	return RS_OK;
}

static rs_status parse_shard(json_t *js, rs_ckpt_table *t, int k, const char *name, rs_err *err)
{
	json_error_t jerr;
	json_t *file;
	json_int_t r0, nr, c0, nc, crc = -1, bytes = -1;
	rs_ckpt_shard *s = &t->shards[k];
	if (json_unpack_ex(js, &jerr, JSON_STRICT, "{s:o, s:I, s:I, s:I, s:I, s?I, s?I}", "file", &file, "row_offset", &r0,
			   "rows", &nr, "col_offset", &c0, "cols", &nc, "crc32c", &crc, "bytes", &bytes) != 0)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': shard %d: %s", name, t->name, k, jerr.text);
	if ((crc == -1) != (bytes == -1) || crc < -1 || crc > (json_int_t)UINT32_MAX || bytes < -1)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': shard %d: 'crc32c' (32 bits) and 'bytes' go together",
				  name, t->name, k);
	if (!plain_file_name(file))
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': shard %d: field 'file' must be a plain file name in "
				  "the checkpoint's directory", name, t->name, k);
	if (r0 < 0 || nr < 1 || r0 > t->rows - nr || c0 < 0 || nc < 1 || c0 > t->dim - nc)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': shard %d (%s): rows %lld+%lld, columns %lld+%lld lie "
				  "outside the table's %lld x %d", name, t->name, k, json_string_value(file), (long long)r0,
				  (long long)nr, (long long)c0, (long long)nc, (long long)t->rows, t->dim);
	if (!(s->file = strdup(json_string_value(file))))
		return RS_ENOMEM;
	s->row_offset = r0, s->rows = nr, s->col_offset = (int32_t)c0, s->cols = (int32_t)nc;
	s->sum = (rs_ckpt_sum){crc >= 0, (uint32_t)(crc >= 0 ? crc : 0), bytes};
	return RS_OK;
}

static int enum_of(const char *s, const char *(*name_of)(int), int n)
{
	for (int k = 0; k < n; k++)
		if (!strcmp(s, name_of(k)))
			return k;
	return -1;
}

static const char *dtype_name_of(int k) { return rs_dtype_name((rs_dtype)k); }
static const char *optimizer_name_of(int k) { return rs_optimizer_name((rs_optimizer)k); }

static rs_status parse_table(json_t *jt, rs_ckpt_table *t, int i, const char *name, int64_t *nshards, rs_err *err)
{
	json_error_t jerr;
	json_t *tname, *shards, *js;
	const char *dtype, *opt;
	json_int_t rows, dim;
	size_t k;
	if (json_unpack_ex(jt, &jerr, JSON_STRICT, "{s:o, s:I, s:I, s:s, s:s, s:o}", "name", &tname, "rows", &rows, "dim",
			   &dim, "dtype", &dtype, "optimizer", &opt, "shards", &shards) != 0)
		return rs_err_set(err, RS_EINVAL, "%s: tables[%d]: %s", name, i, jerr.text);
	if (!json_is_string(tname) || json_string_length(tname) != strlen(json_string_value(tname)) ||
	    !rs_config_name_ok(json_string_value(tname)))
		return rs_err_set(err, RS_EINVAL, "%s: tables[%d]: field 'name' is not a valid table name", name, i);
	if (!(t->name = strdup(json_string_value(tname))))
		return RS_ENOMEM;
	if (dim < 1 || dim > 65536 || rows < 1 || rows > RS_CKPT_MAX_ELEMENTS / dim)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': %lld x %lld is not a table this reader takes (at most "
				  "2^40 elements, dim 1..65536)", name, t->name, (long long)rows, (long long)dim);
	t->rows = rows, t->dim = (int32_t)dim;
	int d = enum_of(dtype, dtype_name_of, 3), o = enum_of(opt, optimizer_name_of, 3);
	if (d < 0 || o < 0)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': field '%s' is not known ('%s')", name, t->name,
				  d < 0 ? "dtype" : "optimizer", d < 0 ? dtype : opt);
	t->dtype = (rs_dtype)d, t->optimizer = (rs_optimizer)o;
	size_t n = json_array_size(shards);
	if (!json_is_array(shards) || n < 1 || (int64_t)n > RS_CKPT_MAX_SHARDS - *nshards)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': field 'shards' must be an array of 1..%d shards", name,
				  t->name, RS_CKPT_MAX_SHARDS);
	*nshards += (int64_t)n;
	if (!(t->shards = calloc(n, sizeof(*t->shards))))
		return RS_ENOMEM;
	json_array_foreach(shards, k, js) {
		RSCHECK(parse_shard(js, t, (int)k, name, err));
		t->nshards = (int)k + 1;
	}
	return check_tiling(t, name, err);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const rs_ckpt_table *)a)->name, ((const rs_ckpt_table *)b)->name);
}

rs_status rs_checkpoint_index_parse(const char *text, size_t len, const char *name, rs_ckpt_index *out, rs_err *err)
{
	json_error_t jerr;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), *tables, *jt, *dfile;
	const char *format;
	json_int_t version, step, params, dcrc = -1, dbytes = -1;
	int64_t nshards = 0;
	rs_status st = RS_OK;
	size_t i;
	memset(out, 0, sizeof(*out));
	if (!root)
		return rs_err_set(err, RS_EINVAL, "%s:%d: %s", name, jerr.line, jerr.text);
	if (json_unpack_ex(root, &jerr, JSON_STRICT, "{s:s, s:I, s:I, s:o, s:{s:o, s:I, s?I, s?I}}", "format", &format,
			   "version", &version, "step", &step, "tables", &tables, "dense", "file", &dfile, "params", &params,
			   "crc32c", &dcrc, "bytes", &dbytes) != 0)
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: not a rowshift checkpoint index: %s", name, jerr.text), out);
	if (strcmp(format, "rowshift-checkpoint") != 0 || version != 1)
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: not a rowshift checkpoint index (version 1)", name), out);
	if (step < 0 || params < 0 || params > RS_CKPT_MAX_ELEMENTS || !plain_file_name(dfile) || (dcrc == -1) != (dbytes == -1) ||
	    dcrc < -1 || dcrc > (json_int_t)UINT32_MAX || dbytes < -1)
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: field 'step', 'dense.params', 'dense.file' or the dense "
					  "file's 'crc32c' and 'bytes' are out of range or not a plain file name", name), out);
	size_t n = json_array_size(tables);
	if (!json_is_array(tables) || n < 1 || n > RS_CKPT_MAX_TABLES)
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: field 'tables' must be an array of 1..%d tables", name,
					  RS_CKPT_MAX_TABLES), out);
	out->step = step, out->dense_params = params;
	out->dense_sum = (rs_ckpt_sum){dcrc >= 0, (uint32_t)(dcrc >= 0 ? dcrc : 0), dbytes};
	RSALLOCGOTO(out->dense_file = strdup(json_string_value(dfile)), st, out);
	RSALLOCGOTO(out->tables = calloc(n, sizeof(*out->tables)), st, out);
	json_array_foreach(tables, i, jt) {
		out->ntables = (int)i + 1;
		RSCHECKGOTO(parse_table(jt, &out->tables[i], (int)i, name, &nshards, err), st, out);
	}
	/* unique names, in a sorted copy (the index keeps its order) */
	rs_ckpt_table *sorted = malloc(sizeof(*sorted) * n);
	RSALLOCGOTO(sorted, st, out);
	memcpy(sorted, out->tables, sizeof(*sorted) * n);
	qsort(sorted, n, sizeof(*sorted), cmp_name);
	for (i = 1; i < n && st == RS_OK; i++)
		if (!strcmp(sorted[i].name, sorted[i - 1].name))
			st = rs_err_set(err, RS_EINVAL, "%s: table '%s' is listed twice", name, sorted[i].name);
	free(sorted);
out:
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "%s: out of memory", name);
	if (st != RS_OK)
		rs_checkpoint_index_free(out);
	json_decref(root);
	return st;
}

rs_status rs_checkpoint_index_read(const char *dir, rs_ckpt_index *out, rs_err *err)
{
	char path[4096], *text;
	size_t len;
	memset(out, 0, sizeof(*out));
	if (snprintf(path, sizeof(path), "%s/index.json", dir) >= (int)sizeof(path))
		return rs_err_set(err, RS_EINVAL, "%s: path too long", dir);
	RSCHECK(rs_file_read(path, RS_CHECKPOINT_INDEX_MAX_BYTES, &text, &len, err));
	rs_status st = rs_checkpoint_index_parse(text, len, path, out, err);
	free(text);
	return st;
}

void rs_checkpoint_index_free(rs_ckpt_index *ix)
{
	for (int i = 0; ix->tables && i < ix->ntables; i++) {
		for (int k = 0; ix->tables[i].shards && k < ix->tables[i].nshards; k++)
			free(ix->tables[i].shards[k].file);
		free(ix->tables[i].shards);
		free(ix->tables[i].name);
	}
	free(ix->tables);
	free(ix->dense_file);
	memset(ix, 0, sizeof(*ix));
}

const rs_ckpt_table *rs_checkpoint_index_table(const rs_ckpt_index *ix, const char *name)
{
	for (int i = 0; i < ix->ntables; i++)
		if (!strcmp(ix->tables[i].name, name))
			return &ix->tables[i];
	return NULL;
}
