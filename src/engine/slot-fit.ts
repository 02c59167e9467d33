// bloomery engine: -np auto's slot count. With a per-slot context (--slot-ctx, -c N): the most slots
// (up to 8) whose f16 KV cache (and a recurrent model's state a slot, with the checkpoints kept of it)
// fits beside the model's resident weights and work buffers in the
// memory the engine will use (a card's free memory, or the host's usable RAM; there also the host
// prompt cache's --cache-ram), less the margin kept free. With the context left to the model (-c 0):
// the training context (or what fits, whichever is smaller), in slots that each hold a coding
// agent's first turn (LONG_SLOT_CTX) or the whole context if it is shorter, so one long request fits
// an idle server as in llama-server's unified KV (-np auto there: 4 slots that may each grow to all
// of -c); a short context gets up to 4 such slots where the memory has room. Pure arithmetic on
// numbers the caller gives; the log line and the refusal name every term.

/** The most slots -np auto gives. */
export const MAX_AUTO_SLOTS = 8;

/** The least a slot holds when -np auto shares the training context (or the training context, if smaller). */
export const MIN_SHARED_SLOT_CTX = 4096;

/**
 * What a slot of a shared context holds at least (or the whole context, if shorter): a coding
 * agent's first turn (Claude Code's is ~25,000 tokens of system prompt and tools, Codex's 8,000).
 */
export const LONG_SLOT_CTX = 32768;

/** Slots -np auto gives a context of at most LONG_SLOT_CTX, memory permitting (llama-server's -np auto: 4). */
export const AUTO_MIN_SLOTS = 4;

/** A shared context that had to shrink to fit is rounded down to a multiple of this (tokens). */
export const SHARED_CTX_ALIGN = 256;

/** What the KV cache's size follows from (HParams has these fields). */
export interface KvShape {
  /** layers with a KV cache (attention layers; a hybrid model's recurrent layers have none) */
  kvLayers: number;
  nHeadKv: number;
  headDim: number;
  /** V's width when not K's (HParams.kvVDim: 0 for latent attention, whose values live in K) */
  kvVDim?: number;
}

/** Bytes of one position of the KV cache: K and V, f16, over every attention layer. */
export function kvBytesPerToken(s: KvShape): number {
  const k = s.nHeadKv * s.headDim;
  return s.kvLayers * (k + (s.kvVDim ?? k)) * 2;
}

/** The memory -np auto counts in: what is there and what is already spoken for. */
export interface SlotRoomInput {
  /** kvBytesPerToken of the model */
  kvBytesPerToken: number;
  /**
   * bytes a slot holds beside its KV cache that do not grow with its context: a recurrent model's state (every
   * linear-attention layer's conv inputs and delta-rule state) and the checkpoints the slot keeps of it for the
   * prompt cache (recurrent-state.ts's recurrentSlotBytes); 0 or absent: none
   */
  stateBytesPerSlot?: number;
  /** the model's weights resident where it runs */
  weightBytes: number;
  /** the context's buffers other than the KV cache (they do not grow with the slot count) */
  workBytes: number;
  /**
   * the host prompt cache's budget (--cache-ram) when the KV cache lives in host RAM (the CPU
   * backend); 0 or absent elsewhere. It yields only when not even one slot would fit beside it.
   */
  cacheBytes?: number;
  /** the memory there: the card's free bytes, or the host's usable RAM (or a budget that stands for it) */
  availableBytes: number;
  /** kept free beside everything else */
  marginBytes: number;
  /** where, as the line says it: "NVIDIA H200", "host RAM" */
  where: string;
  /** what `availableBytes` is, as the line says it: "free", "usable", "--host-budget" */
  availableText?: string;
  /** the most slots (default MAX_AUTO_SLOTS) */
  maxSlots?: number;
  /** why `maxSlots` is the most, when the caller set it below MAX_AUTO_SLOTS (the line says it) */
  maxSlotsText?: string;
}

export interface SlotFitInput extends SlotRoomInput {
  /** tokens each slot holds */
  nCtxSlot: number;
}

