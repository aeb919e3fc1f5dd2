/*
 * precopy.c - pre-copy resharding (see train.h): the plain tables' rows
 * move in rounds while the old world trains on, the pause sends only what
 * changed since, as live migration of virtual machines does.
 *
 * ZCH tables (their identities change with every lookup) and data-parallel
 * tables (one old copy may feed several joiners) move at the pause.
 *
 * The rows a member keeps but had to copy (a new shard not wholly inside
 * one old shard) are copied at the start and the dirty ones again at the
 * pause; kept rows that share the old shard's memory are current anyway.
 *
 * The pause's delta, per (sender, receiver) pair: the sizes first (one
 * all-to-all of counts), then one message per pair that has rows:
 *   per move of the pair with dirty rows, in diff order:
 *     u32 move index, u32 0, i64 n, n x i64 row (within the move, rising),
 *     the n rows packed (rs_emb_pack_rows: their weights, then their state);
 *   a CRC-32C of all of it.
 * The receiver checks the CRC and that every move is one it receives from
 * that sender and every row inside it, before unpacking anything of it.
 */
#include "worker/reshard_internal.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "common/grow.h"

#include <stdlib.h>
#include <string.h>

struct rs_precopy {
	stager g;
	rs_reshard_spec spec;   /* the caller's, copied: g points here */
	rs_reshard_stats stats;
	int64_t rounds, next;   /* the plain tables' rounds, and the next to run */
	int passes;             /* background passes left that send again the rows updated since sent */
	int hash_shard;         /* the old rows' hashes, a share per round: where the next share begins */
	int64_t hash_row, hash_per_round;
};

/* After its chunk rounds, a pre-copy sends again the rows updated since they were sent this many times while
 * training: the pause then sends only what the last steps updated. */
#define BACKGROUND_PASSES 2
#define HASH_LAPS 4 /* times the background rounds hash the old rows over (hash_ahead) */

/*
 * Cached row hashes (checksum.c) for the plain shards of the old trainer
 * (marked stale with every update, like the dirty marks) and of the new
 * one (hashed as received); a new shard sharing old memory shares them.
 * The old rows are hashed a share per background round.
 */
static rs_status start_rowsums(rs_trainer *tr)
{
	for (int i = 0; tr && i < tr->nshards; i++) {
		lshard *ls = &tr->shards[i];
		if (!tr->tables[ls->table].zch && !rs__is_dp(tr, i) && !ls->rsum) /* ZCH identities change in lookups, */
			RSCHECK(rs__rowsums_start(ls)); /* data-parallel rows in their own update: neither is marked */
	}
	return RS_OK;
}

/*
 * The next share of the old rows hashed (the stale ones), from where the
 * last share ended, going round the shards HASH_LAPS times over the chunk
 * rounds (and on through the passes): a row updated after the sweep went
 * by is hashed again on its next lap, not all at the first pass. With one
 * lap, that pass hashed 81-83 ms of rows at 4 GiB of state (with a CI run
 * beside it), one step of training the longer; with four, 13 ms, and the
 * last pass 3 ms.
 */
static void hash_ahead(rs_precopy *pc)
{
	const rs_trainer *old = pc->g.old;
	int64_t most = pc->hash_per_round * HASH_LAPS;
	for (int turns = 0; old && old->nshards > 0 && most > 0 && turns <= old->nshards;) { /* at most a lap a call */
		if (pc->hash_shard >= old->nshards)
			pc->hash_shard = 0, pc->hash_row = 0; /* the next lap */
		const lshard *ls = &old->shards[pc->hash_shard];
		int64_t n = ls->rsum ? ls->s.rows - pc->hash_row : 0;
		n = n < most ? n : most;
		rs__rowsums_fill(old, ls, pc->hash_row, n, n);
		most -= n;
		pc->hash_row += n;
		if (pc->hash_row >= ls->s.rows || !ls->rsum)
			pc->hash_shard++, pc->hash_row = 0, turns++;
	}
}

/* A span of an old shard's rows that goes somewhere: a move from this member, or a kept range copied. */
typedef struct span {
	int table;
	int32_t col;
	int64_t lo, hi;
} span;

