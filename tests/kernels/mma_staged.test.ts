// The staged tensor-core kernels (kernels/lib/mma_staged.ts matmul, flash_staged.ts attention: cp.async
// pipelines, ldmatrix fragments) on the JS device, whose renderer emulates cp.async (copies land at the wait that
// retires their group), ldmatrix and the warp MMA in lockstep: each case against the float64 reference within
// mmaCase's / flashCase's tolerance. Then the IR pieces alone (ldmatrix with and without .trans, a read before
// its wait sees the old words), the refusal on targets without caps.staging, the lowering's choice and a Llama
// chunk through it, and the PTX of the prefill shapes assembled for sm_90 by ptxas.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import { stagedBlockLayout, stagedLayout, stagedMatmul } from "../../kernels/lib/mma_staged.ts";
import { mmaMatmul, mmaPrepX } from "../../kernels/lib/mma_matmul.ts";
import { KernelBuilder } from "../../kernels/ir.ts";
import { renderPtx } from "../../kernels/render/ptx.ts";
import { renderWgsl } from "../../kernels/render/wgsl.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import { runCase } from "./harness.ts";
import { runStagedSplitK, stagedBlockCase, stagedBlockCases, stagedBlockName, stagedSplitKCases } from "./mma_block_cases.ts";
import { flashCase, flashStagedCfgs, flashStagedName, logitGap, prefillLogits, runFlashStaged, runStaged, stagedCases, stagedInvariance, stagedName } from "./mma_cases.ts";
import { flashStaged } from "../../kernels/lib/flash_staged.ts";
import { assertCase } from "./harness.ts";
import { assemble, findPtxas } from "../ptx/ptxas.ts";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { randomLlama, TINY_LLAMA } from "../ptx/model.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { servingSplits } from "../../kernels/lower/matmul.ts";

const dev = new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroups: true, subgroupSize: 32, maxWorkgroupSize: 1024, maxSharedBytes: 227 * 1024 } });
const caps = { ...dev.target.caps, mma: true, staging: true };
// bun's default per-test limit is 5 s; the lock-step emulation of a 128-thread workgroup takes seconds on a busy CPU
const SLOW = { timeout: 120_000 };

for (const c of stagedCases()) {
  test(`js (emulated): ${stagedName(c)}`, SLOW, async () => assert.deepEqual(await runStaged(dev, c, true), []));
}

for (const c of stagedBlockCases()) {
  const kc = stagedBlockCase(c, true);
  test(`js (emulated): ${kc.name}`, SLOW, async () => assertCase(kc, await runCase(dev, kc)));
}
for (const [c, splits] of stagedSplitKCases()) {
  test(`js (emulated): ${stagedBlockName(c)} over ${splits} k splits, then their combine`, SLOW, async () => assert.deepEqual(await runStagedSplitK(dev, c, splits, true), []));
}

test("js (emulated): a row alone and inside m=37 give identical bits on the staged matmul", SLOW, async () => {
  const c = { s: { n: 40, k: 96, batch: 37, w: "bf16" as const }, layout: { bm: 32, bn: 32, wm: 1, wn: 2, stages: 2 } };
  assert.deepEqual(await stagedInvariance(dev, c, [0, 17, 36], true), []);
});

for (const c of flashStagedCfgs()) {
  test(`js (emulated): ${flashStagedName(c)}`, SLOW, async () => assert.deepEqual(await runFlashStaged(dev, c, true), []));
}
{
  // pos + rows > cap faults before anything is read (f32 K/V: the halves' buffers have the f32 cache's size)
  const c = { rows: 16, heads: 2, kvHeads: 1, hd: 64, cap: 40, pos: 30 };
  const kc = { ...flashCase(c, true, true), make: () => flashStaged(caps, { ...c, pos: "u32" as const }) };
  test(`js (emulated): staged ${kc.name}`, SLOW, async () => assertCase(kc, await runCase(dev, kc)));
}

