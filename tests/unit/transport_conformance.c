/*
 * transport_conformance.c - see transport_conformance.h. Data is a pure
 * function of (sender, receiver, size, round), so each rank knows what it
 * must receive without asking.
 */
#include "tests/unit/transport_conformance.h"
#include "common/crc32c.h"
#include "common/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "conformance rank %d: ", t->rank); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, " (%s)\n", rs_transport_error(t)); \
			failures++;                                        \
		}                                                          \
	} while (0)

static unsigned char pattern(int32_t src, int32_t dst, size_t size, size_t k)
{
	return (unsigned char)(k * 31 + (size_t)src * 7 + (size_t)dst * 13 + size);
}

static int point_to_point(rs_transport *t)
{
	int failures = 0;
	int32_t w = t->world, me = t->rank;
	size_t sizes[] = {0, 1, 4096, (size_t)8 << 20};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		unsigned char *sb = malloc(n * (size_t)w + 1), *rb = malloc(n * (size_t)w + 1);
		rs_xfer *x = malloc(sizeof(rs_xfer) * 2 * (size_t)w);
		for (int32_t p = 0; p < w; p++) {
			for (size_t k = 0; k < n; k++)
				sb[(size_t)p * n + k] = pattern(me, p, n, k);
			/* receives posted in reverse peer order: order across peers must not matter */
			x[p] = (rs_xfer){p, sb + (size_t)p * n, n, NULL};
			x[w + (w - 1 - p)] = (rs_xfer){p, rb + (size_t)p * n, n, NULL};
		}
		rs_status st = rs_transport_exchange(t, x, w, x + w, w);
		CHECK(st == RS_OK, "exchange of %zu bytes with every peer: %s", n, rs_status_str(st));
		for (int32_t p = 0; st == RS_OK && p < w; p++)
			for (size_t k = 0; k < n; k++)
				if (rb[(size_t)p * n + k] != pattern(p, me, n, k)) {
					CHECK(0, "byte %zu of %zu from rank %d is wrong", k, n, p);
					break;
				}
		free(x);
		free(rb);
		free(sb);
	}
	/* several messages to one peer arrive in posting order */
	if (w > 1) {
		int32_t to = (me + 1) % w, from = (me + w - 1) % w;
		uint32_t s[3] = {(uint32_t)me, (uint32_t)me + 100, (uint32_t)me + 200}, r[3] = {0};
		rs_xfer sx[3] = {{to, &s[0], 4, NULL}, {to, &s[1], 4, NULL}, {to, &s[2], 4, NULL}};
		rs_xfer rx[3] = {{from, &r[0], 4, NULL}, {from, &r[1], 4, NULL}, {from, &r[2], 4, NULL}};
		rs_status st = rs_transport_exchange(t, sx, 3, rx, 3);
		CHECK(st == RS_OK && r[0] == (uint32_t)from && r[1] == (uint32_t)from + 100 && r[2] == (uint32_t)from + 200,
		      "ordered messages from rank %d: got %u %u %u", from, r[0], r[1], r[2]);
	}
	return failures;
}

/*
 * Checksummed messages (rs_xfer.crc): to every peer and to self, two blocks
 * hashed in passing (one longer than a piece of any backend, one short),
 * then the sender's sum as a message of its own, as a reshard's chunks go.
 * Each end's sum is the CRC-32C of the bytes, extended from where it was.
 */
