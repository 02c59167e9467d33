// bloomery engine: speculative decoding's drafts from the model file's MTP layer (llama-server's `--spec-type
// draft-mtp`; llama.cpp common/speculative.cpp's draft-mtp with one MTP head). The MTP layer runs as a model of
// its own (Model.load's mtp: qwen-hybrid-mtp.ts) with its own KV cache layer, a slot a target slot. Its position q
// takes the token at q and the target's normalised final state at q - 1, so after every target forward (which
// gives every row's state: Batch.hiddenOut) the same tokens at the same positions go through the MTP layer with
// the states shifted by one (observe): its KV then follows the target's, and a rejected draft's rows are
// overwritten by the next pass at those positions (attention reads positions up to its own only). A draft after
// the sampled token t at position P starts from the target's state at P - 1, kept from the pass that gave it; each
// step's best token (greedy, stopped under p_min) and the MTP layer's own normalised state feed the next step.
// A slot's MTP state at a prefix of n tokens is its MTP KV of positions 0 .. n - 1 and the target's state at n - 1:
// the drafter keeps that row at each recurrent checkpoint (checkpoint) besides the last pass's rows, and a prompt
// cache entry or a slot file carries the state with the target's (stash, save / load), so a restored prefix
// drafts as the sequence that made it did, never from another request's MTP KV. A slot whose MTP KV cannot be
// put back (a slot file saved without it) drafts nothing until its sequence starts again at position 0. Where
// the target's state at n - 1 alone is missing, zeros stand in for it (as llama.cpp's pending row starts).
import { Model, type LoadOptions } from "./model.ts";
import type { Batch } from "./backend.ts";
import { best, checkDraftVocab, type DraftAsk } from "./spec-draft.ts";
import type { GgufFile } from "../gguf/index.ts";
import { openModelPath } from "../safetensors/model.ts";
import { familyFor } from "../models/registry.ts";
import type { SpecConfig } from "./spec-ngram.ts";
// the target states kept of a slot's recurrent checkpoints (n: the state at n - 1), newest last: at most MAX_PINS
import { MAX_PINS } from "./mtp-memory.ts";

/** A slot's target states of the last pass it took part in: positions p0 .. p0 + n - 1. */
interface Kept {
  p0: number;
  rows: Float32Array;
}

/**
 * Loads the MTP layer of `src` (the target's own file, or -md's) as the draft of `target`: a slot a target
 * slot, the target's context and batch size. Refuses by name a file without one, a target backend that cannot
 * give its hidden states, and an MTP layer whose width or vocabulary differs from the target's.
 */
export function loadMtpDraft(target: Model, src: string | GgufFile, o: LoadOptions, nMax: number, nMin: number, pMin: number): MtpDraft {
  const be = target.backend;
  const name = typeof src === "string" ? src : src.path;
  if (!be.hiddenRows) throw new Error(`--spec-type draft-mtp: the ${be.name} backend does not give the target's hidden states yet (draft-mtp runs on the CPU backend: -ngl 0)`);
  let d: Model | undefined;
  try {
    // beside a CPU target the MTP layer runs on the CPU too (the card runs neither its input op nor gated attention)
    const ngl = be.name === "CPU" ? 0 : o.nGpuLayers;
    d = Model.load(src, { ...o, mtp: true, nGpuLayers: ngl, nSlots: be.nSlots, nCtx: be.nCtxSlot, maxTokens: be.maxTokens });
    if (d.hp.nEmbd !== target.hp.nEmbd) throw new Error(`its MTP layer is ${d.hp.nEmbd} wide, the target ${target.hp.nEmbd}`);
    if (src !== target.gguf) checkDraftVocab(target, d);
    if (!d.backend.hiddenRows) throw new Error(`the ${d.backend.name} backend does not run the MTP layer yet (draft-mtp runs on the CPU backend: -ngl 0)`);
  } catch (e) {
    d?.close();
    throw new Error(`--spec-type draft-mtp (${name}): ${e instanceof Error ? e.message : String(e)}`);
  }
  return new MtpDraft(d, nMax, nMin, pMin);
}

/** A slot's MTP state saved beside a prompt cache entry (Drafter.stash): put back at a prefix of it. */
export interface DraftStash {
  bytes: number;
  restore(slot: number, m: number): void;
}


