// General kernels for graph ops off the decode hot path: strided copies (permute, broadcast, slice, concat),
// reductions and argmax along any axis, batched matmul of two computed tensors, gathers of any element type,
// iota and the causal mask. One invocation per output element, loops in index order (so sums accumulate in
// the oracle's order); simple on purpose: a model step that is hot in one of these should get a library kernel.
import { c, computeOf, type CType, type EType, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, type IType, wgIndex } from "./common.ts";

/** Fault codes of these kernels (see codes.ts for the library's). */
export const GENERIC_FAULT = { GATHER_INDEX: 0x0601, MASK_POS: 0x0602 } as const;

const WG = 64;

/** One invocation per element of `n`: builds the kernel with `body(i)` guarded by i < n. */
function perElement(caps: Caps, name: string, n: number, decl: (b: KernelBuilder) => void, body: (b: KernelBuilder, i: Val) => void): Kernel {
  if (n >= 2 ** 32) throw new KernelError(`${name}: ${n} elements exceed 32-bit indices`);
  const wg = Math.min(WG, caps.maxWorkgroupSize);
  const grid = gridFor(caps, Math.max(1, Math.ceil(n / wg)));
  const b = new KernelBuilder(name, { workgroup: wg, grid });
  decl(b);
  const i = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "i");
  b.if(i.lt(n), () => body(b, i));
  return b.build();
}

/** Element offset Σ coord_d * strides[d] of linear index i over `shape` (constant strides, 0 = broadcast). */
function offsetOf(i: Val, shape: readonly number[], strides: readonly number[], base: number): Val {
  let off: Val = u32(base);
  let inner = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    if (strides[d] !== 0 && shape[d] !== 1) {
      const coord = d === 0 ? i.div(inner) : i.div(inner).mod(shape[d]);
      off = off.add(coord.mul(strides[d]));
    }
    inner *= shape[d];
  }
  return off;
}

export interface CopyShape {
  /** The iteration space (the copied region's shape). */
  shape: number[];
  elem: EType;
  src: { offset: number; strides: number[] };
  dst: { offset: number; strides: number[] };
  name?: string;
}
/**
 * dst[dst.offset + Σ c_d·dst.strides[d]] = src[src.offset + Σ c_d·src.strides[d]] over coords c of `shape`.
 * Bindings: src (r); dst (rw). Permute, broadcast (stride 0), slice and each part of a concat are one copy.
 */
export function stridedCopy(caps: Caps, s: CopyShape): Kernel {
  const n = s.shape.reduce((a, b) => a * b, 1);
  let src!: ReturnType<KernelBuilder["buffer"]>, dst!: ReturnType<KernelBuilder["buffer"]>;
  return perElement(caps, s.name ?? `copy_${s.elem}_${s.shape.join("x")}`, n, (b) => {
    src = b.buffer("src", s.elem, "r");
    dst = b.buffer("dst", s.elem, "rw");
  }, (b, i) => {
    b.store(dst, offsetOf(i, s.shape, s.dst.strides, s.dst.offset), b.load(src, offsetOf(i, s.shape, s.src.strides, s.src.offset)));
  });
}

export interface AxisShape {
  /** Product of the dims before the axis, the axis length, product of the dims after it. */
  outer: number;
  n: number;
  inner: number;
  elem: EType;
  name?: string;
}

/**
 * out[o, 0, i] = fn over j of x[o, j, i], sequentially in j (sum starts from x[o, 0, i]... in index order).
 * Bindings: x (r); out (w), same element type.
 */
export function reduceAxis(caps: Caps, s: AxisShape & { fn: "sum" | "max" | "min" }): Kernel {
  let X!: ReturnType<KernelBuilder["buffer"]>, Y!: ReturnType<KernelBuilder["buffer"]>;
  return perElement(caps, s.name ?? `reduce_${s.fn}_${s.outer}x${s.n}x${s.inner}_${s.elem}`, s.outer * s.inner, (b) => {
    X = b.buffer("x", s.elem, "r");
    Y = b.buffer("out", s.elem, "w");
  }, (b, i) => {
    const base = b.let(i.div(s.inner).mul(s.n * s.inner).add(i.mod(s.inner)), "u32", "base");
    const acc = b.let(b.load(X, base), computeOf(s.elem), "acc");
    b.for(u32(1), u32(s.n), 1, (j) => {
      const x = b.load(X, base.add(j.mul(s.inner)));
      b.set(acc, s.fn === "sum" ? acc.add(x) : combineNaN(s.fn, acc, x));
    });
    b.store(Y, i, acc);
  });
}

/** max/min where NaN wins (the oracle's rule). */
function combineNaN(fn: "max" | "min", a: Val, x: Val): Val {
  if (a.t !== "f32") return fn === "max" ? a.max(x) : a.min(x);
  const pick = fn === "max" ? x.gt(a) : x.lt(a);
  return a.ne(a).select(a, x.ne(x).or(pick).select(x, a));
}

/**
 * out[o, 0, i] = the first j where x[o, j, i] is largest (a NaN never replaces the first pick), as i32.
 * Bindings: x (r); out i32 (w).
 */
