// Steps 3 and 4 of the `sample` kernel (kernels/lib/sample.ts states the method): θk and θp by a radix search
// over the order keys of the candidate list (or of the row itself, where no list holds the kept set), then the
// draw. Run by the whole workgroup, or by one subgroup alone (PickEnv.lanes.single), whose reductions and scans
// are shuffles: for a short list (top-k 40 on a real model keeps a few dozen to a few hundred candidates) the
// workgroup's ~20 reductions here, each a barrier and a round trip through shared memory, cost more than the
// items do.
import { f32, type Buffer, type KernelBuilder, type Shared, u32, type Val } from "../ir.ts";
import { type Lanes, NONE, orderKey } from "./sample_lanes.ts";

export interface PickEnv {
  b: KernelBuilder;
  /** The lanes that run these steps: the workgroup, or one subgroup (`single`); every one of them calls. */
  lanes: Lanes;
  /** How many lanes that is. */
  W: number;
  mode: "one" | "subgroup" | "tree";
  /** Bits per radix round (2^bits − 1 pivots a round). */
  bits: number;
  /** The subgroup size (subgroup mode). */
  sg: number;
  X: Buffer;
  base: Val;
  V: number;
  /** The candidate list in shared memory: order keys, w, and indices (absent: entry j is logit j). */
  list: { key: Shared; w: Shared; idx?: Shared };
  /** Entries of the list to use, and logits of the row itself (a row no list covers). */
  nFast: Val;
  nSlow?: Val;
  /** The draw's source when it differs from nSlow (a bracket row ranks from its list but draws from the row). */
  nRow?: Val;
  /** The list holds the whole kept set (the draw reads it; else the row). */
  fast?: Val;
  /** The list is in use, and Z of the row (what top-p alone sums, from the parts). */
  listed?: Val;
  zAll?: Val;
  filter: { kOn: Val; kF: Val; pOn: Val; mOn: Val; topP: Val; minP: Val };
  wOf: (x: Val) => Val;
  /** The draw's uniform number in [0, 1). */
  u: Val;
  /** The token when the walk found no crossing (rounding): the first pick, its segment's last kept index, greedy. */
  fallback: (first: Val, near: Val, total: Val) => Val;
  /** A bracket row (sample_bracket.ts): the list is [lo, hi), whose logits above rank above it with mass massHi. */
  br?: { list: Val; massHi: Val; lo: Val };
  /** Runs body where c holds, c alike on every lane (a parameter or a reduction's result); or always (A/B). */
  when: (c: Val, body: () => void) => void;
}

interface Item {
  idx: Val;
  key: Val;
  w: () => Val;
}

