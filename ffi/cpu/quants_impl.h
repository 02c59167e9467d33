/* bloomery CPU library: private quant block layouts (ggml-common.h byte layouts, packed) and the
 * per-type scalar reference functions the traits table in quants_api.c points at. */
#ifndef BL_QUANTS_IMPL_H
#define BL_QUANTS_IMPL_H
#include "quants.h"
#include <string.h>

/* The reference numerics are defined as separate float multiplies and adds in a fixed order;
 * a fused multiply-add (which gcc forms on aarch64, or on x86 with FMA enabled) changes the
 * rounding, so contraction is off in every file that includes this header. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define BL_PACKED __attribute__((packed))

/* 32-element blocks */
typedef struct BL_PACKED { uint16_t d; uint8_t qs[16]; } bl_block_q4_0;                /* 18 */
typedef struct BL_PACKED { uint16_t d, m; uint8_t qs[16]; } bl_block_q4_1;             /* 20 */
typedef struct BL_PACKED { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } bl_block_q5_0; /* 22 */
typedef struct BL_PACKED { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } bl_block_q5_1; /* 24 */
typedef struct BL_PACKED { uint16_t d; int8_t qs[32]; } bl_block_q8_0;                 /* 34 */
typedef struct BL_PACKED { uint16_t d, s; int8_t qs[32]; } bl_block_q8_1;              /* 36: s = d*sum(qs) */
typedef struct BL_PACKED { uint16_t d; uint8_t qs[16]; } bl_block_iq4_nl;              /* 18 */
typedef struct BL_PACKED { uint8_t e; uint8_t qs[16]; } bl_block_mxfp4;                /* 17 */
/* bloomery's own (quants_fp.c) */
typedef struct BL_PACKED { float d; uint8_t q[32]; } bl_block_fp8;                     /* 36: 32 E4M3 */
typedef struct BL_PACKED { float g; uint8_t s[4]; uint8_t qs[32]; } bl_block_nvfp4;    /* 40: 64 E2M1 */
typedef struct BL_PACKED { float d, m; uint8_t qs[32]; } bl_block_mlx4;                /* 40: 64 x 4 bits */
typedef struct BL_PACKED { float d, m; uint8_t q[64]; } bl_block_mlx8;                 /* 72: 64 x 8 bits */

/* 256-element super-blocks */
typedef struct BL_PACKED {
  uint8_t scales[16]; /* low nibble scale, high nibble min, per 16 elements */
  uint8_t qs[64];
  uint16_t d, dmin;
} bl_block_q2_K; /* 84 */
typedef struct BL_PACKED {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12]; /* 16 six-bit scales, offset 32 */
  uint16_t d;
} bl_block_q3_K; /* 110 */
typedef struct BL_PACKED {
  uint16_t d, dmin;
  uint8_t scales[12]; /* 8 six-bit (scale, min) pairs */
  uint8_t qs[128];
} bl_block_q4_K; /* 144 */
typedef struct BL_PACKED {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
} bl_block_q5_K; /* 176 */
typedef struct BL_PACKED {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
} bl_block_q6_K; /* 210 */
typedef struct BL_PACKED {
  float d;
  int8_t qs[256];
  int16_t bsums[16]; /* sums of qs per 16 elements */
} bl_block_q8_K; /* 292 */
typedef struct BL_PACKED {
  uint16_t d;
  uint16_t scales_h; /* high 2 bits of the 8 six-bit scales */
  uint8_t scales_l[4]; /* low 4 bits, two per byte */
  uint8_t qs[128];
} bl_block_iq4_xs; /* 136 */

/* The grid types (ggml-common.h's layouts; how the fields are read: quants_iq2.c, quants_iq13.c).
 * Grid indices select points of the codebooks in iq_grids.h; signs flip single elements. */
