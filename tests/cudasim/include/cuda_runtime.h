/*
 * cuda_runtime.h - the CUDA simulator's device side (tests/cudasim): what
 * nvcc gives a .cu file implicitly (qualifiers, dim3 and the vector types,
 * threadIdx / blockIdx / blockDim / gridDim, __syncthreads, atomics, the
 * rounding intrinsics) and the kernel launch that tests/cudasim/cu2cc.py
 * rewrites `k<<<grid, block, shmem, stream>>>(args)` into. The simulator
 * compiles every .cu with `-include cuda_runtime.h`, as nvcc does.
 *
 * A kernel runs on the CPU when its stream's work is waited for: the blocks
 * of the grid one after another in a random order, the threads of a block
 * as cooperative fibers. Between two barriers the block's threads run one
 * at a time, each to its next __syncthreads (or its end), in an order drawn
 * afresh for every phase from the launch's seed (RS_CUDASIM_SEED): a
 * missing barrier or a race on shared memory changes the result. No warps:
 * a warp's threads run one at a time too (warp-synchronous exchange without
 * a barrier is a race here), and the warp intrinsics are not declared.
 * __syncthreads carries its call site: threads of a block waiting at
 * different ones, or waiting while others exited, stop the run. Shared
 * memory (static __shared__ variables and the dynamic extern array) is per
 * block and holds garbage when the block starts. Atomics are exact (threads
 * are never preempted between barriers).
 *
 * Device code is compiled with __CUDA_ARCH__ = 800, so __host__ __device__
 * code takes its device branches.
 */
#ifndef CUDASIM_CUDA_RUNTIME_H
#define CUDASIM_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- qualifiers -------------------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __constant__ static
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
/* cu2cc.py rewrites every __shared__ declaration; one it could not is a compile error here. */
#define __shared__ cudasim_shared_declaration_not_rewritten_by_cu2cc

/* ---- vector types -------------------------------------------------------------------- */

struct uint3 {
	unsigned int x, y, z;
};
struct __align__(8) uint2 {
	unsigned int x, y;
};
struct __align__(16) uint4 {
	unsigned int x, y, z, w;
};
struct __align__(8) int2 {
	int x, y;
};
struct __align__(16) int4 {
	int x, y, z, w;
};
struct __align__(8) float2 {
	float x, y;
};
struct __align__(16) float4 {
	float x, y, z, w;
};

struct dim3 {
	unsigned int x, y, z;
	constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
	constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
	constexpr operator uint3() const { return uint3{x, y, z}; }
};

/* ---- the simulator's interface to the generated code ------------------------------- */

namespace cudasim {

/* The running thread's coordinates (set by the scheduler at every switch). */
extern uint3 thread_idx, block_idx;
extern dim3 block_dim, grid_dim;

/* Where a launch is in the source, for diagnostics. */
struct site {
	const char *file;
	int line;
	const char *kernel;
};

/* A kernel argument passed by value that is a struct: its bytes, scanned at the launch for host pointers. */
struct arg_bytes {
	int index; /* 1-based, as diagnostics count arguments */
	const void *p;
	size_t n;
};

/* One launch, as the generated code hands it over: thread_main(args) runs one thread. */
struct kernel_launch {
	site where;
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
	const void *func; /* the kernel (cudaFuncSetAttribute's key) */
	void (*thread_main)(void *args);
	void *args;
	void (*free_args)(void *args);
	const void *const *pointers; /* the kernel's pointer arguments, checked at the launch */
	int npointers;
	const arg_bytes *structs; /* its struct arguments that may hold pointers, scanned at the launch */
	int nstructs;
};

/* Validate and queue a launch (the runtime owns args from here on); the result is the launch's error. */
cudaError_t launch_kernel(const kernel_launch &l);

/* A static __shared__ variable's storage for the running block. */
struct shared_slot {
	unsigned long long block;
	void *ptr;
};
extern unsigned long long block_serial; /* the running block's number, unique per process */
void *shared_alloc(size_t size, size_t align);
template <typename T> inline T &shared_get(shared_slot &s)
{
	if (s.block != block_serial) {
		s.ptr = shared_alloc(sizeof(T), alignof(T));
		s.block = block_serial;
	}
	return *static_cast<T *>(s.ptr);
}
/* The running block's dynamic shared memory (extern __shared__). */
void *dynamic_shared();

/* A barrier; file:line is the __syncthreads call's site (divergent barriers are named by it). */
void syncthreads(const char *file, int line);

/* ---- for the simulated libraries (cub, cuBLAS) ---- */

/* Queue fn on stream (in its order); `what` names it in diagnostics. */
cudaError_t enqueue(cudaStream_t stream, std::function<void()> fn, const char *what);
/* cudaSuccess when [p, p + bytes) lies in memory kernels may use; otherwise says why on stderr. */
cudaError_t check_device_range(const void *p, size_t bytes, const char *what);
/* Record err as the calling thread's last error (as a failed runtime call does) and return it. */
cudaError_t set_error(cudaError_t err);

template <typename T> struct arg_pointer {
	static const void *of(const T &) { return nullptr; }
	static constexpr bool is = false;
};
template <typename T> struct arg_pointer<T *> {
	static const void *of(T *const &p) { return (const void *)p; }
	static constexpr bool is = true;
};

/*
 * A by-value struct argument that can hold a pointer (pointer-aligned, at
 * least a pointer wide): its bytes are scanned at the launch, so that a host
 * pointer inside a struct is refused as a plain pointer argument is.
 */
template <typename T> inline void note_struct(const T &x, int index, arg_bytes *out, int &n)
{
	if constexpr (std::is_class<T>::value && alignof(T) >= sizeof(void *) && sizeof(T) >= sizeof(void *))
		out[n++] = arg_bytes{index, &x, sizeof(T)};
}

template <typename F, typename Tuple> struct kernel_args {
	F fn;
	Tuple args;
};

template <typename F, typename Tuple> void run_thread(void *p)
{
	auto *k = static_cast<kernel_args<F, Tuple> *>(p);
	std::apply(k->fn, k->args); /* by-value parameters: every thread gets its own copies */
}

template <typename F, typename Tuple> void free_args(void *p) { delete static_cast<kernel_args<F, Tuple> *>(p); }

template <typename... P> struct launcher {
	void (*fn)(P...);
	kernel_launch l;
	template <typename... A> void operator()(A &&...a) const
	{
		static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
		using tuple = std::tuple<std::decay_t<P>...>;
		using pack = kernel_args<void (*)(P...), tuple>;
		auto *k = new pack{fn, tuple(std::forward<A>(a)...)};
		const void *ptrs[sizeof...(P) + 1] = {};
		arg_bytes structs[sizeof...(P) + 1] = {};
		int n = 0, ns = 0;
		std::apply([&](const auto &...x) { ((ptrs[n++] = arg_pointer<std::decay_t<decltype(x)>>::of(x)), ...); },
			   k->args);
		n = 0;
		std::apply([&](const auto &...x) { (note_struct(x, ++n, structs, ns), ...); }, k->args);
		kernel_launch m = l;
		m.func = (const void *)fn;
		m.thread_main = &run_thread<void (*)(P...), tuple>;
		m.args = k;
		m.free_args = &free_args<void (*)(P...), tuple>;
		m.pointers = ptrs;
		m.npointers = (int)sizeof...(P);
		m.structs = structs;
		m.nstructs = ns;
		launch_kernel(m);
	}
};

/* k<<<grid, block, shmem, stream>>>(args) becomes launch(site, k, grid, block, shmem, stream)(args). */
template <typename... P>
launcher<P...> launch(site where, void (*fn)(P...), dim3 grid, dim3 block, size_t shmem = 0, cudaStream_t stream = 0)
{
	return launcher<P...>{fn, kernel_launch{where, grid, block, shmem, stream, nullptr, nullptr, nullptr, nullptr,
						nullptr, 0, nullptr, 0}};
}

} /* namespace cudasim */

