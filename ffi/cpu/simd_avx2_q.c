/* bloomery CPU library: AVX2 products of the 32-element block types against Q8_0 activation
 * rows - Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 - and of the float types F16, BF16, F32 against rows of
 * their own type. A 32-block is unpacked once into signed 8-bit weights (|w| for vpmaddubsw, w
 * for the signs vpsignb puts on the activation) and used for up to BL_TILE_A rows. Float rows:
 * products in f32 (exact for f16 and bf16 pairs) summed in double, as the reference does. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>

#pragma GCC target("avx2,fma,f16c,bmi2")

#define INLINE static inline __attribute__((always_inline))

typedef struct {
  __m256i q;  /* |w| of the 32 elements */
  __m256i w;  /* the signed weights */
  float d;
} qblk;

INLINE float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* The 16 bytes of nibbles as 32 values: low nibbles first, then high nibbles. */
INLINE __m256i nibbles(const uint8_t *qs) {
  const __m128i x = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
}

INLINE void set_signed(qblk *k, __m256i w) {
  k->w = w;
  k->q = _mm256_sign_epi8(w, w);
}

/* the 32 bits of qh as 32 bytes: 0x10 where the bit is set */
INLINE __m256i bits_to_bytes(uint32_t qh) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

INLINE void unpack_q4_0(const uint8_t *p, qblk *k) {
  const bl_block_q4_0 *b = (const bl_block_q4_0 *)p;
  set_signed(k, _mm256_sub_epi8(nibbles(b->qs), _mm256_set1_epi8(8)));
  k->d = h2f(b->d);
}

INLINE void unpack_q5_0(const uint8_t *p, qblk *k) {
  const bl_block_q5_0 *b = (const bl_block_q5_0 *)p;
  uint32_t qh;
  memcpy(&qh, b->qh, 4);
  const __m256i hb = bits_to_bytes(qh);
  set_signed(k, _mm256_sub_epi8(_mm256_or_si256(nibbles(b->qs), hb), _mm256_set1_epi8(16)));
  k->d = h2f(b->d);
}

INLINE void unpack_q8_0(const uint8_t *p, qblk *k) {
  const bl_block_q8_0 *b = (const bl_block_q8_0 *)p;
  set_signed(k, _mm256_loadu_si256((const __m256i *)b->qs));
  k->d = h2f(b->d);
}

INLINE void unpack_iq4_nl(const uint8_t *p, qblk *k) {
  const bl_block_iq4_nl *b = (const bl_block_iq4_nl *)p;
  const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bl_kvalues_iq4nl));
  set_signed(k, _mm256_shuffle_epi8(tab, nibbles(b->qs)));
  k->d = h2f(b->d);
}

INLINE void unpack_mxfp4(const uint8_t *p, qblk *k) {
  const bl_block_mxfp4 *b = (const bl_block_mxfp4 *)p;
  const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bl_kvalues_mxfp4));
  set_signed(k, _mm256_shuffle_epi8(tab, nibbles(b->qs)));
  k->d = bl_e8m0_to_f32_half(b->e);
}

INLINE __m256 qblock_row(const qblk *k, const bl_block_q8_0 *y, __m256 acc) {
  const __m256i a = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y->qs), k->w);
  const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(k->q, a), _mm256_set1_epi16(1));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(k->d * h2f(y->d)), acc);
}

INLINE float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#define QTILE_N(NAME, UNPACK, BSZ, NA)                                                                       \
  static void NAME##_##NA(int64_t nb, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a,       \
                          float *const *y) {                                                              \
    for (int i = 0; i < nw; i++) {                                                                        \
      const uint8_t *wr = w + i * ws;                                                                     \
      __m256 acc[NA];                                                                                     \
      _Pragma("GCC unroll 8") for (int r = 0; r < NA; r++) acc[r] = _mm256_setzero_ps();                                          \
      for (int64_t b = 0; b < nb; b++) {                                                                  \
        qblk k;                                                                                           \
        UNPACK(wr + b * (BSZ), &k);                                                                       \
        _Pragma("GCC unroll 8") for (int r = 0; r < NA; r++) acc[r] =                                     \
            qblock_row(&k, (const bl_block_q8_0 *)a[r] + b, acc[r]);                                      \
      }                                                                                                   \
      _Pragma("GCC unroll 8") for (int r = 0; r < NA; r++) y[r][i] = hsum256(acc[r]);                                             \
    }                                                                                                     \
  }

