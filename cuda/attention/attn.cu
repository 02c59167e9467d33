// bloomery CUDA library: attention for decode-sized batches - per-head Q/K RMSNorm and RoPE
// (normal or NEOX, YaRN; angles as the CPU reference forms them) with K and V written to the f16
// cache, and decode attention split along the context (flash-decoding): each block takes one KV
// head's query group over a slice of positions with an online softmax, and the last block of a
// (token, KV head) merges the slices; a sliding window limits the positions, a sink logit per head
// joins the denominator. The split count is derived on the card from the position,
// so a captured graph serves every step.
#include <math.h>

#include "common.cuh"
#include "internal.h"
#include "rope.cuh"
#include "window.cuh"

// grid: x over q heads then kv heads, y over tokens; block: hd / 2 threads (at least 32).
__global__ void k_qk(qk_args a) {
  BL_TR_SCOPE(13);
  cu_pdl_entry();
  __shared__ float xs[1024];
  __shared__ float red[32];
  const int hi = blockIdx.x, t = blockIdx.y, hd = a.hd;
  const bool is_k = hi >= a.nh;
  const int head = is_k ? hi - a.nh : hi;
  float *vec = is_k ? a.k + (size_t)t * a.ldk + head * hd : a.q + (size_t)t * a.ldq + head * hd;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) xs[i] = vec[i];
  __syncthreads();
  const float *nw = is_k ? a.kn : a.qn;
  if (nw) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) ss += xs[i] * xs[i];
    ss = block_sum(ss, red);
    const float sc = 1.0f / sqrtf(ss / (float)hd + a.eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) xs[i] = xs[i] * sc * nw[i];
    __syncthreads();
  }
  const rope_params &r = a.rope;
  const int32_t pos = a.pos[t];
  for (int p = threadIdx.x; p < r.n_rot / 2; p += blockDim.x) {
    float cs, sn;
    rope_factors(r, pos, p, cs, sn);
    rope_rotate(xs, r, p, cs, sn);
  }
  __syncthreads();
  if (!is_k) {
    for (int i = threadIdx.x; i < hd; i += blockDim.x) vec[i] = xs[i];
    return;
  }
  const size_t off = (size_t)a.seq[t] * a.slot_stride + (size_t)pos * a.kd + (size_t)head * hd;
  const float *vv = a.v + (size_t)t * a.ldv + head * hd;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    a.kc[off + i] = __float2half_rn(xs[i]);
    a.vc[off + i] = __float2half_rn(vv[i]);
  }
}

// FAST_QKTOK: a block a token (and, for decode-sized batches, a group of heads: grid y), a warp a head at a time (k_qk made 18,432 blocks of two warps for a
// 512-token prompt of Qwen3-30B-A3B, each forming the rotation factors again). The same arithmetic
// as k_qk: the factors once a token by k_qk's formula, each head's squares summed as k_qk's
// threads and block_sum sum them (a lane takes each of k_qk's warps' part in turn), the same
// scaling and rotation expressions.
#define QKT_WARPS 8
#define QKT_HD_MAX 256
#define QKT_SPLIT_TOKENS 16 // batches of at most this many tokens take a block a head group (grid y)
__global__ void __launch_bounds__(QKT_WARPS * 32) k_qk_tok(qk_args a) {
  BL_TR_SCOPE(14);
  cu_pdl_entry();
  __shared__ float s_cs[QKT_HD_MAX / 2], s_sn[QKT_HD_MAX / 2];
  __shared__ float s_x[QKT_WARPS][QKT_HD_MAX];
  const int t = blockIdx.x, hd = a.hd, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const rope_params r = a.rope; // by value: a reference would copy the parameter to local memory
  const int32_t pos = a.pos[t];
  for (int p = threadIdx.x; p < r.n_rot / 2; p += blockDim.x) {
    rope_factors(r, pos, p, s_cs[p], s_sn[p]);
  }
  __syncthreads();
  const int T = ((hd / 2 + 31) / 32) * 32, nvw = T / 32; // k_qk's threads and warps a head
  float *xs = s_x[warp];
  for (int hi = blockIdx.y * QKT_WARPS + warp; hi < a.nh + a.nkv; hi += QKT_WARPS * gridDim.y) {
    const bool is_k = hi >= a.nh;
    const int head = is_k ? hi - a.nh : hi;
    float *vec = is_k ? a.k + (size_t)t * a.ldk + head * hd : a.q + (size_t)t * a.ldq + head * hd;
    for (int i = lane; i < hd; i += 32) xs[i] = vec[i];
    __syncwarp();
    const float *nw = is_k ? a.kn : a.qn;
    if (nw) {
      float mine = 0.0f; // lane w: k_qk's warp w's sum, as block_sum holds it in red[w]
      for (int w = 0; w < nvw; w++) {
        float ss = 0.0f;
        for (int i = 32 * w + lane; i < hd; i += T) ss += xs[i] * xs[i];
        ss = warp_sum(ss);
        if (lane == w) mine = ss;
      }
      const float tot = warp_sum(lane < nvw ? mine : 0.0f);
      const float sc = 1.0f / sqrtf(tot / (float)hd + a.eps);
      for (int i = lane; i < hd; i += 32) xs[i] = xs[i] * sc * nw[i];
      __syncwarp();
    }
    for (int p = lane; p < r.n_rot / 2; p += 32) rope_rotate(xs, r, p, s_cs[p], s_sn[p]);
    __syncwarp();
    if (!is_k) {
      for (int i = lane; i < hd; i += 32) vec[i] = xs[i];
    } else {
      const size_t off = (size_t)a.seq[t] * a.slot_stride + (size_t)pos * a.kd + (size_t)head * hd;
      const float *vv = a.v + (size_t)t * a.ldv + head * hd;
      for (int i = lane; i < hd; i += 32) {
        a.kc[off + i] = __float2half_rn(xs[i]);
        a.vc[off + i] = __float2half_rn(vv[i]);
      }
    }
    __syncwarp(); // xs is the next head's
  }
}

