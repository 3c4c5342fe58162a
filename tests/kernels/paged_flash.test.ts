// The MMA decode attention (kernels/lib/flash_decode.ts), paged and contiguous, on the JS device with the warp MMA emulated (32-lane
// subgroups in lockstep, caps.mma forced on): against the float64 reference (paged_flash_cases.ts), batch
// invariance, its faults, where it refuses a shape, and the PTX it renders for sm_90 (assembled where ptxas is).
import { test } from "node:test";
import assert from "node:assert/strict";
import { KernelFault } from "../../backends/errors.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import { FAULT } from "../../kernels/lib/codes.ts";
import { flashDecodeFits, pagedFlashPartial } from "../../kernels/lib/flash_decode.ts";
import { renderPtx } from "../../kernels/render/ptx.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import { mmaCaps } from "./mma_cases.ts";
import {
  checkPagedFlash, checkPagedFlashInvariance, decodeFlashCfgs, pagedFlashCfgs, pagedFlashInputs, pagedFlashName, runDecodeFlash, runPagedFlash,
} from "./paged_flash_cases.ts";
import { attentionCase } from "./cases.ts";
import { assemble, findPtxas } from "../ptx/ptxas.ts";

const base = { ...JS_CAPS, subgroups: true, subgroupSize: 32, maxWorkgroupSize: 1024 };
const caps = mmaCaps(base, true);
const dev = () => new JsDevice({ debug: true, caps: base });

for (const c of pagedFlashCfgs()) {
  test(`js (emulated mma): ${pagedFlashName(c)}: combined partials match the reference`, { timeout: 300_000 }, async () => {
    assert.deepEqual(await checkPagedFlash(dev(), caps, c), []);
  });
}

test("js (emulated mma): paged flash: K/V loaded a trip ahead, or through 2 or 3 cp.async stages, gives the same partials, bit for bit", { timeout: 300_000 }, async () => {
  for (const c of pagedFlashCfgs()) {
    const ins = pagedFlashInputs(c).ins;
    const want = await runPagedFlash(dev(), caps, c, ins, false);
    assert.ok(!(want instanceof KernelFault), "no fault");
    for (const v of [{ prefetch: true }, { stages: 2 }, { stages: 3 }]) {
      const got = await runPagedFlash(dev(), caps, { ...c, ...v }, ins, false);
      assert.ok(!(got instanceof KernelFault), "no fault");
      assert.deepEqual(got.part, want.part, pagedFlashName({ ...c, ...v }));
    }
  }
});

test("js (emulated mma): paged flash: a row's partials alone equal its partials inside the batch, bit for bit", { timeout: 300_000 }, async () => {
  for (const c of pagedFlashCfgs().slice(0, 2)) assert.deepEqual(await checkPagedFlashInvariance(dev(), caps, c), [], pagedFlashName(c));
});

test("js (emulated mma): paged flash faults PAGED_BLOCK on a pool entry past the pool it reads, ATTENTION_POS past the table, not on entries past a row's positions", { timeout: 300_000 }, async () => {
  const c = pagedFlashCfgs()[0], pool = c.rows * c.maxBlocks + 3;
  const withEntry = (row: number, blk: number, v: number) => {
    const ins = pagedFlashInputs(c).ins.map((b) => b.slice());
    new Int32Array(ins[3].buffer)[row * c.maxBlocks + blk] = v;
    return ins;
  };
  const read = await runPagedFlash(dev(), caps, c, withEntry(1, 1, pool), false); // row 1 (pos 17) reads block 1
  assert.ok(read instanceof KernelFault && read.code === FAULT.PAGED_BLOCK, `read: ${read instanceof KernelFault ? read.message : "no fault"}`);
  const neg = await runPagedFlash(dev(), caps, c, withEntry(0, 3, -1), false);
  assert.ok(neg instanceof KernelFault && neg.code === FAULT.PAGED_BLOCK, `negative: ${neg instanceof KernelFault ? neg.message : "no fault"}`);
  const past = await runPagedFlash(dev(), caps, c, withEntry(1, 5, pool), false); // past row 1's 18 positions
  assert.ok(!(past instanceof KernelFault), `past: ${past instanceof KernelFault ? past.message : ""}`);
  const ahead = await runPagedFlash(dev(), caps, { ...c, prefetch: true }, withEntry(1, 1, pool), false);
  assert.ok(ahead instanceof KernelFault && ahead.code === FAULT.PAGED_BLOCK, `prefetch: ${ahead instanceof KernelFault ? ahead.message : "no fault"}`);
  const aheadPast = await runPagedFlash(dev(), caps, { ...c, prefetch: true }, withEntry(1, 5, pool), false);
  assert.ok(!(aheadPast instanceof KernelFault), `prefetch past: ${aheadPast instanceof KernelFault ? aheadPast.message : ""}`);
  const piped = await runPagedFlash(dev(), caps, { ...c, stages: 3 }, withEntry(1, 1, pool), false);
  assert.ok(piped instanceof KernelFault && piped.code === FAULT.PAGED_BLOCK, `stages: ${piped instanceof KernelFault ? piped.message : "no fault"}`);
  const pipedPast = await runPagedFlash(dev(), caps, { ...c, stages: 3 }, withEntry(1, 5, pool), false);
  assert.ok(!(pipedPast instanceof KernelFault), `stages past: ${pipedPast instanceof KernelFault ? pipedPast.message : ""}`);
  const ins = pagedFlashInputs(c).ins.map((b) => b.slice());
  new Int32Array(ins[4].buffer)[2] = c.maxBlocks * c.block;
  const far = await runPagedFlash(dev(), caps, c, ins, false);
  assert.ok(far instanceof KernelFault && far.code === FAULT.ATTENTION_POS, `pos: ${far instanceof KernelFault ? far.message : "no fault"}`);
});

