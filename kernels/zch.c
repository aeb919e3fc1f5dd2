/*
 * zch.c - CPU implementation of the ZCH table (see zch.h). Flat arrays, one
 * block of S slots and one index block per owned bucket, so the CUDA version
 * can mirror the layout.
 */
#include "kernels/zch.h"
#include "common/crc32c.h"

#include <stdlib.h>
#include <string.h>

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
	uint64_t *ids;            /* per block, spb: the slot's ID */
	uint32_t *last;           /* per block, spb: last step seen + 1; 0 = free slot */
	uint32_t *count;          /* per block, spb: LFU count */
	uint32_t *nused;          /* per block: slots [0, nused) are taken */
	uint32_t *epoch;          /* per block: LFU decay epoch applied */
	uint32_t *index;          /* per block, isize: slot + 1; 0 = empty */
	rs_zch_stats stats;
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

static inline uint32_t home_of(const rs_zch_table *z, uint64_t id)
{
	return (uint32_t)(mix64(hash_id(id)) & z->imask);
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
	free(z->index);
	free(z->epoch);
	free(z->nused);
	free(z->count);
	free(z->last);
	free(z->ids);
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

/* realloc every per-block array to `cap` blocks */
static rs_status grow(rs_zch_table *z, uint32_t cap)
{
#define GROW(field, per)                                                                   \
	do {                                                                               \
		void *p = realloc(z->field, sizeof(*z->field) * (size_t)cap * (size_t)(per)); \
		if (!p)                                                                    \
			return RS_ENOMEM;                                                  \
		z->field = p;                                                              \
	} while (0)
	GROW(bucket, 1);
	GROW(ids, z->spb);
	GROW(last, z->spb);
	GROW(count, z->spb);
	GROW(nused, 1);
	GROW(epoch, 1);
	GROW(index, z->isize);
#undef GROW
	z->cap = cap;
	return RS_OK;
}

static void clear_block(rs_zch_table *z, uint32_t l)
{
	memset(z->ids + (size_t)l * z->spb, 0, sizeof(uint64_t) * z->spb);
	memset(z->last + (size_t)l * z->spb, 0, sizeof(uint32_t) * z->spb);
	memset(z->count + (size_t)l * z->spb, 0, sizeof(uint32_t) * z->spb);
	memset(z->index + (size_t)l * z->isize, 0, sizeof(uint32_t) * z->isize);
	z->nused[l] = 0;
	z->epoch[l] = 0;
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
	memcpy(z->ids + (size_t)to * z->spb, z->ids + (size_t)from * z->spb, sizeof(uint64_t) * z->spb);
	memcpy(z->last + (size_t)to * z->spb, z->last + (size_t)from * z->spb, sizeof(uint32_t) * z->spb);
	memcpy(z->count + (size_t)to * z->spb, z->count + (size_t)from * z->spb, sizeof(uint32_t) * z->spb);
	memcpy(z->index + (size_t)to * z->isize, z->index + (size_t)from * z->isize, sizeof(uint32_t) * z->isize);
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

/* Index position holding `id` in block l, or the empty position where it would go; *found says which. */
static uint32_t probe(const rs_zch_table *z, uint32_t l, uint64_t id, int *found)
{
	const uint32_t *index = z->index + (size_t)l * z->isize;
	const uint64_t *ids = z->ids + (size_t)l * z->spb;
	uint32_t p = home_of(z, id);
	for (;;) {
		uint32_t e = index[p];
		if (e == 0) {
			*found = 0;
			return p;
		}
		if (ids[e - 1] == id) {
			*found = 1;
			return p;
		}
		p = (p + 1) & z->imask;
	}
}

/* Backward-shift deletion of index position i in block l (linear probing, no tombstones). */
static void index_delete(rs_zch_table *z, uint32_t l, uint32_t i)
{
	uint32_t *index = z->index + (size_t)l * z->isize;
	const uint64_t *ids = z->ids + (size_t)l * z->spb;
	uint32_t j = i;
	for (;;) {
		j = (j + 1) & z->imask;
		if (index[j] == 0)
			break;
		uint32_t k = home_of(z, ids[index[j] - 1]);
		/* move j's entry back to i unless its home lies cyclically in (i, j] */
		int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (!stays) {
			index[i] = index[j];
			i = j;
		}
	}
	index[i] = 0;
}

static void lfu_decay(rs_zch_table *z, uint32_t l, uint32_t step)
{
	uint32_t e = step / z->decay_steps;
	if (e <= z->epoch[l])
		return;
	uint32_t shift = e - z->epoch[l];
	uint32_t *count = z->count + (size_t)l * z->spb;
	for (uint32_t s = 0; s < z->nused[l]; s++)
		count[s] = shift >= 32 ? 0 : count[s] >> shift;
	z->epoch[l] = e;
}

/* The slot to evict from full block l at `step`, or -1 when every slot was seen this step. */
static int64_t pick_victim(const rs_zch_table *z, uint32_t l, uint32_t step)
{
	const uint32_t *last = z->last + (size_t)l * z->spb;
	const uint32_t *count = z->count + (size_t)l * z->spb;
	int64_t best = -1;
	for (uint32_t s = 0; s < z->spb; s++) {
		if (last[s] == step + 1)
			continue; /* seen this step: pinned */
		if (best < 0) {
			best = s;
			continue;
		}
		int better = z->eviction == RS_EVICT_LFU ?
			     (count[s] < count[best] || (count[s] == count[best] && last[s] < last[best])) :
			     last[s] < last[best];
		if (better)
			best = s;
	}
	return best;
}

rs_status rs_zch_find_or_insert(rs_zch_table *z, const uint64_t *ids, size_t n, uint32_t step,
				int64_t *slots, int64_t *fresh, size_t *nfresh)
{
	rs_status st = RS_OK;
	if (nfresh)
		*nfresh = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t id = ids[i];
		uint32_t b = rs_zch_bucket_of(id, z->nbuckets);
		int32_t l = z->local[b];
		int found;
		if (l < 0) {
			slots[i] = -1;
			st = RS_ENOTFOUND;
			continue;
		}
		if (z->eviction == RS_EVICT_LFU)
			lfu_decay(z, (uint32_t)l, step);
		size_t base = (size_t)l * z->spb;
		uint32_t p = probe(z, (uint32_t)l, id, &found);
		uint32_t s;
		if (found) {
			s = z->index[(size_t)l * z->isize + p] - 1;
			z->stats.hits++;
		} else {
			if (z->nused[l] < z->spb) {
				s = z->nused[l]++;
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
				index_delete(z, (uint32_t)l, probe(z, (uint32_t)l, z->ids[base + s], &vf));
				p = probe(z, (uint32_t)l, id, &found); /* the hole may have moved */
				z->stats.evictions++;
			}
			z->ids[base + s] = id;
			z->count[base + s] = 0;
			z->index[(size_t)l * z->isize + p] = s + 1;
			if (fresh)
				fresh[(*nfresh)++] = (int64_t)b * z->spb + s;
		}
		z->last[base + s] = step + 1;
		if (z->count[base + s] != UINT32_MAX)
			z->count[base + s]++;
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
			p = probe(z, (uint32_t)l, ids[i], &found);
		if (found) {
			slots[i] = (int64_t)b * z->spb + z->index[(size_t)l * z->isize + p] - 1;
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
	return z->ids[(size_t)l * z->spb + s];
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
	memcpy(p, z->ids + (size_t)l * S, 8 * S);
	memcpy(p + 8 * S, z->last + (size_t)l * S, 4 * S);
	memcpy(p + 12 * S, z->count + (size_t)l * S, 4 * S);
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
	uint32_t *index = NULL;

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
	index = calloc(z->isize, sizeof(uint32_t));
	if (!index)
		return RS_ENOMEM;
	for (uint32_t s = 0; s < nused; s++) {
		uint64_t id = get64(ids + 8 * (size_t)s);
		if (rs_zch_bucket_of(id, nb) != b || get32(last + 4 * (size_t)s) == 0) {
			free(index);
			return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: slot %u holds a foreign or free ID", b, s);
		}
		uint32_t q = home_of(z, id);
		while (index[q] && get64(ids + 8 * (size_t)(index[q] - 1)) != id)
			q = (q + 1) & z->imask;
		if (index[q]) {
			free(index);
			return rs_err_set(err, RS_ECORRUPT, "zch bucket %u: ID %llu appears twice", b,
					  (unsigned long long)id);
		}
		index[q] = s + 1;
	}
	/* verified: commit */
	rs_status st = rs_zch_add_bucket(z, b);
	if (st != RS_OK) {
		free(index);
		return st;
	}
	uint32_t l = (uint32_t)z->local[b];
	memcpy(z->ids + (size_t)l * S, ids, 8 * S);
	memcpy(z->last + (size_t)l * S, last, 4 * S);
	memcpy(z->count + (size_t)l * S, last + 4 * S, 4 * S);
	memcpy(z->index + (size_t)l * z->isize, index, sizeof(uint32_t) * z->isize);
	z->nused[l] = nused;
	z->epoch[l] = get32(p + 32);
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
		meta[0] = z->last[at], meta[1] = z->count[at];
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
