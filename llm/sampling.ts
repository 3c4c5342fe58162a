// Host side of on-device sampling: what a caller says (SamplerParams), how it becomes the Sampler slot's
// words, the suffix appended to a traced step, and reading its result back. The meaning of every parameter is
// stated once, in graph/sample.ts; the kernel is kernels/lib/sample.ts.
//
//   const { tracer, logits } = traceLlama(cfg, { rows: 1, cap });
//   appendSampler(tracer, logits);                         // output "sample": i32 [rows, 2]
//   const id = exec.addEntry(key, tracer.build());
//   const r = await exec.step(id, { token, pos, ...samplerSlots({ temperature: 0.8, topK: 40, seed: 1 }, pos) });
//   const { tokens, nonFinite } = readSample(r.outputs);
//
// Every sampler value is a slot value: changing it never makes a new entry.
//
// The full sampler (`appendSampler(t, logits, { process: { entries }, logprobs: true })`) adds two more slots and
// one more output: `sampler_extra` (per row: penalties and up to `entries` (id, bias, count) entries) and
// `sampler_mask` (per row: a grammar's token bitmask), read by `logits_process` before the draw, and the output
// "logprobs" (graph/logits.ts). SamplerSlots writes all three slots per step from each row's parameters and
// TokenHistory (the prompt and generated tokens the penalties count), or, where token counts live in device
// State (`counts`: the Driver's one sequence; `rows`: a batch's sequence slots), from the parameters alone.
import { SAMPLER, SAMPLER_WORDS } from "../graph/sample.ts";
import { EXTRA, EXTRA_ENTRY, EXTRA_HEAD, extraEntry, extraHead, extraWords, MAX_TOP_LOGPROBS, maskWords, PROMPT_BIT } from "../graph/logits.ts";
import { f32Bits } from "../graph/dtype.ts";
import type { Tensor, Tracer } from "../graph/tracer.ts";
import type { SlotPrefix } from "../backends/executor.ts";

/** How to pick the next token. Every field is optional; the default is greedy decoding. */
export interface SamplerParams {
  /** 0 (the default) is greedy: the first index of the largest logit; the filters below then do nothing. */
  temperature?: number;
  /** Keep the k most likely tokens (ties at the k-th all kept); 0 (default) is off. */
  topK?: number;
  /** Keep the smallest set of most likely tokens whose probability reaches topP; 1 (default) is off. */
  topP?: number;
  /** Keep tokens at least minP times as likely as the most likely; 0 (default) is off. */
  minP?: number;
  /** RNG seed (an integer, taken mod 2^32); 0 by default. Same seed and counter, same draw. */
  seed?: number;
  /** Added to a token's logit before everything else, by token id (OpenAI's logit_bias: each in [-100, 100]). */
  logitBias?: Readonly<Record<number, number>> | ReadonlyMap<number, number>;
  /** Repetition penalty over prompt and generated tokens (vLLM repetition_penalty, llama.cpp repeat_penalty); 1 (default) is off. */
  repeatPenalty?: number;
  /** Subtracted once per occurrence of a token among the generated ones, in [-2, 2]; 0 (default) is off. */
  frequencyPenalty?: number;
  /** Subtracted once from every token already generated, in [-2, 2]; 0 (default) is off. */
  presencePenalty?: number;
  /** End-of-generation tokens are banned until this many tokens are generated; 0 (default). */
  minTokens?: number;
  /** Report the sampled token's logprob (raw: before bias, penalties, temperature). */
  logprobs?: boolean;
  /** Also report this many most likely tokens with their logprobs (0 to 20; implies logprobs). */
  topLogprobs?: number;
}

/** True when a row needs `logits_process` (bias, penalties or min_tokens). */
export function needsProcessing(p: SamplerParams): boolean {
  return penaltiesOn(p) || (p.minTokens ?? 0) > 0 || biasEntries(p).length > 0;
}
/** True when a row's draw reads token counts (a repetition, frequency or presence penalty). */
export function penaltiesOn(p: SamplerParams): boolean {
  return (p.repeatPenalty ?? 1) !== 1 || (p.frequencyPenalty ?? 0) !== 0 || (p.presencePenalty ?? 0) !== 0;
}
/**
 * A plain object's bias entries, read once per object: its keys are token ids, which an engine stores as
 * sparse (dictionary) elements, and Object.entries over those cost ~0.4 µs an entry, paid three times per row
 * and step (validate, encode, set): 50 entries were ~70 µs of host time per decode step. A bias object must
 * not change after its first use (the Driver and the server make one per request); a Map is read each time.
 */
