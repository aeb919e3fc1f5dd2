/*
 * fuzz_safetensors.c - libFuzzer target for the safetensors header parser
 * (common/safetensors.c): any bytes as a whole file give a validated index
 * of tensors that fit the buffer, or a clear error; never a crash or leak.
 */
#include "common/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rs_st_file *f = NULL;
	rs_err err = {0};
	if (rs_st_parse(data, size, size, "fuzz", &f, &err) == RS_OK) {
		for (int i = 0; i < f->ntensors; i++)
			if (f->data_start + f->tensors[i].end > size || f->tensors[i].begin > f->tensors[i].end)
				abort(); /* accepted a tensor outside the file */
		rs_st_close(f);
	} else if (f || !err.msg[0]) {
		abort();
	}
	return 0;
}
