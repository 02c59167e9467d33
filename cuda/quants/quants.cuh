// bloomery CUDA library: the stored quant blocks as the kernels read them (layouts: ggml's, see
// ../shared/SPEC.md and ffi/cpu/quants_impl.h). Each type splits a block into work units; a unit
// dequantizes its elements and hands them to a visitor in groups of four consecutive elements:
// f(pos, a, b, c, d) with pos (a multiple of 4) relative to the block start. The values follow
// the CPU reference's formulas (ffi/cpu/quants_*.c). Units are ordered so that the units of a
// 128-element window of a row are consecutive (the tensor-core tiles rely on it).
#pragma once
#include "common.cuh"

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
__device__ __forceinline__ uint32_t ld32(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }
// 32 bits at a 2-byte aligned address
__device__ __forceinline__ uint32_t ld32a2(const uint8_t *p) { return (uint32_t)ld16(p) | ((uint32_t)ld16(p + 2) << 16); }
__device__ __forceinline__ uint32_t ld32a1(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
__device__ __forceinline__ int nib_lo(uint32_t q, int byte) { return (int)((q >> (8 * byte)) & 15u); }
__device__ __forceinline__ int nib_hi(uint32_t q, int byte) { return (int)((q >> (8 * byte + 4)) & 15u); }
__device__ __forceinline__ int sbyte(uint32_t q, int byte) { return (int)(int8_t)(uint8_t)(q >> (8 * byte)); }
// The exact float of a small integer (|v| < 2^22) without a conversion instruction (those issue at
// a sixteenth of the FMA rate on sm_80/sm_90 and bound the decode products): v added to the bits
// of 1.5 * 2^23, then 1.5 * 2^23 subtracted. Same value as (float)v.
__device__ __forceinline__ float i2f(int v) { return __int_as_float(0x4B400000 + v) - 12582912.0f; }
// Byte b (0..3) of q (a value below 256) as an exact float, by one byte permute: the bits of
// 2^23 + byte, then 2^23 subtracted (the value i2f gives, with no shift, mask or add first).
template <int B>
__device__ __forceinline__ float byte_f(uint32_t q) {
  return __int_as_float((int)__byte_perm(q, 0x4Bu, 0x4550u + B)) - 8388608.0f;
}
// The same less 32 (Q6_K's offset), exact: (2^23 + byte) - (2^23 + 32).
template <int B>
__device__ __forceinline__ float byte_f32(uint32_t q) {
  return __int_as_float((int)__byte_perm(q, 0x4Bu, 0x4550u + B)) - 8388640.0f;
}

// 16-entry signed byte tables held in four words, looked up with byte permutes (no memory).
struct tbl16 {
  uint32_t w0, w1, w2, w3;
};
__host__ __device__ constexpr uint32_t pack4(int a, int b, int c, int d) {
  return (uint32_t)(uint8_t)a | ((uint32_t)(uint8_t)b << 8) | ((uint32_t)(uint8_t)c << 16) | ((uint32_t)(uint8_t)d << 24);
}
// IQ4_NL / IQ4_XS levels and MXFP4's e2m1 values doubled (facts of the formats)
#define TBL_IQ4NL pack4(-127, -104, -83, -65), pack4(-49, -35, -22, -10), pack4(1, 13, 25, 38), pack4(53, 69, 89, 113)
#define TBL_MXFP4 pack4(0, 1, 2, 3), pack4(4, 6, 8, 12), pack4(0, -1, -2, -3), pack4(-4, -6, -8, -12)
__device__ __forceinline__ int tbl_get(const tbl16 &t, int n) {
  const uint32_t v = n < 8 ? __byte_perm(t.w0, t.w1, (unsigned)n) : __byte_perm(t.w2, t.w3, (unsigned)(n - 8));
  return (int)(int8_t)(uint8_t)(v & 255u);
}

template <int T>
struct qt;

// ---- float rows, pseudo-blocks of 4 ----
template <>
struct qt<T_F32> {
  static constexpr int BE = 4, BB = 16, UPB = 1, UE = 4;
  template <class F>
  __device__ static void unit(const uint8_t *b, int, F &&f) {
    const float4 v = *reinterpret_cast<const float4 *>(b);
    f(0, v.x, v.y, v.z, v.w);
  }
};
template <>
struct qt<T_F16> {
  static constexpr int BE = 4, BB = 8, UPB = 1, UE = 4;
  template <class F>
  __device__ static void unit(const uint8_t *b, int, F &&f) {
    const uint2 v = *reinterpret_cast<const uint2 *>(b);
    f(0, h2f((uint16_t)(v.x & 0xffffu)), h2f((uint16_t)(v.x >> 16)), h2f((uint16_t)(v.y & 0xffffu)), h2f((uint16_t)(v.y >> 16)));
  }
};
template <>
struct qt<T_BF16> {
  static constexpr int BE = 4, BB = 8, UPB = 1, UE = 4;
  template <class F>
  __device__ static void unit(const uint8_t *b, int, F &&f) {
    const uint2 v = *reinterpret_cast<const uint2 *>(b);
    f(0, __uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u), __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xffff0000u));
  }
};

