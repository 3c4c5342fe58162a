// GGUF v2/v3 reader. The header (metadata and tensor infos) is read first, through a window that grows only
// as far as the header goes, so a multi-gigabyte file that is not GGUF is refused after 4 bytes and loading
// never holds the whole file; tensors are read one at a time when the loader asks (llm/formats/file.ts).
// Every read is bounded by the file, the header by MAX_HEADER_BYTES and array nesting by MAX_NESTING, so a
// truncated, corrupt or hostile file raises a ModelFormatError naming the field and offset, never a
// RangeError, a stack overflow or an allocation the file does not back.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv_count metadata
// entries (string key, u32 value type, value), tensor_count tensor infos (string name, u32 n_dims, u64 dims
// innermost first, u32 ggml type, u64 offset relative to the data section), padding to general.alignment
// (default 32), then the data section.
import { readFileSync } from "node:fs";
import type { DType } from "../../graph/dtype.ts";
import { BLOCK, isBlock, SIZE } from "../../graph/dtype.ts";
import {
  ModelFormatError,
  NestingLimitError,
  shown,
  UnsupportedFormatError,
  UnsupportedTensorTypeError,
} from "../errors.ts";
import { openModelFile } from "./file.ts";
import { GGML_TO_DTYPE, ggmlTypeName } from "./ggml-type.ts";
import {
  type GGUFArray,
  GGUFFile,
  type GGUFSource,
  type GGUFTensorInfo,
  type GGUFValue,
  type GGUFValueType,
  GGUF_VALUE_TYPES,
} from "./gguf-file.ts";

// The file type and its value types are part of this module's interface.
export * from "./gguf-file.ts";

const MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
const DEFAULT_ALIGNMENT = 32;
const MAX_DIMS = 4; // GGML_MAX_DIMS
/** Largest header (metadata and tensor infos) read: a 256k-token vocabulary with merges takes ~10 MiB. */
export const MAX_HEADER_BYTES = 256 * 2 ** 20;
/** Deepest nesting of metadata arrays (GGUF writers nest one level at most). */
export const MAX_NESTING = 8;
// How much the header window grows by when a read passes its end.
const CHUNK = 2 ** 20;
const SCALAR_SIZE: Record<string, number> = { u8: 1, i8: 1, u16: 2, i16: 2, u32: 4, i32: 4, f32: 4, bool: 1, u64: 8, i64: 8, f64: 8 };
// Smallest encoding of one value of each type, to bound counts by the bytes left before allocating.
const MIN_SIZE: Record<string, number> = { ...SCALAR_SIZE, string: 8, array: 12 };

const utf8 = new TextDecoder("utf-8");
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** Opens a GGUF file and reads its header; tensors are read from the file when asked (`bytes`, `close`). */
export function openGGUF(path: string): GGUFFile {
  // Files embedded in a bun-compiled binary can be read whole but not opened.
  if (path.startsWith("/$bunfs/")) return parseGGUF(new Uint8Array(readFileSync(path)), path);
  const file = openModelFile(path); // missing, a directory, a FIFO: ModelNotFoundError
  try {
    return new Parser(file).parse();
  } catch (e) {
    file.close();
    throw e;
  }
}

/** Parses GGUF bytes already in memory. Tensor bytes are views of `bytes`; nothing is copied. */
export function parseGGUF(bytes: Uint8Array, file = "<bytes>"): GGUFFile {
  const source: GGUFSource = {
    path: file,
    size: bytes.length,
    readAt(offset, length, what) {
      if (!(offset >= 0 && length >= 0 && offset + length <= bytes.length)) {
        throw new ModelFormatError({ file, field: what, offset }, `${length} bytes pass the end of the ${bytes.length}-byte input`);
      }
      return bytes.subarray(offset, offset + length);
    },
    close() {},
  };
  return new Parser(source, bytes).parse();
}

class Parser {
  /** The header window: bytes [base, base + buf.length) of the file. */
  buf: Uint8Array;
  base = 0;
  dv: DataView;
  /** Absolute read position. */
  pos = 0;
  readonly file: string;
  readonly size: number;
  /** Reads past this absolute offset are refused (the header limit, or the file's end in memory). */
  readonly limit: number;

  constructor(readonly src: GGUFSource, whole?: Uint8Array) {
    this.file = src.path;
    this.size = src.size;
    this.buf = whole ?? new Uint8Array(0);
    this.dv = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    this.limit = whole ? this.size : Math.min(this.size, MAX_HEADER_BYTES);
  }

  fail(field: string, offset: number, problem: string): never {
    throw new ModelFormatError({ file: this.file, field, offset }, problem);
  }

