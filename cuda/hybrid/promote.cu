// bloomery CUDA library: run-time promotion of host experts (issue 6). Each layer whose routed
// experts stay in host memory gets P card slots; one-token steps count every pick on the card, and
// a pass between steps moves the hottest experts of each such layer into its slots (copies on the
// copy stream, published to the steps only once they are complete, so no step waits for them) and
// evicts cold ones. A step's picks are partitioned on the card: resident ones are computed by the
// card's one-token kernels from the slots, the rest by the CPU (hybrid.cu). Layers whose experts are
// on disk (cu_host_on_disk) have no host bytes to copy from: they get no slots and are never promoted.
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <numeric>

#include "ctx.h"

// Steps between passes, the counts' decay a pass, moves a pass, and how much hotter a candidate must
// be than the slot's expert it replaces.
#define PROMOTE_EVERY 4
#define PROMOTE_DECAY 0.75f
#define PROMOTE_MAX_MOVES 192
#define PROMOTE_MARGIN 1.25f


static void free_slots(cu_ctx *c) {
  if (c->hy->slot_pool) (void)cudaFree(c->hy->slot_pool);
  if (c->hy->res_d) (void)cudaFree(c->hy->res_d);
  if (c->hy->cnt_d) (void)cudaFree(c->hy->cnt_d);
  if (c->hy->hits_d) (void)cudaFree(c->hy->hits_d);
  if (c->hy->part_i) (void)cudaFree(c->hy->part_i);
  if (c->hy->part_f) (void)cudaFree(c->hy->part_f);
  if (c->hy->hn_h) (void)cudaFreeHost(c->hy->hn_h);
  if (c->hy->promote_ev) (void)cudaEventDestroy(c->hy->promote_ev);
  if (c->hy->evict_ev) (void)cudaEventDestroy(c->hy->evict_ev);
  c->hy->slot_pool = nullptr;
  c->hy->res_d = c->hy->part_i = c->hy->hn_h = nullptr;
  c->hy->cnt_d = c->hy->hits_d = nullptr;
  c->hy->part_f = nullptr;
  c->hy->promote_ev = c->hy->evict_ev = nullptr;
  c->hy->res_h.clear();
  c->hy->slot_of.clear();
  c->hy->heat.clear();
  c->hy->pending.clear();
  c->hy->promote_slots = 0;
  (void)cudaGetLastError();
}

void cu_promote_free(cu_ctx *c) { free_slots(c); }

// Host layer j's place in the slot pool: the host layers in memory before it (layers on disk have none).
static int pool_index(const cu_ctx *c, int j) {
  int n = 0;
  for (int q = 0; q < j; q++) n += !cu_host_on_disk(*cu_host_block_at(c, q));
  return n;
}

