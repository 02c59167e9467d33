// bloomery CUDA library: a slot's KV cache saved to and loaded from host memory position-major
// (for each position: every layer's K row, then its V row, or the K row alone where the values
// live in K (latent attention) - the CPU library's layout, so a prefix
// of a saved state is itself a saved state of fewer positions, and prompt-cache entries and slot
// files mean the same on both backends). A chunk of positions at a time goes through a device
// staging buffer (gather and scatter kernels) and two pinned host buffers, so the copies run at
// PCIe speed instead of pageable-memcpy speed; the host-side copy of one chunk overlaps the
// transfer of the next.
#include <string.h>

#include "ctx.h"

namespace {

constexpr int64_t KV_CHUNK_BYTES = 32ll << 20;  // staging per buffer (device, and each pinned host one)

// Staged unit i (position p of the chunk, layer l, K or V, unit u of the row) and where it lives
// in the cache: K (kv 0) or V (kv 1) at unit `at`.
struct kv_unit {
  int64_t at;
  int kv;
};
__device__ __forceinline__ kv_unit kv_unit_of(int64_t i, int64_t layer_units, int64_t slot_units, int64_t row_units, int layers, int planes, int64_t p0) {
  const int64_t per_pos = (int64_t)layers * planes * row_units;
  const int64_t p = i / per_pos, r = i % per_pos;
  const int64_t l = r / (planes * row_units), kv = (r / row_units) % planes, u = r % row_units;
  return {l * layer_units + slot_units + (p0 + p) * row_units + u, (int)kv};
}

// The chunk's n positions of a slot gathered into the saved layout, and scattered back.
__global__ void kv_gather(const uint4 *kc, const uint4 *vc, uint4 *stage, int64_t layer_units, int64_t slot_units,
                          int64_t row_units, int layers, int planes, int64_t p0, int64_t n) {
  const int64_t total = n * layers * planes * row_units;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const kv_unit w = kv_unit_of(i, layer_units, slot_units, row_units, layers, planes, p0);
    stage[i] = w.kv ? vc[w.at] : kc[w.at];
  }
}

__global__ void kv_scatter(uint4 *kc, uint4 *vc, const uint4 *stage, int64_t layer_units, int64_t slot_units,
                           int64_t row_units, int layers, int planes, int64_t p0, int64_t n) {
  const int64_t total = n * layers * planes * row_units;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const kv_unit w = kv_unit_of(i, layer_units, slot_units, row_units, layers, planes, p0);
    (w.kv ? vc : kc)[w.at] = stage[i];
  }
}

int64_t kv_check(const cu_ctx *c, int64_t slot, int64_t n) {
  if (!c) return cu_fail(BL_E_INVAL, "kv: null context");
  if (slot < 0 || slot >= c->p.kv_slots) return cu_fail(BL_E_INVAL, "kv: slot %lld out of range", (long long)slot);
  if (n < 0 || n > c->p.kv_ctx) return cu_fail(BL_E_INVAL, "kv: %lld positions out of range", (long long)n);
  return BL_OK;
}

int64_t pos_bytes(const cu_ctx *c) { return c->p.kv_layers * c->p.kv_k_dim * 2 * kv_planes(c); }

// The staging buffers, made at the first save or load (a context that never moves KV pays nothing).
int64_t stage_ready(cu_ctx *c) {
  if (c->kv_stage) return BL_OK;
  const int64_t per = pos_bytes(c);
  c->kv_stage_pos = per > 0 ? (KV_CHUNK_BYTES / per > 0 ? KV_CHUNK_BYTES / per : 1) : 1;
  const size_t bytes = (size_t)(c->kv_stage_pos * per);
  CU_TRY(cudaMalloc(&c->kv_stage, bytes), "allocating the KV staging buffer");
  for (int i = 0; i < 2; i++) CU_TRY(cudaHostAlloc(&c->kv_host[i], bytes, cudaHostAllocDefault), "allocating the pinned KV staging buffers");
  for (int i = 0; i < 2; i++) CU_TRY(cudaEventCreateWithFlags(&c->kv_ev[i], cudaEventDisableTiming), "creating the KV staging events");
  return BL_OK;
}

