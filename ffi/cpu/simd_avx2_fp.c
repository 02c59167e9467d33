/* bloomery CPU library: AVX2 products of the checkpoint folders' float-coded weight rows (FP8, NVFP4,
 * MLX4, MLX8 of quants_fp.c) against F32 activation rows: each block decoded once into floats (E4M3 through
 * F16C, E2M1 through a byte shuffle), then a fused multiply-add per activation row. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c")

#define INLINE static inline __attribute__((always_inline))

INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* 16 E4M3 codes to 16 floats times d: the code's bits placed in an F16 (same mantissa, exponent bias
 * 15 instead of 7, subnormals included) times 2^8. */
INLINE void e4m3x16(const uint8_t *p, __m256 d, __m256 *lo, __m256 *hi) {
  const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x80)), 8),
                                    _mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7f)), 7));
  const __m256 k = _mm256_mul_ps(d, _mm256_set1_ps(256.0f));
  *lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k);
  *hi = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k);
}

/* 16 bytes of nibble pairs (low nibble first) to 32 nibbles in element order */
INLINE void nibbles(const uint8_t *p, __m128i *a, __m128i *b) {
  const __m128i v = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  *a = _mm_unpacklo_epi8(lo, hi);
  *b = _mm_unpackhi_epi8(lo, hi);
}

/* 16 small signed or unsigned bytes to two vectors of floats */
INLINE void i8x16(__m128i v, __m256 *lo, __m256 *hi) {
  *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
  *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v)));
}

/* decoders: one block into BE floats */
INLINE void dec_fp8(const uint8_t *p, __m256 *v) {
  const bl_block_fp8 *b = (const bl_block_fp8 *)p;
  const __m256 d = _mm256_set1_ps(b->d);
  e4m3x16(b->q, d, &v[0], &v[1]);
  e4m3x16(b->q + 16, d, &v[2], &v[3]);
}

INLINE void dec_nvfp4(const uint8_t *p, __m256 *v) {
  const bl_block_nvfp4 *b = (const bl_block_nvfp4 *)p;
  /* the doubled E2M1 values as bytes (halved back in the scale) */
  const __m128i tab = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  for (int h = 0; h < 2; h++) {
    __m128i a, c;
    nibbles(b->qs + 16 * h, &a, &c); /* groups 2h and 2h + 1 */
    const __m256 da = _mm256_set1_ps(0.5f * b->g * bl_e4m3_table[b->s[2 * h]]);
    const __m256 dc = _mm256_set1_ps(0.5f * b->g * bl_e4m3_table[b->s[2 * h + 1]]);
    __m256 x0, x1, x2, x3;
    i8x16(_mm_shuffle_epi8(tab, a), &x0, &x1);
    i8x16(_mm_shuffle_epi8(tab, c), &x2, &x3);
    v[4 * h + 0] = _mm256_mul_ps(x0, da);
    v[4 * h + 1] = _mm256_mul_ps(x1, da);
    v[4 * h + 2] = _mm256_mul_ps(x2, dc);
    v[4 * h + 3] = _mm256_mul_ps(x3, dc);
  }
}

INLINE void dec_mlx4(const uint8_t *p, __m256 *v) {
  const bl_block_mlx4 *b = (const bl_block_mlx4 *)p;
  const __m256 d = _mm256_set1_ps(b->d), m = _mm256_set1_ps(b->m);
  for (int h = 0; h < 2; h++) {
    __m128i a, c;
    nibbles(b->qs + 16 * h, &a, &c);
    __m256 x0, x1, x2, x3;
    i8x16(a, &x0, &x1);
    i8x16(c, &x2, &x3);
    v[4 * h + 0] = _mm256_fmadd_ps(x0, d, m);
    v[4 * h + 1] = _mm256_fmadd_ps(x1, d, m);
    v[4 * h + 2] = _mm256_fmadd_ps(x2, d, m);
    v[4 * h + 3] = _mm256_fmadd_ps(x3, d, m);
  }
}

