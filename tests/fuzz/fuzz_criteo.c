/*
 * fuzz_criteo.c - libFuzzer target for the Criteo line parser
 * (worker/data_criteo.c): any bytes are a sample with finite features and a
 * 0/1 label, or rejected with a reason.
 */
#include "worker/data_criteo.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rs_criteo_sample s;
	const char *why = NULL;
	if (rs_criteo_parse_line((const char *)data, size, &s, &why) == RS_OK) {
		if (s.label != 0 && s.label != 1)
			abort();
		for (int i = 0; i < RS_NUM_DENSE; i++)
			if (!isfinite(s.dense[i]) || s.dense[i] < 0)
				abort();
	} else if (!why) {
		abort();
	}
	return 0;
}
