/*
 * reshard.c - live resharding of a trainer (see train.h, "live resharding"):
 * phase one builds the new plan's trainer from the old one and the peers,
 * phase two swaps it in (the whole-model checksum the coordinator compares
 * across a reshard is checksum.c's).
 *
 * Staging, on each member of the union:
 *   1. the plan diff (common/plandiff.h) from the old world to the new one,
 *      with old ranks mapped to union ranks;
 *   2. rows this member keeps are copied from its old shards to its new ones;
 *   3. every move is cut into chunks of at most chunk_bytes (whole rows, or
 *      whole ZCH buckets), queued per (sender, receiver) pair in diff order;
 *      round k carries the k-th chunk of every pair, each as its bytes
 *      followed by their CRC-32C. Rows of a plain table go straight from
 *      the old shard's memory to the new shard's (a chunk of contiguous
 *      rows is its weights block, then its optimizer state block, which is
 *      also rs_emb_pack_rows' layout); ZCH buckets are serialized with
 *      their identities into one buffer per peer (rs_zch_bucket_save/_load).
 *      Both ends hash the bytes as they pass through the transport (over
 *      TCP a piece at a time while it is in cache; rs_xfer.crc), and the
 *      receiver checks every chunk's CRC before the round ends;
 *   4. joining members receive the dense network from old rank 0.
 * Every member computes the same diff, chunks and rounds, so each receive is
 * posted with exactly the length its sender sends. The steps are phases of
 * a stager (reshard_internal.h) that pre-copy (precopy.c) runs apart.
 */
#include "worker/reshard_internal.h"
#include "common/clock.h"
#include "common/cost.h"
#include "common/crc32c.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/plandiff.h"
#include "common/planner.h"
#include "common/rng.h"

#include <stdlib.h>
#include <string.h>

int rs_reshard_fault_for_tests;

size_t rs__packed_row_bytes(const rs_config *cfg, const rs_move *m)
{
	rs_emb_shard s = {.dtype = cfg->tables[m->table].dtype, .dim = m->cols};
	return rs_emb_packed_row_bytes(&s, cfg->optimizer.kind);
}

/* Either trainer: both know every table's ZCH geometry. */
static const rs_trainer *any_trainer(const stager *g) { return g->nt ? g->nt : g->old; }

static rs_status queue_push(chunkq *q, chunk c)
{
	RSCHECK(rs_grow(&q->c, &q->cap, q->n + 1, sizeof(*q->c)));
	q->c[q->n++] = c;
	return RS_OK;
}

typedef struct pair_count {
	int32_t src, dst;
	int64_t chunks;
} pair_count;

static int cmp_pair(const void *a, const void *b)
{
	const pair_count *x = a, *y = b;
	if (x->src != y->src)
		return x->src < y->src ? -1 : 1;
	return (x->dst > y->dst) - (x->dst < y->dst);
}

int rs__at_pause(const stager *g, int t)
{
	return any_trainer(g)->tables[t].zch != NULL || g->spec->new_plan->tables[t].sharding == RS_SHARD_DP;
}

/* Whether the moves of table t are among those `which` names. */
static int moves_of(const stager *g, rs__moves which, int t)
{
	return which == RS__MOVES_ALL || (which == RS__MOVES_AT_PAUSE) == rs__at_pause(g, t);
}

/*
 * Cut the moves `which` names into chunks; queue per pair those this
 * member sends or receives (replacing what was queued; their bytes are
 * added to the pair's total). *rounds gets the
 * most chunks any pair has: every member runs that many rounds (the
 * transport counts exchanges, and every member must make the same ones),
 * idle in the rounds it has nothing for.
 */
