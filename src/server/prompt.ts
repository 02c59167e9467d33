// bloomery server: reading a completion request's `prompt` (a string, token ids, ids mixed with
// strings, an object with `prompt_string`, or a list of those) into token id lists, as
// llama-server's tokenize_input_prompts does; prompt texts are tokenized off the serving thread
// when long (ServerContext.encodePrompt), and a text too long for the context is refused before
// it is tokenized at all; and the context-size check.
import { ApiError, badField, exceedContext } from "./errors.ts";
import type { ServerContext } from "./state.ts";

function isIntArray(v: unknown[]): boolean {
  return v.every((e) => typeof e === "number" && Number.isInteger(e));
}

function checkIds(ids: number[], nVocab: number, field: string): number[] {
  for (const id of ids) {
    if (id < 0 || id >= nVocab) throw badField(field, `token id ${id} is outside the vocabulary (0..${nVocab - 1})`);
  }
  return ids;
}

/** What a prompt may hold at most: its tokens must stay under `nCtx` (0: no limit). */
export interface PromptLimit {
  nCtx: number;
}

/**
 * A text that cannot fit: every token covers at most the vocabulary's longest piece, so a text of
 * more than nCtx x that many UTF-16 units (each at least one UTF-8 byte) is more than nCtx tokens.
 * Refused before tokenizing (a 50 MB prompt costs nothing but its read).
 */
export function checkTextFits(ctx: ServerContext, chars: number, limit?: PromptLimit): void {
  if (!limit || limit.nCtx <= 0) return;
  const least = Math.ceil(chars / ctx.maxTokenBytes);
  if (least >= limit.nCtx) {
    throw new ApiError(
      "exceed_context_size_error",
      `request (at least ${least} tokens: ${chars} characters, at most ${ctx.maxTokenBytes} bytes a token) exceeds the available context size (${limit.nCtx} tokens), try increasing it`,
      { n_prompt_tokens: least, n_ctx: limit.nCtx },
    );
  }
}

/** Tokens of a prompt text, refused first when it cannot fit. */
export async function encodeText(ctx: ServerContext, text: string, addSpecial: boolean, parseSpecial: boolean, limit?: PromptLimit): Promise<number[]> {
  checkTextFits(ctx, text.length, limit);
  return ctx.encodePrompt(text, { addSpecial, parseSpecial });
}

/** A string or a mix of strings and ids: BOS (when the vocabulary adds one) only before a leading string. */
export async function tokenizeMixed(ctx: ServerContext, v: string | (string | number)[], addSpecial: boolean, parseSpecial: boolean, field = "prompt", limit?: PromptLimit): Promise<number[]> {
  if (typeof v === "string") return encodeText(ctx, v, addSpecial, parseSpecial, limit);
  let chars = 0;
  v.forEach((p, i) => {
    if (typeof p === "string") chars += p.length;
    else if (!(typeof p === "number" && Number.isInteger(p))) throw badField(`${field}[${i}]`, "expected a string or a token id");
  });
  checkTextFits(ctx, chars, limit);
  const out: number[] = [];
  for (let i = 0; i < v.length; i++) {
    const p = v[i];
    if (typeof p === "string") out.push(...(await ctx.encodePrompt(p, { addSpecial: addSpecial && i === 0, parseSpecial })));
    else out.push(p);
  }
  return checkIds(out, ctx.tokenizer.nVocab, field);
}

async function subPrompt(ctx: ServerContext, p: unknown, field: string, limit?: PromptLimit): Promise<number[]> {
  if (typeof p === "string") return tokenizeMixed(ctx, p, true, true, field, limit);
  if (Array.isArray(p)) {
    if (isIntArray(p)) return checkIds(p as number[], ctx.tokenizer.nVocab, field);
    if (p.every((e) => typeof e === "string" || (typeof e === "number" && Number.isInteger(e)))) return tokenizeMixed(ctx, p as (string | number)[], true, true, field, limit);
  }
  if (p !== null && typeof p === "object" && !Array.isArray(p) && "prompt_string" in p) {
    const o = p as Record<string, unknown>;
    if (o.multimodal_data !== undefined) throw new ApiError("not_supported_error", "multimodal data was given, but the model does not support multimodal requests");
    const s = o.prompt_string;
    if (typeof s === "string" || Array.isArray(s)) return subPrompt(ctx, s, `${field}.prompt_string`, limit);
  }
  throw badField(field, "\"prompt\" elements must be a string, a list of tokens, a JSON object containing a prompt string, or a list of mixed strings & tokens");
}

/** The prompts of a completion request (several when `prompt` is a list of prompts). */
export async function readPrompts(ctx: ServerContext, prompt: unknown, limit?: PromptLimit): Promise<number[][]> {
  if (prompt === undefined || prompt === null) throw badField("prompt", "\"prompt\" is required");
  if (Array.isArray(prompt) && prompt.length === 0) throw badField("prompt", "\"prompt\" must not be empty");
  // a list that holds no bare token ids is a list of prompts
  if (Array.isArray(prompt) && !prompt.some((e) => typeof e === "number")) {
    const out: number[][] = [];
    for (let i = 0; i < prompt.length; i++) out.push(await subPrompt(ctx, prompt[i], `prompt[${i}]`, limit));
    return out;
  }
  return [await subPrompt(ctx, prompt, "prompt", limit)];
}

/** llama refuses a prompt that leaves no room to generate: prompt tokens >= the slot context. */
export function checkContext(nPrompt: number, nCtxSlot: number): void {
  if (nPrompt >= nCtxSlot) throw exceedContext(nPrompt, nCtxSlot);
}
