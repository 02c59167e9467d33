/* bloomery CPU library: the kernel table (one per instruction-set path: scalar; AVX2, AVX-512 on
 * x86-64; NEON, dotprod, i8mm on aarch64) that matmul, MoE and attention call through, chosen at
 * run time from cpuid / the hardware capability bits (cpuid.c). */
#ifndef BL_KERNELS_H
#define BL_KERNELS_H
#include "quants.h"
#include <stdint.h>

/* Most activation rows one tile call takes (prefill reads a weight block once per this many rows). */
#define BL_TILE_A 16
/* Products of at least this many activation rows use the lane-order kernels where the path has
 * them. It is 1, every size, on purpose: a row's bits must not depend on how many rows share its
 * product (batch invariance, test/batch-invariance.test.ts); the lane kernels are as fast as the
 * element-order ones for one row and faster for more. */
#define BL_LANES_MIN 1

/* y[r][i] = dot(weight row i, activation row r) for i < nw, r < na (na <= BL_TILE_A).
 * Weight rows of n elements at w + i * ws; activation row r (already in the weight type's
 * vec_dot_type, as this path's quantizer wrote it) at a[r]. */
typedef void (*bl_tile_fn)(int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,
                           float *const *y);
/* Convert one activation row of n floats (n a multiple of the block) to an activation type. */
typedef void (*bl_act_fn)(const float *x, void *dst, int64_t n);

/* The bit numbers of bl_cpu_paths (ffi/cpu-kernels.ts's CPU_PATHS): a path of the other
 * architecture is never supported. */
typedef enum {
  BL_PATH_SCALAR = 0,
  BL_PATH_AVX2 = 1,
  BL_PATH_AVX512 = 2,
  BL_PATH_NEON = 3,
  BL_PATH_DOTPROD = 4,
  BL_PATH_I8MM = 5,
  BL_PATH_COUNT = 6
} bl_path;

typedef struct bl_kernels {
  const char *name;
  bl_path path;
  bl_tile_fn tile[BL_TYPE_COUNT]; /* by weight type; NULL: the type has no product on this path */
  bl_act_fn act[BL_TYPE_COUNT];   /* by activation type (Q8_K, Q8_0, F16, ...); NULL: reference */
  /* Batches of at least BL_LANES_MIN rows may use lane-order Q8_K activations (simd_avx512_kl.c):
   * their quantizer and their products by weight type; NULL where the path has none. */
  bl_act_fn act_q8k_lanes;
  bl_tile_fn tile_lanes[BL_TYPE_COUNT];
  /* ---- float helpers for attention and the dense parts ---- */
  /* sum of x[i] * y[i] */
  float (*dot_f32)(const float *x, const float *y, int64_t n);
  /* sum of x[i] * h[i], h in f16 */
  float (*dot_f16)(const float *x, const uint16_t *h, int64_t n);
  /* y[i] += a * h[i], h in f16 */
  void (*axpy_f16)(float a, const uint16_t *h, float *y, int64_t n);
  /* h[i] = f16(x[i]) (round to nearest even) */
  void (*to_f16)(const float *x, uint16_t *h, int64_t n);
  /* x[i] = f32(f16(x[i])) */
  void (*round_f16)(float *x, int64_t n);
  /* g[i] = silu(g[i]) * u[i] */
  void (*swiglu)(float *g, const float *u, int64_t n);
  /* x[i] = exp(x[i] - m), returns the sum (in double) */
  double (*exp_sum)(float *x, float m, int64_t n);
  /* y[i] += a * x[i] */
  void (*axpy_f32)(float a, const float *x, float *y, int64_t n);
  /* y[i] *= a */
  void (*scale_f32)(float a, float *y, int64_t n);
  /* C[m][n] = cs * C[m][n] + the sum over k of A[m * sam + k * sak] * B[k * ldb + n], for m < M, n < N, k < K,
   * the products added in k order; cs == 0: C is written, never read (the delta rule's chunks, delta_rule.c) */
  void (*gemm_f32)(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t ldb,
                   float cs, float *C, int64_t ldc);
  /* Attention over a sub-tile of up to 64 positions of one KV head. attn_prep converts positions
   * [0, nb) of k and v (the first position's f16 rows, kd halves apart) into work
   * (bl_attn_work(hd) floats); attn_heads then takes the first nb' <= nb of them for the G query
   * heads sharing the KV head (query h at q + h * qstride, f32 values of f16): scores q . k * scale,
   * and each head's online-softmax state st[h * (hd + 2)] = (max, sum, acc[hd]) updated. One prep
   * serves several query tokens. */
  void (*attn_prep)(const uint16_t *k, const uint16_t *v, int64_t kd, int nb, int hd, float *work);
  void (*attn_heads)(const float *q, int64_t qstride, int G, const uint16_t *k, const uint16_t *v, int64_t kd, int nb,
                     int hd, float scale, float *st, float *work);
} bl_kernels;

