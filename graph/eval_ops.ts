// The oracle's kernels: one function per primitive op over storage arrays (graph/dtype.ts). The arithmetic
// is f32: every float result is rounded to f32 as it is stored (a Float32Array store rounds to nearest even), and
// accumulators are rounded with Math.fround after every step. f16/bf16 elementwise ops compute on the f32
// values and round once to the half type. Integer ops wrap (two's complement).
//
// Accumulation order (the tier-2 tolerance in tolerance.ts is derived from it): reduce-sum and every matmul dot
// start from +0 and add terms one at a time in increasing index order, acc = f32(acc + f32(a·b)); no fused
// multiply-add. Transcendentals (exp, log, sin, cos, tanh, pow) are the host's double Math functions rounded to
// f32; rsqrt is f32(1/√x) and recip f32(1/x), each with one rounding.
import { BLOCK, type BlockDType, decodeHalf, dequantize, type DType, encodeHalf, isBlock, type Storage, storageFor } from "./dtype.ts";
import { type BinaryOp, GraphError, type Node, numel, stridesOf, type UnaryOp } from "./ir.ts";
import { BINARY, COMPARE, UNARY } from "./ops.ts";
import { UNARY_OPS } from "./unary.ts";
import { BINARY_OPS } from "./binary.ts";
import { sampleRows } from "./sample.ts";
import { logprobRows, processRows } from "./logits.ts";

const fr = Math.fround;

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

function fromF32(d: DType, f: Float32Array): Storage {
  return d === "f32" ? f : encodeHalf(d as "f16" | "bf16", f);
}

/**
 * How matmul and reduce-sum accumulate. "sequential" is the oracle. The others emulate a device's
 * reassociation for testing tier-2 tolerances: "reverse" index order, "pairwise" (balanced halves, as a tree
 * reduction), "fma" (sequential with fused multiply-add: one rounding per term).
 */
export type AccumulateOrder = "sequential" | "reverse" | "pairwise" | "fma";

