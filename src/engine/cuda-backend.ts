// bloomery engine: the CUDA backend - the model's weights uploaded once to a card (CudaWeights,
// shared by the contexts made from them) and a context (f16 KV cache, work buffers, captured
// decode graphs) that runs the encoded model program for a batch in one bun:ffi call.
import { ptr } from "bun:ffi";
import { checkCuda, cuda, cudaLastError } from "../../ffi/cuda.ts";
import { BATCH_SLOTS, Slots } from "../../ffi/layout.ts";
import { FOLDER_ONLY_TYPES, FOLDER_TYPE_WORDS } from "../gguf/index.ts";
import { ctxParams } from "./ctx-params.ts";
import { cudaOptionSlots, cudaOptionsFromEnv, type CudaOptions } from "./cuda-options.ts";
import type { HParams } from "../models/types.ts";
import type { Backend, Batch, SavedKv } from "./backend.ts";
import { HostHook } from "./host-hook.ts";
import { hostExpertOps, type EncodedProgram } from "./program.ts";

export interface CudaBackendOptions {
  nSlots: number;
  nCtxSlot: number;
  maxTokens: number;
  /** replay decode steps as CUDA graphs (default true) */
  graphs?: boolean;
  /**
   * Batch-invariant mode: every batch of at most CUDA_INVARIANT_TOKENS tokens through the general
   * decode kernels, which compute each token alone, so a sequence's logits are the same bits alone
   * or batched with others (slower: no one-token fast kernels, no tensor-core prefill).
   */
  batchInvariant?: boolean;
  /** CPU threads of the host experts (blocks whose routed experts stay in host memory) */
  hostThreads?: number;
  /** the CUDA library's options over the environment's knobs (src/engine/cuda-options.ts) */
  cuda?: Partial<CudaOptions>;
}

/** A context's bl_cuda_options: the defaults, the environment's knobs, then the backend's options (graphs, batch invariance, cuda). */
export function backendCudaOptions(o: Pick<CudaBackendOptions, "graphs" | "batchInvariant" | "cuda">, env: Record<string, string | undefined> = process.env): CudaOptions {
  const c: CudaOptions = { ...cudaOptionsFromEnv(env), ...o.cuda };
  if (o.graphs === false) c.graphs = 0;
  if (o.batchInvariant) c.invariant = 1;
  return c;
}

/** What the host experts beside the card did (bl_cuda_host_stats). */
export interface HostExpertStats {
  /** MoE blocks whose experts stay in host memory */
  blocks: number;
  /** block runs on the CPU (the hook), block runs from experts uploaded for a batch */
  hookRuns: number;
  uploadRuns: number;
  uploadBytes: number;
  hookUs: number;
  /** batches of at least this many tokens upload (the cost model) */
  uploadMin: number;
  /** PCIe host-to-card bytes a second, measured */
  pcieBytesPerSec: number;
  /** the host experts' pages are pinned (uploads without a staging copy) */
  pinned: boolean;
  /** the hook's measured microseconds a (token, expert) pair */
  pairUs: number;
  /** of a token's picks in a host layer, how many the card computes (one-token steps) */
  cardShare: number;
  /** the card copies its share's experts into card memory first (cuda/hybrid/pull.cu), else reads them in place */
  copied: boolean;
  /** the sizing's measured microseconds: a CPU call's fixed part and a pick's, and a pick of the card's copy (0: the share was not sized) */
  cpuFixedUs: number;
  cpuPickUs: number;
  cardPickUs: number;
  /** upload steps: host layers the hook ran meanwhile, the share of host layers it was given last, its measured microseconds a token a layer */
  splitRuns: number;
  hostShare: number;
  hookLayerUsPerToken: number;
  /** upload steps: layers whose used experts alone were copied once their picks were made; of the
   * uploaded layers' expert bytes, the share the last upload step's picks used (-1: none yet) */
  sparseRuns: number;
  usedShare: number;
  /** of uploadBytes, those sparse steps copied ahead of a layer's picks (the experts its last picks used) */
  prefetchedBytes: number;
  /** one-token steps: times the card's share (cardShare) moved online by the steps' own timings (cuda/hybrid/share_tune.cu) */
  shareMoves: number;
  /** the one-token splits whose timings the online sizing read (the card's share, its wait, the CPU's call) */
  shareSamples: number;
  /** sparse upload steps' first uploads found copied ahead by the step before (a prompt's next batch) */
  leadRuns: number;
  /** sparse prompt layers that gave the CPU a share of their experts (cuda/hybrid/cpu_share.cu), the experts and (token, expert) pairs it took */
  cpuLayers: number;
  cpuExperts: number;
  cpuPairs: number;
  /** promotion: card slots a host layer (0: off), experts moved into them, one-token picks found resident of all picks */
  promoteSlots: number;
  promoted: number;
  residentPicks: number;
  picks: number;
}

