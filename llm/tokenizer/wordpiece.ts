// A WordPiece tokenizer from a Hugging Face tokenizer.json (BERT and its kin): the BertNormalizer (clean text,
// space around CJK ideographs, strip accents, lowercase), the BertPreTokenizer (split on whitespace, each
// punctuation character a word of its own) and greedy longest-match-first WordPiece with the "##" continuation
// prefix; a word with no match, or longer than max_input_chars_per_word, is the unknown token. Added tokens
// ("[CLS]", "[MASK]", ...) are matched in the raw text first, as the tokenizers library does.
// encode() returns the bare pieces: [CLS]/[SEP] and token types come from the post-processor (template.ts).
import { TokenizerError } from "../errors.ts";
import type { DecodeOptions, Tokenizer } from "./types.ts";
import { TokenType } from "./types.ts";
import { PieceTokenizer } from "./pieces.ts";
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

class WordPiece extends PieceTokenizer {
  readonly model = "wordpiece" as const;
  readonly #norm: Normalizer;
  readonly #prefix: string;
  readonly #maxChars: number;
  readonly #cache = new Map<string, number[]>();

  constructor(tj: HFTokenizerJson, norm: Normalizer, prefix: string, maxChars: number) {
    super(tj, Object.entries(tj.model.vocab), tj.model.unk_token ?? undefined);
    this.#norm = norm;
    this.#prefix = prefix;
    this.#maxChars = maxChars;
  }

  protected encodeText(text: string, out: number[]): void {
    for (const w of preTokenize(normalize(text, this.#norm))) out.push(...this.#word(w));
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
          id = this.idOf(piece);
          if (id !== undefined && this.tokenType(id) === TokenType.normal) break;
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

  protected piece(id: number, first: boolean, special: boolean): string {
    const t = this.tokenText(id), type = this.tokenType(id);
    if (type !== TokenType.normal && type !== TokenType.userDefined && !special) return "";
    if (t.startsWith(this.#prefix) && type === TokenType.normal) return t.slice(this.#prefix.length);
    return first ? t : " " + t;
  }

  override decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    // The WordPiece decoder's cleanup: no space before punctuation and inside English contractions.
    return super.decode(ids, opts).replace(/ ([.?!,]|'s|'m|'ve|'re|n't)/g, "$1").replace(/ ' /g, "'");
  }
}
