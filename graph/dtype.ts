// Element types of the graph. Packed block types (q8_0 ...) are GGUF's; only a dequantizing consumer reads them.
//
// Storage in the oracle (and what `storageFor` allocates): f32 Float32Array; f16 and bf16 Uint16Array holding
// the raw bits; i32 Int32Array; u32 Uint32Array; i8 Int8Array; u8 Uint8Array; bool Uint8Array (0 or 1);
// block types Uint8Array holding the packed bytes.
import { bf16ToF32, f16Lut, f16ToF32, f32Bits, f32FromBits, f32ToBf16, f32ToF16 } from "./half.ts";

/** Plain element types a kernel can compute with or store. */
export type ScalarDType = "f32" | "f16" | "bf16" | "i32" | "u32" | "i8" | "u8" | "bool";
/** GGUF block-quantized types: bytes laid out in blocks along the innermost dimension. */
export type BlockDType = "q8_0" | "q4_0" | "q4_1" | "q5_0" | "q5_1" | "q4_k" | "q5_k" | "q6_k";
export type DType = ScalarDType | BlockDType;

/** Block geometry of each packed type: elements per block and bytes per block (GGUF's definitions). */
export const BLOCK: Record<BlockDType, { elems: number; bytes: number }> = {
  q8_0: { elems: 32, bytes: 34 },
  q4_0: { elems: 32, bytes: 18 },
  q4_1: { elems: 32, bytes: 20 },
  q5_0: { elems: 32, bytes: 22 },
  q5_1: { elems: 32, bytes: 24 },
  q4_k: { elems: 256, bytes: 144 },
  q5_k: { elems: 256, bytes: 176 },
  q6_k: { elems: 256, bytes: 210 },
};

/** Bytes per element of a scalar type (bool is stored as one byte). */
export const SIZE: Record<ScalarDType, number> = {
  f32: 4, f16: 2, bf16: 2, i32: 4, u32: 4, i8: 1, u8: 1, bool: 1,
};

export function isBlock(d: DType): d is BlockDType {
  return d in BLOCK;
}

/** f32, f16 and bf16: the types float arithmetic applies to. */
export function isFloat(d: DType): d is "f32" | "f16" | "bf16" {
  return d === "f32" || d === "f16" || d === "bf16";
}

/** i32, u32, i8, u8: two's-complement integers that wrap on overflow. */
export function isInt(d: DType): d is "i32" | "u32" | "i8" | "u8" {
  return d === "i32" || d === "u32" || d === "i8" || d === "u8";
}

/** Bytes taken by `count` elements of `d` (count must be a whole number of blocks for block types). */
export function byteSize(d: DType, count: number): number {
  if (isBlock(d)) {
    const b = BLOCK[d];
    if (count % b.elems !== 0) throw new RangeError(`${count} elements is not a whole number of ${d} blocks`);
    return (count / b.elems) * b.bytes;
  }
  return count * SIZE[d];
}

/** The typed array the oracle stores a dtype in (see the header comment). */
export type Storage = Float32Array | Uint16Array | Int32Array | Uint32Array | Int8Array | Uint8Array;

/** A zeroed storage array for `count` elements of `d` (bytes for block types). */
export function storageFor(d: DType, count: number): Storage {
  switch (d) {
    case "f32": return new Float32Array(count);
    case "f16": case "bf16": return new Uint16Array(count);
    case "i32": return new Int32Array(count);
    case "u32": return new Uint32Array(count);
    case "i8": return new Int8Array(count);
    case "u8": case "bool": return new Uint8Array(count);
    default: return new Uint8Array(byteSize(d, count));
  }
}

/** Views `bytes` as the storage of `d` without copying when aligned, copying otherwise. */
export function storageFromBytes(d: DType, bytes: Uint8Array): Storage {
  const size = isBlock(d) ? 1 : SIZE[d];
  if (size === 1) return d === "i8" ? new Int8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) : bytes;
  if (bytes.byteLength % size !== 0) throw new RangeError(`${bytes.byteLength} bytes is not a whole number of ${d}`);
  const src = bytes.byteOffset % size === 0 ? bytes : bytes.slice();
  const n = src.byteLength / size;
  switch (d) {
    case "f32": return new Float32Array(src.buffer, src.byteOffset, n);
    case "i32": return new Int32Array(src.buffer, src.byteOffset, n);
    case "u32": return new Uint32Array(src.buffer, src.byteOffset, n);
    default: return new Uint16Array(src.buffer, src.byteOffset, n);
  }
}

// ---------------------------------------------------------------- f16 / bf16 <-> f32 (round to nearest even)
// Written once in graph/half.ts (the host's only copy); re-exported here, where the storage types are.

