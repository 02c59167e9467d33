// Test helper: quantized checkpoint folders written from the F16 family fixtures' hf/ folders by the
// reference quantizers (src/safetensors/quant-ref.ts), with tensor names and config.json fields as the
// real checkpoints have them (gpt-oss MXFP4, DeepSeek V3 FP8, ModelOpt NVFP4, mlx-community 4-bit), and
// each one's twin: the same folder with the quantized tensors dequantized to F32 by the reference
// dequantizers (F32 so that the values are the quantized ones exactly).
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { readSafetensorsHeader } from "../src/safetensors/reader.ts";
import {
  dequantFp8, dequantMlx4, dequantMxfp4, dequantNvfp4, quantFp8, quantMlx4, quantMxfp4, quantNvfp4,
} from "../src/safetensors/quant-ref.ts";

export interface StPart {
  name: string;
  dtype: string;
  shape: number[];
  data: Uint8Array;
}

export type QuantFormat = "mxfp4" | "fp8" | "nvfp4" | "mlx4";

/** Every tensor of a one-file folder, bytes included. */
export function readParts(dir: string): StPart[] {
  const h = readSafetensorsHeader(join(dir, "model.safetensors"));
  const file = readFileSync(h.path);
  return h.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: new Uint8Array(file.subarray(t.fileOffset, t.fileOffset + t.nbytes)) }));
}

export function writeSafetensors(path: string, parts: StPart[], metadata: Record<string, string> = { format: "pt" }): void {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let off = 0;
  for (const p of parts) {
    header[p.name] = { dtype: p.dtype, shape: p.shape, data_offsets: [off, off + p.data.length] };
    off += p.data.length;
  }
  let hb = new TextEncoder().encode(JSON.stringify(header));
  const pad = (8 - (hb.length % 8)) % 8; // the data section 8-aligned, as safetensors writes it
  hb = new TextEncoder().encode(JSON.stringify(header) + " ".repeat(pad));
  const out = new Uint8Array(8 + hb.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(hb.length), true);
  out.set(hb, 8);
  let at = 8 + hb.length;
  for (const p of parts) {
    out.set(p.data, at);
    at += p.data.length;
  }
  writeFileSync(path, out);
}

const f16 = (h: number): number => {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
};

export function floatsOf(p: StPart): Float32Array {
  if (p.dtype === "F32") return new Float32Array(p.data.buffer.slice(p.data.byteOffset, p.data.byteOffset + p.data.byteLength));
  if (p.dtype !== "F16") throw new Error(`${p.name}: ${p.dtype}`);
  const h = new Uint16Array(p.data.buffer.slice(p.data.byteOffset, p.data.byteOffset + p.data.byteLength));
  return Float32Array.from(h, f16);
}

