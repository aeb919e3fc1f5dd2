/*
 * runtime.cc - the CUDA simulator's runtime (libcudasim.so): CUDA's runtime
 * API as rowshift uses it, and the executor of simulated kernels, on the
 * CPU. Test infrastructure (tests/cudasim): never linked into the product.
 *
 * The model, what it shares with a GPU and where it is stricter:
 *  - One device, "cudasim" (RS_CUDASIM_DEVICES=0: none), RS_CUDASIM_SMS
 *    multiprocessors (default 4), concurrent managed access.
 *  - Memory. Every allocation is its own mapping, 256-byte aligned and
 *    pushed against a guard page, so that running off its end (by more than
 *    the rounding to 256 bytes) faults. Device memory (cudaMalloc,
 *    cudaMallocAsync) is PROT_NONE while host code runs and opened only
 *    while the simulator runs device work: host code touching it faults, as
 *    on a GPU. (Device work opens device memory where it touches it, 256 KiB
 *    at a time: the fault handler opens the piece and the access runs
 *    again; the work's end closes what was opened. Opening all of it for
 *    every drain cost more than the work.) Managed and pinned memory are
 *    always host-accessible. Fresh allocations hold a garbage byte pattern,
 *    never zeros. Freed memory stays
 *    mapped PROT_NONE for a while, so a use after free faults. A fault prints
 *    what was hit (which allocation, how far past its end, which kernel,
 *    block and thread) and the seed.
 *  - Streams. Work queued on a stream runs when something waits for it:
 *    cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a
 *    blocking copy, cudaFree. So host code that reads a result before
 *    waiting reads stale data, as it may on a GPU. Per stream the work runs
 *    in order; when several streams are drained at once their operations
 *    interleave in a random order. The legacy default stream waits for the
 *    blocking streams and they for it; non-blocking streams do not.
 *    cudaMemset and device-to-device cudaMemcpy are only queued (they are
 *    asynchronous to the host); other cudaMemcpy return after the copy.
 *    A copy from pageable host memory (not pinned, not managed) takes its
 *    source at the call, as CUDA's driver stages pageable memory before
 *    returning;
 *    a copy from pinned or managed memory reads it when the copy runs, and
 *    one into pageable memory lands when the copy runs (CUDA may finish it
 *    before returning, may not: code must wait either way).
 *  - Kernels. A launch is checked (dimensions, shared memory, stream, every
 *    pointer argument must point into device, managed or pinned memory, and
 *    no by-value struct argument may hold a pointer into host memory the
 *    simulator knows for host memory: see struct_word) and queued. When it
 *    runs, its blocks run one after another in a random order; a block's
 *    threads are fibers. Between two barriers the block's threads run one at
 *    a time, each up to its next __syncthreads or its end, in an order drawn
 *    afresh per phase. There are no warps: the 32 threads a GPU would run in
 *    lockstep run one at a time like any others, and there are no warp
 *    intrinsics (__shfl_sync, __syncwarp, ...: code using them does not
 *    compile here). After each phase every thread must wait at the same
 *    __syncthreads (its call site, file:line), or all must have exited:
 *    otherwise the run stops naming the kernel, both threads and both sites.
 *    Shared memory is per block and starts as garbage; static and dynamic
 *    together at most 48 KiB, unless the kernel opted in with
 *    cudaFuncSetAttribute (static sizes are learnt as kernels run: the first
 *    launch over the limit stops when it runs, later ones fail at the
 *    launch). The seed of every draw comes from RS_CUDASIM_SEED (default 1;
 *    "random": from the clock), printed when the process fails.
 *  - Errors. Bad arguments return CUDA's error codes and set the thread's
 *    last error, as the runtime does; a line on stderr says what was wrong.
 *  - prefetch, advise: check their arguments (managed memory, a valid
 *    location) and do nothing. cudaMemDiscardBatchAsync checks them and
 *    fills the ranges with garbage: discarded contents are undefined.
 *  - RS_CUDASIM_LEAK_CHECK=1: allocations still live at exit are listed
 *    and fail the process (as compute-sanitizer --leak-check full does).
 *  - RS_CUDASIM_TRACE=1: every operation is logged as it runs.
 *
 * Threads: every entry point takes one process-wide lock, and kernels run
 * under it, on the thread that waits for them.
 */
#include <cuda_runtime.h>

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace cudasim {

uint3 thread_idx, block_idx;
dim3 block_dim, grid_dim;
unsigned long long block_serial;

namespace {

/* ---- configuration, the lock, diagnostics ------------------------------------------------ */

std::recursive_mutex big_lock;
#define LOCKED std::lock_guard<std::recursive_mutex> cudasim_guard(big_lock)

struct config {
	unsigned long long seed = 1;
	int devices = 1;
	int sms = 4;
	bool leak_check = false;
	bool trace = false;
};

config &cfg()
{
	static config c = [] {
		config k;
		const char *s = getenv("RS_CUDASIM_SEED");
		if (s && !strcmp(s, "random")) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			k.seed = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 20) ^ (unsigned long long)getpid();
		} else if (s && *s) {
			k.seed = strtoull(s, NULL, 0);
		}
		if ((s = getenv("RS_CUDASIM_DEVICES")) && *s)
			k.devices = atoi(s) > 0 ? 1 : 0;
		if ((s = getenv("RS_CUDASIM_SMS")) && *s && atoi(s) > 0)
			k.sms = atoi(s);
		k.leak_check = (s = getenv("RS_CUDASIM_LEAK_CHECK")) && *s == '1';
		k.trace = (s = getenv("RS_CUDASIM_TRACE")) && *s == '1';
		return k;
	}();
	return c;
}

void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	ssize_t w = write(2, "cudasim: ", 9);
	w = write(2, buf, (size_t)n);
	(void)w;
}

[[noreturn]] void fatal(const char *what)
{
	say("fatal: %s (RS_CUDASIM_SEED=%llu reproduces this run)", what, cfg().seed);
	abort();
}

