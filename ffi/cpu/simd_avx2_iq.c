/* bloomery CPU library: AVX2 products of the grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
 * IQ1_S, IQ1_M) with Q8_K activation rows, on the stored blocks, through the super-block product
 * of simd_avx2_kblk.h: a block's grid points looked up once into 8 x 32 magnitudes, their sign
 * bits as vpsignb operands, the group scales 2s + 1 as the pair-lane scales and the block factor
 * (1/8, 1/4, 1) in d, then used for up to BL_TILE_A activation rows. IQ1's points, shifted by
 * +-1/8, are held as the exact integers 8 * grid +- 1 with d / 8. Exact integer block sums; the
 * float accumulation differs from the scalar reference in order. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c,bmi2")
#include "simd_avx2_kblk.h"
#include "simd_iq_signs.h"

/* 32 sign bits (element e: bit e) as bytes: -1 where set, else +1 */
INLINE __m256i sign_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf), bit);
  return _mm256_or_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(1));
}

/* four 8-element points as 32 bytes, point 0 first */
INLINE __m256i pts4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return _mm256_set_epi64x((long long)d, (long long)c, (long long)b, (long long)a);
}

INLINE void no_min(kblk *k) {
  k->mn = _mm256_setzero_si256();
  k->dmin = 0.0f;
}

/* A grid block's sign bytes from its eight words w (group c: sg[c]) and the scales 2s + 1. */
INLINE void iq_words(kblk *k, __m256i w) {
  uint32_t sgn[8], scn[8];
  _mm256_storeu_si256((__m256i *)sgn, iq_signs8(w));
  _mm256_storeu_si256((__m256i *)scn, _mm256_srli_epi32(w, 28));
  int16_t sc[8];
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    sc[c] = (int16_t)(2 * scn[c] + 1);
    k->sg[c] = sign_bytes(sgn[c]);
  }
  scales_32(k, sc);
}

INLINE void unpack_iq2_xxs(const uint8_t *p, kblk *k) {
  const bl_block_iq2_xxs *b = (const bl_block_iq2_xxs *)p;
  /* the words: bytes 8c + 4 of qs (its odd dwords) */
  const __m256i lo = _mm256_loadu_si256((const __m256i *)b->qs), hi = _mm256_loadu_si256((const __m256i *)(b->qs + 32));
  const __m256i odd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
  iq_words(k, _mm256_blend_epi32(_mm256_permutevar8x32_epi32(lo, odd), _mm256_permutevar8x32_epi32(hi, odd), 0xf0));
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    const uint8_t *g = b->qs + 8 * c;
    k->q[c] = pts4(bl_iq2xxs_grid[g[0]], bl_iq2xxs_grid[g[1]], bl_iq2xxs_grid[g[2]], bl_iq2xxs_grid[g[3]]);
  }
  no_min(k);
  k->d = 0.125f * h2f(b->d);
}

/* per-16 scales 2s + 1 from the nibbles of 8 scale bytes */
INLINE void nibble_scales(kblk *k, const uint8_t *s8) {
  int16_t sc[16];
  for (int c = 0; c < 8; c++) {
    sc[2 * c] = (int16_t)(2 * (s8[c] & 15) + 1);
    sc[2 * c + 1] = (int16_t)(2 * (s8[c] >> 4) + 1);
  }
  scales_16(k, sc);
}

INLINE void unpack_iq2_xs(const uint8_t *p, kblk *k) {
  const bl_block_iq2_xs *b = (const bl_block_iq2_xs *)p;
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    const uint16_t *q = b->qs + 4 * c;
    k->q[c] = pts4(bl_iq2xs_grid[q[0] & 511], bl_iq2xs_grid[q[1] & 511], bl_iq2xs_grid[q[2] & 511], bl_iq2xs_grid[q[3] & 511]);
    const uint32_t s = (uint32_t)bl_iq_signs7(q[0] >> 9) | ((uint32_t)bl_iq_signs7(q[1] >> 9) << 8) |
                       ((uint32_t)bl_iq_signs7(q[2] >> 9) << 16) | ((uint32_t)bl_iq_signs7(q[3] >> 9) << 24);
    k->sg[c] = sign_bytes(s);
  }
  nibble_scales(k, b->scales);
  no_min(k);
  k->d = 0.125f * h2f(b->d);
}

INLINE void unpack_iq2_s(const uint8_t *p, kblk *k) {
  const bl_block_iq2_s *b = (const bl_block_iq2_s *)p;
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    const uint8_t *q = b->qs + 4 * c;
    const unsigned h = b->qh[c];
    k->q[c] = pts4(bl_iq2s_grid[q[0] | ((h << 8) & 0x300)], bl_iq2s_grid[q[1] | ((h << 6) & 0x300)],
                   bl_iq2s_grid[q[2] | ((h << 4) & 0x300)], bl_iq2s_grid[q[3] | ((h << 2) & 0x300)]);
    uint32_t s;
    memcpy(&s, b->signs + 4 * c, 4);
    k->sg[c] = sign_bytes(s);
  }
  nibble_scales(k, b->scales);
  no_min(k);
  k->d = 0.125f * h2f(b->d);
}

INLINE void unpack_iq3_xxs(const uint8_t *p, kblk *k) {
  const bl_block_iq3_xxs *b = (const bl_block_iq3_xxs *)p;
  iq_words(k, _mm256_loadu_si256((const __m256i *)b->sas));
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    const uint8_t *q = b->qs + 8 * c;
    k->q[c] = _mm256_setr_epi32((int)bl_iq3xxs_grid[q[0]], (int)bl_iq3xxs_grid[q[1]], (int)bl_iq3xxs_grid[q[2]], (int)bl_iq3xxs_grid[q[3]],
                                (int)bl_iq3xxs_grid[q[4]], (int)bl_iq3xxs_grid[q[5]], (int)bl_iq3xxs_grid[q[6]], (int)bl_iq3xxs_grid[q[7]]);
  }
  no_min(k);
  k->d = 0.25f * h2f(b->d);
}

