/*
 * train_lookup.c - the lookup of a step (see rs__lookup in
 * train_internal.h): requests to the rows' owners, their answers, the
 * pooled sums.
 *
 * Requests travel as int64 records [feature, block, sample, n, id_1..id_n],
 * packed per owner in the batch's order (sample, then feature, then column
 * block), so that an owner meets the ids of its rows in the order of the
 * global batch whatever the world size: its ZCH buckets give slots, and
 * its fused updates add a row's gradients, in one order for every world.
 * Answers and gradients travel as `cols` floats per record (per id for a
 * record sent with a negative sample, see make_requests), in the same
 * order, so neither side needs to send sizes twice.
 */
#include "worker/train_internal.h"
#include "common/grow.h"

#include <stdlib.h>
#include <string.h>

/* d += s (they never overlap: the compiler may vectorize) */
static inline void add_row(float *restrict d, const float *restrict s, int32_t n)
{
	for (int32_t k = 0; k < n; k++)
		d[k] += s[k];
}

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

/*
 * Each record of a ZCH table in this step's requests, in rank order then
 * the requests' (stopping at a malformed one: gather_bags names its
 * sender): how many ids each table has (ZCH_COUNT, into at[t + 1]), the
 * ids into zids from at[t] on (ZCH_IDS), or their rows from zrows into
 * in_row (ZCH_ROWS); at[t] moves past what it took.
 */
enum { ZCH_COUNT, ZCH_IDS, ZCH_ROWS };

static void zch_records(rs_trainer *tr, int what, size_t *at)
{
	for (int32_t p = 0; p < tr->world; p++)
		for (size_t q = tr->in_off[p], end = tr->in_off[p + 1]; q + 4 <= end;) {
			int64_t f = tr->in.v[q], cnt = tr->in.v[q + 3];
			if (f < 0 || f >= tr->nfeat || cnt < 0 || (uint64_t)cnt > end - q - 4)
				break;
			int t = tr->feat_table[f];
			size_t n = (size_t)cnt;
			if (tr->tables[t].zch && what == ZCH_COUNT)
				at[t + 1] += n;
			else if (tr->tables[t].zch && what == ZCH_IDS)
				memcpy(&tr->zids.v[at[t]], &tr->in.v[q + 4], sizeof(int64_t) * n), at[t] += n;
			else if (tr->tables[t].zch)
				memcpy(&tr->in_row.v[q + 4], &tr->zrows.v[at[t]], sizeof(int64_t) * n), at[t] += n;
			q += 4 + n;
		}
}

/*
 * The rows of the ZCH ids of this step's requests (into in_row), one call
 * of each table for all its ids, in the requests' order: an owner meets
 * them in the global batch's order whatever the world size. Three passes
 * over the requests, whatever the number of tables: count, gather by
 * table, scatter the rows back.
 */
static rs_status resolve_zch(rs_trainer *tr, int64_t step, int training)
{
	int nt = tr->cfg->ntables;
	size_t *off = calloc((size_t)nt + 1, sizeof(size_t)), *at = malloc(sizeof(size_t) * ((size_t)nt + 1));
	rs_status st = RS_ENOMEM;
	if (!off || !at)
		goto out;
	zch_records(tr, ZCH_COUNT, off);
	for (int t = 0; t < nt; t++)
		off[t + 1] += off[t];
	RSCHECKGOTO(rs_grow(&tr->zids.v, &tr->zids.cap, off[nt] + 1, sizeof(int64_t)), st, out);
	RSCHECKGOTO(rs_grow(&tr->zrows.v, &tr->zrows.cap, off[nt] + 1, sizeof(int64_t)), st, out);
	memcpy(at, off, sizeof(size_t) * ((size_t)nt + 1));
	zch_records(tr, ZCH_IDS, at);
	for (int t = 0; t < nt; t++)
		if (tr->tables[t].zch && off[t + 1] > off[t])
			RSCHECKGOTO(rs__resolve(tr, t, tr->zids.v + off[t], off[t + 1] - off[t], step, training,
						tr->zrows.v + off[t]),
				    st, out);
	memcpy(at, off, sizeof(size_t) * ((size_t)nt + 1));
	zch_records(tr, ZCH_ROWS, at);
	st = RS_OK;
out:
	free(at);
	free(off);
	return st;
}

