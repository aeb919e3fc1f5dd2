/*
 * zch_internal.h - the ZCH table's insides, shared by zch.c (lookups,
 * eviction, undo) and zch_io.c (a bucket saved, loaded and restored).
 * Nothing else includes it; the table's interface is zch.h.
 */
#ifndef RS_ZCH_INTERNAL_H
#define RS_ZCH_INTERNAL_H

#include "kernels/zch.h"
#include "kernels/zch_hash.h"

#define ZCH_MAGIC 0x42435A52u /* "RZCB" */
#define ZCH_VERSION 1u
#define HEADER_BYTES 40

struct rs_zch_table {
	uint32_t nbuckets, spb;   /* buckets, slots per bucket */
	uint32_t isize, imask;    /* index entries per bucket (a power of two >= 2 * spb, >= 4) */
	rs_eviction eviction;
	uint32_t decay_steps;
	uint32_t epoch_now;       /* step / decay_steps for the lookup under way */
	int32_t *local;           /* per bucket: its block, or -1 when not owned */
	uint32_t nlocal, cap;
	struct zblock *blk;       /* per block */
	struct zslot *slot;       /* per block, spb */
	struct zent *index;       /* per block, isize */
	uint64_t *queue;          /* per block, 2 * spb: the eviction queue's records */
	struct hent *heap;        /* per block, spb: the eviction heap */
	uint32_t *hpos;           /* per block, spb: each heap slot's position in it */
	uint32_t *pinned;         /* per block, spb: heap slots set aside for the step */
	rs_zch_stats stats;
	struct {                  /* changes to take back (rs_zch_journal) */
		struct zundo *v;
		size_t n, cap;
		uint32_t *counts; /* LFU counts before a decay, a word per used slot (UNDO_DECAYED records) */
		size_t ncounts, ccap;
		int on;
		rs_status lost;   /* RS_OK, or why the record is incomplete */
	} undo;
};

/* A block's counters, together: a lookup reads one cache line of them. */
struct zblock {
	uint32_t bucket;          /* the bucket it holds */
	uint32_t nused;           /* slots [0, nused) are taken */
	uint32_t epoch;           /* LFU decay epoch applied */
	uint32_t qhead, qtail;    /* the queue's records are [qhead, qtail) */
	uint32_t qsorted;         /* records before it are sorted by (last, slot) */
	uint32_t hn;              /* heap entries */
	uint32_t npinned, pinstep; /* slots in pinned, and the step they were set aside in */
};

/* A slot's identity and eviction metadata, together: a lookup reads one cache line. */
struct zslot {
	uint64_t id;
	uint32_t last;  /* the last step it was seen + 1; 0 = free */
	uint32_t count; /* its LFU count */
};

/*
 * An index entry: the slot + 1 (0 = empty) and its ID's hint (hint_of),
 * which gives the ID's home (deletion reads no slot) and filters the probe
 * (a probe reads the slot of no other ID, almost).
 */
struct zent {
	uint32_t slot1;
	uint32_t hint;
};

/* An eviction heap entry: the slot's key as last stored (older than its own if it was hit since). */
struct hent {
	uint64_t key;
	uint32_t slot;
};

/*
 * An ID's bucket and its index's hint (masked, the start of the linear
 * probe), from the ID's hash: the bucket from its high bits (a product),
 * the hint its low 32, so that within a bucket these are as good as fresh.
 */
static inline uint32_t bucket_of_hash(uint64_t hash, uint32_t buckets)
{
	return (uint32_t)(((unsigned __int128)hash * buckets) >> 64);
}
static inline uint32_t hint_of_hash(uint64_t hash) { return (uint32_t)hash; }
static inline uint32_t hint_of(uint64_t id) { return hint_of_hash(hash_id(id)); }

/* Put every used slot of block l in its heap, as they are now, and none in its queue (zch.c). */
void rs__zch_heap_rebuild(rs_zch_table *z, uint32_t l);

/* A bucket's state is about to be replaced wholesale: what the undo record holds no longer applies (zch.c). */
void rs__zch_forget_changes(rs_zch_table *z);

#endif
