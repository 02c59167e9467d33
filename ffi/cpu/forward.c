/* bloomery CPU library: the CPU backend's context (allocation, KV cache operations), the check of a
 * program's ops, and the walk over them for one batch: a NORM is fused into the op after it that
 * reads h (ATTN, MLA, DELTANET, ROUTER + EXPERTS, FFN), found by a pass over the list, and runs alone otherwise. */
#include "ctx.h"
#include "common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *zalloc(size_t n) {
  void *p = NULL;
  if (n == 0) n = 64;
  if (posix_memalign(&p, 64, n) != 0) return NULL;
  memset(p, 0, n);
  return p;
}

/* zalloc for the workspace, counted in work_bytes */
static void *walloc(bl_cpu_ctx *c, size_t n) {
  c->work_bytes += n;
  return zalloc(n);
}

int64_t bl_cpu_ctx_free(uint64_t h) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  if (!c) return BL_OK;
  bl_cpu_ext_free(c);
  if (c->pool) bl_pool_free(c->pool);
  void *bufs[] = {c->x, c->h, c->q, c->k, c->v, c->att, c->ff_a, c->ff_b, c->moe_out, c->router, c->router_sc, c->picks, c->sel,
                  c->selw, c->tok_list, c->slot_list, c->qact, c->scores, c->kc, c->vc, c->logits_tmp, c->rs, c->rs_snap, c->rs_snap_ok, c->dn};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  free(c);
  return BL_OK;
}

int64_t bl_cpu_ctx_new(const bl_ctx_params *p, const bl_cpu_options *o, uint64_t *out) {
  if (!p || !out) return bl_fail(BL_E_INVAL, "ctx_new: null argument");
  if (p->n_embd <= 0 || p->n_vocab <= 0 || p->max_tokens <= 0 || p->kv_layers < 0 || p->kv_slots <= 0 || p->kv_ctx <= 0 ||
      p->kv_k_dim <= 0 || p->kv_v_dim < 0 || p->max_q_dim <= 0 || p->max_ff <= 0 || p->max_experts < 0 || p->rs_layers < 0 || p->rs_dim < 0)
    return bl_fail(BL_E_INVAL, "ctx_new: invalid parameters (n_embd %lld, max_tokens %lld, kv %lldx%lldx%lld, k_dim %lld, v_dim %lld)",
                   (long long)p->n_embd, (long long)p->max_tokens, (long long)p->kv_layers, (long long)p->kv_slots,
                   (long long)p->kv_ctx, (long long)p->kv_k_dim, (long long)p->kv_v_dim);
  bl_cpu_ctx *c = calloc(1, sizeof *c);
  if (!c) return bl_fail(BL_E_NOMEM, "ctx_new: out of memory");
  c->p = *p;
  int nt = (int)(p->n_threads > 0 ? p->n_threads : 1);
  c->opt = o ? *o : (bl_cpu_options){.pin = 1, .spin_us = -1, .profile = 0};
  c->pool = bl_pool_new_with(nt, &c->opt);
  c->prof = c->opt.profile != 0;
  c->n_workers = nt;
  const size_t T = (size_t)p->max_tokens, E = (size_t)p->n_embd, F = sizeof(float);
  const size_t ne = (size_t)(p->max_experts > 0 ? p->max_experts : 1);
  size_t widest = E;
  if ((size_t)p->max_ff > widest) widest = (size_t)p->max_ff;
  if ((size_t)p->max_q_dim > widest) widest = (size_t)p->max_q_dim;
  /* the widest converted row: f32 copies take 4 bytes an element; Q8_K 292 per 256 */
  c->qact_row = (int64_t)(widest * 4 + 512);
  c->x = walloc(c, T * E * F);
  c->h = walloc(c, T * E * F);
  c->q = walloc(c, T * (size_t)p->max_q_dim * F);
  c->k = walloc(c, T * (size_t)p->kv_k_dim * F);
  c->v = walloc(c, T * (size_t)p->kv_v_dim * F);
  c->att = walloc(c, T * (size_t)p->max_q_dim * F);
  c->ff_a = walloc(c, 2 * T * (size_t)p->max_ff * F);
  c->ff_b = walloc(c, T * E * F);
  c->moe_out = walloc(c, T * E * F);
  c->router = walloc(c, T * ne * F);
  c->router_sc = walloc(c, T * ne * F);
  c->sel = walloc(c, T * ne * sizeof(int32_t));
  c->selw = walloc(c, T * ne * F);
  c->tok_list = walloc(c, T * ne * sizeof(int32_t));
  c->slot_list = walloc(c, T * ne * sizeof(int32_t));
  c->qact = walloc(c, 2 * T * (size_t)c->qact_row);
  c->scores = walloc(c, (size_t)nt * (size_t)p->kv_ctx * F);
  const size_t kv_pos = (size_t)p->kv_layers * (size_t)p->kv_slots * (size_t)p->kv_ctx;
  const size_t kvn = kv_pos * (size_t)p->kv_k_dim, kvv = kv_pos * (size_t)p->kv_v_dim;
  c->kc = zalloc(kvn * 2);
  c->vc = zalloc(kvv * 2);
  const size_t rsn = (size_t)p->kv_slots * (size_t)p->rs_layers * (size_t)p->rs_dim;
  c->rs = zalloc(rsn * sizeof(float));
  if (!c->pool || !c->x || !c->h || !c->q || !c->k || !c->v || !c->att || !c->ff_a || !c->ff_b || !c->moe_out ||
      !c->router || !c->router_sc || !c->sel || !c->selw || !c->tok_list || !c->slot_list || !c->qact || !c->scores || !c->kc || !c->vc || !c->rs) {
    bl_cpu_ctx_free((uint64_t)(uintptr_t)c);
    return bl_fail(BL_E_NOMEM, "ctx_new: cannot allocate the workspace and a KV cache of %zu MiB", (kvn + kvv) * 2 >> 20);
  }
  int64_t st = bl_cpu_ext_init(c);
  if (st != BL_OK) {
    bl_cpu_ctx_free((uint64_t)(uintptr_t)c);
    return st;
  }
  *out = (uint64_t)(uintptr_t)c;
  return BL_OK;
}