uint64_t splitmix(uint64_t &s)
{
	uint64_t z = (s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The process's draws that are not a launch's (stream interleaving, garbage bytes). */
uint64_t rng_state;
bool rng_ready;
uint64_t draw()
{
	if (!rng_ready) {
		rng_state = cfg().seed ^ 0x5ca1ab1e;
		rng_ready = true;
	}
	return splitmix(rng_state);
}

/*
 * A byte for garbage fills: 0x60..0x7e or 0xe0..0xfe, so that garbage read
 * as a float is large (|x| > 1e19, a product overflows to inf and NaN
 * follows: a failure that is fast and visible, never denormals that crawl),
 * as an int32/int64 an index far out of any range, and never zero.
 */
unsigned char poison_of(uint64_t r) { return (unsigned char)((r & 0x80) | (0x60 + (r >> 8) % 31)); }
unsigned char garbage_byte() { return poison_of(draw()); }

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

/* A bad argument: say what and where (the caller of the API), fail with e. */
cudaError_t bad(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t bad(cudaError_t e, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	say("%s: %s", buf, cudaGetErrorName(e));
	return fail(e);
}

size_t page_size() { return (size_t)sysconf(_SC_PAGESIZE); }
size_t round_to(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* ---- memory ------------------------------------------------------------------------------ */

enum mem_kind { MEM_DEVICE, MEM_MANAGED, MEM_PINNED };
const char *const kind_name[] = {"device (cudaMalloc)", "managed (cudaMallocManaged)", "pinned host (cudaMallocHost)"};

struct allocation {
	uintptr_t base;  /* what the caller got */
	size_t size;     /* what the caller asked for */
	size_t span;     /* size rounded up to 256: [base, base + span) ends at the guard page */
	char *map;       /* the mapping: pages, then the guard page */
	size_t map_len;
	mem_kind kind;
	bool freeing;    /* cudaFreeAsync queued */
	const void *caller;
};

std::map<uintptr_t, allocation> live;       /* by base */
std::deque<allocation> freed;               /* mapped PROT_NONE, newest last */
int device_open;                            /* nesting of device work running: device memory is accessible */

const allocation *find_live(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	auto it = live.upper_bound(a);
	if (it == live.begin())
		return nullptr;
	--it;
	return a <= it->second.base + it->second.size ? &it->second : nullptr; /* one past the end included */
}

void protect(const allocation &m, int prot)
{
	size_t pg = page_size();
	char *lo = (char *)(m.base / pg * pg);
	if (mprotect(lo, (size_t)(m.map + m.map_len - pg - lo), prot) != 0)
		fatal("mprotect failed");
}

size_t live_bytes;
const size_t total_bytes = (size_t)16 << 30;

/* Device memory opened by the device work running (open_on_fault), to close at its end: [start, end) pieces. */
const size_t OPEN_PIECE = (size_t)256 << 10;
std::vector<std::pair<char *, char *>> opened;

/* Device work begins: device memory is opened where it is touched (open_on_fault). */
void open_device()
{
	if (device_open++ == 0) /* room for all of it: the fault handler's pushes allocate nothing */
		opened.reserve(total_bytes / OPEN_PIECE + 64);
}

/* Device work ends: what it opened is closed again. */
void close_device()
{
	if (--device_open > 0)
		return;
	for (auto &o : opened)
		if (mprotect(o.first, (size_t)(o.second - o.first), PROT_NONE) != 0)
			fatal("mprotect failed");
	opened.clear();
}

/*
 * From the fault handler: whether the fault at a was device work's first
 * touch of a piece of a device allocation, now opened (the access then runs
 * again). Only on the thread that holds the lock, while device work runs:
 * big_lock is recursive, so that thread's try_lock succeeds (another
 * thread's fails, and its touch is reported as host code's).
 */
bool open_on_fault(uintptr_t a)
{
	if (!big_lock.try_lock())
		return false;
	bool done = false;
	auto it = live.upper_bound(a);
	if (device_open > 0 && it != live.begin() && opened.size() < opened.capacity()) {
		const allocation &m = (--it)->second;
		size_t pg = page_size();
		char *lo = (char *)(m.base / pg * pg), *hi = m.map + m.map_len - pg; /* its pages, not the guard */
		if (m.kind == MEM_DEVICE && a >= m.base && a < m.base + m.span) {
			char *start = std::max(lo, (char *)(a / OPEN_PIECE * OPEN_PIECE)), *end = std::min(hi, start + OPEN_PIECE);
			if (mprotect(start, (size_t)(end - start), PROT_READ | PROT_WRITE) == 0) {
				opened.push_back({start, end});
				done = true;
			}
		}
	}
	big_lock.unlock();
	return done;
}

struct device_scope {
	device_scope() { open_device(); }
	~device_scope() { close_device(); }
};


cudaError_t allocate(void **out, size_t size, mem_kind kind, const void *caller)
{
	if (!out)
		return bad(cudaErrorInvalidValue, "allocation with a NULL output pointer");
	*out = nullptr;
	if (size == 0)
		return cudaSuccess;
	if (size > total_bytes - live_bytes)
		return bad(cudaErrorMemoryAllocation, "allocation of %zu bytes (%zu of %zu in use)", size, live_bytes,
			   total_bytes);
	size_t pg = page_size(), span = round_to(size, 256), map_len = round_to(span, pg) + pg;
	char *map = (char *)mmap(nullptr, map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (map == MAP_FAILED)
		return bad(cudaErrorMemoryAllocation, "mmap of %zu bytes: %s", map_len, strerror(errno));
	allocation m{(uintptr_t)(map + map_len - pg - span), size, span, map, map_len, kind, false, caller};
	protect(m, PROT_READ | PROT_WRITE);
	memset((void *)m.base, garbage_byte(), span); /* never zeros: nothing may count on fresh memory */
	if (kind == MEM_DEVICE) /* device work running opens it when it touches it */
		protect(m, PROT_NONE);
	live[m.base] = m;
	live_bytes += size;
	*out = (void *)m.base;
	return cudaSuccess;
}

void release(uintptr_t base)
{
	auto it = live.find(base);
	allocation m = it->second;
	live.erase(it);
	live_bytes -= m.size;
	/* no longer the device work's to close (its pages may be unmapped, even mapped again, before that) */
	opened.erase(std::remove_if(opened.begin(), opened.end(),
				    [&](const std::pair<char *, char *> &o) {
					    return o.first >= m.map && o.first < m.map + m.map_len;
				    }),
		     opened.end());
	if (mprotect(m.map, m.map_len, PROT_NONE) != 0 || madvise(m.map, m.map_len, MADV_DONTNEED) != 0)
		fatal("cannot retire freed memory");
	freed.push_back(m); /* kept mapped: a later access faults instead of reaching a new allocation */
	if (freed.size() > 4096) {
		munmap(freed.front().map, freed.front().map_len);
		freed.pop_front();
	}
}

/* A memory operand: side 'd' (a kernel's view) or 'h' (the host's), checked for [p, p + n). */
cudaError_t check_operand(const char *call, const char *name, const void *p, size_t n, char side)
{
	if (!p)
		return bad(cudaErrorInvalidValue, "%s: %s is NULL", call, name);
	const allocation *m = find_live(p);
	if (side == 'd') {
		if (!m)
			return bad(cudaErrorInvalidValue, "%s: %s %p is not device, managed or pinned memory", call, name, p);
	} else if (m && m->kind == MEM_DEVICE) {
		return bad(cudaErrorInvalidValue, "%s: %s %p is device memory, where host memory is expected", call, name, p);
	}
	if (m && (uintptr_t)p + n > m->base + m->size)
		return bad(cudaErrorInvalidValue, "%s: %s [%p, +%zu) runs %zu bytes past the end of a %zu-byte %s allocation",
			   call, name, p, n, (size_t)((uintptr_t)p + n - m->base - m->size), m->size, kind_name[m->kind]);
	if (m && m->freeing)
		return bad(cudaErrorInvalidValue, "%s: %s %p: its cudaFreeAsync is queued", call, name, p);
	return cudaSuccess;
}

/* ---- streams and events ------------------------------------------------------------------ */

/*
 * Work on a stream: fn runs once, or, for work that waits on something
 * outside this process (the NCCL simulator's transfers: cudasim_enqueue_poll),
 * poll runs each time the stream is drained until it says the work is done
 * (and is not called while ready says it could make no progress).
 */
struct op {
	std::function<void()> fn;
	const char *what;
	std::function<bool()> poll, ready;
};

}  /* namespace */
}  /* namespace cudasim */

struct CUstream_st {
	unsigned flags = 0;
	std::deque<cudasim::op> q;
	uint64_t queued = 0, done = 0;
};

struct CUevent_st {
	unsigned flags = 0;
	CUstream_st *stream = nullptr; /* where it was last recorded (nullptr: never, or its stream is gone) */
	uint64_t seq = 0;              /* complete once stream->done reaches it */
	double when = 0;               /* host seconds at completion */
};

namespace cudasim {
namespace {

CUstream_st legacy;
std::set<CUstream_st *> streams;   /* created and not destroyed */
std::set<CUevent_st *> events;

double now()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

CUstream_st *stream_of(cudaStream_t s)
{
	if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread)
		return &legacy;
	return streams.count(s) ? s : nullptr;
}

/* Run s's first operation; false when it is a poll whose work is not done yet (it stays first). */
bool run_one(CUstream_st *s)
{
	if (s->q.front().poll) {
		if (!s->q.front().poll())
			return false;
		if (cfg().trace)
			say("done %s on stream %p", s->q.front().what, (void *)(s == &legacy ? nullptr : s));
		s->q.pop_front();
		s->done++;
		return true;
	}
	op o = std::move(s->q.front());
	s->q.pop_front();
	if (cfg().trace)
		say("run %s on stream %p", o.what, (void *)(s == &legacy ? nullptr : s));
	o.fn();
	s->done++;
	return true;
}

/* Whether s's first operation may run now (not a poll whose ready says it could make no progress). */
bool may_run(CUstream_st *s) { return !s->q.front().ready || s->q.front().ready(); }

/* Between two polls of work that waits on another process. */
void nap()
{
	struct timespec ts = {0, 50000};
	nanosleep(&ts, nullptr);
}

/*
 * Run s's work up to operation number upto (all of it by default). A poll
 * not done yet is polled again until it is (wait: what the host waits for,
 * as cudaStreamSynchronize does), or ends the drain (a query).
 */
void drain(CUstream_st *s, uint64_t upto = UINT64_MAX, bool wait = true)
{
	device_scope open;
	while (!s->q.empty() && s->done < upto)
		if (!may_run(s) || !run_one(s)) {
			if (!wait)
				return;
			nap();
		}
}

/* Everything queued anywhere, the streams' operations interleaved at random (polls not done yet: again later). */
void drain_all()
{
	device_scope open;
	for (;;) {
		std::vector<CUstream_st *> busy;
		if (!legacy.q.empty())
			busy.push_back(&legacy);
		for (CUstream_st *s : streams)
			if (!s->q.empty())
				busy.push_back(s);
		if (busy.empty())
			return;
		size_t first = draw() % busy.size(), k = 0;
		for (; k < busy.size(); k++) {
			CUstream_st *s = busy[(first + k) % busy.size()];
			if (s->q.empty()) /* drained by another's wait on it (cudaStreamWaitEvent) */
				continue;
			if (may_run(s) && run_one(s))
				break;
		}
		if (k == busy.size()) /* every stream waits on another process */
			nap();
	}
}

cudaError_t enqueue_op(cudaStream_t stream, std::function<void()> fn, const char *what)
{
	CUstream_st *s = stream_of(stream);
	if (!s)
		return bad(cudaErrorInvalidResourceHandle, "%s: stream %p does not exist (destroyed?)", what, (void *)stream);
	if (s == &legacy) { /* the legacy stream waits for every blocking stream */
		for (CUstream_st *b : streams)
			if (!(b->flags & cudaStreamNonBlocking))
				drain(b);
	} else if (!(s->flags & cudaStreamNonBlocking)) { /* and a blocking stream for the legacy one */
		drain(&legacy);
	}
	s->q.push_back(op{std::move(fn), what, nullptr, nullptr});
	s->queued++;
	return cudaSuccess;
}

cudaError_t enqueue_poll(cudaStream_t stream, std::function<bool()> poll, std::function<bool()> ready,
			 const char *what)
{
	cudaError_t e = enqueue_op(stream, [] {}, what);
	if (e == cudaSuccess) {
		stream_of(stream)->q.back().poll = std::move(poll);
		stream_of(stream)->q.back().ready = std::move(ready);
	}
	return e;
}

bool event_done(const CUevent_st *e) { return !e->stream || e->stream->done >= e->seq; }

/* ---- fibers ------------------------------------------------------------------------------ */

/* x86-64: a hand-written switch (callee-saved registers, MXCSR and the x87 control word); elsewhere, or
 * built with -DCUDASIM_UCONTEXT, ucontext (slower: a signal-mask system call per switch). */
#if defined(__x86_64__) && !defined(CUDASIM_UCONTEXT)
#define CUDASIM_ASM_SWITCH 1
#else
#define CUDASIM_ASM_SWITCH 0
#endif

#if CUDASIM_ASM_SWITCH
extern "C" void cudasim_switch(void **save_sp, void *to_sp);
extern "C" void cudasim_fiber_start();
asm(R"(
	.text
	.p2align 4
	.hidden cudasim_switch
	.globl cudasim_switch
	.type cudasim_switch,@function
cudasim_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size cudasim_switch, .-cudasim_switch
	.p2align 4
	.hidden cudasim_fiber_start
	.globl cudasim_fiber_start
	.type cudasim_fiber_start,@function
cudasim_fiber_start:
	subq $8, %rsp
	movq %r12, %rdi
	callq *%r13
	ud2
	.size cudasim_fiber_start, .-cudasim_fiber_start
)");
#endif

const size_t STACK_BYTES = 256 << 10;

struct stack {
	char *map; /* guard page, then STACK_BYTES */
};
std::vector<stack> free_stacks;

stack get_stack()
{
	if (!free_stacks.empty()) {
		stack s = free_stacks.back();
		free_stacks.pop_back();
		return s;
	}
	size_t pg = page_size();
	char *m = (char *)mmap(nullptr, STACK_BYTES + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);
	if (m == MAP_FAILED || mprotect(m, pg, PROT_NONE) != 0)
		fatal("cannot map a kernel thread's stack");
	return stack{m};
}

enum fiber_state { F_NEW, F_RUNNING, F_BARRIER, F_DONE };

struct fiber {
	fiber_state state;
	uint3 tid;
	const char *bar_file; /* the barrier it waits at (F_BARRIER) or last passed; NULL: none yet */
	int bar_line;
	stack st;
	void *sp;
#if !CUDASIM_ASM_SWITCH
	ucontext_t uc;
#endif
};

struct job;

struct block_run {
	job *j;
	std::vector<fiber> threads;
	fiber *cur;
	void *sched_sp;
#if !CUDASIM_ASM_SWITCH
	ucontext_t sched_uc;
#endif
	char *dyn;             /* dynamic shared memory, against a guard page */
	char *stat;            /* static shared arena */
	size_t stat_used;
	unsigned char poison;
};

/* What the simulator knows of a kernel (by its address) across launches. */
struct kernel_info {
	size_t static_shared = 0; /* the most static shared memory a block of it took (0 until one ran) */
	int max_dynamic = -1;     /* cudaFuncAttributeMaxDynamicSharedMemorySize; -1: not set (no opt-in) */
};
std::map<const void *, kernel_info> kernels;

/* A queued kernel. */
struct job {
	kernel_launch l;
	uint64_t seed;
	kernel_info *info;
	~job() { l.free_args(l.args); }
};

block_run *running; /* the block being run, or NULL when no kernel runs */
job *running_job;

/*
 * Shared memory per block: static and dynamic together at most 48 KiB, as
 * on a GPU, unless the kernel opted in (cudaFuncSetAttribute with
 * cudaFuncAttributeMaxDynamicSharedMemorySize) to up to SHARED_OPTIN, the
 * opt-in limit of compute capability 8.0. The arenas: [guard][48 KiB static][guard] and
 * [guard][SHARED_OPTIN dynamic][guard], the dynamic memory against its end.
 */
const size_t SHARED_MAX = 48 << 10;
const size_t SHARED_OPTIN = 163 << 10;
char *static_arena, *dyn_arena, *dyn_end; /* dyn_end: the guard page after the dynamic arena */

void shared_arenas()
{
	if (static_arena)
		return;
	size_t pg = page_size();
	for (char **a : {&static_arena, &dyn_arena}) {
		size_t len = round_to(a == &static_arena ? SHARED_MAX : SHARED_OPTIN, pg);
		char *m = (char *)mmap(nullptr, len + 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED || mprotect(m, pg, PROT_NONE) != 0 || mprotect(m + pg + len, pg, PROT_NONE) != 0)
			fatal("cannot map shared memory");
		*a = m + pg;
		if (a == &dyn_arena)
			dyn_end = m + pg + len;
	}
}

void thread_entry(void *arg)
{
	block_run *b = (block_run *)arg;
	b->j->l.thread_main(b->j->l.args);
	b->cur->state = F_DONE;
#if CUDASIM_ASM_SWITCH
	void *dead;
	cudasim_switch(&dead, b->sched_sp);
#else
	setcontext(&b->sched_uc);
#endif
	fatal("a finished kernel thread was resumed");
}

#if !CUDASIM_ASM_SWITCH
void thread_entry_uc(unsigned lo, unsigned hi)
{
	thread_entry((void *)(((uintptr_t)hi << 32) | lo));
}
#endif

void resume(block_run *b, fiber *f)
{
	b->cur = f;
	thread_idx = f->tid;
	if (f->state == F_NEW) {
		f->st = get_stack();
#if CUDASIM_ASM_SWITCH
		uint64_t *sp = (uint64_t *)(f->st.map + page_size() + STACK_BYTES);
		*--sp = 0;                                  /* alignment */
		*--sp = (uint64_t)(uintptr_t)&cudasim_fiber_start;
		*--sp = 0;                                  /* rbp */
		*--sp = 0;                                  /* rbx */
		*--sp = (uint64_t)(uintptr_t)b;             /* r12: the argument */
		*--sp = (uint64_t)(uintptr_t)&thread_entry; /* r13: the function */
		*--sp = 0;                                  /* r14 */
		*--sp = 0;                                  /* r15 */
		uint32_t mx = __builtin_ia32_stmxcsr();
		uint16_t cw;
		asm volatile("fnstcw %0" : "=m"(cw));
		*--sp = (uint64_t)mx | ((uint64_t)cw << 32);
		f->sp = sp;
#else
		getcontext(&f->uc);
		f->uc.uc_stack.ss_sp = f->st.map + page_size();
		f->uc.uc_stack.ss_size = STACK_BYTES;
		f->uc.uc_link = nullptr;
		uintptr_t a = (uintptr_t)b;
		makecontext(&f->uc, (void (*)())thread_entry_uc, 2, (unsigned)(a & 0xffffffffu), (unsigned)(a >> 32));
#endif
	}
	f->state = F_RUNNING; /* F_BARRIER or F_DONE when it comes back */
#if CUDASIM_ASM_SWITCH
	cudasim_switch(&b->sched_sp, f->sp);
#else
	swapcontext(&b->sched_uc, &f->uc);
#endif
	if (f->state == F_DONE) {
		free_stacks.push_back(f->st);
		f->st.map = nullptr;
	}
}

void fatalf(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalf(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fatal(buf);
}

bool same_site(const fiber &a, const fiber &b)
{
	return a.bar_line == b.bar_line && a.bar_file && b.bar_file && !strcmp(a.bar_file, b.bar_file);
}

/*
 * After a phase, the block's live threads (order) each wait at a barrier or
 * have exited. Legal: all of them at the same __syncthreads, or all exited.
 * Threads at different barriers, or some waiting while others exited, would
 * hang a GPU or leave the result undefined: fail the run, naming both.
 */
void check_barrier(const job *j, const block_run &b, const std::vector<uint32_t> &order)
{
	const fiber *wait = nullptr, *gone = nullptr;
	for (uint32_t t : order) {
		const fiber &f = b.threads[t];
		if (f.state == F_DONE) {
			gone = gone ? gone : &f;
			continue;
		}
		if (!wait) {
			wait = &f;
		} else if (!same_site(*wait, f)) {
			fatalf("divergent __syncthreads in kernel %s (launched at %s:%d), block (%u,%u,%u): thread (%u,%u,%u) "
			       "waits at the barrier at %s:%d, thread (%u,%u,%u) at the one at %s:%d (a GPU hangs or gives "
			       "undefined results)",
			       j->l.where.kernel, j->l.where.file, j->l.where.line, block_idx.x, block_idx.y, block_idx.z,
			       wait->tid.x, wait->tid.y, wait->tid.z, wait->bar_file, wait->bar_line, f.tid.x, f.tid.y, f.tid.z,
			       f.bar_file, f.bar_line);
		}
	}
	if (wait && gone) {
		char last[256] = "without passing a barrier";
		if (gone->bar_file)
			snprintf(last, sizeof(last), "after the barrier at %s:%d", gone->bar_file, gone->bar_line);
		fatalf("divergent __syncthreads in kernel %s (launched at %s:%d), block (%u,%u,%u): thread (%u,%u,%u) waits at "
		       "the barrier at %s:%d while thread (%u,%u,%u) has exited (%s) (a GPU hangs or gives undefined results)",
		       j->l.where.kernel, j->l.where.file, j->l.where.line, block_idx.x, block_idx.y, block_idx.z, wait->tid.x,
		       wait->tid.y, wait->tid.z, wait->bar_file, wait->bar_line, gone->tid.x, gone->tid.y, gone->tid.z, last);
	}
}

void shuffle(std::vector<uint32_t> &v, uint64_t &rng)
{
	for (size_t i = v.size(); i > 1; i--)
		std::swap(v[i - 1], v[splitmix(rng) % i]);
}

void run_block(job *j, uint3 bid, uint64_t &rng, block_run &b)
{
	const dim3 bd = j->l.block;
	uint32_t n = bd.x * bd.y * bd.z;
	block_idx = bid;
	block_serial++;
	b.poison = poison_of(splitmix(rng));
	b.stat_used = 0;
	memset(b.dyn, b.poison, j->l.shmem);
	b.threads.resize(n);
	for (uint32_t t = 0; t < n; t++) {
		fiber &f = b.threads[t];
		f.state = F_NEW;
		f.tid = uint3{t % bd.x, (t / bd.x) % bd.y, t / (bd.x * bd.y)};
		f.bar_file = nullptr;
		f.bar_line = 0;
		f.st.map = nullptr;
		f.sp = nullptr;
	}
	std::vector<uint32_t> order(n);
	for (uint32_t t = 0; t < n; t++)
		order[t] = t;
	for (;;) { /* one barrier phase per round */
		shuffle(order, rng);
		for (uint32_t t : order) {
			fiber &f = b.threads[t];
			if (f.state == F_DONE)
				continue;
			resume(&b, &f);
		}
		check_barrier(j, b, order);
		size_t k = 0;
		for (uint32_t t : order)
			if (b.threads[t].state != F_DONE)
				order[k++] = t;
		order.resize(k);
		if (order.empty())
			break;
	}
	b.cur = nullptr;
}

void run_job(job *j)
{
	shared_arenas();
	block_run b;
	b.j = j;
	b.cur = nullptr;
	b.sched_sp = nullptr;
	b.stat = static_arena;
	b.dyn = dyn_end - round_to(j->l.shmem, 16);
	running = &b;
	running_job = j;
	block_dim = j->l.block;
	grid_dim = j->l.grid;
	uint64_t rng = j->seed;
	const dim3 g = j->l.grid;
	uint64_t nblocks = (uint64_t)g.x * g.y * g.z;
	auto coords = [&](uint64_t i) { return uint3{(unsigned)(i % g.x), (unsigned)((i / g.x) % g.y), (unsigned)(i / ((uint64_t)g.x * g.y))}; };
	if (nblocks <= (1u << 22)) { /* blocks in a random order */
		std::vector<uint32_t> order(nblocks);
		for (uint32_t i = 0; i < nblocks; i++)
			order[i] = i;
		shuffle(order, rng);
		for (uint32_t i : order)
			run_block(j, coords(i), rng, b);
	} else {
		uint64_t start = splitmix(rng) % nblocks;
		for (uint64_t i = 0; i < nblocks; i++)
			run_block(j, coords((start + i) % nblocks), rng, b);
	}
	running = nullptr;
	running_job = nullptr;
}

uint64_t launches;

/* ---- faults -------------------------------------------------------------------------------- */

void describe_fault(void *addr)
{
	char line[512];
	uintptr_t a = (uintptr_t)addr;
	const char *what = "an address the simulator did not hand out (a host bug, or a NULL pointer)";
	bool in_kernel = running && running->cur;
	size_t pg = page_size();
	line[0] = 0;
	if (big_lock.try_lock()) {
		for (auto &kv : live) {
			const allocation &m = kv.second;
			if (a >= (uintptr_t)m.map && a < (uintptr_t)m.map + m.map_len) {
				if (a >= m.base + m.span || a >= m.base + m.size)
					snprintf(line, sizeof(line), "%zu bytes past the end of a %zu-byte %s allocation at %p",
						 (size_t)(a - m.base - m.size), m.size, kind_name[m.kind], (void *)m.base);
				else if (a < m.base)
					snprintf(line, sizeof(line), "%zu bytes before a %zu-byte %s allocation at %p",
						 (size_t)(m.base - a), m.size, kind_name[m.kind], (void *)m.base);
				else
					snprintf(line, sizeof(line),
						 "offset %zu of a %zu-byte %s allocation at %p, from host code: device memory is not "
						 "host-accessible",
						 (size_t)(a - m.base), m.size, kind_name[m.kind], (void *)m.base);
			}
		}
		if (!line[0])
			for (auto &m : freed)
				if (a >= (uintptr_t)m.map && a < (uintptr_t)m.map + m.map_len)
					snprintf(line, sizeof(line), "offset %lld of a freed %zu-byte %s allocation at %p (use after free)",
						 (long long)(a - m.base), m.size, kind_name[m.kind], (void *)m.base);
		if (!line[0] && in_kernel && running->cur->st.map && a >= (uintptr_t)running->cur->st.map &&
		    a < (uintptr_t)running->cur->st.map + pg)
			snprintf(line, sizeof(line), "the kernel thread overflowed its %zu-KiB stack", STACK_BYTES >> 10);
		if (!line[0] && static_arena &&
		    ((a >= (uintptr_t)static_arena + SHARED_MAX && a < (uintptr_t)static_arena + SHARED_MAX + pg) ||
		     (a >= (uintptr_t)static_arena - pg && a < (uintptr_t)static_arena)))
			snprintf(line, sizeof(line), "outside the block's static shared memory");
		if (!line[0] && dyn_arena && running_job &&
		    a >= (uintptr_t)dyn_end && a < (uintptr_t)dyn_end + pg)
			snprintf(line, sizeof(line), "%zu bytes past the end of the block's %zu bytes of dynamic shared memory",
				 (size_t)(a - ((uintptr_t)dyn_end - round_to(running_job->l.shmem, 16))) -
					 running_job->l.shmem,
				 running_job->l.shmem);
		if (!line[0]) { /* far past an allocation's guard page? name the nearest one below */
			auto it = live.upper_bound(a);
			if (it != live.begin()) {
				const allocation &m = (--it)->second;
				if (a - m.base < ((uintptr_t)1 << 30))
					snprintf(line, sizeof(line),
						 "%zu bytes past the end of the nearest allocation below, a %zu-byte %s allocation at %p "
						 "(or a wild pointer)",
						 (size_t)(a - m.base - m.size), m.size, kind_name[m.kind], (void *)m.base);
			}
		}
		big_lock.unlock();
	}
	say("invalid memory access at %p: %s", addr, line[0] ? line : what);
	if (in_kernel) {
		const kernel_launch &l = running_job->l;
		say("  in kernel %s launched at %s:%d, block (%u,%u,%u) of (%u,%u,%u), thread (%u,%u,%u) of (%u,%u,%u)",
		    l.where.kernel, l.where.file, l.where.line, block_idx.x, block_idx.y, block_idx.z, l.grid.x, l.grid.y,
		    l.grid.z, thread_idx.x, thread_idx.y, thread_idx.z, l.block.x, l.block.y, l.block.z);
	} else if (running_job) {
		say("  in device work queued by a library (cub, cuBLAS) or a copy");
	}
	say("RS_CUDASIM_SEED=%llu reproduces this run", cfg().seed);
}

void on_fault(int sig, siginfo_t *si, void *)
{
	if (sig == SIGSEGV && open_on_fault((uintptr_t)si->si_addr))
		return;
	describe_fault(si->si_addr);
	signal(sig, SIG_DFL); /* the access runs again and kills the process with sig */
}

thread_local bool altstack_set;

void install()
{
	static bool done;
	if (!altstack_set) { /* a kernel thread's fault must be reported off its own stack */
		stack_t ss;
		ss.ss_size = 256 << 10;
		ss.ss_sp = malloc(ss.ss_size);
		ss.ss_flags = 0;
		if (ss.ss_sp && sigaltstack(&ss, nullptr) == 0)
			altstack_set = true;
	}
	if (done)
		return;
	done = true;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, nullptr);
	sigaction(SIGBUS, &sa, nullptr);
}

void at_exit(int status, void *)
{
	int leaks = 0;
	bool locked = big_lock.try_lock(); /* another thread may be stuck holding it: then no leak report */
	if (locked && cfg().leak_check) {
		for (auto &kv : live) {
			const allocation &m = kv.second;
			Dl_info di;
			const char *fn = dladdr(m.caller, &di) && di.dli_sname ? di.dli_sname : "?";
			if (leaks++ < 20)
				say("leak: %zu bytes of %s memory at %p, allocated from %s (%p)", m.size, kind_name[m.kind],
				    (void *)m.base, fn, m.caller);
		}
		if (leaks)
			say("%d allocations leaked", leaks);
	}
	if (locked)
		big_lock.unlock();
	if (status != 0 || leaks)
		say("the process failed; RS_CUDASIM_SEED=%llu reproduces this run", cfg().seed);
	if (leaks && status == 0) {
		fflush(nullptr);
		_exit(1);
	}
}

/* Every entry point starts here. */
struct entry {
	std::lock_guard<std::recursive_mutex> g;
	entry() : g(big_lock)
	{
		static bool registered;
		if (!registered) {
			registered = true;
			on_exit(at_exit, nullptr);
		}
		install();
	}
};

/*
 * Why a kernel's pointer argument cannot be right, or NULL. A pointer into
 * host memory (pageable: heap, stack, data) or into freed device memory is
 * refused; one into no mapping at all (NULL, a sentinel the kernel never
 * follows) is let through, as a GPU lets it through.
 */
const char *pointer_argument(const void *p)
{
	if (!p)
		return nullptr;
	const allocation *m = find_live(p);
	if (m)
		return m->freeing ? "points into an allocation whose cudaFreeAsync is queued" : nullptr;
	for (auto &f : freed)
		if ((uintptr_t)p >= (uintptr_t)f.map && (uintptr_t)p < (uintptr_t)f.map + f.map_len)
			return "points into freed device memory";
	size_t pg = page_size();
	unsigned char v;
	if (mincore((void *)((uintptr_t)p / pg * pg), pg, &v) == 0)
		return "points into host memory (not device, managed or pinned): a GPU cannot reach it";
	return nullptr;
}

/*
 * Host memory the simulator knows for host memory, for the scan of struct
 * arguments (where a word may be an integer that merely looks like an
 * address, so only these count): the calling thread's stack, malloc's main
 * heap (the program break), and the pageable ranges seen as a copy's host
 * side.
 */
std::map<uintptr_t, uintptr_t> pageable; /* start -> end */

void note_pageable(const void *p, size_t n)
{
	if (!p || !n || find_live(p))
		return;
	if (pageable.size() >= 65536)
		pageable.clear();
	uintptr_t &end = pageable[(uintptr_t)p];
	end = std::max(end, (uintptr_t)p + n);
}

bool in_pageable(uintptr_t a)
{
	auto it = pageable.upper_bound(a);
	return it != pageable.begin() && a < (--it)->second;
}

bool on_host_stack(uintptr_t a)
{
	static thread_local uintptr_t lo, hi;
	if (!hi) {
		pthread_attr_t at;
		void *base;
		size_t len;
		if (pthread_getattr_np(pthread_self(), &at) != 0)
			return false;
		if (pthread_attr_getstack(&at, &base, &len) == 0)
			lo = (uintptr_t)base, hi = (uintptr_t)base + len;
		pthread_attr_destroy(&at);
	}
	return a >= lo && a < hi;
}

bool in_brk_heap(uintptr_t a)
{
	static uintptr_t start; /* where [heap] begins, from /proc/self/maps (0: not found yet) */
	if (!start) {
		FILE *f = fopen("/proc/self/maps", "r");
		char line[512];
		while (f && fgets(line, sizeof(line), f))
			if (strstr(line, "[heap]")) {
				start = (uintptr_t)strtoull(line, nullptr, 16);
				break;
			}
		if (f)
			fclose(f);
		if (!start)
			return false;
	}
	return a >= start && a < (uintptr_t)sbrk(0);
}

/* Why a word of a struct argument is a pointer a kernel cannot follow, or NULL. */
const char *struct_word(uintptr_t w)
{
	if (w < 4096)
		return nullptr;
	const allocation *m = find_live((const void *)w);
	if (m)
		return m->freeing ? "points into an allocation whose cudaFreeAsync is queued" : nullptr;
	for (auto &f : freed)
		if (w >= (uintptr_t)f.map && w < (uintptr_t)f.map + f.map_len)
			return "points into freed device memory";
	if (on_host_stack(w))
		return "points into the launching thread's stack (host memory: a GPU cannot reach it)";
	if (in_brk_heap(w))
		return "points into the host's malloc heap (a GPU cannot reach it)";
	if (in_pageable(w))
		return "points into pageable host memory a copy used (a GPU cannot reach it)";
	return nullptr;
}

cudaError_t need_device()
{
	return cfg().devices ? cudaSuccess : fail(cudaErrorNoDevice);
}

thread_local int current_device = 0;

} /* namespace */

/* ---- the interface of cuda_runtime.h ----------------------------------------------------- */

cudaError_t launch_kernel(const kernel_launch &l0)
{
	entry e;
	std::unique_ptr<job> j(new job{l0, 0, nullptr});
	const kernel_launch &l = j->l;
	const char *k = l.where.kernel;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	uint64_t threads = (uint64_t)l.block.x * l.block.y * l.block.z;
	if (!l.block.x || !l.block.y || !l.block.z || l.block.x > 1024 || l.block.y > 1024 || l.block.z > 64 ||
	    threads > 1024)
		return bad(cudaErrorInvalidConfiguration, "launch of %s at %s:%d: block (%u,%u,%u)", k, l.where.file,
			   l.where.line, l.block.x, l.block.y, l.block.z);
	if (!l.grid.x || !l.grid.y || !l.grid.z || l.grid.x > 0x7fffffffu || l.grid.y > 65535 || l.grid.z > 65535)
		return bad(cudaErrorInvalidConfiguration, "launch of %s at %s:%d: grid (%u,%u,%u)", k, l.where.file,
			   l.where.line, l.grid.x, l.grid.y, l.grid.z);
	/* static + dynamic shared memory: at most 48 KiB without the opt-in (static is known once the kernel ran) */
	kernel_info *ki = &kernels[l.func];
	if (ki->max_dynamic >= 0 && l.shmem > (size_t)ki->max_dynamic)
		return bad(cudaErrorInvalidValue,
			   "launch of %s at %s:%d: %zu bytes of dynamic shared memory, above the %d of its "
			   "cudaFuncAttributeMaxDynamicSharedMemorySize",
			   k, l.where.file, l.where.line, l.shmem, ki->max_dynamic);
	if (ki->max_dynamic < 0 && l.shmem + ki->static_shared > SHARED_MAX)
		return bad(cudaErrorInvalidValue,
			   "launch of %s at %s:%d: %zu bytes of dynamic shared memory and %zu of static exceed 48 KiB per "
			   "block (more needs cudaFuncAttributeMaxDynamicSharedMemorySize)",
			   k, l.where.file, l.where.line, l.shmem, ki->static_shared);
	for (int i = 0; i < l.npointers; i++) {
		const char *why = pointer_argument(l.pointers[i]);
		if (why)
			return bad(cudaErrorInvalidValue, "launch of %s at %s:%d: argument %d (%p) %s", k, l.where.file,
				   l.where.line, i + 1, l.pointers[i], why);
	}
	/* a struct passed by value: each pointer-aligned word that points where a kernel cannot go */
	for (int i = 0; i < l.nstructs; i++) {
		const arg_bytes &a = l.structs[i];
		for (size_t off = 0; off + sizeof(uintptr_t) <= a.n; off += sizeof(uintptr_t)) {
			uintptr_t w;
			memcpy(&w, (const char *)a.p + off, sizeof(w));
			const char *why = struct_word(w);
			if (why)
				return bad(cudaErrorInvalidValue,
					   "launch of %s at %s:%d: argument %d (a %zu-byte struct) holds %p at byte %zu, which %s", k,
					   l.where.file, l.where.line, a.index, a.n, (void *)w, off, why);
		}
	}
	j->l.pointers = nullptr;
	j->l.structs = nullptr;
	j->info = ki;
	j->seed = cfg().seed * 0x9e3779b97f4a7c15ull + ++launches;
	job *raw = j.release();
	cudaError_t err = enqueue_op(
		l.stream,
		[raw] {
			std::unique_ptr<job> owned(raw);
			run_job(raw);
		},
		k);
	if (err != cudaSuccess) /* the stream did not take it */
		delete raw;
	return err;
}

void *shared_alloc(size_t size, size_t align)
{
	block_run *b = running;
	if (!b || !b->cur)
		fatal("a __shared__ variable used outside a kernel");
	size_t at = round_to(b->stat_used, align < 16 ? 16 : align);
	if (at + size > SHARED_MAX)
		fatal("more than 48 KiB of static shared memory in one block");
	b->stat_used = at + size;
	/* learnt as the kernel runs: a launch whose static and dynamic shared memory exceed the limit fails here */
	const kernel_launch &l = b->j->l;
	kernel_info *ki = b->j->info;
	ki->static_shared = std::max(ki->static_shared, b->stat_used);
	if (ki->max_dynamic < 0 && b->stat_used + l.shmem > SHARED_MAX)
		fatalf("kernel %s (launched at %s:%d): %zu bytes of static shared memory and %zu of dynamic exceed 48 KiB per "
		       "block without cudaFuncAttributeMaxDynamicSharedMemorySize: a GPU refuses this launch "
		       "(cudaErrorInvalidValue; the simulator, which learns a kernel's static shared memory as it runs, "
		       "refuses its next launches so)",
		       l.where.kernel, l.where.file, l.where.line, b->stat_used, l.shmem);
	if (ki->max_dynamic >= 0 && b->stat_used + (size_t)ki->max_dynamic > SHARED_OPTIN)
		fatalf("kernel %s (launched at %s:%d): %zu bytes of static shared memory and the %d of its "
		       "cudaFuncAttributeMaxDynamicSharedMemorySize exceed the %zu a block may have",
		       l.where.kernel, l.where.file, l.where.line, b->stat_used, ki->max_dynamic, SHARED_OPTIN);
	memset(b->stat + at, b->poison, size);
	return b->stat + at;
}

void *dynamic_shared()
{
	if (!running || !running->cur)
		fatal("extern __shared__ memory used outside a kernel");
	return running->dyn;
}

void syncthreads(const char *file, int line)
{
	block_run *b = running;
	if (!b || !b->cur)
		fatal("__syncthreads called outside a kernel");
	fiber *f = b->cur;
	f->state = F_BARRIER;
	f->bar_file = file;
	f->bar_line = line;
#if CUDASIM_ASM_SWITCH
	cudasim_switch(&f->sp, b->sched_sp);
#else
	swapcontext(&f->uc, &b->sched_uc);
#endif
	/* resumed by the scheduler in the next phase, with thread_idx set for this thread */
}

cudaError_t enqueue(cudaStream_t stream, std::function<void()> fn, const char *what)
{
	entry e;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	return enqueue_op(stream, std::move(fn), what);
}

cudaError_t check_device_range(const void *p, size_t bytes, const char *what)
{
	entry e;
	if (bytes == 0)
		return cudaSuccess;
	return check_operand(what, "the range", p, bytes, 'd');
}

cudaError_t set_error(cudaError_t err) { return fail(err); }

} /* namespace cudasim */

/* ---- the runtime API ---------------------------------------------------------------------- */

using namespace cudasim;

#define ENTRY entry cudasim_entry
#define CALLER __builtin_return_address(0)

extern "C" {

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
#define N(x) \
	case x:  \
		return #x;
		N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInitializationError)
		N(cudaErrorInvalidConfiguration) N(cudaErrorInvalidPitchValue) N(cudaErrorInvalidDevicePointer)
		N(cudaErrorInvalidMemcpyDirection) N(cudaErrorInvalidDeviceFunction) N(cudaErrorNoDevice)
		N(cudaErrorInvalidDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorNotReady) N(cudaErrorIllegalAddress)
		N(cudaErrorLaunchOutOfResources) N(cudaErrorLaunchFailure) N(cudaErrorNotPermitted) N(cudaErrorNotSupported)
		N(cudaErrorUnknown)
#undef N
	}
	return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInitializationError: return "initialization error";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorInvalidPitchValue: return "invalid pitch argument";
	case cudaErrorInvalidDevicePointer: return "invalid device pointer";
	case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
	case cudaErrorInvalidDeviceFunction: return "invalid device function";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
	case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
	case cudaErrorLaunchFailure: return "unspecified launch failure";
	case cudaErrorNotPermitted: return "operation not permitted";
	case cudaErrorNotSupported: return "operation not supported";
	case cudaErrorUnknown: return "unknown error";
	}
	return "unrecognized error code";
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

