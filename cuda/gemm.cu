// bloomery CUDA library: products of many activation rows with a weight matrix on the tensor
// cores. A block computes 128 weight rows (or, for SwiGLU, 64 gate rows and the matching 64 up
// rows) against a tile of 32 or 64 activation rows: each 128-wide slice of K is dequantized from
// the stored blocks into f16 in shared memory (the units of quants.cuh), the activations converted
// to f16 beside it, and four warps run m16n8k16 products with f32 accumulators. Grouped mode
// takes its tiles (expert, first row, count) from a list the card wrote (routed experts).
#include "common.cuh"
#include "internal.h"
#include "mma.cuh"
#include "quants.cuh"

#define LDK (GEMM_BK + 8)

template <int T, int BN>
__global__ void __launch_bounds__(128) k_gemm(gemm_args a) {
  cu_pdl_entry();
  using Q = qt<T>;
  constexpr int UPW = GEMM_BK / Q::UE; // units of a row in one K slice
  extern __shared__ __align__(16) unsigned char g_raw[];
  __half *sA = reinterpret_cast<__half *>(g_raw), *sB = sA + GEMM_BM * LDK;
  __shared__ int brow[BN];
  int e = 0, start, count;
  if (a.tiles) {
    if ((int)blockIdx.y >= *a.n_tiles) return;
    const int4 tl = a.tiles[blockIdx.y];
    e = tl.x;
    start = tl.y;
    count = tl.z;
  } else {
    start = blockIdx.y * BN;
    count = min(BN, a.ntok - start);
  }
  const bool swiglu = a.mode == EPI_SWIGLU;
  const int rows_here = swiglu ? GEMM_BM / 2 : GEMM_BM;
  int bx = blockIdx.x, jb = 0;
  while (jb + 1 < a.njobs && bx >= a.job[jb].blocks) bx -= a.job[jb++].blocks;
  const gemm_job &job = a.job[jb];
  const int r0 = bx * rows_here, nrows = job.w.ne1, K = job.w.ne0;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
  for (int i = tid; i < BN; i += 128) brow[i] = i < count ? (a.b_rows ? a.b_rows[start + i] : start + i) : -1;
  const uint8_t *w1 = job.w.d + (size_t)e * job.w.nb2;
  const uint8_t *w2 = swiglu ? a.w2.d + (size_t)e * a.w2.nb2 : w1;
  float acc[2][BN / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  for (int k0 = 0; k0 < K; k0 += GEMM_BK) {
    __syncthreads();
    for (int i = tid; i < BN * (GEMM_BK / 4); i += 128) {
      const int r = i / (GEMM_BK / 4), c = (i - r * (GEMM_BK / 4)) * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (brow[r] >= 0) v = *reinterpret_cast<const float4 *>(a.b + (size_t)brow[r] * a.ldb + k0 + c);
      st_h4(sB + r * LDK + c, v.x, v.y, v.z, v.w);
    }
    const int kfirst = (k0 / Q::BE) * Q::UPB + (k0 % Q::BE) / Q::UE;
    for (int q = tid; q < GEMM_BM * UPW; q += 128) {
      const int row = q / UPW, uw = q - row * UPW;
      int grow;
      const uint8_t *base;
      if (swiglu) {
        grow = r0 + (row & (GEMM_BM / 2 - 1));
        base = row < GEMM_BM / 2 ? w1 : w2;
      } else {
        grow = r0 + row;
        base = w1;
      }
      const bool ok = grow < nrows;
      const uint8_t *rp = base + (size_t)(ok ? grow : 0) * job.w.nb1;
      const int kk = kfirst + uw, blk = kk / Q::UPB, u = kk - blk * Q::UPB;
      __half *dst = sA + row * LDK + blk * Q::BE - k0;
      Q::unit(rp + (size_t)blk * Q::BB, u, [&](int pos, float v0, float v1, float v2, float v3) {
        if (ok) st_h4(dst + pos, v0, v1, v2, v3);
        else st_h4(dst + pos, 0.f, 0.f, 0.f, 0.f);
      });
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < GEMM_BK / 16; kk++) {
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; mt++) ldsm_x4(af[mt], sA + (32 * warp + 16 * mt + (lane & 15)) * LDK + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < BN / 16; np++) {
        uint32_t b[4];
        ldsm_x4(b, sB + (16 * np + (lane & 7) + ((lane >> 4) << 3)) * LDK + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
          mma16816(acc[mt][2 * np], af[mt], b[0], b[1]);
          mma16816(acc[mt][2 * np + 1], af[mt], b[2], b[3]);
        }
      }
    }
  }
  if (!swiglu) {
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
      for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          const int grow = r0 + 32 * warp + 16 * mt + gid + (q >= 2 ? 8 : 0);
          const int col = 8 * nt + 2 * tig + (q & 1);
          if (grow >= nrows || col >= count) continue;
          float v = acc[mt][nt][q];
          if (job.bias) v += job.bias[grow];
          float *cp = job.c + (size_t)(start + col) * job.ldc + grow;
          if (a.mode == EPI_ADD) *cp += v;
          else *cp = v;
        }
    return;
  }
  // SwiGLU: gate rows 0..63 and up rows 64..127 meet in shared memory
  constexpr int LDC = BN + 4;
  float *sC = reinterpret_cast<float *>(g_raw);
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const int row = 32 * warp + 16 * mt + gid + (q >= 2 ? 8 : 0), col = 8 * nt + 2 * tig + (q & 1);
        sC[row * LDC + col] = acc[mt][nt][q];
      }
  __syncthreads();
  for (int i = tid; i < (GEMM_BM / 2) * BN; i += 128) {
    const int col = i / (GEMM_BM / 2), row = i - col * (GEMM_BM / 2);
    if (col >= count || r0 + row >= nrows) continue;
    const float gv = sC[row * LDC + col], uv = sC[(row + GEMM_BM / 2) * LDC + col];
    job.c[(size_t)(start + col) * job.ldc + r0 + row] = silu_f(gv) * uv;
  }
}

