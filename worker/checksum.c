/*
 * checksum.c - the whole-model checksum the coordinator compares across a
 * reshard (see train.h, rs_trainer_checksums): a sum over rows of a hash
 * of where each row is and what it holds, so it adds up across shards and
 * members.
 *
 * During a pre-copy the pause must not pass over every row twice (the old
 * model, then the staged one): each plain shard keeps one hash per row
 * (rs__rowsums), valid where its stale bit is clear. The old members hash
 * their rows while training (rs__rowsums_fill from the background rounds)
 * and every update marks a row stale with its dirty mark; a receiver
 * hashes the rows of a chunk as it checks it, and those sent again as it
 * writes them (while training, or at the pause). A new shard that shares
 * the old shard's memory shares its hashes. A checksum then hashes only
 * the stale rows and adds the cached terms. The hashes go with the
 * pre-copy (rs__rowsums_drop): once training goes on without marks, they
 * would go stale unseen.
 */
#include "worker/train_internal.h"
#include "common/rng.h"
#include "kernels/zch.h"

#include <stdlib.h>
#include <string.h>

/*
 * A 64-bit hash of n bytes, seeded: four multiply-xor lanes over 8-byte
 * words (the rows are a few hundred bytes; a CRC per row would run one
 * dependent chain at a third of the speed), then splitmix's finalizer.
 * It needs to catch lost, duplicated or damaged rows, not adversaries.
 */
static uint64_t hash_bytes(const void *data, size_t n, uint64_t seed)
{
	const unsigned char *p = data;
	const uint64_t k = 0x9E3779B97F4A7C15ull;
	uint64_t a = seed, b = seed ^ 0xC2B2AE3D27D4EB4Full, c = seed + k, d = ~seed, w[4];
	for (; n >= 32; p += 32, n -= 32) {
		memcpy(w, p, 32);
		a = (a ^ w[0]) * k;
		b = (b ^ w[1]) * k;
		c = (c ^ w[2]) * k;
		d = (d ^ w[3]) * k;
	}
	for (; n >= 8; p += 8, n -= 8) {
		memcpy(w, p, 8);
		a = (a ^ w[0]) * k;
	}
	for (; n; p++, n--)
		b = (b ^ *p) * k;
	return rs_mix64(a ^ rs_mix64(b) ^ (c << 17 | c >> 47) ^ rs_mix64(d + k));
}

/* The checksum term of row r of local shard ls (shard-relative). */
static uint64_t row_hash(const rs_trainer *tr, const lshard *ls, int64_t r)
{
	const tinfo *ti = &tr->tables[ls->table];
	void *w, *s;
	size_t wl, sl;
	int live = 0;
	rs__row_blocks(tr->cfg, ls, r, 1, &w, &wl, &s, &sl);
	uint64_t id = ti->zch ? rs_zch_slot_id(ti->zch, ls->s.row_offset + r, &live) : 0;
	if (ti->zch) { /* and eviction's past: copies that disagree there would evict apart */
		uint32_t meta[3];
		rs_zch_slot_meta(ti->zch, ls->s.row_offset + r, meta);
		id = rs_mix64(id ^ ((uint64_t)meta[0] << 32 | meta[1]));
	}
	/* where the row is in the table, then what it holds */
	uint64_t h = rs_mix64((uint64_t)(ls->s.row_offset + r) * 0x9E3779B97F4A7C15ull + (uint64_t)ls->table);
	h = hash_bytes(w, wl, h ^ ((uint64_t)(uint32_t)ls->s.col_offset << 32));
	if (sl)
		h = hash_bytes(s, sl, h);
	return rs_mix64(h ^ rs_mix64(id + (uint64_t)live));
}

uint64_t rs__rows_sum(const rs_trainer *tr, const lshard *ls, int64_t r0, int64_t n)
{
	uint64_t sum = 0;
	for (int64_t r = r0; r < r0 + n; r++)
		sum += row_hash(tr, ls, r);
	return sum;
}

/* ---- the pre-copy's cached row hashes ------------------------------------------------- */

rs_status rs__rowsums_start(lshard *ls)
{
	if (ls->rsum)
		return RS_OK;
	rs__rowsums *c = calloc(1, sizeof(*c));
	size_t blocks = (size_t)(ls->s.rows / RS__ROWSUM_BLOCK) + 1;
	/* every row stale: nothing hashed yet (each term 0 meanwhile) */
	if (c && (c->h = calloc((size_t)ls->s.rows + 1, sizeof(uint64_t))) && rs__marks_init(&c->stale, ls->s.rows, 1) &&
	    (c->block = calloc(blocks, sizeof(uint64_t)))) {
		c->refs = 1;
		ls->rsum = c, ls->rsum_off = 0;
		return RS_OK;
	}
	if (c) {
		free(c->h);
		free(c->stale.bit);
	}
	free(c);
	return RS_ENOMEM;
}

