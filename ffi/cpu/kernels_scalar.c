/* bloomery CPU library: the scalar kernel path - every product through the reference vec_dot of
 * quants_*.c, the reference activation quantizers, and plain-C float helpers. It is the path
 * the SIMD paths are tested against and the one used where no SIMD path exists. */
#include "kernels.h"
#include "simd_attn.h"
#include <math.h>
#include <string.h>

void bl_tile_ref(int32_t type, int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,
                 float *const *y) {
  const bl_type_traits *tr = bl_traits(type);
  for (int i = 0; i < nw; i++)
    for (int r = 0; r < na; r++) tr->vec_dot(n, &y[r][i], w + i * ws, a[r]);
}

#define REF_TILE(id, nm)                                                                                   \
  static void tile_##nm(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na, \
                        float *const *y) {                                                                 \
    bl_tile_ref(id, n, w, ws, nw, a, na, y);                                                               \
  }
REF_TILE(BL_F32, f32)
REF_TILE(BL_F16, f16)
REF_TILE(BL_BF16, bf16)
REF_TILE(BL_Q4_0, q4_0)
REF_TILE(BL_Q4_1, q4_1)
REF_TILE(BL_Q5_0, q5_0)
REF_TILE(BL_Q5_1, q5_1)
REF_TILE(BL_Q8_0, q8_0)
REF_TILE(BL_Q2_K, q2_K)
REF_TILE(BL_Q3_K, q3_K)
REF_TILE(BL_Q4_K, q4_K)
REF_TILE(BL_Q5_K, q5_K)
REF_TILE(BL_Q6_K, q6_K)
REF_TILE(BL_IQ4_NL, iq4_nl)
REF_TILE(BL_IQ4_XS, iq4_xs)
REF_TILE(BL_MXFP4, mxfp4)
REF_TILE(BL_FP8, fp8)
REF_TILE(BL_NVFP4_MO, nvfp4)
REF_TILE(BL_MLX4, mlx4)
REF_TILE(BL_MLX8, mlx8)
REF_TILE(BL_IQ2_XXS, iq2_xxs)
REF_TILE(BL_IQ2_XS, iq2_xs)
REF_TILE(BL_IQ2_S, iq2_s)
REF_TILE(BL_IQ3_XXS, iq3_xxs)
REF_TILE(BL_IQ3_S, iq3_s)
REF_TILE(BL_IQ1_S, iq1_s)
REF_TILE(BL_IQ1_M, iq1_m)
#undef REF_TILE

float bl_dot_f32_ref(const float *x, const float *y, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
  return s;
}

float bl_dot_f16_ref(const float *x, const uint16_t *h, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * bl_fp16_to_f32(h[i]);
  return s;
}

void bl_axpy_f16_ref(float a, const uint16_t *h, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * bl_fp16_to_f32(h[i]);
}

void bl_to_f16_ref(const float *x, uint16_t *h, int64_t n) {
  for (int64_t i = 0; i < n; i++) h[i] = bl_f32_to_fp16(x[i]);
}

void bl_round_f16_ref(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = bl_fp16_to_f32(bl_f32_to_fp16(x[i]));
}

void bl_swiglu_ref(float *g, const float *u, int64_t n) {
  for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

double bl_exp_sum_ref(float *x, float m, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    x[i] = expf(x[i] - m);
    s += x[i];
  }
  return s;
}

static void axpy_f32_ref(float a, const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void scale_f32_ref(float a, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] *= a;
}

/* The reference quantizers of the activation types, reached through the traits. */
#define REF_ACT(id, nm)                                                 \
  static void act_##nm(const float *x, void *dst, int64_t n) {          \
    bl_traits(id)->from_float(x, dst, n);                               \
  }
REF_ACT(BL_F32, f32)
REF_ACT(BL_F16, f16)
REF_ACT(BL_BF16, bf16)
REF_ACT(BL_Q8_0, q8_0)
REF_ACT(BL_Q8_1, q8_1)
REF_ACT(BL_Q8_K, q8_K)
#undef REF_ACT

