// bloomery safetensors: mlx's quantized modules as mlx-lm saves them (mlx_lm/utils.py quantize_model and
// load_model, mlx's nn.quantize): config.json's `quantization` {group_size, bits, mode} and the per-module
// entries a recipe writes beside it ("model.layers.0.mlp.gate": {group_size: 64, bits: 8}, or false for a
// module left in floats); a module quantized in mode "affine" stores `weight` as little-endian uint32 words
// (32 / bits values each, the first in the lowest bits) with `scales` and `biases` per group of group_size
// along the row (w = scale * q + bias); mode "mxfp4" stores the words (8 E2M1 values each) with E8M0 `scales`
// per 32 and no biases. Affine 4- and 8-bit in groups of 64 or a multiple become the engine's MLX_Q4 /
// MLX_Q8 rows, mxfp4 its MXFP4 rows; anything else is refused by name.
import { safeText } from "../gguf/errors.ts";
import type { QuantConfig, QuantSource } from "./quant.ts";
import { SafetensorsError, type SafetensorsTensor } from "./reader.ts";

/** How mlx quantized one module (or the folder's default). */
export interface MlxQuant {
  group: number;
  bits: number;
  /** mlx's quantization mode: "affine" (the default), "mxfp4", "nvfp4", "mxfp8" */
  mode: string;
}

const SERVED = "affine 4- and 8-bit in groups of 64 or a multiple of 64, and mxfp4";

function shapeIs(t: SafetensorsTensor, shape: number[], what: string): void {
  if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
    throw new SafetensorsError(t.file, `tensor '${safeText(t.name)}' has shape [${t.shape.join(", ")}], ${what} expects [${shape.join(", ")}]`);
  }
}

/**
 * The MLX form of `name` (a module's `weight`, U32 words with `scales` beside it), or undefined where the
 * module is not stored quantized. `module` is the name config.json's per-module entries use (the weight's
 * name without `.weight`).
 */
export function mlxSourceOf(tensors: ReadonlyMap<string, SafetensorsTensor>, name: string, q: QuantConfig): QuantSource | undefined {
  const w = tensors.get(name);
  if (!w || !name.endsWith(".weight") || w.dtype !== "U32") return undefined;
  const module = name.slice(0, -".weight".length);
  const sc = tensors.get(`${module}.scales`);
  if (!sc) return undefined;
  const entry = q.mlxModules?.get(module);
  if (entry === false) throw new SafetensorsError(w.file, `config.json's quantization leaves module '${safeText(module)}' in floats, but '${safeText(module)}.scales' is stored beside its U32 weight`);
  const m: MlxQuant = entry ?? { group: q.mlxGroup, bits: q.mlxBits, mode: q.mlxMode ?? "affine" };
  const who = `tensor '${safeText(name)}' (mlx module '${safeText(module)}': ${m.mode}, ${m.bits}-bit, groups of ${m.group})`;
  if (w.shape.length < 2) throw new SafetensorsError(w.file, `MLX tensor '${safeText(name)}' has ${w.shape.length} dimension (a matrix, or a stack of them, is expected)`);
  const lead = w.shape.slice(0, -1), words = w.shape[w.shape.length - 1];
  if (m.mode === "mxfp4") {
    if (m.bits !== 4 || m.group !== 32) throw new SafetensorsError(w.file, `${who}: mlx's mxfp4 is 4-bit in groups of 32`);
    if (sc.dtype !== "U8" && sc.dtype !== "F8_E8M0") throw new SafetensorsError(sc.file, `tensor '${safeText(sc.name)}' is ${sc.dtype}, but mxfp4 stores its E8M0 scales as U8`);
    const C = words * 8;
    shapeIs(sc, [...lead, C / 32], "mxfp4 (an E8M0 scale per 32 values)");
    return { kind: "mxfp4", name, shape: [...lead, C], parts: [w, sc] };
  }
  if (m.mode !== "affine") throw new SafetensorsError(w.file, `${who}: MLX ${safeText(m.mode)} weights are not implemented yet (${SERVED} are)`);
  if (m.bits !== 4 && m.bits !== 8) throw new SafetensorsError(w.file, `${who}: MLX ${m.bits}-bit weights are not implemented yet (${SERVED} are)`);
  const b = tensors.get(`${module}.biases`);
  if (!b) throw new SafetensorsError(w.file, `MLX affine tensor '${safeText(name)}' has no '${safeText(module)}.biases' beside it`);
  for (const t of [sc, b]) {
    if (!["F16", "BF16", "F32"].includes(t.dtype)) throw new SafetensorsError(t.file, `tensor '${safeText(t.name)}' is ${t.dtype}, but MLX stores its scales and biases as F16, BF16 or F32`);
  }
  const C = (words * 32) / m.bits;
  const groups = sc.shape[sc.shape.length - 1];
  if (sc.shape.length === w.shape.length && groups > 0 && groups * m.group !== C) {
    // the words and the scales say another bit width or group than the config: name both
    const fits = [2, 3, 4, 5, 6, 8].filter((bits) => ((words * 32) / bits) % groups === 0 && (words * 32) / bits / groups === m.group);
    throw new SafetensorsError(w.file, `${who}: ${words} words and ${groups} scales a row do not make groups of ${m.group} ${m.bits}-bit values` +
      (fits.length ? ` (they fit ${fits.join(" or ")}-bit: config.json's quantization for this module is not what was stored)` : ""));
  }
  if (m.group % 64 || C % m.group) {
    throw new SafetensorsError(w.file, `${who}: MLX groups of ${m.group} values over rows of ${C} are not implemented yet (groups of 64 or a multiple of 64 are)`);
  }
  shapeIs(sc, [...lead, C / m.group], `MLX ${m.bits}-bit (a scale per ${m.group} values)`);
  shapeIs(b, [...lead, C / m.group], `MLX ${m.bits}-bit (a bias per ${m.group} values)`);
  return { kind: m.bits === 4 ? "mlx4" : "mlx8", name, shape: [...lead, C], parts: [w, sc, b], group: m.group };
}
