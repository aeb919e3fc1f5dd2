/*
 * plan.h - a sharding plan: where every row and column of every embedding
 * table lives, in a world of ranks. Produced by the planner (planner.h),
 * compared by the plan diff (plandiff.h), written and read as JSON so that
 * rowshiftctl, the coordinator and users exchange plans as files.
 *
 * A table is split into shards, each a rectangle of the table: rows
 * [row_offset, row_offset + rows) x columns [col_offset, col_offset + cols),
 * held by one rank. The sharding type says how the rectangles were cut:
 *   TW    one shard, the whole table
 *   CW    column blocks (multiples of 4 wide), each a whole-height shard
 *   RW    row ranges over all ranks of the (sharding) group
 *   TWRW  row ranges over the ranks of one node
 *   GRID  column blocks, each cut into row ranges over the ranks of a node
 *   DP    every rank holds the whole table
 * After an incremental replan a rank may hold several row ranges of one
 * RW/TWRW/GRID table (the rows it kept plus the rows it received).
 * A ZCH table is cut along bucket boundaries: its shards also carry a bucket
 * range, and row_offset/rows are the slots of those buckets.
 *
 * 2D layout (TorchRec DMPCollection): the world of W ranks is R replica
 * groups of S ranks (W = R * S). Group k holds ranks k, k + R, k + 2R, ...,
 * so the R replicas of a shard sit on the consecutive ranks l*R .. l*R+R-1,
 * which share a node when R divides ranks_per_node. Every shard appears once
 * per replica group, tagged with its replica index.
 */
#ifndef RS_PLAN_H
#define RS_PLAN_H

#include "common/config.h"
#include "common/shard.h"
#include "common/status.h"

#include <jansson.h>
#include <stdint.h>

typedef struct rs_table_plan {
	char *name;
	rs_sharding sharding;   /* resolved: never RS_SHARD_AUTO */
	int64_t rows;
	int32_t dim;
	uint64_t row_bytes;     /* bytes of one full-width row with optimizer state */
	rs_shard *shards;       /* sorted by (replica, col_offset, row_offset) */
	int nshards;
} rs_table_plan;

typedef struct rs_rank_load {
	uint64_t memory;        /* bytes of shards and their optimizer state */
	double cost;            /* estimated per-step cost, bytes-equivalent */
	int32_t nshards;
} rs_rank_load;

typedef struct rs_plan_summary {
	double plan_seconds;    /* time spent planning, measured in-process */
	double max_cost;        /* the most loaded rank's cost */
	double lower_bound;     /* no placement of these shards has a lower max */
	double imbalance;       /* max_cost / lower_bound (1.0 is perfect) */
	uint64_t moved_bytes;   /* bytes the plan diff from the previous plan moves */
	uint64_t min_moved_bytes; /* lower bound on moved_bytes for any balanced plan */
} rs_plan_summary;

typedef struct rs_plan {
	rs_world world;
	int ntables;            /* == the config's, same order */
	rs_table_plan *tables;
	rs_rank_load *ranks;    /* world.ranks entries */
	rs_plan_summary summary;
} rs_plan;

void rs_plan_free(rs_plan *plan);

/* Sort a table's shards into the canonical (replica, col_offset, row_offset) order. */
void rs_plan_sort_shards(rs_table_plan *tp);

/*
 * Check that plan is a complete plan for cfg: the same tables in the same
 * order with the same shapes; in every replica group each table's shards
 * cover every row and column exactly once (DP: every rank of the group holds
 * the whole table); no shard on a rank outside the world; ZCH shards aligned
 * to buckets. RS_EINVAL with a message naming the table and shard otherwise.
 */
rs_status rs_plan_validate(const rs_plan *plan, const rs_config *cfg, rs_err *err);

/* Recompute plan->ranks (memory, cost, shard counts) from the shards. */
rs_status rs_plan_compute_loads(rs_plan *plan, const rs_config *cfg);

/* The plan as JSON (see README, "Plan format"). Returns a new reference or NULL. */
json_t *rs_plan_to_json(const rs_plan *plan);

/*
 * Read a plan written by rs_plan_to_json and validate it against cfg.
 * `name` names the source in messages. On success *out owns a new plan.
 */
rs_status rs_plan_from_json(const json_t *root, const rs_config *cfg, const char *name,
			    rs_plan **out, rs_err *err);

/* The largest plan file read (rowshiftctl plan --previous). */
#define RS_PLAN_MAX_BYTES ((size_t)1 << 30)

/* Same from text (need not be NUL-terminated). */
rs_status rs_plan_parse(const char *buf, size_t len, const rs_config *cfg, const char *name,
			rs_plan **out, rs_err *err);

#endif
