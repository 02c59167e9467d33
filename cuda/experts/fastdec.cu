// bloomery CUDA library: the one-token decode products. Every warp copies its weight row into
// shared memory with cp.async (all of the row's 16-byte copies in flight: one memory round trip,
// issued before the wait on the previous kernel, since weights never change), the activation row
// is loaded with all of a thread's loads in flight (RMS-normalised on the way in when asked), and
// the row's units decode from the shared copy. Matrices of two paired types (Q4_K + Q6_K: Q, K
// and V of a Q4_K_M file) share a launch. The experts: gate/up fused with SwiGLU and down
// weighted into the residual, each block selecting the token's experts itself from the router
// logits (route.cuh), so the router is a plain product and no kernel waits on a selection step.
// Q4_K and Q6_K rows take int8 activations and dp4a (dot8.cuh) when the caller allows it.
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "internal.h"
#include "quants.cuh"
#include "route.cuh"
#include "dot8.cuh"
#include "rows.cuh"
#include "stage.cuh"
#include "l2pf.cuh"

thread_local int cu_fast = FAST_DEFAULT;
int cu_tma_ok = 0;

// Plain copy of n floats into xs, loads batched 8 a thread (no barrier).
__device__ __forceinline__ void stage_plain(float *xs, const float *x, int n) {
  const int n4 = n >> 2;
  float4 *xs4 = reinterpret_cast<float4 *>(xs);
  for (int base = 0; base < n4; base += 8 * blockDim.x) {
    float4 v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int i = base + threadIdx.x + k * blockDim.x;
      if (i < n4) v[k] = __ldcg(reinterpret_cast<const float4 *>(x) + i);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
      const int i = base + threadIdx.x + k * blockDim.x;
      if (i < n4) xs4[i] = v[k];
    }
  }
}

// A whole row (rb bytes) of the warp's into its buffer slot.
__device__ __forceinline__ const uint8_t *issue_row(uint8_t *slot, const fmv_job &jb, int row, int rb, int lane) {
  return warp_copy_async(slot, jb.m.d + (size_t)row * jb.m.nb1, rb, lane);
}

template <int T>
__device__ __forceinline__ float fmv_dot(const uint8_t *p, int n, const float *xs, int lane) {
  return dot_window<T>(p, n / qt<T>::BE, xs, lane);
}

// A row's dot product from its shared copy (int8 activations when Q8).
template <int TA, int TB, bool Q8>
__device__ __forceinline__ float fmv_row(bool ta, const uint8_t *p, int n, const x8v &x8, const float *xs, int lane) {
  if constexpr (Q8) return ta ? dot8_row<TA>(p, n / qt<TA>::BE, x8, 0, lane) : dot8_row<TB>(p, n / qt<TB>::BE, x8, 0, lane);
  else return ta ? fmv_dot<TA>(p, n, xs, lane) : fmv_dot<TB>(p, n, xs, lane);
}

// A pair of rows' dot products: with int8 activations both rows' units in one loop (dot8_row2:
// the same sums as two fmv_row calls, their latency chains overlapped).
template <int TA, int TB, bool Q8>
__device__ __forceinline__ void fmv_row2(bool ta, const uint8_t *p0, const uint8_t *p1, int n, const x8v &x8, const float *xs, int lane, float &v0,
                                         float &v1) {
  if constexpr (Q8) {
    if (ta) dot8_row2<TA>(p0, p1, n / qt<TA>::BE, x8, lane, v0, v1);
    else dot8_row2<TB>(p0, p1, n / qt<TB>::BE, x8, lane, v0, v1);
  } else {
    v0 = fmv_row<TA, TB, Q8>(ta, p0, n, x8, xs, lane);
    v1 = fmv_row<TA, TB, Q8>(ta, p1, n, x8, xs, lane);
  }
}

