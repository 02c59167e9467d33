/* bloomery CPU library: the expert store - routed experts beyond a RAM budget read from the GGUF
 * files on demand into a fixed number of slots (one unit a slot: the gate, up and down slabs of
 * one (layer, expert)), least recently used out first, never one pinned by the running block.
 * Units are read with pread from a second descriptor opened with O_DIRECT (page-aligned extents
 * into page-aligned buffers, the slab at the same offset within its page as in the file, so the
 * kernels see the same alignment as through the mapping); where O_DIRECT is refused, normal reads
 * followed by posix_fadvise(DONTNEED), so the page cache does not fill. A background reader
 * prefetches the experts the next layer used in the previous step while a layer computes. */
#define _GNU_SOURCE
#include "expert_cache.h"
#include "common.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define XS_MAGIC 0x31305f73786c62ULL /* "blx_s01" */
#define XS_PAGE 4096
#define XS_MAX_EXPERTS 65536
enum { XS_EMPTY = 0, XS_READY = 1, XS_LOADING = 2 };
static const char *const XS_ROLE[3] = {"gate", "up", "down"};

typedef struct {
  int64_t n_expert;
  int32_t file[3];
  int64_t off[3], nb2[3], reg[3]; /* slabs of expert 0, slab bytes, region offset within a slot */
  int64_t unit_bytes;             /* payload: the three slabs */
  int32_t *slot_of;               /* [n_expert]: slot, or -1 */
  int32_t *used;                  /* the experts of the layer's last block (next step's prefetch) */
  int64_t n_used;
} xs_layer;

typedef struct {
  int32_t layer, expert, state, pins, prefetched;
  int32_t prev, next; /* LRU list, head the most recent */
  uint8_t *buf;
} xs_slot;

typedef struct {
  char *path;
  int fd, fd_direct;
  _Atomic int direct; /* O_DIRECT reads work on this file */
  int64_t size;
} xs_file;

struct bl_xstore {
  uint64_t magic;
  pthread_mutex_t mu;   /* the tables, the LRU list, the counters, the queue */
  pthread_mutex_t user; /* one MoE block at a time */
  pthread_cond_t cv_work, cv_idle;
  int64_t n_files, n_layers, n_slots, slot_bytes, total_units;
  xs_file *files;
  xs_layer *layers;
  xs_slot *slots;
  uint8_t *arena;
  size_t arena_bytes;
  int32_t head, tail;
  int64_t n_pinned; /* slots with pins > 0 */
  int64_t k_used;   /* experts a token uses: the most a layer's prefetch reads */
  int64_t st[BL_XS_STATS];
  pthread_t reader;
  int has_reader, stop, reader_busy;
  int32_t *queue; /* (layer, expert) pairs */
  int64_t q_pos, q_len, q_cap;
};

static int64_t page_up(int64_t n) { return (n + XS_PAGE - 1) / XS_PAGE * XS_PAGE; }

/* ---- the LRU list (under mu) ---- */
static void lru_unlink(bl_xstore *s, int32_t i) {
  xs_slot *x = &s->slots[i];
  if (x->prev >= 0) s->slots[x->prev].next = x->next;
  else s->head = x->next;
  if (x->next >= 0) s->slots[x->next].prev = x->prev;
  else s->tail = x->prev;
  x->prev = x->next = -1;
}

static void lru_touch(bl_xstore *s, int32_t i) {
  xs_slot *x = &s->slots[i];
  if (s->head == i) return;
  if (x->prev >= 0 || x->next >= 0) lru_unlink(s, i); /* else not in the list yet */
  x->next = s->head;
  if (s->head >= 0) s->slots[s->head].prev = i;
  s->head = i;
  if (s->tail < 0) s->tail = i;
}

