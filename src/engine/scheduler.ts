// bloomery engine: slots and continuous batching. Every step advances all busy slots in one
// batched forward pass: one token for each generating slot, then prompt chunks from slots still
// reading their prompt, up to the batch size, so a long prompt cannot stall running streams.
// A model with recurrent layers (the gated delta-net's) keeps, beside each slot's KV, the recurrent state after
// the slot's tokens and checkpoints of it (the one before a prompt's last token): a request reuses a prefix
// only where such a state was kept (the slot's own, or a prompt cache entry's), else it starts from position 0.
// Speculative decoding on such a model keeps a slot's state (a snapshot in the backend) before the pass that
// verifies its draft; where part of the draft is rejected the state goes back to the snapshot and the accepted
// tokens are taken again in one pass after the step (no output rows), so after every step a slot's state is
// the one after its tokens, as without speculation.
import type { Model } from "./model.ts";
import type { Batch } from "./backend.ts";
import type { DoneEvent, EngineStats, GenerateRequest, SlotInfo, StopType, TokenEvent } from "./protocol.ts";
import { Task } from "./task.ts";
import type { SamplerFactory } from "./task.ts";
import { commonPrefix, PromptCache, type CachedPrompt, type SavedKv } from "./prompt-cache.ts";
import { readSlotFile, writeSlotFile } from "./slot-file.ts";
import { TOP_CANDIDATES_MAX } from "../sampling/view.ts";
import { StepLog } from "./step-log.ts";
import { RecurrentStates, type Checkpoint } from "./recurrent-state.ts";
import { ngramDraft, SPEC_NONE, type SpecConfig } from "./spec-ngram.ts";
import type { DraftAsk } from "./spec-draft.ts";
import { SpecGuard } from "./spec-guard.ts";

/** What makes a draft model's drafts (spec-draft.ts's DraftModel, spec-mtp.ts's MtpDraft). */
export interface Drafter {
  draft(asks: readonly DraftAsk[]): Map<number, number[]>;
  /** the drafter reads each target forward's hidden states (Batch.hiddenOut), given to observe after the pass */
  readonly wantsHidden?: boolean;
  observe?(b: Batch): void;
  /** a new task starts in a slot that keeps its first `kept` positions (its own, or a prompt cache entry's put back by stash) */
  begin?(slot: number, kept: number): void;
  /** a recurrent checkpoint of the slot at n tokens (the drafter keeps what going on from there takes) */
  checkpoint?(slot: number, n: number): void;
  /**
   * The drafter's own state of a slot's first n positions, saved beside a prompt cache entry that restores at the
   * prefixes `at` (its restore puts it in a slot with the target's), and the bytes that takes
   */
  stash?(slot: number, n: number, at: readonly number[]): { bytes: number; restore(slot: number, m: number): void };
  stashBytes?(slot: number, n: number, at: readonly number[]): number;
  /** the same for a slot file (save: undefined when it has none; load: undefined when the file has none) */
  save?(slot: number, n: number): Uint8Array | undefined;
  load?(slot: number, n: number, data: Uint8Array | undefined): void;
}

/** Slot states shorter than this are not worth saving to the prompt cache. */
const MIN_SAVE_TOKENS = 16;


export class EngineError extends Error {
  constructor(message: string, readonly type = "server_error", readonly code = 500) {
    super(message);
    this.name = "EngineError";
  }
}

interface Slot {
  id: number;
  /** tokens whose KV the slot holds, positions 0..tokens.length-1 */
  tokens: number[];
  task?: Task;
  lastUsed: number;
  /** a recurrent model: the tokens the slot's live recurrent state has taken, and saved states at shorter prefixes */
  rsAt: number;
  checkpoints: Checkpoint[];
}

export interface SchedulerHooks {
  tokens(events: TokenEvent[]): void;
  done(d: DoneEvent): void;
}

export class Scheduler {
  private slots: Slot[];
  private queue: Task[] = [];
  private logits: Float32Array;
  private clock = 0;
  readonly cache: PromptCache;
  private restored = 0;

  /** tokens a forward pass takes at most: the -ub asked for, within what the backend takes */
  private readonly ubatch: number;

