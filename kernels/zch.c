/*
 * zch.c - CPU implementation of the ZCH table (see zch.h). Flat arrays, one
 * block of S slots and one index block per owned bucket, so the CUDA version
 * can mirror the layout.
 *
 * Eviction takes the slot zch.h's rule names (the scan the CUDA version
 * runs): the least (key, slot) not seen this step, key = last step for LRU,
 * (count, last step) for LFU. A block keeps its used slots in two orders;
 * the victim is the lesser of their fronts.
 *
 * - A queue of (last step, slot) records, appended as steps come, so sorted
 *   by step. A slot given to a new ID is appended; under LRU a hit appends
 *   its slot again when its last step changes, the older record going stale.
 *   The front is the first current record; a past step's records are sorted
 *   by slot when they reach it (no more can come). Stale records are dropped
 *   there, or all at once when the queue (2S records) is full. Under LFU a
 *   record stands for a slot of count 1: a hit makes it stale, and the slot
 *   moves to the heap as the record leaves. O(1) a lookup, amortized.
 * - A lazy 4-ary min-heap, O(log S): all slots when a bucket is loaded or
 *   its LFU counts decay (their order is not that of the steps to come), and
 *   LFU slots hit after they were queued. Hits do not touch it, so an entry
 *   may hold an older key than its slot's: the top is refreshed (LFU, whose
 *   keys only grow) or taken out (LRU: the hit queued the slot) until it is
 *   current, so the least. A top seen this step is set aside until the next.
 *   LFU decay halves every count: the heap is rebuilt, once per decay epoch.
 *
 * So a loaded LRU slot hit since is in both orders until its stale entry
 * leaves; stale records and entries outliving a slot's ID do no harm.
 */
#include "kernels/zch_internal.h"
#include "common/grow.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

uint32_t rs_zch_bucket_of(uint64_t id, uint32_t buckets)
{
	return bucket_of_hash(hash_id(id), buckets);
}

rs_status rs_zch_create(const rs_zch_config *cfg, rs_zch_table **out, rs_err *err)
{
	*out = NULL;
	if (cfg->buckets == 0)
		return rs_err_set(err, RS_EINVAL, "zch: the bucket count must be >= 1");
	if (cfg->slots == 0 || cfg->slots % cfg->buckets != 0)
		return rs_err_set(err, RS_EINVAL, "zch: slots (%llu) must be a positive multiple of buckets (%u)",
				  (unsigned long long)cfg->slots, cfg->buckets);
	if (cfg->slots / cfg->buckets > (1u << 30))
		return rs_err_set(err, RS_EINVAL, "zch: at most 2^30 slots per bucket");
	rs_zch_table *z = calloc(1, sizeof(*z));
	if (!z)
		return RS_ENOMEM;
	z->nbuckets = cfg->buckets;
	z->spb = (uint32_t)(cfg->slots / cfg->buckets);
	z->isize = 4; /* an eviction holds S + 1 entries a moment (insert): one stays empty, probes end */
	while (z->isize < 2 * z->spb)
		z->isize <<= 1;
	z->imask = z->isize - 1;
	z->eviction = cfg->eviction;
	z->decay_steps = cfg->lfu_decay_steps ? cfg->lfu_decay_steps : 1000;
	z->local = malloc(sizeof(int32_t) * z->nbuckets);
	if (!z->local) {
		free(z);
		return RS_ENOMEM;
	}
	for (uint32_t b = 0; b < z->nbuckets; b++)
		z->local[b] = -1;
	*out = z;
	return RS_OK;
}

void rs_zch_destroy(rs_zch_table *z)
{
	if (!z)
		return;
	free(z->undo.v);
	free(z->undo.counts);
	free(z->pinned);
	free(z->hpos);
	free(z->heap);
	free(z->queue);
	free(z->index);
	free(z->slot);
	free(z->blk);
	free(z->local);
	free(z);
}

uint32_t rs_zch_buckets(const rs_zch_table *z) { return z->nbuckets; }
uint32_t rs_zch_owned(const rs_zch_table *z) { return z->nlocal; }
rs_zch_stats rs_zch_get_stats(const rs_zch_table *z) { return z->stats; }

int rs_zch_owns(const rs_zch_table *z, uint32_t bucket)
{
	return bucket < z->nbuckets && z->local[bucket] >= 0;
}