export interface SlotFit {
  /** slots that fit; 0 when not even one does */
  nSlots: number;
  /** tokens each slot holds */
  nCtxSlot: number;
  /** KV bytes of one slot */
  kvSlotBytes: number;
  /** KV bytes of the chosen slots */
  kvBytes: number;
  /** the chosen slots' recurrent states (stateBytesPerSlot each) */
  stateBytes: number;
  /** what is left for the KV cache after the weights, buffers, prompt cache and margin (can be negative) */
  roomBytes: number;
  /** the prompt cache does not fit beside even one slot: it gets what is left */
  cacheSqueezed: boolean;
  /** one line for the log: the count and why */
  line: string;
  /** set when not even one slot fits: every term of the sum, and what to do */
  refusal?: string;
}

export class SlotFitError extends Error {
  override readonly name = "SlotFitError";
}

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
/** GiB with two decimals; MiB under a GiB (a small model's slots are a few MiB). */
export function bytesText(n: number): string {
  return Math.abs(n) >= GiB ? `${(n / GiB).toFixed(2)} GiB` : `${(n / MiB).toFixed(1)} MiB`;
}
const gib = bytesText;

function ordinal(n: number): string {
  const t = n % 100;
  if (t >= 11 && t <= 13) return `${n}th`;
  return `${n}${["th", "st", "nd", "rd"][n % 10] ?? "th"}`;
}

/** "a 4th", "an 8th", "an 11th" */
function aNth(n: number): string {
  const o = ordinal(n);
  return `${/^(8|11th|18th)/.test(o) ? "an" : "a"} ${o}`;
}

function positiveInt(what: string, v: number): void {
  if (!Number.isInteger(v) || v < 1) throw new SlotFitError(`slot fit: ${what} must be a positive integer, got ${v}`);
}

function checkRoom(i: SlotRoomInput): void {
  const bad = (what: string, v: number) => new SlotFitError(`slot fit: ${what} must be a non-negative finite number, got ${v}`);
  for (const [what, v] of [["kvBytesPerToken", i.kvBytesPerToken], ["stateBytesPerSlot", i.stateBytesPerSlot ?? 0], ["weightBytes", i.weightBytes], ["workBytes", i.workBytes],
    ["cacheBytes", i.cacheBytes ?? 0], ["availableBytes", i.availableBytes], ["marginBytes", i.marginBytes]] as const)
    if (!Number.isFinite(v) || v < 0) throw bad(what, v);
  positiveInt("the most slots", i.maxSlots ?? MAX_AUTO_SLOTS);
}

/** The room's arithmetic both counts share. */
function roomOf(i: SlotRoomInput): { max: number; cache: number; room: number; avail: string; terms: (withCache: boolean) => string } {
  const cache = i.cacheBytes ?? 0;
  return {
    max: i.maxSlots ?? MAX_AUTO_SLOTS,
    cache,
    // left for the KV cache and the prompt cache
    room: i.availableBytes - i.weightBytes - i.workBytes - i.marginBytes,
    avail: `${gib(i.availableBytes)} ${i.availableText ?? "available"}`,
    terms: (withCache) => `weights ${gib(i.weightBytes)}, buffers ${gib(i.workBytes)}${withCache && cache > 0 ? `, prompt cache ${gib(cache)} (--cache-ram)` : ""} and ${gib(i.marginBytes)} kept free`,
  };
}

/**
 * "KV X of Y left on WHERE after ..., of Z" (a recurrent model's: "KV and recurrent states X (K + S) of Y ..."):
 * with the prompt cache squeezed, the room before it.
 */
function roomText(i: SlotRoomInput, kv: number, states: number, room: number, cache: number, squeezed: boolean, r: ReturnType<typeof roomOf>): string {
  const left = squeezed ? room : room - cache;
  const what = states > 0 ? `KV and recurrent states ${gib(kv + states)} (${gib(kv)} + ${gib(states)})` : `KV ${gib(kv)}`;
  return `${what} of ${gib(Math.max(0, left))} left on ${i.where} after ${r.terms(!squeezed)}, of ${r.avail}`;
}

