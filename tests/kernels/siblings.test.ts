// Sibling kernels launched as one (kernels/lower/siblings.ts): which steps merge (no common bytes written, the
// same workgroup, reachable past independent steps only), and that a merged plan computes the same bits as the
// plan without it (a Q4_K_M model's q4_k and q6_k x preps and q/k/v gemvs on the JS device, 32-lane subgroups).
import { test } from "node:test";
import assert from "node:assert/strict";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import { mergeSiblings } from "../../kernels/lower/siblings.ts";
import { type Kernel, KernelBuilder } from "../../kernels/ir.ts";
import { runKernel } from "./harness.ts";
import type { Program, Step } from "../../kernels/program.ts";
import { JS_CAPS, type TargetSet } from "../../kernels/target.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import { targetFor } from "../../cli/render.ts";
import { JsDevice } from "../../backends/js/mod.ts";
import { Engine } from "../../backends/executor.ts";
import { familyOf } from "../../llm/registry.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import type { LlamaConfig } from "../../llm/families/llama.ts";

const bun = "Bun" in globalThis;

// A kernel that reads binding 0 and writes binding 1, with `wg` invocations a workgroup and `grid` workgroups.
function step(name: string, grid: number, wg: number, read: [number, number], write: [number, number]): Step {
  const k = new KernelBuilder(name, { workgroup: wg, grid });
  const src = k.buffer("src", "f32", "r"), dst = k.buffer("dst", "f32", "w");
  const i = k.let(k.gid.x);
  k.store(dst, i, k.load(src, i));
  return {
    k: "kernel", kernel: k.build(), grid: [grid, 1, 1], work: { bytes: 0, flops: 0 },
    bindings: [{ buffer: read[0], offset: read[1], bytes: 4 * grid * wg }, { buffer: write[0], offset: write[1], bytes: 4 * grid * wg }],
  };
}
const CAPS = { ...JS_CAPS, maxSharedBytes: 1 << 16 };
const prog = (steps: Step[]): Program => ({ buffers: [], steps, slots: [], state: [], outputs: [], weights: [] });
// (a merged kernel's name ends in "@" and where each of the second kernel's buffers is bound)
const names = (p: Program) => p.steps.map((s) => (s.k === "kernel" ? s.kernel.name.replace(/@[\d.]+$/, "") : s.k));

test("mergeSiblings: independent kernels of one workgroup size merge; a hazard, another size, the binding limit or a collective between keeps them apart", () => {
  // b reads what a writes: apart. c shares only a read with a: merged.
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("b", 2, 64, [1, 0], [2, 0])]), CAPS)), ["a", "b"]);
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("c", 3, 64, [0, 0], [2, 0])]), CAPS)), ["a+c"]);
  // writes to disjoint ranges of one buffer: merged; overlapping ranges (arena reuse): apart
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("c", 2, 64, [0, 0], [1, 512])]), CAPS)), ["a+c"]);
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("c", 2, 64, [0, 0], [1, 256])]), CAPS)), ["a", "c"]);
  // the device's per-stage binding limit: 3 bindings fit where c's read is a's (bound once), 4 do not
  const lim = { ...CAPS, maxStorageBuffers: 3 };
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("c", 2, 64, [0, 0], [2, 0])]), lim)), ["a+c"]);
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("c", 2, 64, [5, 0], [2, 0])]), lim)), ["a", "c"]);
  // another workgroup size
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("c", 2, 128, [0, 0], [2, 0])]), CAPS)), ["a", "c"]);
  // d moves past the independent x to meet a (the earliest sibling it reaches), then y meets x
  const moved = mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("x", 2, 32, [1, 0], [2, 0]), step("d", 2, 64, [0, 0], [3, 0]), step("y", 1, 32, [3, 0], [4, 0])]), CAPS);
  assert.deepEqual(names(moved), ["a+d", "x+y"]);
  // not past a step it depends on, nor past a collective
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("x", 2, 32, [1, 0], [2, 0]), step("d", 2, 64, [2, 0], [3, 0])]), CAPS)), ["a", "x", "d"]);
  const coll: Step = { k: "collective", op: "all_reduce", dtype: "f32", count: 1, ranks: 2, src: { buffer: 9, offset: 0, bytes: 4 }, dst: { buffer: 9, offset: 0, bytes: 4 }, work: { bytes: 0, flops: 0 } };
  assert.deepEqual(names(mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), coll, step("d", 2, 64, [0, 0], [3, 0])]), CAPS)), ["a", "collective", "d"]);
  // the merged kernel's grid is both grids; the second kernel's bindings follow the first's, a shared read bound once
  const m = mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("c", 3, 64, [0, 0], [2, 0])]), CAPS).steps[0];
  assert.ok(m.k === "kernel");
  assert.deepEqual(m.grid, [5, 1, 1]);
  assert.deepEqual(m.bindings.map((b) => b.buffer), [0, 1, 0, 2]);
  const same = mergeSiblings(prog([step("a", 2, 64, [0, 0], [1, 0]), step("c", 2, 64, [0, 0], [2, 0])]), CAPS).steps[0];
  assert.ok(same.k === "kernel");
  assert.deepEqual(same.bindings.map((b) => b.buffer), [0, 1, 2]);
  assert.deepEqual(same.kernel.buffers.map((b) => b.binding), [0, 1, 2]);
  assert.equal(same.kernel.name, "a+c@0.2");
  assert.equal(m.kernel.name, "a+c@2.3");
});

