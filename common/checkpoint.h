/*
 * checkpoint.h - rowshift checkpoints: a directory of safetensors files, one
 * per shard, plus index.json saying how they tile each table.
 *
 *   index.json  {"format": "rowshift-checkpoint", "version": 1, "step": S,
 *                "tables": [{"name", "rows", "dim", "dtype", "optimizer",
 *                            "shards": [{"file", "row_offset", "rows", "col_offset", "cols"}]}],
 *                "dense": {"file": "dense.safetensors", "params": N}}
 *   TABLE.rROW.cCOL.safetensors   "weight" [rows, cols] in the table's dtype;
 *                "momentum1" [rows] (row-wise Adagrad) or "exp_avg" and
 *                "exp_avg_sq" [rows, cols] (Adam); "zch_ids" [rows] (I64,
 *                -1 for a free slot) for ZCH tables
 *   dense.safetensors             "params" [N], the dense network, flat
 *
 * Every rank writes the files of the shards it holds (replica 0; rank 0 for
 * data-parallel tables) and rank 0 writes the index and the dense file.
 */
#ifndef RS_CHECKPOINT_H
#define RS_CHECKPOINT_H

#include "common/config.h"
#include "common/plan.h"
#include "common/status.h"

#include <jansson.h>

/* The largest index.json read (a million shards fit). */
#define RS_CHECKPOINT_INDEX_MAX_BYTES ((size_t)256 << 20)

/* The file name of the shard at (row_offset, col_offset) of table t (into buf). */
void rs_checkpoint_shard_file(const rs_table_config *t, const rs_shard *s, char *buf, size_t n);

/* Write dir/index.json for cfg and plan at `step` (rank 0). */
rs_status rs_checkpoint_write_index(const char *dir, const rs_config *cfg, const rs_plan *plan, int64_t step,
				    size_t dense_params, rs_err *err);

/*
 * Read dir/index.json and check its format: *index gets a new reference
 * (its "tables" as documented above) and *step the step it was taken at.
 * The tables are not checked against a config here: the reader of a shard
 * checks what it uses.
 */
rs_status rs_checkpoint_read_index(const char *dir, json_t **index, int64_t *step, rs_err *err);

/*
 * Compare two checkpoints table by table: per tensor (weights and the
 * optimizer state where both layouts allow) the largest absolute difference
 * and the relative one (that divided by the largest absolute value in A);
 * per table and overall, the largest of those. The checkpoints may shard
 * tables differently. RS_EINVAL, naming the table, when they hold different
 * tables, shapes or dtypes. *out: {"max_abs", "max_rel", "tables": {name:
 * {"max_abs", "max_rel", "tensors": {tensor: {"max_abs", "max_rel"}}}}}.
 */
rs_status rs_checkpoint_diff(const char *dir_a, const char *dir_b, json_t **out, rs_err *err);

#endif
