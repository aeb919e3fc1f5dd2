/*
 * embedding_cpu.c - the CPU embedding-bag kernels (see embedding.h). The
 * fp32 paths are written so the compiler vectorizes the dim loops; other
 * dtypes go through the conversion helpers.
 */
#include "kernels/embedding.h"

#include <math.h>
#include <stdlib.h>

float rs_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
	if (exp == 0) {
		if (man == 0) {
			u = sign;
		} else { /* subnormal: normalize */
			exp = 127 - 15 + 1;
			while (!(man & 0x400)) {
				man <<= 1;
				exp--;
			}
			u = sign | (exp << 23) | ((man & 0x3ff) << 13);
		}
	} else if (exp == 31) {
		u = sign | 0x7f800000u | (man << 13);
	} else {
		u = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t rs_f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00); /* NaN */
	if (a >= 0x477ff000u)                 /* rounds to >= 65520: infinity */
		return (uint16_t)(sign | 0x7c00);
	if (a < 0x38800000u) {                /* below 2^-14: subnormal or zero */
		if (a < 0x33000000u)          /* below half the smallest subnormal */
			return (uint16_t)sign;
		uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
		uint32_t shift = 126 - e;     /* 14 - (e - 127) + 13 - 1 ... = bits to drop */
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	uint32_t r = a + 0x0fffu + ((a >> 13) & 1) - 0x38000000u; /* rebias 127 -> 15 and round */
	return (uint16_t)(sign | (r >> 13));
}

int64_t rs_emb_state_floats(rs_optimizer kind, int32_t dim)
{
	return (int64_t)(rs_optimizer_row_state_bytes(kind, dim) / 4);
}

/* Lookups are random rows of big tables: ask for rows a few ids ahead. */
#define PREFETCH_AHEAD 12

/*
 * The row ids[j] names, to prefetch, or NULL. (The prefetch is in the
 * caller's loop: GCC takes a function holding nothing but __builtin_prefetch
 * for one without effect and drops its calls.)
 */
static inline const char *row_ahead(const rs_emb_shard *s, const int64_t *ids, int32_t j, int32_t end)
{
	if (j < end && ids[j] >= 0 && ids[j] < s->nrows)
		return (const char *)s->weights + ids[j] * (int64_t)s->dim * rs_dtype_size(s->dtype);
	return NULL;
}

/* acc += row r of s */
static inline void add_row(const rs_emb_shard *s, int64_t r, float *restrict acc)
{
	int32_t d = s->dim;
	if (s->dtype == RS_DTYPE_FP32) {
		const float *restrict w = (const float *)s->weights + r * d;
		for (int32_t k = 0; k < d; k++)
			acc[k] += w[k];
	} else {
		for (int32_t k = 0; k < d; k++)
			acc[k] += rs_emb_get(s->weights, s->dtype, r * d + k);
	}
}

rs_status rs_emb_forward(const rs_emb_shard *s, const int32_t *offsets, int32_t nbags, const int64_t *ids,
			 rs_pooling pooling, float *out, int64_t out_stride)
{
	for (int32_t i = 0; i < nbags; i++) {
		float *restrict acc = out + (int64_t)i * out_stride;
		int32_t b = offsets[i], e = offsets[i + 1];
		memset(acc, 0, sizeof(float) * (size_t)s->dim);
		for (int32_t j = b; j < e; j++) {
			int64_t r = ids[j];
			const char *ahead = row_ahead(s, ids, j + PREFETCH_AHEAD, offsets[nbags]);
			if (ahead) {
				__builtin_prefetch(ahead);
				__builtin_prefetch(ahead + 64);
			}
			if (r < 0) {
				if (r != -1)
					return RS_EINVAL;
				continue;
			}
			if (r >= s->nrows)
				return RS_EINVAL;
			add_row(s, r, acc);
		}
		if (pooling == RS_POOL_MEAN && e > b) {
			float inv = 1.0f / (float)(e - b);
			for (int32_t k = 0; k < s->dim; k++)
				acc[k] *= inv;
		}
	}
	return RS_OK;
}

rs_status rs_emb_workspace_init(rs_emb_workspace *ws, int64_t nrows)
{
	ws->slot_of_row = malloc(sizeof(int32_t) * (size_t)(nrows > 0 ? nrows : 1));
	if (!ws->slot_of_row)
		return RS_ENOMEM;
	for (int64_t r = 0; r < nrows; r++)
		ws->slot_of_row[r] = -1;
	ws->nrows = nrows;
	return RS_OK;
}

