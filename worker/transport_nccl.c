/*
 * transport_nccl.c - see transport_nccl.h.
 *
 * Every NCCL call goes through NCCLCHECK and every CUDA call through
 * TCUDACHECK: on failure they record file:line, the call and the library's
 * message in the transport's error, log it, abort the communicator and
 * return from the enclosing function. Waiting is polling: the async error of
 * the communicator, the abort flag, the deadline, and a CUDA event recorded
 * after the transfers.
 */
#include "worker/transport_nccl.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STAGE_ALIGN 256
#define POLL_NS 20000

/* The communicator, shared by a transport and its subset views. */
typedef struct comm_ref {
	ncclComm_t comm;
	int dead;     /* aborted: only the handle is left, nothing may be called on it */
	int refs;
} comm_ref;

typedef struct nccl {
	rs_transport base;
	comm_ref *cr;
	cudaStream_t stream;
	int own_stream;
	int device;
	atomic_int aborted;
	int broken;
	int view;           /* a subset view: the communicator has more ranks than base.world */
	cudaEvent_t done;
	char *stage;        /* device staging for host buffers */
	size_t stage_cap;
	rs_transport *boot; /* the transport the id came over (rs_nccl_transport_bootstrap), owned */
} nccl;

static rs_status failv(nccl *t, rs_status st, const char *fmt, va_list ap)
{
	if (!t->broken) { /* the first failure is the cause */
		vsnprintf(t->base.error, sizeof(t->base.error), fmt, ap);
		RS_ERROR("%s", t->base.error);
	}
	t->broken = 1;
	if (t->cr && !t->cr->dead) {
		t->cr->dead = 1;
		ncclResult_t r = ncclCommAbort(t->cr->comm);
		if (r != ncclSuccess)
			RS_WARN("ncclCommAbort: %s", ncclGetErrorString(r));
	}
	return st;
}

static rs_status fail(nccl *t, rs_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static rs_status fail(nccl *t, rs_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	failv(t, st, fmt, ap);
	va_end(ap);
	return st;
}

/* ncclInProgress is not a failure: the communicator is non-blocking, wait_comm() finishes the call. */
#define NCCLCHECK(t, call)                                                                                      \
	do {                                                                                                    \
		ncclResult_t rs__nr = (call);                                                                   \
		if (rs__nr != ncclSuccess && rs__nr != ncclInProgress)                                          \
			return fail(t, rs__nr == ncclRemoteError ? RS_EPEER : RS_ENCCL,                         \
				    "transport nccl: rank %d: %s:%d: %s failed: %s (%s)", (t)->base.rank, __FILE__, \
				    __LINE__, #call, ncclGetErrorString(rs__nr),                                \
				    (t)->cr && !(t)->cr->dead ? ncclGetLastError((t)->cr->comm) : "");          \
	} while (0)

#define TCUDACHECK(t, call)                                                                                \
	do {                                                                                               \
		cudaError_t rs__ce = (call);                                                               \
		if (rs__ce != cudaSuccess)                                                                 \
			return fail(t, RS_ECUDA, "transport nccl: rank %d: %s:%d: %s failed: %s: %s",      \
				    (t)->base.rank, __FILE__, __LINE__, #call, cudaGetErrorName(rs__ce),   \
				    cudaGetErrorString(rs__ce));                                           \
	} while (0)

static void nap(void)
{
	struct timespec ts = {0, POLL_NS};
	nanosleep(&ts, NULL);
}

/* Common to both waits: the abort flag, the communicator's async error, the deadline. */
static rs_status poll_comm(nccl *t, const char *what, int64_t deadline, int *ready)
{
	ncclResult_t ar = ncclSuccess;
	if (atomic_load(&t->aborted))
		return fail(t, RS_EABORTED, "transport nccl: rank %d: aborted during %s", t->base.rank, what);
	if (t->cr->dead)
		return fail(t, RS_EABORTED, "transport nccl: rank %d: the communicator was aborted", t->base.rank);
	NCCLCHECK(t, ncclCommGetAsyncError(t->cr->comm, &ar));
	if (ar != ncclSuccess && ar != ncclInProgress)
		return fail(t, ar == ncclRemoteError || ar == ncclSystemError ? RS_EPEER : RS_ENCCL,
			    "transport nccl: rank %d: %s: %s (%s)", t->base.rank, what, ncclGetErrorString(ar),
			    ncclGetLastError(t->cr->comm));
	*ready = ar == ncclSuccess;
	if (!*ready && rs_now_ms() > deadline)
		return fail(t, RS_ETIMEDOUT, "transport nccl: rank %d: %s timed out after %d ms (a peer gone or hung?)",
			    t->base.rank, what, t->base.timeout_ms);
	return RS_OK;
}

/* Wait until the communicator has no call in progress (init, group end, finalize, split). */
static rs_status wait_comm(nccl *t, const char *what, int64_t deadline)
{
	for (;;) {
		int ready = 0;
		RSCHECK(poll_comm(t, what, deadline, &ready));
		if (ready)
			return RS_OK;
		nap();
	}
}

/* Wait until the stream has run everything queued so far, watching the communicator meanwhile. */
static rs_status wait_stream(nccl *t, const char *what, int64_t deadline)
{
	TCUDACHECK(t, cudaEventRecord(t->done, t->stream));
	for (;;) {
		cudaError_t e = cudaEventQuery(t->done);
		int ready = 0;
		if (e == cudaSuccess) /* and the communicator did not fail meanwhile */
			return poll_comm(t, what, deadline, &ready);
		if (e != cudaErrorNotReady)
			TCUDACHECK(t, e);
		rs_status st = poll_comm(t, what, deadline, &ready);
		if (st != RS_OK)
			return st;
		if (rs_now_ms() > deadline)
			return fail(t, RS_ETIMEDOUT, "transport nccl: rank %d: %s timed out after %d ms (a peer gone or hung?)",
				    t->base.rank, what, t->base.timeout_ms);
		nap();
	}
}

static rs_status usable(nccl *t)
{
	if (atomic_load(&t->aborted))
		return fail(t, RS_EABORTED, "transport nccl: aborted");
	if (t->broken || t->cr->dead)
		return RS_EABORTED;
	return RS_OK;
}

/* The kind of memory p is in: cudaMemoryTypeUnregistered for an unknown host pointer. */
static enum cudaMemoryType memory_type(const void *p)
{
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError(); /* an unknown host pointer: not an error to keep */
		return cudaMemoryTypeUnregistered;
	}
	return a.type;
}