/*
 * An array of `bytes` holding the first `keep` bytes of `old` (freed), on a
 * cache line (so are index blocks that fill one: pend_slot reads a probe's
 * first line). Large ones are aligned to 2 MiB and asked for transparent
 * huge pages: lookups touch random lines of arrays much larger than the TLB
 * maps in 4 KiB pages, a miss as costly as the line's. A kernel without THP
 * (madvise fails) gives small pages.
 */
#define HUGE_PAGE ((size_t)2 << 20)

static void *grow_array(void *old, size_t keep, size_t bytes)
{
	void *p;
	size_t align = bytes < HUGE_PAGE ? 64 : HUGE_PAGE, len = (bytes + align - 1) / align * align;
	if (posix_memalign(&p, align, len) != 0)
		return NULL;
	if (align == HUGE_PAGE)
		(void)madvise(p, len, MADV_HUGEPAGE); /* advice; small pages work */
	if (keep)
		memcpy(p, old, keep);
	free(old);
	return p;
}

/* Grow every per-block array to `cap` blocks. */
static rs_status grow(rs_zch_table *z, uint32_t cap)
{
#define GROW(field, per)                                                                           \
	do {                                                                                       \
		size_t unit = sizeof(*z->field) * (size_t)(per);                                  \
		void *p = grow_array(z->field, unit * z->cap, unit * cap);                        \
		if (!p)                                                                            \
			return RS_ENOMEM;                                                          \
		z->field = p;                                                                      \
	} while (0)
	GROW(blk, 1);
	GROW(slot, z->spb);
	GROW(index, z->isize);
	GROW(queue, 2 * z->spb);
	GROW(heap, z->spb);
	GROW(hpos, z->spb);
	GROW(pinned, z->spb);
#undef GROW
	z->cap = cap;
	return RS_OK;
}

rs_status rs_zch_add_bucket(rs_zch_table *z, uint32_t bucket)
{
	if (bucket >= z->nbuckets)
		return RS_EINVAL;
	if (z->local[bucket] >= 0)
		return RS_OK;
	rs__zch_forget_changes(z);
	if (z->nlocal == z->cap)
		RSCHECK(grow(z, z->cap ? z->cap * 2 : 8));
	uint32_t l = z->nlocal++;
	z->local[bucket] = (int32_t)l;
	memset(z->slot + (size_t)l * z->spb, 0, sizeof(struct zslot) * z->spb);
	memset(z->index + (size_t)l * z->isize, 0, sizeof(struct zent) * z->isize);
	/* the queue holds nothing yet: written only to fault its pages in here, not in the lookups to come */
	memset(z->queue + (size_t)l * 2 * z->spb, 0, sizeof(uint64_t) * 2 * z->spb);
	z->blk[l] = (struct zblock){.bucket = bucket};
	return RS_OK;
}

rs_status rs_zch_drop_bucket(rs_zch_table *z, uint32_t bucket)
{
	if (bucket >= z->nbuckets || z->local[bucket] < 0)
		return RS_EINVAL;
	uint32_t l = (uint32_t)z->local[bucket], from = z->nlocal - 1;
	rs__zch_forget_changes(z);
	z->local[bucket] = -1;
	z->nlocal--;
	if (l == from)
		return RS_OK;
	/* the last block fills the hole */
#define MOVE(field, per) \
	memcpy(z->field + (size_t)l * (per), z->field + (size_t)from * (per), sizeof(*z->field) * (per))
	MOVE(slot, z->spb);
	MOVE(index, z->isize);
	MOVE(queue, 2 * (size_t)z->spb);
	MOVE(heap, z->spb);
	MOVE(hpos, z->spb);
	MOVE(pinned, z->spb);
#undef MOVE
	z->blk[l] = z->blk[from];
	z->local[z->blk[l].bucket] = (int32_t)l;
	return RS_OK;
}

/* ---- the index --------------------------------------------------------------- */

/*
 * Position of the entry of `id` (whose hint is h) in a block's index (its
 * slots: slot), or of the empty entry where it would go; *found says which.
 */
static inline uint32_t probe(const rs_zch_table *z, const struct zent *index, const struct zslot *slot, uint64_t id,
			     uint32_t h, int *found)
{
	uint32_t p = h & z->imask;
	while (index[p].slot1 && !(index[p].hint == h && slot[index[p].slot1 - 1].id == id))
		p = (p + 1) & z->imask;
	*found = index[p].slot1 != 0;
	return p;
}