/** The drawn token (u32), the same on every lane that ran it. */
export function pickToken(e: PickEnv): Val {
  const { b, lanes, W, X, base, list, nFast, nSlow, filter: { kOn, kF, pOn, mOn, topP, minP }, when } = e;
  const lid = lanes.lid, NP = (1 << e.bits) - 1;
  const fromShared = (j: Val): Item => ({
    idx: list.idx ? b.let(b.sload(list.idx, j), "u32", "ix") : j,
    key: b.let(b.sload(list.key, j), "u32", "key"),
    w: () => b.let(b.sload(list.w, j), "f32", "w"),
  });
  const fromRow = (j: Val): Item => {
    const x = b.let(b.load(X, base.add(j)), "f32", "x");
    return { idx: j, key: orderKey(b, x), w: () => e.wOf(x) };
  };
  // The list, in any order (one lane per element, strided) or in index order (contiguous slices per lane).
  const overList = (active: Val, f: (it: Item) => void): void => {
    b.for(lid, active.select(nFast, u32(0)), W, (j) => f(fromShared(j)));
    if (nSlow) b.for(lid, active.select(nSlow, u32(0)), W, (j) => f(fromRow(j)));
  };
  const overListInOrder = (f: (it: Item) => void): void => {
    const part = (n: Val, get: (j: Val) => Item) => {
      const per = b.let(n.add(W - 1).div(W), "u32", "per");
      const st = b.let(lid.mul(per), "u32", "st");
      b.for(st, b.let(st.add(per).min(n), "u32", "en"), 1, (j) => f(get(j)));
    };
    part(nFast, fromShared);
    if (nSlow) part(nSlow, fromRow);
  };

  // 3. θk (a count) and θp (a mass) by radix search over order keys.
  const radix = (active: Val, pred: (acc: Val[]) => Val[], addTo: (it: Item, take: (j: number) => Val, acc: Val[]) => void): Val => {
    const t = b.let(u32(0), "u32", "t");
    b.for(u32(0), u32(32 / e.bits), 1, (round) => {
      const sh = b.let(u32(32 - e.bits).sub(round.mul(e.bits)), "u32", "sh");
      const top = b.let(sh.add(e.bits), "u32", "top");
      const hiMask = b.let(top.ge(32).select(u32(0), u32(0xffffffff).shl(top.min(u32(31)))), "u32", "hm");
      const acc = Array.from({ length: NP }, () => b.let(f32(0), "f32", "a"));
      overList(active, (it) => {
        const hk = b.let(it.key.and(hiMask), "u32", "hk");
        const g = b.let(hk.gt(t).select(u32(NP), hk.eq(t).select(it.key.shr(sh).and(u32(NP)), u32(0))), "u32", "g");
        addTo(it, (j) => g.ge(u32(j)), acc);
      });
      const ok = pred(lanes.reduce("add", acc));
      let n: Val = u32(0);
      for (const p of ok) n = n.add(p.select(u32(1), u32(0)));
      b.set(t, t.or(n.shl(sh)));
    });
    return t;
  };
  const kth = b.let(u32(0), "u32", "kth");
  when(kOn, () => {
    const kRaw = radix(kOn, (r) => r.map((x) => x.ge(kF)), (_, take, acc) => {
      acc.forEach((a, j) => b.set(a, a.add(take(j + 1).select(f32(1), f32(0)))));
    });
    b.set(kth, kOn.select(kRaw, u32(0)));
  });

  const thP = b.let(u32(0), "u32", "thp");
  when(pOn, () => {
    const zk = b.let(f32(0), "f32", "zk");
    overList(pOn, (it) => b.if(it.key.ge(kth), () => {
      const w = it.w();
      b.set(zk, zk.add(mOn.not().or(w.ge(minP)).select(w, f32(0))));
    }));
    let [z] = lanes.reduce("add", [zk]);
    if (e.listed && e.zAll) z = b.let(e.listed.and(kOn.not()).select(e.zAll, z), "f32", "z");
    const pTarget = b.let(topP.mul(z), "f32", "pt");
    // a bracket row: the mass above its list counts at every pivot of every round (those logits rank above all)
    const massAbove = e.br ? b.let(e.br.list.select(e.br.massHi, f32(0)), "f32", "mab") : f32(0);
    const pRaw = radix(pOn, (r) => r.map((x) => (e.br ? x.add(massAbove) : x).ge(pTarget)), (it, take, acc) => {
      b.if(it.key.ge(kth), () => {
        const w = it.w();
        const wc = b.let(mOn.not().or(w.ge(minP)).select(w, f32(0)), "f32", "wc");
        acc.forEach((a, j) => b.set(a, a.add(take(j + 1).select(wc, f32(0)))));
      });
    });
    b.set(thP, pRaw);
  });
  // (a bracket row's θp is at or above its lower end, which covers: rounding aside the search finds it there)
  const thr = b.let(pOn.select(e.br ? e.br.list.select(thP.max(orderKey(b, e.br.lo)), thP) : thP, u32(0)).max(kth), "u32", "thr");
  const keptMask = (it: Item, w: Val): Val => it.key.ge(thr).and(mOn.not().or(w.ge(minP)));
  const keptW = (it: Item): Val => {
    const w = it.w();
    return b.let(keptMask(it, w).select(w, f32(0)), "f32", "kw");
  };

  // 4. the draw.
  if (e.mode === "subgroup") {
    // Segments of the list in index order, one per subgroup, read coalesced (lanes interleaved); only the
    // segment holding u · total is then walked in order. The list part a row does not draw from is skipped.
    const pick = b.let(f32(NONE), "f32", "dpick");
    const { fast, nRow } = e;
    const fromList = () => b.set(pick, drawBySegments(e, keptMask, nFast, fromShared));
    if (fast) when(fast, fromList);
    else fromList();
    if (nRow) when(fast!.not(), () => b.set(pick, fast!.select(pick, drawBySegments(e, keptMask, nRow, fromRow, true))));
    return b.let(pick.cast("u32"), "u32", "tok");
  }
  const mySum = b.let(f32(0), "f32", "my");
  overListInOrder((it) => b.set(mySum, mySum.add(keptW(it))));
  const { excl, total } = lanes.scan(mySum);
  const target = b.let(e.u.mul(total), "f32", "target");
  const cum = b.let(excl, "f32", "cum");
  const pick = b.let(f32(NONE), "f32", "pick"), last = b.let(f32(-1), "f32", "last");
  overListInOrder((it) => {
    const w = it.w();
    b.if(keptMask(it, w), () => {
      b.set(cum, cum.add(w));
      b.if(pick.eq(f32(NONE)).and(cum.gt(target)), () => b.set(pick, it.idx.cast("f32")));
      b.if(w.gt(f32(0)), () => b.set(last, it.idx.cast("f32")));
    });
  });
  const [negPick, lastAll] = lanes.reduce("max", [pick.neg(), last]);
  return b.let(e.fallback(negPick.neg(), lastAll, total).cast("u32"), "u32", "tok");
}

