// The paged MMA attention (kernels/lib/paged_flash.ts) on a real PTX device (skips without libcuda or a CUDA device
// of sm_80+): the cases against the float64 reference, an 8B-sized serving shape, and batch invariance.
import { test } from "node:test";
import assert from "node:assert/strict";
import { probePtx } from "../../backends/ptx/mod.ts";
import { checkPagedFlash, checkPagedFlashInvariance, type PagedFlashCfg, pagedFlashCfgs, pagedFlashName } from "../kernels/paged_flash_cases.ts";

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
