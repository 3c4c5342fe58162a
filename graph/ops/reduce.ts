// Reductions and contractions, one record each: reduce (sum, max, min), argmax and matmul. The oracle's sums
// start from +0 and add terms in increasing index order with one f32 rounding per step (graph/eval_ops.ts);
// `order` lets a test emulate a device's reassociation (AccumulateOrder).
import { BLOCK, type BlockDType, decodeHalf, encodeHalf, isBlock, isFloat, type Storage, storageFor } from "../dtype.ts";
import { type Node, numel, sameShape, stridesOf } from "../ir.ts";
import { asF32, fr, isHalf, sumOrdered, weightF32 } from "./arith.ts";
import { hasXq, XQ_RUNS, xqMatmul } from "./qdot.ts";
import { floats } from "./rounding.ts";
import { type AccumulateOrder, arity, fail, fmt, needFloat, noBlock, normAxis, type OpRecord } from "./record.ts";

function reduce(n: Node, [x]: Node[], [xs]: Storage[], order: AccumulateOrder): Storage {
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
  return isHalf(n.dtype) ? encodeHalf(n.dtype, o as Float32Array) : o;
}

function argmax(n: Node, [x]: Node[], [xs]: Storage[]): Storage {
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

function matmul(n: Node, [x, w]: Node[], [xs, ws]: Storage[], order: AccumulateOrder): Float32Array {
  const K = x.shape[x.shape.length - 1];
  if (n.attrs.xq) return xqMatmul(w.dtype as BlockDType, floats(x.dtype, xs), numel(x.shape) / K, K, ws as Uint8Array, w.shape[0]).y;
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

const axisRule: OpRecord["infer"] = (op, ins, a, ref) => {
  arity(ins, 1, 1, ref);
  const x = ins[0];
  noBlock(x, ref);
  if (x.dtype === "bool") fail("dtype", ref, `${op} of bool`);
  if (x.shape.length === 0) fail("axis", ref, `${op} of a scalar`);
  if (op === "reduce" && a.fn !== "sum" && a.fn !== "max" && a.fn !== "min") {
    fail("attr", ref, `reduce fn must be sum, max or min, got ${a.fn}`);
  }
  a.axis = normAxis(a.axis, x.shape.length, ref);
  const shape = [...x.shape];
  shape[a.axis] = 1;
  return { dtype: op === "argmax" ? "i32" : x.dtype, shape, attrs: a };
};

export const REDUCE_OPS: Record<"reduce" | "argmax" | "matmul", OpRecord> = {
  reduce: {
    kind: "reduce", doc: "attrs.fn over attrs.axis, kept as a dim of 1; sum accumulates in f32 in index order",
    infer: axisRule, eval: reduce, tolerance: "propagated", lower: "kernel",
  },
  // A different index under near-equal maxima is a tier-3 event (a token changing): exact.
  argmax: {
    kind: "reduce", doc: "first index of the maximum along attrs.axis (kept as 1) -> i32; NaN never replaces the first pick",
    infer: axisRule, eval: argmax, tolerance: "exact", lower: "kernel",
  },
  // Decode-shaped weight matmuls become gemv units and residual adds matmul_residual units (graph/plan.ts);
  // what the planner leaves as a node lowers through NODE_LOWERERS.matmul.
  matmul: {
    kind: "matmul",
    doc: "[x[..., K], w[N, K]] -> [..., N], or batched [B.., M, K]·[B.., N, K] -> [B.., M, N]; w may be a block type",
    infer: (_op, ins, a, ref) => {
      arity(ins, 2, 2, ref);
      const [x, w] = ins;
      needFloat(x, ref, "x");
      if (!isFloat(w.dtype) && !isBlock(w.dtype)) fail("dtype", ref, `w must be a float or block type, got ${fmt(w)}`);
      if (x.shape.length < 1 || w.shape.length < 2) fail("shape", ref, `matmul of ${fmt(x)} and ${fmt(w)}`);
      const K = x.shape[x.shape.length - 1];
      if (w.shape[w.shape.length - 1] !== K) {
        fail("shape", ref, `x ${fmt(x)} and w ${fmt(w)} disagree on K (w is [N, K])`);
      }
      if (a.xq && (w.shape.length !== 2 || !hasXq(w.dtype))) fail("attr", ref, `xq (quantized x) needs a 2-D weight of ${Object.keys(XQ_RUNS).join(", ")}, got ${fmt(w)}`);
      if (w.shape.length === 2) {
        if (isBlock(w.dtype) && K % BLOCK[w.dtype].elems !== 0) fail("shape", ref, `K=${K} is not whole ${w.dtype} blocks`);
        return { dtype: "f32", shape: [...x.shape.slice(0, -1), w.shape[0]], attrs: a };
      }
      if (isBlock(w.dtype)) fail("dtype", ref, "a batched matmul cannot read a block type");
      if (x.shape.length !== w.shape.length || !sameShape(x.shape.slice(0, -2), w.shape.slice(0, -2))) {
        fail("shape", ref, `batched matmul needs equal batch dims: ${fmt(x)} vs ${fmt(w)}`);
      }
      return { dtype: "f32", shape: [...x.shape.slice(0, -1), w.shape[w.shape.length - 2]], attrs: a };
    },
    eval: matmul, tolerance: "propagated", lower: "kernel",
  },
};
