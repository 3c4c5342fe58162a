// Helpers of the sampling tests: Sampler slot rows, fixed logit vectors, a kernel run on a Device, and the
// chi-square test.
import type { Device, DeviceBuffer } from "../../backends/device.ts";
import { sample, sampleLayout, sampleListed, type SampleShape } from "../../kernels/lib/sample.ts";
import { MASS_WORDS, sampleMass, sampleSplit, sampleStats, STATS_WORDS } from "../../kernels/lib/sample_split.ts";
import { listWords, sampleList } from "../../kernels/lib/sample_list.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { SAMPLER, SAMPLER_WORDS } from "../../graph/sample.ts";
import { f32Bits } from "../../graph/dtype.ts";

export interface Params {
  invTemp: number;
  topK?: number;
  topP?: number;
  minP?: number;
  seed?: number;
  counter?: number;
}

/** Slot words of `rows` rows, row r from `at(r)`. */
export function paramWords(rows: number, at: (r: number) => Params): Uint32Array {
  const w = new Uint32Array(rows * SAMPLER_WORDS);
  for (let r = 0; r < rows; r++) {
    const p = at(r), o = r * SAMPLER_WORDS;
    w[o + SAMPLER.invTemp] = f32Bits(p.invTemp);
    w[o + SAMPLER.topK] = (p.topK ?? 0) >>> 0;
    w[o + SAMPLER.topP] = f32Bits(p.topP ?? 1);
    w[o + SAMPLER.minP] = f32Bits(p.minP ?? 0);
    w[o + SAMPLER.seed] = (p.seed ?? 0) >>> 0;
    w[o + SAMPLER.counter] = (p.counter ?? 0) >>> 0;
  }
  return w;
}

/** Deterministic logits resembling a language model's: a few strong tokens over a long tail. */
export function lmLogits(vocab: number, seed: number, spread = 3): Float32Array {
  let s = seed >>> 0 || 1;
  const next = () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s / 2 ** 32;
  };
  const x = new Float32Array(vocab);
  for (let i = 0; i < vocab; i++) {
    // Box-Muller normal, plus a heavier head
    const g = Math.sqrt(-2 * Math.log(next() + 1e-12)) * Math.cos(2 * Math.PI * next());
    x[i] = spread * g + (next() < 0.05 ? 4 * next() : 0);
  }
  return x;
}

/**
 * Runs the sample kernel once on a device: (token, nonfinite) per row. With `parts` > 1, the split kernels
 * (stats, masses, then the pick) run in order on scratch buffers, as the lowering chains them.
 */
export async function runKernel(dev: Device, shape: SampleShape, logits: Float32Array, params: Uint32Array): Promise<Int32Array> {
  const caps = dev.target.caps;
  const mk = (bytes: Uint8Array): DeviceBuffer => {
    const d = dev.alloc(Math.max(bytes.byteLength, 16), "device");
    dev.write(d, 0, bytes);
    return d;
  };
  const u8 = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const split = shape.parts && shape.parts > 1 ? sampleSplit(shape.vocab, shape.parts) : undefined;
  const P = split?.parts ?? 0, R = shape.rows;
  const X = { buffer: mk(u8(logits)), bytes: logits.byteLength };
  const PRM = { buffer: mk(u8(params)), bytes: params.byteLength };
  const OUT = { buffer: mk(new Uint8Array(R * 8)), bytes: R * 8 };
  const ST = { buffer: mk(new Uint8Array(R * P * STATS_WORDS * 4)), bytes: R * P * STATS_WORDS * 4 };
  const MS = { buffer: mk(new Uint8Array(R * P * MASS_WORDS * 4)), bytes: R * P * MASS_WORDS * 4 };
  // the parts' candidate list (sample_list.ts), filled with garbage: every word the pick kernel reads must be written
  const cap = sampleLayout(caps, shape).cap, listed = sampleListed(caps, shape);
  const LS = { buffer: mk(new Uint8Array(listed ? R * listWords(cap) * 4 : 4).fill(0x5a)), bytes: listed ? R * listWords(cap) * 4 : 4 };
  const steps: [Kernel, typeof X[]][] = split
    ? [
      [sampleStats(caps, { ...shape, parts: P }), [X, ST]],
      [sampleMass(caps, { ...shape, parts: P }), [X, PRM, ST, MS]],
      ...listed
        ? [[sampleList(caps, { ...shape, parts: P, cap }), [X, PRM, ST, MS, LS]], [sample(caps, shape), [X, PRM, ST, MS, LS, OUT]]] as [Kernel, typeof X[]][]
        : [[sample(caps, shape), [X, PRM, ST, MS, OUT]]] as [Kernel, typeof X[]][],
    ]
    : [[sample(caps, shape), [X, PRM, OUT]]];
  try {
    dev.run(steps.map(([k, bs]) => ({
      k: "kernel" as const, compiled: dev.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 },
      bindings: bs.map(({ buffer, bytes }) => ({ buffer, offset: 0, bytes: Math.max(bytes, 4) })),
    })));
    await dev.synchronize(120_000);
    const out = await dev.read(OUT.buffer, 0, R * 8);
    return new Int32Array(out.buffer.slice(out.byteOffset, out.byteOffset + out.byteLength));
  } finally {
    for (const b of [X, PRM, OUT, ST, MS, LS]) dev.free(b.buffer);
  }
}

