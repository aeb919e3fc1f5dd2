/*
 * zch_hash.h - the ZCH hash (see kernels/zch.h), one definition for the
 * CPU table (zch.c) and the CUDA one (cuda/zch.cu), which must place every
 * ID alike: splitmix64's finalizer over the salted ID.
 */
#ifndef RS_ZCH_HASH_H
#define RS_ZCH_HASH_H

#include <stdint.h>

#ifdef __CUDACC__
#define RS_ZCH_HD __host__ __device__
#else
#define RS_ZCH_HD
#endif

#define HASH_SALT 0x9E3779B97F4A7C15ull

RS_ZCH_HD static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	x ^= x >> 31;
	return x;
}

RS_ZCH_HD static inline uint64_t hash_id(uint64_t id) { return mix64(id ^ HASH_SALT); }

#endif
