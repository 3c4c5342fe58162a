// The split sampler (kernels/lib/sample_split.ts: stats and masses over many workgroups per row, then the
// pick) through the real path (compileGraph with CompileOptions.sampleParts forced, so every device runs it,
// not only the wide GPUs that choose it by default), on every device present:
//  - long rows (V 20000) with greedy, plain-temperature, filtered (listed by the parts), NaN and +Inf rows, replayed with new
//    counters: each token equals the oracle's (graph/sample.ts), except at a knife edge, where it must be a
//    token the oracle keeps (at most 1 row in 100: none here);
//  - flat long rows under top-p alone (θp bracketed: kernels/lib/sample_bracket.ts): the oracle's tokens;
//  - 6,000 plain-temperature draws (the split's fast path) match the oracle's distribution (Pearson
//    chi-square, pooled cells of expected count >= 5, rejected at p < 1e-3), and the draws reject a nearby
//    temperature (the test has power).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import type { TargetSet } from "../../kernels/target.ts";
import type { Graph } from "../../graph/ir.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Tracer } from "../../graph/tracer.ts";
import { planRow, rowParams, sampleRows, samplerDistribution } from "../../graph/sample.ts";
import { appendSampler, readSample, SAMPLER_SLOT, type SamplerParams, samplerSlot } from "../../llm/sampling.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";
import { chiSquare, lmLogits } from "./run.ts";

const P_REJECT = 1e-3;
const compileSplit = (parts: number) => (g: Graph, t: TargetSet) => compileGraph(g, t, { sampleParts: parts });

function graph(rows: number, V: number, broadcast: boolean) {
  const t = new Tracer();
  const x = t.slot("logits", { kind: "Input", dtype: "f32", shape: [broadcast ? 1 : rows, V] });
  appendSampler(t, broadcast ? t.broadcast(x, [rows, V]) : x);
  return t.build();
}

