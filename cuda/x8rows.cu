// bloomery CUDA library: a decode batch's activation rows quantized once a launch into dot8.cuh's
// x8 layout (int8 values per 32 in x8_pos order, f32 group scales and sums, int8 sums per 16),
// RMS-normalised first when asked, so that the batched products (mv_batch.cu's k_mvb, moe_batch.cu's
// k_mb_gu) copy the compact rows whole instead of every one of their blocks reading the f32 rows,
// normalising and quantizing them again. One block a row. The numerics are those of the blocks'
// own staging, bit for bit: row_scales' sum order and scale, x_at's products, q8_group's rounding.
#include "common.cuh"
#include "dot8.cuh"
#include "dotbatch.cuh"
#include "internal.h"

// Groups of 32 a team of four threads holds in registers (the normalised kernel holds a whole row).
#define X8_PASSES 2
#define X8_MAX_THREADS 1024
// Longest row the normalised kernel takes: every group in registers at once.
#define X8_NORM_MAX_N (X8_MAX_THREADS / 4 * X8_PASSES * 32)

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
    const int part = threadIdx.x & 3, ng = n / 32, gpp = (int)blockDim.x >> 2, n4 = n >> 2;
    const float4 *s4 = reinterpret_cast<const float4 *>(src);
    // the norm weights before the wait (they never change)
    float4 wa[X8_PASSES], wb[X8_PASSES];
#pragma unroll
    for (int p = 0; p < X8_PASSES; p++) {
      const int g = p * gpp + (threadIdx.x >> 2);
      wa[p] = wb[p] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
      if (normw && g < ng) {
        wa[p] = __ldg(reinterpret_cast<const float4 *>(normw) + 8 * g + 2 * part);
        wb[p] = __ldg(reinterpret_cast<const float4 *>(normw) + 8 * g + 2 * part + 1);
      }
    }
    cu_pdl_entry();
    float4 va[X8_PASSES], vb[X8_PASSES];
#pragma unroll
    for (int p = 0; p < X8_PASSES; p++) {
      const int g = p * gpp + (threadIdx.x >> 2);
      va[p] = vb[p] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (g < ng) {
        va[p] = __ldcg(s4 + 8 * g + 2 * part);
        vb[p] = __ldcg(s4 + 8 * g + 2 * part + 1);
      }
    }
#pragma unroll
    for (int p = 0; p < X8_PASSES; p++) {
      const int g = p * gpp + (threadIdx.x >> 2);
      if (g < ng) {
        x8_red[8 * g + 2 * part] = sq4(va[p]);
        x8_red[8 * g + 2 * part + 1] = sq4(vb[p]);
      }
    }
    __syncthreads();
    // the scale as row_scales computes it: lane l adds the squares of float4s l, l + 32, ... in order
    if (threadIdx.x < 32) {
      float ss = 0.0f;
      for (int i = threadIdx.x; i < n4; i += 32) ss += x8_red[i];
      ss = warp_sum(ss);
      if (threadIdx.x == 0) x8_red[n4] = 1.0f / sqrtf(ss / (float)n + eps);
    }
    __syncthreads();
    const float s = x8_red[n4];
#pragma unroll
    for (int p = 0; p < X8_PASSES; p++) {
      if (p * gpp >= ng) break; // the block's teams together: q8_group's shuffles see whole warps
      const int g = p * gpp + (threadIdx.x >> 2);
      // x_at's products: x * (1/rms) * w
      const float4 a = make_float4(va[p].x * s * wa[p].x, va[p].y * s * wa[p].y, va[p].z * s * wa[p].z, va[p].w * s * wa[p].w);
      const float4 b = make_float4(vb[p].x * s * wb[p].x, vb[p].y * s * wb[p].y, vb[p].z * s * wb[p].z, vb[p].w * s * wb[p].w);
      q8_group(a, b, g < ng, dst, n, g, part, true);
    }
  }
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

int64_t cu_x8_rows_init() {
  const char *w = "configuring the decode-batch quantization";
  CU_OK(cu_kernel_prefs(k_x8_rows<true>, w));
  return cu_kernel_prefs(k_x8_rows<false>, w);
}