/* The least recently used slot neither pinned nor being read; its unit (if any) evicted. */
static int32_t take_victim(bl_xstore *s) {
  for (int32_t i = s->tail; i >= 0; i = s->slots[i].prev) {
    xs_slot *x = &s->slots[i];
    if (x->pins > 0 || x->state == XS_LOADING) continue;
    if (x->state == XS_READY) {
      s->layers[x->layer].slot_of[x->expert] = -1;
      s->st[BL_XS_EVICTIONS]++;
    }
    x->state = XS_EMPTY;
    x->layer = x->expert = -1;
    x->prefetched = 0;
    return i;
  }
  return -1;
}

/* ---- reading a unit ---- */
static int64_t read_fail(char *err, size_t n, const xs_file *f, int64_t layer, int64_t e, int t, int64_t off, const char *why) {
  if (err && n) snprintf(err, n, "expert store: reading layer %lld expert %lld (%s slab) from %s at offset %lld: %s",
                         (long long)layer, (long long)e, XS_ROLE[t], f->path, (long long)off, why);
  return BL_E_IO;
}

/* len bytes at off into dst with normal reads (dst needs no alignment); DONTNEED after. */
static int64_t read_buffered(xs_file *f, uint8_t *dst, int64_t off, int64_t len, int64_t *got, int *eno) {
  *got = 0;
  while (*got < len) {
    ssize_t r = pread(f->fd, dst + *got, (size_t)(len - *got), (off_t)(off + *got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      *eno = errno;
      return BL_E_IO;
    }
    if (r == 0) break;
    *got += r;
  }
  (void)posix_fadvise(f->fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
  return BL_OK;
}

/* The page-aligned extent around [off, off + len) into the page-aligned dst with O_DIRECT; *got
 * counts bytes of the slab read. EINVAL from the file system: *fallback set. */
static int64_t read_direct(xs_file *f, uint8_t *dst, int64_t off, int64_t len, int64_t *got, int *eno, int *fallback) {
  const int64_t a0 = off & ~(int64_t)(XS_PAGE - 1), lead = off - a0, need = page_up(lead + len);
  int64_t done = 0;
  *got = 0;
  while (done < need) {
    ssize_t r = pread(f->fd_direct, dst + done, (size_t)(need - done), (off_t)(a0 + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      if (errno == EINVAL && done == 0) {
        *fallback = 1;
        return BL_OK;
      }
      *eno = errno;
      return BL_E_IO;
    }
    if (r == 0) break;
    done += r;
    if (r % XS_PAGE) break; /* the end of the file */
  }
  *got = done > lead ? (done - lead < len ? done - lead : len) : 0;
  return BL_OK;
}

int64_t bl_xs_read(bl_xstore *s, int64_t layer, const bl_xs_load *ld, char *err, size_t errlen) {
  const xs_layer *L = &s->layers[layer];
  uint8_t *buf = s->slots[ld->slot].buf;
  for (int t = 0; t < 3; t++) {
    xs_file *f = &s->files[L->file[t]];
    const int64_t off = L->off[t] + (int64_t)ld->expert * L->nb2[t], len = L->nb2[t];
    uint8_t *dst = buf + L->reg[t];
    int64_t got = 0;
    int eno = 0, fallback = 0;
    int64_t st = BL_OK;
    int direct = atomic_load_explicit(&f->direct, memory_order_relaxed);
    if (direct) {
      st = read_direct(f, dst, off, len, &got, &eno, &fallback);
      if (fallback) { /* this file system refuses O_DIRECT: normal reads from now on */
        atomic_store(&f->direct, 0);
        direct = 0;
      }
    }
    if (!direct) st = read_buffered(f, dst + (off & (XS_PAGE - 1)), off, len, &got, &eno);
    if (st != BL_OK) return read_fail(err, errlen, f, layer, ld->expert, t, off, strerror(eno));
    if (got < len) {
      char why[160];
      snprintf(why, sizeof why, "short read, %lld of %lld bytes (the file ends at %lld: truncated or replaced?)",
               (long long)got, (long long)len, (long long)(off + got));
      return read_fail(err, errlen, f, layer, ld->expert, t, off, why);
    }
  }
  return BL_OK;
}

/* ---- the background reader ---- */
static void *reader_main(void *arg) {
  bl_xstore *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stop && s->q_pos >= s->q_len) pthread_cond_wait(&s->cv_work, &s->mu);
    if (s->stop) break;
    const int32_t l = s->queue[2 * s->q_pos], e = s->queue[2 * s->q_pos + 1];
    s->q_pos++;
    xs_layer *L = &s->layers[l];
    if (L->slot_of[e] >= 0) continue;
    /* a unit the next layer is predicted to need: whatever LRU holds longer ago is needed later
     * in the layers' cycle (or was the step before), so evicting it costs no hit the blocks'
     * own reads would not have cost */
    const int32_t v = take_victim(s);
    if (v < 0) continue;
    xs_slot *x = &s->slots[v];
    x->layer = l;
    x->expert = e;
    x->state = XS_LOADING;
    L->slot_of[e] = v;
    lru_touch(s, v);
    s->reader_busy = 1;
    pthread_mutex_unlock(&s->mu);
    const bl_xs_load ld = {v, e};
    const int64_t st = bl_xs_read(s, l, &ld, NULL, 0);
    pthread_mutex_lock(&s->mu);
    s->reader_busy = 0;
    if (st == BL_OK) {
      x->state = XS_READY;
      x->prefetched = 1;
      s->st[BL_XS_PREFETCH_READS]++;
      s->st[BL_XS_PREFETCH_BYTES] += L->unit_bytes;
    } else { /* the block that needs it reads it again and reports the error */
      x->state = XS_EMPTY;
      x->layer = x->expert = -1;
      L->slot_of[e] = -1;
    }
    pthread_cond_broadcast(&s->cv_idle);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- what the MoE block calls ---- */
int64_t bl_xs_begin(uint64_t handle, int64_t layer, int64_t n_expert, const int64_t slab_bytes[3], bl_xstore **out) {
  bl_xstore *s = (bl_xstore *)(uintptr_t)handle;
  *out = NULL;
  if (!s) return BL_OK;
  if (s->magic != XS_MAGIC) return bl_fail(BL_E_INVAL, "moe: the block's expert store handle is not an expert store");
  if (layer < 0 || layer >= s->n_layers)
    return bl_fail(BL_E_INVAL, "moe: expert store layer %lld outside the store's %lld", (long long)layer, (long long)s->n_layers);
  const xs_layer *L = &s->layers[layer];
  if (L->n_expert != n_expert || L->nb2[0] != slab_bytes[0] || L->nb2[1] != slab_bytes[1] || L->nb2[2] != slab_bytes[2])
    return bl_fail(BL_E_INVAL, "moe: expert store layer %lld holds %lld experts of %lld+%lld+%lld bytes, the block %lld of %lld+%lld+%lld",
                   (long long)layer, (long long)L->n_expert, (long long)L->nb2[0], (long long)L->nb2[1], (long long)L->nb2[2],
                   (long long)n_expert, (long long)slab_bytes[0], (long long)slab_bytes[1], (long long)slab_bytes[2]);
  pthread_mutex_lock(&s->user);
  *out = s;
  return BL_OK;
}

void bl_xs_end(bl_xstore *s) {
  if (s) pthread_mutex_unlock(&s->user);
}

int64_t bl_xs_slots(const bl_xstore *s) { return s->n_slots; }

void bl_xs_plan(bl_xstore *s, int64_t layer, int first, int32_t *active, int64_t n_active, int64_t a0, int64_t *a1,
                const uint8_t **ptr, bl_xs_load *loads, int64_t *n_loads) {
  xs_layer *L = &s->layers[layer];
  pthread_mutex_lock(&s->mu);
  if (first) {
    memcpy(L->used, active, sizeof(int32_t) * (size_t)n_active);
    L->n_used = n_active;
    s->q_pos = s->q_len = 0; /* the reader's queue is stale now */
    while (s->reader_busy) pthread_cond_wait(&s->cv_idle, &s->mu);
    /* resident first (stable): a later round never evicts what this layer still needs */
    int64_t w = 0;
    int32_t *rest = L->used + n_active; /* scratch behind the record (used has 2 * n_expert) */
    int64_t nr = 0;
    for (int64_t i = 0; i < n_active; i++) {
      if (L->slot_of[active[i]] >= 0) active[w++] = active[i];
      else rest[nr++] = active[i];
    }
    memcpy(active + w, rest, sizeof(int32_t) * (size_t)nr);
  }
  int64_t i = a0, nl = 0;
  for (; i < n_active && i - a0 < s->n_slots; i++) {
    const int32_t e = active[i];
    int32_t v = L->slot_of[e];
    s->st[BL_XS_LOOKUPS]++;
    if (v >= 0) {
      s->st[BL_XS_HITS]++;
      if (s->slots[v].prefetched) {
        s->st[BL_XS_PREFETCH_HITS]++;
        s->slots[v].prefetched = 0;
      }
    } else {
      if ((v = take_victim(s)) < 0) break; /* cannot happen: the reader is idle, the round holds < n_slots */
      s->st[BL_XS_MISSES]++;
      xs_slot *x = &s->slots[v];
      x->layer = (int32_t)layer;
      x->expert = e;
      x->state = XS_LOADING;
      L->slot_of[e] = v;
      loads[nl++] = (bl_xs_load){v, e};
    }
    if (s->slots[v].pins++ == 0) s->n_pinned++;
    lru_touch(s, v);
    const uint8_t *buf = s->slots[v].buf;
    for (int t = 0; t < 3; t++) ptr[(int64_t)e * 3 + t] = buf + L->reg[t] + ((L->off[t] + (int64_t)e * L->nb2[t]) & (XS_PAGE - 1));
  }
  pthread_mutex_unlock(&s->mu);
  *a1 = i;
  *n_loads = nl;
}

void bl_xs_loaded(bl_xstore *s, int64_t layer, const bl_xs_load *loads, const uint8_t *ok, int64_t n_loads, int last) {
  xs_layer *L = &s->layers[layer];
  pthread_mutex_lock(&s->mu);
  for (int64_t i = 0; i < n_loads; i++) {
    xs_slot *x = &s->slots[loads[i].slot];
    if (ok[i]) {
      x->state = XS_READY;
      s->st[BL_XS_BYTES_READ] += L->unit_bytes;
    } else {
      x->state = XS_EMPTY;
      x->layer = x->expert = -1;
      if (x->pins > 0) s->n_pinned--;
      x->pins = 0;
      L->slot_of[loads[i].expert] = -1;
      s->st[BL_XS_READ_ERRORS]++;
    }
  }
  if (last && s->has_reader) {
    /* the next layer's experts of the previous step not resident, as many as the unpinned slots
     * hold and at most a token's worth (after a prompt, which of its experts the next token
     * takes is anyone's guess) */
    const int64_t room = s->n_slots - s->n_pinned < s->k_used ? s->n_slots - s->n_pinned : s->k_used;
    const int64_t nl = (layer + 1) % s->n_layers;
    const xs_layer *N = &s->layers[nl];
    int64_t q = 0;
    for (int64_t i = 0; i < N->n_used && q < room; i++)
      if (N->slot_of[N->used[i]] < 0) {
        s->queue[2 * q] = (int32_t)nl;
        s->queue[2 * q + 1] = N->used[i];
        q++;
      }
    s->q_pos = 0;
    s->q_len = q;
    if (q) pthread_cond_signal(&s->cv_work);
  }
  pthread_mutex_unlock(&s->mu);
}

void bl_xs_unpin(bl_xstore *s, int64_t layer, const int32_t *active, int64_t a0, int64_t a1) {
  const xs_layer *L = &s->layers[layer];
  pthread_mutex_lock(&s->mu);
  for (int64_t i = a0; i < a1; i++) {
    const int32_t v = L->slot_of[active[i]];
    if (v >= 0 && s->slots[v].pins > 0 && --s->slots[v].pins == 0) s->n_pinned--;
  }
  pthread_mutex_unlock(&s->mu);
}

/* ---- the ABI: creation, sizes, counters ---- */
static int64_t check_params(const bl_expert_store_params *p, int64_t *slot_bytes, int64_t *units) {
  if (!p) return bl_fail(BL_E_INVAL, "expert store: null parameters");
  if (p->n_files <= 0 || !p->files) return bl_fail(BL_E_INVAL, "expert store: no files");
  if (p->n_layers <= 0 || !p->layers) return bl_fail(BL_E_INVAL, "expert store: no layers");
  if (p->n_expert_used <= 0) return bl_fail(BL_E_INVAL, "expert store: %lld experts used per token", (long long)p->n_expert_used);
  if (p->capacity_bytes < 0) return bl_fail(BL_E_INVAL, "expert store: capacity of %lld bytes", (long long)p->capacity_bytes);
  const bl_expert_layer *ls = (const bl_expert_layer *)(uintptr_t)p->layers;
  int64_t sb = 0, u = 0;
  for (int64_t l = 0; l < p->n_layers; l++) {
    const bl_expert_layer *L = &ls[l];
    if (L->n_expert < p->n_expert_used || L->n_expert > XS_MAX_EXPERTS)
      return bl_fail(BL_E_INVAL, "expert store: layer %lld has %lld experts (%lld used per token)", (long long)l, (long long)L->n_expert,
                     (long long)p->n_expert_used);
    int64_t b = 0;
    for (int t = 0; t < 3; t++) {
      if (L->file[t] < 0 || L->file[t] >= p->n_files || L->offset[t] < 0 || L->slab_bytes[t] <= 0 || L->slab_bytes[t] > ((int64_t)1 << 40))
        return bl_fail(BL_E_INVAL, "expert store: layer %lld %s: file %lld, offset %lld, slab of %lld bytes", (long long)l, XS_ROLE[t],
                       (long long)L->file[t], (long long)L->offset[t], (long long)L->slab_bytes[t]);
      b += page_up(L->slab_bytes[t] + XS_PAGE - 1);
    }
    if (b > sb) sb = b;
    u += L->n_expert;
  }
  *slot_bytes = sb;
  *units = u;
  return BL_OK;
}

int64_t bl_expert_store_sizes(const bl_expert_store_params *p, int64_t *min_bytes, int64_t *slot_bytes, int64_t *units) {
  int64_t sb, u, s;
  if (!min_bytes || !slot_bytes || !units) return bl_fail(BL_E_INVAL, "expert store sizes: null argument");
  if ((s = check_params(p, &sb, &u))) return s;
  *slot_bytes = sb;
  *min_bytes = sb * p->n_expert_used;
  *units = u;
  return BL_OK;
}

int64_t bl_expert_store_free(uint64_t h) {
  bl_xstore *s = (bl_xstore *)(uintptr_t)h;
  if (!s) return BL_OK;
  if (s->magic != XS_MAGIC) return bl_fail(BL_E_INVAL, "expert store free: not an expert store");
  if (s->has_reader) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->reader, NULL);
  }
  s->magic = 0;
  for (int64_t i = 0; s->files && i < s->n_files; i++) {
    if (s->files[i].fd >= 0) close(s->files[i].fd);
    if (s->files[i].fd_direct >= 0) close(s->files[i].fd_direct);
    free(s->files[i].path);
  }
  for (int64_t l = 0; s->layers && l < s->n_layers; l++) {
    free(s->layers[l].slot_of);
    free(s->layers[l].used);
  }
  if (s->arena) munmap(s->arena, s->arena_bytes);
  free(s->files);
  free(s->layers);
  free(s->slots);
  free(s->queue);
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->user);
  pthread_cond_destroy(&s->cv_work);
  pthread_cond_destroy(&s->cv_idle);
  free(s);
  return BL_OK;
}

