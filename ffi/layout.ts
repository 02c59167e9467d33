// bloomery: lays out the ABI's structs (ffi/bloomery.h) in memory for bun:ffi. Every struct is
// made of 8-byte slots, so a field is a slot index; sizes are asserted in ffi/cpu/forward.c.

export const TENSOR_SLOTS = 8;
export const BLOCK_SLOTS = 120;
export const BLOCK_TENSOR_BASE = 24;
export const BLOCK_TENSORS = 12;
export const PROGRAM_SLOTS = 4;
export const BATCH_SLOTS = 7;
export const CTX_PARAM_SLOTS = 13;

/** Slot indices of bl_block's scalar fields. */
export const BlockSlot = {
  kind: 0, layer: 1, n_head: 2, n_head_kv: 3, head_dim: 4, n_rot: 5, rope_type: 6,
  n_expert: 7, n_expert_used: 8, norm_topk: 9, gating: 10, yarn_orig_ctx: 11,
  eps: 12, rope_base: 13, rope_freq_scale: 14, attn_scale: 15,
  yarn_ext_factor: 16, yarn_attn_factor: 17, yarn_beta_fast: 18, yarn_beta_slow: 19,
  expert_weights_scale: 20,
  /** MoE blocks: the expert store handle and its layer (src/engine/expert-store.ts) */
  expert_store: 21, expert_layer: 22,
  /** MoE blocks a card runs: 1 = the routed experts stay in host memory, 2 = read from the file through expert_store (cuda/hybrid.cu) */
  host_experts: 23,
} as const;

export type IntField = "kind" | "layer" | "n_head" | "n_head_kv" | "head_dim" | "n_rot" | "rope_type" |
  "n_expert" | "n_expert_used" | "norm_topk" | "gating" | "yarn_orig_ctx";
export type FloatField = "eps" | "rope_base" | "rope_freq_scale" | "attn_scale" | "yarn_ext_factor" |
  "yarn_attn_factor" | "yarn_beta_fast" | "yarn_beta_slow" | "expert_weights_scale";

/** A native tensor reference: address, ggml type, dims and strides. */
export interface NativeTensor {
  data: bigint;
  type: number;
  ne: number[];
  nb1: number;
  nb2: number;
}

/** A slab of 8-byte slots with int and float views over the same memory. */
export class Slots {
  readonly i: BigInt64Array;
  readonly f: Float64Array;
  constructor(n: number) {
    const buf = new ArrayBuffer(n * 8);
    this.i = new BigInt64Array(buf);
    this.f = new Float64Array(buf);
  }
  setInt(slot: number, v: number | bigint): void {
    this.i[slot] = BigInt(v);
  }
  setFloat(slot: number, v: number): void {
    this.f[slot] = v;
  }
  setTensor(slot: number, t: NativeTensor | undefined): void {
    if (!t) {
      for (let k = 0; k < TENSOR_SLOTS; k++) this.i[slot + k] = 0n;
      return;
    }
    this.i[slot] = t.data;
    this.i[slot + 1] = BigInt(t.type);
    for (let d = 0; d < 4; d++) this.i[slot + 2 + d] = BigInt(t.ne[d] ?? 1);
    this.i[slot + 6] = BigInt(t.nb1);
    this.i[slot + 7] = BigInt(t.nb2);
  }
}