rs_status rs__stage_chunks(stager *g, rs__moves which, int64_t *rounds)
{
	const tinfo *tables = any_trainer(g)->tables;
	size_t chunk_bytes = g->spec->chunk_bytes ? g->spec->chunk_bytes : RS_RESHARD_CHUNK_BYTES;
	pair_count *pc = calloc((size_t)g->nmoves + 1, sizeof(*pc));
	if (!pc)
		return RS_ENOMEM;
	for (int32_t p = 0; p < g->nunion; p++) /* sent and total go on counting: progress never goes back */
		g->sendq[p].n = g->recvq[p].n = 0;
	rs_status st = RS_OK;
	for (int i = 0; st == RS_OK && i < g->nmoves; i++) {
		const rs_move *m = &g->moves[i];
		if (m->src == RS_MOVE_RESTORE || !moves_of(g, which, m->table))
			continue; /* from the checkpoint (rs__stage_restore), or another phase's */
		int32_t src = g->spec->union_of_old[m->src], dst = m->dst;
		const tinfo *ti = &tables[m->table];
		size_t rb = rs__packed_row_bytes(g->cfg, m);
		size_t unit = ti->zch ? rs_zch_bucket_bytes(ti->zch, rb) : rb; /* a bucket or a row */
		uint64_t unit_payload = ti->zch ? (uint64_t)ti->spb * (rb + RS_ZCH_SLOT_META_BYTES) : rb;
		int64_t units = ti->zch ? (int64_t)m->buckets : m->rows;
		int64_t per = unit ? (int64_t)(chunk_bytes / unit) : units;
		if (per < 1)
			per = 1;
		pc[i] = (pair_count){src, dst, (units + per - 1) / per};
		for (int64_t first = 0; st == RS_OK && first < units && (src == g->me || dst == g->me); first += per) {
			int64_t count = units - first < per ? units - first : per;
			chunk c = {i, first, count, (size_t)count * unit, (uint64_t)count * unit_payload};
			if (src == g->me)
				st = queue_push(&g->sendq[dst], c);
			if (st == RS_OK && dst == g->me)
				st = queue_push(&g->recvq[src], c);
		}
	}
	qsort(pc, (size_t)g->nmoves, sizeof(*pc), cmp_pair);
	*rounds = 0;
	for (int i = 0; i < g->nmoves;) {
		int64_t n = 0;
		int j = i;
		for (; j < g->nmoves && pc[j].src == pc[i].src && pc[j].dst == pc[i].dst; j++)
			n += pc[j].chunks;
		*rounds = n > *rounds ? n : *rounds;
		i = j;
	}
	free(pc);
	for (int32_t p = 0; st == RS_OK && p < g->nunion; p++)
		for (size_t q = 0; q < g->sendq[p].n; q++)
			g->total[p] += g->sendq[p].c[q].payload;
	return st;
}

lshard *rs__move_shard(const rs_trainer *tr, const rs_move *m)
{
	lshard *ls = rs__local_shard(tr, m->table, m->row_offset, m->col_offset);
	if (!ls || ls->s.col_offset != m->col_offset || ls->s.cols != m->cols ||
	    m->row_offset + m->rows > ls->s.row_offset + ls->s.rows)
		return NULL;
	return ls;
}

/* Serialize buckets [first, first + count) of ZCH move m from trainer tr into buf. */
static rs_status zch_pack(const rs_config *cfg, const rs_trainer *tr, const rs_move *m, int64_t first, int64_t count,
			  unsigned char *buf)
{
	const lshard *ls = rs__move_shard(tr, m);
	const tinfo *ti = &tr->tables[m->table];
	size_t rb = rs__packed_row_bytes(cfg, m), bb = rs_zch_bucket_bytes(ti->zch, rb), len;
	unsigned char *rows = malloc(rb * (size_t)ti->spb);
	int64_t *idx = malloc(sizeof(int64_t) * (size_t)ti->spb);
	rs_status st = ls && rows && idx ? RS_OK : ls ? RS_ENOMEM : RS_EINVAL;
	for (int64_t k = 0; st == RS_OK && k < count; k++) {
		uint32_t b = m->bucket_offset + (uint32_t)(first + k);
		for (int64_t i = 0; i < ti->spb; i++)
			idx[i] = (int64_t)b * ti->spb - ls->s.row_offset + i;
		st = rs_emb_pack_rows(&ls->emb, cfg->optimizer.kind, idx, ti->spb, rows, rb * (size_t)ti->spb);
		if (st == RS_OK)
			st = rs_zch_bucket_save(ti->zch, b, rows, rb, buf + (size_t)k * bb, bb, &len);
	}
	free(idx);
	free(rows);
	return st;
}

/* Load `count` serialized buckets of ZCH move m into trainer tr (identities and rows). */
static rs_status zch_unpack(const rs_config *cfg, rs_trainer *tr, const rs_move *m, int64_t count,
			    const unsigned char *buf, rs_err *err)
{
	lshard *ls = rs__move_shard(tr, m);
	tinfo *ti = &tr->tables[m->table];
	size_t rb = rs__packed_row_bytes(cfg, m), bb = rs_zch_bucket_bytes(ti->zch, rb);
	unsigned char *rows = malloc(rb * (size_t)ti->spb);
	int64_t *idx = malloc(sizeof(int64_t) * (size_t)ti->spb);
	rs_status st = ls && rows && idx ? RS_OK : ls ? RS_ENOMEM : RS_EINVAL;
	for (int64_t k = 0; st == RS_OK && k < count; k++) {
		uint32_t b;
		st = rs_zch_bucket_load(ti->zch, buf + (size_t)k * bb, bb, rows, rb, &b, err);
		if (st == RS_OK && (b < m->bucket_offset || b >= m->bucket_offset + m->buckets))
			st = rs_err_set(err, RS_ECORRUPT, "reshard: table '%s': bucket %u arrived outside its move",
					cfg->tables[m->table].name, b);
		for (int64_t i = 0; st == RS_OK && i < ti->spb; i++)
			idx[i] = (int64_t)b * ti->spb - ls->s.row_offset + i;
		if (st == RS_OK)
			st = rs_emb_unpack_rows(&ls->emb, cfg->optimizer.kind, idx, ti->spb, rows, rb * (size_t)ti->spb);
	}
	free(idx);
	free(rows);
	return st;
}

