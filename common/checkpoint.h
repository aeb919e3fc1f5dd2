/*
 * checkpoint.h - rowshift checkpoints: a directory of safetensors files, one
 * per shard, plus index.json saying how they tile each table.
 *
 *   index.json  {"format": "rowshift-checkpoint", "version": 1, "step": S,
 *                "tables": [{"name", "rows", "dim", "dtype", "optimizer",
 *                            "shards": [{"file", "row_offset", "rows", "col_offset", "cols",
 *                                        "crc32c"?, "bytes"?}]}],
 *                "dense": {"file": "dense.safetensors", "params": N, "crc32c"?, "bytes"?}}
 *                (a periodic checkpoint's index carries every file's CRC-32C and
 *                size; a reader checks them before it uses the file)
 *   TABLE.rROW.cCOL.safetensors   "weight" [rows, cols] in the table's dtype;
 *                "momentum1" [rows] (row-wise Adagrad) or "exp_avg" and
 *                "exp_avg_sq" [rows, cols] (Adam); "zch_ids" [rows] (I64,
 *                -1 for a free slot) and "zch_meta" [rows, 3] (U32: last
 *                step seen + 1, LFU count, the bucket's decay epoch; see
 *                kernels/zch.h) for ZCH tables
 *   dense.safetensors             "params" [N], the dense network, flat
 *
 * Every rank writes the files of the shards it holds (replica 0; rank 0 for
 * data-parallel tables) and rank 0 writes the index and the dense file.
 */
#ifndef RS_CHECKPOINT_H
#define RS_CHECKPOINT_H

#include "common/config.h"
#include "common/plan.h"
#include "common/proto.h"
#include "common/status.h"

#include <jansson.h>

/* The largest index.json read (a million shards fit). */
#define RS_CHECKPOINT_INDEX_MAX_BYTES ((size_t)256 << 20)

/* The file name of the shard at (row_offset, col_offset) of table t (into buf). */
void rs_checkpoint_shard_file(const rs_table_config *t, const rs_shard *s, char *buf, size_t n);

/*
 * Write dir/index.json for cfg and plan at `step` (atomically, fsynced; last,
 * after every file it names is in place). sums (NULL: none) gives each
 * file's checksum: {file: {"crc32c", "bytes"}}, and must then name every
 * file the index does (RS_EINVAL naming the one missing).
 */
rs_status rs_checkpoint_write_index(const char *dir, const rs_config *cfg, const rs_plan *plan, int64_t step,
				    size_t dense_params, const json_t *sums, rs_err *err);

/* Add n files' checksums, as a rank reports them, to sums (that form); RS_ENOMEM. */
rs_status rs_checkpoint_sums_add(json_t *sums, const rs_ckpt_file_report *files, int n);

/*
 * Remove dir/index.json, if there is one (RS_EIO naming it when it stays).
 * A directory is complete when it holds its index, written last: an index
 * already there (an earlier run's, or an earlier save's) goes before the
 * files it names are replaced, so the directory is never taken for
 * complete, nor loaded, while it mixes the two.
 */
rs_status rs_checkpoint_drop_index(const char *dir, rs_err *err);

/* A file's checksum as an index gives it (periodic checkpoints have them). */
typedef struct rs_ckpt_sum {
	int has;
	uint32_t crc32c;        /* of the whole file (rs_crc32c from 0) */
	int64_t bytes;
} rs_ckpt_sum;

/*
 * Whether dir/file is what sum says (a no-op without one): RS_ECORRUPT naming
 * the file when its size or CRC-32C differ (a torn or damaged file).
 */
rs_status rs_checkpoint_verify_file(const char *dir, const char *file, const rs_ckpt_sum *sum, rs_err *err);

/* A checkpoint's index, validated: what it says is safe to act on. */
typedef struct rs_ckpt_shard {
	char *file;             /* a plain file name in the checkpoint's directory: no '/', not hidden */
	int64_t row_offset, rows;
	int32_t col_offset, cols;
	rs_ckpt_sum sum;
} rs_ckpt_shard;

typedef struct rs_ckpt_table {
	char *name;             /* a valid table name (rs_config_name_ok), unique in the index */
	int64_t rows;           /* >= 1; rows * dim fits the limits below */
	int32_t dim;
	rs_dtype dtype;
	rs_optimizer optimizer;
	rs_ckpt_shard *shards;  /* column blocks tiling [0, dim), each cut into row ranges tiling [0, rows) */
	int nshards;
} rs_ckpt_table;

typedef struct rs_ckpt_index {
	int64_t step;
	rs_ckpt_table *tables;
	int ntables;
	char *dense_file;       /* a plain file name */
	int64_t dense_params;
	rs_ckpt_sum dense_sum;
} rs_ckpt_index;

/* Limits on what an index may describe (a larger one is refused, not trusted). */
#define RS_CKPT_MAX_TABLES 100000
#define RS_CKPT_MAX_SHARDS 1000000
#define RS_CKPT_MAX_ELEMENTS ((int64_t)1 << 40) /* per table: rows x dim */

