/* bloomery CPU library: the expert store's internal interface for the MoE block (moe.c). The
 * store (expert_cache.c) keeps the routed experts of a model in a fixed number of RAM slots,
 * one slot a unit (the gate, up and down slabs of one (layer, expert)), least recently used
 * out first, filled with pread from the GGUF files; a background reader prefetches the experts
 * the next layer used in the previous step. The ABI half is in bloomery.h (bl_expert_store_*). */
#ifndef BL_EXPERT_CACHE_H
#define BL_EXPERT_CACHE_H
#include "../bloomery.h"
#include <stddef.h>
#include <stdint.h>

typedef struct bl_xstore bl_xstore;

/* A unit the pool loads: expert `expert` of the block's layer into slot `slot`. */
typedef struct {
  int32_t slot, expert;
} bl_xs_load;

/* The store behind a block's expert_store handle (NULL when 0); a status naming what is wrong
 * when the handle is not a store or the layer or tensor sizes do not match the store's. Takes the
 * store for the caller until bl_xs_end (one MoE block at a time). */
int64_t bl_xs_begin(uint64_t handle, int64_t layer, int64_t n_expert, const int64_t slab_bytes[3], bl_xstore **out);
void bl_xs_end(bl_xstore *s);
/* Slots of the store (a round pins at most this many experts). */
int64_t bl_xs_slots(const bl_xstore *s);

/* One round of a layer's experts: with first set, records the active experts (for the next
 * step's prefetch), waits for the background reader to finish its unit and drops its queue, and
 * reorders active[] resident-first. Pins active[a0..*a1) (as many as the slots hold), sets
 * ptr[e * 3 + t] to the slabs (t: gate, up, down) of each, and lists the units to load. */
void bl_xs_plan(bl_xstore *s, int64_t layer, int first, int32_t *active, int64_t n_active, int64_t a0, int64_t *a1,
                const uint8_t **ptr, bl_xs_load *loads, int64_t *n_loads);
/* Read one unit into its slot (any thread, no lock); on failure a message naming the file and
 * offset in err and a status. */
int64_t bl_xs_read(bl_xstore *s, int64_t layer, const bl_xs_load *ld, char *err, size_t errlen);
/* After the round's reads: ok[i] says whether loads[i] was read; marks them resident (or empty),
 * counts them; with last set, queues the next layer's prefetch. */
void bl_xs_loaded(bl_xstore *s, int64_t layer, const bl_xs_load *loads, const uint8_t *ok, int64_t n_loads, int last);
/* Unpin active[a0..a1) of the layer. */
void bl_xs_unpin(bl_xstore *s, int64_t layer, const int32_t *active, int64_t a0, int64_t a1);
#endif
