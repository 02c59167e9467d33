// bloomery GGUF: ggml tensor types and GGUF metadata value types (ids and block sizes as
// ../shared/SPEC.md and ggml define them). The native library's table must agree (tested).

export enum GgmlType {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
  /** bloomery's own (ffi/cpu/quants_fp.c): checkpoint folders' weights repacked at load, never in a GGUF file */
  FP8 = 64, NVFP4_MO = 65, MLX4 = 66, MLX8 = 67,
}

export interface TypeInfo {
  name: string;
  blockElems: number;
  blockBytes: number;
}

/** Every ggml type a GGUF may name, with its block geometry (for size validation). */
export const TYPE_INFO: Readonly<Record<number, TypeInfo>> = {
  [GgmlType.F32]: { name: "F32", blockElems: 1, blockBytes: 4 },
  [GgmlType.F16]: { name: "F16", blockElems: 1, blockBytes: 2 },
  [GgmlType.Q4_0]: { name: "Q4_0", blockElems: 32, blockBytes: 18 },
  [GgmlType.Q4_1]: { name: "Q4_1", blockElems: 32, blockBytes: 20 },
  [GgmlType.Q5_0]: { name: "Q5_0", blockElems: 32, blockBytes: 22 },
  [GgmlType.Q5_1]: { name: "Q5_1", blockElems: 32, blockBytes: 24 },
  [GgmlType.Q8_0]: { name: "Q8_0", blockElems: 32, blockBytes: 34 },
  [GgmlType.Q8_1]: { name: "Q8_1", blockElems: 32, blockBytes: 36 },
  [GgmlType.Q2_K]: { name: "Q2_K", blockElems: 256, blockBytes: 84 },
  [GgmlType.Q3_K]: { name: "Q3_K", blockElems: 256, blockBytes: 110 },
  [GgmlType.Q4_K]: { name: "Q4_K", blockElems: 256, blockBytes: 144 },
  [GgmlType.Q5_K]: { name: "Q5_K", blockElems: 256, blockBytes: 176 },
  [GgmlType.Q6_K]: { name: "Q6_K", blockElems: 256, blockBytes: 210 },
  [GgmlType.Q8_K]: { name: "Q8_K", blockElems: 256, blockBytes: 292 },
  [GgmlType.IQ2_XXS]: { name: "IQ2_XXS", blockElems: 256, blockBytes: 66 },
  [GgmlType.IQ2_XS]: { name: "IQ2_XS", blockElems: 256, blockBytes: 74 },
  [GgmlType.IQ3_XXS]: { name: "IQ3_XXS", blockElems: 256, blockBytes: 98 },
  [GgmlType.IQ1_S]: { name: "IQ1_S", blockElems: 256, blockBytes: 50 },
  [GgmlType.IQ4_NL]: { name: "IQ4_NL", blockElems: 32, blockBytes: 18 },
  [GgmlType.IQ3_S]: { name: "IQ3_S", blockElems: 256, blockBytes: 110 },
  [GgmlType.IQ2_S]: { name: "IQ2_S", blockElems: 256, blockBytes: 82 },
  [GgmlType.IQ4_XS]: { name: "IQ4_XS", blockElems: 256, blockBytes: 136 },
  [GgmlType.I8]: { name: "I8", blockElems: 1, blockBytes: 1 },
  [GgmlType.I16]: { name: "I16", blockElems: 1, blockBytes: 2 },
  [GgmlType.I32]: { name: "I32", blockElems: 1, blockBytes: 4 },
  [GgmlType.I64]: { name: "I64", blockElems: 1, blockBytes: 8 },
  [GgmlType.F64]: { name: "F64", blockElems: 1, blockBytes: 8 },
  [GgmlType.IQ1_M]: { name: "IQ1_M", blockElems: 256, blockBytes: 56 },
  [GgmlType.BF16]: { name: "BF16", blockElems: 1, blockBytes: 2 },
  [GgmlType.TQ1_0]: { name: "TQ1_0", blockElems: 256, blockBytes: 54 },
  [GgmlType.TQ2_0]: { name: "TQ2_0", blockElems: 256, blockBytes: 66 },
  [GgmlType.MXFP4]: { name: "MXFP4", blockElems: 32, blockBytes: 17 },
  [GgmlType.FP8]: { name: "FP8_E4M3", blockElems: 32, blockBytes: 36 },
  [GgmlType.NVFP4_MO]: { name: "NVFP4_MO", blockElems: 64, blockBytes: 40 },
  [GgmlType.MLX4]: { name: "MLX_Q4", blockElems: 64, blockBytes: 40 },
  [GgmlType.MLX8]: { name: "MLX_Q8", blockElems: 64, blockBytes: 72 },
};

/** bloomery's own types: made at load from a checkpoint folder, refused in a GGUF file. */
export const FOLDER_ONLY_TYPES: ReadonlySet<number> = new Set([GgmlType.FP8, GgmlType.NVFP4_MO, GgmlType.MLX4, GgmlType.MLX8]);

/** How each of bloomery's own types is named to a user (refusals). */
export const FOLDER_TYPE_WORDS: Readonly<Record<number, string>> = {
  [GgmlType.FP8]: "FP8 block-scaled", [GgmlType.NVFP4_MO]: "NVFP4 (ModelOpt)", [GgmlType.MLX4]: "MLX affine 4-bit", [GgmlType.MLX8]: "MLX affine 8-bit",
};

export function typeName(t: number): string {
  return TYPE_INFO[t]?.name ?? `type ${t}`;
}

export function typeByName(name: string): GgmlType | undefined {
  const up = name.toUpperCase();
  for (const [id, info] of Object.entries(TYPE_INFO)) if (info.name === up) return Number(id) as GgmlType;
  return undefined;
}

/** GGUF metadata value types. */
export enum GgufValueType {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
}

export const VALUE_TYPE_NAMES: Readonly<Record<number, string>> = {
  0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32", 7: "bool",
  8: "string", 9: "array", 10: "u64", 11: "i64", 12: "f64",
};

/** Fixed byte size of a scalar value type (strings and arrays are variable: 0). */
export const VALUE_TYPE_SIZE: Readonly<Record<number, number>> = {
  0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8,
};

/** `general.file_type` names (llama_ftype) for display. */
export const FILE_TYPE_NAMES: Readonly<Record<number, string>> = {
  0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
  10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
  14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium",
  18: "Q6_K", 25: "IQ4_NL", 30: "IQ4_XS", 32: "BF16", 38: "MXFP4 MoE",
};
