// Deterministic random weights for a Llama-family config, generated in-process (no file): benchmarks at real
// shapes cost the same bytes per token as trained checkpoints, and tests get models of any shape.
//
// The store builds each tensor when `bytes(name)` is asked for it and keeps nothing, so loading a 16 GB model
// never holds more than its largest tensor on the host (the engine uploads tensor by tensor). The same
// (config, options, name) always gives the same bytes.
//
// Values: matrices are normal-ish (Irwin-Hall of four bytes: bounded at ±3.45 std) with std 0.02 by default,
// which keeps activations O(1) through any depth since every matmul input is rms-normalized; norm weights are
// 1 and biases small. 1-D tensors are f32 whatever the matrix dtype, as GGUF stores them.
//
// Speed: one xorshift32 step yields two 16-bit indices into a 65536-entry table of ready-encoded values, so a
// bf16/f16 matrix costs one table lookup per element and no float conversion.
import { BLOCK, type BlockDType, type DType, f32ToBf16, f32ToF16, isBlock } from "../graph/dtype.ts";
import { roleKey, type TensorInfo, type WeightMap, type WeightRole, type WeightStore } from "../graph/weights.ts";
import { type LlamaConfig, llamaWeights, tensorName } from "./families/llama.ts";
import { quantizeBlocks } from "./formats/ggml-quants.ts";
import { QUANT_FTYPES, type QuantFtype, quantPlan } from "./formats/quantize.ts";

/**
 * Element type of the synthetic matrices, or a llama-quantize file type (q8_0, q4_0, q4_k_m, q5_k_m, q6_k):
 * each matrix then gets the type llama-quantize would give it (llm/formats/quantize.ts quantPlan, f16 where
 * it falls back), filled with blocks drawn from a pool that ggml's reference quantizer made in process.
 */
export type SyntheticDtype = "bf16" | "f16" | "f32" | QuantFtype;
export const SYNTHETIC_DTYPES: readonly SyntheticDtype[] = ["bf16", "f16", "f32", ...QUANT_FTYPES];

export interface SyntheticOptions {
  /** Matrix dtype or quantization file type (default bf16); see SyntheticDtype. */
  dtype?: SyntheticDtype;
  /** Standard deviation of matrix entries (default 0.02). */
  std?: number;
  /** Seed mixed into every tensor's stream (default 0). */
  seed?: number;
  /**
   * Build every tensor into one reused buffer: `bytes()` then returns a view that the next call overwrites.
   * Only for a loader that copies at once (Engine.loadWeights: every Device.write copies before returning);
   * it saves touching fresh memory per tensor, which costs more than generating the values.
   */
  scratch?: boolean;
}

export interface SyntheticStats {
  /** Tensors built so far (a tensor asked for twice counts twice). */
  tensors: number;
  bytes: number;
  /** Milliseconds spent building them. */
  millis: number;
}

/** A WeightStore that builds each tensor on demand; `stats` counts the work done. */
export interface SyntheticStore extends WeightStore {
  readonly stats: SyntheticStats;
}

export interface SyntheticModel {
  config: LlamaConfig;
  store: SyntheticStore;
  /** Role -> tensor name (GGUF names). */
  map: WeightMap;
  /** dtype of each role, for traceLlama's `dtypeOf`. */
  dtypeOf: (role: WeightRole) => DType;
  /** Sum of all tensors' bytes. */
  bytes: number;
}

type Fill = { kind: "normal"; std: number } | { kind: "ones" };
interface Spec extends TensorInfo {
  fill: Fill;
  seed: number;
}

