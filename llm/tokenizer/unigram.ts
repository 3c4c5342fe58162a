// A Unigram (SentencePiece) tokenizer from a Hugging Face tokenizer.json, as XLM-RoBERTa ships it: the
// normalizers Nmt, NFKC/NFC, Replace, Lowercase and Precompiled (SentencePiece's nmt_nfkc charsmap, read as
// Nmt + NFKC: the charsmap blob itself is not interpreted, which matches it on ordinary text), the Metaspace
// pre-tokenizer (spaces become U+2581, one is prepended, words split before each), and Viterbi segmentation by
// piece score; a character no piece covers is the unknown token (score: the lowest minus 10, as tokenizers),
// and consecutive unknowns fuse into one.
import { TokenizerError } from "../errors.ts";
import type { HFTokenizerJson } from "./hf.ts";
import { PieceTokenizer } from "./pieces.ts";
import { TokenType } from "./types.ts";

// deno-lint-ignore no-explicit-any
type Json = any;
const MARK = "\u2581";

/** Whether a tokenizer.json uses the Unigram model. */
export function isUnigram(json: HFTokenizerJson): boolean {
  return json.model?.type === "Unigram";
}

// SentencePiece's nmt normalization: drop C0 controls and DEL, space for the odd whitespace.
// deno-lint-ignore no-control-regex
const NMT_DROP = /[\u0001-\u0008\u000B\u000E-\u001F\u007F\u008F\u009F]/g;
// deno-lint-ignore no-control-regex
const NMT_SPACE = /[\u0009\u000A\u000C\u000D\u1680\u200B-\u200F\u2028\u2029\u2581\uFEFF\uFFFD]/g;

function normalizerOf(node: Json): (s: string) => string {
  const nodes: Json[] = node == null ? [] : node.type === "Sequence" ? node.normalizers : [node];
  const steps = nodes.map((n): (s: string) => string => {
    switch (n.type) {
      case "Nmt":
        return (s) => s.replace(NMT_DROP, "").replace(NMT_SPACE, " ");
      case "Precompiled":
        return (s) => s.replace(NMT_DROP, "").replace(NMT_SPACE, " ").normalize("NFKC");
      case "NFKC": case "NFC": case "NFKD": case "NFD":
        return (s) => s.normalize(n.type);
      case "Lowercase":
        return (s) => s.toLowerCase();
      case "Strip":
        return (s) => {
          const l = n.left ?? true ? s.trimStart() : s;
          return n.right ?? true ? l.trimEnd() : l;
        };
      case "Replace": {
        const src = n.pattern?.Regex ?? n.pattern?.String?.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
        if (src === undefined) throw new TokenizerError("tokenizer.json: Replace normalizer without a pattern");
        const re = new RegExp(src, "gu");
        return (s) => s.replace(re, n.content ?? "");
      }
      default:
        throw new TokenizerError(`tokenizer.json: normalizer '${n.type}' is not supported with Unigram`);
    }
  });
  return (s) => steps.reduce((x, f) => f(x), s);
}

/** A Unigram tokenizer from a parsed tokenizer.json. */
export function unigramFromHF(tj: HFTokenizerJson): PieceTokenizer {
  const m = tj.model as Json;
  if (m?.type !== "Unigram") throw new TokenizerError(`tokenizer.json: model type '${m?.type}' is not Unigram`);
  if (m.byte_fallback) throw new TokenizerError("tokenizer.json: Unigram with byte_fallback is not supported");
  const pre = tj.pre_tokenizer as Json;
  const pres: Json[] = pre == null ? [] : pre.type === "Sequence" ? pre.pretokenizers : [pre];
  let prepend: "always" | "first" | "never" = "never";
  for (const p of pres) {
    if (p.type === "Metaspace") {
      if ((p.replacement ?? MARK) !== MARK) throw new TokenizerError(`tokenizer.json: Metaspace replacement '${p.replacement}' is not supported`);
      prepend = p.prepend_scheme ?? (p.add_prefix_space === false ? "never" : "always");
    } else if (p.type !== "WhitespaceSplit") {
      throw new TokenizerError(`tokenizer.json: pre-tokenizer '${p.type}' is not supported with Unigram (Metaspace is)`);
    }
  }
  return new Unigram(tj, normalizerOf(tj.normalizer), prepend);
}