export class MtpDraft {
  /** the target's states of each slot's last pass */
  private kept: (Kept | undefined)[];
  /** per slot: the target's state at n - 1 for each checkpoint prefix n (checkpoint) */
  private pins: Map<number, Float32Array>[];
  /** per slot: its MTP KV is not its sequence's (a slot file without it): no drafts until it starts at 0 */
  private blind: boolean[];
  private readonly E: number;
  private logits = new Float32Array(0);
  private hidden = new Float32Array(0);
  /** MTP forwards run (observe and draft steps) */
  passes = 0;

  constructor(readonly model: Model, private readonly nMax: number, private readonly nMin: number, private readonly pMin: number) {
    this.kept = Array.from({ length: model.backend.nSlots }, () => undefined);
    this.pins = Array.from({ length: model.backend.nSlots }, () => new Map());
    this.blind = Array.from({ length: model.backend.nSlots }, () => false);
    this.E = model.hp.nEmbd;
  }

  /** The drafter wants each target forward's hidden states (Batch.hiddenOut) and observe after it. */
  readonly wantsHidden = true;

  /**
   * A new task in a slot that keeps its first `kept` positions (its own, or a prompt cache entry's put back by
   * stash's restore): of the states kept of the slot's sequence, those below `kept` are this one's too, and the
   * state at kept - 1 comes from a checkpoint's row where the last pass did not give it; the rest are not.
   */
  begin(slot: number, kept: number): void {
    const pins = this.pins[slot];
    for (const n of [...pins.keys()]) if (n > kept) pins.delete(n);
    if (kept === 0) {
      this.kept[slot] = undefined;
      this.blind[slot] = false; // every position is written again
      return;
    }
    const k = this.kept[slot];
    const n = k ? Math.min(k.rows.length / this.E, kept - k.p0) : 0;
    this.kept[slot] = k && n > 0 ? { p0: k.p0, rows: k.rows.subarray(0, n * this.E) } : undefined;
    if (!this.stateAt(slot, kept - 1)) {
      const pin = pins.get(kept);
      this.kept[slot] = pin ? { p0: kept - 1, rows: pin.slice() } : undefined;
    }
  }

  /** The target's state at n - 1 the slot holds (the last pass's, or a checkpoint's); undefined: none. */
  private rowFor(slot: number, n: number): Float32Array | undefined {
    return n > 0 ? (this.stateAt(slot, n - 1) ?? this.pins[slot].get(n)) : undefined;
  }

  /** A recurrent checkpoint of the slot at n tokens (after the pass that reached it): its state at n - 1 is kept. */
  checkpoint(slot: number, n: number): void {
    const r = this.stateAt(slot, n - 1);
    if (!r) return;
    const pins = this.pins[slot];
    pins.delete(n);
    pins.set(n, r.slice());
    while (pins.size > MAX_PINS) pins.delete(pins.keys().next().value!);
  }

  /** Bytes stash(slot, n, at) takes: the MTP KV of n positions and a row for each prefix of `at` the slot has one for. */
  stashBytes(slot: number, n: number, at: readonly number[]): number {
    if (this.blind[slot]) return 0;
    return n * this.model.backend.kvPosBytes() + at.filter((p) => p <= n && this.rowFor(slot, p)).length * this.E * 4;
  }

  /**
   * The slot's MTP state of its first n positions, for a prompt cache entry restorable at the prefixes `at`: its
   * MTP KV and the target's state before each. Its restore puts them in a slot (any other state there is dropped).
   */
  stash(slot: number, n: number, at: readonly number[]): DraftStash {
    if (this.blind[slot]) return { bytes: 0, restore: (s) => this.forget(s) };
    const be = this.model.backend, pb = be.kvPosBytes();
    const kv = new Uint8Array(n * pb);
    if (n) be.kvSave(slot, n, kv);
    const rows = new Map<number, Float32Array>();
    for (const p of at) {
      const r = p <= n ? this.rowFor(slot, p) : undefined;
      if (r) rows.set(p, r.slice());
    }
    return {
      bytes: kv.length + rows.size * this.E * 4,
      restore: (s, m) => {
        if (m > n) throw new Error(`internal: the MTP state was saved at ${n} positions, not ${m}`);
        if (m) be.kvLoad(s, m, kv.subarray(0, m * pb));
        this.put(s, m, rows.get(m));
      },
    };
  }

  /** The slot holds its sequence's MTP KV of m positions and (when known) the target's state at m - 1. */
  private put(slot: number, m: number, row: Float32Array | undefined): void {
    this.blind[slot] = false;
    this.kept[slot] = row ? { p0: m - 1, rows: row.slice() } : undefined;
    this.pins[slot] = row ? new Map([[m, row.slice()]]) : new Map();
  }