/** One warp: copies 64 words (an 8x8 matrix of u16 twice over... 4 matrices) to shared, then ldmatrix x4. */
function ldmKernel(trans: boolean, waitFirst: boolean) {
  const b = new KernelBuilder(`ldm_${trans}_${waitFirst}`, { workgroup: 32, grid: 1 });
  const src = b.buffer("src", "u32", "r");
  const out = b.buffer("out", "u32", "w");
  const sm = b.shared("s", "u32", 128);
  const lane = b.let(b.builtin("lane"), "u32", "lane");
  // lane l copies words 4l..4l+3 of src (row l: matrix l >> 3, row l & 7) to shared row l, at word 4l
  b.cpAsync(sm, lane.mul(4), src, lane.mul(4));
  b.cpCommit();
  if (waitFirst) b.cpWait(0);
  b.barrier();
  const d = b.ldmatrix(sm, lane.mul(4), 4, trans);
  d.forEach((v, i) => b.store(out, lane.mul(4).add(i), v));
  if (!waitFirst) b.cpWait(0);
  return b.build();
}

async function runLdm(trans: boolean, waitFirst: boolean): Promise<{ src: Uint32Array; out: Uint32Array }> {
  const src = new Uint32Array(128).map((_, i) => (((2 * i + 1) << 16) | (2 * i)) >>> 0); // halves 0..255 in order
  const r = await runCase(dev, { name: "ldm", make: () => ldmKernel(trans, waitFirst), inputs: () => [new Uint8Array(src.buffer.slice(0)), new Uint8Array(512)], expect: () => [] });
  assert.ok(r.outputs, r.fault?.message ?? "no outputs");
  return { src, out: new Uint32Array(r.outputs![1].slice().buffer) };
}

test("js: ldmatrix x4 gives lane l row l >> 2, word l & 3 of each matrix; .trans the transposed pairs", async () => {
  const half = (i: number, r: number, c: number) => i * 64 + r * 8 + c; // value of matrix i, row r, column c
  const plain = await runLdm(false, true), tr = await runLdm(true, true);
  for (let l = 0; l < 32; l++) {
    const r = l >> 2, c = l & 3;
    for (let i = 0; i < 4; i++) {
      assert.equal(plain.out[l * 4 + i], ((half(i, r, 2 * c + 1) << 16) | half(i, r, 2 * c)) >>> 0, `lane ${l} matrix ${i}`);
      assert.equal(tr.out[l * 4 + i], ((half(i, 2 * c + 1, r) << 16) | half(i, 2 * c, r)) >>> 0, `lane ${l} matrix ${i} trans`);
    }
  }
});

test("js: a cp.async copy is not in shared memory before the wait that retires its group", async () => {
  const early = await runLdm(false, false);
  assert.ok(early.out.every((w) => w === 0), "the copy landed before its wait");
});

test("staged matmul is refused where the target has no staging; wgsl refuses the statements", () => {
  assert.throws(() => stagedMatmul({ ...caps, staging: false }, { n: 16, k: 64, batch: 2, w: "bf16" }), /caps\.staging/);
  const k = stagedMatmul(caps, { n: 16, k: 64, batch: 2, w: "bf16", bm: 32, bn: 32, wm: 1, wn: 1 });
  assert.throws(() => renderWgsl(k, { subgroups: true, f16: false } as Parameters<typeof renderWgsl>[1]), /PTX/);
});

test("a staged kernel is rendered for a plain launch where the others use programmatic dependent launch", () => {
  const k = stagedMatmul(SM90_CAPS, { n: 256, k: 64, batch: 256, w: "bf16" });
  const m = renderPtx(k, { sm: 90, pdl: true });
  assert.equal(m.pdl, false);
  assert.doesNotMatch(m.ptx, /griddepcontrol/);
  const f = renderPtx(flashStaged(SM90_CAPS, { rows: 128, heads: 2, kvHeads: 1, hd: 64, cap: 200, pos: "u32" }), { sm: 90, pdl: true });
  assert.equal(f.pdl, false);
  // the control: a kernel without staging keeps both halves of PDL
  const plain = renderPtx(mmaMatmul(SM90_CAPS, { n: 256, k: 64, batch: 256, w: "bf16" }), { sm: 90, pdl: true });
  assert.equal(plain.pdl, true);
  assert.match(plain.ptx, /griddepcontrol\.wait[\s\S]*griddepcontrol\.launch_dependents/);
});

// ---- the lowering: prefill chunks on the staged kernel ------------------------------------------------

