/*
 * plan.c - the plan's bookkeeping: shard sizes and costs, validation, and the
 * JSON form. The placement itself is planner.c; the moves between two plans
 * are plandiff.c.
 */
#include "common/plan.h"
#include "common/cost.h"
#include "common/limits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void rs_plan_free(rs_plan *plan)
{
	if (!plan)
		return;
	for (int i = 0; i < plan->ntables; i++) {
		free(plan->tables[i].name);
		free(plan->tables[i].shards);
	}
	free(plan->tables);
	free(plan->ranks);
	free(plan);
}

rs_status rs_plan_compute_loads(rs_plan *plan, const rs_config *cfg)
{
	int32_t w = plan->world.ranks;
	memset(plan->ranks, 0, sizeof(*plan->ranks) * (size_t)w);
	for (int i = 0; i < plan->ntables; i++) {
		const rs_table_plan *tp = &plan->tables[i];
		const rs_table_config *t = &cfg->tables[i];
		for (int k = 0; k < tp->nshards; k++) {
			const rs_shard *s = &tp->shards[k];
			if (s->rank < 0 || s->rank >= w)
				return RS_EINVAL;
			rs_rank_load *l = &plan->ranks[s->rank];
			l->memory += rs_shard_bytes(cfg, t, s);
			l->cost += rs_shard_cost(cfg, t, tp->sharding, &plan->world, s);
			l->nshards++;
		}
	}
	return RS_OK;
}

/* ---- validation ----------------------------------------------------------- */

static int cmp_shard_pos(const void *a, const void *b)
{
	const rs_shard *x = a, *y = b;
	if (x->replica != y->replica)
		return x->replica < y->replica ? -1 : 1;
	if (x->col_offset != y->col_offset)
		return x->col_offset < y->col_offset ? -1 : 1;
	if (x->row_offset != y->row_offset)
		return x->row_offset < y->row_offset ? -1 : 1;
	return (x->rank > y->rank) - (x->rank < y->rank);
}

void rs_plan_sort_shards(rs_table_plan *tp)
{
	qsort(tp->shards, (size_t)tp->nshards, sizeof(rs_shard), cmp_shard_pos);
}

/*
 * Shards of one replica, sorted: column blocks must tile [0, dim) and, inside
 * each block, row ranges must tile [0, rows).
 */
static rs_status validate_tiling(const rs_table_plan *tp, const rs_shard *s, int n,
				 int replica, const char *tname, rs_err *err)
{
	int32_t col = 0;
	int k = 0;
	while (k < n) {
		int32_t c0 = s[k].col_offset, cw = s[k].cols;
		if (c0 != col)
			return rs_err_set(err, RS_EINVAL,
					  "table '%s' replica %d: columns from %d are not covered exactly once",
					  tname, replica, col);
		int64_t row = 0;
		for (; k < n && s[k].col_offset == c0; k++) {
			if (s[k].cols != cw)
				return rs_err_set(err, RS_EINVAL,
						  "table '%s' replica %d: shards at column %d have different widths",
						  tname, replica, c0);
			if (s[k].row_offset != row)
				return rs_err_set(err, RS_EINVAL,
						  "table '%s' replica %d: rows from %lld are not covered exactly once (columns %d..%d)",
						  tname, replica, (long long)row, c0, c0 + cw - 1);
			row += s[k].rows;
		}
		if (row != tp->rows)
			return rs_err_set(err, RS_EINVAL,
					  "table '%s' replica %d: shards cover %lld of %lld rows (columns %d..%d)",
					  tname, replica, (long long)row, (long long)tp->rows, c0, c0 + cw - 1);
		col = c0 + cw;
	}
	if (col != tp->dim)
		return rs_err_set(err, RS_EINVAL, "table '%s' replica %d: shards cover %d of %d columns",
				  tname, replica, col, tp->dim);
	return RS_OK;
}