/** A Llama-family model with deterministic random weights, named as GGUF names them. */
export function syntheticLlama(config: LlamaConfig, opts: SyntheticOptions = {}): SyntheticModel {
  const dtype = opts.dtype ?? "bf16", std = opts.std ?? 0.02, seed = opts.seed ?? 0;
  const specs = new Map<string, Spec>();
  const map: WeightMap = new Map();
  const dtypes = new Map<string, DType>();
  let total = 0;
  const weights = llamaWeights(config);
  const quantized = (QUANT_FTYPES as readonly string[]).includes(dtype)
    ? quantPlan(weights.map(({ role, shape }) => ({ name: tensorName("gguf", role)!, dtype: "f16", shape, byteLength: 0 })), dtype as QuantFtype)
    : undefined;
  for (const [i, { role, shape }] of weights.entries()) {
    const name = tensorName("gguf", role)!;
    const count = shape.reduce((a, b) => a * b, 1);
    let d: DType = "f32";
    if (shape.length > 1) d = quantized ? quantized[i].to : dtype as DType;
    const isNorm = role.role.endsWith("norm");
    const fill: Fill = isNorm ? { kind: "ones" } : role.role === "rope_freqs" ? { kind: "ones" } : { kind: "normal", std };
    const byteLength = tensorBytes(d, count);
    specs.set(name, { name, dtype: d, shape, byteLength, fill, seed: hashString(name, seed) });
    map.set(roleKey(role), name);
    dtypes.set(roleKey(role), d);
    total += byteLength;
  }
  const stats: SyntheticStats = { tensors: 0, bytes: 0, millis: 0 };
  let scratch: ArrayBuffer | undefined;
  const bufferFor = (n: number): Uint8Array => {
    if (!opts.scratch) return new Uint8Array(n);
    if (!scratch) {
      let most = 0;
      for (const sp of specs.values()) most = Math.max(most, sp.byteLength);
      scratch = new ArrayBuffer((most + 7) & ~7);
    }
    return new Uint8Array(scratch, 0, n);
  };
  const infoOf = (s: Spec): TensorInfo => ({ name: s.name, dtype: s.dtype, shape: [...s.shape], byteLength: s.byteLength });
  const store: SyntheticStore = {
    stats,
    tensors: () => [...specs.values()].map(infoOf),
    info: (name) => {
      const s = specs.get(name);
      return s && infoOf(s);
    },
    bytes(name) {
      const s = specs.get(name);
      if (!s) throw new RangeError(`synthetic model has no tensor ${name}`);
      const t0 = performance.now();
      const out = buildTensor(s, bufferFor(s.byteLength));
      stats.tensors++;
      stats.bytes += out.byteLength;
      stats.millis += performance.now() - t0;
      return out;
    },
  };
  const dtypeOf = (role: WeightRole): DType => {
    const d = dtypes.get(roleKey(role));
    if (d === undefined) throw new RangeError(`synthetic model has no weight for ${roleKey(role)}`);
    return d;
  };
  return { config, store, map, dtypeOf, bytes: total };
}

function tensorBytes(d: DType, count: number): number {
  switch (d) {
    case "f32": return count * 4;
    case "bf16": case "f16": return count * 2;
    default:
      if (isBlock(d)) return (count / BLOCK[d].elems) * BLOCK[d].bytes;
      throw new RangeError(`synthetic weights cannot be ${d}`);
  }
}

// ---- values ----------------------------------------------------------------------------------------------

/** FNV-1a of the name, mixed with the seed and finalized (murmur3 fmix32); never 0 (a xorshift state). */
function hashString(s: string, seed: number): number {
  let h = 0x811c9dc5 ^ Math.imul(seed | 0, 0x9e3779b1);
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return fmix(h) || 1;
}
function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h | 0;
}

/** Unit-variance Irwin-Hall(4) value for table index i: exact integer arithmetic, the same on every engine. */
function unitNormalish(i: number): number {
  const h = fmix(Math.imul(i + 1, 0x9e3779b1));
  const sum = (h & 0xff) + ((h >>> 8) & 0xff) + ((h >>> 16) & 0xff) + ((h >>> 24) & 0xff);
  return (sum - 510) / 147.80138; // mean 4 * 127.5, std sqrt(4 * (256^2 - 1) / 12)
}

// Each table is antisymmetric (entry 65535 - i is minus entry i), so a uniform index has mean exactly zero.
const tables = new Map<string, Int32Array | Float32Array | Int8Array>();

/** 16-bit codes held in an Int32Array: the fill loop then stays in int32 arithmetic. */
function halfTable(d: "bf16" | "f16", std: number): Int32Array {
  const key = `${d}:${std}`;
  let t = tables.get(key) as Int32Array | undefined;
  if (!t) {
    t = new Int32Array(65536);
    const enc = d === "bf16" ? f32ToBf16 : f32ToF16;
    for (let i = 0; i < 32768; i++) {
      t[i] = enc(unitNormalish(i) * std);
      t[65535 - i] = enc(-unitNormalish(i) * std);
    }
    tables.set(key, t);
  }
  return t;
}
function f32Table(std: number): Float32Array {
  const key = `f32:${std}`;
  let t = tables.get(key) as Float32Array | undefined;
  if (!t) {
    t = new Float32Array(65536);
    for (let i = 0; i < 32768; i++) {
      t[i] = unitNormalish(i) * std;
      t[65535 - i] = -t[i];
    }
    tables.set(key, t);
  }
  return t;
}
/** q8_0 quants: ±127 covers ±3.5 std (the range of the distribution). */
const Q8_RANGE = 3.5;
function q8Table(): Int8Array {
  let t = tables.get("q8") as Int8Array | undefined;
  if (!t) {
    t = new Int8Array(256);
    for (let i = 0; i < 128; i++) {
      t[i] = Math.max(-127, Math.min(127, Math.round(unitNormalish(i) * 127 / Q8_RANGE)));
      t[255 - i] = -t[i];
    }
    tables.set("q8", t);
  }
  return t;
}

