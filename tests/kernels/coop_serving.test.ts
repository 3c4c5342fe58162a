// The serving entries' cooperative-matrix matmul (kernels/lib/coop_serving.ts) against the float64 reference of its
// operands: on the JS device with the matrices emulated (subgroups of 32, 8 and 64 in lockstep) and on a Vulkan
// device that offers bf16 cooperative matrices (skipped, saying why, where none does: lavapipe has none). x arrives
// as mmaPrepX's words, split (hi + lo) or not, the rows past the batch up to a whole tile holding NaN (they must
// never reach y); every block type; K split over 1 to 8 subgroups; rows and columns off the tile. And its batch
// invariance: a row has the same bits alone, in 17, 37 and 70 rows, at every tile of rows and columns.
//
// Tolerance: the words hold x exactly (the reference reads them), the products are exact, the sums f32 in the
// device's order: |got - want| <= k·2^-22 · Σ|x w|, plus 2^-8 where block weights are rounded to bf16 as staged.
import { test } from "node:test";
import assert from "node:assert/strict";
import { coopServing, coopServingLayout, type CoopServingLayout, type CoopServingShape, xWordsBytes } from "../../kernels/lib/coop_serving.ts";
import { mmaPrepX } from "../../kernels/lib/mma_matmul.ts";
import { renderSpirv } from "../../kernels/render/spirv.ts";
import { JsDevice } from "../../backends/js/device.ts";
import type { Caps } from "../../kernels/target.ts";
import { assertCase, runCase, runKernel } from "./harness.ts";
import type { KernelCase } from "./cases.ts";
import { bytes, floats, matmulWant, Rng } from "./data.ts";
import { bf16ToF32, f32ToBf16 } from "../../graph/half.ts";
import type { BlockDType } from "../../graph/dtype.ts";
import { quantizeBlocks } from "../../llm/formats/ggml-quants.ts";
import { caseRest, caseWeights, coopDevices, emulatedCoop, jsTarget, openVulkanWith } from "./coop_cases.ts";
import { logitGap, prefillLogits } from "./mma_cases.ts";
import { TINY_LLAMA } from "../ptx/model.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";

type Shape = Omit<CoopServingShape, "w" | "name"> & { w?: BlockDType };

/** Where row r's hi words start (in rows), and how many rows further its lo words are. */
const hiRow = (r: number, eights: boolean) => (eights ? (r >> 3) * 16 + (r & 7) : r);
const loRows = (m: number, eights: boolean) => (eights ? 8 : m);

/**
 * mmaPrepX's words of x [m, k] (hi, then lo with split; with eights each 8 rows' hi, then their lo), NaN pairs in
 * the rest (up to a whole 16-row tile).
 */
export function servingWords(x: Float32Array, m: number, k: number, split: boolean, eights = false): Uint32Array {
  const words = new Uint32Array(xWordsBytes(m, k, split, eights) / 4).fill(0x7fc07fc0);
  for (let i = 0; i < (m * k) / 2; i++) {
    const r = Math.floor((2 * i) / k), at = hiRow(r, eights) * (k / 2) + (i - r * (k / 2));
    const hi = [0, 1].map((h) => f32ToBf16(x[2 * i + h]));
    words[at] = (hi[0] | (hi[1] << 16)) >>> 0;
    if (split) {
      const lo = [0, 1].map((h) => f32ToBf16(x[2 * i + h] - bf16ToF32(hi[h])));
      words[at + loRows(m, eights) * (k / 2)] = (lo[0] | (lo[1] << 16)) >>> 0;
    }
  }
  return words;
}

/** The x the words hold: hi (+ lo) per value, exactly. */
function wordsX(words: Uint32Array, m: number, k: number, split: boolean, eights = false): Float64Array {
  const half = (i: number) => bf16ToF32(words[i >> 1] >>> (16 * (i & 1)) & 0xffff);
  return Float64Array.from({ length: m * k }, (_, i) => {
    const r = Math.floor(i / k), at = hiRow(r, eights) * k + (i - r * k);
    return half(at) + (split ? half(at + loRows(m, eights) * k) : 0);
  });
}

