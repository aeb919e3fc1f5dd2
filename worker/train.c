/*
 * train.c - see train.h.
 *
 * Requests travel as int64 records [feature, block, sample, n, id_1..id_n],
 * packed per owner; answers and gradients travel as `cols` floats per
 * record, in the same order, so neither side needs to send sizes twice.
 */
#include "worker/train_internal.h"
#include "common/checkpoint.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/safetensors.h"
#include "common/rng.h"
#include "worker/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable arrays ---------------------------------------------------------- */

static rs_status i64_push(i64vec *a, int64_t x)
{
	RSCHECK(rs_grow(&a->v, &a->cap, a->n + 1, sizeof(*a->v)));
	a->v[a->n++] = x;
	return RS_OK;
}

static rs_status i32_push(i32vec *a, int32_t x)
{
	RSCHECK(rs_grow(&a->v, &a->cap, a->n + 1, sizeof(*a->v)));
	a->v[a->n++] = x;
	return RS_OK;
}

static rs_status sent_push(sentvec *a, sent x)
{
	RSCHECK(rs_grow(&a->v, &a->cap, a->n + 1, sizeof(*a->v)));
	a->v[a->n++] = x;
	return RS_OK;
}

/* ---- set-up -------------------------------------------------------------------- */

/* Initial value of a cell: a function of (seed, table, global row, global column) only. */
static float init_value(uint64_t seed, int table, int64_t row, int32_t col, int64_t rows)
{
	uint64_t h = rs_mix64(rs_mix64(seed * 0x9E3779B97F4A7C15ull + (uint64_t)table) ^
			      ((uint64_t)row * 0x100000001B3ull + (uint64_t)col));
	double u = (double)(h >> 11) / 9007199254740992.0;
	return (float)((u * 2 - 1) / sqrt((double)rows));
}

static int cmp_shard_row(const void *a, const void *b)
{
	const rs_shard *x = *(const rs_shard *const *)a, *y = *(const rs_shard *const *)b;
	if (x->col_offset != y->col_offset)
		return x->col_offset < y->col_offset ? -1 : 1;
	return (x->row_offset > y->row_offset) - (x->row_offset < y->row_offset);
}

/* Allocate this rank's shards; fill them with initial values when `init` (a reshard fills them instead). */
static rs_status build_tables(rs_trainer *tr, int init)
{
	const rs_config *cfg = tr->cfg;
	tr->tables = calloc((size_t)cfg->ntables, sizeof(tinfo));
	tr->shards = calloc((size_t)cfg->ntables * (size_t)tr->world + 1, sizeof(lshard));
	if (!tr->tables || !tr->shards)
		return RS_ENOMEM;
	for (int t = 0; t < cfg->ntables; t++) {
		const rs_table_plan *tp = &tr->plan->tables[t];
		const rs_table_config *tc = &cfg->tables[t];
		tinfo *ti = &tr->tables[t];
		ti->dp_shard = -1;
		/* this rank's shards */
		for (int k = 0; k < tp->nshards; k++) {
			const rs_shard *s = &tp->shards[k];
			if (s->rank != tr->rank || s->replica != 0)
				continue;
			int si = tr->nshards;
			if (si >= cfg->ntables * tr->world) {
				lshard *v = realloc(tr->shards, sizeof(lshard) * (size_t)(si * 2 + 1));
				if (!v)
					return RS_ENOMEM;
				tr->shards = v;
			}
			lshard *ls = &tr->shards[tr->nshards++];
			*ls = (lshard){.table = t, .s = *s};
			int64_t sf = rs_emb_state_floats(cfg->optimizer.kind, s->cols);
			ls->emb = (rs_emb_shard){.dtype = tc->dtype, .nrows = s->rows, .dim = s->cols};
			ls->wmem = rs__mem_new(tr->engine, (size_t)s->rows * (size_t)s->cols * (size_t)rs_dtype_size(tc->dtype));
			ls->smem = sf ? rs__mem_new(tr->engine, sizeof(float) * (size_t)(s->rows * sf)) : NULL;
			if (!ls->wmem || (sf && !ls->smem))
				return RS_ENOMEM;
			ls->emb.weights = ls->wmem->base;
			ls->emb.state = sf ? ls->smem->base : NULL;
			RSCHECK(rs_emb_workspace_init(&ls->ws, s->rows));
			for (int64_t r = 0; init && r < s->rows; r++)
				for (int32_t c = 0; c < s->cols; c++)
					rs_emb_set(ls->emb.weights, tc->dtype, r * s->cols + c,
						   init_value(cfg->train.seed, t, s->row_offset + r, s->col_offset + c, tc->rows));
			if (tp->sharding == RS_SHARD_DP)
				ti->dp_shard = si;
		}
		if (tc->has_zch) {
			RSCHECK(rs_zch_create(&tc->zch, &ti->zch, NULL));
			ti->spb = (int64_t)(tc->zch.slots / tc->zch.buckets);
			for (int i = 0; i < tr->nshards; i++)
				for (uint32_t b = 0; tr->shards[i].table == t && b < tr->shards[i].s.buckets; b++)
					RSCHECK(rs_zch_add_bucket(ti->zch, tr->shards[i].s.bucket_offset + b));
		}
		if (tp->sharding == RS_SHARD_DP)
			continue;
		/* routing: column blocks of replica 0, row ranges sorted */
		const rs_shard **v = malloc(sizeof(rs_shard *) * (size_t)tp->nshards);
		int nv = 0;
		if (!v)
			return RS_ENOMEM;
		for (int k = 0; k < tp->nshards; k++)
			if (tp->shards[k].replica == 0)
				v[nv++] = &tp->shards[k];
		qsort(v, (size_t)nv, sizeof(*v), cmp_shard_row);
		ti->blocks = calloc((size_t)nv, sizeof(block));
		if (!ti->blocks) {
			free(v);
			return RS_ENOMEM;
		}
		for (int k = 0; k < nv;) {
			int e = k;
			while (e < nv && v[e]->col_offset == v[k]->col_offset)
				e++;
			block *b = &ti->blocks[ti->nblocks++];
			b->col_offset = v[k]->col_offset;
			b->cols = v[k]->cols;
			b->n = e - k;
			b->row_start = malloc(sizeof(int64_t) * (size_t)b->n);
			b->owner = malloc(sizeof(int32_t) * (size_t)b->n);
			b->local = malloc(sizeof(int32_t) * (size_t)b->n);
			if (!b->row_start || !b->owner || !b->local) {
				free(v);
				return RS_ENOMEM;
			}
			for (int j = 0; j < b->n; j++) {
				b->row_start[j] = v[k + j]->row_offset;
				b->owner[j] = v[k + j]->rank;
				b->local[j] = -1;
				for (int si = 0; si < tr->nshards; si++)
					if (tr->shards[si].table == t && tr->shards[si].s.row_offset == v[k + j]->row_offset &&
					    tr->shards[si].s.col_offset == b->col_offset)
						b->local[j] = si;
			}
			k = e;
		}
		free(v);
	}
	return RS_OK;
}

