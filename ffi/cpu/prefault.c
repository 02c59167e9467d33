/* bloomery CPU library: bl_prefault - map every page of a read-only file mapping into the page
 * tables up front (as llama.cpp's MAP_POPULATE does), so that the first tokens do not pay a page
 * fault per 4 KiB of weights. */
#define _GNU_SOURCE
#include "common.h"
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

int64_t bl_prefault(uint64_t base, uint64_t size) {
  if (!base || !size) return bl_fail(BL_E_INVAL, "bl_prefault: empty range");
  const long page = sysconf(_SC_PAGESIZE);
  const uintptr_t lo = (uintptr_t)base & ~(uintptr_t)(page - 1);
  const size_t len = (size_t)((uintptr_t)base + size - lo);
  (void)madvise((void *)lo, len, MADV_WILLNEED);
  if (madvise((void *)lo, len, MADV_POPULATE_READ) == 0) return BL_OK;
  if (errno != EINVAL) return bl_fail(BL_E_IO, "bl_prefault: %s", strerror(errno));
  /* kernels before 5.14: touch one byte per page */
  volatile const uint8_t *p = (const uint8_t *)lo;
  uint8_t sink = 0;
  for (size_t off = 0; off < len; off += (size_t)page) sink ^= p[off];
  (void)sink;
  return BL_OK;
}
