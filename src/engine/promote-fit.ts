// bloomery engine: --promote-slots auto: how many card slots each host-expert layer gets for the
// experts it calls most (cuda/hybrid/promote.cu) - the card memory left after the weights the plan put
// there, the KV cache and buffers (two staging layers among them) and a 1 GiB margin, divided by
// the host layers times one expert's gate, up and down bytes; capped at a layer's expert count, and
// 0 (off) when that is below the experts a token uses. Pure arithmetic on numbers the caller gives
// (and a reader of the host layers' expert bytes from the encoded program); the line says why.
import { HOST_EXPERTS_RAM, hostExpertsMark, type EncodedProgram } from "./program.ts";

/** --promote-slots auto as the flag stores it (a count is 0 or more). */
export const PROMOTE_AUTO = -1;

/** Card memory promotion leaves free beside everything else. */
export const PROMOTE_MARGIN = 1024 ** 3;

export interface PromoteFitInput {
  /** the card memory the plan may use: --card-budget when given, else the card's free memory before the load */
  availableBytes: number;
  /** the weights the plan put on the card */
  weightBytes: number;
  /** the context's bytes on the card: the KV cache and buffers, two staging layers among them */
  contextBytes: number;
  /** the card's free memory now, after the weights and this context (the slots cannot have more); absent: not read */
  freeNowBytes?: number;
  /** kept free (default PROMOTE_MARGIN) */
  marginBytes?: number;
  /** layers whose routed experts stay in host memory */
  hostLayers: number;
  /** one expert's gate, up and down bytes (the largest host layer's) */
  expertBytes: number;
  /** experts a layer has */
  nExpert: number;
  /** experts a token uses */
  nExpertUsed: number;
  /** the card's name, as the line says it */
  where: string;
  /** what `availableBytes` is: "--card-budget", "free" */
  availableText?: string;
}

export interface PromoteFit {
  /** slots a host layer; 0 = promotion off */
  slots: number;
  /** the card bytes those slots take (every host layer) */
  poolBytes: number;
  /** the memory left for slots after the weights, the context and the margin (can be negative) */
  roomBytes: number;
  /** one line for the log: the count and why */
  line: string;
}

export class PromoteFitError extends Error {
  override readonly name = "PromoteFitError";
}

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
const size = (n: number) => (Math.abs(n) >= GiB ? `${(n / GiB).toFixed(2)} GiB` : `${(n / MiB).toFixed(1)} MiB`);

/** A layer's slots: gate, up and down each rounded up to 256 bytes (cuda/hybrid/promote.cu lays them out so). */
const ALIGN_SLACK = 3 * 255;

function check(i: PromoteFitInput): void {
  for (const [what, v] of [["availableBytes", i.availableBytes], ["weightBytes", i.weightBytes], ["contextBytes", i.contextBytes],
    ["freeNowBytes", i.freeNowBytes ?? 0], ["marginBytes", i.marginBytes ?? 0]] as const)
    if (!Number.isFinite(v) || v < 0) throw new PromoteFitError(`promote fit: ${what} must be a non-negative finite number, got ${v}`);
  for (const [what, v] of [["hostLayers", i.hostLayers], ["nExpert", i.nExpert], ["nExpertUsed", i.nExpertUsed]] as const)
    if (!Number.isInteger(v) || v < 0) throw new PromoteFitError(`promote fit: ${what} must be a non-negative integer, got ${v}`);
  if (!Number.isFinite(i.expertBytes) || i.expertBytes <= 0) throw new PromoteFitError(`promote fit: expertBytes must be a positive number, got ${i.expertBytes}`);
  if (i.nExpertUsed > i.nExpert) throw new PromoteFitError(`promote fit: a token uses ${i.nExpertUsed} experts of ${i.nExpert}`);
}

/**
 * Slots a host layer for --promote-slots auto: (room - margin) / (host layers x one expert), where
 * room is the memory after the weights and the context, never more than the card has free now;
 * capped at the expert count; 0 when under the experts a token uses (or when no layer is on the host).
 */
export function fitPromoteSlots(i: PromoteFitInput): PromoteFit {
  check(i);
  const margin = i.marginBytes ?? PROMOTE_MARGIN;
  const afterPlan = i.availableBytes - i.weightBytes - i.contextBytes;
  const nowBinds = i.freeNowBytes !== undefined && i.freeNowBytes < afterPlan;
  const room = (nowBinds ? i.freeNowBytes! : afterPlan) - margin;
  const head = "--promote-slots auto:";
  const terms = nowBinds
    ? `the ${size(i.freeNowBytes!)} free on ${i.where} now, less ${size(margin)} kept free`
    : `${size(i.availableBytes)} ${i.availableText ?? "available"} on ${i.where} less weights ${size(i.weightBytes)}, ` +
      `KV cache and buffers ${size(i.contextBytes)} (two staging layers among them) and ${size(margin)} kept free`;
  if (i.hostLayers === 0) return { slots: 0, poolBytes: 0, roomBytes: room, line: `${head} off: every routed expert is on the card` };
  const perLayer = (n: number) => n * i.expertBytes + ALIGN_SLACK;
  const fits = room > 0 ? Math.floor((room / i.hostLayers - ALIGN_SLACK) / i.expertBytes) : 0;
  const slots = Math.max(0, Math.min(i.nExpert, fits));
  const each = `${i.hostLayers} host layer${i.hostLayers === 1 ? "" : "s"} of ${size(i.expertBytes)} experts`;
  if (slots < i.nExpertUsed || slots === 0)
    return {
      slots: 0, poolBytes: 0, roomBytes: room,
      line: `${head} off: ${size(Math.max(0, room))} left (${terms}) holds ${slots} expert${slots === 1 ? "" : "s"} for each of ${each}, ` +
        `fewer than the ${i.nExpertUsed} a token uses`,
    };
  const pool = i.hostLayers * perLayer(slots);
  const why = slots === i.nExpert ? `every one of a layer's ${i.nExpert} experts` : `one more a layer would need ${size(i.hostLayers * perLayer(slots + 1) - room)} more`;
  return {
    slots, poolBytes: pool, roomBytes: room,
    line: `${head} ${slots} card slots a layer for the most used experts (${size(pool)} for ${each}) of ${size(room)} left (${terms}); ${why}`,
  };
}

/** The host layers a program marked (markHostExperts) and one expert's gate, up and down bytes in the largest of them. */
export function hostExpertBytes(prog: EncodedProgram): { hostLayers: number; expertBytes: number } {
  const per = [0, 0, 0];
  let hostLayers = 0;
  for (const i of prog.expertOps()) {
    // promotion copies from host memory: layers whose experts are read from disk take no slots
    if (hostExpertsMark(prog, i) !== HOST_EXPERTS_RAM) continue;
    hostLayers++;
    // slot 7 of a tensor is nb2, one expert's bytes
    (["gate", "up", "down"] as const).forEach((role, k) => (per[k] = Math.max(per[k], Number(prog.tensorSlot(i, role, 7)))));
  }
  return { hostLayers, expertBytes: per[0] + per[1] + per[2] };
}
