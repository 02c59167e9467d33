// bloomery CUDA library: the fusion pass's output - the program's ops (ffi/bloomery.h bl_op) matched
// into the fused blocks the card's kernels run: EMBED; NORM + ATTN; NORM + ROUTER + EXPERTS (a MoE
// layer); NORM + FFN; an FFN right after EXPERTS (a shared expert on the experts' normalised input,
// DeepSeek's and GLM's, or Qwen's under its scalar sigmoid gate); NORM + MLA (multi-head latent attention,
// DeepSeek V2/V3's); NORM + DELTANET (the gated delta-net, Qwen3-Next's and Qwen3.5's); OUTPUT. A pattern the pass does not know, or an option the kernels do not
// implement, is refused by name (bl_cuda_check, cu_fuse). The blocks are internal: each keeps the run
// of ops it came from (the host hook runs that run on the CPU).
#pragma once
#include <string>
#include <vector>

#include "../ffi/bloomery.h"

enum { CU_BLOCK_EMBED = 1, CU_BLOCK_ATTN = 2, CU_BLOCK_MOE = 3, CU_BLOCK_FFN = 4, CU_BLOCK_OUTPUT = 5, CU_BLOCK_MLA = 6, CU_BLOCK_DN = 7 };
// tensor roles of a fused block (t[]): attention, MoE and FFN blocks; EMBED's token_embd and OUTPUT's norm
// and head take roles 0 and 0, 1
enum { CU_ATTN_NORM = 0, CU_ATTN_Q = 1, CU_ATTN_K = 2, CU_ATTN_V = 3, CU_ATTN_O = 4, CU_ATTN_Q_NORM = 5, CU_ATTN_K_NORM = 6,
       CU_ATTN_BQ = 7, CU_ATTN_BK = 8, CU_ATTN_BV = 9, CU_ATTN_BO = 10, CU_ATTN_SINKS = 11 };
// the router's bias and its selection bias (vectors) and the experts' biases (F32 rows, one an expert) stay on the card
enum { CU_MOE_NORM = 0, CU_MOE_GATE_INP = 1, CU_MOE_GATE = 2, CU_MOE_UP = 3, CU_MOE_DOWN = 4, CU_MOE_RBIAS = 5, CU_MOE_BGATE = 6,
       CU_MOE_BUP = 7, CU_MOE_BDOWN = 8, CU_MOE_RCORR = 9 };
// MLA blocks: the input norm, then bloomery.h's BL_MLA_* roles in their order (vectors: the norms)
enum { CU_MLA_NORM = 0, CU_MLA_Q = 1, CU_MLA_Q_A = 2, CU_MLA_Q_A_NORM = 3, CU_MLA_Q_B = 4, CU_MLA_KV_A = 5, CU_MLA_KV_A_NORM = 6,
       CU_MLA_K_B = 7, CU_MLA_V_B = 8, CU_MLA_O = 9 };
// FFN blocks: the norm, gate, up, down, then a shared expert's scalar gate (a vector: sigmoid(h . gate_inp))
enum { CU_FFN_NORM = 0, CU_FFN_GATE = 1, CU_FFN_UP = 2, CU_FFN_DOWN = 3, CU_FFN_GATE_INP = 4 };
// delta-net blocks: the input norm, then bloomery.h's BL_DN_* roles in their order (vectors: the norm, the
// conv's weights, dt, a and the output norm)
enum { CU_DN_NORM = 0, CU_DN_QKV = 1, CU_DN_GATE = 2, CU_DN_BETA = 3, CU_DN_ALPHA = 4, CU_DN_BA = 5, CU_DN_CONV = 6, CU_DN_DT = 7,
       CU_DN_A = 8, CU_DN_ONORM = 9, CU_DN_OUT = 10, CU_DN_QKVZ = 11 };
#define CU_BLOCK_TENSORS 12

struct cu_fblock {
  int64_t kind;
  int64_t layer; // KV cache layer (attention blocks)
  int64_t n_head, n_head_kv, head_dim, n_rot, rope_type;
  int64_t n_expert, n_expert_used, norm_topk;
  int64_t gating, n_group, n_group_used; // MoE: the router's BL_GATING_* and its expert groups
  int64_t shared; // FFN: a shared expert reading the MoE block's normalised input before it (no norm of its own)
  int64_t yarn_orig_ctx;
  double eps, rope_base, rope_freq_scale, attn_scale;
  double yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
  double expert_weights_scale;
  uint64_t expert_store; // MoE blocks: the EXPERTS op's store and its layer, and its host mark (BL_HOST_EXPERTS_*)
  int64_t expert_layer;
  int64_t host_experts;
  int64_t window;   // attention: a sliding window (0: every position)
  int64_t act;      // MoE: the experts' activation (BL_ACT_*)
  double alpha, limit;
  // MLA: the latent's size, a query head's dims without rotation (n_rot: with), a value head's dims,
  // q's LoRA rank (0: a plain q) and the epsilon of q_a's and the latent's norms
  int64_t kv_lora, nope, v_dim, q_lora;
  double mla_eps;
  int64_t gate; // attention: q's rows hold each head's query then its output gate (bl_attn_params.gate)
  // delta-net: bl_deltanet_params' sizes (the recurrent state layer in layer), its k head map
  int64_t n_k_heads, n_v_heads, head_k, head_v, conv_kernel, head_map;
  double dn_eps; // delta-net: the q / k L2 norms' and the output norm's epsilon
  bl_tensor t[CU_BLOCK_TENSORS];
  const bl_op *ops; // the run of ops it came from (the host hook's argument) and their count
  int64_t n_ops;
  int64_t first_op; // the index of ops[0] in the program
};

// Matches the program's ops into fused blocks; false with *why (and *bad_op, the op's index; -1 for the
// program as a whole) when an op has no pattern or an option the card does not run.
bool cu_fuse(const bl_program *prog, std::vector<cu_fblock> &out, std::string *why, int64_t *bad_op);
// The fused blocks' shapes, types and sizes validated as a load would (ctx.cu's plan; no device).
int64_t cu_check_plan(const bl_program *prog, const std::vector<cu_fblock> &blocks);