const biasOfObject = new WeakMap<object, [number, number][]>();
function biasEntries(p: SamplerParams): [number, number][] {
  const b = p.logitBias;
  if (b === undefined) return [];
  if (b instanceof Map) return [...b.entries()];
  let e = biasOfObject.get(b);
  if (!e) biasOfObject.set(b, e = Object.entries(b).map(([k, v]) => [Number(k), v as number]));
  return e;
}
/** A row's bias entries as `extra` words (id, bias bits, 0), ids past the vocabulary left out, at most `room`:
 * encoded once per bias object (a plain object's entries are cached above) and vocabulary. */
const encodedOfBias = new WeakMap<object, Map<string, Uint32Array>>();
const NO_BIAS = new Uint32Array(0);
function encodedBias(p: SamplerParams, vocab: number, room: number): Uint32Array {
  if (p.logitBias === undefined) return NO_BIAS;
  const e = biasEntries(p);
  const key = `${vocab}:${room}`;
  let by = encodedOfBias.get(e);
  const hit = by?.get(key);
  if (hit) return hit;
  const kept = e.filter(([id]) => id < vocab).slice(0, room);
  const enc = new Uint32Array(EXTRA_ENTRY * kept.length);
  kept.forEach(([id, b], j) => {
    enc[EXTRA_ENTRY * j] = id;
    enc[EXTRA_ENTRY * j + 1] = f32Bits(b);
  });
  if (!(p.logitBias instanceof Map)) { // a Map's entries are read each time: nothing to key a cache on
    if (!by) encodedOfBias.set(e, by = new Map());
    by.set(key, enc);
  }
  return enc;
}
/** Most logit_bias entries a request may carry (OpenAI's limit). */
export const MAX_LOGIT_BIAS = 300;

/** Greedy decoding: the most likely token every step. */
export const GREEDY: Readonly<SamplerParams> = Object.freeze({ temperature: 0 });
/** Default names of the Sampler slot and of the sampled output. */
export const SAMPLER_SLOT = "sampler";
export const SAMPLE_OUTPUT = "sample";

/** Throws a RangeError naming the first parameter out of range. */
export function validateSampler(p: SamplerParams): void {
  const bad = (name: string, v: unknown, want: string) => new RangeError(`sampler ${name} = ${v}: ${want}`);
  const t = p.temperature ?? 0;
  if (!(t >= 0 && t < Infinity)) throw bad("temperature", t, "must be a finite number >= 0");
  const k = p.topK ?? 0;
  if (!(Number.isInteger(k) && k >= 0 && k <= 0x7fffffff)) throw bad("topK", k, "must be an integer >= 0 (0 = off)");
  const tp = p.topP ?? 1;
  if (!(tp >= 0 && tp <= 1)) throw bad("topP", tp, "must be in [0, 1] (1 = off)");
  const mp = p.minP ?? 0;
  if (!(mp >= 0 && mp <= 1)) throw bad("minP", mp, "must be in [0, 1] (0 = off)");
  const s = p.seed ?? 0;
  if (!Number.isSafeInteger(s)) throw bad("seed", s, "must be an integer");
  const bias = biasEntries(p);
  if (bias.length > MAX_LOGIT_BIAS) throw bad("logitBias", `${bias.length} entries`, `at most ${MAX_LOGIT_BIAS}`);
  for (const [id, v] of bias) {
    if (!(Number.isInteger(id) && id >= 0)) throw bad("logitBias", id, "keys must be token ids (integers >= 0)");
    if (!(typeof v === "number" && v >= -100 && v <= 100)) throw bad(`logitBias[${id}]`, v, "must be a number in [-100, 100]");
  }
  const rp = p.repeatPenalty ?? 1;
  if (!(rp > 0 && rp <= 10)) throw bad("repeatPenalty", rp, "must be in (0, 10] (1 = off)");
  for (const k of ["frequencyPenalty", "presencePenalty"] as const) {
    const v = p[k] ?? 0;
    if (!(v >= -2 && v <= 2)) throw bad(k, v, "must be in [-2, 2] (0 = off)");
  }
  const mt = p.minTokens ?? 0;
  if (!(Number.isSafeInteger(mt) && mt >= 0)) throw bad("minTokens", mt, "must be an integer >= 0");
  const tl = p.topLogprobs ?? 0;
  if (!(Number.isInteger(tl) && tl >= 0 && tl <= MAX_TOP_LOGPROBS)) throw bad("topLogprobs", tl, `must be an integer in [0, ${MAX_TOP_LOGPROBS}]`);
  if (p.logprobs !== undefined && typeof p.logprobs !== "boolean") throw bad("logprobs", p.logprobs, "must be a boolean");
}

