// bloomery CUDA library: host-side declarations shared by the library's files - the argument
// structs of the kernels (passed by value) and their launchers. Launchers enqueue on a stream,
// never synchronize, and return a status (a launch error names the kernel).
#pragma once
#include "common.cuh"

enum { EPI_STORE = 0, EPI_ADD = 1, EPI_SWIGLU = 2 };

// ---- probe (errors.cu) ----
int64_t cu_probe(int *n_devices, int *driver);
bool cu_has_code(int dev);
// Kernel attributes (dynamic shared memory limits), once per process.
int64_t cu_init_kernels(int smem_optin);
// The kernel timeline tracer (trace.cu; only a -DBL_TRACE build records): the buffer installed
// at the first context whose options name a file (bl_cuda_options.trace_path); the records appended to it.
void cu_trace_setup(const char *path);
void cu_trace_dump();

// ---- the grid quant types' test paths (test_iq.cu; no model kernel reads them yet) ----
// Whether type is one (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M), with its geometry.
bool cu_iq_test_geom(int64_t type, cu_type_geom *g);
// n elements (whole blocks) at src dequantized into y (device memory, the default stream).
int64_t cu_test_iq_dequant(int64_t type, const uint8_t *src, int64_t n, float *y);
// y[r] = row r . x (rows of n elements ws bytes apart at w, x quantized to int8 groups on the card).
int64_t cu_test_iq_dot8(int64_t type, const uint8_t *w, int64_t ws, int64_t rows, const float *x, int64_t n, float *y);

// ---- the experts' weighted sum added to the residual (moe.cu), recorded until x is next read ----
// x[t] += sum_j selw[t * k + j] * ypair[pair_of[t * k + j]] (j in pick order, n columns, ntok rows):
// k_moe_combine's sum. FAST_COMBINE: a decode batch's grouped experts (cu_moe_batch) record it in
// the context instead of launching it; the next layer's Q/K/V rows fuse it into their quantization
// (cu_x8_rows_comb, through cu_mv_batch), every other reader of x launches it first
// (cu_combine_flush). pair_of and selw must be written at least two launches before the fused
// kernel (it reads them before its wait), ypair by any earlier one.
struct combine_args {
  const float *ypair;
  int ldy;
  const int32_t *pair_of;
  const float *selw;
  int k;
  float *x;
  int ldx, n;
  int ntok;      // rows; 0: nothing pending
  int64_t fused; // how many were fused so far (the context's count; bl_cuda_ctx_stats)
};
// Launches a pending combine (k_moe_combine) and clears it; none pending (or null): nothing.
int64_t cu_combine_flush(cudaStream_t st, combine_args *cb);

// ---- decode products (matvec.cu) ----
#define MV_WARPS 8
#define MV_THREADS (MV_WARPS * 32)
#define MV_MAX_NT 8
// slices one token's attention by head groups takes at most (attn2.cu; the partials' stride)
#define CU_A2_MAX_SPLITS 64
struct mv_job {
  dmat m;            // rows ne1, length ne0 (= n)
  const float *bias; // added to each output, or null
  float *y;          // row t of the batch at y + t * ldy
  int ldy, epi, blocks;
};
// Rows a kernel before the product already quantized into the x8 slots xq + t * x8_bytes(n)
// (FAST_ATTX8: the attention's output rows; unnormalised, k_x8_rows<false>'s bytes): cu_mv_batch
// skips its own quantization only for exactly these rows (x, ldx, n, nt, xq); nt 0: none.
struct x8_pre {
  const float *x;
  int ldx, n, nt;
  const uint8_t *xq;
  int64_t used; // launches that took them (the context's count; bl_cuda_ctx_stats)
};
struct l2_pf;
struct mv_args {
  mv_job job[3];
  int njobs;
  const float *x; // activation rows (16-byte aligned, n floats each)
  int ldx, n;
  int norm;       // RMS-normalise x rows first (normw may be null: no weights)
  const float *normw;
  float eps;
  int rpw;        // rows per warp (set by cu_matvec)
  int q8;         // one row of x: int8 activations allowed (fmv_args.q8)
  uint8_t *xq;    // decode batches (cu_mv_batch): scratch the int8 kernels quantize the rows into
  size_t xq_cap;  // once a launch (x8rows.cu; null: each block stages them), its bytes
  combine_args *comb; // cu_mv_batch: a pending combine into x (or null), fused into the rows'
                      // quantization or launched before it reads x; cleared when it launches
  x8_pre *pre;        // cu_mv_batch: rows another kernel already quantized into xq (or null)
  const l2_pf *pf;    // one token (cu_fmv): fetched into L2 before the wait, or null
};
int64_t cu_matvec(cudaStream_t st, mv_args a, int ntok, int smem_limit);
int64_t cu_matvec_init(int smem_optin);
// Rows of m (ids[t], or t) dequantized to y + t * ldy.
int64_t cu_rows_f32(cudaStream_t st, const dmat &m, const int32_t *ids, int n_rows, float *y, int ldy);

