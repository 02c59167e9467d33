// bloomery CUDA library: row RMSNorm (with an optional gather of rows, for the output head) and
// top-k selection over logits on the card (chunks of the row reduce to k candidates each, then
// one block merges them), so a step can hand the host k candidates instead of the vocabulary.
#include <float.h>

#include "common.cuh"
#include "internal.h"

__global__ void k_rmsnorm(const float *x, int ldx, const int32_t *rows, int n, const float *w, float eps, float *y, int ldy) {
  BL_TR_SCOPE(8);
  cu_pdl_entry();
  __shared__ float red[32];
  const int t = blockIdx.x;
  const float *xr = x + (size_t)(rows ? rows[t] : t) * ldx;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  const float sc = 1.0f / sqrtf(ss / (float)n + eps);
  float *yr = y + (size_t)t * ldy;
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * sc * (w ? w[i] : 1.0f);
}

int64_t cu_rmsnorm(cudaStream_t st, const float *x, int ldx, const int32_t *rows, int n, const float *w, float eps,
                   float *y, int ldy, int ntok) {
  if (ntok <= 0) return BL_OK;
  CU_LAUNCH("rmsnorm", k_rmsnorm, dim3(ntok), dim3(256), 0, st, x, ldx, rows, n, w, eps, y, ldy);
  return BL_OK;
}

// Better of two candidates: larger value, then smaller index; a NaN before any number, so a row
// holding one hands it to the host (whose sampler refuses the row, as it does a whole row with one).
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  if (v != v) return bv == bv || i < bi;
  return v > bv || (v == bv && i < bi);
}

// The block's best (value, index) among n values of v (indices idx0 + i), marking none.
__device__ void block_best(const float *v, int n, int idx0, const uint8_t *taken, float &bv, int &bi, float *rv, int *ri) {
  float mv = -INFINITY;
  int mi = 0x7fffffff;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (!taken[i] && better(v[i], idx0 + i, mv, mi)) {
      mv = v[i];
      mi = idx0 + i;
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, mv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, mi, o);
    if (better(ov, oi, mv, mi)) {
      mv = ov;
      mi = oi;
    }
  }
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) {
    rv[w] = mv;
    ri[w] = mi;
  }
  __syncthreads();
  bv = -INFINITY;
  bi = 0x7fffffff;
  for (int j = 0; j < nw; j++)
    if (better(rv[j], ri[j], bv, bi)) {
      bv = rv[j];
      bi = ri[j];
    }
}

// grid: x over chunks of a row, y over rows; smem: chunk values and taken flags.
__global__ void k_topk_chunk(const float *x, int ldx, int n, int chunk, int k, float *cv, int32_t *ci) {
  BL_TR_SCOPE(9);
  cu_pdl_entry();
  extern __shared__ float tsm[];
  __shared__ float rv[32];
  __shared__ int ri[32];
  const int c = blockIdx.x, row = blockIdx.y;
  const int i0 = c * chunk, m = min(chunk, n - i0);
  float *vals = tsm;
  uint8_t *taken = reinterpret_cast<uint8_t *>(tsm + chunk);
  for (int i = threadIdx.x; i < chunk; i += blockDim.x) {
    vals[i] = i < m ? x[(size_t)row * ldx + i0 + i] : -INFINITY;
    taken[i] = i < m ? 0 : 1;
  }
  __syncthreads();
  float *ov = cv + ((size_t)row * gridDim.x + c) * k;
  int32_t *oi = ci + ((size_t)row * gridDim.x + c) * k;
  for (int r = 0; r < k; r++) {
    float bv;
    int bi;
    block_best(vals, m > 0 ? chunk : 0, i0, taken, bv, bi, rv, ri);
    if (threadIdx.x == 0) {
      ov[r] = bv;
      oi[r] = bi;
      if (bi != 0x7fffffff) taken[bi - i0] = 1;
    }
    __syncthreads();
  }
}