int64_t cu_qk_prep(cudaStream_t st, const qk_args &a, int ntok, bool *tok) {
  if (tok) *tok = false;
  if (a.hd > 1024 || a.hd % 2) return cu_fail(BL_E_UNSUPPORTED, "attention: head size %d", a.hd);
  if ((cu_fast & FAST_QKTOK) && a.hd <= QKT_HD_MAX && a.rope.n_rot <= a.hd) {
    // a few tokens (decode steps): a block a group of QKT_WARPS heads, each forming the factors
    // (one block looping over gpt-oss's 72 heads took 14 us, ncu on the H200); prompts: a block a token
    const int hg = ntok <= QKT_SPLIT_TOKENS ? (a.nh + a.nkv + QKT_WARPS - 1) / QKT_WARPS : 1;
    if (ntok > 0) CU_LAUNCH("q/k norm and rope (a block a token)", k_qk_tok, dim3(ntok, hg), dim3(QKT_WARPS * 32), 0, st, a);
    if (tok) *tok = ntok > 0;
    return BL_OK;
  }
  int threads = ((a.hd / 2 + 31) / 32) * 32;
  if (threads < 32) threads = 32;
  CU_LAUNCH("q/k norm and rope", k_qk, dim3(a.nh + a.nkv, ntok), dim3(threads), 0, st, a);
  return BL_OK;
}

#define AD_WARPS 4
#define AD_MAX_SPLITS 32

// The query heads of a KV head in sub-groups of at most 8 (a block each): the fewest that divide G
// (GLM-4.5's 12 a KV head: 2 of 6; Qwen3-235B's 16: 2 of 8).
static int dec_subgroups(int G) {
  for (int s = (G + 7) / 8; s <= G; s++)
    if (G % s == 0) return s;
  return G;
}

// grid: x over KV heads times sub-groups (gs of G / gs query heads), y over slices (up to
// max_splits), z over tokens.
template <int HD, int GM>
__global__ void __launch_bounds__(AD_WARPS * 32) k_attn_dec(attn_args a, int gs) {
  BL_TR_SCOPE(15);
  cu_pdl_entry();
  constexpr int DPL = HD / 32;          // V dims a lane
  constexpr int VB = HD >= 256 ? 4 : 8; // V rows loaded together
  __shared__ __align__(16) float sq[GM][HD];
  __shared__ float sp[AD_WARPS][32][GM];
  __shared__ float sm_m[AD_WARPS][GM], sm_l[AD_WARPS][GM];
  __shared__ __align__(16) float sacc[AD_WARPS][GM][HD];
  __shared__ float s_f[GM][AD_MAX_SPLITS], s_L[GM], s_M[GM];
  const int g = blockIdx.x / gs, sub = blockIdx.x - g * gs, si = blockIdx.y, t = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, G = a.G / gs;
  const int q0 = g * a.G + sub * G; // the block's first query head
  const int n = a.pos[t] + 1;
  const int lo = attn_first(n, a.window); // the first position the query sees
  int splits = (n - lo + a.min_chunk - 1) / a.min_chunk;
  if (splits > a.max_splits) splits = a.max_splits;
  if (si >= splits) return;
  const int chunk = (n - lo + splits - 1) / splits;
  const int p0 = lo + si * chunk, p1 = min(n, p0 + chunk);
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
    const int h = i / HD, d = i - h * HD;
    sq[h][d] = a.q[(size_t)t * a.ldq + (size_t)(q0 + h) * HD + d] * a.scale;
  }
  __syncthreads();
  const size_t base = (size_t)a.seq[t] * a.slot_stride + (size_t)g * HD;
  const __half *kb = a.kc + base, *vb = a.vc + base;
  float m[GM], l[GM], acc[GM][DPL];