static int cmp_span(const void *a, const void *b)
{
	const span *x = a, *y = b;
	if (x->table != y->table)
		return x->table - y->table;
	if (x->col != y->col)
		return x->col < y->col ? -1 : 1;
	return (x->lo > y->lo) - (x->lo < y->lo);
}

/*
 * Whether every row of this member's old plain shards goes to one copy at
 * most (a move, or a kept range copied into a new shard): a row's one dirty
 * mark, cleared as it is sent, can follow only one. Not so when a new world
 * holds replicas that one old copy feeds (a 1D world turning 2D): RS_EINVAL,
 * naming the rows, and the change moves at the pause.
 */
static rs_status one_copy_each(const stager *g, rs_err *err)
{
	const rs_trainer *old = g->old, *nt = g->nt;
	size_t n = 0, cap = (size_t)g->nmoves + (nt ? (size_t)nt->nshards * (size_t)old->nshards : 0) + 1;
	span *v = malloc(sizeof(span) * cap);
	if (!v)
		return rs_err_set(err, RS_ENOMEM, "pre-copy: out of memory");
	for (int i = 0; i < g->nmoves; i++) {
		const rs_move *m = &g->moves[i];
		if (m->src != RS_MOVE_RESTORE && g->spec->union_of_old[m->src] == g->me && !rs__at_pause(g, m->table))
			v[n++] = (span){m->table, m->col_offset, m->row_offset, m->row_offset + m->rows};
	}
	for (int i = 0; nt && i < nt->nshards; i++)
		for (int k = 0; k < old->nshards; k++) {
			const lshard *ns = &nt->shards[i], *os = &old->shards[k];
			int64_t r0, r1;
			if (rs__at_pause(g, os->table) || !rs__kept_rows(os, ns, &r0, &r1) || rs__kept_whole(ns, r0, r1))
				continue; /* a whole kept shard shares the old memory: no copy */
			v[n++] = (span){os->table, os->s.col_offset, r0, r1};
		}
	qsort(v, n, sizeof(*v), cmp_span);
	rs_status st = RS_OK;
	for (size_t i = 1; i < n && st == RS_OK; i++)
		if (v[i].table == v[i - 1].table && v[i].col == v[i - 1].col && v[i].lo < v[i - 1].hi)
			st = rs_err_set(err, RS_EINVAL, "pre-copy: rows %lld.. of table '%s' go to more than one copy (replicas "
					"fed from one): moved at the pause", (long long)v[i].lo, g->cfg->tables[v[i].table].name);
	free(v);
	return st;
}

rs_status rs_precopy_begin(const rs_config *cfg, rs_trainer *old, const rs_reshard_spec *spec, rs_precopy **out,
			   rs_err *err)
{
	*out = NULL;
	if (spec->restore)
		return rs_err_set(err, RS_EINVAL, "pre-copy: not with rows restored from a checkpoint");
	if (old && !rs_trainer_can_precopy(old))
		return rs_err_set(err, RS_EINVAL, "pre-copy: not in 2D worlds whose replicas are averaged every %d steps",
				  (int)old->cfg->cluster.replica_sync_every);
	rs_precopy *pc = calloc(1, sizeof(*pc));
	if (!pc)
		return rs_err_set(err, RS_ENOMEM, "pre-copy: out of memory");
	stager *g = &pc->g;
	pc->spec = *spec;
	rs_status st = rs__stage_open(g, cfg, old, &pc->spec, &pc->stats, err);
	g->precopy = 1;
	if (st == RS_OK && old)
		st = one_copy_each(g, err);
	/* marks first: a kept row copied now and updated later is copied again; hashes before the new shards share them */
	if (st == RS_OK && old && ((st = rs__dirty_start(old)) != RS_OK || (st = start_rowsums(old)) != RS_OK))
		rs_err_set(err, st, "pre-copy: out of memory for the dirty rows' marks and hashes");
	double t0 = rs_now();
	if (st == RS_OK && old && g->nt)
		st = rs__stage_kept(g, RS__MOVES_AHEAD);
	if (st == RS_OK)
		rs__stage_populate(g);
	pc->stats.copy_s = rs_now() - t0;
	if (st == RS_OK)
		st = rs__stage_chunks(g, RS__MOVES_AHEAD, &pc->rounds);
	pc->passes = pc->rounds > 0 ? BACKGROUND_PASSES : 0;
	if (st == RS_OK && (st = start_rowsums(g->nt)) != RS_OK)
		rs_err_set(err, st, "pre-copy: out of memory for the new rows' hashes");
	for (int i = 0; st == RS_OK && old && pc->rounds > 0 && i < old->nshards; i++)
		pc->hash_per_round += old->shards[i].rsum ? (old->shards[i].s.rows + pc->rounds - 1) / pc->rounds : 0;
	if (st != RS_OK) {
		if (!err->msg[0])
			rs_err_set(err, st, "pre-copy: %s", rs_status_str(st));
		rs_precopy_free(pc);
		return st;
	}
	*out = pc;
	return RS_OK;
}

