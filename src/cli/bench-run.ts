// `bloomery-serve bench`: running one llama-bench test on the CPU backend - prompt tests as
// decode calls of -b tokens split into forwards of -ub tokens with only the last row's logits,
// generation tests one token per forward, a depth processed once before the timed runs.

import type { Backend } from "../engine/backend.ts";
import type { HostExpertStats } from "../engine/cuda-backend.ts";
import type { ExpertStats } from "../engine/expert-store.ts";
import { Model } from "../engine/model.ts";

/** No HTTP server beside bench: the host experts' pool leaves one core (the card's waits, the driver), not two. */
const BENCH_SPARE_CORES = 1;

export interface BenchInstance {
  model: string;
  nPrompt: number;
  nGen: number;
  nDepth: number;
  nBatch: number;
  nUbatch: number;
  nThreads: number;
  nGpuLayers: number;
  nCpuMoe: number;
  splitMode: string;
  mainGpu: number;
  noKvOffload: boolean;
  flashAttn: string;
  overrides: string;
  /** -ot's pairs (placement on a card) */
  overrideList?: { pattern: string; buffer: string }[];
  noOpOffload: boolean;
  noHost: boolean;
}

/** A test's parameters but its token counts (the prompt, generated tokens). */
export type BenchBase = Omit<BenchInstance, "nPrompt" | "nGen">;

/** The counters of a test's start: the expert cache's (--expert-ram) and the host experts' beside a card. */
export interface CounterMarks {
  xs: ExpertStats | undefined;
  hs: HostExpertStats | undefined;
}

export function counterMarks(m: Model, be: Backend): CounterMarks {
  return { xs: m.expertStats(), hs: be.hostStats?.() };
}

/** Prints what the expert cache and the host experts did since `before` (a line each, on stderr; nothing when neither is in use). */
export function reportCounters(m: Model, be: Backend, before: CounterMarks, test: string, tokens: number): void {
  const hs0 = before.hs, hs1 = be.hostStats?.();
  if (hs0 && hs1) {
    const calls = hs1.hookRuns - hs0.hookRuns;
    process.stderr.write(`bench: host experts (${hs1.blocks} layers, the card reading ${hs1.cardShare} of a token's picks` +
      `${hs1.shareMoves - hs0.shareMoves ? `, moved ${hs1.shareMoves - hs0.shareMoves} times online` : ""}), ${test}: ${calls} CPU calls of ` +
      `${calls ? ((hs1.hookUs - hs0.hookUs) / calls).toFixed(1) : "0"} us (${((hs1.hookUs - hs0.hookUs) / 1000 / Math.max(1, tokens)).toFixed(2)} ms a token), ` +
      `${hs1.uploadRuns - hs0.uploadRuns} layer uploads (${((hs1.uploadBytes - hs0.uploadBytes) / 2 ** 30).toFixed(1)} GiB` +
      `${hs1.sparseRuns - hs0.sparseRuns ? `; ${hs1.sparseRuns - hs0.sparseRuns} of the used experts only, ` +
        `${((hs1.prefetchedBytes - hs0.prefetchedBytes) / 2 ** 30).toFixed(1)} GiB of them ahead of the picks` : ""}` +
      `${hs1.usedShare >= 0 ? `; the picks used ${(100 * hs1.usedShare).toFixed(0)}% of the bytes` : ""}` +
      `${hs1.leadRuns - hs0.leadRuns ? `; ${hs1.leadRuns - hs0.leadRuns} copied ahead by the batch before` : ""}` +
      `${hs1.cpuLayers - hs0.cpuLayers ? `; ${hs1.cpuExperts - hs0.cpuExperts} experts (${hs1.cpuPairs - hs0.cpuPairs} pairs) of ` +
        `${hs1.cpuLayers - hs0.cpuLayers} layers on the CPU instead` : ""})` +
      `${hs1.promoteSlots ? `; promotion (${hs1.promoteSlots} slots a layer): ${hs1.promoted - hs0.promoted} experts moved, ` +
        `${hs1.residentPicks - hs0.residentPicks} of ${hs1.picks - hs0.picks} picks on the card` : ""}\n`);
  }
  const xs0 = before.xs, xs1 = m.expertStats();
  if (xs0 && xs1) {
    const d = (k: keyof typeof xs1) => xs1[k] - xs0[k];
    process.stderr.write(`bench: expert cache (${xs1.slots} slots of ${(xs1.slotBytes / 2 ** 20).toFixed(2)} MiB), ${test}: ${d("lookups")} lookups, ` +
      `${d("hits")} hits (${d("prefetchHits")} prefetched), ${d("misses")} misses, ${(d("bytesRead") / 2 ** 20).toFixed(0)} MiB read, ` +
      `${d("prefetchReads")} prefetch reads (${(d("prefetchBytes") / 2 ** 20).toFixed(0)} MiB), ${d("evictions")} evictions\n`);
  }
}

