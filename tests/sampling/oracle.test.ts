// The sampler's meaning (graph/sample.ts) on the CPU: greedy, temperature, top-k, top-p, min-p, the draw, the
// RNG and the non-finite flag; the op in the graph (type inference, evaluate) and the host API (llm/sampling.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  drawRow, mix32, planRow, rngBits, type RowParams, SAMPLER, SAMPLER_WORDS, sampleRows, samplerDistribution, uniform,
} from "../../graph/sample.ts";
import { evaluate } from "../../graph/eval.ts";
import { Tracer } from "../../graph/tracer.ts";
import { GraphError } from "../../graph/ir.ts";
import { f32FromBits } from "../../graph/dtype.ts";
import {
  appendSampler, encodeSampler, readSample, SAMPLER_SLOT, samplerSlot, samplerSlots, validateSampler,
} from "../../llm/sampling.ts";
import { chiSquare, gammaQ, lmLogits } from "./run.ts";

const P = (o: Partial<RowParams>): RowParams => ({ invTemp: 1, topK: 0, topP: 1, minP: 0, seed: 0, counter: 0, ...o });
const kept = (x: number[], p: Partial<RowParams>) => [...planRow(Float32Array.from(x), P(p)).kept].flatMap((k, i) => (k ? [i] : []));
/** Logits whose softmax at temperature 1 is `probs`. */
const logitsOf = (probs: number[]) => probs.map(Math.log);

test("greedy: temperature 0 picks the first index of the largest logit", () => {
  assert.equal(planRow(Float32Array.from([1, 3, 3, 2]), P({ invTemp: 0 })).greedy, 1);
  const rows = 50, V = 77;
  const x = new Float32Array(rows * V);
  for (let r = 0; r < rows; r++) x.set(lmLogits(V, r + 1), r * V);
  x[3 * V + 10] = x[3 * V + 60] = 100; // a tie
  const words = samplerSlot({ temperature: 0, topK: 5, seed: 3 }, 9, rows);
  const out = sampleRows(x, words, rows, V);
  for (let r = 0; r < rows; r++) {
    let best = 0;
    for (let i = 1; i < V; i++) if (x[r * V + i] > x[r * V + best]) best = i;
    assert.equal(out[2 * r], best, `row ${r}`);
    assert.equal(out[2 * r + 1], 0);
  }
  assert.equal(out[6], 10);
});

test("non-finite logits set the flag; the token is then the greedy one with NaN as -Inf", () => {
  const one = (x: number[], invTemp = 1) => [...sampleRows(Float32Array.from(x), samplerSlot({ temperature: invTemp ? 1 / invTemp : 0 }, 0), 1, x.length)];
  assert.deepEqual(one([NaN, 1, 5, 5, -Infinity]), [2, 1]);
  assert.deepEqual(one([0, Infinity, 2]), [1, 1]);
  assert.deepEqual(one([0, -Infinity, 2], 0), [2, 1]);
  assert.deepEqual(one([NaN, NaN]), [0, 1]);
  assert.equal(one([1, 2, 0])[1], 0, "a finite row never raises the flag");
});

test("temperature: kept tokens are drawn with p ∝ exp(x / T)", () => {
  const x = Float32Array.from([0.5, -1, 2, 1.25, 0]);
  for (const T of [0.5, 1, 2]) {
    const d = samplerDistribution(x, P({ invTemp: Math.fround(1 / T) }));
    const e = [...x].map((v) => Math.exp((v - 2) / T));
    const z = e.reduce((a, b) => a + b, 0);
    e.forEach((v, i) => assert.ok(Math.abs(d[i] - v / z) < 1e-6, `T=${T} token ${i}: ${d[i]} vs ${v / z}`));
  }
  // a lower temperature sharpens the distribution
  const sharp = samplerDistribution(x, P({ invTemp: 4 })), flat = samplerDistribution(x, P({ invTemp: 0.25 }));
  assert.ok(sharp[2] > 0.9 && flat[2] < 0.4);
});

test("top-k keeps the k largest logits, every tie at the k-th included; 0 and >= V are off", () => {
  const x = [5, 4, 4, 3, 1];
  assert.deepEqual(kept(x, { topK: 1 }), [0]);
  assert.deepEqual(kept(x, { topK: 2 }), [0, 1, 2]);
  assert.deepEqual(kept(x, { topK: 3 }), [0, 1, 2]);
  assert.deepEqual(kept(x, { topK: 4 }), [0, 1, 2, 3]);
  assert.deepEqual(kept(x, { topK: 0 }), [0, 1, 2, 3, 4]);
  assert.deepEqual(kept(x, { topK: 5 }), [0, 1, 2, 3, 4]);
  assert.deepEqual(kept(x, { topK: -3 }), [0, 1, 2, 3, 4]);
});

