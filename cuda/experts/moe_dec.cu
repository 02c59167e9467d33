// bloomery CUDA library: the routed experts for decode-sized batches - the router (RMSNorm, F32
// logits, softmax, top-k, renormalised weights, picks sorted by expert id; the last block of a
// launch does the selection, so one launch), gate and up of the chosen experts fused with SwiGLU
// (only their rows are read), and down over all picks of a token weighted and added to the
// residual; the router's and the experts' biases and gpt-oss's clamped SwiGLU where a block has
// them. A dense FFN runs the same kernels with one "expert" of weight 1.
#include "common.cuh"
#include "internal.h"
#include "quants.cuh"
#include "route.cuh"
#include "rows.cuh"

// One token's selection (route.cuh) by a warp, written to sel / selw.
__device__ __forceinline__ void route_token(const router_args &a, int t, int *ssel, float *sw) {
  const int lane = threadIdx.x & 31, K = a.k;
  route_core<32>(a.logits + (size_t)t * a.n_expert, a.n_expert, K, a.norm_topk, a.w_scale, ssel, sw);
  if (lane == 0)
    for (int i = 0; i < K; i++) {
      a.sel[(size_t)t * K + i] = ssel[i];
      a.selw[(size_t)t * K + i] = sw[i];
    }
}

// grid: x over experts (MV_WARPS a block), y over groups of NT tokens.
template <int NT>
__global__ void __launch_bounds__(MV_THREADS) k_router(router_args a) {
  BL_TR_SCOPE(16);
  cu_pdl_entry();
  extern __shared__ float4 dyn_smem4[];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  __shared__ float red[32];
  __shared__ int ssel[MV_WARPS][ROUTER_MAX_K];
  __shared__ float sw[MV_WARPS][ROUTER_MAX_K];
  const int t0 = blockIdx.y * NT;
  const int nt = a.ntok - t0 < NT ? a.ntok - t0 : NT;
  const int n = a.n, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  stage_rows(xs, a.x + (size_t)t0 * a.ldx, a.ldx, n, nt, 1, a.normw, a.eps, red);
  if (blockIdx.x == 0 && a.h)
    for (int t = 0; t < nt; t++)
      for (int i = threadIdx.x; i < n; i += blockDim.x) a.h[(size_t)(t0 + t) * a.ldh + i] = xs[t * n + i];
  const int e = blockIdx.x * MV_WARPS + w;
  if (e < a.n_expert) {
    const float *wr = a.w + (size_t)e * a.ldw;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
#pragma unroll 4
    for (int i = lane * 4; i < n; i += 128) {
      const float4 wv = *reinterpret_cast<const float4 *>(wr + i);
#pragma unroll
      for (int t = 0; t < NT; t++) {
        if (t < nt) {
          const float4 xv = *reinterpret_cast<const float4 *>(xs + t * n + i);
          acc[t] += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w;
        }
      }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
      const float v = warp_sum(acc[t]);
      if (lane == 0 && t < nt) a.logits[(size_t)(t0 + t) * a.n_expert + e] = a.bias ? v + a.bias[e] : v;
    }
  }
  if (!last_arrival(a.counters + blockIdx.y, (int)gridDim.x)) return;
  for (int t = w; t < nt; t += MV_WARPS) route_token(a, t0 + t, ssel[w], sw[w]);
  if (threadIdx.x == 0) a.counters[blockIdx.y] = 0;
}

int64_t cu_router(cudaStream_t st, const router_args &a, int smem_limit) {
  if (a.k > ROUTER_MAX_K || a.n_expert > 32 * 32)
    return cu_fail(BL_E_UNSUPPORTED, "router: %d experts with %d used (at most %d used of 1024)", a.n_expert, a.k, ROUTER_MAX_K);
  int nt = smem_limit / (a.n * (int)sizeof(float));
  if (nt > ROUTER_NT) nt = ROUTER_NT;
  if (nt < 1) return cu_fail(BL_E_UNSUPPORTED, "router: rows of %d elements do not fit the card's shared memory", a.n);
  const int groups = (a.ntok + nt - 1) / nt;
  if (groups > a.max_groups) return cu_fail(BL_E_INVAL, "router: %d token groups, the context counts %d", groups, a.max_groups);
  const dim3 grid((a.n_expert + MV_WARPS - 1) / MV_WARPS, groups);
  const size_t smem = (size_t)nt * a.n * sizeof(float);
  const char *w = "router";
  if (nt == ROUTER_NT) CU_LAUNCH(w, k_router<ROUTER_NT>, grid, dim3(MV_THREADS), smem, st, a);
  else if (nt >= 4) CU_LAUNCH(w, k_router<4>, grid, dim3(MV_THREADS), smem, st, a);
  else if (nt >= 2) CU_LAUNCH(w, k_router<2>, grid, dim3(MV_THREADS), smem, st, a);
  else CU_LAUNCH(w, k_router<1>, grid, dim3(MV_THREADS), smem, st, a);
  return BL_OK;
}

