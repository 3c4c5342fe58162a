// llama2.c checkpoints (karpathy/llama2.c): the legacy "version 0" file run.c reads and the "version 1" fp32
// export, and the tokenizer.bin / tok512.bin tokenizer with run.c's encode and decode.
//
// A checkpoint's arrays are stacked over layers; the store exposes each layer's slice as `<field>.<layer>`
// (wq.3, rms_att_weight.3, ...) as views of the file's bytes. Names are listed in llm/families/llama.ts.
import { bufferStore, type TensorEntry, type WeightStore } from "../../graph/weights.ts";
import type { LlamaConfig } from "../families/llama.ts";

export interface Llama2cModel {
  config: LlamaConfig;
  /** Maximum sequence length the checkpoint was trained for. */
  seqLen: number;
  version: 0 | 1;
  store: WeightStore;
}

const MAGIC = 0x616b3432; // "ak42" little-endian

/** Reads a llama2.c checkpoint (version 0 or 1, fp32). */
export function readLlama2c(bytes: Uint8Array): Llama2cModel {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let version: 0 | 1 = 0, p = 0, shared: boolean;
  if (bytes.byteLength >= 8 && dv.getUint32(0, true) === MAGIC) {
    const v = dv.getInt32(4, true);
    if (v !== 1) throw new RangeError(`llama2.c checkpoint version ${v} is not supported (only 0 and 1, fp32)`);
    version = 1;
    p = 8;
  }
  if (bytes.byteLength < p + 28) throw new RangeError("llama2.c checkpoint: file too short for its header");
  const [dim, hidden, layers, heads, kvHeads, vocabRaw, seqLen] = Array.from({ length: 7 }, (_, i) => dv.getInt32(p + 4 * i, true));
  if (version === 1) {
    shared = bytes[p + 28] !== 0;
    p = 256;
  } else {
    shared = vocabRaw > 0;
    p = 28;
  }
  const vocab = Math.abs(vocabRaw);
  if ([dim, hidden, layers, heads, kvHeads, vocab, seqLen].some((x) => !(x > 0)) || dim % heads || heads % kvHeads) {
    throw new RangeError(`llama2.c checkpoint: bad header ${[dim, hidden, layers, heads, kvHeads, vocabRaw, seqLen]}`);
  }
  const hd = dim / heads, kv = kvHeads * hd;
  const entries: TensorEntry[] = [];
  const add = (name: string, shape: number[]) => {
    const byteLength = shape.reduce((a, b) => a * b, 1) * 4;
    entries.push({ name, dtype: "f32", shape, byteLength, offset: p });
    p += byteLength;
    if (p > bytes.byteLength) throw new RangeError(`llama2.c checkpoint: ${name} ends past the file's ${bytes.byteLength} bytes`);
  };
  const stacked = (name: string, shape: number[]) => {
    for (let l = 0; l < layers; l++) add(`${name}.${l}`, shape);
  };
  if (version === 1) {
    stacked("rms_att_weight", [dim]);
    stacked("rms_ffn_weight", [dim]);
    add("rms_final_weight", [dim]);
    add("token_embedding_table", [vocab, dim]);
  } else {
    add("token_embedding_table", [vocab, dim]);
    stacked("rms_att_weight", [dim]);
  }
  stacked("wq", [dim, dim]);
  stacked("wk", [kv, dim]);
  stacked("wv", [kv, dim]);
  stacked("wo", [dim, dim]);
  if (version === 0) stacked("rms_ffn_weight", [dim]);
  stacked("w1", [hidden, dim]);
  stacked("w2", [dim, hidden]);
  stacked("w3", [hidden, dim]);
  if (version === 0) {
    add("rms_final_weight", [dim]);
    p += seqLen * hd * 4; // legacy freq_cis_real and freq_cis_imag, [seq_len, head_size / 2] each
  }
  if (!shared) add("wcls", [vocab, dim]);
  if (p > bytes.byteLength) throw new RangeError(`llama2.c checkpoint: needs ${p} bytes, file has ${bytes.byteLength}`);
  const config: LlamaConfig = {
    dim, hidden, layers, heads, kvHeads, headDim: hd, vocab,
    rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "adjacent", tiedEmbeddings: shared, contextLength: seqLen,
  };
  return { config, seqLen, version, store: bufferStore(bytes, entries) };
}

