// The staged tensor-core kernels (kernels/lib/mma_staged.ts, flash_staged.ts: cp.async, ldmatrix) on a real PTX
// device (skips without libcuda or a CUDA device of sm_80+): the JS-emulated cases, projection-sized matmuls in
// the default and the wide layouts and attention at 512 rows against the float64 reference, and a Llama prefill
// chunk through the lowering's staged path (x split, and rounded once as prefill does by default) against the
// same device's FMA path.
import { test } from "node:test";
import assert from "node:assert/strict";
import { probePtx } from "../../backends/ptx/mod.ts";
import { Engine } from "../../backends/executor.ts";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { flashStagedCfgs, flashStagedName, runFlashStaged, runStaged, type StagedCase, stagedCases, stagedInvariance, stagedName } from "../kernels/mma_cases.ts";
import { runCase } from "../kernels/harness.ts";
import { runStagedSplitK, type StagedBlockCase, stagedBlockCase, stagedBlockCases, stagedBlockName, stagedSplitKCases } from "../kernels/mma_block_cases.ts";
import { assertCase } from "../kernels/harness.ts";
import { stagedBlockLayout } from "../../kernels/lib/mma_staged.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import type { LlamaConfig } from "../../llm/families/llama.ts";
import type { WeightMap, WeightRole, WeightStore } from "../../graph/weights.ts";
import type { DType } from "../../graph/dtype.ts";
import { randomLlama, TINY_LLAMA } from "./model.ts";

const probe = probePtx();
const dev = typeof probe === "string" ? undefined : probe;
const skip = typeof probe === "string" ? probe : !dev!.target.caps.staging ? `${dev!.target.device} has no cp.async/ldmatrix (sm_80+)` : false;
const opts = { skip, timeout: 300_000 };

const big: StagedCase[] = [
  { s: { n: 512, k: 2048, batch: 300, w: "bf16", residual: true }, layout: {} },
  { s: { n: 384, k: 1024, batch: 256, w: "bf16", bias: true }, layout: { bm: 128, bn: 128, wm: 2, wn: 4 } },
  { s: { n: 520, k: 512, batch: 200, w: "bf16" }, layout: { bm: 128, bn: 256, wm: 2, wn: 4, stages: 3 } },
  { s: { n: 256, k: 1024, batch: 192, w: "bf16" }, layout: { bm: 128, bn: 128, bk: 64, stages: 3, wm: 2, wn: 2 } },
  { s: { n: 256, k: 768, batch: 130, w: "bf16", split: false }, layout: {} },
  { s: { n: 640, k: 1024, batch: 300, w: "bf16", split: false, residual: true }, layout: { bm: 128, bn: 128, bk: 64, stages: 3, wm: 2, wn: 2 } },
];
for (const c of [...stagedCases(), ...big]) {
  test(`ptx: ${stagedName(c)}`, opts, async () => assert.deepEqual(await runStaged(dev!, c, false), []));
}

/** A prefill chunk of `rows` rows of the Llama `c` with these weights, compiled with the options given: its logits and kernels. */
function chunkRunner(c: LlamaConfig, rows: number, m: { store: WeightStore; map: WeightMap; dtypeOf: (r: WeightRole) => DType }) {
  const { tracer, logits } = traceLlama(c, { rows, cap: 256 }, { dtypeOf: m.dtypeOf });
  tracer.output("logits", logits);
  const graph = tracer.build();
  return async (o: CompileOptions) => {
    const names: string[] = [];
    const compile = (g: typeof graph, t: Parameters<typeof compileGraph>[1]) => {
      const p = compileGraph(g, t, o);
      for (const s of p.steps) if (s.k === "kernel") names.push(s.kernel.name);
      return p;
    };
    const eng = new Engine(dev!, { compile, ownsDevice: false });
    try {
      await eng.loadWeights(m.store, m.map);
      const id = eng.addEntry("prefill", graph);
      const token = Int32Array.from({ length: rows }, (_, i) => (i * 37 + 5) % c.vocab);
      const r = await eng.step(id, { token, pos: new Int32Array([3]) });
      return { logits: (r.outputs.logits as Float32Array).slice(), names };
    } finally {
      await eng.unload();
    }
  };
}

// GGUF blocks dequantized as staged: the emulated cases, and projection-sized ones in the lowering's layouts
const blockBig: StagedBlockCase[] = [
  { t: "q4_k", n: 1024, k: 4096, batch: 256, residual: true, layout: stagedBlockLayout(256, 1024, 4096, true) },
  { t: "q6_k", n: 520, k: 2048, batch: 300, layout: stagedBlockLayout(300, 520, 2048, true) },
  { t: "q8_0", n: 768, k: 1024, batch: 130, bias: true, layout: stagedBlockLayout(130, 768, 1024, true) },
  { t: "q5_k", n: 256, k: 1024, batch: 64, layout: stagedBlockLayout(64, 256, 1024, false) },
];
for (const c of [...stagedBlockCases(), ...blockBig]) {
  const kc = stagedBlockCase(c, false);
  test(`ptx: ${kc.name}`, opts, async () => assertCase(kc, await runCase(dev!, kc)));
}
// split over k (the serving entries' path with mmaBlocks "all"), then the combine; and the 8B's o projection's shape
for (const [c, splits] of [...stagedSplitKCases(), [{ t: "q4_k", n: 4096, k: 4096, batch: 32, split: true, residual: true, layout: { bm: 64, bn: 64, bk: 64, stages: 6, wm: 1, wn: 1, wg: true, wgPending: 1 } }, 8] as [StagedBlockCase, number]]) {
  test(`ptx: ${stagedBlockName(c)} over ${splits} k splits, then their combine`, opts, async () => assert.deepEqual(await runStagedSplitK(dev!, c, splits, false), []));
}