/** The largest batch of the batch-invariant mode (the decode kernels' MV_MAX_NT). */
export const CUDA_INVARIANT_TOKENS = 8;

/**
 * Batches of 9 to this many tokens run as steps of at most 8 (the decode-batch kernels, each
 * weight row read once a step) when no experts stay in host memory: the prompt kernels decode the
 * weights of every expert a batch touches, so on the H200 a 14-token batch of Qwen3-30B-A3B took
 * 27 ms there against ~6 ms a step of 8 (a prompt's last chunk after a cache restore, a new chat
 * turn). BLOOMERY_CUDA_SPLIT_MAX sets it (8 or less: never).
 */
export const CUDA_SPLIT_MAX = 24;

/** A batch's pieces of at most 8 tokens: [first token, end, first output row, end]; null: one forward. */
export function splitPieces(n: number, outRows: Int32Array, splitMax: number): [number, number, number, number][] | null {
  const step = CUDA_INVARIANT_TOKENS;
  if (n <= step || n > splitMax) return null;
  // the output rows ascending (their logits rows in the same order): each piece's are a run of them
  for (let j = 1; j < outRows.length; j++) if (outRows[j] <= outRows[j - 1]) return null;
  const k = Math.ceil(n / step), size = Math.ceil(n / k);
  const out: [number, number, number, number][] = [];
  let o = 0;
  for (let i0 = 0; i0 < n; i0 += size) {
    const i1 = Math.min(n, i0 + size);
    let o1 = o;
    while (o1 < outRows.length && outRows[o1] < i1) o1++;
    out.push([i0, i1, o, o1]);
    o = o1;
  }
  return out;
}

function splitMaxFromEnv(): number {
  const v = Number(process.env.BLOOMERY_CUDA_SPLIT_MAX ?? CUDA_SPLIT_MAX);
  return Number.isInteger(v) && v >= 0 ? v : CUDA_SPLIT_MAX;
}

/** Tokens [i0, i1) of a batch with its output rows [o0, o1) (renumbered), their logits in `logits`. */
function piece(b: Batch, i0: number, i1: number, o0: number, o1: number, logits: Float32Array): Batch {
  return {
    tokens: b.tokens.subarray(i0, i1),
    pos: b.pos.subarray(i0, i1),
    seq: b.seq.subarray(i0, i1),
    outRows: Int32Array.from(b.outRows.subarray(o0, o1), (r) => r - i0),
    logits,
  };
}

/** The program's tensors on one card. Free it after the backends made from it. */
export class CudaWeights {
  private handle: bigint;
  private users = 0;

  constructor(
    readonly prog: EncodedProgram,
    readonly device = 0,
    options: Partial<CudaOptions> = {},
  ) {
    const out = new BigUint64Array(1);
    const { slots, keep } = cudaOptionSlots({ ...cudaOptionsFromEnv(), ...options }); // host_pin, carveout
    checkCuda(cuda().bl_cuda_weights_new(device, ptr(prog.program.i), ptr(slots.i), ptr(out)), "uploading the weights to the card");
    void keep;
    this.handle = out[0];
  }

  /** @internal */ acquire(): bigint {
    if (!this.handle) throw new Error("CudaWeights: used after close");
    this.users++;
    return this.handle;
  }