  /** cacheBytes: the prompt cache's budget (0 disables it, < 0 no limit); spec: speculative decoding */
  constructor(private readonly model: Model, private readonly hooks: SchedulerHooks, private readonly makeSampler: SamplerFactory, ubatch: number, cacheBytes = 0,
    private readonly spec: SpecConfig = SPEC_NONE, private readonly drafter?: Drafter) {
    const b = model.backend;
    this.ubatch = Math.max(1, Math.min(ubatch, b.maxTokens));
    this.slots = Array.from({ length: b.nSlots }, (_, id) => ({ id, tokens: [], lastUsed: 0, rsAt: 0, checkpoints: [] }));
    const rsBytes = b.rsBytes?.() ?? 0;
    this.rs = rsBytes > 0 ? new RecurrentStates(b, rsBytes) : undefined;
    if (this.rs && spec.type !== "none") this.rs.reserveSnapshots();
    // drafting not asked for (draft-mtp by default) drafts only while its steps are the faster (spec-guard.ts)
    this.guard = spec.auto && spec.type !== "none" ? new SpecGuard() : undefined;
    this.logits = new Float32Array(b.nSlots * model.hp.nVocab);
    this.topIds = new Int32Array(b.nSlots * TOP_CANDIDATES_MAX);
    this.topVals = new Float32Array(b.nSlots * TOP_CANDIDATES_MAX);
    this.topOn = !!b.forwardTopK && process.env.BLOOMERY_TOPK_SAMPLING !== "0";
    this.cache = new PromptCache(cacheBytes, b.kvPosBytes());
    this.steps = new StepLog(b.name !== "CPU", () => {
      const h = b.hostStats?.();
      return { hookUs: h?.hookUs, uploadBytes: h?.uploadBytes, pcieBytesPerSec: h?.pcieBytesPerSec, promoted: h?.promoted, diskBytes: model.expertStats()?.bytesRead };
    });
  }

  /** the last forward passes and their time split (the placement view) */
  readonly steps: StepLog;
  /** a recurrent model's slot states (undefined: the model has no recurrent layers) */
  private readonly rs: RecurrentStates | undefined;
  /** speculative decoding on by default: whether its steps draft, by their measured time a token */
  private readonly guard: SpecGuard | undefined;

  stats(): EngineStats {
    return {
      slots: this.slots.length, slotsBusy: this.slots.filter((s) => s.task).length, queued: this.queue.length,
      cacheEntries: this.cache.size, cacheBytes: this.cache.bytes, cacheHits: this.cache.hits, cacheMisses: this.cache.misses,
      cachedTokensRestored: this.restored, cacheCardBytes: this.cache.cardBytes,
      nDecode: this.nDecode, busySlotsDecoded: this.busySlotsDecoded, topKSteps: this.nTopSteps,
      specDrafted: this.specDrafted, specAccepted: this.specAccepted, specSteps: this.specSteps,
      ...(this.guard ? { specGuard: { drafting: this.guard.drafting(), switches: this.guard.switches, msPerTokenOn: this.guard.last.on, msPerTokenOff: this.guard.last.off } } : {}),
      ...(this.rs && this.spec.type !== "none" ? { specRollbacks: this.specRollbacks, specRetaken: this.specRetaken, specRetakeMs: this.specRetakeMs, specSnapMs: this.specSnapMs } : {}),
      experts: this.model.expertStats(),
      hostExperts: this.model.backend.hostStats?.(),
    };
  }

  /** the target's hidden states of a pass, for a drafter that reads them (Drafter.wantsHidden) */
  private hidden = new Float32Array(0);
  private nDecode = 0;
  private specDrafted = 0;
  private specAccepted = 0;
  private specSteps = 0;
  private specRollbacks = 0;
  private specRetaken = 0;
  private specRetakeMs = 0;
  private specSnapMs = 0;
  private busySlotsDecoded = 0;
  /** forwards that returned the rows' best candidates instead of the rows (forwardTopK) */
  private nTopSteps = 0;
  private readonly topIds: Int32Array;
  private readonly topVals: Float32Array;
  private readonly topOn: boolean;

  /**
   * The candidates a row this step's samplers need when every one of them can pick from the
   * backend's best candidates (forwardTopK: no vocabulary-sized row crosses to the host, no pass
   * over it here); 0: the rows themselves. BLOOMERY_TOPK_SAMPLING=0 always takes the rows.
   */
  private candidatesFor(outSlots: Slot[]): number {
    if (!this.topOn || outSlots.length === 0) return 0;
    let k = 0;
    for (const s of outSlots) {
      const need = s.task!.candidatesNeeded();
      if (need <= 0) return 0;
      k = Math.max(k, need);
    }
    return k;
  }

