/*
 * dumps.c - see dumps.h.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/dumps.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float **dumps_assemble(const rs_config *cfg, const char *dir, const char *tag, int nranks, size_t *dense_n)
{
	float **t = calloc((size_t)cfg->ntables + 1, sizeof(float *));
	for (int i = 0; i < cfg->ntables; i++)
		t[i] = calloc((size_t)(cfg->tables[i].rows * cfg->tables[i].dim), sizeof(float));
	for (int r = 0; r < nranks; r++) {
		char path[256];
		snprintf(path, sizeof(path), "%s/%s-r%d", dir, tag, r);
		FILE *f = fopen(path, "rb");
		if (!f)
			fail_msg("no dump %s", path);
		int32_t h32[2], cols;
		int64_t h64[2];
		while (fread(h32, sizeof(h32), 1, f) == 1) {
			assert_int_equal(fread(h64, sizeof(h64), 1, f), 1);
			assert_int_equal(fread(&cols, sizeof(cols), 1, f), 1);
			float *v = malloc(sizeof(float) * (size_t)(h64[1] * cols));
			assert_int_equal(fread(v, sizeof(float), (size_t)(h64[1] * cols), f), (size_t)(h64[1] * cols));
			if (h32[0] < 0) {
				free(t[cfg->ntables]);
				t[cfg->ntables] = v;
				*dense_n = (size_t)cols;
				continue;
			}
			int32_t dim = cfg->tables[h32[0]].dim;
			for (int64_t row = 0; row < h64[1]; row++)
				memcpy(t[h32[0]] + (h64[0] + row) * dim + h32[1], v + row * cols, sizeof(float) * (size_t)cols);
			free(v);
		}
		fclose(f);
	}
	return t;
}

void dumps_free(const rs_config *cfg, float **tables)
{
	for (int i = 0; i <= cfg->ntables; i++)
		free(tables[i]);
	free(tables);
}

double dumps_max_rel_diff(const float *a, const float *b, size_t n)
{
	double diff = 0, mag = 1e-30;
	for (size_t i = 0; i < n; i++) {
		diff = fmax(diff, fabs((double)a[i] - b[i]));
		mag = fmax(mag, fabs((double)a[i]));
	}
	return diff / mag;
}
