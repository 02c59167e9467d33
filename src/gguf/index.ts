// bloomery GGUF: the module's public surface.
export { GgufError, safeText, type GgufFault } from "./errors.ts";
export { checkModelPath } from "./path.ts";
export { GgufFile, splitPaths } from "./file.ts";
export { readGgufHeader, tensorBytes, type GgufHeader, type GgufKV, type GgufTensorInfo, type GgufValue } from "./reader.ts";
export { GgufWriter, type TensorFiller } from "./writer.ts";
export { GgmlType, GgufValueType, TYPE_INFO, typeName, typeByName, FILE_TYPE_NAMES, FOLDER_ONLY_TYPES, FOLDER_TYPE_WORDS } from "./types.ts";