test("top-p keeps the smallest most-likely set reaching the mass, ties included", () => {
  const x = logitsOf([0.15, 0.5, 0.05, 0.3]);
  assert.deepEqual(kept(x, { topP: 0.45 }), [1]);
  assert.deepEqual(kept(x, { topP: 0.75 }), [1, 3]);
  assert.deepEqual(kept(x, { topP: 0.9 }), [0, 1, 3]);
  assert.deepEqual(kept(x, { topP: 0.97 }), [0, 1, 2, 3]);
  assert.deepEqual(kept(x, { topP: 1 }), [0, 1, 2, 3]);
  assert.deepEqual(kept(x, { topP: 0 }), [1]);
  // ties at the threshold are all kept
  assert.deepEqual(kept(logitsOf([0.4, 0.2, 0.2, 0.2]), { topP: 0.5 }), [0, 1, 2, 3]);
  // after top-k, the mass is over the renormalised top-k set: 0.5/0.8 = 0.625
  assert.deepEqual(kept(x, { topK: 2, topP: 0.6 }), [1]);
  assert.deepEqual(kept(x, { topK: 2, topP: 0.7 }), [1, 3]);
  // the order-independent definition: p_i >= t*, t* the largest p with mass{p >= t*} >= top_p
  const probs = [0.05, 0.1, 0.2, 0.25, 0.4];
  for (const tp of [0.3, 0.5, 0.7, 0.8, 0.9, 0.99]) {
    let t = 0;
    for (const c of [...probs].sort((a, b) => b - a)) {
      if (probs.filter((q) => q >= c).reduce((a, b) => a + b, 0) >= tp) {
        t = c;
        break;
      }
    }
    assert.deepEqual(kept(logitsOf(probs), { topP: tp }), probs.flatMap((q, i) => (q >= t ? [i] : [])), `top_p ${tp}`);
  }
});

test("min-p keeps tokens at least min_p times as likely as the most likely", () => {
  const x = logitsOf([0.15, 0.5, 0.05, 0.3]);
  assert.deepEqual(kept(x, { minP: 0.35 }), [1, 3]);
  assert.deepEqual(kept(x, { minP: 0.2 }), [0, 1, 3]);
  assert.deepEqual(kept(x, { minP: 0.05 }), [0, 1, 2, 3]);
  assert.deepEqual(kept(x, { minP: 1 }), [1]);
  // temperature applies first: at T = 0.5 the ratios square (0.3/0.5)^2 = 0.36
  assert.deepEqual(kept(x, { invTemp: 2, minP: 0.35 }), [1, 3]);
  assert.deepEqual(kept(x, { invTemp: 2, minP: 0.37 }), [1]);
  // the filters intersect and the result renormalises
  const d = samplerDistribution(Float32Array.from(x), P({ topK: 3, topP: 0.9, minP: 0.35 }));
  assert.ok(Math.abs(d[1] - 0.5 / 0.8) < 1e-6 && Math.abs(d[3] - 0.3 / 0.8) < 1e-6 && d[0] === 0 && d[2] === 0);
});

test("the draw picks the first kept index whose running sum exceeds u · total", () => {
  const plan = { nonfinite: false, greedy: 3, isGreedy: false, w: Float32Array.from([0.5, 0.25, 0.5, 1]), kept: Uint8Array.from([1, 0, 1, 1]), total: 2 };
  assert.equal(drawRow(plan, 0), 0);
  assert.equal(drawRow(plan, 0.2499), 0);
  assert.equal(drawRow(plan, 0.25), 2); // cum 0.5 is not > 0.5; the cut token 1 never counts
  assert.equal(drawRow(plan, 0.4999), 2);
  assert.equal(drawRow(plan, 0.5), 3);
  assert.equal(drawRow(plan, 1 - 2 ** -24), 3);
  assert.equal(drawRow({ ...plan, isGreedy: true }, 0.7), 3);
  const real = planRow(Float32Array.from([-1, -5, -1, 0]), P({ topK: 3 }));
  assert.deepEqual([...real.kept], [1, 0, 1, 1]);
  assert.equal(real.w[3], 1, "w = 1 at the max");
});

test("RNG: counter-based, deterministic, distinct per counter, uniform", () => {
  assert.equal(mix32(0), 0);
  assert.equal(rngBits(5, 77), rngBits(5, 77));
  const seen = new Set<number>();
  for (let c = 0; c < 100_000; c++) seen.add(rngBits(42, c));
  assert.equal(seen.size, 100_000, "mix32 is a bijection: distinct counters give distinct bits");
  assert.notEqual(rngBits(1, 0), rngBits(2, 0));
  const bins = new Array(16).fill(0);
  for (let c = 0; c < 160_000; c++) {
    const u = uniform(9, c);
    assert.ok(u >= 0 && u < 1);
    bins[Math.floor(u * 16)]++;
  }
  const chi = chiSquare(bins, new Array(16).fill(1 / 16));
  assert.ok(chi.p > 1e-3, `u is not uniform: chi2 ${chi.stat} on ${chi.dof} dof, p ${chi.p}`);
});

