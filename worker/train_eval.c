/*
 * train_eval.c - the trainer's held-out evaluation (rs_trainer_evaluate)
 * and the teacher's AUC on the same samples. Part of the trainer
 * (train.h); reaches its insides through train_internal.h.
 */
#include "worker/train_internal.h"
#include "worker/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

rs_status rs_trainer_evaluate(rs_trainer *tr, int64_t n, double *auc, double *logloss, rs_err *err)
{
	int64_t lo = n * tr->rank / tr->world, hi = n * (tr->rank + 1) / tr->world;
	int32_t w = tr->world, m = (int32_t)(hi - lo);
	float *mine = NULL, *all = NULL, *packed = NULL, *probs = NULL, *labels = NULL;
	size_t *sc = NULL, *rc = NULL;
	rs_status st = RS_OK;
	RSCHECKGOTO(rs__said(rs_data_fill(tr->data, RS_EVAL_BASE + lo, m, &tr->batch), "reading the evaluation samples", err),
		    st, out);
	RSCHECKGOTO(rs__lookup(tr, 0, 0, err), st, out);
	mine = malloc(sizeof(float) * 2 * (size_t)(m + 1));
	all = malloc(sizeof(float) * 2 * (size_t)(n + 1));
	sc = malloc(sizeof(size_t) * (size_t)w);
	rc = malloc(sizeof(size_t) * (size_t)w);
	packed = malloc(sizeof(float) * 2 * (size_t)(m + 1) * (size_t)w);
	probs = malloc(sizeof(float) * (size_t)(n + 1));
	labels = malloc(sizeof(float) * (size_t)(n + 1));
	if (!mine || !all || !sc || !rc || !packed || !probs || !labels)
		RSFAILGOTO(st, RS_ENOMEM, out);
	RSCHECKGOTO(rs__said(rs_dense_predict(tr->dense, tr->batch.dense, tr->pooled, m, mine), "the dense network", err), st,
		    out);
	memcpy(mine + m, tr->batch.labels, sizeof(float) * (size_t)m);
	/* every rank gets every rank's (probabilities, labels) */
	for (int32_t p = 0; p < w; p++) {
		memcpy(packed + (size_t)p * 2 * (size_t)m, mine, sizeof(float) * 2 * (size_t)m);
		sc[p] = sizeof(float) * 2 * (size_t)m;
		rc[p] = sizeof(float) * 2 * (size_t)(n * (p + 1) / w - n * p / w);
	}
	RSCHECKGOTO(rs__said_transport(tr, rs_transport_alltoallv(tr->t, packed, sc, all, rc),
				   "the predictions (all-to-all)", err),
		    st, out);
	/* regroup: probabilities then labels per rank, into two arrays */
	size_t o = 0, k = 0;
	for (int32_t p = 0; p < w; p++) {
		size_t cnt = (size_t)(n * (p + 1) / w - n * p / w);
		memcpy(probs + k, all + o, sizeof(float) * cnt);
		memcpy(labels + k, all + o + cnt, sizeof(float) * cnt);
		o += 2 * cnt;
		k += cnt;
	}
	*auc = rs_auc(probs, labels, (size_t)n);
	if (*auc < 0)
		RSFAILGOTO(st, RS_ENOMEM, out); /* its scratch copy */
	if (isnan(*auc))
		RSFAILGOTO(st, rs_err_set(err, RS_EINVAL, "evaluation: the model scores NaN: training diverged (a learning "
					  "rate too high?)"), out);
	*logloss = rs_logloss(probs, labels, (size_t)n);
out:
	free(labels);
	free(probs);
	free(packed);
	free(rc);
	free(sc);
	free(all);
	free(mine);
	return rs__said(st, "evaluation", err);
}

double rs_trainer_teacher_auc(rs_trainer *tr, int64_t n)
{
	if (n <= 0 || tr->data->ops->teacher_prob(tr->data, RS_EVAL_BASE) < 0)
		return -1;
	float *p = malloc(sizeof(float) * (size_t)n);
	double auc = -1;
	if (p && rs_data_fill(tr->data, RS_EVAL_BASE, (int32_t)n, &tr->batch) == RS_OK) {
		for (int64_t i = 0; i < n; i++)
			p[i] = (float)tr->data->ops->teacher_prob(tr->data, RS_EVAL_BASE + i);
		auc = rs_auc(p, tr->batch.labels, (size_t)n);
	}
	free(p);
	return auc;
}
