/*
 * fuzz_watch.c - libFuzzer target for the watch stream parser
 * (coordinator/watch.c): any bytes, cut into chunks where the input says,
 * give events of the documented shapes or a clear error, never a crash.
 */
#include "coordinator/watch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(void *ctx, const rs_watch_event *ev)
{
	(void)ctx;
	if (!json_is_object(ev->object) || !ev->name || !ev->resource_version || !ev->message)
		abort();
	if ((ev->type == RS_WATCH_ERROR) != (ev->code != 0))
		abort();
	if (ev->type != RS_WATCH_ERROR && ev->type != RS_WATCH_BOOKMARK && !ev->name[0])
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	rs_watch_parser p = {.max_line = 1 << 16};
	rs_err err = {0};
	/* the first byte picks the chunk size, so splits land everywhere */
	size_t chunk = size ? (size_t)data[0] % 17 + 1 : 1;
	for (size_t at = size ? 1 : 0; at < size; at += chunk) {
		size_t n = size - at < chunk ? size - at : chunk;
		if (rs_watch_feed(&p, (const char *)data + at, n, check, NULL, &err) != RS_OK) {
			if (!err.msg[0])
				abort();
			break;
		}
	}
	rs_watch_free(&p);
	return 0;
}
