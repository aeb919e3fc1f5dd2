/*
 * test_later.c - tests the commit's freeing (worker/later.c): a span given
 * back in slices a step apart loses exactly the whole pages inside it, as
 * one call would, and the bytes beside it are kept; nothing goes back
 * before the owner's first step, a slice or two after it (a malloc'd
 * array too, before it is freed); a block
 * unmapped in slices is unmapped whole; a list done at once (a trainer
 * destroyed uncommitted) does every job; and waiting for the thread ends
 * its pacing, so that it never waits for steps that will not come. Also
 * the CPU engine's shard memory on huge-page boundaries, trimmed whole.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "worker/train_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* len bytes of fresh memory, every page touched with a byte of its own. */
static unsigned char *touched(size_t len)
{
	unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	for (size_t o = 0; o < len; o++)
		p[o] = (unsigned char)(o / page_size() * 7 + 1);
	return p;
}

/* Resident pages of [p, p + len) (page-aligned), or -1 when any of it is not mapped. */
static long resident(const void *p, size_t len)
{
	size_t n = len / page_size();
	unsigned char *vec = malloc(n);
	assert_non_null(vec);
	long r = 0;
	if (mincore((void *)p, len, vec) != 0)
		r = -1;
	for (size_t i = 0; r >= 0 && i < n; i++)
		r += vec[i] & 1;
	free(vec);
	return r;
}

/* A trainer for the list to belong to: only its `later` is used. */
static rs_trainer *owner(void)
{
	rs_trainer *tr = calloc(1, sizeof(rs_trainer));
	assert_non_null(tr);
	return tr;
}

/* Span [p + 100, p + len - 100) of 3.5 slices, given back over steps: the inner pages go, the edges stay whole. */
static void test_release_in_slices(void **state)
{
	(void)state;
	size_t pg = page_size(), len = 3 * RS__LATER_SLICE + RS__LATER_SLICE / 2;
	unsigned char *p = touched(len);
	rs_trainer *tr = owner();
	rs__later *l = rs__later_new();
	assert_non_null(l);
	rs__later_release(l, rs_engine_cpu(), p + 100, len - 200);
	rs__later_start(l, tr);
	assert_ptr_equal(tr->later, l);
	for (int k = 0; k < 8; k++) { /* steps: the thread gives a slice back after each */
		rs_sleep(0.005);
		rs__later_stepped(tr);
	}
	rs__later_wait(tr);
	assert_null(tr->later);
	assert_int_equal(resident(p, pg), 1);                 /* its first 100 bytes are still used */
	assert_int_equal(resident(p + len - pg, pg), 1);      /* its last 100 too */
	assert_int_equal(resident(p + pg, len - 2 * pg), 0);  /* every page in between went back */
	for (size_t o = 0; o < 100; o++) {
		assert_int_equal(p[o], (unsigned char)1);
		assert_int_equal(p[len - 1 - o], (unsigned char)((len - 1 - o) / pg * 7 + 1));
	}
	assert_int_equal(p[RS__LATER_SLICE], 0); /* given back: zeros when touched again */
	assert_int_equal(munmap(p, len), 0);
	free(tr);
}

/*
 * [p, p + len) (whole pages, listed on tr's started list) stays resident
 * until tr's first step; the pages still resident once the thread's first
 * slice after it is done (10 s at most).
 */
static long after_first_step(rs_trainer *tr, const void *p, size_t len)
{
	long all = (long)(len / page_size()), now = all;
	rs_sleep(0.05);
	assert_int_equal(resident(p, len), all); /* no step yet: nothing given back */
	rs__later_stepped(tr);
	for (int k = 0; k < 1000 && now == all; k++) {
		rs_sleep(0.01);
		now = resident(p, len);
	}
	rs_sleep(0.05); /* the slice's last part */
	return resident(p, len);
}

/* Nothing goes back before the owner's first step since the commit, a slice or two after it, the rest once it waits. */
static void test_paced_by_steps(void **state)
{
	(void)state;
	size_t pg = page_size(), len = 4 * RS__LATER_SLICE, all = len / pg;
	unsigned char *p = touched(len);
	rs_trainer *tr = owner();
	rs__later *l = rs__later_new();
	assert_non_null(l);
	rs__later_release(l, rs_engine_cpu(), p, len);
	rs__later_start(l, tr);
	long now = after_first_step(tr, p, len);
	/* the first part runs to a 64 MiB boundary, then a whole slice: between one and two slices */
	assert_true(now < (long)all);
	assert_true(now >= (long)(all - 2 * RS__LATER_SLICE / pg));
	double t0 = rs_now();
	rs__later_wait(tr); /* the rest at once: not a minute a slice */
	assert_true(rs_now() - t0 < 30);
	assert_int_equal(resident(p, len), 0);
	assert_int_equal(munmap(p, len), 0);
	free(tr);
}

