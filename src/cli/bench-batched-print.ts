// `bloomery-serve bench -npl`: llama-batched-bench's output - its markdown table (PP, TG, B, N_KV,
// T_PP s, S_PP t/s, T_TG s, S_TG t/s, T s, S t/s, then the generated tokens and per-sequence t/s),
// each cell the mean ± sample stddev over the runs, and its JSONL fields (plus JSON and CSV).

import { formatParams, formatSize, jsonValue, mean, stdev, type Kind } from "./bench-print.ts";

/** One output format of batched results (bench-print.ts's Printer, for these rows). */
export interface BatchedPrinter {
  header(): string;
  test(r: BatchedResult): string;
  footer(): string;
}

export interface BatchedResult {
  buildCommit: string;
  cpuInfo: string;
  cpuPath: string;
  /** the backend that ran the test ("CPU", "CUDA") and the card's name */
  backend: string;
  gpuInfo: string;
  modelFilename: string;
  modelType: string;
  modelSize: number;
  modelNParams: number;
  nBatch: number;
  nUbatch: number;
  nThreads: number;
  nGpuLayers: number;
  nCpuMoe: number;
  flashAttn: string;
  overrides: string;
  /** -tgs: the sequences generated one after another */
  tgSeparate: boolean;
  nDepth: number;
  /** prompt tokens of each sequence (PP) */
  pp: number;
  /** decode steps, a token of each sequence each (TG) */
  tg: number;
  /** sequences (B) */
  pl: number;
  testTime: string;
  /** the prompts' time and the decode steps' time of each run */
  ppNs: number[];
  tgNs: number[];
}

/** A measure over the runs. */
export interface Spread {
  mean: number;
  sd: number;
}

export interface BatchedStats {
  /** positions filled (llama-batched-bench's N_KV; the depth counted in each sequence) */
  nKv: number;
  /** tokens generated in all (B x TG) */
  nTg: number;
  tPp: Spread;
  sPp: Spread;
  tTg: Spread;
  /** aggregate decode speed: B x TG / T_TG */
  sTg: Spread;
  /** one sequence's decode speed: TG / T_TG */
  sSeq: Spread;
  t: Spread;
  s: Spread;
}

const spread = (v: number[]): Spread => ({ mean: mean(v), sd: stdev(v) });

/** The derived measures of each run (as llama-batched-bench computes them from one run), then their mean and spread. */
export function batchedStats(r: BatchedResult): BatchedStats {
  const n = Math.min(r.ppNs.length, r.tgNs.length);
  const tPp = r.ppNs.slice(0, n).map((x) => x / 1e9), tTg = r.tgNs.slice(0, n).map((x) => x / 1e9);
  const t = tPp.map((x, i) => x + tTg[i]);
  const ppTok = r.pl * r.pp, tgTok = r.pl * r.tg;
  return {
    nKv: r.pl * (r.nDepth + r.pp + r.tg),
    nTg: tgTok,
    tPp: spread(tPp),
    sPp: spread(tPp.map((x) => (ppTok > 0 && x > 0 ? ppTok / x : 0))),
    tTg: spread(tTg),
    sTg: spread(tTg.map((x) => (x > 0 ? tgTok / x : 0))),
    sSeq: spread(tTg.map((x) => (x > 0 ? r.tg / x : 0))),
    t: spread(t),
    s: spread(t.map((x) => (x > 0 ? (ppTok + tgTok) / x : 0))),
  };
}

const FA: Record<string, number> = { auto: -1, off: 0, on: 1 };

/** llama-batched-bench's JSONL fields in its order, then bloomery's (spreads, samples, model, build). */
function fields(r: BatchedResult): [string, Kind, string][] {
  const st = batchedStats(r), f = (x: number) => x.toFixed(6);
  return [
    ["n_kv_max", "int", String(st.nKv)],
    ["n_batch", "int", String(r.nBatch)],
    ["n_ubatch", "int", String(r.nUbatch)],
    ["flash_attn", "int", String(FA[r.flashAttn] ?? -1)],
    ["is_pp_shared", "int", "0"],
    ["n_gpu_layers", "int", String(r.nGpuLayers)],
    ["n_threads", "int", String(r.nThreads)],
    ["n_threads_batch", "int", String(r.nThreads)],
    ["pp", "int", String(r.pp)],
    ["tg", "int", String(r.tg)],
    ["pl", "int", String(r.pl)],
    ["n_kv", "int", String(st.nKv)],
    ["t_pp", "float", f(st.tPp.mean)],
    ["speed_pp", "float", f(st.sPp.mean)],
    ["t_tg", "float", f(st.tTg.mean)],
    ["speed_tg", "float", f(st.sTg.mean)],
    ["t", "float", f(st.t.mean)],
    ["speed", "float", f(st.s.mean)],
    ["is_tg_separate", "int", r.tgSeparate ? "1" : "0"],
    ["n_depth", "int", String(r.nDepth)],
    ["n_cpu_moe", "int", String(r.nCpuMoe)],
    ["tensor_buft_overrides", "string", r.overrides],
    ["n_tg", "int", String(st.nTg)],
    ["speed_tg_seq", "float", f(st.sSeq.mean)],
    ["reps", "int", String(Math.min(r.ppNs.length, r.tgNs.length))],
    ["t_pp_stddev", "float", f(st.tPp.sd)],
    ["speed_pp_stddev", "float", f(st.sPp.sd)],
    ["t_tg_stddev", "float", f(st.tTg.sd)],
    ["speed_tg_stddev", "float", f(st.sTg.sd)],
    ["speed_tg_seq_stddev", "float", f(st.sSeq.sd)],
    ["t_stddev", "float", f(st.t.sd)],
    ["speed_stddev", "float", f(st.s.sd)],
    ["backends", "string", r.backend],
    ["gpu_info", "string", r.gpuInfo],
    ["cpu_info", "string", r.cpuInfo],
    ["cpu_path", "string", r.cpuPath],
    ["model_filename", "string", r.modelFilename],
    ["model_type", "string", r.modelType],
    ["model_size", "int", String(r.modelSize)],
    ["model_n_params", "int", String(r.modelNParams)],
    ["build_commit", "string", r.buildCommit],
    ["test_time", "string", r.testTime],
  ];
}

