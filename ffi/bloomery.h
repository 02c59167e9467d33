/* bloomery native ABI: the one C header every native library (CPU, CUDA, Metal) implements
 * and the ffi/ TypeScript bindings reach through bun:ffi. Every entry point returns a status (BL_OK = 0) or a
 * value documented as such; the message of the last failure on this thread is bl_last_error().
 * Structs passed across the ABI are made of 8-byte slots only (int64_t, double, pointers),
 * so TypeScript lays them out by slot index (ffi/layout.ts) without padding rules. */
#ifndef BLOOMERY_H
#define BLOOMERY_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BL_ABI_VERSION 3

enum bl_status {
  BL_OK = 0,
  BL_E_INVAL = 1,       /* a bad argument (message says which) */
  BL_E_IO = 2,          /* a file could not be opened, read or mapped */
  BL_E_NOMEM = 3,       /* an allocation failed */
  BL_E_UNSUPPORTED = 4, /* a type or feature this library does not implement */
  BL_E_DEVICE = 5       /* a GPU runtime error */
};

int64_t bl_abi_version(void);
const char *bl_last_error(void);

/* ---- file mapping (weights are read through these, never copied into JavaScript) ---- */
/* Map a whole file read-only. *base receives the address, *size the length. */
int64_t bl_map_file(const char *path, uint64_t *base, uint64_t *size);
int64_t bl_unmap_file(uint64_t base, uint64_t size);
/* Copy len bytes at base+off into dst (bounds are the caller's mapping). */
int64_t bl_copy_bytes(uint64_t src, void *dst, uint64_t len);
/* A file range read into anonymous memory that asks for 2 MiB huge pages (hugecopy.c): *out is
 * its 2 MiB-aligned address; bl_huge_free(*out, len) unmaps it. bl_huge_available: whether the kernel
 * gives huge pages to a region that asks; bl_huge_backed: the bytes of a range backed by them now. */
int64_t bl_huge_copy(const char *path, uint64_t off, uint64_t len, int64_t nthreads, uint64_t *out);
int64_t bl_huge_free(uint64_t base, uint64_t len);
int64_t bl_huge_available(void);
int64_t bl_huge_backed(uint64_t base, uint64_t len);

/* ---- quant blocks ---- */
/* block_elems and block_bytes of a ggml type id; BL_E_UNSUPPORTED when unknown. */
int64_t bl_type_size(int64_t type, int64_t *block_elems, int64_t *block_bytes);
/* Reference (scalar) dequantization of n elements (n a multiple of the block). */
int64_t bl_dequantize(int64_t type, const void *src, float *dst, int64_t n);
/* Reference quantization of n floats into type (for the GGUF writer and activations). */
int64_t bl_quantize(int64_t type, const float *src, void *dst, int64_t n);
/* A checkpoint folder's quantized tensor as the engine's rows of `type` (MXFP4, or bloomery's FP8 / NVFP4_MO /
 * MLX4 / MLX8: ffi/cpu/quants_fp.c), bytes moved, never requantized: out row i from stored row sel[i] (of C values).
 * w: the stored values (MXFP4's blocks, the E4M3 bytes, NVFP4's pairs, MLX's words); s: MXFP4's E8M0 bytes or
 * NVFP4's E4M3 group scales; f: FP8's F32 block scales ([ceil(rows / bm), ceil(C / bn)]) or MLX's scales
 * ([rows, C / bn]: bn is MLX's group size, a multiple of 64); f2: MLX's biases; g: NVFP4's global scale. */
int64_t bl_repack(int64_t type, const uint8_t *w, const uint8_t *s, const float *f, const float *f2, double g, int64_t C,
                  int64_t bm, int64_t bn, const int32_t *sel, int64_t n, uint8_t *out);
/* Dot products of `rows` rows of a weight matrix (type, row length n, row stride in bytes)
 * with one f32 vector x, converting x to the type's activation format as ggml does. */
int64_t bl_matvec_ref(int64_t type, const void *w, int64_t row_stride, int64_t rows,
                      const float *x, int64_t n, float *y);
/* Random blocks of `type` (block indices first_block.., n_blocks of them) with small finite
 * scales giving weights of about weight_std; deterministic in (seed, block index). flags
 * BL_SYNTH_CENTERED: Q4_K and Q5_K blocks of zero mean (each sub-block's minimum cancels its
 * scale's offset), where plain random ones share a positive offset. */
#define BL_SYNTH_CENTERED 1
int64_t bl_synth_fill(int64_t type, void *dst, int64_t first_block, int64_t n_blocks, uint64_t seed, double weight_std, int64_t flags);

/* ---- the model program: a list of ops (CPU backend; the GPU backends take the same program) ----
 * A model family file (src/models/) describes the forward pass as a list of ops over a batch's
 * activations: x (the residual rows), h (the rows the last NORM wrote) and the picks (the last
 * ROUTER's experts and weights a token). Each op has a parameter struct of its own kind and its
 * tensors by role (bl_tensor data == 0: absent). A backend runs a program only when it runs every
 * op with every option set and every tensor type given (bl_cpu_check / bl_cuda_check name the first
 * op it cannot run and why); backends may fuse neighbouring ops (a NORM into the op that reads h)
 * found by a pass over the list, never by looking ahead at run time. A field no backend reads is a
 * bug: every option below is honoured by the CPU reference and refused by a backend that lacks it. */

/* A weight tensor: data address (mapped file or device memory), ggml type, dims (ne[0]
 * contiguous), byte stride between rows (ne[1]) and between slabs (ne[2], experts). */
typedef struct bl_tensor {
  uint64_t data;
  int64_t type;
  int64_t ne[4];
  int64_t nb1;
  int64_t nb2;
} bl_tensor; /* 8 slots */

