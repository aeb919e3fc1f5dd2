/*
 * shard.h - the world a plan is made for, and a shard: the vocabulary the
 * plan (plan.h), its cost model (cost.h) and the planner (planner.h) share.
 * See plan.h for what the sharding types cut and how a 2D world is laid out.
 */
#ifndef RS_SHARD_H
#define RS_SHARD_H

#include "common/config.h"

#include <stdint.h>

typedef struct rs_world {
	int32_t ranks;          /* W >= 1 */
	int32_t ranks_per_node; /* >= 1; a partial last node is allowed */
	uint64_t memory_per_rank; /* bytes for embeddings and optimizer state */
	int32_t sharding_group; /* S; W when there is no 2D layout */
} rs_world;

typedef struct rs_shard {
	int32_t rank;
	int32_t replica;        /* replica group index, 0 without 2D */
	int64_t row_offset;
	int64_t rows;
	int32_t col_offset;
	int32_t cols;
	uint32_t bucket_offset; /* ZCH tables only: buckets [bucket_offset, +buckets) */
	uint32_t buckets;       /* 0 for non-ZCH tables */
} rs_shard;

/*
 * The world described by the config's cluster defaults for `ranks` ranks,
 * with overrides where the arguments are > 0. sharding_group 0 takes the
 * config's cluster.sharding_group S where the world is R = ranks / S whole
 * groups and R divides ranks_per_node (so replicas share a node), and
 * otherwise no 2D layout (S = ranks): an elastic world that stops being a
 * multiple of S trains 1D until it is one again.
 */
rs_world rs_world_make(const rs_config *cfg, int32_t ranks, int32_t ranks_per_node,
		       uint64_t memory_per_rank, int32_t sharding_group);

#endif
