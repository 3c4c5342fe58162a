// The pieces of tensor parallelism one by one: the collective ops' type rules and oracle, the oracle refusing a
// lone rank's collective, folding leaving collectives alone, stage cutting (and its refusal of a State written
// across a collective), weight slicing (views for rows, copies for columns, whole blocks only), and the
// sharding pass's fallback: an op with no rule for a split input gets the whole value and the same answer.
import { test } from "node:test";
import assert from "node:assert/strict";
import { combine } from "../../graph/collective.ts";
import { evaluate } from "../../graph/eval.ts";
import { type Graph, GraphError } from "../../graph/ir.ts";
import { optimize } from "../../graph/passes/mod.ts";
import { shardGraph, type TpPlan } from "../../graph/passes/tp.ts";
import { partOf, rankWeights, ShardError, slicePart } from "../../graph/shard.ts";
import { evalGroup, splitAtCollectives } from "../../graph/stages.ts";
import { Tracer } from "../../graph/tracer.ts";
import { validate } from "../../graph/validate.ts";
import { bufferStore, roleKey, type WeightMap } from "../../graph/weights.ts";

function collectiveGraph(op: "all_reduce" | "all_gather", ranks: number, dtype: "f32" | "i32" = "f32", axis?: number): Graph {
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype, shape: [2, 3] });
  g.output("y", g.node(op, [x], { ranks, axis }));
  return g.build();
}

test("collective type rules: all_reduce keeps dtype and shape of floats; all_gather multiplies its axis; bad ones name the problem", () => {
  const r = collectiveGraph("all_reduce", 4);
  assert.deepEqual(r.nodes[r.outputs.y].shape, [2, 3]);
  const gth = collectiveGraph("all_gather", 4, "i32", 1);
  assert.deepEqual(gth.nodes[gth.outputs.y].shape, [2, 12]);
  assert.equal(gth.nodes[gth.outputs.y].dtype, "i32");
  assert.throws(() => collectiveGraph("all_reduce", 2, "i32"), (e: unknown) => e instanceof GraphError && /sums floats/.test(e.message));
  assert.throws(() => collectiveGraph("all_reduce", 0), (e: unknown) => e instanceof GraphError && /ranks >= 1/.test(e.message));
  assert.throws(() => collectiveGraph("all_gather", 2, "f32", 2), (e: unknown) => e instanceof GraphError && e.code === "axis");
});

test("the collective oracle: a sum in rank order with one f32 rounding per add; a gather concatenates in rank order", () => {
  const a = Float32Array.from([1e8, 1, 2]), b = Float32Array.from([1, 1e-8, 3]), c = Float32Array.from([-1e8, 0, 4]);
  const s = combine("all_reduce", "f32", [3], { ranks: 3 }, [a, b, c]);
  assert.deepEqual([...s], [Math.fround(Math.fround(1e8 + 1) - 1e8), Math.fround(1 + 1e-8), 9]);
  // [2, 2] parts along axis 1 -> [2, 4]: row 0 = r0 row 0, r1 row 0.
  const g = combine("all_gather", "i32", [2, 2], { ranks: 2, axis: 1 }, [Int32Array.from([1, 2, 3, 4]), Int32Array.from([5, 6, 7, 8])]);
  assert.deepEqual([...g], [1, 2, 5, 6, 3, 4, 7, 8]);
  assert.throws(() => combine("all_reduce", "f32", [3], { ranks: 2 }, [a]), GraphError);
});

test("evaluate alone: a group of one is the identity, a larger group's collective is refused (evalGroup runs it)", async () => {
  const one = collectiveGraph("all_reduce", 1);
  assert.deepEqual([...evaluate(one, { slots: { x: [1, 2, 3, 4, 5, 6] } }).output.y], [1, 2, 3, 4, 5, 6]);
  const two = collectiveGraph("all_reduce", 2);
  assert.throws(() => evaluate(two, { slots: { x: [1, 2, 3, 4, 5, 6] } }), (e: unknown) => e instanceof GraphError && /evalGroup/.test(e.message));
  const res = await evalGroup(two, 2, (r) => ({ slots: { x: [1, 2, 3, 4, 5, 6].map((v) => v * (r + 1)) } }));
  assert.deepEqual([...res[1].output.y], [3, 6, 9, 12, 15, 18]);
});

test("folding never folds a collective, even of a literal", () => {
  const g = new Tracer();
  g.output("y", g.node("all_reduce", [g.literal(2, "f32", [4])], { ranks: 2 }));
  const o = optimize(g.build());
  assert.equal(o.nodes.filter((n) => n.op === "all_reduce").length, 1);
});

test("stages: values cross as tp.<id> slots and outputs; a State written across a collective is refused", () => {
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype: "f32", shape: [4] });
  const r = g.node("all_reduce", [g.mul(x, 2)], { ranks: 2 });
  g.output("y", g.add(r, x));
  const st = splitAtCollectives(g.build());
  assert.equal(st.stages.length, 2);
  assert.equal(st.stages[0].collectives.length, 1);
  assert.ok(st.stages[1].graph.nodes.some((n) => n.op === "slot" && n.attrs.name?.startsWith("tp.")));
  for (const s of st.stages) validate(s.graph);

  const h = new Tracer();
  const s0 = h.state("kv", "f32", [4]);
  const y = h.slot("y", { kind: "Input", dtype: "f32", shape: [4] });
  const red = h.node("all_reduce", [h.add(s0, y)], { ranks: 2 });
  h.writeState("kv", h.add(red, y));
  h.output("o", red);
  assert.throws(() => splitAtCollectives(h.build()), (e: unknown) => e instanceof GraphError && /state kv is written in stage 1 but read in stage 0/.test(e.message));
});

