// The 1.5-3.5 bit quant mixes (src/cli/synth-mixes-low.ts: IQ1_S .. IQ3_S, Q2_K, Q3_K_M) through the
// whole CPU model path: `synth test-moe:MIX` loads and its logits stay close to its dequantized F32
// twin's on every CPU path this machine runs (scalar, AVX2, AVX-512: each its own kernels, whose
// results agree more closely than either with the twin); the exact path reads the same
// dequantized values and agrees with the twin bit for bit. A weight type the CPU has no product of
// is refused at load naming the type and the tensor's role (not at each request's forward pass).
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, cpu } from "../ffi/cpu.ts";
import { cpuPaths } from "../ffi/cpu-kernels.ts";
import { synth } from "../src/cli/synth.ts";
import { Model } from "../src/engine/model.ts";
import { isModelCheckMessage, ModelCheckError } from "../src/engine/model-check.ts";
import { GgmlType, GgufFile, typeName } from "../src/gguf/index.ts";
import { editGguf } from "./gguf-edit.ts";
import { argmax, maxAbsDiff, onPath } from "./model-fixtures.ts";

const dir = mkdtempSync(join(tmpdir(), "bloomery-lowbit-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Each mix and the types its test-moe file must hold (the mix's own and the ones its rules pick). */
const MIXES: Record<string, string[]> = {
  IQ1_S: ["IQ1_S", "IQ2_XXS", "Q2_K", "Q4_K", "Q5_K"],
  IQ1_M: ["IQ1_M", "IQ2_XXS", "Q2_K", "Q4_K", "Q5_K"],
  IQ2_XXS: ["IQ2_XXS", "Q2_K", "Q4_K", "Q5_K"],
  IQ2_XS: ["IQ2_XS", "Q2_K", "Q4_K", "Q5_K"],
  IQ2_M: ["IQ2_S", "IQ3_S", "Q4_K", "Q5_K"],
  IQ3_XXS: ["IQ3_XXS", "IQ3_S", "IQ2_S", "Q3_K", "Q4_K", "Q5_K"],
  IQ3_S: ["IQ3_S", "Q4_K", "Q6_K"],
  Q2_K: ["Q2_K", "Q3_K", "Q4_K", "Q6_K"],
  Q3_K_M: ["Q3_K", "Q4_K", "Q6_K"],
};
const PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8], [100, 7, 300, 900, 11, 12, 13, 14, 15, 16, 17, 18]];
const V = 1024; // test-moe's vocabulary
// Q8_K activations against exact float ones: measured 0.011-0.023 max |dlogit| (logit rms 0.25-1.5)
const TOL = 0.05;
// different kernels of one numerics (integer block sums, float sums in another order): 2e-7 to
// 1e-6 apart, but where such a last-bit difference moves an activation across a Q8_K rounding
// boundary (the attention output's, the experts' hidden rows) that element moves by a quantum:
// measured up to 9e-3 (IQ2_XXS; 2.5e-3 with only its attention weights quantized, 1.4e-6 with none)
const PATH_TOL = TOL / 2;

/** Every quantized tensor of src dequantized to F32 (bl_dequantize), written to dst. */
function f32Twin(src: string, dst: string): string {
  return editGguf(src, dst, {
    tensor: (t) => {
      if (t.type === GgmlType.F32) return t;
      const n = t.ne.reduce((a, b) => a * b, 1);
      const y = new Float32Array(n);
      check(cpu().bl_dequantize(t.type, t.data, y, n), `dequantizing ${t.name}`);
      return { ...t, type: GgmlType.F32, data: new Uint8Array(y.buffer) };
    },
  });
}

function logitsOf(path: string, exact: boolean): Float32Array[] {
  const m = Model.load(path, { nCtx: 128, nThreads: 2, exact });
  try {
    return PROMPTS.map((p) => m.evalSequence(p, 0, 0, true));
  } finally {
    m.close();
  }
}

