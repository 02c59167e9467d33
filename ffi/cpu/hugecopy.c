/* bloomery CPU library: bl_huge_copy - a range of a model file read into anonymous memory backed
 * by transparent huge pages (2 MiB), for the weights the CPU streams every token beside a card (the
 * host experts): a 2 MiB page is one TLB entry for the CPU and one large mapping for the card's
 * in-place reads, where the file's page cache is 512 pages of 4 KiB. Read by several threads with
 * pread (the file's pages are not left mapped twice); bl_huge_free gives it back. */
#define _GNU_SOURCE
#include "common.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_ALIGN ((size_t)2 << 20)
#define READ_CHUNK ((size_t)64 << 20)
#define MAX_READERS 16

/* Whether the kernel gives huge pages to a region that asks (THP "always" or "madvise"). */
int64_t bl_huge_available(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f) return 0;
  char buf[128] = {0};
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return strstr(buf, "[never]") ? 0 : 1;
}

struct reader {
  int fd;
  uint8_t *dst;
  uint64_t off, len;
  uint64_t next; /* shared cursor (atomic) */
  int err;       /* first errno (atomic) */
};

static void *read_worker(void *arg) {
  struct reader *r = arg;
  for (;;) {
    const uint64_t at = __atomic_fetch_add(&r->next, READ_CHUNK, __ATOMIC_RELAXED);
    if (at >= r->len) break;
    uint64_t want = r->len - at < READ_CHUNK ? r->len - at : READ_CHUNK, done = 0;
    while (done < want) {
      const ssize_t got = pread(r->fd, r->dst + at + done, (size_t)(want - done), (off_t)(r->off + at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        int zero = 0;
        (void)__atomic_compare_exchange_n(&r->err, &zero, got < 0 ? errno : EIO, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        return NULL;
      }
      done += (uint64_t)got;
    }
    if (__atomic_load_n(&r->err, __ATOMIC_RELAXED)) return NULL;
  }
  return NULL;
}

/* Reads bytes [off, off + len) of path into new anonymous memory that asks for huge pages (a
 * 2 MiB-aligned region); *out is its address. nthreads readers (1..16). The region's pages are
 * not locked; bl_huge_free(*out, len) unmaps it. */
int64_t bl_huge_copy(const char *path, uint64_t off, uint64_t len, int64_t nthreads, uint64_t *out) {
  if (!path || !out || !len) return bl_fail(BL_E_INVAL, "bl_huge_copy: empty range or null argument");
  const size_t span = ((size_t)len + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
  /* over-allocate by one huge page and trim, so the region starts on a 2 MiB boundary */
  uint8_t *raw = mmap(NULL, span + HUGE_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return bl_fail(BL_E_NOMEM, "bl_huge_copy: cannot reserve %llu bytes: %s", (unsigned long long)len, strerror(errno));
  uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1));
  if (p > raw) (void)munmap(raw, (size_t)(p - raw));
  const size_t tail = (size_t)((raw + span + HUGE_ALIGN) - (p + span));
  if (tail) (void)munmap(p + span, tail);
  (void)madvise(p, span, MADV_HUGEPAGE);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    (void)munmap(p, span);
    return bl_fail(BL_E_IO, "%s: cannot open: %s", path, strerror(e));
  }
  struct reader r = {.fd = fd, .dst = p, .off = off, .len = len, .next = 0, .err = 0};
  int nt = nthreads < 1 ? 1 : nthreads > MAX_READERS ? MAX_READERS : nthreads;
  const uint64_t chunks = (len + READ_CHUNK - 1) / READ_CHUNK;
  if ((uint64_t)nt > chunks) nt = (int)chunks;
  pthread_t th[MAX_READERS];
  int started = 0;
  for (int i = 1; i < nt; i++)
    if (pthread_create(&th[started], NULL, read_worker, &r) == 0) started++;
  read_worker(&r);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  /* the file's cached pages are not needed twice */
  (void)posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
  close(fd);
  if (r.err) {
    (void)munmap(p, span);
    return bl_fail(BL_E_IO, "%s: reading %llu bytes at %llu: %s", path, (unsigned long long)len, (unsigned long long)off, strerror(r.err));
  }
  *out = (uint64_t)(uintptr_t)p;
  return BL_OK;
}

int64_t bl_huge_free(uint64_t base, uint64_t len) {
  if (!base) return BL_OK;
  const size_t span = ((size_t)len + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
  if (munmap((void *)(uintptr_t)base, span) != 0) return bl_fail(BL_E_IO, "bl_huge_free: %s", strerror(errno));
  return BL_OK;
}

/* Bytes of the range [base, base + len) the kernel backs with huge pages now (from
 * /proc/self/smaps' AnonHugePages of the mappings inside it), or -1 when unreadable. */
int64_t bl_huge_backed(uint64_t base, uint64_t len) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int inside = 0;
  int64_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
      inside = lo >= base && hi <= base + ((len + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1));
      continue;
    }
    long v;
    if (inside && sscanf(line, "AnonHugePages: %ld kB", &v) == 1) kb += v;
  }
  fclose(f);
  return kb * 1024;
}
