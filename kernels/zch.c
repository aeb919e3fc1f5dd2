/*
 * zch.c - CPU implementation of the ZCH table (see zch.h). Flat arrays, one
 * block of S slots and one index block per owned bucket, so the CUDA version
 * can mirror the layout.
 *
 * Eviction in O(log S): each block keeps a binary min-heap of its used slots
 * ordered by (pinned, key, slot), key = last step for LRU and (count, last
 * step) for LFU. A hit does not touch the heap: between rebuilds a slot's
 * key only grows, so the heap may hold a key older (smaller) than the slot's
 * own, and the victim search refreshes a stale top and sifts it down until
 * the top is current; a current top is the true minimum, which is the slot
 * zch.h's rule names (the linear scan the CUDA version runs). Two things
 * make a key smaller and are repaired at once: a refreshed entry that was
 * pinned stops being pinned at the next step (those entries are listed, and
 * sifted up when the block is first used at a later step), and LFU decay
 * halves every count (the heap is rebuilt, once per decay epoch). A slot
 * given to a new ID is stored with its new key unpinned, never above it.
 */
#include "kernels/zch.h"
#include "common/crc32c.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ZCH_MAGIC 0x42435A52u /* "RZCB" */
#define ZCH_VERSION 1u
#define HASH_SALT 0x9E3779B97F4A7C15ull
#define HEADER_BYTES 40

struct rs_zch_table {
	uint32_t nbuckets, spb;   /* buckets, slots per bucket */
	uint32_t isize, imask;    /* index entries per bucket (a power of two >= 2 * spb) */
	rs_eviction eviction;
	uint32_t decay_steps;
	int32_t *local;           /* per bucket: its block, or -1 when not owned */
	uint32_t nlocal, cap;
	uint32_t *bucket;         /* per block: the bucket it holds */
	struct zslot *slot;       /* per block, spb */
	uint32_t *nused;          /* per block: slots [0, nused) are taken */
	uint32_t *epoch;          /* per block: LFU decay epoch applied */
	struct zent *index;       /* per block, isize */
	struct hent *heap;        /* per block, spb: the eviction heap of slots [0, nused) */
	uint32_t *hpos;           /* per block, spb: each used slot's position in the heap */
	uint32_t *pinned;         /* per block, spb: slots whose heap entry is stored pinned */
	uint32_t *npinned;        /* per block: how many */
	uint32_t *pinstep;        /* per block: the step they were pinned at */
	rs_zch_stats stats;
};

/* A slot's identity and eviction metadata, together: a lookup reads one cache line. */
struct zslot {
	uint64_t id;
	uint32_t last;  /* the last step it was seen + 1; 0 = free */
	uint32_t count; /* its LFU count */
};

/*
 * An index entry: the slot + 1 (0 = empty) and the low 32 bits of its ID's
 * probe hash, which give the ID's home (deletion reads no slot) and filter
 * the probe (a probe reads the slot of no other ID, almost).
 */
struct zent {
	uint32_t slot1;
	uint32_t hint;
};

/* An eviction heap entry: the slot's key as last stored (never above its own). */
struct hent {
	uint64_t key;
	uint32_t slot;
	uint32_t pin;
};

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 31;
	return x;
}

static inline uint64_t hash_id(uint64_t id) { return mix64(id ^ HASH_SALT); }

uint32_t rs_zch_bucket_of(uint64_t id, uint32_t buckets)
{
	return (uint32_t)(((unsigned __int128)hash_id(id) * buckets) >> 64);
}

/* The probe hash's low 32 bits: the index's hint, and (masked) the start of the linear probe. */
static inline uint32_t hint_of(uint64_t id) { return (uint32_t)mix64(hash_id(id)); }

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
	z->isize = 2;
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
	free(z->pinstep);
	free(z->npinned);
	free(z->pinned);
	free(z->hpos);
	free(z->heap);
	free(z->index);
	free(z->epoch);
	free(z->nused);
	free(z->slot);
	free(z->bucket);
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
 * An array of `bytes` holding the first `keep` bytes of `old` (freed). Large
 * ones are aligned to 2 MiB and asked for transparent huge pages: a lookup
 * touches two random cache lines of arrays much larger than what the TLB
 * maps in 4 KiB pages, and a TLB miss costs as much as the line. The advice
 * is only that: a kernel without THP (madvise fails) gives small pages.
 */