  /** Bytes a count may still claim: to the end of the file, or of the header limit. */
  left(): number {
    return this.limit - this.pos;
  }

  /** Ensures n bytes at pos are in the window; returns pos relative to the window. */
  need(n: number, field: string): number {
    const rel = this.pos - this.base;
    if (rel + n <= this.buf.length) return rel;
    if (n > this.size - this.pos) {
      this.fail(field, this.pos, `truncated: needs ${n} bytes, ${this.size - this.pos} left (file is ${this.size} bytes)`);
    }
    if (this.pos + n > this.limit) {
      this.fail(field, this.pos, `the header passes ${MAX_HEADER_BYTES} bytes (a corrupt count or length?)`);
    }
    // Slide the window to pos and read at least a chunk, so a vocabulary's small strings take few reads.
    const len = Math.min(this.limit - this.pos, Math.max(n, CHUNK));
    this.buf = this.src.readAt(this.pos, len, field);
    this.base = this.pos;
    this.dv = new DataView(this.buf.buffer, this.buf.byteOffset, this.buf.byteLength);
    return 0;
  }

  u32(field: string): number {
    const r = this.need(4, field);
    this.pos += 4;
    return this.dv.getUint32(r, true);
  }

  /** A u64 used as a size, count or offset: must be a safe integer. */
  size64(field: string): number {
    const r = this.need(8, field);
    const lo = this.dv.getUint32(r, true);
    const hi = this.dv.getUint32(r + 4, true);
    if (hi >= 0x200000) this.fail(field, this.pos, `value ${this.dv.getBigUint64(r, true)} is too large`);
    this.pos += 8;
    return hi * 0x100000000 + lo;
  }

  /** A length-prefixed string; `strict`: invalid UTF-8 is an error (keys, tensor names) rather than U+FFFD. */
  string(field: string, strict = false): string {
    const at = this.pos;
    const n = this.size64(`${field} length`);
    const left = this.size - this.pos;
    if (n > left) this.fail(`${field} length`, at, `string length ${n} runs past the end of the file (${left} bytes left)`);
    const r = this.need(n, field);
    this.pos += n;
    if (!strict) return decodeUtf8(this.buf, r, n);
    try {
      return strictUtf8.decode(this.buf.subarray(r, r + n));
    } catch {
      return this.fail(field, at, "not valid UTF-8");
    }
  }

  valueType(field: string): GGUFValueType {
    const at = this.pos;
    const id = this.u32(`${field} type`);
    const t = GGUF_VALUE_TYPES[id];
    if (t === undefined) this.fail(`${field} type`, at, `unknown metadata value type id ${id}`);
    return t;
  }

  value(type: GGUFValueType, field: string): GGUFValue {
    if (type === "string") return { type, value: this.string(field) };
    if (type === "array") return { type, value: this.array(field, 1) };
    const n = SCALAR_SIZE[type];
    const p = this.need(n, field);
    const dv = this.dv;
    this.pos += n;
    switch (type) {
      case "u8": return { type, value: dv.getUint8(p) };
      case "i8": return { type, value: dv.getInt8(p) };
      case "u16": return { type, value: dv.getUint16(p, true) };
      case "i16": return { type, value: dv.getInt16(p, true) };
      case "u32": return { type, value: dv.getUint32(p, true) };
      case "i32": return { type, value: dv.getInt32(p, true) };
      case "f32": return { type, value: dv.getFloat32(p, true) };
      case "f64": return { type, value: dv.getFloat64(p, true) };
      case "bool": return { type, value: dv.getUint8(p) !== 0 };
      case "u64": return { type, value: dv.getBigUint64(p, true) };
      case "i64": return { type, value: dv.getBigInt64(p, true) };
    }
  }

