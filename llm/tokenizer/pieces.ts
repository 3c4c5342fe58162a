// What the encoders' tokenizers (WordPiece, Unigram) share: a vocabulary with added tokens from a
// tokenizer.json, added tokens matched in the raw text first (as the tokenizers library does), and decoding
// piece by piece. A subclass supplies how plain text becomes ids and how one id reads back.
import { TokenizerError } from "../errors.ts";
import type { HFTokenizerJson } from "./hf.ts";
import type { DecodeOptions, EncodeOptions, StreamDecoder, Tokenizer } from "./types.ts";
import { TokenType } from "./types.ts";

export abstract class PieceTokenizer implements Tokenizer {
  abstract readonly model: "wordpiece" | "unigram";
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
  /** Added tokens by content, longest first. */
  readonly #added: [string, number][];

  constructor(tj: HFTokenizerJson, vocab: [string, number][], unkToken: string | undefined) {
    let size = 0;
    for (const [, id] of vocab) size = Math.max(size, id + 1);
    for (const a of tj.added_tokens ?? []) size = Math.max(size, a.id + 1);
    this.vocabSize = size;
    this.#tokens = new Array<string>(size).fill("");
    this.#types = new Uint8Array(size).fill(TokenType.unused);
    for (const [t, id] of vocab) {
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
    this.unk = unkToken === undefined ? undefined : this.#ids.get(unkToken);
    if (this.unk !== undefined) {
      this.#types[this.unk] = TokenType.unknown;
      special.set(this.#tokens[this.unk], this.unk);
    }
    this.specialTokens = special;
    this.bos = this.#ids.get("[CLS]") ?? this.#ids.get("<s>");
    this.eos = this.#ids.get("[SEP]") ?? this.#ids.get("</s>");
    this.pad = this.#ids.get("[PAD]") ?? this.#ids.get("<pad>");
  }

  /** Appends the ids of plain text (no added tokens in it); `first`: it starts the whole text. */
  protected abstract encodeText(text: string, out: number[], first: boolean): void;
  /** The text of one id in a decode (`first`: nothing precedes it). */
  protected abstract piece(id: number, first: boolean, special: boolean): string;

  /** A normal vocabulary entry's id. */
  protected idOf(piece: string): number | undefined {
    return this.#ids.get(piece);
  }

  encode(text: string, _opts: EncodeOptions = {}): number[] {
    if (typeof text !== "string") throw new TokenizerError(`encode needs a string, got ${typeof text}`);
    const out: number[] = [];
    let rest = text, first = true;
    while (rest.length > 0) {
      let at = -1, hit: [string, number] | undefined;
      for (const a of this.#added) {
        const i = rest.indexOf(a[0]);
        if (i >= 0 && (at < 0 || i < at)) [at, hit] = [i, a];
      }
      if (at !== 0) this.encodeText(at < 0 ? rest : rest.slice(0, at), out, first);
      first = false;
      if (at < 0) break;
      out.push(hit![1]);
      rest = rest.slice(at + hit![0].length);
    }
    return out;
  }

  #check(id: number): void {
    if (!(Number.isInteger(id) && id >= 0 && id < this.vocabSize)) throw new TokenizerError(`token id ${id} is outside the vocabulary of ${this.vocabSize}`);
  }

  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    let s = "";
    for (let i = 0; i < ids.length; i++) {
      this.#check(ids[i]);
      s += this.piece(ids[i], s === "", (opts.special ?? false) || (opts.shown?.has(ids[i]) ?? false));
    }
    return s;
  }

  decoder(opts: DecodeOptions = {}): StreamDecoder {
    let first = true;
    return {
      push: (id) => {
        this.#check(id);
        const p = this.piece(id, first, (opts.special ?? false) || (opts.shown?.has(id) ?? false));
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
    return new TextEncoder().encode(this.piece(id, true, special));
  }
  tokenId(text: string): number | undefined {
    return this.#ids.get(text);
  }
  isEog(_id: number): boolean {
    return false;
  }
}
