/*
 * config.c - loads and validates the model config (see config.h and the
 * README's "Model config" for every key and default).
 *
 * Every check names the file, the table (by name and index) and the field,
 * and reports the first problem found. Each object's keys are checked
 * against its schema, so a typo ("pooling_facter") is an error rather than a
 * silently ignored setting.
 */
#include "common/config.h"
#include "common/crc32c.h"
#include "common/file.h"
#include "common/limits.h"
#include "common/param.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROWS ((int64_t)1 << 40)
#define MAX_DIM 65536
#define MAX_MLP_WIDTH 65536
#define MAX_MLP_LAYERS 64

/* Where a value sits, for messages: "FILE: table 'ads' (tables[2]): field 'dim'". */
typedef struct where {
	const char *file;
	const char *table;  /* NULL outside a table */
	int index;
	const char *section; /* "optimizer", "zch", ... or NULL */
} where;

static rs_status bad(rs_err *err, const where *w, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static rs_status bad(rs_err *err, const where *w, const char *field, const char *fmt, ...)
{
	char what[RS_ERR_MAX], loc[RS_ERR_MAX / 2] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	size_t n = 0;
	if (w->table)
		n += (size_t)snprintf(loc + n, sizeof(loc) - n, "table '%s' (tables[%d]): ", w->table, w->index);
	else if (w->index >= 0)
		n += (size_t)snprintf(loc + n, sizeof(loc) - n, "tables[%d]: ", w->index);
	if (field && n < sizeof(loc))
		snprintf(loc + n, sizeof(loc) - n, "field '%s%s%s': ", w->section ? w->section : "",
			 w->section ? "." : "", field);
	return rs_err_set(err, RS_EINVAL, "%s: %s%s", w->file, loc, what);
}

/* Reject keys outside `allowed` (NULL-terminated). */
static rs_status check_keys(const json_t *obj, const char *const *allowed, const where *w, rs_err *err)
{
	const char *key;
	json_t *val;
	json_object_foreach((json_t *)obj, key, val) {
		int ok = 0;
		for (const char *const *a = allowed; *a && !ok; a++)
			ok = !strcmp(*a, key);
		if (!ok)
			return bad(err, w, NULL, "unknown key '%s'%s%s", key, w->section ? " in " : "",
				   w->section ? w->section : "");
	}
	return RS_OK;
}

static rs_status get_int(const json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
			 int required, const where *w, rs_err *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return required ? bad(err, w, key, "missing (required)") : RS_OK;
	if (!json_is_integer(v))
		return bad(err, w, key, "must be an integer");
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return bad(err, w, key, "must be in [%lld, %lld], got %lld", (long long)lo, (long long)hi,
			   (long long)x);
	*out = x;
	return RS_OK;
}

/* A number in (lo, hi] when open_lo, else [lo, hi]. */
static rs_status get_num(const json_t *obj, const char *key, double lo, double hi, int open_lo,
			 double *out, const where *w, rs_err *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return RS_OK;
	if (!json_is_number(v))
		return bad(err, w, key, "must be a number");
	double x = json_number_value(v);
	if (!(open_lo ? x > lo : x >= lo) || !(x <= hi) || !isfinite(x))
		return bad(err, w, key, "must be in %s%g, %g], got %g", open_lo ? "(" : "[", lo, hi, x);
	*out = x;
	return RS_OK;
}

/* A string from `names` (NULL-terminated); *out = its index. */
static rs_status get_enum(const json_t *obj, const char *key, const char *const *names, int *out,
			  const where *w, rs_err *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return RS_OK;
	if (json_is_string(v))
		for (int i = 0; names[i]; i++)
			if (!strcmp(names[i], json_string_value(v))) {
				*out = i;
				return RS_OK;
			}
	char list[256] = "";
	size_t n = 0;
	for (int i = 0; names[i] && n < sizeof(list); i++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i ? "|" : "", names[i]);
	return bad(err, w, key, "must be one of %s", list);
}

static rs_status get_object(const json_t *obj, const char *key, json_t **out, const where *w, rs_err *err)
{
	json_t *v = json_object_get(obj, key);
	*out = NULL;
	if (!v)
		return RS_OK;
	if (!json_is_object(v))
		return bad(err, w, key, "must be an object");
	*out = v;
	return RS_OK;
}

static rs_status dup_str(const char *s, char **out)
{
	*out = strdup(s);
	return *out ? RS_OK : RS_ENOMEM;
}

/* A non-empty array of non-empty strings. */
static rs_status get_strings(const json_t *obj, const char *key, char ***out, int *n, int required,
			     const where *w, rs_err *err)
{
	json_t *v = json_object_get(obj, key), *e;
	size_t i;
	if (!v)
		return required ? bad(err, w, key, "missing (required)") : RS_OK;
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 4096)
		return bad(err, w, key, "must be a non-empty array of strings");
	*out = calloc(json_array_size(v), sizeof(char *));
	if (!*out)
		return RS_ENOMEM;
	json_array_foreach(v, i, e) {
		if (!json_is_string(e) || json_string_length(e) == 0)
			return bad(err, w, key, "entry %zu must be a non-empty string", i);
		RSCHECK(dup_str(json_string_value(e), &(*out)[i]));
		*n = (int)i + 1;
	}
	return RS_OK;
}

