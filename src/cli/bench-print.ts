// `bloomery-serve bench`: llama-bench's output formats - the markdown table (its column layout,
// widths and the columns shown only for non-default parameters), CSV, JSON and JSON lines.

export interface BenchResult {
  buildCommit: string;
  cpuInfo: string;
  cpuPath: string;
  modelFilename: string;
  modelType: string;
  modelSize: number;
  modelNParams: number;
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
  noOpOffload: boolean;
  noHost: boolean;
  nPrompt: number;
  nGen: number;
  nDepth: number;
  testTime: string;
  samplesNs: number[];
  /** the backend that ran the test ("CPU" when absent) and the card's name (CUDA) */
  backend?: string;
  gpuInfo?: string;
}

export type Kind = "string" | "bool" | "int" | "float";

export const mean = (v: number[]): number => (v.length ? v.reduce((a, b) => a + b, 0) / v.length : 0);
/** Sample standard deviation, as llama-bench computes it (0 for one sample). */
export const stdev = (v: number[]): number => {
  if (v.length <= 1) return 0;
  const m = mean(v);
  return Math.sqrt(v.reduce((a, b) => a + (b - m) * (b - m), 0) / (v.length - 1));
};

export function samplesTs(r: BenchResult): number[] {
  const n = r.nPrompt + r.nGen;
  return r.samplesNs.map((ns) => (1e9 * n) / ns);
}
export const avgTs = (r: BenchResult): number => mean(samplesTs(r));
export const stdevTs = (r: BenchResult): number => stdev(samplesTs(r));

const FA: Record<string, number> = { auto: -1, off: 0, on: 1 };

/** llama-bench's fields, in its order, with their kinds and this result's values. */
function fields(r: BenchResult): [string, Kind, string][] {
  const b = (x: boolean): string => (x ? "1" : "0");
  return [
    ["build_commit", "string", r.buildCommit],
    ["build_number", "int", "0"],
    ["cpu_info", "string", r.cpuInfo],
    ["gpu_info", "string", r.gpuInfo ?? ""],
    ["backends", "string", r.backend ?? "CPU"],
    ["model_filename", "string", r.modelFilename],
    ["model_type", "string", r.modelType],
    ["model_size", "int", String(r.modelSize)],
    ["model_n_params", "int", String(r.modelNParams)],
    ["n_batch", "int", String(r.nBatch)],
    ["n_ubatch", "int", String(r.nUbatch)],
    ["n_threads", "int", String(r.nThreads)],
    ["cpu_mask", "string", "0x0"],
    ["cpu_strict", "bool", "0"],
    ["poll", "int", "50"],
    ["type_k", "string", "f16"],
    ["type_v", "string", "f16"],
    ["n_gpu_layers", "int", String(r.nGpuLayers)],
    ["n_cpu_moe", "int", String(r.nCpuMoe)],
    ["split_mode", "string", r.splitMode],
    ["main_gpu", "int", String(r.mainGpu)],
    ["no_kv_offload", "bool", b(r.noKvOffload)],
    ["flash_attn", "int", String(FA[r.flashAttn] ?? -1)],
    ["devices", "string", "auto"],
    ["tensor_split", "string", "0.00"],
    ["tensor_buft_overrides", "string", r.overrides],
    ["load_mode", "string", "mmap"],
    ["lazy_mode", "string", "auto"],
    ["embeddings", "bool", "0"],
    ["no_op_offload", "int", b(r.noOpOffload)],
    ["no_host", "bool", b(r.noHost)],
    ["fit_target", "int", "0"],
    ["fit_min_ctx", "int", "0"],
    ["n_prompt", "int", String(r.nPrompt)],
    ["n_gen", "int", String(r.nGen)],
    ["n_depth", "int", String(r.nDepth)],
    ["test_time", "string", r.testTime],
    ["avg_ns", "int", String(Math.round(mean(r.samplesNs)))],
    ["stddev_ns", "int", String(Math.round(stdev(r.samplesNs)))],
    ["avg_ts", "float", avgTs(r).toFixed(6)],
    ["stddev_ts", "float", stdevTs(r).toFixed(6)],
    ["cpu_path", "string", r.cpuPath],
  ];
}

/** A number as a C++ stream prints a double by default (6 significant digits). */
export function g6(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  if (x === 0) return "0";
  const e = Math.floor(Math.log10(Math.abs(x)));
  if (e < -5 || e >= 6) return x.toExponential(5).replace(/\.?0+e/, "e").replace(/e([+-])(\d)$/, "e$10$2");
  return x.toFixed(Math.max(0, 5 - e)).replace(/\.?0+$/, "");
}

function escapeJson(s: string): string {
  let out = "";
  for (const ch of s) {
    const c = ch.codePointAt(0) ?? 0;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (c <= 0x1f) out += `\\u${c.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return out;
}

export function jsonValue(kind: Kind, value: string): string {
  if (kind === "string") return `"${escapeJson(value)}"`;
  if (kind === "bool") return value === "0" ? "false" : "true";
  return value;
}

export interface Printer {
  header(): string;
  test(r: BenchResult): string;
  footer(): string;
}

export class CsvPrinter implements Printer {
  header(): string {
    return fields(EMPTY).map((f) => f[0]).join(",") + "\n";
  }
  test(r: BenchResult): string {
    return fields(r).map((f) => `"${f[2].replaceAll('"', '""')}"`).join(",") + "\n";
  }
  footer(): string {
    return "";
  }
}

