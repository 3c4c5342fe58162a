// The leaves, one record each: storage classes (const, slot, state), literals and index tensors. Their dtype and
// shape come with the node; the type rule checks them and the attrs each kind needs.
import { BLOCK, encodeHalf, isBlock, SIZE, type Storage, storageFor } from "../dtype.ts";
import { type Attrs, type Node, type NodeRef, numel, type Op, stridesOf } from "../ir.ts";
import { arity, checkShape, fail, type Inferred, noBlock, normAxis, type OpRecord, type TypeInfo } from "./record.ts";

type LeafOp = "const" | "slot" | "state" | "literal" | "iota";

/** The checks every leaf shares, then `own`'s for its kind. */
function leafRule(own: (leaf: TypeInfo, shape: number[], a: Attrs, ref: NodeRef, op: Op) => void): OpRecord["infer"] {
  return (op, ins, a, ref, leaf): Inferred => {
    if (!leaf) fail("attr", ref, "a leaf needs a dtype and shape");
    arity(ins, 0, 0, ref);
    const shape = Array.isArray(leaf.shape) && leaf.shape.length === 0 ? [] : checkShape(leaf.shape, ref);
    if (!(leaf.dtype in SIZE) && !(leaf.dtype in BLOCK)) fail("dtype", ref, `unknown dtype ${leaf.dtype}`);
    own(leaf, shape, a, ref, op);
    return { dtype: leaf.dtype, shape: [...shape], attrs: a };
  };
}

const named = leafRule((leaf, shape, a, ref, op) => {
  if (typeof a.name !== "string" || !a.name) fail("attr", ref, `${op} needs a name`);
  if (op === "slot" && !a.kind) fail("attr", ref, "slot needs a kind");
  noBlock(leaf, ref, op);
  if (op === "state" && shape.length === 0) fail("shape", ref, "a state needs a capacity dim");
});

/** The oracle of a literal: its data, or its value splat over its shape. */
export function literalValue(n: Node): Storage {
  if (n.attrs.data) return n.attrs.data;
  const o = storageFor(n.dtype, numel(n.shape));
  const v = n.attrs.value!;
  o.fill(n.dtype === "f16" || n.dtype === "bf16" ? encodeHalf(n.dtype, [v])[0] : v);
  return o;
}

function iotaValue(n: Node): Storage {
  const o = storageFor(n.dtype, numel(n.shape));
  const ax = n.attrs.axis!, st = stridesOf(n.shape)[ax], len = n.shape[ax];
  const half = n.dtype === "f16" || n.dtype === "bf16";
  for (let i = 0; i < o.length; i++) {
    const x = Math.floor(i / st) % len;
    o[i] = half ? encodeHalf(n.dtype as "f16", [x])[0] : x;
  }
  return o;
}

export const LEAF_OPS: Record<LeafOp, OpRecord> = {
  const: {
    kind: "leaf", doc: "weight by attrs.role; any dtype incl. block types", tolerance: "exact", lower: "buffer",
    infer: leafRule((leaf, shape, a, ref) => {
      if (!a.role || typeof a.role.role !== "string") fail("attr", ref, "const needs a role");
      if (isBlock(leaf.dtype) && shape.length > 0 && shape[shape.length - 1] % BLOCK[leaf.dtype].elems !== 0) {
        fail("shape", ref, `inner dim ${shape[shape.length - 1]} is not a whole number of ${leaf.dtype} blocks`);
      }
    }),
  },
  slot: { kind: "leaf", doc: "per-step input attrs.name of attrs.kind", tolerance: "exact", lower: "buffer", infer: named },
  state: { kind: "leaf", doc: "State buffer attrs.name as it is when the step begins", tolerance: "exact", lower: "buffer", infer: named },
  literal: {
    kind: "leaf", doc: "attrs.value splat, or attrs.data (dtype storage)", tolerance: "exact", lower: "buffer",
    infer: leafRule((leaf, shape, a, ref, op) => {
      noBlock(leaf, ref, op);
      if (a.data === undefined && typeof a.value !== "number") fail("attr", ref, "literal needs a value or data");
      if (a.data !== undefined && a.data.length !== numel(shape)) {
        fail("shape", ref, `literal data has ${a.data.length} elements for shape [${shape}]`);
      }
    }),
    eval: literalValue,
  },
  iota: {
    kind: "leaf", doc: "index along attrs.axis, any non-block non-bool dtype", tolerance: "exact", lower: "kernel",
    infer: leafRule((leaf, shape, a, ref, op) => {
      noBlock(leaf, ref, op);
      if (leaf.dtype === "bool") fail("dtype", ref, "iota of bool");
      a.axis = normAxis(a.axis, shape.length, ref);
    }),
    eval: iotaValue,
  },
};
