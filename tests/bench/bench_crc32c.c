/*
 * bench_crc32c.c - CRC-32C, the checksum on every migrated chunk and every
 * checkpoint file, on this CPU's fastest path (rs_crc32c) beside its other
 * paths, in the same run:
 *   - crc32c_memory: 256 MiB from memory, beside this machine's memory read
 *     bandwidth (a pass adding up the same bytes) measured in the same run;
 *   - crc32c_in_cache: 1 MiB pieces read again while they are in cache, as
 *     the transport hashes a chunk while it moves (rs_xfer.crc), beside the
 *     SSE4.2 path, which is what CPUs without VPCLMULQDQ take.
 * Wrong results (the paths disagree) fail the benchmark.
 */
#include "common/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BIG ((size_t)256 << 20)
#define PIECE ((size_t)1 << 20)
#define REPS 5

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile uint64_t sink;

/* GB/s of the best of REPS passes adding up the buffer's 64-bit words (the compiler vectorizes it). */
static double read_gbs(const unsigned char *buf)
{
	double best = 0;
	for (int r = 0; r < REPS; r++) {
		const uint64_t *w = (const uint64_t *)(const void *)buf;
		uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
		double t0 = now();
		for (size_t i = 0; i < BIG / 8; i += 4)
			s0 += w[i], s1 += w[i + 1], s2 += w[i + 2], s3 += w[i + 3];
		double gbs = (double)BIG / (now() - t0) / 1e9;
		sink += s0 ^ s1 ^ s2 ^ s3;
		best = gbs > best ? gbs : best;
	}
	return best;
}

/* GB/s of the best of REPS passes of `path` over the buffer: whole (in_cache 0), or each piece twice, timing the second. */
static double crc_gbs(const char *path, const unsigned char *buf, int in_cache, uint32_t *crc)
{
	double best = 0;
	for (int r = 0; r < REPS; r++) {
		uint32_t c = 0;
		double t = 0;
		if (!in_cache) {
			double t0 = now();
			if (!rs_crc32c_by(path, 0, buf, BIG, &c))
				return -1;
			t = now() - t0;
		}
		for (size_t o = 0; in_cache && o < BIG; o += PIECE) {
			uint32_t warm;
			if (!rs_crc32c_by(path, 0, buf + o, PIECE, &warm)) /* brings the piece in */
				return -1;
			double t0 = now();
			rs_crc32c_by(path, c, buf + o, PIECE, &c);
			t += now() - t0;
		}
		*crc = c;
		best = (double)BIG / t / 1e9 > best ? (double)BIG / t / 1e9 : best;
	}
	return best;
}

int main(void)
{
	unsigned char *buf = malloc(BIG);
	if (!buf) {
		fprintf(stderr, "bench crc32c: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < BIG; i++)
		buf[i] = (unsigned char)((i * 2654435761u) >> 13);
	const char *path = rs_crc32c_impl();
	uint32_t whole, pieces, sse, whole_sse;
	double mem = read_gbs(buf), fast = crc_gbs(path, buf, 0, &whole), hot = crc_gbs(path, buf, 1, &pieces);
	double hot_sse = crc_gbs("sse4.2", buf, 1, &sse), mem_sse = crc_gbs("sse4.2", buf, 0, &whole_sse);
	int wrong = whole != pieces || (hot_sse > 0 && (sse != whole || whole_sse != whole));
	printf("bench crc32c_memory: %.1f GB/s over 256 MiB (%s) | memory read %.1f GB/s | ratio %.2f", fast, path, mem,
	       fast / mem);
	if (mem_sse > 0)
		printf(" | sse4.2 %.1f GB/s (%.2fx)", mem_sse, fast / mem_sse);
	printf("\n");
	if (hot_sse > 0)
		printf("bench crc32c_in_cache: %.1f GB/s in 1 MiB pieces (%s) | sse4.2 %.1f GB/s | %.2fx\n", hot, path,
		       hot_sse, hot / hot_sse);
	else
		printf("bench crc32c_in_cache: %.1f GB/s in 1 MiB pieces (%s) | no SSE4.2 on this CPU to compare\n", hot,
		       path);
	if (wrong)
		printf("bench crc32c: WRONG: the paths disagree (%08x %08x %08x %08x)\n", whole, pieces, sse, whole_sse);
	free(buf);
	return wrong;
}
