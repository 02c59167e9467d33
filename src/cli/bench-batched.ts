// `bloomery-serve bench -npl`: llama-batched-bench's tests on bloomery's engine without HTTP - for
// each model and context parameters (bench's lists), each prompt size, generation size and number
// of parallel sequences, a batched decode test (bench-batched-run.ts) printed in its table.

import { cpuPath } from "../../ffi/cpu-kernels.ts";
import type { BenchParams } from "./bench-flags.ts";
import type { ModelInfo } from "./bench-info.ts";
import { batchedPrinter, type BatchedResult } from "./bench-batched-print.ts";
import { batchedName, runBatched, type BatchedTest } from "./bench-batched-run.ts";
import type { BenchBase, BenchRunner } from "./bench-run.ts";

/** The tests in llama-batched-bench's order within each base (prompt sizes outermost, then generation sizes, then sequences); -pg pairs after. */
export function batchedTests(p: Pick<BenchParams, "nPrompt" | "nGen" | "pg" | "npl">, bases: readonly BenchBase[]): BatchedTest[] {
  const out: BatchedTest[] = [];
  for (const base of bases) {
    for (const pp of p.nPrompt)
      for (const tg of p.nGen)
        for (const pl of p.npl) out.push({ ...base, nPrompt: pp, nGen: tg, nPl: pl });
    for (const [pp, tg] of p.pg) for (const pl of p.npl) out.push({ ...base, nPrompt: pp, nGen: tg, nPl: pl });
  }
  return out;
}

export interface BatchedRunContext {
  commit: string;
  cpu: string;
  infos: ReadonlyMap<string, ModelInfo>;
  runner: BenchRunner;
  /** the card's name, when a test ran on one */
  gpuName(): string;
}

/** Runs the -npl tests of a parsed command line; the process exit code. */
export async function runBatchedBench(p: BenchParams, bases: readonly BenchBase[], c: BatchedRunContext): Promise<number> {
  const out = batchedPrinter(p.output, c.commit);
  const err = batchedPrinter(p.outputErr, c.commit);
  const tests = batchedTests(p, bases);
  if (out) process.stdout.write(out.header());
  if (err) process.stderr.write(err.header());
  for (const [i, t] of tests.entries()) {
    if (p.progress) console.error(`bloomery-bench: benchmark ${i + 1}/${tests.length}: ${batchedName(t)}`);
    if (i > 0 && p.delay > 0) await Bun.sleep(p.delay * 1000);
    const info = c.infos.get(t.model)!;
    let ppNs: number[], tgNs: number[], backend: string;
    try {
      ({ ppNs, tgNs, backend } = runBatched(c.runner, t, p.reps, p.warmup, p.tgSeparate));
    } catch (e) {
      console.error(`error: ${t.model}: ${batchedName(t)} failed: ${e instanceof Error ? e.message : String(e)}`);
      return 1;
    }
    const r: BatchedResult = {
      buildCommit: c.commit, cpuInfo: c.cpu, cpuPath: cpuPath(), backend, gpuInfo: backend === "CUDA" ? c.gpuName() : "",
      modelFilename: t.model, modelType: info.desc, modelSize: info.size, modelNParams: info.nParams,
      nBatch: t.nBatch, nUbatch: t.nUbatch, nThreads: t.nThreads, nGpuLayers: t.nGpuLayers, nCpuMoe: t.nCpuMoe,
      flashAttn: t.flashAttn, overrides: t.overrides, tgSeparate: p.tgSeparate, nDepth: t.nDepth,
      pp: t.nPrompt, tg: t.nGen, pl: t.nPl, testTime: new Date().toISOString().replace(/\.\d{3}Z$/, "Z"), ppNs, tgNs,
    };
    if (out) process.stdout.write(out.test(r));
    if (err) process.stderr.write(err.test(r));
  }
  if (out) process.stdout.write(out.footer());
  if (err) process.stderr.write(err.footer());
  if (p.output === "md") process.stdout.write(`kernels: ${cpuPath()} path\n`);
  return 0;
}
