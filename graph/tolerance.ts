// Tier 2: how far a device's float result may be from the oracle's. This file is the one place that states it.
//
// The oracle (the op records of graph/ops/, eval_ops.ts) sums in index order with one f32 rounding per product and per addition. A device may
// sum in any order, split sums across threads, use fused multiply-add and approximate transcendentals. With
// unit roundoff u = 2^-24, any-order summation of n terms t_i satisfies |fl(Σt) − Σt| ≤ γ(n)·Σ|t_i|,
// γ(n) = n·u/(1 − n·u) (for a dot the n also covers the product roundings). Oracle and device each satisfy it:
//
//     ONE DOT OR SUM (the local rule):   |device − oracle| ≤ 2·γ(K)·Σ_k |a_k·b_k|            (dotTolerance)
//
// Elementwise ops add the device's own error ALLOW[op] (units of u·|result|, absolute units of u, and for
// exp/sin/cos/pow a term growing with the argument), plus 2^-125 for subnormal flushing. max, min, select and
// movement ops are exact. Comparisons, argmax, integer ops and float->int casts are taken as exact: a flip
// there (a mask or a token changing) is a tier-3 event, not a tier-2 one.
//
// Whole programs: evaluate(..., {bounds}) propagates a per-element bound through every primitive of the
// expanded graph at the oracle's values, in one of two modes:
//   "worst"    — rigorous first-order running error analysis: errors add in absolute value (a dot adds
//                Σ|a|·Eb + |b|·Ea + Ea·Eb to the local rule; a function carries max |f(x±E) − f(x)|). Right for
//                one kernel or a short chain; through a deep network it grows geometrically and soon says ∞.
//   "expected" — the same rules with independent errors: contributions add in quadrature, and a K-term sum's
//                reassociation error is u·√K·(|Σt| + √Σt²) (K roundings, each of the size of a partial sum,
//                which drifts like |Σt| for same-signed terms and like √Σt² for mixed signs). x − max(x) is
//                exact where x is the maximum (softmax's shift). The result σ is scaled by SIGMAS. This is the
//                mode for model outputs (logits, carried KV state): it is an estimate, not a proof.
// Composites (softmax, rmsnorm, silu, silu_mul, attention) are bounded as wholes by tolerance_composite.ts, which
// keeps the correlations their expansions lose; evaluate() puts that bound at the composite's output.
// In both, incoming State may carry the bound of the previous step (EvalInputs.stateBounds), so multi-step
// decodes propagate. checkClose applies the policy: NaN or Inf where the oracle is finite always fails, a
// non-finite oracle value needs the same non-finite value, integer and bool results must be equal.
import { type BlockDType, type DType, isFloat, type Storage } from "./dtype.ts";
import { xqMatmul } from "./ops/qdot.ts";
import { runPrimitive } from "./eval_ops.ts";
import { asF32, weightF32 } from "./ops/arith.ts";
import { floats, FTZ, gamma, U } from "./ops/rounding.ts";
import { type Node, numel, stridesOf, type UnaryOp } from "./ir.ts";
import { type Allowance, UNARY_OPS } from "./unary.ts";
import { BINARY_OPS } from "./binary.ts";
import { recordOf } from "./ops/mod.ts";

export { floats, FTZ, gamma, U } from "./ops/rounding.ts";
/** "expected" mode reports SIGMAS·σ. */
export const SIGMAS = 8;

export type BoundMode = "worst" | "expected";


/** The local rule: bound on |device − oracle| for a dot (or sum) of K terms whose |terms| sum to absSum. */
export function dotTolerance(K: number, absSum: number): number {
  return 2 * gamma(K) * absSum + FTZ;
}

/** A device's own error per elementwise op, from the ops' records (unary.ts, binary.ts). */
export const ALLOW: Record<string, Allowance> = Object.fromEntries(
  [...Object.entries(UNARY_OPS), ...Object.entries(BINARY_OPS)].flatMap(([k, r]) => (r.allow ? [[k, r.allow]] : [])),
);
export type { Allowance };

