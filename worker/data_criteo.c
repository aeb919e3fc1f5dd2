/*
 * data_criteo.c - the Criteo TSV data source (see data.h and criteo.h): a
 * label, 13 integer columns and 26 hexadecimal categorical columns per line,
 * tab-separated, any field but the label possibly empty.
 *
 * Opening indexes the good lines of every file (their byte offsets) and
 * counts the bad ones, reporting the first few as FILE:LINE: reason. Sample
 * i of training is good line i modulo the training lines (epochs wrap); the
 * last data.eval_samples good lines are held out for evaluation. Integer
 * features become log(1 + max(x, 0)), as DLRM does; a categorical value is
 * hashed with its column into the table's rows (or kept as a raw 64-bit ID
 * for a ZCH table). Features named C1..C26 read those columns; otherwise the
 * k-th feature reads column C(k+1).
 */
#include "worker/data_criteo.h"
#include "common/file.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/rng.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_REPORTED 5

typedef struct line_ref {
	int32_t file;
	int64_t offset;
	int32_t len;
} line_ref;

typedef struct feature {
	int column;          /* 0..25, or -1: no column, always an empty bag */
	int64_t rows;
	int zch;
} feature;

typedef struct criteo {
	rs_data base;
	int nfiles;
	int *fd;
	line_ref *lines;
	size_t cap_lines;
	int64_t nlines, ntrain, neval;
	int64_t eval_start;   /* the held-out lines are [eval_start, eval_start + neval): the last good ones */
	feature *f;
	char *buf;
} criteo;

rs_status rs_criteo_parse_line(const char *line, size_t len, rs_criteo_sample *s, const char **why)
{
	const char *p = line, *end = line + len;
	int field = 0;
	if (len && end[-1] == '\n')
		end--;
	if (end > p && end[-1] == '\r')
		end--;
	memset(s, 0, sizeof(*s));
	for (;;) {
		const char *q = p;
		while (q < end && *q != '\t')
			q++;
		size_t n = (size_t)(q - p);
		if (field == 0) {
			if (n != 1 || (*p != '0' && *p != '1')) {
				*why = "label is not 0 or 1";
				return RS_EINVAL;
			}
			s->label = (float)(*p - '0');
		} else if (field <= RS_NUM_DENSE) {
			int64_t v = 0;
			int neg = n > 0 && *p == '-';
			if (n - (size_t)neg > 18 || (neg && n == 1)) { /* 18 digits always fit in int64 */
				*why = "integer field out of range";
				return RS_EINVAL;
			}
			for (size_t k = neg; k < n; k++) {
				if (p[k] < '0' || p[k] > '9') {
					*why = "integer field is not a number";
					return RS_EINVAL;
				}
				v = v * 10 + (p[k] - '0');
			}
			s->dense[field - 1] = (float)log1p((double)(neg || v < 0 ? 0 : v));
		} else if (field <= RS_NUM_DENSE + RS_CRITEO_CATEGORICAL) {
			uint64_t v = 0;
			if (n > 16) {
				*why = "categorical field longer than 16 hex digits";
				return RS_EINVAL;
			}
			for (size_t k = 0; k < n; k++) {
				char c = p[k];
				int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
					: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
				if (d < 0) {
					*why = "categorical field is not hexadecimal";
					return RS_EINVAL;
				}
				v = v << 4 | (uint64_t)d;
			}
			s->present[field - 1 - RS_NUM_DENSE] = n > 0;
			s->cat[field - 1 - RS_NUM_DENSE] = v;
		} else {
			*why = "more than 40 fields";
			return RS_EINVAL;
		}
		field++;
		if (q >= end)
			break;
		p = q + 1;
	}
	if (field != 1 + RS_NUM_DENSE + RS_CRITEO_CATEGORICAL) {
		*why = "fewer than 40 fields";
		return RS_EINVAL;
	}
	return RS_OK;
}

/* Index the good lines of one file. */
static rs_status index_file(criteo *c, int fi, const char *path, int64_t *bad, rs_err *err)
{
	FILE *f = fdopen(dup(c->fd[fi]), "r");
	char *line = NULL;
	size_t cap = 0;
	int64_t off = 0, lineno = 0;
	ssize_t n;
	if (!f)
		return rs_err_set(err, RS_EIO, "%s: %s", path, strerror(errno));
	while ((n = getline(&line, &cap, f)) > 0) {
		rs_criteo_sample s;
		const char *why = NULL;
		lineno++;
		if (n > RS_CRITEO_MAX_LINE)
			why = "line longer than 64 KiB";
		else if (rs_criteo_parse_line(line, (size_t)n, &s, &why) == RS_OK)
			why = NULL;
		if (why) {
			if (++*bad <= MAX_REPORTED)
				RS_WARN("%s:%lld: %s: line skipped", path, (long long)lineno, why);
		} else {
			if (rs_grow(&c->lines, &c->cap_lines, (size_t)c->nlines + 1, sizeof(line_ref)) != RS_OK) {
				free(line);
				fclose(f);
				return RS_ENOMEM;
			}
			c->lines[c->nlines++] = (line_ref){fi, off, (int32_t)n};
		}
		off += n;
	}
	free(line);
	fclose(f);
	return RS_OK;
}