static rs_status get_widths(const json_t *obj, const char *key, int32_t **out, int *n, const where *w,
			    rs_err *err)
{
	json_t *v = json_object_get(obj, key), *e;
	size_t i;
	if (!v)
		return RS_OK;
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > MAX_MLP_LAYERS)
		return bad(err, w, key, "must be an array of 1..%d layer widths", MAX_MLP_LAYERS);
	free(*out);
	*out = calloc(json_array_size(v), sizeof(int32_t));
	*n = 0;
	if (!*out)
		return RS_ENOMEM;
	json_array_foreach(v, i, e) {
		if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > MAX_MLP_WIDTH)
			return bad(err, w, key, "entry %zu must be an integer in [1, %d]", i, MAX_MLP_WIDTH);
		(*out)[i] = (int32_t)json_integer_value(e);
		*n = (int)i + 1;
	}
	return RS_OK;
}

/* ---- tables ------------------------------------------------------------------ */

static const char *const sharding_names[] = {"auto", "table_wise", "row_wise", "column_wise",
					     "table_row_wise", "grid", "data_parallel", NULL};
static const char *const dtype_names[] = {"fp32", "fp16", "bf16", NULL};
static const char *const pooling_names[] = {"sum", "mean", NULL};
static const char *const optimizer_names[] = {"sgd", "rowwise_adagrad", "adam", NULL};
static const char *const eviction_names[] = {"lru", "lfu", NULL};

static rs_status parse_zch(const json_t *jz, rs_table_config *t, where *w, rs_err *err)
{
	static const char *const keys[] = {"buckets", "slots", "eviction", "lfu_decay_steps", NULL};
	int64_t v;
	int e = RS_EVICT_LRU;

	w->section = "zch";
	if (!json_is_object(jz))
		return bad(err, w, NULL, "must be an object");
	RSCHECK(check_keys(jz, keys, w, err));
	t->has_zch = true;
	t->zch = (rs_zch_config){.buckets = 768, .eviction = RS_EVICT_LRU, .lfu_decay_steps = 1000};
	v = 768;
	RSCHECK(get_int(jz, "buckets", 1, 1 << 24, &v, 0, w, err));
	t->zch.buckets = (uint32_t)v;
	RSCHECK(get_int(jz, "slots", 1, MAX_ROWS, &v, 1, w, err));
	t->zch.slots = (uint64_t)v;
	if (t->zch.slots % t->zch.buckets != 0)
		return bad(err, w, "slots", "must be a multiple of buckets (%u), got %llu", t->zch.buckets,
			   (unsigned long long)t->zch.slots);
	RSCHECK(get_enum(jz, "eviction", eviction_names, &e, w, err));
	t->zch.eviction = (rs_eviction)e;
	v = 1000;
	RSCHECK(get_int(jz, "lfu_decay_steps", 1, INT32_MAX, &v, 0, w, err));
	t->zch.lfu_decay_steps = (uint32_t)v;
	w->section = NULL;
	return RS_OK;
}

