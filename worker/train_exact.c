/*
 * train_exact.c - the sums of a deterministic step (train.deterministic),
 * whose results do not depend on the world size.
 *
 * The global batch is cut into micro-batches of train.micro_batch samples,
 * and each rank trains whole ones (rs__step_samples). A micro-batch's
 * dense gradient and loss are computed on their own (the same floats on any
 * rank), so what remains is to add them up without the grouping mattering,
 * and float addition is not associative. So the sum is made exact: every
 * part is put on one fixed-point grid, as an int64, and int64 sums are the
 * same in any order. The grid is chosen per step from the largest part
 * anywhere (an all-gather of each rank's largest, exact) and the number of
 * parts, so that no sum can overflow: 2^-shift with
 *     shift = min(51, 62 - ceil(log2 parts)) - ceil(log2 max),
 * which keeps 51 bits of the largest value (a float has 24; fewer only
 * beyond 2048 parts): smaller parts are rounded to the grid, identically
 * on every world. The same holds for the data-parallel tables'
 * gradients, whose parts are each (sample, id)'s contribution.
 *
 * A rank keeps its micro-batches' dense gradients until the grid is known,
 * up to RS_EXACT_KEEP_BYTES; beyond, it computes each micro-batch twice
 * (the same floats both times) instead of keeping them.
 *
 * The embedding rows need none of this: their pooled sums are added in each
 * bag's order (train_lookup.c), and an owner meets a row's gradients in the
 * global batch's order.
 */
#include "worker/train_internal.h"
#include "common/grow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void rs__step_samples(const rs_trainer *tr, int64_t *lo, int64_t *hi)
{
	const rs_train_config *t = &tr->cfg->train;
	int64_t g = t->global_batch, m = g / t->micro_batch;
	if (!t->deterministic) {
		*lo = g * tr->rank / tr->world;
		*hi = g * (tr->rank + 1) / tr->world;
		return;
	}
	*lo = t->micro_batch * (m * tr->rank / tr->world);
	*hi = t->micro_batch * (m * (tr->rank + 1) / tr->world);
}

/* One sum's parts on this rank, then on all: the largest magnitude and how many. */
typedef struct part_stats {
	double max;
	int64_t count;
} part_stats;

/*
 * The grid's exponent for a sum of `count` parts of at most `max`, such
 * that every part is below 2^51 on the grid (rounded exactly by on_grid)
 * and their sum below 2^62; INT32_MIN: not finite (the results are NaN).
 */
static int grid_shift(part_stats s)
{
	if (!isfinite(s.max))
		return INT32_MIN;
	if (s.max == 0)
		return 0;
	int e, lg = 0;
	frexp(s.max, &e); /* max < 2^e */
	while (lg < 62 && ((int64_t)1 << lg) < s.count)
		lg++;
	return (lg > 11 ? 62 - lg : 51) - e;
}

/* A grid: 2^shift as a double (exact while shift is in a double's normal range), or ldexp beyond. */
typedef struct grid {
	int shift;
	double up, down;
} grid;

static grid grid_of(int shift)
{
	grid g = {shift, 0, 0};
	if (shift != INT32_MIN && shift > -1000 && shift < 1000)
		g.up = ldexp(1.0, shift), g.down = ldexp(1.0, -shift);
	return g;
}

/*
 * x on the grid, rounded to nearest (ties to even): |x| * 2^shift < 2^51,
 * so adding and taking away 1.5 * 2^52 leaves exactly the rounded integer
 * (no libm call; the compiler keeps the two operations, as C requires).
 */
static inline int64_t on_grid(double x, const grid *g)
{
	const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
	if (g->shift == INT32_MIN)
		return 0;
	double y = g->up != 0 ? x * g->up : ldexp(x, g->shift);
	return (int64_t)((y + magic) - magic);
}

static inline double off_grid(int64_t q, const grid *g)
{
	if (g->shift == INT32_MIN)
		return NAN;
	return g->down != 0 ? (double)q * g->down : ldexp((double)q, -g->shift);
}

static void take(part_stats *s, double x)
{
	double a = fabs(x);
	if (isnan(a) || isnan(s->max))
		s->max = NAN; /* sticks: the results are NaN, as without the grid */
	else if (a > s->max)
		s->max = a;
}