#define HUGE_PAGE ((size_t)2 << 20)

static void *grow_array(void *old, size_t keep, size_t bytes)
{
	if (bytes < HUGE_PAGE)
		return realloc(old, bytes);
	void *p;
	size_t len = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	if (posix_memalign(&p, HUGE_PAGE, len) != 0)
		return NULL;
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
	GROW(bucket, 1);
	GROW(slot, z->spb);
	GROW(nused, 1);
	GROW(epoch, 1);
	GROW(index, z->isize);
	GROW(heap, z->spb);
	GROW(hpos, z->spb);
	GROW(pinned, z->spb);
	GROW(npinned, 1);
	GROW(pinstep, 1);
#undef GROW
	z->cap = cap;
	return RS_OK;
}

static void clear_block(rs_zch_table *z, uint32_t l)
{
	memset(z->slot + (size_t)l * z->spb, 0, sizeof(struct zslot) * z->spb);
	memset(z->index + (size_t)l * z->isize, 0, sizeof(struct zent) * z->isize);
	z->nused[l] = 0;
	z->epoch[l] = 0;
	z->npinned[l] = 0;
}

rs_status rs_zch_add_bucket(rs_zch_table *z, uint32_t bucket)
{
	if (bucket >= z->nbuckets)
		return RS_EINVAL;
	if (z->local[bucket] >= 0)
		return RS_OK;
	if (z->nlocal == z->cap)
		RSCHECK(grow(z, z->cap ? z->cap * 2 : 8));
	uint32_t l = z->nlocal++;
	z->bucket[l] = bucket;
	z->local[bucket] = (int32_t)l;
	clear_block(z, l);
	return RS_OK;
}

/* Copy block `from` over block `to`. */
static void move_block(rs_zch_table *z, uint32_t to, uint32_t from)
{
	memcpy(z->slot + (size_t)to * z->spb, z->slot + (size_t)from * z->spb, sizeof(struct zslot) * z->spb);
	memcpy(z->index + (size_t)to * z->isize, z->index + (size_t)from * z->isize, sizeof(struct zent) * z->isize);
	memcpy(z->heap + (size_t)to * z->spb, z->heap + (size_t)from * z->spb, sizeof(struct hent) * z->spb);
	memcpy(z->hpos + (size_t)to * z->spb, z->hpos + (size_t)from * z->spb, sizeof(uint32_t) * z->spb);
	memcpy(z->pinned + (size_t)to * z->spb, z->pinned + (size_t)from * z->spb, sizeof(uint32_t) * z->spb);
	z->npinned[to] = z->npinned[from];
	z->pinstep[to] = z->pinstep[from];
	z->nused[to] = z->nused[from];
	z->epoch[to] = z->epoch[from];
	z->bucket[to] = z->bucket[from];
	z->local[z->bucket[to]] = (int32_t)to;
}

rs_status rs_zch_drop_bucket(rs_zch_table *z, uint32_t bucket)
{
	if (bucket >= z->nbuckets || z->local[bucket] < 0)
		return RS_EINVAL;
	uint32_t l = (uint32_t)z->local[bucket], lastl = z->nlocal - 1;
	z->local[bucket] = -1;
	if (l != lastl)
		move_block(z, l, lastl);
	z->nlocal--;
	return RS_OK;
}

/* ---- lookups ----------------------------------------------------------------- */

/* Index position holding `id` (whose hint is h) in block l, or the empty position where it would go; *found says which. */
static uint32_t probe(const rs_zch_table *z, uint32_t l, uint64_t id, uint32_t h, int *found)
{
	const struct zent *index = z->index + (size_t)l * z->isize;
	const struct zslot *slot = z->slot + (size_t)l * z->spb;
	uint32_t p = h & z->imask;
	for (;;) {
		struct zent e = index[p];
		if (e.slot1 == 0) {
			*found = 0;
			return p;
		}
		if (e.hint == h && slot[e.slot1 - 1].id == id) {
			*found = 1;
			return p;
		}
		p = (p + 1) & z->imask;
	}
}

