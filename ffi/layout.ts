// Declarative C struct layouts with natural alignment (the x86-64 / aarch64 LP64 rules every driver header
// here follows): offsets, sizes and alignment are computed once; encode/decode move JS records in and out of
// bytes at those offsets. Checked against the C headers by tests/ffi/offsets.c.

import { cstr, cstringFrom, keepAlive, ptrOf } from "./lib.ts";

/** Scalar field types. "pointer" and "usize" are 8 bytes (LP64). */
export type Scalar = "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "u64" | "i64" | "usize" | "f32" | "f64" | "pointer";

export interface ArrayType<T extends FieldType = FieldType> {
  readonly kind: "array";
  readonly of: T;
  readonly length: number;
  readonly size: number;
  readonly align: number;
}
/** A char[N] field read and written as a JS string (NUL-terminated when shorter). */
export interface CharsType {
  readonly kind: "chars";
  readonly length: number;
  readonly size: number;
  readonly align: 1;
}
export type Fields = { readonly [name: string]: FieldType };
export interface Struct<F extends Fields = Fields> {
  readonly kind: "struct";
  readonly name: string;
  readonly size: number;
  readonly align: number;
  readonly fields: F;
  /** Byte offset of each field (0 for all fields of a union). */
  readonly offsets: { readonly [K in keyof F]: number };
  /** Values pack() writes before the caller's (e.g. sType). */
  readonly defaults: Init<F>;
  readonly union: boolean;
}
export type FieldType = Scalar | ArrayType | CharsType | Struct;

const SCALAR_SIZE: Record<Scalar, number> = {
  u8: 1,
  i8: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  u64: 8,
  i64: 8,
  usize: 8,
  f64: 8,
  pointer: 8,
};

export function sizeOf(t: FieldType): number {
  return typeof t === "string" ? SCALAR_SIZE[t] : t.size;
}
export function alignOf(t: FieldType): number {
  return typeof t === "string" ? SCALAR_SIZE[t] : t.align;
}
const roundUp = (n: number, a: number) => Math.ceil(n / a) * a;

// Values accepted by encode, per field type.
type Wide = "u64" | "i64" | "usize";
/** A pointer field takes an address, a typed array (its address; kept alive by pack), a string (a C copy) or null. */
export type PointerInit = bigint | number | ArrayBufferView | string | null;
export type InitOf<T extends FieldType> = T extends "pointer" ? PointerInit
  : T extends Wide ? bigint | number
  : T extends Scalar ? number | boolean
  : T extends CharsType ? string
  : T extends ArrayType<infer E> ? ArrayLike<InitOf<E>>
  : T extends Struct<infer F> ? Init<F>
  : never;
export type Init<F extends Fields> = { readonly [K in keyof F]?: InitOf<F[K]> };
/** What decode gives back, per field type. */
export type DecodedOf<T extends FieldType> = T extends "pointer" | Wide ? bigint
  : T extends Scalar ? number
  : T extends CharsType ? string
  : T extends ArrayType<infer E> ? DecodedOf<E>[]
  : T extends Struct<infer F> ? Decoded<F>
  : never;
export type Decoded<F extends Fields> = { -readonly [K in keyof F]: DecodedOf<F[K]> };
/** The record type of a struct layout. */
export type RecordOf<S extends Struct> = S extends Struct<infer F> ? Init<F> : never;
export type DecodedRecordOf<S extends Struct> = S extends Struct<infer F> ? Decoded<F> : never;

export function array<const T extends FieldType>(of: T, length: number): ArrayType<T> {
  return { kind: "array", of, length, size: sizeOf(of) * length, align: alignOf(of) };
}
export function chars(length: number): CharsType {
  return { kind: "chars", length, size: length, align: 1 };
}

export interface StructOptions<F extends Fields> {
  defaults?: Init<F>;
  /** Force a larger alignment (an `__attribute__((aligned(N)))` struct). */
  align?: number;
}

/** Lays out a struct: each field at the next offset aligned to its natural alignment, in declaration order. */
export function struct<const F extends Fields>(name: string, fields: F, opts: StructOptions<F> = {}): Struct<F> {
  let off = 0;
  let align = opts.align ?? 1;
  const offsets: Record<string, number> = {};
  for (const key in fields) {
    const t = fields[key];
    const a = alignOf(t);
    off = roundUp(off, a);
    offsets[key] = off;
    off += sizeOf(t);
    align = Math.max(align, a);
  }
  const size = roundUp(off, align);
  return { kind: "struct", name, size, align, fields, offsets: offsets as Struct<F>["offsets"], defaults: opts.defaults ?? {}, union: false };
}