static rs_status validate_table(const rs_plan *plan, const rs_table_plan *tp,
				const rs_table_config *t, rs_err *err)
{
	const rs_world *w = &plan->world;
	int32_t replicas = w->ranks / w->sharding_group;

	if (tp->sharding <= RS_SHARD_AUTO || tp->sharding >= RS_SHARD_COUNT)
		return rs_err_set(err, RS_EINVAL, "table '%s': no sharding type", t->name);
	if (tp->rows != t->rows || tp->dim != t->dim)
		return rs_err_set(err, RS_EINVAL,
				  "table '%s': plan has %lld x %d, config has %lld x %d",
				  t->name, (long long)tp->rows, tp->dim, (long long)t->rows, t->dim);
	for (int k = 0; k < tp->nshards; k++) {
		const rs_shard *s = &tp->shards[k];
		if (s->rank < 0 || s->rank >= w->ranks)
			return rs_err_set(err, RS_EINVAL, "table '%s': shard %d on rank %d, world has %d ranks",
					  t->name, k, s->rank, w->ranks);
		if (s->replica < 0 || s->replica >= replicas || s->rank % replicas != s->replica)
			return rs_err_set(err, RS_EINVAL, "table '%s': shard %d: rank %d is not in replica group %d",
					  t->name, k, s->rank, s->replica);
		if (s->rows <= 0 || s->cols <= 0 || s->row_offset < 0 || s->col_offset < 0 ||
		    s->row_offset > tp->rows - s->rows || s->col_offset > tp->dim - s->cols)
			return rs_err_set(err, RS_EINVAL, "table '%s': shard %d lies outside the table",
					  t->name, k);
		if (t->has_zch) {
			int64_t spb = (int64_t)(t->zch.slots / t->zch.buckets);
			if (s->buckets == 0 || (int64_t)s->bucket_offset * spb != s->row_offset ||
			    (int64_t)s->buckets * spb != s->rows)
				return rs_err_set(err, RS_EINVAL,
						  "table '%s': shard %d is not aligned to its buckets", t->name, k);
		} else if (s->buckets != 0) {
			return rs_err_set(err, RS_EINVAL, "table '%s': shard %d has buckets but the table has no zch",
					  t->name, k);
		}
	}
	if (tp->sharding == RS_SHARD_DP) {
		/* Every rank holds exactly one whole copy. */
		char *seen = calloc((size_t)w->ranks, 1);
		if (!seen)
			return RS_ENOMEM;
		rs_status st = RS_OK;
		for (int k = 0; k < tp->nshards && st == RS_OK; k++) {
			const rs_shard *s = &tp->shards[k];
			if (s->rows != tp->rows || s->cols != tp->dim || seen[s->rank]++)
				st = rs_err_set(err, RS_EINVAL,
						"table '%s': data-parallel shard %d is not one whole copy on rank %d",
						t->name, k, s->rank);
		}
		for (int32_t r = 0; r < w->ranks && st == RS_OK; r++)
			if (!seen[r])
				st = rs_err_set(err, RS_EINVAL, "table '%s': data-parallel table missing on rank %d",
						t->name, r);
		free(seen);
		return st;
	}
	/* shards are kept sorted by (replica, col, row): check each replica's tiling */
	int k = 0;
	for (int32_t rep = 0; rep < replicas; rep++) {
		int start = k;
		while (k < tp->nshards && tp->shards[k].replica == rep) {
			if (k > start && cmp_shard_pos(&tp->shards[k - 1], &tp->shards[k]) > 0)
				return rs_err_set(err, RS_EINVAL, "table '%s': shards are not sorted", t->name);
			k++;
		}
		RSCHECK(validate_tiling(tp, tp->shards + start, k - start, rep, t->name, err));
	}
	if (k != tp->nshards)
		return rs_err_set(err, RS_EINVAL, "table '%s': shards are not sorted by replica", t->name);
	return RS_OK;
}

