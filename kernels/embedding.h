/*
 * embedding.h - embedding-bag kernels on one shard (CPU implementation; the
 * CUDA implementation in kernels/cuda/ takes the same arguments with device
 * pointers).
 *
 * A shard is `nrows x dim` weights of one dtype (fp32, fp16, bf16; row
 * stride dim) with its optimizer state in fp32: none for SGD, one
 * accumulator per row for row-wise Adagrad (FBGEMM's rowwise_adagrad), two
 * moments per element for Adam. Arithmetic is always fp32.
 *
 * Inputs are jagged: bag i pools ids[offsets[i] .. offsets[i+1]), LOCAL row
 * indices in [0, nrows). An id of -1 means "no row" (a ZCH miss or
 * overflow): it contributes a zero vector and receives no update. Mean
 * pooling divides by the bag's length (an empty bag pools to zero).
 *
 * Backward is split in two so the worker can combine gradients from several
 * sources (row-wise shards receive them from every peer; data-parallel
 * tables all-reduce them first): rs_emb_grad_accumulate sums the gradient of
 * every distinct row of a batch (duplicates added first, in bag order, so
 * results are deterministic), and rs_emb_apply applies one optimizer update
 * per distinct row. rs_emb_backward does both.
 */
#ifndef RS_EMBEDDING_H
#define RS_EMBEDDING_H

#include "common/types.h"
#include "common/status.h"

#include <stdint.h>
#include <string.h>

typedef struct rs_emb_shard {
	void *weights;        /* nrows * dim elements of dtype */
	float *state;         /* optimizer state (see above), or NULL for SGD */
	rs_dtype dtype;
	int64_t nrows;
	int32_t dim;
} rs_emb_shard;

/* Gradients of the distinct rows of a batch: rows[k] gets grad[k*dim .. +dim). */
typedef struct rs_emb_grad {
	int64_t *rows;
	float *grad;
	int64_t n;            /* distinct rows */
	int64_t cap;          /* capacity of rows (and cap * dim of grad) */
	int32_t dim;
} rs_emb_grad;

/* Scratch reused across calls so the training step does not allocate. */
typedef struct rs_emb_workspace {
	int32_t *slot_of_row; /* per shard row: index into the gradient, or -1 */
	int64_t nrows;
} rs_emb_workspace;

/* Optimizer state floats per row of a shard of width dim. */
int64_t rs_emb_state_floats(rs_optimizer kind, int32_t dim);

/* ---- dtype conversions (round to nearest even) ---------------------------- */

static inline float rs_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline uint16_t rs_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float rs_f16_to_f32(uint16_t h);
uint16_t rs_f32_to_f16(float f);

/* Element i of a weights array as fp32, and the reverse. */
static inline float rs_emb_get(const void *w, rs_dtype dt, int64_t i)
{
	switch (dt) {
	case RS_DTYPE_FP16:
		return rs_f16_to_f32(((const uint16_t *)w)[i]);
	case RS_DTYPE_BF16:
		return rs_bf16_to_f32(((const uint16_t *)w)[i]);
	default:
		return ((const float *)w)[i];
	}
}

static inline void rs_emb_set(void *w, rs_dtype dt, int64_t i, float v)
{
	switch (dt) {
	case RS_DTYPE_FP16:
		((uint16_t *)w)[i] = rs_f32_to_f16(v);
		break;
	case RS_DTYPE_BF16:
		((uint16_t *)w)[i] = rs_f32_to_bf16(v);
		break;
	default:
		((float *)w)[i] = v;
	}
}

/* ---- kernels ------------------------------------------------------------------ */

/*
 * out[i*out_stride .. +dim) = pooled rows of bag i, for i < nbags. Returns
 * RS_EINVAL when an id lies outside [-1, nrows) (nothing is written past
 * that bag's output).
 */
rs_status rs_emb_forward(const rs_emb_shard *s, const int32_t *offsets, int32_t nbags, const int64_t *ids,
			 rs_pooling pooling, float *out, int64_t out_stride);

rs_status rs_emb_workspace_init(rs_emb_workspace *ws, int64_t nrows);
void rs_emb_workspace_free(rs_emb_workspace *ws);
void rs_emb_grad_free(rs_emb_grad *g);

/*
 * Add the gradient of a batch to g (which may already hold rows, e.g. from
 * another peer's batch): grad_out[i*grad_stride .. +dim) is the gradient of
 * bag i's pooled output. New rows are appended in order of first appearance.
 * ws must have been initialized for the shard's nrows; it is left clean.
 */
rs_status rs_emb_grad_accumulate(rs_emb_workspace *ws, rs_emb_grad *g, int32_t dim, const int32_t *offsets,
				 int32_t nbags, const int64_t *ids, rs_pooling pooling, const float *grad_out,
				 int64_t grad_stride);

/* Forget g's rows (keeping its memory) and reset ws for them. */
void rs_emb_grad_clear(rs_emb_workspace *ws, rs_emb_grad *g);

/*
 * One optimizer update per row of g. `step` (>= 1) is the table's update
 * count, for Adam's bias correction.
 */
void rs_emb_apply(rs_emb_shard *s, const rs_emb_grad *g, const rs_optimizer_config *opt, int64_t step);

/* Accumulate then apply: the fused backward of a single-source batch. */
rs_status rs_emb_backward(rs_emb_shard *s, rs_emb_workspace *ws, rs_emb_grad *g, const int32_t *offsets,
			  int32_t nbags, const int64_t *ids, rs_pooling pooling, const float *grad_out,
			  int64_t grad_stride, const rs_optimizer_config *opt, int64_t step);

/* ---- row pack / unpack (migration) --------------------------------------------- */

/* Bytes one packed row of s takes: its weights in their dtype, then its optimizer state floats. */
size_t rs_emb_packed_row_bytes(const rs_emb_shard *s, rs_optimizer opt);

/*
 * Copy rows[0..n) of s (local indices) into buf: all their weights, then all
 * their optimizer state (n * rs_emb_packed_row_bytes bytes in all). RS_EINVAL for a row
 * outside the shard, RS_ENOSPACE when buf (cap bytes) is too small.
 */
rs_status rs_emb_pack_rows(const rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n, void *buf,
			   size_t cap);

/* The reverse: write the packed rows of buf into rows[0..n) of s. */
rs_status rs_emb_unpack_rows(rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n, const void *buf,
			     size_t len);

#endif
