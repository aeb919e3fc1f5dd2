/*
 * fuzz_zch_bucket.c - libFuzzer target for the ZCH bucket loader
 * (kernels/zch.c): arbitrary bytes received as a migrated or checkpointed
 * bucket are loaded or rejected, never crash, and a rejected buffer leaves
 * the table and the rows untouched. Each input is tried as is and with its
 * trailing CRC-32C recomputed, so that the checks behind the checksum are
 * explored too. Geometry: 4 buckets x 4 slots, 8-byte rows.
 */
#include "common/crc32c.h"
#include "kernels/zch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void try_load(const uint8_t *data, size_t size)
{
	rs_zch_config cfg = {.buckets = 4, .slots = 16, .eviction = RS_EVICT_LRU, .lfu_decay_steps = 10};
	rs_zch_table *z;
	rs_err err = {0};
	unsigned char rows[4 * 8];
	uint32_t bucket;

	if (rs_zch_create(&cfg, &z, &err) != RS_OK)
		abort();
	memset(rows, 0xAB, sizeof(rows));
	if (rs_zch_bucket_load(z, data, size, rows, 8, &bucket, &err) == RS_OK) {
		if (!rs_zch_owns(z, bucket))
			abort();
		/* a loaded bucket must serve lookups of every ID it holds */
		for (int64_t s = (int64_t)bucket * 4; s < (int64_t)bucket * 4 + 4; s++) {
			int live;
			uint64_t id = rs_zch_slot_id(z, s, &live);
			int64_t got;
			if (live && (rs_zch_find(z, &id, 1, &got) != RS_OK || got != s))
				abort();
		}
	} else {
		if (rs_zch_owned(z) != 0 || !err.msg[0])
			abort();
		for (size_t i = 0; i < sizeof(rows); i++)
			if (rows[i] != 0xAB)
				abort();
	}
	rs_zch_destroy(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	try_load(data, size);
	if (size >= 4) {
		uint8_t *fixed = malloc(size);
		if (!fixed)
			return 0;
		memcpy(fixed, data, size);
		uint32_t crc = rs_crc32c(0, fixed, size - 4);
		memcpy(fixed + size - 4, &crc, 4);
		try_load(fixed, size);
		free(fixed);
	}
	return 0;
}
