// bloomery CUDA library: the dense products of decode batches of 2..MV_MAX_NT tokens - Q/K/V (one
// launch for the three matrices of one type or one paired type), the attention output added to
// the residual, the router's F32 product and the output head. A block stages all of the step's
// activation rows once (RMS-normalised on the way in when asked; int8 per 32 in dot8.cuh's layout
// for Q4_K / Q6_K rows as the one-token kernels, else f32), then each warp takes two weight rows at a time and dots
// each unit of them with every staged row (dotbatch.cuh), so a weight row is read once a step, not
// once a token. Grids are sized to the blocks resident on the card, each block taking a
// contiguous run of rows (the output head: many rows a warp, the activations staged rarely). The
// router's picks then come from route.cuh's arithmetic, one warp a token (or with the grouping by
// expert, moe_batch.cu's k_mb_pick). FAST_MV gates it (the
// batch-invariant mode keeps cu_matvec's per-token kernels); BLOOMERY_CUDA_MV_BATCH=0 turns it off.
// With FAST_X8 and the caller's scratch, the int8 kernels' rows are quantized once a launch by a
// kernel of their own (x8rows.cu, the same values) and each block copies them whole (cp.async);
// with FAST_COMBINE that kernel also adds the previous MoE layer's pending combine to the rows.
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "dot8.cuh"
#include "dotbatch.cuh"
#include "internal.h"
#include "quants.cuh"
#include "route.cuh"
#include "rows.cuh"

static_assert(MB_NT == 8, "the warp reduction below splits 8 token sums over the lanes");

struct mvb_args {
  mv_job job[3];
  int njobs;
  const float *x; // activation rows (ldx floats apart, 16-byte aligned)
  int ldx, n, nt;
  int norm;
  const float *normw;
  float eps;
  float *h; // float kernels: block 0 writes the staged (normalised) rows here (ldh apart), or null
  int ldh;
  int rpw; // rows a warp
  const uint8_t *xq; // int8 kernels: the rows already quantized (x8rows.cu, nt slots), or null: staged here
};

// The eight token sums of v over the warp, spread: lanes 4t .. 4t + 3 get token t's (9 shuffles,
// not 40): each step keeps half of the values and adds the partner lane's other half.
__device__ __forceinline__ float warp_sum8(const float (&v)[8], int lane) {
  float w4[4], w2[2];
  bool hi = lane & 16;
#pragma unroll
  for (int i = 0; i < 4; i++) w4[i] = (hi ? v[i + 4] : v[i]) + __shfl_xor_sync(0xffffffffu, hi ? v[i] : v[i + 4], 16);
  hi = lane & 8;
#pragma unroll
  for (int i = 0; i < 2; i++) w2[i] = (hi ? w4[i + 2] : w4[i]) + __shfl_xor_sync(0xffffffffu, hi ? w4[i] : w4[i + 2], 8);
  hi = lane & 4;
  float s = (hi ? w2[1] : w2[0]) + __shfl_xor_sync(0xffffffffu, hi ? w2[0] : w2[1], 4);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  return s;
}
// The token whose sum warp_sum8 leaves in this lane.
__device__ __forceinline__ int sum8_token(int lane) { return ((lane >> 4) & 1) * 4 + ((lane >> 3) & 1) * 2 + ((lane >> 2) & 1); }

__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// The rows' RMS scales into scl (a warp a row), when norm; ends with a block barrier.
__device__ __forceinline__ void row_scales(const mvb_args &a, float *scl) {
  if (!a.norm) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n4 = a.n >> 2;
  for (int t = warp; t < a.nt; t += MV_WARPS) {
    const float4 *xr = reinterpret_cast<const float4 *>(a.x + (size_t)t * a.ldx);
    float ss = 0.0f;
    // a row of 2,048 is 16 loads a lane: all in flight at once (one round trip, not four)
#pragma unroll 16
    for (int i = lane; i < n4; i += 32) {
      ss += sq4(__ldcg(xr + i));
    }
    ss = warp_sum(ss);
    if (lane == 0) scl[t] = 1.0f / sqrtf(ss / (float)a.n + a.eps);
  }
  __syncthreads();
}