// ---- routed experts, decode (moe_dec.cu) ----
#define ROUTER_MAX_K 64
#define ROUTER_NT 8
struct router_args {
  const float *x;  // residual rows
  int ldx, n, ntok;
  const float *normw;
  float eps;
  const float *w;  // F32 router [n_expert][ldw]
  int ldw, n_expert, k;
  float *h;        // normalised rows out (ldh), or null
  int ldh;
  float *logits;   // [ntok][n_expert]
  int32_t *sel;    // [ntok][k], ascending expert id
  float *selw;     // [ntok][k]
  int *counters;   // one per token group, zero between launches
  int max_groups;
  int norm_topk;
  float w_scale;
  const float *bias; // added to each logit (n_expert), or null
};
int64_t cu_router(cudaStream_t st, const router_args &a, int smem_limit);
// The router of a prompt batch (route_big.cu; FAST_ROUTEBIG): x's rows RMS-normalised once into
// a.h (cu_rmsnorm), the logits as a tiled f32 product of h with the weights (each weight element
// read once per tile of tokens; no atomics, the same bits every run), then each token's picks by one
// warp (route.cuh's arithmetic); a.counters and a.max_groups are not used. The logits' sums run in
// another order than cu_router's, so they and the picks may differ from its in the last bits.
// Fits: a.h set, n a multiple of 4, h / w rows 16-byte aligned, n_expert <= 1024, k <= ROUTER_MAX_K.
bool cu_route_big_fits(const router_args &a, int smem_limit);
int64_t cu_route_big(cudaStream_t st, const router_args &a, int smem_limit);
int64_t cu_route_big_init(int smem_optin);
// The sigmoid router's picks (router/sigmoid.cu; DeepSeek V3, GLM-4.5) from the logits of ntok tokens:
// chosen by sigmoid(l) + corr (corr null: none) within the n_group_used best of n_group groups (<= 1:
// none), weighted by sigmoid(l), renormalised when norm_topk, times w_scale; sorted by expert id.
struct route_sig_args {
  const float *logits, *corr;
  int n_expert, k, n_group, n_group_used, norm_topk;
  float w_scale;
  int32_t *sel;
  float *selw;
};
bool cu_route_sigmoid_fits(int n_expert, int k, int n_group);
int64_t cu_route_sigmoid(cudaStream_t st, const route_sig_args &a, int ntok);
int64_t cu_route_sigmoid_init();
struct moe_dec_args {
  dmat gate, up, down;
  const float *h;       // normalised rows (ldh)
  int ldh;
  const int32_t *sel;   // [t][k]
  const float *selw;
  int k;
  float *act;           // [t * k + j][ldact]: silu(gate) * up
  int ldact;
  float *x;             // residual (ldx)
  int ldx;
  const float *bg, *bu, *bd; // each expert's gate, up and down biases (rows ldbg / ldbu / ldbd apart), or null
  int ldbg, ldbu, ldbd;
  int act_kind;         // BL_ACT_SWIGLU, or BL_ACT_SWIGLU_OAI with alpha and limit
  float alpha, limit;
};
int64_t cu_moe_dec(cudaStream_t st, const moe_dec_args &a, int ntok, int smem_limit);
int64_t cu_moe_dec_init(int smem_optin);

