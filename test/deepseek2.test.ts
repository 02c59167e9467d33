// bloomery tests: the deepseek2 family beyond its conformance row - the plain reference of
// test/deepseek2-ref.ts (transformers' modelling, decompressed MLA) first checked against transformers'
// own logits, then against bloomery on variants of the fixture that transformers' fixture lacks: a plain q
// (DeepSeek-V2-Lite, no q LoRA), YaRN with DeepSeek's mscale (V3's and V2-Lite's), softmax routing without
// groups or selection bias (V2); prompts and one-token decode steps (the absorbed form) on the exact and
// ggml paths. Then the synth shapes: the small one with the real files' tensor types against the
// reference, and DeepSeek V3's / Kimi K2's metadata and tensor types (k_b's rows of 128 fall back to Q5_0
// under a K-quant, as llama-quantize does).
import { afterAll, describe, expect, test } from "bun:test";
import { closeSync, mkdtempSync, openSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model.ts";
import { synth, synthWriter } from "../src/cli/synth.ts";
import { GgufFile, GgmlType, GgufValueType } from "../src/gguf/index.ts";
import { familyFor } from "../src/models/registry.ts";
import { deepseekScales } from "../src/models/deepseek2.ts";
import { OpKind, ropeParams, RopeType } from "../src/models/ops.ts";
import { DeepseekRef, tensorF64 } from "./deepseek2-ref.ts";
import { editGguf, type GgufEdit } from "./gguf-edit.ts";
import { argmax, maxAbsDiff } from "./model-fixtures.ts";
import { FIXTURES, hasFixtures } from "./paths.ts";

const dir = join(FIXTURES, "families", "deepseek_v3");
const gguf = join(dir, "deepseek_v3.gguf");
const tmp = mkdtempSync(join(tmpdir(), "bloomery-ds2-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Ref { prompt: number[]; greedy: number[]; last_logits: number[] }
const refs = async (): Promise<Ref[]> => (await Bun.file(join(dir, "ref.json")).json()).refs;

const K = "deepseek2";
const f32 = (value: number) => ({ type: GgufValueType.F32, value });
const u32 = (value: number) => ({ type: GgufValueType.U32, value });

/** The fixture with a plain q of [E, H x (nope + rope)]: q_b x diag(q_a_norm) x q_a, as F32 (V2-Lite's layout). */
function liteEdit(): GgufEdit {
  const f = GgufFile.open(gguf), fd = openSync(gguf, "r");
  const E = f.u32(`${K}.embedding_length`), ql = f.u32(`${K}.attention.q_lora_rank`);
  const qs: Record<string, Float32Array> = {};
  try {
    for (let l = 0; l < f.u32(`${K}.block_count`); l++) {
      const p = `blk.${l}.`;
      const qa = tensorF64(f, fd, `${p}attn_q_a.weight`), qn = tensorF64(f, fd, `${p}attn_q_a_norm.weight`), qb = tensorF64(f, fd, `${p}attn_q_b.weight`);
      const rows = qb.length / ql, m = new Float32Array(rows * E);
      for (let r = 0; r < rows; r++)
        for (let j = 0; j < ql; j++) {
          const c = qb[r * ql + j] * qn[j];
          for (let i = 0; i < E; i++) m[r * E + i] += c * qa[j * E + i];
        }
      qs[`${p}attn_q.weight`] = m;
    }
  } finally {
    closeSync(fd);
  }
  return {
    // q_lora_rank kept, as a lite model's file may have it: the tensors decide (llama.cpp's is_lite)
    tensor: (t) => {
      if (/attn_q_a(_norm)?\.weight$/.test(t.name)) return null;
      const m = t.name.endsWith("attn_q_b.weight") ? qs[t.name.replace("attn_q_b", "attn_q")] : undefined;
      return m ? { name: t.name.replace("attn_q_b", "attn_q"), type: GgmlType.F32, ne: [E, m.length / E], data: new Uint8Array(m.buffer) } : t;
    },
  };
}

const yarn = (logMul: number): GgufEdit => ({
  kv: {
    [`${K}.rope.scaling.type`]: { type: GgufValueType.STRING, value: "yarn" },
    [`${K}.rope.scaling.factor`]: f32(8),
    [`${K}.rope.scaling.original_context_length`]: u32(256),
    [`${K}.rope.scaling.yarn_log_multiplier`]: f32(logMul),
  },
});

// DeepSeek V2's router: softmax over all experts, no groups, no selection bias, weights not normalised
const softmaxRouting: GgufEdit = {
  kv: {
    [`${K}.expert_gating_func`]: u32(1),
    [`${K}.expert_group_count`]: undefined,
    [`${K}.expert_group_used_count`]: undefined,
    [`${K}.expert_weights_norm`]: undefined,
  },
  tensor: (t) => (t.name.endsWith("exp_probs_b.bias") ? null : t),
};

// a routing margin of the reference below this may go either way on a backend (its error is ~1e-3)
const TIE = 2e-4;

/** Ours against the reference: each prompt's last logits, then 8 decode steps after the 40-id prompt
 * (a prompt whose routing has a near-tie somewhere is left out, and said). */
function againstRef(file: string, exact: boolean, tol: number, rs: Ref[]): { last: number; steps: number; top1: number; ties: number } {
  const ref = new DeepseekRef(file);
  const m = Model.load(file, { nCtx: 256, nThreads: 2, exact });
  try {
    let last = 0, steps = 0, top1 = 0, ties = 0;
    for (const r of rs) {
      const want = ref.forward(r.prompt);
      const lg = m.evalSequence(r.prompt, 0);
      if (ref.minGap < TIE) {
        ties++;
        continue;
      }
      const d = maxAbsDiff(lg, want[want.length - 1]);
      last = Math.max(last, d);
      expect(d).toBeLessThan(tol);
    }
    expect(ties).toBeLessThanOrEqual(1);
    const r = rs.find((x) => x.prompt.length === 40)!;
    const seq = [...r.prompt, ...r.greedy.slice(0, 8)];
    const want = ref.forward(seq);
    expect(ref.minGap).toBeGreaterThan(TIE);
    m.evalSequence(r.prompt, 0);
    for (let s = 0; s < 8; s++) {
      const lg = m.evalSequence([seq[r.prompt.length + s]], r.prompt.length + s);
      const w = want[r.prompt.length + s];
      steps = Math.max(steps, maxAbsDiff(lg, w));
      if (argmax(lg) === argmax(Float32Array.from(w))) top1++;
    }
    expect(steps).toBeLessThan(tol);
    return { last, steps, top1, ties };
  } finally {
    m.close();
    ref.close();
  }
}

describe.skipIf(!hasFixtures)("deepseek2 against a plain reference", () => {
  test("the reference itself reproduces transformers' last logits", async () => {
    const ref = new DeepseekRef(gguf);
    try {
      for (const r of await refs()) {
        const lg = ref.forward(r.prompt);
        const d = maxAbsDiff(lg[lg.length - 1], r.last_logits);
        console.log(`reference prompt ${r.prompt.length}: max |dlogit| ${d.toExponential(2)} from transformers'`);
        expect(d).toBeLessThan(1e-4);
      }
    } finally {
      ref.close();
    }
  });

  const variants: [string, () => GgufEdit][] = [
    ["the fixture as converted", () => ({})],
    ["a plain q (no q LoRA, V2-Lite's)", liteEdit],
    ["YaRN x8 with V3's mscale (log multiplier 0.1)", () => yarn(0.1)],
    ["YaRN x8 with V2-Lite's mscale (log multiplier 0.0707)", () => yarn(0.0707)],
    ["softmax routing without groups or selection bias (V2's)", () => softmaxRouting],
  ];
  for (const [i, [name, edit]] of variants.entries()) {
    test(`${name}: prompts and decode steps match on the exact and ggml paths`, async () => {
      const file = i === 0 ? gguf : editGguf(gguf, join(tmp, `v${i}.gguf`), edit());
      const rs = await refs();
      const ex = againstRef(file, true, 5e-3, rs), gg = againstRef(file, false, 1.5e-2, rs);
      console.log(`deepseek2 ${name}: exact ${ex.last.toExponential(2)} (steps ${ex.steps.toExponential(2)}, top-1 ${ex.top1}/8), ggml ${gg.last.toExponential(2)} (steps ${gg.steps.toExponential(2)}, top-1 ${gg.top1}/8)${ex.ties ? `; ${ex.ties} prompt with a routing near-tie left out` : ""}`);
      expect(ex.top1).toBe(8);
    });
  }
});

describe("deepseek2 synth shapes", () => {
  test("test-deepseek2 Q4_K_M: the real files' types (k_b to Q5_0), YaRN and groups, against the reference", async () => {
    const file = join(tmp, "test-ds2.gguf");
    await synth({ model: "test-deepseek2", quant: "Q4_K_M", out: file, seed: 5 });
    const f = GgufFile.open(file);
    expect(f.tensors.get("blk.1.attn_k_b.weight")!.type).toBe(GgmlType.Q5_0);
    expect(f.tensors.get("blk.1.attn_v_b.weight")!.type).toBe(GgmlType.Q4_K);
    expect(f.tensors.get("blk.2.ffn_down_exps.weight")!.type).toBe(GgmlType.Q6_K); // the _M mix's more-bits layers
    const prompt = Array.from({ length: 24 }, (_, i) => (i * 37 + 11) % 1000);
    const ref = new DeepseekRef(file);
    const m = Model.load(file, { nCtx: 64, nThreads: 2, exact: true });
    try {
      const want = ref.forward(prompt);
      const d = maxAbsDiff(m.evalSequence(prompt, 0), want[want.length - 1]);
      // what the layers add to the logits (the MoE layers' part): the bound below is far under it
      const share = maxAbsDiff(want[want.length - 1], ref.forward(prompt, 0)[prompt.length - 1]);
      const moe = maxAbsDiff(want[want.length - 1], ref.forward(prompt, 1)[prompt.length - 1]);
      console.log(`test-deepseek2 Q4_K_M exact path: max |dlogit| ${d.toExponential(2)} from the reference (the layers move the logits by ${share.toFixed(2)}, the MoE layers by ${moe.toFixed(2)})`);
      expect(moe).toBeGreaterThan(0.05);
      expect(d).toBeLessThan(1e-3);
    } finally {
      m.close();
      ref.close();
    }
  });

  for (const [shape, heads, experts, dense] of [["deepseek-v3", 128, 256, 3], ["kimi-k2", 64, 384, 1]] as const) {
    test(`${shape}: the metadata reads as the real file's (one layer written), its k_b falls back to Q5_0`, () => {
      const { writer } = synthWriter({ model: shape, quant: "Q4_K_M", out: "", layers: 4 });
      const path = join(tmp, `${shape}-header.gguf`);
      // the header, and the rest a hole: the file is its real size, nothing is read past the index
      writeFileSync(path, writer.encodeHeader());
      truncateSync(path, writer.fileBytes());
      const f = GgufFile.open(path);
      const fam = familyFor(f), hp = fam.hparams(f);
      expect(fam.program(f, hp).filter((op) => op.kind === OpKind.Mla)).toHaveLength(4);
      expect(hp).toMatchObject({ nLayer: 4, nHead: heads, nHeadKv: 1, headDim: 576, kvVDim: 0, qDim: heads * 128, nExpert: experts, nExpertUsed: 8 });
      expect(f.tensors.get("blk.3.attn_k_b.weight")!.type).toBe(GgmlType.Q5_0);
      expect(f.tensors.has(`blk.${dense - 1}.ffn_gate.weight`) && f.tensors.has(`blk.${dense}.ffn_gate_exps.weight`)).toBe(true);
      const rope = ropeParams(f, K, RopeType.Normal, 64, hp.nCtxTrain);
      const { attnFactor, scale } = deepseekScales(rope, f.f32(`${K}.rope.scaling.yarn_log_multiplier`), 192);
      // transformers: cos / sin times 1 (mscale = mscale_all_dim = 1), the softmax scale times (0.1 ln(factor) + 1)^2
      const factor = 1 / rope.freqScale, m = 0.1 * Math.log(factor) + 1;
      expect(attnFactor * (1 + 0.1 * Math.log(factor))).toBeCloseTo(1, 5);
      expect(scale).toBeCloseTo((m * m) / Math.sqrt(192), 5);
    });
  }
});
