// CPU conversion between f32 and the storage types a GGUF writer or test needs: f16, bf16 and every block
// type, with ggml's rounding (quantize_row_*_ref in ggml-quants.ts, GGML_FP32_TO_BF16). Not a kernel: it builds
// synthetic checkpoints and checks what a reader returns.

import { type BlockDType, dequantize as dequantBlocks, isBlock } from "../../graph/dtype.ts";
import { quantizeBlocks } from "./ggml-quants.ts";
import {
  bf16ToF32 as bf16BitsToF32, f16ToF32 as f16BitsToF32, f32ToBf16 as f32ToBf16Bits, f32ToF16 as f32ToF16Bits,
} from "../../graph/half.ts";

// The f16 / bf16 conversions are graph/half.ts's (the host's one copy), under the names GGUF code uses.
export { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits };

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
