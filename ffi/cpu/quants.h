/* bloomery CPU library: quant block traits (layouts per ../shared/SPEC.md, numerics as ggml).
 * Internal C API shared by the CPU kernels; the exported ABI is in ffi/bloomery.h. */
#ifndef BL_QUANTS_H
#define BL_QUANTS_H
#include <stdint.h>
#include <stddef.h>

/* ggml type ids as stored in GGUF */
enum bl_type {
  BL_F32 = 0, BL_F16 = 1, BL_Q4_0 = 2, BL_Q4_1 = 3, BL_Q5_0 = 6, BL_Q5_1 = 7,
  BL_Q8_0 = 8, BL_Q8_1 = 9, BL_Q2_K = 10, BL_Q3_K = 11, BL_Q4_K = 12, BL_Q5_K = 13,
  BL_Q6_K = 14, BL_Q8_K = 15, BL_IQ2_XXS = 16, BL_IQ2_XS = 17, BL_IQ3_XXS = 18, BL_IQ1_S = 19,
  BL_IQ4_NL = 20, BL_IQ3_S = 21, BL_IQ2_S = 22, BL_IQ4_XS = 23, BL_IQ1_M = 29, BL_BF16 = 30, BL_MXFP4 = 39,
  /* bloomery's own ids (quants_fp.c): checkpoint folders' float-coded weights repacked at load, never in a GGUF */
  BL_FP8 = 64, BL_NVFP4_MO = 65, BL_MLX4 = 66, BL_MLX8 = 67,
  BL_TYPE_COUNT = 68
};

#define BL_QK_K 256

typedef void (*bl_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*bl_from_float_fn)(const float *src, void *dst, int64_t n);
/* s = dot(x, y) over n elements; x is a row of the weight type, y a row of vec_dot_type. */
typedef void (*bl_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);

typedef struct bl_type_traits {
  const char *name;
  int32_t block_elems;      /* elements per block */
  int32_t block_bytes;      /* bytes per block */
  int32_t vec_dot_type;     /* type the activation row is converted to for vec_dot */
  bl_to_float_fn to_float;     /* NULL when not supported */
  bl_from_float_fn from_float; /* NULL when not supported (reference quantizer; the grid types have none) */
  bl_vec_dot_fn vec_dot;       /* NULL when not supported */
} bl_type_traits;

/* NULL for an unknown or unsupported type id. */
const bl_type_traits *bl_traits(int32_t type);
/* A ggml type id's name (also of the types this library has no traits for: TQ1_0, I32, ...). */
const char *bl_type_name(int64_t type);

/* bytes of a row of n elements of type; -1 when n is not a multiple of the block or type unknown */
int64_t bl_row_bytes(int32_t type, int64_t n);

/* fp16 / bf16 conversions (IEEE, round to nearest even) */
float bl_fp16_to_f32(uint16_t h);
uint16_t bl_f32_to_fp16(float f);
float bl_bf16_to_f32(uint16_t h);
uint16_t bl_f32_to_bf16(float f);

#endif
