// A batch's token counts in device State (appendSampler `rows`, llm/serve/counts.ts), on every device present:
// 6 sequences share 4 sampled rows and 5 counts rows over 14 steps, with rows taken, released and taken again by
// another sequence (its previous holder's words zeroed), prompts with more distinct tokens than one step's 16
// writes (marked over several steps; the sequence is sampled only once its row is ready), and each generated
// token's count written by the next step. After every step:
// - the sampled tokens and logprobs equal the oracle's (graph/eval) for the same slots and State (tokens exactly,
//   logprobs within 2e-5 + 2^-20·|lp|), and the counts State equals the oracle's bit for bit;
// - every held row equals the words its sequence's TokenHistory implies (count | prompt bit per token, 0 elsewhere);
// - the oracle's processed logits through the counts row equal those of the entries path fed from the same
//   TokenHistory (the penalties' meaning does not depend on where the counts live);
// and, on GPU backends, a second pass from a reset State run eagerly gives the replayed bytes (capture == eager).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Tracer } from "../../graph/tracer.ts";
import { evaluate } from "../../graph/eval.ts";
import type { Storage } from "../../graph/dtype.ts";
import { PROMPT_BIT, processRows } from "../../graph/logits.ts";
import {
  appendSampler, COUNT_AT_SLOT, COUNT_VALUE_SLOT, readSample, ROW_COUNTS_STATE, type SamplerParams, SamplerSlots, TokenHistory,
} from "../../llm/sampling.ts";
import { CountRows } from "../../llm/serve/counts.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { lmLogits } from "./run.ts";

const V = 160, R = 4, Q = 5, W = 16, E = 8, STEPS = 14;

function graph() {
  const t = new Tracer();
  const x = t.slot("logits", { kind: "Input", dtype: "f32", shape: [R, V] });
  appendSampler(t, x, { process: { entries: E, rows: { rows: Q, writes: W } }, logprobs: true });
  return t.build();
}

interface Seq {
  h: TokenHistory;
  p: SamplerParams;
  row?: number;
  done?: boolean;
}

function sequences(): Seq[] {
  const prompt = (n: number, seed: number) => Array.from({ length: n }, (_, i) => (i * 37 + seed * 11) % V);
  const ps: SamplerParams[] = [
    { temperature: 0, repeatPenalty: 1.6 },
    { temperature: 1, seed: 5, frequencyPenalty: 1.5, presencePenalty: 0.5, topLogprobs: 3 },
    { temperature: 0, frequencyPenalty: 2, presencePenalty: -1, logitBias: { 7: 3 } },
    { temperature: 0.8, seed: 9, repeatPenalty: 0.7, frequencyPenalty: -0.5, topLogprobs: 5 },
    { temperature: 0, repeatPenalty: 1.2, presencePenalty: 2 },
    { temperature: 1.2, seed: 2, repeatPenalty: 1.3, frequencyPenalty: 0.8 },
  ];
  // prompts of 3 to 40 distinct tokens: the long ones take 2-3 steps of 16 writes (plus zeros of a previous holder)
  return ps.map((p, i) => ({ h: new TokenHistory(prompt([3, 40, 9, 25, 5, 33][i], i)), p }));
}

/** Words the device row must hold for a history. */
function expectedRow(h: TokenHistory): Uint32Array {
  const w = new Uint32Array(V);
  for (const id of h.prompt) w[id] = PROMPT_BIT;
  for (const [id, c] of h.counts) w[id] = (c | (h.prompt.has(id) ? PROMPT_BIT : 0)) >>> 0;
  return w;
}