int64_t rs_precopy_pending(const rs_precopy *pc) { return pc->rounds - pc->next + pc->passes; }

int rs_precopy_last_pass_left(const rs_precopy *pc) { return pc->next == pc->rounds && pc->passes == 1; }

static rs_status send_delta(stager *g);

/*
 * Every old row updated since it was hashed, hashed again: the checksums
 * at the pause then hash only what the last steps updated. Left to the
 * pause, they hashed 46-48 ms of rows at 4 GiB of state (11 ms at 256
 * MiB), while every member stood still.
 */
static void rehash_stale(const rs_precopy *pc)
{
	const rs_trainer *old = pc->g.old;
	for (int i = 0; old && i < old->nshards; i++)
		if (old->shards[i].rsum)
			rs__rowsums_fill(old, &old->shards[i], 0, old->shards[i].s.rows, INT64_MAX);
}

/* One background pass of the rows updated since sent; counted apart from what the pause sends again. */
static rs_status pass(rs_precopy *pc)
{
	uint64_t rows = pc->stats.dirty_rows, bytes = pc->stats.dirty_bytes;
	rehash_stale(pc);
	RSCHECK(send_delta(&pc->g));
	pc->stats.resent_rows += pc->stats.dirty_rows - rows, pc->stats.resent_bytes += pc->stats.dirty_bytes - bytes;
	pc->stats.dirty_rows = rows, pc->stats.dirty_bytes = bytes;
	pc->passes--;
	return RS_OK;
}

rs_status rs_precopy_round(rs_precopy *pc, rs_err *err)
{
	if (rs_precopy_pending(pc) == 0)
		return RS_OK;
	pc->g.err = err;
	if (pc->next < pc->rounds) {
		RSCHECK(rs__stage_round(&pc->g, pc->next, pc->rounds));
		pc->next++;
	} else {
		RSCHECK(pass(pc));
	}
	pc->stats.background_rounds++;
	hash_ahead(pc);
	return RS_OK;
}

/* Whether move m goes ahead (not at the pause) from union rank src to union rank dst. */
static int ahead_move(const stager *g, const rs_move *m, int32_t src, int32_t dst)
{
	return m->src != RS_MOVE_RESTORE && m->dst == dst && g->spec->union_of_old[m->src] == src &&
	       !rs__at_pause(g, m->table);
}

/*
 * The dirty rows of plain move m in old shard os: their offsets in the move
 * into rows[] (rising), how many: rs__dirty_next skips 64 words of unmarked
 * rows at a time (a bit at a time took 3 ms of the pause at 4 GiB of state).
 */
static int64_t dirty_of(const lshard *os, const rs_move *m, int64_t *rows)
{
	int64_t n = 0, base = m->row_offset - os->s.row_offset, end = base + m->rows;
	for (int64_t r = rs__dirty_next(os, base, end); r < end; r = rs__dirty_next(os, r + 1, end))
		rows[n++] = r - base;
	return n;
}

/*
 * This member's delta message to union rank d (see the top of the file), in
 * g->sbuf[d]; *len 0 when nothing is dirty.
 */
