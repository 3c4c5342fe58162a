// The op set: which ops exist, what they accept, and the dtype and shape each produces. The tracer and
// validate() both go through inferNode, so a graph that validates is one the oracle and the planner can read.
import { BLOCK, type DType, isBlock, isFloat, isInt, SIZE } from "./dtype.ts";
import { SAMPLER_WORDS } from "./sample.ts";
import { UNARY_OPS } from "./unary.ts";
import { BINARY_OPS } from "./binary.ts";
import { COLLECTIVE_OPS, inferCollective, isCollective } from "./collective.ts";
import { EXTRA_ENTRY, EXTRA_HEAD, MAX_TOP_LOGPROBS, maskWords } from "./logits.ts";
import {
  type Attrs,
  type BinaryOp,
  type CompareOp,
  type CompositeOp,
  GraphError,
  type NodeRef,
  numel,
  type Op,
  sameShape,
  type UnaryOp,
} from "./ir.ts";

export const UNARY: ReadonlySet<Op> = new Set<UnaryOp>(Object.keys(UNARY_OPS) as UnaryOp[]);
export const BINARY: ReadonlySet<Op> = new Set<BinaryOp>(Object.keys(BINARY_OPS) as BinaryOp[]);
export const COMPARE: ReadonlySet<Op> = new Set<CompareOp>(["eq", "ne", "lt", "le", "gt", "ge"]);
export const COMPOSITE: ReadonlySet<Op> = new Set<CompositeOp>([
  "rmsnorm", "layernorm", "rope", "softmax", "attention", "paged_attention", "causal_mask", "silu", "gelu", "silu_mul",
  "sample", "logits_process", "logprobs",
]);
export const LEAF: ReadonlySet<Op> = new Set<Op>(["const", "slot", "state", "literal", "iota"]);
/** Ops whose two inputs may be swapped without changing a bit of the result. */
export const COMMUTATIVE: ReadonlySet<Op> = new Set<Op>(["add", "mul", "max", "min", "and", "or", "eq", "ne"]);
/** Ops that only move or copy elements (their oracle result is bit-exact on every backend). */
export const MOVEMENT: ReadonlySet<Op> = new Set<Op>([
  "reshape", "permute", "broadcast", "slice", "concat", "gather", "dynamic_update_slice", "scatter_update",
]);

/** Elementwise ops: each output element depends only on the same element of each input. */
export function isElementwise(op: Op): boolean {
  return UNARY.has(op) || BINARY.has(op) || COMPARE.has(op) || op === "select" || op === "cast" ||
    op === "silu" || op === "gelu" || op === "silu_mul";
}


/**
 * What each op reads and produces (the documentation of the op set; eval.ts defines the arithmetic).
 */
