// A tokenizer from a Hugging Face tokenizer.json with a BPE model: byte-level (GPT-2, Llama 3, Qwen2: a
// ByteLevel pre-tokenizer, with or without a Split regex) or SentencePiece-style (Llama 2, Mistral: U+2581 by
// a Prepend/Replace normalizer or a Metaspace pre-tokenizer, byte_fallback). Options from
// tokenizer_config.json (add_bos_token, bos_token, ...) may be passed alongside.
import { TokenizerError } from "../errors.ts";
import { createTokenizer } from "./tokenizer.ts";
import type { Tokenizer, TokenizerSpec } from "./types.ts";
import { TokenType } from "./types.ts";

const GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const SPACE_MARK = "\u2581";

interface HFAddedToken {
  id: number;
  content: string;
  special?: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
}

// deno-lint-ignore no-explicit-any
type Json = any;

/** The parts of tokenizer.json this builder reads. */
export interface HFTokenizerJson {
  added_tokens?: HFAddedToken[];
  normalizer?: Json;
  pre_tokenizer?: Json;
  post_processor?: Json;
  decoder?: Json;
  model: {
    type?: string;
    vocab: Record<string, number>;
    merges?: (string | [string, string])[];
    unk_token?: string | null;
    byte_fallback?: boolean;
    ignore_merges?: boolean;
    continuing_subword_prefix?: string | null;
    end_of_word_suffix?: string | null;
  };
}

/** The parts of tokenizer_config.json this builder reads. */
export interface HFTokenizerConfig {
  add_bos_token?: boolean;
  add_eos_token?: boolean;
  bos_token?: string | { content: string } | null;
  eos_token?: string | { content: string } | null;
  pad_token?: string | { content: string } | null;
  unk_token?: string | { content: string } | null;
}

