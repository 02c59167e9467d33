// bloomery safetensors: a folder's quantized tensors at load: what config.json says of the quantization
// (quantization_config: gpt-oss's mxfp4, DeepSeek's fp8 with its weight_block_size, ModelOpt's NVFP4;
// mlx's `quantization` group_size / bits), and a family's HF tensor made from its quantized form (rows
// repacked as stored, or dequantized to F32 where a transform needs it, with a note saying so).
import { safeText } from "../gguf/errors.ts";
import type { HfTensor } from "../models/types.ts";
import { derive, type Derived } from "./derive.ts";
import type { SafetensorsFolder } from "./folder.ts";
import { deriveQuant, dequant, quantSourceOf, quantWords, rowsCanTake, type QuantConfig, type QuantSource } from "./quant.ts";
import type { MlxQuant } from "./quant-mlx.ts";
import { SafetensorsError } from "./reader.ts";

type Json = Record<string, unknown>;
const obj = (v: unknown): Json | undefined => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Json) : undefined);

/** The quantization config.json states (defaults where it states none: DeepSeek's 128x128, mlx's 64 x 4 bits). */
export function quantConfigOf(file: string, config: Json): QuantConfig {
  const qc = obj(config.quantization_config) ?? {};
  const method = typeof qc.quant_method === "string" ? qc.quant_method : undefined;
  // mlx writes `quantization` (and, lately, the same as a quantization_config with no quant_method)
  const mlx = obj(config.quantization) ?? (method === undefined ? qc : {});
  const modules = new Map<string, MlxQuant | false>();
  const q: QuantConfig = { fp8Block: [128, 128], mlxGroup: 64, mlxBits: 4, mlxModules: modules };
  if (method === "fp8") {
    const b = qc.weight_block_size;
    if (b !== undefined) {
      if (!Array.isArray(b) || b.length !== 2 || !b.every((x) => Number.isSafeInteger(x) && (x as number) > 0)) {
        throw new SafetensorsError(file, `quantization_config.weight_block_size is ${safeText(JSON.stringify(b), 60)}, not [rows, cols]`);
      }
      q.fp8Block = [b[0] as number, b[1] as number];
    }
    if (qc.fmt !== undefined && qc.fmt !== "e4m3") throw new SafetensorsError(file, `quantization_config.fmt '${safeText(String(qc.fmt))}': FP8 ${safeText(String(qc.fmt))} weights are not implemented yet (e4m3 are)`);
  }
  if (method === "modelopt" && typeof qc.quant_algo === "string" && qc.quant_algo !== "NVFP4") {
    throw new SafetensorsError(file, `quantization_config.quant_algo '${safeText(qc.quant_algo)}': ModelOpt ${safeText(qc.quant_algo)} weights are not implemented yet (NVFP4 are)`);
  }
  // mlx's own config (mlx_lm/utils.py): the folder's group_size / bits / mode, then the modules a recipe
  // quantized otherwise ({"model.layers.0.mlp.gate": {"group_size": 64, "bits": 8}}, as nn.quantize hands them
  // to to_quantized, whose defaults are the mode's: affine 64 x 4, mxfp4 32 x 4), or left in floats (false)
  const def = mlxQuantOf(file, "quantization", mlx);
  [q.mlxGroup, q.mlxBits, q.mlxMode] = [def.group, def.bits, def.mode];
  for (const [k, v] of Object.entries(mlx)) {
    if (v === false) modules.set(k, false);
    else if (obj(v)) modules.set(k, mlxQuantOf(file, `quantization.${k}`, obj(v)!));
  }
  return q;
}

/** mlx's group size and bits of each mode when a config leaves them out (mlx_lm's defaults_for_mode) */
const MLX_DEFAULTS: Record<string, [number, number]> = { affine: [64, 4], mxfp4: [32, 4], nvfp4: [16, 4], mxfp8: [32, 8] };