/** A small deterministic generator for token ids (llama-bench draws them with rand()). */
export function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s >>> 1;
  };
}

/** One test's backend: a context sized for the test, decode calls as llama_decode makes them. */
class TestContext {
  private readonly logits: Float32Array;
  private readonly rand = lcg(1234);
  private readonly ub: number;

  constructor(
    private readonly be: Backend,
    private readonly nVocab: number,
    private readonly nBatch: number,
    nUbatch: number,
  ) {
    this.ub = Math.min(nUbatch, nBatch);
    this.logits = new Float32Array(nVocab);
  }

  private token(): number {
    return this.rand() % this.nVocab;
  }

  /** llama_decode of n tokens at positions pos0..: forwards of -ub tokens, logits of the last row only. */
  private decode(n: number, pos0: number): void {
    for (let s = 0; s < n; s += this.ub) {
      const c = Math.min(this.ub, n - s);
      const last = s + c === n;
      this.be.forward({
        tokens: Int32Array.from({ length: c }, () => this.token()),
        pos: Int32Array.from({ length: c }, (_, i) => pos0 + s + i),
        seq: new Int32Array(c),
        outRows: last ? Int32Array.of(c - 1) : new Int32Array(0),
        logits: this.logits,
      });
    }
  }

  /** A prompt of n tokens in decode calls of -b tokens. */
  prompt(n: number, pos0: number): void {
    for (let done = 0; done < n; done += this.nBatch) this.decode(Math.min(this.nBatch, n - done), pos0 + done);
  }

  /** n generated tokens, one decode call each. */
  generate(n: number, pos0: number): void {
    for (let i = 0; i < n; i++) this.decode(1, pos0 + i);
  }
}

export class BenchRunner {
  private model: Model | undefined;
  /** the backend that ran the last test ("CPU", "CUDA") */
  lastBackend = "CPU";

  /**
   * expertRamBytes: routed experts read on demand into a RAM cache of this size (--expert-ram);
   * budget: the card planned as if it had this much free (--card-budget), with --promote-slots
   */
  constructor(private readonly expertRamBytes?: number, private readonly budget?: { cardBudgetBytes: number; promoteSlots: number }) {}

  private modelKey = "";