const bytes = (a: Float32Array | Uint8Array): Uint8Array => (a instanceof Uint8Array ? a : new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
const f32Part = (name: string, shape: number[], v: Float32Array): StPart => ({ name, dtype: "F32", shape, data: bytes(v) });
const f16Part = (name: string, shape: number[], v: Float32Array): StPart => ({ name, dtype: "F16", shape, data: new Uint8Array(new Float16Array(v).buffer) });

/** [L, A, B] -> [L, B, A] */
function transpose(x: Float32Array, L: number, A: number, B: number): Float32Array {
  const out = new Float32Array(x.length);
  for (let l = 0; l < L; l++) for (let a = 0; a < A; a++) for (let b = 0; b < B; b++) out[l * A * B + b * A + a] = x[l * A * B + a * B + b];
  return out;
}

/** The linear weights a quantizer takes (as the real checkpoints quantize them): the layers' projections, not norms or the router. */
const isLayerMatrix = (p: StPart): boolean =>
  p.name.startsWith("model.layers.") && p.name.endsWith(".weight") && p.shape.length === 2 && !p.name.includes("norm") && !p.name.endsWith("mlp.gate.weight");

const f16round = (v: number): number => new Float16Array([v])[0];

/** The quantized folder (q) and its F32 twin for one format, from a family's F16 hf/ folder. */
export function quantFolders(src: string, fmt: QuantFormat, out: string): { q: string; twin: string } {
  const q = join(out, `${fmt}`), twin = join(out, `${fmt}-twin`);
  mkdirSync(q, { recursive: true });
  mkdirSync(twin, { recursive: true });
  const parts = readParts(src);
  const qp: StPart[] = [], tp: StPart[] = [];
  const config = JSON.parse(readFileSync(join(src, "config.json"), "utf8")) as Record<string, unknown>;
  if (fmt === "mxfp4") {
    // gpt-oss: the experts' gate_up_proj [E, in, 2F] and down_proj [E, F, out] as openai ships them:
    // *_blocks [E, out, in/32, 16] and *_scales [E, out, in/32] (output-major), the rest BF16 / F16
    for (const p of parts) {
      if (!/mlp\.experts\.(gate_up|down)_proj$/.test(p.name)) {
        qp.push(p);
        tp.push(p);
        continue;
      }
      const [E, I, O] = p.shape;
      const w = transpose(floatsOf(p), E, I, O); // [E, O, I]
      const { blocks, scales } = quantMxfp4(w, E * O, I);
      qp.push({ name: `${p.name}_blocks`, dtype: "U8", shape: [E, O, I / 32, 16], data: blocks });
      qp.push({ name: `${p.name}_scales`, dtype: "U8", shape: [E, O, I / 32], data: scales });
      tp.push(f32Part(p.name, p.shape, transpose(dequantMxfp4(blocks, scales, E * O, I), E, O, I)));
    }
    config.quantization_config = { modules_to_not_convert: ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], quant_method: "mxfp4" };
  } else if (fmt === "fp8") {
    // DeepSeek V3: every projection of the layers E4M3 with a weight_scale_inv F32 per 128x128 block
    for (const p of parts) {
      if (!isLayerMatrix(p)) {
        qp.push(p);
        tp.push(p);
        continue;
      }
      const [R, C] = p.shape;
      const { w, scaleInv } = quantFp8(floatsOf(p), R, C);
      qp.push({ name: p.name, dtype: "F8_E4M3", shape: [R, C], data: w });
      qp.push(f32Part(`${p.name}_scale_inv`, [Math.ceil(R / 128), Math.ceil(C / 128)], scaleInv));
      tp.push(f32Part(p.name, p.shape, dequantFp8(w, scaleInv, R, C)));
    }
    config.quantization_config = { activation_scheme: "dynamic", fmt: "e4m3", quant_method: "fp8", weight_block_size: [128, 128] };
  } else if (fmt === "nvfp4") {
    // ModelOpt NVFP4: weight U8 [R, C/2], weight_scale E4M3 [R, C/16], weight_scale_2 and input_scale F32 scalars
    for (const p of parts) {
      if (!isLayerMatrix(p)) {
        qp.push(p);
        tp.push(p);
        continue;
      }
      const [R, C] = p.shape;
      const { w, scale, scale2 } = quantNvfp4(floatsOf(p), R, C);
      qp.push({ name: p.name, dtype: "U8", shape: [R, C / 2], data: w });
      qp.push({ name: `${p.name}_scale`, dtype: "F8_E4M3", shape: [R, C / 16], data: scale });
      qp.push(f32Part(`${p.name}_scale_2`, [], new Float32Array([scale2])));
      qp.push(f32Part(p.name.replace(/weight$/, "input_scale"), [], new Float32Array([0.05])));
      tp.push(f32Part(p.name, p.shape, dequantNvfp4(w, scale, scale2, R, C)));
    }
    const exclude = ["lm_head", "model.layers.*.mlp.gate"];
    config.quantization_config = { quant_method: "modelopt", quant_algo: "NVFP4", group_size: 16, kv_cache_quant_algo: null, exclude_modules: exclude };
    writeFileSync(join(q, "hf_quant_config.json"), JSON.stringify({ producer: { name: "modelopt", version: "0.31.0" }, quantization: { quant_algo: "NVFP4", kv_cache_quant_algo: null, group_size: 16, exclude_modules: exclude } }, null, 2));
  } else {
    // mlx-community 4-bit: every linear and the embedding (not norms, not the router) as uint32 words
    // with F16 scales and biases per 64; the routed experts stacked as mlp.switch_mlp.*, as mlx-lm saves them
    const experts = new Map<string, StPart[]>();
    const quant = (name: string, shape: number[], x: Float32Array) => {
      const C = shape[shape.length - 1], R = x.length / C;
      const { w, scales, biases } = quantMlx4(x, R, C, 64, f16round);
      const base = name.slice(0, -"weight".length);
      qp.push({ name, dtype: "U32", shape: [...shape.slice(0, -1), C / 8], data: w });
      qp.push(f16Part(`${base}scales`, [...shape.slice(0, -1), C / 64], scales));
      qp.push(f16Part(`${base}biases`, [...shape.slice(0, -1), C / 64], biases));
      return dequantMlx4(w, scales, biases, R, C, 64);
    };
    for (const p of parts) {
      const m = /^(model\.layers\.\d+\.mlp\.)experts\.(\d+)\.(\w+_proj)\.weight$/.exec(p.name);
      if (m) {
        const key = `${m[1]}switch_mlp.${m[3]}.weight`;
        experts.set(key, [...(experts.get(key) ?? []), p]);
        continue;
      }
      if (isLayerMatrix(p) || p.name === "model.embed_tokens.weight" || p.name === "lm_head.weight") {
        tp.push(f32Part(p.name, p.shape, quant(p.name, p.shape, floatsOf(p))));
      } else {
        qp.push(p);
        tp.push(p);
      }
    }
    for (const [key, list] of experts) {
      const shape = [list.length, ...list[0].shape];
      const x = new Float32Array(shape.reduce((a, b) => a * b, 1));
      list.forEach((p, e) => x.set(floatsOf(p), e * p.data.length / 2));
      const v = quant(key, shape, x);
      const each = v.length / list.length;
      list.forEach((p, e) => tp.push(f32Part(p.name, p.shape, v.slice(e * each, (e + 1) * each))));
    }
    config.quantization = { group_size: 64, bits: 4 };
    config.quantization_config = { group_size: 64, bits: 4 };
  }
  writeSafetensors(join(q, "model.safetensors"), qp);
  writeSafetensors(join(twin, "model.safetensors"), tp);
  writeFileSync(join(q, "config.json"), JSON.stringify(config, null, 2));
  delete config.quantization_config;
  delete config.quantization;
  writeFileSync(join(twin, "config.json"), JSON.stringify(config, null, 2));
  for (const f of ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"]) {
    if (!existsSync(join(src, f))) continue;
    copyFileSync(join(src, f), join(q, f));
    copyFileSync(join(src, f), join(twin, f));
  }
  return { q, twin };
}