/* ---- devices ---- */

cudaError_t cudaGetDeviceCount(int *count)
{
	ENTRY;
	if (!count)
		return bad(cudaErrorInvalidValue, "cudaGetDeviceCount: NULL count");
	*count = cfg().devices;
	return cfg().devices ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (device < 0 || device >= cfg().devices)
		return bad(cudaErrorInvalidDevice, "cudaSetDevice(%d): one device", device);
	current_device = device;
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (!device)
		return bad(cudaErrorInvalidValue, "cudaGetDevice: NULL output");
	*device = current_device;
	return cudaSuccess;
}

static int attribute(enum cudaDeviceAttr a, bool *ok)
{
	*ok = true;
	switch (a) {
	case cudaDevAttrMaxThreadsPerBlock: return 1024;
	case cudaDevAttrMaxBlockDimX: return 1024;
	case cudaDevAttrMaxBlockDimY: return 1024;
	case cudaDevAttrMaxBlockDimZ: return 64;
	case cudaDevAttrMaxGridDimX: return 0x7fffffff;
	case cudaDevAttrMaxGridDimY: return 65535;
	case cudaDevAttrMaxGridDimZ: return 65535;
	case cudaDevAttrMaxSharedMemoryPerBlock: return (int)SHARED_MAX;
	case cudaDevAttrWarpSize: return 32;
	case cudaDevAttrMultiProcessorCount: return cfg().sms;
	case cudaDevAttrUnifiedAddressing: return 1;
	case cudaDevAttrComputeCapabilityMajor: return 8;
	case cudaDevAttrComputeCapabilityMinor: return 0;
	case cudaDevAttrManagedMemory: return 1;
	case cudaDevAttrPageableMemoryAccess: return 0;
	case cudaDevAttrConcurrentManagedAccess: return 1;
	case cudaDevAttrMaxSharedMemoryPerBlockOptin: return (int)SHARED_OPTIN;
	}
	*ok = false;
	return 0;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (!value)
		return bad(cudaErrorInvalidValue, "cudaDeviceGetAttribute: NULL output");
	if (device < 0 || device >= cfg().devices)
		return bad(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: device %d", device);
	bool ok;
	int v = attribute(attr, &ok);
	if (!ok)
		return bad(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d is not simulated", (int)attr);
	*value = v;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (!p)
		return bad(cudaErrorInvalidValue, "cudaGetDeviceProperties: NULL output");
	if (device < 0 || device >= cfg().devices)
		return bad(cudaErrorInvalidDevice, "cudaGetDeviceProperties: device %d", device);
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "cudasim (CUDA simulated on the CPU, tests/cudasim)");
	p->totalGlobalMem = total_bytes;
	p->sharedMemPerBlock = SHARED_MAX;
	p->sharedMemPerBlockOptin = SHARED_OPTIN;
	p->warpSize = 32;
	p->maxThreadsPerBlock = 1024;
	p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
	p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
	p->major = 8;
	p->minor = 0;
	p->multiProcessorCount = cfg().sms;
	p->managedMemory = p->concurrentManagedAccess = p->unifiedAddressing = 1;
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	drain_all();
	return cudaSuccess;
}

cudaError_t cudaDeviceReset(void)
{
	ENTRY;
	drain_all();
	return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
	if (!v)
		return fail(cudaErrorInvalidValue);
	*v = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
	if (!v)
		return fail(cudaErrorInvalidValue);
	*v = CUDART_VERSION;
	return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	ENTRY;
	if (!free_bytes || !total)
		return bad(cudaErrorInvalidValue, "cudaMemGetInfo: NULL output");
	*free_bytes = total_bytes - live_bytes;
	*total = total_bytes;
	return cudaSuccess;
}

/* ---- kernels ---- */

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (!func)
		return bad(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: NULL function");
	if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
		return bad(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute %d is not simulated", (int)attr);
	kernel_info &k = kernels[func];
	if (value < 0 || (size_t)value + k.static_shared > SHARED_OPTIN)
		return bad(cudaErrorInvalidValue,
			   "cudaFuncSetAttribute: %d bytes of dynamic shared memory (with %zu static, at most %zu a block)", value,
			   k.static_shared, SHARED_OPTIN);
	k.max_dynamic = value;
	return cudaSuccess;
}

/* ---- memory ---- */

cudaError_t cudaMalloc(void **p, size_t size)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	return allocate(p, size, MEM_DEVICE, CALLER);
}

/* As CUDA 11 and later: a pointer the runtime does not know is unregistered host memory, not an error. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	ENTRY;
	if (!a)
		return bad(cudaErrorInvalidValue, "cudaPointerGetAttributes: no output");
	*a = cudaPointerAttributes{cudaMemoryTypeUnregistered, -1, nullptr, nullptr};
	const allocation *m = find_live(p);
	if (!m || (uintptr_t)p == m->base + m->size) /* one past the end is not in it */
		return cudaSuccess;
	static const cudaMemoryType type_of[] = {cudaMemoryTypeDevice, cudaMemoryTypeManaged, cudaMemoryTypeHost};
	a->type = type_of[m->kind];
	a->device = 0;
	a->devicePointer = (void *)p;
	a->hostPointer = m->kind == MEM_DEVICE ? nullptr : (void *)p;
	return cudaSuccess;
}

