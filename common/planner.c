/*
 * planner.c - sharding plans: resolve each table's sharding type, cut tables
 * into shards, place the shards on ranks under memory caps, and, given the
 * previous plan, keep every shard where it was unless balance requires
 * otherwise.
 *
 * The steps, in order (each a function below):
 *   1. resolve_types   auto -> a type by size and cost, as TorchRec's
 *                      planner would choose; explicit types are kept
 *   2. place_spread    DP (a copy everywhere), RW (rows over all ranks),
 *                      ZCH (whole buckets over all ranks): loads that
 *                      follow from the type alone
 *   3. place_nodes     TWRW and GRID column blocks: each block's rows over
 *                      the ranks of the least loaded node
 *   4. place_items     TW tables, CW column blocks and co-location groups:
 *                      pins first, then longest-processing-time first onto
 *                      the least loaded rank with room, then a refinement
 *                      that moves items off the most loaded rank
 * With a previous plan, steps 2-4 start from where every shard was (mapped
 * to new ranks) and rebalance: row ranges and buckets keep as many rows on
 * their holders as a balanced split allows (rebalance_ranges), items stay
 * unless their rank left or the most loaded rank must shed load.
 *
 * Planning happens over S "logical" ranks (S = the sharding group; S = W
 * without 2D) and is expanded to the R replica groups at the end.
 */
#include "common/planner.h"
#include "common/clock.h"
#include "common/cost.h"
#include "common/buckets.h"
#include "common/grow.h"
#include "common/plandiff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An item costing more than this fraction of the mean rank load is split. */
#define SPLIT_FRACTION 0.25
/* A table bigger than this fraction of a rank's memory is split. */
#define SPLIT_MEMORY_FRACTION 0.5
/* Column blocks are at least this wide when the planner picks the width. */
#define MIN_AUTO_CW_WIDTH 32
/* Incremental replans stop shedding load once max cost <= lower bound * this. */
#define REPLAN_TOLERANCE 1.01

typedef struct range {
	int64_t off, n;
	int32_t owner;
} range;

typedef struct shard_vec {
	rs_shard *v;
	size_t n, cap;
} shard_vec;

/* A placement unit for step 4: a TW table, one CW block, or a co-location group. */
typedef struct item {
	int first;              /* index into planner.members */
	int count;              /* tables in the item (> 1 for co-location groups) */
	int32_t col_offset, cols; /* CW block (0, dim for whole tables) */
	double cost;
	uint64_t bytes;
	int32_t pin;            /* logical rank or -1 */
	int pin_table;          /* the table that carries the pin */
	int32_t rank;           /* logical rank or -1 */
	int32_t prev_rank;      /* logical rank it had in the previous plan, or -1 */
	int next;               /* next item on the same rank, -1 ends */
} item;

typedef struct planner {
	const rs_config *cfg;
	rs_world world;         /* physical */
	int32_t S, R, K;        /* logical ranks, replica groups, logical ranks per node */
	int32_t nodes;
	double split_cost;      /* items costing more than this are split (SPLIT_FRACTION of the mean load) */
	const rs_plan *prev;    /* NULL for a fresh plan */
	const int32_t *prev_map; /* previous physical rank -> new logical rank or -1 */
	rs_sharding *type;      /* per table */
	shard_vec *shards;      /* per table, logical ranks, replica 0 */
	double *load;           /* per logical rank */
	uint64_t *mem;
	double *fixed;          /* load from steps 2 and 3 (not movable by step 4) */
	item *items;
	int nitems;
	size_t cap_items;
	int *members;           /* table indices, grouped per item */
	int nmembers;
	size_t cap_members;
	int *head;              /* per logical rank: first item, -1 */
	rs_err *err;
} planner;

/* ---- small helpers -------------------------------------------------------- */

static rs_status push_shard(shard_vec *sv, rs_shard s)
{
	RSCHECK(rs_grow(&sv->v, &sv->cap, sv->n + 1, sizeof(*sv->v)));
	sv->v[sv->n++] = s;
	return RS_OK;
}

rs_status rs_planner_rank_map(int32_t n0, int32_t n, const int32_t *removed, int nremoved,
			      int32_t *prev_to_new, rs_err *err)
{
	if (n0 < 1 || n < 1)
		return rs_err_set(err, RS_EINVAL, "world sizes must be >= 1 (got %d -> %d)", n0, n);
	if (!removed) {
		for (int32_t r = 0; r < n0; r++)
			prev_to_new[r] = r < n ? r : -1;
		return RS_OK;
	}
	for (int32_t r = 0; r < n0; r++)
		prev_to_new[r] = 0;
	for (int i = 0; i < nremoved; i++) {
		if (removed[i] < 0 || removed[i] >= n0)
			return rs_err_set(err, RS_EINVAL, "removed rank %d is not in the previous world of %d ranks",
					  removed[i], n0);
		if (prev_to_new[removed[i]] == -1)
			return rs_err_set(err, RS_EINVAL, "rank %d is removed twice", removed[i]);
		prev_to_new[removed[i]] = -1;
	}
	int32_t next = 0;
	for (int32_t r = 0; r < n0; r++)
		if (prev_to_new[r] != -1)
			prev_to_new[r] = next++;
	if (next > n)
		return rs_err_set(err, RS_EINVAL,
				  "%d ranks survive the removal but the new world has only %d", next, n);
	return RS_OK;
}

/* Logical rank of a previous plan's physical rank, or -1 when it left. */
static int32_t prev_logical(const planner *p, int32_t prev_rank)
{
	int32_t r = p->prev_map[prev_rank];
	return r < 0 ? -1 : r / p->R;
}

static uint64_t table_bytes(const planner *p, int t, int64_t rows, int32_t cols)
{
	rs_shard s = {.rows = rows, .cols = cols};
	return rs_shard_bytes(p->cfg, &p->cfg->tables[t], &s);
}

static double table_cost(const planner *p, int t, rs_sharding type, int64_t rows, int32_t cols)
{
	rs_shard s = {.rows = rows, .cols = cols};
	return rs_shard_cost(p->cfg, &p->cfg->tables[t], type, &p->world, &s);
}

/* Add a logical shard and account for its load. */
static rs_status add_shard(planner *p, int t, int32_t rank, int64_t row_off, int64_t rows,
			   int32_t col_off, int32_t cols, int fixed)
{
	const rs_table_config *tc = &p->cfg->tables[t];
	rs_shard s = {.rank = rank, .row_offset = row_off, .rows = rows,
		      .col_offset = col_off, .cols = cols};
	if (tc->has_zch) {
		int64_t spb = (int64_t)(tc->zch.slots / tc->zch.buckets);
		s.bucket_offset = (uint32_t)(row_off / spb);
		s.buckets = (uint32_t)(rows / spb);
	}
	double c = rs_shard_cost(p->cfg, tc, p->type[t], &p->world, &s);
	p->load[rank] += c;
	if (fixed)
		p->fixed[rank] += c;
	p->mem[rank] += rs_shard_bytes(p->cfg, tc, &s);
	return push_shard(&p->shards[t], s);
}

