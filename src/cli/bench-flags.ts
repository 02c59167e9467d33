// `bloomery-serve bench`: llama-bench's command line (tools/llama-bench) as a flag table, and the
// parsed parameters: every test parameter takes comma lists and repeats (each value a test);
// -npl (llama-batched-bench's flag) turns the tests into batched decode of several sequences.

import { ON_OFF_AUTO, refuse } from "./flag-define.ts";
import { parseWithTable, type Env } from "./flag-parse.ts";
import { FlagError, type FlagDef, type FlagTable, type FlagValue } from "./flag-types.ts";

const O = "options", P = "test";
const CPU_ONLY = "this build has the CPU backend only";
const PIN = "the thread pool pins itself to the cores the process may use (set them with taskset)";

const range = (names: string[], key: string, def: number[], help: string, allowNegative = false): FlagDef => ({
  names, key, default: def, hint: "<n>", repeat: "append",
  value: { type: "list", of: { type: "range", allowNegative }, split: "," }, help, group: P, support: "supported",
});
const toggles = (names: string[], key: string, def: boolean[], help: string): FlagDef => ({
  names, key, default: def, hint: "<0|1>", repeat: "append",
  value: { type: "list", of: { type: "toggle" }, split: "," }, help, group: P, support: "supported",
});
const OUTPUT_KIND = { type: "enum", values: ["csv", "json", "jsonl", "md", "sql", "none"], supported: ["csv", "json", "jsonl", "md", "none"], refusedReason: "SQL output is not supported" } as const;