rs__mem *rs__mem_new(rs_engine *e, size_t len)
{
	rs__mem *m = malloc(sizeof(*m));
	rs_err err = {0};
	if (!m)
		return NULL;
	m->engine = e;
	m->len = len ? len : 1;
	m->refs = 1;
	if (!(m->base = e->ops->alloc(e, m->len, &err))) {
		RS_ERROR("%s", err.msg);
		free(m);
		return NULL;
	}
	return m;
}

void rs__mem_populate(rs__mem *m) { m->engine->ops->prefetch(m->engine, m->base, m->len, 1); }

void rs__mem_unref(rs__mem *m)
{
	if (!m || --m->refs > 0)
		return;
	m->engine->ops->free(m->engine, m->base, m->len);
	free(m);
}

void rs__row_blocks(const rs_config *cfg, const lshard *ls, int64_t row, int64_t n, void **w, size_t *wlen, void **s,
		    size_t *slen)
{
	size_t wb = (size_t)ls->s.cols * (size_t)rs_dtype_size(ls->emb.dtype);
	size_t sb = sizeof(float) * (size_t)rs_emb_state_floats(cfg->optimizer.kind, ls->s.cols);
	*w = (char *)ls->emb.weights + (size_t)row * wb;
	*wlen = (size_t)n * wb;
	*s = sb ? (char *)ls->emb.state + (size_t)row * sb : NULL;
	*slen = (size_t)n * sb;
}

void rs__trainer_prefetch(rs_trainer *tr, int to_host)
{
	rs_engine *e = tr->engine;
	for (int i = 0; i < tr->nshards; i++) {
		void *w, *st;
		size_t wl, sl;
		rs__row_blocks(tr->cfg, &tr->shards[i], 0, tr->shards[i].s.rows, &w, &wl, &st, &sl);
		e->ops->prefetch(e, w, wl, to_host);
		if (sl)
			e->ops->prefetch(e, st, sl, to_host);
	}
	tr->on_host = to_host;
}

lshard *rs__local_shard(const rs_trainer *tr, int t, int64_t row, int32_t col)
{
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		if (ls->table == t && row >= ls->s.row_offset && row < ls->s.row_offset + ls->s.rows &&
		    col >= ls->s.col_offset && col < ls->s.col_offset + ls->s.cols)
			return ls;
	}
	return NULL;
}

