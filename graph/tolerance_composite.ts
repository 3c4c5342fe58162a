// Tier-2 bounds of whole composites (softmax, rmsnorm, silu, silu_mul, attention), from the composite's inputs.
//
// Propagating through a composite's primitives treats every intermediate as independent, which loses the
// correlations that make these functions well conditioned: softmax(x) is invariant under a shift of x and stays
// in [0, 1]; x/rms(x) has norm √D whatever x is; silu has a slope below 1.1 everywhere while its expansion's
// recip(1 + exp(−x)) sees a pole once exp's error is large. Through a deep stack the primitive bound goes to ∞ (or
// to many times the value) although the composite's true sensitivity is modest. Here each composite's bound is
// its input bounds pushed through the composite's own sensitivity, plus the device's own rounding of the
// composite (any order, fused or not), in the mode of tolerance.ts ("worst": absolute sums, rigorous to first
// order, softmax rigorous outright; "expected": quadrature, an estimate). evaluate() uses these in place of the
// expansion's bound at each composite's output; values still come from the expansion. Each bounded composite's
// record (graph/ops/composite.ts) names its function here as its tolerance.
import type { Storage } from "./dtype.ts";
import { weightF32 } from "./ops/arith.ts";
import { type Node, numel } from "./ir.ts";
import { floats, FTZ, gamma, U } from "./ops/rounding.ts";

type Bound = Float32Array | null;

function vals(n: Node, s: Storage): ArrayLike<number> {
  return n.op === "const" ? weightF32(n.dtype, s, numel(n.shape)) : floats(n.dtype, s);
}

// silu' ranges over about [−0.0998, 1.0998]: a Lipschitz constant of the function on all of ℝ.
const SILU_SLOPE = 1.1;
const silu = (x: number) => x / (1 + Math.exp(-x));

/** |silu(x ± e) − silu(x)|: exact on the monotone part (x − e past the minimum at −1.2785), else slope · e. */
function siluDelta(x: number, e: number): number {
  if (e === 0) return 0;
  if (!Number.isFinite(e)) return Infinity;
  if (x - e > -1.2785) return Math.max(Math.abs(silu(x + e) - silu(x)), Math.abs(silu(x - e) - silu(x)));
  return SILU_SLOPE * e;
}

/** The device's own error of silu(x) in f32: exp (4u + 2u·|x|), add, recip, mul, as a fraction of |silu(x)|. */
function siluOwn(x: number, y: number): number {
  return (10 + 2 * Math.abs(x)) * U * Math.abs(y) + FTZ;
}

/**
 * Softmax along rows of length L at x (entries −∞ allowed: masked, p = 0 exactly) with input bounds e: the bound
 * of each p_k into out[k] (p gets the row's softmax). With δ_j ∈ [−E_j, E_j], p'_i = p_i / (p_i + Σ_{j≠i} p_j e^{δ_j−δ_i}),
 * so the extremes come from δ_j − δ_i = ∓(E_i + E_j): rigorous in "worst" mode and, like the oracle, blind to a
 * shift common to the row. "expected": first order in quadrature, p_i·√((1−p_i)²E_i² + Σ_{j≠i} p_j²E_j²).
 */
function softmaxRow(
  x: ArrayLike<number>, e: ArrayLike<number> | null, at: (k: number) => number, L: number,
  p: Float64Array, out: Float64Array, worst: boolean,
): void {
  let m = -Infinity;
  for (let k = 0; k < L; k++) m = Math.max(m, x[at(k)]);
  let s = 0;
  for (let k = 0; k < L; k++) s += p[k] = m === -Infinity ? 0 : Math.exp(x[at(k)] - m);
  for (let k = 0; k < L; k++) p[k] = s > 0 ? p[k] / s : 0;
  // The device's rounding: exp at argument x − m (the shift is exact), a sum of L positive terms, one divide.
  let spread = 0, ap = 0, am = 0, sq = 0;
  for (let k = 0; k < L; k++) {
    if (p[k] === 0) continue;
    const ek = e ? e[at(k)] : 0;
    const ownExp = (4 + 2 * Math.abs(x[at(k)] - m)) * U;
    spread += worst ? p[k] * ownExp : (p[k] * ownExp) ** 2;
    ap += p[k] * Math.exp(ek);
    am += p[k] * Math.exp(-ek);
    sq += (p[k] * ek) ** 2;
  }
  const sumOwn = worst ? 2 * gamma(L) + spread : U * Math.sqrt(L) + Math.sqrt(spread);
  for (let k = 0; k < L; k++) {
    const pk = p[k];
    if (pk === 0) {
      out[k] = FTZ;
      continue;
    }
    const ek = e ? e[at(k)] : 0;
    let prop: number;
    if (worst) {
      const up = Math.exp(ek), dn = Math.exp(-ek);
      const restP = up * Math.max(0, ap - pk * up), restM = dn * Math.max(0, am - pk * dn);
      const hi = pk / (pk + restM), lo = pk / (pk + restP);
      prop = Math.max(hi - pk, pk - lo);
      if (prop !== prop) prop = 1;
    } else prop = pk * Math.sqrt(((1 - pk) * ek) ** 2 + Math.max(0, sq - (pk * ek) ** 2));
    const own = pk * ((4 + 2 * Math.abs(x[at(k)] - m)) * U + sumOwn + 4 * U);
    // A softmax lies in [0, 1] whatever its input: the difference never exceeds 1.
    out[k] = Math.min(1, worst ? prop + own : Math.sqrt(prop * prop + own * own)) + FTZ;
  }
}

