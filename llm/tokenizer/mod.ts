// Tokenizers: build one from GGUF metadata, a tokenizer.json, or a plain TokenizerSpec.
export type { DecodeOptions, EncodeOptions, StreamDecoder, Tokenizer, TokenizerSpec } from "./types.ts";
export { TokenType } from "./types.ts";
export { createTokenizer } from "./tokenizer.ts";
export { tokenizerFromGGUF, tokenizerSpecFromGGUF } from "./gguf.ts";
export { type HFTokenizerConfig, type HFTokenizerJson, tokenizerFromHF, tokenizerSpecFromHF } from "./hf.ts";
export { PRE_TOKENIZER_NAMES, preTokenizerByName } from "./pretokenize.ts";