const bl_tensor bl_no_tensor = {0};

const char *bl_op_name(int64_t kind) {
  switch (kind) {
    case BL_OP_EMBED: return "embed";
    case BL_OP_NORM: return "norm";
    case BL_OP_ATTN: return "attention";
    case BL_OP_ROUTER: return "router";
    case BL_OP_EXPERTS: return "experts";
    case BL_OP_FFN: return "ffn";
    case BL_OP_OUTPUT: return "output";
    case BL_OP_MLA: return "latent attention";
    case BL_OP_DELTANET: return "gated delta-net";
    case BL_OP_MTP_IN: return "mtp input";
    default: return "unknown op";
  }
}

static int64_t embed(bl_cpu_ctx *c, const bl_op *op, const bl_batch *batch) {
  const bl_tensor *te = bl_op_t(op, BL_EMBED_TOKENS);
  const bl_type_traits *tr = bl_traits((int32_t)te->type);
  const int32_t *tok = (const int32_t *)(uintptr_t)batch->tokens;
  for (int64_t t = 0; t < batch->n_tokens; t++) {
    if (tok[t] < 0 || tok[t] >= te->ne[1]) return bl_fail(BL_E_INVAL, "embed: token id %d outside the vocabulary of %lld", tok[t], (long long)te->ne[1]);
    tr->to_float(bl_tensor_row(te, 0, tok[t]), c->x + t * c->p.n_embd, c->p.n_embd);
  }
  return BL_OK;
}