/* ---- step 1: sharding types ---------------------------------------------- */

static int32_t cw_blocks_for(const planner *p, int t, double cost, double target)
{
	int32_t dim = p->cfg->tables[t].dim;
	int32_t want = (int32_t)ceil(cost / target);
	int32_t maxb = dim / MIN_AUTO_CW_WIDTH;
	if (want > maxb)
		want = maxb;
	if (want > p->S)
		want = p->S;
	return want < 1 ? 1 : want;
}

static void resolve_types(planner *p)
{
	const rs_config *cfg = p->cfg;
	double total = 0;
	for (int t = 0; t < cfg->ntables; t++)
		total += table_cost(p, t, RS_SHARD_TW, cfg->tables[t].rows, cfg->tables[t].dim);
	double target = p->split_cost = SPLIT_FRACTION * total / p->S;
	double mem_limit = SPLIT_MEMORY_FRACTION * (double)p->world.memory_per_rank;

	for (int t = 0; t < cfg->ntables; t++) {
		const rs_table_config *tc = &cfg->tables[t];
		if (p->prev) {
			p->type[t] = p->prev->tables[t].sharding;
			continue;
		}
		if (tc->sharding != RS_SHARD_AUTO) {
			p->type[t] = tc->sharding;
			continue;
		}
		double cost = table_cost(p, t, RS_SHARD_TW, tc->rows, tc->dim);
		double bytes = (double)table_bytes(p, t, tc->rows, tc->dim);
		if (tc->rank >= 0 || tc->colocate) {
			p->type[t] = RS_SHARD_TW;
		} else if (tc->has_zch) {
			p->type[t] = RS_SHARD_RW; /* whole buckets, even on one rank, so growth moves buckets */
		} else if (cost <= target && bytes <= mem_limit) {
			p->type[t] = RS_SHARD_TW;
		} else if (tc->dim % 4 == 0 && bytes / tc->dim * MIN_AUTO_CW_WIDTH <= mem_limit &&
			   cw_blocks_for(p, t, cost, target) * target >= cost) {
			p->type[t] = RS_SHARD_CW;     /* wide: column blocks are enough */
		} else if (p->nodes > 1 && bytes / p->K <= mem_limit && cost / p->K <= target) {
			p->type[t] = RS_SHARD_TWRW;   /* fits a node */
		} else if (p->nodes > 1 && tc->dim % 4 == 0 && tc->dim >= 2 * MIN_AUTO_CW_WIDTH) {
			p->type[t] = RS_SHARD_GRID;   /* huge and wide */
		} else {
			p->type[t] = RS_SHARD_RW;
		}
	}
}

/* Column blocks of a CW or GRID table, as multiples of 4 (the last may be narrower when dim % 4 != 0). */
static int32_t column_blocks(const planner *p, int t, int32_t *offs, int32_t *widths, int32_t max)
{
	const rs_table_config *tc = &p->cfg->tables[t];
	int32_t units = (tc->dim + 3) / 4, nb;
	double cost = table_cost(p, t, RS_SHARD_TW, tc->rows, tc->dim);
	if (p->type[t] == RS_SHARD_GRID)
		nb = (tc->dim + 127) / 128;
	else
		nb = cw_blocks_for(p, t, cost, p->split_cost);
	if (nb < 2 && tc->dim >= 8)
		nb = 2; /* an explicit column-wise table gets at least two blocks */
	if (nb > units)
		nb = units;
	if (nb > max)
		nb = max;
	int32_t off = 0;
	for (int32_t b = 0; b < nb; b++) {
		int32_t u = units / nb + (b < units % nb);
		int32_t w = u * 4;
		if (off + w > tc->dim)
			w = tc->dim - off;
		offs[b] = off;
		widths[b] = w;
		off += w;
	}
	return nb;
}

/* ---- range rebalancing (RW rows, TWRW blocks) ------------------------------ */

static int cmp_range_off(const void *a, const void *b)
{
	const range *x = a, *y = b;
	if (x->off != y->off)
		return (x->off > y->off) - (x->off < y->off);
	return (x->owner > y->owner) - (x->owner < y->owner);
}

/*
 * The fewest rows any split of `total` rows over members [lo, hi) with counts
 * within one of each other must move, given cur[m - lo] rows already held:
 * the rows not kept when the members holding most get the larger shares.
 */
static int64_t min_range_moves(const int64_t *cur, int32_t nm, int64_t total, int64_t *target)
{
	int64_t base = total / nm, rem = total % nm, kept = 0;
	range *order = malloc(sizeof(*order) * (size_t)nm);
	if (!order)
		return -1;
	/* members by rows held, most first (ties: lower rank), as ranges keyed by -cur */
	for (int32_t m = 0; m < nm; m++)
		order[m] = (range){.off = -cur[m], .n = m, .owner = m};
	qsort(order, (size_t)nm, sizeof(range), cmp_range_off);
	for (int32_t i = 0; i < nm; i++) {
		int32_t m = order[i].owner;
		int64_t tg = base + (i < rem);
		target[m] = tg;
		kept += cur[m] < tg ? cur[m] : tg;
	}
	free(order);
	return total - kept;
}

/*
 * Re-split the ranges `in` (rows of one table or column block; owners are
 * new logical ranks, -1 for rows whose holder left) over members [lo, hi),
 * keeping the most rows in place. *out gets the new ranges sorted by offset,
 * adjacent ranges of one owner merged. Returns the rows moved in *moved.
 */
static rs_status rebalance_ranges(range *in, int nin, int32_t lo, int32_t hi,
				  range **out, int *nout, int64_t *moved)
{
	int32_t nm = hi - lo;
	int64_t total = 0;
	int64_t *cur = calloc((size_t)nm, sizeof(int64_t));
	int64_t *target = calloc((size_t)nm, sizeof(int64_t));
	int64_t *kept = calloc((size_t)nm, sizeof(int64_t));
	range *res = malloc(sizeof(range) * (size_t)(2 * nin + 2 * nm + 1));
	range *pool = malloc(sizeof(range) * (size_t)(nin + 1));
	int nres = 0, npool = 0;
	rs_status st = RS_ENOMEM;

	if (!cur || !target || !kept || !res || !pool)
		goto out;
	qsort(in, (size_t)nin, sizeof(range), cmp_range_off);
	for (int i = 0; i < nin; i++) {
		total += in[i].n;
		if (in[i].owner >= lo && in[i].owner < hi)
			cur[in[i].owner - lo] += in[i].n;
	}
	*moved = min_range_moves(cur, nm, total, target);
	if (*moved < 0)
		goto out;
	/* keep each member's lowest rows up to its target; the rest goes to the pool */
	for (int i = 0; i < nin; i++) {
		range r = in[i];
		if (r.owner >= lo && r.owner < hi) {
			int32_t m = r.owner - lo;
			int64_t take = target[m] - kept[m];
			if (take > r.n)
				take = r.n;
			if (take > 0) {
				res[nres++] = (range){r.off, take, r.owner};
				kept[m] += take;
				r.off += take;
				r.n -= take;
			}
		}
		if (r.n > 0)
			pool[npool++] = (range){r.off, r.n, -1};
	}
	/* members short of their target take pooled rows in offset order */
	int pi = 0;
	for (int32_t m = 0; m < nm; m++) {
		while (kept[m] < target[m]) {
			int64_t take = target[m] - kept[m];
			if (take > pool[pi].n)
				take = pool[pi].n;
			res[nres++] = (range){pool[pi].off, take, lo + m};
			kept[m] += take;
			pool[pi].off += take;
			pool[pi].n -= take;
			if (pool[pi].n == 0)
				pi++;
		}
	}
	qsort(res, (size_t)nres, sizeof(range), cmp_range_off);
	int w = 0;
	for (int i = 0; i < nres; i++) {
		if (w > 0 && res[w - 1].owner == res[i].owner && res[w - 1].off + res[w - 1].n == res[i].off)
			res[w - 1].n += res[i].n;
		else
			res[w++] = res[i];
	}
	*out = res;
	*nout = w;
	res = NULL;
	st = RS_OK;
out:
	free(pool);
	free(res);
	free(kept);
	free(target);
	free(cur);
	return st;
}