rs_status rs_plan_validate(const rs_plan *plan, const rs_config *cfg, rs_err *err)
{
	const rs_world *w = &plan->world;
	if (w->ranks < 1 || w->ranks_per_node < 1 || w->sharding_group < 1 ||
	    w->ranks % w->sharding_group != 0)
		return rs_err_set(err, RS_EINVAL, "plan: bad world (%d ranks, sharding group %d)",
				  w->ranks, w->sharding_group);
	if (plan->ntables != cfg->ntables)
		return rs_err_set(err, RS_EINVAL, "plan has %d tables, config has %d",
				  plan->ntables, cfg->ntables);
	for (int i = 0; i < plan->ntables; i++) {
		if (strcmp(plan->tables[i].name, cfg->tables[i].name) != 0)
			return rs_err_set(err, RS_EINVAL, "plan table %d is '%s', config has '%s'",
					  i, plan->tables[i].name, cfg->tables[i].name);
		RSCHECK(validate_table(plan, &plan->tables[i], &cfg->tables[i], err));
	}
	return RS_OK;
}

/* ---- JSON ------------------------------------------------------------------ */

/* json_pack's "I" takes json_int_t; these keep the casts in one place. */
#define JI(x) ((json_int_t)(x))

static json_t *shard_to_json(const rs_shard *s, int zch, int twod)
{
	json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I}", "rank", JI(s->rank),
			      "row_offset", JI(s->row_offset), "rows", JI(s->rows),
			      "col_offset", JI(s->col_offset), "cols", JI(s->cols));
	if (o && zch) {
		json_object_set_new(o, "bucket_offset", json_integer(s->bucket_offset));
		json_object_set_new(o, "buckets", json_integer(s->buckets));
	}
	if (o && twod)
		json_object_set_new(o, "replica", json_integer(s->replica));
	return o;
}

json_t *rs_plan_to_json(const rs_plan *plan)
{
	const rs_plan_summary *sm = &plan->summary;
	const rs_world *w = &plan->world;
	int twod = w->sharding_group != w->ranks;
	json_t *root = json_pack(
		"{s:{s:f, s:f, s:f, s:f, s:I, s:I}, s:{s:I, s:I, s:I, s:I, s:I}, s:[], s:[]}",
		"summary", "plan_seconds", sm->plan_seconds, "max_cost", sm->max_cost,
		"lower_bound", sm->lower_bound, "imbalance", sm->imbalance,
		"moved_bytes", JI(sm->moved_bytes), "min_moved_bytes", JI(sm->min_moved_bytes),
		"world", "ranks", JI(w->ranks), "ranks_per_node", JI(w->ranks_per_node),
		"memory_per_rank", JI(w->memory_per_rank), "sharding_group", JI(w->sharding_group),
		"replica_groups", JI(w->ranks / w->sharding_group),
		"ranks", "tables");
	if (!root)
		return NULL;
	json_t *ranks = json_object_get(root, "ranks");
	json_t *tables = json_object_get(root, "tables");
	for (int32_t r = 0; r < w->ranks; r++) {
		const rs_rank_load *l = &plan->ranks[r];
		if (json_array_append_new(ranks, json_pack("{s:I, s:I, s:f, s:I}", "rank", JI(r),
							   "memory", JI(l->memory), "cost", l->cost,
							   "shards", JI(l->nshards))))
			goto fail;
	}
	for (int i = 0; i < plan->ntables; i++) {
		const rs_table_plan *tp = &plan->tables[i];
		json_t *shards = json_array();
		json_t *t = json_pack("{s:s, s:s, s:I, s:I, s:o}", "name", tp->name,
				      "sharding", rs_sharding_name(tp->sharding), "rows", JI(tp->rows),
				      "dim", JI(tp->dim), "shards", shards);
		if (!t || json_array_append_new(tables, t))
			goto fail;
		int zch = tp->nshards > 0 && tp->shards[0].buckets > 0;
		for (int k = 0; k < tp->nshards; k++)
			if (json_array_append_new(shards, shard_to_json(&tp->shards[k], zch, twod)))
				goto fail;
	}
	return root;
fail:
	json_decref(root);
	return NULL;
}