test("weight slices: rows are views of the file's bytes, columns are copies of this rank's columns, blocks split whole", () => {
  const w = Float32Array.from({ length: 4 * 6 }, (_, i) => i);
  const bytes = new Uint8Array(w.buffer);
  const info = { name: "w", dtype: "f32" as const, shape: [4, 6], byteLength: bytes.byteLength };
  const rows = slicePart(info, bytes, { axis: 0, count: 2 }, 1);
  assert.equal(rows.bytes.buffer, bytes.buffer, "a row split is a view");
  assert.deepEqual([...new Float32Array(rows.bytes.slice().buffer)], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]);
  const cols = slicePart(info, bytes, { axis: 1, count: 3 }, 2);
  assert.deepEqual(cols.info.shape, [4, 2]);
  assert.deepEqual([...new Float32Array(cols.bytes.slice().buffer)], [4, 5, 10, 11, 16, 17, 22, 23]);
  // q8_0: 64 columns = 2 blocks of 34 bytes per row; a 2-way column split is one block each, 4-way is not whole.
  const q = { name: "q", dtype: "q8_0" as const, shape: [2, 64], byteLength: 2 * 68 };
  const qb = Uint8Array.from({ length: 136 }, (_, i) => i);
  assert.deepEqual([...slicePart(q, qb, { axis: 1, count: 2 }, 1).bytes], [...qb.subarray(34, 68), ...qb.subarray(102, 136)]);
  assert.throws(() => slicePart(q, qb, { axis: 1, count: 4 }, 0), (e: unknown) => e instanceof ShardError && /not whole q8_0 blocks/.test(e.message));
  assert.throws(() => slicePart(info, bytes, { axis: 0, count: 3 }, 0), (e: unknown) => e instanceof ShardError && /does not split 3 ways/.test(e.message));
  // K/V heads replicated: 2 parts over 4 ranks -> ranks 0,1 hold part 0 and ranks 2,3 part 1.
  assert.deepEqual([0, 1, 2, 3].map((r) => partOf(r, 4, 2)), [0, 0, 1, 1]);
});

test("a rank's weights: split roles bound under their shard key, a `whole` role bound both ways, others untouched", () => {
  const data = new Uint8Array(4 * 4 * 3);
  const store = bufferStore(data, [
    { name: "a", dtype: "f32", shape: [2, 2], byteLength: 16, offset: 0 },
    { name: "b", dtype: "f32", shape: [2, 2], byteLength: 16, offset: 16 },
    { name: "c", dtype: "f32", shape: [4], byteLength: 16, offset: 32 },
  ]);
  const map: WeightMap = new Map([["attn.q@0", "a"], ["tok_embd", "b"], ["attn_norm@0", "c"]]);
  const { store: s, map: m } = rankWeights(store, map, { "attn.q": { axis: 0, count: 2 }, tok_embd: { axis: 0, count: 2, whole: true } }, 1, 2);
  assert.deepEqual([...m.keys()].sort(), ["attn.q@0/a0:2", "attn_norm@0", "tok_embd", "tok_embd/a0:2"]);
  assert.equal(m.get("attn_norm@0"), "c");
  assert.deepEqual(s.info(m.get(roleKey({ role: "attn.q", layer: 0, shard: { axis: 0, count: 2 } }))!)!.shape, [1, 2]);
  assert.equal(s.bytes(m.get("tok_embd/a0:2")!).byteOffset, 24, "rank 1's row of b is a view at its offset");
});

test("the sharding pass: tp 1 is the graph itself, an op without a rule gets the whole value, a sharded graph is refused", async () => {
  // x[1,4] · q[6,4] (column-split) -> concat with itself along the split axis (no rule: gathered first).
  const g = new Tracer();
  const x = g.slot("x", { kind: "Input", dtype: "f32", shape: [1, 4] });
  const y = g.matmul(x, g.const({ role: "attn.q" }, "f32", [6, 4]));
  g.output("y", g.concat([y, y], 1));
  const graph = g.build();
  const plan: TpPlan = { tp: 2, roles: { "attn.q": { axis: 0, count: 2 } } };
  assert.equal(shardGraph(graph, { tp: 1, roles: {} }), graph);
  const s = validate(shardGraph(graph, plan));
  assert.equal(s.nodes.filter((n) => n.op === "all_gather").length, 1);
  assert.throws(() => shardGraph(s, plan), (e: unknown) => e instanceof GraphError && /already sharded/.test(e.message));
  const q = Float32Array.from({ length: 24 }, (_, i) => (i % 7) - 3);
  const xs = [0.5, -1, 2, 0.25];
  const whole = evaluate(graph, { consts: { "attn.q": q }, slots: { x: xs } }).output.y;
  const res = await evalGroup(s, 2, (r) => ({ consts: { "attn.q/a0:2": q.slice(r * 12, r * 12 + 12) }, slots: { x: xs } }));
  assert.deepEqual([...res[0].output.y], [...whole]);
});
