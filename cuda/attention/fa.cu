// bloomery CUDA library: prefill attention, flash-attention style on the tensor cores. A block
// takes a tile of up to 64 consecutive query tokens of one sequence; four warps own 16 query rows
// of a query head each. K and V tiles of 64 cached positions (f16) are staged in shared memory;
// S = Q K^T and O += P V run as m16n8k16 products with the online softmax in registers (base-2
// exponent, the scale folded into Q). Causality is by each query's position. Two kernels share
// one warp's arithmetic (fa_rows_*): k_fa (one head a block, each tile loaded then used) and, with
// FAST_FA2, k_fa2 (the same tile for FA2_HEADS query heads of one KV group, 4 warps a head, so
// each staged K/V tile serves them all, or one head where pairs would leave SMs idle; tiles copied
// by cp.async into two buffers, the next one in flight while this one is used; the longest tiles
// first). The two give the same values bit for bit. Heads of 256 (Qwen3.5's and Qwen3-Next's
// gated attention) run k_fa alone, their Q fragments read from shared memory each tile (in
// registers they and the 256-wide accumulators would spill).
#include <math.h>
#include <stdlib.h>

#include "common.cuh"
#include "internal.h"
#include "mma.cuh"
#include "stage.cuh"

#define FA_Q 64
#define FA_KV 64
#define FA2_HEADS 2 // query heads a k_fa2 block takes where G allows (else 1)

// One warp's 16 query rows of one head: Q fragments, the output accumulators and the online
// softmax state of rows r0 = gid and r1 = gid + 8 (their positions qp0, qp1; -1 past the tile).
// Heads up to 128 keep their Q fragments in registers; wider ones read them from the staged rows.
template <int HD>
__host__ __device__ constexpr bool fa_q_regs() { return HD <= 128; }

template <int HD>
struct fa_rows {
  uint32_t qf[fa_q_regs<HD>() ? HD / 16 : 1][4];
  const __half *sq; // the warp's staged Q rows (heads wider than 128)
  float o[HD / 8][4];
  float m0, m1, l0, l1;
  int qp0, qp1;
  int lo0, lo1; // the first position each row sees (a sliding window; 0 without)
};

// Four query values scaled into halves at p (the scale folded into Q).
__device__ __forceinline__ void fa_q4(__half *p, const float *src, bool have, float s) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (have) v = *reinterpret_cast<const float4 *>(src);
  st_h4(p, v.x * s, v.y * s, v.z * s, v.w * s);
}

// The warp's rows' fragments from the staged Q rows sQ (its 16 rows first), state cleared.
template <int HD>
__device__ __forceinline__ void fa_rows_init(fa_rows<HD> &w, const __half *sQ, int lane, int qp0, int qp1, int window) {
  constexpr int LDS = HD + 8;
  w.sq = sQ;
  if constexpr (fa_q_regs<HD>()) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) ldsm_x4(w.qf[kk], sQ + (lane & 15) * LDS + kk * 16 + (lane >> 4) * 8);
  }
#pragma unroll
  for (int i = 0; i < HD / 8; i++) w.o[i][0] = w.o[i][1] = w.o[i][2] = w.o[i][3] = 0.0f;
  w.m0 = -INFINITY;
  w.m1 = -INFINITY;
  w.l0 = 0.0f;
  w.l1 = 0.0f;
  w.qp0 = qp0;
  w.qp1 = qp1;
  w.lo0 = window > 0 ? qp0 - window + 1 : 0;
  w.lo1 = window > 0 ? qp1 - window + 1 : 0;
}

