/* bloomery CPU library: the float-coded weight types of Hugging Face checkpoint folders, bloomery's own
 * ids (64..67, never read from a GGUF file), each a byte repack of the stored values with their
 * scales beside them (lossless): FP8 (32 E4M3 values and the F32 scale of the 128x128 block they
 * belong to, DeepSeek V3's weight_scale_inv), NVFP4 (64 E2M1 values, an E4M3 scale per 16 and the
 * tensor's F32 global scale weight_scale_2, NVIDIA ModelOpt), MLX4 and MLX8 (64 4-bit or 8-bit values,
 * their F32 scale and bias, mlx's affine quantization: a group of 128 is two blocks of the same scale). Reference dequantizers (from the published layouts:
 * the OCP MX / OFP8 spec for E4M3 and E2M1), quantizers for tests, and products against F32
 * activation rows. */
#include "quants_impl.h"
#include "common.h"
#include <math.h>

/* E4M3 (OFP8): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal (m/8 * 2^-6);
 * S.1111.111 is NaN; no infinities (max 448). */
float bl_e4m3_to_f32(uint8_t x) {
  const int e = (x >> 3) & 15, m = x & 7;
  const float s = (x & 0x80) ? -1.0f : 1.0f;
  if (e == 15 && m == 7) return NAN;
  if (e == 0) return s * ldexpf((float)m, -9);
  return s * ldexpf(1.0f + (float)m / 8.0f, e - 7);
}

/* The 256 codes' values (bl_e4m3_to_f32), for the products' scales. */
float bl_e4m3_table[256];
__attribute__((constructor)) static void e4m3_table_init(void) {
  for (int c = 0; c < 256; c++) bl_e4m3_table[c] = bl_e4m3_to_f32((uint8_t)c);
}

/* E2M1 (OCP MX FP4): sign, 2 exponent bits (bias 1), 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6. */
const float bl_e2m1_values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* The E4M3 code nearest x (ties to the even code), saturating at +-448. */
uint8_t bl_f32_to_e4m3(float x) {
  const uint8_t sign = (x < 0 || (x == 0 && signbit(x))) ? 0x80 : 0;
  const float a = fabsf(x);
  uint8_t best = 0;
  float err = INFINITY;
  for (int c = 0; c < 127; c++) { /* 0x7f is NaN */
    const float d = fabsf(bl_e4m3_to_f32((uint8_t)c) - a);
    if (d < err || (d == err && (c & 1) == 0)) {
      err = d;
      best = (uint8_t)c;
    }
  }
  return best | sign;
}

static uint8_t nearest_e2m1(float v) {
  int best = 0;
  float err = INFINITY;
  for (int c = 0; c < 16; c++) {
    const float d = fabsf(bl_e2m1_values[c] - v);
    if (d < err) {
      err = d;
      best = c;
    }
  }
  return (uint8_t)best;
}

/* ---- FP8: 32 E4M3 values, y = d * e4m3(q) ---- */
void bl_to_float_fp8(const void *src, float *y, int64_t n) {
  const bl_block_fp8 *b = src;
  for (int64_t i = 0; i < n / 32; i++, b++)
    for (int j = 0; j < 32; j++) y[i * 32 + j] = b->d * bl_e4m3_table[b->q[j]];
}

void bl_from_float_fp8(const float *x, void *dst, int64_t n) {
  bl_block_fp8 *b = dst;
  for (int64_t i = 0; i < n / 32; i++, b++, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    b->d = amax / 448.0f;
    const float id = b->d > 0 ? 1.0f / b->d : 0.0f;
    for (int j = 0; j < 32; j++) b->q[j] = bl_f32_to_e4m3(x[j] * id);
  }
}

void bl_vec_dot_fp8_f32(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_fp8 *x = vx;
  const float *y = vy;
  float sum = 0;
  for (int64_t i = 0; i < n / 32; i++, y += 32) {
    float t = 0;
    for (int j = 0; j < 32; j++) t += bl_e4m3_table[x[i].q[j]] * y[j];
    sum += x[i].d * t;
  }
  *s = sum;
}

/* ---- NVFP4: 64 E2M1 values in 4 groups of 16; y = g * e4m3(s[k]) * e2m1(q); group k's byte j holds
 * element 16k + 2j in its low nibble and 16k + 2j + 1 in its high one (ModelOpt's order) ---- */
static inline uint8_t nv_q(const bl_block_nvfp4 *b, int e) {
  const uint8_t v = b->qs[e / 2];
  return (e & 1) ? (uint8_t)(v >> 4) : (uint8_t)(v & 15);
}

void bl_to_float_nvfp4(const void *src, float *y, int64_t n) {
  const bl_block_nvfp4 *b = src;
  for (int64_t i = 0; i < n / 64; i++, b++)
    for (int e = 0; e < 64; e++) y[i * 64 + e] = b->g * bl_e4m3_table[b->s[e / 16]] * bl_e2m1_values[nv_q(b, e)];
}