#pragma unroll
  for (int h = 0; h < GM; h++) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int d = 0; d < DPL; d++) acc[h][d] = 0.0f;
  }
  for (int b0 = p0 + warp * 32; b0 < p1; b0 += AD_WARPS * 32) {
    const int pp = b0 + lane;
    const bool valid = pp < p1;
    float s[GM];
#pragma unroll
    for (int h = 0; h < GM; h++) s[h] = 0.0f;
    if (valid) {
      // this lane's key row: all its loads in flight before the arithmetic
      const uint4 *kr = reinterpret_cast<const uint4 *>(kb + (size_t)pp * a.kd);
      constexpr int KC = HD / 8, KB = KC < 16 ? KC : 16;
#pragma unroll
      for (int c0 = 0; c0 < KC; c0 += KB) {
        uint4 raw[KB];
#pragma unroll
        for (int c = 0; c < KB; c++) raw[c] = kr[c0 + c];
#pragma unroll
        for (int c = 0; c < KB; c++) {
          const __half2 *h2 = reinterpret_cast<const __half2 *>(&raw[c]);
          float kf[8];
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const float2 f = __half22float2(h2[e]);
            kf[2 * e] = f.x;
            kf[2 * e + 1] = f.y;
          }
          const int d0 = 8 * (c0 + c);
#pragma unroll
          for (int h = 0; h < GM; h++) {
            if (h < G) {
              const float4 q0 = *reinterpret_cast<const float4 *>(&sq[h][d0]);
              const float4 q1 = *reinterpret_cast<const float4 *>(&sq[h][d0 + 4]);
              s[h] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] + q1.z * kf[6] + q1.w * kf[7];
            }
          }
        }
      }
    }
#pragma unroll
    for (int h = 0; h < GM; h++) {
      if (h >= G) continue;
      const float sv = valid ? s[h] : -INFINITY;
      const float mx = warp_max(sv);
      const float mn = fmaxf(m[h], mx);
      const float al = expf(m[h] - mn);
      l[h] *= al;
#pragma unroll
      for (int d = 0; d < DPL; d++) acc[h][d] *= al;
      m[h] = mn;
      const float pr = valid ? expf(sv - mn) : 0.0f;
      l[h] += pr;
      sp[warp][lane][h] = pr;
    }
    __syncwarp();
    const int nv = min(32, p1 - b0);
    for (int j0 = 0; j0 < nv; j0 += VB) {
      // VB value rows in flight, then their weighted sums
      float vf[VB][DPL];
#pragma unroll
      for (int jj = 0; jj < VB; jj++) {
        if (j0 + jj < nv) {
          const __half *vr = vb + (size_t)(b0 + j0 + jj) * a.kd + lane * DPL;
#pragma unroll
          for (int d = 0; d < DPL; d += 2) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(vr + d));
            vf[jj][d] = f.x;
            vf[jj][d + 1] = f.y;
          }
        } else {
#pragma unroll
          for (int d = 0; d < DPL; d++) vf[jj][d] = 0.0f;
        }
      }
#pragma unroll
      for (int jj = 0; jj < VB; jj++) {
        const int j = j0 + jj < nv ? j0 + jj : 0; // rows past nv carry zeros
#pragma unroll
        for (int h = 0; h < GM; h++) {
          if (h >= G) continue;
          const float pj = sp[warp][j][h];
#pragma unroll
          for (int d = 0; d < DPL; d++) acc[h][d] += pj * vf[jj][d];
        }
      }
    }
    __syncwarp();
  }
