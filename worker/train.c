/*
 * train.c - see train.h: set-up and the step. The step's lookup is in
 * train_lookup.c (with the wire format of requests and answers), a
 * deterministic step's exact sums in train_exact.c, evaluation in
 * train_eval.c, checkpoints in train_ckpt.c, live resharding in reshard.c,
 * 2D replica groups in replica.c; they share the trainer's insides through
 * train_internal.h.
 */
#include "worker/train_internal.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
			if (s->rank != tr->rank)
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
		/* routing: column blocks of this rank's replica group, row ranges sorted */
		const rs_shard **v = malloc(sizeof(rs_shard *) * (size_t)tp->nshards);
		int nv = 0;
		if (!v)
			return RS_ENOMEM;
		for (int k = 0; k < tp->nshards; k++)
			if (tp->shards[k].replica == tr->rank % tr->replicas)
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

void rs__mem_unref(rs__mem *m) { rs__later_mem_unref(NULL, m); }

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

int rs__counted(const rs_trainer *tr, int i)
{
	return rs__is_dp(tr, i) ? tr->rank == 0 : tr->shards[i].s.replica == 0;
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

int rs__range_of(const block *b, int64_t row)
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

rs_status rs_trainer_create_for_load(const rs_config *cfg, const rs_plan *plan, rs_transport *t, rs_engine *engine,
				     rs_trainer **out, rs_err *err)
{
	return rs__trainer_alloc(cfg, plan, t, engine, NULL, 0, out, err);
}

rs_status rs__trainer_alloc(const rs_config *cfg, const rs_plan *plan, rs_transport *t, rs_engine *engine,
			    rs_data *data, int init, rs_trainer **out, rs_err *err)
{
	rs_trainer *tr = calloc(1, sizeof(*tr));
	rs_status st = RS_OK;
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
	if (plan->world.ranks != t->world) {
		free(tr);
		return rs_err_set(err, RS_EINVAL, "trainer: the plan's world (%d ranks) is not the transport's (%d)",
				  plan->world.ranks, t->world);
	}
	tr->replicas = plan->world.ranks / plan->world.sharding_group;
	for (int i = 0; i < cfg->ntables; i++)
		tr->nfeat += cfg->tables[i].nfeatures;
	tr->feat_table = malloc(sizeof(int) * (size_t)tr->nfeat);
	tr->feat_off = malloc(sizeof(int32_t) * (size_t)tr->nfeat);
	tr->req = calloc((size_t)tr->world, sizeof(i64vec));
	tr->sent = calloc((size_t)tr->world, sizeof(sentvec));
	tr->scount = calloc((size_t)tr->world, sizeof(size_t));
	tr->rcount = calloc((size_t)tr->world, sizeof(size_t));
	tr->in_off = calloc((size_t)tr->world + 1, sizeof(size_t));
	if (!tr->feat_table || !tr->feat_off || !tr->req || !tr->sent || !tr->scount || !tr->rcount || !tr->in_off)
		RSFAILGOTO(st, RS_ENOMEM, fail);
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
	/*
	 * The dense products on the engine (cuBLAS), except in deterministic
	 * mode: there the host's loops compute them on every engine, so that
	 * CPU and GPU workers reach the same bits (cuBLAS sums in its own
	 * order); the dense network is small, and a micro-batch's products are
	 * too small to repay their copies to the device and back.
	 */
	if (tr->engine->ops->gemm && !cfg->train.deterministic)
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

rs_status rs__dirty_start(rs_trainer *tr)
{
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		free(ls->dirty.bit);
		if (!rs__marks_init(&ls->dirty, ls->s.rows, 0)) {
			rs__dirty_stop(tr);
			return RS_ENOMEM;
		}
	}
	return RS_OK;
}

void rs__dirty_stop(rs_trainer *tr)
{
	for (int i = 0; tr && i < tr->nshards; i++) {
		free(tr->shards[i].dirty.bit);
		tr->shards[i].dirty = (rs__marks){0};
	}
	rs__rowsums_drop(tr); /* unmarked from now on */
}

void rs__dirty_clear(lshard *ls, int64_t row, int64_t n)
{
	if (ls->dirty.bit)
		rs__marks_unset_range(&ls->dirty, row, n);
}

static void drop_prepared(rs_trainer *tr);

void rs_trainer_destroy(rs_trainer *tr) { rs__trainer_destroy_later(tr, NULL); }

void rs__trainer_take_buffers(rs_trainer *to, rs_trainer *from)
{
#define TAKE(f)                                                                                                        \
	do {                                                                                                           \
		if (!to->f.v) {                                                                                        \
			to->f = from->f, to->f.n = 0;                                                                  \
			from->f.v = NULL, from->f.n = from->f.cap = 0;                                                 \
		}                                                                                                      \
	} while (0)
	TAKE(in);
	TAKE(in_row);
	TAKE(zids);
	TAKE(zrows);
	TAKE(zfresh);
	TAKE(idsrc);
	TAKE(exact.keep);
	TAKE(exact.q);
	TAKE(out);
	TAKE(back);
#undef TAKE
}

void rs__trainer_destroy_later(rs_trainer *tr, rs__later *later)
{
	if (!tr)
		return;
	rs__later_now(tr->pending); /* never committed */
	tr->pending = NULL;
	rs__later_wait(tr); /* first: its thread may give back pages of memory unmapped below */
	drop_prepared(tr);
	rs__rowsums_drop_later(tr, later);
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		rs__later_mem_unref(later, ls->wmem);
		rs__later_mem_unref(later, ls->smem);
		rs__later_free(later, ls->ws.slot_of_row); /* a word per row */
		ls->ws.slot_of_row = NULL;
		rs_emb_workspace_free(&ls->ws);
		rs_emb_grad_free(&ls->grad);
		free(ls->boff.v);
		free(ls->bids.v);
		free(ls->bdst.v);
		free(ls->bval.v);
		rs__later_free(later, ls->dirty.bit);
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
	/* the step's buffers that may be large (the exact sums' kept gradients: up to RS_EXACT_KEEP_BYTES) go later */
	rs__later_free(later, tr->zundo.v);
	free(tr->zids.v);
	free(tr->zrows.v);
	free(tr->zfresh.v);
	free(tr->idsrc.v);
	rs__later_free(later, tr->exact.keep.v);
	rs__later_free(later, tr->exact.q.v);
	rs__later_free(later, tr->out.v);
	rs__later_free(later, tr->back.v);
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
 * The rows of n requested ids of ZCH table t at their owner (rows[i]): their
 * slots, in one call of the table, inserted when training (-1: an unknown
 * id when evaluating, or an overflow). A slot given to a new id gets fresh
 * values: a function of (seed, table, id), so that whichever slot an id
 * lands in, it starts the same.
 */
rs_status rs__resolve(rs_trainer *tr, int t, const int64_t *ids, size_t n, int64_t step, int training, int64_t *rows)
{
	tinfo *ti = &tr->tables[t];
	const uint64_t *raw = (const uint64_t *)ids; /* the same bits: raw IDs are unsigned */
	if (!training) {
		rs_zch_find(ti->zch, raw, n, rows);
		return RS_OK;
	}
	size_t nfresh = 0;
	RSCHECK(rs_grow(&tr->zfresh.v, &tr->zfresh.cap, n + 1, sizeof(int64_t)));
	rs_zch_find_or_insert(ti->zch, raw, n, (uint32_t)step, rows, tr->zfresh.v, &nfresh);
	for (size_t k = 0; k < nfresh; k++) {
		int64_t slot = tr->zfresh.v[k];
		int live;
		uint64_t id = rs_zch_slot_id(ti->zch, slot, &live);
		const block *bl = &ti->blocks[0];
		lshard *ls = &tr->shards[bl->local[rs__range_of(bl, slot)]];
		int64_t local = slot - ls->s.row_offset;
		int64_t sf = rs_emb_state_floats(tr->cfg->optimizer.kind, ls->s.cols);
		rs__zch_keep_row(tr, ls, local);
		for (int32_t c = 0; c < ls->s.cols; c++)
			rs_emb_set(ls->emb.weights, ls->emb.dtype, local * ls->s.cols + c,
				   init_value(tr->cfg->train.seed, t, (int64_t)id, ls->s.col_offset + c, tr->cfg->tables[t].rows));
		if (sf)
			memset(ls->emb.state + local * sf, 0, sizeof(float) * (size_t)sf);
	}
	return RS_OK;
}

/*
 * st, unchanged; a failure also goes into err, saying what failed (unless a
 * deeper call said more already: the first message wins).
 */
rs_status rs__said(rs_status st, const char *what, rs_err *err)
{
	if (st != RS_OK)
		rs_err_set(err, st, "%s: %s", what, rs_status_str(st));
	return st;
}

/* The same for a call over the transport: err gets what it was and the transport's own words. */
rs_status rs__said_transport(const rs_trainer *tr, rs_status st, const char *what, rs_err *err)
{
	if (st != RS_OK)
		rs_err_set(err, st, "%s: %s", what, tr->t->error[0] ? rs_transport_error(tr->t) : rs_status_str(st));
	return st;
}

rs_status rs__engine_said(const rs_trainer *tr, int table, rs_status st, const rs_err *e, rs_err *err)
{
	if (st != RS_OK)
		rs_err_set(err, st, "table '%s': %s", tr->cfg->tables[table].name, e->msg[0] ? e->msg : rs_status_str(st));
	return st;
}

/*
 * The owner's side of the backward: every local shard's bags of this step
 * again, each with the gradient of its request (grad, laid out like the
 * answers), one fused optimizer update per distinct row.
 */
static rs_status update_bags(rs_trainer *tr, const float *grad, rs_err *err)
{
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		size_t nb = ls->bdst.n, cols = (size_t)ls->s.cols;
		rs_err e = {0};
		if (!nb)
			continue;
		for (size_t k = 0; k < nb; k++)
			memcpy(ls->bval.v + k * cols, grad + ls->bdst.v[k], sizeof(float) * cols);
		RSCHECK(rs__engine_said(tr, ls->table,
				    tr->engine->ops->backward(tr->engine, &ls->emb, &ls->ws, &ls->grad, ls->boff.v,
							      (int32_t)nb, ls->bids.v, RS_POOL_SUM, ls->bval.v,
							      (int64_t)cols, &tr->cfg->optimizer, tr->updates, &e),
				    &e, err));
		rs__dirty_mark_rows(ls, ls->bids.v, ls->boff.v[nb]); /* and its cached hash stale */
	}
	return RS_OK;
}


/* Data-parallel gradients, step one: the local ones in a dense (rows x dim + touch count) buffer, all-reduced. */
static rs_status dp_reduce(rs_trainer *tr, lshard *ls, float **out, rs_err *err)
{
	int64_t rows = ls->emb.nrows;
	int32_t dim = ls->emb.dim;
	float *buf = calloc((size_t)(rows * (dim + 1)), sizeof(float));
	*out = NULL;
	if (!buf)
		return rs__said(RS_ENOMEM, "the data-parallel gradients", err);
	for (int64_t k = 0; k < ls->grad.n; k++) {
		int64_t r = ls->grad.rows[k];
		memcpy(buf + r * dim, ls->grad.grad + k * dim, sizeof(float) * (size_t)dim);
		buf[rows * dim + r] = 1;
	}
	rs_emb_grad_clear(&ls->ws, &ls->grad);
	rs_status st = rs__said_transport(tr, rs_transport_allreduce_sum(tr->t, buf, (size_t)(rows * (dim + 1))),
				      "the data-parallel gradients (all-reduce)", err);
	if (st != RS_OK)
		free(buf);
	else
		*out = buf;
	return st;
}

/* Step two, on every rank alike: the rows touched anywhere, in row order, updated (consumes buf). */
static rs_status dp_apply(rs_trainer *tr, lshard *ls, float *buf, rs_err *err)
{
	int64_t rows = ls->emb.nrows;
	int32_t dim = ls->emb.dim;
	rs_emb_grad all = {.rows = malloc(sizeof(int64_t) * (size_t)rows + 1), .grad = buf, .dim = dim, .cap = rows};
	rs_err e = {0};
	rs_status st = RS_OK;
	if (!all.rows)
		RSFAILGOTO(st, RS_ENOMEM, out);
	for (int64_t r = 0; r < rows; r++)
		if (buf[rows * dim + r] > 0) {
			memmove(buf + all.n * dim, buf + r * dim, sizeof(float) * (size_t)dim);
			all.rows[all.n++] = r;
		}
	st = rs__engine_said(tr, ls->table, tr->engine->ops->apply(tr->engine, &ls->emb, &all, &tr->cfg->optimizer, tr->updates, &e),
			 &e, err);
out:
	free(all.rows);
	free(buf);
	return rs__said(st, "the data-parallel update", err);
}

/*
 * The step's updates, once every collective of the step is done: the dense
 * network, the owners' rows (one fused update per distinct row, requests in
 * rank order; 2D with exact sync: every group's gradients, rg), the
 * data-parallel tables (dp[i]: shard i's all-reduced gradients, consumed).
 * A failure here leaves the model part-updated: the trainer is spoiled.
 */
static rs_status apply_step(rs_trainer *tr, float inv, rs__replica_grads *rg, float **dp, rs_err *err)
{
	rs_status st = RS_OK;
	rs_dense_sgd(tr->dense, tr->cfg->dense.lr, inv);
	tr->updates++;
	st = rg->all ? rs__replica_apply(tr, rg, err) : update_bags(tr, tr->out.v, err);
	for (int i = 0; i < tr->nshards; i++) {
		if (st == RS_OK && dp[i])
			st = dp_apply(tr, &tr->shards[i], dp[i], err);
		else
			free(dp[i]);
		dp[i] = NULL;
	}
	tr->spoiled |= st != RS_OK;
	return st;
}

/* Keep a step whose votes failed (rg's and dp's contents are taken). */
static void prepare(rs_trainer *tr, int64_t step, rs__replica_grads *rg, float **dp)
{
	rs__replica_grads *keep = malloc(sizeof(*keep));
	if (!keep) { /* then it cannot catch up: healing gives it the rows again */
		rs__replica_grads_free(rg);
		for (int i = 0; i < tr->nshards; i++)
			free(dp[i]);
		free(dp);
		return;
	}
	*keep = *rg;
	*rg = (rs__replica_grads){0};
	tr->prepared.step = step, tr->prepared.rg = keep, tr->prepared.dp = dp;
}

static void drop_prepared(rs_trainer *tr)
{
	for (int i = 0; tr->prepared.dp && i < tr->nshards; i++)
		free(tr->prepared.dp[i]);
	free(tr->prepared.dp);
	if (tr->prepared.rg)
		rs__replica_grads_free(tr->prepared.rg);
	free(tr->prepared.rg);
	tr->prepared.step = -1, tr->prepared.rg = NULL, tr->prepared.dp = NULL;
}

int64_t rs_trainer_prepared(const rs_trainer *tr) { return tr->prepared.rg ? tr->prepared.step + 1 : 0; }

rs_status rs_trainer_catch_up(rs_trainer *tr, rs_err *err)
{
	if (!tr->prepared.rg)
		return rs_err_set(err, RS_EINVAL, "no step prepared to catch up");
	float inv = 1.0f / (float)tr->cfg->train.global_batch;
	rs_status st = apply_step(tr, inv, tr->prepared.rg, tr->prepared.dp, err);
	drop_prepared(tr);
	return st;
}

/*
 * The step. Every collective comes before the first update (apply_step),
 * so a step that fails on a lost peer leaves the weights, the optimizer
 * state and the dense network as the previous step left them, and the ZCH
 * slots its lookup gave out are taken back (rs__zch_undo). A 2D world can
 * then rebuild the lost rows from their replicas and train the step again
 * (rs_trainer_can_heal). The last collective is the votes' all-reduce: a
 * rank whose votes fail keeps the step prepared, ZCH slots included, and
 * can catch up to it (rs_trainer_catch_up).
 */
static rs_status one_step(rs_trainer *tr, int64_t step, rs_step_stats *stats, rs_err *err)
{
	const rs_config *cfg = tr->cfg;
	int64_t g = cfg->train.global_batch;
	int64_t lo, hi;
	int det = cfg->train.deterministic;
	int every = cfg->cluster.replica_sync_every;
	double loss = 0;
	rs__replica_grads rg = {0};
	float **dp = NULL;
	rs_status st = RS_OK;

	if (tr->on_host)
		rs__trainer_prefetch(tr, 0);
	rs__step_samples(tr, &lo, &hi);
	RSCHECK(rs__said(rs_data_fill(tr->data, step * g + lo, (int32_t)(hi - lo), &tr->batch), "reading the step's samples",
		     err));
	RSCHECK(rs__lookup(tr, step, 1, err));
	if (tr->zch_lost == step + 1) {
		tr->zch_lost = 0;
		return rs_err_set(err, RS_EIO, "the step: lost right after its lookup (a test's)");
	}
	int32_t n = tr->batch.size;
	float inv = 1.0f / (float)g; /* gradients of the mean loss over the global batch */
	if (!(dp = calloc((size_t)tr->nshards + 1, sizeof(float *))))
		return rs__said(RS_ENOMEM, "the data-parallel gradients", err);
	if (det) {
		/* the dense gradients, the loss and the data-parallel gradients, summed exactly */
		RSCHECKGOTO(rs__exact_step(tr, inv, dp, &loss, err), st, out);
	} else {
		/* the backward adds into the gradients: nothing of a step that failed after it may stay */
		memset(rs_dense_grads(tr->dense), 0, sizeof(float) * rs_dense_nparams(tr->dense));
		RSCHECKGOTO(rs__said(rs_dense_forward_backward(tr->dense, tr->batch.dense, tr->pooled, tr->batch.labels, n,
							       tr->dpooled, &loss),
				     "the dense network", err),
			    st, out);
		for (size_t k = 0; k < (size_t)n * (size_t)tr->emb_width; k++)
			tr->dpooled[k] *= inv;
		RSCHECKGOTO(rs__said_transport(tr, rs_transport_allreduce_sum(tr->t, rs_dense_grads(tr->dense),
									      rs_dense_nparams(tr->dense)),
					       "the dense gradients (all-reduce)", err),
			    st, out);
	}
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
	RSCHECKGOTO(rs__said_transport(tr, rs_transport_alltoallv(tr->t, tr->back.v, tr->rcount, tr->out.v, tr->scount),
				       "the embedding gradients (all-to-all)", err),
		    st, out);
	if (tr->replicas > 1 && !every)
		RSCHECKGOTO(rs__replica_exchange(tr, tr->out.v, &rg, err), st, out);
	/* data-parallel tables: the local gradient, all-reduced (deterministic: done above) */
	for (int i = 0; !det && i < tr->nshards; i++) /* nothing left from a step that failed */
		if (rs__is_dp(tr, i))
			rs_emb_grad_clear(&tr->shards[i].ws, &tr->shards[i].grad);
	for (int f = 0; !det && f < tr->nfeat; f++) {
		const tinfo *ti = &tr->tables[tr->feat_table[f]];
		if (ti->dp_shard < 0)
			continue;
		lshard *ls = &tr->shards[ti->dp_shard];
		RSCHECKGOTO(rs__said(rs_emb_grad_accumulate(&ls->ws, &ls->grad, ls->emb.dim, tr->batch.offsets[f], n,
							tr->batch.ids[f], cfg->tables[tr->feat_table[f]].pooling,
							tr->dpooled + tr->feat_off[f], tr->emb_width),
				 "the data-parallel gradients", err),
			    st, out);
	}
	for (int i = 0; !det && i < tr->nshards; i++)
		if (rs__is_dp(tr, i))
			RSCHECKGOTO(dp_reduce(tr, &tr->shards[i], &dp[i], err), st, out);
	/* last: the loss, and votes to pause and to checkpoint after this step (any rank asking decides for all, at
	 * the same step), to begin a pre-copy (every rank) and on its pace (the mean) */
	float lp[5] = {det ? 0.0f : (float)loss, tr->pause_requested ? 1.0f : 0.0f, tr->checkpoint_requested ? 1.0f : 0.0f,
		       tr->precopy_ready ? 1.0f : 0.0f, tr->precopy_rate};
	st = rs__said_transport(tr, rs_transport_allreduce_sum(tr->t, lp, 5), "the votes (all-reduce)", err);
	if (st == RS_OK && tr->vote_lost == step + 1) { /* once */
		tr->vote_lost = 0;
		st = rs_err_set(err, RS_EIO, "the votes (all-reduce): lost after they came through (a test's)");
	}
	if (st != RS_OK) {
		prepare(tr, step, &rg, dp);
		dp = NULL;
		goto out;
	}
	int precopy = lp[3] == (float)tr->world; /* every rank: small integers, exact in a float */
	double l = det ? loss : (double)lp[0];
	tr->pause_requested = tr->checkpoint_requested = 0;
	if (precopy)
		tr->precopy_ready = 0;
	RSCHECKGOTO(apply_step(tr, inv, &rg, dp, err), st, out);
	/* local SGD's sync comes after the updates it averages: a loss during it spoils the step */
	if (tr->replicas > 1 && every && (step + 1) % every == 0 && (st = rs__replica_average(tr, err)) != RS_OK) {
		tr->spoiled = 1;
		goto out;
	}
	if (stats)
		*stats = (rs_step_stats){.step = step, .loss = l / (double)g, .auc = -1, .pause = lp[1] > 0,
					 .checkpoint = lp[2] > 0, .precopy = precopy, .precopy_rate = lp[4] / (float)tr->world};
out:
	for (int i = 0; dp && i < tr->nshards; i++)
		free(dp[i]);
	free(dp);
	rs__replica_grads_free(&rg);
	return st;
}

/* Take a failed or dropped step's ZCH changes back; when that cannot be done, the model cannot heal. */
static rs_status undo_step(rs_trainer *tr, int64_t step)
{
	rs_status st = rs__zch_undo(tr);
	if (st != RS_OK) {
		RS_WARN("step %lld's ZCH changes cannot be taken back (%s): the model cannot heal", (long long)step,
			st == RS_ENOMEM ? "out of memory keeping them" : "the table's buckets changed since");
		tr->spoiled = 1;
	}
	return st;
}

rs_status rs_trainer_drop_prepared(rs_trainer *tr, rs_err *err)
{
	rs_status st = tr->prepared.rg ? undo_step(tr, tr->prepared.step) : RS_OK;
	drop_prepared(tr);
	return st == RS_OK ? RS_OK : rs_err_set(err, st, "dropping a prepared step: its ZCH changes cannot be taken back");
}

rs_status rs_trainer_step(rs_trainer *tr, int64_t step, rs_step_stats *stats, rs_err *err)
{
	if (tr->spoiled)
		return rs_err_set(err, RS_EINVAL, "the trainer's last step failed half-way: its model is part-updated");
	if (rs_trainer_drop_prepared(tr, err) != RS_OK) /* not caught up: trained again */
		return RS_ENOMEM;
	rs__zch_mark(tr);
	rs_status st = one_step(tr, step, stats, err);
	if (st != RS_OK && !tr->prepared.rg && !tr->spoiled)
		(void)undo_step(tr, step);
	rs__later_stepped(tr); /* the last commit's freeing goes on a slice */
	return st;
}

int rs_trainer_can_precopy(const rs_trainer *tr)
{
	return tr->replicas == 1 || tr->cfg->cluster.replica_sync_every == 0; /* averaging changes every row */
}

int rs_trainer_can_heal(const rs_trainer *tr)
{
	return tr && !tr->spoiled &&
	       (tr->replicas > 1 ? tr->cfg->cluster.replica_sync_every == 0 : tr->cfg->cluster.partial_recovery);
}

void rs_trainer_request_pause(rs_trainer *tr) { tr->pause_requested = 1; }

void rs_trainer_request_checkpoint(rs_trainer *tr) { tr->checkpoint_requested = 1; }

void rs_trainer_ready_to_precopy(rs_trainer *tr, int ready) { tr->precopy_ready = ready; }

void rs_trainer_ask_precopy_rate(rs_trainer *tr, float rounds_per_step) { tr->precopy_rate = rounds_per_step; }