static rs_status pack_delta(stager *g, int32_t d, size_t *len, int64_t *scratch)
{
	const rs_config *cfg = g->cfg;
	unsigned char **buf = &g->sbuf[d];
	size_t *cap = &g->scap[d];
	*len = 0;
	for (int i = 0; i < g->nmoves; i++) {
		const rs_move *m = &g->moves[i];
		if (!ahead_move(g, m, g->me, d))
			continue;
		lshard *os = rs__move_shard(g->old, m);
		if (!os)
			return rs_err_set(g->err, RS_EINVAL, "pre-copy: no old shard holds rows %lld.. of table '%s'",
					  (long long)m->row_offset, cfg->tables[m->table].name);
		int64_t n = dirty_of(os, m, scratch);
		if (n == 0)
			continue;
		size_t rb = rs__packed_row_bytes(cfg, m), add = 16 + 8 * (size_t)n + rb * (size_t)n;
		if (rs_grow(buf, cap, *len + add + 4, 1) != RS_OK)
			return rs_err_set(g->err, RS_ENOMEM, "pre-copy: out of memory for %lld dirty rows", (long long)n);
		unsigned char *p = *buf + *len;
		uint32_t mi = (uint32_t)i, zero = 0;
		memcpy(p, &mi, 4);
		memcpy(p + 4, &zero, 4);
		memcpy(p + 8, &n, 8);
		memcpy(p + 16, scratch, 8 * (size_t)n);
		/* as shard rows, to pack; sent as they are now, marked again by an update. A row of an old shard is in one
		 * move at most (rs__move_shard: whole column blocks, 1D), so no other destination needs its mark */
		for (int64_t k = 0; k < n; k++) {
			scratch[k] += m->row_offset - os->s.row_offset;
			rs__dirty_clear(os, scratch[k], 1);
		}
		RSCHECK(rs_emb_pack_rows(&os->emb, cfg->optimizer.kind, scratch, n, p + 16 + 8 * (size_t)n, rb * (size_t)n));
		*len += add;
		g->stats->dirty_rows += (uint64_t)n;
		g->stats->dirty_bytes += rb * (uint64_t)n;
	}
	if (*len) {
		uint32_t crc = rs_crc32c(0, *buf, *len);
		memcpy(*buf + *len, &crc, 4);
		*len += 4;
	}
	return RS_OK;
}

/* Check the delta message from union rank s whole, then unpack its rows into the new shards. */
static rs_status unpack_delta(stager *g, int32_t s, unsigned char *buf, size_t len, int64_t *scratch)
{
	const rs_config *cfg = g->cfg;
	uint32_t crc;
	if (rs_reshard_fault_for_tests == 3 && len > 4) {
		rs_reshard_fault_for_tests = 0; /* once per process: the next attempt goes through */
		buf[len / 2] ^= 0x40;
	}
	if (len >= 4 + 16)
		memcpy(&crc, buf + len - 4, 4);
	if (len < 4 + 16 || crc != rs_crc32c(0, buf, len - 4))
		return rs_err_set(g->err, RS_ECORRUPT, "pre-copy: the rows updated since sent, from rank %d: checksum "
				  "mismatch (%zu bytes)", s, len);
	for (int pass = 0; pass < 2; pass++) { /* check everything, then unpack */
		size_t at = 0, end = len - 4;
		while (at < end) {
			uint32_t mi;
			int64_t n;
			if (end - at < 16)
				return rs_err_set(g->err, RS_ECORRUPT, "pre-copy: rank %d's updated rows: a truncated entry", s);
			memcpy(&mi, buf + at, 4);
			memcpy(&n, buf + at + 8, 8);
			const rs_move *m = mi < (uint32_t)g->nmoves ? &g->moves[mi] : NULL;
			if (!m || !ahead_move(g, m, s, g->me))
				return rs_err_set(g->err, RS_ECORRUPT, "pre-copy: rank %d sent rows of move %u, not one it sends here",
						  s, mi);
			size_t rb = rs__packed_row_bytes(cfg, m);
			if (n < 1 || n > m->rows || (end - at - 16) / (8 + rb) < (size_t)n)
				return rs_err_set(g->err, RS_ECORRUPT, "pre-copy: rank %d's updated rows of table '%s': %lld rows "
						  "do not fit", s, cfg->tables[m->table].name, (long long)n);
			lshard *ns = rs__move_shard(g->nt, m);
			if (!ns)
				return rs_err_set(g->err, RS_EINVAL, "pre-copy: no new shard holds rows %lld.. of table '%s'",
						  (long long)m->row_offset, cfg->tables[m->table].name);
			memcpy(scratch, buf + at + 16, 8 * (size_t)n);
			for (int64_t k = 0, prev = -1; k < n; k++) {
				int64_t o = scratch[k]; /* a row of the move: rising, inside it */
				if (o <= prev || o >= m->rows)
					return rs_err_set(g->err, RS_ECORRUPT, "pre-copy: rank %d's updated rows of table '%s': "
							  "row %lld out of the move or out of order", s,
							  cfg->tables[m->table].name, (long long)o);
				scratch[k] = o + m->row_offset - ns->s.row_offset; /* as a row of the new shard */
				prev = o;
			}
			if (pass == 1)
				RSCHECK(rs_emb_unpack_rows(&ns->emb, cfg->optimizer.kind, scratch, n, buf + at + 16 + 8 * (size_t)n,
							   rb * (size_t)n));
			for (int64_t k = 0; pass == 1 && k < n; k++) { /* hashed while at hand (in cache) */
				rs__rowsum_stale(ns, scratch[k]);
				rs__rowsums_fill(g->nt, ns, scratch[k], 1, 1);
			}
			at += 16 + (8 + rb) * (size_t)n;
		}
	}
	return RS_OK;
}

