/* bloomery CPU library: causal attention of a batch's query rows over one KV cache layer (attn_core.c),
 * the part the ATTN op (GQA) and the MLA op (its absorbed form: one latent KV head that every query head
 * shares) have in common. Items of (unit, tile of up to qtile query tokens of one sequence), a unit being
 * a KV head's slice of `gsub` query heads: each sub-tile of 64 positions converted once for the tile's
 * tokens and the unit's heads; online softmax over chunks of 512 positions merged in a fixed order - for
 * few tokens and long contexts the chunks are items of their own - so results never depend on the batch,
 * the threads or the slicing. Sliding-window layers take items of (token, unit) over the chunks their
 * window reaches; sinks (a logit per head) join every softmax's denominator in the merge. The exact path
 * keeps the reference loop (one pass, double sums of the softmax). */
#ifndef BL_ATTN_CORE_H
#define BL_ATTN_CORE_H
#include "ctx.h"
#include "pool.h"

#define BL_ATTN_CHUNK 512 /* positions per chunk: the unit of the softmax merge, whatever the batch or threads */
#define BL_ATTN_QTILE 16  /* query tokens of one sequence that share each converted sub-tile (GQA) */

typedef struct bl_attn_core {
  bl_cpu_ctx *c;
  int64_t n_tok;
  int64_t hd;             /* head size of Q, K and V (the output has hd floats a head) */
  int64_t nh, nkv, group; /* query heads, KV heads, query heads a KV head */
  int64_t gsub;           /* query heads an item takes (divides group) */
  int64_t qs, os;         /* floats between tokens' query rows and output rows (head h at h * hd) */
  int64_t kd;             /* floats between positions in the cache */
  const float *q;
  float *out;
  const uint16_t *kb, *vb; /* the layer's K and V of slot 0, position 0 (a slot is kv_ctx * kd further) */
  int64_t window;         /* sliding window (0: every position) */
  const int32_t *pos, *seq;
  const float *sinks;     /* a logit per query head, or NULL */
  float scale;
  /* set by bl_attn_core_plan */
  int64_t qtile, n_chunk, n_qt, wk_stride;
  int split;              /* chunks are items of their own (few tokens), merged in a phase after */
  int32_t *qt;            /* first tokens of the query tiles, and n_tok at the end */
  float *part;            /* split: n_tok x nkv x n_chunk x group x (hd + 2): m, l, acc */
  float *wk;              /* per worker: the sub-tile's work space, then the chunk states */
  bl_counter c_att, c_merge;
} bl_attn_core;

/* With the fields above the plan's fields set (qtile: tokens a tile at most; max_pos: the batch's last
 * position; nth: the job's threads), and the bytes of the three buffers it needs (qt, part, wk). */
void bl_attn_core_plan(bl_attn_core *a, int64_t qtile, int64_t max_pos, int nth, size_t bytes[3]);
/* The buffers (each of bytes[i] from the plan, 64-byte aligned), and the query tiles made. */
void bl_attn_core_bind(bl_attn_core *a, void *qt, void *part, void *wk);
/* Every worker of a pool job: the attention of every (token, head) into out. Ends with the work done
 * by this worker (callers put a barrier before reading out). */
void bl_attn_core_run(bl_attn_core *a, int ith);
#endif
