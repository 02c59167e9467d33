// bloomery server: llama-server's error bodies ({"error":{code,message,type}}, status = code) and
// the translation of every typed error the lower layers throw into one of them.
import { ChatInputError, TemplateError } from "../chat/index.ts";
import { GrammarError, GrammarRequestError, JsonSchemaError } from "../grammar/index.ts";
import { TokenizerError } from "../tokenizer/index.ts";

/** llama-server's error types and the HTTP status each one answers with. */
export const ERROR_STATUS = {
  invalid_request_error: 400,
  authentication_error: 401,
  permission_error: 403,
  not_found_error: 404,
  server_error: 500,
  not_supported_error: 501,
  unavailable_error: 503,
  exceed_context_size_error: 400,
} as const;

export type ErrorType = keyof typeof ERROR_STATUS;

export interface ErrorBody {
  error: { code: number; message: string; type: string; n_prompt_tokens?: number; n_ctx?: number; [k: string]: unknown };
}

/** Longest error message a response or log line carries (a message that quotes a client's input is cut). */
export const MESSAGE_MAX = 2000;

/** A message as it may be sent and logged: control characters escaped (no forged log lines, no terminal escapes), cut at MESSAGE_MAX. */
export function safeMessage(m: string): string {
  const s = m.length > MESSAGE_MAX * 2 ? m.slice(0, MESSAGE_MAX * 2) : m;
  const e = s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => (c === "\n" ? "\\n" : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`));
  return e.length > MESSAGE_MAX ? `${e.slice(0, MESSAGE_MAX)}... (${m.length} characters in all)` : e;
}

/** An error a route answers with: the status is the code of the type unless given. */
export class ApiError extends Error {
  override readonly name = "ApiError";
  readonly status: number;
  constructor(
    readonly type: ErrorType,
    message: string,
    readonly extra: Record<string, unknown> = {},
    status?: number,
    /** extra response headers (Retry-After) */
    readonly headers: Record<string, string> = {},
  ) {
    super(safeMessage(message));
    this.status = status ?? ERROR_STATUS[type];
  }

  body(): ErrorBody {
    return { error: { code: this.status, message: this.message, type: this.type, ...this.extra } };
  }
}

/** Longest piece of a client's input an error message repeats. */
export const SHOWN_MAX = 60;

/**
 * A client's value as an error message may repeat it: JSON (strings quoted, control characters
 * escaped, also DEL, C1 controls and the line separators a terminal or log would act on), cut to
 * `max` characters with "..." so a huge or hostile value never fills a log or a response.
 */
export function shownValue(v: unknown, max = SHOWN_MAX): string {
  let s: string;
  try {
    s = JSON.stringify(typeof v === "string" && v.length > 4 * max ? v.slice(0, 4 * max) : v) ?? String(v);
  } catch {
    s = String(v);
  }
  s = s.replace(/[\u007f-\u009f\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  return s.length > max ? `${s.slice(0, max - 3)}...` : s;
}

/** A bad request field: 400 naming the field as llama-server does ("Field 'x': ..."). */
export function badField(field: string, detail: string): ApiError {
  return new ApiError("invalid_request_error", `Field '${field}': ${detail}`);
}

export function badRequest(message: string): ApiError {
  return new ApiError("invalid_request_error", message);
}

export function notSupported(message: string): ApiError {
  return new ApiError("not_supported_error", message);
}

export function exceedContext(nPrompt: number, nCtx: number): ApiError {
  return new ApiError(
    "exceed_context_size_error",
    `request (${nPrompt} tokens) exceeds the available context size (${nCtx} tokens), try increasing it`,
    { n_prompt_tokens: nPrompt, n_ctx: nCtx },
  );
}

/** A generation's failure as the engine reported it (DoneEvent.error). */
export function engineError(e: { message: string; type: string; code: number }, nPrompt = 0, nCtx = 0): ApiError {
  const type = (e.type in ERROR_STATUS ? e.type : "server_error") as ErrorType;
  if (type === "exceed_context_size_error") return exceedContext(nPrompt, nCtx);
  return new ApiError(type, e.message, {}, e.code || ERROR_STATUS[type]);
}

/** Anything thrown while handling a request, as the error the client gets. */
export function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (e instanceof ChatInputError || e instanceof GrammarRequestError) return badField(e.field, e.detail);
  if (e instanceof JsonSchemaError) return badField("json_schema", e.message);
  if (e instanceof GrammarError) return badField("grammar", e.message);
  if (e instanceof TemplateError) {
    // a template that raises on the request (e.g. "Conversation roles must alternate") is the request's fault
    return new ApiError(e.kind === "raise" ? "invalid_request_error" : "server_error", e.message);
  }
  if (e instanceof TokenizerError) return badRequest(e.message);
  if (e instanceof Error && e.name === "SamplingParamError") {
    const f = (e as Error & { field?: string; detail?: string });
    return badField(f.field ?? "?", f.detail ?? e.message);
  }
  return new ApiError("server_error", e instanceof Error ? e.message : String(e));
}

export function errorResponse(err: ApiError, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(err.body()), {
    status: err.status,
    headers: { "Content-Type": "application/json; charset=utf-8", ...err.headers, ...headers },
  });
}