// ---- one-token decode (fastdec.cu, attn1.cu): weight rows staged with cp.async (one round trip
// a row, issued before the wait on the previous kernel where they do not depend on it), the
// router's selection recomputed by the expert kernels, attention fused with Q/K norm and RoPE ----
// Which of them run (bits of the context whose work this thread enqueues: bl_cuda_options.fast,
// context option CU_OPT_FAST; cu_opts_scope, cuda/ctx.h, sets them).
// FAST_Q8: Q4_K / Q6_K rows dotted with int8 activations by dp4a (where the caller allows it).
// FAST_ROUTE: the router folded into the attention output product, whose last block selects the
// experts once (froute.cu; with FAST_MOE). FAST_ATTN2: one-token attention with more blocks and
// threads (a block per head group and slice, 4 threads a position; attn2.cu; before FAST_ATTN).
// FAST_X8: decode batches' int8 products take their activation rows quantized once a launch
// (x8rows.cu) instead of each block staging them (the same values bit for bit; off: for A/B runs).
// FAST_COMBINE: decode batches' expert outputs added to x by the next layer's row quantization
// (one launch fewer a layer). FAST_QKA: decode batches of distinct slots take Q/K norm, RoPE and the cache write inside
// the attention (no cu_qk_prep launch). FAST_ATTX8: decode batches' attention (attn2.cu) also writes
// its output rows' int8 x8 slots, so the output product skips its k_x8_rows launch. FAST_GEMMRAW:
// prompt batches' tensor-core products copy each K slice's stored blocks into shared memory at once
// (gemm.cu). FAST_GEMM16: prompt batches' dense products (Q/K/V, attention output, a dense FFN's
// down) from an f16 copy of the weights made once a launch, on a pipelined f16 product (gemm16.cu).
// FAST_ROUTEBIG: prompt batches' router as a tiled product over RMS-normalised rows written once,
// then a selection launch (route_big.cu). FAST_FA2: prompt attention with the query heads of a KV
// group sharing each staged K/V tile, the next tile copied while this one is used (fa.cu). The same
// FAST_GEMMB16: prompt batches' expert products take their activation rows as halves converted
// once (h) or written so by gate/up (the SwiGLU rows), copied into the tiles by cp.async.
// FAST_QKTOK: the Q/K norm, RoPE and cache write of prompt batches (and decode batches with a
// slot's tokens together) by a block a token (attn.cu k_qk_tok).
// FAST_DNG: decode batches' grouped down on int8 rows of up to 48 units a lane group of 4
// lanes a row (moe_batch.cu dn_lanes). FAST_DOWN1: the one-token down's lanes spread over every
// (pick, unit) of a row (fastdec.cu k_fdown). The same values bit for bit with each off (A/B runs),
// except FAST_ROUTEBIG, FAST_DNG and FAST_DOWN1 (a bound, stated by their tests: a row's units
// are summed in another order). FAST_GUMMA: decode batches' grouped gate/up on Q4_K rows as
// m16n8k32 s8 tensor-core products (moe_batch.cu k_mb_gu_mma; exact int32 sums, the scales applied
// in another order: a bound). FAST_DNMMA: their down on Q4_K / Q6_K rows the same way (k_mb_down_mma,
// mma8.cuh; before FAST_DNG). FAST_ACT8: the one-token gate/up (32 rows a block) quantizes its
// SwiGLU rows for down, which copies them (fastdec.cu k_fgu8; bit for bit). FAST_L2KV: one token's
// Q/K/V product fetches into L2 the slot's cached keys and values the attention reads next, while
// DRAM is idle (l2pf.cuh). A hint only: the same values bit for bit. FAST_ATTMMA: one token's
// attention over longer contexts (attn2.cu, 8 query heads of 128 a KV head) forms a window's scores
// and values as m16n8k16 f16 products (attn2_mma.cuh; q and the probabilities as halves: a bound).
// FAST_FOACC: the fused output + router's
// blocks also add their partial logits, as 64-bit integers of 2^-32, into one accumulator an
// expert (red.add: integer sums, the same bits in any order), so its last block reads X integers
// instead of summing the blocks' X x blocks floats (fopick.cuh fo_acc_sum; partials of 2^22 or
// more, or not numbers, raise a flag and the floats are summed as without the bit: a bound).
// FAST_A2MERGE: long contexts' one-token attention merges its slices in a kernel of its own, a
// block a head (attn2.cu k_a2merge; the slices summed in another order: a bound). FAST_TMAGU: the
// one-token gate/up (k_fgu8) copies each block's gate and up rows by two bulk copies (cp.async.bulk
// on an mbarrier, sm_90+, packed 16-byte aligned rows; the same bytes: bit for bit).
// Bits 256, 4194304, 8388608, 33554432 and 134217728 were FAST_PICK, FAST_ATT8, FAST_L2DN, FAST_L2W
// and FAST_PICKX, deleted with their kernels for measuring slower (docs/cuda.md "The fast bits");
// their numbers stay unused so the others keep theirs.
enum {
  FAST_MV = 1, FAST_MOE = 2, FAST_ATTN = 4, FAST_Q8 = 8, FAST_ROUTE = 16, FAST_ATTN2 = 32, FAST_X8 = 64,
  FAST_COMBINE = 128, FAST_QKA = 512, FAST_ATTX8 = 1024, FAST_GEMMRAW = 2048, FAST_GEMM16 = 4096,
  FAST_ROUTEBIG = 8192, FAST_FA2 = 16384, FAST_GEMMB16 = 32768, FAST_QKTOK = 65536, FAST_DNG = 131072, FAST_DOWN1 = 262144,
  FAST_GUMMA = 524288, FAST_DNMMA = 1048576, FAST_ACT8 = 2097152,
  FAST_L2KV = 16777216, FAST_ATTMMA = 67108864, FAST_FOACC = 268435456,
  FAST_A2MERGE = 536870912, FAST_TMAGU = 1073741824,
  FAST_ALL = FAST_MV | FAST_MOE | FAST_ATTN | FAST_Q8 | FAST_ROUTE | FAST_ATTN2 | FAST_X8 | FAST_COMBINE | FAST_QKA | FAST_ATTX8 | FAST_GEMMRAW |
             FAST_GEMM16 | FAST_ROUTEBIG | FAST_FA2 | FAST_GEMMB16 | FAST_QKTOK | FAST_DNG | FAST_DOWN1 | FAST_GUMMA | FAST_DNMMA | FAST_ACT8 |
             FAST_L2KV | FAST_ATTMMA | FAST_FOACC | FAST_A2MERGE | FAST_TMAGU, // 1967128319
  // the default: every bit (the opt-in ones, slower, were deleted)
  FAST_DEFAULT = FAST_ALL
};
// The bits of the context whose work this thread enqueues (cu_opts_scope, cuda/ctx.h: its
// bl_cuda_options.fast, 0 in batch-invariant mode); FAST_DEFAULT outside a context's calls.
extern thread_local int cu_fast;
// That context's options (cu_opts_scope; cu_options_default() outside a context's calls).
extern thread_local const bl_cuda_options *cu_opt;
const bl_cuda_options &cu_options_default();
// The card has bulk copies (cp.async.bulk, mbarriers: sm_90+; set once with the device's major).
extern int cu_tma_ok;
extern int cu_sms; // the device's SM count (set by cu_init_kernels)
extern int cu_smem_sm; // shared memory an SM has (bytes; set by cu_init_kernels)
// Bytes a later kernel of the step reads, fetched into L2 by a launch's blocks (l2pf.cuh): the
// rows [0, pos) of one slot's K and V caches (kc null: none).
struct l2_pf {
  const __half *kc, *vc; // this layer's caches
  int64_t slot_stride;   // halves between slots
  int kd;                // halves a position
  const int32_t *pos, *seq; // the step's token (one token)
  int window;               // the attention's sliding window (0: every position)
};
#define FAST_CAP_MAX 8224 // bytes of a warp's weight buffer (a 2048-float F32 row at any alignment)
struct fmv_job {
  dmat m;
  const float *bias;
  float *y; // one output row
  int epi, blocks;
};
struct fmv_args {
  fmv_job job[3];
  int njobs;
  const float *x; // one activation row of n floats
  int n;
  int norm;
  const float *normw;
  float eps;
  float *h; // when set, block 0 writes the staged (normalised) row here
  int rpw;  // rows a warp
  int cap;  // bytes a row slot takes
  int nslot; // row slots a warp (2, or 4: two pairs of rows in flight)
  int q8;   // int8 activations allowed (FAST_Q8; the forward pass sets it, the f32 conformance path does not)
  l2_pf pf; // fetched into L2 before the wait (FAST_L2KV: the attention's cache rows)
};
// y = W x for one row of x, jobs grouped by type (two types in one launch where paired). Sets
// *done false (and enqueues nothing) when the shapes need the general kernels.
int64_t cu_fmv(cudaStream_t st, fmv_args a, int smem_limit, int sm_count, bool *done);
struct fmoe_args {
  dmat gate, up, down;
  const float *logits; // the token's router logits, or null: one expert (0) of weight 1
  const int32_t *sel;  // or the token's k picks, selected by an earlier kernel (froute.cu), and
  const float *selw;   // their weights; written at least two kernels before down (read before its wait)
  int n_expert, k, norm_topk;
  float w_scale;
  const float *h; // row into gate/up (gate.ne0): normalised, or RMS-normalised on the way in when hnorm
  int hnorm;
  const float *normw; // hnorm: the norm weights (null: none) and epsilon
  float eps;
  float *act;     // [k][gate.ne1]
  float *x;       // residual (down.ne1)
  int cap;
  int q8;         // int8 activations allowed
  int flat;       // down (set by cu_fmoe, FAST_DOWN1): every pick's row staged at once, a warp's lanes over all (pick, unit)
  uint8_t *act8;  // or null: scratch (act8_cap bytes, 16-byte aligned) gate/up quantizes its SwiGLU rows into for down (FAST_ACT8)
  size_t act8_cap;
  int tma;   // gate/up's rows by two bulk copies a block (set by cu_fmoe: FAST_TMAGU, sm_90+, rows packed and 16-byte aligned)
  // gpt-oss: each expert's gate, up and down biases (rows ld* floats apart an expert, or null) and
  // the clamped SwiGLU (act_kind BL_ACT_SWIGLU_OAI); such a launch takes the picks in memory (sel)
  // and the kernels without FAST_ACT8 (k_fgu, k_fdown)
  const float *bg, *bu, *bd;
  int ldbg, ldbu, ldbd;
  int act_kind;
  float alpha, limit;
};
int64_t cu_fmoe(cudaStream_t st, fmoe_args a, int smem_limit, bool *done, bool *flat = nullptr, bool *act8 = nullptr,
                bool *tma = nullptr); // *flat: down took FAST_DOWN1; *act8: gate/up quantized down's rows (FAST_ACT8); *tma: gate/up's bulk copies (FAST_TMAGU)
