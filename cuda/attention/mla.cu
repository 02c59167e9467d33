// bloomery CUDA library: multi-head latent attention's own kernels (DeepSeek V2/V3, Kimi K2; the
// CPU's ffi/cpu/mla.c is the reference) in the absorbed form (prompts of the shapes mla_mma.cu takes
// run their attention there, on the tensor cores): the
// shared key part's RoPE and the f16 cache rows [latent | rope]; the queries' rotated parts; the
// per-head products (q_nope times k_b's head gives the latent query, a head's attended latent
// times v_b's head its value); and the attention itself as MQA over the cache rows, a warp a
// query head, the values the rows' latents, a decode batch's positions in slices merged after.
#include "common.cuh"
#include "internal.h"
#include "quants.cuh"
#include "rope.cuh"
#include "rows.cuh"

namespace {

constexpr int HG = 8;                        // query heads a block (a warp each)
constexpr int TP = 16;                       // cache rows a tile
constexpr int LPL = CU_MLA_MAX_LATENT / 32;  // latent elements a lane

// A block a token: its key part rotated, then its row [latent | rope] into the slot's cache.
__global__ void __launch_bounds__(128) k_mla_cache(mla_args a) {
  BL_TR_SCOPE(20);
  cu_pdl_entry();
  const int t = blockIdx.x, dk = a.kvl + a.nr;
  const int32_t pos = a.pos[t], seq = a.seq[t];
  float *row = a.kv + (size_t)t * a.ldkv;
  for (int p = threadIdx.x; p < a.nr / 2; p += blockDim.x) {
    float cs, sn;
    rope_factors(a.rope, pos, p, cs, sn);
    rope_rotate(row + a.kvl, a.rope, p, cs, sn);
  }
  __syncthreads();
  __half *dst = a.kc + (size_t)seq * a.slot_stride + (size_t)pos * dk;
  for (int i = threadIdx.x; i < dk; i += blockDim.x) dst[i] = __float2half_rn(row[i]);
}

// A block a token: each head's rotated part into its latent query's tail.
__global__ void __launch_bounds__(128) k_mla_qrope(mla_args a) {
  BL_TR_SCOPE(21);
  cu_pdl_entry();
  const int t = blockIdx.x, dk = a.kvl + a.nr, qh = a.nope + a.nr, half = a.nr / 2;
  const int32_t pos = a.pos[t];
  for (int i = threadIdx.x; i < a.nh * half; i += blockDim.x) {
    const int h = i / half, p = i - h * half;
    float cs, sn;
    rope_factors(a.rope, pos, p, cs, sn);
    rope_pair(a.q + (size_t)t * a.ldq + (size_t)h * qh + a.nope, a.ql + ((size_t)t * a.nh + h) * dk + a.kvl, a.rope, p, cs, sn);
  }
}

// Grid (token, head group, slice): each warp's query head over the slice's cache rows, online
// softmax, the weighted latents in registers (LPL a lane). One slice: the normalised output;
// else the slice's (max, sum, unnormalised latent) for k_mla_merge.
__global__ void __launch_bounds__(HG * 32) k_mla_attn(mla_args a) {
  BL_TR_SCOPE(22);
  cu_pdl_entry();
  __shared__ float qs[HG][CU_MLA_MAX_ROW];
  __shared__ __align__(16) __half ks[TP][CU_MLA_MAX_ROW];
  const int t = blockIdx.x, s = blockIdx.z, S = gridDim.z;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, h = blockIdx.y * HG + w;
  const int dk = a.kvl + a.nr;
  const bool live = h < a.nh;
  const int npos = a.pos[t] + 1, chunk = (npos + S - 1) / S;
  const int p_lo = s * chunk, p_hi = min(npos, p_lo + chunk);
  for (int i = lane; i < dk; i += 32) qs[w][i] = live ? a.ql[((size_t)t * a.nh + h) * dk + i] : 0.0f;
  const __half *kc = a.kc + (size_t)a.seq[t] * a.slot_stride;
  float m = -INFINITY, l = 0.0f, acc[LPL];
#pragma unroll
  for (int i = 0; i < LPL; i++) acc[i] = 0.0f;
  const int units = dk / 8; // 16-byte units of a row
  for (int p0 = p_lo; p0 < p_hi; p0 += TP) {
    const int np = min(TP, p_hi - p0);
    __syncthreads(); // the previous tile is read (and, first, qs written)
    for (int i = threadIdx.x; i < np * units; i += blockDim.x) {
      const int j = i / units, u = i - j * units;
      reinterpret_cast<uint4 *>(&ks[j][0])[u] = reinterpret_cast<const uint4 *>(kc + (size_t)(p0 + j) * dk)[u];
    }
    __syncthreads();
    if (!live) continue;
    float sc[TP];
    float mt = m;
#pragma unroll
    for (int j = 0; j < TP; j++) {
      float d = 0.0f;
      if (j < np)
        for (int i = lane; i < dk; i += 32) d += qs[w][i] * __half2float(ks[j][i]);
      d = warp_sum(d) * a.scale;
      sc[j] = j < np ? d : -INFINITY;
      mt = fmaxf(mt, sc[j]);
    }
    const float corr = m == -INFINITY ? 0.0f : __expf(m - mt);
    l *= corr;
#pragma unroll
    for (int i = 0; i < LPL; i++) acc[i] *= corr;
#pragma unroll
    for (int j = 0; j < TP; j++) {
      if (j >= np) break;
      const float e = __expf(sc[j] - mt);
      l += e;
#pragma unroll
      for (int i = 0; i < LPL; i++)
        if (lane + 32 * i < a.kvl) acc[i] += e * __half2float(ks[j][lane + 32 * i]);
    }
    m = mt;
  }
  if (!live) return;
  if (S == 1) {
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    float *o = a.lat + ((size_t)t * a.nh + h) * a.kvl;
#pragma unroll
    for (int i = 0; i < LPL; i++)
      if (lane + 32 * i < a.kvl) o[lane + 32 * i] = acc[i] * inv;
    return;
  }
  float *pp = a.part + (((size_t)t * a.nh + h) * S + s) * (a.kvl + 2);
  if (lane == 0) {
    pp[0] = m;
    pp[1] = l;
  }
#pragma unroll
  for (int i = 0; i < LPL; i++)
    if (lane + 32 * i < a.kvl) pp[2 + lane + 32 * i] = acc[i];
}

// A block a (token, head): the slices' partial softmaxes merged into the head's latent.
__global__ void __launch_bounds__(128) k_mla_merge(mla_args a, int S) {
  BL_TR_SCOPE(23);
  cu_pdl_entry();
  const int t = blockIdx.x, h = blockIdx.y;
  const float *pp = a.part + ((size_t)t * a.nh + h) * S * (a.kvl + 2);
  float M = -INFINITY;
  for (int s = 0; s < S; s++) M = fmaxf(M, pp[(size_t)s * (a.kvl + 2)]);
  float L = 0.0f;
  for (int s = 0; s < S; s++) {
    const float ms = pp[(size_t)s * (a.kvl + 2)];
    if (ms != -INFINITY) L += pp[(size_t)s * (a.kvl + 2) + 1] * __expf(ms - M);
  }
  const float inv = L > 0 ? 1.0f / L : 0.0f;
  float *o = a.lat + ((size_t)t * a.nh + h) * a.kvl;
  for (int d = threadIdx.x; d < a.kvl; d += blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < S; s++) {
      const float ms = pp[(size_t)s * (a.kvl + 2)];
      if (ms != -INFINITY) v += pp[(size_t)s * (a.kvl + 2) + 2 + d] * __expf(ms - M);
    }
    o[d] = v * inv;
  }
}

