// bloomery engine: the CPU side of a card's host experts - a CPU context (workspace and thread
// pool, no KV cache) that the CUDA step calls through the CPU library's hook for the MoE blocks
// whose routed experts the card leaves to the CPU (cuda/hybrid/hybrid.cu, ffi/cpu/hook.c). The hook gets
// runs of the program's own ops, so an EXPERTS op pointed at an expert store (the disk tier beside a
// card: Model.load, expert-store.ts) has its experts read through that store, as on the CPU backend.
import { ptr } from "bun:ffi";
import { check, cpu } from "../../ffi/cpu.ts";
import { ctxParams } from "./ctx-params.ts";
import { cpuOptionSlots } from "./cpu-options.ts";
import type { HParams } from "../models/types.ts";

export class HostHook {
  /** the CPU context's handle */
  ctx: bigint;
  /** the addresses of bl_cpu_ops_rows and bl_cpu_expert_rows */
  readonly fn: bigint;
  readonly expertFn: bigint;

  constructor(hp: HParams, maxTokens: number, nThreads: number) {
    // no KV cache: one slot of one position on no layers
    const p = ctxParams(hp, { nSlots: 1, nCtxSlot: 1, maxTokens, nThreads, kvLayers: 0 });
    const out = new BigUint64Array(1);
    check(cpu().bl_cpu_ctx_new(ptr(p.i), ptr(cpuOptionSlots().i), ptr(out)), "creating the CPU context of the host experts");
    this.ctx = out[0];
    const fns = new BigUint64Array(2);
    check(cpu().bl_cpu_hook_fns(ptr(fns)), "finding the host hook");
    this.fn = fns[0];
    this.expertFn = fns[1];
  }

  /**
   * From now on its callers stay pinned to the pool's first core between calls (the card's callback
   * thread: no affinity change a call). Call it after the card's set-up ran the hook on this thread:
   * a thread left pinned to one core would make later pools on it see one usable core.
   */
  keepPin(): void {
    check(cpu().bl_cpu_ctx_keep_pin(this.ctx, 1), "pinning the host experts' caller");
  }

  close(): void {
    if (this.ctx) cpu().bl_cpu_ctx_free(this.ctx);
    this.ctx = 0n;
  }
}
