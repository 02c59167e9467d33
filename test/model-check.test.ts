// The load checks (src/engine/model-check.ts) on broken copies of the real demo model: a vocabulary
// one token short of the embedding rows, gate and up experts of different types, block_count smaller
// than the layers present, NaN weights (one token's forward pass), and the real files passing.
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { checkForward, checkModelFile, isModelCheckMessage, ModelCheckError } from "../src/engine/model-check.ts";
import { GgufError, GgufFile } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { editGguf, f32Fill, q8ToF32, GgmlType, GgufValueType } from "./gguf-edit.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

const DEMO = join(FIXTURES, "demo-model", "bloomery-demo-q8_0.gguf");
const dir = mkdtempSync(join(tmpdir(), "bloomery-model-check-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function check(path: string): string[] {
  const f = GgufFile.open(path);
  const fam = familyFor(f);
  return checkModelFile(f, fam.hparams(f));
}

function refusal(path: string): string {
  try {
    check(path);
  } catch (e) {
    expect(e).toBeInstanceOf(ModelCheckError);
    expect(e).toBeInstanceOf(GgufError);
    expect(isModelCheckMessage((e as Error).message)).toBe(true);
    return (e as Error).message;
  }
  throw new Error(`${path} passed the check`);
}

if (!hasFixtures) console.log("model check tests skipped: ../shared/fixtures is absent");

describe.skipIf(!hasFixtures)("model check", () => {
  test("the real files pass (demo Q8_0 and Q4_K_M, tiny F16 and Q8_0)", () => {
    for (const p of ["demo-model/bloomery-demo-q8_0.gguf", "demo-model/bloomery-demo-q4_k_m.gguf", "tiny-qwen3moe/tiny.gguf", "tiny-qwen3moe/tiny-q8_0.gguf"]) {
      expect(check(join(FIXTURES, p))).toEqual([]);
    }
  });

  test("the check is generic: the families' fixture files (deepseek2, glm4moe, gpt-oss, qwen3next, qwen35moe) pass it with hparams from their metadata", () => {
    const famDir = join(FIXTURES, "families");
    if (!existsSync(famDir)) return;
    const seen: string[] = [];
    for (const fam of readdirSync(famDir)) {
      const f = GgufFile.open(join(famDir, fam, `${fam}.gguf`));
      const a = f.str("general.architecture");
      const n = (k: string, d = 0) => { const v = f.raw(`${a}.${k}`); return typeof v === "number" ? v : d; };
      const E = n("embedding_length"), H = n("attention.head_count");
      const hp = {
        arch: a, nVocab: f.tensor("token_embd.weight")!.ne[1], nEmbd: E, nLayer: n("block_count"), nCtxTrain: n("context_length"), nHead: H,
        nHeadKv: n("attention.head_count_kv", H), headDim: n("attention.key_length", E / H), nFf: n("expert_feed_forward_length"),
        nExpert: n("expert_count"), nExpertUsed: n("expert_used_count"), eps: 1e-6, kvLayers: n("block_count"),
      };
      expect(checkModelFile(f, hp)).toEqual([]);
      seen.push(a);
    }
    expect(seen.length).toBeGreaterThanOrEqual(5);
  });

  test("a vocabulary one token short of the embedding rows is refused", () => {
    const toks = GgufFile.open(DEMO).raw("tokenizer.ggml.tokens") as string[];
    const p = editGguf(DEMO, join(dir, "vocab.gguf"), { kv: { "tokenizer.ggml.tokens": { type: GgufValueType.ARRAY, elemType: GgufValueType.STRING, value: toks.slice(0, -1) } } });
    expect(refusal(p)).toContain("model check: the vocabulary has 7999 tokens (tokenizer.ggml.tokens) but token_embd.weight has 8000 rows");
  });

  test("gate and up experts of different types are refused, naming both tensors and types", () => {
    const p = editGguf(DEMO, join(dir, "gateup.gguf"), { tensor: (t) => (t.name === "blk.1.ffn_up_exps.weight" ? { ...t, type: GgmlType.F32, data: q8ToF32(t.data) } : t) });
    expect(refusal(p)).toContain("blk.1.ffn_gate_exps.weight is Q8_0 and blk.1.ffn_up_exps.weight is F32");
  });

  test("gate and up of different shapes, and a down that does not fit them, are refused", () => {
    const p = editGguf(DEMO, join(dir, "down.gguf"), {
      tensor: (t) => (t.name === "blk.2.ffn_down_exps.weight" ? { ...t, ne: [384, 256, 4], data: t.data.subarray(0, t.data.length / 2) } : t),
    });
    expect(refusal(p)).toContain("blk.2.ffn_down_exps.weight is Q8_0 [384, 256, 4] beside blk.2.ffn_gate_exps.weight Q8_0 [256, 384, 8]: down should be [384, 256, 8]");
  });

  test("block_count smaller than the layers in the file is refused", () => {
    const p = editGguf(DEMO, join(dir, "layers.gguf"), { kv: { "qwen3moe.block_count": { type: GgufValueType.U32, value: 2 } } });
    expect(refusal(p)).toContain("qwen3moe.block_count is 2 but the file holds 24 tensors of 2 more layers (blk.2.*, blk.3.*)");
  });

  test("a file with a long tail past its last tensor loads with a note", () => {
    const p = join(dir, "tail.gguf");
    copyFileSync(DEMO, p);
    truncateSync(p, statSync(DEMO).size + 2 ** 30);
    expect(check(p)).toEqual([`model check: ${p} has 1.00 GiB after its last tensor; they are not read`]);
  });

  test("NaN weights: one token's forward pass is refused, naming the tensor", () => {
    const p = editGguf(DEMO, join(dir, "nan.gguf"), { tensor: (t) => (t.name === "blk.0.attn_norm.weight" ? { ...t, data: f32Fill(256, NaN) } : t) });
    expect(check(p)).toEqual([]); // its shapes are right
    const m = Model.load(p, { nCtx: 64 });
    try {
      expect(() => checkForward(m)).toThrow(/model check: a one-token forward pass \(token 0 at position 0\) gives 8000 NaN or infinite logits of 8000 \(the first at token 0\); blk\.0\.attn_norm\.weight holds 256 NaN or infinite values/);
    } finally {
      m.close();
    }
  });

  test("infinity in a quantized tensor's scales (no float tensor to name) is refused too", () => {
    // every Q8_0 block of the output projection with an f16 scale of +inf
    const p = editGguf(DEMO, join(dir, "inf.gguf"), {
      tensor: (t) => {
        if (t.name !== "output.weight") return t;
        const d = new Uint8Array(t.data);
        for (let b = 0; b < d.length; b += 34) { d[b] = 0x00; d[b + 1] = 0x7c; }
        return { ...t, data: d };
      },
    });
    const m = Model.load(p, { nCtx: 64 });
    try {
      expect(() => checkForward(m)).toThrow(/NaN or infinite logits of 8000 \(the first at token 0\); the weights hold NaN or infinity/);
    } finally {
      m.close();
    }
  });

  test("the demo passes the forward check and then serves the same tokens as without it", () => {
    const m = Model.load(DEMO, { nCtx: 64 });
    try {
      const before = m.evalSequence([1, 2, 3], 0);
      checkForward(m);
      const after = m.evalSequence([1, 2, 3], 0);
      expect(after).toEqual(before);
    } finally {
      m.close();
    }
  });
});