void rs__rowsums_share(lshard *ns, const lshard *os, int64_t row)
{
	rs__rowsums_unref(ns->rsum);
	ns->rsum = os->rsum, ns->rsum_off = os->rsum_off + row;
	if (ns->rsum)
		ns->rsum->refs++;
}

static void unref_later(rs__rowsums *c, rs__later *later)
{
	if (!c || --c->refs > 0)
		return;
	rs__later_free(later, c->h);
	rs__later_free(later, c->stale.bit);
	rs__later_free(later, c->block);
	free(c);
}

void rs__rowsums_unref(rs__rowsums *c) { unref_later(c, NULL); }

void rs__rowsums_drop_later(rs_trainer *tr, rs__later *later)
{
	for (int i = 0; tr && i < tr->nshards; i++) {
		unref_later(tr->shards[i].rsum, later);
		tr->shards[i].rsum = NULL, tr->shards[i].rsum_off = 0;
	}
}

void rs__rowsums_drop(rs_trainer *tr) { rs__rowsums_drop_later(tr, NULL); }

void rs__rowsums_stale(lshard *ls, int64_t r0, int64_t n)
{
	for (int64_t r = r0; ls->rsum && r < r0 + n; r++)
		rs__rowsum_stale(ls, r);
}

/* Stale rows hashed together (rs__rowsums_fill) */
#define FILL_BATCH 16

/* Row r of ls (shard-relative) is about to be hashed: its weights (their first lines; the hardware reads on along
 * a wide row) and state on their way into the cache. */
static void prefetch_row(const rs_trainer *tr, const lshard *ls, int64_t r)
{
	void *w, *s;
	size_t wl, sl;
	rs__row_blocks(tr->cfg, ls, r, 1, &w, &wl, &s, &sl);
	for (size_t o = 0; o < wl && o < 256; o += 64)
		__builtin_prefetch((const char *)w + o);
	if (sl)
		__builtin_prefetch(s);
}

int64_t rs__rowsums_fill(const rs_trainer *tr, const lshard *ls, int64_t r0, int64_t n, int64_t most)
{
	rs__rowsums *c = ls->rsum;
	int64_t done = 0, off = c ? ls->rsum_off : 0, end = off + r0 + n;
	int64_t k = c ? rs__marks_next(&c->stale, off + r0, end) : end;
	while (k < end && done < most) {
		/* a batch of stale rows, read ahead together: scattered rows are independent misses */
		int64_t batch[FILL_BATCH];
		int nb = 0;
		for (; k < end && nb < FILL_BATCH && done + nb < most; k = rs__marks_next(&c->stale, k + 1, end)) {
			batch[nb++] = k;
			prefetch_row(tr, ls, k - off);
			__builtin_prefetch(&c->h[k], 1);
		}
		for (int i = 0; i < nb; i++) {
			uint64_t h = row_hash(tr, ls, batch[i] - off);
			c->block[batch[i] / RS__ROWSUM_BLOCK] += h - c->h[batch[i]]; /* sums wrap, as the checksum's do */
			c->h[batch[i]] = h;
			rs__marks_unset(&c->stale, batch[i]);
		}
		done += nb;
	}
	return done;
}

/* Shard ls's checksum from its cached hashes, the stale ones hashed again first: whole blocks' sums, the ends' terms. */
static uint64_t cached_sum(const rs_trainer *tr, const lshard *ls)
{
	const rs__rowsums *c = ls->rsum;
	rs__rowsums_fill(tr, ls, 0, ls->s.rows, INT64_MAX);
	uint64_t sum = 0;
	int64_t k = ls->rsum_off, end = ls->rsum_off + ls->s.rows;
	for (; k < end && k % RS__ROWSUM_BLOCK; k++)
		sum += c->h[k];
	for (; k + RS__ROWSUM_BLOCK <= end; k += RS__ROWSUM_BLOCK)
		sum += c->block[k / RS__ROWSUM_BLOCK];
	for (; k < end; k++)
		sum += c->h[k];
	return sum;
}

void rs_trainer_checksums(const rs_trainer *tr, uint64_t *counted, uint64_t *held)
{
	const rs_config *cfg = tr->cfg;
	if (counted)
		memset(counted, 0, sizeof(uint64_t) * (size_t)cfg->ntables);
	if (held)
		memset(held, 0, sizeof(uint64_t) * (size_t)cfg->ntables);
	for (int i = 0; i < tr->nshards; i++) {
		const lshard *ls = &tr->shards[i];
		int counts = counted && rs__counted(tr, i);
		if (!counts && !held)
			continue;
		uint64_t sum = ls->rsum ? cached_sum(tr, ls) : rs__rows_sum(tr, ls, 0, ls->s.rows);
		if (counts)
			counted[ls->table] += sum;
		if (held)
			held[ls->table] += sum;
	}
}

void rs_trainer_checksum(const rs_trainer *tr, uint64_t *per_table) { rs_trainer_checksums(tr, per_table, NULL); }
