/*
 * plandiff.c - see plandiff.h. For every shard of the new plan, the old
 * shards overlapping it are found by binary search among the old shards of
 * the same column block (shards are kept sorted by replica, column, row), so
 * a diff costs O(shards log shards) per table.
 */
#include "common/plandiff.h"
#include "common/cost.h"
#include "common/grow.h"

#include <stdlib.h>
#include <string.h>

typedef struct move_vec {
	rs_move *v;
	size_t n, cap;
} move_vec;

static rs_status push_move(move_vec *mv, rs_move m)
{
	RSCHECK(rs_grow(&mv->v, &mv->cap, mv->n + 1, sizeof(*mv->v)));
	mv->v[mv->n++] = m;
	return RS_OK;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* First index in [lo, hi) of old shards (one column block, sorted by row) ending after `row`. */
static int first_ending_after(const rs_shard *s, int lo, int hi, int64_t row)
{
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (s[mid].row_offset + s[mid].rows <= row)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static rs_status add_move(move_vec *mv, const rs_config *cfg, int t, int32_t src, int32_t dst,
			  int64_t r0, int64_t r1, int32_t c0, int32_t c1)
{
	const rs_table_config *tc = &cfg->tables[t];
	rs_move m = {.table = t, .src = src, .dst = dst, .row_offset = r0, .rows = r1 - r0,
		     .col_offset = c0, .cols = c1 - c0};
	rs_shard s = {.rows = m.rows, .cols = m.cols};
	if (tc->has_zch) {
		int64_t spb = (int64_t)(tc->zch.slots / tc->zch.buckets);
		m.bucket_offset = (uint32_t)(r0 / spb);
		m.buckets = (uint32_t)(m.rows / spb);
	}
	m.bytes = rs_shard_bytes(cfg, tc, &s);
	return push_move(mv, m);
}

/* Does new rank `dst` hold rows [r0, r1) x columns [c0, c1) of the old table under its old number? */
static int already_held(const rs_table_plan *old, const int32_t *old_to_new, int32_t dst,
			int64_t r0, int64_t r1, int32_t c0, int32_t c1)
{
	int64_t covered = 0;
	for (int i = 0; i < old->nshards; i++) {
		const rs_shard *o = &old->shards[i];
		if (old_to_new[o->rank] != dst || o->col_offset > c0 || o->col_offset + o->cols < c1)
			continue;
		covered += max64(0, min64(r1, o->row_offset + o->rows) - max64(r0, o->row_offset));
	}
	return covered >= r1 - r0;
}

/*
 * The old plan holds whole copies (data-parallel): each new shard not already
 * held by its rank comes from one copy.
 */
static rs_status diff_from_copies(const rs_config *cfg, int t, const rs_table_plan *old,
				  const rs_table_plan *new, const int32_t *old_to_new, int restore, move_vec *mv)
{
	for (int k = 0; k < new->nshards; k++) {
		const rs_shard *n = &new->shards[k];
		int32_t dst = n->rank;
		int held = 0, nsrc = 0;
		for (int i = 0; i < old->nshards; i++) {
			held |= old_to_new[old->shards[i].rank] == dst;
			nsrc += old_to_new[old->shards[i].rank] >= 0;
		}
		if (held)
			continue;
		/* the (dst mod copies)-th surviving copy, or any copy when none survives */
		int nlive = 0;
		for (int i = 0; i < old->nshards; i++)
			nlive += old_to_new[old->shards[i].rank] != RS_PLAN_LOST;
		if (!nlive && !restore)
			return RS_ENOTFOUND;
		if (!nlive) {
			RSCHECK(add_move(mv, cfg, t, RS_MOVE_RESTORE, dst, n->row_offset, n->row_offset + n->rows,
					 n->col_offset, n->col_offset + n->cols));
			continue;
		}
		int pick = nsrc ? dst % nsrc : dst % nlive, seen = 0;
		for (int i = 0; i < old->nshards; i++) {
			if ((nsrc && old_to_new[old->shards[i].rank] < 0) || old_to_new[old->shards[i].rank] == RS_PLAN_LOST)
				continue;
			if (seen++ == pick) {
				RSCHECK(add_move(mv, cfg, t, old->shards[i].rank, dst, n->row_offset,
						 n->row_offset + n->rows, n->col_offset, n->col_offset + n->cols));
				break;
			}
		}
	}
	return RS_OK;
}

/* The rank of a live copy of old shard o in another replica group (the same rectangle), or -1. */
static int32_t other_copy(const rs_table_plan *old, const int32_t *old_to_new, const rs_shard *o)
{
	for (int i = 0; i < old->nshards; i++) {
		const rs_shard *c = &old->shards[i];
		if (c->replica != o->replica && c->row_offset == o->row_offset && c->rows == o->rows &&
		    c->col_offset == o->col_offset && c->cols == o->cols && old_to_new[c->rank] != RS_PLAN_LOST)
			return c->rank;
	}
	return -1;
}

static rs_status diff_table(const rs_config *cfg, int t, const rs_table_plan *old,
			    const rs_table_plan *new, int32_t old_replicas,
			    const int32_t *old_to_new, int restore, move_vec *mv, rs_err *err)
{
	if (old->sharding == RS_SHARD_DP) /* RS_ENOTFOUND: every copy lost */
		return diff_from_copies(cfg, t, old, new, old_to_new, restore, mv);
	for (int k = 0; k < new->nshards; k++) {
		const rs_shard *n = &new->shards[k];
		int32_t want = n->replica % old_replicas;
		int64_t nr1 = n->row_offset + n->rows;
		int32_t nc1 = n->col_offset + n->cols;
		/* old column blocks of the source replica that overlap the new shard's columns */
		for (int b = 0; b < old->nshards;) {
			int e = b;
			while (e < old->nshards && old->shards[e].replica == old->shards[b].replica &&
			       old->shards[e].col_offset == old->shards[b].col_offset)
				e++;
			const rs_shard *o0 = &old->shards[b];
			int32_t c0 = o0->col_offset > n->col_offset ? o0->col_offset : n->col_offset;
			int32_t c1 = o0->col_offset + o0->cols < nc1 ? o0->col_offset + o0->cols : nc1;
			if (o0->replica == want && c0 < c1) {
				for (int i = first_ending_after(old->shards, b, e, n->row_offset);
				     i < e && old->shards[i].row_offset < nr1; i++) {
					const rs_shard *o = &old->shards[i];
					int64_t r0 = max64(o->row_offset, n->row_offset);
					int64_t r1 = min64(o->row_offset + o->rows, nr1);
					if (old_to_new[o->rank] == n->rank ||
					    already_held(old, old_to_new, n->rank, r0, r1, c0, c1))
						continue;
					int32_t src = old_to_new[o->rank] == RS_PLAN_LOST ? other_copy(old, old_to_new, o) : o->rank;
					if (src < 0 && restore)
						src = RS_MOVE_RESTORE;
					if (src < 0 && !restore)
						return rs_err_set(err, RS_ENOTFOUND,
								  "table '%s': rows %lld..%lld (columns %d..%d) were lost with every copy",
								  cfg->tables[t].name, (long long)r0, (long long)r1 - 1, c0, c1 - 1);
					RSCHECK(add_move(mv, cfg, t, src, n->rank, r0, r1, c0, c1));
				}
			}
			b = e;
		}
	}
	return RS_OK;
}

static int cmp_move(const void *a, const void *b)
{
	const rs_move *x = a, *y = b;
	if (x->table != y->table)
		return x->table - y->table;
	if (x->dst != y->dst)
		return x->dst - y->dst;
	if (x->col_offset != y->col_offset)
		return x->col_offset - y->col_offset;
	return (x->row_offset > y->row_offset) - (x->row_offset < y->row_offset);
}

rs_status rs_plan_diff(const rs_config *cfg, const rs_plan *old, const rs_plan *new,
		       const int32_t *old_to_new, rs_move **moves, int *nmoves, rs_err *err)
{
	return rs_plan_diff_restoring(cfg, old, new, old_to_new, 0, moves, nmoves, err);
}

rs_status rs_plan_diff_restoring(const rs_config *cfg, const rs_plan *old, const rs_plan *new,
				 const int32_t *old_to_new, int restore, rs_move **moves, int *nmoves, rs_err *err)
{
	move_vec mv = {0};
	rs_status st = RS_OK;

	*moves = NULL;
	*nmoves = 0;
	if (old->ntables != cfg->ntables || new->ntables != cfg->ntables)
		return rs_err_set(err, RS_EINVAL, "plan diff: the plans do not match the config's %d tables",
				  cfg->ntables);
	for (int32_t r = 0; r < old->world.ranks; r++)
		if (old_to_new[r] < RS_PLAN_LOST || old_to_new[r] >= new->world.ranks)
			return rs_err_set(err, RS_EINVAL, "plan diff: old rank %d maps to %d, outside the new world",
					  r, old_to_new[r]);
	int32_t old_replicas = old->world.ranks / old->world.sharding_group;
	for (int t = 0; t < cfg->ntables && st == RS_OK; t++)
		st = diff_table(cfg, t, &old->tables[t], &new->tables[t], old_replicas, old_to_new, restore, &mv, err);
	if (st == RS_ENOTFOUND && err && !err->msg[0])
		rs_err_set(err, st, "plan diff: a data-parallel table lost every copy");
	if (st != RS_OK) {
		free(mv.v);
		return st;
	}
	if (mv.n > 1)
		qsort(mv.v, (size_t)mv.n, sizeof(rs_move), cmp_move);
	*moves = mv.v;
	*nmoves = (int)mv.n;
	return RS_OK;
}

json_t *rs_moves_to_json(const rs_config *cfg, const rs_move *moves, int nmoves)
{
	json_t *arr = json_array();
	uint64_t total = 0;
	if (!arr)
		return NULL;
	for (int i = 0; i < nmoves; i++) {
		const rs_move *m = &moves[i];
		json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:I, s:i, s:i, s:I}",
				      "table", cfg->tables[m->table].name, "src", m->src, "dst", m->dst,
				      "row_offset", (json_int_t)m->row_offset, "rows", (json_int_t)m->rows,
				      "col_offset", m->col_offset, "cols", m->cols,
				      "bytes", (json_int_t)m->bytes);
		if (o && m->buckets) {
			json_object_set_new(o, "bucket_offset", json_integer(m->bucket_offset));
			json_object_set_new(o, "buckets", json_integer(m->buckets));
		}
		if (!o || json_array_append_new(arr, o)) {
			json_decref(arr);
			return NULL;
		}
		total += m->bytes;
	}
	return json_pack("{s:o, s:I}", "moves", arr, "bytes", (json_int_t)total);
}