export { bf16ToF32, f16ToF32, f32Bits, f32FromBits, f32ToBf16, f32ToF16 };

/** Decodes f16 or bf16 bits into f32 values. */
export function decodeHalf(d: "f16" | "bf16", src: Uint16Array, dst = new Float32Array(src.length)): Float32Array {
  if (d === "f16") {
    const lut = f16Lut();
    for (let i = 0; i < src.length; i++) dst[i] = lut[src[i]];
  } else {
    const u = new Uint32Array(dst.buffer, dst.byteOffset, dst.length);
    for (let i = 0; i < src.length; i++) u[i] = src[i] << 16;
  }
  return dst;
}

/** Encodes f32 values as f16 or bf16 bits, rounding to nearest even. */
export function encodeHalf(
  d: "f16" | "bf16",
  src: ArrayLike<number>,
  dst = new Uint16Array(src.length),
): Uint16Array {
  const f = d === "f16" ? f32ToF16 : f32ToBf16;
  for (let i = 0; i < src.length; i++) dst[i] = f(src[i]);
  return dst;
}

// ---------------------------------------------------------------- GGUF block dequantization
//
// Exactly ggml's dequantize_row_* read as ISO C: every float operation is rounded to f32 on its own (no fused
// multiply-add). Each returns `count` f32 values from `count / block.elems` consecutive blocks starting at byte 0.

function halfAt(b: Uint8Array, o: number): number {
  return f16Lut()[b[o] | (b[o + 1] << 8)];
}

function dequantQ8_0(b: Uint8Array, nb: number, y: Float32Array): void {
  for (let i = 0, o = 0; i < nb; i++, o += 34) {
    const d = halfAt(b, o);
    for (let j = 0; j < 32; j++) y[i * 32 + j] = ((b[o + 2 + j] << 24) >> 24) * d;
  }
}

function dequantQ4_0(b: Uint8Array, nb: number, y: Float32Array): void {
  for (let i = 0, o = 0; i < nb; i++, o += 18) {
    const d = halfAt(b, o);
    for (let j = 0; j < 16; j++) {
      const q = b[o + 2 + j];
      y[i * 32 + j] = ((q & 0x0f) - 8) * d;
      y[i * 32 + j + 16] = ((q >> 4) - 8) * d;
    }
  }
}

function dequantQ4_1(b: Uint8Array, nb: number, y: Float32Array): void {
  const fr = Math.fround;
  for (let i = 0, o = 0; i < nb; i++, o += 20) {
    const d = halfAt(b, o), m = halfAt(b, o + 2);
    for (let j = 0; j < 16; j++) {
      const q = b[o + 4 + j];
      y[i * 32 + j] = fr((q & 0x0f) * d) + m;
      y[i * 32 + j + 16] = fr((q >> 4) * d) + m;
    }
  }
}

