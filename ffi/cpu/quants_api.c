/* bloomery CPU library: the quant type traits table (block sizes, vec_dot pairing as ggml's CPU
 * backend has it) and the exported ABI bl_type_size / bl_dequantize / bl_quantize / bl_matvec_ref. */
#include "common.h"
#include "quants_impl.h"
#include <math.h>
#include <stdlib.h>

#define T(id, nm, be, bb, vdt, fn, vd)                                                          \
  [id] = {.name = nm, .block_elems = be, .block_bytes = bb, .vec_dot_type = vdt,               \
          .to_float = bl_to_float_##fn, .from_float = bl_from_float_##fn, .vec_dot = vd}

/* the grid types: 256-element blocks read with Q8_K activations, no quantizer */
#define R(id, nm, bb, fn)                                                                            \
  [id] = {.name = nm, .block_elems = 256, .block_bytes = bb, .vec_dot_type = BL_Q8_K,               \
          .to_float = bl_to_float_##fn, .from_float = NULL, .vec_dot = bl_vec_dot_##fn##_q8_K}

static const bl_type_traits traits[BL_TYPE_COUNT] = {
    T(BL_F32, "F32", 1, 4, BL_F32, f32, bl_vec_dot_f32),
    T(BL_F16, "F16", 1, 2, BL_F16, f16, bl_vec_dot_f16),
    T(BL_BF16, "BF16", 1, 2, BL_BF16, bf16, bl_vec_dot_bf16),
    T(BL_Q4_0, "Q4_0", 32, 18, BL_Q8_0, q4_0, bl_vec_dot_q4_0_q8_0),
    T(BL_Q4_1, "Q4_1", 32, 20, BL_Q8_1, q4_1, bl_vec_dot_q4_1_q8_1),
    T(BL_Q5_0, "Q5_0", 32, 22, BL_Q8_0, q5_0, bl_vec_dot_q5_0_q8_0),
    T(BL_Q5_1, "Q5_1", 32, 24, BL_Q8_1, q5_1, bl_vec_dot_q5_1_q8_1),
    T(BL_Q8_0, "Q8_0", 32, 34, BL_Q8_0, q8_0, bl_vec_dot_q8_0_q8_0),
    T(BL_Q8_1, "Q8_1", 32, 36, BL_Q8_1, q8_1, NULL), /* activation type: no vec_dot of its own */
    T(BL_Q2_K, "Q2_K", 256, 84, BL_Q8_K, q2_K, bl_vec_dot_q2_K_q8_K),
    T(BL_Q3_K, "Q3_K", 256, 110, BL_Q8_K, q3_K, bl_vec_dot_q3_K_q8_K),
    T(BL_Q4_K, "Q4_K", 256, 144, BL_Q8_K, q4_K, bl_vec_dot_q4_K_q8_K),
    T(BL_Q5_K, "Q5_K", 256, 176, BL_Q8_K, q5_K, bl_vec_dot_q5_K_q8_K),
    T(BL_Q6_K, "Q6_K", 256, 210, BL_Q8_K, q6_K, bl_vec_dot_q6_K_q8_K),
    T(BL_Q8_K, "Q8_K", 256, 292, BL_Q8_K, q8_K, NULL), /* activation type */
    T(BL_IQ4_NL, "IQ4_NL", 32, 18, BL_Q8_0, iq4_nl, bl_vec_dot_iq4_nl_q8_0),
    T(BL_IQ4_XS, "IQ4_XS", 256, 136, BL_Q8_K, iq4_xs, bl_vec_dot_iq4_xs_q8_K),
    T(BL_MXFP4, "MXFP4", 32, 17, BL_Q8_0, mxfp4, bl_vec_dot_mxfp4_q8_0),
    T(BL_FP8, "FP8_E4M3", 32, 36, BL_F32, fp8, bl_vec_dot_fp8_f32),
    T(BL_NVFP4_MO, "NVFP4_MO", 64, 40, BL_F32, nvfp4, bl_vec_dot_nvfp4_f32),
    T(BL_MLX4, "MLX_Q4", 64, 40, BL_F32, mlx4, bl_vec_dot_mlx4_f32),
    T(BL_MLX8, "MLX_Q8", 64, 72, BL_F32, mlx8, bl_vec_dot_mlx8_f32),
    R(BL_IQ2_XXS, "IQ2_XXS", 66, iq2_xxs),
    R(BL_IQ2_XS, "IQ2_XS", 74, iq2_xs),
    R(BL_IQ2_S, "IQ2_S", 82, iq2_s),
    R(BL_IQ3_XXS, "IQ3_XXS", 98, iq3_xxs),
    R(BL_IQ3_S, "IQ3_S", 110, iq3_s),
    R(BL_IQ1_S, "IQ1_S", 50, iq1_s),
    R(BL_IQ1_M, "IQ1_M", 56, iq1_m),
};
#undef T
#undef R

const bl_type_traits *bl_traits(int32_t type) {
  if (type < 0 || type >= BL_TYPE_COUNT || traits[type].name == NULL) return NULL;
  return &traits[type];
}

const char *bl_type_name(int64_t type) {
  const bl_type_traits *t = (type >= 0 && type < BL_TYPE_COUNT) ? bl_traits((int32_t)type) : NULL;
  if (t) return t->name;
  switch (type) { /* ggml's other ids (ggml.h), named in refusals */
    case 24: return "I8";
    case 25: return "I16";
    case 26: return "I32";
    case 27: return "I64";
    case 28: return "F64";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    default: return "an unknown ggml type";
  }
}

int64_t bl_row_bytes(int32_t type, int64_t n) {
  const bl_type_traits *t = bl_traits(type);
  if (!t || n < 0 || n % t->block_elems != 0) return -1;
  return n / t->block_elems * t->block_bytes;
}

/* ---- exported ABI ---- */

/* Looks the type up (BL_E_UNSUPPORTED naming the id) and checks n (BL_E_INVAL naming type and n). */
static int64_t lookup(const char *fn, int64_t type, int64_t n, const bl_type_traits **out) {
  const bl_type_traits *t = (type >= 0 && type < BL_TYPE_COUNT) ? bl_traits((int32_t)type) : NULL;
  if (!t) return bl_fail(BL_E_UNSUPPORTED, "%s: unsupported ggml type id %lld", fn, (long long)type);
  if (n < 0 || n % t->block_elems != 0)
    return bl_fail(BL_E_INVAL, "%s: %s: element count %lld is not a non-negative multiple of the block size %d",
                   fn, t->name, (long long)n, t->block_elems);
  *out = t;
  return BL_OK;
}

int64_t bl_type_size(int64_t type, int64_t *block_elems, int64_t *block_bytes) {
  const bl_type_traits *t = (type >= 0 && type < BL_TYPE_COUNT) ? bl_traits((int32_t)type) : NULL;
  if (!t) return bl_fail(BL_E_UNSUPPORTED, "bl_type_size: unsupported ggml type id %lld", (long long)type);
  if (!block_elems || !block_bytes) return bl_fail(BL_E_INVAL, "bl_type_size: null output pointer");
  *block_elems = t->block_elems;
  *block_bytes = t->block_bytes;
  return BL_OK;
}

int64_t bl_dequantize(int64_t type, const void *src, float *dst, int64_t n) {
  const bl_type_traits *t;
  int64_t st = lookup("bl_dequantize", type, n, &t);
  if (st != BL_OK) return st;
  if (n == 0) return BL_OK;
  if (!src || !dst) return bl_fail(BL_E_INVAL, "bl_dequantize: %s: null buffer", t->name);
  t->to_float(src, dst, n);
  return BL_OK;
}

int64_t bl_quantize(int64_t type, const float *src, void *dst, int64_t n) {
  const bl_type_traits *t;
  int64_t st = lookup("bl_quantize", type, n, &t);
  if (st != BL_OK) return st;
  if (n == 0) return BL_OK;
  if (!t->from_float)
    return bl_fail(BL_E_UNSUPPORTED, "bl_quantize: %s has no quantizer here (files of this type are read, not written)", t->name);
  if (!src || !dst) return bl_fail(BL_E_INVAL, "bl_quantize: %s: null buffer", t->name);
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(src[i]))
      return bl_fail(BL_E_INVAL, "bl_quantize: %s: input element %lld is not finite (%g)", t->name, (long long)i,
                     (double)src[i]);
  t->from_float(src, dst, n);
  return BL_OK;
}

int64_t bl_matvec_ref(int64_t type, const void *w, int64_t row_stride, int64_t rows, const float *x, int64_t n,
                      float *y) {
  const bl_type_traits *t;
  int64_t st = lookup("bl_matvec_ref", type, n, &t);
  if (st != BL_OK) return st;
  if (!t->vec_dot)
    return bl_fail(BL_E_UNSUPPORTED, "bl_matvec_ref: %s is an activation type, not a weight type", t->name);
  if (rows < 0) return bl_fail(BL_E_INVAL, "bl_matvec_ref: %s: negative row count %lld", t->name, (long long)rows);
  const int64_t wbytes = n / t->block_elems * t->block_bytes;
  if (row_stride < wbytes)
    return bl_fail(BL_E_INVAL, "bl_matvec_ref: %s: row stride %lld is less than a row of %lld elements (%lld bytes)",
                   t->name, (long long)row_stride, (long long)n, (long long)wbytes);
  if (rows == 0) return BL_OK;
  if (!y) return bl_fail(BL_E_INVAL, "bl_matvec_ref: %s: null output", t->name);
  if (n == 0) {
    for (int64_t r = 0; r < rows; r++) y[r] = 0.0f;
    return BL_OK;
  }
  if (!w || !x) return bl_fail(BL_E_INVAL, "bl_matvec_ref: %s: null buffer", t->name);

  /* x is converted to the activation format once, then dotted with every row. */
  const bl_type_traits *vt = bl_traits(t->vec_dot_type);
  const void *xq = x;
  void *buf = NULL;
  if (t->vec_dot_type != BL_F32) {
    const size_t bytes = (size_t)(n / vt->block_elems * vt->block_bytes);
    buf = malloc(bytes);
    if (!buf) return bl_fail(BL_E_NOMEM, "bl_matvec_ref: %s: cannot allocate %zu bytes", t->name, bytes);
    vt->from_float(x, buf, n);
    xq = buf;
  }
  const uint8_t *row = w;
  for (int64_t r = 0; r < rows; r++, row += row_stride) t->vec_dot(n, &y[r], row, xq);
  free(buf);
  return BL_OK;
}