/** One mlx quantization entry ({group_size, bits, mode}), checked: whole positive numbers, a string mode. */
function mlxQuantOf(file: string, where: string, m: Json): MlxQuant {
  const mode = m.mode ?? "affine";
  if (typeof mode !== "string") throw new SafetensorsError(file, `${safeText(where)}.mode is ${safeText(JSON.stringify(mode), 40)}, not a string`);
  const [g0, b0] = MLX_DEFAULTS[mode] ?? [64, 4];
  const int = (key: string, d: number): number => {
    const v = m[key] ?? d;
    if (!Number.isSafeInteger(v) || (v as number) <= 0) throw new SafetensorsError(file, `${safeText(where)}.${key} is ${safeText(JSON.stringify(v), 40)}, not a positive whole number`);
    return v as number;
  };
  return { group: int("group_size", g0), bits: int("bits", b0), mode };
}

/** `spec` made from the folder's quantized form of its tensor(s), or undefined where they are stored as floats. */
export function quantTensor(folder: SafetensorsFolder, spec: HfTensor, q: QuantConfig, shapeOnly: boolean, note: (l: string) => void): Derived | undefined {
  const names = Array.isArray(spec.hf) ? spec.hf : [spec.hf];
  const srcs = names.map((n) => quantSourceOf(folder.tensors, n, q));
  if (srcs.every((x) => x === undefined)) return undefined;
  const bad = srcs.findIndex((x) => x === undefined);
  if (bad >= 0) throw new SafetensorsError(folder.dir, `tensor '${safeText(names[bad])}' is stored as floats, but '${safeText(names[srcs.findIndex((x) => x)])}' of the same stack is quantized`);
  const all = srcs as QuantSource[];
  if (all.some((x) => x.kind !== all[0].kind || x.shape.join() !== all[0].shape.join())) {
    throw new SafetensorsError(folder.dir, `the per-expert tensors of '${safeText(spec.name)}' are not all ${quantWords(all[0].kind)} of shape [${all[0].shape.join(", ")}]`);
  }
  if (all.every((x) => rowsCanTake(spec, x))) {
    const each = all.map((x) => deriveQuant(spec, x, q, shapeOnly));
    if (!Array.isArray(spec.hf)) return each[0];
    const data = new Uint8Array(each.reduce((a, d) => a + d.data.length, 0));
    let at = 0;
    for (const d of each) {
      data.set(d.data, at);
      at += d.data.length;
    }
    return { type: each[0].type, ne: [...each[0].ne, each.length], data };
  }
  if (Array.isArray(spec.hf)) throw new SafetensorsError(folder.dir, `'${safeText(spec.name)}': stacked ${quantWords(all[0].kind)} experts that need a transform (${describe(spec)}) are not implemented yet`);
  const src = all[0];
  if (spec.parity !== undefined) throw new SafetensorsError(folder.dir, `'${safeText(spec.name)}': a ${quantWords(src.kind)} tensor read as interleaved halves and transposed is not implemented yet`);
  // the fallback: the reference dequantizer's F32 values, then the float copy the spec asks
  const fake = { name: src.name, dtype: "F32", shape: src.shape, nbytes: src.shape.reduce((a, b) => a * b, 4), fileOffset: 0, file: src.parts[0].file };
  const fspec: HfTensor = { ...spec, transpose: spec.quantTranspose ?? spec.transpose };
  // (a tensor the family keeps in F32 anyway, a router read as a norm is, is widened without a word: nothing is lost)
  const widenedOnly = spec.f32 && !fspec.transpose;
  if (!shapeOnly && !widenedOnly) note(`hf folder: '${src.name}' (${quantWords(src.kind)}) dequantized to F32 at load for '${spec.name}' (${describe(spec)} of its rows is not implemented on the quantized rows)`);
  return derive(fspec, fake, shapeOnly, shapeOnly ? undefined : new Uint8Array(dequant(src, q).buffer));
}

function describe(spec: HfTensor): string {
  return (spec.quantTranspose ?? spec.transpose) ? "a transposed copy" : spec.f32 ? "an F32 copy" : "a copy";
}