  /** The slot's MTP KV is not its sequence's: no drafts until the sequence starts at position 0 again. */
  forget(slot: number): void {
    this.blind[slot] = true;
    this.kept[slot] = undefined;
    this.pins[slot] = new Map();
  }

  /** The slot's MTP state after n tokens for a slot file: its MTP KV, then the target's state at n - 1 when kept (else nothing saved). */
  save(slot: number, n: number): Uint8Array | undefined {
    if (this.blind[slot]) return undefined;
    const pb = this.model.backend.kvPosBytes(), row = this.rowFor(slot, n);
    const out = new Uint8Array(n * pb + (row ? this.E * 4 : 0));
    if (n) this.model.backend.kvSave(slot, n, out.subarray(0, n * pb));
    if (row) out.set(new Uint8Array(row.buffer, row.byteOffset, row.byteLength), n * pb);
    return out;
  }

  /** A slot file's MTP state of n tokens back in the slot (save's bytes); undefined (a file without one): the slot drafts nothing until it starts anew. */
  load(slot: number, n: number, data: Uint8Array | undefined): void {
    if (!data) return this.forget(slot);
    const pb = this.model.backend.kvPosBytes(), E = this.E;
    if (data.length !== n * pb && data.length !== n * pb + E * 4) throw new Error(`the slot file's MTP state is ${data.length} bytes; ${n} positions of this MTP layer take ${n * pb} (and ${E * 4} for the target's state)`);
    if (n) this.model.backend.kvLoad(slot, n, data.subarray(0, n * pb));
    const row = data.length > n * pb && n > 0 ? new Float32Array(data.slice(n * pb).buffer) : undefined;
    this.put(slot, n, row);
  }

  /** The target state of a slot at position q, or undefined when no pass kept it. */
  private stateAt(slot: number, q: number): Float32Array | undefined {
    const k = this.kept[slot];
    if (!k || q < k.p0 || q >= k.p0 + k.rows.length / this.E) return undefined;
    return k.rows.subarray((q - k.p0) * this.E, (q - k.p0 + 1) * this.E);
  }

  /**
   * After a target forward of batch b (its hiddenOut filled): the same tokens through the MTP layer, each
   * with the target's state at the position before it (its KV follows the target's); then each slot's rows
   * are kept for the drafts after it. A slot's rows must be consecutive positions (the scheduler's are).
   */
  observe(b: Batch): void {
    const hid = b.hiddenOut;
    if (!hid) throw new Error("draft-mtp: the target's forward gave no hidden states");
    const n = b.tokens.length, E = this.E;
    if (n === 0) return;
    const hin = new Float32Array(n * E);
    const first = new Map<number, number>(), last = new Map<number, number>();
    for (let r = 0; r < n; r++) {
      const s = b.seq[r], q = b.pos[r];
      if (!first.has(s)) first.set(s, r);
      else if (b.pos[last.get(s)!] !== q - 1) throw new Error(`draft-mtp: slot ${s}'s rows in a batch are not consecutive positions`);
      last.set(s, r);
      const prev = first.get(s) === r ? (q > 0 ? this.stateAt(s, q - 1) : undefined) : hid.subarray((r - 1) * E, r * E);
      if (prev) hin.set(prev, r * E);
    }
    const B = this.model.backend.maxTokens;
    for (let a = 0; a < n; a += B) {
      const m = Math.min(B, n - a);
      this.forward({ tokens: b.tokens.subarray(a, a + m), pos: b.pos.subarray(a, a + m), seq: b.seq.subarray(a, a + m), outRows: new Int32Array(0), logits: new Float32Array(0), hiddenIn: hin.subarray(a * E, (a + m) * E) });
    }
    for (const [s, r0] of first) {
      const r1 = last.get(s)! + 1;
      this.kept[s] = { p0: b.pos[r0], rows: hid.slice(r0 * E, r1 * E) };
    }
  }

