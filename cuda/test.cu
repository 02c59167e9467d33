// bloomery CUDA library: entry points for the conformance tests - one weight matrix times
// activation rows through the decode product or the tensor-core tiles, and dequantization of
// stored blocks, each on copies of host data (the CPU reference computes the same from the same bytes).
#include <string.h>

#include "common.cuh"
#include "internal.h"

struct dev_bufs {
  void *p[3] = {nullptr, nullptr, nullptr};
  ~dev_bufs() {
    for (void *q : p)
      if (q) (void)cudaFree(q);
  }
};

static int64_t test_device(int64_t dev, int *smem_limit) {
  int n = 0, drv = 0;
  CU_OK(cu_probe(&n, &drv));
  if (dev < 0 || dev >= n) return cu_fail(BL_E_INVAL, "CUDA device %lld does not exist", (long long)dev);
  CU_TRY(cudaSetDevice((int)dev), "selecting the device");
  if (!cu_has_code((int)dev)) return cu_fail(BL_E_UNSUPPORTED, "this build has no code for CUDA device %lld", (long long)dev);
  cudaDeviceProp prop;
  CU_TRY(cudaGetDeviceProperties(&prop, (int)dev), "reading the device properties");
  *smem_limit = (int)prop.sharedMemPerBlockOptin - CU_SMEM_RESERVE;
  return cu_init_kernels((int)prop.sharedMemPerBlockOptin);
}

static int64_t check_rows(int64_t type, int64_t n, int64_t row_stride) {
  cu_type_geom g;
  if (!cu_type_geom_of((int)type, &g)) return cu_fail(BL_E_UNSUPPORTED, "type %s has no CUDA kernels", cu_type_name((int)type));
  if (n <= 0 || n % g.be || row_stride != (n / g.be) * g.bb)
    return cu_fail(BL_E_INVAL, "%s rows of %lld elements and %lld bytes", g.name, (long long)n, (long long)row_stride);
  return BL_OK;
}

extern "C" int64_t bl_cuda_test_matmul(int64_t dev, int64_t path, int64_t type, const void *w, int64_t row_stride, int64_t rows,
                                       const float *x, int64_t n_x, int64_t n, float *y) {
  if (!w || !x || !y || rows <= 0 || n_x <= 0) return cu_fail(BL_E_INVAL, "test_matmul: bad arguments");
  int smem = 0;
  CU_OK(test_device(dev, &smem));
  CU_OK(check_rows(type, n, row_stride));
  dev_bufs b;
  const size_t wb = (size_t)rows * row_stride, xb = (size_t)n_x * n * 4, yb = (size_t)n_x * rows * 4;
  CU_TRY(cudaMalloc(&b.p[0], wb), "test_matmul: allocating");
  CU_TRY(cudaMalloc(&b.p[1], xb), "test_matmul: allocating");
  CU_TRY(cudaMalloc(&b.p[2], yb), "test_matmul: allocating");
  CU_TRY(cudaMemcpy(b.p[0], w, wb, cudaMemcpyHostToDevice), "test_matmul: copying");
  CU_TRY(cudaMemcpy(b.p[1], x, xb, cudaMemcpyHostToDevice), "test_matmul: copying");
  CU_TRY(cudaMemset(b.p[2], 0xff, yb), "test_matmul: poisoning"); // NaN: every output must be written
  dmat m;
  m.d = static_cast<const uint8_t *>(b.p[0]);
  m.type = (int32_t)type;
  m.ne0 = (int32_t)n;
  m.ne1 = (int32_t)rows;
  m.ne2 = 1;
  m.nb1 = row_stride;
  m.nb2 = (int64_t)wb;
  if (path == 0) {
    mv_args a;
    memset(&a, 0, sizeof a);
    a.job[0].m = m;
    a.job[0].y = static_cast<float *>(b.p[2]);
    a.job[0].ldy = (int)rows;
    a.job[0].epi = EPI_STORE;
    a.njobs = 1;
    a.x = static_cast<const float *>(b.p[1]);
    a.ldx = (int)n;
    a.n = (int)n;
    CU_OK(cu_matvec(0, a, (int)n_x, smem));
  } else if (path == 1 || path == 2) {
    const int bn = path == 1 ? 64 : 32;
    gemm_args g;
    memset(&g, 0, sizeof g);
    g.job[0].w = m;
    g.job[0].c = static_cast<float *>(b.p[2]);
    g.job[0].ldc = (int)rows;
    g.njobs = 1;
    g.b = static_cast<const float *>(b.p[1]);
    g.ldb = (int)n;
    g.ntok = (int)n_x;
    g.mode = EPI_STORE;
    CU_OK(cu_gemm(0, g, bn, (int)((n_x + bn - 1) / bn)));
  } else {
    return cu_fail(BL_E_INVAL, "test_matmul: path %lld (0 decode product, 1 and 2 tensor cores)", (long long)path);
  }
  CU_TRY(cudaDeviceSynchronize(), "test_matmul: running");
  CU_TRY(cudaMemcpy(y, b.p[2], yb, cudaMemcpyDeviceToHost), "test_matmul: copying back");
  return BL_OK;
}

extern "C" int64_t bl_cuda_test_dequant(int64_t dev, int64_t type, const void *src, int64_t n, float *dst) {
  if (!src || !dst || n <= 0) return cu_fail(BL_E_INVAL, "test_dequant: bad arguments");
  int smem = 0;
  CU_OK(test_device(dev, &smem));
  cu_type_geom g;
  if (!cu_type_geom_of((int)type, &g)) return cu_fail(BL_E_UNSUPPORTED, "type %s has no CUDA kernels", cu_type_name((int)type));
  if (n % g.be) return cu_fail(BL_E_INVAL, "test_dequant: %lld elements are not whole %s blocks", (long long)n, g.name);
  const size_t sb = (size_t)(n / g.be) * g.bb;
  dev_bufs b;
  CU_TRY(cudaMalloc(&b.p[0], sb), "test_dequant: allocating");
  CU_TRY(cudaMalloc(&b.p[1], (size_t)n * 4), "test_dequant: allocating");
  CU_TRY(cudaMemcpy(b.p[0], src, sb, cudaMemcpyHostToDevice), "test_dequant: copying");
  CU_TRY(cudaMemset(b.p[1], 0xff, (size_t)n * 4), "test_dequant: poisoning");
  dmat m;
  m.d = static_cast<const uint8_t *>(b.p[0]);
  m.type = (int32_t)type;
  m.ne0 = (int32_t)n;
  m.ne1 = 1;
  m.ne2 = 1;
  m.nb1 = (int64_t)sb;
  m.nb2 = (int64_t)sb;
  CU_OK(cu_rows_f32(0, m, nullptr, 1, static_cast<float *>(b.p[1]), (int)n));
  CU_TRY(cudaDeviceSynchronize(), "test_dequant: running");
  CU_TRY(cudaMemcpy(dst, b.p[1], (size_t)n * 4, cudaMemcpyDeviceToHost), "test_dequant: copying back");
  return BL_OK;
}
