// bloomery CUDA library: the router logits of the fused attention output + router (froute.cu) from
// its blocks' partial logits - part[b * ldp + e], block b's sum over its rows of W_r[e][row] *
// (w[row] * x[row]) - summed in one fixed order and scaled by the norm of the new x; its last
// block uses them. With FAST_FOACC the blocks also add
// their partials into one 64-bit integer an expert (fo_acc_add), and the picker reads those
// (fo_acc_sum): integer sums are the same in any order, and X loads replace X x blocks.
#pragma once
#include "common.cuh"

// The X router logits' sums over the nb blocks' partials, part[b * ldp + e] (ldp a multiple of 4,
// part 16-byte aligned), in one fixed order: the block's threads form slices of ceil(X / 4) threads,
// a thread a float4 of 4 experts (a warp reads whole rows: one coalesced line a load), each slice
// over the blocks b = slice, slice + slices, ... ascending (16 loads in flight), then thread e < X
// adds the slices' sums in slice order. sbuf: 4 * blockDim.x floats of shared memory. Every thread
// calls it (it ends with a barrier); thread e < X gets expert e's sum, the others 0.
__device__ __forceinline__ float fo_sum_part(const float *part, int ldp, int nb, int X, float *sbuf) {
  const int tid = threadIdx.x, g4 = (X + 3) >> 2, ns = (int)blockDim.x / g4, s = tid / g4, c = tid - s * g4;
  if (s < ns) {
    const float4 *pc = reinterpret_cast<const float4 *>(part) + c;
    const size_t ld4 = (size_t)(ldp >> 2);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int b0 = s; b0 < nb; b0 += 16 * ns) {
      float4 v[16];
#pragma unroll
      for (int k = 0; k < 16; k++) {
        const int b = b0 + k * ns;
        v[k] = b < nb ? __ldcg(pc + (size_t)b * ld4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int k = 0; k < 16; k++)
        if (b0 + k * ns < nb) {
          acc.x += v[k].x;
          acc.y += v[k].y;
          acc.z += v[k].z;
          acc.w += v[k].w;
        }
    }
    reinterpret_cast<float4 *>(sbuf)[s * g4 + c] = acc;
  }
  __syncthreads();
  float t = 0.0f;
  if (tid < X)
    for (int q = 0; q < ns; q++) t += sbuf[q * 4 * g4 + tid];
  return t;
}

// The X logits into slg (shared memory) from thread e's sum t (fo_sum_part), scaled by sc (1/rms of
// the new x), plus the router's bias rb when set; written to out too when set. Ends with a barrier.
__device__ __forceinline__ void fo_logits(float t, int X, float sc, const float *rb, float *slg, float *out) {
  const int tid = threadIdx.x;
  if (tid < X) {
    slg[tid] = rb ? t * sc + __ldg(rb + tid) : t * sc;
    if (out) out[tid] = slg[tid];
  }
  __syncthreads();
}

// FAST_FOACC: a block's partial p of expert e added to e's accumulator in units of 2^-32 (exact
// integer sums: the total does not depend on the blocks' order), or, when |p| >= lim (FO_ACC_LIM at
// most) or p is not a number, the flag raised so that the picker sums the float partials instead.
__device__ __forceinline__ void fo_acc_add(unsigned long long *acc, int *ovf, int e, float p, float lim) {
  if (fabsf(p) < lim) atomicAdd(acc + (size_t)e * FO_ACC_STRIDE, (unsigned long long)__float2ll_rn(p * 4294967296.0f));
  else *ovf = 1;
}

// Thread e < X's sum from the accumulators (written by an earlier kernel, or by blocks that have
// arrived), the others 0; with the flag raised, fo_sum_part's sum of the float partials. Every
// thread calls it (the flag is the same for all: a barrier may follow).
__device__ __forceinline__ float fo_acc_sum(const unsigned long long *acc, const int *ovf, const float *part, int ldp, int nb, int X, float *sbuf) {
  const int tid = threadIdx.x;
  const unsigned long long v = tid < X ? __ldcg(acc + (size_t)tid * FO_ACC_STRIDE) : 0ull; // in flight with the flag
  if (__ldcg(ovf) != 0) return fo_sum_part(part, ldp, nb, X, sbuf);
  return __ll2float_rn((long long)v) * 2.3283064365386963e-10f; // 2^-32: exact
}

// The accumulators and flag back to zero for the next launch (after every reader has read them).
__device__ __forceinline__ void fo_acc_reset(unsigned long long *acc, int *ovf, int X) {
  for (int e = threadIdx.x; e < X; e += blockDim.x) acc[(size_t)e * FO_ACC_STRIDE] = 0ull;
  if (threadIdx.x == 0) *ovf = 0;
}
