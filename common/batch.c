/*
 * batch.c - allocation of rs_batch (see batch.h). Buffers only grow, so a
 * batch reused step after step stops allocating.
 */
#include "common/batch.h"

#include <stdlib.h>
#include <string.h>

rs_status rs_batch_init(rs_batch *b, int32_t nfeatures)
{
	memset(b, 0, sizeof(*b));
	b->nfeatures = nfeatures;
	b->cap = -1; /* nothing allocated yet, not even for 0 samples */
	b->offsets = calloc((size_t)nfeatures + 1, sizeof(int32_t *));
	b->ids = calloc((size_t)nfeatures + 1, sizeof(int64_t *));
	b->ids_cap = calloc((size_t)nfeatures + 1, sizeof(int64_t));
	if (!b->offsets || !b->ids || !b->ids_cap) {
		rs_batch_free(b);
		return RS_ENOMEM;
	}
	return RS_OK;
}

void rs_batch_free(rs_batch *b)
{
	for (int32_t f = 0; f < b->nfeatures; f++) {
		if (b->offsets)
			free(b->offsets[f]);
		if (b->ids)
			free(b->ids[f]);
	}
	free(b->offsets);
	free(b->ids);
	free(b->ids_cap);
	free(b->dense);
	free(b->labels);
	memset(b, 0, sizeof(*b));
}

rs_status rs_batch_reserve(rs_batch *b, int32_t size)
{
	if (size <= b->cap) /* cap starts at -1: even an empty slice allocates (offsets[f][0] is written) */
		return RS_OK;
	float *d = realloc(b->dense, sizeof(float) * ((size_t)size + 1) * RS_NUM_DENSE);
	if (!d)
		return RS_ENOMEM;
	b->dense = d;
	float *l = realloc(b->labels, sizeof(float) * ((size_t)size + 1));
	if (!l)
		return RS_ENOMEM;
	b->labels = l;
	for (int32_t f = 0; f < b->nfeatures; f++) {
		int32_t *o = realloc(b->offsets[f], sizeof(int32_t) * ((size_t)size + 1));
		if (!o)
			return RS_ENOMEM;
		b->offsets[f] = o;
	}
	b->cap = size;
	return RS_OK;
}

rs_status rs_batch_reserve_ids(rs_batch *b, int32_t f, int64_t n)
{
	if (n <= b->ids_cap[f])
		return RS_OK;
	int64_t cap = b->ids_cap[f] ? b->ids_cap[f] : 1024;
	while (cap < n)
		cap *= 2;
	int64_t *v = realloc(b->ids[f], sizeof(int64_t) * (size_t)cap);
	if (!v)
		return RS_ENOMEM;
	b->ids[f] = v;
	b->ids_cap[f] = cap;
	return RS_OK;
}