/** Writes one row of the Sampler slot (SAMPLER_WORDS u32 words at row `row`) for a draw at `counter`. */
export function encodeSampler(p: SamplerParams, counter: number, into: Uint32Array, row = 0): void {
  validateSampler(p);
  if (!Number.isSafeInteger(counter)) throw new RangeError(`sampler counter = ${counter}: must be an integer`);
  const o = row * SAMPLER_WORDS;
  if (o + SAMPLER_WORDS > into.length) throw new RangeError(`sampler row ${row} is outside a slot of ${into.length / SAMPLER_WORDS} rows`);
  const t = p.temperature ?? 0;
  const inv = t > 0 ? Math.fround(1 / t) : 0;
  into.fill(0, o, o + SAMPLER_WORDS);
  into[o + SAMPLER.invTemp] = f32Bits(inv < Infinity ? inv : 0); // a temperature too small for f32: greedy
  into[o + SAMPLER.topK] = p.topK ?? 0;
  into[o + SAMPLER.topP] = f32Bits(p.topP ?? 1);
  into[o + SAMPLER.minP] = f32Bits(p.minP ?? 0);
  into[o + SAMPLER.seed] = u32Of(p.seed ?? 0);
  into[o + SAMPLER.counter] = u32Of(counter);
  const top = p.topLogprobs ?? 0;
  into[o + SAMPLER.topLogprobs] = top;
  into[o + SAMPLER.logprobs] = p.logprobs || top > 0 ? 1 : 0;
}

/** A safe integer mod 2^32 (exact: |x| < 2^53, so x % 2^32 is; BigInt.asUintN cost ~1 µs per call). */
function u32Of(x: number): number {
  const r = x % 0x100000000;
  return r < 0 ? r + 0x100000000 : r;
}

/**
 * The Sampler slot for `rows` rows: one SamplerParams for all rows or one per row, and one counter for all
 * rows or one per row (rows drawing from identical logits need different counters to draw differently).
 */
export function samplerSlot(
  params: SamplerParams | readonly SamplerParams[],
  counters: number | ArrayLike<number>,
  rows = 1,
): Uint32Array {
  const words = new Uint32Array(rows * SAMPLER_WORDS);
  for (let r = 0; r < rows; r++) {
    const p = Array.isArray(params) ? params[r] : params as SamplerParams;
    if (!p) throw new RangeError(`no sampler parameters for row ${r} of ${rows}`);
    const c = typeof counters === "number" ? counters : counters[r];
    if (c === undefined) throw new RangeError(`no sampler counter for row ${r} of ${rows}`);
    encodeSampler(p, c, words, r);
  }
  return words;
}

/** Slot values to spread into a step's SlotValues: `{ [slot]: samplerSlot(params, counter, rows) }`. */
export function samplerSlots(
  params: SamplerParams | readonly SamplerParams[],
  counter: number | ArrayLike<number>,
  opts: { rows?: number; slot?: string } = {},
): Record<string, Uint32Array> {
  return { [opts.slot ?? SAMPLER_SLOT]: samplerSlot(params, counter, opts.rows ?? 1) };
}

export interface AppendedSampler {
  /** The sample node: i32 [rows, 2] = (token, nonfinite) per row. */
  sample: Tensor;
  /** The Sampler slot node, u32 [rows, SAMPLER_WORDS]. */
  slot: Tensor;
  /** Name of the step output holding `sample`. */
  output: string;
}

/** Slot and output names of the full sampler. */
export const EXTRA_SLOT = "sampler_extra";
export const MASK_SLOT = "sampler_mask";
export const LOGPROBS_OUTPUT = "logprobs";
/** The token-count State of a one-row step (u32 [2·vocab, 1]: count | PROMPT_BIT per token, then a spare row whose
 * first word takes the writes that do not count, as the scatter kernel faults on a negative index; a whole spare
 * row, so that logits_process reads the counts as a [2, vocab] view instead of a copy of a slice). */
