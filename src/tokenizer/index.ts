// Public surface of the tokenizer (src/tokenizer/): build from GGUF metadata, encode, decode, stream.
export { TokenizerError } from "./errors.ts";
export { Tokenizer, type EncodeOptions, type DecodeOptions } from "./tokenizer.ts";
export { StreamDecoder, type StreamDecoderOptions } from "./stream.ts";
export { TokenType, type VocabData } from "./vocab.ts";
export { vocabFromMetadata, type MetadataLookup } from "./metadata.ts";