static int64_t output(bl_cpu_ctx *c, const bl_op *op, const bl_batch *batch) {
  const int64_t E = c->p.n_embd, V = c->p.n_vocab;
  const int32_t *rows = (const int32_t *)(uintptr_t)batch->out_rows;
  float *logits = (float *)(uintptr_t)batch->logits;
  float *hid = (float *)(uintptr_t)batch->hidden_out;
  const float eps = (float)BL_OP_PARAMS(op, bl_norm_params)->eps;
  int64_t s;
  /* every row's normalised state to hidden_out when asked (the same rows the head reads below) */
  if (hid && (s = bl_rmsnorm_rows(c, c->x, E, hid, E, batch->n_tokens, E, bl_op_t(op, BL_OUTPUT_NORM), eps))) return s;
  if (batch->n_out == 0) return BL_OK;
  if (!rows || !logits) return bl_fail(BL_E_INVAL, "output: rows or logits missing");
  /* gather the wanted rows into h, normalise in place (or take them normalised from hidden_out) */
  for (int64_t i = 0; i < batch->n_out; i++) {
    if (rows[i] < 0 || rows[i] >= batch->n_tokens) return bl_fail(BL_E_INVAL, "output: row %d outside the batch", rows[i]);
    memcpy(c->h + i * E, (hid ? hid : c->x) + (int64_t)rows[i] * E, sizeof(float) * E);
  }
  if (!hid && (s = bl_rmsnorm_rows(c, c->h, E, c->h, E, batch->n_out, E, bl_op_t(op, BL_OUTPUT_NORM), eps))) return s;
  return bl_matmul(c, bl_op_t(op, BL_OUTPUT_HEAD), 0, c->h, E, batch->n_out, logits, V);
}

int64_t bl_norm_op(bl_cpu_ctx *c, const bl_op *op, int64_t n_tok) {
  const int64_t E = c->p.n_embd;
  return bl_rmsnorm_rows(c, c->x, E, c->h, E, n_tok, E, bl_op_t(op, BL_NORM_WEIGHT), (float)BL_OP_PARAMS(op, bl_norm_params)->eps);
}

static int64_t vec_check(const bl_tensor *t, int64_t n, const char *what) {
  if (!t->data) return BL_OK;
  if (t->type != BL_F32 && t->type != BL_F16 && t->type != BL_BF16)
    return bl_fail(BL_E_UNSUPPORTED, "%s: a vector of type %lld (F32, F16 or BF16)", what, (long long)t->type);
  if (t->ne[0] != n) return bl_fail(BL_E_INVAL, "%s: %lld elements, %lld expected", what, (long long)t->ne[0], (long long)n);
  return BL_OK;
}

/* The matrices an op multiplies by: each type must have a CPU product. */
static int64_t matrices_check(const bl_op *op) {
  static const struct {
    int64_t kind;
    int role;
    const char *what;
  } M[] = {
      {BL_OP_ATTN, BL_ATTN_Q, "attention q"},       {BL_OP_ATTN, BL_ATTN_K, "attention k"},
      {BL_OP_ATTN, BL_ATTN_V, "attention v"},       {BL_OP_ATTN, BL_ATTN_O, "attention output"},
      {BL_OP_EXPERTS, BL_EXPERTS_GATE, "experts' gate"}, {BL_OP_EXPERTS, BL_EXPERTS_UP, "experts' up"},
      {BL_OP_EXPERTS, BL_EXPERTS_DOWN, "experts' down"}, {BL_OP_FFN, BL_FFN_GATE, "ffn gate"},
      {BL_OP_FFN, BL_FFN_UP, "ffn up"},             {BL_OP_FFN, BL_FFN_DOWN, "ffn down"},
      {BL_OP_OUTPUT, BL_OUTPUT_HEAD, "output head"},
  };
  for (size_t i = 0; i < sizeof M / sizeof M[0]; i++) {
    if (M[i].kind != op->kind || M[i].role >= op->n_tensors) continue;
    const bl_tensor *w = bl_op_t(op, M[i].role);
    int64_t s;
    if (w->data && (s = bl_weight_type_check(w, M[i].what))) return s;
  }
  return BL_OK;
}

