// bloomery CUDA library: the context - the model's blocks with their tensors on the card, the
// work buffers, the f16 KV cache, the staging buffers and the captured decode graphs.
#pragma once
#include <vector>

#include "common.cuh"
#include "fuse.h"
#include "internal.h"

struct cu_blk {
  int kind, layer;
  int n_head, n_head_kv, head_dim;
  int n_expert, n_used, norm_topk;
  float eps, attn_scale, w_scale;
  rope_params rope;
  dmat t[CU_BLOCK_TENSORS];               // matrices (d == null when absent)
  const float *vec[CU_BLOCK_TENSORS];     // vector roles as f32 (norms, biases)
  // MoE blocks whose routed experts stay in host memory (hybrid.cu): gate/up/down's t[].d are null,
  // their host bytes at hx[] (hbytes[] each); the program's block for the host hook; the block's
  // index among the host blocks. A host block whose src is marked BL_HOST_EXPERTS_DISK reads its
  // experts from the files through its expert store: hx[] are not read (cu_host_on_disk)
  int host, host_j;
  const uint8_t *hx[3];
  const uint8_t *hxd[3]; // the same bytes as the card addresses them over PCIe (null: not pinned)
  size_t hbytes[3];
  const cu_fblock *src;
  int moe_next;  // attention blocks: the MoE block after it (its router may run in the output product), or -1
  // options only the general kernels take (gpt-oss): the block runs on them (cu_blk.general)
  int window;    // attention: a sliding window (0: every position; sinks and an output bias in vec[])
  int act;       // MoE: the experts' activation (BL_ACT_*; biases in vec[CU_MOE_RBIAS] and t[CU_MOE_BGATE..])
  float alpha, limit;
  bool general;  // an option above (or a bias / sink) is set: the fast kernels do not take this block
  // MoE: the router's BL_GATING_* (SIGMOID: general, its picks by router/sigmoid.cu with the
  // selection bias in vec[CU_MOE_RCORR]) and its expert groups (0: none)
  int gating, n_group, n_group_used;
  bool shared_next; // MoE: the block after it is a shared expert (its normalised input kept in cu_ctx.hsh)
  bool shared_in;   // FFN: a shared expert, reading cu_ctx.hsh (no norm of its own)
  // MLA (latent attention): the latent's size, the unrotated and value head dims, q's LoRA rank (0:
  // a plain q) and the epsilon of q_a's and the latent's norms; head_dim is a query head's nope + n_rot
  int kvl, nope, vd, q_lora;
  float mla_eps;
  bool gated; // attention: q's rows hold each head's query then its output gate (the output times sigmoid(gate))
  // delta-net: its k / v heads and their sizes, the conv's taps, GROUPED head map, the L2 and output norms' epsilon
  int dn_nk, dn_nv, dn_hk, dn_hv, dn_K, dn_grouped;
  float dn_eps;
};

// Context options beyond ffi/bloomery.h's (bl_cuda_set_option keys; ffi/cuda.ts CudaOption), set
// after bl_cuda_ctx_new's bl_cuda_options: the carveout every kernel prefers (process-wide, percent
// or -1), programmatic dependent launch on/off and the kernels in use (bits FAST_*; both the
// context's, its bl_cuda_options.pdl and .fast). They drop the context's captured graphs.
// CU_OPT_INVARIANT: the context's batch-invariant mode (its forward passes run with the fast bits
// off and without the grouped decode-batch experts, so each token is computed as it is alone).
// CU_OPT_UPLOAD_MIN: batches of at least this many tokens upload their host experts (0: never;
// never below the graphed sizes; the cost model of bl_cuda_set_host sets it).
// CU_OPT_CARD_SHARE: of a token's picks in a host-expert layer, how many the card computes reading
// the experts from host memory (one-token steps; 0: the CPU computes them all).
// CU_OPT_PROMOTE_SLOTS: card slots a host layer for promoted experts (0: off; at least the picks a token).
// CU_OPT_HOST_SHARE: of the host layers of an upload step, the share (thousandths, 0..900) the hook
// runs while the next ones upload; -1: sized by the cost model (the default).
// CU_OPT_SPARSE_UP: an upload step copies only the experts its picks use (1: those its last picks
// used one layer ahead, the rest once its picks are made), or every layer whole, two layers ahead
// (0); -1: by the share of the experts' bytes the last upload step's picks used (the default).
// CU_OPT_MMA_PAIRS: decode batches' MoE layers whose experts got fewer pairs each than this (in
// thousandths; 0: the tensor cores always) take the dp4a kernels (3000 by default).
// CU_OPT_FOACC_LIM: the magnitude (2^value, value -126..22; 22 by default) from which a partial
// logit of the fused router raises FAST_FOACC's flag (tests lower it to take the float sums).
// CU_OPT_CPU_TOKENS: sparse prompt layers give the CPU the used experts with at most 2 x value
// tokens that no copy ahead brought (copies ahead skip those the last picks gave at most value),
// the lightest first while the CPU's estimated time stays under the layer's copies; 0: off; 65536:
// all of them, no time cap (tests); -1: bl_cuda_options.cpu_tokens or the default (cpu_share.cu).
enum { CU_OPT_CARVEOUT = 16, CU_OPT_PDL = 17, CU_OPT_FAST = 18, CU_OPT_INVARIANT = 19, CU_OPT_UPLOAD_MIN = 20, CU_OPT_CARD_SHARE = 21,
       CU_OPT_PROMOTE_SLOTS = 22, CU_OPT_HOST_SHARE = 23, CU_OPT_SPARSE_UP = 24, CU_OPT_MMA_PAIRS = 25, CU_OPT_FOACC_LIM = 26,
       CU_OPT_CPU_TOKENS = 27 };