cudaError_t cudaMallocManaged(void **p, size_t size, unsigned int flags)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
		return bad(cudaErrorInvalidValue, "cudaMallocManaged: flags %#x", flags);
	return allocate(p, size, MEM_MANAGED, CALLER);
}

cudaError_t cudaMallocHost(void **p, size_t size)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	return allocate(p, size, MEM_PINNED, CALLER);
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (flags > 0xf)
		return bad(cudaErrorInvalidValue, "cudaHostAlloc: flags %#x", flags);
	return allocate(p, size, MEM_PINNED, CALLER);
}

static cudaError_t free_checked(void *p, const char *call, bool pinned)
{
	if (!p)
		return cudaSuccess;
	auto it = live.find((uintptr_t)p);
	if (it == live.end())
		return bad(cudaErrorInvalidValue, "%s(%p): not the start of a live allocation (double free?)", call, p);
	if (pinned != (it->second.kind == MEM_PINNED))
		return bad(cudaErrorInvalidValue, "%s(%p): a %s allocation", call, p, kind_name[it->second.kind]);
	if (it->second.freeing)
		return bad(cudaErrorInvalidValue, "%s(%p): its cudaFreeAsync is queued already", call, p);
	drain_all(); /* cudaFree and cudaFreeHost wait for the device */
	release((uintptr_t)p);
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	return free_checked(p, "cudaFree", false);
}