/* Previous ranges of table t restricted to column block [c0, c0 + cw), owners mapped. */
static rs_status prev_ranges(const planner *p, int t, int32_t c0, range **out, int *n)
{
	const rs_table_plan *tp = &p->prev->tables[t];
	range *r = malloc(sizeof(range) * (size_t)(tp->nshards + 1));
	int k = 0;
	if (!r)
		return RS_ENOMEM;
	for (int i = 0; i < tp->nshards; i++) {
		const rs_shard *s = &tp->shards[i];
		if (s->replica != 0 || s->col_offset != c0)
			continue;
		r[k++] = (range){s->row_offset, s->rows, prev_logical(p, s->rank)};
	}
	*out = r;
	*n = k;
	return RS_OK;
}

/* Emit ranges as shards of table t, column block [c0, c0 + cw). */
static rs_status emit_ranges(planner *p, int t, const range *r, int n, int32_t c0, int32_t cw)
{
	for (int i = 0; i < n; i++)
		RSCHECK(add_shard(p, t, r[i].owner, r[i].off, r[i].n, c0, cw, 1));
	return RS_OK;
}

/* ---- step 2: DP, RW and ZCH ------------------------------------------------ */

static rs_status place_zch(planner *p, int t)
{
	const rs_table_config *tc = &p->cfg->tables[t];
	uint32_t nb = tc->zch.buckets;
	int64_t spb = (int64_t)(tc->zch.slots / nb);
	int32_t *owner = malloc(sizeof(int32_t) * nb);
	int32_t *prev = NULL;
	rs_status st = RS_ENOMEM;

	if (!owner)
		goto out;
	if (p->prev) {
		prev = malloc(sizeof(int32_t) * nb);
		if (!prev)
			goto out;
		const rs_table_plan *tp = &p->prev->tables[t];
		for (int i = 0; i < tp->nshards; i++) {
			const rs_shard *s = &tp->shards[i];
			if (s->replica != 0)
				continue;
			for (uint32_t b = s->bucket_offset; b < s->bucket_offset + s->buckets; b++)
				prev[b] = prev_logical(p, s->rank);
		}
	}
	RSCHECKGOTO(rs_buckets_assign(nb, p->S, prev, NULL, owner, p->err), st, out);
	for (uint32_t b = 0; b < nb;) {
		uint32_t e = b + 1;
		while (e < nb && owner[e] == owner[b])
			e++;
		RSCHECKGOTO(add_shard(p, t, owner[b], (int64_t)b * spb, (int64_t)(e - b) * spb,
				      0, tc->dim, 1), st, out);
		b = e;
	}
	st = RS_OK;
out:
	free(prev);
	free(owner);
	return st;
}

/* Rows of column block [c0, c0+cw) of table t over logical ranks [lo, hi). */
static rs_status place_rows(planner *p, int t, int32_t c0, int32_t cw, int32_t lo, int32_t hi)
{
	range *in = NULL, *out = NULL;
	int nin = 0, nout = 0;
	int64_t moved;
	rs_status st;

	if (p->prev) {
		RSCHECK(prev_ranges(p, t, c0, &in, &nin));
	} else {
		in = malloc(sizeof(range));
		if (!in)
			return RS_ENOMEM;
		in[0] = (range){0, p->cfg->tables[t].rows, -1};
		nin = 1;
	}
	RSCHECKGOTO(rebalance_ranges(in, nin, lo, hi, &out, &nout, &moved), st, done);
	st = emit_ranges(p, t, out, nout, c0, cw);
done:
	free(out);
	free(in);
	return st;
}

static rs_status place_spread(planner *p)
{
	for (int t = 0; t < p->cfg->ntables; t++) {
		const rs_table_config *tc = &p->cfg->tables[t];
		if (p->type[t] == RS_SHARD_DP) {
			for (int32_t r = 0; r < p->S; r++)
				RSCHECK(add_shard(p, t, r, 0, tc->rows, 0, tc->dim, 1));
		} else if (p->type[t] == RS_SHARD_RW) {
			if (tc->has_zch)
				RSCHECK(place_zch(p, t));
			else
				RSCHECK(place_rows(p, t, 0, tc->dim, 0, p->S));
		}
	}
	return RS_OK;
}

/* ---- step 3: TWRW and GRID blocks on nodes --------------------------------- */

typedef struct block {
	int t;
	int32_t c0, cw;
	double cost;
	int32_t node;   /* from the previous plan, or -1 */
} block;

static int cmp_block(const void *a, const void *b)
{
	const block *x = a, *y = b;
	if (x->cost != y->cost)
		return x->cost > y->cost ? -1 : 1;
	if (x->t != y->t)
		return x->t - y->t;
	return x->c0 - y->c0;
}

static int32_t node_lo(const planner *p, int32_t n) { return n * p->K; }
static int32_t node_hi(const planner *p, int32_t n)
{
	int32_t hi = (n + 1) * p->K;
	return hi < p->S ? hi : p->S;
}

/* The node whose ranks are least loaded on average and have room for a block. */
static int32_t pick_node(const planner *p, int t, int32_t cw)
{
	int32_t best = -1;
	double best_load = 0;
	for (int32_t n = 0; n < p->nodes; n++) {
		int32_t lo = node_lo(p, n), hi = node_hi(p, n);
		uint64_t need = table_bytes(p, t, (p->cfg->tables[t].rows + (hi - lo) - 1) / (hi - lo), cw);
		double sum = 0;
		int fits = 1;
		for (int32_t r = lo; r < hi; r++) {
			sum += p->load[r];
			fits &= p->mem[r] + need <= p->world.memory_per_rank;
		}
		sum /= (hi - lo);
		if (fits && (best < 0 || sum < best_load)) {
			best = n;
			best_load = sum;
		}
	}
	return best;
}

