// bloomery server: the routes that report or transform without generating: /health, /models,
// /props, /slots (and slot actions), /metrics, /tokenize, /detokenize, /apply-template, token
// counts, and the 501 answers for what this server cannot do (embeddings, rerank, infill ...).
import { getChatTemplate } from "../chat/index.ts";
import { renderChatPrompt } from "./chat-request.ts";
import { join } from "node:path";
import { SlotActionError } from "../engine/client.ts";
import { ApiError, ERROR_STATUS, type ErrorType, badField, badRequest, notSupported } from "./errors.ts";
import { readGenSettings, settingsJson } from "./params.ts";
import { tokenizeMixed } from "./prompt.ts";
import type { ServerContext } from "./state.ts";

type Obj = Record<string, unknown>;

export function health(): Response {
  return Response.json({ status: "ok" });
}

export function models(ctx: ServerContext): Response {
  const info = ctx.info!;
  const tok = ctx.tokenizer;
  const created = Math.floor(Date.now() / 1000);
  return Response.json({
    models: [
      {
        name: ctx.modelName,
        model: ctx.modelName,
        modified_at: "",
        size: "",
        digest: "",
        type: "model",
        description: "",
        tags: [""],
        capabilities: ["completion"],
        parameters: "",
        details: { parent_model: "", format: "gguf", family: "", families: [""], parameter_size: "", quantization_level: "" },
      },
    ],
    object: "list",
    data: [
      {
        id: ctx.modelName,
        aliases: [...ctx.opts.alias].sort(),
        tags: [...ctx.opts.tags],
        object: "model",
        created,
        owned_by: "llamacpp",
        meta: {
          vocab_type: tok.model === "gpt2" ? 2 : 1,
          n_vocab: info.nVocab,
          n_ctx: info.nCtxSlot,
          n_ctx_train: info.nCtxTrain,
          n_embd: info.nEmbd,
          n_params: info.nParams,
          size: info.sizeBytes,
          ftype: info.fileType,
        },
      },
    ],
  });
}

export function props(ctx: ServerContext): Response {
  const info = ctx.info!;
  const defaults = readGenSettings({}, ctx.paramContext());
  const tpl = getChatTemplate(ctx.template);
  return Response.json({
    default_generation_settings: { params: settingsJson(defaults, { reasoningFormat: ctx.opts.reasoningFormat }, true), n_ctx: info.nCtxSlot },
    total_slots: info.nSlots,
    model_alias: ctx.modelName,
    model_ftype: info.fileType,
    model_path: ctx.modelPath,
    modalities: { vision: false, video: false, audio: false },
    endpoint_slots: ctx.opts.slots,
    endpoint_props: ctx.opts.props,
    endpoint_metrics: ctx.opts.metrics,
    ui: ctx.opts.ui,
    chat_template: ctx.template,
    chat_template_caps: tpl.caps,
    bos_token: info.bosToken,
    eos_token: info.eosToken,
    build_info: "bloomery-0.1.0",
    is_sleeping: false,
    backend: info.backend,
  });
}

export function postProps(ctx: ServerContext): Response {
  if (!ctx.opts.props) throw notSupported("This server does not support changing global properties. Start it with `--props`");
  return Response.json({ success: true });
}

export async function slots(ctx: ServerContext, query: URLSearchParams): Promise<Response> {
  if (!ctx.opts.slots) throw notSupported("This server does not support slots endpoint. Start it with `--slots`");
  const list = await ctx.engine.slots();
  if (query.get("fail_on_no_slot") && list.every((s) => s.is_processing)) throw new ApiError("unavailable_error", "no slot available");
  return Response.json(
    list.map((s) => {
      const o: Obj = { id: s.id, n_ctx: s.n_ctx, speculative: (ctx.info?.specType ?? ctx.opts.specType) !== "none", is_processing: s.is_processing };
      if (s.id_task >= 0) o.id_task = s.id_task;
      o.n_past = s.n_past;
      o.n_cached = s.n_cached;
      return o;
    }),
  );
}

/** A bare file name (no directory parts), as llama's fs_validate_filename wants for slot files. */
function validFilename(name: string): boolean {
  // no directory parts, no control characters (CR/LF would forge log lines), as fs_validate_filename
  return name.length > 0 && name.length <= 255 && !/[/\\\x00-\x1f\x7f]/.test(name) && name !== "." && name !== ".." && !/^\s|\s$/.test(name);
}