enum bl_op_kind {
  BL_OP_EMBED = 1,   /* x = token_embd[tokens]                                     t: BL_EMBED_*   p: none */
  BL_OP_NORM = 2,    /* h = norm(x) * w                                            t: BL_NORM_*    p: bl_norm_params */
  BL_OP_ATTN = 3,    /* x += attention(h) (GQA over the KV cache layer)            t: BL_ATTN_*    p: bl_attn_params */
  BL_OP_ROUTER = 4,  /* picks = route(h): n_used experts and their weights a token t: BL_ROUTER_*  p: bl_router_params */
  BL_OP_EXPERTS = 5, /* x += sum over the picks of weight * expert(h)              t: BL_EXPERTS_* p: bl_experts_params */
  BL_OP_FFN = 6,     /* x += [sigmoid(h . gate_inp)] * down(act(gate h, up h))     t: BL_FFN_*     p: bl_ffn_params
                      * (a dense FFN, or a shared expert with its optional scalar gate) */
  BL_OP_OUTPUT = 7,  /* logits[out rows] = head(norm(x))                           t: BL_OUTPUT_*  p: bl_norm_params */
  BL_OP_MLA = 8,     /* x += multi-head latent attention(h) over a latent KV layer t: BL_MLA_*     p: bl_mla_params */
  BL_OP_DELTANET = 9, /* x += gated delta-net linear attention(h), recurrent state t: BL_DN_*      p: bl_deltanet_params */
  BL_OP_MTP_IN = 10   /* x = eh_proj [enorm(embed[tokens]); hnorm(batch hidden_in)] t: BL_MTP_*   p: bl_norm_params
                       * (an MTP layer's input, llama.cpp's nextn: the embedding of each row's token and the
                       * target's hidden state the batch gives for the row, each RMS-normalised, concatenated
                       * embedding first, projected back to n_embd; the layer's block follows as plain ops) */
};
#define BL_OP_KINDS 11

enum { BL_EMBED_TOKENS = 0, BL_EMBED_TENSORS };
enum { BL_NORM_WEIGHT = 0, BL_NORM_TENSORS };
enum { BL_ATTN_Q = 0, BL_ATTN_K = 1, BL_ATTN_V = 2, BL_ATTN_O = 3, BL_ATTN_Q_NORM = 4, BL_ATTN_K_NORM = 5,
       BL_ATTN_BQ = 6, BL_ATTN_BK = 7, BL_ATTN_BV = 8, BL_ATTN_BO = 9,
       BL_ATTN_SINKS = 10, /* a logit per query head that joins every softmax's denominator (gpt-oss) */
       BL_ATTN_TENSORS };
enum { BL_ROUTER_W = 0, BL_ROUTER_B = 1,
       BL_ROUTER_CORR = 2, /* a per-expert bias added to the scores for choosing only (DeepSeek V3's e_score_correction_bias) */
       BL_ROUTER_TENSORS };
enum { BL_EXPERTS_GATE = 0, BL_EXPERTS_UP = 1, BL_EXPERTS_DOWN = 2, BL_EXPERTS_BGATE = 3, BL_EXPERTS_BUP = 4, BL_EXPERTS_BDOWN = 5,
       BL_EXPERTS_TENSORS };
enum { BL_FFN_GATE = 0, BL_FFN_UP = 1, BL_FFN_DOWN = 2, BL_FFN_GATE_INP = 3, BL_FFN_TENSORS };
enum { BL_OUTPUT_NORM = 0, BL_OUTPUT_HEAD = 1, BL_OUTPUT_TENSORS };
/* MLA's tensors (DeepSeek V2/V3's names): a plain q [n_embd, n_head*(nope+rope)], or its LoRA: q_a [n_embd,
 * q_lora], q_a_norm [q_lora], q_b [q_lora, n_head*(nope+rope)]; kv_a [n_embd, kv_lora+rope] (the latent, then
 * the shared rope part), kv_a_norm [kv_lora]; k_b [nope, kv_lora, n_head] (absorbed into the queries) and v_b
 * [kv_lora, v, n_head] (the values out of the latent); o [n_head*v, n_embd]. */
enum { BL_MLA_Q = 0, BL_MLA_Q_A = 1, BL_MLA_Q_A_NORM = 2, BL_MLA_Q_B = 3, BL_MLA_KV_A = 4, BL_MLA_KV_A_NORM = 5,
       BL_MLA_K_B = 6, BL_MLA_V_B = 7, BL_MLA_O = 8, BL_MLA_TENSORS };
/* The gated delta-net's tensors (llama.cpp's names): qkv [n_embd, 2 * n_k_heads * head_k + n_v_heads * head_v]
 * (the conv's channels: q, k, v), gate [n_embd, n_v_heads * head_v] (z, the output norm's gate); beta and
 * alpha [n_embd, n_v_heads] each, or ba [n_embd, 2 * n_v_heads] (Qwen3-Next's fused form: for each k head its
 * v heads' betas, then their alphas); conv [conv_kernel, channels] (F32), dt [n_v_heads] (the decay's bias),
 * a [n_v_heads] (-exp(A_log)), norm [head_v] (the gated output norm), out [n_v_heads * head_v, n_embd]. Older
 * Qwen3-Next files fuse qkv and gate in one qkvz [n_embd, 2 * (n_k_heads * head_k + n_v_heads * head_v)]: for each
 * k head its q, k, then its v heads' v and z rows (given instead of qkv and gate). */
enum { BL_DN_QKV = 0, BL_DN_GATE = 1, BL_DN_BETA = 2, BL_DN_ALPHA = 3, BL_DN_BA = 4, BL_DN_CONV = 5, BL_DN_DT = 6,
       BL_DN_A = 7, BL_DN_NORM = 8, BL_DN_OUT = 9, BL_DN_QKVZ = 10, BL_DN_TENSORS };
/* The MTP input's tensors: embed [n_embd, n_vocab] (nextn.embed_tokens, or token_embd), enorm and hnorm
 * [n_embd] (F32 / F16 / BF16), eh_proj [2 * n_embd, n_embd] (its input rows: the normalised embedding, then
 * the normalised hidden state). */
enum { BL_MTP_EMBED = 0, BL_MTP_ENORM = 1, BL_MTP_HNORM = 2, BL_MTP_EH_PROJ = 3, BL_MTP_TENSORS };
#define BL_OP_MAX_TENSORS 11

enum { BL_NORM_RMS = 0 };
typedef struct bl_norm_params {
  int64_t kind;  /* BL_NORM_RMS */
  double eps;
} bl_norm_params; /* 2 slots */

enum { BL_ROPE_NONE = -1, BL_ROPE_NORMAL = 0, BL_ROPE_NEOX = 2 };
/* RoPE as ggml's rope defines it: the first n_rot dims of each head rotated (pairs (i, i+1), or
 * (i, i + n_rot/2) for NEOX), YaRN when ext_factor != 0 (orig_ctx, beta_fast/slow; attn_factor scales
 * cos and sin). */
typedef struct bl_rope_params {
  int64_t type;        /* BL_ROPE_*: NONE = no rotation */
  int64_t n_rot;       /* dims rotated (< head_dim: partial rotary) */
  int64_t orig_ctx;    /* YaRN's original context */
  double base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
} bl_rope_params; /* 9 slots */

