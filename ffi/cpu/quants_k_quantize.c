/* bloomery CPU library: simple reference quantizers for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (min/max or
 * signed-extreme group scales, a least-squares refit of each group, the group scales quantized
 * against the super-block scale, then every element re-rounded with the scales as stored).
 * Correct and deterministic, not ggml-identical (ggml searches scales with importance weights). */
#include "quants_impl.h"
#include <math.h>

#define QK BL_QK_K

/* Round v to the nearest integer in [lo, hi] (NaN goes to lo). */
static inline int qround(float v, int lo, int hi) {
  if (!(v > (float)lo)) return lo;
  if (v >= (float)hi) return hi;
  return bl_nearest_int(v);
}

static float signed_absmax(const float *x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; j++) {
    if (fabsf(x[j]) > amax) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  return max;
}

/* Affine group fit x ~ a*q - b with q in [0, nmax], a >= 0, b >= 0 (b is the stored min, so the
 * represented minimum -b is never above 0). Start from min/max, refit (a, b) by least squares
 * on the chosen q once, keep the refit when it lowers the squared error. */
static void fit_affine(const float *x, int n, int nmax, float *a_out, float *b_out) {
  float mn = 0.0f, mx = x[0];
  for (int j = 0; j < n; j++) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
  float a = (mx - mn) / (float)nmax, b = -mn;
  if (a == 0.0f) {
    *a_out = 0.0f;
    *b_out = b;
    return;
  }
  float err0 = 0.0f, sq = 0.0f, sqq = 0.0f, sx = 0.0f, sxq = 0.0f;
  for (int j = 0; j < n; j++) {
    const int q = qround((x[j] + b) / a, 0, nmax);
    const float r = a * (float)q - b - x[j];
    err0 += r * r;
    sq += (float)q;
    sqq += (float)(q * q);
    sx += x[j];
    sxq += x[j] * (float)q;
  }
  const float det = (float)n * sqq - sq * sq;
  if (det > 0.0f) {
    const float a2 = ((float)n * sxq - sq * sx) / det;
    const float b2 = -(sx - a2 * sq) / (float)n;
    if (a2 > 0.0f && b2 >= 0.0f) {
      float err1 = 0.0f;
      for (int j = 0; j < n; j++) {
        const float r = a2 * (float)qround((x[j] + b2) / a2, 0, nmax) - b2 - x[j];
        err1 += r * r;
      }
      if (err1 < err0) {
        a = a2;
        b = b2;
      }
    }
  }
  *a_out = a;
  *b_out = b;
}

/* Symmetric group fit x ~ s*q, q in [-nneg, npos]: the signed extreme sits at -nneg, then s is
 * refit by least squares once. s may be negative. */
static float fit_symmetric(const float *x, int n, int nneg, int npos) {
  const float max = signed_absmax(x, n);
  if (max == 0.0f) return 0.0f;
  const float s = max / (float)-nneg;
  float sxq = 0.0f, sqq = 0.0f, err0 = 0.0f;
  for (int j = 0; j < n; j++) {
    const int q = qround(x[j] / s, -nneg, npos);
    sxq += x[j] * (float)q;
    sqq += (float)(q * q);
    const float r = s * (float)q - x[j];
    err0 += r * r;
  }
  const float s2 = sqq > 0.0f ? sxq / sqq : 0.0f;
  if (s2 == 0.0f) return s;
  float err1 = 0.0f;
  for (int j = 0; j < n; j++) {
    const float r = s2 * (float)qround(x[j] / s2, -nneg, npos) - x[j];
    err1 += r * r;
  }
  return err1 < err0 ? s2 : s;
}

/* Quantize group scales v[0..ng) against a super scale stored as fp16 in *d16_out:
 * d = max(v) / smax, each v rounded to [0, smax]. Returns the fp16 value as float. */
static float super_scale_unsigned(const float *v, int ng, int smax, uint16_t *d16_out, int *out) {
  float mx = 0.0f;
  for (int g = 0; g < ng; g++)
    if (v[g] > mx) mx = v[g];
  *d16_out = bl_f32_to_fp16(mx / (float)smax);
  const float d = bl_fp16_to_f32(*d16_out);
  for (int g = 0; g < ng; g++) out[g] = d > 0.0f ? qround(v[g] / d, 0, smax) : 0;
  return d;
}

/* ---- Q2_K ---- */

void bl_from_float_q2_K(const float *x, void *dst, int64_t n) {
  bl_block_q2_K *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    float a[16], m[16];
    int sc[16], mi[16];
    for (int g = 0; g < 16; g++) fit_affine(x + 16 * g, 16, 3, &a[g], &m[g]);
    uint16_t d16, dmin16;
    const float d = super_scale_unsigned(a, 16, 15, &d16, sc);
    const float dmin = super_scale_unsigned(m, 16, 15, &dmin16, mi);
    b->d = d16;
    b->dmin = dmin16;
    for (int g = 0; g < 16; g++) b->scales[g] = (uint8_t)(sc[g] | (mi[g] << 4));
    memset(b->qs, 0, sizeof b->qs);
    for (int e = 0; e < QK; e++) {
      const int g = e / 16, h = e / 128, j = (e % 128) / 32, l = e % 32;
      const float ad = d * (float)sc[g], bm = dmin * (float)mi[g];
      const int q = ad > 0.0f ? qround((x[e] + bm) / ad, 0, 3) : 0;
      b->qs[32 * h + l] |= (uint8_t)(q << (2 * j));
    }
  }
}

