// Two composites around `sample` (graph/sample.ts): `logits_process` rewrites each row of logits before the draw
// (logit bias and bans, repetition/frequency/presence penalties, a grammar's token mask), and `logprobs` reads the
// raw row after it (the chosen token's log-probability and the n best). This file states their meaning and is the
// oracle's implementation (plain TypeScript, f32 arithmetic, sums in index order).
//
// Order of one row's sampling, after vLLM's sampler (v1 `Sampler.forward`): raw logprobs (`logprobs` reads the
// logits as the model gave them), bias and bans (incl. min_tokens and the grammar mask), penalties (repetition,
// then frequency, then presence), then `sample`: temperature, min-p / top-k / top-p, the draw.
//
// logits_process(x f32[R, V], extra u32[R, extraWords(E)], mask u32[R, ceil(V/32)] [, counts u32[Q, V]]) -> y f32[R, V]
// `extra` is a Slot of kind "Input" of R·(8 + 3E) words: R headers of 8 words (row r's at 8r), then R blocks of E
// entries (row r's entry j at 8R + 3(E·r + j)); for one row that is its header, then its entries. Headers come
// first so that a batch whose rows with entries come first uploads the headers and those rows' entries only
// (llm/sampling.ts SamplerSlots.uploads). f32 words hold the float's bits. A header:
//   0 rep    f32  repetition penalty (1 = off): a seen token's logit v > 0 becomes v / rep, else v · rep
//   1 freq   f32  frequency penalty: v − freq · count
//   2 pres   f32  presence penalty: v − pres when count > 0
//   3 n      u32  entries used (at most E)
//   4 masked u32  k in [1, R]: apply mask row k − 1 (a batch packs its constrained rows' masks first, so a step
//                 uploads only those: llm/sampling.ts SamplerSlots); 0 (or k > R): the mask is never read (an
//                 unconstrained row costs no read)
//   5 dense  u32  k in [1, Q]: every token's `seen` word is counts[k − 1, i] (the optional fourth input: Q rows of
//                 token counts in device State; llm/sampling.ts appendSampler), entries then carry bias only;
//                 0 (or k > Q): counts is never read, and only entries are seen. A one-sequence step has Q = 1
//                 (dense 1); a batch keeps one counts row per sequence slot, which rows name by their k.
//   6, 7     reserved, 0
//   an entry: id u32, bias f32 (−Inf bans the token), seen u32 = count | PROMPT (bit 31: in the prompt)
// count is the token's occurrences among the generated tokens (vLLM: frequency and presence count the output);
// "seen" (repetition) is count > 0 or the prompt bit (vLLM: prompt and output). Ids of a row must be distinct
// (the host merges bias and counts per id); an id >= V is ignored.
// `mask` is a Slot of kind "Input": bit (i & 31) of word i >> 5 set = token i allowed (xgrammar's bitmask).
// Per element, all arithmetic in f32:
//   x not finite: y = x (the sampler's non-finite flag must still see it)
//   masked row and bit i clear: y = BANNED
//   an entry for i: v = x; bias −Inf: y = BANNED; else v += bias, then the penalties above in that order,
//     y = max(v, BANNED) (a finite result stays finite; it cannot exceed FLT_MAX: inputs are validated)
//   else, dense row: y = the same with bias 0 and seen = counts[r, i]
//   else y = x
// BANNED is −FLT_MAX, not −Inf: `sample` reads a non-finite logit as a broken model, and exp((BANNED − m) · t)
// is 0 at every temperature the host allows, so a banned token is never drawn while any other is possible.
//
// logprobs(x f32[R, V], s i32[R, 2], params u32[R, SAMPLER_WORDS]) -> f32[R, 1 + 2N], attrs.n = N (<= 20)
// Per row, when params word `logprobs` is 1 (else the row is all 0 and nothing is read): m = max x, sum = Σ
// exp(x_i − m) in index order, lp_i = (x_i − m) − log(sum). out[0] = lp of the sampled token s[r, 0]; then for
// k < min(params word `topLogprobs`, N): out[1 + 2k] = the id (an exact f32) of the k-th largest logit (ties: lower
// index first; NaN never ranks), out[2 + 2k] = its lp; unused pairs are (−1, 0).
import { SAMPLER, SAMPLER_WORDS } from "./sample.ts";
import { f32FromBits } from "./dtype.ts";

/** Header words of a row of the `extra` slot. */
export const EXTRA = { rep: 0, freq: 1, pres: 2, count: 3, masked: 4, dense: 5 } as const;
export const EXTRA_HEAD = 8;
/** u32 words of one entry (id, bias, seen). */
export const EXTRA_ENTRY = 3;
/** Bit of an entry's `seen` word: the token occurs in the prompt. */
export const PROMPT_BIT = 0x80000000;
/** The value a ban or a mask gives a logit: the most negative finite f32. */
export const BANNED = -3.4028234663852886e38;
/** Most top logprobs a row may ask for (OpenAI's limit). */
export const MAX_TOP_LOGPROBS = 20;