/* Index of the row range of b holding `row`. */
static int range_of(const block *b, int64_t row)
{
	int lo = 0, hi = b->n - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (b->row_start[mid] <= row)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

rs_status rs_trainer_create(const rs_config *cfg, const rs_plan *plan, rs_transport *t, rs_engine *engine,
			    rs_trainer **out, rs_err *err)
{
	return rs__trainer_alloc(cfg, plan, t, engine, NULL, 1, out, err);
}

rs_status rs__trainer_alloc(const rs_config *cfg, const rs_plan *plan, rs_transport *t, rs_engine *engine,
			    rs_data *data, int init, rs_trainer **out, rs_err *err)
{
	rs_trainer *tr = calloc(1, sizeof(*tr));
	rs_status st;
	*out = NULL;
	if (!tr)
		return RS_ENOMEM;
	tr->cfg = cfg;
	tr->engine = rs_engine_or_cpu(engine);
	tr->on_host = 1; /* initial values are written by the host */
	tr->plan = plan;
	tr->t = t;
	tr->rank = t->rank;
	tr->world = t->world;
	if (plan->world.ranks != t->world || plan->world.sharding_group != plan->world.ranks) {
		free(tr);
		return rs_err_set(err, RS_EINVAL, "trainer: the plan's world (%d ranks, group %d) is not the transport's (%d)",
				  plan->world.ranks, plan->world.sharding_group, t->world);
	}
	for (int i = 0; i < cfg->ntables; i++)
		tr->nfeat += cfg->tables[i].nfeatures;
	tr->feat_table = malloc(sizeof(int) * (size_t)tr->nfeat);
	tr->feat_off = malloc(sizeof(int32_t) * (size_t)tr->nfeat);
	tr->req = calloc((size_t)tr->world, sizeof(i64vec));
	tr->sent = calloc((size_t)tr->world, sizeof(sentvec));
	tr->scount = calloc((size_t)tr->world, sizeof(size_t));
	tr->rcount = calloc((size_t)tr->world, sizeof(size_t));
	tr->in_off = calloc((size_t)tr->world + 1, sizeof(size_t));
	if (!tr->feat_table || !tr->feat_off || !tr->req || !tr->sent || !tr->scount || !tr->rcount || !tr->in_off) {
		st = RS_ENOMEM;
		goto fail;
	}
	int32_t f = 0;
	for (int i = 0; i < cfg->ntables; i++)
		for (int k = 0; k < cfg->tables[i].nfeatures; k++, f++) {
			tr->feat_table[f] = i;
			tr->feat_off[f] = tr->emb_width;
			tr->emb_width += cfg->tables[i].dim;
		}
	RSCHECKGOTO(build_tables(tr, init), st, fail);
	if (data) {
		tr->data = data;
	} else {
		RSCHECKGOTO(rs_data_open(cfg, &tr->data, err), st, fail);
		tr->owns_data = 1;
	}
	RSCHECKGOTO(rs_dense_create(cfg, cfg->train.seed, &tr->dense, err), st, fail);
	if (tr->engine->ops->gemm)
		rs_dense_set_gemm(tr->dense, tr->engine->ops->gemm, tr->engine);
	RSCHECKGOTO(rs_batch_init(&tr->batch, tr->nfeat), st, fail);
	*out = tr;
	return RS_OK;
fail:
	rs_trainer_destroy(tr);
	if (st == RS_ENOMEM)
		rs_err_set(err, st, "trainer: out of memory");
	return st;
}

void rs_trainer_destroy(rs_trainer *tr)
{
	if (!tr)
		return;
	for (int i = 0; i < tr->nshards; i++) {
		rs__mem_unref(tr->shards[i].wmem);
		rs__mem_unref(tr->shards[i].smem);
		rs_emb_workspace_free(&tr->shards[i].ws);
		rs_emb_grad_free(&tr->shards[i].grad);
		free(tr->shards[i].boff.v);
		free(tr->shards[i].bids.v);
		free(tr->shards[i].bdst.v);
		free(tr->shards[i].bval.v);
	}
	for (int t = 0; tr->tables && t < tr->cfg->ntables; t++) {
		for (int b = 0; b < tr->tables[t].nblocks; b++) {
			free(tr->tables[t].blocks[b].row_start);
			free(tr->tables[t].blocks[b].owner);
			free(tr->tables[t].blocks[b].local);
		}
		free(tr->tables[t].blocks);
		rs_zch_destroy(tr->tables[t].zch);
	}
	for (int32_t p = 0; tr->req && p < tr->world; p++) {
		free(tr->req[p].v);
		free(tr->sent[p].v);
	}
	free(tr->req);
	free(tr->sent);
	free(tr->scount);
	free(tr->rcount);
	free(tr->in_off);
	free(tr->in.v);
	free(tr->in_row.v);
	free(tr->out.v);
	free(tr->back.v);
	free(tr->tables);
	free(tr->shards);
	free(tr->feat_table);
	free(tr->feat_off);
	free(tr->pooled);
	free(tr->dpooled);
	rs_batch_free(&tr->batch);
	rs_dense_destroy(tr->dense);
	if (tr->owns_data)
		rs_data_close(tr->data);
	free(tr);
}

/* ---- the step ------------------------------------------------------------------- */

/*
 * The row of a requested id at its owner: the id itself, or for a ZCH table
 * its slot (inserted when training; -1 for an unknown id when evaluating or
 * an overflow). A slot given to a new id gets fresh values: a function of
 * (seed, table, id), so that whichever slot an id lands in, it starts the same.
 */
static int64_t resolve(rs_trainer *tr, int t, int64_t id, int64_t step, int training)
{
	tinfo *ti = &tr->tables[t];
	if (!ti->zch)
		return id;
	uint64_t raw = (uint64_t)id;
	int64_t slot, fresh;
	size_t nfresh = 0;
	if (!training) {
		rs_zch_find(ti->zch, &raw, 1, &slot);
		return slot;
	}
	rs_zch_find_or_insert(ti->zch, &raw, 1, (uint32_t)step, &slot, &fresh, &nfresh);
	if (nfresh && slot >= 0) {
		const block *bl = &ti->blocks[0];
		lshard *ls = &tr->shards[bl->local[range_of(bl, slot)]];
		int64_t local = slot - ls->s.row_offset;
		int64_t sf = rs_emb_state_floats(tr->cfg->optimizer.kind, ls->s.cols);
		for (int32_t c = 0; c < ls->s.cols; c++)
			rs_emb_set(ls->emb.weights, ls->emb.dtype, local * ls->s.cols + c,
				   init_value(tr->cfg->train.seed, t, id, ls->s.col_offset + c, tr->cfg->tables[t].rows));
		if (sf)
			memset(ls->emb.state + local * sf, 0, sizeof(float) * (size_t)sf);
	}
	return slot;
}

/*
 * The owner's side of a lookup, one pass over the requests received:
 * check each record [feature, block, sample, n, ids...] (whole, inside its
 * sender's part), resolve its ids to rows and sort them into bags of the
 * local shards holding those rows (lshard.boff/bids/bdst, in request
 * order). tr->scount[p] gets the bytes of the answers for peer p; *floats
 * the length of all the answers.
 */
static rs_status gather_bags(rs_trainer *tr, int64_t step, int training, size_t *floats)
{
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		ls->boff.n = ls->bids.n = ls->bdst.n = 0;
		RSCHECK(i32_push(&ls->boff, 0));
	}
	size_t o = 0;
	for (int32_t p = 0; p < tr->world; p++) {
		size_t first = o;
		for (size_t q = tr->in_off[p], end = tr->in_off[p + 1]; q < end;) {
			int64_t f = -1, c = -1, cnt = -1;
			if (end - q >= 4)
				f = tr->in.v[q], c = tr->in.v[q + 1], cnt = tr->in.v[q + 3];
			if (f < 0 || f >= tr->nfeat || c < 0 || c >= tr->tables[tr->feat_table[f]].nblocks || cnt < 0 ||
			    (uint64_t)cnt > end - q - 4) {
				RS_ERROR("rank %d sent a malformed request (feature %lld, block %lld, %lld ids)", p,
					 (long long)f, (long long)c, (long long)cnt);
				return RS_EPEER;
			}
			int t = tr->feat_table[f];
			const block *bl = &tr->tables[t].blocks[c];
			for (int64_t j = 0; j < cnt; j++) {
				int64_t row = resolve(tr, t, tr->in.v[q + 4 + j], step, training);
				tr->in_row.v[q + 4 + j] = row;
				if (row < 0)
					continue;
				int32_t li = bl->local[range_of(bl, row)];
				lshard *ls = li >= 0 ? &tr->shards[li] : NULL;
				if (!ls || row < ls->s.row_offset || row >= ls->s.row_offset + ls->s.rows) {
					RS_ERROR("table '%s': rank %d asked for row %lld, which is not held here",
						 tr->cfg->tables[t].name, p, (long long)row);
					return RS_EPEER;
				}
				if (!ls->bdst.n || ls->bdst.v[ls->bdst.n - 1] != (int64_t)o) {
					/* this request's first id in this shard: a new bag */
					RSCHECK(i64_push(&ls->bdst, (int64_t)o));
					RSCHECK(i32_push(&ls->boff, ls->boff.v[ls->boff.n - 1]));
				}
				RSCHECK(i64_push(&ls->bids, row - ls->s.row_offset));
				ls->boff.v[ls->boff.n - 1]++;
			}
			o += (size_t)bl->cols;
			q += 4 + (size_t)cnt;
		}
		tr->scount[p] = sizeof(float) * (o - first);
	}
	*floats = o;
	return RS_OK;
}

/* Pool every local shard's bags on the engine and add the sums into the answers (floats of out). */
static rs_status pool_bags(rs_trainer *tr, float *out, size_t floats)
{
	memset(out, 0, sizeof(float) * floats);
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		size_t nb = ls->bdst.n, cols = (size_t)ls->s.cols;
		rs_err err = {0};
		if (!nb)
			continue;
		RSCHECK(rs_grow(&ls->bval.v, &ls->bval.cap, nb * cols, sizeof(float)));
		rs_status st = tr->engine->ops->forward(tr->engine, &ls->emb, ls->boff.v, (int32_t)nb, ls->bids.v,
							RS_POOL_SUM, ls->bval.v, (int64_t)cols, &err);
		if (st != RS_OK) {
			RS_ERROR("table '%s': %s", tr->cfg->tables[ls->table].name, err.msg);
			return st;
		}
		for (size_t k = 0; k < nb; k++) {
			float *dst = out + ls->bdst.v[k];
			const float *src = ls->bval.v + k * cols;
			for (size_t c = 0; c < cols; c++)
				dst[c] += src[c];
		}
	}
	return RS_OK;
}