static rs_status place_nodes(planner *p)
{
	int nblocks = 0, cap = 0;
	block *bl = NULL;
	rs_status st = RS_OK;
	int32_t offs[64], widths[64];

	for (int t = 0; t < p->cfg->ntables; t++) {
		if (p->type[t] != RS_SHARD_TWRW && p->type[t] != RS_SHARD_GRID)
			continue;
		int32_t nb = 1;
		offs[0] = 0;
		widths[0] = p->cfg->tables[t].dim;
		if (p->prev) {
			/* the previous column blocks, and the node most of each block was on */
			const rs_table_plan *tp = &p->prev->tables[t];
			nb = 0;
			for (int i = 0; i < tp->nshards && nb < 64; i++)
				if (tp->shards[i].replica == 0 &&
				    (nb == 0 || offs[nb - 1] != tp->shards[i].col_offset)) {
					offs[nb] = tp->shards[i].col_offset;
					widths[nb++] = tp->shards[i].cols;
				}
		} else if (p->type[t] == RS_SHARD_GRID) {
			nb = column_blocks(p, t, offs, widths, 64);
		}
		if (nblocks + nb > cap) {
			cap = (nblocks + nb) * 2;
			block *nbl = realloc(bl, sizeof(block) * (size_t)cap);
			if (!nbl) {
				st = RS_ENOMEM;
				goto out;
			}
			bl = nbl;
		}
		for (int32_t b = 0; b < nb; b++) {
			block *x = &bl[nblocks++];
			*x = (block){t, offs[b], widths[b],
				     table_cost(p, t, RS_SHARD_TW, p->cfg->tables[t].rows, widths[b]), -1};
			if (p->prev) {
				/* the node that keeps the most rows of this block */
				const rs_table_plan *tp = &p->prev->tables[t];
				int64_t best = 0;
				for (int i = 0; i < tp->nshards; i++) {
					const rs_shard *s = &tp->shards[i];
					int32_t r = s->replica == 0 && s->col_offset == x->c0 ?
						    prev_logical(p, s->rank) : -1;
					if (r >= 0 && s->rows > best) {
						best = s->rows;
						x->node = r / p->K;
					}
				}
			}
		}
	}
	if (nblocks > 1)
		qsort(bl, (size_t)nblocks, sizeof(block), cmp_block);
	for (int i = 0; i < nblocks; i++) {
		block *x = &bl[i];
		int32_t node = x->node >= 0 ? x->node : pick_node(p, x->t, x->cw);
		if (node < 0) {
			st = rs_err_set(p->err, RS_ENOSPACE,
					"table '%s' (columns %d..%d) fits no node's memory (%llu bytes per rank)",
					p->cfg->tables[x->t].name, x->c0, x->c0 + x->cw - 1,
					(unsigned long long)p->world.memory_per_rank);
			goto out;
		}
		RSCHECKGOTO(place_rows(p, x->t, x->c0, x->cw, node_lo(p, node), node_hi(p, node)), st, out);
	}
out:
	free(bl);
	return st;
}

/* ---- step 4: items --------------------------------------------------------- */

static rs_status add_item(planner *p, item it)
{
	RSCHECK(rs_grow(&p->items, &p->cap_items, (size_t)p->nitems + 1, sizeof(item)));
	p->items[p->nitems++] = it;
	return RS_OK;
}

static rs_status push_member(planner *p, int t)
{
	RSCHECK(rs_grow(&p->members, &p->cap_members, (size_t)p->nmembers + 1, sizeof(int)));
	p->members[p->nmembers++] = t;
	return RS_OK;
}

/* The previous logical rank of table t's block at column c0 (TW/CW), or -1. */
static int32_t prev_item_rank(const planner *p, int t, int32_t c0)
{
	const rs_table_plan *tp = &p->prev->tables[t];
	for (int i = 0; i < tp->nshards; i++)
		if (tp->shards[i].replica == 0 && tp->shards[i].col_offset == c0)
			return prev_logical(p, tp->shards[i].rank);
	return -1;
}

static rs_status build_items(planner *p)
{
	const rs_config *cfg = p->cfg;
	char *done = calloc((size_t)cfg->ntables, 1);
	if (!done)
		return RS_ENOMEM;
	for (int t = 0; t < cfg->ntables; t++) {
		const rs_table_config *tc = &cfg->tables[t];
		if (done[t] || (p->type[t] != RS_SHARD_TW && p->type[t] != RS_SHARD_CW))
			continue;
		if (p->type[t] == RS_SHARD_CW) {
			int32_t offs[256], widths[256], nb = 0;
			if (p->prev) {
				const rs_table_plan *tp = &p->prev->tables[t];
				for (int i = 0; i < tp->nshards && nb < 256; i++)
					if (tp->shards[i].replica == 0) {
						offs[nb] = tp->shards[i].col_offset;
						widths[nb++] = tp->shards[i].cols;
					}
			} else {
				nb = column_blocks(p, t, offs, widths, 256);
			}
			for (int32_t b = 0; b < nb; b++) {
				if (push_member(p, t) != RS_OK)
					goto nomem;
				item it = {.first = p->nmembers - 1, .count = 1, .col_offset = offs[b], .cols = widths[b],
					   .cost = table_cost(p, t, RS_SHARD_CW, tc->rows, widths[b]),
					   .bytes = table_bytes(p, t, tc->rows, widths[b]),
					   .pin = tc->rank, .pin_table = t, .rank = -1, .prev_rank = -1, .next = -1};
				if (p->prev)
					it.prev_rank = prev_item_rank(p, t, offs[b]);
				if (add_item(p, it) != RS_OK)
					goto nomem;
			}
			done[t] = 1;
			continue;
		}
		/* a TW table, with the rest of its co-location group */
		item it = {.first = p->nmembers, .count = 0, .col_offset = 0, .cols = 0, .pin = -1,
			   .rank = -1, .prev_rank = -1, .next = -1};
		for (int u = t; u < cfg->ntables; u++) {
			const rs_table_config *uc = &cfg->tables[u];
			if (done[u] || p->type[u] != RS_SHARD_TW)
				continue;
			if (u != t && !(tc->colocate && uc->colocate && !strcmp(tc->colocate, uc->colocate)))
				continue;
			done[u] = 1;
			if (push_member(p, u) != RS_OK)
				goto nomem;
			it.count++;
			it.cost += table_cost(p, u, RS_SHARD_TW, uc->rows, uc->dim);
			it.bytes += table_bytes(p, u, uc->rows, uc->dim);
			if (uc->rank >= 0) {
				it.pin = uc->rank;
				it.pin_table = u;
			}
			if (p->prev && it.prev_rank < 0)
				it.prev_rank = prev_item_rank(p, u, 0);
			if (!tc->colocate)
				break;
		}
		if (add_item(p, it) != RS_OK)
			goto nomem;
	}
	free(done);
	return RS_OK;
nomem:
	free(done);
	return RS_ENOMEM;
}

static int cmp_item_desc(const void *a, const void *b)
{
	const item *x = a, *y = b;
	if (x->cost != y->cost)
		return x->cost > y->cost ? -1 : 1;
	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	return x->first - y->first;
}