/*
 * The owner's side of a lookup, one pass over the requests received:
 * check each record [feature, block, sample, n, ids...] (whole, inside its
 * sender's part), resolve its ids to rows and sort them into bags of the
 * local shards holding those rows (lshard.boff/bids/bdst, in request
 * order). tr->scount[p] gets the bytes of the answers for peer p; *floats
 * the length of all the answers. A malformed record is RS_EPEER, naming
 * the sender. A record sent with a negative sample (deterministic mode)
 * is answered id by id: each id a bag of its own with an answer of its own
 * (zeros for an id without a row).
 */
static rs_status gather_bags(rs_trainer *tr, size_t *floats, rs_err *err)
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
			    (uint64_t)cnt > end - q - 4)
				return rs_err_set(err, RS_EPEER, "rank %d sent a malformed request (feature %lld, block %lld, %lld ids)",
						  p, (long long)f, (long long)c, (long long)cnt);
			int t = tr->feat_table[f];
			const block *bl = &tr->tables[t].blocks[c];
			int per_id = tr->in.v[q + 2] < 0; /* deterministic: its ids answered one by one */
			if (per_id && !tr->cfg->train.deterministic)
				return rs_err_set(err, RS_EPEER,
						  "rank %d asks for answers id by id (deterministic training) and this worker's "
						  "config has \"deterministic\": false: the workers' configs differ", p);
			for (int64_t j = 0; j < cnt; j++) {
				/* ZCH ids were resolved already (resolve_zch; training in 2D, rs__replica_resolve) */
				int64_t row = tr->tables[t].zch ? tr->in_row.v[q + 4 + j] : tr->in.v[q + 4 + j];
				tr->in_row.v[q + 4 + j] = row;
				if (row < 0) {
					o += per_id ? (size_t)bl->cols : 0; /* its answer stays zeros */
					continue;
				}
				int32_t li = bl->local[rs__range_of(bl, row)];
				lshard *ls = li >= 0 ? &tr->shards[li] : NULL;
				if (!ls || row < ls->s.row_offset || row >= ls->s.row_offset + ls->s.rows)
					return rs_err_set(err, RS_EPEER, "table '%s': rank %d asked for row %lld, which is not held here",
							  tr->cfg->tables[t].name, p, (long long)row);
				if (!ls->bdst.n || ls->bdst.v[ls->bdst.n - 1] != (int64_t)o) {
					/* this request's first id in this shard: a new bag */
					RSCHECK(i64_push(&ls->bdst, (int64_t)o));
					RSCHECK(i32_push(&ls->boff, ls->boff.v[ls->boff.n - 1]));
				}
				RSCHECK(i64_push(&ls->bids, row - ls->s.row_offset));
				ls->boff.v[ls->boff.n - 1]++;
				o += per_id ? (size_t)bl->cols : 0; /* one answer per id: each id a bag of its own */
			}
			o += per_id ? 0 : (size_t)bl->cols;
			q += 4 + (size_t)cnt;
		}
		tr->scount[p] = sizeof(float) * (o - first);
	}
	*floats = o;
	return RS_OK;
}

