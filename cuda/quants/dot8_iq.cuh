// bloomery CUDA library: the grid quant types' one-token products on int8 activations in dot8.cuh's
// form (d8<T>: a group's signed weights as bytes, dp4a against the x8 row, the scales applied once a
// group; IQ1's points shifted by +-1/8 as the exact integers 8 * grid +- 1 with d / 8), on
// quants_iq.cuh's tables. dot8.cuh includes this file at its end.
#pragma once
#include "dot8.cuh"
#include "quants_iq.cuh"

// ---- one-token products on int8 activations: unit u = group u of the block = x group g0 + u ----
// A group's 32 activation values (two 16-byte chunks of the x8 row) and their scale.
struct iq_xu {
  int4 x0, x1;
  float d;
};
__device__ __forceinline__ iq_xu iq_xload(int u, const x8v &x, int g0) {
  const int g = g0 + u;
  int st;
  const int4 *xg = x8_chunk_at(x, 2 * g, st);
  return iq_xu{xg[0], xg[st], x.d[g]};
}
// dp4a of 8 weight words (elements 0..31 of the group) with the group's activations, per 16 (the
// scaled sums below can pass i2f's 2^22: converted by the instruction)
__device__ __forceinline__ void iq_dot32(const int (&w)[8], const iq_xu &v, int &s0, int &s1) {
  const int xw[8] = {v.x0.x, v.x0.y, v.x0.z, v.x0.w, v.x1.x, v.x1.y, v.x1.z, v.x1.w};
  s0 = 0;
  s1 = 0;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    s0 = __dp4a(w[i], xw[i], s0);
    s1 = __dp4a(w[i + 4], xw[i + 4], s1);
  }
}
// a point of 8 unsigned magnitudes and its 8 sign bits as two signed weight words
__device__ __forceinline__ void iq_w8(uint64_t grid, uint32_t signs, int *w) {
  w[0] = iq_signed4((uint32_t)grid, signs);
  w[1] = iq_signed4((uint32_t)(grid >> 32), signs >> 4);
}