export const COUNTS_STATE = "sampler_counts";
/** i32 [2]: [1 = mark this step's input tokens as prompt, 1 = count this step's draw]. */
export const COUNT_SLOT = "sampler_count";
/**
 * A batch's token counts: State u32 [(rows + 1)·vocab, 1], one row of counts per sequence slot (row q at q·vocab),
 * then a spare row that unused writes go to (the scatter kernel faults on a negative index; no row names it).
 */
export const ROW_COUNTS_STATE = "sampler_row_counts";
/** i32 [writes]: where each of this step's count writes goes in ROW_COUNTS_STATE (q·vocab + token; unused: rows·vocab). */
export const COUNT_AT_SLOT = "sampler_count_at";
/** u32 [writes, 1]: the word each count write sets (count | PROMPT_BIT). */
export const COUNT_VALUE_SLOT = "sampler_count_value";

export interface AppendOptions {
  output?: string;
  slot?: string;
  /**
   * Add `logits_process` before the draw, with room for `entries` (id, bias, count) entries per row. With
   * `counts` (one sampled row only), the penalties read token counts kept in device State and updated by the
   * step itself: the step's input tokens (slot `tokens`, default "token") are marked as prompt and its draw is
   * counted, as the COUNT_SLOT says; a reset of the executor's State clears them.
   * With `rows` (a batch, any number of sampled rows), the counts are `rows.rows` rows in device State
   * (ROW_COUNTS_STATE), one per sequence slot; a row's `dense` word names its counts row (SamplerSlots.set's
   * `countsRow`). The host sets words of that State through up to `rows.writes` writes per step (COUNT_AT_SLOT,
   * COUNT_VALUE_SLOT), applied in place before the sampler reads: a slot's reset and prompt when a sequence is
   * admitted, then each generated token's new count (llm/serve/counts.ts).
   */
  process?: { entries: number; counts?: boolean; tokens?: string; rows?: { rows: number; writes: number } };
  /** Add the `logprobs` output (f32 [rows, 1 + 2·20]). */
  logprobs?: boolean;
}

/**
 * Appends the sampling suffix to a traced step: a Sampler slot and a `sample` node over `logits`
 * (f32 [rows, vocab], or [vocab] for one row), returned as one output (default "sample"), so the host reads
 * back 8 bytes per row and never the logits. With `process` and `logprobs`, the full sampler (see the top).
 */
export function appendSampler(t: Tracer, logits: Tensor, opts: AppendOptions = {}): AppendedSampler {
  const x = logits.shape.length === 1 ? t.reshape(logits, [1, logits.shape[0]]) : logits;
  if (x.shape.length !== 2) throw new RangeError(`appendSampler: logits must be [rows, vocab], got [${logits.shape}]`);
  const [R, V] = x.shape;
  const slot = t.slot(opts.slot ?? SAMPLER_SLOT, { kind: "Sampler", dtype: "u32", shape: [R, SAMPLER_WORDS] });
  let y = x;
  let counted: { counts: Tensor; inc: Tensor } | undefined;
  if (opts.process) {
    const e = opts.process.entries;
    if (!(Number.isInteger(e) && e >= 0)) throw new RangeError(`appendSampler: entries ${e} must be an integer >= 0`);
    const extra = t.slot(EXTRA_SLOT, { kind: "Input", dtype: "u32", shape: [R, extraWords(e)] });
    const mask = t.slot(MASK_SLOT, { kind: "Input", dtype: "u32", shape: [R, maskWords(V)] });
    counted = opts.process.counts ? markPrompt(t, V, R, opts.process.tokens ?? "token") : undefined;
    const rows = opts.process.rows ? rowCounts(t, V, opts.process.rows) : undefined;
    y = t.logitsProcess(x, extra, mask, counted ? t.reshape(counted.counts, [2, V]) : rows); // `dense` 1 names row 0
  }
  const sample = t.sample(y, slot);
  const output = opts.output ?? SAMPLE_OUTPUT;
  t.output(output, sample);
  if (counted) { // the draw counts once it is made: the next step's penalties see it
    const tok = t.reshape(t.slice(sample, 1, 0, 1), [1]);
    const at = t.select(t.gt(counted.inc, 0), tok, V);
    t.writeState(COUNTS_STATE, t.scatter(counted.counts, t.add(t.gather(counted.counts, tok), 1), at));
  }
  if (opts.logprobs) t.output(LOGPROBS_OUTPUT, t.logprobs(x, sample, slot, MAX_TOP_LOGPROBS));
  return { sample, slot, output };
}