cudaError_t cudaFreeHost(void *p)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	return free_checked(p, "cudaFreeHost", true);
}

cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t stream)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (!stream_of(stream))
		return bad(cudaErrorInvalidResourceHandle, "cudaMallocAsync: stream %p does not exist", (void *)stream);
	return allocate(p, size, MEM_DEVICE, CALLER);
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t stream)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (!p)
		return cudaSuccess;
	auto it = live.find((uintptr_t)p);
	if (it == live.end() || it->second.kind != MEM_DEVICE || it->second.freeing)
		return bad(cudaErrorInvalidValue, "cudaFreeAsync(%p): not the start of a live device allocation", p);
	uintptr_t base = (uintptr_t)p;
	cudaError_t e = enqueue_op(stream, [base] { release(base); }, "cudaFreeAsync");
	if (e == cudaSuccess)
		it->second.freeing = true;
	return e;
}

static const char *kind_text(enum cudaMemcpyKind k)
{
	switch (k) {
	case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
	case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
	case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
	case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
	case cudaMemcpyDefault: return "cudaMemcpyDefault";
	}
	return "an unknown kind";
}

/*
 * Check a (2D) copy: rows of `width` bytes, `height` of them, pitches apart.
 * *d2d says whether both sides are device memory (the copy is then
 * asynchronous even when called as cudaMemcpy).
 */
