// Building blocks of the `sample` kernel (kernels/lib/sample.ts): cross-lane reductions and scans over one
// workgroup in the three layouts it runs in (one lane, subgroups, a shared-memory tree), the u32 order keys
// of floats its radix search runs over, and the counter-based hash of its RNG (graph/sample.ts states it).
import { type Buffer, f32, type KernelBuilder, KernelError, type Shared, u32, type Val } from "../ir.ts";
import type { SampleLayout } from "./sample.ts";

/** An index sentinel above every vocabulary index (indices travel as exact f32). */
export const NONE = 1 << 24;

/**
 * Cross-lane reductions and scans of f32 values over one workgroup, or over one subgroup alone (layout lanes =
 * the subgroup size), exact for integers below 2^24.
 */
export class Lanes {
  private readonly sgScratch?: Shared;
  private readonly scanScratch?: Shared;
  /** Which half of the reduction scratch the next reduction uses; flipped at run time (calls sit in loops). */
  private readonly parity?: Val;
  readonly lid: Val;
  /** One subgroup alone (lanes = the subgroup size): reductions and scans are shuffles, with no shared memory or barrier. */
  readonly single: boolean;
  constructor(private readonly b: KernelBuilder, private readonly L: Pick<SampleLayout, "lanes" | "mode">, private readonly sg: number, private readonly nv: number) {
    this.single = L.mode === "subgroup" && L.lanes === sg;
    this.lid = L.lanes === 1 ? u32(0) : this.single ? b.builtin("lane") : b.lid.x;
    if (this.single) return;
    if (L.mode === "subgroup") {
      const nsg = L.lanes / sg;
      this.sgScratch = b.shared("red", "f32", 2 * nv * nsg);
      this.scanScratch = b.shared("scan", "f32", nsg);
      this.parity = b.let(u32(0), "u32", "par");
    } else if (L.mode === "tree") {
      this.sgScratch = b.shared("red", "f32", nv * L.lanes);
      this.scanScratch = b.shared("scan", "f32", L.lanes);
    }
  }

  /** op over the workgroup of each value; every lane gets the results. Every lane must call it. */
  reduce(op: "add" | "max", vals: Val[]): Val[] {
    const { b, L } = this;
    if (vals.length > this.nv) throw new KernelError(`sample: ${vals.length} values in one reduction`);
    if (L.mode === "one") return vals.map((v) => b.let(v, "f32", "r"));
    const comb = (x: Val, y: Val) => (op === "add" ? x.add(y) : x.max(y));
    if (L.mode === "subgroup" && vals.length >= 2 && pow2(vals.length) <= this.sg) return this.reduceMany(op, vals);
    if (this.single) return vals.map((v) => b.let(b.subgroupReduce(op, v), "f32", "r"));
    if (L.mode === "subgroup") {
      // Subgroups reduce; lane 0 of each stores its result; then every subgroup reduces those (the same
      // values in the same order, so every lane gets the same bits). Double-buffered: no trailing barrier.
      const nsg = L.lanes / this.sg, s = this.sgScratch!;
      const at = b.let(this.parity!.mul(this.nv * nsg), "u32", "at");
      b.set(this.parity!, this.parity!.xor(u32(1)));
      const part = vals.map((v) => b.let(b.subgroupReduce(op, v), "f32", "p"));
      const lane = b.builtin("lane"), sgid = b.builtin("sgid");
      b.if(lane.eq(u32(0)), () => part.forEach((p, k) => b.sstore(s, sgid.add(at).add(k * nsg), p)));
      b.barrier();
      return vals.map((_, k) => {
        const x = b.let(f32(op === "add" ? 0 : -Infinity), "f32", "q");
        if (nsg <= this.sg) b.if(lane.lt(nsg), () => b.set(x, b.sload(s, lane.add(at).add(k * nsg))));
        else b.for(lane, u32(nsg), this.sg, (j) => b.set(x, comb(x, b.sload(s, j.add(at).add(k * nsg)))));
        return b.let(b.subgroupReduce(op, x), "f32", "r");
      });
    }
    const s = this.sgScratch!, W = L.lanes, lid = this.lid;
    vals.forEach((v, k) => b.sstore(s, lid.add(k * W), v));
    b.barrier();
    for (let h = W / 2; h >= 1; h /= 2) {
      b.if(lid.lt(h), () => vals.forEach((_, k) => b.sstore(s, lid.add(k * W), comb(b.sload(s, lid.add(k * W)), b.sload(s, lid.add(k * W + h))))));
      b.barrier();
    }
    const out = vals.map((_, k) => b.let(b.sload(s, k * W), "f32", "r"));
    b.barrier();
    return out;
  }

