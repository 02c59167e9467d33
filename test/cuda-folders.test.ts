// Hugging Face checkpoint folders on the card (issue 29: every landed family on CPU and CUDA): each family
// fixture's hf/ folder the card runs gives its GGUF twin's logits bit for bit on the card (the folder's
// tensors are the twin's shapes and types: test/safetensors-model.test.ts), greedy text equal, and
// transformers' reference within the conformance table's card bound (the Qwen hybrids' too: the card's
// gated delta-net). Skips with a line where no card is.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { cudaStatus } from "../ffi/cuda.ts";
import { Model } from "../src/engine/model.ts";
import { FAMILY_CASES, familyRefs } from "./conformance/families.ts";
import { greedy, maxAbsDiff } from "./model-fixtures.ts";
import { FIXTURES } from "./paths.ts";

const st = cudaStatus();
if (!st.ok) console.log(`cuda-folders: GPU tests skipped (${st.reason})`);
// the GPU machine reads the fixtures it was carried (BLOOMERY_FIXTURES)
const FAM = join(process.env.BLOOMERY_FIXTURES ?? FIXTURES, "families");
const FOLDERS = [
  { fam: "gpt_oss", gguf: "gpt_oss.gguf", row: "gpt-oss" },
  { fam: "deepseek_v3", gguf: "deepseek_v3.gguf", row: "deepseek2" },
  { fam: "glm4_moe", gguf: "glm4_moe.gguf", row: "glm4moe" },
  { fam: "qwen3_5_moe", gguf: "qwen3_5_moe.gguf", row: "qwen35moe" },
  { fam: "qwen3_next", gguf: "qwen3_next.gguf", row: "qwen3next" },
];

const models: Model[] = [];
afterAll(() => models.forEach((m) => m.close()));

describe.skipIf(!st.ok)("hf/ folders on the card", () => {
  for (const F of FOLDERS) {
    const dir = join(FAM, F.fam, "hf");
    test(`${F.fam}: the folder's logits on the card equal its GGUF twin's there, greedy equal, within the card's bound of transformers`, async () => {
      if (!existsSync(dir) || !existsSync(join(FAM, F.fam, F.gguf))) return console.log(`skip: ${dir} was not carried to this machine`);
      const c = FAMILY_CASES.find((k) => k.name.startsWith(F.row))!;
      // the twin: the conformance row's file (the Qwen hybrids' is written from transformers' values, as the
      // folder holds them: the converter's file rounds -exp(A_log) and its norms apart; test/qwen-hybrid.test.ts)
      const gguf = c.gguf;
      const a = Model.load(dir, { nCtx: 256, nThreads: 2, nGpuLayers: "all" });
      models.push(a);
      const b = Model.load(gguf, { nCtx: 256, nThreads: 2, nGpuLayers: "all" });
      models.push(b);
      expect(a.backend.name).toBe("CUDA");
      for (const r of await familyRefs(c)) {
        const la = a.evalSequence(r.prompt, 0), lb = b.evalSequence(r.prompt, 0);
        expect(maxAbsDiff(la, lb)).toBe(0);
        expect(greedy(a, r.prompt, 8)).toEqual(greedy(b, r.prompt, 8));
        const d = maxAbsDiff(la, r.last_logits);
        console.log(`${F.fam} hf/ on the card, prompt ${r.prompt.length}: max |dlogit| vs transformers ${d.toExponential(2)}`);
        expect(d).toBeLessThan(c.cudaTol);
      }
    });
  }
});
