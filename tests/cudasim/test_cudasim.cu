/*
 * test_cudasim.cu - the CUDA simulator's own test: that it keeps the
 * promises the kernel tests rely on (tests/cudasim/runtime.cc's model).
 *
 *  - barriers: code after __syncthreads sees what every thread wrote before
 *    it; without the barrier the same kernel goes wrong (the adversarial
 *    order finds the race), also within one warp (no lockstep: warp-
 *    synchronous exchange is a race here), and the order changes from
 *    launch to launch;
 *    threads of a block at different barriers, or some waiting while others
 *    exited, fail the process naming the kernel and both sites (checked in
 *    a child process), while a block that leaves as a whole does not;
 *  - shared memory: per block, garbage at the start of every block, static
 *    and dynamic; blocks run in a random order; static + dynamic above
 *    48 KiB fails (at the run when the kernel's static size is not known
 *    yet, at the launch after it), unless the kernel opted in;
 *  - streams: queued work runs when waited for (a host read before the wait
 *    sees the old data), in order per stream; the legacy stream's implicit
 *    ordering; events order streams; cudaMemset is asynchronous; a
 *    cudaMemcpyAsync from pageable memory takes its source at the call,
 *    one from pinned memory when it runs;
 *  - errors: launch configurations, bad handles, bad pointers and ranges,
 *    host pointers inside struct arguments, prefetch/advise/discard
 *    arguments, the last error and its reset;
 *  - memory: fresh allocations are garbage; discard scrambles; host access
 *    to device memory, a kernel running off an allocation's end, use after
 *    free and a leak each fail the process (checked in a child process);
 *  - cub: stable radix sort over a bit range (signed keys too), size
 *    queries, too little temporary storage for every primitive (also when
 *    sized for fewer items), temporary storage overlapping an operand,
 *    run-length encoding, exclusive scan in place, select flagged;
 *  - cuBLAS (libcublas.so.cudasim through dlopen, as the engine opens it):
 *    sgemm with both transposes against a plain loop, beta 0 ignoring C;
 *  - the NCCL simulator's buffer checks (libncclsim.so through dlopen): a
 *    send to self arrives; a buffer shorter than the call's count, a start
 *    outside any allocation and pageable memory are refused.
 * Every group prints what it checked; the last line counts the failures.
 */
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

static int checks, failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		checks++;                                                    \
		if (!(cond)) {                                               \
			failures++;                                          \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fprintf(stderr, "\n");                               \
		}                                                            \
	} while (0)

#define CUDA(call)                                                                                        \
	do {                                                                                              \
		cudaError_t e_ = (call);                                                                  \
		if (e_ != cudaSuccess) {                                                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
			exit(1);                                                                          \
		}                                                                                         \
	} while (0)

/* ---- kernels -------------------------------------------------------------------------------- */

/* out[t] = what thread t+1 wrote, read after a barrier (or without one when SYNC is false). */
template <bool SYNC> __global__ void rotate_kernel(int *out)
{
	__shared__ int s[256];
	int t = threadIdx.x, n = blockDim.x;
	s[t] = t * 7 + blockIdx.x;
	if (SYNC)
		__syncthreads();
	out[blockIdx.x * n + t] = s[(t + 1) % n];
}

/* order[k] = the k-th thread to pass the atomic (the order of the first phase). */
__global__ void order_kernel(int *counter, int *order)
{
	int k = atomicAdd(counter, 1);
	order[k] = threadIdx.x;
}

/* Static shared memory as found when the block starts, and a per-block sum in it. */
__global__ void shared_kernel(unsigned *first, int *sums, int *block_order, int *counter)
{
	__shared__ unsigned seen;
	__shared__ int acc;
	if (threadIdx.x == 0) {
		first[blockIdx.x] = seen; /* never written yet in this block: garbage */
		acc = 0;
		block_order[atomicAdd(counter, 1)] = blockIdx.x;
	}
	__syncthreads();
	atomicAdd(&acc, (int)threadIdx.x + (int)blockIdx.x);
	__syncthreads();
	if (threadIdx.x == 0)
		sums[blockIdx.x] = acc;
}

/* Dynamic shared memory: garbage at the start, per block. */
__global__ void dynamic_kernel(unsigned char *first, int *ok, int n)
{
	extern __shared__ unsigned char buf[];
	if (threadIdx.x == 0)
		first[blockIdx.x] = buf[n - 1];
	__syncthreads();
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		buf[i] = (unsigned char)(blockIdx.x + i);
	__syncthreads();
	int good = 1;
	for (int i = 0; i < n; i++)
		good &= buf[i] == (unsigned char)(blockIdx.x + i);
	if (!good)
		atomicExch(ok, 0);
}

__global__ void add_kernel(int *a, int n, int v)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		a[i] += v;
}

__global__ void copy_kernel(const int *a, int *b, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		b[i] = a[i];
}

/* Every thread of a 3D block and grid writes its coordinates once. */
__global__ void coords_kernel(unsigned *out)
{
	unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
	unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	unsigned n = blockDim.x * blockDim.y * blockDim.z;
	out[b * n + t] += 1 + (threadIdx.x << 4 | threadIdx.y << 12 | threadIdx.z << 20);
}

__global__ void write_kernel(int *p, int at) { p[at] = 1; }

/* Planted: even threads wait at one barrier, odd threads at another (3 lines further). */
enum { split_line = __LINE__ + 5 };
__global__ void split_barrier_kernel(int *p)
{
	if (threadIdx.x % 2 == 0) {
		p[threadIdx.x] = 1;
		__syncthreads();
	} else {
		p[threadIdx.x] = 2;
		__syncthreads();
	}
}

/* Planted: thread 0 leaves before the barrier the others wait at. */
enum { exit_line = __LINE__ + 6 };
__global__ void early_exit_kernel(int *p)
{
	if (threadIdx.x == 0)
		return;
	p[threadIdx.x] = 1;
	__syncthreads();
	p[0] = 2;
}

