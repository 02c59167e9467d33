// Batch invariance on the CPU path: a row's logits are the same bits whatever else shares its
// forward pass (a prompt whole, in chunks, token by token, or interleaved with another sequence),
// on every SIMD path this CPU runs, for the K-quant and Q8_0 demo files.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { cpuPath, cpuPaths, setCpuPath } from "../ffi/cpu-kernels.ts";
import { FIXTURES } from "./paths.ts";

const files = ["bloomery-demo-q4_k_m.gguf", "bloomery-demo-q8_0.gguf"];
const A = "import os\nimport sys\n\n\ndef main(argv):\n    parser = argparse.ArgumentParser(description=\"tool\")\n    parser.add_argument(\"--verbose\", action=\"store_true\")\n    args = parser.parse_args(argv)\n    return run(args)\n";
const B = "class Config:\n    def __init__(self, path):\n        self.path = path\n\n    def load(self):\n        with open(self.path) as f:\n            return f.read()\n";

/** Largest |a - b| over two equal-length arrays (0 when bit-identical up to the sign of zero). */
function maxDiff(a: Float32Array, b: Float32Array): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

const start = cpuPath();
afterAll(() => setCpuPath(start));

for (const file of files) {
  describe(`batch invariance: ${file}`, () => {
    for (const path of cpuPaths()) {
      test(`${path}: a prompt whole, in chunks and token by token gives the same logits`, () => {
        setCpuPath(path);
        const m = Model.load(join(FIXTURES, "demo-model", file), { nCtx: 256, nSlots: 2, nThreads: 2, maxTokens: 64 });
        try {
          const p = m.tokenizer.encode(A);
          expect(p.length).toBeGreaterThan(40); // past the sizes where a batch kernel could differ
          const V = m.hp.nVocab;
          const whole = m.evalSequence(p, 0, 0, true);
          for (const chunk of [1, 7, 33]) {
            const parts = new Float32Array(whole.length);
            for (let s = 0; s < p.length; s += chunk) parts.set(m.evalSequence(p.slice(s, s + chunk), s, 1, true), s * V);
            expect(maxDiff(parts, whole)).toBe(0);
          }
        } finally {
          m.close();
        }
      });

      test(`${path}: a sequence interleaved with another in one batch gives its logits alone`, () => {
        setCpuPath(path);
        const m = Model.load(join(FIXTURES, "demo-model", file), { nCtx: 256, nSlots: 2, nThreads: 2, maxTokens: 128 });
        try {
          const a = m.tokenizer.encode(A), b = m.tokenizer.encode(B);
          const V = m.hp.nVocab;
          const alone = m.evalSequence(a, 0, 0, true);
          // both prompts in one batch, their tokens alternating; slot 1 holds b, slot 0 a again
          const n = a.length + b.length;
          const tokens = new Int32Array(n), pos = new Int32Array(n), seq = new Int32Array(n);
          const rowsA: number[] = [];
          for (let i = 0, ia = 0, ib = 0; i < n; i++) {
            const takeA = ia < a.length && (ib >= b.length || i % 2 === 0);
            if (takeA) { tokens[i] = a[ia]; pos[i] = ia++; seq[i] = 0; rowsA.push(i); }
            else { tokens[i] = b[ib]; pos[i] = ib++; seq[i] = 1; }
          }
          expect(n).toBeLessThanOrEqual(m.backend.maxTokens);
          const logits = new Float32Array(rowsA.length * V);
          m.backend.forward({ tokens, pos, seq, outRows: Int32Array.from(rowsA), logits });
          expect(maxDiff(logits, alone)).toBe(0);
        } finally {
          m.close();
        }
      });
    }
  });
}