const devices: [string, Device | string][] = [];
for (const backend of selectedBackends()) devices.push([backend, await openDevice(backend)]);
devices.push(["js (lockstep, subgroups of 8)", new JsDevice({ caps: { subgroupSize: 8 } })]);
for (const [backend, dev] of devices) {
  const skip = typeof dev === "string" ? dev : false;
  test(`batch token counts on ${backend}: rows reset, marked and counted through host writes, vs the oracle`, { skip, timeout: 600_000 }, async () => {
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000, ownsDevice: false });
    try {
      const g = graph();
      const id = eng.addEntry("row-counts", g);
      const run = async (eager: boolean): Promise<Uint8Array[]> => {
        const seqs = sequences(), counts = new CountRows(Q, V, W), slots = new SamplerSlots(R, V, E);
        let state: Record<string, Storage> = {};
        const outs: Uint8Array[] = [];
        let multiStep = 0, reused = 0;
        for (let step = 0; step < STEPS; step++) {
          // retire one sequence mid-way, so a later one reuses its row
          if (step === 6) {
            const s = seqs.find((x) => x.row !== undefined)!;
            counts.release(s.row!);
            s.row = undefined;
            s.done = true;
          }
          for (const s of seqs) {
            if (s.done || s.row !== undefined || counts.used === Q) continue;
            s.row = counts.acquire(s.h);
            if (step >= 6) reused++;
          }
          const ready = seqs.filter((s) => s.row !== undefined && counts.ready(s.row)).slice(0, R);
          multiStep += seqs.filter((s) => s.row !== undefined && !counts.ready(s.row)).length;
          for (let r = 0; r < R; r++) {
            const s = ready[r];
            if (s) slots.set(r, s.p, 100 * step + r, { history: s.h, countsRow: s.row });
            else slots.set(r, {}, 0);
          }
          counts.fill();
          const logits = new Float32Array(R * V);
          for (let r = 0; r < R; r++) {
            const row = lmLogits(V, 40 * step + r, 0.4);
            // strong tokens that the sequences' prompts and draws hit, so the penalties move the draws
            for (let k = 0; k < 12; k++) row[(k * 37 + r * 11) % V] += 2.5;
            logits.set(row, r * V);
          }
          const values = { logits, ...slots.values(), [COUNT_AT_SLOT]: counts.at, [COUNT_VALUE_SLOT]: counts.value };
          const want = evaluate(g, { consts: {}, slots: values, state }, {});
          const got = await eng.step(id, values, { eager });
          const wt = readSample(want.output, "sample", slots.words), gt = readSample(got.outputs, "sample", slots.words);
          assert.deepEqual([...gt.tokens], [...wt.tokens], `step ${step} tokens`);
          for (let r = 0; r < ready.length; r++) {
            const a = gt.logprobs?.[r], b = wt.logprobs?.[r];
            assert.equal(a === undefined, b === undefined);
            if (!a || !b) continue;
            assert.ok(Math.abs(a.logprob - b.logprob) <= 2e-5 + 2 ** -20 * Math.abs(b.logprob), `step ${step} row ${r} logprob`);
            assert.deepEqual(a.top.map((t) => t.id), b.top.map((t) => t.id), `step ${step} row ${r} top ids`);
          }
          const have = new Uint32Array((await eng.readState(ROW_COUNTS_STATE)).slice().buffer);
          const ws = want.state[ROW_COUNTS_STATE] as Uint32Array;
          assert.deepEqual(have, ws, `step ${step}: counts State vs the oracle`);
          assert.ok(ws.subarray(Q * V).every((w) => w === 0), "the spare row only ever gets zeros");
          // each sampled row's counts are exactly its history's, and the counts row means what the entries meant
          for (const [r, s] of ready.entries()) {
            assert.deepEqual(ws.subarray(s.row! * V, (s.row! + 1) * V), expectedRow(s.h), `step ${step}: row ${s.row} vs its history`);
            const viaEntries = new SamplerSlots(1, V, V);
            viaEntries.set(0, s.p, 0, { history: s.h });
            const viaRow = new SamplerSlots(1, V, E);
            viaRow.set(0, s.p, 0, { history: s.h, countsRow: s.row });
            const x = logits.subarray(r * V, (r + 1) * V), none = new Uint32Array(Math.ceil(V / 32));
            assert.deepEqual(processRows(x, viaRow.extra, none, 1, V, ws), processRows(x, viaEntries.extra, none, 1, V), `step ${step} row ${r}: dense == entries`);
          }
          outs.push(new Uint8Array((got.outputs.sample as Int32Array).slice().buffer));
          state = want.state;
          for (const [r, s] of ready.entries()) {
            const tok = gt.tokens[r];
            s.h.add(tok);
            counts.generated(s.row!, s.h, tok);
          }
        }
        assert.ok(multiStep > 0, "some prompt took more than one step of writes");
        assert.ok(reused > 0, "a row was taken again by another sequence");
        const generated = sequences().length && state[ROW_COUNTS_STATE] ? (state[ROW_COUNTS_STATE] as Uint32Array).reduce((a, w) => a + (w & 0x7fffffff), 0) : 0;
        assert.ok(generated > 10, `draws were counted (${generated})`);
        return outs;
      };
      const replayed = await run(false);
      // On the JS device replay and eager run the same code (the lockstep emulation is slow): checked elsewhere.
      if (!backend.startsWith("js")) {
        eng.resetState(id);
        assert.deepEqual(await run(true), replayed, "capture == eager");
      }
    } finally {
      await eng.unload();
    }
  });
}
