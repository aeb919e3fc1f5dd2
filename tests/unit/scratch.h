/*
 * scratch.h - a scratch folder per unit test binary: made in setup,
 * removed with everything in it in teardown.
 */
#ifndef RS_TEST_SCRATCH_H
#define RS_TEST_SCRATCH_H

#include <stddef.h>

/* Make /tmp/rs-test-NAME-PID (mode 0700) and put its path in dir (n bytes). 0, or -1 with errno. */
int rs_scratch_make(char *dir, size_t n, const char *name);

/* Remove dir and everything under it. 0, or -1. */
int rs_scratch_remove(const char *dir);

#endif
