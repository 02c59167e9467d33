// bloomery: lays out the ABI's structs (ffi/bloomery.h) in memory for bun:ffi. Every struct is
// made of 8-byte slots, so a field is a slot index; test/layout.test.ts reads the header and checks
// every struct here against it (names, order, int or float), and ffi/cpu/forward.c asserts the sizes.

export const TENSOR_SLOTS = 8;
export const OP_SLOTS = 4;
export const PROGRAM_SLOTS = 4;
export const BATCH_SLOTS = 9;
export const CTX_PARAM_SLOTS = 15;

/** bl_op_kind (bloomery.h). */
export enum OpKind { Embed = 1, Norm = 2, Attn = 3, Router = 4, Experts = 5, Ffn = 6, Output = 7, Mla = 8, Deltanet = 9, Mtp_in = 10 }

/** A field of a parameter struct: its name and whether the slot holds an int64 or a double. */
export type FieldKind = "i" | "f";

/** The parameter structs by kind, their fields in slot order (bl_rope_params flattened into bl_attn_params and bl_mla_params as rope_*). */
export const PARAM_FIELDS = {
  norm: [["kind", "i"], ["eps", "f"]],
  rope: [["type", "i"], ["n_rot", "i"], ["orig_ctx", "i"], ["base", "f"], ["freq_scale", "f"], ["ext_factor", "f"],
    ["attn_factor", "f"], ["beta_fast", "f"], ["beta_slow", "f"]],
  attn: [["kv_layer", "i"], ["n_head", "i"], ["n_head_kv", "i"], ["head_dim", "i"], ["window", "i"], ["eps", "f"], ["scale", "f"],
    ["rope_type", "i"], ["rope_n_rot", "i"], ["rope_orig_ctx", "i"], ["rope_base", "f"], ["rope_freq_scale", "f"], ["rope_ext_factor", "f"],
    ["rope_attn_factor", "f"], ["rope_beta_fast", "f"], ["rope_beta_slow", "f"], ["gate", "i"]],
  router: [["n_expert", "i"], ["n_used", "i"], ["gating", "i"], ["norm_topk", "i"], ["n_group", "i"], ["n_group_used", "i"], ["scale", "f"]],
  experts: [["n_expert", "i"], ["n_used", "i"], ["act", "i"], ["layer", "i"], ["store", "i"], ["store_layer", "i"], ["host", "i"],
    ["alpha", "f"], ["limit", "f"]],
  ffn: [["act", "i"], ["alpha", "f"], ["limit", "f"]],
  mla: [["kv_layer", "i"], ["n_head", "i"], ["kv_lora", "i"], ["nope", "i"], ["v_dim", "i"], ["eps", "f"], ["scale", "f"],
    ["rope_type", "i"], ["rope_n_rot", "i"], ["rope_orig_ctx", "i"], ["rope_base", "f"], ["rope_freq_scale", "f"], ["rope_ext_factor", "f"],
    ["rope_attn_factor", "f"], ["rope_beta_fast", "f"], ["rope_beta_slow", "f"]],
  deltanet: [["rs_layer", "i"], ["n_k_heads", "i"], ["n_v_heads", "i"], ["head_k", "i"], ["head_v", "i"], ["conv_kernel", "i"],
    ["head_map", "i"], ["eps", "f"]],
} as const satisfies Record<string, readonly (readonly [string, FieldKind])[]>;

/** bl_cuda_options (bloomery.h): the CUDA library's options of a context, in slot order (src/engine/cuda-options.ts fills them). */
export const CUDA_OPTION_FIELDS = [
  ["fast", "i"], ["invariant", "i"], ["graphs", "i"], ["pdl", "i"], ["carveout", "i"], ["prefill_min", "i"], ["mma_pairs", "i"],
  ["mv_batch", "i"], ["moe_batch", "i"], ["a2_long_heads", "i"], ["a2_long_chunk", "i"], ["a2_mma_class", "i"], ["fa2_heads", "i"],
  ["fmv_rpw", "i"], ["expert_bn64", "i"], ["profile", "i"], ["trace_path", "i"], ["host_pin", "i"], ["hybrid_lead", "i"],
  ["hybrid_lead_mb", "i"], ["upload_min", "i"], ["host_share", "i"], ["sparse_upload", "i"], ["card_share", "i"], ["promote_slots", "i"],
  ["mailbox", "i"], ["pull", "i"], ["spin", "i"], ["cpu_tokens", "i"], ["cpu_cap", "f"],
] as const satisfies readonly (readonly [string, FieldKind])[];
export type CudaOptionName = (typeof CUDA_OPTION_FIELDS)[number][0];

