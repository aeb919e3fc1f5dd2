/*
 * train_internal.h - the trainer's insides, shared by the files that make
 * it up: train.c (set-up, the step), train_eval.c (evaluation),
 * train_ckpt.c (checkpoints and dumps), reshard.c (live resharding) and
 * replica.c (2D replica groups). Nothing else includes this header; the
 * trainer's interface is train.h. Names here carry the rs__ prefix.
 */
#ifndef RS_TRAIN_INTERNAL_H
#define RS_TRAIN_INTERNAL_H

#include "worker/train.h"
#include "kernels/embedding.h"
#include "worker/engine.h"
#include "kernels/zch.h"
#include "worker/data.h"
#include "worker/dense.h"
#include "worker/marks.h"
#include "common/batch.h"
#include "common/checkpoint.h"

/*
 * Shard memory, counted: while a reshard is open, a shard of the staged
 * trainer holding rows its member keeps points into the old trainer's
 * memory instead of copying it (rs_trainer_stage), and whichever trainer
 * goes last frees it.
 */
typedef struct rs__mem {
	rs_engine *engine;  /* whose memory it is */
	void *base;
	size_t len;
	int refs;
} rs__mem;

/* len bytes of zeros of engine e, one reference; NULL when out of memory. */
rs__mem *rs__mem_new(rs_engine *e, size_t len);
void rs__mem_unref(rs__mem *m);

/*
 * Fault all of m's pages in now, where the host reads and writes them:
 * receiving into pages the kernel must first find costs several times the
 * copy itself (measured: 0.5 GB/s into fresh pages on loopback, 1.5 GB/s
 * into populated ones).
 */
void rs__mem_populate(rs__mem *m);

/*
 * The bytes of m that shards of trainer tr use: [*lo, *hi), from the
 * lowest to the highest; 0 when none does (reshard.c). One span: the shards
 * sharing a block are one old shard's kept rows, which are contiguous.
 */
int rs__mem_used(const rs_trainer *tr, const rs__mem *m, char **lo, char **hi);

typedef struct i32vec {
	int32_t *v;
	size_t n, cap;
} i32vec;

typedef struct i64vec {
	int64_t *v;
	size_t n, cap;
} i64vec;

typedef struct fvec {
	float *v;
	size_t n, cap;
} fvec;

/*
 * Pre-copy: a hash per row (its checksum term), valid where its stale bit
 * is clear, and their sums per block of RS__ROWSUM_BLOCK rows (checksum.c).
 */
#define RS__ROWSUM_BLOCK 1024
typedef struct rs__rowsums {
	uint64_t *h, *block;
	rs__marks stale;
	int refs;               /* a new shard sharing an old shard's memory shares its hashes */
} rs__rowsums;

/* One shard this rank holds: the plan's rectangle and its memory. */
typedef struct lshard {
	int table;
	rs_shard s;
	rs__mem *wmem, *smem;   /* where emb.weights and emb.state point (inside, for a shard sharing its memory) */
	rs_emb_shard emb;
	rs_emb_workspace ws;
	rs_emb_grad grad;
	/*
	 * The requests of this step that hit this shard, as bags for its
	 * kernels: bag k pools local rows bids[boff[k] .. boff[k+1]) and
	 * belongs to the request whose answer (and gradient) starts at float
	 * bdst[k] of the trainer's answer buffer. Built in lookup(), used
	 * again by the backward of the same step.
	 */
	i32vec boff;
	i64vec bids, bdst;
	fvec bval;              /* the bags' pooled sums, then their gradients */
	rs__marks dirty;        /* pre-copy: rows updated since they were sent; bit NULL when not tracked */
	rs__rowsums *rsum;      /* pre-copy: its rows' hashes from row rsum_off on; NULL when not kept */
	int64_t rsum_off;
} lshard;

/* One column block of a table: its row ranges, who owns each, which are here. */
typedef struct block {
	int32_t col_offset, cols;
	int n;
	int64_t *row_start; /* sorted */
	int32_t *owner;
	int32_t *local;     /* index into trainer.shards, or -1 */
} block;

typedef struct tinfo {
	int nblocks;
	block *blocks;
	int dp_shard;       /* data-parallel: the local full copy, else -1 */
	rs_zch_table *zch;  /* ZCH tables: identities of the buckets held here */
	int64_t spb;        /* ZCH slots per bucket */
} tinfo;

/* A request this rank sent: where its answer goes. */
typedef struct sent {
	int32_t f, c, i, cols;
} sent;

typedef struct sentvec {
	sent *v;
	size_t n, cap;
} sentvec;