// Elements i4 * 4 .. + 3 of row t, normalised as the CPU reference does (x * (1/rms) * w).
__device__ __forceinline__ float4 x_at(const mvb_args &a, const float *scl, int t, int i4) {
  float4 v = __ldcg(reinterpret_cast<const float4 *>(a.x + (size_t)t * a.ldx) + i4);
  if (a.norm) {
    const float s = scl[t];
    const float4 w = a.normw ? __ldg(reinterpret_cast<const float4 *>(a.normw) + i4) : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    v = make_float4(v.x * s * w.x, v.y * s * w.y, v.z * s * w.z, v.w * s * w.w);
  }
  return v;
}

// All nt rows as floats (xs: nt rows of n); block 0 copies them to a.h when set. A thread's loads
// of MB_STAGE_BATCH elements are in flight together.
__device__ __forceinline__ void stage_f32(const mvb_args &a, const float *scl, float *xs) {
  const int n4 = a.n >> 2, total = a.nt * n4;
  const bool keep = a.h && blockIdx.x == 0;
  for (int base = 0; base < total; base += MB_STAGE_BATCH * (int)blockDim.x) {
    float4 v[MB_STAGE_BATCH];
#pragma unroll
    for (int k = 0; k < MB_STAGE_BATCH; k++) {
      const int idx = base + k * (int)blockDim.x + (int)threadIdx.x, t = idx / n4;
      if (idx < total) v[k] = x_at(a, scl, t, idx - t * n4);
    }
#pragma unroll
    for (int k = 0; k < MB_STAGE_BATCH; k++) {
      const int idx = base + k * (int)blockDim.x + (int)threadIdx.x, t = idx / n4;
      if (idx >= total) break;
      reinterpret_cast<float4 *>(xs)[idx] = v[k];
      if (keep) reinterpret_cast<float4 *>(a.h + (size_t)t * a.ldh)[idx - t * n4] = v[k];
    }
  }
  __syncthreads();
}

// All nt rows quantized per 32 into x8 slots xq + t * x8_bytes(n) (dot8.cuh's layout and rounding:
// scale amax / 127, f32 group sums, int8 sums per 16), four threads a group, straight from memory.
__device__ __forceinline__ void stage_q8(const mvb_args &a, const float *scl, uint8_t *xq) {
  const int ng = a.n / 32, total = a.nt * ng, part = threadIdx.x & 3, xb = x8_bytes(a.n);
  for (int base = 0; base < total; base += blockDim.x >> 2) {
    const int gi = base + (threadIdx.x >> 2);
    const bool ok = gi < total;
    const int t = ok ? gi / ng : 0, g = ok ? gi - t * ng : 0;
    float4 va = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vb = va;
    if (ok) {
      va = x_at(a, scl, t, 8 * g + 2 * part);
      vb = x_at(a, scl, t, 8 * g + 2 * part + 1);
    }
    q8_group(va, vb, ok, xq + (size_t)t * xb, a.n, g, part);
  }
  __syncthreads();
}


template <int T>
__host__ __device__ constexpr int row_bytes_of(int n) {
  return (n / qt<T>::BE) * qt<T>::BB;
}

