/*
 * replica.c - training in a 2D layout (see common/plan.h): the world is R
 * replica groups of S ranks, group k holding ranks k, k + R, ...; lookups
 * stay inside a group (the trainer routes to its own group's shards), and
 * the R replicas of a shard, on ranks l*R .. l*R + R - 1, are kept equal:
 *   - ZCH identities: every replica inserts the ids all groups requested,
 *     in the order a 1D world would (by requesting rank), so a slot holds
 *     the same id on every replica and in a 1D run;
 *   - exact sync (the default): every replica folds the gradients of all
 *     groups' requests in a 1D world's order before one update, so the
 *     replicas stay bitwise equal and a 2D run equals a 1D run up to the
 *     rounding of the forward's partial sums;
 *   - every K steps ("replica_sync": {"every": K}, local SGD): replicas
 *     train on their group's gradients alone and are averaged, weights and
 *     optimizer state, after every K-th step.
 * Replica peers talk over the world's all-to-all, sending to each other
 * only. Part of the trainer; reaches its insides through train_internal.h.
 */
#include "worker/train_internal.h"
#include "common/grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Bytes appended to a growing buffer. */
typedef struct bytes {
	char *v;
	size_t n, cap;
} bytes;

static rs_status put(bytes *b, const void *p, size_t len)
{
	RSCHECK(rs_grow(&b->v, &b->cap, b->n + len + 1, 1));
	if (len) /* p may be NULL then (an empty gradient's rows) */
		memcpy(b->v + b->n, p, len);
	b->n += len;
	return RS_OK;
}

static rs_status put64(bytes *b, int64_t x) { return put(b, &x, sizeof(x)); }

/* A cursor over a peer's bytes: every read is bounds-checked. */
typedef struct rs__cursor {
	const char *p, *end;
} cursor;

static int get64(cursor *c, int64_t *x)
{
	if ((size_t)(c->end - c->p) < sizeof(*x))
		return 0;
	memcpy(x, c->p, sizeof(*x));
	c->p += sizeof(*x);
	return 1;
}

/* The most one exchange may bring in from all peers together (far above any rank's shards). */
#define RS_REPLICA_MAX_BYTES ((size_t)1 << 40)

static int32_t first_replica_peer(const rs_trainer *tr) { return tr->rank / tr->replicas * tr->replicas; }

/*
 * Send mine to every other replica of this rank's shards and receive
 * theirs: (*c)[k] reads replica k's bytes, mine included; *all and *c are
 * the caller's to free.
 */
static rs_status exchange(rs_trainer *tr, const bytes *mine, char **all, cursor **c, const char *what, rs_err *err)
{
	int32_t w = tr->world, r = tr->replicas, first = first_replica_peer(tr);
	size_t *sc = calloc((size_t)w, sizeof(size_t)), *rc = calloc((size_t)w, sizeof(size_t));
	char *send = NULL;
	rs_status st = RS_OK;
	*all = NULL;
	if (!sc || !rc || !(*c = calloc((size_t)r, sizeof(cursor))) || !(send = malloc(mine->n * (size_t)(r - 1) + 1)))
		RSFAILGOTO(st, RS_ENOMEM, out);
	for (int32_t k = 0, o = 0; k < r; k++)
		if (first + k != tr->rank) {
			sc[first + k] = mine->n;
			if (mine->n)
				memcpy(send + (size_t)o * mine->n, mine->v, mine->n);
			o++;
		}
	if ((st = rs__said_transport(tr, rs_transport_alltoall_counts(tr->t, sc, rc), what, err)) != RS_OK)
		goto out;
	size_t total = 0;
	for (int32_t p = 0; p < w; p++) {
		if (rc[p] && (p < first || p >= first + r))
			RSFAILGOTO(st, rs_err_set(err, RS_EPEER, "%s: rank %d, not a replica of this rank's shards, sent %zu bytes",
						  what, p, rc[p]), out);
		if (rc[p] > RS_REPLICA_MAX_BYTES || total + rc[p] > RS_REPLICA_MAX_BYTES)
			RSFAILGOTO(st, rs_err_set(err, RS_EPEER, "%s: rank %d announced %zu bytes, more than a rank holds", what,
						  p, rc[p]), out);
		total += rc[p];
	}
	if (!(*all = malloc(total + mine->n + 1)))
		RSFAILGOTO(st, RS_ENOMEM, out);
	if ((st = rs__said_transport(tr, rs_transport_alltoallv(tr->t, send, sc, *all, rc), what, err)) != RS_OK)
		goto out;
	if (mine->n)
		memcpy(*all + total, mine->v, mine->n);
	size_t o = 0;
	for (int32_t k = 0; k < r; k++) {
		int32_t p = first + k;
		const char *at = p == tr->rank ? *all + total : *all + o;
		size_t n = p == tr->rank ? mine->n : rc[p];
		(*c)[k] = (cursor){at, at + n};
		o += p == tr->rank ? 0 : n;
	}
out:
	free(send);
	free(sc);
	free(rc);
	if (st != RS_OK) {
		free(*all);
		free(*c);
		*all = NULL;
		*c = NULL;
	}
	return st;
}

