// bloomery CUDA library: one token's attention with more of the card at work than attn1.cu - a
// block per (KV head, group of GM query heads, slice of the context), 256 threads. A position's
// score is formed by 4 threads (each a quarter of the head's dimensions, joined by two shuffles),
// values by (dimension pair, position group) threads reading 4 probabilities at once. Q/K RMSNorm,
// RoPE (the angles as the CPU reference forms them) and the f16 cache write are fused in as in
// attn1.cu; each slice's key and value rows are copied to shared memory with cp.async before the
// wait on the previous kernel. The heads a block takes (GM) are chosen by the host per context
// class (short contexts: one head a block, so 32 blocks where attn1 ran 4; long ones: 4 heads a
// block sharing their slice's rows); the slice count derives on the card from the position (one
// graph serves every step of a class). The last block of a head group merges the slices: a warp a
// head forms the slices' factors, a thread a (head, 4 dimensions) the sums.
// With a.x8 (FAST_ATTX8, decode batches) the block that writes a head group's output also
// quantizes it into the token's x8 slot exactly as k_x8_rows<false> would (q8_group on the same
// floats), so the output product needs no quantization launch.
// gpt-oss's blocks: a sliding window (a.window: the slices cover the last window positions alone,
// their count from those) and a sink logit per head (a.sinks: a term exp(sink - M) of the
// denominator, M the larger of the scores' maximum and the sink, in the one-slice division and in
// the merge), as attn.cu's general kernel forms them.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.cuh"
#include "dot8.cuh"
#include "internal.h"
#include "rope.cuh"
#include "stage.cuh"
#include "attn2_mma.cuh"
#include "window.cuh"

#define A2_THREADS 256
#define A2_CHUNK 64       // positions a slice takes at least
#define A2_MAX_SPLITS CU_A2_MAX_SPLITS // slices a head group takes at most (the partials' stride)

// Row stride in shared memory: 16 words past a multiple of 32 banks, so the 4 threads of a
// position and the next position's 4 read distinct banks (16-byte reads).
__host__ __device__ constexpr int a2_rs(int hd) { return hd * 2 + 64; }
// WP: positions a window of key and value rows holds (64; 128 for long contexts, so that a slice
// of up to 128 positions is copied whole before the wait)
__host__ __device__ constexpr size_t a2_smem(int hd, int wp, bool mma = false) { return 2 * (size_t)wp * (mma ? a2m_rs(hd) : a2_rs(hd)); }

// Two halves packed in a word (low first) as floats.
__device__ __forceinline__ float2 h2x2(uint32_t w) {
  return make_float2(__half2float(__ushort_as_half((unsigned short)(w & 0xffffu))), __half2float(__ushort_as_half((unsigned short)(w >> 16))));
}

// Copies the key and value rows of positions [w0, w1) except those in [s0, s1] into the block's
// buffers (rows of window position r at r - wb, RS bytes apart).
template <int HD, int RS>
__device__ __forceinline__ void a2_issue(uint8_t *sK, uint8_t *sV, const __half *kb, const __half *vb, int kd, int wb, int w0, int w1, int s0, int s1) {
  constexpr int CPR = HD * 2 / 16;
  const int total = (w1 - w0) * 2 * CPR;
  for (int c = threadIdx.x; c < total; c += A2_THREADS) {
    const int r = c / (2 * CPR), rem = c - r * 2 * CPR, kv = rem / CPR, ch = rem - kv * CPR;
    const int p = w0 + r;
    if (p >= s0 && p <= s1) continue;
    cp_async16((kv ? sV : sK) + (size_t)(p - wb) * RS + ch * 16, (kv ? vb : kb) + (size_t)p * kd + ch * 8);
  }
}

// The block's output values ys (CNT floats in shared memory, the heads from group g0 of 32 of the
// row on; written by the block before the call) quantized into the x8 row dst of n values as
// k_x8_rows<false> does (stage_rows_q8: elements 32g + 8 part .. + 7 a thread, q8_group in
// x8_pos order, as quantize_x8). A team of four threads a group (CNT <= 1024: one pass); whole warps call
// q8_group. Every thread calls it.
template <int CNT>
__device__ __forceinline__ void a2_x8(const float *ys, uint8_t *dst, int n, int g0) {
  static_assert(CNT % 32 == 0 && CNT / 32 <= A2_THREADS / 4, "a team a group, one pass");
  constexpr int NG = CNT / 32;
  __syncthreads();
  if ((int)(threadIdx.x >> 5) * 8 >= NG) return; // the warp's groups all past the end (warp-uniform)
  const int part = threadIdx.x & 3, g = threadIdx.x >> 2;
  const bool ok = g < NG;
  float4 va = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vb = va;
  if (ok) {
    va = reinterpret_cast<const float4 *>(ys + 32 * g + 8 * part)[0];
    vb = reinterpret_cast<const float4 *>(ys + 32 * g + 8 * part)[1];
  }
  q8_group(va, vb, ok, dst, n, g0 + g, part);
}