/* Whether the op runs on a context of these sizes (no context needed). */
static int64_t op_check(const bl_ctx_params *p, const bl_op *op, int64_t n_vocab) {
  if (op->n_tensors < 0 || op->n_tensors > BL_OP_MAX_TENSORS || (op->n_tensors > 0 && !op->tensors))
    return bl_fail(BL_E_INVAL, "%lld tensors", (long long)op->n_tensors);
  if (op->kind != BL_OP_EMBED && !op->params) return bl_fail(BL_E_INVAL, "no parameters");
  switch (op->kind) {
    case BL_OP_EMBED: {
      const bl_tensor *te = bl_op_t(op, BL_EMBED_TOKENS);
      const bl_type_traits *tr = bl_traits((int32_t)te->type);
      if (!te->data || !tr || !tr->to_float)
        return bl_fail(BL_E_UNSUPPORTED, "token_embd of type %s (ggml type %lld) cannot be read on the CPU", bl_type_name(te->type), (long long)te->type);
      if (te->ne[0] != p->n_embd) return bl_fail(BL_E_INVAL, "token_embd rows have %lld elements, n_embd is %lld", (long long)te->ne[0], (long long)p->n_embd);
      return BL_OK;
    }
    case BL_OP_NORM:
    case BL_OP_OUTPUT: {
      if (BL_OP_PARAMS(op, bl_norm_params)->kind != BL_NORM_RMS) return bl_fail(BL_E_UNSUPPORTED, "norm kind %lld", (long long)BL_OP_PARAMS(op, bl_norm_params)->kind);
      int64_t s = vec_check(bl_op_t(op, 0), p->n_embd, "norm weight");
      if (s || op->kind == BL_OP_NORM) return s;
      const bl_tensor *head = bl_op_t(op, BL_OUTPUT_HEAD);
      if (!head->data) return bl_fail(BL_E_INVAL, "missing output head");
      if (head->ne[1] != n_vocab || head->ne[0] != p->n_embd) return bl_fail(BL_E_INVAL, "head shape does not match n_embd x n_vocab");
      return BL_OK;
    }
    case BL_OP_ATTN: return bl_attn_check(p, op);
    case BL_OP_ROUTER: return bl_router_check(p, op);
    case BL_OP_EXPERTS: return bl_experts_check(p, op);
    case BL_OP_FFN: return bl_ffn_check(p, op);
    case BL_OP_MLA: return bl_mla_check(p, op);
    case BL_OP_DELTANET: return bl_deltanet_check(p, op);
    case BL_OP_MTP_IN: return bl_mtp_in_check(p, op);
    default: return bl_fail(BL_E_INVAL, "unknown kind %lld", (long long)op->kind);
  }
}

/* The walk: a NORM fused into the op after it (ATTN, MLA, ROUTER [+ EXPERTS], FFN); an EXPERTS op
 * takes the last router's picks (its own when they are neighbours). *used: the ops taken. */
static int64_t run_step(bl_cpu_ctx *c, const bl_op *ops, int64_t i, int64_t n, const bl_batch *batch, int64_t *used) {
  const bl_op *op = &ops[i];
  const bl_op *next = i + 1 < n ? &ops[i + 1] : NULL;
  const bl_op *norm = NULL;
  const int64_t nt = batch->n_tokens;
  if (op->kind == BL_OP_NORM && next &&
      (next->kind == BL_OP_ATTN || next->kind == BL_OP_MLA || next->kind == BL_OP_DELTANET || next->kind == BL_OP_ROUTER ||
       next->kind == BL_OP_FFN)) {
    norm = op;
    op = next;
    next = i + 2 < n ? &ops[i + 2] : NULL;
  }
  *used = norm ? 2 : 1;
  switch (op->kind) {
    case BL_OP_EMBED: return embed(c, op, batch);
    case BL_OP_NORM: return bl_norm_op(c, op, nt);
    case BL_OP_ATTN: return bl_attn_op(c, norm, op, batch);
    case BL_OP_MLA: return bl_mla_op(c, norm, op, batch);
    case BL_OP_DELTANET: return bl_deltanet_op(c, norm, op, batch);
    case BL_OP_ROUTER:
      if (next && next->kind == BL_OP_EXPERTS) {
        (*used)++;
        return bl_moe_op(c, norm, op, next, nt);
      }
      return bl_moe_op(c, norm, op, NULL, nt);
    case BL_OP_EXPERTS: return bl_moe_op(c, NULL, NULL, op, nt);
    case BL_OP_FFN: return bl_ffn_op(c, norm, op, nt);
    case BL_OP_OUTPUT: return output(c, op, batch);
    case BL_OP_MTP_IN: return bl_mtp_in_op(c, op, batch);
    default: return bl_fail(BL_E_INVAL, "unknown op kind %lld", (long long)op->kind);
  }
}

