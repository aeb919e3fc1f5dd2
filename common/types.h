/*
 * types.h - the few model types the kernels share with the model config:
 * storage dtypes, pooling, the fused optimizer and its hyper-parameters, and
 * ZCH eviction settings. Kernel headers include this, not config.h, so a
 * kernel depends on what it computes with and nothing else. Plain C11; the
 * CUDA sources include it too.
 */
#ifndef RS_TYPES_H
#define RS_TYPES_H

#include <stdint.h>

typedef enum rs_pooling { RS_POOL_SUM = 0, RS_POOL_MEAN } rs_pooling;

typedef enum rs_dtype { RS_DTYPE_FP32 = 0, RS_DTYPE_FP16, RS_DTYPE_BF16 } rs_dtype;

typedef enum rs_optimizer {
	RS_OPT_SGD = 0,
	RS_OPT_ROWWISE_ADAGRAD,
	RS_OPT_ADAM,
} rs_optimizer;

typedef enum rs_eviction { RS_EVICT_LRU = 0, RS_EVICT_LFU } rs_eviction;

/* Zero-collision hashing settings of one table ("zch": {...}). */
typedef struct rs_zch_config {
	uint32_t buckets;       /* default 768; >= 1 */
	uint64_t slots;         /* rows of the table; a multiple of buckets */
	rs_eviction eviction;   /* default lru */
	uint32_t lfu_decay_steps; /* LFU counts halve every this many steps; default 1000 */
} rs_zch_config;

typedef struct rs_optimizer_config {
	rs_optimizer kind;      /* default rowwise_adagrad */
	float lr;               /* default 0.05 */
	float eps;              /* default 1e-8 */
	float beta1, beta2;     /* adam; default 0.9, 0.999 */
} rs_optimizer_config;

/* Bytes per element of a dtype (4 or 2). */
static inline int rs_dtype_size(rs_dtype d) { return d == RS_DTYPE_FP32 ? 4 : 2; }

/*
 * Optimizer state bytes per row of a table of width `dim` (stored in fp32):
 * sgd 0, rowwise_adagrad 4 (one accumulator), adam 8 * dim (two moments).
 */
static inline uint64_t rs_optimizer_row_state_bytes(rs_optimizer kind, int32_t dim)
{
	return kind == RS_OPT_ROWWISE_ADAGRAD ? 4 : kind == RS_OPT_ADAM ? 8 * (uint64_t)dim : 0;
}

#endif
