/* bloomery CPU library: AVX-512 (F/BW/VL/DQ + VNNI) products of the grid types (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) with Q8_K activation rows in element order, on the stored
 * blocks, through the super-block product of simd_avx512_kblk.h: a block's grid points looked up
 * once into 4 x 64 magnitudes, their sign bits as the negative elements' masks (the stored sign
 * bytes are those masks), the group scales 2s + 1 as the pair-lane scales and the block factor
 * (1/8, 1/4, 1) in d, then used for up to BL_TILE_A activation rows. IQ1's points, shifted by
 * +-1/8, are held as the exact integers 8 * grid +- 1 with d / 8. These types have no lane-order
 * kernels: every batch size takes these (kernels.h's tile), one row's bits whatever its batch.
 * Exact integer block sums; the float accumulation differs from the scalar reference in order. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")
#include "simd_avx512_kblk.h"
#include "simd_iq_signs.h"

/* eight 8-element points of a 64-bit grid as 64 bytes, point 0 first (scalar loads: cheaper
 * than vpgatherqq here) */
INLINE __m512i pts8(const uint64_t *G, const unsigned i[8]) {
  return _mm512_set_epi64((long long)G[i[7]], (long long)G[i[6]], (long long)G[i[5]], (long long)G[i[4]], (long long)G[i[3]],
                          (long long)G[i[2]], (long long)G[i[1]], (long long)G[i[0]]);
}
/* sixteen 4-element points of a 32-bit grid */
INLINE __m512i pts16(const uint32_t *G, const unsigned i[16]) {
  return _mm512_set_epi32((int)G[i[15]], (int)G[i[14]], (int)G[i[13]], (int)G[i[12]], (int)G[i[11]], (int)G[i[10]], (int)G[i[9]],
                          (int)G[i[8]], (int)G[i[7]], (int)G[i[6]], (int)G[i[5]], (int)G[i[4]], (int)G[i[3]], (int)G[i[2]],
                          (int)G[i[1]], (int)G[i[0]]);
}

INLINE void set_d(kblk *k, float d) {
  k->mn = _mm256_setzero_si256();
  k->dd = _mm_setr_ps(d, 0.0f, 0.0f, 0.0f);
}

/* scales 2s + 1 of 8 groups of 32 */
INLINE void odd_scales_32(kblk *k, const uint8_t s[8]) {
  uint64_t v;
  memcpy(&v, s, 8);
  const __m128i x = _mm_cvtsi64_si128((long long)v);
  scales_32(k, _mm_add_epi8(_mm_add_epi8(x, x), _mm_set1_epi8(1)));
}

/* scales 2s + 1 of 16 groups of 16 from the nibbles of 8 bytes (low nibble first) */
INLINE void nibble_scales(kblk *k, const uint8_t *s8) {
  uint64_t v;
  memcpy(&v, s8, 8);
  const __m128i x = _mm_cvtsi64_si128((long long)v), m4 = _mm_set1_epi8(0x0f);
  const __m128i n = _mm_unpacklo_epi8(_mm_and_si128(x, m4), _mm_and_si128(_mm_srli_epi16(x, 4), m4));
  const __m256i s16 = _mm256_cvtepu8_epi16(n);
  scales_16(k, _mm256_add_epi16(_mm256_add_epi16(s16, s16), _mm256_set1_epi16(1)));
}

/* A grid block's signs from its eight words w (qword c: chunk c's 64 element signs) and the scales 2s + 1. */
INLINE void iq_words(kblk *k, __m256i w) {
  const __m256i sg = iq_signs8(w);
  k->neg[0] = (__mmask64)_mm256_extract_epi64(sg, 0);
  k->neg[1] = (__mmask64)_mm256_extract_epi64(sg, 1);
  k->neg[2] = (__mmask64)_mm256_extract_epi64(sg, 2);
  k->neg[3] = (__mmask64)_mm256_extract_epi64(sg, 3);
  const __m128i sc = _mm256_cvtepi32_epi8(_mm256_srli_epi32(w, 28));
  scales_32(k, _mm_add_epi8(_mm_add_epi8(sc, sc), _mm_set1_epi8(1)));
}

