// bloomery CUDA library: prompt batches' dense products (Q/K/V, attention output, a dense FFN's
// down) from f16 copies made once a launch (FAST_GEMM16): the weights dequantized into a scratch
// matrix by the units of quants.cuh (each element as gemm.cu's tiles would convert it), the
// activation rows converted to f16 once, then a pipelined f16 product - 32-wide K slices of both
// operands copied by cp.async four slices ahead, the same warp tiles and the same m16n8k16
// sequence as gemm.cu's k_gemm, so every output is bit for bit what k_gemm computes. What it saves:
// gemm.cu dequantizes each weight tile once per 32-64 token tile (8-16 times a 512-token batch)
// and waits on every slice's loads; here the weights are decoded once and the copies overlap the
// products.
#include "common.cuh"
#include "internal.h"
#include "gemm_tile.cuh"
#include "mma.cuh"
#include "quants.cuh"
#include "stage.cuh"

#define G16_BK 32              // K elements a pipeline slice
#define G16_LD (G16_BK + 8)    // shared row stride in halves (80 bytes: ldmatrix rows on distinct banks)
#define G16_STAGES 4

// A block decodes DEQ_ELEMS consecutive elements of the matrix (whole quant blocks: rows are
// contiguous in the copy) into shared memory, one thread a unit, then writes them out in 16-byte
// chunks (each thread's unit scattered straight to memory would write 8 bytes every 64).
#define DEQ_ELEMS 8192
template <int T>
__global__ void __launch_bounds__(256) k_deq16(dmat w, __half *out) {
  cu_pdl_entry();
  using Q = qt<T>;
  static_assert(Q::UPB * Q::UE == Q::BE && DEQ_ELEMS % Q::BE == 0, "a block's units must make whole quant blocks");
  __shared__ __align__(16) __half s[DEQ_ELEMS];
  constexpr int UPBLK = DEQ_ELEMS / Q::UE;
  const int upr = w.ne0 / Q::UE; // units a row
  const int64_t n = (int64_t)w.ne1 * upr;
  for (int64_t u0 = (int64_t)blockIdx.x * UPBLK; u0 < n; u0 += (int64_t)gridDim.x * UPBLK) {
    const int cnt = (int)(n - u0 < UPBLK ? n - u0 : UPBLK);
    __syncthreads();
    for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
      const int64_t q = u0 + i;
      const int row = (int)(q / upr), ku = (int)(q - (int64_t)row * upr), blk = ku / Q::UPB, u = ku - blk * Q::UPB;
      const uint8_t *bp = w.d + (size_t)row * w.nb1 + (size_t)blk * Q::BB;
      __half *dst = s + (i - u) * Q::UE; // the quant block's first element in the buffer
      Q::unit(bp, u, [&](int pos, float v0, float v1, float v2, float v3) { st_h4(dst + pos, v0, v1, v2, v3); });
    }
    __syncthreads();
    uint4 *o = reinterpret_cast<uint4 *>(out + u0 * Q::UE);
    const uint4 *src = reinterpret_cast<const uint4 *>(s);
    for (int c = threadIdx.x; c < cnt * Q::UE / 8; c += blockDim.x) o[c] = src[c];
  }
}

// rows of n floats (ldx) as halves (ldo); four elements a thread.
__global__ void k_f16_rows(const float *x, int ldx, int n, int ntok, __half *out, int ldo) {
  cu_pdl_entry();
  const int per = n / 4;
  const int64_t total = (int64_t)ntok * per;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int t = (int)(i / per), c = (int)(i - (int64_t)t * per) * 4;
    const float4 v = *reinterpret_cast<const float4 *>(x + (size_t)t * ldx + c);
    st_h4(out + (size_t)t * ldo + c, v.x, v.y, v.z, v.w);
  }
}

// grid: x over the jobs' 128-row blocks, y over tiles of BN activation rows. Four warps, each 32
// weight rows x BN rows (k_gemm's tiles); rows past a matrix or past the batch are read clamped
// and never stored.
template <int BN>
__global__ void __launch_bounds__(128) k_gemm16(gemm16_args a) {
  cu_pdl_entry();
  extern __shared__ __align__(16) unsigned char g16_raw[];
  __half *sA = reinterpret_cast<__half *>(g16_raw), *sB = sA + G16_STAGES * GEMM_BM * G16_LD;
  int bx = blockIdx.x, jb = 0;
  while (jb + 1 < a.njobs && bx >= a.job[jb].blocks) bx -= a.job[jb++].blocks;
  const gemm16_job &job = a.job[jb];
  const int r0 = bx * GEMM_BM, nrows = job.rows, K = a.K;
  const int start = blockIdx.y * BN, count = min(BN, a.ntok - start);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  constexpr int CPR = G16_BK / 8;                  // 16-byte chunks a row's slice
  constexpr int ACH = GEMM_BM * CPR / 128, BCH = BN * CPR / 128;
  const __half *asrc[ACH], *bsrc[BCH];
  int adst[ACH], bdst[BCH];
#pragma unroll
  for (int i = 0; i < ACH; i++) {
    const int q = tid + 128 * i, row = q / CPR, ch = q - row * CPR;
    asrc[i] = job.w + (size_t)min(r0 + row, nrows - 1) * K + 8 * ch;
    adst[i] = row * G16_LD + 8 * ch;
  }
#pragma unroll
  for (int i = 0; i < BCH; i++) {
    const int q = tid + 128 * i, row = q / CPR, ch = q - row * CPR;
    bsrc[i] = a.b + (size_t)(start + min(row, count - 1)) * a.ldb + 8 * ch;
    bdst[i] = row * G16_LD + 8 * ch;
  }
  auto load = [&](int stage, int k0) {
    __half *A = sA + stage * GEMM_BM * G16_LD, *B = sB + stage * BN * G16_LD;
#pragma unroll
    for (int i = 0; i < ACH; i++) cp_async16(A + adst[i], asrc[i] + k0);
#pragma unroll
    for (int i = 0; i < BCH; i++) cp_async16(B + bdst[i], bsrc[i] + k0);
  };
  float acc[2][BN / 8][4];
  tile_zero<BN>(acc);
  const int nk = K / G16_BK;
#pragma unroll
  for (int s = 0; s < G16_STAGES - 1; s++) {
    if (s < nk) load(s, s * G16_BK);
    cp_async_commit();
  }
  for (int ks = 0; ks < nk; ks++) {
    cp_async_wait_n<G16_STAGES - 2>();
    __syncthreads();
    // the slice G16_STAGES - 1 ahead goes into the stage every warp finished with last iteration
    const int kn = ks + G16_STAGES - 1;
    if (kn < nk) load(kn % G16_STAGES, kn * G16_BK);
    cp_async_commit();
    const __half *A = sA + (ks % G16_STAGES) * GEMM_BM * G16_LD, *B = sB + (ks % G16_STAGES) * BN * G16_LD;
#pragma unroll
    for (int kk = 0; kk < G16_BK / 16; kk++) tile_k16<BN>(acc, A, G16_LD, B, G16_LD, kk * 16, warp, lane);
  }
  cp_async_wait_all();
  tile_store<BN>(acc, r0, nrows, start, count, job.c, job.ldc, job.bias, a.mode == EPI_ADD, warp, lane);
}

