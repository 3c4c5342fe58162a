// A small GGUF v3 writer: synthetic checkpoints and test files. It writes what gguf.ts reads: typed metadata,
// tensor infos (shape given row-major outermost first, written innermost first as GGUF lists dims), padding
// to the alignment, and the data section.
import type { DType } from "../../graph/dtype.ts";
import { byteSize } from "../../graph/dtype.ts";
import type { GGUFArray, GGUFValue, GGUFValueType } from "./gguf.ts";
import { GGUF_VALUE_TYPES } from "./gguf.ts";
import { DTYPE_TO_GGML } from "./ggml-type.ts";

export interface GGUFWriteTensor {
  name: string;
  dtype: DType;
  /** Row-major, outermost first (a matrix is [out, in]), as TensorInfo.shape. */
  shape: number[];
  /** The tensor's bytes in GGUF layout (block types: blocks along the innermost dim). */
  data: Uint8Array;
  /** Write this ggml type id instead of dtype's (for tests of unsupported types); skips the size check. */
  ggmlType?: number;
}

export interface GGUFWriteOptions {
  version?: 2 | 3;
  /** Data alignment; written as general.alignment when it is not the default 32. */
  alignment?: number;
  metadata?: Iterable<[string, GGUFValue]> | Record<string, GGUFValue>;
  tensors?: GGUFWriteTensor[];
}

/** Constructors of typed metadata values, e.g. `meta.u32(5)`, `meta.strings(["a", "b"])`. */
export const meta = {
  u8: (value: number): GGUFValue => ({ type: "u8", value }),
  i8: (value: number): GGUFValue => ({ type: "i8", value }),
  u16: (value: number): GGUFValue => ({ type: "u16", value }),
  i16: (value: number): GGUFValue => ({ type: "i16", value }),
  u32: (value: number): GGUFValue => ({ type: "u32", value }),
  i32: (value: number): GGUFValue => ({ type: "i32", value }),
  f32: (value: number): GGUFValue => ({ type: "f32", value }),
  f64: (value: number): GGUFValue => ({ type: "f64", value }),
  u64: (value: bigint | number): GGUFValue => ({ type: "u64", value: BigInt(value) }),
  i64: (value: bigint | number): GGUFValue => ({ type: "i64", value: BigInt(value) }),
  bool: (value: boolean): GGUFValue => ({ type: "bool", value }),
  string: (value: string): GGUFValue => ({ type: "string", value }),
  array: (value: GGUFArray): GGUFValue => ({ type: "array", value }),
  strings: (value: string[]): GGUFValue => ({ type: "array", value: { type: "string", value } }),
  f32s: (value: ArrayLike<number>): GGUFValue => ({ type: "array", value: { type: "f32", value: Float32Array.from(value) } }),
  i32s: (value: ArrayLike<number>): GGUFValue => ({ type: "array", value: { type: "i32", value: Int32Array.from(value) } }),
  u32s: (value: ArrayLike<number>): GGUFValue => ({ type: "array", value: { type: "u32", value: Uint32Array.from(value) } }),
};

const enc = new TextEncoder();

class Bytes {
  chunks: Uint8Array[] = [];
  length = 0;
  push(b: Uint8Array): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  scalar(n: number, f: (dv: DataView) => void): void {
    const b = new Uint8Array(n);
    f(new DataView(b.buffer));
    this.push(b);
  }
  u32(v: number): void {
    this.scalar(4, (d) => d.setUint32(0, v, true));
  }
  u64(v: number | bigint): void {
    this.scalar(8, (d) => d.setBigUint64(0, BigInt(v), true));
  }
  string(s: string): void {
    const b = enc.encode(s);
    this.u64(b.length);
    this.push(b);
  }
  concat(): Uint8Array {
    const out = new Uint8Array(this.length);
    let p = 0;
    for (const c of this.chunks) {
      out.set(c, p);
      p += c.length;
    }
    return out;
  }
}

function typeId(t: GGUFValueType): number {
  return GGUF_VALUE_TYPES.indexOf(t);
}

