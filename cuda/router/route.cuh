// bloomery CUDA library: one token's expert selection by one warp - softmax over the router
// logits, the k best (value, then lower id), weights exp(l - max) / sum (renormalised over the
// picks when asked, then scaled), picks sorted by expert id so a token's expert sum does not
// depend on pick order. Results in ssel / sw (shared memory, k entries); the same arithmetic for
// the router kernel of batches and the decode kernels that select for themselves.
#pragma once
#include <float.h>

#include "common.cuh"

// The picks' renormalisation (when asked), scaling and sort by expert id, by one warp (K <= 32;
// the sum in tree order): ssel / sw hold the K picks by rank and get them by id.
__device__ __forceinline__ void route_tail(int K, int norm_topk, float w_scale, int *ssel, float *sw) {
  const int lane = threadIdx.x & 31;
  const int e = lane < K ? ssel[lane] : 0x7fffffff;
  float w = lane < K ? sw[lane] : 0.0f;
  if (norm_topk) {
    float s = warp_sum(w);
    if (s < 6.103515625e-5f) s = 6.103515625e-5f;
    w /= s;
  }
  if (w_scale != 0.0f && w_scale != 1.0f) w *= w_scale;
  int rank = 0; // ids are distinct: the rank is the count of smaller ids
  for (int j = 0; j < K; j++) rank += __shfl_sync(0xffffffffu, e, j) < e ? 1 : 0;
  __syncwarp();
  if (lane < K) {
    ssel[rank] = e;
    sw[rank] = w;
  }
  __syncwarp();
}

// XJ logits a lane (X <= 32 * XJ); lg readable by __ldcg (written by an earlier kernel). WT: the
// renormalisation and the sort by id done by the warp (K <= 32; the sum in tree order), else by lane 0.
template <int XJ, bool WT = false>
__device__ __forceinline__ void route_core(const float *lg, int X, int K, int norm_topk, float w_scale, int *ssel, float *sw) {
  const int lane = threadIdx.x & 31;
  float v[XJ];
#pragma unroll
  for (int j = 0; j < XJ; j++) v[j] = lane + 32 * j < X ? __ldcg(lg + lane + 32 * j) : -INFINITY;
  float mx = -FLT_MAX;
#pragma unroll
  for (int j = 0; j < XJ; j++) mx = fmaxf(mx, v[j]);
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < XJ; j++)
    if (lane + 32 * j < X) sum += expf(v[j] - mx);
  sum = warp_sum(sum);
  for (int i = 0; i < K; i++) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < XJ; j++) {
      const int e = lane + 32 * j;
      if (e < X && (v[j] > bv || (v[j] == bv && e < bi))) {
        bv = v[j];
        bi = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
#pragma unroll
    for (int j = 0; j < XJ; j++)
      if (lane + 32 * j == bi) v[j] = -INFINITY; // taken (below every remaining logit)
    if (lane == 0) {
      ssel[i] = bi;
      sw[i] = expf(bv - mx) / sum;
    }
  }
  __syncwarp();
  if (WT && K <= 32) {
    route_tail(K, norm_topk, w_scale, ssel, sw);
    return;
  }
  if (lane == 0) {
    if (norm_topk) {
      float s = 0.0f;
      for (int i = 0; i < K; i++) s += sw[i];
      if (s < 6.103515625e-5f) s = 6.103515625e-5f;
      for (int i = 0; i < K; i++) sw[i] /= s;
    }
    if (w_scale != 0.0f && w_scale != 1.0f)
      for (int i = 0; i < K; i++) sw[i] *= w_scale;
    for (int i = 1; i < K; i++) // by expert id
      for (int q = i; q > 0 && ssel[q] < ssel[q - 1]; q--) {
        const int e = ssel[q];
        ssel[q] = ssel[q - 1];
        ssel[q - 1] = e;
        const float w = sw[q];
        sw[q] = sw[q - 1];
        sw[q - 1] = w;
      }
  }
  __syncwarp();
}

// X rounded up to a power of two, at least 8 (so that at most 32 threads of 256 take a logit): the
// threads of a block over X logits are blockDim.x / logit_span(X) a logit.
__device__ __forceinline__ int logit_span(int X) {
  int xp = 8;
  while (xp < X) xp <<= 1;
  return xp;
}

// A logit's sort key as one unsigned integer: greater for a greater value, then for a lower id (NaN
// counts as -inf, -0 as +0, so equal values rank by id as the float comparisons do).
__device__ __forceinline__ unsigned long long route_key(float v, int e) {
  if (v != v) v = -INFINITY;
  v += 0.0f; // -0 + 0 = +0
  unsigned u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((unsigned long long)u << 32) | (unsigned long long)(0xffffffffu - (unsigned)e);
}

// One token's selection by a whole block (every thread calls it; X <= 8 * blockDim.x / 8, at most
// 256; K <= 32) from X logits in shared memory: the same picks, weights and order as
// route_core<XJ, true> on the same logits. Each logit's rank (value descending, then lower id; NaN
// counts as -inf) is counted by L threads (adjacent lanes) a logit and the K best are placed by
// rank; the maximum is the first pick's logit (as route_core's, -FLT_MAX when none is a number), so
// warp 0 forms the sum as route_core does only then, with the picks' weights and route_tail, and no
// barrier waits on it before the ranks. smx: 1 float (the maximum); skey: 256 keys of scratch
// (shared memory, 8-byte aligned).
template <int XJ>
__device__ __forceinline__ void route_block(const float *lg, int X, int K, int norm_topk, float w_scale, int *ssel, float *sw, float *smx,
                                            unsigned long long *skey) {
  const int tid = threadIdx.x, lane = tid & 31;
  // the logits' sort keys (value, then lower id) for the ranks: one 64-bit comparison a pair
  for (int i = tid; i < X; i += blockDim.x) skey[i] = route_key(lg[i], i);
  if (tid < K) { // every slot defined even if the logits are not numbers
    ssel[tid] = tid;
    sw[tid] = 0.0f;
  }
  __syncthreads();
  // L = 2^lL adjacent threads a logit (L * logit_span(X) <= blockDim.x): shifts, no divisions
  const int q = (int)blockDim.x >> (__ffs(logit_span(X)) - 1), lL = q > 1 ? 31 - __clz(q) : 0, L = 1 << lL;
  const int e = tid >> lL, s = tid & (L - 1);
  int rank = 0;
  if (e < X) {
    const unsigned long long ke = skey[e];
    const int per = (X + L - 1) >> lL, j0 = s * per, j1 = j0 + per < X ? j0 + per : X;
#pragma unroll 8
    for (int j = j0; j < j1; j++) rank += skey[j] > ke ? 1 : 0;
  }
  for (int o = 1; o < L && o < 32; o <<= 1) rank += __shfl_xor_sync(0xffffffffu, rank, o);
  if (s == 0 && e < X && rank < K) {
    ssel[rank] = e;
    if (rank == 0) {
      const float v = lg[e];
      smx[0] = v != v ? -FLT_MAX : fmaxf(-FLT_MAX, v);
    }
  }
  __syncthreads();
  if (tid < 32) {
    const float mx = smx[0];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < XJ; j++)
      if (lane + 32 * j < X) sum += expf(lg[lane + 32 * j] - mx);
    sum = warp_sum(sum);
    if (lane < K) sw[lane] = expf(lg[ssel[lane]] - mx) / sum;
    __syncwarp();
    route_tail(K, norm_topk, w_scale, ssel, sw);
  }
  __syncthreads();
}