const ROWS = 20;
// head_dim 64: the staged flash attention's smallest (TINY_LLAMA's 32 keeps flash.ts)
const HD64 = { ...TINY_LLAMA, heads: 2, kvHeads: 1, headDim: 64 };
function step(rows: number) {
  const { store, map, dtypeOf } = randomLlama(HD64, 11, true);
  const { tracer, logits } = traceLlama(HD64, { rows, cap: 64 }, { dtypeOf });
  tracer.output("logits", logits);
  return { store, map, graph: tracer.build() };
}
const STAGED: CompileOptions = { stagedMinRows: 16 }; // a 20-row chunk stands in for the 128+ rows of a real one
const target = (staging: boolean) => ({ backend: "js" as const, device: "cpu", caps: { ...caps, staging }, memory: { totalBytes: 2 ** 30 }, watchdogBudget: 0 });

test("lowering runs prefill matmuls on the staged kernel only with caps.staging, from stagedMinRows, never for serving", SLOW, () => {
  const names = (staging: boolean, opts: CompileOptions, rows = ROWS) =>
    compileGraph(step(rows).graph, target(staging), opts).steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : []);
  const on = names(true, STAGED);
  // k = 128 projections take it; the down projection (k = 344, not a multiple of 32) keeps mma_matmul.ts
  assert.ok(on.some((n) => n.startsWith("mma_staged")), on.join(" "));
  assert.ok(on.some((n) => n.startsWith("flash_staged")) && on.some((n) => n.startsWith("flash_prep_kv")), on.join(" "));
  assert.ok(!on.some((n) => n.startsWith("flash_attention")), "flash.ts beside the staged flash");
  assert.ok(names(true, { ...STAGED, flashStaged: false }).some((n) => n.startsWith("flash_attention")), "flashStaged: false keeps flash.ts");
  assert.ok(on.some((n) => n.startsWith("mma_matmul") && n.includes("_k344_")), "the k=344 matmul left the MMA path");
  assert.ok(!names(false, STAGED).some((n) => n.startsWith("mma_staged")), "staged without caps.staging");
  // x rounded once with caps.wgmma: warpgroup tiles (k = 128: K slices of 64)
  const wg = compileGraph(step(ROWS).graph, { ...target(true), caps: { ...caps, staging: true, wgmma: true } }, STAGED).steps
    .flatMap((s) => s.k === "kernel" && s.kernel.name.startsWith("mma_staged") ? [s.kernel.name] : []);
  assert.ok(wg.length > 0 && wg.every((n) => /_wg\dx\d/.test(n)), wg.join(" "));
  assert.ok(on.every((n) => !/_wg\dx\d/.test(n)), "warpgroup tiles without caps.wgmma");
  // x's MMA words are made once for q, k and v and once for gate and up: 4 preps for 7 matmuls a layer
  const count = (re: RegExp) => on.filter((n) => re.test(n)).length;
  assert.equal(count(/^mma_prep/), 4 * HD64.layers + 1, on.join(" ")); // + the logits' x
  assert.equal(count(/^mma_(staged|matmul)/), 7 * HD64.layers + 1, on.join(" ")); // + the logits
  assert.ok(!names(true, {}).some((n) => /^(mma|flash)_staged/.test(n)), "staged below STAGED_MIN_ROWS");
  assert.ok(!names(true, { ...STAGED, staged: false }).some((n) => n.startsWith("mma_staged")), "staged with staged: false");
  assert.ok(!names(true, { ...STAGED, mma: "all" }).some((n) => n.startsWith("mma_staged")), "staged in a serving entry");
});

test("a 20-row Llama prefill on the staged kernels (matmul and flash attention) equals the FMA path within the MMA's precision, x split or rounded once, warp or warpgroup MMA", { timeout: 120_000 }, async () => {
  const m = step(ROWS);
  const b = await prefillLogits(m, ROWS, HD64.vocab, { ...caps, staging: false, mma: false });
  // the same bounds as mma_model.test.ts's (split MMA: ~2^-16 relative per product; x rounded once: 2^-8)
  // and x rounded once on warpgroup MMA (caps.wgmma: the default layouts' wg tiles)
  for (const [o, bound, wgmma] of [[{ mmaSplit: true }, 1e-4, false], [{}, 2 ** 8 * 1e-4, false], [{}, 2 ** 8 * 1e-4, true]] as const) {
    const a = await prefillLogits(m, ROWS, HD64.vocab, { ...caps, staging: true, mma: true, wgmma }, { ...STAGED, ...o });
    const { worst, scale } = logitGap(a, b);
    assert.ok(worst <= bound * scale, `${JSON.stringify(o)} wgmma ${wgmma}: max |staged - fma| = ${worst} of logits up to ${scale}`);
    assert.ok(worst > 0, "the staged path ran the same kernels as the FMA path");
  }
});