/* The ops of a program run on the CPU (the whole program, or a host hook's run). */
int64_t bl_cpu_run_ops(bl_cpu_ctx *c, const bl_op *ops, int64_t n, const bl_batch *batch) {
  for (int64_t i = 0, used; i < n; i += used) {
    const int64_t s = run_step(c, ops, i, n, batch, &used);
    if (s != BL_OK) return s;
  }
  return BL_OK;
}

int64_t bl_cpu_check(const bl_ctx_params *p, const bl_program *prog, int64_t *bad_op) {
  if (bad_op) *bad_op = -1;
  if (!p || !prog) return bl_fail(BL_E_INVAL, "check: null argument");
  if (prog->n_ops <= 0 || !prog->ops) return bl_fail(BL_E_INVAL, "check: an empty program");
  if (prog->n_embd != p->n_embd || prog->n_vocab != p->n_vocab) return bl_fail(BL_E_INVAL, "check: program and context disagree on sizes");
  const bl_op *ops = (const bl_op *)(uintptr_t)prog->ops;
  int routed = 0;
  for (int64_t i = 0; i < prog->n_ops; i++) {
    int64_t s = op_check(p, &ops[i], prog->n_vocab);
    if (s == BL_OK) s = matrices_check(&ops[i]);
    if (s == BL_OK && ops[i].kind == BL_OP_ROUTER) routed = 1;
    if (s == BL_OK && ops[i].kind == BL_OP_EXPERTS && !routed) s = bl_fail(BL_E_INVAL, "no router before it");
    if (s != BL_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", bl_last_error());
      if (bad_op) *bad_op = i;
      return bl_fail((int)s, "op %lld (%s): %s", (long long)i, bl_op_name(ops[i].kind), msg);
    }
  }
  return BL_OK;
}

int64_t bl_cpu_forward(uint64_t h, const bl_program *prog, const bl_batch *batch) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  if (!c || !prog || !batch) return bl_fail(BL_E_INVAL, "forward: null argument");
  if (batch->n_tokens <= 0 || batch->n_tokens > c->p.max_tokens)
    return bl_fail(BL_E_INVAL, "forward: batch of %lld tokens (the context takes 1..%lld)", (long long)batch->n_tokens, (long long)c->p.max_tokens);
  if (batch->n_out < 0 || batch->n_out > batch->n_tokens) return bl_fail(BL_E_INVAL, "forward: %lld output rows", (long long)batch->n_out);
  int64_t st = bl_cpu_check(&c->p, prog, NULL);
  if (st != BL_OK) return st;
  st = bl_cpu_begin(c, batch->n_tokens);
  if (st != BL_OK) return st;
  st = bl_cpu_run_ops(c, (const bl_op *)(uintptr_t)prog->ops, prog->n_ops, batch);
  bl_cpu_end(c);
  return st;
}

static int64_t kv_check(const bl_cpu_ctx *c, int64_t slot, int64_t n) {
  if (!c) return bl_fail(BL_E_INVAL, "kv: null context");
  if (slot < 0 || slot >= c->p.kv_slots) return bl_fail(BL_E_INVAL, "kv: slot %lld out of range", (long long)slot);
  if (n < 0 || n > c->p.kv_ctx) return bl_fail(BL_E_INVAL, "kv: %lld positions out of range", (long long)n);
  return BL_OK;
}

int64_t bl_cpu_kv_clear(uint64_t h, int64_t slot, int64_t from) {
  /* Attention reads only positions <= the query's, and every position is written before it is
   * read, so clearing is bookkeeping for the caller; nothing to erase. */
  return kv_check((bl_cpu_ctx *)(uintptr_t)h, slot, from);
}

int64_t bl_cpu_work_bytes(uint64_t h) {
  const bl_cpu_ctx *c = (const bl_cpu_ctx *)(uintptr_t)h;
  return c ? (int64_t)c->work_bytes : bl_fail(BL_E_INVAL, "work_bytes: null context");
}

int64_t bl_cpu_kv_pos_bytes(uint64_t h) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  return c ? c->p.kv_layers * (c->p.kv_k_dim + c->p.kv_v_dim) * 2 : 0;
}

typedef enum { KV_SAVE, KV_LOAD } kv_dir;

