// The oracle's shared arithmetic (graph/eval_ops.ts states its rules): f32 views of storage, the accumulation
// orders of sums and dots, and the strided copy every movement op is. The op records' oracles use these.
import { decodeHalf, dequantize, type DType, isBlock, type Storage } from "../dtype.ts";
import { numel } from "../ir.ts";
import type { AccumulateOrder } from "./record.ts";

export const fr = Math.fround;

export function isHalf(d: DType): d is "f16" | "bf16" {
  return d === "f16" || d === "bf16";
}

/** f32 values of a float storage (a view for f32, a decoded copy for f16/bf16, dequantized for blocks). */
export function asF32(d: DType, s: Storage, count: number): Float32Array {
  if (d === "f32") return s as Float32Array;
  if (d === "f16" || d === "bf16") return decodeHalf(d, s as Uint16Array);
  if (isBlock(d)) return dequantize(d, s as Uint8Array, count);
  const out = new Float32Array(s.length);
  out.set(s);
  return out;
}

// Weights converted to f32 once per storage object.
const f32Cache = new WeakMap<object, Float32Array>();
/** f32 values of a matmul weight, converted once per storage object (f32 storage is returned as it is). */
export function weightF32(d: DType, s: Storage, count: number): Float32Array {
  if (d === "f32") return s as Float32Array;
  let f = f32Cache.get(s);
  if (!f) f32Cache.set(s, f = asF32(d, s, count));
  return f;
}

/** f32 sum of t[at + i·step], i < len, in a non-oracle order (see AccumulateOrder). */
export function sumOrdered(t: ArrayLike<number>, at: number, step: number, len: number, order: AccumulateOrder): number {
  if (order === "reverse") {
    let acc = 0;
    for (let i = len - 1; i >= 0; i--) acc = fr(acc + t[at + i * step]);
    return acc;
  }
  if (order === "pairwise") {
    if (len === 1) return fr(t[at]);
    const h = len >> 1;
    return fr(sumOrdered(t, at, step, h, order) + sumOrdered(t, at + h * step, step, len - h, order));
  }
  let acc = 0;
  for (let i = 0; i < len; i++) acc = fr(acc + t[at + i * step]);
  return acc;
}

/** Copies an N-d region: element at index I goes from src[so + I·ss] to dst[doff + I·ds]. */
export function copyStrided(
  src: Storage, so: number, ss: readonly number[], shape: readonly number[],
  dst: Storage, doff: number, ds: readonly number[],
): void {
  const r = shape.length;
  if (r === 0) {
    dst[doff] = src[so];
    return;
  }
  const last = r - 1, nL = shape[last], sL = ss[last], dL = ds[last];
  const outer = numel(shape) / nL;
  const idx = new Array<number>(r).fill(0);
  let s = so, d = doff;
  for (let t = 0; t < outer; t++) {
    if (sL === 1 && dL === 1) for (let i = 0; i < nL; i++) dst[d + i] = src[s + i];
    else for (let i = 0; i < nL; i++) dst[d + i * dL] = src[s + i * sL];
    for (let ax = last - 1; ax >= 0; ax--) {
      idx[ax]++;
      s += ss[ax];
      d += ds[ax];
      if (idx[ax] < shape[ax]) break;
      s -= ss[ax] * shape[ax];
      d -= ds[ax] * shape[ax];
      idx[ax] = 0;
    }
  }
}
