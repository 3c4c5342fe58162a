// Model quantization as llama-quantize does it without an importance matrix: which type each tensor gets in a
// file type (q8_0, q4_0, and the mixes q4_k_m, q5_k_m, q6_k), the fallbacks for rows that are not whole
// blocks, and the streaming writer that reads one tensor at a time from any WeightStore, quantizes it with
// ggml's reference algorithms (ggml-quants.ts) and writes a GGUF file. The plain float file types (f32, f16,
// bf16) follow convert_hf_to_gguf.py's --outtype: 1-D tensors and norms f32, every other tensor the type.
//
// The per-tensor rules follow llama.cpp's llama_tensor_get_type for these file types (tensor names are GGUF's):
// - only 2-D+ tensors named *.weight are quantized, never a norm (*_norm.weight); 1-D tensors keep their type;
// - output.weight (token_embd.weight when the model has no output.weight) gets q6_k, or q8_0 when its rows
//   are not whole blocks of the file type's base type (q8_0 stays q8_0);
// - q4_k_m / q5_k_m: attn_v.weight and ffn_down.weight get q6_k in the layers use_more_bits picks (the first
//   and last eighth of the layers and every third one between); attn_qkv.weight gets q5_k / q6_k;
// - a row that is not whole blocks of the chosen type falls back: q4_k to q5_0, q5_k to q5_1, q6_k to q8_0,
//   and to f16 when even that does not divide it (q8_0/q4_0 rows that are not whole blocks: f16 too).
// tests/quant/llamacpp_quantize.ts (run by tests/quant/ggml.test.ts) checks types and bytes of every tensor against llama.cpp's own
// llama_model_quantize.
// Not reproduced: rules for model sizes/architectures llama.cpp special-cases (70B attn_v, 8-expert MoE,
// Falcon), and the importance matrix (--imatrix).
import { closeSync, openSync, writeSync } from "node:fs";
import { type BlockDType, BLOCK, decodeHalf, dequantize, type DType, encodeHalf, isBlock, storageFromBytes } from "../../graph/dtype.ts";
import type { TensorInfo, WeightStore } from "../../graph/weights.ts";
import { LlmError } from "../errors.ts";
import type { GGUFValue } from "./gguf.ts";
import { ggufHeader, meta } from "./gguf-write.ts";
import { quantizeBlocks } from "./ggml-quants.ts";

export const QUANT_FTYPES = ["q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k"] as const;
export type QuantFtype = (typeof QUANT_FTYPES)[number];
/** Plain conversions (convert_hf_to_gguf.py's --outtype). */
export const FLOAT_FTYPES = ["f32", "f16", "bf16"] as const;
export type FloatFtype = (typeof FLOAT_FTYPES)[number];
/** Every file type `poot quantize --type` writes. */
export const FILE_TYPES = [...FLOAT_FTYPES, ...QUANT_FTYPES] as const;
export type FileType = FloatFtype | QuantFtype;

/** llama_ftype ids written as general.file_type. */
export const FTYPE_ID: Record<FileType, number> = { f32: 0, f16: 1, bf16: 32, q4_0: 2, q8_0: 7, q4_k_m: 15, q5_k_m: 17, q6_k: 18 };
const BASE: Record<QuantFtype, BlockDType> = { q8_0: "q8_0", q4_0: "q4_0", q4_k_m: "q4_k", q5_k_m: "q5_k", q6_k: "q6_k" };
const FALLBACK: Partial<Record<BlockDType, BlockDType>> = { q4_k: "q5_0", q5_k: "q5_1", q6_k: "q8_0" };

export class QuantizeError extends LlmError {}

export interface QuantChoice {
  name: string;
  from: DType;
  to: DType;
  shape: number[];
  /** Why the type differs from the rule's first choice (a fallback for rows that are not whole blocks). */
  note?: string;
}

/** llama.cpp's use_more_bits: the first and last eighth of the layers and every third layer between. */
export function useMoreBits(i: number, n: number): boolean {
  const e = Math.trunc(n / 8);
  return i < e || i >= Math.trunc((7 * n) / 8) || (i - e) % 3 === 2;
}

/** The type each tensor gets (in store order, which the layer counters follow as llama.cpp's do). */
export function quantPlan(tensors: readonly TensorInfo[], ftype: QuantFtype): QuantChoice[] {
  const base = BASE[ftype], mixed = ftype === "q4_k_m" || ftype === "q5_k_m";
  const hasOutput = tensors.some((t) => t.name === "output.weight");
  const nAttnV = tensors.filter((t) => t.name.includes("attn_v.weight") || t.name.includes("attn_qkv.weight")).length;
  const nFfnDown = tensors.filter((t) => t.name.includes("ffn_down")).length;
  let iAttnV = 0, iFfnDown = 0;
  return tensors.map((t): QuantChoice => {
    const keep: QuantChoice = { name: t.name, from: t.dtype, to: t.dtype, shape: t.shape };
    const quantize = t.name.endsWith("weight") && t.shape.length >= 2 && !t.name.includes("_norm.weight") &&
      !t.name.includes("position_embd") && !t.name.includes("token_types");
    if (!quantize) return keep;
    const nx = t.shape[t.shape.length - 1];
    let to: BlockDType = base;
    if (t.name === "output.weight" || (!hasOutput && t.name === "token_embd.weight")) {
      if (nx % BLOCK[base].elems !== 0) to = "q8_0";
      else if (to !== "q8_0") to = "q6_k";
    } else if (t.name.includes("attn_v.weight")) {
      if (mixed && useMoreBits(iAttnV, nAttnV)) to = "q6_k";
      iAttnV++;
    } else if (t.name.includes("attn_qkv.weight")) {
      if (ftype === "q4_k_m") to = "q5_k";
      else if (ftype === "q5_k_m") to = "q6_k";
      iAttnV++;
    } else if (t.name.includes("ffn_down")) {
      if (mixed && useMoreBits(iFfnDown, nFfnDown)) to = "q6_k";
      iFfnDown++;
    }
    if (nx % BLOCK[to].elems === 0) return { ...keep, to };
    const fb = FALLBACK[to];
    if (fb && nx % BLOCK[fb].elems === 0) return { ...keep, to: fb, note: `${nx} columns are not whole ${to} blocks: ${fb} (llama.cpp's fallback)` };
    return { ...keep, to: "f16", note: `${nx} columns are not whole ${fb ?? to} blocks: f16 (llama.cpp's fallback)` };
  });
}