function servingCase(s: Shape): KernelCase {
  const { n, k, batch } = s, l = s.layout ?? {};
  const name = `coop serving ${s.w ?? "bf16"} n=${n} k=${k} m=${batch} ks${l.ks ?? "-"} c${l.cols ?? "-"} m${l.mt ?? "-"}${l.stages ? ` s${l.stages}` : ""}${l.ahead !== undefined ? ` a${l.ahead}` : ""}${s.split ? l.eights ? " eights" : " split" : ""}${s.bias ? " bias" : ""}${s.residual ? " residual" : ""}`;
  let w: Float64Array;
  let cached: Uint8Array[] | undefined;
  const inputs = () => {
    if (!cached) {
      const rng = new Rng(name);
      const f = caseWeights(rng, s.w, n, k);
      w = f.values;
      cached = [bytes(servingWords(rng.f32(batch * k), batch, k, s.split, s.split && !!l.eights)), f.bytes, ...caseRest(rng, s)];
    }
    return cached.map((b) => b.slice());
  };
  return {
    name,
    make: (caps) => coopServing(caps, { ...s, w: s.w ?? "bf16" }),
    inputs,
    expect(ins) {
      const x = wordsX(new Uint32Array(ins[0].buffer, ins[0].byteOffset, ins[0].byteLength / 4), batch, k, s.split, s.split && !!l.eights);
      const { want, mag } = matmulWant(x, w, s, ins);
      return [{ binding: ins.length - 1, type: "f32", want, mag, tol: { abs: 1e-30, rel: (s.w ? 2 ** -8 : 0) + k * 2 ** -22 } }];
    },
  };
}

const SHAPES: Shape[] = [
  { n: 40, k: 128, batch: 1, split: true, layout: { ks: 2, cols: 16 } },
  { n: 40, k: 256, batch: 17, split: true, bias: true, residual: true, layout: { ks: 4, cols: 32 } },
  { n: 64, k: 512, batch: 70, split: true, residual: true, layout: { ks: 8, cols: 32 } },
  { n: 48, k: 96, batch: 5, split: false, layout: { ks: 3, cols: 16 } }, // 32-value slices: k 96
  { n: 33, k: 192, batch: 37, split: false, bias: true, layout: { ks: 1, cols: 16, mt: 2 } },
  { w: "q8_0", n: 40, k: 128, batch: 3, split: true, residual: true, layout: { ks: 4, cols: 16 } },
  { w: "q4_0", n: 32, k: 64, batch: 20, split: true, layout: { ks: 2, cols: 32 } },
  { w: "q4_1", n: 24, k: 64, batch: 1, split: true, layout: { ks: 1, cols: 16 } },
  { w: "q5_0", n: 16, k: 96, batch: 2, split: true, layout: { ks: 3, cols: 16 } },
  { w: "q5_1", n: 16, k: 64, batch: 9, split: false, layout: { ks: 2, cols: 16 } },
  { w: "q4_k", n: 40, k: 512, batch: 1, split: true, bias: true, layout: { ks: 8, cols: 16 } },
  { w: "q4_k", n: 64, k: 1024, batch: 33, split: true, residual: true, layout: { ks: 4, cols: 32 } },
  { w: "q5_k", n: 32, k: 256, batch: 17, split: true, layout: { ks: 2, cols: 16 } },
  { w: "q6_k", n: 40, k: 512, batch: 1, split: true, layout: { ks: 4, cols: 16 } },
  { w: "q6_k", n: 32, k: 256, batch: 18, split: true, residual: true, layout: { ks: 2, cols: 32 } },
  // two stages of W's slices (one barrier a trip), an odd number of trips too
  { n: 40, k: 384, batch: 3, split: true, bias: true, layout: { ks: 2, cols: 16, stages: 2 } },
  { w: "q4_k", n: 48, k: 768, batch: 20, split: true, residual: true, layout: { ks: 4, cols: 16, stages: 2 } },
  // block weights two trips ahead (the default from two row tiles where a row takes an even number of trips), with
  // two stages; one ahead; decoded on arrival (ahead 0, the default for one row tile)
  { w: "q4_k", n: 64, k: 1024, batch: 5, split: true, bias: true, layout: { ks: 2, cols: 16, stages: 2, ahead: 2 } },
  { w: "q8_0", n: 32, k: 512, batch: 2, split: true, layout: { ks: 2, cols: 32, ahead: 2 } },
  { w: "q6_k", n: 32, k: 1024, batch: 1, split: true, residual: true, layout: { ks: 2, cols: 16, ahead: 1 } },
  { w: "q5_0", n: 48, k: 512, batch: 19, split: true, layout: { ks: 4, cols: 16, ahead: 0 } },
  { w: "q4_k", n: 32, k: 1024, batch: 4, split: false, layout: { ks: 2, cols: 32, stages: 2, ahead: 0 } },
  // eights: 8 rows' hi and lo parts in one matrix; one row, a tile's 8, past it, several tiles a workgroup
  { n: 40, k: 128, batch: 1, split: true, bias: true, layout: { ks: 2, cols: 16, eights: true } },
  { w: "q4_k", n: 40, k: 512, batch: 8, split: true, residual: true, layout: { ks: 4, cols: 16, eights: true } },
  { w: "q6_k", n: 40, k: 512, batch: 13, split: true, layout: { ks: 2, cols: 32, eights: true } },
  { w: "q8_0", n: 64, k: 512, batch: 37, split: true, bias: true, residual: true, layout: { ks: 2, cols: 16, ahead: 2, eights: true } },
  { n: 64, k: 256, batch: 70, split: true, layout: { ks: 4, cols: 32, stages: 2, eights: true } },
];

