/* bloomery CPU library: AVX-512 activation quantizers (Q8_K, Q8_0, F16, BF16; bit-exact with the
 * reference quantizers of quants_*.c) and the float helpers of attention and the dense parts
 * (f16 dot / axpy with F16C, SwiGLU and softmax exponentials). The exponential is a range
 * reduction by ln 2 and Cephes' polynomial for expf: within 2 ulp of expf over the range used. */
#if defined(__x86_64__) /* the whole file: x86-64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <immintrin.h>
#include <math.h>

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")

#define INLINE static inline __attribute__((always_inline))

INLINE float hmax(__m512 v) { return _mm512_reduce_max_ps(v); }

/* ---- Q8_K: iscale = -127 / (signed value of the first largest |x|), q = min(127, rne(iscale x)) ---- */
static void act_q8_K(const float *x, void *dst, int64_t n) {
  bl_block_q8_K *b = dst;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < n / BL_QK_K; i++, b++, x += BL_QK_K) {
    __m512 mx = _mm512_setzero_ps();
    for (int j = 0; j < 16; j++) mx = _mm512_max_ps(mx, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * j)));
    const float amax = hmax(mx);
    if (amax == 0.0f) {
      memset(b, 0, sizeof *b);
      continue;
    }
    float max = 0.0f;
    const __m512 va = _mm512_set1_ps(amax);
    for (int j = 0; j < 16; j++) {
      const __mmask16 m = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + 16 * j)), va, _CMP_EQ_OQ);
      if (m) {
        max = x[16 * j + __builtin_ctz(m)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 vs = _mm512_set1_ps(iscale);
    const __m512i top = _mm512_set1_epi32(127);
    for (int j = 0; j < 16; j++) {
      __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * j)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm512_min_epi32(q, top);
      _mm_storeu_si128((__m128i *)(b->qs + 16 * j), _mm512_cvtepi32_epi8(q));
      b->bsums[j] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    b->d = 1.0f / iscale;
  }
}

/* The same values in lane order (simd_avx512_kl.c), for the products of batches. */
void bl_avx512_act_q8k_lanes(const float *x, void *dst, int64_t n) {
  act_q8_K(x, dst, n);
  bl_block_q8_K *b = dst;
  for (int64_t i = 0; i < n / BL_QK_K; i++) {
    int8_t nat[256];
    memcpy(nat, b[i].qs, 256);
    bl_avx512_q8k_to_lanes(nat, b[i].qs);
  }
}

/* q = roundf(t): to nearest, halves away from zero (t - trunc(t) is exact). */
INLINE __m512i round_away(__m512 t) {
  const __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_abs_ps(_mm512_sub_ps(t, r));
  const __mmask16 up = _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(t, _mm512_set1_ps(-0.0f)));
  return _mm512_cvtps_epi32(_mm512_mask_add_ps(r, up, r, one));
}

/* ---- Q8_0: d = amax / 127 (stored f16), q = roundf(x / d) ---- */
static void act_q8_0(const float *x, void *dst, int64_t n) {
  bl_block_q8_0 *b = dst;
  for (int64_t i = 0; i < n / 32; i++, b++, x += 32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = hmax(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m512 vid = _mm512_set1_ps(id);
    _mm_storeu_si128((__m128i *)b->qs, _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(v0, vid))));
    _mm_storeu_si128((__m128i *)(b->qs + 16), _mm512_cvtepi32_epi8(round_away(_mm512_mul_ps(v1, vid))));
  }
}

static void to_f16(const float *x, uint16_t *h, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(h + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) h[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

static void act_f16(const float *x, void *dst, int64_t n) { to_f16(x, dst, n); }

/* bfloat16 by integer rounding (to nearest even; NaN kept quiet), as the reference does */
static void act_bf16(const float *x, void *dst, int64_t n) {
  uint16_t *h = dst;
  int64_t i = 0;
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)))), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs), inf);
    const __m512i q = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
    _mm256_storeu_si256((__m256i *)(h + i), _mm512_cvtepi32_epi16(q));
  }
  for (; i < n; i++) h[i] = bl_f32_to_bf16(x[i]);
}

static void round_f16(float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(x + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < n; i++) x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

/* ---- float helpers ---- */

static float dot_f32(const float *x, const float *y, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < n; i++) s += x[i] * y[i];
  return s;
}

static float dot_f16(const float *x, const uint16_t *h, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i + 16))), a1);
  }
  for (; i + 16 <= n; i += 16)
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))), a0);
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < n; i++) s += x[i] * _cvtsh_ss(h[i]);
  return s;
}