enum { S_EMBED, S_QKV, S_QK, S_ATTN, S_O, S_ROUTER, S_EXPERTS, S_OUTPUT, S_TOPK, S_END, CU_SECTIONS };

// The graphs' attention class of a decode batch whose slots' tokens are not adjacent (cu_attn2_class gives 0..3).
#define ATTN_GENERAL 4
// Flag on the class: a decode batch of distinct slots whose attention forms Q/K itself (FAST_QKA).
#define ATTN_QKA 8

struct cu_graph {
  int ntok, nout, topk, acls;
  uint64_t nomma; // the decode batch's MoE layers on the dp4a kernels (cu_ctx.mb_nomma)
  cudaGraphExec_t exec;
};

// Decode batches' experts on the tensor cores (FAST_GUMMA / FAST_DNMMA) pay where an expert's tile
// holds several pairs; with one or two a tile the dp4a kernels are faster (H200, a uniform router, 8
// streams: 828 -> 987 t/s). Each MoE layer (bit min(layer, 63)) takes the dp4a kernels while its
// pairs an expert in the last decode batches stay under a threshold (forward.cu mb_choose).
#define MB_LAYER_BITS 64

// Largest sizes over the program's blocks (buffers are sized from them).
struct cu_dims {
  int64_t E, V, qd, kd, hd, ff, X, K, maxT;
  int64_t max_nh, max_nkv;
  int64_t kv_width;  // KV width of every attention block (0: none)
  int64_t kv_layers; // 1 + the largest KV layer (0: none)
  int64_t host_layer_bytes; // the largest host-expert block's gate + up + down (256-aligned each; 0: none)
  int64_t n_host;           // blocks whose experts stay in host memory
  int64_t n_shared;         // shared-expert blocks (cu_blk.shared_in; cu_ctx.hsh is sized for them)
  // latent attention (MLA blocks; 0: none): a token's latent queries (heads x (kvl + n_rot)) and
  // attended latents (heads x kvl), the most heads of a block, the largest latent
  int64_t mla_q, mla_lat, mla_nh, mla_kvl;
  // delta-net blocks (0: none): their count, 1 + the largest recurrent state layer, the floats a layer's
  // state takes at most, the widest conv channels (C), fused rows (C + vd), value rows (vd) and v heads
  int64_t n_dn, dn_layers, dn_rs_need, dn_c, dn_cz, dn_vd, dn_nv;
  int64_t n_shared_gate; // shared experts under a scalar gate (cu_ctx.shg is sized for them)
};

// The program's tensors on one card (shared by the contexts made from it).
struct cu_weights {
  int dev;
  cu_dims dm;
  std::vector<cu_blk> blocks;
  void *arena; // weights and f32 vectors
  size_t arena_bytes;
  char device_name[96];
  int smem_optin, sm_count;
  // host experts' page ranges registered with the driver (hybrid.cu); pinned: all of them were
  std::vector<std::pair<void *, size_t>> registered;
  int host_pinned;
  mutable int share_hint; // (a hint the contexts write, not a weight) 1 + the card's share the last online sizing chose on these weights (0: none): new contexts start there
  std::vector<int> host_blocks; // blocks[host_blocks[j]] is host block j (cu_blk.host_j == j)
  std::vector<cu_fblock> fused; // the fusion pass's blocks (fuse.h): blocks[i].src is &fused[i]
};

static inline size_t cu_align256(size_t n) { return (n + 255) & ~(size_t)255; }

