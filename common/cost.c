/*
 * cost.c - see cost.h.
 */
#include "common/cost.h"

double rs_shard_cost(const rs_config *cfg, const rs_table_config *t, rs_sharding sharding,
		     const rs_world *world, const rs_shard *s)
{
	double replicas = (double)world->ranks / (double)world->sharding_group;
	double batch = (double)cfg->train.global_batch / replicas;
	double f = (double)t->nfeatures, d = rs_dtype_size(t->dtype);
	double cols = s->cols;

	if (sharding == RS_SHARD_DP) {
		double lookup = batch / world->sharding_group * t->pooling_factor * f * cols * d;
		return 3.0 * lookup + 2.0 * (double)t->rows * cols * 4.0;
	}
	double frac = (double)s->rows / (double)t->rows;
	double lookup = batch * t->pooling_factor * f * frac * cols * d;
	double output = batch * f * cols * 4.0;
	return 3.0 * lookup + 2.0 * output;
}

uint64_t rs_shard_bytes(const rs_config *cfg, const rs_table_config *t, const rs_shard *s)
{
	uint64_t per_row = (uint64_t)s->cols * (uint64_t)rs_dtype_size(t->dtype) +
			   rs_optimizer_row_state_bytes(cfg->optimizer.kind, s->cols);
	if (t->has_zch)
		per_row += RS_ZCH_SLOT_META_BYTES;
	return (uint64_t)s->rows * per_row;
}