// grid: the jobs' blocks (rpw * MV_WARPS consecutive rows each, a warp taking rows warp, warp +
// MV_WARPS, ... of them two at a time); smem: the staged rows (f32: nt * n floats; Q8: nt x8 slots).
template <int TA, int TB, bool Q8>
__global__ void __launch_bounds__(MV_THREADS, 2) k_mvb(mvb_args a) {
  extern __shared__ float4 dyn_smem4[];
  __shared__ float scl[MB_NT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = a.n, nt = a.nt;
  // the block's job, picked with selects (a dynamic index into the parameters would go through local memory)
  int b = blockIdx.x;
  mv_job jb = a.job[0];
  if (a.njobs > 1 && b >= a.job[0].blocks) {
    b -= a.job[0].blocks;
    jb = a.job[1];
    if (a.njobs > 2 && b >= a.job[1].blocks) {
      b -= a.job[1].blocks;
      jb = a.job[2];
    }
  }
  const bool ta = jb.m.type == TA;
  const int rows = jb.m.ne1;
  // the warp's first two rows toward L2 before the wait (weights never change)
  {
    const int rb = ta ? row_bytes_of<TA>(n) : row_bytes_of<TB>(n);
    for (int i = 0; i < 2 && i < a.rpw; i++) {
      const int r = (b * a.rpw + i) * MV_WARPS + warp;
      if (r >= rows) break;
      const uint8_t *rp = jb.m.d + (size_t)r * jb.m.nb1;
      for (int o = lane * 128; o < rb; o += 32 * 128) prefetch_l2(rp + o);
    }
  }
  cu_pdl_entry();
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  const uint8_t *xq = reinterpret_cast<const uint8_t *>(dyn_smem4);
  if constexpr (Q8) {
    if (a.xq) {
      // quantized once for the launch (x8rows.cu): the slots copied as they lie
      x8_copy_async(reinterpret_cast<uint8_t *>(dyn_smem4), a.xq, nt * x8_bytes(n));
      cp_async_wait_all();
      __syncthreads();
    } else {
      row_scales(a, scl);
      stage_q8(a, scl, reinterpret_cast<uint8_t *>(dyn_smem4));
    }
  } else {
    row_scales(a, scl);
    stage_f32(a, scl, xs);
  }
  const int xb = x8_bytes(n), tok = sum8_token(lane);
  for (int i = 0; i < a.rpw; i += 2) {
    const int r0 = (b * a.rpw + i) * MV_WARPS + warp, r1 = r0 + MV_WARPS;
    if (r0 >= rows) break;
    const bool has1 = i + 1 < a.rpw && r1 < rows;
    // a missing second row repeats the first (its sums dropped)
    const uint8_t *const rp[2] = {jb.m.d + (size_t)r0 * jb.m.nb1, jb.m.d + (size_t)(has1 ? r1 : r0) * jb.m.nb1};
    float acc[2][MB_NT];
    mb_zero(acc);
    if constexpr (Q8) {
      if (TA == TB || ta) dot_q8<TA, 2>(rp, xq, xb, n, nt, acc, lane);
      else dot_q8<TB, 2>(rp, xq, xb, n, nt, acc, lane);
    } else {
      if (TA == TB || ta) dot_f<TA, 2>(rp, xs, n, nt, acc, lane);
      else dot_f<TB, 2>(rp, xs, n, nt, acc, lane);
    }
    const float v0 = warp_sum8(acc[0], lane), v1 = warp_sum8(acc[1], lane);
    if ((lane & 3) == 0 && tok < nt) {
      float *yt = jb.y + (size_t)tok * jb.ldy;
      const float o0 = jb.bias ? v0 + jb.bias[r0] : v0;
      if (jb.epi == EPI_ADD) yt[r0] += o0;
      else yt[r0] = o0;
      if (has1) {
        const float o1 = jb.bias ? v1 + jb.bias[r1] : v1;
        if (jb.epi == EPI_ADD) yt[r1] += o1;
        else yt[r1] = o1;
      }
    }
  }
}

// F32 rows few enough that a warp a row would leave most of the card idle (the router): a block
// takes SR rows and each of its warps a slice of n / MV_WARPS columns, reading the rows' and the
// tokens' elements of its slice straight from memory (the tokens RMS-normalised with the block's
// row scales); the warps' sums are added in warp order. Block 0 writes the normalised rows to h.
#define SR 2
__global__ void __launch_bounds__(MV_THREADS) k_mvb_f32cols(mvb_args a) {
  __shared__ float scl[MB_NT];
  __shared__ float part[MV_WARPS][SR][MB_NT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = a.n, nt = a.nt;
  const mv_job &jb = a.job[0];
  const int r0 = blockIdx.x * SR, rows = jb.m.ne1, w4 = n / 4 / MV_WARPS, c0 = warp * w4;
  // the block's weight slices toward L2 before the wait (weights never change)
  for (int r = 0; r < SR && r0 + r < rows; r++)
    for (int o = c0 * 16 + lane * 128; o < (c0 + w4) * 16; o += 32 * 128) prefetch_l2(jb.m.d + (size_t)(r0 + r) * jb.m.nb1 + o);
  cu_pdl_entry();
  row_scales(a, scl);
  float acc[SR][MB_NT];
#pragma unroll
  for (int r = 0; r < SR; r++)
#pragma unroll
    for (int t = 0; t < MB_NT; t++) acc[r][t] = 0.0f;
  const bool keep = a.h && blockIdx.x == 0;
  // FU columns a lane at once: every load of them issued before any sum (the stores to h would
  // otherwise keep the next column's loads behind this one's); the sums keep their order
  constexpr int FU = 2;
  for (int i0 = c0 + lane; i0 < c0 + w4; i0 += 32 * FU) {
    float4 w[FU][SR], xv[FU][MB_NT];
#pragma unroll
    for (int u = 0; u < FU; u++) {
      const int i4 = i0 + 32 * u;
      if (i4 >= c0 + w4) break;
#pragma unroll
      for (int r = 0; r < SR; r++)
        w[u][r] = r0 + r < rows ? __ldg(reinterpret_cast<const float4 *>(jb.m.d + (size_t)(r0 + r) * jb.m.nb1) + i4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int t = 0; t < MB_NT; t++)
        if (t < nt) xv[u][t] = x_at(a, scl, t, i4);
    }
#pragma unroll
    for (int u = 0; u < FU; u++) {
      const int i4 = i0 + 32 * u;
      if (i4 >= c0 + w4) break;
#pragma unroll
      for (int t = 0; t < MB_NT; t++) {
        if (t >= nt) break;
        if (keep) reinterpret_cast<float4 *>(a.h + (size_t)t * a.ldh)[i4] = xv[u][t];
#pragma unroll
        for (int r = 0; r < SR; r++) acc[r][t] += w[u][r].x * xv[u][t].x + w[u][r].y * xv[u][t].y + w[u][r].z * xv[u][t].z + w[u][r].w * xv[u][t].w;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < SR; r++)
#pragma unroll
    for (int t = 0; t < MB_NT; t++) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) part[warp][r][t] = v;
    }
  __syncthreads();
  if ((int)threadIdx.x < SR * nt) {
    const int r = threadIdx.x / nt, t = threadIdx.x - r * nt;
    if (r0 + r < rows) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < MV_WARPS; w++) v += part[w][r][t];
      if (jb.bias) v += jb.bias[r0 + r];
      float *yt = jb.y + (size_t)t * jb.ldy + r0 + r;
      if (jb.epi == EPI_ADD) *yt += v;
      else *yt = v;
    }
  }
}