// A host block's call to the hook (kept for the graphs that capture it): one a batch size with
// stream callbacks; with the mailbox one for every size (ntok 0: the size is posted with the call).
struct cu_host_call {
  struct cu_ctx *c;
  const cu_fblock *b;
  int ntok;
  int idx; // its place in cu_ctx.host_calls (the mailbox names calls by it)
  int k; // > 0: the token's first k picks, made on the card (bl_expert_rows_fn); 0: the whole block
  int rows; // a prompt layer's CPU share (cpu_share.cu): k picks a row from the pinned hb_sel / hb_w, not the mailbox
};

// staging slots of host experts' uploads (hybrid.cu): two in turn, and lead slots for the first uploads
#define HYB_LEAD_MAX 5
// the lead slots' card memory by default (bl_cuda_options.hybrid_lead sets their number instead)
#define HYB_LEAD_BYTES ((int64_t)2 << 30)
#define HYB_SLOTS (2 + HYB_LEAD_MAX)
// A piece of the next step's leads to copy (dst null: slot's end, its ready event).
struct cu_lead_run {
  int slot;
  uint8_t *dst;
  const uint8_t *src;
  size_t bytes;
};

// the most picks of a token the card's share may take (bl_cuda_options.card_share is capped there)
#define CU_SHARE_MAX 64