INLINE void unpack_iq3_s(const uint8_t *p, kblk *k) {
  const bl_block_iq3_s *b = (const bl_block_iq3_s *)p;
  int16_t sc[8];
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    const uint8_t *q = b->qs + 8 * c;
    const unsigned h = b->qh[c];
#define IX(j) (int)bl_iq3s_grid[q[j] | (((h >> (j)) & 1) << 8)]
    k->q[c] = _mm256_setr_epi32(IX(0), IX(1), IX(2), IX(3), IX(4), IX(5), IX(6), IX(7));
#undef IX
    uint32_t s;
    memcpy(&s, b->signs + 4 * c, 4);
    k->sg[c] = sign_bytes(s);
    sc[c] = (int16_t)(2 * ((b->scales[c / 2] >> (4 * (c % 2))) & 15) + 1);
  }
  scales_32(k, sc);
  no_min(k);
  k->d = h2f(b->d);
}

/* 8 * v + delta for signed bytes v in {-1, 0, 1} and delta +-1: the magnitudes and the values */
INLINE void iq1_weights(kblk *k, int c, __m256i v, __m256i delta) {
  const __m256i v2 = _mm256_add_epi8(v, v), v4 = _mm256_add_epi8(v2, v2);
  const __m256i w = _mm256_add_epi8(_mm256_add_epi8(v4, v4), delta);
  k->q[c] = _mm256_abs_epi8(w);
  k->sg[c] = w;
}

#define PLUS1 0x0101010101010101ull

INLINE void unpack_iq1_s(const uint8_t *p, kblk *k) {
  const bl_block_iq1_s *b = (const bl_block_iq1_s *)p;
  int16_t sc[8];
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    const uint8_t *q = b->qs + 4 * c;
    const unsigned h = b->qh[c];
    const __m256i v = pts4(bl_iq1s_grid[q[0] | ((h << 8) & 0x700)], bl_iq1s_grid[q[1] | ((h << 5) & 0x700)],
                           bl_iq1s_grid[q[2] | ((h << 2) & 0x700)], bl_iq1s_grid[q[3] | ((h >> 1) & 0x700)]);
    iq1_weights(k, c, v, _mm256_set1_epi8(h & 0x8000 ? -1 : 1));
    sc[c] = (int16_t)(2 * ((h >> 12) & 7) + 1);
  }
  scales_32(k, sc);
  no_min(k);
  k->d = 0.125f * h2f(b->d);
}

INLINE void unpack_iq1_m(const uint8_t *p, kblk *k) {
  const bl_block_iq1_m *b = (const bl_block_iq1_m *)p;
  uint16_t sw[4];
  memcpy(sw, b->scales, 8);
  int16_t sc[16];
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    const uint8_t *q = b->qs + 4 * c;
    const unsigned h0 = b->qh[2 * c], h1 = b->qh[2 * c + 1];
    const __m256i v = pts4(bl_iq1s_grid[q[0] | ((h0 << 8) & 0x700)], bl_iq1s_grid[q[1] | ((h0 << 4) & 0x700)],
                           bl_iq1s_grid[q[2] | ((h1 << 8) & 0x700)], bl_iq1s_grid[q[3] | ((h1 << 4) & 0x700)]);
    /* the shift of point l: -1 in every byte where its sign bit is set, else +1 (branch-free) */
#define DELTA(h, b) ((uint64_t)(-(int64_t)(((h) >> (b)) & 1)) | PLUS1)
    const __m256i delta = pts4(DELTA(h0, 3), DELTA(h0, 7), DELTA(h1, 3), DELTA(h1, 7));
#undef DELTA
    iq1_weights(k, c, v, delta);
    const unsigned s = sw[c / 2] >> (6 * (c % 2));
    sc[2 * c] = (int16_t)(2 * (s & 7) + 1);
    sc[2 * c + 1] = (int16_t)(2 * ((s >> 3) & 7) + 1);
  }
  scales_16(k, sc);
  no_min(k);
  k->d = 0.125f * h2f(bl_iq1m_d(b->scales));
}

KTILE(tile_iq2_xxs, unpack_iq2_xxs, 66, 1, 0)
KTILE(tile_iq2_xs, unpack_iq2_xs, 74, 1, 0)
KTILE(tile_iq2_s, unpack_iq2_s, 82, 1, 0)
KTILE(tile_iq3_xxs, unpack_iq3_xxs, 98, 1, 0)
KTILE(tile_iq3_s, unpack_iq3_s, 110, 1, 0)
KTILE(tile_iq1_s, unpack_iq1_s, 50, 1, 0)
KTILE(tile_iq1_m, unpack_iq1_m, 56, 1, 0)

void bl_avx2_fill_iq(bl_kernels *k) {
  k->tile[BL_IQ2_XXS] = tile_iq2_xxs;
  k->tile[BL_IQ2_XS] = tile_iq2_xs;
  k->tile[BL_IQ2_S] = tile_iq2_s;
  k->tile[BL_IQ3_XXS] = tile_iq3_xxs;
  k->tile[BL_IQ3_S] = tile_iq3_s;
  k->tile[BL_IQ1_S] = tile_iq1_s;
  k->tile[BL_IQ1_M] = tile_iq1_m;
}
#endif /* __x86_64__ */