/* Device (or managed) memory NCCL can use in place; anything else is staged. */
static int in_place(enum cudaMemoryType k) { return k == cudaMemoryTypeDevice || k == cudaMemoryTypeManaged; }

static int on_device(const void *p) { return in_place(memory_type(p)); }

static size_t align_up(size_t n) { return (n + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN; }

static rs_status stage_reserve(nccl *t, size_t bytes)
{
	if (bytes <= t->stage_cap)
		return RS_OK;
	size_t cap = t->stage_cap ? t->stage_cap : (size_t)1 << 20;
	while (cap < bytes)
		cap *= 2;
	TCUDACHECK(t, cudaStreamSynchronize(t->stream)); /* nothing queued may still use the old buffer */
	TCUDACHECK(t, cudaFree(t->stage));
	t->stage = NULL;
	t->stage_cap = 0;
	TCUDACHECK(t, cudaMalloc((void **)&t->stage, cap));
	t->stage_cap = cap;
	return RS_OK;
}

static rs_status nccl_exchange(rs_transport *base, const rs_xfer *sends, int nsends, const rs_xfer *recvs, int nrecvs)
{
	nccl *t = (nccl *)base;
	int32_t w = base->world, me = base->rank;
	rs_status st;
	RSCHECK(usable(t));
	int n = nsends + nrecvs, nself_s = 0, nself_r = 0;
	for (int i = 0; i < n; i++) {
		const rs_xfer *x = i < nsends ? &sends[i] : &recvs[i - nsends];
		if (x->peer < 0 || x->peer >= w)
			return fail(t, RS_EINVAL, "transport nccl: message for rank %d, world has %d", x->peer, w);
		if (x->peer == me)
			*(i < nsends ? &nself_s : &nself_r) += 1;
	}
	/* to self: matched in order, as on the other backends */
	if (nself_s != nself_r)
		return fail(t, RS_EINVAL, "transport nccl: %d sends but %d receives to self", nself_s, nself_r);
	for (int i = 0, j = 0; i < nsends; i++) {
		if (sends[i].peer != me)
			continue;
		while (recvs[j].peer != me)
			j++;
		if (sends[i].len != recvs[j].len)
			return fail(t, RS_EINVAL, "transport nccl: self message: %zu bytes sent, %zu expected", sends[i].len,
				    recvs[j].len);
		j++;
	}

	/* where each message lives on the device: in place, or at an offset of the staging buffer */
	char **dev = malloc(sizeof(char *) * (size_t)(n + 1));
	size_t *soff = malloc(sizeof(size_t) * (size_t)(n + 1)), total = 0;
	if (!dev || !soff) {
		free(dev);
		free(soff);
		return fail(t, RS_ENOMEM, "transport nccl: out of memory");
	}
	for (int i = 0; i < n; i++) {
		const rs_xfer *x = i < nsends ? &sends[i] : &recvs[i - nsends];
		soff[i] = SIZE_MAX;
		enum cudaMemoryType kind = x->len ? memory_type(x->buf) : cudaMemoryTypeUnregistered;
		if (x->crc && kind == cudaMemoryTypeDevice) { /* managed memory is the host's too */
			free(soff);
			free(dev);
			return fail(t, RS_EINVAL, "transport nccl: a checksum over %zu bytes of device memory", x->len);
		}
		if (x->len && !in_place(kind)) {
			soff[i] = total;
			total += align_up(x->len);
		}
	}
	int64_t deadline = rs_now_ms() + t->base.timeout_ms;
	st = RS_OK;
	if ((st = stage_reserve(t, total)) != RS_OK)
		goto out;
	for (int i = 0; i < n; i++) {
		const rs_xfer *x = i < nsends ? &sends[i] : &recvs[i - nsends];
		dev[i] = soff[i] == SIZE_MAX ? (char *)x->buf : t->stage + soff[i];
		if (i < nsends && x->crc) /* in order: a later message may carry it, and is staged (read) below */
			*x->crc = rs_crc32c(*x->crc, x->buf, x->len);
		if (i < nsends && soff[i] != SIZE_MAX) {
			cudaError_t e = cudaMemcpyAsync(dev[i], x->buf, x->len, cudaMemcpyHostToDevice, t->stream);
			if (e != cudaSuccess) {
				st = fail(t, RS_ECUDA, "transport nccl: rank %d: %s:%d: cudaMemcpyAsync (stage a send) failed: %s",
					  me, __FILE__, __LINE__, cudaGetErrorString(e));
				goto out;
			}
		}
	}
	ncclResult_t r = ncclGroupStart();
	for (int i = 0; r == ncclSuccess && i < n; i++) {
		const rs_xfer *x = i < nsends ? &sends[i] : &recvs[i - nsends];
		if (!x->len)
			continue; /* both ends skip it: lengths agree */
		r = i < nsends ? ncclSend(dev[i], x->len, ncclUint8, x->peer, t->cr->comm, t->stream)
			       : ncclRecv(dev[i], x->len, ncclUint8, x->peer, t->cr->comm, t->stream);
	}
	ncclResult_t r2 = ncclGroupEnd(); /* always closes the group, even after a failed call inside */
	if (r == ncclSuccess || r == ncclInProgress)
		r = r2;
	if (r != ncclSuccess && r != ncclInProgress) {
		st = fail(t, r == ncclRemoteError ? RS_EPEER : RS_ENCCL,
			  "transport nccl: rank %d: %s:%d: grouped ncclSend/ncclRecv failed: %s (%s)", me, __FILE__,
			  __LINE__, ncclGetErrorString(r), t->cr->dead ? "" : ncclGetLastError(t->cr->comm));
		goto out;
	}
	if ((st = wait_comm(t, "exchange (group end)", deadline)) != RS_OK)
		goto out;
	/* poll the transfers to completion first: a copy into pageable memory would block until they end */
	if ((st = wait_stream(t, "exchange", deadline)) != RS_OK || total == 0)
		goto hash;
	for (int i = nsends; i < n; i++) {
		const rs_xfer *x = &recvs[i - nsends];
		if (soff[i] == SIZE_MAX)
			continue;
		cudaError_t e = cudaMemcpyAsync(x->buf, dev[i], x->len, cudaMemcpyDeviceToHost, t->stream);
		if (e != cudaSuccess) {
			st = fail(t, RS_ECUDA, "transport nccl: rank %d: %s:%d: cudaMemcpyAsync (unstage a receive) failed: %s",
				  me, __FILE__, __LINE__, cudaGetErrorString(e));
			goto out;
		}
	}
	st = wait_stream(t, "exchange", deadline);
hash: /* what landed, in host-readable memory (staged back, or managed and synchronized) */
	for (int i = 0; st == RS_OK && i < nrecvs; i++) {
		if (!recvs[i].crc)
			continue;
		if (recvs[i].len && rs_transport_damage_for_tests) {
			rs_transport_damage_for_tests = 0;
			((unsigned char *)recvs[i].buf)[recvs[i].len / 2] ^= 0x40;
		}
		*recvs[i].crc = rs_crc32c(*recvs[i].crc, recvs[i].buf, recvs[i].len);
	}
out:
	free(soff);
	free(dev);
	return st;
}

rs_status rs_nccl_allreduce_sum(rs_transport *base, float *buf, size_t n)
{
	nccl *t = (nccl *)base;
	RSCHECK(usable(t));
	if (t->view)
		return RS_EUNSUPPORTED;
	if (n == 0)
		return RS_OK;
	int64_t deadline = rs_now_ms() + t->base.timeout_ms;
	float *d = buf;
	size_t bytes = n * sizeof(float);
	int staged = !on_device(buf);
	if (staged) {
		RSCHECK(stage_reserve(t, bytes));
		d = (float *)t->stage;
		TCUDACHECK(t, cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, t->stream));
	}
	NCCLCHECK(t, ncclAllReduce(d, d, n, ncclFloat32, ncclSum, t->cr->comm, t->stream));
	RSCHECK(wait_comm(t, "allreduce", deadline));
	RSCHECK(wait_stream(t, "allreduce", deadline)); /* before a copy that could block on it */
	if (staged)
		TCUDACHECK(t, cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, t->stream));
	return wait_stream(t, "allreduce", deadline);
}

