/* bloomery CPU library: the CPU backend's context (workspace, KV cache, thread pool) and the
 * helpers its blocks share (matmul over stored quant blocks, norms, RoPE). */
#ifndef BL_CTX_H
#define BL_CTX_H
#include "../bloomery.h"
#include "kernels.h"
#include "pool.h"
#include "quants.h"
#include <pthread.h>
#include <stddef.h>

enum { BL_PROF_PARTS_MAX = 4 };

typedef struct bl_cpu_ctx {
  bl_ctx_params p;
  bl_pool *pool;
  /* activations, max_tokens rows each */
  float *x, *h, *q, *k, *v, *att, *ff_a, *ff_b, *moe_out, *logits_tmp;
  float *router;       /* max_tokens x max_experts */
  float *router_sc;    /* max_tokens x max_experts: a sigmoid router's selection scores */
  int32_t *sel;        /* max_tokens x max_experts: chosen experts */
  float *selw;         /* their weights */
  int32_t *tok_list;   /* max_tokens x max_experts: tokens routed to an expert */
  int32_t *slot_list;  /* which of the token's picks it was */
  uint8_t *qact;       /* quantized activation rows: two halves of max_tokens rows */
  int64_t qact_row;    /* bytes per quantized row (largest) */
  float *scores;       /* per worker: kv_ctx floats */
  uint16_t *kc, *vc;   /* f16 [layer][slot][pos][kv_k_dim], [layer][slot][pos][kv_v_dim] */
  float *rs;           /* recurrent state: [slot][rs_layers][rs_dim] (deltanet.c) */
  float *rs_snap;      /* a snapshot of each slot's recurrent state, as rs (bl_cpu_rs_snap_*; NULL until reserved) */
  uint8_t *rs_snap_ok; /* per slot: its snapshot was taken */
  float *dn;           /* the delta-net's work rows (grown on use) */
  size_t dn_cap;       /* floats dn holds */
  size_t work_bytes;   /* the workspace's bytes: the batch buffers (x .. scores) and dn (bl_cpu_work_bytes) */
  int64_t n_workers;
  /* ---- kept by bl_cpu_ext_init (matmul.c) ---- */
  int64_t n_threads, n_threads_batch; /* -t (one-token steps) and -tb (batches) */
  int64_t widest;      /* longest activation row (n_embd, q dim, FFN hidden) */
  float *wrow;         /* per worker: one dequantized weight row (exact path) */
  uint8_t *scratch;    /* growable: MoE pair rows and attention partials */
  size_t scratch_cap;
  const bl_kernels *kern; /* the path of the current forward */
  /* the host hook's callers (a card's callback thread) stay pinned to worker 0's core between calls
   * (hook.c): no affinity change per call */
  int stay_pinned, pinned_set;
  pthread_t pinned_thread;
  bl_cpu_options opt;      /* the context's options (bl_cpu_ctx_new; its pool is made by them) */
  int prof;                /* bl_cpu_options.profile: wall time per part, printed when the context is freed */
  int64_t *picks;          /* bl_cpu_expert_picks' counters: picks_layers x p.max_experts */
  int64_t picks_layers;
  int64_t prof_ns[BL_PROF_PARTS_MAX], prof_forwards, prof_tokens, prof_t0;
} bl_cpu_ctx;

/* Parts of a forward the profile times. */
enum { BL_PROF_FORWARD = 0, BL_PROF_ATTN = 1, BL_PROF_MOE = 2, BL_PROF_MATMUL = 3, BL_PROF_PARTS = 4 };
int64_t bl_prof_now(void);
static inline void bl_prof_add(bl_cpu_ctx *c, int part, int64_t t0) {
  if (c->prof) c->prof_ns[part] += bl_prof_now() - t0;
}

/* Set up / release what the kernels keep in the context (called by ctx_new / ctx_free). */
int64_t bl_cpu_ext_init(bl_cpu_ctx *c);
void bl_cpu_ext_free(bl_cpu_ctx *c);
/* Around one forward: choose the path and the thread count for n_tok tokens, pin the caller. */
int64_t bl_cpu_begin(bl_cpu_ctx *c, int64_t n_tok);
void bl_cpu_end(bl_cpu_ctx *c);
/* At least bytes of scratch (64-byte aligned); NULL when it cannot grow. */
void *bl_cpu_scratch(bl_cpu_ctx *c, size_t bytes);

/* y[t][r] = W(slab)[r] . x[t] for t < n_tok, r < ne1; x rows have length ne0. One pool job. */
int64_t bl_matmul(bl_cpu_ctx *c, const bl_tensor *w, int64_t slab, const float *x, int64_t xs,
                  int64_t n_tok, float *y, int64_t ys);
/* The type activations are converted to for products with weights of type wtype. */
int32_t bl_act_type(const bl_cpu_ctx *c, int32_t wtype);
/* Check a weight can be multiplied on this path; returns a status naming what is missing. */
int64_t bl_check_weight(const bl_cpu_ctx *c, const bl_tensor *w, const char *what);
/* Whether the CPU has a product of w's type (every path has one where any has: cpuid.c), else a
 * refusal naming the type: checked at load (bl_cpu_check), not first met by a request. */
int64_t bl_weight_type_check(const bl_tensor *w, const char *what);

/* ---- pieces that run inside a pool job (every worker calls them; items claimed by counter) ---- */
/* Convert rows of x (length n) to type vt at dst + t * rb. */
void bl_job_quantize(bl_cpu_ctx *c, bl_counter *ctr, int32_t vt, int lanes, const float *x, int64_t xs, int64_t n_tok,
                     int64_t n, uint8_t *dst, int64_t rb);
/* Whether a product of W with n_act activation rows uses the lane-order kernels of batches
 * (kernels.h's tile_lanes: Q8_K activations in lane order). */