// The host-expert scheduler's state (cuda/hybrid/: hybrid.cu, promote.cu, pull.cu, cpu_share.cu,
// mailbox.cu, share_tune.cu), one a context (cu_ctx.hy): the hook, the upload plan, the staging and
// lead slots, the CPU share, the mailbox and promotion.
struct cu_hybrid {
  // host experts (hybrid.cu): the hook, pinned residual rows it works on, its calls; the staging
  // buffers of uploaded experts (two layers in flight on the copy stream), the step's state
  bl_ops_rows_fn host_fn;
  bl_expert_rows_fn expert_fn;
  uint64_t host_cpu;
  float *hx;
  // one-token split (CU_OPT_CARD_SHARE picks of a token read by the card from host memory over PCIe
  // on the side stream cs2, the rest on the CPU): the picks and the CPU's sum, pinned; its sum on the card
  int card_share;
  // share_tune.cu: the share sized online (share_auto; set by neither bl_cuda_options.card_share nor
  // CU_OPT_CARD_SHARE) from a window of the steps' timed splits: their count and sums (us) of the
  // card's share, its wait and the CPU's call; the CPU path's latency beyond its call; the moves made
  int share_auto;
  int64_t tune_n, n_share_moves, n_share_samples;
  double tune_a, tune_w, tune_c, tune_lat;
  // the climb (bl_cuda_share_climb): each share's last measured layer time (us; 0: not measured),
  // and its state (windows at this share since its neighbours were measured, the windows before
  // they are measured again, 1 while the window is a look: a quarter as long)
  double tune_t[CU_SHARE_MAX + 1];
  int64_t tune_st[3];
  // pull.cu: the card's share copied into card memory first (pull_on), its slots per role, slot ids
  int pull_on;
  void *pull_buf;
  uint8_t *pull_dst[3];
  float *pull_bias[3];   // gpt-oss: the pulled experts' gate, up and down bias rows by slot (null: no block has that bias)
  int pull_bias_ld[3];   // floats a slot's bias row of each role holds
  int32_t *pull_ids;
  double cpu_fixed_us, cpu_pick_us, card_pick_us; // the sizing's measured microseconds: the CPU's call and a pick, the card's a pick (0: not measured)
  int32_t *hsel;
  float *hselw, *hout, *dout;
  cudaStream_t cs2;
  cudaEvent_t fork_ev, join_ev;
  std::vector<cu_host_call *> host_calls;
  volatile int64_t host_err;
  char host_msg[512];
  // staging slots: 0 and 1 take uploads in turn; sparse steps put their first n_lead uploads in
  // slots 2.. (lead slots), which the step before, when its batch asked for no logits (the prompt
  // goes on), copies ahead in pieces between its own light layers' copies (lead_issue)
  void *stage[HYB_SLOTS];
  int n_lead;            // lead slots allocated (bl_cuda_options.hybrid_lead, 0..HYB_LEAD_MAX)
  int step_lead;         // this step's uploads in lead slots (0: a whole step)
  int more_follows;      // this step's batch wants no logits
  int lead_next;         // the lead slots hold the next step's first uploads (lead_j), copied ahead (set by
                         // the step that copied them all, cleared by the next step's start)
  int lead_j[HYB_LEAD_MAX];
  int lead_planned, lead_wait; // this step planned the next leads' pieces; the slot whose wait is enqueued
  std::vector<struct cu_lead_run> lead_runs;
  size_t lead_pos, lead_chunk; // the next piece; bytes after each light layer
  int64_t n_lead_runs;   // uploads a step found copied ahead by the step before
  cudaStream_t cs, cs_miss; // uploads and copies ahead; what a layer's picks missed
  cudaEvent_t up_ev[HYB_SLOTS], done_ev[HYB_SLOTS], miss_ev, sync_ev;
  int upload_step, upload_j, upload_min;
  double pcie_bps, pair_us;
  // an upload step's plan (cu_hybrid_begin): the host blocks uploaded, in order (up_list), and each
  // host block's place in that order (up_ord; -1: the hook runs it while the copy stream uploads
  // the next planned ones)
  std::vector<int> up_list, up_ord;
  double th_us_tok;      // a hook layer's measured microseconds a token in upload steps (0: none yet)
  double host_share;     // the share of host layers the last upload step gave the hook
  int host_share_opt;    // CU_OPT_HOST_SHARE (thousandths; -1: the cost model)
  cudaEvent_t th_ev[2];  // around the first hook layer of an upload step (timing)
  int th_ntok;           // that step's batch (0: no timing pending)
  int64_t n_split;       // host layers the hook ran inside upload steps
  // the experts an uploaded layer's picks use (cu_hybrid_picked): counts [n_host][X] on the card and
  // pinned; sparse steps copy only those experts, each layer once its picks are made
  int32_t *used_d, *used_h;
  int up_cur;            // the host block whose picks cu_ffn_block makes next (-1: none)
  int sparse_opt;        // CU_OPT_SPARSE_UP
  int sparse_step;       // this upload step copies the used experts only
  double used_share;     // of the uploaded layers' expert bytes, the share the last upload step's picks used (-1: none yet)
  int64_t n_sparse;      // layers uploaded used experts only
  // sparse steps: the experts copied into staging buffer s ahead of its layer's picks (those the
  // layer's last picks used), for upload pre_u[s] (-1: none); their bytes
  std::vector<uint8_t> pre[HYB_SLOTS];
  int pre_u[HYB_SLOTS];
  int64_t pre_bytes;
  // cpu_share.cu: the CPU's share of a sparse prompt layer's experts - those its picks give at most
  // 2 x cpu_tok tokens that no copy ahead brought (copies ahead skip experts the last picks gave at
  // most cpu_tok; 0: off). Pinned: the layer's picks read back (hp_sel, hp_w); mapped: the CPU's
  // experts (hb_mask [X]), the rows it takes (hb_tok) and their picks, -1 for the card's (hb_sel, hb_w)
  int cpu_tok;
  int32_t *hp_sel, *hb_tok, *hb_tok_d, *hb_sel;
  float *hp_w, *hb_w;
  uint8_t *hb_mask, *hb_mask_d;
  int cpu_rows;          // the rows of the CPU's share the layer in flight adds when its experts are done (0: none)
  int64_t n_cpu_layers, n_cpu_experts, n_cpu_pairs;
  int64_t n_hook, n_uploaded, up_bytes, hook_us;
  // the mapped-memory hand-off (mailbox.cu; null: stream callbacks): the mailbox and the rows as the
  // card addresses them, the card's sequence counter, the host thread that answers
  struct cu_mailbox *mb, *mb_d;
  float *hx_d, *hout_d;
  uint32_t *mb_seq;        // the card's counter (then, 8 bytes on, the last post's %globaltimer)
  uint32_t mb_times_seen;  // the last sequence cu_mailbox_times read
  struct cu_runner *runner;
  int n_calls_pub;  // host_calls entries the host thread may read (atomic release/acquire)
  int mb_broken;    // the host thread missed an answer's deadline: the context refuses further steps
  // promotion (hybrid.cu): slots on the card for the hottest experts of each host layer, used by
  // one-token steps (the card computes a token's resident picks, the CPU the rest)
  int promote_slots;              // slots a host layer (0: off)
  uint8_t *slot_pool;             // [host layers in memory (not on disk)][gate P slabs | up P slabs | down P slabs]
  size_t slot_layer_bytes, slot_off[3];
  int32_t *res_d;                 // [n_host][X]: an expert's slot, -1 in host memory
  uint32_t *cnt_d;                // [n_host][X]: picks since the last pass
  uint32_t *hits_d;               // picks found resident, all picks (one-token split steps)
  int32_t *part_i;                // a step's partition: card slots [K], host picks [K], host count
  float *part_f;                  // card weights [K], host weights [K]
  int32_t *hn_h;                  // pinned: the host picks [K] and their count
  std::vector<int32_t> res_h, slot_of; // mirrors: [n_host][X], [n_host][P] (expert, -1 empty, -2 being refilled)
  std::vector<float> heat;        // [n_host][X]
  std::vector<int> pending;       // (host layer, expert, slot) triples copied, not yet published
  cudaEvent_t promote_ev, evict_ev;
  int steps_since_pass;
  int64_t n_moves;
};