// grid: blocks of W warps over the jobs' rows, rpw rows a warp taken two at a time (both rows'
// copies in flight together); smem: x (n floats), then a.nslot slots of cap bytes a warp (a whole
// row each). With four slots (rpw > 2) the next pair's copies are in flight while a pair is
// dotted. Jobs of type TA or TB.
// S2: the row in two slots a thread (n <= 8 * blockDim.x; xrow_s<2>: no spills at the 80-register cap).
template <int TA, int TB, bool Q8, bool S2 = false>
__global__ void __launch_bounds__(256, 3) k_fmv(fmv_args a) {
  BL_TR_SCOPE(1);
  extern __shared__ float4 dyn_smem4[];
  __shared__ float red[32];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  uint8_t *x8mem = reinterpret_cast<uint8_t *>(xs + a.n);
  uint8_t *s0 = x8mem + (Q8 ? x8_bytes(a.n) : 0) + (size_t)warp * a.nslot * a.cap, *s1 = s0 + a.cap, *s2 = s1 + a.cap, *s3 = s2 + a.cap;
  // the block's job, picked with selects (a dynamic index into the parameters would go through local memory)
  int b = blockIdx.x;
  fmv_job jb = a.job[0];
  if (a.njobs > 1 && b >= a.job[0].blocks) {
    b -= a.job[0].blocks;
    jb = a.job[1];
    if (a.njobs > 2 && b >= a.job[1].blocks) {
      b -= a.job[1].blocks;
      jb = a.job[2];
    }
  }
  const bool ta = jb.m.type == TA;
  const int rb = ta ? (a.n / qt<TA>::BE) * qt<TA>::BB : (a.n / qt<TB>::BE) * qt<TB>::BB;
  const int rows = jb.m.ne1;
  auto row_of = [&](int i) { return (b * a.rpw + i) * W + warp; };
  auto has_row = [&](int i) { return i < a.rpw && row_of(i) < rows; };
  // the first rows in flight before the wait (weights never change)
  const uint8_t *p0 = nullptr, *p1 = nullptr, *q0 = nullptr, *q1 = nullptr;
  if (has_row(0)) p0 = issue_row(s0, jb, row_of(0), rb, lane);
  if (has_row(1)) p1 = issue_row(s1, jb, row_of(1), rb, lane);
  if (a.nslot == 4) {
    cp_async_commit();
    if (has_row(2)) q0 = issue_row(s2, jb, row_of(2), rb, lane);
    if (has_row(3)) q1 = issue_row(s3, jb, row_of(3), rb, lane);
    cp_async_commit();
  }
  l2pf_issue(a.pf, blockIdx.x, gridDim.x);
  cu_pdl_wait();
  if constexpr (S2) xrow_stage_s<2>(a.x, xs, a.n, a.norm, a.normw, a.eps, red);
  else xrow_stage(a.x, xs, a.n, a.norm, a.normw, a.eps, red);
  if (a.h && blockIdx.x == 0)
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) a.h[i] = xs[i];
  x8v x8 = {};
  if constexpr (Q8) x8 = quantize_x8(xs, a.n, x8mem);
  BL_TR_MARK(1);
  auto put = [&](int i, float v) {
    const int rr = row_of(i);
    if (jb.bias) v += jb.bias[rr];
    if (jb.epi == EPI_ADD) jb.y[rr] += v;
    else jb.y[rr] = v;
  };
  for (int i = 0; i < a.rpw; i += 2) {
    if (!has_row(i)) break;
    const bool has1 = has_row(i + 1), odd = a.nslot == 4 && ((i >> 1) & 1);
    if (a.nslot == 4) {
      cp_async_wait_group1(); // this pair's group (the next pair's may still be in flight)
    } else {
      if (i > 0) {
        p0 = issue_row(s0, jb, row_of(i), rb, lane);
        if (has1) p1 = issue_row(s1, jb, row_of(i + 1), rb, lane);
      }
      cp_async_wait_all();
    }
    if (i == 0) BL_TR_MARK(2);
    __syncwarp();
    const uint8_t *c0 = odd ? q0 : p0, *c1 = odd ? q1 : p1;
    float v0 = 0.0f, v1 = 0.0f;
    if (has1) fmv_row2<TA, TB, Q8>(ta, c0, c1, a.n, x8, xs, lane, v0, v1);
    else v0 = fmv_row<TA, TB, Q8>(ta, c0, a.n, x8, xs, lane);
    v0 = warp_sum(v0);
    v1 = warp_sum(v1);
    if (i == 0) BL_TR_MARK(3);
    if (lane == 0) {
      put(i, v0);
      if (has1) put(i + 1, v1);
    }
    __syncwarp(); // the slots are refilled
    if (a.nslot == 4) {
      // this pair's slots take the pair after the next
      if (odd) {
        if (has_row(i + 4)) q0 = issue_row(s2, jb, row_of(i + 4), rb, lane);
        if (has_row(i + 5)) q1 = issue_row(s3, jb, row_of(i + 5), rb, lane);
      } else {
        if (has_row(i + 4)) p0 = issue_row(s0, jb, row_of(i + 4), rb, lane);
        if (has_row(i + 5)) p1 = issue_row(s1, jb, row_of(i + 5), rb, lane);
      }
      cp_async_commit();
    }
  }
}

// The token's picks into ssel / sw (warp 0 of the block), or expert 0 of weight 1.
__device__ __forceinline__ void select_experts(const fmoe_args &a, int *ssel, float *sw) {
  if (threadIdx.x >= 32) return;
  if (a.logits) {
    if (a.n_expert <= 128) route_core<4, true>(a.logits, a.n_expert, a.k, a.norm_topk, a.w_scale, ssel, sw);
    else route_core<8, true>(a.logits, a.n_expert, a.k, a.norm_topk, a.w_scale, ssel, sw);
  } else if (threadIdx.x == 0) {
    ssel[0] = 0;
    sw[0] = 1.0f;
  }
}

// The number of picks a token's experts kernels walk (one expert of weight 1 for a dense FFN).
__device__ __host__ inline int fmoe_k(const fmoe_args &a) { return (a.logits || a.sel) ? a.k : 1; }
// A pick read from memory (written by an earlier kernel), kept inside the expert stack.
__device__ __forceinline__ int pick_at(const fmoe_args &a, int j) {
  const int e = __ldcg(a.sel + j);
  return e < 0 ? 0 : e >= a.n_expert ? a.n_expert - 1 : e;
}