/** Runs one primitive node on its input values. `ins` are the input nodes (their dtype and shape). */
export function runPrimitive(n: Node, ins: Node[], v: Storage[], order: AccumulateOrder = "sequential"): Storage {
  const op = n.op;
  if (UNARY.has(op)) return unary(n, ins[0], v[0]);
  if (BINARY.has(op)) return binary(n, ins[0], v[0], v[1]);
  if (COMPARE.has(op)) return compare(n, ins[0], v[0], v[1]);
  switch (op) {
    case "literal": return literal(n);
    case "iota": return iota(n);
    case "select": {
      const [c, a, b] = v;
      const o = storageFor(n.dtype, a.length);
      for (let i = 0; i < o.length; i++) o[i] = c[i] ? a[i] : b[i];
      return o;
    }
    case "cast": return cast(n, ins[0], v[0]);
    case "reduce": return reduce(n, ins[0], v[0], order);
    case "argmax": return argmax(n, ins[0], v[0]);
    case "sample": return sampleRows(v[0] as Float32Array, v[1] as Uint32Array, ins[0].shape[0], ins[0].shape[1]);
    case "logits_process": return processRows(v[0] as Float32Array, v[1] as Uint32Array, v[2] as Uint32Array, ins[0].shape[0], ins[0].shape[1], v[3] as Uint32Array | undefined);
    case "logprobs": return logprobRows(v[0] as Float32Array, v[1] as Int32Array, v[2] as Uint32Array, ins[0].shape[0], ins[0].shape[1], n.attrs.n!);
    case "matmul": return matmul(ins[0], ins[1], v[0], v[1], order);
    case "gather": return gather(n, ins[0], v[0], v[1]);
    case "reshape": return v[0];
    case "permute": {
      const x = ins[0], st = stridesOf(x.shape);
      const o = storageFor(n.dtype, numel(n.shape));
      copyStrided(v[0], 0, n.attrs.perm!.map((p) => st[p]), n.shape, o, 0, stridesOf(n.shape));
      return o;
    }
    case "broadcast": {
      const x = ins[0], st = stridesOf(x.shape), r = n.shape.length, k = r - x.shape.length;
      const ss = n.shape.map((_, i) => (i < k || x.shape[i - k] === 1 ? 0 : st[i - k]));
      const o = storageFor(n.dtype, numel(n.shape));
      copyStrided(v[0], 0, ss, n.shape, o, 0, stridesOf(n.shape));
      return o;
    }
    case "slice": {
      const st = stridesOf(ins[0].shape);
      let off = 0;
      for (let i = 0; i < st.length; i++) off += n.attrs.start![i] * st[i];
      const o = storageFor(n.dtype, numel(n.shape));
      copyStrided(v[0], off, st, n.shape, o, 0, stridesOf(n.shape));
      return o;
    }
    case "concat": {
      const o = storageFor(n.dtype, numel(n.shape)), ds = stridesOf(n.shape), ax = n.attrs.axis!;
      let at = 0;
      for (let j = 0; j < ins.length; j++) {
        copyStrided(v[j], 0, stridesOf(ins[j].shape), ins[j].shape, o, at * ds[ax], ds);
        at += ins[j].shape[ax];
      }
      return o;
    }
    case "dynamic_update_slice": {
      const [t, u] = ins, ax = n.attrs.axis!;
      const off = Number(v[2][0]);
      if (!(off >= 0 && off + u.shape[ax] <= t.shape[ax])) {
        throw new GraphError("range", `offset ${off} + ${u.shape[ax]} rows exceeds ${t.shape[ax]} along axis ${ax}`, n);
      }
      const o = v[0].slice();
      const ds = stridesOf(t.shape);
      copyStrided(v[1], 0, stridesOf(u.shape), u.shape, o, off * ds[ax], ds);
      return o;
    }
    case "scatter_update": {
      const [t, u] = ins, idx = v[2], rows = t.shape[0], len = numel(t.shape.slice(1));
      const o = v[0].slice(), src = v[1];
      for (let r = 0; r < u.shape[0]; r++) {
        const i = Number(idx[r]);
        if (i < 0 && ins[2].dtype === "i32") continue;
        if (i >= rows || i < 0) throw new GraphError("range", `row index ${i} at ${r} is not below ${rows}`, n);
        o.set(src.subarray(r * len, (r + 1) * len), i * len);
      }
      return o;
    }
  }
  if ((op === "all_reduce" || op === "all_gather") && n.attrs.ranks === 1) return v[0]; // a group of one
  if (op === "all_reduce" || op === "all_gather") {
    throw new GraphError("attr", `${op} over ${n.attrs.ranks} ranks needs the other ranks: evaluate the group (graph/stages.ts evalGroup)`, n);
  }
  throw new GraphError("attr", `the oracle has no kernel for ${op} (composites are expanded first)`, n);
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

function literal(n: Node): Storage {
  if (n.attrs.data) return n.attrs.data;
  const o = storageFor(n.dtype, numel(n.shape));
  const v = n.attrs.value!;
  o.fill(n.dtype === "f16" || n.dtype === "bf16" ? encodeHalf(n.dtype, [v])[0] : v);
  return o;
}

function iota(n: Node): Storage {
  const o = storageFor(n.dtype, numel(n.shape));
  const ax = n.attrs.axis!, st = stridesOf(n.shape)[ax], len = n.shape[ax];
  const half = n.dtype === "f16" || n.dtype === "bf16";
  for (let i = 0; i < o.length; i++) {
    const x = Math.floor(i / st) % len;
    o[i] = half ? encodeHalf(n.dtype as "f16", [x])[0] : x;
  }
  return o;
}

function isHalf(d: DType): d is "f16" | "bf16" {
  return d === "f16" || d === "bf16";
}

function unary(n: Node, x: Node, xs: Storage): Storage {
  const half = isHalf(x.dtype);
  const a = half ? decodeHalf(x.dtype as "f16", xs as Uint16Array) : xs;
  const o = half || x.dtype === "f32" ? new Float32Array(a.length) : storageFor(n.dtype, a.length);
  const len = a.length;
  const f = UNARY_OPS[n.op as UnaryOp].f;
  for (let i = 0; i < len; i++) o[i] = f(a[i]);
  return half ? fromF32(n.dtype, o as Float32Array) : o;
}

function binary(n: Node, x: Node, xs: Storage, ys: Storage): Storage {
  const d = x.dtype, half = isHalf(d);
  const a = half ? decodeHalf(d as "f16", xs as Uint16Array) : xs;
  const b = half ? decodeHalf(d as "f16", ys as Uint16Array) : ys;
  const float = half || d === "f32";
  const o = float ? new Float32Array(a.length) : storageFor(d, a.length);
  const len = a.length;
  const r = BINARY_OPS[n.op as BinaryOp], f = float ? r.f : r.int ?? r.f;
  for (let i = 0; i < len; i++) o[i] = f(a[i], b[i]);
  return half ? fromF32(d, o as Float32Array) : o;
}

function compare(n: Node, x: Node, xs: Storage, ys: Storage): Storage {
  const half = isHalf(x.dtype);
  const a = half ? decodeHalf(x.dtype as "f16", xs as Uint16Array) : xs;
  const b = half ? decodeHalf(x.dtype as "f16", ys as Uint16Array) : ys;
  const o = new Uint8Array(a.length), len = a.length;
  switch (n.op) {
    case "eq": for (let i = 0; i < len; i++) o[i] = a[i] === b[i] ? 1 : 0; break;
    case "ne": for (let i = 0; i < len; i++) o[i] = a[i] !== b[i] ? 1 : 0; break;
    case "lt": for (let i = 0; i < len; i++) o[i] = a[i] < b[i] ? 1 : 0; break;
    case "le": for (let i = 0; i < len; i++) o[i] = a[i] <= b[i] ? 1 : 0; break;
    case "gt": for (let i = 0; i < len; i++) o[i] = a[i] > b[i] ? 1 : 0; break;
    case "ge": for (let i = 0; i < len; i++) o[i] = a[i] >= b[i] ? 1 : 0; break;
  }
  return o;
}

const INT_RANGE: Record<string, [number, number]> = {
  i32: [-2147483648, 2147483647], u32: [0, 4294967295], i8: [-128, 127], u8: [0, 255],
};

function cast(n: Node, x: Node, xs: Storage): Storage {
  const from = x.dtype, to = n.dtype;
  const a = isHalf(from) ? decodeHalf(from, xs as Uint16Array) : xs;
  const len = a.length;
  if (to === "f32") {
    const o = new Float32Array(len);
    o.set(a);
    return o;
  }
  if (isHalf(to)) return encodeHalf(to, a);
  const o = storageFor(to, len);
  if (to === "bool") {
    for (let i = 0; i < len; i++) o[i] = a[i] !== 0 ? 1 : 0;
  } else if (from === "f32" || isHalf(from)) {
    const [lo, hi] = INT_RANGE[to];
    for (let i = 0; i < len; i++) {
      const t = Math.trunc(a[i]);
      o[i] = t !== t ? 0 : t < lo ? lo : t > hi ? hi : t;
    }
  } else {
    o.set(a); // integer to integer: the store wraps modulo 2^bits
  }
  return o;
}

// f32 sum of t[at + i·step], i < len, in a non-oracle order (see AccumulateOrder).
function sumOrdered(t: ArrayLike<number>, at: number, step: number, len: number, order: AccumulateOrder): number {
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

function reduce(n: Node, x: Node, xs: Storage, order: AccumulateOrder): Storage {
  const ax = n.attrs.axis!, sh = x.shape, len = sh[ax];
  const inner = stridesOf(sh)[ax], outer = numel(sh) / (len * inner);
  const float = x.dtype === "f32" || isHalf(x.dtype);
  const a = isHalf(x.dtype) ? decodeHalf(x.dtype as "f16", xs as Uint16Array) : xs;
  const o = float ? new Float32Array(outer * inner) : storageFor(n.dtype, outer * inner);
  const fn = n.attrs.fn;
  for (let p = 0; p < outer; p++) {
    for (let q = 0; q < inner; q++) {
      let at = p * len * inner + q;
      if (fn === "sum") {
        let acc = 0;
        if (!float) for (let i = 0; i < len; i++, at += inner) acc += a[at];
        else if (order === "sequential" || order === "fma") for (let i = 0; i < len; i++, at += inner) acc = fr(acc + a[at]);
        else acc = sumOrdered(a, at, inner, len, order);
        o[p * inner + q] = acc;
      } else {
        let acc = a[at];
        at += inner;
        if (fn === "max") for (let i = 1; i < len; i++, at += inner) acc = Math.max(acc, a[at]);
        else for (let i = 1; i < len; i++, at += inner) acc = Math.min(acc, a[at]);
        o[p * inner + q] = acc;
      }
    }
  }
  return isHalf(n.dtype) ? fromF32(n.dtype, o as Float32Array) : o;
}

function argmax(n: Node, x: Node, xs: Storage): Storage {
  const ax = n.attrs.axis!, sh = x.shape, len = sh[ax];
  const inner = stridesOf(sh)[ax], outer = numel(sh) / (len * inner);
  const a = isHalf(x.dtype) ? decodeHalf(x.dtype as "f16", xs as Uint16Array) : xs;
  const o = new Int32Array(outer * inner);
  for (let p = 0; p < outer; p++) {
    for (let q = 0; q < inner; q++) {
      const base = p * len * inner + q;
      let best = 0, bv = a[base];
      for (let i = 1; i < len; i++) {
        const v = a[base + i * inner];
        if (v > bv) {
          best = i;
          bv = v;
        }
      }
      o[p * inner + q] = best;
    }
  }
  return o;
}

function matmul(x: Node, w: Node, xs: Storage, ws: Storage, order: AccumulateOrder): Float32Array {
  const K = x.shape[x.shape.length - 1];
  const a = x.dtype === "f32" ? xs as Float32Array : asF32(x.dtype, xs, numel(x.shape));
  // Only weights are converted once and cached: other operands (an f16 KV cache) change between steps.
  const b = w.op === "const" ? weightF32(w.dtype, ws, numel(w.shape)) : asF32(w.dtype, ws, numel(w.shape));
  const shared = w.shape.length === 2;
  const N = w.shape[w.shape.length - 2];
  const M = shared ? numel(x.shape) / K : x.shape[x.shape.length - 2];
  const batch = shared ? 1 : numel(x.shape) / (M * K);
  const o = new Float32Array(batch * M * N);
  const prod = order === "sequential" || order === "fma" ? o : new Float32Array(K);
  for (let bi = 0; bi < batch; bi++) {
    const wb = shared ? 0 : bi * N * K;
    for (let m = 0; m < M; m++) {
      const xo = (bi * M + m) * K, oo = (bi * M + m) * N;
      for (let j = 0; j < N; j++) {
        const wo = wb + j * K;
        let acc = 0;
        if (order === "sequential") for (let k = 0; k < K; k++) acc = fr(acc + fr(a[xo + k] * b[wo + k]));
        else if (order === "fma") for (let k = 0; k < K; k++) acc = fr(acc + a[xo + k] * b[wo + k]);
        else {
          for (let k = 0; k < K; k++) prod[k] = a[xo + k] * b[wo + k];
          acc = sumOrdered(prod, 0, 1, K, order);
        }
        o[oo + j] = acc;
      }
    }
  }
  return o;
}

function gather(n: Node, t: Node, ts: Storage, idx: Storage): Storage {
  const rows = t.shape[0], len = numel(t.shape.slice(1)), count = idx.length;
  const signed = !(idx instanceof Uint32Array);
  if (isBlock(t.dtype)) {
    const dt = t.dtype as BlockDType, rb = (len / BLOCK[dt].elems) * BLOCK[dt].bytes;
    const o = new Float32Array(count * len);
    for (let r = 0; r < count; r++) {
      const i = idx[r];
      if (i >= rows || (signed && i < 0)) throw new GraphError("range", `row ${i} at ${r} is not below ${rows}`, n);
      dequantize(dt, (ts as Uint8Array).subarray(i * rb, (i + 1) * rb), len, o.subarray(r * len, (r + 1) * len));
    }
    return o;
  }
  const o = storageFor(n.dtype, count * len);
  for (let r = 0; r < count; r++) {
    const i = idx[r];
    if (i >= rows || (signed && i < 0)) throw new GraphError("range", `row ${i} at ${r} is not below ${rows}`, n);
    o.set(ts.subarray(i * len, (i + 1) * len), r * len);
  }
  return o;
}