struct cu_ctx {
  int dev;
  cudaStream_t st;
  bl_ctx_params p;
  bl_cuda_options o;  // the context's options (bl_cuda_ctx_new; fast and pdl resolved, set_option changes them)
  cu_dims dm;
  int smem_limit;     // dynamic shared memory a product may use
  int sm_count;
  const cu_weights *w;
  // work buffers (device)
  float *hsh; // a shared expert's normalised input rows (the MoE block before it writes them; null: no shared expert)
  float *x, *h, *q, *k, *v, *att, *logits, *router, *selw, *act, *ypair, *part, *topv, *candv, *dense_w;
  uint8_t *act8; // a token's SwiGLU rows quantized by the one-token gate/up for down (FAST_ACT8), act8_bytes
  size_t act8_bytes;
  int32_t *sel, *pair_tok, *pair_of, *n_tiles, *dense_sel, *topi, *candi;
  int4 *tiles;
  int *cnt_router, *cnt_attn;
  uint8_t *xq;        // decode batches' activation rows quantized once a launch (x8rows.cu)
  size_t xq_bytes;
  combine_args pend;  // the experts' combine a decode batch's MoE block left pending (FAST_COMBINE; ntok 0: none)
  x8_pre attx8;       // the attention output rows' x8 slots the attention wrote for the next product (FAST_ATTX8; nt 0: none)
  float *rpart;       // the fused router's partial logits [blocks][rpart_ld]
  int *cnt_fo;        // its block counter (zero between launches); [3]: FAST_FOACC's flag ([1], [2] unused)
  float foacc_lim;    // CU_OPT_FOACC_LIM as a float
  unsigned long long *fo_acc; // FAST_FOACC: the fused router's accumulators, an expert every FO_ACC_STRIDE (zero between launches)
  int rpart_ld;
  int acls;           // the one-token attention's context class of the step being enqueued (attn2.cu)
  __half *kc, *vc; // vc null where the values live in K (latent attention: bl_ctx_params.kv_v_dim 0)
  // latent attention (forward.cu mla_block): a chunk of MLA_CHUNK tokens' latent queries and
  // attended latents, and a decode batch's slices (mla.cu)
  float *mla_ql, *mla_lat, *mla_part;
  // the delta-net (forward.cu dn_block): the conv's inputs, its outputs (and older files' fused rows), z,
  // beta and alpha (or ba), the heads' outputs; the slots' recurrent state (kv_slots x rs_layers x rs_dim
  // floats, the CPU's layout) and its snapshots (rstate.cu; null until reserved, with the slots taken)
  float *dn_raw, *dn_cv, *dn_z, *dn_ba, *dn_o, *rs, *rs_snap;
  std::vector<char> rs_snap_ok;
  int n_runs; // the step's sequences (in_runs)
  float *shg;   // a gated shared expert's sum before its gate (prompt batches)
  float *shg_w; // its gate a token, sigmoid(h . gate_inp) (the MoE block before it writes them)
  const float *ffn_w; // while a gated shared expert's decode step is enqueued: its rows' weights (shg_w), else null