  /**
   * reduce() of n >= 2 values in subgroup mode, n rounded up to N (a power of two) <= the subgroup size S:
   * a butterfly that halves the values each lane carries at every step (N − 1 + log2(S/N) shuffles in all,
   * where one reduction per value takes n·log2(S)), so that lane l ends with the subgroup's result for value
   * l / (S/N). The subgroups' results meet in shared memory and every subgroup reduces them the same way,
   * then each value is read from the lane that holds it. Every lane gets the same bits: the last step adds
   * the same two partials in both lanes of a pair, and every subgroup does the same arithmetic.
   */
  private reduceMany(op: "add" | "max", vals: Val[]): Val[] {
    const { b, L } = this;
    const S = this.sg, n = vals.length, N = pow2(n), per = S / N, nsg = L.lanes / S, s = this.sgScratch!;
    const id = f32(op === "add" ? 0 : -Infinity);
    const comb = (x: Val, y: Val) => (op === "add" ? x.add(y) : x.max(y));
    const lane = b.builtin("lane"), sgid = b.builtin("sgid");
    const butterfly = (xs: Val[]): Val => {
      let v = [...xs, ...Array.from({ length: N - n }, () => id)];
      let d = S / 2;
      while (v.length > 1) { // keep one half (the upper where this lane's bit d is set), add the partner's copy
        const half = v.length / 2, upper = b.let(lane.and(u32(d)).ne(u32(0)), "bool", "bu");
        v = Array.from({ length: half }, (_, i) => {
          const got = b.let(b.shuffle("xor", upper.select(v[i], v[half + i]), u32(d)), "f32", "bg");
          return b.let(comb(upper.select(v[half + i], v[i]), got), "f32", "bk");
        });
        d /= 2;
      }
      let x = v[0];
      for (; d >= 1; d /= 2) x = b.let(comb(x, b.shuffle("xor", x, u32(d))), "f32", "bx");
      return x;
    };
    if (this.single) {
      const one = butterfly(vals.map((v) => b.let(v, "f32", "bv")));
      return vals.map((_, k) => b.let(b.shuffle("idx", one, u32(k * per)), "f32", "r"));
    }
    const at = b.let(this.parity!.mul(this.nv * nsg), "u32", "at");
    b.set(this.parity!, this.parity!.xor(u32(1)));
    const mine = butterfly(vals.map((v) => b.let(v, "f32", "bv")));
    const slot = b.let(lane.div(u32(per)), "u32", "bslot");
    b.if(lane.mod(u32(per)).eq(u32(0)).and(slot.lt(u32(n))), () => b.sstore(s, slot.mul(u32(nsg)).add(sgid).add(at), mine));
    b.barrier();
    const parts = vals.map((_, k) => {
      const x = b.let(id, "f32", "bq");
      if (nsg <= S) b.if(lane.lt(u32(nsg)), () => b.set(x, b.sload(s, lane.add(at).add(k * nsg))));
      else b.for(lane, u32(nsg), S, (j) => b.set(x, comb(x, b.sload(s, j.add(at).add(k * nsg)))));
      return x;
    });
    const all = butterfly(parts);
    return vals.map((_, k) => b.let(b.shuffle("idx", all, u32(k * per)), "f32", "r"));
  }