typedef struct bl_attn_params {
  int64_t kv_layer;    /* the KV cache layer it reads and writes */
  int64_t n_head, n_head_kv, head_dim;
  int64_t window;      /* sliding window: a query sees its own and the window - 1 positions before it; 0: all */
  double eps;          /* epsilon of the per-head Q/K norms */
  double scale;        /* softmax scale; 0: 1 / sqrt(head_dim) */
  bl_rope_params rope;
  int64_t gate;        /* 1: q's rows hold each head's query then its output gate (head_dim each: q is
                        * [n_embd, 2 * n_head * head_dim]); the attention's output times sigmoid(gate)
                        * before the output projection (Qwen3-Next, Qwen3.5). 0: none */
} bl_attn_params; /* 17 slots */

/* Multi-head latent attention (DeepSeek V2/V3, Kimi K2) in its absorbed form: a KV cache row per position holds
 * the normalised latent (kv_lora) and the shared rotated key part (rope.n_rot), f16 (the context's kv_k_dim is
 * kv_lora + n_rot; its values are the latent: kv_v_dim 0). A query head is [nope | rope] dims; its nope part
 * times k_b's head gives a latent query, so scores are [q_latent | q_rope] . [latent | k_rope] * scale over
 * the slot's positions; the softmax-weighted latent times v_b's head is the head's value, and o gives the
 * output. eps: the q_a and kv_a norms'; scale 0: 1 / sqrt(nope + n_rot). */
typedef struct bl_mla_params {
  int64_t kv_layer;    /* the KV cache layer it reads and writes */
  int64_t n_head;
  int64_t kv_lora;     /* the latent's size */
  int64_t nope;        /* a query / key head's dims without rotation */
  int64_t v_dim;       /* a value head's dims */
  double eps;
  double scale;
  bl_rope_params rope; /* n_rot: the rotated dims of a query head and of the shared key part */
} bl_mla_params; /* 16 slots */

/* The gated delta-net (Qwen3-Next, Qwen3.5 / 3.6's linear-attention layers) on h, a token at a time in each
 * sequence's order: c = qkv h, z = gate h; c goes through a causal depthwise conv1d of conv_kernel taps over the
 * sequence's previous conv_kernel - 1 inputs (the conv state), then SiLU; c splits into q, k (n_k_heads of
 * head_k) and v (n_v_heads of head_v); q and k are L2-normalised (x / sqrt(sum x^2 + eps)) and q scaled by
 * 1 / sqrt(head_k). Per v head (its k head: h % n_k_heads when head_map is TILED, h / (n_v_heads / n_k_heads)
 * when GROUPED): beta = sigmoid(b), g = a * softplus(alpha + dt); the state S [head_v x head_k] becomes
 * S exp(g), then S += beta (v - S k) k^T, and o = S q. o = rmsnorm(o) * norm * silu(z) per head, and
 * x += out o. The state (conv, then S for each v head) is the sequence's (slot's) own, layer rs_layer of the
 * context's recurrent state (bl_ctx_params rs_layers x rs_dim floats a slot); a position 0 token starts it
 * from zeros. */
enum { BL_DN_TILED = 0, BL_DN_GROUPED = 1 };
typedef struct bl_deltanet_params {
  int64_t rs_layer;    /* the recurrent state layer it reads and writes */
  int64_t n_k_heads, n_v_heads, head_k, head_v;
  int64_t conv_kernel;
  int64_t head_map;    /* BL_DN_TILED or BL_DN_GROUPED */
  double eps;          /* of the q / k L2 norms and the output norm */
} bl_deltanet_params; /* 8 slots */

/* How a router makes its picks from the logits l = W h (+ b):
 *   SOFTMAX:        p = softmax(l) over every expert; the n_used largest p; weights p (divided by their
 *                   sum when norm_topk) (Qwen3-MoE, Mixtral)
 *   SOFTMAX_WEIGHT: the n_used largest l; weights softmax over those n_used logits (gpt-oss)
 *   SIGMOID:        s = sigmoid(l); chosen by s + corr (the n_group_used groups whose top-2 sums are largest,
 *                   then the n_used largest); weights s (divided by their sum when norm_topk) (DeepSeek V3, GLM-4.5)
 * then every weight times scale (0: 1). Ties go to the lower expert index. */
enum { BL_GATING_SOFTMAX = 0, BL_GATING_SOFTMAX_WEIGHT = 1, BL_GATING_SIGMOID = 2 };
typedef struct bl_router_params {
  int64_t n_expert, n_used;
  int64_t gating;      /* BL_GATING_* */
  int64_t norm_topk;
  int64_t n_group, n_group_used; /* SIGMOID's expert groups (0: none) */
  double scale;
} bl_router_params; /* 7 slots */

/* Activations of an FFN or expert on g = gate h (+ bg) and u = up h (+ bu):
 *   SWIGLU:     silu(g) * u
 *   SWIGLU_OAI: gpt-oss's: g' = min(g, limit), u' = clamp(u, -limit, limit); g' * sigmoid(alpha g') * (u' + 1) */
enum { BL_ACT_SWIGLU = 0, BL_ACT_SWIGLU_OAI = 1 };
enum { BL_HOST_EXPERTS_RAM = 1, BL_HOST_EXPERTS_DISK = 2 };
typedef struct bl_experts_params {
  int64_t n_expert, n_used; /* n_used: the picks a token of the router before it */
  int64_t act;           /* BL_ACT_* */
  int64_t layer;         /* the model layer (promotion, statistics) */
  uint64_t store;        /* a bl_expert_store_new handle holding the routed experts (0: the tensors' data) */
  int64_t store_layer;   /* the layer of that store */
  int64_t host;          /* run by a card (BL_HOST_EXPERTS_*): 0 on the card; RAM = the routed experts stay in host
                          * memory (the card's step hands the MoE ops to the CPU hook, uploads them for a batch,
                          * reads a share of a token's picks in place, promotes hot ones); DISK = they are read
                          * from the files on demand through store (the NVMe tier): the CPU hook runs them for
                          * every batch, and the card never uploads, pins, reads or promotes them */
  double alpha, limit;   /* BL_ACT_SWIGLU_OAI's */
} bl_experts_params; /* 9 slots */

typedef struct bl_ffn_params {
  int64_t act;           /* BL_ACT_* */
  double alpha, limit;
} bl_ffn_params; /* 3 slots */