int rs__kept_rows(const lshard *os, const lshard *ns, int64_t *r0, int64_t *r1)
{
	*r0 = os->s.row_offset > ns->s.row_offset ? os->s.row_offset : ns->s.row_offset;
	*r1 = os->s.row_offset + os->s.rows < ns->s.row_offset + ns->s.rows ? os->s.row_offset + os->s.rows :
									      ns->s.row_offset + ns->s.rows;
	return os->table == ns->table && os->s.col_offset == ns->s.col_offset && *r0 < *r1;
}

/*
 * Copy into the new trainer every rectangle it shares with the old one (the
 * rows this member keeps) of the tables `which` names.
 */
rs_status rs__stage_kept(stager *g, rs__moves which)
{
	const rs_config *cfg = g->cfg;
	const rs_trainer *old = g->old;
	rs_trainer *nt = g->nt;
	for (int i = 0; i < nt->nshards; i++) {
		lshard *ns = &nt->shards[i];
		for (int k = 0; k < old->nshards; k++) {
			const lshard *os = &old->shards[k];
			int64_t r0, r1;
			if (!rs__kept_rows(os, ns, &r0, &r1) || !moves_of(g, which, os->table))
				continue;
			const tinfo *ti = &old->tables[os->table];
			if (!ti->zch && rs__kept_whole(ns, r0, r1)) {
				/* the whole new shard is kept: it shares the old memory, nothing is copied */
				void *w, *st;
				size_t wl, sl;
				rs__row_blocks(cfg, os, r0 - os->s.row_offset, r1 - r0, &w, &wl, &st, &sl);
				rs__mem_unref(ns->wmem);
				rs__mem_unref(ns->smem);
				ns->wmem = os->wmem, ns->smem = os->smem;
				ns->wmem->refs++;
				if (ns->smem)
					ns->smem->refs++;
				ns->emb.weights = w;
				ns->emb.state = st;
				rs__rowsums_share(ns, os, r0 - os->s.row_offset);
				g->stats->kept_bytes += wl + sl;
				continue;
			}
			if (!ti->zch) {
				void *wo, *so, *wn, *sn;
				size_t wl, sl;
				rs__row_blocks(cfg, os, r0 - os->s.row_offset, r1 - r0, &wo, &wl, &so, &sl);
				rs__row_blocks(cfg, ns, r0 - ns->s.row_offset, r1 - r0, &wn, &wl, &sn, &sl);
				memcpy(wn, wo, wl);
				if (sl)
					memcpy(sn, so, sl);
				rs__rowsums_stale(ns, r0 - ns->s.row_offset, r1 - r0);
				g->stats->kept_bytes += wl + sl;
				continue;
			}
			/* ZCH buckets: through their serialized form, which carries the identities */
			rs_move keep = {.table = os->table, .src = g->me, .dst = g->me, .row_offset = r0, .rows = r1 - r0,
					.col_offset = os->s.col_offset, .cols = os->s.cols,
					.bucket_offset = (uint32_t)(r0 / ti->spb), .buckets = (uint32_t)((r1 - r0) / ti->spb)};
			size_t bb = rs_zch_bucket_bytes(ti->zch, rs__packed_row_bytes(cfg, &keep));
			unsigned char *buf = malloc(bb);
			rs_status st = buf ? RS_OK : RS_ENOMEM;
			for (uint32_t b = 0; st == RS_OK && b < keep.buckets; b++) {
				rs_move one = keep;
				one.bucket_offset = keep.bucket_offset + b;
				one.buckets = 1;
				one.row_offset = (int64_t)one.bucket_offset * ti->spb;
				one.rows = ti->spb;
				st = zch_pack(cfg, old, &one, 0, 1, buf);
				if (st == RS_OK)
					st = zch_unpack(cfg, nt, &one, 1, buf, g->err);
			}
			free(buf);
			if (st != RS_OK)
				return st;
			g->stats->kept_bytes += (uint64_t)keep.buckets * bb;
		}
	}
	return RS_OK;
}

/*
 * Each checkpoint file holding rows of this member's restore moves passes
 * its checksum, once (several moves may read one file).
 */