/*
 * Parse and validate an index (len bytes; `name` names it in messages):
 * the format and version, every field's type and range (sizes and offsets
 * overflow-checked), table names valid and unique, shard file names plain
 * names in the directory, and every cell of every table covered by exactly
 * one shard. RS_EINVAL naming the field otherwise; on success *out is
 * filled (rs_checkpoint_index_free).
 */
rs_status rs_checkpoint_index_parse(const char *text, size_t len, const char *name, rs_ckpt_index *out,
				    rs_err *err);

/* Read dir/index.json (a regular file) and parse it. */
rs_status rs_checkpoint_index_read(const char *dir, rs_ckpt_index *out, rs_err *err);

/* Every file of ix (in dir) that has a checksum is what it says (rs_checkpoint_verify_file). */
rs_status rs_checkpoint_verify(const char *dir, const rs_ckpt_index *ix, rs_err *err);

/* The directory of the periodic checkpoint at step under root: root/step-NNNNNNNNN (into buf of n bytes). */
void rs_checkpoint_step_dir(const char *root, int64_t step, char *buf, size_t n);

/*
 * The steps of the periodic checkpoints under root (its step-NNNNNNNNN
 * directories, complete or not; links and other files so named are
 * ignored), newest first: *steps (the caller frees
 * it), *n of them. RS_ENOTFOUND / RS_EIO when root cannot be listed.
 */
rs_status rs_checkpoint_steps(const char *root, int64_t **steps, size_t *n, rs_err *err);

/*
 * The checkpoint `path` names, into out (n bytes): path itself when it holds
 * an index.json; else, when it holds periodic checkpoints (step-NNNNNNNNN/),
 * the newest complete one of a step <= max_step (< 0: any) whose files all
 * match their checksums (each one passed over, incomplete or damaged, is
 * logged with the reason). RS_ENOTFOUND when there is none; a checkpoint
 * that cannot be read (an I/O error, no memory) stops the search with
 * that error: an older one would not be what was asked for.
 */
rs_status rs_checkpoint_resolve(const char *path, int64_t max_step, char *out, size_t n, rs_err *err);

/* The same, and the step of the checkpoint found (its index read again) into *step. */
rs_status rs_checkpoint_find(const char *path, int64_t max_step, char *out, size_t n, int64_t *step, rs_err *err);

void rs_checkpoint_index_free(rs_ckpt_index *ix);

/* The table of this name, or NULL. */
const rs_ckpt_table *rs_checkpoint_index_table(const rs_ckpt_index *ix, const char *name);

/*
 * Compare two checkpoints table by table: per tensor (weights and the
 * optimizer state where both layouts allow) the largest absolute difference
 * and the relative one (that divided by the largest absolute value in A);
 * per table and overall, the largest of those. The checkpoints may shard
 * tables differently. RS_EINVAL, naming the table, when they hold different
 * tables, shapes or dtypes. A NaN on one side only counts as an infinite
 * difference. Per-row optimizer state is compared per column block when
 * both have the same blocks. *out: {"max_abs", "max_rel", "identical"
 * (every tensor, ZCH identities and eviction metadata included, equal bit
 * for bit, and present in both or neither), "not_compared" (["table.tensor"]
 * that could not be: in one only, or column blocks that differ), "steps"
 * ([A's, B's]), "tables" (ZCH ids and metadata: {"identical"} only):
 * {name: {"max_abs", "max_rel", "tensors": {tensor: {"max_abs",
 * "max_rel"}}}}}.
 */
rs_status rs_checkpoint_diff(const char *dir_a, const char *dir_b, json_t **out, rs_err *err);

/*
 * Export a checkpoint (dir, checked against its checksums) as one
 * safetensors file at out_path for PyTorch users, one tensor per table and
 * state in global row order, named as TorchRec's
 * EmbeddingBagCollection.state_dict() names the weights:
 *   embedding_bags.TABLE.weight              [rows, dim], the table's dtype
 *   embedding_bags.TABLE.weight.momentum1    [rows] F32 (row-wise Adagrad; not for
 *                                             column-wise tables, whose blocks each keep one)
 *   embedding_bags.TABLE.weight.exp_avg, .exp_avg_sq   [rows, dim] F32 (Adam)
 *   embedding_bags.TABLE.zch_ids             [rows] I64, -1 for a free slot (ZCH tables)
 *   dense.params                             [N] F32, the dense network, flat
 * and "__metadata__" {"format": "rowshift-export", "step"}. Every table is
 * assembled in memory (its whole size). *rep says what was written.
 */
typedef struct rs_ckpt_export_report {
	int tables, tensors;
	int skipped;            /* per-row optimizer states left out (column-wise tables) */
	int64_t step;
} rs_ckpt_export_report;
rs_status rs_checkpoint_export(const char *dir, const char *out_path, rs_ckpt_export_report *rep, rs_err *err);

#endif
