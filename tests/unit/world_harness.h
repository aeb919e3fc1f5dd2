/*
 * world_harness.h - runs a world of ranks as forked processes on loopback
 * for the multi-process tests: pre-binds one listening port per rank,
 * connects each rank's TCP transport, runs a body per rank, and collects
 * the exit codes. A rank still running after a generous guard is a hang:
 * every rank is killed and the test fails.
 */
#ifndef RS_WORLD_HARNESS_H
#define RS_WORLD_HARNESS_H

#include "worker/transport.h"

#define MAXW 8
#define GUARD_SECONDS 120

typedef int (*rank_body)(int32_t rank, rs_transport *t, rs_status create_st, const char *create_msg);

typedef struct world {
	int32_t n;
	int timeout_ms;
	int32_t absent;          /* a rank that never starts, or -1 */
	int32_t bad_token;       /* a rank presenting another token, or -1 */
	int32_t bad_generation;  /* a rank from another generation, or -1 */
	int32_t reap_last;       /* a rank expected to hang: killed once the others are done, or -1 */
	rank_body body;
	int exit_code[MAXW];     /* exit status, or minus the signal that killed the rank */
} world;

/* Seconds on the monotonic clock. */
double world_now(void);

/* Run w->body in each of w->n forked ranks and fill w->exit_code. */
void world_run(world *w);

#endif
