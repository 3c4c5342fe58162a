// The `sample` composite: picks the next token of each row of logits on the device. This file states its
// meaning and is the oracle's implementation of it (plain TypeScript, sequential f32 arithmetic); the kernel
// (kernels/lib/sample.ts) computes the same thing with sums in another order.
//
// sample(logits f32[rows, V], params u32[rows, SAMPLER_WORDS]) -> i32[rows, 2] = (token, nonfinite) per row.
// `params` is a Slot of kind "Sampler": every value below is read per step on the device, so changing a
// temperature, a seed or the counter never makes a new entry. Words of a row (f32 words hold the float's bits):
//   0 inv_temp f32   1/temperature; greedy unless 0 < inv_temp < +inf (the host encodes temperature 0 as 0)
//   1 top_k    i32   keep the k largest logits; k <= 0 or k >= V is off
//   2 top_p    f32   nucleus mass; off unless top_p < 1 (NaN is off)
//   3 min_p    f32   off unless min_p > 0
//   4 seed     u32
//   5 counter  u32   a per-draw counter (the driver passes the position being sampled)
//   6 top_logprobs u32  top logprobs wanted (graph/logits.ts `logprobs`; at most its N)
//   7 logprobs     u32  1: the row wants logprobs (the chosen token's, and top_logprobs more)
// Per row, with x the logits and all arithmetic in f32 (every result rounded to f32):
//  1. nonfinite = 1 when any x_i is NaN or ±Inf, else 0. The flag reads the logits as given (a later logit
//     bias or guided mask may put -Inf in on purpose and must not raise it).
//  2. greedy = the first index of the largest x_i, NaN counting as -Inf (index 0 when every x_i is NaN/-Inf).
//     When nonfinite = 1 or the row is greedy (inv_temp == 0 above), token = greedy and nothing else happens.
//  3. m = max x. w_i = exp((x_i − m) · inv_temp): the unnormalised softmax at temperature, w = 1 at the max.
//  4. top-k: when on, keep x_i >= θk, θk the k-th largest logit counting repeats (ties at θk are all kept).
//     min-p: when on, keep w_i >= min_p (p_i >= min_p · p_max, as p_max ∝ w = 1). Call the tokens both keep
//     the candidate set C (min-p and top-k each keep a prefix of the tokens by logit, so their order does
//     not matter).
//  5. Z = Σ w over C. top-p: when on, keep x_i >= θp, θp the largest logit v of C with
//     mass(v) = Σ{w_j : j in C, x_j >= v} >= top_p · Z: the smallest set of most probable candidates whose
//     probability, renormalised over C, reaches top_p, ties included. (Stated on logits rather than
//     probabilities: the two agree in exact arithmetic, and logit order has no rounding ties.) When no v
//     qualifies (only by rounding, top_p near 1) every candidate is kept. This is vLLM's order (min-p, then
//     top-k and top-p on what min-p left; graph/logits.ts states the whole sampler's order).
//  6. The kept set is C ∩ {x_i >= θp}; renormalise: total = Σ w over it (0 only when min_p > 1: then greedy).
//  7. u = uniform(seed, counter) in [0, 1) (below; no row index, so a request's draws do not depend on
//     which batch row it occupies). token = the first kept index i in index order whose running sum
//     cum_i = Σ{w_j : j kept, j <= i} exceeds u · total; when rounding leaves none, the last kept index
//     with w > 0.
// Summation order (the oracle's; a device may reassociate, so at a knife edge it may pick a neighbour):
// Z, total and cum run in index order; mass(v) runs over the top-k set by descending logit, ties in index
// order.
// RNG: counter-based, u32 arithmetic only so that every target computes the same u:
//   bits = mix32(counter ^ mix32(seed)), u = (bits >>> 8) · 2^-24,
//   mix32 = Wellons' triple32: x ^= x>>>17; x *= 0xed5ad4bb; x ^= x>>>11; x *= 0xac4c1b51; x ^= x>>>15;
//           x *= 0x31848bab; x ^= x>>>14 (products mod 2^32).
// For one seed, distinct counters give distinct bits (mix32 is a bijection).
//
// Logit bias, bans, penalties and grammar masks run before this op (`logits_process`), logprobs after it
// (`logprobs`); graph/logits.ts states both and the order of the whole sampler.
import { f32FromBits } from "./dtype.ts";

/** u32 words per row of a Sampler slot. */
export const SAMPLER_WORDS = 8;
/** Word offsets within a row of the Sampler slot. */
export const SAMPLER = { invTemp: 0, topK: 1, topP: 2, minP: 3, seed: 4, counter: 5, topLogprobs: 6, logprobs: 7 } as const;

const fr = Math.fround;

/** Wellons' triple32 integer hash (a bijection on u32). */
export function mix32(x: number): number {
  x = (x ^ (x >>> 17)) >>> 0;
  x = Math.imul(x, 0xed5ad4bb);
  x = (x ^ (x >>> 11)) >>> 0;
  x = Math.imul(x, 0xac4c1b51);
  x = (x ^ (x >>> 15)) >>> 0;
  x = Math.imul(x, 0x31848bab);
  return (x ^ (x >>> 14)) >>> 0;
}

/** The sampler's random bits for (seed, counter). */
export function rngBits(seed: number, counter: number): number {
  return mix32((counter ^ mix32(seed >>> 0)) >>> 0);
}

