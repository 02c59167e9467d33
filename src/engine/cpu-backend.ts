// bloomery engine: the CPU backend: a native context (workspace, f16 KV cache, thread pool)
// that runs the encoded model program for a batch in one bun:ffi call.
import { ptr } from "bun:ffi";
import { check, cpu, NativeError } from "../../ffi/cpu.ts";
import { ctxThreads, setCtxThreads } from "../../ffi/cpu-kernels.ts";
import { BATCH_SLOTS, Slots } from "../../ffi/layout.ts";
import { ctxParams } from "./ctx-params.ts";
import { cpuOptionSlots } from "./cpu-options.ts";
import { ModelCheckError } from "./model-check.ts";
import type { HParams } from "../models/types.ts";
import type { Backend, Batch } from "./backend.ts";
import type { EncodedProgram } from "./program.ts";

export interface CpuBackendOptions {
  nSlots: number;
  nCtxSlot: number;
  maxTokens: number;
  nThreads: number;
  /** threads for batches of more than one token (llama's -tb); default nThreads */
  nThreadsBatch?: number;
  /** the slow exact reference path (f32 activations, dequantized weights) */
  exact?: boolean;
  /** the model's file, named when the CPU refuses it (a ModelCheckError) */
  file?: string;
}

export class CpuBackend implements Backend {
  readonly name = "CPU";
  readonly hiddenRows = true;
  private ctx: bigint;
  private batchSlots = new Slots(BATCH_SLOTS);
  readonly maxTokens: number;
  readonly nSlots: number;
  readonly nCtxSlot: number;

  constructor(
    private hp: HParams,
    private prog: EncodedProgram,
    o: CpuBackendOptions,
  ) {
    const p = ctxParams(hp, o);
    // the program checked at load (every weight type has a CPU product, every option is honoured),
    // so a file the CPU cannot run is refused here, naming what, not by each request's forward pass
    const bad = new BigInt64Array(1);
    try {
      check(cpu().bl_cpu_check(ptr(p.i), ptr(prog.program.i), ptr(bad)), "the CPU cannot run it");
    } catch (e) {
      if (e instanceof NativeError) throw new ModelCheckError(o.file ?? "the model", e.message);
      throw e;
    }
    const out = new BigUint64Array(1);
    check(cpu().bl_cpu_ctx_new(ptr(p.i), ptr(cpuOptionSlots().i), ptr(out)), "creating the CPU context");
    this.ctx = out[0];
    if (o.nThreadsBatch !== undefined && o.nThreadsBatch !== o.nThreads) this.setThreads(o.nThreads, o.nThreadsBatch);
    this.maxTokens = o.maxTokens;
    this.nSlots = o.nSlots;
    this.nCtxSlot = o.nCtxSlot;
  }

  forward(b: Batch): void {
    const n = b.tokens.length;
    if (b.pos.length !== n || b.seq.length !== n) throw new Error("forward: tokens, pos and seq differ in length");
    if (b.logits.length < b.outRows.length * this.hp.nVocab) throw new Error("forward: logits buffer too small");
    const s = this.batchSlots;
    s.setInt(0, n);
    s.setInt(1, BigInt(ptr(b.tokens)));
    s.setInt(2, BigInt(ptr(b.pos)));
    s.setInt(3, BigInt(ptr(b.seq)));
    s.setInt(4, b.outRows.length);
    s.setInt(5, b.outRows.length ? BigInt(ptr(b.outRows)) : 0n);
    s.setInt(6, b.outRows.length ? BigInt(ptr(b.logits)) : 0n);
    const rows = n * this.hp.nEmbd;
    if ((b.hiddenIn && b.hiddenIn.length < rows) || (b.hiddenOut && b.hiddenOut.length < rows)) throw new Error("forward: a hidden-state buffer is smaller than the batch's rows");
    s.setInt(7, b.hiddenIn ? BigInt(ptr(b.hiddenIn)) : 0n);
    s.setInt(8, b.hiddenOut ? BigInt(ptr(b.hiddenOut)) : 0n);
    check(cpu().bl_cpu_forward(this.ctx, ptr(this.prog.program.i), ptr(s.i)), "forward");
  }

