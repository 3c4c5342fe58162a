// What a model family is: plain data (its config, read from GGUF metadata or a Hugging Face config.json, and the
// weights it expects with their shapes and tensor names per file format) plus one trace function. The registry
// (llm/registry.ts) maps architecture names to families; the driver, CLI, bench and kernel dump only ever call
// `family.trace`, never a family's module.
//
// ModelConfig is one flat record for every family: the Llama core plus optional quirks that a family's trace
// reads (soft-capping, sliding windows, q/k norms ...). Optional fields absent = the plain Llama behaviour.
import type { DType } from "../../graph/dtype.ts";
import type { RopeStyle } from "../../graph/ir.ts";
import type { Tensor, Tracer } from "../../graph/tracer.ts";
import { roleKey, type TensorInfo, type WeightMap, type WeightRole, type WeightStore } from "../../graph/weights.ts";
import { checkTensors as validateTensors, type ExpectedTensor, matrixDTypes } from "../validate.ts";
import type { GGUFFile } from "../formats/gguf.ts";
import type { EncodeShape, EncoderInfo, EncoderTraced } from "./bert.ts";
import type { VisionInfo, VisionShape, VisionTraced } from "./vit.ts";

export interface ModelConfig {
  /** Model width (embedding length). */
  dim: number;
  /** FFN hidden width. */
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  rmsEps: number;
  ropeTheta: number;
  /** "adjacent": pairs (2i, 2i+1) as llama2.c and GGUF llama (GGML rope NORM); "half": Hugging Face checkpoints. */
  ropeStyle: RopeStyle;
  /** Rotated dims of each head (default headDim). */
  ropeDims?: number;
  /** Divide rope frequencies by the `rope_freqs` weight (Llama 3.1+ GGUF). */
  ropeFreqFactors?: boolean;
  /** Per-frequency divisors from the config's rope scaling (llama3, linear), folded into the rope table. */
  ropeFactors?: number[];
  /** Rope of the sliding-window layers when it differs from the global one (Gemma 3's local layers). */
  ropeLocal?: { theta: number; factors?: number[] };
  /** The output projection is the token embedding. */
  tiedEmbeddings: boolean;
  /** q/k/v projections carry biases (Qwen2-style). */
  qkvBias?: boolean;
  /** RMSNorm of each q and k head before rope (Qwen3, Gemma 3). */
  qkNorm?: boolean;
  /** Norm weights are applied as (offset + w): 1 for Hugging Face Gemma (GGUF stores 1 + w already). */
  normOffset?: number;
  /** The token embedding rows are multiplied by this (Gemma: sqrt(dim)). */
  embedScale?: number;
  /** Gate activation of the gated FFN: silu (SwiGLU, default) or the tanh GELU (GeGLU). */
  act?: "silu" | "gelu";
  /** Attention score scale (default 1/sqrt(headDim)). */
  attnScale?: number;
  /** cap · tanh(score / cap) on attention scores (Gemma 2). */
  attnSoftcap?: number;
  /** cap · tanh(logit / cap) on the output logits (Gemma 2). */
  finalSoftcap?: number;
  /** Width of the sliding attention window (a position sees the last `slidingWindow` positions, itself included). */
  slidingWindow?: number;
  /** Which layers use the sliding window (default: all, when slidingWindow is set). */
  slidingLayers?: boolean[];
  /** Trained context length, when the file states one. */
  contextLength?: number;
  /** An encoder-only model (BERT-style): what its encode step reads (llm/families/bert.ts). */
  encoder?: EncoderInfo;
  /** A vision-language model's vision tower and projector (llm/families/vit.ts, llava.ts). */
  vision?: VisionInfo;
}

export interface StepShape {
  /** Token rows per step (1 for decode). */
  rows: number;
  /** KV capacity in positions. */
  cap: number;
  /** Scatter through Slot write_map, read through Slot slot_map (the KV buffer holds `cap` physical rows). */
  paged?: boolean;
  /** Element type of the K/V State (default f32). */
  kvDtype?: "f32" | "f16";
  /** Batched rows over a paged KV pool (serving; `cap` is then the longest sequence): see common.ts. */
  batch?: BatchShape;
  /**
   * The step reads embedding rows in place of some tokens' rows (a vision-language prompt's image rows):
   * slots `input_rows` f32[rows, dim] and `input_use` bool[rows] (see common.ts embed).
   */
  inputRows?: boolean;
  /**
   * A decode step (1 row, not batched) whose token the device may feed itself: a negative `token` slot reads
   * the token the previous step sampled, which the step's sampler stores in State `fed_token` (common.ts
   * feedToken). Several such steps can then be in flight at once (Engine StepOptions.instance): the host need
   * not read a token before it launches the step that consumes it.
   */
  feed?: boolean;
}

