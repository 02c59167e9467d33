// bloomery engine: speculative decoding's drafts from the model file's MTP layer (llama-server's `--spec-type
// draft-mtp`; llama.cpp common/speculative.cpp's draft-mtp with one MTP head). The MTP layer runs as a model of
// its own (Model.load's mtp: qwen-hybrid-mtp.ts) with its own KV cache layer, a slot a target slot. Its position q
// takes the token at q and the target's normalised final state at q - 1, so after every target forward (which
// gives every row's state: Batch.hiddenOut) the same tokens at the same positions go through the MTP layer with
// the states shifted by one (observe): its KV then follows the target's, and a rejected draft's rows are
// overwritten by the next pass at those positions (attention reads positions up to its own only). A draft after
// the sampled token t at position P starts from the target's state at P - 1, kept from the pass that gave it; each
// step's best token (greedy, stopped under p_min) and the MTP layer's own normalised state feed the next step.
// Where the state at q - 1 is not known (a slot's first pass after a prefix it kept, or one restored from the
// prompt cache) zeros stand in for it, as llama.cpp's pending row starts: the draft is worse there, never wrong.
import { Model, type LoadOptions } from "./model.ts";
import type { Batch } from "./backend.ts";
import { best, checkDraftVocab, type DraftAsk } from "./spec-draft.ts";
import type { GgufFile } from "../gguf/index.ts";
import { openModelPath } from "../safetensors/model.ts";
import type { SpecConfig } from "./spec-ngram.ts";

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

export class MtpDraft {
  /** the target's states of each slot's last pass */
  private kept: (Kept | undefined)[];
  private readonly E: number;
  private logits = new Float32Array(0);
  private hidden = new Float32Array(0);
  /** MTP forwards run (observe and draft steps) */
  passes = 0;

  constructor(readonly model: Model, private readonly nMax: number, private readonly nMin: number, private readonly pMin: number) {
    this.kept = Array.from({ length: model.backend.nSlots }, () => undefined);
    this.E = model.hp.nEmbd;
  }

  /** The drafter wants each target forward's hidden states (Batch.hiddenOut) and observe after it. */
  readonly wantsHidden = true;

  /**
   * A new task in a slot: of the states kept of its earlier sequence, those below `kept` (the prefix the slot
   * keeps) are this one's too; the rest are not. The MTP layer's KV of a prefix the prompt cache restored
   * (kept 0) is another sequence's: its drafts are worse there until the positions are written again.
   */
  begin(slot: number, kept: number): void {
    const k = this.kept[slot];
    if (!k) return;
    const n = Math.min(k.rows.length / this.E, kept - k.p0);
    this.kept[slot] = n > 0 ? { p0: k.p0, rows: k.rows.subarray(0, n * this.E) } : undefined;
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
    type Live = { slot: number; limit: number; pos: number; tok: number; h: Float32Array; d: number[] };
    let live: Live[] = [];
    for (const a of asks) {
      const limit = Math.min(a.limit, this.nMax);
      const P = a.tokens.length;
      const h = P > 0 ? this.stateAt(a.slot, P - 1) : undefined;
      out.set(a.slot, []);
      if (limit <= 0 || !h) continue;
      live.push({ slot: a.slot, limit, pos: P, tok: a.last, h: h.slice(), d: [] });
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
        if (p < this.pMin) return;
        l.d.push(id);
        if (l.d.length >= l.limit) return;
        next.push({ ...l, pos: l.pos + 1, tok: id, h: this.hidden.slice(i * E, (i + 1) * E) });
      });
      for (const l of live) out.set(l.slot, l.d);
      live = next;
    }
    for (const [s, d] of out) if (d.length < Math.max(1, this.nMin)) out.set(s, []);
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

/** The speculative setting a load runs: -md alone (draft-simple, not asked for) is draft-mtp where the draft file has an MTP layer. */
export function specFor(spec: SpecConfig, say: (line: string) => void): SpecConfig {
  if (spec.type !== "draft-simple" || !spec.inferred || !spec.draftModel) return spec;
  const f = openModelPath(spec.draftModel);
  if (!hasMtpLayer(f)) return spec;
  say(`speculative decoding: the draft model ${spec.draftModel} has an MTP layer: --spec-type draft-mtp (as llama-server infers it; --spec-type draft-simple runs it as a draft model)`);
  return { ...spec, type: "draft-mtp" };
}