static void put_item(planner *p, int i, int32_t r)
{
	item *it = &p->items[i];
	it->rank = r;
	it->next = p->head[r];
	p->head[r] = i;
	p->load[r] += it->cost;
	p->mem[r] += it->bytes;
}

static void take_item(planner *p, int i)
{
	item *it = &p->items[i];
	int *link = &p->head[it->rank];
	while (*link != i)
		link = &p->items[*link].next;
	*link = it->next;
	p->load[it->rank] -= it->cost;
	p->mem[it->rank] -= it->bytes;
	it->rank = -1;
	it->next = -1;
}

/* Binary min-heap of logical ranks keyed by (load, rank). */
typedef struct heap {
	int32_t *v;
	int32_t n;
	const double *load;
} heap;

static int heap_less(const heap *h, int32_t a, int32_t b)
{
	if (h->load[a] != h->load[b])
		return h->load[a] < h->load[b];
	return a < b;
}

static void heap_push(heap *h, int32_t r)
{
	int32_t i = h->n++;
	h->v[i] = r;
	while (i > 0 && heap_less(h, h->v[i], h->v[(i - 1) / 2])) {
		int32_t up = (i - 1) / 2, tmp = h->v[up];
		h->v[up] = h->v[i];
		h->v[i] = tmp;
		i = up;
	}
}

static int32_t heap_pop(heap *h)
{
	int32_t top = h->v[0], i = 0;
	h->v[0] = h->v[--h->n];
	for (;;) {
		int32_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < h->n && heap_less(h, h->v[l], h->v[m]))
			m = l;
		if (r < h->n && heap_less(h, h->v[r], h->v[m]))
			m = r;
		if (m == i)
			break;
		int32_t tmp = h->v[m];
		h->v[m] = h->v[i];
		h->v[i] = tmp;
		i = m;
	}
	return top;
}

static rs_status item_does_not_fit(planner *p, const item *it, int32_t rank)
{
	const rs_table_config *tc = &p->cfg->tables[rank >= 0 ? it->pin_table : p->members[it->first]];
	if (rank >= 0)
		return rs_err_set(p->err, RS_ENOSPACE,
				  "table '%s' pinned to rank %d does not fit its memory: needs %llu bytes, %llu free",
				  tc->name, rank, (unsigned long long)it->bytes,
				  (unsigned long long)(p->world.memory_per_rank - p->mem[rank]));
	return rs_err_set(p->err, RS_ENOSPACE,
			  "table '%s'%s needs %llu bytes with optimizer state and fits no rank's free memory (%llu bytes per rank)",
			  tc->name, it->count > 1 ? " (with its co-location group)" : "",
			  (unsigned long long)it->bytes, (unsigned long long)p->world.memory_per_rank);
}

/*
 * Longest-processing-time first: every unplaced item, in item order (sorted
 * by cost, descending), onto the least loaded rank with room.
 */
static rs_status place_lpt(planner *p)
{
	heap h = {.v = malloc(sizeof(int32_t) * (size_t)p->S), .n = 0, .load = p->load};
	int32_t *held = malloc(sizeof(int32_t) * (size_t)p->S);
	rs_status st = RS_OK;

	if (!h.v || !held) {
		st = RS_ENOMEM;
		goto out;
	}
	for (int32_t r = 0; r < p->S; r++)
		heap_push(&h, r);
	for (int i = 0; i < p->nitems; i++) {
		item *it = &p->items[i];
		int32_t nheld = 0, r = -1;
		if (it->rank >= 0)
			continue;
		while (h.n > 0) {
			int32_t c = heap_pop(&h);
			held[nheld++] = c;
			if (p->mem[c] + it->bytes <= p->world.memory_per_rank) {
				r = c;
				break;
			}
		}
		if (r < 0) {
			st = item_does_not_fit(p, it, -1);
			goto out;
		}
		/* the popped ranks' keys are unchanged except r's, which grows */
		put_item(p, i, r);
		for (int32_t k = 0; k < nheld; k++)
			heap_push(&h, held[k]);
	}
out:
	free(held);
	free(h.v);
	return st;
}

static int32_t argmax_load(const planner *p)
{
	int32_t m = 0;
	for (int32_t r = 1; r < p->S; r++)
		if (p->load[r] > p->load[m])
			m = r;
	return m;
}

static int32_t argmin_load(const planner *p)
{
	int32_t m = 0;
	for (int32_t r = 1; r < p->S; r++)
		if (p->load[r] < p->load[m])
			m = r;
	return m;
}

/* ---- a replan's shedding: the fewest bytes that carry a rank's excess --------------- */

#define SHED_NODES 4096   /* the search's bound: past it, the best set found so far */
#define SHED_MIN_ITEMS 16 /* a rank with fewer candidate items sheds them one at a time (refine) */

typedef struct shed_cand {
	double density; /* load per byte (INFINITY for an item of no bytes) */
	int i;          /* the item */
} shed_cand;

typedef struct shed_search {
	const planner *p;
	shed_cand *cand;     /* hi's movable items fitting lo, densest first */
	int n;
	double room;         /* the load lo can take */
	uint64_t left;       /* the memory lo has left */
	int *cur, ncur;      /* the set being tried */
	int *best, nbest;    /* the lightest set found */
	uint64_t best_bytes;
	long nodes;
} shed_search;

static int cmp_density(const void *a, const void *b)
{
	const shed_cand *x = a, *y = b;
	if (x->density != y->density)
		return x->density > y->density ? -1 : 1;
	return (x->i > y->i) - (x->i < y->i); /* one order whatever the sort */
}

/* At most the bytes of any set of cand[k..) carrying `need` (fractions of items allowed: densest first), or INFINITY. */
static double shed_fraction(const shed_search *s, int k, double need)
{
	double bytes = 0;
	for (; k < s->n && need > 0; k++) {
		const item *it = &s->p->items[s->cand[k].i];
		bytes += fmin(1.0, need / it->cost) * (double)it->bytes;
		need -= it->cost;
	}
	return need > 0 ? INFINITY : bytes;
}

/* Branch and bound over cand[k..): each item taken (densest first) or not. */
static void shed_dfs(shed_search *s, int k, double need, double cost, uint64_t bytes)
{
	if (need <= 0) {
		if (bytes < s->best_bytes) {
			memcpy(s->best, s->cur, sizeof(int) * (size_t)s->ncur);
			s->nbest = s->ncur;
			s->best_bytes = bytes;
		}
		return;
	}
	if (k >= s->n || ++s->nodes > SHED_NODES || (double)bytes + shed_fraction(s, k, need) >= (double)s->best_bytes)
		return;
	const item *it = &s->p->items[s->cand[k].i];
	if (cost + it->cost <= s->room && bytes + it->bytes <= s->left) {
		s->cur[s->ncur++] = s->cand[k].i;
		shed_dfs(s, k + 1, need - it->cost, cost + it->cost, bytes + it->bytes);
		s->ncur--;
	}
	shed_dfs(s, k + 1, need, cost, bytes);
}

