// bloomery CUDA library: the mapped-memory hand-off between a card's step and the host experts'
// CPU work (issue 6, "no host round trip per layer"). A host thread (the runner) polls a mailbox in
// pinned, mapped memory; a host layer's step posts its call with one small kernel (the rows and the
// picks written straight into host memory, then a sequence number) and, after its own share of the
// layer, a second kernel spins on the runner's answer and adds (or copies back) the CPU's rows. No
// stream callback, no copy nodes, and the stream stays free for the card's share meanwhile.
// BLOOMERY_HYBRID_MAILBOX=0 keeps the stream callbacks (hybrid.cu) instead.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ctx.h"

// A runner idle this long after a step's start or its last call sleeps (woken by the next step,
// or after MB_NAP_US at the latest); a card waits this long for an answer before it gives up.
#define MB_SPIN_MS 50
#define MB_NAP_US 1000
#define MB_TIMEOUT_NS 300000000000ull
// rows past this many floats go by the copy engine (a kernel's writes to host memory are slower)
#define MB_COPY_FLOATS 65536
// the most distinct calls (host block x kind) the steps may post
#define MB_MAX_CALLS 8192
// the most picks a token the mailbox carries (more: the stream callbacks)
#define MB_MAX_PICKS 32
// the last calls' timings kept for the card's share sized online (share_tune.cu): more than a step's host layers
#define MB_RING 128

struct cu_mailbox {
  volatile uint32_t req;  // the card: the call's sequence number
  volatile uint32_t done; // the runner: the last sequence it answered
  volatile int32_t call;  // the call's index in host_calls
  volatile int32_t ntok;  // its rows
  volatile int32_t timeout;
  int32_t ints[2 * MB_MAX_PICKS + 1]; // the host's picks (and, for a partition, their count at [K])
  float flts[MB_MAX_PICKS];           // their weights
  // a one-token split's timings, slot seq % MB_RING, read once the step is synchronised: the card's
  // (written by its wait) - from the post to its wait (its own share) and its wait - and the runner's call
  volatile uint32_t t_seq[MB_RING], a_ns[MB_RING], w_ns[MB_RING];
  volatile uint32_t c_seq[MB_RING], c_ns[MB_RING];
};

struct cu_runner {
  std::thread th;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> armed_ns{0};
};

static int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- the card's side ----
// Writes rows x[0..n) into the host's buffer and the picks into the mailbox, then posts the call.
// seq: the card's counter, then (8 bytes on) the post's time for the wait's timing.
__global__ void k_mb_post(const float *x, float *hx, int n, const int32_t *si, int ni, const float *sf, int nf, cu_mailbox *mb, uint32_t *seq,
                          int call, int ntok) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) hx[i] = x[i];
  if ((int)threadIdx.x < ni) mb->ints[threadIdx.x] = si[threadIdx.x];
  if ((int)threadIdx.x < nf) mb->flts[threadIdx.x] = sf[threadIdx.x];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t s = *seq + 1;
    *seq = s;
    mb->call = call;
    mb->ntok = ntok;
    __threadfence_system();
    mb->req = s;
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    reinterpret_cast<uint64_t *>(seq)[1] = t;
  }
}

// Waits for the runner's answer to the last call (each block on its own), then x += src (add) or
// x = src, for n floats read from host memory. After one wait of the step timed out the rest do
// not spin (the step's result is an error). timed: a one-token split's wait, whose times (the card's
// share since the post, the wait) go to the mailbox's ring.
__global__ void k_mb_wait(cu_mailbox *mb, const uint32_t *seq, float *x, const float *src, int n, int add, int timed) {
  if (threadIdx.x == 0) {
    const uint32_t s = *seq;
    uint64_t t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (mb->done != s && !mb->timeout) {
      uint64_t t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      if (t - t0 > MB_TIMEOUT_NS) {
        mb->timeout = 1;
        break;
      }
    }
    if (timed) {
      uint64_t t1;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
      const uint64_t tp = reinterpret_cast<const uint64_t *>(seq)[1];
      const uint32_t i = s % MB_RING;
      const uint64_t a = t0 - tp, w = t1 - t0;
      mb->a_ns[i] = a < 0xffffffffull ? (uint32_t)a : 0xffffffffu;
      mb->w_ns[i] = w < 0xffffffffull ? (uint32_t)w : 0xffffffffu;
      mb->t_seq[i] = s; // read after the step's synchronisation: no fence of its own
    }
    __threadfence_system();
  }
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float v = __ldcv(src + i);
    x[i] = add ? x[i] + v : v;
  }
}

