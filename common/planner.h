/*
 * planner.h - computes a sharding plan for a config and a world, from
 * scratch or incrementally from the previous plan with as little movement as
 * balance allows.
 *
 * Cost model (bytes-equivalent per training step, for one shard of a table
 * with F features, pooling factor pf, global batch B, dtype size d; 2D
 * layouts use the per-replica-group batch B / R):
 *   lookup  = B * pf * F * (shard rows / table rows) * cols * d
 *   output  = B * F * cols * 4        pooled fp32 vectors leaving the shard
 *   cost    = 3 * lookup + 2 * output (forward read; backward read + write;
 *                                      forward output and its gradient back)
 * A data-parallel copy costs the lookups of the rank's own batch slice plus a
 * ring all-reduce of the table's gradient (2 * rows * cols * 4). Memory is
 * rows * (cols * d + optimizer state), plus the ZCH identity metadata.
 *
 * Placement is deterministic: same config, world and previous plan give the
 * same plan on every machine.
 */
#ifndef RS_PLANNER_H
#define RS_PLANNER_H

#include "common/config.h"
#include "common/plan.h"
#include "common/status.h"

#define RS_MAX_RANKS 65536

/* Bytes of ZCH bookkeeping per slot (raw ID and eviction metadata) that move with a row. */
#define RS_ZCH_SLOT_META_BYTES 16

/* Estimated per-step cost of one shard (see the cost model above). */
double rs_shard_cost(const rs_config *cfg, const rs_table_config *t, rs_sharding sharding,
		     const rs_world *world, const rs_shard *s);

/*
 * The world described by the config's cluster defaults for `ranks` ranks,
 * with overrides where the arguments are > 0.
 */
rs_world rs_world_make(const rs_config *cfg, int32_t ranks, int32_t ranks_per_node,
		       uint64_t memory_per_rank, int32_t sharding_group);

/*
 * Plan cfg's tables over `world`.
 *   prev:        the current plan, or NULL for a fresh plan.
 *   prev_to_new: with prev, prev->world.ranks entries: the new rank of each
 *                previous rank, or -1 where that member was removed. New
 *                ranks that no previous rank maps to are added members.
 * On success *out owns the new plan; its summary carries plan_seconds,
 * max_cost, lower_bound, imbalance and, with prev, moved_bytes (what the plan
 * diff moves) and min_moved_bytes (a lower bound for any balanced plan).
 * Errors (RS_EINVAL with err): a bad world, a pin to a rank outside the
 * world, a table or pinned set that fits no rank's memory, a prev that does
 * not match cfg.
 */
rs_status rs_planner_plan(const rs_config *cfg, const rs_world *world, const rs_plan *prev,
			  const int32_t *prev_to_new, rs_plan **out, rs_err *err);

/*
 * The mapping rowshiftctl and the coordinator use: with `removed` == NULL,
 * previous ranks 0..min(N0, N)-1 keep their numbers and ranks >= N are
 * removed (a StatefulSet scaling); otherwise the listed previous ranks are
 * removed and survivors are renumbered 0.. in order. Writes n0 entries.
 */
rs_status rs_planner_rank_map(int32_t n0, int32_t n, const int32_t *removed, int nremoved,
			      int32_t *prev_to_new, rs_err *err);

#endif
