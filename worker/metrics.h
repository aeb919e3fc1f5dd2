/*
 * metrics.h - evaluation metrics: ROC AUC and log loss.
 */
#ifndef RS_METRICS_H
#define RS_METRICS_H

#include <stddef.h>

/*
 * Area under the ROC curve of scores against 0/1 labels: the probability
 * that a random positive scores above a random negative, ties counting one
 * half (exact, by sorting). 0.5 when either class is absent; NaN when a
 * score is NaN (a diverged model). Allocates a scratch copy; returns -1 if
 * that fails.
 */
double rs_auc(const float *scores, const float *labels, size_t n);

/* Mean binary cross-entropy of probabilities (clamped to [1e-7, 1 - 1e-7]). */
double rs_logloss(const float *probs, const float *labels, size_t n);

#endif