static int checksummed(rs_transport *t)
{
	int failures = 0;
	int32_t w = t->world, me = t->rank;
	size_t big = ((size_t)3 << 20) + 5, len = big + 7, nw = (size_t)w;
	unsigned char *sb = malloc(len * nw), *rb = malloc(len * nw);
	uint32_t *ssum = malloc(4 * nw), *rsum = malloc(4 * nw), *rgot = malloc(4 * nw);
	rs_xfer *x = malloc(sizeof(rs_xfer) * 6 * nw);
	if (!sb || !rb || !ssum || !rsum || !rgot || !x) {
		CHECK(0, "out of memory");
		goto out;
	}
	for (int32_t p = 0; p < w; p++) {
		size_t o = (size_t)p * len;
		for (size_t k = 0; k < len; k++)
			sb[o + k] = pattern(me, p, len, k);
		ssum[p] = 0x1234u; /* extended, not reset */
		rsum[p] = 0x1234u;
		x[3 * p] = (rs_xfer){p, sb + o, big, &ssum[p]};
		x[3 * p + 1] = (rs_xfer){p, sb + o + big, len - big, &ssum[p]};
		x[3 * p + 2] = (rs_xfer){p, &ssum[p], 4, NULL};
		x[3 * nw + 3 * p] = (rs_xfer){p, rb + o, big, &rsum[p]};
		x[3 * nw + 3 * p + 1] = (rs_xfer){p, rb + o + big, len - big, &rsum[p]};
		x[3 * nw + 3 * p + 2] = (rs_xfer){p, &rgot[p], 4, NULL};
	}
	rs_status st = rs_transport_exchange(t, x, 3 * w, x + 3 * nw, 3 * w);
	CHECK(st == RS_OK, "checksummed exchange with every peer: %s", rs_status_str(st));
	for (int32_t p = 0; st == RS_OK && p < w; p++) {
		unsigned char *want = malloc(len);
		if (!want) {
			CHECK(0, "out of memory");
			break;
		}
		for (size_t k = 0; k < len; k++)
			want[k] = pattern(p, me, len, k);
		uint32_t sum = rs_crc32c(0x1234u, want, len);
		CHECK(!memcmp(rb + (size_t)p * len, want, len), "checksummed bytes from rank %d are wrong", p);
		CHECK(rsum[p] == sum, "the sum of what rank %d sent: %08x, not %08x", p, rsum[p], sum);
		CHECK(rgot[p] == sum, "the sum rank %d sent after its bytes: %08x, not %08x", p, rgot[p], sum);
		CHECK(ssum[p] == rs_crc32c(0x1234u, sb + (size_t)p * len, len), "the sum of what went to rank %d", p);
		free(want);
	}
	/* again with the test hook armed: one message lands with a bit flipped before it is hashed, and only its sum
	 * disagrees with the one that came after it */
	for (int32_t p = 0; p < w; p++)
		ssum[p] = rsum[p] = 0x1234u;
	rs_transport_damage_for_tests = 1;
	st = rs_transport_exchange(t, x, 3 * w, x + 3 * nw, 3 * w);
	CHECK(st == RS_OK, "checksummed exchange, damaged: %s", rs_status_str(st));
	CHECK(rs_transport_damage_for_tests == 0, "the damage hook was not used");
	rs_transport_damage_for_tests = 0;
	int bad = 0, wrong_bytes = 0;
	for (int32_t p = 0; st == RS_OK && p < w; p++) {
		bad += rsum[p] != rgot[p];
		for (size_t k = 0; k < len; k++)
			wrong_bytes += rb[(size_t)p * len + k] != pattern(p, me, len, k);
	}
	CHECK(st != RS_OK || (bad == 1 && wrong_bytes == 1), "damaged: %d sums disagree, %d bytes wrong (1 and 1 expected)",
	      bad, wrong_bytes);
out:
	free(x);
	free(rgot);
	free(rsum);
	free(ssum);
	free(rb);
	free(sb);
	return failures;
}

static size_t count_of(int32_t src, int32_t dst, int round)
{
	uint64_t h = rs_mix64((uint64_t)src * 1000003 + (uint64_t)dst * 1009 + (uint64_t)round);
	return h % 4 == 0 ? 0 : (size_t)(h >> 8) % 200000;
}

static int all_to_all(rs_transport *t)
{
	int failures = 0;
	int32_t w = t->world, me = t->rank;
	for (int round = 0; round < 4; round++) {
		size_t *sc = malloc(sizeof(size_t) * (size_t)w), *rc = malloc(sizeof(size_t) * (size_t)w);
		size_t *got = malloc(sizeof(size_t) * (size_t)w), st_total = 0, rt_total = 0;
		for (int32_t p = 0; p < w; p++) {
			sc[p] = count_of(me, p, round);
			rc[p] = count_of(p, me, round);
			st_total += sc[p];
			rt_total += rc[p];
		}
		rs_status st = rs_transport_alltoall_counts(t, sc, got);
		CHECK(st == RS_OK && !memcmp(got, rc, sizeof(size_t) * (size_t)w), "count exchange, round %d", round);
		unsigned char *sb = malloc(st_total + 1), *rb = malloc(rt_total + 1);
		size_t o = 0;
		for (int32_t p = 0; p < w; p++)
			for (size_t k = 0; k < sc[p]; k++)
				sb[o++] = pattern(me, p, sc[p], k);
		st = rs_transport_alltoallv(t, sb, sc, rb, rc);
		CHECK(st == RS_OK, "alltoallv round %d: %s", round, rs_status_str(st));
		o = 0;
		for (int32_t p = 0; st == RS_OK && p < w; p++) {
			for (size_t k = 0; k < rc[p]; k++)
				if (rb[o + k] != pattern(p, me, rc[p], k)) {
					CHECK(0, "alltoallv round %d: byte %zu from rank %d is wrong", round, k, p);
					break;
				}
			o += rc[p];
		}
		free(rb);
		free(sb);
		free(got);
		free(rc);
		free(sc);
	}
	return failures;
}