// Grid (row blocks, heads): each warp a row of slab h against the tokens' rows of head h, NT
// tokens staged at a time (the block's weight rows stay in L1 across the groups).
template <int T, int NT>
__global__ void __launch_bounds__(MV_THREADS) k_head_rows(head_rows_args a, int ntok) {
  BL_TR_SCOPE(24);
  cu_pdl_entry();
  extern __shared__ float4 dyn_smem4[];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  __shared__ float red[32];
  const int h = blockIdx.y, n = a.w.ne0;
  const int lane = threadIdx.x & 31, row = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
  const uint8_t *rp = a.w.d + (size_t)h * a.w.nb2 + (size_t)row * a.w.nb1;
  for (int t0 = 0; t0 < ntok; t0 += NT) {
    const int nt = ntok - t0 < NT ? ntok - t0 : NT;
    if (t0) __syncthreads(); // the last group's rows are read
    stage_rows(xs, a.x + (size_t)t0 * a.ldx + (size_t)h * a.xh, a.ldx, n, nt, 0, nullptr, 0.0f, red);
    if (row >= a.w.ne1) continue;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    mv_row<T, NT>(rp, xs, n, acc, lane); // (rows past nt read stale staged values; not stored)
#pragma unroll
    for (int t = 0; t < NT; t++) {
      const float v = warp_sum(acc[t]);
      if (lane == 0 && t < nt) a.y[(size_t)(t0 + t) * a.ldy + (size_t)h * a.yh + row] = v;
    }
  }
}