static rs_status get_int(const json_t *obj, const char *key, int64_t lo, int64_t hi, int optional,
			 int64_t *out, const char *where, rs_err *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v) {
		if (optional)
			return RS_OK;
		return rs_err_set(err, RS_EINVAL, "%s: missing field '%s'", where, key);
	}
	if (!json_is_integer(v))
		return rs_err_set(err, RS_EINVAL, "%s: field '%s' must be an integer", where, key);
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi)
		return rs_err_set(err, RS_EINVAL, "%s: field '%s' = %lld is out of range [%lld, %lld]",
				  where, key, (long long)x, (long long)lo, (long long)hi);
	*out = x;
	return RS_OK;
}

static rs_status shard_from_json(const json_t *js, rs_shard *s, const char *where, rs_err *err)
{
	int64_t v[8] = {0};
	static const char *const keys[] = {"rank", "row_offset", "rows", "col_offset", "cols",
					   "bucket_offset", "buckets", "replica"};
	static const int64_t his[] = {INT32_MAX, INT64_MAX / 2, INT64_MAX / 2, INT32_MAX,
				      INT32_MAX, UINT32_MAX, UINT32_MAX, INT32_MAX};
	const char *key;
	json_t *val;

	if (!json_is_object(js))
		return rs_err_set(err, RS_EINVAL, "%s: must be an object", where);
	json_object_foreach((json_t *)js, key, val) {
		size_t k = 0;
		while (k < 8 && strcmp(keys[k], key) != 0)
			k++;
		if (k == 8)
			return rs_err_set(err, RS_EINVAL, "%s: unknown key '%s'", where, key);
	}
	for (int k = 0; k < 8; k++)
		RSCHECK(get_int(js, keys[k], 0, his[k], k >= 5, &v[k], where, err));
	*s = (rs_shard){.rank = (int32_t)v[0], .row_offset = v[1], .rows = v[2],
			.col_offset = (int32_t)v[3], .cols = (int32_t)v[4],
			.bucket_offset = (uint32_t)v[5], .buckets = (uint32_t)v[6],
			.replica = (int32_t)v[7]};
	return RS_OK;
}

static rs_status table_from_json(const json_t *jt, int i, const rs_config *cfg, const char *name,
				 rs_table_plan *tp, rs_err *err)
{
	const rs_table_config *t = &cfg->tables[i];
	const char *tname = NULL, *sharding = NULL;
	json_t *shards = NULL;
	json_int_t rows = 0, dim = 0;
	json_error_t jerr;

	if (json_unpack_ex((json_t *)jt, &jerr, JSON_STRICT, "{s:s, s:s, s:I, s:I, s:o}",
			   "name", &tname, "sharding", &sharding, "rows", &rows, "dim", &dim,
			   "shards", &shards))
		return rs_err_set(err, RS_EINVAL, "%s: tables[%d]: %s", name, i, jerr.text);
	if (strcmp(tname, t->name) != 0)
		return rs_err_set(err, RS_EINVAL, "%s: tables[%d] is '%s', the config's is '%s'",
				  name, i, tname, t->name);
	int sh = rs_sharding_from_name(sharding);
	if (sh <= RS_SHARD_AUTO)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': unknown sharding '%s'", name, tname, sharding);
	if (!json_is_array(shards) || json_array_size(shards) == 0 ||
	    json_array_size(shards) > (size_t)1 << 24)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': 'shards' must be a non-empty array",
				  name, tname);
	tp->name = strdup(tname);
	tp->sharding = (rs_sharding)sh;
	tp->rows = rows;
	tp->dim = (int32_t)(dim > INT32_MAX ? INT32_MAX : dim < 0 ? 0 : dim);
	tp->row_bytes = rs_table_row_bytes(cfg, t);
	tp->shards = calloc(json_array_size(shards), sizeof(rs_shard));
	if (!tp->name || !tp->shards)
		return RS_ENOMEM;
	size_t k;
	json_t *js;
	json_array_foreach(shards, k, js) {
		char where[256];
		snprintf(where, sizeof(where), "%s: table '%s': shards[%zu]", name, tname, k);
		RSCHECK(shard_from_json(js, &tp->shards[k], where, err));
		tp->nshards++;
	}
	rs_plan_sort_shards(tp);
	return RS_OK;
}