static int64_t open_files(bl_xstore *s, const bl_expert_store_params *p) {
  const char *const *paths = (const char *const *)(uintptr_t)p->files;
  for (int64_t i = 0; i < s->n_files; i++) {
    xs_file *f = &s->files[i];
    f->fd = f->fd_direct = -1;
    if (!paths[i]) return bl_fail(BL_E_INVAL, "expert store: file %lld has no path", (long long)i);
    if (!(f->path = strdup(paths[i]))) return bl_fail(BL_E_NOMEM, "expert store: out of memory");
    if ((f->fd = open(f->path, O_RDONLY | O_CLOEXEC)) < 0) return bl_fail(BL_E_IO, "expert store: cannot open %s: %s", f->path, strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) != 0) return bl_fail(BL_E_IO, "expert store: cannot stat %s: %s", f->path, strerror(errno));
    f->size = (int64_t)st.st_size;
    if (!(p->flags & BL_XS_NO_DIRECT)) f->fd_direct = open(f->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    atomic_store(&f->direct, f->fd_direct >= 0);
  }
  return BL_OK;
}

int64_t bl_expert_store_new(const bl_expert_store_params *p, uint64_t *out) {
  int64_t sb, units, st;
  if (!out) return bl_fail(BL_E_INVAL, "expert store: null output");
  *out = 0;
  if ((st = check_params(p, &sb, &units))) return st;
  const int64_t min = sb * p->n_expert_used;
  if (p->capacity_bytes < min)
    return bl_fail(BL_E_INVAL, "expert store: a capacity of %lld bytes (%.1f MiB) is below the minimum of %lld bytes (%.1f MiB): "
                   "%lld experts used per token x %lld bytes a slot (one expert's gate, up and down slabs, page-aligned)",
                   (long long)p->capacity_bytes, p->capacity_bytes / 1048576.0, (long long)min, min / 1048576.0,
                   (long long)p->n_expert_used, (long long)sb);
  bl_xstore *s = calloc(1, sizeof *s);
  if (!s) return bl_fail(BL_E_NOMEM, "expert store: out of memory");
  s->magic = XS_MAGIC;
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->user, NULL);
  pthread_cond_init(&s->cv_work, NULL);
  pthread_cond_init(&s->cv_idle, NULL);
  s->n_files = p->n_files;
  s->n_layers = p->n_layers;
  s->slot_bytes = sb;
  s->total_units = units;
  s->n_slots = p->capacity_bytes / sb < units ? p->capacity_bytes / sb : units;
  s->k_used = p->n_expert_used;
  s->head = s->tail = -1;
  s->files = calloc((size_t)s->n_files, sizeof *s->files);
  s->layers = calloc((size_t)s->n_layers, sizeof *s->layers);
  s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
  int64_t max_e = 0;
  const bl_expert_layer *ls = (const bl_expert_layer *)(uintptr_t)p->layers;
  for (int64_t l = 0; l < s->n_layers; l++) max_e = ls[l].n_expert > max_e ? ls[l].n_expert : max_e;
  s->q_cap = max_e;
  s->queue = malloc(sizeof(int32_t) * 2 * (size_t)max_e);
  if (!s->files || !s->layers || !s->slots || !s->queue) {
    bl_expert_store_free((uint64_t)(uintptr_t)s);
    return bl_fail(BL_E_NOMEM, "expert store: out of memory");
  }
  for (int64_t i = 0; i < s->n_files; i++) s->files[i].fd = s->files[i].fd_direct = -1;
  if ((st = open_files(s, p))) {
    bl_expert_store_free((uint64_t)(uintptr_t)s);
    return st;
  }
  for (int64_t l = 0; l < s->n_layers; l++) {
    const bl_expert_layer *src = &ls[l];
    xs_layer *L = &s->layers[l];
    L->n_expert = src->n_expert;
    int64_t reg = 0;
    for (int t = 0; t < 3; t++) {
      L->file[t] = (int32_t)src->file[t];
      L->off[t] = src->offset[t];
      L->nb2[t] = src->slab_bytes[t];
      L->reg[t] = reg;
      reg += page_up(src->slab_bytes[t] + XS_PAGE - 1);
      L->unit_bytes += src->slab_bytes[t];
      const xs_file *f = &s->files[L->file[t]];
      const int64_t end = src->offset[t] + src->n_expert * src->slab_bytes[t];
      if (end > f->size) {
        bl_expert_store_free((uint64_t)(uintptr_t)s);
        return bl_fail(BL_E_IO, "expert store: %s holds %lld bytes, but layer %lld's %s experts lie at [%lld, %lld) (the file is truncated)",
                       f->path, (long long)f->size, (long long)l, XS_ROLE[t],
                       (long long)src->offset[t], (long long)end);
      }
    }
    L->slot_of = malloc(sizeof(int32_t) * (size_t)L->n_expert);
    L->used = malloc(sizeof(int32_t) * 2 * (size_t)L->n_expert);
    if (!L->slot_of || !L->used) {
      bl_expert_store_free((uint64_t)(uintptr_t)s);
      return bl_fail(BL_E_NOMEM, "expert store: out of memory");
    }
    for (int64_t e = 0; e < L->n_expert; e++) L->slot_of[e] = -1;
  }
  s->arena_bytes = (size_t)(s->n_slots * sb);
  void *a = mmap(NULL, s->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) {
    s->arena = NULL;
    bl_expert_store_free((uint64_t)(uintptr_t)s);
    return bl_fail(BL_E_NOMEM, "expert store: cannot allocate %lld slots of %lld bytes (%.1f MiB)", (long long)s->n_slots, (long long)sb,
                   (double)s->n_slots * (double)sb / 1048576.0);
  }
  s->arena = a;
  for (int64_t i = 0; i < s->n_slots; i++) {
    xs_slot *x = &s->slots[i];
    x->buf = s->arena + i * sb;
    x->layer = x->expert = -1;
    x->prev = x->next = -1;
    lru_touch(s, (int32_t)i);
  }
  if (!(p->flags & BL_XS_NO_PREFETCH)) {
    if (pthread_create(&s->reader, NULL, reader_main, s) != 0) {
      bl_expert_store_free((uint64_t)(uintptr_t)s);
      return bl_fail(BL_E_NOMEM, "expert store: cannot start the prefetch thread");
    }
    s->has_reader = 1;
  }
  *out = (uint64_t)(uintptr_t)s;
  return BL_OK;
}