static rs_status parse_table(const json_t *jt, int index, rs_table_config *t, const char *file,
			     rs_err *err)
{
	static const char *const keys[] = {"name", "rows", "dim", "features", "pooling", "pooling_factor",
					   "dtype", "sharding", "rank", "colocate", "zch", NULL};
	where w = {.file = file, .index = index};
	json_t *name = json_object_get(jt, "name"), *jz, *colo;
	int64_t v;
	int e;

	t->rank = -1;
	t->pooling_factor = 1.0;
	if (!json_is_object(jt))
		return bad(err, &w, NULL, "a table must be an object");
	if (!name)
		return bad(err, &w, "name", "missing (required)");
	if (!json_is_string(name) || !rs_config_name_ok(json_string_value(name)))
		return bad(err, &w, "name", "must be 1..200 letters, digits, '_', '-' or '.', not starting with '.' "
					    "(it names the table's checkpoint files)");
	RSCHECK(dup_str(json_string_value(name), &t->name));
	w.table = t->name;
	RSCHECK(check_keys(jt, keys, &w, err));

	jz = json_object_get(jt, "zch");
	if (jz)
		RSCHECK(parse_zch(jz, t, &w, err));
	if (json_object_get(jt, "rows")) {
		RSCHECK(get_int(jt, "rows", 1, MAX_ROWS, &t->rows, 1, &w, err));
		if (t->has_zch && (uint64_t)t->rows != t->zch.slots)
			return bad(err, &w, "rows", "must equal zch.slots (%llu) for a ZCH table, got %lld",
				   (unsigned long long)t->zch.slots, (long long)t->rows);
	} else if (t->has_zch) {
		t->rows = (int64_t)t->zch.slots;
	} else {
		return bad(err, &w, "rows", "missing (required)");
	}
	RSCHECK(get_int(jt, "dim", 1, MAX_DIM, &v, 1, &w, err));
	t->dim = (int32_t)v;
	RSCHECK(get_strings(jt, "features", &t->features, &t->nfeatures, 1, &w, err));
	e = RS_POOL_SUM;
	RSCHECK(get_enum(jt, "pooling", pooling_names, &e, &w, err));
	t->pooling = (rs_pooling)e;
	RSCHECK(get_num(jt, "pooling_factor", 0, 1e6, 1, &t->pooling_factor, &w, err));
	e = RS_DTYPE_FP32;
	RSCHECK(get_enum(jt, "dtype", dtype_names, &e, &w, err));
	t->dtype = (rs_dtype)e;
	e = RS_SHARD_AUTO;
	RSCHECK(get_enum(jt, "sharding", sharding_names, &e, &w, err));
	t->sharding = (rs_sharding)e;
	if (json_object_get(jt, "rank")) {
		RSCHECK(get_int(jt, "rank", 0, 65535, &v, 1, &w, err));
		t->rank = (int32_t)v;
	}
	colo = json_object_get(jt, "colocate");
	if (colo) {
		if (!json_is_string(colo) || json_string_length(colo) == 0)
			return bad(err, &w, "colocate", "must be a non-empty group name");
		RSCHECK(dup_str(json_string_value(colo), &t->colocate));
	}

	if ((t->sharding == RS_SHARD_CW || t->sharding == RS_SHARD_GRID) && t->dim % 4 != 0)
		return bad(err, &w, "dim", "must be a multiple of 4 for %s sharding, got %d",
			   sharding_names[t->sharding], t->dim);
	if (t->rank >= 0 && t->sharding != RS_SHARD_AUTO && t->sharding != RS_SHARD_TW &&
	    t->sharding != RS_SHARD_CW)
		return bad(err, &w, "rank", "a pin needs sharding auto, table_wise or column_wise, not %s",
			   sharding_names[t->sharding]);
	if (t->colocate && t->sharding != RS_SHARD_AUTO && t->sharding != RS_SHARD_TW)
		return bad(err, &w, "colocate", "co-located tables share one rank: sharding must be auto or table_wise, not %s",
			   sharding_names[t->sharding]);
	if (t->has_zch && t->sharding != RS_SHARD_AUTO && t->sharding != RS_SHARD_TW &&
	    t->sharding != RS_SHARD_RW)
		return bad(err, &w, "sharding", "a ZCH table is sharded by whole buckets: auto, table_wise or row_wise, not %s",
			   sharding_names[t->sharding]);
	return RS_OK;
}

/* One name of the config (a table's, a feature's or a group's) and where it stands, for sorting. */
typedef struct name_ref {
	const char *name;
	int table, item;
} name_ref;

static int cmp_name_ref(const void *x, const void *y)
{
	const name_ref *a = x, *b = y;
	int c = strcmp(a->name, b->name);
	return c ? c : a->table != b->table ? a->table - b->table : a->item - b->item;
}

/*
 * Names unique across tables, features unique across all tables, pins
 * agree within co-location groups: each by sorting, so a config of a
 * million tables is checked in O(n log n). The conflict reported is the one
 * whose later table comes first in the file.
 */
