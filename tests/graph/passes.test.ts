import { test } from "node:test";
import assert from "node:assert/strict";
import type { Storage } from "../../graph/dtype.ts";
import { evaluate } from "../../graph/eval.ts";
import type { Graph } from "../../graph/ir.ts";
import { cse, dce, fold, fuse, optimize } from "../../graph/passes/mod.ts";
import { Tracer } from "../../graph/tracer.ts";
import { validate } from "../../graph/validate.ts";
import { randomGraph } from "./random_graph.ts";

// Bit-identical, except that any NaN equals any NaN (payloads are not part of the contract).
function sameBits(a: Storage, b: Storage): boolean {
  if (a.constructor !== b.constructor || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i], y = b[i];
    if (!(Object.is(x, y) || (x !== x && y !== y))) return false;
  }
  return true;
}

const GRAPHS = 520, BATCHES = 4;
const stats = { graphs: 0, folded: 0, merged: 0, grouped: 0 };

// One batch of the property test (batches keep each test short on a loaded machine).
function property(from: number, to: number): void {
  for (let seed = from; seed < to; seed++) {
    const { graph, slots, state } = randomGraph(seed);
    validate(graph);
    const before = evaluate(graph, { slots, state });
    // All passes together on every graph; each pass alone on every fifth.
    const variants: Record<string, Graph> = { optimize: optimize(graph) };
    if (seed % 5 === 0) Object.assign(variants, { fold: fold(graph), cse: cse(graph), dce: dce(graph) });
    for (const [name, g] of Object.entries(variants)) {
      validate(g);
      const after = evaluate(g, { slots, state });
      for (const k of Object.keys(before.output)) {
        assert.ok(sameBits(before.output[k], after.output[k]), `seed ${seed}: ${name} changed output ${k}`);
      }
      for (const k of Object.keys(before.state)) {
        assert.ok(sameBits(before.state[k], after.state[k]), `seed ${seed}: ${name} changed state ${k}`);
      }
    }
    const o = variants.optimize;
    stats.graphs++;
    if (o.nodes.length < graph.nodes.length) stats.folded++;
    if (variants.cse && variants.cse !== graph) stats.merged++;
    if (o.groups!.length) stats.grouped++;
  }
}

for (let b = 0; b < BATCHES; b++) {
  const from = 1 + (b * GRAPHS) / BATCHES, to = 1 + ((b + 1) * GRAPHS) / BATCHES;
  test(`passes keep the oracle's outputs and state bit-identical: random graphs ${from}..${to - 1} of ${GRAPHS}`, () => {
    property(from, to);
  });
}

test("the random graphs exercised every pass", () => {
  // Runs after the batches (tests run in order); the generator must exercise every pass, or the property says little.
  const { graphs, folded, merged, grouped } = stats;
  assert.equal(graphs, GRAPHS);
  assert.ok(folded > GRAPHS / 2 && merged > GRAPHS / 50 && grouped > GRAPHS / 8, `${folded} shrunk, ${merged} merged, ${grouped} grouped`);
});

test("fold turns literal-only work into one literal and drops identity movement", () => {
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype: "f32", shape: [2, 3] });
  const c = g.exp(g.add(g.literal(1, "f32", [2, 3]), g.cast(g.iota([2, 3], 1), "f32")));
  g.output("y", g.mul(g.reshape(g.reshape(x, [3, 2]), [2, 3]), g.permute(g.permute(c, [1, 0]), [1, 0])));
  const o = optimize(g.build());
  assert.deepEqual(o.nodes.map((n) => n.op), ["slot", "literal", "mul"]);
  const lit = o.nodes[1].attrs.data as Float32Array;
  assert.deepEqual(Array.from(lit), [1, 2, 3, 1, 2, 3].map((v) => Math.fround(Math.exp(v))));
});

test("cse merges equal expressions (commutative inputs in either order) and dce drops dead ones", () => {
  const g = new Tracer();
  const a = g.slot("a", { kind: "Input", dtype: "f32", shape: [4] });
  const b = g.slot("b", { kind: "Input", dtype: "f32", shape: [4] });
  g.neg(a); // dead
  const s1 = g.add(a, b), s2 = g.add(b, a), d1 = g.sub(a, b);
  g.output("y", g.mul(s1, g.mul(s2, d1)));
  const c = cse(g.build());
  assert.equal(c.nodes.filter((n) => n.op === "add").length, 1);
  assert.equal(c.nodes.filter((n) => n.op === "sub").length, 1);
  assert.ok(c.nodes.some((n) => n.op === "neg"));
  assert.deepEqual(dce(c).nodes.map((n) => n.op), ["slot", "slot", "add", "sub", "mul", "mul"]);
});

test("fuse groups single-use elementwise trees and leaves shared values as group inputs", () => {
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype: "f32", shape: [2, 4] });
  const w = g.slot("w", { kind: "Input", dtype: "f32", shape: [4] });
  const e = g.exp(x); // used twice: the root of its own group, an input of the others
  const y = g.add(g.mul(e, w), g.tanh(e));
  g.output("y", y);
  g.output("e", e);
  const f = fuse(g.build());
  assert.equal(f.groups!.length, 1);
  const grp = f.groups![0];
  assert.equal(grp.root, y.id);
  assert.deepEqual(grp.nodes.map((i) => f.nodes[i].op), ["broadcast", "mul", "tanh", "add"]);
  assert.deepEqual(grp.inputs, [w.id, e.id]);
});
