/*
 * data_synth.c - the synthetic data source (see data.h). Every value of
 * sample i is drawn from streams keyed by (seed, i, what), so samples are
 * pure functions of their index.
 *
 * A sample: 13 dense features, roughly normal; for each feature f a bag of
 * about pooling_factor IDs (at least one when pooling_factor >= 1, else one
 * with probability pooling_factor), each a Zipf(zipf_alpha) rank scattered
 * over the table's rows by a hash (for ZCH tables: a raw 64-bit ID from a
 * space four times the slots); and a label drawn from the teacher:
 *   logit = b + w . dense + sum_f (1 / sqrt(len_f)) sum_{id in bag f} v_f(id)
 * with v_f(id) a fixed pseudo-random value per (feature, id). A model that
 * learns v in its embeddings reaches the teacher's AUC, the ceiling.
 */
#include "worker/data.h"
#include "common/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TEACHER_SALT 0x7EAC4E2ull
#define FEATURE_SCALE 2.0
#define DENSE_SCALE 0.6

typedef struct feature {
	int64_t rows;        /* id range for plain tables */
	int zch;
	double pooling_factor;
	rs_zipf zipf;
	uint64_t salt;
} feature;

typedef struct synth {
	rs_data base;
	uint64_t seed;
	feature *f;
	double w[RS_NUM_DENSE], bias, scale;
} synth;

static double normalish(rs_rng *r)
{
	return (rs_rng_uniform(r) + rs_rng_uniform(r) + rs_rng_uniform(r) - 1.5) * 2.0;
}

static int32_t bag_length(const feature *f, rs_rng *r)
{
	double pf = f->pooling_factor, u = rs_rng_uniform(r);
	if (pf < 1)
		return u < pf ? 1 : 0;
	/* uniform on [1, 2 pf - 1]: mean pf */
	int32_t hi = (int32_t)(2 * pf - 1);
	return 1 + (int32_t)(u * hi);
}

static int64_t draw_id(const feature *f, rs_rng *r)
{
	uint64_t h = rs_mix64(rs_zipf_sample(&f->zipf, r) ^ f->salt);
	return f->zch ? (int64_t)(h >> 1) : (int64_t)(h % (uint64_t)f->rows);
}

static double value_of(const synth *s, int32_t f, int64_t id)
{
	uint64_t h = rs_mix64((uint64_t)id ^ s->f[f].salt ^ TEACHER_SALT);
	return ((double)(h >> 11) / 9007199254740992.0 * 2 - 1) * s->scale;
}

/* One sample: its dense features, its bags (written through the callbacks' arrays), its teacher logit. */
static double make_sample(const synth *s, int64_t i, float *dense, int64_t **ids_out, int32_t *lens)
{
	rs_rng r = rs_rng_make(s->seed, (uint64_t)i, 1);
	double logit = s->bias;
	for (int k = 0; k < RS_NUM_DENSE; k++) {
		double x = normalish(&r);
		if (dense)
			dense[k] = (float)x;
		logit += s->w[k] * x;
	}
	for (int32_t f = 0; f < s->base.nfeatures; f++) {
		rs_rng rf = rs_rng_make(s->seed, (uint64_t)i, 100 + (uint64_t)f);
		int32_t len = bag_length(&s->f[f], &rf);
		double sum = 0;
		for (int32_t j = 0; j < len; j++) {
			int64_t id = draw_id(&s->f[f], &rf);
			if (ids_out)
				ids_out[f][j] = id;
			sum += value_of(s, f, id);
		}
		if (lens)
			lens[f] = len;
		if (len)
			logit += sum / sqrt((double)len);
	}
	return logit;
}

