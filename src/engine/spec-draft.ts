// bloomery engine: speculative decoding's drafts from a draft model (llama-server's `-md`,
// `--spec-type draft-simple`): a second, smaller model with the target's vocabulary, one sequence
// per target slot. Before drafting, each slot's sequence is brought up to the target's (the tokens
// it lacks fed as one chunk; what differs from what it held is overwritten in place); then every
// drafting slot takes up to n_max greedy tokens, one batched forward pass of the draft model a
// token, stopping a slot where its best token is less likely than p_min. A draft model with recurrent
// layers cannot overwrite a state in place: its slot's state is kept (a snapshot in the backend) after the
// catch-up, and the next catch-up goes back to it when the target took only part of the draft (or starts
// the slot over where even that prefix differs).
import { Model, type LoadOptions } from "./model.ts";
import type { Batch } from "./backend.ts";
import { commonPrefix } from "./prompt-cache.ts";

/** A slot's request for a draft: the target's tokens (KV held), the last sampled, the most tokens. */
export interface DraftAsk {
  slot: number;
  tokens: readonly number[];
  last: number;
  limit: number;
  /** the request's speculative.n_max, n_min and p_min over the drafter's own */
  nMax?: number;
  nMin?: number;
  pMin?: number;
}

/** Refuses a draft model whose vocabulary is not the target's (the draft's ids must mean the same). */
export function checkDraftVocab(target: Model, draft: Model): void {
  const a = target.tokenizer, b = draft.tokenizer;
  const why = a.nVocab !== b.nVocab ? `${b.nVocab} tokens against the target's ${a.nVocab}` : a.model !== b.model ? `a ${b.model} tokenizer against the target's ${a.model}` : undefined;
  if (why) throw new Error(`the draft model's vocabulary differs from the target's (${why}): a draft model must share the target's tokenizer`);
  // the same text at a spread of ids, and the same end-of-generation tokens
  const step = Math.max(1, Math.floor(a.nVocab / 997));
  for (let id = 0; id < a.nVocab; id += step) {
    if (a.tokenText(id) !== b.tokenText(id)) throw new Error(`the draft model's vocabulary differs from the target's at token ${id} (${JSON.stringify(b.tokenText(id))} against ${JSON.stringify(a.tokenText(id))})`);
  }
  if (a.eos !== b.eos) throw new Error(`the draft model's end-of-stream token ${b.eos} differs from the target's ${a.eos}`);
}

/**
 * Loads a draft model for `target` (a slot a target slot, `o`'s context and threads) and checks its
 * vocabulary; an error names the file and closes what was loaded.
 */
export function loadDraft(target: Model, path: string, o: LoadOptions, nMax: number, nMin: number, pMin: number): DraftModel {
  let d: Model | undefined;
  try {
    d = Model.load(path, o);
    checkDraftVocab(target, d);
  } catch (e) {
    d?.close();
    throw new Error(`the draft model (-md ${path}): ${e instanceof Error ? e.message : String(e)}`);
  }
  return new DraftModel(d, nMax, nMin, pMin);
}

export class DraftModel {
  /** per slot: the tokens whose KV the draft model holds */
  private held: number[][];
  private logits: Float32Array;
  /** a recurrent draft model: per slot, the tokens its snapshot is after (-1: none) */
  private readonly snapAt: number[] | undefined;

  constructor(readonly model: Model, private readonly nMax: number, private readonly nMin: number, private readonly pMin: number) {
    const be = model.backend;
    this.held = Array.from({ length: be.nSlots }, () => []);
    this.logits = new Float32Array(be.nSlots * model.hp.nVocab);
    if ((be.rsBytes?.() ?? 0) > 0) {
      if (!be.rsSnapReserve || !be.rsSnapTake || !be.rsSnapBack) throw new Error(`a draft model with recurrent layers needs its slots' states kept and put back, which the ${be.name} backend does not do yet`);
      be.rsSnapReserve();
      this.snapAt = Array.from({ length: be.nSlots }, () => -1);
    }
  }

  /** The tokens of seq a slot's sequence keeps before its catch-up (at most seq.length - 1: one is fed for its row). */
  private keepFor(slot: number, seq: readonly number[]): number {
    const held = this.held[slot];
    const keep = Math.min(commonPrefix(held, seq), seq.length - 1);
    if (!this.snapAt || keep === held.length) return keep;
    // a recurrent state is the one after all it held: back to the snapshot where that is a prefix, else anew
    const at = this.snapAt[slot];
    if (at < 0 || at > keep) return 0;
    this.model.backend.rsSnapBack!(slot);
    return at;
  }