/**
 * A batch's counts State after this step's host writes, as [rows, V] for logits_process. The scatter is the
 * State's write and its only reader is the State read, so it is planned in place: a step touches `writes` words,
 * never the rows·V of the whole State.
 */
function rowCounts(t: Tracer, V: number, o: { rows: number; writes: number }): Tensor {
  if (!(Number.isInteger(o.rows) && o.rows >= 1 && Number.isInteger(o.writes) && o.writes >= 1)) {
    throw new RangeError(`appendSampler: count rows ${o.rows} and writes ${o.writes} must be positive integers`);
  }
  const c0 = t.state(ROW_COUNTS_STATE, "u32", [(o.rows + 1) * V, 1]);
  const at = t.slot(COUNT_AT_SLOT, { kind: "Input", dtype: "i32", shape: [o.writes] });
  const value = t.slot(COUNT_VALUE_SLOT, { kind: "Input", dtype: "u32", shape: [o.writes, 1] });
  const c1 = t.scatter(c0, value, at);
  t.writeState(ROW_COUNTS_STATE, c1);
  return t.reshape(c1, [o.rows + 1, V]); // a view (a slice would copy); no `dense` word names the spare row
}

/** The counts State with this step's input tokens marked as prompt (when COUNT_SLOT[0] is 1). */
function markPrompt(t: Tracer, V: number, R: number, tokenSlot: string): { counts: Tensor; inc: Tensor } {
  if (R !== 1) throw new RangeError(`appendSampler: token counts in State need one sampled row, got ${R}`);
  const c0 = t.state(COUNTS_STATE, "u32", [2 * V, 1]);
  const ctl = t.slot(COUNT_SLOT, { kind: "Input", dtype: "i32", shape: [2] });
  const tokens = t.slot(tokenSlot);
  const n = tokens.shape[0];
  const at = t.select(t.gt(t.broadcast(t.slice(ctl, 0, 0, 1), [n]), 0), tokens, V);
  const counts = t.scatter(c0, t.or(t.gather(c0, tokens), PROMPT_BIT), at);
  return { counts, inc: t.slice(ctl, 0, 1, 2) };
}

/** A token's word in a counts row: its count among the generated tokens | PROMPT_BIT when the prompt holds it. */
export function countWord(h: TokenHistory, id: number): number {
  return (Math.min(h.counts.get(id) ?? 0, 0x7fffffff) | (h.prompt.has(id) ? PROMPT_BIT : 0)) >>> 0;
}

/** The prompt and generated tokens of one sequence, as the penalties count them. */
export class TokenHistory {
  /** Distinct prompt tokens. */
  readonly prompt = new Set<number>();
  /** Occurrences of each generated token; Map order is the order of last occurrence (most recent last). */
  readonly counts = new Map<number, number>();
  /** Generated tokens so far. */
  generated = 0;
  constructor(prompt: Iterable<number> = []) {
    for (const t of prompt) this.prompt.add(t);
  }
  /** Counts a generated token. */
  add(token: number): void {
    const c = this.counts.get(token) ?? 0;
    this.counts.delete(token);
    this.counts.set(token, c + 1);
    this.generated++;
  }
}

/** What a row's draw depends on besides its SamplerParams. */
export interface RowContext {
  /** The sequence's tokens (penalties, min_tokens); none: no penalties and no min_tokens apply. */
  history?: TokenHistory;
  /** End-of-generation ids banned until minTokens tokens are generated. */
  eog?: Iterable<number>;
  /** The grammar's token bitmask for this step (bit set = allowed), or none for an unconstrained row. */
  mask?: Uint32Array | Int32Array;
  /** The penalties read the counts State (appendSampler's `counts`), not entries from `history`. */
  deviceCounts?: boolean;
  /** The penalties read this row of a batch's counts State (appendSampler's `rows`), not entries from `history`. */
  countsRow?: number;
}

/**
 * The three slots of the full sampler for `rows` rows, rewritten per step: `set` encodes one row, `values`
 * gives the slot values to spread into a step. When a row's entries outnumber `entries`, bias and min_tokens
 * bans come first, then the generated tokens (most recent first), then prompt tokens: the penalty then counts
 * only what fits (a window, as llama.cpp's repeat_last_n), never an error.
 */