function writeScalar(out: Bytes, type: GGUFValueType, v: number | bigint | boolean | string): void {
  switch (type) {
    case "u8": return out.scalar(1, (d) => d.setUint8(0, v as number));
    case "i8": return out.scalar(1, (d) => d.setInt8(0, v as number));
    case "u16": return out.scalar(2, (d) => d.setUint16(0, v as number, true));
    case "i16": return out.scalar(2, (d) => d.setInt16(0, v as number, true));
    case "u32": return out.scalar(4, (d) => d.setUint32(0, v as number, true));
    case "i32": return out.scalar(4, (d) => d.setInt32(0, v as number, true));
    case "f32": return out.scalar(4, (d) => d.setFloat32(0, v as number, true));
    case "f64": return out.scalar(8, (d) => d.setFloat64(0, v as number, true));
    case "u64": return out.scalar(8, (d) => d.setBigUint64(0, BigInt(v as bigint), true));
    case "i64": return out.scalar(8, (d) => d.setBigInt64(0, BigInt(v as bigint), true));
    case "bool": return out.scalar(1, (d) => d.setUint8(0, v ? 1 : 0));
    case "string": return out.string(v as string);
    case "array": throw new TypeError("writeScalar: array");
  }
}

function writeArray(out: Bytes, a: GGUFArray): void {
  out.u32(typeId(a.type));
  out.u64(a.value.length);
  if (a.type === "array") {
    for (const x of a.value) writeArray(out, x);
  } else if (a.type === "string" || a.type === "bool") {
    for (const x of a.value) writeScalar(out, a.type, x);
  } else {
    // Typed arrays are little-endian on every platform this runs on: copy their bytes.
    const v = a.value;
    out.push(new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength)));
  }
}

/** A tensor as the header describes it (its data written separately). */
export type GGUFTensorHeader = Omit<GGUFWriteTensor, "data"> & { byteLength: number };

/**
 * The bytes before the data section (magic, metadata, tensor infos, padding to the alignment) and each
 * tensor's offset in the data section (every tensor starts aligned; the gap after one is zero bytes).
 */
export function ggufHeader(opts: Omit<GGUFWriteOptions, "tensors"> & { tensors?: GGUFTensorHeader[] }): { header: Uint8Array; offsets: number[]; alignment: number } {
  const version = opts.version ?? 3;
  const alignment = opts.alignment ?? 32;
  const entries: [string, GGUFValue][] = opts.metadata === undefined
    ? []
    : Symbol.iterator in opts.metadata
    ? [...(opts.metadata as Iterable<[string, GGUFValue]>)]
    : Object.entries(opts.metadata as Record<string, GGUFValue>);
  if (alignment !== 32 && !entries.some(([k]) => k === "general.alignment")) {
    entries.unshift(["general.alignment", meta.u32(alignment)]);
  }
  const tensors = opts.tensors ?? [];

  const out = new Bytes();
  out.push(enc.encode("GGUF"));
  out.u32(version);
  out.u64(tensors.length);
  out.u64(entries.length);
  for (const [k, v] of entries) {
    out.string(k);
    out.u32(typeId(v.type));
    if (v.type === "array") writeArray(out, v.value);
    else writeScalar(out, v.type, v.value);
  }

  let rel = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    const count = t.shape.reduce((a, b) => a * b, 1);
    const ggml = t.ggmlType ?? DTYPE_TO_GGML.get(t.dtype);
    if (ggml === undefined) throw new TypeError(`writeGGUF: dtype ${t.dtype} has no ggml type`);
    if (t.ggmlType === undefined && t.byteLength !== byteSize(t.dtype, count)) {
      throw new TypeError(`writeGGUF: tensor '${t.name}' has ${t.byteLength} bytes, ${t.dtype}${JSON.stringify(t.shape)} needs ${byteSize(t.dtype, count)}`);
    }
    out.string(t.name);
    out.u32(t.shape.length);
    for (let i = t.shape.length - 1; i >= 0; i--) out.u64(t.shape[i]);
    out.u32(ggml);
    out.u64(rel);
    offsets.push(rel);
    rel += Math.ceil(t.byteLength / alignment) * alignment;
  }
  if (tensors.length > 0) out.push(new Uint8Array((alignment - (out.length % alignment)) % alignment));
  return { header: out.concat(), offsets, alignment };
}

/** Serializes a GGUF file. */
export function writeGGUF(opts: GGUFWriteOptions): Uint8Array {
  const tensors = opts.tensors ?? [];
  const { header, offsets, alignment } = ggufHeader({ ...opts, tensors: tensors.map((t) => ({ ...t, byteLength: t.data.length })) });
  const out = new Bytes();
  out.push(header);
  for (let i = 0; i < tensors.length; i++) {
    const d = tensors[i].data;
    out.push(d);
    const end = i + 1 < tensors.length ? offsets[i + 1] : Math.ceil(d.length / alignment) * alignment + offsets[i];
    out.push(new Uint8Array(end - offsets[i] - d.length));
  }
  return out.concat();
}
