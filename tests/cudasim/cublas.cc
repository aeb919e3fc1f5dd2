/*
 * cublas.cc - the CUDA simulator's cuBLAS (libcublas.so.cudasim; see
 * include/cublas_v2.h): handles, their stream and math mode, and sgemm,
 * queued on the handle's stream like every simulated kernel.
 *
 * sgemm is column-major C = alpha op(A) op(B) + beta C, alpha and beta read
 * from the host at the call (CUBLAS_POINTER_MODE_HOST, the default), C not
 * read when beta is 0 (BLAS semantics). Each element is summed in fp32 in
 * k order without fused multiply-adds: a result, not cuBLAS's, whose
 * summation order (tiles, split-k) differs and is not simulated. Arguments
 * are checked as cuBLAS checks them (CUBLAS_STATUS_INVALID_VALUE), and the
 * three matrices must lie in memory kernels may use.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <mutex>
#include <set>

struct cublasContext {
	cudaStream_t stream = nullptr;
	cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

std::mutex lock;
std::set<cublasContext *> handles;

bool live(cublasHandle_t h)
{
	std::lock_guard<std::mutex> g(lock);
	return handles.count(h) != 0;
}

cublasStatus_t invalid(const char *why)
{
	std::fprintf(stderr, "cudasim: cublasSgemm: %s: CUBLAS_STATUS_INVALID_VALUE\n", why);
	return CUBLAS_STATUS_INVALID_VALUE;
}

/* Bytes spanned by a column-major rows x cols matrix with leading dimension ld. */
size_t span(int rows, int cols, int ld) { return rows && cols ? ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * 4 : 0; }

} /* namespace */

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
	int n = 0;
	if (!handle)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	std::lock_guard<std::mutex> g(lock);
	*handle = new cublasContext;
	handles.insert(*handle);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
	std::lock_guard<std::mutex> g(lock);
	if (!handles.erase(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	delete handle;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
	if (!live(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	handle->stream = stream;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *stream)
{
	if (!live(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!stream)
		return CUBLAS_STATUS_INVALID_VALUE;
	*stream = handle->stream;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
	if (!live(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if ((unsigned)(mode & 0xf) > CUBLAS_TF32_TENSOR_OP_MATH)
		return CUBLAS_STATUS_INVALID_VALUE;
	handle->math = mode;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
	if (!live(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!mode)
		return CUBLAS_STATUS_INVALID_VALUE;
	*mode = handle->math;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
			      int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
			      const float *beta, float *C, int ldc)
{
	if (!live(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if ((unsigned)transa > CUBLAS_OP_C || (unsigned)transb > CUBLAS_OP_C)
		return invalid("transa or transb");
	if (m < 0 || n < 0 || k < 0)
		return invalid("a negative dimension");
	bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
	int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
	if (lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1))
		return invalid("a leading dimension below its matrix's rows");
	if (!alpha || !beta)
		return invalid("alpha or beta is NULL");
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS;
	float al = *alpha, be = *beta;
	if (k > 0 && (cudasim::check_device_range(A, span(ar, ac, lda), "cublasSgemm: A") != cudaSuccess ||
		      cudasim::check_device_range(B, span(br, bc, ldb), "cublasSgemm: B") != cudaSuccess))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (cudasim::check_device_range(C, span(m, n, ldc), "cublasSgemm: C") != cudaSuccess)
		return CUBLAS_STATUS_INVALID_VALUE;
	cudaError_t e = cudasim::enqueue(
		handle->stream,
		[=] {
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++) {
					float acc = 0.0f;
					for (int p = 0; p < k; p++) {
						float a = ta ? A[(size_t)i * lda + p] : A[(size_t)p * lda + i];
						float b = tb ? B[(size_t)p * ldb + j] : B[(size_t)j * ldb + p];
						acc += a * b;
					}
					float *c = &C[(size_t)j * ldc + i];
					*c = be == 0.0f ? al * acc : al * acc + be * *c;
				}
		},
		"cublasSgemm");
	return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

const char *cublasGetStatusName(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
	case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
	case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
	case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
	case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
	}
	return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS: return "success";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
	case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
	case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
	case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
	case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
	}
	return "unknown error";
}

} /* extern "C" */
