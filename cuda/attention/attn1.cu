// bloomery CUDA library: one token's attention in one kernel - per-head Q/K RMSNorm and RoPE
// (the angles formed as the CPU reference forms them), K and V written to the f16 cache, and
// attention over the cache split along the context (flash-decoding; the split count derives on
// the card from the position, so one graph serves every step). Each block copies its slice's key
// and value rows into shared memory with cp.async before waiting on the previous kernel (the rows
// below the position were written by earlier steps), so the slice costs one memory round trip;
// the current position's rows come from the block itself. The last block of a KV head merges.
#include <math.h>

#include "common.cuh"
#include "internal.h"
#include "rope.cuh"
#include "stage.cuh"

#define A1_THREADS 128
#define A1_MAX_SPLITS 32
#define A1_MIN_CHUNK 128

// Positions a window holds in shared memory (key and value rows).
__host__ __device__ constexpr int a1_window(int hd) { return hd >= 256 ? 96 : 192; }
__host__ __device__ constexpr int a1_row_stride(int hd) { return hd * 2 + 16; } // padded: rows start on different banks

// Copies the key and value rows of positions [w0, w1) except `skip` into the block's buffers.
template <int HD>
__device__ __forceinline__ void a1_issue(uint8_t *sK, uint8_t *sV, const __half *kb, const __half *vb, int kd, int w0, int w1, int skip) {
  constexpr int CPR = HD * 2 / 16, RS = a1_row_stride(HD);
  const int total = (w1 - w0) * 2 * CPR;
  for (int c = threadIdx.x; c < total; c += A1_THREADS) {
    const int r = c / (2 * CPR), rem = c - r * 2 * CPR, kv = rem / CPR, ch = rem - kv * CPR;
    const int p = w0 + r;
    if (p == skip) continue;
    const __half *src = (kv ? vb : kb) + (size_t)p * kd + ch * 8;
    cp_async16((kv ? sV : sK) + (size_t)r * RS + ch * 16, src);
  }
}

