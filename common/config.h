/*
 * config.h - the model config: embedding tables, optimizer, dense network,
 * data source and training settings, read from one JSON file.
 *
 * Every field but "tables" has a documented default (see README, "Model
 * config"), so a file holding only "tables" is a valid config. The loader
 * rejects bad input with one message naming the file, the table and the
 * field; it never aborts. Checks that depend on the world (a pin to a rank
 * >= world size, a table too big for any rank) are the planner's, because
 * only it knows the world.
 *
 * Ownership: rs_config_load() returns a config the caller frees with
 * rs_config_free(). Every string and array inside belongs to the config.
 */
#ifndef RS_CONFIG_H
#define RS_CONFIG_H

#include "common/status.h"
#include "common/types.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum rs_sharding {
	RS_SHARD_AUTO = 0,
	RS_SHARD_TW,   /* table_wise */
	RS_SHARD_RW,   /* row_wise */
	RS_SHARD_CW,   /* column_wise */
	RS_SHARD_TWRW, /* table_row_wise */
	RS_SHARD_GRID, /* grid */
	RS_SHARD_DP,   /* data_parallel */
	RS_SHARD_COUNT
} rs_sharding;

typedef enum rs_interaction {
	RS_INTERACTION_AUTO = 0, /* dot when every table dim == bottom MLP output, else cat */
	RS_INTERACTION_DOT,
	RS_INTERACTION_CAT,
} rs_interaction;

typedef enum rs_data_kind { RS_DATA_SYNTHETIC = 0, RS_DATA_CRITEO } rs_data_kind;

typedef struct rs_table_config {
	char *name;
	int64_t rows;           /* > 0; for a ZCH table equals zch.slots */
	int32_t dim;            /* > 0; a multiple of 4 for column_wise and grid */
	char **features;        /* >= 1 feature names, unique across all tables */
	int nfeatures;
	rs_pooling pooling;     /* default sum */
	double pooling_factor;  /* mean IDs per sample per feature; default 1 */
	rs_dtype dtype;         /* default fp32 */
	rs_sharding sharding;   /* default auto */
	int32_t rank;           /* pinned rank, or -1 (default) */
	char *colocate;         /* co-location group name, or NULL */
	bool has_zch;
	rs_zch_config zch;      /* valid when has_zch */
} rs_table_config;

typedef struct rs_dense_config {
	int32_t *bottom_mlp;    /* layer widths after the 13 dense inputs; default {64, D} */
	int nbottom;
	int32_t *top_mlp;       /* layer widths before the final logit; default {64, 32} */
	int ntop;
	rs_interaction interaction; /* default auto */
	float lr;               /* dense SGD learning rate; default 0.05 */
} rs_dense_config;

typedef struct rs_data_config {
	rs_data_kind kind;      /* default synthetic */
	char **paths;           /* criteo: TSV files, read in order */
	int npaths;
	uint64_t seed;          /* synthetic data and teacher; default 1 */
	double zipf_alpha;      /* synthetic ID skew; default 1.05 */
	int64_t eval_samples;   /* held-out samples for AUC; default 16384 */
	int64_t eval_every;     /* steps between evaluations; default 50 */
} rs_data_config;

typedef struct rs_train_config {
	int64_t global_batch;   /* samples per step across all workers; default 1024 */
	int64_t steps;          /* default 200; the coordinator's --steps overrides */
	uint64_t seed;          /* weight initialization; default 42 */
	/*
	 * Results that do not depend on the world size (worker/train_exact.c):
	 * the global batch is cut into micro-batches of micro_batch samples
	 * (default: the largest divisor of global_batch up to 32), each rank
	 * trains whole micro-batches, and every sum feeding the model is exact.
	 * Ranks beyond global_batch / micro_batch train no samples. Default on
	 * ("deterministic": false for the plain sums).
	 */
	int deterministic;
	int64_t micro_batch;
	/*
	 * Each step takes at least this long (ms; 0, the default: as fast as
	 * the workers can): a demo one can follow, or tests sharing a small
	 * machine, where the workers idle between steps instead of training
	 * flat out. Only the pace changes, never a result.
	 */
	int64_t min_step_ms;
} rs_train_config;