/* The active path's table (BLOOMERY_CPU_PATH, else the best the CPU has). */
const bl_kernels *bl_kern(void);
/* The table of a path, or NULL when this CPU cannot run it. */
const bl_kernels *bl_kern_path(bl_path p);
/* Path by name ("scalar", "avx2", "avx512", "neon", "dotprod", "i8mm"); -1 when the name is unknown. */
int bl_path_by_name(const char *name);
/* Whether this CPU (and OS) can run a path. */
int bl_path_supported(bl_path p);

/* Per-path tables, defined in kernels_scalar.c, simd_avx2_*.c, simd_avx512_*.c (x86-64) and
 * simd_neon_*.c (aarch64: one source for neon, dotprod and i8mm, which differ only in how the
 * exact integer sums are formed). */
extern const bl_kernels bl_kernels_scalar;
void bl_kernels_init_avx2(bl_kernels *k);
void bl_kernels_init_avx512(bl_kernels *k);
/* Pieces of the SIMD tables filled by each file of a path. */
void bl_avx2_fill_k(bl_kernels *k);
void bl_avx2_fill_q(bl_kernels *k);
void bl_avx2_fill_f(bl_kernels *k);
void bl_avx2_fill_iq(bl_kernels *k);
/* FP8, NVFP4, MLX4, MLX8 (simd_avx2_fp.c, simd_avx512_fp.c) */
void bl_avx2_fill_fp(bl_kernels *k);
void bl_avx512_fill_fp(bl_kernels *k);
void bl_avx512_fill_k(bl_kernels *k);
void bl_avx512_fill_q(bl_kernels *k);
void bl_avx512_fill_f(bl_kernels *k);
void bl_avx512_fill_iq(bl_kernels *k);
void bl_avx512_fill_attn(bl_kernels *k);
void bl_avx512_fill_kl(bl_kernels *k);
/* Lane-order Q8_K (simd_avx512_kl.c): the quantizer, and the 256 values from and back to element order. */
void bl_avx512_act_q8k_lanes(const float *x, void *dst, int64_t n);
void bl_avx512_q8k_to_lanes(const int8_t *src, int8_t *dst);
void bl_avx512_q8k_from_lanes(const int8_t *src, int8_t *dst);
void bl_avx2_fill_attn(bl_kernels *k);
/* aarch64: the tables of the neon, dotprod and i8mm paths (simd_neon_*.c). */
void bl_kernels_init_neon(bl_kernels *k, bl_path p);
void bl_neon_fill_f(bl_kernels *k);
void bl_neon_fill_q(bl_kernels *k, bl_path p);
void bl_neon_fill_k(bl_kernels *k, bl_path p);
void bl_neon_fill_attn(bl_kernels *k);

/* Scalar float helpers (the scalar table's entries, reused by SIMD paths for tails). */
float bl_dot_f32_ref(const float *x, const float *y, int64_t n);
float bl_dot_f16_ref(const float *x, const uint16_t *h, int64_t n);
void bl_axpy_f16_ref(float a, const uint16_t *h, float *y, int64_t n);
void bl_to_f16_ref(const float *x, uint16_t *h, int64_t n);
void bl_round_f16_ref(float *x, int64_t n);
void bl_swiglu_ref(float *g, const float *u, int64_t n);
double bl_exp_sum_ref(float *x, float m, int64_t n);
void bl_gemm_f32_ref(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak, const float *B, int64_t ldb,
                     float cs, float *C, int64_t ldc);
/* The scalar tile: every (row, activation) pair through the type's reference vec_dot. */
void bl_tile_ref(int32_t type, int64_t n, const uint8_t *w, int64_t ws, int nw, const uint8_t *const *a, int na,
                 float *const *y);
#endif
