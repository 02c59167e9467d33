// bloomery CUDA library: a decode batch's expert picks and their grouping by expert, made by one
// block (moe_batch.cu's k_mb_pick).
#pragma once
#include "common.cuh"
#include "dotbatch.cuh"
#include "internal.h"
#include "route.cuh"

// Each token's picks from its router logits ([t][X], X apart; a warp a token, route.cuh's
// arithmetic, as k_route_pick's), then the pairs grouped by expert as k_moe_sort groups them (one
// tile an expert in ascending order, pairs {first, count <= tokens}), positions inside an expert
// in pair order. Every thread of the block (MV_THREADS) calls it; the logits are read by __ldcg.
template <int XJ>
__device__ __forceinline__ void mb_pick_block(const float *logits, int ntok, int X, int K, int norm_topk, float w_scale, int32_t *sel, float *selw,
                                              int32_t *pair_tok, int32_t *pair_of, int4 *tiles, int32_t *n_tiles, int32_t *tile_stat) {
  __shared__ int ssel[MB_NT * ROUTER_MAX_K];
  __shared__ float sw[MB_NT * ROUTER_MAX_K];
  __shared__ int cnt[32 * XJ], start[32 * XJ];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, np = ntok * K;
  for (int e = threadIdx.x; e < 32 * XJ; e += blockDim.x) cnt[e] = 0;
  for (int t = warp; t < ntok; t += blockDim.x >> 5)
    route_core<XJ, true>(logits + (size_t)t * X, X, K, norm_topk, w_scale, ssel + t * K, sw + t * K);
  __syncthreads();
  for (int i = threadIdx.x; i < np; i += blockDim.x) {
    int e = ssel[i];
    e = e < 0 ? 0 : e >= X ? X - 1 : e; // inside the expert stack whatever the logits held
    ssel[i] = e;
    sel[i] = e;
    selw[i] = sw[i];
    atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  if (warp == 0) {
    // experts lane * XJ .. + XJ - 1 a lane: exclusive scans of pairs and of used experts
    int c[XJ], ps = 0, ts = 0;
#pragma unroll
    for (int j = 0; j < XJ; j++) {
      c[j] = cnt[lane * XJ + j];
      ps += c[j];
      ts += c[j] > 0 ? 1 : 0;
    }
    int pi = ps, ti = ts;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int pv = __shfl_up_sync(0xffffffffu, pi, o), tv = __shfl_up_sync(0xffffffffu, ti, o);
      if (lane >= o) {
        pi += pv;
        ti += tv;
      }
    }
    int p = pi - ps, tt = ti - ts;
#pragma unroll
    for (int j = 0; j < XJ; j++) {
      const int e = lane * XJ + j;
      start[e] = p;
      if (c[j] > 0) tiles[tt++] = make_int4(e, p, c[j], 0);
      p += c[j];
    }
    if (lane == 31) {
      *n_tiles = ti;
      if (tile_stat) *tile_stat = ti; // the layer's experts this step (the host's choice of kernels, forward.cu)
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < np; i += blockDim.x) {
    const int e = ssel[i];
    int rank = 0;
    for (int j = 0; j < i; j++) rank += ssel[j] == e ? 1 : 0;
    const int p = start[e] + rank;
    pair_tok[p] = i / K;
    pair_of[i] = p;
  }
}