// A grid-stride kernel: every invocation walks the array by the grid's size, tagging each value with its
// workgroup, global invocation and the grid it saw; another with shared memory and a barrier.
function strided(name: string, n: number, grid: number): Kernel {
  const k = new KernelBuilder(name, { workgroup: 32, grid });
  const src = k.buffer("src", "u32", "r"), dst = k.buffer("dst", "u32", "w");
  k.for(k.gid.x, n, grid * 32, (i) => {
    k.store(dst, i, k.load(src, i).add(k.wgid.x.mul(1000)).add(k.nwg.x.mul(100000)).add(k.gid.x.mul(7)));
  });
  return k.build();
}
function staged(name: string, grid: number): Kernel {
  const k = new KernelBuilder(name, { workgroup: 32, grid });
  const src = k.buffer("src", "u32", "r"), dst = k.buffer("dst", "u32", "w");
  const t = k.shared("t", "u32", 32);
  k.sstore(t, k.lid.x, k.load(src, k.gid.x));
  k.barrier();
  k.store(dst, k.gid.x, k.sload(t, k.lid.x.xor(5)).add(k.wgid.x));
  return k.build();
}

test("a merged kernel runs each part's invocations with its own workgroup index, invocation index and grid (JS)", async () => {
  const dev = new JsDevice({ caps: { ...JS_CAPS, subgroupSize: 32, maxWorkgroupSize: 256 } });
  const words = (n: number, seed: number) => new Uint8Array(Uint32Array.from({ length: n }, (_, i) => (i * 2654435761 + seed) >>> 0).buffer);
  const zero = (n: number) => new Uint8Array(4 * n);
  const pairs: [Kernel, Kernel, number, number][] = [
    [strided("a", 300, 3), strided("b", 200, 2), 300, 200],
    [staged("a", 4), strided("b", 100, 5), 128, 100],
    [strided("a", 100, 2), staged("b", 3), 100, 96],
  ];
  for (const [ka, kb, na, nb] of pairs) {
    const at = (k: Kernel, i: number, n: number): Step => ({
      k: "kernel", kernel: k, grid: k.grid, work: { bytes: 0, flops: 0 },
      bindings: [{ buffer: 2 * i, offset: 0, bytes: 4 * n }, { buffer: 2 * i + 1, offset: 0, bytes: 4 * n }],
    });
    const merged = mergeSiblings(prog([at(ka, 0, na), at(kb, 1, nb)]), CAPS).steps;
    assert.equal(merged.length, 1);
    const m = merged[0];
    assert.ok(m.k === "kernel");
    const [sa, sb] = [words(na, 1), words(nb, 2)];
    const alone = [...await runKernel(dev, ka, [sa, zero(na)]), ...await runKernel(dev, kb, [sb, zero(nb)])];
    const both = await runKernel(dev, m.kernel, [sa, zero(na), sb, zero(nb)]);
    assert.deepEqual(both[1], alone[1], `${m.kernel.name}: the first part's output`);
    assert.deepEqual(both[3], alone[3], `${m.kernel.name}: the second part's output`);
  }
  await dev.destroy();
});

