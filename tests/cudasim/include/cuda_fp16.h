/*
 * cuda_fp16.h - the CUDA simulator's half type and the conversions the
 * kernels use (tests/cudasim): IEEE binary16, conversions from float round
 * to nearest even as __float2half_rn does on a GPU (a NaN becomes CUDA's
 * canonical 0x7fff), to float exactly. Written from the IEEE definition,
 * not from kernels/embedding_cpu.c, so that the tests compare two
 * implementations.
 */
#ifndef CUDASIM_CUDA_FP16_H
#define CUDASIM_CUDA_FP16_H

#include "cuda_runtime.h"

#ifdef __cplusplus

struct __half {
	unsigned short __x;
};
typedef __half half;

inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }

inline float __half2float(__half h)
{
	unsigned int sign = (unsigned int)(h.__x & 0x8000u) << 16, e = (h.__x >> 10) & 0x1fu, m = h.__x & 0x3ffu;
	if (e == 0x1f) /* infinity or NaN */
		return __uint_as_float(sign | 0x7f800000u | (m << 13));
	float mag = e ? __builtin_ldexpf((float)(m | 0x400u), (int)e - 25) /* 1.m * 2^(e-15) */
		      : __builtin_ldexpf((float)m, -24);                    /* subnormal: m * 2^-24 */
	return __uint_as_float(__float_as_uint(mag) | sign);
}

inline __half __float2half_rn(float f)
{
	unsigned int x = __float_as_uint(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
	if (a > 0x7f800000u)
		return __half{0x7fff};
	if (a == 0x7f800000u)
		return __half{(unsigned short)(sign | 0x7c00u)};
	int e = (int)(a >> 23) - 127;                     /* float exponent (normal inputs) */
	if (a < 0x00800000u || e < -26)                   /* below a quarter of the smallest subnormal half */
		return __half{(unsigned short)sign};
	if (e > 15)
		return __half{(unsigned short)(sign | 0x7c00u)};
	unsigned int m = (a & 0x7fffffu) | 0x800000u;     /* value = m * 2^(e - 23) */
	int q = e >= -14 ? e - 10 : -24;                  /* exponent of the half's last place */
	int shift = q - (e - 23);                         /* 13 for normal halves, 14..25 for subnormals */
	unsigned int r = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
	if (rem > halfway || (rem == halfway && (r & 1u)))
		r++;
	unsigned int bits = e >= -14 ? ((unsigned int)(e + 15) << 10) + r - 0x400u : r; /* a carry moves the exponent */
	return __half{(unsigned short)(sign | bits)};
}

inline __half __float2half(float f) { return __float2half_rn(f); }

#endif /* __cplusplus */

#endif
