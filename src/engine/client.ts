// bloomery engine: the main thread's handle on the engine worker: load, generate with streamed
// token events, cancel, slot info. Every request gets its own id; events route by id.
import type { DoneEvent, EngineOptions, EngineStats, FromWorker, GenerateRequest, ModelInfo, SlotInfo, TokenEvent } from "./protocol.ts";
import type { PlacementState } from "./placement-types.ts";

/** A slot action the engine refused (status and type as llama-server's error shape). */
export class SlotActionError extends Error {
  constructor(message: string, readonly type: string, readonly code: number) {
    super(message);
    this.name = "SlotActionError";
  }
}

export interface GenerateHandlers {
  onTokens?: (events: TokenEvent[]) => void;
  signal?: AbortSignal;
}

interface Pending {
  handlers: GenerateHandlers;
  resolve: (d: DoneEvent) => void;
}

/**
 * The worker's module: beside this file in a checkout; inside an executable made by
 * `bun build --compile src/cli/main.ts src/engine/worker.ts`, the bundled entry sits at
 * engine/worker.js under the bundle root (entries are laid out relative to src/).
 */
function workerUrl(): string {
  if (import.meta.url.includes("/$bunfs/")) return "/$bunfs/root/engine/worker.js";
  return new URL("./worker.ts", import.meta.url).href;
}

export class EngineClient {
  private worker: Worker;
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private slotWaiters: ((s: SlotInfo[]) => void)[] = [];
  private statWaiters: ((s: EngineStats) => void)[] = [];
  private placementWaiters: ((s: PlacementState) => void)[] = [];
  private actionWaiters = new Map<number, { resolve: (r: Record<string, number>) => void; reject: (e: Error) => void }>();
  info!: ModelInfo;
  /** requests submitted and not yet done */
  get inFlight(): number {
    return this.pending.size;
  }

  private constructor() {
    this.worker = new Worker(workerUrl());
    this.worker.onmessage = (ev: MessageEvent<FromWorker>) => this.onMessage(ev.data);
  }

  /** Start a worker and load the model in it; rejects with the loader's message. */
  static start(path: string, options: EngineOptions): Promise<EngineClient> {
    const c = new EngineClient();
    return new Promise((resolve, reject) => {
      c.loadWaiter = (m) => {
        if (m.type === "loaded") {
          c.info = m.info;
          resolve(c);
        } else {
          c.worker.terminate();
          reject(new Error(m.message));
        }
      };
      c.worker.onerror = (e) => {
        const w = c.loadWaiter;
        c.loadWaiter = undefined;
        w?.({ type: "load-error", message: `engine worker failed: ${e.message}` });
      };
      c.worker.postMessage({ type: "load", path, options });
    });
  }

  private loadWaiter?: (m: Extract<FromWorker, { type: "loaded" | "load-error" }>) => void;

  private onMessage(m: FromWorker): void {
    switch (m.type) {
      case "loaded":
      case "load-error": {
        const w = this.loadWaiter;
        this.loadWaiter = undefined;
        w?.(m);
        break;
      }
      case "tokens": {
        // group by request so each handler gets its events in one call
        const by = new Map<number, TokenEvent[]>();
        for (const e of m.events) {
          const a = by.get(e.id);
          if (a) a.push(e);
          else by.set(e.id, [e]);
        }
        for (const [id, evs] of by) this.pending.get(id)?.handlers.onTokens?.(evs);
        break;
      }
      case "done": {
        const p = this.pending.get(m.done.id);
        this.pending.delete(m.done.id);
        p?.resolve(m.done);
        break;
      }
      case "slots": {
        const w = this.slotWaiters.shift();
        w?.(m.slots);
        break;
      }
      case "stats": {
        const w = this.statWaiters.shift();
        w?.(m.stats);
        break;
      }
      case "placement": {
        const w = this.placementWaiters.shift();
        w?.(m.state);
        break;
      }
      case "slot-action": {
        const w = this.actionWaiters.get(m.reqId);
        this.actionWaiters.delete(m.reqId);
        if (m.error) w?.reject(new SlotActionError(m.error.message, m.error.type, m.error.code));
        else w?.resolve(m.result ?? {});
        break;
      }
      case "log":
        console.error(m.message);
        break;
    }
  }

  /** Run one generation; resolves when it ends (also when cancelled through the signal). */
  generate(req: Omit<GenerateRequest, "id">, handlers: GenerateHandlers = {}): Promise<DoneEvent> {
    const id = this.nextId++;
    return new Promise<DoneEvent>((resolve) => {
      this.pending.set(id, { handlers, resolve });
      if (handlers.signal) {
        if (handlers.signal.aborted) {
          this.pending.delete(id);
          resolve(cancelled(id));
          return;
        }
        handlers.signal.addEventListener("abort", () => this.worker.postMessage({ type: "cancel", id }), { once: true });
      }
      this.worker.postMessage({ type: "generate", req: { ...req, id } });
    });
  }

  slots(): Promise<SlotInfo[]> {
    return new Promise((resolve) => {
      this.slotWaiters.push(resolve);
      this.worker.postMessage({ type: "slots" });
    });
  }

  stats(): Promise<EngineStats> {
    return new Promise((resolve) => {
      this.statWaiters.push(resolve);
      this.worker.postMessage({ type: "stats" });
    });
  }

  /** The live placement picture (placement-view.ts); previews: the prompt cache entries' text. */
  placement(previews: boolean): Promise<PlacementState> {
    return new Promise((resolve) => {
      this.placementWaiters.push(resolve);
      this.worker.postMessage({ type: "placement", previews });
    });
  }

  /** Save, restore or erase a slot's state (path: the file, for save and restore). */
  slotAction(action: "save" | "restore" | "erase", slot: number, path?: string): Promise<Record<string, number>> {
    const reqId = this.nextId++;
    return new Promise((resolve, reject) => {
      this.actionWaiters.set(reqId, { resolve, reject });
      this.worker.postMessage({ type: "slot-action", reqId, action, slot, path });
    });
  }

  close(): void {
    this.worker.postMessage({ type: "shutdown" });
    this.worker.terminate();
  }
}

function cancelled(id: number): DoneEvent {
  return {
    id, stopType: "cancel", stoppingWord: "", text: "", tokensPredicted: 0, tokensEvaluated: 0, tokensCached: 0, truncated: false, idSlot: -1,
    timings: { prompt_n: 0, prompt_ms: 0, prompt_per_token_ms: 0, prompt_per_second: 0, predicted_n: 0, predicted_ms: 0, predicted_per_token_ms: 0, predicted_per_second: 0, cache_n: 0 },
  };
}