bool cu_fmoe_fits(const fmoe_args &a, int smem_limit);
int64_t cu_fast_init(int smem_optin);
// One token's attention output product fused with the router (froute.cu): x += O att, then the
// router's logits of RMSNorm(x) and the token's picks by the last block.
struct fo_args {
  dmat o;           // rows E, length n
  const float *att; // n floats
  float *x;         // residual, E floats
  int n, E;
  const float *rw;  // router weights, F32 [X][ldw] (16-byte aligned rows)
  int ldw, X, K, norm_topk;
  float w_scale;
  const float *normw; // the MoE block's norm weights (E), or null
  float eps;
  float *part;      // [blocks][ldp] partial logits, a row a block (ldp >= X rounded up to 4; 16-byte aligned)
  int ldp;
  int *counter;     // zero between launches
  float *logits;    // X out
  int32_t *sel;     // K out, ascending expert id
  float *selw;      // K out
  int cap, q8;
  unsigned long long *acc; // or null (FAST_FOACC): X accumulators FO_ACC_STRIDE apart, zero between launches
  int *ovf;                // with acc: raised by a partial the accumulators cannot take; zero between launches
  float acc_lim;           // with acc: the magnitude from which a partial raises it (FO_ACC_LIM at most)
  const float *ob;         // or null: the output product's bias (E floats; gpt-oss)
  const float *rb;         // or null: the router's bias (X floats; gpt-oss), added to the scaled logits
};
bool cu_fo_fits(const fo_args &a, int smem_limit);
int64_t cu_fo(cudaStream_t st, fo_args a, int smem_limit);
int64_t cu_fo_init(int smem_optin);
// Rows of x a fused block covers (the partial logits buffer holds ceil(E / FO_BLOCK_ROWS) rows of X rounded up to 4).
#define FO_BLOCK_ROWS 16
// FAST_FOACC's accumulators: an expert's 64-bit sum of 2^-32 units every 128 bytes (its own L2 line),
// partials below 2^22 in magnitude (so the sum of up to 512 blocks' stays below 2^63 units)
#define FO_ACC_STRIDE 16
#define FO_ACC_LIM 4194304.0f

