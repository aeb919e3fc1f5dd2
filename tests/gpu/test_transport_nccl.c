/*
 * test_transport_nccl.c - tests worker/transport_nccl.c: the transport
 * conformance suite (tests/unit/transport_conformance.c, the one the TCP
 * backend passes) at world size 1 (NCCL wants one GPU per rank; on one GPU
 * that is one rank, sending to and receiving from itself), on the
 * transport, on a subset view and on a split communicator; device buffers
 * used in place; checksums in passing over managed memory (refused over
 * device-only memory); the native all-reduce; and the failures: a bad self
 * exchange, an abort, a peer that never joins (bounded by the timeout,
 * then ncclCommAbort instead of a hang).
 *
 * Then worlds of 2 and 3, a process a rank (this program again, with
 * --rank R --world W --id HEX), where every rank can have a device of its
 * own: under the CUDA simulator (tests/cudasim: every process its own
 * device), or on a machine with as many GPUs (rank r on device r). Each
 * world runs the conformance suite, the all-reduce (every rank the same
 * sum) and a split; then, at world 2, a peer that exits (no goodbye) as
 * the other begins an exchange with it: that exchange fails, never hangs.
 * The simulator says so as NCCL's network transport may (ncclRemoteError:
 * RS_EPEER at once), then as its kernels within a node do (nothing: the
 * transport's deadline, RS_ETIMEDOUT); a GPU may do either.
 */
#include "tests/gpu/gpu_test.h"
#include "tests/unit/transport_conformance.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "worker/transport_nccl.h"

#include <cuda_runtime_api.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* A transport on `device` (-1: the current one). */
static rs_transport *create_on(int device, int32_t rank, int32_t world, const ncclUniqueId *id, int timeout_ms,
			       rs_status *st, rs_err *err)
{
	rs_nccl_config cfg = {.rank = rank, .world = world, .id = *id, .device = device, .generation = 1,
			      .timeout_ms = timeout_ms};
	rs_transport *t = NULL;
	*st = rs_nccl_transport_create(&cfg, &t, err);
	return t;
}

static rs_transport *create(int32_t rank, int32_t world, const ncclUniqueId *id, int timeout_ms, rs_status *st,
			    rs_err *err)
{
	return create_on(0, rank, world, id, timeout_ms, st, err);
}

/* Whether this is the CUDA simulator (tests/cudasim), whose every process has a device of its own. */
static int simulated(void)
{
	struct cudaDeviceProp p;
	return cudaGetDeviceProperties(&p, 0) == cudaSuccess && !strncmp(p.name, "cudasim", 7);
}