/** Regularized upper incomplete gamma Q(a, x) (series for x < a + 1, continued fraction otherwise). */
export function gammaQ(a: number, x: number): number {
  if (x <= 0) return 1;
  const lnPre = -x + a * Math.log(x) - logGamma(a);
  if (x < a + 1) {
    let sum = 1 / a, term = sum;
    for (let n = 1; n < 10000; n++) {
      term *= x / (a + n);
      sum += term;
      if (Math.abs(term) < Math.abs(sum) * 1e-15) break;
    }
    return 1 - sum * Math.exp(lnPre);
  }
  // Lentz's continued fraction for Γ(a, x)
  const tiny = 1e-300;
  let b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (let i = 1; i < 10000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-15) break;
  }
  return Math.exp(lnPre) * h;
}

/** ln Γ(x) (Lanczos, g = 7). */
export function logGamma(x: number): number {
  const g = 7;
  const c = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  x -= 1;
  let a = c[0];
  const t = x + g + 0.5;
  for (let i = 1; i < g + 2; i++) a += c[i] / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}

export interface ChiSquare {
  stat: number;
  dof: number;
  p: number;
  /** Draws that fell on tokens of probability 0 (must be 0). */
  impossible: number;
}

/**
 * Pearson's chi-square of observed token counts against probabilities; cells with an expected count below
 * 5 are pooled (in index order) so the chi-square approximation holds.
 */
export function chiSquare(counts: ArrayLike<number>, probs: ArrayLike<number>): ChiSquare {
  let n = 0, impossible = 0;
  for (let i = 0; i < counts.length; i++) {
    n += counts[i];
    if (probs[i] === 0) impossible += counts[i];
  }
  const obs: number[] = [], exp: number[] = [];
  let poolE = 0, poolO = 0;
  for (let i = 0; i < probs.length; i++) {
    if (probs[i] === 0) continue;
    poolE += n * probs[i];
    poolO += counts[i];
    if (poolE >= 5) {
      obs.push(poolO);
      exp.push(poolE);
      poolE = poolO = 0;
    }
  }
  if (poolE > 0) { // a remainder below 5 joins the last cell
    if (exp.length === 0) {
      obs.push(0);
      exp.push(0);
    }
    obs[obs.length - 1] += poolO;
    exp[exp.length - 1] += poolE;
  }
  let stat = 0;
  for (let c = 0; c < exp.length; c++) stat += (obs[c] - exp[c]) ** 2 / exp[c];
  const dof = Math.max(1, exp.length - 1);
  return { stat, dof, p: gammaQ(dof / 2, stat / 2), impossible };
}
