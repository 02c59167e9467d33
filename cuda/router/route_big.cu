// bloomery CUDA library: the router of prompt batches (FAST_ROUTEBIG) - the residual rows
// RMS-normalised once into h, the logits as a tiled f32 product of h with the router weights
// (each weight element read once per tile of tokens, a fixed split of K over a block's warps summed
// in a fixed order: the same bits every run), then each token's selection by one warp (route.cuh).
#include "common.cuh"
#include "internal.h"
#include "route.cuh"
#include "stage.cuh"

// A block: RB_BN experts x BM tokens (32, or 16 where 32 leaves the card's SMs idle), RB_WARPS
// warps; each warp covers the whole tile for its share of every K stage of RB_KC elements (warp
// w takes elements [w * RB_KW, (w + 1) * RB_KW) of each stage), so the tile's sum over K is eight
// partial sums added in warp order at the end. Lane (tg = lane & 7, xg = lane >> 3) holds tokens
// tg + 8 i (i < BM / 8) and experts xg + 4 j (j < 4).
#define RB_BN 16
#define RB_WARPS 8
#define RB_THREADS (RB_WARPS * 32)
#define RB_KC 128
#define RB_KW (RB_KC / RB_WARPS)
// Row stride of a staged K slice (floats): the 16-byte units of rows r and r + 1 fall in adjacent
// bank quads, so the 8 token rows (4 expert rows) one float4 load of a warp touches are one wavefront.
#define RB_LD (RB_KC + 4)

// Dynamic shared memory of a block of BM tokens: two stages of BM token rows and RB_BN expert rows
// (the final partial sums, RB_WARPS x BM x RB_BN floats, reuse it).
__host__ __device__ constexpr int rb_smem_bytes(int bm) { return 2 * (bm + RB_BN) * RB_LD * (int)sizeof(float); }
static_assert(RB_WARPS * 32 * RB_BN * (int)sizeof(float) <= rb_smem_bytes(32), "partial sums fit the staging buffers");
static_assert(RB_WARPS * 16 * RB_BN * (int)sizeof(float) <= rb_smem_bytes(16), "partial sums fit the staging buffers");


// Copies K stage s (elements [s * RB_KC, s * RB_KC + RB_KC), zeros past n) of the block's rows:
// the expert rows (rows past n_expert repeat a valid row; their sums are never stored) when W, the
// token rows when H (the same for rows past ntok).
template <int BM, bool W, bool H>
__device__ __forceinline__ void rb_stage(const router_args &a, float *buf, int s, int t0, int x0) {
  const int k0 = s * RB_KC;
  constexpr int CPR = RB_KC / 4; // 16-byte chunks a row
  if (W)
    for (int c = threadIdx.x; c < RB_BN * CPR; c += RB_THREADS) {
      const int r = c / CPR, q = c - r * CPR, k = k0 + 4 * q, e = min(x0 + r, a.n_expert - 1);
      const bool in = k < a.n;
      cp_async16_or_zero(buf + (BM + r) * RB_LD + 4 * q, a.w + (size_t)e * a.ldw + (in ? k : 0), in);
    }
  if (H)
    for (int c = threadIdx.x; c < BM * CPR; c += RB_THREADS) {
      const int r = c / CPR, q = c - r * CPR, k = k0 + 4 * q, t = min(t0 + r, a.ntok - 1);
      const bool in = k < a.n;
      cp_async16_or_zero(buf + r * RB_LD + 4 * q, a.h + (size_t)t * a.ldh + (in ? k : 0), in);
    }
}

