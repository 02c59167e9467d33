/* bloomery CPU library: AVX-512 products of the checkpoint folders' float-coded weight rows (FP8, NVFP4,
 * MLX4, MLX8 of quants_fp.c) against F32 activation rows: as simd_avx2_fp.c, 16 floats a vector (E4M3 through
 * F16C's 16-wide conversion, E2M1 through a byte shuffle). */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

#define INLINE static inline __attribute__((always_inline))

/* 16 E4M3 codes to 16 floats times d (the code's bits in an F16, times 2^8) */
INLINE __m512 e4m3x16(const uint8_t *p, float d) {
  const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
  const __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x80)), 8),
                                    _mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x7f)), 7));
  return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(d * 256.0f));
}

/* 16 bytes of nibble pairs (low nibble first) to 32 nibbles in element order */
INLINE void nibbles(const uint8_t *p, __m128i *a, __m128i *b) {
  const __m128i v = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(v, m), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
  *a = _mm_unpacklo_epi8(lo, hi);
  *b = _mm_unpackhi_epi8(lo, hi);
}

INLINE __m512 i8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

INLINE void dec_fp8(const uint8_t *p, __m512 *v) {
  const bl_block_fp8 *b = (const bl_block_fp8 *)p;
  v[0] = e4m3x16(b->q, b->d);
  v[1] = e4m3x16(b->q + 16, b->d);
}

INLINE void dec_nvfp4(const uint8_t *p, __m512 *v) {
  const bl_block_nvfp4 *b = (const bl_block_nvfp4 *)p;
  const __m128i tab = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12); /* doubled E2M1 */
  for (int h = 0; h < 2; h++) {
    __m128i a, c;
    nibbles(b->qs + 16 * h, &a, &c); /* groups 2h and 2h + 1 */
    v[2 * h] = _mm512_mul_ps(i8x16(_mm_shuffle_epi8(tab, a)), _mm512_set1_ps(0.5f * b->g * bl_e4m3_table[b->s[2 * h]]));
    v[2 * h + 1] = _mm512_mul_ps(i8x16(_mm_shuffle_epi8(tab, c)), _mm512_set1_ps(0.5f * b->g * bl_e4m3_table[b->s[2 * h + 1]]));
  }
}

INLINE void dec_mlx4(const uint8_t *p, __m512 *v) {
  const bl_block_mlx4 *b = (const bl_block_mlx4 *)p;
  const __m512 d = _mm512_set1_ps(b->d), m = _mm512_set1_ps(b->m);
  for (int h = 0; h < 2; h++) {
    __m128i a, c;
    nibbles(b->qs + 16 * h, &a, &c);
    v[2 * h] = _mm512_fmadd_ps(i8x16(a), d, m);
    v[2 * h + 1] = _mm512_fmadd_ps(i8x16(c), d, m);
  }
}

INLINE void dec_mlx8(const uint8_t *p, __m512 *v) {
  const bl_block_mlx8 *b = (const bl_block_mlx8 *)p;
  const __m512 d = _mm512_set1_ps(b->d), m = _mm512_set1_ps(b->m);
  for (int k = 0; k < 4; k++) {
    const __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->q + 16 * k))));
    v[k] = _mm512_fmadd_ps(x, d, m);
  }
}

#define FTILE(name, dec, BE, BB)                                                                                 \
  static void name(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,             \
                   float *const *y) {                                                                            \
    if (na == 1) { /* one-token steps: two accumulators in registers */                                          \
      const float *x0 = (const float *)a[0];                                                                     \
      for (int i = 0; i < nw; i++) {                                                                             \
        const uint8_t *row = w + i * ws;                                                                         \
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();                                               \
        for (int64_t b = 0; b < n / BE; b++) {                                                                   \
          __m512 v[BE / 16];                                                                                     \
          dec(row + b * BB, v);                                                                                  \
          for (int k = 0; k < BE / 16; k += 2) {                                                                 \
            s0 = _mm512_fmadd_ps(v[k], _mm512_loadu_ps(x0 + b * BE + 16 * k), s0);                               \
            s1 = _mm512_fmadd_ps(v[k + 1], _mm512_loadu_ps(x0 + b * BE + 16 * (k + 1)), s1);                     \
          }                                                                                                      \
        }                                                                                                        \
        y[0][i] = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));                                                   \
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
          __m512 v[BE / 16];                                                                                     \
          dec(row + (c0 / BE + b) * BB, v);                                                                      \
          for (int k = 0; k < BE / 16; k++) _mm512_store_ps(buf + b * BE + 16 * k, v[k]);                        \
        }                                                                                                        \
        for (int r = 0; r < na; r++) {                                                                           \
          const float *x = (const float *)a[r] + c0;                                                             \
          __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();                                             \
          for (int64_t e = 0; e < len; e += 32) {                                                                \
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(buf + e), _mm512_loadu_ps(x + e), s0);                          \
            s1 = _mm512_fmadd_ps(_mm512_loadu_ps(buf + e + 16), _mm512_loadu_ps(x + e + 16), s1);                \
          }                                                                                                      \
          acc[r] += _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));                                                 \
        }                                                                                                        \
      }                                                                                                          \
      for (int r = 0; r < na; r++) y[r][i] = acc[r];                                                             \
    }                                                                                                            \
  }

FTILE(tile_fp8, dec_fp8, 32, 36)
FTILE(tile_nvfp4, dec_nvfp4, 64, 40)
FTILE(tile_mlx4, dec_mlx4, 64, 40)
FTILE(tile_mlx8, dec_mlx8, 64, 72)

void bl_avx512_fill_fp(bl_kernels *k) {
  k->tile[BL_FP8] = tile_fp8;
  k->tile[BL_NVFP4_MO] = tile_nvfp4;
  k->tile[BL_MLX4] = tile_mlx4;
  k->tile[BL_MLX8] = tile_mlx8;
}
#endif /* __x86_64__ */
