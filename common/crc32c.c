/*
 * crc32c.c - see crc32c.h. Three paths, the fastest the CPU has:
 *
 * - Folding with carry-less multiplies (AVX-512 VPCLMULQDQ), for buffers
 *   of 256 bytes or more. The message is a polynomial over GF(2), and its
 *   CRC depends only on it modulo the CRC polynomial P. A 16-byte block
 *   B = H x^64 + L lying D bits before the block it is folded into counts
 *   there as B x^D, which is replaced by H (x^(64+D) mod P) + L (x^D mod P):
 *   two 64 x 32-bit carry-less products, with no dependence between the
 *   sixteen blocks folded at once. What is left, one block congruent to the message, goes
 *   through the crc32 instruction. The constants are computed at first use
 *   from the polynomial (x^n mod P, below), not copied from elsewhere. In
 *   the bit-reflected order CRC-32C uses, a carry-less product of two
 *   reflected values comes out multiplied by x^33 (x from the reflected
 *   multiply, x^32 from holding a 32-bit constant in a 64-bit half), so
 *   each constant is x^(n-33) mod P. About
 *   2x the crc32 instruction here, from memory or in cache (bench_crc32c).
 * - The SSE4.2 crc32 instruction. It takes three cycles and can start one
 *   per cycle, so one dependent chain uses a third of it: long buffers are
 *   cut into three lanes of LANE bytes summed in parallel, and the lanes'
 *   CRCs are joined by multiplying by x^(8 * LANE) modulo the polynomial
 *   (the CRC register is linear: crc(A || B) = crc(A) * x^(8|B|) + crc(B)
 *   from zero), as zlib's crc32_combine does. About 2.5x faster on long
 *   buffers than one chain.
 * - Slicing-by-8 tables, built once, on first use, thread-safely.
 */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_tables(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int s = 1; s < 8; s++)
			table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xff];
}

#if defined(__x86_64__)
#define POLY 0x82F63B78u /* reflected */
#define LANE 8192

/* a * b modulo the polynomial, both reflected (bit 31 is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, p = 0;
	for (;;) {
		if (a & m) {
			p ^= b;
			if ((a & (m - 1)) == 0)
				break;
		}
		m >>= 1;
		b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
	}
	return p;
}

/* x^n modulo the polynomial (x^(8n) is what appending n zero bytes multiplies a CRC register by). */
static uint32_t xpow(size_t n)
{
	uint32_t sq = 1u << 30, r = 1u << 31; /* x^1 and x^0 */
	for (; n; n >>= 1) {
		if (n & 1)
			r = multmodp(sq, r);
		sq = multmodp(sq, sq);
	}
	return r;
}

static uint32_t shift1, shift2; /* x^(8 LANE), x^(16 LANE) */
/* Folding a block forward by 2048, 512 and 128 bits: its high half's constant, then its low half's (see above). */
static uint64_t fold2048[2], fold512[2], fold128[2];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static void build_shifts(void)
{
	shift1 = xpow(8 * LANE);
	shift2 = xpow(16 * LANE);
	uint64_t *k[] = {fold2048, fold512, fold128};
	size_t d[] = {2048, 512, 128};
	for (int i = 0; i < 3; i++) {
		k[i][0] = xpow(d[i] + 64 - 33);
		k[i][1] = xpow(d[i] - 33);
	}
}

/* The SSE4.2 crc32 instruction computes CRC-32C eight bytes at a time; three chains at once. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = ~crc & 0xffffffffu;
	while (len && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		len--;
	}
	if (len >= 3 * LANE)
		pthread_once(&shift_once, build_shifts);
	for (; len >= 3 * LANE; p += 3 * LANE, len -= 3 * LANE) {
		uint64_t c1 = 0, c2 = 0, v0, v1, v2;
		for (size_t i = 0; i < LANE; i += 8) {
			memcpy(&v0, p + i, 8);
			memcpy(&v1, p + LANE + i, 8);
			memcpy(&v2, p + 2 * LANE + i, 8);
			c = __builtin_ia32_crc32di(c, v0);
			c1 = __builtin_ia32_crc32di(c1, v1);
			c2 = __builtin_ia32_crc32di(c2, v2);
		}
		c = multmodp(shift2, (uint32_t)c) ^ multmodp(shift1, (uint32_t)c1) ^ (uint32_t)c2;
	}
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
	}
	while (len--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

#define FOLD_TARGET "avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"

/* Each 128-bit lane of x folded forward by the distance of k (a fold constant pair in each lane), plus next. */
__attribute__((target(FOLD_TARGET))) static inline __m512i fold512x4(__m512i x, __m512i k, __m512i next)
{
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11),
					 next, 0x96); /* a ^ b ^ c */
}