// ---- 32-element blocks ----
// Q4_0: y = (q - 8) * d; unit u: qs bytes 4u..4u+3 -> elements 4u.. (low nibbles) and 16+4u.. (high)
template <>
struct qt<T_Q4_0> {
  static constexpr int BE = 32, BB = 18, UPB = 4, UE = 8;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const float d = h2f(ld16(b));
    const uint32_t q = ld32a2(b + 2 + 4 * u);
    f(4 * u, i2f(nib_lo(q, 0) - 8) * d, i2f(nib_lo(q, 1) - 8) * d, i2f(nib_lo(q, 2) - 8) * d, i2f(nib_lo(q, 3) - 8) * d);
    f(16 + 4 * u, i2f(nib_hi(q, 0) - 8) * d, i2f(nib_hi(q, 1) - 8) * d, i2f(nib_hi(q, 2) - 8) * d, i2f(nib_hi(q, 3) - 8) * d);
  }
};
// Q4_1: y = q * d + m
template <>
struct qt<T_Q4_1> {
  static constexpr int BE = 32, BB = 20, UPB = 4, UE = 8;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const float d = h2f(ld16(b)), m = h2f(ld16(b + 2));
    const uint32_t q = ld32a2(b + 4 + 4 * u);
    f(4 * u, i2f(nib_lo(q, 0)) * d + m, i2f(nib_lo(q, 1)) * d + m, i2f(nib_lo(q, 2)) * d + m, i2f(nib_lo(q, 3)) * d + m);
    f(16 + 4 * u, i2f(nib_hi(q, 0)) * d + m, i2f(nib_hi(q, 1)) * d + m, i2f(nib_hi(q, 2)) * d + m, i2f(nib_hi(q, 3)) * d + m);
  }
};
// Q5_0: y = (q - 16) * d, element j's fifth bit is bit j of qh
template <>
struct qt<T_Q5_0> {
  static constexpr int BE = 32, BB = 22, UPB = 4, UE = 8;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const float d = h2f(ld16(b));
    const uint32_t qh = ld32a2(b + 2);
    const uint32_t q = ld32a2(b + 6 + 4 * u);
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int j = 4 * u + i;
      lo[i] = (nib_lo(q, i) | (int)(((qh >> j) & 1u) << 4)) - 16;
      hi[i] = (nib_hi(q, i) | (int)(((qh >> (j + 16)) & 1u) << 4)) - 16;
    }
    f(4 * u, i2f(lo[0]) * d, i2f(lo[1]) * d, i2f(lo[2]) * d, i2f(lo[3]) * d);
    f(16 + 4 * u, i2f(hi[0]) * d, i2f(hi[1]) * d, i2f(hi[2]) * d, i2f(hi[3]) * d);
  }
};
// Q5_1: y = q * d + m
template <>
struct qt<T_Q5_1> {
  static constexpr int BE = 32, BB = 24, UPB = 4, UE = 8;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const float d = h2f(ld16(b)), m = h2f(ld16(b + 2));
    const uint32_t qh = ld32a2(b + 4);
    const uint32_t q = ld32a2(b + 8 + 4 * u);
    int lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int j = 4 * u + i;
      lo[i] = nib_lo(q, i) | (int)(((qh >> j) & 1u) << 4);
      hi[i] = nib_hi(q, i) | (int)(((qh >> (j + 16)) & 1u) << 4);
    }
    f(4 * u, i2f(lo[0]) * d + m, i2f(lo[1]) * d + m, i2f(lo[2]) * d + m, i2f(lo[3]) * d + m);
    f(16 + 4 * u, i2f(hi[0]) * d + m, i2f(hi[1]) * d + m, i2f(hi[2]) * d + m, i2f(hi[3]) * d + m);
  }
};
// Q8_0: y = q * d; unit u: elements 8u..8u+7
template <>
struct qt<T_Q8_0> {
  static constexpr int BE = 32, BB = 34, UPB = 4, UE = 8;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const float d = h2f(ld16(b));
    const uint32_t q0 = ld32a2(b + 2 + 8 * u), q1 = ld32a2(b + 6 + 8 * u);
    f(8 * u, i2f(sbyte(q0, 0)) * d, i2f(sbyte(q0, 1)) * d, i2f(sbyte(q0, 2)) * d, i2f(sbyte(q0, 3)) * d);
    f(8 * u + 4, i2f(sbyte(q1, 0)) * d, i2f(sbyte(q1, 1)) * d, i2f(sbyte(q1, 2)) * d, i2f(sbyte(q1, 3)) * d);
  }
};
// IQ4_NL: y = d * kvalues[q], nibbles as Q4_0
template <>
struct qt<T_IQ4_NL> {
  static constexpr int BE = 32, BB = 18, UPB = 4, UE = 8;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const tbl16 t = {TBL_IQ4NL};
    const float d = h2f(ld16(b));
    const uint32_t q = ld32a2(b + 2 + 4 * u);
    f(4 * u, d * i2f(tbl_get(t, nib_lo(q, 0))), d * i2f(tbl_get(t, nib_lo(q, 1))), d * i2f(tbl_get(t, nib_lo(q, 2))), d * i2f(tbl_get(t, nib_lo(q, 3))));
    f(16 + 4 * u, d * i2f(tbl_get(t, nib_hi(q, 0))), d * i2f(tbl_get(t, nib_hi(q, 1))), d * i2f(tbl_get(t, nib_hi(q, 2))), d * i2f(tbl_get(t, nib_hi(q, 3))));
  }
};
// MXFP4: y = kvalues_mxfp4[q] * 2^(e-128) (table doubled, scale halved); 17-byte blocks, byte loads
__device__ __forceinline__ float e8m0_half(uint32_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1u) << 23;
  return __uint_as_float(bits);
}
template <>
struct qt<T_MXFP4> {
  static constexpr int BE = 32, BB = 17, UPB = 4, UE = 8;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const tbl16 t = {TBL_MXFP4};
    const float d = e8m0_half(b[0]);
    const uint32_t q = ld32a1(b + 1 + 4 * u);
    f(4 * u, i2f(tbl_get(t, nib_lo(q, 0))) * d, i2f(tbl_get(t, nib_lo(q, 1))) * d, i2f(tbl_get(t, nib_lo(q, 2))) * d, i2f(tbl_get(t, nib_lo(q, 3))) * d);
    f(16 + 4 * u, i2f(tbl_get(t, nib_hi(q, 0))) * d, i2f(tbl_get(t, nib_hi(q, 1))) * d, i2f(tbl_get(t, nib_hi(q, 2))) * d, i2f(tbl_get(t, nib_hi(q, 3))) * d);
  }
};