/**
 * The draw over one list part of n items (subgroup mode): each subgroup sums the kept w of its segment
 * (coalesced), a scan over segments gives each its start, the last segment starting at or below u · total
 * walks its items in order (contiguous slices per lane, a subgroup scan for their starts). When rounding
 * leaves no crossing there, that segment's last kept index with w > 0 (the knife edge's neighbour). keptMask: θk,
 * θp and min-p's test of an item.
 */
function drawBySegments(e: PickEnv, keptMask: (it: Item, w: Val) => Val, n: Val, get: (j: Val) => Item, row = false): Val {
  const { b, lanes, W, X, base, V } = e;
  const S = e.sg, G = W / S;
  const lane = b.builtin("lane"), sgid = G === 1 ? u32(0) : b.builtin("sgid");
  // The row itself is read 4 logits per lane and step (segments start at multiples of 4).
  const rv = row && V % 4 === 0 ? 4 : 1;
  const seg = b.let(n.add(G * rv - 1).div(G * rv).mul(rv), "u32", "seg");
  const s0 = b.let(sgid.mul(seg).min(n), "u32", "s0");
  const s1 = b.let(s0.add(seg).min(n), "u32", "s1");
  const acc = b.let(f32(0), "f32", "acc"), lastI = b.let(f32(-1), "f32", "lastI");
  const add = (it: Item) => {
    const w = it.w();
    b.if(keptMask(it, w), () => {
      b.set(acc, acc.add(w));
      b.if(w.gt(f32(0)), () => b.set(lastI, lastI.max(it.idx.cast("f32"))));
    });
  };
  if (rv > 1) {
    b.for(s0.add(lane.mul(rv)), s1, S * rv, (j) => {
      b.loadv(X, base.add(j), rv).forEach((x, k) => {
        const xv = b.let(x, "f32", "xv");
        add({ idx: k ? j.add(k) : j, key: orderKey(b, xv), w: () => e.wOf(xv) });
      });
    });
  } else b.for(s0.add(lane), s1, S, (j) => add(get(j)));
  const segSum = b.let(b.subgroupReduce("add", acc), "f32", "segSum");
  const segLast = b.let(b.subgroupReduce("max", lastI), "f32", "segLast");
  const { excl, total } = lanes.scan(lane.eq(u32(0)).select(segSum, f32(0)));
  const start = b.let(b.shuffle("idx", excl, u32(0)), "f32", "start");
  const target = b.let(e.u.mul(total), "f32", "target");
  const claim = start.le(target).and(segSum.gt(f32(0))).select(sgid.cast("f32"), f32(-1));
  const [chosen, lastAll] = lanes.reduce("max", [claim, segLast]);
  const mine = b.let(sgid.cast("f32").eq(chosen), "bool", "mine");
  const per = b.let(seg.add(S - 1).div(S), "u32", "per");
  const t0 = b.let(s0.add(lane.mul(per)).min(s1), "u32", "t0");
  const t1 = b.let(mine.select(t0.add(per).min(s1), t0), "u32", "t1");
  const my = b.let(f32(0), "f32", "mys");
  b.for(t0, t1, 1, (j) => {
    const it = get(j);
    const w = it.w();
    b.if(keptMask(it, w), () => b.set(my, my.add(w)));
  });
  const x = b.let(my, "f32", "inc");
  for (let d = 1; d < S; d *= 2) {
    const up = lane.ge(d);
    const y = b.let(b.shuffle("idx", x, up.select(lane.sub(d), lane)), "f32", "sy");
    b.set(x, x.add(up.select(y, f32(0))));
  }
  const cum = b.let(start.add(x.sub(my)), "f32", "cum");
  const pick = b.let(f32(NONE), "f32", "pick");
  b.for(t0, t1, 1, (j) => {
    const it = get(j);
    const w = it.w();
    b.if(keptMask(it, w), () => {
      b.set(cum, cum.add(w));
      b.if(pick.eq(f32(NONE)).and(cum.gt(target)), () => b.set(pick, it.idx.cast("f32")));
    });
  });
  const [negPick, near] = lanes.reduce("max", [pick.neg(), mine.select(segLast, f32(-1))]);
  return e.fallback(negPick.neg(), near.ge(f32(0)).select(near, lastAll), total);
}