  array(field: string, depth: number): GGUFArray {
    if (depth > MAX_NESTING) throw new NestingLimitError({ file: this.file, field, offset: this.pos }, MAX_NESTING);
    const elem = this.valueType(`${field} element`);
    const at = this.pos;
    const count = this.size64(`${field} count`);
    const left = this.left();
    if (count > left / MIN_SIZE[elem]) {
      this.fail(`${field} count`, at, `${count} ${elem} elements cannot fit in the ${left} bytes left`);
    }
    switch (elem) {
      case "string": {
        const out: string[] = [];
        for (let i = 0; i < count; i++) out.push(this.arrayString(field, i));
        return { type: elem, value: out };
      }
      case "array": {
        const out: GGUFArray[] = [];
        for (let i = 0; i < count; i++) out.push(this.array(`${field}[${i}]`, depth + 1));
        return { type: elem, value: out };
      }
      case "bool": {
        const r = this.need(count, field);
        const out = Array.from(this.buf.subarray(r, r + count), (b) => b !== 0);
        this.pos += count;
        return { type: elem, value: out };
      }
    }
    // Numeric: copy out (the file offset need not be aligned for a typed-array view). Platforms are little-endian.
    const bytes = count * SCALAR_SIZE[elem];
    const r = this.need(bytes, field);
    const copy = this.buf.slice(r, r + bytes).buffer;
    this.pos += bytes;
    switch (elem) {
      case "u8": return { type: elem, value: new Uint8Array(copy) };
      case "i8": return { type: elem, value: new Int8Array(copy) };
      case "u16": return { type: elem, value: new Uint16Array(copy) };
      case "i16": return { type: elem, value: new Int16Array(copy) };
      case "u32": return { type: elem, value: new Uint32Array(copy) };
      case "i32": return { type: elem, value: new Int32Array(copy) };
      case "f32": return { type: elem, value: new Float32Array(copy) };
      case "f64": return { type: elem, value: new Float64Array(copy) };
      case "u64": return { type: elem, value: new BigUint64Array(copy) };
      case "i64": return { type: elem, value: new BigInt64Array(copy) };
    }
  }

  // The hot loop of a vocabulary (up to ~260k strings): no label is built unless something is wrong.
  arrayString(field: string, i: number): string {
    const at = this.pos;
    if (at + 8 > this.base + this.buf.length) this.need(8, `${field}[${i}] length`);
    let r = at - this.base;
    const lo = this.dv.getUint32(r, true);
    const hi = this.dv.getUint32(r + 4, true);
    const n = hi * 0x100000000 + lo;
    const left = this.size - at - 8;
    if (hi !== 0 || n > left) {
      this.fail(`${field}[${i}] length`, at, `string length ${n} runs past the end of the file (${left} bytes left)`);
    }
    this.pos = at + 8;
    if (this.pos + n > this.base + this.buf.length) this.need(n, `${field}[${i}]`);
    r = this.pos - this.base;
    this.pos += n;
    return decodeUtf8(this.buf, r, n);
  }

