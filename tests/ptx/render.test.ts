// The PTX renderer without a GPU: every IR feature, every kernel-library conformance kernel and every kernel
// of the Llama decode/prefill plans at the bench shapes render and assemble with `ptxas -arch=sm_90` (and the
// feature kernels for sm_80 too). Skips when ptxas is absent.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type Kernel, KernelBuilder, KernelError } from "../../kernels/ir.ts";
import { entryName, type PtxModule, renderPtx } from "../../kernels/render/ptx.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { type LlamaConfig, traceDecode, traceStep } from "../../llm/families/llama.ts";
import { atomicKernel, checkCase, featureCases } from "../devices/feature_kernels.ts";
import { assemble, assembleMany, findPtxas } from "./ptxas.ts";
import { tiledMatmul } from "../../kernels/lib/tiled_matmul.ts";
import { gemv } from "../../kernels/lib/gemv.ts";
import { cases as libraryCases } from "../kernels/cases.ts";

const ptxas = findPtxas();
const skip = ptxas ? false : "ptxas not found (set PTXAS or install the CUDA toolkit)";

function assembleAll(mods: PtxModule[], arch = "sm_90"): void {
  const results = assembleMany(ptxas!, mods, arch);
  const bad = results.flatMap((r, i) => (r.ok ? [] : [`${mods[i].kernel.name}: ${r.log.split("\n").slice(0, 6).join(" | ")}`]));
  assert.deepEqual(bad, [], `${bad.length} of ${mods.length} modules failed ptxas -arch=${arch}`);
}

const features = [...featureCases(), checkCase(true)];

// ptxas runs take seconds on a loaded 2-core machine: bun's default 5 s per test is too short.
const slow = { skip, timeout: 120_000 };

test(`IR feature kernels (${features.length}) assemble for sm_90`, slow, () => {
  assembleAll(features.map((c) => renderPtx(c.kernel, { sm: 90 })));
});

test("IR feature kernels assemble for sm_80 (the default target)", slow, () => {
  assembleAll(features.map((c) => renderPtx(c.kernel)), "sm_80");
});

test(`kernel library conformance kernels (${libraryCases.length}) assemble for sm_90`, slow, () => {
  assembleAll(libraryCases.map((kc) => renderPtx(kc.make(SM90_CAPS), { sm: 90 })));
});

// The bench shapes of issue 6 (matmul weights bf16) and the shipped stories260K shape.
const SHAPES: Record<string, LlamaConfig> = {
  "llama-3.2-1b": { dim: 2048, hidden: 8192, layers: 16, heads: 32, kvHeads: 8, headDim: 64, vocab: 128256, rmsEps: 1e-5, ropeTheta: 500000, ropeStyle: "half", tiedEmbeddings: true },
  "qwen2.5-0.5b": { dim: 896, hidden: 4864, layers: 24, heads: 14, kvHeads: 2, headDim: 64, vocab: 151936, rmsEps: 1e-6, ropeTheta: 1000000, ropeStyle: "half", tiedEmbeddings: true, qkvBias: true },
  "llama-3-8b": { dim: 4096, hidden: 14336, layers: 32, heads: 32, kvHeads: 8, headDim: 128, vocab: 128256, rmsEps: 1e-5, ropeTheta: 500000, ropeStyle: "half", tiedEmbeddings: false },
  "stories260K": { dim: 64, hidden: 172, layers: 5, heads: 8, kvHeads: 4, headDim: 8, vocab: 512, rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "adjacent", tiedEmbeddings: true },
};
const TARGET: TargetSet = { backend: "ptx", device: "sm_90 (no device)", caps: SM90_CAPS, memory: { totalBytes: 141e9 }, watchdogBudget: 0 };