static void nccl_abort(rs_transport *base)
{
	/* async-signal-safe: the waiting thread sees the flag and aborts the communicator */
	atomic_store(&((nccl *)base)->aborted, 1);
	if (((nccl *)base)->boot)
		rs_transport_abort(((nccl *)base)->boot);
}

static void nccl_destroy(rs_transport *base)
{
	nccl *t = (nccl *)base;
	if (!t)
		return;
	if (t->cr && --t->cr->refs == 0) {
		if (!t->cr->dead && t->cr->comm) {
			/* flush and close cleanly, bounded; abort instead when that fails */
			rs_status st = RS_OK;
			if (!t->broken && !atomic_load(&t->aborted)) {
				ncclResult_t r = ncclCommFinalize(t->cr->comm);
				st = r == ncclSuccess || r == ncclInProgress
					     ? wait_comm(t, "finalize", rs_now_ms() + t->base.timeout_ms)
					     : fail(t, RS_ENCCL, "ncclCommFinalize: %s", ncclGetErrorString(r));
			}
			if (st == RS_OK && !t->broken && !atomic_load(&t->aborted)) {
				ncclResult_t r = ncclCommDestroy(t->cr->comm);
				if (r != ncclSuccess && r != ncclInProgress)
					RS_WARN("ncclCommDestroy: %s", ncclGetErrorString(r));
			} else if (!t->cr->dead) {
				ncclResult_t r = ncclCommAbort(t->cr->comm);
				if (r != ncclSuccess)
					RS_WARN("ncclCommAbort: %s", ncclGetErrorString(r));
			}
		}
		free(t->cr);
	}
	/* best effort from here: nothing left to report to */
	if (t->done && cudaEventDestroy(t->done) != cudaSuccess)
		RS_WARN("cudaEventDestroy failed in the NCCL transport's destroy");
	if (t->stage && cudaFree(t->stage) != cudaSuccess)
		RS_WARN("cudaFree failed in the NCCL transport's destroy");
	if (t->own_stream && cudaStreamDestroy(t->stream) != cudaSuccess)
		RS_WARN("cudaStreamDestroy failed in the NCCL transport's destroy");
	rs_transport_destroy(t->boot);
	free(t);
}

