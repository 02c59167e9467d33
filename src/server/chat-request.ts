// bloomery server: an OpenAI chat request -> what the engine runs and how its output is read
// back (llama-server's oaicompat_chat_params_parse): template rendering with tools and
// chat_template_kwargs, tool_choice, structured output, reasoning format and budget, logprobs.
import {
  type ChatMessage,
  type OutputOptions,
  type ToolCallSyntax,
  type ToolDef,
  type ToolPolicy,
  applyChatTemplate,
  getChatTemplate,
  outputMarkers,
  parseReasoningFormat,
  toolCallWrapping,
  toolPromptPolicy,
} from "../chat/index.ts";
import { GrammarMatcher } from "../grammar/index.ts";
import { grammarOf } from "./completion.ts";
import { badField, badRequest, notSupported } from "./errors.ts";
import { type GenSettings, readGenSettings } from "./params.ts";
import { checkContext, checkTextFits, encodeText } from "./prompt.ts";
import type { ChoiceSpec, ReasoningBudget } from "./runner.ts";
import type { ServerContext } from "./state.ts";
import { toolCallGrammar } from "./tool-grammar.ts";
import { harmonyGrammars } from "./tool-grammar-harmony.ts";

/** gpt-oss's reasoning as the budget sees it: the analysis message (llama's thinking tags for it). */
const HARMONY_THINKING = { start: "<|channel|>analysis<|message|>", end: "<|end|>" };

type Body = Record<string, unknown>;

export interface PreparedChat {
  prompt: string;
  tokens: number[];
  settings: GenSettings;
  grammar?: string;
  policy: ToolPolicy;
  /** options for a ChatOutputParser per choice */
  parser: OutputOptions;
  budget?: ReasoningBudget;
  specs: ChoiceSpec[];
}

const MEDIA_TYPES: Record<string, string> = { image_url: "image", input_audio: "audio", input_video: "video", video_url: "video" };

/** llama's checks of message contents (media the model cannot take, unknown part types). */
function checkMessages(messages: unknown[]): void {
  messages.forEach((m, i) => {
    if (m === null || typeof m !== "object" || Array.isArray(m)) throw badField(`messages[${i}]`, "expected an object");
    const content = (m as Record<string, unknown>).content;
    if (!Array.isArray(content)) return;
    content.forEach((p, j) => {
      const type = p !== null && typeof p === "object" ? (p as Record<string, unknown>).type : undefined;
      if (typeof type === "string" && type in MEDIA_TYPES) {
        throw badRequest(`${MEDIA_TYPES[type]} input is not supported - hint: if this is unexpected, you may need to provide the mmproj`);
      }
      if (type !== "text") throw badField(`messages[${i}].content[${j}].type`, "unsupported content[].type");
    });
  });
}

/** Characters of every string in the messages (a lower bound of what the prompt renders to). */
function textChars(v: unknown, depth = 0): number {
  if (typeof v === "string") return v.length;
  if (depth > 8 || v === null || typeof v !== "object") return 0;
  let n = 0;
  for (const x of Array.isArray(v) ? v : Object.values(v)) n += textChars(x, depth + 1);
  return n;
}

/** A system message that describes the tools, for templates that do not render tools themselves. */
function toolSystemText(tools: ToolDef[]): string {
  const list = tools.map((t) => JSON.stringify({ type: "function", function: t.function })).join("\n");
  return (
    "# Tools\n\nYou can call these functions to help with the request. Their signatures, as JSON schema:\n" +
    `<tools>\n${list}\n</tools>\n\n` +
    'To call one, write a JSON object with the function name and arguments between <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
  );
}

function withToolSystem(messages: ChatMessage[], tools: ToolDef[]): ChatMessage[] {
  const text = toolSystemText(tools);
  if (messages.length > 0 && messages[0].role === "system" && typeof messages[0].content === "string") {
    return [{ ...messages[0], content: `${messages[0].content}\n\n${text}` }, ...messages.slice(1)];
  }
  return [{ role: "system", content: text }, ...messages];
}