int64_t cu_set_promote_slots(cu_ctx *c, int64_t slots) {
  const int64_t X = c->dm.X, K = c->dm.K, H = c->dm.n_host;
  const int64_t HR = pool_index(c, (int)H); // the host layers in memory: those with slots
  if (slots < 0 || slots > X) return cu_fail(BL_E_INVAL, "promotion: %lld slots a layer (0..%lld)", (long long)slots, (long long)X);
  if (slots > 0 && slots < K) return cu_fail(BL_E_INVAL, "promotion: %lld slots a layer, fewer than a token's %lld picks", (long long)slots, (long long)K);
  if (slots > 0 && H == 0) return cu_fail(BL_E_INVAL, "promotion: no experts stay in host memory");
  if (slots > 0 && !c->hy->host_fn) return cu_fail(BL_E_INVAL, "promotion: the host hook is not set");
  if (slots > 0 && HR == 0)
    return cu_fail(BL_E_INVAL, "promotion: the experts of all %lld host layers are read from disk (the NVMe tier), which promotion does not copy from; "
                   "give the host experts room in host memory (--host-budget) or leave promotion off", (long long)H);
  CU_TRY(cudaStreamSynchronize(c->st), "promotion");
  if (c->hy->cs) CU_TRY(cudaStreamSynchronize(c->hy->cs), "promotion");
  cu_drop_graphs(c);
  free_slots(c);
  if (slots == 0) return BL_OK;
  const cu_blk *b0 = cu_host_block_at(c, 0);
  if (!b0) return cu_fail(BL_E_INVAL, "promotion: no host block");
  // every host layer has the same expert geometry in the models bloomery runs; slots are sized by the largest
  size_t per[3] = {0, 0, 0};
  for (const cu_blk &b : c->w->blocks)
    if (b.host && !cu_host_on_disk(b))
      for (int k = 0; k < 3; k++) per[k] = std::max(per[k], (size_t)b.t[CU_MOE_GATE + k].nb2);
  c->hy->slot_off[0] = 0;
  c->hy->slot_off[1] = cu_align256(per[0] * slots);
  c->hy->slot_off[2] = c->hy->slot_off[1] + cu_align256(per[1] * slots);
  c->hy->slot_layer_bytes = c->hy->slot_off[2] + cu_align256(per[2] * slots);
  const size_t pool = c->hy->slot_layer_bytes * (size_t)HR;
  size_t fr = 0, tot = 0;
  CU_TRY(cudaMemGetInfo(&fr, &tot), "promotion: reading the device memory");
  if (pool + ((size_t)512 << 20) > fr)
    return cu_fail(BL_E_NOMEM, "promotion: %lld slots for %lld layers need %.2f GiB, %.2f GiB free", (long long)slots, (long long)HR, pool / 1073741824.0, fr / 1073741824.0);
  CU_TRY(cudaMalloc(&c->hy->slot_pool, pool), "promotion: allocating the slots");
  CU_TRY(cudaMemset(c->hy->slot_pool, 0, pool), "promotion: clearing the slots");
  CU_TRY(cudaMalloc(&c->hy->res_d, (size_t)H * X * sizeof(int32_t)), "promotion: allocating tables");
  CU_TRY(cudaMemset(c->hy->res_d, 0xff, (size_t)H * X * sizeof(int32_t)), "promotion: clearing tables");
  CU_TRY(cudaMalloc(&c->hy->cnt_d, (size_t)H * X * sizeof(uint32_t)), "promotion: allocating tables");
  CU_TRY(cudaMemset(c->hy->cnt_d, 0, (size_t)H * X * sizeof(uint32_t)), "promotion: clearing tables");
  CU_TRY(cudaMalloc(&c->hy->hits_d, 2 * sizeof(uint32_t) * 2), "promotion: allocating tables");
  CU_TRY(cudaMemset(c->hy->hits_d, 0, 2 * sizeof(uint32_t) * 2), "promotion: clearing tables");
  CU_TRY(cudaMalloc(&c->hy->part_i, (size_t)(2 * K + 1) * sizeof(int32_t)), "promotion: allocating tables");
  CU_TRY(cudaMalloc(&c->hy->part_f, (size_t)(2 * K) * sizeof(float)), "promotion: allocating tables");
  CU_TRY(cudaMallocHost(&c->hy->hn_h, (size_t)(K + 1) * sizeof(int32_t)), "promotion: allocating tables");
  CU_TRY(cudaEventCreateWithFlags(&c->hy->promote_ev, cudaEventDisableTiming), "promotion: events");
  CU_TRY(cudaEventCreateWithFlags(&c->hy->evict_ev, cudaEventDisableTiming), "promotion: events");
  c->hy->res_h.assign((size_t)H * X, -1);
  c->hy->slot_of.assign((size_t)H * slots, -1);
  c->hy->heat.assign((size_t)H * X, 0.0f);
  c->hy->promote_slots = (int)slots;
  c->hy->steps_since_pass = 0;
  return BL_OK;
}

