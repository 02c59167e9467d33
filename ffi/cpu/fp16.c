/* bloomery CPU library: IEEE half and bfloat16 conversions, and the F32 / F16 / BF16 rows
 * (to_float, from_float, and ggml's scalar vec_dot: f32 products summed in double). */
#include "quants_impl.h"

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float bl_fp16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
  if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
  if (man == 0) return bits_f32(sign);
  /* subnormal: man * 2^-24, normalised into a float */
  int e = 113; /* float exponent field of 2^-14 */
  while (!(man & 0x400)) {
    man <<= 1;
    e--;
  }
  return bits_f32(sign | ((uint32_t)e << 23) | ((man & 0x3ff) << 13));
}

uint16_t bl_f32_to_fp16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00; /* nan -> quiet nan */
  if (a >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65536: inf */
  if (a >= 0x38800000u) {                      /* normal half (>= 2^-14) */
    uint32_t r = a - 0x38000000u;              /* rebias 127 -> 15 */
    r += 0xfff + ((r >> 13) & 1);              /* round to nearest even on the 13 dropped bits */
    return sign | (uint16_t)(r >> 13);
  }
  if (a < 0x33000000u) return sign; /* below half the smallest subnormal (2^-25): zero */
  /* subnormal half: value = m * 2^-24 with m rounded to nearest even */
  uint32_t exp = a >> 23;
  uint32_t man = (a & 0x7fffff) | 0x800000; /* 24 significant bits, value man * 2^(exp-150) */
  uint32_t shift = 126 - exp;               /* man >> shift is in units of 2^-24 */
  uint32_t q = man >> shift;
  uint32_t rem = man & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return sign | (uint16_t)q;
}

float bl_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t bl_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet nan */
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* ---- rows ---- */

void bl_to_float_f32(const void *src, float *dst, int64_t n) { memmove(dst, src, (size_t)n * sizeof(float)); }
void bl_from_float_f32(const float *src, void *dst, int64_t n) { memmove(dst, src, (size_t)n * sizeof(float)); }

void bl_to_float_f16(const void *src, float *dst, int64_t n) {
  const uint8_t *p = src;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    dst[i] = bl_fp16_to_f32(h);
  }
}

void bl_from_float_f16(const float *src, void *dst, int64_t n) {
  uint8_t *p = dst;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = bl_f32_to_fp16(src[i]);
    memcpy(p + 2 * i, &h, 2);
  }
}

void bl_to_float_bf16(const void *src, float *dst, int64_t n) {
  const uint8_t *p = src;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    dst[i] = bl_bf16_to_f32(h);
  }
}

void bl_from_float_bf16(const float *src, void *dst, int64_t n) {
  uint8_t *p = dst;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h = bl_f32_to_bf16(src[i]);
    memcpy(p + 2 * i, &h, 2);
  }
}

/* ggml's scalar vec_dot for float rows: each product rounded to f32, summed in double in
 * element order, the total rounded to f32. (Products of two halves or two bfloat16 are exact.) */
void bl_vec_dot_f32(int64_t n, float *s, const void *vx, const void *vy) {
  const float *x = vx, *y = vy;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
  *s = (float)sum;
}

void bl_vec_dot_f16(int64_t n, float *s, const void *vx, const void *vy) {
  const uint8_t *x = vx, *y = vy;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) {
    uint16_t a, b;
    memcpy(&a, x + 2 * i, 2);
    memcpy(&b, y + 2 * i, 2);
    sum += (double)(bl_fp16_to_f32(a) * bl_fp16_to_f32(b));
  }
  *s = (float)sum;
}

void bl_vec_dot_bf16(int64_t n, float *s, const void *vx, const void *vy) {
  const uint8_t *x = vx, *y = vy;
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) {
    uint16_t a, b;
    memcpy(&a, x + 2 * i, 2);
    memcpy(&b, y + 2 * i, 2);
    sum += (double)(bl_bf16_to_f32(a) * bl_bf16_to_f32(b));
  }
  *s = (float)sum;
}