int64_t cu_mailbox_post(cu_ctx *c, const cu_host_call *call, int ntok, int n, const int32_t *si, int ni, const float *sf, int nf) {
  if (ni > 2 * MB_MAX_PICKS + 1 || nf > MB_MAX_PICKS) return cu_fail(BL_E_INVAL, "host experts: %d picks do not fit the mailbox", ni);
  if (n > MB_COPY_FLOATS) {
    CU_TRY(cudaMemcpyAsync(c->hy->hx, c->x, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost, c->st), "copying rows to the host");
    n = 0;
  }
  k_mb_post<<<1, 1024, 0, c->st>>>(c->x, c->hy->hx_d, n, si, ni, sf, nf, c->hy->mb_d, c->hy->mb_seq, call->idx, ntok);
  CU_TRY(cudaGetLastError(), "posting to the host experts");
  return BL_OK;
}

int64_t cu_mailbox_wait(cu_ctx *c, int n, bool add, bool timed) {
  const bool copy = !add && n > MB_COPY_FLOATS;
  const int m = copy ? 0 : n, blocks = std::min(32, std::max(1, m / 2048));
  k_mb_wait<<<blocks, 256, 0, c->st>>>(c->hy->mb_d, c->hy->mb_seq, c->x, add ? c->hy->hout_d : c->hy->hx_d, m, add ? 1 : 0, timed ? 1 : 0);
  CU_TRY(cudaGetLastError(), "waiting for the host experts");
  if (copy) CU_TRY(cudaMemcpyAsync(c->x, c->hy->hx, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, c->st), "copying rows from the host");
  return BL_OK;
}

// ---- the runner ----
static void serve(cu_ctx *c, uint32_t r) {
  cu_mailbox *mb = c->hy->mb;
  const int idx = mb->call, n = __atomic_load_n(&c->hy->n_calls_pub, __ATOMIC_ACQUIRE);
  if (idx >= 0 && idx < n) {
    cu_host_call *call = c->hy->host_calls.data()[idx];
    const int64_t t0 = now_ns();
    if (call->rows) cu_host_run(call, mb->ntok, c->hy->hb_sel, c->hy->hb_w, c->hy->hout); // a prompt layer's CPU share (cpu_share.cu)
    else cu_host_run(call, mb->ntok, call->k == 0 ? nullptr : mb->ints, mb->flts, c->hy->hout);
    const uint32_t i = r % MB_RING;
    mb->c_ns[i] = (uint32_t)std::min<int64_t>(now_ns() - t0, 0xffffffffll);
    mb->c_seq[i] = r;
  } else {
    snprintf(c->hy->host_msg, sizeof c->hy->host_msg, "host experts: internal: call %d of %d", idx, n);
    c->hy->host_err = BL_E_INVAL;
  }
  __atomic_store_n(&mb->done, r, __ATOMIC_RELEASE);
}

static void run(cu_ctx *c) {
  cu_runner *R = c->hy->runner;
  uint32_t last = c->hy->mb->done;
  int64_t idle_from = now_ns();
  while (!R->stop.load(std::memory_order_acquire)) {
    const uint32_t r = __atomic_load_n(&c->hy->mb->req, __ATOMIC_ACQUIRE);
    if (r != last) {
      serve(c, r);
      last = r;
      idle_from = now_ns();
      continue;
    }
    cu_cpu_relax();
    const int64_t t = now_ns(), a = R->armed_ns.load(std::memory_order_relaxed);
    if (t - std::max(idle_from, a) < (int64_t)MB_SPIN_MS * 1000000) continue;
    std::unique_lock<std::mutex> lk(R->mu);
    R->cv.wait_for(lk, std::chrono::microseconds(MB_NAP_US));
  }
}

// The timed splits answered since the last call (at most the ring's last MB_RING): their count, and
// the sums in microseconds of the card's share, the card's wait and the CPU's call. After a step's
// synchronisation (the card's writes to the ring are then visible).
int cu_mailbox_times(cu_ctx *c, double *a_us, double *w_us, double *c_us) {
  *a_us = *w_us = *c_us = 0.0;
  if (!c->hy->mb) return 0;
  const uint32_t done = __atomic_load_n(&c->hy->mb->done, __ATOMIC_ACQUIRE);
  uint32_t from = c->hy->mb_times_seen;
  if (done - from > MB_RING) from = done - MB_RING;
  c->hy->mb_times_seen = done;
  int n = 0;
  for (uint32_t s = from + 1; s != done + 1; s++) {
    const uint32_t i = s % MB_RING;
    if (s == 0 || c->hy->mb->t_seq[i] != s || c->hy->mb->c_seq[i] != s) continue;
    *a_us += c->hy->mb->a_ns[i] * 1e-3;
    *w_us += c->hy->mb->w_ns[i] * 1e-3;
    *c_us += c->hy->mb->c_ns[i] * 1e-3;
    n++;
  }
  return n;
}