void bl_gemm_f32_ref(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t ldb,
                     float cs, float *C, int64_t ldc) {
  for (int64_t m = 0; m < M; m++) {
    float *c = C + m * ldc;
    for (int64_t n = 0; n < N; n++) c[n] = cs == 0.0f ? 0.0f : cs * c[n];
    for (int64_t k = 0; k < K; k++) {
      const float a = A[m * sam + k * sak], *b = B + k * ldb;
      for (int64_t n = 0; n < N; n++) c[n] += a * b[n];
    }
  }
}

void bl_attn_sub_generic(const bl_kernels *k, const float *q0, int64_t qstride, int G, const uint16_t *kr,
                         const uint16_t *vr, int64_t kd, int nb, int hd, float scale, float *st, float *work) {
  float *s = work;
  for (int hh = 0; hh < G; hh++) {
    const float *q = q0 + hh * qstride;
    float *m = st + hh * (hd + 2), *l = m + 1, *acc = m + 2;
    float mx = -INFINITY;
    for (int p = 0; p < nb; p++) {
      s[p] = k->dot_f16(q, kr + p * kd, hd) * scale;
      if (s[p] > mx) mx = s[p];
    }
    if (mx > *m) {
      if (*l > 0) {
        const float a = expf(*m - mx);
        *l *= a;
        k->scale_f32(a, acc, hd);
      }
      *m = mx;
    }
    *l += (float)k->exp_sum(s, *m, nb);
    for (int p = 0; p < nb; p++) k->axpy_f16(s[p], vr + p * kd, acc, hd);
  }
}

static void attn_prep_ref(const uint16_t *k, const uint16_t *v, int64_t kd, int nb, int hd, float *work) {
  (void)k, (void)v, (void)kd, (void)nb, (void)hd, (void)work;
}

static void attn_heads_ref(const float *q, int64_t qstride, int G, const uint16_t *kr, const uint16_t *vr, int64_t kd, int nb,
                           int hd, float scale, float *st, float *work) {
  bl_attn_sub_generic(&bl_kernels_scalar, q, qstride, G, kr, vr, kd, nb, hd, scale, st, work);
}

const bl_kernels bl_kernels_scalar = {
    .name = "scalar",
    .path = BL_PATH_SCALAR,
    .tile =
        {
            [BL_F32] = tile_f32, [BL_F16] = tile_f16, [BL_BF16] = tile_bf16, [BL_Q4_0] = tile_q4_0,
            [BL_Q4_1] = tile_q4_1, [BL_Q5_0] = tile_q5_0, [BL_Q5_1] = tile_q5_1, [BL_Q8_0] = tile_q8_0,
            [BL_Q2_K] = tile_q2_K, [BL_Q3_K] = tile_q3_K, [BL_Q4_K] = tile_q4_K, [BL_Q5_K] = tile_q5_K,
            [BL_Q6_K] = tile_q6_K, [BL_IQ4_NL] = tile_iq4_nl, [BL_IQ4_XS] = tile_iq4_xs, [BL_MXFP4] = tile_mxfp4,
            [BL_FP8] = tile_fp8, [BL_NVFP4_MO] = tile_nvfp4, [BL_MLX4] = tile_mlx4, [BL_MLX8] = tile_mlx8,
            [BL_IQ2_XXS] = tile_iq2_xxs, [BL_IQ2_XS] = tile_iq2_xs, [BL_IQ2_S] = tile_iq2_s, [BL_IQ3_XXS] = tile_iq3_xxs,
            [BL_IQ3_S] = tile_iq3_s, [BL_IQ1_S] = tile_iq1_s, [BL_IQ1_M] = tile_iq1_m,
        },
    .act =
        {
            [BL_F32] = act_f32, [BL_F16] = act_f16, [BL_BF16] = act_bf16, [BL_Q8_0] = act_q8_0,
            [BL_Q8_1] = act_q8_1, [BL_Q8_K] = act_q8_K,
        },
    .dot_f32 = bl_dot_f32_ref,
    .dot_f16 = bl_dot_f16_ref,
    .axpy_f16 = bl_axpy_f16_ref,
    .to_f16 = bl_to_f16_ref,
    .round_f16 = bl_round_f16_ref,
    .swiglu = bl_swiglu_ref,
    .exp_sum = bl_exp_sum_ref,
    .axpy_f32 = axpy_f32_ref,
    .scale_f32 = scale_f32_ref,
    .gemm_f32 = bl_gemm_f32_ref,
    .attn_prep = attn_prep_ref,
    .attn_heads = attn_heads_ref,
};
