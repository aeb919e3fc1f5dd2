/*
 * dense.h - the dense part of a DLRM-style model, on CPU: a bottom MLP on
 * the 13 dense features, an interaction of its output with every feature's
 * pooled embedding, a top MLP and one logit, trained with logistic loss.
 *
 * Interactions: "dot" (DLRM's) is the bottom output followed by the pairwise
 * dot products of [bottom output, feature 1, ..., feature F] (each pair once,
 * no self-products), and needs every feature's dim to equal the bottom
 * output's; "cat" is the concatenation of the bottom output and every
 * feature, and takes any dims.
 *
 * Every parameter lives in one contiguous float array (and its gradient in
 * another of the same layout), so a worker all-reduces the whole dense
 * gradient in one call. Gradients are SUMS over the samples given; the
 * caller divides by the global batch when it steps (rs_dense_sgd's scale).
 * Results are bit-identical for identical inputs.
 */
#ifndef RS_DENSE_H
#define RS_DENSE_H

#include "common/batch.h"
#include "common/config.h"
#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rs_dense rs_dense;

/*
 * A model for cfg (its dense section and the dims of its features, in
 * config order: tables in order, each table's features in order),
 * initialized from `seed`. RS_EINVAL with err when "dot" is asked for and
 * the dims do not match.
 */
rs_status rs_dense_create(const rs_config *cfg, uint64_t seed, rs_dense **out, rs_err *err);
void rs_dense_destroy(rs_dense *m);

float *rs_dense_params(rs_dense *m);
float *rs_dense_grads(rs_dense *m);
size_t rs_dense_nparams(const rs_dense *m);
int32_t rs_dense_emb_width(const rs_dense *m); /* floats of pooled embeddings per sample */

/*
 * Forward and backward over n samples: dense[n x 13], pooled[n x emb_width]
 * (per sample, features in order), labels[n] in {0, 1}. Adds the summed
 * parameter gradients to the gradient array, writes d(loss sum)/d(pooled)
 * into dpooled[n x emb_width] and the summed log loss into *loss_sum.
 */
rs_status rs_dense_forward_backward(rs_dense *m, const float *dense, const float *pooled, const float *labels,
				    int32_t n, float *dpooled, double *loss_sum);

/* Probabilities for n samples (no gradients). */
rs_status rs_dense_predict(rs_dense *m, const float *dense, const float *pooled, int32_t n, float *prob);

/* params -= lr * scale * grads; then grads = 0. */
void rs_dense_sgd(rs_dense *m, float lr, float scale);

/*
 * The layers' matrix products, when something faster than the built-in
 * loops is at hand (the CUDA engine's cuBLAS): row-major, host arrays,
 *   C[m x n] = op(A) op(B) + beta C,  op(A) m x k, op(B) k x n,
 * op = transpose when ta / tb. Results then depend on fn's summation
 * order (no longer bit-identical to the loops; deterministic if fn is).
 * NULL restores the loops.
 */
typedef rs_status (*rs_dense_gemm_fn)(void *ctx, int ta, int tb, int32_t m, int32_t n, int32_t k, const float *a,
				      const float *b, float beta, float *c);
void rs_dense_set_gemm(rs_dense *m, rs_dense_gemm_fn fn, void *ctx);

#endif
