// The tensor-core matmul on the JS device with the warp MMA emulated (32-lane subgroups in lockstep, caps.mma
// forced on): its fragment indexing, K permutation, tails, split-K reduction and epilogue against the float64
// reference, its batch invariance, and the PTX it renders for sm_90 (assembled by ptxas where installed); the same
// over GGUF blocks (the serving entries' path: every block type, invariance, the 8B's layouts without spills).
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import { mmaMatmul, type MmaServingTune } from "../../kernels/lib/mma_matmul.ts";
import { flashAttention } from "../../kernels/lib/flash.ts";
import { renderPtx } from "../../kernels/render/ptx.ts";
import { renderWgsl } from "../../kernels/render/wgsl.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import { assertCase, runCase } from "./harness.ts";
import {
  checkInvariance, checkPipelined, checkServingInvariance, flashCase, flashCfgs, mmaCase, mmaShapes, pipelinedShapes, runFlashSplit, runPrepared,
} from "./mma_cases.ts";
import { assemble, findPtxas } from "../ptx/ptxas.ts";
import { servingEntry } from "../../bench/serve_kernels.ts";
import { registerBlockCase, registerBlockCases, registerBlockInvariance } from "./mma_block_cases.ts";
import { mmaServingLayout } from "../../kernels/lib/mma_matmul.ts";

const dev = new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroups: true, subgroupSize: 32, maxWorkgroupSize: 1024 } });

for (const s of mmaShapes()) {
  const kc = mmaCase(s, true);
  test(`js (emulated mma): ${kc.name}`, async () => assertCase(kc, await runCase(dev, kc)));
}

for (const s of mmaShapes().filter((s) => s.w === "bf16")) {
  test(`js (emulated mma): prepared x: ${mmaCase(s, true).name}`, async () => assert.deepEqual(await runPrepared(dev, s, true), []));
}

for (const s of pipelinedShapes()) {
  test(`js (emulated mma): ${s.stages}-stage pipeline equals direct loads: ${mmaCase(s, true).name}`, async () => assert.deepEqual(await checkPipelined(dev, s, true), []));
}

for (const c of flashCfgs()) {
  const kc = flashCase(c, true);
  test(`js (emulated mma): ${kc.name}`, async () => assertCase(kc, await runCase(dev, kc)));
}
{
  const kc = flashCase({ rows: 4, heads: 2, kvHeads: 1, hd: 16, cap: 8, pos: 5, pt: "i32" }, true, true);
  test(`js (emulated mma): ${kc.name}`, async () => assertCase(kc, await runCase(dev, kc)));
}

for (const [c, splits] of [[flashCfgs()[2], 3], [flashCfgs()[0], 4], [{ rows: 40, heads: 4, kvHeads: 2, hd: 32, cap: 200, pos: 150, kv: "f16" }, 5]] as const) {
  test(`js (emulated mma): split ${splits} ways: ${flashCase(c, true).name}`, async () => assert.deepEqual(await runFlashSplit(dev, c, splits, true), []));
}

test("js (emulated mma): a row alone and inside m=37 give identical bits", async () => {
  const run = async (kernel: ReturnType<typeof mmaMatmul>, ins: Uint8Array[]) => {
    const r = await runCase(dev, { name: kernel.name, make: () => kernel, inputs: () => ins, expect: () => [] });
    assert.ok(r.outputs, r.fault?.message ?? "no outputs");
    return r.outputs![r.outputs!.length - 1];
  };
  const base = { n: 24, k: 160, w: "bf16" as const, bias: true, residual: true };
  const r = await checkInvariance(dev.target.caps, true, base, 37, [0, 5, 36], run);
  assert.deepEqual(r.mismatches, []);
  // the serving entries' 16-warp K split, with its other tiles at 1 and at 37 rows
  const wide = await checkInvariance(dev.target.caps, true, { n: 16, k: 2048, w: "bf16", ks: 16 }, 37, [0, 36], run);
  assert.deepEqual(wide.mismatches, []);
});

test("js (emulated mma): serving layouts give a row the same bits alone (1-row layout) and in 8 / 37 rows (other tiles)", { timeout: 300_000 }, async () => {
  // n off every column group, k with a leftover chunk past the K split and a k % 32 tail; bias and residual
  const base = { n: 40, k: 1064, w: "bf16" as const, bias: true, residual: true };
  const tunes: MmaServingTune[] = [
    {}, // the library's defaults
    { ks: 16, small: { nt: 4, unroll: 2 }, big: { nt: 4, unroll: 1, nw: 2 } },
    { ks: 8, small: { nt: 2, unroll: 4, nw: 2 }, big: { nt: 8, unroll: 2 } },
    { ks: 2, small: { nt: 1, unroll: 1 }, big: { nt: 2, unroll: 2 } },
    // the cp.async pipeline past 16 rows (the defaults take it at the real shapes only)
    { ks: 8, big: { nt: 8, unroll: 1, stages: 3 } },
    { ks: 4, small: { nt: 2, unroll: 1, stages: 2 }, big: { nt: 4, unroll: 2, stages: 2 } },
  ];
  for (const tune of tunes) {
    const big = await checkServingInvariance(dev, true, base, 37, [0, 17, 36], tune);
    assert.deepEqual(big.mismatches, [], JSON.stringify(tune));
    const small = await checkServingInvariance(dev, true, base, 8, [0, 7], tune); // the zero-padded upper half rows
    assert.deepEqual(small.mismatches, [], JSON.stringify(tune));
  }
});

