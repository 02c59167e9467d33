/* bloomery CPU library: ABI version, per-thread error messages, read-only file mapping. */
#define _GNU_SOURCE
#include "common.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local char last_error[1024];

int64_t bl_abi_version(void) { return BL_ABI_VERSION; }

const char *bl_last_error(void) { return last_error; }

int64_t bl_fail(int64_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

int64_t bl_map_file(const char *path, uint64_t *base, uint64_t *size) {
  if (!path || !base || !size) return bl_fail(BL_E_INVAL, "bl_map_file: null argument");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bl_fail(BL_E_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return bl_fail(BL_E_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (st.st_size == 0) {
    close(fd);
    return bl_fail(BL_E_IO, "%s: file is empty", path);
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return bl_fail(BL_E_IO, "%s: cannot map: %s", path, strerror(e));
  *base = (uint64_t)(uintptr_t)p;
  *size = (uint64_t)st.st_size;
  return BL_OK;
}

int64_t bl_unmap_file(uint64_t base, uint64_t size) {
  if (!base) return BL_OK;
  if (munmap((void *)(uintptr_t)base, (size_t)size) != 0)
    return bl_fail(BL_E_IO, "munmap: %s", strerror(errno));
  return BL_OK;
}

int64_t bl_copy_bytes(uint64_t src, void *dst, uint64_t len) {
  if (!src || !dst) return bl_fail(BL_E_INVAL, "bl_copy_bytes: null argument");
  memcpy(dst, (const void *)(uintptr_t)src, (size_t)len);
  return BL_OK;
}