static rs_status verify_restore_files(const stager *g, const rs_ckpt_index *ix)
{
	const char **seen = calloc((size_t)g->nmoves + 1, sizeof(char *));
	int nseen = 0;
	rs_status st = seen ? RS_OK : RS_ENOMEM;
	for (int i = 0; st == RS_OK && i < g->nmoves; i++) {
		const rs_move *m = &g->moves[i];
		const rs_ckpt_table *ct = rs_checkpoint_index_table(ix, g->cfg->tables[m->table].name);
		if (m->src != RS_MOVE_RESTORE || m->dst != g->me || !ct)
			continue; /* no table: rs__trainer_restore names it */
		for (int k = 0; st == RS_OK && k < ct->nshards; k++) {
			const rs_ckpt_shard *cs = &ct->shards[k];
			int dup = 0;
			if (cs->row_offset >= m->row_offset + m->rows || cs->row_offset + cs->rows <= m->row_offset ||
			    cs->col_offset >= m->col_offset + m->cols || cs->col_offset + cs->cols <= m->col_offset)
				continue;
			for (int q = 0; q < nseen && !dup; q++)
				dup = !strcmp(seen[q], cs->file);
			if (dup)
				continue;
			if (nseen < g->nmoves) /* past that many: checked again, which is only slower */
				seen[nseen++] = cs->file;
			st = rs_checkpoint_verify_file(g->spec->restore, cs->file, &cs->sum, g->err);
		}
	}
	free(seen);
	return st;
}

/*
 * Partial recovery: the rows of this member's moves from the checkpoint
 * (lost with every copy), loaded into the new shards after the rounds (no
 * peer waits on this member meanwhile); the counted ones' checksum into
 * spec->restored.
 */
rs_status rs__stage_restore(stager *g)
{
	rs_ckpt_index ix;
	int have = 0;
	rs_status st = RS_OK;
	for (int i = 0; st == RS_OK && i < g->nmoves; i++) {
		const rs_move *m = &g->moves[i];
		if (m->src != RS_MOVE_RESTORE || m->dst != g->me)
			continue;
		const lshard *ls = rs__move_shard(g->nt, m);
		if (!ls) {
			st = rs_err_set(g->err, RS_EINVAL, "reshard: table '%s': rows %lld..%lld to restore are not one shard's",
					g->cfg->tables[m->table].name, (long long)m->row_offset,
					(long long)(m->row_offset + m->rows - 1));
			break;
		}
		if (!have) {
			if ((st = rs_checkpoint_index_read(g->spec->restore, &ix, g->err)) != RS_OK)
				break;
			have = 1;
			if ((st = verify_restore_files(g, &ix)) != RS_OK)
				break;
		}
		st = rs__trainer_restore(g->nt, ls, g->spec->restore, &ix, m->row_offset, m->row_offset + m->rows, 0,
					 g->err);
		if (st != RS_OK)
			break;
		g->stats->restored_rows += m->rows;
		if (g->spec->restored && rs__counted(g->nt, (int)(ls - g->nt->shards)))
			g->spec->restored[m->table] += rs__rows_sum(g->nt, ls, m->row_offset - ls->s.row_offset, m->rows);
	}
	if (have)
		rs_checkpoint_index_free(&ix);
	return st;
}

/*
 * The weights and state blocks that plain chunk c covers in tr's shard of
 * its move (the old trainer's for a sender, the new one's for a receiver).
 */
static rs_status chunk_blocks(const stager *g, const rs_trainer *tr, const chunk *c, void **w, size_t *wl, void **s,
			      size_t *sl)
{
	const rs_move *m = &g->moves[c->move];
	const lshard *ls = rs__move_shard(tr, m);
	if (!ls)
		return rs_err_set(g->err, RS_EINVAL, "reshard: rank %d holds no %s shard for rows %lld.. of table '%s'", g->me,
				  tr == g->old ? "old" : "new", (long long)m->row_offset, g->cfg->tables[m->table].name);
	rs__row_blocks(g->cfg, ls, m->row_offset - ls->s.row_offset + c->first, c->count, w, wl, s, sl);
	return RS_OK;
}

/*
 * Post this member's sends of round k: per receiver its k-th chunk, then its
 * CRC, which the transport computes as the bytes go out (rs_xfer.crc).
 */
static rs_status post_sends(stager *g, int64_t k, int *ns)
{
	const rs_config *cfg = g->cfg;
	for (int32_t d = 0; d < g->nunion; d++) {
		if ((size_t)k >= g->sendq[d].n)
			continue;
		const chunk *c = &g->sendq[d].c[k];
		const rs_move *m = &g->moves[c->move];
		uint32_t *crc = &g->scrc[d];
		*crc = 0;
		if (g->old->tables[m->table].zch) {
			RSCHECK(rs_grow(&g->sbuf[d], &g->scap[d], c->bytes, 1));
			RSCHECK(zch_pack(cfg, g->old, m, c->first, c->count, g->sbuf[d]));
			g->sx[(*ns)++] = (rs_xfer){d, g->sbuf[d], c->bytes, crc};
		} else {
			void *w, *s;
			size_t wl, sl;
			RSCHECK(chunk_blocks(g, g->old, c, &w, &wl, &s, &sl));
			if (g->precopy) { /* sent as they are now: a later update marks them again */
				lshard *ls = rs__move_shard(g->old, m);
				rs__dirty_clear(ls, m->row_offset - ls->s.row_offset + c->first, c->count);
			}
			g->sx[(*ns)++] = (rs_xfer){d, w, wl, crc};
			if (sl)
				g->sx[(*ns)++] = (rs_xfer){d, s, sl, crc};
		}
		g->sx[(*ns)++] = (rs_xfer){d, crc, 4, NULL};
		g->sent[d] += c->payload;
		g->stats->sent_bytes += c->payload;
		g->stats->wire_bytes += c->bytes + 4;
		g->stats->chunks_sent++;
	}
	return RS_OK;
}

