/*
 * gpu_test.c - see gpu_test.h.
 */
#include "tests/gpu/gpu_test.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>

int gpu_test_checks, gpu_test_failures;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

void gpu_test_seed(uint64_t seed) { rng_state = seed; }

uint64_t gpu_test_rand(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void gpu_test_require_device(const char *prog)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n < 1) {
		fflush(stdout);
		printf("%s: skipped: no CUDA device (%s)\n", prog,
		       e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
		exit(GPU_TEST_SKIP);
	}
	struct cudaDeviceProp p;
	GPU_CUDA(cudaSetDevice(0));
	GPU_CUDA(cudaGetDeviceProperties(&p, 0));
	printf("%s: device 0: %s, compute capability %d.%d, %d SMs\n", prog, p.name, p.major, p.minor,
	       p.multiProcessorCount);
}

int gpu_test_summary(const char *prog)
{
	printf("%s: %d checks, %d failed\n", prog, gpu_test_checks, gpu_test_failures);
	return gpu_test_failures ? 1 : 0;
}

void gpu_test_cuda(int cuda_error, const char *call, const char *file, int line)
{
	if (cuda_error != cudaSuccess) {
		fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, cudaGetErrorString((cudaError_t)cuda_error));
		exit(1);
	}
}