static void conformance(void)
{
	rs_err err = {{0}};
	rs_status st;
	ncclUniqueId id;
	GPU_CHECK(rs_nccl_unique_id(&id, &err) == RS_OK, "unique id: %s", err.msg);
	rs_transport *t = create(0, 1, &id, 20000, &st, &err);
	GPU_CHECK(st == RS_OK, "create a world of 1: %s", err.msg);
	if (st != RS_OK)
		return;
	GPU_CHECK(!strcmp(t->ops->name, "nccl"), "backend name %s", t->ops->name);
	int f = rs_transport_conformance(t);
	GPU_CHECK(f == 0, "conformance at world 1: %d checks failed", f);

	/* device buffers: used in place by ncclSend/ncclRecv */
	size_t n = (size_t)3 << 20;
	unsigned char *h = malloc(n), *back = malloc(n), *ds, *dr;
	for (size_t k = 0; k < n; k++)
		h[k] = (unsigned char)(k * 7 + 3);
	GPU_CUDA(cudaMalloc((void **)&ds, n));
	GPU_CUDA(cudaMalloc((void **)&dr, n));
	GPU_CUDA(cudaMemcpy(ds, h, n, cudaMemcpyHostToDevice));
	GPU_CUDA(cudaMemset(dr, 0, n));
	/* the memset is queued on the legacy stream, which the transport's non-blocking stream does not wait for */
	GPU_CUDA(cudaDeviceSynchronize());
	rs_xfer s[2] = {{0, ds, n / 2, NULL}, {0, ds + n / 2, n - n / 2, NULL}},
		r[2] = {{0, dr, n / 2, NULL}, {0, dr + n / 2, n - n / 2, NULL}};
	st = rs_transport_exchange(t, s, 2, r, 2);
	GPU_CHECK(st == RS_OK, "device-buffer exchange: %s (%s)", rs_status_str(st), rs_transport_error(t));
	GPU_CUDA(cudaMemcpy(back, dr, n, cudaMemcpyDeviceToHost));
	GPU_CHECK(!memcmp(h, back, n), "device-buffer exchange: wrong bytes");

	/* checksums in passing (rs_xfer.crc): over managed memory, as a CUDA worker's shards are, hashed on the host
	 * and used in place; over device-only memory refused, since the host cannot read it */
	unsigned char *ms, *mr;
	GPU_CUDA(cudaMallocManaged((void **)&ms, n, cudaMemAttachGlobal));
	GPU_CUDA(cudaMallocManaged((void **)&mr, n, cudaMemAttachGlobal));
	memcpy(ms, h, n);
	memset(mr, 0, n);
	uint32_t ssum = 0, rsum = 0, got = 0;
	rs_xfer ms_x[2] = {{0, ms, n, &ssum}, {0, &ssum, 4, NULL}}, mr_x[2] = {{0, mr, n, &rsum}, {0, &got, 4, NULL}};
	st = rs_transport_exchange(t, ms_x, 2, mr_x, 2);
	uint32_t want = rs_crc32c(0, h, n);
	GPU_CHECK(st == RS_OK, "checksummed exchange of managed memory: %s (%s)", rs_status_str(st), rs_transport_error(t));
	GPU_CHECK(st != RS_OK || (!memcmp(mr, h, n) && ssum == want && rsum == want && got == want),
		  "checksummed managed memory: bytes %s, sums %08x %08x %08x, not %08x", memcmp(mr, h, n) ? "wrong" : "right",
		  ssum, rsum, got, want);
	ssum = rsum = 0; /* managed memory alone: nothing is staged, the receive is still hashed */
	memset(mr, 0, n);
	st = rs_transport_exchange(t, ms_x, 1, mr_x, 1);
	GPU_CHECK(st == RS_OK && ssum == want && rsum == want && !memcmp(mr, h, n),
		  "checksummed managed memory, nothing staged: %s, sums %08x %08x, not %08x", rs_status_str(st), ssum, rsum,
		  want);
	GPU_CUDA(cudaFree(mr));
	GPU_CUDA(cudaFree(ms));
	rs_xfer dev_x = {0, ds, n, &ssum};
	st = rs_transport_exchange(t, &dev_x, 1, &dev_x, 1);
	GPU_CHECK(st == RS_EINVAL, "a checksum over device-only memory: %s, not refused", rs_status_str(st));
	rs_transport_destroy(t); /* the refusal leaves the transport unusable: a fresh one (and id) for the rest */
	GPU_CHECK(rs_nccl_unique_id(&id, &err) == RS_OK, "unique id: %s", err.msg);
	t = create(0, 1, &id, 20000, &st, &err);
	GPU_CHECK(st == RS_OK, "create after the refusal: %s", err.msg);
	if (st != RS_OK)
		return;

	/* native all-reduce, host and device buffers: at world 1 the input comes back */
	float v[1000], w[1000];
	for (int i = 0; i < 1000; i++)
		v[i] = w[i] = (float)i * 0.25f - 7.0f;
	st = rs_nccl_allreduce_sum(t, v, 1000);
	GPU_CHECK(st == RS_OK && !memcmp(v, w, sizeof(v)), "ncclAllReduce of host floats: %s", rs_status_str(st));
	GPU_CUDA(cudaMemcpy(ds, w, sizeof(w), cudaMemcpyHostToDevice));
	st = rs_nccl_allreduce_sum(t, (float *)ds, 1000);
	GPU_CUDA(cudaMemcpy(v, ds, sizeof(v), cudaMemcpyDeviceToHost));
	GPU_CHECK(st == RS_OK && !memcmp(v, w, sizeof(v)), "ncclAllReduce of device floats: %s", rs_status_str(st));

	/* a subset view shares the communicator; a split makes a new one */
	rs_transport *view = NULL, *split = NULL;
	st = rs_transport_subset(t, 1, &view);
	GPU_CHECK(st == RS_OK, "subset: %s", rs_status_str(st));
	if (view) {
		f = rs_transport_conformance(view);
		GPU_CHECK(f == 0, "conformance on a subset view: %d checks failed", f);
		GPU_CHECK(rs_nccl_allreduce_sum(view, v, 4) == RS_EUNSUPPORTED, "native all-reduce on a view");
		rs_transport_destroy(view);
	}
	st = rs_nccl_transport_split(t, 1, &split);
	GPU_CHECK(st == RS_OK && split, "split: %s (%s)", rs_status_str(st), rs_transport_error(t));
	if (split) {
		f = rs_transport_conformance(split);
		GPU_CHECK(f == 0, "conformance on a split communicator: %d checks failed", f);
		rs_transport_destroy(split);
	}
	/* the parent still works after its view and split are gone */
	GPU_CHECK(rs_transport_barrier(t) == RS_OK, "barrier after split: %s", rs_transport_error(t));

	/* bad input: self sends and receives that do not match */
	unsigned char a[4] = {1, 2, 3, 4}, b[8];
	rs_xfer bs = {0, a, 4, NULL}, br = {0, b, 8, NULL};
	st = rs_transport_exchange(t, &bs, 1, &br, 1);
	GPU_CHECK(st == RS_EINVAL, "self exchange of 4 bytes into 8: %s", rs_status_str(st));
	rs_transport_destroy(t);

	/* abort: every later call fails with RS_EABORTED (a unique id serves one communicator) */
	GPU_CHECK(rs_nccl_unique_id(&id, &err) == RS_OK, "unique id: %s", err.msg);
	t = create(0, 1, &id, 20000, &st, &err);
	GPU_CHECK(st == RS_OK, "create after destroy: %s", err.msg);
	if (t) {
		rs_transport_abort(t);
		st = rs_transport_barrier(t);
		GPU_CHECK(st == RS_EABORTED, "barrier after abort: %s", rs_status_str(st));
		GPU_CHECK(rs_transport_barrier(t) == RS_EABORTED, "second call after abort");
		rs_transport_destroy(t);
	}
	GPU_CUDA(cudaFree(dr));
	GPU_CUDA(cudaFree(ds));
	free(back);
	free(h);
}

