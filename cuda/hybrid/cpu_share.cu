// bloomery CUDA library: the CPU's share of a sparse prompt layer's host experts (issue 6, "card and
// host working on the same layer"). A sparse upload step copies the experts a layer's picks use over
// PCIe; a heavy layer of a prompt batch (100+ experts used) is bound by those copies while the CPU
// idles. Here the copies ahead skip the experts the layer's last picks gave at most cpu_tok tokens,
// and once the layer's picks are read back (the sync a sparse layer already has) the CPU takes the
// used experts with at most 2 x cpu_tok tokens that no copy ahead brought - the lightest first, while
// its estimated time stays under the layer's copies - instead of copying them: the card gathers the
// rows those experts take into host memory, drops their picks from its own (-1: the sort and the
// combine skip them) and posts the call to the mailbox's host thread, which runs bl_cpu_expert_rows
// on them (its -1 picks are the card's); after the layer's combine the card waits for the answer
// and adds the CPU's rows. Both sides run the same picks with the same weights, so the sum is the
// card's up to the CPU's rounding (int8 activations on the card).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "common.cuh"
#include "ctx.h"

// tokens an expert may have had in the layer's last picks and still be left to the CPU (its copy
// ahead skipped); the CPU takes used ones up to twice that. 0: off (BLOOMERY_HYBRID_CPU_TOKENS overrides).
// H200, the benchmark file, 16 threads, pp4096 at -ub 512 (docs/cuda-runs.md call 155): --cpu-moe
// 0 / 6 / 8 / 12 / 16 gave 6,249-6,308 / 7,607 / 7,669 / 7,114 / 7,135 t/s, --n-cpu-moe 24 0 / 4 / 6 /
// 8 gave 7,299-7,312 / 8,492 / 8,737 / 8,506: past ~8 the CPU, not the link, is the slower side.
#define CPU_SHARE_TOKENS 6
// this many (CU_OPT_CPU_TOKENS' largest): every used expert no copy ahead brought, without the time cap (tests)
#define CPU_SHARE_ALL 65536

// the CPU's estimated time may reach this share of the copies left to the card (bl_cuda_options.cpu_cap;
// call 155: 2 measured within the spread of 1 at 4 and 8 tokens; 0.5 at 16 tokens gained over 1 there
// but stayed under 6-8 tokens at 1)
static double cap_factor(const cu_ctx *c) { return c->o.cpu_cap > 0 ? c->o.cpu_cap : 1.0; }

int cu_cpu_share_skip(const cu_ctx *c) { return c->hy->cpu_tok > 0 && c->hy->mb && c->hy->expert_fn && c->hy->hb_tok ? c->hy->cpu_tok : 0; }

int64_t cu_cpu_share_alloc(cu_ctx *c) {
  const size_t T = (size_t)c->dm.maxT, K = (size_t)std::max<int64_t>(c->dm.K, 1), X = (size_t)std::max<int64_t>(c->dm.X, 1);
  const unsigned mapped = cudaHostAllocMapped | cudaHostAllocPortable;
  CU_TRY(cudaMallocHost(&c->hy->hp_sel, T * K * sizeof(int32_t)), "allocating the CPU share's picks");
  CU_TRY(cudaMallocHost(&c->hy->hp_w, T * K * sizeof(float)), "allocating the CPU share's picks");
  CU_TRY(cudaMallocHost(&c->hy->hb_sel, T * K * sizeof(int32_t)), "allocating the CPU share's picks");
  CU_TRY(cudaMallocHost(&c->hy->hb_w, T * K * sizeof(float)), "allocating the CPU share's picks");
  CU_TRY(cudaHostAlloc(&c->hy->hb_tok, T * sizeof(int32_t), mapped), "allocating the CPU share's rows");
  CU_TRY(cudaHostAlloc(&c->hy->hb_mask, X, mapped), "allocating the CPU share's experts");
  void *d = nullptr;
  CU_TRY(cudaHostGetDevicePointer(&d, c->hy->hb_tok, 0), "mapping the CPU share's rows");
  c->hy->hb_tok_d = static_cast<int32_t *>(d);
  CU_TRY(cudaHostGetDevicePointer(&d, c->hy->hb_mask, 0), "mapping the CPU share's experts");
  c->hy->hb_mask_d = static_cast<uint8_t *>(d);
  c->hy->cpu_rows = 0;
  if (c->hy->cpu_tok < 0) c->hy->cpu_tok = cu_cpu_share_default(c);
  return BL_OK;
}