/* Pool every local shard's bags on the engine and add the sums into the answers (floats of out). */
static rs_status pool_bags(rs_trainer *tr, float *out, size_t floats, rs_err *err)
{
	memset(out, 0, sizeof(float) * floats);
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		size_t nb = ls->bdst.n, cols = (size_t)ls->s.cols;
		rs_err e = {0};
		if (!nb)
			continue;
		RSCHECK(rs_grow(&ls->bval.v, &ls->bval.cap, nb * cols, sizeof(float)));
		RSCHECK(rs__engine_said(tr, ls->table,
				    tr->engine->ops->forward(tr->engine, &ls->emb, ls->boff.v, (int32_t)nb, ls->bids.v,
							     RS_POOL_SUM, ls->bval.v, (int64_t)cols, &e),
				    &e, err));
		for (size_t k = 0; k < nb; k++)
			add_row(out + ls->bdst.v[k], ls->bval.v + k * cols, (int32_t)cols);
	}
	return RS_OK;
}

/* Open a request record [f, c, i, 0 ids] to peer p (its ids follow). */
static rs_status open_request(rs_trainer *tr, int32_t p, int32_t f, int32_t c, int32_t i)
{
	RSCHECK(i64_push(&tr->req[p], f));
	RSCHECK(i64_push(&tr->req[p], c));
	RSCHECK(i64_push(&tr->req[p], i));
	return i64_push(&tr->req[p], 0);
}

/* The row range of block bl that id is routed to (a ZCH id: its bucket's first slot). */
static inline int range_of_id(const tinfo *ti, const block *bl, int64_t id)
{
	return rs__range_of(bl, ti->zch ? (int64_t)rs_zch_bucket_of((uint64_t)id, rs_zch_buckets(ti->zch)) * ti->spb : id);
}

/*
 * This step's requests, per owner (tr->req), one record per (sample,
 * feature, block, owner), and where their answers go: tr->sent, one entry
 * per answer. Deterministic, a bag whose ids fall in more than one shard
 * is answered id by id (its records carry the sample as -1 - sample), and
 * tr->idsrc lists, per bag in the batch's order, its number of answers and
 * each one's [peer, float offset in that peer's answers]: summed in that
 * order, a pooled sum is the same whether one shard held the bag (its
 * owner added the rows in the bag's order, from zero) or several did.
 */
static rs_status make_requests(rs_trainer *tr)
{
	const rs_batch *b = &tr->batch;
	int32_t n = b->size, w = tr->world;
	int det = tr->cfg->train.deterministic;
	int32_t *open = malloc(sizeof(int32_t) * (size_t)w);
	int32_t *touched = malloc(sizeof(int32_t) * (size_t)w);
	int64_t *aoff = calloc((size_t)w, sizeof(int64_t)); /* deterministic: floats of answers so far, per peer */
	i32vec range = {0};                                  /* the current bag's ids' row ranges */
	rs_status st = RS_OK;
	if (!open || !touched || !aoff)
		RSFAILGOTO(st, RS_ENOMEM, out);
	for (int32_t p = 0; p < w; p++) {
		tr->req[p].n = 0;
		tr->sent[p].n = 0;
		open[p] = -1;
	}
	tr->idsrc.n = 0;
	for (int32_t i = 0; i < n; i++)
		for (int32_t f = 0; f < tr->nfeat; f++) {
			const tinfo *ti = &tr->tables[tr->feat_table[f]];
			const int32_t *off = b->offsets[f];
			const int64_t *ids = b->ids[f];
			for (int c = 0; c < ti->nblocks && off[i + 1] > off[i]; c++) {
				const block *bl = &ti->blocks[c];
				int32_t len = off[i + 1] - off[i], nt = 0, spread = 0;
				RSCHECKGOTO(rs_grow(&range.v, &range.cap, (size_t)len, sizeof(int32_t)), st, out);
				for (int32_t j = 0; j < len; j++) {
					range.v[j] = range_of_id(ti, bl, ids[off[i] + j]);
					spread |= range.v[j] != range.v[0];
				}
				int per_id = det && spread; /* more than one shard: its owners answer id by id */
				if (det)
					RSCHECKGOTO(i64_push(&tr->idsrc, per_id ? len : 1), st, out);
				for (int32_t j = off[i]; j < off[i + 1]; j++) {
					int32_t p = bl->owner[range.v[j - off[i]]];
					if (open[p] < 0) {
						open[p] = (int32_t)tr->req[p].n;
						touched[nt++] = p;
						RSCHECKGOTO(open_request(tr, p, f, c, per_id ? -1 - i : i), st, out);
					}
					if (open[p] == (int32_t)tr->req[p].n - 4 || per_id) { /* a new answer */
						RSCHECKGOTO(sent_push(&tr->sent[p], (sent){f, c, i, bl->cols}), st, out);
						if (det) {
							RSCHECKGOTO(i64_push(&tr->idsrc, p), st, out);
							RSCHECKGOTO(i64_push(&tr->idsrc, aoff[p]), st, out);
							aoff[p] += bl->cols;
						}
					}
					RSCHECKGOTO(i64_push(&tr->req[p], ids[j]), st, out);
					tr->req[p].v[open[p] + 3]++;
				}
				for (int k = 0; k < nt; k++)
					open[touched[k]] = -1;
			}
		}
out:
	free(range.v);
	free(aoff);
	free(touched);
	free(open);
	return st;
}

