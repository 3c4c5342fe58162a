// A parsed GGUF file: its typed metadata values, tensor infos and the accessors a family or a tokenizer reads
// them through (each mismatch a MetadataError naming the key). llm/formats/gguf.ts parses into it.
import type { TensorInfo, WeightStore } from "../../graph/weights.ts";
import { LlmError, MetadataError, shown } from "../errors.ts";
import type { ModelFile } from "./file.ts";

/** GGUF metadata value type names, in GGUF's id order (u8 = 0 ... f64 = 12). */
export const GGUF_VALUE_TYPES = [
  "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
] as const;
export type GGUFValueType = (typeof GGUF_VALUE_TYPES)[number];

/** A metadata array: numbers as typed arrays (copied out of the file), 64-bit integers as bigint arrays. */
export type GGUFArray =
  | { type: "u8"; value: Uint8Array }
  | { type: "i8"; value: Int8Array }
  | { type: "u16"; value: Uint16Array }
  | { type: "i16"; value: Int16Array }
  | { type: "u32"; value: Uint32Array }
  | { type: "i32"; value: Int32Array }
  | { type: "f32"; value: Float32Array }
  | { type: "f64"; value: Float64Array }
  | { type: "u64"; value: BigUint64Array }
  | { type: "i64"; value: BigInt64Array }
  | { type: "bool"; value: boolean[] }
  | { type: "string"; value: string[] }
  | { type: "array"; value: GGUFArray[] };

/** One typed metadata value. 64-bit integers are bigint so that no value is rounded. */
export type GGUFValue =
  | { type: "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32" | "f64"; value: number }
  | { type: "u64" | "i64"; value: bigint }
  | { type: "bool"; value: boolean }
  | { type: "string"; value: string }
  | { type: "array"; value: GGUFArray };

/** A tensor of a GGUF file: the WeightStore's TensorInfo plus where it lives and its GGUF-order dims. */
export interface GGUFTensorInfo extends TensorInfo {
  /** ggml type id as stored. */
  ggmlType: number;
  /** Dims as GGUF lists them, innermost first (the reverse of `shape`). */
  dims: number[];
  /** Absolute byte offset of the tensor's data in the file. */
  offset: number;
}

/** Where a GGUFFile's tensor bytes come from: the open file (read on demand) or bytes in memory. */
export type GGUFSource = Pick<ModelFile, "path" | "size" | "readAt" | "close">;

/**
 * A GGUF file's header (metadata, tensor infos) and its tensors, read when asked: `bytes(name)` reads one
 * tensor from the open file (a fresh buffer), or is a view when parsed from memory. Implements WeightStore.
 * `close()` releases the file handle once the weights are on the device.
 */
export class GGUFFile implements WeightStore {
  /** Path or label given when opening; used in error messages. */
  readonly file: string;
  readonly version: number;
  readonly alignment: number;
  /** Absolute byte offset of the data section. */
  readonly dataOffset: number;
  /** Every metadata entry, typed, in file order. */
  readonly metadata: ReadonlyMap<string, GGUFValue>;
  readonly #source: GGUFSource;
  readonly #tensors: ReadonlyMap<string, GGUFTensorInfo>;

  constructor(
    file: string,
    version: number,
    alignment: number,
    dataOffset: number,
    metadata: ReadonlyMap<string, GGUFValue>,
    tensors: ReadonlyMap<string, GGUFTensorInfo>,
    source: GGUFSource,
  ) {
    this.file = file;
    this.version = version;
    this.alignment = alignment;
    this.dataOffset = dataOffset;
    this.metadata = metadata;
    this.#tensors = tensors;
    this.#source = source;
  }

  /** Closes the file; `bytes` fails afterwards (metadata and infos stay readable). */
  close(): void {
    this.#source.close();
  }

  get tensorCount(): number {
    return this.#tensors.size;
  }

  /** general.architecture, when present. */
  get architecture(): string | undefined {
    return this.optString("general.architecture");
  }

  tensors(): IterableIterator<GGUFTensorInfo> {
    return this.#tensors.values();
  }

  info(name: string): GGUFTensorInfo | undefined {
    return this.#tensors.get(name);
  }

  /** The tensor's bytes, read from the file now (from memory: a view, no copy). */
  bytes(name: string): Uint8Array {
    const t = this.#tensors.get(name);
    if (t === undefined) throw new LlmError(`${this.file}: no tensor named '${shown(name)}'`);
    return this.#source.readAt(t.offset, t.byteLength, `tensor '${shown(name)}' data`);
  }

