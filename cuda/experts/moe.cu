// bloomery CUDA library: routed experts for prompt batches - the (token, pick) pairs grouped by
// expert on the card (counts, offsets, tiles of at most bn pairs for the grouped tensor-core
// products), and the weighted sum of each token's picks added to the residual in ascending
// expert order (a token's result does not depend on the rest of the batch).
#include "common.cuh"
#include "internal.h"

// One block: counting sort of the pairs by expert, then the tile list.
__global__ void __launch_bounds__(1024) k_moe_sort(sort_args a) {
  cu_pdl_entry();
  extern __shared__ int ssm[];
  int *cnt = ssm, *start = ssm + a.n_expert, *fill = ssm + 2 * a.n_expert;
  for (int e = threadIdx.x; e < a.n_expert; e += blockDim.x) {
    cnt[e] = 0;
    fill[e] = 0;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < a.n_pairs; i += blockDim.x)
    if (a.sel[i] >= 0) atomicAdd(&cnt[a.sel[i]], 1); // -1: a pick the CPU computes (cpu_share.cu)
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0, nt = 0;
    for (int e = 0; e < a.n_expert; e++) {
      start[e] = s;
      for (int o = 0; o < cnt[e]; o += a.bn) a.tiles[nt++] = make_int4(e, s + o, min(a.bn, cnt[e] - o), 0);
      s += cnt[e];
    }
    *a.n_tiles = nt;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < a.n_pairs; i += blockDim.x) {
    const int e = a.sel[i];
    if (e < 0) {
      a.pair_of[i] = -1;
      continue;
    }
    const int p = start[e] + atomicAdd(&fill[e], 1);
    a.pair_tok[p] = i / a.k;
    a.pair_of[i] = p;
  }
}

int64_t cu_moe_sort(cudaStream_t st, const sort_args &a) {
  CU_LAUNCH("grouping expert pairs", k_moe_sort, dim3(1), dim3(1024), (size_t)3 * a.n_expert * sizeof(int), st, a);
  return BL_OK;
}

// grid: (token, chunk of 256 columns); a token's picks summed in pick order (one fma a pick, as
// x8rows.cu's k_x8_comb sums them), their loads in flight together; a pair of -1 (the CPU's pick,
// cpu_share.cu) adds nothing.
#define COMBINE_MAX_K 16
__global__ void k_moe_combine(const float *ypair, int ldy, const int32_t *pair_of, const float *selw, int k, float *x, int ldx, int n) {
  cu_pdl_entry();
  const int t = blockIdx.x, d = blockIdx.y * blockDim.x + threadIdx.x;
  if (d >= n) return;
  float s = 0.0f;
  if (k <= COMBINE_MAX_K) {
    float y[COMBINE_MAX_K];
#pragma unroll
    for (int j = 0; j < COMBINE_MAX_K; j++)
      if (j < k) {
        const int p = pair_of[(size_t)t * k + j];
        y[j] = p >= 0 ? ypair[(size_t)p * ldy + d] : 0.0f;
      }
#pragma unroll
    for (int j = 0; j < COMBINE_MAX_K; j++)
      if (j < k && pair_of[(size_t)t * k + j] >= 0) s = __fmaf_rn(selw[(size_t)t * k + j], y[j], s);
  } else {
    for (int j = 0; j < k; j++) {
      const int p = pair_of[(size_t)t * k + j];
      if (p >= 0) s = __fmaf_rn(selw[(size_t)t * k + j], ypair[(size_t)p * ldy + d], s);
    }
  }
  x[(size_t)t * ldx + d] += s;
}

int64_t cu_moe_combine(cudaStream_t st, const float *ypair, int ldy, const int32_t *pair_of, const float *selw, int k,
                       float *x, int ldx, int n, int ntok) {
  if (ntok <= 0) return BL_OK;
  CU_LAUNCH("combining expert outputs", k_moe_combine, dim3(ntok, (n + 255) / 256), dim3(256), 0, st, ypair, ldy, pair_of, selw, k, x, ldx, n);
  return BL_OK;
}

int64_t cu_combine_flush(cudaStream_t st, combine_args *cb) {
  if (!cb || cb->ntok < 1) return BL_OK;
  const combine_args a = *cb;
  cb->ntok = 0;
  return cu_moe_combine(st, a.ypair, a.ldy, a.pair_of, a.selw, a.k, a.x, a.ldx, a.n, a.ntok);
}

int64_t cu_moe_init() {
  CU_OK(cu_kernel_prefs(k_moe_sort, "configuring kernels"));
  return cu_kernel_prefs(k_moe_combine, "configuring kernels");
}