export class SamplerSlots {
  readonly words: Uint32Array;
  readonly extra: Uint32Array;
  readonly mask: Uint32Array;
  private readonly ew: number;
  private readonly mw: number;
  /** Each row's mask as set (packed into `mask` by values()/uploads()). */
  private readonly masks: (Uint32Array | undefined)[] = [];
  constructor(readonly rows: number, readonly vocab: number, readonly entries: number) {
    this.words = new Uint32Array(rows * SAMPLER_WORDS);
    this.ew = extraWords(entries);
    this.mw = maskWords(vocab);
    this.extra = new Uint32Array(rows * this.ew);
    this.mask = new Uint32Array(rows * this.mw);
  }

  /** Encodes row `row`: parameters, draw counter and context. Throws a RangeError naming a bad value. */
  set(row: number, p: SamplerParams, counter: number, ctx: RowContext = {}): void {
    encodeSampler(p, counter, this.words, row);
    if (!(Number.isInteger(row) && row >= 0 && row < this.rows)) throw new RangeError(`sampler row ${row} is outside a slot of ${this.rows} rows`);
    const o = extraHead(row), eb = extraEntry(row, this.rows, this.entries);
    this.extra.fill(0, o, o + EXTRA_HEAD);
    this.extra[o + EXTRA.rep] = f32Bits(p.repeatPenalty ?? 1);
    this.extra[o + EXTRA.freq] = f32Bits(p.frequencyPenalty ?? 0);
    this.extra[o + EXTRA.pres] = f32Bits(p.presencePenalty ?? 0);
    const h = ctx.history;
    const pen = penaltiesOn(p), dense = pen && (ctx.countsRow !== undefined || ctx.deviceCounts === true);
    if (!(h && ((pen && !dense) || h.generated < (p.minTokens ?? 0)))) {
      // Bias entries only (the steady state of a generation: its counts in device State, min_tokens reached):
      // the row's entries encoded once per bias object and copied (Map-built entries cost ~0.2 µs each per step).
      if (dense) this.denseRow(o, ctx);
      const enc = encodedBias(p, this.vocab, this.entries);
      this.extra.set(enc, eb);
      this.extra[o + EXTRA.count] = enc.length / EXTRA_ENTRY;
      this.setMask(row, ctx);
      return;
    }
    const ent = new Map<number, { bias: number; seen: number }>();
    const room = () => ent.size < this.entries;
    for (const [id, b] of biasEntries(p)) if (id < this.vocab && room()) ent.set(id, { bias: b, seen: 0 });
    if (h && h.generated < (p.minTokens ?? 0)) {
      for (const id of ctx.eog ?? []) if (id < this.vocab && room()) ent.set(id, { bias: -Infinity, seen: 0 });
    }
    if (dense) this.denseRow(o, ctx);
    else if (h && pen) {
      const gen = [...h.counts.entries()].reverse();
      for (const [id, c] of gen) {
        const e = ent.get(id);
        if (e) e.seen = Math.min(c, 0x7fffffff) | (h.prompt.has(id) ? PROMPT_BIT : 0);
        else if (room()) ent.set(id, { bias: 0, seen: Math.min(c, 0x7fffffff) | (h.prompt.has(id) ? PROMPT_BIT : 0) });
      }
      if ((p.repeatPenalty ?? 1) !== 1) {
        for (const id of h.prompt) {
          const e = ent.get(id);
          if (e) e.seen = (e.seen | PROMPT_BIT) >>> 0;
          else if (room()) ent.set(id, { bias: 0, seen: PROMPT_BIT });
        }
      }
    }
    let j = 0;
    for (const [id, e] of ent) {
      const at = eb + EXTRA_ENTRY * j++;
      this.extra[at] = id;
      this.extra[at + 1] = f32Bits(e.bias);
      this.extra[at + 2] = e.seen >>> 0;
    }
    this.extra[o + EXTRA.count] = j;
    this.setMask(row, ctx);
  }

  /** The header's `dense` word: the row's penalties read a counts row in device State. */
  private denseRow(o: number, ctx: RowContext): void {
    if (ctx.countsRow !== undefined) {
      if (!(Number.isInteger(ctx.countsRow) && ctx.countsRow >= 0)) throw new RangeError(`counts row ${ctx.countsRow} is not an index`);
      this.extra[o + EXTRA.dense] = ctx.countsRow + 1;
    } else this.extra[o + EXTRA.dense] = 1;
  }