static cudaError_t check_copy(const char *call, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			      size_t height, enum cudaMemcpyKind kind, bool *d2d)
{
	*d2d = false;
	if ((unsigned)kind > cudaMemcpyDefault)
		return bad(cudaErrorInvalidMemcpyDirection, "%s: kind %d", call, (int)kind);
	if (width == 0 || height == 0)
		return cudaSuccess;
	if (width > dpitch || width > spitch)
		return bad(cudaErrorInvalidPitchValue, "%s: width %zu, pitches %zu and %zu", call, width, dpitch, spitch);
	size_t dn = (height - 1) * dpitch + width, sn = (height - 1) * spitch + width;
	char dside = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ? 'd' : 'h';
	char sside = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ? 'd' : 'h';
	if (kind == cudaMemcpyDefault) {
		const allocation *a = find_live(dst), *b = find_live(src);
		dside = a && a->kind == MEM_DEVICE ? 'd' : 'h';
		sside = b && b->kind == MEM_DEVICE ? 'd' : 'h';
	}
	char what[64];
	snprintf(what, sizeof(what), "%s (%s)", call, kind_text(kind));
	cudaError_t e = check_operand(what, "dst", dst, dn, dside);
	if (e == cudaSuccess)
		e = check_operand(what, "src", src, sn, sside);
	if (e != cudaSuccess)
		return e;
	if ((const char *)dst < (const char *)src + sn && (const char *)src < (const char *)dst + dn)
		return bad(cudaErrorInvalidValue, "%s: the source and destination overlap", what);
	const allocation *a = find_live(dst), *b = find_live(src);
	*d2d = a && b && a->kind == MEM_DEVICE && b->kind == MEM_DEVICE;
	return cudaSuccess;
}