  /** Exclusive prefix sum of v over lanes in lane order, and the total. Every lane must call it. */
  scan(v: Val): { excl: Val; total: Val } {
    const { b, L } = this;
    if (L.mode === "one") return { excl: f32(0), total: v };
    const s = this.scanScratch!;
    if (L.mode === "subgroup") {
      const S = this.sg, nsg = L.lanes / S;
      const lane = b.builtin("lane"), sgid = b.builtin("sgid");
      const x = b.let(v, "f32", "sc");
      for (let d = 1; d < S; d *= 2) {
        const up = lane.ge(d);
        const y = b.let(b.shuffle("idx", x, up.select(lane.sub(d), lane)), "f32", "sy");
        b.set(x, x.add(up.select(y, f32(0))));
      }
      const prev = b.let(b.shuffle("idx", x, lane.ge(1).select(lane.sub(1), u32(0))), "f32", "sp");
      if (this.single) {
        const total = b.let(b.shuffle("idx", x, u32(S - 1)), "f32", "st");
        return { excl: b.let(lane.ge(1).select(prev, f32(0)), "f32", "ex"), total };
      }
      b.if(lane.eq(u32(S - 1)), () => b.sstore(s, sgid, x));
      b.barrier();
      if (nsg <= S) {
        // The subgroups' totals scanned across the lanes of every subgroup (log2 shuffles), not summed one by
        // one per lane (a dependent chain of nsg shared loads: ~1 µs at 32 subgroups).
        const t = b.let(lane.lt(u32(nsg)).select(b.sload(s, lane.min(u32(nsg - 1))), f32(0)), "f32", "sg");
        for (let d = 1; d < nsg; d *= 2) {
          const up = lane.ge(d);
          const y = b.let(b.shuffle("idx", t, up.select(lane.sub(d), lane)), "f32", "sy");
          b.set(t, t.add(up.select(y, f32(0))));
        }
        const before = b.let(b.shuffle("idx", t, sgid.ge(1).select(sgid.sub(1), u32(0))), "f32", "sb");
        const total = b.let(b.shuffle("idx", t, u32(nsg - 1)), "f32", "st");
        b.barrier();
        return { excl: b.let(sgid.ge(1).select(before, f32(0)).add(lane.ge(1).select(prev, f32(0))), "f32", "ex"), total };
      }
      const base = b.let(f32(0), "f32", "sb"), total = b.let(f32(0), "f32", "st");
      b.for(u32(0), u32(nsg), 1, (g) => {
        const t = b.let(b.sload(s, g), "f32", "sg");
        b.set(base, base.add(g.lt(sgid).select(t, f32(0))));
        b.set(total, total.add(t));
      });
      b.barrier();
      return { excl: b.let(base.add(lane.ge(1).select(prev, f32(0))), "f32", "ex"), total };
    }
    const W = L.lanes, lid = this.lid;
    b.sstore(s, lid, v);
    b.barrier();
    for (let d = 1; d < W; d *= 2) {
      const t = b.let(lid.ge(d).select(b.sload(s, lid.ge(d).select(lid.sub(d), u32(0))), f32(0)), "f32", "ht");
      b.barrier();
      b.sstore(s, lid, b.sload(s, lid).add(t));
      b.barrier();
    }
    const excl = b.let(lid.ge(1).select(b.sload(s, lid.ge(1).select(lid.sub(1), u32(0))), f32(0)), "f32", "ex");
    const total = b.let(b.sload(s, W - 1), "f32", "st");
    b.barrier();
    return { excl, total };
  }
}

/** u32 keys that order like the floats (-0 is +0; only finite values are keyed). */
export function orderKey(b: KernelBuilder, x: Val): Val {
  const raw = b.let(x.bitcast("u32"), "u32", "kb");
  const bits = raw.eq(u32(0x80000000)).select(u32(0), raw);
  const mask = u32(0).sub(bits.shr(31)).or(u32(0x80000000));
  return b.let(bits.xor(mask), "u32", "key");
}