/* Backward-shift deletion of position i of a block's index (linear probing, no tombstones). */
static void index_delete(const rs_zch_table *z, struct zent *index, uint32_t i)
{
	uint32_t j = i;
	for (;;) {
		j = (j + 1) & z->imask;
		if (index[j].slot1 == 0)
			break;
		uint32_t k = index[j].hint & z->imask;
		/* move j's entry back to i unless its home lies cyclically in (i, j] */
		int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (!stays) {
			index[i] = index[j];
			i = j;
		}
	}
	index[i] = (struct zent){0, 0};
}

/* ---- undo ----------------------------------------------------------------------- */

/* A slot as it was before find-or-insert changed it: seen again, taken while free, given to a new ID, decayed. */
enum { UNDO_SEEN, UNDO_FREE, UNDO_EVICTED, UNDO_DECAYED };
struct zundo {
	uint32_t l, s, kind; /* UNDO_DECAYED: s is the block's epoch before, old.id where its counts start in
				counts, old.last how many */
	struct zslot old;
};

void rs__zch_forget_changes(rs_zch_table *z)
{
	if (z->undo.n && z->undo.lost == RS_OK)
		z->undo.lost = RS_EINVAL;
	z->undo.n = z->undo.ncounts = 0;
}

/* An array of *cap elements that held `used` at most this time: halved when far larger than that (a step's burst). */
static void shrink(void **v, size_t *cap, size_t used, size_t elem)
{
	if (*cap <= 65536 || used >= *cap / 8)
		return;
	void *p = realloc(*v, elem * (*cap / 2));
	if (p)
		*v = p, *cap /= 2;
}

void rs_zch_journal(rs_zch_table *z, int on)
{
	shrink((void **)&z->undo.v, &z->undo.cap, z->undo.n, sizeof(*z->undo.v));
	shrink((void **)&z->undo.counts, &z->undo.ccap, z->undo.ncounts, sizeof(*z->undo.counts));
	z->undo.on = on;
	z->undo.n = z->undo.ncounts = 0;
	z->undo.lost = RS_OK;
}

/* Keep slot s of block l as it is, about to change (`kind`), when recording. */
static inline void record(rs_zch_table *z, uint32_t l, uint32_t s, uint32_t kind)
{
	if (!z->undo.on || z->undo.lost != RS_OK)
		return;
	if (z->undo.n == z->undo.cap && rs_grow(&z->undo.v, &z->undo.cap, z->undo.n + 1, sizeof(*z->undo.v)) != RS_OK) {
		z->undo.lost = RS_ENOMEM;
		return;
	}
	struct zundo u = {l, s, kind, {0, 0, 0}};
	if (kind != UNDO_DECAYED)
		u.old = z->slot[(size_t)l * z->spb + s];
	z->undo.v[z->undo.n++] = u;
}

/* Keep block l's LFU counts and epoch, about to decay, when recording: a word per used slot. */
static void record_decay(rs_zch_table *z, uint32_t l)
{
	uint32_t n = z->blk[l].nused;
	if (!z->undo.on || z->undo.lost != RS_OK)
		return;
	if (rs_grow(&z->undo.counts, &z->undo.ccap, z->undo.ncounts + n + 1, sizeof(*z->undo.counts)) != RS_OK) {
		z->undo.lost = RS_ENOMEM;
		return;
	}
	for (uint32_t s = 0; s < n; s++)
		z->undo.counts[z->undo.ncounts + s] = z->slot[(size_t)l * z->spb + s].count;
	record(z, l, z->blk[l].epoch, UNDO_DECAYED);
	if (z->undo.lost == RS_OK) {
		z->undo.v[z->undo.n - 1].old = (struct zslot){.id = z->undo.ncounts, .last = n};
		z->undo.ncounts += n;
	}
}

