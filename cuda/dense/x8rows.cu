// bloomery CUDA library: a decode batch's activation rows quantized once a launch into dot8.cuh's
// x8 layout (int8 values per 32 in x8_pos order, f32 group scales and sums, int8 sums per 16),
// RMS-normalised first when asked, so that the batched products (mv_batch.cu's k_mvb, moe_batch.cu's
// k_mb_gu) copy the compact rows whole instead of every one of their blocks reading the f32 rows,
// normalising and quantizing them again. One block a row. The numerics are those of the blocks'
// own staging, bit for bit: row_scales' sum order and scale, x_at's products, q8_group's rounding.
// With FAST_COMBINE the normalised kernel can first add a decode batch's pending expert combine to
// the rows (k_x8_comb: k_moe_combine's sum, the new x stored), one launch instead of two.
#include "common.cuh"
#include "dot8.cuh"
#include "dotbatch.cuh"
#include "internal.h"

// Groups of 32 a team of four threads holds in registers (the normalised kernel holds a whole row).
#define X8_PASSES 2
#define X8_MAX_THREADS 1024
// Longest row the normalised kernel takes: every group in registers at once.
#define X8_NORM_MAX_N (X8_MAX_THREADS / 4 * X8_PASSES * 32)

// The norm weights of the groups this thread takes (g = p * (blockDim.x / 4) + threadIdx.x / 4,
// p < X8_PASSES, eight values a thread), ones where normw is null or past the row's ng groups.
__device__ __forceinline__ void x8_norm_weights(const float *normw, int ng, float4 (&wa)[X8_PASSES], float4 (&wb)[X8_PASSES]) {
  const int part = threadIdx.x & 3, gpp = (int)blockDim.x >> 2;
#pragma unroll
  for (int p = 0; p < X8_PASSES; p++) {
    const int g = p * gpp + (threadIdx.x >> 2);
    wa[p] = wb[p] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    if (normw && g < ng) {
      wa[p] = __ldg(reinterpret_cast<const float4 *>(normw) + 8 * g + 2 * part);
      wb[p] = __ldg(reinterpret_cast<const float4 *>(normw) + 8 * g + 2 * part + 1);
    }
  }
}

// This thread's elements of its groups (as x8_norm_weights takes them) from the row's float4s
// (ld(i): float4 i), zeros past the row's ng groups.
template <class Ld>
__device__ __forceinline__ void x8_row_groups(Ld ld, int ng, float4 (&va)[X8_PASSES], float4 (&vb)[X8_PASSES]) {
  const int part = threadIdx.x & 3, gpp = (int)blockDim.x >> 2;
#pragma unroll
  for (int p = 0; p < X8_PASSES; p++) {
    const int g = p * gpp + (threadIdx.x >> 2);
    va[p] = vb[p] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (g < ng) {
      va[p] = ld(8 * g + 2 * part);
      vb[p] = ld(8 * g + 2 * part + 1);
    }
  }
}

// A row of n (this thread's elements of its groups in va / vb, zeros past the row) RMS-normalised
// with the weights wa / wb and quantized into the x8 slot dst. red: n / 4 + 1 floats of shared
// memory (a float4's squares, then the scale). Every thread of the block calls it.
__device__ __forceinline__ void x8_norm_quant(const float4 (&va)[X8_PASSES], const float4 (&vb)[X8_PASSES], const float4 (&wa)[X8_PASSES],
                                              const float4 (&wb)[X8_PASSES], int n, float eps, float *red, uint8_t *dst) {
  const int part = threadIdx.x & 3, ng = n / 32, gpp = (int)blockDim.x >> 2, n4 = n >> 2;
#pragma unroll
  for (int p = 0; p < X8_PASSES; p++) {
    const int g = p * gpp + (threadIdx.x >> 2);
    if (g < ng) {
      red[8 * g + 2 * part] = sq4(va[p]);
      red[8 * g + 2 * part + 1] = sq4(vb[p]);
    }
  }
  __syncthreads();
  // the scale as row_scales computes it: lane l adds the squares of float4s l, l + 32, ... in order
  if (threadIdx.x < 32) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n4; i += 32) ss += red[i];
    ss = warp_sum(ss);
    if (threadIdx.x == 0) red[n4] = 1.0f / sqrtf(ss / (float)n + eps);
  }
  __syncthreads();
  const float s = red[n4];