/** The device's own error at one element. A non-finite oracle result must be matched exactly, so it needs none. */
export function ownError(op: string, r: number, x: number): number {
  const a = ALLOW[op];
  if (!a || !Number.isFinite(r)) return 0;
  const ar = Math.abs(r);
  let e = a.rel * U * ar + (a.abs ?? 0) * U + FTZ;
  if (a.arg && Number.isFinite(x)) e += op === "sin" || op === "cos" ? a.arg * U * Math.abs(x) : a.arg * U * Math.abs(x) * ar;
  else if (a.arg && ar !== 0) e = Infinity;
  return e;
}

type Bound = Float32Array | null; // null: exactly zero everywhere

function maxAbsDelta(f: (x: number) => number, x: number, e: number, r: number): number {
  if (e === 0) return 0;
  if (e === Infinity || x !== x) return Infinity;
  const d = Math.max(Math.abs(f(x + e) - r), Math.abs(f(x - e) - r));
  return d === d ? d : Infinity;
}



/**
 * Bound on |device − oracle| of every element of primitive node `n` ("expected" mode: its σ), from its inputs'
 * values `v`, their bounds `e` and its oracle result `r`. `state` is the incoming bound of a `state` node.
 */
export function propagate(
  n: Node, ins: Node[], v: Storage[], e: Bound[], r: Storage, mode: BoundMode, state?: Float32Array, nodes?: Node[],
): Bound {
  const op = n.op;
  const len = numel(n.shape);
  if (op === "state") return state ?? null;
  if (op === "const" || op === "slot" || op === "literal" || op === "iota") return null;
  if (!isFloat(n.dtype)) return null; // integer and bool results: exact by assumption
  const worst = mode === "worst";
  // Combines independent contributions: summed (worst) or in quadrature (expected).
  const comb = worst ? (a: number, b: number) => a + b : (a: number, b: number) => Math.sqrt(a * a + b * b);

  const rule = recordOf(op);
  if (rule?.kind === "movement") {
    if (e.every((b) => b === null)) return null;
    // Move the error arrays exactly as the values move (index inputs keep their values).
    const fnode: Node = { ...n, dtype: "f32" };
    const fins = ins.map((x, i) => (isFloat(x.dtype) || (op === "gather" && i === 0) ? { ...x, dtype: "f32" as DType } : x));
    const args = v.map((x, i) => (fins[i].dtype === "f32" ? (e[i] ?? new Float32Array(numel(ins[i].shape))) : x));
    return runPrimitive(fnode, fins, args) as Float32Array;
  }
  // Ops whose record says exact (the sampler's rewrites, collectives) add no error of their own.
  if (rule?.tolerance !== "propagated") return null;
  const out = new Float32Array(len);
  const rv = floats(n.dtype, r);
  switch (op) {
    case "neg": case "abs": case "exp": case "log": case "sqrt": case "rsqrt": case "recip": case "tanh":
    case "sin": case "cos": case "floor": {
      const x = floats(ins[0].dtype, v[0]), ex = e[0], rec = UNARY_OPS[op as UnaryOp], f = rec.f;
      for (let i = 0; i < len; i++) {
        const ei = ex ? ex[i] : 0;
        let b: number;
        if (op === "floor") b = 0;
        else if (op === "sin" || op === "cos") b = Math.min(ei, 2);
        else if (ei > 0 && rec.poleAtZero && Math.abs(x[i]) <= ei) b = Infinity;
        else b = maxAbsDelta(f, x[i], ei, rv[i]);
        out[i] = comb(b, ownError(op, rv[i], x[i]));
      }
      return out;
    }
    case "add": case "sub": case "mul": case "div": case "max": case "min": case "pow": case "mod": {
      const a = floats(ins[0].dtype, v[0]), b = floats(ins[1].dtype, v[1]);
      const ea = e[0], eb = e[1];
      // x − max(x) (softmax's shift): where x is the maximum itself both sides compute exactly 0. Without this
      // correlation the error of a peaked softmax is overstated by orders of magnitude.
      const shift = op === "sub" && nodes !== undefined && isShiftByExtreme(ins[0].id, ins[1], nodes);
      for (let i = 0; i < len; i++) {
        const x = a[i], y = b[i], ex = ea ? ea[i] : 0, ey = eb ? eb[i] : 0, ri = rv[i];
        let p: number;
        switch (op) {
          case "add": case "sub": case "mod": p = shift && x === y ? 0 : comb(ex, ey); break;
          case "mul": p = comb(comb(Math.abs(x) * ey, Math.abs(y) * ex), ex * ey); break;
          case "div":
            p = ex === 0 && ey === 0 ? 0 : Math.abs(y) > ey ? comb(ex, Math.abs(ri) * ey) / (Math.abs(y) - ey) : Infinity;
            break;
          case "max": case "min": p = Math.max(ex, ey); break;
          default: // pow
            p = comb(maxAbsDelta((t) => Math.pow(t, y), x, ex, ri), ey ? Math.abs(ri * Math.log(Math.abs(x))) * ey * 1.01 : 0);
        }
        const own = op === "pow" ? ownError(op, ri, y * Math.log(Math.abs(x))) : ownError(op, ri, x);
        out[i] = p === p ? comb(p, own) : Infinity;
      }
      return out;
    }
    case "select": {
      const c = v[0], ea = e[1], eb = e[2];
      if (!ea && !eb) return null;
      for (let i = 0; i < len; i++) out[i] = c[i] ? (ea ? ea[i] : 0) : (eb ? eb[i] : 0);
      return out;
    }
    case "cast": {
      const ex = e[0];
      const step = n.dtype === "f16" ? 2 ** -10 : n.dtype === "bf16" ? 2 ** -7 : 0;
      const floor = n.dtype === "f16" ? 2 ** -24 : 0;
      if (!ex && (step === 0 || !isFloat(ins[0].dtype))) return null;
      for (let i = 0; i < len; i++) out[i] = comb(ex ? ex[i] : 0, step * Math.abs(rv[i]) + floor);
      return out;
    }
    case "reduce": {
      const x = floats(ins[0].dtype, v[0]), ex = e[0], sh = ins[0].shape, ax = n.attrs.axis!, L = sh[ax];
      const inner = stridesOf(sh)[ax], outer = numel(sh) / (L * inner);
      const sum = n.attrs.fn === "sum", c = worst ? 2 * gamma(L) : U * Math.sqrt(L);
      for (let p = 0; p < outer; p++) {
        for (let q = 0; q < inner; q++) {
          let at = p * L * inner + q, s = 0, abs = 0, sq = 0, sgn = 0;
          for (let k = 0; k < L; k++, at += inner) {
            const ek = ex ? ex[at] : 0;
            if (!sum) s = Math.max(s, ek);
            else {
              const t = x[at];
              s += worst ? ek : ek * ek;
              abs += Math.abs(t);
              sq += t * t;
              sgn += t;
            }
          }
          out[p * inner + q] = !sum ? s : worst ? s + c * abs + FTZ : Math.sqrt(s + (c * walk(sgn, sq)) ** 2) + FTZ;
        }
      }
      return out;
    }
    case "matmul": return n.attrs.xq ? xqBound(ins, v, e, worst) : matmulBound(ins, v, e, worst);
  }
  throw new Error(`graph/tolerance.ts has no propagation rule for ${op}, whose record says "propagated"`);
}