// Each token's picks from its router logits (one warp a token, route.cuh's arithmetic: the same
// as the router kernel's and the one-token kernels'), sel / selw rows of k.
template <int XJ>
__global__ void __launch_bounds__(32) k_route_pick(const float *logits, int X, int K, int norm_topk, float w_scale, int32_t *sel, float *selw) {
  cu_pdl_entry();
  __shared__ int ssel[ROUTER_MAX_K];
  __shared__ float sw[ROUTER_MAX_K];
  const int t = blockIdx.x;
  route_core<XJ, true>(logits + (size_t)t * X, X, K, norm_topk, w_scale, ssel, sw);
  __syncwarp();
  for (int j = threadIdx.x; j < K; j += 32) {
    sel[(size_t)t * K + j] = ssel[j];
    selw[(size_t)t * K + j] = sw[j];
  }
}

// ---- host side ----

// bl_cuda_options.mv_batch 0 sends decode batches' dense products back to cu_matvec.
static bool mvb_enabled() { return cu_opt->mv_batch != 0; }

typedef void (*mvb_kernel)(mvb_args);

// The kernels of types A, B with f32 activations (rows.cuh's pair_kernel_f).
struct mvb_f32 {
  template <int A, int B>
  static mvb_kernel of() { return k_mvb<A, B, false>; }
};

// The kernel for types (ta, tb) (ta == tb: one type), int8 or f32 activations, or null. Types
// whose rows take int8 activations: those the one-token kernels give them (fastdec.cu, d8_type),
// so a batch computes a token as its one-token step does; Q8_0 rows keep f32 activations there
// (the int8 kernel of Q8_0 stays built for a later switch of both).
static mvb_kernel mvb_kernel_of(int ta, int tb, bool q8) {
  if (q8) {
    if (ta == tb) return ta == T_Q4_K ? k_mvb<T_Q4_K, T_Q4_K, true> : ta == T_Q6_K ? k_mvb<T_Q6_K, T_Q6_K, true> : ta == T_Q8_0 ? k_mvb<T_Q8_0, T_Q8_0, true> : nullptr;
    return type_pair(ta, tb, T_Q4_K, T_Q6_K) ? k_mvb<T_Q4_K, T_Q6_K, true> : nullptr;
  }
  return pair_kernel_f<mvb_f32>(ta, tb);
}

// Blocks of a kernel resident on an SM at once (a host computation, no device call).
static int mvb_resident(mvb_kernel k, size_t smem) {
  int per = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, MV_THREADS, smem) != cudaSuccess || per < 1) {
    (void)cudaGetLastError();
    per = 1;
  }
  return per;
}