typedef struct bl_op {
  int64_t kind;          /* BL_OP_* */
  int64_t n_tensors;     /* entries of tensors (at most BL_OP_MAX_TENSORS; roles past it are absent) */
  uint64_t params;       /* the kind's parameter struct (0 for EMBED) */
  uint64_t tensors;      /* bl_tensor[n_tensors] by the kind's roles */
} bl_op; /* 4 slots */

typedef struct bl_program {
  int64_t n_ops;
  uint64_t ops;          /* bl_op[n_ops] */
  int64_t n_embd, n_vocab;
} bl_program;

/* A batch: token ids, positions and sequence (slot) of each token; rows whose logits are
 * wanted (indices into the batch) and where to write them (n_out * n_vocab floats).
 * hidden_in: float[n_tokens * n_embd], the hidden state each row's MTP_IN op reads (0: none; a program
 * with an MTP_IN op needs it). hidden_out: float[n_tokens * n_embd] (0: not wanted), written by the OUTPUT
 * op with every row's normalised final state, the rows its head multiplies (speculative decoding's MTP
 * draft reads the target's; a backend that cannot write them refuses a batch that asks, BL_E_UNSUPPORTED). */
typedef struct bl_batch {
  int64_t n_tokens;
  uint64_t tokens, pos, seq; /* int32_t[n_tokens] each */
  int64_t n_out;
  uint64_t out_rows;         /* int32_t[n_out] */
  uint64_t logits;           /* float[n_out * n_vocab] */
  uint64_t hidden_in;        /* float[n_tokens * n_embd] or 0 */
  uint64_t hidden_out;       /* float[n_tokens * n_embd] or 0 */
} bl_batch;

typedef struct bl_ctx_params {
  int64_t n_embd, n_vocab;
  int64_t max_tokens;   /* largest batch forward() takes */
  int64_t n_threads;
  int64_t kv_layers, kv_slots, kv_ctx; /* KV cache: layers x slots x positions */
  int64_t kv_k_dim, kv_v_dim;          /* per position and layer: K and V widths (GQA: n_head_kv * head_dim
                                        * each; MLA: kv_lora + n_rot and 0, its values being the latent in K) */
  int64_t max_q_dim;                   /* n_head * head_dim */
  int64_t max_ff;                      /* largest FFN / expert hidden size */
  int64_t max_experts;
  int64_t flags;                       /* BL_CTX_* */
  int64_t rs_layers, rs_dim;           /* recurrent state: layers x floats a slot (bl_deltanet_params); 0: none */
} bl_ctx_params;
/* BL_CTX_EXACT: activations stay f32 and weights are dequantized for every product (a slow
 * reference path, to tell numerics from bugs); the default converts activations as ggml does. */
enum { BL_CTX_EXACT = 1 };

/* ---- the host hook: a card's step runs a run of ops on the CPU ----
 * ops[0..n_ops): a MoE layer's NORM, ROUTER and EXPERTS (or a NORM and FFN) of the card's program.
 * x: n_tok residual rows (n_embd floats each, host memory) of their input; their output is added to
 * them as bl_cpu_forward computes those ops. The context needs max_tokens >= n_tok (its KV cache is
 * not used). err: a message on failure. Both hooks read the experts of an EXPERTS op whose store is
 * set through that store (required when host is BL_HOST_EXPERTS_DISK), the same bits as from the
 * tensors' data. */
typedef int64_t (*bl_ops_rows_fn)(uint64_t ctx, const bl_op *ops, int64_t n_ops, int64_t n_tok, float *x, char *err, int64_t err_len);
int64_t bl_cpu_ops_rows(uint64_t ctx, const bl_op *ops, int64_t n_ops, int64_t n_tok, float *x, char *err, int64_t err_len);
/* The experts of the run's EXPERTS op for picks the caller made: k of a token (sel / selw, n_tok x k,
 * the weights as given; a pick of -1 is none: computed elsewhere); out[n_tok x n_embd] = their
 * weighted sum on the run's NORM of x (x is not changed). */
typedef int64_t (*bl_expert_rows_fn)(uint64_t ctx, const bl_op *ops, int64_t n_ops, int64_t n_tok, const float *x, const int32_t *sel,
                                     const float *selw, int64_t k, float *out, char *err, int64_t err_len);
int64_t bl_cpu_expert_rows(uint64_t ctx, const bl_op *ops, int64_t n_ops, int64_t n_tok, const float *x, const int32_t *sel,
                           const float *selw, int64_t k, float *out, char *err, int64_t err_len);
/* on: the threads that call the context's forwards and hooks stay pinned to its first core between
 * calls (a card's callback thread: no affinity change per call); off: pinned during a call only. */
int64_t bl_cpu_ctx_keep_pin(uint64_t ctx, int64_t on);
/* out[0] = the address of bl_cpu_ops_rows, out[1] that of bl_cpu_expert_rows (for bl_cuda_set_host). */
int64_t bl_cpu_hook_fns(uint64_t *out);

/* ---- CPU kernel paths, threads and probes (CPU library) ----
 * The kernels run on one path: "scalar" (the reference), "avx2" (AVX2+FMA+F16C) or "avx512"
 * (F/BW/VL/DQ + VNNI), chosen at run time from cpuid; bl_cpu_select_path (BLOOMERY_CPU_PATH) forces one. */
const char *bl_cpu_path_name(void);
/* Bit p set when this CPU runs path p (0 scalar, 1 avx2, 2 avx512). */
int64_t bl_cpu_paths(void);
/* Use path `name` from now on (BL_E_UNSUPPORTED when this CPU lacks it). */
int64_t bl_cpu_set_path(const char *name);
/* The path BLOOMERY_CPU_PATH asks for (ffi/cpu.ts passes the variable when it opens the library;
 * the library reads no environment): "" or "auto" the best this CPU runs; a name that is no path, or
 * one this CPU lacks, makes bl_cpu_path_check (so every context) refuse, saying why. */
int64_t bl_cpu_select_path(const char *name);
/* BL_E_UNSUPPORTED (saying why) when bl_cpu_select_path named no path or one this CPU lacks. */
int64_t bl_cpu_path_check(void);
/* Cores this process may use: its allowed CPUs, capped by the cgroup's CPU quota. */
int64_t bl_cpu_usable_cores(void);
/* Threads for one-token steps (llama's -t) and for batches (-tb), each clamped to the usable
 * cores; the pool is pinned to those cores. bl_cpu_ctx_new starts n_threads for both. */