template <int T>
cudaError_t launch_rows(cudaStream_t st, const head_rows_args &a, int ntok, size_t smem) {
  const dim3 grid((a.w.ne1 + MV_WARPS - 1) / MV_WARPS, a.nh);
  switch (ntok) {
#define C(N) \
  case N: return cu_launch(k_head_rows<T, N>, grid, dim3(MV_THREADS), smem, st, a, ntok);
    C(1) C(2) C(3) C(4) C(5) C(6) C(7)
#undef C
    default: return cu_launch(k_head_rows<T, 8>, grid, dim3(MV_THREADS), smem, st, a, ntok);
  }
}

} // namespace

bool cu_mla_supported(int kvl, int dk) { return kvl > 0 && kvl % 32 == 0 && kvl <= CU_MLA_MAX_LATENT && dk % 8 == 0 && dk <= CU_MLA_MAX_ROW; }

int64_t cu_mla_cache(cudaStream_t st, const mla_args &a, int ntok) {
  if (ntok <= 0) return BL_OK;
  CU_LAUNCH("latent attention's cache rows", k_mla_cache, dim3(ntok), dim3(128), 0, st, a);
  return BL_OK;
}

int64_t cu_mla_qrope(cudaStream_t st, const mla_args &a, int ntok) {
  if (ntok <= 0) return BL_OK;
  CU_LAUNCH("latent attention's query rotation", k_mla_qrope, dim3(ntok), dim3(128), 0, st, a);
  return BL_OK;
}

int64_t cu_mla_attn(cudaStream_t st, const mla_args &a, int ntok) {
  if (ntok <= 0) return BL_OK;
  if (!cu_mla_supported(a.kvl, a.kvl + a.nr)) return cu_fail(BL_E_UNSUPPORTED, "latent attention: a latent of %d and rows of %d", a.kvl, a.kvl + a.nr);
  const int S = ntok <= MV_MAX_NT ? CU_MLA_SPLITS : 1;
  CU_LAUNCH("latent attention", k_mla_attn, dim3(ntok, (a.nh + HG - 1) / HG, S), dim3(HG * 32), 0, st, a);
  if (S > 1) CU_LAUNCH("latent attention's merge", k_mla_merge, dim3(ntok, a.nh), dim3(128), 0, st, a, S);
  return BL_OK;
}

int64_t cu_head_rows(cudaStream_t st, const head_rows_args &a, int ntok, int smem_limit) {
  const int n = a.w.ne0;
  if (ntok <= 0 || a.w.ne1 <= 0) return BL_OK;
  if (n % 4 || a.ldx % 4 || a.xh % 4) return cu_fail(BL_E_UNSUPPORTED, "per-head product: rows of %d elements", n);
  // NT rows of n floats staged, within the default 48 KB (no opt-in needed)
  const int limit = smem_limit < 48 * 1024 ? smem_limit : 48 * 1024;
  const int nt = ntok < MV_MAX_NT ? ntok : MV_MAX_NT;
  const size_t smem = (size_t)nt * n * sizeof(float);
  if ((int)smem > limit) return cu_fail(BL_E_UNSUPPORTED, "per-head product: rows of %d elements do not fit the card's shared memory", n);
  cudaError_t e = cudaErrorInvalidValue;
  switch (a.w.type) {
#define L(T) \
  case T: e = launch_rows<T>(st, a, ntok, smem); break;
    CU_TYPE_CASES(L)
#undef L
    default: return cu_fail(BL_E_UNSUPPORTED, "per-head product: %s has no CUDA kernel", cu_type_name(a.w.type));
  }
  CU_TRY(e, "per-head product");
  return BL_OK;
}
