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
import { SAMPLER, SAMPLER_WORDS } from "../graph/sample.ts";
import { f32Bits } from "../graph/dtype.ts";
import type { Tensor, Tracer } from "../graph/tracer.ts";

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
}

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
  into[o + SAMPLER.seed] = Number(BigInt.asUintN(32, BigInt(p.seed ?? 0)));
  into[o + SAMPLER.counter] = Number(BigInt.asUintN(32, BigInt(counter)));
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

/**
 * Appends the sampling suffix to a traced step: a Sampler slot and a `sample` node over `logits`
 * (f32 [rows, vocab], or [vocab] for one row), returned as one output (default "sample"), so the host reads
 * back 8 bytes per row and never the logits.
 */
export function appendSampler(t: Tracer, logits: Tensor, opts: { output?: string; slot?: string } = {}): AppendedSampler {
  const x = logits.shape.length === 1 ? t.reshape(logits, [1, logits.shape[0]]) : logits;
  if (x.shape.length !== 2) throw new RangeError(`appendSampler: logits must be [rows, vocab], got [${logits.shape}]`);
  const slot = t.slot(opts.slot ?? SAMPLER_SLOT, { kind: "Sampler", dtype: "u32", shape: [x.shape[0], SAMPLER_WORDS] });
  const sample = t.sample(x, slot);
  const output = opts.output ?? SAMPLE_OUTPUT;
  t.output(output, sample);
  return { sample, slot, output };
}

export interface Sampled {
  /** Token id per row. */
  tokens: Int32Array;
  /** 1 where the row's logits held a NaN or an infinity (its token is then the greedy one and suspect). */
  nonFinite: Uint8Array;
}

/** Splits the `sample` output of a step (i32 [rows, 2]) into tokens and non-finite flags. */
export function readSample(outputs: Record<string, ArrayLike<number>>, output = SAMPLE_OUTPUT): Sampled {
  const a = outputs[output];
  if (!a || a.length % 2 !== 0) throw new RangeError(`step has no sample output "${output}"`);
  const rows = a.length / 2;
  const tokens = new Int32Array(rows), nonFinite = new Uint8Array(rows);
  for (let r = 0; r < rows; r++) {
    tokens[r] = a[2 * r];
    nonFinite[r] = a[2 * r + 1] ? 1 : 0;
  }
  return { tokens, nonFinite };
}
