/* bloomery CPU library: the 32-element block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 -
 * dequantization (ggml / gguf-py bit-exact), reference quantizers, and ggml's scalar vec_dot
 * (integer sums inside a block, one float multiply-add per block). */
#include "quants_impl.h"
#include <math.h>

#define QK 32

/* ---- shared helpers ---- */

/* The element of largest magnitude (the first one on ties), with its sign. */
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

static void min_max(const float *x, int n, float *mn, float *mx) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < n; j++) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *mn = lo;
  *mx = hi;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The 5th bits of a Q5 block: bit j of qh is element j's bit 4. */
static inline uint32_t load_qh(const uint8_t qh[4]) {
  uint32_t v;
  memcpy(&v, qh, 4);
  return v;
}

/* ---- Q4_0: y = d * (q - 8) ---- */

void bl_to_float_q4_0(const void *src, float *y, int64_t n) {
  const bl_block_q4_0 *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
    const float d = bl_fp16_to_f32(b->d);
    for (int j = 0; j < QK / 2; j++) {
      y[j] = ((b->qs[j] & 0x0f) - 8) * d;
      y[j + QK / 2] = ((b->qs[j] >> 4) - 8) * d;
    }
  }
}

/* The signed extreme maps to level 0 (value -8 d); others round to nearest. */
void bl_from_float_q4_0(const float *x, void *dst, int64_t n) {
  bl_block_q4_0 *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    const float d = signed_absmax(x, QK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = bl_f32_to_fp16(d);
    for (int j = 0; j < QK / 2; j++) {
      int q0 = clampi((int)(x[j] * id + 8.5f), 0, 15);
      int q1 = clampi((int)(x[j + QK / 2] * id + 8.5f), 0, 15);
      b->qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

/* ---- Q4_1: y = d * q + m ---- */

void bl_to_float_q4_1(const void *src, float *y, int64_t n) {
  const bl_block_q4_1 *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
    const float d = bl_fp16_to_f32(b->d), m = bl_fp16_to_f32(b->m);
    for (int j = 0; j < QK / 2; j++) {
      y[j] = (b->qs[j] & 0x0f) * d + m;
      y[j + QK / 2] = (b->qs[j] >> 4) * d + m;
    }
  }
}

void bl_from_float_q4_1(const float *x, void *dst, int64_t n) {
  bl_block_q4_1 *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    float mn, mx;
    min_max(x, QK, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = bl_f32_to_fp16(d);
    b->m = bl_f32_to_fp16(mn);
    for (int j = 0; j < QK / 2; j++) {
      int q0 = clampi((int)((x[j] - mn) * id + 0.5f), 0, 15);
      int q1 = clampi((int)((x[j + QK / 2] - mn) * id + 0.5f), 0, 15);
      b->qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

/* ---- Q5_0: y = d * (q - 16), q = low nibble | qh bit << 4 ---- */

void bl_to_float_q5_0(const void *src, float *y, int64_t n) {
  const bl_block_q5_0 *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
    const float d = bl_fp16_to_f32(b->d);
    const uint32_t qh = load_qh(b->qh);
    for (int j = 0; j < QK / 2; j++) {
      int q0 = (b->qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
      int q1 = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
      y[j] = (q0 - 16) * d;
      y[j + QK / 2] = (q1 - 16) * d;
    }
  }
}

void bl_from_float_q5_0(const float *x, void *dst, int64_t n) {
  bl_block_q5_0 *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    const float d = signed_absmax(x, QK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = bl_f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
      int q0 = clampi((int)(x[j] * id + 16.5f), 0, 31);
      int q1 = clampi((int)(x[j + QK / 2] * id + 16.5f), 0, 31);
      b->qs[j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
      qh |= (uint32_t)(q0 >> 4) << j;
      qh |= (uint32_t)(q1 >> 4) << (j + 16);
    }
    memcpy(b->qh, &qh, 4);
  }
}

/* ---- Q5_1: y = d * q + m ---- */

void bl_to_float_q5_1(const void *src, float *y, int64_t n) {
  const bl_block_q5_1 *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
    const float d = bl_fp16_to_f32(b->d), m = bl_fp16_to_f32(b->m);
    const uint32_t qh = load_qh(b->qh);
    for (int j = 0; j < QK / 2; j++) {
      int q0 = (b->qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
      int q1 = (b->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
      y[j] = q0 * d + m;
      y[j + QK / 2] = q1 * d + m;
    }
  }
}

void bl_from_float_q5_1(const float *x, void *dst, int64_t n) {
  bl_block_q5_1 *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    float mn, mx;
    min_max(x, QK, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = bl_f32_to_fp16(d);
    b->m = bl_f32_to_fp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
      int q0 = clampi((int)((x[j] - mn) * id + 0.5f), 0, 31);
      int q1 = clampi((int)((x[j + QK / 2] - mn) * id + 0.5f), 0, 31);
      b->qs[j] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
      qh |= (uint32_t)(q0 >> 4) << j;
      qh |= (uint32_t)(q1 >> 4) << (j + 16);
    }
    memcpy(b->qh, &qh, 4);
  }
}

/* ---- Q8_0: y = d * q; ggml's reference quantizer (d = amax/127, q = roundf(x/d)) ---- */

void bl_to_float_q8_0(const void *src, float *y, int64_t n) {
  const bl_block_q8_0 *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
    const float d = bl_fp16_to_f32(b->d);
    for (int j = 0; j < QK; j++) y[j] = b->qs[j] * d;
  }
}

void bl_from_float_q8_0(const float *x, void *dst, int64_t n) {
  bl_block_q8_0 *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = bl_f32_to_fp16(d);
    for (int j = 0; j < QK; j++) b->qs[j] = (int8_t)roundf(x[j] * id);
  }
}

/* ---- Q8_1 (activations of Q4_1 / Q5_1): Q8_0 plus s = d * sum(q), d unrounded ---- */

void bl_to_float_q8_1(const void *src, float *y, int64_t n) {
  const bl_block_q8_1 *b = src;
  for (int64_t i = 0; i < n / QK; i++, b++, y += QK) {
    const float d = bl_fp16_to_f32(b->d);
    for (int j = 0; j < QK; j++) y[j] = b->qs[j] * d;
  }
}

void bl_from_float_q8_1(const float *x, void *dst, int64_t n) {
  bl_block_q8_1 *b = dst;
  for (int64_t i = 0; i < n / QK; i++, b++, x += QK) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = bl_f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < QK; j++) {
      b->qs[j] = (int8_t)roundf(x[j] * id);
      sum += b->qs[j];
    }
    b->s = bl_f32_to_fp16((float)sum * d);
  }
}

/* ---- vec_dot: per block an exact integer sum, then ggml's float expression for the block ---- */

void bl_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q4_0 *x = vx;
  const bl_block_q8_0 *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      sumi += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j];
      sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK / 2];
    }
    sumf += (float)sumi * bl_fp16_to_f32(x[i].d) * bl_fp16_to_f32(y[i].d);
  }
  *s = sumf;
}

