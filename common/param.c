/*
 * param.c - see param.h.
 */
#include "common/param.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

rs_status rs_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	char *end;
	long long v;
	if (!s || !*s)
		return RS_EINVAL;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return RS_EINVAL;
	*out = v;
	return RS_OK;
}

rs_status rs_parse_bytes(const char *s, uint64_t *out)
{
	static const struct {
		const char *suffix;
		double mult;
	} units[] = {
		{"", 1}, {"B", 1},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
	};
	char *end;
	double v;
	if (!s || !*s || *s == '-' || *s == '+')
		return RS_EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return RS_EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix) != 0)
			continue;
		double b = v * units[i].mult;
		if (b >= 18446744073709551615.0 || b != floor(b))
			return RS_EINVAL;
		*out = (uint64_t)b;
		return RS_OK;
	}
	return RS_EINVAL;
}

static rs_status set_value(rs_param *p, const char *val, const char *origin, rs_err *err)
{
	switch (p->type) {
	case RS_PARAM_STR:
		*(const char **)p->out = val;
		return RS_OK;
	case RS_PARAM_INT:
		if (rs_parse_int(val, INT64_MIN, INT64_MAX, (int64_t *)p->out) != RS_OK)
			return rs_err_set(err, RS_EINVAL, "%s %s: '%s' is not an integer", origin, p->flag, val);
		return RS_OK;
	case RS_PARAM_BYTES:
		if (rs_parse_bytes(val, (uint64_t *)p->out) != RS_OK)
			return rs_err_set(err, RS_EINVAL, "%s %s: '%s' is not a size (e.g. 4096, 512MiB, 16GiB)",
					  origin, p->flag, val);
		return RS_OK;
	case RS_PARAM_FLAG:
		*(bool *)p->out = !(val && (!strcmp(val, "0") || !strcmp(val, "false")));
		return RS_OK;
	}
	return RS_EINVAL;
}

rs_status rs_params_parse(rs_param *params, int nparams, int argc, char **argv, int first,
			  const char **positional, int max_positional, int *npositional, rs_err *err)
{
	*npositional = 0;
	for (int i = 0; i < nparams; i++) {
		rs_param *p = &params[i];
		const char *env = p->env ? getenv(p->env) : NULL;
		p->set = false;
		if (env) {
			RSCHECK(set_value(p, env, "environment", err));
			p->set = true;
		} else if (p->def) {
			RSCHECK(set_value(p, p->def, "default of", err));
		}
	}
	for (int a = first; a < argc; a++) {
		const char *arg = argv[a];
		if (arg[0] != '-' || arg[1] == '\0') {
			if (*npositional >= max_positional)
				return rs_err_set(err, RS_EINVAL, "unexpected argument '%s'", arg);
			positional[(*npositional)++] = arg;
			continue;
		}
		const char *eq = strchr(arg, '=');
		size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
		rs_param *p = NULL;
		for (int i = 0; i < nparams && !p; i++)
			if (strlen(params[i].flag) == len && !strncmp(params[i].flag, arg, len))
				p = &params[i];
		if (!p)
			return rs_err_set(err, RS_EINVAL, "unknown option '%.*s' (see --help)", (int)len, arg);
		const char *val = eq ? eq + 1 : NULL;
		if (p->type != RS_PARAM_FLAG && !val) {
			if (a + 1 >= argc)
				return rs_err_set(err, RS_EINVAL, "option %s needs a value (%s)", p->flag,
						  p->metavar ? p->metavar : "VALUE");
			val = argv[++a];
		}
		RSCHECK(set_value(p, val, "option", err));
		p->set = true;
	}
	return RS_OK;
}

void rs_params_usage(FILE *f, const char *usage, const rs_param *params, int nparams)
{
	fprintf(f, "%s\n\noptions:\n", usage);
	for (int i = 0; i < nparams; i++) {
		const rs_param *p = &params[i];
		char left[64];
		snprintf(left, sizeof(left), "%s%s%s", p->flag, p->metavar ? " " : "",
			 p->metavar ? p->metavar : "");
		fprintf(f, "  %-28s %s", left, p->help);
		if (p->def && p->type != RS_PARAM_FLAG)
			fprintf(f, " (default %s)", p->def);
		if (p->env)
			fprintf(f, " [env %s]", p->env);
		fputc('\n', f);
	}
}