/*
 * The owner's side of the backward: every local shard's bags of this step
 * again, each with the gradient of its request (grad, laid out like the
 * answers), one fused optimizer update per distinct row.
 */
static rs_status update_bags(rs_trainer *tr, const float *grad)
{
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		size_t nb = ls->bdst.n, cols = (size_t)ls->s.cols;
		rs_err err = {0};
		if (!nb)
			continue;
		for (size_t k = 0; k < nb; k++)
			memcpy(ls->bval.v + k * cols, grad + ls->bdst.v[k], sizeof(float) * cols);
		rs_status st = tr->engine->ops->backward(tr->engine, &ls->emb, &ls->ws, &ls->grad, ls->boff.v, (int32_t)nb,
							 ls->bids.v, RS_POOL_SUM, ls->bval.v, (int64_t)cols,
							 &tr->cfg->optimizer, tr->updates, &err);
		if (st != RS_OK) {
			RS_ERROR("table '%s': %s", tr->cfg->tables[ls->table].name, err.msg);
			return st;
		}
	}
	return RS_OK;
}

/* Send every bag's IDs to their owners, pool, and gather the partial sums into tr->pooled. */
static rs_status lookup(rs_trainer *tr, int64_t step, int training)
{
	const rs_batch *b = &tr->batch;
	int32_t n = b->size, w = tr->world;
	int32_t *open = malloc(sizeof(int32_t) * (size_t)w);
	int32_t *touched = malloc(sizeof(int32_t) * (size_t)w);
	rs_status st = RS_ENOMEM;
	if (!open || !touched)
		goto out;
	if (n > tr->pooled_cap) {
		float *p = realloc(tr->pooled, sizeof(float) * (size_t)n * (size_t)tr->emb_width);
		if (!p)
			goto out;
		tr->pooled = p;
		if (!(p = realloc(tr->dpooled, sizeof(float) * (size_t)n * (size_t)tr->emb_width)))
			goto out;
		tr->dpooled = p;
		tr->pooled_cap = n;
	}
	memset(tr->pooled, 0, sizeof(float) * (size_t)n * (size_t)tr->emb_width);
	for (int32_t p = 0; p < w; p++) {
		tr->req[p].n = 0;
		tr->sent[p].n = 0;
		open[p] = -1;
	}
	/* requests: one record per (feature, block, sample, owner) */
	for (int32_t f = 0; f < tr->nfeat; f++) {
		const tinfo *ti = &tr->tables[tr->feat_table[f]];
		const int32_t *off = b->offsets[f];
		const int64_t *ids = b->ids[f];
		for (int c = 0; c < ti->nblocks; c++) {
			const block *bl = &ti->blocks[c];
			for (int32_t i = 0; i < n; i++) {
				int nt = 0;
				for (int32_t j = off[i]; j < off[i + 1]; j++) {
					int64_t route = ti->zch ? (int64_t)rs_zch_bucket_of((uint64_t)ids[j], rs_zch_buckets(ti->zch)) * ti->spb
								: ids[j];
					int32_t p = bl->owner[range_of(bl, route)];
					if (open[p] < 0) {
						open[p] = (int32_t)tr->req[p].n;
						touched[nt++] = p;
						if (i64_push(&tr->req[p], f) || i64_push(&tr->req[p], c) ||
						    i64_push(&tr->req[p], i) || i64_push(&tr->req[p], 0) ||
						    sent_push(&tr->sent[p], (sent){f, c, i, bl->cols}))
							goto out;
					}
					if (i64_push(&tr->req[p], ids[j]))
						goto out;
					tr->req[p].v[open[p] + 3]++;
				}
				for (int k = 0; k < nt; k++)
					open[touched[k]] = -1;
			}
		}
	}
	for (int32_t p = 0; p < w; p++)
		tr->scount[p] = tr->req[p].n * sizeof(int64_t);
	RSCHECKGOTO(rs_transport_alltoall_counts(tr->t, tr->scount, tr->rcount), st, out);
	size_t total = 0;
	for (int32_t p = 0; p < w; p++) {
		tr->in_off[p] = total;
		total += tr->rcount[p] / sizeof(int64_t);
	}
	tr->in_off[w] = total;
	if (rs_grow(&tr->in.v, &tr->in.cap, total + 1, sizeof(int64_t)) != RS_OK ||
	    rs_grow(&tr->in_row.v, &tr->in_row.cap, total + 1, sizeof(int64_t)) != RS_OK)
		goto out;
	/* pack the requests contiguously, in rank order */
	i64vec packed = {0};
	size_t all = 0;
	for (int32_t p = 0; p < w; p++)
		all += tr->req[p].n;
	if (rs_grow(&packed.v, &packed.cap, all + 1, sizeof(int64_t)) != RS_OK)
		goto out;
	for (int32_t p = 0, o = 0; p < w; o += (int32_t)tr->req[p].n, p++)
		memcpy(packed.v + o, tr->req[p].v, sizeof(int64_t) * tr->req[p].n);
	st = rs_transport_alltoallv(tr->t, packed.v, tr->scount, tr->in.v, tr->rcount);
	free(packed.v);
	if (st != RS_OK)
		goto out;
	/* answer: the partial pooled sum of each record over the rows held here, in rank order */
	size_t floats = 0;
	RSCHECKGOTO(gather_bags(tr, step, training, &floats), st, out);
	if (rs_grow(&tr->out.v, &tr->out.cap, floats + 1, sizeof(float)) != RS_OK)
		goto out;
	RSCHECKGOTO(pool_bags(tr, tr->out.v, floats), st, out);
	for (int32_t p = 0; p < w; p++)
		tr->rcount[p] = 0;
	for (int32_t p = 0; p < w; p++)
		for (size_t k = 0; k < tr->sent[p].n; k++)
			tr->rcount[p] += sizeof(float) * (size_t)tr->sent[p].v[k].cols;
	size_t back = 0;
	for (int32_t p = 0; p < w; p++)
		back += tr->rcount[p] / sizeof(float);
	if (rs_grow(&tr->back.v, &tr->back.cap, back + 1, sizeof(float)) != RS_OK)
		goto out;
	RSCHECKGOTO(rs_transport_alltoallv(tr->t, tr->out.v, tr->scount, tr->back.v, tr->rcount), st, out);
	/* add the partials into pooled, in rank order */
	const float *in = tr->back.v;
	for (int32_t p = 0; p < w; p++)
		for (size_t k = 0; k < tr->sent[p].n; k++) {
			const sent *s = &tr->sent[p].v[k];
			const block *bl = &tr->tables[tr->feat_table[s->f]].blocks[s->c];
			float *dst = tr->pooled + (size_t)s->i * (size_t)tr->emb_width + (size_t)(tr->feat_off[s->f] + bl->col_offset);
			for (int32_t c = 0; c < s->cols; c++)
				dst[c] += in[c];
			in += s->cols;
		}
	/* mean pooling; data-parallel tables locally */
	for (int32_t f = 0; f < tr->nfeat; f++) {
		const rs_table_config *tc = &tr->cfg->tables[tr->feat_table[f]];
		const tinfo *ti = &tr->tables[tr->feat_table[f]];
		float *base = tr->pooled + tr->feat_off[f];
		if (ti->dp_shard >= 0) {
			rs_err err = {0};
			st = tr->engine->ops->forward(tr->engine, &tr->shards[ti->dp_shard].emb, b->offsets[f], n, b->ids[f],
						      tc->pooling, base, tr->emb_width, &err);
			if (st != RS_OK) {
				RS_ERROR("table '%s': %s", tc->name, err.msg);
				goto out;
			}
		} else if (tc->pooling == RS_POOL_MEAN) {
			for (int32_t i = 0; i < n; i++) {
				int32_t len = b->offsets[f][i + 1] - b->offsets[f][i];
				for (int32_t c = 0; len > 1 && c < tc->dim; c++)
					base[(size_t)i * (size_t)tr->emb_width + (size_t)c] /= (float)len;
			}
		}
	}
	st = RS_OK;
out:
	free(touched);
	free(open);
	return st;
}

/* Data-parallel gradients: all-reduce a dense (rows x dim + touch count) buffer, apply everywhere. */
static rs_status dp_update(rs_trainer *tr, lshard *ls, const rs_optimizer_config *opt)
{
	int64_t rows = ls->emb.nrows;
	int32_t dim = ls->emb.dim;
	float *buf = calloc((size_t)(rows * (dim + 1)), sizeof(float));
	rs_emb_grad all = {.rows = malloc(sizeof(int64_t) * (size_t)rows), .dim = dim, .cap = rows};
	rs_status st = RS_ENOMEM;
	if (!buf || !all.rows)
		goto out;
	for (int64_t k = 0; k < ls->grad.n; k++) {
		int64_t r = ls->grad.rows[k];
		memcpy(buf + r * dim, ls->grad.grad + k * dim, sizeof(float) * (size_t)dim);
		buf[rows * dim + r] = 1;
	}
	rs_emb_grad_clear(&ls->ws, &ls->grad);
	RSCHECKGOTO(rs_transport_allreduce_sum(tr->t, buf, (size_t)(rows * (dim + 1))), st, out);
	/* rows touched anywhere, in row order; their gradients compacted in place */
	all.grad = buf;
	for (int64_t r = 0; r < rows; r++)
		if (buf[rows * dim + r] > 0) {
			memmove(buf + all.n * dim, buf + r * dim, sizeof(float) * (size_t)dim);
			all.rows[all.n++] = r;
		}
	rs_err err = {0};
	if ((st = tr->engine->ops->apply(tr->engine, &ls->emb, &all, opt, tr->updates, &err)) != RS_OK)
		RS_ERROR("table '%s': %s", tr->cfg->tables[ls->table].name, err.msg);
out:
	free(all.rows);
	free(buf);
	return st;
}

rs_status rs_trainer_step(rs_trainer *tr, int64_t step, rs_step_stats *stats)
{
	const rs_config *cfg = tr->cfg;
	int64_t g = cfg->train.global_batch;
	int64_t lo = g * tr->rank / tr->world, hi = g * (tr->rank + 1) / tr->world;
	double loss = 0;

	if (tr->on_host)
		rs__trainer_prefetch(tr, 0);
	RSCHECK(rs_data_fill(tr->data, step * g + lo, (int32_t)(hi - lo), &tr->batch));
	RSCHECK(lookup(tr, step, 1));
	int32_t n = tr->batch.size;
	RSCHECK(rs_dense_forward_backward(tr->dense, tr->batch.dense, tr->pooled, tr->batch.labels, n, tr->dpooled,
					  &loss));
	/* gradients of the mean loss over the global batch */
	float inv = 1.0f / (float)g;
	for (size_t k = 0; k < (size_t)n * (size_t)tr->emb_width; k++)
		tr->dpooled[k] *= inv;
	RSCHECK(rs_transport_allreduce_sum(tr->t, rs_dense_grads(tr->dense), rs_dense_nparams(tr->dense)));
	/* the loss, and a vote to pause after this step (any rank asking pauses all, at the same step) */
	float lp[2] = {(float)loss, tr->pause_requested ? 1.0f : 0.0f};
	RSCHECK(rs_transport_allreduce_sum(tr->t, lp, 2));
	float l = lp[0];
	tr->pause_requested = 0;
	rs_dense_sgd(tr->dense, cfg->dense.lr, inv);
	tr->updates++;

	/* embedding gradients back along the requests */
	float *o = tr->back.v; /* reuse: same sizes as the answers, the other way */
	for (int32_t p = 0; p < tr->world; p++)
		for (size_t k = 0; k < tr->sent[p].n; k++) {
			const sent *s = &tr->sent[p].v[k];
			const rs_table_config *tc = &cfg->tables[tr->feat_table[s->f]];
			const block *bl = &tr->tables[tr->feat_table[s->f]].blocks[s->c];
			const float *src = tr->dpooled + (size_t)s->i * (size_t)tr->emb_width +
					   (size_t)(tr->feat_off[s->f] + bl->col_offset);
			int32_t len = tr->batch.offsets[s->f][s->i + 1] - tr->batch.offsets[s->f][s->i];
			float scale = tc->pooling == RS_POOL_MEAN ? 1.0f / (float)len : 1.0f;
			for (int32_t c = 0; c < s->cols; c++)
				o[c] = src[c] * scale;
			o += s->cols;
		}
	RSCHECK(rs_transport_alltoallv(tr->t, tr->back.v, tr->rcount, tr->out.v, tr->scount));
	/* owners: one fused update per distinct row of each shard (requests in rank order) */
	RSCHECK(update_bags(tr, tr->out.v));
	/* data-parallel tables: the local gradient, all-reduced, applied everywhere */
	for (int f = 0; f < tr->nfeat; f++) {
		const tinfo *ti = &tr->tables[tr->feat_table[f]];
		if (ti->dp_shard < 0)
			continue;
		lshard *ls = &tr->shards[ti->dp_shard];
		RSCHECK(rs_emb_grad_accumulate(&ls->ws, &ls->grad, ls->emb.dim, tr->batch.offsets[f], n,
					       tr->batch.ids[f], cfg->tables[tr->feat_table[f]].pooling,
					       tr->dpooled + tr->feat_off[f], tr->emb_width));
	}
	for (int i = 0; i < tr->nshards; i++)
		if (tr->tables[tr->shards[i].table].dp_shard == i)
			RSCHECK(dp_update(tr, &tr->shards[i], &cfg->optimizer));
	if (stats)
		*stats = (rs_step_stats){.step = step, .loss = (double)l / (double)g, .auc = -1, .pause = lp[1] > 0};
	return RS_OK;
}