static size_t gemm_smem(int bn) { return (size_t)(GEMM_BM + bn) * LDK * sizeof(__half); }

bool cu_gemm_supported(int type, int ne0) {
  cu_type_geom g;
  return cu_type_geom_of(type, &g) && ne0 % GEMM_BK == 0 && ne0 > 0;
}

template <int T>
static cudaError_t launch_t(cudaStream_t st, const gemm_args &a, int bn, dim3 grid) {
  if (bn == 32) return cu_launch(k_gemm<T, 32>, grid, dim3(128), gemm_smem(32), st, a);
  return cu_launch(k_gemm<T, 64>, grid, dim3(128), gemm_smem(64), st, a);
}

int64_t cu_gemm(cudaStream_t st, gemm_args a, int bn, int grid_y) {
  const int type = a.job[0].w.type;
  for (int j = 0; j < a.njobs; j++) {
    if (!cu_gemm_supported(a.job[j].w.type, a.job[j].w.ne0) || a.job[j].w.type != type)
      return cu_fail(BL_E_UNSUPPORTED, "tensor-core product: %s rows of %d elements", cu_type_name(a.job[j].w.type), a.job[j].w.ne0);
  }
  if (grid_y <= 0 || a.njobs <= 0) return BL_OK;
  const int rows_here = a.mode == EPI_SWIGLU ? GEMM_BM / 2 : GEMM_BM;
  int gx = 0;
  for (int j = 0; j < a.njobs; j++) {
    a.job[j].blocks = (a.job[j].w.ne1 + rows_here - 1) / rows_here;
    gx += a.job[j].blocks;
  }
  const dim3 grid(gx, grid_y);
  cudaError_t e = cudaErrorInvalidValue;
  switch (type) {
#define L(T) \
  case T: e = launch_t<T>(st, a, bn, grid); break;
    CU_TYPE_CASES(L)
#undef L
    default: return cu_fail(BL_E_UNSUPPORTED, "tensor-core product: %s", cu_type_name(type));
  }
  CU_TRY(e, "tensor-core product");
  return BL_OK;
}

int64_t cu_gemm_init(int smem_optin) {
  (void)smem_optin;
#define S(T)                                                                                                        \
  CU_TRY(cudaFuncSetAttribute(k_gemm<T, 32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemm_smem(32)), "configuring products"); \
  CU_TRY(cudaFuncSetAttribute(k_gemm<T, 64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)gemm_smem(64)), "configuring products"); \
  CU_OK(cu_kernel_prefs(k_gemm<T, 32>, "configuring products"));                                                                       \
  CU_OK(cu_kernel_prefs(k_gemm<T, 64>, "configuring products"));
  CU_TYPE_CASES(S)
#undef S
  return BL_OK;
}
