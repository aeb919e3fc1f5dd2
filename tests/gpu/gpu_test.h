/*
 * gpu_test.h - what every GPU test and benchmark shares: the skip when the
 * machine has no CUDA device, and check counting with a summary line.
 *
 * Without a device a program prints "skipped: no CUDA device (...)" as its
 * last line and exits 77, which tests/run.sh records as a skip (and, under
 * RS_REQUIRE_GPU=1, as a failure).
 */
#ifndef RS_GPU_TEST_H
#define RS_GPU_TEST_H

#include <stdint.h>
#include <stdio.h>

#define GPU_TEST_SKIP 77

/* Exit 77 with the skip line unless a CUDA device can be used; then select device 0. */
void gpu_test_require_device(const char *prog);

extern int gpu_test_checks, gpu_test_failures;

/* Count a check; print the failure (file:line and the message) when cond is false. */
#define GPU_CHECK(cond, ...)                                                  \
	do {                                                                  \
		gpu_test_checks++;                                            \
		if (!(cond)) {                                                \
			gpu_test_failures++;                                  \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
			fprintf(stderr, __VA_ARGS__);                         \
			fprintf(stderr, "\n");                                \
		}                                                             \
	} while (0)

/* Test inputs: splitmix64 from a fixed seed (the same inputs every run); gpu_test_seed restarts it. */
uint64_t gpu_test_rand(void);
void gpu_test_seed(uint64_t seed);

/* Print "NAME: N checks, M failed" and return the exit code (0 or 1). */
int gpu_test_summary(const char *prog);

/* A CUDA call in a test: on failure print it and exit 1 (the test cannot go on). */
#define GPU_CUDA(call) gpu_test_cuda((call), #call, __FILE__, __LINE__)
void gpu_test_cuda(int cuda_error, const char *call, const char *file, int line);

#endif
