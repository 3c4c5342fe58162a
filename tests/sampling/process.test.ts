// The full sampler (logits_process, sample, logprobs; graph/logits.ts) through the Engine on every device present,
// against the oracle (graph/eval):
// - processed logits element by element: untouched and banned/masked elements bit-exact, rewritten ones within
//   2 ulp of the oracle's (one f32 division may differ by its rounding on targets without a correctly
//   rounded divide);
// - logprobs: the chosen token's and the top 20 within 2e-5 + 2^-20·|lp| (a tier-2 bound for the Σ exp of
//   V <= 5000 terms summed in another order, and a device exp), the top-n ids exactly the oracle's, in order;
// - draws under bias, bans and penalties: 8,000 draws over one row whose distribution matches the oracle's exact
//   probabilities (Pearson chi-square, cells pooled to expected >= 5, rejected at p < 1e-3; the same draws
//   reject the distribution without the bias and penalties);
// - a masked row only ever draws allowed tokens, and min_tokens bans end-of-generation tokens;
// - token counts in device State (appendSampler's `counts`): 6 steps marking prompt tokens and counting draws,
//   State and outputs equal to the oracle's after every step (integers bit-exact), capture == eager.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Tracer } from "../../graph/tracer.ts";
import { evaluate } from "../../graph/eval.ts";
import { samplerDistribution, rowParams } from "../../graph/sample.ts";
import { BANNED, processRows } from "../../graph/logits.ts";
import { appendSampler, COUNT_SLOT, COUNTS_STATE, EXTRA_SLOT, LOGPROBS_OUTPUT, readSample, type SamplerParams, SamplerSlots, TokenHistory } from "../../llm/sampling.ts";
import { openDevice, selectedBackends, slowDevice, softwareShare } from "../devices/index.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { chiSquare, lmLogits } from "./run.ts";

const P_REJECT = 1e-3;

function graph(R: number, V: number, entries: number) {
  const t = new Tracer();
  const x = t.slot("logits", { kind: "Input", dtype: "f32", shape: [R, V] });
  const y = t.logitsProcess(x, t.slot(EXTRA_SLOT, { kind: "Input", dtype: "u32", shape: [R, 8 + 3 * entries] }), t.slot("sampler_mask", { kind: "Input", dtype: "u32", shape: [R, Math.ceil(V / 32)] }));
  t.output("processed", y);
  appendSampler(t, x, { process: { entries }, logprobs: true });
  return t.build();
}

/** Row configurations: every feature alone and together. */
function rowCase(r: number, V: number, slots: SamplerSlots) {
  const hist = new TokenHistory([1, 2, 3, 5, 8, 13, 21, 34]);
  for (const t of [2, 2, 7, 40, 40, 40, 9]) hist.add(t);
  const bias: Record<number, number> = { 4: 5, 6: -100, 11: 2.5, [V - 1]: 7 };
  const mask = new Uint32Array(Math.ceil(V / 32));
  for (let i = 0; i < V; i++) if (i % 3 !== 1) mask[i >>> 5] |= 1 << (i & 31);
  const cases: [SamplerParams, Parameters<SamplerSlots["set"]>[3]][] = [
    [{ temperature: 0, logprobs: true }, {}],
    [{ temperature: 1, logitBias: bias, topLogprobs: 5 }, {}],
    [{ temperature: 0.8, repeatPenalty: 1.3, topLogprobs: 20 }, { history: hist }],
    [{ temperature: 1.2, frequencyPenalty: 0.7, presencePenalty: -0.4, logitBias: bias }, { history: hist }],
    [{ temperature: 1, topK: 40, repeatPenalty: 0.8, frequencyPenalty: 1.5, presencePenalty: 2, topLogprobs: 3 }, { history: hist }],
    [{ temperature: 1, minTokens: 10, topLogprobs: 1 }, { history: hist, eog: [0, 3, 40] }],
    [{ temperature: 0.7, topP: 0.9 }, { mask }],
    [{ temperature: 0, logitBias: bias, repeatPenalty: 1.1 }, { history: hist, mask }],
  ];
  const [p, ctx] = cases[r % cases.length];
  slots.set(r, { ...p, seed: 7 + r }, 100 + r, ctx);
}

