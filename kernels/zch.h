/*
 * zch.h - zero-collision hashing (TorchRec's "managed collision"): raw
 * 64-bit IDs map to the slots (rows) of a table through an identity map, so
 * two live IDs never share a row; full buckets evict by LRU or LFU.
 *
 * The table's `slots` rows are grouped into `buckets` buckets of
 * S = slots / buckets slots each; bucket b owns rows [b*S, (b+1)*S). The
 * bucket of an ID is fixed by a hash (rs_zch_bucket_of, below), so resharding
 * moves whole buckets, with their identities, between ranks and never
 * changes which row an ID lives in. One rs_zch_table holds the buckets one
 * rank owns (any subset); the worker routes each ID to its bucket's owner
 * first.
 *
 * Inside a bucket, an open-addressing index (linear probing, 2S entries or
 * more, backward-shift deletion) maps an ID to its slot; slots themselves
 * never move, because they are embedding rows. Per slot the table keeps the
 * ID, the last step it was seen (LRU) and its use count (LFU); those 16
 * bytes travel with the row (RS_ZCH_SLOT_META_BYTES in planner.h).
 *
 * Hash (the GPU version must match it bit for bit):
 *   h      = mix64(id ^ 0x9E3779B97F4A7C15), mix64 = splitmix64's finalizer
 *   bucket = (h * buckets) >> 64            (128-bit product)
 * Each version's index is its own, and so is where a probe starts (CPU:
 * h's low bits; CUDA: mix64(h)'s): no result depends on it.
 *
 * Eviction, when a bucket is full and a new ID arrives: the victim is the
 * slot with the smallest last step (LRU) or the smallest decayed count (LFU,
 * ties by smallest last step), ties then by lowest slot. LFU counts halve
 * every lfu_decay_steps steps. The CPU table keeps that order without a
 * scan (zch.c: a queue of slots by last step, amortized O(1), beside a heap,
 * O(log S)); the CUDA one scans the bucket; both pick the same slot. A slot
 * seen in the current step is never a victim; when every slot of a bucket
 * was seen this step, the new ID gets slot -1 for this step (the lookup
 * kernel reads -1 as a zero row and skips its update) and the table's
 * `overflows` counter grows.
 *
 * Not thread-safe: one thread per table.
 */
#ifndef RS_ZCH_H
#define RS_ZCH_H

#include "common/types.h"
#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rs_zch_table rs_zch_table;

typedef struct rs_zch_stats {
	uint64_t inserts;   /* IDs given a free slot */
	uint64_t hits;      /* IDs found */
	uint64_t evictions; /* IDs that replaced a victim */
	uint64_t misses;    /* find-only lookups of unknown IDs */
	uint64_t overflows; /* IDs left without a slot for one step */
} rs_zch_stats;

/* Bucket of a raw ID among `buckets` (see the hash above). */
uint32_t rs_zch_bucket_of(uint64_t id, uint32_t buckets);

/*
 * A table for cfg's geometry (buckets >= 1, slots a positive multiple of
 * buckets, as the config loader already checks; checked again here) that
 * owns no bucket yet. RS_EINVAL with err on bad geometry.
 */
rs_status rs_zch_create(const rs_zch_config *cfg, rs_zch_table **out, rs_err *err);
void rs_zch_destroy(rs_zch_table *z);

uint32_t rs_zch_buckets(const rs_zch_table *z);
int rs_zch_owns(const rs_zch_table *z, uint32_t bucket);
uint32_t rs_zch_owned(const rs_zch_table *z);  /* number of owned buckets */
rs_zch_stats rs_zch_get_stats(const rs_zch_table *z);

/* Take ownership of an empty bucket / give a bucket up (its identities are forgotten). */
rs_status rs_zch_add_bucket(rs_zch_table *z, uint32_t bucket);
rs_status rs_zch_drop_bucket(rs_zch_table *z, uint32_t bucket);