/* q[i] += v[i] on grid g */
static void add_on_grid(int64_t *restrict q, const float *restrict v, size_t n, const grid *g)
{
	if (g->shift == INT32_MIN || g->up == 0) {
		for (size_t i = 0; i < n; i++)
			q[i] += on_grid((double)v[i], g);
		return;
	}
	/*
	 * y + magic lies in [2^52, 2^53), where consecutive doubles are 1 apart:
	 * its bits minus magic's are the rounded integer, and integer
	 * subtraction vectorizes where a conversion would not.
	 */
	const double magic = 6755399441055744.0, up = g->up;
	int64_t mbits;
	memcpy(&mbits, &magic, sizeof(mbits));
	for (size_t i = 0; i < n; i++) {
		double y = (double)v[i] * up + magic;
		int64_t b;
		memcpy(&b, &y, sizeof(b));
		q[i] += b - mbits;
	}
}

/* The largest |v[i]|, NaN if any is (a loop the compiler vectorizes). */
static double absmax(const float *v, size_t n)
{
	float m = 0;
	int nan = 0;
	for (size_t i = 0; i < n; i++) {
		float a = fabsf(v[i]);
		m = a > m ? a : m;
		nan |= a != a;
	}
	return nan ? NAN : (double)m;
}

/* The data-parallel tables' (sample, id) contributions, each once: to stats (when q is NULL) or onto the grid. */
static void dp_parts(const rs_trainer *tr, int si, part_stats *ps, int64_t *q, const grid *g)
{
	const lshard *ls = &tr->shards[si];
	const rs_batch *b = &tr->batch;
	int64_t rows = ls->emb.nrows;
	int32_t dim = ls->emb.dim;
	for (int32_t f = 0; f < tr->nfeat; f++) {
		if (tr->tables[tr->feat_table[f]].dp_shard != si)
			continue;
		rs_pooling pooling = tr->cfg->tables[tr->feat_table[f]].pooling;
		for (int32_t i = 0; i < b->size; i++) {
			int32_t lo = b->offsets[f][i], hi = b->offsets[f][i + 1];
			const float *go = tr->dpooled + (size_t)i * (size_t)tr->emb_width + (size_t)tr->feat_off[f];
			float scale = pooling == RS_POOL_MEAN && hi > lo ? 1.0f / (float)(hi - lo) : 1.0f;
			for (int32_t j = lo; j < hi; j++) {
				int64_t r = b->ids[f][j];
				if (r < 0 || r >= rows)
					continue; /* as rs_emb_grad_accumulate: no row (the lookup refused a bad id already) */
				for (int32_t c = 0; c < dim; c++) {
					if (!q)
						take(ps, (double)(go[c] * scale));
					else
						q[r * dim + c] += on_grid((double)(go[c] * scale), g);
				}
				if (q)
					q[rows * dim + r] += 1; /* touched */
				else
					ps->count++;
			}
		}
	}
}

/* Micro-batch k of this rank's slice through the dense network: its gradient into the network's, dpooled's rows, its loss. */
static rs_status micro_batch(rs_trainer *tr, int32_t k, float *dpooled, double *loss, rs_err *err)
{
	size_t mb = (size_t)tr->cfg->train.micro_batch, s0 = (size_t)k * mb;
	memset(rs_dense_grads(tr->dense), 0, sizeof(float) * rs_dense_nparams(tr->dense));
	return rs__said(rs_dense_forward_backward(tr->dense, tr->batch.dense + s0 * RS_NUM_DENSE,
						  tr->pooled + s0 * (size_t)tr->emb_width, tr->batch.labels + s0, (int32_t)mb,
						  dpooled, loss),
			"the dense network", err);
}

