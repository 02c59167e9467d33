// The card has no kernels for the 1.5-3.5 bit types yet (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, Q2_K, Q3_K): a model holding one is refused at load by bl_cuda_check naming the
// type ("IQ2_XXS weights are not implemented on the card yet"), checked wherever the CUDA library
// is built (no card needed); on a card, -ngl auto then runs every layer on the CPU, saying why, and
// gives the CPU's logits.
import { afterAll, describe, expect, test } from "bun:test";
import { ptr } from "bun:ffi";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, cpu } from "../ffi/cpu.ts";
import { cudaLib, cudaStatus } from "../ffi/cuda.ts";
import { synth } from "../src/cli/synth.ts";
import { cudaUnsupported } from "../src/engine/cuda-backend.ts";
import { Model } from "../src/engine/model.ts";
import { encodeProgram } from "../src/engine/program.ts";
import { MappedWeights } from "../src/engine/weights.ts";
import { GgmlType, GgufFile, TYPE_INFO } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { editGguf } from "./gguf-edit.ts";
import { maxAbsDiff } from "./model-fixtures.ts";

const st = cudaStatus();
const haveLib = cudaLib() !== null;
if (!st.ok) console.log(`cuda-lowbit-refusal: GPU runs skipped (${st.reason})${haveLib ? "; the refusals are checked" : ""}`);

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

describe.skipIf(!haveLib)("the card refuses the low-bit types at load, by name (no card needed)", () => {
  test("test-moe:Q4_K_M itself is accepted", async () => {
    base ??= (await synth({ model: "test-moe", quant: "Q4_K_M", out: join(dir, "base.gguf") })).path;
    expect(refusal(base)).toBeUndefined();
  });
  for (const name of TYPES) {
    test(`${name} experts`, async () => {
      const why = refusal(await withExperts(GgmlType[name]));
      console.log(`${name} on the card: ${why}`);
      expect(why).toContain(`${name} weights are not implemented on the card yet`);
    });
  }
  test("a whole synth test-moe:IQ2_XXS file is refused naming its first such type", async () => {
    const file = (await synth({ model: "test-moe", quant: "IQ2_XXS", out: join(dir, "iq2xxs.gguf") })).path;
    // token_embd is Q2_K in llama-quantize's IQ2_XXS mix; the embedding is the program's first op
    expect(refusal(file)).toContain("Q2_K weights are not implemented on the card yet");
  });
});

describe.skipIf(!st.ok)("on the card: -ngl auto runs such a model on the CPU, saying why", () => {
  for (const planned of [false, true]) {
    test(`IQ2_XXS experts${planned ? ", a planned load (serve's)" : ""}: a placement line names the type; logits equal the CPU's`, async () => {
      const file = await withExperts(GgmlType.IQ2_XXS);
      const lines: string[] = [];
      const a = Model.load(file, { nCtx: 128, nThreads: 2, nGpuLayers: "auto", log: (l) => lines.push(l), placement: planned ? {} : undefined });
      const b = Model.load(file, { nCtx: 128, nThreads: 2 });
      try {
        expect(a.backend.name).toBe("CPU");
        expect(lines.join("\n")).toMatch(/the card cannot run this model: .*IQ2_XXS weights are not implemented on the card yet; every layer runs on the CPU/);
        const p = [1, 2, 3, 4, 5];
        expect(maxAbsDiff(a.evalSequence(p, 0), b.evalSequence(p, 0))).toBe(0);
      } finally {
        a.close();
        b.close();
      }
    });
  }
});