  private idleSlot(id: number): Slot {
    const s = this.slots[id];
    if (!s) throw new EngineError(`slot ${id} does not exist (${this.slots.length} slots)`, "invalid_request_error", 400);
    if (s.task) throw new EngineError(`slot ${id} is busy`, "unavailable_error", 503);
    return s;
  }

  /** llama-server's slot save: the slot's tokens and KV to a file. */
  saveSlotFile(id: number, path: string): { n_saved: number; n_written: number; save_ms: number } {
    const t0 = performance.now();
    const s = this.idleSlot(id);
    const posBytes = this.model.backend.kvPosBytes();
    const kv = new Uint8Array(s.tokens.length * posBytes);
    if (s.tokens.length) this.model.backend.kvSave(s.id, s.tokens.length, kv);
    let rs: Uint8Array | undefined;
    if (this.rs) {
      if (s.rsAt !== s.tokens.length) throw new EngineError(`slot ${id}'s recurrent state is not at its ${s.tokens.length} tokens`, "server_error", 500);
      rs = this.rs.live(s);
    }
    const draft = this.drafter?.save?.(s.id, s.tokens.length);
    const head = { model: this.model.gguf.path, n_tokens: s.tokens.length, pos_bytes: posBytes, ...(rs ? { rs_bytes: rs.length } : {}), ...(draft ? { draft_bytes: draft.length } : {}) };
    const n = writeSlotFile(path, head, s.tokens, kv, rs, draft);
    return { n_saved: s.tokens.length, n_written: n, save_ms: performance.now() - t0 };
  }

  /** llama-server's slot restore: a saved state back into a slot. */
  restoreSlotFile(id: number, path: string): { n_restored: number; n_read: number; restore_ms: number } {
    const t0 = performance.now();
    const s = this.idleSlot(id);
    const posBytes = this.model.backend.kvPosBytes();
    const f = readSlotFile(path, { model: this.model.gguf.path, posBytes, maxTokens: this.model.backend.nCtxSlot, rsBytes: this.rs?.bytes ?? 0 });
    if (f.tokens.some((t) => t < 0 || t >= this.model.hp.nVocab)) throw new EngineError("slot file holds token ids outside the vocabulary", "invalid_request_error", 400);
    if (f.tokens.length) this.model.backend.kvLoad(s.id, f.tokens.length, f.kv);
    if (f.rs) this.model.backend.rsLoad!(s.id, f.rs);
    // the drafter's own state (draft-mtp's MTP KV): put back, or the slot drafts nothing until it starts anew
    try {
      this.drafter?.load?.(s.id, f.tokens.length, f.draft);
    } catch (e) {
      s.tokens = [];
      this.rs?.reset(s);
      throw new EngineError(e instanceof Error ? e.message : String(e), "invalid_request_error", 400);
    }
    s.tokens = f.tokens;
    this.rs?.reset(s);
    s.rsAt = f.tokens.length;
    return { n_restored: f.tokens.length, n_read: f.bytes, restore_ms: performance.now() - t0 };
  }

  /** llama-server's slot erase: forget what the slot holds. */
  eraseSlot(id: number): { n_erased: number } {
    const s = this.idleSlot(id);
    const n = s.tokens.length;
    s.tokens = [];
    this.rs?.reset(s);
    return { n_erased: n };
  }

  /** Save what a slot holds to the prompt cache (before it is overwritten). */
  private saveSlot(s: Slot, keep?: CachedPrompt): void {
    if (s.tokens.length < MIN_SAVE_TOKENS || !this.cache.enabled) return;
    const extra = (this.rs?.stashBytes(s) ?? 0) + (this.drafter?.stashBytes?.(s.id, s.tokens.length, this.stashAt(s)) ?? 0);
    this.cache.save(s.tokens, () => this.stash(s), keep, extra);
  }

  /** The prefixes a saved state of the slot restores at: a recurrent model's checkpoints and its tokens. */
  private stashAt(s: Slot): number[] {
    return [...s.checkpoints.map((c) => c.n), s.tokens.length];
  }