export const BENCH_FLAG_TABLE: FlagTable = {
  program: "bloomery-serve bench",
  groups: [{ id: O, title: "options" }, { id: P, title: "test parameters" }],
  flags: [
    { names: ["-h", "--help"], value: { type: "none" }, key: "help", help: "print this help and exit", group: O, support: "supported", action: "help" },
    { names: ["-r", "--repetitions"], value: { type: "int", min: 1 }, hint: "<n>", key: "reps", default: 5, help: "number of times to repeat each test", group: O, support: "supported" },
    { names: ["--delay"], value: { type: "int", min: 0 }, hint: "<0...N> (seconds)", key: "delay", default: 0, help: "delay between each test", group: O, support: "supported" },
    { names: ["-o", "--output"], value: OUTPUT_KIND, hint: "<csv|json|jsonl|md>", key: "output", default: "md", help: "output format printed to stdout", group: O, support: "supported" },
    { names: ["-oe", "--output-err"], value: OUTPUT_KIND, hint: "<csv|json|jsonl|md>", key: "outputErr", default: "none", help: "output format printed to stderr", group: O, support: "supported" },
    { names: ["-v", "--verbose"], value: { type: "none" }, key: "verbose", default: false, help: "verbose output", group: O, support: "supported" },
    { names: ["--progress"], value: { type: "none" }, key: "progress", default: false, help: "print test progress indicators", group: O, support: "supported" },
    { names: ["--no-warmup"], value: { type: "none" }, key: "noWarmup", default: false, help: "skip warmup runs before benchmarking", group: O, support: "supported" },
    { names: ["--membw"], value: { type: "none" }, key: "membw", default: false, help: "also measure the memory read bandwidth and the share of it each tg test reaches", group: O, support: "supported" },
    { names: ["--expert-ram"], value: { type: "int", min: 1 }, hint: "<MiB>", key: "expertRamMiB", default: 0, help: "read routed experts from the file on demand into a RAM cache of this many MiB (the NVMe tier; default: all mapped)", group: O, support: "supported" },
    { names: ["--card-budget"], value: { type: "int", min: 1 }, hint: "<MiB>", key: "cardBudgetMiB", default: 0, help: "plan as if the card had at most this much free (the server's flag): a model larger than it keeps its first layers' routed experts in host RAM", group: O, support: "supported" },
    { names: ["--promote-slots"], value: { type: "int", min: 0, keywords: { auto: -1 } }, hint: "<N|auto>", key: "promoteSlots", default: -1, help: "with routed experts in host RAM because of --card-budget: card slots a host layer for the most used experts (the server's flag; default auto)", group: O, support: "supported" },
    refuse(O, ["--numa"], "NUMA strategies are not supported yet", "numa mode", { hint: "<distribute|isolate|numactl>" }),
    { names: ["--prio"], value: { type: "int", min: -1, max: 3 }, hint: "<-1|0|1|2|3>", key: "prio", default: 0, help: "process/thread priority (only 0 here)", group: O, support: "supported", check: (v) => (v === 0 ? undefined : "0 (priorities are not supported)") },
    { names: ["-m", "--model"], value: { type: "list", of: { type: "string", nonEmpty: true }, split: "," }, hint: "<filename>", key: "model", default: [], repeat: "append", help: "model file(s)", group: P, support: "supported" },
    range(["-p", "--n-prompt", "-npp"], "nPrompt", [512], "prompt tokens (pp tests; with -npl each sequence's prompt)"),
    range(["-n", "--n-gen", "-ntg"], "nGen", [128], "generated tokens (tg tests; with -npl each sequence's decode steps)"),
    range(["-npl", "--n-parallel"], "npl", [], "parallel sequences: batched decode tests as llama-batched-bench runs them (each sequence a -p prompt, then -n steps advancing all of them in one forward pass)"),
    { names: ["-tgs"], value: { type: "none" }, key: "tgSeparate", default: false, help: "with -npl: generate for one sequence after another instead of all in one batch (llama-batched-bench's -tgs)", group: P, support: "supported" },
    refuse(P, ["-pps"], "shared prompts are not implemented: with -npl each sequence gets its own prompt of -p tokens", "with -npl: one prompt shared by all sequences"),
    { names: ["-pg"], value: { type: "list", of: { type: "string" } }, hint: "<pp,tg>", key: "pg", default: [], repeat: "append", help: "prompt then generation tests", group: P, support: "supported" },
    range(["-d", "--n-depth"], "nDepth", [0], "tokens already in the context"),
    range(["-b", "--batch-size"], "nBatch", [2048], "logical batch size (prompt tokens per decode call)"),
    range(["-ub", "--ubatch-size"], "nUbatch", [512], "physical batch size (tokens per forward)"),
    { names: ["-ctk", "--cache-type-k"], value: { type: "list", of: { type: "enum", values: ["f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"], supported: ["f16"], refusedReason: "the KV cache is f16" }, split: "," }, hint: "<t>", key: "typeK", default: ["f16"], repeat: "append", help: "K cache type", group: P, support: "supported" },
    { names: ["-ctv", "--cache-type-v"], value: { type: "list", of: { type: "enum", values: ["f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"], supported: ["f16"], refusedReason: "the KV cache is f16" }, split: "," }, hint: "<t>", key: "typeV", default: ["f16"], repeat: "append", help: "V cache type", group: P, support: "supported" },
    range(["-t", "--threads"], "nThreads", [], "threads (default: the usable cores)"),
    refuse(P, ["-C", "--cpu-mask"], PIN, "CPU affinity mask", { hint: "<hex,hex>" }),
    refuse(P, ["--cpu-strict"], PIN, "strict CPU placement", { hint: "<0|1>" }),
    refuse(P, ["--poll"], "idle workers spin for BLOOMERY_SPIN_US microseconds (default 1000), then sleep", "polling level", { hint: "<0...100>" }),
    range(["-ngl", "--n-gpu-layers"], "nGpuLayers", [-1], "layers on the GPU (reported; CPU backend)", true),
    range(["-ncmoe", "--n-cpu-moe"], "nCpuMoe", [0], "experts of the first N layers on the CPU (reported; CPU backend)"),
    { names: ["-cmoe", "--cpu-moe"], value: { type: "none" }, key: "cpuMoe", default: false, help: "every expert on the CPU (reported; CPU backend)", group: P, support: "supported" },
    { names: ["-sm", "--split-mode"], value: { type: "list", of: { type: "enum", values: ["none", "layer", "row", "tensor"] }, split: "," }, hint: "<none|layer|row|tensor>", key: "splitMode", default: ["layer"], repeat: "append", help: "split mode (reported; CPU backend)", group: P, support: "supported" },
    range(["-mg", "--main-gpu"], "mainGpu", [0], "main GPU (reported; CPU backend)"),
    toggles(["-nkvo", "--no-kv-offload"], "noKvOffload", [false], "KV cache kept off the GPU (reported; CPU backend)"),
    { names: ["-fa", "--flash-attn"], value: { type: "list", of: ON_OFF_AUTO, split: "," }, hint: "<on|off|auto>", key: "flashAttn", default: ["auto"], repeat: "append", help: "flash attention (the CPU attention is the same either way)", group: P, support: "supported" },
    refuse(P, ["-dev", "--device"], CPU_ONLY, "devices", { hint: "<dev0/dev1/...>" }),
    toggles(["-mmp", "--mmap"], "mmap", [true], "map the model file (weights are always mapped)"),
    toggles(["-embd", "--embeddings"], "embeddings", [false], "embeddings (only 0)"),
    refuse(P, ["-ts", "--tensor-split"], CPU_ONLY, "tensor split", { hint: "<ts0/ts1/..>" }),
    { names: ["-ot", "--override-tensor"], value: { type: "list", of: { type: "string" } }, hint: "<tensor name pattern>=<buffer type>;...", key: "overrideTensor", default: [], repeat: "append", help: "tensor placement overrides; each occurrence is one test value (reported; CPU backend)", group: P, support: "supported" },
    toggles(["-nopo", "--no-op-offload"], "noOpOffload", [false], "no op offload (reported; CPU backend)"),
    toggles(["--no-host"], "noHost", [false], "no host buffers (reported; CPU backend)"),
  ],
};

