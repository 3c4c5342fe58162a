// Checks of the sample kernel (kernels/lib/sample.ts) against the oracle (graph/sample.ts), row by row, shared
// by kernel.test.ts (every device present) and kernel_lockstep.test.ts (the JS device in GPU code shapes):
// rows whose whole vocabulary fits the candidate list, long rows cut at a bisected logit and compacted, and
// long rows that fall back to the row itself (no cut exists, or the cut search is off).
//
// Tokens must equal the oracle's except at knife edges, where a device's reassociated sums or its own exp
// may move a threshold or the draw by one rounding: at most 1 row in 100 may differ (none in a batch under 100
// rows: such an edge is far rarer than that, and a free row would hide a real error in a small batch), and then
// only to a token the oracle also keeps. Non-finite flags and greedy rows must be exact.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { planRow, rowParams, sampleRows } from "../../graph/sample.ts";
import { sampleLayout, type SampleShape } from "../../kernels/lib/sample.ts";
import { lmLogits, type Params, paramWords, runKernel } from "./run.ts";
import { slowDevice, softwareShare } from "../devices/index.ts";

const CONFIGS: Params[] = [
  { invTemp: 0 },
  { invTemp: 1 / 0.8, topK: 40, topP: 0.9 },
  { invTemp: 1, topK: 5 },
  { invTemp: 1.3, topP: 0.5 },
  { invTemp: 1, minP: 0.1 },
  { invTemp: 0.7 },
  { invTemp: 2, topK: 1 },
  { invTemp: 1, topP: 0.95, minP: 0.02 },
  { invTemp: 1, topK: 100, topP: 0.99 },
  { invTemp: 1, topK: 300 },
  { invTemp: 0.5, topP: 0.999 },
  { invTemp: 1, topK: 3, topP: 0.2, minP: 0.5 },
];

// Rows that sample with no filter (the split kernels' fast path), mixed with a greedy and a filtered row.
const PLAIN: Params[] = [{ invTemp: 1 }, { invTemp: 1 / 0.8 }, { invTemp: 0.3 }, { invTemp: 0 }, { invTemp: 2.5 }, { invTemp: 1, topK: 40 }];

interface Batch {
  logits: Float32Array;
  params: Uint32Array;
}

function batch(rows: number, V: number, seed: number, configs = CONFIGS): Batch {
  const logits = new Float32Array(rows * V);
  for (let r = 0; r < rows; r++) logits.set(lmLogits(V, seed + r, r % 3 === 2 ? 0.3 : 3), r * V);
  // a row with a NaN, one with +Inf, one of all-equal logits, one with a tie at the top
  if (rows > 8) {
    logits[1 * V + 5] = NaN;
    logits[4 * V + V - 1] = Infinity;
    logits.fill(0.25, 6 * V, 7 * V);
    logits[8 * V + 2] = logits[8 * V + V - 2] = 50;
  }
  const params = paramWords(rows, (r) => ({ ...configs[r % configs.length], seed: seed * 31 + r, counter: r * 7 + 1 }));
  return { logits, params };
}

function compare(label: string, b: Batch, rows: number, V: number, got: Int32Array): void {
  const want = sampleRows(b.logits, b.params, rows, V);
  const off: string[] = [];
  for (let r = 0; r < rows; r++) {
    assert.equal(got[2 * r + 1], want[2 * r + 1], `${label}: non-finite flag of row ${r}`);
    if (got[2 * r] === want[2 * r]) continue;
    const plan = planRow(b.logits.subarray(r * V, (r + 1) * V), rowParams(b.params, r));
    assert.ok(!plan.isGreedy, `${label}: greedy row ${r} gave ${got[2 * r]}, want ${want[2 * r]}`);
    assert.ok(plan.kept[got[2 * r]] === 1, `${label}: row ${r} drew ${got[2 * r]}, which the oracle does not keep (want ${want[2 * r]})`);
    off.push(`row ${r}: ${got[2 * r]} vs ${want[2 * r]}`);
  }
  assert.ok(off.length <= Math.floor(rows / 100), `${label}: ${off.length} of ${rows} rows differ: ${off.join("; ")}`);
}

