// bloomery GGUF: the module's public surface.
export { GgufError } from "./errors.ts";
export { GgufFile, splitPaths } from "./file.ts";
export { readGgufHeader, tensorBytes, type GgufHeader, type GgufKV, type GgufTensorInfo, type GgufValue } from "./reader.ts";
export { GgufWriter, type TensorFiller } from "./writer.ts";
export { GgmlType, GgufValueType, TYPE_INFO, typeName, typeByName, FILE_TYPE_NAMES } from "./types.ts";