// grid: x over KV heads, y over slices (up to max_splits); 128 threads.
template <int HD, int GM>
__global__ void __launch_bounds__(A1_THREADS) k_attn1(attn1_args a) {
  BL_TR_SCOPE(19);
  constexpr int WP = a1_window(HD), RS = a1_row_stride(HD), CPR = HD * 2 / 16;
  constexpr int DPT = HD > A1_THREADS ? HD / A1_THREADS : 1; // dims a thread (values)
  constexpr int PG = HD < A1_THREADS ? A1_THREADS / HD : 1;  // position groups (values)
  constexpr int STS = HD + 4;                                // floats a slice's partial takes
  extern __shared__ float4 dyn_smem4[];
  uint8_t *sK = reinterpret_cast<uint8_t *>(dyn_smem4), *sV = sK + (size_t)WP * RS;
  __shared__ __align__(16) float sq[GM][HD];
  __shared__ __align__(16) float sk32[HD], sv32[HD];
  __shared__ __half sk16[HD], sv16[HD];
  __shared__ float scs[HD / 2], ssn[HD / 2];
  __shared__ float sqn[HD], skn[HD]; // norm weights (constant: loaded before the wait)
  __shared__ float sp[GM][WP];
  __shared__ float sred[A1_THREADS / 32][GM];
  __shared__ float s_f[GM][A1_MAX_SPLITS], s_l[GM][A1_MAX_SPLITS], s_L[GM];
  const int g = blockIdx.x, si = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.G;
  // the step's position and slot were copied in before the graph started
  const int pos = a.pos[0], n = pos + 1;
  int splits = (n + a.min_chunk - 1) / a.min_chunk;
  if (splits > a.max_splits) splits = a.max_splits;
  if (si >= splits) return;
  const int chunk = (n + splits - 1) / splits;
  const int p0 = si * chunk, p1 = min(n, p0 + chunk);
  const size_t base = (size_t)a.seq[0] * a.slot_stride + (size_t)g * HD;
  const __half *kb = a.kc + base, *vb = a.vc + base;
  if (p0 < p1) a1_issue<HD>(sK, sV, kb, vb, a.kd, p0, min(p1, p0 + WP), pos);
  for (int d = tid; d < HD; d += A1_THREADS) {
    sqn[d] = a.qn ? __ldg(a.qn + d) : 1.0f;
    skn[d] = a.kn ? __ldg(a.kn + d) : 1.0f;
  }
  // rotation factors of this position (shared by every head)
  const rope_params r = a.rope; // by value: a reference would copy the parameter to local memory
  for (int p = tid; p < r.n_rot / 2; p += A1_THREADS) {
    rope_factors(r, pos, p, scs[p], ssn[p]);
  }
  cu_pdl_wait();
  // this step's q of the group's heads, k and v of the KV head (all loads in flight)
  constexpr int QPT = (GM * HD / 4 + A1_THREADS - 1) / A1_THREADS;
  float4 qv[QPT], kv4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float4 *q4 = reinterpret_cast<const float4 *>(a.q + (size_t)g * G * HD);
#pragma unroll
  for (int k = 0; k < QPT; k++) {
    const int i = tid + k * A1_THREADS;
    if (i < G * HD / 4) qv[k] = __ldcg(q4 + i);
  }
  if (tid < HD / 4) kv4 = __ldcg(reinterpret_cast<const float4 *>(a.k + (size_t)g * HD) + tid);
  else if (tid < HD / 2) kv4 = __ldcg(reinterpret_cast<const float4 *>(a.v + (size_t)g * HD) + tid - HD / 4);
#pragma unroll
  for (int k = 0; k < QPT; k++) {
    const int i = tid + k * A1_THREADS;
    if (i < G * HD / 4) reinterpret_cast<float4 *>(&sq[0][0])[i] = qv[k];
  }
  if (tid < HD / 4) reinterpret_cast<float4 *>(sk32)[tid] = kv4;
  else if (tid < HD / 2) reinterpret_cast<float4 *>(sv32)[tid - HD / 4] = kv4;
  __syncthreads();
  // per-head RMSNorm and RoPE: warp per head (G query heads, then the key head)
  for (int hh = warp; hh <= G; hh += A1_THREADS / 32) {
    float *vec = hh < G ? sq[hh] : sk32;
    const float *nw = hh < G ? sqn : skn;
    if (hh < G ? a.qn != nullptr : a.kn != nullptr) {
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
    if (hh < G)
      for (int i = lane; i < HD; i += 32) vec[i] *= a.scale;
  }
  __syncthreads();
  const bool own = pos >= p0 && pos < p1;
  for (int d = tid; d < HD; d += A1_THREADS) {
    const __half kh = __float2half_rn(sk32[d]), vh = __float2half_rn(sv32[d]);
    sk16[d] = kh;
    sv16[d] = vh;
    if (own) {
      a.kc[base + (size_t)pos * a.kd + d] = kh;
      a.vc[base + (size_t)pos * a.kd + d] = vh;
    }
  }
  float m[GM], l[GM], acc[GM][DPT];
#pragma unroll
  for (int h = 0; h < GM; h++) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int dd = 0; dd < DPT; dd++) acc[h][dd] = 0.0f;
  }
  const int vd = tid % (HD < A1_THREADS ? HD : A1_THREADS), vg = tid / (HD < A1_THREADS ? HD : A1_THREADS);
  for (int ws = p0; ws < p1; ws += WP) {
    const int we = min(p1, ws + WP), cnt = we - ws;
    if (ws != p0) a1_issue<HD>(sK, sV, kb, vb, a.kd, ws, we, pos);
    cp_async_wait_all();
    __syncthreads(); // sk16 / sv16 written; the previous window's readers are done
    if (pos >= ws && pos < we)
      for (int d = tid; d < HD; d += A1_THREADS) {
        reinterpret_cast<__half *>(sK + (size_t)(pos - ws) * RS)[d] = sk16[d];
        reinterpret_cast<__half *>(sV + (size_t)(pos - ws) * RS)[d] = sv16[d];
      }
    __syncthreads();
    // scores: a thread a position
    float wmax[GM];
#pragma unroll
    for (int h = 0; h < GM; h++) wmax[h] = -INFINITY;
    for (int t = tid; t < cnt; t += A1_THREADS) {
      float s[GM];
#pragma unroll
      for (int h = 0; h < GM; h++) s[h] = 0.0f;
      const uint4 *kr = reinterpret_cast<const uint4 *>(sK + (size_t)t * RS);
#pragma unroll 4
      for (int c = 0; c < CPR; c++) {
        const uint4 raw = kr[c];
        const uint32_t rw[4] = {raw.x, raw.y, raw.z, raw.w};
        float kf[8];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          kf[2 * e] = __half2float(__ushort_as_half((unsigned short)(rw[e] & 0xffffu)));
          kf[2 * e + 1] = __half2float(__ushort_as_half((unsigned short)(rw[e] >> 16)));
        }
#pragma unroll
        for (int h = 0; h < GM; h++) {
          if (h < G) {
            const float4 qa = *reinterpret_cast<const float4 *>(&sq[h][8 * c]);
            const float4 qb = *reinterpret_cast<const float4 *>(&sq[h][8 * c + 4]);
            s[h] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
          }
        }
      }
#pragma unroll
      for (int h = 0; h < GM; h++) {
        if (h < G) {
          sp[h][t] = s[h];
          wmax[h] = fmaxf(wmax[h], s[h]);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < GM; h++) {
      const float v = warp_max(wmax[h]);
      if (lane == 0) sred[warp][h] = v;
    }
    __syncthreads();
    float mn[GM], al[GM];
#pragma unroll
    for (int h = 0; h < GM; h++) {
      float wm = sred[0][h];
#pragma unroll
      for (int w = 1; w < A1_THREADS / 32; w++) wm = fmaxf(wm, sred[w][h]);
      mn[h] = fmaxf(m[h], wm);
      al[h] = expf(m[h] - mn[h]);
    }
    __syncthreads(); // sred is reused for the sums
    float ls[GM];
#pragma unroll
    for (int h = 0; h < GM; h++) ls[h] = 0.0f;
    for (int t = tid; t < cnt; t += A1_THREADS) {
#pragma unroll
      for (int h = 0; h < GM; h++) {
        if (h < G) {
          const float pr = expf(sp[h][t] - mn[h]);
          sp[h][t] = pr;
          ls[h] += pr;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < GM; h++) {
      const float v = warp_sum(ls[h]);
      if (lane == 0) sred[warp][h] = v;
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < GM; h++) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < A1_THREADS / 32; w++) sum += sred[w][h];
      l[h] = l[h] * al[h] + sum;
      m[h] = mn[h];
#pragma unroll
      for (int dd = 0; dd < DPT; dd++) acc[h][dd] *= al[h];
    }
    // values: a thread a dimension (DPT of them), position groups of PG
    for (int t = vg; t < cnt; t += PG) {
      const __half *vr = reinterpret_cast<const __half *>(sV + (size_t)t * RS);
#pragma unroll
      for (int dd = 0; dd < DPT; dd++) {
        const float vf = __half2float(vr[vd + dd * A1_THREADS]);
#pragma unroll
        for (int h = 0; h < GM; h++)
          if (h < G) acc[h][dd] += sp[h][t] * vf;
      }
    }
    __syncthreads(); // before the next window reuses the buffers
  }
  // position groups summed (head sizes below the thread count): scratch in sp
  if (PG > 1) {
    float *scr = &sp[0][0];
    for (int gi = 1; gi < PG; gi++) {
      if (vg == gi)
#pragma unroll
        for (int h = 0; h < GM; h++)
          if (h < G) scr[h * HD + vd] = acc[h][0];
      __syncthreads();
      if (vg == 0)
#pragma unroll
        for (int h = 0; h < GM; h++)
          if (h < G) acc[h][0] += scr[h * HD + vd];
      __syncthreads();
    }
  }
  if (splits == 1) {
    if (vg == 0)
#pragma unroll
      for (int h = 0; h < GM; h++)
        if (h < G)
#pragma unroll
          for (int dd = 0; dd < DPT; dd++) a.out[(size_t)(g * G + h) * HD + vd + dd * A1_THREADS] = l[h] > 0.0f ? acc[h][dd] / l[h] : 0.0f;
    return;
  }
  if (vg == 0)
#pragma unroll
    for (int h = 0; h < GM; h++)
      if (h < G) {
        float *pp = a.part + ((size_t)(g * G + h) * a.max_splits + si) * STS;
#pragma unroll
        for (int dd = 0; dd < DPT; dd++) pp[4 + vd + dd * A1_THREADS] = acc[h][dd];
        if (vd == 0) {
          pp[0] = m[h];
          pp[1] = l[h];
        }
      }
  if (!last_arrival(a.counters + g, splits)) return;
  // the last slice's block merges: per-slice factors, then the weighted sums (float4 loads)
  for (int i = tid; i < G * splits; i += A1_THREADS) {
    const int h = i / splits, s2 = i - h * splits;
    const float *pp = a.part + ((size_t)(g * G + h) * a.max_splits + s2) * STS;
    const float ls2 = __ldcg(pp + 1);
    s_f[h][s2] = ls2 > 0.0f ? __ldcg(pp) : -INFINITY;
    s_l[h][s2] = ls2;
  }
  __syncthreads();
  if (tid < G) {
    const int h = tid;
    float M = -INFINITY;
    for (int s2 = 0; s2 < splits; s2++) M = fmaxf(M, s_f[h][s2]);
    float L = 0.0f;
    for (int s2 = 0; s2 < splits; s2++) {
      const float f = s_l[h][s2] > 0.0f ? expf(s_f[h][s2] - M) : 0.0f;
      s_f[h][s2] = f;
      L += f * s_l[h][s2];
    }
    s_L[h] = L;
  }
  __syncthreads();
  for (int i = tid; i < G * HD / 4; i += A1_THREADS) {
    const int h = i / (HD / 4), d4 = i - h * (HD / 4);
    const float *pp = a.part + (size_t)(g * G + h) * a.max_splits * STS + 4 + 4 * d4;
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
    float *o = a.out + (size_t)(g * G + h) * HD + 4 * d4;
    o[0] = L > 0.0f ? A.x * inv : 0.0f;
    o[1] = L > 0.0f ? A.y * inv : 0.0f;
    o[2] = L > 0.0f ? A.z * inv : 0.0f;
    o[3] = L > 0.0f ? A.w * inv : 0.0f;
  }
  if (tid == 0) a.counters[g] = 0;
}