/*
 * Post this member's receives of round k, straight into the new shards where
 * the rows are plain, each hashed as it lands, then the sender's CRC.
 */
static rs_status post_recvs(stager *g, int64_t k, int *nr)
{
	for (int32_t s = 0; s < g->nunion; s++) {
		if ((size_t)k >= g->recvq[s].n)
			continue;
		const chunk *c = &g->recvq[s].c[k];
		const rs_move *m = &g->moves[c->move];
		uint32_t *sum = &g->rsum[s];
		*sum = 0;
		if (g->nt->tables[m->table].zch) {
			RSCHECK(rs_grow(&g->rbuf[s], &g->rcap[s], c->bytes, 1));
			g->rx[(*nr)++] = (rs_xfer){s, g->rbuf[s], c->bytes, sum};
		} else {
			void *w, *st;
			size_t wl, sl;
			RSCHECK(chunk_blocks(g, g->nt, c, &w, &wl, &st, &sl));
			g->rx[(*nr)++] = (rs_xfer){s, w, wl, sum};
			if (sl)
				g->rx[(*nr)++] = (rs_xfer){s, st, sl, sum};
		}
		g->rx[(*nr)++] = (rs_xfer){s, &g->rcrc[s], 4, NULL};
	}
	if (*nr && rs_reshard_fault_for_tests == 1) { /* once per process: the next attempt goes through */
		rs_reshard_fault_for_tests = 0;
		rs_transport_damage_for_tests = 1; /* this round's first chunk lands damaged, before it is hashed */
	}
	return RS_OK;
}

/* Check every chunk received in round k against the CRC it came with, then load the ZCH ones. */
static rs_status verify_recvs(stager *g, int64_t k)
{
	const rs_config *cfg = g->cfg;
	for (int32_t s = 0; s < g->nunion; s++) {
		if ((size_t)k >= g->recvq[s].n)
			continue;
		const chunk *c = &g->recvq[s].c[k];
		const rs_move *m = &g->moves[c->move];
		int zch = g->nt->tables[m->table].zch != NULL;
		if (g->rsum[s] != g->rcrc[s]) {
			int64_t r0 = zch ? (int64_t)(m->bucket_offset + (uint32_t)c->first) * any_trainer(g)->tables[m->table].spb
					 : m->row_offset + c->first;
			int64_t n = zch ? c->count * any_trainer(g)->tables[m->table].spb : c->count;
			return rs_err_set(g->err, RS_ECORRUPT,
					  "reshard: table '%s' rows %lld..%lld from rank %d: checksum mismatch (chunk %lld)",
					  cfg->tables[m->table].name, (long long)r0, (long long)(r0 + n - 1), s, (long long)k);
		}
		if (zch) {
			RSCHECK(zch_unpack(cfg, g->nt, m, c->count, g->rbuf[s], g->err));
		} else { /* pre-copy: hashed while the rows are at hand */
			lshard *ns = rs__move_shard(g->nt, m);
			int64_t r0 = ns ? m->row_offset - ns->s.row_offset + c->first : 0;
			if (ns && ns->rsum) {
				rs__rowsums_stale(ns, r0, c->count);
				rs__rowsums_fill(g->nt, ns, r0, c->count, c->count);
			}
		}
		g->stats->recv_bytes += c->payload;
		g->stats->chunks_recv++;
	}
	return RS_OK;
}

/*
 * Joining members get the dense network and the update count from the
 * member that was old rank 0, with a CRC-32C over both like every chunk of
 * rows (a damaged copy fails the staging, so the attempt aborts); the
 * others take part in the (empty) exchange.
 */