int64_t kv_move(cu_ctx *c, int64_t slot, int64_t n, uint8_t *buf, bool save) {
  if ((c->p.kv_k_dim * 2) % 16 != 0) return cu_fail(BL_E_UNSUPPORTED, "kv: rows of %lld bytes are not whole 16-byte units", (long long)(c->p.kv_k_dim * 2));
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  CU_TRY(cudaStreamSynchronize(c->st), "finishing the step");
  CU_OK(stage_ready(c));
  const int64_t per = pos_bytes(c), row_units = c->p.kv_k_dim * 2 / 16;
  const int64_t layer_units = (int64_t)kv_layer_elems(c) * 2 / 16, slot_units = slot * c->p.kv_ctx * row_units;
  const int threads = 256, blocks = 4 * c->sm_count;
  uint4 *kc = reinterpret_cast<uint4 *>(c->kc), *vc = reinterpret_cast<uint4 *>(c->vc), *stage = reinterpret_cast<uint4 *>(c->kv_stage);
  int64_t pending = -1;  // save: the chunk whose bytes wait in kv_host[pending % 2]
  int64_t pending_n = 0;
  for (int64_t p0 = 0, k = 0; p0 < n; p0 += c->kv_stage_pos, k++) {
    const int64_t m = n - p0 < c->kv_stage_pos ? n - p0 : c->kv_stage_pos;
    uint8_t *h = c->kv_host[k % 2];
    const size_t bytes = (size_t)(m * per);
    if (save) {
      kv_gather<<<blocks, threads, 0, c->st>>>(kc, vc, stage, layer_units, slot_units, row_units, (int)c->p.kv_layers, kv_planes(c), p0, m);
      CU_TRY(cudaGetLastError(), "gathering KV");
      CU_TRY(cudaMemcpyAsync(h, c->kv_stage, bytes, cudaMemcpyDeviceToHost, c->st), "saving KV");
      CU_TRY(cudaEventRecord(c->kv_ev[k % 2], c->st), "saving KV");
      if (pending >= 0) {  // copy out the previous chunk while this one transfers
        CU_TRY(cudaEventSynchronize(c->kv_ev[pending % 2]), "saving KV");
        memcpy(buf + pending * c->kv_stage_pos * per, c->kv_host[pending % 2], (size_t)(pending_n * per));
      }
      pending = k;
      pending_n = m;
    } else {
      CU_TRY(cudaEventSynchronize(c->kv_ev[k % 2]), "loading KV");  // the transfer that last used this buffer is done
      memcpy(h, buf + p0 * per, bytes);
      CU_TRY(cudaMemcpyAsync(c->kv_stage, h, bytes, cudaMemcpyHostToDevice, c->st), "loading KV");
      kv_scatter<<<blocks, threads, 0, c->st>>>(kc, vc, stage, layer_units, slot_units, row_units, (int)c->p.kv_layers, kv_planes(c), p0, m);
      CU_TRY(cudaGetLastError(), "scattering KV");
      CU_TRY(cudaEventRecord(c->kv_ev[k % 2], c->st), "loading KV");
    }
  }
  if (save && pending >= 0) {
    CU_TRY(cudaEventSynchronize(c->kv_ev[pending % 2]), "saving KV");
    memcpy(buf + pending * c->kv_stage_pos * per, c->kv_host[pending % 2], (size_t)(pending_n * per));
  }
  CU_TRY(cudaStreamSynchronize(c->st), save ? "saving KV" : "loading KV");
  return BL_OK;
}

}  // namespace

void cu_kv_stage_free(cu_ctx *c) {
  if (c->kv_stage) (void)cudaFree(c->kv_stage);
  for (int i = 0; i < 2; i++) {
    if (c->kv_host[i]) (void)cudaFreeHost(c->kv_host[i]);
    if (c->kv_ev[i]) (void)cudaEventDestroy(c->kv_ev[i]);
  }
  c->kv_stage = nullptr;
}

extern "C" int64_t bl_cuda_kv_pos_bytes(uint64_t h) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  return c ? pos_bytes(c) : 0;
}

extern "C" int64_t bl_cuda_kv_save(uint64_t h, int64_t slot, int64_t n, void *dst) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  CU_OK(kv_check(c, slot, n));
  if (!dst) return cu_fail(BL_E_INVAL, "kv_save: null buffer");
  return kv_move(c, slot, n, static_cast<uint8_t *>(dst), true);
}