void rs_emb_workspace_free(rs_emb_workspace *ws)
{
	free(ws->slot_of_row);
	ws->slot_of_row = NULL;
	ws->nrows = 0;
}

void rs_emb_grad_free(rs_emb_grad *g)
{
	free(g->rows);
	free(g->grad);
	*g = (rs_emb_grad){0};
}

static rs_status grad_reserve(rs_emb_grad *g, int64_t n, int32_t dim)
{
	if (g->n > 0 && g->dim != dim)
		return RS_EINVAL;
	g->dim = dim;
	if (n <= g->cap)
		return RS_OK;
	int64_t cap = g->cap ? g->cap : 256;
	while (cap < n)
		cap *= 2;
	int64_t *rows = realloc(g->rows, sizeof(int64_t) * (size_t)cap);
	if (!rows)
		return RS_ENOMEM;
	g->rows = rows;
	float *grad = realloc(g->grad, sizeof(float) * (size_t)cap * (size_t)dim);
	if (!grad)
		return RS_ENOMEM;
	g->grad = grad;
	g->cap = cap;
	return RS_OK;
}

rs_status rs_emb_grad_accumulate(rs_emb_workspace *ws, rs_emb_grad *g, int32_t dim, const int32_t *offsets,
				 int32_t nbags, const int64_t *ids, rs_pooling pooling, const float *grad_out,
				 int64_t grad_stride)
{
	RSCHECK(grad_reserve(g, g->n, dim)); /* the width check; rows are made room for as they appear */
	for (int32_t i = 0; i < nbags; i++) {
		int32_t b = offsets[i], e = offsets[i + 1];
		const float *restrict go = grad_out + (int64_t)i * grad_stride;
		float scale = pooling == RS_POOL_MEAN && e > b ? 1.0f / (float)(e - b) : 1.0f;
		for (int32_t j = b; j < e; j++) {
			int64_t r = ids[j];
			if (j + PREFETCH_AHEAD < offsets[nbags] && ids[j + PREFETCH_AHEAD] >= 0 &&
			    ids[j + PREFETCH_AHEAD] < ws->nrows)
				__builtin_prefetch(&ws->slot_of_row[ids[j + PREFETCH_AHEAD]]);
			if (r < 0) {
				if (r != -1)
					return RS_EINVAL;
				continue;
			}
			if (r >= ws->nrows)
				return RS_EINVAL;
			int32_t k = ws->slot_of_row[r];
			float *restrict acc;
			if (k < 0) {
				if (g->n == g->cap)
					RSCHECK(grad_reserve(g, g->n + 1, dim));
				k = (int32_t)g->n++;
				ws->slot_of_row[r] = k;
				g->rows[k] = r;
				acc = g->grad + (int64_t)k * dim;
				for (int32_t c = 0; c < dim; c++)
					acc[c] = go[c] * scale;
			} else {
				acc = g->grad + (int64_t)k * dim;
				for (int32_t c = 0; c < dim; c++)
					acc[c] += go[c] * scale;
			}
		}
	}
	return RS_OK;
}

void rs_emb_grad_clear(rs_emb_workspace *ws, rs_emb_grad *g)
{
	for (int64_t k = 0; k < g->n; k++)
		ws->slot_of_row[g->rows[k]] = -1;
	g->n = 0;
}

/* w[r] -= f * g, elementwise */
static inline void axpy_row(rs_emb_shard *s, int64_t r, float f, const float *restrict g)
{
	int32_t d = s->dim;
	if (s->dtype == RS_DTYPE_FP32) {
		float *restrict w = (float *)s->weights + r * d;
		for (int32_t c = 0; c < d; c++)
			w[c] -= f * g[c];
	} else {
		for (int32_t c = 0; c < d; c++)
			rs_emb_set(s->weights, s->dtype, r * d + c, rs_emb_get(s->weights, s->dtype, r * d + c) - f * g[c]);
	}
}

