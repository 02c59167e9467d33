// bloomery CUDA library: the card's share of a token's host picks sized online (one-token steps
// beside host experts, hybrid.cu split_block). Each split's card share and CPU call run at once;
// the layer ends with the slower. The mailbox keeps each split's timings (mailbox.cu: the card's
// share from its post to its wait, the card's wait, the CPU's call); after every step they are
// summed, and once a window holds TUNE_SAMPLES the share may move by one pick. Two rules: the model
// (bl_cuda_share_decide) reads which side was later - to the card while the card waits longer than
// one more pick takes it, back to the CPU while the card's share ends later than the CPU's call by
// more than one of its picks - and names the direction to look first; the climb
// (bl_cuda_share_climb) decides on the measured layer time itself (the card's post to the end of its
// wait): it tries each neighbouring share for a window, moves to one that was faster, and looks
// again after a while. The model alone stayed at 3 of gpt-oss-120b's 4 picks where 2 was 31% faster
// (H200, --cpu-moe tg64 29.2 against 38.4 t/s: the CPU path's latency around its call hid which side
// was later). The set-up's measurement (pull.cu, `auto`) cannot see a step's contention for host
// memory; the steps' own timings do. BLOOMERY_HYBRID_CARD_SHARE=N or CU_OPT_CARD_SHARE fix the share instead.
#include "ctx.h"

#define TUNE_SAMPLES 192 // timed splits a window: 4 tokens of --cpu-moe's 48 layers, 8 of 24
#define TUNE_PICK_US 50.0 // the card's time a pick before the card computes one (2.65 MB at 55 GB/s)
#define TUNE_LAT_US 5.0   // the CPU path's latency beyond its call before the card has waited on it
#define TUNE_WAIT_US 3.0  // a wait shorter than this is the answer's trip only (the card did not wait)
#define CLIMB_MARGIN 0.97 // a neighbouring share is taken when its layer time was under this share of the current one
#define CLIMB_FIRST 8     // windows at a share before its neighbours are measured again; doubled each time they lose
#define CLIMB_MOST 64     // ... up to this many
#define CLIMB_LOOK 4      // a look at an unmeasured neighbour lasts 1/CLIMB_LOOK of a window (TUNE_SAMPLES / 4:
                          // a 64-token --cpu-moe run of gpt-oss-120b spent 4 of its 24 windows at a share 20-30% slower)

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

// The climb's next share of K picks after a window at `share` whose layers took layer_us (the card's
// post to the end of its wait, a mean): t_of[0..K-1] holds each share's last measured time (0: not
// measured; written here), st[0] the windows spent at this share since its neighbours lost to it,
// st[1] how many windows that may reach before they are measured again (0: CLIMB_FIRST), st[2] set
// to 1 where the share returned is a look (the caller's window is then 1/CLIMB_LOOK as long). A
// measured neighbour faster by CLIMB_MARGIN is taken; else an unmeasured one is tried for a look
// (hint's side before the other: the model's direction); else the share stays, and after st[1]
// windows the neighbours are forgotten (measured again), st[1] doubling up to CLIMB_MOST (a move
// keeps it: a look that lost is followed by the move back).
extern "C" int64_t bl_cuda_share_climb(int64_t K, int64_t share, double layer_us, double *t_of, int64_t *st, int64_t hint) {
  if (K < 2) return share < 0 ? 0 : share;
  if (K > CU_SHARE_MAX + 1) K = CU_SHARE_MAX + 1;
  if (share < 0) share = 0;
  if (share > K - 1) share = K - 1;
  if (st[1] <= 0) st[1] = CLIMB_FIRST;
  st[2] = 0;
  if (layer_us > 0) t_of[share] = layer_us;
  const int64_t up = share + 1, down = share - 1;
  const int64_t order[2] = {hint > share ? up : down, hint > share ? down : up};
  int64_t best = share;
  for (int64_t n : order)
    if (n >= 0 && n <= K - 1 && t_of[n] > 0 && t_of[n] < CLIMB_MARGIN * t_of[best]) best = n;
  if (best != share) {
    st[0] = 0;
    return best;
  }
  for (int64_t n : order)
    if (n >= 0 && n <= K - 1 && !(t_of[n] > 0)) {
      st[0] = 0;
      st[2] = 1;
      return n;
    }
  if (++st[0] >= st[1]) {
    st[0] = 0;
    st[1] = st[1] * 2 > CLIMB_MOST ? CLIMB_MOST : st[1] * 2;
    if (down >= 0) t_of[down] = 0;
    if (up <= K - 1) t_of[up] = 0;
  }
  return share;
}

void cu_share_tune_reset(cu_hybrid *hy) {
  hy->tune_n = 0;
  hy->tune_a = hy->tune_w = hy->tune_c = hy->tune_lat = 0.0;
  for (double &t : hy->tune_t) t = 0.0;
  hy->tune_st[0] = hy->tune_st[1] = hy->tune_st[2] = 0;
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
  if (c->hy->tune_n < (c->hy->tune_st[2] ? TUNE_SAMPLES / CLIMB_LOOK : TUNE_SAMPLES)) return BL_OK;
  const double A = c->hy->tune_a / c->hy->tune_n, W = c->hy->tune_w / c->hy->tune_n, C = c->hy->tune_c / c->hy->tune_n;
  c->hy->tune_n = 0;
  c->hy->tune_a = c->hy->tune_w = c->hy->tune_c = 0.0;
  if (W > TUNE_WAIT_US) c->hy->tune_lat = A + W - C > 0.0 ? A + W - C : 0.0; // the CPU was the later side
  const cu_blk *b = cu_first_host_block_in_ram(c);
  if (!b) return BL_OK;
  const int hint = (int)bl_cuda_share_decide(b->n_used, c->hy->card_share, A, W, C, c->hy->card_pick_us > 0 ? c->hy->card_pick_us : TUNE_PICK_US,
                                             c->hy->tune_lat > 0 ? c->hy->tune_lat : TUNE_LAT_US);
  const int next = (int)bl_cuda_share_climb(b->n_used, c->hy->card_share, A + W, c->hy->tune_t, c->hy->tune_st, hint);
  if (next != c->hy->card_share) {
    c->hy->card_share = next;
    c->hy->n_share_moves++;
    cu_drop_graphs(c); // the steps' graphs hold the old split
  }
  c->w->share_hint = c->hy->card_share + 1;
  return BL_OK;
}
