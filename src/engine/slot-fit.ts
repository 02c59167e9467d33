// bloomery engine: -np auto's slot count: the most slots (up to 8) whose f16 KV cache at the per-slot
// context asked for fits beside the model's resident weights and work buffers in the memory the
// engine will use (a card's free memory, or the host's usable RAM), less the margin kept free there.
// Pure arithmetic on numbers the caller gives; the log line and the refusal name every term.

/** The most slots -np auto gives. */
export const MAX_AUTO_SLOTS = 8;

/** What the KV cache's size follows from (HParams has these fields). */
export interface KvShape {
  /** layers with a KV cache (attention layers; a hybrid model's recurrent layers have none) */
  kvLayers: number;
  nHeadKv: number;
  headDim: number;
}

/** Bytes of one position of the KV cache: K and V, f16, over every attention layer. */
export function kvBytesPerToken(s: KvShape): number {
  return s.kvLayers * s.nHeadKv * s.headDim * 2 * 2;
}

export interface SlotFitInput {
  /** tokens each slot holds */
  nCtxSlot: number;
  /** kvBytesPerToken of the model */
  kvBytesPerToken: number;
  /** the model's weights resident where it runs */
  weightBytes: number;
  /** the context's buffers other than the KV cache (they do not grow with the slot count) */
  workBytes: number;
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
}

export interface SlotFit {
  /** slots that fit; 0 when not even one does */
  nSlots: number;
  /** KV bytes of one slot */
  kvSlotBytes: number;
  /** KV bytes of the chosen slots */
  kvBytes: number;
  /** what is left for the KV cache after the weights, buffers and margin (can be negative) */
  roomBytes: number;
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

function checkInput(i: SlotFitInput): void {
  const bad = (what: string, v: number) => new SlotFitError(`slot fit: ${what} must be a non-negative finite number, got ${v}`);
  if (!Number.isInteger(i.nCtxSlot) || i.nCtxSlot < 1) throw new SlotFitError(`slot fit: the per-slot context must be a positive integer, got ${i.nCtxSlot}`);
  for (const [what, v] of [["kvBytesPerToken", i.kvBytesPerToken], ["weightBytes", i.weightBytes], ["workBytes", i.workBytes], ["availableBytes", i.availableBytes], ["marginBytes", i.marginBytes]] as const)
    if (!Number.isFinite(v) || v < 0) throw bad(what, v);
  const max = i.maxSlots ?? MAX_AUTO_SLOTS;
  if (!Number.isInteger(max) || max < 1) throw new SlotFitError(`slot fit: the most slots must be a positive integer, got ${max}`);
}

/**
 * The most slots, up to `maxSlots`, with weights + work + slots x KV per slot + margin <= available.
 * Never throws for memory that is too small: nSlots is 0 and `refusal` says why.
 */
export function fitSlots(i: SlotFitInput): SlotFit {
  checkInput(i);
  const max = i.maxSlots ?? MAX_AUTO_SLOTS;
  const kvSlot = i.kvBytesPerToken * i.nCtxSlot;
  const room = i.availableBytes - i.weightBytes - i.workBytes - i.marginBytes;
  const byMemory = kvSlot > 0 ? Math.floor(room / kvSlot) : max;
  const nSlots = Math.max(0, Math.min(max, byMemory));
  const avail = `${gib(i.availableBytes)} ${i.availableText ?? "available"}`;
  const terms = `weights ${gib(i.weightBytes)}, buffers ${gib(i.workBytes)} and ${gib(i.marginBytes)} kept free`;
  if (nSlots === 0) {
    const total = i.weightBytes + i.workBytes + kvSlot + i.marginBytes;
    return {
      nSlots: 0, kvSlotBytes: kvSlot, kvBytes: 0, roomBytes: room,
      line: `-np auto: the model does not fit ${i.where} with even 1 slot of ${i.nCtxSlot} tokens`,
      refusal: `-np auto: the model does not fit ${i.where} with even 1 slot of ${i.nCtxSlot} tokens: weights ${gib(i.weightBytes)} + KV cache ${gib(kvSlot)} ` +
        `(${i.nCtxSlot} positions of ${i.kvBytesPerToken} bytes) + buffers ${gib(i.workBytes)} + ${gib(i.marginBytes)} kept free = ${gib(total)} ` +
        `> ${avail}; give a smaller context (--slot-ctx or -c)`,
    };
  }
  const why = nSlots === max ? `${max} is the most -np auto gives` : `a ${ordinal(nSlots + 1)} would need ${gib((nSlots + 1) * kvSlot - room)} more`;
  return {
    nSlots, kvSlotBytes: kvSlot, kvBytes: nSlots * kvSlot, roomBytes: room,
    line: `-np auto: ${nSlots} slot${nSlots === 1 ? "" : "s"} of ${i.nCtxSlot} tokens (KV ${gib(nSlots * kvSlot)} of ${gib(room)} left on ${i.where} ` +
      `after ${terms}, of ${avail}; ${why})`,
  };
}