rs_status rs_trainer_evaluate(rs_trainer *tr, int64_t n, double *auc, double *logloss)
{
	int64_t lo = n * tr->rank / tr->world, hi = n * (tr->rank + 1) / tr->world;
	int32_t w = tr->world, m = (int32_t)(hi - lo);
	rs_status st = RS_ENOMEM;
	RSCHECK(rs_data_fill(tr->data, RS_EVAL_BASE + lo, m, &tr->batch));
	RSCHECK(lookup(tr, 0, 0));
	float *mine = malloc(sizeof(float) * 2 * (size_t)(m + 1)), *all = malloc(sizeof(float) * 2 * (size_t)(n + 1));
	size_t *sc = malloc(sizeof(size_t) * (size_t)w), *rc = malloc(sizeof(size_t) * (size_t)w);
	float *packed = NULL;
	if (!mine || !all || !sc || !rc)
		goto out;
	RSCHECKGOTO(rs_dense_predict(tr->dense, tr->batch.dense, tr->pooled, m, mine), st, out);
	memcpy(mine + m, tr->batch.labels, sizeof(float) * (size_t)m);
	/* every rank gets every rank's (probabilities, labels) */
	packed = malloc(sizeof(float) * 2 * (size_t)(m + 1) * (size_t)w);
	if (!packed) {
		st = RS_ENOMEM;
		goto out;
	}
	for (int32_t p = 0; p < w; p++) {
		memcpy(packed + (size_t)p * 2 * (size_t)m, mine, sizeof(float) * 2 * (size_t)m);
		sc[p] = sizeof(float) * 2 * (size_t)m;
		rc[p] = sizeof(float) * 2 * (size_t)(n * (p + 1) / w - n * p / w);
	}
	RSCHECKGOTO(rs_transport_alltoallv(tr->t, packed, sc, all, rc), st, out);
	/* regroup: probabilities then labels per rank, into two arrays */
	float *probs = malloc(sizeof(float) * (size_t)(n + 1));
	float *labels = malloc(sizeof(float) * (size_t)(n + 1));
	if (!probs || !labels) {
		free(probs);
		free(labels);
		st = RS_ENOMEM;
		goto out;
	}
	size_t o = 0, k = 0;
	for (int32_t p = 0; p < w; p++) {
		size_t cnt = (size_t)(n * (p + 1) / w - n * p / w);
		memcpy(probs + k, all + o, sizeof(float) * cnt);
		memcpy(labels + k, all + o + cnt, sizeof(float) * cnt);
		o += 2 * cnt;
		k += cnt;
	}
	*auc = rs_auc(probs, labels, (size_t)n);
	*logloss = rs_logloss(probs, labels, (size_t)n);
	free(probs);
	free(labels);
	st = RS_OK;
out:
	free(packed);
	free(rc);
	free(sc);
	free(all);
	free(mine);
	return st;
}

void rs_trainer_request_pause(rs_trainer *tr) { tr->pause_requested = 1; }

double rs_trainer_teacher_auc(rs_trainer *tr, int64_t n)
{
	if (n <= 0 || tr->data->ops->teacher_prob(tr->data, RS_EVAL_BASE) < 0)
		return -1;
	float *p = malloc(sizeof(float) * (size_t)n);
	double auc = -1;
	if (p && rs_data_fill(tr->data, RS_EVAL_BASE, (int32_t)n, &tr->batch) == RS_OK) {
		for (int64_t i = 0; i < n; i++)
			p[i] = (float)tr->data->ops->teacher_prob(tr->data, RS_EVAL_BASE + i);
		auc = rs_auc(p, tr->batch.labels, (size_t)n);
	}
	free(p);
	return auc;
}

rs_status rs_trainer_dump(const rs_trainer *tr, const char *path)
{
	FILE *f = fopen(path, "wb");
	rs_status st = RS_OK;
	if (!f)
		return RS_EIO;
	for (int i = 0; i < tr->nshards && st == RS_OK; i++) {
		const lshard *ls = &tr->shards[i];
		int32_t hdr32[2] = {ls->table, ls->s.col_offset};
		/* record: int32 table, int32 col_offset, int64 row_offset, int64 rows, int32 cols, floats */
		int64_t hdr64[2] = {ls->s.row_offset, ls->s.rows};
		int32_t cols = ls->s.cols;
		if (fwrite(hdr32, sizeof(hdr32), 1, f) != 1 || fwrite(hdr64, sizeof(hdr64), 1, f) != 1 ||
		    fwrite(&cols, sizeof(cols), 1, f) != 1)
			st = RS_EIO;
		for (int64_t k = 0; st == RS_OK && k < ls->s.rows * cols; k++) {
			float v = rs_emb_get(ls->emb.weights, ls->emb.dtype, k);
			if (fwrite(&v, sizeof(v), 1, f) != 1)
				st = RS_EIO;
		}
	}
	if (st == RS_OK && tr->rank == 0) {
		int32_t hdr32[2] = {-1, 0};
		int64_t hdr64[2] = {0, 1};
		int32_t cols = (int32_t)rs_dense_nparams(tr->dense);
		if (fwrite(hdr32, sizeof(hdr32), 1, f) != 1 || fwrite(hdr64, sizeof(hdr64), 1, f) != 1 ||
		    fwrite(&cols, sizeof(cols), 1, f) != 1 ||
		    fwrite(rs_dense_params(tr->dense), sizeof(float), (size_t)cols, f) != (size_t)cols)
			st = RS_EIO;
	}
	if (fclose(f) != 0)
		st = RS_EIO;
	return st;
}

/* ---- checkpoints -------------------------------------------------------------------- */

static rs_st_dtype st_dtype(rs_dtype d)
{
	return d == RS_DTYPE_FP16 ? RS_ST_F16 : d == RS_DTYPE_BF16 ? RS_ST_BF16 : RS_ST_F32;
}

