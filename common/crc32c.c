/*
 * crc32c.c - see crc32c.h. The SSE4.2 instruction where the CPU has it;
 * otherwise slicing-by-8 tables, built once, on first use, thread-safely.
 */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

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
/* The SSE4.2 crc32 instruction computes CRC-32C eight bytes at a time. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const unsigned char *p, size_t len)
{
	uint64_t c = ~crc & 0xffffffffu;
	while (len && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		len--;
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
#endif

uint32_t rs_crc32c(uint32_t crc, const void *data, size_t len)
{
#if defined(__x86_64__)
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
