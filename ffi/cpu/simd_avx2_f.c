/* bloomery CPU library: AVX2 activation quantizers (Q8_K, Q8_0, F16, BF16; bit-exact with the
 * reference quantizers of quants_*.c, rounding by explicit modes, never by MXCSR) and the float
 * helpers of attention and the dense parts (f16 dot / axpy with F16C, SwiGLU and softmax
 * exponentials by range reduction and Cephes' polynomial for expf). */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>
#include <math.h>

#pragma GCC target("avx2,fma,f16c,bmi2")

#define INLINE static inline __attribute__((always_inline))

INLINE float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
INLINE int hsum8i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
INLINE __m256 vabs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

/* 32 int32 (four vectors, values in -127..127) to 32 int8 in order */
INLINE void store_i8(int8_t *dst, __m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i x = _mm256_packs_epi16(ab, cd);
  /* packs interleave the 128-bit lanes: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1 */
  _mm256_storeu_si256((__m256i *)dst, _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

static void act_q8_K(const float *x, void *dst, int64_t n) {
  bl_block_q8_K *b = dst;
  for (int64_t i = 0; i < n / BL_QK_K; i++, b++, x += BL_QK_K) {
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < 32; j++) mx = _mm256_max_ps(mx, vabs(_mm256_loadu_ps(x + 8 * j)));
    const float amax = hmax8(mx);
    if (amax == 0.0f) {
      memset(b, 0, sizeof *b);
      continue;
    }
    float max = 0.0f;
    const __m256 va = _mm256_set1_ps(amax);
    for (int j = 0; j < 32; j++) {
      const int m = _mm256_movemask_ps(_mm256_cmp_ps(vabs(_mm256_loadu_ps(x + 8 * j)), va, _CMP_EQ_OQ));
      if (m) {
        max = x[8 * j + __builtin_ctz((unsigned)m)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127);
    for (int j = 0; j < 8; j++) {
      __m256i q[4];
      for (int k = 0; k < 4; k++) {
        const __m256 v = _mm256_round_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 32 * j + 8 * k)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_min_epi32(_mm256_cvttps_epi32(v), top);
      }
      store_i8(b->qs + 32 * j, q[0], q[1], q[2], q[3]);
      b->bsums[2 * j] = (int16_t)hsum8i(_mm256_add_epi32(q[0], q[1]));
      b->bsums[2 * j + 1] = (int16_t)hsum8i(_mm256_add_epi32(q[2], q[3]));
    }
    b->d = 1.0f / iscale;
  }
}

/* roundf: to nearest, halves away from zero (t - trunc(t) is exact) */
INLINE __m256i round_away(__m256 t) {
  const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(vabs(_mm256_sub_ps(t, r)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(t, _mm256_set1_ps(-0.0f)));
  return _mm256_cvttps_epi32(_mm256_add_ps(r, _mm256_and_ps(up, one)));
}

static void act_q8_0(const float *x, void *dst, int64_t n) {
  bl_block_q8_0 *b = dst;
  for (int64_t i = 0; i < n / 32; i++, b++, x += 32) {
    __m256 v[4], mx = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      mx = _mm256_max_ps(mx, vabs(v[k]));
    }
    const float amax = hmax8(mx);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256 vid = _mm256_set1_ps(id);
    store_i8(b->qs, round_away(_mm256_mul_ps(v[0], vid)), round_away(_mm256_mul_ps(v[1], vid)),
             round_away(_mm256_mul_ps(v[2], vid)), round_away(_mm256_mul_ps(v[3], vid)));
  }
}

static void to_f16(const float *x, uint16_t *h, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) h[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

static void act_f16(const float *x, void *dst, int64_t n) { to_f16(x, dst, n); }

static void act_bf16(const float *x, void *dst, int64_t n) {
  uint16_t *h = dst;
  int64_t i = 0;
  const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf);
    const __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    const __m256i q = _mm256_blendv_epi8(r, qn, nan);
    /* 8 int32 (< 65536) to 8 uint16 */
    const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storeu_si128((__m128i *)(h + i), p);
  }
  for (; i < n; i++) h[i] = bl_f32_to_bf16(x[i]);
}

static void round_f16(float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < n; i++) x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

INLINE __m256 load_h8(const uint16_t *h) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)); }

/* The dot products keep the AVX-512 path's 2 x 16 lanes as 4 x 8 (a0 a1 are its first
 * accumulator's low and high halves, b0 b1 its second's) and reduce them in its order. */
#define DOT16(LOADY)                                                                             \
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;                                    \
  int64_t i = 0;                                                                                 \
  for (; i + 32 <= n; i += 32) {                                                                 \
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), LOADY(i), a0);                                  \
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), LOADY(i + 8), a1);                          \
    b0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), LOADY(i + 16), b0);                        \
    b1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), LOADY(i + 24), b1);                        \
  }                                                                                              \
  for (; i + 16 <= n; i += 16) {                                                                 \
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), LOADY(i), a0);                                  \
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), LOADY(i + 8), a1);                          \
  }                                                                                              \
  float s = hsum8(_mm256_add_ps(_mm256_add_ps(a1, b1), _mm256_add_ps(a0, b0)));

static float dot_f32(const float *x, const float *y, int64_t n) {
#define LY(k) _mm256_loadu_ps(y + (k))
  DOT16(LY)
#undef LY
  for (; i < n; i++) s += x[i] * y[i];
  return s;
}

static float dot_f16(const float *x, const uint16_t *h, int64_t n) {
#define LH(k) load_h8(h + (k))
  DOT16(LH)
#undef LH
  for (; i < n; i++) s += x[i] * _cvtsh_ss(h[i]);
  return s;
}