  /** The slot's state as a saved KV state: on the card when the backend has room there, else host RAM; the drafter's beside it. */
  private stash(s: Slot): SavedKv {
    const kv = this.stashKv(s);
    const saved = this.rs ? this.rs.stash(s, kv) : kv;
    const d = this.drafter?.stash?.(s.id, s.tokens.length, this.stashAt(s));
    if (!d) return saved;
    return { ...saved, bytes: saved.bytes + d.bytes, restore: (slot, m) => { saved.restore(slot, m); d.restore(slot, m); } };
  }

  private stashKv(s: Slot): SavedKv {
    const be = this.model.backend, n = s.tokens.length;
    const dev = be.kvStash?.(s.id, n);
    if (dev) return dev;
    const posBytes = be.kvPosBytes();
    const buf = new Uint8Array(n * posBytes);
    be.kvSave(s.id, n, buf);
    return { bytes: buf.length, where: "host", restore: (slot, m) => be.kvLoad(slot, m, buf.subarray(0, m * posBytes)), free: () => {} };
  }

  /** prepareSlot for a recurrent model: a prefix only where a recurrent state was kept, the slot's put at it. */
  private prepareRecurrent(s: Slot, prompt: readonly number[], usePrefix: boolean, rs: RecurrentStates): number {
    const limit = prompt.length - 1;
    let keep = usePrefix ? rs.restorable(s, Math.min(commonPrefix(s.tokens, prompt), limit)) : 0;
    if (usePrefix && this.cache.enabled) {
      const { entry, n } = this.cache.best(prompt, limit);
      if (entry && n > keep) {
        this.saveSlot(s, entry);
        entry.kv.restore(s.id, n);
        s.tokens = entry.tokens.slice(0, n);
        rs.reset(s);
        s.rsAt = n;
        this.cache.touch(entry);
        this.cache.hits++;
        this.restored += n;
        return n;
      } else if (keep < Math.min(s.tokens.length, prompt.length)) {
        this.cache.misses++;
      }
    }
    if (keep < s.tokens.length) this.saveSlot(s);
    rs.cut(s, keep);
    return keep;
  }

  /** The KV prefix a task can start from in slot s: what the slot holds, or a cache entry restored into it. */
  private prepareSlot(s: Slot, prompt: readonly number[], usePrefix: boolean): number {
    if (this.rs) return this.prepareRecurrent(s, prompt, usePrefix, this.rs);
    let keep = usePrefix ? commonPrefix(s.tokens, prompt) : 0;
    if (usePrefix && this.cache.enabled) {
      const { entry, n } = this.cache.best(prompt);
      if (entry && n > keep) {
        this.saveSlot(s, entry);
        entry.kv.restore(s.id, n);
        s.tokens = entry.tokens.slice(0, n);
        this.cache.touch(entry);
        this.cache.hits++;
        this.restored += n;
        keep = n;
      } else if (keep < Math.min(s.tokens.length, prompt.length)) {
        this.cache.misses++;
      }
    }
    if (keep < s.tokens.length) this.saveSlot(s);
    keep = Math.min(keep, prompt.length - 1);
    s.tokens.length = keep;
    return keep;
  }

  get busy(): boolean {
    return this.queue.length > 0 || this.slots.some((s) => s.task);
  }

  submit(req: GenerateRequest): void {
    const nCtx = this.model.backend.nCtxSlot;
    if (req.prompt.length === 0) throw new EngineError("the prompt is empty", "invalid_request_error", 400);
    if (req.prompt.length >= nCtx) {
      throw new EngineError(`the request exceeds the available context size (${req.prompt.length} prompt tokens, context ${nCtx})`, "exceed_context_size_error", 400);
    }
    if (req.idSlot >= this.slots.length) throw new EngineError(`id_slot ${req.idSlot} does not exist (${this.slots.length} slots)`, "invalid_request_error", 400);
    for (const id of req.prompt) {
      if (!Number.isInteger(id) || id < 0 || id >= this.model.hp.nVocab) throw new EngineError(`token id ${id} is outside the vocabulary`, "invalid_request_error", 400);
    }
    const task = new Task(req, this.model, this.makeSampler(req, this.model));
    this.queue.push(task);
    this.assign();
  }

  cancel(id: number): void {
    const q = this.queue.findIndex((t) => t.req.id === id);
    if (q >= 0) {
      const [t] = this.queue.splice(q, 1);
      this.hooks.done(t.finish("cancel", -1));
      return;
    }
    const slot = this.slots.find((s) => s.task?.req.id === id);
    if (slot) this.release(slot, "cancel");
  }

