/*
 * data_criteo.h - the Criteo TSV data source (data_criteo.c), and its line
 * parser on its own for tests and fuzzing.
 */
#ifndef RS_CRITEO_H
#define RS_CRITEO_H

#include "worker/data.h"

#define RS_CRITEO_CATEGORICAL 26
#define RS_CRITEO_MAX_LINE (64 * 1024)

typedef struct rs_criteo_sample {
	float label;
	float dense[RS_NUM_DENSE];             /* log(1 + max(x, 0)); 0 when empty */
	uint64_t cat[RS_CRITEO_CATEGORICAL];   /* the hexadecimal value */
	int present[RS_CRITEO_CATEGORICAL];    /* 0 for an empty field */
} rs_criteo_sample;

/*
 * Parse one line (a trailing "\n" or "\r\n" is allowed). RS_EINVAL with *why
 * set to a constant reason when the line is malformed.
 */
rs_status rs_criteo_parse_line(const char *line, size_t len, rs_criteo_sample *s, const char **why);

/* Open cfg->data.paths; RS_EIO for an unreadable file, RS_EINVAL when no line is good. */
rs_status rs_criteo_open(const rs_config *cfg, rs_data **out, rs_err *err);

/* Good lines indexed. */
int64_t rs_criteo_lines(const rs_data *d);

#endif
