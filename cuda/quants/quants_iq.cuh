// bloomery CUDA library: the grid quant types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
// IQ1_M as the card reads them: the GGUF codebooks (ffi/cpu/iq_grids.h, the CPU's data) as device
// tables; dequantization units in quants.cuh's form (qt<T>: a unit is a group of 32 elements, the
// values bit for bit the CPU's bl_to_float_*: the same float operations in the same order, no
// contraction); and one-token products on int8 activations in dot8.cuh's form (d8<T>: a group's
// signed weights as bytes, dp4a against the x8 row, the scales applied once a group; IQ1's points
// shifted by +-1/8 as the exact integers 8 * grid +- 1 with d / 8).
// In CU_TYPE_CASES (quants.cuh includes this file): every model kernel that reads a type through
// qt<T> reads these on f32 activations; their int8 dots (d8<T>, dot8_iq.cuh) serve the test entry
// point (cuda/conformance/test_iq.cu, bl_cuda_test_matmul path 3) only, not the one-token kernels yet.
#pragma once
#include "quants.cuh"
#include "../ffi/cpu/iq_grids.h"

__host__ __device__ constexpr bool cu_iq_type(int t) {
  return t == T_IQ2_XXS || t == T_IQ2_XS || t == T_IQ2_S || t == T_IQ3_XXS || t == T_IQ3_S || t == T_IQ1_S || t == T_IQ1_M;
}
// block bytes of a grid type (256 elements a block), 0 for other types
__host__ __device__ constexpr int cu_iq_bytes(int t) {
  return t == T_IQ2_XXS ? 66 : t == T_IQ2_XS ? 74 : t == T_IQ2_S ? 82 : t == T_IQ3_XXS ? 98 : t == T_IQ3_S ? 110 : t == T_IQ1_S ? 50 : t == T_IQ1_M ? 56 : 0;
}

// entry i's element j in byte j (unsigned levels; IQ1's signed bytes -1, 0, 1): iq_grids.h's entry
// codes expanded by constexpr functions (its C macros' nested conditionals trip the host
// compiler's tautological-compare warnings in a CUDA translation unit)
__host__ __device__ constexpr uint64_t iq_grid8(uint32_t code, int a, int b, int c) {
  uint64_t v = 0;
  for (int j = 0; j < 8; j++) {
    const uint32_t k = (code >> (2 * j)) & 3u;
    v |= (uint64_t)(uint8_t)(k == 0 ? a : k == 1 ? b : c) << (8 * j);
  }
  return v;
}
__host__ __device__ constexpr uint32_t iq_grid4(uint32_t code, int l0, int step, int l7) {
  uint32_t v = 0;
  for (int j = 0; j < 4; j++) {
    const uint32_t k = (code >> (4 * j)) & 15u;
    v |= (uint32_t)(k == 7 ? l7 : l0 + step * (int)k) << (8 * j);
  }
  return v;
}
#define CU_IQ2_ENTRY(code) iq_grid8(code, 8, 25, 43),
#define CU_IQ1_ENTRY(code) iq_grid8(code, -1, 0, 1),
#define CU_IQ3XXS_ENTRY(code) iq_grid4(code, 4, 8, 62),  // levels 4 + 8k, 62 for k = 7 (BL_IQ3XXS_LEVEL)
#define CU_IQ3S_ENTRY(code) iq_grid4(code, 1, 2, 15),    // levels 1 + 2k (BL_IQ3S_LEVEL)
static __device__ const uint64_t cu_iq2xxs_grid[256] = {BL_IQ2XXS_GRID(CU_IQ2_ENTRY)};
static __device__ const uint64_t cu_iq2xs_grid[512] = {BL_IQ2XS_GRID(CU_IQ2_ENTRY)};
static __device__ const uint64_t cu_iq2s_grid[1024] = {BL_IQ2S_GRID(CU_IQ2_ENTRY)};
static __device__ const uint32_t cu_iq3xxs_grid[256] = {BL_IQ3XXS_GRID(CU_IQ3XXS_ENTRY)};
static __device__ const uint32_t cu_iq3s_grid[512] = {BL_IQ3S_GRID(CU_IQ3S_ENTRY)};
static __device__ const uint64_t cu_iq1s_grid[2048] = {BL_IQ1S_GRID(CU_IQ1_ENTRY)};