// One head's merge factors by one warp (up to 64 slices, two a lane): each slice's partial (its
// max, its sum, then its weighted values, sts floats apart) scaled by exp(max - M) over the
// slices' maximum M (a slice with no weight counts for nothing); sf[s] = the factor, *sL = the
// factors' weighted sum (the softmax denominator).
// sink: the head's sink logit (gpt-oss; -INFINITY: none), a term exp(sink - M) of the denominator,
// M then the larger of the slices' maximum and the sink (without one: the same bits as before).
__device__ __forceinline__ void a2_factors(const float *ph, int sts, int splits, float *sf, float *sL, float sink = -INFINITY) {
  const int lane = threadIdx.x & 31;
  float mv[2] = {-INFINITY, -INFINITY}, lv[2] = {0.0f, 0.0f}; // slices lane and lane + 32
#pragma unroll
  for (int j = 0; j < 2; j++) {
    const int s2 = lane + 32 * j;
    if (s2 < splits) {
      mv[j] = __ldcg(ph + (size_t)s2 * sts);
      lv[j] = __ldcg(ph + (size_t)s2 * sts + 1);
      if (!(lv[j] > 0.0f)) mv[j] = -INFINITY;
    }
  }
  const float M = fmaxf(warp_max(fmaxf(mv[0], mv[1])), sink);
  const float f0 = lv[0] > 0.0f ? expf(mv[0] - M) : 0.0f, f1 = lv[1] > 0.0f ? expf(mv[1] - M) : 0.0f;
  float L = warp_sum(f0 * lv[0] + f1 * lv[1]); // up to 32 slices: f1 * lv[1] adds an exact 0
  if (sink > -INFINITY) L += expf(sink - M);
  if (lane < splits) sf[lane] = f0;
  if (lane + 32 < splits) sf[lane + 32] = f1;
  if (lane == 0) *sL = L;
}

// A token's slices at n positions: 64 positions a slice up to 32 slices; past that, with a window
// of 128 (wp), slices of up to long_chunk positions; at most cap (the launch's slice count).
__device__ __forceinline__ int a2_token_splits(int n, int wp, int long_chunk, int cap) {
  int splits = (n + A2_CHUNK - 1) / A2_CHUNK;
  if (wp > A2_CHUNK && splits > 32) splits = (n + long_chunk - 1) / long_chunk;
  return splits < cap ? splits : cap;
}