/** bl_cpu_options (bloomery.h): the CPU library's options of a context (src/engine/cpu-options.ts fills them). */
export const CPU_OPTION_FIELDS = [["pin", "i"], ["spin_us", "i"], ["profile", "i"]] as const satisfies readonly (readonly [string, FieldKind])[];
export type CpuOptionName = (typeof CPU_OPTION_FIELDS)[number][0];

export type ParamStruct = keyof typeof PARAM_FIELDS;
export type ParamName<S extends ParamStruct> = (typeof PARAM_FIELDS)[S][number][0];

/** The parameter struct of each op kind (EMBED has none). */
export const OP_PARAMS: Record<OpKind, Exclude<ParamStruct, "rope"> | undefined> = {
  [OpKind.Embed]: undefined,
  [OpKind.Norm]: "norm",
  [OpKind.Attn]: "attn",
  [OpKind.Router]: "router",
  [OpKind.Experts]: "experts",
  [OpKind.Ffn]: "ffn",
  [OpKind.Output]: "norm",
  [OpKind.Mla]: "mla",
  [OpKind.Deltanet]: "deltanet",
  [OpKind.Mtp_in]: "norm",
};

/** Tensor roles by kind (bloomery.h BL_*_*), in role order. */
export const OP_ROLES = {
  [OpKind.Embed]: ["tokens"],
  [OpKind.Norm]: ["weight"],
  [OpKind.Attn]: ["q", "k", "v", "o", "q_norm", "k_norm", "bq", "bk", "bv", "bo", "sinks"],
  [OpKind.Router]: ["w", "b", "corr"],
  [OpKind.Experts]: ["gate", "up", "down", "bgate", "bup", "bdown"],
  [OpKind.Ffn]: ["gate", "up", "down", "gate_inp"],
  [OpKind.Output]: ["norm", "head"],
  [OpKind.Mla]: ["q", "q_a", "q_a_norm", "q_b", "kv_a", "kv_a_norm", "k_b", "v_b", "o"],
  [OpKind.Deltanet]: ["qkv", "gate", "beta", "alpha", "ba", "conv", "dt", "a", "norm", "out", "qkvz"],
  [OpKind.Mtp_in]: ["embed", "enorm", "hnorm", "eh_proj"],
} as const satisfies Record<OpKind, readonly string[]>;

export type Role<K extends OpKind> = (typeof OP_ROLES)[K][number];

/** Slot index of a parameter field. */
export function paramSlot(s: ParamStruct, name: string): number {
  const i = PARAM_FIELDS[s].findIndex(([n]) => n === name);
  if (i < 0) throw new Error(`internal: bl_${s}_params has no field '${name}'`);
  return i;
}

export function paramKind(s: ParamStruct, name: string): FieldKind {
  return PARAM_FIELDS[s][paramSlot(s, name)][1];
}

/** bl_rope_type, bl_gating, bl_act, host experts (bloomery.h). */
export enum RopeType { None = -1, Normal = 0, Neox = 2 }
export enum Gating { Softmax = 0, SoftmaxWeight = 1, Sigmoid = 2 }
export enum Act { Swiglu = 0, SwigluOai = 1 }
/** bl_deltanet_params.head_map: a v head's k head (h % n_k_heads, or h / (n_v_heads / n_k_heads)). */
export enum HeadMap { Tiled = 0, Grouped = 1 }
export const HOST_EXPERTS_RAM = 1;
export const HOST_EXPERTS_DISK = 2;

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