// The kernels' arguments for the rows of a (ntok of them; h: where block 0 keeps them normalised).
static mvb_args mvb_params(const mv_args &a, int ntok, float *h, int ldh) {
  mvb_args p;
  memset(&p, 0, sizeof p);
  p.njobs = a.njobs;
  p.x = a.x;
  p.ldx = a.ldx;
  p.n = a.n;
  p.nt = ntok;
  p.norm = a.norm;
  p.normw = a.normw;
  p.eps = a.eps;
  p.h = h;
  p.ldh = ldh;
  for (int j = 0; j < a.njobs; j++) p.job[j] = a.job[j];
  return p;
}

// Whether an F32 job's shape takes the router's kernel by column slices (k_mvb_f32cols).
static bool cols_fit(const mv_args &a) { return a.n % (4 * MV_WARPS) == 0 && a.job[0].m.ne1 <= 1024 && a.job[0].m.nb1 % 16 == 0; }

// How cu_mv_batch takes a's rows: 0 not at all (cu_matvec), 1 the router's column kernel, 2 the
// kernel *k (on int8 rows: *q8) with *smem bytes of shared memory.
static int mvb_route(const mv_args &a, int ntok, float *h, int ldh, int smem_limit, mvb_kernel *k, bool *q8, size_t *smem) {
  if (!(cu_fast & FAST_MV) || !mvb_enabled() || ntok < 2 || ntok > MV_MAX_NT || a.njobs < 1 || a.njobs > 3) return 0;
  if (a.n <= 0 || a.n % 4 || a.ldx % 4 || (h && ldh % 4)) return 0;
  int ta = a.job[0].m.type, tb = ta;
  for (int j = 0; j < a.njobs; j++) {
    const dmat &m = a.job[j].m;
    if (m.type != ta) {
      if (tb != ta && m.type != tb) return 0; // three types: the general kernels
      tb = m.type;
    }
    cu_type_geom g;
    if (m.ne0 != a.n || !cu_type_geom_of(m.type, &g) || a.n % g.be || m.ne1 <= 0) return 0;
  }
  if (a.njobs == 1 && ta == T_F32 && cols_fit(a)) return 1;
  *q8 = a.q8 && !h && (cu_fast & FAST_Q8) && d8_type(ta) && d8_type(tb) && a.n % 32 == 0 && mvb_kernel_of(ta, tb, true);
  *k = mvb_kernel_of(ta, tb, *q8);
  if (!*k) return 0;
  *smem = *q8 ? (size_t)ntok * x8_bytes(a.n) : (size_t)ntok * a.n * sizeof(float);
  if (*smem > (size_t)smem_limit) return 0;
  return 2;
}

bool cu_mv_batch_x8_fits(const mv_args &a, int ntok, int smem_limit) {
  mvb_kernel k = nullptr;
  bool q8 = false;
  size_t smem = 0;
  if (mvb_route(a, ntok, nullptr, 0, smem_limit, &k, &q8, &smem) != 2 || !q8 || !a.xq || !(cu_fast & FAST_X8) || a.norm) return false;
  // and cu_x8_rows' shapes (the rows it would quantize itself)
  return a.x && a.n % 32 == 0 && a.ldx >= a.n && a.ldx % 4 == 0 && (size_t)ntok * x8_bytes(a.n) <= a.xq_cap && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.xq) % 16 == 0;
}

// Whether a.pre holds exactly the rows cu_x8_rows would quantize here (unnormalised, no combine pending).
static bool pre_matches(const mv_args &a, int ntok) {
  const x8_pre *r = a.pre;
  return r && r->nt == ntok && r->x == a.x && r->ldx == a.ldx && r->n == a.n && r->xq == a.xq && !a.norm && (!a.comb || a.comb->ntok == 0) &&
         (cu_fast & FAST_ATTX8);
}

