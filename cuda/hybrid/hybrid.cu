// bloomery CUDA library: MoE blocks whose routed experts stay in host memory (issue 6's hybrid
// placement). A step hands such a block to the CPU library's hook through a stream callback (the
// residual rows copied to pinned memory and back; captured in the decode graphs like any other
// node), or - for batches past the cost model's threshold - copies the layer's experts into one of
// two staging buffers on a copy stream, two layers ahead, and runs the card's kernels on them.
// A sparse upload step copies only the experts a layer's picks use: those its last picks used one
// layer ahead, the rest once the picks are read back (a sync a layer). The host experts' pages (the mapped GGUF) are registered with the driver so uploads run at PCIe
// speed without a second copy in RAM. Blocks whose experts are on the NVMe tier (cu_host_on_disk:
// read from the files through the CPU's expert store) always take the hook: never uploaded, pinned,
// read in place or promoted.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "ctx.h"


// Of a token's picks in a host-expert layer, how many the card computes by default (one-token steps):
// with the mailbox the card's share runs on the step's stream beside the CPU's (H200, --cpu-moe, tg64:
// 2 -> 60.2 t/s, 3 -> 53.1, 4 -> 42.0); with stream callbacks on a side stream (2 -> 46.8, 3 -> 48.8);
// with the card's share pulled into card memory first (pull.cu; one call, tg64 -r 3, --cpu-moe /
// --n-cpu-moe 24): in place 2 -> 59.8 / 98.4, pulled 2 -> 61.1 / 105.8, 3 -> 69.4 / 122.5, 4 -> 62.9 / 108.6;
// other hosts: 3 -> 61.1 / 105.6 and 4 -> 66.8 / 111.2 (a slower CPU share), 3 -> 73.9 / 125.4 and 4 -> 68.7 / 116.3.
#define HYBRID_CARD_SHARE 2
#define HYBRID_CARD_SHARE_PULL 3
#define HYBRID_CARD_SHARE_CB 3

// ---- pinning the host experts ----
int64_t cu_host_register(cu_weights *w, bool pin) {
  w->host_pinned = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> r;
  const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
  for (const cu_blk &b : w->blocks)
    if (b.host && !cu_host_on_disk(b))
      for (int k = 0; k < 3; k++) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(b.hx[k]);
        r.push_back({a & ~(pg - 1), (a + b.hbytes[k] + pg - 1) & ~(pg - 1)});
      }
  if (r.empty()) return BL_OK;
  if (!pin) return BL_OK;
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uintptr_t, uintptr_t>> m;
  for (const auto &x : r) {
    if (!m.empty() && x.first <= m.back().second) m.back().second = std::max(m.back().second, x.second);
    else m.push_back(x);
  }
  int ro = 0;
  (void)cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, w->dev);
  const unsigned flags = cudaHostRegisterPortable | cudaHostRegisterMapped | (ro ? cudaHostRegisterReadOnly : 0);
  for (const auto &x : m) {
    void *p = reinterpret_cast<void *>(x.first);
    const cudaError_t e = cudaHostRegister(p, x.second - x.first, flags);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fprintf(stderr, "bloomery: the host experts' pages could not be pinned (%s); uploads go through pageable copies\n", cudaGetErrorString(e));
      cu_host_unregister(w);
      return BL_OK;
    }
    w->registered.push_back({p, x.second - x.first});
  }
  w->host_pinned = 1;
  // the addresses the card reads them at (one-token splits: the card's share of a token's picks)
  for (cu_blk &b : w->blocks)
    if (b.host && !cu_host_on_disk(b))
      for (int k = 0; k < 3; k++) {
        void *d = nullptr;
        if (cudaHostGetDevicePointer(&d, const_cast<uint8_t *>(b.hx[k]), 0) == cudaSuccess) b.hxd[k] = static_cast<const uint8_t *>(d);
        else (void)cudaGetLastError();
      }
  return BL_OK;
}

void cu_host_unregister(cu_weights *w) {
  for (cu_blk &b : w->blocks)
    for (int k = 0; k < 3; k++) b.hxd[k] = nullptr;
  for (const auto &x : w->registered) (void)cudaHostUnregister(x.first);
  w->registered.clear();
  w->host_pinned = 0;
  (void)cudaGetLastError();
}

// ---- the hook ----
// A call's CPU part: k == 0 the whole block on the rows in hx; k > 0 the split's first k picks
// (ints, flts); k < 0 the picks the card's partition left to the host (promote.cu: their count at
// ints[K]); the sum into out. A failure is kept for the step's end; a later call of a failed step
// does nothing. Runs on the stream's callback thread or on the mailbox's host thread.
void cu_host_run(cu_host_call *call, int ntok, const int32_t *ints, const float *flts, float *out) {
  cu_ctx *c = call->c;
  if (c->hy->host_err) return; // the step failed earlier: its result is not used
  const auto t0 = std::chrono::steady_clock::now();
  char msg[sizeof c->hy->host_msg];
  msg[0] = 0;
  int64_t s = BL_OK;
  if (call->k == 0) {
    s = c->hy->host_fn(c->hy->host_cpu, call->b->ops, call->b->n_ops, ntok, c->hy->hx, msg, sizeof msg);
  } else {
    const int K = (int)call->b->n_expert_used, k = call->k > 0 ? call->k : ints[K];
    if (k > 0) s = c->hy->expert_fn(c->hy->host_cpu, call->b->ops, call->b->n_ops, ntok, c->hy->hx, ints, flts, k, out, msg, sizeof msg);
    else memset(out, 0, (size_t)c->dm.E * sizeof(float));
  }
  c->hy->n_hook++;
  c->hy->hook_us += (int64_t)std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (s != BL_OK) {
    snprintf(c->hy->host_msg, sizeof c->hy->host_msg, "host experts: %s", msg[0] ? msg : "the hook failed");
    c->hy->host_err = s;
  }
}

static void CUDART_CB hook_cb(void *p) {
  cu_host_call *call = static_cast<cu_host_call *>(p);
  cu_ctx *c = call->c;
  cu_host_run(call, call->ntok, call->k > 0 ? c->hy->hsel : c->hy->hn_h, c->hy->hselw, c->hy->hout);
}

__global__ void k_add_rows(float *x, const float *y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] += y[i];
}

// The hook call of a block (kept for the graphs; k: the split's host picks, -1 the partition's, 0 the
// whole block): one a batch size with callbacks, one for every size with the mailbox (the size is posted).
static cu_host_call *host_call(cu_ctx *c, const cu_blk &b, int ntok, int k = 0) { return cu_host_call_for(c, b, ntok, k, 0); }

// The card's share of a split block's picks: the one-token expert kernels reading the experts in
// host memory (b.hxd), on the picks from k_off (null pointers: the plan only), with a block's biases
// and activation (gpt-oss); false when those kernels do not take the block.
static bool card_share_args(const cu_ctx *c, const cu_blk &b, int k_off, int k, fmoe_args &fm) {
  if (!cu_routed_experts(c, b, fm)) return false;
  fm.gate.d = b.hxd[0];
  fm.up.d = b.hxd[1];
  fm.down.d = b.hxd[2];
  fm.sel = c->sel + k_off;
  fm.selw = c->selw + k_off;
  fm.k = k;
  if (b.general) cu_expert_options(fm, b);
  return cu_fmoe_fits(fm, c->smem_limit);
}

