/*
 * dense.c - see dense.h. Plain loops ordered so the inner loop runs over
 * contiguous memory (the compiler vectorizes them); no BLAS.
 */
#include "worker/dense.h"
#include "common/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer {
	int32_t in, out;
	size_t w, b;     /* offsets of weights (out x in, row-major) and bias in the parameter array */
	int relu;
} layer;

struct rs_dense {
	int32_t nfeat, emb_width, bottom_out, inter_width;
	int32_t *dims;   /* per feature */
	rs_interaction inter;
	layer *layers;   /* bottom layers, then top layers, the last one the logit */
	int nbottom, nlayers;
	float *params, *grads;
	size_t nparams;
	/* workspace, grown to the largest batch seen */
	int32_t cap;
	float **act;     /* act[l]: input of layer l (n x in); act[nlayers]: logits (n x 1) */
	float **dact;    /* gradient of each act */
	float *z;        /* the interaction's input vectors, bottom output first (n x (F+1) x D), dot only */
	rs_dense_gemm_fn gemm; /* the layers' products elsewhere (rs_dense_set_gemm), or NULL: the loops below */
	void *gemm_ctx;
};

void rs_dense_set_gemm(rs_dense *m, rs_dense_gemm_fn fn, void *ctx)
{
	m->gemm = fn;
	m->gemm_ctx = ctx;
}

static size_t add_layer(rs_dense *m, int32_t in, int32_t out, int relu)
{
	layer *l = &m->layers[m->nlayers++];
	*l = (layer){.in = in, .out = out, .w = m->nparams, .b = m->nparams + (size_t)in * (size_t)out, .relu = relu};
	m->nparams += (size_t)in * (size_t)out + (size_t)out;
	return m->nparams;
}

rs_status rs_dense_create(const rs_config *cfg, uint64_t seed, rs_dense **out, rs_err *err)
{
	const rs_dense_config *d = &cfg->dense;
	rs_dense *m = calloc(1, sizeof(*m));
	*out = NULL;
	if (!m)
		return RS_ENOMEM;
	for (int t = 0; t < cfg->ntables; t++)
		m->nfeat += cfg->tables[t].nfeatures;
	m->dims = malloc(sizeof(int32_t) * (size_t)m->nfeat);
	m->layers = calloc((size_t)(d->nbottom + d->ntop + 1), sizeof(layer));
	if (!m->dims || !m->layers)
		goto nomem;
	int f = 0;
	int all_equal = 1;
	m->bottom_out = d->bottom_mlp[d->nbottom - 1];
	for (int t = 0; t < cfg->ntables; t++)
		for (int k = 0; k < cfg->tables[t].nfeatures; k++) {
			m->dims[f++] = cfg->tables[t].dim;
			m->emb_width += cfg->tables[t].dim;
			all_equal &= cfg->tables[t].dim == m->bottom_out;
		}
	m->inter = rs_config_interaction(cfg);
	if (m->inter == RS_INTERACTION_DOT && !all_equal) {
		int32_t out_width = m->bottom_out;
		rs_dense_destroy(m);
		return rs_err_set(err, RS_EINVAL, "%s: interaction 'dot' needs every table dim equal to the bottom MLP output (%d)",
				  cfg->path, out_width);
	}
	m->inter_width = m->inter == RS_INTERACTION_DOT ? m->bottom_out + (m->nfeat + 1) * m->nfeat / 2
							: m->bottom_out + m->emb_width;
	int32_t in = RS_NUM_DENSE;
	for (int i = 0; i < d->nbottom; i++) {
		add_layer(m, in, d->bottom_mlp[i], 1);
		in = d->bottom_mlp[i];
	}
	m->nbottom = m->nlayers;
	in = m->inter_width;
	for (int i = 0; i < d->ntop; i++) {
		add_layer(m, in, d->top_mlp[i], 1);
		in = d->top_mlp[i];
	}
	add_layer(m, in, 1, 0);
	m->params = malloc(sizeof(float) * m->nparams);
	m->grads = calloc(m->nparams, sizeof(float));
	m->act = calloc((size_t)m->nlayers + 1, sizeof(float *));
	m->dact = calloc((size_t)m->nlayers + 1, sizeof(float *));
	if (!m->params || !m->grads || !m->act || !m->dact)
		goto nomem;
	/* He-uniform weights, zero biases, from (seed, layer, index) */
	for (int l = 0; l < m->nlayers; l++) {
		layer *ly = &m->layers[l];
		rs_rng r = rs_rng_make(seed, 0xD15E, (uint64_t)l);
		float a = sqrtf(6.0f / (float)ly->in);
		for (size_t i = 0; i < (size_t)ly->in * (size_t)ly->out; i++)
			m->params[ly->w + i] = (float)(rs_rng_uniform(&r) * 2 - 1) * a;
		memset(m->params + ly->b, 0, sizeof(float) * (size_t)ly->out);
	}
	*out = m;
	return RS_OK;
nomem:
	rs_dense_destroy(m);
	return RS_ENOMEM;
}

