// bloomery CUDA library: entry points for the conformance tests - one weight matrix times
// activation rows through the decode product, the decode-batch products or the tensor-core tiles,
// and dequantization of stored blocks, each on copies of host data (the CPU reference computes
// the same from the same bytes).
#include <stdlib.h>
#include <string.h>

#include <chrono>

#include "common.cuh"
#include "dot8.cuh"
#include "internal.h"

struct dev_bufs {
  void *p[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
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
  if (!cu_type_geom_of((int)type, &g) && !cu_iq_test_geom(type, &g))
    return cu_fail(BL_E_UNSUPPORTED, "type %s has no CUDA kernels", cu_type_name((int)type));
  if (n <= 0 || n % g.be || row_stride != (n / g.be) * g.bb)
    return cu_fail(BL_E_INVAL, "%s rows of %lld elements and %lld bytes", g.name, (long long)n, (long long)row_stride);
  return BL_OK;
}

// The decode-batch test paths' RMS-norm weights (paths 6 and 7): element i's.
static float test_norm_weight(int64_t i) { return 0.75f + 0.0625f * (float)(i % 9); }

// Paths 4..7: the decode-batch product (cu_mv_batch, 2..MV_MAX_NT rows, int8 activations for
// Q4_K / Q6_K rows) with the rows quantized once a launch into scratch (4, 6) or staged by each
// block (5, 7); 6 and 7 RMS-normalise the rows first (eps 1e-6, weights test_norm_weight). Paths
// 4 and 6 fail unless the scratch was written (the quantizing kernel ran).
static int64_t test_mv_batch(int64_t path, const dmat &m, const float *x, int n_x, int n, float *y, int rows, dev_bufs &b, int smem) {
  if (n_x < 2 || n_x > MV_MAX_NT) return cu_fail(BL_E_INVAL, "test_matmul: path %lld takes 2..%d rows of x", (long long)path, MV_MAX_NT);
  const bool once = path == 4 || path == 6, norm = path >= 6;
  const size_t cap = cu_x8_scratch_bytes(n);
  CU_TRY(cudaMalloc(&b.p[3], cap), "test_matmul: allocating");
  CU_TRY(cudaMemset(b.p[3], 0xff, cap), "test_matmul: poisoning");
  if (norm) {
    float *w = static_cast<float *>(malloc((size_t)n * sizeof(float)));
    if (!w) return cu_fail(BL_E_NOMEM, "test_matmul: allocating");
    for (int i = 0; i < n; i++) w[i] = test_norm_weight(i);
    cudaError_t e = cudaMalloc(&b.p[4], (size_t)n * sizeof(float));
    if (e == cudaSuccess) e = cudaMemcpy(b.p[4], w, (size_t)n * sizeof(float), cudaMemcpyHostToDevice);
    free(w);
    CU_TRY(e, "test_matmul: norm weights");
  }
  mv_args a;
  memset(&a, 0, sizeof a);
  a.job[0].m = m;
  a.job[0].y = y;
  a.job[0].ldy = rows;
  a.job[0].epi = EPI_STORE;
  a.njobs = 1;
  a.x = x;
  a.ldx = n;
  a.n = n;
  a.q8 = 1;
  a.norm = norm;
  a.normw = norm ? static_cast<const float *>(b.p[4]) : nullptr;
  a.eps = 1e-6f;
  a.xq = once ? static_cast<uint8_t *>(b.p[3]) : nullptr;
  a.xq_cap = cap;
  bool done = false;
  CU_OK(cu_mv_batch(0, a, n_x, nullptr, 0, smem, &done));
  if (!done) return cu_fail(BL_E_UNSUPPORTED, "test_matmul: path %lld: no decode-batch product for %s rows of %d (FAST_MV off?)", (long long)path, cu_type_name(m.type), n);
  if (once && d8_type(m.type)) {
    // the first row's first group scale (after its n int8 values) must have been written
    float d0 = 0.0f;
    CU_TRY(cudaMemcpy(&d0, static_cast<const uint8_t *>(b.p[3]) + n, sizeof d0, cudaMemcpyDeviceToHost), "test_matmul: reading the scratch");
    if (!(d0 == d0) || (cu_fast & (FAST_Q8 | FAST_X8)) != (FAST_Q8 | FAST_X8))
      return cu_fail(BL_E_INVAL, "test_matmul: path %lld: the rows were not quantized once (fast bits %d)", (long long)path, cu_fast);
  }
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
  if (cu_iq_type((int)type) && path == 3) { // the grid types' int8-activation dot (quants_iq.cuh's d8<T>)
    if (n_x != 1) return cu_fail(BL_E_INVAL, "test_matmul: path 3 (int8 activations) takes one row of x");
    CU_OK(cu_test_iq_dot8(type, m.d, row_stride, rows, static_cast<const float *>(b.p[1]), n, static_cast<float *>(b.p[2])));
  } else if (path == 0 || path == 3) {
    if (path == 3 && n_x != 1) return cu_fail(BL_E_INVAL, "test_matmul: path 3 (int8 activations) takes one row of x");
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
    a.q8 = path == 3;
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
  } else if (path >= 4 && path <= 7) {
    CU_OK(test_mv_batch(path, m, static_cast<const float *>(b.p[1]), (int)n_x, (int)n, static_cast<float *>(b.p[2]), (int)rows, b, smem));
  } else {
    return cu_fail(BL_E_INVAL, "test_matmul: path %lld (0 decode product, 1 and 2 tensor cores, 3 one-token product on int8 activations, 4..7 decode-batch products)",
                   (long long)path);
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
  const bool iq = cu_iq_test_geom(type, &g);
  if (!iq && !cu_type_geom_of((int)type, &g)) return cu_fail(BL_E_UNSUPPORTED, "type %s has no CUDA kernels", cu_type_name((int)type));
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
  if (iq) CU_OK(cu_test_iq_dequant(type, m.d, n, static_cast<float *>(b.p[1])));
  else CU_OK(cu_rows_f32(0, m, nullptr, 1, static_cast<float *>(b.p[1]), (int)n));
  CU_TRY(cudaDeviceSynchronize(), "test_dequant: running");
  CU_TRY(cudaMemcpy(dst, b.p[1], (size_t)n * 4, cudaMemcpyDeviceToHost), "test_dequant: copying back");
  return BL_OK;
}

// The sigmoid router's picks (router/sigmoid.cu) of ntok tokens' logits (ntok x X), corr (X floats, or
// null), into sel / selw (ntok x k each).
extern "C" int64_t bl_cuda_test_route_sigmoid(int64_t dev, const float *logits, const float *corr, int64_t ntok, int64_t X, int64_t k, int64_t n_group,
                                              int64_t n_group_used, int64_t norm_topk, double scale, int32_t *sel, float *selw) {
  if (!logits || !sel || !selw || ntok <= 0 || X <= 0 || k <= 0) return cu_fail(BL_E_INVAL, "test_route_sigmoid: bad arguments");
  int smem = 0;
  CU_OK(test_device(dev, &smem));
  dev_bufs b;
  const size_t lb = (size_t)(ntok * X) * 4, pb = (size_t)(ntok * k) * 4;
  CU_TRY(cudaMalloc(&b.p[0], lb), "test_route_sigmoid: allocating");
  CU_TRY(cudaMalloc(&b.p[1], (size_t)X * 4), "test_route_sigmoid: allocating");
  CU_TRY(cudaMalloc(&b.p[2], pb), "test_route_sigmoid: allocating");
  CU_TRY(cudaMalloc(&b.p[3], pb), "test_route_sigmoid: allocating");
  CU_TRY(cudaMemcpy(b.p[0], logits, lb, cudaMemcpyHostToDevice), "test_route_sigmoid: copying");
  if (corr) CU_TRY(cudaMemcpy(b.p[1], corr, (size_t)X * 4, cudaMemcpyHostToDevice), "test_route_sigmoid: copying");
  route_sig_args a;
  a.logits = static_cast<const float *>(b.p[0]);
  a.corr = corr ? static_cast<const float *>(b.p[1]) : nullptr;
  a.n_expert = (int)X;
  a.k = (int)k;
  a.n_group = (int)n_group;
  a.n_group_used = (int)n_group_used;
  a.norm_topk = (int)norm_topk;
  a.w_scale = (float)scale;
  a.sel = static_cast<int32_t *>(b.p[2]);
  a.selw = static_cast<float *>(b.p[3]);
  CU_OK(cu_route_sigmoid(0, a, (int)ntok));
  CU_TRY(cudaDeviceSynchronize(), "test_route_sigmoid: running");
  CU_TRY(cudaMemcpy(sel, b.p[2], pb, cudaMemcpyDeviceToHost), "test_route_sigmoid: copying back");
  CU_TRY(cudaMemcpy(selw, b.p[3], pb, cudaMemcpyDeviceToHost), "test_route_sigmoid: copying back");
  return BL_OK;
}

// ---- launch overhead probe ----
__global__ void k_probe(int *p) {
  cu_pdl_entry();
  if (p && threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(p, 1);
}
__global__ void k_probe_smem(int *p) {
  cu_pdl_entry();
  extern __shared__ int psm[];
  psm[threadIdx.x] = (int)threadIdx.x;
  __syncthreads();
  if (p && threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(p, psm[1]);
}

struct probe_run {
  cudaStream_t st = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaGraphExec_t exec = nullptr;
  int *counter = nullptr;
  ~probe_run() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (e0) (void)cudaEventDestroy(e0);
    if (e1) (void)cudaEventDestroy(e1);
    if (st) (void)cudaStreamDestroy(st);
    if (counter) (void)cudaFree(counter);
  }
};

static cudaError_t probe_launch(probe_run &r, int64_t i, int64_t mode, int sms) {
  const dim3 grid((mode & 8) ? 5 * sms : sms), block((mode & 8) ? 256 : 128);
  if ((mode & 1) && (i & 1)) return cu_launch(k_probe_smem, grid, block, (size_t)64 * 1024, r.st, r.counter);
  return cu_launch(k_probe, grid, block, 0, r.st, r.counter);
}

// Microseconds a kernel for n small kernels back to back (one block an SM, 128 threads), replayed
// as one CUDA graph and launched one by one on a stream: out[0] graph (GPU, events), out[1]
// stream (GPU, events), out[2] host time of the cudaGraphLaunch calls a kernel, out[3] host time
// of the stream launch calls a kernel. mode bit 0: every other kernel takes 64 KiB of dynamic
// shared memory (carveout changes); bit 1: both ask for the largest carveout; bit 2: programmatic
// dependent launch; bit 3: 5 blocks of 256 threads an SM (the decode kernels' grids). Tells
// launch and scheduling costs from kernel work, and host costs from device costs.
static int64_t probe_launch_costs(int64_t dev, int64_t n, int64_t mode, double *out) {
  if (n < 1 || n > 4096 || !out) return cu_fail(BL_E_INVAL, "test_launch: bad arguments");
  int smem = 0;
  CU_OK(test_device(dev, &smem));
  cudaDeviceProp prop;
  CU_TRY(cudaGetDeviceProperties(&prop, (int)dev), "test_launch: device");
  const int sms = prop.multiProcessorCount;
  const char *w = "test_launch";
  CU_TRY(cudaFuncSetAttribute(k_probe_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024), w);
  const int carve = (mode & 2) ? 100 : -1;
  CU_TRY(cudaFuncSetAttribute(k_probe, cudaFuncAttributePreferredSharedMemoryCarveout, carve), w);
  CU_TRY(cudaFuncSetAttribute(k_probe_smem, cudaFuncAttributePreferredSharedMemoryCarveout, carve), w);
  const int keep_pdl = cu_pdl;
  cu_pdl = (mode & 4) && prop.major >= 9;
  probe_run r;
  int64_t s = BL_OK;
  do {
    if (cudaStreamCreateWithFlags(&r.st, cudaStreamNonBlocking) != cudaSuccess || cudaEventCreate(&r.e0) != cudaSuccess ||
        cudaEventCreate(&r.e1) != cudaSuccess || cudaMalloc(&r.counter, sizeof(int)) != cudaSuccess) {
      s = cu_fail(BL_E_DEVICE, "test_launch: setting up");
      break;
    }
    cudaGraph_t g = nullptr;
    if (cudaStreamBeginCapture(r.st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) { s = cu_fail(BL_E_DEVICE, "test_launch: capture"); break; }
    for (int64_t i = 0; i < n; i++) (void)probe_launch(r, i, mode, sms);
    const cudaError_t ec = cudaStreamEndCapture(r.st, &g);
    if (ec != cudaSuccess) { s = cu_fail_cuda(ec, "test_launch: capture"); break; }
    const cudaError_t ei = cudaGraphInstantiate(&r.exec, g, 0);
    (void)cudaGraphDestroy(g);
    if (ei != cudaSuccess) { s = cu_fail_cuda(ei, "test_launch: instantiate"); break; }
    const int reps = 10;
    float ms = 0;
    (void)cudaGraphLaunch(r.exec, r.st);
    (void)cudaStreamSynchronize(r.st);
    (void)cudaEventRecord(r.e0, r.st);
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < reps; k++) (void)cudaGraphLaunch(r.exec, r.st);
    auto t1 = std::chrono::steady_clock::now();
    (void)cudaEventRecord(r.e1, r.st);
    if (cudaEventSynchronize(r.e1) != cudaSuccess || cudaEventElapsedTime(&ms, r.e0, r.e1) != cudaSuccess) { s = cu_fail(BL_E_DEVICE, "test_launch: graph replay"); break; }
    out[0] = 1000.0 * ms / (reps * (double)n);
    out[2] = std::chrono::duration<double, std::micro>(t1 - t0).count() / (reps * (double)n);
    (void)cudaEventRecord(r.e0, r.st);
    t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < reps; k++)
      for (int64_t i = 0; i < n; i++) (void)probe_launch(r, i, mode, sms);
    t1 = std::chrono::steady_clock::now();
    (void)cudaEventRecord(r.e1, r.st);
    if (cudaEventSynchronize(r.e1) != cudaSuccess || cudaEventElapsedTime(&ms, r.e0, r.e1) != cudaSuccess) { s = cu_fail(BL_E_DEVICE, "test_launch: stream launches"); break; }
    out[1] = 1000.0 * ms / (reps * (double)n);
    out[3] = std::chrono::duration<double, std::micro>(t1 - t0).count() / (reps * (double)n);
    const cudaError_t el = cudaGetLastError();
    if (el != cudaSuccess) s = cu_fail_cuda(el, "test_launch");
  } while (0);
  cu_pdl = keep_pdl;
  return s;
}

extern "C" int64_t bl_cuda_test_launch(int64_t dev, int64_t n, int64_t mode, double *graph_us, double *stream_us) {
  if (!graph_us || !stream_us) return cu_fail(BL_E_INVAL, "test_launch: bad arguments");
  double out[4];
  CU_OK(probe_launch_costs(dev, n, mode, out));
  *graph_us = out[0];
  *stream_us = out[1];
  return BL_OK;
}

// As bl_cuda_test_launch, with the host's side: out[4] = graph GPU, stream GPU, graph host, stream host (us a kernel).
extern "C" int64_t bl_cuda_test_launch_host(int64_t dev, int64_t n, int64_t mode, double *out) { return probe_launch_costs(dev, n, mode, out); }