void bl_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q4_1 *x = vx;
  const bl_block_q8_1 *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      sumi += (x[i].qs[j] & 0x0f) * y[i].qs[j];
      sumi += (x[i].qs[j] >> 4) * y[i].qs[j + QK / 2];
    }
    /* d_x*d_y*sumi + m_x*s_y: the min term uses the activation's stored sum */
    sumf += (bl_fp16_to_f32(x[i].d) * bl_fp16_to_f32(y[i].d)) * (float)sumi +
            bl_fp16_to_f32(x[i].m) * bl_fp16_to_f32(y[i].s);
  }
  *s = sumf;
}

void bl_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q5_0 *x = vx;
  const bl_block_q8_0 *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const uint32_t qh = load_qh(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      int q0 = ((x[i].qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4)) - 16;
      int q1 = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
      sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + QK / 2];
    }
    sumf += (bl_fp16_to_f32(x[i].d) * bl_fp16_to_f32(y[i].d)) * (float)sumi;
  }
  *s = sumf;
}

void bl_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q5_1 *x = vx;
  const bl_block_q8_1 *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    const uint32_t qh = load_qh(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < QK / 2; j++) {
      int q0 = (x[i].qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
      int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
      sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + QK / 2];
    }
    sumf += (bl_fp16_to_f32(x[i].d) * bl_fp16_to_f32(y[i].d)) * (float)sumi +
            bl_fp16_to_f32(x[i].m) * bl_fp16_to_f32(y[i].s);
  }
  *s = sumf;
}

void bl_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_q8_0 *x = vx;
  const bl_block_q8_0 *y = vy;
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK; i++) {
    int sumi = 0;
    for (int j = 0; j < QK; j++) sumi += x[i].qs[j] * y[i].qs[j];
    sumf += (float)sumi * (bl_fp16_to_f32(x[i].d) * bl_fp16_to_f32(y[i].d));
  }
  *s = sumf;
}