test("every kernel of the Llama decode and prefill plans assembles for sm_90", slow, () => {
  const mods = new Map<string, PtxModule>();
  const counts: string[] = [];
  for (const [name, cfg] of Object.entries(SHAPES)) {
    const bf16 = name !== "stories260K";
    const dtypeOf = (r: { role: string }) => (bf16 && !r.role.endsWith("norm") && r.role !== "tok_embd" && !r.role.endsWith(".bias") ? "bf16" : "f32");
    for (const [kind, g] of [
      ["decode", traceDecode(cfg, { cap: 2048 }, { dtypeOf })],
      ["prefill", traceStep(cfg, { cap: 2048, rows: 7 }, { dtypeOf })],
    ] as const) {
      const prog = compileGraph(g, TARGET);
      let n = 0;
      const seen = new Set<string>();
      for (const s of prog.steps) {
        if (s.k !== "kernel") continue;
        n++;
        // Kernel names spell out their shapes and types: one render per distinct kernel.
        if (seen.has(s.kernel.name)) continue;
        seen.add(s.kernel.name);
        const m = renderPtx(s.kernel, { sm: 90 });
        mods.set(m.ptx, m);
      }
      counts.push(`${name} ${kind}: ${n} dispatches`);
    }
  }
  assert.ok(mods.size > 20, `only ${mods.size} distinct kernels`);
  assembleAll([...mods.values()]);
  console.log(`ptx: ${mods.size} distinct plan kernels assembled (${counts.join("; ")})`);
});

test("module shape: one u64 param per binding, a fault-word param only with checks, dynamic shared past 48 KiB", () => {
  const byName = new Map(features.map((c) => [c.name, renderPtx(c.kernel, { sm: 90 })]));
  const checked = byName.get("checked")!, unary = byName.get("unary_f32")!, big = byName.get("big_shared")!;
  assert.equal(checked.faultParam, true);
  assert.equal(checked.params, checked.kernel.buffers.length + 1);
  assert.match(checked.ptx, /\btrap;/);
  assert.match(checked.ptx, /st\.volatile\.global\.u32 \[%rd\d+\], 7;/);
  assert.equal(unary.faultParam, false);
  assert.equal(unary.params, 2);
  assert.equal((unary.ptx.match(/\.param \.u64/g) ?? []).length, 2);
  assert.equal(big.dynamicShared, 16384 * 4);
  assert.match(big.ptx, /\.extern \.shared \.align 16 \.b8 smem\[\];/);
  assert.equal(byName.get("shared_barrier")!.dynamicShared, 0);
  assert.match(byName.get("shared_barrier")!.ptx, /bar\.sync 0;/);
  assert.match(unary.ptx, /\.target sm_90/);
  assert.match(renderPtx(unary.kernel).ptx, /\.target sm_80/);
  assert.match(unary.ptx, /\.reqntid 64, 1, 1/);
});

test("f32 add/sub/mul carry .rn (never contracted into fma) and fma stays fma.rn", () => {
  for (const c of features) {
    const ptx = renderPtx(c.kernel, { sm: 90 }).ptx;
    assert.doesNotMatch(ptx, /\b(add|sub|mul)\.f32\b/, `${c.name}: an f32 op without a rounding mode`);
    assert.doesNotMatch(ptx, /\b(ex2|lg2|sin|cos|tanh)\.approx/, `${c.name}: a hardware approximation`);
  }
  const bin = renderPtx(features.find((c) => c.name === "binary_f32")!.kernel, { sm: 90 }).ptx;
  assert.match(bin, /fma\.rn\.f32/);
});

test("atomic and/or statements are red.global reductions and assemble", slow, () => {
  const m = renderPtx(atomicKernel(), { sm: 90 });
  assert.match(m.ptx, /red\.global\.or\.b32/);
  assert.match(m.ptx, /red\.global\.and\.b32/);
  assembleAll([m]);
});

test("vector loads and stores use 16-byte accesses", () => {
  const ptx = renderPtx(features.find((c) => c.name === "vectors")!.kernel, { sm: 90 }).ptx;
  assert.match(ptx, /ld\.global\.nc\.v4\.f32/);
  assert.match(ptx, /ld\.global\.nc\.v4\.b32/);
  assert.match(ptx, /st\.global\.v4\.f32/);
  assert.match(ptx, /st\.global\.v4\.b32/);
  assert.match(ptx, /ld\.global\.nc\.v2\.f32/);
});

const hinted = (["bf16", "q4_k"] as const).map((w) => {
  const shape = { k: 512, w, norm: { eps: 1e-5, weight: "f32" as const }, parts: [{ n: 64 }] };
  return { w, on: renderPtx(gemv(SM90_CAPS, shape), { sm: 90 }), off: renderPtx(gemv(SM90_CAPS, { ...shape, hints: false }), { sm: 90 }) };
});

