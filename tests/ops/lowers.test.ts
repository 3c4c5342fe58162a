// Every op the graph accepts lowers on every target: a sweep over each op's dtypes and attributes (small
// shapes), each graph either refused by the type rule (a GraphError when it is built) or compiled and rendered
// for every renderer of kernels/render/mod.ts with that renderer's typical caps. An accepted graph that some
// target cannot lower is a failure: the graph must refuse what no target lowers (and a target that lowers
// less than the others must say so in its caps, not at compile time). No device: this is lowering only.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Op } from "../../graph/ir.ts";
import { BINARY, COMPARE, COMPOSITE, UNARY } from "../../graph/ops.ts";
import { type Tensor, Tracer } from "../../graph/tracer.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { RENDER_TARGETS, RENDERERS, renderSource } from "../../kernels/render/mod.ts";
import { build, probes } from "./probes.ts";

test("every op the graph accepts lowers and renders on every target (or the graph refuses it)", { timeout: 300_000 }, () => {
  const all = probes();
  const covered = new Set(all.map((p) => p.op));
  const ops = [...UNARY, ...BINARY, ...COMPARE, ...COMPOSITE, "select", "cast", "reduce", "argmax", "matmul", "gather",
    "reshape", "permute", "broadcast", "slice", "concat", "dynamic_update_slice", "scatter_update", "iota"] as Op[];
  assert.deepEqual(ops.filter((o) => !covered.has(o)), [], "ops without a probe");
  const bad: string[] = [];
  let accepted = 0;
  for (const p of all) {
    const g = build(p);
    if (!g) continue;
    accepted++;
    for (const t of RENDER_TARGETS) {
      const r = RENDERERS[t];
      try {
        const prog = compileGraph(g, { backend: r.backend, device: `typical ${t}`, caps: r.caps, memory: { totalBytes: 0 }, watchdogBudget: 0 });
        for (const s of prog.steps) if (s.k === "kernel") renderSource(s.kernel, t);
      } catch (e) {
        bad.push(`${p.name} on ${t}: ${(e as Error).message.split("\n")[0]}`);
      }
    }
  }
  console.log(`${all.length} probes, ${accepted} accepted by the graph, ${bad.length} (probe, target) pairs failed`);
  assert.ok(accepted > 400, `only ${accepted} probes accepted`);
  assert.deepEqual(bad, []);
});

test("a composite without a lowerer of its own is expanded before planning, with the oracle's exact values", { timeout: 120_000 }, async () => {
  const { decomposeGraph } = await import("../../kernels/decomp/graph.ts");
  const { evaluate } = await import("../../graph/eval.ts");
  const { toStorage } = await import("../../graph/tracer.ts");
  const x = Array.from({ length: 24 }, (_, i) => Math.sin(i) * 3);
  const graphs: [Op, (t: Tracer, s: Tensor) => Tensor][] = [
    ["rmsnorm", (t, s) => t.rmsnorm(s, t.literal(1.5, "f32", [8]), 1e-5)],
    ["layernorm", (t, s) => t.layernorm(s, t.literal(1.5, "f32", [8]), t.literal(0.25, "f32", [8]), 1e-5)],
    ["softmax", (t, s) => t.softmax(s)],
    ["silu", (t, s) => t.silu(s)],
    ["gelu", (t, s) => t.gelu(s)],
    ["rope", (t, s) => t.rope(t.reshape(s, [3, 1, 8]), t.literal(5, "i32", [3]), { theta: 10000, style: "half" })],
  ];
  for (const [op, f] of graphs) {
    const t = new Tracer();
    t.output("y", f(t, t.slot("x", { kind: "Input", dtype: "f32", shape: [3, 8] })));
    const g = t.build();
    const d = decomposeGraph(g, (o) => o !== op);
    assert.ok(!d.nodes.some((n) => n.op === op), `${op} expanded`);
    const slots = { x: toStorage("f32", x) };
    assert.deepEqual(evaluate(d, { slots }).output.y, evaluate(g, { slots }).output.y, op);
    const r = RENDERERS.js;
    compileGraph(d, { backend: r.backend, device: "typical js", caps: r.caps, memory: { totalBytes: 0 }, watchdogBudget: 0 });
  }
});