static rs_status check_tables(const rs_config *cfg, rs_err *err)
{
	where w = {.file = cfg->path, .index = -1};
	size_t nf = 0, k = 0;
	int bad_i = cfg->ntables, bad_j = -1, kind = 0, bad_f = -1;
	for (int i = 0; i < cfg->ntables; i++)
		nf += (size_t)cfg->tables[i].nfeatures;
	name_ref *names = malloc(sizeof(name_ref) * ((size_t)cfg->ntables + nf + 1));
	if (!names)
		return RS_ENOMEM;
	/* 1. table names */
	for (int i = 0; i < cfg->ntables; i++)
		names[i] = (name_ref){cfg->tables[i].name, i, 0};
	qsort(names, (size_t)cfg->ntables, sizeof(*names), cmp_name_ref);
	for (int i = 1; i < cfg->ntables; i++)
		if (!strcmp(names[i].name, names[i - 1].name) && names[i].table < bad_i)
			bad_i = names[i].table, bad_j = names[i - 1].table, kind = 1;
	/* 2. features, across and within tables */
	for (int i = 0; i < cfg->ntables; i++)
		for (int f = 0; f < cfg->tables[i].nfeatures; f++)
			names[k++] = (name_ref){cfg->tables[i].features[f], i, f};
	qsort(names, nf, sizeof(*names), cmp_name_ref);
	for (size_t q = 1; q < nf; q++)
		if (!strcmp(names[q].name, names[q - 1].name) && names[q].table < bad_i)
			bad_i = names[q].table, bad_j = names[q - 1].table, bad_f = names[q].item,
			kind = names[q].table == names[q - 1].table ? 3 : 2;
	/* 3. pins within co-location groups: every pinned table of a group on its first pin's rank */
	k = 0;
	for (int i = 0; i < cfg->ntables; i++)
		if (cfg->tables[i].colocate && cfg->tables[i].rank >= 0)
			names[k++] = (name_ref){cfg->tables[i].colocate, i, 0};
	qsort(names, k, sizeof(*names), cmp_name_ref);
	for (size_t q = 1; q < k; q++)
		if (!strcmp(names[q].name, names[q - 1].name) &&
		    cfg->tables[names[q].table].rank != cfg->tables[names[q - 1].table].rank) {
			size_t first = q - 1;
			while (first > 0 && !strcmp(names[first - 1].name, names[q].name))
				first--;
			if (names[q].table < bad_i)
				bad_i = names[q].table, bad_j = names[first].table, kind = 4;
		}
	free(names);
	if (kind == 0)
		return RS_OK;
	const rs_table_config *a = &cfg->tables[bad_i], *b = &cfg->tables[bad_j];
	w.table = a->name;
	w.index = bad_i;
	switch (kind) {
	case 1:
		return bad(err, &w, "name", "duplicate table name (also tables[%d])", bad_j);
	case 2:
		return bad(err, &w, "features", "feature '%s' is also in table '%s'", a->features[bad_f], b->name);
	case 3:
		return bad(err, &w, "features", "feature '%s' is listed twice", a->features[bad_f]);
	default:
		return bad(err, &w, "rank", "pinned to rank %d but table '%s' of co-location group '%s' is pinned to rank %d",
			   a->rank, b->name, a->colocate, b->rank);
	}
}

/* ---- sections ------------------------------------------------------------------ */

static rs_status parse_optimizer(const json_t *root, rs_config *cfg, rs_err *err)
{
	static const char *const keys[] = {"type", "lr", "eps", "beta1", "beta2", NULL};
	where w = {.file = cfg->path, .index = -1, .section = "optimizer"};
	rs_optimizer_config *o = &cfg->optimizer;
	json_t *j;
	double x;
	int e = RS_OPT_ROWWISE_ADAGRAD;

	*o = (rs_optimizer_config){RS_OPT_ROWWISE_ADAGRAD, 0.05f, 1e-8f, 0.9f, 0.999f};
	RSCHECK(get_object(root, "optimizer", &j, &w, err));
	if (!j)
		return RS_OK;
	RSCHECK(check_keys(j, keys, &w, err));
	RSCHECK(get_enum(j, "type", optimizer_names, &e, &w, err));
	o->kind = (rs_optimizer)e;
	x = o->lr;
	RSCHECK(get_num(j, "lr", 0, 1e6, 1, &x, &w, err));
	o->lr = (float)x;
	x = o->eps;
	RSCHECK(get_num(j, "eps", 0, 1, 1, &x, &w, err));
	o->eps = (float)x;
	x = o->beta1;
	RSCHECK(get_num(j, "beta1", 0, 0.999999, 0, &x, &w, err));
	o->beta1 = (float)x;
	x = o->beta2;
	RSCHECK(get_num(j, "beta2", 0, 0.999999, 0, &x, &w, err));
	o->beta2 = (float)x;
	return RS_OK;
}

