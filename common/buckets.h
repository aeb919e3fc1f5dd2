/*
 * buckets.h - which member owns which ZCH bucket, balanced, and changed as
 * little as possible when the world changes size.
 *
 * A ZCH table's slots are grouped into `nbuckets` buckets; a member (rank)
 * owns whole buckets. For any world size (not only divisors of nbuckets) the
 * assignment keeps bucket counts within one of each other (or, with per-bucket
 * loads, balances load), and when the world goes from N to M members it moves
 * the fewest buckets: the buckets of removed members, plus the fewest needed
 * to bring new or under-filled members up to their share.
 *
 * Members are named by their rank in the NEW world, 0..nmembers-1. The caller
 * translates the previous assignment into new ranks first, writing -1 for a
 * bucket whose owner left.
 */
#ifndef RS_BUCKETS_H
#define RS_BUCKETS_H

#include "common/status.h"

#include <stdint.h>

/*
 * Compute owner[b] for every bucket b < nbuckets over members 0..nmembers-1.
 *   prev:  previous owner of each bucket in new-world ranks (-1: no owner,
 *          e.g. its member was removed), or NULL for a fresh assignment
 *          (then buckets are dealt out as contiguous, balanced ranges).
 *   load:  optional per-bucket load (NULL: every bucket weighs 1).
 *   owner: output, nbuckets entries; may alias prev.
 * Deterministic. With load == NULL, counts differ by at most one and the
 * number of b with owner[b] != prev[b] equals rs_buckets_min_moves().
 * Returns RS_EINVAL for nbuckets == 0 or nmembers <= 0 (with err set),
 * RS_ENOMEM on allocation failure.
 */
rs_status rs_buckets_assign(uint32_t nbuckets, int32_t nmembers,
			    const int32_t *prev, const double *load,
			    int32_t *owner, rs_err *err);

/*
 * The fewest buckets any balanced (counts within one) assignment over
 * nmembers must move away from `prev`: the lower bound rs_buckets_assign()
 * meets. Used by the planner's min_moved_bytes and by tests.
 */
uint32_t rs_buckets_min_moves(uint32_t nbuckets, int32_t nmembers,
			      const int32_t *prev);

#endif