rs_status rs__stage_dense(stager *g)
{
	int32_t nold = g->spec->old_plan->world.ranks, from = -1;
	for (int32_t r = 0; r < nold && from < 0; r++) /* the first old member alive: every one has the network */
		from = g->spec->union_of_old[r];
	int32_t nnew = g->spec->new_plan->world.ranks;
	size_t dn = rs_dense_nparams(any_trainer(g)->dense);
	size_t body = sizeof(float) * dn + sizeof(int64_t), bytes = body + sizeof(uint32_t);
	unsigned char *buf = malloc(bytes);
	int n = 0;
	rs_status st = buf ? RS_OK : RS_ENOMEM;
	char *joining = calloc((size_t)g->nunion, 1);
	if (!joining)
		st = RS_ENOMEM;
	for (int32_t u = 0; st == RS_OK && u < nnew; u++)
		joining[u] = 1;
	for (int32_t r = 0; st == RS_OK && r < nold; r++)
		if (g->spec->union_of_old[r] >= 0)
			joining[g->spec->union_of_old[r]] = 0;
	if (st == RS_OK && g->old && g->nt) {
		memcpy(rs_dense_params(g->nt->dense), rs_dense_params(g->old->dense), sizeof(float) * dn);
		g->nt->updates = g->old->updates;
	}
	if (st == RS_OK && g->me == from) {
		memcpy(buf, rs_dense_params(g->old->dense), sizeof(float) * dn);
		memcpy(buf + sizeof(float) * dn, &g->old->updates, sizeof(int64_t));
		uint32_t crc = rs_crc32c(0, buf, body);
		memcpy(buf + body, &crc, sizeof(crc));
		for (int32_t u = 0; u < g->nunion; u++)
			if (joining[u]) {
				g->sx[n++] = (rs_xfer){u, buf, bytes, NULL};
				g->stats->wire_bytes += bytes;
			}
		st = rs_transport_exchange(g->spec->uni, g->sx, n, NULL, 0);
	} else if (st == RS_OK && joining[g->me]) {
		g->rx[0] = (rs_xfer){from, buf, bytes, NULL};
		st = rs_transport_exchange(g->spec->uni, NULL, 0, g->rx, 1);
		uint32_t crc;
		memcpy(&crc, buf + body, sizeof(crc));
		if (rs_reshard_fault_for_tests == 2) {
			rs_reshard_fault_for_tests = 0;
			buf[body / 2] ^= 0x40;
		}
		if (st == RS_OK && crc != rs_crc32c(0, buf, body)) {
			free(joining);
			free(buf);
			return rs_err_set(g->err, RS_ECORRUPT, "reshard: the dense network from union rank %d failed its CRC-32C",
					  from);
		}
		if (st == RS_OK) {
			memcpy(rs_dense_params(g->nt->dense), buf, sizeof(float) * dn);
			memcpy(&g->nt->updates, buf + sizeof(float) * dn, sizeof(int64_t));
		}
	} else if (st == RS_OK) {
		st = rs_transport_exchange(g->spec->uni, NULL, 0, NULL, 0); /* every member counts the exchange */
	}
	if (st != RS_OK && st != RS_ENOMEM)
		rs_err_set(g->err, st, "reshard: the dense network: %s", rs_transport_error(g->spec->uni));
	free(joining);
	free(buf);
	return st;
}

/* Validate the spec: the union holds the new world first, and every old member once. */
static rs_status check_spec(const rs_reshard_spec *sp, int have_old, rs_err *err)
{
	int32_t nold = sp->old_plan->world.ranks, nnew = sp->new_plan->world.ranks, nu = sp->uni->world;
	int32_t me = sp->uni->rank;
	if (nu < nnew || (me < nnew) != (sp->train_t != NULL) || (sp->train_t && sp->train_t->world != nnew))
		return rs_err_set(err, RS_EINVAL, "reshard: union of %d for a new world of %d (rank %d)", nu, nnew, me);
	int is_old = 0, alive = 0;
	for (int32_t r = 0; r < nold; r++) {
		int32_t u = sp->union_of_old[r];
		if (u == -1)
			continue; /* lost: its rows come from their other copies */
		alive++;
		if (u < 0 || u >= nu)
			return rs_err_set(err, RS_EINVAL, "reshard: old rank %d has no place in the union", r);
		for (int32_t q = 0; q < r; q++)
			if (sp->union_of_old[q] == u)
				return rs_err_set(err, RS_EINVAL, "reshard: old ranks %d and %d are one member", q, r);
		is_old |= u == me;
	}
	for (int32_t u = nnew; u < nu; u++) {
		int old = 0;
		for (int32_t r = 0; r < nold; r++)
			old |= sp->union_of_old[r] == u;
		if (!old)
			return rs_err_set(err, RS_EINVAL, "reshard: union rank %d leaves but was never a member", u);
	}
	if (!alive)
		return rs_err_set(err, RS_EINVAL, "reshard: every old member is lost");
	if (is_old != have_old)
		return rs_err_set(err, RS_EINVAL, "reshard: rank %d %s an old model", me, have_old ? "should not have" : "needs");
	return RS_OK;
}