/* Deterministic: each bag's answers (tr->idsrc) added into tr->pooled, in the bag's order. */
static rs_status pool_in_bag_order(rs_trainer *tr, const float *in)
{
	const rs_batch *b = &tr->batch;
	int32_t w = tr->world;
	size_t *base = malloc(sizeof(size_t) * (size_t)w);
	if (!base)
		return RS_ENOMEM;
	size_t o = 0;
	for (int32_t p = 0; p < w; o += tr->rcount[p] / sizeof(float), p++)
		base[p] = o;
	const int64_t *src = tr->idsrc.v;
	for (int32_t i = 0; i < b->size; i++)
		for (int32_t f = 0; f < tr->nfeat; f++) {
			const tinfo *ti = &tr->tables[tr->feat_table[f]];
			int32_t len = b->offsets[f][i + 1] - b->offsets[f][i];
			for (int c = 0; c < ti->nblocks; c++) {
				const block *bl = &ti->blocks[c];
				float *dst = tr->pooled + (size_t)i * (size_t)tr->emb_width + (size_t)(tr->feat_off[f] + bl->col_offset);
				if (len == 0)
					continue;
				for (int64_t k = *src++; k > 0; k--, src += 2)
					add_row(dst, in + base[src[0]] + (size_t)src[1], bl->cols);
			}
		}
	free(base);
	return RS_OK;
}