/* Legal: a whole block leaves before the barrier; the others loop through one barrier a uniform number of times. */
__global__ void uniform_barrier_kernel(int *p, int rounds)
{
	if (blockIdx.x == 1)
		return;
	for (int r = 0; r < rounds; r++) {
		atomicAdd(&p[blockIdx.x], 1);
		__syncthreads();
	}
}

/* 32 KiB of static shared memory, plus the dynamic memory the launch asks for (all of it written and read). */
__global__ void big_static_kernel(int *ok, int dyn_floats)
{
	__shared__ float s[8192];
	extern __shared__ float dyn[];
	for (int i = threadIdx.x; i < 8192; i += blockDim.x)
		s[i] = (float)i;
	for (int i = threadIdx.x; i < dyn_floats; i += blockDim.x)
		dyn[i] = (float)(2 * i);
	__syncthreads();
	int good = 1;
	for (int i = threadIdx.x; i < dyn_floats; i += blockDim.x)
		good &= dyn[i] == (float)(2 * i) && s[i % 8192] == (float)(i % 8192);
	if (!good)
		atomicExch(ok, 0);
}

/* A struct passed by value, as zch_dev is: the pointer inside it is followed. */
struct span {
	int *p;
	int n;
	int add;
};

__global__ void span_kernel(span x)
{
	for (int i = threadIdx.x; i < x.n; i += blockDim.x)
		x.p[i] += x.add;
}

/* A struct of integers only, one of them looking like an address. */
struct numbers {
	unsigned long long a, b;
};

__global__ void numbers_kernel(numbers x, unsigned long long *out) { *out = x.a + x.b; }

/* ---- groups ---------------------------------------------------------------------------------- */

static std::vector<int> run_rotate(bool sync, int blocks, int n)
{
	int *d;
	std::vector<int> h((size_t)blocks * n);
	CUDA(cudaMalloc((void **)&d, sizeof(int) * h.size()));
	if (sync)
		rotate_kernel<true><<<blocks, n>>>(d);
	else
		rotate_kernel<false><<<blocks, n>>>(d);
	CUDA(cudaGetLastError());
	CUDA(cudaMemcpy(h.data(), d, sizeof(int) * h.size(), cudaMemcpyDeviceToHost));
	CUDA(cudaFree(d));
	return h;
}

static void barriers(void)
{
	int blocks = 3, n = 256, wrong_sync = 0, wrong_nosync = 0;
	for (int rep = 0; rep < 4; rep++) {
		std::vector<int> a = run_rotate(true, blocks, n), b = run_rotate(false, blocks, n);
		for (int bl = 0; bl < blocks; bl++)
			for (int t = 0; t < n; t++) {
				int want = ((t + 1) % n) * 7 + bl;
				wrong_sync += a[(size_t)bl * n + t] != want;
				wrong_nosync += b[(size_t)bl * n + t] != want;
			}
	}
	CHECK(wrong_sync == 0, "barriers: %d wrong reads after __syncthreads", wrong_sync);
	CHECK(wrong_nosync > 0, "barriers: a race on shared memory without __syncthreads went unseen");
	/* one warp exchanging through shared memory without a barrier (warp-synchronous code): no lockstep here,
	 * the lanes run one at a time like any threads, so it goes wrong as a race does */
	int wrong_warp = 0;
	for (int rep = 0; rep < 4; rep++) {
		std::vector<int> w = run_rotate(false, 1, 32);
		for (int t = 0; t < 32; t++)
			wrong_warp += w[t] != ((t + 1) % 32) * 7;
	}
	CHECK(wrong_warp > 0, "barriers: a warp exchanging through shared memory without a barrier read it right");
	/* the order of a block's threads is drawn per launch */
	int *d;
	CUDA(cudaMalloc((void **)&d, sizeof(int) * 65));
	std::vector<std::vector<int>> orders;
	for (int rep = 0; rep < 3; rep++) {
		std::vector<int> h(65);
		CUDA(cudaMemset(d, 0, sizeof(int)));
		order_kernel<<<1, 64>>>(d, d + 1);
		CUDA(cudaMemcpy(h.data(), d, sizeof(int) * 65, cudaMemcpyDeviceToHost));
		CHECK(h[0] == 64, "barriers: %d of 64 threads ran", h[0]);
		std::vector<int> o(h.begin() + 1, h.end()), s = o;
		std::sort(s.begin(), s.end());
		bool perm = true;
		for (int t = 0; t < 64; t++)
			perm &= s[t] == t;
		CHECK(perm, "barriers: the arrival order is not a permutation of the threads");
		orders.push_back(o);
	}
	CHECK(orders[0] != orders[1] || orders[1] != orders[2], "barriers: three launches ran their threads in one order");
	bool identity = true;
	for (int t = 0; t < 64; t++)
		identity &= orders[0][t] == t;
	CHECK(!identity, "barriers: threads ran in index order");
	CUDA(cudaFree(d));
	/* 3D coordinates: every thread of every block exactly once */
	dim3 grid(3, 2, 2), block(4, 3, 5);
	unsigned total = 12 * 60, *dc;
	std::vector<unsigned> hc(total);
	CUDA(cudaMalloc((void **)&dc, sizeof(unsigned) * total));
	CUDA(cudaMemset(dc, 0, sizeof(unsigned) * total));
	coords_kernel<<<grid, block>>>(dc);
	CUDA(cudaMemcpy(hc.data(), dc, sizeof(unsigned) * total, cudaMemcpyDeviceToHost));
	int bad_coords = 0;
	for (unsigned i = 0; i < total; i++) {
		unsigned t = i % 60, want = 1 + ((t % 4) << 4 | ((t / 4) % 3) << 12 | (t / 12) << 20);
		bad_coords += hc[i] != want;
	}
	CHECK(bad_coords == 0, "barriers: %d threads of a 3D launch missed or repeated", bad_coords);
	CUDA(cudaFree(dc));
	/* a block leaving as a whole, and a barrier in a loop every thread runs as often: no divergence */
	int *du, hu[3];
	CUDA(cudaMalloc((void **)&du, sizeof(hu)));
	CUDA(cudaMemset(du, 0, sizeof(hu)));
	uniform_barrier_kernel<<<3, 32>>>(du, 5);
	CUDA(cudaMemcpy(hu, du, sizeof(hu), cudaMemcpyDeviceToHost));
	CHECK(hu[0] == 160 && hu[1] == 0 && hu[2] == 160, "barriers: uniform barriers gave %d %d %d", hu[0], hu[1], hu[2]);
	CUDA(cudaFree(du));
	printf("barriers: %d wrong reads with the barrier, %d without (of %d), %d in one warp without (of 128); thread "
	       "orders differ per launch; uniform barriers pass\n",
	       wrong_sync, wrong_nosync, 4 * blocks * n, wrong_warp);
}

