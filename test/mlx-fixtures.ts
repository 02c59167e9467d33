// Test helper: mlx-community folders written from the F16 fixtures' transformers folders as mlx-lm writes
// them (mlx_lm/utils.py quantize_model and save_model): the family's sanitize (mlx_lm/models/qwen3_moe.py,
// gpt_oss.py, glm4_moe.py, deepseek_v3.py: experts stacked as switch_mlp, gpt-oss's gate_up split and
// output-major, DeepSeek's kv_b_proj as embed_q / unembed_out), then mlx's affine quantizer (quantMlx) on
// every module with a `weight` of two or more dimensions whose rows divide into groups, the family's
// quant_predicate (the Linear router 8-bit) and the recipe's own choices, config.json's `quantization` with
// the per-module entries mlx-lm writes, safetensors metadata format "mlx"; and each folder's twin: the
// transformers folder (the source's names and layout) holding the dequantized values as F32 (gpt-oss's
// experts in mlx's mxfp4: the same bytes as openai's *_blocks / *_scales).
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { dequantMlx, dequantMxfp4, quantMlx, quantMxfp4 } from "../src/safetensors/quant-ref.ts";
import { floatsOf, readParts, writeSafetensors, type StPart } from "./st-quant-fixtures.ts";

export type MlxFamily = "qwen3_moe" | "gpt_oss" | "glm4_moe" | "deepseek_v3";

/** How one module is stored: affine bits in groups, mlx's mxfp4, or left in floats. */
export type MlxModuleQuant = { bits: number; group: number; mode?: "affine" | "mxfp4" } | false;

export interface MlxRecipe {
  bits: number;
  group: number;
  /** the recipe's choice for a module path (after the family's quant_predicate); undefined: the default */
  override?: (path: string) => MlxModuleQuant | undefined;
  /** write a `false` entry in config.json for the modules the override leaves in floats (mlx-lm's loader honours them) */
  writeFalse?: boolean;
  /** the dtype of the scales and biases (the model's: F16 or BF16) */
  scaleDtype?: "F16" | "BF16";
}

interface Ft {
  shape: number[];
  v: Float32Array;
  /** as stored (floats that stay floats keep it) */
  dtype: string;
}

/** round to the nearest BF16, ties to even */
function bf16round(v: number): number {
  const u = new Uint32Array(new Float32Array([v]).buffer)[0];
  return new Float32Array(new Uint32Array([((u + 0x7fff + ((u >>> 16) & 1)) & 0xffff0000) >>> 0]).buffer)[0];
}
const f16round = (v: number): number => new Float16Array([v])[0];

function floatPart(name: string, shape: number[], v: Float32Array, dtype: string): StPart {
  if (dtype === "F32") return { name, dtype, shape, data: new Uint8Array(v.slice().buffer) };
  if (dtype === "BF16") return { name, dtype, shape, data: new Uint8Array(Uint16Array.from(new Uint32Array(v.slice().buffer), (x) => x >>> 16).buffer) };
  return { name, dtype: "F16", shape, data: new Uint8Array(new Float16Array(v).buffer) };
}

/** [L, A, B] -> [L, B, A] */
function swap(x: Float32Array, L: number, A: number, B: number): Float32Array {
  const out = new Float32Array(x.length);
  for (let l = 0; l < L; l++) for (let a = 0; a < A; a++) for (let b = 0; b < B; b++) out[l * A * B + b * A + a] = x[l * A * B + a * B + b];
  return out;
}

