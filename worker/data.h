/*
 * data.h - where training samples come from: one interface, two sources.
 *
 * Samples are numbered globally; a source fills any contiguous range of
 * them into an rs_batch, and the same sample is identical whoever asks and
 * in whatever slices (this is what makes training results independent of
 * the world size). Held-out evaluation samples are numbered from
 * RS_EVAL_BASE up and never overlap training samples.
 *
 *   synthetic  Zipf-distributed IDs, normal dense features and labels drawn
 *              from a hidden "teacher" model (data_synth.c)
 *   criteo     Criteo TSV files (data_criteo.c)
 */
#ifndef RS_DATA_H
#define RS_DATA_H

#include "common/batch.h"
#include "common/config.h"
#include "common/status.h"

#define RS_EVAL_BASE ((int64_t)1 << 62)

typedef struct rs_data rs_data;

typedef struct rs_data_ops {
	const char *name;
	/* Fill samples [first, first + count) into b (resized as needed). */
	rs_status (*fill)(rs_data *d, int64_t first, int32_t count, rs_batch *b);
	/* The teacher's probability of a positive label for a sample, or -1 when the source has no teacher. */
	double (*teacher_prob)(rs_data *d, int64_t sample);
	void (*destroy)(rs_data *d);
} rs_data_ops;

struct rs_data {
	const rs_data_ops *ops;
	int32_t nfeatures;
};

/* The source the config's data section names. */
rs_status rs_data_open(const rs_config *cfg, rs_data **out, rs_err *err);

/* The synthetic source (data_synth.c). */
rs_status rs_synth_open(const rs_config *cfg, rs_data **out, rs_err *err);

static inline rs_status rs_data_fill(rs_data *d, int64_t first, int32_t count, rs_batch *b)
{
	return d->ops->fill(d, first, count, b);
}

static inline void rs_data_close(rs_data *d)
{
	if (d)
		d->ops->destroy(d);
}

#endif
