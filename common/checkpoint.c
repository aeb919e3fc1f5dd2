/*
 * checkpoint.c - see checkpoint.h.
 */
#include "common/checkpoint.h"
#include "common/file.h"
#include "common/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rs_checkpoint_shard_file(const rs_table_config *t, const rs_shard *s, char *buf, size_t n)
{
	snprintf(buf, n, "%s.r%lld.c%d.safetensors", t->name, (long long)s->row_offset, s->col_offset);
}

rs_status rs_checkpoint_write_index(const char *dir, const rs_config *cfg, const rs_plan *plan, int64_t step,
				    size_t dense_params, rs_err *err)
{
	json_t *tables = json_array();
	json_t *root = json_pack("{s:s, s:i, s:I, s:o, s:{s:s, s:I}}", "format", "rowshift-checkpoint", "version", 1,
				 "step", (json_int_t)step, "tables", tables, "dense", "file", "dense.safetensors",
				 "params", (json_int_t)dense_params);
	rs_status st = RS_ENOMEM;
	char path[4096], file[512];
	if (!root)
		return RS_ENOMEM;
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
			if (json_array_append_new(shards, json_pack("{s:s, s:I, s:I, s:i, s:i}", "file", file, "row_offset",
								    (json_int_t)s->row_offset, "rows", (json_int_t)s->rows,
								    "col_offset", s->col_offset, "cols", s->cols)))
				goto out;
		}
	}
	snprintf(path, sizeof(path), "%s/index.json", dir);
	st = rs_file_write_json(path, 0644, root, JSON_INDENT(1), err);
out:
	json_decref(root);
	return st;
}

/* ---- diff ------------------------------------------------------------------------ */

static json_t *load_index(const char *dir, rs_err *err)
{
	char path[4096];
	json_error_t jerr;
	json_t *j;
	snprintf(path, sizeof(path), "%s/index.json", dir);
	if (rs_file_read_json(path, RS_CHECKPOINT_INDEX_MAX_BYTES, &j, err) != RS_OK)
		return NULL;
	const char *format;
	json_int_t version;
	json_t *tables, *dense;
	if (json_unpack_ex(j, &jerr, 0, "{s:s, s:I, s:o, s:o}", "format", &format, "version", &version, "tables",
			   &tables, "dense", &dense) != 0 ||
	    strcmp(format, "rowshift-checkpoint") != 0 || version != 1 || !json_is_array(tables)) {
		rs_err_set(err, RS_EINVAL, "%s: not a rowshift checkpoint index (version 1)", path);
		json_decref(j);
		return NULL;
	}
	return j;
}

rs_status rs_checkpoint_read_index(const char *dir, json_t **index, int64_t *step, rs_err *err)
{
	json_t *j = load_index(dir, err);
	json_t *s = j ? json_object_get(j, "step") : NULL;
	*index = NULL;
	if (!j)
		return RS_EINVAL;
	if (!json_is_integer(s) || json_integer_value(s) < 0) {
		json_decref(j);
		return rs_err_set(err, RS_EINVAL, "%s/index.json: no valid \"step\"", dir);
	}
	*step = json_integer_value(s);
	*index = j;
	return RS_OK;
}

static json_t *find_table(json_t *index, const char *name)
{
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(index, "tables"), i, t)
		if (!strcmp(json_string_value(json_object_get(t, "name")), name))
			return t;
	return NULL;
}

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

/*
 * Assemble tensor `name` of a table into a rows x width array of doubles
 * (width = dim for per-element tensors, 1 for per-row ones, which need
 * whole-width shards). Returns RS_ENOTFOUND when the tensor is absent or the
 * layout does not allow it.
 */
static rs_status assemble(const char *dir, json_t *table, const char *name, int per_row, double **out,
			  rs_st_dtype *dtype, rs_err *err)
{
	json_int_t rows = json_integer_value(json_object_get(table, "rows"));
	json_int_t dim = json_integer_value(json_object_get(table, "dim"));
	int64_t width = per_row ? 1 : dim;
	double *a = calloc((size_t)(rows * width + 1), sizeof(double));
	rs_status st = RS_OK;
	size_t i;
	json_t *s;
	*out = NULL;
	if (!a)
		return RS_ENOMEM;
	json_array_foreach(json_object_get(table, "shards"), i, s) {
		char path[4096];
		json_int_t r0 = json_integer_value(json_object_get(s, "row_offset")),
			   nr = json_integer_value(json_object_get(s, "rows")),
			   c0 = json_integer_value(json_object_get(s, "col_offset")),
			   nc = json_integer_value(json_object_get(s, "cols"));
		if (r0 < 0 || nr < 0 || c0 < 0 || nc < 0 || r0 + nr > rows || c0 + nc > dim) {
			st = rs_err_set(err, RS_EINVAL, "%s: shard %zu of '%s' lies outside the table", dir, i,
					json_string_value(json_object_get(table, "name")));
			break;
		}
		if (per_row && nc != dim) {
			st = RS_ENOTFOUND; /* per-row state of column blocks: not comparable across layouts */
			break;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, json_string_value(json_object_get(s, "file")));
		rs_st_file *f;
		RSCHECKGOTO(rs_st_open(path, &f, err), st, done);
		int k = rs_st_find(f, name);
		if (k < 0) {
			rs_st_close(f);
			st = RS_ENOTFOUND;
			break;
		}
		rs_st_tensor *t = &f->tensors[k];
		int64_t want_cols = per_row ? 1 : nc;
		if (!(t->ndim == (per_row ? 1 : 2) && t->shape[0] == nr && (per_row || t->shape[1] == want_cols))) {
			rs_st_close(f);
			st = rs_err_set(err, RS_EINVAL, "%s: tensor '%s' has the wrong shape for its shard", path, name);
			break;
		}
		void *buf = malloc((size_t)(t->end - t->begin) + 1);
		if (!buf || (st = rs_st_read(f, k, buf, err)) != RS_OK) {
			free(buf);
			rs_st_close(f);
			st = st ? st : RS_ENOMEM;
			break;
		}
		*dtype = t->dtype;
		for (int64_t r = 0; r < nr; r++)
			for (int64_t c = 0; c < want_cols; c++)
				a[(r0 + r) * width + (per_row ? 0 : c0 + c)] = element(buf, t->dtype, (size_t)(r * want_cols + c));
		free(buf);
		rs_st_close(f);
	}
done:
	if (st != RS_OK) {
		free(a);
		return st;
	}
	*out = a;
	return RS_OK;
}