  /** Threads for one-token steps (-t) and for batches (-tb), each clamped to the usable cores. */
  setThreads(nThreads: number, nThreadsBatch: number): void {
    setCtxThreads(this.ctx, nThreads, nThreadsBatch);
  }

  /** The thread counts in use (after clamping to the usable cores). */
  threads(): { nThreads: number; nThreadsBatch: number } {
    return ctxThreads(this.ctx);
  }

  /** The routers' picks since load (bl_cpu_expert_picks), a row of the largest expert count for each EXPERTS op in program order. */
  expertPicks(): Float64Array {
    const ops = this.prog.expertOps();
    const layerOf = ops.map((i) => Number(this.prog.getInt(i, "layer")));
    const E = Math.max(1, ...ops.map((i) => Number(this.prog.getInt(i, "n_expert"))));
    const L = Math.max(0, ...layerOf) + 1;
    const raw = new BigInt64Array(Math.max(1, L * E));
    check(cpu().bl_cpu_expert_picks(this.ctx, L, E, ptr(raw), 0), "reading the expert picks");
    const out = new Float64Array(ops.length * E);
    layerOf.forEach((l, k) => {
      for (let e = 0; e < E; e++) out[k * E + e] = Number(raw[l * E + e]);
    });
    return out;
  }

  kvPosBytes(): number {
    return Number(cpu().bl_cpu_kv_pos_bytes(this.ctx));
  }

  kvSave(slot: number, n: number, dst: Uint8Array): void {
    if (dst.length < n * this.kvPosBytes()) throw new Error("kvSave: buffer too small");
    check(cpu().bl_cpu_kv_save(this.ctx, slot, n, ptr(dst)), "saving KV");
  }

  kvLoad(slot: number, n: number, src: Uint8Array): void {
    if (src.length < n * this.kvPosBytes()) throw new Error("kvLoad: buffer too small");
    check(cpu().bl_cpu_kv_load(this.ctx, slot, n, ptr(src)), "loading KV");
  }

  kvCopy(src: number, dst: number, n: number): void {
    // a recurrent model's state after a prefix cannot be taken from a longer sequence's
    if (this.rsBytes() > 0) throw new Error("kvCopy: this model keeps a recurrent state a slot; a prefix of a slot cannot be copied alone");
    check(cpu().bl_cpu_kv_copy(this.ctx, src, dst, n), "copying KV");
  }

  /** The context's workspace bytes now (bl_cpu_work_bytes: the delta-net work space grows to the largest batch taken). */
  workBytes(): number {
    return Number(cpu().bl_cpu_work_bytes(this.ctx));
  }

  rsBytes(): number {
    return Number(cpu().bl_cpu_rs_bytes(this.ctx));
  }

  rsSave(slot: number, dst: Uint8Array): void {
    if (dst.length < this.rsBytes()) throw new Error("rsSave: buffer too small");
    check(cpu().bl_cpu_rs_save(this.ctx, slot, ptr(dst)), "saving the recurrent state");
  }

  rsLoad(slot: number, src: Uint8Array): void {
    if (src.length < this.rsBytes()) throw new Error("rsLoad: buffer too small");
    check(cpu().bl_cpu_rs_load(this.ctx, slot, ptr(src)), "loading the recurrent state");
  }

  rsSnapReserve(): void {
    check(cpu().bl_cpu_rs_snap_reserve(this.ctx), "reserving the recurrent state snapshots");
  }

  rsSnapTake(slot: number): void {
    check(cpu().bl_cpu_rs_snap_take(this.ctx, slot), "taking a recurrent state snapshot");
  }

  rsSnapBack(slot: number): void {
    check(cpu().bl_cpu_rs_snap_back(this.ctx, slot), "putting a recurrent state snapshot back");
  }

  close(): void {
    if (this.ctx) cpu().bl_cpu_ctx_free(this.ctx);
    this.ctx = 0n;
  }
}