function list(node: Json, kind: string): Json[] {
  if (node == null) return [];
  if (node.type === "Sequence") return (node[kind] ?? []).flatMap((n: Json) => list(n, kind));
  return [node];
}

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** The plain-data description of a tokenizer.json (with optional tokenizer_config.json). */
export function tokenizerSpecFromHF(json: string | HFTokenizerJson, config: HFTokenizerConfig = {}): TokenizerSpec {
  const tj: HFTokenizerJson = typeof json === "string" ? JSON.parse(json) : json;
  const m = tj.model;
  if (m === undefined || (m.type !== undefined && m.type !== "BPE")) {
    throw new TokenizerError(`tokenizer.json: model type '${m?.type}' is not supported (BPE only)`);
  }
  if (m.continuing_subword_prefix || m.end_of_word_suffix) {
    throw new TokenizerError("tokenizer.json: BPE with continuing_subword_prefix / end_of_word_suffix is not supported");
  }

  // Tokens by id: the model vocabulary plus added tokens; holes become unused placeholders.
  let size = 0;
  for (const id of Object.values(m.vocab)) size = Math.max(size, id + 1);
  const added = tj.added_tokens ?? [];
  for (const a of added) size = Math.max(size, a.id + 1);
  const tokens = new Array<string>(size).fill("");
  const types = new Uint8Array(size).fill(TokenType.unused);
  for (const [t, id] of Object.entries(m.vocab)) {
    tokens[id] = t;
    types[id] = TokenType.normal;
  }
  for (let i = 0; i < size; i++) if (tokens[i] === "") tokens[i] = `[UNUSED_${i}]`;
  const strip = new Map<number, { lstrip?: boolean; rstrip?: boolean }>();
  for (const a of added) {
    tokens[a.id] = a.content;
    types[a.id] = a.special ? TokenType.control : TokenType.userDefined;
    if (a.lstrip || a.rstrip) strip.set(a.id, { lstrip: a.lstrip, rstrip: a.rstrip });
  }
  const idOf = new Map<string, number>();
  tokens.forEach((t, i) => idOf.has(t) || idOf.set(t, i));
  const tokenName = (v: string | { content: string } | null | undefined) => (v == null ? undefined : typeof v === "string" ? v : v.content);
  const lookup = (v: string | { content: string } | null | undefined) => {
    const name = tokenName(v);
    return name === undefined ? undefined : idOf.get(name);
  };
  const unk = lookup(m.unk_token ?? config.unk_token);
  if (unk !== undefined) types[unk] = TokenType.unknown;
  if (m.byte_fallback) {
    for (let i = 0; i < size; i++) if (/^<0x[0-9A-F]{2}>$/.test(tokens[i]) && types[i] === TokenType.normal) types[i] = TokenType.byte;
  }

  // Normalizer: U+2581 escaping (Replace " " → "▁", Prepend "▁"), NFC-style forms, Lowercase.
  let escape = false;
  let prepend = false;
  let normalize: TokenizerSpec["normalize"];
  let lowercase = false;
  for (const n of list(tj.normalizer, "normalizers")) {
    if (n.type === "Replace" && n.pattern?.String === " " && n.content === SPACE_MARK) escape = true;
    else if (n.type === "Prepend" && n.prepend === SPACE_MARK) prepend = true;
    else if (n.type === "NFC" || n.type === "NFD" || n.type === "NFKC" || n.type === "NFKD") normalize = n.type;
    else if (n.type === "Lowercase") lowercase = true;
    else throw new TokenizerError(`tokenizer.json: normalizer '${n.type}' is not supported`);
  }

  // Pre-tokenizer: regex splits, ByteLevel, Digits, Metaspace.
  let byteLevel = false;
  let spacePrefix: TokenizerSpec["spacePrefix"] = prepend ? "always" : "never";
  let prefixIfMissing = false; // Prepend (legacy Llama) always prepends; Metaspace and ByteLevel only when missing
  const pre: string[] = [];
  for (const p of list(tj.pre_tokenizer, "pretokenizers")) {
    switch (p.type) {
      case "ByteLevel":
        byteLevel = true;
        if (p.use_regex ?? true) pre.push(GPT2_REGEX);
        if (p.add_prefix_space) spacePrefix = "first", prefixIfMissing = true;
        break;
      case "Split": {
        if (p.invert) throw new TokenizerError("tokenizer.json: inverted Split pre-tokenizer is not supported");
        if (p.behavior !== "Isolated") throw new TokenizerError(`tokenizer.json: Split behavior '${p.behavior}' is not supported`);
        const src = p.pattern?.Regex ?? (p.pattern?.String !== undefined ? escapeRegex(p.pattern.String) : undefined);
        if (src === undefined) throw new TokenizerError("tokenizer.json: Split pre-tokenizer without a pattern");
        pre.push(src);
        break;
      }
      case "Digits":
        pre.push(p.individual_digits ? "\\p{N}" : "\\p{N}+");
        break;
      case "Metaspace": {
        if ((p.replacement ?? SPACE_MARK) !== SPACE_MARK) throw new TokenizerError("tokenizer.json: Metaspace replacement other than U+2581");
        escape = true;
        const scheme = p.prepend_scheme ?? (p.add_prefix_space === false ? "never" : "always");
        spacePrefix = scheme === "first" ? "first" : scheme === "never" ? "never" : "always";
        prefixIfMissing = true;
        if (p.split ?? true) pre.push(`${SPACE_MARK}[^${SPACE_MARK}]*|[^${SPACE_MARK}]+`);
        break;
      }
      default:
        throw new TokenizerError(`tokenizer.json: pre-tokenizer '${p.type}' is not supported`);
    }
  }
  if (!byteLevel && list(tj.decoder, "decoders").some((d) => d.type === "ByteLevel")) byteLevel = true;

  // BOS/EOS: tokenizer_config.json first, then the post-processor's template.
  let addBos = config.add_bos_token;
  let addEos = config.add_eos_token;
  let bos = lookup(config.bos_token);
  let eos = lookup(config.eos_token);
  const pp = list(tj.post_processor, "processors").find((p) => p.type === "TemplateProcessing");
  if (pp !== undefined && Array.isArray(pp.single)) {
    const seq = pp.single.findIndex((x: Json) => x.Sequence !== undefined);
    const before = pp.single.slice(0, seq).filter((x: Json) => x.SpecialToken);
    const after = pp.single.slice(seq + 1).filter((x: Json) => x.SpecialToken);
    const tid = (x: Json) => idOf.get(x.SpecialToken.id);
    if (before.length) {
      bos ??= tid(before[0]);
      addBos ??= true;
    }
    if (after.length) {
      eos ??= tid(after[after.length - 1]);
      addEos ??= true;
    }
  }
  if (eos === undefined && byteLevel) eos = idOf.get("<|endoftext|>");

  return {
    model: "bpe",
    tokens,
    types,
    merges: m.merges ?? [],
    bos,
    eos,
    unk,
    pad: lookup(config.pad_token),
    addBos: addBos ?? false,
    addEos: addEos ?? false,
    spacePrefix,
    spacePrefixIfMissing: prefixIfMissing,
    escapeWhitespace: escape,
    byteLevel,
    byteFallback: m.byte_fallback ?? false,
    pre,
    ignoreMerges: m.ignore_merges ?? false,
    strip,
    normalize,
    lowercase,
  };
}

/** Builds a tokenizer from tokenizer.json text or its parsed object (and tokenizer_config.json, if any). */
export function tokenizerFromHF(json: string | HFTokenizerJson, config?: HFTokenizerConfig): Tokenizer {
  return createTokenizer(tokenizerSpecFromHF(json, config));
}