// ---- attention (attn.cu) ----
struct rope_params {
  int n_rot, mode;
  float theta_scale, freq_scale, ext_factor, mscale, corr_lo, corr_hi;
};
struct qk_args {
  float *q, *k;
  const float *v;
  int ldq, ldk, ldv;
  const float *qn, *kn; // per-head norm weights or null
  float eps;
  __half *kc, *vc;      // this layer's cache: [slot][ctx][kd]
  int64_t slot_stride;
  int kd;
  const int32_t *pos, *seq;
  int nh, nkv, hd;
  rope_params rope;
};
int64_t cu_qk_prep(cudaStream_t st, const qk_args &a, int ntok, bool *tok = nullptr); // *tok: k_qk_tok took it (FAST_QKTOK)
struct attn_args {
  const float *q;
  int ldq;
  const __half *kc, *vc;
  int64_t slot_stride;
  int kd;
  const int32_t *pos, *seq;
  float scale;
  int nh, nkv, hd, G;
  float *part;    // [ntok][nh][max_splits][hd + 2]
  int *counters;  // [ntok][nkv], zero between launches
  int max_splits, min_chunk;
  float *out;
  int ldo;
  int window;           // a query sees its own and the window - 1 positions before it (0: all)
  const float *sinks;   // a logit per query head joining every softmax's denominator (null: none)
};
int64_t cu_attn_decode(cudaStream_t st, const attn_args &a, int ntok);
bool cu_attn_decode_supported(int hd, int G);
struct fa_args {
  const float *q;
  int ldq;
  const __half *kc, *vc;
  int64_t slot_stride;
  int kd;
  const int32_t *pos;
  const int4 *tiles; // {first token, count (<= 64), slot, largest position}
  int nh, G;
  float scale_log2;
  float *out;
  int ldo;
  int window;          // > 0: a query at position p sees positions p - window + 1 .. p (gpt-oss's sliding layers)
  const float *sinks;  // a logit per query head in each row's softmax denominator (gpt-oss), or null
};
int64_t cu_flash_prefill(cudaStream_t st, const fa_args &a, int hd, int n_tiles, bool *fa2 = nullptr); // *fa2: k_fa2 took it (FAST_FA2)
bool cu_flash_supported(int hd);
struct attn1_args {
  const float *q, *k, *v; // the token's projections (nh * hd, nkv * hd, nkv * hd)
  const float *qn, *kn;   // per-head norm weights or null
  float eps;
  rope_params rope;
  __half *kc, *vc;        // this layer's cache
  int64_t slot_stride;
  int kd;
  const int32_t *pos, *seq;
  float scale;
  int nh, nkv, G;
  float *part;   // [nh][max_splits][hd + 2] (attn2.cu: [ntok][nh][CU_A2_MAX_SPLITS][hd + 4])
  int *counters; // [nkv], zero between launches
  int max_splits, min_chunk;
  float *out;
  // attn2.cu only - decode batches: ntok tokens (0: one) of any slots, each a block column z, their
  // rows ldq floats apart; prepped: Q/K norm, RoPE and the cache write already done (cu_qk_prep),
  // so every key and value comes from the cache and q is only scaled
  int ntok, ldq, prepped;
  int ldk; // decode batches not prepped (distinct slots): floats between tokens' k (and v) rows
  int long_chunk; // set by cu_attn2: long contexts' slice length past 32 slices
  uint8_t *x8;    // attn2.cu decode batches (FAST_ATTX8), or null: each token's output row also
                  // quantized into the slot x8 + t * x8_bytes(nh * hd) exactly as k_x8_rows<false>
  int sep_merge;  // attn2.cu, set by cu_attn2: the slices are merged by k_a2merge (FAST_A2MERGE)
  // attn2.cu only (attn1.cu takes neither: its callers leave them 0 / null): a sliding window (> 0:
  // a query at position p sees p - window + 1 .. p) and a sink logit per query head joining every
  // softmax's denominator (gpt-oss), as cu_attn_decode takes them
  int window;
  const float *sinks;
};
// One token's attention with its Q/K norm, RoPE and cache write fused in; false: not this shape.
bool cu_attn1_supported(int hd, int G, int n_rot);
int64_t cu_attn1(cudaStream_t st, const attn1_args &a, int hd);
int64_t cu_attn1_init(int smem_optin);
// The same with more blocks (attn2.cu): the heads a block takes depend on the context class of
// the step (cu_attn2_class of the token's position + 1; the host captures a graph per class).
bool cu_attn2_supported(int hd, int G, int n_rot);
int cu_attn2_class(int n);
// *mma: the tensor-core window (FAST_ATTMMA); *sep: the merge by a kernel of its own (FAST_A2MERGE)
int64_t cu_attn2(cudaStream_t st, const attn1_args &a, int hd, int cls, bool *mma = nullptr, bool *sep = nullptr);
int64_t cu_attn2_init(int smem_optin);
int64_t cu_attn_init(int smem_optin);
int64_t cu_attn_dec_init();
int64_t cu_misc_init();
int64_t cu_moe_init();

// ---- multi-head latent attention (mla.cu; DeepSeek V2/V3, Kimi K2): the absorbed form ----
// The cache row of a position is [latent (kvl) | shared rotated key part (nr)] in f16 (dk = kvl + nr);
// a latent query is [q_nope times k_b's head (kvl) | the head's rotated part (nr)]; the values are
// the rows' latents. Latents of at most CU_MLA_MAX_LATENT (a multiple of 32), rows of at most
// CU_MLA_MAX_ROW (a multiple of 8).
#define CU_MLA_MAX_LATENT 512
#define CU_MLA_MAX_ROW 640
// a decode batch's tokens split their positions into this many slices, merged after (prompts: one)
#define CU_MLA_SPLITS 16
struct mla_args {
  float *kv;          // the tokens' [latent | rope] rows, ldkv apart (the latent already normalised)
  int ldkv;
  const float *q;     // the query heads [nope | rope] (qh = nope + nr each), ldq apart
  int ldq;
  float *ql;          // the latent queries, nh rows of dk a token
  float *lat;         // the attention's outputs: nh latents of kvl a token
  float *part;        // decode batches' slices: [ntok][nh][CU_MLA_SPLITS][kvl + 2]
  __half *kc;         // this layer's cache
  int64_t slot_stride;
  const int32_t *pos, *seq;
  int nh, kvl, nr, nope;
  float scale;
  rope_params rope;
};
bool cu_mla_supported(int kvl, int dk);
// The tokens' key parts rotated in place and their cache rows written.
int64_t cu_mla_cache(cudaStream_t st, const mla_args &a, int ntok);
// The queries' rotated parts into the latent queries' tails (their latent parts: cu_head_rows on k_b).
int64_t cu_mla_qrope(cudaStream_t st, const mla_args &a, int ntok);
// Each latent query against its slot's rows 0..pos (one KV head for every query head).
int64_t cu_mla_attn(cudaStream_t st, const mla_args &a, int ntok);
// Per-head products: y[t][h] (yh floats a head, ldy a token) = W_h x[t][h] (xh, ldx), W_h slab h of w
// (w.ne1 rows of w.ne0 = n elements); k_b's absorption into the queries and v_b's values.
struct head_rows_args {
  dmat w;
  const float *x;
  int ldx, xh;
  float *y;
  int ldy, yh;
  int nh;
};
int64_t cu_head_rows(cudaStream_t st, const head_rows_args &a, int ntok, int smem_limit);
// Prompts on the tensor cores (mla_mma.cu): the prefill tiles (fa_args.tiles' form, absolute token
// indices) of tokens t_base.. whose latent queries a.ql holds (a.lat gets their latents; a.pos and
// a.seq absolute). False / refused where the card's shared memory or the shape does not take it.
bool cu_mla_mma_supported(int kvl, int dk);
int64_t cu_mla_prefill(cudaStream_t st, const mla_args &a, const int4 *tiles, int n_tiles, int t_base);
int64_t cu_mla_init(int smem_optin);
// A prompt chunk's per-head products on the tensor cores (mla_mma.cu): the slabs dequantized once into
// w16 (nh x rows x n halves), then f16 products with f32 sums; false / refused where the type or the
// layout does not take it (cu_head_rows does).
bool cu_head_mma_supported(const dmat &w, int nh, size_t w16_elems);
int64_t cu_head_mma(cudaStream_t st, const head_rows_args &a, int ntok, __half *w16, size_t w16_elems);