/** u32 words per row of an `extra` slot with room for `entries` entries. */
export function extraWords(entries: number): number {
  return EXTRA_HEAD + EXTRA_ENTRY * entries;
}
/** Word of row r's header in an `extra` slot of `rows` rows. */
export function extraHead(r: number): number {
  return r * EXTRA_HEAD;
}
/** Word of row r's first entry in an `extra` slot of `rows` rows of `entries` entries. */
export function extraEntry(r: number, rows: number, entries: number): number {
  return rows * EXTRA_HEAD + r * entries * EXTRA_ENTRY;
}
/** Entries a row of `words` words holds. */
export function extraEntries(words: number): number {
  return (words - EXTRA_HEAD) / EXTRA_ENTRY;
}
/** u32 words per row of a token mask. */
export function maskWords(vocab: number): number {
  return Math.ceil(vocab / 32);
}

const fr = Math.fround;

/** The oracle of `logits_process`. */
export function processRows(x: Float32Array, extra: Uint32Array, mask: Uint32Array, rows: number, vocab: number, counts?: Uint32Array): Float32Array {
  const y = Float32Array.from(x);
  const EW = extra.length / rows, E = extraEntries(EW), MW = maskWords(vocab);
  for (let r = 0; r < rows; r++) {
    const o = r * EXTRA_HEAD, eb = rows * EXTRA_HEAD + r * E * EXTRA_ENTRY, base = r * vocab;
    const mk = extra[o + EXTRA.masked], masked = mk >= 1 && mk <= rows, mb = (mk - 1) * MW;
    const allowed = (i: number) => !masked || ((mask[mb + (i >>> 5)] >>> (i & 31)) & 1) === 1;
    for (let i = 0; i < vocab; i++) if (!allowed(i) && Number.isFinite(x[base + i])) y[base + i] = BANNED;
    const rep = f32FromBits(extra[o + EXTRA.rep]), freq = f32FromBits(extra[o + EXTRA.freq]), pres = f32FromBits(extra[o + EXTRA.pres]);
    const k = extra[o + EXTRA.dense];
    const dense = counts !== undefined && k >= 1 && k <= counts.length / vocab;
    const cb = (k - 1) * vocab; // the row's counts
    if (dense) {
      for (let i = 0; i < vocab; i++) {
        const seen = counts[cb + i];
        if (seen !== 0 && Number.isFinite(x[base + i]) && allowed(i)) y[base + i] = adjust(x[base + i], 0, seen, rep, freq, pres);
      }
    }
    const n = Math.min(extra[o + EXTRA.count], E);
    for (let j = 0; j < n; j++) {
      const e = eb + EXTRA_ENTRY * j;
      const id = extra[e];
      if (id >= vocab) continue;
      const v0 = x[base + id];
      if (!Number.isFinite(v0) || !allowed(id)) continue;
      y[base + id] = adjust(v0, f32FromBits(extra[e + 1]), dense ? counts[cb + id] : extra[e + 2], rep, freq, pres);
    }
  }
  return y;
}

/** One entry's rewrite of a finite logit (bias, then repetition, frequency, presence). */
export function adjust(x: number, bias: number, seen: number, rep: number, freq: number, pres: number): number {
  if (bias === -Infinity) return BANNED;
  let v = fr(x + bias);
  const count = (seen & 0x7fffffff) >>> 0;
  if (count > 0 || seen >>> 31) v = v > 0 ? fr(v / rep) : fr(v * rep);
  if (count > 0) v = fr(fr(v - fr(freq * count)) - pres);
  return Math.max(v, BANNED);
}

/** The oracle of `logprobs`. */
export function logprobRows(x: Float32Array, s: Int32Array, params: Uint32Array, rows: number, vocab: number, n: number): Float32Array {
  const W = 1 + 2 * n, out = new Float32Array(rows * W);
  for (let r = 0; r < rows; r++) {
    const p = r * SAMPLER_WORDS;
    if (params[p + SAMPLER.logprobs] !== 1) continue;
    const row = x.subarray(r * vocab, (r + 1) * vocab);
    let m = -Infinity;
    for (let i = 0; i < vocab; i++) if (row[i] > m) m = row[i];
    let sum = 0;
    for (let i = 0; i < vocab; i++) sum = fr(sum + fr(Math.exp(fr(row[i] - m))));
    const ls = fr(Math.log(sum));
    const lp = (i: number) => fr(fr(row[i] - m) - ls);
    const o = r * W;
    out[o] = lp(s[2 * r]);
    const k = Math.min(params[p + SAMPLER.topLogprobs], n);
    const order = topIndices(row, k);
    for (let j = 0; j < n; j++) {
      out[o + 1 + 2 * j] = j < order.length ? order[j] : -1;
      out[o + 2 + 2 * j] = j < order.length ? lp(order[j]) : 0;
    }
  }
  return out;
}

/** Indices of the k largest values (ties: lower index first; NaN never ranks). */
export function topIndices(row: Float32Array, k: number): number[] {
  const out: number[] = [];
  let px = Infinity, pi = -1;
  for (let j = 0; j < k; j++) {
    let bx = -Infinity, bi = -1;
    for (let i = 0; i < row.length; i++) {
      const v = row[i];
      if (v !== v) continue;
      const after = v < px || (v === px && i > pi);
      if (after && (bi < 0 || v > bx)) bx = v, bi = i;
    }
    if (bi < 0) break;
    out.push(bi);
    px = bx, pi = bi;
  }
  return out;
}