  /**
   * The model of a test, loaded once for the tests that share its file and placement (its own
   * context kept minimal). On a card, --cpu-moe / -ncmoe / -ot keep routed experts in host memory
   * (plan.ts; the card's program marks them), so each placement is its own load.
   */
  modelFor(inst: Pick<BenchInstance, "model" | "nGpuLayers" | "nCpuMoe" | "overrideList">, ctx?: { nSlots: number; nCtx: number; maxTokens: number }): Model {
    const hybrid = inst.nGpuLayers !== 0 && (inst.nCpuMoe !== 0 || (inst.overrideList?.length ?? 0) > 0);
    const budget = this.budget && inst.nGpuLayers !== 0 ? this.budget : undefined;
    // under a --card-budget the plan counts the test's own context (its KV cache and buffers), so
    // each context size is its own load
    const planned = budget && ctx ? ctx : { nSlots: 1, nCtx: 1, maxTokens: 1 };
    const key = JSON.stringify([inst.model, hybrid ? [inst.nGpuLayers, inst.nCpuMoe, inst.overrideList] : null, budget ? planned : null]);
    if (this.model && this.modelKey === key) return this.model;
    this.model?.close();
    this.model = undefined;
    const flags = hybrid ? { cpuMoe: inst.nCpuMoe < 0, nCpuMoe: Math.max(0, inst.nCpuMoe), overrides: inst.overrideList, nGpuLayers: inst.nGpuLayers < 0 ? "auto" as const : inst.nGpuLayers } : undefined;
    const placement = budget ? { ...(flags ?? { nGpuLayers: inst.nGpuLayers < 0 ? "auto" as const : inst.nGpuLayers }), cardBudgetBytes: budget.cardBudgetBytes } : flags;
    this.model = Model.load(inst.model, {
      nCtx: planned.nCtx, nSlots: planned.nSlots, maxTokens: planned.maxTokens, nThreads: 1, expertRamBytes: this.expertRamBytes, nGpuLayers: hybrid || budget ? inst.nGpuLayers : undefined, placement,
      promoteSlots: budget && !hybrid ? budget.promoteSlots : undefined,
    });
    this.modelKey = key;
    return this.model;
  }

  /**
   * A test's context: nSlots sequences of nCtx positions each, forwards of at most -ub (within -b)
   * tokens. -ngl picks the backend (placement.ts: 0 the CPU; the card when present otherwise); the
   * card's weights are uploaded once per model.
   */
  backendFor(m: Model, inst: Pick<BenchInstance, "nBatch" | "nUbatch" | "nThreads" | "nGpuLayers">, nSlots: number, nCtx: number): Backend {
    if (nCtx > m.hp.nCtxTrain) process.stderr.write(`bench: note: ${nCtx} positions is more than the model's training context ${m.hp.nCtxTrain}\n`);
    const be = m.backends.create({
      nSlots,
      nCtxSlot: nCtx,
      maxTokens: Math.min(inst.nUbatch, inst.nBatch),
      nThreads: inst.nThreads,
      nThreadsBatch: inst.nThreads,
    }, { nGpuLayers: inst.nGpuLayers, hostSpareCores: BENCH_SPARE_CORES, cardBudgetBytes: inst.nGpuLayers !== 0 ? this.budget?.cardBudgetBytes : undefined });
    this.lastBackend = be.name;
    return be;
  }

  /** Runs one test `reps` times; the wall time of each run in nanoseconds. */
  run(inst: BenchInstance, reps: number, warmup: boolean): number[] {
    const nCtx = Math.max(1, inst.nPrompt + inst.nGen + inst.nDepth);
    const m = this.modelFor(inst, { nSlots: 1, nCtx, maxTokens: Math.min(inst.nUbatch, inst.nBatch) });
    const be = this.backendFor(m, inst, 1, nCtx);
    try {
      const ctx = new TestContext(be, m.hp.nVocab, inst.nBatch, inst.nUbatch);
      if (warmup) {
        if (inst.nPrompt > 0) ctx.prompt(inst.nPrompt, 0);
        if (inst.nGen > 0) ctx.generate(1, 0);
      }
      if (inst.nDepth > 0) ctx.prompt(inst.nDepth, 0); // positions below the test's are never rewritten
      const samples: number[] = [];
      const marks = counterMarks(m, be);
      for (let r = 0; r < reps; r++) {
        const t0 = performance.now();
        if (inst.nPrompt > 0) ctx.prompt(inst.nPrompt, inst.nDepth);
        if (inst.nGen > 0) ctx.generate(inst.nGen, inst.nDepth + inst.nPrompt);
        samples.push(Math.round((performance.now() - t0) * 1e6));
      }
      reportCounters(m, be, marks, inst.nPrompt > 0 ? `pp${inst.nPrompt}` : `tg${inst.nGen}`, reps * (inst.nPrompt + inst.nGen));
      return samples;
    } finally {
      be.close();
    }
  }

  close(): void {
    this.model?.close();
    this.model = undefined;
  }
}