// The slots of host layer j (in memory) as the one-token kernels read them (expert index = slot).
void cu_slot_dmats(const cu_ctx *c, const cu_blk &b, dmat out[3]) {
  uint8_t *base = c->hy->slot_pool + (size_t)pool_index(c, b.host_j) * c->hy->slot_layer_bytes;
  for (int k = 0; k < 3; k++) {
    out[k] = b.t[CU_MOE_GATE + k];
    out[k].d = base + c->hy->slot_off[k];
    out[k].ne2 = c->hy->promote_slots;
  }
}

// One token's K picks: counted; resident ones to the card's list (slots, weights; padded with slot
// 0 at weight 0 so the kernels always walk K), the rest to the host's (experts, weights, count).
__global__ void k_partition(const int32_t *sel, const float *selw, int K, const int32_t *res, uint32_t *cnt, int32_t *csel, float *cw,
                            int32_t *hsel, float *hw, int32_t *hn, uint32_t *hits) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int nc = 0, nh = 0;
  for (int i = 0; i < K; i++) {
    const int e = sel[i];
    const float w = selw[i];
    cnt[e]++;
    const int s = res[e];
    if (s >= 0) {
      csel[nc] = s;
      cw[nc++] = w;
    } else {
      hsel[nh] = e;
      hw[nh++] = w;
    }
  }
  for (int i = nc; i < K; i++) {
    csel[i] = 0;
    cw[i] = 0.0f;
  }
  *hn = nh;
  hits[0] += (uint32_t)nc;
  hits[1] += (uint32_t)K;
}

int64_t cu_partition(cu_ctx *c, const cu_blk &b) {
  const int K = b.n_used, X = (int)c->dm.X;
  k_partition<<<1, 32, 0, c->st>>>(c->sel, c->selw, K, c->hy->res_d + (size_t)b.host_j * X, c->hy->cnt_d + (size_t)b.host_j * X, c->hy->part_i, c->hy->part_f,
                                   c->hy->part_i + K, c->hy->part_f + K, c->hy->part_i + 2 * K, c->hy->hits_d);
  CU_TRY(cudaGetLastError(), "partitioning the picks");
  return BL_OK;
}