struct rs_trainer {
	const rs_config *cfg;
	rs_engine *engine;  /* borrowed: where the shards live and the kernels run */
	int on_host;        /* the host touched whole shards since the last step: move them back to the engine */
	const rs_plan *plan;
	rs_transport *t;
	int32_t rank, world;
	int32_t replicas;   /* R of a 2D layout (1 without): this rank is in replica group rank % R */
	int spoiled;        /* a step failed after its first update: the model is part-updated */
	lshard *shards;
	int nshards;
	tinfo *tables;
	int32_t nfeat, emb_width;
	int *feat_table;
	int32_t *feat_off;
	rs_data *data;
	int owns_data;      /* 0 while a staged trainer borrows the data source of the one it replaces */
	rs_dense *dense;
	rs_batch batch;
	float *pooled, *dpooled;
	int32_t pooled_cap;
	int64_t updates;
	int pause_requested;
	int checkpoint_requested;
	int precopy_ready;
	float precopy_rate; /* the background rounds per step this rank asks for (rs_trainer_ask_precopy_rate) */
	struct {            /* a step every exchange of which came through but its last (the votes): see rs_trainer_step */
		int64_t step;   /* its index */
		struct rs__replica_grads *rg; /* NULL: none kept */
		float **dp;
	} prepared;
	int64_t vote_lost;  /* tests: the votes of step vote_lost - 1 fail here after they came through, once (0: none) */
	int64_t zch_lost;   /* tests: step zch_lost - 1 fails here right after its lookup, once (0: none) */
	struct {            /* the rows a step's ZCH lookups re-initialized, as they were (rs__zch_keep_row) */
		unsigned char *v;
		size_t n, cap;
		int on;     /* kept this step: the model may heal */
		int lost;   /* one could not be kept: the step cannot be undone */
	} zundo;
	i64vec *req;
	sentvec *sent;
	size_t *scount, *rcount;
	i64vec in;          /* requests received, all peers, rank order */
	i64vec in_row;      /* per received id: the row it resolved to (a ZCH slot), -1 for none */
	i64vec zids, zrows, zfresh; /* a ZCH table's ids of the step, their slots, the fresh ones (rs__resolve) */
	size_t *in_off;     /* per peer: start of its requests in `in` (in int64 words) */
	i64vec idsrc;       /* deterministic: per bag, in the batch's order, its answers' count and [peer, float offset] each */
	struct {            /* a deterministic step's buffers (train_exact.c), kept from step to step */
		fvec keep;  /* the micro-batches' dense gradients (or one micro-batch's input gradient) */
		i64vec q;   /* the sums on their grids */
	} exact;
	struct rs__later *later;   /* the last commit's freeing, on a thread (later.c); NULL: none */
	struct rs__later *pending; /* a staged trainer's: what its commit adds to that (rs__trainer_later) */
	fvec out;           /* answers or gradients to send */
	fvec back;          /* answers or gradients received */
};

/*
 * A trainer for plan over t. With `init` its shards get their initial
 * values; without, they are allocated only (a reshard fills every row).
 * `data` is borrowed when not NULL (a reshard's new trainer shares the old
 * one's source until commit); otherwise the config's source is opened.
 */
rs_status rs__trainer_alloc(const rs_config *cfg, const rs_plan *plan, rs_transport *t, rs_engine *engine,
			    rs_data *data, int init, rs_trainer **out, rs_err *err);

/* Tell the engine where shards are wanted next: by the host (reshards, checkpoints, checksums) or the kernels. */
void rs__trainer_prefetch(rs_trainer *tr, int to_host);

/* The weights and optimizer state blocks of rows [row, row + n) of a shard (*s NULL, *slen 0 for SGD). */
void rs__row_blocks(const rs_config *cfg, const lshard *ls, int64_t row, int64_t n, void **w, size_t *wlen, void **s,
		    size_t *slen);

/*
 * Table rows [from, to) of local shard ls (all its columns) from the
 * checkpoint in dir, whose index ix the caller read (train_ckpt.c): its
 * table must have this config's shape, dtype and optimizer, and with
 * `verify` each file read first passes its checksum (without: the caller
 * checked it).
 */
rs_status rs__trainer_restore(const rs_trainer *tr, const lshard *ls, const char *dir, const rs_ckpt_index *ix,
			      int64_t from, int64_t to, int verify, rs_err *err);

/*
 * Undoing a failed step's ZCH changes (train_lookup.c). A training step's
 * lookup gives ZCH slots to new ids, re-initializing their rows, and marks
 * every id seen, before its collectives are through. rs__zch_mark starts
 * keeping what the step changes (where the model may heal: otherwise a
 * failed step is rolled back anyway), rs__zch_keep_row keeps a row about to
 * be re-initialized, and rs__zch_undo takes the step's changes back: the
 * tables and rows are then the last step's, as in a replica that failed
 * earlier in the same step, which the heal compares them with. RS_ENOMEM
 * when something could not be kept (the caller must not heal).
 */