// A Q4_K_M Llama (q4_k, and q6_k where llama-quantize puts it) whose rows are whole blocks: its prefill matmuls
// on the staged kernel over the blocks (CompileOptions.mmaBlocks) from MMA_MIN_ROWS rows
const QCFG = { ...TINY_LLAMA, dim: 256, hidden: 512, heads: 4, kvHeads: 2, headDim: 64 };
function qstep(rows: number) {
  const syn = syntheticLlama(QCFG, { dtype: "q4_k_m", seed: 5, std: 0.06 });
  const { tracer, logits } = traceLlama(QCFG, { rows, cap: 64 }, { dtypeOf: syn.dtypeOf });
  tracer.output("logits", logits);
  return { store: syn.store, map: syn.map, graph: tracer.build() };
}

test("lowering runs a quantized prefill chunk's block matmuls on the staged kernel from 16 rows with caps.staging, every serving entry's in one layout with mmaBlocks \"all\", not when told otherwise", SLOW, () => {
  const names = (rows: number, c: typeof caps, opts: CompileOptions = {}) =>
    compileGraph(qstep(rows).graph, { ...target(true), caps: c }, opts).steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : []);
  const on = names(16, { ...caps, staging: true, wgmma: true });
  const blocks = on.filter((n) => /^mma_staged_q\d_k_/.test(n));
  // per layer q, k, v, o, gate, up, down; and the head
  assert.equal(blocks.length, 7 * QCFG.layers + 1, on.join(" "));
  assert.ok(blocks.some((n) => n.startsWith("mma_staged_q6_k")) && blocks.every((n) => /_wg\dx\d/.test(n) && n.endsWith("_nosplit") || n.includes("_nosplit_")), blocks.join(" "));
  assert.ok(!on.some((n) => n.startsWith("tiled_matmul") || n.startsWith("matmul_")), on.join(" "));
  const none = (ns: string[], why: string) => assert.ok(!ns.some((n) => /^mma_staged_q/.test(n)), `${why}: ${ns.join(" ")}`);
  none(names(15, { ...caps, staging: true }), "below 16 rows");
  none(names(16, { ...caps, staging: false }), "without caps.staging");
  none(names(16, { ...caps, staging: true }, { mmaBlocks: false }), "mmaBlocks: false");
  // a chunk that asks for f32-level operands keeps the FMA kernel (tests/ops/quant_cases.ts's matmuls do)
  none(names(16, { ...caps, staging: true }, { mmaSplit: true }), "mmaSplit: true");
  // every serving entry, one row included (llm/serve/batch.ts servingCompileWith's options): the register-operand
  // MMA kernel over the blocks by default, the FMA kernels with mmaBlocks false, the staged kernel in one layout
  // with mmaBlocks "all"
  const serve: CompileOptions = { mma: "all", gemv: false, tiled: false };
  for (const rows of [1, 32]) {
    const reg = names(rows, caps, serve);
    none(reg, "a serving entry without mmaBlocks \"all\"");
    assert.equal(reg.filter((n) => /^mma_matmul_q\d_k_/.test(n)).length, 7 * QCFG.layers + 1, reg.join(" "));
    const fma = names(rows, caps, { ...serve, mmaBlocks: false });
    assert.ok(!fma.some((n) => n.startsWith("mma_")) && fma.some((n) => n.startsWith("matmul_")), fma.join(" "));
  }
  for (const rows of [1, 32]) {
    const serving = names(rows, { ...caps, staging: true, wgmma: true }, { ...serve, mmaBlocks: "all" }).filter((n) => /^mma_staged_q/.test(n));
    assert.ok(serving.length === 7 * QCFG.layers + 1 && serving.every((n) => /_64x64x64_s6_wg1x1_p1(_res)?$/.test(n)), serving.join(" "));
  }
  // rows of k = 1024 or more split over k in serving (servingSplits: of n and k alone), the same at every entry size
  const wide = { ...QCFG, dim: 1024, hidden: 2048, heads: 16, kvHeads: 4 };
  const wideNames = (rows: number) => {
    const syn = syntheticLlama(wide, { dtype: "q4_k_m", seed: 5, std: 0.06 });
    const { tracer, logits } = traceLlama(wide, { rows, cap: 64 }, { dtypeOf: syn.dtypeOf });
    tracer.output("logits", logits);
    return compileGraph(tracer.build(), { ...target(true), caps: { ...caps, staging: true, wgmma: true } }, { ...serve, mmaBlocks: "all" }).steps
      .flatMap((s) => s.k === "kernel" && /^mma_staged_/.test(s.kernel.name) ? [s.kernel.name.replace(/_b\d+_/, "_b*_")] : []);
  };
  const one = wideNames(1);
  assert.ok(one.some((n) => n.includes("_sk2")) && one.some((n) => n.includes("_sk4")) && one.some((n) => n.startsWith("mma_staged_combine")), one.join(" "));
  assert.deepEqual(wideNames(32), one, "the serving entries of 1 and 32 rows take different kernels");
  assert.deepEqual([[4096, 4096], [14336, 4096], [4096, 14336], [128256, 4096], [896, 896]].map(([n, k]) => servingSplits(n, k)), [8, 2, 8, 1, 1]);
});

