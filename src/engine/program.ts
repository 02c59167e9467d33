// bloomery engine: encodes a model family's block list into the native bl_block array, with
// each tensor name resolved by the placement (mapped host memory now; device memory later).
import { ptr } from "bun:ffi";
import { BLOCK_SLOTS, BLOCK_TENSOR_BASE, BLOCK_TENSORS, BlockSlot, PROGRAM_SLOTS, Slots, TENSOR_SLOTS, type FloatField, type IntField, type NativeTensor } from "../../ffi/layout.ts";
import { BlockKind, type BlockSpec } from "../models/blocks.ts";

export interface EncodedProgram {
  /** bl_program struct; pass ptr(program.i) */
  program: Slots;
  /** the blocks it points to (kept alive with it) */
  blocks: Slots;
  nBlocks: number;
}

export function encodeProgram(specs: BlockSpec[], resolve: (name: string) => NativeTensor, nEmbd: number, nVocab: number): EncodedProgram {
  const blocks = new Slots(specs.length * BLOCK_SLOTS);
  specs.forEach((b, bi) => {
    const base = bi * BLOCK_SLOTS;
    blocks.setInt(base + BlockSlot.kind, b.kind);
    for (const [k, v] of Object.entries(b.ints)) blocks.setInt(base + BlockSlot[k as IntField], v as number);
    for (const [k, v] of Object.entries(b.floats)) blocks.setFloat(base + BlockSlot[k as FloatField], v as number);
    if (b.tensors.length > BLOCK_TENSORS) throw new Error(`internal: block with ${b.tensors.length} tensors`);
    b.tensors.forEach((name, role) => {
      blocks.setTensor(base + BLOCK_TENSOR_BASE + role * TENSOR_SLOTS, name ? resolve(name) : undefined);
    });
  });
  const program = new Slots(PROGRAM_SLOTS);
  program.setInt(0, specs.length);
  program.setInt(1, BigInt(ptr(blocks.i)));
  program.setInt(2, nEmbd);
  program.setInt(3, nVocab);
  return { program, blocks, nBlocks: specs.length };
}

/** The roles of a MoE block's routed-expert tensors: gate, up, down (bloomery.h BL_MOE_*). */
const EXPERT_ROLES = [2, 3, 4];

/** bl_block.host_experts: the routed experts stay in host memory, or are read from the file on demand (ffi/bloomery.h). */
export const HOST_EXPERTS_RAM = 1;
export const HOST_EXPERTS_DISK = 2;

/**
 * Marks the MoE blocks whose routed experts a card leaves to the CPU (bl_block.host_experts): those
 * `isHost` keeps in host memory (the card runs them through the CPU hook or uploads them), and
 * those `onDisk` puts on the NVMe tier (the CPU hook alone, reading them through the block's
 * expert store: cuda/hybrid.cu). A block is marked only when all its expert tensors agree. Returns
 * how many blocks were marked.
 */
export function markHostExperts(specs: BlockSpec[], prog: EncodedProgram, isHost: (name: string) => boolean,
  onDisk: (name: string) => boolean = () => false): number {
  let n = 0;
  specs.forEach((b, bi) => {
    if (b.kind !== BlockKind.Moe) return;
    const names = EXPERT_ROLES.map((r) => b.tensors[r]).filter((x): x is string => !!x);
    if (names.length === 0) return;
    const mark = names.every(isHost) ? HOST_EXPERTS_RAM : names.every(onDisk) ? HOST_EXPERTS_DISK : 0;
    if (!mark) return;
    prog.blocks.setInt(bi * BLOCK_SLOTS + BlockSlot.host_experts, mark);
    n++;
  });
  return n;
}

/** A block's mark (0, HOST_EXPERTS_RAM or HOST_EXPERTS_DISK). */
export function hostExpertsMark(prog: EncodedProgram, bi: number): number {
  return Number(prog.blocks.i[bi * BLOCK_SLOTS + BlockSlot.host_experts]);
}

/** Blocks marked by markHostExperts (with mark: those of that mark only). */
export function hostExpertBlocks(prog: EncodedProgram, mark?: number): number {
  let n = 0;
  for (let bi = 0; bi < prog.nBlocks; bi++) {
    const m = hostExpertsMark(prog, bi);
    if (mark === undefined ? m !== 0 : m === mark) n++;
  }
  return n;
}