static void shared_memory(void)
{
	int nb = 64;
	unsigned *first;
	int *sums, *order, *counter;
	CUDA(cudaMallocManaged((void **)&first, sizeof(unsigned) * nb));
	CUDA(cudaMallocManaged((void **)&sums, sizeof(int) * nb));
	CUDA(cudaMallocManaged((void **)&order, sizeof(int) * nb));
	CUDA(cudaMallocManaged((void **)&counter, sizeof(int)));
	*counter = 0;
	shared_kernel<<<nb, 32>>>(first, sums, order, counter);
	CUDA(cudaDeviceSynchronize());
	int zeros = 0, bad_sums = 0, in_order = 1;
	for (int b = 0; b < nb; b++) {
		zeros += first[b] == 0;
		bad_sums += sums[b] != 32 * b + 31 * 32 / 2;
		in_order &= order[b] == b;
	}
	CHECK(zeros == 0, "shared: %d blocks found their shared memory zeroed", zeros);
	CHECK(bad_sums == 0, "shared: %d blocks summed wrong (shared memory crossed blocks?)", bad_sums);
	CHECK(!in_order, "shared: the blocks ran in index order");
	unsigned char *f;
	int *ok;
	CUDA(cudaMallocManaged((void **)&f, 16));
	CUDA(cudaMallocManaged((void **)&ok, sizeof(int)));
	*ok = 1;
	dynamic_kernel<<<16, 64, 1000>>>(f, ok, 1000);
	CUDA(cudaDeviceSynchronize());
	int zf = 0;
	for (int b = 0; b < 16; b++)
		zf += f[b] == 0;
	CHECK(*ok == 1, "shared: dynamic shared memory did not keep what its block wrote");
	CHECK(zf == 0, "shared: %d blocks found their dynamic shared memory zeroed", zf);
	dynamic_kernel<<<1, 64, 48 * 1024 + 1>>>(f, ok, 10);
	CHECK(cudaGetLastError() == cudaErrorInvalidValue, "shared: more than 48 KiB of dynamic shared memory launched");
	/* static + dynamic: 32 KiB static and 1 KiB dynamic run; the static size is known from then on */
	*ok = 1;
	big_static_kernel<<<2, 64, 1024>>>(ok, 256);
	CUDA(cudaDeviceSynchronize());
	CHECK(*ok == 1, "shared: 32 KiB static and 1 KiB dynamic shared memory did not keep what was written");
	big_static_kernel<<<2, 64, 20 * 1024>>>(ok, 5 * 1024);
	CHECK(cudaGetLastError() == cudaErrorInvalidValue, "shared: 32 KiB static + 20 KiB dynamic launched without the opt-in");
	CHECK(cudaFuncSetAttribute(big_static_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024) ==
		      cudaErrorInvalidValue,
	      "shared: an opt-in past the device's shared memory per block accepted");
	cudaGetLastError();
	CUDA(cudaFuncSetAttribute(big_static_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
	big_static_kernel<<<2, 64, 100 * 1024>>>(ok, 25 * 1024);
	CUDA(cudaGetLastError());
	CUDA(cudaDeviceSynchronize());
	CHECK(*ok == 1, "shared: 100 KiB of dynamic shared memory after the opt-in did not keep what was written");
	big_static_kernel<<<2, 64, 100 * 1024 + 4>>>(ok, 10);
	CHECK(cudaGetLastError() == cudaErrorInvalidValue, "shared: dynamic shared memory above the opt-in launched");
	int optin = 0;
	CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
	CHECK(optin == 163 * 1024, "shared: opt-in limit %d", optin);
	for (void *p : {(void *)first, (void *)sums, (void *)order, (void *)counter, (void *)f, (void *)ok})
		CUDA(cudaFree(p));
	printf("shared: per block, garbage at the start, blocks in a random order, static + dynamic at most 48 KiB "
	       "without the opt-in\n");
}

static void streams(void)
{
	int n = 1000, *d, *h;
	CUDA(cudaMalloc((void **)&d, sizeof(int) * n));
	CUDA(cudaMallocHost((void **)&h, sizeof(int) * n));
	cudaStream_t s, nb;
	CUDA(cudaStreamCreate(&s));
	CUDA(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
	CUDA(cudaMemsetAsync(d, 0, sizeof(int) * n, s));
	add_kernel<<<4, 64, 0, s>>>(d, n, 5);
	for (int i = 0; i < n; i++)
		h[i] = -1;
	CUDA(cudaMemcpyAsync(h, d, sizeof(int) * n, cudaMemcpyDeviceToHost, s));
	CHECK(h[0] == -1 && h[n - 1] == -1, "streams: an asynchronous copy landed before anything waited for it");
	CUDA(cudaStreamSynchronize(s));
	CHECK(h[0] == 5 && h[n - 1] == 5, "streams: after the wait the copy holds %d, want 5", h[0]);
	/* host to device: a pageable source is staged at the call (CUDA's documented behaviour), a pinned one is read
	 * when the copy runs */
	std::vector<int> pageable(n, 7);
	CUDA(cudaMemcpyAsync(d, pageable.data(), sizeof(int) * n, cudaMemcpyHostToDevice, s));
	std::fill(pageable.begin(), pageable.end(), 9);
	CUDA(cudaStreamSynchronize(s));
	CUDA(cudaMemcpy(pageable.data(), d, sizeof(int) * n, cudaMemcpyDeviceToHost));
	CHECK(pageable[0] == 7 && pageable[n - 1] == 7, "streams: a pageable source rewritten after cudaMemcpyAsync: %d",
	      pageable[0]);
	for (int i = 0; i < n; i++)
		h[i] = 3;
	CUDA(cudaMemcpyAsync(d, h, sizeof(int) * n, cudaMemcpyHostToDevice, s));
	for (int i = 0; i < n; i++)
		h[i] = 4;
	CUDA(cudaStreamSynchronize(s));
	CUDA(cudaMemcpy(pageable.data(), d, sizeof(int) * n, cudaMemcpyDeviceToHost));
	CHECK(pageable[0] == 4, "streams: a pinned source was read at the call, not when the copy ran (%d)", pageable[0]);
	/* the legacy stream orders a blocking stream, not a non-blocking one */
	CUDA(cudaMemset(d, 0, sizeof(int) * n));    /* legacy, asynchronous */
	add_kernel<<<4, 64, 0, s>>>(d, n, 1);       /* blocking stream: after the memset */
	CUDA(cudaStreamSynchronize(s));
	CUDA(cudaMemcpy(h, d, sizeof(int) * n, cudaMemcpyDeviceToHost));
	CHECK(h[7] == 1, "streams: a blocking stream did not wait for the legacy stream (%d)", h[7]);
	CUDA(cudaMemset(d, 0, sizeof(int) * n));    /* legacy, still queued ... */
	add_kernel<<<4, 64, 0, nb>>>(d, n, 1);      /* ... when a non-blocking stream runs */
	CUDA(cudaStreamSynchronize(nb));
	CUDA(cudaMemcpy(h, d, sizeof(int) * n, cudaMemcpyDeviceToHost));
	CHECK(h[7] == 0, "streams: a non-blocking stream waited for the legacy stream (%d)", h[7]);
	/* events: nb waits for s */
	int *d2;
	CUDA(cudaMalloc((void **)&d2, sizeof(int) * n));
	cudaEvent_t e;
	CUDA(cudaEventCreate(&e));
	add_kernel<<<4, 64, 0, s>>>(d, n, 10);
	CUDA(cudaEventRecord(e, s));
	CUDA(cudaStreamWaitEvent(nb, e, 0));
	copy_kernel<<<4, 64, 0, nb>>>(d, d2, n);
	CUDA(cudaStreamSynchronize(nb));
	CUDA(cudaMemcpy(h, d2, sizeof(int) * n, cudaMemcpyDeviceToHost));
	CHECK(h[3] == 10, "streams: an event did not order two streams (%d)", h[3]);
	float ms = -1;
	CUDA(cudaEventSynchronize(e));
	CHECK(cudaEventElapsedTime(&ms, e, e) == cudaSuccess && ms == 0, "streams: elapsed time of an event to itself");
	CUDA(cudaEventDestroy(e));
	CUDA(cudaStreamDestroy(s));
	CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle, "streams: a destroyed stream was accepted");
	CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle, "streams: the failed call did not set the last error");
	CHECK(cudaGetLastError() == cudaSuccess, "streams: cudaGetLastError did not reset the error");
	CUDA(cudaStreamDestroy(nb));
	CUDA(cudaFree(d2));
	CUDA(cudaFreeHost(h));
	CUDA(cudaFree(d));
	printf("streams: lazy, ordered per stream, legacy ordering, events, pageable sources staged at the call\n");
}

static void errors_and_memory(void)
{
	int *d, *m, hbuf[8] = {0};
	CUDA(cudaMalloc((void **)&d, 100));
	CUDA(cudaMallocManaged((void **)&m, 4096));
	CHECK(m[0] != 0 || m[1023] != 0, "memory: a fresh managed allocation is zeroed");
	CHECK(((uintptr_t)d & 255) == 0 && ((uintptr_t)m & 255) == 0, "memory: allocations not 256-byte aligned");
	add_kernel<<<1, 2000>>>(d, 1, 1);
	CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "errors: a block of 2000 threads launched");
	add_kernel<<<dim3(1, 70000), 1>>>(d, 1, 1);
	CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "errors: a grid of 70000 in y launched");
	add_kernel<<<1, 1>>>(hbuf, 1, 1);
	CHECK(cudaGetLastError() == cudaErrorInvalidValue, "errors: a kernel launched on a host pointer");
	CHECK(cudaGetLastError() == cudaSuccess, "errors: the launch error was not reset");
	/* host pointers inside a struct argument: the stack, malloc's heap, pageable memory a copy used */
	span dspan = {d, 8, 1};
	span_kernel<<<1, 32>>>(dspan);
	CHECK(cudaGetLastError() == cudaSuccess, "errors: a struct holding a device pointer refused");
	span hspan = {hbuf, 8, 1};
	span_kernel<<<1, 32>>>(hspan);
	CHECK(cudaGetLastError() == cudaErrorInvalidValue, "errors: a struct holding a pointer to the host stack launched");
	int *heap = (int *)malloc(64);
	span heapspan = {heap, 8, 1};
	span_kernel<<<1, 32>>>(heapspan);
	CHECK(cudaGetLastError() == cudaErrorInvalidValue, "errors: a struct holding a pointer into malloc's heap launched");
	free(heap);
	std::vector<int> big(1 << 18); /* 1 MiB: malloc maps it apart from its heap */
	CUDA(cudaMemcpy(d, big.data(), 100, cudaMemcpyHostToDevice));
	span bigspan = {big.data() + 10, 8, 1};
	span_kernel<<<1, 32>>>(bigspan);
	CHECK(cudaGetLastError() == cudaErrorInvalidValue, "errors: a struct holding a pointer into pageable memory launched");
	unsigned long long *dsum;
	CUDA(cudaMalloc((void **)&dsum, sizeof(*dsum)));
	numbers nums = {0x00007fff00001234ull, 0x0000555500000000ull}; /* integers that look like host addresses */
	numbers_kernel<<<1, 1>>>(nums, dsum);
	CHECK(cudaGetLastError() == cudaSuccess, "errors: a struct of integers refused");
	CUDA(cudaDeviceSynchronize());
	CUDA(cudaFree(dsum));
	CHECK(cudaMemcpy(hbuf, d, 104, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "errors: a copy past the end");
	CHECK(cudaMemcpy(d, hbuf, 8, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "errors: device memory as the host side");
	CHECK(cudaMemcpy(hbuf, hbuf + 4, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "errors: host memory as the device side");
	CHECK(cudaMemset(hbuf, 0, 4) == cudaErrorInvalidValue, "errors: cudaMemset of host memory");
	CHECK(cudaFree(hbuf) == cudaErrorInvalidValue, "errors: cudaFree of host memory");
	CHECK(cudaFree(d + 1) == cudaErrorInvalidValue, "errors: cudaFree inside an allocation");
	CHECK(cudaFreeHost(d) == cudaErrorInvalidValue, "errors: cudaFreeHost of device memory");
	struct cudaMemLocation dev0 = {cudaMemLocationTypeDevice, 0}, dev5 = {cudaMemLocationTypeDevice, 5};
	CHECK(cudaMemPrefetchAsync(m, 4096, dev0, 0, 0) == cudaSuccess, "errors: a good prefetch refused");
	CHECK(cudaMemPrefetchAsync(d, 64, dev0, 0, 0) == cudaErrorInvalidValue, "errors: prefetch of device memory");
	CHECK(cudaMemPrefetchAsync(m, 4097, dev0, 0, 0) == cudaErrorInvalidValue, "errors: prefetch past the end");
	CHECK(cudaMemPrefetchAsync(m, 64, dev5, 0, 0) == cudaErrorInvalidDevice, "errors: prefetch to device 5");
	CHECK(cudaMemAdvise(m, 4096, cudaMemAdviseSetPreferredLocation, dev0) == cudaSuccess, "errors: a good advice refused");
	CHECK(cudaMemAdvise(hbuf, 4, cudaMemAdviseSetPreferredLocation, dev0) == cudaErrorInvalidValue, "errors: advice on host memory");
	int dc = -1;
	CHECK(cudaGetDeviceCount(&dc) == cudaSuccess && dc == 1, "errors: %d devices", dc);
	CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice, "errors: device 1 accepted");
	CHECK(!strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") &&
		      !strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument"),
	      "errors: names and strings");
	/* discard: the contents become garbage */
	for (int i = 0; i < 1024; i++)
		m[i] = 0;
	void *ptr = m;
	size_t len = 4096;
	CUDA(cudaMemDiscardBatchAsync(&ptr, &len, 1, 0, 0));
	CUDA(cudaDeviceSynchronize());
	CHECK(m[5] != 0, "memory: discarded memory kept its contents");
	CHECK(cudaMemDiscardBatchAsync(&ptr, &len, 1, 1, 0) == cudaErrorInvalidValue, "errors: discard with flags");
	cudaGetLastError();
	CUDA(cudaFree(m));
	CUDA(cudaFree(d));
	CHECK(cudaFree(d) == cudaErrorInvalidValue, "errors: a double free");
	cudaGetLastError();
	printf("errors and memory: codes, last error, ranges, garbage, discard\n");
}

/* ---- faults, each in a child process (this program run again with a mode) --------------------- */

static int child(const char *mode, std::string *err_text)
{
	char path[64];
	snprintf(path, sizeof(path), "/tmp/cudasim-child-%d.err", (int)getpid());
	fflush(nullptr);
	pid_t p = fork();
	if (p == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 2);
		dup2(fd, 1);
		execl("/proc/self/exe", "test_cudasim", mode, (char *)nullptr);
		_exit(127);
	}
	int status = 0;
	waitpid(p, &status, 0);
	FILE *f = fopen(path, "r");
	char buf[4096];
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	unlink(path);
	*err_text = buf;
	return status;
}