void rs__zch_mark(rs_trainer *tr);
void rs__zch_keep_row(rs_trainer *tr, const lshard *ls, int64_t local);
rs_status rs__zch_undo(rs_trainer *tr);

/*
 * Work a commit need not hold the pause for (later.c): rs__later_new a
 * list (NULL when out of memory: every job is then done at once, as it is
 * for memory of another engine than the host's), jobs added to it, then
 * rs__later_start does them on a thread of its own, which `owner` waits
 * for before it is destroyed or starts another (rs__later_wait). The
 * thread gives the memory back a slice a step: each step of the owner's
 * tells it (rs__later_stepped).
 */
typedef struct rs__later rs__later;
#define RS__LATER_SLICE ((size_t)64 << 20) /* given back a step (4-25 ms here in 4 KiB pages, under 1 in huge ones) */
extern double rs__later_wait_s;           /* the longest a slice waits for a step: 0.1 s (tests lengthen it) */
rs__later *rs__later_new(void);
void rs__later_free(rs__later *l, void *p);
void rs__later_release(rs__later *l, rs_engine *e, void *p, size_t len); /* engine->ops->release */
void rs__later_mem_unref(rs__later *l, rs__mem *m);                       /* rs__mem_unref */
void rs__later_start(rs__later *l, rs_trainer *owner);
void rs__later_stepped(rs_trainer *tr);
void rs__later_wait(rs_trainer *tr);
/* The list the commit of staged trainer tr starts (NULL when out of memory: jobs are done at once). */
rs__later *rs__trainer_later(rs_trainer *tr);
/* Do l's jobs here and now (a list that will not be started: its trainer is destroyed uncommitted). */
void rs__later_now(rs__later *l);

/* rs_trainer_destroy, listing its large frees on `later`; and rs__rowsums_drop likewise. */
void rs__trainer_destroy_later(rs_trainer *tr, rs__later *later);
void rs__rowsums_drop_later(rs_trainer *tr, rs__later *later);

/*
 * A committed trainer takes the replaced one's step buffers it has none of
 * (the requests, answers and gradients of a step, the exact sums'): their
 * pages are in, where fresh ones would fault in one at a time in the first
 * step after the pause.
 */
void rs__trainer_take_buffers(rs_trainer *to, rs_trainer *from);

/* Whether local shard i is a data-parallel table's full copy (synced by all-reduce, not by replica groups). */
static inline int rs__is_dp(const rs_trainer *tr, int i) { return tr->tables[tr->shards[i].table].dp_shard == i; }

/*
 * Whether shard i is the copy this rank reports (checksums, checkpoints):
 * one copy of each row counts, that of replica group 0, and of a
 * data-parallel table rank 0's.
 */
int rs__counted(const rs_trainer *tr, int i);

/* Index of the row range of b holding `row`. */
int rs__range_of(const block *b, int64_t row);

/* st, unchanged; a failure of an engine call that reported into e also goes into err, naming the table. */
rs_status rs__engine_said(const rs_trainer *tr, int table, rs_status st, const rs_err *e, rs_err *err);

/*
 * This step's lookup (train_lookup.c): the batch's bags sent to their
 * owners, pooled, and the sums gathered into tr->pooled (mean pooling
 * divided; data-parallel tables pooled here). Training, ZCH ids get slots.
 * Deterministic (train.deterministic), a bag spread over several shards
 * is answered id by id and the requester adds the rows in the bag's own
 * order, as one shard's owner does: a pooled sum does not depend on how a
 * table's rows are spread over ranks.
 */
rs_status rs__lookup(rs_trainer *tr, int64_t step, int training, rs_err *err);

/* This rank's samples [lo, hi) of the step's global batch (deterministic: whole micro-batches). */
void rs__step_samples(const rs_trainer *tr, int64_t *lo, int64_t *hi);

/*
 * A deterministic step's dense network and its exact sums (train_exact.c),
 * after the lookup: the dense gradients all-reduced into the network's,
 * tr->dpooled (scaled by inv), the global batch's loss, and every
 * data-parallel shard's reduced gradients into dp[i] (as the step's
 * dp_reduce leaves them). A collective.
 */
rs_status rs__exact_step(rs_trainer *tr, float inv, float **dp, double *loss, rs_err *err);

/* The most a deterministic step keeps of its micro-batches' dense gradients; beyond, it computes them twice. */
#define RS_EXACT_KEEP_BYTES ((size_t)256 << 20)