/* ---- ZCH identities --------------------------------------------------------------- */

static int any_zch(const rs_trainer *tr)
{
	for (int t = 0; t < tr->cfg->ntables; t++)
		if (tr->tables[t].zch)
			return 1;
	return 0;
}

/*
 * This rank's received requests for ZCH tables, per requesting rank p of
 * its group: [p, words] then records [table, n, id_1..id_n]. Malformed
 * records are left to gather_bags, which names the sender.
 */
static rs_status pack_zch(const rs_trainer *tr, bytes *b)
{
	for (int32_t p = tr->rank % tr->replicas; p < tr->world; p += tr->replicas) {
		size_t hdr = b->n;
		RSCHECK(put64(b, p));
		RSCHECK(put64(b, 0));
		int64_t words = 0;
		for (size_t q = tr->in_off[p], end = tr->in_off[p + 1]; q + 4 <= end;) {
			int64_t f = tr->in.v[q], cnt = tr->in.v[q + 3];
			if (f < 0 || f >= tr->nfeat || cnt < 0 || (uint64_t)cnt > end - q - 4)
				break;
			int t = tr->feat_table[f];
			if (tr->tables[t].zch) {
				RSCHECK(put64(b, t));
				RSCHECK(put64(b, cnt));
				RSCHECK(put(b, &tr->in.v[q + 4], sizeof(int64_t) * (size_t)cnt));
				words += 2 + cnt;
			}
			q += 4 + (size_t)cnt;
		}
		memcpy(b->v + hdr + sizeof(int64_t), &words, sizeof(words));
	}
	return RS_OK;
}