void cu_mailbox_arm(cu_ctx *c) {
  if (!c->hy->runner) return;
  c->hy->runner->armed_ns.store(now_ns(), std::memory_order_relaxed);
  c->hy->runner->cv.notify_one();
}

// A timed-out wait leaves the host thread inside a call that later posts would overwrite: the
// context refuses every later step (cu_hybrid_begin) instead of running on stale answers.
int64_t cu_mailbox_check(cu_ctx *c) {
  if (c->hy->mb && c->hy->mb->timeout) {
    c->hy->mb_broken = 1;
    return cu_fail(BL_E_DEVICE, "host experts: the host thread did not answer within %llu s; load the model again", (unsigned long long)(MB_TIMEOUT_NS / 1000000000ull));
  }
  return BL_OK;
}

void cu_mailbox_stop(cu_ctx *c) {
  if (c->hy->runner) {
    c->hy->runner->stop.store(true, std::memory_order_release);
    c->hy->runner->cv.notify_one();
    if (c->hy->runner->th.joinable()) c->hy->runner->th.join();
    delete c->hy->runner;
  }
  if (c->hy->mb) (void)cudaFreeHost(c->hy->mb);
  if (c->hy->mb_seq) (void)cudaFree(c->hy->mb_seq);
  c->hy->runner = nullptr;
  c->hy->mb = c->hy->mb_d = nullptr;
  c->hy->mb_seq = nullptr;
  c->hy->hx_d = c->hy->hout_d = nullptr;
  c->hy->mb_broken = 0;
  (void)cudaGetLastError();
}

static int64_t start(cu_ctx *c) {
  try {
    c->hy->host_calls.reserve(MB_MAX_CALLS); // the runner reads the list while graphs are captured: no reallocation
  } catch (...) {
    return cu_fail(BL_E_NOMEM, "host experts: out of memory");
  }
  void *p = nullptr;
  CU_TRY(cudaHostAlloc(&p, sizeof(cu_mailbox), cudaHostAllocMapped | cudaHostAllocPortable), "allocating the host experts' mailbox");
  c->hy->mb = static_cast<cu_mailbox *>(p);
  memset(p, 0, sizeof(cu_mailbox));
  void *d = nullptr;
  CU_TRY(cudaHostGetDevicePointer(&d, p, 0), "mapping the host experts' mailbox");
  c->hy->mb_d = static_cast<cu_mailbox *>(d);
  CU_TRY(cudaHostGetDevicePointer(&d, c->hy->hx, 0), "mapping the host experts' rows");
  c->hy->hx_d = static_cast<float *>(d);
  CU_TRY(cudaHostGetDevicePointer(&d, c->hy->hout, 0), "mapping the host experts' rows");
  c->hy->hout_d = static_cast<float *>(d);
  CU_TRY(cudaMalloc(&c->hy->mb_seq, 2 * sizeof(uint64_t)), "allocating the host experts' mailbox"); // the counter, the post's time
  CU_TRY(cudaMemsetAsync(c->hy->mb_seq, 0, 2 * sizeof(uint64_t), c->st), "allocating the host experts' mailbox");
  c->hy->mb_times_seen = 0;
  CU_TRY(cudaStreamSynchronize(c->st), "allocating the host experts' mailbox");
  c->hy->runner = new (std::nothrow) cu_runner();
  if (!c->hy->runner) return cu_fail(BL_E_NOMEM, "host experts: out of memory");
  try {
    c->hy->runner->th = std::thread(run, c);
  } catch (...) {
    delete c->hy->runner;
    c->hy->runner = nullptr;
    return cu_fail(BL_E_NOMEM, "host experts: the host thread could not start");
  }
  return BL_OK;
}

// After hx and hout are allocated (pinned): the mailbox, its device views and the runner; on a
// failure none of it (the stream callbacks are not a fallback then: the error is returned).
int64_t cu_mailbox_start(cu_ctx *c) {
  if (c->o.mailbox == 0 || c->dm.K > MB_MAX_PICKS) return BL_OK; // bl_cuda_options.mailbox 0: stream callbacks instead
  const int64_t s = start(c);
  if (s != BL_OK) cu_mailbox_stop(c);
  return s;
}

int cu_mailbox_max_calls() { return MB_MAX_CALLS; }
