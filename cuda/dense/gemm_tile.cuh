// bloomery CUDA library: the warp tiles both prompt products share (gemm.cu's k_gemm, gemm16.cu's
// k_gemm16): a block's 128 weight rows x BN activation rows, warp w owning weight rows 32w..32w+31
// (two m16 tiles) against every activation row; one K step of 16 from shared memory, and the
// plain store / residual add of the finished tile. One sequence of mma for both kernels, so the
// two give the same bits.
#pragma once
#include "common.cuh"
#include "mma.cuh"

// The tile's accumulators cleared.
template <int BN>
__device__ __forceinline__ void tile_zero(float (&acc)[2][BN / 8][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
}

// acc += A[32w.., k..k+15] x B[.., k..k+15]^T (A rows lda halves apart, B rows ldb).
template <int BN>
__device__ __forceinline__ void tile_k16(float (&acc)[2][BN / 8][4], const __half *A, int lda, const __half *B, int ldb, int k, int warp, int lane) {
  uint32_t af[2][4];
#pragma unroll
  for (int mt = 0; mt < 2; mt++) ldsm_x4(af[mt], A + (32 * warp + 16 * mt + (lane & 15)) * lda + k + (lane >> 4) * 8);
#pragma unroll
  for (int np = 0; np < BN / 16; np++) {
    uint32_t b[4];
    ldsm_x4(b, B + (16 * np + (lane & 7) + ((lane >> 4) << 3)) * ldb + k + ((lane >> 3) & 1) * 8);
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
      mma16816(acc[mt][2 * np], af[mt], b[0], b[1]);
      mma16816(acc[mt][2 * np + 1], af[mt], b[2], b[3]);
    }
  }
}

// f(row, col, value) for each of the thread's tile entries: row in the block's 128 weight rows,
// col in its BN activation rows.
template <int BN, class F>
__device__ __forceinline__ void tile_each(const float (&acc)[2][BN / 8][4], int warp, int lane, F &&f) {
  const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; mt++)
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
      for (int q = 0; q < 4; q++) f(32 * warp + 16 * mt + gid + (q >= 2 ? 8 : 0), 8 * nt + 2 * tig + (q & 1), acc[mt][nt][q]);
}

// The tile's outputs: weight row r0 + row below nrows, activation row start + col for col <
// count, at c + (start + col) * ldc + r0 + row, plus its bias; added to what is there when add.
template <int BN>
__device__ __forceinline__ void tile_store(const float (&acc)[2][BN / 8][4], int r0, int nrows, int start, int count, float *c, int ldc,
                                           const float *bias, bool add, int warp, int lane) {
  tile_each<BN>(acc, warp, lane, [&](int row, int col, float v) {
    const int grow = r0 + row;
    if (grow >= nrows || col >= count) return;
    if (bias) v += bias[grow];
    float *cp = c + (size_t)(start + col) * ldc + grow;
    if (add) *cp += v;
    else *cp = v;
  });
}