  /** @internal */ release(): void {
    this.users--;
  }

  close(): void {
    if (!this.handle) return;
    if (this.users > 0) throw new Error(`CudaWeights: ${this.users} backend(s) still use the weights`);
    cuda().bl_cuda_weights_free(this.handle);
    this.handle = 0n;
  }
}

/**
 * The first tensor of a type the card has no kernel for among bloomery's own (a checkpoint folder's FP8,
 * NVFP4 or MLX 4-bit rows, ffi/cpu/quants_fp.c), named as its user knows it; checked before the fusion pass
 * (whose table has no such ids), and without the CUDA library.
 */
export function folderTypeRefusal(prog: EncodedProgram): string | undefined {
  for (let i = 0; i < prog.ops.length; i++) {
    for (const [role, name] of Object.entries(prog.ops[i].tensors as Record<string, string | undefined>)) {
      if (!name) continue;
      const type = Number(prog.tensorSlot(i, role, 1));
      if (FOLDER_ONLY_TYPES.has(type)) return `op ${i}: ${name}: ${FOLDER_TYPE_WORDS[type]} weights are not implemented on the card yet`;
    }
  }
  return undefined;
}

/** Why the card cannot run the program (the first op it cannot, named by the fusion pass: cuda/runtime/fuse.cu), or undefined (no device needed). */
export function cudaUnsupported(prog: EncodedProgram): string | undefined {
  const folder = folderTypeRefusal(prog);
  if (folder) return folder;
  const bad = new BigInt64Array(1);
  const st = Number(cuda().bl_cuda_check(ptr(prog.program.i), ptr(bad)));
  if (st === 0) return undefined;
  return cudaLastError().replace(/^cuda: /, "");
}

/** Bytes the weights and a context of these options take on the card (no device needed). */
export function cudaPlanBytes(hp: HParams, prog: EncodedProgram, o: { nSlots: number; nCtxSlot: number; maxTokens: number }, options?: Partial<CudaOptions>): { weights: number; context: number } {
  const out = new BigInt64Array(2);
  const { slots, keep } = cudaOptionSlots(backendCudaOptions({ cuda: options }));
  checkCuda(cuda().bl_cuda_plan_bytes(ptr(ctxParams(hp, o).i), ptr(prog.program.i), ptr(slots.i), ptr(out), ptr(out, 8)), "sizing the model for the card");
  void keep;
  return { weights: Number(out[0]), context: Number(out[1]) };
}

export class CudaBackend implements Backend {
  readonly name = "CUDA";
  private ctx: bigint;
  private batchSlots = new Slots(BATCH_SLOTS);
  readonly maxTokens: number;
  private readonly splitMax = splitMaxFromEnv();
  readonly nSlots: number;
  readonly nCtxSlot: number;
  private hook: HostHook | undefined;
  private hostBlocks: number;

  constructor(
    private hp: HParams,
    private weights: CudaWeights,
    o: CudaBackendOptions,
  ) {
    if (o.batchInvariant) o = { ...o, maxTokens: Math.min(o.maxTokens, CUDA_INVARIANT_TOKENS) };
    const w = weights.acquire();
    try {
      const out = new BigUint64Array(1);
      const { slots, keep } = cudaOptionSlots(backendCudaOptions(o));
      checkCuda(cuda().bl_cuda_ctx_new(w, ptr(ctxParams(hp, o).i), ptr(slots.i), ptr(out)), "creating the CUDA context");
      void keep;
      this.ctx = out[0];
    } catch (e) {
      weights.release();
      throw e;
    }
    this.hostBlocks = hostExpertOps(weights.prog);
    if (this.hostBlocks > 0) {
      try {
        this.hook = new HostHook(hp, o.maxTokens, Math.max(1, o.hostThreads ?? 1));
        checkCuda(cuda().bl_cuda_set_host(this.ctx, this.hook.fn, this.hook.ctx, this.hook.expertFn), "connecting the host experts");
        this.hook.keepPin(); // after set_host's measurement on this thread
      } catch (e) {
        this.close();
        throw e;
      }
    }
    this.maxTokens = o.maxTokens;
    this.nSlots = o.nSlots;
    this.nCtxSlot = o.nCtxSlot;
  }