rs_status rs_zch_undo(rs_zch_table *z)
{
	rs_status st = z->undo.lost;
	size_t n = st == RS_OK ? z->undo.n : 0;
	unsigned char *touched = n ? calloc(z->nlocal, 1) : NULL;
	for (size_t k = n; k-- > 0;) {
		const struct zundo *u = &z->undo.v[k];
		if (u->kind == UNDO_DECAYED) {
			for (uint32_t s = 0; s < u->old.last; s++)
				z->slot[(size_t)u->l * z->spb + s].count = z->undo.counts[u->old.id + s];
			z->blk[u->l].epoch = u->s;
			if (touched)
				touched[u->l] = 1;
			continue;
		}
		struct zent *index = z->index + (size_t)u->l * z->isize;
		struct zslot *slot = z->slot + (size_t)u->l * z->spb, *sl = &slot[u->s];
		int found;
		if (u->kind != UNDO_SEEN) { /* the ID it was given leaves the index */
			uint32_t i = probe(z, index, slot, sl->id, hint_of(sl->id), &found);
			if (found)
				index_delete(z, index, i);
		}
		*sl = u->old;
		if (u->kind == UNDO_FREE)
			z->blk[u->l].nused--; /* newest first: it was the last slot taken */
		if (u->kind == UNDO_EVICTED) { /* the evicted ID comes back */
			uint32_t h = hint_of(sl->id), i = probe(z, index, slot, sl->id, h, &found);
			index[i] = (struct zent){.slot1 = u->s + 1, .hint = h};
		}
		if (touched)
			touched[u->l] = 1;
	}
	/* the eviction orders of each block changed, from scratch (all blocks without the scratch) */
	for (uint32_t l = 0; n && l < z->nlocal; l++)
		if (!touched || touched[l])
			rs__zch_heap_rebuild(z, l);
	free(touched);
	z->undo.n = z->undo.ncounts = 0;
	z->undo.lost = RS_OK;
	return st;
}

/* ---- the eviction heap ----------------------------------------------------------- */

/* The eviction key of slot `at` (an index into the per-slot arrays) as it is now. */
static inline uint64_t key_of(const rs_zch_table *z, size_t at)
{
	const struct zslot *sl = &z->slot[at];
	return z->eviction == RS_EVICT_LFU ? (uint64_t)sl->count << 32 | sl->last : sl->last;
}

static inline int hless(const struct hent *a, const struct hent *b)
{
	return a->key < b->key || (a->key == b->key && a->slot < b->slot);
}

/* The heap is 4-ary: a node's children are 4i+1 .. 4i+4, four entries in one or two cache lines. */
#define HEAP_D 4

static void sift_up(struct hent *h, uint32_t *pos, uint32_t i)
{
	struct hent e = h[i];
	while (i > 0) {
		uint32_t up = (i - 1) / HEAP_D;
		if (!hless(&e, &h[up]))
			break;
		h[i] = h[up];
		pos[h[i].slot] = i;
		i = up;
	}
	h[i] = e;
	pos[e.slot] = i;
}

static void sift_down(struct hent *h, uint32_t *pos, uint32_t n, uint32_t i)
{
	struct hent e = h[i];
	for (;;) {
		uint32_t c = HEAP_D * i + 1, end = c + HEAP_D < n ? c + HEAP_D : n;
		if (c >= n)
			break;
		for (uint32_t k = c + 1; k < end; k++)
			if (hless(&h[k], &h[c]))
				c = k;
		if (!hless(&h[c], &e))
			break;
		h[i] = h[c];
		pos[h[i].slot] = i;
		i = c;
	}
	h[i] = e;
	pos[e.slot] = i;
}

/* Add slot s of block l to its heap, with its key as it is now. */
static void heap_push(rs_zch_table *z, uint32_t l, uint32_t s)
{
	struct hent *h = z->heap + (size_t)l * z->spb;
	uint32_t i = z->blk[l].hn++;
	h[i] = (struct hent){.key = key_of(z, (size_t)l * z->spb + s), .slot = s};
	sift_up(h, z->hpos + (size_t)l * z->spb, i);
}

/* Take the top of block l's heap out. */
static void heap_take(rs_zch_table *z, uint32_t l)
{
	struct hent *h = z->heap + (size_t)l * z->spb;
	if (--z->blk[l].hn > 0) {
		h[0] = h[z->blk[l].hn];
		sift_down(h, z->hpos + (size_t)l * z->spb, z->blk[l].hn, 0);
	}
}

/* Put every used slot of block l in its heap, as they are now, and none in its queue. */
void rs__zch_heap_rebuild(rs_zch_table *z, uint32_t l)
{
	struct hent *h = z->heap + (size_t)l * z->spb;
	uint32_t *pos = z->hpos + (size_t)l * z->spb;
	struct zblock *bk = &z->blk[l];
	uint32_t n = bk->nused;
	bk->qhead = bk->qtail = bk->qsorted = bk->npinned = 0;
	bk->hn = n;
	for (uint32_t s = 0; s < n; s++) {
		h[s] = (struct hent){.key = key_of(z, (size_t)l * z->spb + s), .slot = s};
		pos[s] = s;
	}
	for (uint32_t i = n / HEAP_D + 1; i-- > 0;)
		if (i < n)
			sift_down(h, pos, n, i);
}