static cudaError_t copy_op(const char *call, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
			size_t height, enum cudaMemcpyKind kind, cudaStream_t stream, bool blocking)
{
	bool d2d;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	cudaError_t e = check_copy(call, dst, dpitch, src, spitch, width, height, kind, &d2d);
	if (e != cudaSuccess || width == 0 || height == 0)
		return e;
	char *d = (char *)dst;
	const char *s = (const char *)src;
	size_t dn = (height - 1) * dpitch + width, sn = (height - 1) * spitch + width;
	if (!find_live(dst))
		note_pageable(dst, dn);
	if (!find_live(src)) {
		/*
		 * Pageable source: CUDA documents that a copy from pageable
		 * memory may stage it into pinned memory before returning (the
		 * runtime API's "API synchronization behavior"), and the driver
		 * does; so the copy takes the source now, and a caller reusing
		 * its buffer after the call is not reported. The destination is
		 * written when the stream runs the copy.
		 */
		note_pageable(src, sn);
		auto staged = std::make_shared<std::vector<char>>(width * height);
		for (size_t r = 0; r < height; r++)
			memcpy(staged->data() + r * width, s + r * spitch, width);
		e = enqueue_op(
			stream,
			[=] {
				for (size_t r = 0; r < height; r++)
					memcpy(d + r * dpitch, staged->data() + r * width, width);
			},
			call);
	} else {
		e = enqueue_op(
			stream,
			[=] {
				for (size_t r = 0; r < height; r++)
					memcpy(d + r * dpitch, s + r * spitch, width);
			},
			call);
	}
	if (e == cudaSuccess && blocking && !d2d)
		drain(stream_of(stream));
	return e;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	ENTRY;
	return copy_op("cudaMemcpy", dst, n, src, n, n, 1, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	ENTRY;
	return copy_op("cudaMemcpyAsync", dst, n, src, n, n, 1, kind, stream, false);
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			 enum cudaMemcpyKind kind)
{
	ENTRY;
	return copy_op("cudaMemcpy2D", dst, dpitch, src, spitch, width, height, kind, nullptr, true);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			      enum cudaMemcpyKind kind, cudaStream_t stream)
{
	ENTRY;
	return copy_op("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, stream, false);
}

static cudaError_t memset_op(const char *call, void *p, int value, size_t n, cudaStream_t stream)
{
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (n == 0)
		return cudaSuccess;
	cudaError_t e = check_operand(call, "devPtr", p, n, 'd');
	if (e != cudaSuccess)
		return e;
	char *d = (char *)p;
	return enqueue_op(stream, [=] { memset(d, value, n); }, call);
}

cudaError_t cudaMemset(void *p, int value, size_t n)
{
	ENTRY;
	return memset_op("cudaMemset", p, value, n, nullptr); /* asynchronous to the host, on the legacy stream */
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t stream)
{
	ENTRY;
	return memset_op("cudaMemsetAsync", p, value, n, stream);
}

/* [p, p + n) inside one managed allocation. */
static cudaError_t check_managed(const char *call, const void *p, size_t n)
{
	const allocation *m = find_live(p);
	if (!p || !m || m->kind != MEM_MANAGED)
		return bad(cudaErrorInvalidValue, "%s: %p is not managed memory", call, p);
	if ((uintptr_t)p + n > m->base + m->size)
		return bad(cudaErrorInvalidValue, "%s: [%p, +%zu) runs past the end of a %zu-byte managed allocation", call, p,
			   n, m->size);
	return cudaSuccess;
}

static cudaError_t check_location(const char *call, struct cudaMemLocation loc)
{
	if (loc.type == cudaMemLocationTypeDevice && loc.id >= 0 && loc.id < cfg().devices)
		return cudaSuccess;
	if (loc.type == cudaMemLocationTypeHost || loc.type == cudaMemLocationTypeHostNumaCurrent ||
	    (loc.type == cudaMemLocationTypeHostNuma && loc.id >= 0))
		return cudaSuccess;
	return bad(loc.type == cudaMemLocationTypeDevice ? cudaErrorInvalidDevice : cudaErrorInvalidValue,
		   "%s: location type %d id %d", call, (int)loc.type, loc.id);
}

cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, struct cudaMemLocation loc, unsigned int flags,
				 cudaStream_t stream)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	cudaError_t e = check_managed("cudaMemPrefetchAsync", p, n);
	if (e == cudaSuccess)
		e = check_location("cudaMemPrefetchAsync", loc);
	if (e == cudaSuccess && flags != 0)
		e = bad(cudaErrorInvalidValue, "cudaMemPrefetchAsync: flags %#x", flags);
	if (e == cudaSuccess)
		e = enqueue_op(stream, [] {}, "cudaMemPrefetchAsync");
	return e;
}

