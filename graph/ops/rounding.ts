// The constants of tier-2 bounds (graph/tolerance.ts states the theory): f32's unit roundoff, the subnormal
// flush allowance and γ(n). A module of its own so that the composite bounds the op records name
// (graph/tolerance_composite.ts) load without the registry.
import { decodeHalf, type DType, type Storage } from "../dtype.ts";

/** Unit roundoff of f32. */
export const U = 2 ** -24;
/** Absolute allowance per float op for a device that flushes subnormals. */
export const FTZ = 2 ** -125;

/** γ(n) = n·u / (1 − n·u). */
export function gamma(n: number): number {
  return n * U < 1 ? (n * U) / (1 - n * U) : Infinity;
}

/** A float storage's values as numbers (f16 / bf16 decoded). */
export function floats(d: DType, s: Storage): ArrayLike<number> {
  return d === "f16" || d === "bf16" ? decodeHalf(d, s as Uint16Array) : s;
}