/**
 * The type each tensor gets in a plain float file (convert_hf_to_gguf.py): 1-D tensors and *_norm.weight in f32,
 * every other tensor in `ftype`.
 */
export function floatPlan(tensors: readonly TensorInfo[], ftype: FloatFtype): QuantChoice[] {
  return tensors.map((t) => ({
    name: t.name, from: t.dtype, shape: t.shape, to: t.shape.length <= 1 || t.name.endsWith("_norm.weight") ? "f32" : ftype,
  }));
}

/** The type of each tensor in a file type. */
export function filePlan(tensors: readonly TensorInfo[], ftype: FileType): QuantChoice[] {
  return (FLOAT_FTYPES as readonly string[]).includes(ftype) ? floatPlan(tensors, ftype as FloatFtype) : quantPlan(tensors, ftype as QuantFtype);
}

/** The tensor's values as f32 (from f32, f16, bf16 or a block type). */
function toF32(t: TensorInfo, bytes: Uint8Array): Float32Array {
  const n = t.shape.reduce((a, b) => a * b, 1);
  if (t.dtype === "f32") return Float32Array.from(storageFromBytes("f32", bytes) as Float32Array);
  if (t.dtype === "f16" || t.dtype === "bf16") return decodeHalf(t.dtype, storageFromBytes(t.dtype, bytes) as Uint16Array);
  if (isBlock(t.dtype)) return dequantize(t.dtype, bytes, n);
  throw new QuantizeError(`tensor '${t.name}' is ${t.dtype}: only float and block tensors can be quantized`);
}

function encode(to: DType, x: Float32Array): Uint8Array {
  if (isBlock(to)) return quantizeBlocks(to, x);
  if (to === "f16" || to === "bf16") return new Uint8Array(encodeHalf(to, x).buffer);
  if (to === "f32") return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  throw new QuantizeError(`cannot write ${to}`);
}

export interface QuantizeOptions {
  /** Quantize tensors that are already block-quantized (llama-quantize's --allow-requantize). */
  allowRequantize?: boolean;
  /** Called after each tensor is written. */
  onTensor?: (c: QuantChoice, index: number, total: number) => void;
}

export interface QuantizeReport {
  ftype: FileType;
  choices: QuantChoice[];
  bytesIn: number;
  bytesOut: number;
}

/**
 * Writes `store`'s tensors to a GGUF file at `out`, quantized for `ftype`, with `metadata` copied (its
 * general.file_type and general.quantization_version set as llama-quantize sets them). Reads and writes one
 * tensor at a time; a failure removes nothing it did not create (the caller owns `out`).
 */
export function quantizeToGGUF(
  store: WeightStore, metadata: Iterable<[string, GGUFValue]>, out: string, ftype: FileType, opts: QuantizeOptions = {},
): QuantizeReport {
  const infos = [...store.tensors()];
  const choices = filePlan(infos, ftype);
  if (!opts.allowRequantize) {
    const q = choices.find((c) => isBlock(c.from) && c.from !== c.to);
    if (q) throw new QuantizeError(`tensor '${q.name}' is already quantized (${q.from}); requantizing loses quality (pass --allow-requantize to do it anyway)`);
  }
  const md = new Map(metadata);
  md.set("general.quantization_version", meta.u32(2));
  md.set("general.file_type", meta.u32(FTYPE_ID[ftype]));
  const align = md.get("general.alignment");
  const alignment = align && align.type === "u32" ? align.value as number : 32;
  const sizes = choices.map((c, i) => {
    const n = c.shape.reduce((a, b) => a * b, 1);
    return c.to === c.from ? infos[i].byteLength : isBlock(c.to) ? (n / BLOCK[c.to].elems) * BLOCK[c.to].bytes : n * (c.to === "f32" ? 4 : 2);
  });
  const { header, offsets } = ggufHeader({
    metadata: md,
    alignment,
    tensors: choices.map((c, i) => ({ name: c.name, dtype: c.to, shape: c.shape, byteLength: sizes[i] })),
  });
  const fd = openSync(out, "w");
  let bytesIn = 0, bytesOut = header.length;
  try {
    writeSync(fd, header);
    choices.forEach((c, i) => {
      const info = infos[i], src = store.bytes(c.name);
      bytesIn += src.byteLength;
      const data = c.to === c.from ? src : encode(c.to, toF32(info, src));
      const end = i + 1 < choices.length ? offsets[i + 1] : Math.ceil(data.length / alignment) * alignment + offsets[i];
      writeAll(fd, data);
      writeAll(fd, new Uint8Array(end - offsets[i] - data.length));
      bytesOut += end - offsets[i];
      opts.onTensor?.(c, i, choices.length);
    });
  } finally {
    closeSync(fd);
  }
  return { ftype, choices, bytesIn, bytesOut };
}

function writeAll(fd: number, b: Uint8Array): void {
  for (let off = 0; off < b.length;) off += writeSync(fd, b, off, b.length - off);
}