template <>
struct d8<T_IQ2_XXS> {
  static constexpr bool ok = true;
  static constexpr int UPB = 8;
  using xu = iq_xu;
  __device__ static xu xload(int u, const x8v &x, int g0) { return iq_xload(u, x, g0); }
  __device__ static float dot(const uint8_t *p, int g, const xu &v) {
    const uint8_t *q = p + 2 + 8 * g;
    const uint32_t wd = ld32a2(q + 4);
    int w[8], s0, s1;
#pragma unroll
    for (int l = 0; l < 4; l++) iq_w8(cu_iq2xxs_grid[q[l]], iq_signs7((wd >> (7 * l)) & 127u), w + 2 * l);
    iq_dot32(w, v, s0, s1);
    return 0.125f * h2f(ld16(p)) * v.d * (float)((int)(2u * (wd >> 28) + 1u) * (s0 + s1));
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};
template <>
struct d8<T_IQ2_XS> {
  static constexpr bool ok = true;
  static constexpr int UPB = 8;
  using xu = iq_xu;
  __device__ static xu xload(int u, const x8v &x, int g0) { return iq_xload(u, x, g0); }
  __device__ static float dot(const uint8_t *p, int g, const xu &v) {
    int w[8], s0, s1;
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint32_t q = ld16(p + 2 + 2 * (4 * g + l));
      iq_w8(cu_iq2xs_grid[q & 511u], iq_signs7(q >> 9), w + 2 * l);
    }
    iq_dot32(w, v, s0, s1);
    const int sc = p[66 + g];
    return 0.125f * h2f(ld16(p)) * v.d * (float)((2 * (sc & 15) + 1) * s0 + (2 * (sc >> 4) + 1) * s1);
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};
template <>
struct d8<T_IQ2_S> {
  static constexpr bool ok = true;
  static constexpr int UPB = 8;
  using xu = iq_xu;
  __device__ static xu xload(int u, const x8v &x, int g0) { return iq_xload(u, x, g0); }
  __device__ static float dot(const uint8_t *p, int g, const xu &v) {
    const uint32_t qh = p[66 + g];
    int w[8], s0, s1;
#pragma unroll
    for (int l = 0; l < 4; l++) iq_w8(cu_iq2s_grid[(uint32_t)p[2 + 4 * g + l] | (((qh >> (2 * l)) & 3u) << 8)], p[34 + 4 * g + l], w + 2 * l);
    iq_dot32(w, v, s0, s1);
    const int sc = p[74 + g];
    return 0.125f * h2f(ld16(p)) * v.d * (float)((2 * (sc & 15) + 1) * s0 + (2 * (sc >> 4) + 1) * s1);
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};
template <>
struct d8<T_IQ3_XXS> {
  static constexpr bool ok = true;
  static constexpr int UPB = 8;
  using xu = iq_xu;
  __device__ static xu xload(int u, const x8v &x, int g0) { return iq_xload(u, x, g0); }
  __device__ static float dot(const uint8_t *p, int g, const xu &v) {
    const uint32_t wd = ld32a2(p + 66 + 4 * g);
    const uint8_t *q = p + 2 + 8 * g;
    int w[8], s0, s1;
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint32_t s = iq_signs7((wd >> (7 * l)) & 127u);
      w[2 * l] = iq_signed4(cu_iq3xxs_grid[q[2 * l]], s);
      w[2 * l + 1] = iq_signed4(cu_iq3xxs_grid[q[2 * l + 1]], s >> 4);
    }
    iq_dot32(w, v, s0, s1);
    return 0.25f * h2f(ld16(p)) * v.d * (float)((int)(2u * (wd >> 28) + 1u) * (s0 + s1));
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};
template <>
struct d8<T_IQ3_S> {
  static constexpr bool ok = true;
  static constexpr int UPB = 8;
  using xu = iq_xu;
  __device__ static xu xload(int u, const x8v &x, int g0) { return iq_xload(u, x, g0); }
  __device__ static float dot(const uint8_t *p, int g, const xu &v) {
    const uint32_t qh = p[66 + g];
    const uint8_t *q = p + 2 + 8 * g;
    int w[8], s0, s1;
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const uint32_t s = (uint32_t)p[74 + 4 * g + k / 2] >> (4 * (k % 2));
      w[k] = iq_signed4(cu_iq3s_grid[(uint32_t)q[k] | (((qh >> k) & 1u) << 8)], s);
    }
    iq_dot32(w, v, s0, s1);
    const int ls = 2 * (((int)p[106 + g / 2] >> (4 * (g % 2))) & 15) + 1;
    return h2f(ld16(p)) * v.d * (float)(ls * (s0 + s1));
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};
template <>
struct d8<T_IQ1_S> {
  static constexpr bool ok = true;
  static constexpr int UPB = 8;
  using xu = iq_xu;
  __device__ static xu xload(int u, const x8v &x, int g0) { return iq_xload(u, x, g0); }
  __device__ static float dot(const uint8_t *p, int g, const xu &v) {
    const uint32_t qh = ld16(p + 34 + 2 * g), delta4 = qh & 0x8000u ? 0xffffffffu : 0x01010101u;
    int w[8], s0, s1;
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint64_t pt = cu_iq1s_grid[(uint32_t)p[2 + 4 * g + l] | (((qh >> (3 * l)) & 7u) << 8)];
      w[2 * l] = iq1_w4((uint32_t)pt, delta4);
      w[2 * l + 1] = iq1_w4((uint32_t)(pt >> 32), delta4);
    }
    iq_dot32(w, v, s0, s1);
    return 0.125f * h2f(ld16(p)) * v.d * (float)((int)(2u * ((qh >> 12) & 7u) + 1u) * (s0 + s1));
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};
template <>
struct d8<T_IQ1_M> {
  static constexpr bool ok = true;
  static constexpr int UPB = 8;
  using xu = iq_xu;
  __device__ static xu xload(int u, const x8v &x, int g0) { return iq_xload(u, x, g0); }
  __device__ static float dot(const uint8_t *p, int g, const xu &v) {
    int w[8], s0, s1;
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const uint32_t h = ((uint32_t)p[32 + 2 * g + l / 2] >> (4 * (l % 2))) & 15u;
      const uint64_t pt = cu_iq1s_grid[(uint32_t)p[4 * g + l] | ((h & 7u) << 8)];
      const uint32_t delta4 = h & 8u ? 0xffffffffu : 0x01010101u;
      w[2 * l] = iq1_w4((uint32_t)pt, delta4);
      w[2 * l + 1] = iq1_w4((uint32_t)(pt >> 32), delta4);
    }
    iq_dot32(w, v, s0, s1);
    const uint32_t sw = ld16(p + 48 + 2 * (g / 2)) >> (6 * (g % 2));
    return 0.125f * iq1m_d(p) * v.d * (float)((int)(2u * (sw & 7u) + 1u) * s0 + (int)(2u * ((sw >> 3) & 7u) + 1u) * s1);
  }
  __device__ static float unit(const uint8_t *p, int u, const x8v &x, int g0) { return dot(p, u, xload(u, x, g0)); }
};