rs_status rs__stage_open(stager *g, const rs_config *cfg, rs_trainer *old, const rs_reshard_spec *spec,
			 rs_reshard_stats *stats, rs_err *err)
{
	rs__later_wait(old); /* the last commit's leftovers first: the old model is never held beside two newer */
	*g = (stager){.cfg = cfg, .old = old, .spec = spec, .err = err};
	g->stats = stats ? stats : &g->own_stats;
	int32_t nold = spec->old_plan->world.ranks;
	memset(g->stats, 0, sizeof(*g->stats));
	RSCHECK(check_spec(spec, old != NULL, err));
	g->me = spec->uni->rank;
	g->nunion = spec->uni->world;
	size_t nu = (size_t)g->nunion;
	g->old_to_new = malloc(sizeof(int32_t) * (size_t)nold);
	g->sendq = calloc(nu, sizeof(chunkq));
	g->recvq = calloc(nu, sizeof(chunkq));
	g->sbuf = calloc(nu, sizeof(*g->sbuf));
	g->rbuf = calloc(nu, sizeof(*g->rbuf));
	g->scap = calloc(nu, sizeof(size_t));
	g->rcap = calloc(nu, sizeof(size_t));
	g->scrc = calloc(nu, sizeof(uint32_t));
	g->rcrc = calloc(nu, sizeof(uint32_t));
	g->rsum = calloc(nu, sizeof(uint32_t));
	g->sent = calloc(nu, sizeof(uint64_t));
	g->total = calloc(nu, sizeof(uint64_t));
	g->sx = calloc(3 * nu + 1, sizeof(rs_xfer));
	g->rx = calloc(3 * nu + 1, sizeof(rs_xfer));
	if (!g->old_to_new || !g->sendq || !g->recvq || !g->sbuf || !g->rbuf || !g->scap || !g->rcap || !g->scrc ||
	    !g->rcrc || !g->rsum || !g->sent || !g->total || !g->sx || !g->rx)
		return RS_ENOMEM;
	for (int32_t r = 0; r < nold; r++) {
		int32_t u = spec->union_of_old[r];
		g->old_to_new[r] = u == -1 ? RS_PLAN_LOST : u < spec->new_plan->world.ranks ? u : -1;
	}
	RSCHECK(rs_plan_diff_restoring(cfg, spec->old_plan, spec->new_plan, g->old_to_new, spec->restore != NULL,
				       &g->moves, &g->nmoves, err));
	if (spec->restored)
		memset(spec->restored, 0, sizeof(uint64_t) * (size_t)cfg->ntables);
	/* the new shards need no initial values: every row is kept or received */
	if (spec->train_t)
		RSCHECK(rs__trainer_alloc(cfg, spec->new_plan, spec->train_t,
					  spec->engine ? spec->engine : old ? old->engine : NULL, old ? old->data : NULL, 0,
					  &g->nt, err));
	return RS_OK;
}

void rs__stage_populate(stager *g)
{
	/* the shards that receive rows: their pages in at once, not one fault at a time inside recv */
	for (int i = 0; g->nt && i < g->nt->nshards; i++) {
		lshard *ls = &g->nt->shards[i];
		if (ls->wmem->refs == 1 && ls->emb.weights == ls->wmem->base) {
			rs__mem_populate(ls->wmem);
			if (ls->smem)
				rs__mem_populate(ls->smem);
		}
	}
}

rs_status rs__stage_round(stager *g, int64_t k, int64_t rounds)
{
	int ns = 0, nr = 0;
	rs_status st;
	RSCHECK(post_sends(g, k, &ns));
	RSCHECK(post_recvs(g, k, &nr));
	if ((st = rs_transport_exchange(g->spec->uni, g->sx, ns, g->rx, nr)) != RS_OK)
		return rs_err_set(g->err, st, "reshard: moving rows (round %lld of %lld): %s", (long long)k + 1,
				  (long long)rounds, rs_transport_error(g->spec->uni));
	RSCHECK(verify_recvs(g, k));
	if (g->spec->progress)
		g->spec->progress(g->spec->progress_ctx, g->sent, g->total, g->nunion);
	return RS_OK;
}

void rs__stage_close(stager *g, rs__later *later)
{
	for (int32_t p = 0; p < g->nunion; p++) {
		if (g->sendq)
			rs__later_free(later, g->sendq[p].c);
		if (g->recvq)
			rs__later_free(later, g->recvq[p].c);
		if (g->sbuf)
			rs__later_free(later, g->sbuf[p]);
		if (g->rbuf)
			rs__later_free(later, g->rbuf[p]);
	}
	void *arrays[] = {g->sendq, g->recvq, g->sbuf, g->rbuf, g->scap,  g->rcap,  g->scrc,
			  g->rcrc,  g->rsum,  g->sent, g->total, g->sx, g->rx, g->moves, g->old_to_new};
	for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++)
		rs__later_free(later, arrays[i]);
	rs_trainer_destroy(g->nt);
	*g = (stager){0}; /* closed: closing again does nothing */
}

