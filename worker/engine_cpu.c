/*
 * engine_cpu.c - the CPU engine (see engine.h): anonymous pages, the
 * kernels of kernels/embedding_cpu.c.
 */
#include "worker/engine.h"
#include "common/log.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * Shard memory of 2 MiB or more starts on a 2 MiB boundary, in huge pages
 * where the kernel has them: a lookup reads random rows of gigabytes, and a
 * reshard faults in and gives back whole shards.
 */
#define HUGE_PAGE ((size_t)2 << 20)

static void *cpu_alloc(rs_engine *e, size_t len, rs_err *err)
{
	(void)e;
	/* anonymous pages: zero, and taken from the system only when first touched */
	size_t extra = len >= HUGE_PAGE ? HUGE_PAGE : 0; /* room to start on a huge page */
	char *p = mmap(NULL, (len ? len : 1) + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		rs_err_set(err, RS_ENOMEM, "shard memory: mmap of %zu bytes: %s", len, strerror(errno));
		return NULL;
	}
	if (!extra)
		return p;
	/* the pages before the first boundary, and those after the shard's last page, go back (cpu_free unmaps the rest) */
	size_t page = (size_t)sysconf(_SC_PAGESIZE), mapped = (len + extra + page - 1) / page * page;
	size_t head = (HUGE_PAGE - (uintptr_t)p % HUGE_PAGE) % HUGE_PAGE, end = head + (len + page - 1) / page * page;
	if (head && munmap(p, head) != 0)
		RS_WARN("shard memory: unmapping %zu bytes before a huge page: %s", head, strerror(errno));
	if (mapped > end && munmap(p + end, mapped - end) != 0)
		RS_WARN("shard memory: unmapping %zu bytes after it: %s", mapped - end, strerror(errno));
	p += head; /* a failure above leaves address space mapped, no memory */
	(void)madvise(p, len, MADV_HUGEPAGE); /* advice; small pages work */
	return p;
}

static void cpu_free(rs_engine *e, void *p, size_t len)
{
	(void)e;
	if (p && munmap(p, len ? len : 1) != 0)
		RS_WARN("munmap of %zu bytes: %s", len, strerror(errno));
}

static void cpu_release(rs_engine *e, void *p, size_t len)
{
	(void)e;
	/* whole pages only: the rest of a page may still be in use */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)p + page - 1) / page * page, hi = ((uintptr_t)p + len) / page * page;
	if (hi > lo && madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0)
		RS_WARN("madvise of %zu bytes: %s", (size_t)(hi - lo), strerror(errno));
}

static void cpu_prefetch(rs_engine *e, void *p, size_t len, int to_host)
{
	(void)e;
	if (!to_host || !len)
		return;
	/* fault the pages in at once rather than one at a time inside a copy or a recv */
#ifdef MADV_POPULATE_WRITE
	if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
		return;
#endif
	/* older kernels: touch every page, writing back what it holds */
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t o = 0; o < len; o += page) {
		volatile char *c = (volatile char *)p + o;
		*c = *c;
	}
}

static rs_status cpu_forward(rs_engine *e, const rs_emb_shard *s, const int32_t *offsets, int32_t nbags,
			     const int64_t *ids, rs_pooling pooling, float *out, int64_t out_stride, rs_err *err)
{
	(void)e;
	rs_status st = rs_emb_forward(s, offsets, nbags, ids, pooling, out, out_stride);
	if (st != RS_OK)
		rs_err_set(err, st, "embedding forward: an id outside the shard's %lld rows", (long long)s->nrows);
	return st;
}

static rs_status cpu_backward(rs_engine *e, rs_emb_shard *s, rs_emb_workspace *ws, rs_emb_grad *g,
			      const int32_t *offsets, int32_t nbags, const int64_t *ids, rs_pooling pooling,
			      const float *grad_out, int64_t grad_stride, const rs_optimizer_config *opt, int64_t step,
			      rs_err *err)
{
	(void)e;
	rs_status st = rs_emb_backward(s, ws, g, offsets, nbags, ids, pooling, grad_out, grad_stride, opt, step);
	if (st != RS_OK)
		rs_err_set(err, st, "embedding backward: %s", rs_status_str(st));
	return st;
}

static rs_status cpu_apply(rs_engine *e, rs_emb_shard *s, const rs_emb_grad *g, const rs_optimizer_config *opt,
			   int64_t step, rs_err *err)
{
	(void)e;
	(void)err;
	rs_emb_apply(s, g, opt, step);
	return RS_OK;
}

static void cpu_destroy(rs_engine *e) { (void)e; }

static const rs_engine_ops cpu_ops = {
	.alloc = cpu_alloc,
	.free = cpu_free,
	.release = cpu_release,
	.prefetch = cpu_prefetch,
	.forward = cpu_forward,
	.backward = cpu_backward,
	.apply = cpu_apply,
	.destroy = cpu_destroy,
};

static rs_engine cpu_engine = {.ops = &cpu_ops, .name = "cpu"};

rs_engine *rs_engine_cpu(void) { return &cpu_engine; }