// Eight layers, some with v in q6_k as llama-quantize's Q4_K_M gives it (llm/formats/quantize.ts quantPlan)
const TINY: LlamaConfig = {
  dim: 256, hidden: 512, layers: 8, heads: 4, kvHeads: 2, headDim: 64, vocab: 96,
  rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "half", tiedEmbeddings: false,
};
const traceTiny = (dtypeOf: (r: never) => never) => {
  const { tracer, logits } = familyOf("llama").trace(TINY, { rows: 1, cap: 64, kvDtype: "f16" }, { dtypeOf } as never);
  tracer.output("logits", logits);
  return tracer.build();
};

test("a Q4_K_M decode plan on the H200's caps runs its q6_k v layers' x preps and q/k/v gemvs as one launch each", () => {
  const model = syntheticLlama(TINY, { dtype: "q4_k_m", seed: 5 });
  const graph = traceTiny(model.dtypeOf as never);
  const target = { ...targetFor("ptx"), caps: SM90_CAPS };
  const on = compileGraph(graph, target), off = compileGraph(graph, target, { siblings: false });
  const v6 = Array.from({ length: TINY.layers }, (_, l) => model.dtypeOf({ role: "attn.v", layer: l })).filter((d) => d === "q6_k").length;
  assert.ok(v6 > 0 && v6 < TINY.layers, `q6_k v in ${v6} of ${TINY.layers} layers`);
  const merged = names(on).filter((n) => n.includes("+"));
  assert.equal(merged.filter((n) => /^xq_prep_q4_k\w*\+xq_prep_q6_k/.test(n)).length, v6, merged.join("\n"));
  assert.equal(merged.filter((n) => /^gemv_q4_k\w*rope\w*\+gemv_q6_k/.test(n)).length, v6, merged.join("\n"));
  assert.equal(on.steps.length, off.steps.length - 2 * v6);
});

test("a merged Q4_K_M plan gives the unmerged plan's bits (JS, 32-lane subgroups, x quantized by preps)", { skip: bun ? "left to Deno (the same code)" : false, timeout: 300_000 }, async () => {
  const dev = new JsDevice({ caps: { ...JS_CAPS, subgroupSize: 32, maxWorkgroupSize: 256 } });
  const model = syntheticLlama(TINY, { dtype: "q4_k_m", seed: 5, std: 0.5 });
  const graph = traceTiny(model.dtypeOf as never);
  const plans: string[][] = [];
  const compile = (g: typeof graph, t: TargetSet, o?: CompileOptions) => {
    const p = compileGraph(g, t, o);
    plans.push(names(p));
    return p;
  };
  const run = async (siblings: boolean): Promise<Float32Array[]> => {
    const eng = new Engine(dev, { compile, ownsDevice: false });
    try {
      await eng.loadWeights(model.store, model.map);
      const id = eng.addEntry("decode", graph, { siblings, quantizedX: true, xqPrep: true });
      const out: Float32Array[] = [];
      for (let p = 0; p < 3; p++) {
        const r = await eng.step(id, { token: new Int32Array([(p * 37 + 3) % TINY.vocab]), pos: new Int32Array([p]) });
        out.push(Float32Array.from(r.outputs.logits as Float32Array));
      }
      return out;
    } finally {
      await eng.unload();
    }
  };
  const off = await run(false), on = await run(true);
  assert.ok(plans[1].some((n) => /^xq_prep_q4_k\w*\+xq_prep_q6_k/.test(n)) && plans[1].some((n) => /^gemv_q4_k\w*\+gemv_q6_k/.test(n)), plans[1].join("\n"));
  assert.ok(plans[1].length < plans[0].length);
  for (let p = 0; p < off.length; p++) {
    assert.ok(off[p].every(Number.isFinite), `pos ${p}: non-finite logits`);
    assert.deepEqual(new Uint32Array(on[p].buffer), new Uint32Array(off[p].buffer), `pos ${p}: logits differ`);
  }
  await dev.destroy();
});