const LONG: SamplerParams[] = [
  { temperature: 1 }, { temperature: 0 }, { temperature: 0.8 }, { temperature: 0.7, topK: 40, topP: 0.9 },
  { temperature: 1.5 }, { temperature: 1, minP: 0.05 }, { temperature: 0.3 }, { temperature: 1.2 },
  // finite filtered rows (rows 3 and 5 hold a NaN and +Inf): the parts list them (kernels/lib/sample_list.ts)
  { temperature: 0.8, topK: 40, topP: 0.95 }, { temperature: 1, topK: 300 }, { temperature: 0.9, topP: 0.5 },
  { temperature: 1, minP: 0.1 },
];

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  test(`split sampler on ${backend}: long rows (V 20000, 9 parts) draw the oracle's tokens`, { skip }, async () => {
    const R = LONG.length, V = 20000;
    const logits = new Float32Array(R * V);
    for (let r = 0; r < R; r++) logits.set(lmLogits(V, 77 + r, r % 2 ? 4 : 1.5), r * V);
    logits[3 * V + 11] = NaN; // a non-finite row is greedy and flagged
    logits[5 * V + V - 1] = Infinity;
    const eng = new Engine(dev as Device, { compile: compileSplit(9), timeoutMs: 120_000, ownsDevice: false });
    try {
      const id = eng.addEntry("split-long", graph(R, V, false));
      for (let step = 0; step < 3; step++) {
        const words = samplerSlot(LONG.map((p, r) => ({ ...p, seed: 5 + r })), Array.from({ length: R }, (_, r) => 1000 * step + r), R);
        const got = readSample((await eng.step(id, { logits, [SAMPLER_SLOT]: words })).outputs);
        const want = sampleRows(logits, words, R, V);
        for (let r = 0; r < R; r++) {
          assert.equal(got.nonFinite[r], want[2 * r + 1], `step ${step} row ${r}: non-finite flag`);
          if (got.tokens[r] === want[2 * r]) continue;
          const plan = planRow(logits.subarray(r * V, (r + 1) * V), rowParams(words, r));
          assert.fail(`step ${step} row ${r}: drew ${got.tokens[r]}, the oracle ${want[2 * r]} (kept by the oracle: ${plan.kept[got.tokens[r]] === 1})`);
        }
      }
    } finally {
      await eng.unload();
    }
  });

  test(`split sampler on ${backend}: flat rows under top-p alone (V 20000, 9 parts: θp bracketed, kept set past the list) draw the oracle's tokens`, { skip, timeout: 120_000 }, async () => {
    // Top-p near 1 over a nearly flat row keeps most of the vocabulary: no cut within the candidate list
    // covers it, so the pick kernel brackets θp between the parts' pivots and narrows the bracket with passes
    // over the row (kernels/lib/sample_bracket.ts) where it runs in subgroup mode, else reads the row.
    const R = 6, V = 20000;
    const logits = new Float32Array(R * V);
    let s = 12345; // normal logits, no head (lmLogits's head would make the kept set small)
    const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    for (let i = 0; i < R * V; i++) logits[i] = (Math.floor(i / V) % 2 ? 0.05 : 1) * Math.sqrt(-2 * Math.log(rnd() + 1e-12)) * Math.cos(2 * Math.PI * rnd());
    const P: SamplerParams[] = [
      { temperature: 0.8, topP: 0.95 }, { temperature: 0.8, topP: 0.95 }, { temperature: 1, topP: 0.5 },
      { temperature: 1, topP: 0.999 }, { temperature: 0.7, topP: 0.9 }, { temperature: 2, topP: 0.8 },
    ];
    const eng = new Engine(dev as Device, { compile: compileSplit(9), timeoutMs: 120_000, ownsDevice: false });
    try {
      const id = eng.addEntry("split-flat", graph(R, V, false));
      for (let step = 0; step < 2; step++) {
        const words = samplerSlot(P.map((p, r) => ({ ...p, seed: 3 + r })), Array.from({ length: R }, (_, r) => 100 * step + r), R);
        const got = readSample((await eng.step(id, { logits, [SAMPLER_SLOT]: words })).outputs);
        const want = sampleRows(logits, words, R, V);
        for (let r = 0; r < R; r++) {
          if (got.tokens[r] === want[2 * r]) continue;
          const plan = planRow(logits.subarray(r * V, (r + 1) * V), rowParams(words, r));
          assert.fail(`step ${step} row ${r}: drew ${got.tokens[r]}, the oracle ${want[2 * r]} (kept by the oracle: ${plan.kept[got.tokens[r]] === 1})`);
        }
      }
    } finally {
      await eng.unload();
    }
  });

  test(`split sampler on ${backend}: 6,000 plain-temperature draws (V 512, 8 parts) match the oracle's distribution`, { skip: skip || slowDevice(dev) }, async () => {
    const R = 300, V = 512, STEPS = 20;
    const logits = lmLogits(V, 4242, 2);
    const p: SamplerParams = { temperature: 0.9, seed: 31 };
    const slotsAt = (s: number) => ({ logits, [SAMPLER_SLOT]: samplerSlot(p, Array.from({ length: R }, (_, r) => s * R + r), R) });
    const eng = new Engine(dev as Device, { compile: compileSplit(8), timeoutMs: 120_000, ownsDevice: false });
    try {
      const id = eng.addEntry("split-dist", graph(R, V, true));
      const all = new Float32Array(R * V);
      for (let r = 0; r < R; r++) all.set(logits, r * V);
      const counts = new Float64Array(V);
      let differ = 0;
      for (let s = 0; s < STEPS; s++) {
        const slots = slotsAt(s);
        const { tokens } = readSample((await eng.step(id, slots)).outputs);
        const want = sampleRows(all, slots[SAMPLER_SLOT], R, V);
        for (let r = 0; r < R; r++) {
          counts[tokens[r]]++;
          if (tokens[r] !== want[2 * r]) differ++;
        }
      }
      const probs = samplerDistribution(logits, rowParams(slotsAt(0)[SAMPLER_SLOT], 0));
      const chi = chiSquare(counts, probs);
      assert.equal(chi.impossible, 0, "draws outside the kept set");
      assert.ok(chi.p >= P_REJECT, `chi-square ${chi.stat.toFixed(2)} on ${chi.dof} dof: p = ${chi.p.toExponential(2)} < ${P_REJECT}`);
      assert.ok(differ <= (STEPS * R) / 1000, `${differ} of ${STEPS * R} draws differ from the oracle's`);
      const near = chiSquare(counts, samplerDistribution(logits, { ...rowParams(slotsAt(0)[SAMPLER_SLOT], 0), invTemp: Math.fround(1 / 1.05) }));
      assert.ok(near.p < P_REJECT, `T 1.05 not rejected: p = ${near.p}`);
    } finally {
      await eng.unload();
    }
  });
}