typedef struct BL_PACKED {
  uint16_t d;
  uint8_t qs[64]; /* per 32 elements: 4 grid indices (8 bits), then a word of 4 x 7-bit sign indices and a 4-bit scale */
} bl_block_iq2_xxs; /* 66 */
typedef struct BL_PACKED {
  uint16_t d;
  uint16_t qs[32];    /* per 8 elements: 9-bit grid index | 7-bit sign index << 9 */
  uint8_t scales[8];  /* per 32 elements: two 4-bit scales (first and second 16) */
} bl_block_iq2_xs; /* 74 */
typedef struct BL_PACKED {
  uint16_t d;
  uint8_t qs[32];     /* per 8 elements: low 8 bits of the 10-bit grid index */
  uint8_t signs[32];  /* per 8 elements: one sign bit each */
  uint8_t qh[8];      /* per 32 elements: the top 2 index bits of its 4 entries */
  uint8_t scales[8];  /* as IQ2_XS */
} bl_block_iq2_s; /* 82 */
typedef struct BL_PACKED {
  uint16_t d;
  uint8_t qs[64];  /* per 4 elements: an 8-bit grid index */
  uint8_t sas[32]; /* per 32 elements: a word of 4 x 7-bit sign indices and a 4-bit scale */
} bl_block_iq3_xxs; /* 98 */
typedef struct BL_PACKED {
  uint16_t d;
  uint8_t qs[64];    /* per 4 elements: low 8 bits of the 9-bit grid index */
  uint8_t qh[8];     /* per 32 elements: the top index bit of its 8 entries */
  uint8_t signs[32]; /* per 8 elements: one sign bit each */
  uint8_t scales[4]; /* per 64 elements: two 4-bit scales (first and second 32) */
} bl_block_iq3_s; /* 110 */
typedef struct BL_PACKED {
  uint16_t d;
  uint8_t qs[32];  /* per 8 elements: low 8 bits of the 11-bit grid index */
  uint16_t qh[8];  /* per 32 elements: 4 x 3 high index bits, a 3-bit scale, the sign of the shift */
} bl_block_iq1_s; /* 50 */
typedef struct BL_PACKED {
  uint8_t qs[32];     /* per 8 elements: low 8 bits of the 11-bit grid index */
  uint8_t qh[16];     /* per 16 elements: two nibbles of 3 high index bits and the sign of the shift */
  uint8_t scales[8];  /* four words: 3-bit scales per 16 elements, the f16 block scale in the top nibbles */
} bl_block_iq1_m; /* 56 */