/** A C union: every field at offset 0, sized to the largest. */
export function union<const F extends Fields>(name: string, fields: F): Struct<F> {
  let size = 0;
  let align = 1;
  const offsets: Record<string, number> = {};
  for (const key in fields) {
    offsets[key] = 0;
    size = Math.max(size, sizeOf(fields[key]));
    align = Math.max(align, alignOf(fields[key]));
  }
  return { kind: "struct", name, size: roundUp(size, align), align, fields, offsets: offsets as Struct<F>["offsets"], defaults: {}, union: true };
}

/** The byte offset of a dotted field path ("limits.maxComputeWorkGroupCount"), with array indices ("a.3"). */
export function offsetOf(s: Struct, path: string): number {
  let t: FieldType = s;
  let off = 0;
  for (const part of path.split(".")) {
    if (typeof t === "string" || t.kind === "chars") throw new TypeError(`offsetOf: ${path}: ${part} is not inside a struct`);
    if (t.kind === "array") {
      const i = Number(part);
      if (!Number.isInteger(i) || i < 0 || i >= t.length) throw new RangeError(`offsetOf: ${path}: bad index ${part}`);
      off += i * sizeOf(t.of);
      t = t.of;
      continue;
    }
    if (!(part in t.fields)) throw new TypeError(`offsetOf: ${t.name} has no field ${part}`);
    off += t.offsets[part];
    t = t.fields[part];
  }
  return off;
}

// ---------------------------------------------------------------------------------------------------------
// encode / decode

function toView(target: DataView | ArrayBufferView | ArrayBuffer): DataView {
  if (target instanceof DataView) return target;
  if (target instanceof ArrayBuffer) return new DataView(target);
  return new DataView(target.buffer, target.byteOffset, target.byteLength);
}

function writeScalar(v: DataView, off: number, t: Scalar, x: unknown, refs: unknown[]): void {
  switch (t) {
    case "u8":
      return v.setUint8(off, Number(x));
    case "i8":
      return v.setInt8(off, Number(x));
    case "u16":
      return v.setUint16(off, Number(x), true);
    case "i16":
      return v.setInt16(off, Number(x), true);
    case "u32":
      return v.setUint32(off, Number(x), true);
    case "i32":
      return v.setInt32(off, Number(x), true);
    case "f32":
      return v.setFloat32(off, Number(x), true);
    case "f64":
      return v.setFloat64(off, Number(x), true);
    case "u64":
    case "usize":
      return v.setBigUint64(off, BigInt(x as bigint | number), true);
    case "i64":
      return v.setBigInt64(off, BigInt(x as bigint | number), true);
    case "pointer": {
      let p: bigint;
      if (x === null || x === undefined) p = 0n;
      else if (typeof x === "bigint" || typeof x === "number") p = BigInt(x);
      else if (typeof x === "string") {
        const s = cstr(x);
        refs.push(s);
        p = ptrOf(s);
      } else {
        refs.push(x);
        p = ptrOf(x as ArrayBufferView);
      }
      return v.setBigUint64(off, p, true);
    }
  }
}

function writeField(v: DataView, off: number, t: FieldType, x: unknown, refs: unknown[]): void {
  if (typeof t === "string") return writeScalar(v, off, t, typeof x === "boolean" ? (x ? 1 : 0) : x, refs);
  if (t.kind === "chars") {
    const bytes = new TextEncoder().encode(x as string);
    if (bytes.length > t.length) throw new RangeError(`string of ${bytes.length} bytes does not fit char[${t.length}]`);
    for (let i = 0; i < t.length; i++) v.setUint8(off + i, i < bytes.length ? bytes[i] : 0);
    return;
  }
  if (t.kind === "array") {
    const xs = x as ArrayLike<unknown>;
    if (xs.length > t.length) throw new RangeError(`${xs.length} values do not fit an array of ${t.length}`);
    const es = sizeOf(t.of);
    for (let i = 0; i < xs.length; i++) writeField(v, off + i * es, t.of, xs[i], refs);
    return;
  }
  encodeInto(t, x as Record<string, unknown>, v, off, refs);
}

function encodeInto(s: Struct, rec: Record<string, unknown>, v: DataView, off: number, refs: unknown[]): void {
  for (const key in rec) {
    const x = rec[key];
    if (x === undefined) continue;
    const t = s.fields[key];
    if (t === undefined) throw new TypeError(`${s.name} has no field ${key}`);
    writeField(v, off + s.offsets[key], t, x, refs);
  }
}