static rs_status nccl_subset(rs_transport *base, int32_t n, rs_transport **out);

static const rs_transport_ops nccl_ops = {
	.name = "nccl",
	.exchange = nccl_exchange,
	.abort = nccl_abort,
	.destroy = nccl_destroy,
	.subset = nccl_subset,
};

/* A transport struct around cr (shared or new), with its own event, staging and (maybe) stream. */
static rs_status wrap(int32_t rank, int32_t world, int device, cudaStream_t stream, int timeout_ms, nccl **out,
		      rs_err *err)
{
	nccl *t = calloc(1, sizeof(*t));
	*out = NULL;
	if (!t)
		return rs_err_set(err, RS_ENOMEM, "transport nccl: out of memory");
	t->base = (rs_transport){.ops = &nccl_ops, .rank = rank, .world = world};
	t->device = device;
	t->base.timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
	t->stream = stream;
	cudaError_t e = cudaSuccess;
	if (!stream) {
		e = cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking);
		t->own_stream = e == cudaSuccess;
	}
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&t->done, cudaEventDisableTiming);
	if (e != cudaSuccess) {
		nccl_destroy(&t->base);
		return rs_err_set(err, RS_ECUDA, "transport nccl: %s:%d: stream/event creation failed: %s", __FILE__,
				  __LINE__, cudaGetErrorString(e));
	}
	*out = t;
	return RS_OK;
}