  // FAST_GEMM16 (gemm16.cu): a dense launch's weights and activation rows as halves (0 elements: not sized for it)
  __half *w16, *b16;
  size_t w16_elems, b16_elems;
  // FAST_GEMMB16: prompt batches' SwiGLU rows (pairs x ff halves; 0 elements: not sized for it)
  __half *act16;
  size_t act16_elems;
  // launches enqueued on the prompt paths (stats): FAST_GEMM16 products, FAST_ROUTEBIG routers, FAST_FA2 attentions,
  // FAST_GEMMB16 expert blocks, FAST_QKTOK Q/K preparations
  int64_t n_gemm16, n_routebig, n_fa2, n_gemmb16, n_qktok;
  int64_t n_foacc;  // fused output + router launches adding their partials into the accumulators (FAST_FOACC)
  int64_t n_a2merge; // attention launches whose slices a kernel of its own merged (FAST_A2MERGE)
  int64_t n_a2gen;   // head-group attention launches (attn2.cu) on a block with a sliding window or sinks (gpt-oss)
  int64_t n_tmagu;   // one-token gate/up launches whose rows came by bulk copies (FAST_TMAGU)
  int64_t n_attmma; // attention launches on the tensor-core window (FAST_ATTMMA)
  int64_t n_l2pf; // one-token launches fetching the slot's cached keys and values into L2 (FAST_L2KV)
  int64_t n_dng, n_down1, n_gumma, n_dnmma, n_act8; // grouped downs by lane groups (FAST_DNG), one-token downs over every pick's units (FAST_DOWN1), tensor-core gate/ups (FAST_GUMMA) and downs (FAST_DNMMA)
  // KV save/load staging (kvmove.cu; made at first use): device buffer, two pinned host ones
  void *kv_stage;
  uint8_t *kv_host[2];
  cudaEvent_t kv_ev[2];
  int64_t kv_stage_pos;  // positions a staging buffer holds
  int invariant;         // bl_cuda_options.invariant, CU_OPT_INVARIANT
  int64_t logits_rows;   // rows the logits buffer holds
  int max_splits, min_chunk, router_groups, max_tiles;
  // inputs: tokens | pos | seq | out rows (maxT each), then attention tiles (int4)
  int32_t *d_in, *h_in;
  int64_t fa_cap;        // attention tiles the input buffers hold
  float *h_out;          // pinned: logits rows or top-k values/ids
  int64_t h_out_bytes;
  // the decode batches' choice of expert kernels: each MoE layer's experts (tiles) in the step, stored
  // by the picks' launch (device, MB_LAYER_BITS), copied to pinned memory at the step's end; the
  // batch size they are from (0: none pending), the pairs an expert a layer (running mean), the
  // layers on the dp4a kernels, the threshold (thousandths), launches so placed
  int32_t *mb_tiles_d, *mb_tiles_h;
  int mb_ntok_last;
  float mb_ppt[MB_LAYER_BITS];
  uint64_t mb_nomma;
  int mb_pairs_min;
  int64_t n_mb_nomma;
  std::vector<cu_graph> graphs;
  std::vector<cu_graph> graph_seen; // decode shapes run once on the stream (captured when they come back; kept across cu_drop_graphs)
  int use_graphs, prefill_min;
  int64_t steps, graph_steps;
  // bl_cuda_options.profile: an event at each section start (graphs off); time per section summed
  // for decode-sized and larger batches, printed when the context is freed
  int profile, n_marks;
  std::vector<cudaEvent_t> ev;
  std::vector<int> ev_sec;
  double prof_ms[2][CU_SECTIONS];
  int64_t prof_steps[2];
  cu_hybrid *hy; // the host-expert scheduler's state (cuda/hybrid/; made with the context, never null in one)
};

// While a context's call enqueues its work: this thread's kernels in use (cu_fast: the context's
// bits, none in batch-invariant mode), programmatic dependent launch (cu_pdl) and options (cu_opt)
// are the context's; the ones before are restored after.
struct cu_opts_scope {
  int fast, pdl;
  const bl_cuda_options *o;
  explicit cu_opts_scope(const cu_ctx *c) : fast(cu_fast), pdl(cu_pdl), o(cu_opt) {
    cu_fast = c->invariant ? 0 : (int)c->o.fast;
    cu_pdl = (int)c->o.pdl;
    cu_opt = &c->o;
  }
  ~cu_opts_scope() {
    cu_fast = fast;
    cu_pdl = pdl;
    cu_opt = o;
  }
  cu_opts_scope(const cu_opts_scope &) = delete;
  cu_opts_scope &operator=(const cu_opts_scope &) = delete;
};

void cu_mark(cu_ctx *c, int section);
void cu_kv_stage_free(cu_ctx *c);  // kvmove.cu
void cu_rs_free(cu_ctx *c);        // rstate.cu
// plan_blocks.cu: a tensor present (its name for the message) and of shape ne0 x ne1; the MLA and
// delta-net blocks' shapes, with the sizes they add to d
int64_t cu_plan_need(const bl_tensor &t, int64_t bi, const char *what);
int64_t cu_plan_shape(const bl_tensor &t, int64_t bi, const char *what, int64_t ne0, int64_t ne1);
int64_t cu_plan_mla(const cu_fblock &b, int64_t i, cu_dims &d);
int64_t cu_plan_dn(const cu_fblock &b, int64_t i, cu_dims &d);
void cu_profile_collect(cu_ctx *c, bool decode);
void cu_profile_print(cu_ctx *c);