test("a 20-row Q4_K_M Llama prefill on the staged block kernels equals the FMA path within bf16's precision, warp and warpgroup MMA", { timeout: 120_000 }, async () => {
  const m = qstep(ROWS);
  const b = await prefillLogits(m, ROWS, QCFG.vocab, { ...caps, staging: false, mma: false });
  for (const wgmma of [false, true]) {
    const a = await prefillLogits(m, ROWS, QCFG.vocab, { ...caps, staging: true, mma: true, wgmma });
    const { worst, scale } = logitGap(a, b);
    // x and the weights each rounded once to bf16 (8 significant bits): twice the bf16 bound above
    assert.ok(worst <= 2 * 2 ** 8 * 1e-4 * scale, `wgmma ${wgmma}: max |staged - fma| = ${worst} of logits up to ${scale}`);
    assert.ok(worst > 0, "the staged path ran the same kernels as the FMA path");
  }
});

test("a 5-row serving step over Q4_K_M blocks, on the MMA kernel (default) and staged split over k (mmaBlocks \"all\"), equals the FMA path within bf16's precision", { timeout: 300_000 }, async () => {
  const wide = { ...QCFG, dim: 1024, hidden: 1024, heads: 16, kvHeads: 4, layers: 1 };
  const syn = syntheticLlama(wide, { dtype: "q4_k_m", seed: 5, std: 0.03 });
  const { tracer, logits } = traceLlama(wide, { rows: 5, cap: 64 }, { dtypeOf: syn.dtypeOf });
  tracer.output("logits", logits);
  const m = { store: syn.store, map: syn.map, graph: tracer.build() };
  const serve: CompileOptions = { mma: "all", gemv: false, tiled: false };
  const b = await prefillLogits(m, 5, wide.vocab, { ...caps, staging: true, mma: true, wgmma: true }, { ...serve, mmaBlocks: false });
  for (const mmaBlocks of [true, "all"] as const) {
    const a = await prefillLogits(m, 5, wide.vocab, { ...caps, staging: true, mma: true, wgmma: true }, { ...serve, mmaBlocks });
    const { worst, scale } = logitGap(a, b);
    // x as hi + lo parts, the weights rounded once to bf16
    assert.ok(worst <= 2 ** 8 * 1e-4 * scale && worst > 0, `mmaBlocks ${mmaBlocks}: max |mma - fma| = ${worst} of logits up to ${scale}`);
  }
});

/** Llama 1B / 8B projections, one per default layout (128x256, 128x128, 64-row blocks; x split and not), as the lowering renders them. */
export const PREFILL_PROJECTIONS: [number, number, number][] = [[2048, 14336, 4096], [512, 4096, 4096], [512, 2048, 2048]];