  slotInfo(): SlotInfo[] {
    return this.slots.map((s) => ({
      id: s.id, n_ctx: this.model.backend.nCtxSlot, is_processing: !!s.task, id_task: s.task?.req.id ?? -1,
      n_past: s.task ? s.task.nPast : s.tokens.length, n_cached: s.tokens.length,
    }));
  }

  /** Put queued tasks into idle slots: the asked slot, else the one sharing the longest prefix, else the least recently used. */
  private assign(): void {
    for (let i = 0; i < this.queue.length; ) {
      const t = this.queue[i];
      let slot: Slot | undefined;
      if (t.req.idSlot >= 0) slot = this.slots[t.req.idSlot].task ? undefined : this.slots[t.req.idSlot];
      else {
        let bestLen = -1;
        for (const s of this.slots) {
          if (s.task) continue;
          const n = t.req.cachePrompt ? commonPrefix(s.tokens, t.req.prompt) : 0;
          if (n > bestLen || (n === bestLen && slot && s.lastUsed < slot.lastUsed)) { bestLen = n; slot = s; }
        }
      }
      if (!slot) { i++; continue; }
      this.queue.splice(i, 1);
      const keep = this.prepareSlot(slot, t.req.prompt, t.req.cachePrompt);
      // the drafter's state below keep is the sequence's: the slot's own, or the prompt cache entry's it restored
      this.drafter?.begin?.(slot.id, keep);
      t.start(slot.id, keep);
      slot.task = t;
    }
  }

  private release(slot: Slot, stop: StopType, word = ""): void {
    const t = slot.task!;
    slot.task = undefined;
    slot.lastUsed = ++this.clock;
    this.hooks.done(t.finish(stop, slot.id, word));
    this.assign();
  }

  /**
   * The drafts to verify after the generating slots' last tokens (speculative decoding), each
   * within the step's room, the slot's context and the request's n_predict.
   */
  private draftsFor(gen: readonly Slot[]): Map<Slot, number[]> {
    const out = new Map<Slot, number[]>();
    if (this.spec.type === "none" || (this.guard && !this.guard.drafting())) return out;
    let spare = this.ubatch - gen.length;
    const asks: DraftAsk[] = [];
    for (const s of gen) {
      const t = s.task!;
      // the request's speculative.n_max / n_min (llama-server's per-request fields) over the server's
      const o = t.req.draft ?? {};
      const limit = Math.min(spare, this.model.backend.nCtxSlot - s.tokens.length - 2, t.remaining() - 1, o.nMax ?? Infinity);
      if (limit <= 0) continue;
      if (this.spec.type === "ngram-simple") {
        const d = ngramDraft(s.tokens, t.lastToken, this.spec.sizeN, this.spec.sizeM, limit);
        if (d.length && d.length >= (o.nMin ?? 0)) {
          out.set(s, d);
          spare -= d.length;
        }
      } else if (this.drafter) {
        const l = Math.min(limit, o.nMax ?? this.spec.nMax ?? 3);
        asks.push({ slot: s.id, tokens: s.tokens, last: t.lastToken, limit: l, nMax: o.nMax, nMin: o.nMin, pMin: o.pMin });
        spare -= l;
      }
    }
    if (asks.length && this.drafter) {
      const got = this.drafter.draft(asks);
      for (const s of gen) {
        const d = got.get(s.id);
        if (d?.length) out.set(s, d);
      }
    }
    return out;
  }