// grid: x over hidden rows (16 a block: two a warp), y over the token's picks; smem: h (n
// floats), then four slots of cap bytes a warp (gate and up of both rows, copied together).
// With picks in memory (a.sel) the block's expert is read right after the wait and its rows'
// copies issued before the row is staged; else warp 0 selects from the logits first.
template <int T, bool Q8, int S = 8>
__global__ void __launch_bounds__(256, 3) k_fgu(fmoe_args a) {
  BL_TR_SCOPE(2);
  using Q = qt<T>;
  extern __shared__ float4 dyn_smem4[];
  __shared__ int ssel[ROUTER_MAX_K];
  __shared__ float sw[ROUTER_MAX_K];
  __shared__ float red[32];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = a.gate.ne0, W = blockDim.x >> 5;
  uint8_t *x8mem = reinterpret_cast<uint8_t *>(xs + n);
  uint8_t *sl = x8mem + (Q8 ? x8_bytes(n) : 0) + (size_t)warp * 4 * a.cap;
  const int r0 = blockIdx.x * 2 * W + warp, r1 = r0 + W, j = blockIdx.y, ff = a.gate.ne1;
  const bool has0 = r0 < ff, has1 = r1 < ff;
  const int rb = (n / Q::BE) * Q::BB;
  const uint8_t *pg0 = nullptr, *pu0 = nullptr, *pg1 = nullptr, *pu1 = nullptr;
  auto issue = [&](int e) {
    if (!has0) return;
    const uint8_t *g = a.gate.d + (size_t)e * a.gate.nb2, *u = a.up.d + (size_t)e * a.up.nb2;
    pg0 = warp_copy_async(sl, g + (size_t)r0 * a.gate.nb1, rb, lane);
    pu0 = warp_copy_async(sl + a.cap, u + (size_t)r0 * a.up.nb1, rb, lane);
    if (has1) {
      pg1 = warp_copy_async(sl + 2 * a.cap, g + (size_t)r1 * a.gate.nb1, rb, lane);
      pu1 = warp_copy_async(sl + 3 * a.cap, u + (size_t)r1 * a.up.nb1, rb, lane);
    }
  };
  cu_pdl_wait();
  xrow_s<S> r; // S = 2 up to 2,048 columns (stage.cuh: no spills)
  xrow_load(r, a.h, n);
  int ej = 0; // the block's expert (its biases)
  if (a.sel) {
    const int e = pick_at(a, j);
    ej = e;
    issue(e);
  } else select_experts(a, ssel, sw);
  xrow_store(r, xs, n, a.hnorm, a.normw, a.eps, red); // barrier: the picks are visible too
  x8v x8 = {};
  if constexpr (Q8) x8 = quantize_x8(xs, n, x8mem);
  if (!has0) return;
  if (!a.sel) {
    ej = ssel[j];
    issue(ej);
  }
  cp_async_wait_all();
  __syncwarp();
  const int nb = n / Q::BE;
  float g0, u0, g1 = 0.0f, u1 = 0.0f;
  if constexpr (Q8) {
    // the four rows' units side by side: each unit's activations are read once for all four
    using D = d8<T>;
    float ag0 = 0.0f, au0 = 0.0f, ag1 = 0.0f, au1 = 0.0f;
    for (int k = lane; k < nb * D::UPB; k += 32) {
      const int b = k / D::UPB, u = k - b * D::UPB, gb = b * (Q::BE / 32);
      const typename D::xu v = D::xload(u, x8, gb); // read once for the four rows
      ag0 += D::dot(pg0 + (size_t)b * Q::BB, u, v);
      au0 += D::dot(pu0 + (size_t)b * Q::BB, u, v);
      if (has1) {
        ag1 += D::dot(pg1 + (size_t)b * Q::BB, u, v);
        au1 += D::dot(pu1 + (size_t)b * Q::BB, u, v);
      }
    }
    g0 = warp_sum(ag0);
    u0 = warp_sum(au0);
    g1 = warp_sum(ag1);
    u1 = warp_sum(au1);
  } else {
    g0 = warp_sum(dot_window<T>(pg0, nb, xs, lane));
    u0 = warp_sum(dot_window<T>(pu0, nb, xs, lane));
    if (has1) {
      g1 = warp_sum(dot_window<T>(pg1, nb, xs, lane));
      u1 = warp_sum(dot_window<T>(pu1, nb, xs, lane));
    }
  }
  if (lane == 0) {
    if (a.bg || a.bu || a.act_kind == BL_ACT_SWIGLU_OAI) {
      // gpt-oss: the expert's biases, the clamped activation
      const bool oai = a.act_kind == BL_ACT_SWIGLU_OAI;
      const float *bg = a.bg ? a.bg + (size_t)ej * a.ldbg : nullptr, *bu = a.bu ? a.bu + (size_t)ej * a.ldbu : nullptr;
      a.act[(size_t)j * ff + r0] = act_glu(g0 + (bg ? bg[r0] : 0.0f), u0 + (bu ? bu[r0] : 0.0f), oai, a.alpha, a.limit);
      if (has1) a.act[(size_t)j * ff + r1] = act_glu(g1 + (bg ? bg[r1] : 0.0f), u1 + (bu ? bu[r1] : 0.0f), oai, a.alpha, a.limit);
      return;
    }
    a.act[(size_t)j * ff + r0] = silu_f(g0) * u0;
    if (has1) a.act[(size_t)j * ff + r1] = silu_f(g1) * u1;
  }
}

// The picks' down biases at output row `row`, weighted (gpt-oss; 0 without).
__device__ __forceinline__ float fdown_bias(const fmoe_args &a, const int *ssel, const float *sw, int K, int row) {
  if (!a.bd) return 0.0f;
  float s = 0.0f;
  for (int j = 0; j < K; j++) s += sw[j] * a.bd[(size_t)ssel[j] * a.ldbd + row];
  return s;
}