int cu_cpu_share_default(const cu_ctx *c) { return c->o.cpu_tokens >= 0 ? (int)c->o.cpu_tokens : CPU_SHARE_TOKENS; }

void cu_cpu_share_free(cu_ctx *c) {
  if (c->hy->hp_sel) (void)cudaFreeHost(c->hy->hp_sel);
  if (c->hy->hp_w) (void)cudaFreeHost(c->hy->hp_w);
  if (c->hy->hb_sel) (void)cudaFreeHost(c->hy->hb_sel);
  if (c->hy->hb_w) (void)cudaFreeHost(c->hy->hb_w);
  if (c->hy->hb_tok) (void)cudaFreeHost(c->hy->hb_tok);
  if (c->hy->hb_mask) (void)cudaFreeHost(c->hy->hb_mask);
  c->hy->hp_sel = c->hy->hb_sel = c->hy->hb_tok = c->hy->hb_tok_d = nullptr;
  c->hy->hp_w = c->hy->hb_w = nullptr;
  c->hy->hb_mask = c->hy->hb_mask_d = nullptr;
  c->hy->cpu_rows = 0;
}

int64_t cu_cpu_share_fetch(cu_ctx *c, const int32_t *sel, const float *selw, int n_pairs) {
  CU_TRY(cudaMemcpyAsync(c->hy->hp_sel, sel, (size_t)n_pairs * sizeof(int32_t), cudaMemcpyDeviceToHost, c->st), "reading a layer's picks");
  CU_TRY(cudaMemcpyAsync(c->hy->hp_w, selw, (size_t)n_pairs * sizeof(float), cudaMemcpyDeviceToHost, c->st), "reading a layer's picks");
  return BL_OK;
}

// The CPU's rows into host memory (block r: row r, from token tok[r]), and its experts' picks
// dropped from the card's (each block a stride of them; the experts' mask read into shared memory).
__global__ void k_cpu_gather(const float *x, int E, const int32_t *tok, int nrows, float *hx, int32_t *sel, int n_pairs, const uint8_t *mask,
                             int X) {
  extern __shared__ uint8_t smask[];
  cu_pdl_entry();
  for (int e = threadIdx.x; e < X; e += blockDim.x) smask[e] = mask[e];
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pairs; i += gridDim.x * blockDim.x) {
    const int e = sel[i];
    if (e >= 0 && e < X && smask[e]) sel[i] = -1;
  }
  for (int r = blockIdx.x; r < nrows; r += gridDim.x) {
    const float *src = x + (size_t)tok[r] * E;
    float *dst = hx + (size_t)r * E;
    for (int d = threadIdx.x; d < E; d += blockDim.x) dst[d] = src[d];
  }
  __threadfence_system();
}

// x[tok[r]] += the CPU's row r (read from host memory).
__global__ void k_cpu_add(float *x, int E, const int32_t *tok, const float *hout) {
  cu_pdl_entry();
  const int r = blockIdx.x;
  float *dst = x + (size_t)tok[r] * E;
  for (int d = threadIdx.x; d < E; d += blockDim.x) dst[d] += __ldcv(hout + (size_t)r * E + d);
}