export const OP_DOC: Record<Op, string> = {
  const: "weight by attrs.role; any dtype incl. block types",
  slot: "per-step input attrs.name of attrs.kind",
  state: "State buffer attrs.name as it is when the step begins",
  literal: "attrs.value splat, or attrs.data (dtype storage)",
  iota: "index along attrs.axis, any non-block non-bool dtype",
  ...(Object.fromEntries(Object.entries(UNARY_OPS).map(([k, r]) => [k, r.doc])) as Record<UnaryOp, string>),
  ...(Object.fromEntries(Object.entries(BINARY_OPS).map(([k, r]) => [k, r.doc])) as Record<BinaryOp, string>),
  eq: "a==b", ne: "a!=b", lt: "a<b", le: "a<=b", gt: "a>b", ge: "a>=b",
  select: "[cond, a, b] -> cond ? a : b",
  cast: "to attrs.to: float->int truncates and saturates (NaN->0), ->f16/bf16 rounds to nearest even",
  reduce: "attrs.fn over attrs.axis, kept as a dim of 1; sum accumulates in f32 in index order",
  argmax: "first index of the maximum along attrs.axis (kept as 1) -> i32; NaN never replaces the first pick",
  matmul: "[x[..., K], w[N, K]] -> [..., N], or batched [B.., M, K]·[B.., N, K] -> [B.., M, N]; w may be a block type",
  gather: "[table[V, ...], idx[...I]] -> [...I, ...]: rows of table; a block table is dequantized to f32",
  reshape: "to attrs.shape", permute: "result axis i = input axis attrs.perm[i]",
  broadcast: "to attrs.shape, numpy rules", slice: "[attrs.start, attrs.end) per axis",
  concat: "along attrs.axis",
  dynamic_update_slice: "[target, update, offset(1 int)] -> target with update written at offset along attrs.axis",
  scatter_update: "[target[R, ...], update[U, ...], index[U]] -> target with row index[u] = update[u]; index < 0 skips",
  rmsnorm: "[x[..., D], w[D]] attrs.eps", layernorm: "[x[..., D], w[D], b[D]] attrs.eps",
  rope: "[x[R, H, D], pos[R] int, factors?[dims/2]] attrs.theta, style, dims",
  softmax: "along attrs.axis",
  attention: "[q[R, H, D], k[C, KVH, D], v[C, KVH, Dv], mask[R, C] bool] attrs.scale -> [R, H, Dv]",
  paged_attention:
    "[q[R, H, D], k[P, KVH, D], v[P, KVH, Dv], table[R, MB] int, pos[R] int] attrs.scale, block -> [R, H, Dv]: row r sees logical positions 0..pos[r], position t at pool row table[r, t / block] * block + t % block",
  causal_mask: "[pos(1 int)] attrs.rows, cap, window? -> bool [rows, cap]: t <= pos + r (and t > pos + r - window)",
  silu: "x·σ(x)", gelu: "tanh approximation", silu_mul: "[a, b] -> silu(a)·b",
  sample: "[logits f32[R, V], params u32[R, SAMPLER_WORDS] (Slot kind Sampler)] -> i32[R, 2] (token, nonfinite); graph/sample.ts",
  logits_process: "[logits f32[R, V], extra u32[R, 8 + 3E], mask u32[R, ceil(V/32)], counts? u32[Q, V]] -> f32[R, V]: bias, bans, penalties, grammar mask; graph/logits.ts",
  logprobs: "[logits f32[R, V], sample i32[R, 2], params u32[R, SAMPLER_WORDS]] attrs.n -> f32[R, 1 + 2n]; graph/logits.ts",
  all_reduce: COLLECTIVE_OPS.all_reduce.doc,
  all_gather: COLLECTIVE_OPS.all_gather.doc,
};

export interface TypeInfo {
  dtype: DType;
  shape: number[];
}

/** Inference result: the node's dtype and shape, and its attrs with axes made non-negative. */
export interface Inferred extends TypeInfo {
  attrs: Attrs;
}

function fail(code: ConstructorParameters<typeof GraphError>[0], ref: NodeRef, msg: string): never {
  throw new GraphError(code, msg, ref);
}

function fmt(t: TypeInfo): string {
  return `${t.dtype}[${t.shape.join(",")}]`;
}

function checkShape(shape: unknown, ref: NodeRef, what = "shape"): number[] {
  if (!Array.isArray(shape) || shape.some((d) => !Number.isInteger(d) || d < 1)) {
    fail("shape", ref, `${what} must be a list of positive integers, got ${JSON.stringify(shape)}`);
  }
  return shape as number[];
}

/** Normalizes an axis against a rank (negative counts from the end). */
export function normAxis(axis: number | undefined, rank: number, ref: NodeRef): number {
  const a = axis ?? -1;
  if (!Number.isInteger(a) || a < -rank || a >= rank) fail("axis", ref, `axis ${axis} out of range for rank ${rank}`);
  return a < 0 ? a + rank : a;
}

function arity(ins: TypeInfo[], lo: number, hi: number, ref: NodeRef): void {
  if (ins.length < lo || ins.length > hi) {
    fail("attr", ref, `takes ${lo === hi ? lo : `${lo}..${hi}`} inputs, got ${ins.length}`);
  }
}

