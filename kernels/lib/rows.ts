// Kernels that reduce along the last axis, one team per row: rmsnorm, layernorm, softmax, argmax.
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { type FType, gridFor, type IType, sharedFor, type Team, team, teamRow, teamReduce, vecWidth } from "./common.ts";

interface RowKernel {
  b: KernelBuilder;
  t: Team;
  lane: Val;
  row: Val;
  /** Element offset of this row. */
  base: Val;
}
function rowKernel(caps: Caps, name: string, rows: number, n: number, declare: (b: KernelBuilder) => void): RowKernel {
  if (!(rows >= 1 && n >= 1) || rows * n >= 2 ** 32) throw new KernelError(`${name}: bad shape ${rows}x${n}`);
  // Long rows get a wide team of several subgroups, about 8 elements a lane. The team depends on n alone, never
  // on the row count: a row's reduction order must be the same in a batch of 1 and of 64 (batch invariance).
  const t = team(caps, { rows, wide: Math.min(1024, Math.ceil(n / 8)) });
  const grid = gridFor(caps, Math.ceil(rows / t.rows));
  const b = new KernelBuilder(name, { workgroup: t.size, grid });
  declare(b);
  const { lane, row } = teamRow(b, t, grid);
  if (grid[0] * grid[1] * grid[2] * t.rows > rows) b.if(row.ge(rows), () => b.return());
  return { b, t, lane, row, base: b.let(row.mul(n), "u32", "base") };
}

/** Visits this lane's elements of a row of n, `vw` at a time (vector loads inside `f`). */
function eachLaneChunk(rk: RowKernel, n: number, vw: number, f: (i: Val) => void): void {
  rk.b.for(rk.lane.mul(vw), u32(n), rk.t.lanes * vw, f);
}
function loadN(b: KernelBuilder, buf: Parameters<KernelBuilder["load"]>[0], at: Val, vw: number): Val[] {
  return vw > 1 ? b.loadv(buf, at, vw) : [b.load(buf, at)];
}
function storeN(b: KernelBuilder, buf: Parameters<KernelBuilder["load"]>[0], at: Val, vs: Val[]): void {
  if (vs.length > 1) b.storev(buf, at, vs);
  else b.store(buf, at, vs[0]);
}

export interface NormShape {
  rows: number;
  n: number;
  eps: number;
  /** Storage type of the weight (default f32); null = no weight. */
  weight?: FType | null;
  /** rmsnorm: the weight is (w + weightAdd), added in f32 as it is loaded (Gemma's 1 + w). */
  weightAdd?: number;
  /** rmsnorm: y = residual + the normed row (a binding before y), the residual add after a post-norm. */
  residual?: boolean;
  name?: string;
}

/**
 * y = x * rsqrt(mean(x^2) + eps) * (w + weightAdd) (+ residual), per row: the oracle's operations in its order
 * (the weight's add and the residual's in f32), so only the order of the sum of squares can differ from it.
 * Bindings: x f32 [rows, n] (r); w [n] (r, unless weight: null); residual f32 [rows, n] (r, when residual);
 * y f32 [rows, n] (w; may alias x).
 */
export function rmsnorm(caps: Caps, s: NormShape): Kernel {
  const wt = s.weight === undefined ? "f32" : s.weight;
  if (s.weightAdd !== undefined && !wt) throw new KernelError("rmsnorm: weightAdd without a weight");
  const extra = `${s.weightAdd !== undefined ? `_wa${String(s.weightAdd).replace(/\W/g, "_")}` : ""}${s.residual ? "_res" : ""}`;
  let x!: ReturnType<KernelBuilder["buffer"]>, w: typeof x | undefined, res: typeof x | undefined, y!: typeof x;
  const rk = rowKernel(caps, s.name ?? `rmsnorm_r${s.rows}_n${s.n}${wt ? `_${wt}` : ""}${extra}`, s.rows, s.n, (b) => {
    x = b.buffer("x", "f32", "r");
    if (wt) w = b.buffer("w", wt, "r");
    if (s.residual) res = b.buffer("residual", "f32", "r");
    y = b.buffer("y", "f32", "w");
  });
  const { b, t } = rk;
  const vw = Math.min(4, vecWidth(4, s.n));
  const ss = b.let(f32(0), "f32", "ss");
  eachLaneChunk(rk, s.n, vw, (i) => {
    for (const v of loadN(b, x, rk.base.add(i), vw)) b.set(ss, ss.add(v.mul(v)));
  });
  const tot = teamReduce(b, t, "add", ss);
  const r = b.let(tot.div(s.n).add(f32(s.eps)).rsqrt(), "f32", "r");
  eachLaneChunk(rk, s.n, vw, (i) => {
    const xs = loadN(b, x, rk.base.add(i), vw);
    const ws = w ? loadN(b, w, i, vw).map((v) => (s.weightAdd !== undefined ? v.add(f32(s.weightAdd)) : v)) : undefined;
    const rs = res ? loadN(b, res, rk.base.add(i), vw) : undefined;
    storeN(b, y, rk.base.add(i), xs.map((v, e) => {
      const o = ws ? v.mul(r).mul(ws[e]) : v.mul(r);
      return rs ? rs[e].add(o) : o;
    }));
  });
  return b.build();
}