__global__ void k_topk_merge(const float *cv, const int32_t *ci, int per_row, int k, float *out_v, int32_t *out_i) {
  BL_TR_SCOPE(10);
  cu_pdl_entry();
  extern __shared__ float msm[];
  __shared__ float rv[32];
  __shared__ int ri[32], rp[32];
  const int row = blockIdx.x;
  float *vals = msm;
  int *ids = reinterpret_cast<int *>(msm + per_row);
  uint8_t *taken = reinterpret_cast<uint8_t *>(ids + per_row);
  for (int i = threadIdx.x; i < per_row; i += blockDim.x) {
    vals[i] = cv[(size_t)row * per_row + i];
    ids[i] = ci[(size_t)row * per_row + i];
    taken[i] = ids[i] == 0x7fffffff;
  }
  __syncthreads();
  for (int r = 0; r < k; r++) {
    // best by (value desc, id asc) over the candidates: reduce on candidate ids, not positions
    float mv = -INFINITY;
    int mi = 0x7fffffff, mp = -1;
    for (int i = threadIdx.x; i < per_row; i += blockDim.x)
      if (!taken[i] && better(vals[i], ids[i], mv, mi)) {
        mv = vals[i];
        mi = ids[i];
        mp = i;
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, mv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, mi, o), op = __shfl_xor_sync(0xffffffffu, mp, o);
      if (better(ov, oi, mv, mi)) {
        mv = ov;
        mi = oi;
        mp = op;
      }
    }
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
      rv[w] = mv;
      ri[w] = mi;
      rp[w] = mp;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float bv = -INFINITY;
      int bi = 0x7fffffff, bp = -1;
      for (int j = 0; j < nw; j++)
        if (better(rv[j], ri[j], bv, bi)) {
          bv = rv[j];
          bi = ri[j];
          bp = rp[j];
        }
      out_v[(size_t)row * k + r] = bv;
      out_i[(size_t)row * k + r] = bi == 0x7fffffff ? -1 : bi;
      if (bp >= 0) taken[bp] = 1;
    }
    __syncthreads();
  }
}

int64_t cu_topk(cudaStream_t st, const float *x, int ldx, int n, int n_rows, int k, float *cand_v, int32_t *cand_i,
                float *out_v, int32_t *out_i) {
  if (k < 1 || k > TOPK_MAX) return cu_fail(BL_E_INVAL, "top-k: k = %d (1..%d)", k, TOPK_MAX);
  if (n_rows <= 0) return BL_OK;
  const int chunk = (n + TOPK_CHUNKS - 1) / TOPK_CHUNKS;
  const size_t s1 = (size_t)chunk * (sizeof(float) + 1);
  if (s1 > 48 * 1024) return cu_fail(BL_E_UNSUPPORTED, "top-k: rows of %d values", n);
  CU_LAUNCH("top-k (chunks)", k_topk_chunk, dim3(TOPK_CHUNKS, n_rows), dim3(256), s1, st, x, ldx, n, chunk, k, cand_v, cand_i);
  const int per_row = TOPK_CHUNKS * k;
  CU_LAUNCH("top-k (merge)", k_topk_merge, dim3(n_rows), dim3(256), (size_t)per_row * (sizeof(float) + sizeof(int) + 1), st, cand_v,
            cand_i, per_row, k, out_v, out_i);
  return BL_OK;
}

// Whether this build has code the device can run (SASS for its architecture, or PTX it can JIT).
bool cu_has_code(int dev) {
  if (cudaSetDevice(dev) != cudaSuccess) return false;
  cudaFuncAttributes fa;
  const cudaError_t e = cudaFuncGetAttributes(&fa, k_rmsnorm);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

int64_t cu_misc_init() {
  const char *w = "configuring kernels";
  CU_OK(cu_kernel_prefs(k_rmsnorm, w));
  CU_OK(cu_kernel_prefs(k_topk_chunk, w));
  return cu_kernel_prefs(k_topk_merge, w);
}