static rs_status parse_dense(const json_t *root, rs_config *cfg, rs_err *err)
{
	static const char *const keys[] = {"bottom_mlp", "top_mlp", "interaction", "lr", NULL};
	static const char *const inter_names[] = {"auto", "dot", "cat", NULL};
	where w = {.file = cfg->path, .index = -1, .section = "dense"};
	rs_dense_config *d = &cfg->dense;
	json_t *j;
	double x = 0.05;
	int e = RS_INTERACTION_AUTO;

	/* defaults: bottom {64, D} with D the shared table dim (16 if dims differ), top {64, 32} */
	int32_t shared = cfg->tables[0].dim;
	for (int i = 1; i < cfg->ntables; i++)
		if (cfg->tables[i].dim != shared)
			shared = 16;
	d->bottom_mlp = malloc(2 * sizeof(int32_t));
	d->top_mlp = malloc(2 * sizeof(int32_t));
	if (!d->bottom_mlp || !d->top_mlp)
		return RS_ENOMEM;
	d->bottom_mlp[0] = 64, d->bottom_mlp[1] = shared, d->nbottom = 2;
	d->top_mlp[0] = 64, d->top_mlp[1] = 32, d->ntop = 2;
	d->lr = 0.05f;
	RSCHECK(get_object(root, "dense", &j, &w, err));
	if (j) {
		RSCHECK(check_keys(j, keys, &w, err));
		RSCHECK(get_widths(j, "bottom_mlp", &d->bottom_mlp, &d->nbottom, &w, err));
		RSCHECK(get_widths(j, "top_mlp", &d->top_mlp, &d->ntop, &w, err));
		RSCHECK(get_enum(j, "interaction", inter_names, &e, &w, err));
		RSCHECK(get_num(j, "lr", 0, 1e6, 1, &x, &w, err));
	}
	d->interaction = (rs_interaction)e;
	d->lr = (float)x;
	if (d->interaction == RS_INTERACTION_DOT) {
		int32_t out = d->bottom_mlp[d->nbottom - 1];
		for (int i = 0; i < cfg->ntables; i++)
			if (cfg->tables[i].dim != out) {
				where wt = {.file = cfg->path, .table = cfg->tables[i].name, .index = i};
				return bad(err, &wt, "dim",
					   "interaction 'dot' needs every table dim to equal the bottom MLP output (%d), got %d",
					   out, cfg->tables[i].dim);
			}
	}
	return RS_OK;
}

static rs_status parse_data(const json_t *root, rs_config *cfg, rs_err *err)
{
	static const char *const keys[] = {"source", "paths", "seed", "zipf_alpha", "eval_samples",
					   "eval_every", NULL};
	static const char *const sources[] = {"synthetic", "criteo", NULL};
	where w = {.file = cfg->path, .index = -1, .section = "data"};
	rs_data_config *d = &cfg->data;
	json_t *j;
	int64_t v;
	int e = RS_DATA_SYNTHETIC;

	*d = (rs_data_config){.kind = RS_DATA_SYNTHETIC, .seed = 1, .zipf_alpha = 1.05,
			      .eval_samples = 16384, .eval_every = 50};
	RSCHECK(get_object(root, "data", &j, &w, err));
	if (!j)
		return RS_OK;
	RSCHECK(check_keys(j, keys, &w, err));
	RSCHECK(get_enum(j, "source", sources, &e, &w, err));
	d->kind = (rs_data_kind)e;
	if (d->kind == RS_DATA_CRITEO)
		RSCHECK(get_strings(j, "paths", &d->paths, &d->npaths, 1, &w, err));
	else if (json_object_get(j, "paths"))
		return bad(err, &w, "paths", "only for source 'criteo'");
	v = (int64_t)d->seed;
	RSCHECK(get_int(j, "seed", 0, INT64_MAX, &v, 0, &w, err));
	d->seed = (uint64_t)v;
	RSCHECK(get_num(j, "zipf_alpha", 0, 100, 1, &d->zipf_alpha, &w, err));
	RSCHECK(get_int(j, "eval_samples", 0, (int64_t)1 << 32, &d->eval_samples, 0, &w, err));
	RSCHECK(get_int(j, "eval_every", 1, INT32_MAX, &d->eval_every, 0, &w, err));
	return RS_OK;
}

static rs_status parse_train(const json_t *root, rs_config *cfg, rs_err *err)
{
	static const char *const keys[] = {"global_batch", "steps", "seed", "deterministic", "micro_batch", "min_step_ms",
					   NULL};
	where w = {.file = cfg->path, .index = -1, .section = "train"};
	rs_train_config *t = &cfg->train;
	json_t *j;
	int64_t v;

	*t = (rs_train_config){.global_batch = 1024, .steps = 200, .seed = 42, .deterministic = 1, .micro_batch = 32}; /* without a train section */
	RSCHECK(get_object(root, "train", &j, &w, err));
	if (!j)
		return RS_OK;
	RSCHECK(check_keys(j, keys, &w, err));
	RSCHECK(get_int(j, "global_batch", 1, RS_MAX_GLOBAL_BATCH, &t->global_batch, 0, &w, err));
	RSCHECK(get_int(j, "steps", 0, INT64_MAX / 2, &t->steps, 0, &w, err));
	RSCHECK(get_int(j, "min_step_ms", 0, 10000, &t->min_step_ms, 0, &w, err));
	v = (int64_t)t->seed;
	RSCHECK(get_int(j, "seed", 0, INT64_MAX, &v, 0, &w, err));
	t->seed = (uint64_t)v;
	json_t *d = json_object_get(j, "deterministic");
	if (d && !json_is_boolean(d))
		return bad(err, &w, "deterministic", "must be true or false");
	t->deterministic = !d || json_is_true(d);
	t->micro_batch = 0;
	for (int64_t m = 32; m >= 1 && !t->micro_batch; m--)
		if (t->global_batch % m == 0)
			t->micro_batch = m;
	int given = json_object_get(j, "micro_batch") != NULL;
	RSCHECK(get_int(j, "micro_batch", 1, t->global_batch, &t->micro_batch, 0, &w, err));
	if (!t->deterministic && !given)
		return RS_OK;
	if (t->global_batch % t->micro_batch)
		return bad(err, &w, "micro_batch", "must divide global_batch (%lld), got %lld", (long long)t->global_batch,
			   (long long)t->micro_batch);
	if (!given && t->micro_batch < 8 && t->micro_batch < t->global_batch)
		/* micro-batches of 1-7 samples: a dense pass each, and as many kept gradients */
		return bad(err, &w, "micro_batch", "global_batch %lld has no divisor from 8 to 32 for deterministic training's "
			   "micro-batches: set train.micro_batch, or \"deterministic\": false", (long long)t->global_batch);
	return RS_OK;
}