/** POST /slots/{id}?action=save|restore|erase (needs --slot-save-path, as llama-server). */
export async function slotAction(ctx: ServerContext, idText: string, action: string | null, body: Obj): Promise<Response> {
  const dir = ctx.opts.slotSavePath;
  if (dir === undefined) throw notSupported("This server does not support slots action. Start it with `--slot-save-path`");
  if (!/^\d+$/.test(idText)) throw badRequest("Invalid slot ID");
  const id = Number(idText);
  if (id >= ctx.nSlots) throw badRequest(`Invalid slot ID: ${id} (${ctx.nSlots} slots)`);
  try {
    if (action === "save" || action === "restore") {
      const f = body.filename;
      if (typeof f !== "string" || !validFilename(f)) throw badRequest("Invalid filename");
      const r = await ctx.engine.slotAction(action, id, join(dir, f));
      if (action === "save") return Response.json({ id_slot: id, filename: f, n_saved: r.n_saved, n_written: r.n_written, timings: { save_ms: r.save_ms } });
      return Response.json({ id_slot: id, filename: f, n_restored: r.n_restored, n_read: r.n_read, timings: { restore_ms: r.restore_ms } });
    }
    if (action === "erase") {
      const r = await ctx.engine.slotAction("erase", id);
      return Response.json({ id_slot: id, n_erased: r.n_erased });
    }
  } catch (e) {
    if (e instanceof SlotActionError) throw new ApiError((e.type in ERROR_STATUS ? e.type : "server_error") as ErrorType, e.message, {}, e.code);
    throw e;
  }
  throw badRequest("Invalid action");
}

export async function metricsText(ctx: ServerContext): Promise<Response> {
  if (!ctx.opts.metrics) throw notSupported("This server does not support metrics endpoint. Start it with `--metrics`");
  const st = await ctx.engine.stats();
  return new Response(ctx.metrics.render(st), {
    headers: { "Content-Type": "text/plain; version=0.0.4", "Process-Start-Time-Unix": String(ctx.metrics.startTime) },
  });
}

function validUtf8(bytes: Uint8Array): boolean {
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    return true;
  } catch {
    return false;
  }
}

export async function tokenize(ctx: ServerContext, body: Obj): Promise<Response> {
  const tok = ctx.tokenizer;
  const c = body.content;
  if (c === undefined || c === null) return Response.json({ tokens: [] });
  const ids = await tokenizeMixed(ctx, c as string | (string | number)[], body.add_special === true, body.parse_special !== false, "content");
  if (body.with_pieces !== true) return Response.json({ tokens: ids });
  return Response.json({
    tokens: ids.map((id) => {
      const bytes = tok.tokenBytes(id);
      return { id, piece: validUtf8(bytes) ? new TextDecoder().decode(bytes) : [...bytes] };
    }),
  });
}

export function detokenize(ctx: ServerContext, body: Obj): Response {
  const ids = (body.tokens ?? []) as number[];
  const n = ctx.tokenizer.nVocab;
  ids.forEach((id, i) => {
    if (id < 0 || id >= n) throw badField(`tokens[${i}]`, `token id ${id} is outside the vocabulary (0..${n - 1})`);
  });
  return Response.json({ content: ctx.tokenizer.decode(ids) });
}

export function applyTemplate(ctx: ServerContext, body: Obj): Response {
  return Response.json({ prompt: renderChatPrompt(ctx, body).prompt });
}

/** POST /v1/chat/completions/input_tokens: the rendered prompt's token count. */
export async function chatInputTokens(ctx: ServerContext, body: Obj): Promise<Response> {
  const r = renderChatPrompt(ctx, body);
  return Response.json({ object: "response.input_tokens", input_tokens: (await ctx.encodePrompt(r.prompt, { addSpecial: true, parseSpecial: true })).length });
}

/** The routes that exist in llama-server but need a model or flag this server does not offer. */
export const UNSUPPORTED_ROUTES: Record<string, string> = {
  "/embedding": "This server does not support embeddings: bloomery serves generation models only (--embeddings is not supported yet)",
  "/embeddings": "This server does not support embeddings: bloomery serves generation models only (--embeddings is not supported yet)",
  "/v1/embeddings": "This server does not support embeddings: bloomery serves generation models only (--embeddings is not supported yet)",
  "/rerank": "This server does not support reranking: bloomery serves generation models only (--rerank is not supported yet)",
  "/reranking": "This server does not support reranking: bloomery serves generation models only (--rerank is not supported yet)",
  "/v1/rerank": "This server does not support reranking: bloomery serves generation models only (--rerank is not supported yet)",
  "/v1/reranking": "This server does not support reranking: bloomery serves generation models only (--rerank is not supported yet)",
  "/infill": "This server does not support infill: fill-in-the-middle is not implemented yet",
  "/v1/audio/transcriptions": "The current model does not support audio input.",
  "/audio/transcriptions": "The current model does not support audio input.",
  "/v1/chat/completions/control": "reasoning control is not implemented yet",
};

export function unsupported(path: string): never {
  throw notSupported(UNSUPPORTED_ROUTES[path] ?? "not supported");
}
