// bloomery server: reading a completion request's `prompt` (a string, token ids, ids mixed with
// strings, an object with `prompt_string`, or a list of those) into token id lists, as
// llama-server's tokenize_input_prompts does; and the context-size check.
import type { Tokenizer } from "../tokenizer/index.ts";
import { ApiError, badField, exceedContext } from "./errors.ts";

function isIntArray(v: unknown[]): boolean {
  return v.every((e) => typeof e === "number" && Number.isInteger(e));
}

function checkIds(ids: number[], nVocab: number, field: string): number[] {
  for (const id of ids) {
    if (id < 0 || id >= nVocab) throw badField(field, `token id ${id} is outside the vocabulary (0..${nVocab - 1})`);
  }
  return ids;
}

/** A string or a mix of strings and ids: BOS (when the vocabulary adds one) only before a leading string. */
export function tokenizeMixed(tok: Tokenizer, v: string | (string | number)[], addSpecial: boolean, parseSpecial: boolean, field = "prompt"): number[] {
  if (typeof v === "string") return tok.encode(v, { addSpecial, parseSpecial });
  const out: number[] = [];
  v.forEach((p, i) => {
    if (typeof p === "string") out.push(...tok.encode(p, { addSpecial: addSpecial && i === 0, parseSpecial }));
    else if (typeof p === "number" && Number.isInteger(p)) out.push(p);
    else throw badField(`${field}[${i}]`, "expected a string or a token id");
  });
  return checkIds(out, tok.nVocab, field);
}

function subPrompt(tok: Tokenizer, p: unknown, field: string): number[] {
  if (typeof p === "string") return tokenizeMixed(tok, p, true, true, field);
  if (Array.isArray(p)) {
    if (isIntArray(p)) return checkIds(p as number[], tok.nVocab, field);
    if (p.every((e) => typeof e === "string" || (typeof e === "number" && Number.isInteger(e)))) return tokenizeMixed(tok, p as (string | number)[], true, true, field);
  }
  if (p !== null && typeof p === "object" && !Array.isArray(p) && "prompt_string" in p) {
    const o = p as Record<string, unknown>;
    if (o.multimodal_data !== undefined) throw new ApiError("not_supported_error", "multimodal data was given, but the model does not support multimodal requests");
    const s = o.prompt_string;
    if (typeof s === "string" || Array.isArray(s)) return subPrompt(tok, s, `${field}.prompt_string`);
  }
  throw badField(field, "\"prompt\" elements must be a string, a list of tokens, a JSON object containing a prompt string, or a list of mixed strings & tokens");
}

/** The prompts of a completion request (several when `prompt` is a list of prompts). */
export function readPrompts(tok: Tokenizer, prompt: unknown): number[][] {
  if (prompt === undefined || prompt === null) throw badField("prompt", "\"prompt\" is required");
  if (Array.isArray(prompt) && prompt.length === 0) throw badField("prompt", "\"prompt\" must not be empty");
  // a list that holds no bare token ids is a list of prompts
  if (Array.isArray(prompt) && !prompt.some((e) => typeof e === "number")) {
    return prompt.map((p, i) => subPrompt(tok, p, `prompt[${i}]`));
  }
  return [subPrompt(tok, prompt, "prompt")];
}

/** llama refuses a prompt that leaves no room to generate: prompt tokens >= the slot context. */
export function checkContext(nPrompt: number, nCtxSlot: number): void {
  if (nPrompt >= nCtxSlot) throw exceedContext(nPrompt, nCtxSlot);
}