_Static_assert(sizeof(bl_block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(bl_block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(bl_block_q5_0) == 22, "q5_0");
_Static_assert(sizeof(bl_block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(bl_block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(bl_block_q8_1) == 36, "q8_1");
_Static_assert(sizeof(bl_block_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(bl_block_mxfp4) == 17, "mxfp4");
_Static_assert(sizeof(bl_block_fp8) == 36 && sizeof(bl_block_nvfp4) == 40 && sizeof(bl_block_mlx4) == 40 &&
                   sizeof(bl_block_mlx8) == 72, "fp");
_Static_assert(sizeof(bl_block_q2_K) == 84, "q2_K");
_Static_assert(sizeof(bl_block_q3_K) == 110, "q3_K");
_Static_assert(sizeof(bl_block_q4_K) == 144, "q4_K");
_Static_assert(sizeof(bl_block_q5_K) == 176, "q5_K");
_Static_assert(sizeof(bl_block_q6_K) == 210, "q6_K");
_Static_assert(sizeof(bl_block_q8_K) == 292, "q8_K");
_Static_assert(sizeof(bl_block_iq4_xs) == 136, "iq4_xs");
_Static_assert(sizeof(bl_block_iq2_xxs) == 66, "iq2_xxs");
_Static_assert(sizeof(bl_block_iq2_xs) == 74, "iq2_xs");
_Static_assert(sizeof(bl_block_iq2_s) == 82, "iq2_s");
_Static_assert(sizeof(bl_block_iq3_xxs) == 98, "iq3_xxs");
_Static_assert(sizeof(bl_block_iq3_s) == 110, "iq3_s");
_Static_assert(sizeof(bl_block_iq1_s) == 50, "iq1_s");
_Static_assert(sizeof(bl_block_iq1_m) == 56, "iq1_m");

/* Value tables (facts of the formats): IQ4_NL / IQ4_XS non-linear levels; MXFP4 e2m1 values doubled. */
extern const int8_t bl_kvalues_iq4nl[16];
extern const int8_t bl_kvalues_mxfp4[16];

/* The IQ codebooks expanded (iq_grids.c from iq_grids.h): entry i's element j in byte j. */
extern const uint64_t bl_iq2xxs_grid[256];
extern const uint64_t bl_iq2xs_grid[512];
extern const uint64_t bl_iq2s_grid[1024];
extern const uint32_t bl_iq3xxs_grid[256];
extern const uint32_t bl_iq3s_grid[512];
extern const uint64_t bl_iq1s_grid[2048]; /* signed bytes -1, 0, 1 */

/* A 7-bit sign index to its 8 sign bits: bit 7 makes the count of negatives even (the rule of
 * IQ2_XXS, IQ2_XS and IQ3_XXS, which store only 7 of a group's 8 signs). */
static inline uint8_t bl_iq_signs7(uint32_t s7) { return (uint8_t)(s7 | ((uint32_t)__builtin_parity(s7) << 7)); }

/* Four 7-bit sign indices (bits 7l .. 7l + 6 of w) as four sign bytes (byte l). */
static inline uint32_t bl_iq_signs7x4(uint32_t w) {
  const uint32_t x = (w & 0x7fu) | ((w << 1) & 0x7f00u) | ((w << 2) & 0x7f0000u) | ((w << 3) & 0x7f000000u);
  uint32_t p = x ^ (x >> 4); /* bit 0 of each byte: the parity of its 7 bits (higher bits are noise) */
  p ^= p >> 2;
  p ^= p >> 1;
  return x | ((p & 0x01010101u) << 7);
}

/* Integer dot of 8 activation values with a grid point of unsigned bytes, element j negated where
 * bit j of signs is set. */
static inline int bl_iq_dot8(const int8_t *q8, uint64_t grid, uint32_t signs) {
  int s = 0;
  for (int j = 0; j < 8; j++) {
    const int v = (int)((grid >> (8 * j)) & 255) * q8[j];
    s += (signs >> j) & 1 ? -v : v;
  }
  return s;
}

/* IQ1_M's f16 block scale, from the top nibbles of its four scale words. */
static inline uint16_t bl_iq1m_d(const uint8_t *scales) {
  uint16_t sc[4];
  memcpy(sc, scales, 8);
  return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

/* Round to nearest, ties to even, for |f| <= 2^22 (ggml's nearest_int rule). */
static inline int bl_nearest_int(float f) {
  float v = f + 12582912.f; /* 1.5 * 2^23 */
  int32_t i;
  memcpy(&i, &v, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

/* E8M0 exponent to 2^(e-128): half the block scale, paired with the doubled e2m1 table. */
static inline float bl_e8m0_to_f32_half(uint8_t e) {
  uint32_t bits = e < 2 ? (uint32_t)0x00200000u << e : (uint32_t)(e - 1) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Unpack the 6-bit scale and min j (0..7) of Q4_K / Q5_K. */
static inline void bl_k4_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

/* Q3_K's sixteen 6-bit scales, still biased by 32, as bytes: scales 0..7 in *lo, 8..15 in *hi
 * (byte g of each word; the low 4 bits from the first 8 bytes, the high 2 from the last 4). */
static inline void bl_q3k_scale_bytes(const uint8_t *scales, uint64_t *lo, uint64_t *hi) {
  uint64_t a64;
  uint32_t b32;
  memcpy(&a64, scales, 8);
  memcpy(&b32, scales + 8, 4);
  const uint64_t m2 = 0x03030303u, m4 = 0x0f0f0f0f0f0f0f0full;
  const uint64_t hi01 = (b32 & m2) | (((b32 >> 2) & m2) << 32);
  const uint64_t hi23 = ((b32 >> 4) & m2) | (((b32 >> 6) & m2) << 32);
  *lo = (a64 & m4) | (hi01 << 4);
  *hi = ((a64 >> 4) & m4) | (hi23 << 4);
}

/* ---- per-type functions (n is a multiple of the block; checked by the callers) ---- */
#define BL_DECL_TYPE(t)                                                \
  void bl_to_float_##t(const void *src, float *dst, int64_t n);        \
  void bl_from_float_##t(const float *src, void *dst, int64_t n);
BL_DECL_TYPE(f32)
BL_DECL_TYPE(f16)
BL_DECL_TYPE(bf16)
BL_DECL_TYPE(q4_0)
BL_DECL_TYPE(q4_1)
BL_DECL_TYPE(q5_0)
BL_DECL_TYPE(q5_1)
BL_DECL_TYPE(q8_0)
BL_DECL_TYPE(q8_1)
BL_DECL_TYPE(q2_K)
BL_DECL_TYPE(q3_K)
BL_DECL_TYPE(q4_K)
BL_DECL_TYPE(q5_K)
BL_DECL_TYPE(q6_K)
BL_DECL_TYPE(q8_K)
BL_DECL_TYPE(iq4_nl)
BL_DECL_TYPE(iq4_xs)
BL_DECL_TYPE(mxfp4)
BL_DECL_TYPE(fp8)
BL_DECL_TYPE(nvfp4)
BL_DECL_TYPE(mlx4)
BL_DECL_TYPE(mlx8)
#undef BL_DECL_TYPE
/* The grid types: read, not written (no from_float). */
#define BL_DECL_READ(t) void bl_to_float_##t(const void *src, float *dst, int64_t n);
BL_DECL_READ(iq2_xxs)
BL_DECL_READ(iq2_xs)
BL_DECL_READ(iq2_s)
BL_DECL_READ(iq3_xxs)
BL_DECL_READ(iq3_s)
BL_DECL_READ(iq1_s)
BL_DECL_READ(iq1_m)
#undef BL_DECL_READ

void bl_vec_dot_f32(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_f16(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_bf16(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q2_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q3_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_iq4_nl_q8_0(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_iq4_xs_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_mxfp4_q8_0(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_fp8_f32(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_nvfp4_f32(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_mlx4_f32(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_mlx8_f32(int64_t n, float *s, const void *x, const void *y);
/* E4M3 and E2M1 (quants_fp.c) */
float bl_e4m3_to_f32(uint8_t x);
extern float bl_e4m3_table[256]; /* bl_e4m3_to_f32 of every code, filled when the library loads */
uint8_t bl_f32_to_e4m3(float x);
extern const float bl_e2m1_values[16];
void bl_vec_dot_iq2_xxs_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_iq2_xs_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_iq2_s_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_iq3_xxs_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_iq3_s_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_iq1_s_q8_K(int64_t n, float *s, const void *x, const void *y);
void bl_vec_dot_iq1_m_q8_K(int64_t n, float *s, const void *x, const void *y);

#endif
