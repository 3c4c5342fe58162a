// Sanity checks of a model before anything is sized from it, family-neutral: a family's config reader calls
// the config checks with the values it read and the keys it read them from; the loader calls checkTensors
// with the tensors the family will read; the driver calls checkContext before it allocates a KV cache.
//
// Why up front: a count or a dim from metadata sizes loops, graphs and buffers. Unchecked, `block_count`
// 2^32-1 runs until the process is killed, `head_count` 0 surfaces as a shape `[null,64]` deep in the graph,
// and a tensor one row short of the config computes garbage with exit 0. Each check names the file and the
// key (or the tensor) so the one error line says what to fix.
import { BLOCK, byteSize, type DType, isBlock } from "../graph/dtype.ts";
import type { TargetSet } from "../kernels/target.ts";
import type { WeightStore } from "../graph/weights.ts";
import { ContextLengthError, MetadataError, TensorMismatchError } from "./errors.ts";
import type { GGUFFile } from "./formats/gguf.ts";

/** `value` of metadata `key` as a whole number in [min, max]; `maxWhy` says where the upper bound comes from. */
export function checkCount(file: string, key: string, value: number, min: number, max: number, maxWhy?: string): number {
  if (!Number.isInteger(value) || value < min) {
    throw new MetadataError(file, key, `${value} is not a whole number of at least ${min}`);
  }
  if (value > max) throw new MetadataError(file, key, `${value} is more than ${max}${maxWhy ? ` (${maxWhy})` : ""}`);
  return value;
}

/** `value` of metadata `key` as a finite number above 0 (an epsilon, a rope base). */
export function checkPositive(file: string, key: string, value: number): number {
  if (!(Number.isFinite(value) && value > 0)) throw new MetadataError(file, key, `${value} must be a finite number above 0`);
  return value;
}

/** `value` (of `key`) divided by `by` (of `byKey`), which must be whole. */
export function checkDivides(file: string, key: string, value: number, byKey: string, by: number): number {
  if (value % by !== 0) throw new MetadataError(file, key, `${value} is not a multiple of ${byKey} = ${by}`);
  return value / by;
}

/** `value` of `key` must be even (rotary dims pair up). */
export function checkEven(file: string, key: string, value: number): number {
  if (value % 2 !== 0) throw new MetadataError(file, key, `${value} must be even (rotary dims come in pairs)`);
  return value;
}

/**
 * The counts and dims every GGUF architecture states under `${arch}.*`, checked before a family's config reader
 * sizes anything from them: a layer needs tensors, so block_count is bounded by the file's tensor count; widths
 * by what they must divide. Absent optional keys are the family's to default.
 */
export function checkGGUFConfig(g: GGUFFile, arch: string): void {
  const f = g.file;
  const k = (s: string) => `${arch}.${s}`;
  const count = (key: string, v: number, max = 2 ** 24) => checkCount(f, k(key), v, 1, max);
  const dim = count("embedding_length", g.getU32(k("embedding_length")));
  const heads = count("attention.head_count", g.getU32(k("attention.head_count")), dim);
  const kvHeads = count("attention.head_count_kv", g.optU32(k("attention.head_count_kv")) ?? heads, heads);
  checkDivides(f, k("attention.head_count"), heads, k("attention.head_count_kv"), kvHeads);
  const keyLength = g.optU32(k("attention.key_length"));
  const headDim = keyLength !== undefined
    ? count("attention.key_length", keyLength)
    : checkDivides(f, k("embedding_length"), dim, k("attention.head_count"), heads);
  checkCount(f, k("block_count"), g.getU32(k("block_count")), 1, g.tensorCount, `the file has ${g.tensorCount} tensors`);
  count("feed_forward_length", g.getU32(k("feed_forward_length")));
  const embd = g.info("token_embd.weight");
  if (!embd) throw new MetadataError(f, "token_embd.weight", `${arch} model has no token_embd.weight tensor`);
  if (embd.shape.length !== 2) {
    throw new MetadataError(f, "token_embd.weight", `expected a 2-D [vocab, ${dim}] tensor, found shape [${embd.shape.join(", ")}]`);
  }
  const vocab = checkCount(f, "token_embd.weight rows (vocabulary size)", embd.shape[0], 1, 2 ** 24);
  const tokens = g.optStrings("tokenizer.ggml.tokens");
  if (tokens && tokens.length !== vocab) {
    throw new MetadataError(f, "tokenizer.ggml.tokens", `${tokens.length} tokens but token_embd.weight has ${vocab} rows`);
  }
  const ropeDims = g.optU32(k("rope.dimension_count"));
  if (ropeDims !== undefined) {
    checkEven(f, k("rope.dimension_count"), checkCount(f, k("rope.dimension_count"), ropeDims, 2, headDim, `${k("attention.key_length")} (head dim) = ${headDim}`));
  }
  checkEven(f, keyLength !== undefined ? k("attention.key_length") : k("embedding_length"), headDim);
  const eps = g.optF32(k("attention.layer_norm_rms_epsilon"));
  if (eps !== undefined) checkPositive(f, k("attention.layer_norm_rms_epsilon"), eps);
  const theta = g.optF32(k("rope.freq_base"));
  if (theta !== undefined) checkPositive(f, k("rope.freq_base"), theta);
  const ctx = g.optU32(k("context_length"));
  if (ctx !== undefined) checkCount(f, k("context_length"), ctx, 2, 0x7fffffff);
}