// ---- 256-element super-blocks ----
// 6-bit scale and min j (0..7) of Q4_K / Q5_K from the 12 scale bytes at s
__device__ __forceinline__ void k4_scale_min(int j, const uint8_t *s, int &sc, int &m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// The scales and mins of groups 2c and 2c + 1 (c = 0..3) from the 12 scale bytes as three words
// (s0: bytes 0..3, s1: 4..7, s2: 8..11), without branches: k4_scale_min's values. The four 6-bit
// values of groups 0..3 or 4..7 are formed a byte each in one word, then the pair shifted out.
__device__ __forceinline__ void k4_scale_min2(int c, uint32_t s0, uint32_t s1, uint32_t s2, int &sc0, int &m0, int &sc1, int &m1) {
  const bool hi = c >= 2;
  const uint32_t scw = hi ? ((s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u)) : (s0 & 0x3F3F3F3Fu);
  const uint32_t mw = hi ? (((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u)) : (s1 & 0x3F3F3F3Fu);
  const unsigned sh = 16u * (unsigned)(c & 1);
  sc0 = (int)((scw >> sh) & 0xFFu);
  sc1 = (int)((scw >> (sh + 8u)) & 0xFFu);
  m0 = (int)((mw >> sh) & 0xFFu);
  m1 = (int)((mw >> (sh + 8u)) & 0xFFu);
}
// Q2_K: 16 groups of 16, y = d*(sc & 15)*q - dmin*(sc >> 4), q 2 bits; scales[16] at 0, qs[64] at 16,
// d at 80, dmin at 82. Unit u = 4h + j: elements 128h + 32j + l (l < 32) take bits 2j of qs[32h + l],
// scale scales[8h + 2j + l / 16]. (d*sc has at most 15 significant bits and q 2: the products are
// exact, so a contracted multiply-add gives the CPU's value.)
template <>
struct qt<T_Q2_K> {
  static constexpr int BE = 256, BB = 84, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const int h = u >> 2, j = u & 3;
    const float d = h2f(ld16(b + 80)), dmin = h2f(ld16(b + 82));
    const int s0 = b[8 * h + 2 * j], s1 = b[8 * h + 2 * j + 1];
    const float dl[2] = {d * i2f(s0 & 15), d * i2f(s1 & 15)}, ml[2] = {dmin * i2f(s0 >> 4), dmin * i2f(s1 >> 4)};
    const uint8_t *q = b + 16 + 32 * h;
#pragma unroll
    for (int w = 0; w < 8; w++) {
      const uint32_t v = (ld32(q + 4 * w) >> (2 * j)) & 0x03030303u;
      const float a = dl[w >> 2], m = ml[w >> 2];
      f(32 * u + 4 * w, a * byte_f<0>(v) - m, a * byte_f<1>(v) - m, a * byte_f<2>(v) - m, a * byte_f<3>(v) - m);
    }
  }
};
// Q3_K: 16 groups of 16, y = d*(sc - 32)*(q - 4), q = 2 low bits | a high bit << 2; hmask[32] at 0,
// qs[64] at 32, scales[12] at 96, d at 108 (blocks of 110 bytes: 2-byte aligned). Unit u = 4h + j:
// element 128h + 32j + l takes bits 2j of qs[32h + l] and bit 4h + j of hmask[l]; its 6-bit scale k
// = 8h + 2j + l / 16: the low nibble of scales[k % 8] (the high one for k >= 8), bits 2(k / 4) of
// scales[8 + k % 4] on top.
template <>
struct qt<T_Q3_K> {
  static constexpr int BE = 256, BB = 110, UPB = 8, UE = 32;
  __device__ static int scale(const uint8_t *s, int k) {
    const int lo = k < 8 ? (s[k] & 15) : (s[k - 8] >> 4), hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (lo | (hi << 4)) - 32;
  }
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const int h = u >> 2, j = u & 3;
    const float d = h2f(ld16(b + 108));
    const float dl[2] = {d * i2f(scale(b + 96, 2 * u)), d * i2f(scale(b + 96, 2 * u + 1))};
    const uint8_t *q = b + 32 + 32 * h;
#pragma unroll
    for (int w = 0; w < 8; w++) {
      const uint32_t v = ((ld32a2(q + 4 * w) >> (2 * j)) & 0x03030303u) | (((ld32a2(b + 4 * w) >> (4 * h + j)) & 0x01010101u) << 2);
      const float a = dl[w >> 2];
      f(32 * u + 4 * w, a * (byte_f<0>(v) - 4.0f), a * (byte_f<1>(v) - 4.0f), a * (byte_f<2>(v) - 4.0f), a * (byte_f<3>(v) - 4.0f));
    }
  }
};
// Q4_K: y = d*sc*q - dmin*m; unit u = 2c + h: qs bytes 32c + 16h .. +15: low nibbles are
// elements 64c + 16h + i (group 2c), high nibbles 64c + 32 + 16h + i (group 2c + 1).
template <>
struct qt<T_Q4_K> {
  static constexpr int BE = 256, BB = 144, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const int c = u >> 1, h = u & 1;
    const uint32_t dm = ld32(b);
    const float d = h2f((uint16_t)(dm & 0xffffu)), dmin = h2f((uint16_t)(dm >> 16));
    int sc0, m0, sc1, m1;
    k4_scale_min(2 * c, b + 4, sc0, m0);
    k4_scale_min(2 * c + 1, b + 4, sc1, m1);
    const float dl0 = d * i2f(sc0), ml0 = dmin * i2f(m0), dl1 = d * i2f(sc1), ml1 = dmin * i2f(m1);
    const uint4 q = *reinterpret_cast<const uint4 *>(b + 16 + 32 * c + 16 * h);
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
    const int base = 64 * c + 16 * h;
#pragma unroll
    for (int w = 0; w < 4; w++) {
      const uint32_t lo = qw[w] & 0x0F0F0F0Fu, hi = (qw[w] >> 4) & 0x0F0F0F0Fu;
      f(base + 4 * w, dl0 * byte_f<0>(lo) - ml0, dl0 * byte_f<1>(lo) - ml0, dl0 * byte_f<2>(lo) - ml0, dl0 * byte_f<3>(lo) - ml0);
      f(base + 32 + 4 * w, dl1 * byte_f<0>(hi) - ml1, dl1 * byte_f<1>(hi) - ml1, dl1 * byte_f<2>(hi) - ml1, dl1 * byte_f<3>(hi) - ml1);
    }
  }
};
// Q5_K: Q4_K plus a fifth bit: element 32k + l (group k) has bit k of qh[l]
template <>
struct qt<T_Q5_K> {
  static constexpr int BE = 256, BB = 176, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const int c = u >> 1, h = u & 1;
    const uint32_t dm = ld32(b);
    const float d = h2f((uint16_t)(dm & 0xffffu)), dmin = h2f((uint16_t)(dm >> 16));
    int sc0, m0, sc1, m1;
    k4_scale_min(2 * c, b + 4, sc0, m0);
    k4_scale_min(2 * c + 1, b + 4, sc1, m1);
    const float dl0 = d * i2f(sc0), ml0 = dmin * i2f(m0), dl1 = d * i2f(sc1), ml1 = dmin * i2f(m1);
    const uint4 q = *reinterpret_cast<const uint4 *>(b + 48 + 32 * c + 16 * h);
    const uint4 qh = *reinterpret_cast<const uint4 *>(b + 16 + 16 * h);
    const uint32_t qw[4] = {q.x, q.y, q.z, q.w}, hw[4] = {qh.x, qh.y, qh.z, qh.w};
    const int base = 64 * c + 16 * h, k0 = 2 * c, k1 = 2 * c + 1;
#pragma unroll
    for (int w = 0; w < 4; w++) {
      int lo[4], hi[4];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const uint32_t hb = (hw[w] >> (8 * i)) & 255u;
        lo[i] = nib_lo(qw[w], i) | (int)(((hb >> k0) & 1u) << 4);
        hi[i] = nib_hi(qw[w], i) | (int)(((hb >> k1) & 1u) << 4);
      }
      f(base + 4 * w, dl0 * i2f(lo[0]) - ml0, dl0 * i2f(lo[1]) - ml0, dl0 * i2f(lo[2]) - ml0, dl0 * i2f(lo[3]) - ml0);
      f(base + 32 + 4 * w, dl1 * i2f(hi[0]) - ml1, dl1 * i2f(hi[1]) - ml1, dl1 * i2f(hi[2]) - ml1, dl1 * i2f(hi[3]) - ml1);
    }
  }
};
// Q6_K: y = d*sc*(q - 32); half hh (128 elements), l in 0..31: element 128hh + 32r + l takes the
// low (r < 2) or high (r >= 2) nibble of ql[64hh + l + 32(r % 2)] and bits 2r of qh[32hh + l];
// scale scales[8hh + 2r + l/16]. Unit u = 4hh + i covers l = 8i..8i+7 for r = 0..3.
template <>
struct qt<T_Q6_K> {
  static constexpr int BE = 256, BB = 210, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int u, F &&f) {
    const int hh = u >> 2, i = u & 3;
    const float d = h2f(ld16(b + 208));
    const uint8_t *ql = b + 64 * hh + 8 * i, *qh = b + 128 + 32 * hh + 8 * i;
    const uint32_t a0 = ld32a2(ql), a1 = ld32a2(ql + 4), c0 = ld32a2(ql + 32), c1 = ld32a2(ql + 36);
    const uint32_t h0 = ld32a2(qh), h1 = ld32a2(qh + 4);
    const int8_t *scl = reinterpret_cast<const int8_t *>(b + 192 + 8 * hh + (i >> 1));
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const float dl = d * i2f(scl[2 * r]);
      const uint32_t l0 = (r & 1) ? c0 : a0, l1 = (r & 1) ? c1 : a1;
      const int s = 4 * (r >> 1);
      // four 6-bit values a word: the low nibbles (bits s..s+3 of each byte) and two high bits
      const uint32_t v0 = ((l0 >> s) & 0x0F0F0F0Fu) | (((h0 >> (2 * r)) & 0x03030303u) << 4);
      const uint32_t v1 = ((l1 >> s) & 0x0F0F0F0Fu) | (((h1 >> (2 * r)) & 0x03030303u) << 4);
      const int base = 128 * hh + 32 * r + 8 * i;
      f(base, dl * byte_f32<0>(v0), dl * byte_f32<1>(v0), dl * byte_f32<2>(v0), dl * byte_f32<3>(v0));
      f(base + 4, dl * byte_f32<0>(v1), dl * byte_f32<1>(v1), dl * byte_f32<2>(v1), dl * byte_f32<3>(v1));
    }
  }
};
// IQ4_XS: 8 groups of 32, y = d*(ls-32)*kvalues[q]; unit g: qs bytes 16g..16g+15, low nibbles
// elements 32g + j, high 32g + 16 + j; ls low 4 bits: nibble g%2 of scales_l[g/2], high 2: bits 2g of scales_h.
template <>
struct qt<T_IQ4_XS> {
  static constexpr int BE = 256, BB = 136, UPB = 8, UE = 32;
  template <class F>
  __device__ static void unit(const uint8_t *b, int g, F &&f) {
    const tbl16 t = {TBL_IQ4NL};
    const float d = h2f(ld16(b));
    const uint32_t sh = ld16(b + 2);
    const int ls = ((((int)b[4 + g / 2] >> (4 * (g % 2))) & 15) | (int)(((sh >> (2 * g)) & 3u) << 4)) - 32;
    const float dl = d * i2f(ls);
    const uint2 q0 = *reinterpret_cast<const uint2 *>(b + 8 + 16 * g), q1 = *reinterpret_cast<const uint2 *>(b + 16 + 16 * g);
    const uint32_t qw[4] = {q0.x, q0.y, q1.x, q1.y};
#pragma unroll
    for (int w = 0; w < 4; w++) {
      f(32 * g + 4 * w, dl * i2f(tbl_get(t, nib_lo(qw[w], 0))), dl * i2f(tbl_get(t, nib_lo(qw[w], 1))), dl * i2f(tbl_get(t, nib_lo(qw[w], 2))), dl * i2f(tbl_get(t, nib_lo(qw[w], 3))));
      f(32 * g + 16 + 4 * w, dl * i2f(tbl_get(t, nib_hi(qw[w], 0))), dl * i2f(tbl_get(t, nib_hi(qw[w], 1))), dl * i2f(tbl_get(t, nib_hi(qw[w], 2))), dl * i2f(tbl_get(t, nib_hi(qw[w], 3))));
    }
  }
};