// FAST_ACT8 (int8 rows, picks in memory): gate/up with 32 rows a block (four a warp), so a block
// holds whole groups of 32 of the SwiGLU row and quantizes them itself into a.act8 (dot8.cuh's
// layout for the k * ff values, q8_group on the same floats k_fdown's quantize_x8 takes): down
// copies those bytes instead of loading k * ff floats and quantizing them in every block. The same
// values bit for bit. smem: h (n floats), its int8 row, then eight slots of cap bytes a warp.
// gpt-oss's biases and clamped SwiGLU as k_fgu's epilogue (down adds its biases itself).
// S: the row's float4 slots a thread (xrow_s; 2 up to 2,048 columns: 82 registers, not 108).
// Down is let in (PDL) only once the block's rows are in: its blocks copy their rows as soon as they
// are resident, and those copies would otherwise share DRAM with gate/up's own (call 174: +1.9%).
template <int T, int S>
__global__ void __launch_bounds__(256, 2) k_fgu8(fmoe_args a) {
  BL_TR_SCOPE(3);
  using Q = qt<T>;
  using D = d8<T>;
  constexpr int RW = 4; // rows a warp
  extern __shared__ float4 dyn_smem4[];
  __shared__ float red[32];
  __shared__ float sact[32];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = a.gate.ne0, W = blockDim.x >> 5;
  uint8_t *x8mem = reinterpret_cast<uint8_t *>(xs + n);
  uint8_t *sl = x8mem + x8_bytes(n) + (size_t)warp * 2 * RW * a.cap;
  const int rbase = blockIdx.x * RW * W, j = blockIdx.y, ff = a.gate.ne1;
  const int rb = (n / Q::BE) * Q::BB;
  __shared__ __align__(8) uint64_t tma_bar;
  if (a.tma && threadIdx.x == 0) mbar_init(&tma_bar); // thread 0 also issues the copies (program order)
  cu_pdl_wait_only();
  xrow_s<S> r;
  xrow_load(r, a.h, n);
  const uint8_t *pg[RW], *pu[RW];
  const int e = pick_at(a, j);
  {
    const uint8_t *g = a.gate.d + (size_t)e * a.gate.nb2, *u = a.up.d + (size_t)e * a.up.nb2;
    if (a.tma) {
      // the block's 32 gate rows and 32 up rows are two contiguous ranges: two bulk copies by one
      // thread (rows packed at rb bytes, the host checked the alignment), the block's slots reused
      uint8_t *gs = x8mem + x8_bytes(n), *us = gs + (size_t)RW * W * rb;
      if (threadIdx.x == 0) {
        const unsigned bytes = (unsigned)(RW * W * rb);
        mbar_expect(&tma_bar, 2 * bytes);
        bulk_copy(gs, g + (size_t)rbase * a.gate.nb1, bytes, &tma_bar);
        bulk_copy(us, u + (size_t)rbase * a.up.nb1, bytes, &tma_bar);
      }
#pragma unroll
      for (int i = 0; i < RW; i++) {
        pg[i] = gs + (size_t)(warp + i * W) * rb;
        pu[i] = us + (size_t)(warp + i * W) * rb;
      }
    } else {
#pragma unroll
      for (int i = 0; i < RW; i++) {
        const int row = rbase + warp + i * W;
        pg[i] = warp_copy_async(sl + (size_t)(2 * i) * a.cap, g + (size_t)row * a.gate.nb1, rb, lane);
        pu[i] = warp_copy_async(sl + (size_t)(2 * i + 1) * a.cap, u + (size_t)row * a.up.nb1, rb, lane);
      }
    }
  }
  BL_TR_MARK(1);
  xrow_store(r, xs, n, a.hnorm, a.normw, a.eps, red);
  const x8v x8 = quantize_x8(xs, n, x8mem);
  if (a.tma) mbar_wait0(&tma_bar);
  else cp_async_wait_all();
  cu_pdl_trigger(); // down may come in now
  BL_TR_MARK(2);
  __syncwarp();
  const int nb = n / Q::BE;
  float ag[RW], au[RW];
#pragma unroll
  for (int i = 0; i < RW; i++) ag[i] = au[i] = 0.0f;
  for (int k = lane; k < nb * D::UPB; k += 32) {
    const int b = k / D::UPB, u = k - b * D::UPB, gb = b * (Q::BE / 32);
    const typename D::xu v = D::xload(u, x8, gb); // read once for the eight rows
#pragma unroll
    for (int i = 0; i < RW; i++) {
      ag[i] += D::dot(pg[i] + (size_t)b * Q::BB, u, v);
      au[i] += D::dot(pu[i] + (size_t)b * Q::BB, u, v);
    }
  }
  BL_TR_MARK(3);
  {
    // the eight rows' sums in one exchange (warp_sum8): lane 4i holds gate row i's, lane 16 + 4i up row i's
    static_assert(RW == 4, "warp_sum8 takes four gate and four up rows");
    const float v8[8] = {ag[0], ag[1], ag[2], ag[3], au[0], au[1], au[2], au[3]};
    const float s = warp_sum8(v8), u = __shfl_xor_sync(0xffffffffu, s, 16);
    if (lane < 16 && (lane & 3) == 0) {
      const int i = lane >> 2, row = rbase + warp + i * W;
      float v;
      if (a.bg || a.bu || a.act_kind == BL_ACT_SWIGLU_OAI) {
        // gpt-oss: the expert's biases, the clamped activation (k_fgu's epilogue)
        const float bgv = a.bg ? a.bg[(size_t)e * a.ldbg + row] : 0.0f, buv = a.bu ? a.bu[(size_t)e * a.ldbu + row] : 0.0f;
        v = act_glu(s + bgv, u + buv, a.act_kind == BL_ACT_SWIGLU_OAI, a.alpha, a.limit);
      } else {
        v = silu_f(s) * u;
      }
      a.act[(size_t)j * ff + rbase + warp + i * W] = v;
      sact[warp + i * W] = v;
    }
  }
  __syncthreads();
  if (warp == 0) {
    // the block's group of 32 (rows rbase ..): four lanes, eight values each
    const int part = lane & 3;
    const float4 va = reinterpret_cast<const float4 *>(sact)[2 * part], vb = reinterpret_cast<const float4 *>(sact)[2 * part + 1];
    q8_group(va, vb, lane < 4, a.act8, fmoe_k(a) * ff, (j * ff + rbase) / 32, part);
  }
}

