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
 */
#include "tests/gpu/gpu_test.h"
#include "tests/unit/transport_conformance.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "worker/transport_nccl.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rs_transport *create(int32_t rank, int32_t world, const ncclUniqueId *id, int timeout_ms, rs_status *st,
			    rs_err *err)
{
	rs_nccl_config cfg = {.rank = rank, .world = world, .id = *id, .device = 0, .generation = 1, .timeout_ms = timeout_ms};
	rs_transport *t = NULL;
	*st = rs_nccl_transport_create(&cfg, &t, err);
	return t;
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

int main(void)
{
	gpu_test_require_device("test_transport_nccl");
	int v = 0;
	if (ncclGetVersion(&v) == ncclSuccess)
		printf("test_transport_nccl: NCCL %d\n", v);
	conformance();
	absent_peer();
	return gpu_test_summary("test_transport_nccl");
}