static size_t gemm16_smem(int bn) { return (size_t)G16_STAGES * (GEMM_BM + bn) * G16_LD * sizeof(__half); }

template <int T>
static cudaError_t deq_t(cudaStream_t st, const dmat &w, __half *out) {
  const int64_t elems = (int64_t)w.ne1 * w.ne0;
  int64_t blocks = (elems + DEQ_ELEMS - 1) / DEQ_ELEMS;
  if (blocks > 16 * (int64_t)cu_sms) blocks = 16 * (int64_t)cu_sms;
  return cu_launch(k_deq16<T>, dim3((unsigned)(blocks > 0 ? blocks : 1)), dim3(256), 0, st, w, out);
}

int64_t cu_deq16(cudaStream_t st, const dmat &w, __half *out) {
  if (!cu_gemm_supported(w.type, w.ne0)) return cu_fail(BL_E_UNSUPPORTED, "f16 weight copy: %s rows of %d elements", cu_type_name(w.type), w.ne0);
  cudaError_t e = cudaErrorInvalidValue;
  switch (w.type) {
#define D(T) \
  case T: e = deq_t<T>(st, w, out); break;
    CU_TYPE_CASES(D)
#undef D
    default: return cu_fail(BL_E_UNSUPPORTED, "f16 weight copy: %s", cu_type_name(w.type));
  }
  CU_TRY(e, "f16 weight copy");
  return BL_OK;
}

int64_t cu_f16_rows(cudaStream_t st, const float *x, int ldx, int n, int ntok, __half *out, int ldo) {
  if (n % 4 || ldx % 4 || ldo % 4) return cu_fail(BL_E_INVAL, "f16 rows: width %d (ld %d, %d) not a multiple of 4", n, ldx, ldo);
  if (ntok <= 0) return BL_OK;
  int64_t blocks = ((int64_t)ntok * (n / 4) + 255) / 256;
  if (blocks > 8 * (int64_t)cu_sms) blocks = 8 * (int64_t)cu_sms;
  CU_LAUNCH("f16 rows", k_f16_rows, dim3((unsigned)(blocks > 0 ? blocks : 1)), dim3(256), 0, st, x, ldx, n, ntok, out, ldo);
  return BL_OK;
}

int64_t cu_gemm16(cudaStream_t st, gemm16_args a, int bn) {
  if (a.njobs <= 0 || a.ntok <= 0) return BL_OK;
  if (a.K % G16_BK || a.ldb % 8 || (bn != 32 && bn != 64))
    return cu_fail(BL_E_INVAL, "f16 product: K %d, ld %d, tile %d", a.K, a.ldb, bn);
  int gx = 0;
  for (int j = 0; j < a.njobs; j++) {
    if (a.job[j].rows <= 0 || reinterpret_cast<uintptr_t>(a.job[j].w) % 16) return cu_fail(BL_E_INVAL, "f16 product: job %d", j);
    a.job[j].blocks = (a.job[j].rows + GEMM_BM - 1) / GEMM_BM;
    gx += a.job[j].blocks;
  }
  const dim3 grid(gx, (a.ntok + bn - 1) / bn);
  if (bn == 32) CU_LAUNCH("f16 product", k_gemm16<32>, grid, dim3(128), gemm16_smem(32), st, a);
  else CU_LAUNCH("f16 product", k_gemm16<64>, grid, dim3(128), gemm16_smem(64), st, a);
  return BL_OK;
}

int64_t cu_gemm16_init(int smem_optin) {
  const char *w = "configuring products";
  if (gemm16_smem(64) > (size_t)smem_optin) return BL_OK; // cu_gemm16 is then not offered (cu_gemm16_fits)
  CU_TRY(cudaFuncSetAttribute(k_gemm16<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemm16_smem(32)), w);
  CU_TRY(cudaFuncSetAttribute(k_gemm16<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemm16_smem(64)), w);
  CU_OK(cu_kernel_prefs(k_gemm16<32>, w));
  CU_OK(cu_kernel_prefs(k_gemm16<64>, w));
  return cu_kernel_prefs(k_f16_rows, w);
}

bool cu_gemm16_fits(int smem_optin) { return gemm16_smem(64) <= (size_t)smem_optin; }
