// bloomery server: typebox schemas of every request body (llama-server's fields). Unknown fields
// are allowed and ignored; a known field with a value of the wrong type fails validation, which
// the HTTP layer answers with a 400 naming the field. null means "absent", as in llama-server.
import { Type as T, type Static, type TSchema } from "@sinclair/typebox";

/** An optional field that may also be null (llama-server treats null as absent). */
function opt<S extends TSchema>(s: S) {
  return T.Optional(T.Union([s, T.Null()]));
}

const Num = T.Number();
const Int = T.Integer();
const Bool = T.Boolean();
const Str = T.String();
const Loose = { additionalProperties: true } as const;

/** Sampling and generation fields shared by every generating route. */
export const generationFields = {
  stream: opt(Bool),
  stream_options: opt(T.Object({ include_usage: opt(Bool) }, Loose)),
  n_predict: opt(Int),
  max_tokens: opt(Int),
  max_completion_tokens: opt(Int),
  temperature: opt(Num),
  dynatemp_range: opt(Num),
  dynatemp_exponent: opt(Num),
  top_k: opt(Int),
  top_p: opt(Num),
  min_p: opt(Num),
  top_n_sigma: opt(Num),
  typical_p: opt(Num),
  xtc_probability: opt(Num),
  xtc_threshold: opt(Num),
  repeat_penalty: opt(Num),
  repeat_last_n: opt(Int),
  presence_penalty: opt(Num),
  frequency_penalty: opt(Num),
  dry_multiplier: opt(Num),
  dry_base: opt(Num),
  dry_allowed_length: opt(Int),
  dry_penalty_last_n: opt(Int),
  dry_sequence_breakers: opt(T.Array(Str)),
  mirostat: opt(Int),
  mirostat_tau: opt(Num),
  mirostat_eta: opt(Num),
  seed: opt(Int),
  stop: opt(T.Union([Str, T.Array(Str)])),
  ignore_eos: opt(Bool),
  logit_bias: opt(T.Union([T.Array(T.Unknown()), T.Record(T.String(), T.Unknown())])),
  n_probs: opt(Int),
  min_keep: opt(Int),
  post_sampling_probs: opt(Bool),
  grammar: opt(Str),
  json_schema: opt(T.Union([T.Record(T.String(), T.Unknown()), Bool])),
  response_format: opt(T.Object({ type: opt(Str) }, Loose)),
  cache_prompt: opt(Bool),
  id_slot: opt(Int),
  samplers: opt(T.Union([T.Array(Str), Str])),
  timings_per_token: opt(Bool),
  return_tokens: opt(Bool),
  n: opt(Int),
  n_cmpl: opt(Int),
  n_keep: opt(Int),
  response_fields: opt(T.Array(Str)),
  // llama-server's per-request speculative decoding settings
  "speculative.n_max": opt(Int),
  "speculative.n_min": opt(Int),
  "speculative.p_min": opt(Num),
};

/** POST /completion, /completions (native). `prompt` is checked by the prompt reader (string, ids, mixed, or a list of those). */
export const NativeCompletionBody = T.Object(
  { ...generationFields, prompt: T.Unknown(), logprobs: opt(T.Union([Int, Bool])) },
  Loose,
);
export type NativeCompletionBody = Static<typeof NativeCompletionBody>;

/** POST /v1/completions (OpenAI text completion). */
export const OaiCompletionBody = T.Object(
  {
    ...generationFields,
    model: opt(Str),
    prompt: T.Unknown(),
    logprobs: opt(T.Union([Int, Bool])),
    echo: opt(Bool),
    best_of: opt(Int),
    suffix: opt(Str),
  },
  Loose,
);
export type OaiCompletionBody = Static<typeof OaiCompletionBody>;

/** Fields of an OpenAI chat request (also what Anthropic and Responses requests are mapped onto). */
export const chatFields = {
  ...generationFields,
  model: opt(Str),
  messages: T.Array(T.Unknown()),
  tools: opt(T.Array(T.Unknown())),
  tool_choice: opt(T.Union([Str, T.Object({}, Loose)])),
  parallel_tool_calls: opt(Bool),
  logprobs: opt(Bool),
  top_logprobs: opt(Int),
  chat_template_kwargs: opt(T.Record(T.String(), T.Unknown())),
  reasoning_format: opt(Str),
  reasoning_effort: opt(Str),
  reasoning_budget_tokens: opt(Int),
  thinking_budget_tokens: opt(Int),
  add_generation_prompt: opt(Bool),
  continue_final_message: opt(T.Union([Bool, Str])),
};

export const ChatBody = T.Object(chatFields, Loose);
export type ChatBody = Static<typeof ChatBody>;

/** POST /apply-template: a chat request, nothing is generated. */
export const ApplyTemplateBody = ChatBody;

/** POST /v1/messages and /v1/messages/count_tokens (Anthropic). */
export const AnthropicBody = T.Object(
  {
    model: opt(Str),
    messages: T.Array(T.Object({ role: Str, content: T.Union([Str, T.Array(T.Object({ type: Str }, Loose))]) }, Loose)),
    system: opt(T.Union([Str, T.Array(T.Object({ type: Str }, Loose))])),
    max_tokens: opt(Int),
    stop_sequences: opt(T.Array(Str)),
    stream: opt(Bool),
    temperature: opt(Num),
    top_p: opt(Num),
    top_k: opt(Int),
    tools: opt(T.Array(T.Object({ name: Str }, Loose))),
    tool_choice: opt(T.Object({ type: Str }, Loose)),
    thinking: opt(T.Object({ type: Str, budget_tokens: opt(Int) }, Loose)),
    metadata: opt(T.Object({}, Loose)),
    chat_template_kwargs: opt(T.Record(T.String(), T.Unknown())),
  },
  Loose,
);
export type AnthropicBody = Static<typeof AnthropicBody>;

/** POST /v1/responses (OpenAI Responses). */
export const ResponsesBody = T.Object(
  {
    model: opt(Str),
    input: T.Union([Str, T.Array(T.Object({}, Loose))]),
    instructions: opt(Str),
    max_output_tokens: opt(Int),
    stream: opt(Bool),
    temperature: opt(Num),
    top_p: opt(Num),
    tools: opt(T.Array(T.Object({}, Loose))),
    tool_choice: opt(T.Union([Str, T.Object({}, Loose)])),
    parallel_tool_calls: opt(Bool),
    previous_response_id: opt(Str),
    reasoning: opt(T.Object({ effort: opt(Str) }, Loose)),
    text: opt(T.Object({ format: opt(T.Object({ type: Str }, Loose)) }, Loose)),
    store: opt(Bool),
  },
  Loose,
);
export type ResponsesBody = Static<typeof ResponsesBody>;

export const TokenizeBody = T.Object(
  {
    content: opt(T.Union([Str, T.Array(T.Union([Str, Int]))])),
    add_special: opt(Bool),
    parse_special: opt(Bool),
    with_pieces: opt(Bool),
  },
  Loose,
);
export type TokenizeBody = Static<typeof TokenizeBody>;

export const DetokenizeBody = T.Object({ tokens: opt(T.Array(Int)) }, Loose);
export type DetokenizeBody = Static<typeof DetokenizeBody>;

export const SlotActionBody = T.Object({ filename: opt(Str) }, Loose);
export type SlotActionBody = Static<typeof SlotActionBody>;

/** Bodies of routes that answer 501 whatever they get (embeddings, rerank, infill). */
export const AnyBody = T.Unknown();