function noBlock(t: TypeInfo, ref: NodeRef, what = "input"): void {
  if (isBlock(t.dtype)) fail("dtype", ref, `${what} ${fmt(t)} is a block type; only matmul and gather read those`);
}

function needFloat(t: TypeInfo, ref: NodeRef, what = "input"): void {
  if (!isFloat(t.dtype)) fail("dtype", ref, `${what} must be f32, f16 or bf16, got ${fmt(t)}`);
}

function needIndex(t: TypeInfo, ref: NodeRef, what: string): void {
  if (t.dtype !== "i32" && t.dtype !== "u32") fail("dtype", ref, `${what} must be i32 or u32, got ${fmt(t)}`);
}

function same(a: TypeInfo, b: TypeInfo, ref: NodeRef, what: string): void {
  if (a.dtype !== b.dtype) fail("dtype", ref, `${what}: dtypes differ: ${fmt(a)} vs ${fmt(b)}`);
  if (!sameShape(a.shape, b.shape)) fail("shape", ref, `${what}: shapes differ: ${fmt(a)} vs ${fmt(b)}`);
}

/** Numpy broadcasting of two shapes, or undefined when they do not broadcast. */
export function broadcastShapes(a: readonly number[], b: readonly number[]): number[] | undefined {
  const r = Math.max(a.length, b.length);
  const out = new Array<number>(r);
  for (let i = 0; i < r; i++) {
    const x = a[a.length - r + i] ?? 1, y = b[b.length - r + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) return undefined;
    out[i] = Math.max(x, y);
  }
  return out;
}

/** Resolves one -1 in a reshape target. */
export function resolveShape(shape: readonly number[], count: number, ref: NodeRef): number[] {
  const free = shape.filter((d) => d === -1).length;
  if (free > 1) fail("shape", ref, `reshape to [${shape}] has more than one -1`);
  const known = shape.reduce((a, d) => (d === -1 ? a : a * d), 1);
  const out = shape.map((d) => (d === -1 ? count / known : d));
  checkShape(out, ref, "reshape target");
  if (numel(out) !== count) fail("shape", ref, `cannot reshape ${count} elements to [${shape}]`);
  return out;
}

/**
 * The dtype and shape a node of `op` produces from inputs `ins`, or a GraphError naming `ref`. Leaves take their
 * dtype and shape from `leaf`.
 */