static void axpy_f16(float a, const uint16_t *h, float *y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))), _mm512_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * _cvtsh_ss(h[i]);
}

static void axpy_f32(float a, const float *x, float *y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  for (; i < n; i++) y[i] += a * x[i];
}

static void scale_f32(float a, float *y, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(va, _mm512_loadu_ps(y + i)));
  for (; i < n; i++) y[i] *= a;
}

/* exp(x): x = k ln2 + r (|r| <= ln2/2, ln2 split in two parts), exp(r) by a degree-6 polynomial,
 * times 2^k built in the exponent; below -87.3 the result is 0, above 88.7 infinity. */
INLINE __m512 vexp(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.72283f), lo = _mm512_set1_ps(-87.33654f);
  const __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  /* scale by 2^k in two steps so that k = -126..128 stays representable */
  const __m512i ki = _mm512_cvtps_epi32(k);
  const __m512i k1 = _mm512_srai_epi32(ki, 1), k2 = _mm512_sub_epi32(ki, k1);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, _mm512_set1_epi32(127)), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, _mm512_set1_epi32(127)), 23));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  y = _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
  return _mm512_mask_mov_ps(y, over, _mm512_set1_ps(INFINITY));
}

static void swiglu(float *g, const float *u, int64_t n) {
  int64_t i = 0;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    const __m512 e = vexp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    _mm512_storeu_ps(g + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
  }
  if (i < n) bl_swiglu_ref(g + i, u + i, n - i);
}

static double exp_sum(float *x, float m, int64_t n) {
  int64_t i = 0;
  const __m512 vm = _mm512_set1_ps(m);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (; i + 16 <= n; i += 16) {
    const __m512 e = vexp(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(x + i, e);
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  double s = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  if (i < n) s += bl_exp_sum_ref(x + i, m, n - i);
  return s;
}

/* ---- gemm_f32: blocks of mr rows by nv vectors of 16 columns held in registers (16 accumulators), the tail
 * columns masked ---- */
INLINE __mmask16 cols_mask(int64_t rest) { return rest >= 16 ? (__mmask16)0xffff : rest <= 0 ? 0 : (__mmask16)((1u << rest) - 1); }

INLINE void gemm_blk(const int mr, const int nv, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B,
                     int64_t ldb, float cs, float *C, int64_t ldc) {
  const __m512 vcs = _mm512_set1_ps(cs);
  for (int64_t n = 0; n < N; n += 16 * nv) {
    __mmask16 mk[8];
    __m512 c[8][8];
#pragma GCC unroll 8
    for (int v = 0; v < nv; v++) mk[v] = cols_mask(N - n - 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++)
        c[r][v] = cs == 0.0f ? _mm512_setzero_ps() : _mm512_mul_ps(vcs, _mm512_maskz_loadu_ps(mk[v], C + r * ldc + n + 16 * v));
    const float *b = B + n, *a = A;
    for (int64_t k = 0; k < K; k++, b += ldb, a += sak) {
      __m512 bv[8];
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++) bv[v] = _mm512_maskz_loadu_ps(mk[v], b + 16 * v);
#pragma GCC unroll 8
      for (int r = 0; r < mr; r++) {
        const __m512 av = _mm512_set1_ps(a[r * sam]);
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) c[r][v] = _mm512_fmadd_ps(av, bv[v], c[r][v]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++) _mm512_mask_storeu_ps(C + r * ldc + n + 16 * v, mk[v], c[r][v]);
  }
}

static void gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t ldb,
                     float cs, float *C, int64_t ldc) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) gemm_blk(4, 4, N, K, A + m * sam, sam, sak, B, ldb, cs, C + m * ldc, ldc);
  for (; m < M; m++) gemm_blk(1, 8, N, K, A + m * sam, sam, sak, B, ldb, cs, C + m * ldc, ldc);
}

void bl_avx512_fill_f(bl_kernels *k) {
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

void bl_kernels_init_avx512(bl_kernels *k) {
  bl_avx512_fill_f(k);
  bl_avx512_fill_k(k);
  bl_avx512_fill_iq(k);
  bl_avx512_fill_q(k);
  bl_avx512_fill_kl(k);
  bl_avx512_fill_attn(k);
  bl_avx512_fill_fp(k); /* FP8, NVFP4, MLX4 (simd_avx512_fp.c) */
}
#endif /* __x86_64__ */