bool cu_host_split(const cu_ctx *c, const cu_blk &b, int ntok, bool big) {
  if (!b.host || cu_host_on_disk(b) || ntok != 1 || big || !c->hy->expert_fn) return false;
  if (b.general) {
    // a block with biases or the clamped activation (gpt-oss): its router runs first on the card
    // (cu_one_token_router), then the card's share and the CPU's as for any block. Promotion's
    // slots are not taken (the kernels would index the biases by slot, not by expert).
    if (c->hy->promote_slots > 0 || !cu_one_token_router_fits(c, b)) return false;
    if (c->hy->card_share <= 0) return true; // every pick on the CPU (bl_cpu_expert_rows)
    fmoe_args fm;
    const int K = b.n_used, ck = c->hy->card_share < K ? c->hy->card_share : K;
    return b.hxd[0] && b.hxd[1] && b.hxd[2] && card_share_args(c, b, K - ck, ck, fm);
  }
  return c->hy->promote_slots > 0 || (c->hy->card_share > 0 && b.hxd[0] && b.hxd[1] && b.hxd[2]);
}

// One token's picks split between the card (fm: its share, null for none) and the host (call k,
// with ni picks si and nf weights sf on the card; k == 0: none), the host's sum added to x. With
// the mailbox both run from the step's stream; with callbacks the card's share runs on the side
// stream while the callback holds the step's stream.
// pull: fm reads b's experts in host memory, and the card may copy them first (pull.cu; mailbox only).
static int64_t split_run(cu_ctx *c, const cu_blk &b, const fmoe_args *fm, int k, const int32_t *si, int ni, const float *sf, int nf, bool pull) {
  const int E = (int)c->dm.E;
  cu_host_call *call = nullptr;
  if (k != 0 && !(call = host_call(c, b, 1, k))) return cu_fail(BL_E_NOMEM, "host experts: out of memory");
  bool done = false;
  if (c->hy->mb) {
    if (call) CU_OK(cu_mailbox_post(c, call, 1, E, si, ni, sf, nf));
    if (fm) {
      fmoe_args f = *fm;
      bool pulled = false;
      if (pull) CU_OK(cu_pull(c, b, f, &pulled));
      CU_OK(cu_fmoe(c->st, f, c->smem_limit, &done));
      if (!done) return cu_fail(BL_E_UNSUPPORTED, "host experts: the one-token kernels refused the card's share");
    }
    return call ? cu_mailbox_wait(c, E, true, pull) : BL_OK;
  }
  if (call) {
    CU_TRY(cudaMemcpyAsync(c->hy->hx, c->x, (size_t)E * sizeof(float), cudaMemcpyDeviceToHost, c->st), "copying rows to the host");
    CU_TRY(cudaMemcpyAsync(k > 0 ? c->hy->hsel : c->hy->hn_h, si, (size_t)ni * sizeof(int32_t), cudaMemcpyDeviceToHost, c->st), "copying picks to the host");
    CU_TRY(cudaMemcpyAsync(c->hy->hselw, sf, (size_t)nf * sizeof(float), cudaMemcpyDeviceToHost, c->st), "copying picks to the host");
  }
  if (fm) {
    CU_TRY(cudaEventRecord(c->hy->fork_ev, c->st), "forking the card's share");
    CU_TRY(cudaStreamWaitEvent(c->hy->cs2, c->hy->fork_ev, 0), "forking the card's share");
    CU_OK(cu_fmoe(c->hy->cs2, *fm, c->smem_limit, &done));
    if (!done) return cu_fail(BL_E_UNSUPPORTED, "host experts: the one-token kernels refused the card's share");
    CU_TRY(cudaEventRecord(c->hy->join_ev, c->hy->cs2), "joining the card's share");
  }
  if (call) {
    CU_TRY(cudaLaunchHostFunc(c->st, hook_cb, call), "calling the host experts");
    CU_TRY(cudaMemcpyAsync(c->hy->dout, c->hy->hout, (size_t)E * sizeof(float), cudaMemcpyHostToDevice, c->st), "copying rows from the host");
  }
  if (fm) CU_TRY(cudaStreamWaitEvent(c->st, c->hy->join_ev, 0), "joining the card's share");
  if (call) {
    k_add_rows<<<(E + 255) / 256, 256, 0, c->st>>>(c->x, c->hy->dout, E);
    CU_TRY(cudaGetLastError(), "adding the host's share");
  }
  return BL_OK;
}

// One token with promotion on: the card's partition of the picks, the resident ones from the slots
// by the card, the rest on the CPU.
static int64_t promoted_block(cu_ctx *c, const cu_blk &b) {
  const int K = b.n_used;
  cu_mark(c, S_EXPERTS);
  CU_OK(cu_partition(c, b));
  fmoe_args fm;
  if (!cu_routed_experts(c, b, fm)) return cu_fail(BL_E_UNSUPPORTED, "host experts: the one-token kernels refuse the promoted experts");
  dmat sd[3];
  cu_slot_dmats(c, b, sd);
  fm.gate = sd[0];
  fm.up = sd[1];
  fm.down = sd[2];
  fm.n_expert = c->hy->promote_slots;
  fm.sel = c->hy->part_i;
  fm.selw = c->hy->part_f;
  fm.k = K;
  if (!cu_fmoe_fits(fm, c->smem_limit)) return cu_fail(BL_E_UNSUPPORTED, "host experts: the one-token kernels refuse the promoted experts");
  // the host's picks and their count, then its weights
  return split_run(c, b, &fm, -1, c->hy->part_i + K, K + 1, c->hy->part_f + K, K, false);
}

cu_host_call *cu_host_call_for(cu_ctx *c, const cu_blk &b, int ntok, int k, int rows) {
  if (c->hy->mb) ntok = 0; // the mailbox carries the batch size
  for (cu_host_call *h : c->hy->host_calls)
    if (h->b == b.src && h->ntok == ntok && h->k == k && h->rows == rows) return h;
  if (c->hy->mb && (int)c->hy->host_calls.size() >= cu_mailbox_max_calls()) return nullptr; // the host thread reads the list: no reallocation
  cu_host_call *h = new (std::nothrow) cu_host_call();
  if (!h) return nullptr;
  h->idx = (int)c->hy->host_calls.size();
  h->c = c;
  h->b = b.src;
  h->ntok = ntok;
  h->k = k;
  h->rows = rows;
  c->hy->host_calls.push_back(h);
  __atomic_store_n(&c->hy->n_calls_pub, (int)c->hy->host_calls.size(), __ATOMIC_RELEASE); // the host thread reads no further
  return h;
}