static int child_mode(const char *mode)
{
	int *d;
	if (!strcmp(mode, "host-reads-device")) {
		CUDA(cudaMalloc((void **)&d, 64));
		return d[3]; /* a GPU's device memory is not host memory */
	}
	if (!strcmp(mode, "kernel-past-end")) {
		CUDA(cudaMalloc((void **)&d, 1024));
		write_kernel<<<1, 1>>>(d, 256 + 64); /* past the 1024 bytes, and past the rounding to 256 */
		return cudaDeviceSynchronize();
	}
	if (!strcmp(mode, "use-after-free")) {
		CUDA(cudaMalloc((void **)&d, 1024));
		int *keep = d;
		CUDA(cudaFree(d));
		write_kernel<<<1, 1>>>(keep, 0); /* refused at the launch: freed memory */
		return cudaGetLastError() == cudaErrorInvalidValue ? 3 : 0;
	}
	if (!strcmp(mode, "barrier-divergent")) {
		CUDA(cudaMalloc((void **)&d, 64 * sizeof(int)));
		split_barrier_kernel<<<1, 64>>>(d);
		return cudaDeviceSynchronize();
	}
	if (!strcmp(mode, "barrier-exit")) {
		CUDA(cudaMalloc((void **)&d, 64 * sizeof(int)));
		early_exit_kernel<<<1, 64>>>(d);
		return cudaDeviceSynchronize();
	}
	if (!strcmp(mode, "shared-over-48k")) { /* the first launch: the static size is learnt as it runs */
		CUDA(cudaMallocManaged((void **)&d, sizeof(int)));
		big_static_kernel<<<1, 64, 20 * 1024>>>(d, 10);
		return cudaDeviceSynchronize();
	}
	if (!strcmp(mode, "leak")) {
		setenv("RS_CUDASIM_LEAK_CHECK", "1", 1);
		CUDA(cudaMalloc((void **)&d, 64));
		return 0;
	}
	return 2;
}