/* The reference quantizer (tests): the global scale from the whole row, then each group's E4M3 scale. */
void bl_from_float_nvfp4(const float *x, void *dst, int64_t n) {
  bl_block_nvfp4 *b = dst;
  float amax = 0;
  for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
  const float g = amax > 0 ? amax / (6.0f * 448.0f) : 1.0f;
  for (int64_t i = 0; i < n / 64; i++, b++, x += 64) {
    b->g = g;
    memset(b->qs, 0, sizeof b->qs);
    for (int k = 0; k < 4; k++) {
      float m = 0;
      for (int j = 0; j < 16; j++) m = fmaxf(m, fabsf(x[16 * k + j]));
      b->s[k] = bl_f32_to_e4m3(m / 6.0f / g);
      const float d = g * bl_e4m3_to_f32(b->s[k]);
      for (int j = 0; j < 16; j++) {
        const uint8_t q = nearest_e2m1(d > 0 ? x[16 * k + j] / d : 0.0f);
        b->qs[(16 * k + j) / 2] |= (uint8_t)(j & 1 ? q << 4 : q);
      }
    }
  }
}

void bl_vec_dot_nvfp4_f32(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_nvfp4 *x = vx;
  const float *y = vy;
  float sum = 0;
  for (int64_t i = 0; i < n / 64; i++, y += 64) {
    float t = 0;
    for (int k = 0; k < 4; k++) {
      float u = 0;
      for (int j = 0; j < 16; j++) u += bl_e2m1_values[nv_q(&x[i], 16 * k + j)] * y[16 * k + j];
      t += bl_e4m3_table[x[i].s[k]] * u;
    }
    sum += x[i].g * t;
  }
  *s = sum;
}

/* ---- MLX4: 64 unsigned 4-bit values, y = d * q + m; byte j holds element 2j (low nibble) and 2j + 1 ---- */
void bl_to_float_mlx4(const void *src, float *y, int64_t n) {
  const bl_block_mlx4 *b = src;
  for (int64_t i = 0; i < n / 64; i++, b++)
    for (int e = 0; e < 64; e++) y[i * 64 + e] = b->d * (float)((b->qs[e / 2] >> (4 * (e & 1))) & 15) + b->m;
}

void bl_from_float_mlx4(const float *x, void *dst, int64_t n) {
  bl_block_mlx4 *b = dst;
  for (int64_t i = 0; i < n / 64; i++, b++, x += 64) {
    float lo = x[0], hi = x[0];
    for (int e = 1; e < 64; e++) lo = fminf(lo, x[e]), hi = fmaxf(hi, x[e]);
    b->d = (hi - lo) / 15.0f;
    b->m = lo;
    memset(b->qs, 0, sizeof b->qs);
    for (int e = 0; e < 64; e++) {
      int q = b->d > 0 ? (int)lrintf((x[e] - lo) / b->d) : 0;
      q = q < 0 ? 0 : q > 15 ? 15 : q;
      b->qs[e / 2] |= (uint8_t)(q << (4 * (e & 1)));
    }
  }
}

void bl_vec_dot_mlx4_f32(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_mlx4 *x = vx;
  const float *y = vy;
  float sum = 0;
  for (int64_t i = 0; i < n / 64; i++, y += 64) {
    float qy = 0, sy = 0;
    for (int e = 0; e < 64; e++) {
      qy += (float)((x[i].qs[e / 2] >> (4 * (e & 1))) & 15) * y[e];
      sy += y[e];
    }
    sum += x[i].d * qy + x[i].m * sy;
  }
  *s = sum;
}

/* ---- MLX8: 64 unsigned 8-bit values, y = d * q + m; byte e is element e (a little-endian word: 4 values,
 * low byte first) ---- */
void bl_to_float_mlx8(const void *src, float *y, int64_t n) {
  const bl_block_mlx8 *b = src;
  for (int64_t i = 0; i < n / 64; i++, b++)
    for (int e = 0; e < 64; e++) y[i * 64 + e] = b->d * (float)b->q[e] + b->m;
}

void bl_from_float_mlx8(const float *x, void *dst, int64_t n) {
  bl_block_mlx8 *b = dst;
  for (int64_t i = 0; i < n / 64; i++, b++, x += 64) {
    float lo = x[0], hi = x[0];
    for (int e = 1; e < 64; e++) lo = fminf(lo, x[e]), hi = fmaxf(hi, x[e]);
    b->d = (hi - lo) / 255.0f;
    b->m = lo;
    for (int e = 0; e < 64; e++) {
      int q = b->d > 0 ? (int)lrintf((x[e] - lo) / b->d) : 0;
      b->q[e] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
    }
  }
}

/* each value decoded, then the product (as the SIMD paths do): factoring the bias out, d * sum(q y) + m * sum(y),
 * would cancel two sums 255 steps wide */
