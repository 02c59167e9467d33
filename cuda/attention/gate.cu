// bloomery CUDA library: the gates around an attention and a shared expert (Qwen3-Next, Qwen3.5 / 3.6;
// ffi/cpu/attn.c and the CPU's FFN op are the reference): q's rows split into the queries and their
// output gates, the attention's output times sigmoid(gate), and a shared expert's sum added under its
// scalar gate sigmoid(h . w).
#include "common.cuh"
#include "internal.h"

namespace {

__global__ void __launch_bounds__(256) k_gate_split(const float *qg, float *q, float *g, int nh, int hd) {
  BL_TR_SCOPE(30);
  cu_pdl_entry();
  const int t = blockIdx.x, n = nh * hd;
  const float *src = qg + (size_t)t * 2 * n;
  for (int e = threadIdx.x; e < n; e += blockDim.x) {
    const int h = e / hd, i = e - h * hd;
    q[(size_t)t * n + e] = src[(size_t)h * 2 * hd + i];
    g[(size_t)t * n + e] = src[(size_t)h * 2 * hd + hd + i];
  }
}

__global__ void __launch_bounds__(256) k_gate_apply(float *att, const float *g, int n) {
  BL_TR_SCOPE(31);
  cu_pdl_entry();
  const size_t base = (size_t)blockIdx.x * n;
  for (int e = threadIdx.x; e < n; e += blockDim.x) att[base + e] *= 1.0f / (1.0f + expf(-g[base + e]));
}

// A block a token: h = rmsnorm(x) * w (as k_rmsnorm) and gw = sigmoid(h . g).
__global__ void __launch_bounds__(256) k_rmsnorm_gate(const float *x, const float *w, float eps, const float *g, float *h, float *gw, int E) {
  BL_TR_SCOPE(32);
  cu_pdl_entry();
  __shared__ float red[32];
  const size_t base = (size_t)blockIdx.x * E;
  float ss = 0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) ss += x[base + e] * x[base + e];
  ss = block_sum(ss, red);
  const float sc = 1.0f / sqrtf(ss / (float)E + eps);
  float d = 0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float v = x[base + e] * sc * (w ? w[e] : 1.0f);
    h[base + e] = v;
    d += v * g[e];
  }
  d = block_sum(d, red);
  if (threadIdx.x == 0) gw[blockIdx.x] = 1.0f / (1.0f + expf(-d));
}

__global__ void __launch_bounds__(256) k_gated_add(const float *gw, const float *y, float *x, int E) {
  BL_TR_SCOPE(34);
  cu_pdl_entry();
  const size_t base = (size_t)blockIdx.x * E;
  const float s = gw[blockIdx.x];
  for (int e = threadIdx.x; e < E; e += blockDim.x) x[base + e] += s * y[base + e];
}

} // namespace

int64_t cu_attn_gate_split(cudaStream_t st, const float *qg, float *q, float *g, int nh, int hd, int ntok) {
  if (ntok <= 0) return BL_OK;
  CU_LAUNCH("the attention's gate split", k_gate_split, dim3((unsigned)ntok), dim3(256), 0, st, qg, q, g, nh, hd);
  return BL_OK;
}

int64_t cu_attn_gate_apply(cudaStream_t st, float *att, const float *g, int n, int ntok) {
  if (ntok <= 0) return BL_OK;
  CU_LAUNCH("the attention's output gate", k_gate_apply, dim3((unsigned)ntok), dim3(256), 0, st, att, g, n);
  return BL_OK;
}

int64_t cu_rmsnorm_gate(cudaStream_t st, const float *x, const float *w, float eps, const float *g, float *h, float *gw, int E, int ntok) {
  if (ntok <= 0) return BL_OK;
  CU_LAUNCH("the shared expert's norm and gate", k_rmsnorm_gate, dim3((unsigned)ntok), dim3(256), 0, st, x, w, eps, g, h, gw, E);
  return BL_OK;
}

int64_t cu_gated_add(cudaStream_t st, const float *gw, const float *y, float *x, int E, int ntok) {
  if (ntok <= 0) return BL_OK;
  CU_LAUNCH("the shared expert's gate", k_gated_add, dim3((unsigned)ntok), dim3(256), 0, st, gw, y, x, E);
  return BL_OK;
}