// grid: x over output rows (8 a block); smem: act (k rows of ff floats), then a buffer of cap
// bytes a warp holding as many picks' rows as fit (cap / slot), copied together. With picks in
// memory (a.sel, written two kernels earlier: before the gate/up kernel's own wait returned) they
// are read and the first rows' copies issued before the wait.
template <int T, bool Q8>
__global__ void __launch_bounds__(256, 3) k_fdown(fmoe_args a) {
  BL_TR_SCOPE(4);
  using Q = qt<T>;
  extern __shared__ float4 dyn_smem4[];
  __shared__ int ssel[ROUTER_MAX_K];
  __shared__ float sw[ROUTER_MAX_K];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, K = fmoe_k(a);
  const int ff = a.down.ne0, na = K * ff;
  // with gate/up's int8 rows (a.act8) no float row: the smaller footprint lets a down block sit
  // beside two gate/up blocks on an SM, so every block issues its copies early
  uint8_t *x8mem = reinterpret_cast<uint8_t *>(xs + (Q8 && a.act8 ? 0 : na));
  uint8_t *buf = x8mem + (Q8 ? x8_bytes(na) : 0) + (size_t)warp * a.cap;
  const int row = blockIdx.x * (blockDim.x >> 5) + warp;
  const bool has = row < a.down.ne1;
  const int rb = (ff / Q::BE) * Q::BB, slot = copy_slot_bytes(rb), per = a.cap / slot;
  auto issue = [&](int j0, int cnt) {
    for (int jj = 0; jj < cnt; jj++) {
      const uint8_t *rp = a.down.d + (size_t)ssel[j0 + jj] * a.down.nb2 + (size_t)row * a.down.nb1;
      (void)warp_copy_async(buf + (size_t)jj * slot, rp, rb, lane);
    }
  };
  if (a.sel) {
    if ((int)threadIdx.x < K) {
      ssel[threadIdx.x] = pick_at(a, threadIdx.x);
      sw[threadIdx.x] = __ldcg(a.selw + threadIdx.x);
    }
    __syncthreads();
    if (has) issue(0, K < per ? K : per);
  }
  cu_pdl_wait();
  x8v x8 = {};
  if (Q8 && a.act8) {
    // k_fgu8 quantized the rows (picks in memory)
    x8 = x8_copy_row(x8mem, a.act8, na);
    BL_TR_MARK(1);
  } else {
    if (na <= 32 * (int)blockDim.x) {
      xrow r;
      xrow_load(r, a.act, na);
      if (!a.sel) select_experts(a, ssel, sw);
      xrow_store(r, xs, na, 0, nullptr, 0.0f, nullptr);
    } else {
      if (!a.sel) select_experts(a, ssel, sw);
      stage_plain(xs, a.act, na);
      __syncthreads();
    }
    if constexpr (Q8) x8 = quantize_x8(xs, na, x8mem);
  }
  if (!has) return;
  float acc = 0.0f;
  if constexpr (Q8) {
    if (a.flat) {
      // every pick's row in one round (per >= K): lane k takes (pick, unit) k, k + 32, ... so all
      // 32 lanes work however few units a row has (12 for a 768-wide Q4_K row)
      using D = d8<T>;
      if (!a.sel) issue(0, K);
      cp_async_wait_all();
      BL_TR_MARK(2);
      __syncwarp();
      const int nunits = (ff / Q::BE) * D::UPB;
      for (int k = lane; k < K * nunits; k += 32) {
        const int jj = k / nunits, uu = k - jj * nunits, b = uu / D::UPB, u = uu - b * D::UPB;
        const uint8_t *rp = a.down.d + (size_t)ssel[jj] * a.down.nb2 + (size_t)row * a.down.nb1;
        const uint8_t *p = buf + (size_t)jj * slot + (reinterpret_cast<uintptr_t>(rp) & 15);
        acc += sw[jj] * D::unit(p + (size_t)b * Q::BB, u, x8, jj * (ff / 32) + b * (Q::BE / 32));
      }
      BL_TR_MARK(3);
      acc = warp_sum(acc);
      if (lane == 0) a.x[row] += acc + fdown_bias(a, ssel, sw, K, row);
      return;
    }
  }
  for (int j0 = 0; j0 < K; j0 += per) {
    const int cnt = K - j0 < per ? K - j0 : per;
    if (!a.sel || j0 > 0) issue(j0, cnt);
    cp_async_wait_all();
    __syncwarp();
    for (int jj = 0; jj < cnt; jj++) {
      const uint8_t *rp = a.down.d + (size_t)ssel[j0 + jj] * a.down.nb2 + (size_t)row * a.down.nb1;
      const uint8_t *p = buf + (size_t)jj * slot + (reinterpret_cast<uintptr_t>(rp) & 15);
      if constexpr (Q8) acc += sw[j0 + jj] * dot8_row<T>(p, ff / Q::BE, x8, (j0 + jj) * (ff / 32), lane);
      else acc += sw[j0 + jj] * dot_window<T>(p, ff / Q::BE, xs + (size_t)(j0 + jj) * ff, lane);
    }
    __syncwarp();
  }
  acc = warp_sum(acc);
  if (lane == 0) a.x[row] += acc + fdown_bias(a, ssel, sw, K, row);
}

// ---- host side ----

static int row_bytes(int type, int n) {
  cu_type_geom g;
  if (!cu_type_geom_of(type, &g) || n % g.be) return -1;
  return (n / g.be) * g.bb;
}

// The kernels of types A, B with f32 activations (rows.cuh's pair_kernel_f).
struct fmv_f32 {
  template <int A, int B>
  static void (*of())(fmv_args) { return k_fmv<A, B, false>; }
};

