// Helpers the generated JavaScript kernels call: 16-bit float conversions, saturating casts, bit casts and the
// typed errors a kernel raises. Kept apart from the code generator so they are plain, testable functions.
import { bf16Lut, f16Lut, f32ToBf16 as f2bf, f32ToF16 as f2h } from "../../graph/half.ts";

/** A kernel's `check` failed (code >= 1), or, in debug mode, it touched memory outside a binding (code 0). */
export class JsKernelFault extends Error {
  override name = "JsKernelFault";
  constructor(readonly kernel: string, readonly code: number, readonly detail = "") {
    super(`kernel ${kernel} faulted with code ${code}${detail ? `: ${detail}` : ""}`);
  }
}
/** Fault code the JS renderer's debug mode reports for an out-of-bounds or misaligned access. */
export const OOB_CODE = 0;

const F32S = new Float32Array(1);
const U32S = new Uint32Array(F32S.buffer);
const I32S = new Int32Array(F32S.buffer);

/** f16 bits -> f32 value, for every 16-bit pattern (loads are one table lookup). */
export const H2F: Float32Array = f16Lut();
/** bf16 bits -> f32 value (the high half of the f32 bits). */
export const BF2F: Float32Array = bf16Lut();
/** f32 -> f16 / bf16 bits, round to nearest even (graph/half.ts; kernels pass values that are already f32). */
export { f2bf, f2h };
/** Rounds to the nearest f16 value (ties to even). */
export const h16: (x: number) => number = (Math as unknown as { f16round?: (x: number) => number }).f16round ??
  ((x: number) => H2F[f2h(Math.fround(x))]);

/** float -> i32: truncates toward zero, saturates, NaN -> 0 (what PTX cvt.rzi.sat and SPIR-V robust code agree on). */
export function toI32(x: number): number {
  return x >= 2147483647 ? 2147483647 : x <= -2147483648 ? -2147483648 : x | 0;
}
/** float -> u32: truncates toward zero, saturates, NaN -> 0. */
export function toU32(x: number): number {
  return x >= 4294967295 ? 4294967295 : x > 0 ? x >>> 0 : 0;
}
export function bitsU(x: number): number {
  F32S[0] = x;
  return U32S[0];
}
export function bitsI(x: number): number {
  F32S[0] = x;
  return I32S[0];
}
export function fromBits(x: number): number {
  U32S[0] = x >>> 0;
  return F32S[0];
}