const devices = coopDevices([["js sg32", emulatedCoop(32)], ["js sg8", emulatedCoop(8)], ["js sg64", emulatedCoop(64)]], openVulkanWith("bf16"));

for (const [label, open, caps, skip] of devices) {
  // sg64: a few shapes (64-lane workgroups take the epilogue in partial rounds)
  const shapes = label === "js sg64" ? SHAPES.filter((_, i) => i % 4 === 1) : SHAPES;
  for (const s of shapes) {
    const kc = servingCase(s);
    test(`${label}: ${kc.name}`, { skip, timeout: 120_000 }, async () => {
      assert.ok(coopServingLayout(caps!, s.n, s.k, s.w ?? "bf16", s.batch, s.layout), "the layout fits");
      const dev = open();
      assertCase({ ...kc, make: () => kc.make(caps!) }, await runCase(dev, { ...kc, make: () => kc.make(caps!) }));
    });
  }
  test(`${label}: a row has the same bits alone, in 17, 37 and 70 rows, at every tile of rows and columns`, { skip, timeout: 180_000 }, async () => {
    const dev = open(), n = 48, k = 256, rng = new Rng("coop serving invariance");
    const x = rng.f32(70 * k);
    for (const w of ["bf16", "q4_k"] as const) {
      const wb = w === "bf16" ? floats(rng, "bf16", n * k).bytes : bytes(quantizeBlocks(w, rng.f32(n * k, -1, 1)));
      const run = async (rows: number, layout: Partial<CoopServingLayout>) => {
        const kernel = coopServing(caps!, { n, k, batch: rows, w, split: true, layout: { ks: 2, ...layout } });
        const words = servingWords(x.subarray(0, rows * k), rows, k, true, !!layout.eights);
        const out = await runKernel(dev, kernel, [bytes(words), wb.slice(), bytes(new Float32Array(rows * n))]);
        return new Uint32Array(out[2].buffer, out[2].byteOffset, rows * n);
      };
      // and whenever W's loads are issued (ahead: the default follows the rows); eights sums otherwise, so it has
      // a base of its own
      const aheads = [{ cols: 16, ahead: 0 as const }, { cols: 16, ahead: 1 as const }, { cols: 32, ahead: 2 as const }];
      const twoMatrices = [{ cols: 16 }, { cols: 32 }, { cols: 16, mt: 1 }, { cols: 32, mt: 2 }, { cols: 16, stages: 2 as const }, ...aheads];
      const oneMatrix = [{ cols: 32 }, { cols: 16, mt: 1 }, { cols: 16, mt: 8 }, { cols: 32, mt: 3 }, { cols: 16, ahead: 2 as const }].map((l) => ({ ...l, eights: true }));
      for (const [layouts, base] of [[twoMatrices, await run(70, { cols: 16 })], [oneMatrix, await run(70, { cols: 16, eights: true })]] as const) {
        for (const layout of layouts) {
          for (const rows of [1, 17, 37, 70]) {
            const got = await run(rows, layout);
            assert.deepEqual(got, base.subarray(0, rows * n), `${w}: rows ${rows}, layout ${JSON.stringify(layout)}`);
          }
        }
      }
    }
  });
}

const VK: Caps = { ...emulatedCoop(32), f16: true };