export function inferNode(op: Op, ins: TypeInfo[], attrs: Attrs, ref: NodeRef, leaf?: TypeInfo): Inferred {
  const a = { ...attrs };
  if (LEAF.has(op)) {
    if (!leaf) fail("attr", ref, "a leaf needs a dtype and shape");
    arity(ins, 0, 0, ref);
    const shape = Array.isArray(leaf.shape) && leaf.shape.length === 0 ? [] : checkShape(leaf.shape, ref);
    if (!(leaf.dtype in SIZE) && !(leaf.dtype in BLOCK)) fail("dtype", ref, `unknown dtype ${leaf.dtype}`);
    switch (op) {
      case "const":
        if (!a.role || typeof a.role.role !== "string") fail("attr", ref, "const needs a role");
        if (isBlock(leaf.dtype) && shape.length > 0 && shape[shape.length - 1] % BLOCK[leaf.dtype].elems !== 0) {
          fail("shape", ref, `inner dim ${shape[shape.length - 1]} is not a whole number of ${leaf.dtype} blocks`);
        }
        break;
      case "slot":
      case "state":
        if (typeof a.name !== "string" || !a.name) fail("attr", ref, `${op} needs a name`);
        if (op === "slot" && !a.kind) fail("attr", ref, "slot needs a kind");
        noBlock(leaf, ref, op);
        if (op === "state" && shape.length === 0) fail("shape", ref, "a state needs a capacity dim");
        break;
      case "literal":
        noBlock(leaf, ref, op);
        if (a.data === undefined && typeof a.value !== "number") fail("attr", ref, "literal needs a value or data");
        if (a.data !== undefined && a.data.length !== numel(shape)) {
          fail("shape", ref, `literal data has ${a.data.length} elements for shape [${shape}]`);
        }
        break;
      case "iota":
        noBlock(leaf, ref, op);
        if (leaf.dtype === "bool") fail("dtype", ref, "iota of bool");
        a.axis = normAxis(a.axis, shape.length, ref);
        break;
    }
    return { dtype: leaf.dtype, shape: [...shape], attrs: a };
  }
  for (const t of ins) if (!t) fail("order", ref, "missing input");
  if (isCollective(op)) return inferCollective(op, ins, a, ref);

  if (UNARY.has(op)) {
    arity(ins, 1, 1, ref);
    const x = ins[0];
    noBlock(x, ref);
    const input = UNARY_OPS[op as UnaryOp].input;
    if (input === "bool") {
      if (x.dtype !== "bool") fail("dtype", ref, `${op} needs bool, got ${fmt(x)}`);
    } else if (input === "float") needFloat(x, ref);
    else if (x.dtype === "bool") fail("dtype", ref, `${op} of bool`);
    return { dtype: x.dtype, shape: [...x.shape], attrs: a };
  }
  if (BINARY.has(op)) {
    arity(ins, 2, 2, ref);
    const [x, y] = ins;
    noBlock(x, ref);
    same(x, y, ref, "operands");
    const input = BINARY_OPS[op as BinaryOp].input;
    if (input === "logical") {
      if (x.dtype !== "bool" && !isInt(x.dtype)) fail("dtype", ref, `${op} needs bool or integers, got ${fmt(x)}`);
    } else if (input === "float") needFloat(x, ref);
    else if (x.dtype === "bool") fail("dtype", ref, `${op} of bool`);
    return { dtype: x.dtype, shape: [...x.shape], attrs: a };
  }
  if (COMPARE.has(op)) {
    arity(ins, 2, 2, ref);
    noBlock(ins[0], ref);
    same(ins[0], ins[1], ref, "operands");
    return { dtype: "bool", shape: [...ins[0].shape], attrs: a };
  }

  switch (op) {
    case "select": {
      arity(ins, 3, 3, ref);
      const [c, x, y] = ins;
      if (c.dtype !== "bool") fail("dtype", ref, `condition must be bool, got ${fmt(c)}`);
      noBlock(x, ref);
      same(x, y, ref, "branches");
      if (!sameShape(c.shape, x.shape)) fail("shape", ref, `condition ${fmt(c)} vs branches ${fmt(x)}`);
      return { dtype: x.dtype, shape: [...x.shape], attrs: a };
    }
    case "cast": {
      arity(ins, 1, 1, ref);
      noBlock(ins[0], ref);
      if (!a.to || !(a.to in SIZE)) fail("dtype", ref, `cast target must be a scalar dtype, got ${a.to}`);
      return { dtype: a.to, shape: [...ins[0].shape], attrs: a };
    }
    case "reduce":
    case "argmax": {
      arity(ins, 1, 1, ref);
      const x = ins[0];
      noBlock(x, ref);
      if (x.dtype === "bool") fail("dtype", ref, `${op} of bool`);
      if (x.shape.length === 0) fail("axis", ref, `${op} of a scalar`);
      if (op === "reduce" && a.fn !== "sum" && a.fn !== "max" && a.fn !== "min") {
        fail("attr", ref, `reduce fn must be sum, max or min, got ${a.fn}`);
      }
      a.axis = normAxis(a.axis, x.shape.length, ref);
      const shape = [...x.shape];
      shape[a.axis] = 1;
      return { dtype: op === "argmax" ? "i32" : x.dtype, shape, attrs: a };
    }
    case "matmul": {
      arity(ins, 2, 2, ref);
      const [x, w] = ins;
      needFloat(x, ref, "x");
      if (!isFloat(w.dtype) && !isBlock(w.dtype)) fail("dtype", ref, `w must be a float or block type, got ${fmt(w)}`);
      if (x.shape.length < 1 || w.shape.length < 2) fail("shape", ref, `matmul of ${fmt(x)} and ${fmt(w)}`);
      const K = x.shape[x.shape.length - 1];
      if (w.shape[w.shape.length - 1] !== K) {
        fail("shape", ref, `x ${fmt(x)} and w ${fmt(w)} disagree on K (w is [N, K])`);
      }
      if (w.shape.length === 2) {
        if (isBlock(w.dtype) && K % BLOCK[w.dtype].elems !== 0) fail("shape", ref, `K=${K} is not whole ${w.dtype} blocks`);
        return { dtype: "f32", shape: [...x.shape.slice(0, -1), w.shape[0]], attrs: a };
      }
      if (isBlock(w.dtype)) fail("dtype", ref, "a batched matmul cannot read a block type");
      if (x.shape.length !== w.shape.length || !sameShape(x.shape.slice(0, -2), w.shape.slice(0, -2))) {
        fail("shape", ref, `batched matmul needs equal batch dims: ${fmt(x)} vs ${fmt(w)}`);
      }
      return { dtype: "f32", shape: [...x.shape.slice(0, -1), w.shape[w.shape.length - 2]], attrs: a };
    }
    case "gather": {
      arity(ins, 2, 2, ref);
      const [t, idx] = ins;
      needIndex(idx, ref, "index");
      if (t.shape.length < 1) fail("shape", ref, "gather from a scalar");
      const row = t.shape.slice(1);
      if (isBlock(t.dtype) && numel(row) % BLOCK[t.dtype].elems !== 0) {
        fail("shape", ref, `rows of ${fmt(t)} are not whole ${t.dtype} blocks`);
      }
      return { dtype: isBlock(t.dtype) ? "f32" : t.dtype, shape: [...idx.shape, ...row], attrs: a };
    }
    case "reshape": {
      arity(ins, 1, 1, ref);
      noBlock(ins[0], ref);
      if (!Array.isArray(a.shape)) fail("attr", ref, "reshape needs a shape");
      a.shape = a.shape.length === 0 && numel(ins[0].shape) === 1 ? [] : resolveShape(a.shape, numel(ins[0].shape), ref);
      return { dtype: ins[0].dtype, shape: [...a.shape], attrs: a };
    }
    case "permute": {
      arity(ins, 1, 1, ref);
      const x = ins[0];
      noBlock(x, ref);
      const p = a.perm;
      if (!Array.isArray(p) || p.length !== x.shape.length || [...p].sort((i, j) => i - j).some((v, i) => v !== i)) {
        fail("axis", ref, `perm ${JSON.stringify(p)} is not a permutation of ${x.shape.length} axes`);
      }
      return { dtype: x.dtype, shape: p.map((i) => x.shape[i]), attrs: a };
    }
    case "broadcast": {
      arity(ins, 1, 1, ref);
      const x = ins[0];
      noBlock(x, ref);
      const s = checkShape(a.shape, ref, "broadcast target");
      const b = broadcastShapes(x.shape, s);
      if (!b || s.length < x.shape.length || !sameShape(b, s)) fail("shape", ref, `cannot broadcast ${fmt(x)} to [${s}]`);
      return { dtype: x.dtype, shape: [...s], attrs: a };
    }
    case "slice": {
      arity(ins, 1, 1, ref);
      const x = ins[0];
      noBlock(x, ref);
      const { start, end } = a;
      if (!Array.isArray(start) || !Array.isArray(end) || start.length !== x.shape.length || end.length !== x.shape.length) {
        fail("attr", ref, `slice needs start and end of rank ${x.shape.length}`);
      }
      const shape = x.shape.map((d, i) => {
        if (!Number.isInteger(start[i]) || !Number.isInteger(end[i]) || start[i] < 0 || end[i] > d || start[i] >= end[i]) {
          fail("shape", ref, `slice [${start[i]}, ${end[i]}) of axis ${i} (size ${d})`);
        }
        return end[i] - start[i];
      });
      return { dtype: x.dtype, shape, attrs: a };
    }
    case "concat": {
      if (ins.length < 1) fail("attr", ref, "concat of nothing");
      const x = ins[0];
      noBlock(x, ref);
      a.axis = normAxis(a.axis, x.shape.length, ref);
      const shape = [...x.shape];
      for (const y of ins.slice(1)) {
        if (y.dtype !== x.dtype) fail("dtype", ref, `concat of ${fmt(x)} and ${fmt(y)}`);
        if (y.shape.length !== x.shape.length || y.shape.some((d, i) => i !== a.axis && d !== x.shape[i])) {
          fail("shape", ref, `concat along ${a.axis} of ${fmt(x)} and ${fmt(y)}`);
        }
        shape[a.axis] += y.shape[a.axis];
      }
      return { dtype: x.dtype, shape, attrs: a };
    }
    case "dynamic_update_slice": {
      arity(ins, 3, 3, ref);
      const [t, u, off] = ins;
      noBlock(t, ref, "target");
      needIndex(off, ref, "offset");
      if (numel(off.shape) !== 1) fail("shape", ref, `offset must hold one element, got ${fmt(off)}`);
      if (t.dtype !== u.dtype) fail("dtype", ref, `target ${fmt(t)} and update ${fmt(u)}`);
      a.axis = normAxis(a.axis ?? 0, t.shape.length, ref);
      if (u.shape.length !== t.shape.length || u.shape.some((d, i) => (i === a.axis ? d > t.shape[i] : d !== t.shape[i]))) {
        fail("shape", ref, `update ${fmt(u)} does not fit target ${fmt(t)} along axis ${a.axis}`);
      }
      return { dtype: t.dtype, shape: [...t.shape], attrs: a };
    }
    case "scatter_update": {
      arity(ins, 3, 3, ref);
      const [t, u, idx] = ins;
      noBlock(t, ref, "target");
      needIndex(idx, ref, "index");
      if (t.dtype !== u.dtype) fail("dtype", ref, `target ${fmt(t)} and update ${fmt(u)}`);
      if (t.shape.length < 1 || u.shape.length !== t.shape.length || !sameShape(u.shape.slice(1), t.shape.slice(1))) {
        fail("shape", ref, `update ${fmt(u)} rows do not match target ${fmt(t)} rows`);
      }
      if (idx.shape.length !== 1 || idx.shape[0] !== u.shape[0]) {
        fail("shape", ref, `index ${fmt(idx)} must be [${u.shape[0]}]`);
      }
      return { dtype: t.dtype, shape: [...t.shape], attrs: a };
    }
    case "rmsnorm":
    case "layernorm": {
      arity(ins, op === "rmsnorm" ? 2 : 3, op === "rmsnorm" ? 2 : 3, ref);
      const x = ins[0];
      if (x.dtype !== "f32") fail("dtype", ref, `x must be f32, got ${fmt(x)}`);
      if (x.shape.length < 1) fail("shape", ref, "norm of a scalar");
      const D = x.shape[x.shape.length - 1];
      for (const p of ins.slice(1)) {
        if (p.dtype !== "f32" || !sameShape(p.shape, [D])) fail("shape", ref, `weight ${fmt(p)} must be f32[${D}]`);
      }
      if (typeof a.eps !== "number" || !(a.eps >= 0)) fail("attr", ref, "eps must be a non-negative number");
      return { dtype: "f32", shape: [...x.shape], attrs: a };
    }
    case "rope": {
      arity(ins, 2, 3, ref);
      const [x, pos, fac] = ins;
      if (x.dtype !== "f32" || x.shape.length !== 3) fail("shape", ref, `x must be f32[rows, heads, head_dim], got ${fmt(x)}`);
      needIndex(pos, ref, "positions");
      if (!sameShape(pos.shape, [x.shape[0]])) fail("shape", ref, `positions ${fmt(pos)} must be [${x.shape[0]}]`);
      const D = x.shape[2];
      a.dims = a.dims ?? D;
      if (!Number.isInteger(a.dims) || a.dims < 2 || a.dims % 2 || a.dims > D) fail("attr", ref, `rope dims ${a.dims} for head_dim ${D}`);
      if (a.style !== "adjacent" && a.style !== "half") fail("attr", ref, `rope style must be adjacent or half, got ${a.style}`);
      if (typeof a.theta !== "number" || !(a.theta > 0)) fail("attr", ref, "rope theta must be positive");
      if (fac && (fac.dtype !== "f32" || !sameShape(fac.shape, [a.dims / 2]))) fail("shape", ref, `factors ${fmt(fac)} must be f32[${a.dims / 2}]`);
      return { dtype: "f32", shape: [...x.shape], attrs: a };
    }
    case "softmax": {
      arity(ins, 1, 1, ref);
      if (ins[0].dtype !== "f32") fail("dtype", ref, `softmax needs f32, got ${fmt(ins[0])}`);
      a.axis = normAxis(a.axis, ins[0].shape.length, ref);
      return { dtype: "f32", shape: [...ins[0].shape], attrs: a };
    }
    case "attention": {
      arity(ins, 4, 4, ref);
      const [q, k, v, m] = ins;
      if (q.dtype !== "f32" || q.shape.length !== 3) fail("shape", ref, `q must be f32[rows, heads, head_dim], got ${fmt(q)}`);
      needFloat(k, ref, "k");
      needFloat(v, ref, "v");
      if (k.shape.length !== 3 || v.shape.length !== 3) fail("shape", ref, `k ${fmt(k)} and v ${fmt(v)} must be [cap, kv_heads, dim]`);
      const [R, H, D] = q.shape, [C, KVH] = k.shape;
      if (k.shape[2] !== D || v.shape[0] !== C || v.shape[1] !== KVH) fail("shape", ref, `q ${fmt(q)}, k ${fmt(k)}, v ${fmt(v)}`);
      if (H % KVH !== 0) fail("shape", ref, `${H} heads are not a multiple of ${KVH} kv heads`);
      if (m.dtype !== "bool" || !sameShape(m.shape, [R, C])) fail("shape", ref, `mask ${fmt(m)} must be bool[${R},${C}]`);
      if (typeof a.scale !== "number") fail("attr", ref, "attention needs a scale");
      if (a.softcap !== undefined && !(a.softcap > 0)) fail("attr", ref, `attention softcap ${a.softcap} must be positive`);
      return { dtype: "f32", shape: [R, H, v.shape[2]], attrs: a };
    }
    case "paged_attention": {
      arity(ins, 5, 5, ref);
      const [q, k, v, tb, pos] = ins;
      if (q.dtype !== "f32" || q.shape.length !== 3) fail("shape", ref, `q must be f32[rows, heads, head_dim], got ${fmt(q)}`);
      needFloat(k, ref, "k pool");
      needFloat(v, ref, "v pool");
      if (k.shape.length !== 3 || v.shape.length !== 3) fail("shape", ref, `k ${fmt(k)} and v ${fmt(v)} must be [pool rows, kv_heads, dim]`);
      const [R, H, D] = q.shape, [P, KVH] = k.shape;
      if (k.shape[2] !== D || v.shape[0] !== P || v.shape[1] !== KVH) fail("shape", ref, `q ${fmt(q)}, k ${fmt(k)}, v ${fmt(v)}`);
      if (H % KVH !== 0) fail("shape", ref, `${H} heads are not a multiple of ${KVH} kv heads`);
      needIndex(tb, ref, "block table");
      needIndex(pos, ref, "positions");
      if (tb.shape.length !== 2 || tb.shape[0] !== R) fail("shape", ref, `block table ${fmt(tb)} must be [${R}, max_blocks]`);
      if (!sameShape(pos.shape, [R])) fail("shape", ref, `positions ${fmt(pos)} must be [${R}]`);
      if (!Number.isInteger(a.block) || a.block! < 1 || P % a.block! !== 0) fail("attr", ref, `block size ${a.block} must divide the pool's ${P} rows`);
      if (typeof a.scale !== "number") fail("attr", ref, "paged_attention needs a scale");
      return { dtype: "f32", shape: [R, H, v.shape[2]], attrs: a };
    }
    case "causal_mask": {
      arity(ins, 1, 1, ref);
      needIndex(ins[0], ref, "pos");
      if (numel(ins[0].shape) !== 1) fail("shape", ref, `pos must hold one element, got ${fmt(ins[0])}`);
      const rows = a.rows, cap = a.cap;
      if (!Number.isInteger(rows) || !Number.isInteger(cap) || rows! < 1 || cap! < 1) fail("attr", ref, "causal_mask needs rows and cap");
      if (a.window !== undefined && !(Number.isInteger(a.window) && a.window >= 1)) fail("attr", ref, `causal_mask window ${a.window} must be a positive integer`);
      return { dtype: "bool", shape: [rows!, cap!], attrs: a };
    }
    case "silu":
    case "gelu": {
      arity(ins, 1, 1, ref);
      needFloat(ins[0], ref);
      return { dtype: ins[0].dtype, shape: [...ins[0].shape], attrs: a };
    }
    case "sample": {
      arity(ins, 2, 2, ref);
      const [x, p] = ins;
      if (x.dtype !== "f32" || x.shape.length !== 2) fail("shape", ref, `logits must be f32[rows, vocab], got ${fmt(x)}`);
      if (p.dtype !== "u32" || !sameShape(p.shape, [x.shape[0], SAMPLER_WORDS])) {
        fail("shape", ref, `sampler params must be u32[${x.shape[0]},${SAMPLER_WORDS}], got ${fmt(p)}`);
      }
      return { dtype: "i32", shape: [x.shape[0], 2], attrs: a };
    }
    case "logits_process": {
      arity(ins, 3, 4, ref);
      const [x, e, m, c] = ins;
      if (x.dtype !== "f32" || x.shape.length !== 2) fail("shape", ref, `logits must be f32[rows, vocab], got ${fmt(x)}`);
      const [R, V] = x.shape;
      if (e.dtype !== "u32" || e.shape.length !== 2 || e.shape[0] !== R || e.shape[1] < EXTRA_HEAD || (e.shape[1] - EXTRA_HEAD) % EXTRA_ENTRY !== 0) {
        fail("shape", ref, `extra must be u32[${R}, ${EXTRA_HEAD} + ${EXTRA_ENTRY}·entries], got ${fmt(e)}`);
      }
      if (m.dtype !== "u32" || !sameShape(m.shape, [R, maskWords(V)])) fail("shape", ref, `mask must be u32[${R},${maskWords(V)}], got ${fmt(m)}`);
      if (c && (c.dtype !== "u32" || c.shape.length !== 2 || c.shape[0] < 1 || c.shape[1] !== V)) fail("shape", ref, `counts must be u32[rows >= 1, ${V}], got ${fmt(c)}`);
      return { dtype: "f32", shape: [R, V], attrs: a };
    }
    case "logprobs": {
      arity(ins, 3, 3, ref);
      const [x, s, p] = ins;
      if (x.dtype !== "f32" || x.shape.length !== 2) fail("shape", ref, `logits must be f32[rows, vocab], got ${fmt(x)}`);
      const R = x.shape[0];
      if (s.dtype !== "i32" || !sameShape(s.shape, [R, 2])) fail("shape", ref, `sample must be i32[${R},2], got ${fmt(s)}`);
      if (p.dtype !== "u32" || !sameShape(p.shape, [R, SAMPLER_WORDS])) fail("shape", ref, `sampler params must be u32[${R},${SAMPLER_WORDS}], got ${fmt(p)}`);
      if (!(Number.isInteger(a.n) && a.n! >= 0 && a.n! <= MAX_TOP_LOGPROBS)) fail("attr", ref, `logprobs n ${a.n} must be an integer in [0, ${MAX_TOP_LOGPROBS}]`);
      return { dtype: "f32", shape: [R, 1 + 2 * a.n!], attrs: a };
    }
    case "silu_mul": {
      arity(ins, 2, 2, ref);
      needFloat(ins[0], ref);
      same(ins[0], ins[1], ref, "operands");
      return { dtype: ins[0].dtype, shape: [...ins[0].shape], attrs: a };
    }
  }
  return fail("attr", ref, `unknown op ${op}`);
}