/** the even (0) or odd (1) entries of the last dimension */
function half(x: Float32Array, last: number, parity: number): Float32Array {
  const out = new Float32Array(x.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = x[Math.floor(i / (last / 2)) * last + 2 * (i % (last / 2)) + parity];
  return out;
}

/**
 * mlx-lm's sanitize of a transformers folder's tensors (as its models/<type>.py writes it), and the way
 * back: each transformers tensor from the sanitized ones (for the twin).
 */
function sanitize(fam: MlxFamily, hf: Map<string, Ft>, config: Record<string, unknown>): { mlx: Map<string, Ft>; back: (name: string, get: (n: string) => Float32Array) => Float32Array | undefined } {
  const mlx = new Map<string, Ft>();
  const backs = new Map<string, (get: (n: string) => Float32Array) => Float32Array>();
  const experts = new Map<string, { e: number; t: Ft; name: string }[]>();
  for (const [name, t] of hf) {
    const m = /^(model\.layers\.\d+\.mlp\.)experts\.(\d+)\.(\w+_proj)\.weight$/.exec(name);
    if (m && fam !== "gpt_oss") {
      const key = `${m[1]}switch_mlp.${m[3]}.weight`;
      experts.set(key, [...(experts.get(key) ?? []), { e: Number(m[2]), t, name }]);
      continue;
    }
    const g = /^(model\.layers\.\d+\.mlp\.experts\.)(gate_up_proj|down_proj)(_bias)?$/.exec(name);
    if (g && fam === "gpt_oss") {
      // transformers' [E, in, out] (x @ W, gate and up interleaved on out) as openai's [E, out, in] split
      const [E, A, B] = t.shape;
      if (g[2] === "down_proj" && !g[3]) {
        mlx.set(`${g[1]}down_proj.weight`, { shape: [E, B, A], v: swap(t.v, E, A, B), dtype: t.dtype });
        backs.set(name, (get) => swap(get(`${g[1]}down_proj.weight`), E, B, A));
      } else if (g[2] === "down_proj") {
        mlx.set(`${g[1]}down_proj.bias`, t);
      } else if (!g[3]) {
        for (const [p, part] of [[0, "gate_proj"], [1, "up_proj"]] as const) mlx.set(`${g[1]}${part}.weight`, { shape: [E, B / 2, A], v: swap(half(t.v, B, p), E, A, B / 2), dtype: t.dtype });
        backs.set(name, (get) => {
          const gt = swap(get(`${g[1]}gate_proj.weight`), E, B / 2, A), up = swap(get(`${g[1]}up_proj.weight`), E, B / 2, A);
          const out = new Float32Array(t.v.length);
          for (let i = 0; i < gt.length; i++) [out[2 * i], out[2 * i + 1]] = [gt[i], up[i]];
          return out;
        });
      } else {
        const [E2, B2] = t.shape;
        for (const [p, part] of [[0, "gate_proj"], [1, "up_proj"]] as const) mlx.set(`${g[1]}${part}.bias`, { shape: [E2, B2 / 2], v: half(t.v, B2, p), dtype: t.dtype });
      }
      continue;
    }
    const kv = /^(model\.layers\.\d+\.self_attn\.)kv_b_proj\.weight$/.exec(name);
    if (kv && fam === "deepseek_v3") {
      // per head: nope K rows then v V rows of kv_lora columns; embed_q = K transposed [H, kv_lora, nope]
      const H = config.num_attention_heads as number, nope = config.qk_nope_head_dim as number, vd = config.v_head_dim as number, lora = config.kv_lora_rank as number;
      const k = new Float32Array(H * nope * lora), v = new Float32Array(H * vd * lora);
      for (let h = 0; h < H; h++) {
        k.set(t.v.subarray(h * (nope + vd) * lora, (h * (nope + vd) + nope) * lora), h * nope * lora);
        v.set(t.v.subarray((h * (nope + vd) + nope) * lora, (h + 1) * (nope + vd) * lora), h * vd * lora);
      }
      mlx.set(`${kv[1]}embed_q.weight`, { shape: [H, lora, nope], v: swap(k, H, nope, lora), dtype: t.dtype });
      mlx.set(`${kv[1]}unembed_out.weight`, { shape: [H, vd, lora], v, dtype: t.dtype });
      backs.set(name, (get) => {
        const kk = swap(get(`${kv[1]}embed_q.weight`), H, lora, nope), vv = get(`${kv[1]}unembed_out.weight`), out = new Float32Array(t.v.length);
        for (let h = 0; h < H; h++) {
          out.set(kk.subarray(h * nope * lora, (h + 1) * nope * lora), h * (nope + vd) * lora);
          out.set(vv.subarray(h * vd * lora, (h + 1) * vd * lora), (h * (nope + vd) + nope) * lora);
        }
        return out;
      });
      continue;
    }
    mlx.set(name, t);
    backs.set(name, (get) => get(name));
  }
  for (const [key, list] of experts) {
    list.sort((a, b) => a.e - b.e);
    const each = list[0].t.v.length, v = new Float32Array(each * list.length);
    list.forEach((x, e) => v.set(x.t.v, e * each));
    mlx.set(key, { shape: [list.length, ...list[0].t.shape], v, dtype: list[0].t.dtype });
    list.forEach((x, e) => backs.set(x.name, (get) => get(key).slice(e * each, (e + 1) * each)));
  }
  return { mlx, back: (name, get) => backs.get(name)?.(get) };
}

/** The family's quant_predicate (mlx-lm): the Linear routers 8-bit in groups of 64 (glm4_moe's and deepseek_v3's gate is a MoEGate: not quantizable). */
function familyPredicate(fam: MlxFamily, path: string): MlxModuleQuant | undefined {
  if (fam === "qwen3_moe" && path.endsWith("mlp.gate")) return { bits: 8, group: 64 };
  if (fam === "gpt_oss" && path.endsWith("router")) return { bits: 8, group: 64 };
  return undefined;
}

const quantizable = (fam: MlxFamily, name: string, t: Ft): boolean =>
  name.endsWith(".weight") && t.shape.length >= 2 && !((fam === "glm4_moe" || fam === "deepseek_v3") && name.endsWith("mlp.gate.weight"));

/**
 * The mlx folder (q) and its transformers twin of the dequantized values, from a transformers F16 folder;
 * `stored` says how each quantized module was written (path -> its quantization).
 */
export function mlxFolders(src: string, fam: MlxFamily, recipe: MlxRecipe, out: string): { q: string; twin: string; stored: Map<string, { bits: number; group: number; mode: string }> } {
  const q = join(out, "mlx"), twin = join(out, "twin");
  mkdirSync(q, { recursive: true });
  mkdirSync(twin, { recursive: true });
  const parts = readParts(src);
  const config = JSON.parse(readFileSync(join(src, "config.json"), "utf8")) as Record<string, unknown>;
  const hf = new Map(parts.map((p) => [p.name, { shape: p.shape, v: floatsOf(p), dtype: p.dtype }]));
  const { mlx, back } = sanitize(fam, hf, config);
  const round = recipe.scaleDtype === "BF16" ? bf16round : f16round;
  const sdt = recipe.scaleDtype ?? "F16";
  const qp: StPart[] = [], values = new Map<string, Float32Array>(), fp4 = new Map<string, { blocks: Uint8Array; scales: Uint8Array }>();
  const stored = new Map<string, { bits: number; group: number; mode: string }>();
  const entries: Record<string, unknown> = {};
  for (const [name, t] of mlx) {
    values.set(name, t.v);
    const path = name.replace(/\.weight$/, "");
    const C = t.shape[t.shape.length - 1], R = t.v.length / C;
    let how: MlxModuleQuant | undefined;
    // quantize_model's wrapped_predicate: a module whose rows do not divide into the recipe's groups stays in floats
    if (quantizable(fam, name, t) && C % recipe.group === 0) {
      how = recipe.override?.(path) ?? familyPredicate(fam, path) ?? { bits: recipe.bits, group: recipe.group };
      if (how && C % how.group) how = false;
    }
    if (!how) {
      if (how === false && recipe.writeFalse) entries[path] = false;
      qp.push(floatPart(name, t.shape, t.v, t.dtype));
      continue;
    }
    const mode = how.mode ?? "affine", lead = t.shape.slice(0, -1);
    if (how.bits !== recipe.bits || how.group !== recipe.group || mode !== "affine") entries[path] = { group_size: how.group, bits: how.bits, ...(mode !== "affine" ? { mode } : {}) };
    stored.set(path, { bits: how.bits, group: how.group, mode });
    if (mode === "mxfp4") {
      const { blocks, scales } = quantMxfp4(t.v, R, C);
      qp.push({ name, dtype: "U32", shape: [...lead, C / 8], data: blocks });
      qp.push({ name: `${path}.scales`, dtype: "U8", shape: [...lead, C / 32], data: scales });
      values.set(name, dequantMxfp4(blocks, scales, R, C));
      fp4.set(name, { blocks, scales });
      continue;
    }
    const { w, scales, biases } = quantMlx(t.v, R, C, how.group, how.bits, round);
    qp.push({ name, dtype: "U32", shape: [...lead, (C * how.bits) / 32], data: w });
    qp.push(floatPart(`${path}.scales`, [...lead, C / how.group], scales, sdt));
    qp.push(floatPart(`${path}.biases`, [...lead, C / how.group], biases, sdt));
    values.set(name, dequantMlx(w, scales, biases, R, C, how.group, how.bits));
  }
  // the twin: each transformers tensor from the (dequantized) values, F32 where a quantized one went into it
  const tp: StPart[] = [];
  for (const p of parts) {
    const ex = /^(model\.layers\.\d+\.mlp\.experts\.)(gate_up_proj|down_proj)$/.exec(p.name);
    if (ex && fp4.has(`${ex[1]}down_proj.weight`)) {
      // gpt-oss's experts in mlx's mxfp4: the twin holds them as openai ships MXFP4 (*_blocks [E, out, in / 32,
      // 16], *_scales [E, out, in / 32], gate and up rows interleaved): the same bytes, the other writer's layout
      const [E, I, O] = p.shape;
      if (ex[2] === "down_proj") {
        const d = fp4.get(`${ex[1]}down_proj.weight`)!;
        tp.push({ name: `${p.name}_blocks`, dtype: "U8", shape: [E, O, I / 32, 16], data: d.blocks }, { name: `${p.name}_scales`, dtype: "U8", shape: [E, O, I / 32], data: d.scales });
      } else {
        const g = fp4.get(`${ex[1]}gate_proj.weight`)!, u = fp4.get(`${ex[1]}up_proj.weight`)!, rb = I / 2, rs = I / 32;
        const blocks = new Uint8Array(g.blocks.length * 2), scales = new Uint8Array(g.scales.length * 2);
        for (let r = 0; r < E * (O / 2); r++) {
          blocks.set(g.blocks.subarray(r * rb, (r + 1) * rb), 2 * r * rb);
          blocks.set(u.blocks.subarray(r * rb, (r + 1) * rb), (2 * r + 1) * rb);
          scales.set(g.scales.subarray(r * rs, (r + 1) * rs), 2 * r * rs);
          scales.set(u.scales.subarray(r * rs, (r + 1) * rs), (2 * r + 1) * rs);
        }
        tp.push({ name: `${p.name}_blocks`, dtype: "U8", shape: [E, O, I / 32, 16], data: blocks }, { name: `${p.name}_scales`, dtype: "U8", shape: [E, O, I / 32], data: scales });
      }
      continue;
    }
    let touched = false;
    const v = back(p.name, (n) => {
      if (stored.has(n.replace(/\.weight$/, ""))) touched = true;
      return values.get(n)!;
    });
    tp.push(touched && v ? { name: p.name, dtype: "F32", shape: p.shape, data: new Uint8Array(v.buffer, v.byteOffset, v.byteLength) } : p);
  }
  writeSafetensors(join(q, "model.safetensors"), qp, { format: "mlx" });
  writeSafetensors(join(twin, "model.safetensors"), tp);
  writeFileSync(join(twin, "config.json"), JSON.stringify(fp4.size ? { ...config, quantization_config: { quant_method: "mxfp4" } } : config, null, 2));
  const quantization = { group_size: recipe.group, bits: recipe.bits, mode: "affine", ...entries };
  writeFileSync(join(q, "config.json"), JSON.stringify({ ...config, quantization, quantization_config: quantization }, null, 2));
  for (const f of ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"]) {
    if (!existsSync(join(src, f))) continue;
    copyFileSync(join(src, f), join(q, f));
    copyFileSync(join(src, f), join(twin, f));
  }
  return { q, twin, stored };
}
