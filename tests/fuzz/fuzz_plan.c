/*
 * fuzz_plan.c - libFuzzer target for the plan reader (common/plan.c): any
 * bytes given as a previous plan must give a plan that validates, or a clear
 * error, never a crash or a leak.
 */
#include "common/config.h"
#include "common/plan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char config_json[] =
	"{\"tables\": ["
	"{\"name\": \"a\", \"rows\": 40, \"dim\": 8, \"features\": [\"x\"]},"
	"{\"name\": \"b\", \"rows\": 100, \"dim\": 16, \"features\": [\"y\"], \"sharding\": \"column_wise\"},"
	"{\"name\": \"z\", \"dim\": 4, \"features\": [\"w\"], \"zch\": {\"buckets\": 8, \"slots\": 64}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static rs_config *cfg;
	rs_plan *plan = NULL;
	rs_err err = {0};

	if (!cfg && rs_config_parse(config_json, strlen(config_json), "fuzz", &cfg, &err) != RS_OK)
		abort();
	if (rs_plan_parse((const char *)data, size, cfg, "fuzz", &plan, &err) == RS_OK) {
		if (rs_plan_validate(plan, cfg, &err) != RS_OK)
			abort(); /* the reader accepted an invalid plan */
		rs_plan_free(plan);
	} else if (plan || !err.msg[0]) {
		abort(); /* errors must leave nothing behind and say what was wrong */
	}
	return 0;
}