/* A malloc'd array of 3 slices: given back a slice or two after the first step, before it is freed. */
static void test_array_in_slices(void **state)
{
	(void)state;
	size_t pg = page_size(), len = 3 * RS__LATER_SLICE;
	unsigned char *a = malloc(len);
	assert_non_null(a);
	memset(a, 3, len);
	unsigned char *lo = (unsigned char *)(((uintptr_t)a + pg - 1) / pg * pg); /* its whole pages */
	size_t span = ((uintptr_t)(a + len) - (uintptr_t)lo) / pg * pg, all = span / pg;
	rs_trainer *tr = owner();
	rs__later *l = rs__later_new();
	assert_non_null(l);
	rs__later_free(l, a);
	rs__later_start(l, tr);
	long now = after_first_step(tr, lo, span); /* still allocated (a minute to the next slice): part of it given back */
	assert_true(now < (long)all && now >= (long)(all - 2 * RS__LATER_SLICE / pg));
	rs__later_wait(tr); /* the rest, and the free (ASan and valgrind see it freed, once) */
	free(tr);
}

/* A block of 2.5 slices whose last reference goes: unmapped, all of it, with no step ever made. */
static void test_unmap_in_slices(void **state)
{
	(void)state;
	size_t len = 2 * RS__LATER_SLICE + RS__LATER_SLICE / 2;
	rs__mem *m = rs__mem_new(rs_engine_cpu(), len);
	assert_non_null(m);
	memset(m->base, 1, len);
	void *base = m->base;
	rs_trainer *tr = owner();
	rs__later *l = rs__later_new();
	assert_non_null(l);
	rs__later_mem_unref(l, m); /* its last reference: listed */
	assert_int_equal(resident(base, len), (long)(len / page_size()));
	rs__later_start(l, tr);
	double t0 = rs_now();
	rs__later_wait(tr); /* no step: the wait itself ends the pacing (not 3 slices of a minute) */
	assert_true(rs_now() - t0 < 30);
	assert_int_equal(resident(base, len), -1);
	free(tr);
}

/* A list never started (its trainer destroyed uncommitted): every job done at once. */
static void test_now(void **state)
{
	(void)state;
	size_t len = RS__LATER_SLICE + RS__LATER_SLICE / 4;
	unsigned char *p = touched(len);
	rs__later *l = rs__later_new();
	assert_non_null(l);
	rs__later_release(l, rs_engine_cpu(), p, len);
	rs__later_free(l, malloc(1 << 20)); /* ASan and valgrind see it freed */
	rs__later_now(l);
	assert_int_equal(resident(p, len), 0);
	assert_int_equal(munmap(p, len), 0);
	rs__later_now(NULL); /* out of memory for a list: nothing to do */
}

/*
 * The CPU engine's shard memory (worker/engine_cpu.c): 2 MiB or more starts
 * on a 2 MiB boundary, with nothing of the slack it was cut from left
 * mapped after its last page, whatever its length; freed, none of it stays.
 */
static void test_cpu_alloc_trims(void **state)
{
	(void)state;
	rs_engine *e = rs_engine_cpu();
	size_t pg = page_size(), lens[] = {((size_t)2 << 20) + 100, 3000000, (size_t)4 << 20, 1000, (size_t)1 << 20};
	unsigned char v;
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		rs_err err = {0};
		size_t len = lens[k], end = (len + pg - 1) / pg * pg;
		unsigned char *p = e->ops->alloc(e, len, &err);
		assert_non_null(p);
		if (len >= (size_t)2 << 20)
			assert_int_equal((uintptr_t)p % ((size_t)2 << 20), 0);
		memset(p, 7, len);
		assert_int_equal(resident(p, end), (long)(end / pg));
		if (len >= (size_t)2 << 20) /* the slack after it went back: its next page is not mapped */
			assert_int_equal(mincore(p + end, pg, &v), -1);
		e->ops->free(e, p, len);
		assert_int_equal(mincore(p, pg, &v), -1);
	}
}

int main(void)
{
	rs__later_wait_s = 60; /* without steps, a minute a slice: only the steps and the owner's wait move the thread */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpu_alloc_trims),
		cmocka_unit_test(test_release_in_slices),
		cmocka_unit_test(test_paced_by_steps),
		cmocka_unit_test(test_array_in_slices),
		cmocka_unit_test(test_unmap_in_slices),
		cmocka_unit_test(test_now),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
