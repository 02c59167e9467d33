// bloomery CUDA library: the host side of the kernel timeline tracer (cuda/trace.cuh; only in a
// -DBL_TRACE build): with a trace file (bl_cuda_options.trace_path), a record buffer on the card installed in
// every translation unit at the first context, and its records appended to the file (then
// cleared) each time a context is freed. Without BL_TRACE both entry points do nothing.
#include <stdio.h>
#include <stdlib.h>

#include "common.cuh"
#include "internal.h"

#ifdef BL_TRACE
#include <vector>

static std::vector<void (*)(tr_rec *, unsigned *, unsigned)> &tr_setters() {
  static std::vector<void (*)(tr_rec *, unsigned *, unsigned)> v;
  return v;
}
int cu_trace_register(void (*set)(tr_rec *, unsigned *, unsigned)) {
  tr_setters().push_back(set);
  return 0;
}
static tr_rec *tr_buf = nullptr;
static unsigned *tr_n = nullptr;
static const unsigned tr_cap = 1u << 23; // 8M records (256 MiB)

static char tr_path[1024]; // the file of the first context that named one

void cu_trace_setup(const char *path) {
  if (!path || !path[0] || tr_buf) return;
  snprintf(tr_path, sizeof tr_path, "%s", path);
  path = tr_path;
  if (cudaMalloc(&tr_buf, (size_t)tr_cap * sizeof(tr_rec)) != cudaSuccess || cudaMalloc(&tr_n, sizeof(unsigned)) != cudaSuccess) {
    fprintf(stderr, "bloomery: trace: no memory for the record buffer\n");
    tr_buf = nullptr;
    return;
  }
  cudaMemset(tr_n, 0, sizeof(unsigned));
  for (auto set : tr_setters()) set(tr_buf, tr_n, tr_cap);
  fprintf(stderr, "bloomery: trace: recording kernel timelines to %s (%zu units)\n", path, tr_setters().size());
}

void cu_trace_dump() {
  const char *path = tr_path;
  if (!tr_buf || !path[0]) return;
  unsigned n = 0;
  cudaDeviceSynchronize();
  cudaMemcpy(&n, tr_n, sizeof n, cudaMemcpyDeviceToHost);
  if (n > tr_cap) n = tr_cap;
  std::vector<tr_rec> h(n);
  if (n) cudaMemcpy(h.data(), tr_buf, (size_t)n * sizeof(tr_rec), cudaMemcpyDeviceToHost);
  cudaMemset(tr_n, 0, sizeof(unsigned));
  FILE *f = fopen(path, "ab");
  if (!f) return;
  if (n) fwrite(h.data(), sizeof(tr_rec), n, f);
  fclose(f);
  fprintf(stderr, "bloomery: trace: %u records appended to %s\n", n, path);
}
#else
void cu_trace_setup(const char *) {}
void cu_trace_dump() {}
#endif