// ---- tensor-core products (gemm.cu) ----
#define GEMM_BM 128
#define GEMM_BK 128
struct gemm_job {
  dmat w;             // weights (rows ne1, K = ne0); one type for all jobs of a launch
  float *c;           // output row start + i at c + (start + i) * ldc
  int ldc;
  const float *bias;
  int64_t bias_e;     // grouped: elements between one expert's bias row and the next (gpt-oss's per-expert biases; 0: one row)
  int blocks;         // set by cu_gemm
};
struct gemm_args {
  gemm_job job[3];        // several matrices over the same activations in one launch (Q, K, V)
  int njobs;
  dmat w2;                // EPI_SWIGLU: the up weights (rows pair with job 0's gate rows)
  const float *b;         // activation rows (ldb)
  int ldb;
  const __half *b16;      // or the same rows as halves (ldb; rows and ldb 16-byte aligned), copied by cp.async (FAST_GEMMB16)
  __half *c16;            // EPI_SWIGLU: the products written as halves here (row stride job[0].ldc) instead of job[0].c
  const int32_t *b_rows;  // activation row of tile entry start + i, or null (start + i)
  const int4 *tiles;      // grouped: {expert, start, count, 0} per grid row; null: dense
  const int32_t *n_tiles; // grouped: tiles in use (device)
  int ntok;               // dense: rows of b
  int mode;               // EPI_STORE / EPI_ADD / EPI_SWIGLU
  const float *bias2;     // EPI_SWIGLU: the up rows' bias (job 0's bias is the gate rows'), bias2_e apart an expert
  int64_t bias2_e;
  int act;                // EPI_SWIGLU: BL_ACT_SWIGLU, or BL_ACT_SWIGLU_OAI (gpt-oss's clamped form, with alpha and limit)
  float alpha, limit;
};
// grid rows: dense ceil(ntok / bn); grouped max_tiles. bn is 32 or 64. Rows of K elements, any
// multiple of 32 (and of the type's block): the last slice of K past the row reads as zeros.
int64_t cu_gemm(cudaStream_t st, gemm_args a, int bn, int grid_y);
bool cu_gemm_supported(int type, int ne0);
int64_t cu_gemm_init(int smem_optin);

// ---- prompt batches' dense products from f16 copies (gemm16.cu, FAST_GEMM16) ----
#define GEMM16_MIN_TOK 128 // batches of fewer rows keep gemm.cu (one or two token tiles: little to save)
struct gemm16_job {
  const __half *w;    // rows x K halves (row stride K), 16-byte aligned
  int rows;
  float *c;           // output row start + i at c + (start + i) * ldc
  int ldc;
  const float *bias;
  int blocks;         // set by cu_gemm16
};
struct gemm16_args {
  gemm16_job job[3];  // several matrices over the same activations in one launch (Q, K, V)
  int njobs;
  const __half *b;    // activation rows as halves (ldb, a multiple of 8)
  int ldb;
  int K, ntok;
  int mode;           // EPI_STORE / EPI_ADD
};
// The weights w (any type cu_gemm_supported takes) as rows ne1 x ne0 halves, each element as
// gemm.cu's tiles convert it.
int64_t cu_deq16(cudaStream_t st, const dmat &w, __half *out);
// ntok rows of n floats (ldx) as halves (ldo).
int64_t cu_f16_rows(cudaStream_t st, const float *x, int ldx, int n, int ntok, __half *out, int ldo);
// The product, bit for bit k_gemm's (bn 32 or 64 activation rows a tile).
int64_t cu_gemm16(cudaStream_t st, gemm16_args a, int bn);
bool cu_gemm16_fits(int smem_optin);
int64_t cu_gemm16_init(int smem_optin);

// ---- routed experts, batches (moe.cu) ----
struct sort_args {
  const int32_t *sel;
  int n_pairs, k, n_expert, bn;
  int32_t *pair_tok, *pair_of;
  int4 *tiles;
  int32_t *n_tiles;
};
int64_t cu_moe_sort(cudaStream_t st, const sort_args &a);
int64_t cu_moe_combine(cudaStream_t st, const float *ypair, int ldy, const int32_t *pair_of, const float *selw, int k,
                       float *x, int ldx, int n, int ntok);

