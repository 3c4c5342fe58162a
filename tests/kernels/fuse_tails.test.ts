// The fused tails (split-K attention and the vocab argmax combining in their own last team) follow the target's
// Caps.dispatchGap, not its backend's name: a Vulkan target without the gap keeps two dispatches, a JS target
// with it gets one, and CompileOptions.attentionFuse overrides either way. So do the dispatch-saving plan fusions
// (PlanOptions.gatherCast: the embedding lookup and its cast; normRope: Qwen3's per-head q/k norms, ropes and K
// cache write), each with its own CompileOptions override.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";
import type { Backend, Caps } from "../../kernels/target.ts";
import { familyOf } from "../../llm/registry.ts";
import { SHAPES } from "../../bench/shapes.ts";

function kernels(backend: Backend, caps: Caps, opts: CompileOptions = {}): string[] {
  const { tracer, logits } = familyOf("llama").trace(SHAPES["llama-3.2-1b"], { rows: 1, cap: 2048, kvDtype: "f16" }, {
    dtypeOf: (r) => (r.role.endsWith("norm") ? "f32" : "bf16"),
  });
  tracer.output("token", tracer.argmax(logits, 1));
  const prog = compileGraph(tracer.build(), { backend, device: "test", caps, memory: { totalBytes: 2 ** 34 }, watchdogBudget: 0 }, opts);
  return prog.steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name] : []));
}

const fused = (names: string[]) => ({
  attention: names.filter((n) => n.startsWith("attention_fused")).length,
  combine: names.filter((n) => n.startsWith("attention_combine")).length,
  argmax: names.filter((n) => n.startsWith("argmax_fused")).length,
  argmaxCombine: names.filter((n) => n.startsWith("argmax_combine")).length,
});

const GPU = RENDERERS.spirv.caps;

test("fused tails follow Caps.dispatchGap whatever the backend", () => {
  assert.equal(GPU.dispatchGap, true);
  for (const backend of ["vulkan", "wgpu", "js", "ptx"] as const) {
    const on = fused(kernels(backend, { ...GPU, dispatchGap: true }));
    assert.deepEqual(on, { attention: 16, combine: 0, argmax: 1, argmaxCombine: 0 }, `${backend} with the gap`);
    const off = fused(kernels(backend, { ...GPU, dispatchGap: false }));
    assert.deepEqual(off, { attention: 0, combine: 16, argmax: 0, argmaxCombine: 1 }, `${backend} without the gap`);
  }
});

test("CompileOptions.attentionFuse overrides Caps.dispatchGap both ways", () => {
  assert.equal(fused(kernels("vulkan", { ...GPU, dispatchGap: true }, { attentionFuse: false })).attention, 0);
  assert.equal(fused(kernels("ptx", { ...GPU, dispatchGap: false }, { attentionFuse: true })).attention, 16);
});

test("the embedding gather and its cast are one kernel where Caps.dispatchGap (CompileOptions.gatherCast overrides)", () => {
  const head = (names: string[]) => names.slice(0, 2).map((n) => n.replace(/_.*/, ""));
  for (const backend of ["vulkan", "ptx"] as const) {
    assert.deepEqual(head(kernels(backend, { ...GPU, dispatchGap: true })), ["gather", "gemv"], `${backend} with the gap`);
    assert.deepEqual(head(kernels(backend, { ...GPU, dispatchGap: false })), ["gather", "elementwise"], `${backend} without the gap`);
  }
  assert.deepEqual(head(kernels("vulkan", { ...GPU, dispatchGap: true }, { gatherCast: false })), ["gather", "elementwise"]);
  assert.deepEqual(head(kernels("ptx", { ...GPU, dispatchGap: false }, { gatherCast: true })), ["gather", "gemv"]);
});

test("Qwen3's q/k head norms, ropes and K cache write are one kernel where Caps.dispatchGap (CompileOptions.normRope overrides)", async () => {
  const { loadModel } = await import("../../llm/model.ts");
  const { FIXTURES } = await import("../families/fixtures.ts");
  const m = loadModel(`${FIXTURES}qwen3`);
  m.close();
  const names = (caps: Caps, opts: CompileOptions = {}) => {
    const { tracer, logits } = m.family.trace(m.config, { rows: 1, cap: 64 }, { dtypeOf: (r) => (/norm/.test(r.role) ? "f32" : "bf16") });
    tracer.output("token", tracer.argmax(logits, 1));
    const prog = compileGraph(tracer.build(), { backend: "vulkan", device: "test", caps, memory: { totalBytes: 2 ** 34 }, watchdogBudget: 0 }, opts);
    return prog.steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name.replace(/_.*/, "")] : []));
  };
  const L = m.config.layers;
  const count = (xs: string[], k: string) => xs.filter((x) => x === k).length;
  const on = names({ ...GPU, dispatchGap: true }), off = names({ ...GPU, dispatchGap: false });
  assert.equal(count(on, "norm"), L);
  assert.deepEqual([count(on, "rmsnorm"), count(on, "rope"), count(on, "update")], [0, 0, 0]);
  assert.deepEqual([count(off, "norm"), count(off, "rmsnorm"), count(off, "rope"), count(off, "update")], [0, 2 * L, 2 * L, L]);
  // per layer: 5 kernels fewer (two norms, two ropes, the K write -> one), and the embedding's cast
  assert.equal(off.length - on.length, 4 * L + 1);
  assert.equal(count(names({ ...GPU, dispatchGap: true }, { normRope: false }), "norm"), 0);
  assert.equal(count(names({ ...GPU, dispatchGap: false }, { normRope: true }), "norm"), L);
});

