/*
 * alloc_fail.c - see alloc_fail.h. Linked only into test_alloc_* binaries
 * (with the --wrap flags); never into the product.
 */
#include "tests/unit/alloc/alloc_fail.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_vasprintf(char **out, const char *fmt, va_list ap);

static long count, fail_at;
static int failed, failed_in_jansson, in_jansson;

void rs_alloc_fail_reset(void) { rs_alloc_fail_at(0); }

void rs_alloc_fail_at(long n)
{
	count = 0;
	fail_at = n;
	failed = failed_in_jansson = 0;
}

long rs_alloc_count(void) { return count; }
int rs_alloc_failed(void) { return failed; }
int rs_alloc_failed_in_jansson(void) { return failed_in_jansson; }

/* Count one allocation; 1 when it is the one to fail. */
static int fail_now(void)
{
	if (++count == fail_at) {
		failed = 1;
		failed_in_jansson = in_jansson;
		return 1;
	}
	return 0;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fail_now() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
	return fail_now() ? 12 /* ENOMEM */ : __real_posix_memalign(p, align, n);
}

void *__wrap_aligned_alloc(size_t align, size_t n) { return fail_now() ? NULL : __real_aligned_alloc(align, n); }

char *__wrap_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = fail_now() ? NULL : __real_malloc(n);
	return d ? memcpy(d, s, n) : NULL;
}

char *__wrap_strndup(const char *s, size_t max)
{
	size_t n = strnlen(s, max);
	char *d = fail_now() ? NULL : __real_malloc(n + 1);
	if (d) {
		memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

int __wrap_vasprintf(char **out, const char *fmt, va_list ap)
{
	if (fail_now()) {
		*out = NULL;
		return -1;
	}
	return __real_vasprintf(out, fmt, ap);
}

int __wrap_asprintf(char **out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = __wrap_vasprintf(out, fmt, ap);
	va_end(ap);
	return n;
}

static void *json_alloc(size_t n)
{
	in_jansson = 1;
	void *p = __wrap_malloc(n);
	in_jansson = 0;
	return p;
}

__attribute__((constructor)) static void route_jansson(void) { json_set_alloc_funcs(json_alloc, free); }