/** The refusal when one slot of `nCtxSlot` tokens does not fit even without the prompt cache. */
function refusalOf(i: SlotRoomInput, nCtxSlot: number, kvSlot: number, avail: string, fix: string): string {
  const state = i.stateBytesPerSlot ?? 0;
  const total = i.weightBytes + i.workBytes + kvSlot + state + i.marginBytes;
  return `-np auto: the model does not fit ${i.where} with even 1 slot of ${nCtxSlot} tokens: weights ${gib(i.weightBytes)} + KV cache ${gib(kvSlot)} ` +
    `(${nCtxSlot} positions of ${i.kvBytesPerToken} bytes)${state > 0 ? ` + recurrent state ${gib(state)} (a slot's, with the checkpoints it keeps)` : ""} ` +
    `+ buffers ${gib(i.workBytes)} + ${gib(i.marginBytes)} kept free = ${gib(total)} > ${avail}; ${fix}`;
}

const SQUEEZED = (cache: number) => `the prompt cache's ${gib(cache)} (--cache-ram) does not fit beside even 1 slot and gets what is left; lower --cache-ram`;

/**
 * The most slots, up to `maxSlots`, with weights + work + slots x KV per slot + prompt cache +
 * margin <= available. The prompt cache yields when not even one slot fits beside it. Never throws
 * for memory that is too small: nSlots is 0 and `refusal` says why.
 */
export function fitSlots(i: SlotFitInput): SlotFit {
  positiveInt("the per-slot context", i.nCtxSlot);
  checkRoom(i);
  const r = roomOf(i);
  const { max, cache, room, avail } = r;
  const kvSlot = i.kvBytesPerToken * i.nCtxSlot, state = i.stateBytesPerSlot ?? 0, slot = kvSlot + state;
  const kvRoom = room - cache;
  const byMemory = slot > 0 ? Math.floor(kvRoom / slot) : max;
  let nSlots = Math.max(0, Math.min(max, byMemory));
  const cacheSqueezed = nSlots === 0 && cache > 0 && room >= slot;
  if (cacheSqueezed) nSlots = 1;
  if (nSlots === 0) {
    const line = `-np auto: the model does not fit ${i.where} with even 1 slot of ${i.nCtxSlot} tokens`;
    return {
      nSlots: 0, nCtxSlot: i.nCtxSlot, kvSlotBytes: kvSlot, kvBytes: 0, stateBytes: 0, roomBytes: kvRoom, cacheSqueezed: false, line,
      refusal: refusalOf(i, i.nCtxSlot, kvSlot, avail, "give a smaller context (--slot-ctx or -c)"),
    };
  }
  const why = cacheSqueezed ? SQUEEZED(cache)
    : nSlots === max ? (i.maxSlotsText ?? `${max} is the most -np auto gives`)
    : `${aNth(nSlots + 1)} would need ${gib((nSlots + 1) * slot - kvRoom)} more`;
  return {
    nSlots, nCtxSlot: i.nCtxSlot, kvSlotBytes: kvSlot, kvBytes: nSlots * kvSlot, stateBytes: nSlots * state, roomBytes: kvRoom, cacheSqueezed,
    line: `-np auto: ${nSlots} slot${nSlots === 1 ? "" : "s"} of ${i.nCtxSlot} tokens (${roomText(i, nSlots * kvSlot, nSlots * state, room, cache, cacheSqueezed, r)}; ${why})`,
  };
}

export interface SharedFitInput extends SlotRoomInput {
  /** the context the slots share: the model's training context */
  nCtxTotal: number;
  /** the least a slot holds (MIN_SHARED_SLOT_CTX, or the training context if smaller) */
  minSlotCtx: number;
  /** --fit: a total that does not fit shrinks to what does (else it is refused) */
  shrink: boolean;
  /** a cap on the shared tokens below what the memory allows, and why (the line says it) */
  capTokens?: number;
  capText?: string;
}

export interface SharedFit extends SlotFit {
  /** the tokens of all slots: nSlots x nCtxSlot (more than the shared context when each slot holds all of it) */
  nCtxTotal: number;
  /** the training context did not fit (or the cap bound): the total is smaller */
  shrunk: boolean;
}

/**
 * How -np auto lays out a shared context of `total` tokens: slots of at least `target` =
 * LONG_SLOT_CTX (or a slot's share of `max`, or the least a request needs, whichever is more;
 * never more than the total) that split the total between them; a total of one such slot gets up
 * to AUTO_MIN_SLOTS slots that each hold all of it, as far as `roomTokens` (the positions the
 * memory has room for) goes. `whole`: the slots each hold the total (more than one slot's share).
 * A `shrunk` total is split in multiples of SHARED_CTX_ALIGN.
 */
export function sharedLayout(total: number, roomTokens: number, minSlotCtx: number, max: number, shrunk = false): { nSlots: number; nCtxSlot: number; target: number; whole: boolean } {
  const target = Math.min(total, Math.max(LONG_SLOT_CTX, minSlotCtx, Math.ceil(total / max)));
  const within = Math.max(1, Math.min(max, Math.floor(total / target)));
  if (within === 1) {
    const n = Math.max(1, Math.min(max, AUTO_MIN_SLOTS, Math.floor(roomTokens / total)));
    return { nSlots: n, nCtxSlot: total, target, whole: true };
  }
  let nCtxSlot = Math.floor(total / within);
  if (shrunk) {
    const aligned = Math.floor(nCtxSlot / SHARED_CTX_ALIGN) * SHARED_CTX_ALIGN;
    if (aligned >= minSlotCtx) nCtxSlot = aligned;
  }
  return { nSlots: within, nCtxSlot, target, whole: false };
}

/**
 * -np auto with the context left to the model (-c 0): the training context, or what fits if less
 * (with `shrink`), laid out by sharedLayout: slots of a long request's length sharing it, or up to
 * AUTO_MIN_SLOTS slots that each hold all of a short one. A total under `minSlotCtx` is refused.
 * Never throws for memory that is too small: nSlots is 0 and `refusal` says why.
 */
export function fitSharedContext(i: SharedFitInput): SharedFit {
  positiveInt("the shared context", i.nCtxTotal);
  positiveInt("the least context a slot holds", i.minSlotCtx);
  if (i.minSlotCtx > i.nCtxTotal) throw new SlotFitError(`slot fit: the least context a slot holds (${i.minSlotCtx}) is more than the shared context (${i.nCtxTotal})`);
  if (i.capTokens !== undefined) positiveInt("the cap on the shared context", i.capTokens);
  checkRoom(i);
  const r = roomOf(i);
  const { max, cache, room, avail } = r;
  const kvTok = i.kvBytesPerToken, state = i.stateBytesPerSlot ?? 0;
  const tokensIn = (bytes: number) => (kvTok > 0 ? Math.floor(Math.max(0, bytes) / kvTok) : Number.MAX_SAFE_INTEGER);
  const cap = Math.min(i.nCtxTotal, i.capTokens ?? i.nCtxTotal);
  const kvRoom = room - cache;
  // the prompt cache yields to one slot of the least a request needs (or the whole context, without --fit)
  const least = i.shrink ? i.minSlotCtx : cap;
  const fail = (nCtx: number, fix: string, shrunk: boolean): SharedFit => ({
    nSlots: 0, nCtxSlot: nCtx, nCtxTotal: 0, shrunk, kvSlotBytes: nCtx * kvTok, kvBytes: 0, stateBytes: 0, roomBytes: kvRoom, cacheSqueezed: false,
    line: `-np auto: the model does not fit ${i.where} with even 1 slot of ${nCtx} tokens`,
    refusal: refusalOf(i, nCtx, nCtx * kvTok, avail, fix),
  });
  // the bytes a total of t tokens takes: their KV and the states of the slots it is laid out in (one, when they
  // each hold all of it: how many such slots fit is counted below); it grows with t
  const bytesAt = (t: number) => {
    const l = sharedLayout(t, t, i.minSlotCtx, max);
    return t * kvTok + (l.whole ? 1 : l.nSlots) * state;
  };
  /** the largest total in [lo, hi] whose bytes fit `bytes` (lo's do) */
  const largestFitting = (lo: number, hi: number, bytes: number) => {
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (bytesAt(mid) <= bytes) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  // the largest total that fits (with no state: the room's positions); below the least, the prompt cache yields
  // to one slot of the least
  const lo = Math.min(least, cap);
  let total = state === 0 ? Math.min(cap, tokensIn(kvRoom)) : bytesAt(lo) <= kvRoom ? largestFitting(lo, cap, kvRoom) : lo - 1;
  let cacheSqueezed = false;
  if (total < least && cache > 0 && least * kvTok + state <= room) {
    total = least;
    cacheSqueezed = true;
  }
  const shrunk = total < i.nCtxTotal;
  if (total < least)
    return i.shrink ? fail(i.minSlotCtx, "give a smaller context (-c or --slot-ctx)", shrunk) : fail(cap, "give a smaller context (-c), or leave -fit on", shrunk);
  if (shrunk && !cacheSqueezed) {
    const aligned = Math.floor(total / SHARED_CTX_ALIGN) * SHARED_CTX_ALIGN;
    if (aligned >= i.minSlotCtx) total = aligned;
  }
  // slots that each hold the whole total: as many as the room has for their KV and states (in positions of the total)
  const perWhole = total * kvTok + state;
  const wholeSlots = perWhole > 0 ? Math.floor(Math.max(0, kvRoom) / perWhole) : Number.MAX_SAFE_INTEGER;
  const roomTokens = Math.min(state > 0 ? Math.min(wholeSlots * total, Number.MAX_SAFE_INTEGER) : tokensIn(kvRoom), i.capTokens ?? Number.MAX_SAFE_INTEGER);
  const lay = sharedLayout(total, roomTokens, i.minSlotCtx, max, shrunk && !cacheSqueezed);
  const { nSlots, nCtxSlot, whole } = lay;
  const kvSlot = nCtxSlot * kvTok;
  const capText = i.capText ?? `at ${i.capTokens}`;
  const why = cacheSqueezed ? SQUEEZED(cache)
    : nSlots === max ? (i.maxSlotsText ?? `${max} is the most -np auto gives`)
    : whole && nSlots === AUTO_MIN_SLOTS ? `${AUTO_MIN_SLOTS} is the most -np auto gives a context this short`
    : whole && i.capTokens !== undefined && (nSlots + 1) * nCtxSlot > i.capTokens ? `${aNth(nSlots + 1)} would pass that cap`
    : whole ? `${aNth(nSlots + 1)} would need ${gib((nSlots + 1) * (kvSlot + state) - kvRoom)} more`
    : `${aNth(nSlots + 1)} would leave a slot under ${lay.target} tokens`;
  const capped = cap < i.nCtxTotal && bytesAt(cap) <= kvRoom && !cacheSqueezed;
  const less = capped ? `the training context of ${i.nCtxTotal} is capped: ${capText}` : `the training context of ${i.nCtxTotal} does not fit`;
  const shareText = whole
    ? `${nSlots === 1 ? "holding" : "each holding"} ${shrunk ? `${nCtxSlot} (${less})` : "the whole training context"}`
    : !shrunk ? `share the training context of ${i.nCtxTotal}` : `share ${nSlots * nCtxSlot} (${less})`;
  return {
    nSlots, nCtxSlot, nCtxTotal: nSlots * nCtxSlot, shrunk, kvSlotBytes: kvSlot, kvBytes: nSlots * kvSlot, stateBytes: nSlots * state, roomBytes: kvRoom, cacheSqueezed,
    line: `-np auto: ${nSlots} slot${nSlots === 1 ? "" : "s"} of ${nCtxSlot} tokens ${shareText} (${roomText(i, nSlots * kvSlot, nSlots * state, room, cache, cacheSqueezed, r)}; ` +
      `${whole ? "" : `each slot holds at least ${lay.target}; `}${why})`,
  };
}