/* Rank 0 of a world of 2 whose rank 1 never comes: a timeout, not a hang. */
static void absent_peer(void)
{
	rs_err err = {{0}};
	rs_status st;
	ncclUniqueId id;
	GPU_CHECK(rs_nccl_unique_id(&id, &err) == RS_OK, "unique id: %s", err.msg);
	double t0 = rs_now();
	rs_transport *t = create(0, 2, &id, 1500, &st, &err);
	double dt = rs_now() - t0;
	printf("absent peer: %s after %.2f s: %s\n", rs_status_str(st), dt, err.msg);
	GPU_CHECK(st == RS_ETIMEDOUT && !t, "rank 0 of 2 alone: %s, want a timeout", rs_status_str(st));
	GPU_CHECK(dt < 15.0, "rank 0 of 2 alone gave up after %.1f s (timeout 1.5 s)", dt);
	rs_transport_destroy(t);
}

/* ---- worlds of several processes ----------------------------------------------------------- */

static void id_to_hex(const ncclUniqueId *id, char *hex)
{
	for (size_t k = 0; k < sizeof(*id); k++)
		snprintf(hex + 2 * k, 3, "%02x", (unsigned char)id->internal[k]);
}

static int id_from_hex(const char *hex, ncclUniqueId *id)
{
	if (strlen(hex) != 2 * sizeof(*id))
		return -1;
	for (size_t k = 0; k < sizeof(*id); k++) {
		unsigned v;
		if (sscanf(hex + 2 * k, "%2x", &v) != 1)
			return -1;
		id->internal[k] = (char)v;
	}
	return 0;
}