/* Backward-shift deletion of index position i in block l (linear probing, no tombstones). */
static void index_delete(rs_zch_table *z, uint32_t l, uint32_t i)
{
	struct zent *index = z->index + (size_t)l * z->isize;
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

/* ---- the eviction heap ----------------------------------------------------------- */

/* The eviction key of slot `at` (an index into the per-slot arrays) as it is now. */
static inline uint64_t key_of(const rs_zch_table *z, size_t at)
{
	const struct zslot *sl = &z->slot[at];
	return z->eviction == RS_EVICT_LFU ? (uint64_t)sl->count << 32 | sl->last : sl->last;
}

static inline int hless(const struct hent *a, const struct hent *b)
{
	if (a->pin != b->pin)
		return a->pin < b->pin;
	if (a->key != b->key)
		return a->key < b->key;
	return a->slot < b->slot;
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

/*
 * Rebuild block l's heap from its slots' keys. With at_step, the keys are
 * exact at `step` (slots seen in it pinned); without, every entry is stored
 * unpinned, which is never above a slot's key at any later step.
 */
static void heap_rebuild(rs_zch_table *z, uint32_t l, int at_step, uint32_t step)
{
	struct hent *h = z->heap + (size_t)l * z->spb;
	uint32_t *pos = z->hpos + (size_t)l * z->spb, *pinned = z->pinned + (size_t)l * z->spb;
	size_t base = (size_t)l * z->spb;
	uint32_t n = z->nused[l];
	z->npinned[l] = 0;
	z->pinstep[l] = step;
	for (uint32_t s = 0; s < n; s++) {
		h[s] = (struct hent){.key = key_of(z, base + s), .slot = s,
				     .pin = at_step && z->slot[base + s].last == step + 1};
		pos[s] = s;
		if (h[s].pin)
			pinned[z->npinned[l]++] = s;
	}
	for (uint32_t i = n / HEAP_D + 1; i-- > 0;)
		if (i < n)
			sift_down(h, pos, n, i);
}

/*
 * Store slot s's key as it is now, unpinned, and restore the heap order: for
 * a slot just pushed (at the heap's end) or just given a new ID.
 */
static void heap_place(rs_zch_table *z, uint32_t l, uint32_t s)
{
	struct hent *h = z->heap + (size_t)l * z->spb;
	uint32_t *pos = z->hpos + (size_t)l * z->spb, i = pos[s];
	h[i] = (struct hent){.key = key_of(z, (size_t)l * z->spb + s), .slot = s, .pin = 0};
	sift_up(h, pos, i);
	sift_down(h, pos, z->nused[l], pos[s]);
}

static void lfu_decay(rs_zch_table *z, uint32_t l, uint32_t step)
{
	uint32_t e = step / z->decay_steps;
	if (e <= z->epoch[l])
		return;
	uint32_t shift = e - z->epoch[l];
	struct zslot *slot = z->slot + (size_t)l * z->spb;
	for (uint32_t s = 0; s < z->nused[l]; s++)
		slot[s].count = shift >= 32 ? 0 : slot[s].count >> shift;
	z->epoch[l] = e;
	heap_rebuild(z, l, 1, step); /* every count may have fallen */
}

/* Before block l's first ID at `step`: decay LFU counts, unpin what an earlier step pinned. */
static inline void block_enter(rs_zch_table *z, uint32_t l, uint32_t step)
{
	if (z->eviction == RS_EVICT_LFU)
		lfu_decay(z, l, step);
	if (z->npinned[l] == 0 || z->pinstep[l] == step)
		return;
	struct hent *h = z->heap + (size_t)l * z->spb;
	uint32_t *pos = z->hpos + (size_t)l * z->spb, *pinned = z->pinned + (size_t)l * z->spb;
	for (uint32_t k = 0; k < z->npinned[l]; k++) {
		uint32_t i = pos[pinned[k]];
		h[i].pin = 0; /* unpinned, the same key: smaller than before */
		sift_up(h, pos, i);
	}
	z->npinned[l] = 0;
}

/*
 * The slot to evict from full block l at `step` (the top of its heap), or -1
 * when every slot was seen this step.
 */
static int64_t pick_victim(rs_zch_table *z, uint32_t l, uint32_t step)
{
	struct hent *h = z->heap + (size_t)l * z->spb;
	uint32_t *pos = z->hpos + (size_t)l * z->spb;
	size_t base = (size_t)l * z->spb;
	for (;;) {
		uint32_t s = h[0].slot;
		uint64_t key = key_of(z, base + s);
		uint32_t pin = z->slot[base + s].last == step + 1;
		if (h[0].key == key && h[0].pin == pin)
			return pin ? -1 : (int64_t)s; /* current, so the least of all */
		if (pin && !h[0].pin) {
			assert(z->npinned[l] < z->spb); /* a slot is listed once a step */
			z->pinned[base + z->npinned[l]++] = s;
			z->pinstep[l] = step;
		}
		h[0].key = key;
		h[0].pin = pin;
		sift_down(h, pos, z->spb, 0);
	}
}

/*
 * Prefetching, a hint that changes no result: a lookup's index entry and its
 * slot are misses in a table larger than the cache, and each depends on the
 * one before, so the loop asks for the index entry of the ID PF_FAR ahead and
 * the slot that entry points at (its first probe) PF_NEAR ahead.
 */
#define PF_FAR 16
#define PF_NEAR 8

/*
 * The address of the index entry where a probe for `id` starts, or NULL when
 * its bucket is not owned. (The prefetches are in the loop itself: GCC takes
 * a function holding nothing but __builtin_prefetch for one without effect
 * and drops its calls.)
 */
static inline const struct zent *home_entry(const rs_zch_table *z, uint64_t id)
{
	int32_t l = z->local[rs_zch_bucket_of(id, z->nbuckets)];
	return l < 0 ? NULL : z->index + (size_t)l * z->isize + (hint_of(id) & z->imask);
}

rs_status rs_zch_find_or_insert(rs_zch_table *z, const uint64_t *ids, size_t n, uint32_t step,
				int64_t *slots, int64_t *fresh, size_t *nfresh)
{
	rs_status st = RS_OK;
	if (nfresh)
		*nfresh = 0;
	for (size_t i = 0; i < n; i++) {
		const struct zent *ahead;
		if (i + PF_FAR < n && (ahead = home_entry(z, ids[i + PF_FAR])))
			__builtin_prefetch(ahead);
		if (i + PF_NEAR < n && (ahead = home_entry(z, ids[i + PF_NEAR])) && ahead->slot1)
			__builtin_prefetch(z->slot + (size_t)(ahead - z->index) / z->isize * z->spb + ahead->slot1 - 1, 1);
		uint64_t id = ids[i];
		uint32_t b = rs_zch_bucket_of(id, z->nbuckets);
		int32_t l = z->local[b];
		int found;
		if (l < 0) {
			slots[i] = -1;
			st = RS_ENOTFOUND;
			continue;
		}
		block_enter(z, (uint32_t)l, step);
		struct zslot *slot = z->slot + (size_t)l * z->spb;
		struct zent *index = z->index + (size_t)l * z->isize;
		uint32_t h = hint_of(id), p = probe(z, (uint32_t)l, id, h, &found);
		uint32_t s;
		if (found) {
			s = index[p].slot1 - 1;
			slot[s].last = step + 1;
			if (slot[s].count != UINT32_MAX)
				slot[s].count++;
			z->stats.hits++;
		} else {
			if (z->nused[l] < z->spb) {
				s = z->nused[l]++;
				z->hpos[(size_t)l * z->spb + s] = s; /* pushed at the heap's end, placed below */
				z->stats.inserts++;
			} else {
				int64_t v = pick_victim(z, (uint32_t)l, step);
				if (v < 0) {
					slots[i] = -1;
					z->stats.overflows++;
					continue;
				}
				s = (uint32_t)v;
				int vf;
				uint64_t old = slot[s].id;
				index_delete(z, (uint32_t)l, probe(z, (uint32_t)l, old, hint_of(old), &vf));
				p = probe(z, (uint32_t)l, id, h, &found); /* the hole may have moved */
				z->stats.evictions++;
			}
			slot[s] = (struct zslot){.id = id, .last = step + 1, .count = 1};
			index[p] = (struct zent){.slot1 = s + 1, .hint = h};
			heap_place(z, (uint32_t)l, s);
			if (fresh)
				fresh[(*nfresh)++] = (int64_t)b * z->spb + s;
		}
		slots[i] = (int64_t)b * z->spb + s;
	}
	return st;
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
			p = probe(z, (uint32_t)l, ids[i], hint_of(ids[i]), &found);
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
	if (l < 0 || s >= z->nused[l])
		return 0;
	*live = 1;
	return z->slot[(size_t)l * z->spb + s].id;
}

/* ---- serialization ------------------------------------------------------------ */

size_t rs_zch_bucket_bytes(const rs_zch_table *z, size_t row_bytes)
{
	return HEADER_BYTES + (size_t)z->spb * (16 + row_bytes) + 4;
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); } /* little-endian hosts only */
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

rs_status rs_zch_bucket_save(const rs_zch_table *z, uint32_t bucket, const void *rows, size_t row_bytes,
			     void *buf, size_t cap, size_t *len)
{
	size_t need = rs_zch_bucket_bytes(z, row_bytes), S = z->spb;
	if (!rs_zch_owns(z, bucket))
		return RS_EINVAL;
	if (cap < need)
		return RS_ENOSPACE;
	uint32_t l = (uint32_t)z->local[bucket];
	unsigned char *p = buf;
	put32(p, ZCH_MAGIC);
	put32(p + 4, ZCH_VERSION);
	put32(p + 8, z->nbuckets);
	put32(p + 12, z->spb);
	put32(p + 16, bucket);
	put32(p + 20, z->nused[l]);
	put64(p + 24, row_bytes);
	put32(p + 32, z->epoch[l]);
	put32(p + 36, 0);
	p += HEADER_BYTES;
	for (size_t s = 0; s < S; s++) {
		const struct zslot *sl = &z->slot[(size_t)l * S + s];
		put64(p + 8 * s, sl->id);
		put32(p + 8 * S + 4 * s, sl->last);
		put32(p + 12 * S + 4 * s, sl->count);
	}
	memcpy(p + 16 * S, rows, S * row_bytes);
	put32((unsigned char *)buf + need - 4, rs_crc32c(0, buf, need - 4));
	*len = need;
	return RS_OK;
}

rs_status rs_zch_bucket_load(rs_zch_table *z, const void *buf, size_t len, void *rows_out,
			     size_t row_bytes, uint32_t *bucket, rs_err *err)
{
	const unsigned char *p = buf;
	size_t S = z->spb, need = rs_zch_bucket_bytes(z, row_bytes);
	struct zent *index = NULL;

	if (len < HEADER_BYTES + 4)
		return rs_err_set(err, RS_ECORRUPT, "zch bucket: %zu bytes, shorter than its header", len);
	if (get32(p) != ZCH_MAGIC)
		return rs_err_set(err, RS_ECORRUPT, "zch bucket: bad magic 0x%08x", get32(p));
	if (get32(p + 4) != ZCH_VERSION)
		return rs_err_set(err, RS_ECORRUPT, "zch bucket: version %u, this build reads %u", get32(p + 4),
				  ZCH_VERSION);
	uint32_t nb = get32(p + 8), spb = get32(p + 12), b = get32(p + 16), nused = get32(p + 20);
	if (nb != z->nbuckets || spb != z->spb || get64(p + 24) != row_bytes)
		return rs_err_set(err, RS_EINVAL,
				  "zch bucket: geometry %u buckets x %u slots x %llu-byte rows, the table has %u x %u x %zu",
				  nb, spb, (unsigned long long)get64(p + 24), z->nbuckets, z->spb, row_bytes);
	if (len != need)
		return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: %zu bytes, expected %zu (truncated?)", b, len, need);
	if (rs_crc32c(0, p, need - 4) != get32(p + need - 4))
		return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: checksum mismatch", b);
	if (b >= nb || nused > spb)
		return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: header out of range", b);
	const unsigned char *ids = p + HEADER_BYTES, *last = ids + 8 * S;
	/* every live ID must belong to this bucket and appear once; build the index aside */
	index = calloc(z->isize, sizeof(struct zent));
	if (!index)
		return RS_ENOMEM;
	for (uint32_t s = 0; s < nused; s++) {
		uint64_t id = get64(ids + 8 * (size_t)s);
		if (rs_zch_bucket_of(id, nb) != b || get32(last + 4 * (size_t)s) == 0) {
			free(index);
			return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: slot %u holds a foreign or free ID", b, s);
		}
		uint32_t h = hint_of(id), q = h & z->imask;
		while (index[q].slot1 && get64(ids + 8 * (size_t)(index[q].slot1 - 1)) != id)
			q = (q + 1) & z->imask;
		if (index[q].slot1) {
			free(index);
			return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: ID %llu appears twice", b,
					  (unsigned long long)id);
		}
		index[q] = (struct zent){.slot1 = s + 1, .hint = h};
	}
	/* verified: commit */
	rs_status st = rs_zch_add_bucket(z, b);
	if (st != RS_OK) {
		free(index);
		return st;
	}
	uint32_t l = (uint32_t)z->local[b];
	for (size_t s = 0; s < S; s++)
		z->slot[(size_t)l * S + s] = (struct zslot){.id = get64(ids + 8 * s), .last = get32(last + 4 * s),
							    .count = get32(last + 4 * S + 4 * s)};
	memcpy(z->index + (size_t)l * z->isize, index, sizeof(struct zent) * z->isize);
	z->nused[l] = nused;
	z->epoch[l] = get32(p + 32);
	heap_rebuild(z, l, 0, 0);
	memcpy(rows_out, ids + 16 * S, S * row_bytes);
	free(index);
	*bucket = b;
	return RS_OK;
}