void rs_dense_destroy(rs_dense *m)
{
	if (!m)
		return;
	for (int l = 0; m->act && l <= m->nlayers; l++) {
		free(m->act[l]);
		free(m->dact[l]);
	}
	free(m->act);
	free(m->dact);
	free(m->z);
	free(m->params);
	free(m->grads);
	free(m->layers);
	free(m->dims);
	free(m);
}

float *rs_dense_params(rs_dense *m) { return m->params; }
float *rs_dense_grads(rs_dense *m) { return m->grads; }
size_t rs_dense_nparams(const rs_dense *m) { return m->nparams; }
int32_t rs_dense_emb_width(const rs_dense *m) { return m->emb_width; }

static int32_t width_of(const rs_dense *m, int l)
{
	return l < m->nlayers ? m->layers[l].in : 1;
}

static rs_status reserve(rs_dense *m, int32_t n)
{
	if (n <= m->cap)
		return RS_OK;
	for (int l = 0; l <= m->nlayers; l++) {
		size_t sz = sizeof(float) * (size_t)n * (size_t)width_of(m, l);
		float *a = realloc(m->act[l], sz), *da;
		if (!a)
			return RS_ENOMEM;
		m->act[l] = a;
		if (!(da = realloc(m->dact[l], sz)))
			return RS_ENOMEM;
		m->dact[l] = da;
	}
	float *z = realloc(m->z, sizeof(float) * (size_t)n * (size_t)(m->nfeat + 1) * (size_t)m->bottom_out);
	if (!z)
		return RS_ENOMEM;
	m->z = z;
	m->cap = n;
	return RS_OK;
}

/* y = act(W x + b) for n rows */
static rs_status layer_forward(const rs_dense *m, const layer *ly, const float *x, float *y, int32_t n)
{
	const float *W = m->params + ly->w, *b = m->params + ly->b;
	if (m->gemm) {
		RSCHECK(m->gemm(m->gemm_ctx, 0, 1, n, ly->out, ly->in, x, W, 0, y)); /* x W^T */
		for (int32_t i = 0; i < n; i++)
			for (int32_t o = 0; o < ly->out; o++) {
				float s = y[(size_t)i * (size_t)ly->out + (size_t)o] + b[o];
				y[(size_t)i * (size_t)ly->out + (size_t)o] = ly->relu && s < 0 ? 0 : s;
			}
		return RS_OK;
	}
	for (int32_t i = 0; i < n; i++) {
		const float *restrict xi = x + (size_t)i * (size_t)ly->in;
		float *restrict yi = y + (size_t)i * (size_t)ly->out;
		for (int32_t o = 0; o < ly->out; o++) {
			const float *restrict w = W + (size_t)o * (size_t)ly->in;
			float s = b[o];
			for (int32_t k = 0; k < ly->in; k++)
				s += w[k] * xi[k];
			yi[o] = ly->relu && s < 0 ? 0 : s;
		}
	}
	return RS_OK;
}

