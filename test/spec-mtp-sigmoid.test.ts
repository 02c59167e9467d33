// Speculative decoding from the MTP layer of GLM-4.5's and DeepSeek V3's files (src/models/mtp-layer.ts:
// --spec-type draft-mtp) on the CPU: the family fixtures (transformers-made glm4moe and deepseek2) with an
// MTP layer appended as the real files carry one (test/mtp-edit.ts), and synth test-glm4moe with its own:
// greedy output with draft-mtp is token for token the output without it (four slots at once), drafts
// made and rejected (the KV cache - DeepSeek's latent one too - rolled back); a copy whose MTP layer passes
// the token's embedding through, the same (random weights predict almost nothing: an honest acceptance
// figure needs a trained MTP layer); the draft's program is the layer's own tensors and the MTP ones.
import { afterAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { synth } from "../src/cli/synth.ts";
import { Model } from "../src/engine/model.ts";
import { loadMtpDraft, runsOwnMtp, type MtpDraft } from "../src/engine/spec-mtp.ts";
import type { SpecConfig } from "../src/engine/spec-ngram.ts";
import { GgufFile } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { nearCopyMtp, withMtp } from "./mtp-edit.ts";
import { FIXTURES } from "./paths.ts";
import { runGreedy } from "./spec-run.ts";

setDefaultTimeout(300000);
const tmp = mkdtempSync(join(tmpdir(), "bloomery-spec-sigmoid-"));
const opened: { close(): void }[] = [];
afterAll(() => {
  opened.forEach((m) => m.close());
  rmSync(tmp, { recursive: true, force: true });
});
const SPEC: SpecConfig = { type: "draft-mtp", sizeN: 12, sizeM: 48, nMax: 3 };

function load(path: string, nSlots = 4): Model {
  const m = Model.load(path, { nCtx: 512, nSlots, nThreads: 2, maxTokens: 64, log: () => {} });
  opened.push(m);
  return m;
}
function mtpOf(m: Model): MtpDraft {
  const d = loadMtpDraft(m, m.gguf, { nThreads: 2, log: () => {} }, 3, 0, 0);
  opened.push(d);
  return d;
}

const run = runGreedy;

/** Greedy with draft-mtp against greedy without, four slots; the scheduler's counts. */
function lossless(path: string, prompts: number[][], n: number): { drafted: number; accepted: number; passes: number; plainPasses: number } {
  const m = load(path, 4), d = mtpOf(m);
  const plain = run(m, prompts, n), got = run(m, prompts, n, SPEC, d);
  for (let i = 0; i < prompts.length; i++) expect(got.runs[i].tokens).toEqual(plain.runs[i].tokens);
  const st = got.sched.stats();
  expect(st.specDrafted).toBeGreaterThan(0);
  return { drafted: st.specDrafted, accepted: st.specAccepted, passes: st.nDecode, plainPasses: plain.sched.stats().nDecode };
}

const FAM = join(FIXTURES, "families");
for (const [dir, arch] of [["glm4_moe", "glm4moe"], ["deepseek_v3", "deepseek2"]] as const) {
  const src = join(FAM, dir, `${dir}.gguf`);
  describe.skipIf(!existsSync(src))(`${arch}: the fixture with an MTP layer appended`, () => {
    const mtp = join(tmp, `${dir}-mtp.gguf`), near = join(tmp, `${dir}-near.gguf`);
    const prompts = async () => ((await Bun.file(join(FAM, dir, "ref.json")).json()).refs as { prompt: number[] }[]).map((r) => r.prompt).slice(0, 4);

    test("the draft's program: the MTP input, the layer's own block on KV layer 0, the MTP head; draft-mtp is the file's default", () => {
      withMtp(src, arch, mtp);
      const f = GgufFile.open(mtp), fam = familyFor(f);
      expect(fam.mtp?.has(f)).toBe(true);
      expect(runsOwnMtp(f)).toBe(true);
      const hp = fam.mtp!.hparams(f);
      expect(hp.nLayer).toBe(1);
      expect(hp.kvLayers).toBe(1);
      const il = f.u32(`${arch}.block_count`) - 1;
      const ops = fam.mtp!.program(f, hp);
      const names = ops.flatMap((op) => Object.values(op.tensors as Record<string, string | undefined>)).filter((n): n is string => !!n);
      expect(names).toContain(`blk.${il}.nextn.eh_proj.weight`);
      expect(names).toContain(`blk.${il}.nextn.shared_head_norm.weight`);
      expect(names.filter((n) => /^blk\.\d+\./.test(n) && !n.startsWith(`blk.${il}.`))).toEqual([]);
      const kv = ops.map((op) => (op.params as { kv_layer?: number }).kv_layer).filter((k) => k !== undefined);
      expect(kv).toEqual([0]);
    });

    test("greedy output with draft-mtp is the output without it (four slots)", async () => {
      if (!existsSync(mtp)) withMtp(src, arch, mtp);
      const r = lossless(mtp, await prompts(), 24);
      console.log(`${arch} fixture + MTP layer: ${r.accepted} of ${r.drafted} draft tokens accepted; forward passes ${r.passes} (without drafts ${r.plainPasses})`);
    });

    test("an MTP layer that passes the embedding through: output unchanged (its acceptance printed)", async () => {
      if (!existsSync(mtp)) withMtp(src, arch, mtp);
      const E = GgufFile.open(mtp).u32(`${arch}.embedding_length`);
      nearCopyMtp(mtp, near, E);
      const r = lossless(near, await prompts(), 24);
      console.log(`${arch} fixture + near-copy MTP layer: ${r.accepted} of ${r.drafted} draft tokens accepted; forward passes ${r.passes} (without drafts ${r.plainPasses})`);
      expect(r.accepted).toBeLessThan(r.drafted);
    });
  });
}

test("synth test-glm4moe (its own MTP layer): greedy output with draft-mtp is the output without it", async () => {
  const file = join(tmp, "glm.gguf");
  await synth({ model: "test-glm4moe", quant: "Q8_0", out: file, centered: true, seed: 5 });
  const prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [50, 60, 70, 80, 90, 100, 200, 300], [700, 701, 702], [999, 3, 777, 20, 21]];
  const r = lossless(file, prompts, 20);
  console.log(`synth test-glm4moe: ${r.accepted} of ${r.drafted} draft tokens accepted`);
});
