// bloomery CUDA library: the sigmoid router's picks (DeepSeek V3, GLM-4.5; ffi/bloomery.h
// BL_GATING_SIGMOID) from logits an earlier kernel wrote: s = sigmoid(l); chosen by s + corr (with
// expert groups, only the n_group_used groups whose two best scores sum highest take part), the k
// best, ties to the lower id; weights s (renormalised over the picks when asked, then scaled); picks
// sorted by expert id as route.cuh's are. One warp a token. The CPU's reference: ffi/cpu/moe.c
// route_token / sigmoid_pick.
#include <float.h>

#include "common.cuh"
#include "internal.h"
#include "route.cuh"

// The two largest of a multiset merged with another's (a1 >= a2, b1 >= b2).
__device__ __forceinline__ void top2_merge(float &a1, float &a2, float b1, float b2) {
  const float hi = fmaxf(a1, b1), lo = fmaxf(fminf(a1, b1), fmaxf(a2, b2));
  a1 = hi;
  a2 = lo;
}

// The warp's best untaken candidate (value, then lower id) among v[j] at id lane + 32 j (< X); 
// 0x7fffffff when none is left.
template <int XJ>
__device__ __forceinline__ int warp_best(const float (&v)[XJ], unsigned taken, int X) {
  const int lane = threadIdx.x & 31;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
#pragma unroll
  for (int j = 0; j < XJ; j++) {
    const int e = lane + 32 * j;
    if (e < X && !((taken >> j) & 1u) && (bi == 0x7fffffff || v[j] > bv || (v[j] == bv && e < bi))) {
      bv = v[j];
      bi = e;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > bv || (ov == bv && oi < bi))) {
      bv = ov;
      bi = oi;
    }
  }
  return bi;
}

// grid: one block (a warp) a token. XJ logits a lane (X <= 32 XJ); ng groups of X / ng experts
// (ng <= 32; 0 or 1: none), gu of them kept.
template <int XJ>
__global__ void __launch_bounds__(32) k_route_sig(route_sig_args a) {
  cu_pdl_entry();
  const float *logits = a.logits, *corr = a.corr;
  const int X = a.n_expert, K = a.k, ng = a.n_group, gu = a.n_group_used;
  __shared__ int ssel[32];
  __shared__ float sw[32];
  const int t = blockIdx.x, lane = threadIdx.x;
  const float *lg = logits + (size_t)t * X;
  float s[XJ], sc[XJ];
#pragma unroll
  for (int j = 0; j < XJ; j++) {
    const int e = lane + 32 * j;
    s[j] = 0.0f;
    sc[j] = -INFINITY;
    if (e < X) {
      const float l = __ldcg(lg + e);
      s[j] = 1.0f / (1.0f + expf(-l));
      const float v = s[j] + (corr ? corr[e] : 0.0f);
      sc[j] = v != v ? -INFINITY : v; // NaN ranks as -inf
    }
  }
  if (ng > 1 && gu > 0 && gu < ng) {
    // each group's two best scores summed (one group at a time over the warp), then the gu best groups
    const int per = X / ng;
    float gs = -INFINITY; // lane g's group score
    for (int g = 0; g < ng; g++) {
      float b1 = -INFINITY, b2 = -INFINITY;
#pragma unroll
      for (int j = 0; j < XJ; j++) {
        const int e = lane + 32 * j;
        if (e >= g * per && e < (g + 1) * per) top2_merge(b1, b2, sc[j], -INFINITY);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) top2_merge(b1, b2, __shfl_xor_sync(0xffffffffu, b1, o), __shfl_xor_sync(0xffffffffu, b2, o));
      if (lane == g) gs = per > 1 ? b1 + b2 : b1;
    }
    float gv[1] = {gs};
    unsigned gtaken = 0;
    for (int q = 0; q < gu; q++) {
      const int g = warp_best<1>(gv, gtaken, ng);
      if (lane == g) gtaken = 1u;
    }
    const unsigned kept = __ballot_sync(0xffffffffu, gtaken != 0);
#pragma unroll
    for (int j = 0; j < XJ; j++) {
      const int e = lane + 32 * j;
      if (e < X && !((kept >> (e / per)) & 1u)) sc[j] = -INFINITY;
    }
  }
  unsigned taken = 0;
  for (int i = 0; i < K; i++) {
    const int bi = warp_best<XJ>(sc, taken, X);
#pragma unroll
    for (int j = 0; j < XJ; j++)
      if (lane + 32 * j == bi) {
        taken |= 1u << j;
        ssel[i] = bi;
        sw[i] = s[j];
      }
    __syncwarp();
  }
  route_tail(K, a.norm_topk, a.w_scale, ssel, sw);
  if (lane < K) {
    a.sel[(size_t)t * K + lane] = ssel[lane];
    a.selw[(size_t)t * K + lane] = sw[lane];
  }
}

bool cu_route_sigmoid_fits(int n_expert, int k, int n_group) {
  return n_expert >= 1 && n_expert <= 1024 && k >= 1 && k <= 32 && k <= n_expert && (n_group <= 1 || (n_group <= 32 && n_expert % n_group == 0));
}

int64_t cu_route_sigmoid(cudaStream_t st, const route_sig_args &a, int ntok) {
  if (!cu_route_sigmoid_fits(a.n_expert, a.k, a.n_group))
    return cu_fail(BL_E_UNSUPPORTED, "router: sigmoid picks of %d of %d experts in %d groups have no kernel", a.k, a.n_expert, a.n_group);
  if (ntok <= 0) return BL_OK;
  const char *w = "sigmoid router picks";
  void (*k)(route_sig_args) = a.n_expert <= 128 ? k_route_sig<4> : a.n_expert <= 256 ? k_route_sig<8> : k_route_sig<32>;
  CU_LAUNCH(w, k, dim3(ntok), dim3(32), 0, st, a);
  return BL_OK;
}

int64_t cu_route_sigmoid_init() {
  const char *w = "configuring the sigmoid router";
  CU_OK(cu_kernel_prefs(k_route_sig<4>, w));
  CU_OK(cu_kernel_prefs(k_route_sig<8>, w));
  return cu_kernel_prefs(k_route_sig<32>, w);
}