/* Defaults for the world, used when the command line does not say. */
typedef struct rs_cluster_config {
	int32_t ranks_per_node;     /* default 8 */
	uint64_t memory_per_rank;   /* bytes for embeddings + optimizer state; default 16 GiB */
	int32_t sharding_group;     /* S of a 2D layout (R = world / S replica groups); 0: none, S = world */
	int32_t replica_sync_every; /* 2D: average replicas every K steps (local SGD); 0: exact, every step */
	/*
	 * "recovery": "partial" (CPR): rows lost with every copy come back from
	 * the latest checkpoint while the others keep their current values and
	 * training goes on from the current step; 0 ("rollback", the default):
	 * the whole world goes back to the checkpoint.
	 */
	int partial_recovery;
	/*
	 * "precopy" (default true): a reshard moves most rows while the old
	 * world trains on and pauses only to send what changed since
	 * (worker/precopy.c); 1D worlds and 2D ones with exact sync, not while
	 * healing, across a change of layout or in a 2D world averaged every K
	 * steps (those move their rows at the pause). false: every reshard
	 * moves its rows at the pause.
	 */
	int precopy;
	/*
	 * "precopy_share" (default 0.2, in (0, 1]): the share of the old
	 * members' time the background rounds aim to take while training (an
	 * aim, not a cap: 0.2 keeps training at about 80% of its speed during
	 * the copy; 1: as fast as the rounds go, up to 16 between two steps).
	 */
	double precopy_share;
} rs_cluster_config;

#define RS_PRECOPY_DEFAULT 1
#define RS_PRECOPY_SHARE_DEFAULT 0.2

typedef struct rs_config {
	char *path;             /* the file it came from (for messages), or "<memory>" */
	rs_table_config *tables;
	int ntables;            /* >= 1 */
	rs_optimizer_config optimizer;
	rs_dense_config dense;
	rs_data_config data;
	rs_train_config train;
	rs_cluster_config cluster;
} rs_config;

/* The largest config file read. */
#define RS_CONFIG_MAX_BYTES ((size_t)256 << 20)

/*
 * Read and validate the config in `path`. On success *out owns a new config.
 * On failure returns RS_EINVAL (bad content), RS_EIO (unreadable or missing
 * file) or RS_ENOMEM, leaves *out NULL, and writes err.
 */
rs_status rs_config_load(const char *path, rs_config **out, rs_err *err);

/* Same, from a buffer (need not be NUL-terminated); `name` is used in messages. */
rs_status rs_config_parse(const char *buf, size_t len, const char *name,
			  rs_config **out, rs_err *err);

void rs_config_free(rs_config *cfg);

/* Whether name may name a table: 1..200 of [A-Za-z0-9_.-], not starting with '.' (it names files). */
int rs_config_name_ok(const char *name);

/* Index of the table named `name`, or -1. */
int rs_config_find_table(const rs_config *cfg, const char *name);

/* The dense network's interaction, "auto" resolved: dot when every table dim equals the bottom MLP's output, else cat. */
rs_interaction rs_config_interaction(const rs_config *cfg);

/* Bytes one row of table t takes with its optimizer state. */
uint64_t rs_table_row_bytes(const rs_config *cfg, const rs_table_config *t);

/*
 * A digest of what every member of a job must agree on, in six sections:
 * the tables (names, shapes, features, pooling and its factor, dtype, ZCH),
 * the optimizer, the dense network (its interaction as "auto" resolves),
 * the data (source, seed, skew, held-out samples), training (global batch,
 * seed, deterministic and then the micro-batch) and the cluster settings a
 * worker acts on itself (replica_sync_every, recovery), each a CRC-32C in
 * 8 hex digits, joined by '-'. Left out, because members may differ in them
 * without a different result: data file paths (mounts), the sharding hints
 * and the other cluster settings (the coordinator's), steps and eval_every
 * (the coordinator sends its own), min_step_ms (pace). A worker's join
 * carries it, and a coordinator refuses a worker whose digest is not its
 * own (common/proto.h), so that workers started with another config never
 * train beside the others. What goes in, and how, is part of the control
 * protocol: changing it changes RS_PROTOCOL_VERSION.
 */
#define RS_CONFIG_DIGEST_LEN 53
#define RS_CONFIG_DIGEST_SECTIONS 6
void rs_config_digest(const rs_config *cfg, char out[RS_CONFIG_DIGEST_LEN + 1]);
/* Whether s has a digest's form. */
int rs_config_digest_ok(const char *s);
/* The sections in which digests a and b differ, named ("train, dense") in out; how many. */
int rs_config_digest_diff(const char *a, const char *b, char *out, size_t n);

/* Names as they appear in the config and the plan JSON. */
const char *rs_sharding_name(rs_sharding s);   /* "table_wise", ... */
int rs_sharding_from_name(const char *name);   /* -1 when unknown */
const char *rs_dtype_name(rs_dtype d);
const char *rs_optimizer_name(rs_optimizer o);

#endif
