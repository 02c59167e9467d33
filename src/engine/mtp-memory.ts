// bloomery engine: the host memory draft-mtp's drafter takes beside its target (spec-mtp.ts), as the plans count
// it (plan.ts's cpuContextBytes and planLoad at load, agent-sizes.ts's hostNeed, --fit and -np auto at start):
// the MTP layer's own tensors (the embedding and head it shares with the target are the target's), its CPU
// context (one KV cache layer a slot at the target's context; its workspace at the target's batch, cpu-memory.ts),
// and what the drafter and the scheduler keep in JavaScript (a pass's target hidden rows and the MTP layer's
// input rows, each slot's rows of its last pass, the draft steps' logits and states). Nothing when draft-mtp is off.
import type { GgufFile } from "../gguf/index.ts";
import { familyFor } from "../models/registry.ts";
import { kvBytesPerPos, type HParams } from "../models/types.ts";
import type { OpSpec } from "../models/ops.ts";
import { cpuWorkBytes, type CpuWorkShape } from "./cpu-memory.ts";

/** The MTP layer's sizes, as the memory it takes follows from them. */
export interface MtpMemory {
  /** the MTP layer as a model of one layer (ModelFamily.mtp.hparams) */
  hp: HParams;
  /** bytes of the tensors the MTP layer reads that the target's forward pass does not (its block, nextn.*) */
  weightBytes: number;
}

const F = 4;
/** The target states MtpDraft keeps of a slot's recurrent checkpoints (spec-mtp.ts's bound). */
export const MAX_PINS = 4;

function tensorsOf(specs: readonly OpSpec[]): Set<string> {
  return new Set(specs.flatMap((op) => Object.values(op.tensors as Record<string, string | undefined>).filter((n): n is string => !!n)));
}

/**
 * The MTP layer of `f` (the target's own file, or -md's: `shared` false, every tensor it reads is its own).
 * Throws, naming why, where the file has none this engine runs.
 */
export function mtpMemoryOf(f: GgufFile, shared = true): MtpMemory {
  const fam = familyFor(f), arch = f.str("general.architecture");
  if (!fam.mtp) throw new Error(`${f.path}: draft-mtp runs the MTP layer of qwen35moe, qwen3next, glm4moe and deepseek2 files; the ${arch} family's is not implemented`);
  if (!fam.mtp.has(f)) throw new Error(`${f.path}: the ${arch} file has no MTP layer (nextn_predict_layers): draft-mtp needs one (use ngram-simple or a draft model, -md)`);
  const hp = fam.mtp.hparams(f);
  const target = shared ? tensorsOf(fam.program(f, fam.hparams(f))) : new Set<string>();
  let weightBytes = 0;
  for (const n of tensorsOf(fam.mtp.program(f, hp))) if (!target.has(n)) weightBytes += f.requireTensor(n).nbytes;
  return { hp, weightBytes };
}

/** Bytes one position of a slot's MTP KV cache takes (K and V, f16, its one layer). */
export function mtpKvBytesPerPos(m: MtpMemory): number {
  return kvBytesPerPos(m.hp);
}

/**
 * Bytes a slot adds beside its MTP KV cache: the target's rows of its last pass the drafter keeps (at most a
 * batch) and those of its recurrent checkpoints (MAX_PINS), and its draft steps' logits row, state row and input row.
 */
export function mtpSlotStateBytes(m: MtpMemory, maxTokens: number): number {
  const E = m.hp.nEmbd;
  return ((maxTokens + MAX_PINS) * E + m.hp.nVocab + 2 * E) * F;
}

/**
 * Bytes that do not grow with the slot count: the MTP context's workspace at the target's batch (its logits rows
 * are the drafts' a slot, counted in mtpSlotStateBytes, not a whole batch's), the scheduler's hidden rows of a
 * pass and the MTP layer's input rows of it; with `weights`, its own tensors.
 */
export function mtpFixedBytes(m: MtpMemory, s: CpuWorkShape, weights = true): number {
  const T = s.maxTokens, E = m.hp.nEmbd;
  return (weights ? m.weightBytes : 0) + cpuWorkBytes(m.hp, s) - T * m.hp.nVocab * F + 2 * T * E * F;
}

/** Everything the drafter takes with these slots: fixed bytes, and each slot's KV cache and rows. */
export function mtpBytes(m: MtpMemory, s: CpuWorkShape, weights = true): number {
  return mtpFixedBytes(m, s, weights) + s.nSlots * (s.nCtxSlot * mtpKvBytesPerPos(m) + mtpSlotStateBytes(m, s.maxTokens));
}