test("ptx: a 160-row Q4_K_M Llama prefill chunk on the staged block kernels equals the FMA path within bf16's precision", opts, async () => {
  const rows = 160;
  const c = { ...TINY_LLAMA, dim: 256, hidden: 512, heads: 4, kvHeads: 2, headDim: 64 };
  const syn = syntheticLlama(c, { dtype: "q4_k_m", seed: 5, std: 0.06 });
  const run = chunkRunner(c, rows, syn);
  const b = await run({ mma: "off" });
  const a = await run({});
  assert.ok(a.names.filter((n) => /^mma_staged_q\d_k/.test(n)).length === 7 * c.layers + 1, a.names.join(" "));
  let worst = 0, scale = 0;
  for (let i = 0; i < a.logits.length; i++) {
    assert.ok(Number.isFinite(a.logits[i]), `logit ${i} is ${a.logits[i]}`);
    worst = Math.max(worst, Math.abs(a.logits[i] - b.logits[i]));
    scale = Math.max(scale, Math.abs(b.logits[i]));
  }
  // x and the weights each rounded once to bf16 (tests/kernels/mma_staged.test.ts: ~1% of the range on JS)
  assert.ok(worst <= 2 * 2 ** 8 * 1e-4 * scale && worst > 0, `max |staged - fma| = ${worst} of logits up to ${scale}`);
});

test("ptx: staged matmul rows alone equal the same rows inside a batch of 300 (128 x 128 blocks, hardware MMA order)", opts, async () => {
  const c: StagedCase = { s: { n: 256, k: 1024, batch: 300, w: "bf16" }, layout: { bm: 128, bn: 128, wm: 2, wn: 4 } };
  assert.deepEqual(await stagedInvariance(dev!, c, [0, 131, 299], false), []);
});

for (const c of [...flashStagedCfgs(), { rows: 512, heads: 8, kvHeads: 2, hd: 128, cap: 1100, pos: 500 }, { rows: 200, heads: 8, kvHeads: 8, hd: 128, cap: 300, pos: 60, bkv: 64 }, { rows: 300, heads: 8, kvHeads: 2, hd: 64, cap: 400, pos: 77, warps: 8 }]) {
  test(`ptx: ${flashStagedName(c)}`, opts, async () => assert.deepEqual(await runFlashStaged(dev!, c, false), []));
}

test("ptx: a 160-row Llama prefill chunk on the staged kernels (matmul, flash attention) equals the FMA path within the MMA's precision, x split or rounded once", opts, async () => {
  const rows = 160;
  const c = { ...TINY_LLAMA, heads: 2, kvHeads: 1, headDim: 64 }; // head_dim 64: the staged flash attention's
  const { store, map, dtypeOf } = randomLlama(c, 11, true);
  const run = chunkRunner(c, rows, { store, map, dtypeOf });
  const b = await run({ mma: "off" });
  // x (and flash attention's operands) as hi + lo parts: ~16 significant bits; rounded once (the prefill
  // default): 8, so the bound is 2^8 times wider (session 12 measured 0.0119 of logits up to 2.28 there)
  for (const [o, bound] of [[{ mmaSplit: true }, 1e-4], [{}, 2 ** 8 * 1e-4]] as const) {
    const a = await run(o);
    // the SiLU product made in the down projection's x preparation (the default) or by a kernel of its own: the same bits
    const apart = await run({ ...o, mmaPrepFuse: false });
    assert.ok(a.names.some((n) => /^mma_prep_.*_ew2$/.test(n)) && !apart.names.some((n) => /_ew2$/.test(n)), a.names.join(" "));
    assert.deepEqual(a.logits, apart.logits, `${JSON.stringify(o)}: the fused preparation changed the logits`);
    assert.ok(a.names.some((n) => n.startsWith("mma_staged")) && a.names.some((n) => n.startsWith("flash_staged")), a.names.join(" "));
    let worst = 0, scale = 0;
    for (let i = 0; i < a.logits.length; i++) {
      assert.ok(Number.isFinite(a.logits[i]), `logit ${i} is ${a.logits[i]}`);
      worst = Math.max(worst, Math.abs(a.logits[i] - b.logits[i]));
      scale = Math.max(scale, Math.abs(b.logits[i]));
    }
    assert.ok(worst <= bound * scale, `${JSON.stringify(o)}: max |staged - fma| = ${worst} of logits up to ${scale}`);
  }
});