rs_status rs__lookup(rs_trainer *tr, int64_t step, int training, rs_err *err)
{
	const rs_batch *b = &tr->batch;
	int32_t n = b->size, w = tr->world;
	i64vec packed = {0};
	rs_status st = RS_OK;
	if (n > tr->pooled_cap || !tr->pooled) { /* a rank without samples too: pointers into them stay valid */
		float *p = realloc(tr->pooled, sizeof(float) * ((size_t)n + 1) * (size_t)tr->emb_width);
		RSALLOCGOTO(p, st, out);
		tr->pooled = p;
		p = realloc(tr->dpooled, sizeof(float) * ((size_t)n + 1) * (size_t)tr->emb_width);
		RSALLOCGOTO(p, st, out);
		tr->dpooled = p;
		tr->pooled_cap = n;
	}
	memset(tr->pooled, 0, sizeof(float) * (size_t)n * (size_t)tr->emb_width);
	RSCHECKGOTO(make_requests(tr), st, out);
	for (int32_t p = 0; p < w; p++)
		tr->scount[p] = tr->req[p].n * sizeof(int64_t);
	RSCHECKGOTO(rs__said_transport(tr, rs_transport_alltoall_counts(tr->t, tr->scount, tr->rcount),
				   "the lookup's request sizes (all-to-all)", err),
		    st, out);
	size_t total = 0;
	for (int32_t p = 0; p < w; p++) {
		tr->in_off[p] = total;
		total += tr->rcount[p] / sizeof(int64_t);
	}
	tr->in_off[w] = total;
	RSCHECKGOTO(rs_grow(&tr->in.v, &tr->in.cap, total + 1, sizeof(int64_t)), st, out);
	RSCHECKGOTO(rs_grow(&tr->in_row.v, &tr->in_row.cap, total + 1, sizeof(int64_t)), st, out);
	/* pack the requests contiguously, in rank order */
	size_t all = 0;
	for (int32_t p = 0; p < w; p++)
		all += tr->req[p].n;
	RSCHECKGOTO(rs_grow(&packed.v, &packed.cap, all + 1, sizeof(int64_t)), st, out);
	for (size_t p = 0, o = 0; p < (size_t)w; o += tr->req[p].n, p++)
		if (tr->req[p].n) /* none for a peer (another replica group's, in 2D): maybe never allocated */
			memcpy(packed.v + o, tr->req[p].v, sizeof(int64_t) * tr->req[p].n);
	RSCHECKGOTO(rs__said_transport(tr, rs_transport_alltoallv(tr->t, packed.v, tr->scount, tr->in.v, tr->rcount),
				   "the lookup's requests (all-to-all)", err),
		    st, out);
	if (training && tr->replicas > 1)
		RSCHECKGOTO(rs__replica_resolve(tr, step, err), st, out);
	/* answer: the partial pooled sum of each record over the rows held here, in rank order */
	size_t floats = 0;
	if (!(training && tr->replicas > 1))
		RSCHECKGOTO(resolve_zch(tr, step, training), st, out);
	RSCHECKGOTO(gather_bags(tr, &floats, err), st, out);
	RSCHECKGOTO(rs_grow(&tr->out.v, &tr->out.cap, floats + 1, sizeof(float)), st, out);
	RSCHECKGOTO(pool_bags(tr, tr->out.v, floats, err), st, out);
	for (int32_t p = 0; p < w; p++)
		tr->rcount[p] = 0;
	for (int32_t p = 0; p < w; p++)
		for (size_t k = 0; k < tr->sent[p].n; k++)
			tr->rcount[p] += sizeof(float) * (size_t)tr->sent[p].v[k].cols;
	size_t back = 0;
	for (int32_t p = 0; p < w; p++)
		back += tr->rcount[p] / sizeof(float);
	RSCHECKGOTO(rs_grow(&tr->back.v, &tr->back.cap, back + 1, sizeof(float)), st, out);
	RSCHECKGOTO(rs__said_transport(tr, rs_transport_alltoallv(tr->t, tr->out.v, tr->scount, tr->back.v, tr->rcount),
				   "the lookup's answers (all-to-all)", err),
		    st, out);
	/* add the partials into pooled, in rank order (deterministic: the rows, in each bag's order) */
	const float *in = tr->back.v;
	if (tr->cfg->train.deterministic)
		RSCHECKGOTO(pool_in_bag_order(tr, in), st, out);
	for (int32_t p = 0; !tr->cfg->train.deterministic && p < w; p++)
		for (size_t k = 0; k < tr->sent[p].n; k++) {
			const sent *s = &tr->sent[p].v[k];
			const block *bl = &tr->tables[tr->feat_table[s->f]].blocks[s->c];
			float *dst = tr->pooled + (size_t)s->i * (size_t)tr->emb_width + (size_t)(tr->feat_off[s->f] + bl->col_offset);
			add_row(dst, in, s->cols);
			in += s->cols;
		}
	/* mean pooling; data-parallel tables locally */
	for (int32_t f = 0; f < tr->nfeat; f++) {
		const rs_table_config *tc = &tr->cfg->tables[tr->feat_table[f]];
		const tinfo *ti = &tr->tables[tr->feat_table[f]];
		float *base = tr->pooled + tr->feat_off[f];
		if (ti->dp_shard >= 0) {
			rs_err e = {0};
			RSCHECKGOTO(rs__engine_said(tr, tr->feat_table[f],
						tr->engine->ops->forward(tr->engine, &tr->shards[ti->dp_shard].emb, b->offsets[f],
									 n, b->ids[f], tc->pooling, base, tr->emb_width, &e),
						&e, err),
				    st, out);
		} else if (tc->pooling == RS_POOL_MEAN) {
			for (int32_t i = 0; i < n; i++) {
				int32_t len = b->offsets[f][i + 1] - b->offsets[f][i];
				for (int32_t c = 0; len > 1 && c < tc->dim; c++)
					base[(size_t)i * (size_t)tr->emb_width + (size_t)c] /= (float)len;
			}
		}
	}
out:
	free(packed.v);
	return rs__said(st, "the lookup", err);
}