static rs_status nccl_subset(rs_transport *base, int32_t n, rs_transport **out)
{
	nccl *parent = (nccl *)base, *t;
	*out = NULL;
	if (n < 1 || n > base->world || base->rank >= n)
		return RS_EINVAL;
	RSCHECK(usable(parent));
	RSCHECK(wrap(base->rank, n, parent->device, parent->stream, parent->base.timeout_ms, &t, NULL));
	t->cr = parent->cr;
	t->cr->refs++;
	t->view = 1;
	*out = &t->base;
	return RS_OK;
}

rs_status rs_nccl_unique_id(ncclUniqueId *id, rs_err *err)
{
	ncclResult_t r = ncclGetUniqueId(id);
	if (r != ncclSuccess)
		return rs_err_set(err, RS_ENCCL, "%s:%d: ncclGetUniqueId failed: %s", __FILE__, __LINE__,
				  ncclGetErrorString(r));
	return RS_OK;
}

static ncclConfig_t nonblocking_config(void)
{
	ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
	c.blocking = 0;
	return c;
}

rs_status rs_nccl_transport_create(const rs_nccl_config *cfg, rs_transport **out, rs_err *err)
{
	nccl *t = NULL;
	int dev = cfg->device;
	*out = NULL;
	if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world)
		return rs_err_set(err, RS_EINVAL, "transport nccl: bad config (rank %d of %d)", cfg->rank, cfg->world);
	cudaError_t e = dev >= 0 ? cudaSetDevice(dev) : cudaGetDevice(&dev);
	if (e != cudaSuccess)
		return rs_err_set(err, RS_ECUDA, "transport nccl: %s:%d: selecting CUDA device %d failed: %s", __FILE__,
				  __LINE__, cfg->device, cudaGetErrorString(e));
	RSCHECK(wrap(cfg->rank, cfg->world, dev, cfg->stream, cfg->timeout_ms, &t, err));
	if (!(t->cr = calloc(1, sizeof(*t->cr)))) {
		nccl_destroy(&t->base);
		return rs_err_set(err, RS_ENOMEM, "transport nccl: out of memory");
	}
	t->cr->refs = 1;
	t->cr->dead = 1; /* until init returns a handle */
	ncclConfig_t c = nonblocking_config();
	ncclResult_t r = ncclCommInitRankConfig(&t->cr->comm, cfg->world, cfg->id, cfg->rank, &c);
	if (r != ncclSuccess && r != ncclInProgress) {
		rs_err_set(err, RS_ENCCL, "transport nccl: rank %d of %d, generation %llu: %s:%d: ncclCommInitRankConfig failed: %s",
			   cfg->rank, cfg->world, (unsigned long long)cfg->generation, __FILE__, __LINE__,
			   ncclGetErrorString(r));
		if (t->cr->comm) {
			ncclResult_t ar = ncclCommAbort(t->cr->comm);
			if (ar != ncclSuccess)
				RS_WARN("ncclCommAbort: %s", ncclGetErrorString(ar));
		}
		nccl_destroy(&t->base);
		return RS_ENCCL;
	}
	t->cr->dead = 0;
	rs_status st = wait_comm(t, "joining the communicator", rs_now_ms() + t->base.timeout_ms);
	if (st != RS_OK) {
		rs_err_set(err, st, "%s (generation %llu)", t->base.error, (unsigned long long)cfg->generation);
		nccl_destroy(&t->base);
		return st;
	}
	*out = &t->base;
	return RS_OK;
}

