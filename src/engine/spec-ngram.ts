// bloomery engine: speculative decoding's drafts from the sequence itself (llama-server's
// `--spec-type ngram-simple`): the last size_n tokens (the sampled one included) looked up in the
// sequence's earlier tokens, latest occurrence first; the tokens that followed it (at most size_m,
// at least size_n of them) are the draft the next forward pass verifies.

/** The speculative-decoding setting of an engine (none: every step one token a sequence). */
export interface SpecConfig {
  /** ngram-simple: drafts from the sequence itself; draft-simple: from a draft model (spec-draft.ts); draft-mtp: from the MTP layer (spec-mtp.ts) */
  type: "none" | "ngram-simple" | "draft-simple" | "draft-mtp";
  /**
   * the kind was not asked for (--spec-type absent): -md alone means draft-simple, or draft-mtp where the draft
   * file has an MTP layer (llama-server's common_speculative_types_from_gguf)
   */
  inferred?: boolean;
  /**
   * on by default, not asked for (draft-mtp where the target's file has an MTP layer): its steps draft
   * only while they measure faster than steps without drafts (spec-guard.ts), and a backend or plan
   * that cannot run it turns it off with a line instead of refusing the model
   */
  auto?: boolean;
  /** ngram-simple: the lookup's length (the sampled token and the size_n - 1 before it) */
  sizeN: number;
  /** ngram-simple: the draft's longest length */
  sizeM: number;
  /** draft-simple / draft-mtp: the draft model's file (draft-mtp: the MTP layer's, else the target's own), its -ngl, the most and fewest tokens a draft, the least probability of a drafted token */
  draftModel?: string;
  draftNgl?: number | "auto" | "all";
  nMax?: number;
  nMin?: number;
  pMin?: number;
}

export const SPEC_NONE: SpecConfig = { type: "none", sizeN: 12, sizeM: 48 };

/**
 * The draft after `last` for a sequence whose KV holds `tokens` (last sampled, not yet in it):
 * empty when the key does not occur earlier or too few tokens follow it. At most `limit` tokens.
 */
export function ngramDraft(tokens: readonly number[], last: number, sizeN: number, sizeM: number, limit = Infinity): number[] {
  const n = tokens.length;
  if (sizeN < 1 || n <= sizeN + sizeM + 1) return [];
  // the key: tokens[n - sizeN + 1 .. n - 1] then last
  const keyAt = (k: number): number => (k === sizeN - 1 ? last : tokens[n - sizeN + 1 + k]);
  // an earlier start j (j >= 1, the key's occurrence not overlapping its own place at the end)
  for (let j = n - sizeN - 1; j >= 1; j--) {
    let k = 0;
    while (k < sizeN && tokens[j + k] === keyAt(k)) k++;
    if (k < sizeN) continue;
    const from = j + sizeN, len = Math.min(sizeM, n - from, limit);
    if (n - from < sizeN || len <= 0) return [];
    return tokens.slice(from, from + len);
  }
  return [];
}