static rs_status synth_fill(rs_data *d, int64_t first, int32_t count, rs_batch *b)
{
	synth *s = (synth *)d;
	int32_t nf = d->nfeatures, *lens = malloc(sizeof(int32_t) * (size_t)(nf + 1));
	int64_t **tmp = calloc((size_t)nf + 1, sizeof(int64_t *));
	rs_status st = RS_ENOMEM;
	if (!lens || !tmp || rs_batch_reserve(b, count) != RS_OK)
		goto out;
	int64_t *cursor = calloc((size_t)nf + 1, sizeof(int64_t));
	if (!cursor)
		goto out;
	b->first_sample = first;
	b->size = count;
	for (int32_t f = 0; f < nf; f++)
		b->offsets[f][0] = 0;
	for (int32_t i = 0; i < count; i++) {
		/* make room for the largest bag each feature can draw */
		for (int32_t f = 0; f < nf; f++) {
			int64_t most = (int64_t)(2 * s->f[f].pooling_factor) + 2;
			if (rs_batch_reserve_ids(b, f, cursor[f] + most) != RS_OK) {
				free(cursor);
				goto out;
			}
			tmp[f] = b->ids[f] + cursor[f];
		}
		double logit = make_sample(s, first + i, b->dense + (size_t)i * RS_NUM_DENSE, tmp, lens);
		rs_rng rl = rs_rng_make(s->seed, (uint64_t)(first + i), 2);
		b->labels[i] = rs_rng_uniform(&rl) < 1.0 / (1.0 + exp(-logit)) ? 1.0f : 0.0f;
		for (int32_t f = 0; f < nf; f++) {
			cursor[f] += lens[f];
			b->offsets[f][i + 1] = (int32_t)cursor[f];
		}
	}
	free(cursor);
	st = RS_OK;
out:
	free(tmp);
	free(lens);
	return st;
}

static double synth_teacher_prob(rs_data *d, int64_t sample)
{
	return 1.0 / (1.0 + exp(-make_sample((synth *)d, sample, NULL, NULL, NULL)));
}

static void synth_destroy(rs_data *d)
{
	synth *s = (synth *)d;
	free(s->f);
	free(s);
}

static const rs_data_ops synth_ops = {
	.name = "synthetic",
	.fill = synth_fill,
	.teacher_prob = synth_teacher_prob,
	.destroy = synth_destroy,
};

rs_status rs_synth_open(const rs_config *cfg, rs_data **out, rs_err *err)
{
	(void)err;
	synth *s = calloc(1, sizeof(*s));
	int32_t nf = 0;
	*out = NULL;
	if (!s)
		return RS_ENOMEM;
	for (int t = 0; t < cfg->ntables; t++)
		nf += cfg->tables[t].nfeatures;
	s->f = calloc((size_t)nf, sizeof(feature));
	if (!s->f) {
		free(s);
		return RS_ENOMEM;
	}
	s->base = (rs_data){.ops = &synth_ops, .nfeatures = nf};
	s->seed = cfg->data.seed;
	s->scale = FEATURE_SCALE / sqrt((double)nf);
	int32_t f = 0;
	for (int t = 0; t < cfg->ntables; t++) {
		const rs_table_config *tc = &cfg->tables[t];
		for (int k = 0; k < tc->nfeatures; k++, f++) {
			feature *fe = &s->f[f];
			fe->rows = tc->rows;
			fe->zch = tc->has_zch;
			fe->pooling_factor = tc->pooling_factor;
			fe->salt = rs_mix64(s->seed * 1000003 + (uint64_t)f + 1);
			rs_zipf_init(&fe->zipf, fe->zch ? 4 * (uint64_t)tc->rows : (uint64_t)tc->rows, cfg->data.zipf_alpha);
		}
	}
	rs_rng r = rs_rng_make(s->seed, TEACHER_SALT, 3);
	for (int k = 0; k < RS_NUM_DENSE; k++)
		s->w[k] = (rs_rng_uniform(&r) * 2 - 1) * DENSE_SCALE / sqrt(RS_NUM_DENSE);
	s->bias = -0.5;
	*out = &s->base;
	return RS_OK;
}