// ---- routed experts, decode batches of 2..MV_MAX_NT tokens grouped by expert (moe_batch.cu) ----
struct moe_batch_args {
  dmat gate, up, down;    // gate/up: rows ff of length n; down: rows n of length ff
  const float *h;         // normalised rows (ldh)
  int ldh;
  const int32_t *sel;     // [t][k] the router's picks (ascending expert id) and weights
  const float *selw;
  int k, n_expert;
  int32_t *pair_tok, *pair_of; // the sort's outputs (ntok * k each)
  int4 *tiles;            // {expert, first pair, pairs, 0}, max_tiles of them
  int32_t *n_tiles;
  int max_tiles;
  float *act;             // [pair][ldact]: silu(gate) * up, pairs in sorted order
  int ldact;
  float *ypair;           // [pair][ldy]: down's output a pair
  int ldy;
  float *x;               // residual (ldx): each token's weighted picks added
  int ldx;
  int q8;                 // int8 activations allowed for Q4_K / Q6_K rows (with FAST_Q8)
  int ntok;               // set by cu_moe_batch
  uint8_t *hq;            // scratch the int8 gate/up quantizes h into once a step (x8rows.cu's
  size_t hq_cap;          // layout; null: each block stages h itself), its bytes
  combine_args *defer;    // FAST_COMBINE: the combine recorded here (nothing pending there before), not launched
  int no_mma;             // the dp4a kernels even where FAST_GUMMA / FAST_DNMMA would take the tensor cores
  int32_t *tile_stat;     // the picks' launch stores the step's tiles (experts) here (null: not counted)
};
// Whether the grouped kernels take the step (else cu_moe_dec); BLOOMERY_CUDA_MOE_BATCH=0: never.
bool cu_moe_batch_fits(const moe_batch_args &a, int ntok, int smem_limit);
// Sort (unless grouped: cu_moe_batch_pick ran; hq_ready: it quantized gate/up's rows into a.hq),
// gate/up, down and combine (recorded in *a.defer instead when set): launches of shapes fixed by
// ntok, no host synchronisation.
int64_t cu_moe_batch(cudaStream_t st, const moe_batch_args &a, int ntok, int smem_limit, bool grouped, bool hq_ready, bool *dng = nullptr,
                     bool *gumma = nullptr, bool *dnmma = nullptr); // *dng: down by lane groups (FAST_DNG); *gumma / *dnmma: gate/up / down on the tensor cores
// Each token's picks from its router logits ([t][n_expert], route.cuh's arithmetic, as
// cu_route_pick) into a.sel / a.selw, and the pairs grouped by expert as cu_moe_batch's sort
// does: one launch of one block, and (with FAST_X8, int8 gate/up and a.hq) ntok more blocks that
// quantize the rows of a.h into a.hq for gate/up (*hq_ready). Fits: cu_moe_batch_fits, n_expert
// <= 256, k <= 32.
bool cu_moe_batch_pick_fits(const moe_batch_args &a, int ntok, int smem_limit);
int64_t cu_moe_batch_pick(cudaStream_t st, const moe_batch_args &a, const float *logits, int norm_topk, float w_scale, int ntok, int smem_limit,
                          bool *hq_ready);
int64_t cu_moe_batch_init(int smem_optin);

// ---- dense products of decode batches, 2..MV_MAX_NT tokens (mv_batch.cu) ----
// y = W x for ntok rows of x (a's jobs, norm, bias and epilogues as cu_matvec): one launch for jobs
// of one type or one paired type (Q4_K + Q6_K), every weight row read once and dotted with all the
// rows (int8 activations + dp4a for Q4_K / Q6_K / Q8_0 when a.q8 and FAST_Q8, else f32). h (or
// null; f32 activations only): the staged, normalised rows are written there (ldh apart). Sets
// *done false and enqueues nothing where cu_matvec must run instead: without FAST_MV (the
// batch-invariant mode), BLOOMERY_CUDA_MV_BATCH=0, ntok outside 2..MV_MAX_NT, or shapes it lacks.
// a.xq (with FAST_X8): the int8 kernels' rows are normalised and quantized into it once by a
// launch of their own first (cu_x8_rows), and every block copies them from there. a.comb: a
// pending combine is fused into that launch (cu_x8_rows_comb) or launched before anything reads x.
// a.pre (FAST_ATTX8): where it holds exactly these rows, already in a.xq (unnormalised), that launch
// is skipped and a.pre->used counted.
int64_t cu_mv_batch(cudaStream_t st, const mv_args &a, int ntok, float *h, int ldh, int smem_limit, bool *done);
// Whether cu_mv_batch would take a's ntok rows (h null) on int8 rows quantized once into a.xq,
// unnormalised (cu_x8_rows' shapes): a kernel before may then write those slots itself (a.pre).
bool cu_mv_batch_x8_fits(const mv_args &a, int ntok, int smem_limit);
// Each token's k picks (ascending expert id) and weights from its router logits ([t][n_expert]),
// route.cuh's arithmetic (as cu_router's): one warp a token. Fits: n_expert <= 256, k <= 32.
bool cu_route_pick_fits(int n_expert, int k);
int64_t cu_route_pick(cudaStream_t st, const float *logits, int ntok, int n_expert, int k, int norm_topk, float w_scale, int32_t *sel, float *selw);
int64_t cu_mv_batch_init(int smem_optin);