  /** One batched forward pass over all busy slots, then sampling. Returns false when idle. */
  step(): boolean {
    this.assign();
    const active = this.slots.filter((s) => s.task);
    if (active.length === 0) return false;
    const stepT0 = performance.now();
    const tokens: number[] = [], pos: number[] = [], seq: number[] = [], outRows: number[] = [], outSlots: Slot[] = [];
    // generating slots first: one token each, and after it the slot's draft (speculative decoding:
    // the model's logits after each draft token decide how many of them it accepts)
    const drafts = this.draftsFor(active.filter((s) => !s.task!.prompting));
    for (const s of active) {
      const t = s.task!;
      if (t.prompting) continue;
      const d = drafts.get(s) ?? [];
      tokens.push(t.lastToken);
      pos.push(s.tokens.length);
      seq.push(s.id);
      outRows.push(tokens.length - 1);
      outSlots.push(s);
      for (let i = 0; i < d.length; i++) {
        tokens.push(d[i]);
        pos.push(s.tokens.length + 1 + i);
        seq.push(s.id);
        outRows.push(tokens.length - 1);
      }
    }
    // then prompt chunks, oldest task first
    const chunks: { slot: Slot; n: number }[] = [];
    for (const s of active.filter((x) => x.task!.prompting).sort((a, b) => a.task!.req.id - b.task!.req.id)) {
      const room = this.ubatch - tokens.length;
      if (room <= 0) break;
      const t = s.task!;
      const rest = t.req.prompt.length - s.tokens.length;
      // a recurrent model's chunk stops before the prompt's last token: its state there is kept (checkpoint)
      const n = this.rs && rest > 1 && room >= rest ? rest - 1 : Math.min(room, rest);
      for (let i = 0; i < n; i++) {
        tokens.push(t.req.prompt[s.tokens.length + i]);
        pos.push(s.tokens.length + i);
        seq.push(s.id);
      }
      chunks.push({ slot: s, n });
      if (n === rest) { outRows.push(tokens.length - 1); outSlots.push(s); }
    }
    const V = this.model.hp.nVocab;
    if (this.logits.length < outRows.length * V) this.logits = new Float32Array(outRows.length * V);
    const batch: Batch = {
      tokens: Int32Array.from(tokens), pos: Int32Array.from(pos), seq: Int32Array.from(seq),
      outRows: Int32Array.from(outRows), logits: this.logits.subarray(0, outRows.length * V),
    };
    const observe = this.drafter?.wantsHidden && this.drafter.observe ? this.drafter : undefined;
    if (observe) {
      const E = this.model.hp.nEmbd;
      if (this.hidden.length < tokens.length * E) this.hidden = new Float32Array(tokens.length * E);
      batch.hiddenOut = this.hidden.subarray(0, tokens.length * E);
    }
    const topK = drafts.size || observe ? 0 : this.candidatesFor(outSlots);
    if (this.rs && drafts.size) {
      const ts = performance.now();
      for (const s of drafts.keys()) this.rs.snapshot(s);
      this.specSnapMs += performance.now() - ts;
    }
    const t0 = performance.now();
    this.nDecode++;
    this.busySlotsDecoded += new Set(seq).size;
    try {
      if (topK > 0) {
        this.model.backend.forwardTopK!(batch, topK, this.topIds, this.topVals);
        this.nTopSteps++;
      } else this.model.backend.forward(batch);
      // the MTP draft's layer takes the same tokens with the target's states (its KV follows the target's)
      observe?.observe!(batch);
    } catch (e) {
      this.failPass(active, e);
      return true;
    }
    const ms = performance.now() - t0;
    this.steps.record(tokens.length, chunks.reduce((a, c) => a + c.n, 0), new Set(seq).size, ms);
    for (const s of active) if (!s.task!.prompting) s.tokens.push(s.task!.lastToken);
    for (const c of chunks) {
      const t = c.slot.task!;
      for (let i = 0; i < c.n; i++) c.slot.tokens.push(t.req.prompt[c.slot.tokens.length]);
      t.promptMs += ms;
    }
    if (this.rs) {
      // a drafting slot's state took its draft too (acceptance below puts it back where part was rejected)
      for (const s of active) s.rsAt = s.tokens.length + (drafts.get(s)?.length ?? 0);
      for (const c of chunks) {
        if (c.slot.tokens.length !== c.slot.task!.req.prompt.length - 1) continue;
        this.rs.checkpoint(c.slot);
        this.drafter?.checkpoint?.(c.slot.id, c.slot.tokens.length);
      }
    }
    const events: TokenEvent[] = [];
    /** a recurrent model's slots whose state went back to its snapshot: their accepted tokens are taken again */
    const retake: Slot[] = [];
    let row = 0, emitted = 0;
    outSlots.forEach((s, i) => {
      const t = s.task!;
      if (!t.prompting) t.genMs += ms;
      const d = drafts.get(s) ?? [];
      const r0 = row;
      row += 1 + d.length;
      let res: ReturnType<Task["next"]>;
      let acc = 0;
      try {
        if (topK > 0) {
          res = t.nextTop(this.topIds.subarray(i * topK, (i + 1) * topK), this.topVals.subarray(i * topK, (i + 1) * topK), s.tokens.length, this.model.backend.nCtxSlot);
        } else {
          // each sampled token that equals the draft's next keeps that draft token's KV row, and the
          // row after it gives the next pick; the first that differs ends the step (its pick stands)
          for (;;) {
            res = t.next(this.logits.subarray((r0 + acc) * V, (r0 + acc + 1) * V), s.tokens.length, this.model.backend.nCtxSlot);
            if (res.stop || acc >= d.length || t.lastToken !== d[acc]) break;
            if (res.event) events.push(res.event);
            s.tokens.push(d[acc]);
            acc++;
          }
          if (d.length) {
            t.draftN += d.length;
            t.draftAccepted += acc;
            this.specDrafted += d.length;
            this.specAccepted += acc;
            this.specSteps++;
          }
        }
      } catch (e) {
        // a sampling failure (e.g. every token banned) ends this request, never the engine
        this.settleDraft(s, d.length, acc, true, retake);
        s.task = undefined;
        s.lastUsed = ++this.clock;
        const msg = e instanceof Error ? e.message : String(e);
        // nothing left to sample is the request's own constraints (logit_bias, grammar): a 400
        const theirs = /no token is left to sample/.test(msg);
        this.hooks.done(t.finish("none", s.id, "", { message: `sampling failed: ${msg}${theirs ? " (the request's logit_bias and grammar leave no token)" : ""}`, type: theirs ? "invalid_request_error" : "server_error", code: theirs ? 400 : 500 }));
        return;
      }
      this.settleDraft(s, d.length, acc, !!res.stop, retake);
      emitted += 1 + acc;
      if (res.event) events.push(res.event);
      if (res.stop) {
        if (events.length) { this.hooks.tokens(events.splice(0)); }
        this.release(s, res.stop, res.word);
      }
    });
    if (events.length) this.hooks.tokens(events);
    if (retake.length) this.retake(retake);
    if (this.guard && chunks.length === 0) this.guard.record(this.guard.drafting(), performance.now() - stepT0, emitted);
    return true;
  }

