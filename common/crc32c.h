/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum on every serialized ZCH
 * bucket and migration chunk. Software slicing-by-8; the same polynomial as
 * iSCSI, ext4 and SSE4.2's crc32 instruction.
 */
#ifndef RS_CRC32C_H
#define RS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extend crc (0 for a fresh checksum) over len bytes. crc32c("123456789") == 0xE3069283. */
uint32_t rs_crc32c(uint32_t crc, const void *data, size_t len);

#endif
