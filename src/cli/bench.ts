// `bloomery-serve bench`: llama-bench on bloomery's engine - the same flags (comma lists and repeats
// give several test values), the same tests (ppN, tgN, ppN+tgM, @ dD), mean and sample standard
// deviation per test, the same markdown / CSV / JSON output; --membw adds the machine's memory
// read bandwidth and the share of it each generation test reads. -npl runs llama-batched-bench's
// tests instead (bench-batched.ts).

import { join } from "node:path";
import { cpuPath, memoryBandwidth, usableCores } from "../../ffi/cpu-kernels.ts";
import { openModelPath } from "../safetensors/model.ts";
import { parseBenchArgs, type BenchParams } from "./bench-flags.ts";
import { cpuInfo, modelInfo, type ModelInfo } from "./bench-info.ts";
import { CsvPrinter, JsonlPrinter, JsonPrinter, MarkdownPrinter, avgTs, testName, type BenchResult, type OptionalColumn, type Printer } from "./bench-print.ts";
import { BenchRunner, type BenchBase, type BenchInstance } from "./bench-run.ts";
import { runBatchedBench } from "./bench-batched.ts";
import { tableHelp } from "./flag-help.ts";
import { BENCH_FLAG_TABLE } from "./bench-flags.ts";
import { FlagError } from "./flag-types.ts";
import { cudaDeviceInfo, cudaStatus } from "../../ffi/cuda.ts";

function cudaName(): string {
  try {
    return cudaDeviceInfo(0).name;
  } catch {
    return "";
  }
}

/** Every combination of the test parameters in llama-bench's order (the model outermost, then the context parameters, the depth innermost). */
export function benchBases(p: BenchParams): BenchBase[] {
  const out: BenchBase[] = [];
  const ncmoe = p.cpuMoe ? [-1] : p.nCpuMoe;
  for (const model of p.models)
    for (const nGpuLayers of p.nGpuLayers)
      for (const nCpuMoe of ncmoe)
        for (const splitMode of p.splitMode)
          for (const mainGpu of p.mainGpu)
            for (const ot of p.overrides)
              for (const noHost of p.noHost)
                for (const noOpOffload of p.noOpOffload)
                  for (const nBatch of p.nBatch)
                    for (const nUbatch of p.nUbatch)
                      for (const noKvOffload of p.noKvOffload)
                        for (const flashAttn of p.flashAttn)
                          for (const nThreads of p.nThreads)
                            for (const nDepth of p.nDepth)
                              out.push({ model, nDepth, nBatch, nUbatch, nThreads, nGpuLayers, nCpuMoe, splitMode, mainGpu, noKvOffload, flashAttn, overrides: ot.text, overrideList: ot.list.map((o) => ({ pattern: o.source, buffer: o.buffer })), noOpOffload, noHost });
  return out;
}

/** The instances in llama-bench's order (the model outermost, then the context parameters; pp, then tg, then pg tests). */
export function benchInstances(p: BenchParams): BenchInstance[] {
  const out: BenchInstance[] = [];
  for (const base of benchBases(p)) {
    for (const n of p.nPrompt) if (n > 0) out.push({ ...base, nPrompt: n, nGen: 0 });
    for (const n of p.nGen) if (n > 0) out.push({ ...base, nPrompt: 0, nGen: n });
    for (const [pp, tg] of p.pg) if (pp > 0 || tg > 0) out.push({ ...base, nPrompt: pp, nGen: tg });
  }
  return out;
}

