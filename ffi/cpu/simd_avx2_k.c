/* bloomery CPU library: AVX2 products of the K-quant super-blocks (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)
 * and IQ4_XS with Q8_K activation rows, on the stored blocks. The same shape as the AVX-512 file
 * in 256-bit registers: a block unpacked once into 8 x 32 unsigned 8-bit values with an int16
 * scale per pair lane, the activation's 16-element sums times the block's mins or offset, and
 * used for up to BL_TILE_A activation rows (vpmaddubsw, vpmaddwd, vpaddd). Exact integer block
 * sums; float accumulation in another order than the scalar reference. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c,bmi2")
#include "simd_avx2_kblk.h"

INLINE void k4_scales(const uint8_t *s, int16_t sc[8], int16_t mn[8]) {
  uint32_t u0, u1, u2;
  memcpy(&u0, s, 4);
  memcpy(&u1, s + 4, 4);
  memcpy(&u2, s + 8, 4);
  const uint32_t w[4] = {u0 & 0x3f3f3f3fu, u1 & 0x3f3f3f3fu, (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u),
                         ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u)};
  for (int j = 0; j < 4; j++) {
    sc[j] = (int16_t)((w[0] >> (8 * j)) & 0xff);
    mn[j] = (int16_t)((w[1] >> (8 * j)) & 0xff);
    sc[4 + j] = (int16_t)((w[2] >> (8 * j)) & 0xff);
    mn[4 + j] = (int16_t)((w[3] >> (8 * j)) & 0xff);
  }
}

/* mins of 32-element groups as 16 int16 multipliers of the 16-element sums */
INLINE __m256i mins_32(const int16_t mn[8]) {
  const __m128i m = _mm_loadu_si128((const __m128i *)mn);
  return _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}

INLINE void unpack_q4_K(const uint8_t *p, kblk *k) {
  const bl_block_q4_K *b = (const bl_block_q4_K *)p;
  int16_t sc[8], mn[8];
  k4_scales(b->scales, sc, mn);
  scales_32(k, sc);
  k->mn = mins_32(mn);
  k->d = h2f(b->d);
  k->dmin = h2f(b->dmin);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const __m256i v = load32(b->qs + 32 * c);
    k->q[2 * c] = _mm256_and_si256(v, m4);
    k->q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
}

INLINE void unpack_q5_K(const uint8_t *p, kblk *k) {
  const bl_block_q5_K *b = (const bl_block_q5_K *)p;
  int16_t sc[8], mn[8];
  k4_scales(b->scales, sc, mn);
  scales_32(k, sc);
  k->mn = mins_32(mn);
  k->d = h2f(b->d);
  k->dmin = h2f(b->dmin);
  const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1), qh = load32(b->qh);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const __m256i v = load32(b->qs + 32 * c);
    const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
    const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
    k->q[2 * c] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(h0, 4));
    k->q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_slli_epi16(h1, 4));
  }
}

INLINE void unpack_q6_K(const uint8_t *p, kblk *k) {
  const bl_block_q6_K *b = (const bl_block_q6_K *)p;
  int16_t sc[16];
  for (int g = 0; g < 16; g++) sc[g] = b->scales[g];
  scales_16(k, sc);
  k->mn = _mm256_loadu_si256((const __m256i *)sc);
  k->d = h2f(b->d);
  k->dmin = 32.0f * k->d;
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    const __m256i l0 = load32(b->ql + 64 * h), l1 = load32(b->ql + 64 * h + 32), qh = load32(b->qh + 32 * h);
    const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * r), m2);
      k->q[4 * h + r] = _mm256_or_si256(lo[r], _mm256_slli_epi16(hb, 4));
    }
  }
}

INLINE void unpack_q2_K(const uint8_t *p, kblk *k) {
  const bl_block_q2_K *b = (const bl_block_q2_K *)p;
  int16_t sc[16], mn[16];
  for (int g = 0; g < 16; g++) {
    sc[g] = b->scales[g] & 15;
    mn[g] = b->scales[g] >> 4;
  }
  scales_16(k, sc);
  k->mn = _mm256_loadu_si256((const __m256i *)mn);
  k->d = h2f(b->d);
  k->dmin = h2f(b->dmin);
  const __m256i m2 = _mm256_set1_epi8(3);
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    const __m256i v = load32(b->qs + 32 * h);
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) k->q[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
  }
}

INLINE void unpack_q3_K(const uint8_t *p, kblk *k) {
  const bl_block_q3_K *b = (const bl_block_q3_K *)p;
  uint64_t s_lo, s_hi;
  bl_q3k_scale_bytes(b->scales, &s_lo, &s_hi);
  int16_t sc[16];
  for (int g = 0; g < 8; g++) {
    sc[g] = (int16_t)((int)((s_lo >> (8 * g)) & 0xff) - 32);
    sc[8 + g] = (int16_t)((int)((s_hi >> (8 * g)) & 0xff) - 32);
  }
  scales_16(k, sc);
  k->mn = _mm256_loadu_si256((const __m256i *)sc);
  k->d = h2f(b->d);
  k->dmin = 4.0f * k->d;
  const __m256i v3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), hm = load32(b->hmask);
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    const __m256i v = load32(b->qs + 32 * h);
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
      const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), v3);
      const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
      k->q[4 * h + j] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
    }
  }
}

INLINE void unpack_iq4_xs(const uint8_t *p, kblk *k) {
  const bl_block_iq4_xs *b = (const bl_block_iq4_xs *)p;
  int16_t sc[8];
  for (int g = 0; g < 8; g++)
    sc[g] = (int16_t)((((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((b->scales_h >> (2 * g)) & 3) << 4)) - 32);
  scales_32(k, sc);
  k->mn = _mm256_setzero_si256();
  k->d = h2f(b->d);
  k->dmin = 0.0f;
  const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bl_kvalues_iq4nl));
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    const __m128i x = _mm_loadu_si128((const __m128i *)(b->qs + 16 * c));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), m4);
    const __m256i v = _mm256_shuffle_epi8(tab, nib);
    k->sg[c] = v;
    k->q[c] = _mm256_sign_epi8(v, v);
  }
}


KTILE(tile_q4_K, unpack_q4_K, 144, 0, 1)
KTILE(tile_q5_K, unpack_q5_K, 176, 0, 1)
KTILE(tile_q6_K, unpack_q6_K, 210, 0, 1)
KTILE(tile_q2_K, unpack_q2_K, 84, 0, 1)
KTILE(tile_q3_K, unpack_q3_K, 110, 0, 1)
KTILE(tile_iq4_xs, unpack_iq4_xs, 136, 1, 0)

void bl_avx2_fill_k(bl_kernels *k) {
  k->tile[BL_Q4_K] = tile_q4_K;
  k->tile[BL_Q5_K] = tile_q5_K;
  k->tile[BL_Q6_K] = tile_q6_K;
  k->tile[BL_Q2_K] = tile_q2_K;
  k->tile[BL_Q3_K] = tile_q3_K;
  k->tile[BL_IQ4_XS] = tile_iq4_xs;
}
#endif /* __x86_64__ */