const ptxas = findPtxas();
test("staged matmul (warp and warpgroup MMA) and flash attention PTX assembles for sm_90(a) without spills", { skip: ptxas ? false : "no ptxas installed", timeout: 120_000 }, () => {
  const kernels = [
    ...stagedCases().map((c) => stagedMatmul(SM90_CAPS, { ...c.s, ...c.layout })),
    ...PREFILL_PROJECTIONS.map(([m, n, k]) => stagedMatmul(SM90_CAPS, { ...stagedLayout(m, n, k), n, k, batch: m, w: "bf16", residual: true })),
    ...PREFILL_PROJECTIONS.map(([m, n, k]) => stagedMatmul(SM90_CAPS, { ...stagedLayout(m, n, k, false), n, k, batch: m, w: "bf16", split: false })),
    ...PREFILL_PROJECTIONS.map(([m, n, k]) => stagedMatmul(SM90_CAPS, { ...stagedLayout(m, n, k, false, true), n, k, batch: m, w: "bf16", split: false, residual: true })),
    // GGUF blocks as the lowering stages them (warpgroup and warp tiles), and the emulated block cases
    ...(["q4_k", "q6_k", "q8_0", "q5_k"] as const).flatMap((t) => PREFILL_PROJECTIONS.flatMap(([m, n, k]) => [true, false].map((wgmma) =>
      stagedMatmul(SM90_CAPS, { ...stagedBlockLayout(m, n, k, wgmma), n, k, batch: m, w: "bf16", split: false, blocks: t, residual: true })))),
    ...stagedBlockCases().map((c) => stagedMatmul(SM90_CAPS, { n: c.n, k: c.k, batch: c.batch, w: "bf16", split: !!c.split, bias: c.bias, residual: c.residual, blocks: c.t, ...c.layout })),
    // the serving entries' layout with mmaBlocks "all": x split, k split 8 ways (kernels/lower/matmul.ts)
    ...(["q4_k", "q6_k", "q8_0"] as const).map((t) => stagedMatmul(SM90_CAPS, { bm: 64, bn: 64, bk: 64, stages: 6, wm: 1, wn: 1, wg: true, wgPending: 1, n: 4096, k: 4096, batch: 32, w: "bf16", split: true, blocks: t, splitK: 8 })),
    // the 1B's and 8B's attention at a 512-row chunk, and the split-off variants
    ...[{ hd: 64 }, { hd: 128 }, { hd: 128, split: false }, { hd: 128, warps: 8 }].map((o) =>
      flashStaged(SM90_CAPS, { rows: 512, heads: 32, kvHeads: 8, cap: 2064, pos: "u32", ...o })),
  ];
  for (const k of kernels) {
    const ptx = renderPtx(k, { sm: 90 }).ptx;
    assert.match(ptx, /cp\.async\.cg\.shared\.global/);
    if (k.uses.wgmma) assert.match(ptx, /wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.(bf16|f16)/);
    else assert.match(ptx, /ldmatrix\.sync\.aligned\.m8n8\.x4(\.trans)?\.shared\.b16/);
    const r = assemble(ptxas!, ptx, k.uses.wgmma ? "sm_90a" : "sm_90", true);
    assert.ok(r.ok, `${k.name}: ${r.log}`);
    assert.doesNotMatch(r.log, /[1-9]\d* bytes spill stores/, `${k.name} spills: ${r.log}`);
    // ptxas serializes warpgroup MMAs whose accumulators the code touches while they are in flight
    assert.doesNotMatch(r.log, /serialized/, `${k.name}: ${r.log}`);
  }
});

test("the MMA x preparation PTX assembles for sm_90, plain and computing the SiLU product (x split and not)", { skip: ptxas ? false : "no ptxas installed", timeout: 60_000 }, () => {
  const ew = { inputs: [{ type: "f32" as const }, { type: "f32" as const }], expr: { op: "mul" as const, args: [{ op: "silu" as const, args: [{ in: 0 }] }, { in: 1 }] } };
  for (const split of [true, false]) {
    for (const k of [mmaPrepX(SM90_CAPS, { m: 2048, k: 14336, ab: "bf16", split }), mmaPrepX(SM90_CAPS, { m: 2048, k: 14336, ab: "bf16", split, ew })]) {
      const r = assemble(ptxas!, renderPtx(k, { sm: 90 }).ptx, "sm_90", true);
      assert.ok(r.ok, `${k.name}: ${r.log}`);
    }
  }
});
