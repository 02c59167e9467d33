// The Qwen hybrid fixtures' GGUF with the values transformers computes: llama.cpp's converter derives
// ssm_a (-exp(A_log)) and the (1 + weight) RMSNorm weights in the checkpoint's own dtype (F16), so the
// file holds them rounded to f16 (2^-9 relative), an offset of 1e-2 to 5e-2 in the logits from the first
// token on (the fixtures README's "systematic" offset of llama.cpp from transformers). This writes a copy
// of the file whose F32 tensors hold those values computed in f32 from the hf/ folder, every other byte
// the converter's: on it the model is transformers' model, and the conformance table holds it to it.
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { GgufFile } from "../../src/gguf/index.ts";

function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** The safetensors file's tensors as f32 (F16 or F32 ones). */
function readSafetensors(path: string): Map<string, Float32Array> {
  const b = readFileSync(path);
  const n = Number(b.readBigUInt64LE(0));
  const hdr = JSON.parse(b.subarray(8, 8 + n).toString("utf8")) as Record<string, { dtype: string; data_offsets: [number, number] }>;
  const out = new Map<string, Float32Array>();
  for (const [name, h] of Object.entries(hdr)) {
    if (name === "__metadata__") continue;
    const [s, e] = h.data_offsets, at = 8 + n + s;
    if (h.dtype === "F32") out.set(name, new Float32Array(b.buffer.slice(b.byteOffset + at, b.byteOffset + 8 + n + e)));
    else if (h.dtype === "F16") {
      const a = new Float32Array((e - s) / 2);
      for (let i = 0; i < a.length; i++) a[i] = f16ToF32(b.readUInt16LE(at + 2 * i));
      out.set(name, a);
    }
  }
  return out;
}

/**
 * The exact copy of `<dir>/<name>.gguf` (written into the temp folder, the same bytes every time). tiled: the v heads
 * were reordered by the converter (Qwen3.5: a v head of group g and index j lands at j * n_k + g).
 */
export function exactHybridGguf(dir: string, tiled: boolean): string {
  const name = basename(dir), src = join(dir, `${name}.gguf`);
  const out = join(tmpdir(), "bloomery-fixtures", `${name}-exact.gguf`);
  const f = GgufFile.open(src);
  const bytes = new Uint8Array(readFileSync(src));
  const hf = readSafetensors(join(dir, "hf", "model.safetensors"));
  const a = f.str("general.architecture");
  const nk = f.u32(`${a}.ssm.group_count`), nv = f.u32(`${a}.ssm.time_step_rank`), r = nv / nk;
  const put = (tensor: string, values: Float32Array) => {
    const t = f.requireTensor(tensor);
    if (t.type !== 0 || t.nbytes !== values.length * 4) throw new Error(`${tensor}: not an F32 tensor of ${values.length}`);
    bytes.set(new Uint8Array(values.buffer, values.byteOffset, values.length * 4), t.fileOffset);
  };
  const plus1 = (hfName: string) => Float32Array.from(hf.get(hfName)!, (v) => v + 1);
  for (let i = 0; i < f.u32(`${a}.block_count`); i++) {
    const p = `blk.${i}.`, h = `model.layers.${i}.`;
    const norms: [string, string][] = [["attn_norm", "input_layernorm"], ["post_attention_norm", "post_attention_layernorm"],
      ["attn_q_norm", "self_attn.q_norm"], ["attn_k_norm", "self_attn.k_norm"]];
    for (const [g, n] of norms) if (f.tensor(`${p}${g}.weight`)) put(`${p}${g}.weight`, plus1(`${h}${n}.weight`));
    if (f.tensor(`${p}ssm_a`)) {
      const alog = hf.get(`${h}linear_attn.A_log`)!;
      const v = new Float32Array(nv);
      for (let g = 0; g < nk; g++) for (let j = 0; j < r; j++) v[tiled ? j * nk + g : g * r + j] = -Math.exp(alog[g * r + j]);
      put(`${p}ssm_a`, v);
    }
  }
  put("output_norm.weight", plus1("model.norm.weight"));
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(`${out}.${process.pid}.part`, bytes);
  renameSync(`${out}.${process.pid}.part`, out);
  return out;
}