test("small outputs no kernel reads are stored straight into their readback buffers where Caps.dispatchGap", async () => {
  const steps = (backend: Backend, caps: Caps, opts: CompileOptions = {}) => {
    const { tracer, logits } = familyOf("llama").trace(SHAPES["stories260K"], { rows: 1, cap: 64, kvDtype: "f16" }, { dtypeOf: () => "f32" });
    tracer.output("token", tracer.argmax(logits, 1));
    return compileGraph(tracer.build(), { backend, device: "test", caps, memory: { totalBytes: 2 ** 34 }, watchdogBudget: 0 }, opts);
  };
  const copies = (p: ReturnType<typeof steps>) => p.steps.filter((s) => s.k === "copy").length;
  const on = steps("vulkan", { ...GPU, dispatchGap: true });
  assert.equal(copies(on), 0);
  const rb = on.outputs[0].buffer, last = on.steps[on.steps.length - 1];
  assert.equal(on.buffers[rb].kind, "readback");
  assert.ok(last.k === "kernel" && last.bindings.some((b) => b.buffer === rb), "the argmax writes the token's readback buffer");
  assert.equal(copies(steps("vulkan", { ...GPU, dispatchGap: false })), 1);
  assert.equal(copies(steps("vulkan", { ...GPU, dispatchGap: true }, { outputsInPlace: false })), 1);
  assert.equal(copies(steps("ptx", { ...GPU, dispatchGap: false }, { outputsInPlace: true })), 0);

  // An output a kernel updates in place (rw), or that another unit reads, keeps its copy.
  const { Tracer } = await import("../../graph/tracer.ts");
  const t = new Tracer();
  const x = t.slot("x", { kind: "Input", dtype: "f32", shape: [6, 8] }), row = t.slot("r", { kind: "Input", dtype: "f32", shape: [1, 8] });
  const pos = t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
  const y = t.updateSlice(t.mul(x, 2), row, pos, 0), z = t.add(row, 1);
  t.output("y", y);
  t.output("z", z);
  t.output("w", t.mul(z, 3));
  const p = compileGraph(t.build(), { backend: "vulkan", device: "test", caps: GPU, memory: { totalBytes: 2 ** 34 }, watchdogBudget: 0 });
  const rbs = new Set(p.buffers.filter((b) => b.kind === "readback").map((b) => b.id));
  for (const s of p.steps) if (s.k === "kernel") s.bindings.forEach((b, i) => rbs.has(b.buffer) && assert.equal(s.kernel.buffers[i].access, "w", s.kernel.name));
  const copied = p.steps.flatMap((s) => (s.k === "copy" && p.buffers[s.dst.buffer].kind === "readback" ? [p.buffers[s.dst.buffer].name] : []));
  assert.deepEqual(copied.sort(), ["y", "z"], "y (updated in place) and z (read by w) are copied, w is not");
});

test("Gemma 2's post-norms take their residual add and 1 + w into the norm kernel where Caps.dispatchGap (CompileOptions.normAdd overrides)", async () => {
  const { loadModel } = await import("../../llm/model.ts");
  const { FIXTURES } = await import("../families/fixtures.ts");
  const m = loadModel(`${FIXTURES}gemma2`);
  m.close();
  const names = (caps: Caps, opts: CompileOptions = {}) => {
    const { tracer, logits } = m.family.trace(m.config, { rows: 1, cap: 64 }, { dtypeOf: (r) => (/norm/.test(r.role) ? "f32" : "bf16") });
    tracer.output("token", tracer.argmax(logits, 1));
    // (siblings off: kernel counts of the norm fusions alone)
    const prog = compileGraph(tracer.build(), { backend: "wgpu", device: "test", caps, memory: { totalBytes: 2 ** 34 }, watchdogBudget: 0 }, { siblings: false, ...opts });
    return prog.steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name] : []));
  };
  const L = m.config.layers;
  const on = names({ ...GPU, dispatchGap: true }), off = names({ ...GPU, dispatchGap: false });
  assert.equal(on.filter((n) => /^rmsnorm_.*_wa1_res$/.test(n)).length, 2 * L);
  assert.equal(off.filter((n) => /_res$/.test(n)).length, 0);
  // per layer: two post-norms lose their residual add and their 1 + w (the embedding cast is grouped with its scale)
  assert.equal(off.length - on.length, 4 * L);
  assert.equal(names({ ...GPU, dispatchGap: true }, { normAdd: false }).filter((n) => /_res$/.test(n)).length, 0);
});
