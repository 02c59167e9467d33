/* bloomery CPU library: aarch64 Advanced SIMD activation quantizers (Q8_K, Q8_0, F16, BF16;
 * bit-exact with the reference quantizers of quants_*.c: rounding by the conversion's own mode,
 * fcvtns for round-to-even, fcvtas for roundf's halves away from zero) and the float helpers of
 * attention and the dense parts (f16 dot / axpy, SwiGLU and softmax exponentials by range
 * reduction and Cephes' polynomial, as the x86 paths). One table for the neon, dotprod and i8mm
 * paths: the helpers use base Advanced SIMD only. */
#if defined(__aarch64__) /* the whole file: aarch64 only */
#include "kernels.h"
#include "quants_impl.h"
#include <arm_neon.h>
#include <math.h>

#define INLINE static inline __attribute__((always_inline))

/* ---- Q8_K: iscale = -127 / (signed value of the first largest |x|), q = min(127, rne(iscale x)) ---- */
static void act_q8_K(const float *x, void *dst, int64_t n) {
  bl_block_q8_K *b = dst;
  for (int64_t i = 0; i < n / BL_QK_K; i++, b++, x += BL_QK_K) {
    float32x4_t mx = vdupq_n_f32(0.0f);
    for (int j = 0; j < 64; j++) mx = vmaxq_f32(mx, vabsq_f32(vld1q_f32(x + 4 * j)));
    const float amax = vmaxvq_f32(mx);
    if (amax == 0.0f) {
      memset(b, 0, sizeof *b);
      continue;
    }
    float max = 0.0f;
    for (int j = 0; j < BL_QK_K; j++)
      if (fabsf(x[j]) == amax) {
        max = x[j];
        break;
      }
    const float iscale = -127.0f / max;
    const float32x4_t vs = vdupq_n_f32(iscale);
    const int32x4_t top = vdupq_n_s32(127);
    for (int g = 0; g < 16; g++) {
      int32x4_t q[4];
      for (int k = 0; k < 4; k++) q[k] = vminq_s32(vcvtnq_s32_f32(vmulq_f32(vs, vld1q_f32(x + 16 * g + 4 * k))), top);
      const int16x8_t h0 = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1])), h1 = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
      vst1q_s8(b->qs + 16 * g, vcombine_s8(vmovn_s16(h0), vmovn_s16(h1)));
      b->bsums[g] = (int16_t)vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3])));
    }
    b->d = 1.0f / iscale;
  }
}

/* ---- Q8_0: d = amax / 127 (stored f16), q = roundf(x / d) ---- */
static void act_q8_0(const float *x, void *dst, int64_t n) {
  bl_block_q8_0 *b = dst;
  for (int64_t i = 0; i < n / 32; i++, b++, x += 32) {
    float32x4_t v[8], mx = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
      v[k] = vld1q_f32(x + 4 * k);
      mx = vmaxq_f32(mx, vabsq_f32(v[k]));
    }
    const float amax = vmaxvq_f32(mx);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = bl_f32_to_fp16(d);
    const float32x4_t vid = vdupq_n_f32(id);
    for (int h = 0; h < 2; h++) {
      int32x4_t q[4];
      for (int k = 0; k < 4; k++) q[k] = vcvtaq_s32_f32(vmulq_f32(v[4 * h + k], vid));
      const int16x8_t h0 = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1])), h1 = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
      vst1q_s8(b->qs + 16 * h, vcombine_s8(vmovn_s16(h0), vmovn_s16(h1)));
    }
  }
}

/* f16 conversions by fcvtn / fcvtl: round to nearest even, subnormals kept (FPCR as Linux and
 * macOS start a process); a NaN keeps its payload where the reference makes it 0x7e00. */
static void to_f16(const float *x, uint16_t *h, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(h + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; i++) h[i] = bl_f32_to_fp16(x[i]);
}

static void act_f16(const float *x, void *dst, int64_t n) { to_f16(x, dst, n); }

static void act_bf16(const float *x, void *dst, int64_t n) {
  uint16_t *h = dst;
  int64_t i = 0;
  const uint32x4_t absm = vdupq_n_u32(0x7fffffff), inf = vdupq_n_u32(0x7f800000), one = vdupq_n_u32(1);
  for (; i + 4 <= n; i += 4) {
    const uint32x4_t u = vld1q_u32((const uint32_t *)(x + i));
    const uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), vandq_u32(vshrq_n_u32(u, 16), one))), 16);
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, absm), inf);
    const uint32x4_t qn = vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(64));
    vst1_u16(h + i, vmovn_u32(vbslq_u32(nan, qn, r)));
  }
  for (; i < n; i++) h[i] = bl_f32_to_bf16(x[i]);
}