/**
 * Writes the fields present in `value` at their offsets (absent fields are left as they are). Arrays and
 * strings given for pointer fields are pushed onto `refs` when given: the caller must keep them alive while
 * native code can read them (pack() does this for you).
 */
export function encode<F extends Fields>(
  s: Struct<F>,
  value: Init<F>,
  target: DataView | ArrayBufferView | ArrayBuffer,
  offset = 0,
  refs: unknown[] = [],
): void {
  const v = toView(target);
  if (offset + s.size > v.byteLength) throw new RangeError(`${s.name} (${s.size} bytes) does not fit at ${offset} of ${v.byteLength}`);
  encodeInto(s, value as Record<string, unknown>, v, offset, refs);
}

/**
 * A zeroed, stable buffer holding `value` over the defaults of the struct and of the structs nested in it;
 * pointed-to arrays and strings live as long as it does.
 */
export function pack<F extends Fields>(s: Struct<F>, value: Init<F> = {}): Uint8Array {
  return packArray(s, [value]);
}

/** `values.length` consecutive structs (a C array, e.g. pQueueCreateInfos), each over the struct's defaults. */
export function packArray<F extends Fields>(s: Struct<F>, values: readonly Init<F>[]): Uint8Array {
  // An explicit ArrayBuffer keeps V8 from placing small arrays on its moving heap: the address must not change.
  const out = new Uint8Array(new ArrayBuffer(Math.max(s.size * values.length, 1)));
  const v = new DataView(out.buffer);
  const refs: unknown[] = [];
  values.forEach((value, i) => {
    writeDefaults(s, v, i * s.size, refs);
    encodeInto(s, value as Record<string, unknown>, v, i * s.size, refs);
  });
  if (refs.length) keepAlive(out, ...refs);
  return out;
}

// Defaults of a struct and of every struct nested in it (fields and array elements), e.g. the sType of
// VkComputePipelineCreateInfo.stage.
function writeDefaults(s: Struct, v: DataView, off: number, refs: unknown[]): void {
  for (const key in s.fields) {
    let t = s.fields[key];
    let n = 1;
    if (typeof t !== "string" && t.kind === "array") {
      n = t.length;
      t = t.of;
    }
    if (typeof t === "string" || t.kind !== "struct") continue;
    for (let i = 0; i < n; i++) writeDefaults(t, v, off + s.offsets[key] + i * t.size, refs);
  }
  encodeInto(s, s.defaults as Record<string, unknown>, v, off, refs);
}

function readField(v: DataView, off: number, t: FieldType): unknown {
  if (typeof t === "string") {
    switch (t) {
      case "u8":
        return v.getUint8(off);
      case "i8":
        return v.getInt8(off);
      case "u16":
        return v.getUint16(off, true);
      case "i16":
        return v.getInt16(off, true);
      case "u32":
        return v.getUint32(off, true);
      case "i32":
        return v.getInt32(off, true);
      case "f32":
        return v.getFloat32(off, true);
      case "f64":
        return v.getFloat64(off, true);
      case "i64":
        return v.getBigInt64(off, true);
      default:
        return v.getBigUint64(off, true);
    }
  }
  if (t.kind === "chars") return cstringFrom(new Uint8Array(v.buffer, v.byteOffset + off, t.length));
  if (t.kind === "array") {
    const es = sizeOf(t.of);
    const out = new Array(t.length);
    for (let i = 0; i < t.length; i++) out[i] = readField(v, off + i * es, t.of);
    return out;
  }
  const rec: Record<string, unknown> = {};
  for (const key in t.fields) rec[key] = readField(v, off + t.offsets[key], t.fields[key]);
  return rec;
}

/** Reads every field of `s` at `offset` into a plain record (64-bit and pointer fields as bigint). */
export function decode<F extends Fields>(s: Struct<F>, source: DataView | ArrayBufferView | ArrayBuffer, offset = 0): Decoded<F> {
  const v = toView(source);
  if (offset + s.size > v.byteLength) throw new RangeError(`${s.name} (${s.size} bytes) is not inside ${v.byteLength} bytes at ${offset}`);
  return readField(v, offset, s) as Decoded<F>;
}

/** Decodes `count` consecutive structs. */
export function decodeArray<F extends Fields>(s: Struct<F>, source: DataView | ArrayBufferView | ArrayBuffer, count: number, offset = 0): Decoded<F>[] {
  const out: Decoded<F>[] = [];
  for (let i = 0; i < count; i++) out.push(decode(s, source, offset + i * s.size));
  return out;
}