int64_t cu_mv_batch(cudaStream_t st, const mv_args &a, int ntok, float *h, int ldh, int smem_limit, bool *done) {
  *done = false;
  mvb_kernel k = nullptr;
  bool q8 = false;
  size_t smem = 0;
  const int route = mvb_route(a, ntok, h, ldh, smem_limit, &k, &q8, &smem);
  if (!route) return BL_OK;
  mvb_args p = mvb_params(a, ntok, h, ldh);
  if (route == 1) {
    // the router: a block a pair of rows, its warps splitting the columns
    CU_OK(cu_combine_flush(st, a.comb));
    CU_LAUNCH("decode-batch product (f32 rows by columns)", k_mvb_f32cols, dim3((a.job[0].m.ne1 + SR - 1) / SR), dim3(MV_THREADS), 0, st, p);
    *done = true;
    return BL_OK;
  }
  if (q8 && a.xq && (cu_fast & FAST_X8)) {
    // the rows normalised and quantized once (x8rows.cu), not by every block; a pending combine
    // of the experts into x added by the same launch where it takes the shape; none of it where
    // the kernel before already wrote exactly these rows' slots (FAST_ATTX8: the attention)
    bool pre = false;
    if (pre_matches(a, ntok)) {
      pre = true;
      a.pre->used++;
      a.pre->nt = 0; // for this launch alone
    }
    if (!pre && a.norm && a.comb) CU_OK(cu_x8_rows_comb(st, a.x, a.ldx, a.n, ntok, a.normw, a.eps, a.xq, a.xq_cap, a.comb, &pre));
    if (!pre) {
      CU_OK(cu_combine_flush(st, a.comb));
      CU_OK(cu_x8_rows(st, a.x, a.ldx, a.n, ntok, a.norm, a.normw, a.eps, a.xq, a.xq_cap, &pre));
    }
    if (pre) p.xq = a.xq;
  }
  CU_OK(cu_combine_flush(st, a.comb)); // not fused above: x complete before the product reads it
  int rows = 0;
  for (int j = 0; j < a.njobs; j++) rows += a.job[j].m.ne1;
  // rows a warp: enough that the grid is about the blocks resident at once (each stages the rows once)
  const int resident = mvb_resident(k, smem) * (cu_sms > 0 ? cu_sms : 1);
  p.rpw = (rows + MV_WARPS * resident - 1) / (MV_WARPS * resident);
  if (p.rpw < 1) p.rpw = 1;
  int grid = 0;
  for (int j = 0; j < p.njobs; j++) {
    p.job[j].blocks = (p.job[j].m.ne1 + MV_WARPS * p.rpw - 1) / (MV_WARPS * p.rpw);
    grid += p.job[j].blocks;
  }
  CU_LAUNCH("decode-batch product", k, dim3(grid), dim3(MV_THREADS), smem, st, p);
  *done = true;
  return BL_OK;
}

bool cu_route_pick_fits(int n_expert, int k) { return mvb_enabled() && n_expert >= 1 && n_expert <= 256 && k >= 1 && k <= 32 && k <= n_expert; }

int64_t cu_route_pick(cudaStream_t st, const float *logits, int ntok, int n_expert, int k, int norm_topk, float w_scale, int32_t *sel, float *selw) {
  if (!cu_route_pick_fits(n_expert, k)) return cu_fail(BL_E_UNSUPPORTED, "router: %d of %d experts has no pick kernel", k, n_expert);
  if (ntok <= 0) return BL_OK;
  if (n_expert <= 128) CU_LAUNCH("router picks", k_route_pick<4>, dim3(ntok), dim3(32), 0, st, logits, n_expert, k, norm_topk, w_scale, sel, selw);
  else CU_LAUNCH("router picks", k_route_pick<8>, dim3(ntok), dim3(32), 0, st, logits, n_expert, k, norm_topk, w_scale, sel, selw);
  return BL_OK;
}

int64_t cu_mv_batch_init(int smem_optin) {
  const char *w = "configuring the decode-batch products";
#define S(T) CU_OK(cu_allow_smem(k_mvb<T, T, false>, smem_optin, w));
  CU_TYPE_CASES(S)
#undef S
  CU_OK(cu_allow_smem(k_mvb<T_Q4_K, T_Q6_K, false>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mvb<T_Q5_K, T_Q6_K, false>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mvb<T_Q4_K, T_Q5_K, false>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mvb<T_Q4_K, T_Q4_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mvb<T_Q6_K, T_Q6_K, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mvb<T_Q8_0, T_Q8_0, true>, smem_optin, w));
  CU_OK(cu_allow_smem(k_mvb<T_Q4_K, T_Q6_K, true>, smem_optin, w));
  CU_OK(cu_kernel_prefs(k_mvb_f32cols, w));
  CU_OK(cu_kernel_prefs(k_route_pick<4>, w));
  return cu_kernel_prefs(k_route_pick<8>, w);
}