/* Insert one requester's ids (from replica k's part at c); rows of this rank's own requests go to in_row. */
static rs_status insert_requester(rs_trainer *tr, int32_t q, cursor *c, int mine, int64_t step, int32_t from,
				  rs_err *err)
{
	int64_t p, words;
	if (!get64(c, &p) || !get64(c, &words) || p != q || words < 0 || (uint64_t)words > (size_t)(c->end - c->p) / 8)
		return rs_err_set(err, RS_EPEER, "rank %d sent malformed ZCH ids for rank %d's requests", from, q);
	cursor rec = {c->p, c->p + words * 8};
	c->p = rec.end;
	size_t q0 = tr->in_off[q], qend = tr->in_off[q + 1];
	while (rec.p < rec.end) {
		int64_t t, n;
		if (!get64(&rec, &t) || !get64(&rec, &n) || t < 0 || t >= tr->cfg->ntables || !tr->tables[t].zch || n < 0 ||
		    (uint64_t)n > (size_t)(rec.end - rec.p) / 8)
			return rs_err_set(err, RS_EPEER, "rank %d sent a malformed ZCH record for rank %d's requests", from, q);
		/* this rank's own requests: find the same record in `in`, to keep the rows where gather_bags reads them */
		int64_t *row = NULL;
		while (mine && q0 + 4 <= qend) {
			int64_t f = tr->in.v[q0], cnt = tr->in.v[q0 + 3];
			size_t at = q0 + 4;
			if (f < 0 || f >= tr->nfeat || cnt < 0 || (uint64_t)cnt > qend - at)
				break; /* malformed: gather_bags names the sender */
			q0 += 4 + (size_t)cnt;
			if (tr->tables[tr->feat_table[f]].zch) {
				row = cnt == n ? &tr->in_row.v[at] : NULL;
				break;
			}
		}
		RSCHECK(rs_grow(&tr->zids.v, &tr->zids.cap, (size_t)n + 1, sizeof(int64_t)));
		RSCHECK(rs_grow(&tr->zrows.v, &tr->zrows.cap, (size_t)n + 1, sizeof(int64_t)));
		memcpy(tr->zids.v, rec.p, sizeof(int64_t) * (size_t)n);
		RSCHECK(rs__resolve(tr, (int)t, tr->zids.v, (size_t)n, step, 1, tr->zrows.v));
		if (row)
			memcpy(row, tr->zrows.v, sizeof(int64_t) * (size_t)n);
		rec.p += n * 8;
	}
	return RS_OK;
}

rs_status rs__replica_resolve(rs_trainer *tr, int64_t step, rs_err *err)
{
	bytes mine = {0};
	char *all = NULL;
	cursor *c = NULL;
	rs_status st;
	if (!any_zch(tr))
		return RS_OK;
	RSCHECKGOTO(pack_zch(tr, &mine), st, out);
	RSCHECKGOTO(exchange(tr, &mine, &all, &c, "the replicas' ZCH ids (all-to-all)", err), st, out);
	/* every requesting rank in a 1D world's order: rank q asked its group q % R, whose replica sent it */
	int32_t me = tr->rank % tr->replicas, first = first_replica_peer(tr);
	for (int32_t q = 0; q < tr->world; q++) {
		int32_t k = q % tr->replicas;
		RSCHECKGOTO(insert_requester(tr, q, &c[k], k == me, step, first + k, err), st, out);
	}
	st = RS_OK;
out:
	free(c);
	free(mine.v);
	free(all);
	return st;
}

/* ---- exact sync: every replica folds every group's gradients --------------------- */

/*
 * One requester's bags of shard ls (bags [b0, b1) of this step, their
 * gradients from grad): [nbags, nids, offsets (nbags + 1), ids, then the
 * gradients as nbags x cols floats].
 */
static rs_status pack_bags(const lshard *ls, size_t b0, size_t b1, const float *grad, bytes *b)
{
	size_t cols = (size_t)ls->s.cols;
	int64_t first = ls->boff.v[b0];
	RSCHECK(put64(b, (int64_t)(b1 - b0)));
	RSCHECK(put64(b, ls->boff.v[b1] - first));
	for (size_t k = b0; k <= b1; k++)
		RSCHECK(put64(b, ls->boff.v[k] - first));
	RSCHECK(put(b, ls->bids.v + first, sizeof(int64_t) * (size_t)(ls->boff.v[b1] - first)));
	for (size_t k = b0; k < b1; k++)
		RSCHECK(put(b, grad + ls->bdst.v[k], sizeof(float) * cols));
	return RS_OK;
}

/* Scratch for unpacking a requester's bags. */
typedef struct bagbuf {
	i32vec off;
	i64vec ids;
	fvec grad;
} bagbuf;

