// The MMA decode attention (kernels/lib/flash_decode.ts), paged and contiguous, on a real PTX device (skips without libcuda or a CUDA device
// of sm_80+): the cases against the float64 reference, an 8B-sized serving shape, batch invariance, and a 1B-sized
// decode at a deep position.
import { test } from "node:test";
import assert from "node:assert/strict";
import { probePtx } from "../../backends/ptx/mod.ts";
import {
  checkPagedFlash, checkPagedFlashInvariance, decodeFlashCfgs, type PagedFlashCfg, pagedFlashCfgs, pagedFlashInputs, pagedFlashName, runDecodeFlash,
  runPagedFlash,
} from "../kernels/paged_flash_cases.ts";
import { KernelFault } from "../../backends/errors.ts";
import { attentionCase } from "../kernels/cases.ts";

const probe = probePtx();
const dev = typeof probe === "string" ? undefined : probe;
const skip = typeof probe === "string" ? probe : !dev!.target.caps.mma ? `${dev!.target.device} has no MMA tiles` : false;
const opts = { skip, timeout: 300_000 };

const big: PagedFlashCfg = { rows: 5, heads: 32, kvHeads: 8, hd: 128, block: 16, maxBlocks: 37, splits: 10, pos: [576, 591, 0, 63, 300], kv: "bf16" };
for (const c of [...pagedFlashCfgs(), big]) {
  test(`ptx: ${pagedFlashName(c)}: combined partials match the reference`, opts, async () => {
    assert.deepEqual(await checkPagedFlash(dev!, dev!.target.caps, c), []);
  });
}

test("ptx: paged flash: a row's partials alone equal its partials inside the batch, bit for bit", opts, async () => {
  for (const c of [pagedFlashCfgs()[0], big]) assert.deepEqual(await checkPagedFlashInvariance(dev!, dev!.target.caps, c), [], pagedFlashName(c));
});

const deep = { rows: 1, heads: 32, kvHeads: 8, hd: 64, cap: 8192, pos: 4100, kv: "bf16" as const };
for (const [c, splits] of [...decodeFlashCfgs().map((c) => [c, 5] as const), [deep, 64] as const]) {
  test(`ptx: flash decode (contiguous) in ${splits} chunks: ${attentionCase(c).name}`, opts, async () => {
    assert.deepEqual(await runDecodeFlash(dev!, dev!.target.caps, c, splits), []);
  });
}

test("ptx: the MMA attention's K/V a trip ahead, or through 2 or 3 cp.async stages: the same partials, bit for bit", opts, async () => {
  for (const c of [pagedFlashCfgs()[0], pagedFlashCfgs()[1], big]) {
    const ins = pagedFlashInputs(c).ins, caps = dev!.target.caps;
    const want = await runPagedFlash(dev!, caps, c, ins, false);
    assert.ok(!(want instanceof KernelFault), "no fault");
    for (const v of [{ prefetch: true }, { stages: 2 }, { stages: 3 }]) {
      const got = await runPagedFlash(dev!, caps, { ...c, ...v }, ins, false);
      assert.ok(!(got instanceof KernelFault), "no fault");
      assert.deepEqual(got.part, want.part, pagedFlashName({ ...c, ...v }));
    }
  }
  assert.deepEqual(await runDecodeFlash(dev!, dev!.target.caps, deep, 64, false, { stages: 3 }), [], "contiguous, 3 stages");
});