export class JsonPrinter implements Printer {
  private first = true;
  header(): string {
    return "[\n";
  }
  test(r: BenchResult): string {
    const lines = fields(r).map(([k, kind, v]) => `    "${k}": ${jsonValue(kind, v)},\n`).join("");
    const sep = this.first ? "" : ",\n";
    this.first = false;
    return `${sep}  {\n${lines}    "samples_ns": [ ${r.samplesNs.join(", ")} ],\n    "samples_ts": [ ${samplesTs(r).map(g6).join(", ")} ]\n  }`;
  }
  footer(): string {
    return "\n]\n";
  }
}

export class JsonlPrinter implements Printer {
  header(): string {
    return "";
  }
  test(r: BenchResult): string {
    const body = fields(r).map(([k, kind, v]) => `"${k}": ${jsonValue(kind, v)}, `).join("");
    return `{${body}"samples_ns": [ ${r.samplesNs.join(", ")} ],"samples_ts": [ ${samplesTs(r).map(g6).join(", ")} ]}\n`;
  }
  footer(): string {
    return "";
  }
}

/** The markdown columns beyond model/size/params/backend/threads/test/t/s that are shown (llama's rule: parameters given with more than one value or a non-default one). */
export type OptionalColumn = "n_cpu_moe" | "n_batch" | "n_ubatch" | "main_gpu" | "split_mode" | "no_kv_offload" | "flash_attn" | "tensor_buft_overrides" | "no_op_offload" | "no_host";

const DISPLAY: Record<string, string> = {
  n_gpu_layers: "ngl", split_mode: "sm", n_threads: "threads", no_kv_offload: "nkvo", flash_attn: "fa",
  embeddings: "embd", no_op_offload: "nopo", no_host: "noh", tensor_buft_overrides: "ot",
};
const WIDTH: Record<string, number> = {
  model: -30, "t/s": 20, size: 10, params: 10, n_gpu_layers: 3, n_threads: 7, n_batch: 7, n_ubatch: 8,
  type_k: 6, type_v: 6, split_mode: 6, flash_attn: 3, test: 15, no_op_offload: 4, no_host: 4,
};

function width(field: string): number {
  if (WIDTH[field] !== undefined) return WIDTH[field];
  const w = Math.max(field.length, 10);
  const kind = fields(EMPTY).find((f) => f[0] === field)?.[1] ?? "string";
  return kind === "string" ? -w : w;
}

const pad = (s: string, w: number): string => (w < 0 ? s.padEnd(-w) : s.padStart(w));

export function testName(r: { nPrompt: number; nGen: number; nDepth: number }): string {
  let s = r.nPrompt > 0 && r.nGen === 0 ? `pp${r.nPrompt}` : r.nGen > 0 && r.nPrompt === 0 ? `tg${r.nGen}` : `pp${r.nPrompt}+tg${r.nGen}`;
  if (r.nDepth > 0) s += ` @ d${r.nDepth}`;
  return s;
}

export function formatSize(bytes: number): string {
  return bytes < 1024 ** 3 ? `${(bytes / 1024 / 1024).toFixed(2)} MiB` : `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
}

export function formatParams(n: number): string {
  return n < 1e9 ? `${(n / 1e6).toFixed(2)} M` : `${(n / 1e9).toFixed(2)} B`;
}

export class MarkdownPrinter implements Printer {
  private readonly cols: string[];
  constructor(
    optional: ReadonlySet<OptionalColumn>,
    private readonly commit: string,
    private readonly note: string,
  ) {
    const order: OptionalColumn[] = ["n_cpu_moe"];
    const after: OptionalColumn[] = ["n_batch", "n_ubatch", "main_gpu", "split_mode", "no_kv_offload", "flash_attn", "tensor_buft_overrides", "no_op_offload", "no_host"];
    this.cols = ["model", "size", "params", "backend", ...order.filter((c) => optional.has(c)), "n_threads", ...after.filter((c) => optional.has(c)), "test", "t/s"];
  }
  header(): string {
    const head = "|" + this.cols.map((c) => ` ${pad(DISPLAY[c] ?? c, width(c))} |`).join("");
    const rule = "|" + this.cols.map((c) => ` ${"-".repeat(Math.abs(width(c)) - 1)}${width(c) > 0 ? ":" : "-"} |`).join("");
    return `${head}\n${rule}\n`;
  }
  test(r: BenchResult): string {
    const vmap = new Map(fields(r).map((f) => [f[0], f[2]]));
    const cell = (c: string): string => {
      switch (c) {
        case "model": return r.modelType;
        case "size": return formatSize(r.modelSize);
        case "params": return formatParams(r.modelNParams);
        case "backend": return r.backend ?? "CPU";
        case "test": return testName(r);
        case "t/s": return `${avgTs(r).toFixed(2)} ± ${stdevTs(r).toFixed(2)}`;
        default: return vmap.get(c) ?? "";
      }
    };
    return "|" + this.cols.map((c) => ` ${pad(cell(c), width(c))} |`).join("") + "\n";
  }
  footer(): string {
    return `\nbuild: ${this.commit} (0)${this.note ? `\n${this.note}` : ""}\n`;
  }
}

const EMPTY: BenchResult = {
  buildCommit: "", cpuInfo: "", cpuPath: "", modelFilename: "", modelType: "", modelSize: 0, modelNParams: 0,
  nBatch: 0, nUbatch: 0, nThreads: 0, nGpuLayers: 0, nCpuMoe: 0, splitMode: "", mainGpu: 0, noKvOffload: false,
  flashAttn: "auto", overrides: "", noOpOffload: false, noHost: false, nPrompt: 0, nGen: 0, nDepth: 0, testTime: "", samplesNs: [],
};