int64_t bl_expert_store_stats(uint64_t h, int64_t *out, int64_t n) {
  bl_xstore *s = (bl_xstore *)(uintptr_t)h;
  if (!s || s->magic != XS_MAGIC) return bl_fail(BL_E_INVAL, "expert store stats: not an expert store");
  if (!out || n < 0) return bl_fail(BL_E_INVAL, "expert store stats: null output");
  int64_t v[BL_XS_STATS];
  pthread_mutex_lock(&s->mu);
  memcpy(v, s->st, sizeof v);
  int64_t resident = 0;
  for (int64_t i = 0; i < s->n_slots; i++) resident += s->slots[i].state == XS_READY;
  pthread_mutex_unlock(&s->mu);
  v[BL_XS_SLOTS] = s->n_slots;
  v[BL_XS_SLOT_BYTES] = s->slot_bytes;
  v[BL_XS_RESIDENT] = resident;
  int64_t direct = 0;
  for (int64_t i = 0; i < s->n_files; i++) direct += atomic_load(&s->files[i].direct) != 0;
  v[BL_XS_DIRECT_FILES] = direct;
  for (int64_t i = 0; i < n; i++) out[i] = i < BL_XS_STATS ? v[i] : 0;
  return BL_OK;
}

/* The ABI's structs are 8-byte slots; TypeScript (src/engine/expert-store.ts) relies on these sizes. */
_Static_assert(sizeof(bl_expert_layer) == 10 * 8, "bl_expert_layer layout");
_Static_assert(sizeof(bl_expert_store_params) == 7 * 8, "bl_expert_store_params layout");
