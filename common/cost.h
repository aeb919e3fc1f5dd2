/*
 * cost.h - the planner's cost model: what a shard costs per training step
 * and how many bytes it occupies. The plan (plan.h) totals these per rank;
 * the planner (planner.h) balances them.
 *
 * Cost (bytes-equivalent per training step, for one shard of a table
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
 */
#ifndef RS_COST_H
#define RS_COST_H

#include "common/config.h"
#include "common/shard.h"

#include <stdint.h>

/* Bytes of ZCH bookkeeping per slot (raw ID and eviction metadata) that move with a row. */
#define RS_ZCH_SLOT_META_BYTES 16

/* Estimated per-step cost of one shard of table t cut as `sharding` in `world`. */
double rs_shard_cost(const rs_config *cfg, const rs_table_config *t, rs_sharding sharding,
		     const rs_world *world, const rs_shard *s);

/* Bytes a shard of table t occupies: rows x (cols x dtype + optimizer state), + ZCH metadata. */
uint64_t rs_shard_bytes(const rs_config *cfg, const rs_table_config *t, const rs_shard *s);

#endif