// A host block whose experts are on the NVMe tier (cu_fblock.host_experts == BL_HOST_EXPERTS_DISK):
// the CPU hook runs it for every batch; the card never uploads, pins, reads in place or promotes them.
static inline bool cu_host_on_disk(const cu_blk &b) { return b.host && b.src && b.src->host_experts == BL_HOST_EXPERTS_DISK; }

// A spinning host thread's pause between polls (the mailbox's runner, a sparse layer's wait for its picks).
static inline void cu_cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Host block j of the context's weights (null past the last).
static inline const cu_blk *cu_host_block_at(const cu_ctx *c, int j) {
  return j >= 0 && j < (int)c->w->host_blocks.size() ? &c->w->blocks[(size_t)c->w->host_blocks[(size_t)j]] : nullptr;
}

// The first host block whose experts are in host memory, not on disk (null: none).
static inline const cu_blk *cu_first_host_block_in_ram(const cu_ctx *c) {
  for (int j = 0; cu_host_block_at(c, j); j++)
    if (!cu_host_on_disk(*cu_host_block_at(c, j))) return cu_host_block_at(c, j);
  return nullptr;
}

// Input pointers into d_in.
static inline int32_t *in_tok(const cu_ctx *c) { return c->d_in; }
static inline int32_t *in_pos(const cu_ctx *c) { return c->d_in + c->dm.maxT; }
static inline int32_t *in_seq(const cu_ctx *c) { return c->d_in + 2 * c->dm.maxT; }
static inline int32_t *in_out(const cu_ctx *c) { return c->d_in + 3 * c->dm.maxT; }
static inline int4 *in_tiles(const cu_ctx *c) { return reinterpret_cast<int4 *>(c->d_in + 4 * c->dm.maxT); }
static inline int4 *host_tiles(const cu_ctx *c) { return reinterpret_cast<int4 *>(c->h_in + 4 * c->dm.maxT); }
// a model with delta-net layers, after the tiles: the batch's sequences (maxT int4, dn_args.runs), then each
// token's sequence and place in it (maxT int2, dn_args.tok)
static inline int4 *in_runs(const cu_ctx *c) { return in_tiles(c) + c->fa_cap; }
static inline int4 *host_runs(const cu_ctx *c) { return host_tiles(c) + c->fa_cap; }
static inline int2 *in_tokrun(const cu_ctx *c) { return reinterpret_cast<int2 *>(in_runs(c) + c->dm.maxT); }
static inline int2 *host_tokrun(const cu_ctx *c) { return reinterpret_cast<int2 *>(host_runs(c) + c->dm.maxT); }
static inline size_t in_bytes_all(const cu_ctx *c) {
  return 4 * c->dm.maxT * sizeof(int32_t) + (size_t)c->fa_cap * sizeof(int4) + (c->dm.n_dn ? (size_t)c->dm.maxT * (sizeof(int4) + sizeof(int2)) : 0);
}
static inline size_t rs_slot_floats(const cu_ctx *c) { return (size_t)(c->p.rs_layers * c->p.rs_dim); }
static inline size_t kv_layer_elems(const cu_ctx *c) { return (size_t)c->p.kv_slots * c->p.kv_ctx * c->p.kv_k_dim; }
// The caches a position has: K and V, or K alone where the values live in K (latent attention)
static inline int kv_planes(const cu_ctx *c) { return c->p.kv_v_dim > 0 ? 2 : 1; }
// tokens of a prompt whose latent queries and attended latents a latent attention block holds at once
#define MLA_CHUNK 256