/*
 * The items of rank hi (movable, fitting lo) carrying at least `need` load
 * within lo's `room` with the fewest bytes found: the densest taken in
 * turn while they fit, then whatever the search finds lighter within
 * SHED_NODES nodes. Their count in s->best; 0 when none do, or when hi has
 * fewer than SHED_MIN_ITEMS candidates. s's arrays hold p->nitems.
 */
static int shed_set(shed_search *s, int32_t hi, int32_t lo, double need, double room)
{
	const planner *p = s->p;
	double cost = 0;
	s->n = s->ncur = s->nbest = 0;
	s->room = room;
	s->left = p->mem[lo] < p->world.memory_per_rank ? p->world.memory_per_rank - p->mem[lo] : 0;
	s->best_bytes = s->left + 1; /* no set can weigh more */
	s->nodes = 0;
	if (room < need)
		return 0;
	for (int i = p->head[hi]; i >= 0; i = p->items[i].next) {
		const item *it = &p->items[i];
		if (it->pin < 0 && it->cost > 0 && it->cost <= room && it->bytes <= s->left)
			s->cand[s->n++] = (shed_cand){it->bytes ? it->cost / (double)it->bytes : INFINITY, i};
	}
	if (s->n < SHED_MIN_ITEMS)
		return 0;
	qsort(s->cand, (size_t)s->n, sizeof(*s->cand), cmp_density);
	uint64_t bytes = 0; /* the greedy set first: the search only looks for lighter ones */
	for (int k = 0; k < s->n && cost < need; k++) {
		const item *it = &p->items[s->cand[k].i];
		if (cost + it->cost <= room && bytes + it->bytes <= s->left) {
			s->best[s->nbest++] = s->cand[k].i;
			cost += it->cost, bytes += it->bytes;
		}
	}
	if (cost >= need)
		s->best_bytes = bytes;
	else
		s->nbest = 0;
	shed_dfs(s, 0, need, 0, 0);
	return s->nbest;
}

/*
 * Move items off the most loaded rank to the least loaded one while that
 * lowers the pair's maximum and the maximum is above `target`. A fresh plan
 * picks the item that best evens the pair; a replan (moves cost bytes)
 * sheds the rank's whole excess with the fewest bytes (shed_set), or when
 * no set can (or the rank has fewer than SHED_MIN_ITEMS movable items:
 * in test_planner's small replans whole sets moved more in all, one item
 * at a time lets other ranks take part), the item of the fewest bytes per
 * unit of load it needs to shed.
 */
static void refine(planner *p, double target, int replan)
{
	int budget = 4 * p->nitems + p->S;
	shed_search s = {.p = p};
	/* without memory for the search: an item at a time */
	s.cand = replan ? malloc(sizeof(*s.cand) * ((size_t)p->nitems + 1)) : NULL;
	int *scratch = s.cand ? malloc(sizeof(int) * 2 * ((size_t)p->nitems + 1)) : NULL;
	if (scratch)
		s.cur = scratch, s.best = scratch + p->nitems + 1;
	while (budget-- > 0) {
		int32_t hi = argmax_load(p), lo = argmin_load(p);
		double gap = p->load[hi] - p->load[lo], excess = p->load[hi] - target;
		int best = -1, n;
		double best_score = 0;
		if (excess <= 0 || hi == lo)
			break;
		if (scratch && (n = shed_set(&s, hi, lo, excess, target - p->load[lo])) > 0) {
			for (int k = 0; k < n; k++) {
				take_item(p, s.best[k]);
				put_item(p, s.best[k], lo);
			}
			continue;
		}
		for (int i = p->head[hi]; i >= 0; i = p->items[i].next) {
			const item *it = &p->items[i];
			/* a fresh plan evens the pair; a replan only keeps the receiver within target */
			int fits = replan ? p->load[lo] + it->cost <= target : it->cost < gap;
			if (it->pin >= 0 || it->cost <= 0 || !fits || p->mem[lo] + it->bytes > p->world.memory_per_rank)
				continue;
			double score = replan ? (double)it->bytes / fmin(it->cost, excess)
					      : fabs(it->cost - gap / 2);
			if (best < 0 || score < best_score) {
				best = i;
				best_score = score;
			}
		}
		if (best < 0)
			break;
		take_item(p, best);
		put_item(p, best, lo);
	}
	free(scratch);
	free(s.cand);
}

static rs_status place_items(planner *p)
{
	RSCHECK(build_items(p));
	if (p->nitems > 1)
		qsort(p->items, (size_t)p->nitems, sizeof(item), cmp_item_desc);
	for (int i = 0; i < p->nitems; i++) {
		item *it = &p->items[i];
		if (it->pin >= 0) {
			if (it->pin >= p->S)
				return rs_err_set(p->err, RS_EINVAL,
						  "%s: table '%s': field 'rank': pinned to rank %d but the world has %d ranks",
						  p->cfg->path, p->cfg->tables[it->pin_table].name, it->pin, p->S);
			if (p->mem[it->pin] + it->bytes > p->world.memory_per_rank)
				return item_does_not_fit(p, it, it->pin);
			put_item(p, i, it->pin);
		} else if (it->prev_rank >= 0 &&
			   p->mem[it->prev_rank] + it->bytes <= p->world.memory_per_rank) {
			put_item(p, i, it->prev_rank);
		}
	}
	return place_lpt(p);
}

/* ---- the plan ---------------------------------------------------------------- */

/* No placement of these shards can have a lower maximum than this. */
static double lower_bound(const planner *p)
{
	double total = 0, max_fixed = 0, min_fixed = INFINITY, max_item = 0;
	for (int32_t r = 0; r < p->S; r++) {
		total += p->load[r];
		max_fixed = fmax(max_fixed, p->fixed[r]);
		min_fixed = fmin(min_fixed, p->fixed[r]);
	}
	for (int i = 0; i < p->nitems; i++)
		max_item = fmax(max_item, p->items[i].cost);
	return fmax(fmax(total / p->S, max_fixed), max_item + min_fixed);
}

/* By previous rank, then load per byte, densest first. */
static int cmp_prev_density(const void *a, const void *b)
{
	const item *x = a, *y = b;
	if (x->prev_rank != y->prev_rank)
		return x->prev_rank < y->prev_rank ? -1 : 1;
	double dx = x->cost / (double)(x->bytes + 1), dy = y->cost / (double)(y->bytes + 1);
	return (dx < dy) - (dx > dy);
}

/*
 * A lower bound on the bytes of whole items from v[0..n) (densest first)
 * that together carry at least `need` load. Either one item carrying `need`
 * on its own is in the set (then at least the smallest such item), or all
 * items are smaller than `need` (then at least the fractional optimum over
 * the smaller items).
 */