void rs_zch_slot_meta(const rs_zch_table *z, int64_t slot, uint32_t meta[3])
{
	int live;
	meta[0] = meta[1] = meta[2] = 0;
	(void)rs_zch_slot_id(z, slot, &live);
	if (slot < 0 || (uint64_t)slot >= (uint64_t)z->nbuckets * z->spb || z->local[slot / z->spb] < 0)
		return;
	uint32_t l = (uint32_t)z->local[slot / z->spb];
	size_t at = (size_t)l * z->spb + (size_t)(slot % z->spb);
	meta[2] = z->epoch[l];
	if (live)
		meta[0] = z->slot[at].last, meta[1] = z->slot[at].count;
}

rs_status rs_zch_bucket_restore(rs_zch_table *z, uint32_t bucket, const int64_t *ids, const uint32_t *meta,
				rs_err *err)
{
	size_t S = z->spb, len = rs_zch_bucket_bytes(z, 0);
	uint32_t nused = 0, got;
	if (bucket >= z->nbuckets)
		return rs_err_set(err, RS_EINVAL, "zch: bucket %u of %u", bucket, z->nbuckets);
	while (nused < S && ids[nused] != -1)
		nused++;
	for (size_t s = nused; s < S; s++)
		if (ids[s] != -1)
			return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: slot %zu holds an ID after a free slot", bucket, s);
	for (uint32_t s = 0; meta && s < nused; s++)
		if (meta[3 * s] == 0)
			return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: live slot %u has no last step", bucket, s);
	/* as rs_zch_bucket_save lays a bucket out, without rows: rs_zch_bucket_load verifies and commits it */
	unsigned char *buf = calloc(1, len), dummy = 0;
	if (!buf)
		return rs_err_set(err, RS_ENOMEM, "zch bucket %u: out of memory", bucket);
	put32(buf, ZCH_MAGIC);
	put32(buf + 4, ZCH_VERSION);
	put32(buf + 8, z->nbuckets);
	put32(buf + 12, z->spb);
	put32(buf + 16, bucket);
	put32(buf + 20, nused);
	put64(buf + 24, 0);
	put32(buf + 32, meta && nused ? meta[2] : 0);
	unsigned char *p = buf + HEADER_BYTES;
	for (uint32_t s = 0; s < nused; s++) {
		put64(p + 8 * (size_t)s, (uint64_t)ids[s]);
		put32(p + 8 * S + 4 * (size_t)s, meta ? meta[3 * s] : 1);
		put32(p + 12 * S + 4 * (size_t)s, meta ? meta[3 * s + 1] : 1);
	}
	put32(buf + len - 4, rs_crc32c(0, buf, len - 4));
	rs_status st = rs_zch_bucket_load(z, buf, len, &dummy, 0, &got, err);
	free(buf);
	return st;
}