/** The paged KV pool a batched step reads: `blocks` blocks of `block` positions; tables of `maxBlocks` entries. */
export interface BatchShape {
  block: number;
  blocks: number;
  maxBlocks: number;
}

export interface TraceOptions {
  /** dtype of each weight (default f32); see dtypesFromStore. */
  dtypeOf?: (role: WeightRole) => DType;
}

/** A traced step before build: the caller appends a sampler or declares its own outputs. */
export interface Traced {
  tracer: Tracer;
  /** Logits [rows, vocab]. */
  logits: Tensor;
  /** The final normed hidden state [rows, dim] the logits projection reads. */
  hidden: Tensor;
}

/** A weight the step reads, with the shape the config implies ([out, in] for matrices). */
export interface WeightSpec {
  role: WeightRole;
  shape: number[];
}

/** Where a model's weights come from: GGUF, a Hugging Face safetensors folder, or a llama2.c checkpoint. */
export type WeightFormat = "gguf" | "hf" | "llama2c";

/** The parsed config.json of a Hugging Face folder (the family validates the fields it reads). */
export interface HFConfigSource {
  file: string;
  json: unknown;
}

export interface Family {
  /** The family's name as `poot info` shows it. */
  name: string;
  /** GGUF `general.architecture` values this family reads. */
  gguf: readonly string[];
  /** Hugging Face `architectures[0]` and `model_type` values this family reads. */
  hf: readonly string[];
  /** Config from GGUF metadata (`arch` is the file's general.architecture). */
  fromGGUF(g: GGUFFile, arch: string): ModelConfig;
  /** Config from a Hugging Face config.json. */
  fromHF(src: HFConfigSource): ModelConfig;
  /** Every weight the step reads under this config, with its shape. */
  weights(c: ModelConfig): WeightSpec[];
  /**
   * The tensor name of a role in a file format (undefined when the format has no such tensor). A role stored as
   * rows of a fused tensor is named `NAME#rows=FROM:TO:OF` (rows FROM..TO of a tensor of OF rows; see rowSlices).
   */
  tensorName(format: WeightFormat, role: WeightRole, c: ModelConfig): string | undefined;
  /** Traces one step. */
  trace(c: ModelConfig, s: StepShape, o?: TraceOptions): Traced;
  /** Traces one encode step of padded texts (encoder families only; see llm/families/bert.ts). */
  encode?(c: ModelConfig, s: EncodeShape, o?: TraceOptions): EncoderTraced;
  /** Traces the vision tower and projector over `s.images` images (vision-language families only; see vit.ts). */
  vision?(c: ModelConfig, s: VisionShape, o?: TraceOptions): VisionTraced;
  /** The store as the family reads it (a layout read from the file, tensors viewed in another shape); may set `c`'s layout fields. */
  adaptStore?(store: WeightStore, c: ModelConfig): WeightStore;
}

/** Tensor names for a family from per-format tables; per-layer names get the format's layer prefix. */
export function namesFrom(tables: Partial<Record<WeightFormat, Record<string, string>>>): (format: WeightFormat, r: WeightRole) => string | undefined {
  return (format, r) => {
    const n = tables[format]?.[r.role];
    if (n === undefined) return undefined;
    if (r.layer === undefined) return n;
    if (format === "gguf") return `blk.${r.layer}.${n}`;
    if (format === "hf") return `model.layers.${r.layer}.${n}`;
    return `${n}.${r.layer}`;
  };
}

/**
 * Binds every weight the family reads to its tensor in `store` and checks it before anything is uploaded: the
 * tensor exists, its shape is what the config implies, and its dtype is one the kernels read (a float type, or
 * a quantized block type for a matrix). A mismatch is a TensorMismatchError naming the file, tensor and expectation.
 */