// The kernel for types (ta, tb) (ta == tb: one type), f32 or int8 activations, or null; s2: int8
// activations with the row in two slots a thread (n <= 8 * the block's threads).
static void (*fmv_kernel(int ta, int tb, bool q8, bool s2 = false))(fmv_args) {
  if (q8) {
    if (ta == T_Q4_K && tb == T_Q4_K) return s2 ? k_fmv<T_Q4_K, T_Q4_K, true, true> : k_fmv<T_Q4_K, T_Q4_K, true>;
    if (ta == T_Q6_K && tb == T_Q6_K) return s2 ? k_fmv<T_Q6_K, T_Q6_K, true, true> : k_fmv<T_Q6_K, T_Q6_K, true>;
    if (type_pair(ta, tb, T_Q4_K, T_Q6_K)) return s2 ? k_fmv<T_Q4_K, T_Q6_K, true, true> : k_fmv<T_Q4_K, T_Q6_K, true>;
    if (ta == T_Q8_0 && tb == T_Q8_0) return s2 ? k_fmv<T_Q8_0, T_Q8_0, true, true> : k_fmv<T_Q8_0, T_Q8_0, true>;
    if (ta == T_MXFP4 && tb == T_MXFP4) return s2 ? k_fmv<T_MXFP4, T_MXFP4, true, true> : k_fmv<T_MXFP4, T_MXFP4, true>;
    if (ta != tb) return nullptr;
    switch (ta) { // the grid types, one type a launch
#define C(T) \
  case T: return s2 ? k_fmv<T, T, true, true> : k_fmv<T, T, true>;
      CU_IQ_TYPE_CASES(C)
#undef C
      default: return nullptr;
    }
  }
  return pair_kernel_f<fmv_f32>(ta, tb);
}

struct fmv_launch {
  fmv_args a;
  void (*k)(fmv_args);
  int grid, warps;
  size_t smem;
};

// Rows a warp for launches of one to two waves of rows (Q/K/V of one token): 2, or
// bl_cuda_options.fmv_rpw (1-8; a measurement knob: fewer blocks each staging x).
static int fmv_mid_rpw() { return cu_opt->fmv_rpw >= 1 && cu_opt->fmv_rpw <= 8 ? (int)cu_opt->fmv_rpw : 2; }

// Plans one launch for the given jobs (all of one type or one pair); false when they do not fit.
static bool plan_fmv(const fmv_args &base, const fmv_job *jobs, int nj, int smem_limit, int sm_count, fmv_launch &L) {
  int ta = jobs[0].m.type, tb = ta;
  for (int q = 1; q < nj; q++)
    if (jobs[q].m.type != ta) tb = jobs[q].m.type;
  bool q8 = base.q8 && (cu_fast & FAST_Q8) && d8_one(ta) && d8_one(tb) && base.n % 32 == 0;
  if (q8 && !fmv_kernel(ta, tb, true)) q8 = false; // a pair of int8 types with no joint kernel: f32
  L.k = fmv_kernel(ta, tb, q8);
  if (!L.k) return false;
  L.a = base;
  L.a.njobs = nj;
  int rows = 0, maxrb = 0;
  for (int q = 0; q < nj; q++) {
    L.a.job[q] = jobs[q];
    if (jobs[q].m.ne0 != base.n) return false;
    const int rb = row_bytes(jobs[q].m.type, base.n);
    if (rb <= 0) return false;
    if (rb > maxrb) maxrb = rb;
    rows += jobs[q].m.ne1;
  }
  L.warps = rows >= 16 * sm_count ? 8 : 4;
  // rows up to 32 floats a thread in registers (the norm's), twice that without a norm (staged by copy)
  if (base.n % 4 || base.n > (base.norm ? 32 : 64) * 32 * L.warps) return false;
  if (q8 && base.n <= 8 * 32 * L.warps) L.k = fmv_kernel(ta, tb, true, true);
  // rows a warp: one wave of blocks at 3 blocks an SM where possible; both rows of a pair in flight
  const int wave = L.warps * 3 * sm_count;
  L.a.rpw = rows <= wave ? 1 : rows <= 2 * wave ? fmv_mid_rpw() : 8;
  const int cap = copy_slot_bytes(maxrb);
  if (cap > FAST_CAP_MAX) return false; // a row must fit a slot
  L.a.cap = cap;
  const size_t head = (size_t)base.n * sizeof(float) + (q8 ? (size_t)x8_bytes(base.n) : 0);
  // four slots a warp (two pairs in flight) where a warp takes more than a pair and three blocks still fit an SM
  L.a.nslot = L.a.rpw > 2 && 3 * (head + (size_t)L.warps * 4 * cap + 1024) <= (size_t)cu_smem_sm ? 4 : 2;
  L.smem = head + (size_t)L.warps * L.a.nslot * cap;
  if ((int64_t)L.smem > smem_limit) return false;
  L.grid = 0;
  for (int q = 0; q < nj; q++) {
    L.a.job[q].blocks = (jobs[q].m.ne1 + L.warps * L.a.rpw - 1) / (L.warps * L.a.rpw);
    L.grid += L.a.job[q].blocks;
  }
  return true;
}

int64_t cu_fmv(cudaStream_t st, fmv_args a, int smem_limit, int sm_count, bool *done) {
  *done = false;
  if (!(cu_fast & FAST_MV) || a.njobs <= 0 || a.njobs > 3) return BL_OK;
  // one launch when the jobs have one type or a paired two; else one launch a type
  fmv_launch L[3];
  int nl = 0;
  if (plan_fmv(a, a.job, a.njobs, smem_limit, sm_count, L[0])) {
    nl = 1;
  } else {
    bool used[3] = {false, false, false};
    for (int j = 0; j < a.njobs; j++) {
      if (used[j]) continue;
      fmv_job g[3];
      int ng = 0;
      for (int q = j; q < a.njobs; q++)
        if (!used[q] && a.job[q].m.type == a.job[j].m.type) {
          g[ng++] = a.job[q];
          used[q] = true;
        }
      if (!plan_fmv(a, g, ng, smem_limit, sm_count, L[nl])) return BL_OK;
      nl++;
    }
  }
  for (int i = 0; i < nl; i++) {
    // only the launch holding the first job writes h (once)
    if (i > 0) {
      L[i].a.h = nullptr;
      memset(&L[i].a.pf, 0, sizeof L[i].a.pf); // the first launch asks for it
    }
    CU_LAUNCH("one-token product", L[i].k, dim3(L[i].grid), dim3(32 * L[i].warps), L[i].smem, st, L[i].a);
  }
  *done = true;
  return BL_OK;
}

