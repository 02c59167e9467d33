/* bloomery CPU library: AVX-512 (F/BW/VL/DQ + VNNI) products of the K-quant super-blocks (Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K) and IQ4_XS with Q8_K activation rows, on the stored blocks.
 *
 * Each weight block is unpacked in registers into one common shape - 256 unsigned 8-bit values
 * in element order (4 x 64), an int16 scale per 16-element group, an int16 multiplier of the
 * activation's 16-element sums (the block's mins or offset), and two float scales - so that one
 * inner loop serves every type: vpmaddubsw (u8 x s8 pairs) then vpdpwssd (pairs x group scale).
 * A block is unpacked once and used for up to BL_TILE_A activation rows. The integer part of
 * every block is exact; the float accumulation differs from the scalar reference only in order. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")
#include "simd_avx512_kblk.h"

/* Q4_K / Q5_K six-bit scales and mins, 8 each, as bytes (the packing of SPEC.md), in 32-bit
 * lanes u0 u1 u2 of the 12 bytes: sc = u0 & 63 | (u2 & 15) + (u0 >> 6) << 4, m likewise from u1.
 * `s` is read 16 bytes wide (the block's quants follow its scales). */
INLINE void k4_scales(const uint8_t *s, __m128i *sc8, __m128i *mn8) {
  const __m128i x = _mm_loadu_si128((const __m128i *)s);
  const __m128i lo = _mm_and_si128(x, _mm_set1_epi8(0x3f));                                   /* sc0-3 mn0-3 */
  const __m128i u2 = _mm_srlv_epi32(_mm_shuffle_epi32(x, 0xaa), _mm_setr_epi32(0, 4, 0, 0));   /* u2, u2 >> 4 */
  const __m128i top = _mm_and_si128(_mm_srli_epi32(x, 2), _mm_set1_epi8(0x30));
  const __m128i hi = _mm_or_si128(_mm_and_si128(u2, _mm_set1_epi8(0x0f)), top);              /* sc4-7 mn4-7 */
  const __m128i all = _mm_unpacklo_epi32(lo, hi);                                             /* sc0-7 mn0-7 */
  *sc8 = all;
  *mn8 = _mm_unpackhi_epi64(all, all);
}

INLINE void unpack_q4_K(const uint8_t *p, kblk *k) {
  const bl_block_q4_K *b = (const bl_block_q4_K *)p;
  __m128i sc8, mn8;
  k4_scales(b->scales, &sc8, &mn8);
  scales_32(k, sc8);
  k->mn = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
  k->dd = h2f2(&b->d);
  const __m512i sh = shifts2(0, 4), m4 = _mm512_set1_epi8(0x0f);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) k->q[c] = _mm512_and_si512(_mm512_srlv_epi16(bcast32(b->qs + 32 * c), sh), m4);
}

INLINE void unpack_q5_K(const uint8_t *p, kblk *k) {
  const bl_block_q5_K *b = (const bl_block_q5_K *)p;
  __m128i sc8, mn8;
  k4_scales(b->scales, &sc8, &mn8);
  scales_32(k, sc8);
  k->mn = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
  k->dd = h2f2(&b->d);
  const __m512i sh = shifts2(0, 4), m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
  const __m512i qh = bcast32(b->qh);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(bcast32(b->qs + 32 * c), sh), m4);
    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts2(2 * c, 2 * c + 1)), one);
    k->q[c] = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 4));
  }
}

INLINE void unpack_q6_K(const uint8_t *p, kblk *k) {
  const bl_block_q6_K *b = (const bl_block_q6_K *)p;
  const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
  scales_16(k, s16);
  k->mn = s16;
  k->dd = _mm_mul_ps(_mm_set1_ps(h2f(b->d)), _mm_setr_ps(1.0f, 32.0f, 0.0f, 0.0f));
  const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
  _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
    const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
    const __m512i qh = bcast32(b->qh + 32 * h);
    const __m512i lo = _mm512_and_si512(ql, m4), hi = _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
    const __m512i h0 = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts2(0, 2)), m2);
    const __m512i h1 = _mm512_and_si512(_mm512_srlv_epi16(qh, shifts2(4, 6)), m2);
    k->q[2 * h] = _mm512_or_si512(lo, _mm512_slli_epi16(h0, 4));
    k->q[2 * h + 1] = _mm512_or_si512(hi, _mm512_slli_epi16(h1, 4));
  }
}