/*
 * Training lookup: slots[i] = the row of ids[i], inserting IDs not yet
 * present (evicting when a bucket is full) and marking every ID seen at
 * `step` (steps must not decrease). Slots given to a new ID (free or
 * evicted) are appended to fresh[0..*nfresh) when fresh is non-NULL
 * (capacity n): the caller re-initializes those rows and their optimizer
 * state before use. An ID whose bucket this table does not own gets slot -1
 * and the call returns RS_ENOTFOUND after processing the rest.
 */
rs_status rs_zch_find_or_insert(rs_zch_table *z, const uint64_t *ids, size_t n, uint32_t step,
				int64_t *slots, int64_t *fresh, size_t *nfresh);

/*
 * Undoing a failed training step: rs_zch_journal(z, 1) begins recording
 * every change find-or-insert makes (forgetting what it recorded before; 0
 * stops recording), and rs_zch_undo takes them back, newest first, so the
 * table finds, evicts and counts as it did when recording began (LFU
 * decay included); the statistics keep counting. RS_ENOMEM when a change
 * could not be recorded, RS_EINVAL when a bucket was added, dropped or
 * loaded meanwhile: the changes then all stay. Either way the record is
 * emptied.
 */
void rs_zch_journal(rs_zch_table *z, int on);
rs_status rs_zch_undo(rs_zch_table *z);

/* Evaluation lookup: slots[i] = the row of ids[i], or -1 (a zero row) when unknown. Changes no state but `misses`. */
rs_status rs_zch_find(rs_zch_table *z, const uint64_t *ids, size_t n, int64_t *slots);

/* The ID living in a slot of an owned bucket, or 0 with *live = 0 when the slot is free. */
uint64_t rs_zch_slot_id(const rs_zch_table *z, int64_t slot, int *live);

/*
 * Serialization of one owned bucket, with the caller's rows for it (S rows
 * of row_bytes each, the embedding and optimizer state as the worker stores
 * them), into one buffer: a header (magic, version, geometry, bucket, row
 * size, payload length), the slot IDs and eviction metadata, the rows, and a
 * CRC-32C of all of it.
 */
size_t rs_zch_bucket_bytes(const rs_zch_table *z, size_t row_bytes);
rs_status rs_zch_bucket_save(const rs_zch_table *z, uint32_t bucket, const void *rows, size_t row_bytes,
			     void *buf, size_t cap, size_t *len);

/*
 * Verify a saved bucket completely (length, magic, version, geometry, row
 * size, checksum) before touching anything; then own the bucket (replacing
 * any state this table had for it), rebuild its index and copy its rows to
 * rows_out (S * row_bytes bytes). *bucket gets the bucket index. On error
 * (RS_ECORRUPT or RS_EINVAL, with err) neither the table nor rows_out changed.
 */
rs_status rs_zch_bucket_load(rs_zch_table *z, const void *buf, size_t len, void *rows_out,
			     size_t row_bytes, uint32_t *bucket, rs_err *err);

/*
 * Checkpoints keep a bucket's identities beside its rows, slot by slot:
 * rs_zch_slot_meta gives a slot's eviction metadata (meta[0]: the last step
 * it was seen + 1, 0 for a free slot; meta[1]: its LFU count; meta[2]: its
 * bucket's LFU decay epoch), and rs_zch_bucket_restore puts a bucket back
 * from its S slots' IDs (live IDs first, then -1 for the free slots) and
 * metadata (NULL: every live slot as seen at step 0, count 1, epoch 0),
 * verified as rs_zch_bucket_load verifies a saved bucket (each live ID of
 * this bucket and once, live slots a prefix) before it replaces the
 * bucket's state (owning it). RS_ECORRUPT with err otherwise, nothing changed.
 */
void rs_zch_slot_meta(const rs_zch_table *z, int64_t slot, uint32_t meta[3]);
rs_status rs_zch_bucket_restore(rs_zch_table *z, uint32_t bucket, const int64_t *ids, const uint32_t *meta,
				rs_err *err);

#endif