/* The least slot of block l's heap not seen at `step` (its top, once current), or -1 when there is none. */
static int64_t heap_front(rs_zch_table *z, uint32_t l, uint32_t step)
{
	struct hent *h = z->heap + (size_t)l * z->spb;
	size_t base = (size_t)l * z->spb;
	struct zblock *bk = &z->blk[l];
	while (bk->hn > 0) {
		uint32_t s = h[0].slot;
		uint64_t key = key_of(z, base + s);
		if (h[0].key != key && z->eviction != RS_EVICT_LFU) {
			heap_take(z, l); /* hit since: queued */
		} else if (h[0].key != key) {
			h[0].key = key;
			sift_down(h, z->hpos + base, bk->hn, 0);
		} else if (z->slot[base + s].last == step + 1) {
			assert(bk->npinned < z->spb); /* set aside once a step */
			z->pinned[base + bk->npinned++] = s;
			bk->pinstep = step;
			heap_take(z, l);
		} else {
			return s; /* current, so the least of all */
		}
	}
	return -1;
}

/* ---- the eviction queue ------------------------------------------------------------ */

/* A queue record: a slot's last step (+1) above the slot, so that records compare as (last, slot). */
static inline uint64_t qrec(uint32_t last, uint32_t s) { return (uint64_t)last << 32 | s; }

/* Whether record r of block l still stands for its slot: the slot's last step, and under LFU count 1. */
static inline int qcurrent(const rs_zch_table *z, uint32_t l, uint64_t r)
{
	const struct zslot *sl = &z->slot[(size_t)l * z->spb + (uint32_t)r];
	return sl->last == (uint32_t)(r >> 32) && (z->eviction != RS_EVICT_LFU || sl->count == 1);
}

/* A stale record leaves the queue: under LRU its slot has a later record; under LFU the slot moves to the heap. */
static inline void qdrop(rs_zch_table *z, uint32_t l, uint64_t r)
{
	if (z->eviction == RS_EVICT_LFU)
		heap_push(z, l, (uint32_t)r);
}

/* How far queue_compact (and queue_sort_front in a burst) reads ahead: the records' slots are independent misses. */
#define QPF 8

/* Drop block l's stale records, moving the rest to the queue's start (at most nused remain). */
static void queue_compact(rs_zch_table *z, uint32_t l)
{
	uint64_t *q = z->queue + (size_t)l * 2 * z->spb;
	struct zblock *bk = &z->blk[l];
	uint32_t k = 0;
	for (uint32_t i = bk->qhead; i < bk->qtail; i++) {
		if (i + QPF < bk->qtail)
			__builtin_prefetch(&z->slot[(size_t)l * z->spb + (uint32_t)q[i + QPF]]);
		if (qcurrent(z, l, q[i]))
			q[k++] = q[i];
		else
			qdrop(z, l, q[i]);
	}
	bk->qhead = bk->qsorted = 0;
	bk->qtail = k;
}

/* Queue slot s of block l, seen at the current step (last = step + 1: no record is later). */
static inline void queue_push(rs_zch_table *z, uint32_t l, uint32_t last, uint32_t s)
{
	struct zblock *bk = &z->blk[l];
	if (bk->qtail == 2 * z->spb)
		queue_compact(z, l);
	z->queue[(size_t)l * 2 * z->spb + bk->qtail++] = qrec(last, s);
}

static int cmp_u64(const void *a, const void *b)
{
	return (*(const uint64_t *)a > *(const uint64_t *)b) - (*(const uint64_t *)a < *(const uint64_t *)b);
}

/* One step's records of one block are few (about 20 in bench_zch), unless a burst came: more than this. */
#define FEW_RECORDS 32

static void sort_records(uint64_t *v, uint32_t n)
{
	if (n > FEW_RECORDS) {
		qsort(v, n, sizeof(uint64_t), cmp_u64);
		return;
	}
	for (uint32_t i = 1; i < n; i++) { /* insertion: no call per comparison */
		uint64_t r = v[i];
		uint32_t at = i;
		for (; at > 0 && v[at - 1] > r; at--)
			v[at] = v[at - 1];
		v[at] = r;
	}
}

