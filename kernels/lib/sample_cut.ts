// Step 2 of the `sample` kernel (kernels/lib/sample.ts states the method) for a row longer than its candidate
// list, where the parts did not list it (kernels/lib/sample_list.ts): the cut — a pivot of the parts' masses that
// covers the kept set within `cap` logits, else found by bisection, one pass over the row per step — and the
// logits at or above it compacted into shared memory in index order (a bracket row, sample_bracket.ts: its
// [lo, hi) instead). Run by the whole workgroup; every branch that holds a barrier is on values alike on every lane.
import { f32, type Buffer, type KernelBuilder, type Shared, u32, type Val } from "../ir.ts";
import { MASS, MASS_WORDS, PIVOTS } from "./sample_split.ts";
import type { Bracket } from "./sample_bracket.ts";
import { compactInOrder, type Lanes, orderKey } from "./sample_lanes.ts";

export interface CutEnv {
  b: KernelBuilder;
  /** The workgroup's lanes (W of them; subgroups of sg in subgroup mode). */
  lanes: Lanes;
  W: number;
  mode: "one" | "subgroup" | "tree";
  sg: number;
  /** Values per reduction (2^bits − 1, at least 3). */
  NP: number;
  X: Buffer;
  base: Val;
  V: number;
  /** Logits per load. */
  vw: number;
  CAP: number;
  /** Bisection steps. */
  steps: number;
  row: Val;
  /** The parts and their mass records (split rows), or none: Z then takes a pass over the row. */
  split?: { parts: number };
  MS?: Buffer;
  /** The row's max. */
  m: Val;
  filter: { kOn: Val; kF: Val; pOn: Val; mOn: Val; topP: Val; minP: Val };
  needZ: Val;
  /** covers() at a logit: count and Σ w at or above it, zTarget = top_p · Z. */
  cover: (count: Val, mass: Val, at: Val, zTarget: Val) => Val;
  wOf: (x: Val) => Val;
  /** A pass over the row (sample.ts): strided, or contiguous per lane in index order. */
  overRow: (active: Val | null, f: (i: Val, x: Val) => void, inOrder?: boolean) => void;
  when: (c: Val, body: () => void) => void;
  br?: Bracket;
  list: { key: Shared; w: Shared; idx: Shared };
  /** IR variables the caller declared and reads after: found (u32 0/1), cut, the search's bracket, Z, the list's length. */
  found: Val;
  cut: Val;
  lo2: Val;
  hi: Val;
  z: Val;
  total: Val;
}

