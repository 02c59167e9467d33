// bloomery CUDA library: the error store (message of the last failure on this thread), the type
// geometry table, and the driver/device probe. Nothing here touches the GPU before it is asked:
// the library loads on machines with no driver, and every entry point returns a status.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common.cuh"
#include "internal.h"

static thread_local char g_err[1024];

int64_t cu_fail(int64_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof g_err, fmt, ap);
  va_end(ap);
  return status;
}

int64_t cu_fail_cuda(cudaError_t e, const char *what) {
  // a sticky error poisons the context; say so, the caller can only free it
  return cu_fail(BL_E_DEVICE, "%s: CUDA error %d (%s): %s", what, (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" const char *bl_cuda_last_error(void) { return g_err; }
extern "C" int64_t bl_cuda_abi_version(void) { return BL_ABI_VERSION; }

bool cu_type_geom_of(int type, cu_type_geom *g) {
  switch (type) {
#define G(T, N, BE, BB, UPB, UE) \
  case T: *g = {N, BE, BB, UPB, UE}; return true;
    G(T_F32, "F32", 4, 16, 1, 4)
    G(T_F16, "F16", 4, 8, 1, 4)
    G(T_BF16, "BF16", 4, 8, 1, 4)
    G(T_Q4_0, "Q4_0", 32, 18, 4, 8)
    G(T_Q4_1, "Q4_1", 32, 20, 4, 8)
    G(T_Q5_0, "Q5_0", 32, 22, 4, 8)
    G(T_Q5_1, "Q5_1", 32, 24, 4, 8)
    G(T_Q8_0, "Q8_0", 32, 34, 4, 8)
    G(T_IQ4_NL, "IQ4_NL", 32, 18, 4, 8)
    G(T_MXFP4, "MXFP4", 32, 17, 4, 8)
    G(T_Q4_K, "Q4_K", 256, 144, 8, 32)
    G(T_Q5_K, "Q5_K", 256, 176, 8, 32)
    G(T_Q6_K, "Q6_K", 256, 210, 8, 32)
    G(T_IQ4_XS, "IQ4_XS", 256, 136, 8, 32)
    G(T_Q2_K, "Q2_K", 256, 84, 8, 32)
    G(T_Q3_K, "Q3_K", 256, 110, 8, 32)
    G(T_IQ2_XXS, "IQ2_XXS", 256, 66, 8, 32)
    G(T_IQ2_XS, "IQ2_XS", 256, 74, 8, 32)
    G(T_IQ2_S, "IQ2_S", 256, 82, 8, 32)
    G(T_IQ3_XXS, "IQ3_XXS", 256, 98, 8, 32)
    G(T_IQ3_S, "IQ3_S", 256, 110, 8, 32)
    G(T_IQ1_S, "IQ1_S", 256, 50, 8, 32)
    G(T_IQ1_M, "IQ1_M", 256, 56, 8, 32)
#undef G
    default: return false;
  }
}

const char *cu_type_name(int type) {
  cu_type_geom g;
  if (cu_type_geom_of(type, &g)) return g.name;
  switch (type) { // the ggml types the card has no kernels for, named in its refusals
    case 9: return "Q8_1";
    case 15: return "Q8_K";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    default: break;
  }
  static thread_local char buf[32];
  snprintf(buf, sizeof buf, "ggml type %d", type);
  return buf;
}

// Checked once per process: the driver is present and new enough, and how many devices it shows.
int64_t cu_probe(int *n_devices, int *driver) {
  int drv = 0;
  cudaError_t e = cudaDriverGetVersion(&drv);
  if (e != cudaSuccess) return cu_fail_cuda(e, "querying the NVIDIA driver");
  *driver = drv;
  if (drv == 0) return cu_fail(BL_E_DEVICE, "no NVIDIA driver is installed (libcuda.so.1 was not found)");
  if (drv < CUDART_VERSION)
    return cu_fail(BL_E_UNSUPPORTED,
                   "the NVIDIA driver supports CUDA %d.%d; this build needs CUDA %d.%d (driver 580 or newer): update the driver, or run on the CPU (-ngl 0)",
                   drv / 1000, (drv % 1000) / 10, CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  int n = 0;
  e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
    (void)cudaGetLastError();
    return cu_fail(BL_E_DEVICE, "the NVIDIA driver (CUDA %d.%d) shows no CUDA device", drv / 1000, (drv % 1000) / 10);
  }
  if (e != cudaSuccess) return cu_fail_cuda(e, "counting CUDA devices");
  *n_devices = n;
  return BL_OK;
}

extern "C" int64_t bl_cuda_probe(int64_t *n_devices, int64_t *driver_version) {
  int n = 0, drv = 0;
  int64_t s = cu_probe(&n, &drv);
  if (n_devices) *n_devices = s == BL_OK ? n : 0;
  if (driver_version) *driver_version = drv;
  return s;
}

extern "C" int64_t bl_cuda_device_info(int64_t dev, bl_cuda_device *out) {
  if (!out) return cu_fail(BL_E_INVAL, "device_info: null argument");
  int n = 0, drv = 0;
  CU_OK(cu_probe(&n, &drv));
  if (dev < 0 || dev >= n) return cu_fail(BL_E_INVAL, "device %lld does not exist (%d CUDA devices)", (long long)dev, n);
  cudaDeviceProp p;
  CU_TRY(cudaGetDeviceProperties(&p, (int)dev), "reading the device properties");
  CU_TRY(cudaSetDevice((int)dev), "selecting the device");
  size_t fr = 0, tot = 0;
  CU_TRY(cudaMemGetInfo(&fr, &tot), "reading the device memory");
  int rt = 0;
  (void)cudaRuntimeGetVersion(&rt);
  memset(out, 0, sizeof *out);
  out->index = dev;
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->sm_count = p.multiProcessorCount;
  out->total_bytes = (int64_t)tot;
  out->free_bytes = (int64_t)fr;
  out->driver_version = drv;
  out->runtime_version = rt;
  out->l2_bytes = p.l2CacheSize;
  out->smem_optin = (int64_t)p.sharedMemPerBlockOptin;
  const size_t nl = strnlen(p.name, sizeof out->name - 1);
  memcpy(out->name, p.name, nl);
  out->name[nl] = 0;
  out->has_code = cu_has_code((int)dev) ? 1 : 0;
  return BL_OK;
}
