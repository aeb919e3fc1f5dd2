/*
 * planner.h - computes a sharding plan for a config and a world, from
 * scratch or incrementally from the previous plan with as little movement as
 * balance allows.
 *
 * Shard costs and sizes come from the cost model (cost.h).
 *
 * Placement is deterministic: same config, world and previous plan give the
 * same plan on every machine.
 */
#ifndef RS_PLANNER_H
#define RS_PLANNER_H

#include "common/config.h"
#include "common/limits.h"
#include "common/plan.h"
#include "common/status.h"

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
 * Replanning between 2D worlds of the same sharding group S
 * (planner_groups.c): rs_planner_plan keeps prev's layout inside a group and
 * changes only the number of groups when rs_planner_same_groups(prev, world)
 * (same S, and either world has more than one group); rs_planner_replicate
 * is that plan: role l (the shards prev's rank l*R0 holds) on rank l*R + k
 * of every group k. The rank map decides what moves; the coordinator
 * chooses it with rs_planner_place_members so that members keep their role:
 * survivor i, previously rank old_rank[i] in a world of r0 groups of s,
 * gets rank out[i] in a world of n ranks in r1 groups; out[nsurv..n-1] are
 * the ranks left for the members that join, in order.
 */
int rs_planner_same_groups(const rs_plan *prev, const rs_world *world);
rs_status rs_planner_replicate(const rs_config *cfg, const rs_world *world, const rs_plan *prev,
			       const int32_t *prev_to_new, rs_plan **out, rs_err *err);
void rs_planner_place_members(int32_t r0, int32_t r1, int32_t s, const int32_t *old_rank, int32_t nsurv, int32_t n,
			      int32_t *out);

/*
 * The mapping rowshiftctl and the coordinator use: with `removed` == NULL,
 * previous ranks 0..min(N0, N)-1 keep their numbers and ranks >= N are
 * removed (a StatefulSet scaling); otherwise the listed previous ranks are
 * removed and survivors are renumbered 0.. in order. Writes n0 entries.
 */
rs_status rs_planner_rank_map(int32_t n0, int32_t n, const int32_t *removed, int nremoved,
			      int32_t *prev_to_new, rs_err *err);

#endif
