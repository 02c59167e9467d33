// `bloomery-serve perplexity`: llama-perplexity's command line (tools/perplexity, the perplexity
// and KL-divergence modes) as a flag table, with the model and placement flags the server takes
// (the same definitions, from flag-table-common.ts), and the parsed parameters.
import { COMMON_FLAGS } from "./flag-table-common.ts";
import { refuse } from "./flag-define.ts";
import { parseWithTable, type Env } from "./flag-parse.ts";
import { FlagError, type FlagDef, type FlagTable, type FlagValue, type TensorOverride } from "./flag-types.ts";
import type { GpuLayers } from "../engine/placement.ts";

const P = "perplexity", M = "model";
const TASKS = "only the perplexity and KL-divergence modes are implemented";

/** The server's definitions of these keys, in this table's "model and placement" group. */
const SHARED_KEYS = ["model", "threads", "threadsBatch", "batchSize", "ubatchSize", "nGpuLayers", "devices", "cpuMoe", "nCpuMoe", "overrideTensor", "hostBudgetMiB", "cardBudgetMiB", "promoteSlots", "batchInvariant"];
const shared: FlagDef[] = SHARED_KEYS.map((k) => {
  const d = COMMON_FLAGS.find((x) => x.key === k && x.support === "supported");
  if (!d) throw new Error(`perplexity flags: no common flag with key ${k}`);
  return { ...d, group: M };
});

const flag = (names: string[], value: FlagDef["value"], key: string, help: string, extra: Partial<FlagDef> = {}): FlagDef =>
  ({ names, value, key, help, group: P, support: "supported", ...extra });

export const PERPLEXITY_TABLE: FlagTable = {
  program: "bloomery-serve perplexity",
  groups: [{ id: P, title: "perplexity: llama-perplexity's protocol" }, { id: M, title: "model and placement" }],
  flags: [
    flag(["-h", "--help", "--usage"], { type: "none" }, "help", "print this help and exit", { action: "help" }),
    flag(["-f", "--file"], { type: "string", nonEmpty: true }, "file", "the text to score (not needed with --kl-divergence: the base file holds the tokens)", { hint: "FNAME" }),
    flag(["-c", "--ctx-size"], { type: "int", min: 0 }, "ctxSize", "tokens a chunk; the second half of each chunk is scored", { default: 512, hint: "N", env: "LLAMA_ARG_CTX_SIZE" }),
    flag(["--chunks"], { type: "int", min: -1 }, "chunks", "most chunks to process (-1 = all)", { default: -1, hint: "N" }),
    flag(["--kl-divergence-base", "--save-all-logits"], { type: "string", nonEmpty: true }, "logitsFile",
      "the logits file: written by a perplexity run, read by --kl-divergence (llama-perplexity's format)", { hint: "FNAME" }),
    flag(["--kl-divergence"], { type: "none" }, "klDivergence", "compare with the logits of --kl-divergence-base: KL divergence, Δp, same top token", { default: false }),
    flag(["--ppl-output-type"], { type: "int", min: 0, max: 1 }, "pplOutputType", "0: the running figure as [chunk]ppl, ...; 1: a line a chunk (position, ppl, mean and standard error of -log p)", { default: 0, hint: "<0|1>" }),
    flag(["--json"], { type: "none" }, "json", "print one JSON object on stdout (figures, per-chunk values, timings) instead of llama's text", { default: false }),
    flag(["--exact"], { type: "none" }, "exact", "slow reference path: f32 activations, dequantized weights", { default: false }),
    refuse(P, ["--ppl-stride"], "strided perplexity (llama's perplexity_v2) is not implemented; chunks of -c tokens are", "stride for perplexity calculation", { hint: "N" }),
    refuse(P, ["--hellaswag"], TASKS, "compute HellaSwag score over random tasks"),
    refuse(P, ["--hellaswag-tasks"], TASKS, "number of HellaSwag tasks", { hint: "N" }),
    refuse(P, ["--winogrande"], TASKS, "compute Winogrande score"),
    refuse(P, ["--winogrande-tasks"], TASKS, "number of Winogrande tasks", { hint: "N" }),
    refuse(P, ["--multiple-choice"], TASKS, "compute a multiple-choice score"),
    refuse(P, ["--multiple-choice-tasks"], TASKS, "number of multiple-choice tasks", { hint: "N" }),
    ...shared,
  ],
};