// grid: x over (KV head, head group) pairs (nkv * G / GM), y over slices (up to the class's cap); 256 threads.
// MMA: a window's scores and values on the tensor cores (attn2_mma.cuh; GM = G = 8, HD 128).
template <int HD, int GM, int A2_WP, bool MMA = false>
__global__ void __launch_bounds__(A2_THREADS, 2) k_attn2(attn1_args a) {
  BL_TR_SCOPE(6);
  static_assert(!MMA || (GM == 8 && HD == 128), "the tensor-core window takes 8 heads of 128");
  constexpr int RS = MMA ? a2m_rs(HD) : a2_rs(HD), CPR = HD * 2 / 16, CPQ = CPR / 4;
  constexpr int PPP = A2_THREADS / 4;  // positions a pass of the scores
  constexpr int HP = HD / 2;           // dimension pairs (values)
  constexpr int PGN = A2_THREADS / HP; // position groups (values)
  constexpr int STS = HD + 4;          // floats a slice's partial takes
  constexpr int NW = A2_THREADS / 32;
  static_assert(CPQ >= 1 && PGN >= 1 && GM * HD / 4 <= A2_THREADS, "attention tile shape");
  extern __shared__ float4 dyn_smem4[];
  uint8_t *sK = reinterpret_cast<uint8_t *>(dyn_smem4), *sV = sK + (size_t)A2_WP * RS;
  __shared__ __align__(16) float sq[GM][HD];
  __shared__ __align__(16) float sk32[HD], sv32[HD];
  __shared__ __half sk16[HD], sv16[HD];
  __shared__ float scs[HD / 2], ssn[HD / 2];
  __shared__ float sqn[HD], skn[HD]; // norm weights (constant: loaded before the wait)
  __shared__ __align__(16) float sp[MMA ? 1 : GM][MMA ? 4 : A2_WP];
  __shared__ __align__(16) __half sQh[MMA ? 16 : 1][MMA ? HD + 8 : 8], sPh[MMA ? 16 : 1][MMA ? A2_WP + 8 : 8];
  __shared__ float sred_m[NW][GM], sred_s[NW][GM];
  __shared__ float s_f[GM][A2_MAX_SPLITS], s_L[GM];
  __shared__ float s_m[GM], s_l[GM]; // the running max and sum per head, for indexing by a loop variable
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.G, HS = G / GM;
  const int g = blockIdx.x / HS, hs = blockIdx.x - g * HS, si = blockIdx.y, h0 = g * G + hs * GM, t = blockIdx.z;
  const bool prepped = a.prepped != 0;
  const float *aq = a.q + (size_t)t * a.ldq;
  float *aout = a.out + (size_t)t * a.ldq, *apart = a.part + (size_t)t * a.nh * A2_MAX_SPLITS * STS;
  // the step's positions and slots were copied in before the graph started
  // rows this step writes are not read before the wait: its own (one token: injected from
  // registers), and with a batch the positions its other tokens of the slot may have written
  const int pos = a.pos[t], n = pos + 1, s0 = prepped ? pos - a.ntok + 1 : pos;
  // slices of 64 positions up to 32 slices; past that (a window of 128) slices of up to
  // a.long_chunk (128 by default), each one window copied before the wait, up to 64 of them
  // (a sliding window: the slices cover its positions [lo, n) alone)
  const int lo = attn_first(n, a.window), nv = n - lo;
  const int splits = a2_token_splits(nv, A2_WP, a.long_chunk, (int)gridDim.y);
  if (si >= splits) return;
  const int chunk = (nv + splits - 1) / splits;
  const int p0 = lo + si * chunk, p1 = min(n, p0 + chunk);
  const size_t base = (size_t)a.seq[t] * a.slot_stride + (size_t)g * HD;
  const __half *kb = a.kc + base, *vb = a.vc + base;
  if (p0 < p1) a2_issue<HD, RS>(sK, sV, kb, vb, a.kd, p0, p0, min(p1, p0 + A2_WP), s0, pos);
  for (int d = tid; d < HD; d += A2_THREADS) {
    sqn[d] = a.qn ? __ldg(a.qn + d) : 1.0f;
    skn[d] = a.kn ? __ldg(a.kn + d) : 1.0f;
  }
  // rotation factors of this position (shared by every head)
  const rope_params r = a.rope; // by value: a reference would copy the parameter to local memory
  for (int p = tid; !prepped && p < r.n_rot / 2; p += A2_THREADS) {
    rope_factors(r, pos, p, scs[p], ssn[p]);
  }
  cu_pdl_wait();
  if (prepped && p0 < p1) a2_issue<HD, RS>(sK, sV, kb, vb, a.kd, p0, max(p0, s0), min(min(p1, p0 + A2_WP), pos + 1), 1, 0);
  // this step's q of the block's heads, k and v of the KV head (all loads in flight)
  {
    float4 qv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), kv4 = qv;
    const bool hq = tid < GM * HD / 4;
    if (hq) qv = __ldcg(reinterpret_cast<const float4 *>(aq + (size_t)h0 * HD) + tid);
    if (prepped) {
      qv.x *= a.scale;
      qv.y *= a.scale;
      qv.z *= a.scale;
      qv.w *= a.scale;
    } else if (tid < HD / 4) kv4 = __ldcg(reinterpret_cast<const float4 *>(a.k + (size_t)t * a.ldk + (size_t)g * HD) + tid);
    else if (tid < HD / 2) kv4 = __ldcg(reinterpret_cast<const float4 *>(a.v + (size_t)t * a.ldk + (size_t)g * HD) + tid - HD / 4);
    if (hq) reinterpret_cast<float4 *>(&sq[0][0])[tid] = qv;
    if (tid < HD / 4) reinterpret_cast<float4 *>(sk32)[tid] = kv4;
    else if (tid < HD / 2) reinterpret_cast<float4 *>(sv32)[tid - HD / 4] = kv4;
  }
  __syncthreads();
  // per-head RMSNorm and RoPE: a warp a head (the block's GM query heads, then the key head)
  for (int hh = warp; !prepped && hh <= GM; hh += NW) {
    float *vec = hh < GM ? sq[hh] : sk32;
    const float *nw = hh < GM ? sqn : skn;
    if (hh < GM ? a.qn != nullptr : a.kn != nullptr) {
      float xv[HD / 32], wv[HD / 32];
      float ss = 0.0f;
#pragma unroll
      for (int i = 0; i < HD / 32; i++) {
        wv[i] = nw[lane + 32 * i];
        xv[i] = vec[lane + 32 * i];
        ss += xv[i] * xv[i];
      }
      ss = warp_sum(ss);
      const float sc = 1.0f / sqrtf(ss / (float)HD + a.eps);
#pragma unroll
      for (int i = 0; i < HD / 32; i++) vec[lane + 32 * i] = xv[i] * sc * wv[i];
      __syncwarp();
    }
    for (int p = lane; p < r.n_rot / 2; p += 32) {
      const int ia = r.mode == BL_ROPE_NEOX ? p : 2 * p, ib = r.mode == BL_ROPE_NEOX ? p + r.n_rot / 2 : 2 * p + 1;
      const float x0 = vec[ia], x1 = vec[ib], cs = scs[p], sn = ssn[p];
      vec[ia] = x0 * cs - x1 * sn;
      vec[ib] = x0 * sn + x1 * cs;
    }
    __syncwarp();
    if (hh < GM)
      for (int i = lane; i < HD; i += 32) vec[i] *= a.scale;
  }
  __syncthreads();
  const bool own = pos >= p0 && pos < p1;
  for (int d = tid; !prepped && d < HD; d += A2_THREADS) {
    const __half kh = __float2half_rn(sk32[d]), vh = __float2half_rn(sv32[d]);
    sk16[d] = kh;
    sv16[d] = vh;
    if (own && hs == 0 && !prepped) { // one block of the slice writes the cache
      a.kc[base + (size_t)pos * a.kd + d] = kh;
      a.vc[base + (size_t)pos * a.kd + d] = vh;
    }
  }
  float m[GM], l[GM], acc[GM][2];
