/*
 * reshard_internal.h - the staging machinery of a reshard (reshard.c) in
 * phases, shared with pre-copy (precopy.c): open a stager (the plan diff,
 * the new trainer), fill what this member keeps, fault in the shards that
 * receive rows, cut the moves into chunks and run the rounds, send the
 * dense network, close. rs_trainer_stage runs them all at once; pre-copy
 * runs the rounds of plain rows while training goes on, then the rest.
 */
#ifndef RS_RESHARD_INTERNAL_H
#define RS_RESHARD_INTERNAL_H

#include "worker/train_internal.h"
#include "common/plandiff.h"

/* A piece of one move: rows [first, first + count) of it, or for a ZCH table buckets. */
typedef struct chunk {
	int move;
	int64_t first, count;
	size_t bytes;     /* on the wire, without its CRC */
	uint64_t payload; /* rows with optimizer state and ZCH metadata, as the plan diff counts them */
} chunk;

typedef struct chunkq {
	chunk *c;
	size_t n, cap;
} chunkq;

/*
 * Which moves a phase handles: all of them; those pre-copy sends ahead
 * (plain sharded tables); those it sends at the pause: ZCH tables (their
 * identities change with every lookup) and data-parallel tables (one old
 * copy may feed several joiners, and a row's dirty mark is cleared by the
 * first of their sends).
 */
typedef enum { RS__MOVES_ALL, RS__MOVES_AHEAD, RS__MOVES_AT_PAUSE } rs__moves;

typedef struct stager {
	const rs_config *cfg;
	rs_trainer *old;            /* not modified, but for pre-copy's dirty marks and its freeing finished */
	rs_trainer *nt;
	const rs_reshard_spec *spec;
	int32_t me, nunion;
	rs_move *moves;
	int nmoves;
	int32_t *old_to_new;
	int precopy;                /* sending a plain chunk clears its rows' dirty marks */
	chunkq *sendq, *recvq;      /* per union peer: the chunks of the pair (me, peer) / (peer, me) */
	unsigned char **sbuf, **rbuf; /* per peer: ZCH chunks, serialized, and the pre-copy's deltas */
	size_t *scap, *rcap;
	uint32_t *scrc, *rcrc, *rsum; /* per peer: this round's CRC out, in (as sent), and of what arrived */
	uint64_t *sent, *total;     /* per peer: payload bytes sent so far, and in all */
	rs_xfer *sx, *rx;
	rs_reshard_stats *stats, own_stats;
	rs_err *err;
} stager;

/* Whether table t's moves are among RS__MOVES_AT_PAUSE. */
int rs__at_pause(const stager *g, int t);

/* Set up g for spec (checked): the plan diff and, for a member of the new world, its trainer (unfilled). */
rs_status rs__stage_open(stager *g, const rs_config *cfg, rs_trainer *old, const rs_reshard_spec *spec,
			 rs_reshard_stats *stats, rs_err *err);
/* Fill the new trainer with the rows this member keeps, of the tables `which` names. */
rs_status rs__stage_kept(stager *g, rs__moves which);
/* Fault in the pages of the new shards that receive rows. */
void rs__stage_populate(stager *g);
/* Cut the moves `which` names into chunks, queued per peer; *rounds: how many rounds carry them. */
rs_status rs__stage_chunks(stager *g, rs__moves which, int64_t *rounds);
/* Round k of the chunks queued: post, exchange over the union, verify. */
rs_status rs__stage_round(stager *g, int64_t k, int64_t rounds);
/* The dense network to the joining members; restored rows (partial recovery). */
rs_status rs__stage_dense(stager *g);
rs_status rs__stage_restore(stager *g);
/*
 * Free g (and the new trainer unless taken: set g->nt = NULL first), or
 * list its buffers on `later` (NULL: now; see rs__later in train_internal.h).
 */
void rs__stage_close(stager *g, rs__later *later);

/* The shard of trainer tr holding the whole rectangle of move m, or NULL. */
lshard *rs__move_shard(const rs_trainer *tr, const rs_move *m);
/* Whether old shard os and new shard ns share rows (same table and columns): [*r0, *r1), table rows. */
int rs__kept_rows(const lshard *os, const lshard *ns, int64_t *r0, int64_t *r1);
/* Whether kept rows [r0, r1) are the whole of new shard ns, which then shares the old memory (not ZCH: copied). */
static inline int rs__kept_whole(const lshard *ns, int64_t r0, int64_t r1)
{
	return r0 == ns->s.row_offset && r1 == ns->s.row_offset + ns->s.rows;
}
/* Bytes of one packed row of move m's columns: weights, then optimizer state. */
size_t rs__packed_row_bytes(const rs_config *cfg, const rs_move *m);

#endif