int bl_lanes(const bl_cpu_ctx *c, const bl_tensor *w, int64_t n_act);
/* Rows [r0, r1) of W(slab) against n_act converted activation rows: y[i][r - r0] for row r, row i.
 * Work is split in items of `rows_per_item` rows claimed from ctr. */
typedef struct {
  const bl_tensor *w;
  int64_t slab;
  const uint8_t *const *act; /* activation row pointers */
  float *const *y;           /* output row pointers (row r of W lands at y[i][r]) */
  int64_t n_act;
  int lanes;                 /* the activation rows are lane-order Q8_K (bl_lanes) */
} bl_mm_spec;
void bl_job_matmul(bl_cpu_ctx *c, int ith, bl_counter *ctr, const bl_mm_spec *m, int64_t rows_per_item);
/* Rows per work item for a matrix of `rows` rows with n_act activation rows on nth threads (at
 * most BL_MAX_RPI). */
#define BL_MAX_RPI 512
int64_t bl_rows_per_item(int64_t rows, int64_t n_act, int nth);
/* One item: rows [r0, r1) of W against the activation rows (the inner loop of bl_job_matmul); ith
 * picks the worker's scratch row of the exact path. */
void bl_mm_rows(bl_cpu_ctx *c, int ith, const bl_mm_spec *m, int64_t r0, int64_t r1);
/* y = rmsnorm(x) * w for rows claimed from ctr (w as floats or NULL). */
void bl_job_rmsnorm(bl_counter *ctr, const float *x, int64_t xs, float *y, int64_t ys, int64_t n_tok, int64_t n,
                    const float *w, float eps);

#define BL_MAX_NORM 32768
/* y = rmsnorm(x) * w (w may be absent: data == 0) per row. */
int64_t bl_rmsnorm_rows(bl_cpu_ctx *c, const float *x, int64_t xs, float *y, int64_t ys, int64_t n_tok, int64_t n,
                        const bl_tensor *w, float eps);
/* Weight vector (F32 / F16 / BF16 norm weights) as floats, n elements. */
int64_t bl_weight_f32(const bl_tensor *w, float *dst, int64_t n);

/* ---- the ops (forward.c walks the program; a NORM before the op that reads h is fused into it) ----
 * norm: the NORM op fused into the step (its rows normalised into h first), or NULL: h holds the
 * input already (an earlier NORM's rows). */
int64_t bl_norm_op(bl_cpu_ctx *c, const bl_op *norm, int64_t n_tok);
int64_t bl_attn_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *attn, const bl_batch *batch);
/* A MoE step: router (NULL: the picks of the last router are in c->sel / c->selw, the experts' n_used
 * a token) then experts (NULL: the router alone, its picks left in c->sel / c->selw). */
int64_t bl_moe_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *router, const bl_op *experts, int64_t n_tok);
int64_t bl_ffn_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *ffn, int64_t n_tok);
int64_t bl_mla_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *mla, const bl_batch *batch);
int64_t bl_deltanet_op(bl_cpu_ctx *c, const bl_op *norm, const bl_op *dn, const bl_batch *batch);
/* The experts for picks the caller put in c->sel / c->selw (k a token, weights as given) on the NORM
 * of x: x rows += their weighted sum, which is also left in c->moe_out. */
int64_t bl_moe_picked(bl_cpu_ctx *c, const bl_op *norm, const bl_op *experts, int64_t n_tok, int64_t k);
/* Whether the CPU runs the op on a context of these parameters (forward.c's check; moe.c, attn.c). */
int64_t bl_attn_check(const bl_ctx_params *p, const bl_op *attn);
int64_t bl_router_check(const bl_ctx_params *p, const bl_op *router);
int64_t bl_experts_check(const bl_ctx_params *p, const bl_op *experts);
int64_t bl_ffn_check(const bl_ctx_params *p, const bl_op *ffn);
int64_t bl_mla_check(const bl_ctx_params *p, const bl_op *mla);
int64_t bl_deltanet_check(const bl_ctx_params *p, const bl_op *dn);
/* The MTP layer's input (mtp.c): x = eh_proj [enorm(embed[tokens]); hnorm(batch->hidden_in)]. */
int64_t bl_mtp_in_op(bl_cpu_ctx *c, const bl_op *op, const bl_batch *batch);
int64_t bl_mtp_in_check(const bl_ctx_params *p, const bl_op *op);
/* The routed experts' picks of a layer counted for bl_cpu_expert_picks (n_expert counts). */
void bl_count_picks(bl_cpu_ctx *c, int64_t layer, int64_t n_expert, const int32_t *start);

/* The ops [0, n) on the batch (forward.c; the host hooks run a run of a program). */
int64_t bl_cpu_run_ops(bl_cpu_ctx *c, const bl_op *ops, int64_t n, const bl_batch *batch);

/* An op's tensor of a role (a zero tensor when the op has fewer) and its parameters. */
extern const bl_tensor bl_no_tensor;
static inline const bl_tensor *bl_op_t(const bl_op *op, int role) {
  return role < op->n_tensors ? &((const bl_tensor *)(uintptr_t)op->tensors)[role] : &bl_no_tensor;
}
#define BL_OP_PARAMS(op, type) ((const type *)(uintptr_t)(op)->params)
const char *bl_op_name(int64_t kind);

static inline const uint8_t *bl_tensor_row(const bl_tensor *t, int64_t slab, int64_t row) {
  return (const uint8_t *)(uintptr_t)t->data + slab * t->nb2 + row * t->nb1;
}
static inline int bl_exact(const bl_cpu_ctx *c) { return (c->p.flags & BL_CTX_EXACT) != 0; }
#endif