/* What rank `rank` of a world of `world` does (in its own process): the number of checks that failed. */
static int one_rank(int32_t rank, int32_t world, const ncclUniqueId *id, const char *what)
{
	rs_err err = {{0}};
	rs_status st;
	/*
	 * On the device main chose (-1: the current one). Long enough for the rank a split leaves out, whose barrier
	 * waits for the others' conformance suite; 3 s where a dead peer is found out by the deadline.
	 */
	int hang = !strcmp(what, "dies-hang");
	rs_transport *t = create_on(-1, rank, world, id, hang ? 3000 : 120000, &st, &err);
	GPU_CHECK(st == RS_OK, "rank %d of %d: create: %s", rank, world, err.msg);
	if (st != RS_OK)
		return gpu_test_failures;
	if (!strncmp(what, "dies", 4)) { /* rank 1 exits as rank 0 begins an exchange with it; rank 0's fails */
		static unsigned char big[8 << 20];
		rs_xfer x = {1 - rank, big, sizeof(big), NULL};
		if (rank == 1) {
			rs_transport_barrier(t);
			_exit(0); /* no goodbye: as a process killed */
		}
		GPU_CHECK(rs_transport_barrier(t) == RS_OK, "rank 0: barrier before the exit: %s", rs_transport_error(t));
		double t0 = rs_now();
		st = rs_transport_exchange(t, &x, 1, &x, 1);
		rs_status want = !simulated() ? st : hang ? RS_ETIMEDOUT : RS_EPEER; /* a GPU: either, below */
		GPU_CHECK((st == RS_EPEER || st == RS_ETIMEDOUT) && st == want,
			  "rank 0: an exchange with a peer that exited (%s): %s (%s), want %s", what, rs_status_str(st),
			  rs_transport_error(t), simulated() ? rs_status_str(want) : "RS_EPEER or RS_ETIMEDOUT");
		GPU_CHECK(rs_now() - t0 < (hang ? 15.0 : 60.0), "rank 0: the failed exchange took %.1f s (timeout %d s)",
			  rs_now() - t0, hang ? 3 : 120);
		rs_transport_destroy(t);
		return gpu_test_failures;
	}
	int f = rs_transport_conformance(t);
	GPU_CHECK(f == 0, "rank %d of %d: conformance: %d checks failed", rank, world, f);
	/* the all-reduce: every rank the same sum, of host floats and of device floats */
	enum { N = 1000 };
	float v[N], want[N], *d;
	for (int i = 0; i < N; i++) {
		v[i] = (float)(rank + 1) * 0.5f + (float)i;
		want[i] = 0;
		for (int32_t r = 0; r < world; r++)
			want[i] += (float)(r + 1) * 0.5f + (float)i; /* small integers and halves: exact in any order */
	}
	GPU_CUDA(cudaMalloc((void **)&d, sizeof(v)));
	GPU_CUDA(cudaMemcpy(d, v, sizeof(v), cudaMemcpyHostToDevice));
	st = rs_nccl_allreduce_sum(t, v, N);
	GPU_CHECK(st == RS_OK && !memcmp(v, want, sizeof(v)), "rank %d of %d: all-reduce of host floats: %s", rank, world,
		  rs_status_str(st));
	st = rs_nccl_allreduce_sum(t, d, N);
	GPU_CUDA(cudaMemcpy(v, d, sizeof(v), cudaMemcpyDeviceToHost));
	GPU_CHECK(st == RS_OK && !memcmp(v, want, sizeof(v)), "rank %d of %d: all-reduce of device floats: %s", rank,
		  world, rs_status_str(st));
	GPU_CUDA(cudaFree(d));
	/* a split to the first world - 1 ranks; the last is left out and goes on with the parent */
	rs_transport *split = NULL;
	st = rs_nccl_transport_split(t, world - 1, &split);
	GPU_CHECK(st == RS_OK && (split != NULL) == (rank < world - 1), "rank %d of %d: split to %d: %s (%s)", rank, world,
		  world - 1, rs_status_str(st), rs_transport_error(t));
	if (split) {
		f = rs_transport_conformance(split);
		GPU_CHECK(f == 0, "rank %d of %d: conformance on the split of %d: %d checks failed", rank, world, world - 1, f);
		rs_transport_destroy(split);
	}
	GPU_CHECK(rs_transport_barrier(t) == RS_OK, "rank %d of %d: barrier after the split: %s", rank, world,
		  rs_transport_error(t));
	rs_transport_destroy(t);
	return gpu_test_failures;
}