// The eighth sign of a 7-bit sign index: the count of negatives is even (the gguf ksigns table).
__device__ __forceinline__ uint32_t iq_signs7(uint32_t s7) { return s7 | ((uint32_t)(__popc(s7) & 1) << 7); }
// 4 sign bits as byte masks (0xff where set): bit k to byte k by one multiply (no carries), then x 255
__device__ __forceinline__ uint32_t iq_mask4(uint32_t s4) { return ((s4 * 0x00204081u) & 0x01010101u) * 0xffu; }
// 4 unsigned magnitudes (bytes) negated where the mask bytes are set: (g ^ m) - m per byte
__device__ __forceinline__ int iq_signed4(uint32_t g4, uint32_t s4) {
  const uint32_t m = iq_mask4(s4 & 15u);
  return (int)__vsub4(g4 ^ m, m);
}
// 4 signed bytes v in {-1, 0, 1} as 8v + delta (delta4: 0x01010101 or 0xffffffff), exact in a byte
__device__ __forceinline__ int iq1_w4(uint32_t v4, uint32_t delta4) { return (int)__vadd4((v4 << 3) & 0xf8f8f8f8u, delta4); }

// Four dequantized elements: db * grid byte * sign (the CPU's put8), bytes 4h.. of the point
__device__ __forceinline__ float iq_y(float db, uint32_t g, uint32_t neg) {
  return __fmul_rn(__fmul_rn(db, (float)g), neg ? -1.0f : 1.0f);
}
template <class F>
__device__ __forceinline__ void iq_put8(F &f, int pos, float db, uint64_t grid, uint32_t signs) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const uint32_t g = (uint32_t)(grid >> (32 * h)), s = signs >> (4 * h);
    f(pos + 4 * h, iq_y(db, g & 255u, s & 1u), iq_y(db, (g >> 8) & 255u, s & 2u), iq_y(db, (g >> 16) & 255u, s & 4u), iq_y(db, g >> 24, s & 8u));
  }
}
// IQ1: dl * (grid + delta), grid a signed byte
__device__ __forceinline__ float iq1_y(float dl, uint32_t g, float delta) { return __fmul_rn(dl, __fadd_rn((float)(int)(int8_t)(uint8_t)g, delta)); }
template <class F>
__device__ __forceinline__ void iq1_put8(F &f, int pos, float dl, uint64_t grid, float delta) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const uint32_t g = (uint32_t)(grid >> (32 * h));
    f(pos + 4 * h, iq1_y(dl, g & 255u, delta), iq1_y(dl, (g >> 8) & 255u, delta), iq1_y(dl, (g >> 16) & 255u, delta), iq1_y(dl, g >> 24, delta));
  }
}
// (0.5 + s) * factor: the scale of the dequantizers of IQ2 (factor 0.25) and IQ3_XXS (0.5)
__device__ __forceinline__ float iq_db(float d, uint32_t s, float factor) { return __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, (float)s)), factor); }

