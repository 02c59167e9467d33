// bloomery tests: a host stand-in for cuda/common.cuh, so that the card's block readers
// (cuda/quants/quants.cuh, dot8.cuh, quants_iq.cuh) compile with g++ and run on the CPU
// (test/cuda-iq-host.test.ts): the CUDA keywords as plain inline functions, the vector types, and
// the intrinsics those headers use with their documented semantics (byte permutes, SIMD-in-a-word
// byte sums, dp4a, IEEE f16 and round-to-nearest float steps). A header that starts using another
// intrinsic needs it added here.
#pragma once
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <immintrin.h>
#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __align__(n) alignas(n)
struct int4 { int x, y, z, w; };
struct uint4 { uint32_t x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct float4 { float x, y, z, w; };
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct __half { uint16_t x; };
inline __half __ushort_as_half(uint16_t h) { return {h}; }
inline float __half2float(__half h) { return _cvtsh_ss(h.x); }
inline float __int_as_float(int v) { float f; memcpy(&f, &v, 4); return f; }
inline float __uint_as_float(uint32_t v) { float f; memcpy(&f, &v, 4); return f; }
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  uint8_t b[8]; memcpy(b, &x, 4); memcpy(b + 4, &y, 4);
  uint32_t r = 0; for (int i = 0; i < 4; i++) r |= (uint32_t)b[(s >> (4 * i)) & 7] << (8 * i);
  return r;
}
inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, unsigned s) { s &= 31; return s ? (lo >> s) | (hi << (32 - s)) : lo; }
inline int __popc(uint32_t v) { return __builtin_popcount(v); }
inline uint32_t __vsub4(uint32_t a, uint32_t b) { uint32_t r = 0; for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)(((a >> 8 * i) & 255) - ((b >> 8 * i) & 255)) << 8 * i; return r; }
inline uint32_t __vadd4(uint32_t a, uint32_t b) { uint32_t r = 0; for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)(((a >> 8 * i) & 255) + ((b >> 8 * i) & 255)) << 8 * i; return r; }
inline int __dp4a(int a, int b, int c) { for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i); return c; }
// single float steps (built with -ffp-contract=off: no fused multiply-add)
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline int __float2int_rn(float v) { return (int)lrintf(v); }
template <class T> inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
inline void __syncthreads() {}
struct dim3s { unsigned x = 0, y = 0, z = 0; };
static dim3s threadIdx, blockDim, blockIdx, gridDim;
// the type ids: cuda/common.cuh's enum, put here by the test
// @TYPE_IDS@