class Unigram extends PieceTokenizer {
  readonly model = "unigram" as const;
  readonly #norm: (s: string) => string;
  readonly #prepend: "always" | "first" | "never";
  readonly #score = new Map<string, number>();
  readonly #maxLen: number;
  readonly #unkScore: number;

  constructor(tj: HFTokenizerJson, norm: (s: string) => string, prepend: "always" | "first" | "never") {
    const vocab = (tj.model as Json).vocab as [string, number][];
    if (!Array.isArray(vocab)) throw new TokenizerError("tokenizer.json: Unigram vocab must be a list of [piece, score]");
    const unkId = (tj.model as Json).unk_id;
    super(tj, vocab.map(([p], i) => [p, i]), typeof unkId === "number" ? vocab[unkId]?.[0] : undefined);
    let min = Infinity, maxLen = 1;
    vocab.forEach(([p, sc], id) => {
      if (this.tokenType(id) !== TokenType.normal) return;
      this.#score.set(p, sc);
      min = Math.min(min, sc);
      maxLen = Math.max(maxLen, Array.from(p).length);
    });
    this.#norm = norm;
    this.#prepend = prepend;
    this.#maxLen = maxLen;
    this.#unkScore = min - 10;
  }

  protected encodeText(text: string, out: number[], first: boolean): void {
    let s = this.#norm(text).replaceAll(" ", MARK);
    if (s === "") return;
    if ((this.#prepend === "always" || (this.#prepend === "first" && first)) && !s.startsWith(MARK)) s = MARK + s;
    // Words: each U+2581 starts a new one.
    for (const w of s.split(new RegExp(`(?=${MARK})`, "u"))) if (w) this.#viterbi(w, out);
  }

  #viterbi(word: string, out: number[]): void {
    const ch = Array.from(word), n = ch.length;
    const best = new Float64Array(n + 1).fill(-Infinity), from = new Int32Array(n + 1), ids = new Int32Array(n + 1).fill(-1);
    best[0] = 0;
    for (let i = 0; i < n; i++) {
      if (best[i] === -Infinity) continue;
      let covered = false;
      let piece = "";
      for (let len = 1; len <= this.#maxLen && i + len <= n; len++) {
        piece += ch[i + len - 1];
        const sc = this.#score.get(piece);
        if (sc === undefined) continue;
        if (len === 1) covered = true;
        if (best[i] + sc > best[i + len]) {
          best[i + len] = best[i] + sc;
          from[i + len] = i;
          ids[i + len] = this.idOf(piece)!;
        }
      }
      if (!covered && best[i] + this.#unkScore > best[i + 1]) {
        best[i + 1] = best[i] + this.#unkScore;
        from[i + 1] = i;
        ids[i + 1] = -2; // unknown
      }
    }
    const rev: number[] = [];
    for (let at = n; at > 0; at = from[at]) rev.push(ids[at]);
    let prevUnk = false;
    for (let k = rev.length - 1; k >= 0; k--) {
      const id = rev[k];
      if (id === -2) {
        if (!prevUnk && this.unk !== undefined) out.push(this.unk);
        prevUnk = true;
      } else {
        out.push(id);
        prevUnk = false;
      }
    }
  }

  protected piece(id: number, first: boolean, special: boolean): string {
    const t = this.tokenText(id), type = this.tokenType(id);
    if (type !== TokenType.normal && type !== TokenType.userDefined && !special) return "";
    const s = t.replaceAll(MARK, " ");
    return first && s.startsWith(" ") ? s.slice(1) : s;
  }
}
