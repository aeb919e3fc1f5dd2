/*
 * checkpoint_export.c - a sharded checkpoint as one safetensors file, for
 * PyTorch users (rs_checkpoint_export in checkpoint.h).
 */
#include "common/checkpoint.h"
#include "common/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tensor of every shard file, by its name in the shard files, and how it exports. */
static const struct {
	const char *name;       /* in the shard files */
	const char *suffix;     /* of the exported name */
	int per_row;            /* [rows] (else [rows, cols]) */
} tensors[] = {
	{"weight", "weight", 0},
	{"momentum1", "weight.momentum1", 1},
	{"exp_avg", "weight.exp_avg", 0},
	{"exp_avg_sq", "weight.exp_avg_sq", 0},
	{"zch_ids", "zch_ids", 1},
};

/*
 * Tensor `name` of table t, in global row order, into *out (its dtype in
 * *dtype): [rows, dim], or [rows] for a per-row one (which needs whole-width
 * shards). RS_ENOTFOUND when the shards lack it or the layout cannot give it.
 */
static rs_status gather(const char *dir, const rs_ckpt_table *t, const char *name, int per_row, void **out,
			rs_st_dtype *dtype, rs_err *err)
{
	int64_t width = per_row ? 1 : t->dim;
	unsigned char *a = NULL;
	size_t es = 0;
	rs_status st = RS_OK;
	*out = NULL;
	for (int i = 0; i < t->nshards && st == RS_OK; i++) {
		const rs_ckpt_shard *s = &t->shards[i];
		char path[4096];
		rs_st_file *f = NULL;
		unsigned char *buf = NULL;
		if (per_row && s->cols != t->dim) {
			st = RS_ENOTFOUND; /* per-row state of column blocks: one per block, no single [rows] vector */
			break;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, s->file);
		RSCHECKGOTO(rs_st_open(path, &f, err), st, next);
		int k = rs_st_find(f, name);
		if (k < 0) {
			st = RS_ENOTFOUND;
			goto next;
		}
		const rs_st_tensor *ti = &f->tensors[k];
		int64_t cols = per_row ? 1 : s->cols;
		if (!a) {
			*dtype = ti->dtype;
			es = (size_t)rs_st_dtype_size(ti->dtype);
			RSALLOCGOTO(a = calloc((size_t)(t->rows * width) + 1, es), st, next);
		}
		if (ti->dtype != *dtype || ti->ndim != (per_row ? 1 : 2) || ti->shape[0] != s->rows ||
		    (!per_row && ti->shape[1] != cols))
			RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "%s: tensor '%s' is not [%lld%s] in the table's dtype", path,
						  name, (long long)s->rows, per_row ? "" : ", cols"), next);
		RSALLOCGOTO(buf = malloc((size_t)(s->rows * cols) * es + 1), st, next);
		RSCHECKGOTO(rs_st_read(f, k, buf, err), st, next);
		for (int64_t r = 0; r < s->rows; r++)
			memcpy(a + ((size_t)(s->row_offset + r) * (size_t)width + (per_row ? 0 : (size_t)s->col_offset)) * es,
			       buf + (size_t)(r * cols) * es, (size_t)cols * es);
	next:
		free(buf);
		rs_st_close(f);
	}
	if (st != RS_OK) {
		free(a);
		return st == RS_ENOMEM ? rs_err_set(err, st, "%s: table '%s': out of memory", dir, t->name) : st;
	}
	*out = a;
	return RS_OK;
}

rs_status rs_checkpoint_export(const char *dir, const char *out_path, rs_ckpt_export_report *rep, rs_err *err)
{
	rs_ckpt_index ix;
	size_t per = sizeof(tensors) / sizeof(tensors[0]), cap;
	RSCHECK(rs_checkpoint_index_read(dir, &ix, err));
	rs_status st = rs_checkpoint_verify(dir, &ix, err);
	cap = (size_t)ix.ntables * per + 1;
	rs_st_tensor_in *t = calloc(cap, sizeof(*t));
	char **names = calloc(cap, sizeof(*names));
	int n = 0;
	memset(rep, 0, sizeof(*rep));
	if (st == RS_OK && (!t || !names))
		st = rs_err_set(err, RS_ENOMEM, "export: out of memory");
	for (int i = 0; st == RS_OK && i < ix.ntables; i++) {
		const rs_ckpt_table *tb = &ix.tables[i];
		for (size_t k = 0; st == RS_OK && k < per; k++) {
			void *data;
			rs_st_dtype dt = RS_ST_F32;
			st = gather(dir, tb, tensors[k].name, tensors[k].per_row, &data, &dt, err);
			if (st == RS_ENOTFOUND) {
				st = RS_OK;
				if (!strcmp(tensors[k].name, "momentum1") && tb->optimizer == RS_OPT_ROWWISE_ADAGRAD)
					rep->skipped++; /* column-wise blocks each keep their own */
				continue;
			}
			if (st != RS_OK)
				break;
			size_t len = strlen(tb->name) + 40;
			if (!(names[n] = malloc(len))) {
				free(data);
				st = rs_err_set(err, RS_ENOMEM, "export: out of memory");
				break;
			}
			snprintf(names[n], len, "embedding_bags.%s.%s", tb->name, tensors[k].suffix);
			t[n] = (rs_st_tensor_in){names[n], dt, tensors[k].per_row ? 1 : 2, {tb->rows, tensors[k].per_row ? 0 : tb->dim},
						 data};
			n++;
		}
	}
	rs_st_file *df = NULL;
	void *dense = NULL;
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, ix.dense_file);
	if (st == RS_OK && (st = rs_st_open(path, &df, err)) == RS_OK) {
		int k = rs_st_find(df, "params");
		if (k < 0 || df->tensors[k].dtype != RS_ST_F32 || df->tensors[k].ndim != 1 ||
		    df->tensors[k].shape[0] != ix.dense_params)
			st = rs_err_set(err, RS_EINVAL, "%s: no tensor 'params' of F32 [%lld]", path, (long long)ix.dense_params);
		else if (!(dense = malloc(sizeof(float) * (size_t)ix.dense_params + 1)))
			st = rs_err_set(err, RS_ENOMEM, "export: out of memory");
		else if ((st = rs_st_read(df, k, dense, err)) == RS_OK)
			t[n++] = (rs_st_tensor_in){"dense.params", RS_ST_F32, 1, {ix.dense_params}, dense};
		rs_st_close(df);
	}
	if (st == RS_OK) {
		char step[32];
		snprintf(step, sizeof(step), "%lld", (long long)ix.step);
		json_t *meta = json_pack("{s:s, s:s}", "format", "rowshift-export", "step", step);
		st = meta ? rs_st_write(out_path, t, n, meta, err) : rs_err_set(err, RS_ENOMEM, "export: out of memory");
		json_decref(meta);
		rep->tensors = n;
		rep->tables = ix.ntables;
		rep->step = ix.step;
	}
	for (int i = 0; i < n; i++)
		if (t[i].data != dense)
			free((void *)t[i].data);
	for (size_t i = 0; names && i < cap; i++)
		free(names[i]);
	free(names);
	free(t);
	free(dense);
	rs_checkpoint_index_free(&ix);
	return st;
}