const samples = (r: BatchedResult): [string, number[]][] => [["samples_pp_ns", r.ppNs], ["samples_tg_ns", r.tgNs]];

export class BatchedJsonlPrinter implements BatchedPrinter {
  header(): string {
    return "";
  }
  test(r: BatchedResult): string {
    const body = fields(r).map(([k, kind, v]) => `"${k}": ${jsonValue(kind, v)}`);
    for (const [k, v] of samples(r)) body.push(`"${k}": [${v.join(", ")}]`);
    return `{${body.join(", ")}}\n`;
  }
  footer(): string {
    return "";
  }
}

export class BatchedJsonPrinter implements BatchedPrinter {
  private first = true;
  header(): string {
    return "[\n";
  }
  test(r: BatchedResult): string {
    const lines = fields(r).map(([k, kind, v]) => `    "${k}": ${jsonValue(kind, v)}`);
    for (const [k, v] of samples(r)) lines.push(`    "${k}": [ ${v.join(", ")} ]`);
    const sep = this.first ? "" : ",\n";
    this.first = false;
    return `${sep}  {\n${lines.join(",\n")}\n  }`;
  }
  footer(): string {
    return "\n]\n";
  }
}

export class BatchedCsvPrinter implements BatchedPrinter {
  private named = false;
  header(): string {
    return "";
  }
  test(r: BatchedResult): string {
    const f = fields(r);
    const head = this.named ? "" : f.map((x) => x[0]).join(",") + "\n";
    this.named = true;
    return head + f.map((x) => `"${x[2].replaceAll('"', '""')}"`).join(",") + "\n";
  }
  footer(): string {
    return "";
  }
}

/** The markdown columns: llama-batched-bench's ten, then the tokens generated in all and one sequence's decode speed. */
const COLUMNS: [string, number][] = [
  ["PP", 6], ["TG", 6], ["B", 4], ["N_KV", 6], ["T_PP s", 15], ["S_PP t/s", 18], ["T_TG s", 15], ["S_TG t/s", 18],
  ["T s", 15], ["S t/s", 18], ["N_TG", 6], ["S_SEQ t/s", 18],
];

/** A row in llama-batched-bench's layout: `|` then the cells right-aligned, separated by ` | `. */
function row(cells: string[]): string {
  return "|" + cells.map((c, i) => `${i ? " " : ""}${c.padStart(COLUMNS[i][1])}`).join(" |") + " |\n";
}

const time = (s: Spread): string => `${s.mean.toFixed(3)} ± ${s.sd.toFixed(3)}`;
const speed = (s: Spread): string => `${s.mean.toFixed(2)} ± ${s.sd.toFixed(2)}`;

/** What a table's tests share, as llama-batched-bench's line before its table says it (one table per model and context parameters). */
function groupLine(r: BatchedResult): string {
  return `bench: ${r.modelType} (${formatSize(r.modelSize)}, ${formatParams(r.modelNParams)} params), ${r.backend}${r.gpuInfo ? ` (${r.gpuInfo})` : ""}: ` +
    `n_batch = ${r.nBatch}, n_ubatch = ${r.nUbatch}, flash_attn = ${FA[r.flashAttn] ?? -1}, is_pp_shared = 0, is_tg_separate = ${r.tgSeparate ? 1 : 0}, ` +
    `n_gpu_layers = ${r.nGpuLayers}, n_cpu_moe = ${r.nCpuMoe}${r.overrides !== "none" ? `, ot = ${r.overrides}` : ""}, n_threads = ${r.nThreads}, ` +
    `n_threads_batch = ${r.nThreads}, n_depth = ${r.nDepth}`;
}

export class BatchedMarkdownPrinter implements BatchedPrinter {
  private group: string | undefined;
  constructor(private readonly commit: string) {}

  header(): string {
    return "";
  }
  /** The table's header line and rule. */
  static tableHeader(): string {
    const rule = "|" + COLUMNS.map(([, w], i) => "-".repeat(w + (i ? 2 : 1))).join("|") + "|\n";
    return row(COLUMNS.map((c) => c[0])) + rule;
  }
  test(r: BatchedResult): string {
    const g = `${r.modelFilename}\n${groupLine(r)}`;
    let head = "";
    if (g !== this.group) {
      head = `${this.group === undefined ? "" : "\n"}${groupLine(r)}\n\n${BatchedMarkdownPrinter.tableHeader()}`;
      this.group = g;
    }
    const st = batchedStats(r);
    return head + row([String(r.pp), String(r.tg), String(r.pl), String(st.nKv), time(st.tPp), speed(st.sPp), time(st.tTg), speed(st.sTg),
      time(st.t), speed(st.s), String(st.nTg), speed(st.sSeq)]);
  }
  footer(): string {
    return `\nbuild: ${this.commit} (0)\n`;
  }
}

export function batchedPrinter(kind: string, commit: string): BatchedPrinter | undefined {
  switch (kind) {
    case "md": return new BatchedMarkdownPrinter(commit);
    case "jsonl": return new BatchedJsonlPrinter();
    case "json": return new BatchedJsonPrinter();
    case "csv": return new BatchedCsvPrinter();
    default: return undefined;
  }
}
