/*
 * rng.c - the Zipf sampler of rng.h: rejection-inversion sampling, as in
 * Hormann and Derflinger, "Rejection-inversion to generate variates from
 * monotone discrete distributions" (1996), the method Apache Commons uses.
 */
#include "common/rng.h"

#include <math.h>

/* (exp(x) - 1) / x and log(1 + x) / x, accurate near 0 */
static double helper1(double x) { return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x * (0.5 - x / 3); }
static double helper2(double x) { return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x * 0.5 * (1 + x / 3); }

/* H(x) = integral of 1/x^alpha: ((x^(1-alpha)) - 1) / (1 - alpha), continuous at alpha = 1 */
static double h(const rs_zipf *z, double x)
{
	double lx = log(x);
	return helper2((1 - z->alpha) * lx) * lx;
}

static double h_inv(const rs_zipf *z, double x)
{
	double t = x * (1 - z->alpha);
	if (t < -1)
		t = -1;
	return exp(helper1(t) * x);
}

void rs_zipf_init(rs_zipf *z, uint64_t n, double alpha)
{
	z->n = (double)(n ? n : 1);
	z->alpha = alpha;
	z->h_x1 = h(z, 1.5) - 1.0;
	z->h_n = h(z, z->n + 0.5);
	z->s = 2 - h_inv(z, h(z, 2.5) - exp(-alpha * log(2.0)));
}

uint64_t rs_zipf_sample(const rs_zipf *z, rs_rng *r)
{
	for (;;) {
		double u = z->h_n + rs_rng_uniform(r) * (z->h_x1 - z->h_n);
		double x = h_inv(z, u);
		double k = floor(x + 0.5);
		if (k < 1)
			k = 1;
		else if (k > z->n)
			k = z->n;
		if (k - x <= z->s || u >= h(z, k + 0.5) - exp(-z->alpha * log(k)))
			return (uint64_t)k - 1;
	}
}
