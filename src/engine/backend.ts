// bloomery engine: the interface every backend (CPU, CUDA, Metal) gives the engine: one
// batched forward pass over all busy slots, and the slot KV operations the scheduler needs.

/** One forward pass: tokens with their positions and slots; logits wanted for outRows. */
import type { HostExpertStats } from "./cuda-backend.ts";

export interface Batch {
  tokens: Int32Array;
  pos: Int32Array;
  seq: Int32Array;
  /** indices into the batch whose logits are wanted */
  outRows: Int32Array;
  /** outRows.length * nVocab floats, written by forward */
  logits: Float32Array;
  /** a program with an MTP input op (draft-mtp's drafter): tokens.length * nEmbd floats, each row's hidden state in */
  hiddenIn?: Float32Array;
  /** tokens.length * nEmbd floats: every row's normalised final state (the rows the output head reads); Backend.hiddenRows */
  hiddenOut?: Float32Array;
}

export interface Backend {
  readonly name: string;
  /** largest batch one forward takes */
  readonly maxTokens: number;
  readonly nSlots: number;
  readonly nCtxSlot: number;
  forward(b: Batch): void;
  /** whether forward takes Batch.hiddenIn and writes Batch.hiddenOut (absent: it refuses a batch that has them) */
  readonly hiddenRows?: boolean;
  /**
   * Optional: a forward that returns each output row's k best logits (value desc, id asc) into
   * ids and vals (outRows.length * k entries) instead of the rows; k in 1..64.
   */
  forwardTopK?(b: Batch, k: number, ids: Int32Array, vals: Float32Array): void;
  /** bytes of KV per position (all layers) */
  kvPosBytes(): number;
  kvSave(slot: number, n: number, dst: Uint8Array): void;
  kvLoad(slot: number, n: number, src: Uint8Array): void;
  kvCopy(src: number, dst: number, n: number): void;
  /**
   * A slot's first n positions saved in the backend's own memory (the card), or undefined when
   * it has no such memory or no room for them; the prompt cache then keeps them in host RAM.
   */
  kvStash?(slot: number, n: number): SavedKv | undefined;
  /**
   * A slot's recurrent state (the gated delta-net layers'): its bytes (0 or absent: the model has none), saved
   * and loaded whole; it is the state after the last token the slot took (a position 0 token starts it anew).
   */
  rsBytes?(): number;
  rsSave?(slot: number, dst: Uint8Array): void;
  rsLoad?(slot: number, src: Uint8Array): void;
  /**
   * A snapshot of a slot's recurrent state kept in the backend's own memory (speculative decoding: taken
   * before a pass that verifies a draft, put back where the target rejected part of it). rsSnapReserve
   * makes room for every slot's once, at load; absent: speculation is refused for a recurrent model.
   */
  rsSnapReserve?(): void;
  rsSnapTake?(slot: number): void;
  rsSnapBack?(slot: number): void;
  /** what the routed experts kept in host RAM beside a card did (undefined: none are) */
  hostStats?(): HostExpertStats | undefined;
  /**
   * Optional: the routers' picks since load, cumulative: for each MoE layer (program order) and
   * each of its experts, the (token, pick) pairs that chose it, layer-major - element
   * [i * E + e] for the i-th MoE layer's expert e, E the largest expert count a MoE layer (a
   * smaller layer's tail stays 0). Undefined: this backend does not count them (yet); the
   * placement view says so.
   */
  expertPicks?(): Float64Array | undefined;
  close(): void;
}

/** A saved KV state (the prompt cache's entries); any prefix of it restores (the saved layout is position-major). */
export interface SavedKv {
  readonly bytes: number;
  readonly where: "card" | "host";
  /** its first n positions into a slot (with a recurrent model, n one of its checkpoints: restorable(n) === n) */
  restore(slot: number, n: number): void;
  /**
   * A recurrent model's state restores only where a checkpoint of the recurrent state was kept: the
   * longest such prefix of at most n tokens (0: none). Absent: every prefix restores.
   */
  restorable?(n: number): number;
  free(): void;
}
