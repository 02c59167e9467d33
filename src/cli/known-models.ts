// bloomery CLI: the real MoE models bloomery serves by name (`-m NAME`, `--recommend`): names and
// aliases, the Hugging Face GGUF repository, the quants offered and each quant's size. Sizes are
// those of the GGUF `synth` writes for the shape and quant mix (synth-shapes.ts): tensor data
// exact, metadata within a few MB of the published file; test/agent-models.test.ts checks every
// number against synthWriter(...).writer.fileBytes().
import { GgmlType, TYPE_INFO } from "../gguf/index.ts";
import { deltanetStateFloats, type DeltaNetShape } from "../models/ops.ts";
import type { HParams } from "../models/types.ts";
import { MIXES, SHAPES, type Shape } from "./synth-shapes.ts";

export interface KnownQuant {
  /** quant tag as it appears in the repository's file names (Q4_K_M, ...) */
  name: string;
  /** bytes of the GGUF (all parts of a split set together) */
  bytes: number;
}

export interface KnownModel {
  /** canonical name (the API's model id when started by name) */
  name: string;
  /** other names it answers to (matched case-insensitively, like the name) */
  aliases: string[];
  description: string;
  /** the Hugging Face GGUF repository; null for the model built into the executable */
  repo: string | null;
  /** key of SHAPES (synth-shapes.ts); null when the shape is read from the file (the demo) */
  shape: string | null;
  /** training context the GGUF states */
  nCtxTrain: number;
  /** thinks before answering (<think> blocks) */
  thinking: boolean;
  /** quants offered, smallest first */
  quants: KnownQuant[];
}

/** Quants we recommend, in the order tried (fewest bytes read per token first). */
export const PREFERRED_QUANTS = ["Q4_K_M", "Q6_K", "Q8_0"] as const;
/** Smaller than the preferred ones, slightly lower quality: used only when none of those fits. */
export const FALLBACK_QUANTS = ["IQ4_XS"] as const;
/** The quant `-hf` takes when none is given (llama's default tag). */
export const DEFAULT_QUANT = "Q4_K_M";

// sizes per shape (bytes of the synth GGUF; see the header)
const QWEN3_30B_A3B: KnownQuant[] = [
  { name: "IQ4_XS", bytes: 16360340928 },
  { name: "Q4_K_M", bytes: 18556542400 },
  { name: "Q6_K", bytes: 25092388288 },
  { name: "Q8_0", bytes: 32483788224 },
  { name: "BF16", bytes: 61095658944 },
];
const QWEN3_235B_A22B: KnownQuant[] = [
  { name: "IQ4_XS", bytes: 125252965856 },
  { name: "Q4_K_M", bytes: 142153930208 },
  { name: "Q6_K", bytes: 193015350752 },
  { name: "Q8_0", bytes: 249939961312 },
  { name: "BF16", bytes: 470293292512 },
];

/** bytes of the built-in demo model (15.5 MB, Q8_0): read from the file when asked (see demoQuants). */
export const DEMO_NAME = "bloomery-demo";

export const KNOWN_MODELS: readonly KnownModel[] = [
  {
    name: "Qwen3-30B-A3B-Instruct-2507",
    aliases: ["qwen3-30b-a3b-instruct", "qwen3-30b-instruct", "qwen3-30b-a3b-2507"],
    description: "Qwen3 30B MoE (3B active), instruct, no thinking, 256K context",
    repo: "unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF",
    shape: "qwen3-30b-a3b",
    nCtxTrain: 262144,
    thinking: false,
    quants: QWEN3_30B_A3B,
  },
  {
    name: "Qwen3-30B-A3B-Thinking-2507",
    aliases: ["qwen3-30b-a3b-thinking", "qwen3-30b-thinking"],
    description: "Qwen3 30B MoE (3B active), always thinks, 256K context",
    repo: "unsloth/Qwen3-30B-A3B-Thinking-2507-GGUF",
    shape: "qwen3-30b-a3b",
    nCtxTrain: 262144,
    thinking: true,
    quants: QWEN3_30B_A3B,
  },
  {
    name: "Qwen3-30B-A3B",
    aliases: ["qwen3-30b", "qwen3-30b-a3b-hybrid"],
    description: "Qwen3 30B MoE (3B active), the original hybrid model: thinks unless told not to (enable_thinking), 40K context",
    repo: "unsloth/Qwen3-30B-A3B-GGUF",
    shape: "qwen3-30b-a3b",
    nCtxTrain: 40960,
    thinking: true,
    quants: QWEN3_30B_A3B,
  },
  {
    name: "Qwen3-Coder-30B-A3B-Instruct",
    aliases: ["qwen3-coder-30b-a3b", "qwen3-coder-30b", "qwen3-coder"],
    description: "Qwen3 Coder 30B MoE (3B active): code and agentic tool use, 256K context",
    repo: "unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF",
    shape: "qwen3-30b-a3b",
    nCtxTrain: 262144,
    thinking: false,
    quants: QWEN3_30B_A3B,
  },
  {
    name: "Qwen3-235B-A22B-Instruct-2507",
    aliases: ["qwen3-235b-a22b-instruct", "qwen3-235b-instruct", "qwen3-235b"],
    description: "Qwen3 235B MoE (22B active), instruct, no thinking, 256K context",
    repo: "unsloth/Qwen3-235B-A22B-Instruct-2507-GGUF",
    shape: "qwen3-235b-a22b",
    nCtxTrain: 262144,
    thinking: false,
    quants: QWEN3_235B_A22B,
  },
  {
    name: DEMO_NAME,
    aliases: ["demo"],
    description: "the demo built into this executable: a 15 MB Qwen3-MoE that writes Python (no download)",
    repo: null,
    shape: null,
    nCtxTrain: 32768,
    thinking: false,
    quants: [], // filled from the embedded file by the caller (its size depends on the build)
  },
];