rs_status rs_plan_from_json(const json_t *root, const rs_config *cfg, const char *name,
			    rs_plan **out, rs_err *err)
{
	json_t *world, *tables;
	rs_plan *plan = NULL;
	rs_status st;
	int64_t v;

	*out = NULL;
	if (!json_is_object(root))
		return rs_err_set(err, RS_EINVAL, "%s: a plan must be a JSON object", name);
	world = json_object_get(root, "world");
	tables = json_object_get(root, "tables");
	if (!json_is_object(world))
		return rs_err_set(err, RS_EINVAL, "%s: missing object 'world'", name);
	if (!json_is_array(tables))
		return rs_err_set(err, RS_EINVAL, "%s: missing array 'tables'", name);
	if ((int)json_array_size(tables) != cfg->ntables)
		return rs_err_set(err, RS_EINVAL, "%s: plan has %zu tables, the config has %d",
				  name, json_array_size(tables), cfg->ntables);
	plan = calloc(1, sizeof(*plan));
	if (!plan)
		return RS_ENOMEM;
	char where[256];
	snprintf(where, sizeof(where), "%s: world", name);
	RSCHECKGOTO(get_int(world, "ranks", 1, RS_MAX_RANKS, 0, &v, where, err), st, fail);
	plan->world.ranks = (int32_t)v;
	RSCHECKGOTO(get_int(world, "ranks_per_node", 1, RS_MAX_RANKS, 0, &v, where, err), st, fail);
	plan->world.ranks_per_node = (int32_t)v;
	RSCHECKGOTO(get_int(world, "memory_per_rank", 1, INT64_MAX, 0, &v, where, err), st, fail);
	plan->world.memory_per_rank = (uint64_t)v;
	v = plan->world.ranks;
	RSCHECKGOTO(get_int(world, "sharding_group", 1, RS_MAX_RANKS, 1, &v, where, err), st, fail);
	plan->world.sharding_group = (int32_t)v;
	plan->tables = calloc((size_t)cfg->ntables, sizeof(rs_table_plan));
	plan->ranks = calloc((size_t)plan->world.ranks, sizeof(rs_rank_load));
	if (!plan->tables || !plan->ranks) {
		st = RS_ENOMEM;
		goto fail;
	}
	for (int i = 0; i < cfg->ntables; i++) {
		plan->ntables = i + 1;
		RSCHECKGOTO(table_from_json(json_array_get(tables, (size_t)i), i, cfg, name,
					    &plan->tables[i], err), st, fail);
	}
	rs_err verr = {0};
	st = rs_plan_validate(plan, cfg, &verr);
	if (st != RS_OK) {
		rs_err_set(err, st, "%s: %s", name, verr.msg);
		goto fail;
	}
	RSCHECKGOTO(rs_plan_compute_loads(plan, cfg), st, fail);
	json_t *sm = json_object_get(root, "summary");
	if (json_is_object(sm)) {
		plan->summary.plan_seconds = json_number_value(json_object_get(sm, "plan_seconds"));
		plan->summary.max_cost = json_number_value(json_object_get(sm, "max_cost"));
		plan->summary.lower_bound = json_number_value(json_object_get(sm, "lower_bound"));
		plan->summary.imbalance = json_number_value(json_object_get(sm, "imbalance"));
	}
	*out = plan;
	return RS_OK;
fail:
	if (st != RS_OK && err && !err->msg[0])
		rs_err_set(err, st, "%s: %s", name, rs_status_str(st));
	rs_plan_free(plan);
	return st;
}

rs_status rs_plan_parse(const char *buf, size_t len, const rs_config *cfg, const char *name,
			rs_plan **out, rs_err *err)
{
	json_error_t jerr;
	json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	*out = NULL;
	if (!root)
		return rs_err_set(err, RS_EINVAL, "%s:%d:%d: %s", name, jerr.line, jerr.column, jerr.text);
	rs_status st = rs_plan_from_json(root, cfg, name, out, err);
	json_decref(root);
	return st;
}
