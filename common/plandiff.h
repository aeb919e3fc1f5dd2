/*
 * plandiff.h - the moves that turn one plan into the next: which rectangle
 * of which table goes from which old rank to which new rank, and how many
 * bytes (rows with their optimizer state and ZCH metadata) that is.
 *
 * Old ranks are numbered in the previous plan's world, new ranks in the new
 * plan's; `old_to_new` says which old ranks survive as which new ranks
 * (rs_planner_rank_map). A rectangle a new rank already held under its old
 * number does not move. Removed ranks are still sources: they drain before
 * they leave. Where several old ranks hold a copy (data-parallel tables,
 * replicas), the source is a surviving copy, chosen round-robin by
 * destination so that the sending is spread. An old rank mapped to
 * RS_PLAN_LOST died with its rows: it sends nothing, and what it held comes
 * from another copy (a replica group's, or a data-parallel copy); rows with
 * no copy left are an RS_ENOTFOUND error naming them, or, restoring (partial
 * recovery), moves from RS_MOVE_RESTORE: the checkpoint.
 */
#ifndef RS_PLANDIFF_H
#define RS_PLANDIFF_H

#include "common/config.h"
#include "common/plan.h"
#include "common/status.h"

#define RS_PLAN_LOST (-2)
#define RS_MOVE_RESTORE (-1) /* a move's src: the rows come from the checkpoint, not from a rank */

typedef struct rs_move {
	int table;              /* index in the config */
	int32_t src;            /* old rank, or RS_MOVE_RESTORE */
	int32_t dst;            /* new rank */
	int64_t row_offset, rows;
	int32_t col_offset, cols;
	uint32_t bucket_offset, buckets; /* ZCH tables: the buckets moved (rows are their slots) */
	uint64_t bytes;
} rs_move;

/*
 * Compute the moves from `old` to `new` (both valid plans for cfg). On
 * success *moves is a malloc'd array of *nmoves moves (NULL when none),
 * sorted by (table, dst, col_offset, row_offset). The caller frees it.
 */
rs_status rs_plan_diff(const rs_config *cfg, const rs_plan *old, const rs_plan *new,
		       const int32_t *old_to_new, rs_move **moves, int *nmoves, rs_err *err);

/* The same, restoring (nonzero): rows lost with every copy are moves from RS_MOVE_RESTORE, no error. */
rs_status rs_plan_diff_restoring(const rs_config *cfg, const rs_plan *old, const rs_plan *new,
				 const int32_t *old_to_new, int restore, rs_move **moves, int *nmoves, rs_err *err);

/* The moves as JSON: {"moves": [...], "bytes": N}. A new reference or NULL. */
json_t *rs_moves_to_json(const rs_config *cfg, const rs_move *moves, int nmoves);

#endif
