/*
 * metrics.c - see metrics.h. AUC by the Mann-Whitney statistic over ranks,
 * tied scores getting their average rank.
 */
#include "worker/metrics.h"

#include <math.h>
#include <stdlib.h>

typedef struct scored {
	float score, label;
} scored;

static int cmp_score(const void *a, const void *b)
{
	float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
	return (x > y) - (x < y);
}

double rs_auc(const float *scores, const float *labels, size_t n)
{
	double pos = 0, rank_sum = 0;
	for (size_t i = 0; i < n; i++)
		if (isnan(scores[i]))
			return NAN; /* a diverged model: no order to rank (and ties would never end) */
	scored *v = malloc(sizeof(scored) * (n ? n : 1));
	if (!v)
		return -1;
	for (size_t i = 0; i < n; i++) {
		v[i] = (scored){scores[i], labels[i]};
		pos += labels[i] > 0.5f;
	}
	qsort(v, n, sizeof(scored), cmp_score);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		double p = 0;
		while (j < n && v[j].score == v[i].score)
			p += v[j++].label > 0.5f;
		rank_sum += p * ((double)(i + 1) + (double)j) / 2; /* average rank of the tie group */
		i = j;
	}
	free(v);
	double neg = (double)n - pos;
	if (pos == 0 || neg == 0)
		return 0.5;
	return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

double rs_logloss(const float *probs, const float *labels, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++) {
		double p = fmin(fmax(probs[i], 1e-7), 1 - 1e-7);
		s -= labels[i] > 0.5f ? log(p) : log(1 - p);
	}
	return n ? s / (double)n : 0;
}