/* The rows of n requested ids of ZCH table t at their owner: their slots (see train.c). RS_ENOMEM. */
rs_status rs__resolve(rs_trainer *tr, int t, const int64_t *ids, size_t n, int64_t step, int training, int64_t *rows);

/*
 * 2D layouts (replica.c). rs__replica_resolve: the ZCH ids this step's
 * requests carry, inserted by every replica of a shard in one order (that
 * of a 1D world: by requesting rank), so that the replicas' identities stay
 * equal; fills in_row, which gather_bags then reads for those tables. rs__replica_exchange and rs__replica_apply: the
 * owner's backward with exact sync, every group's gradients gathered (a
 * collective), then folded in a 1D world's order and applied (local). rs__replica_average: every replica's weights and optimizer state
 * set to the replicas' mean (local SGD's periodic sync).
 */
rs_status rs__replica_resolve(rs_trainer *tr, int64_t step, rs_err *err);
typedef struct rs__replica_grads {
	char *all;          /* every copy's bags; NULL: none gathered */
	struct rs__cursor *c;
} rs__replica_grads;
rs_status rs__replica_exchange(rs_trainer *tr, const float *grad, rs__replica_grads *rg, rs_err *err);
rs_status rs__replica_apply(rs_trainer *tr, rs__replica_grads *rg, rs_err *err);
void rs__replica_grads_free(rs__replica_grads *rg);
rs_status rs__replica_average(rs_trainer *tr, rs_err *err);

/*
 * st, unchanged; a failure also goes into err saying what failed (unless a
 * deeper call said more already: the first message wins). The transport's
 * version adds the transport's own words.
 */
rs_status rs__said(rs_status st, const char *what, rs_err *err);
rs_status rs__said_transport(const rs_trainer *tr, rs_status st, const char *what, rs_err *err);

/* The local shard of table t holding (row, col), or NULL. */
lshard *rs__local_shard(const rs_trainer *tr, int t, int64_t row, int32_t col);

/*
 * Dirty rows, for pre-copy (precopy.c): once started, every update of a
 * row of a shard by its owner (the fused update) sets its bit; sending a
 * row clears it. (Data-parallel tables move at the pause: no marks.)
 * Stopping frees the bits.
 */
rs_status rs__dirty_start(rs_trainer *tr);
void rs__dirty_stop(rs_trainer *tr);
void rs__dirty_clear(lshard *ls, int64_t row, int64_t n);

/* Row `row` of ls written: its cached hash (when kept) is stale. */
static inline void rs__rowsum_stale(lshard *ls, int64_t row)
{
	if (ls->rsum)
		rs__marks_set(&ls->rsum->stale, ls->rsum_off + row);
}
static inline void rs__dirty_mark(lshard *ls, int64_t row)
{
	if (row < 0)
		return;
	if (ls->dirty.bit)
		rs__marks_set(&ls->dirty, row);
	rs__rowsum_stale(ls, row); /* and its hash is stale */
}
/* Rows rows[0..n) of ls about to be updated: marked (when a pre-copy tracks them). */
static inline void rs__dirty_mark_rows(lshard *ls, const int64_t *rows, int64_t n)
{
	for (int64_t k = 0; (ls->dirty.bit || ls->rsum) && k < n; k++)
		rs__dirty_mark(ls, rows[k]);
}
/* The first marked row of ls in [row, end), or end (few rows are marked: marks.h skips the rest). */
static inline int64_t rs__dirty_next(const lshard *ls, int64_t row, int64_t end)
{
	return rs__marks_next(&ls->dirty, row, end);
}

/*
 * The whole-model checksum's parts (checksum.c). rs__rows_sum: the sum of
 * the terms of rows [r0, r0 + n) of ls. The pre-copy's cached hashes:
 * rs__rowsums_start gives a shard its own, every row stale; _share makes
 * new shard ns use old shard os's from os row `row` on (the memory they
 * share); _stale marks rows written; _fill hashes up to `most` stale rows
 * of [r0, r0 + n) (the count hashed); _drop lets a trainer's go.
 */
uint64_t rs__rows_sum(const rs_trainer *tr, const lshard *ls, int64_t r0, int64_t n);
rs_status rs__rowsums_start(lshard *ls);
void rs__rowsums_share(lshard *ns, const lshard *os, int64_t row);
void rs__rowsums_unref(rs__rowsums *c);
void rs__rowsums_drop(rs_trainer *tr);
void rs__rowsums_stale(lshard *ls, int64_t r0, int64_t n);
int64_t rs__rowsums_fill(const rs_trainer *tr, const lshard *ls, int64_t r0, int64_t n, int64_t most);

#endif