static void faults(void)
{
	std::string err;
	int st = child("host-reads-device", &err);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV && err.find("from host code") != std::string::npos,
	      "faults: host read of device memory: status %#x, said: %s", st, err.c_str());
	st = child("kernel-past-end", &err);
	CHECK(WIFSIGNALED(st) && err.find("past the end of a 1024-byte") != std::string::npos &&
		      err.find("in kernel write_kernel") != std::string::npos && err.find("RS_CUDASIM_SEED") != std::string::npos,
	      "faults: a kernel past the end: status %#x, said: %s", st, err.c_str());
	st = child("use-after-free", &err);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3 && err.find("freed device memory") != std::string::npos,
	      "faults: a launch on freed memory: status %#x, said: %s", st, err.c_str());
	st = child("leak", &err);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && err.find("leak: 64 bytes") != std::string::npos,
	      "faults: a leak: status %#x, said: %s", st, err.c_str());
	st = child("barrier-divergent", &err);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && err.find("divergent __syncthreads in kernel split_barrier_kernel") != std::string::npos &&
		      err.find("test_cudasim.cu:" + std::to_string(split_line)) != std::string::npos &&
		      err.find("test_cudasim.cu:" + std::to_string(split_line + 3)) != std::string::npos,
	      "faults: threads at two barriers: status %#x, said: %s", st, err.c_str());
	st = child("barrier-exit", &err);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && err.find("in kernel early_exit_kernel") != std::string::npos &&
		      err.find("has exited (without passing a barrier)") != std::string::npos &&
		      err.find("test_cudasim.cu:" + std::to_string(exit_line)) != std::string::npos,
	      "faults: a barrier some threads exited before: status %#x, said: %s", st, err.c_str());
	st = child("shared-over-48k", &err);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT &&
		      err.find("32768 bytes of static shared memory and 20480 of dynamic exceed 48 KiB") != std::string::npos,
	      "faults: 32 KiB static + 20 KiB dynamic shared memory: status %#x, said: %s", st, err.c_str());
	printf("faults: host access to device memory, a kernel past the end, use after free, a leak, divergent "
	       "barriers, too much shared memory\n");
}

