// bloomery CUDA library: the card's share of a token's host picks sized online (one-token steps
// beside host experts, hybrid.cu split_block). Each split's card share and CPU call run at once;
// the layer ends with the slower. The mailbox keeps each split's timings (mailbox.cu: the card's
// share from its post to its wait, the card's wait, the CPU's call); after every step they are
// summed, and once a window holds TUNE_SAMPLES the share moves by one pick where the means say the
// layer would end sooner: to the card while the card waits longer than one more pick takes it, back
// to the CPU while the card's share ends later than the CPU's call by more than one of its picks.
// The set-up's measurement (pull.cu, `auto`) cannot see a step's contention for host memory; the
// steps' own timings do. BLOOMERY_HYBRID_CARD_SHARE=N or CU_OPT_CARD_SHARE fix the share instead.
#include "ctx.h"

#define TUNE_SAMPLES 192 // timed splits a window: 4 tokens of --cpu-moe's 48 layers, 8 of 24
#define TUNE_PICK_US 50.0 // the card's time a pick before the card computes one (2.65 MB at 55 GB/s)
#define TUNE_LAT_US 5.0   // the CPU path's latency beyond its call before the card has waited on it
#define TUNE_WAIT_US 3.0  // a wait shorter than this is the answer's trip only (the card did not wait)

// The next share of K picks from a window's means (us): the card's share (post to wait), its wait,
// the CPU's call; pick_us the card's time a pick when its share is 0, lat_us the CPU path's latency
// beyond its call. Moves by one at most; the CPU keeps one pick (its timings steer the share).
extern "C" int64_t bl_cuda_share_decide(int64_t K, int64_t share, double card_us, double wait_us, double cpu_us, double pick_us, double lat_us) {
  if (K < 2) return share < 0 ? 0 : share;
  if (share < 0) return 0;
  if (share > K - 1) return K - 1;
  const int64_t hk = K - share;
  const double g = share > 0 ? card_us / (double)share : pick_us; // its fixed part included: a move up is conservative
  const double cp = cpu_us / (double)hk;
  if (hk > 1 && wait_us > 1.1 * g + 2.0) return share + 1;
  if (share > 0 && wait_us < TUNE_WAIT_US && card_us - (cpu_us + lat_us) > 1.1 * cp) return share - 1;
  return share;
}

int64_t cu_share_tune(cu_ctx *c) {
  if (!c->hy->share_auto || !c->hy->mb || c->hy->promote_slots > 0) return BL_OK;
  double a, w, cpu;
  const int n = cu_mailbox_times(c, &a, &w, &cpu);
  if (n == 0) return BL_OK;
  c->hy->n_share_samples += n;
  c->hy->tune_n += n;
  c->hy->tune_a += a;
  c->hy->tune_w += w;
  c->hy->tune_c += cpu;
  if (c->hy->tune_n < TUNE_SAMPLES) return BL_OK;
  const double A = c->hy->tune_a / c->hy->tune_n, W = c->hy->tune_w / c->hy->tune_n, C = c->hy->tune_c / c->hy->tune_n;
  c->hy->tune_n = 0;
  c->hy->tune_a = c->hy->tune_w = c->hy->tune_c = 0.0;
  if (W > TUNE_WAIT_US) c->hy->tune_lat = A + W - C > 0.0 ? A + W - C : 0.0; // the CPU was the later side
  const cu_blk *b = cu_first_host_block_in_ram(c);
  if (!b) return BL_OK;
  const int next = (int)bl_cuda_share_decide(b->n_used, c->hy->card_share, A, W, C, c->hy->card_pick_us > 0 ? c->hy->card_pick_us : TUNE_PICK_US,
                                             c->hy->tune_lat > 0 ? c->hy->tune_lat : TUNE_LAT_US);
  if (next != c->hy->card_share) {
    c->hy->card_share = next;
    c->hy->n_share_moves++;
    cu_drop_graphs(c); // the steps' graphs hold the old split
  }
  c->w->share_hint = c->hy->card_share + 1;
  return BL_OK;
}