  private fill(b: Batch, withLogits: boolean): Slots {
    const n = b.tokens.length;
    if (b.pos.length !== n || b.seq.length !== n) throw new Error("forward: tokens, pos and seq differ in length");
    if (withLogits && b.logits.length < b.outRows.length * this.hp.nVocab) throw new Error("forward: logits buffer too small");
    // the card does not write (or read) a batch's hidden-state rows yet (bl_cuda_forward refuses them too)
    if (b.hiddenIn || b.hiddenOut) throw new Error("forward: hidden-state rows (speculative decoding's draft-mtp) are not implemented on the CUDA backend yet; run draft-mtp on the CPU (-ngl 0)");
    const s = this.batchSlots;
    s.setInt(0, n);
    s.setInt(1, BigInt(ptr(b.tokens)));
    s.setInt(2, BigInt(ptr(b.pos)));
    s.setInt(3, BigInt(ptr(b.seq)));
    s.setInt(4, b.outRows.length);
    s.setInt(5, b.outRows.length ? BigInt(ptr(b.outRows)) : 0n);
    s.setInt(6, withLogits && b.outRows.length ? BigInt(ptr(b.logits)) : 0n);
    return s;
  }

  forward(b: Batch): void {
    const pieces = this.pieces(b);
    if (!pieces) {
      checkCuda(cuda().bl_cuda_forward(this.ctx, ptr(this.fill(b, true).i)), "forward");
      return;
    }
    const V = this.hp.nVocab;
    for (const [i0, i1, o0, o1] of pieces) this.forward(piece(b, i0, i1, o0, o1, b.logits.subarray(o0 * V, o1 * V)));
  }

  /** The steps a batch of 9..splitMax tokens runs as (splitPieces), or null. */
  private pieces(b: Batch): [number, number, number, number][] | null {
    return this.hostBlocks > 0 ? null : splitPieces(b.tokens.length, b.outRows, this.splitMax);
  }

  /**
   * A forward that returns the k best logits of each output row (value desc, id asc) instead
   * of the logits: ids and vals hold outRows.length * k entries. k in 1..64.
   */
  forwardTopK(b: Batch, k: number, ids: Int32Array, vals: Float32Array): void {
    if (!Number.isInteger(k) || k < 1 || k > 64) throw new Error(`forwardTopK: k = ${k} (1..64)`);
    if (ids.length < b.outRows.length * k || vals.length < b.outRows.length * k) throw new Error("forwardTopK: output arrays too small");
    if (b.outRows.length === 0) {
      this.forward(b);
      return;
    }
    const pieces = this.pieces(b);
    if (pieces) {
      for (const [i0, i1, o0, o1] of pieces) {
        const p = piece(b, i0, i1, o0, o1, b.logits);
        if (o1 > o0) this.forwardTopK(p, k, ids.subarray(o0 * k, o1 * k), vals.subarray(o0 * k, o1 * k));
        else this.forward(p);
      }
      return;
    }
    checkCuda(cuda().bl_cuda_forward_topk(this.ctx, ptr(this.fill(b, false).i), k, ptr(ids), ptr(vals)), "forward");
  }

  setOption(key: number, value: number): void {
    checkCuda(cuda().bl_cuda_set_option(this.ctx, key, value), "setting a CUDA option");
  }

