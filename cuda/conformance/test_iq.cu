// bloomery CUDA library: the test entry points' paths for the grid quant types (quants_iq.cuh):
// stored blocks dequantized by the card (bl_cuda_test_dequant) and rows dotted with one int8
// activation row by dp4a (bl_cuda_test_matmul path 3), on device copies the caller made. No model
// kernel reads these types yet (the card refuses them at load).
#include "internal.h"
#include "dot8.cuh"

// block b's group u (thread u) dequantized into y + 256 b
template <int T>
__global__ void k_iq_dequant(const uint8_t *src, int nblk, float *y) {
  using Q = qt<T>;
  const int b = blockIdx.x, u = threadIdx.x;
  if (b >= nblk || u >= Q::UPB) return;
  float *yb = y + (size_t)b * Q::BE;
  Q::unit(src + (size_t)b * Q::BB, u, [&](int pos, float a, float c, float d, float e) {
    yb[pos] = a;
    yb[pos + 1] = c;
    yb[pos + 2] = d;
    yb[pos + 3] = e;
  });
}

// y[r] = row r . x with x quantized to the x8 layout (quantize_x8) in each block; a warp a row
template <int T>
__global__ void k_iq_dot8(const uint8_t *w, int64_t ws, int rows, const float *x, int n, float *y) {
  extern __shared__ __align__(16) uint8_t iq_sm[];
  float *xs = reinterpret_cast<float *>(iq_sm);
  for (int i = threadIdx.x; i < n; i += blockDim.x) xs[i] = x[i];
  __syncthreads();
  const x8v xv = quantize_x8(xs, n, iq_sm + (size_t)n * 4);
  const int lane = threadIdx.x & 31, nwarp = blockDim.x >> 5;
  for (int r = blockIdx.x * nwarp + (threadIdx.x >> 5); r < rows; r += gridDim.x * nwarp) {
    float v = dot8_row<T>(w + (size_t)r * ws, n / qt<T>::BE, xv, 0, lane);
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) y[r] = v;
  }
}

bool cu_iq_test_geom(int64_t type, cu_type_geom *g) {
  if (!cu_iq_type((int)type)) return false;
  *g = {cu_type_name((int)type), 256, cu_iq_bytes((int)type), 8, 32};
  return true;
}

int64_t cu_test_iq_dequant(int64_t type, const uint8_t *src, int64_t n, float *y) {
  const int nblk = (int)(n / 256);
  bool ok = true;
  const bool known = dispatch_iq_type((int)type, [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    k_iq_dequant<T><<<nblk, 32>>>(src, nblk, y);
    ok = cudaGetLastError() == cudaSuccess;
  });
  if (!known) return cu_fail(BL_E_UNSUPPORTED, "test_dequant: %s is not a grid type", cu_type_name((int)type));
  if (!ok) return cu_fail(BL_E_DEVICE, "test_dequant: launching k_iq_dequant for %s", cu_type_name((int)type));
  return BL_OK;
}

int64_t cu_test_iq_dot8(int64_t type, const uint8_t *w, int64_t ws, int64_t rows, const float *x, int64_t n, float *y) {
  if (n <= 0 || n % 256 || n > 8192 || rows <= 0 || rows > (1 << 24))
    return cu_fail(BL_E_INVAL, "test_matmul: path 3 takes %s rows of 256..8192 elements (whole blocks), not %lld", cu_type_name((int)type), (long long)n);
  const size_t smem = (size_t)n * 4 + (size_t)x8_bytes((int)n);
  const int nblk = (int)((rows + 3) / 4);
  bool ok = true;
  const bool known = dispatch_iq_type((int)type, [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    k_iq_dot8<T><<<nblk, 128, smem>>>(w, ws, (int)rows, x, (int)n, y);
    ok = cudaGetLastError() == cudaSuccess;
  });
  if (!known) return cu_fail(BL_E_UNSUPPORTED, "test_matmul: %s is not a grid type", cu_type_name((int)type));
  if (!ok) return cu_fail(BL_E_DEVICE, "test_matmul: launching k_iq_dot8 for %s", cu_type_name((int)type));
  return BL_OK;
}
