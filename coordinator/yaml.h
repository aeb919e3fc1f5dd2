/*
 * yaml.h - the subset of YAML that kubeconfig files are written in, read
 * into jansson values: block mappings and sequences by indentation
 * (including kubectl's "compact" sequences that sit at their key's
 * indentation), plain, 'single' and "double" quoted scalars, comments, the
 * empty flow collections {} and [], and a leading "---". A document whose
 * first character is '{' is read as JSON (kubectl accepts JSON kubeconfigs).
 * Scalars stay strings except true/false (booleans) and null/~ (null).
 *
 * Anything else (anchors, tags, multi-line scalars, non-empty flow
 * collections, tabs for indentation) is refused naming the line, never
 * guessed at.
 */
#ifndef RS_YAML_H
#define RS_YAML_H

#include "common/status.h"

#include <jansson.h>
#include <stddef.h>

#define RS_YAML_MAX_BYTES ((size_t)16 << 20)
#define RS_YAML_MAX_DEPTH 64

/* Parse len bytes; *out gets a new reference. `name` names the source in messages ("FILE:LINE: ..."). */
rs_status rs_yaml_parse(const char *text, size_t len, const char *name, json_t **out, rs_err *err);

#endif