  /**
   * Weight and KV bytes on the card, steps run, steps replayed from graphs, graphs held, SMs, and
   * experts' combines fused into the next layer's row quantization as steps were enqueued
   * (CudaFast.combine), and attention output products that took the int8 rows the attention wrote
   * (CudaFast.attnX8) (a captured graph counts once, not per replay); launches of the prompt paths:
   * dense products from f16 copies (CudaFast.gemm16), tiled routers (routeBig), shared-tile
   * attentions (fa2), expert blocks on f16 activation rows (gemmB16), Q/K preparations a block a
   * token (qkTok); decode experts' downs by lane groups (downGroups) and one-token downs over every
   * pick's units (down1); decode batches' gate/ups and downs on the tensor cores
   * (guMma, downMma); one-token downs reading the int8 rows their gate/up wrote (act8); one-token
   * Q/K/V launches that fetch the slot's cached keys and values into L2 (l2Prefetch: CudaFast.l2Kv);
   * attention launches forming their scores and values on the tensor cores (attnMma); fused output + router launches whose
   * blocks added their partial logits into the integer accumulators (foAcc); attention launches
   * whose slices a kernel of its own merged (a2Merge); one-token gate/up launches whose rows came by
   * bulk copies (tmaGu); decode batches' MoE layers put on the dp4a kernels because their experts got
   * few pairs each in the last batches (mbNoMma; CudaOption.mmaPairs); head-group attention launches
   * (CudaFast.headGroups) on a block with a sliding window or sinks, gpt-oss's (a2Windowed).
   */
  stats(): {
    weightBytes: number; kvBytes: number; steps: number; graphSteps: number; graphs: number; smCount: number; fusedCombines: number; attnX8: number;
    gemm16: number; routeBig: number; fa2: number; gemmB16: number; qkTok: number; downGroups: number; down1: number; guMma: number; downMma: number; act8: number; l2Prefetch: number; attnMma: number; foAcc: number; a2Merge: number; tmaGu: number; mbNoMma: number; a2Windowed: number;
  } {
    const o = new BigInt64Array(25);
    checkCuda(cuda().bl_cuda_ctx_stats(this.ctx, ptr(o), 25), "reading CUDA stats");
    const n = (i: number) => Number(o[i]);
    return {
      weightBytes: n(0), kvBytes: n(1), steps: n(2), graphSteps: n(3), graphs: n(4), smCount: n(5), fusedCombines: n(6), attnX8: n(7),
      gemm16: n(8), routeBig: n(9), fa2: n(10), gemmB16: n(11), qkTok: n(12), downGroups: n(13), down1: n(14), guMma: n(15), downMma: n(16), act8: n(17), l2Prefetch: n(18), attnMma: n(19), foAcc: n(20), a2Merge: n(21), tmaGu: n(22), mbNoMma: n(23), a2Windowed: n(24),
    };
  }

  /**
   * Replays the first captured decode graph n times (a measurement; run a decode step first):
   * GPU microseconds a replay back to back, host microseconds a graph launch call takes, and
   * microseconds a replay followed by a synchronisation.
   */
  replayProbe(n: number): { gpuUs: number; launchUs: number; syncedUs: number } {
    const o = new Float64Array(3);
    checkCuda(cuda().bl_cuda_test_replay(this.ctx, n, ptr(o)), "replaying the decode graph");
    return { gpuUs: o[0], launchUs: o[1], syncedUs: o[2] };
  }

  /** The host experts' counters; undefined when every expert is on the card. */
  hostStats(): HostExpertStats | undefined {
    if (!this.hostBlocks) return undefined;
    const o = new BigInt64Array(29);
    checkCuda(cuda().bl_cuda_host_stats(this.ctx, ptr(o), 29), "reading the host experts' counters");
    const n = (i: number) => Number(o[i]);
    return { blocks: this.hostBlocks, hookRuns: n(0), uploadRuns: n(1), uploadBytes: n(2), hookUs: n(3), uploadMin: n(4),
      pcieBytesPerSec: n(5), pinned: n(6) !== 0, pairUs: n(7) / 1000, cardShare: n(8),
      promoteSlots: n(9), promoted: n(10), residentPicks: n(11), picks: n(12), copied: n(13) !== 0, cpuPickUs: n(14) / 1000, cardPickUs: n(15) / 1000, cpuFixedUs: n(16) / 1000,
      splitRuns: n(17), hostShare: n(18) / 1000, hookLayerUsPerToken: n(19) / 1000, sparseRuns: n(20), usedShare: n(21) / 1000, prefetchedBytes: n(22), shareMoves: n(23), shareSamples: n(24), leadRuns: n(25),
      cpuLayers: n(26), cpuExperts: n(27), cpuPairs: n(28) };
  }

