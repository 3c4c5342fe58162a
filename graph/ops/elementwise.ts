// The elementwise primitives as op records: unary and binary ops (their per-op facts live in graph/unary.ts and
// graph/binary.ts), comparisons, select and cast. Each element of the result depends only on the same element of
// each input; every one lowers as a member of a fused elementwise kernel (kernels/lib/elementwise.ts).
import { decodeHalf, type DType, encodeHalf, isInt, SIZE, type Storage, storageFor } from "../dtype.ts";
import { type BinaryOp, type CompareOp, type Node, sameShape, type UnaryOp } from "../ir.ts";
import { UNARY_OPS } from "../unary.ts";
import { BINARY_OPS } from "../binary.ts";
import { arity, fail, fmt, likeFirst, needFloat, noBlock, type OpRecord, same } from "./record.ts";

function isHalf(d: DType): d is "f16" | "bf16" {
  return d === "f16" || d === "bf16";
}
const fromF32 = (d: DType, f: Float32Array): Storage => (d === "f32" ? f : encodeHalf(d as "f16" | "bf16", f));

// f16/bf16 compute on their f32 values and round once to the half type.
function unary(n: Node, [x]: Node[], [xs]: Storage[]): Storage {
  const half = isHalf(x.dtype);
  const a = half ? decodeHalf(x.dtype as "f16", xs as Uint16Array) : xs;
  const o = half || x.dtype === "f32" ? new Float32Array(a.length) : storageFor(n.dtype, a.length);
  const len = a.length;
  const f = UNARY_OPS[n.op as UnaryOp].f;
  for (let i = 0; i < len; i++) o[i] = f(a[i]);
  return half ? fromF32(n.dtype, o as Float32Array) : o;
}

function binary(n: Node, [x]: Node[], [xs, ys]: Storage[]): Storage {
  const d = x.dtype, half = isHalf(d);
  const a = half ? decodeHalf(d as "f16", xs as Uint16Array) : xs;
  const b = half ? decodeHalf(d as "f16", ys as Uint16Array) : ys;
  const float = half || d === "f32";
  const o = float ? new Float32Array(a.length) : storageFor(d, a.length);
  const len = a.length;
  const r = BINARY_OPS[n.op as BinaryOp], f = float ? r.f : r.int ?? r.f;
  for (let i = 0; i < len; i++) o[i] = f(a[i], b[i]);
  return half ? fromF32(d, o as Float32Array) : o;
}

function compare(n: Node, [x]: Node[], [xs, ys]: Storage[]): Storage {
  const half = isHalf(x.dtype);
  const a = half ? decodeHalf(x.dtype as "f16", xs as Uint16Array) : xs;
  const b = half ? decodeHalf(x.dtype as "f16", ys as Uint16Array) : ys;
  const o = new Uint8Array(a.length), len = a.length;
  switch (n.op) {
    case "eq": for (let i = 0; i < len; i++) o[i] = a[i] === b[i] ? 1 : 0; break;
    case "ne": for (let i = 0; i < len; i++) o[i] = a[i] !== b[i] ? 1 : 0; break;
    case "lt": for (let i = 0; i < len; i++) o[i] = a[i] < b[i] ? 1 : 0; break;
    case "le": for (let i = 0; i < len; i++) o[i] = a[i] <= b[i] ? 1 : 0; break;
    case "gt": for (let i = 0; i < len; i++) o[i] = a[i] > b[i] ? 1 : 0; break;
    case "ge": for (let i = 0; i < len; i++) o[i] = a[i] >= b[i] ? 1 : 0; break;
  }
  return o;
}

const INT_RANGE: Record<string, [number, number]> = {
  i32: [-2147483648, 2147483647], u32: [0, 4294967295], i8: [-128, 127], u8: [0, 255],
};

function cast(n: Node, [x]: Node[], [xs]: Storage[]): Storage {
  const from = x.dtype, to = n.dtype;
  const a = isHalf(from) ? decodeHalf(from, xs as Uint16Array) : xs;
  const len = a.length;
  if (to === "f32") {
    const o = new Float32Array(len);
    o.set(a);
    return o;
  }
  if (isHalf(to)) return encodeHalf(to, a);
  const o = storageFor(to, len);
  if (to === "bool") {
    for (let i = 0; i < len; i++) o[i] = a[i] !== 0 ? 1 : 0;
  } else if (from === "f32" || isHalf(from)) {
    const [lo, hi] = INT_RANGE[to];
    for (let i = 0; i < len; i++) {
      const t = Math.trunc(a[i]);
      o[i] = t !== t ? 0 : t < lo ? lo : t > hi ? hi : t;
    }
  } else {
    o.set(a); // integer to integer: the store wraps modulo 2^bits
  }
  return o;
}