#pragma unroll
  for (int h = 0; h < GM; h++) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
    acc[h][0] = acc[h][1] = 0.0f;
  }
  float mm = -INFINITY, lm = 0.0f, om[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}}; // MMA: head lane / 4's
  if constexpr (MMA) {
    // the heads' queries as halves (rows from GM on zero); the probabilities' rows from GM on zero
    for (int i = tid; i < 16 * HD / 2; i += A2_THREADS) {
      const int r = i / (HD / 2), c = 2 * (i - r * (HD / 2));
      *reinterpret_cast<uint32_t *>(&sQh[r][c]) = r < GM ? pack_h2(sq[r][c], sq[r][c + 1]) : 0u;
    }
    for (int i = tid; i < (16 - GM) * (A2_WP + 8) / 2; i += A2_THREADS) {
      const int r = i / ((A2_WP + 8) / 2), c = 2 * (i - r * ((A2_WP + 8) / 2));
      *reinterpret_cast<uint32_t *>(&sPh[GM + r][c]) = 0u;
    }
  }
  const int qi = tid & 3, pi = tid >> 2; // scores: quarter, position in the pass
  const int dp = tid % HP, pg = tid / HP; // values: dimension pair, position group
  for (int ws = p0; ws < p1; ws += A2_WP) {
    const int we = min(p1, ws + A2_WP), cnt = we - ws, cnt4 = (cnt + 3) & ~3;
    if (ws != p0) a2_issue<HD, RS>(sK, sV, kb, vb, a.kd, ws, ws, we, prepped ? 1 : pos, prepped ? 0 : pos);
    cp_async_wait_all();
    __syncthreads(); // sk16 / sv16 written; the previous window's readers are done
    if (!prepped && pos >= ws && pos < we)
      for (int d = tid; d < HD; d += A2_THREADS) {
        reinterpret_cast<__half *>(sK + (size_t)(pos - ws) * RS)[d] = sk16[d];
        reinterpret_cast<__half *>(sV + (size_t)(pos - ws) * RS)[d] = sv16[d];
      }
    if constexpr (MMA) {
      // value rows past the window up to a multiple of 16 read as zeros (their probabilities are 0)
      const int pad = ((cnt + 15) & ~15) - cnt;
      for (int i = tid; i < pad * (HD / 8); i += A2_THREADS)
        *reinterpret_cast<uint4 *>(sV + (size_t)(cnt + i / (HD / 8)) * RS + 16 * (i % (HD / 8))) = make_uint4(0u, 0u, 0u, 0u);
    }
    __syncthreads();
    if constexpr (MMA) {
      a2m_window<HD, A2_WP>(&sQh[0][0], sK, sV, &sPh[0][0], sred_m, sred_s, cnt, mm, lm, om);
    } else {
      // scores: 4 threads a position, each a quarter of the dimensions (chunks qi, qi + 4, ...)
      float wmax[GM];
#pragma unroll
      for (int h = 0; h < GM; h++) wmax[h] = -INFINITY;
      for (int t0 = 0; t0 < cnt; t0 += PPP) {
        const int t = t0 + pi;
        float s[GM];
#pragma unroll
        for (int h = 0; h < GM; h++) s[h] = 0.0f;
        if (t < cnt) {
          const uint4 *kr = reinterpret_cast<const uint4 *>(sK + (size_t)t * RS);
#pragma unroll
          for (int cc = 0; cc < CPQ; cc++) {
            const int c = cc * 4 + qi;
            const uint4 raw = kr[c];
            const float2 k0 = h2x2(raw.x), k1 = h2x2(raw.y), k2 = h2x2(raw.z), k3 = h2x2(raw.w);
#pragma unroll
            for (int h = 0; h < GM; h++) {
              const float4 qa = *reinterpret_cast<const float4 *>(&sq[h][8 * c]);
              const float4 qb = *reinterpret_cast<const float4 *>(&sq[h][8 * c + 4]);
              s[h] += qa.x * k0.x + qa.y * k0.y + qa.z * k1.x + qa.w * k1.y + qb.x * k2.x + qb.y * k2.y + qb.z * k3.x + qb.w * k3.y;
            }
          }
        }
#pragma unroll
        for (int h = 0; h < GM; h++) {
          s[h] += __shfl_xor_sync(0xffffffffu, s[h], 1);
          s[h] += __shfl_xor_sync(0xffffffffu, s[h], 2);
        }
        if (t < cnt) {
#pragma unroll
          for (int h = 0; h < GM; h++) {
            if (qi == 0) sp[h][t] = s[h];
            wmax[h] = fmaxf(wmax[h], s[h]);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < GM; h++) {
        const float v = warp_max(wmax[h]);
        if (lane == 0) sred_m[warp][h] = v;
      }
      __syncthreads();
      float mn[GM], al[GM];
#pragma unroll
      for (int h = 0; h < GM; h++) {
        float wm = sred_m[0][h];
#pragma unroll
        for (int w = 1; w < NW; w++) wm = fmaxf(wm, sred_m[w][h]);
        mn[h] = fmaxf(m[h], wm);
        al[h] = expf(m[h] - mn[h]);
      }
      // probabilities (the window padded to a multiple of 4 with zeros)
      float ls[GM];
#pragma unroll
      for (int h = 0; h < GM; h++) ls[h] = 0.0f;
      for (int t = tid; t < cnt4; t += A2_THREADS) {
#pragma unroll
        for (int h = 0; h < GM; h++) {
          const float pr = t < cnt ? expf(sp[h][t] - mn[h]) : 0.0f;
          sp[h][t] = pr;
          ls[h] += pr;
        }
      }
#pragma unroll
      for (int h = 0; h < GM; h++) {
        const float v = warp_sum(ls[h]);
        if (lane == 0) sred_s[warp][h] = v;
      }
      __syncthreads();
#pragma unroll
      for (int h = 0; h < GM; h++) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) sum += sred_s[w][h];
        l[h] = l[h] * al[h] + sum;
        m[h] = mn[h];
        acc[h][0] *= al[h];
        acc[h][1] *= al[h];
      }
      // values: a thread a dimension pair, positions in blocks of 4 (blocks pg, pg + PGN, ...)
      for (int t = 4 * pg; t < cnt; t += 4 * PGN) {
        float2 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
          v[j] = t + j < cnt ? h2x2(*reinterpret_cast<const uint32_t *>(sV + (size_t)(t + j) * RS + 4 * dp)) : make_float2(0.0f, 0.0f);
#pragma unroll
        for (int h = 0; h < GM; h++) {
          const float4 p = *reinterpret_cast<const float4 *>(&sp[h][t]);
          acc[h][0] += p.x * v[0].x + p.y * v[1].x + p.z * v[2].x + p.w * v[3].x;
          acc[h][1] += p.x * v[0].y + p.y * v[1].y + p.z * v[2].y + p.w * v[3].y;
        }
      }
    } // the scalar window
    __syncthreads(); // before the next window reuses the buffers
  }
  // position groups summed in order: scratch in the key buffer (done with it)
  float *scr = reinterpret_cast<float *>(dyn_smem4);
  constexpr int PGS = MMA ? 1 : PGN; // the groups in scr
  if constexpr (MMA) {
    const int g8 = lane >> 2, d0 = 16 * warp + 2 * (lane & 3);
#pragma unroll
    for (int i = 0; i < 2; i++) *reinterpret_cast<float2 *>(scr + (size_t)g8 * HD + d0 + 8 * i) = make_float2(om[i][0], om[i][1]);
    if (warp == 0 && (lane & 3) == 0) {
      s_m[g8] = mm;
      s_l[g8] = lm;
    }
  } else {
#pragma unroll
    for (int h = 0; h < GM; h++) *reinterpret_cast<float2 *>(scr + ((size_t)pg * GM + h) * HD + 2 * dp) = make_float2(acc[h][0], acc[h][1]);
    if (tid == 0)
#pragma unroll
      for (int h = 0; h < GM; h++) {
        s_m[h] = m[h];
        s_l[h] = l[h];
      }
  }
  __syncthreads();
  if (splits == 1) {
    for (int i = tid; i < GM * HD; i += A2_THREADS) {
      const int h = i / HD, d = i - h * HD;
      float o = 0.0f;
#pragma unroll
      for (int q = 0; q < PGS; q++) o += scr[((size_t)q * GM + h) * HD + d];
      const float y = a.sinks ? with_sink(o, s_l[h], s_m[h], __ldg(a.sinks + h0 + h)) : s_l[h] > 0.0f ? o / s_l[h] : 0.0f;
      aout[(size_t)(h0 + h) * HD + d] = y;
      if (a.x8) sq[h][d] = y; // the scores are done with the queries
    }
    if (a.x8) a2_x8<GM * HD>(&sq[0][0], a.x8 + (size_t)blockIdx.z * x8_bytes(a.nh * HD), a.nh * HD, h0 * HD / 32);
    return;
  }
  for (int i = tid; i < GM * HD; i += A2_THREADS) {
    const int h = i / HD, d = i - h * HD;
    float o = 0.0f;
#pragma unroll
    for (int q = 0; q < PGS; q++) o += scr[((size_t)q * GM + h) * HD + d];
    float *pp = apart + ((size_t)(h0 + h) * A2_MAX_SPLITS + si) * STS;
    pp[4 + d] = o;
    if (d == 0) {
      pp[0] = s_m[h];
      pp[1] = s_l[h];
    }
  }
  if (a.sep_merge) return; // k_a2merge merges them (FAST_A2MERGE)
  int *counter = a.counters + (size_t)t * a.nh + g * HS + hs;
  if (!last_arrival(counter, splits)) return;
  // the last slice's block merges its head group: the slices' factors (a warp a head)...
  if (warp < GM) a2_factors(apart + (size_t)(h0 + warp) * A2_MAX_SPLITS * STS, STS, splits, s_f[warp], &s_L[warp], a.sinks ? __ldg(a.sinks + h0 + warp) : -INFINITY);
  __syncthreads();
  // ...then the weighted sums, a thread a (head, 4 dimensions), float4 loads in flight
  for (int i = tid; i < GM * HD / 4; i += A2_THREADS) {
    const int h = i / (HD / 4), d4 = i - h * (HD / 4);
    const float *pp = apart + (size_t)(h0 + h) * A2_MAX_SPLITS * STS + 4 + 4 * d4;
    float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
    for (int s2 = 0; s2 < splits; s2++) {
      const float f = s_f[h][s2];
      const float4 v = __ldcg(reinterpret_cast<const float4 *>(pp + (size_t)s2 * STS));
      A.x += f * v.x;
      A.y += f * v.y;
      A.z += f * v.z;
      A.w += f * v.w;
    }
    const float L = s_L[h], inv = L > 0.0f ? 1.0f / L : 0.0f;
    const float4 y = make_float4(A.x * inv, A.y * inv, A.z * inv, A.w * inv);
    *reinterpret_cast<float4 *>(aout + (size_t)(h0 + h) * HD + 4 * d4) = y;
    if (a.x8) reinterpret_cast<float4 *>(&sq[h][0])[d4] = y;
  }
  if (tid == 0) *counter = 0;
  if (a.x8) a2_x8<GM * HD>(&sq[0][0], a.x8 + (size_t)blockIdx.z * x8_bytes(a.nh * HD), a.nh * HD, h0 * HD / 32);
}

