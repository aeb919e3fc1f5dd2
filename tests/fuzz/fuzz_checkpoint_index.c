/*
 * fuzz_checkpoint_index.c - libFuzzer target for a checkpoint's index.json
 * (common/checkpoint.c): any bytes are a validated index or a clear error,
 * and what the parser accepts keeps its promises to the loader and to
 * `rowshiftctl checkpoint diff`: plain file names, shards inside their
 * table, every cell covered exactly once, sizes within the limits.
 */
#include "common/checkpoint.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rs_ckpt_index ix;
	rs_err err = {0};
	if (rs_checkpoint_index_parse((const char *)data, size, "fuzz", &ix, &err) != RS_OK) {
		if (!err.msg[0] || ix.tables || ix.ntables)
			abort();
		return 0;
	}
	if (ix.ntables < 1 || ix.step < 0 || !ix.dense_file || strchr(ix.dense_file, '/'))
		abort();
	for (int i = 0; i < ix.ntables; i++) {
		const rs_ckpt_table *t = &ix.tables[i];
		int64_t cells = 0;
		if (t->rows < 1 || t->dim < 1 || t->rows > RS_CKPT_MAX_ELEMENTS / t->dim || !t->name[0])
			abort();
		for (int k = 0; k < t->nshards; k++) {
			const rs_ckpt_shard *s = &t->shards[k];
			if (strchr(s->file, '/') || s->file[0] == '.' || s->row_offset < 0 || s->rows < 1 ||
			    s->row_offset + s->rows > t->rows || s->col_offset < 0 || s->cols < 1 || s->col_offset + s->cols > t->dim)
				abort();
			cells += s->rows * s->cols;
		}
		if (cells != t->rows * t->dim)
			abort(); /* tiled: no gap, no cell twice */
		for (int j = 0; j < i; j++)
			if (!strcmp(ix.tables[j].name, t->name))
				abort();
	}
	rs_checkpoint_index_free(&ix);
	return 0;
}