int64_t bl_cpu_ctx_set_threads(uint64_t ctx, int64_t n_threads, int64_t n_threads_batch);
int64_t bl_cpu_ctx_threads(uint64_t ctx, int64_t *n_threads, int64_t *n_threads_batch);
/* One path's kernels alone, for tests (path NULL or "" = the active path): convert n floats to
 * an activation type; y[i][r] = W row r . x row i with x converted as the path does; the float
 * helpers (op 0 dot_f32, 1 dot_f16, 2 axpy_f16, 3 to_f16, 4 round_f16, 5 swiglu, 6 exp_sum,
 * 7 axpy_f32, 8 scale_f32; scalar results in *r). */
int64_t bl_kernel_quantize(const char *path, int64_t act_type, const float *x, void *dst, int64_t n);
int64_t bl_kernel_matmul(const char *path, int64_t type, const void *w, int64_t row_stride, int64_t rows,
                         const float *x, int64_t n_x, int64_t n, float *y);
int64_t bl_kernel_float(const char *path, int64_t op, float a, const void *x, void *y, int64_t n, double *r);
/* One head's gated delta rule (the DELTANET op's core) on one path, for tests: form 0 the recurrent form (a
 * token at a time), 1 the chunked one (chunks of 64), 2 the one the op picks for a run of n tokens. q, k: n rows
 * of hk floats; v, o: n rows of hv; g (log decays), beta: n each; S: hv rows of hk, the state, in and out. */
int64_t bl_kernel_delta_rule(const char *path, int64_t form, int64_t n, int64_t hk, int64_t hv, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, float *S, float *o);
/* A path's tile on `rows` weight rows against na (1..8) activation rows, on n_threads pinned
 * threads taking tile_rows rows at a time: the best of `reps` passes in ns (microbenchmarks). */
int64_t bl_kernel_bench(const char *path, int64_t type, const void *w, int64_t ws, int64_t rows, int64_t n, int64_t na,
                        int64_t tile_rows, int64_t n_threads, int64_t reps, double *best_ns);
/* ---- the expert store (CPU library): routed experts read from the GGUF files on demand ----
 * A fixed RAM capacity of slots, one slot a unit (the gate, up and down slabs of one (layer,
 * expert)), least recently used out first, filled with pread (O_DIRECT where the file system takes
 * it, else normal reads and posix_fadvise DONTNEED). An EXPERTS op whose store is set loads
 * the experts its batch uses into slots before its products (in parallel on the pool, in rounds
 * when one layer's experts outnumber the slots) and reads them there; a background reader
 * prefetches the experts the next layer used in the previous step. Read errors are BL_E_IO from
 * the forward, naming the file and offset. Free the store after every context that used it. */
typedef struct bl_expert_layer {
  int64_t n_expert;
  int64_t file[3];       /* gate, up, down: index into the params' files */
  int64_t offset[3];     /* absolute file offset of expert 0's slab */
  int64_t slab_bytes[3]; /* bytes one expert's slab takes (the tensor's nb2) */
} bl_expert_layer; /* 10 slots */
typedef struct bl_expert_store_params {
  int64_t capacity_bytes; /* RAM for slots; at least n_expert_used slots (bl_expert_store_sizes) */
  int64_t n_files;
  uint64_t files;         /* const char *[n_files]: the GGUF files (a split set has several) */
  int64_t n_layers;
  uint64_t layers;        /* bl_expert_layer[n_layers]: the store's layers (an EXPERTS op's store_layer) */
  int64_t n_expert_used;  /* experts a token uses (the minimum is that many slots) */
  int64_t flags;          /* BL_XS_NO_DIRECT: normal reads only; BL_XS_NO_PREFETCH: no background reader */
} bl_expert_store_params; /* 7 slots */
enum { BL_XS_NO_DIRECT = 1, BL_XS_NO_PREFETCH = 2 };
/* Counters of bl_expert_store_stats, by index: lookups (an expert a block needed), hits, misses
 * (read by the block), bytes read by the blocks (payload: misses x unit bytes), evictions,
 * prefetch hits (a prefetched unit the next block used), prefetch reads and bytes, slots, bytes a
 * slot, slots holding a unit, files read with O_DIRECT, failed reads. */
enum { BL_XS_LOOKUPS = 0, BL_XS_HITS, BL_XS_MISSES, BL_XS_BYTES_READ, BL_XS_EVICTIONS, BL_XS_PREFETCH_HITS,
       BL_XS_PREFETCH_READS, BL_XS_PREFETCH_BYTES, BL_XS_SLOTS, BL_XS_SLOT_BYTES, BL_XS_RESIDENT, BL_XS_DIRECT_FILES,
       BL_XS_READ_ERRORS, BL_XS_STATS };
/* The smallest capacity these params take, the bytes of a slot and the units of all layers (no I/O). */
int64_t bl_expert_store_sizes(const bl_expert_store_params *p, int64_t *min_bytes, int64_t *slot_bytes, int64_t *units);
/* A store (BL_E_INVAL naming the sizes when the capacity is below the minimum; BL_E_IO when a file
 * cannot be opened or does not hold the experts). Slots beyond every unit are not allocated. */
int64_t bl_expert_store_new(const bl_expert_store_params *p, uint64_t *out_store);
int64_t bl_expert_store_free(uint64_t store);
/* out[0..n): the counters above (indices past BL_XS_STATS get 0). */
int64_t bl_expert_store_stats(uint64_t store, int64_t *out, int64_t n);
/* Map every page of a read-only mapping up front (llama's MAP_POPULATE): no page faults later. */
int64_t bl_prefault(uint64_t base, uint64_t size);
/* Memory read bandwidth: n_threads pinned threads read a buffer of `bytes` `reps` times; the
 * best rate in GB/s (1e9 bytes) in *gbps. */
int64_t bl_membw(int64_t n_threads, int64_t bytes, int64_t reps, double *gbps);

/* Options of a CPU context (bl_cpu_ctx_new; null: the defaults), filled by src/engine/cpu-options.ts
 * from the environment knobs docs/cpu.md lists (ffi/layout.ts CPU_OPTION_FIELDS mirrors it): pin 0
 * leaves the pool's threads unpinned; spin_us: microseconds idle workers spin before they sleep
 * (-1: 1000); profile 1: where the forward time went, printed when the context is freed. */
