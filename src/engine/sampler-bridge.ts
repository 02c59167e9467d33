// bloomery engine: builds a request's sampler (src/sampling) and shapes its probabilities into
// the protocol's token events (token text and bytes for n_probs / logprobs).
import { Sampler, type TokenProb as SamplerProb } from "../sampling/index.ts";
import type { Model } from "./model.ts";
import type { GenerateRequest, TokenEvent, TokenProb } from "./protocol.ts";
import type { SamplerFactory, TokenSampler } from "./task.ts";

function probOf(model: Model, p: SamplerProb): TokenProb {
  const bytes = model.tokenizer.tokenBytes(p.id);
  return { id: p.id, token: new TextDecoder().decode(bytes), logprob: p.p > 0 ? Math.log(p.p) : -Infinity, bytes: Array.from(bytes) };
}

export const makeSampler: SamplerFactory = (req: GenerateRequest, model: Model): TokenSampler => {
  const s = new Sampler({ ...req.params, ignoreEos: req.ignoreEos, nProbs: req.nProbs }, model.tokenizer);
  return {
    sample(logits, history, allowed) {
      const r = s.sample(logits, history, allowed ? { allowed } : {});
      let probs: TokenEvent["probs"];
      if (req.nProbs > 0) {
        const chosen = probOf(model, { id: r.id, p: r.p, logit: 0 });
        probs = { ...chosen, top: (r.probs ?? []).map((p) => probOf(model, p)) };
      }
      return { id: r.id, probs };
    },
    accept: (id) => s.accept(id),
    candidates: () => s.candidatesNeeded(),
    sampleTop: (ids, logits, history) => ({ id: s.sampleTop(ids, logits, history).id }),
  };
};