// The warp's rows against the staged tile of positions kb .. kb + 63 (sK, sV: 64 rows of HD + 8).
template <int HD>
__device__ __forceinline__ void fa_rows_tile(fa_rows<HD> &w, const __half *sK, const __half *sV, int kb, int lane) {
  constexpr int LDS = HD + 8;
  const int tig = lane & 3;
  float s[8][4];
#pragma unroll
  for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; kk++) {
    uint32_t qa[4];
    if constexpr (fa_q_regs<HD>()) {
#pragma unroll
      for (int e = 0; e < 4; e++) qa[e] = w.qf[kk][e];
    } else {
      ldsm_x4(qa, w.sq + (lane & 15) * LDS + kk * 16 + (lane >> 4) * 8);
    }
#pragma unroll
    for (int np = 0; np < 4; np++) {
      uint32_t b[4];
      ldsm_x4(b, sK + (16 * np + (lane & 7) + ((lane >> 4) << 3)) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
      mma16816(s[2 * np], qa, b[0], b[1]);
      mma16816(s[2 * np + 1], qa, b[2], b[3]);
    }
  }
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 8; nt++) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int kp = kb + 8 * nt + 2 * tig + e;
      if (kp > w.qp0 || kp < w.lo0) s[nt][e] = -INFINITY;
      if (kp > w.qp1 || kp < w.lo1) s[nt][2 + e] = -INFINITY;
      mx0 = fmaxf(mx0, s[nt][e]);
      mx1 = fmaxf(mx1, s[nt][2 + e]);
    }
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  const float mn0 = fmaxf(w.m0, mx0), mn1 = fmaxf(w.m1, mx1);
  const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
  const float al0 = exp2f(w.m0 - mu0), al1 = exp2f(w.m1 - mu1);
  w.m0 = mn0;
  w.m1 = mn1;
  w.l0 *= al0;
  w.l1 *= al1;
#pragma unroll
  for (int i = 0; i < HD / 8; i++) {
    w.o[i][0] *= al0;
    w.o[i][1] *= al0;
    w.o[i][2] *= al1;
    w.o[i][3] *= al1;
  }