// FAST_A2MERGE: the slices' merge as a kernel of its own, a block a (head, token) - for long
// contexts, where the last slice's block of a head group otherwise merges 8 heads' 33 slices (139
// KB of partials) alone. Each block: NQ groups of threads over the slices (slice q, q + NQ, ...), a
// thread a float4 of the head, every load in flight while warp 0 forms the slices' factors (as
// k_attn2's merge); the groups' sums added in group order. The slice count is known before the wait
// (the step's positions are copied in before the graph starts), so the wait is followed by one
// round of loads, not three.
template <int HD>
__global__ void __launch_bounds__(128) k_a2merge(attn1_args a, int wp, int cap) {
  BL_TR_SCOPE(7);
  constexpr int STS = HD + 4, C4 = HD / 4, NQ = 128 / C4, MV = (A2_MAX_SPLITS + NQ - 1) / NQ;
  static_assert(NQ >= 1 && 128 % C4 == 0, "merge shape");
  __shared__ float s_f[A2_MAX_SPLITS], s_L;
  __shared__ float4 s_acc[NQ][C4];
  const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
  const int n = a.pos[t] + 1, splits = a2_token_splits(n - attn_first(n, a.window), wp, a.long_chunk, cap);
  if (splits <= 1) return; // the attention wrote this token's output
  cu_pdl_wait();
  const float *ph = a.part + ((size_t)t * a.nh + h) * A2_MAX_SPLITS * STS;
  const int c = tid % C4, q = tid / C4;
  const float *pp = ph + 4 + 4 * c;
  float4 v[MV];
#pragma unroll
  for (int k = 0; k < MV; k++) {
    const int s2 = q + k * NQ;
    v[k] = s2 < splits ? __ldcg(reinterpret_cast<const float4 *>(pp + (size_t)s2 * STS)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (tid < 32) a2_factors(ph, STS, splits, s_f, &s_L, a.sinks ? __ldg(a.sinks + h) : -INFINITY);
  __syncthreads();
  float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int k = 0; k < MV; k++) {
    const int s2 = q + k * NQ;
    if (s2 < splits) {
      const float f = s_f[s2];
      A.x += f * v[k].x;
      A.y += f * v[k].y;
      A.z += f * v[k].z;
      A.w += f * v[k].w;
    }
  }
  s_acc[q][c] = A;
  __syncthreads();
  if (q == 0) {
    for (int k = 1; k < NQ; k++) {
      const float4 b = s_acc[k][c];
      A.x += b.x;
      A.y += b.y;
      A.z += b.z;
      A.w += b.w;
    }
    const float inv = s_L > 0.0f ? 1.0f / s_L : 0.0f;
    *reinterpret_cast<float4 *>(a.out + (size_t)t * a.ldq + (size_t)h * HD + 4 * c) = make_float4(A.x * inv, A.y * inv, A.z * inv, A.w * inv);
  }
}

bool cu_attn2_supported(int hd, int G, int n_rot) {
  return (cu_fast & FAST_ATTN2) && (hd == 64 || hd == 128 || hd == 256) && G >= 1 && G <= 8 && n_rot >= 0 && n_rot <= hd && n_rot % 2 == 0;
}

// Context classes (by positions n = pos + 1): 0 up to 256, 1 up to 1024, 2 up to 2,048 (slices of
// 64, at most 32), 3 beyond (the long-context shape: a window of 128).
int cu_attn2_class(int n) { return n <= 256 ? 0 : n <= 1024 ? 1 : n <= 2048 ? 2 : 3; }

// Heads a block takes in a class (a divisor of G: 1, 2, 4, or 8 for long contexts with head
// size up to 128, so each KV head's rows are read by one block a slice) and the slice cap.
// bl_cuda_options.a2_long_heads and a2_long_chunk (probe runs; both or neither): long contexts' heads
// a block (1, 2, 4, 8) and slice length (64..128 positions); measured on the H200 at 4,096
// positions: 4 heads, 128 (8 heads a block cost 20% more there: 128 registers with spills, half the blocks).
static bool a2_long_set() {
  const int64_t h = cu_opt->a2_long_heads, ch = cu_opt->a2_long_chunk;
  return (h == 1 || h == 2 || h == 4 || h == 8) && ch >= 64 && ch <= 128;
}
static int a2_long_heads() { return a2_long_set() ? (int)cu_opt->a2_long_heads : 4; }
static int a2_long_chunk() { return a2_long_set() ? (int)cu_opt->a2_long_chunk : 128; }
static int a2_heads(int cls, int G, int hd) {
  const int want = cls == 0 ? 1 : cls == 1 ? 2 : cls == 3 && hd <= 128 ? a2_long_heads() : 4;
  for (int gm = want; gm > 1; gm >>= 1)
    if (G % gm == 0) return gm;
  return 1;
}
// The window a class's blocks hold: 128 positions for long contexts where the rows fit (head
// size up to 128: 80 KB of shared memory a block, two blocks an SM on the H200, one on sm_86).
static int a2_window(int cls, int hd) { return cls == 3 && hd <= 128 ? 128 : 64; }
// max_splits (the context's option, 32 by default) lowers the cap only when set below 32.
static int a2_splits(int cls, int wp, int max_splits) {
  const int cap = cls == 0 ? 256 / A2_CHUNK : cls == 1 ? 1024 / A2_CHUNK : cls == 3 && wp > A2_CHUNK ? A2_MAX_SPLITS : 32;
  return max_splits < 32 && max_splits < cap ? max_splits : cap;
}

// The context class from which one token's attention takes the tensor-core window (FAST_ATTMMA;
// bl_cuda_options.a2_mma_class 0..4 for probe runs, 4: never).
static int a2_mma_class() { return cu_opt->a2_mma_class >= 0 && cu_opt->a2_mma_class <= 4 ? (int)cu_opt->a2_mma_class : 2; }
static bool a2_mma(int cls, int G, int hd) { return (cu_fast & FAST_ATTMMA) && hd == 128 && G == 8 && cls >= a2_mma_class(); }

template <int HD, int WP>
static cudaError_t launch_a2(cudaStream_t st, const attn1_args &a, int gm, int splits, bool mma) {
  const dim3 grid(a.nkv * (a.G / gm), splits, a.ntok > 1 ? a.ntok : 1), th(A2_THREADS);
  if constexpr (HD == 128)
    if (mma) return cu_launch(k_attn2<HD, 8, WP, true>, grid, th, a2_smem(HD, WP, true), st, a);
  const size_t smem = a2_smem(HD, WP);
  if (gm == 1) return cu_launch(k_attn2<HD, 1, WP>, grid, th, smem, st, a);
  if (gm == 2) return cu_launch(k_attn2<HD, 2, WP>, grid, th, smem, st, a);
  if constexpr (HD <= 128)
    if (gm == 8) return cu_launch(k_attn2<HD, 8, WP>, grid, th, smem, st, a);
  return cu_launch(k_attn2<HD, 4, WP>, grid, th, smem, st, a);
}

int64_t cu_attn2(cudaStream_t st, const attn1_args &a, int hd, int cls, bool *mma_used, bool *sep_used) {
  if (a.max_splits < 1) return cu_fail(BL_E_INVAL, "attention: %d splits", a.max_splits);
  if (a.G < 1 || a.G > 8 || a.nh != a.nkv * a.G) return cu_fail(BL_E_UNSUPPORTED, "attention: %d query heads a KV head", a.G);
  const bool mma = a2_mma(cls, a.G, hd);
  if (mma_used) *mma_used = mma;
  const int gm = mma ? 8 : a2_heads(cls, a.G, hd), wp = a2_window(cls, hd), splits = a2_splits(cls, wp, a.max_splits);
  attn1_args b = a;
  b.long_chunk = a2_long_chunk();
  // long contexts: the merge by a kernel of its own (not with the int8 row, which the merging block writes)
  b.sep_merge = (cu_fast & FAST_A2MERGE) && cls == 3 && !a.x8 && splits > 1;
  if (sep_used) *sep_used = b.sep_merge != 0;
  cudaError_t e;
  if (hd == 64) e = wp == 128 ? launch_a2<64, 128>(st, b, gm, splits, false) : launch_a2<64, 64>(st, b, gm, splits, false);
  else if (hd == 128) e = wp == 128 ? launch_a2<128, 128>(st, b, gm, splits, mma) : launch_a2<128, 64>(st, b, gm, splits, mma);
  else if (hd == 256) e = launch_a2<256, 64>(st, b, gm, splits, false);
  else return cu_fail(BL_E_UNSUPPORTED, "attention: head size %d", hd);
  CU_TRY(e, "one-token attention (head groups)");
  if (b.sep_merge) {
    const dim3 grid(a.nh, a.ntok > 1 ? a.ntok : 1);
    if (hd == 64) e = cu_launch(k_a2merge<64>, grid, dim3(128), 0, st, b, wp, splits);
    else if (hd == 128) e = cu_launch(k_a2merge<128>, grid, dim3(128), 0, st, b, wp, splits);
    else e = cu_launch(k_a2merge<256>, grid, dim3(128), 0, st, b, wp, splits);
    CU_TRY(e, "one-token attention's merge");
  }
  return BL_OK;
}

int64_t cu_attn2_init(int smem_optin) {
  const char *w = "configuring one-token attention (head groups)";
#define P(HD, WP)                                          \
  CU_OK(cu_allow_smem(k_attn2<HD, 1, WP>, smem_optin, w)); \
  CU_OK(cu_allow_smem(k_attn2<HD, 2, WP>, smem_optin, w)); \
  CU_OK(cu_allow_smem(k_attn2<HD, 4, WP>, smem_optin, w));
  P(64, 64) P(128, 64) P(256, 64) P(64, 128) P(128, 128)
#undef P
  CU_OK(cu_allow_smem(k_attn2<64, 8, 64>, smem_optin, w));
  CU_OK(cu_allow_smem(k_attn2<128, 8, 64>, smem_optin, w));
  CU_OK(cu_allow_smem(k_attn2<64, 8, 128>, smem_optin, w));
  CU_OK(cu_allow_smem(k_attn2<128, 8, 128>, smem_optin, w));
  CU_OK(cu_allow_smem(k_attn2<128, 8, 64, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_attn2<128, 8, 128, true>, smem_optin, w));
  return BL_OK;
}
