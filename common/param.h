/*
 * param.h - one place declares every knob of a program: its flag, its
 * environment variable, its default and its help text, so that --help, the
 * README and the Helm values agree (NCCL's NCCL_PARAM, in table form).
 *
 * A program declares a static array of rs_param, calls rs_params_parse()
 * once, and reads the typed values through the `out` pointers. Precedence:
 * command line > environment > default.
 */
#ifndef RS_PARAM_H
#define RS_PARAM_H

#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum rs_param_type {
	RS_PARAM_STR,   /* out: const char ** (points into argv/environ or the default) */
	RS_PARAM_INT,   /* out: int64_t * */
	RS_PARAM_BYTES, /* out: uint64_t *; accepts 123, 16GiB, 512MiB, 80GB, ... */
	RS_PARAM_FLAG,  /* out: bool *; takes no value */
} rs_param_type;

typedef struct rs_param {
	const char *flag;       /* "--world" */
	const char *env;        /* "ROWSHIFT_WORLD", or NULL */
	rs_param_type type;
	const char *def;        /* default as text, or NULL for none */
	const char *metavar;    /* "N" in "--world N" */
	const char *help;
	void *out;
	bool set;               /* filled by rs_params_parse: given on the command line or environment */
} rs_param;

/* One table row: RS_PARAM("--world", "ROWSHIFT_WORLD", RS_PARAM_INT, "2", "N", "workers", &world) */
#define RS_PARAM(flag, env, type, def, metavar, help, out) \
	{(flag), (env), (type), (def), (metavar), (help), (out), false}

/*
 * Parse argv[first..argc) against params. Non-flag arguments are collected,
 * in order, into positional[0..*npositional) (pointers into argv; at most
 * max_positional). Unknown flags, missing values and malformed numbers are
 * RS_EINVAL with a message naming the flag.
 */
rs_status rs_params_parse(rs_param *params, int nparams, int argc, char **argv, int first,
			  const char **positional, int max_positional, int *npositional, rs_err *err);

/* Print "usage" and one line per parameter (flag, metavar, help, default, env). */
void rs_params_usage(FILE *f, const char *usage, const rs_param *params, int nparams);

/* Parse a byte count: plain bytes or a number with KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024). */
rs_status rs_parse_bytes(const char *s, uint64_t *out);

/* Parse a decimal integer that must fill the whole string and lie in [lo, hi]. */
rs_status rs_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif
