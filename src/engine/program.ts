// bloomery engine: encodes a model family's op list into the native bl_program (ffi/bloomery.h):
// the bl_op array, each op's parameter struct and its tensors by role, one arena of 8-byte slots,
// with each tensor name resolved by the placement (mapped host memory).
import { ptr } from "bun:ffi";
import {
  HOST_EXPERTS_DISK, HOST_EXPERTS_RAM, OP_PARAMS, OP_ROLES, OP_SLOTS, OpKind, PARAM_FIELDS, paramKind, paramSlot, PROGRAM_SLOTS, Slots,
  TENSOR_SLOTS, type NativeTensor, type ParamStruct,
} from "../../ffi/layout.ts";
import { expertTensors, type OpSpec } from "../models/ops.ts";

export { HOST_EXPERTS_DISK, HOST_EXPERTS_RAM };

export class EncodedProgram {
  /** bl_program struct; pass ptr(program.i) */
  readonly program = new Slots(PROGRAM_SLOTS);
  /** the ops, their parameters and tensors (kept alive with the program) */
  readonly arena: Slots;
  readonly nOps: number;
  private readonly paramBase: number[] = [];
  private readonly tensorBase: number[] = [];

  constructor(readonly ops: readonly OpSpec[], resolve: (name: string) => NativeTensor, nEmbd: number, nVocab: number) {
    let slots = ops.length * OP_SLOTS;
    const layout = ops.map((op) => {
      const s = OP_PARAMS[op.kind];
      const p = slots;
      slots += s ? PARAM_FIELDS[s].length : 0;
      const t = slots;
      slots += OP_ROLES[op.kind].length * TENSOR_SLOTS;
      return { p, t };
    });
    this.arena = new Slots(Math.max(1, slots));
    this.nOps = ops.length;
    const base = BigInt(ptr(this.arena.i));
    ops.forEach((op, i) => {
      const s = OP_PARAMS[op.kind];
      const roles: readonly string[] = OP_ROLES[op.kind];
      const { p, t } = layout[i];
      this.paramBase.push(p);
      this.tensorBase.push(t);
      const o = i * OP_SLOTS;
      this.arena.setInt(o, op.kind);
      this.arena.setInt(o + 1, roles.length);
      this.arena.setInt(o + 2, s ? base + BigInt(p * 8) : 0n);
      this.arena.setInt(o + 3, base + BigInt(t * 8));
      if (s) {
        for (const [k, v] of Object.entries(op.params)) this.set(i, k, v, s);
      } else if (Object.keys(op.params).length) {
        throw new Error(`internal: op ${i} (${OpKind[op.kind]}) takes no parameters`);
      }
      const names = op.tensors as Record<string, string | undefined>;
      for (const role of Object.keys(names))
        if (!roles.includes(role)) throw new Error(`internal: op ${i} (${OpKind[op.kind]}) has no tensor role '${role}'`);
      roles.forEach((role, r) => {
        const name = names[role];
        this.arena.setTensor(t + r * TENSOR_SLOTS, name ? resolve(name) : undefined);
      });
    });
    this.program.setInt(0, ops.length);
    this.program.setInt(1, base);
    this.program.setInt(2, nEmbd);
    this.program.setInt(3, nVocab);
  }

  /** The address of op i (a host hook's run starts there). */
  opAddr(i: number): bigint {
    return BigInt(ptr(this.arena.i)) + BigInt(i * OP_SLOTS * 8);
  }

  private structOf(i: number): ParamStruct {
    const s = OP_PARAMS[this.ops[i].kind];
    if (!s) throw new Error(`internal: op ${i} has no parameters`);
    return s;
  }

  /** Sets a parameter field of op i (int or float by the struct's layout). */
  set(i: number, field: string, v: number | bigint, s: ParamStruct = this.structOf(i)): void {
    const slot = this.paramBase[i] + paramSlot(s, field);
    if (paramKind(s, field) === "f") this.arena.setFloat(slot, Number(v));
    else this.arena.setInt(slot, typeof v === "bigint" ? v : Math.trunc(v));
  }

  getInt(i: number, field: string): bigint {
    return this.arena.i[this.paramBase[i] + paramSlot(this.structOf(i), field)];
  }

  /** Field k of op i's tensor of role r (the tensor's slots: data, type, ne[4], nb1, nb2). */
  tensorSlot(i: number, role: string, k: number): bigint {
    const r = (OP_ROLES[this.ops[i].kind] as readonly string[]).indexOf(role);
    if (r < 0) throw new Error(`internal: op ${i} has no tensor role '${role}'`);
    return this.arena.i[this.tensorBase[i] + r * TENSOR_SLOTS + k];
  }

  /** Indices of the EXPERTS ops. */
  expertOps(): number[] {
    return this.ops.flatMap((op, i) => (op.kind === OpKind.Experts ? [i] : []));
  }
}

export function encodeProgram(ops: readonly OpSpec[], resolve: (name: string) => NativeTensor, nEmbd: number, nVocab: number): EncodedProgram {
  return new EncodedProgram(ops, resolve, nEmbd, nVocab);
}

/**
 * Marks the EXPERTS ops whose routed experts a card leaves to the CPU (bl_experts_params.host): those
 * `isHost` keeps in host memory (the card runs them through the CPU hook or uploads them), and those
 * `onDisk` puts on the NVMe tier (the CPU hook alone, reading them through the op's expert store:
 * cuda/hybrid/hybrid.cu). An op is marked only when all its expert tensors agree. Returns how many ops were marked.
 */
export function markHostExperts(prog: EncodedProgram, isHost: (name: string) => boolean, onDisk: (name: string) => boolean = () => false): number {
  let n = 0;
  for (const i of prog.expertOps()) {
    const names = expertTensors(prog.ops[i]);
    if (names.length === 0) continue;
    const mark = names.every(isHost) ? HOST_EXPERTS_RAM : names.every(onDisk) ? HOST_EXPERTS_DISK : 0;
    if (!mark) continue;
    prog.set(i, "host", mark);
    n++;
  }
  return n;
}

/** An EXPERTS op's mark (0, HOST_EXPERTS_RAM or HOST_EXPERTS_DISK). */
export function hostExpertsMark(prog: EncodedProgram, i: number): number {
  return prog.ops[i].kind === OpKind.Experts ? Number(prog.getInt(i, "host")) : 0;
}

/** EXPERTS ops marked by markHostExperts (with mark: those of that mark only). */
export function hostExpertOps(prog: EncodedProgram, mark?: number): number {
  let n = 0;
  for (const i of prog.expertOps()) {
    const m = hostExpertsMark(prog, i);
    if (mark === undefined ? m !== 0 : m === mark) n++;
  }
  return n;
}