/* Sort the records of the queue's first step (a past step: it can grow no more) by slot, dropping stale ones. */
static void queue_sort_front(rs_zch_table *z, uint32_t l)
{
	uint64_t *q = z->queue + (size_t)l * 2 * z->spb;
	struct zblock *bk = &z->blk[l];
	uint32_t last = (uint32_t)(q[bk->qhead] >> 32), end = bk->qhead, k;
	while (end < bk->qtail && (uint32_t)(q[end] >> 32) == last)
		end++;
	k = end;
	int burst = end - bk->qhead > FEW_RECORDS;
	for (uint32_t i = bk->qhead; !burst && i < end; i++) /* all at once: independent misses */
		__builtin_prefetch(&z->slot[(size_t)l * z->spb + (uint32_t)q[i]]);
	for (uint32_t i = end; i-- > bk->qhead;) { /* backwards: the current ones gather at the end, in order */
		if (burst && i >= bk->qhead + QPF) /* more than the line fill buffers hold: read ahead as it goes */
			__builtin_prefetch(&z->slot[(size_t)l * z->spb + (uint32_t)q[i - QPF]]);
		if (qcurrent(z, l, q[i]))
			q[--k] = q[i];
		else
			qdrop(z, l, q[i]);
	}
	sort_records(q + k, end - k);
	bk->qhead = k;
	bk->qsorted = end;
}

/* The least slot of block l's queue (its first current record), or -1 when it has none not seen at `step`. */
static int64_t queue_front(rs_zch_table *z, uint32_t l, uint32_t step)
{
	const uint64_t *q = z->queue + (size_t)l * 2 * z->spb;
	struct zblock *bk = &z->blk[l];
	for (;;) {
		if (bk->qhead == bk->qtail)
			return -1;
		uint64_t r = q[bk->qhead];
		if (!qcurrent(z, l, r)) {
			bk->qhead++;
			qdrop(z, l, r);
		} else if ((uint32_t)(r >> 32) == step + 1) {
			return -1;
		} else if (bk->qhead >= bk->qsorted) {
			queue_sort_front(z, l); /* a past step, whole: later records are of later steps */
		} else {
			return (uint32_t)r;
		}
	}
}

/* ---- victims --------------------------------------------------------------------- */

/* Before block l's first ID at `step`: decay LFU counts, put back what an earlier step set aside. */
static inline void block_enter(rs_zch_table *z, uint32_t l, uint32_t step)
{
	struct zblock *bk = &z->blk[l];
	if (z->eviction == RS_EVICT_LFU && z->epoch_now > bk->epoch) {
		uint32_t shift = z->epoch_now - bk->epoch;
		struct zslot *slot = z->slot + (size_t)l * z->spb;
		record_decay(z, l); /* once an epoch */
		for (uint32_t s = 0; s < bk->nused; s++)
			slot[s].count = shift >= 32 ? 0 : slot[s].count >> shift;
		bk->epoch = z->epoch_now;
		rs__zch_heap_rebuild(z, l); /* every count may have fallen */
	}
	if (bk->npinned == 0 || bk->pinstep == step)
		return;
	for (uint32_t k = 0; k < bk->npinned; k++)
		heap_push(z, l, z->pinned[(size_t)l * z->spb + k]);
	bk->npinned = 0;
}

/* Take the victim of full block l at `step` out of its order: the lesser front; -1 if all were seen. */
static int64_t pick_victim(rs_zch_table *z, uint32_t l, uint32_t step)
{
	int64_t qs = queue_front(z, l, step); /* first: under LFU it may move slots to the heap */
	int64_t hs = heap_front(z, l, step);
	struct hent q = {qs >= 0 ? key_of(z, (size_t)l * z->spb + (uint64_t)qs) : 0, (uint32_t)qs};
	if (qs >= 0 && hs >= 0 && hless(&z->heap[(size_t)l * z->spb], &q))
		qs = -1;
	if (qs >= 0) {
		z->blk[l].qhead++;
		return qs;
	}
	if (hs >= 0)
		heap_take(z, l);
	return hs;
}

/* ---- find-or-insert ----------------------------------------------------------------- */

/*
 * The lookup loop is a software pipeline: PF_FAR IDs ahead an ID is hashed
 * (once) and its probe's first index entry prefetched, with the eviction
 * queue's front when its block is full (PF_NEAR reads it: waiting for that
 * line was 15% of a full table's lookup time); PF_NEAR ahead, the
 * slot of the entry of that line with its hint, or when there is none (a
 * new ID?) and the block is full, the queue's front (the victim?); PF_VICTIM
 * ahead, the victim ID's first index entry. Hints that change no result:
 * the lookup probes and picks as if nothing had been prefetched.
 */
#define PF_FAR 24
#define PF_NEAR 12
#define PF_VICTIM 6
#define PF_RING 32 /* a power of two above PF_FAR */