/* ---- Q3_K ---- */

void bl_from_float_q3_K(const float *x, void *dst, int64_t n) {
  bl_block_q3_K *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    float s[16];
    for (int g = 0; g < 16; g++) s[g] = fit_symmetric(x + 16 * g, 16, 4, 3);
    b->d = bl_f32_to_fp16(signed_absmax(s, 16) / -32.0f);
    const float d = bl_fp16_to_f32(b->d);
    int sc[16];
    for (int g = 0; g < 16; g++) sc[g] = d != 0.0f ? qround(s[g] / d, -32, 31) : 0;
    memset(b->scales, 0, sizeof b->scales);
    for (int k = 0; k < 16; k++) {
      const int u = sc[k] + 32;
      b->scales[k % 8] |= (uint8_t)((u & 15) << (k < 8 ? 0 : 4));
      b->scales[8 + k % 4] |= (uint8_t)((u >> 4) << (2 * (k / 4)));
    }
    memset(b->qs, 0, sizeof b->qs);
    memset(b->hmask, 0, sizeof b->hmask);
    for (int e = 0; e < QK; e++) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const float dl = d * (float)sc[e / 16];
      const int u = (dl != 0.0f ? qround(x[e] / dl, -4, 3) : 0) + 4;
      b->qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * j));
      b->hmask[l] |= (uint8_t)((u >> 2) << (4 * h + j));
    }
  }
}

/* ---- Q4_K and Q5_K: 8 groups of 32, 6-bit scale and min ---- */

static void pack_k4_scales(const int sc[8], const int m[8], uint8_t s[12]) {
  for (int k = 0; k < 4; k++) {
    s[k] = (uint8_t)(sc[k] | ((sc[k + 4] >> 4) << 6));
    s[k + 4] = (uint8_t)(m[k] | ((m[k + 4] >> 4) << 6));
    s[k + 8] = (uint8_t)((sc[k + 4] & 15) | ((m[k + 4] & 15) << 4));
  }
}

/* Fits the 8 groups; fills scales, d, dmin and q[256] in [0, nmax]. */
static void k4_quantize(const float *x, int nmax, uint16_t *d16, uint16_t *dmin16, uint8_t scales[12],
                        uint8_t q[QK]) {
  float a[8], m[8];
  int sc[8], mi[8];
  for (int g = 0; g < 8; g++) fit_affine(x + 32 * g, 32, nmax, &a[g], &m[g]);
  const float d = super_scale_unsigned(a, 8, 63, d16, sc);
  const float dmin = super_scale_unsigned(m, 8, 63, dmin16, mi);
  pack_k4_scales(sc, mi, scales);
  for (int e = 0; e < QK; e++) {
    const float ad = d * (float)sc[e / 32], bm = dmin * (float)mi[e / 32];
    q[e] = (uint8_t)(ad > 0.0f ? qround((x[e] + bm) / ad, 0, nmax) : 0);
  }
}

void bl_from_float_q4_K(const float *x, void *dst, int64_t n) {
  bl_block_q4_K *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    uint8_t q[QK];
    uint16_t d16, dmin16;
    k4_quantize(x, 15, &d16, &dmin16, b->scales, q);
    b->d = d16;
    b->dmin = dmin16;
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) b->qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

void bl_from_float_q5_K(const float *x, void *dst, int64_t n) {
  bl_block_q5_K *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    uint8_t q[QK];
    uint16_t d16, dmin16;
    k4_quantize(x, 31, &d16, &dmin16, b->scales, q);
    b->d = d16;
    b->dmin = dmin16;
    memset(b->qh, 0, sizeof b->qh);
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++)
        b->qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4));
    for (int e = 0; e < QK; e++) b->qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
  }
}

/* ---- Q6_K: 16 groups of 16, int8 scales, q in [-32, 31] ---- */

void bl_from_float_q6_K(const float *x, void *dst, int64_t n) {
  bl_block_q6_K *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    float s[16];
    for (int g = 0; g < 16; g++) s[g] = fit_symmetric(x + 16 * g, 16, 32, 31);
    b->d = bl_f32_to_fp16(signed_absmax(s, 16) / -128.0f);
    const float d = bl_fp16_to_f32(b->d);
    int sc[16];
    for (int g = 0; g < 16; g++) {
      sc[g] = d != 0.0f ? qround(s[g] / d, -128, 127) : 0;
      b->scales[g] = (int8_t)sc[g];
    }
    memset(b->ql, 0, sizeof b->ql);
    memset(b->qh, 0, sizeof b->qh);
    for (int e = 0; e < QK; e++) {
      const int h = e / 128, r = (e % 128) / 32, l = e % 32;
      const float dl = d * (float)sc[e / 16];
      const int u = (dl != 0.0f ? qround(x[e] / dl, -32, 31) : 0) + 32;
      b->ql[64 * h + l + 32 * (r & 1)] |= (uint8_t)((u & 15) << (4 * (r >> 1)));
      b->qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * r));
    }
  }
}
