// bloomery server: the Elysia app: every llama-server route with its typebox body schema; bodies
// are read as JSON whatever the content type (curl -d sends form encoding), and parse,
// validation and handler errors all answer in llama's error shape.
import { Elysia } from "elysia";
import { anthropicCountTokens, anthropicMessages } from "./anthropic.ts";
import { chatCompletion } from "./chat.ts";
import { nativeCompletion, oaiCompletion } from "./completion.ts";
import { BodyError } from "./body-client.ts";
import type { ParsedBody } from "./http.ts";
import { ApiError, badRequest, errorResponse, shownValue, toApiError } from "./errors.ts";
import { responsesCreate, responsesInputTokens } from "./responses.ts";
import * as info from "./routes-info.ts";
import {
  AnthropicBody,
  AnyBody,
  ApplyTemplateBody,
  ChatBody,
  DetokenizeBody,
  NativeCompletionBody,
  OaiCompletionBody,
  ResponsesBody,
  SlotActionBody,
  TokenizeBody,
} from "./schemas.ts";
import type { ServerContext } from "./state.ts";
import { placementState } from "./webui/placement-route.ts";

type Obj = Record<string, unknown>;

export function notFound(): Response {
  return errorResponse(new ApiError("not_found_error", "File Not Found"));
}

class BodyParseError extends Error {}

/** "/messages/0/content" -> "messages[0].content" */
function fieldOfPath(path: string): string {
  const parts = path.split("/").filter((p) => p !== "");
  let out = "";
  for (const p of parts) out += /^\d+$/.test(p) ? `[${p}]` : out === "" ? p : `.${p}`;
  return out || "body";
}

interface ValidationIssue {
  path?: string;
  message?: string;
  summary?: string;
  value?: unknown;
  schema?: { type?: string; anyOf?: { type?: string }[] };
}

/** What a (union) schema wants, in words: "integer", "string or array". */
function expected(schema: ValidationIssue["schema"]): string | undefined {
  if (!schema) return undefined;
  if (Array.isArray(schema.anyOf)) {
    const kinds = schema.anyOf.map((s) => s.type).filter((t): t is string => typeof t === "string" && t !== "null");
    return kinds.length ? [...new Set(kinds)].join(" or ") : undefined;
  }
  return schema.type;
}

/** Elysia's validation error as llama's 400 naming the field. */
function validationError(error: unknown): ApiError {
  let issues: ValidationIssue[] = [];
  try {
    issues = ((error as { all?: ValidationIssue[] }).all ?? []) as ValidationIssue[];
  } catch {
    issues = [];
  }
  const first = issues.find((i) => i.path) ?? issues[0];
  if (!first) return badRequest(error instanceof Error ? error.message : "invalid request body");
  const field = fieldOfPath(first.path ?? "");
  if (first.message === "Expected required property") return badRequest(`Field '${field}': is required`);
  const want = expected(first.schema);
  const detail = want ? `expected ${want}, got ${shownValue(first.value)}` : (first.summary ?? first.message ?? "invalid value");
  return badRequest(`Field '${field}': ${detail}`);
}