async function check(dev: Device, shape: SampleShape, seed: number, configs = CONFIGS): Promise<void> {
  const b = batch(shape.rows, shape.vocab, seed, configs);
  const got = await runKernel(dev, shape, b.logits, b.params);
  const L = sampleLayout(dev.target.caps, shape);
  compare(`${shape.rows}x${shape.vocab} ${L.mode} lanes ${L.lanes} cap ${L.cap}${shape.cutoffSteps === 0 ? " no cut" : ""}${shape.parts ? ` parts ${shape.parts}` : ""}${shape.subgroupList === 0 ? " workgroup lists" : ""}${shape.lean === false ? " not lean" : ""}`, b, shape.rows, shape.vocab, got);
  const again = await runKernel(dev, shape, b.logits, b.params);
  assert.deepEqual(again, got, "a second run gives the same bits");
}

/** Registers the kernel tests for a list of devices (quick: fewer rows, for the slow lockstep JS paths). */
export function kernelTests(list: { name: string; dev: Device | string; quick: boolean }[]): void {
  for (const { name, dev, quick } of list) {
    const skip = typeof dev === "string" ? dev : false;
    test(`sample kernel on ${name}: whole rows in the candidate list`, { skip }, async () => {
      await check(dev as Device, { rows: quick ? 24 : 60, vocab: 97 }, 1);
      await check(dev as Device, { rows: 12, vocab: 256 }, 2);
      // steps 3-4 on the workgroup (not one subgroup), and every step's reductions run (not lean)
      await check(dev as Device, { rows: 12, vocab: 256, subgroupList: 0 }, 10);
      await check(dev as Device, { rows: 12, vocab: 256, lean: false }, 11);
    });
    // The first check of each test runs on every device; its forced variants (workgroup lists, not lean, other
    // part counts) alternate between vulkan and wgpu on lavapipe (tests/devices/index.ts softwareShare).
    const variants = async (list: [SampleShape, number, Params[]?][]) => {
      for (const [shape, seed, configs] of softwareShare(dev, list)) await check(dev as Device, shape, seed, configs);
    };
    test(`sample kernel on ${name}: long rows, cut and compacted or read in place`, { skip }, async () => {
      await check(dev as Device, { rows: quick ? 24 : 36, vocab: 700, cap: 64 }, 3);
      await variants([[{ rows: 12, vocab: 700, cap: 64, subgroupList: 0 }, 12], [{ rows: 12, vocab: 700, cap: 64, lean: false }, 13]]);
      // every row read in place (no cut search), and a tiny candidate list
      if (quick || name === "js") {
        await check(dev as Device, { rows: 12, vocab: 700, cap: 64, cutoffSteps: 0 }, 4);
        await check(dev as Device, { rows: 12, vocab: 333, cap: 16 }, 5);
      }
    });
    test(`sample kernel on ${name}: long rows split over parts (stats, masses, pick)`, { skip }, async () => {
      await check(dev as Device, { rows: 24, vocab: 2000, parts: 7 }, 7, PLAIN);
      await variants([
        [{ rows: 12, vocab: 700, cap: 64, parts: 5 }, 8],
        [{ rows: 12, vocab: 700, cap: 64, parts: 5, subgroupList: 0 }, 14],
        [{ rows: 12, vocab: 700, cap: 64, parts: 5, lean: false }, 15],
        [{ rows: 6, vocab: 1001, parts: 3 }, 9, PLAIN],
      ]);
    });
    if (!quick) {
      test(`sample kernel on ${name}: a real vocabulary (32000)`, { skip: skip || slowDevice(dev) }, async () => {
        await check(dev as Device, { rows: 6, vocab: 32000 }, 6);
      });
    }
  }
}
