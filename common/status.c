/*
 * status.c - names of rs_status values and the rs_err message helper.
 */
#include "common/status.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const status_names[RS_STATUS_COUNT] = {
	[RS_OK] = "ok",
	[RS_EINVAL] = "invalid input",
	[RS_ENOMEM] = "out of memory",
	[RS_EIO] = "I/O error",
	[RS_ESYS] = "system call failed",
	[RS_ETIMEDOUT] = "timed out",
	[RS_EPEER] = "peer lost",
	[RS_ECORRUPT] = "corrupt data",
	[RS_EABORTED] = "aborted",
	[RS_ENOTFOUND] = "not found",
	[RS_ENOSPACE] = "does not fit",
	[RS_EUNSUPPORTED] = "unsupported",
	[RS_ECUDA] = "CUDA error",
	[RS_ENCCL] = "NCCL error",
	[RS_ECURL] = "libcurl error",
	[RS_ELWS] = "libwebsockets error",
};

const char *rs_status_str(rs_status st)
{
	if ((unsigned)st >= RS_STATUS_COUNT)
		return "unknown status";
	return status_names[st];
}

rs_status rs_err_vset(rs_err *err, rs_status st, const char *fmt, va_list ap)
{
	if (err && err->msg[0] == '\0')
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	return st;
}

rs_status rs_err_set(rs_err *err, rs_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	rs_err_vset(err, st, fmt, ap);
	va_end(ap);
	return st;
}

void rs__assert_fail(const char *cond, const char *file, int line)
{
	fprintf(stderr, "rowshift: bug: %s:%d: assertion failed: %s\n", file, line, cond);
	fflush(stderr);
	abort();
}