void bl_vec_dot_mlx8_f32(int64_t n, float *s, const void *vx, const void *vy) {
  const bl_block_mlx8 *x = vx;
  const float *y = vy;
  float sum = 0;
  for (int64_t i = 0; i < n / 64; i++, y += 64) {
    float t = 0;
    for (int e = 0; e < 64; e++) t += (x[i].d * (float)x[i].q[e] + x[i].m) * y[e];
    sum += t;
  }
  *s = sum;
}

/* ---- the repack of a checkpoint folder's stored tensor into the engine's rows (ffi/bloomery.h) ---- */
int64_t bl_repack(int64_t type, const uint8_t *w, const uint8_t *s, const float *f, const float *f2, double g, int64_t C,
                  int64_t bm, int64_t bn, const int32_t *sel, int64_t n, uint8_t *out) {
  if (!w || !sel || !out || C <= 0 || n < 0) return bl_fail(BL_E_INVAL, "bl_repack: null buffer or bad sizes");
  switch (type) {
    case BL_MXFP4: { /* stored byte k: elements 2k (low) and 2k + 1; GGUF's byte j: elements j (low) and j + 16 */
      if (!s || C % 32) return bl_fail(BL_E_INVAL, "bl_repack: MXFP4 rows of %lld", (long long)C);
      const int64_t nb = C / 32;
      for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < nb; b++) {
          const int64_t blk = (int64_t)sel[i] * nb + b;
          const uint8_t *p = w + blk * 16;
          bl_block_mxfp4 *o = (bl_block_mxfp4 *)(out + (i * nb + b) * 17);
          o->e = s[blk];
          for (int k = 0; k < 8; k++) {
            o->qs[2 * k] = (uint8_t)((p[k] & 15) | ((p[8 + k] & 15) << 4));
            o->qs[2 * k + 1] = (uint8_t)((p[k] >> 4) | (p[8 + k] & 0xf0));
          }
        }
      return BL_OK;
    }
    case BL_FP8: { /* 32 E4M3 bytes after the F32 scale of their bm x bn block */
      if (!f || C % 32 || bn % 32 || bm <= 0) return bl_fail(BL_E_INVAL, "bl_repack: FP8 rows of %lld, blocks %lld x %lld", (long long)C, (long long)bm, (long long)bn);
      const int64_t nb = C / 32, sc = (C + bn - 1) / bn;
      for (int64_t i = 0; i < n; i++) {
        const int64_t r = sel[i];
        for (int64_t b = 0; b < nb; b++) {
          bl_block_fp8 *o = (bl_block_fp8 *)(out + (i * nb + b) * 36);
          o->d = f[(r / bm) * sc + (b * 32) / bn];
          memcpy(o->q, w + r * C + b * 32, 32);
        }
      }
      return BL_OK;
    }
    case BL_NVFP4_MO: { /* the global scale, 4 E4M3 group scales, 32 bytes of pairs, as stored */
      if (!s || C % 64) return bl_fail(BL_E_INVAL, "bl_repack: NVFP4 rows of %lld", (long long)C);
      const int64_t nb = C / 64;
      for (int64_t i = 0; i < n; i++) {
        const int64_t r = sel[i];
        for (int64_t b = 0; b < nb; b++) {
          bl_block_nvfp4 *o = (bl_block_nvfp4 *)(out + (i * nb + b) * 40);
          o->g = (float)g;
          memcpy(o->s, s + r * (C / 16) + b * 4, 4);
          memcpy(o->qs, w + r * (C / 2) + b * 32, 32);
        }
      }
      return BL_OK;
    }
    case BL_MLX4:
    case BL_MLX8: { /* the scale and bias of the block's group as F32, then its 64 values' bytes as stored (a
                     * little-endian word: 8 nibbles low first, or 4 bytes); bn: mlx's group_size (64, 128, ...) */
      const int bits = type == BL_MLX4 ? 4 : 8, bb = type == BL_MLX4 ? 40 : 72;
      if (!f || !f2 || C % 64 || bn < 64 || bn % 64 || C % bn)
        return bl_fail(BL_E_INVAL, "bl_repack: MLX rows of %lld in groups of %lld", (long long)C, (long long)bn);
      const int64_t nb = C / 64, ng = C / bn, qb = 64 * bits / 8;
      for (int64_t i = 0; i < n; i++) {
        const int64_t r = sel[i];
        for (int64_t b = 0; b < nb; b++) {
          uint8_t *o = out + (i * nb + b) * bb;
          const float d = f[r * ng + (b * 64) / bn], m = f2[r * ng + (b * 64) / bn];
          memcpy(o, &d, 4);
          memcpy(o + 4, &m, 4);
          memcpy(o + 8, w + r * (C * bits / 8) + b * qb, (size_t)qb);
        }
      }
      return BL_OK;
    }
    default: return bl_fail(BL_E_UNSUPPORTED, "bl_repack: type %lld is not a checkpoint folder's repacked type", (long long)type);
  }
}