static double shed_bytes(const item *v, int n, double need)
{
	double single = INFINITY, bytes = 0, left = need;
	for (int i = 0; i < n; i++)
		if (v[i].cost >= need)
			single = fmin(single, (double)v[i].bytes);
	for (int i = 0; i < n && left > 0; i++) {
		if (v[i].cost >= need)
			continue;
		double take = v[i].cost > 0 ? fmin(1.0, left / v[i].cost) : 1.0;
		bytes += take * (double)v[i].bytes;
		left -= v[i].cost;
	}
	return left > 0 ? single : fmin(single, bytes);
}

/*
 * A lower bound on the bytes of items any replan with maximum load `max`
 * must move: the items of removed ranks, plus, for every surviving rank
 * whose kept items would put it above `max`, a bound on the bytes of its
 * own items that carry the excess (shed_bytes). The sets are disjoint, so
 * the bytes add up.
 */
static rs_status min_item_bytes(planner *p, double max, uint64_t *out)
{
	item *v;
	double bytes = 0;
	*out = 0;
	if (p->nitems == 0)
		return RS_OK;
	v = malloc(sizeof(item) * (size_t)p->nitems);
	if (!v)
		return RS_ENOMEM;
	memcpy(v, p->items, sizeof(item) * (size_t)p->nitems);
	qsort(v, (size_t)p->nitems, sizeof(item), cmp_prev_density);
	for (int i = 0; i < p->nitems;) {
		int e = i;
		double kept = 0;
		while (e < p->nitems && v[e].prev_rank == v[i].prev_rank)
			kept += v[e++].cost;
		if (v[i].prev_rank < 0) {
			for (int k = i; k < e; k++)
				bytes += (double)v[k].bytes;
		} else {
			/* loads are sums in different orders: leave a margin for rounding */
			double need = p->fixed[v[i].prev_rank] + kept - max * (1 + 1e-9);
			if (need > 0)
				bytes += shed_bytes(v + i, e - i, need);
		}
		i = e;
	}
	free(v);
	*out = (uint64_t)floor(bytes);
	return RS_OK;
}

/* Lower bound on the bytes moved by the spread and node-bound tables (steps 2 and 3). */
static rs_status min_spread_bytes(planner *p, const char *survivor, uint64_t *out)
{
	uint64_t total = 0;
	for (int t = 0; t < p->cfg->ntables; t++) {
		const rs_table_config *tc = &p->cfg->tables[t];
		const rs_table_plan *tp = &p->prev->tables[t];
		rs_sharding ty = p->type[t];
		if (ty == RS_SHARD_DP) {
			for (int32_t r = 0; r < p->S; r++)
				if (!survivor[r])
					total += table_bytes(p, t, tc->rows, tc->dim);
		} else if (ty == RS_SHARD_RW && tc->has_zch) {
			uint32_t nb = tc->zch.buckets;
			int32_t *prev = malloc(sizeof(int32_t) * nb);
			if (!prev)
				return RS_ENOMEM;
			for (int i = 0; i < tp->nshards; i++)
				for (uint32_t b = 0; tp->shards[i].replica == 0 && b < tp->shards[i].buckets; b++)
					prev[tp->shards[i].bucket_offset + b] = prev_logical(p, tp->shards[i].rank);
			uint32_t mv = rs_buckets_min_moves(nb, p->S, prev);
			free(prev);
			total += (uint64_t)mv * table_bytes(p, t, (int64_t)(tc->zch.slots / nb), tc->dim);
		} else if (ty == RS_SHARD_RW || ty == RS_SHARD_TWRW || ty == RS_SHARD_GRID) {
			/* per column block, over the ranks that hold it in the new plan */
			const shard_vec *sv = &p->shards[t];
			for (size_t k = 0; k < sv->n;) {
				int32_t c0 = sv->v[k].col_offset, cw = sv->v[k].cols, lo = sv->v[k].rank, hi = lo;
				size_t e = k;
				while (e < sv->n && sv->v[e].col_offset == c0) {
					lo = sv->v[e].rank < lo ? sv->v[e].rank : lo;
					hi = sv->v[e].rank > hi ? sv->v[e].rank : hi;
					e++;
				}
				if (ty != RS_SHARD_RW) { /* the whole node */
					lo = node_lo(p, lo / p->K);
					hi = node_hi(p, lo / p->K) - 1;
				} else {
					lo = 0;
					hi = p->S - 1;
				}
				int64_t *cur = calloc((size_t)(hi - lo + 1), sizeof(int64_t));
				int64_t *tg = calloc((size_t)(hi - lo + 1), sizeof(int64_t));
				if (!cur || !tg) {
					free(cur);
					free(tg);
					return RS_ENOMEM;
				}
				for (int i = 0; i < tp->nshards; i++) {
					const rs_shard *s = &tp->shards[i];
					int32_t r = s->replica == 0 && s->col_offset == c0 ? prev_logical(p, s->rank) : -1;
					if (r >= lo && r <= hi)
						cur[r - lo] += s->rows;
				}
				int64_t mv = min_range_moves(cur, hi - lo + 1, tc->rows, tg);
				free(cur);
				free(tg);
				if (mv < 0)
					return RS_ENOMEM;
				total += table_bytes(p, t, mv, cw);
				k = e;
			}
		}
	}
	*out = total;
	return RS_OK;
}

/* Expand the logical plan to R replica groups: logical rank l of group k is rank l*R + k. */
static rs_status build_plan(planner *p, rs_plan **out)
{
	const rs_config *cfg = p->cfg;
	rs_plan *plan = calloc(1, sizeof(*plan));
	if (!plan)
		return RS_ENOMEM;
	plan->world = p->world;
	plan->ntables = cfg->ntables;
	plan->tables = calloc((size_t)cfg->ntables, sizeof(rs_table_plan));
	plan->ranks = calloc((size_t)p->world.ranks, sizeof(rs_rank_load));
	if (!plan->tables || !plan->ranks)
		goto nomem;
	/* items become shards */
	for (int i = 0; i < p->nitems; i++) {
		const item *it = &p->items[i];
		for (int m = 0; m < it->count; m++) {
			int t = p->members[it->first + m];
			const rs_table_config *tc = &cfg->tables[t];
			rs_shard s = {.rank = it->rank, .rows = tc->rows,
				      .col_offset = it->cols ? it->col_offset : 0,
				      .cols = it->cols ? it->cols : tc->dim};
			if (tc->has_zch)
				s.buckets = tc->zch.buckets;
			if (push_shard(&p->shards[t], s) != RS_OK)
				goto nomem;
		}
	}
	for (int t = 0; t < cfg->ntables; t++) {
		rs_table_plan *tp = &plan->tables[t];
		const shard_vec *sv = &p->shards[t];
		tp->name = strdup(cfg->tables[t].name);
		tp->sharding = p->type[t];
		tp->rows = cfg->tables[t].rows;
		tp->dim = cfg->tables[t].dim;
		tp->row_bytes = rs_table_row_bytes(cfg, &cfg->tables[t]);
		tp->shards = malloc(sizeof(rs_shard) * (size_t)(sv->n * p->R + 1));
		if (!tp->name || !tp->shards)
			goto nomem;
		for (size_t k = 0; k < sv->n; k++)
			for (int32_t rep = 0; rep < p->R; rep++) {
				rs_shard s = sv->v[k];
				s.rank = s.rank * p->R + rep;
				s.replica = rep;
				tp->shards[tp->nshards++] = s;
			}
		rs_plan_sort_shards(tp);
	}
	if (rs_plan_compute_loads(plan, cfg) != RS_OK)
		goto nomem;
	*out = plan;
	return RS_OK;
nomem:
	rs_plan_free(plan);
	return RS_ENOMEM;
}