/* ---- cub -------------------------------------------------------------------------------------- */

static void cub_primitives(void)
{
	int n = 5000;
	std::vector<int32_t> key(n), val(n);
	for (int i = 0; i < n; i++) {
		key[i] = (int32_t)((i * 2654435761u) % 97) - 40; /* negative keys too */
		val[i] = i;
	}
	int32_t *dk, *dko, *dv, *dvo;
	CUDA(cudaMalloc((void **)&dk, 4 * n));
	CUDA(cudaMalloc((void **)&dko, 4 * n));
	CUDA(cudaMalloc((void **)&dv, 4 * n));
	CUDA(cudaMalloc((void **)&dvo, 4 * n));
	CUDA(cudaMemcpy(dk, key.data(), 4 * n, cudaMemcpyHostToDevice));
	CUDA(cudaMemcpy(dv, val.data(), 4 * n, cudaMemcpyHostToDevice));
	size_t bytes = 0;
	CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (int32_t *)nullptr, (int32_t *)nullptr, (int32_t *)nullptr,
					      (int32_t *)nullptr, n) == cudaSuccess && bytes > 0,
	      "cub: size query");
	void *tmp;
	CUDA(cudaMalloc(&tmp, bytes));
	size_t less = bytes - 1;
	CHECK(cub::DeviceRadixSort::SortPairs(tmp, less, dk, dko, dv, dvo, n) == cudaErrorInvalidValue,
	      "cub: too little temporary storage accepted");
	cudaGetLastError();
	CHECK(cub::DeviceRadixSort::SortPairs(tmp, bytes, dk, dk, dv, dvo, n) == cudaErrorInvalidValue,
	      "cub: an in-place sort accepted");
	cudaGetLastError();
	for (int end_bit : {32, 3}) { /* all bits (signed order), then only the low 3 bits */
		CUDA(cub::DeviceRadixSort::SortPairs(tmp, bytes, dk, dko, dv, dvo, n, 0, end_bit));
		std::vector<int32_t> ko(n), vo(n);
		CUDA(cudaMemcpy(ko.data(), dko, 4 * n, cudaMemcpyDeviceToHost));
		CUDA(cudaMemcpy(vo.data(), dvo, 4 * n, cudaMemcpyDeviceToHost));
		std::vector<int> idx(n);
		for (int i = 0; i < n; i++)
			idx[i] = i;
		auto bits = [&](int32_t k) { return end_bit == 32 ? (int64_t)k : (int64_t)((uint32_t)k & 7u); };
		std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return bits(key[a]) < bits(key[b]); });
		int bad = 0;
		for (int i = 0; i < n; i++)
			bad += vo[i] != idx[i] || ko[i] != key[idx[i]];
		CHECK(bad == 0, "cub: SortPairs over bits [0, %d): %d items out of place (stable order expected)", end_bit, bad);
	}
	/* run-length encoding, scan in place, select flagged */
	std::vector<int32_t> runs_in = {4, 4, 4, 7, 9, 9, -1, -1, -1, -1};
	int m = (int)runs_in.size();
	int32_t *din, *duniq, *dcnt, *dnr;
	CUDA(cudaMalloc((void **)&din, 4 * m));
	CUDA(cudaMalloc((void **)&duniq, 4 * m));
	CUDA(cudaMalloc((void **)&dcnt, 4 * m));
	CUDA(cudaMalloc((void **)&dnr, 4));
	CUDA(cudaMemcpy(din, runs_in.data(), 4 * m, cudaMemcpyHostToDevice));
	CUDA(cudaMemset(dcnt, 0x7f, 4 * m));
	size_t b2 = 0;
	CUDA(cub::DeviceRunLengthEncode::Encode(nullptr, b2, din, duniq, dcnt, dnr, m));
	CUDA(cub::DeviceRunLengthEncode::Encode(tmp, b2, din, duniq, dcnt, dnr, m));
	std::vector<int32_t> u(m), c(m);
	int32_t nr = 0;
	CUDA(cudaMemcpy(&nr, dnr, 4, cudaMemcpyDeviceToHost));
	CUDA(cudaMemcpy(u.data(), duniq, 4 * m, cudaMemcpyDeviceToHost));
	CUDA(cudaMemcpy(c.data(), dcnt, 4 * m, cudaMemcpyDeviceToHost));
	CHECK(nr == 4 && u[0] == 4 && u[1] == 7 && u[2] == 9 && u[3] == -1 && c[0] == 3 && c[1] == 1 && c[2] == 2 && c[3] == 4,
	      "cub: Encode gave %d runs", nr);
	CHECK(c[4] == 0x7f7f7f7f, "cub: Encode wrote past its runs");
	CUDA(cub::DeviceScan::ExclusiveSum(nullptr, b2, dcnt, dcnt, nr));
	CUDA(cub::DeviceScan::ExclusiveSum(tmp, b2, dcnt, dcnt, nr));
	CUDA(cudaMemcpy(c.data(), dcnt, 4 * m, cudaMemcpyDeviceToHost));
	CHECK(c[0] == 0 && c[1] == 3 && c[2] == 4 && c[3] == 6, "cub: ExclusiveSum in place: %d %d %d %d", c[0], c[1], c[2], c[3]);
	unsigned char flags[10] = {1, 0, 0, 1, 1, 0, 0, 0, 1, 1}, *dfl;
	int64_t *dsel, sel = 0;
	CUDA(cudaMalloc((void **)&dfl, m));
	CUDA(cudaMalloc((void **)&dsel, 8));
	CUDA(cudaMemcpy(dfl, flags, m, cudaMemcpyHostToDevice));
	CUDA(cub::DeviceSelect::Flagged(nullptr, b2, din, dfl, duniq, dsel, (int64_t)m));
	CUDA(cub::DeviceSelect::Flagged(tmp, b2, din, dfl, duniq, dsel, (int64_t)m));
	CUDA(cudaMemcpy(&sel, dsel, 8, cudaMemcpyDeviceToHost));
	CUDA(cudaMemcpy(u.data(), duniq, 4 * m, cudaMemcpyDeviceToHost));
	CHECK(sel == 5 && u[0] == 4 && u[1] == 7 && u[2] == 9 && u[3] == -1 && u[4] == -1, "cub: Flagged selected %lld",
	      (long long)sel);
	/* every primitive: too little storage, storage sized for fewer items, storage overlapping an operand */
	int refused = 0, tried = 0;
	auto refuses = [&](cudaError_t e) {
		tried++;
		refused += e == cudaErrorInvalidValue;
		cudaGetLastError();
	};
	size_t be = 0, bs = 0, bf = 0, small_e = 0, small_s = 0, small_f = 0;
	int32_t *d32 = dko;
	CUDA(cub::DeviceRunLengthEncode::Encode(nullptr, be, dk, d32, dvo, dnr, n));
	CUDA(cub::DeviceScan::ExclusiveSum(nullptr, bs, dk, d32, n));
	CUDA(cub::DeviceSelect::Flagged(nullptr, bf, dk, dfl, d32, dsel, (int64_t)n));
	CUDA(cub::DeviceRunLengthEncode::Encode(nullptr, small_e, dk, d32, dvo, dnr, 10));
	CUDA(cub::DeviceScan::ExclusiveSum(nullptr, small_s, dk, d32, 10));
	CUDA(cub::DeviceSelect::Flagged(nullptr, small_f, dk, dfl, d32, dsel, (int64_t)1));
	size_t le = be - 1, ls = bs - 1, lf = bf - 1;
	refuses(cub::DeviceRunLengthEncode::Encode(tmp, le, dk, d32, dvo, dnr, n));
	refuses(cub::DeviceScan::ExclusiveSum(tmp, ls, dk, d32, n));
	refuses(cub::DeviceSelect::Flagged(tmp, lf, dk, dfl, d32, dsel, (int64_t)n)); /* refused before its ranges */
	refuses(cub::DeviceRunLengthEncode::Encode(tmp, small_e, dk, d32, dvo, dnr, n));
	refuses(cub::DeviceScan::ExclusiveSum(tmp, small_s, dk, d32, n));
	refuses(cub::DeviceSelect::Flagged(tmp, small_f, dk, dfl, d32, dsel, (int64_t)n));
	size_t whole = 4 * (size_t)n;
	refuses(cub::DeviceRunLengthEncode::Encode((void *)dvo, whole, dk, d32, dvo, dnr, n));
	refuses(cub::DeviceScan::ExclusiveSum((void *)dk, whole, dk, d32, n));
	refuses(cub::DeviceSelect::Flagged((void *)dk, whole, dk, dfl, d32, dsel, (int64_t)m));
	CHECK(refused == tried, "cub: %d of %d calls with bad temporary storage refused", refused, tried);
	CHECK(be > small_e && bs > small_s && bf > small_f, "cub: the temporary storage does not grow with the items");
	for (void *p : {(void *)dk, (void *)dko, (void *)dv, (void *)dvo, tmp, (void *)din, (void *)duniq, (void *)dcnt,
			(void *)dnr, (void *)dfl, (void *)dsel})
		CUDA(cudaFree(p));
	printf("cub: sort (stable, bit ranges, signed), encode, scan, select; every primitive refuses too little or "
	       "overlapping temporary storage\n");
}