static int32_t column_of(const char *name, int k)
{
	if (name[0] == 'C' && name[1] >= '1' && name[1] <= '9') {
		char *e;
		long v = strtol(name + 1, &e, 10);
		if (!*e && v >= 1 && v <= RS_CRITEO_CATEGORICAL)
			return (int32_t)v - 1;
	}
	return k < RS_CRITEO_CATEGORICAL ? k : -1;
}

static rs_status criteo_fill(rs_data *d, int64_t first, int32_t count, rs_batch *b)
{
	criteo *c = (criteo *)d;
	RSCHECK(rs_batch_reserve(b, count));
	b->first_sample = first;
	b->size = count;
	for (int32_t f = 0; f < d->nfeatures; f++) {
		RSCHECK(rs_batch_reserve_ids(b, f, count + 1));
		b->offsets[f][0] = 0;
	}
	for (int32_t i = 0; i < count; i++) {
		int64_t k = first + i;
		int64_t li = k >= RS_EVAL_BASE ? c->eval_start + (k - RS_EVAL_BASE) % c->neval : k % c->ntrain;
		RS_ASSERT(li >= 0 && li < c->nlines);
		const line_ref *r = &c->lines[li];
		rs_criteo_sample s;
		const char *why;
		if (pread(c->fd[r->file], c->buf, (size_t)r->len, r->offset) != r->len ||
		    rs_criteo_parse_line(c->buf, (size_t)r->len, &s, &why) != RS_OK)
			return RS_EIO; /* the file changed under us */
		memcpy(b->dense + (size_t)i * RS_NUM_DENSE, s.dense, sizeof(s.dense));
		b->labels[i] = s.label;
		for (int32_t f = 0; f < d->nfeatures; f++) {
			const feature *fe = &c->f[f];
			int32_t o = b->offsets[f][i];
			if (fe->column >= 0 && s.present[fe->column]) {
				uint64_t h = rs_mix64(s.cat[fe->column] ^ ((uint64_t)(fe->column + 1) << 56));
				b->ids[f][o++] = fe->zch ? (int64_t)(h >> 1) : (int64_t)(h % (uint64_t)fe->rows);
			}
			b->offsets[f][i + 1] = o;
		}
	}
	return RS_OK;
}

static double criteo_teacher(rs_data *d, int64_t sample)
{
	(void)d;
	(void)sample;
	return -1; /* real data has no teacher */
}

static void criteo_destroy(rs_data *d)
{
	criteo *c = (criteo *)d;
	for (int i = 0; i < c->nfiles; i++)
		if (c->fd[i] >= 0)
			close(c->fd[i]);
	free(c->fd);
	free(c->lines);
	free(c->f);
	free(c->buf);
	free(c);
}

static const rs_data_ops criteo_ops = {
	.name = "criteo",
	.fill = criteo_fill,
	.teacher_prob = criteo_teacher,
	.destroy = criteo_destroy,
};

rs_status rs_criteo_open(const rs_config *cfg, rs_data **out, rs_err *err)
{
	criteo *c = calloc(1, sizeof(*c));
	int64_t bad = 0;
	rs_status st = RS_ENOMEM;
	*out = NULL;
	if (!c)
		return RS_ENOMEM;
	c->base.ops = &criteo_ops;
	for (int t = 0; t < cfg->ntables; t++)
		c->base.nfeatures += cfg->tables[t].nfeatures;
	c->nfiles = cfg->data.npaths;
	c->fd = malloc(sizeof(int) * (size_t)(c->nfiles + 1));
	c->f = calloc((size_t)c->base.nfeatures + 1, sizeof(feature));
	c->buf = malloc(RS_CRITEO_MAX_LINE + 1);
	if (!c->fd || !c->f || !c->buf)
		goto fail;
	for (int i = 0; i < c->nfiles; i++)
		c->fd[i] = -1;
	int k = 0;
	for (int t = 0; t < cfg->ntables; t++)
		for (int j = 0; j < cfg->tables[t].nfeatures; j++, k++)
			c->f[k] = (feature){column_of(cfg->tables[t].features[j], k), cfg->tables[t].rows, cfg->tables[t].has_zch};
	for (int i = 0; i < c->nfiles; i++) {
		/* a FIFO or a device (/dev/zero) would block the worker or feed it forever */
		RSCHECKGOTO(rs_file_open_regular(cfg->data.paths[i], 0, &c->fd[i], err), st, fail);
		RSCHECKGOTO(index_file(c, i, cfg->data.paths[i], &bad, err), st, fail);
	}
	if (bad)
		RS_WARN("criteo: %lld malformed line(s) skipped, %lld good", (long long)bad, (long long)c->nlines);
	if (c->nlines == 0) {
		st = rs_err_set(err, RS_EINVAL, "%s: no good Criteo lines (%lld malformed)", cfg->data.paths[0], (long long)bad);
		goto fail;
	}
	c->neval = cfg->data.eval_samples < c->nlines ? cfg->data.eval_samples : c->nlines / 2;
	if (c->neval < 1)
		c->neval = 1; /* one good line: it is both the training and the held-out data */
	c->eval_start = c->nlines - c->neval;
	c->ntrain = c->eval_start > 0 ? c->eval_start : c->nlines;
	*out = &c->base;
	return RS_OK;
fail:
	criteo_destroy(&c->base);
	return st;
}

int64_t rs_criteo_lines(const rs_data *d) { return ((const criteo *)d)->nlines; }
