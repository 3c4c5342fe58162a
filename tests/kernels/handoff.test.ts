// A decode gemv's x prep in the gemv's own dispatch (kernels/lib/handoff.ts, CompileOptions.handoff, caps.handoff):
// which plans take it (PTX's caps and JS's; not Vulkan's), how the PTX kernel orders its weight loads, the wait and
// its x loads, that a plan with it computes the bits of the plan without it and leaves every handoff word at zero
// after each step (JS with 8-lane subgroups, where the small model's gemvs have teams of whole workgroups; each GPU
// backend that has caps.handoff, at a shape whose teams do), and that a wait nobody answers faults instead of hanging.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import { KernelBuilder } from "../../kernels/ir.ts";
import { FAULT } from "../../kernels/lib/codes.ts";
import { HANDOFF_BYTES } from "../../kernels/lib/handoff.ts";
import type { Program } from "../../kernels/program.ts";
import { JS_CAPS, type TargetSet } from "../../kernels/target.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import { renderPtx } from "../../kernels/render/ptx.ts";
import { targetFor } from "../../cli/render.ts";
import type { Device } from "../../backends/device.ts";
import { KernelFault } from "../../backends/errors.ts";
import { JsDevice } from "../../backends/js/mod.ts";
import { Engine } from "../../backends/executor.ts";
import { familyOf } from "../../llm/registry.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import type { LlamaConfig } from "../../llm/families/llama.ts";
import { SHAPES } from "../../bench/shapes.ts";
import { runKernel } from "./harness.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";

const bun = "Bun" in globalThis;
const kernels = (p: Program) => p.steps.flatMap((s) => (s.k === "kernel" ? [s] : []));
const trace = (c: LlamaConfig, dtypeOf: unknown) => {
  const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 64, kvDtype: "f16" }, { dtypeOf } as never);
  tracer.output("logits", logits);
  return tracer.build();
};

test("a Q4_K_M decode plan on the H200's caps runs every x prep in its gemv's dispatch, each with a handoff word of its own", () => {
  const model = syntheticLlama(SHAPES["llama-3.2-1b"], { dtype: "q4_k_m", seed: 1 });
  const graph = trace(SHAPES["llama-3.2-1b"], model.dtypeOf);
  const target = { ...targetFor("ptx"), caps: SM90_CAPS };
  const on = compileGraph(graph, target, { handoff: true }), off = compileGraph(graph, target);
  const preps = kernels(off).filter((s) => s.kernel.name.includes("xq_prep_")).length;
  assert.ok(preps > 0);
  // every prep now shares a dispatch with the gemv after it (a layer's two q/k/v pairs as siblings: one launch)
  const alone = kernels(on).filter((s) => s.kernel.name.startsWith("xq_prep_") && !s.kernel.name.includes("+gemv_"));
  assert.deepEqual(alone.map((s) => s.kernel.name), []);
  assert.equal(on.steps.length, off.steps.length - preps);
  const fused = kernels(on).filter((s) => s.kernel.uses.handoff);
  assert.ok(fused.length >= preps / 2, `${fused.length} dispatches with a handoff`);
  // the words: a region each in one State buffer (one size in every program: entries share it), in order, none
  // bound twice
  const buf = on.buffers.find((b) => b.kind === "state" && b.name === "handoff")!;
  const regions = fused.flatMap((s) => s.bindings.filter((b) => b.buffer === buf.id));
  assert.ok(regions.every((r) => r.bytes === HANDOFF_BYTES && r.offset + r.bytes <= buf.bytes));
  assert.deepEqual(regions.map((r) => r.offset).sort((a, b) => a - b), regions.map((_, i) => i * HANDOFF_BYTES));
  // Vulkan's caps (no handoff): no change
  const vk = { ...targetFor("spirv"), caps: { ...SM90_CAPS, handoff: undefined } };
  assert.equal(compileGraph(graph, vk, { handoff: true }).steps.length, compileGraph(graph, vk).steps.length);
});

test("PTX: the gemv's workgroups issue their weight loads, then wait, then read x through coherent loads; the prep signals after a device barrier", () => {
  const model = syntheticLlama(SHAPES["llama-3.2-1b"], { dtype: "q4_k_m", seed: 1 });
  const prog = compileGraph(trace(SHAPES["llama-3.2-1b"], model.dtypeOf), { ...targetFor("ptx"), caps: SM90_CAPS }, { handoff: true });
  const gu = kernels(prog).find((s) => /\+gemv_q4_kx8p_\w*_sm\d+/.test(s.kernel.name))!;
  assert.ok(gu, "a fused gate/up");
  const ptx = renderPtx(gu.kernel, { sm: 90, pdl: true }).ptx.split("\n");
  const at = (re: RegExp, from = 0) => ptx.findIndex((l, i) => i >= from && re.test(l));
  const signal = at(/red\.global\.add\.u32/), wait = at(/ld\.relaxed\.gpu\.global\.u32/);
  assert.ok(signal > 0 && at(/membar\.gl/) < signal, "the prep's release, then its count");
  const weights = at(/ld\.global\.nc\.L1::evict_first/, signal);
  assert.ok(weights > signal && weights < wait, "a weight load before the wait");
  const x = at(/ld\.global\.v4\.b32/, signal);
  assert.ok(x > wait, "x read after the wait");
  assert.ok(at(new RegExp(`st\\.volatile\\.global\\.u32 \\[%rd\\d+\\], ${FAULT.HANDOFF}`)) > wait, "a bounded wait that faults");
  assert.ok(at(/bar\.sync 0/, wait) > wait && at(/atom\.global\.add\.u32/, wait) > wait, "the workgroup meets, then counts itself");
});