// Where role k (gate, up, down) of a host block's experts lies in staging buffer s.
static uint8_t *staged(const cu_ctx *c, int s, const cu_blk &b, int k) {
  uint8_t *p = static_cast<uint8_t *>(c->hy->stage[s]);
  for (int q = 0; q < k; q++) p += cu_align256(b.hbytes[q]);
  return p;
}

// The staging slot of the step's upload u: its first step_lead uploads in the lead slots (2..), the
// others in slots 0 and 1 in turn.
static int slot_of(const cu_ctx *c, int u) { return u < c->hy->step_lead ? 2 + u : (u - c->hy->step_lead) % 2; }

// Copies the u-th uploaded block of the step's plan into its slot on the copy stream (after the
// step's kernels are done with what that slot held; whole steps have no lead slots: u % 2).
static int64_t issue_upload(cu_ctx *c, int u) {
  if (u >= (int)c->hy->up_list.size()) return BL_OK;
  const cu_blk *b = cu_host_block_at(c, c->hy->up_list[u]);
  if (!b) return cu_fail(BL_E_INVAL, "internal: upload %d names no host block", u);
  const int s = slot_of(c, u);
  if (u >= 2) CU_TRY(cudaStreamWaitEvent(c->hy->cs, c->hy->done_ev[s], 0), "ordering expert uploads");
  for (int k = 0; k < 3; k++) {
    CU_TRY(cudaMemcpyAsync(staged(c, s, *b, k), b->hx[k], b->hbytes[k], cudaMemcpyHostToDevice, c->hy->cs), "uploading host experts");
    c->hy->up_bytes += (int64_t)b->hbytes[k];
  }
  CU_TRY(cudaEventRecord(c->hy->up_ev[s], c->hy->cs), "uploading host experts");
  return BL_OK;
}

// The share of host layers an upload step of ntok tokens gives the hook, from a layer's upload time
// u against the hook's h (measured in earlier upload steps, else sized from the per-pair cost, which
// overstates it for large batches). With two staging buffers the copy stream runs at most two
// uploads ahead, so a hook layer hides at most 2u of copying: it saves u - max(0, h - 2u), a gain
// only where h < 3u; then the share u / (u + h), at most a third (hook layers at least two uploads
// apart). H200, Qwen3-30B-A3B, 15 threads: h ~30 ms against u ~6.5 ms a 512-token layer, so every
// layer uploads there (forced shares measured slower: 0.2 1,252 t/s against 1,607). CU_OPT_HOST_SHARE
// (or bl_cuda_options.host_share, thousandths 0..900) sets it; 0 uploads every layer.
static double host_share(const cu_ctx *c, int ntok) {
  if (c->hy->host_share_opt >= 0) return c->hy->host_share_opt / 1000.0;
  const cu_blk *b = cu_first_host_block_in_ram(c);
  if (!b || c->hy->pcie_bps <= 0) return 0;
  const double up_us = 1e6 * (double)(b->hbytes[0] + b->hbytes[1] + b->hbytes[2]) / c->hy->pcie_bps;
  const double hook_us = c->hy->th_us_tok > 0 ? c->hy->th_us_tok * ntok : c->hy->pair_us * ntok * (b->n_used > 0 ? b->n_used : 1);
  if (hook_us <= 0 || hook_us >= 3 * up_us) return 0;
  const double f = up_us / (up_us + hook_us);
  return f > 1.0 / 3 ? 1.0 / 3 : f;
}

// Whole layers two ahead keep the copy engine busy while the card computes. A sparse step copies a
// layer's likely experts (those its last picks used) one layer ahead, and what they missed once its
// picks are read back (a sync a layer): it moves only the used bytes, at per-expert copies' rate
// (47 GB/s against 55 for whole tensors, H200). Sparse pays where the picks use less than this
// share of the bytes (on a uniform router's 512-token prompt, with every expert used, the two
// measured 1,600 and 1,605 t/s, docs/cuda-runs.md call 129).
#define SPARSE_MAX_SHARE 0.85

// Of the expert bytes of the layers the last upload step uploaded, the share its picks used (from
// the counts cu_hybrid_picked left; -1: no upload step yet).
static double last_used_share(const cu_ctx *c) {
  double used = 0, all = 0;
  for (int j : c->hy->up_list) {
    const cu_blk *b = cu_host_block_at(c, j);
    if (!b || b->n_expert <= 0) continue;
    const double bytes = (double)(b->hbytes[0] + b->hbytes[1] + b->hbytes[2]);
    int n = 0;
    for (int e = 0; e < b->n_expert; e++) n += c->hy->used_h[(size_t)j * c->dm.X + e] > 0;
    used += bytes * n / b->n_expert;
    all += bytes;
  }
  return all > 0 ? used / all : -1;
}

// An upload step's plan: which host blocks the hook runs (those on disk, and an evenly spread share
// of the rest), the others uploaded in order. The first hook layer's time, read back here at the
// next upload step, sizes the share.
static int64_t plan_uploads(cu_ctx *c, int ntok) {
  if (c->hy->th_ntok > 0) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, c->hy->th_ev[0], c->hy->th_ev[1]) == cudaSuccess && ms > 0) {
      const double v = 1000.0 * ms / c->hy->th_ntok;
      c->hy->th_us_tok = c->hy->th_us_tok > 0 ? 0.5 * (c->hy->th_us_tok + v) : v;
    }
    (void)cudaGetLastError();
    c->hy->th_ntok = 0;
  }
  if (!c->hy->up_list.empty()) c->hy->used_share = last_used_share(c);
  const int forced = c->hy->sparse_opt; // 1: the used experts only, 0: whole layers (CU_OPT_SPARSE_UP, bl_cuda_options.sparse_upload), -1: by the share
  c->hy->sparse_step = forced >= 0 ? forced : c->hy->used_share < SPARSE_MAX_SHARE;
  const int nh = (int)c->w->host_blocks.size();
  c->hy->up_ord.assign(nh, -1);
  c->hy->up_list.clear();
  const double f = host_share(c, ntok);
  c->hy->host_share = f;
  for (int j = 0; j < nh; j++) {
    const cu_blk *b = cu_host_block_at(c, j);
    const bool hook = !b || cu_host_on_disk(*b) || (int)((j + 1) * f) > (int)(j * f);
    if (!hook) {
      c->hy->up_ord[j] = (int)c->hy->up_list.size();
      c->hy->up_list.push_back(j);
    }
  }
  return BL_OK;
}

static int64_t prefetch_used(cu_ctx *c, int u);

