// bloomery models: qwen3next (Qwen3-Next-80B-A3B; llama.cpp's qwen3next.cpp): the Qwen hybrid layout
// (qwen-hybrid.ts) in Qwen3-Next's form: beta and alpha fused (ssm_ba), v heads grouped by k head, NEOX RoPE.
import { HeadMap } from "./ops.ts";
import type { HybridForm } from "./qwen-hybrid.ts";
import { hybridFamily } from "./qwen-hybrid-hf.ts";
import type { Shape } from "./synth-types.ts";
import type { ModelFamily } from "./types.ts";

const FORM: HybridForm = { arch: "qwen3next", fusedBa: true, headMap: HeadMap.Grouped, mropeSections: false };

const base = { arch: FORM.arch, ropeBase: 1e7, eps: 1e-6, nVocab: 151936, nCtxTrain: 262144, nHeadKv: 2, headDim: 256, nRot: 64 };

const shapes: Record<string, Shape> = {
  "qwen3-next-80b-a3b": { ...base, name: "Qwen3-Next-80B-A3B", nLayer: 48, nEmbd: 2048, nHead: 16, nExpert: 512, nExpertUsed: 10, nFfExp: 512, nFf: 5120,
    hybrid: { nKHeads: 16, nVHeads: 32, headK: 128, conv: 4, interval: 4, nFfShexp: 512 } },
  // a small shape for tests: whole K-quant blocks, a real byte-level vocabulary, three delta-net layers and one attention layer
  "test-qwen3next": { ...base, name: "test-qwen3next", nLayer: 4, nEmbd: 256, nHead: 4, headDim: 64, nRot: 16, nExpert: 8, nExpertUsed: 2,
    nFfExp: 256, nFf: 512, nVocab: 1024, nCtxTrain: 4096, hybrid: { nKHeads: 2, nVHeads: 4, headK: 64, conv: 4, interval: 4, nFfShexp: 256 } },
};

export const qwen3next: ModelFamily = hybridFamily(FORM, shapes, ["Qwen3NextForCausalLM"], ["qwen3_next"]);