const unaryRule: OpRecord["infer"] = (op, ins, a, ref) => {
  arity(ins, 1, 1, ref);
  const x = ins[0];
  noBlock(x, ref);
  const input = UNARY_OPS[op as UnaryOp].input;
  if (input === "bool") {
    if (x.dtype !== "bool") fail("dtype", ref, `${op} needs bool, got ${fmt(x)}`);
  } else if (input === "float") needFloat(x, ref);
  else if (x.dtype === "bool") fail("dtype", ref, `${op} of bool`);
  return likeFirst(x, a);
};

const binaryRule: OpRecord["infer"] = (op, ins, a, ref) => {
  arity(ins, 2, 2, ref);
  const [x, y] = ins;
  noBlock(x, ref);
  same(x, y, ref, "operands");
  const input = BINARY_OPS[op as BinaryOp].input;
  if (input === "logical") {
    if (x.dtype !== "bool" && !isInt(x.dtype)) fail("dtype", ref, `${op} needs bool or integers, got ${fmt(x)}`);
  } else if (input === "float") needFloat(x, ref);
  else if (x.dtype === "bool") fail("dtype", ref, `${op} of bool`);
  return likeFirst(x, a);
};

const compareRule: OpRecord["infer"] = (_op, ins, a, ref) => {
  arity(ins, 2, 2, ref);
  noBlock(ins[0], ref);
  same(ins[0], ins[1], ref, "operands");
  return { dtype: "bool", shape: [...ins[0].shape], attrs: a };
};

const record = (kind: OpRecord["kind"], doc: string, infer: OpRecord["infer"], evalFn: OpRecord["eval"], tolerance: OpRecord["tolerance"]): OpRecord =>
  ({ kind, doc, infer, eval: evalFn, tolerance, lower: "elementwise" });

const COMPARE_DOC: Record<CompareOp, string> = { eq: "a==b", ne: "a!=b", lt: "a<b", le: "a<=b", gt: "a>b", ge: "a>=b" };

export const UNARY_RECORDS = Object.fromEntries(
  Object.entries(UNARY_OPS).map(([k, r]) => [k, record("unary", r.doc, unaryRule, unary, "propagated")]),
) as Record<UnaryOp, OpRecord>;
export const BINARY_RECORDS = Object.fromEntries(
  Object.entries(BINARY_OPS).map(([k, r]) => [k, record("binary", r.doc, binaryRule, binary, "propagated")]),
) as Record<BinaryOp, OpRecord>;
// A flip of a comparison is a tier-3 event (a mask or a token changing), not a tier-2 one: exact.
export const COMPARE_RECORDS = Object.fromEntries(
  Object.entries(COMPARE_DOC).map(([k, doc]) => [k, record("compare", doc, compareRule, compare, "exact")]),
) as Record<CompareOp, OpRecord>;

export const OTHER_ELEMENTWISE: Record<"select" | "cast", OpRecord> = {
  select: record("elementwise", "[cond, a, b] -> cond ? a : b", (_op, ins, a, ref) => {
    arity(ins, 3, 3, ref);
    const [c, x, y] = ins;
    if (c.dtype !== "bool") fail("dtype", ref, `condition must be bool, got ${fmt(c)}`);
    noBlock(x, ref);
    same(x, y, ref, "branches");
    if (!sameShape(c.shape, x.shape)) fail("shape", ref, `condition ${fmt(c)} vs branches ${fmt(x)}`);
    return likeFirst(x, a);
  }, (n, _ins, [c, a, b]) => {
    const o = storageFor(n.dtype, a.length);
    for (let i = 0; i < o.length; i++) o[i] = c[i] ? a[i] : b[i];
    return o;
  }, "propagated"),
  cast: record(
    "elementwise",
    "to attrs.to: float->int truncates and saturates (NaN->0), ->f16/bf16 rounds to nearest even",
    (_op, ins, a, ref) => {
      arity(ins, 1, 1, ref);
      noBlock(ins[0], ref);
      if (!a.to || !(a.to in SIZE)) fail("dtype", ref, `cast target must be a scalar dtype, got ${a.to}`);
      return { dtype: a.to, shape: [...ins[0].shape], attrs: a };
    },
    cast,
    "propagated",
  ),
};
