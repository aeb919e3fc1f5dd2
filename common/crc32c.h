/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum on every serialized ZCH
 * bucket and every migrated move: the SSE4.2 crc32 instruction where the CPU
 * has it, software slicing-by-8 otherwise (the polynomial of iSCSI and ext4).
 */
#ifndef RS_CRC32C_H
#define RS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extend crc (0 for a fresh checksum) over len bytes. crc32c("123456789") == 0xE3069283. */
uint32_t rs_crc32c(uint32_t crc, const void *data, size_t len);

/* The software path alone (for tests, and CPUs without SSE4.2). */
uint32_t rs_crc32c_portable(uint32_t crc, const void *data, size_t len);

#endif
