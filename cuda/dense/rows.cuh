// bloomery CUDA library: the pieces every decode product shares - staging activation rows in
// shared memory (optionally RMS-normalised) and one weight row's dot products with them.
#pragma once
#include "common.cuh"
#include "quants.cuh"

// The row's dot products with NT staged activation rows (xs: NT rows of n floats).
template <int T, int NT>
__device__ __forceinline__ void mv_row(const uint8_t *rp, const float *xs, int n, float (&acc)[NT], int lane) {
  using Q = qt<T>;
  const int nunits = (n / Q::BE) * Q::UPB;
#pragma unroll 2
  for (int k = lane; k < nunits; k += 32) {
    const int blk = k / Q::UPB, u = k - blk * Q::UPB;
    const float *xb = xs + blk * Q::BE;
    Q::unit(rp + (size_t)blk * Q::BB, u, [&](int pos, float w0, float w1, float w2, float w3) {
#pragma unroll
      for (int t = 0; t < NT; t++) {
        const float4 xv = *reinterpret_cast<const float4 *>(xb + t * n + pos);
        acc[t] += w0 * xv.x + w1 * xv.y + w2 * xv.z + w3 * xv.w;
      }
    });
  }
}

// Stage nt rows of x (length n, stride ldx) into xs, each scaled by 1/rms * w when norm is set.
__device__ __forceinline__ void stage_rows(float *xs, const float *x, int ldx, int n, int nt, int norm, const float *w, float eps, float *red) {
  const int n4 = n >> 2;
  for (int t = 0; t < nt; t++)
    for (int i = threadIdx.x; i < n4; i += blockDim.x)
      reinterpret_cast<float4 *>(xs + t * n)[i] = reinterpret_cast<const float4 *>(x + (size_t)t * ldx)[i];
  __syncthreads(); // the norm below reads elements other threads staged
  if (!norm) return;
  for (int t = 0; t < nt; t++) {
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xs[t * n + i] * xs[t * n + i];
    ss = block_sum(ss, red);
    const float sc = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) xs[t * n + i] = xs[t * n + i] * sc * (w ? w[i] : 1.0f);
  }
  __syncthreads();
}


// Two rows of one type (gate and up of an expert) against one staged row, their units loaded
// together so both rows' reads are in flight at once.
template <int T>
__device__ __forceinline__ void mv_row2(const uint8_t *ra, const uint8_t *rb, const float *xs, int n, float &sa, float &sb, int lane) {
  using Q = qt<T>;
  const int nunits = (n / Q::BE) * Q::UPB;
#pragma unroll 2
  for (int k = lane; k < nunits; k += 32) {
    const int blk = k / Q::UPB, u = k - blk * Q::UPB;
    const float *xb = xs + blk * Q::BE;
    Q::unit(ra + (size_t)blk * Q::BB, u, [&](int pos, float w0, float w1, float w2, float w3) {
      const float4 xv = *reinterpret_cast<const float4 *>(xb + pos);
      sa += w0 * xv.x + w1 * xv.y + w2 * xv.z + w3 * xv.w;
    });
    Q::unit(rb + (size_t)blk * Q::BB, u, [&](int pos, float w0, float w1, float w2, float w3) {
      const float4 xv = *reinterpret_cast<const float4 *>(xb + pos);
      sb += w0 * xv.x + w1 * xv.y + w2 * xv.z + w3 * xv.w;
    });
  }
}

// Whether types (a, b) are the pair (x, y) in either order.
__host__ __device__ constexpr bool type_pair(int a, int b, int x, int y) { return (a == x && b == y) || (a == y && b == x); }

// A decode product's kernel with f32 activations for weight types (ta, tb): one type (ta == tb,
// any of CU_TYPE_CASES) or one of the pairs a launch takes (Q4_K/Q6_K, Q5_K/Q6_K, Q4_K/Q5_K);
// null otherwise. K::of<A, B>() names the kernel of types A and B.
template <class K>
static inline auto pair_kernel_f(int ta, int tb) -> decltype(K::template of<T_F32, T_F32>()) {
  if (ta == tb) {
    switch (ta) {
#define PK_CASE(T) \
  case T: return K::template of<T, T>();
      CU_TYPE_CASES(PK_CASE)
#undef PK_CASE
      default: return nullptr;
    }
  }
  if (type_pair(ta, tb, T_Q4_K, T_Q6_K)) return K::template of<T_Q4_K, T_Q6_K>();
  if (type_pair(ta, tb, T_Q5_K, T_Q6_K)) return K::template of<T_Q5_K, T_Q6_K>();
  if (type_pair(ta, tb, T_Q4_K, T_Q5_K)) return K::template of<T_Q4_K, T_Q5_K>();
  return nullptr;
}