  /** The drafts of the asking slots (an empty one where nothing was worth drafting). */
  draft(asks: readonly DraftAsk[]): Map<number, number[]> {
    const out = new Map<number, number[]>();
    const live = asks.filter((a) => Math.min(a.limit, a.nMax ?? this.nMax) > 0 && a.slot < this.held.length);
    if (!live.length) return out;
    const be = this.model.backend;
    // catch up: each slot's missing tokens (the sequence and the last sampled), in passes of at most maxTokens
    const todo = live.map((a) => {
      const seq = [...a.tokens, a.last];
      const keep = this.keepFor(a.slot, seq);
      this.held[a.slot].length = keep;
      return { a, seq, at: keep };
    });
    while (todo.some((t) => t.at < t.seq.length)) {
      const tokens: number[] = [], pos: number[] = [], seq: number[] = [], outRows: number[] = [], rowSlot: number[] = [];
      for (const t of todo) {
        while (t.at < t.seq.length && tokens.length < be.maxTokens) {
          tokens.push(t.seq[t.at]);
          pos.push(t.at);
          seq.push(t.a.slot);
          this.held[t.a.slot].push(t.seq[t.at]);
          t.at++;
          if (t.at === t.seq.length) { outRows.push(tokens.length - 1); rowSlot.push(t.a.slot); }
        }
      }
      this.forward(tokens, pos, seq, outRows);
      rowSlot.forEach((s, i) => this.keep(s, i)); // the best token after each finished slot's last
    }
    if (this.snapAt) {
      for (const a of live) {
        this.model.backend.rsSnapTake!(a.slot);
        this.snapAt[a.slot] = this.held[a.slot].length;
      }
    }
    // greedy drafting, all live slots a step
    const drafts = new Map<number, number[]>(live.map((a) => [a.slot, []]));
    let active = live.map((a) => a.slot);
    const limit = new Map(live.map((a) => [a.slot, Math.min(a.limit, a.nMax ?? this.nMax)]));
    const ask = new Map(live.map((a) => [a.slot, a]));
    for (;;) {
      const go: number[] = [];
      for (const s of active) {
        const { id, p } = this.kept.get(s)!;
        if (p < (ask.get(s)!.pMin ?? this.pMin)) continue;
        const d = drafts.get(s)!;
        d.push(id);
        if (d.length < limit.get(s)!) go.push(s);
      }
      if (!go.length) break;
      const tokens = go.map((s) => drafts.get(s)!.at(-1)!), pos = go.map((s) => this.held[s].length), rows = go.map((_, i) => i);
      for (const s of go) this.held[s].push(drafts.get(s)!.at(-1)!);
      this.forward(tokens, pos, go, rows);
      go.forEach((s, i) => this.keep(s, i));
      active = go;
    }
    for (const [s, d] of drafts) out.set(s, d.length >= Math.max(1, ask.get(s)!.nMin ?? this.nMin) ? d : []);
    return out;
  }

  /** each slot's best next token after its last forward, and its probability */
  private kept = new Map<number, { id: number; p: number }>();

  private keep(slot: number, row: number): void {
    const V = this.model.hp.nVocab;
    this.kept.set(slot, best(this.logits.subarray(row * V, (row + 1) * V), V));
  }

  private forward(tokens: number[], pos: number[], seq: number[], outRows: number[]): void {
    const V = this.model.hp.nVocab;
    if (this.logits.length < outRows.length * V) this.logits = new Float32Array(outRows.length * V);
    const b: Batch = {
      tokens: Int32Array.from(tokens), pos: Int32Array.from(pos), seq: Int32Array.from(seq),
      outRows: Int32Array.from(outRows), logits: this.logits.subarray(0, outRows.length * V),
    };
    this.model.backend.forward(b);
  }

  close(): void {
    this.model.close();
  }
}

/** A row's best token (the lowest id among equal logits) and its softmax probability. */
export function best(row: Float32Array, V: number): { id: number; p: number } {
  let id = 0, m = row[0];
  for (let i = 1; i < V; i++) if (row[i] > m) { m = row[i]; id = i; }
  let z = 0;
  for (let i = 0; i < V; i++) z += Math.exp(row[i] - m);
  return { id, p: 1 / z };
}
