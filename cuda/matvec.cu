// bloomery CUDA library: decode products - y = W x for up to 8 activation rows on the stored
// quant blocks (one warp a weight row, lanes over the row's work units, activations staged in
// shared memory, optionally RMS-normalised on the way in), several matrices in one launch (Q, K
// and V), results stored or added to a residual; and dequantization of rows (embedding lookup).
#include "common.cuh"
#include "internal.h"
#include "quants.cuh"
#include "rows.cuh"

template <int NT>
__global__ void __launch_bounds__(MV_THREADS) k_mv(mv_args a) {
  extern __shared__ float4 dyn_smem4[];
  float *xs = reinterpret_cast<float *>(dyn_smem4);
  __shared__ float red[32];
  stage_rows(xs, a.x, a.ldx, a.n, NT, a.norm, a.normw, a.eps, red);
  int b = blockIdx.x, j = 0;
  while (j + 1 < a.njobs && b >= a.job[j].blocks) b -= a.job[j++].blocks;
  const mv_job &jb = a.job[j];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = 0; i < a.rpw; i++) {
    const int row = (b * a.rpw + i) * MV_WARPS + warp;
    if (row >= jb.m.ne1) return;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const uint8_t *rp = jb.m.d + (size_t)row * jb.m.nb1;
    dispatch_type(jb.m.type, [&](auto tag) { mv_row<decltype(tag)::value, NT>(rp, xs, a.n, acc, lane); });
#pragma unroll
    for (int t = 0; t < NT; t++) {
      float v = warp_sum(acc[t]);
      if (lane == 0) {
        if (jb.bias) v += jb.bias[row];
        float *yp = jb.y + (size_t)t * jb.ldy + row;
        if (jb.epi == EPI_ADD) *yp += v;
        else *yp = v;
      }
    }
  }
}

// Rows of a matrix dequantized to floats: row r of slab 0 is ids ? ids[t] : t, written to
// y + t * ldy (embedding lookup; the dequantization test).
__global__ void __launch_bounds__(256) k_rows_f32(dmat m, const int32_t *ids, float *y, int ldy) {
  const int t = blockIdx.x;
  const int r = ids ? ids[t] : t;
  const uint8_t *rp = m.d + (size_t)r * m.nb1;
  float *yr = y + (size_t)t * ldy;
  dispatch_type(m.type, [&](auto tag) {
    using Q = qt<decltype(tag)::value>;
    const int nunits = (m.ne0 / Q::BE) * Q::UPB;
    for (int k = threadIdx.x; k < nunits; k += blockDim.x) {
      const int blk = k / Q::UPB, u = k - blk * Q::UPB;
      float *yb = yr + blk * Q::BE;
      Q::unit(rp + (size_t)blk * Q::BB, u, [&](int pos, float w0, float w1, float w2, float w3) {
        yb[pos] = w0;
        yb[pos + 1] = w1;
        yb[pos + 2] = w2;
        yb[pos + 3] = w3;
      });
    }
  });
}

int64_t cu_rows_f32(cudaStream_t st, const dmat &m, const int32_t *ids, int n_rows, float *y, int ldy) {
  if (n_rows <= 0) return BL_OK;
  k_rows_f32<<<n_rows, 256, 0, st>>>(m, ids, y, ldy);
  CU_LAUNCHED("dequantizing rows");
  return BL_OK;
}

template <int NT>
static void launch_mv(cudaStream_t st, const mv_args &a, int grid, size_t smem) {
  k_mv<NT><<<grid, MV_THREADS, smem, st>>>(a);
}

int64_t cu_matvec(cudaStream_t st, mv_args a, int ntok, int smem_limit) {
  if (ntok <= 0) return BL_OK;
  // several rows a warp for big matrices (the output head), so staging x is paid less often
  int rows = 0, grid = 0;
  for (int j = 0; j < a.njobs; j++) rows += a.job[j].m.ne1;
  a.rpw = rows >= 65536 ? 4 : 1;
  for (int j = 0; j < a.njobs; j++) {
    a.job[j].blocks = (a.job[j].m.ne1 + MV_WARPS * a.rpw - 1) / (MV_WARPS * a.rpw);
    grid += a.job[j].blocks;
  }
  int per = smem_limit / (a.n * (int)sizeof(float));
  if (per > MV_MAX_NT) per = MV_MAX_NT;
  if (per < 1) return cu_fail(BL_E_UNSUPPORTED, "product: rows of %d elements do not fit the card's shared memory", a.n);
  const float *x0 = a.x;
  float *y0[3];
  for (int j = 0; j < a.njobs; j++) y0[j] = a.job[j].y;
  for (int t0 = 0; t0 < ntok; t0 += per) {
    const int nt = ntok - t0 < per ? ntok - t0 : per;
    a.x = x0 + (size_t)t0 * a.ldx;
    for (int j = 0; j < a.njobs; j++) a.job[j].y = y0[j] + (size_t)t0 * a.job[j].ldy;
    const size_t smem = (size_t)nt * a.n * sizeof(float);
    switch (nt) {
      case 1: launch_mv<1>(st, a, grid, smem); break;
      case 2: launch_mv<2>(st, a, grid, smem); break;
      case 3: launch_mv<3>(st, a, grid, smem); break;
      case 4: launch_mv<4>(st, a, grid, smem); break;
      case 5: launch_mv<5>(st, a, grid, smem); break;
      case 6: launch_mv<6>(st, a, grid, smem); break;
      case 7: launch_mv<7>(st, a, grid, smem); break;
      default: launch_mv<8>(st, a, grid, smem); break;
    }
    CU_LAUNCHED("matrix-vector product");
  }
  return BL_OK;
}

int64_t cu_matvec_init(int smem_optin) {
#define SET(NT) CU_OK(cu_allow_smem(k_mv<NT>, smem_optin, "configuring the product kernels"));
  SET(1) SET(2) SET(3) SET(4) SET(5) SET(6) SET(7) SET(8)
#undef SET
  return BL_OK;
}