/* The largest plain move this member sends or receives, in rows (the scratch for row numbers). */
static int64_t largest_move(const stager *g)
{
	int64_t most = 1;
	for (int i = 0; i < g->nmoves; i++)
		most = g->moves[i].rows > most ? g->moves[i].rows : most;
	return most;
}

/* The most bytes union rank s can send here in a delta: all the rows of its moves to this member. */
static size_t delta_cap(const stager *g, int32_t s)
{
	size_t cap = 4;
	for (int i = 0; i < g->nmoves; i++)
		if (ahead_move(g, &g->moves[i], s, g->me))
			cap += 16 + (size_t)g->moves[i].rows * (8 + rs__packed_row_bytes(g->cfg, &g->moves[i]));
	return cap;
}

/*
 * Every pair's rows updated since they were sent: sizes, then the messages.
 * They go through the per-peer buffers the chunk rounds serialize ZCH
 * chunks in, kept from pass to pass: fresh memory faults in a page at a
 * time (814 faults for the 4.6 MiB a leaver of bench-1g sent at the pause),
 * and the passes while training have faulted them in already.
 */
static rs_status send_delta(stager *g)
{
	size_t nu = (size_t)g->nunion;
	size_t *slen = calloc(nu, sizeof(size_t)), *rlen = calloc(nu, sizeof(size_t));
	int64_t *scratch = malloc(sizeof(int64_t) * (size_t)largest_move(g));
	rs_status st = slen && rlen && scratch ? RS_OK : RS_ENOMEM;
	int ns = 0, nr = 0;
	for (int32_t d = 0; st == RS_OK && g->old && d < g->nunion; d++)
		st = pack_delta(g, d, &slen[d], scratch);
	if (st == RS_OK && (st = rs_transport_alltoall_counts(g->spec->uni, slen, rlen)) != RS_OK)
		rs_err_set(g->err, st, "pre-copy: the sizes of the updated rows: %s", rs_transport_error(g->spec->uni));
	for (int32_t p = 0; st == RS_OK && p < g->nunion; p++) {
		if (slen[p])
			g->sx[ns++] = (rs_xfer){p, g->sbuf[p], slen[p], NULL};
		if (rlen[p] && !g->nt)
			st = rs_err_set(g->err, RS_ECORRUPT, "pre-copy: rank %d sends %zu bytes of rows to a member that leaves",
					p, rlen[p]);
		else if (rlen[p] > delta_cap(g, p))
			st = rs_err_set(g->err, RS_ECORRUPT, "pre-copy: rank %d announces %zu bytes of updated rows, more than "
					"all the rows it moves here (%zu)", p, rlen[p], delta_cap(g, p));
		else if (rlen[p] && rs_grow(&g->rbuf[p], &g->rcap[p], rlen[p], 1) != RS_OK)
			st = rs_err_set(g->err, RS_ENOMEM, "pre-copy: out of memory for %zu bytes of rows", rlen[p]);
		else if (rlen[p])
			g->rx[nr++] = (rs_xfer){p, g->rbuf[p], rlen[p], NULL};
	}
	if (st == RS_OK && (st = rs_transport_exchange(g->spec->uni, g->sx, ns, g->rx, nr)) != RS_OK)
		rs_err_set(g->err, st, "pre-copy: sending the updated rows: %s", rs_transport_error(g->spec->uni));
	for (int32_t p = 0; st == RS_OK && p < g->nunion; p++)
		if (rlen[p])
			st = unpack_delta(g, p, g->rbuf[p], rlen[p], scratch);
	if (st == RS_ENOMEM && !g->err->msg[0])
		rs_err_set(g->err, st, "pre-copy: out of memory sending the updated rows");
	free(scratch);
	free(slen);
	free(rlen);
	return st;
}

