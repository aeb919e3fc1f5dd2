/*
 * transport.c - collectives on top of a backend's grouped exchange (see
 * transport.h). A backend with native collectives (NCCL) can still use these:
 * they are correct for any exchange that meets the interface.
 */
#include "worker/transport.h"

#include <stdlib.h>
#include <string.h>

int rs_transport_damage_for_tests;

rs_status rs_transport_alltoallv(rs_transport *t, const void *sendbuf, const size_t *send_counts, void *recvbuf,
				 const size_t *recv_counts)
{
	int32_t w = t->world;
	rs_xfer *x = malloc(sizeof(rs_xfer) * 2 * (size_t)w);
	size_t so = 0, ro = 0;
	if (!x)
		return RS_ENOMEM;
	for (int32_t p = 0; p < w; p++) {
		x[p] = (rs_xfer){p, (char *)sendbuf + so, send_counts[p], NULL};
		x[w + p] = (rs_xfer){p, (char *)recvbuf + ro, recv_counts[p], NULL};
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

/* How an all-reduce adds n elements of another rank's copy into the sum. */
typedef void (*add_fn)(void *sum, const void *part, size_t n);

static void add_f32(void *sum, const void *part, size_t n)
{
	float *restrict s = sum;
	const float *restrict p = part;
	for (size_t i = 0; i < n; i++)
		s[i] += p[i];
}

static void add_i64(void *sum, const void *part, size_t n)
{
	/* wrapping, as unsigned: a sum the caller keeps in range is exact whatever the order */
	uint64_t *restrict s = sum;
	const uint64_t *restrict p = part;
	for (size_t i = 0; i < n; i++)
		s[i] += p[i];
}

/*
 * The sum of w copies of a chunk of n elements, in rank order, into mine
 * (in place): copy p is at part(p), mine among them. Of two ranks, each
 * adds the other's into its own in one pass (a + b is b + a exactly).
 * Of more, block by block through a buffer the cache keeps, so that each
 * copy is read once and mine written once.
 */
static void sum_in_rank_order(char *mine, const char *parts, size_t len, int32_t w, int32_t me, size_t n, size_t size,
			      add_fn add)
{
	if (w == 2) {
		add(mine, parts, n);
		return;
	}
	enum { BLOCK = 4096 };
	_Alignas(64) char acc[BLOCK];
	size_t per = BLOCK / size;
	for (size_t o = 0; o < n; o += per) {
		size_t k = n - o < per ? n - o : per;
		for (int32_t p = 0; p < w; p++) {
			/* every copy in rank order: mine where it is, the others' as received */
			const char *src = p == me ? mine : parts + len * (size_t)(p < me ? p : p - 1);
			if (p == 0)
				memcpy(acc, src + o * size, k * size);
			else
				add(acc, src + o * size, k);
		}
		memcpy(mine + o * size, acc, k * size);
	}
}

/*
 * The reduce-scatter goes piece by piece: each chunk is cut into the same
 * number of pieces on every rank (from n and the world alone), and the
 * others' copies of a piece are added as soon as they are received, while
 * they are still in the cache (2 MiB from each other rank), instead of a
 * whole chunk landing in memory to be read back. Pieces of 2 MiB: 16 MiB
 * on 2 ranks over loopback TCP went from 2.5-2.8 to 2.7-3.0 GB/s here (1
 * and 4 MiB between the two; 64 and 256 KiB slower: an exchange each).
 */
#define PIECE_BYTES ((size_t)2 << 20)

/* In-place sum of n elements of `size` bytes over all ranks, in rank order (see rs_transport_allreduce_sum). */
static rs_status allreduce(rs_transport *t, void *buf, size_t n, size_t size, add_fn add)
{
	int32_t w = t->world, me = t->rank;
	char *b = buf;
	size_t lo, hi;
	if (w <= 1 || n == 0)
		return w <= 1 ? RS_OK : rs_transport_barrier(t);
	chunk(n, w, me, &lo, &hi);
	/* pieces per chunk: the same on every rank, each at most about a piece's bytes */
	size_t per = (n + (size_t)w - 1) / (size_t)w, pmax = PIECE_BYTES / size;
	int32_t np = (int32_t)((per + pmax - 1) / pmax);
	size_t plen = ((hi - lo + (size_t)np - 1) / (size_t)np + 1) * size;
	char *parts = malloc(plen * (size_t)(w - 1) + 1);
	rs_xfer *x = malloc(sizeof(rs_xfer) * 2 * (size_t)w);
	rs_status st = RS_ENOMEM;
	if (!parts || !x)
		goto out;
	/* reduce-scatter: the others' copies of each piece of my chunk (mine stays where it is), summed in rank order */
	for (int32_t k = 0; k < np; k++) {
		size_t mlo, mhi;
		chunk(hi - lo, np, k, &mlo, &mhi);
		size_t len = (mhi - mlo) * size;
		for (int32_t p = 0; p < w; p++) {
			size_t plo, phi, qlo, qhi;
			chunk(n, w, p, &plo, &phi);
			chunk(phi - plo, np, k, &qlo, &qhi);
			x[p] = (rs_xfer){p, b + (plo + qlo) * size, p == me ? 0 : (qhi - qlo) * size, NULL};
			x[w + p] = (rs_xfer){p, p == me ? parts : parts + len * (size_t)(p < me ? p : p - 1), p == me ? 0 : len, NULL};
		}
		RSCHECKGOTO(rs_transport_exchange(t, x, w, x + w, w), st, out);
		sum_in_rank_order(b + (lo + mlo) * size, parts, len, w, me, mhi - mlo, size, add);
	}
	/* all-gather the reduced chunks */
	size_t len = (hi - lo) * size;
	for (int32_t p = 0; p < w; p++) {
		size_t plo, phi;
		chunk(n, w, p, &plo, &phi);
		x[p] = (rs_xfer){p, b + lo * size, len, NULL};
		x[w + p] = (rs_xfer){p, b + plo * size, (phi - plo) * size, NULL};
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

rs_status rs_transport_allreduce_sum(rs_transport *t, float *buf, size_t n)
{
	return allreduce(t, buf, n, sizeof(float), add_f32);
}

rs_status rs_transport_allreduce_i64(rs_transport *t, int64_t *buf, size_t n)
{
	return allreduce(t, buf, n, sizeof(int64_t), add_i64);
}

rs_status rs_transport_allgather(rs_transport *t, const void *mine, size_t len, void *all)
{
	int32_t w = t->world;
	char *rep = malloc(len * (size_t)w + 1);
	size_t *counts = malloc(sizeof(size_t) * (size_t)w);
	rs_status st = RS_ENOMEM;
	if (rep && counts) {
		for (int32_t p = 0; p < w; p++) {
			memcpy(rep + len * (size_t)p, mine, len);
			counts[p] = len;
		}
		st = rs_transport_alltoallv(t, rep, counts, all, counts);
	}
	free(counts);
	free(rep);
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
			x[p] = (rs_xfer){p, bytes + p, 1, NULL};
			x[w + p] = (rs_xfer){p, bytes + w + p, 1, NULL};
		}
		st = rs_transport_exchange(t, x, w, x + w, w);
	}
	free(x);
	free(bytes);
	return st;
}