/* dy (n x out, already through the activation) -> parameter grads and dx (n x in) */
static rs_status layer_backward(rs_dense *m, const layer *ly, const float *x, const float *dy, float *dx, int32_t n)
{
	const float *W = m->params + ly->w;
	float *dW = m->grads + ly->w, *db = m->grads + ly->b;
	if (m->gemm) {
		RSCHECK(m->gemm(m->gemm_ctx, 1, 0, ly->out, ly->in, n, dy, x, 1, dW)); /* dW += dy^T x */
		RSCHECK(m->gemm(m->gemm_ctx, 0, 0, n, ly->in, ly->out, dy, W, 0, dx)); /* dx = dy W */
		for (int32_t i = 0; i < n; i++)
			for (int32_t o = 0; o < ly->out; o++)
				db[o] += dy[(size_t)i * (size_t)ly->out + (size_t)o];
		return RS_OK;
	}
	for (int32_t i = 0; i < n; i++) {
		const float *restrict xi = x + (size_t)i * (size_t)ly->in;
		const float *restrict dyi = dy + (size_t)i * (size_t)ly->out;
		float *restrict dxi = dx + (size_t)i * (size_t)ly->in;
		memset(dxi, 0, sizeof(float) * (size_t)ly->in);
		for (int32_t o = 0; o < ly->out; o++) {
			float g = dyi[o];
			if (g == 0)
				continue;
			float *restrict dw = dW + (size_t)o * (size_t)ly->in;
			const float *restrict w = W + (size_t)o * (size_t)ly->in;
			db[o] += g;
			for (int32_t k = 0; k < ly->in; k++) {
				dw[k] += g * xi[k];
				dxi[k] += g * w[k];
			}
		}
	}
	return RS_OK;
}

/* Zero the gradient where a ReLU output was clamped. */
static void relu_mask(const float *y, float *dy, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (y[i] <= 0)
			dy[i] = 0;
}

/* The interaction: bottom output (act[nbottom]'s source) and pooled -> top input act[nbottom]. */
static void interact(rs_dense *m, const float *bottom, const float *pooled, int32_t n)
{
	int32_t D = m->bottom_out, F = m->nfeat, W = m->inter_width;
	float *out = m->act[m->nbottom];
	for (int32_t i = 0; i < n; i++) {
		const float *bi = bottom + (size_t)i * (size_t)D, *pi = pooled + (size_t)i * (size_t)m->emb_width;
		float *oi = out + (size_t)i * (size_t)W;
		memcpy(oi, bi, sizeof(float) * (size_t)D);
		if (m->inter == RS_INTERACTION_CAT) {
			memcpy(oi + D, pi, sizeof(float) * (size_t)m->emb_width);
			continue;
		}
		float *z = m->z + (size_t)i * (size_t)(F + 1) * (size_t)D;
		memcpy(z, bi, sizeof(float) * (size_t)D);
		memcpy(z + D, pi, sizeof(float) * (size_t)F * (size_t)D);
		int32_t k = D;
		for (int32_t a = 1; a <= F; a++)
			for (int32_t b = 0; b < a; b++) {
				float s = 0;
				for (int32_t c = 0; c < D; c++)
					s += z[a * D + c] * z[b * D + c];
				oi[k++] = s;
			}
	}
}

/* Gradient of the interaction: d(top input) -> d(bottom output), d(pooled). */
static void interact_backward(rs_dense *m, const float *dout_all, float *dbottom, float *dpooled, int32_t n)
{
	int32_t D = m->bottom_out, F = m->nfeat, W = m->inter_width;
	for (int32_t i = 0; i < n; i++) {
		const float *dout = dout_all + (size_t)i * (size_t)W;
		float *db = dbottom + (size_t)i * (size_t)D, *dp = dpooled + (size_t)i * (size_t)m->emb_width;
		memcpy(db, dout, sizeof(float) * (size_t)D);
		if (m->inter == RS_INTERACTION_CAT) {
			memcpy(dp, dout + D, sizeof(float) * (size_t)m->emb_width);
			continue;
		}
		const float *z = m->z + (size_t)i * (size_t)(F + 1) * (size_t)D;
		memset(dp, 0, sizeof(float) * (size_t)F * (size_t)D);
		int32_t k = D;
		for (int32_t a = 1; a <= F; a++)
			for (int32_t b = 0; b < a; b++) {
				float g = dout[k++];
				float *da = dp + (size_t)(a - 1) * (size_t)D;
				float *dbv = b == 0 ? db : dp + (size_t)(b - 1) * (size_t)D;
				for (int32_t c = 0; c < D; c++) {
					da[c] += g * z[b * D + c];
					dbv[c] += g * z[a * D + c];
				}
			}
	}
}