int64_t cu_cpu_share_take(cu_ctx *c, const cu_blk &b, const int32_t *counts, uint8_t *miss, int ntok, int K, double expert_us) {
  c->hy->cpu_rows = 0;
  const int T = cu_cpu_share_skip(c), X = b.n_expert;
  if (!T || K <= 0 || K > b.n_used || X <= 0 || X > c->dm.X) return BL_OK;
  std::vector<int> cand;
  int used = 0;
  for (int e = 0; e < X; e++) {
    used += counts[e] > 0;
    if (miss[e] && counts[e] <= 2 * T) cand.push_back(e);
  }
  if (cand.empty()) return BL_OK;
  std::stable_sort(cand.begin(), cand.end(), [&](int a, int z) { return counts[a] < counts[z]; });
  // the lightest first, while the CPU's estimated time (its measured time a pair) stays under the
  // copies of the experts left to the card
  const double per_expert_us = cap_factor(c) * expert_us;
  int taken = 0, pairs = 0;
  for (int e : cand) {
    const double cpu_us = (pairs + counts[e]) * c->hy->pair_us, card_us = (used - taken - 1) * per_expert_us;
    if (T < CPU_SHARE_ALL && c->hy->pair_us > 0 && cpu_us > card_us) break;
    taken++;
    pairs += counts[e];
  }
  if (!taken) return BL_OK;
  memset(c->hy->hb_mask, 0, (size_t)X);
  for (int i = 0; i < taken; i++) {
    c->hy->hb_mask[cand[(size_t)i]] = 1;
    miss[cand[(size_t)i]] = 0;
  }
  // the rows with a pick of the CPU's experts, their picks (-1: the card's)
  int nrows = 0;
  for (int t = 0; t < ntok; t++) {
    const int32_t *s = c->hy->hp_sel + (size_t)t * K;
    const float *w = c->hy->hp_w + (size_t)t * K;
    bool any = false;
    for (int j = 0; j < K; j++) { // written at row nrows, kept only when the token has a CPU pick
      const bool cpu = s[j] >= 0 && s[j] < X && c->hy->hb_mask[s[j]];
      c->hy->hb_sel[(size_t)nrows * K + j] = cpu ? s[j] : -1;
      c->hy->hb_w[(size_t)nrows * K + j] = cpu ? w[j] : 0.0f;
      any |= cpu;
    }
    if (any) c->hy->hb_tok[nrows++] = t;
  }
  if (!nrows) return cu_fail(BL_E_INVAL, "internal: the CPU's %d experts have no rows", taken);
  cu_host_call *call = cu_host_call_for(c, b, 0, K, 1);
  if (!call) return cu_fail(BL_E_NOMEM, "host experts: out of memory");
  const int E = (int)c->dm.E, n_pairs = ntok * K;
  const int blocks = std::max(1, std::min(nrows, 4 * c->sm_count));
  CU_LAUNCH("gathering the CPU's rows", k_cpu_gather, dim3(blocks), dim3(256), (size_t)X, c->st, c->x, E, c->hy->hb_tok_d, nrows, c->hy->hx_d, c->sel, n_pairs,
            c->hy->hb_mask_d, X);
  CU_OK(cu_mailbox_post(c, call, nrows, 0, nullptr, 0, nullptr, 0));
  c->hy->cpu_rows = nrows;
  c->hy->n_cpu_layers++;
  c->hy->n_cpu_experts += taken;
  c->hy->n_cpu_pairs += pairs;
  return BL_OK;
}

int64_t cu_cpu_share_add(cu_ctx *c) {
  if (c->hy->cpu_rows <= 0) return BL_OK;
  const int n = c->hy->cpu_rows;
  c->hy->cpu_rows = 0;
  CU_OK(cu_mailbox_wait(c, 0, true));
  CU_LAUNCH("adding the CPU's rows", k_cpu_add, dim3(n), dim3(256), 0, c->st, c->x, (int)c->dm.E, c->hy->hb_tok_d, c->hy->hout_d);
  return BL_OK;
}
