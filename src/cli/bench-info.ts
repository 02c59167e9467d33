// `bloomery-serve bench`: what llama-bench reports about a model (its description "arch size
// ftype", bytes and parameters of all tensors) and the weight bytes one generated token reads.

import { readFileSync } from "node:fs";
import type { GgufFile } from "../gguf/index.ts";
import { FILE_TYPE_NAMES } from "../gguf/types.ts";

export interface ModelInfo {
  /** llama's model description: `qwen3moe 30B.A3B Q4_K - Medium` */
  desc: string;
  /** bytes of all tensors */
  size: number;
  /** elements of all tensors */
  nParams: number;
  /** weight bytes one token reads at batch 1: every matrix but the token table, the used experts */
  bytesPerToken: number;
}

/** llama's size label of a few known shapes (by architecture and layer count); `?B` otherwise. */
function sizeLabel(arch: string, layers: number): string {
  const known: Record<string, Record<number, string>> = {
    qwen3moe: { 48: "30B.A3B", 94: "235B.A22B" },
    qwen3: { 28: "1.7B", 36: "4B", 40: "14B", 64: "32B" },
  };
  return known[arch]?.[layers] ?? "?B";
}

function num(f: GgufFile, key: string): number | undefined {
  const kv = f.kv.get(key);
  if (!kv) return undefined;
  const v = Number(kv.value);
  return Number.isFinite(v) ? v : undefined;
}

export function modelInfo(f: GgufFile): ModelInfo {
  const arch = String(f.kv.get("general.architecture")?.value ?? "?");
  const layers = num(f, `${arch}.block_count`) ?? 0;
  const ftype = num(f, "general.file_type");
  const ftypeName = ftype === undefined ? "?" : (FILE_TYPE_NAMES[ftype] ?? `ftype ${ftype}`);
  const nExpert = num(f, `${arch}.expert_count`) ?? 0;
  const nUsed = num(f, `${arch}.expert_used_count`) ?? 0;
  let size = 0, nParams = 0, perToken = 0;
  const hasOutput = f.tensors.has("output.weight");
  for (const t of f.tensors.values()) {
    const n = t.ne.reduce((a, b) => a * b, 1);
    size += t.nbytes;
    nParams += n;
    if (t.name === "token_embd.weight") {
      perToken += hasOutput ? t.nbytes / (t.ne[1] ?? 1) : t.nbytes; // one row, or the whole table as the tied head
    } else if (/_exps\.weight$/.test(t.name) && nExpert > 0) {
      perToken += (t.nbytes * nUsed) / nExpert;
    } else {
      perToken += t.nbytes;
    }
  }
  return { desc: `${arch} ${sizeLabel(arch, layers)} ${ftypeName}`, size, nParams, bytesPerToken: perToken };
}

/** The CPU's model name, as llama-bench's cpu_info gives it. */
export function cpuInfo(): string {
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"));
    return m ? m[1].trim() : "";
  } catch {
    return "";
  }
}
