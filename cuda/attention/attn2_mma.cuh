// bloomery CUDA library: one token's attention window on the tensor cores (attn2.cu, FAST_ATTMMA):
// the query heads of a KV group (up to 8) are the rows of m16n8k16 f16 products, rows past them
// zero. Warp w forms the scores of the window's positions 16w..16w+15 (Q from sQh against the
// key rows as ldmatrix reads them), the block's per-head max and sum go through shared memory,
// the probabilities are written as halves (sPh), then warp w forms the values of dimensions
// 16w..16w+15 over every position (V read transposed). The scalar kernel spent its time issuing
// FP32 products at a quarter of the SM's warps (ncu at 4,096 positions: 17 us a layer, IPC 1.9).
#pragma once
#include "common.cuh"
#include "mma.cuh"

// Key / value row stride in shared memory for the tensor-core window (bytes): 16 past a multiple
// of 128, so the 8 rows of an ldmatrix phase fall on distinct banks.
__host__ __device__ constexpr int a2m_rs(int hd) { return hd * 2 + 16; }

// One window of cnt positions (rows of sK / sV, a2m_rs apart). m, l: the running max and sum of
// head lane / 4 (every thread of the block holds its head's); o: the thread's values of that
// head at dimensions 16w + 8i + 2(lane % 4) + {0, 1}. sQh: 16 rows of HD + 8 halves (rows from
// the group's head count on zero); sPh: 16 rows of WP + 8 halves (rows from 8 on zero). V rows
// past cnt up to the next multiple of 16 must be finite (the caller zeroes them). 256 threads.
template <int HD, int WP>
__device__ __forceinline__ void a2m_window(const __half *sQh, const uint8_t *sK, const uint8_t *sV, __half *sPh, float (*sred_m)[8], float (*sred_s)[8],
                                           int cnt, float &m, float &l, float (&o)[2][4]) {
  static_assert(HD == 128 && (WP == 64 || WP == 128), "8 warps of 16 dimensions; windows of up to 8 warps of 16 positions");
  constexpr int LQ = HD + 8, LP = WP + 8, RSH = a2m_rs(HD) / 2;
  const __half *sKh = reinterpret_cast<const __half *>(sK), *sVh = reinterpret_cast<const __half *>(sV);
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3, q0 = 16 * w;
  float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  if (q0 < cnt) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
      uint32_t a[4], b[4];
      ldsm_x4(a, sQh + (lane & 15) * LQ + kk * 16 + (lane >> 4) * 8);
      ldsm_x4(b, sKh + (q0 + (lane & 7) + ((lane >> 4) << 3)) * RSH + kk * 16 + ((lane >> 3) & 1) * 8);
      mma16816(s[0], a, b[0], b[1]);
      mma16816(s[1], a, b[2], b[3]);
    }
  }
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      if (q0 + 8 * i + 2 * t4 + e >= cnt) s[i][e] = -INFINITY;
      mx = fmaxf(mx, s[i][e]);
    }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  if (t4 == 0) sred_m[w][g] = mx;
  __syncthreads();
  float wm = sred_m[0][g];
#pragma unroll
  for (int v = 1; v < 8; v++) wm = fmaxf(wm, sred_m[v][g]);
  const float mn = fmaxf(m, wm), al = expf(m - mn);
  float ls = 0.0f;
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const float p0 = expf(s[i][0] - mn), p1 = expf(s[i][1] - mn);
    ls += p0 + p1;
    if (q0 < cnt) *reinterpret_cast<uint32_t *>(sPh + g * LP + q0 + 8 * i + 2 * t4) = pack_h2(p0, p1);
  }
  ls += __shfl_xor_sync(0xffffffffu, ls, 1);
  ls += __shfl_xor_sync(0xffffffffu, ls, 2);
  if (t4 == 0) sred_s[w][g] = ls;
  __syncthreads();
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < 8; v++) sum += sred_s[v][g];
  l = l * al + sum;
  m = mn;
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) o[i][e] *= al;
  const int d0 = 16 * w, nk = (cnt + 15) >> 4;
  for (int j = 0; j < nk; j++) {
    uint32_t a[4], b[4];
    ldsm_x4(a, sPh + (lane & 15) * LP + 16 * j + (lane >> 4) * 8);
    ldsm_x4_t(b, sVh + (16 * j + (lane & 7) + ((lane >> 3) & 1) * 8) * RSH + d0 + (lane >> 4) * 8);
    mma16816(o[0], a, b[0], b[1]);
    mma16816(o[1], a, b[2], b[3]);
  }
}
