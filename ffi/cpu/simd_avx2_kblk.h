/* bloomery CPU library: the AVX2 super-block product shared by the 256-element types
 * (simd_avx2_k.c: the K-quants and IQ4_XS; simd_avx2_iq.c: the grid types): a weight block
 * unpacked once into 8 x 32 unsigned 8-bit values with an int16 scale per pair lane (and, for
 * signed types, the signs for vpsignb), the activation's 16-element sums times the block's mins
 * or offset, used for up to BL_TILE_A activation rows (vpmaddubsw, vpmaddwd, vpaddd). Included
 * after the file's #pragma GCC target("avx2,fma,f16c,bmi2"). */
#ifndef BL_SIMD_AVX2_KBLK_H
#define BL_SIMD_AVX2_KBLK_H
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

typedef struct {
  __m256i q[8];  /* u8 values of elements 32c..32c+31 */
  __m256i s[8];  /* int16 scale of each pair lane of chunk c */
  __m256i mn;    /* int16 multiplier of each 16-element activation sum */
  __m256i sg[8]; /* signed types: the weights themselves (signs for vpsignb) */
  float d, dmin;
} kblk;

INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }
INLINE __m256i load32(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* chunk scales from 8 group scales of 32 elements: every lane of chunk c is sc[c] */
INLINE void scales_32(kblk *k, const int16_t sc[8]) {
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) k->s[c] = _mm256_set1_epi16(sc[c]);
}
/* chunk scales from 16 group scales of 16 elements: lanes 0-7 sc[2c], 8-15 sc[2c+1] */
INLINE void scales_16(kblk *k, const int16_t sc[16]) {
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) k->s[c] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * c + 1]), _mm_set1_epi16(sc[2 * c]));
}

INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* One block of one activation row. The two accumulators are the low and high 8 lanes of the
 * AVX-512 path's 16 (even and odd 32-element chunks), with the same integer lanes and the same
 * float operations, so both paths give the same bits. */
INLINE void kblock_row(const kblk *k, const bl_block_q8_K *y, __m256 *lo, __m256 *hi, const int is_signed, const int has_min) {
  __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
  _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++) {
    __m256i a = load32((const uint8_t *)y->qs + 32 * c);
    if (is_signed) a = _mm256_sign_epi8(a, k->sg[c]);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(k->q[c], a), k->s[c]);
    if (c & 1) s1 = _mm256_add_epi32(s1, p);
    else s0 = _mm256_add_epi32(s0, p);
  }
  const float da = y->d;
  const __m256 d = _mm256_set1_ps(k->d * da);
  *lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), d, *lo);
  *hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), d, *hi);
  if (has_min) {
    const __m256i m = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), k->mn);
    *lo = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(k->dmin * da), *lo);
  }
}

#define KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, NA)                                                     \
  static void NAME##_##NA(int64_t nb, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a,       \
                          float *const *y) {                                                              \
    for (int i = 0; i < nw; i++) {                                                                        \
      const uint8_t *wr = w + i * ws;                                                                     \
      __m256 lo[NA], hi[NA];                                                                              \
      _Pragma("GCC unroll 8") for (int r = 0; r < NA; r++) lo[r] = hi[r] = _mm256_setzero_ps();           \
      for (int64_t b = 0; b < nb; b++) {                                                                  \
        kblk k;                                                                                           \
        _Pragma("GCC unroll 4") for (int l = 0; l < ((BSZ) + 63) / 64; l++)                               \
            _mm_prefetch((const char *)(wr + b * (BSZ) + 256 + 64 * l), _MM_HINT_T0);                     \
        UNPACK(wr + b * (BSZ), &k);                                                                       \
        _Pragma("GCC unroll 8") for (int r = 0; r < NA; r++)                                              \
            kblock_row(&k, (const bl_block_q8_K *)a[r] + b, &lo[r], &hi[r], SIGNED, HASMIN);              \
      }                                                                                                   \
      _Pragma("GCC unroll 8") for (int r = 0; r < NA; r++) y[r][i] = hsum8(_mm256_add_ps(hi[r], lo[r]));  \
    }                                                                                                     \
  }

#define KTILE(NAME, UNPACK, BSZ, SIGNED, HASMIN)                                                           \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 1)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 2)                                                            \
  KTILE_N(NAME, UNPACK, BSZ, SIGNED, HASMIN, 4)                                                            \
  static void NAME(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,       \
                   float *const *y) {                                                                     \
    const int64_t nb = n / BL_QK_K;                                                                       \
    while (na > 0) {                                                                                      \
      const int take = na >= 4 ? 4 : na >= 2 ? 2 : 1;                                                     \
      if (take == 4) NAME##_4(nb, w, ws, nw, a, y);                                                       \
      else if (take == 2) NAME##_2(nb, w, ws, nw, a, y);                                                  \
      else NAME##_1(nb, w, ws, nw, a, y);                                                                 \
      a += take;                                                                                          \
      y += take;                                                                                          \
      na -= take;                                                                                         \
    }                                                                                                     \
  }

#endif
