// The tensor-core matmul (kernels/lib/mma_matmul.ts) on a real PTX device (skips without libcuda or a CUDA
// device of sm_80+): the conformance cases against the float64 reference, a projection-sized case, and batch
// invariance: a row alone gives the same bits as inside batches of 37, 64 and 130 rows; the same over GGUF blocks.
import { test } from "node:test";
import assert from "node:assert/strict";
import { probePtx } from "../../backends/ptx/mod.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { assertCase, runCase } from "../kernels/harness.ts";
import {
  checkInvariance, checkPipelined, checkServingInvariance, flashCase, flashCfgs, mmaCase, type MmaCaseShape, mmaShapes, pipelinedShapes, runFlashSplit,
  runPrepared,
} from "../kernels/mma_cases.ts";
import { mmaServingLayout, type MmaServingTune } from "../../kernels/lib/mma_matmul.ts";
import { type RegisterBlockCase, registerBlockCase, registerBlockCases, registerBlockInvariance } from "../kernels/mma_block_cases.ts";

const probe = probePtx();
const dev = typeof probe === "string" ? undefined : probe;
const skip = typeof probe === "string" ? probe : !dev!.target.caps.mma ? `${dev!.target.device} has no MMA tiles` : false;
const opts = { skip, timeout: 300_000 };

for (const s of [...mmaShapes(), { n: 256, k: 2048, batch: 70, w: "bf16" as const, residual: true }]) {
  const kc = mmaCase(s, false);
  test(`ptx: ${kc.name}`, opts, async () => assertCase(kc, await runCase(dev!, kc)));
}

for (const s of mmaShapes().filter((s) => s.w === "bf16")) {
  test(`ptx: prepared x: ${mmaCase(s, false).name}`, opts, async () => assert.deepEqual(await runPrepared(dev!, s, false), []));
}

// GGUF blocks as W (the serving entries' matmul): the emulated cases, projection-sized ones in the serving layouts,
// and a row alone against the same row inside 32 rows
const blockBig: RegisterBlockCase[] = (["q4_k", "q6_k", "q8_0", "q5_k"] as const).flatMap((t) =>
  [1, 32].map((batch) => ({ t, n: 1024, k: 4096, batch, split: true, residual: true, layout: mmaServingLayout(1024, 4096, batch, {}, t) })));
for (const c of [...registerBlockCases(), ...blockBig]) {
  const kc = registerBlockCase(c, false);
  test(`ptx: ${kc.name}`, opts, async () => assertCase(kc, await runCase(dev!, kc)));
}
test("ptx: over blocks, a row alone equals the same row inside 32 and 37 rows (serving layouts)", opts, async () => {
  assert.deepEqual(await registerBlockInvariance(dev!, { t: "q4_k", n: 512, k: 4096, residual: true }, 32, [0, 31], false), []);
  assert.deepEqual(await registerBlockInvariance(dev!, { t: "q6_k", n: 264, k: 2048, bias: true }, 37, [3, 36], false), []);
  assert.deepEqual(await registerBlockInvariance(dev!, { t: "q8_0", n: 96, k: 2080, residual: true }, 37, [0, 20], false), []);
});

for (const s of [...pipelinedShapes(), { n: 4096, k: 1024, batch: 32, w: "bf16" as const, ks: 16, nt: 2, residual: true, stages: 2 }]) {
  test(`ptx: ${s.stages}-stage pipeline equals direct loads: ${mmaCase(s, false).name}`, opts, async () => assert.deepEqual(await checkPipelined(dev!, s, false), []));
}

for (const c of [...flashCfgs(), { rows: 256, heads: 32, kvHeads: 8, hd: 64, cap: 600, pos: 300, kv: "f16" as const }]) {
  const kc = flashCase(c, false);
  test(`ptx: ${kc.name}`, opts, async () => assertCase(kc, await runCase(dev!, kc)));
}

for (const [c, splits] of [[flashCfgs()[2], 3], [flashCfgs()[0], 4], [{ rows: 40, heads: 4, kvHeads: 2, hd: 32, cap: 200, pos: 150, kv: "f16" }, 5]] as const) {
  test(`ptx: split ${splits} ways: ${flashCase(c, false).name}`, opts, async () => assert.deepEqual(await runFlashSplit(dev!, c, splits, false), []));
}

test("ptx: mma matmul rows alone equal the same rows inside batches of 37, 64 and 130", opts, async () => {
  const run = async (kernel: Kernel, ins: Uint8Array[]) => {
    const r = await runCase(dev!, { name: kernel.name, make: () => kernel, inputs: () => ins, expect: () => [] });
    assert.ok(r.outputs, r.fault?.message ?? "no outputs");
    return r.outputs![r.outputs!.length - 1];
  };
  for (const [m, base] of [
    [37, { n: 40, k: 520, w: "bf16" as const, bias: true, residual: true }],
    [64, { n: 256, k: 2048, w: "bf16" as const, ks: 16 }], // the serving entries' K split (mmaKSplitWide)
    [130, { n: 96, k: 264, w: "f16" as const }],
  ] as const) {
    const r = await checkInvariance(dev!.target.caps, false, base, m, [0, 17, m - 1], run);
    assert.deepEqual(r.mismatches, [], `m=${m}`);
  }
});

test("ptx: the serving layouts give a row the same bits alone and in 8, 32 and 37 rows (prepared x)", opts, async () => {
  // mmaServingLayout's defaults at widths past each tile threshold (past 16 rows through the cp.async pipeline:
  // n·k past 32M at ks 8 eight tiles, else two at ks 16), and a tune with warps sharing columns; bias and residual, a leftover chunk and a k % 32 tail
  const cases: [Omit<MmaCaseShape, "batch">, MmaServingTune][] = [
    [{ n: 4096, k: 1064, w: "bf16", residual: true }, {}],
    [{ n: 1032, k: 2048, w: "bf16", bias: true }, {}],
    [{ n: 8200, k: 4096, w: "bf16", residual: true }, {}], // past 16 rows: eight tiles a warp, a 3-stage pipeline
    [{ n: 296, k: 1064, w: "bf16", bias: true, residual: true }, { ks: 8, small: { nt: 2, unroll: 4, nw: 2 }, big: { nt: 8, unroll: 2 } }],
  ];
  for (const [base, tune] of cases) {
    // (the 8200 x 4096 case, whose inputs take seconds to make, at 37 rows only: below 17 it takes no pipeline)
    for (const m of base.n * base.k >= 2 ** 25 ? [37] : [8, 32, 37]) {
      const r = await checkServingInvariance(dev!, false, base, m, [0, m - 1], tune);
      assert.deepEqual(r.mismatches, [], `n=${base.n} m=${m} ${JSON.stringify(tune)}`);
    }
  }
});