test("cache hints: a decode gemv's weights load once past L1 (float) or leave it first (blocks), x stays longest; none when off", () => {
  const loads = (ptx: string) => new Set(ptx.match(/ld\.global\.nc(\.L[12]::\w+)*/g));
  for (const { w, on, off } of hinted) {
    const weight = w === "bf16" ? ".L1::no_allocate.L2::256B" : ".L1::evict_first";
    assert.ok(loads(on.ptx).has(`ld.global.nc${weight}`), `${w}: ${[...loads(on.ptx)]}`);
    assert.ok(loads(on.ptx).has("ld.global.nc.L1::evict_last"), `${w} x: ${[...loads(on.ptx)]}`);
    assert.deepEqual([...loads(off.ptx)], ["ld.global.nc"], `${w} without hints`);
  }
  const b = new KernelBuilder("hint_on_output", { workgroup: 32, grid: 1 });
  assert.throws(() => b.buffer("y", "f32", "w", "once"), KernelError);
});

test("cache hints assemble for sm_90", slow, () => assembleAll(hinted.map((h) => h.on)));

test("subgroup ops: butterfly shuffles for full warps, a member mask for a partial last warp", () => {
  const full = renderPtx(features.find((c) => c.name === "subgroups_128")!.kernel, { sm: 90 }).ptx;
  const part = renderPtx(features.find((c) => c.name === "subgroups_48")!.kernel, { sm: 90 }).ptx;
  assert.match(full, /shfl\.sync\.bfly\.b32 %f\d+, %f\d+, 16, 31, -1;/);
  assert.match(full, /redux\.sync\.add\.u32/);
  assert.match(full, /%laneid/);
  assert.doesNotMatch(part, /(shfl|redux)[^\n]*, -1;/); // no full-warp mask anywhere
  assert.match(part, /shfl\.sync\.down\.b32 %\w+\|%p\d+/);
});

test("entry names are PTX identifiers", () => {
  assert.equal(entryName("matmul q8_0 n=33"), "matmul_q8_0_n_33");
  assert.equal(entryName("3x"), "k_3x");
  const b = new KernelBuilder("odd name/with.chars", { workgroup: 32, grid: 1 });
  const y = b.buffer("y", "u32", "w");
  b.store(y, b.lid.x, b.lid.x);
  const m = renderPtx(b.build(), { sm: 90 });
  assert.equal(m.entry, "odd_name_with_chars");
  assert.match(m.ptx, /\.visible \.entry odd_name_with_chars\(/);
});

test("the renderer refuses what CUDA cannot run", () => {
  const k = (wg: [number, number, number]): Kernel => {
    const b = new KernelBuilder("k", { workgroup: wg, grid: 1 });
    b.store(b.buffer("y", "u32", "w"), b.lid.x, 1);
    return b.build();
  };
  assert.throws(() => renderPtx(k([2048, 1, 1])), KernelError);
  assert.throws(() => renderPtx(k([1, 1, 128])), KernelError);
  assert.throws(() => renderPtx(k([32, 1, 1]), { sm: 75 }), KernelError);
});

test("the tiled matmul at prefill/encoder shapes assembles for sm_90 without spills (ptxas -v)", slow, () => {
  const bad: string[] = [];
  for (const [w, k, m] of [["f32", 768, 32768], ["f32", 131, 300], ["f16", 768, 512], ["bf16", 2048, 512], ["q8_0", 2048, 512], ["q4_k", 2048, 512], ["q6_k", 2048, 512]] as const) {
    const kernel = tiledMatmul(SM90_CAPS, { n: 2048, k, batch: m, w, bias: true, residual: true });
    const r = assemble(ptxas!, renderPtx(kernel, { sm: 90 }).ptx, "sm_90", true);
    if (!r.ok) bad.push(`${kernel.name}: ${r.log.split("\n").slice(0, 4).join(" | ")}`);
    else if (!/0 bytes spill stores, 0 bytes spill loads/.test(r.log)) bad.push(`${kernel.name} spills: ${r.log.replace(/\s+/g, " ")}`);
  }
  assert.deepEqual(bad, []);
});