function softmaxBound(n: Node, x: ArrayLike<number>, e: Bound, worst: boolean): Float32Array {
  const sh = n.shape, ax = n.attrs.axis ?? sh.length - 1, L = sh[ax];
  let inner = 1;
  for (let d = ax + 1; d < sh.length; d++) inner *= sh[d];
  const outer = numel(sh) / (L * inner);
  const res = new Float32Array(numel(sh)), p = new Float64Array(L), o = new Float64Array(L);
  for (let a = 0; a < outer; a++) {
    for (let b = 0; b < inner; b++) {
      const base = a * L * inner + b, at = (k: number) => base + k * inner;
      softmaxRow(x, e, at, L, p, o, worst);
      for (let k = 0; k < L; k++) res[at(k)] = o[k];
    }
  }
  return res;
}

// y_i = w_i · x_i · r, r = (Σx²/D + eps)^−½. δ(x_i r) = r δx_i − x_i r³ (Σ x_j δx_j)/D to first order. Own rounding:
// the sum of squares (2γ(D) relative, positive terms), the rsqrt and the multiplies.
function rmsnormBound(n: Node, ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  const x = vals(ins[0], v[0]), w = vals(ins[1], v[1]), ex = e[0], ew = e[1];
  const D = ins[0].shape[ins[0].shape.length - 1], rows = numel(ins[0].shape) / D;
  const out = new Float32Array(rows * D);
  const sumOwn = worst ? 2 * gamma(D) : U * Math.sqrt(D);
  for (let r = 0; r < rows; r++) {
    let sq = 0, dot = 0, esq = 0;
    for (let j = 0; j < D; j++) {
      const xj = x[r * D + j], ej = ex ? ex[r * D + j] : 0;
      sq += xj * xj;
      dot += worst ? Math.abs(xj) * ej : (xj * ej) ** 2;
      esq += ej * ej;
    }
    const ms = sq / D + n.attrs.eps!, rr = 1 / Math.sqrt(ms);
    const dMs = (worst ? dot : Math.sqrt(dot)) / D; // first-order half-change of the mean square
    // First order holds while the input's error is small beside its rms; past half of it, no useful bound.
    const rho = Math.sqrt(esq / D) * rr;
    const growth = worst ? (rho < 0.5 ? 1 / (1 - rho) ** 3 : Infinity) : 1;
    for (let i = 0; i < D; i++) {
      const xi = x[r * D + i], wi = w[i], ei = ex ? ex[r * D + i] : 0, ewi = ew ? ew[i] : 0;
      const t = xi * rr;
      const dT = worst ? (rr * ei + Math.abs(xi) * rr ** 3 * dMs) * growth : Math.sqrt((rr * ei) ** 2 + (xi * rr ** 3 * dMs) ** 2);
      const prop = worst ? Math.abs(wi) * dT + Math.abs(t) * ewi + dT * ewi : Math.sqrt((wi * dT) ** 2 + (t * ewi) ** 2);
      const y = Math.abs(wi * t);
      const own = y * (sumOwn / 2 + 8 * U) + FTZ;
      const b = worst ? prop + own : Math.sqrt(prop * prop + own * own);
      // |x_i r| ≤ √D for any x: a last resort past first order.
      out[r * D + i] = Number.isFinite(b) ? b : Math.abs(wi) * Math.sqrt(D) + y + (ewi ? ewi * Math.sqrt(D) : 0);
    }
  }
  return out;
}

