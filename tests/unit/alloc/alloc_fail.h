/*
 * alloc_fail.h - allocation-failure injection for the torture tests
 * (tests/unit/test_alloc_*.c), in the manner of curl's torture mode: run
 * an operation with its N-th allocation failing, for N = 1, 2, ... until
 * it completes without reaching N; every run must fail cleanly (an error
 * status, never success), never crash, and leak nothing under ASan.
 *
 * The Makefile links test_alloc_* binaries with -Wl,--wrap for malloc,
 * calloc, realloc, strdup, strndup, asprintf, vasprintf, posix_memalign and
 * aligned_alloc, so every allocation our code (the static library and the
 * test) makes comes through here; jansson's allocations are routed here
 * too (json_set_alloc_funcs). Allocations inside other shared libraries
 * (libc's own, libwebsockets, curl) are not counted.
 */
#ifndef RS_ALLOC_FAIL_H
#define RS_ALLOC_FAIL_H

/* Count allocations from zero and fail none. */
void rs_alloc_fail_reset(void);

/* Fail the n-th allocation from now (1-based), and only that one; 0: none. */
void rs_alloc_fail_at(long n);

/* Allocations made since the last reset or rs_alloc_fail_at. */
long rs_alloc_count(void);

/* 1 when the planned failure happened since rs_alloc_fail_at. */
int rs_alloc_failed(void);

/*
 * 1 when that failed allocation was jansson's own (json_set_alloc_funcs):
 * jansson absorbs some of those (e.g. its bookkeeping for JSON_STRICT)
 * and still gives a correct result, so a caller may then succeed.
 */
int rs_alloc_failed_in_jansson(void);

#endif