rs_status rs_nccl_transport_bootstrap(rs_transport *boot, int device, uint64_t generation, int timeout_ms,
				      rs_transport **out, rs_err *err)
{
	rs_nccl_config c = {.rank = boot->rank, .world = boot->world, .device = device, .generation = generation,
			    .timeout_ms = timeout_ms};
	*out = NULL;
	if (boot->rank == 0) {
		RSCHECK(rs_nccl_unique_id(&c.id, err));
		rs_xfer *to = calloc((size_t)boot->world, sizeof(*to));
		if (!to)
			return rs_err_set(err, RS_ENOMEM, "transport nccl: out of memory");
		for (int32_t r = 1; r < boot->world; r++)
			to[r - 1] = (rs_xfer){r, &c.id, sizeof(c.id), NULL};
		rs_status st = rs_transport_exchange(boot, to, boot->world - 1, NULL, 0);
		free(to);
		if (st != RS_OK)
			return rs_err_set(err, st, "transport nccl: handing out the unique id: %s", rs_transport_error(boot));
	} else {
		rs_xfer from = {0, &c.id, sizeof(c.id), NULL};
		rs_status st = rs_transport_exchange(boot, NULL, 0, &from, 1);
		if (st != RS_OK)
			return rs_err_set(err, st, "transport nccl: receiving the unique id: %s", rs_transport_error(boot));
	}
	RSCHECK(rs_nccl_transport_create(&c, out, err));
	((nccl *)*out)->boot = boot;
	return RS_OK;
}

rs_status rs_nccl_transport_split(rs_transport *base, int32_t n, rs_transport **out)
{
	nccl *parent = (nccl *)base, *t = NULL;
	ncclComm_t child = NULL;
	*out = NULL;
	if (n < 1 || n > base->world)
		return RS_EINVAL;
	RSCHECK(usable(parent));
	if (parent->view)
		return RS_EUNSUPPORTED;
	int in = base->rank < n;
	ncclConfig_t c = nonblocking_config();
	NCCLCHECK(parent, ncclCommSplit(parent->cr->comm, in ? 0 : NCCL_SPLIT_NOCOLOR, base->rank, &child, &c));
	/* the parent's async state covers the split; the child's its own set-up */
	RSCHECK(wait_comm(parent, "split", rs_now_ms() + parent->base.timeout_ms));
	if (!in)
		return RS_OK;
	rs_err err = {{0}};
	rs_status st = wrap(base->rank, n, parent->device, NULL, parent->base.timeout_ms, &t, &err);
	if (st == RS_OK && !(t->cr = calloc(1, sizeof(*t->cr))))
		st = RS_ENOMEM;
	if (st != RS_OK) {
		if (t)
			nccl_destroy(&t->base);
		if (child && ncclCommAbort(child) != ncclSuccess)
			RS_WARN("ncclCommAbort of a split child failed");
		return fail(parent, st, "transport nccl: split: %s", err.msg[0] ? err.msg : rs_status_str(st));
	}
	t->cr->comm = child;
	t->cr->refs = 1;
	if ((st = wait_comm(t, "split (child set-up)", rs_now_ms() + t->base.timeout_ms)) != RS_OK) {
		fail(parent, st, "transport nccl: split: %s", t->base.error);
		nccl_destroy(&t->base);
		return st;
	}
	*out = &t->base;
	return RS_OK;
}