static rs_status parse_cluster(const json_t *root, rs_config *cfg, rs_err *err)
{
	static const char *const keys[] = {"ranks_per_node", "memory_per_rank", "sharding_group", "replica_sync", "recovery",
					   "precopy", "precopy_share", NULL};
	static const char *const sync_keys[] = {"every", NULL};
	where w = {.file = cfg->path, .index = -1, .section = "cluster"};
	rs_cluster_config *c = &cfg->cluster;
	json_t *j, *m, *rs;
	int64_t v = 8;

	*c = (rs_cluster_config){.ranks_per_node = 8, .memory_per_rank = 16ull << 30, .precopy = RS_PRECOPY_DEFAULT,
				 .precopy_share = RS_PRECOPY_SHARE_DEFAULT};
	RSCHECK(get_object(root, "cluster", &j, &w, err));
	if (!j)
		return RS_OK;
	RSCHECK(check_keys(j, keys, &w, err));
	if ((m = json_object_get(j, "precopy")) && !json_is_boolean(m))
		return bad(err, &w, "precopy", "must be true or false");
	c->precopy = m ? json_is_true(m) : RS_PRECOPY_DEFAULT;
	RSCHECK(get_num(j, "precopy_share", 0, 1, 1, &c->precopy_share, &w, err));
	RSCHECK(get_int(j, "ranks_per_node", 1, 65536, &v, 0, &w, err));
	c->ranks_per_node = (int32_t)v;
	m = json_object_get(j, "memory_per_rank");
	if (json_is_integer(m) && json_integer_value(m) > 0)
		c->memory_per_rank = (uint64_t)json_integer_value(m);
	else if (m && !(json_is_string(m) && rs_parse_bytes(json_string_value(m), &c->memory_per_rank) == RS_OK &&
			c->memory_per_rank > 0))
		return bad(err, &w, "memory_per_rank",
			   "must be a positive byte count or a size such as \"16GiB\", \"512MiB\", \"80GB\"");
	v = 0;
	RSCHECK(get_int(j, "sharding_group", 1, RS_MAX_RANKS, &v, 0, &w, err));
	c->sharding_group = (int32_t)v;
	if ((m = json_object_get(j, "recovery"))) {
		const char *mode = json_string_value(m); /* NULL unless a string */
		if (!mode || (strcmp(mode, "rollback") != 0 && strcmp(mode, "partial") != 0))
			return bad(err, &w, "recovery", "must be \"rollback\" or \"partial\"");
		c->partial_recovery = strcmp(mode, "partial") == 0;
	}
	rs = json_object_get(j, "replica_sync");
	if (json_is_string(rs) && strcmp(json_string_value(rs), "exact") == 0)
		return RS_OK;
	if (!json_is_object(rs)) {
		if (!rs)
			return RS_OK;
		return bad(err, &w, "replica_sync", "must be \"exact\" or {\"every\": K}");
	}
	where ws = {.file = cfg->path, .index = -1, .section = "cluster.replica_sync"};
	RSCHECK(check_keys(rs, sync_keys, &ws, err));
	RSCHECK(get_int(rs, "every", 1, 1000000, &v, 1, &ws, err));
	c->replica_sync_every = (int32_t)v;
	return RS_OK;
}

/* ---- entry points ---------------------------------------------------------------- */

