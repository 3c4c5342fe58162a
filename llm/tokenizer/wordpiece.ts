// A WordPiece tokenizer from a Hugging Face tokenizer.json (BERT and its kin): the BertNormalizer (clean text,
// space around CJK ideographs, strip accents, lowercase), the BertPreTokenizer (split on whitespace, each
// punctuation character a word of its own) and greedy longest-match-first WordPiece with the "##" continuation
// prefix; a word with no match, or longer than max_input_chars_per_word, is the unknown token. Added tokens
// ("[CLS]", "[MASK]", ...) are matched in the raw text first, as the tokenizers library does.
// encode() returns the bare pieces: [CLS]/[SEP] and token types come from the post-processor (template.ts).
import { TokenizerError } from "../errors.ts";
import type { DecodeOptions, EncodeOptions, StreamDecoder, Tokenizer } from "./types.ts";
import { TokenType } from "./types.ts";
import type { HFTokenizerJson } from "./hf.ts";

// deno-lint-ignore no-explicit-any
type Json = any;

interface Normalizer {
  clean: boolean;
  chinese: boolean;
  stripAccents: boolean;
  lowercase: boolean;
}

const CJK: [number, number][] = [
  [0x4e00, 0x9fff], [0x3400, 0x4dbf], [0x20000, 0x2a6df], [0x2a700, 0x2b73f], [0x2b740, 0x2b81f], [0x2b920, 0x2ceaf],
  [0xf900, 0xfaff], [0x2f800, 0x2fa1f],
];
const isCJK = (cp: number) => CJK.some(([a, b]) => cp >= a && cp <= b);
const WHITESPACE = /[\t\n\r\p{White_Space}]/u;
const CONTROL = /\p{C}/u;
// The tokenizers library's is_bert_punc: ASCII punctuation (symbols such as $ + < = > ^ ` | ~ included) or
// any Unicode punctuation category.
const PUNCT = /[\p{P}!-\/:-@\[-`{-~]/u;

function normalizerOf(node: Json): Normalizer {
  const nodes: Json[] = node == null ? [] : node.type === "Sequence" ? node.normalizers : [node];
  const n: Normalizer = { clean: false, chinese: false, stripAccents: false, lowercase: false };
  for (const x of nodes) {
    if (x.type === "BertNormalizer") {
      n.clean = x.clean_text ?? true;
      n.chinese = x.handle_chinese_chars ?? true;
      n.lowercase = x.lowercase ?? true;
      n.stripAccents = x.strip_accents ?? n.lowercase;
    } else if (x.type === "Lowercase") n.lowercase = true;
    else if (x.type === "StripAccents") n.stripAccents = true;
    else if (x.type !== "NFD") throw new TokenizerError(`tokenizer.json: normalizer '${x.type}' is not supported with WordPiece`);
  }
  return n;
}

function normalize(text: string, n: Normalizer): string {
  let out = "";
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (n.clean) {
      if (cp === 0 || cp === 0xfffd) continue;
      if (WHITESPACE.test(ch)) {
        out += " ";
        continue;
      }
      if (CONTROL.test(ch)) continue;
    }
    out += n.chinese && isCJK(cp) ? ` ${ch} ` : ch;
  }
  if (n.stripAccents) out = out.normalize("NFD").replace(/\p{Mn}/gu, "");
  return n.lowercase ? out.toLowerCase() : out;
}

/** Whitespace-separated words, each punctuation character a word of its own. */
function preTokenize(text: string): string[] {
  const words: string[] = [];
  let cur = "";
  for (const ch of text) {
    if (WHITESPACE.test(ch)) {
      if (cur) words.push(cur);
      cur = "";
    } else if (PUNCT.test(ch)) {
      if (cur) words.push(cur);
      words.push(ch);
      cur = "";
    } else cur += ch;
  }
  if (cur) words.push(cur);
  return words;
}

/** Whether a tokenizer.json uses the WordPiece model. */
export function isWordPiece(json: HFTokenizerJson): boolean {
  return json.model?.type === "WordPiece";
}

/** A WordPiece tokenizer from a parsed tokenizer.json. */
export function wordPieceFromHF(tj: HFTokenizerJson & { model: { max_input_chars_per_word?: number } }): Tokenizer {
  const m = tj.model;
  if (m.type !== "WordPiece") throw new TokenizerError(`tokenizer.json: model type '${m.type}' is not WordPiece`);
  const pre = tj.pre_tokenizer as Json;
  const preTypes = pre == null ? [] : pre.type === "Sequence" ? pre.pretokenizers.map((p: Json) => p.type) : [pre.type];
  if (preTypes.some((t: string) => t !== "BertPreTokenizer" && t !== "Whitespace" && t !== "WhitespaceSplit")) {
    throw new TokenizerError(`tokenizer.json: pre-tokenizer ${preTypes.join("+")} is not supported with WordPiece (BertPreTokenizer is)`);
  }
  return new WordPiece(tj, normalizerOf(tj.normalizer), m.continuing_subword_prefix ?? "##", m.max_input_chars_per_word ?? 100);
}

class WordPiece implements Tokenizer {
  readonly model = "wordpiece" as const;
  readonly vocabSize: number;
  readonly bos: number | undefined;
  readonly eos: number | undefined;
  readonly unk: number | undefined;
  readonly pad: number | undefined;
  readonly eog: ReadonlySet<number> = new Set();
  readonly addBos = false;
  readonly addEos = false;
  readonly specialTokens: ReadonlyMap<string, number>;
  readonly #tokens: string[];
  readonly #types: Uint8Array;
  readonly #ids = new Map<string, number>();
  /** Added tokens by content, longest first (matched in the raw text). */
  readonly #added: [string, number][];
  readonly #norm: Normalizer;
  readonly #prefix: string;
  readonly #maxChars: number;
  readonly #cache = new Map<string, number[]>();

  constructor(tj: HFTokenizerJson, norm: Normalizer, prefix: string, maxChars: number) {
    let size = 0;
    for (const id of Object.values(tj.model.vocab)) size = Math.max(size, id + 1);
    for (const a of tj.added_tokens ?? []) size = Math.max(size, a.id + 1);
    this.vocabSize = size;
    this.#tokens = new Array<string>(size).fill("");
    this.#types = new Uint8Array(size).fill(TokenType.unused);
    for (const [t, id] of Object.entries(tj.model.vocab)) {
      this.#tokens[id] = t;
      this.#types[id] = TokenType.normal;
    }
    const special = new Map<string, number>();
    for (const a of tj.added_tokens ?? []) {
      this.#tokens[a.id] = a.content;
      this.#types[a.id] = a.special ? TokenType.control : TokenType.userDefined;
      special.set(a.content, a.id);
    }
    this.#tokens.forEach((t, i) => t !== "" && !this.#ids.has(t) && this.#ids.set(t, i));
    this.#added = [...special].sort((a, b) => b[0].length - a[0].length);
    this.unk = tj.model.unk_token == null ? undefined : this.#ids.get(tj.model.unk_token);
    if (this.unk !== undefined) {
      this.#types[this.unk] = TokenType.unknown;
      special.set(this.#tokens[this.unk], this.unk);
    }
    this.specialTokens = special;
    this.bos = this.#ids.get("[CLS]") ?? this.#ids.get("<s>");
    this.eos = this.#ids.get("[SEP]") ?? this.#ids.get("</s>");
    this.pad = this.#ids.get("[PAD]") ?? this.#ids.get("<pad>");
    this.#norm = norm;
    this.#prefix = prefix;
    this.#maxChars = maxChars;
  }

  encode(text: string, _opts: EncodeOptions = {}): number[] {
    if (typeof text !== "string") throw new TokenizerError(`encode needs a string, got ${typeof text}`);
    const out: number[] = [];
    let rest = text;
    while (rest.length > 0) {
      let at = -1, hit: [string, number] | undefined;
      for (const a of this.#added) {
        const i = rest.indexOf(a[0]);
        if (i >= 0 && (at < 0 || i < at)) [at, hit] = [i, a];
      }
      const plain = at < 0 ? rest : rest.slice(0, at);
      for (const w of preTokenize(normalize(plain, this.#norm))) out.push(...this.#word(w));
      if (at < 0) break;
      out.push(hit![1]);
      rest = rest.slice(at + hit![0].length);
    }
    return out;
  }

  /** Greedy longest-match-first pieces of one word (the unknown token for the whole word when none fits). */
  #word(word: string): number[] {
    const cached = this.#cache.get(word);
    if (cached) return cached;
    const chars = Array.from(word);
    const unk = this.unk === undefined ? [] : [this.unk];
    let out: number[] = [];
    if (chars.length > this.#maxChars) out = unk;
    else {
      for (let start = 0; start < chars.length;) {
        let end = chars.length, id: number | undefined;
        for (; end > start; end--) {
          const piece = (start > 0 ? this.#prefix : "") + chars.slice(start, end).join("");
          id = this.#ids.get(piece);
          if (id !== undefined && this.#types[id] === TokenType.normal) break;
          id = undefined;
        }
        if (id === undefined) {
          out = unk;
          break;
        }
        out.push(id);
        start = end;
      }
    }
    if (this.#cache.size < 100_000) this.#cache.set(word, out);
    return out;
  }

  #piece(id: number, first: boolean, special: boolean): string {
    const t = this.#tokens[id];
    if (t === undefined) throw new TokenizerError(`token id ${id} is outside the vocabulary of ${this.vocabSize}`);
    if (this.#types[id] !== TokenType.normal && this.#types[id] !== TokenType.userDefined && !special) return "";
    if (t.startsWith(this.#prefix) && this.#types[id] === TokenType.normal) return t.slice(this.#prefix.length);
    return first ? t : " " + t;
  }

  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    let s = "";
    for (let i = 0; i < ids.length; i++) s += this.#piece(ids[i], s === "", opts.special ?? false);
    // The WordPiece decoder's cleanup: no space before punctuation and inside English contractions.
    return s.replace(/ ([.?!,]|'s|'m|'ve|'re|n't)/g, "$1").replace(/ ' /g, "'");
  }

  decoder(opts: DecodeOptions = {}): StreamDecoder {
    let first = true;
    return {
      push: (id) => {
        const p = this.#piece(id, first, opts.special ?? false);
        if (p) first = false;
        return p;
      },
      flush: () => {
        first = true;
        return "";
      },
    };
  }

  tokenText(id: number): string {
    return this.#tokens[id] ?? "";
  }
  tokenType(id: number): TokenType {
    return (this.#types[id] ?? TokenType.undefined) as TokenType;
  }
  tokenBytes(id: number, special = false): Uint8Array {
    return new TextEncoder().encode(this.#piece(id, true, special));
  }
  tokenId(text: string): number | undefined {
    return this.#ids.get(text);
  }
  isEog(_id: number): boolean {
    return false;
  }
}
