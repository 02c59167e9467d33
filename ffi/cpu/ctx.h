/* bloomery CPU library: the CPU backend's context (workspace, KV cache, thread pool) and the
 * helpers its blocks share (matmul over stored quant blocks, norms, RoPE). */
#ifndef BL_CTX_H
#define BL_CTX_H
#include "../bloomery.h"
#include "pool.h"
#include "quants.h"

typedef struct bl_cpu_ctx {
  bl_ctx_params p;
  bl_pool *pool;
  /* activations, max_tokens rows each */
  float *x, *h, *q, *k, *v, *att, *ff_a, *ff_b, *moe_out, *logits_tmp;
  float *router;       /* max_tokens x max_experts */
  int32_t *sel;        /* max_tokens x max_experts: chosen experts */
  float *selw;         /* their weights */
  int32_t *tok_list;   /* max_tokens x max_experts: tokens routed to an expert */
  int32_t *slot_list;  /* which of the token's picks it was */
  uint8_t *qact;       /* quantized activation rows */
  int64_t qact_row;    /* bytes per quantized row (largest) */
  float *scores;       /* per worker: kv_ctx floats */
  uint16_t *kc, *vc;   /* f16 [layer][slot][pos][dim] */
  int64_t n_workers;
} bl_cpu_ctx;

/* y[t][r] = W(slab)[r] . x[t] for t < n_tok, r < ne1; x rows have length ne0. */
int64_t bl_matmul(bl_cpu_ctx *c, const bl_tensor *w, int64_t slab, const float *x, int64_t xs,
                  int64_t n_tok, float *y, int64_t ys);
/* As bl_matmul for rows already converted to the weight's vec_dot_type (qrows, qstride bytes);
 * only tokens listed in idx (n_idx of them) are computed, y row i gets token idx[i]. */
void bl_matmul_q(bl_cpu_ctx *c, const bl_tensor *w, int64_t slab, const uint8_t *qrows, int64_t qstride,
                 const int32_t *idx, int64_t n_idx, float *y, int64_t ys);
/* The type activations are converted to for products with weights of type wtype. */
int32_t bl_act_type(const bl_cpu_ctx *c, int32_t wtype);
/* Convert n_tok rows of x (length n) to type vt; returns row stride in bytes or -1. */
int64_t bl_quantize_rows(bl_cpu_ctx *c, int32_t vt, const float *x, int64_t xs, int64_t n_tok, int64_t n, uint8_t *dst);

#define BL_MAX_NORM 32768
/* y = rmsnorm(x) * w (w may be absent: data == 0) per row. */
int64_t bl_rmsnorm_rows(bl_cpu_ctx *c, const float *x, int64_t xs, float *y, int64_t ys, int64_t n_tok, int64_t n,
                        const bl_tensor *w, float eps);
/* Weight vector (F32 / F16 / BF16 norm weights) as floats, n elements. */
int64_t bl_weight_f32(const bl_tensor *w, float *dst, int64_t n);

int64_t bl_attn_block(bl_cpu_ctx *c, const bl_block *b, const bl_batch *batch);
int64_t bl_moe_block(bl_cpu_ctx *c, const bl_block *b, const bl_batch *batch);
int64_t bl_ffn_block(bl_cpu_ctx *c, const bl_block *b, const bl_batch *batch);

static inline const uint8_t *bl_tensor_row(const bl_tensor *t, int64_t slab, int64_t row) {
  return (const uint8_t *)(uintptr_t)t->data + slab * t->nb2 + row * t->nb1;
}
#endif