/** A tensor a family reads: its name in the store, the shape the config implies, the dtypes it can run. */
export interface ExpectedTensor {
  name: string;
  /** Row-major, outermost first, as TensorInfo.shape. */
  shape: readonly number[];
  dtypes: readonly DType[];
}

/** Float and block-quantized types: what a matrix (or an embedding table) may be stored as. */
export function matrixDTypes(): DType[] {
  return ["f32", "f16", "bf16", ...(Object.keys(BLOCK) as DType[])];
}

/**
 * Every expected tensor is in `store` with exactly the expected shape, one of the expected dtypes, and the
 * byte length its dtype and shape take. Throws TensorMismatchError naming the first tensor that is not.
 */
export function checkTensors(file: string, expected: readonly ExpectedTensor[], store: Pick<WeightStore, "info">): void {
  for (const e of expected) {
    const t = store.info(e.name);
    if (!t) throw new TensorMismatchError(file, e.name, `missing (the config implies it, with shape [${e.shape.join(", ")}])`);
    if (t.shape.length !== e.shape.length || t.shape.some((d, i) => d !== e.shape[i])) {
      throw new TensorMismatchError(file, e.name, `shape [${t.shape.join(", ")}], but the config implies [${e.shape.join(", ")}]`);
    }
    if (!e.dtypes.includes(t.dtype)) {
      throw new TensorMismatchError(file, e.name, `dtype ${t.dtype}, expected ${e.dtypes.join(" or ")}`);
    }
    const count = t.shape.reduce((a, b) => a * b, 1);
    if (isBlock(t.dtype) && (t.shape.at(-1) ?? 1) % BLOCK[t.dtype].elems !== 0) {
      throw new TensorMismatchError(file, e.name, `innermost dim ${t.shape.at(-1)} is not a whole number of ${t.dtype} blocks`);
    }
    const want = byteSize(t.dtype, count);
    if (t.byteLength !== want) {
      throw new TensorMismatchError(file, e.name, `${t.byteLength} bytes, but ${t.dtype} [${t.shape.join(", ")}] takes ${want}`);
    }
  }
}

/** How a driver asks for a context, and what sizes it. */
export interface ContextRequest {
  /** Positions asked for (undefined: the trained length, at most `defaultCap`). */
  requested?: number;
  /** The length the model was trained for, when its file says. */
  trained?: number;
  /** Where `trained` comes from, for the message (e.g. "llama.context_length"). */
  trainedKey?: string;
  /** Allow a context above `trained` (the model may degrade past it). */
  allowLonger?: boolean;
  /** Default cap when nothing is requested (2048). */
  defaultCap?: number;
  /** Device bytes each position takes (K and V of every layer, plus scratch that grows with the context). */
  bytesPerPosition: number;
  /** Largest single buffer per position (one layer's K), checked against the device's binding limit. */
  bufferBytesPerPosition: number;
  /** Device bytes that do not grow with the context (weights). */
  fixedBytes: number;
  target: Pick<TargetSet, "backend" | "device" | "memory" | "caps">;
}

/** Flags and option names that override a refusal, for the message. */
export const LONG_CONTEXT_OVERRIDE = "--allow-long-context (library: allowLongContext: true)";

/**
 * The context to allocate, or a ContextLengthError before anything is allocated: not a whole number in
 * [2, 2^31-1]; above the trained length without `allowLonger` (the message says how to override); or a KV
 * cache that cannot fit the device's memory (free when it reports it, else total) beside the weights.
 */
export function checkContext(r: ContextRequest): number {
  const ctx = r.requested ?? Math.min(r.trained ?? 2048, r.defaultCap ?? 2048);
  if (!Number.isInteger(ctx) || ctx < 2 || ctx > 0x7fffffff) {
    throw new ContextLengthError(ctx, "must be a whole number from 2 to 2147483647");
  }
  if (r.requested !== undefined && r.trained !== undefined && ctx > r.trained && !r.allowLonger) {
    throw new ContextLengthError(
      ctx,
      `more than the ${r.trained} the model was trained for (${r.trainedKey ?? "its context length"}); ` +
        `pass ${LONG_CONTEXT_OVERRIDE} to run it anyway`,
    );
  }
  const mem = r.target.memory.freeBytes ?? r.target.memory.totalBytes;
  const where = `${r.target.backend} (${r.target.device})`;
  const fits = Math.floor(Math.max(0, mem - r.fixedBytes) / Math.max(1, r.bytesPerPosition));
  if (r.fixedBytes + ctx * r.bytesPerPosition > mem) {
    throw new ContextLengthError(
      ctx,
      `needs ${gib(ctx * r.bytesPerPosition)} for the KV cache beside ${gib(r.fixedBytes)} of weights, ` +
        `more than the ${gib(mem)} ${r.target.memory.freeBytes === undefined ? "" : "free "}on ${where}; ` +
        (fits >= 2 ? `at most ${fits} positions fit` : "no context fits"),
    );
  }
  const maxBuf = r.target.caps.maxBindingBytes;
  if (ctx * r.bufferBytesPerPosition > maxBuf) {
    throw new ContextLengthError(
      ctx,
      `one layer's K cache would take ${gib(ctx * r.bufferBytesPerPosition)}, more than the ${gib(maxBuf)} ` +
        `one buffer may hold on ${where}; at most ${Math.floor(maxBuf / r.bufferBytesPerPosition)} positions fit`,
    );
  }
  return ctx;
}

function gib(bytes: number): string {
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(1)} GiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}