// ---- dequantization: unit u = group u of 32 elements ----
// IQ2_XXS: group g: qs bytes 8g..8g+3 grid indices, bytes 8g+4.. a word of 4 sign indices and the scale
template <>
struct qt<T_IQ2_XXS> {
  static constexpr int BE = 256, BB = 66, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int g, F &&f) {
    const float d = h2f(ld16(b));
    const uint8_t *q = b + 2 + 8 * g;
    const uint32_t w = ld32a2(q + 4);
    const float db = iq_db(d, w >> 28, 0.25f);
#pragma unroll
    for (int l = 0; l < 4; l++) iq_put8(f, 32 * g + 8 * l, db, cu_iq2xxs_grid[q[l]], iq_signs7((w >> (7 * l)) & 127u));
  }
};
// IQ2_XS: point k = 4g + l: a 16-bit word, 9-bit grid index | sign index << 9; scales[g] nibbles per 16
template <>
struct qt<T_IQ2_XS> {
  static constexpr int BE = 256, BB = 74, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int g, F &&f) {
    const float d = h2f(ld16(b));
    const uint32_t sc = b[66 + g];
    const float db0 = iq_db(d, sc & 15u, 0.25f), db1 = iq_db(d, sc >> 4, 0.25f);
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint32_t q = ld16(b + 2 + 2 * (4 * g + l));
      iq_put8(f, 32 * g + 8 * l, l < 2 ? db0 : db1, cu_iq2xs_grid[q & 511u], iq_signs7(q >> 9));
    }
  }
};
// IQ2_S: point k = 4g + l: index qs[k] | ((qh[g] >> 2l) & 3) << 8, sign bits signs[k]; scales as IQ2_XS
template <>
struct qt<T_IQ2_S> {
  static constexpr int BE = 256, BB = 82, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int g, F &&f) {
    const float d = h2f(ld16(b));
    const uint32_t sc = b[74 + g], qh = b[66 + g];
    const float db0 = iq_db(d, sc & 15u, 0.25f), db1 = iq_db(d, sc >> 4, 0.25f);
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint32_t ix = (uint32_t)b[2 + 4 * g + l] | (((qh >> (2 * l)) & 3u) << 8);
      iq_put8(f, 32 * g + 8 * l, l < 2 ? db0 : db1, cu_iq2s_grid[ix], b[34 + 4 * g + l]);
    }
  }
};
// IQ3_XXS: group g: qs bytes 8g..8g+7 the indices of 8 points of 4; word g of sas (at 66): sign indices, scale
template <>
struct qt<T_IQ3_XXS> {
  static constexpr int BE = 256, BB = 98, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int g, F &&f) {
    const float d = h2f(ld16(b));
    const uint32_t w = ld32a2(b + 66 + 4 * g);
    const float db = iq_db(d, w >> 28, 0.5f);
    const uint8_t *q = b + 2 + 8 * g;
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint64_t p = (uint64_t)cu_iq3xxs_grid[q[2 * l]] | ((uint64_t)cu_iq3xxs_grid[q[2 * l + 1]] << 32);
      iq_put8(f, 32 * g + 8 * l, db, p, iq_signs7((w >> (7 * l)) & 127u));
    }
  }
};
// IQ3_S: group g: point k (of 4) index qs[8g + k] | ((qh[g] >> k) & 1) << 8; signs[4g + l] per 8;
// scale: nibble g % 2 of scales[g / 2]; y = d * (2s + 1) * grid * sign
template <>
struct qt<T_IQ3_S> {
  static constexpr int BE = 256, BB = 110, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int g, F &&f) {
    const float d = h2f(ld16(b));
    const uint32_t qh = b[66 + g], s = ((uint32_t)b[106 + g / 2] >> (4 * (g % 2))) & 15u;
    const float db = __fmul_rn(d, (float)(1u + 2u * s));
    const uint8_t *q = b + 2 + 8 * g;
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const int k = 2 * l;
      const uint32_t i0 = (uint32_t)q[k] | (((qh >> k) & 1u) << 8), i1 = (uint32_t)q[k + 1] | (((qh >> (k + 1)) & 1u) << 8);
      iq_put8(f, 32 * g + 8 * l, db, (uint64_t)cu_iq3s_grid[i0] | ((uint64_t)cu_iq3s_grid[i1] << 32), b[74 + 4 * g + l]);
    }
  }
};
// IQ1_S: group g: qh word g (at 34): 4 x 3 high index bits, bits 12-14 the scale, bit 15 the shift's sign
template <>
struct qt<T_IQ1_S> {
  static constexpr int BE = 256, BB = 50, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int g, F &&f) {
    const float d = h2f(ld16(b));
    const uint32_t qh = ld16(b + 34 + 2 * g);
    const float dl = __fmul_rn(d, (float)(2u * ((qh >> 12) & 7u) + 1u)), delta = qh & 0x8000u ? -0.125f : 0.125f;
#pragma unroll
    for (int l = 0; l < 4; l++) iq1_put8(f, 32 * g + 8 * l, dl, cu_iq1s_grid[(uint32_t)b[2 + 4 * g + l] | (((qh >> (3 * l)) & 7u) << 8)], delta);
  }
};
// IQ1_M: point l of group g: nibble l % 2 of qh[2g + l / 2] (at 32): 3 high index bits, the shift's
// sign; 3-bit scales per 16 in the four words at 48, the f16 d in their top nibbles
__device__ __forceinline__ float iq1m_d(const uint8_t *b) {
  const uint32_t s0 = ld16(b + 48), s1 = ld16(b + 50), s2 = ld16(b + 52), s3 = ld16(b + 54);
  return h2f((uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0u) | ((s2 >> 4) & 0x0f00u) | (s3 & 0xf000u)));
}
template <>
struct qt<T_IQ1_M> {
  static constexpr int BE = 256, BB = 56, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int g, F &&f) {
    const float d = iq1m_d(b);
    const uint32_t sw = ld16(b + 48 + 2 * (g / 2)) >> (6 * (g % 2));
    const float dl0 = __fmul_rn(d, (float)(2u * (sw & 7u) + 1u)), dl1 = __fmul_rn(d, (float)(2u * ((sw >> 3) & 7u) + 1u));
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint32_t h = ((uint32_t)b[32 + 2 * g + l / 2] >> (4 * (l % 2))) & 15u;
      iq1_put8(f, 32 * g + 8 * l, l < 2 ? dl0 : dl1, cu_iq1s_grid[(uint32_t)b[4 * g + l] | ((h & 7u) << 8)], h & 8u ? -0.125f : 0.125f);
    }
  }
};

// The grid types as values for a generic lambda (quants.cuh's type_tag), for the test entry points.
#define CU_IQ_TYPE_CASES(X) X(T_IQ2_XXS) X(T_IQ2_XS) X(T_IQ2_S) X(T_IQ3_XXS) X(T_IQ3_S) X(T_IQ1_S) X(T_IQ1_M)
template <class B>
__host__ __forceinline__ bool dispatch_iq_type(int type, B &&body) {
  switch (type) {
#define CU_IQ_CASE(T) \
  case T: body(type_tag<T>{}); return true;
    CU_IQ_TYPE_CASES(CU_IQ_CASE)
#undef CU_IQ_CASE
    default: return false;
  }
}
