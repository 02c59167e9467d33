// bloomery CUDA library: a slot's recurrent state on the card (ffi/bloomery.h bl_cuda_rs_*): the delta-net
// layers' conv inputs and S matrices in the CPU's layout (ffi/cpu/deltanet.c), saved to and loaded from host
// memory, and speculative decoding's snapshots kept on the card. The forward passes write the state;
// these calls order after them on the context's stream.
#include "ctx.h"

static int64_t rs_ctx(const cu_ctx *c, int64_t slot) {
  if (!c) return cu_fail(BL_E_INVAL, "rs: null context");
  if (slot < 0 || slot >= c->p.kv_slots) return cu_fail(BL_E_INVAL, "rs: slot %lld out of range", (long long)slot);
  if (!c->dm.n_dn || !rs_slot_floats(c)) return cu_fail(BL_E_INVAL, "rs: this model keeps no recurrent state");
  return BL_OK;
}

static float *slot_rs(const cu_ctx *c, float *base, int64_t slot) { return base + (size_t)slot * rs_slot_floats(c); }

void cu_rs_free(cu_ctx *c) {
  if (c->rs_snap) (void)cudaFree(c->rs_snap);
  c->rs_snap = nullptr;
  c->rs_snap_ok.clear();
}

extern "C" int64_t bl_cuda_rs_bytes(uint64_t h) {
  const cu_ctx *c = reinterpret_cast<const cu_ctx *>(h);
  return c && c->dm.n_dn ? (int64_t)(rs_slot_floats(c) * sizeof(float)) : 0;
}

extern "C" int64_t bl_cuda_rs_save(uint64_t h, int64_t slot, void *dst) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  CU_OK(rs_ctx(c, slot));
  if (!dst) return cu_fail(BL_E_INVAL, "rs_save: null buffer");
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  CU_TRY(cudaStreamSynchronize(c->st), "saving the recurrent state");
  CU_TRY(cudaMemcpy(dst, slot_rs(c, c->rs, slot), rs_slot_floats(c) * sizeof(float), cudaMemcpyDeviceToHost), "saving the recurrent state");
  return BL_OK;
}

extern "C" int64_t bl_cuda_rs_load(uint64_t h, int64_t slot, const void *src) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  CU_OK(rs_ctx(c, slot));
  if (!src) return cu_fail(BL_E_INVAL, "rs_load: null buffer");
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  CU_TRY(cudaStreamSynchronize(c->st), "loading the recurrent state");
  CU_TRY(cudaMemcpy(slot_rs(c, c->rs, slot), src, rs_slot_floats(c) * sizeof(float), cudaMemcpyHostToDevice), "loading the recurrent state");
  return BL_OK;
}

extern "C" int64_t bl_cuda_rs_snap_reserve(uint64_t h) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c) return cu_fail(BL_E_INVAL, "rs_snap: null context");
  if (c->rs_snap || !c->dm.n_dn) return BL_OK;
  const size_t bytes = (size_t)c->p.kv_slots * rs_slot_floats(c) * sizeof(float);
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  const cudaError_t e = cudaMalloc(reinterpret_cast<void **>(&c->rs_snap), bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    c->rs_snap = nullptr;
    return cu_fail(BL_E_NOMEM, "rs_snap: the card has no room for the slots' recurrent state snapshots (%zu MiB)", bytes >> 20);
  }
  c->rs_snap_ok.assign((size_t)c->p.kv_slots, 0);
  return BL_OK;
}

static int64_t snap_ctx(cu_ctx *c, int64_t slot) {
  CU_OK(rs_ctx(c, slot));
  if (!c->rs_snap) return cu_fail(BL_E_INVAL, "rs_snap: no room reserved (bl_cuda_rs_snap_reserve)");
  return BL_OK;
}

extern "C" int64_t bl_cuda_rs_snap_take(uint64_t h, int64_t slot) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  CU_OK(snap_ctx(c, slot));
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  CU_TRY(cudaMemcpyAsync(slot_rs(c, c->rs_snap, slot), slot_rs(c, c->rs, slot), rs_slot_floats(c) * sizeof(float), cudaMemcpyDeviceToDevice, c->st),
         "taking a recurrent state snapshot");
  c->rs_snap_ok[(size_t)slot] = 1;
  return BL_OK;
}

extern "C" int64_t bl_cuda_rs_snap_back(uint64_t h, int64_t slot) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  CU_OK(snap_ctx(c, slot));
  if (!c->rs_snap_ok[(size_t)slot]) return cu_fail(BL_E_INVAL, "rs_snap_back: slot %lld took no snapshot", (long long)slot);
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  CU_TRY(cudaMemcpyAsync(slot_rs(c, c->rs, slot), slot_rs(c, c->rs_snap, slot), rs_slot_floats(c) * sizeof(float), cudaMemcpyDeviceToDevice, c->st),
         "putting a recurrent state snapshot back");
  return BL_OK;
}
