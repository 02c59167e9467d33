// bloomery CUDA library: prefill attention, flash-attention style on the tensor cores. A block
// takes a tile of up to 64 consecutive query tokens of one sequence and one query head; four
// warps own 16 query rows each. K and V tiles of 64 cached positions (f16) are staged in shared
// memory; S = Q K^T and O += P V run as m16n8k16 products with the online softmax in registers
// (base-2 exponent, the scale folded into Q). Causality is by each query's position.
#include <math.h>

#include "common.cuh"
#include "internal.h"
#include "mma.cuh"

#define FA_Q 64
#define FA_KV 64

template <int HD>
__global__ void __launch_bounds__(128) k_fa(fa_args a) {
  cu_pdl_entry();
  constexpr int LDS = HD + 8;
  extern __shared__ __align__(16) unsigned char fa_raw[];
  __half *sQ = reinterpret_cast<__half *>(fa_raw), *sK = sQ + FA_Q * LDS, *sV = sK + FA_KV * LDS;
  const int4 tile = a.tiles[blockIdx.x];
  const int h = blockIdx.y, g = h / a.G;
  const int tok0 = tile.x, cnt = tile.y, maxp = tile.w;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
  for (int i = tid; i < FA_Q * HD / 4; i += 128) {
    const int r = i / (HD / 4), c = (i - r * (HD / 4)) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < cnt) v = *reinterpret_cast<const float4 *>(a.q + (size_t)(tok0 + r) * a.ldq + (size_t)h * HD + c);
    const float s = a.scale_log2;
    st_h4(sQ + r * LDS + c, v.x * s, v.y * s, v.z * s, v.w * s);
  }
  __syncthreads();
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++) ldsm_x4(qf[kk], sQ + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
  const int r0 = warp * 16 + gid, r1 = r0 + 8;
  const int qp0 = r0 < cnt ? a.pos[tok0 + r0] : -1, qp1 = r1 < cnt ? a.pos[tok0 + r1] : -1;
  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const size_t base = (size_t)tile.z * a.slot_stride + (size_t)g * HD;
  const __half *kbase = a.kc + base, *vbase = a.vc + base;
  for (int kb = 0; kb <= maxp; kb += FA_KV) {
    __syncthreads();
    for (int i = tid; i < FA_KV * HD / 8; i += 128) {
      const int r = i / (HD / 8), c = (i - r * (HD / 8)) * 8, p = kb + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (p <= maxp) {
        kv = *reinterpret_cast<const uint4 *>(kbase + (size_t)p * a.kd + c);
        vv = *reinterpret_cast<const uint4 *>(vbase + (size_t)p * a.kd + c);
      }
      *reinterpret_cast<uint4 *>(sK + r * LDS + c) = kv;
      *reinterpret_cast<uint4 *>(sV + r * LDS + c) = vv;
    }
    __syncthreads();
    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
      for (int np = 0; np < 4; np++) {
        uint32_t b[4];
        ldsm_x4(b, sK + (16 * np + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
        mma16816(s[2 * np], qf[kk], b[0], b[1]);
        mma16816(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int kp = kb + 8 * nt + 2 * tig + e;
        if (kp > qp0) s[nt][e] = -INFINITY;
        if (kp > qp1) s[nt][2 + e] = -INFINITY;
        mx0 = fmaxf(mx0, s[nt][e]);
        mx1 = fmaxf(mx1, s[nt][2 + e]);
      }
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
    m0 = mn0;
    m1 = mn1;
    l0 *= al0;
    l1 *= al1;
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
      o[i][0] *= al0;
      o[i][1] *= al0;
      o[i][2] *= al1;
      o[i][3] *= al1;
    }
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
      s[nt][0] = exp2f(s[nt][0] - mu0);
      s[nt][1] = exp2f(s[nt][1] - mu0);
      s[nt][2] = exp2f(s[nt][2] - mu1);
      s[nt][3] = exp2f(s[nt][3] - mu1);
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const uint32_t pa[4] = {pack_h2(s[2 * j][0], s[2 * j][1]), pack_h2(s[2 * j][2], s[2 * j][3]),
                              pack_h2(s[2 * j + 1][0], s[2 * j + 1][1]), pack_h2(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
      for (int np = 0; np < HD / 16; np++) {
        uint32_t b[4];
        ldsm_x4_t(b, sV + (16 * j + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + 16 * np + (lane >> 4) * 8);
        mma16816(o[2 * np], pa, b[0], b[1]);
        mma16816(o[2 * np + 1], pa, b[2], b[3]);
      }
    }
  }
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
#pragma unroll
  for (int nt = 0; nt < HD / 8; nt++) {
    const int d = 8 * nt + 2 * tig;
    if (r0 < cnt) {
      float *op = a.out + (size_t)(tok0 + r0) * a.ldo + (size_t)h * HD + d;
      op[0] = o[nt][0] * i0;
      op[1] = o[nt][1] * i0;
    }
    if (r1 < cnt) {
      float *op = a.out + (size_t)(tok0 + r1) * a.ldo + (size_t)h * HD + d;
      op[0] = o[nt][2] * i1;
      op[1] = o[nt][3] * i1;
    }
  }
}

bool cu_flash_supported(int hd) { return hd == 64 || hd == 128; }

int64_t cu_flash_prefill(cudaStream_t st, const fa_args &a, int hd, int n_tiles) {
  if (n_tiles <= 0) return BL_OK;
  const dim3 grid(n_tiles, a.nh);
  if (hd == 64) CU_LAUNCH("prefill attention", k_fa<64>, grid, dim3(128), (size_t)3 * 64 * (64 + 8) * 2, st, a);
  else if (hd == 128) CU_LAUNCH("prefill attention", k_fa<128>, grid, dim3(128), (size_t)3 * 64 * (128 + 8) * 2, st, a);
  else return cu_fail(BL_E_UNSUPPORTED, "prefill attention: head size %d", hd);
  return BL_OK;
}

int64_t cu_attn_init(int smem_optin) {
  (void)smem_optin;
  CU_TRY(cudaFuncSetAttribute(k_fa<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 64 * (64 + 8) * 2), "configuring attention");
  CU_TRY(cudaFuncSetAttribute(k_fa<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 64 * (128 + 8) * 2), "configuring attention");
  CU_OK(cu_kernel_prefs(k_fa<64>, "configuring attention"));
  return cu_kernel_prefs(k_fa<128>, "configuring attention");
}