/* ---- cuBLAS through dlopen, as worker/engine_cuda.c opens it ------------------------------- */

#define STR2(x) #x
#define STR(x) STR2(x)

static void cublas(void)
{
	void *h = dlopen("libcublas.so." STR(CUBLAS_VER_MAJOR), RTLD_NOW | RTLD_LOCAL);
	CHECK(h != nullptr, "cublas: dlopen: %s", dlerror());
	if (!h)
		return;
	auto create = (cublasStatus_t(*)(cublasHandle_t *))dlsym(h, "cublasCreate_v2");
	auto destroy = (cublasStatus_t(*)(cublasHandle_t))dlsym(h, "cublasDestroy_v2");
	auto sgemm = (decltype(&cublasSgemm_v2))dlsym(h, "cublasSgemm_v2");
	CHECK(create && destroy && sgemm, "cublas: symbols missing");
	if (!create || !destroy || !sgemm)
		return;
	cublasHandle_t b;
	CHECK(create(&b) == CUBLAS_STATUS_SUCCESS, "cublas: create");
	int m = 5, n = 4, k = 3, bad = 0;
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			std::vector<float> A(m * k), B(k * n), C(m * n, __builtin_nanf("")), W(m * n);
			for (int i = 0; i < m * k; i++)
				A[i] = (float)(i % 7) - 2.5f;
			for (int i = 0; i < k * n; i++)
				B[i] = (float)(i % 5) * 0.5f;
			int lda = ta ? k : m, ldb = tb ? n : k;
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++) {
					float s = 0;
					for (int p = 0; p < k; p++)
						s += (ta ? A[i * lda + p] : A[p * lda + i]) * (tb ? B[p * ldb + j] : B[j * ldb + p]);
					W[j * m + i] = s;
				}
			float *d;
			CUDA(cudaMalloc((void **)&d, sizeof(float) * (m * k + k * n + m * n)));
			CUDA(cudaMemcpy(d, A.data(), sizeof(float) * m * k, cudaMemcpyHostToDevice));
			CUDA(cudaMemcpy(d + m * k, B.data(), sizeof(float) * k * n, cudaMemcpyHostToDevice));
			CUDA(cudaMemcpy(d + m * k + k * n, C.data(), sizeof(float) * m * n, cudaMemcpyHostToDevice));
			float one = 1, zero = 0;
			CHECK(sgemm(b, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, d, lda,
				    d + m * k, ldb, &zero, d + m * k + k * n, m) == CUBLAS_STATUS_SUCCESS,
			      "cublas: sgemm");
			CUDA(cudaMemcpy(C.data(), d + m * k + k * n, sizeof(float) * m * n, cudaMemcpyDeviceToHost));
			for (int i = 0; i < m * n; i++)
				bad += C[i] != W[i]; /* beta 0: the NaNs in C are not read */
			float one_f = 1;
			CHECK(sgemm(b, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one_f, d, m - 1, d, k, &zero, d, m) ==
				      CUBLAS_STATUS_INVALID_VALUE,
			      "cublas: lda below m accepted");
			CUDA(cudaFree(d));
		}
	CHECK(bad == 0, "cublas: %d elements differ from the loop", bad);
	CHECK(destroy(b) == CUBLAS_STATUS_SUCCESS && destroy(b) != CUBLAS_STATUS_SUCCESS, "cublas: destroy twice");
	dlclose(h);
	printf("cublas: sgemm (both transposes, beta 0), argument checks, through dlopen\n");
}

