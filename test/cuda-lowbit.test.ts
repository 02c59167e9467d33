// The 1.5-3.5 bit types on the card (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, Q2_K, Q3_K:
// cuda/quants/quants.cuh and quants_iq.cuh's readers in every kernel that reads through qt<T>):
// accepted by the fusion pass wherever the CUDA library is built (no card needed); on a card, a
// model whose experts hold one, and a whole synth test-moe:IQ2_XXS file (llama-quantize's mix: Q2_K
// embeddings and early downs, Q4_K attention values), give the CPU's exact logits within rounding,
// prompts on the tensor cores and one-token steps. The kernels one type at a time: cuda-kernels.test.ts.
import { afterAll, describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, cpu } from "../ffi/cpu.ts";
import { CudaFast, CudaOption, cudaLib, cudaStatus } from "../ffi/cuda.ts";
import { synth } from "../src/cli/synth.ts";
import { type CudaBackend, cudaUnsupported } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { encodeProgram } from "../src/engine/program.ts";
import { MappedWeights } from "../src/engine/weights.ts";
import { GgmlType, GgufFile, TYPE_INFO } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { editGguf } from "./gguf-edit.ts";
import { maxAbsDiff } from "./model-fixtures.ts";
import { std } from "./logit-math.ts";

const st = cudaStatus();
const haveLib = cudaLib() !== null;
if (!st.ok) console.log(`cuda-lowbit: GPU runs skipped (${st.reason})${haveLib ? "; the refusals are checked" : ""}`);

const dir = mkdtempSync(join(tmpdir(), "bloomery-cuda-lowbit-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TYPES = ["IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "Q2_K", "Q3_K"] as const;
let base: string | undefined;

/** test-moe:Q4_K_M (every type the card runs) with layer 1's experts' gate and up of `type`. */
async function withExperts(type: GgmlType): Promise<string> {
  base ??= (await synth({ model: "test-moe", quant: "Q4_K_M", out: join(dir, "base.gguf") })).path;
  const bb = TYPE_INFO[type].blockBytes;
  return editGguf(base, join(dir, `experts-${type}.gguf`), {
    tensor: (t) => {
      if (t.name !== "blk.1.ffn_gate_exps.weight" && t.name !== "blk.1.ffn_up_exps.weight") return t;
      const blocks = t.ne.reduce((a, b) => a * b, 1) / 256;
      const data = new Uint8Array(blocks * bb);
      check(cpu().bl_synth_fill(type, ptr(data), 0, blocks, 5n, 0.02, 0), "synth fill");
      return { ...t, type, data };
    },
  });
}

function refusal(file: string): string | undefined {
  const f = GgufFile.open(file);
  const fam = familyFor(f), hp = fam.hparams(f);
  const w = new MappedWeights(f, false);
  try {
    return cudaUnsupported(encodeProgram(fam.program(f, hp), (n) => w.tensor(n), hp.nEmbd, hp.nVocab));
  } finally {
    w.close();
  }
}

describe.skipIf(!haveLib)("the card takes the low-bit types at load (no card needed)", () => {
  test("test-moe:Q4_K_M itself is accepted", async () => {
    base ??= (await synth({ model: "test-moe", quant: "Q4_K_M", out: join(dir, "base.gguf") })).path;
    expect(refusal(base)).toBeUndefined();
  });
  for (const name of TYPES) {
    test(`${name} experts are accepted`, async () => {
      expect(refusal(await withExperts(GgmlType[name]))).toBeUndefined();
    });
  }
  test("a whole synth test-moe:IQ2_XXS file is accepted", async () => {
    const file = (await synth({ model: "test-moe", quant: "IQ2_XXS", out: join(dir, "iq2xxs.gguf") })).path;
    expect(refusal(file)).toBeUndefined();
  });
});

/**
 * The card's logits against the CPU's exact path: a prompt of 40 (the tensor cores) and 4 decode
 * steps, max |dlogit| / std, with f32 one-token products and with the default int8 ones (the grid
 * types' own dots, dot8_iq.cuh; Q2_K and Q3_K stay f32).
 */
function cardAgainstExact(file: string): { f32: number; int8: number } {
  const card = Model.load(file, { nCtx: 128, nThreads: 2, nGpuLayers: "all" });
  const exact = Model.load(file, { nCtx: 128, nThreads: 2, exact: true });
  try {
    expect(card.backend.name).toBe("CUDA");
    const V = card.hp.nVocab;
    const prompt = Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % V);
    const b = exact.evalSequence(prompt, 0);
    const steps = Array.from({ length: 4 }, (_, s) => exact.evalSequence([(s * 31 + 7) % V], prompt.length + s));
    const run = (fast: number): number => {
      (card.backend as CudaBackend).setOption(CudaOption.fast, fast);
      let worst = maxAbsDiff(card.evalSequence(prompt, 0), b) / std(b);
      for (let s = 0; s < 4; s++) worst = Math.max(worst, maxAbsDiff(card.evalSequence([(s * 31 + 7) % V], prompt.length + s), steps[s]) / std(b));
      return worst;
    };
    return { f32: run(CudaFast.default & ~CudaFast.int8), int8: run(CudaFast.default) };
  } finally {
    card.close();
    exact.close();
  }
}

describe.skipIf(!st.ok)("on the card: the low-bit types against the CPU's exact path", () => {
  for (const name of TYPES) {
    test(`${name} experts (layer 1's gate and up): prompt and decode steps`, async () => {
      const w = cardAgainstExact(await withExperts(GgmlType[name]));
      console.log(`${name} experts on the card: max |dlogit| / std ${w.f32.toExponential(2)} (f32 one-token products), ${w.int8.toExponential(2)} (int8)`);
      expect(w.f32).toBeLessThan(3e-2);
      expect(w.int8).toBeLessThan(6e-2);
    });
  }
  test("a whole synth test-moe:IQ2_XXS file (Q2_K embeddings, IQ2_XXS experts): prompt and decode steps", async () => {
    const file = (await synth({ model: "test-moe", quant: "IQ2_XXS", out: join(dir, "iq2xxs.gguf") })).path;
    const w = cardAgainstExact(file);
    console.log(`test-moe:IQ2_XXS on the card: max |dlogit| / std ${w.f32.toExponential(2)} (f32 one-token products), ${w.int8.toExponential(2)} (int8)`);
    expect(w.f32).toBeLessThan(3e-2);
    expect(w.int8).toBeLessThan(6e-2);
  });
});