typedef struct bl_cpu_options {
  int64_t pin, spin_us, profile;
} bl_cpu_options;
int64_t bl_cpu_ctx_new(const bl_ctx_params *p, const bl_cpu_options *o, uint64_t *out_ctx);
int64_t bl_cpu_ctx_free(uint64_t ctx);
int64_t bl_cpu_forward(uint64_t ctx, const bl_program *prog, const bl_batch *batch);
/* BL_OK when this library runs every op of the program (its options, tensor types and sizes) on a
 * context of these parameters; else BL_E_UNSUPPORTED or BL_E_INVAL naming the first op it cannot run
 * and why (*bad_op its index; -1 when the program as a whole is wrong). Needs no context. */
int64_t bl_cpu_check(const bl_ctx_params *p, const bl_program *prog, int64_t *bad_op);
/* Routed experts' picks counted per (layer, expert) by the forwards of this context (the router's
 * picks of every token; a layer is bl_experts_params.layer): out[layer * n_expert + e], for layers
 * < n_layers and experts < n_expert; reset: zero them after reading. */
int64_t bl_cpu_expert_picks(uint64_t ctx, int64_t n_layers, int64_t n_expert, int64_t *out, int64_t reset);
/* Forget positions >= from of a slot's sequence (they will be overwritten). */
int64_t bl_cpu_kv_clear(uint64_t ctx, int64_t slot, int64_t from);
/* Copy n positions of slot src's KV to slot dst (prefix sharing between slots). */
int64_t bl_cpu_kv_copy(uint64_t ctx, int64_t src, int64_t dst, int64_t n);
/* Bytes one position takes across all layers (k and v: layers * (kv_k_dim + kv_v_dim) * 2), and
 * save/restore of n positions. The saved layout is position-major (for each position, every layer's k row
 * then its v row), so the first m*pos_bytes bytes of a state are a state of m. */
int64_t bl_cpu_kv_pos_bytes(uint64_t ctx);
/* Bytes of the context's workspace now: the batch buffers sized at creation and the delta-net layers'
 * work space, grown to the largest batch they took (what a memory estimate of the context must cover). */
int64_t bl_cpu_work_bytes(uint64_t ctx);
int64_t bl_cpu_kv_save(uint64_t ctx, int64_t slot, int64_t n, void *dst);
int64_t bl_cpu_kv_load(uint64_t ctx, int64_t slot, int64_t n, const void *src);
/* The recurrent state of a slot (every rs layer: rs_layers * rs_dim floats): its bytes, save / load / copy,
 * and clear (zeros: a sequence not started). A sequence's state is that after the last token it took. */
int64_t bl_cpu_rs_bytes(uint64_t ctx);
int64_t bl_cpu_rs_save(uint64_t ctx, int64_t slot, void *dst);
int64_t bl_cpu_rs_load(uint64_t ctx, int64_t slot, const void *src);
int64_t bl_cpu_rs_copy(uint64_t ctx, int64_t src, int64_t dst);
int64_t bl_cpu_rs_clear(uint64_t ctx, int64_t slot);
/* A snapshot of a slot's recurrent state kept in the context (speculative decoding: taken before a pass that
 * verifies a draft, put back when the draft is rejected): reserve makes room for every slot's once (call it
 * at load; later calls keep it), take copies the slot's live state into its snapshot, back copies the
 * snapshot over the live state (BL_E_INVAL where the slot never took one). */
int64_t bl_cpu_rs_snap_reserve(uint64_t ctx);
int64_t bl_cpu_rs_snap_take(uint64_t ctx, int64_t slot);
int64_t bl_cpu_rs_snap_back(uint64_t ctx, int64_t slot);
/* RoPE of these settings on n_heads vectors of hd floats at position pos (for tests). */
int64_t bl_rope_apply_params(const bl_rope_params *r, float *v, int64_t n_heads, int64_t hd, int64_t pos);

/* ---- sampling ----
 * The vocabulary-wide part of a sampling step (src/sampling/ runs the chain on the candidates).
 * Ops act on the logits row in order, as llama.cpp's samplers do, without writing the row:
 *   ADD      logit[id] += value (logit bias; -inf bans)
 *   BAN      logit[id] = -inf (values unused)
 *   PENALTY  for each id with count value > 0: logit /= a when positive, *= a otherwise, then
 *            -= count * b + c (repeat a, frequency b, presence c)
 *   NSIGMA   logits below max - a * std of the finite logits become -inf (a <= 0: no-op)
 * Then the best k tokens in (logit desc, id asc) order go to out_ids / out_logits (n_out = min(k,
 * n_vocab)); with want_stats, stats = {max, count of finite logits, Z1 = sum exp(l - max),
 * S1 = sum exp(l - max) * (l - max), Zs = sum exp(s (l - max)), Ss = sum exp(s (l - max)) * s (l - max)}
 * with s = scale, over the whole adjusted row. NaN or +inf logits are an error. */
enum { BL_SAMPLE_OP_ADD = 1, BL_SAMPLE_OP_BAN = 2, BL_SAMPLE_OP_PENALTY = 3, BL_SAMPLE_OP_NSIGMA = 4 };

typedef struct bl_sample_op {
  int64_t kind;
  int64_t n;        /* entries in ids / values */
  uint64_t ids;     /* const int32_t[n], each in [0, n_vocab) */
  uint64_t values;  /* const float[n] */
  double a, b, c;
} bl_sample_op; /* 7 slots */

typedef struct bl_sample_args {
  uint64_t logits;     /* const float[n_vocab] */
  int64_t n_vocab;
  uint64_t ops;        /* const bl_sample_op[n_ops] */
  int64_t n_ops;
  int64_t k;
  uint64_t out_ids;    /* int32_t[k] */
  uint64_t out_logits; /* float[k] */
  int64_t want_stats;
  double scale;
  int64_t n_out;       /* out */
  double stats[6];     /* out */
} bl_sample_args; /* 16 slots */

int64_t bl_sample_candidates(bl_sample_args *args);
/* The first index of the largest logit (NaN or +inf: an error). */
int64_t bl_sample_argmax(const float *logits, int64_t n_vocab, int64_t *out_id);

/* ---- CUDA (libbloomery_cuda.so) ----
 * The same model program on one NVIDIA card. The library loads without a driver or a GPU;
 * nothing touches the GPU before an entry point is called, every entry point returns a status,
 * and bl_cuda_last_error() is the message of the last failure on this thread. A context copies
 * every tensor the program names to the card when it is made (from the program's host
 * addresses: the mapped GGUF); the program's memory is not needed afterwards. */
typedef struct bl_cuda_device {
  int64_t index, cc_major, cc_minor, sm_count;
  int64_t total_bytes, free_bytes;
  int64_t driver_version, runtime_version; /* 1000 * major + 10 * minor */
  int64_t l2_bytes, smem_optin;
  int64_t has_code;                        /* this build carries code the card runs */
  char name[96];
} bl_cuda_device; /* 23 slots */