// Every device present, and the JS device in GPU code shapes (lanes in lockstep, subgroups of 8: the kernels'
// multi-lane paths, barriers included, checked by the JS renderer).
const devices: [string, Device | string][] = [];
for (const backend of selectedBackends()) devices.push([backend, await openDevice(backend)]);
devices.push(["js (lockstep, subgroups of 8)", new JsDevice({ caps: { subgroupSize: 8 } })]);
for (const [backend, dev] of devices) {
  const skip = typeof dev === "string" ? dev : false;
  // each size also with the split sample and logprobs kernels forced (the default only on wide GPUs at V >= 16k;
  // on lavapipe the vulkan and wgpu backends deal those between them: tests/devices/index.ts softwareShare)
  const forced = softwareShare(dev, [[5000, [7, 9]], [5000, [7, 64]]] as const);
  for (const [V, split] of [[512, undefined], [5000, undefined], ...forced] as const) {
    const R = 16, E = 64;
    const opts = split ? { sampleParts: split[0], logprobsParts: split[1] } : {};
    const what = split ? ` (split: sample ${split[0]} parts, logprobs ${split[1]})` : "";
    test(`full sampler on ${backend}: ${R} rows x ${V}${what}: processed logits, tokens, logprobs vs the oracle`, { skip: V > 512 ? slowDevice(dev) : skip, timeout: 600_000 }, async () => {
      const eng = new Engine(dev as Device, { compile: (g, t) => compileGraph(g, t, opts), timeoutMs: 120_000, ownsDevice: false });
      try {
        const g = graph(R, V, E);
        const id = eng.addEntry(`full-sampler-${V}`, g);
        const logits = new Float32Array(R * V);
        for (let r = 0; r < R; r++) logits.set(lmLogits(V, 300 + r, r % 4 === 3 ? 0.5 : 3), r * V);
        logits[5 * V + 17] = 1e30; // a huge finite logit survives the bias arithmetic finite
        const slots = new SamplerSlots(R, V, E);
        for (let r = 0; r < R; r++) rowCase(r, V, slots);
        const values = { logits, ...slots.values() };
        const want = evaluate(g, { consts: {}, slots: values, state: {} }).output;
        const got = (await eng.step(id, values)).outputs;
        const wy = want.processed as Float32Array, gy = got.processed as Float32Array;
        let rewritten = 0, banned = 0;
        for (let i = 0; i < wy.length; i++) {
          if (wy[i] === BANNED) banned++;
          if (wy[i] !== logits[i] && wy[i] !== BANNED) rewritten++;
          if (Object.is(wy[i], gy[i])) continue;
          const ulp = Math.abs(wy[i]) * 2 ** -23;
          assert.ok(wy[i] !== logits[i] && wy[i] !== BANNED && Math.abs(gy[i] - wy[i]) <= 2 * ulp, `processed[${Math.floor(i / V)}, ${i % V}]: ${gy[i]} vs oracle ${wy[i]} (raw ${logits[i]})`);
        }
        assert.ok(rewritten > 50 && banned > V, `the case exercises bias, penalties and masks (${rewritten} rewritten, ${banned} banned)`);
        const wt = readSample(want, "sample", slots.words), gt = readSample(got, "sample", slots.words);
        assert.deepEqual([...gt.tokens], [...wt.tokens], "tokens");
        assert.deepEqual([...gt.nonFinite], [...wt.nonFinite]);
        let compared = 0;
        for (let r = 0; r < R; r++) {
          const a = gt.logprobs![r], b = wt.logprobs![r];
          assert.equal(a === undefined, b === undefined, `row ${r} logprobs presence`);
          if (!a || !b) continue;
          const close = (x: number, y: number, what: string) => assert.ok(Math.abs(x - y) <= 2e-5 + 2 ** -20 * Math.abs(y), `row ${r} ${what}: ${x} vs oracle ${y}`);
          close(a.logprob, b.logprob, "chosen logprob");
          assert.deepEqual(a.top.map((t) => t.id), b.top.map((t) => t.id), `row ${r} top ids`);
          a.top.forEach((t, k) => close(t.logprob, b.top[k].logprob, `top ${k}`));
          compared += 1 + a.top.length;
        }
        assert.ok(compared > 30);
        assert.ok((got[LOGPROBS_OUTPUT] as Float32Array).every((v) => Number.isFinite(v)));
        for (let r = 0; r < R; r++) if (r % 8 >= 6) assert.ok(gt.tokens[r] % 3 !== 1, `row ${r} drew masked token ${gt.tokens[r]}`);
        assert.ok(![0, 3, 40].includes(gt.tokens[5]), "min_tokens bans end-of-generation ids");
      } finally {
        await eng.unload();
      }
    });
  }

  test(`full sampler on ${backend}: 8,000 draws under bias and penalties match the oracle's distribution`, { skip, timeout: 600_000 }, async () => {
    const V = 64, R = 1000, STEPS = 8, E = 32;
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000, ownsDevice: false });
    try {
      const t = new Tracer();
      const x = t.slot("logits", { kind: "Input", dtype: "f32", shape: [1, V] });
      appendSampler(t, t.broadcast(x, [R, V]), { process: { entries: E } });
      const id = eng.addEntry("full-sampler-dist", t.build());
      const row = lmLogits(V, 77, 1.5);
      const hist = new TokenHistory([0, 1, 2, 3]);
      for (const tok of [0, 0, 5, 9, 9, 9]) hist.add(tok);
      const p: SamplerParams = { temperature: 1, logitBias: { 7: 2, 12: -1.5, 20: -100 }, repeatPenalty: 1.5, frequencyPenalty: 0.3, presencePenalty: 0.5, seed: 4 };
      const slots = new SamplerSlots(R, V, E);
      const counts = new Float64Array(V);
      for (let s = 0; s < STEPS; s++) {
        for (let r = 0; r < R; r++) slots.set(r, p, s * R + r, { history: hist });
        const { tokens } = readSample((await eng.step(id, { logits: row, ...slots.values() })).outputs);
        for (const tok of tokens) counts[tok]++;
      }
      const one = new SamplerSlots(1, V, E); // the one row every row is (headers come before entries in a batch)
      one.set(0, p, 0, { history: hist });
      const processed = processRows(row, one.extra, new Uint32Array(2), 1, V);
      const probs = samplerDistribution(processed, rowParams(slots.words, 0));
      const chi = chiSquare(counts, probs);
      assert.equal(chi.impossible, 0, "draws of impossible tokens");
      assert.ok(chi.p >= P_REJECT, `chi-square ${chi.stat.toFixed(2)} on ${chi.dof} dof: p = ${chi.p.toExponential(2)} < ${P_REJECT}`);
      const plain = chiSquare(counts, samplerDistribution(row, rowParams(slots.words, 0)));
      assert.ok(plain.p < P_REJECT, `without bias and penalties not rejected: p = ${plain.p}`);
    } finally {
      await eng.unload();
    }
  });

  test(`full sampler on ${backend}: token counts in device State, marked and counted by the step itself`, { skip, timeout: 600_000 }, async () => {
    const V = 300, E = 16, N = 3;
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000, ownsDevice: false });
    try {
      const t = new Tracer();
      t.slot("token", { kind: "Token", dtype: "i32", shape: [N] });
      const x = t.slot("logits", { kind: "Input", dtype: "f32", shape: [1, V] });
      appendSampler(t, x, { process: { entries: E, counts: true }, logprobs: true });
      const g = t.build();
      const id = eng.addEntry("full-sampler-counts", g);
      const slots = new SamplerSlots(1, V, E);
      let state: Record<string, import("../../graph/dtype.ts").Storage> = {};
      const steps = [
        { token: [5, 9, 5], ctl: [1, 0], p: { temperature: 0, repeatPenalty: 1.5 } },
        { token: [7, 1, 2], ctl: [1, 1], p: { temperature: 0, repeatPenalty: 1.5, frequencyPenalty: 1 } },
        { token: [0, 0, 0], ctl: [0, 1], p: { temperature: 0, frequencyPenalty: 2, presencePenalty: 1 } },
        { token: [0, 0, 0], ctl: [0, 1], p: { temperature: 1, seed: 3, frequencyPenalty: 2, logitBias: { 4: 9 } } },
        { token: [0, 0, 0], ctl: [0, 1], p: { temperature: 0, repeatPenalty: 2 } },
        { token: [3, 3, 3], ctl: [0, 0], p: { temperature: 0, presencePenalty: -2, topLogprobs: 4 } },
      ];
      const history = new TokenHistory();
      const got: Uint8Array[] = [];
      for (const [k, st] of steps.entries()) {
        // a flat row with a few strong tokens, so that penalties move the draw
        const logits = lmLogits(V, 900 + k, 0.2);
        logits[5] = logits[9] = logits[7] = 3;
        slots.set(0, st.p, k, { history, deviceCounts: true });
        const values = { token: Int32Array.from(st.token), logits, [COUNT_SLOT]: Int32Array.from(st.ctl), ...slots.values() };
        const want = evaluate(g, { consts: {}, slots: values, state }, {});
        const r = await eng.step(id, values);
        assert.deepEqual([...(r.outputs.sample as Int32Array)], [...(want.output.sample as Int32Array)], `step ${k} token`);
        const have = new Uint32Array((await eng.readState(COUNTS_STATE)).slice().buffer);
        assert.deepEqual([...have.subarray(0, V)], [...(want.state[COUNTS_STATE] as Uint32Array).subarray(0, V)], `step ${k} counts`);
        got.push(new Uint8Array((r.outputs.sample as Int32Array).slice().buffer));
        state = want.state;
      }
      const counts = state[COUNTS_STATE] as Uint32Array;
      assert.equal(counts[5] >>> 31, 1, "prompt tokens are marked");
      assert.equal(counts[0], 0, "tokens of steps that mark nothing stay unmarked");
      assert.ok([...counts.subarray(0, V)].reduce((a, c) => a + (c & 0x7fffffff), 0) === 4, "4 counted draws");
      // capture == eager from a reset State
      eng.resetState(id);
      for (const [k, st] of steps.entries()) {
        const logits = lmLogits(V, 900 + k, 0.2);
        logits[5] = logits[9] = logits[7] = 3;
        slots.set(0, st.p, k, { history, deviceCounts: true });
        const r = await eng.step(id, { token: Int32Array.from(st.token), logits, [COUNT_SLOT]: Int32Array.from(st.ctl), ...slots.values() }, { eager: true });
        assert.deepEqual(new Uint8Array((r.outputs.sample as Int32Array).slice().buffer), got[k], `eager step ${k}`);
      }
    } finally {
      await eng.unload();
    }
  });
}