/* ---- a failed step's ZCH changes, undone -------------------------------------------- */

void rs__zch_mark(rs_trainer *tr)
{
	int any = 0;
	for (int t = 0; t < tr->cfg->ntables; t++)
		any |= tr->tables[t].zch != NULL;
	tr->zundo.on = any && rs_trainer_can_heal(tr);
	if (tr->zundo.cap > ((size_t)1 << 20) && tr->zundo.n < tr->zundo.cap / 8) { /* the first steps' burst of new ids */
		unsigned char *v = realloc(tr->zundo.v, tr->zundo.cap / 2);
		if (v)
			tr->zundo.v = v, tr->zundo.cap /= 2;
	}
	tr->zundo.n = 0;
	tr->zundo.lost = 0;
	for (int t = 0; t < tr->cfg->ntables; t++)
		if (tr->tables[t].zch)
			rs_zch_journal(tr->tables[t].zch, tr->zundo.on);
}

/* A kept row: [shard index, local row] then its weights and optimizer state bytes. */
typedef struct kept_row {
	int64_t shard, local;
} kept_row;

void rs__zch_keep_row(rs_trainer *tr, const lshard *ls, int64_t local)
{
	void *w, *s;
	size_t wl, sl;
	if (!tr->zundo.on)
		return;
	rs__row_blocks(tr->cfg, ls, local, 1, &w, &wl, &s, &sl);
	kept_row k = {ls - tr->shards, local};
	if (rs_grow(&tr->zundo.v, &tr->zundo.cap, tr->zundo.n + sizeof(k) + wl + sl, 1) != RS_OK) {
		tr->zundo.lost = 1;
		return;
	}
	unsigned char *p = tr->zundo.v + tr->zundo.n;
	memcpy(p, &k, sizeof(k));
	memcpy(p + sizeof(k), w, wl);
	if (sl)
		memcpy(p + sizeof(k) + wl, s, sl);
	tr->zundo.n += sizeof(k) + wl + sl;
}

rs_status rs__zch_undo(rs_trainer *tr)
{
	rs_status st = tr->zundo.lost ? RS_ENOMEM : RS_OK;
	if (!tr->zundo.on)
		return RS_OK;
	for (int t = 0; t < tr->cfg->ntables; t++) {
		rs_status ts = tr->tables[t].zch ? rs_zch_undo(tr->tables[t].zch) : RS_OK;
		st = st == RS_OK ? ts : st; /* the first reason (RS_ENOMEM, or RS_EINVAL: the buckets changed) */
	}
	/* a slot is given out at most once a step (a slot seen in it is never evicted): any order restores */
	for (size_t o = 0; o < tr->zundo.n;) {
		kept_row k;
		void *w, *s;
		size_t wl, sl;
		memcpy(&k, tr->zundo.v + o, sizeof(k));
		rs__row_blocks(tr->cfg, &tr->shards[k.shard], k.local, 1, &w, &wl, &s, &sl);
		memcpy(w, tr->zundo.v + o + sizeof(k), wl);
		if (sl)
			memcpy(s, tr->zundo.v + o + sizeof(k) + wl, sl);
		o += sizeof(k) + wl + sl;
	}
	tr->zundo.n = 0;
	return st;
}