// Between steps (the stream idle): publish finished moves; every PROMOTE_EVERY steps, read the
// counts, decay the heat and start the next moves (evictions published at once, copies on the
// copy stream after them).
int64_t cu_promote_pass(cu_ctx *c) {
  if (c->hy->promote_slots == 0) return BL_OK;
  const int X = (int)c->dm.X, P = c->hy->promote_slots, H = (int)c->dm.n_host;
  if (!c->hy->pending.empty()) {
    const cudaError_t q = cudaEventQuery(c->hy->promote_ev);
    if (q == cudaErrorNotReady) return BL_OK;
    if (q != cudaSuccess) return cu_fail_cuda(q, "promotion: copying experts");
    for (size_t i = 0; i + 2 < c->hy->pending.size(); i += 3) {
      const int j = c->hy->pending[i], e = c->hy->pending[i + 1], s = c->hy->pending[i + 2];
      c->hy->res_h[(size_t)j * X + e] = s;
      c->hy->slot_of[(size_t)j * P + s] = e;
    }
    c->hy->n_moves += (int64_t)(c->hy->pending.size() / 3);
    c->hy->pending.clear();
    CU_TRY(cudaMemcpyAsync(c->hy->res_d, c->hy->res_h.data(), c->hy->res_h.size() * sizeof(int32_t), cudaMemcpyHostToDevice, c->st), "promotion: publishing");
    CU_TRY(cudaStreamSynchronize(c->st), "promotion: publishing"); // res_h is pageable
  }
  if (++c->hy->steps_since_pass < PROMOTE_EVERY) return BL_OK;
  c->hy->steps_since_pass = 0;
  std::vector<uint32_t> cnt((size_t)H * X);
  CU_TRY(cudaMemcpyAsync(cnt.data(), c->hy->cnt_d, cnt.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost, c->st), "promotion: reading counts");
  CU_TRY(cudaMemsetAsync(c->hy->cnt_d, 0, cnt.size() * sizeof(uint32_t), c->st), "promotion: reading counts");
  CU_TRY(cudaStreamSynchronize(c->st), "promotion: reading counts");
  for (size_t i = 0; i < cnt.size(); i++) c->hy->heat[i] = c->hy->heat[i] * PROMOTE_DECAY + (float)cnt[i];
  int moves = 0;
  std::vector<int> order(X);
  for (int j = 0; j < H && moves < PROMOTE_MAX_MOVES; j++) {
    const cu_blk *b = cu_host_block_at(c, j);
    if (!b || cu_host_on_disk(*b)) continue;
    const float *heat = &c->hy->heat[(size_t)j * X];
    int32_t *res = &c->hy->res_h[(size_t)j * X], *slots = &c->hy->slot_of[(size_t)j * P];
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b2) { return heat[a] > heat[b2]; });
    for (int r = 0; r < P && moves < PROMOTE_MAX_MOVES; r++) {
      const int e = order[r];
      if (res[e] >= 0 || heat[e] <= 0) continue;
      // the victim: an empty slot, else the coldest resident expert (-2: a slot this pass refills)
      int s = -1;
      float cold = 0;
      for (int q = 0; q < P; q++) {
        if (slots[q] == -2) continue;
        if (slots[q] == -1) {
          s = q;
          cold = -1;
          break;
        }
        if (s < 0 || heat[slots[q]] < cold) {
          s = q;
          cold = heat[slots[q]];
        }
      }
      if (s < 0 || (cold >= 0 && heat[e] < cold * PROMOTE_MARGIN)) continue;
      if (slots[s] >= 0) res[slots[s]] = -1; // evicted now; the slot is refilled below
      slots[s] = -2;
      c->hy->pending.insert(c->hy->pending.end(), {j, e, s});
      moves++;
    }
  }
  if (moves == 0) return BL_OK;
  // evictions first (the steps stop reading those slots), then the copies on the copy stream
  CU_TRY(cudaMemcpyAsync(c->hy->res_d, c->hy->res_h.data(), c->hy->res_h.size() * sizeof(int32_t), cudaMemcpyHostToDevice, c->st), "promotion: evicting");
  CU_TRY(cudaEventRecord(c->hy->evict_ev, c->st), "promotion: evicting");
  CU_TRY(cudaStreamWaitEvent(c->hy->cs, c->hy->evict_ev, 0), "promotion: evicting");
  for (size_t i = 0; i + 2 < c->hy->pending.size(); i += 3) {
    const int j = c->hy->pending[i], e = c->hy->pending[i + 1], s = c->hy->pending[i + 2];
    const cu_blk *b = cu_host_block_at(c, j);
    uint8_t *base = c->hy->slot_pool + (size_t)pool_index(c, j) * c->hy->slot_layer_bytes;
    for (int k = 0; k < 3; k++) {
      const size_t nb2 = (size_t)b->t[CU_MOE_GATE + k].nb2;
      CU_TRY(cudaMemcpyAsync(base + c->hy->slot_off[k] + (size_t)s * nb2, b->hx[k] + (size_t)e * nb2, nb2, cudaMemcpyHostToDevice, c->hy->cs), "promotion: copying experts");
      c->hy->up_bytes += (int64_t)nb2;
    }
  }
  CU_TRY(cudaEventRecord(c->hy->promote_ev, c->hy->cs), "promotion: copying experts");
  CU_TRY(cudaStreamSynchronize(c->st), "promotion: evicting"); // res_h is pageable: the copy above reads it now
  return BL_OK;
}

// Picks found resident and all picks of the split one-token steps.
void cu_promote_hits(const cu_ctx *c, int64_t *resident, int64_t *all) {
  *resident = *all = 0;
  if (!c->hy->hits_d) return;
  uint32_t h[2] = {0, 0};
  if (cudaMemcpy(h, c->hy->hits_d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  *resident = h[0];
  *all = h[1];
}