#define QTILE(NAME, UNPACK, BSZ)                                                                           \
  QTILE_N(NAME, UNPACK, BSZ, 1)                                                                            \
  QTILE_N(NAME, UNPACK, BSZ, 2)                                                                            \
  QTILE_N(NAME, UNPACK, BSZ, 4)                                                                            \
  QTILE_N(NAME, UNPACK, BSZ, 8)                                                                            \
  static void NAME(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,       \
                   float *const *y) {                                                                     \
    const int64_t nb = n / 32;                                                                            \
    while (na > 0) {                                                                                      \
      const int take = na >= 8 ? 8 : na >= 4 ? 4 : na >= 2 ? 2 : 1;                                      \
      switch (take) {                                                                                     \
        case 8: NAME##_8(nb, w, ws, nw, a, y); break;                                                     \
        case 4: NAME##_4(nb, w, ws, nw, a, y); break;                                                     \
        case 2: NAME##_2(nb, w, ws, nw, a, y); break;                                                     \
        default: NAME##_1(nb, w, ws, nw, a, y); break;                                                    \
      }                                                                                                   \
      a += take;                                                                                          \
      y += take;                                                                                          \
      na -= take;                                                                                         \
    }                                                                                                     \
  }

QTILE(tile_q4_0, unpack_q4_0, 18)
QTILE(tile_q5_0, unpack_q5_0, 22)
QTILE(tile_q8_0, unpack_q8_0, 34)
QTILE(tile_iq4_nl, unpack_iq4_nl, 18)
QTILE(tile_mxfp4, unpack_mxfp4, 17)

/* ---- float rows: 8 elements at a time as f32, products summed in two double vectors ---- */

INLINE __m256 load_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
INLINE __m256 load_bf16(const uint8_t *p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
INLINE __m256 load_f32(const uint8_t *p) { return _mm256_loadu_ps((const float *)p); }

INLINE float one_f16(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
INLINE float one_bf16(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return bl_bf16_to_f32(h);
}
INLINE float one_f32(const uint8_t *p) {
  float f;
  memcpy(&f, p, 4);
  return f;
}

#define FTILE(NAME, LOAD, ONE, ESZ)                                                                        \
  static void NAME(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,       \
                   float *const *y) {                                                                     \
    const int64_t n8 = n / 8 * 8;                                                                         \
    for (int i = 0; i < nw; i++) {                                                                        \
      const uint8_t *wr = w + i * ws;                                                                     \
      for (int r = 0; r < na; r++) {                                                                      \
        __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();                                       \
        for (int64_t k = 0; k < n8; k += 8) {                                                             \
          const __m256 p = _mm256_mul_ps(LOAD(wr + k * (ESZ)), LOAD(a[r] + k * (ESZ)));                   \
          s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));                             \
          s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));                           \
        }                                                                                                 \
        const __m256d t = _mm256_add_pd(s0, s1);                                                          \
        const __m128d u = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));            \
        double s = _mm_cvtsd_f64(_mm_add_sd(u, _mm_unpackhi_pd(u, u)));                                   \
        for (int64_t k = n8; k < n; k++) s += (double)(ONE(wr + k * (ESZ)) * ONE(a[r] + k * (ESZ)));      \
        y[r][i] = (float)s;                                                                               \
      }                                                                                                   \
    }                                                                                                     \
  }

FTILE(tile_f16, load_f16, one_f16, 2)
FTILE(tile_bf16, load_bf16, one_bf16, 2)
FTILE(tile_f32, load_f32, one_f32, 4)

void bl_avx2_fill_q(bl_kernels *k) {
  k->tile[BL_Q4_0] = tile_q4_0;
  k->tile[BL_Q5_0] = tile_q5_0;
  k->tile[BL_Q8_0] = tile_q8_0;
  k->tile[BL_IQ4_NL] = tile_iq4_nl;
  k->tile[BL_MXFP4] = tile_mxfp4;
  k->tile[BL_F16] = tile_f16;
  k->tile[BL_BF16] = tile_bf16;
  k->tile[BL_F32] = tile_f32;
}
#endif /* __x86_64__ */
