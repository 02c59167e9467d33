// bloomery synth: writes a GGUF with the exact tensor names, shapes and quant types of a real
// model (`qwen3-30b-a3b:Q4_K_M`, `gpt-oss-20b:MXFP4`, ...) and random contents, for benchmarks and
// tests. The family file (src/models/) names its shapes and writes its tensors; synth gives it the
// vocabulary, the fillers and the quant mix's type rules.
// Usage: bloomery-serve synth MODEL[:QUANT] -o FILE [--layers N] [--skew S] [--centered] [--seed N]
import { ptr } from "bun:ffi";
import { check, cpu } from "../../ffi/cpu.ts";
import { GgmlType, GgufValueType, GgufWriter, TYPE_INFO, type TensorFiller } from "../gguf/index.ts";
import type { Shape, SynthTensors } from "../models/synth-types.ts";
import { fallbackType, MIXES, SHAPES, synthShape } from "./synth-shapes.ts";
import { synthVocab } from "./synth-vocab.ts";

export interface SynthOptions {
  model: string;
  quant: string;
  out: string;
  /** fewer layers than the real model (0 = all) */
  layers?: number;
  /** router skew: 0 uniform; larger values make a few experts per layer chosen far more often */
  skew?: number;
  /** Q4_K / Q5_K blocks of zero mean: hidden states, and so the router's picks, vary from token to
   * token as in a trained model. Plain random K-quant blocks share a positive offset that makes every
   * token's hidden state nearly alike: a prompt then picks the same few experts in every layer. */
  centered?: boolean;
  seed?: number;
}

export interface SynthResult {
  path: string;
  bytes: number;
  seconds: number;
  tensors: number;
  params: number;
}

const CHATML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

function randomFiller(type: GgmlType, seed: bigint, std: number, centered: boolean): TensorFiller {
  const bb = TYPE_INFO[type].blockBytes;
  return (dst, start) => {
    check(cpu().bl_synth_fill(type, ptr(dst), start / bb, dst.length / bb, seed, std, centered ? 1 : 0), "synth fill");
  };
}

function f32Bytes(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** xorshift-based uniform source for the small F32 tensors */
function rng(seed: number): () => number {
  let s = (seed >>> 0) || 0x9e3779b9;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

/**
 * Router rows: random with std 1/sqrt(n_embd); with skew, expert rank r (a random order per
 * layer) has its row scaled by 1 + skew / (1 + r), so the first few win the top-k most often.
 */
function routerRows(E: number, X: number, layer: number, skew: number, seed: number): Float32Array {
  const r = rng(seed * 7919 + layer * 104729 + 1);
  const w = new Float32Array(E * X);
  const order = Array.from({ length: X }, (_, i) => i);
  for (let i = X - 1; i > 0; i--) { const j = Math.floor(r() * (i + 1)); [order[i], order[j]] = [order[j], order[i]]; }
  const std = 1 / Math.sqrt(E);
  for (let rank = 0; rank < X; rank++) {
    const e = order[rank];
    const scale = std * (skew > 0 ? 1 + skew / (1 + rank) : 1);
    for (let i = 0; i < E; i++) w[e * E + i] = (r() + r() + r() - 1.5) * 2 * scale;
  }
  return w;
}

/** The writer for a synthetic model (nothing written yet) and its parameter count. */
export function synthWriter(o: SynthOptions): { writer: GgufWriter; params: number; tensors: number } {
  const found = synthShape(o.model);
  if (!found) throw new Error(`synth: unknown model '${o.model}' (known: ${Object.keys(SHAPES).join(", ")})`);
  const { shape: base, family } = found;
  const mix = MIXES[o.quant.toUpperCase()];
  if (!mix) throw new Error(`synth: unknown quantization '${o.quant}' (known: ${Object.keys(MIXES).join(", ")})`);
  if (o.layers !== undefined && (o.layers < 0 || o.layers > base.nLayer)) throw new Error(`synth: --layers ${o.layers} is outside 1..${base.nLayer}`);
  const sh: Shape = { ...base, nLayer: o.layers || base.nLayer };
  const seed = o.seed ?? 1;
  const skew = o.skew ?? 0;
  const centered = o.centered ?? false;
  const w = new GgufWriter();
  w.str("general.architecture", sh.arch);
  w.str("general.name", `${sh.name} (synthetic${sh.nLayer !== base.nLayer ? `, ${sh.nLayer} layers` : ""}${skew ? `, skew ${skew}` : ""}${centered ? ", centered" : ""})`);
  w.str("general.type", "model");
  w.u32("general.quantization_version", 2);
  w.u32("general.file_type", mix.fileType);

  let tseed = BigInt(seed) << 20n;
  let params = 0, tensors = 0;
  const count = (ne: number[]) => {
    params += ne.reduce((p, d) => p * d, 1);
    tensors++;
  };
  const t: SynthTensors = {
    w,
    nLayer: sh.nLayer,
    mat(name, role, layer, ne, std = 0.02) {
      const type = fallbackType(mix.typeOf(role, layer, sh.nLayer), ne[0]);
      count(ne);
      w.addTensor(name, type, ne, randomFiller(type, tseed++, std, centered));
    },
    ones(name, ne) {
      count(ne);
      w.addTensor(name, GgmlType.F32, ne, f32Bytes(new Float32Array(ne.reduce((p, d) => p * d, 1)).fill(1)));
    },
    fill(name, ne, value) {
      count(ne);
      w.addTensor(name, GgmlType.F32, ne, f32Bytes(new Float32Array(ne.reduce((p, d) => p * d, 1)).fill(value)));
    },
    small(name, ne, std) {
      count(ne);
      const r = rng(seed * 31 + tensors * 7), a = new Float32Array(ne.reduce((p, d) => p * d, 1));
      for (let i = 0; i < a.length; i++) a[i] = (r() + r() + r() - 1.5) * 2 * std;
      w.addTensor(name, GgmlType.F32, ne, f32Bytes(a));
    },
    router(name, layer, nEmbd, nExpert) {
      count([nEmbd, nExpert]);
      w.addTensor(name, GgmlType.F32, [nEmbd, nExpert], f32Bytes(routerRows(nEmbd, nExpert, layer, skew, seed)));
    },
  };
  family.write(sh, t);
  const v = synthVocab(sh.nVocab, seed);
  w.str("tokenizer.ggml.model", "gpt2");
  w.str("tokenizer.ggml.pre", "qwen2");
  w.setArray("tokenizer.ggml.tokens", GgufValueType.STRING, v.tokens);
  w.setArray("tokenizer.ggml.token_type", GgufValueType.I32, v.types);
  w.setArray("tokenizer.ggml.merges", GgufValueType.STRING, v.merges);
  w.u32("tokenizer.ggml.eos_token_id", v.eos);
  w.u32("tokenizer.ggml.padding_token_id", v.pad);
  w.u32("tokenizer.ggml.bos_token_id", v.bos);
  w.bool("tokenizer.ggml.add_bos_token", false);
  w.str("tokenizer.chat_template", CHATML);
  return { writer: w, params, tensors };
}

export async function synth(o: SynthOptions): Promise<SynthResult> {
  const t0 = performance.now();
  const { writer, params, tensors } = synthWriter(o);
  const bytes = await writer.writeAsync(o.out);
  return { path: o.out, bytes, seconds: (performance.now() - t0) / 1000, tensors, params };
}