export interface TensorOverrideSpec {
  pattern: RegExp;
  source: string;
  buffer: string;
}

export interface BenchParams {
  models: string[];
  nPrompt: number[];
  nGen: number[];
  pg: [number, number][];
  nDepth: number[];
  nBatch: number[];
  nUbatch: number[];
  nThreads: number[];
  nGpuLayers: number[];
  nCpuMoe: number[];
  cpuMoe: boolean;
  splitMode: string[];
  mainGpu: number[];
  noKvOffload: boolean[];
  flashAttn: string[];
  overrides: { text: string; list: TensorOverrideSpec[] }[];
  noOpOffload: boolean[];
  noHost: boolean[];
  reps: number;
  delay: number;
  output: string;
  outputErr: string;
  verbose: boolean;
  progress: boolean;
  warmup: boolean;
  membw: boolean;
  /** --expert-ram: MiB of RAM for routed experts read on demand (0: every tensor mapped) */
  expertRamMiB: number;
  /** --card-budget: MiB the plan may use on the card (0: what it has free) */
  cardBudgetMiB: number;
  /** --promote-slots: card slots a host layer under --card-budget (-1: auto) */
  promoteSlots: number;
  /** -npl: numbers of parallel sequences (batched decode tests); empty: llama-bench's tests */
  npl: number[];
  /** -tgs: with -npl, generation one sequence after another */
  tgSeparate: boolean;
  /** keys given with other values than llama-bench's defaults (they get table columns) */
  changed: Set<string>;
}

const nums = (v: FlagValue | undefined): number[] => (Array.isArray(v) ? v.map(Number) : []);
const bools = (v: FlagValue | undefined): boolean[] => (Array.isArray(v) ? v.map(Boolean) : []);
const strs = (v: FlagValue | undefined): string[] => (Array.isArray(v) ? v.map(String) : []);

/** One `-ot` value: `pattern=buffer` entries separated by `;`. */
export function parseOverrides(text: string): TensorOverrideSpec[] {
  const out: TensorOverrideSpec[] = [];
  for (const part of text.split(";")) {
    if (part === "") continue;
    const eq = part.lastIndexOf("=");
    if (eq <= 0 || eq === part.length - 1) throw new FlagError("-ot", `invalid value for -ot: ${JSON.stringify(part)} (expected <tensor name pattern>=<buffer type>)`, { value: part });
    const source = part.slice(0, eq), buffer = part.slice(eq + 1);
    let pattern: RegExp;
    try {
      pattern = new RegExp(source);
    } catch (e) {
      throw new FlagError("-ot", `invalid value for -ot: ${JSON.stringify(source)} is not a regular expression (${e instanceof Error ? e.message : String(e)})`, { value: part });
    }
    if (!/^(CPU|CUDA\d+|Metal|CPU_REPACK)$/.test(buffer)) throw new FlagError("-ot", `invalid value for -ot: unknown buffer type ${JSON.stringify(buffer)} (CPU, CUDA0, ...)`, { value: part });
    out.push({ pattern, source, buffer });
  }
  return out;
}