#define threadIdx (::cudasim::thread_idx)
#define blockIdx (::cudasim::block_idx)
#define blockDim (::cudasim::block_dim)
#define gridDim (::cudasim::grid_dim)
static constexpr int warpSize = 32;

#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 800
#endif

/* ---- synchronization ------------------------------------------------------------------ */

/* Each call site is a barrier of its own: threads of a block waiting at different ones fail the run. */
#define __syncthreads() ::cudasim::syncthreads(__FILE__, __LINE__)
inline void __threadfence() {}
inline void __threadfence_block() {}

/* ---- atomics (exact: a thread is never preempted between barriers) ------------------- */

#define CUDASIM_ATOMIC(T)                                                        \
	inline T atomicAdd(T *a, T v) { T o = *a; *a = (T)(o + v); return o; }   \
	inline T atomicSub(T *a, T v) { T o = *a; *a = (T)(o - v); return o; }   \
	inline T atomicExch(T *a, T v) { T o = *a; *a = v; return o; }           \
	inline T atomicMin(T *a, T v) { T o = *a; *a = v < o ? v : o; return o; } \
	inline T atomicMax(T *a, T v) { T o = *a; *a = v > o ? v : o; return o; } \
	inline T atomicAnd(T *a, T v) { T o = *a; *a = o & v; return o; }        \
	inline T atomicOr(T *a, T v) { T o = *a; *a = o | v; return o; }         \
	inline T atomicXor(T *a, T v) { T o = *a; *a = o ^ v; return o; }        \
	inline T atomicCAS(T *a, T cmp, T v) { T o = *a; if (o == cmp) *a = v; return o; }
CUDASIM_ATOMIC(int)
CUDASIM_ATOMIC(unsigned int)
CUDASIM_ATOMIC(unsigned long long)
#undef CUDASIM_ATOMIC
inline float atomicAdd(float *a, float v) { float o = *a; *a = o + v; return o; }
inline double atomicAdd(double *a, double v) { double o = *a; *a = o + v; return o; }
inline float atomicExch(float *a, float v) { float o = *a; *a = v; return o; }

/* ---- arithmetic intrinsics: IEEE single precision, round to nearest even ------------- */
/* (the simulator compiles with -ffp-contract=off, so nothing is fused) */

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return __builtin_sqrtf(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }

inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
	return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)(((unsigned long long)a * b) >> 32); }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }

/* ---- host-side conveniences of the real header ---------------------------------------- */

template <typename T> inline cudaError_t cudaFuncSetAttribute(T *entry, enum cudaFuncAttribute attr, int value)
{
	return cudaFuncSetAttribute((const void *)entry, attr, value);
}
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t size) { return cudaMalloc((void **)p, size); }
template <typename T> inline cudaError_t cudaMallocHost(T **p, size_t size) { return cudaMallocHost((void **)p, size); }
template <typename T> inline cudaError_t cudaMallocManaged(T **p, size_t size, unsigned int flags = cudaMemAttachGlobal)
{
	return cudaMallocManaged((void **)p, size, flags);
}
template <typename T> inline cudaError_t cudaMallocAsync(T **p, size_t size, cudaStream_t s)
{
	return cudaMallocAsync((void **)p, size, s);
}

#endif /* __cplusplus */

#endif