// GGUF blocks as W of the serving entries' matmul: each lane decodes its chunks into MMA operands
for (const c of registerBlockCases()) {
  const kc = registerBlockCase(c, true);
  test(`js (emulated mma): ${kc.name}`, async () => assertCase(kc, await runCase(dev, kc)));
}
test("js (emulated mma): over blocks, a row alone (1-row layout) and inside 37 rows (two row tiles) give identical bits", { timeout: 120_000 }, async () => {
  // q8_0 rows of 13 blocks: 6 whole trips over 2 warps (at one row two at a time, then one), then a partial one on warp 0
  assert.deepEqual(await registerBlockInvariance(dev, { t: "q8_0", n: 24, k: 416, bias: true, residual: true }, 37, [0, 17, 36], true), []);
  assert.deepEqual(await registerBlockInvariance(dev, { t: "q4_k", n: 16, k: 1024 }, 37, [5, 36], true), []);
});

test("mma matmul is refused where the target has no MMA tile", () => {
  assert.throws(() => mmaMatmul(JS_CAPS, { n: 16, k: 64, batch: 2, w: "bf16" }), /caps\.mma/);
  const k = mmaMatmul({ ...SM90_CAPS }, { n: 16, k: 64, batch: 2, w: "bf16" });
  assert.throws(() => renderWgsl(k, { subgroups: true, f16: false } as Parameters<typeof renderWgsl>[1]), /PTX/);
});

const ptxas = findPtxas();
// bun's default per-test limit is 5 s; one ptxas run per kernel takes longer
test("mma matmul PTX assembles for sm_90", { skip: ptxas ? false : "no ptxas installed", timeout: 120_000 }, () => {
  for (const s of [...mmaShapes(), { n: 2048, k: 2048, batch: 32, w: "bf16" as const }, { n: 8192, k: 2048, batch: 512, w: "bf16" as const, residual: true }]) {
    const k = mmaMatmul(SM90_CAPS, s);
    const m = renderPtx(k, { sm: 90 });
    assert.match(m.ptx, /mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(bf16|f16)\.(bf16|f16)\.f32/);
    const r = assemble(ptxas!, m.ptx, "sm_90");
    assert.ok(r.ok, `${k.name}: ${r.log}`);
  }
  for (const c of [...flashCfgs(), { rows: 256, heads: 32, kvHeads: 8, hd: 128, cap: 2048, pos: 0, pt: undefined }]) {
    const k = flashAttention(SM90_CAPS, { ...c, pos: c.pt ?? "u32" });
    const r = assemble(ptxas!, renderPtx(k, { sm: 90 }).ptx, "sm_90");
    assert.ok(r.ok, `${k.name}: ${r.log}`);
  }
});

test("mma matmul over blocks: the serving layouts of the 8B's projections assemble for sm_90 without spills", { skip: ptxas ? false : "no ptxas installed", timeout: 300_000 }, () => {
  const shapes: [number, number][] = [[4096, 4096], [1024, 4096], [14336, 4096], [4096, 14336]];
  for (const t of ["q4_k", "q6_k", "q8_0", "q5_k", "q4_0", "q4_1", "q5_0", "q5_1"] as const) {
    for (const [n, k] of shapes) {
      for (const m of [1, 32, 160]) {
        const kern = mmaMatmul(SM90_CAPS, { ...mmaServingLayout(n, k, m, {}, t), n, k, batch: m, w: "bf16", blocks: t, prepared: true, residual: true });
        const r = assemble(ptxas!, renderPtx(kern, { sm: 90 }).ptx, "sm_90", true);
        assert.ok(r.ok, `${kern.name}: ${r.log}`);
        assert.doesNotMatch(r.log, /[1-9]\d* bytes spill stores/, `${kern.name} spills: ${r.log}`);
      }
    }
  }
});

test("serving entries on a target with less shared memory: pipelines that do not fit take fewer stages, or load directly", () => {
  // the 1B's 32-row entry at the H200's 227 KB takes pipelines of 2 and 3 stages (up to ~196 KB); at an A100's
  // 163 KB and an sm_86's 99 KB the lowering steps them down (kernels/lower/matmul.ts), and every kernel fits
  const stagesAt = (maxSharedBytes: number) => {
    const target = { backend: "ptx" as const, device: "sm_90 (no device)", caps: { ...SM90_CAPS, maxSharedBytes }, memory: { totalBytes: 141e9 }, watchdogBudget: 0 };
    const { prog } = servingEntry("llama-3.2-1b", target, 32, 40);
    const mma = prog.steps.flatMap((s) => (s.k === "kernel" && s.kernel.name.startsWith("mma_matmul") ? [s.kernel] : []));
    assert.ok(mma.length > 0, "MMA matmuls in the entry");
    for (const k of mma) {
      const bytes = k.shared.reduce((a, sh) => a + sh.count * 4, 0);
      assert.ok(bytes <= maxSharedBytes, `${k.name}: ${bytes} bytes of shared memory past ${maxSharedBytes}`);
    }
    return mma.map((k) => Number(/_p(\d)_/.exec(k.name)?.[1] ?? 0));
  };
  const full = stagesAt(227 * 1024), less = stagesAt(163 * 1024), least = stagesAt(99 * 1024);
  assert.ok(full.some((s) => s === 3) && full.some((s) => s === 2), `2 and 3 stages at 227 KB: ${full}`);
  assert.ok(less.some((s, i) => s > 0 && s < full[i]) && less.some((s, i) => s === 0 && full[i] > 0), `fewer stages, and none, at 163 KB: ${less}`);
  assert.ok(least.every((s) => s === 0), `direct loads at 99 KB: ${least}`);
});
