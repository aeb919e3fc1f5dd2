/*
 * fuzz_state.c - libFuzzer target for the coordinator's state file
 * (coordinator/state.c): any bytes are a checked state or a clear error,
 * and a state that parses writes out and parses back the same.
 */
#include "coordinator/state.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rs_state s, back;
	rs_err err = {0};
	if (rs_state_parse((const char *)data, size, "fuzz", &s, &err) != RS_OK) {
		if (!err.msg[0] || s.plan || s.world)
			abort();
		return 0;
	}
	/* what the parser promises the job */
	if (s.nworld < 1 || s.step > s.bound || (s.attempt_generation && (s.nuni < s.attempt_world || !s.union_of_old)))
		abort();
	for (int32_t r = 0; s.attempt_generation && r < s.nworld; r++)
		if (s.union_of_old[r] < 0 || s.union_of_old[r] >= s.nuni || strcmp(s.uni[s.union_of_old[r]], s.world[r]))
			abort();
	json_t *j = rs_state_to_json(&s);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (text) {
		rs_err e2 = {0};
		if (rs_state_parse(text, strlen(text), "again", &back, &e2) != RS_OK)
			abort();
		if (back.generation != s.generation || back.nworld != s.nworld || back.attempt_generation != s.attempt_generation)
			abort();
		rs_state_free(&back);
	}
	free(text);
	json_decref(j);
	rs_state_free(&s);
	return 0;
}
