// What the lowerers of kernels/lower/ share: the error they throw, a graph dtype as a kernel's storage,
// compute or index type, and small shape helpers. The lowering itself and its context are kernels/lower.ts.
import { type DType, isBlock } from "../../graph/dtype.ts";
import { type Node, numel } from "../../graph/ir.ts";
import { computeOf, type CType, type EType } from "../ir.ts";
import type { LowerContext } from "../lower.ts";

export class LoweringError extends Error {
  override name = "LoweringError";
}

/** Storage element type of a graph dtype (bool is stored as bytes). */
export function etype(d: DType): EType {
  if (d === "bool") return "u8";
  if (isBlock(d)) throw new LoweringError(`${d} is not a plain element type`);
  return d;
}
/** Compute type of a graph dtype (what a kernel's arithmetic runs in). */
export function ctype(d: DType): CType {
  if (d === "bool") return "bool";
  if (isBlock(d)) throw new LoweringError(`${d} has no compute type`);
  return computeOf(d);
}
/** Index type of an index tensor (positions, ids, write maps). */
export function itype(d: DType): "u32" | "i32" {
  if (d === "i32" || d === "u32") return d;
  throw new LoweringError(`index tensors must be i32 or u32, got ${d}`);
}

/** A norm weight's (or an output's) float type. */
export function floatOf(n: Node): "f32" | "f16" | "bf16" {
  if (n.dtype === "f32" || n.dtype === "f16" || n.dtype === "bf16") return n.dtype;
  throw new LoweringError(`norm weight of ${n.dtype}`);
}

/** [product before axis, axis length, product after]. */
export function around(shape: number[], axis: number): [number, number, number] {
  return [numel(shape.slice(0, axis)), shape[axis], numel(shape.slice(axis + 1))];
}

/** Rows of a tensor read as rows of its last axis. */
export const rowsOf = (x: Node): number => numel(x.shape) / x.shape[x.shape.length - 1];
/** Length of a tensor's last axis. */
export const last = (x: Node): number => x.shape[x.shape.length - 1];

/** CompileOptions.attentionFuse, resolved: whether split reductions combine in their own last team. */
export function fusesTails(cx: LowerContext): boolean {
  return cx.opts.attentionFuse ?? cx.caps.dispatchGap;
}