/* Read one requester's bags of ls (pack_bags' layout) and add their gradients to ls->grad. */
static rs_status fold_bags(const rs_trainer *tr, lshard *ls, cursor *c, bagbuf *bb, int32_t from, rs_err *err)
{
	size_t cols = (size_t)ls->s.cols;
	int64_t nb, nids;
	const char *what = tr->cfg->tables[ls->table].name;
	if (!get64(c, &nb) || !get64(c, &nids) || nb < 0 || nids < 0 || nb >= INT32_MAX || nids >= INT32_MAX ||
	    (uint64_t)(nb + 1 + nids) > (size_t)(c->end - c->p) / 8 ||
	    (uint64_t)nb * cols > (size_t)(c->end - c->p - 8 * (nb + 1 + nids)) / 4)
		return rs_err_set(err, RS_EPEER, "table '%s': rank %d sent malformed gradients", what, from);
	RSCHECK(rs_grow(&bb->off.v, &bb->off.cap, (size_t)nb + 1, sizeof(int32_t)));
	RSCHECK(rs_grow(&bb->ids.v, &bb->ids.cap, (size_t)nids + 1, sizeof(int64_t)));
	RSCHECK(rs_grow(&bb->grad.v, &bb->grad.cap, (size_t)nb * cols + 1, sizeof(float)));
	for (int64_t k = 0, prev = 0; k <= nb; k++) {
		int64_t o = -1;
		get64(c, &o); /* in bounds: checked above */
		if (o < prev || o > nids || (k == 0 && o != 0) || (k == nb && o != nids))
			return rs_err_set(err, RS_EPEER, "table '%s': rank %d sent malformed bag offsets", what, from);
		bb->off.v[k] = (int32_t)(prev = o);
	}
	memcpy(bb->ids.v, c->p, sizeof(int64_t) * (size_t)nids);
	c->p += 8 * nids;
	memcpy(bb->grad.v, c->p, sizeof(float) * (size_t)nb * cols);
	c->p += 4 * (size_t)nb * cols;
	if (rs_emb_grad_accumulate(&ls->ws, &ls->grad, ls->s.cols, bb->off.v, (int32_t)nb, bb->ids.v, RS_POOL_SUM,
				   bb->grad.v, (int64_t)cols) != RS_OK)
		return rs_err_set(err, RS_EPEER, "table '%s': rank %d sent a gradient for a row outside the shard", what,
				  from);
	return RS_OK;
}

/*
 * The owner's backward with exact sync. A 1D owner folds the gradients of
 * the bags it answered in requesting-rank order; here every replica folds
 * the bags of all groups in that same order (each group's sent by the
 * replica that answered them), so all replicas, and a 1D world, add the
 * same floats in the same order. Gathering them is a collective
 * (rs__replica_exchange); folding and applying is not (rs__replica_apply).
 */
rs_status rs__replica_exchange(rs_trainer *tr, const float *grad, rs__replica_grads *rg, rs_err *err)
{
	bytes mine = {0};
	size_t *off = malloc(sizeof(size_t) * ((size_t)tr->world + 1));
	int32_t me = tr->rank % tr->replicas;
	rs_status st = RS_OK;
	if (!off)
		return RS_ENOMEM;
	/* requester p's answers (and gradients) are the floats [off[p], off[p + 1]) */
	off[0] = 0;
	for (int32_t p = 0; p < tr->world; p++)
		off[p + 1] = off[p] + tr->scount[p] / sizeof(float);
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		size_t nb = ls->bdst.n, b0 = 0;
		if (rs__is_dp(tr, i))
			continue;
		for (int32_t p = me; p < tr->world; p += tr->replicas) {
			while (b0 < nb && (size_t)ls->bdst.v[b0] < off[p])
				b0++;
			size_t b1 = b0;
			while (b1 < nb && (size_t)ls->bdst.v[b1] < off[p + 1])
				b1++;
			RSCHECKGOTO(pack_bags(ls, b0, b1, grad, &mine), st, out);
			b0 = b1;
		}
	}
	st = exchange(tr, &mine, &rg->all, &rg->c, "the replicas' embedding gradients (all-to-all)", err);