rs_status rs_trainer_stage(const rs_config *cfg, const rs_trainer *old, const rs_reshard_spec *spec,
			   rs_trainer **out, rs_reshard_stats *stats, rs_err *err)
{
	stager g;
	int64_t rounds = 0;
	rs_status st;
	*out = NULL;
	/* old's rows are only read: the dirty marks pre-copy clears are off here (g.precopy == 0); its last commit's
	 * freeing is finished first (rs__stage_open) */
	RSCHECKGOTO(rs__stage_open(&g, cfg, (rs_trainer *)old, spec, stats, err), st, out);
	double t0 = rs_now();
	if (old && g.nt)
		RSCHECKGOTO(rs__stage_kept(&g, RS__MOVES_ALL), st, out);
	rs__stage_populate(&g);
	double t1 = rs_now();
	g.stats->copy_s = t1 - t0;
	RSCHECKGOTO(rs__stage_chunks(&g, RS__MOVES_ALL, &rounds), st, out);
	for (int64_t k = 0; k < rounds; k++)
		RSCHECKGOTO(rs__stage_round(&g, k, rounds), st, out);
	g.stats->rounds = (int)rounds;
	RSCHECKGOTO(rs__stage_dense(&g), st, out);
	if (g.nt && spec->restore)
		RSCHECKGOTO(rs__stage_restore(&g), st, out);
	g.stats->move_s = rs_now() - t1;
	*out = g.nt;
	g.nt = NULL;
out:
	if (st != RS_OK && err && !err->msg[0])
		rs_err_set(err, st, "reshard: %s", rs_status_str(st));
	rs__stage_close(&g, NULL);
	return st;
}

int rs__mem_used(const rs_trainer *tr, const rs__mem *m, char **lo_out, char **hi_out)
{
	char *lo = NULL, *hi = NULL;
	for (int i = 0; i < tr->nshards; i++) {
		const lshard *ls = &tr->shards[i];
		char *b = NULL, *e = NULL;
		void *w, *st;
		size_t wl, sl;
		rs__row_blocks(tr->cfg, ls, 0, ls->s.rows, &w, &wl, &st, &sl);
		if (ls->wmem == m)
			b = w, e = b + wl;
		else if (ls->smem == m)
			b = st, e = b + sl;
		if (!b)
			continue;
		lo = !lo || b < lo ? b : lo;
		hi = !hi || e > hi ? e : hi;
	}
	*lo_out = lo, *hi_out = hi;
	return lo != NULL;
}

/* The parts of block m that no shard of tr uses any more (the rows that moved away), to give back later. */
static void unused_spans(const rs_trainer *tr, rs__mem *m, rs__later *later)
{
	char *lo, *hi, *base = m->base;
	if (!rs__mem_used(tr, m, &lo, &hi))
		return;
	if (lo > base)
		rs__later_release(later, m->engine, base, (size_t)(lo - base));
	if (hi < base + m->len)
		rs__later_release(later, m->engine, hi, (size_t)(base + m->len - hi));
}

/* Whether a shard of tr before shard i holds block m. */
static int block_seen(const rs_trainer *tr, int i, const rs__mem *m)
{
	for (int k = 0; k < i; k++)
		if (tr->shards[k].wmem == m || tr->shards[k].smem == m)
			return 1;
	return 0;
}

void rs_trainer_commit(rs_trainer *staged, rs_trainer *old)
{
	if (old && staged && !staged->owns_data && staged->data == old->data) {
		staged->owns_data = old->owns_data;
		old->owns_data = 0;
	}
	if (old && staged)
		rs__trainer_take_buffers(staged, old);
	/* what the pause need not wait for: the old trainer's and the hashes' memory, the moved rows' pages */
	rs__later *later = staged ? rs__trainer_later(staged) : NULL;
	if (staged)
		staged->pending = NULL; /* started below */
	rs__trainer_destroy_later(old, later);
	rs__rowsums_drop_later(staged, later); /* training goes on without marking rows: the hashes would go stale */
	if (staged)
		staged->on_host = 1; /* the rows were copied and received by the host */
	/*
	 * memory the new shards share with the old ones: the parts that held
	 * moved rows go back to the system (each block once; a block of the new
	 * trainer's own has no such parts)
	 */
	for (int i = 0; staged && i < staged->nshards; i++) {
		lshard *ls = &staged->shards[i];
		if (ls->wmem && !block_seen(staged, i, ls->wmem))
			unused_spans(staged, ls->wmem, later);
		if (ls->smem && !block_seen(staged, i, ls->smem))
			unused_spans(staged, ls->smem, later);
	}
	if (staged)
		rs__later_start(later, staged);
}
