/*
 * cublas_v2.h - the CUDA simulator's cuBLAS (tests/cudasim): the types and
 * calls the CUDA engine opens with dlopen, implemented by
 * tests/cudasim/cublas.cc in build/cudasim/lib/libcublas.so.cudasim.
 *
 * The engine opens "libcublas.so." CUBLAS_VER_MAJOR; here CUBLAS_VER_MAJOR
 * is the token cudasim, so an engine compiled against this header opens the
 * simulator's library (found through the binary's RUNPATH), never a real
 * cuBLAS, and nothing in the engine changes.
 */
#ifndef CUDASIM_CUBLAS_V2_H
#define CUDASIM_CUBLAS_V2_H

#include "cuda_runtime_api.h"

#define CUBLAS_VER_MAJOR cudasim

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_ALLOC_FAILED = 3,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_ARCH_MISMATCH = 8,
	CUBLAS_STATUS_MAPPING_ERROR = 11,
	CUBLAS_STATUS_EXECUTION_FAILED = 13,
	CUBLAS_STATUS_INTERNAL_ERROR = 14,
	CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
	CUBLAS_DEFAULT_MATH = 0,
	CUBLAS_TENSOR_OP_MATH = 1,
	CUBLAS_PEDANTIC_MATH = 2,
	CUBLAS_TF32_TENSOR_OP_MATH = 3
} cublasMath_t;

typedef struct cublasContext *cublasHandle_t;

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode);
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
			      int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
			      const float *beta, float *C, int ldc);
const char *cublasGetStatusString(cublasStatus_t status);
const char *cublasGetStatusName(cublasStatus_t status);

#define cublasCreate cublasCreate_v2
#define cublasDestroy cublasDestroy_v2
#define cublasSetStream cublasSetStream_v2
#define cublasGetStream cublasGetStream_v2
#define cublasSgemm cublasSgemm_v2

#ifdef __cplusplus
}
#endif

#endif