static rs_status save_shard(const rs_trainer *tr, const lshard *ls, const char *dir, rs_err *err)
{
	const rs_config *cfg = tr->cfg;
	const rs_table_config *tc = &cfg->tables[ls->table];
	const tinfo *ti = &tr->tables[ls->table];
	int64_t rows = ls->s.rows, cols = ls->s.cols;
	rs_st_tensor_in t[4];
	int n = 0;
	float *m = NULL, *v = NULL;
	int64_t *ids = NULL;
	rs_status st = RS_ENOMEM;
	char file[512], path[4096];

	t[n++] = (rs_st_tensor_in){"weight", st_dtype(tc->dtype), 2, {rows, cols}, ls->emb.weights};
	if (cfg->optimizer.kind == RS_OPT_ROWWISE_ADAGRAD) {
		t[n++] = (rs_st_tensor_in){"momentum1", RS_ST_F32, 1, {rows}, ls->emb.state};
	} else if (cfg->optimizer.kind == RS_OPT_ADAM) {
		/* the state interleaves m and v per row; the file keeps them apart, as PyTorch names them */
		m = malloc(sizeof(float) * (size_t)(rows * cols + 1));
		v = malloc(sizeof(float) * (size_t)(rows * cols + 1));
		if (!m || !v)
			goto out;
		for (int64_t r = 0; r < rows; r++) {
			memcpy(m + r * cols, ls->emb.state + r * 2 * cols, sizeof(float) * (size_t)cols);
			memcpy(v + r * cols, ls->emb.state + r * 2 * cols + cols, sizeof(float) * (size_t)cols);
		}
		t[n++] = (rs_st_tensor_in){"exp_avg", RS_ST_F32, 2, {rows, cols}, m};
		t[n++] = (rs_st_tensor_in){"exp_avg_sq", RS_ST_F32, 2, {rows, cols}, v};
	}
	if (ti->zch) {
		ids = malloc(sizeof(int64_t) * (size_t)(rows + 1));
		if (!ids)
			goto out;
		for (int64_t r = 0; r < rows; r++) {
			int live;
			uint64_t id = rs_zch_slot_id(ti->zch, ls->s.row_offset + r, &live);
			ids[r] = live ? (int64_t)id : -1;
		}
		t[n++] = (rs_st_tensor_in){"zch_ids", RS_ST_I64, 1, {rows}, ids};
	}
	json_t *meta = json_pack("{s:s, s:s, s:s, s:s}", "table", tc->name, "sharding",
				 rs_sharding_name(tr->plan->tables[ls->table].sharding), "row_offset", "", "col_offset", "");
	if (!meta)
		goto out;
	char buf[32];
	snprintf(buf, sizeof(buf), "%lld", (long long)ls->s.row_offset);
	json_object_set_new(meta, "row_offset", json_string(buf));
	snprintf(buf, sizeof(buf), "%d", ls->s.col_offset);
	json_object_set_new(meta, "col_offset", json_string(buf));
	rs_checkpoint_shard_file(tc, &ls->s, file, sizeof(file));
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	st = rs_st_write(path, t, n, meta, err);
	json_decref(meta);
out:
	free(ids);
	free(v);
	free(m);
	return st;
}

rs_status rs_trainer_save(rs_trainer *tr, const char *dir, int64_t step, rs_err *err)
{
	rs_status st = RS_OK;
	rs__trainer_prefetch(tr, 1);
	for (int i = 0; i < tr->nshards && st == RS_OK; i++) {
		const lshard *ls = &tr->shards[i];
		if (tr->tables[ls->table].dp_shard == i && tr->rank != 0)
			continue; /* one copy of a data-parallel table is enough */
		st = save_shard(tr, ls, dir, err);
	}
	if (st == RS_OK && tr->rank == 0) {
		char path[4096];
		rs_st_tensor_in d = {"params", RS_ST_F32, 1, {(int64_t)rs_dense_nparams(tr->dense)}, rs_dense_params(tr->dense)};
		snprintf(path, sizeof(path), "%s/dense.safetensors", dir);
		st = rs_st_write(path, &d, 1, NULL, err);
		if (st == RS_OK)
			st = rs_checkpoint_write_index(dir, tr->cfg, tr->plan, step, rs_dense_nparams(tr->dense), err);
	}
	/* everyone's files exist before anyone reports the checkpoint done */
	rs_status bst = rs_transport_barrier(tr->t);
	if (st == RS_OK && bst != RS_OK)
		rs_err_set(err, bst, "checkpoint: waiting for the other ranks: %s", rs_transport_error(tr->t));
	return st != RS_OK ? st : bst;
}


/* ---- loading a checkpoint ----------------------------------------------------------- */

/* The index entry of table `name`, or NULL. */
static json_t *index_table(json_t *index, const char *name)
{
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(index, "tables"), i, t) {
		const char *n = json_string_value(json_object_get(t, "name"));
		if (n && !strcmp(n, name))
			return t;
	}
	return NULL;
}

/* Tensor `name` of f, checked to be dtype with `rows` rows of `cols` (cols 0: a vector); its index. */
static rs_status find_tensor(const rs_st_file *f, const char *name, rs_st_dtype dtype, int64_t rows, int64_t cols,
			     int *out, rs_err *err)
{
	int k = rs_st_find(f, name);
	if (k < 0)
		return rs_err_set(err, RS_EINVAL, "%s: no tensor '%s'", f->path, name);
	const rs_st_tensor *t = &f->tensors[k];
	if (t->dtype != dtype || t->ndim != (cols ? 2 : 1) || t->shape[0] != rows || (cols && t->shape[1] != cols))
		return rs_err_set(err, RS_EINVAL, "%s: tensor '%s' is not %s [%lld%s%lld]", f->path, name,
				  rs_st_dtype_name(dtype), (long long)rows, cols ? ", " : "", (long long)cols);
	*out = k;
	return RS_OK;
}