const norm = (s: string) => s.toLowerCase();

/** The known model `text` names (name or alias, any case), with a `:QUANT` suffix if given. */
export function findKnownModel(text: string): { model: KnownModel; quant?: string } | undefined {
  const colon = text.lastIndexOf(":");
  const candidates: [string, string | undefined][] = [[text, undefined]];
  if (colon > 0) candidates.push([text.slice(0, colon), text.slice(colon + 1)]);
  for (const [name, quant] of candidates) {
    const m = KNOWN_MODELS.find((k) => norm(k.name) === norm(name) || k.aliases.some((a) => norm(a) === norm(name)));
    if (m) return quant ? { model: m, quant } : { model: m };
  }
  return undefined;
}

/** The known model whose repository is `repo` (case-insensitive). */
export function knownModelByRepo(repo: string): KnownModel | undefined {
  return KNOWN_MODELS.find((k) => k.repo !== null && norm(k.repo) === norm(repo));
}

/** The offered quant named `tag` (case-insensitive). */
export function knownQuant(m: KnownModel, tag: string): KnownQuant | undefined {
  return m.quants.find((q) => norm(q.name) === norm(tag));
}

function editDistance(a: string, b: string): number {
  const prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diag = prev[0];
    prev[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = prev[j];
      prev[j] = Math.min(prev[j] + 1, prev[j - 1] + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = up;
    }
  }
  return prev[b.length];
}

/**
 * Known names close to `text`: those containing it or contained in it, then those within a third
 * of their length in edits; canonical names, best first, at most `max`.
 */
export function closeKnownNames(text: string, max = 3): string[] {
  const t = norm(text.replace(/\.gguf$/i, "").replace(/^.*\//, ""));
  if (t === "") return [];
  const scored: { name: string; score: number }[] = [];
  for (const m of KNOWN_MODELS) {
    let best = Infinity;
    for (const n of [m.name, ...m.aliases].map(norm)) {
      const d = n.includes(t) || t.includes(n) ? Math.abs(n.length - t.length) / 100 : editDistance(t, n);
      if (d <= Math.max(2, Math.floor(n.length / 3))) best = Math.min(best, d);
    }
    if (best < Infinity) scored.push({ name: m.name, score: best });
  }
  return scored.sort((a, b) => a.score - b.score).slice(0, max).map((s) => s.name);
}

/** A known hybrid's delta-net layer shape (its value heads as wide as its key heads). */
function hybridShape(h: NonNullable<Shape["hybrid"]>): DeltaNetShape {
  return { nKHeads: h.nKHeads, nVHeads: h.nVHeads, headK: h.headK, headV: h.headK, convKernel: h.conv };
}

/** The hyper-parameters of a known shape (what the model family reads from the GGUF). */
export function shapeHParams(shape: Shape, nCtxTrain: number): HParams {
  const h = shape.hybrid;
  return {
    arch: shape.arch,
    nVocab: shape.nVocab,
    nEmbd: shape.nEmbd,
    nLayer: shape.nLayer,
    nCtxTrain,
    nHead: shape.nHead,
    nHeadKv: shape.nHeadKv,
    headDim: shape.headDim,
    nFf: shape.nFfExp,
    nExpert: shape.nExpert,
    nExpertUsed: shape.nExpertUsed,
    eps: Math.fround(shape.eps), // the GGUF stores it as f32
    // the Qwen hybrids keep a KV cache in their full-attention layers only (every interval-th), a recurrent state in the others
    kvLayers: h ? Math.floor(shape.nLayer / h.interval) : shape.nLayer,
    ...(h ? {
      rsLayers: shape.nLayer - Math.floor(shape.nLayer / h.interval),
      rsDim: deltanetStateFloats(hybridShape(h)),
      deltanet: hybridShape(h),
    } : {}),
  };
}

/** The shape of a known model (undefined for the demo, whose shape is in its file). */
export function knownShape(m: KnownModel): Shape | undefined {
  return m.shape ? SHAPES[m.shape] : undefined;
}

function typeBytes(t: GgmlType, elems: number): number {
  const info = TYPE_INFO[t];
  return (elems / info.blockElems) * info.blockBytes;
}

/** Bytes of token_embd of a shape in a quant mix (a token reads one row of it); undefined when the mix is unknown. */
export function tokenEmbdBytes(shape: Shape, quant: string): number | undefined {
  const mix = MIXES[quant.toUpperCase()];
  return mix ? typeBytes(mix.typeOf("token_embd", -1, shape.nLayer), shape.nEmbd * shape.nVocab) : undefined;
}

/** Bytes of the routed experts' tensors (ffn_gate/up/down_exps) of a shape in a quant mix; undefined when the mix is unknown. */
export function expertBytes(shape: Shape, quant: string): number | undefined {
  const mix = MIXES[quant.toUpperCase()];
  if (!mix) return undefined;
  const slab = shape.nEmbd * shape.nFfExp * shape.nExpert;
  let n = 0;
  for (let i = 0; i < shape.nLayer; i++) {
    n += typeBytes(mix.typeOf("ffn_gate_exps", i, shape.nLayer), slab);
    n += typeBytes(mix.typeOf("ffn_up_exps", i, shape.nLayer), slab);
    n += typeBytes(mix.typeOf("ffn_down_exps", i, shape.nLayer), slab);
  }
  return n;
}