/** Renders the prompt of a chat request (for generation, /apply-template and token counting). */
export function renderChatPrompt(ctx: ServerContext, body: Body): {
  prompt: string;
  policy: ToolPolicy;
  syntax: ToolCallSyntax;
  startsInsideThinking: boolean;
  enableThinking: boolean;
  parsePrefix: string;
} {
  const o = ctx.opts;
  const messages = body.messages;
  if (!Array.isArray(messages)) throw badField("messages", "'messages' is required and must be an array");
  const tools = Array.isArray(body.tools) && body.tools.length > 0 ? (body.tools as ToolDef[]) : undefined;
  const choice = body.tool_choice ?? "auto";
  if (!o.jinja) {
    if (tools) throw badRequest("tools param requires --jinja flag");
    if (choice !== "auto") throw badRequest("tool_choice param requires --jinja flag");
  }
  checkMessages(messages);
  const policy = toolPromptPolicy(body.tool_choice, tools);
  const tpl = getChatTemplate(ctx.template);
  let syntax = ctx.chatFormat.toolCalls;
  let msgs = messages as ChatMessage[];
  if (policy.offered.length > 0 && syntax === "none") {
    // the template knows no tool syntax: describe the tools in the system message and read Hermes-style calls
    syntax = "hermes";
    if (!tpl.caps.supports_tools && policy.mode !== "none") msgs = withToolSystem(msgs, policy.offered);
  }
  const kwargs: Record<string, unknown> = { ...o.chatTemplateKwargs };
  // --reasoning-effort is one of llama's default template kwargs ("default": the template's own)
  if (o.reasoningEffort !== "default") kwargs.reasoning_effort = o.reasoningEffort;
  const kw = body.chat_template_kwargs;
  if (kw !== undefined && kw !== null) {
    if (typeof kw !== "object" || Array.isArray(kw)) throw badField("chat_template_kwargs", "expected an object");
    Object.assign(kwargs, kw);
  }
  let enableThinking: boolean | undefined = o.reasoningBudget === 0 ? false : undefined;
  const effort = body.reasoning_effort;
  if (typeof effort === "string") {
    if (effort === "none") {
      enableThinking = false;
      delete kwargs.reasoning_effort;
    } else if (effort !== "") kwargs.reasoning_effort = effort;
  }
  const addGen = body.add_generation_prompt;
  if (addGen !== undefined && addGen !== null && typeof addGen !== "boolean") throw badField("add_generation_prompt", "expected a boolean");
  const cont = body.continue_final_message;
  const tok = ctx.tokenizer;
  const rendered = applyChatTemplate(ctx.template, {
    messages: msgs,
    tools: policy.offered.length > 0 ? policy.offered : undefined,
    addGenerationPrompt: typeof addGen === "boolean" ? addGen : undefined,
    kwargs,
    bosToken: ctx.info?.bosToken ?? "",
    eosToken: ctx.info?.eosToken ?? "",
    addBos: tok.addBos,
    addEos: tok.addEos,
    enableThinking,
    continueFinalMessage: cont === true || cont === "content" || cont === "reasoning_content" ? cont : undefined,
  });
  return {
    prompt: rendered.prompt,
    policy,
    syntax,
    startsInsideThinking: rendered.thinkingPrefill !== null || rendered.continuation === "reasoning",
    enableThinking: rendered.enableThinking,
    parsePrefix: rendered.parsePrefix,
  };
}