static rs_status check_world(const rs_config *cfg, const rs_world *w, const rs_plan *prev,
			     const int32_t *prev_to_new, rs_err *err)
{
	if (w->ranks < 1 || w->ranks > RS_MAX_RANKS)
		return rs_err_set(err, RS_EINVAL, "world size must be 1..%d, got %d", RS_MAX_RANKS, w->ranks);
	if (w->ranks_per_node < 1)
		return rs_err_set(err, RS_EINVAL, "ranks per node must be >= 1, got %d", w->ranks_per_node);
	if (w->memory_per_rank == 0)
		return rs_err_set(err, RS_EINVAL, "memory per rank must be > 0");
	if (w->sharding_group < 1 || w->ranks % w->sharding_group != 0)
		return rs_err_set(err, RS_EINVAL, "sharding group %d must divide the world size %d",
				  w->sharding_group, w->ranks);
	int32_t r = w->ranks / w->sharding_group;
	if (r > 1 && w->ranks_per_node % r != 0)
		return rs_err_set(err, RS_EINVAL,
				  "%d replica groups must divide the %d ranks per node, so that the replicas of a shard share a node",
				  r, w->ranks_per_node);
	if (prev) {
		RSCHECK(rs_plan_validate(prev, cfg, err));
		if (!prev_to_new)
			return rs_err_set(err, RS_EINVAL, "a previous plan needs a rank mapping");
		for (int32_t i = 0; i < prev->world.ranks; i++)
			if (prev_to_new[i] < RS_PLAN_LOST || prev_to_new[i] >= w->ranks)
				return rs_err_set(err, RS_EINVAL, "previous rank %d maps to %d, outside the new world",
						  i, prev_to_new[i]);
	}
	return RS_OK;
}

static void planner_free(planner *p)
{
	if (p->shards)
		for (int t = 0; t < p->cfg->ntables; t++)
			free(p->shards[t].v);
	free(p->shards);
	free(p->type);
	free(p->load);
	free(p->mem);
	free(p->fixed);
	free(p->items);
	free(p->members);
	free(p->head);
}

rs_status rs_planner_plan(const rs_config *cfg, const rs_world *world, const rs_plan *prev,
			  const int32_t *prev_to_new, rs_plan **out, rs_err *err)
{
	double t0 = rs_now();
	planner p = {.cfg = cfg, .world = *world, .err = err};
	rs_plan *plan = NULL;
	char *survivor = NULL;
	rs_status st;

	*out = NULL;
	RSCHECK(check_world(cfg, world, prev, prev_to_new, err));
	const rs_plan *orig_prev = prev;
	if (rs_planner_same_groups(prev, world)) {
		RSCHECK(rs_planner_replicate(cfg, world, prev, prev_to_new, &plan, err));
		plan->summary.plan_seconds = rs_now() - t0;
		st = RS_OK;
		goto diff;
	}
	p.S = world->sharding_group;
	p.R = world->ranks / world->sharding_group;
	p.K = world->ranks_per_node / p.R;
	p.nodes = (p.S + p.K - 1) / p.K;
	/* other 2D replans, or replans across a change of layout, start fresh and let the diff count the moves */
	if (prev && (p.R > 1 || prev->world.sharding_group != prev->world.ranks))
		prev = NULL;
	p.prev = prev;
	p.prev_map = prev_to_new;
	p.type = calloc((size_t)cfg->ntables, sizeof(rs_sharding));
	p.shards = calloc((size_t)cfg->ntables, sizeof(shard_vec));
	p.load = calloc((size_t)p.S, sizeof(double));
	p.fixed = calloc((size_t)p.S, sizeof(double));
	p.mem = calloc((size_t)p.S, sizeof(uint64_t));
	p.head = malloc(sizeof(int) * (size_t)p.S);
	if (!p.type || !p.shards || !p.load || !p.fixed || !p.mem || !p.head) {
		st = RS_ENOMEM;
		goto out;
	}
	for (int32_t r = 0; r < p.S; r++)
		p.head[r] = -1;

	resolve_types(&p);
	RSCHECKGOTO(place_spread(&p), st, out);
	RSCHECKGOTO(place_nodes(&p), st, out);
	RSCHECKGOTO(place_items(&p), st, out);
	double lb = lower_bound(&p);
	refine(&p, prev ? lb * REPLAN_TOLERANCE : lb, prev != NULL);
	for (int32_t r = 0; r < p.S; r++)
		if (p.mem[r] > world->memory_per_rank) {
			st = rs_err_set(err, RS_ENOSPACE,
					"the tables do not fit: rank %d would hold %llu bytes, memory per rank is %llu",
					r, (unsigned long long)p.mem[r],
					(unsigned long long)world->memory_per_rank);
			goto out;
		}
	RSCHECKGOTO(build_plan(&p, &plan), st, out);

	rs_plan_summary *sm = &plan->summary;
	sm->lower_bound = lb;
	for (int32_t r = 0; r < world->ranks; r++)
		sm->max_cost = fmax(sm->max_cost, plan->ranks[r].cost);
	sm->imbalance = lb > 0 ? sm->max_cost / lb : 1.0;
	if (prev) {
		uint64_t a, b;
		survivor = calloc((size_t)p.S, 1);
		if (!survivor) {
			st = RS_ENOMEM;
			goto out;
		}
		for (int32_t r = 0; r < prev->world.ranks; r++)
			if (prev_to_new[r] >= 0)
				survivor[prev_to_new[r]] = 1;
		RSCHECKGOTO(min_spread_bytes(&p, survivor, &a), st, out);
		RSCHECKGOTO(min_item_bytes(&p, sm->max_cost, &b), st, out);
		sm->min_moved_bytes = a + b;
	}
	sm->plan_seconds = rs_now() - t0; /* planning only: the diff below is reporting */
diff:
	if (orig_prev) {
		rs_move *moves = NULL;
		int nmoves = 0;
		/* what moves between ranks: rows lost with every copy come from a checkpoint (partial recovery) */
		RSCHECKGOTO(rs_plan_diff_restoring(cfg, orig_prev, plan, prev_to_new, 1, &moves, &nmoves, err), st, out);
		for (int i = 0; i < nmoves; i++)
			plan->summary.moved_bytes += moves[i].src != RS_MOVE_RESTORE ? moves[i].bytes : 0;
		free(moves);
	}
	st = RS_OK;
out:
	free(survivor);
	planner_free(&p);
	if (st != RS_OK) {
		rs_plan_free(plan);
		return st;
	}
	*out = plan;
	return RS_OK;
}