/** Finds the cut and compacts the list (or finds neither: the row is then read in place). */
export function cutAndCompact(e: CutEnv): void {
  const { b, lanes, W, mode, sg, NP, X, base, V, vw, CAP, steps, row, split, MS, m, needZ, cover, wOf, overRow, when, br } = e;
  const { kOn, pOn, mOn, topP, minP } = e.filter;
  const { found, cut, lo2, hi, z, total } = e;
  const { key: sKey, w: sW, idx: sIdx } = e.list;

  /** Sums over the row's parts of these words of the mass records (every lane gets them). */
  function partSums(words: number[]): Val[] {
    const n = words.length;
    const P = split!.parts;
    const o = b.let(row.mul(u32(P * MASS_WORDS)), "u32", "so");
    const pPer = Math.ceil(P / W);
    const b0 = b.let(lanes.lid.mul(u32(pPer)).min(u32(P)), "u32", "sb0");
    const b1 = b.let(b0.add(u32(pPer)).min(u32(P)), "u32", "sb1");
    const acc = Array.from({ length: n }, () => b.let(f32(0), "f32", "sa"));
    b.for(b0, b1, 1, (p) => {
      const at = b.let(o.add(p.mul(u32(MASS_WORDS))), "u32", "sat");
      acc.forEach((a, k) => b.set(a, a.add(b.load(MS!, at.add(words[k])))));
    });
    const nv = Math.max(NP, 3), out: Val[] = [];
    for (let k = 0; k < n; k += nv) out.push(...lanes.reduce("add", acc.slice(k, k + nv)));
    return out;
  }

  let zTarget: Val;
  if (split) {
    // Z, and the counts and masses at the pivots, from the parts: the cut is a pivot when one covers the
    // kept set within `cap`; else the search starts between the two pivots around it.
    b.set(z, partSums([MASS.z])[0]);
    zTarget = b.let(topP.mul(z), "f32", "zt");
    const o0 = b.let(row.mul(u32(split.parts * MASS_WORDS)), "u32", "po0");
    const pivot = (j: number) => (j < PIVOTS ? b.let(b.load(MS!, o0.add(MASS.pivot + j)), "f32", "piv") : m);
    // a few pivots' (count, mass) per reduction, so that the sums held at once stay few (registers)
    const per = Math.max(1, Math.floor(Math.max(NP, 3) / 2));
    for (let j0 = 0; j0 < PIVOTS; j0 += per) {
      const js = Array.from({ length: Math.min(per, PIVOTS - j0) }, (_, k) => j0 + k);
      const sums = partSums(js.flatMap((j) => [MASS.count + j, MASS.above + j]));
      js.forEach((j, k) => { // ascending pivots: the last that covers is the tightest
        const cnt = sums[2 * k], mass = sums[2 * k + 1], pv = pivot(j);
        b.if(cnt.gt(f32(CAP)), () => b.set(lo2, pv));
        b.if(cover(cnt, mass, pv, zTarget), () => {
          b.set(found, cnt.le(f32(CAP)).select(u32(1), u32(0)));
          b.set(cut, pv);
          b.set(hi, pivot(j + 1));
          if (br) br.cover(pv, cnt);
        }, br ? () => br.above(pv, cnt, mass) : undefined);
      });
    }
    b.if(found.eq(u32(0)).and(cut.eq(m)), () => b.set(hi, pivot(0))); // no pivot covers: the cut is below them all
    b.set(cut, found.eq(u32(1)).select(cut, m));
    if (br) br.refine(found, zTarget);
  } else {
    when(needZ, () => {
      const za = b.let(f32(0), "f32", "za");
      overRow(needZ, (_, x) => {
        const w = wOf(x);
        b.set(za, za.add(mOn.not().or(w.ge(minP)).select(w, f32(0))));
      });
      b.set(z, lanes.reduce("add", [za])[0]);
    });
    zTarget = b.let(topP.mul(z), "f32", "zt");
  }
  // With no filter on, no cut can cover the kept set: the search runs no step.
  // Nor when the bracket is already hopeless: a cut within `cap` lies above lo2 (more than `cap` logits are
  // >= lo2) and a covering cut below hi (cover and counts fall as the cut rises), so lo2 >= hi leaves none:
  // each step would only move lo2 up. A flat row under top-p near 1: the parts' pivots say so at once, and
  // the 12 passes over the row on one workgroup are skipped (the slow path follows either way).
  const search = b.let(kOn.or(pOn).or(mOn).and(lo2.lt(hi)).and(br ? br.on.not() : true), "bool", "search");
  b.for(u32(0), u32(steps), 1, () => when(found.eq(u32(0)).and(search), () => {
    const mid = b.let(lo2.mul(0.5).add(hi.mul(0.5)), "f32", "mid");
    const cnt = b.let(u32(0), "u32", "cnt"), sm = b.let(f32(0), "f32", "sm");
    overRow(found.eq(u32(0)).and(search), (_, x) => {
      b.if(x.ge(mid), () => {
        b.set(cnt, cnt.add(1));
        b.if(needZ, () => b.set(sm, sm.add(wOf(x))));
      });
    });
    const [rc, rs] = lanes.reduce("add", [cnt.cast("f32"), sm]);
    const covers = b.let(cover(rc, rs, mid, zTarget), "bool", "cover");
    b.if(found.eq(u32(0)), () => {
      b.if(rc.gt(f32(CAP)), () => b.set(lo2, mid), () => {
        b.if(covers, () => {
          b.set(found, u32(1));
          b.set(cut, mid);
        }, () => b.set(hi, mid));
      });
    });
  }));
  const isFast = b.let(found.eq(u32(1)), "bool", "isFast");
  // The list: the kept set's superset {x >= cut}, or a bracket row's [lo, hi) (bracket.ts).
  const listing = br ? b.let(isFast.or(br.list), "bool", "listing") : isFast;
  const lower = br ? b.let(isFast.select(cut, br.lo), "f32", "llo") : cut;
  const inList = (x: Val): Val => (br ? x.ge(lower).and(isFast.or(x.lt(br.hi))) : x.ge(cut));
  const put = (at: Val, i: Val, x: Val) => b.if(at.lt(u32(CAP)), () => {
    b.sstore(sIdx!, at, i);
    b.sstore(sKey, at, orderKey(b, x));
    b.sstore(sW, at, wOf(x));
  });
  when(listing, () => {
    if (mode === "subgroup") { // coalesced, in index order (sample_lanes.ts)
      b.set(total, compactInOrder(b, lanes, { X, base, V, vw, S: sg, nsg: W / sg, active: listing, keep: inList, put }));
    } else { // in index order: count this lane's slice, scan, write
      const mine = b.let(u32(0), "u32", "mine");
      overRow(listing, (_, x) => b.if(inList(x), () => b.set(mine, mine.add(1))), true);
      const scan = lanes.scan(mine.cast("f32"));
      b.set(total, scan.total);
      const at = b.let(scan.excl.cast("u32"), "u32", "at");
      overRow(listing, (i, x) => b.if(inList(x), () => {
        put(at, i, x);
        b.set(at, at.add(1));
      }), true);
    }
  });
}
