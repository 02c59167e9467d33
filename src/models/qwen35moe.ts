// bloomery models: qwen35moe (Qwen3.5-35B-A3B, Qwen3.6-35B-A3B and their larger siblings; llama.cpp's
// qwen35moe.cpp): the Qwen hybrid layout (qwen-hybrid.ts) in Qwen3.5's form: beta and alpha apart, v heads tiled,
// interleaved M-RoPE sections (plain NEOX RoPE on text).
import { HeadMap } from "./ops.ts";
import type { HybridForm } from "./qwen-hybrid.ts";
import { hybridFamily } from "./qwen-hybrid-hf.ts";
import type { Shape } from "./synth-types.ts";
import type { ModelFamily } from "./types.ts";

const FORM: HybridForm = { arch: "qwen35moe", fusedBa: false, headMap: HeadMap.Tiled, mropeSections: true };

const base = { arch: FORM.arch, ropeBase: 1e7, eps: 1e-6, nVocab: 248320, nCtxTrain: 262144, nHeadKv: 2, headDim: 256, nRot: 64 };

const shapes: Record<string, Shape> = {
  "qwen3.6-35b-a3b": { ...base, name: "Qwen3.6-35B-A3B", nLayer: 40, nEmbd: 2048, nHead: 16, nExpert: 256, nExpertUsed: 8, nFfExp: 512, nFf: 512,
    hybrid: { nKHeads: 16, nVHeads: 32, headK: 128, conv: 4, interval: 4, nFfShexp: 512 } },
  // a small shape for tests: whole K-quant blocks, a real byte-level vocabulary, three delta-net layers and one attention layer
  "test-qwen35moe": { ...base, name: "test-qwen35moe", nLayer: 4, nEmbd: 256, nHead: 4, headDim: 64, nRot: 16, nExpert: 8, nExpertUsed: 2,
    nFfExp: 256, nFf: 256, nVocab: 1024, nCtxTrain: 4096, hybrid: { nKHeads: 2, nVHeads: 4, headK: 64, conv: 4, interval: 4, nFfShexp: 256 } },
};
// the test shape with the MTP layer the real files append (nextn_predict_layers 1: speculative decoding's draft-mtp)
shapes["test-qwen35moe-mtp"] = { ...shapes["test-qwen35moe"], name: "test-qwen35moe-mtp", hybrid: { ...shapes["test-qwen35moe"].hybrid!, nextn: 1 } };

export const qwen35moe: ModelFamily = hybridFamily(FORM, shapes, ["Qwen3_5MoeForCausalLM"], ["qwen3_5_moe_text"]);