/*
 * An ID in flight: bucket, hint, block (-1: not owned), its index and slots,
 * and the slot thought its victim (+1; 0: none). Storing that keeps GCC from
 * dropping calls of pend_slot and pend_victim as functions without effect.
 */
struct zpend {
	uint64_t id;
	struct zent *index;
	size_t sbase;
	uint32_t b, h;
	int32_t l;
	uint32_t victim;
};

static inline void pend_start(const rs_zch_table *z, uint64_t id, struct zpend *p)
{
	uint64_t hash = hash_id(id);
	p->id = id;
	p->b = bucket_of_hash(hash, z->nbuckets);
	p->h = hint_of_hash(hash);
	p->l = z->local[p->b];
	p->victim = 0;
	if (p->l < 0)
		return;
	p->index = z->index + (size_t)p->l * z->isize;
	p->sbase = (size_t)p->l * z->spb;
	__builtin_prefetch(&p->index[p->h & z->imask]);
	const struct zblock *bk = &z->blk[p->l];
	if (bk->nused == z->spb) /* pend_slot reads the front record (the victim?) of a full block */
		__builtin_prefetch(&z->queue[2 * p->sbase + bk->qhead]);
}

static inline void pend_slot(const rs_zch_table *z, struct zpend *p)
{
	if (p->l < 0)
		return;
	uint32_t at = p->h & z->imask;
	const struct zblock *bk = &z->blk[p->l];
	for (uint32_t k = at; k <= (at | 7); k++) { /* the mask keeps a block of less than a line in it */
		struct zent e = p->index[k & z->imask];
		if (e.slot1 == 0)
			break;
		if (e.hint == p->h) {
			__builtin_prefetch(&z->slot[p->sbase + e.slot1 - 1], 1);
			return;
		}
	}
	if (bk->nused < z->spb) {
		__builtin_prefetch(&z->slot[p->sbase + bk->nused], 1);
	} else if (bk->qhead < bk->qtail) {
		p->victim = (uint32_t)z->queue[2 * p->sbase + bk->qhead] + 1;
		__builtin_prefetch(&z->slot[p->sbase + p->victim - 1], 1);
	}
}

static inline void pend_victim(const rs_zch_table *z, struct zpend *p)
{
	if (!p->victim)
		return;
	uint64_t old = z->slot[p->sbase + p->victim - 1].id;
	__builtin_prefetch(&p->index[hint_of(old) & z->imask], 1);
	p->victim = 0;
}

/*
 * A hit on slot s of p's block at `step`. LRU queues the slot again when its
 * last step changes: the record is written always and kept when it did (for
 * a branch, whether a hit is its step's first is a coin toss).
 */
static inline void hit(rs_zch_table *z, const struct zpend *p, uint32_t s, uint32_t step)
{
	struct zslot *sl = &z->slot[p->sbase + s];
	struct zblock *bk = &z->blk[p->l];
	record(z, (uint32_t)p->l, s, UNDO_SEEN);
	if (z->eviction != RS_EVICT_LFU) {
		if (bk->qtail == 2 * z->spb)
			queue_compact(z, (uint32_t)p->l);
		z->queue[2 * p->sbase + bk->qtail] = qrec(step + 1, s);
		bk->qtail += sl->last != step + 1;
	}
	sl->last = step + 1;
	sl->count += sl->count != UINT32_MAX;
}

/* The slot for p's ID, new (its entry would go at index position i): free, evicted, or -1. Out of line: rarer. */
static __attribute__((noinline)) int64_t insert(rs_zch_table *z, const struct zpend *p, uint32_t i, uint32_t step,
						int64_t *fresh, size_t *nfresh)
{
	uint32_t l = (uint32_t)p->l, s;
	struct zblock *bk = &z->blk[l];
	struct zslot *slot = z->slot + p->sbase;
	int found;
	if (bk->nused < z->spb) {
		s = bk->nused++;
		record(z, l, s, UNDO_FREE);
		z->stats.inserts++;
		p->index[i] = (struct zent){.slot1 = s + 1, .hint = p->h};
	} else {
		int64_t v = pick_victim(z, l, step);
		if (v < 0) {
			z->stats.overflows++;
			return -1;
		}
		s = (uint32_t)v;
		record(z, l, s, UNDO_EVICTED);
		/*
		 * The victim's entry is found first (the new one points at the same slot), the
		 * new ID's goes in the empty place i (which moves no entry), and the victim's
		 * leaves after: its backward shift may move the new entry, a probe fewer than
		 * deleting first and looking for the hole again.
		 */
		uint32_t gone = probe(z, p->index, slot, slot[s].id, hint_of(slot[s].id), &found);
		assert(found); /* else gone is empty and may be i: the delete would take the new entry */
		p->index[i] = (struct zent){.slot1 = s + 1, .hint = p->h};
		index_delete(z, p->index, gone);
		z->stats.evictions++;
	}
	slot[s] = (struct zslot){.id = p->id, .last = step + 1, .count = 1};
	queue_push(z, l, step + 1, s);
	if (fresh)
		fresh[(*nfresh)++] = (int64_t)p->b * z->spb + s;
	return (int64_t)p->b * z->spb + s;
}