const same = (a: readonly unknown[], b: readonly unknown[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

/** llama-bench's rule for extra markdown columns: several values, or one that is not the default. */
function optionalColumns(p: BenchParams): Set<OptionalColumn> {
  const s = new Set<OptionalColumn>();
  const check = (col: OptionalColumn, v: readonly unknown[], def: readonly unknown[]) => {
    if (v.length > 1 || !same(v, def)) s.add(col);
  };
  check("n_cpu_moe", p.cpuMoe ? [-1] : p.nCpuMoe, [0]);
  check("n_batch", p.nBatch, [2048]);
  check("n_ubatch", p.nUbatch, [512]);
  check("main_gpu", p.mainGpu, [0]);
  check("split_mode", p.splitMode, ["layer"]);
  check("no_kv_offload", p.noKvOffload, [false]);
  check("flash_attn", p.flashAttn, ["auto"]);
  check("tensor_buft_overrides", p.overrides.map((o) => o.text), ["none"]);
  check("no_op_offload", p.noOpOffload, [false]);
  check("no_host", p.noHost, [false]);
  return s;
}

/** What the GPU-only parameters mean here: reported, with everything on the host. */
function gpuNote(p: BenchParams): string {
  if (cudaStatus().ok && !p.nGpuLayers.includes(0)) return ""; // the card runs the tests (placement.ts)
  const given: string[] = [];
  if (p.nGpuLayers.some((n) => n > 0)) given.push(`-ngl ${p.nGpuLayers.join(",")}`);
  if (p.cpuMoe) given.push("--cpu-moe");
  if (p.nCpuMoe.some((n) => n > 0)) given.push(`-ncmoe ${p.nCpuMoe.join(",")}`);
  const gpuBuffers = p.overrides.flatMap((o) => o.list).filter((o) => o.buffer !== "CPU");
  if (gpuBuffers.length) given.push(`-ot ${gpuBuffers.map((o) => `${o.source}=${o.buffer}`).join(";")}`);
  return given.length ? `note: CPU backend: every tensor is in host memory (${given.join(", ")} reported, nothing offloaded)` : "";
}

function buildCommit(): string {
  try {
    const r = Bun.spawnSync(["git", "-C", join(import.meta.dir, "..", ".."), "rev-parse", "--short", "HEAD"], { stderr: "ignore" });
    const s = r.stdout.toString().trim();
    return r.exitCode === 0 && s ? s : "unknown";
  } catch {
    return "unknown";
  }
}

function printerFor(kind: string, p: BenchParams, commit: string, note: string): Printer | undefined {
  switch (kind) {
    case "md": return new MarkdownPrinter(optionalColumns(p), commit, note);
    case "csv": return new CsvPrinter();
    case "json": return new JsonPrinter();
    case "jsonl": return new JsonlPrinter();
    default: return undefined;
  }
}

/** Runs the benchmark described by argv; returns the process exit code. */
export async function runBench(argv: string[]): Promise<number> {
  let params: BenchParams;
  try {
    const parsed = parseBenchArgs(argv, process.env, usableCores());
    if (parsed.help || !parsed.params) {
      process.stdout.write(tableHelp(BENCH_FLAG_TABLE, "bloomery-serve bench [options]") +
        "\nMultiple values can be given for each parameter by separating them with ','\nor by specifying the parameter multiple times. Ranges can be given as\n'first-last' or 'first-last+step' or 'first-last*mult'.\n");
      return 0;
    }
    params = parsed.params;
  } catch (e) {
    if (e instanceof FlagError) {
      console.error(`error: ${e.message}`);
      return 2;
    }
    throw e;
  }
  const commit = buildCommit();
  const note = gpuNote(params);
  if (note) console.error(note);
  const out = printerFor(params.output, params, commit, "");
  const err = printerFor(params.outputErr, params, commit, "");
  const instances = benchInstances(params);
  const infos = new Map<string, ModelInfo>();
  const bandwidth = new Map<number, number>();
  const runner = new BenchRunner(params.expertRamMiB > 0 ? params.expertRamMiB * 1024 * 1024 : undefined,
    params.cardBudgetMiB > 0 ? { cardBudgetBytes: params.cardBudgetMiB * 1024 * 1024, promoteSlots: params.promoteSlots } : undefined);
  const cpu = cpuInfo();
  const tgLines: string[] = [];
  try {
    for (const path of params.models) {
      try {
        infos.set(path, modelInfo(openModelPath(path)));
      } catch (e) {
        console.error(`error: failed to load model '${path}': ${e instanceof Error ? e.message : String(e)}`);
        return 1;
      }
    }
    if (params.npl.length) return await runBatchedBench(params, benchBases(params), { commit, cpu, infos, runner, gpuName: cudaName });
    if (params.membw) {
      for (const t of new Set(params.nThreads)) bandwidth.set(t, memoryBandwidth(t, 1 << 30, 5));
    }
    if (out) process.stdout.write(out.header());
    if (err) process.stderr.write(err.header());
    for (const [i, inst] of instances.entries()) {
      if (params.progress) console.error(`bloomery-bench: benchmark ${i + 1}/${instances.length}: ${testName(inst)}`);
      if (i > 0 && params.delay > 0) await Bun.sleep(params.delay * 1000);
      const info = infos.get(inst.model)!;
      let samplesNs: number[];
      try {
        samplesNs = runner.run(inst, params.reps, params.warmup);
      } catch (e) {
        console.error(`error: ${inst.model}: ${testName(inst)} failed: ${e instanceof Error ? e.message : String(e)}`);
        return 1;
      }
      const r: BenchResult = {
        buildCommit: commit, cpuInfo: cpu, cpuPath: cpuPath(), modelFilename: inst.model, modelType: info.desc,
        modelSize: info.size, modelNParams: info.nParams, nBatch: inst.nBatch, nUbatch: inst.nUbatch, nThreads: inst.nThreads,
        nGpuLayers: inst.nGpuLayers, nCpuMoe: inst.nCpuMoe, splitMode: inst.splitMode, mainGpu: inst.mainGpu,
        noKvOffload: inst.noKvOffload, flashAttn: inst.flashAttn, overrides: inst.overrides, noOpOffload: inst.noOpOffload,
        noHost: inst.noHost, nPrompt: inst.nPrompt, nGen: inst.nGen, nDepth: inst.nDepth,
        testTime: new Date().toISOString().replace(/\.\d{3}Z$/, "Z"), samplesNs,
        backend: runner.lastBackend, gpuInfo: runner.lastBackend === "CUDA" ? cudaName() : "",
      };
      if (out) process.stdout.write(out.test(r));
      if (err) process.stderr.write(err.test(r));
      const bw = bandwidth.get(inst.nThreads);
      if (bw !== undefined && inst.nGen > 0 && inst.nPrompt === 0) {
        const gbps = (avgTs(r) * info.bytesPerToken) / 1e9;
        tgLines.push(`${testName(inst)}, ${inst.nThreads} threads: ${(info.bytesPerToken / 1e6).toFixed(1)} MB of weights per token x ${avgTs(r).toFixed(2)} t/s = ${gbps.toFixed(1)} GB/s, ${((100 * gbps) / bw).toFixed(0)}% of ${bw.toFixed(1)} GB/s`);
      }
    }
    if (out) process.stdout.write(out.footer());
    if (err) process.stderr.write(err.footer());
    if (params.membw) {
      const lines = [...bandwidth].map(([t, bw]) => `memory read bandwidth: ${bw.toFixed(1)} GB/s (${t} threads)`);
      process.stdout.write(`\n${[...lines, ...tgLines].join("\n")}\n`);
    }
    if (params.output === "md") process.stdout.write(`kernels: ${cpuPath()} path\n`);
    return 0;
  } finally {
    runner.close();
  }
}