rs_status rs_config_parse(const char *buf, size_t len, const char *name, rs_config **out, rs_err *err)
{
	static const char *const keys[] = {"tables", "optimizer", "dense", "data", "train", "cluster", NULL};
	json_error_t jerr;
	json_t *root, *tables, *jt;
	rs_config *cfg;
	rs_status st;
	size_t i;

	*out = NULL;
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (len == 0)
			return rs_err_set(err, RS_EINVAL, "%s: the file is empty", name);
		return rs_err_set(err, RS_EINVAL, "%s:%d:%d: %s", name, jerr.line, jerr.column, jerr.text);
	}
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg || !(cfg->path = strdup(name))) {
		st = RS_ENOMEM;
		goto fail;
	}
	where w = {.file = name, .index = -1};
	if (!json_is_object(root)) {
		st = bad(err, &w, NULL, "the config must be a JSON object");
		goto fail;
	}
	RSCHECKGOTO(check_keys(root, keys, &w, err), st, fail);
	tables = json_object_get(root, "tables");
	if (!json_is_array(tables) || json_array_size(tables) == 0 || json_array_size(tables) > 1000000) {
		st = bad(err, &w, "tables", "%s", tables ? "must be a non-empty array of tables" : "missing (required)");
		goto fail;
	}
	cfg->tables = calloc(json_array_size(tables), sizeof(rs_table_config));
	if (!cfg->tables) {
		st = RS_ENOMEM;
		goto fail;
	}
	json_array_foreach(tables, i, jt) {
		cfg->ntables = (int)i + 1;
		RSCHECKGOTO(parse_table(jt, (int)i, &cfg->tables[i], name, err), st, fail);
	}
	RSCHECKGOTO(check_tables(cfg, err), st, fail);
	RSCHECKGOTO(parse_optimizer(root, cfg, err), st, fail);
	RSCHECKGOTO(parse_dense(root, cfg, err), st, fail);
	RSCHECKGOTO(parse_data(root, cfg, err), st, fail);
	RSCHECKGOTO(parse_train(root, cfg, err), st, fail);
	RSCHECKGOTO(parse_cluster(root, cfg, err), st, fail);
	json_decref(root);
	*out = cfg;
	return RS_OK;
fail:
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "%s: out of memory", name);
	json_decref(root);
	rs_config_free(cfg);
	return st;
}

rs_status rs_config_load(const char *path, rs_config **out, rs_err *err)
{
	char *buf;
	size_t len;
	*out = NULL;
	rs_status st = rs_file_read(path, RS_CONFIG_MAX_BYTES, &buf, &len, err);
	if (st != RS_OK)
		return st == RS_ENOTFOUND ? RS_EIO : st;
	st = rs_config_parse(buf, len, path, out, err);
	free(buf);
	return st;
}

void rs_config_free(rs_config *cfg)
{
	if (!cfg)
		return;
	for (int i = 0; i < cfg->ntables; i++) {
		rs_table_config *t = &cfg->tables[i];
		free(t->name);
		for (int f = 0; f < t->nfeatures; f++)
			free(t->features[f]);
		free(t->features);
		free(t->colocate);
	}
	free(cfg->tables);
	free(cfg->dense.bottom_mlp);
	free(cfg->dense.top_mlp);
	for (int i = 0; i < cfg->data.npaths; i++)
		free(cfg->data.paths[i]);
	free(cfg->data.paths);
	free(cfg->path);
	free(cfg);
}

int rs_config_name_ok(const char *name)
{
	size_t n = strlen(name);
	return n >= 1 && n <= 200 && name[0] != '.' &&
	       strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == n;
}

int rs_config_find_table(const rs_config *cfg, const char *name)
{
	for (int i = 0; i < cfg->ntables; i++)
		if (!strcmp(cfg->tables[i].name, name))
			return i;
	return -1;
}

rs_interaction rs_config_interaction(const rs_config *cfg)
{
	const rs_dense_config *d = &cfg->dense;
	if (d->interaction != RS_INTERACTION_AUTO)
		return d->interaction;
	int all_equal = d->nbottom > 0;
	for (int i = 0; i < cfg->ntables && all_equal; i++)
		all_equal = cfg->tables[i].dim == d->bottom_mlp[d->nbottom - 1];
	return all_equal ? RS_INTERACTION_DOT : RS_INTERACTION_CAT;
}

uint64_t rs_table_row_bytes(const rs_config *cfg, const rs_table_config *t)
{
	return (uint64_t)t->dim * (uint64_t)rs_dtype_size(t->dtype) +
	       rs_optimizer_row_state_bytes(cfg->optimizer.kind, t->dim);
}

const char *rs_sharding_name(rs_sharding s)
{
	return (unsigned)s < RS_SHARD_COUNT ? sharding_names[s] : "unknown";
}

int rs_sharding_from_name(const char *name)
{
	for (int i = 0; sharding_names[i]; i++)
		if (!strcmp(sharding_names[i], name))
			return i;
	return -1;
}

const char *rs_dtype_name(rs_dtype d)
{
	return (unsigned)d <= RS_DTYPE_BF16 ? dtype_names[d] : "unknown";
}

const char *rs_optimizer_name(rs_optimizer o)
{
	return (unsigned)o <= RS_OPT_ADAM ? optimizer_names[o] : "unknown";
}

/* ---- the digest ---------------------------------------------------------------------- */