export interface PerplexityParams {
  model: string;
  file: string | undefined;
  nCtx: number;
  nBatch: number;
  nUbatch: number;
  /** -ub was given (else a host-expert placement may take a larger one) */
  ubatchGiven: boolean;
  chunks: number;
  logitsFile: string | undefined;
  klDivergence: boolean;
  outputType: 0 | 1;
  json: boolean;
  exact: boolean;
  /** 0 or less: every usable core */
  threads: number;
  threadsBatch: number;
  nGpuLayers: GpuLayers;
  device: number;
  cpuMoe: boolean;
  nCpuMoe: number;
  overrides: TensorOverride[];
  hostBudgetMiB: number;
  cardBudgetMiB: number;
  /** undefined: not given */
  promoteSlots: number | undefined;
  batchInvariant: boolean;
  /** keys given on the command line or in the environment */
  given: Set<string>;
}

const num = (v: FlagValue | undefined): number => (typeof v === "number" ? v : Number.NaN);

function gpuLayers(v: FlagValue | undefined): GpuLayers {
  if (v === "auto" || v === "all") return v;
  const n = num(v);
  return n === -1 ? "auto" : n < -1 ? "all" : n;
}

/** -dev as the server reads it: none is the CPU, CUDAn the card n. */
function deviceOf(v: FlagValue | undefined): { none: boolean; device: number } {
  const d = Array.isArray(v) ? v.map(String) : [];
  if (d.length === 0) return { none: false, device: 0 };
  if (d.length === 1 && d[0] === "none") return { none: true, device: 0 };
  const m = d.length === 1 ? /^CUDA(\d+)$/i.exec(d[0]) : null;
  if (!m) throw new FlagError("-dev", `-dev ${d.join(",")}: bloomery runs a model on one card (CUDA0, CUDA1, ...) or on the CPU (none)`);
  return { none: false, device: Number(m[1]) };
}

/** Parses a perplexity command line; undefined when -h was given. */
export function parsePerplexityArgs(argv: readonly string[], env: Env): PerplexityParams | undefined {
  const r = parseWithTable(PERPLEXITY_TABLE, argv, env);
  if (r.action === "help") return undefined;
  const v = r.values;
  const given = new Set(Object.keys(r.origins));
  if (typeof v.model !== "string") throw new FlagError("-m", "perplexity needs a model: -m FILE.gguf");
  const klDivergence = v.klDivergence === true;
  const logitsFile = typeof v.logitsFile === "string" ? v.logitsFile : undefined;
  const file = typeof v.file === "string" ? v.file : undefined;
  if (klDivergence && !logitsFile) throw new FlagError("--kl-divergence", "--kl-divergence needs the base model's logits: --kl-divergence-base FILE (written by a perplexity run with that flag)");
  if (!klDivergence && !file) throw new FlagError("-f", "perplexity needs a text to score: -f FILE");
  const nCtx = num(v.ctxSize);
  if (nCtx <= 0) throw new FlagError("-c", "perplexity tool requires '--ctx-size' > 0");
  const dev = deviceOf(v.devices);
  const overrides = (Array.isArray(v.overrideTensor) ? v.overrideTensor : []) as TensorOverride[];
  return {
    model: v.model,
    file,
    nCtx,
    nBatch: num(v.batchSize),
    nUbatch: num(v.ubatchSize),
    ubatchGiven: given.has("ubatchSize"),
    chunks: num(v.chunks),
    logitsFile,
    klDivergence,
    outputType: num(v.pplOutputType) === 1 ? 1 : 0,
    json: v.json === true,
    exact: v.exact === true,
    threads: num(v.threads),
    threadsBatch: num(v.threadsBatch),
    nGpuLayers: dev.none ? 0 : gpuLayers(v.nGpuLayers),
    device: dev.device,
    cpuMoe: v.cpuMoe === true,
    nCpuMoe: num(v.nCpuMoe),
    overrides,
    hostBudgetMiB: num(v.hostBudgetMiB),
    cardBudgetMiB: num(v.cardBudgetMiB),
    promoteSlots: given.has("promoteSlots") ? num(v.promoteSlots) : undefined,
    batchInvariant: v.batchInvariant === true,
    given,
  };
}