// A type as a value: dispatch_type calls body(type_tag<T>{}) for the runtime type, so a generic
// lambda reads it back as decltype(tag)::value.
template <int T>
struct type_tag {
  static constexpr int value = T;
};
// (the grid types' qt<T> come from quants_iq.cuh, included at the end of this file)
#define CU_TYPE_CASES(X)                                                                                                              \
  X(T_F32) X(T_F16) X(T_BF16) X(T_Q4_0) X(T_Q4_1) X(T_Q5_0) X(T_Q5_1) X(T_Q8_0) X(T_IQ4_NL) X(T_MXFP4) X(T_Q2_K) X(T_Q3_K) X(T_Q4_K) X(T_Q5_K) \
      X(T_Q6_K) X(T_IQ4_XS) X(T_IQ2_XXS) X(T_IQ2_XS) X(T_IQ2_S) X(T_IQ3_XXS) X(T_IQ3_S) X(T_IQ1_S) X(T_IQ1_M)
template <class B>
__device__ __forceinline__ void dispatch_type(int type, B &&body) {
  switch (type) {
#define CU_CASE(T) \
  case T: body(type_tag<T>{}); break;
    CU_TYPE_CASES(CU_CASE)
#undef CU_CASE
    default: break;
  }
}

#include "quants_iq.cuh"