static void compare(const double *a, const double *b, size_t n, double *max_abs, double *max_rel)
{
	double d = 0, m = 0;
	for (size_t i = 0; i < n; i++) {
		d = fmax(d, fabs(a[i] - b[i]));
		m = fmax(m, fabs(a[i]));
	}
	*max_abs = d;
	*max_rel = m > 0 ? d / m : (d > 0 ? INFINITY : 0);
}

rs_status rs_checkpoint_diff(const char *dir_a, const char *dir_b, json_t **out, rs_err *err)
{
	static const struct {
		const char *name;
		int per_row;
	} tensors[] = {{"weight", 0}, {"momentum1", 1}, {"exp_avg", 0}, {"exp_avg_sq", 0}, {"zch_ids", 1}};
	json_t *ia = load_index(dir_a, err), *ib = ia ? load_index(dir_b, err) : NULL;
	json_t *res = json_object(), *tables = json_object();
	rs_status st = RS_EINVAL;
	double all_abs = 0, all_rel = 0;
	size_t i;
	json_t *ta;

	*out = NULL;
	if (!ia || !ib || !res || !tables)
		goto out;
	if (json_array_size(json_object_get(ia, "tables")) != json_array_size(json_object_get(ib, "tables"))) {
		st = rs_err_set(err, RS_EINVAL, "%s and %s hold different numbers of tables", dir_a, dir_b);
		goto out;
	}
	json_array_foreach(json_object_get(ia, "tables"), i, ta) {
		const char *name = json_string_value(json_object_get(ta, "name"));
		json_t *tb = name ? find_table(ib, name) : NULL;
		if (!tb) {
			st = rs_err_set(err, RS_EINVAL, "table '%s' is in %s but not in %s", name ? name : "?", dir_a, dir_b);
			goto out;
		}
		if (!json_equal(json_object_get(ta, "rows"), json_object_get(tb, "rows")) ||
		    !json_equal(json_object_get(ta, "dim"), json_object_get(tb, "dim")) ||
		    !json_equal(json_object_get(ta, "dtype"), json_object_get(tb, "dtype"))) {
			st = rs_err_set(err, RS_EINVAL, "table '%s': shapes or dtypes differ between %s and %s", name, dir_a, dir_b);
			goto out;
		}
		json_t *per = json_object();
		double t_abs = 0, t_rel = 0;
		size_t n = (size_t)(json_integer_value(json_object_get(ta, "rows")));
		for (size_t k = 0; k < sizeof(tensors) / sizeof(tensors[0]); k++) {
			double *a = NULL, *b = NULL, ma, mr;
			rs_st_dtype da = RS_ST_F32, db = RS_ST_F32;
			rs_status sa = assemble(dir_a, ta, tensors[k].name, tensors[k].per_row, &a, &da, err);
			rs_status sb = sa == RS_OK || sa == RS_ENOTFOUND ? assemble(dir_b, tb, tensors[k].name, tensors[k].per_row, &b, &db, err)
									 : sa;
			if ((sa != RS_OK && sa != RS_ENOTFOUND) || (sb != RS_OK && sb != RS_ENOTFOUND)) {
				free(a);
				free(b);
				json_decref(per);
				st = sa != RS_OK && sa != RS_ENOTFOUND ? sa : sb;
				goto out;
			}
			if (!strcmp(tensors[k].name, "weight") && (sa != RS_OK || sb != RS_OK)) {
				free(a);
				free(b);
				json_decref(per);
				st = rs_err_set(err, RS_EINVAL, "table '%s': weights missing", name);
				goto out;
			}
			if (sa == RS_OK && sb == RS_OK) {
				size_t cnt = n * (tensors[k].per_row ? 1 : (size_t)json_integer_value(json_object_get(ta, "dim")));
				compare(a, b, cnt, &ma, &mr);
				json_object_set_new(per, tensors[k].name, json_pack("{s:f, s:f}", "max_abs", ma, "max_rel", mr));
				t_abs = fmax(t_abs, ma);
				t_rel = fmax(t_rel, mr);
			}
			free(a);
			free(b);
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
			snprintf(path, sizeof(path), "%s/dense.safetensors", dirs[k]);
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
			st = rs_err_set(err, RS_EINVAL, "the dense parameters of %s and %s are missing or differ in size", dir_a, dir_b);
			goto out;
		}
		compare(d[0], d[1], cnt[0], &ma, &mr);
		free(d[0]);
		free(d[1]);
		json_object_set_new(tables, "(dense)", json_pack("{s:f, s:f}", "max_abs", ma, "max_rel", mr));
		all_abs = fmax(all_abs, ma);
		all_rel = fmax(all_rel, mr);
	}
	json_object_set_new(res, "max_abs", json_real(all_abs));
	json_object_set_new(res, "max_rel", json_real(all_rel));
	json_object_set(res, "tables", tables);
	*out = res;
	res = NULL;
	st = RS_OK;
out:
	json_decref(tables);
	json_decref(res);
	json_decref(ia);
	json_decref(ib);
	return st;
}