__attribute__((target(FOLD_TARGET))) static inline __m128i fold1(__m128i x, __m128i k, __m128i next)
{
	return _mm_ternarylogic_epi64(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11), next, 0x96);
}

__attribute__((target(FOLD_TARGET))) static __m512i lanes(const uint64_t k[2])
{
	return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k[1], (long long)k[0]));
}

/* Folding, 256 bytes a round in four registers of four blocks; the rest (under 16 bytes) by crc32c_sse42. */
__attribute__((target(FOLD_TARGET))) static uint32_t crc32c_fold(uint32_t crc, const unsigned char *p, size_t len)
{
	if (len < 256)
		return crc32c_sse42(crc, p, len);
	pthread_once(&shift_once, build_shifts);
	__m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
	__m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
	/* the register goes into the first 4 bytes */
	x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
	p += 256, len -= 256;
	__m512i k = lanes(fold2048);
	for (; len >= 256; p += 256, len -= 256) {
		x0 = fold512x4(x0, k, _mm512_loadu_si512(p));
		x1 = fold512x4(x1, k, _mm512_loadu_si512(p + 64));
		x2 = fold512x4(x2, k, _mm512_loadu_si512(p + 128));
		x3 = fold512x4(x3, k, _mm512_loadu_si512(p + 192));
	}
	k = lanes(fold512);
	x3 = fold512x4(fold512x4(fold512x4(x0, k, x1), k, x2), k, x3);
	__m128i k1 = _mm_set_epi64x((long long)fold128[1], (long long)fold128[0]);
	__m128i x = _mm512_extracti32x4_epi32(x3, 0);
	x = fold1(x, k1, _mm512_extracti32x4_epi32(x3, 1));
	x = fold1(x, k1, _mm512_extracti32x4_epi32(x3, 2));
	x = fold1(x, k1, _mm512_extracti32x4_epi32(x3, 3));
	for (; len >= 16; p += 16, len -= 16)
		x = fold1(x, k1, _mm_loadu_si128((const __m128i *)(const void *)p));
	/* the block left is congruent to the message: its CRC from a zero register is the message's register */
	uint64_t c = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(x));
	c = __builtin_ia32_crc32di(c, (uint64_t)_mm_extract_epi64(x, 1));
	return crc32c_sse42(~(uint32_t)c, p, len);
}

static int have_fold(void)
{
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul") &&
	       __builtin_cpu_supports("sse4.2");
}
#endif

const char *rs_crc32c_impl(void)
{
#if defined(__x86_64__)
	if (have_fold())
		return "vpclmulqdq";
	if (__builtin_cpu_supports("sse4.2"))
		return "sse4.2";
#endif
	return "portable";
}

int rs_crc32c_by(const char *path, uint32_t crc, const void *data, size_t len, uint32_t *out)
{
#if defined(__x86_64__)
	if (!strcmp(path, "vpclmulqdq") && have_fold()) {
		*out = crc32c_fold(crc, data, len);
		return 1;
	}
	if (!strcmp(path, "sse4.2") && __builtin_cpu_supports("sse4.2")) {
		*out = crc32c_sse42(crc, data, len);
		return 1;
	}
#endif
	if (!strcmp(path, "portable")) {
		*out = rs_crc32c_portable(crc, data, len);
		return 1;
	}
	return 0;
}

uint32_t rs_crc32c(uint32_t crc, const void *data, size_t len)
{
#if defined(__x86_64__)
	if (len >= 256 && have_fold())
		return crc32c_fold(crc, data, len);
	if (__builtin_cpu_supports("sse4.2"))
		return crc32c_sse42(crc, data, len);
#endif
	return rs_crc32c_portable(crc, data, len);
}

uint32_t rs_crc32c_portable(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;
	pthread_once(&table_once, build_tables);
	crc = ~crc;
	while (len && ((uintptr_t)p & 7)) {
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
		len--;
	}
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		v ^= crc;
		crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
		      table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^
		      table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}