#pragma unroll
  for (int nt = 0; nt < 8; nt++) {
    s[nt][0] = exp2f(s[nt][0] - mu0);
    s[nt][1] = exp2f(s[nt][1] - mu0);
    s[nt][2] = exp2f(s[nt][2] - mu1);
    s[nt][3] = exp2f(s[nt][3] - mu1);
    w.l0 += s[nt][0] + s[nt][1];
    w.l1 += s[nt][2] + s[nt][3];
  }
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const uint32_t pa[4] = {pack_h2(s[2 * j][0], s[2 * j][1]), pack_h2(s[2 * j][2], s[2 * j][3]),
                            pack_h2(s[2 * j + 1][0], s[2 * j + 1][1]), pack_h2(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
    for (int np = 0; np < HD / 16; np++) {
      uint32_t b[4];
      ldsm_x4_t(b, sV + (16 * j + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + 16 * np + (lane >> 4) * 8);
      mma16816(w.o[2 * np], pa, b[0], b[1]);
      mma16816(w.o[2 * np + 1], pa, b[2], b[3]);
    }
  }
}

// A row's output scale 1 / l, or with a sink's logit (base 2, as m) in the denominator, stable
// whichever of m and the sink is larger (the sink takes a share of the attention and gives no value).
__device__ __forceinline__ float fa_inv(float l, float m, const float *sink2) {
  if (!sink2) return l > 0.0f ? 1.0f / l : 0.0f;
  const float M2 = fmaxf(m, *sink2), f = l > 0.0f ? exp2f(m - M2) : 0.0f;
  return f / (l * f + exp2f(*sink2 - M2));
}

// The rows' normalised outputs: row r0 (when have0) at out0, r1 (when have1) at out1 (the head's
// first element); sink2: the head's sink logit in base 2, or null.
template <int HD>
__device__ __forceinline__ void fa_rows_store(fa_rows<HD> &w, float *out0, float *out1, bool have0, bool have1, int lane, const float *sink2) {
  const int tig = lane & 3;
  w.l0 += __shfl_xor_sync(0xffffffffu, w.l0, 1);
  w.l0 += __shfl_xor_sync(0xffffffffu, w.l0, 2);
  w.l1 += __shfl_xor_sync(0xffffffffu, w.l1, 1);
  w.l1 += __shfl_xor_sync(0xffffffffu, w.l1, 2);
  const float i0 = fa_inv(w.l0, w.m0, sink2), i1 = fa_inv(w.l1, w.m1, sink2);
#pragma unroll
  for (int nt = 0; nt < HD / 8; nt++) {
    const int d = 8 * nt + 2 * tig;
    if (have0) {
      out0[d] = w.o[nt][0] * i0;
      out0[d + 1] = w.o[nt][1] * i0;
    }
    if (have1) {
      out1[d] = w.o[nt][2] * i1;
      out1[d + 1] = w.o[nt][3] * i1;
    }
  }
}

// The first K/V tile a query tile needs: 0, or with a sliding window the tile holding the lowest
// position its earliest query sees (positions below it are masked for every row).
__device__ __forceinline__ int fa_first_kb(const fa_args &a, int tok0, int cnt) {
  if (a.window <= 0) return 0;
  int mn = a.pos[tok0];
  for (int r = 1; r < cnt; r++) mn = min(mn, a.pos[tok0 + r]);
  const int lo = mn - a.window + 1;
  return lo > 0 ? lo / FA_KV * FA_KV : 0;
}

template <int HD>
__global__ void __launch_bounds__(128) k_fa(fa_args a) {
  cu_pdl_entry();
  constexpr int LDS = HD + 8;
  extern __shared__ __align__(16) unsigned char fa_raw[];
  __half *sQ = reinterpret_cast<__half *>(fa_raw), *sK = sQ + FA_Q * LDS, *sV = sK + FA_KV * LDS;
  const int4 tile = a.tiles[blockIdx.x];
  const int h = blockIdx.y, g = h / a.G;
  const int tok0 = tile.x, cnt = tile.y, maxp = tile.w;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2;
  for (int i = tid; i < FA_Q * HD / 4; i += 128) {
    const int r = i / (HD / 4), c = (i - r * (HD / 4)) * 4;
    fa_q4(sQ + r * LDS + c, a.q + (size_t)(tok0 + r) * a.ldq + (size_t)h * HD + c, r < cnt, a.scale_log2);
  }
  __syncthreads();
  const int r0 = warp * 16 + gid, r1 = r0 + 8;
  fa_rows<HD> w;
  fa_rows_init(w, sQ + warp * 16 * LDS, lane, r0 < cnt ? a.pos[tok0 + r0] : -1, r1 < cnt ? a.pos[tok0 + r1] : -1, a.window);
  const size_t base = (size_t)tile.z * a.slot_stride + (size_t)g * HD;
  const __half *kbase = a.kc + base, *vbase = a.vc + base;
  for (int kb = fa_first_kb(a, tok0, cnt); kb <= maxp; kb += FA_KV) {
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
    fa_rows_tile(w, sK, sV, kb, lane);
  }
  float *o0 = a.out + (size_t)(tok0 + r0) * a.ldo + (size_t)h * HD, *o1 = a.out + (size_t)(tok0 + r1) * a.ldo + (size_t)h * HD;
  const float sink2 = a.sinks ? a.sinks[h] * 1.4426950408889634f : 0.0f;
  fa_rows_store(w, o0, o1, r0 < cnt, r1 < cnt, lane, a.sinks ? &sink2 : nullptr);
}

// Shared memory of a k_fa2 block: two buffers of a K tile and a V tile (64 rows of HD + 8 halves
// each); the staged Q rows (HPB heads x 64 rows) lie in the second buffer until tile 1 is copied.
template <int HD>
constexpr int fa2_smem() { return 2 * 2 * FA_KV * (HD + 8) * 2; }

// Copies the K/V rows of positions kb .. kb + 63 into dK / dV (cp.async, one group per thread);
// positions past maxp are zeros (plain stores, visible at the next barrier), as k_fa stages them.
template <int HD, int NT>
__device__ __forceinline__ void fa2_stage(__half *dK, __half *dV, const __half *kbase, const __half *vbase, int kd, int kb, int maxp, int tid) {
  constexpr int LDS = HD + 8;
#pragma unroll
  for (int i = tid; i < FA_KV * HD / 8; i += NT) {
    const int r = i / (HD / 8), c = (i - r * (HD / 8)) * 8, p = kb + r;
    if (p <= maxp) {
      cp_async16(dK + r * LDS + c, kbase + (size_t)p * kd + c);
      cp_async16(dV + r * LDS + c, vbase + (size_t)p * kd + c);
    } else {
      *reinterpret_cast<uint4 *>(dK + r * LDS + c) = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4 *>(dV + r * LDS + c) = make_uint4(0, 0, 0, 0);
    }
  }
  cp_async_commit();
}

// Blocks of k_fa2 an SM should hold (the register cap): on sm_90 three of one head of 128 (168
// registers, no spills; their shared memory fits 228 KB); two heads of 128 take ~200 and head size
// 64 spills at 128, so one. Elsewhere one (sm_86 / sm_120 hold one block's shared memory an SM).
template <int HD, int HPB>
constexpr int fa2_min_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  return HD == 128 && HPB == 1 ? 3 : 1;
#else
  return 1;
#endif
}