/** u in [0, 1) on a grid of 2^-24 (exact in f32). */
export function uniform(seed: number, counter: number): number {
  return (rngBits(seed, counter) >>> 8) * 2 ** -24;
}

/** The parameters of one row as the kernel reads them from the slot words. */
export interface RowParams {
  invTemp: number;
  topK: number;
  topP: number;
  minP: number;
  seed: number;
  counter: number;
}

/** Decodes row `r` of a Sampler slot. */
export function rowParams(words: Uint32Array, r: number): RowParams {
  const o = r * SAMPLER_WORDS;
  return {
    invTemp: f32FromBits(words[o + SAMPLER.invTemp]),
    topK: words[o + SAMPLER.topK] | 0,
    topP: f32FromBits(words[o + SAMPLER.topP]),
    minP: f32FromBits(words[o + SAMPLER.minP]),
    seed: words[o + SAMPLER.seed] >>> 0,
    counter: words[o + SAMPLER.counter] >>> 0,
  };
}

/** What the sampler decides for one row, before the draw. */
export interface RowPlan {
  nonfinite: boolean;
  greedy: number;
  /** True when the token is the greedy one (non-finite row, greedy temperature, or nothing kept). */
  isGreedy: boolean;
  /** w_i (step 3); empty when isGreedy. */
  w: Float32Array;
  /** 1 for kept tokens (steps 4-6). */
  kept: Uint8Array;
  /** Σ w over the kept set, in index order. */
  total: number;
}

/** Steps 1-6 for one row of logits. */
export function planRow(x: Float32Array, p: RowParams): RowPlan {
  const V = x.length;
  let nonfinite = false, best = -Infinity, greedy = 0;
  for (let i = 0; i < V; i++) {
    const v = x[i];
    if (!Number.isFinite(v)) nonfinite = true;
    if (v > best) { // NaN never compares greater: it counts as -Inf
      best = v;
      greedy = i;
    }
  }
  const none = { nonfinite, greedy, isGreedy: true, w: new Float32Array(0), kept: new Uint8Array(0), total: 0 };
  if (nonfinite || !(p.invTemp > 0 && p.invTemp < Infinity)) return none;
  const m = best, it = fr(p.invTemp);
  const w = new Float32Array(V);
  for (let i = 0; i < V; i++) w[i] = Math.exp(fr(fr(x[i] - m) * it)); // the store rounds to f32
  const kept = new Uint8Array(V).fill(1);
  if (p.topK > 0 && p.topK < V) {
    const th = Float32Array.from(x).sort()[V - p.topK];
    for (let i = 0; i < V; i++) if (!(x[i] >= th)) kept[i] = 0;
  }
  if (p.minP > 0) for (let i = 0; i < V; i++) if (!(w[i] >= p.minP)) kept[i] = 0;
  if (p.topP < 1) {
    let z = 0;
    for (let i = 0; i < V; i++) if (kept[i]) z = fr(z + w[i]);
    const target = fr(p.topP * z);
    const order: number[] = [];
    for (let i = 0; i < V; i++) if (kept[i]) order.push(i);
    order.sort((a, b) => x[b] - x[a] || a - b);
    let acc = 0, th = -Infinity;
    for (let j = 0; j < order.length; j++) {
      acc = fr(acc + w[order[j]]);
      const end = j + 1 === order.length || x[order[j + 1]] !== x[order[j]];
      if (end && acc >= target) {
        th = x[order[j]];
        break;
      }
    }
    for (let i = 0; i < V; i++) if (!(x[i] >= th)) kept[i] = 0;
  }
  let total = 0;
  for (let i = 0; i < V; i++) if (kept[i]) total = fr(total + w[i]);
  if (!(total > 0)) return none;
  return { nonfinite, greedy, isGreedy: false, w, kept, total };
}

/** Step 7: the token drawn with uniform u from a plan. */
export function drawRow(plan: RowPlan, u: number): number {
  if (plan.isGreedy) return plan.greedy;
  const target = fr(u * plan.total), { w, kept } = plan;
  let cum = 0, last = -1;
  for (let i = 0; i < w.length; i++) {
    if (!kept[i]) continue;
    cum = fr(cum + w[i]);
    if (cum > target) return i;
    if (w[i] > 0) last = i;
  }
  return last;
}

/**
 * The exact probability of each token under the sampler (for statistical tests): w_i / total over the kept
 * set (the draw's 2^-24 grid and the rounding of its running sum aside).
 */
export function samplerDistribution(x: Float32Array, p: RowParams): Float64Array {
  const plan = planRow(x, p);
  const out = new Float64Array(x.length);
  if (plan.isGreedy) {
    out[plan.greedy] = 1;
    return out;
  }
  for (let i = 0; i < x.length; i++) if (plan.kept[i]) out[i] = plan.w[i] / plan.total;
  return out;
}

/** The oracle of the `sample` op: (token, nonfinite) for each of `rows` rows of `vocab` logits. */
export function sampleRows(logits: Float32Array, params: Uint32Array, rows: number, vocab: number): Int32Array {
  const out = new Int32Array(rows * 2);
  for (let r = 0; r < rows; r++) {
    const p = rowParams(params, r);
    const plan = planRow(logits.subarray(r * vocab, (r + 1) * vocab), p);
    out[2 * r] = drawRow(plan, uniform(p.seed, p.counter));
    out[2 * r + 1] = plan.nonfinite ? 1 : 0;
  }
  return out;
}
