// bloomery CUDA library: decode products - y = W x for up to 8 activation rows on the stored
// quant blocks (one warp a weight row, lanes over the row's work units, activations staged in
// shared memory, optionally RMS-normalised on the way in), several matrices of one type in one
// launch (Q, K and V), results stored or added to a residual; and dequantization of rows
// (embedding lookup). One kernel per (type, rows of x): registers sized for that type alone.
#include <string.h>

#include "common.cuh"
#include "internal.h"
#include "quants.cuh"
#include "rows.cuh"

template <int T, int NT>
__global__ void __launch_bounds__(MV_THREADS) k_mv(mv_args a) {
  BL_TR_SCOPE(11);
  cu_pdl_entry();
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
    mv_row<T, NT>(jb.m.d + (size_t)row * jb.m.nb1, xs, a.n, acc, lane);
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
  BL_TR_SCOPE(12);
  cu_pdl_entry();
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
  CU_LAUNCH("dequantizing rows", k_rows_f32, dim3(n_rows), dim3(256), 0, st, m, ids, y, ldy);
  return BL_OK;
}

template <int T>
static cudaError_t launch_mv(cudaStream_t st, const mv_args &a, int nt, int grid, size_t smem) {
  switch (nt) {
#define C(N) \
  case N: return cu_launch(k_mv<T, N>, dim3(grid), dim3(MV_THREADS), smem, st, a);
    C(1) C(2) C(3) C(4) C(5) C(6) C(7)
#undef C
    default: return cu_launch(k_mv<T, 8>, dim3(grid), dim3(MV_THREADS), smem, st, a);
  }
}

// One launch for jobs of one type (rows of x split in chunks that fit shared memory).
static int64_t matvec_group(cudaStream_t st, mv_args a, int ntok, int smem_limit) {
  int rows = 0, grid = 0;
  for (int j = 0; j < a.njobs; j++) rows += a.job[j].m.ne1;
  a.rpw = rows >= 65536 ? 4 : 1; // several rows a warp for the output head: x staged less often
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
  const int type = a.job[0].m.type;
  for (int t0 = 0; t0 < ntok; t0 += per) {
    const int nt = ntok - t0 < per ? ntok - t0 : per;
    a.x = x0 + (size_t)t0 * a.ldx;
    for (int j = 0; j < a.njobs; j++) a.job[j].y = y0[j] + (size_t)t0 * a.job[j].ldy;
    const size_t smem = (size_t)nt * a.n * sizeof(float);
    cudaError_t e = cudaErrorInvalidValue;
    switch (type) {
#define L(T) \
  case T: e = launch_mv<T>(st, a, nt, grid, smem); break;
      CU_TYPE_CASES(L)
#undef L
      default: return cu_fail(BL_E_UNSUPPORTED, "product: %s has no CUDA kernel", cu_type_name(type));
    }
    CU_TRY(e, "matrix-vector product");
  }
  return BL_OK;
}

int64_t cu_matvec(cudaStream_t st, mv_args a, int ntok, int smem_limit) {
  if (ntok <= 0 || a.njobs <= 0) return BL_OK;
  if (ntok == 1) { // one row of x: the staged one-token kernels (fastdec.cu) when the shapes fit
    fmv_args f;
    memset(&f, 0, sizeof f);
    for (int j = 0; j < a.njobs; j++) {
      f.job[j].m = a.job[j].m;
      f.job[j].bias = a.job[j].bias;
      f.job[j].y = a.job[j].y;
      f.job[j].epi = a.job[j].epi;
    }
    f.njobs = a.njobs;
    f.x = a.x;
    f.n = a.n;
    f.norm = a.norm;
    f.normw = a.normw;
    f.eps = a.eps;
    f.q8 = a.q8;
    if (a.pf) f.pf = *a.pf;
    bool done = false;
    CU_OK(cu_fmv(st, f, smem_limit, cu_sms, &done));
    if (done) return BL_OK;
  }
  // jobs grouped by weight type, one launch a group (Q, K and V of one type: one launch)
  bool done[3] = {false, false, false};
  for (int j = 0; j < a.njobs; j++) {
    if (done[j]) continue;
    mv_args g = a;
    g.njobs = 0;
    for (int q = j; q < a.njobs; q++)
      if (!done[q] && a.job[q].m.type == a.job[j].m.type) {
        g.job[g.njobs++] = a.job[q];
        done[q] = true;
      }
    CU_OK(matvec_group(st, g, ntok, smem_limit));
  }
  return BL_OK;
}

int64_t cu_matvec_init(int smem_optin) {
#define N8(T) \
  CU_OK(cu_allow_smem(k_mv<T, 1>, smem_optin, "configuring the product kernels")); \
  CU_OK(cu_allow_smem(k_mv<T, 2>, smem_optin, "configuring the product kernels")); \
  CU_OK(cu_allow_smem(k_mv<T, 3>, smem_optin, "configuring the product kernels")); \
  CU_OK(cu_allow_smem(k_mv<T, 4>, smem_optin, "configuring the product kernels")); \
  CU_OK(cu_allow_smem(k_mv<T, 5>, smem_optin, "configuring the product kernels")); \
  CU_OK(cu_allow_smem(k_mv<T, 6>, smem_optin, "configuring the product kernels")); \
  CU_OK(cu_allow_smem(k_mv<T, 7>, smem_optin, "configuring the product kernels")); \
  CU_OK(cu_allow_smem(k_mv<T, 8>, smem_optin, "configuring the product kernels"));
  CU_TYPE_CASES(N8)
#undef N8
  return cu_kernel_prefs(k_rows_f32, "configuring the product kernels");
}