export function buildApp(ctx: ServerContext, maxBodyBytes: number) {
  const app = new Elysia()
    .onParse(async ({ request }) => {
      const pre = ctx.parsedBodies.get(request.signal);
      const parsed: ParsedBody = pre ?? (await (async (): Promise<ParsedBody> => {
        const bytes = new Uint8Array(await request.arrayBuffer());
        if (bytes.length > maxBodyBytes) throw new ApiError("invalid_request_error", `the request body (${bytes.length} bytes) is larger than the limit of ${maxBodyBytes} bytes`, {}, 413);
        return ctx.body.parse(bytes).then((value): ParsedBody => ({ value }), (e: unknown): ParsedBody => ({ error: e }));
      })());
      if (parsed.error === undefined) return parsed.value;
      // past a few KiB parsed in the body worker: a large or deeply nested body never blocks other requests
      const e = parsed.error;
      if (e instanceof BodyError && (e.kind === "depth" || /is empty/.test(e.message))) throw new BodyParseError(e.message);
      throw new BodyParseError(`the request body is not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
    })
    .onError(({ code, error }) => {
      if (code === "NOT_FOUND") return notFound();
      if (code === "VALIDATION") return errorResponse(validationError(error));
      if (code === "PARSE") {
        const cause = (error as Error).cause;
        if (cause instanceof ApiError) return errorResponse(cause);
        return errorResponse(badRequest(cause instanceof Error ? cause.message : "the request body is not valid JSON"));
      }
      const err = toApiError(error);
      if (err.status >= 500 && err.type === "server_error") ctx.log(`srv  error: ${err.message}`);
      return errorResponse(err);
    })
    .get("/health", () => info.health())
    .get("/v1/health", () => info.health())
    .get("/models", () => info.models(ctx))
    .get("/v1/models", () => info.models(ctx))
    .get("/props", () => info.props(ctx))
    .post("/props", () => info.postProps(ctx), { body: AnyBody })
    .get("/slots", ({ request }) => info.slots(ctx, new URL(request.url).searchParams))
    .post("/slots/:id", ({ params, request, body }) => info.slotAction(ctx, params.id, new URL(request.url).searchParams.get("action"), body as Obj), { body: SlotActionBody })
    .get("/metrics", () => info.metricsText(ctx))
    .post("/tokenize", ({ body }) => info.tokenize(ctx, body as Obj), { body: TokenizeBody })
    .post("/detokenize", ({ body }) => info.detokenize(ctx, body as Obj), { body: DetokenizeBody })
    .post("/apply-template", ({ body }) => info.applyTemplate(ctx, body as Obj), { body: ApplyTemplateBody })
    .post("/completion", ({ body, request }) => nativeCompletion(ctx, body as Obj, request), { body: NativeCompletionBody })
    .post("/completions", ({ body, request }) => nativeCompletion(ctx, body as Obj, request), { body: NativeCompletionBody })
    .post("/v1/completions", ({ body, request }) => oaiCompletion(ctx, body as Obj, request), { body: OaiCompletionBody })
    .post("/chat/completions", ({ body, request }) => chatCompletion(ctx, body as Obj, request), { body: ChatBody })
    .post("/v1/chat/completions", ({ body, request }) => chatCompletion(ctx, body as Obj, request), { body: ChatBody })
    .post("/chat/completions/input_tokens", ({ body }) => info.chatInputTokens(ctx, body as Obj), { body: ChatBody })
    .post("/v1/chat/completions/input_tokens", ({ body }) => info.chatInputTokens(ctx, body as Obj), { body: ChatBody })
    .post("/v1/responses", ({ body, request }) => responsesCreate(ctx, body as Obj, request), { body: ResponsesBody })
    .post("/responses", ({ body, request }) => responsesCreate(ctx, body as Obj, request), { body: ResponsesBody })
    .post("/v1/responses/input_tokens", ({ body }) => responsesInputTokens(ctx, body as Obj), { body: ResponsesBody })
    .post("/responses/input_tokens", ({ body }) => responsesInputTokens(ctx, body as Obj), { body: ResponsesBody })
    .post("/v1/messages", ({ body, request }) => anthropicMessages(ctx, body as Obj, request), { body: AnthropicBody })
    .post("/v1/messages/count_tokens", ({ body }) => anthropicCountTokens(ctx, body as Obj), { body: AnthropicBody })
    .get("/placement/state", ({ request }) => placementState(ctx, request))
    .get("/lora-adapters", () => Response.json([]))
    .post("/lora-adapters", () => info.unsupported("/lora-adapters"), { body: AnyBody });
  for (const path of Object.keys(info.UNSUPPORTED_ROUTES)) app.post(path, () => info.unsupported(path), { body: AnyBody });
  return app;
}