INLINE void unpack_iq2_xxs(const uint8_t *p, kblk *k) {
  const bl_block_iq2_xxs *b = (const bl_block_iq2_xxs *)p;
  /* the words: bytes 16c + 4 and 16c + 12 of qs (dwords 1, 3, 5, ...) */
  const __m512i all = _mm512_loadu_si512(b->qs);
  iq_words(k, _mm512_castsi512_si256(_mm512_permutexvar_epi32(_mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0), all)));
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const uint8_t *g = b->qs + 16 * c;
    const unsigned ix[8] = {g[0], g[1], g[2], g[3], g[8], g[9], g[10], g[11]};
    k->q[c] = pts8(bl_iq2xxs_grid, ix);
  }
  set_d(k, 0.125f * h2f(b->d));
}

INLINE void unpack_iq2_xs(const uint8_t *p, kblk *k) {
  const bl_block_iq2_xs *b = (const bl_block_iq2_xs *)p;
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const uint16_t *q = b->qs + 8 * c;
    unsigned ix[8];
    uint64_t m = 0;
    for (int l = 0; l < 8; l++) {
      ix[l] = q[l] & 511u;
      m |= (uint64_t)bl_iq_signs7(q[l] >> 9) << (8 * l);
    }
    k->q[c] = pts8(bl_iq2xs_grid, ix);
    k->neg[c] = (__mmask64)m;
  }
  nibble_scales(k, b->scales);
  set_d(k, 0.125f * h2f(b->d));
}

INLINE void unpack_iq2_s(const uint8_t *p, kblk *k) {
  const bl_block_iq2_s *b = (const bl_block_iq2_s *)p;
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    /* point l of group g: the 2 bits at 2l of qh[g] above the index byte */
    const uint8_t *q = b->qs + 8 * c;
    const unsigned h0 = b->qh[2 * c], h1 = b->qh[2 * c + 1];
    const unsigned ix[8] = {q[0] | ((h0 << 8) & 0x300), q[1] | ((h0 << 6) & 0x300), q[2] | ((h0 << 4) & 0x300), q[3] | ((h0 << 2) & 0x300),
                            q[4] | ((h1 << 8) & 0x300), q[5] | ((h1 << 6) & 0x300), q[6] | ((h1 << 4) & 0x300), q[7] | ((h1 << 2) & 0x300)};
    k->q[c] = pts8(bl_iq2s_grid, ix);
    uint64_t m;
    memcpy(&m, b->signs + 8 * c, 8);
    k->neg[c] = (__mmask64)m;
  }
  nibble_scales(k, b->scales);
  set_d(k, 0.125f * h2f(b->d));
}

INLINE void unpack_iq3_xxs(const uint8_t *p, kblk *k) {
  const bl_block_iq3_xxs *b = (const bl_block_iq3_xxs *)p;
  iq_words(k, _mm256_loadu_si256((const __m256i *)b->sas));
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    unsigned ix[16];
    for (int j = 0; j < 16; j++) ix[j] = b->qs[16 * c + j];
    k->q[c] = pts16(bl_iq3xxs_grid, ix);
  }
  set_d(k, 0.25f * h2f(b->d));
}

INLINE void unpack_iq3_s(const uint8_t *p, kblk *k) {
  const bl_block_iq3_s *b = (const bl_block_iq3_s *)p;
  uint8_t s[8];
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    /* point k of the chunk: index byte k | bit k of the chunk's two qh bytes << 8 */
    uint16_t hb;
    memcpy(&hb, b->qh + 2 * c, 2);
    unsigned ix[16];
    for (int j = 0; j < 16; j++) ix[j] = b->qs[16 * c + j] | (((unsigned)hb >> j & 1u) << 8);
    k->q[c] = pts16(bl_iq3s_grid, ix);
    uint64_t m;
    memcpy(&m, b->signs + 8 * c, 8);
    k->neg[c] = (__mmask64)m;
    s[2 * c] = (uint8_t)(b->scales[c] & 15);
    s[2 * c + 1] = (uint8_t)(b->scales[c] >> 4);
  }
  odd_scales_32(k, s);
  set_d(k, h2f(b->d));
}