// blockIdx.x: query heads HPB * x .. HPB * x + HPB - 1 (G % HPB == 0, so one KV group); warp w
// takes head HPB * x + w / 4, rows 16 * (w % 4) .. + 15, exactly as k_fa's warp w % 4 of that head.
template <int HD, int HPB>
__global__ void __launch_bounds__(128 * HPB, fa2_min_blocks<HD, HPB>()) k_fa2(fa_args a) {
  static_assert(HPB >= 1 && HPB <= 2, "the staged Q rows must fit in one K/V buffer");
  constexpr int LDS = HD + 8, NT = 128 * HPB, BUF = 2 * FA_KV * LDS;
  cu_pdl_entry();
  extern __shared__ __align__(16) unsigned char fa2_raw[];
  __half *sbuf = reinterpret_cast<__half *>(fa2_raw), *sQ = sbuf + BUF;
  // blocks start in the order of x, then y: the last tiles first (a sequence's later tiles see more
  // positions, so the longest blocks start earliest), a tile's heads side by side (one group's K/V)
  const int4 tile = a.tiles[gridDim.y - 1 - blockIdx.y];
  const int h0 = blockIdx.x * HPB, g = h0 / a.G;
  const int tok0 = tile.x, cnt = tile.y, maxp = tile.w;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2;
  const int hw = warp >> 2, wr = warp & 3, h = h0 + hw;
  const size_t base = (size_t)tile.z * a.slot_stride + (size_t)g * HD;
  const __half *kbase = a.kc + base, *vbase = a.vc + base;
  // the first tile in flight while Q is staged
  const int kb0 = fa_first_kb(a, tok0, cnt);
  fa2_stage<HD, NT>(sbuf, sbuf + FA_KV * LDS, kbase, vbase, a.kd, kb0, maxp, tid);
  for (int i = tid; i < HPB * FA_Q * HD / 4; i += NT) {
    const int hr = i / (HD / 4), hh = hr / FA_Q, r = hr - hh * FA_Q, c = (i - hr * (HD / 4)) * 4;
    fa_q4(sQ + hr * LDS + c, a.q + (size_t)(tok0 + r) * a.ldq + (size_t)(h0 + hh) * HD + c, r < cnt, a.scale_log2);
  }
  __syncthreads();
  const int r0 = wr * 16 + gid, r1 = r0 + 8;
  fa_rows<HD> w;
  fa_rows_init(w, sQ + (hw * FA_Q + wr * 16) * LDS, lane, r0 < cnt ? a.pos[tok0 + r0] : -1, r1 < cnt ? a.pos[tok0 + r1] : -1, a.window);
  for (int t = 0, kb = kb0; kb <= maxp; t++, kb += FA_KV) {
    cp_async_wait_all();
    // tile t visible to all; every warp done with the other buffer (tile t - 1, or Q before tile 1)
    __syncthreads();
    __half *cur = sbuf + (t & 1) * BUF, *nxt = sbuf + ((t + 1) & 1) * BUF;
    if (kb + FA_KV <= maxp) fa2_stage<HD, NT>(nxt, nxt + FA_KV * LDS, kbase, vbase, a.kd, kb + FA_KV, maxp, tid);
    fa_rows_tile(w, cur, cur + FA_KV * LDS, kb, lane);
  }
  float *o0 = a.out + (size_t)(tok0 + r0) * a.ldo + (size_t)h * HD, *o1 = a.out + (size_t)(tok0 + r1) * a.ldo + (size_t)h * HD;
  const float sink2 = a.sinks ? a.sinks[h] * 1.4426950408889634f : 0.0f;
  fa_rows_store(w, o0, o1, r0 < cnt, r1 < cnt, lane, a.sinks ? &sink2 : nullptr);
}

// Whether k_fa2's shared memory fits the card (set by cu_attn_init; else FAST_FA2 runs k_fa), and
// the query heads a block takes where G allows: 0 chosen by the launch's size, or forced to 1 or
// FA2_HEADS by bl_cuda_options.fa2_heads (A/B timing).
static bool fa2_fits = false;
static int fa2_heads_opt() { return cu_opt->fa2_heads == 1 || cu_opt->fa2_heads == FA2_HEADS ? (int)cu_opt->fa2_heads : 0; }

template <int HD, int HPB>
static int64_t fa2_launch(cudaStream_t st, const fa_args &a, int n_tiles) {
  CU_LAUNCH("prefill attention (shared K/V tiles)", k_fa2<HD, HPB>, dim3(a.nh / HPB, n_tiles), dim3(128 * HPB), (size_t)fa2_smem<HD>(), st, a);
  return BL_OK;
}

