/*
 * clock.h - the monotonic clock, for deadlines and durations (never the
 * wall clock: it jumps).
 */
#ifndef RS_CLOCK_H
#define RS_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* Seconds since an arbitrary fixed point. */
static inline double rs_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds since the same point. */
static inline int64_t rs_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep for s seconds (whole, even when signals interrupt). */
static inline void rs_sleep(double s)
{
	struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
	while (s > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

#endif
