// bloomery models: what a model family file provides to the engine: hyper-parameters, the op list of
// the forward pass, and the shapes `synth` writes for it (the real models' names, sizes and tensors).
import type { GgufFile } from "../gguf/index.ts";
import type { DeltaNetShape, OpSpec } from "./ops.ts";
import type { SynthFamily } from "./synth-types.ts";

/** Hyper-parameters the engine needs to size contexts and caches, common to all families. */
export interface HParams {
  arch: string;
  nVocab: number;
  nEmbd: number;
  nLayer: number;
  nCtxTrain: number;
  nHead: number;
  nHeadKv: number;
  headDim: number;
  /** largest FFN / expert hidden size */
  nFf: number;
  nExpert: number;
  nExpertUsed: number;
  eps: number;
  /** layers that have an attention KV cache, in order */
  kvLayers: number;
  /**
   * per position and layer, the KV cache's V width when it is not the K width (nHeadKv * headDim): 0 for
   * multi-head latent attention, whose values are the latent held in K (deepseek2: nHeadKv 1, headDim
   * kv_lora + rope). Absent: V as wide as K.
   */
  kvVDim?: number;
  /** the widest query / attention-output row when it is not nHead * headDim (MLA: n_head * v) */
  qDim?: number;
  /** layers with a recurrent state (the gated delta-net's), and the floats a slot's state takes in one; absent: none */
  rsLayers?: number;
  rsDim?: number;
  /** the delta-net layers' shape (what their work space is sized by); absent: none */
  deltanet?: DeltaNetShape;
}

/** The K and V widths of a position in one KV cache layer (f16 values). */
export function kvWidths(hp: HParams): { k: number; v: number } {
  const k = hp.nHeadKv * hp.headDim;
  return { k, v: hp.kvVDim ?? k };
}

/** Bytes one position of the KV cache takes over every layer (K and V, f16). */
export function kvBytesPerPos(hp: HParams): number {
  const { k, v } = kvWidths(hp);
  return hp.kvLayers * (k + v) * 2;
}

/** The widest query row (the context's max_q_dim). */
export function qWidth(hp: HParams): number {
  return hp.qDim ?? hp.nHead * hp.headDim;
}

export interface ModelFamily {
  /** `general.architecture` values this family handles */
  archs: string[];
  hparams(f: GgufFile): HParams;
  /** The forward pass as a list of ops; throws a clear error when tensors are missing or misshapen. */
  program(f: GgufFile, hp: HParams): OpSpec[];
  /**
   * The file's MTP layer as a model of its own (speculative decoding's draft-mtp: mtp-draft.ts): its sizes
   * and program (an MTP input op, the layer's block, the head; throws naming why a file has none it runs).
   * Absent: the family has no MTP layer this engine runs. has: whether the file has one.
   */
  mtp?: { has(f: GgufFile): boolean; hparams(f: GgufFile): HParams; program(f: GgufFile, hp: HParams): OpSpec[] };
  /** What the load says once about the file (parts of it it does not run, and why). */
  notes?(f: GgufFile, hp: HParams): string[];
  /** The real models `synth` imitates and how their tensors are written (absent: synth does not know the family). */
  synth?: SynthFamily;
  /** How it reads a Hugging Face safetensors folder (absent: folders of this family are refused). */
  hf?: HfFamily;
}

/** config.json read strictly: a missing or mistyped key is a clear error naming the file and key. */
export interface HfConfig {
  has(key: string): boolean;
  int(key: string, def?: number): number;
  num(key: string, def?: number): number;
  str(key: string, def?: string): string;
  bool(key: string, def?: boolean): boolean;
  /** a nested object (rope_parameters), or undefined when absent */
  obj(key: string): HfConfig | undefined;
  strs(key: string): string[] | undefined;
}

/** Where a family's GGUF metadata keys get their values from config.json. */
export interface HfKvSink {
  u32(key: string, v: number): void;
  f32(key: string, v: number): void;
  str(key: string, v: string): void;
  bool(key: string, v: boolean): void;
  bools(key: string, v: boolean[]): void;
}

/**
 * One GGUF tensor from a Hugging Face one: mapped in place (rows as stored), or derived by a copy at
 * load when the layout differs: `transpose` swaps the last two dimensions (weights stored input-major),
 * `hf` as a list stacks per-expert tensors, `parity` keeps the even (0) or odd (1) entries of the last stored dimension (fused, interleaved
 * gate_up), `f32` widens the values exactly (the norms, biases and router GGUF keeps in F32).
 */
export interface HfTensor {
  name: string;
  /** the HF tensor, or the per-expert tensors stacked (in order) into one [experts, ...] tensor by a copy */
  hf: string | string[];
  /**
   * The same tensor as another writer lays it out, read instead when the folder holds `alt.hf` and not
   * `hf` (mlx-lm's sanitized names: the experts stacked as `switch_mlp`, gpt-oss's gate_up split and
   * output-major, DeepSeek's kv_b_proj as embed_q / unembed_out); its own options, none taken from here.
   */
  alt?: Omit<HfTensor, "name" | "alt">;
  transpose?: boolean;
  /** whether a quantized form of the tensor (gpt-oss's MXFP4 `_blocks`, stored output-major) is transposed; default: as `transpose` */
  quantTranspose?: boolean;
  parity?: 0 | 1;
  f32?: boolean;
  /** the stored tensor read as this shape first (same element count: [heads, rows, cols] of a fused one) */
  view?: number[];
  /** only rows [start, start + count) of the second-to-last dimension (one part of a fused projection) */
  rows?: [number, number];
  /** the rows of the second-to-last dimension in this order (a reordering of heads; instead of rows) */
  gather?: number[];
  /** the entries of the last stored dimension in this order (a vector's, or each row's) */
  gatherLast?: number[];
  /** each value v as v + add (a (1 + weight) norm's weights; with f32) */
  add?: number;
  /** each value v as -exp(v) (a delta-net's decay rate from A_log; with f32) */
  negExp?: boolean;
}

/** How a family reads a Hugging Face checkpoint folder (the same family, its HF names). */
export interface HfFamily {
  /** config.json `architectures[0]` values, and `model_type` values */
  architectures: string[];
  modelTypes: string[];
  config(c: HfConfig, put: HfKvSink): void;
  tensors(c: HfConfig): HfTensor[];
  /** why a folder mlx-lm wrote (safetensors metadata format "mlx", or config.json's `quantization`) is refused; absent: `tensors` (with `alt`) reads it */
  mlxRefusal?: string;
}
