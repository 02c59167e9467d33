// bloomery CUDA library: the router logits of the fused attention output + router (froute.cu) from
// its blocks' partial logits - part[e * ldp + b], block b's sum over its rows of W_r[e][row] *
// (w[row] * x[row]) - summed in one fixed order and scaled by the norm of the new x. Its last
// block uses them, or (FAST_PICKX) every block of the one-token gate/up does, so the picks cost
// no tail of their own; both give the same logits bit for bit.
#pragma once
#include "common.cuh"
#include "route.cuh"

// The calling thread's share of an expert's partial sums (blockDim.x / logit_span(X) threads an
// expert; all loads in flight). Every thread calls it; the
// caller stores the result at sred[threadIdx.x] for fo_logits.
__device__ __forceinline__ float fo_sum_part(const float *part, int ldp, int nb, int X) {
  const int xp = logit_span(X);
  const int tid = threadIdx.x, L = (int)blockDim.x / xp, e = tid % xp, sl = tid / xp, nq = ldp / 4;
  float acc = 0.0f;
  if (e < X) {
    const float4 *pc = reinterpret_cast<const float4 *>(part + (size_t)e * ldp);
    for (int q0 = sl; q0 < nq; q0 += 16 * L) {
      float4 v[16];
#pragma unroll
      for (int k = 0; k < 16; k++) {
        const int q = q0 + k * L;
        v[k] = q < nq ? __ldcg(pc + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int k = 0; k < 16; k++) {
        const int b = 4 * (q0 + k * L);
        if (b < nb) acc += v[k].x;
        if (b + 1 < nb) acc += v[k].y;
        if (b + 2 < nb) acc += v[k].z;
        if (b + 3 < nb) acc += v[k].w;
      }
    }
  }
  return acc;
}

// The X logits into slg (shared memory) from the threads' shares in sred (visible: after a
// barrier), scaled by sc (1/rms of the new x); written to out too when set. Ends with a barrier.
__device__ __forceinline__ void fo_logits(const float *sred, int X, float sc, float *slg, float *out) {
  const int xp = logit_span(X);
  const int tid = threadIdx.x, L = (int)blockDim.x / xp;
  if (tid < X) {
    float t = 0.0f;
    for (int q = 0; q < L; q++) t += sred[q * xp + tid];
    slg[tid] = t * sc;
    if (out) out[tid] = slg[tid];
  }
  __syncthreads();
}
