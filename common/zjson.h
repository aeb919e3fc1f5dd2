/*
 * zjson.h - a JSON value as a short string: its compact text, deflated
 * with zlib and base64-encoded (RFC 4648, padded). The coordinator's state
 * keeps its plans this way: a plan's JSON repeats the same keys for every
 * shard and shrinks about eight times, which keeps the state of thousands
 * of tables on a thousand workers under the 1 MiB a Kubernetes ConfigMap
 * holds (state.h).
 *
 * Decoding trusts nothing: the text must be canonical base64, the zlib
 * stream whole (its Adler-32 checked) and end exactly at the text's end,
 * the inflated text at most `max` bytes and one JSON value.
 */
#ifndef RS_ZJSON_H
#define RS_ZJSON_H

#include "common/status.h"

#include <jansson.h>
#include <stddef.h>

/* v encoded; a new NUL-terminated string (free it), NULL without memory. */
char *rs_zjson_encode(const json_t *v);

/*
 * Decode text into *out (a new reference). Errors name `where`: RS_EINVAL
 * for text that is not such a string or inflates past max bytes, RS_ENOMEM.
 */
rs_status rs_zjson_decode(const char *text, size_t max, const char *where, json_t **out, rs_err *err);

/*
 * A JSON object given as itself or as a zjson string (a plan in the state,
 * or in a start message): *out a new reference. A string inflates to at
 * most 64 times its length (a plan deflates about 8:1; a zlib bomb, up to
 * 1032:1, is cut there), never less than 16 MiB, never more than cap.
 * RS_EINVAL naming `where` for anything else, RS_ENOMEM.
 */
rs_status rs_zjson_object(json_t *v, size_t cap, const char *where, json_t **out, rs_err *err);

#endif
