// 20,000 seeded draws through the Engine on every device present (record once, replay with new counters):
// their distribution matches the oracle's exact kept-set probabilities (Pearson chi-square, pooled cells of
// expected count >= 5, rejected at p < 1e-3), each draw equals the oracle's draw for its counter except at
// knife edges, replays and eager runs repeat bit for bit, and no sampler value makes a new entry.
//
// One step draws R = 1000 times: the graph broadcasts one logit row to R rows and each row gets its own
// counter (step · R + row), so 20 replays give the 20,000 draws.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Tracer } from "../../graph/tracer.ts";
import { rowParams, sampleRows, samplerDistribution } from "../../graph/sample.ts";
import { appendSampler, readSample, SAMPLER_SLOT, type SamplerParams, samplerSlot } from "../../llm/sampling.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { chiSquare, lmLogits } from "./run.ts";

const V = 128, R = 1000, STEPS = 20;
const P_REJECT = 1e-3;
const logits = lmLogits(V, 2024);
const params: SamplerParams = { temperature: 0.8, topK: 40, topP: 0.9, seed: 1234 };

function graph() {
  const t = new Tracer();
  const x = t.slot("logits", { kind: "Input", dtype: "f32", shape: [1, V] });
  appendSampler(t, t.broadcast(x, [R, V]));
  return t.build();
}
const slotsAt = (step: number, p: SamplerParams = params) => ({
  logits,
  [SAMPLER_SLOT]: samplerSlot(p, Array.from({ length: R }, (_, r) => step * R + r), R),
});

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  test(`sampling on ${backend}: 20,000 draws at T 0.8 / top-k 40 / top-p 0.9 match the oracle's distribution`, { skip }, async () => {
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000 });
    try {
      const id = eng.addEntry("sampler-dist", graph());
      const counts = new Float64Array(V);
      const all = new Float32Array(R * V);
      for (let r = 0; r < R; r++) all.set(logits, r * V);
      let differ = 0;
      let first: Int32Array | undefined;
      for (let s = 0; s < STEPS; s++) {
        const slots = slotsAt(s);
        const { tokens, nonFinite } = readSample((await eng.step(id, slots)).outputs);
        if (s === 0) first = tokens;
        assert.ok(nonFinite.every((f) => f === 0));
        const want = sampleRows(all, slots[SAMPLER_SLOT], R, V);
        for (let r = 0; r < R; r++) {
          counts[tokens[r]]++;
          if (tokens[r] !== want[2 * r]) differ++;
        }
      }
      const probs = samplerDistribution(logits, rowParams(slotsAt(0)[SAMPLER_SLOT], 0));
      const kept = probs.filter((p) => p > 0).length;
      assert.ok(kept > 3 && kept < 40, `the test wants a kept set cut by top-p (${kept} tokens)`);
      const chi = chiSquare(counts, probs);
      assert.equal(chi.impossible, 0, "draws outside the kept set");
      assert.ok(chi.p >= P_REJECT, `chi-square ${chi.stat.toFixed(2)} on ${chi.dof} dof: p = ${chi.p.toExponential(2)} < ${P_REJECT}`);
      assert.ok(differ <= (STEPS * R) / 1000, `${differ} of ${STEPS * R} draws differ from the oracle's`);
      // the test has power: the same draws reject the distribution at a nearby temperature (T 0.9)
      const near = chiSquare(counts, samplerDistribution(logits, { ...rowParams(slotsAt(0)[SAMPLER_SLOT], 0), invTemp: Math.fround(1 / 0.9) }));
      assert.ok(near.p < P_REJECT, `T 0.9 not rejected: p = ${near.p}`);

      // determinism: the same counters again, replayed and eager
      const again = readSample((await eng.step(id, slotsAt(0))).outputs).tokens;
      assert.deepEqual(again, first);
      const eager = readSample((await eng.step(id, slotsAt(0), { eager: true })).outputs).tokens;
      assert.deepEqual(eager, first);
      // different counters draw differently: rows of one step are not all the same token
      assert.ok(new Set(first).size > 3);
      // greedy through the same entry, and a changed seed: still one entry
      const greedy = readSample((await eng.step(id, slotsAt(0, { temperature: 0 }))).outputs).tokens;
      const arg = logits.indexOf(Math.max(...logits));
      assert.ok(greedy.every((t) => t === arg));
      const reseeded = readSample((await eng.step(id, slotsAt(0, { ...params, seed: 99 }))).outputs).tokens;
      assert.notDeepEqual(reseeded, first);
      assert.equal(eng.stats().entries, 1, "sampler values never make a new entry");
    } finally {
      await eng.unload();
    }
  });
}