#pragma unroll
  for (int p = 0; p < X8_PASSES; p++) {
    if (p * gpp >= ng) break; // the block's teams together: q8_group's shuffles see whole warps
    const int g = p * gpp + (threadIdx.x >> 2);
    // x_at's products: x * (1/rms) * w
    const float4 a = make_float4(va[p].x * s * wa[p].x, va[p].y * s * wa[p].y, va[p].z * s * wa[p].z, va[p].w * s * wa[p].w);
    const float4 b = make_float4(vb[p].x * s * wb[p].x, vb[p].y * s * wb[p].y, vb[p].z * s * wb[p].z, vb[p].w * s * wb[p].w);
    q8_group(a, b, g < ng, dst, n, g, part);
  }
}

// Row blockIdx.x of x (ldx floats apart) into the x8 slot xq + blockIdx.x * x8_bytes(n).
// NORM: shared memory of n / 4 + 1 floats (a float4's squares, then the scale); the row's groups
// g = p * (blockDim.x / 4) + threadIdx.x / 4 (p < X8_PASSES) four threads each, as q8_group takes them.
template <bool NORM>
__global__ void __launch_bounds__(X8_MAX_THREADS) k_x8_rows(const float *x, int ldx, int n, const float *normw, float eps, uint8_t *xq) {
  const float *src = x + (size_t)blockIdx.x * ldx;
  uint8_t *dst = xq + (size_t)blockIdx.x * x8_bytes(n);
  if constexpr (!NORM) {
    cu_pdl_entry();
    stage_rows_q8(src, 0, n, 1, [](int) { return 0; }, dst);
  } else {
    extern __shared__ float x8_red[];
    const int ng = n / 32;
    const float4 *s4 = reinterpret_cast<const float4 *>(src);
    // the norm weights before the wait (they never change)
    float4 wa[X8_PASSES], wb[X8_PASSES];
    x8_norm_weights(normw, ng, wa, wb);
    cu_pdl_entry();
    float4 va[X8_PASSES], vb[X8_PASSES];
    x8_row_groups([&](int i) { return __ldcg(s4 + i); }, ng, va, vb);
    x8_norm_quant(va, vb, wa, wb, n, eps, x8_red, dst);
  }
}

// The fused combine's block: 128 registers a thread hold a float4 of each of up to X8_COMB_MAX_K
// picks in flight; its teams take rows of up to X8_COMB_MAX_N.
#define X8_COMB_THREADS 512
#define X8_COMB_MAX_K 16
#define X8_COMB_MAX_N (X8_COMB_THREADS / 4 * X8_PASSES * 32)

// Row t = blockIdx.x of the pending combine (FAST_COMBINE): first k_moe_combine's sum for each
// element (s = 0, s = fma(selw[t][j], ypair[pair_of[t][j]], s) for j = 0 .. k - 1, x += s), the new
// row stored to x and kept in shared memory (xs: n floats, then n / 4 + 1 for the norm), then
// normalised and quantized into xq + t * x8_bytes(n) exactly as k_x8_rows<true> does. The picks'
// pair rows and weights are read before the wait: they are written at least two launches before
// (the router's picks, then gate/up and down), ypair by the launch before (down).
__global__ void __launch_bounds__(X8_COMB_THREADS) k_x8_comb(combine_args cb, const float *normw, float eps, uint8_t *xq) {
  extern __shared__ float x8_red[];
  __shared__ int cpo[X8_COMB_MAX_K];
  __shared__ float csw[X8_COMB_MAX_K];
  const int t = blockIdx.x, n = cb.n, k = cb.k, ng = n / 32, n4 = n >> 2;
  float4 *xs = reinterpret_cast<float4 *>(x8_red);
  float4 wa[X8_PASSES], wb[X8_PASSES];
  x8_norm_weights(normw, ng, wa, wb);
  if ((int)threadIdx.x < k) {
    cpo[threadIdx.x] = __ldcg(cb.pair_of + (size_t)t * k + threadIdx.x);
    csw[threadIdx.x] = __ldcg(cb.selw + (size_t)t * k + threadIdx.x);
  }
  cu_pdl_entry();
  __syncthreads();
  float4 *xr = reinterpret_cast<float4 *>(cb.x + (size_t)t * cb.ldx);
  const float4 *yp = reinterpret_cast<const float4 *>(cb.ypair);
  const int ldy4 = cb.ldy >> 2;
  for (int i = threadIdx.x; i < n4; i += blockDim.x) {
    float4 y[X8_COMB_MAX_K];
#pragma unroll
    for (int j = 0; j < X8_COMB_MAX_K; j++)
      if (j < k) y[j] = __ldcg(yp + (size_t)cpo[j] * ldy4 + i);
    const float4 xv = __ldcg(xr + i);
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < X8_COMB_MAX_K; j++)
      if (j < k) {
        const float w = csw[j];
        s = make_float4(__fmaf_rn(w, y[j].x, s.x), __fmaf_rn(w, y[j].y, s.y), __fmaf_rn(w, y[j].z, s.z), __fmaf_rn(w, y[j].w, s.w));
      }
    const float4 v = make_float4(xv.x + s.x, xv.y + s.y, xv.z + s.z, xv.w + s.w);
    xr[i] = v;
    xs[i] = v;
  }
  __syncthreads();
  float4 va[X8_PASSES], vb[X8_PASSES];
  x8_row_groups([&](int i) { return xs[i]; }, ng, va, vb);
  x8_norm_quant(va, vb, wa, wb, n, eps, x8_red + n, xq + (size_t)t * x8_bytes(n));
}