rs_status rs__exact_step(rs_trainer *tr, float inv, float **dp, double *loss, rs_err *err)
{
	int32_t n = tr->batch.size, mb = (int32_t)tr->cfg->train.micro_batch, nc = n / mb, W = tr->emb_width;
	size_t np = rs_dense_nparams(tr->dense), nq = np + 1;
	float *grads = rs_dense_grads(tr->dense);
	int ndp = 0;
	for (int i = 0; i < tr->nshards; i++)
		if (rs__is_dp(tr, i)) {
			ndp++;
			nq += (size_t)(tr->shards[i].emb.nrows * (tr->shards[i].emb.dim + 1));
		}
	int nsums = 2 + ndp;
	/* the micro-batches' gradients kept until the grid is known, or computed again after (beyond the cap) */
	int keep_all = (size_t)nc * np * sizeof(float) <= RS_EXACT_KEEP_BYTES;
	double *closs = malloc(sizeof(double) * ((size_t)nc + 1));
	part_stats *ps = calloc((size_t)nsums * ((size_t)tr->world + 1), sizeof(part_stats));
	grid *shift = malloc(sizeof(grid) * (size_t)nsums);
	rs_status st = RS_OK;
	if (!closs || !ps || !shift ||
	    rs_grow(&tr->exact.keep.v, &tr->exact.keep.cap, keep_all ? np * (size_t)nc + 1 : (size_t)mb * (size_t)W + 1,
		    sizeof(float)) != RS_OK ||
	    rs_grow(&tr->exact.q.v, &tr->exact.q.cap, nq, sizeof(int64_t)) != RS_OK)
		RSFAILGOTO(st, rs__said(RS_ENOMEM, "the deterministic sums", err), out);
	float *keep = tr->exact.keep.v;
	int64_t *q = tr->exact.q.v;
	memset(q, 0, sizeof(int64_t) * nq);

	/* each micro-batch on its own: its dense gradient and its loss */
	for (int32_t k = 0; k < nc; k++) {
		RSCHECKGOTO(micro_batch(tr, k, tr->dpooled + (size_t)k * (size_t)mb * (size_t)W, &closs[k], err), st, out);
		if (keep_all)
			memcpy(keep + (size_t)k * np, grads, sizeof(float) * np);
		take(&ps[0], absmax(grads, np));
		take(&ps[1], closs[k]);
	}
	ps[0].count = ps[1].count = nc;
	/* gradients of the mean loss over the global batch */
	for (size_t k = 0; k < (size_t)n * (size_t)W; k++)
		tr->dpooled[k] *= inv;
	for (int i = 0, d = 2; i < tr->nshards; i++)
		if (rs__is_dp(tr, i))
			dp_parts(tr, i, &ps[d++], NULL, NULL);

	/* the grids: every rank's stats (rank order), then the same shifts everywhere */
	part_stats *all = ps + nsums;
	RSCHECKGOTO(rs__said_transport(tr, rs_transport_allgather(tr->t, ps, sizeof(part_stats) * (size_t)nsums, all),
				       "the deterministic sums' ranges (all-gather)", err),
		    st, out);
	for (int s = 0; s < nsums; s++) {
		part_stats g = {0, 0};
		for (int32_t p = 0; p < tr->world; p++) {
			take(&g, all[(size_t)p * (size_t)nsums + (size_t)s].max);
			g.count += all[(size_t)p * (size_t)nsums + (size_t)s].count;
		}
		shift[s] = grid_of(grid_shift(g));
	}

	/* onto the grids, summed exactly, and back */
	for (int32_t k = 0; k < nc; k++) {
		double again;
		if (!keep_all) /* the same floats again (its input gradient into scratch: tr->dpooled is scaled already) */
			RSCHECKGOTO(micro_batch(tr, k, keep, &again, err), st, out);
		add_on_grid(q, keep_all ? keep + (size_t)k * np : grads, np, &shift[0]);
		q[np] += on_grid(closs[k], &shift[1]);
	}
	size_t at = np + 1;
	for (int i = 0, d = 2; i < tr->nshards; i++)
		if (rs__is_dp(tr, i)) {
			dp_parts(tr, i, NULL, q + at, &shift[d++]);
			at += (size_t)(tr->shards[i].emb.nrows * (tr->shards[i].emb.dim + 1));
		}
	RSCHECKGOTO(rs__said_transport(tr, rs_transport_allreduce_i64(tr->t, q, nq), "the deterministic sums (all-reduce)",
				       err),
		    st, out);
	for (size_t x = 0; x < np; x++)
		grads[x] = (float)off_grid(q[x], &shift[0]);
	*loss = off_grid(q[np], &shift[1]);
	at = np + 1;
	for (int i = 0, d = 2; i < tr->nshards; i++) {
		if (!rs__is_dp(tr, i))
			continue;
		int64_t rows = tr->shards[i].emb.nrows, cells = rows * tr->shards[i].emb.dim;
		float *buf = malloc(sizeof(float) * (size_t)(cells + rows) + 1);
		if (!buf)
			RSFAILGOTO(st, rs__said(RS_ENOMEM, "the data-parallel gradients", err), out);
		for (int64_t x = 0; x < cells; x++)
			buf[x] = (float)off_grid(q[at + (size_t)x], &shift[d]);
		for (int64_t r = 0; r < rows; r++)
			buf[cells + r] = (float)q[at + (size_t)(cells + r)];
		dp[i] = buf;
		at += (size_t)(cells + rows);
		d++;
	}
out:
	free(shift);
	free(ps);
	free(closs);
	return st;
}