test("chi-square p-value: the regularized gamma matches known quantiles", () => {
  // chi2 quantiles: P(X > 3.841 | 1 dof) = 0.05, P(X > 18.307 | 10) = 0.05, P(X > 29.588 | 10) = 0.001,
  // P(X > 124.342 | 100) = 0.05, P(X > 149.449 | 100) = 0.001
  assert.ok(Math.abs(gammaQ(0.5, 3.841 / 2) - 0.05) < 1e-4);
  assert.ok(Math.abs(gammaQ(5, 18.307 / 2) - 0.05) < 1e-4);
  assert.ok(Math.abs(gammaQ(5, 29.588 / 2) - 0.001) < 1e-5);
  assert.ok(Math.abs(gammaQ(50, 124.342 / 2) - 0.05) < 1e-4); // 100 dof
  assert.ok(Math.abs(gammaQ(50, 149.449 / 2) - 0.001) < 1e-5);
});

test("sample in a graph: type inference and evaluate equal the row oracle", () => {
  const t = new Tracer();
  const x = t.slot("x", { kind: "Input", dtype: "f32", shape: [3, 40] });
  const bad = t.slot("bad", { kind: "Sampler", dtype: "u32", shape: [3, 4] });
  assert.throws(() => t.sample(x, bad), GraphError);
  const fl = t.slot("fl", { kind: "Sampler", dtype: "f32", shape: [3, SAMPLER_WORDS] });
  assert.throws(() => t.sample(x, fl), GraphError);
  const { sample, output } = appendSampler(t, x);
  assert.deepEqual([sample.dtype, ...sample.shape], ["i32", 3, 2]);
  const g = t.build();
  const xs = new Float32Array(120).map((_, i) => Math.sin(i * 1.7) * 3);
  const words = samplerSlot([{ temperature: 0.7, topK: 10 }, { temperature: 1, topP: 0.8, seed: 4 }, {}], [3, 4, 5], 3);
  const got = evaluate(g, { slots: { x: xs, [SAMPLER_SLOT]: words, bad: new Uint32Array(12), fl: new Float32Array(24) } }).output[output];
  assert.deepEqual([...got], [...sampleRows(xs, words, 3, 40)]);
});

test("host API: parameters become slot words; bad values are refused; the output splits", () => {
  const w = new Uint32Array(SAMPLER_WORDS * 2);
  encodeSampler({ temperature: 0.8, topK: 40, topP: 0.9, minP: 0.05, seed: -1 }, 2 ** 32 + 7, w, 1);
  const o = SAMPLER_WORDS;
  assert.equal(f32FromBits(w[o + SAMPLER.invTemp]), Math.fround(1 / 0.8));
  assert.equal(w[o + SAMPLER.topK], 40);
  assert.equal(f32FromBits(w[o + SAMPLER.topP]), Math.fround(0.9));
  assert.equal(f32FromBits(w[o + SAMPLER.minP]), Math.fround(0.05));
  assert.equal(w[o + SAMPLER.seed], 0xffffffff);
  assert.equal(w[o + SAMPLER.counter], 7);
  assert.deepEqual([...w.subarray(0, o)], new Array(o).fill(0));
  encodeSampler({}, 0, w, 0);
  assert.equal(f32FromBits(w[SAMPLER.invTemp]), 0, "the default is greedy");
  assert.equal(f32FromBits(w[SAMPLER.topP]), 1);
  assert.equal(f32FromBits(samplerSlot({ temperature: 1e-40 }, 0)[SAMPLER.invTemp]), 0, "1/T past f32 range is greedy");
  for (const bad of [{ temperature: -1 }, { temperature: NaN }, { temperature: Infinity }, { topK: 1.5 }, { topK: -1 }, { topP: 1.5 }, { minP: -0.1 }, { seed: 0.5 }]) {
    assert.throws(() => validateSampler(bad), RangeError, JSON.stringify(bad));
  }
  const slots = samplerSlots([{ temperature: 1 }, { temperature: 0 }], [10, 11], { rows: 2 });
  assert.equal(slots[SAMPLER_SLOT].length, 2 * SAMPLER_WORDS);
  assert.equal(slots[SAMPLER_SLOT][SAMPLER_WORDS + SAMPLER.counter], 11);
  assert.throws(() => samplerSlot([{}], 0, 2), RangeError);
  const r = readSample({ sample: Int32Array.from([5, 0, 9, 1]) });
  assert.deepEqual([...r.tokens], [5, 9]);
  assert.deepEqual([...r.nonFinite], [0, 1]);
});

test("vLLM's order: top-p renormalises over what min-p (and top-k) keep", () => {
  // w = [1, 0.905, 0.135, 0.122]: min-p 0.2 keeps tokens 0 and 1 (Z = 1.905); top-p 0.5 then needs 0.95 of
  // mass, which token 0 alone reaches. Over the whole row (Z = 2.16) it would need token 1 too.
  const x = Float32Array.from([2, 1.9, 0, -0.1]);
  const p = { invTemp: 1, topK: 0, topP: 0.5, minP: 0.2, seed: 1, counter: 0 };
  assert.deepEqual([...planRow(x, p).kept], [1, 0, 0, 0]);
  assert.deepEqual([...planRow(x, { ...p, minP: 0 }).kept], [1, 1, 0, 0]);
});