static void round_f16(float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vcvt_f32_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; i++) x[i] = bl_fp16_to_f32(bl_f32_to_fp16(x[i]));
}

INLINE float32x4_t load_h4(const uint16_t *h) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h))); }

/* Dot products: eight 4-lane accumulators over 32 elements a step (then 16, then 4), reduced in
 * a fixed tree; the tail one product at a time. */
#define DOT32(LOADY)                                                                                \
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0; \
  int64_t i = 0;                                                                                    \
  for (; i + 32 <= n; i += 32) {                                                                    \
    a0 = vfmaq_f32(a0, vld1q_f32(x + i), LOADY(i));                                                 \
    a1 = vfmaq_f32(a1, vld1q_f32(x + i + 4), LOADY(i + 4));                                         \
    a2 = vfmaq_f32(a2, vld1q_f32(x + i + 8), LOADY(i + 8));                                         \
    a3 = vfmaq_f32(a3, vld1q_f32(x + i + 12), LOADY(i + 12));                                       \
    a4 = vfmaq_f32(a4, vld1q_f32(x + i + 16), LOADY(i + 16));                                       \
    a5 = vfmaq_f32(a5, vld1q_f32(x + i + 20), LOADY(i + 20));                                       \
    a6 = vfmaq_f32(a6, vld1q_f32(x + i + 24), LOADY(i + 24));                                       \
    a7 = vfmaq_f32(a7, vld1q_f32(x + i + 28), LOADY(i + 28));                                       \
  }                                                                                                 \
  for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, vld1q_f32(x + i), LOADY(i));                        \
  const float32x4_t t = vaddq_f32(vaddq_f32(vaddq_f32(a0, a4), vaddq_f32(a1, a5)), vaddq_f32(vaddq_f32(a2, a6), vaddq_f32(a3, a7))); \
  float s = vaddvq_f32(t);

static float dot_f32(const float *x, const float *y, int64_t n) {
#define LY(k) vld1q_f32(y + (k))
  DOT32(LY)
#undef LY
  for (; i < n; i++) s += x[i] * y[i];
  return s;
}

static float dot_f16(const float *x, const uint16_t *h, int64_t n) {
#define LH(k) load_h4(h + (k))
  DOT32(LH)
#undef LH
  for (; i < n; i++) s += x[i] * bl_fp16_to_f32(h[i]);
  return s;
}

static void axpy_f16(float a, const uint16_t *h, float *y, int64_t n) {
  const float32x4_t va = vdupq_n_f32(a);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, load_h4(h + i)));
  for (; i < n; i++) y[i] += a * bl_fp16_to_f32(h[i]);
}

static void axpy_f32(float a, const float *x, float *y, int64_t n) {
  const float32x4_t va = vdupq_n_f32(a);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
  for (; i < n; i++) y[i] += a * x[i];
}

static void scale_f32(float a, float *y, int64_t n) {
  const float32x4_t va = vdupq_n_f32(a);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(va, vld1q_f32(y + i)));
  for (; i < n; i++) y[i] *= a;
}

/* exp(x) as simd_avx2_f.c: x = k ln2 + r (ln 2 in two parts), Cephes' polynomial, 2^k in two steps */
INLINE float32x4_t vexp(float32x4_t x) {
  const float32x4_t hi = vdupq_n_f32(88.72283f), lo = vdupq_n_f32(-87.33654f);
  const uint32x4_t over = vcgtq_f32(x, hi), under = vcltq_f32(x, lo);
  x = vminq_f32(vmaxq_f32(x, lo), hi);
  const float32x4_t k = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
  float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(0.693145751953125f));
  r = vfmsq_f32(r, k, vdupq_n_f32(1.428606765330187e-06f));
  float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
  p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
  const int32x4_t ki = vcvtq_s32_f32(k);
  const int32x4_t k1 = vshrq_n_s32(ki, 1), k2 = vsubq_s32(ki, k1);
  const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k1, vdupq_n_s32(127)), 23));
  const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k2, vdupq_n_s32(127)), 23));
  float32x4_t y = vmulq_f32(vmulq_f32(p, s1), s2);
  y = vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), under));
  return vbslq_f32(over, vdupq_n_f32(INFINITY), y);
}