// ---- a decode batch's activation rows quantized once a launch (x8rows.cu) ----
// nt (1..MV_MAX_NT) rows of x (ldx floats apart, 16-byte aligned) into the x8 slots xq + t *
// x8_bytes(n) (dot8.cuh's layout, int8 values in x8_pos order, as the batched kernels stage them;
// cap: the scratch's bytes), RMS-normalised first with normw (null: no weights) and eps when
// norm. Sets *done false and enqueues nothing where the shape does not take it (n % 32, longer
// normalised rows than the kernel holds, a scratch too small). Launch shape: nt and n only.
int64_t cu_x8_rows(cudaStream_t st, const float *x, int ldx, int n, int nt, int norm, const float *normw, float eps, uint8_t *xq, size_t cap,
                   bool *done);
// The same normalised rows with the pending combine *cb added first (x += the experts' sum, stored;
// then normalised and quantized; bit for bit the two launches): one launch, and cb cleared. Sets
// *done false and enqueues nothing where it does not take the shape (cb is not over these rows, k >
// 16, rows over 8,192) or nothing is pending.
int64_t cu_x8_rows_comb(cudaStream_t st, const float *x, int ldx, int n, int nt, const float *normw, float eps, uint8_t *xq, size_t cap,
                        combine_args *cb, bool *done);
// Bytes of scratch MV_MAX_NT quantized rows of up to n elements take.
size_t cu_x8_scratch_bytes(int64_t n);
int64_t cu_x8_rows_init();

// ---- rows, norms, selection (misc.cu) ----
// y[t] = rmsnorm(x[rows ? rows[t] : t]) * w
int64_t cu_rmsnorm(cudaStream_t st, const float *x, int ldx, const int32_t *rows, int n, const float *w, float eps,
                   float *y, int ldy, int ntok);
// The k best (value desc, index asc) of each of n_rows rows of n values; cand: scratch of
// n_rows * TOPK_CHUNKS * k (value, index) pairs.
#define TOPK_CHUNKS 64
#define TOPK_MAX 64
int64_t cu_topk(cudaStream_t st, const float *x, int ldx, int n, int n_rows, int k, float *cand_v, int32_t *cand_i,
                float *out_v, int32_t *out_i);

// ---- the gated delta-net (deltanet/deltanet.cu; Qwen3-Next, Qwen3.5 / 3.6; ffi/cpu/deltanet.c is the reference) ----
// A batch's tokens by sequence (the CPU's groups): runs[r] {first, count, slot, -} for each sequence in the
// order it first comes, its tokens runs[first .. first + count).w (batch order within it); tok[t] {its
// sequence's r, its place there}. A sequence whose first token is at position 0 starts from zeros. The slot's state
// is the CPU's layout: the conv's last K - 1 inputs ([K - 1][C], oldest first), then each v head's S
// ([hv][hk], row i: v element i's weights over k).
#define CU_DN_MAX_HEAD 128
#define CU_DN_MAX_TAPS 16
bool cu_dn_supported(int hk, int hv, int taps);
struct dn_args {
  const float *raw;           // the conv's inputs [ntok][C]: q, k, v channels
  float *cv;                  // the conv's outputs after SiLU [ntok][C]
  const float *z;             // the output gate's rows [ntok][vd]
  const float *beta, *alpha;  // a token's nv each, ldb apart (Qwen3.5), or
  const float *ba;            // [ntok][2 nv]: for each k head its v heads' betas, then their alphas (Qwen3-Next)
  const float *convw;         // [C][K]: a channel's taps, the current input's last
  const float *dt, *a, *normw;
  float *o;                   // the heads' outputs [ntok][vd], gated and normalised in place after
  float *rs;                  // the context's recurrent state: slot s's layer at rs + s * slot_floats + layer_off
  int64_t slot_floats, layer_off;
  const int32_t *pos;
  const int4 *runs;
  const int2 *tok;
  int ldb;
  int ntok, n_runs;           // n_runs: entries of runs[] (those of 0 tokens do nothing)
  int C, K, nk, nv, hk, hv, grouped;
  float eps;
  int seq_conv;               // the conv a thread a channel walking each sequence's tokens (decode steps), not a thread a token
};
// The conv and its SiLU into cv, and each sequence's slot's conv state moved on.
int64_t cu_dn_conv(cudaStream_t st, const dn_args &a);
// The delta rule of every v head over each sequence's tokens (q, k L2-normalised on the way), then
// o = rmsnorm(o) * normw * silu(z) per head, into o.
int64_t cu_dn_rule(cudaStream_t st, const dn_args &a);
// Older Qwen3-Next files' fused rows [ntok][C + vd] (for each k head its q, k, then its v heads' v and z)
// split into the conv's inputs and z.
int64_t cu_dn_split_qkvz(cudaStream_t st, const dn_args &a, const float *qkvz);

// ---- an attention's output gate (attention/gate.cu; Qwen3-Next, Qwen3.5: q's rows hold each head's query then its gate) ----
// qg [ntok][2 nh hd] split into q [ntok][nh hd] and g [ntok][nh hd].
int64_t cu_attn_gate_split(cudaStream_t st, const float *qg, float *q, float *g, int nh, int hd, int ntok);
// att[t][i] *= sigmoid(g[t][i]) over n columns.
int64_t cu_attn_gate_apply(cudaStream_t st, float *att, const float *g, int n, int ntok);
// A shared expert's scalar gate (Qwen): h[t] = rmsnorm(x[t]) * w (cu_rmsnorm's), gw[t] = sigmoid(h[t] . g);
// and its sum under the gate, x[t] += gw[t] * y[t] over E columns.
int64_t cu_rmsnorm_gate(cudaStream_t st, const float *x, const float *w, float eps, const float *g, float *h, float *gw, int E, int ntok);
int64_t cu_gated_add(cudaStream_t st, const float *gw, const float *y, float *x, int E, int ntok);