int64_t cu_hybrid_begin(cu_ctx *c, int ntok, bool graphed, bool more) {
  c->hy->host_err = 0;
  c->hy->host_msg[0] = 0;
  c->hy->upload_step = 0;
  c->hy->cpu_rows = 0; // a failed step's CPU share is never added to a later one
  if (c->dm.n_host == 0) return BL_OK;
  if (c->hy->mb_broken) return cu_fail(BL_E_DEVICE, "host experts: the host thread stopped answering in an earlier step; load the model again");
  cu_mailbox_arm(c);
  if (!c->hy->host_fn) return cu_fail(BL_E_INVAL, "forward: %lld blocks keep their experts in host memory and no host hook is set (bl_cuda_set_host)", (long long)c->dm.n_host);
  CU_OK(cu_promote_pass(c));
  c->hy->upload_j = 0;
  c->hy->upload_step = !graphed && ntok >= c->hy->upload_min;
  c->hy->more_follows = more;
  c->hy->lead_planned = 0;
  c->hy->lead_wait = -1;
  if (!c->hy->upload_step) {
    c->hy->lead_next = 0; // copies ahead serve the next batch of the same prompt only
    return BL_OK;
  }
  CU_OK(plan_uploads(c, ntok));
  const int nup = (int)c->hy->up_list.size();
  for (int s = 0; s < HYB_SLOTS; s++) c->hy->pre_u[s] = -1;
  c->hy->step_lead = c->hy->sparse_step ? std::min(c->hy->n_lead, std::max(0, nup - 1)) : 0; // one upload in turn at least (its picks copy the next leads)
  if (!c->hy->sparse_step) {
    c->hy->lead_next = 0;
    CU_OK(issue_upload(c, 0));
    return issue_upload(c, 1);
  }
  // the lead uploads the step before copied ahead (the same blocks), else copied now, then the
  // first two in turn
  for (int v = 0; v < c->hy->step_lead; v++) {
    if (c->hy->lead_next && c->hy->lead_j[v] == c->hy->up_list[(size_t)v]) {
      c->hy->pre_u[2 + v] = v;
      c->hy->n_lead_runs++;
    } else {
      CU_OK(prefetch_used(c, v));
    }
  }
  c->hy->lead_next = 0;
  CU_OK(prefetch_used(c, c->hy->step_lead));
  return prefetch_used(c, c->hy->step_lead + 1);
}

// One token whose picks the fused router made: the card computes the last card_share of them,
// reading those experts from host memory, while the CPU computes the others.
static int64_t split_block(cu_ctx *c, const cu_blk &b) {
  if (c->hy->promote_slots > 0) return promoted_block(c, b);
  const int K = b.n_used, ck = c->hy->card_share < K ? c->hy->card_share : K, hk = K - ck;
  cu_mark(c, S_EXPERTS);
  fmoe_args fm;
  if (ck > 0 && !card_share_args(c, b, hk, ck, fm)) return cu_fail(BL_E_UNSUPPORTED, "host experts: the one-token kernels refuse the card's share");
  // (a block with biases has its share's bias rows pulled into slots with the weights: pull.cu)
  return split_run(c, b, ck > 0 ? &fm : nullptr, hk, c->sel, hk, c->selw, hk, true);
}

// The whole block on the CPU: the rows to the hook and back.
static int64_t host_rows(cu_ctx *c, const cu_blk &b, int ntok) {
  const int E = (int)c->dm.E;
  cu_host_call *call = host_call(c, b, ntok);
  if (!call) return cu_fail(BL_E_NOMEM, "host experts: out of memory");
  cu_mark(c, S_EXPERTS);
  if (c->hy->mb) {
    CU_OK(cu_mailbox_post(c, call, ntok, ntok * E, nullptr, 0, nullptr, 0));
    return cu_mailbox_wait(c, ntok * E, false);
  }
  const size_t bytes = (size_t)ntok * E * sizeof(float);
  CU_TRY(cudaMemcpyAsync(c->hy->hx, c->x, bytes, cudaMemcpyDeviceToHost, c->st), "copying rows to the host");
  CU_TRY(cudaLaunchHostFunc(c->st, hook_cb, call), "calling the host experts");
  CU_TRY(cudaMemcpyAsync(c->x, c->hy->hx, bytes, cudaMemcpyHostToDevice, c->st), "copying rows from the host");
  return BL_OK;
}

int64_t cu_host_block(cu_ctx *c, const cu_blk &b, int ntok, bool big, bool routed) {
  if (routed) {
    if (!cu_host_split(c, b, ntok, big)) return cu_fail(BL_E_INVAL, "internal: a routed host block that does not split");
    return split_block(c, b);
  }
  if (b.general && !c->hy->upload_step && cu_host_split(c, b, ntok, big)) {
    // one token of a block no fused router takes (gpt-oss's router bias): its picks made here, then split
    cu_mark(c, S_ROUTER);
    CU_OK(cu_one_token_router(c, b));
    return split_block(c, b);
  }
  if (c->hy->upload_step) {
    const int j = c->hy->upload_j++;
    if (j != b.host_j || j >= (int)c->hy->up_ord.size()) return cu_fail(BL_E_INVAL, "internal: host block %d met as upload %d", b.host_j, j);
    if (c->hy->up_ord[j] < 0) {
      // the hook runs this block while the copy stream uploads the next planned ones
      const bool timed = c->hy->th_ntok == 0 && c->hy->th_ev[0] && !cu_host_on_disk(b);
      if (timed) CU_TRY(cudaEventRecord(c->hy->th_ev[0], c->st), "timing the host experts");
      CU_OK(host_rows(c, b, ntok));
      if (timed) {
        CU_TRY(cudaEventRecord(c->hy->th_ev[1], c->st), "timing the host experts");
        c->hy->th_ntok = ntok;
      }
      if (!cu_host_on_disk(b)) c->hy->n_split++;
      return BL_OK;
    }
    const int u = c->hy->up_ord[j], s = slot_of(c, u);
    if (!c->hy->sparse_step) CU_TRY(cudaStreamWaitEvent(c->st, c->hy->up_ev[s], 0), "waiting for uploaded experts");
    cu_blk v = b;
    v.host = 0;
    for (int k = 0; k < 3; k++) v.t[CU_MOE_GATE + k].d = staged(c, s, b, k);
    c->hy->up_cur = j; // its picks are counted (and in a sparse step its experts copied) once made
    const int64_t st = cu_ffn_block(c, v, ntok, big, false);
    const bool missed = c->hy->up_cur >= 0;
    c->hy->up_cur = -1;
    CU_OK(st);
    if (missed) return cu_fail(BL_E_INVAL, "internal: host block %d's experts ran without its picks counted", j);
    CU_TRY(cudaEventRecord(c->hy->done_ev[s], c->st), "ordering expert uploads");
    c->hy->n_uploaded++;
    return c->hy->sparse_step ? BL_OK : issue_upload(c, u + 2);
  }
  return host_rows(c, b, ntok);
}