#pragma unroll
  for (int h = 0; h < GM; h++) {
    if (h >= G) continue;
    l[h] = warp_sum(l[h]);
    if (lane == 0) {
      sm_m[warp][h] = m[h];
      sm_l[warp][h] = l[h];
    }
#pragma unroll
    for (int d = 0; d < DPL; d++) sacc[warp][h][lane * DPL + d] = acc[h][d];
  }
  __syncthreads();
  const int sts = HD + 2;
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
    const int h = i / HD, d = i - h * HD;
    float M = -INFINITY;
    for (int w = 0; w < AD_WARPS; w++)
      if (sm_l[w][h] > 0.0f) M = fmaxf(M, sm_m[w][h]);
    float L = 0.0f, A = 0.0f;
    for (int w = 0; w < AD_WARPS; w++) {
      if (sm_l[w][h] <= 0.0f) continue;
      const float f = expf(sm_m[w][h] - M);
      L += f * sm_l[w][h];
      A += f * sacc[w][h][d];
    }
    const int qh = q0 + h;
    if (splits == 1) {
      a.out[(size_t)t * a.ldo + (size_t)qh * HD + d] = a.sinks ? with_sink(A, L, M, a.sinks[qh]) : L > 0.0f ? A / L : 0.0f;
    } else {
      float *pp = a.part + (((size_t)t * a.nh + qh) * a.max_splits + si) * sts;
      pp[2 + d] = A;
      if (d == 0) {
        pp[0] = M;
        pp[1] = L;
      }
    }
  }
  if (splits == 1) return;
  if (!last_arrival(a.counters + (size_t)t * a.nkv * gs + blockIdx.x, splits)) return;
  // the last slice's block merges: per-slice factors first (read in parallel), then the sums
  for (int i = threadIdx.x; i < G * splits; i += blockDim.x) {
    const int h = i / splits, s2 = i - h * splits;
    const float *pp = a.part + (((size_t)t * a.nh + q0 + h) * a.max_splits + s2) * sts;
    const float ls = __ldcg(pp + 1);
    s_f[h][s2] = ls > 0.0f ? __ldcg(pp) : -INFINITY;
    sp[0][s2][h] = ls; // reuse: slice sums
  }
  __syncthreads();
  if (threadIdx.x < G) {
    const int h = threadIdx.x;
    float M = -INFINITY;
    for (int s2 = 0; s2 < splits; s2++) M = fmaxf(M, s_f[h][s2]);
    float L = 0.0f;
    for (int s2 = 0; s2 < splits; s2++) {
      const float f = sp[0][s2][h] > 0.0f ? expf(s_f[h][s2] - M) : 0.0f;
      s_f[h][s2] = f;
      L += f * sp[0][s2][h];
    }
    s_L[h] = L;
    s_M[h] = M;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
    const int h = i / HD, d = i - h * HD, qh = q0 + h;
    const float *pp = a.part + ((size_t)t * a.nh + qh) * a.max_splits * sts + 2 + d;
    float A = 0.0f;
#pragma unroll 8
    for (int s2 = 0; s2 < splits; s2++) A += s_f[h][s2] * __ldcg(pp + (size_t)s2 * sts);
    a.out[(size_t)t * a.ldo + (size_t)qh * HD + d] = a.sinks ? with_sink(A, s_L[h], s_M[h], a.sinks[qh]) : s_L[h] > 0.0f ? A / s_L[h] : 0.0f;
  }
  if (threadIdx.x == 0) a.counters[(size_t)t * a.nkv * gs + blockIdx.x] = 0;
}

template <int HD>
static cudaError_t launch_dec_hd(cudaStream_t st, const attn_args &a, dim3 grid, int gs) {
  const dim3 th(AD_WARPS * 32);
  const int G = a.G / gs;
  if (G <= 1) return cu_launch(k_attn_dec<HD, 1>, grid, th, 0, st, a, gs);
  if (G <= 2) return cu_launch(k_attn_dec<HD, 2>, grid, th, 0, st, a, gs);
  if (G <= 4) return cu_launch(k_attn_dec<HD, 4>, grid, th, 0, st, a, gs);
  return cu_launch(k_attn_dec<HD, 8>, grid, th, 0, st, a, gs);
}

bool cu_attn_decode_supported(int hd, int G) { return (hd == 64 || hd == 128 || hd == 256) && G >= 1 && G <= 64; }

int64_t cu_attn_decode(cudaStream_t st, const attn_args &a, int ntok) {
  if (!cu_attn_decode_supported(a.hd, a.G) || a.max_splits > AD_MAX_SPLITS)
    return cu_fail(BL_E_UNSUPPORTED, "attention: head size %d with %d query heads per KV head has no CUDA kernel", a.hd, a.G);
  const int gs = dec_subgroups(a.G);
  const dim3 grid(a.nkv * gs, a.max_splits, ntok);
  cudaError_t e;
  if (a.hd == 64) e = launch_dec_hd<64>(st, a, grid, gs);
  else if (a.hd == 128) e = launch_dec_hd<128>(st, a, grid, gs);
  else e = launch_dec_hd<256>(st, a, grid, gs);
  CU_TRY(e, "decode attention");
  return BL_OK;
}

int64_t cu_attn_dec_init() {
  const char *w = "configuring attention";
#define P(HD)                                        \
  CU_OK(cu_kernel_prefs(k_attn_dec<HD, 1>, w));      \
  CU_OK(cu_kernel_prefs(k_attn_dec<HD, 2>, w));      \
  CU_OK(cu_kernel_prefs(k_attn_dec<HD, 4>, w));      \
  CU_OK(cu_kernel_prefs(k_attn_dec<HD, 8>, w));
  P(64) P(128) P(256)
#undef P
  CU_OK(cu_kernel_prefs(k_qk_tok, w));
  return cu_kernel_prefs(k_qk, w);
}