test("paged flash refuses what it cannot take, with the reason", () => {
  const s = { heads: 8, kvHeads: 2, hd: 64, poolRows: 64, block: 16, maxBlocks: 4, kv: "bf16" as const };
  assert.equal(flashDecodeFits(caps, s), "");
  assert.match(flashDecodeFits(JS_CAPS, s), /MMA/);
  assert.match(flashDecodeFits(caps, { ...s, kv: "f32" }), /f32 K\/V/);
  assert.match(flashDecodeFits(caps, { ...s, hd: 96 }), /head_dim 96/);
  assert.match(flashDecodeFits(caps, { ...s, heads: 32, kvHeads: 2 }), /at most 8/);
  assert.throws(() => pagedFlashPartial(caps, { ...s, hd: 80, splits: 2 }), /paged flash attention: head_dim 80/);
});

const ptxas = findPtxas();
test("paged flash PTX assembles for sm_90 (the 8B's and qwen2.5-0.5b's serving shapes, with and without prefetch)", { skip: ptxas ? false : "no ptxas installed", timeout: 120_000 }, () => {
  for (const s of [{ heads: 32, kvHeads: 8, hd: 128, kv: "bf16" as const }, { heads: 14, kvHeads: 2, hd: 64, kv: "f16" as const }].flatMap((x) => [x, { ...x, prefetch: true }, { ...x, stages: 3 }])) {
    const k = pagedFlashPartial(SM90_CAPS, { ...s, rows: 32, poolRows: 16 * 1200, block: 16, maxBlocks: 37, pos: "i32", table: "i32", splits: 10 });
    const m = renderPtx(k, { sm: 90 });
    assert.match(m.ptx, /mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(bf16|f16)\.(bf16|f16)\.f32/);
    const r = assemble(ptxas!, m.ptx, "sm_90", true);
    assert.ok(r.ok, `${k.name}: ${r.log}`);
    console.log(`${k.name}: ${r.log.split("\n").filter((l) => /registers|spill/.test(l)).join(" ")}`);
  }
});

for (const c of decodeFlashCfgs()) {
  for (const splits of [1, 5]) {
    test(`js (emulated mma): flash decode (contiguous) in ${splits} chunks: ${attentionCase(c).name}`, { timeout: 300_000 }, async () => {
      assert.deepEqual(await runDecodeFlash(dev(), caps, c, splits), []);
      assert.deepEqual(await runDecodeFlash(dev(), caps, c, splits, false, { prefetch: true }), [], "prefetch");
      assert.deepEqual(await runDecodeFlash(dev(), caps, c, splits, false, { stages: 3 }), [], "3 stages");
    });
  }
}

test("js (emulated mma): flash decode (contiguous) faults ATTENTION_POS when pos + rows passes the cache", async () => {
  assert.deepEqual(await runDecodeFlash(dev(), caps, { rows: 2, heads: 4, kvHeads: 1, hd: 64, cap: 32, pos: 31, kv: "bf16" }, 2, true), []);
});
