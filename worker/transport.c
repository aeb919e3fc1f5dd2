/*
 * transport.c - collectives on top of a backend's grouped exchange (see
 * transport.h). A backend with native collectives (NCCL) can still use these:
 * they are correct for any exchange that meets the interface.
 */
#include "worker/transport.h"

#include <stdlib.h>
#include <string.h>

rs_status rs_transport_alltoallv(rs_transport *t, const void *sendbuf, const size_t *send_counts, void *recvbuf,
				 const size_t *recv_counts)
{
	int32_t w = t->world;
	rs_xfer *x = malloc(sizeof(rs_xfer) * 2 * (size_t)w);
	size_t so = 0, ro = 0;
	if (!x)
		return RS_ENOMEM;
	for (int32_t p = 0; p < w; p++) {
		x[p] = (rs_xfer){p, (char *)sendbuf + so, send_counts[p]};
		x[w + p] = (rs_xfer){p, (char *)recvbuf + ro, recv_counts[p]};
		so += send_counts[p];
		ro += recv_counts[p];
	}
	rs_status st = rs_transport_exchange(t, x, w, x + w, w);
	free(x);
	return st;
}

rs_status rs_transport_alltoall_counts(rs_transport *t, const size_t *send_counts, size_t *recv_counts)
{
	int32_t w = t->world;
	uint64_t *s = calloc(2 * (size_t)w, sizeof(uint64_t));
	size_t *ones = calloc((size_t)w, sizeof(size_t));
	rs_status st = RS_ENOMEM;
	if (s && ones) {
		for (int32_t p = 0; p < w; p++) {
			s[p] = send_counts[p];
			ones[p] = sizeof(uint64_t);
		}
		st = rs_transport_alltoallv(t, s, ones, s + w, ones);
		for (int32_t p = 0; st == RS_OK && p < w; p++)
			recv_counts[p] = (size_t)s[w + p];
	}
	free(ones);
	free(s);
	return st;
}

/* Element range [lo, hi) of chunk c when n elements are cut into w chunks. */
static void chunk(size_t n, int32_t w, int32_t c, size_t *lo, size_t *hi)
{
	*lo = n * (size_t)c / (size_t)w;
	*hi = n * (size_t)(c + 1) / (size_t)w;
}

rs_status rs_transport_allreduce_sum(rs_transport *t, float *buf, size_t n)
{
	int32_t w = t->world, me = t->rank;
	size_t lo, hi;
	if (w == 1 || n == 0)
		return w == 1 ? RS_OK : rs_transport_barrier(t);
	chunk(n, w, me, &lo, &hi);
	/* reduce-scatter: every rank's copy of my chunk, summed in rank order */
	float *parts = malloc(sizeof(float) * ((hi - lo) * (size_t)w + 1));
	rs_xfer *x = malloc(sizeof(rs_xfer) * 2 * (size_t)w);
	rs_status st = RS_ENOMEM;
	if (!parts || !x)
		goto out;
	for (int32_t p = 0; p < w; p++) {
		size_t plo, phi;
		chunk(n, w, p, &plo, &phi);
		x[p] = (rs_xfer){p, buf + plo, (phi - plo) * sizeof(float)};
		x[w + p] = (rs_xfer){p, parts + (hi - lo) * (size_t)p, (hi - lo) * sizeof(float)};
	}
	RSCHECKGOTO(rs_transport_exchange(t, x, w, x + w, w), st, out);
	for (size_t i = 0; i < hi - lo; i++) {
		float sum = parts[i];
		for (int32_t p = 1; p < w; p++)
			sum += parts[(hi - lo) * (size_t)p + i];
		buf[lo + i] = sum;
	}
	/* all-gather the reduced chunks */
	for (int32_t p = 0; p < w; p++) {
		size_t plo, phi;
		chunk(n, w, p, &plo, &phi);
		x[p] = (rs_xfer){p, buf + lo, (hi - lo) * sizeof(float)};
		x[w + p] = (rs_xfer){p, buf + plo, (phi - plo) * sizeof(float)};
	}
	/* my own chunk is already in place: skip the self copy */
	x[me].len = 0;
	x[w + me].len = 0;
	st = rs_transport_exchange(t, x, w, x + w, w);
out:
	free(x);
	free(parts);
	return st;
}

rs_status rs_transport_barrier(rs_transport *t)
{
	int32_t w = t->world;
	unsigned char *bytes = calloc((size_t)w * 2, 1);
	rs_xfer *x = malloc(sizeof(rs_xfer) * 2 * (size_t)w);
	rs_status st = RS_ENOMEM;
	if (bytes && x) {
		for (int32_t p = 0; p < w; p++) {
			x[p] = (rs_xfer){p, bytes + p, 1};
			x[w + p] = (rs_xfer){p, bytes + w + p, 1};
		}
		st = rs_transport_exchange(t, x, w, x + w, w);
	}
	free(x);
	free(bytes);
	return st;
}
