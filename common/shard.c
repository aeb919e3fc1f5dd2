/*
 * shard.c - see shard.h.
 */
#include "common/shard.h"

rs_world rs_world_make(const rs_config *cfg, int32_t ranks, int32_t ranks_per_node,
		       uint64_t memory_per_rank, int32_t sharding_group)
{
	rs_world w = {
		.ranks = ranks,
		.ranks_per_node = ranks_per_node > 0 ? ranks_per_node : cfg->cluster.ranks_per_node,
		.memory_per_rank = memory_per_rank > 0 ? memory_per_rank : cfg->cluster.memory_per_rank,
		.sharding_group = sharding_group > 0 ? sharding_group : ranks,
	};
	int32_t s = cfg->cluster.sharding_group;
	/* the config's group where this world is whole groups whose replicas share a node, else 1D */
	if (sharding_group <= 0 && s > 0 && ranks % s == 0 && w.ranks_per_node % (ranks / s) == 0)
		w.sharding_group = s;
	return w;
}