/** Most parallel sequences -npl takes (each a slot of the test's context and a row of logits). */
export const MAX_NPL = 1024;

/** -npl's values and what they need from the other flags. */
function checkNpl(npl: number[], nGen: number[], pg: [number, number][], membw: boolean): void {
  const bad = npl.find((n) => n < 1 || n > MAX_NPL);
  if (bad !== undefined) throw new FlagError("-npl", `invalid value for -npl: ${bad} (each number of parallel sequences must be 1..${MAX_NPL})`, { value: String(bad) });
  if (nGen.some((n) => n < 1) || pg.some(([, tg]) => tg < 1)) throw new FlagError("-n", "with -npl every -n (and -pg generation) value must be at least 1: a batched decode test needs decode steps");
  if (membw) throw new FlagError("--membw", "--membw measures one-sequence tg tests; it is not available with -npl");
}

/** Parses a bench command line; `help` set when -h was given. */
export function parseBenchArgs(argv: readonly string[], env: Env, defaultThreads: number): { help: boolean; params?: BenchParams } {
  const r = parseWithTable(BENCH_FLAG_TABLE, argv, env);
  if (r.action === "help") return { help: true };
  const v = r.values;
  const changed = new Set(Object.keys(r.origins));
  const pg: [number, number][] = strs(v.pg).map((s) => {
    const m = /^(\d+),(\d+)$/.exec(s);
    if (!m) throw new FlagError("-pg", `invalid value for -pg: ${JSON.stringify(s)} (expected <pp>,<tg>)`, { value: s });
    return [Number(m[1]), Number(m[2])];
  });
  const models = strs(v.model);
  if (models.length === 0) throw new FlagError("-m", "bench needs a model: -m <file.gguf>");
  for (const [key, flag] of [["mmap", "-mmp"], ["embeddings", "-embd"]] as const) {
    const want = key === "mmap";
    if (bools(v[key]).some((b) => b !== want)) throw new FlagError(flag, `${flag} ${want ? 0 : 1} is recognised but not available: ${key === "mmap" ? "weights are always mapped" : "embedding output is not supported"}`);
  }
  for (const [key, flag] of [["nUbatch", "-ub"], ["nBatch", "-b"], ["nThreads", "-t"]] as const) {
    if (nums(v[key]).some((n) => n < 1)) throw new FlagError(flag, `invalid value for ${flag}: every value must be at least 1`);
  }
  const threads = nums(v.nThreads);
  const npl = nums(v.npl);
  if (npl.length) checkNpl(npl, nums(v.nGen), pg, v.membw === true);
  else if (v.tgSeparate === true) throw new FlagError("-tgs", "-tgs needs -npl: it separates the generation of parallel sequences");
  return {
    help: false,
    params: {
      models,
      nPrompt: nums(v.nPrompt),
      nGen: nums(v.nGen),
      pg,
      nDepth: nums(v.nDepth),
      nBatch: nums(v.nBatch),
      nUbatch: nums(v.nUbatch),
      nThreads: threads.length ? threads : [defaultThreads],
      nGpuLayers: nums(v.nGpuLayers),
      nCpuMoe: nums(v.nCpuMoe),
      cpuMoe: v.cpuMoe === true,
      splitMode: strs(v.splitMode),
      mainGpu: nums(v.mainGpu),
      noKvOffload: bools(v.noKvOffload),
      flashAttn: strs(v.flashAttn),
      overrides: strs(v.overrideTensor).length ? strs(v.overrideTensor).map((t) => ({ text: t, list: parseOverrides(t) })) : [{ text: "none", list: [] }],
      noOpOffload: bools(v.noOpOffload),
      noHost: bools(v.noHost),
      reps: Number(v.reps),
      delay: Number(v.delay),
      output: String(v.output),
      outputErr: String(v.outputErr),
      verbose: v.verbose === true,
      progress: v.progress === true,
      warmup: v.noWarmup !== true,
      membw: v.membw === true,
      expertRamMiB: Number(v.expertRamMiB ?? 0),
      cardBudgetMiB: Number(v.cardBudgetMiB ?? 0),
      promoteSlots: Number(v.promoteSlots ?? -1),
      npl,
      tgSeparate: v.tgSeparate === true,
      changed,
    },
  };
}
