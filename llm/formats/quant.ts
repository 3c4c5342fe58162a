// CPU conversion between f32 and the storage types a GGUF writer or test needs: f16, bf16 and every block
// type, with ggml's rounding (quantize_row_*_ref in ggml-quants.ts, GGML_FP32_TO_BF16). Not a kernel: it builds
// synthetic checkpoints and checks what a reader returns.

import { type BlockDType, dequantize as dequantBlocks, isBlock } from "../../graph/dtype.ts";
import { quantizeBlocks } from "./ggml-quants.ts";

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

/** f32 → IEEE half bits, round to nearest even (overflow → inf, NaN kept). */
export function f32ToF16Bits(x: number): number {
  f32buf[0] = x;
  const u = u32buf[0];
  const sign = (u >>> 16) & 0x8000;
  const exp = (u >>> 23) & 0xff;
  let mant = u & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 | (mant >>> 13) : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let r = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    if (rest > half || (rest === half && (r & 1))) r++;
    return sign | r;
  }
  let r = mant >>> 13;
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (r & 1))) {
    r++;
    if (r === 0x400) {
      r = 0;
      e++;
      if (e >= 0x1f) return sign | 0x7c00;
    }
  }
  return sign | (e << 10) | r;
}

/** IEEE half bits → f32 value. */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : sign * Infinity;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** f32 → bf16 bits, round to nearest even; NaN stays a quiet NaN (as GGML_FP32_TO_BF16). */
export function f32ToBf16Bits(x: number): number {
  f32buf[0] = x;
  const u = u32buf[0];
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return ((u + (0x7fff + ((u >>> 16) & 1))) >>> 16) & 0xffff;
}

export function bf16BitsToF32(h: number): number {
  u32buf[0] = h << 16;
  return f32buf[0];
}

/** The storage types this module converts (block types by ggml's reference quantizers, ggml-quants.ts). */
export type QuantType = "f32" | "f16" | "bf16" | BlockDType;

/** Encodes f32 values as `type` bytes (block types need a multiple of 32 values). */
export function quantize(type: QuantType, x: ArrayLike<number>): Uint8Array {
  const n = x.length;
  if (isBlock(type)) return quantizeBlocks(type, x);
  switch (type) {
    case "f32": {
      const out = new Uint8Array(n * 4);
      new Float32Array(out.buffer).set(x);
      return out;
    }
    case "f16":
    case "bf16": {
      const out = new Uint8Array(n * 2);
      const h = new Uint16Array(out.buffer);
      const f = type === "f16" ? f32ToF16Bits : f32ToBf16Bits;
      for (let i = 0; i < n; i++) h[i] = f(x[i]);
      return out;
    }
  }
}

/** Decodes `count` values of `type` from bytes into f32 (block types: the oracle's ggml definitions). */
export function dequantize(type: QuantType, bytes: Uint8Array, count: number): Float32Array {
  if (isBlock(type)) return dequantBlocks(type, bytes, count);
  const out = new Float32Array(count);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (type) {
    case "f32":
      for (let i = 0; i < count; i++) out[i] = dv.getFloat32(i * 4, true);
      break;
    case "f16":
      for (let i = 0; i < count; i++) out[i] = f16BitsToF32(dv.getUint16(i * 2, true));
      break;
    case "bf16":
      for (let i = 0; i < count; i++) out[i] = bf16BitsToF32(dv.getUint16(i * 2, true));
      break;
  }
  return out;
}
