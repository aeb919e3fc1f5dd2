/*
 * status.h - the status type every rowshift layer returns, and the error
 * message buffer that parsers and planners fill for the user.
 *
 * Convention: a function that can fail returns rs_status (RS_OK == 0). When
 * the failure is the user's (a bad config, a bad message, a corrupt file), the
 * function also takes an `rs_err *` and writes one human-readable line into it
 * naming what was wrong and where ("dlrm.json: table 'ads': field 'dim': must
 * be > 0"). Callers print err->msg; they never have to compose it themselves.
 * Bugs are asserts (RS_ASSERT), not statuses.
 *
 * Error paths: a function with a cleanup label starts with `rs_status st =
 * RS_OK` and reaches the label only through RSCHECKGOTO, RSFAILGOTO or
 * RSALLOCGOTO, each of which sets st first, so a failure can never return
 * RS_OK (a bare `goto out` after a later success would).
 */
#ifndef RS_STATUS_H
#define RS_STATUS_H

#include <stdarg.h>
#include <stddef.h>

typedef enum rs_status {
	RS_OK = 0,
	RS_EINVAL,       /* bad input: config, message, arguments from a user */
	RS_ENOMEM,       /* allocation failed */
	RS_EIO,          /* file or socket I/O failed */
	RS_ESYS,         /* a system call failed (errno logged by SYSCHECK) */
	RS_ETIMEDOUT,    /* a wait ran past its deadline */
	RS_EPEER,        /* a peer closed, died or misbehaved */
	RS_ECORRUPT,     /* checksum or framing mismatch in data we read */
	RS_EABORTED,     /* the operation was aborted on purpose */
	RS_ENOTFOUND,    /* a looked-up thing does not exist */
	RS_ENOSPACE,     /* does not fit: memory cap, full bucket, full buffer */
	RS_EUNSUPPORTED, /* valid request this build or backend cannot do */
	RS_ECUDA,        /* a CUDA or cuBLAS call failed */
	RS_ENCCL,        /* an NCCL call failed */
	RS_ECURL,        /* a libcurl call failed */
	RS_ELWS,         /* a libwebsockets call failed */
	RS_STATUS_COUNT
} rs_status;

/* Short, constant name of a status ("invalid input", "timed out", ...). */
const char *rs_status_str(rs_status st);

/* A one-line error message for the user. Zero-initialize before use. */
#define RS_ERR_MAX 512
typedef struct rs_err {
	char msg[RS_ERR_MAX];
} rs_err;

/*
 * Write a message into err (if err is non-NULL) and return st, so that
 * `return rs_err_set(err, RS_EINVAL, "%s: ...", file);` reads naturally.
 * The first message wins: a later call does not overwrite an earlier one, so
 * the innermost, most specific cause is what the user sees.
 */
rs_status rs_err_set(rs_err *err, rs_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
rs_status rs_err_vset(rs_err *err, rs_status st, const char *fmt, va_list ap);

/* Propagate a non-OK rs_status from a rowshift call. */
#define RSCHECK(call)                          \
	do {                                   \
		rs_status rs__st = (call);     \
		if (rs__st != RS_OK)           \
			return rs__st;         \
	} while (0)

#define RSCHECKGOTO(call, st, label)           \
	do {                                   \
		(st) = (call);                 \
		if ((st) != RS_OK)             \
			goto label;            \
	} while (0)

/* Fail with `code` (never RS_OK) at the cleanup label. */
#define RSFAILGOTO(st, code, label)            \
	do {                                   \
		(st) = (code);                 \
		goto label;                    \
	} while (0)

/* An allocation (or any pointer-returning call) that gave NULL: RS_ENOMEM at the cleanup label. */
#define RSALLOCGOTO(ptr, st, label)            \
	do {                                   \
		if (!(ptr)) {                  \
			(st) = RS_ENOMEM;      \
			goto label;            \
		}                              \
	} while (0)

/*
 * A bug, never bad input: when cond is false, log file:line and the
 * condition to stderr and abort. Always on (also in optimized builds);
 * for invariants whose failure would otherwise corrupt memory or data.
 */
#define RS_ASSERT(cond)                                                     \
	do {                                                                \
		if (!(cond))                                                \
			rs__assert_fail(#cond, __FILE__, __LINE__);         \
	} while (0)

void rs__assert_fail(const char *cond, const char *file, int line) __attribute__((noreturn));


#endif
