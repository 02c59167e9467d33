// bloomery engine: the worker that owns the model and runs the decode loop. HTTP handlers talk
// to it through messages (protocol.ts); it never blocks on one request.
declare const self: Worker;
import { Model } from "./model.ts";
import type { EngineOptions, FromWorker, ToWorker } from "./protocol.ts";
import { EngineError, Scheduler } from "./scheduler.ts";
import { makeSampler } from "./sampler-bridge.ts";
import { modelInfo } from "./info.ts";
import { checkForward } from "./model-check.ts";
import { ExpertHeat, placementState } from "./placement-view.ts";
import { loadDraft } from "./spec-draft.ts";
import { loadMtpDraft, specFor } from "./spec-mtp.ts";
import type { Drafter } from "./scheduler.ts";

let model: Model | undefined;
let drafter: (Drafter & { close(): void }) | undefined;
let sched: Scheduler | undefined;
let running = false;
const heat = new ExpertHeat();

function post(m: FromWorker): void {
  self.postMessage(m);
}

function load(path: string, o: EngineOptions): void {
  try {
    const say = (l: string) => process.stderr.write(`${l}\n`);
    // -md alone names draft-mtp where its file has an MTP layer (as llama-server infers it); no --spec-type and
    // no -md: draft-mtp on by default where the model's file has one (auto)
    let spec = o.spec ? specFor(o.spec, path, say) : undefined;
    const loadTarget = (mtp: boolean) => Model.load(path, {
      nCtx: o.nCtx, nSlots: o.nSlots, nThreads: o.nThreads, maxTokens: o.ubatchSize, exact: o.exact,
      nGpuLayers: o.nGpuLayers, device: o.device, placement: o.placement, batchInvariant: o.batchInvariant, promoteSlots: o.promoteSlots,
      // the plan counts the MTP layer that drafts beside the target (its tensors, KV cache and buffers)
      planMtp: mtp ? { file: spec?.draftModel } : undefined,
    });
    let m: Model;
    try {
      m = loadTarget(spec?.type === "draft-mtp");
    } catch (e) {
      if (!spec?.auto) throw e;
      // on by default: a model that loads without its MTP layer's memory runs without it
      m = loadTarget(false);
      say(`speculative decoding: off: with the MTP layer ${e instanceof Error ? e.message : String(e)} (--spec-type draft-mtp asks for it)`);
      spec = undefined;
    }
    try {
      checkForward(m); // one token's logits must be finite, else the model is refused (model-check.ts)
    } catch (e) {
      m.close();
      throw e;
    }
    if (spec && (spec.type === "draft-mtp" || (spec.type === "draft-simple" && spec.draftModel))) {
      // the draft: a slot a target slot, the target's context, its own -ngl (default the target's)
      try {
        const lo = { nCtx: o.nCtx, nSlots: o.nSlots, nThreads: o.nThreads, maxTokens: o.ubatchSize, exact: o.exact, nGpuLayers: spec.draftNgl ?? o.nGpuLayers, device: o.device };
        drafter = spec.type === "draft-mtp"
          ? loadMtpDraft(m, spec.draftModel ?? m.gguf, lo, spec.nMax ?? 3, spec.nMin ?? 0, spec.pMin ?? 0)
          : loadDraft(m, spec.draftModel!, lo, spec.nMax ?? 3, spec.nMin ?? 0, spec.pMin ?? 0);
        if (spec.type === "draft-mtp") say(`speculative decoding: draft-mtp, the MTP layer of ${spec.draftModel ?? path} as the draft (at most ${spec.nMax ?? 3} tokens a step, its own KV cache layer a slot)`);
      } catch (e) {
        if (!spec.auto) {
          m.close();
          throw e;
        }
        // on by default: where the MTP layer cannot run (the card refuses it by name), the model runs without it
        say(`speculative decoding: off: ${e instanceof Error ? e.message : String(e)} (--spec-type draft-mtp asks for it)`);
        drafter = undefined;
        spec = undefined;
      }
    }
    const cacheBytes = o.cacheRamMiB < 0 ? -1 : o.cacheRamMiB * 1024 * 1024;
    try {
      // a recurrent model's speculation keeps a snapshot of each slot's state (refused where the backend cannot)
      sched = new Scheduler(m, { tokens: (events) => post({ type: "tokens", events }), done: (done) => post({ type: "done", done }) }, makeSampler, o.ubatchSize, cacheBytes, spec, drafter);
    } catch (e) {
      drafter?.close();
      drafter = undefined;
      m.close();
      throw e;
    }
    model = m;
    post({ type: "loaded", info: { ...modelInfo(m, path), specType: spec?.type ?? "none" } });
  } catch (e) {
    post({ type: "load-error", message: e instanceof Error ? e.message : String(e) });
  }
}

/** Run steps while there is work, yielding to the message loop between steps. */
async function loop(): Promise<void> {
  if (running) return;
  running = true;
  try {
    while (sched && sched.step()) await new Promise((r) => setImmediate(r));
  } finally {
    running = false;
  }
}

self.onmessage = (ev: MessageEvent<ToWorker>) => {
  const m = ev.data;
  switch (m.type) {
    case "load":
      load(m.path, m.options);
      break;
    case "generate":
      if (!sched) {
        post({ type: "done", done: failed(m.req.id, "the model is not loaded", "unavailable_error", 503) });
        break;
      }
      try {
        sched.submit(m.req);
        void loop();
      } catch (e) {
        const err = e instanceof EngineError ? e : new EngineError(e instanceof Error ? e.message : String(e));
        post({ type: "done", done: failed(m.req.id, err.message, err.type, err.code) });
      }
      break;
    case "cancel":
      sched?.cancel(m.id);
      break;
    case "slots":
      post({ type: "slots", slots: sched?.slotInfo() ?? [] });
      break;
    case "stats":
      if (sched) post({ type: "stats", stats: sched.stats() });
      break;
    case "placement":
      if (sched && model) post({ type: "placement", state: placementState({ model, cache: sched.cache, steps: sched.steps, stats: sched.stats(), heat }, m.previews) });
      break;
    case "slot-action":
      try {
        if (!sched) throw new EngineError("the model is not loaded", "unavailable_error", 503);
        const result = m.action === "erase" ? sched.eraseSlot(m.slot)
          : m.action === "save" ? sched.saveSlotFile(m.slot, m.path!) : sched.restoreSlotFile(m.slot, m.path!);
        post({ type: "slot-action", reqId: m.reqId, result });
      } catch (e) {
        const err = e instanceof EngineError ? e : new EngineError(e instanceof Error ? e.message : String(e), "invalid_request_error", 400);
        post({ type: "slot-action", reqId: m.reqId, error: { message: err.message, type: err.type, code: err.code } });
      }
      break;
    case "shutdown":
      model?.close();
      model = undefined;
      drafter?.close();
      drafter = undefined;
      sched = undefined;
      break;
  }
};

function failed(id: number, message: string, type: string, code: number) {
  return {
    id, stopType: "none" as const, stoppingWord: "", text: "", tokensPredicted: 0, tokensEvaluated: 0, tokensCached: 0, truncated: false, idSlot: -1,
    timings: { prompt_n: 0, prompt_ms: 0, prompt_per_token_ms: 0, prompt_per_second: 0, predicted_n: 0, predicted_ms: 0, predicted_per_token_ms: 0, predicted_per_second: 0, cache_n: 0 },
    error: { message, type, code },
  };
}
