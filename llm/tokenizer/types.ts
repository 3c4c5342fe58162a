// The Tokenizer contract, and the plain-data description every tokenizer is built from (GGUF metadata and
// Hugging Face tokenizer.json both become a TokenizerSpec).

/** Token types as GGUF's tokenizer.ggml.token_type stores them (llama.cpp's LLAMA_TOKEN_TYPE_*). */
export const TokenType = {
  undefined: 0,
  normal: 1,
  unknown: 2,
  control: 3,
  userDefined: 4,
  unused: 5,
  byte: 6,
} as const;
export type TokenType = (typeof TokenType)[keyof typeof TokenType];

export interface EncodeOptions {
  /** Prepend BOS (default: the model's add_bos_token). Ignored when the model has no BOS. */
  addBos?: boolean;
  /** Append EOS (default: the model's add_eos_token). */
  addEos?: boolean;
  /**
   * Map text that spells a control token ("<s>", "<|im_end|>") to that token's id (llama.cpp's parse_special).
   * Default false, as llama.cpp's tokenizer tests and HF encode of plain text. User-defined tokens are always
   * matched, as in llama.cpp.
   */
  parseSpecial?: boolean;
}

export interface DecodeOptions {
  /** Render control/unknown tokens as their text ("<s>") instead of nothing. Default false. */
  special?: boolean;
  /** Control tokens rendered as their text even where `special` is off (a tool-call syntax's markers). */
  shown?: ReadonlySet<number>;
  /**
   * Drop one leading space from the first piece that produces text: the inverse of the dummy-prefix space
   * that SentencePiece-style encoding adds. Default: true when the tokenizer adds that prefix, else false.
   * Pass false when decoding a continuation (tokens generated after a prompt).
   */
  stripLeadingSpace?: boolean;
}

/** Decodes a token stream incrementally: bytes of a UTF-8 character split across tokens are held back. */
export interface StreamDecoder {
  /** Feeds one token; returns the text completed by it (possibly ""). */
  push(id: number): string;
  /** Ends the stream: returns held-back bytes (an incomplete character becomes U+FFFD) and resets. */
  flush(): string;
}

export interface Tokenizer {
  /** "spm": SentencePiece BPE by piece score (llama.cpp "llama"); "bpe": BPE by merge rank ("gpt2", tokenizer.json). */
  readonly model: "spm" | "bpe" | "wordpiece" | "unigram";
  readonly vocabSize: number;
  readonly bos: number | undefined;
  readonly eos: number | undefined;
  readonly unk: number | undefined;
  readonly pad: number | undefined;
  /** End-of-generation ids: eos, eot, eom and known end-of-turn control tokens ("<|eot_id|>", "<|im_end|>", ...). */
  readonly eog: ReadonlySet<number>;
  /** The model's add_bos_token / add_eos_token defaults. */
  readonly addBos: boolean;
  readonly addEos: boolean;
  /** Control, user-defined and unknown tokens by their text. */
  readonly specialTokens: ReadonlyMap<string, number>;

  encode(text: string, opts?: EncodeOptions): number[];
  decode(ids: ArrayLike<number>, opts?: DecodeOptions): string;
  decoder(opts?: DecodeOptions): StreamDecoder;

  /** The token's vocabulary string as stored (with U+2581 or GPT-2's byte-to-unicode characters). */
  tokenText(id: number): string;
  tokenType(id: number): TokenType;
  /** The bytes the token decodes to (control tokens: their text when `special`, else none). */
  tokenBytes(id: number, special?: boolean): Uint8Array;
  /** The id of a vocabulary string, if present. */
  tokenId(text: string): number | undefined;
  isEog(id: number): boolean;
}

/** Everything needed to build a tokenizer. */
export interface TokenizerSpec {
  model: "spm" | "bpe";
  tokens: string[];
  /** SPM: piece scores (higher merges first). */
  scores?: ArrayLike<number>;
  /** Per-token TokenType; default normal. */
  types?: ArrayLike<number>;
  /** BPE: merge rules in rank order, "left right" (split at the first space after the first character) or pairs. */
  merges?: readonly (string | readonly [string, string])[];
  bos?: number;
  eos?: number;
  unk?: number;
  pad?: number;
  eot?: number;
  eom?: number;
  /** More end-of-generation ids (a Hugging Face generation_config.json's eos_token_id list). */
  eog?: readonly number[];
  addBos?: boolean;
  addEos?: boolean;
  /**
   * When to prepend a space (as U+2581 after escaping) to a text fragment: "after-special" (llama.cpp SPM:
   * at the start and after each special token), "first" (only at the start of the text), "always" (every
   * fragment), "never".
   */
  spacePrefix?: "after-special" | "first" | "always" | "never";
  /** Skip that prefix when the fragment already starts with a space (HF Metaspace and ByteLevel add_prefix_space). */
  spacePrefixIfMissing?: boolean;
  /** Replace " " by U+2581 before merging, and U+2581 by " " when decoding (SentencePiece style). */
  escapeWhitespace?: boolean;
  /** GPT-2 byte-level: text bytes are mapped to printable characters before merging. */
  byteLevel?: boolean;
  /** Pieces with no token become <0xXX> byte tokens (otherwise unk). */
  byteFallback?: boolean;
  /** Pre-tokenizer: a name from tokenizer.ggml.pre ("gpt-2", "llama3", "qwen2", ...) or regex sources applied in turn. */
  pre?: string | readonly string[];
  /** A pre-tokenized word that is itself a token is used whole (llama3's ignore_merges). */
  ignoreMerges?: boolean;
  /** Unicode normalization of each text fragment before encoding (tokenizer.json normalizers; GGUF: none). */
  normalize?: "NFC" | "NFD" | "NFKC" | "NFKD";
  /** Lowercase each text fragment before encoding. */
  lowercase?: boolean;
  /** Per-token lstrip/rstrip for special tokens (HF added_tokens). */
  strip?: ReadonlyMap<number, { lstrip?: boolean; rstrip?: boolean }>;
}