// k_fa's shared memory for heads of 256 fits the card (set by cu_attn_init).
static bool fa256_fits = false;
static constexpr int fa_smem(int hd) { return 3 * 64 * (hd + 8) * 2; }

bool cu_flash_supported(int hd) { return hd == 64 || hd == 128 || (hd == 256 && fa256_fits); }

int64_t cu_flash_prefill(cudaStream_t st, const fa_args &a, int hd, int n_tiles, bool *fa2) {
  if (fa2) *fa2 = false;
  if (n_tiles <= 0) return BL_OK;
  if (!cu_flash_supported(hd)) return cu_fail(BL_E_UNSUPPORTED, "prefill attention: head size %d", hd);
  if (a.G < 1) return cu_fail(BL_E_INVAL, "prefill attention: %d query heads in groups of %d", a.nh, a.G);
  if (hd == 256) {
    CU_LAUNCH("prefill attention", k_fa<256>, dim3(n_tiles, a.nh), dim3(128), (size_t)fa_smem(256), st, a);
    return BL_OK;
  }
  if ((cu_fast & FAST_FA2) && fa2_fits && n_tiles <= 65535) { // (k_fa2's tiles are its grid's y)
    // FA2_HEADS heads a block where they lie in one KV group and no SM gets more (tile, head) units
    // than with one head a block (an SM holds one block of two heads; a short prompt's few tiles
    // would leave SMs idle, so they keep one head a block)
    const int64_t units = (int64_t)n_tiles * a.nh, sms = cu_sms > 0 ? cu_sms : 1;
    const int fa2_heads = fa2_heads_opt();
    const bool pair = a.G % FA2_HEADS == 0 && a.nh % FA2_HEADS == 0 &&
                      (fa2_heads == FA2_HEADS || (fa2_heads == 0 && FA2_HEADS * ((units / FA2_HEADS + sms - 1) / sms) <= (units + sms - 1) / sms));
    if (fa2) *fa2 = true;
    if (hd == 64) return pair ? fa2_launch<64, FA2_HEADS>(st, a, n_tiles) : fa2_launch<64, 1>(st, a, n_tiles);
    return pair ? fa2_launch<128, FA2_HEADS>(st, a, n_tiles) : fa2_launch<128, 1>(st, a, n_tiles);
  }
  const dim3 grid(n_tiles, a.nh);
  if (hd == 64) CU_LAUNCH("prefill attention", k_fa<64>, grid, dim3(128), (size_t)3 * 64 * (64 + 8) * 2, st, a);
  else CU_LAUNCH("prefill attention", k_fa<128>, grid, dim3(128), (size_t)3 * 64 * (128 + 8) * 2, st, a);
  return BL_OK;
}

template <int HD, int HPB>
static int64_t fa2_init() {
  CU_TRY(cudaFuncSetAttribute(k_fa2<HD, HPB>, cudaFuncAttributeMaxDynamicSharedMemorySize, fa2_smem<HD>()), "configuring attention");
  return cu_kernel_prefs(k_fa2<HD, HPB>, "configuring attention");
}

int64_t cu_attn_init(int smem_optin) {
  CU_TRY(cudaFuncSetAttribute(k_fa<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 64 * (64 + 8) * 2), "configuring attention");
  CU_TRY(cudaFuncSetAttribute(k_fa<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 64 * (128 + 8) * 2), "configuring attention");
  CU_OK(cu_kernel_prefs(k_fa<64>, "configuring attention"));
  CU_OK(cu_kernel_prefs(k_fa<128>, "configuring attention"));
  fa256_fits = smem_optin >= fa_smem(256);
  if (fa256_fits) {
    CU_TRY(cudaFuncSetAttribute(k_fa<256>, cudaFuncAttributeMaxDynamicSharedMemorySize, fa_smem(256)), "configuring attention");
    CU_OK(cu_kernel_prefs(k_fa<256>, "configuring attention"));
  }
  fa2_fits = smem_optin >= fa2_smem<128>();
  if (!fa2_fits) return BL_OK;
  CU_OK((fa2_init<64, 1>()));
  CU_OK((fa2_init<64, FA2_HEADS>()));
  CU_OK((fa2_init<128, 1>()));
  return fa2_init<128, FA2_HEADS>();
}