  /** The drafts of the asking slots (an empty one where nothing was worth drafting or no state was kept). */
  draft(asks: readonly DraftAsk[]): Map<number, number[]> {
    const out = new Map<number, number[]>();
    const E = this.E, V = this.model.hp.nVocab;
    type Live = { slot: number; limit: number; pMin: number; pos: number; tok: number; h: Float32Array; d: number[] };
    const nMin = new Map(asks.map((a) => [a.slot, a.nMin ?? this.nMin]));
    let live: Live[] = [];
    for (const a of asks) {
      const limit = this.blind[a.slot] ? 0 : Math.min(a.limit, a.nMax ?? this.nMax);
      const P = a.tokens.length;
      const h = P > 0 ? this.stateAt(a.slot, P - 1) : undefined;
      out.set(a.slot, []);
      if (limit <= 0 || !h) continue;
      live.push({ slot: a.slot, limit, pMin: a.pMin ?? this.pMin, pos: P, tok: a.last, h: h.slice(), d: [] });
    }
    while (live.length) {
      const n = live.length;
      if (this.logits.length < n * V) this.logits = new Float32Array(n * V);
      if (this.hidden.length < n * E) this.hidden = new Float32Array(n * E);
      const hin = new Float32Array(n * E);
      live.forEach((l, i) => hin.set(l.h, i * E));
      this.forward({
        tokens: Int32Array.from(live, (l) => l.tok), pos: Int32Array.from(live, (l) => l.pos), seq: Int32Array.from(live, (l) => l.slot),
        outRows: Int32Array.from(live, (_, i) => i), logits: this.logits.subarray(0, n * V), hiddenIn: hin, hiddenOut: this.hidden.subarray(0, n * E),
      });
      const next: Live[] = [];
      live.forEach((l, i) => {
        const { id, p } = best(this.logits.subarray(i * V, (i + 1) * V), V);
        if (p < l.pMin) return;
        l.d.push(id);
        if (l.d.length >= l.limit) return;
        next.push({ ...l, pos: l.pos + 1, tok: id, h: this.hidden.slice(i * E, (i + 1) * E) });
      });
      for (const l of live) out.set(l.slot, l.d);
      live = next;
    }
    for (const [s, d] of out) if (d.length < Math.max(1, nMin.get(s)!)) out.set(s, []);
    return out;
  }

  /** Bytes the drafter holds in JavaScript now: the draft steps' logits and states, each slot's kept rows (mtp-memory.ts counts them). */
  heldBytes(): number {
    return this.logits.buffer.byteLength + this.hidden.buffer.byteLength + this.kept.reduce((a, k) => a + (k ? k.rows.buffer.byteLength : 0), 0);
  }

  /** The MTP layer's logits and next-step states for the given rows (tests: the draft's own numbers). */
  forward(b: Batch): void {
    this.passes++;
    this.model.backend.forward(b);
  }

  close(): void {
    this.model.close();
  }
}

/**
 * Whether a draft file has an MTP layer: its last block holds nextn.eh_proj (llama.cpp's
 * common_speculative_types_from_gguf, which makes -md alone mean draft-mtp then).
 */
export function hasMtpLayer(f: GgufFile): boolean {
  const arch = f.str("general.architecture", "");
  const bc = f.u32(`${arch}.block_count`, 0);
  return bc > 0 && !!f.tensor(`blk.${bc - 1}.nextn.eh_proj.weight`);
}

/** Whether the file has an MTP layer of a family whose MTP layer this engine runs as a draft (Family.mtp: the Qwen hybrids, glm4moe, deepseek2): draft-mtp's default. */
export function runsOwnMtp(f: GgufFile): boolean {
  return hasMtpLayer(f) && !!familyFor(f).mtp?.has(f);
}

/**
 * The speculative setting a load of `target` runs: -md alone (draft-simple, not asked for) is draft-mtp where
 * the draft file has an MTP layer (as llama-server infers it); with no --spec-type and no -md, draft-mtp on by
 * default where the target's own file has one (auto: guarded by its measured speed, spec-guard.ts, and off
 * with a line where the backend or the plan cannot run it).
 */
export function specFor(spec: SpecConfig, target: string, say: (line: string) => void): SpecConfig {
  if (spec.type === "none" && spec.inferred && !spec.draftModel) {
    let has = false;
    try {
      has = runsOwnMtp(openModelPath(target));
    } catch {
      // the load names what is wrong with the file
    }
    if (!has) return spec;
    say(`speculative decoding: the model has an MTP layer: draft-mtp on by default, drafting while it measures faster than not (--spec-type none turns it off, --spec-type draft-mtp drafts always)`);
    return { ...spec, type: "draft-mtp", auto: true };
  }
  if (spec.type !== "draft-simple" || !spec.inferred || !spec.draftModel) return spec;
  const f = openModelPath(spec.draftModel);
  if (!hasMtpLayer(f)) return spec;
  say(`speculative decoding: the draft model ${spec.draftModel} has an MTP layer: --spec-type draft-mtp (as llama-server infers it; --spec-type draft-simple runs it as a draft model)`);
  return { ...spec, type: "draft-mtp" };
}
