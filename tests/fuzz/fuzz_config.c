/*
 * fuzz_config.c - libFuzzer target for the model-config loader
 * (common/config.c): any bytes give a config or a clear error, never a
 * crash or a leak.
 */
#include "common/config.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rs_config *cfg = NULL;
	rs_err err = {0};
	if (rs_config_parse((const char *)data, size, "fuzz.json", &cfg, &err) == RS_OK) {
		if (!cfg || cfg->ntables < 1)
			abort();
		rs_config_free(cfg);
	} else if (cfg || !err.msg[0]) {
		abort(); /* an error leaves nothing behind and says what was wrong */
	}
	return 0;
}