/* Saved KV is position-major (for each position: every layer's k row, then its v row), so any
 * prefix of a saved state is itself a valid saved state of fewer positions. */
static int64_t kv_move(bl_cpu_ctx *c, int64_t slot, int64_t n, uint8_t *buf, kv_dir dir) {
  const size_t krow = (size_t)c->p.kv_k_dim * 2, vrow = (size_t)c->p.kv_v_dim * 2;
  for (int64_t p = 0; p < n; p++) {
    for (int64_t l = 0; l < c->p.kv_layers; l++) {
      const size_t at = (((size_t)l * c->p.kv_slots + slot) * c->p.kv_ctx) + (size_t)p;
      uint16_t *kk = c->kc + at * c->p.kv_k_dim, *vv = c->vc + at * c->p.kv_v_dim;
      if (dir == KV_SAVE) { memcpy(buf, kk, krow); memcpy(buf + krow, vv, vrow); }
      else { memcpy(kk, buf, krow); memcpy(vv, buf + krow, vrow); }
      buf += krow + vrow;
    }
  }
  return BL_OK;
}

int64_t bl_cpu_kv_save(uint64_t h, int64_t slot, int64_t n, void *dst) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = kv_check(c, slot, n);
  if (s) return s;
  if (!dst) return bl_fail(BL_E_INVAL, "kv_save: null buffer");
  return kv_move(c, slot, n, dst, KV_SAVE);
}

int64_t bl_cpu_kv_load(uint64_t h, int64_t slot, int64_t n, const void *src) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = kv_check(c, slot, n);
  if (s) return s;
  if (!src) return bl_fail(BL_E_INVAL, "kv_load: null buffer");
  return kv_move(c, slot, n, (uint8_t *)src, KV_LOAD);
}

int64_t bl_cpu_kv_copy(uint64_t h, int64_t src, int64_t dst, int64_t n) {
  bl_cpu_ctx *c = (bl_cpu_ctx *)(uintptr_t)h;
  int64_t s = kv_check(c, src, n);
  if (s || (s = kv_check(c, dst, n))) return s;
  for (int64_t l = 0; l < c->p.kv_layers; l++) {
    const size_t so = ((size_t)l * c->p.kv_slots + src) * c->p.kv_ctx, d0 = ((size_t)l * c->p.kv_slots + dst) * c->p.kv_ctx;
    memcpy(c->kc + d0 * c->p.kv_k_dim, c->kc + so * c->p.kv_k_dim, (size_t)c->p.kv_k_dim * 2 * (size_t)n);
    if (c->p.kv_v_dim) memcpy(c->vc + d0 * c->p.kv_v_dim, c->vc + so * c->p.kv_v_dim, (size_t)c->p.kv_v_dim * 2 * (size_t)n);
  }
  return BL_OK;
}

/* The ABI's structs are 8-byte slots; TypeScript (ffi/layout.ts) relies on these sizes. */
_Static_assert(sizeof(bl_tensor) == 8 * 8, "bl_tensor layout");
_Static_assert(sizeof(bl_op) == 4 * 8, "bl_op layout");
_Static_assert(sizeof(bl_norm_params) == 2 * 8, "bl_norm_params layout");
_Static_assert(sizeof(bl_rope_params) == 9 * 8, "bl_rope_params layout");
_Static_assert(sizeof(bl_attn_params) == 17 * 8, "bl_attn_params layout");
_Static_assert(sizeof(bl_router_params) == 7 * 8, "bl_router_params layout");
_Static_assert(sizeof(bl_experts_params) == 9 * 8, "bl_experts_params layout");
_Static_assert(sizeof(bl_ffn_params) == 3 * 8, "bl_ffn_params layout");
_Static_assert(sizeof(bl_mla_params) == 16 * 8, "bl_mla_params layout");
_Static_assert(sizeof(bl_program) == 4 * 8, "bl_program layout");
_Static_assert(sizeof(bl_batch) == 9 * 8, "bl_batch layout");
_Static_assert(sizeof(bl_deltanet_params) == 8 * 8, "bl_deltanet_params layout");
_Static_assert(sizeof(bl_ctx_params) == 15 * 8, "bl_ctx_params layout");
