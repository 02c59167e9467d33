// bloomery CUDA library: what every one-token attention kernel (attn.cu, attn2.cu) and the cache's
// L2 prefetch (l2pf.cuh) share of gpt-oss's attention: the first position a sliding window lets a
// query see, and an output element's division with a sink logit in the denominator.
#pragma once
#include <math.h>

// The first position a query at position n - 1 sees (a sliding window of w positions; 0: every one).
__host__ __device__ __forceinline__ int attn_first(int n, int w) { return w > 0 && n > w ? n - w : 0; }

// An output element from its weighted sum A, softmax sum L and running maximum M with a sink's logit
// in the denominator (gpt-oss: the sink takes a share of the attention and gives no value), stable
// whichever of M and the sink is larger.
__device__ __forceinline__ float with_sink(float A, float L, float M, float sink) {
  const float M2 = fmaxf(M, sink), f = L > 0.0f ? expf(M - M2) : 0.0f;
  return A * f / (L * f + expf(sink - M2));
}
