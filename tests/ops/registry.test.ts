// The op registry (graph/ops/): one record per op, and the records agree with what reads them. An op named in
// graph/ir.ts's Op union without a record, a record without a probe in the lowering sweep (tests/ops/lowers.test.ts
// derives its op list from the registry), a record saying "kernel" without a NODE_LOWERERS entry, or a lowerer
// without a record all fail here. No device.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { GraphError, type Op } from "../../graph/ir.ts";
import { ALL_OPS, COMPOSITE, isElementwise, LEAF, OP_DOC, OPS } from "../../graph/ops.ts";
import { EXPAND } from "../../graph/composites.ts";
import { Tracer } from "../../graph/tracer.ts";
import { COMPOSITE_OPS } from "../../graph/ops/composite.ts";
import { UNARY_OPS } from "../../graph/unary.ts";
import { BINARY_OPS } from "../../graph/binary.ts";

const DECLARED: Record<string, object> = { COMPOSITE_OPS, UNARY_OPS, BINARY_OPS };
import { NODE_LOWERERS, UNIT_LOWERERS } from "../../kernels/lower.ts";

/**
 * The op names graph/ir.ts declares in the unions that make up Op: string literals, plus the keys of the tables
 * a union is declared as (`keyof typeof UNARY_OPS`: such an op is declared by its record).
 */
function unionNames(): Set<string> {
  const src = readFileSync(new URL("../../graph/ir.ts", import.meta.url), "utf8");
  const names = new Set<string>();
  for (const t of ["LeafOp", "UnaryOp", "BinaryOp", "CompareOp", "OtherOp", "CompositeOp", "CollectiveOp"]) {
    const m = src.match(new RegExp(`export type ${t} =([^;]*);`));
    assert.ok(m, `graph/ir.ts declares ${t}`);
    for (const q of m[1].replace(/\/\/[^\n]*/g, "").matchAll(/"([a-z_0-9]+)"/g)) names.add(q[1]);
    for (const q of m[1].matchAll(/keyof typeof (\w+)/g)) {
      assert.ok(q[1] in DECLARED, `${t} is the keys of ${q[1]}, which this test does not know`);
      for (const k of Object.keys(DECLARED[q[1]])) names.add(k);
    }
  }
  return names;
}

test("every op of graph/ir.ts's Op union has a record, and every record is an op of it", () => {
  const names = unionNames();
  assert.ok(names.size > 50, `${names.size} names parsed`);
  assert.deepEqual([...names].filter((n) => !ALL_OPS.includes(n as Op)), [], "ops without a record");
  assert.deepEqual(ALL_OPS.filter((n) => !names.has(n)), [], "records of no op");
});

test("the graph refuses an op without a record, naming it", () => {
  const t = new Tracer();
  const x = t.slot("x", { kind: "Input", dtype: "f32", shape: [4] });
  assert.throws(() => t.node("frobnicate" as Op, [x]), (e) => e instanceof GraphError && /unknown op frobnicate/.test(e.message));
  assert.throws(() => t.node("toString" as Op, [x]), (e) => e instanceof GraphError && /unknown op/.test(e.message));
});

test("every record is whole: a doc, a type rule, an oracle, a tolerance rule and a lowering", () => {
  const bad: string[] = [];
  for (const op of ALL_OPS) {
    const r = OPS[op];
    if (!r.doc || OP_DOC[op] !== r.doc) bad.push(`${op}: no doc`);
    if (typeof r.infer !== "function") bad.push(`${op}: no type rule`);
    // const, slot and state are read from the evaluation's inputs; every other op has an oracle.
    const input = op === "const" || op === "slot" || op === "state";
    if (!input && !r.eval && !r.expand) bad.push(`${op}: no oracle (eval or expand)`);
    if (r.eval && r.expand) bad.push(`${op}: two oracles`);
    if (r.expand && r.kind !== "composite") bad.push(`${op}: an expansion on a ${r.kind} op`);
    if (typeof r.tolerance === "function" && r.kind !== "composite") bad.push(`${op}: a whole-composite bound on a ${r.kind} op`);
    if (r.tolerance === "expansion" && !r.expand) bad.push(`${op}: bounded through an expansion it does not have`);
    if ((r.lower === "unit") !== (r.unit !== undefined)) bad.push(`${op}: lower ${r.lower} with unit ${r.unit}`);
    if (r.lower === "expand" && !r.expand) bad.push(`${op}: lowered through an expansion it does not have`);
    if (r.lower === "buffer" && r.kind !== "leaf") bad.push(`${op}: a buffer that is not a leaf`);
    if ((r.lower === "group") !== (r.kind === "collective")) bad.push(`${op}: lower ${r.lower} on a ${r.kind} op`);
  }
  assert.deepEqual(bad, []);
  // The derived sets the rest of the code reads.
  assert.deepEqual([...COMPOSITE].filter((op) => !EXPAND[op] && !OPS[op].eval), []);
  assert.ok(LEAF.has("iota") && LEAF.has("const") && !LEAF.has("add"));
});

test("kernels/lower.ts's tables are the records' lowerings: one lowerer per op that says kernel or view, a unit lowerer per unit", () => {
  const bad: string[] = [];
  for (const op of ALL_OPS) {
    const r = OPS[op], has = op in NODE_LOWERERS;
    if ((r.lower === "kernel" || r.lower === "view") !== has) bad.push(`${op}: lower ${r.lower} but ${has ? "a" : "no"} NODE_LOWERERS entry`);
    if ((r.lower === "elementwise") !== isElementwise(op)) bad.push(`${op}: lower ${r.lower}, isElementwise ${isElementwise(op)}`);
    if (r.unit && !(r.unit in UNIT_LOWERERS)) bad.push(`${op}: unit ${r.unit} has no UNIT_LOWERERS entry`);
  }
  for (const op of Object.keys(NODE_LOWERERS)) if (!(op in OPS)) bad.push(`NODE_LOWERERS.${op} lowers no op`);
  assert.deepEqual(bad, []);
});