/* A world of `world` ranks: ranks 1.. in processes of their own (self: this program), rank 0 here. */
static void world_of(const char *self, int32_t world, const char *what)
{
	rs_err err = {{0}};
	ncclUniqueId id;
	char hex[2 * sizeof(id) + 1], rank_s[16], world_s[16];
	GPU_CHECK(rs_nccl_unique_id(&id, &err) == RS_OK, "unique id: %s", err.msg);
	id_to_hex(&id, hex);
	snprintf(world_s, sizeof(world_s), "%d", world);
	pid_t pid[8] = {0};
	for (int32_t r = 1; r < world; r++) {
		snprintf(rank_s, sizeof(rank_s), "%d", r);
		char *argv[] = {(char *)self, "--rank", rank_s, "--world", world_s, "--id", hex, (char *)what, NULL};
		int e = posix_spawn(&pid[r], self, NULL, NULL, argv, environ);
		GPU_CHECK(e == 0, "spawning rank %d: %s", r, strerror(e));
	}
	int before = gpu_test_failures;
	one_rank(0, world, &id, what);
	double until = rs_now() + 200;
	for (int32_t r = 1; r < world; r++) {
		int status = 0;
		pid_t got = 0;
		while (pid[r] > 0 && (got = waitpid(pid[r], &status, WNOHANG)) == 0 && rs_now() < until)
			rs_sleep(0.05);
		if (got == 0 && pid[r] > 0) { /* a rank that hangs is named, not waited for */
			kill(pid[r], SIGKILL);
			waitpid(pid[r], &status, 0);
			GPU_CHECK(0, "rank %d of %d (%s) still ran after 200 s: killed", r, world, what);
		} else if (got == pid[r]) {
			GPU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d of %d (%s) failed (status %#x)", r,
				  world, what, status);
		}
	}
	printf("world of %d (%s): %s\n", world, what, gpu_test_failures == before ? "passed" : "FAILED");
}

/* Whether every rank of a world of n can have a device of its own: the simulator's processes each have one. */
static int devices_for(int32_t n)
{
	int count = 0;
	return simulated() || (cudaGetDeviceCount(&count) == cudaSuccess && count >= n);
}

int main(int argc, char **argv)
{
	if (argc == 8 && !strcmp(argv[1], "--rank") && !strcmp(argv[3], "--world") && !strcmp(argv[5], "--id")) {
		ncclUniqueId id;
		int32_t rank = atoi(argv[2]), world = atoi(argv[4]);
		if (id_from_hex(argv[6], &id) != 0 || rank < 1 || rank >= world)
			return 2;
		gpu_test_require_device("test_transport_nccl");
		int count = 1;
		if (cudaGetDeviceCount(&count) == cudaSuccess && count > rank)
			GPU_CUDA(cudaSetDevice(rank));
		return one_rank(rank, world, &id, argv[7]) ? 1 : 0;
	}
	gpu_test_require_device("test_transport_nccl");
	int v = 0;
	if (ncclGetVersion(&v) == ncclSuccess)
		printf("test_transport_nccl: NCCL %d\n", v);
	conformance();
	absent_peer();
	for (int32_t w = 2; w <= 3; w++)
		if (devices_for(w))
			world_of(argv[0], w, "works");
		else
			printf("world of %d: not run (NCCL wants a device per rank; this machine has fewer)\n", w);
	if (devices_for(2)) {
		world_of(argv[0], 2, "dies");
		setenv("NCCLSIM_PEER_LOSS", "hang", 1); /* the simulator's NCCL reports nothing (a GPU ignores it) */
		world_of(argv[0], 2, "dies-hang");
		unsetenv("NCCLSIM_PEER_LOSS");
	}
	return gpu_test_summary("test_transport_nccl");
}