  /** A forward pass failed: every task in it ends with the error, its slot emptied. */
  private failPass(slots: readonly Slot[], e: unknown): void {
    const msg = e instanceof Error ? e.message : String(e);
    for (const s of slots) {
      const t = s.task!;
      s.task = undefined;
      s.tokens.length = 0;
      this.rs?.reset(s);
      this.hooks.done(t.finish("none", s.id, "", { message: `forward pass failed: ${msg}`, type: "server_error", code: 500 }));
    }
  }

  /**
   * A recurrent model's slot after the verification of its draft of n tokens, acc of them accepted (the slot's
   * tokens hold them): where some were rejected its state goes back to the snapshot taken before the pass, and
   * the tokens the pass added are taken again after the step (retake), or cut off when the request ends.
   */
  private settleDraft(s: Slot, n: number, acc: number, ends: boolean, retake: Slot[]): void {
    if (!this.rs || n === 0 || acc === n) return;
    const ts = performance.now();
    this.rs.rollback(s, s.tokens.length - 1 - acc);
    this.specSnapMs += performance.now() - ts;
    this.specRollbacks++;
    if (ends) s.tokens.length = s.rsAt;
    else retake.push(s);
  }

  /** One pass (no output rows) over the slots' tokens their recurrent state has not taken: after it, it has. */
  private retake(slots: readonly Slot[]): void {
    const tokens: number[] = [], pos: number[] = [], seq: number[] = [];
    for (const s of slots) {
      for (let p = s.rsAt; p < s.tokens.length; p++) {
        tokens.push(s.tokens[p]);
        pos.push(p);
        seq.push(s.id);
      }
    }
    const t0 = performance.now();
    this.nDecode++;
    this.busySlotsDecoded += slots.length;
    try {
      this.model.backend.forward({ tokens: Int32Array.from(tokens), pos: Int32Array.from(pos), seq: Int32Array.from(seq), outRows: new Int32Array(0), logits: this.logits.subarray(0, 0) });
    } catch (e) {
      this.failPass(slots, e);
      return;
    }
    const ms = performance.now() - t0;
    this.steps.record(tokens.length, 0, slots.length, ms);
    this.specRetaken += tokens.length;
    this.specRetakeMs += ms;
    for (const s of slots) {
      s.rsAt = s.tokens.length;
      s.task!.genMs += ms;
    }
  }
}