size_t cu_x8_scratch_bytes(int64_t n) {
  const int64_t n32 = (n + 31) / 32 * 32;
  return (size_t)MV_MAX_NT * (size_t)x8_bytes((int)n32);
}

int64_t cu_x8_rows(cudaStream_t st, const float *x, int ldx, int n, int nt, int norm, const float *normw, float eps, uint8_t *xq, size_t cap,
                   bool *done) {
  *done = false;
  if (!x || !xq || nt < 1 || nt > MV_MAX_NT || n <= 0 || n % 32 || ldx < n || ldx % 4 || (size_t)nt * x8_bytes(n) > cap) return BL_OK;
  if (reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(xq) % 16 || (normw && reinterpret_cast<uintptr_t>(normw) % 16)) return BL_OK;
  if (norm) {
    if (n > X8_NORM_MAX_N) return BL_OK;
    // teams of four threads holding X8_PASSES groups each, whole warps
    const int teams = (n / 32 + X8_PASSES - 1) / X8_PASSES, threads = (4 * teams + 31) / 32 * 32;
    CU_LAUNCH("decode-batch rows to int8 (normalised)", k_x8_rows<true>, dim3(nt), dim3(threads), (size_t)(n / 4 + 1) * sizeof(float), st, x, ldx, n,
              normw, eps, xq);
  } else {
    CU_LAUNCH("decode-batch rows to int8", k_x8_rows<false>, dim3(nt), dim3(MV_THREADS), 0, st, x, ldx, n, normw, eps, xq);
  }
  *done = true;
  return BL_OK;
}

int64_t cu_x8_rows_comb(cudaStream_t st, const float *x, int ldx, int n, int nt, const float *normw, float eps, uint8_t *xq, size_t cap,
                        combine_args *cb, bool *done) {
  *done = false;
  if (!cb || cb->ntok < 1) return BL_OK;
  // the pending sum must be over exactly the rows this quantizes
  if (cb->x != x || cb->ldx != ldx || cb->n != n || cb->ntok != nt || cb->k < 1 || cb->k > X8_COMB_MAX_K) return BL_OK;
  if (!x || !xq || !cb->ypair || !cb->pair_of || !cb->selw || nt > MV_MAX_NT || n <= 0 || n % 32 || n > X8_COMB_MAX_N || ldx < n || ldx % 4 ||
      cb->ldy < n || cb->ldy % 4 || (size_t)nt * x8_bytes(n) > cap)
    return BL_OK;
  if (reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(xq) % 16 || reinterpret_cast<uintptr_t>(cb->ypair) % 16 ||
      (normw && reinterpret_cast<uintptr_t>(normw) % 16))
    return BL_OK;
  // teams of four threads holding X8_PASSES groups each, and a float4 of the row a thread for the sum
  const int teams = (n / 32 + X8_PASSES - 1) / X8_PASSES, n4 = n / 4;
  int threads = (4 * teams + 31) / 32 * 32;
  const int sum_threads = n4 < X8_COMB_THREADS ? (n4 + 31) / 32 * 32 : X8_COMB_THREADS;
  if (sum_threads > threads) threads = sum_threads;
  CU_LAUNCH("decode-batch expert combine and rows to int8 (normalised)", k_x8_comb, dim3(nt), dim3(threads), (size_t)(n + n / 4 + 1) * sizeof(float), st,
            *cb, normw, eps, xq);
  cb->ntok = 0;
  cb->fused++;
  *done = true;
  return BL_OK;
}

int64_t cu_x8_rows_init() {
  const char *w = "configuring the decode-batch quantization";
  CU_OK(cu_kernel_prefs(k_x8_comb, w));
  CU_OK(cu_kernel_prefs(k_x8_rows<true>, w));
  return cu_kernel_prefs(k_x8_rows<false>, w);
}