static void axpy_f16(float a, const uint16_t *h, float *y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load_h8(h + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * _cvtsh_ss(h[i]);
}

static void axpy_f32(float a, const float *x, float *y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * x[i];
}

static void scale_f32(float a, float *y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; i++) y[i] *= a;
}

/* exp(x) as in simd_avx512_f.c: x = k ln2 + r, Cephes' polynomial, 2^k in two steps */
INLINE __m256 vexp(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.72283f), lo = _mm256_set1_ps(-87.33654f);
  const __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ), under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i ki = _mm256_cvttps_epi32(k);
  const __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_andnot_ps(under, y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), over);
}

static void swiglu(float *g, const float *u, int64_t n) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 e = vexp(_mm256_sub_ps(_mm256_setzero_ps(), x));
    _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  if (i < n) bl_swiglu_ref(g + i, u + i, n - i);
}

/* the AVX-512 path's two 8-lane double sums of 16 values, as four 4-lane halves */
static double exp_sum(float *x, float m, int64_t n) {
  int64_t i = 0;
  const __m256 vm = _mm256_set1_ps(m);
  __m256d s00 = _mm256_setzero_pd(), s01 = s00, s10 = s00, s11 = s00;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = vexp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    const __m256 e1 = vexp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
    _mm256_storeu_ps(x + i, e0);
    _mm256_storeu_ps(x + i + 8, e1);
    s00 = _mm256_add_pd(s00, _mm256_cvtps_pd(_mm256_castps256_ps128(e0)));
    s01 = _mm256_add_pd(s01, _mm256_cvtps_pd(_mm256_extractf128_ps(e0, 1)));
    s10 = _mm256_add_pd(s10, _mm256_cvtps_pd(_mm256_castps256_ps128(e1)));
    s11 = _mm256_add_pd(s11, _mm256_cvtps_pd(_mm256_extractf128_ps(e1, 1)));
  }
  /* the 8 lanes of (s0 + s1), reduced as _mm512_reduce_add_pd does: halves, then pairs */
  const __m256d lo = _mm256_add_pd(s00, s10), hi = _mm256_add_pd(s01, s11);
  const __m256d t = _mm256_add_pd(hi, lo);
  const __m128d u = _mm_add_pd(_mm256_extractf128_pd(t, 1), _mm256_castpd256_pd128(t));
  double s = _mm_cvtsd_f64(_mm_add_sd(u, _mm_unpackhi_pd(u, u)));
  if (i < n) s += bl_exp_sum_ref(x + i, m, n - i);
  return s;
}

/* ---- gemm_f32: blocks of mr rows by nv vectors of 8 columns held in registers (8 accumulators), the tail
 * columns masked ---- */
INLINE __m256i cols_mask(int64_t rest) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(rest < 8 ? (rest < 0 ? 0 : rest) : 8)), idx);
}

INLINE void gemm_blk(const int mr, const int nv, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B,
                     int64_t ldb, float cs, float *C, int64_t ldc) {
  const __m256 vcs = _mm256_set1_ps(cs);
  for (int64_t n = 0; n < N; n += 8 * nv) {
    __m256i mk[8];
    __m256 c[4][8];
    const int full = N - n >= 8 * nv;
#pragma GCC unroll 8
    for (int v = 0; v < nv; v++) mk[v] = cols_mask(N - n - 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++)
        c[r][v] = cs == 0.0f ? _mm256_setzero_ps() : _mm256_mul_ps(vcs, _mm256_maskload_ps(C + r * ldc + n + 8 * v, mk[v]));
    const float *b = B + n, *a = A;
    for (int64_t k = 0; k < K; k++, b += ldb, a += sak) {
      __m256 bv[8];
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++) bv[v] = full ? _mm256_loadu_ps(b + 8 * v) : _mm256_maskload_ps(b + 8 * v, mk[v]);
#pragma GCC unroll 4
      for (int r = 0; r < mr; r++) {
        const __m256 av = _mm256_broadcast_ss(a + r * sam);
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) c[r][v] = _mm256_fmadd_ps(av, bv[v], c[r][v]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++) _mm256_maskstore_ps(C + r * ldc + n + 8 * v, mk[v], c[r][v]);
  }
}

static void gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t ldb,
                     float cs, float *C, int64_t ldc) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) gemm_blk(4, 2, N, K, A + m * sam, sam, sak, B, ldb, cs, C + m * ldc, ldc);
  for (; m < M; m++) gemm_blk(1, 8, N, K, A + m * sam, sam, sak, B, ldb, cs, C + m * ldc, ldc);
}

void bl_avx2_fill_f(bl_kernels *k) {
  k->act[BL_Q8_K] = act_q8_K;
  k->act[BL_Q8_0] = act_q8_0;
  k->act[BL_F16] = act_f16;
  k->act[BL_BF16] = act_bf16;
  k->dot_f32 = dot_f32;
  k->dot_f16 = dot_f16;
  k->axpy_f16 = axpy_f16;
  k->to_f16 = to_f16;
  k->round_f16 = round_f16;
  k->swiglu = swiglu;
  k->exp_sum = exp_sum;
  k->axpy_f32 = axpy_f32;
  k->scale_f32 = scale_f32;
  k->gemm_f32 = gemm_f32;
}

void bl_kernels_init_avx2(bl_kernels *k) {
  bl_avx2_fill_f(k);
  bl_avx2_fill_k(k);
  bl_avx2_fill_iq(k);
  bl_avx2_fill_q(k);
  bl_avx2_fill_attn(k);
  bl_avx2_fill_fp(k);
}
#endif /* __x86_64__ */