test("an await nobody answers faults with FAULT.HANDOFF (JS)", async () => {
  const dev = new JsDevice({});
  try {
    const b = new KernelBuilder("await_alone", { workgroup: 32, grid: 2 });
    const sync = b.buffer("sync", "u32", "rw"), out = b.buffer("out", "u32", "w");
    b.await(sync, 0, 1 << 16, FAULT.HANDOFF);
    b.store(out, b.gid.x, 1);
    await assert.rejects(runKernel(dev, b.build(), [new Uint8Array(4), new Uint8Array(256)]), (e) => e instanceof KernelFault && e.code === FAULT.HANDOFF);
  } finally {
    await dev.destroy();
  }
});

// Model shapes whose gemv teams are whole workgroups: 8-lane subgroups at dim 512, 32-lane ones at dim 2048.
const SMALL: LlamaConfig = { dim: 512, hidden: 1024, layers: 4, heads: 8, kvHeads: 2, headDim: 64, vocab: 96, rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "half", tiedEmbeddings: false };
const WIDE: LlamaConfig = { ...SMALL, dim: 2048, hidden: 2048, layers: 2, heads: 16, kvHeads: 4, headDim: 128, vocab: 256 };
const gpus = await Promise.all(selectedBackends().filter((b) => b !== "js").map(async (n) => [n, await openDevice(n)] as const));
const devices: [string, LlamaConfig, Device | string][] = [
  ["js sg8", SMALL, bun ? "left to Deno (the same code)" : new JsDevice({ caps: { ...JS_CAPS, subgroupSize: 8, maxWorkgroupSize: 64 } })],
  ...gpus.map(([n, d]): [string, LlamaConfig, Device | string] => [n, WIDE, typeof d === "string" || d.target.caps.handoff ? d : `${n}: no caps.handoff (workgroups not started in index order)`]),
];
for (const [tag, config, dev] of devices) {
  test(`${tag}: a Q4_K_M plan with handoffs gives the plan's bits without them and leaves each word at zero`, { skip: typeof dev === "string" ? dev : false, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    const model = syntheticLlama(config, { dtype: "q4_k_m", seed: 7, std: 0.5 });
    const graph = trace(config, model.dtypeOf);
    const plans: Program[] = [];
    const compile = (g: typeof graph, tg: TargetSet, o?: CompileOptions) => {
      const p = compileGraph(g, tg, o);
      plans.push(p);
      return p;
    };
    const run = async (handoff: boolean): Promise<{ logits: Float32Array[]; words: number[] }> => {
      const eng = new Engine(dev, { compile, ownsDevice: false });
      try {
        await eng.loadWeights(model.store, model.map);
        const id = eng.addEntry("decode", graph, { handoff, quantizedX: true, xqPrep: true });
        const logits: Float32Array[] = [], words: number[] = []; // words: how many are not zero, after each step
        for (let p = 0; p < 3; p++) {
          const r = await eng.step(id, { token: new Int32Array([(p * 37 + 3) % config.vocab]), pos: new Int32Array([p]) });
          logits.push(Float32Array.from(r.outputs.logits as Float32Array));
          if (handoff) words.push(new Uint32Array((await eng.readState("handoff")).slice().buffer).reduce((a, w) => a + (w ? 1 : 0), 0));
        }
        return { logits, words };
      } finally {
        await eng.unload();
      }
    };
    const off = await run(false), on = await run(true);
    const fused = kernels(plans[plans.length - 1]).filter((s) => s.kernel.uses.handoff).length;
    assert.ok(fused >= 3 * config.layers, `${fused} dispatches with a handoff`);
    assert.deepEqual(on.words, [0, 0, 0], "handoff words not zero after a step");
    for (let p = 0; p < off.logits.length; p++) {
      assert.ok(off.logits[p].every(Number.isFinite), `pos ${p}: non-finite logits`);
      assert.deepEqual(new Uint32Array(on.logits[p].buffer), new Uint32Array(off.logits[p].buffer), `pos ${p}: logits differ`);
    }
    if (dev instanceof JsDevice) await dev.destroy();
  });
}