/**
 * y = (x - mean) * rsqrt(var + eps) * w + bias, per row (biased variance, two passes).
 * Bindings: x f32 [rows, n] (r); w [n] (r, unless weight: null); bias [n] f32 (r, when bias); y f32 [rows, n] (w).
 */
export function layernorm(caps: Caps, s: NormShape & { bias?: boolean }): Kernel {
  const wt = s.weight === undefined ? "f32" : s.weight;
  let x!: ReturnType<KernelBuilder["buffer"]>, w: typeof x | undefined, bb: typeof x | undefined, y!: typeof x;
  const rk = rowKernel(caps, s.name ?? `layernorm_r${s.rows}_n${s.n}${wt ? `_${wt}` : ""}${s.bias ? "_bias" : ""}`, s.rows, s.n, (b) => {
    x = b.buffer("x", "f32", "r");
    if (wt) w = b.buffer("w", wt, "r");
    if (s.bias) bb = b.buffer("bias", "f32", "r");
    y = b.buffer("y", "f32", "w");
  });
  const { b, t } = rk;
  const vw = Math.min(4, vecWidth(4, s.n));
  const sum = b.let(f32(0), "f32", "sum");
  eachLaneChunk(rk, s.n, vw, (i) => {
    for (const v of loadN(b, x, rk.base.add(i), vw)) b.set(sum, sum.add(v));
  });
  const mean = b.let(teamReduce(b, t, "add", sum).div(s.n), "f32", "mean");
  const sq = b.let(f32(0), "f32", "sq");
  eachLaneChunk(rk, s.n, vw, (i) => {
    for (const v of loadN(b, x, rk.base.add(i), vw)) {
      const d = v.sub(mean);
      b.set(sq, sq.add(d.mul(d)));
    }
  });
  const r = b.let(teamReduce(b, t, "add", sq).div(s.n).add(f32(s.eps)).rsqrt(), "f32", "r");
  eachLaneChunk(rk, s.n, vw, (i) => {
    const xs = loadN(b, x, rk.base.add(i), vw);
    const ws = w ? loadN(b, w, i, vw) : undefined;
    const bs = bb ? loadN(b, bb, i, vw) : undefined;
    storeN(b, y, rk.base.add(i), xs.map((v, e) => {
      let o = v.sub(mean).mul(r);
      if (ws) o = o.mul(ws[e]);
      if (bs) o = o.add(bs[e]);
      return o;
    }));
  });
  return b.build();
}

/**
 * y = exp(x - max) / sum(exp(x - max)) along rows.
 * Bindings: x f32 [rows, n] (r); y f32 [rows, n] (w; may alias x).
 */
export function softmax(caps: Caps, s: { rows: number; n: number; name?: string }): Kernel {
  let x!: ReturnType<KernelBuilder["buffer"]>, y!: typeof x;
  const rk = rowKernel(caps, s.name ?? `softmax_r${s.rows}_n${s.n}`, s.rows, s.n, (b) => {
    x = b.buffer("x", "f32", "r");
    y = b.buffer("y", "f32", "w");
  });
  const { b, t } = rk;
  const vw = Math.min(4, vecWidth(4, s.n));
  const mx = b.let(f32(-Infinity), "f32", "mx");
  eachLaneChunk(rk, s.n, vw, (i) => {
    for (const v of loadN(b, x, rk.base.add(i), vw)) b.set(mx, mx.max(v));
  });
  const m = teamReduce(b, t, "max", mx);
  const sum = b.let(f32(0), "f32", "sum");
  eachLaneChunk(rk, s.n, vw, (i) => {
    const es = loadN(b, x, rk.base.add(i), vw).map((v) => b.let(v.sub(m).exp(), "f32", "e"));
    for (const e of es) b.set(sum, sum.add(e));
    storeN(b, y, rk.base.add(i), es);
  });
  const tot = teamReduce(b, t, "add", sum);
  eachLaneChunk(rk, s.n, vw, (i) => {
    storeN(b, y, rk.base.add(i), loadN(b, y, rk.base.add(i), vw).map((e) => e.div(tot)));
  });
  return b.build();
}