function siluBound(ins: Node[], v: Storage[], e: Bound[], worst: boolean, mul: boolean): Float32Array {
  const a = vals(ins[0], v[0]), ea = e[0], len = numel(ins[0].shape);
  const b = mul ? vals(ins[1], v[1]) : null, eb = mul ? e[1] : null;
  const out = new Float32Array(len);
  for (let i = 0; i < len; i++) {
    const s = silu(a[i]), ds = siluDelta(a[i], ea ? ea[i] : 0), own = siluOwn(a[i], s);
    const es = worst ? ds + own : Math.sqrt(ds * ds + own * own);
    if (!b) {
      out[i] = es;
      continue;
    }
    const bi = b[i], ebi = eb ? eb[i] : 0, y = Math.abs(s * bi);
    out[i] = worst ? Math.abs(bi) * es + Math.abs(s) * ebi + es * ebi + 2 * U * y + FTZ : Math.hypot(bi * es, s * ebi, 2 * U * y) + FTZ;
  }
  return out;
}

// Grouped-query attention (graph/ops/composite.ts expandAttention), bounded as three stages: the scores
// scale·q·kᵀ (a dot of D terms), their masked softmax (softmaxRow), and p·v (a dot of C terms).
function attentionBound(n: Node, ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  const [R, H, D] = ins[0].shape, [C, KVH] = ins[1].shape, Dv = ins[2].shape[2], G = H / KVH;
  const q = vals(ins[0], v[0]), k = vals(ins[1], v[1]), vv = vals(ins[2], v[2]), mask = v[3];
  const [eq, ek, ev] = [e[0], e[1], e[2]];
  const scale = n.attrs.scale!;
  const cD = worst ? 2 * gamma(D) : U * Math.sqrt(D), cC = worst ? 2 * gamma(C) : U * Math.sqrt(C);
  const s = new Float64Array(C), es = new Float64Array(C), p = new Float64Array(C), ep = new Float64Array(C);
  const out = new Float32Array(R * H * Dv);
  for (let r = 0; r < R; r++) {
    for (let h = 0; h < H; h++) {
      const kh = Math.floor(h / G), qo = (r * H + h) * D;
      for (let c = 0; c < C; c++) {
        if (!mask[r * C + c]) {
          s[c] = -Infinity;
          es[c] = 0;
          continue;
        }
        const ko = (c * KVH + kh) * D;
        let dot = 0, abs = 0, prop = 0, sq = 0;
        for (let d = 0; d < D; d++) {
          const a = q[qo + d], b = k[ko + d], t = a * b;
          dot += t;
          abs += Math.abs(t);
          sq += t * t;
          const ea = eq ? eq[qo + d] : 0, eb = ek ? ek[ko + d] : 0;
          const dd = Math.abs(a) * eb + Math.abs(b) * ea + ea * eb;
          prop += worst ? dd : dd * dd;
        }
        s[c] = dot * scale;
        const own = worst ? cD * abs : cD * (Math.abs(dot) + Math.sqrt(sq));
        es[c] = Math.abs(scale) * (worst ? prop + own : Math.sqrt(prop + own * own)) + 2 * U * Math.abs(s[c]);
      }
      softmaxRow(s, es, (c) => c, C, p, ep, worst);
      for (let j = 0; j < Dv; j++) {
        let abs = 0, prop = 0, sgn = 0, sq = 0;
        for (let c = 0; c < C; c++) {
          if (p[c] === 0) continue;
          const vo = (c * KVH + kh) * Dv + j, x = vv[vo], evc = ev ? ev[vo] : 0, t = p[c] * x;
          abs += Math.abs(t);
          sgn += t;
          sq += t * t;
          const dd = p[c] * evc + Math.abs(x) * ep[c] + ep[c] * evc;
          prop += worst ? dd : dd * dd;
        }
        const own = worst ? cC * abs : cC * (Math.abs(sgn) + Math.sqrt(sq));
        out[(r * H + h) * Dv + j] = (worst ? prop + own : Math.sqrt(prop + own * own)) + FTZ;
      }
    }
  }
  return out;
}

// The records' tolerance functions (graph/ops/record.ts CompositeBound): function declarations, so that the
// records may name them while this module and the registry load each other.
export function boundSoftmax(n: Node, ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  return softmaxBound(n, vals(ins[0], v[0]), e[0], worst);
}
export function boundRmsnorm(n: Node, ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  return rmsnormBound(n, ins, v, e, worst);
}
export function boundSilu(_n: Node, ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  return siluBound(ins, v, e, worst, false);
}
export function boundSiluMul(_n: Node, ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  return siluBound(ins, v, e, worst, true);
}
export function boundAttention(n: Node, ins: Node[], v: Storage[], e: Bound[], worst: boolean): Float32Array {
  return attentionBound(n, ins, v, e, worst);
}
