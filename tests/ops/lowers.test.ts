// Every op the graph accepts lowers on every target: a sweep over each op's dtypes and attributes (small
// shapes), each graph either refused by the type rule (a GraphError when it is built) or compiled and rendered
// for every renderer of kernels/render/mod.ts with that renderer's typical caps. The ops are the registry's
// (graph/ops/mod.ts), so a new op's record without a probe fails here. An accepted graph that some target cannot
// lower is a failure unless the op's record lists that target in `notLowered` with the reason (and a listed
// target that does lower fails too: the list stays true). Collectives are not lowered on any one device: they run
// between the ranks of a tp group, and lowering one says so. No device: this is lowering only.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GraphError, type Op } from "../../graph/ir.ts";
import { ALL_OPS, OPS } from "../../graph/ops.ts";
import { type Tensor, Tracer } from "../../graph/tracer.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { RENDER_TARGETS, RENDERERS, renderSource } from "../../kernels/render/mod.ts";
import { build, probes } from "./probes.ts";

const typical = (t: (typeof RENDER_TARGETS)[number]) => {
  const r = RENDERERS[t];
  return { backend: r.backend, device: `typical ${t}`, caps: r.caps, memory: { totalBytes: 0 }, watchdogBudget: 0 };
};

test("every op the graph accepts lowers and renders on every target (or the graph refuses it)", { timeout: 300_000 }, () => {
  const all = probes();
  const covered = new Set(all.map((p) => p.op));
  // Storage leaves are every probe's inputs (a literal: a buffer with its bytes); collectives are the next test's.
  const ops = ALL_OPS.filter((o) => OPS[o].lower !== "buffer" && OPS[o].lower !== "group");
  assert.deepEqual(ops.filter((o) => !covered.has(o)), [], "ops without a probe");
  const bad: string[] = [];
  const notLowered = new Set<string>();
  let accepted = 0;
  for (const p of all) {
    const g = build(p);
    if (!g) continue;
    accepted++;
    for (const t of RENDER_TARGETS) {
      const why = OPS[p.op].notLowered?.[t as keyof NonNullable<(typeof OPS)[Op]["notLowered"]>];
      try {
        const prog = compileGraph(g, typical(t));
        for (const s of prog.steps) if (s.k === "kernel") renderSource(s.kernel, t);
        if (why) bad.push(`${p.name} on ${t}: lowers, but its record says not (${why})`);
      } catch (e) {
        if (why) notLowered.add(`${p.op} on ${t}: ${why}`);
        else bad.push(`${p.name} on ${t}: ${(e as Error).message.split("\n")[0]}`);
      }
    }
  }
  console.log(`${all.length} probes, ${accepted} accepted by the graph, ${bad.length} (probe, target) pairs failed`);
  for (const n of notLowered) console.log(`  not lowered (by its record): ${n}`);
  assert.ok(accepted > 400, `only ${accepted} probes accepted`);
  assert.deepEqual(bad, []);
});

test("a collective is not lowered on any one device, and lowering one names the op and says why", () => {
  for (const op of ALL_OPS.filter((o) => OPS[o].lower === "group")) {
    const t = new Tracer();
    const x = t.slot("x", { kind: "Input", dtype: "f32", shape: [2, 4] });
    t.output("y", t.node(op, [x], { ranks: 2, axis: 1 }));
    const g = t.build();
    for (const target of RENDER_TARGETS) {
      assert.throws(() => compileGraph(g, typical(target)), (e) =>
        e instanceof GraphError && e.message.includes(op) && /tp group/.test(e.message), `${op} on ${target}`);
    }
  }
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
