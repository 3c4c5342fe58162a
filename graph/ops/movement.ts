// The movement ops, one record each: they only move or copy elements, so their oracle is bit-exact on every
// backend and a tier-2 bound moves with the values (graph/tolerance.ts). gather also dequantizes a block table.
import { BLOCK, type BlockDType, dequantize, isBlock, type Storage, storageFor } from "../dtype.ts";
import { GraphError, type Node, numel, sameShape, stridesOf } from "../ir.ts";
import { copyStrided } from "./arith.ts";
import {
  arity, broadcastShapes, checkShape, fail, fmt, type Inferred, likeFirst, needIndex, noBlock, normAxis, type OpRecord,
  resolveShape,
} from "./record.ts";

type MovementOp = "reshape" | "permute" | "broadcast" | "slice" | "concat" | "gather" | "dynamic_update_slice" | "scatter_update";

function gather(n: Node, [t]: Node[], [ts, idx]: Storage[]): Storage {
  const rows = t.shape[0], len = numel(t.shape.slice(1)), count = idx.length;
  const signed = !(idx instanceof Uint32Array);
  if (isBlock(t.dtype)) {
    const dt = t.dtype as BlockDType, rb = (len / BLOCK[dt].elems) * BLOCK[dt].bytes;
    const o = new Float32Array(count * len);
    for (let r = 0; r < count; r++) {
      const i = idx[r];
      if (i >= rows || (signed && i < 0)) throw new GraphError("range", `row ${i} at ${r} is not below ${rows}`, n);
      dequantize(dt, (ts as Uint8Array).subarray(i * rb, (i + 1) * rb), len, o.subarray(r * len, (r + 1) * len));
    }
    return o;
  }
  const o = storageFor(n.dtype, count * len);
  for (let r = 0; r < count; r++) {
    const i = idx[r];
    if (i >= rows || (signed && i < 0)) throw new GraphError("range", `row ${i} at ${r} is not below ${rows}`, n);
    o.set(ts.subarray(i * len, (i + 1) * len), r * len);
  }
  return o;
}

const move = (doc: string, lower: OpRecord["lower"], infer: OpRecord["infer"], evalFn: OpRecord["eval"]): OpRecord =>
  ({ kind: "movement", doc, infer, eval: evalFn, tolerance: "exact", lower, ...(lower === "unit" ? { unit: "update" as const } : {}) });