  private setMask(row: number, ctx: RowContext): void {
    if (ctx.mask && ctx.mask.length < this.mw) throw new RangeError(`token mask of ${ctx.mask.length} words for a vocabulary of ${this.vocab} (${this.mw} words)`);
    this.masks[row] = ctx.mask ? new Uint32Array(ctx.mask.buffer, ctx.mask.byteOffset, this.mw) : undefined;
  }

  /** Packs the masks of the rows that have one at the front of `mask` (row order); returns how many. */
  private pack(): number {
    let n = 0;
    for (let r = 0; r < this.rows; r++) {
      const m = this.masks[r];
      if (m) this.mask.set(m, n++ * this.mw);
      this.extra[extraHead(r) + EXTRA.masked] = m ? n : 0;
    }
    return n;
  }

  /** Slot values of the step (whole slots: what the oracle reads too). */
  values(slot = SAMPLER_SLOT): Record<string, Uint32Array> {
    this.pack();
    return { [slot]: this.words, [EXTRA_SLOT]: this.extra, [MASK_SLOT]: this.mask };
  }

  /**
   * The same values for Executor.step, where two slots are prefixes (the rest keeps older bytes that no row
   * reads): the mask slot holds only the masks of constrained rows, so a step without a grammar uploads no mask,
   * and the extra slot stops after the entries of the last row that has any (the headers come first), so rows
   * without bias or bans send their 8 header words only when they come after those that have them.
   */
  uploads(slot = SAMPLER_SLOT): Record<string, Uint32Array | SlotPrefix> {
    const n = this.pack();
    let last = -1;
    for (let r = 0; r < this.rows; r++) if (this.extra[extraHead(r) + EXTRA.count] > 0) last = r;
    return {
      [slot]: this.words,
      [EXTRA_SLOT]: { prefix: this.extra.subarray(0, extraEntry(last + 1, this.rows, this.entries)) },
      [MASK_SLOT]: { prefix: this.mask.subarray(0, n * this.mw) },
    };
  }
}

/** One row's logprobs as OpenAI reports them: the sampled token's, then the most likely ones. */
export interface RowLogprobs {
  /** The sampled token's log-probability under the raw logits. */
  logprob: number;
  /** The most likely tokens, best first, with their log-probabilities. */
  top: { id: number; logprob: number }[];
}

export interface Sampled {
  /** Token id per row. */
  tokens: Int32Array;
  /** 1 where the row's logits held a NaN or an infinity (its token is then the greedy one and suspect). */
  nonFinite: Uint8Array;
  /** Per row, when the step has a logprobs output: the row's logprobs, or undefined where it asked for none. */
  logprobs?: (RowLogprobs | undefined)[];
}

/**
 * Splits the `sample` output of a step (i32 [rows, 2]) into tokens and non-finite flags, and, given the step's
 * Sampler slot words, its "logprobs" output into rows.
 */
export function readSample(outputs: Record<string, ArrayLike<number>>, output = SAMPLE_OUTPUT, params?: Uint32Array): Sampled {
  const a = outputs[output];
  if (!a || a.length % 2 !== 0) throw new RangeError(`step has no sample output "${output}"`);
  const rows = a.length / 2;
  const tokens = new Int32Array(rows), nonFinite = new Uint8Array(rows);
  for (let r = 0; r < rows; r++) {
    tokens[r] = a[2 * r];
    nonFinite[r] = a[2 * r + 1] ? 1 : 0;
  }
  const lp = outputs[LOGPROBS_OUTPUT];
  if (!lp || !params) return { tokens, nonFinite };
  const W = lp.length / rows;
  const logprobs: (RowLogprobs | undefined)[] = [];
  for (let r = 0; r < rows; r++) {
    if (params[r * SAMPLER_WORDS + SAMPLER.logprobs] !== 1) {
      logprobs.push(undefined);
      continue;
    }
    const top: RowLogprobs["top"] = [];
    const n = Math.min(params[r * SAMPLER_WORDS + SAMPLER.topLogprobs], (W - 1) / 2);
    for (let k = 0; k < n; k++) {
      const id = lp[r * W + 1 + 2 * k];
      if (id >= 0) top.push({ id, logprob: lp[r * W + 2 + 2 * k] });
    }
    logprobs.push({ logprob: lp[r * W], top });
  }
  return { tokens, nonFinite, logprobs };
}
