/*
 * log.h - leveled logging to stderr, and the CHECK macros for system calls.
 *
 * Every line carries a UTC timestamp, the level and the process's component
 * name ("coordinator", "worker-3"), set once with rs_log_init(). The level
 * comes from rs_log_init() or the RS_LOG_LEVEL environment variable
 * (error|warn|info|debug). Safe to call from any thread: each line is written
 * with one write(2). A message may quote what a peer sent: control
 * characters (below 0x20, 0x7f), malformed UTF-8 and the code points a
 * terminal acts on (C1 controls, line separators, bidi overrides) are
 * written as \xNN, so nothing in a message can start a line of its own or
 * drive the terminal.
 *
 * SYSCHECK(call) evaluates a system call that returns -1 on failure, logs
 * file:line, the call's text and strerror(errno), and returns RS_ESYS from the
 * enclosing function. SYSCHECKGOTO(call, st, label) sets st and jumps to the
 * cleanup label instead. Other foreign APIs have their own macros beside
 * their wrappers (CUDACHECK in kernels/cuda, NCCLCHECK in worker, ...).
 */
#ifndef RS_LOG_H
#define RS_LOG_H

#include "common/status.h"

#include <errno.h>
#include <string.h>

typedef enum rs_log_level {
	RS_LOG_ERROR = 0,
	RS_LOG_WARN,
	RS_LOG_INFO,
	RS_LOG_DEBUG,
} rs_log_level;

/* Set the component name (copied) and level; -1 keeps RS_LOG_LEVEL/info. */
void rs_log_init(const char *component, int level);
int rs_log_enabled(rs_log_level level);
void rs_log(rs_log_level level, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Copy n bytes of in to out (cap bytes, NUL-terminated) as rs_log writes a
 * message: what could forge a line or drive a terminal becomes \xNN, well
 * formed UTF-8 text otherwise stays. Stops before a character that does not
 * fit. Returns the length written.
 */
size_t rs_log_escape(const char *in, size_t n, char *out, size_t cap);

#define RS_ERROR(...) rs_log(RS_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define RS_WARN(...) rs_log(RS_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define RS_INFO(...) rs_log(RS_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define RS_DEBUG(...)                                                   \
	do {                                                            \
		if (rs_log_enabled(RS_LOG_DEBUG))                       \
			rs_log(RS_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__); \
	} while (0)

#define SYSCHECK(call)                                                   \
	do {                                                             \
		if ((call) == -1) {                                      \
			int rs__e = errno;                               \
			RS_ERROR("%s failed: %s", #call, strerror(rs__e)); \
			errno = rs__e;                                   \
			return RS_ESYS;                                  \
		}                                                        \
	} while (0)

#define SYSCHECKGOTO(call, st, label)                                    \
	do {                                                             \
		if ((call) == -1) {                                      \
			int rs__e = errno;                               \
			RS_ERROR("%s failed: %s", #call, strerror(rs__e)); \
			errno = rs__e;                                   \
			(st) = RS_ESYS;                                  \
			goto label;                                      \
		}                                                        \
	} while (0)

#endif