export const MOVEMENT_OPS: Record<MovementOp, OpRecord> = {
  reshape: move("to attrs.shape", "view", (_op, ins, a, ref) => {
    arity(ins, 1, 1, ref);
    noBlock(ins[0], ref);
    if (!Array.isArray(a.shape)) fail("attr", ref, "reshape needs a shape");
    a.shape = a.shape.length === 0 && numel(ins[0].shape) === 1 ? [] : resolveShape(a.shape, numel(ins[0].shape), ref);
    return { dtype: ins[0].dtype, shape: [...a.shape], attrs: a };
  }, (_n, _ins, v) => v[0]),
  permute: move("result axis i = input axis attrs.perm[i]", "kernel", (_op, ins, a, ref) => {
    arity(ins, 1, 1, ref);
    const x = ins[0];
    noBlock(x, ref);
    const p = a.perm;
    if (!Array.isArray(p) || p.length !== x.shape.length || [...p].sort((i, j) => i - j).some((v, i) => v !== i)) {
      fail("axis", ref, `perm ${JSON.stringify(p)} is not a permutation of ${x.shape.length} axes`);
    }
    return { dtype: x.dtype, shape: p.map((i) => x.shape[i]), attrs: a };
  }, (n, [x], v) => {
    const st = stridesOf(x.shape);
    const o = storageFor(n.dtype, numel(n.shape));
    copyStrided(v[0], 0, n.attrs.perm!.map((p) => st[p]), n.shape, o, 0, stridesOf(n.shape));
    return o;
  }),
  broadcast: move("to attrs.shape, numpy rules", "kernel", (_op, ins, a, ref) => {
    arity(ins, 1, 1, ref);
    const x = ins[0];
    noBlock(x, ref);
    const s = checkShape(a.shape, ref, "broadcast target");
    const b = broadcastShapes(x.shape, s);
    if (!b || s.length < x.shape.length || !sameShape(b, s)) fail("shape", ref, `cannot broadcast ${fmt(x)} to [${s}]`);
    return { dtype: x.dtype, shape: [...s], attrs: a };
  }, (n, [x], v) => {
    const st = stridesOf(x.shape), k = n.shape.length - x.shape.length;
    const ss = n.shape.map((_, i) => (i < k || x.shape[i - k] === 1 ? 0 : st[i - k]));
    const o = storageFor(n.dtype, numel(n.shape));
    copyStrided(v[0], 0, ss, n.shape, o, 0, stridesOf(n.shape));
    return o;
  }),
  slice: move("[attrs.start, attrs.end) per axis", "kernel", (_op, ins, a, ref) => {
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
  }, (n, [x], v) => {
    const st = stridesOf(x.shape);
    let off = 0;
    for (let i = 0; i < st.length; i++) off += n.attrs.start![i] * st[i];
    const o = storageFor(n.dtype, numel(n.shape));
    copyStrided(v[0], off, st, n.shape, o, 0, stridesOf(n.shape));
    return o;
  }),
  concat: move("along attrs.axis", "kernel", (_op, ins, a, ref): Inferred => {
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
  }, (n, ins, v) => {
    const o = storageFor(n.dtype, numel(n.shape)), ds = stridesOf(n.shape), ax = n.attrs.axis!;
    let at = 0;
    for (let j = 0; j < ins.length; j++) {
      copyStrided(v[j], 0, stridesOf(ins[j].shape), ins[j].shape, o, at * ds[ax], ds);
      at += ins[j].shape[ax];
    }
    return o;
  }),
  gather: move("[table[V, ...], idx[...I]] -> [...I, ...]: rows of table; a block table is dequantized to f32", "kernel", (_op, ins, a, ref) => {
    arity(ins, 2, 2, ref);
    const [t, idx] = ins;
    needIndex(idx, ref, "index");
    if (t.shape.length < 1) fail("shape", ref, "gather from a scalar");
    const row = t.shape.slice(1);
    if (isBlock(t.dtype) && numel(row) % BLOCK[t.dtype].elems !== 0) {
      fail("shape", ref, `rows of ${fmt(t)} are not whole ${t.dtype} blocks`);
    }
    return { dtype: isBlock(t.dtype) ? "f32" : t.dtype, shape: [...idx.shape, ...row], attrs: a };
  }, gather),
  // An update is a plan unit (graph/plan.ts): in place in its State when nothing else reads the old value, or
  // the K/V write of a gemv's epilogue. Along an inner axis it is decomposed first (kernels/decomp/graph.ts).
  dynamic_update_slice: move(
    "[target, update, offset(1 int)] -> target with update written at offset along attrs.axis",
    "unit",
    (_op, ins, a, ref) => {
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
      return likeFirst(t, a);
    },
    (n, [t, u], v) => {
      const ax = n.attrs.axis!;
      const off = Number(v[2][0]);
      if (!(off >= 0 && off + u.shape[ax] <= t.shape[ax])) {
        throw new GraphError("range", `offset ${off} + ${u.shape[ax]} rows exceeds ${t.shape[ax]} along axis ${ax}`, n);
      }
      const o = v[0].slice();
      const ds = stridesOf(t.shape);
      copyStrided(v[1], 0, stridesOf(u.shape), u.shape, o, off * ds[ax], ds);
      return o;
    },
  ),
  scatter_update: move(
    "[target[R, ...], update[U, ...], index[U]] -> target with row index[u] = update[u]; index < 0 skips",
    "unit",
    (_op, ins, a, ref) => {
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
      return likeFirst(t, a);
    },
    (n, ins, v) => {
      const [t, u] = ins, idx = v[2], rows = t.shape[0], len = numel(t.shape.slice(1));
      const o = v[0].slice(), src = v[1];
      for (let r = 0; r < u.shape[0]; r++) {
        const i = Number(idx[r]);
        if (i < 0 && ins[2].dtype === "i32") continue;
        if (i >= rows || i < 0) throw new GraphError("range", `row index ${i} at ${r} is not below ${rows}`, n);
        o.set(src.subarray(r * len, (r + 1) * len), i * len);
      }
      return o;
    },
  ),
};