export function argmaxAxis(caps: Caps, s: AxisShape): Kernel {
  let X!: ReturnType<KernelBuilder["buffer"]>, Y!: ReturnType<KernelBuilder["buffer"]>;
  return perElement(caps, s.name ?? `argmax_axis_${s.outer}x${s.n}x${s.inner}_${s.elem}`, s.outer * s.inner, (b) => {
    X = b.buffer("x", s.elem, "r");
    Y = b.buffer("out", "i32", "w");
  }, (b, i) => {
    const base = b.let(i.div(s.inner).mul(s.n * s.inner).add(i.mod(s.inner)), "u32", "base");
    const best = b.let(b.load(X, base), computeOf(s.elem), "best");
    const at = b.let(c(0, "i32"), "i32", "at");
    b.for(u32(1), u32(s.n), 1, (j) => {
      const x = b.let(b.load(X, base.add(j.mul(s.inner))), computeOf(s.elem), "x");
      b.if(x.gt(best), () => {
        b.set(best, x);
        b.set(at, j.cast("i32"));
      });
    });
    b.store(Y, i, at);
  });
}

export interface BatchedMatmulShape {
  batch: number;
  m: number;
  n: number;
  k: number;
  a: EType;
  w: EType;
  /** Element stride between batches of w (0 when w has no batch dims). */
  wBatchStride: number;
  name?: string;
}
/**
 * out[b, m, n] = Σ_k a[b, m, k] · w[b, n, k] in f32, k in order. Bindings: a (r); w (r); out f32 (w).
 */
export function batchedMatmul(caps: Caps, s: BatchedMatmulShape): Kernel {
  let A!: ReturnType<KernelBuilder["buffer"]>, W!: ReturnType<KernelBuilder["buffer"]>, Y!: ReturnType<KernelBuilder["buffer"]>;
  const { m, n, k } = s;
  return perElement(caps, s.name ?? `bmm_${s.batch}x${m}x${n}x${k}_${s.a}_${s.w}`, s.batch * m * n, (b) => {
    A = b.buffer("a", s.a, "r");
    W = b.buffer("w", s.w, "r");
    Y = b.buffer("out", "f32", "w");
  }, (b, i) => {
    const bi = b.let(i.div(m * n), "u32", "bi");
    const row = b.let(i.div(n).mod(m), "u32", "row");
    const col = b.let(i.mod(n), "u32", "col");
    const ab = b.let(bi.mul(m * k).add(row.mul(k)), "u32", "ab");
    const wb = b.let(bi.mul(s.wBatchStride).add(col.mul(k)), "u32", "wb");
    const acc = b.let(c(0, "f32"), "f32", "acc");
    b.for(u32(0), u32(k), 1, (j) => {
      b.set(acc, acc.add(b.load(A, ab.add(j)).cast("f32").mul(b.load(W, wb.add(j)).cast("f32"))));
    });
    b.store(Y, i, acc);
  });
}

/**
 * out[r, :] = table[idx[r], :] for any element type (no conversion). Bindings: table (r); idx (r); out (w).
 * Faults GENERIC_FAULT.GATHER_INDEX when an index is out of [0, rows).
 */
export function gatherRows(caps: Caps, s: { count: number; width: number; rows: number; elem: EType; index: IType; name?: string }): Kernel {
  let T!: ReturnType<KernelBuilder["buffer"]>, I!: ReturnType<KernelBuilder["buffer"]>, Y!: ReturnType<KernelBuilder["buffer"]>;
  return perElement(caps, s.name ?? `gather_rows_${s.count}x${s.width}_${s.elem}`, s.count * s.width, (b) => {
    T = b.buffer("table", s.elem, "r");
    I = b.buffer("idx", s.index, "r");
    Y = b.buffer("out", s.elem, "w");
  }, (b, i) => {
    const raw = b.load(I, i.div(s.width));
    const r = b.let(s.index === "i32" ? raw.bitcast("u32") : raw, "u32", "r"); // negative -> huge
    b.check(r.lt(s.rows), GENERIC_FAULT.GATHER_INDEX);
    b.store(Y, i, b.load(T, r.mul(s.width).add(i.mod(s.width))));
  });
}

/** out[i] = coordinate of element i along `axis` of `shape`, in `t`. Bindings: out (w). */
export function iota(caps: Caps, s: { shape: number[]; axis: number; elem: EType; name?: string }): Kernel {
  const n = s.shape.reduce((a, b) => a * b, 1);
  const inner = s.shape.slice(s.axis + 1).reduce((a, b) => a * b, 1);
  let Y!: ReturnType<KernelBuilder["buffer"]>;
  const t: CType = computeOf(s.elem);
  return perElement(caps, s.name ?? `iota_${s.shape.join("x")}_${s.axis}_${s.elem}`, n, (b) => {
    Y = b.buffer("out", s.elem, "w");
  }, (b, i) => b.store(Y, i, i.div(inner).mod(s.shape[s.axis]).cast(t)));
}

/** out[r, t] = (t <= pos + r) as 0/1 bytes. Bindings: pos [1] (r); out u8 [rows, cap] (w). */
export function causalMask(caps: Caps, s: { rows: number; cap: number; pos: IType; window?: number; name?: string }): Kernel {
  let P!: ReturnType<KernelBuilder["buffer"]>, Y!: ReturnType<KernelBuilder["buffer"]>;
  const w = s.window;
  return perElement(caps, s.name ?? `causal_mask_${s.rows}x${s.cap}_${s.pos}${w ? `_w${w}` : ""}`, s.rows * s.cap, (b) => {
    P = b.buffer("pos", s.pos, "r");
    Y = b.buffer("out", "u8", "w");
  }, (b, i) => {
    const p = b.load(P, 0).cast("i32");
    const r = i.div(s.cap).cast("i32"), t = i.mod(s.cap).cast("i32");
    const last = p.add(r), seen = t.le(last);
    const inside = w ? t.add(w).gt(last).select(u32(1), u32(0)) : u32(1);
    b.store(Y, i, seen.select(inside, u32(0)));
  });
}