test("coopServingLayout: K parts that divide the slices and fit 48 KiB, 16 or 32 columns by n, row tiles by the batch", () => {
  // 8B shapes: k 4096 in 64 slices of 64 (q4_k and bf16), k 14336 in 224; q6_k's 128-value slices
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 1), { ks: 8, cols: 16, mt: 1 });
  // block weights' loads two trips ahead from two row tiles (8 trips a row here), where asked, and never for bf16
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 17), { ks: 8, cols: 16, mt: 2, ahead: 2 });
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 1, { ahead: 1 }), { ks: 8, cols: 16, mt: 1, ahead: 1 });
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 32, { ahead: 0 }), { ks: 8, cols: 16, mt: 2 });
  assert.deepEqual(coopServingLayout(VK, 48, 768, "q4_k", 32, { ks: 4 }), { ks: 4, cols: 16, mt: 2 }, "3 trips a row: not by pairs");
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "bf16", 32, { ahead: 2 }), { ks: 8, cols: 16, mt: 2 });
  assert.deepEqual(coopServingLayout(VK, 14336, 4096, "bf16", 32), { ks: 8, cols: 32, mt: 2 });
  assert.deepEqual(coopServingLayout(VK, 4096, 14336, "q6_k", 160), { ks: 8, cols: 16, mt: 4, ahead: 2 });
  assert.deepEqual(coopServingLayout(VK, 14336, 4096, "q6_k", 1), { ks: 4, cols: 32, mt: 1 }, "8 parts of 32 columns past 48 KiB");
  // eights (split x, asked for): 8-row tiles, as many as keep 8 accumulators (8 of 16 columns, 4 of 32); ahead past
  // 16 rows; never without split, and not unless asked
  const E = { eights: true };
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 1, E, true), { ks: 8, cols: 16, mt: 1, eights: true });
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 16, E, true), { ks: 8, cols: 16, mt: 2, eights: true });
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 17, E, true), { ks: 8, cols: 16, mt: 3, ahead: 2, eights: true });
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 160, E, true), { ks: 8, cols: 16, mt: 8, ahead: 2, eights: true });
  assert.deepEqual(coopServingLayout(VK, 14336, 4096, "bf16", 160, E, true), { ks: 8, cols: 32, mt: 4, eights: true });
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 17, E, false), { ks: 8, cols: 16, mt: 2, ahead: 2 });
  assert.deepEqual(coopServingLayout(VK, 4096, 4096, "q4_k", 17, {}, true), { ks: 8, cols: 16, mt: 2, ahead: 2 });
  // qwen2.5-0.5b's k 896: 14 slices of 64, so 2 parts (7 trips)
  assert.deepEqual(coopServingLayout(VK, 896, 896, "bf16", 1), { ks: 2, cols: 16, mt: 1 });
  assert.equal(coopServingLayout(VK, 64, 128, "bf16", 1, { ks: 3 }), undefined, "3 parts of 2 slices");
  assert.equal(coopServingLayout({ ...VK, maxSharedBytes: 16 * 1024 }, 64, 4096, "q6_k", 1, { ks: 8 }), undefined, "8 parts of q6_k slices past 16 KiB");
});

test("mmaPrepX's eights words are the layout the kernel reads: each 8 rows' hi words, then their lo words", async () => {
  const js = new JsDevice({ debug: true });
  for (const [m, k] of [[1, 64], [13, 96], [16, 32], [21, 256]]) {
    const x = new Rng(`eights ${m}`).f32(m * k, -3, 3);
    const want = servingWords(x, m, k, true, true);
    const prep = mmaPrepX(VK, { m, k, ab: "bf16", split: true, eights: true });
    const out = await runKernel(js, prep, [bytes(x), bytes(new Uint32Array(want.length).fill(0x7fc07fc0))]);
    assert.deepEqual(new Uint32Array(out[1].buffer, out[1].byteOffset, want.length), want, `m ${m} k ${k}`);
  }
});

test("the serving kernel's SPIR-V loads x as matrices from its buffer and W from shared memory", () => {
  const count = (ahead: 0 | 1 | 2, eights = false) => {
    const k = coopServing(VK, { n: 64, k: 256, batch: 5, w: "q4_k", split: true, layout: { ks: 2, ahead, eights } });
    const words = renderSpirv(k, VK).words;
    const ops = new Map<number, number>();
    for (let i = 5; i < words.length;) {
      const op = words[i] & 0xffff, len = words[i] >>> 16;
      ops.set(op, (ops.get(op) ?? 0) + 1);
      i += len || 1;
    }
    return ops;
  };
  const LOAD = 4457, MAD = 4459; // OpCooperativeMatrixLoadKHR, OpCooperativeMatrixMulAddKHR
  // per 16 values of k: x hi and lo of one row tile, one W column tile (16 columns); two mads; two trips ahead,
  // the loop takes trips by pairs (the register sets alternate); with eights the 5 rows' hi and lo are one matrix
  for (const ahead of [0, 1, 2] as const) {
    const ops = count(ahead), by = Math.max(1, ahead);
    assert.equal(ops.get(LOAD), (64 / 16) * 3 * by, `cmloads, ${ahead} ahead`);
    assert.equal(ops.get(MAD), (64 / 16) * 2 * by, `cmmads, ${ahead} ahead`);
    const one = count(ahead, true);
    assert.equal(one.get(LOAD), (64 / 16) * 2 * by, `cmloads, ${ahead} ahead, eights`);
    assert.equal(one.get(MAD), (64 / 16) * by, `cmmads, ${ahead} ahead, eights`);
  }
  assert.throws(() => coopServing(VK, { n: 64, k: 96, batch: 1, w: "q4_k", split: true }), /no layout fits/);
});