// The int8-activation expert kernels of a type d8_one takes (null for others): gate/up (k_fgu; s2:
// the row in two slots a thread), gate/up with 32 rows a block quantizing its SwiGLU rows (k_fgu8),
// down (k_fdown).
#define FMOE_Q8_CASES(X) X(T_Q4_K) X(T_Q6_K) X(T_Q8_0) X(T_MXFP4) CU_IQ_TYPE_CASES(X)
static void (*fgu_q8_kernel(int t, bool s2))(fmoe_args) {
  switch (t) {
#define K(T) \
  case T: return s2 ? k_fgu<T, true, 2> : k_fgu<T, true>;
    FMOE_Q8_CASES(K)
#undef K
    default: return nullptr;
  }
}
static void (*fgu8_kernel(int t, bool s2))(fmoe_args) {
  switch (t) {
#define K(T) \
  case T: return s2 ? k_fgu8<T, 2> : k_fgu8<T, 8>;
    FMOE_Q8_CASES(K)
#undef K
    default: return nullptr;
  }
}
static void (*fdown_q8_kernel(int t))(fmoe_args) {
  switch (t) {
#define K(T) \
  case T: return k_fdown<T, true>;
    FMOE_Q8_CASES(K)
#undef K
    default: return nullptr;
  }
}

struct fmoe_plan {
  int cap_gu, cap_dn;
  bool q8_gu, q8_dn;
  bool act8; // k_fgu8 + down reading its int8 rows (FAST_ACT8)
  size_t smem_gu, smem_dn, smem_gu8, smem_dn8; // smem_dn8: down on gate/up's int8 rows (no float row)
};

// k_fgu8's shared memory: x (n floats), its int8 row, then the block's row region (rows bytes).
static size_t gu8_smem(int n, size_t rows) { return (size_t)n * 4 + (size_t)x8_bytes(n) + rows; }

static bool plan_fmoe(const fmoe_args &a, int smem_limit, fmoe_plan &p) {
  if (!(cu_fast & FAST_MOE)) return false;
  const int n = a.gate.ne0, ff = a.gate.ne1, K = fmoe_k(a);
  if (a.up.type != a.gate.type || a.up.ne0 != n || a.up.ne1 != ff || a.down.ne0 != ff || n % 4 || ff % 4) return false;
  if (K < 1 || K > ROUTER_MAX_K || ((a.logits || a.sel) && (a.n_expert < K || a.n_expert > 256))) return false;
  if (a.sel && K > 256) return false; // read by one thread a pick
  if (n > 32 * 256) return false;
  const int rg = row_bytes(a.gate.type, n), rd = row_bytes(a.down.type, ff);
  if (rg <= 0 || rd <= 0) return false;
  p.cap_gu = copy_slot_bytes(rg);
  if (p.cap_gu > FAST_CAP_MAX) return false; // a row must fit a slot
  const int slot = copy_slot_bytes(rd);
  if (slot > FAST_CAP_MAX) return false;
  const int per = FAST_CAP_MAX / slot < K ? FAST_CAP_MAX / slot : K;
  p.cap_dn = per * slot;
  const bool q8 = a.q8 && (cu_fast & FAST_Q8);
  p.q8_gu = q8 && d8_one(a.gate.type) && n % 32 == 0;
  p.q8_dn = q8 && d8_one(a.down.type) && ff % 32 == 0;
  p.smem_gu = (size_t)n * 4 + (p.q8_gu ? (size_t)x8_bytes(n) : 0) + 8 * 4 * (size_t)p.cap_gu;
  p.smem_dn = (size_t)K * ff * 4 + (p.q8_dn ? (size_t)x8_bytes(K * ff) : 0) + 8 * (size_t)p.cap_dn;
  // FAST_ACT8: the picks in memory, int8 rows on both sides, whole groups of 32 a block
  p.smem_gu8 = gu8_smem(n, 8 * 8 * (size_t)p.cap_gu); // the most it takes (rows in slots, not packed)
  p.smem_dn8 = (size_t)x8_bytes(K * ff) + 8 * (size_t)p.cap_dn;
  // (gpt-oss's biases and clamped activation: k_fgu's and k_fgu8's, with the picks in memory)
  const bool gen = a.bg || a.bu || a.bd || a.act_kind != BL_ACT_SWIGLU;
  if (gen && !a.sel) return false;
  if (a.act_kind != BL_ACT_SWIGLU && a.act_kind != BL_ACT_SWIGLU_OAI) return false;
  p.act8 = (cu_fast & FAST_ACT8) && a.act8 && a.sel && p.q8_gu && p.q8_dn && ff % 32 == 0 && a.act8_cap >= (size_t)x8_bytes(K * ff) &&
           reinterpret_cast<uintptr_t>(a.act8) % 16 == 0 && (int64_t)p.smem_gu8 <= smem_limit;
  return (int64_t)p.smem_gu <= smem_limit && (int64_t)p.smem_dn <= smem_limit && fmv_kernel(a.gate.type, a.gate.type, false) != nullptr &&
         fmv_kernel(a.down.type, a.down.type, false) != nullptr;
}