/* The CUDA library's options, one struct a context (bl_cuda_ctx_new; bl_cuda_weights_new reads
 * host_pin and carveout), filled by src/engine/cuda-options.ts from the flag table and the
 * environment knobs docs/cuda.md lists (the library reads no environment). ffi/layout.ts
 * CUDA_OPTION_FIELDS mirrors it. A field below 0 takes the library's default where one is said.
 * fast: the kernels in use, bits FAST_* of cuda/internal.h (ffi/cuda.ts CudaFast; -1: the default set;
 * 0: the general kernels only). invariant: batch-invariant mode (the fast bits off for the context's
 * passes: each token computed as it is alone). graphs: 0 launches every kernel of a decode step (1:
 * captured graphs). pdl: 0 turns programmatic dependent launch off (on from sm_90). carveout: percent
 * of L1 every kernel prefers as shared memory (-1: the driver's; a kernel attribute, so process-wide:
 * the last weights or context that set one wins). prefill_min: batches of at least this many tokens take
 * the prompt kernels (2..9; 0: 9). mma_pairs: cuda/runtime/ctx.h CU_OPT_MMA_PAIRS (thousandths; -1: 3000).
 * mv_batch / moe_batch: 0 turns the decode batches' batched products / grouped experts off.
 * a2_long_heads, a2_long_chunk: one token's attention over long contexts, heads a block (1, 2, 4, 8)
 * and positions a chunk (64..128; 0: 4 and 128). a2_mma_class: the first context class (0..4) on the
 * tensor-core window (-1: 2). fa2_heads: prompt attention's query heads a block (1 or 2; 0: by the
 * grid). fmv_rpw: rows a warp of one token's mid-sized products (1..8; 0: 2). expert_bn64: prompt
 * experts take 64-wide tiles from this many pairs an expert (0: 20). profile: 1 times each section
 * (graphs off) and prints the sums when the context is freed. trace_path: a C string (0: none), the
 * file kernel timelines are appended to (builds with BLOOMERY_CUDA_TRACE_BUILD; process-wide buffer).
 * Host experts (cuda/hybrid/hybrid.cu and its neighbours): host_pin: 0 leaves their pages unregistered;
 * hybrid_lead: lead slots (0..5; -1: as many as 2 GiB hold); hybrid_lead_mb: MiB of the next batch's
 * leads copied after each light layer (0: 24); upload_min: batches of at least this many tokens
 * upload (-1: the cost model; 0: never); host_share: CU_OPT_HOST_SHARE (thousandths; -1: the cost
 * model); sparse_upload: CU_OPT_SPARSE_UP (-1: by the last upload step); card_share: picks of a token
 * the card computes (-1: the default, moved online; -2: sized by measuring both sides first);
 * promote_slots: card slots a host layer for promoted experts (0: off); mailbox: 0 hands off by stream
 * callbacks; pull: 0 reads the card's share in place; spin: 0 waits for a layer's picks blocking;
 * cpu_tokens: CU_OPT_CPU_TOKENS (-1: the default); cpu_cap: the CPU share's time cap, a factor of the
 * copies left (0: 1). */
typedef struct bl_cuda_options {
  int64_t fast, invariant, graphs, pdl, carveout, prefill_min, mma_pairs;
  int64_t mv_batch, moe_batch, a2_long_heads, a2_long_chunk, a2_mma_class, fa2_heads, fmv_rpw, expert_bn64;
  int64_t profile;
  uint64_t trace_path;
  int64_t host_pin, hybrid_lead, hybrid_lead_mb, upload_min, host_share, sparse_upload, card_share, promote_slots;
  int64_t mailbox, pull, spin, cpu_tokens;
  double cpu_cap;
} bl_cuda_options;

int64_t bl_cuda_abi_version(void);
const char *bl_cuda_last_error(void);
/* The driver is present and new enough: *n_devices CUDA devices. BL_E_DEVICE when there is no
 * driver or no device, BL_E_UNSUPPORTED when the driver is too old (the message says which). */
int64_t bl_cuda_probe(int64_t *n_devices, int64_t *driver_version);
int64_t bl_cuda_device_info(int64_t dev, bl_cuda_device *out);
/* Bytes the program's weights take on the card (each distinct tensor once) and the bytes a context
 * of these parameters and options (null: the defaults; hybrid_lead sizes the host experts' staging)
 * adds (KV cache, work buffers); validates the program, needs no device. */
int64_t bl_cuda_plan_bytes(const bl_ctx_params *p, const bl_program *prog, const bl_cuda_options *o, int64_t *weight_bytes, int64_t *ctx_bytes);
/* The program's tensors uploaded to device dev (BL_E_NOMEM naming the sizes when they do not fit
 * its free memory). Contexts made from the weights share them; free the weights after them. */
int64_t bl_cuda_weights_new(int64_t dev, const bl_program *prog, const bl_cuda_options *o, uint64_t *out_weights);
/* BL_OK when this library runs every op of the program on a card (its fusion pass finds a pattern
 * for each op, every option and tensor type has kernels); else BL_E_UNSUPPORTED or BL_E_INVAL naming
 * the first op it cannot run and why (*bad_op its index, -1 for the program as a whole). Needs no
 * device and loads nothing. */
int64_t bl_cuda_check(const bl_program *prog, int64_t *bad_op);
int64_t bl_cuda_weights_free(uint64_t weights);
/* A context (KV cache, buffers) for the weights' program; BL_E_NOMEM naming the sizes when it
 * does not fit beside them. o: the context's options (null: every default). */
int64_t bl_cuda_ctx_new(uint64_t weights, const bl_ctx_params *p, const bl_cuda_options *o, uint64_t *out_ctx);
int64_t bl_cuda_ctx_free(uint64_t ctx);
int64_t bl_cuda_forward(uint64_t ctx, const bl_batch *batch);
/* A forward that returns, for each output row, its k best logits (value desc, id asc) in
 * vals[n_out * k] / ids[n_out * k] instead of the logits (batch->logits is not used); k in 1..64. */
