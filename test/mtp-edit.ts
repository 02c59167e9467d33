// Test helper: a family fixture with an MTP (next-token prediction) layer appended, as GLM-4.5's and
// DeepSeek V3's files carry one: block_count one more, nextn_predict_layers 1, the last layer's tensors
// again as blk.N and llama.cpp's nextn.* tensors beside them.
import { GgmlType, GgufFile, GgufValueType } from "../src/gguf/index.ts";
import { join } from "node:path";
import { synth } from "../src/cli/synth.ts";
import { editGguf, f32Fill, type TensorCopy } from "./gguf-edit.ts";

/** The fixture with an MTP layer appended: the last layer's tensors again as blk.N, and nextn.* beside them. */
export function withMtp(src: string, arch: string, dst: string): string {
  const f = GgufFile.open(src);
  const n = f.u32(`${arch}.block_count`), E = f.u32(`${arch}.embedding_length`);
  const extra: TensorCopy[] = [];
  return editGguf(src, dst, {
    kv: { [`${arch}.block_count`]: { type: GgufValueType.U32, value: n + 1 }, [`${arch}.nextn_predict_layers`]: { type: GgufValueType.U32, value: 1 } },
    tensor: (t) => {
      if (t.name.startsWith(`blk.${n - 1}.`)) extra.push({ ...t, name: t.name.replace(`blk.${n - 1}.`, `blk.${n}.`), data: t.data.slice() });
      return t;
    },
    get extra() {
      return [
        ...extra,
        { name: `blk.${n}.nextn.eh_proj.weight`, type: 0, ne: [2 * E, E], data: f32Fill(2 * E * E, 0.01) },
        { name: `blk.${n}.nextn.enorm.weight`, type: 0, ne: [E], data: f32Fill(E, 1) },
        { name: `blk.${n}.nextn.hnorm.weight`, type: 0, ne: [E], data: f32Fill(E, 1) },
        { name: `blk.${n}.nextn.shared_head_norm.weight`, type: 0, ne: [E], data: f32Fill(E, 1) },
      ];
    },
  });
}


/**
 * A copy of a synthetic MTP file whose MTP layer passes the token's embedding through (eh_proj: identity on the
 * embedding half, a little of the hidden half, seeded): its drafts agree with the target often, not always.
 */
export function nearCopyMtp(src: string, dst: string, nEmbd: number, seed = 99): string {
  let s = seed;
  const r = () => { s = (s * 1103515245 + 12345) & 0x7fffffff; return (s / 0x40000000) - 1; };
  const E = nEmbd;
  return editGguf(src, dst, {
    tensor: (t) => {
      if (!t.name.endsWith("nextn.eh_proj.weight")) return t;
      const w = new Float32Array(2 * E * E);
      for (let o = 0; o < E; o++) {
        w[o * 2 * E + o] = 1;
        for (let i = 0; i < E; i++) w[o * 2 * E + E + i] = 0.02 * r();
      }
      return { ...t, type: GgmlType.F32, data: new Uint8Array(w.buffer) };
    },
  });
}

/**
 * synth test-qwen35moe-mtp (Q8_0, centred, seed 7) into dir as mtp.gguf and its near copy (an MTP
 * layer that predicts: nearCopyMtp at 256) as near.gguf; the two paths.
 */
export async function synthNearMtp(dir: string): Promise<{ mtp: string; near: string }> {
  const mtp = join(dir, "mtp.gguf"), near = join(dir, "near.gguf");
  await synth({ model: "test-qwen35moe-mtp", quant: "Q8_0", out: mtp, centered: true, seed: 7 });
  nearCopyMtp(mtp, near, 256);
  return { mtp, near };
}