/* ---- the NCCL simulator's buffer checks, through dlopen (a world of one) ------------------------ */

static void nccl_buffers(void)
{
	void *h = dlopen("libncclsim.so", RTLD_NOW | RTLD_LOCAL);
	CHECK(h != nullptr, "nccl: dlopen: %s", dlerror());
	if (!h)
		return;
	auto get_id = (decltype(&ncclGetUniqueId))dlsym(h, "ncclGetUniqueId");
	auto init = (decltype(&ncclCommInitRank))dlsym(h, "ncclCommInitRank");
	auto group_start = (decltype(&ncclGroupStart))dlsym(h, "ncclGroupStart");
	auto group_end = (decltype(&ncclGroupEnd))dlsym(h, "ncclGroupEnd");
	auto send = (decltype(&ncclSend))dlsym(h, "ncclSend");
	auto recv = (decltype(&ncclRecv))dlsym(h, "ncclRecv");
	auto destroy = (decltype(&ncclCommDestroy))dlsym(h, "ncclCommDestroy");
	CHECK(get_id && init && group_start && group_end && send && recv && destroy, "nccl: symbols missing");
	if (!get_id || !init || !group_start || !group_end || !send || !recv || !destroy)
		return;
	ncclUniqueId id;
	ncclComm_t c;
	CHECK(get_id(&id) == ncclSuccess && init(&c, 1, id, 0) == ncclSuccess, "nccl: a world of one");
	const size_t n = 1000;
	unsigned char *a, *b;
	CUDA(cudaMalloc(&a, n));
	CUDA(cudaMalloc(&b, n));
	std::vector<unsigned char> want(n), got(n);
	for (size_t i = 0; i < n; i++)
		want[i] = (unsigned char)(i * 13 + 5);
	CUDA(cudaMemcpy(a, want.data(), n, cudaMemcpyHostToDevice));
	ncclResult_t r1 = group_start(), r2 = send(a, n, ncclUint8, 0, c, 0), r3 = recv(b, n, ncclUint8, 0, c, 0),
		     r4 = group_end();
	CHECK(r1 == ncclSuccess && r2 == ncclSuccess && r3 == ncclSuccess && r4 == ncclSuccess, "nccl: a send to self");
	CUDA(cudaStreamSynchronize(0));
	CUDA(cudaMemcpy(got.data(), b, n, cudaMemcpyDeviceToHost));
	CHECK(got == want, "nccl: the bytes sent to self differ");
	/* refused at the call, before any work is queued */
	CHECK(send(a, n + 1, ncclUint8, 0, c, 0) == ncclInvalidArgument, "nccl: %zu bytes from a %zu-byte buffer", n + 1, n);
	CHECK(recv(b + 1, n, ncclUint8, 0, c, 0) == ncclInvalidArgument, "nccl: %zu bytes into %zu", n, n - 1);
	CHECK(send(a, n / 4 + 1, ncclFloat32, 0, c, 0) == ncclInvalidArgument, "nccl: %zu floats from %zu bytes",
	      n / 4 + 1, n);
	CHECK(send(a + n, 1, ncclUint8, 0, c, 0) == ncclInvalidArgument, "nccl: a send from one past the end");
	CHECK(send(want.data(), n, ncclUint8, 0, c, 0) == ncclInvalidArgument, "nccl: a send from pageable memory");
	CHECK(destroy(c) == ncclSuccess, "nccl: destroy");
	CUDA(cudaFree(a));
	CUDA(cudaFree(b));
	(void)cudaGetLastError();
	dlclose(h);
	printf("nccl: a send to self; short buffers, one past the end and pageable memory refused\n");
}

int main(int argc, char **argv)
{
	if (argc == 2)
		return child_mode(argv[1]);
	barriers();
	shared_memory();
	streams();
	errors_and_memory();
	faults();
	cub_primitives();
	cublas();
	nccl_buffers();
	printf("test_cudasim: %d checks, %d failed\n", checks, failures);
	return failures ? 1 : 0;
}