// Typical size of the partial sums of K terms with sum `sum` and sum of squares `sq`: the running sum drifts
// like the total when the terms share a sign and like √(Σt²) when their signs vary. Each of K roundings is at
// most u·|partial sum|, so the reassociation difference is about u·√K·(|Σt| + √Σt²).
function walk(sum: number, sq: number): number {
  return Math.abs(sum) + Math.sqrt(sq);
}

// b = broadcast(reduce max|min (x)) along the reduced axis, possibly without the broadcast.
function isShiftByExtreme(x: number, b: Node, nodes: Node[]): boolean {
  const red = b.op === "broadcast" ? nodes[b.inputs[0]] : b;
  return red.op === "reduce" && (red.attrs.fn === "max" || red.attrs.fn === "min") && red.inputs[0] === x;
}

/** A quantized-x matmul (graph/ops/qdot.ts): its own rule, the weight exact (a block-type const). */
function xqBound(ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  const [x, w] = ins, K = x.shape[x.shape.length - 1];
  return xqMatmul(w.dtype as BlockDType, floats(x.dtype, v[0]), numel(x.shape) / K, K, v[1] as Uint8Array, w.shape[0], e[0], worst).bound!;
}

function matmulBound(ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  const [x, w] = ins;
  const K = x.shape[x.shape.length - 1];
  const a = floats(x.dtype, v[0]);
  const b = w.op === "const" ? weightF32(w.dtype, v[1], numel(w.shape)) : asF32(w.dtype, v[1], numel(w.shape));
  const ea = e[0], eb = e[1];
  const shared = w.shape.length === 2, N = w.shape[w.shape.length - 2];
  const M = shared ? numel(x.shape) / K : x.shape[x.shape.length - 2];
  const batch = shared ? 1 : numel(x.shape) / (M * K);
  const c = worst ? 2 * gamma(K) : U * Math.sqrt(K);
  const out = new Float32Array(batch * M * N);
  for (let bi = 0; bi < batch; bi++) {
    const wb = shared ? 0 : bi * N * K;
    for (let m = 0; m < M; m++) {
      const xo = (bi * M + m) * K;
      for (let j = 0; j < N; j++) {
        const wo = wb + j * K;
        let abs = 0, prop = 0, sq = 0, sgn = 0;
        for (let k = 0; k < K; k++) {
          const ax = Math.abs(a[xo + k]), bw = Math.abs(b[wo + k]);
          const t = a[xo + k] * b[wo + k];
          abs += ax * bw;
          sq += t * t;
          sgn += t;
          let d = 0;
          if (ea) d += bw * ea[xo + k];
          if (eb) d += ax * eb[wo + k] + (ea ? ea[xo + k] * eb[wo + k] : 0);
          prop += worst ? d : d * d;
        }
        out[(bi * M + m) * N + j] = worst ? prop + c * abs + FTZ : Math.sqrt(prop + (c * walk(sgn, sq)) ** 2) + FTZ;
      }
    }
  }
  return out;
}

