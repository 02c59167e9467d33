// qwen3moe on the CPU against outside references: transformers' logits and greedy tokens for
// the tiny random model (F16 and Q8_0), and llama.cpp's greedy text for the trained demo model.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { FIXTURES } from "./paths.ts";
import { argmax, greedy, maxAbsDiff } from "./model-fixtures.ts";

interface TinyRef { prompt: number[]; greedy: number[]; margins: number[]; last_logits: number[] }
const tinyDir = join(FIXTURES, "tiny-qwen3moe");
const demoDir = join(FIXTURES, "demo-model");

/** Greedy tokens must equal the reference up to the first step whose reference margin is below `clear`. */
function expectGreedyWhereClear(ours: number[], ref: TinyRef, clear: number): number {
  let i = 0;
  while (i < ref.greedy.length && ours[i] === ref.greedy[i]) i++;
  if (i < ref.greedy.length) expect(ref.margins[i]).toBeLessThan(clear);
  return i;
}

const files = [
  { gguf: "tiny.gguf", ref: "ref.json", exactTol: 5e-3, ggmlTol: 2e-2 },
  { gguf: "tiny-q8_0.gguf", ref: "ref-q8_0.json", exactTol: 5e-3, ggmlTol: 0.5 },
];

describe("tiny-qwen3moe against transformers", () => {
  for (const f of files) {
    test(`${f.gguf}: exact path: logits within ${f.exactTol}, greedy equal wherever the margin is clear`, async () => {
      const refs: TinyRef[] = (await Bun.file(join(tinyDir, f.ref)).json()).refs;
      const m = Model.load(join(tinyDir, f.gguf), { nCtx: 128, nThreads: 2, exact: true });
      try {
        for (const r of refs) {
          const d = maxAbsDiff(m.evalSequence(r.prompt, 0), r.last_logits);
          const same = expectGreedyWhereClear(greedy(m, r.prompt, r.greedy.length), r, 0.02);
          console.log(`${f.gguf} exact prompt ${r.prompt.length}: max |dlogit| ${d.toExponential(2)}, greedy ${same}/${r.greedy.length}`);
          expect(d).toBeLessThan(f.exactTol);
        }
      } finally {
        m.close();
      }
    });

    test(`${f.gguf}: ggml numerics (quantized activations): logits within ${f.ggmlTol}, teacher-forced top-1 agrees at clear margins`, async () => {
      const refs: TinyRef[] = (await Bun.file(join(tinyDir, f.ref)).json()).refs;
      const m = Model.load(join(tinyDir, f.gguf), { nCtx: 128, nThreads: 2 });
      try {
        let clear = 0, agree = 0;
        for (const r of refs) {
          const d = maxAbsDiff(m.evalSequence(r.prompt, 0), r.last_logits);
          expect(d).toBeLessThan(f.ggmlTol);
          const all = m.evalSequence([...r.prompt, ...r.greedy], 0, 0, true);
          const V = m.hp.nVocab;
          for (let s = 0; s < r.greedy.length; s++) {
            if (r.margins[s] < 0.1) continue;
            clear++;
            if (argmax(all.subarray((r.prompt.length - 1 + s) * V, (r.prompt.length + s) * V)) === r.greedy[s]) agree++;
          }
          console.log(`${f.gguf} ggml prompt ${r.prompt.length}: max |dlogit| ${d.toExponential(2)}`);
        }
        console.log(`${f.gguf} ggml: teacher-forced top-1 agrees at ${agree}/${clear} steps with margin >= 0.1`);
        // quantized activations flip near-tied router choices on this random model; the rest agree
        expect(agree / clear).toBeGreaterThan(0.85);
      } finally {
        m.close();
      }
    });
  }

  test("batching does not change results: one batch, token by token, and mixed slots give identical logits", async () => {
    const r: TinyRef = (await Bun.file(join(tinyDir, "ref.json")).json()).refs[2];
    const m = Model.load(join(tinyDir, "tiny-q8_0.gguf"), { nCtx: 64, nThreads: 2, nSlots: 2, maxTokens: 64 });
    try {
      const whole = m.evalSequence(r.prompt, 0, 0, true);
      const V = m.hp.nVocab;
      for (let i = 0; i < r.prompt.length; i++) {
        const one = m.evalSequence([r.prompt[i]], i, 1);
        expect(maxAbsDiff(one, whole.subarray(i * V, (i + 1) * V))).toBe(0);
      }
    } finally {
      m.close();
    }
  });
});

describe("demo model against llama.cpp's greedy text", () => {
  for (const file of ["bloomery-demo-q4_k_m.gguf", "bloomery-demo-q8_0.gguf"]) {
    test(file, async () => {
      const hf = (await Bun.file(join(demoDir, "demo-ref.json")).json()).refs as { text: string; prompt: number[] }[];
      const ll = (await Bun.file(join(demoDir, "llamacpp-ref.json")).json()).files[file].greedy as { text: string; completion: string }[];
      const m = Model.load(join(demoDir, file), { nCtx: 256, nThreads: 2 });
      try {
        let equal = 0;
        for (let i = 0; i < hf.length; i++) {
          expect(ll[i].text).toBe(hf[i].text);
          expect(m.tokenizer.encode(hf[i].text)).toEqual(hf[i].prompt);
          const text = m.tokenizer.decode(greedy(m, hf[i].prompt, 32));
          const ref = ll[i].completion.replace(/\n\n$/, "");
          const n = Math.min(text.length, ref.length);
          const same = text.slice(0, n) === ref.slice(0, n);
          if (same) equal++;
          else console.log(`${file} prompt ${i} differs from llama.cpp:\n  ours  ${JSON.stringify(text)}\n  llama ${JSON.stringify(ref)}`);
        }
        console.log(`${file}: ${equal}/5 greedy texts equal llama.cpp's`);
        // Q8_0 prompt 2 meets a top-2 margin of 0.001 in transformers' run, where either pick is right
        expect(equal).toBeGreaterThanOrEqual(file.includes("q8_0") ? 4 : 5);
      } finally {
        m.close();
      }
    });
  }
});