int64_t cu_fmoe(cudaStream_t st, fmoe_args a, int smem_limit, bool *done, bool *flat, bool *act8, bool *tma) {
  *done = false;
  fmoe_plan p;
  if (!plan_fmoe(a, smem_limit, p)) return BL_OK;
  const int ff = a.gate.ne1, K = fmoe_k(a);
  fmoe_args g = a;
  g.cap = p.cap_gu;
  if (!p.act8) g.act8 = nullptr;
  // bulk copies: rows packed (nb1 = the row's bytes), every range 16-byte aligned, the card sm_90+;
  // the block's 64 rows then take 64 * rg bytes of shared memory, not 64 slots of cap_gu
  const int rg = row_bytes(a.gate.type, a.gate.ne0);
  {
    const uintptr_t al = reinterpret_cast<uintptr_t>(a.gate.d) | reinterpret_cast<uintptr_t>(a.up.d) | (uintptr_t)a.gate.nb2 | (uintptr_t)a.up.nb2 | (uintptr_t)rg;
    g.tma = (cu_fast & FAST_TMAGU) && cu_tma_ok && p.act8 && a.gate.nb1 == rg && a.up.nb1 == rg && (al & 15) == 0;
  }
  const size_t rows8 = g.tma ? 8 * 8 * (size_t)rg : 8 * 8 * (size_t)p.cap_gu; // k_fgu8's row region
  const dim3 g1((ff + 15) / 16, K);
  cudaError_t e = cudaErrorInvalidValue;
  const bool s2 = a.gate.ne0 <= 8 * 256; // the row in two slots a thread
  if (p.act8) e = cu_launch(fgu8_kernel(a.gate.type, s2), dim3(ff / 32, K), dim3(256), gu8_smem(a.gate.ne0, rows8), st, g);
  else if (p.q8_gu) e = cu_launch(fgu_q8_kernel(a.gate.type, s2), g1, dim3(256), p.smem_gu, st, g);
  else
    switch (a.gate.type) {
#define L(T) \
  case T: e = cu_launch(k_fgu<T, false>, g1, dim3(256), p.smem_gu, st, g); break;
      CU_TYPE_CASES(L)
#undef L
      default: return BL_OK;
    }
  CU_TRY(e, "one-token expert gate/up");
  fmoe_args d = a;
  d.cap = p.cap_dn;
  if (!p.act8) d.act8 = nullptr;
  if (act8) *act8 = p.act8;
  if (tma) *tma = g.tma != 0;
  d.flat = p.q8_dn && (cu_fast & FAST_DOWN1) && p.cap_dn / copy_slot_bytes(row_bytes(a.down.type, ff)) >= K;
  if (flat) *flat = d.flat != 0;
  const dim3 g2((a.down.ne1 + 7) / 8);
  const size_t smem_dq = p.act8 ? p.smem_dn8 : p.smem_dn; // int8 kernels: no float row with act8
  if (p.q8_dn) e = cu_launch(fdown_q8_kernel(a.down.type), g2, dim3(256), smem_dq, st, d);
  else
    switch (a.down.type) {
#define L(T) \
  case T: e = cu_launch(k_fdown<T, false>, g2, dim3(256), p.smem_dn, st, d); break;
      CU_TYPE_CASES(L)
#undef L
      default: return cu_fail(BL_E_UNSUPPORTED, "experts: %s has no CUDA kernel", cu_type_name(a.down.type));
    }
  CU_TRY(e, "one-token expert down");
  *done = true;
  return BL_OK;
}

bool cu_fmoe_fits(const fmoe_args &a, int smem_limit) {
  fmoe_plan p;
  return plan_fmoe(a, smem_limit, p);
}

int64_t cu_fast_init(int smem_optin) {
  const char *w = "configuring the one-token kernels";
#define S(T)                                               \
  CU_OK(cu_allow_smem(k_fmv<T, T, false>, smem_optin, w)); \
  CU_OK(cu_allow_smem(k_fgu<T, false>, smem_optin, w));    \
  CU_OK(cu_allow_smem(k_fdown<T, false>, smem_optin, w));
  CU_TYPE_CASES(S)
#undef S
  CU_OK(cu_allow_smem(k_fmv<T_Q4_K, T_Q6_K, false>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q5_K, T_Q6_K, false>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q4_K, T_Q5_K, false>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q4_K, T_Q4_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q6_K, T_Q6_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q4_K, T_Q6_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q4_K, T_Q4_K, true, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q6_K, T_Q6_K, true, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q4_K, T_Q6_K, true, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q8_0, T_Q8_0, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_Q8_0, T_Q8_0, true, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_MXFP4, T_MXFP4, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_fmv<T_MXFP4, T_MXFP4, true, true>, smem_optin, w));
#define S(T)                                              \
  CU_OK(cu_allow_smem(k_fmv<T, T, true>, smem_optin, w)); \
  CU_OK(cu_allow_smem(k_fmv<T, T, true, true>, smem_optin, w));
  CU_IQ_TYPE_CASES(S)
#undef S
#define S(T)                                                \
  CU_OK(cu_allow_smem(fgu_q8_kernel(T, false), smem_optin, w)); \
  CU_OK(cu_allow_smem(fgu_q8_kernel(T, true), smem_optin, w));  \
  CU_OK(cu_allow_smem(fgu8_kernel(T, false), smem_optin, w));   \
  CU_OK(cu_allow_smem(fgu8_kernel(T, true), smem_optin, w));    \
  CU_OK(cu_allow_smem(fdown_q8_kernel(T), smem_optin, w));
  FMOE_Q8_CASES(S)
#undef S
  return BL_OK;
}