INLINE void unpack_q2_K(const uint8_t *p, kblk *k) {
  const bl_block_q2_K *b = (const bl_block_q2_K *)p;
  const __m128i s = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0x0f);
  scales_16(k, _mm256_cvtepu8_epi16(_mm_and_si128(s, m4)));
  k->mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
  k->dd = h2f2(&b->d);
  const __m512i m2 = _mm512_set1_epi8(3);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const int j = 4 * (c & 1);
    k->q[c] = _mm512_and_si512(_mm512_srlv_epi16(bcast32(b->qs + 32 * (c >> 1)), shifts2(j, j + 2)), m2);
  }
}

INLINE void unpack_q3_K(const uint8_t *p, kblk *k) {
  const bl_block_q3_K *b = (const bl_block_q3_K *)p;
  uint64_t s_lo, s_hi;
  bl_q3k_scale_bytes(b->scales, &s_lo, &s_hi);
  const __m256i s16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_set_epi64x((long long)s_hi, (long long)s_lo)),
                                       _mm256_set1_epi16(32));
  scales_16(k, s16);
  k->mn = s16;
  k->dd = _mm_mul_ps(_mm_set1_ps(h2f(b->d)), _mm_setr_ps(1.0f, 4.0f, 0.0f, 0.0f));
  const __m512i v3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
  const __m512i hm = bcast32(b->hmask);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const int h = c >> 1, j = 2 * (c & 1);
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi16(bcast32(b->qs + 32 * h), shifts2(2 * j, 2 * j + 2)), v3);
    const __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(hm, shifts2(4 * h + j, 4 * h + j + 1)), one);
    k->q[c] = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 2));
  }
}

/* IQ4_XS: signed table values; q holds |value|, neg marks the negative ones. */
INLINE void unpack_iq4_xs(const uint8_t *p, kblk *k) {
  const bl_block_iq4_xs *b = (const bl_block_iq4_xs *)p;
  int16_t ls[8];
  for (int g = 0; g < 8; g++)
    ls[g] = (int16_t)((((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((b->scales_h >> (2 * g)) & 3) << 4)) - 32);
  const __m512i s = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)ls));
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) k->s[c] = _mm512_permutexvar_epi16(_mm512_load_si512(idx32[c]), s);
  k->mn = _mm256_setzero_si256();
  k->dd = _mm_setr_ps(h2f(b->d), 0.0f, 0.0f, 0.0f);
  const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)bl_kvalues_iq4nl));
  const __m512i sh = _mm512_set_epi64(4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0,
                                      4 * 0x0001000100010001ll, 4 * 0x0001000100010001ll, 0, 0);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    /* 16-byte halves X0 X1 of the chunk's 32 bytes as X0 X0 X1 X1: nibbles lo hi lo hi */
    const __m512i x = _mm512_shuffle_i64x2(bcast32(b->qs + 32 * c), bcast32(b->qs + 32 * c), _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i v = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srlv_epi16(x, sh), m4));
    k->neg[c] = _mm512_movepi8_mask(v);
    k->q[c] = _mm512_abs_epi8(v);
  }
}


KTILE(tile_q4_K, unpack_q4_K, 144, 0, 1)
KTILE(tile_q5_K, unpack_q5_K, 176, 0, 1)
KTILE(tile_q6_K, unpack_q6_K, 210, 0, 1)
KTILE(tile_q2_K, unpack_q2_K, 84, 0, 1)
KTILE(tile_q3_K, unpack_q3_K, 110, 0, 1)
KTILE(tile_iq4_xs, unpack_iq4_xs, 136, 1, 0)

void bl_avx512_fill_k(bl_kernels *k) {
  k->tile[BL_Q4_K] = tile_q4_K;
  k->tile[BL_Q5_K] = tile_q5_K;
  k->tile[BL_Q6_K] = tile_q6_K;
  k->tile[BL_Q2_K] = tile_q2_K;
  k->tile[BL_Q3_K] = tile_q3_K;
  k->tile[BL_IQ4_XS] = tile_iq4_xs;
}
#endif /* __x86_64__ */