/* 8 * v + delta (v signed bytes in {-1, 0, 1}; delta -1 where the mask is set, else +1) */
INLINE void iq1_weights(kblk *k, int c, __m512i v, __mmask64 dneg) {
  const __m512i v2 = _mm512_add_epi8(v, v), v4 = _mm512_add_epi8(v2, v2);
  const __m512i delta = _mm512_mask_blend_epi8(dneg, _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
  const __m512i w = _mm512_add_epi8(_mm512_add_epi8(v4, v4), delta);
  k->q[c] = _mm512_abs_epi8(w);
  k->neg[c] = _mm512_movepi8_mask(w);
}

INLINE void unpack_iq1_s(const uint8_t *p, kblk *k) {
  const bl_block_iq1_s *b = (const bl_block_iq1_s *)p;
  uint8_t s[8];
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    const unsigned h0 = b->qh[2 * c], h1 = b->qh[2 * c + 1];
    const uint8_t *q = b->qs + 8 * c;
    /* point l of group g: the 3 bits at 3l of qh[g] above the index byte */
    const unsigned ix[8] = {q[0] | ((h0 << 8) & 0x700), q[1] | ((h0 << 5) & 0x700), q[2] | ((h0 << 2) & 0x700), q[3] | ((h0 >> 1) & 0x700),
                            q[4] | ((h1 << 8) & 0x700), q[5] | ((h1 << 5) & 0x700), q[6] | ((h1 << 2) & 0x700), q[7] | ((h1 >> 1) & 0x700)};
    const uint64_t dn = (h0 & 0x8000 ? 0xffffffffull : 0) | (h1 & 0x8000 ? 0xffffffff00000000ull : 0);
    iq1_weights(k, c, pts8(bl_iq1s_grid, ix), (__mmask64)dn);
    s[2 * c] = (uint8_t)((h0 >> 12) & 7);
    s[2 * c + 1] = (uint8_t)((h1 >> 12) & 7);
  }
  odd_scales_32(k, s);
  set_d(k, 0.125f * h2f(b->d));
}

INLINE void unpack_iq1_m(const uint8_t *p, kblk *k) {
  const bl_block_iq1_m *b = (const bl_block_iq1_m *)p;
  _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
    /* points 2m, 2m + 1 of the chunk: the low and high nibbles of qh[4c + m] (3 index bits, the
     * shift's sign); branch-free: the 8 sign bits spread to bytes with pdep */
    uint32_t h;
    memcpy(&h, b->qh + 4 * c, 4);
    const uint8_t *q = b->qs + 8 * c;
    const unsigned ix[8] = {q[0] | ((h << 8) & 0x700), q[1] | ((h << 4) & 0x700), q[2] | (h & 0x700), q[3] | ((h >> 4) & 0x700),
                            q[4] | ((h >> 8) & 0x700), q[5] | ((h >> 12) & 0x700), q[6] | ((h >> 16) & 0x700), q[7] | ((h >> 20) & 0x700)};
    const uint64_t dn = _pdep_u64(_pext_u32(h, 0x88888888u), 0x0101010101010101ull) * 0xffu;
    iq1_weights(k, c, pts8(bl_iq1s_grid, ix), (__mmask64)dn);
  }
  /* the 3-bit scales per 16 elements: group G at bit 3 (G % 4) of word G / 4; without the words'
   * top nibbles (the f16) they are the 48 bits 3G, spread to bytes with pdep */
  uint64_t sw;
  memcpy(&sw, b->scales, 8);
  const uint64_t packed = _pext_u64(sw, 0x0fff0fff0fff0fffull);
  const __m128i s8 = _mm_set_epi64x((long long)_pdep_u64(packed >> 24, 0x0707070707070707ull), (long long)_pdep_u64(packed, 0x0707070707070707ull));
  const __m256i s16 = _mm256_cvtepu8_epi16(s8);
  scales_16(k, _mm256_add_epi16(_mm256_add_epi16(s16, s16), _mm256_set1_epi16(1)));
  set_d(k, 0.125f * h2f(bl_iq1m_d(b->scales)));
}

KTILE(tile_iq2_xxs, unpack_iq2_xxs, 66, 1, 0)
KTILE(tile_iq2_xs, unpack_iq2_xs, 74, 1, 0)
KTILE(tile_iq2_s, unpack_iq2_s, 82, 1, 0)
KTILE(tile_iq3_xxs, unpack_iq3_xxs, 98, 1, 0)
KTILE(tile_iq3_s, unpack_iq3_s, 110, 1, 0)
KTILE(tile_iq1_s, unpack_iq1_s, 50, 1, 0)
KTILE(tile_iq1_m, unpack_iq1_m, 56, 1, 0)

void bl_avx512_fill_iq(bl_kernels *k) {
  k->tile[BL_IQ2_XXS] = tile_iq2_xxs;
  k->tile[BL_IQ2_XS] = tile_iq2_xs;
  k->tile[BL_IQ2_S] = tile_iq2_s;
  k->tile[BL_IQ3_XXS] = tile_iq3_xxs;
  k->tile[BL_IQ3_S] = tile_iq3_s;
  k->tile[BL_IQ1_S] = tile_iq1_s;
  k->tile[BL_IQ1_M] = tile_iq1_m;
}
#endif /* __x86_64__ */
