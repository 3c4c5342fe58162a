// One tokenizer over a vocabulary, in two merge styles, following llama.cpp (llama-vocab.cpp):
// - "spm": SentencePiece BPE. The whole text fragment (spaces escaped as U+2581) is split into code points;
//   adjacent pairs whose concatenation is a token merge, highest piece score first, leftmost on ties.
//   Leftover pieces that are not tokens become <0xXX> byte tokens.
// - "bpe": BPE by merge rank. The fragment is pre-tokenized into words (regexes), each word spelled in GPT-2's
//   byte-level alphabet (or kept as code points for SentencePiece-style tokenizer.json models), then merged
//   by the lowest rank, leftmost on ties.
// Both use a linked list of symbols and a heap of candidate pairs: O(n log n) per fragment, no rescans.
// Special tokens are split out first (control ones only when parseSpecial is on; user-defined ones always).
import { TokenizerError } from "../errors.ts";
import { BYTE_TO_CHAR, fromByteLevel, toByteLevel } from "./byte-level.ts";
import { MergeHeap } from "./heap.ts";
import { PairTable } from "./pair-table.ts";
import { compilePattern, preTokenize, preTokenizerByName } from "./pretokenize.ts";
import type { DecodeOptions, EncodeOptions, StreamDecoder, Tokenizer, TokenizerSpec } from "./types.ts";
import { TokenType } from "./types.ts";

const SPACE_MARK = "\u2581";
const EMPTY = new Uint8Array(0);
const enc = new TextEncoder();

// Control tokens llama.cpp treats as end of generation whatever the metadata says.
const EOG_TEXTS = new Set([
  "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
  "<EOT>", "_<EOT>", "<|end_of_text|>", "<｜end▁of▁sentence｜>",
]);

interface Special {
  id: number;
  text: string;
  lstrip: boolean;
  rstrip: boolean;
}

/** Builds a tokenizer from its plain-data description. */
export function createTokenizer(spec: TokenizerSpec): Tokenizer {
  return new VocabTokenizer(spec);
}

class VocabTokenizer implements Tokenizer {
  readonly model: "spm" | "bpe";
  readonly vocabSize: number;
  readonly bos: number | undefined;
  readonly eos: number | undefined;
  readonly unk: number | undefined;
  readonly pad: number | undefined;
  readonly eog: ReadonlySet<number>;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly specialTokens: ReadonlyMap<string, number>;

  readonly #tokens: string[];
  readonly #types: Uint8Array;
  readonly #scores: Float32Array;
  readonly #ids = new Map<string, number>();
  readonly #specialAll: Special[] = [];
  readonly #specialUser: Special[] = [];
  readonly #spacePrefix: "after-special" | "first" | "always" | "never";
  readonly #prefixIfMissing: boolean;
  readonly #escape: boolean;
  readonly #byteLevel: boolean;
  readonly #byteFallback: boolean;
  readonly #pre: RegExp[];
  readonly #ignoreMerges: boolean;
  readonly #stripDefault: boolean;
  readonly #normalize: TokenizerSpec["normalize"];
  readonly #lowercase: boolean;
  /** id of the <0xXX> token of each byte, or -1. */
  readonly #byteTok = new Int32Array(256).fill(-1);
  /** BPE: (left id, right id) → merge rank; merged token id by rank (-1 when not a token). */
  #pairs = new PairTable(0);
  #mergeId = new Int32Array(0);
  readonly #pieces: (Uint8Array | undefined)[];
  readonly #heap = new MergeHeap();
  readonly #wordCache = new Map<string, number[]>();
  // Symbol scratch arrays, grown as needed and reused across calls.
  #start = new Int32Array(256);
  #len = new Int32Array(256);
  #prev = new Int32Array(256);
  #next = new Int32Array(256);
  #sid = new Int32Array(256);