/** Everything a chat completion needs before it runs. */
export async function prepareChat(ctx: ServerContext, body: Body): Promise<PreparedChat> {
  // logprobs (boolean) + top_logprobs -> n_probs, as llama-server
  const genBody: Body = { ...body };
  delete genBody.logprobs;
  if (body.logprobs === true) {
    if (Array.isArray(body.tools) && body.tools.length > 0 && body.stream === true) throw badRequest("logprobs is not supported with tools + stream");
    if (genBody.n_probs === undefined || genBody.n_probs === null) genBody.n_probs = body.top_logprobs ?? 20;
  } else if (body.logprobs !== undefined && body.logprobs !== null && body.logprobs !== false) {
    throw badField("logprobs", "expected a boolean");
  } else if (body.top_logprobs !== undefined && body.top_logprobs !== null) {
    throw badRequest("top_logprobs requires logprobs to be set to true");
  }
  const settings = readGenSettings(genBody, ctx.paramContext());
  // a conversation whose text alone cannot fit the context is refused before it is rendered
  if (Array.isArray(body.messages)) checkTextFits(ctx, textChars(body.messages), { nCtx: ctx.nCtxSlot });
  const r = renderChatPrompt(ctx, body);
  const policy = r.policy;
  if (policy.mode !== "none" && body.grammar !== undefined && body.grammar !== null) throw badRequest("Cannot use custom grammar constraints with tools.");
  let grammar = grammarOf(body);
  const fmt = ctx.chatFormat;
  const harmony = r.syntax === "gpt-oss";
  // gpt-oss reasons in its analysis channel: the budget ends that message with <|end|>
  const thinking = harmony ? HARMONY_THINKING : fmt.thinking;
  let toolGrammarAfterThinking: string | undefined;
  if (harmony) {
    const raw = typeof body.grammar === "string" && body.grammar !== "" ? grammar : undefined;
    const g = harmonyGrammars(policy, raw === undefined ? grammar : undefined, raw, r.startsInsideThinking);
    grammar = g.grammar;
    if (grammar !== undefined && raw === undefined) GrammarMatcher.compile(grammar);
    toolGrammarAfterThinking = g.after;
  } else if (policy.forced && grammar === undefined) {
    const wrapping = toolCallWrapping(r.syntax);
    if (!wrapping) throw notSupported(`tool_choice "${policy.mode}" is not supported for the ${fmt.family} chat format yet (its ${r.syntax} tool-call syntax has no grammar here); use tool_choice "auto"`);
    const go = { wrapping, parallel: body.parallel_tool_calls !== false, startsInsideThinking: r.startsInsideThinking };
    grammar = toolCallGrammar(policy, { ...go, thinking: r.enableThinking ? thinking : null });
    GrammarMatcher.compile(grammar);
    if (r.enableThinking && thinking) toolGrammarAfterThinking = toolCallGrammar(policy, { ...go, thinking: null, startsInsideThinking: false });
  }
  const rf = body.reasoning_format;
  const reasoningFormat = rf === undefined || rf === null ? ctx.opts.reasoningFormat : parseReasoningFormat(rf);
  const tok = ctx.tokenizer;
  const tokens = await encodeText(ctx, r.prompt, true, true, { nCtx: ctx.nCtxSlot });
  if (tokens.length === 0) throw badField("messages", "the rendered prompt is empty");
  checkContext(tokens.length, ctx.nCtxSlot);
  // reasoning budget: request (reasoning_budget_tokens / thinking_budget_tokens, -1 = server default), else --reasoning-budget
  let budgetTokens = -1;
  for (const k of ["reasoning_budget_tokens", "thinking_budget_tokens"]) {
    const v = body[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== "number" || !Number.isInteger(v) || v < -1) throw badField(k, "expected an integer >= -1");
    budgetTokens = v;
    break;
  }
  if (budgetTokens === -1) budgetTokens = ctx.opts.reasoningBudget;
  // gpt-oss: its template has no thinking switch, so the budget holds whatever enable_thinking says,
  // and 0 ends the analysis as soon as it opens (llama's budget sampler with the harmony tags)
  const budgetOn = harmony ? budgetTokens >= 0 : r.enableThinking && budgetTokens > 0;
  const budget: ReasoningBudget | undefined =
    thinking && budgetOn && (grammar === undefined || toolGrammarAfterThinking !== undefined)
      ? { tokens: budgetTokens, startsInside: r.startsInsideThinking, start: thinking.start, end: thinking.end, forcedText: harmony ? thinking.end : `\n${thinking.end}\n\n`, grammarAfter: toolGrammarAfterThinking }
      : undefined;
  const parser: OutputOptions = {
    syntax: r.syntax,
    thinking: fmt.thinking,
    reasoningFormat,
    prefix: r.parsePrefix,
    tools: policy.parse ? policy.callable : [],
    // gpt-oss ends its turn at a call's <|call|> and llama reads one call: more only when asked
    parallelToolCalls: harmony ? body.parallel_tool_calls === true : body.parallel_tool_calls !== false,
  };
  const preservedTokens = harmony ? [] : preservedTokenIds(ctx, outputMarkers(fmt, policy.parse));
  const specs: ChoiceSpec[] = [];
  for (let c = 0; c < settings.nCmpl; c++) {
    specs.push({
      req: {
        prompt: tokens,
        params: settings.params,
        nPredict: settings.nPredict,
        stop: settings.stop,
        ignoreEos: settings.ignoreEos,
        grammar,
        ...(preservedTokens.length > 0 ? { preservedTokens } : {}),
        nProbs: settings.nProbs,
        idSlot: settings.idSlot,
        cachePrompt: settings.cachePrompt,
        draft: settings.draft,
      },
      budget,
    });
  }
  return { prompt: r.prompt, tokens, settings, grammar, policy, parser, budget, specs };
}


/** The special tokens among `markers` (each one token of the vocabulary), to be written out as text. */
function preservedTokenIds(ctx: ServerContext, markers: string[]): number[] {
  const tok = ctx.tokenizer;
  const ids = new Set<number>();
  for (const m of markers) {
    const t = tok.encode(m, { addSpecial: false, parseSpecial: true });
    if (t.length === 1 && tok.isSpecial(t[0])) ids.add(t[0]);
  }
  return [...ids];
}
