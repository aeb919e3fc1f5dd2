/*
 * zch_io.c - a ZCH table's bucket as bytes (see zch.h): saved with its
 * rows for a reshard, loaded (verified whole first) and restored from a
 * checkpoint's slot IDs and metadata.
 */
#include "kernels/zch_internal.h"
#include "common/crc32c.h"

#include <stdlib.h>
#include <string.h>

size_t rs_zch_bucket_bytes(const rs_zch_table *z, size_t row_bytes)
{
	return HEADER_BYTES + (size_t)z->spb * (16 + row_bytes) + 4;
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); } /* little-endian hosts only */
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void put_header(unsigned char *p, const rs_zch_table *z, uint32_t bucket, uint32_t nused, size_t row_bytes,
		       uint32_t epoch)
{
	put32(p, ZCH_MAGIC);
	put32(p + 4, ZCH_VERSION);
	put32(p + 8, z->nbuckets);
	put32(p + 12, z->spb);
	put32(p + 16, bucket);
	put32(p + 20, nused);
	put64(p + 24, row_bytes);
	put32(p + 32, epoch);
	put32(p + 36, 0);
}

rs_status rs_zch_bucket_save(const rs_zch_table *z, uint32_t bucket, const void *rows, size_t row_bytes,
			     void *buf, size_t cap, size_t *len)
{
	size_t need = rs_zch_bucket_bytes(z, row_bytes), S = z->spb;
	if (!rs_zch_owns(z, bucket))
		return RS_EINVAL;
	if (cap < need)
		return RS_ENOSPACE;
	uint32_t l = (uint32_t)z->local[bucket];
	unsigned char *p = (unsigned char *)buf + HEADER_BYTES;
	put_header(buf, z, bucket, z->blk[l].nused, row_bytes, z->blk[l].epoch);
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
	rs__zch_forget_changes(z); /* this bucket's state is replaced: the record no longer describes it */
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
	z->blk[l].nused = nused;
	z->blk[l].epoch = get32(p + 32);
	rs__zch_heap_rebuild(z, l);
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
	meta[2] = z->blk[l].epoch;
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
	put_header(buf, z, bucket, nused, 0, meta && nused ? meta[2] : 0);
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
