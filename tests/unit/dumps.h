/*
 * dumps.h - reassembles whole tables from the per-rank dumps that
 * rs_trainer_dump writes, so tests can compare models trained on different
 * worlds or with resharding in the middle.
 */
#ifndef RS_DUMPS_H
#define RS_DUMPS_H

#include "common/config.h"

#include <stddef.h>

/*
 * Read DIR/TAG-rR for R in 0..nranks-1: one array per table (rows x dim,
 * fp32) and, at index ntables, the dense parameters (*dense_n floats).
 */
float **dumps_assemble(const rs_config *cfg, const char *dir, const char *tag, int nranks, size_t *dense_n);
void dumps_free(const rs_config *cfg, float **tables);

/* Largest |a - b| divided by the largest |a|. */
double dumps_max_rel_diff(const float *a, const float *b, size_t n);

#endif