static const char *const digest_sections[RS_CONFIG_DIGEST_SECTIONS] = {"tables", "optimizer", "dense", "data", "train",
									  "cluster"};

/* Fold a value into a section's CRC: integers as 8 little-endian bytes, floats by their bits, strings with their length. */
static uint32_t fold(uint32_t crc, const void *p, size_t n) { return rs_crc32c(crc, p, n); }
static uint32_t fold_i(uint32_t crc, int64_t v)
{
	unsigned char b[8];
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)v >> (8 * i));
	return fold(crc, b, 8);
}
static uint32_t fold_f(uint32_t crc, double v)
{
	int64_t bits;
	v = v == 0 ? 0.0 : v; /* -0.0 is 0 */
	memcpy(&bits, &v, sizeof(bits));
	return fold_i(crc, bits);
}
static uint32_t fold_s(uint32_t crc, const char *v)
{
	size_t n = v ? strlen(v) : 0;
	return fold(fold_i(crc, (int64_t)n), v ? v : "", n);
}

void rs_config_digest(const rs_config *cfg, char out[RS_CONFIG_DIGEST_LEN + 1])
{
	uint32_t d[RS_CONFIG_DIGEST_SECTIONS] = {0};
	d[0] = fold_i(d[0], cfg->ntables);
	for (int i = 0; i < cfg->ntables; i++) {
		const rs_table_config *t = &cfg->tables[i];
		d[0] = fold_s(d[0], t->name);
		d[0] = fold_i(fold_i(fold_i(d[0], t->rows), t->dim), t->nfeatures);
		for (int f = 0; f < t->nfeatures; f++)
			d[0] = fold_s(d[0], t->features[f]);
		d[0] = fold_f(fold_i(fold_i(fold_i(d[0], t->pooling), t->dtype), t->has_zch), t->pooling_factor);
		if (t->has_zch)
			d[0] = fold_i(fold_i(fold_i(fold_i(d[0], t->zch.buckets), (int64_t)t->zch.slots), t->zch.eviction),
				      t->zch.lfu_decay_steps);
	}
	const rs_optimizer_config *o = &cfg->optimizer;
	d[1] = fold_f(fold_f(fold_i(d[1], o->kind), o->lr), o->eps);
	if (o->kind == RS_OPT_ADAM)
		d[1] = fold_f(fold_f(d[1], o->beta1), o->beta2);
	const rs_dense_config *n = &cfg->dense;
	d[2] = fold_i(d[2], n->nbottom);
	for (int i = 0; i < n->nbottom; i++)
		d[2] = fold_i(d[2], n->bottom_mlp[i]);
	d[2] = fold_i(d[2], n->ntop);
	for (int i = 0; i < n->ntop; i++)
		d[2] = fold_i(d[2], n->top_mlp[i]);
	d[2] = fold_f(fold_i(d[2], rs_config_interaction(cfg)), n->lr); /* "auto" as the dense network resolves it */
	const rs_data_config *a = &cfg->data; /* (eval_every: the coordinator's, sent in each start) */
	d[3] = fold_i(fold_f(fold_i(fold_i(d[3], a->kind), (int64_t)a->seed), a->zipf_alpha), a->eval_samples);
	const rs_train_config *t = &cfg->train;
	d[4] = fold_i(fold_i(fold_i(d[4], t->global_batch), (int64_t)t->seed), t->deterministic);
	if (t->deterministic)
		d[4] = fold_i(d[4], t->micro_batch);
	/* the cluster settings each worker acts on itself: how replicas meet (2D), what a loss costs */
	const rs_cluster_config *k = &cfg->cluster;
	d[5] = fold_i(fold_i(d[5], k->replica_sync_every), k->partial_recovery);
	snprintf(out, RS_CONFIG_DIGEST_LEN + 1, "%08x-%08x-%08x-%08x-%08x-%08x", d[0], d[1], d[2], d[3], d[4], d[5]);
}

int rs_config_digest_ok(const char *s)
{
	if (strlen(s) != RS_CONFIG_DIGEST_LEN)
		return 0;
	for (int i = 0; i < RS_CONFIG_DIGEST_LEN; i++)
		if (i % 9 == 8 ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
			return 0;
	return 1;
}

int rs_config_digest_diff(const char *a, const char *b, char *out, size_t n)
{
	int k = 0;
	size_t at = 0;
	if (n)
		out[0] = 0;
	for (int i = 0; i < RS_CONFIG_DIGEST_SECTIONS; i++) {
		if (!strncmp(a + 9 * i, b + 9 * i, 8))
			continue;
		if (at < n) {
			int w = snprintf(out + at, n - at, "%s%s", k ? ", " : "", digest_sections[i]);
			at += w > 0 ? (size_t)w : 0;
		}
		k++;
	}
	return k;
}