/** Where a device result breaks the tier-2 (or, without a bound, the bit-exact) contract. */
export interface Mismatch {
  index: number;
  actual: number;
  expected: number;
  bound: number;
  reason: "non-finite" | "tolerance" | "exact" | "length" | "unbounded";
}

/**
 * The first element of `actual` that fails against the oracle's `expected` under `bound` (per element or one
 * number; omitted: exact equality), or undefined. Values are compared as numbers of dtype `d` (f16/bf16
 * decoded); integer and bool dtypes always compare exactly. A bound of ∞ (or NaN) at a finite oracle value fails.
 */
export function checkClose(
  d: DType,
  actual: Storage,
  expected: Storage,
  bound?: ArrayLike<number> | number,
): Mismatch | undefined {
  const a = floats(d, actual), x = floats(d, expected);
  if (a.length !== x.length) return { index: -1, actual: a.length, expected: x.length, bound: 0, reason: "length" };
  const tol = isFloat(d) && bound !== undefined;
  for (let i = 0; i < x.length; i++) {
    const ai = a[i], xi = x[i];
    const bi = !tol ? 0 : typeof bound === "number" ? bound : bound![i];
    if (!Number.isFinite(xi)) {
      if (!(Object.is(ai, xi) || (ai !== ai && xi !== xi))) return { index: i, actual: ai, expected: xi, bound: bi, reason: "non-finite" };
      continue;
    }
    if (!Number.isFinite(ai)) return { index: i, actual: ai, expected: xi, bound: bi, reason: "non-finite" };
    // A bound that is not a finite number accepts anything: it proves nothing, so it fails.
    if (tol && !(bi < Infinity)) return { index: i, actual: ai, expected: xi, bound: bi, reason: "unbounded" };
    if (!tol) {
      if (ai !== xi) return { index: i, actual: ai, expected: xi, bound: 0, reason: "exact" };
    } else if (!(Math.abs(ai - xi) <= bi)) return { index: i, actual: ai, expected: xi, bound: bi, reason: "tolerance" };
  }
  return undefined;
}

