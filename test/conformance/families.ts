// The family conformance table: each family's tiny model (GGUF) against its transformers fixture,
// with the thresholds every backend is held to, declared once. test/families-cpu.test.ts runs it on
// each CPU path, test/cuda-families.test.ts on the card.
import { join } from "node:path";
import { existsSync } from "node:fs";
import { FIXTURES } from "../paths.ts";
import { exactHybridGguf } from "./qwen-hybrid-exact.ts";

export interface FamilyRef { prompt: number[]; greedy: number[]; margins: number[]; last_logits: number[] }

export interface FamilyCase {
  /** the case's name: family and file */
  name: string;
  gguf: string;
  /** transformers' outputs (ref.json's refs) */
  ref: string;
  /** max |logit - transformers'| of a prompt's last position: the exact path (f32 activations) */
  exactTol: number;
  /** the same with activations quantized as ggml does (the CPU's default path) */
  ggmlTol: number;
  /** the card's kernels (int8 / f16 activations, f16 KV) */
  cudaTol: number;
  /** a greedy token may part from transformers' only where its top-2 margin is below this */
  clear: number;
  /** the share of teacher-forced top-1 picks that must agree at margins of 0.1 or more (quantized activations) */
  agree: number;
  /** on the card: the refusal the load must give while the family is not ported (a pattern), or undefined: it runs */
  cudaRefusal?: RegExp;
  /** llama.cpp's own answer on the GGUF (llamacpp-ref.json: greedy and last logits a prompt), when the fixture has one */
  llamacpp?: string;
  /** max |logit - llama.cpp's| of a prompt's last position on the CPU's ggml paths (with `llamacpp`) */
  llamaTol?: number;
}

// the GPU machine reads the fixtures it was carried (BLOOMERY_FIXTURES)
const FIX = process.env.BLOOMERY_FIXTURES ?? FIXTURES;
const tiny = join(FIX, "tiny-qwen3moe"), fam = join(FIX, "families");

/** The Qwen hybrids' file with transformers' values (qwen-hybrid-exact.ts), or the converter's when the hf/ folder is absent. */
function hybrid(name: string, tiled: boolean): string {
  const dir = join(fam, name);
  return existsSync(join(dir, "hf", "model.safetensors")) ? exactHybridGguf(dir, tiled) : join(dir, `${name}.gguf`);
}

export const FAMILY_CASES: FamilyCase[] = [
  { name: "qwen3moe F16", gguf: join(tiny, "tiny.gguf"), ref: join(tiny, "ref.json"), exactTol: 5e-3, ggmlTol: 2e-2, cudaTol: 2e-2, clear: 0.02, agree: 0.85 },
  { name: "qwen3moe Q8_0", gguf: join(tiny, "tiny-q8_0.gguf"), ref: join(tiny, "ref-q8_0.json"), exactTol: 5e-3, ggmlTol: 0.5, cudaTol: 0.5, clear: 0.02, agree: 0.85 },
  // the 120-id prompt crosses the 16-position window four times; llama.cpp's own last logits are 1.3e-2 from transformers' there
  {
    name: "gpt-oss F16", gguf: join(fam, "gpt_oss", "gpt_oss.gguf"), ref: join(fam, "gpt_oss", "ref.json"), exactTol: 2e-2, ggmlTol: 4e-2, cudaTol: 5e-2,
    clear: 0.02, agree: 0.9,
  },
  // GLM: llama.cpp's own last logits are 3.9e-2 from transformers' on the 120-id prompt (5e-3 on the
  // others); ggml's numerics (f16 activations into the F16 products) give that offset: the exact path
  // keeps 1.6e-3, the ggml paths 4.0e-2 from transformers and 4.5e-3 from llama.cpp
  {
    name: "glm4moe F16", gguf: join(fam, "glm4_moe", "glm4_moe.gguf"), ref: join(fam, "glm4_moe", "ref.json"), exactTol: 5e-3, ggmlTol: 5e-2, cudaTol: 5e-2,
    clear: 0.02, agree: 0.9, llamacpp: join(fam, "glm4_moe", "llamacpp-ref.json"), llamaTol: 1e-2,
  },
  // DeepSeek V3 (MLA, grouped sigmoid routing): llama.cpp's last logits are within 5.6e-3 of transformers', and
  // its greedy text parts from transformers' only on the 5-id prompt, at step 6 (a margin of 0.001); ours
  // keeps 1.2e-3 on the exact path and 2.7e-3 on the ggml paths, greedy equal on all four
  {
    name: "deepseek2 F16", gguf: join(fam, "deepseek_v3", "deepseek_v3.gguf"), ref: join(fam, "deepseek_v3", "ref.json"), exactTol: 5e-3, ggmlTol: 1e-2,
    cudaTol: 2e-2, clear: 0.02, agree: 0.9,
    llamacpp: join(fam, "deepseek_v3", "llamacpp-ref.json"), llamaTol: 1e-2,
  },
  // the Qwen hybrids (3 gated delta-net layers, 1 gated attention layer) on their file with ssm_a and the (1 + w) norm
  // weights as transformers computes them (qwen-hybrid-exact.ts; the converter's f16 rounding of those alone puts
  // llama.cpp 1e-2 to 5e-2 from transformers): the exact path within 1e-3 of transformers, greedy equal on all four
  // prompts; the ggml paths (f16 activations into the F16 products, the delta rule in f32 as ggml's) 2.5e-2 for
  // qwen35moe, and for qwen3next 2.7e-2 but 8.1e-2 on the 120-id prompt (the recurrence carries the rounding: llama.cpp's
  // own answer on the converter's file is 4.6e-2 from transformers' there); the converter's own file against llama.cpp's
  // answer: test/qwen-hybrid.test.ts
  {
    name: "qwen35moe F16", gguf: hybrid("qwen3_5_moe", true), ref: join(fam, "qwen3_5_moe", "ref.json"), exactTol: 2e-3, ggmlTol: 4e-2, cudaTol: 5e-2,
    clear: 0.02, agree: 0.9,
  },
  {
    name: "qwen3next F16", gguf: hybrid("qwen3_next", false), ref: join(fam, "qwen3_next", "ref.json"), exactTol: 2e-3, ggmlTol: 0.1, cudaTol: 0.1,
    clear: 0.02, agree: 0.9,
  },
];

/** llama.cpp's answers of a case (greedy and last logits a prompt, in ref.json's order). */
export async function llamaRefs(c: FamilyCase): Promise<{ greedy: number[]; last_logits: number[] }[] | undefined> {
  return c.llamacpp ? (await Bun.file(c.llamacpp).json()).refs : undefined;
}

export async function familyRefs(c: FamilyCase): Promise<FamilyRef[]> {
  return (await Bun.file(c.ref).json()).refs;
}

/** The steps greedy decoding agrees with the reference before parting; a part must be at a margin below `clear`. */
export function greedyAgreement(ours: number[], ref: FamilyRef): number {
  let i = 0;
  while (i < ref.greedy.length && ours[i] === ref.greedy[i]) i++;
  return i;
}