INLINE void dec_mlx8(const uint8_t *p, __m256 *v) {
  const bl_block_mlx8 *b = (const bl_block_mlx8 *)p;
  const __m256 d = _mm256_set1_ps(b->d), m = _mm256_set1_ps(b->m);
  for (int k = 0; k < 8; k++) {
    const __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->q + 8 * k))));
    v[k] = _mm256_fmadd_ps(x, d, m);
  }
}

#define FTILE(name, dec, BE, BB)                                                                                 \
  static void name(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,             \
                   float *const *y) {                                                                            \
    if (na == 1) { /* one-token steps: two accumulators in registers */                                          \
      const float *x0 = (const float *)a[0];                                                                     \
      for (int i = 0; i < nw; i++) {                                                                             \
        const uint8_t *row = w + i * ws;                                                                         \
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();                                               \
        for (int64_t b = 0; b < n / BE; b++) {                                                                   \
          __m256 v[BE / 8];                                                                                      \
          dec(row + b * BB, v);                                                                                  \
          for (int k = 0; k < BE / 8; k += 2) {                                                                  \
            s0 = _mm256_fmadd_ps(v[k], _mm256_loadu_ps(x0 + b * BE + 8 * k), s0);                                \
            s1 = _mm256_fmadd_ps(v[k + 1], _mm256_loadu_ps(x0 + b * BE + 8 * (k + 1)), s1);                      \
          }                                                                                                      \
        }                                                                                                        \
        y[0][i] = hsum8(_mm256_add_ps(s0, s1));                                                                  \
      }                                                                                                          \
      return;                                                                                                    \
    }                                                                                                            \
    /* prompt tiles: a weight row decoded 512 values at a time into L1, then dotted with every activation row */ \
    for (int i = 0; i < nw; i++) {                                                                               \
      const uint8_t *row = w + i * ws;                                                                           \
      float acc[BL_TILE_A] = {0};                                                                                \
      float buf[512] __attribute__((aligned(64)));                                                               \
      for (int64_t c0 = 0; c0 < n; c0 += 512) {                                                                  \
        const int64_t len = n - c0 < 512 ? n - c0 : 512;                                                         \
        for (int64_t b = 0; b < len / BE; b++) {                                                                 \
          __m256 v[BE / 8];                                                                                      \
          dec(row + (c0 / BE + b) * BB, v);                                                                      \
          for (int k = 0; k < BE / 8; k++) _mm256_store_ps(buf + b * BE + 8 * k, v[k]);                          \
        }                                                                                                        \
        for (int r = 0; r < na; r++) {                                                                           \
          const float *x = (const float *)a[r] + c0;                                                             \
          __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();                                             \
          for (int64_t e = 0; e < len; e += 16) {                                                                \
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(buf + e), _mm256_loadu_ps(x + e), s0);                          \
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(buf + e + 8), _mm256_loadu_ps(x + e + 8), s1);                  \
          }                                                                                                      \
          acc[r] += hsum8(_mm256_add_ps(s0, s1));                                                                \
        }                                                                                                        \
      }                                                                                                          \
      for (int r = 0; r < na; r++) y[r][i] = acc[r];                                                             \
    }                                                                                                            \
  }

FTILE(tile_fp8, dec_fp8, 32, 36)
FTILE(tile_nvfp4, dec_nvfp4, 64, 40)
FTILE(tile_mlx4, dec_mlx4, 64, 40)
FTILE(tile_mlx8, dec_mlx8, 64, 72)

void bl_avx2_fill_fp(bl_kernels *k) {
  k->tile[BL_FP8] = tile_fp8;
  k->tile[BL_NVFP4_MO] = tile_nvfp4;
  k->tile[BL_MLX4] = tile_mlx4;
  k->tile[BL_MLX8] = tile_mlx8;
}
#endif /* __x86_64__ */
