// Building blocks of malformed GGUF files: the shipped stories260K model as editable data (metadata entries
// and tensors, rewritten through the GGUF writer), the byte layout of a valid file (where each metadata entry,
// tensor info and the data section start) so a case can patch or cut exactly one field, and raw writers for
// what the writer refuses to produce (deep nesting, lengths that lie).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { byteSize } from "../../graph/dtype.ts";
import { type GGUFValue, parseGGUF } from "../../llm/formats/gguf.ts";
import { type GGUFWriteTensor, writeGGUF } from "../../llm/formats/gguf-write.ts";

export const STORIES = fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url));

let storiesBytes: Uint8Array | undefined;
/** The shipped model's bytes (read once). */
export function stories(): Uint8Array {
  return storiesBytes ??= new Uint8Array(readFileSync(STORIES));
}

/** A model as data: edit it, then `encode` it. */
export interface Model {
  metadata: [string, GGUFValue][];
  tensors: GGUFWriteTensor[];
}

/** stories260K as editable data (5 layers, dim 64, ffn 172, 8 heads / 4 kv, vocab 512, context 2048). */
export function baseModel(): Model {
  const g = parseGGUF(stories());
  return {
    metadata: [...g.metadata].filter(([k]) => k !== "general.alignment"),
    tensors: [...g.tensors()].map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: g.bytes(t.name) })),
  };
}

export function encode(m: Model, opts: { alignment?: number } = {}): Uint8Array {
  return writeGGUF({ metadata: m.metadata, tensors: m.tensors, alignment: opts.alignment });
}

/** Sets (or appends) a metadata entry. */
export function setMeta(m: Model, key: string, value: GGUFValue): Model {
  const i = m.metadata.findIndex(([k]) => k === key);
  if (i >= 0) m.metadata[i] = [key, value];
  else m.metadata.push([key, value]);
  return m;
}

export function dropMeta(m: Model, key: string): Model {
  m.metadata = m.metadata.filter(([k]) => k !== key);
  return m;
}

/** Small random f32 values as bytes, so a model that loads anyway computes something (not all zeros). */
export function randomF32(rng: () => number, count: number): Uint8Array {
  const f = Float32Array.from({ length: count }, () => (rng() - 0.5) * 0.2);
  return new Uint8Array(f.buffer);
}

/** Gives tensor `name` a new shape and/or dtype, with random data of the right size. */
export function reshapeTensor(m: Model, name: string, rng: () => number, shape: number[], dtype = tensor(m, name).dtype): Model {
  const t = tensor(m, name);
  const count = shape.reduce((a, b) => a * b, 1);
  t.shape = shape;
  t.dtype = dtype;
  t.data = dtype === "f32" ? randomF32(rng, count) : new Uint8Array(byteSize(dtype, count));
  return m;
}

export function tensor(m: Model, name: string): GGUFWriteTensor {
  const t = m.tensors.find((t) => t.name === name);
  if (!t) throw new Error(`fuzz generator: no tensor ${name}`);
  return t;
}

/** Where each field of a valid GGUF file starts. */
export interface Layout {
  size: number;
  kv: { start: number; key: string; typeAt: number; valueAt: number; end: number }[];
  infos: { start: number; name: string; ndimsAt: number; dimsAt: number; typeAt: number; offsetAt: number; end: number }[];
  dataOffset: number;
}

/** Walks a valid file (from the writer or the shipped model); independent of llm/formats/gguf.ts. */
export function layout(b: Uint8Array): Layout {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const dec = new TextDecoder();
  let pos = 8;
  const u32 = () => (pos += 4, dv.getUint32(pos - 4, true));
  const u64 = () => (pos += 8, Number(dv.getBigUint64(pos - 8, true)));
  const str = () => {
    const n = u64();
    pos += n;
    return dec.decode(b.subarray(pos - n, pos));
  };
  const SIZES = [1, 1, 2, 2, 4, 4, 4, 1, -1, -1, 8, 8, 8];
  const skip = (type: number): void => {
    if (type === 8) str();
    else if (type === 9) {
      const elem = u32();
      const n = u64();
      if (SIZES[elem] > 0) pos += n * SIZES[elem];
      else for (let i = 0; i < n; i++) skip(elem);
    } else pos += SIZES[type];
  };
  const tensors = u64();
  const kvs = u64();
  const kv: Layout["kv"] = [];
  let alignment = 32;
  for (let i = 0; i < kvs; i++) {
    const start = pos;
    const key = str();
    const typeAt = pos;
    const type = u32();
    const valueAt = pos;
    if (key === "general.alignment") alignment = dv.getUint32(pos, true);
    skip(type);
    kv.push({ start, key, typeAt, valueAt, end: pos });
  }
  const infos: Layout["infos"] = [];
  for (let i = 0; i < tensors; i++) {
    const start = pos;
    const name = str();
    const ndimsAt = pos;
    const nd = u32();
    const dimsAt = pos;
    pos += 8 * nd;
    const typeAt = pos;
    pos += 4;
    const offsetAt = pos;
    pos += 8;
    infos.push({ start, name, ndimsAt, dimsAt, typeAt, offsetAt, end: pos });
  }
  return { size: b.length, kv, infos, dataOffset: Math.ceil(pos / alignment) * alignment };
}

/** A copy of `b` with `f` applied to a DataView of it. */
export function patch(b: Uint8Array, f: (dv: DataView, bytes: Uint8Array) => void): Uint8Array {
  const c = b.slice();
  f(new DataView(c.buffer), c);
  return c;
}

/** A GGUF v3 header with no tensors and one metadata entry `key` whose value is `depth` nested arrays. */
export function nestedArrays(key: string, depth: number): Uint8Array {
  const k = new TextEncoder().encode(key);
  const out = new Uint8Array(24 + 8 + k.length + 4 + depth * 12 + 12);
  const dv = new DataView(out.buffer);
  out.set([0x47, 0x47, 0x55, 0x46]);
  dv.setUint32(4, 3, true);
  dv.setBigUint64(8, 0n, true);
  dv.setBigUint64(16, 1n, true);
  let p = 24;
  dv.setBigUint64(p, BigInt(k.length), true);
  out.set(k, p + 8);
  p += 8 + k.length;
  dv.setUint32(p, 9, true); // array
  p += 4;
  for (let d = 0; d < depth; d++, p += 12) {
    dv.setUint32(p, 9, true); // of arrays
    dv.setBigUint64(p + 4, 1n, true); // one of them
  }
  dv.setUint32(p, 4, true); // the innermost: an empty u32 array
  dv.setBigUint64(p + 4, 0n, true);
  return out;
}