int64_t bl_cuda_forward_topk(uint64_t ctx, const bl_batch *batch, int64_t k, int32_t *ids, float *vals);
int64_t bl_cuda_kv_clear(uint64_t ctx, int64_t slot, int64_t from);
int64_t bl_cuda_kv_copy(uint64_t ctx, int64_t src, int64_t dst, int64_t n);
int64_t bl_cuda_kv_pos_bytes(uint64_t ctx);
int64_t bl_cuda_kv_save(uint64_t ctx, int64_t slot, int64_t n, void *dst);
int64_t bl_cuda_kv_load(uint64_t ctx, int64_t slot, int64_t n, const void *src);
/* Saved states on the card (the prompt cache's card tier): a slot's first n positions copied into a
 * device buffer of their own (*out, a handle; BL_E_NOMEM when the card has no room), restored (the
 * first n positions of it) into a slot, freed. */
int64_t bl_cuda_kv_stash(uint64_t ctx, int64_t slot, int64_t n, uint64_t *out);
int64_t bl_cuda_kv_unstash(uint64_t ctx, uint64_t stash, int64_t slot, int64_t n);
int64_t bl_cuda_kv_stash_free(uint64_t ctx, uint64_t stash);
/* The card's free memory now (bytes). */
int64_t bl_cuda_free_bytes(uint64_t ctx, int64_t *out);
/* A slot's recurrent state on the card (the delta-net layers'; bl_cpu_rs_*'s bytes and layout, so a state
 * saved by one backend loads on the other): its bytes, save / load, and the snapshots of speculative
 * decoding (kept on the card). */
int64_t bl_cuda_rs_bytes(uint64_t ctx);
int64_t bl_cuda_rs_save(uint64_t ctx, int64_t slot, void *dst);
int64_t bl_cuda_rs_load(uint64_t ctx, int64_t slot, const void *src);
int64_t bl_cuda_rs_snap_reserve(uint64_t ctx);
int64_t bl_cuda_rs_snap_take(uint64_t ctx, int64_t slot);
int64_t bl_cuda_rs_snap_back(uint64_t ctx, int64_t slot);
/* GRAPHS: 1 (default) replays decode steps as captured CUDA graphs, 0 launches every kernel;
 * PREFILL_MIN: batches of at least this many tokens take the tensor-core path (default 9);
 * MAX_SPLITS: most slices of the context one decode attention head is split into (1..32). */
enum { BL_CUDA_OPT_GRAPHS = 1, BL_CUDA_OPT_PREFILL_MIN = 2, BL_CUDA_OPT_MAX_SPLITS = 3 };
int64_t bl_cuda_set_option(uint64_t ctx, int64_t key, int64_t value);
/* The host hook for the program's EXPERTS ops with host set (bl_ops_rows_fn and bl_expert_rows_fn of
 * the CPU library and its context, max_tokens at least the card context's). Without it a step over
 * such a block fails. Batches of at least the upload threshold take the card's kernels on the block's
 * experts copied over PCIe for the step (two layers in flight); smaller ones call the hook. One-token
 * steps may split a token's picks: the card copies its share of the experts from host memory over
 * PCIe (or reads them in place) while the CPU computes the rest (BL_CUDA_OPT card share, cuda/runtime/ctx.h
 * CU_OPT_CARD_SHARE; without one asked for, the share moves online by the steps' own timings). */
int64_t bl_cuda_set_host(uint64_t ctx, uint64_t fn, uint64_t cpu_ctx, uint64_t expert_fn);
/* out[0..n): host blocks run by the hook, blocks run from uploads, bytes uploaded, hook microseconds,
 * the upload threshold (tokens), PCIe bytes a second measured, host experts pinned (1/0), the hook's
 * measured nanoseconds a (token, expert) pair, the card's share of a token's picks, promotion's slots a
 * layer, experts moved, picks found resident and all picks of the promoted one-token steps, whether
 * the card copies its share into card memory first (1/0), and the share's sizing's nanoseconds: a
 * pick on the CPU, a pick of the card's copy, a CPU call's fixed part (0: not sized); then the
 * counters CudaBackend.hostStats() names (26 in all; the last three: the share's online moves, the splits whose timings it read, and the uploads found copied ahead by the step before). */
int64_t bl_cuda_host_stats(uint64_t ctx, int64_t *out, int64_t n);
/* The online sizing's rule (cuda/hybrid/share_tune.cu; pure arithmetic, no card needed): the next card share
 * of K picks from a window's means in microseconds - the card's share from post to wait, its wait
 * for the CPU, the CPU's call - with the card's time a pick when its share is 0 and the CPU path's
 * latency beyond its call. Moves by one at most; the CPU keeps one pick. */
int64_t bl_cuda_share_decide(int64_t k, int64_t share, double card_us, double wait_us, double cpu_us, double pick_us, double lat_us);
/* out[0..n): weight bytes, KV bytes, steps, steps replayed from graphs, graphs held, SM count, decode
 * batches' expert combines fused into the next layer's row quantization, and attention output
 * products that took the rows' int8 slots the attention wrote (FAST_ATTX8) (both counted as enqueued),
 * then the fast paths' launch counters in the order CudaBackend.stats() names them (24 in all). */
int64_t bl_cuda_ctx_stats(uint64_t ctx, int64_t *out, int64_t n);
/* Tests: y[i][r] = W row r . x row i (n_x rows of n floats) on device dev, W `rows` rows of type
 * stored as row_stride-byte rows; path 0 the decode product, 1 and 2 the tensor-core tiles
 * (64 and 32 rows of x a tile; n a multiple of 128), 3 the one-token product on int8 activations,
 * 4..7 the decode-batch product (2..8 rows; int8 activations for Q4_K / Q6_K) with the rows
 * quantized once a launch (4, 6) or by each block (5, 7), 6 and 7 of the rows RMS-normalised first
 * (eps 1e-6, weight of element i 0.75 + 0.0625 * (i % 9)). Outputs are poisoned before the run. */
int64_t bl_cuda_test_matmul(int64_t dev, int64_t path, int64_t type, const void *w, int64_t row_stride, int64_t rows,
                            const float *x, int64_t n_x, int64_t n, float *y);
/* Tests: n elements (whole blocks) of type dequantized on the card. */
int64_t bl_cuda_test_dequant(int64_t dev, int64_t type, const void *src, int64_t n, float *dst);
/* Probe: microseconds a kernel for n small kernels back to back, as one graph and as stream
 * launches. mode bit 0: every other kernel takes 64 KiB of dynamic shared memory; bit 1: both
 * prefer the largest shared-memory carveout; bit 2: programmatic dependent launch. */
int64_t bl_cuda_test_launch(int64_t dev, int64_t n, int64_t mode, double *graph_us, double *stream_us);

#ifdef __cplusplus
}
#endif
#endif
