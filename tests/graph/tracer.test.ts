import { test } from "node:test";
import assert from "node:assert/strict";
import { evaluate } from "../../graph/eval.ts";
import { type Graph, GraphError } from "../../graph/ir.ts";
import { Tracer } from "../../graph/tracer.ts";
import { validate } from "../../graph/validate.ts";

// Asserts fn throws a GraphError with `code` whose message names the node (op and id, and label if given).
function throwsGraph(fn: () => unknown, code: GraphError["code"], op: string, label?: string): GraphError {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof GraphError, `not a GraphError: ${e}`);
    assert.equal(e.code, code, e.message);
    assert.equal(e.node?.op, op, e.message);
    assert.match(e.message, new RegExp(`${op} #${e.node!.id}`));
    if (label) {
      assert.equal(e.node?.label, label);
      assert.ok(e.message.includes(`(${label})`), e.message);
    }
    return e;
  }
  assert.fail("did not throw");
}

test("trace-time shape errors name the op, the id it would get, and the scope label", () => {
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype: "f32", shape: [1, 64] });
  const w = g.const({ role: "attn.q", layer: 3 }, "f32", [64, 60]);
  const e = throwsGraph(() => g.scope("blk.3", () => g.matmul(x, w)), "shape", "matmul", "blk.3");
  assert.equal(e.node!.id, 2);
  throwsGraph(() => g.add(x, g.slot("y", { kind: "Input", dtype: "f32", shape: [3, 5] })), "shape", "add");
  throwsGraph(() => g.reshape(x, [3, 7]), "shape", "reshape");
  throwsGraph(() => g.broadcast(x, [2, 1, 63]), "shape", "broadcast");
  throwsGraph(() => g.slice(x, 1, 10, 70), "shape", "slice");
  throwsGraph(() => g.rmsnorm(x, g.literal(1, "f32", [32]), 1e-5), "shape", "rmsnorm");
});

test("trace-time dtype errors", () => {
  const g = new Tracer();
  const f = g.slot("f", { kind: "Input", dtype: "f32", shape: [4] });
  const i = g.slot("i", { kind: "Input", dtype: "i32", shape: [4] });
  throwsGraph(() => g.add(f, i), "dtype", "add");
  throwsGraph(() => g.exp(i), "dtype", "exp");
  throwsGraph(() => g.gather(g.literal(0, "f32", [4, 2]), f), "dtype", "gather");
  throwsGraph(() => g.select(f, f, f), "dtype", "select");
  const q = g.const({ role: "w" }, "q8_0", [4, 32]);
  throwsGraph(() => g.add(q, 1), "dtype", "add");
  throwsGraph(() => g.reshape(q, [128]), "dtype", "reshape");
  throwsGraph(() => g.const({ role: "bad" }, "q4_k", [4, 100]), "shape", "const");
  throwsGraph(() => g.state("s", "f32", [4, 2]) && g.writeState("s", i), "dtype", "writeState");
});

test("bad axes and permutations", () => {
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype: "f32", shape: [2, 3] });
  throwsGraph(() => g.sum(x, 2), "axis", "reduce");
  throwsGraph(() => g.softmax(x, -3), "axis", "softmax");
  throwsGraph(() => g.permute(x, [0, 0]), "axis", "permute");
  throwsGraph(() => g.concat([x, x], 5), "axis", "concat");
});

test("unbound and duplicate declarations", () => {
  const g = new Tracer();
  throwsGraph(() => g.slot("pos"), "unbound", "slot");
  g.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
  assert.equal(g.slot("pos").id, 0); // declared now: referring by name works
  throwsGraph(() => g.slot("pos", { kind: "Pos", dtype: "i32", shape: [2] }), "duplicate", "slot");
  throwsGraph(() => g.slot("pos", { kind: "Token", dtype: "i32", shape: [1] }), "duplicate", "slot");
  throwsGraph(() => g.writeState("kv", g.slot("pos")), "unbound", "writeState");
  const c = g.const({ role: "tok_embd" }, "f32", [8, 4]);
  assert.equal(g.const({ role: "tok_embd" }, "f32", [8, 4]), c);
  throwsGraph(() => g.const({ role: "tok_embd" }, "f16", [8, 4]), "duplicate", "const");
  g.output("y", c);
  throwsGraph(() => g.output("y", c), "duplicate", "output");
  throwsGraph(() => new Tracer().build(), "unbound", "build");
});

test("operands from another tracer are refused", () => {
  const a = new Tracer(), b = new Tracer();
  const x = a.slot("x", { kind: "Input", dtype: "f32", shape: [2] });
  b.slot("x", { kind: "Input", dtype: "f32", shape: [2] });
  throwsGraph(() => b.neg(x), "order", "neg");
});

test("validate catches a graph edited into inconsistency", () => {
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype: "f32", shape: [2, 3] });
  g.output("y", g.sum(g.exp(x)));
  const good = g.build();
  validate(good);
  const bad1: Graph = structuredClone(good);
  bad1.nodes[2].shape = [2, 2];
  throwsGraph(() => validate(bad1), "shape", "reduce");
  const bad2: Graph = structuredClone(good);
  bad2.nodes[1].inputs = [2];
  throwsGraph(() => validate(bad2), "order", "exp");
  const bad3: Graph = structuredClone(good);
  bad3.nodes[1].op = "not";
  throwsGraph(() => validate(bad3), "dtype", "not");
});

test("evaluation errors: missing slot or const value, indices out of range", () => {
  const g = new Tracer();
  const t = g.const({ role: "tok_embd" }, "f32", [4, 2]);
  const tok = g.slot("token", { kind: "Token", dtype: "i32", shape: [1] });
  const pos = g.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
  const rows = g.gather(t, tok);
  const kv = g.state("kv", "f32", [3, 2]);
  g.writeState("kv", g.updateSlice(kv, rows, pos));
  g.output("rows", rows);
  const graph = g.build();
  const consts = { tok_embd: new Float32Array(8) };
  throwsGraph(() => evaluate(graph, { slots: { token: [1], pos: [0] } }), "unbound", "const");
  throwsGraph(() => evaluate(graph, { consts, slots: { token: [1] } }), "unbound", "slot");
  throwsGraph(() => evaluate(graph, { consts, slots: { token: [1, 2], pos: [0] } }), "shape", "slot");
  throwsGraph(() => evaluate(graph, { consts: { tok_embd: new Float32Array(7) }, slots: { token: [1], pos: [0] } }), "shape", "const");
  throwsGraph(() => evaluate(graph, { consts, slots: { token: [4], pos: [0] } }), "range", "gather");
  throwsGraph(() => evaluate(graph, { consts, slots: { token: [3], pos: [3] } }), "range", "dynamic_update_slice");
  const r = evaluate(graph, { consts, slots: { token: [3], pos: [2] } });
  assert.equal(r.state.kv.length, 6);
});