// grid: x over hidden rows (MV_WARPS a block), y over a token's picks, z over tokens.
template <int T>
__global__ void __launch_bounds__(MV_THREADS) k_moe_gu(moe_dec_args a) {
  BL_TR_SCOPE(17);
  cu_pdl_entry();
  extern __shared__ float4 dyn_smem4[];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const int t = blockIdx.z, j = blockIdx.y, lane = threadIdx.x & 31;
  const int n = a.gate.ne0;
  stage_rows(xs, a.h + (size_t)t * a.ldh, a.ldh, n, 1, 0, nullptr, 0.0f, nullptr);
  const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
  if (r >= a.gate.ne1) return;
  const int e = a.sel[(size_t)t * a.k + j];
  const uint8_t *g = a.gate.d + (size_t)e * a.gate.nb2 + (size_t)r * a.gate.nb1;
  const uint8_t *u = a.up.d + (size_t)e * a.up.nb2 + (size_t)r * a.up.nb1;
  float ag = 0.0f, au = 0.0f;
  mv_row2<T>(g, u, xs, n, ag, au, lane);
  float gv = warp_sum(ag), uv = warp_sum(au);
  if (lane != 0) return;
  if (a.bg) gv += a.bg[(size_t)e * a.ldbg + r];
  if (a.bu) uv += a.bu[(size_t)e * a.ldbu + r];
  a.act[((size_t)t * a.k + j) * a.ldact + r] = act_glu(gv, uv, a.act_kind == BL_ACT_SWIGLU_OAI, a.alpha, a.limit);
}

// grid: x over output rows (MV_WARPS a block), y over tokens. Lanes walk the units of all the
// token's picks (k rows of down), each weighted; the sum is added to x.
template <int T>
__global__ void __launch_bounds__(MV_THREADS) k_moe_down(moe_dec_args a) {
  BL_TR_SCOPE(18);
  using Q = qt<T>;
  cu_pdl_entry();
  extern __shared__ float4 dyn_smem4[];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const int t = blockIdx.y, lane = threadIdx.x & 31, K = a.k;
  const int n = a.down.ne0; // hidden size
  stage_rows(xs, a.act + (size_t)t * K * a.ldact, a.ldact, n, K, 0, nullptr, 0.0f, nullptr);
  const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
  if (r >= a.down.ne1) return;
  float acc = 0.0f;
  const int U = (n / Q::BE) * Q::UPB;
#pragma unroll 4
  for (int q = lane; q < K * U; q += 32) {
    const int j = q / U, k = q - j * U;
    const int e = a.sel[(size_t)t * K + j];
    const float wj = a.selw[(size_t)t * K + j];
    const int blk = k / Q::UPB, u = k - blk * Q::UPB;
    const uint8_t *rp = a.down.d + (size_t)e * a.down.nb2 + (size_t)r * a.down.nb1;
    const float *xb = xs + j * n + blk * Q::BE;
    float s = 0.0f;
    Q::unit(rp + (size_t)blk * Q::BB, u, [&](int pos, float w0, float w1, float w2, float w3) {
      const float4 xv = *reinterpret_cast<const float4 *>(xb + pos);
      s += w0 * xv.x + w1 * xv.y + w2 * xv.z + w3 * xv.w;
    });
    acc += wj * s;
  }
  acc = warp_sum(acc);
  if (lane != 0) return;
  if (a.bd)
    for (int j = 0; j < K; j++) acc += a.selw[(size_t)t * K + j] * a.bd[(size_t)a.sel[(size_t)t * K + j] * a.ldbd + r];
  a.x[(size_t)t * a.ldx + r] += acc;
}

int64_t cu_moe_dec(cudaStream_t st, const moe_dec_args &a, int ntok, int smem_limit) {
  if (ntok <= 0) return BL_OK;
  const size_t s_gu = (size_t)a.gate.ne0 * sizeof(float), s_dn = (size_t)a.k * a.down.ne0 * sizeof(float);
  if ((int64_t)s_gu > smem_limit || (int64_t)s_dn > smem_limit)
    return cu_fail(BL_E_UNSUPPORTED, "experts: %d picks of %d hidden values do not fit the card's shared memory", a.k, a.down.ne0);
  const dim3 g1((a.gate.ne1 + MV_WARPS - 1) / MV_WARPS, a.k, ntok);
  cudaError_t e = cudaErrorInvalidValue;
  switch (a.gate.type) {
#define L(T) \
  case T: e = cu_launch(k_moe_gu<T>, g1, dim3(MV_THREADS), s_gu, st, a); break;
    CU_TYPE_CASES(L)
#undef L
    default: return cu_fail(BL_E_UNSUPPORTED, "experts: %s has no CUDA kernel", cu_type_name(a.gate.type));
  }
  CU_TRY(e, "expert gate/up");
  const dim3 g2((a.down.ne1 + MV_WARPS - 1) / MV_WARPS, ntok);
  switch (a.down.type) {
#define L(T) \
  case T: e = cu_launch(k_moe_down<T>, g2, dim3(MV_THREADS), s_dn, st, a); break;
    CU_TYPE_CASES(L)
#undef L
    default: return cu_fail(BL_E_UNSUPPORTED, "experts: %s has no CUDA kernel", cu_type_name(a.down.type));
  }
  CU_TRY(e, "expert down");
  return BL_OK;
}

int64_t cu_moe_dec_init(int smem_optin) {
  const char *w = "configuring the expert kernels";
  CU_OK(cu_allow_smem(k_router<ROUTER_NT>, smem_optin, w));
  CU_OK(cu_allow_smem(k_router<4>, smem_optin, w));
  CU_OK(cu_allow_smem(k_router<2>, smem_optin, w));
  CU_OK(cu_allow_smem(k_router<1>, smem_optin, w));
#define S(T)                                            \
  CU_OK(cu_allow_smem(k_moe_gu<T>, smem_optin, w));     \
  CU_OK(cu_allow_smem(k_moe_down<T>, smem_optin, w));
  CU_TYPE_CASES(S)
#undef S
  return BL_OK;
}
