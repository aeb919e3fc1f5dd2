/*
 * engine.h - where a worker's shards live and its embedding kernels run:
 * the CPU (host memory, kernels/embedding_cpu.c; engine_cpu.c) or one CUDA
 * device (managed memory, kernels/cuda/; engine_cuda.c, built where nvcc
 * exists). The trainer reaches shard memory and the kernels only through
 * its engine, so both engines run the same trainer code, and a CPU run
 * exercises every line of it but the kernels themselves.
 *
 * Shard memory of the CUDA engine is CUDA managed memory: the kernels use
 * it in device memory, and the host code that touches whole shards now and
 * then (initial values, a ZCH slot's fresh row, checkpoints, the reshard's
 * copies, chunks and checksums) reads and writes it in place while the
 * driver migrates the pages. Every engine call returns once its work is
 * done, so the host may touch shard memory between calls. `prefetch` only
 * says where the pages will be wanted next; it never changes a result.
 *
 * The kernels take what the CPU ones take (kernels/embedding.h), host
 * arrays for the batch included: the CUDA engine copies a batch in and
 * the outputs out around its kernels.
 */
#ifndef RS_ENGINE_H
#define RS_ENGINE_H

#include "common/status.h"
#include "kernels/embedding.h"

#include <stddef.h>

typedef struct rs_engine rs_engine;

typedef struct rs_engine_ops {
	/* len bytes of shard memory, zeroed; NULL when out of memory (err says why) */
	void *(*alloc)(rs_engine *e, size_t len, rs_err *err);
	void (*free)(rs_engine *e, void *p, size_t len);
	/* [p, p + len) lies inside an allocation and is no longer used: give its pages back if possible */
	void (*release)(rs_engine *e, void *p, size_t len);
	/* the host (to_host) or the kernels will use [p, p + len) next */
	void (*prefetch)(rs_engine *e, void *p, size_t len, int to_host);
	/* rs_emb_forward */
	rs_status (*forward)(rs_engine *e, const rs_emb_shard *s, const int32_t *offsets, int32_t nbags,
			     const int64_t *ids, rs_pooling pooling, float *out, int64_t out_stride, rs_err *err);
	/* rs_emb_backward (ws and g: the CPU's scratch, left clean) */
	rs_status (*backward)(rs_engine *e, rs_emb_shard *s, rs_emb_workspace *ws, rs_emb_grad *g,
			      const int32_t *offsets, int32_t nbags, const int64_t *ids, rs_pooling pooling,
			      const float *grad_out, int64_t grad_stride, const rs_optimizer_config *opt, int64_t step,
			      rs_err *err);
	/* rs_emb_apply */
	rs_status (*apply)(rs_engine *e, rs_emb_shard *s, const rs_emb_grad *g, const rs_optimizer_config *opt,
			   int64_t step, rs_err *err);
	/* the dense network's matrix products (rs_dense_gemm_fn, ctx = the engine), or NULL: the dense loops */
	rs_status (*gemm)(void *e, int ta, int tb, int32_t m, int32_t n, int32_t k, const float *a, const float *b,
			  float beta, float *c);
	void (*destroy)(rs_engine *e);
} rs_engine_ops;

struct rs_engine {
	const rs_engine_ops *ops;
	char name[32];   /* "cpu", "cuda:0", ... for logs */
};

/* The CPU engine: one for the process, never destroyed. */
rs_engine *rs_engine_cpu(void);

/* NULL stands for the CPU engine everywhere an engine is taken. */
static inline rs_engine *rs_engine_or_cpu(rs_engine *e) { return e ? e : rs_engine_cpu(); }

static inline void rs_engine_destroy(rs_engine *e)
{
	if (e)
		e->ops->destroy(e);
}

#endif