static float input_of(int32_t rank, size_t i)
{
	uint64_t h = rs_mix64((uint64_t)rank << 40 ^ i);
	/* magnitudes from 1e-3 to 1e3, both signs: sums depend on the order */
	return (float)((double)(h % 2000001) / 1000.0 - 1000.0) * ((h >> 40) % 3 == 0 ? 1e-3f : 1.0f);
}

static int all_reduce(rs_transport *t)
{
	int failures = 0;
	size_t sizes[] = {1, 7, 1000, 1 << 20, (3 << 20) + 5}; /* the last in pieces of unequal length */
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		float *buf = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
		for (size_t i = 0; i < n; i++) {
			buf[i] = input_of(t->rank, i);
			float sum = input_of(0, i);
			for (int32_t r = 1; r < t->world; r++)
				sum += input_of(r, i);
			want[i] = sum;
		}
		rs_status st = rs_transport_allreduce_sum(t, buf, n);
		CHECK(st == RS_OK && !memcmp(buf, want, sizeof(float) * n),
		      "allreduce of %zu floats is not the rank-order sum", n);
		free(want);
		free(buf);
	}
	for (int rep = 0; rep < 1000; rep++) {
		float v[3] = {(float)t->rank, 1.0f, (float)rep};
		rs_status st = rs_transport_allreduce_sum(t, v, 3);
		float w = (float)t->world;
		if (st != RS_OK || v[0] != w * (w - 1) / 2 || v[1] != w || v[2] != w * (float)rep) {
			CHECK(0, "small allreduce %d", rep);
			break;
		}
	}
	/* int64 sums wrap and are exact: a large value and small ones from every rank */
	int64_t q[4] = {INT64_MAX / 4, -(int64_t)t->rank, (int64_t)1 << 40, 3}, qw[4];
	rs_status qs = rs_transport_allreduce_i64(t, q, 4);
	qw[0] = (int64_t)((uint64_t)(INT64_MAX / 4) * (uint64_t)t->world);
	qw[1] = -(int64_t)t->world * (t->world - 1) / 2;
	qw[2] = ((int64_t)1 << 40) * t->world;
	qw[3] = 3 * (int64_t)t->world;
	CHECK(qs == RS_OK && !memcmp(q, qw, sizeof(q)), "allreduce of int64s is not the exact sum");
	/* all-gather: every rank's bytes, in rank order */
	int32_t mine[2] = {t->rank, 7 * t->rank + 1}, *all = malloc(sizeof(mine) * (size_t)t->world);
	rs_status gs = rs_transport_allgather(t, mine, sizeof(mine), all);
	int gathered = gs == RS_OK;
	for (int32_t r = 0; gathered && r < t->world; r++)
		gathered = all[2 * r] == r && all[2 * r + 1] == 7 * r + 1;
	CHECK(gathered, "allgather does not give every rank's bytes in rank order");
	free(all);
	for (int rep = 0; rep < 10; rep++)
		CHECK(rs_transport_barrier(t) == RS_OK, "barrier %d", rep);
	return failures;
}

/* The bound on waits reads back as set, and a call under a longer one still completes. */
static int timeout(rs_transport *t)
{
	int failures = 0, was = rs_transport_timeout(t, 0);
	CHECK(was > 0, "the transport's timeout reads %d ms", was);
	CHECK(rs_transport_timeout(t, was + 1234) == was, "setting the timeout does not return the one before");
	CHECK(rs_transport_timeout(t, 0) == was + 1234, "the timeout set does not read back");
	CHECK(rs_transport_barrier(t) == RS_OK, "barrier under a longer timeout");
	rs_transport_timeout(t, was);
	CHECK(rs_transport_timeout(t, 0) == was, "the timeout does not go back");
	return failures;
}

int rs_transport_conformance(rs_transport *t)
{
	return point_to_point(t) + checksummed(t) + all_to_all(t) + all_reduce(t) + timeout(t);
}
