// Grammar masks of a batch are packed (the constrained rows' masks first, each row's `masked` word naming its mask
// row) and uploaded as a prefix of the mask slot (SamplerSlots.uploads, Executor SlotPrefix), on every device
// present: over 3 steps (every row constrained; rows 1 and 3 only, with new masks, so stale masks of the first
// step stay in the slot's tail; no row constrained: nothing uploaded) the processed logits equal the oracle's, fed
// the whole packed slot, bit for bit (a mask only bans or keeps), constrained rows draw only allowed tokens, and
// the uploaded mask bytes are exactly the constrained rows'. The extra slot (headers first, then each row's
// entries) is uploaded up to the last row with bias entries: stale entries past it are never read. A prefix
// longer than its slot is a typed error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { ExecError } from "../../backends/errors.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Tracer } from "../../graph/tracer.ts";
import { evaluate } from "../../graph/eval.ts";
import { appendSampler, EXTRA_SLOT, MASK_SLOT, readSample, SamplerSlots } from "../../llm/sampling.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { lmLogits } from "./run.ts";

const R = 4, V = 200, E = 4, MW = Math.ceil(V / 32);

function graph() {
  const t = new Tracer();
  const x = t.slot("logits", { kind: "Input", dtype: "f32", shape: [R, V] });
  const y = t.logitsProcess(x, t.slot(EXTRA_SLOT, { kind: "Input", dtype: "u32", shape: [R, 8 + 3 * E] }), t.slot(MASK_SLOT, { kind: "Input", dtype: "u32", shape: [R, MW] }));
  t.output("processed", y);
  appendSampler(t, x, { process: { entries: E } });
  return t.build();
}

/** A mask allowing tokens i with (i + salt) % m === 0. */
function mask(m: number, salt: number): Uint32Array {
  const w = new Uint32Array(MW);
  for (let i = 0; i < V; i++) if ((i + salt) % m === 0) w[i >>> 5] |= 1 << (i & 31);
  return w;
}

const devices: [string, Device | string][] = [];
for (const backend of selectedBackends()) devices.push([backend, await openDevice(backend)]);
devices.push(["js (lockstep, subgroups of 8)", new JsDevice({ caps: { subgroupSize: 8 } })]);
for (const [backend, dev] of devices) {
  const skip = typeof dev === "string" ? dev : false;
  test(`packed grammar masks on ${backend}: only constrained rows' masks are uploaded, results equal the oracle's`, { skip, timeout: 300_000 }, async () => {
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000, ownsDevice: false });
    try {
      const g = graph();
      const id = eng.addEntry("mask-upload", g);
      const slots = new SamplerSlots(R, V, E);
      const steps: (Uint32Array | undefined)[][] = [
        [mask(3, 0), mask(5, 1), mask(7, 2), mask(2, 1)],
        [undefined, mask(4, 3), undefined, mask(9, 0)],
        [undefined, undefined, undefined, undefined],
      ];
      for (const [k, masks] of steps.entries()) {
        // row 0 has bias entries in the first two steps: the extra slot then carries its entries, later only headers
        const bias = (r: number) => (r === 0 && k < 2 ? { logitBias: { [k + 1]: 50, 9: -100 } } : {});
        for (let r = 0; r < R; r++) slots.set(r, { temperature: 1, seed: 3 + r, ...bias(r) }, 10 * k + r, { mask: masks[r] });
        const logits = new Float32Array(R * V);
        for (let r = 0; r < R; r++) logits.set(lmLogits(V, 7 * k + r, 1), r * V);
        const up = slots.uploads();
        const sent = (up[MASK_SLOT] as { prefix: Uint32Array }).prefix;
        assert.equal(sent.length, masks.filter((m) => m).length * MW, `step ${k}: mask words uploaded`);
        assert.equal((up[EXTRA_SLOT] as { prefix: Uint32Array }).prefix.length, 8 * R + (k < 2 ? 3 * E : 0), `step ${k}: extra words uploaded`);
        const got = (await eng.step(id, { logits, ...up })).outputs;
        const want = evaluate(g, { consts: {}, slots: { logits, ...slots.values() }, state: {} }, {}).output;
        assert.deepEqual(got.processed, want.processed, `step ${k}: processed logits`);
        const tokens = readSample(got).tokens;
        assert.deepEqual([...tokens], [...readSample(want).tokens], `step ${k}: tokens`);
        masks.forEach((m, r) => {
          if (m) assert.equal((m[tokens[r] >>> 5] >>> (tokens[r] & 31)) & 1, 1, `step ${k} row ${r}: token ${tokens[r]} is not allowed`);
        });
      }
      await assert.rejects(eng.step(id, { logits: new Float32Array(R * V), ...slots.values(), [MASK_SLOT]: { prefix: new Uint32Array(R * MW + 1) } }), ExecError);
    } finally {
      await eng.unload();
    }
  });
}