static void swiglu(float *g, const float *u, int64_t n) {
  int64_t i = 0;
  const float32x4_t one = vdupq_n_f32(1.0f);
  for (; i + 4 <= n; i += 4) {
    const float32x4_t x = vld1q_f32(g + i);
    const float32x4_t e = vexp(vnegq_f32(x));
    vst1q_f32(g + i, vmulq_f32(vdivq_f32(x, vaddq_f32(one, e)), vld1q_f32(u + i)));
  }
  if (i < n) bl_swiglu_ref(g + i, u + i, n - i);
}

/* exp(x - m) in place; the sum in four 2-lane double accumulators over 8 values a step */
static double exp_sum(float *x, float m, int64_t n) {
  int64_t i = 0;
  const float32x4_t vm = vdupq_n_f32(m);
  float64x2_t s0 = vdupq_n_f64(0.0), s1 = s0, s2 = s0, s3 = s0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t e0 = vexp(vsubq_f32(vld1q_f32(x + i), vm));
    const float32x4_t e1 = vexp(vsubq_f32(vld1q_f32(x + i + 4), vm));
    vst1q_f32(x + i, e0);
    vst1q_f32(x + i + 4, e1);
    s0 = vaddq_f64(s0, vcvt_f64_f32(vget_low_f32(e0)));
    s1 = vaddq_f64(s1, vcvt_high_f64_f32(e0));
    s2 = vaddq_f64(s2, vcvt_f64_f32(vget_low_f32(e1)));
    s3 = vaddq_f64(s3, vcvt_high_f64_f32(e1));
  }
  double s = vaddvq_f64(vaddq_f64(vaddq_f64(s0, s2), vaddq_f64(s1, s3)));
  if (i < n) s += bl_exp_sum_ref(x + i, m, n - i);
  return s;
}

/* ---- gemm_f32: blocks of mr rows by nv vectors of 4 columns held in registers (4 x 4 or 1 x 8 accumulators);
 * the columns past the last whole vector by the reference's sums ---- */
INLINE void gemm_blk(const int mr, const int nv, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B,
                     int64_t ldb, float cs, float *C, int64_t ldc) {
  for (int64_t n = 0; n + 4 * nv <= N; n += 4 * nv) {
    float32x4_t c[4][8];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++) c[r][v] = cs == 0.0f ? vdupq_n_f32(0.0f) : vmulq_n_f32(vld1q_f32(C + r * ldc + n + 4 * v), cs);
    const float *b = B + n, *a = A;
    for (int64_t k = 0; k < K; k++, b += ldb, a += sak) {
      float32x4_t bv[8];
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++) bv[v] = vld1q_f32(b + 4 * v);
#pragma GCC unroll 4
      for (int r = 0; r < mr; r++) {
        const float av = a[r * sam];
#pragma GCC unroll 8
        for (int v = 0; v < nv; v++) c[r][v] = vfmaq_n_f32(c[r][v], bv[v], av);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
      for (int v = 0; v < nv; v++) vst1q_f32(C + r * ldc + n + 4 * v, c[r][v]);
  }
}

static void gemm_f32(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t ldb,
                     float cs, float *C, int64_t ldc) {
  const int64_t n16 = N / 16 * 16, n32 = N / 32 * 32, n4 = N / 4 * 4;
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) { /* four rows: 16 columns at a time, then 4 */
    gemm_blk(4, 4, n16, K, A + m * sam, sam, sak, B, ldb, cs, C + m * ldc, ldc);
    gemm_blk(4, 1, n4 - n16, K, A + m * sam, sam, sak, B + n16, ldb, cs, C + m * ldc + n16, ldc);
  }
  for (; m < M; m++) { /* a row: 32 columns at a time, then 4 */
    gemm_blk(1, 8, n32, K, A + m * sam, sam, sak, B, ldb, cs, C + m * ldc, ldc);
    gemm_blk(1, 1, n4 - n32, K, A + m * sam, sam, sak, B + n32, ldb, cs, C + m * ldc + n32, ldc);
  }
  if (n4 < N) bl_gemm_f32_ref(M, N - n4, K, A, sam, sak, B + n4, ldb, cs, C + n4, ldc);
}

void bl_neon_fill_f(bl_kernels *k) {
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

void bl_kernels_init_neon(bl_kernels *k, bl_path p) {
  bl_neon_fill_f(k);
  bl_neon_fill_q(k, p);
  bl_neon_fill_k(k, p);
  bl_neon_fill_attn(k);
}
#endif /* __aarch64__ */
