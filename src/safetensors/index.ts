// bloomery safetensors: the module's public surface.
export { SafetensorsError, readSafetensorsHeader, dtypeRefusal, DTYPE_BITS, SERVED_DTYPES, MAX_HEADER, type SafetensorsHeader, type SafetensorsTensor } from "./reader.ts";
export { SafetensorsFolder, isSafetensorsFolder, safetensorsIn, INDEX_FILE } from "./folder.ts";
