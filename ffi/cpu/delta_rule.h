/* bloomery CPU library: the gated delta rule of one head over one sequence's tokens (delta_rule.c), in its
 * recurrent form (a token at a time) and its chunked form (chunks of BL_DR_CHUNK tokens, for prompts). */
#ifndef BL_DELTA_RULE_H
#define BL_DELTA_RULE_H
#include "kernels.h"
#include <stddef.h>
#include <stdint.h>

/* Tokens a chunk of the chunked form takes (transformers' chunk_gated_delta_rule and the fla library: 64). */
#define BL_DR_CHUNK 64
/* A sequence's run of at least this many tokens in one batch takes the chunked form; shorter runs (decode)
 * the recurrent one. Measured on one head of 128 x 128, one thread (bl_kernel_delta_rule, AMD EPYC): the
 * chunked form is 0.85x the recurrent at 4 tokens, 1.5x at 8, 2.2x at 16, 2.9x at 64, 3.4x at 512 on the
 * AVX-512 path (AVX2: 0.9x, 1.3x, 1.9x, 2.0x, 2.1x). */
#define BL_DR_CHUNK_MIN 8

/* One head's inputs over the n tokens of one sequence, in position order. */
typedef struct bl_dr_in {
  int64_t n, hk, hv;
  const int32_t *rows; /* the tokens' rows in q, k, v and o (NULL: rows 0..n-1) */
  const float *q, *k;  /* row r's query and key (hk floats each, L2-normed; q scaled) at q + r * qk_stride */
  const float *v;      /* row r's value (hv floats) at v + r * v_stride */
  int64_t qk_stride, v_stride;
  const float *g;      /* token i of the list's log decay (<= 0): the state is scaled by e^g[i] */
  const float *beta;   /* token i of the list's beta (0..1) */
  float *o;            /* row r's output (hv floats) at o + r * o_stride */
  int64_t o_stride;
} bl_dr_in;

/* The state S (hv rows of hk floats: row i holds v element i's weights over k) taken through every token:
 * S = e^g S; S += beta (v - S k) k^T; o = S q. */
void bl_delta_rule_recurrent(const bl_kernels *kn, float *S, const bl_dr_in *in);
/* The same in chunks of BL_DR_CHUNK tokens; work: bl_delta_rule_work(hk, hv) floats, 64-byte aligned. */
void bl_delta_rule_chunked(const bl_kernels *kn, float *S, const bl_dr_in *in, float *work);
/* Floats of the chunked form's work space (a multiple of 16). */
size_t bl_delta_rule_work(int64_t hk, int64_t hv);
#endif