  constructor(spec: TokenizerSpec) {
    const n = spec.tokens.length;
    if (n === 0) throw new TokenizerError("tokenizer has an empty vocabulary");
    this.model = spec.model;
    this.vocabSize = n;
    this.#tokens = spec.tokens.map((t, i) => (t === "" ? `[EMPTY_${i}]` : t));
    this.#types = new Uint8Array(n).fill(TokenType.normal);
    if (spec.types) {
      if (spec.types.length < n) throw new TokenizerError(`token types has ${spec.types.length} entries for ${n} tokens`);
      for (let i = 0; i < n; i++) this.#types[i] = spec.types[i];
    }
    this.#scores = new Float32Array(n);
    if (spec.scores) {
      if (spec.scores.length < n) throw new TokenizerError(`token scores has ${spec.scores.length} entries for ${n} tokens`);
      for (let i = 0; i < n; i++) this.#scores[i] = spec.scores[i];
    }
    // The first id wins for a duplicated string, as a map insert would keep it.
    for (let i = 0; i < n; i++) if (!this.#ids.has(this.#tokens[i])) this.#ids.set(this.#tokens[i], i);

    const id = (v: number | undefined) => (v !== undefined && v >= 0 && v < n ? v : undefined);
    this.bos = id(spec.bos);
    this.eos = id(spec.eos);
    this.unk = id(spec.unk);
    this.pad = id(spec.pad);
    this.#byteLevel = spec.byteLevel ?? false;
    this.#escape = spec.escapeWhitespace ?? spec.model === "spm";
    this.#spacePrefix = spec.spacePrefix ?? (spec.model === "spm" ? "after-special" : "never");
    this.#prefixIfMissing = spec.spacePrefixIfMissing ?? false;
    this.#byteFallback = spec.byteFallback ?? spec.model === "spm";
    this.#stripDefault = this.#escape && this.#spacePrefix !== "never";
    this.#normalize = spec.normalize;
    this.#lowercase = spec.lowercase ?? false;

    let ignoreMerges = spec.ignoreMerges;
    let presetBos: boolean | undefined;
    if (spec.pre === undefined) {
      this.#pre = [];
    } else if (typeof spec.pre === "string") {
      const p = preTokenizerByName(spec.pre);
      if (p === undefined) throw new TokenizerError(`unknown pre-tokenizer type '${spec.pre}'`);
      this.#pre = p.regexes;
      ignoreMerges ??= p.ignoreMerges;
      presetBos = p.addBos;
    } else {
      this.#pre = spec.pre.map(compilePattern);
    }
    this.#ignoreMerges = ignoreMerges ?? false;
    this.addBos = (spec.addBos ?? presetBos ?? spec.model === "spm") && this.bos !== undefined;
    this.addEos = (spec.addEos ?? false) && this.eos !== undefined;

    for (let b = 0; b < 256; b++) {
      const t = this.#ids.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
      if (t !== undefined) this.#byteTok[b] = t;
    }

    const specials = new Map<string, number>();
    const all: Special[] = [];
    for (let i = 0; i < n; i++) {
      const t = this.#types[i];
      if (t === TokenType.control || t === TokenType.userDefined || t === TokenType.unknown) {
        const s = spec.strip?.get(i);
        all.push({ id: i, text: this.#tokens[i], lstrip: s?.lstrip ?? false, rstrip: s?.rstrip ?? false });
        if (!specials.has(this.#tokens[i])) specials.set(this.#tokens[i], i);
      }
    }
    // Longest first, so that a special token containing another is split out whole.
    all.sort((a, b) => b.text.length - a.text.length || a.id - b.id);
    this.#specialAll = all;
    this.#specialUser = all.filter((s) => this.#types[s.id] === TokenType.userDefined);
    this.specialTokens = specials;

    const eog = new Set<number>();
    for (const v of [this.eos, id(spec.eot), id(spec.eom), ...(spec.eog ?? []).map(id)]) if (v !== undefined) eog.add(v);
    for (const [text, i] of specials) if (EOG_TEXTS.has(text)) eog.add(i);
    this.eog = eog;

    if (spec.model === "bpe") this.#buildMerges(spec.merges ?? []);
    this.#pieces = new Array(n);
  }

  #buildMerges(merges: readonly (string | readonly [string, string])[]): void {
    this.#pairs = new PairTable(merges.length);
    this.#mergeId = new Int32Array(merges.length).fill(-1);
    for (let rank = 0; rank < merges.length; rank++) {
      const m = merges[rank];
      let a: string, b: string;
      if (typeof m === "string") {
        // llama.cpp splits at the first space after the first character (a left part may be a lone space).
        const pos = m.indexOf(" ", 1);
        if (pos < 0) continue;
        a = m.slice(0, pos);
        b = m.slice(pos + 1);
      } else {
        [a, b] = m;
      }
      const ia = this.#ids.get(a), ib = this.#ids.get(b);
      if (ia === undefined || ib === undefined) continue;
      if (this.#pairs.add(ia, ib, rank)) this.#mergeId[rank] = this.#ids.get(a + b) ?? -1;
    }
  }

  // ---- encoding ----

  encode(text: string, opts: EncodeOptions = {}): number[] {
    const out: number[] = [];
    if ((opts.addBos ?? this.addBos) && this.bos !== undefined) out.push(this.bos);
    const frags = this.#partition(text, opts.parseSpecial ?? false);
    let prevSpecial = true;
    for (let i = 0; i < frags.length; i++) {
      const f = frags[i];
      if (typeof f === "number") {
        out.push(f);
        prevSpecial = true;
        continue;
      }
      const sp = this.#spacePrefix;
      let t = this.#normalize ? f.normalize(this.#normalize) : f;
      if (this.#lowercase) t = t.toLowerCase();
      let prefix = sp === "after-special" ? prevSpecial : sp === "always" ? true : sp === "first" ? i === 0 : false;
      if (prefix && this.#prefixIfMissing && (t.startsWith(" ") || t.startsWith(SPACE_MARK))) prefix = false;
      this.#encodeText(prefix ? " " + t : t, out);
      prevSpecial = false;
    }
    if ((opts.addEos ?? this.addEos) && this.eos !== undefined) out.push(this.eos);
    return out;
  }

  /** Splits out special tokens: a list of text fragments (non-empty strings) and token ids. */
  #partition(text: string, parseSpecial: boolean): (string | number)[] {
    let frags: (string | number)[] = text.length ? [text] : [];
    const list = parseSpecial ? this.#specialAll : this.#specialUser;
    for (const sp of list) {
      let hit = false;
      for (const f of frags) if (typeof f === "string" && f.includes(sp.text)) hit = true;
      if (!hit) continue;
      const next: (string | number)[] = [];
      for (const f of frags) {
        if (typeof f === "number") {
          next.push(f);
          continue;
        }
        let from = 0;
        for (let at = f.indexOf(sp.text); at >= 0; at = f.indexOf(sp.text, from)) {
          let left = f.slice(from, at);
          if (sp.lstrip) left = trimEndAscii(left);
          if (left) next.push(left);
          next.push(sp.id);
          from = at + sp.text.length;
          if (sp.rstrip) while (from < f.length && isAsciiSpace(f.charCodeAt(from))) from++;
        }
        if (from < f.length) next.push(from === 0 ? f : f.slice(from));
      }
      frags = next;
    }
    return frags;
  }

  #encodeText(s: string, out: number[]): void {
    if (this.#escape) s = s.replaceAll(" ", SPACE_MARK);
    if (this.model === "spm") {
      this.#spm(s, out);
      return;
    }
    const words = this.#pre.length ? preTokenize(s, this.#pre) : [s];
    for (const w of words) this.#bpeWord(w, out);
  }

  #ensure(n: number): void {
    if (this.#start.length >= n) return;
    const m = Math.max(n, this.#start.length * 2);
    this.#start = new Int32Array(m);
    this.#len = new Int32Array(m);
    this.#prev = new Int32Array(m);
    this.#next = new Int32Array(m);
    this.#sid = new Int32Array(m);
  }

  /** Splits s into code-point symbols; returns their count. */
  #symbols(s: string): number {
    this.#ensure(s.length);
    const start = this.#start, len = this.#len, prev = this.#prev, next = this.#next;
    let k = 0;
    for (let i = 0; i < s.length; k++) {
      const c = s.charCodeAt(i);
      const w = c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
      start[k] = i;
      len[k] = w;
      prev[k] = k - 1;
      next[k] = k + 1;
      i += w;
    }
    if (k > 0) next[k - 1] = -1;
    return k;
  }

  #spm(s: string, out: number[]): void {
    const count = this.#symbols(s);
    if (count === 0) return;
    const start = this.#start, len = this.#len, prev = this.#prev, next = this.#next;
    const heap = this.#heap, ids = this.#ids, scores = this.#scores;
    heap.clear();
    const tryAdd = (l: number, r: number) => {
      if (l < 0 || r < 0) return;
      const size = len[l] + len[r];
      const id = ids.get(s.substr(start[l], size));
      if (id !== undefined) heap.push(-scores[id], l, r, size, id);
    };
    for (let i = 1; i < count; i++) tryAdd(i - 1, i);
    while (heap.size > 0) {
      const top = heap.pop();
      const l = heap.left[top], r = heap.right[top], size = heap.a[top];
      // Stale: one side was merged away, or grew since this pair was queued.
      if (len[l] === 0 || len[r] === 0 || len[l] + len[r] !== size) continue;
      len[l] = size;
      len[r] = 0;
      next[l] = next[r];
      if (next[r] >= 0) prev[next[r]] = l;
      tryAdd(prev[l], l);
      tryAdd(l, next[l]);
    }
    for (let i = 0; i !== -1; i = next[i]) {
      const piece = s.substr(start[i], len[i]);
      const id = ids.get(piece);
      if (id !== undefined) out.push(id);
      else this.#bytesOf(piece, out);
    }
  }

  /** A piece with no token: its UTF-8 bytes as byte tokens, else unk. */
  #bytesOf(piece: string, out: number[]): void {
    for (const b of enc.encode(piece)) {
      let t = this.#byteTok[b];
      if (t < 0 && b < 0x80) t = this.#ids.get(String.fromCharCode(b)) ?? -1;
      if (t < 0 && this.unk !== undefined) t = this.unk;
      if (t < 0) throw new TokenizerError(`no token for byte 0x${b.toString(16)} and no unknown token`);
      out.push(t);
    }
  }

  #bpeWord(word: string, out: number[]): void {
    const cached = this.#wordCache.get(word);
    if (cached !== undefined) {
      for (const t of cached) out.push(t);
      return;
    }
    const w = this.#byteLevel ? toByteLevel(word) : word;
    const ids = this.#ids;
    const res: number[] = [];
    const whole = this.#ignoreMerges ? ids.get(w) : undefined;
    if (whole !== undefined) res.push(whole);
    else this.#bpeMerge(w, res);
    if (this.#wordCache.size >= 65536) this.#wordCache.clear();
    if (word.length <= 256) this.#wordCache.set(word, res);
    for (const t of res) out.push(t);
  }

  #bpeMerge(w: string, out: number[]): void {
    const count = this.#symbols(w);
    if (count === 0) return;
    const start = this.#start, len = this.#len, prev = this.#prev, next = this.#next, sid = this.#sid;
    const heap = this.#heap, ids = this.#ids, pairs = this.#pairs, mergeId = this.#mergeId;
    for (let i = 0; i < count; i++) sid[i] = ids.get(w.substr(start[i], len[i])) ?? -1;
    heap.clear();
    const tryAdd = (l: number, r: number) => {
      if (l < 0 || r < 0 || sid[l] < 0 || sid[r] < 0) return;
      const rank = pairs.get(sid[l], sid[r]);
      if (rank >= 0) heap.push(rank, l, r, len[l] + len[r], mergeId[rank]);
    };
    for (let i = 1; i < count; i++) tryAdd(i - 1, i);
    while (heap.size > 0) {
      const top = heap.pop();
      const l = heap.left[top], r = heap.right[top], size = heap.a[top], merged = heap.b[top];
      if (len[l] === 0 || len[r] === 0 || len[l] + len[r] !== size) continue;
      len[l] = size;
      len[r] = 0;
      sid[l] = merged;
      next[l] = next[r];
      if (next[r] >= 0) prev[next[r]] = l;
      tryAdd(prev[l], l);
      tryAdd(l, next[l]);
    }
    for (let i = 0; i !== -1; i = next[i]) {
      if (sid[i] >= 0) {
        out.push(sid[i]);
        continue;
      }
      const piece = w.substr(start[i], len[i]);
      if (this.#byteLevel) {
        // Each byte character on its own (llama.cpp drops what has no token).
        for (const ch of piece) {
          const t = ids.get(ch);
          if (t !== undefined) out.push(t);
        }
      } else if (this.#byteFallback) {
        this.#bytesOf(piece, out);
      } else if (this.unk !== undefined) {
        out.push(this.unk);
      }
    }
  }

  // ---- decoding ----

  #check(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new TokenizerError(`token id ${id} is out of range [0, ${this.vocabSize})`);
    }
  }

  tokenText(id: number): string {
    this.#check(id);
    return this.#tokens[id];
  }

  tokenType(id: number): TokenType {
    this.#check(id);
    return this.#types[id] as TokenType;
  }

  tokenId(text: string): number | undefined {
    return this.#ids.get(text);
  }

  isEog(id: number): boolean {
    return this.eog.has(id);
  }

  tokenBytes(id: number, special = false): Uint8Array {
    this.#check(id);
    const type = this.#types[id];
    if (type !== TokenType.normal && type !== TokenType.byte && type !== TokenType.userDefined) {
      // control, unknown, unused: text only when asked for
      return special ? enc.encode(this.#tokens[id]) : EMPTY;
    }
    let p = this.#pieces[id];
    if (p === undefined) {
      const text = this.#tokens[id];
      if (type === TokenType.byte && /^<0x[0-9A-Fa-f]{2}>$/.test(text)) p = Uint8Array.of(parseInt(text.slice(3, 5), 16));
      else if (type === TokenType.userDefined) p = enc.encode(text);
      else if (this.#byteLevel) p = fromByteLevel(text);
      else if (this.#escape) p = enc.encode(text.replaceAll(SPACE_MARK, " "));
      else p = enc.encode(text);
      this.#pieces[id] = p;
    }
    return p;
  }

  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    const special = opts.special ?? false;
    let strip = opts.stripLeadingSpace ?? this.#stripDefault;
    const parts: Uint8Array[] = [];
    let total = 0;
    for (let i = 0; i < ids.length; i++) {
      let b = this.tokenBytes(ids[i], special || (opts.shown?.has(ids[i]) ?? false));
      if (b.length === 0) continue;
      if (strip) {
        strip = false;
        if (b[0] === 0x20) b = b.subarray(1);
      }
      parts.push(b);
      total += b.length;
    }
    const all = new Uint8Array(total);
    let p = 0;
    for (const b of parts) {
      all.set(b, p);
      p += b.length;
    }
    return new TextDecoder().decode(all);
  }

  decoder(opts: DecodeOptions = {}): StreamDecoder {
    const special = opts.special ?? false;
    const strip0 = opts.stripLeadingSpace ?? this.#stripDefault;
    let strip = strip0;
    let td = new TextDecoder();
    const shown = opts.shown;
    return {
      push: (id: number): string => {
        let b = this.tokenBytes(id, special || (shown?.has(id) ?? false));
        if (b.length === 0) return "";
        if (strip) {
          strip = false;
          if (b[0] === 0x20) b = b.subarray(1);
        }
        return td.decode(b, { stream: true });
      },
      flush: (): string => {
        const s = td.decode();
        td = new TextDecoder();
        strip = strip0;
        return s;
      },
    };
  }
}

function isAsciiSpace(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d);
}

function trimEndAscii(s: string): string {
  let e = s.length;
  while (e > 0 && isAsciiSpace(s.charCodeAt(e - 1))) e--;
  return e === s.length ? s : s.slice(0, e);
}

/** GPT-2's byte alphabet, for builders that need to spell byte tokens. */
export { BYTE_TO_CHAR };