extern "C" int64_t bl_cuda_kv_load(uint64_t h, int64_t slot, int64_t n, const void *src) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  CU_OK(kv_check(c, slot, n));
  if (!src) return cu_fail(BL_E_INVAL, "kv_load: null buffer");
  return kv_move(c, slot, n, static_cast<uint8_t *>(const_cast<void *>(src)), false);
}

// ---- saved states on the card (the prompt cache's card tier) ----
// A state is a device buffer of n positions in the saved layout; restoring its first m <= n
// positions is one scatter, saving one gather, both at device-memory speed.
namespace {
struct kv_stash {
  void *d;
  int64_t n;
};
}  // namespace

extern "C" int64_t bl_cuda_kv_stash(uint64_t h, int64_t slot, int64_t n, uint64_t *out) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  CU_OK(kv_check(c, slot, n));
  if (!out || n <= 0) return cu_fail(BL_E_INVAL, "kv_stash: %s", out ? "no positions" : "null handle");
  if ((c->p.kv_k_dim * 2) % 16 != 0) return cu_fail(BL_E_UNSUPPORTED, "kv: rows of %lld bytes are not whole 16-byte units", (long long)(c->p.kv_k_dim * 2));
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  kv_stash *s = new (std::nothrow) kv_stash{nullptr, n};
  if (!s) return cu_fail(BL_E_NOMEM, "kv_stash: out of host memory");
  const cudaError_t e = cudaMalloc(&s->d, (size_t)(n * pos_bytes(c)));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    delete s;
    return cu_fail(BL_E_NOMEM, "kv_stash: %lld positions (%lld MiB) do not fit the card's free memory", (long long)n, (long long)(n * pos_bytes(c) >> 20));
  }
  const int64_t row_units = c->p.kv_k_dim * 2 / 16, layer_units = (int64_t)kv_layer_elems(c) * 2 / 16;
  kv_gather<<<4 * c->sm_count, 256, 0, c->st>>>(reinterpret_cast<const uint4 *>(c->kc), reinterpret_cast<const uint4 *>(c->vc),
                                                 static_cast<uint4 *>(s->d), layer_units, slot * c->p.kv_ctx * row_units, row_units,
                                                 (int)c->p.kv_layers, kv_planes(c), 0, n);
  const cudaError_t le = cudaGetLastError();
  if (le != cudaSuccess) {
    (void)cudaFree(s->d);
    delete s;
    return cu_fail_cuda(le, "kv_stash: gathering KV");
  }
  *out = reinterpret_cast<uint64_t>(s);
  return BL_OK;
}

extern "C" int64_t bl_cuda_kv_unstash(uint64_t h, uint64_t stash, int64_t slot, int64_t n) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  const kv_stash *s = reinterpret_cast<const kv_stash *>(stash);
  CU_OK(kv_check(c, slot, n));
  if (!s) return cu_fail(BL_E_INVAL, "kv_unstash: null state");
  if (n > s->n) return cu_fail(BL_E_INVAL, "kv_unstash: %lld positions asked of a state of %lld", (long long)n, (long long)s->n);
  if (n == 0) return BL_OK;
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  const int64_t row_units = c->p.kv_k_dim * 2 / 16, layer_units = (int64_t)kv_layer_elems(c) * 2 / 16;
  kv_scatter<<<4 * c->sm_count, 256, 0, c->st>>>(reinterpret_cast<uint4 *>(c->kc), reinterpret_cast<uint4 *>(c->vc),
                                                  static_cast<const uint4 *>(s->d), layer_units, slot * c->p.kv_ctx * row_units, row_units,
                                                  (int)c->p.kv_layers, kv_planes(c), 0, n);
  CU_TRY(cudaGetLastError(), "kv_unstash: scattering KV");
  return BL_OK;
}

extern "C" int64_t bl_cuda_kv_stash_free(uint64_t h, uint64_t stash) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  kv_stash *s = reinterpret_cast<kv_stash *>(stash);
  if (!c || !s) return BL_OK;
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  (void)cudaFree(s->d);  // synchronises the device: no step still reads it
  delete s;
  return BL_OK;
}

extern "C" int64_t bl_cuda_free_bytes(uint64_t h, int64_t *out) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c || !out) return cu_fail(BL_E_INVAL, "free_bytes: null argument");
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  size_t fr = 0, tot = 0;
  CU_TRY(cudaMemGetInfo(&fr, &tot), "reading the device memory");
  *out = (int64_t)fr;
  return BL_OK;
}