describe("low-bit mixes on the CPU: synth test-moe against its dequantized F32 twin", () => {
  for (const [mix, types] of Object.entries(MIXES)) {
    test(`${mix}: ${types.join(", ")}`, async () => {
      const file = join(dir, `test-moe-${mix}.gguf`);
      await synth({ model: "test-moe", quant: mix, out: file });
      const f = GgufFile.open(file);
      const held = new Set([...f.tensors.values()].map((t) => typeName(t.type)));
      for (const t of types) expect(held).toContain(t);
      const twin = logitsOf(f32Twin(file, join(dir, `test-moe-${mix}-f32.gguf`)), true);
      const rms = Math.sqrt(twin[0].reduce((a, v) => a + v * v, 0) / twin[0].length);

      const exact = logitsOf(file, true);
      const dExact = Math.max(...exact.map((l, i) => maxAbsDiff(l, twin[i])));
      expect(dExact).toBe(0);

      const byPath = new Map<string, Float32Array[]>();
      const line = [`${mix}: logit rms ${rms.toFixed(3)}, exact path = twin`];
      for (const path of cpuPaths()) {
        const got = onPath(path, () => logitsOf(file, false));
        byPath.set(path, got);
        let d = 0, agree = 0, clear = 0;
        got.forEach((l, i) => {
          d = Math.max(d, maxAbsDiff(l, twin[i]));
          for (let s = 0; s < PROMPTS[i].length; s++) {
            const ref = twin[i].subarray(s * V, (s + 1) * V);
            const top = argmax(ref);
            const second = Math.max(...Array.from(ref).filter((_, k) => k !== top));
            if (ref[top] - second < 2 * TOL) continue; // a near tie: either token is right
            clear++;
            if (argmax(l.subarray(s * V, (s + 1) * V)) === top) agree++;
          }
        });
        line.push(`${path}: max |dlogit| ${d.toExponential(2)}, top-1 ${agree}/${clear} at clear margins`);
        expect(d).toBeLessThan(TOL);
        expect(agree).toBe(clear);
        expect(clear).toBeGreaterThan(0);
      }
      const scalar = byPath.get("scalar")!;
      for (const [path, got] of byPath) {
        if (path === "scalar") continue;
        const d = Math.max(...got.map((l, i) => maxAbsDiff(l, scalar[i])));
        line.push(`${path} vs scalar ${d.toExponential(2)}`);
        expect(d).toBeLessThan(PATH_TOL);
      }
      console.log(line.join("; "));
    });
  }
});

describe("a weight type with no CPU product is refused at load, by name", () => {
  test("TQ2_0 experts and Q8_K attention: the load throws naming the type and the role", async () => {
    const file = join(dir, "test-moe-refuse.gguf");
    await synth({ model: "test-moe", quant: "IQ2_XXS", out: file });
    const cases: [string, GgmlType, number, RegExp][] = [
      ["blk.1.ffn_down_exps.weight", GgmlType.TQ2_0, 66, /experts' down: TQ2_0 weights \(ggml type 35\) are not implemented on the CPU/],
      ["blk.0.attn_q.weight", GgmlType.Q8_K, 292, /attention q: Q8_K weights \(ggml type 15\) are not implemented on the CPU/],
    ];
    for (const [name, type, bb, want] of cases) {
      const bad = editGguf(file, join(dir, `refuse-${type}.gguf`), {
        tensor: (t) => (t.name === name ? { ...t, type, data: new Uint8Array((t.ne.reduce((a, b) => a * b, 1) / 256) * bb) } : t),
      });
      let msg = "";
      try {
        Model.load(bad, { nCtx: 128, nThreads: 2 }).close();
      } catch (e) {
        expect(e).toBeInstanceOf(ModelCheckError); // a bad model (exit E_BAD_MODEL), not an internal error
        msg = (e as Error).message;
      }
      console.log(`refused: ${msg}`);
      expect(isModelCheckMessage(msg)).toBe(true);
      expect(msg).toContain(bad);
      expect(msg).toMatch(want);
    }
  });
});