/** Throws an Error describing the first mismatch (see checkClose), prefixed with `what`. */
export function assertClose(
  what: string,
  d: DType,
  actual: Storage,
  expected: Storage,
  bound?: ArrayLike<number> | number,
): void {
  const m = checkClose(d, actual, expected, bound);
  if (m) {
    throw new Error(
      `${what}: element ${m.index}: got ${m.actual}, oracle ${m.expected}, |diff| ${Math.abs(m.actual - m.expected)} > bound ${m.bound} (${m.reason})`,
    );
  }
}

/**
 * The largest bound a tier-2 check accepts, as a fraction of the value's scale: max(|oracle value|, the RMS of the
 * finite values of its tensor), so an element near zero from cancellation is judged against its tensor's
 * magnitude. A bound past it says "anything near the value passes", which tests nothing.
 */
export const MAX_BOUND_FRACTION = 1 / 8;

/** How meaningful a tensor's bounds are: float elements checked, bounds not finite, the largest bound / scale. */
export interface BoundStats {
  elements: number;
  infinite: number;
  maxRatio: number;
  /** Index of the element with the largest ratio (−1 when none). */
  at: number;
}

/** Bound statistics of one float tensor (oracle values `expected`, dtype `d`, per-element `bound`). */
export function boundStats(d: DType, expected: Storage, bound: ArrayLike<number>): BoundStats {
  const st: BoundStats = { elements: 0, infinite: 0, maxRatio: 0, at: -1 };
  if (!isFloat(d)) return st;
  const x = floats(d, expected);
  let sq = 0, n = 0;
  for (let i = 0; i < x.length; i++) if (Number.isFinite(x[i])) sq += x[i] * x[i], n++;
  const rms = n ? Math.sqrt(sq / n) : 0;
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i])) continue; // matched exactly, no bound used
    st.elements++;
    const b = bound[i];
    if (!(b < Infinity)) {
      st.infinite++;
      continue;
    }
    const scale = Math.max(Math.abs(x[i]), rms);
    const r = scale > 0 ? b / scale : b > 0 ? Infinity : 0;
    if (r > st.maxRatio) st.maxRatio = r, st.at = i;
  }
  return st;
}

/** Throws when a tensor's bounds are not finite or exceed MAX_BOUND_FRACTION of the value's scale. */
export function assertMeaningful(what: string, d: DType, expected: Storage, bound: ArrayLike<number>): BoundStats {
  const st = boundStats(d, expected, bound);
  if (st.infinite) throw new Error(`${what}: ${st.infinite} of ${st.elements} bounds are not finite`);
  if (st.maxRatio > MAX_BOUND_FRACTION) {
    throw new Error(`${what}: element ${st.at}: bound ${bound[st.at]} is ${st.maxRatio.toPrecision(3)} of the value's scale (limit ${MAX_BOUND_FRACTION})`);
  }
  return st;
}