out:
	free(off);
	free(mine.v);
	return st;
}

rs_status rs__replica_apply(rs_trainer *tr, rs__replica_grads *rg, rs_err *err)
{
	bagbuf bb = {0};
	int32_t first = first_replica_peer(tr);
	rs_status st = RS_OK;
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		rs_err e = {0};
		if (rs__is_dp(tr, i))
			continue;
		rs_emb_grad_clear(&ls->ws, &ls->grad);
		for (int32_t q = 0; q < tr->world; q++)
			RSCHECKGOTO(fold_bags(tr, ls, &rg->c[q % tr->replicas], &bb, first + q % tr->replicas, err), st, out);
		rs__dirty_mark_rows(ls, ls->grad.rows, ls->grad.n); /* updated next, and its cached hash stale */
		st = tr->engine->ops->apply(tr->engine, &ls->emb, &ls->grad, &tr->cfg->optimizer, tr->updates, &e);
		rs_emb_grad_clear(&ls->ws, &ls->grad);
		if (st != RS_OK)
			RSFAILGOTO(st, rs_err_set(err, st, "table '%s': %s", tr->cfg->tables[ls->table].name, e.msg), out);
	}
out:
	free(bb.off.v);
	free(bb.ids.v);
	free(bb.grad.v);
	return st;
}

void rs__replica_grads_free(rs__replica_grads *rg)
{
	free(rg->all);
	free(rg->c);
	rg->all = NULL;
	rg->c = NULL;
}

/* ---- every K steps: the replicas' mean ---------------------------------------------- */

rs_status rs__replica_average(rs_trainer *tr, rs_err *err)
{
	bytes mine = {0};
	char *all = NULL;
	cursor *c = NULL;
	rs_status st = RS_OK;
	if (tr->on_host == 0)
		rs__trainer_prefetch(tr, 1);
	/* each shard's weights (as floats) then its optimizer state */
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		if (rs__is_dp(tr, i))
			continue;
		for (int64_t k = 0; k < ls->s.rows * ls->s.cols; k++) {
			float v = rs_emb_get(ls->emb.weights, ls->emb.dtype, k);
			RSCHECKGOTO(put(&mine, &v, sizeof(v)), st, out);
		}
		int64_t sf = rs_emb_state_floats(tr->cfg->optimizer.kind, ls->s.cols);
		if (sf)
			RSCHECKGOTO(put(&mine, ls->emb.state, sizeof(float) * (size_t)(ls->s.rows * sf)), st, out);
	}
	RSCHECKGOTO(exchange(tr, &mine, &all, &c, "the replicas' weights (all-to-all)", err), st, out);
	for (int32_t k = 0; k < tr->replicas; k++)
		if ((size_t)(c[k].end - c[k].p) != mine.n)
			RSFAILGOTO(st, rs_err_set(err, RS_EPEER, "replica %d sent %zu bytes of weights, this one has %zu", k,
						  (size_t)(c[k].end - c[k].p), mine.n), out);
	size_t o = 0;
	float inv = 1.0f / (float)tr->replicas;
	for (int i = 0; i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		if (rs__is_dp(tr, i))
			continue;
		int64_t n = ls->s.rows * ls->s.cols, sf = ls->s.rows * rs_emb_state_floats(tr->cfg->optimizer.kind, ls->s.cols);
		for (int64_t x = 0; x < n + sf; x++, o += sizeof(float)) {
			float sum = 0, v;
			for (int32_t k = 0; k < tr->replicas; k++) {
				memcpy(&v, c[k].p + o, sizeof(v));
				sum += v;
			}
			if (x < n)
				rs_emb_set(ls->emb.weights, ls->emb.dtype, x, sum * inv);
			else
				ls->emb.state[x - n] = sum * inv;
		}
	}
out:
	free(c);
	free(mine.v);
	free(all);
	return st;
}