void rs_emb_apply(rs_emb_shard *s, const rs_emb_grad *g, const rs_optimizer_config *opt, int64_t step)
{
	int32_t d = s->dim;
	for (int64_t k = 0; k < g->n; k++) {
		int64_t r = g->rows[k];
		const float *restrict gr = g->grad + k * d;
		if (k + PREFETCH_AHEAD < g->n) {
			int64_t ahead = g->rows[k + PREFETCH_AHEAD];
			__builtin_prefetch((char *)s->weights + ahead * d * rs_dtype_size(s->dtype), 1);
			if (s->state)
				__builtin_prefetch(s->state + ahead * rs_emb_state_floats(opt->kind, d), 1);
		}
		switch (opt->kind) {
		case RS_OPT_SGD:
			axpy_row(s, r, opt->lr, gr);
			break;
		case RS_OPT_ROWWISE_ADAGRAD: {
			float sq = 0;
			for (int32_t c = 0; c < d; c++)
				sq += gr[c] * gr[c];
			float acc = s->state[r] += sq / (float)d;
			axpy_row(s, r, opt->lr / (sqrtf(acc) + opt->eps), gr);
			break;
		}
		case RS_OPT_ADAM: {
			float bc1 = 1.0f - powf(opt->beta1, (float)step), bc2 = 1.0f - powf(opt->beta2, (float)step);
			float *restrict m = s->state + r * 2 * d, *restrict v = m + d;
			for (int32_t c = 0; c < d; c++) {
				m[c] = opt->beta1 * m[c] + (1 - opt->beta1) * gr[c];
				v[c] = opt->beta2 * v[c] + (1 - opt->beta2) * gr[c] * gr[c];
				float u = opt->lr * (m[c] / bc1) / (sqrtf(v[c] / bc2) + opt->eps);
				rs_emb_set(s->weights, s->dtype, r * d + c, rs_emb_get(s->weights, s->dtype, r * d + c) - u);
			}
			break;
		}
		}
	}
}

rs_status rs_emb_backward(rs_emb_shard *s, rs_emb_workspace *ws, rs_emb_grad *g, const int32_t *offsets,
			  int32_t nbags, const int64_t *ids, rs_pooling pooling, const float *grad_out,
			  int64_t grad_stride, const rs_optimizer_config *opt, int64_t step)
{
	rs_emb_grad_clear(ws, g);
	RSCHECK(rs_emb_grad_accumulate(ws, g, s->dim, offsets, nbags, ids, pooling, grad_out, grad_stride));
	rs_emb_apply(s, g, opt, step);
	rs_emb_grad_clear(ws, g);
	return RS_OK;
}

size_t rs_emb_packed_row_bytes(const rs_emb_shard *s, rs_optimizer opt)
{
	return (size_t)s->dim * (size_t)rs_dtype_size(s->dtype) + sizeof(float) * (size_t)rs_emb_state_floats(opt, s->dim);
}

/* Check the row list and the buffer size shared by pack and unpack. */
static rs_status check_rows(const rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n, size_t cap)
{
	for (int64_t i = 0; i < n; i++)
		if (rows[i] < 0 || rows[i] >= s->nrows)
			return RS_EINVAL;
	return (size_t)n * rs_emb_packed_row_bytes(s, opt) <= cap ? RS_OK : RS_ENOSPACE;
}

/*
 * The packed form of n rows: their weights, row after row, then their
 * optimizer state, row after row; consecutive rows are copied as one block.
 */
rs_status rs_emb_pack_rows(const rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n, void *buf,
			   size_t cap)
{
	size_t wb = (size_t)s->dim * (size_t)rs_dtype_size(s->dtype);
	size_t sb = sizeof(float) * (size_t)rs_emb_state_floats(opt, s->dim);
	char *w = buf, *st = (char *)buf + (size_t)n * wb;
	RSCHECK(check_rows(s, opt, rows, n, cap));
	for (int64_t i = 0; i < n;) {
		int64_t k = 1;
		while (i + k < n && rows[i + k] == rows[i] + k)
			k++;
		memcpy(w + (size_t)i * wb, (const char *)s->weights + rows[i] * (int64_t)wb, (size_t)k * wb);
		if (sb)
			memcpy(st + (size_t)i * sb, (const char *)s->state + rows[i] * (int64_t)sb, (size_t)k * sb);
		i += k;
	}
	return RS_OK;
}

rs_status rs_emb_unpack_rows(rs_emb_shard *s, rs_optimizer opt, const int64_t *rows, int64_t n, const void *buf,
			     size_t len)
{
	size_t wb = (size_t)s->dim * (size_t)rs_dtype_size(s->dtype);
	size_t sb = sizeof(float) * (size_t)rs_emb_state_floats(opt, s->dim);
	const char *w = buf, *st = (const char *)buf + (size_t)n * wb;
	RSCHECK(check_rows(s, opt, rows, n, len));
	for (int64_t i = 0; i < n;) {
		int64_t k = 1;
		while (i + k < n && rows[i + k] == rows[i] + k)
			k++;
		memcpy((char *)s->weights + rows[i] * (int64_t)wb, w + (size_t)i * wb, (size_t)k * wb);
		if (sb)
			memcpy((char *)s->state + rows[i] * (int64_t)sb, st + (size_t)i * sb, (size_t)k * sb);
		i += k;
	}
	return RS_OK;
}