export interface Llama2cTokenizer {
  /** Token pieces as bytes (a space where SentencePiece writes U+2581). */
  pieces: Uint8Array[];
  scores: Float32Array;
  maxTokenLength: number;
  /** run.c's encode: optional BOS (1), a dummy-prefix space for non-empty text, bytes, greedy merges, EOS (2). */
  encode(text: string, opts?: { bos?: boolean; eos?: boolean }): number[];
  /** Bytes of token `id` after token `prev` (run.c: a leading space after BOS is dropped; <0xXX> is a byte). */
  decodePiece(prev: number, id: number): Uint8Array;
  /** Text of `ids`, the first following `prev` (default BOS). */
  decode(ids: readonly number[], prev?: number): string;
}

const latin1 = (b: Uint8Array) => String.fromCharCode(...b);

/** Reads a llama2.c tokenizer file for a vocabulary of `vocab` tokens. */
export function readLlama2cTokenizer(bytes: Uint8Array, vocab: number): Llama2cTokenizer {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const maxTokenLength = dv.getInt32(0, true);
  const pieces: Uint8Array[] = [];
  const scores = new Float32Array(vocab);
  let p = 4;
  for (let i = 0; i < vocab; i++) {
    if (p + 8 > bytes.byteLength) throw new RangeError(`tokenizer: file ends at token ${i} of ${vocab}`);
    scores[i] = dv.getFloat32(p, true);
    const len = dv.getInt32(p + 4, true);
    p += 8;
    if (len < 0 || p + len > bytes.byteLength) throw new RangeError(`tokenizer: bad length ${len} at token ${i}`);
    pieces.push(bytes.slice(p, p + len));
    p += len;
  }
  // run.c looks pieces up by binary search over a sorted copy; pieces are unique, so the first id is the one.
  const ids = new Map<string, number>();
  pieces.forEach((b, i) => ids.has(latin1(b)) || ids.set(latin1(b), i));
  const keys = pieces.map(latin1);
  const byteToken = (b: number) => b + 3;

  function encode(text: string, opts: { bos?: boolean; eos?: boolean } = {}): number[] {
    const out: number[] = [];
    if (opts.bos ?? true) out.push(1);
    const src = new TextEncoder().encode(text);
    if (src.length > 0) {
      const sp = ids.get(" ");
      if (sp === undefined) throw new RangeError("tokenizer has no ' ' piece for the dummy prefix");
      out.push(sp);
    }
    // One code point at a time (at most 4 bytes, as run.c groups them); unknown ones fall back to bytes.
    for (let i = 0; i < src.length;) {
      let j = i + 1;
      while (j < src.length && (src[j] & 0xc0) === 0x80 && j - i < 4) j++;
      const id = ids.get(latin1(src.subarray(i, j)));
      if (id !== undefined) out.push(id);
      else for (let k = i; k < j; k++) out.push(byteToken(src[k]));
      i = j;
    }
    // Merge the adjacent pair with the best score (first on ties) until none merges.
    for (;;) {
      let best = -1e10, bestId = -1, at = -1;
      for (let i = 0; i < out.length - 1; i++) {
        const id = ids.get(keys[out[i]] + keys[out[i + 1]]);
        if (id !== undefined && scores[id] > best) {
          best = scores[id];
          bestId = id;
          at = i;
        }
      }
      if (at < 0) break;
      out.splice(at, 2, bestId);
    }
    if (opts.eos) out.push(2);
    return out;
  }

  function decodePiece(prev: number, id: number): Uint8Array {
    let piece = pieces[id];
    if (prev === 1 && piece[0] === 0x20) piece = piece.subarray(1);
    const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(latin1(piece));
    return m ? Uint8Array.of(parseInt(m[1], 16)) : piece;
  }

  function decode(list: readonly number[], prev = 1): string {
    const parts: Uint8Array[] = [];
    for (const id of list) {
      parts.push(decodePiece(prev, id));
      prev = id;
    }
    const all = new Uint8Array(parts.reduce((a, b) => a + b.length, 0));
    let o = 0;
    for (const b of parts) {
      all.set(b, o);
      o += b.length;
    }
    return new TextDecoder().decode(all);
  }

  return { pieces, scores, maxTokenLength, encode, decodePiece, decode };
}