// hybrid.cu
int64_t cu_host_register(cu_weights *w, bool pin); // pin false: the pages stay unregistered (bl_cuda_options.host_pin 0)
void cu_host_unregister(cu_weights *w);
void cu_hybrid_free(cu_ctx *c);
int64_t cu_hybrid_begin(cu_ctx *c, int ntok, bool graphed, bool more); // more: the batch asks for no logits (its prompt goes on)  // a step starts: uploads or the hook
int64_t cu_host_block(cu_ctx *c, const cu_blk &b, int ntok, bool big, bool routed);
bool cu_host_split(const cu_ctx *c, const cu_blk &b, int ntok, bool big); // a one-token step splits b's picks (routed by the card)
// an uploaded host block's picks are made (before its experts); cpu_ok: the layer may give the CPU a share
// (a prompt batch's grouped products, whose sort and combine skip picks of -1)
int64_t cu_hybrid_picked(cu_ctx *c, const int32_t *sel, const float *selw, int ntok, int K, bool cpu_ok);
// cpu_share.cu
int64_t cu_cpu_share_alloc(cu_ctx *c);
void cu_cpu_share_free(cu_ctx *c);
int cu_cpu_share_default(const cu_ctx *c); // CU_OPT_CPU_TOKENS's default (bl_cuda_options.cpu_tokens, else CPU_SHARE_TOKENS)
int cu_cpu_share_skip(const cu_ctx *c); // copies ahead skip experts the last picks gave at most this many tokens (0: none)
int64_t cu_cpu_share_fetch(cu_ctx *c, const int32_t *sel, const float *selw, int n_pairs); // the picks read back with the counts (the share is on: cu_cpu_share_skip)
// of block b's used experts no copy ahead brought (miss), the CPU takes the lightest; they leave miss
int64_t cu_cpu_share_take(cu_ctx *c, const cu_blk &b, const int32_t *counts, uint8_t *miss, int ntok, int K, double expert_us);
int64_t cu_cpu_share_add(cu_ctx *c); // after the layer's combine: the CPU's rows added (none: nothing)
// the hook call of a block (kept for the graphs and named by the mailbox; hybrid.cu)
cu_host_call *cu_host_call_for(cu_ctx *c, const cu_blk &b, int ntok, int k, int rows);
// pull.cu
int64_t cu_pull_init(cu_ctx *c);
void cu_pull_free(cu_ctx *c);
int64_t cu_pull(cu_ctx *c, const cu_blk &b, fmoe_args &fm, bool *pulled);
int64_t cu_pull_size_share(cu_ctx *c, int *share, double *cpu_fixed_us, double *cpu_pick_us, double *card_pick_us);
// promote.cu
int64_t cu_set_promote_slots(cu_ctx *c, int64_t slots);
void cu_promote_free(cu_ctx *c);
void cu_slot_dmats(const cu_ctx *c, const cu_blk &b, dmat out[3]);
int64_t cu_partition(cu_ctx *c, const cu_blk &b);
int64_t cu_promote_pass(cu_ctx *c);
void cu_promote_hits(const cu_ctx *c, int64_t *resident, int64_t *all);
int64_t cu_hybrid_wait(cu_ctx *c, const char *what);           // the step's end, then the hook's error
void cu_host_run(cu_host_call *call, int ntok, const int32_t *ints, const float *flts, float *out); // a call's CPU work (any thread)
// mailbox.cu
int64_t cu_mailbox_start(cu_ctx *c);
void cu_mailbox_stop(cu_ctx *c);
void cu_mailbox_arm(cu_ctx *c);    // a step starts: the host thread polls
int64_t cu_mailbox_check(cu_ctx *c); // after a step: did the host thread answer every call
int cu_mailbox_max_calls();
// posts call (rows x[0..n) and ni/nf picks) / waits for its answer, then x += hout (add) or x = hx
int64_t cu_mailbox_post(cu_ctx *c, const cu_host_call *call, int ntok, int n, const int32_t *si, int ni, const float *sf, int nf);
int64_t cu_mailbox_wait(cu_ctx *c, int n, bool add, bool timed = false);
int cu_mailbox_times(cu_ctx *c, double *a_us, double *w_us, double *c_us); // the timed splits since the last call (share_tune.cu)
// share_tune.cu: after a step's synchronisation, the card's share of a token's picks moved by one
// where the step's own timings say the slower side would gain; the rule itself (tests call it)
int64_t cu_share_tune(cu_ctx *c);
extern "C" int64_t bl_cuda_share_decide(int64_t K, int64_t share, double card_us, double wait_us, double cpu_us, double pick_us, double lat_us);
extern "C" int64_t bl_cuda_share_climb(int64_t K, int64_t share, double layer_us, double *t_of, int64_t *st, int64_t hint);
void cu_share_tune_reset(cu_hybrid *hy);

// forward.cu
bool cu_routed_experts(const cu_ctx *c, const cu_blk &b, fmoe_args &fm); // the one-token experts on the fused router's picks
// A block with biases or the clamped activation (gpt-oss, b.general): its one-token router (the
// normalised row into h, the product with its bias, the picks into sel / selw), and the block's
// expert options (biases, activation) into the one-token expert kernels' arguments.
bool cu_one_token_router_fits(const cu_ctx *c, const cu_blk &b);
int64_t cu_one_token_router(cu_ctx *c, const cu_blk &b);
void cu_expert_options(fmoe_args &fm, const cu_blk &b);
int64_t cu_ffn_block(cu_ctx *c, const cu_blk &b, int ntok, bool big, bool routed);
int64_t cu_enqueue(cu_ctx *c, int ntok, int nout, int topk, int n_fa_tiles);
void cu_drop_graphs(cu_ctx *c);
int64_t cu_ensure_logits(cu_ctx *c, int64_t rows);
