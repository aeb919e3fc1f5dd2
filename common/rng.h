/*
 * rng.h - deterministic random numbers: a splitmix64 stream seeded from any
 * tuple of integers (so a value can be a pure function of, say, a seed and
 * a global sample index, whatever the world size), and a Zipf sampler over
 * [0, n) for skewed IDs.
 */
#ifndef RS_RNG_H
#define RS_RNG_H

#include <stdint.h>

typedef struct rs_rng {
	uint64_t state;
} rs_rng;

/* splitmix64's output function: a strong 64-bit mixer. */
static inline uint64_t rs_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* A stream for the tuple (a, b, c): different tuples give unrelated streams. */
static inline rs_rng rs_rng_make(uint64_t a, uint64_t b, uint64_t c)
{
	rs_rng r = {rs_mix64(a + 0x9E3779B97F4A7C15ull) ^ rs_mix64(b + 0x632BE59BD9B4E019ull) ^
		    rs_mix64(c + 0x85157AF5ull)};
	return r;
}

static inline uint64_t rs_rng_u64(rs_rng *r)
{
	r->state += 0x9E3779B97F4A7C15ull;
	return rs_mix64(r->state);
}

/* Uniform in [0, 1). */
static inline double rs_rng_uniform(rs_rng *r)
{
	return (double)(rs_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Zipf(alpha) over ranks [0, n): P(k) proportional to 1 / (k + 1)^alpha. */
typedef struct rs_zipf {
	double n, alpha, h_x1, h_n, s;
} rs_zipf;

/* alpha > 0, alpha != 1 handled by the same formulas as alpha == 1. n >= 1. */
void rs_zipf_init(rs_zipf *z, uint64_t n, double alpha);

/* One sample (rejection-inversion, Hormann and Derflinger 1996: exact, O(1), no tables). */
uint64_t rs_zipf_sample(const rs_zipf *z, rs_rng *r);

#endif