// A Q4_K_M Llama whose matmuls all fit the kernel (k = 256 and 512: whole q4_k/q6_k blocks).
const QCFG = { ...TINY_LLAMA, dim: 256, hidden: 512, heads: 4, kvHeads: 2, headDim: 64 };
function qstep(rows: number, cfg = QCFG, dtype: "q4_k_m" | "bf16" = "q4_k_m") {
  const syn = syntheticLlama(cfg, { dtype, seed: 5, std: 0.06 });
  const { tracer, logits } = traceLlama(cfg, { rows, cap: 64 }, { dtypeOf: syn.dtypeOf });
  tracer.output("logits", logits);
  return { store: syn.store, map: syn.map, graph: tracer.build() };
}
// llm/serve/batch.ts servingCompileWith's options
const SERVE: CompileOptions = { mma: "all", gemv: false, tiled: false };

test("lowering: every serving entry's matmuls, one row included, run on the serving kernel where caps.coop, in one layout whatever the rows", () => {
  const names = (rows: number, caps: Caps, opts: CompileOptions, dtype: "q4_k_m" | "bf16" = "q4_k_m") =>
    compileGraph(qstep(rows, QCFG, dtype).graph, jsTarget(caps), opts).steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : []);
  const layouts = (ns: string[]) => ns.filter((n) => n.startsWith("coop_serving")).map((n) => n.replace(/_b\d+_/, "_b*_").replace(/c(16|32)m\d(a\d)?/, "c$1m*"));
  for (const dtype of ["q4_k_m", "bf16"] as const) {
    const one = names(1, VK, SERVE, dtype);
    // q, k, v, o, gate, up, down per layer, and the head
    assert.equal(layouts(one).length, 7 * QCFG.layers + 1, one.join(" "));
    assert.ok(!one.some((n) => n.startsWith("matmul_") || n.startsWith("coop_matmul")), one.join(" "));
    assert.ok(one.some((n) => n.startsWith("mma_prep_")) && !one.some((n) => n.includes("_nosplit")), `x prepared as hi + lo: ${one.join(" ")}`);
    for (const rows of [5, 32, 60]) assert.deepEqual(layouts(names(rows, VK, SERVE, dtype)), layouts(one), `${dtype}: ${rows} rows`);
    const fma = (ns: string[], why: string) => assert.ok(!ns.some((n) => n.startsWith("coop_")) && ns.some((n) => n.startsWith("matmul_")), `${why}: ${ns.join(" ")}`);
    fma(names(1, VK, { ...SERVE, coopServing: false }, dtype), "coopServing false");
    fma(names(1, VK, { ...SERVE, coop: false }, dtype), "coop false");
    fma(names(1, { ...VK, coop: undefined }, SERVE, dtype), "no caps.coop");
    // eights asked for: x prepared by 8-row groups, every serving kernel taking it so
    const e = names(5, VK, { ...SERVE, coopServing: { eights: true } }, dtype);
    assert.ok(e.some((n) => n.startsWith("mma_prep_") && n.includes("_eights")) && e.filter((n) => n.startsWith("coop_serving")).every((n) => n.includes("_eights")), e.join(" "));
  }
  // prefill chunks keep coop_matmul.ts from 16 rows
  assert.ok(names(32, VK, {}).some((n) => n.startsWith("coop_matmul")) && !names(32, VK, {}).some((n) => n.startsWith("coop_serving")));
});

test("a 5-row serving step over Q4_K_M blocks and over bf16 on the serving kernel equals the FMA path within bf16's precision", { timeout: 300_000 }, async () => {
  for (const [dtype, coopServing] of [["q4_k_m", true], ["bf16", true], ["q4_k_m", { eights: true }]] as const) {
    const m = qstep(5, QCFG, dtype);
    const b = await prefillLogits(m, 5, QCFG.vocab, VK, { ...SERVE, coopServing: false });
    const a = await prefillLogits(m, 5, QCFG.vocab, VK, { ...SERVE, coopServing });
    const { worst, scale } = logitGap(a, b);
    // x as hi + lo parts (about 16 bits); block weights rounded once to bf16 (bf16 weights are exact)
    assert.ok(worst <= 2 ** 8 * 1e-4 * scale && worst > 0, `${dtype} ${JSON.stringify(coopServing)}: max |coop - fma| = ${worst} of logits up to ${scale}`);
  }
});