// q5_0 / q5_1: the fifth bit of element j is bit j of the 32-bit qh (elements j + 16: bit j + 16).
function dequantQ5(b: Uint8Array, nb: number, y: Float32Array, withMin: boolean): void {
  const fr = Math.fround, size = withMin ? 24 : 22, hAt = withMin ? 4 : 2;
  for (let i = 0, o = 0; i < nb; i++, o += size) {
    const d = halfAt(b, o), m = withMin ? halfAt(b, o + 2) : 0;
    const qh = (b[o + hAt] | (b[o + hAt + 1] << 8) | (b[o + hAt + 2] << 16) | (b[o + hAt + 3] << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const q = b[o + hAt + 4 + j];
      const x0 = (q & 0x0f) | (((qh >>> j) << 4) & 0x10);
      const x1 = (q >> 4) | ((qh >>> (j + 12)) & 0x10);
      if (withMin) {
        y[i * 32 + j] = fr(x0 * d) + m;
        y[i * 32 + j + 16] = fr(x1 * d) + m;
      } else {
        y[i * 32 + j] = (x0 - 16) * d;
        y[i * 32 + j + 16] = (x1 - 16) * d;
      }
    }
  }
}

// 6-bit scale and min of sub-block j of a q4_k block (ggml's get_scale_min_k4).
function scaleMinK4(b: Uint8Array, s: number, j: number): [number, number] {
  if (j < 4) return [b[s + j] & 63, b[s + j + 4] & 63];
  return [
    (b[s + j + 4] & 0x0f) | ((b[s + j - 4] >> 6) << 4),
    (b[s + j + 4] >> 4) | ((b[s + j] >> 6) << 4),
  ];
}

function dequantQ4_K(b: Uint8Array, nb: number, y: Float32Array): void {
  const fr = Math.fround;
  for (let i = 0, o = 0; i < nb; i++, o += 144) {
    const d = halfAt(b, o);
    const dmin = halfAt(b, o + 2);
    const s = o + 4; // scales[12]
    let q = o + 16; // qs[128]
    let yi = i * 256;
    for (let j = 0, is = 0; j < 256; j += 64, is += 2) {
      const [sc1, m1q] = scaleMinK4(b, s, is);
      const [sc2, m2q] = scaleMinK4(b, s, is + 1);
      const d1 = fr(d * sc1), m1 = fr(dmin * m1q);
      const d2 = fr(d * sc2), m2 = fr(dmin * m2q);
      for (let l = 0; l < 32; l++) y[yi++] = fr(d1 * (b[q + l] & 0x0f)) - m1;
      for (let l = 0; l < 32; l++) y[yi++] = fr(d2 * (b[q + l] >> 4)) - m2;
      q += 32;
    }
  }
}

function dequantQ5_K(b: Uint8Array, nb: number, y: Float32Array): void {
  const fr = Math.fround;
  for (let i = 0, o = 0; i < nb; i++, o += 176) {
    const d = halfAt(b, o);
    const dmin = halfAt(b, o + 2);
    const s = o + 4, qh = o + 16; // scales[12], qh[32]
    let ql = o + 48; // qs[128]
    let yi = i * 256;
    for (let j = 0, is = 0; j < 4; j++, is += 2) {
      const [sc1, m1q] = scaleMinK4(b, s, is);
      const [sc2, m2q] = scaleMinK4(b, s, is + 1);
      const d1 = fr(d * sc1), m1 = fr(dmin * m1q);
      const d2 = fr(d * sc2), m2 = fr(dmin * m2q);
      const u1 = 1 << (2 * j), u2 = 2 << (2 * j);
      for (let l = 0; l < 32; l++) y[yi++] = fr(d1 * ((b[ql + l] & 0x0f) + (b[qh + l] & u1 ? 16 : 0))) - m1;
      for (let l = 0; l < 32; l++) y[yi++] = fr(d2 * ((b[ql + l] >> 4) + (b[qh + l] & u2 ? 16 : 0))) - m2;
      ql += 32;
    }
  }
}

function dequantQ6_K(b: Uint8Array, nb: number, y: Float32Array): void {
  const fr = Math.fround;
  for (let i = 0, o = 0; i < nb; i++, o += 210) {
    const d = halfAt(b, o + 208);
    let ql = o, qh = o + 128, sc = o + 192;
    let yi = i * 256;
    for (let n = 0; n < 256; n += 128) {
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const h = b[qh + l];
        const q1 = ((b[ql + l] & 0x0f) | ((h & 3) << 4)) - 32;
        const q2 = ((b[ql + l + 32] & 0x0f) | (((h >> 2) & 3) << 4)) - 32;
        const q3 = ((b[ql + l] >> 4) | (((h >> 4) & 3) << 4)) - 32;
        const q4 = ((b[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32;
        y[yi + l] = fr(d * ((b[sc + is] << 24) >> 24)) * q1;
        y[yi + l + 32] = fr(d * ((b[sc + is + 2] << 24) >> 24)) * q2;
        y[yi + l + 64] = fr(d * ((b[sc + is + 4] << 24) >> 24)) * q3;
        y[yi + l + 96] = fr(d * ((b[sc + is + 6] << 24) >> 24)) * q4;
      }
      yi += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

const DEQUANT: Record<BlockDType, (b: Uint8Array, nb: number, y: Float32Array) => void> = {
  q8_0: dequantQ8_0,
  q4_0: dequantQ4_0,
  q4_1: dequantQ4_1,
  q5_0: (b, nb, y) => dequantQ5(b, nb, y, false),
  q5_1: (b, nb, y) => dequantQ5(b, nb, y, true),
  q4_k: dequantQ4_K,
  q5_k: dequantQ5_K,
  q6_k: dequantQ6_K,
};

/**
 * Dequantizes `count` elements (a whole number of blocks) of block type `d` from `bytes` (starting at its first
 * byte) into f32, exactly as ggml defines each type.
 */
export function dequantize(d: BlockDType, bytes: Uint8Array, count: number, out = new Float32Array(count)): Float32Array {
  const need = byteSize(d, count);
  if (bytes.byteLength < need) throw new RangeError(`${d}: ${count} elements need ${need} bytes, got ${bytes.byteLength}`);
  DEQUANT[d](bytes, count / BLOCK[d].elems, out);
  return out;
}