/**
 * out[r] = index of the largest x[r, :]. Ties go to the lowest index; NaN counts as larger than every number
 * (so a row holding NaN yields its first NaN's index, which makes a non-finite row visible).
 * Bindings: x f32 [rows, n] (r); out [rows] u32|i32 (w).
 */
export function argmax(caps: Caps, s: { rows: number; n: number; out?: IType; name?: string }): Kernel {
  const ot = s.out ?? "u32";
  let x!: ReturnType<KernelBuilder["buffer"]>, out!: typeof x;
  const rk = rowKernel(caps, s.name ?? `argmax_r${s.rows}_n${s.n}_${ot}`, s.rows, s.n, (b) => {
    x = b.buffer("x", "f32", "r");
    out = b.buffer("out", ot, "w");
  });
  const { b, t, lane } = rk;
  const n = s.n;
  const bv = b.let(f32(-Infinity), "f32", "bv");
  const bi = b.let(u32(n), "u32", "bi"); // n = none yet
  b.for(lane, u32(n), t.lanes, (i) => {
    const v = b.let(b.load(x, rk.base.add(i)), "f32", "v");
    const take = bi.ge(n).or(v.ne(v).and(bv.eq(bv))).or(v.gt(bv)); // first, first NaN, or larger
    b.if(take, () => {
      b.set(bv, v);
      b.set(bi, i);
    });
  });
  argmaxMerge(b, t, lane, bv, bi, n);
  const write = () => b.store(out, rk.row, ot === "i32" ? bi.bitcast("i32") : bi);
  if (t.lanes === 1) write();
  else b.if(lane.eq(u32(0)), write);
  return b.build();
}

/**
 * Is (ov, oi) a better argmax candidate than (v, i)? A strict order over (value, index) with index n meaning
 * "none": any NaN beats every number and the first NaN wins; else the larger value, then the smaller index.
 */
export function argmaxBetter(ov: Val, oi: Val, v: Val, i: Val, n: number): Val {
  const oNan = ov.ne(ov), mNan = v.ne(v);
  const num = ov.gt(v).or(ov.eq(v).and(oi.lt(i)));
  return oi.lt(n).and(i.ge(n).or(oNan.select(mNan.not().or(oi.lt(i)), mNan.not().and(num))));
}

/** Merges every lane's candidate (bv, bi) over the team; lane 0 (every lane on subgroup paths) ends with the winner. */
export function argmaxMerge(b: KernelBuilder, t: Team, lane: Val, bv: Val, bi: Val, n: number): void {
  const better = (ov: Val, oi: Val, v: Val, i: Val) => argmaxBetter(ov, oi, v, i, n);
  if (t.lanes > 1 && !t.shared) {
    for (let off = t.lanes / t.sgs / 2; off >= 1; off /= 2) {
      const ov = b.let(b.shuffle("xor", bv, off), "f32", "ov");
      const oi = b.let(b.shuffle("xor", bi, off), "u32", "oi");
      b.if(better(ov, oi, bv, bi), () => {
        b.set(bv, ov);
        b.set(bi, oi);
      });
    }
    if (t.sgs > 1) { // each subgroup's winner meets the others in shared memory, scanned in order
      const sv = sharedFor(b, t, "f32", 1), si = sharedFor(b, t, "u32", 1);
      b.if(b.builtin("lane").eq(u32(0)), () => {
        b.sstore(sv, b.builtin("sgid"), bv);
        b.sstore(si, b.builtin("sgid"), bi);
      });
      b.barrier();
      b.set(bv, b.sload(sv, 0));
      b.set(bi, b.sload(si, 0));
      for (let w = 1; w < t.sgs; w++) {
        const ov = b.let(b.sload(sv, w), "f32", "ov"), oi = b.let(b.sload(si, w), "u32", "oi");
        b.if(better(ov, oi, bv, bi), () => {
          b.set(bv, ov);
          b.set(bi, oi);
        });
      }
    }
  } else if (t.shared) {
    const sv = sharedFor(b, t, "f32", 1), si = sharedFor(b, t, "u32", 1);
    b.sstore(sv, lane, bv);
    b.sstore(si, lane, bi);
    b.barrier();
    for (let h = t.lanes / 2; h >= 1; h /= 2) {
      b.if(lane.lt(h), () => {
        const ov = b.let(b.sload(sv, lane.add(h)), "f32", "ov"), oi = b.let(b.sload(si, lane.add(h)), "u32", "oi");
        const mv = b.let(b.sload(sv, lane), "f32", "mv"), mi = b.let(b.sload(si, lane), "u32", "mi");
        b.if(better(ov, oi, mv, mi), () => {
          b.sstore(sv, lane, ov);
          b.sstore(si, lane, oi);
        });
      });
      b.barrier();
    }
    b.set(bv, b.sload(sv, 0));
    b.set(bi, b.sload(si, 0));
  }
}
