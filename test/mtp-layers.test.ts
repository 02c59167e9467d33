// bloomery tests: the MTP (next-token prediction) layers GLM-4.5 and DeepSeek V3 files append after
// their main layers (nextn_predict_layers, llama.cpp's nextn.* tensors): the load works, says once that
// the layer is not part of the forward pass (draft-mtp runs it: test/spec-mtp-sigmoid.test.ts), the
// forward pass reads none of its tensors, and gives the same logits as the file without it.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { synth } from "../src/cli/synth.ts";
import { Model } from "../src/engine/model.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { withMtp } from "./mtp-edit.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

const tmp = mkdtempSync(join(tmpdir(), "bloomery-mtp-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function load(file: string): { m: Model; lines: string[] } {
  const lines: string[] = [];
  return { m: Model.load(file, { nCtx: 64, nThreads: 2, log: (l) => lines.push(l) }), lines };
}

const prompt = [3, 141, 59, 26, 53, 58, 97, 93, 23, 84];

describe.skipIf(!hasFixtures)("MTP layers", () => {
  for (const [arch, dir, file] of [["glm4moe", "glm4_moe", "glm4_moe.gguf"], ["deepseek2", "deepseek_v3", "deepseek_v3.gguf"]] as const) {
    test(`${arch}: a file with an MTP layer loads, says so once, and runs as the file without it`, () => {
      const src = join(FIXTURES, "families", dir, file);
      const mtp = withMtp(src, arch, join(tmp, `${arch}-mtp.gguf`));
      const a = load(src), b = load(mtp);
      try {
        expect(b.m.hp.nLayer).toBe(a.m.hp.nLayer);
        const said = b.lines.filter((l) => /MTP/.test(l));
        console.log(said[0]);
        expect(said).toHaveLength(1);
        expect(said[0]).toMatch(new RegExp(`^${arch}: the file's MTP \\(next-token prediction\\) layer blk\\.${a.m.hp.nLayer} .* is not part of the forward pass; --spec-type draft-mtp runs it as a speculative draft`));
        expect(a.lines.filter((l) => /MTP/.test(l))).toHaveLength(0);
        // the forward pass reads none of its tensors
        const f = GgufFile.open(mtp), fam = familyFor(f);
        const names = fam.program(f, fam.hparams(f)).flatMap((op) => Object.values(op.tensors as Record<string, string | undefined>));
        expect(names.filter((n) => n?.startsWith(`blk.${a.m.hp.nLayer}.`))).toEqual([]);
        expect([...b.m.evalSequence(prompt, 0)]).toEqual([...a.m.evalSequence(prompt, 0)]);
      } finally {
        a.m.close();
        b.m.close();
      }
    });
  }
});

test("synth test-glm4moe (with its MTP layer) loads and says once that the layer is not part of the forward pass", async () => {
  const file = join(tmp, "glm.gguf");
  await synth({ model: "test-glm4moe", quant: "Q8_0", out: file, seed: 3 });
  const { m, lines } = load(file);
  try {
    expect(lines.filter((l) => /MTP/.test(l))).toHaveLength(1);
    expect(Number.isFinite(m.evalSequence(prompt, 0)[0])).toBe(true);
  } finally {
    m.close();
  }
});