function buildTensor(s: Spec, out: Uint8Array): Uint8Array {
  const count = s.shape.reduce((a, b) => a * b, 1);
  if (s.fill.kind === "ones") {
    if (s.dtype !== "f32") throw new RangeError(`synthetic ${s.name}: ones only in f32`);
    new Float32Array(out.buffer, 0, count).fill(1);
    return out;
  }
  const std = s.fill.std;
  switch (s.dtype) {
    case "bf16": case "f16": fillPairs(new Int32Array(out.buffer, 0, count >>> 1), halfTable(s.dtype, std), s.seed, count, out); break;
    case "f32": fillF32(new Float32Array(out.buffer, 0, count), f32Table(std), s.seed); break;
    case "q8_0": fillQ8(out, count / BLOCK.q8_0.elems, f32ToF16(std * Q8_RANGE / 127), q8Table(), s.seed); break;
    default:
      if (!isBlock(s.dtype)) throw new RangeError(`synthetic weights cannot be ${s.dtype}`);
      fillBlocks(out, count / BLOCK[s.dtype].elems, BLOCK[s.dtype].bytes, blockPool(s.dtype, std), s.seed);
  }
  return out;
}

// The loops below use only int32 operations (`(x >> 17) & 0x7fff` is `x >>> 17` on 32 bits): a uint32 value
// past 2^31 would leave V8's small-integer path and cost several times more per element.

/** Two 16-bit values per xorshift32 step, written as one 32-bit word; an odd last element goes in by bytes. */
function fillPairs(words: Int32Array, t: Int32Array, seed: number, count: number, bytes: Uint8Array): void {
  let x = seed | 0;
  const n = words.length;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= (x >> 17) & 0x7fff;
    x ^= x << 5;
    words[i] = t[x & 0xffff] | (t[(x >> 16) & 0xffff] << 16);
  }
  if (count & 1) {
    x ^= x << 13;
    x ^= (x >> 17) & 0x7fff;
    x ^= x << 5;
    const v = t[x & 0xffff];
    bytes[2 * (count - 1)] = v & 0xff;
    bytes[2 * (count - 1) + 1] = v >> 8;
  }
}

function fillF32(out: Float32Array, t: Float32Array, seed: number): void {
  let x = seed | 0;
  const n = out.length & ~1;
  for (let i = 0; i < n; i += 2) {
    x ^= x << 13;
    x ^= (x >> 17) & 0x7fff;
    x ^= x << 5;
    out[i] = t[x & 0xffff];
    out[i + 1] = t[(x >> 16) & 0xffff];
  }
  if (n < out.length) {
    x ^= x << 13;
    x ^= (x >> 17) & 0x7fff;
    x ^= x << 5;
    out[n] = t[x & 0xffff];
  }
}

/** GGUF q8_0 blocks: f16 scale `d` (the same for every block), then 32 int8 quants from 8 xorshift steps. */
function fillQ8(out: Uint8Array, blocks: number, d: number, t: Int8Array, seed: number): void {
  const q = new Int8Array(out.buffer, out.byteOffset, out.byteLength);
  let x = seed | 0;
  for (let b = 0, o = 0; b < blocks; b++) {
    out[o] = d & 0xff;
    out[o + 1] = d >> 8;
    o += 2;
    for (let j = 0; j < 8; j++, o += 4) {
      x ^= x << 13;
      x ^= (x >> 17) & 0x7fff;
      x ^= x << 5;
      q[o] = t[x & 0xff];
      q[o + 1] = t[(x >> 8) & 0xff];
      q[o + 2] = t[(x >> 16) & 0xff];
      q[o + 3] = t[(x >> 24) & 0xff];
    }
  }
}

const POOL = 256;
const pools = new Map<string, Uint8Array>();
/** POOL blocks of type d quantized by ggml's reference algorithm from normal-ish values of the given std. */
function blockPool(d: BlockDType, std: number): Uint8Array {
  const key = `${d}:${std}`;
  let p = pools.get(key);
  if (!p) {
    const t = f32Table(std), n = POOL * BLOCK[d].elems;
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = t[fmix(Math.imul(i + 7, 0x2545f491)) & 0xffff];
    pools.set(key, p = quantizeBlocks(d, x));
  }
  return p;
}

/** Blocks copied from the pool in xorshift order (a tensor of real quantized blocks at memcpy speed). */
function fillBlocks(out: Uint8Array, blocks: number, size: number, pool: Uint8Array, seed: number): void {
  let x = seed | 0;
  for (let b = 0, o = 0; b < blocks; b++, o += size) {
    x ^= x << 13;
    x ^= (x >> 17) & 0x7fff;
    x ^= x << 5;
    const k = (x & (POOL - 1)) * size;
    out.set(pool.subarray(k, k + size), o);
  }
}