// How many of a layer's picks name each expert (one block; X counters in shared memory).
__global__ void k_count_picks(const int32_t *sel, int n, int X, int32_t *cnt) {
  extern __shared__ int sc[];
  for (int e = threadIdx.x; e < X; e += blockDim.x) sc[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int e = sel[i];
    if (e >= 0 && e < X) atomicAdd(&sc[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < X; e += blockDim.x) cnt[e] = sc[e];
}

// Calls f(k, offset, bytes) for role k's byte range of each run of neighbouring experts of host
// block b marked in want (one copy a run and role); stops at the first status f returns that is not BL_OK.
template <class F>
static int64_t expert_runs(const cu_blk &b, const uint8_t *want, F f) {
  const int X = b.n_expert;
  for (int e0 = 0, e1; e0 < X; e0 = e1) {
    if (!want[e0]) {
      e1 = e0 + 1;
      continue;
    }
    for (e1 = e0 + 1; e1 < X && want[e1];) e1++;
    for (int k = 0; k < 3; k++) {
      const size_t per = b.hbytes[k] / (size_t)X;
      CU_OK(f(k, per * (size_t)e0, per * (size_t)(e1 - e0)));
    }
  }
  return BL_OK;
}

// Copies the experts of host block b marked in want into staging buffer s on stream st; their bytes.
static int64_t copy_experts(cu_ctx *c, const cu_blk &b, int s, const uint8_t *want, int64_t *bytes, cudaStream_t st) {
  *bytes = 0;
  CU_OK(expert_runs(b, want, [&](int k, size_t off, size_t n) -> int64_t {
    CU_TRY(cudaMemcpyAsync(staged(c, s, b, k) + off, b.hx[k] + off, n, cudaMemcpyHostToDevice, st), "uploading host experts");
    *bytes += (int64_t)n;
    return BL_OK;
  }));
  c->hy->up_bytes += *bytes;
  return BL_OK;
}

// The likely experts of host block j (those its last picks used; with the CPU's share on, more
// tokens than it leaves to the CPU: cpu_share.cu) into want.
static void likely(const cu_ctx *c, int j, int X, std::vector<uint8_t> &want) {
  want.assign((size_t)X, 0);
  const int32_t *last = c->hy->used_h + (size_t)j * c->dm.X;
  const int skip = cu_cpu_share_skip(c);
  for (int e = 0; e < X; e++) want[(size_t)e] = last[e] > skip;
}

// A sparse step copies upload u's likely experts ahead of its picks into its slot on the copy
// stream, once the step's kernels are done with what the slot held (a lead slot: once a copy ahead
// the step before left there is done), and marks them ready (up_ev). The picks then copy only what
// this missed.
static int64_t prefetch_used(cu_ctx *c, int u) {
  if (u >= (int)c->hy->up_list.size()) return BL_OK;
  const int j = c->hy->up_list[(size_t)u], s = slot_of(c, u);
  const cu_blk *b = cu_host_block_at(c, j);
  if (!b) return cu_fail(BL_E_INVAL, "internal: upload %d names no host block", u);
  if (s >= 2) CU_TRY(cudaStreamWaitEvent(c->hy->cs, c->hy->up_ev[s], 0), "ordering expert uploads");
  else if (u - c->hy->step_lead >= 2) CU_TRY(cudaStreamWaitEvent(c->hy->cs, c->hy->done_ev[s], 0), "ordering expert uploads");
  likely(c, j, b->n_expert, c->hy->pre[s]);
  c->hy->pre_u[s] = u;
  int64_t bytes = 0;
  CU_OK(copy_experts(c, *b, s, c->hy->pre[s].data(), &bytes, c->hy->cs));
  CU_TRY(cudaEventRecord(c->hy->up_ev[s], c->hy->cs), "uploading host experts");
  c->hy->pre_bytes += bytes;
  return BL_OK;
}

// The next step's lead uploads copied ahead into the lead slots (as many as HYB_LEAD_BYTES of card
// memory holds, at most HYB_LEAD_MAX: five on Qwen3-30B-A3B, +5.5% on --n-cpu-moe 24's pp4096 over
// three, call 151), from this step's picks of those
// blocks: the prompt's next batch finds them there (cu_hybrid_begin) instead of waiting for its
// heaviest layers at its start. They go on the copy stream in pieces between this step's own copies
// - LEAD_CHUNK_MB after each light layer's copy ahead (a layer using under half its experts: the
// card, not the link, is then the slower), the rest after the step's last upload - so that they
// fill the link's idle time without delaying a layer (on a stream of their own they shared the link
// with the light layers' copies, which then waited: docs/cuda-runs.md call 147). H200, the benchmark
// file, pp4096 at -ub 512: 12 / 24 / 48 / 96 MiB gave --cpu-moe 6,140 / 6,403 / 6,093 / 5,837 and
// --n-cpu-moe 24 7,038 / 7,081 / 6,557 / 6,213 t/s, against 5,782 and ~6,020 without (call 149).
#define LEAD_CHUNK_MB 24 // bl_cuda_options.hybrid_lead_mb overrides
#define LEAD_PIECE ((size_t)4 << 20)

// The pieces to copy: the lead blocks' likely experts, runs of neighbours cut into LEAD_PIECE.
static int64_t lead_plan(cu_ctx *c) {
  c->hy->lead_runs.clear();
  c->hy->lead_pos = 0;
  for (int v = 0; v < c->hy->step_lead; v++) {
    const int j = c->hy->up_list[(size_t)v], s = 2 + v;
    const cu_blk *b = cu_host_block_at(c, j);
    if (!b) return cu_fail(BL_E_INVAL, "internal: upload %d names no host block", v);
    likely(c, j, b->n_expert, c->hy->pre[s]);
    c->hy->lead_j[v] = j;
    CU_OK(expert_runs(*b, c->hy->pre[s].data(), [&](int k, size_t off0, size_t n) -> int64_t {
      for (size_t off = off0, end = off0 + n; off < end; off += LEAD_PIECE)
        c->hy->lead_runs.push_back({s, staged(c, s, *b, k) + off, b->hx[k] + off, std::min(LEAD_PIECE, end - off)});
      return BL_OK;
    }));
    c->hy->lead_runs.push_back({s, nullptr, nullptr, 0}); // the slot's end: its ready event
  }
  c->hy->lead_planned = 1;
  return BL_OK;
}

// Up to budget bytes of the planned pieces on the copy stream (each slot's first after this step's
// layer in it is done, its last followed by its ready event).
static int64_t lead_issue(cu_ctx *c, size_t budget) {
  size_t sent = 0;
  while (c->hy->lead_pos < c->hy->lead_runs.size() && sent < budget) {
    const cu_lead_run &r = c->hy->lead_runs[c->hy->lead_pos++];
    if (!r.dst) {
      CU_TRY(cudaEventRecord(c->hy->up_ev[r.slot], c->hy->cs), "uploading host experts");
      continue;
    }
    if (c->hy->lead_wait != r.slot) {
      CU_TRY(cudaStreamWaitEvent(c->hy->cs, c->hy->done_ev[r.slot], 0), "ordering expert uploads");
      c->hy->lead_wait = r.slot;
    }
    CU_TRY(cudaMemcpyAsync(r.dst, r.src, r.bytes, cudaMemcpyHostToDevice, c->hy->cs), "uploading host experts");
    c->hy->up_bytes += (int64_t)r.bytes;
    c->hy->pre_bytes += (int64_t)r.bytes;
    sent += r.bytes;
  }
  if (c->hy->lead_pos == c->hy->lead_runs.size()) c->hy->lead_next = 1;
  return BL_OK;
}

// Waits for ev by polling: a sparse layer's picks are read while the host experts' threads idle (the
// layer before's CPU share is done: the card waited for it), and a blocking wait's wake-up would hold
// the card at every layer. bl_cuda_options.spin 0: the blocking wait.
static int64_t spin_wait(bool spin, cudaEvent_t ev, const char *what) {
  if (!spin) {
    CU_TRY(cudaEventSynchronize(ev), what);
    return BL_OK;
  }
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return BL_OK;
    if (e != cudaErrorNotReady) return cu_fail_cuda(e, what);
    cu_cpu_relax();
  }
}

int64_t cu_hybrid_picked(cu_ctx *c, const int32_t *sel, const float *selw, int ntok, int K, bool cpu_ok) {
  const int j = c->hy->up_cur, n_pairs = ntok * K;
  c->hy->up_cur = -1;
  const cu_blk *b = cu_host_block_at(c, j);
  if (!b || !c->hy->used_d) return cu_fail(BL_E_INVAL, "internal: picks counted for host block %d", j);
  const int X = b->n_expert;
  int32_t *dc = c->hy->used_d + (size_t)j * c->dm.X, *hc = c->hy->used_h + (size_t)j * c->dm.X;
  k_count_picks<<<1, 256, X * sizeof(int), c->st>>>(sel, n_pairs, X, dc);
  CU_TRY(cudaGetLastError(), "counting a layer's picks");
  CU_TRY(cudaMemcpyAsync(hc, dc, (size_t)X * sizeof(int32_t), cudaMemcpyDeviceToHost, c->st), "counting a layer's picks");
  if (!c->hy->sparse_step) return BL_OK;
  cpu_ok = cpu_ok && sel == c->sel && cu_cpu_share_skip(c) > 0;
  if (cpu_ok) CU_OK(cu_cpu_share_fetch(c, sel, selw, n_pairs));
  // a sparse step: the counts read here, then the used experts the copy ahead missed copied into the
  // layer's staging buffer at their own offsets; the experts wait for them. The next upload's likely
  // experts follow on the copy stream (its buffer's last layer is done: it preceded these picks).
  CU_TRY(cudaEventRecord(c->hy->sync_ev, c->st), "reading a layer's picks");
  CU_OK(spin_wait(c->o.spin != 0, c->hy->sync_ev, "reading a layer's picks"));
  const int u = c->hy->up_ord[(size_t)j], s = slot_of(c, u), nup = (int)c->hy->up_list.size();
  if (c->hy->pre_u[s] != u) return cu_fail(BL_E_INVAL, "internal: upload %d's copy ahead was not issued", u); // every upload of a sparse step has one
  std::vector<uint8_t> miss((size_t)X);
  int used = 0;
  for (int e = 0; e < X; e++) {
    miss[(size_t)e] = hc[e] > 0 && !c->hy->pre[s][(size_t)e];
    used += hc[e] > 0;
  }
  if (cpu_ok && c->hy->pcie_bps > 0) {
    // the CPU takes the lightest of what the copies ahead missed (cpu_share.cu), against an expert's copy time
    const double expert_us = 1e6 * (double)(b->hbytes[0] + b->hbytes[1] + b->hbytes[2]) / X / c->hy->pcie_bps;
    CU_OK(cu_cpu_share_take(c, *b, hc, miss.data(), ntok, K, expert_us));
  }
  int missed = 0;
  for (int e = 0; e < X; e++) missed += miss[(size_t)e];
  if (missed) {
    // on a stream of their own, so that they do not queue behind later layers' copies ahead (the
    // slot is free: its last layer is done, or it is a lead slot whose layer ran a step ago)
    if (s < 2 && u - c->hy->step_lead >= 2) CU_TRY(cudaStreamWaitEvent(c->hy->cs_miss, c->hy->done_ev[s], 0), "ordering expert uploads");
    int64_t bytes = 0;
    CU_OK(copy_experts(c, *b, s, miss.data(), &bytes, c->hy->cs_miss));
    CU_TRY(cudaEventRecord(c->hy->miss_ev, c->hy->cs_miss), "uploading host experts");
    CU_TRY(cudaStreamWaitEvent(c->st, c->hy->miss_ev, 0), "waiting for uploaded experts");
  }
  CU_TRY(cudaStreamWaitEvent(c->st, c->hy->up_ev[s], 0), "waiting for uploaded experts");
  c->hy->n_sparse++;
  // the next upload in turn (the first two of the turn were copied at the step's start)
  if (u + 1 >= c->hy->step_lead + 2) CU_OK(prefetch_used(c, u + 1));
  // the next batch of the prompt: its leads, a piece after each light layer, the rest at the last upload
  if (c->hy->more_follows && c->hy->step_lead > 0 && !c->hy->lead_next && u >= c->hy->step_lead && (2 * used < X || u == nup - 1)) {
    if (!c->hy->lead_planned) CU_OK(lead_plan(c));
    CU_OK(lead_issue(c, u == nup - 1 ? SIZE_MAX : c->hy->lead_chunk));
  }
  return BL_OK;
}

int64_t cu_hybrid_wait(cu_ctx *c, const char *what) {
  if (c->dm.n_host > 0 && c->hy->sync_ev) {
    // a blocking wait: the host experts' threads need the cores a spinning wait would take
    CU_TRY(cudaEventRecord(c->hy->sync_ev, c->st), what);
    CU_TRY(cudaEventSynchronize(c->hy->sync_ev), what);
  } else {
    CU_TRY(cudaStreamSynchronize(c->st), what);
  }
  CU_OK(cu_mailbox_check(c));
  CU_OK(cu_share_tune(c));
  if (c->hy->host_err) {
    const int64_t s = c->hy->host_err;
    c->hy->host_err = 0;
    return cu_fail(s, "%s", c->hy->host_msg);
  }
  return BL_OK;
}

void cu_hybrid_free(cu_ctx *c) {
  if (c->hy->mb) (void)cudaStreamSynchronize(c->st);
  cu_mailbox_stop(c);
  if (c->hy->cs) (void)cudaStreamSynchronize(c->hy->cs);
  cu_promote_free(c);
  cu_pull_free(c);
  if (c->hy->cs_miss) (void)cudaStreamSynchronize(c->hy->cs_miss);
  for (int i = 0; i < HYB_SLOTS; i++) {
    if (c->hy->up_ev[i]) (void)cudaEventDestroy(c->hy->up_ev[i]);
    if (c->hy->done_ev[i]) (void)cudaEventDestroy(c->hy->done_ev[i]);
    c->hy->up_ev[i] = c->hy->done_ev[i] = nullptr;
  }
  if (c->hy->miss_ev) (void)cudaEventDestroy(c->hy->miss_ev);
  c->hy->miss_ev = nullptr;
  if (c->hy->cs_miss) (void)cudaStreamDestroy(c->hy->cs_miss);
  c->hy->cs_miss = nullptr;
  c->hy->lead_next = 0;
  if (c->hy->sync_ev) (void)cudaEventDestroy(c->hy->sync_ev);
  for (int i = 0; i < 2; i++)
    if (c->hy->th_ev[i]) (void)cudaEventDestroy(c->hy->th_ev[i]);
  if (c->hy->cs2) (void)cudaStreamSynchronize(c->hy->cs2);
  if (c->hy->fork_ev) (void)cudaEventDestroy(c->hy->fork_ev);
  if (c->hy->join_ev) (void)cudaEventDestroy(c->hy->join_ev);
  if (c->hy->cs2) (void)cudaStreamDestroy(c->hy->cs2);
  if (c->hy->cs) (void)cudaStreamDestroy(c->hy->cs);
  cu_cpu_share_free(c);
  if (c->hy->hx) (void)cudaFreeHost(c->hy->hx);
  if (c->hy->hsel) (void)cudaFreeHost(c->hy->hsel);
  if (c->hy->hselw) (void)cudaFreeHost(c->hy->hselw);
  if (c->hy->hout) (void)cudaFreeHost(c->hy->hout);
  if (c->hy->dout) (void)cudaFree(c->hy->dout);
  if (c->hy->used_d) (void)cudaFree(c->hy->used_d);
  if (c->hy->used_h) (void)cudaFreeHost(c->hy->used_h);
  c->hy->used_d = c->hy->used_h = nullptr;
  c->hy->up_list.clear();
  c->hy->used_share = -1;
  c->hy->cs = c->hy->cs2 = nullptr;
  c->hy->fork_ev = c->hy->join_ev = c->hy->sync_ev = c->hy->th_ev[0] = c->hy->th_ev[1] = nullptr;
  c->hy->th_ntok = 0;
  c->hy->hx = c->hy->hselw = c->hy->hout = c->hy->dout = nullptr;
  c->hy->hsel = nullptr;
  for (cu_host_call *h : c->hy->host_calls) delete h;
  c->hy->host_calls.clear();
  c->hy->n_calls_pub = 0;
  (void)cudaGetLastError();
}

// ---- the cost model ----
// The hook's microseconds a (token, expert) pair: block b on 64 rows of pseudo-random values (about
// 64 x K distinct (token, expert) pairs), timed.
static int64_t measure_hook(cu_ctx *c, const cu_blk *b) {
  const int rows = (int)std::min<int64_t>(64, c->dm.maxT);
  uint32_t s = 12345;
  for (int64_t i = 0; i < (int64_t)rows * c->dm.E; i++) {
    s = s * 1664525u + 1013904223u;
    c->hy->hx[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
  char msg[512];
  msg[0] = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t st = c->hy->host_fn(c->hy->host_cpu, b->src->ops, b->src->n_ops, rows, c->hy->hx, msg, sizeof msg);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (st != BL_OK) return cu_fail(st, "host experts: %s", msg);
  c->hy->pair_us = us / ((double)rows * (b->n_used > 0 ? b->n_used : 1));
  return BL_OK;
}

// PCIe: one host block's gate tensor copied into a staging buffer, timed; the hook on the same
// block. Batches upload when the hook's time for them would pass a layer's upload time. The first
// block in host memory is measured; when every host block is on disk, only the hook is (on the
// first, its reads included) and nothing uploads.
static int64_t measure(cu_ctx *c) {
  const cu_blk *b = cu_first_host_block_in_ram(c);
  if (!b) {
    const cu_blk *d = cu_host_block_at(c, 0);
    c->hy->pcie_bps = 0;
    c->hy->upload_min = 1 << 30;
    return d ? measure_hook(c, d) : BL_OK;
  }
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CU_TRY(cudaEventCreate(&e0), "measuring PCIe");
  if (cudaEventCreate(&e1) != cudaSuccess) {
    (void)cudaEventDestroy(e0);
    return cu_fail(BL_E_DEVICE, "measuring PCIe");
  }
  const size_t n = b->hbytes[0];
  float ms = 0;
  (void)cudaMemcpyAsync(c->hy->stage[0], b->hx[0], n, cudaMemcpyHostToDevice, c->hy->cs); // warm
  (void)cudaEventRecord(e0, c->hy->cs);
  (void)cudaMemcpyAsync(c->hy->stage[0], b->hx[0], n, cudaMemcpyHostToDevice, c->hy->cs);
  (void)cudaEventRecord(e1, c->hy->cs);
  const cudaError_t e = cudaEventSynchronize(e1);
  if (e == cudaSuccess) (void)cudaEventElapsedTime(&ms, e0, e1);
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  if (e != cudaSuccess) return cu_fail_cuda(e, "measuring PCIe");
  c->hy->pcie_bps = ms > 0 ? n / (ms * 1e-3) : 25e9;
  CU_OK(measure_hook(c, b));
  const double layer = (double)(b->hbytes[0] + b->hbytes[1] + b->hbytes[2]);
  const double upload_us = 1e6 * layer / c->hy->pcie_bps;
  const int64_t k = b->n_used > 0 ? b->n_used : 1;
  int64_t need = (int64_t)(upload_us / (c->hy->pair_us * (double)k)) + 1;
  if (need < c->prefill_min) need = c->prefill_min; // graphed steps call the hook
  c->hy->upload_min = (int)std::min<int64_t>(need, 1 << 30);
  if (c->o.upload_min >= 0) { // bl_cuda_options.upload_min: batches of at least this many tokens upload (0: never)
    const int v = (int)std::min<int64_t>(c->o.upload_min, 1 << 30);
    c->hy->upload_min = v <= 0 ? (1 << 30) : std::max(v, c->prefill_min);
  }
  return BL_OK;
}

static int64_t set_host(cu_ctx *c, uint64_t fn, uint64_t cpu_ctx, uint64_t expert_fn) {
  CU_TRY(cudaSetDevice(c->dev), "selecting the device");
  CU_TRY(cudaStreamSynchronize(c->st), "set_host");
  cu_drop_graphs(c);
  cu_hybrid_free(c);
  c->hy->host_fn = reinterpret_cast<bl_ops_rows_fn>(fn);
  c->hy->expert_fn = reinterpret_cast<bl_expert_rows_fn>(expert_fn);
  c->hy->host_cpu = cpu_ctx;
  const unsigned mapped = cudaHostAllocMapped | cudaHostAllocPortable;
  CU_TRY(cudaHostAlloc(&c->hy->hx, (size_t)c->dm.maxT * c->dm.E * sizeof(float), mapped), "allocating pinned rows for the host experts");
  CU_TRY(cudaHostAlloc(&c->hy->hout, (size_t)c->dm.maxT * c->dm.E * sizeof(float), mapped), "allocating pinned rows for the host experts");
  CU_TRY(cudaMallocHost(&c->hy->hsel, (size_t)c->dm.K * sizeof(int32_t)), "allocating pinned picks");
  CU_TRY(cudaMallocHost(&c->hy->hselw, (size_t)c->dm.K * sizeof(float)), "allocating pinned picks");
  CU_TRY(cudaMalloc(&c->hy->dout, (size_t)c->dm.E * sizeof(float)), "allocating the host experts' output");
  const size_t ncnt = (size_t)c->dm.n_host * (size_t)c->dm.X;
  CU_TRY(cudaMalloc(&c->hy->used_d, ncnt * sizeof(int32_t)), "allocating the host layers' pick counts");
  CU_TRY(cudaMallocHost(&c->hy->used_h, ncnt * sizeof(int32_t)), "allocating the host layers' pick counts");
  memset(c->hy->used_h, 0, ncnt * sizeof(int32_t));
  CU_TRY(cudaStreamCreateWithFlags(&c->hy->cs, cudaStreamNonBlocking), "creating the upload stream");
  CU_TRY(cudaStreamCreateWithFlags(&c->hy->cs2, cudaStreamNonBlocking), "creating the card-share stream");
  CU_TRY(cudaEventCreateWithFlags(&c->hy->fork_ev, cudaEventDisableTiming), "creating events");
  CU_TRY(cudaEventCreateWithFlags(&c->hy->join_ev, cudaEventDisableTiming), "creating events");
  CU_TRY(cudaStreamCreateWithFlags(&c->hy->cs_miss, cudaStreamNonBlocking), "creating the upload stream");
  for (int i = 0; i < HYB_SLOTS; i++) {
    CU_TRY(cudaEventCreateWithFlags(&c->hy->up_ev[i], cudaEventDisableTiming), "creating events");
    CU_TRY(cudaEventCreateWithFlags(&c->hy->done_ev[i], cudaEventDisableTiming), "creating events");
  }
  CU_TRY(cudaEventCreateWithFlags(&c->hy->miss_ev, cudaEventDisableTiming), "creating events");
  const int64_t lmb = c->o.hybrid_lead_mb; // the next batch's leads copied after each light layer (MiB)
  c->hy->lead_chunk = (size_t)(lmb > 0 ? lmb : LEAD_CHUNK_MB) << 20;
  CU_TRY(cudaEventCreateWithFlags(&c->hy->sync_ev, cudaEventDisableTiming | cudaEventBlockingSync), "creating events");
  CU_TRY(cudaEventCreate(&c->hy->th_ev[0]), "creating events");
  CU_TRY(cudaEventCreate(&c->hy->th_ev[1]), "creating events");
  c->hy->th_ntok = 0;
  c->hy->th_us_tok = 0;
  CU_OK(measure(c));
  CU_OK(cu_mailbox_start(c));
  if (c->hy->mb) CU_OK(cu_cpu_share_alloc(c));
  if (c->hy->mb) CU_OK(cu_pull_init(c));
  // picks of a token the card computes (one-token steps): a number (fixed), or "auto" (first sized
  // by measuring both sides, cuda/pull.cu: on the H200 it chose 2 where 3 was 10-15% faster); with
  // the copies and the mailbox, unless fixed, moved online by the steps' own timings (share_tune.cu)
  // from where the last context on these weights left it
  const int64_t opt = c->o.card_share; // bl_cuda_options.card_share: -2 sized ("auto"), -1 the default, else fixed
  const bool sized = opt == -2, fixed = opt >= 0;
  c->hy->card_share = fixed ? (int)std::min<int64_t>(opt, CU_SHARE_MAX) : c->hy->pull_on ? HYBRID_CARD_SHARE_PULL : c->hy->mb ? HYBRID_CARD_SHARE : HYBRID_CARD_SHARE_CB;
  if (c->hy->card_share < 0) c->hy->card_share = 0;
  // a default start keeps half of a token's picks on the CPU at least (gpt-oss's 4: 2, 31% faster than 3 on the H200)
  if (!fixed && c->hy->card_share > c->dm.K / 2) c->hy->card_share = (int)(c->dm.K / 2);
  c->hy->share_auto = !fixed && c->hy->mb && c->hy->pull_on;
  c->hy->n_share_moves = c->hy->n_share_samples = 0;
  cu_share_tune_reset(c->hy);
  if (c->hy->share_auto && !sized && c->w->share_hint > 0) c->hy->card_share = c->w->share_hint - 1;
  if (sized && c->hy->pull_on) CU_OK(cu_pull_size_share(c, &c->hy->card_share, &c->hy->cpu_fixed_us, &c->hy->cpu_pick_us, &c->hy->card_pick_us));
  if (c->o.promote_slots > 0) CU_OK(cu_set_promote_slots(c, c->o.promote_slots)); // card slots a host layer for promoted experts (0: off)
  return BL_OK;
}

// Sets the host hook; on a failure none of it stays (a step then refuses: no hook set).
extern "C" int64_t bl_cuda_set_host(uint64_t h, uint64_t fn, uint64_t cpu_ctx, uint64_t expert_fn) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c || !fn || !cpu_ctx || !expert_fn) return cu_fail(BL_E_INVAL, "set_host: null argument");
  if (c->dm.n_host == 0) return cu_fail(BL_E_INVAL, "set_host: the program keeps no experts in host memory");
  const cu_opts_scope scope(c); // its measurements run the context's kernels
  const int64_t s = set_host(c, fn, cpu_ctx, expert_fn);
  if (s != BL_OK) {
    cu_drop_graphs(c);
    cu_hybrid_free(c);
    c->hy->host_fn = nullptr;
    c->hy->expert_fn = nullptr;
    c->hy->host_cpu = 0;
  }
  return s;
}

extern "C" int64_t bl_cuda_host_stats(uint64_t h, int64_t *out, int64_t n) {
  cu_ctx *c = reinterpret_cast<cu_ctx *>(h);
  if (!c || !out) return cu_fail(BL_E_INVAL, "host_stats: null argument");
  int64_t resident = 0, all = 0;
  if (n > 10) cu_promote_hits(c, &resident, &all);
  const int64_t v[29] = {c->hy->n_hook, c->hy->n_uploaded, c->hy->up_bytes, c->hy->hook_us, c->hy->upload_min, (int64_t)c->hy->pcie_bps, c->w->host_pinned,
                         (int64_t)(c->hy->pair_us * 1000.0), c->hy->card_share, c->hy->promote_slots, c->hy->n_moves, resident, all, c->hy->pull_on,
                         (int64_t)(c->hy->cpu_pick_us * 1000.0), (int64_t)(c->hy->card_pick_us * 1000.0), (int64_t)(c->hy->cpu_fixed_us * 1000.0),
                         c->hy->n_split, (int64_t)(c->hy->host_share * 1000.0), (int64_t)(c->hy->th_us_tok * 1000.0), c->hy->n_sparse,
                         (int64_t)(c->hy->used_share * 1000.0), c->hy->pre_bytes, c->hy->n_share_moves, c->hy->n_share_samples, c->hy->n_lead_runs,
                         c->hy->n_cpu_layers, c->hy->n_cpu_experts, c->hy->n_cpu_pairs};
  for (int64_t i = 0; i < n && i < 29; i++) out[i] = v[i];
  return BL_OK;
}