  kvPosBytes(): number {
    return Number(cuda().bl_cuda_kv_pos_bytes(this.ctx));
  }

  kvSave(slot: number, n: number, dst: Uint8Array): void {
    if (dst.length < n * this.kvPosBytes()) throw new Error("kvSave: buffer too small");
    checkCuda(cuda().bl_cuda_kv_save(this.ctx, slot, n, ptr(dst)), "saving KV");
  }

  kvLoad(slot: number, n: number, src: Uint8Array): void {
    if (src.length < n * this.kvPosBytes()) throw new Error("kvLoad: buffer too small");
    checkCuda(cuda().bl_cuda_kv_load(this.ctx, slot, n, ptr(src)), "loading KV");
  }

  kvCopy(src: number, dst: number, n: number): void {
    // a recurrent model's state after a prefix cannot be taken from a longer sequence's
    if (this.rsBytes() > 0) throw new Error("kvCopy: this model keeps a recurrent state a slot; a prefix of a slot cannot be copied alone");
    checkCuda(cuda().bl_cuda_kv_copy(this.ctx, src, dst, n), "copying KV");
  }

  /** A slot's recurrent state on the card (the delta-net layers'; the CPU backend's bytes and layout). */
  rsBytes(): number {
    return Number(cuda().bl_cuda_rs_bytes(this.ctx));
  }

  rsSave(slot: number, dst: Uint8Array): void {
    if (dst.length < this.rsBytes()) throw new Error("rsSave: buffer too small");
    checkCuda(cuda().bl_cuda_rs_save(this.ctx, slot, ptr(dst)), "saving the recurrent state");
  }

  rsLoad(slot: number, src: Uint8Array): void {
    if (src.length < this.rsBytes()) throw new Error("rsLoad: buffer too small");
    checkCuda(cuda().bl_cuda_rs_load(this.ctx, slot, ptr(src)), "loading the recurrent state");
  }

  rsSnapReserve(): void {
    checkCuda(cuda().bl_cuda_rs_snap_reserve(this.ctx), "reserving the recurrent state snapshots");
  }

  rsSnapTake(slot: number): void {
    checkCuda(cuda().bl_cuda_rs_snap_take(this.ctx, slot), "taking a recurrent state snapshot");
  }

  rsSnapBack(slot: number): void {
    checkCuda(cuda().bl_cuda_rs_snap_back(this.ctx, slot), "putting a recurrent state snapshot back");
  }

  /** Saved states stay on the card while it keeps this much free beside them. */
  static readonly STASH_MARGIN = 2 * 1024 ** 3;

  kvStash(slot: number, n: number): SavedKv | undefined {
    const bytes = n * this.kvPosBytes();
    const free = new BigInt64Array(1);
    checkCuda(cuda().bl_cuda_free_bytes(this.ctx, ptr(free)), "reading the card's free memory");
    if (Number(free[0]) < bytes + CudaBackend.STASH_MARGIN) return undefined;
    const out = new BigUint64Array(1);
    if (Number(cuda().bl_cuda_kv_stash(this.ctx, slot, n, ptr(out))) !== 0) return undefined; // no room after all: host RAM
    const handle = out[0], owner = this;
    let live = true;
    return {
      bytes, where: "card",
      restore(to: number, m: number) {
        if (!live) throw new Error("internal: restoring a freed KV state");
        checkCuda(cuda().bl_cuda_kv_unstash(owner.ctx, handle, to, m), "restoring KV on the card");
      },
      free() {
        if (live && owner.ctx) cuda().bl_cuda_kv_stash_free(owner.ctx, handle);
        live = false;
      },
    };
  }

  close(): void {
    if (!this.ctx) return;
    cuda().bl_cuda_ctx_free(this.ctx);
    this.ctx = 0n;
    this.hook?.close(); // after the context: its graphs call into it
    this.weights.release();
  }
}
