/*
 * batch.h - one worker's slice of a training batch, in the jagged layout the
 * kernels take (TorchRec's KeyedJaggedTensor, flattened).
 *
 * Samples are numbered globally: a step of global batch G covers samples
 * [step*G, (step+1)*G), and worker r of W takes a contiguous slice of it, so
 * the data does not depend on the world size. For feature f (in config
 * order: tables in order, each table's features in order), the IDs of sample
 * i are ids[f][offsets[f][i] .. offsets[f][i+1]). IDs are raw: a row index in
 * [0, rows) for a plain table (already hashed/modded by the data source), or a
 * raw 64-bit ID for a ZCH table.
 */
#ifndef RS_BATCH_H
#define RS_BATCH_H

#include "common/status.h"

#include <stdint.h>

#define RS_NUM_DENSE 13 /* Criteo's integer features, DLRM's bottom-MLP input */

typedef struct rs_batch {
	int64_t first_sample;   /* global index of sample 0 of this slice */
	int32_t size;           /* samples in this slice (may be 0) */
	int32_t nfeatures;
	float *dense;           /* size * RS_NUM_DENSE, row-major */
	float *labels;          /* size, 0 or 1 */
	int32_t **offsets;      /* nfeatures arrays of size + 1 entries, offsets[f][0] == 0 */
	int64_t **ids;          /* nfeatures arrays of offsets[f][size] entries */
	int64_t *ids_cap;       /* allocated capacity of ids[f] (owner's bookkeeping) */
	int32_t cap;            /* allocated samples; -1 before the first rs_batch_reserve */
} rs_batch;

/* An empty batch for nfeatures features; rs_batch_free releases it. */
rs_status rs_batch_init(rs_batch *b, int32_t nfeatures);
void rs_batch_free(rs_batch *b);

/* Room for `size` samples (dense, labels, offsets); ids grow with rs_batch_reserve_ids. */
rs_status rs_batch_reserve(rs_batch *b, int32_t size);
rs_status rs_batch_reserve_ids(rs_batch *b, int32_t feature, int64_t n);

#endif