export function checkTensors(file: string, family: Family, c: ModelConfig, format: WeightFormat, store: WeightStore): WeightMap {
  const map: WeightMap = new Map();
  const expected: ExpectedTensor[] = family.weights(c).map(({ role, shape }) => {
    const name = family.tensorName(format, role, c) ?? roleKey(role);
    map.set(roleKey(role), name);
    // Vectors are f32 by the time a loader hands them here (half vectors are widened at load).
    return { name, shape, dtypes: shape.length === 2 ? MATRIX : ["f32"] };
  });
  validateTensors(file, expected, store);
  return map;
}
const MATRIX = matrixDTypes();

/**
 * The store with row ranges of fused tensors as tensors of their own: `NAME#rows=FROM:TO:OF` is rows FROM..TO of
 * tensor NAME, which must have OF rows (else its info reports the whole tensor's shape, and checkTensors says
 * the shape is wrong). Rows are contiguous in a row-major [out, in] matrix (quantized blocks run along a row),
 * so a slice is a byte range: Phi-3's fused q|k|v and gate|up upload as separate weights, and its step traces
 * like Llama's with every fused decode unit.
 */
export function rowSlices(store: WeightStore): WeightStore {
  const parse = (name: string) => {
    const m = /^(.*)#rows=(\d+):(\d+):(\d+)$/.exec(name);
    return m ? { base: m[1], from: +m[2], to: +m[3], of: +m[4] } : undefined;
  };
  const info = (name: string): TensorInfo | undefined => {
    const s = parse(name);
    if (!s) return store.info(name);
    const t = store.info(s.base);
    if (!t) return undefined;
    if (t.shape[0] !== s.of || !(s.from < s.to && s.to <= s.of)) return { ...t, name };
    const rowBytes = t.byteLength / s.of;
    return { ...t, name, shape: [s.to - s.from, ...t.shape.slice(1)], byteLength: rowBytes * (s.to - s.from) };
  };
  return {
    tensors: () => store.tensors(),
    info,
    bytes(name) {
      const s = parse(name);
      if (!s) return store.bytes(name);
      const t = store.info(s.base)!, rowBytes = t.byteLength / t.shape[0];
      return store.bytes(s.base).slice(s.from * rowBytes, s.to * rowBytes);
    },
  };
}

/** dtype of each role as the store holds it (for tracing quantized or half-precision models). */
export function dtypesFromStore(store: WeightStore, map: WeightMap): (role: WeightRole) => DType {
  return (role) => {
    const name = map.get(roleKey(role));
    const info = name === undefined ? undefined : store.info(name);
    if (!info) throw new RangeError(`no tensor bound to ${roleKey(role)}`);
    return info.dtype;
  };
}

/** Rope scaling as Hugging Face configs state it (v5 `rope_parameters`, v4 `rope_scaling`). */
export interface RopeScaling {
  rope_type?: string;
  type?: string;
  factor?: number;
  low_freq_factor?: number;
  high_freq_factor?: number;
  original_max_position_embeddings?: number;
}

/**
 * Per-frequency divisors (of `dims / 2` frequencies 1/theta^(2i/dims)) that a rope scaling amounts to, or
 * undefined for none. "linear" divides positions by the factor (the same as dividing every frequency);
 * "llama3" divides low frequencies by the factor, keeps high ones and blends in between (transformers'
 * _compute_llama3_parameters). Other types are refused with a message naming the type.
 */
export function ropeScalingFactors(s: RopeScaling | undefined | null, theta: number, dims: number, fail: (msg: string) => never): number[] | undefined {
  const type = s?.rope_type ?? s?.type ?? "default";
  if (!s || type === "default") return undefined;
  const n = dims / 2;
  const factor = s.factor ?? fail(`rope scaling '${type}' without a factor`);
  if (type === "linear") return new Array(n).fill(factor);
  if (type === "llama3") {
    const lo = s.low_freq_factor ?? 1, hi = s.high_freq_factor ?? 4;
    const old = s.original_max_position_embeddings ?? fail("llama3 rope scaling without original_max_position_embeddings");
    const loWave = old / lo, hiWave = old / hi;
    return Array.from({ length: n }, (_, i) => {
      const freq = 1 / Math.pow(theta, (2 * i) / dims);
      const wave = (2 * Math.PI) / freq;
      if (wave < hiWave) return 1;
      if (wave > loWave) return factor;
      const smooth = (old / wave - lo) / (hi - lo);
      return 1 / ((1 - smooth) / factor + smooth);
    });
  }
  return fail(`rope scaling type '${type}' is not supported (default, linear and llama3 are)`);
}