/* Forward to the logits (act[nlayers]); the bottom output goes to `bottom`. */
static rs_status forward(rs_dense *m, const float *dense, const float *pooled, int32_t n, float **bottom)
{
	RSCHECK(reserve(m, n));
	memcpy(m->act[0], dense, sizeof(float) * (size_t)n * RS_NUM_DENSE);
	for (int l = 0; l < m->nbottom; l++) {
		float *y = l + 1 == m->nbottom ? m->dact[m->nbottom] : m->act[l + 1]; /* bottom output kept aside */
		RSCHECK(layer_forward(m, &m->layers[l], m->act[l], y, n));
	}
	/* the bottom output is parked in dact[nbottom] (free until the backward pass) */
	*bottom = m->dact[m->nbottom];
	interact(m, *bottom, pooled, n);
	for (int l = m->nbottom; l < m->nlayers; l++)
		RSCHECK(layer_forward(m, &m->layers[l], m->act[l], m->act[l + 1], n));
	return RS_OK;
}

rs_status rs_dense_predict(rs_dense *m, const float *dense, const float *pooled, int32_t n, float *prob)
{
	float *bottom;
	RSCHECK(forward(m, dense, pooled, n, &bottom));
	for (int32_t i = 0; i < n; i++)
		prob[i] = 1.0f / (1.0f + expf(-m->act[m->nlayers][i]));
	return RS_OK;
}

rs_status rs_dense_forward_backward(rs_dense *m, const float *dense, const float *pooled, const float *labels,
				    int32_t n, float *dpooled, double *loss_sum)
{
	float *bottom;
	double loss = 0;
	if (n == 0) {
		*loss_sum = 0;
		return RS_OK;
	}
	RSCHECK(forward(m, dense, pooled, n, &bottom));
	/* keep the bottom output: the backward pass needs dact[nbottom] for its own gradient */
	float *bcopy = malloc(sizeof(float) * (size_t)n * (size_t)m->bottom_out);
	float *dbottom = malloc(sizeof(float) * (size_t)n * (size_t)m->bottom_out);
	if (!bcopy || !dbottom) {
		free(bcopy);
		free(dbottom);
		return RS_ENOMEM;
	}
	memcpy(bcopy, bottom, sizeof(float) * (size_t)n * (size_t)m->bottom_out);
	const float *logit = m->act[m->nlayers];
	float *dlogit = m->dact[m->nlayers];
	for (int32_t i = 0; i < n; i++) {
		float x = logit[i], y = labels[i];
		/* log(1 + e^x) - y x, stably */
		loss += (double)(fmaxf(x, 0) + log1pf(expf(-fabsf(x))) - y * x);
		dlogit[i] = 1.0f / (1.0f + expf(-x)) - y;
	}
	rs_status st = RS_OK;
	for (int l = m->nlayers - 1; st == RS_OK && l >= m->nbottom; l--) {
		layer *ly = &m->layers[l];
		if (ly->relu)
			relu_mask(m->act[l + 1], m->dact[l + 1], (size_t)n * (size_t)ly->out);
		st = layer_backward(m, ly, m->act[l], m->dact[l + 1], m->dact[l], n);
	}
	if (st == RS_OK)
		interact_backward(m, m->dact[m->nbottom], dbottom, dpooled, n);
	for (int l = m->nbottom - 1; st == RS_OK && l >= 0; l--) {
		layer *ly = &m->layers[l];
		const float *y = l + 1 == m->nbottom ? bcopy : m->act[l + 1];
		float *dy = l + 1 == m->nbottom ? dbottom : m->dact[l + 1];
		relu_mask(y, dy, (size_t)n * (size_t)ly->out);
		st = layer_backward(m, ly, m->act[l], dy, m->dact[l], n);
	}
	free(dbottom);
	free(bcopy);
	*loss_sum = loss;
	return st;
}

void rs_dense_sgd(rs_dense *m, float lr, float scale)
{
	float f = lr * scale;
	for (size_t i = 0; i < m->nparams; i++) {
		m->params[i] -= f * m->grads[i];
		m->grads[i] = 0;
	}
}