/* Kept rows that were copied (not shared) and updated since: copied again. */
static void recopy_kept(stager *g)
{
	for (int i = 0; i < g->nt->nshards; i++) {
		lshard *ns = &g->nt->shards[i];
		for (int k = 0; k < g->old->nshards; k++) {
			const lshard *os = &g->old->shards[k];
			int64_t r0, r1;
			if (ns->wmem == os->wmem || rs__at_pause(g, os->table) || !rs__kept_rows(os, ns, &r0, &r1))
				continue;
			int64_t end = r1 - os->s.row_offset; /* rows of os from here on */
			for (int64_t o = rs__dirty_next(os, r0 - os->s.row_offset, end); o < end; o = rs__dirty_next(os, o + 1, end)) {
				int64_t r = os->s.row_offset + o;
				void *wo, *so, *wn, *sn;
				size_t wl, sl;
				rs__row_blocks(g->cfg, os, o, 1, &wo, &wl, &so, &sl);
				rs__row_blocks(g->cfg, ns, r - ns->s.row_offset, 1, &wn, &wl, &sn, &sl);
				memcpy(wn, wo, wl);
				if (sl)
					memcpy(sn, so, sl);
				rs__rowsum_stale(ns, r - ns->s.row_offset);
			}
		}
	}
}

rs_status rs_precopy_finish(rs_precopy *pc, rs_trainer **out, rs_reshard_stats *stats, rs_err *err)
{
	stager *g = &pc->g;
	int64_t zrounds = 0;
	double t0 = rs_now();
	*out = NULL;
	g->err = err;
	for (; pc->next < pc->rounds; pc->next++)
		RSCHECK(rs__stage_round(g, pc->next, pc->rounds));
	while (pc->passes > 0) /* the others ran them, or run them now */
		RSCHECK(pass(pc));
	RSCHECK(send_delta(g));
	double k0 = rs_now();
	if (g->old && g->nt) {
		recopy_kept(g);
		RSCHECK(rs__stage_kept(g, RS__MOVES_AT_PAUSE));
	}
	pc->stats.copy_s = rs_now() - k0; /* in the pause: the kept rows copied again, the ZCH tables kept */
	RSCHECK(rs__stage_chunks(g, RS__MOVES_AT_PAUSE, &zrounds));
	for (int64_t k = 0; k < zrounds; k++)
		RSCHECK(rs__stage_round(g, k, zrounds));
	RSCHECK(rs__stage_dense(g));
	pc->stats.rounds = (int)(pc->rounds + zrounds);
	pc->stats.move_s = rs_now() - t0;
	if (stats)
		*stats = pc->stats;
	*out = g->nt;
	g->nt = NULL;
	rs__dirty_stop(g->old); /* the old trainer may be committed away before pc is freed */
	g->old = NULL;
	/* the buffers that grew with the deltas sent while training: given back after the pause, with the old rows */
	rs__stage_close(g, *out ? rs__trainer_later(*out) : NULL); /* a leaver's: now */
	return RS_OK;
}

void rs_precopy_free(rs_precopy *pc)
{
	if (!pc)
		return;
	rs__dirty_stop(pc->g.old);
	rs__stage_close(&pc->g, NULL);
	free(pc);
}