  parse(): GGUFFile {
    const size = this.size;
    if (size < 4) this.fail("header.magic", 0, `not a GGUF file: only ${size} bytes`);
    const r = this.need(4, "header.magic");
    if (this.dv.getUint32(r, true) !== MAGIC) {
      const shownMagic = Array.from(this.buf.subarray(r, r + 4), (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : "."));
      this.fail("header.magic", 0, `not a GGUF file (starts with "${shownMagic.join("")}", expected "GGUF")`);
    }
    this.pos = 4;
    const version = this.u32("header.version");
    if (version !== 2 && version !== 3) {
      const loc = { file: this.file, field: "header.version", offset: 4 };
      if ((version & 0xffff) === 0 && version !== 0) throw new UnsupportedFormatError(loc, "big-endian GGUF files are not supported");
      if (version === 1) throw new UnsupportedFormatError(loc, "GGUF version 1 is not supported (only 2 and 3)");
      throw new UnsupportedFormatError(loc, `GGUF version ${version} is not supported (only 2 and 3)`);
    }
    const tensorCountAt = this.pos;
    const tensorCount = this.size64("header.tensor_count");
    const kvCountAt = this.pos;
    const kvCount = this.size64("header.metadata_kv_count");
    // A key of at least 1 byte (8 + 1), a type (4) and a 1-byte value: 14 bytes per entry at least.
    if (kvCount > this.left() / 14) {
      this.fail("header.metadata_kv_count", kvCountAt, `${kvCount} entries cannot fit in the ${this.left()} bytes left`);
    }

    const metadata = new Map<string, GGUFValue>();
    for (let i = 0; i < kvCount; i++) {
      const keyAt = this.pos;
      const key = this.string(`metadata[${i}] key`, true);
      if (metadata.has(key)) this.fail(`metadata[${i}] key`, keyAt, `duplicate key '${shown(key)}'`);
      const field = `metadata[${i}] '${shown(key)}'`;
      metadata.set(key, this.value(this.valueType(field), field));
    }

    let alignment = DEFAULT_ALIGNMENT;
    const al = metadata.get("general.alignment");
    if (al !== undefined) {
      const loc = { file: this.file, field: "metadata 'general.alignment'", offset: 0 };
      if (al.type !== "u32") throw new ModelFormatError(loc, `expected a u32, found ${al.type}`);
      if (al.value === 0 || (al.value & (al.value - 1)) !== 0) throw new ModelFormatError(loc, `alignment ${al.value} is not a power of two`);
      alignment = al.value;
    }

    // A name (8 + 0), n_dims (4), type (4) and offset (8) at least: 24 bytes per tensor info.
    if (tensorCount > this.left() / 24) {
      this.fail("header.tensor_count", tensorCountAt, `${tensorCount} tensor infos cannot fit in the ${this.left()} bytes left`);
    }
    const pending: { name: string; dims: number[]; ggmlType: number; dtype: DType; rel: number; byteLength: number }[] = [];
    const seen = new Set<string>();
    for (let i = 0; i < tensorCount; i++) {
      const at = this.pos;
      const name = this.string(`tensor_info[${i}] name`, true);
      if (seen.has(name)) this.fail(`tensor_info[${i}] name`, at, `duplicate tensor name '${shown(name)}'`);
      seen.add(name);
      const field = `tensor '${shown(name)}'`;
      const ndAt = this.pos;
      const nd = this.u32(`${field} n_dims`);
      if (nd > MAX_DIMS) this.fail(`${field} n_dims`, ndAt, `${nd} dims, at most ${MAX_DIMS} are allowed`);
      const dims: number[] = [];
      let count = 1;
      for (let d = 0; d < nd; d++) {
        const dAt = this.pos;
        const n = this.size64(`${field} dims[${d}]`);
        count *= n;
        if (!Number.isSafeInteger(count)) this.fail(`${field} dims[${d}]`, dAt, "element count overflows");
        dims.push(n);
      }
      const typeAt = this.pos;
      const ggmlType = this.u32(`${field} type`);
      const dtype = GGML_TO_DTYPE.get(ggmlType);
      if (dtype === undefined) {
        throw new UnsupportedTensorTypeError({ file: this.file, field: `${field} type`, offset: typeAt }, name, ggmlType, ggmlTypeName(ggmlType));
      }
      let byteLength: number;
      if (isBlock(dtype)) {
        const b = BLOCK[dtype];
        if (nd > 0 && dims[0] % b.elems !== 0) {
          this.fail(`${field} dims[0]`, typeAt, `innermost dim ${dims[0]} is not a multiple of the ${dtype} block size ${b.elems}`);
        }
        byteLength = (count / b.elems) * b.bytes;
      } else {
        byteLength = count * SIZE[dtype];
      }
      const offAt = this.pos;
      const rel = this.size64(`${field} offset`);
      if (rel % alignment !== 0) this.fail(`${field} offset`, offAt, `data offset ${rel} is not a multiple of the alignment ${alignment}`);
      pending.push({ name, dims, ggmlType, dtype, rel, byteLength });
    }

    const dataOffset = Math.ceil(this.pos / alignment) * alignment;
    const tensors = new Map<string, GGUFTensorInfo>();
    for (const t of pending) {
      const offset = dataOffset + t.rel;
      if (offset + t.byteLength > size) {
        this.fail(
          `tensor '${shown(t.name)}' data`,
          Math.min(offset, size),
          `truncated: data [${offset}, ${offset + t.byteLength}) runs past the end of the file (${size} bytes)`,
        );
      }
      tensors.set(t.name, {
        name: t.name,
        dtype: t.dtype,
        shape: t.dims.slice().reverse(),
        byteLength: t.byteLength,
        ggmlType: t.ggmlType,
        dims: t.dims,
        offset,
      });
    }
    return new GGUFFile(this.file, version, alignment, dataOffset, metadata, tensors, this.src);
  }
}

function decodeUtf8(buf: Uint8Array, start: number, n: number): string {
  // Vocabulary entries are short: decode them by hand (a TextDecoder call costs more than the work). Anything
  // unusual (long, invalid, overlong) goes to TextDecoder, which replaces bad bytes with U+FFFD.
  if (n > 48) return utf8.decode(buf.subarray(start, start + n));
  let out = "";
  for (let i = start, end = start + n; i < end;) {
    const b = buf[i];
    if (b < 0x80) {
      out += String.fromCharCode(b);
      i++;
      continue;
    }
    let cp: number, len: number;
    if (b >= 0xc2 && b < 0xe0) cp = b & 0x1f, len = 2;
    else if (b >= 0xe0 && b < 0xf0) cp = b & 0x0f, len = 3;
    else if (b >= 0xf0 && b < 0xf5) cp = b & 0x07, len = 4;
    else return utf8.decode(buf.subarray(start, start + n));
    if (i + len > end) return utf8.decode(buf.subarray(start, start + n));
    for (let j = 1; j < len; j++) {
      const c = buf[i + j];
      if ((c & 0xc0) !== 0x80) return utf8.decode(buf.subarray(start, start + n));
      cp = (cp << 6) | (c & 0x3f);
    }
    if ((len === 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) || (len === 4 && (cp < 0x10000 || cp > 0x10ffff))) {
      return utf8.decode(buf.subarray(start, start + n));
    }
    out += String.fromCodePoint(cp);
    i += len;
  }
  return out;
}