cudaError_t cudaMemAdvise(const void *p, size_t n, enum cudaMemoryAdvise advice, struct cudaMemLocation loc)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	cudaError_t e = check_managed("cudaMemAdvise", p, n);
	if (e != cudaSuccess)
		return e;
	if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
		return bad(cudaErrorInvalidValue, "cudaMemAdvise: advice %d", (int)advice);
	if (advice != cudaMemAdviseSetReadMostly && advice != cudaMemAdviseUnsetReadMostly)
		return check_location("cudaMemAdvise", loc);
	return cudaSuccess;
}

cudaError_t cudaMemDiscardBatchAsync(void **ptrs, size_t *sizes, size_t count, unsigned long long flags,
				     cudaStream_t stream)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (!ptrs || !sizes || count == 0 || flags != 0)
		return bad(cudaErrorInvalidValue, "cudaMemDiscardBatchAsync: %zu ranges, flags %#llx", count, flags);
	std::vector<std::pair<char *, size_t>> r;
	for (size_t i = 0; i < count; i++) {
		cudaError_t e = check_managed("cudaMemDiscardBatchAsync", ptrs[i], sizes[i]);
		if (e != cudaSuccess)
			return e;
		r.emplace_back((char *)ptrs[i], sizes[i]);
	}
	unsigned char g = garbage_byte();
	return enqueue_op(
		stream,
		[r, g] { /* the contents are undefined from here on */
			for (auto &x : r)
				memset(x.first, g, x.second);
		},
		"cudaMemDiscardBatchAsync");
}

/* ---- streams and events ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	if (!s || flags > cudaStreamNonBlocking)
		return bad(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: %s, flags %#x", s ? "output" : "NULL output",
			   flags);
	CUstream_st *n = new CUstream_st;
	n->flags = flags;
	streams.insert(n);
	*s = n;
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	ENTRY;
	CUstream_st *s = stream_of(stream);
	if (!s || s == &legacy)
		return bad(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): no such stream", (void *)stream);
	drain(s); /* its work completes, as on a GPU */
	for (CUevent_st *e : events)
		if (e->stream == s)
			e->stream = nullptr;
	streams.erase(s);
	delete s;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	ENTRY;
	if (need_device() != cudaSuccess)
		return cudaErrorNoDevice;
	CUstream_st *s = stream_of(stream);
	if (!s)
		return bad(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize(%p): no such stream", (void *)stream);
	drain(s);
	return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	ENTRY;
	CUstream_st *s = stream_of(stream);
	if (!s)
		return bad(cudaErrorInvalidResourceHandle, "cudaStreamQuery(%p): no such stream", (void *)stream);
	drain(s, UINT64_MAX, false); /* a poll makes progress: the work runs now */
	return s->q.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
	ENTRY;
	if (!e || flags > 0xf)
		return bad(cudaErrorInvalidValue, "cudaEventCreate: bad output or flags");
	CUevent_st *n = new CUevent_st;
	n->flags = flags;
	events.insert(n);
	*e = n;
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	ENTRY;
	if (!events.count(e))
		return bad(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): no such event", (void *)e);
	events.erase(e);
	delete e;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream)
{
	ENTRY;
	if (!events.count(e))
		return bad(cudaErrorInvalidResourceHandle, "cudaEventRecord(%p): no such event", (void *)e);
	CUstream_st *s = stream_of(stream);
	if (!s)
		return bad(cudaErrorInvalidResourceHandle, "cudaEventRecord: stream %p does not exist", (void *)stream);
	cudaError_t err = enqueue_op(stream, [e] {
		if (events.count(e))
			e->when = now();
	}, "cudaEventRecord");
	if (err == cudaSuccess) {
		e->stream = s;
		e->seq = s->queued;
	}
	return err;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	ENTRY;
	if (!events.count(e))
		return bad(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(%p): no such event", (void *)e);
	if (e->stream)
		drain(e->stream, e->seq);
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	ENTRY;
	if (!events.count(e))
		return bad(cudaErrorInvalidResourceHandle, "cudaEventQuery(%p): no such event", (void *)e);
	if (e->stream)
		drain(e->stream, e->seq, false);
	return event_done(e) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int flags)
{
	ENTRY;
	if (!events.count(e))
		return bad(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: event %p does not exist", (void *)e);
	if (flags != 0)
		return bad(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags %#x", flags);
	CUstream_st *src = e->stream;
	uint64_t seq = e->seq;
	return enqueue_poll(
		stream,
		[src, seq] {
			if (src != &legacy && !streams.count(src))
				return true;
			drain(src, seq, false);
			return src->done >= seq;
		},
		nullptr, "cudaStreamWaitEvent");
}

/*
 * The simulator's own entry point for the NCCL simulator (nccl.cc): how many
 * of the `bytes` from p lie in the live allocation that holds p (0 when none
 * does), so a transfer that would run past its buffer's end is refused.
 */
size_t cudasim_bytes_held(const void *p, size_t bytes)
{
	ENTRY;
	const allocation *m = find_live(p);
	if (!m)
		return 0;
	size_t room = m->base + m->size - (uintptr_t)p;
	return bytes < room ? bytes : room;
}

/*
 * The simulator's own entry point for the NCCL simulator (nccl.cc): queue
 * work on a stream that poll(arg) advances each time the stream is drained
 * and ready(arg) says it may progress, with device memory open, and that is
 * done once poll returns non-zero. Neither may block: the progress is made
 * by other processes.
 */
cudaError_t cudasim_enqueue_poll(cudaStream_t stream, int (*poll)(void *), int (*ready)(void *), void *arg,
				 const char *what)
{
	ENTRY;
	if (!poll || !ready)
		return bad(cudaErrorInvalidValue, "cudasim_enqueue_poll: no poll or ready function");
	return enqueue_poll(stream, [poll, arg] { return poll(arg) != 0; }, [ready, arg] { return ready(arg) != 0; },
			    what);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	ENTRY;
	if (!ms || !events.count(a) || !events.count(b))
		return bad(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: bad output or event");
	if ((a->flags | b->flags) & cudaEventDisableTiming)
		return bad(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event without timing");
	if (!a->seq || !b->seq)
		return bad(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event never recorded");
	if (!event_done(a) || !event_done(b))
		return fail(cudaErrorNotReady);
	*ms = (float)((b->when - a->when) * 1e3);
	return cudaSuccess;
}

} /* extern "C" */