bool cu_attn1_supported(int hd, int G, int n_rot) {
  return (cu_fast & FAST_ATTN) && (hd == 64 || hd == 128 || hd == 256) && G >= 1 && G <= 8 && n_rot >= 0 && n_rot <= hd && n_rot % 2 == 0;
}

template <int HD>
static cudaError_t launch_a1(cudaStream_t st, const attn1_args &a, dim3 grid) {
  const size_t smem = 2 * (size_t)a1_window(HD) * a1_row_stride(HD);
  const dim3 th(A1_THREADS);
  if (a.G <= 1) return cu_launch(k_attn1<HD, 1>, grid, th, smem, st, a);
  if (a.G <= 2) return cu_launch(k_attn1<HD, 2>, grid, th, smem, st, a);
  if (a.G <= 4) return cu_launch(k_attn1<HD, 4>, grid, th, smem, st, a);
  return cu_launch(k_attn1<HD, 8>, grid, th, smem, st, a);
}

int64_t cu_attn1(cudaStream_t st, const attn1_args &a0, int hd) {
  attn1_args a = a0;
  if (a.max_splits < 1 || a.max_splits > A1_MAX_SPLITS) return cu_fail(BL_E_INVAL, "attention: %d splits (1..%d)", a.max_splits, A1_MAX_SPLITS);
  if (a.min_chunk < A1_MIN_CHUNK) a.min_chunk = A1_MIN_CHUNK;
  const dim3 grid(a.nkv, a.max_splits);
  cudaError_t e;
  if (hd == 64) e = launch_a1<64>(st, a, grid);
  else if (hd == 128) e = launch_a1<128>(st, a, grid);
  else if (hd == 256) e = launch_a1<256>(st, a, grid);
  else return cu_fail(BL_E_UNSUPPORTED, "attention: head size %d", hd);
  CU_TRY(e, "one-token attention");
  return BL_OK;
}

int64_t cu_attn1_init(int smem_optin) {
  const char *w = "configuring one-token attention";
#define P(HD)                                              \
  CU_OK(cu_allow_smem(k_attn1<HD, 1>, smem_optin, w));     \
  CU_OK(cu_allow_smem(k_attn1<HD, 2>, smem_optin, w));     \
  CU_OK(cu_allow_smem(k_attn1<HD, 4>, smem_optin, w));     \
  CU_OK(cu_allow_smem(k_attn1<HD, 8>, smem_optin, w));
  P(64) P(128) P(256)
#undef P
  return BL_OK;
}