/** Wellons' triple32, as graph/sample.ts mix32. */
export function mix32(b: KernelBuilder, v: Val): Val {
  const x = b.let(v, "u32", "h");
  b.set(x, x.xor(x.shr(17)).mul(u32(0xed5ad4bb)));
  b.set(x, x.xor(x.shr(11)).mul(u32(0xac4c1b51)));
  b.set(x, x.xor(x.shr(15)).mul(u32(0x31848bab)));
  b.set(x, x.xor(x.shr(14)));
  return x;
}

/** The least power of two >= n. */
function pow2(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/**
 * The logits of a row that `keep` passes, into a list in index order (subgroup mode), read coalesced: subgroup g
 * owns the g-th contiguous segment of the row and walks it in chunks of S·vw (lane l: the vw logits at l·vw),
 * a shuffle scan orders a chunk's matches across its lanes, and a scan of the subgroups' counts over the
 * workgroup places the segments. (One contiguous slice per lane would read a row with every lane of a subgroup
 * on another cache line.) `put(at, i, x)` stores entry `at` (the caller bounds it); returns how many passed.
 */
export function compactInOrder(b: KernelBuilder, lanes: Lanes, o: {
  X: Buffer; base: Val; V: number; vw: number; S: number; nsg: number; active: Val;
  keep: (x: Val) => Val; put: (at: Val, i: Val, x: Val) => void;
}): Val {
  const { X, base, V, vw, S, nsg } = o;
  const chunk = S * vw, seg = Math.ceil(Math.ceil(V / nsg) / chunk) * chunk;
  const lane = b.builtin("lane"), sgid = b.builtin("sgid");
  const g0 = b.let(sgid.mul(u32(seg)).min(u32(V)), "u32", "cg0");
  const g1 = b.let(o.active.select(g0.add(u32(seg)).min(u32(V)), g0), "u32", "cg1");
  // chunk c: this lane's vw logits (a lane past the segment's end loads the chunk's first and keeps none)
  const over = (f: (i: Val, xs: Val[], ok: Val) => void) => b.for(g0, g1, chunk, (c) => {
    const i = b.let(c.add(lane.mul(u32(vw))), "u32", "ci");
    const ok = b.let(i.lt(g1), "bool", "cok");
    const at = base.add(ok.select(i, c));
    f(i, vw > 1 ? b.loadv(X, at, vw) : [b.load(X, at)], ok);
  });
  const n = b.let(u32(0), "u32", "cn");
  over((_, xs, ok) => xs.forEach((x) => b.if(ok.and(o.keep(x)), () => b.set(n, n.add(u32(1))))));
  const mine = b.let(b.subgroupReduce("add", n.cast("f32")), "f32", "cw");
  const { excl, total } = lanes.scan(lane.eq(u32(0)).select(mine, f32(0)));
  const at = b.let(b.shuffle("idx", excl, u32(0)).cast("u32"), "u32", "cat");
  over((i, xs, ok) => {
    const kept = xs.map((x) => b.let(ok.and(o.keep(x)), "bool", "ck"));
    const c = b.let(kept.reduce((a: Val, k) => a.add(k.select(f32(1), f32(0))), f32(0)), "f32", "cc");
    const inc = b.let(c, "f32", "cinc");
    for (let d = 1; d < S; d *= 2) {
      const up = lane.ge(d);
      const y = b.let(b.shuffle("idx", inc, up.select(lane.sub(d), lane)), "f32", "cy");
      b.set(inc, inc.add(up.select(y, f32(0))));
    }
    const pos = b.let(at.add(inc.sub(c).cast("u32")), "u32", "cpos");
    xs.forEach((x, e) => b.if(kept[e], () => {
      o.put(pos, e ? i.add(e) : i, x);
      b.set(pos, pos.add(u32(1)));
    }));
    b.set(at, at.add(b.shuffle("idx", inc, u32(S - 1)).cast("u32")));
  });
  return total;
}
