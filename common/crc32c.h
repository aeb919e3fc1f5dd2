/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum on every serialized ZCH
 * bucket, every migrated move and every checkpoint file: folding with
 * AVX-512 carry-less multiplies where the CPU has them, the SSE4.2 crc32
 * instruction where it has that, software slicing-by-8 otherwise (the
 * polynomial of iSCSI and ext4).
 */
#ifndef RS_CRC32C_H
#define RS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extend crc (0 for a fresh checksum) over len bytes. crc32c("123456789") == 0xE3069283. */
uint32_t rs_crc32c(uint32_t crc, const void *data, size_t len);

/* The software path alone (for tests, and CPUs without SSE4.2). */
uint32_t rs_crc32c_portable(uint32_t crc, const void *data, size_t len);

/* The path rs_crc32c takes for long buffers on this CPU: "vpclmulqdq", "sse4.2" or "portable". */
const char *rs_crc32c_impl(void);

/*
 * The same as rs_crc32c through one path named as rs_crc32c_impl names them
 * (for tests and benchmarks): 1 with the CRC in *out, or 0 where this CPU
 * lacks that path (or there is none of that name).
 */
int rs_crc32c_by(const char *path, uint32_t crc, const void *data, size_t len, uint32_t *out);

#endif
