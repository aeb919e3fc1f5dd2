/*
 * cuda_check.h - CUDACHECK, the check macro for CUDA runtime calls, usable
 * from C11 host code and from CUDA sources alike.
 *
 * CUDACHECK(err, call) evaluates a CUDA runtime call; on failure it logs
 * file:line, the call's text and CUDA's name and message for the error,
 * writes the same line into err (an rs_err *, may be NULL), and returns
 * RS_ECUDA from the enclosing function. CUDACHECKGOTO(err, call, st, label)
 * sets st and jumps to the cleanup label instead. CUDACHECK_LAUNCH(err)
 * checks the last kernel launch (cudaGetLastError).
 */
#ifndef RS_CUDA_CHECK_H
#define RS_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <errno.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "common/log.h"
#include "common/status.h"
#ifdef __cplusplus
}
#endif

#define RS__CUDA_FAIL(err, rs__ce, what)                                                                  \
	do {                                                                                              \
		RS_ERROR("%s failed: %s: %s", what, cudaGetErrorName(rs__ce), cudaGetErrorString(rs__ce)); \
		rs_err_set(err, RS_ECUDA, "%s:%d: %s failed: %s: %s", __FILE__, __LINE__, what,            \
			   cudaGetErrorName(rs__ce), cudaGetErrorString(rs__ce));                          \
	} while (0)

#define CUDACHECK(err, call)                                    \
	do {                                                    \
		cudaError_t rs__ce = (call);                    \
		if (rs__ce != cudaSuccess) {                    \
			RS__CUDA_FAIL(err, rs__ce, #call);      \
			return RS_ECUDA;                        \
		}                                               \
	} while (0)

#define CUDACHECKGOTO(err, call, st, label)                     \
	do {                                                    \
		cudaError_t rs__ce = (call);                    \
		if (rs__ce != cudaSuccess) {                    \
			RS__CUDA_FAIL(err, rs__ce, #call);      \
			(st) = RS_ECUDA;                        \
			goto label;                             \
		}                                               \
	} while (0)

#define CUDACHECK_LAUNCH(err, kernel_name)                          \
	do {                                                        \
		cudaError_t rs__ce = cudaGetLastError();            \
		if (rs__ce != cudaSuccess) {                        \
			RS__CUDA_FAIL(err, rs__ce, "launch of " kernel_name); \
			return RS_ECUDA;                            \
		}                                                   \
	} while (0)

#endif
