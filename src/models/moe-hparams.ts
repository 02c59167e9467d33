// bloomery models: the hyperparameters a GQA attention + routed-experts family reads from its GGUF
// keys (`<arch>.*`: qwen3moe, gpt-oss), checked once: layer and head counts, K/V widths, experts.
import type { GgufFile } from "../gguf/index.ts";
import { GgufError } from "../gguf/index.ts";
import type { HParams } from "./types.ts";

/** The family's HParams from `${arch}.*` keys and token_embd; a bad value is a GgufError naming the family. */
export function gqaMoeHParams(f: GgufFile, arch: string): HParams {
  const a = arch;
  const bad = (what: string): never => { throw new GgufError(f.path, `${a}: ${what}`); };
  const nLayer = f.u32(`${a}.block_count`);
  const nEmbd = f.u32(`${a}.embedding_length`);
  const nHead = f.u32(`${a}.attention.head_count`);
  const nHeadKv = f.u32(`${a}.attention.head_count_kv`, nHead);
  const headDim = f.u32(`${a}.attention.key_length`, nEmbd / nHead);
  const vLen = f.u32(`${a}.attention.value_length`, headDim);
  if (vLen !== headDim) bad(`attention.value_length ${vLen} differs from key_length ${headDim}`);
  const emb = f.requireTensor("token_embd.weight");
  const hp: HParams = {
    arch: a,
    nVocab: emb.ne[1],
    nEmbd,
    nLayer,
    nCtxTrain: f.u32(`${a}.context_length`),
    nHead,
    nHeadKv,
    headDim,
    nFf: f.u32(`${a}.expert_feed_forward_length`),
    nExpert: f.u32(`${a}.expert_count`),
    nExpertUsed: f.u32(`${a}.expert_used_count`),
    eps: f.f32(`${a}.attention.layer_norm_rms_epsilon`),
    kvLayers: nLayer,
  };
  if (nLayer < 1 || nLayer > 1024) bad(`block_count ${nLayer} is out of range`);
  if (nHead < 1 || nHeadKv < 1 || nHead % nHeadKv !== 0) bad(`head_count ${nHead} is not a multiple of head_count_kv ${nHeadKv}`);
  if (headDim < 2 || headDim > 1024 || headDim % 2) bad(`key_length ${headDim} is not an even size up to 1024`);
  if (hp.nExpert < 1 || hp.nExpertUsed < 1 || hp.nExpertUsed > hp.nExpert) bad(`expert_used_count ${hp.nExpertUsed} of ${hp.nExpert} experts`);
  if (emb.ne[0] !== nEmbd) bad(`token_embd has rows of ${emb.ne[0]}, embedding_length is ${nEmbd}`);
  return hp;
}