/* The slot of p's ID at `step`, found or given (-1: its bucket not owned, or none to give); *lost counts the first. */
static inline __attribute__((always_inline)) int64_t settle(rs_zch_table *z, const struct zpend *p, uint32_t step,
							    int64_t *fresh, size_t *nf, size_t *lost)
{
	int found;
	if (p->l < 0) {
		(*lost)++;
		return -1;
	}
	block_enter(z, (uint32_t)p->l, step);
	uint32_t at = probe(z, p->index, z->slot + p->sbase, p->id, p->h, &found), s = p->index[at].slot1 - 1;
	if (!found)
		return insert(z, p, at, step, fresh, nf);
	hit(z, p, s, step);
	return (int64_t)p->b * z->spb + s;
}

/* Hits are counted at the end: each ID of an owned bucket is a hit, insert, eviction or overflow. */
rs_status rs_zch_find_or_insert(rs_zch_table *z, const uint64_t *ids, size_t n, uint32_t step,
				int64_t *slots, int64_t *fresh, size_t *nfresh)
{
	struct zpend ring[PF_RING];
	size_t nf = 0, lost = 0, i = 0;
	rs_zch_stats before = z->stats;
	z->epoch_now = step / z->decay_steps;
	for (size_t k = 0; k < n && k < PF_FAR; k++)
		pend_start(z, ids[k], &ring[k]);
	for (; i + PF_FAR < n; i++) { /* every stage of the pipeline has an ID */
		pend_start(z, ids[i + PF_FAR], &ring[(i + PF_FAR) % PF_RING]);
		pend_slot(z, &ring[(i + PF_NEAR) % PF_RING]);
		pend_victim(z, &ring[(i + PF_VICTIM) % PF_RING]);
		slots[i] = settle(z, &ring[i % PF_RING], step, fresh, &nf, &lost);
	}
	for (; i < n; i++) { /* the last ones */
		if (i + PF_NEAR < n)
			pend_slot(z, &ring[(i + PF_NEAR) % PF_RING]);
		if (i + PF_VICTIM < n)
			pend_victim(z, &ring[(i + PF_VICTIM) % PF_RING]);
		slots[i] = settle(z, &ring[i % PF_RING], step, fresh, &nf, &lost);
	}
	z->stats.hits += n - lost - (z->stats.inserts - before.inserts) - (z->stats.evictions - before.evictions) -
			 (z->stats.overflows - before.overflows);
	if (nfresh)
		*nfresh = nf;
	return lost ? RS_ENOTFOUND : RS_OK;
}

rs_status rs_zch_find(rs_zch_table *z, const uint64_t *ids, size_t n, int64_t *slots)
{
	rs_status st = RS_OK;
	for (size_t i = 0; i < n; i++) {
		uint32_t b = rs_zch_bucket_of(ids[i], z->nbuckets);
		int32_t l = z->local[b];
		int found = 0;
		uint32_t p = 0;
		if (l < 0)
			st = RS_ENOTFOUND;
		else
			p = probe(z, z->index + (size_t)l * z->isize, z->slot + (size_t)l * z->spb, ids[i], hint_of(ids[i]),
				  &found);
		if (found) {
			slots[i] = (int64_t)b * z->spb + z->index[(size_t)l * z->isize + p].slot1 - 1;
		} else {
			slots[i] = -1;
			z->stats.misses++;
		}
	}
	return st;
}

uint64_t rs_zch_slot_id(const rs_zch_table *z, int64_t slot, int *live)
{
	*live = 0;
	if (slot < 0 || (uint64_t)slot >= (uint64_t)z->nbuckets * z->spb)
		return 0;
	int32_t l = z->local[slot / z->spb];
	uint32_t s = (uint32_t)(slot % z->spb);
	if (l < 0 || s >= z->blk[l].nused)
		return 0;
	*live = 1;
	return z->slot[(size_t)l * z->spb + s].id;
}