// grid: x over tiles of RB_BN experts, y over tiles of BM tokens.
template <int BM>
__global__ void __launch_bounds__(RB_THREADS) k_route_big(router_args a) {
  constexpr int TI = BM / 8; // tokens a lane
  extern __shared__ float4 dyn_smem4[];
  float *sm = reinterpret_cast<float *>(dyn_smem4);
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, tg = lane & 7, xg = lane >> 3;
  const int x0 = blockIdx.x * RB_BN, t0 = blockIdx.y * BM;
  const int nst = (a.n + RB_KC - 1) / RB_KC;
  constexpr int SF = (BM + RB_BN) * RB_LD; // floats a stage
  // the weights are written by no kernel of the step: their first stage is copied before the wait
  rb_stage<BM, true, false>(a, sm, 0, t0, x0);
  cu_pdl_wait();
  rb_stage<BM, false, true>(a, sm, 0, t0, x0);
  cp_async_commit();
  float acc[TI][4];
#pragma unroll
  for (int i = 0; i < TI; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
  for (int s = 0; s < nst; s++) {
    if (s + 1 < nst) {
      rb_stage<BM, true, true>(a, sm + ((s + 1) & 1) * SF, s + 1, t0, x0);
      cp_async_commit();
      cp_async_wait_group1();
    } else {
      cp_async_wait_all();
    }
    __syncthreads();
    const float *hs = sm + (s & 1) * SF + wp * RB_KW, *ws = hs + BM * RB_LD;
#pragma unroll
    for (int kk = 0; kk < RB_KW; kk += 4) {
      float4 hv[TI], wv[4];
#pragma unroll
      for (int i = 0; i < TI; i++) hv[i] = *reinterpret_cast<const float4 *>(hs + (tg + 8 * i) * RB_LD + kk);
#pragma unroll
      for (int j = 0; j < 4; j++) wv[j] = *reinterpret_cast<const float4 *>(ws + (xg + 4 * j) * RB_LD + kk);
#pragma unroll
      for (int i = 0; i < TI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          float v = acc[i][j];
          v = fmaf(hv[i].x, wv[j].x, v);
          v = fmaf(hv[i].y, wv[j].y, v);
          v = fmaf(hv[i].z, wv[j].z, v);
          acc[i][j] = fmaf(hv[i].w, wv[j].w, v);
        }
    }
    __syncthreads(); // the buffer is refilled by the next iteration's copies
  }
  // the warps' partial sums, added in warp order
  float *red = sm;
#pragma unroll
  for (int i = 0; i < TI; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) red[(wp * BM + tg + 8 * i) * RB_BN + xg + 4 * j] = acc[i][j];
  __syncthreads();
  for (int o = threadIdx.x; o < BM * RB_BN; o += RB_THREADS) {
    const int t = t0 + o / RB_BN, e = x0 + o % RB_BN;
    if (t >= a.ntok || e >= a.n_expert) continue;
    float v = red[o];
#pragma unroll
    for (int q = 1; q < RB_WARPS; q++) v += red[q * BM * RB_BN + o];
    a.logits[(size_t)t * a.n_expert + e] = v;
  }
}

#define RS_WARPS 4
// One token a warp: its picks (ascending expert id) and weights from its logits (X <= 32 * XJ).
template <int XJ>
__global__ void __launch_bounds__(RS_WARPS * 32) k_route_sel(const float *logits, int ntok, int X, int K, int norm_topk, float w_scale,
                                                              int32_t *sel, float *selw) {
  cu_pdl_entry();
  __shared__ int ssel[RS_WARPS][ROUTER_MAX_K];
  __shared__ float sw[RS_WARPS][ROUTER_MAX_K];
  const int wp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = blockIdx.x * RS_WARPS + wp;
  if (t >= ntok) return; // a whole warp leaves: route_core's shuffles see full warps
  route_core<XJ, true>(logits + (size_t)t * X, X, K, norm_topk, w_scale, ssel[wp], sw[wp]);
  for (int j = lane; j < K; j += 32) {
    sel[(size_t)t * K + j] = ssel[wp][j];
    selw[(size_t)t * K + j] = sw[wp][j];
  }
}

// Token rows a product block takes: 32, or 16 where tiles of 32 would give fewer blocks than half the SMs.
static int rb_rows(const router_args &a) {
  const int xt = (a.n_expert + RB_BN - 1) / RB_BN;
  return ((a.ntok + 31) / 32) * xt * 2 >= cu_sms ? 32 : 16;
}

static bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

bool cu_route_big_fits(const router_args &a, int smem_limit) {
  return a.ntok >= 1 && a.n >= 4 && a.n % 4 == 0 && a.h && a.ldh >= a.n && a.ldh % 4 == 0 && aligned16(a.h) && a.w && a.ldw >= a.n &&
         a.ldw % 4 == 0 && aligned16(a.w) && a.n_expert >= 1 && a.n_expert <= 1024 && a.k >= 1 && a.k <= ROUTER_MAX_K && a.k <= a.n_expert &&
         a.logits && a.sel && a.selw && rb_smem_bytes(rb_rows(a)) <= smem_limit && (a.ntok + 15) / 16 <= 65535;
}

int64_t cu_route_big(cudaStream_t st, const router_args &a, int smem_limit) {
  if (!cu_route_big_fits(a, smem_limit))
    return cu_fail(BL_E_UNSUPPORTED, "router (prompt batches): %d tokens of %d elements, %d experts with %d used do not take the tiled product", a.ntok,
                   a.n, a.n_expert, a.k);
  CU_OK(cu_rmsnorm(st, a.x, a.ldx, nullptr, a.n, a.normw, a.eps, a.h, a.ldh, a.ntok));
  const int bm = rb_rows(a), xt = (a.n_expert + RB_BN - 1) / RB_BN;
  const dim3 grid(xt, (a.ntok + bm - 1) / bm);
  const char *w = "router product (prompt batches)";
  if (bm == 32) CU_LAUNCH(w, k_route_big<32>, grid, dim3(RB_THREADS), rb_smem_bytes(32), st, a);
  else CU_LAUNCH(w, k_route_big<16>, grid, dim3(RB_THREADS), rb_smem_bytes(16), st, a);
  const dim3 gs((a.ntok + RS_WARPS - 1) / RS_WARPS), bs(RS_WARPS * 32);
  w = "router picks (prompt batches)";
  if (a.n_expert <= 128) CU_LAUNCH(w, k_route_sel<4>, gs, bs, 0, st, a.logits, a.ntok, a.n_expert, a.k, a.norm_topk, a.w_scale, a.sel, a.selw);
  else if (a.n_expert <= 256) CU_LAUNCH(w, k_route_sel<8>, gs, bs, 0, st, a.logits, a.ntok, a.n_expert, a.k, a.norm_topk, a.w_scale, a.sel, a.selw);
  else CU_LAUNCH(w, k_route_sel<32>, gs, bs, 0, st, a.logits, a.ntok, a.n_expert, a.k, a.norm_topk, a.w_scale, a.sel, a.selw);
  return BL_OK;
}

int64_t cu_route_big_init(int smem_optin) {
  const char *w = "configuring the prompt router";
  CU_OK(cu_allow_smem(k_route_big<32>, smem_optin, w));
  CU_OK(cu_allow_smem(k_route_big<16>, smem_optin, w));
  CU_OK(cu_kernel_prefs(k_route_sel<4>, w));
  CU_OK(cu_kernel_prefs(k_route_sel<8>, w));
  return cu_kernel_prefs(k_route_sel<32>, w);
}