/* Rows [lo, hi) of the checkpoint shard (file f, starting at table row r0) into local shard ls. */
static rs_status load_rows(const rs_trainer *tr, const lshard *ls, const rs_st_file *f, int64_t r0, int64_t nr,
			   int64_t lo, int64_t hi, rs_err *err)
{
	const rs_config *cfg = tr->cfg;
	int64_t cols = ls->s.cols, n = hi - lo, at = lo - ls->s.row_offset, from = lo - r0;
	size_t wb = (size_t)cols * (size_t)rs_dtype_size(ls->emb.dtype);
	int k;
	RSCHECK(find_tensor(f, "weight", st_dtype(ls->emb.dtype), nr, cols, &k, err));
	RSCHECK(rs_st_read_range(f, k, (uint64_t)from * wb, (uint64_t)n * wb, (char *)ls->emb.weights + (size_t)at * wb,
				 err));
	if (cfg->optimizer.kind == RS_OPT_ROWWISE_ADAGRAD) {
		RSCHECK(find_tensor(f, "momentum1", RS_ST_F32, nr, 0, &k, err));
		RSCHECK(rs_st_read_range(f, k, (uint64_t)from * 4, (uint64_t)n * 4, ls->emb.state + at, err));
	} else if (cfg->optimizer.kind == RS_OPT_ADAM) {
		/* the file keeps m and v apart; the shard interleaves them per row */
		static const char *const names[2] = {"exp_avg", "exp_avg_sq"};
		float *tmp = malloc(sizeof(float) * (size_t)(n * cols + 1));
		rs_status st = tmp ? RS_OK : RS_ENOMEM;
		for (int which = 0; st == RS_OK && which < 2; which++) {
			st = find_tensor(f, names[which], RS_ST_F32, nr, cols, &k, err);
			if (st == RS_OK)
				st = rs_st_read_range(f, k, (uint64_t)(from * cols) * 4, (uint64_t)(n * cols) * 4, tmp, err);
			for (int64_t r = 0; st == RS_OK && r < n; r++)
				memcpy(ls->emb.state + (at + r) * 2 * cols + which * cols, tmp + r * cols, sizeof(float) * (size_t)cols);
		}
		free(tmp);
		RSCHECK(st);
	}
	return RS_OK;
}

/* Fill local shard ls from the checkpoint's shards of its table that overlap it. */
static rs_status load_shard(const rs_trainer *tr, const lshard *ls, const char *dir, json_t *jt, rs_err *err)
{
	const rs_table_config *tc = &tr->cfg->tables[ls->table];
	int64_t covered = 0;
	size_t i;
	json_t *js;
	json_array_foreach(json_object_get(jt, "shards"), i, js) {
		const char *file = json_string_value(json_object_get(js, "file"));
		json_t *v[4] = {json_object_get(js, "row_offset"), json_object_get(js, "rows"), json_object_get(js, "col_offset"),
				json_object_get(js, "cols")};
		if (!file || strchr(file, '/') || !json_is_integer(v[0]) || !json_is_integer(v[1]) || !json_is_integer(v[2]) ||
		    !json_is_integer(v[3]))
			return rs_err_set(err, RS_EINVAL, "%s/index.json: table '%s': shard %zu is malformed", dir, tc->name, i);
		int64_t r0 = json_integer_value(v[0]), nr = json_integer_value(v[1]);
		int64_t c0 = json_integer_value(v[2]), nc = json_integer_value(v[3]);
		if (r0 < 0 || nr < 1 || r0 + nr > tc->rows || c0 < 0 || nc < 1 || c0 + nc > tc->dim)
			return rs_err_set(err, RS_EINVAL, "%s/index.json: table '%s': shard %zu lies outside the table", dir,
					  tc->name, i);
		int64_t lo = r0 > ls->s.row_offset ? r0 : ls->s.row_offset;
		int64_t hi = r0 + nr < ls->s.row_offset + ls->s.rows ? r0 + nr : ls->s.row_offset + ls->s.rows;
		int cols_overlap = c0 < ls->s.col_offset + ls->s.cols && ls->s.col_offset < c0 + nc;
		if (lo >= hi || !cols_overlap)
			continue;
		if (c0 != ls->s.col_offset || nc != ls->s.cols)
			return rs_err_set(err, RS_EUNSUPPORTED,
					  "%s: table '%s': the checkpoint's column blocks (%lld+%lld) are not this plan's (%d+%d)",
					  dir, tc->name, (long long)c0, (long long)nc, ls->s.col_offset, ls->s.cols);
		char path[4096];
		rs_st_file *f;
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		RSCHECK(rs_st_open(path, &f, err));
		rs_status st = load_rows(tr, ls, f, r0, nr, lo, hi, err);
		rs_st_close(f);
		RSCHECK(st);
		covered += hi - lo;
	}
	if (covered != ls->s.rows)
		return rs_err_set(err, RS_EINVAL, "%s: table '%s': the checkpoint covers %lld of rows %lld..%lld once (%lld rows)",
				  dir, tc->name, (long long)covered, (long long)ls->s.row_offset,
				  (long long)(ls->s.row_offset + ls->s.rows - 1), (long long)ls->s.rows);
	return RS_OK;
}

rs_status rs_trainer_load(rs_trainer *tr, const char *dir, int64_t *step, rs_err *err)
{
	const rs_config *cfg = tr->cfg;
	json_t *index;
	rs_st_file *f = NULL;
	rs_status st;
	RSCHECK(rs_checkpoint_read_index(dir, &index, step, err));
	rs__trainer_prefetch(tr, 1);
	for (int i = 0; i < tr->nshards; i++) {
		const lshard *ls = &tr->shards[i];
		const rs_table_config *tc = &cfg->tables[ls->table];
		json_t *jt = index_table(index, tc->name);
		const char *dt = json_string_value(json_object_get(jt, "dtype"));
		const char *opt = json_string_value(json_object_get(jt, "optimizer"));
		if (!jt || json_integer_value(json_object_get(jt, "rows")) != tc->rows ||
		    json_integer_value(json_object_get(jt, "dim")) != tc->dim || !dt || strcmp(dt, rs_dtype_name(tc->dtype)) ||
		    !opt || strcmp(opt, rs_optimizer_name(cfg->optimizer.kind))) {
			st = rs_err_set(err, RS_EINVAL, "%s: table '%s': not in the checkpoint with this config's shape, dtype "
					"and optimizer", dir, tc->name);
			goto out;
		}
		if (tc->has_zch) {
			st = rs_err_set(err, RS_EUNSUPPORTED, "%s: table '%s': loading ZCH identities from a checkpoint is not "
					"built yet", dir, tc->name);
			goto out;
		}
		RSCHECKGOTO(load_shard(tr, ls, dir, jt, err), st, out);
	}
	char path[4096];
	int k;
	size_t n = rs_dense_nparams(tr->dense);
	snprintf(path, sizeof(path), "%s/dense.safetensors", dir);
	RSCHECKGOTO(rs_st_open(path, &f, err), st, out);
	RSCHECKGOTO(find_tensor(f, "params", RS_ST_F32, (int64_t)n, 0, &k, err), st, out);
	RSCHECKGOTO(rs_st_read(f, k, rs_dense_params(tr->dense), err), st, out);
	tr->updates = *step; /* one optimizer update per step */
	st = RS_OK;
out:
	rs_st_close(f);
	json_decref(index);
	return st;
}