  has(key: string): boolean {
    return this.metadata.has(key);
  }

  get(key: string): GGUFValue | undefined {
    return this.metadata.get(key);
  }

  #err(key: string, problem: string): never {
    throw new MetadataError(this.file, key, problem);
  }

  #int(key: string, min: number, max: number, what: string): number | undefined {
    const v = this.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type === "f32" || v.type === "f64" || v.type === "bool" || v.type === "string" || v.type === "array") {
      this.#err(key, `expected ${what}, found ${v.type}`);
    }
    const n = Number(v.value);
    if (!(n >= min && n <= max)) this.#err(key, `value ${v.value} does not fit ${what}`);
    return n;
  }

  optU32(key: string): number | undefined {
    return this.#int(key, 0, 0xffffffff, "a u32");
  }
  optI32(key: string): number | undefined {
    return this.#int(key, -0x80000000, 0x7fffffff, "an i32");
  }
  /** Any integer type whose value is a non-negative safe integer. */
  optU64(key: string): number | undefined {
    return this.#int(key, 0, Number.MAX_SAFE_INTEGER, "a non-negative safe integer");
  }
  /** f32 or f64 (integers are accepted too: some converters write whole numbers as integers). */
  optF32(key: string): number | undefined {
    const v = this.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type === "bool" || v.type === "string" || v.type === "array") this.#err(key, `expected a number, found ${v.type}`);
    return Number(v.value);
  }
  optBool(key: string): boolean | undefined {
    const v = this.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type !== "bool") this.#err(key, `expected a bool, found ${v.type}`);
    return v.value;
  }
  optString(key: string): string | undefined {
    const v = this.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type !== "string") this.#err(key, `expected a string, found ${v.type}`);
    return v.value;
  }
  optArray(key: string): GGUFArray | undefined {
    const v = this.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type !== "array") this.#err(key, `expected an array, found ${v.type}`);
    return v.value;
  }
  optStrings(key: string): string[] | undefined {
    const a = this.optArray(key);
    if (a === undefined) return undefined;
    if (a.type !== "string") this.#err(key, `expected an array of strings, found an array of ${a.type}`);
    return a.value;
  }
  /** A numeric array as Float32Array (f32 arrays as stored; other numeric arrays converted). */
  optF32s(key: string): Float32Array | undefined {
    const a = this.optArray(key);
    if (a === undefined) return undefined;
    if (a.type === "f32") return a.value;
    if (a.type === "string" || a.type === "array" || a.type === "bool") this.#err(key, `expected a numeric array, found an array of ${a.type}`);
    return Float32Array.from(a.value as ArrayLike<number | bigint>, Number);
  }
  /** An integer array as Int32Array (i32 arrays as stored; other integer arrays converted when they fit). */
  optI32s(key: string): Int32Array | undefined {
    const a = this.optArray(key);
    if (a === undefined) return undefined;
    if (a.type === "i32") return a.value;
    if (a.type === "string" || a.type === "array" || a.type === "bool" || a.type === "f32" || a.type === "f64") {
      this.#err(key, `expected an integer array, found an array of ${a.type}`);
    }
    const out = Int32Array.from(a.value as ArrayLike<number | bigint>, Number);
    for (let i = 0; i < out.length; i++) {
      if (out[i] !== Number(a.value[i])) this.#err(key, `element ${i} (${a.value[i]}) does not fit an i32`);
    }
    return out;
  }

  #must<T>(key: string, v: T | undefined): T {
    if (v === undefined) this.#err(key, "missing");
    return v;
  }
  getU32(key: string): number {
    return this.#must(key, this.optU32(key));
  }
  getI32(key: string): number {
    return this.#must(key, this.optI32(key));
  }
  getU64(key: string): number {
    return this.#must(key, this.optU64(key));
  }
  getF32(key: string): number {
    return this.#must(key, this.optF32(key));
  }
  getBool(key: string): boolean {
    return this.#must(key, this.optBool(key));
  }
  getString(key: string): string {
    return this.#must(key, this.optString(key));
  }
  getArray(key: string): GGUFArray {
    return this.#must(key, this.optArray(key));
  }
  getStrings(key: string): string[] {
    return this.#must(key, this.optStrings(key));
  }
  getF32s(key: string): Float32Array {
    return this.#must(key, this.optF32s(key));
  }
  getI32s(key: string): Int32Array {
    return this.#must(key, this.optI32s(key));
  }
}
