// The `logprobs` composite (graph/logits.ts states its meaning) split over many teams per row, for a long
// vocabulary at small batch, where kernels/lib/logits.ts `logprobs` (one workgroup per row, one pass over
// the row per top entry) leaves the GPU idle and pays one SM's latency for every pass. Two kernels:
//
//  1. logprobsPart, one team (a subgroup where there are subgroups) per (row, part): over its slice of the
//     row (held in registers where it fits: one round of loads, then arithmetic), the max and its first index,
//     Σ exp(x − max), then the slice's top entries in order (value descending, index ascending; NaN never
//     ranks), as many as the row asks for: rounds of "largest after the previous". Rows that want no
//     logprobs read nothing.
//  2. logprobsCombine, one team per row: m and log Σ from the parts' (max, sum), then the row's top entries
//     by merging the parts' sorted lists: each lane keeps a head (and the entry after it, prefetched) into a
//     few parts' lists, each round takes the best head over the team and advances it.
// A team is a whole workgroup (one (row, part) or one row each), so a row that wants no logprobs returns at
// once and the rounds (a loop to the row's top_logprobs, not an unrolled N) end there: those exits and trip
// counts are uniform over the workgroup.
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, team, teamReduce, teamRow, vecWidth } from "./common.ts";
import { SAMPLER, SAMPLER_WORDS } from "../../graph/sample.ts";
import { sampleSplit } from "./sample_split.ts";

const NONE = 1 << 24; // an index sentinel above every vocabulary index (indices travel as exact f32)

export interface LogprobsSplitShape {
  rows: number;
  vocab: number;
  /** Top logprobs per row (N of the op). */
  n: number;
  parts: number;
}

/** f32 words of one part's record: max, Σ exp(x − max), then N (value, index) pairs. */
export const partWords = (n: number) => 2 + 2 * n;

/** Parts per row of the split logprobs kernels: 1 below 16k logits or without wide subgroups; else ~1k-logit slices. */
export function logprobsParts(caps: Caps, vocab: number): number {
  if (!caps.subgroups || caps.subgroupSize < 8 || vocab < 16384) return 1;
  return sampleSplit(vocab, Math.min(128, Math.ceil(vocab / 1024))).parts;
}

function check(s: LogprobsSplitShape, what: string): void {
  const { rows: R, vocab: V, n: N } = s;
  if (!(Number.isInteger(R) && R >= 1 && Number.isInteger(V) && V >= 1 && Number.isInteger(N) && N >= 0)) {
    throw new KernelError(`${what}: bad shape ${R}x${V}, n ${N}`);
  }
  if (V >= NONE || R * V >= 2 ** 32) throw new KernelError(`${what}: ${R}x${V} logits exceed the kernel's index range`);
}

/** The row's wish: (want, nTop), from the Sampler slot. */
function wish(b: KernelBuilder, P: ReturnType<KernelBuilder["buffer"]>, row: Val, N: number): { want: Val; nTop: Val } {
  const want = b.let(b.load(P, row.mul(SAMPLER_WORDS).add(SAMPLER.logprobs)).eq(u32(1)), "bool", "want");
  const nTop = b.let(want.select(b.load(P, row.mul(SAMPLER_WORDS).add(SAMPLER.topLogprobs)).min(u32(N)), u32(0)), "u32", "ntop");
  return { want, nTop };
}

/** Most logits a lane holds in registers in logprobsPart (else its passes re-read the slice). */
const HELD = 32;

/**
 * Per (row, part) records. Bindings: logits f32 [rows, vocab] (r), params u32 [rows, SAMPLER_WORDS] (r),
 * part f32 [rows, parts, 2 + 2n] (w).
 */
export function logprobsPart(caps: Caps, s: LogprobsSplitShape): Kernel {
  check(s, "logprobs_part");
  const { rows: R, vocab: V, n: N } = s;
  const { parts: P, slice: SL } = sampleSplit(V, s.parts);
  const t = team(caps, { rows: 1, maxLanes: 64 });
  const grid = gridFor(caps, Math.ceil((R * P) / t.rows));
  const b = new KernelBuilder(`logprobs_part_r${R}_v${V}_n${N}_p${P}`, { workgroup: t.size, grid });
  const X = b.buffer("logits", "f32", "r");
  const PRM = b.buffer("params", "u32", "r");
  const OUT = b.buffer("part", "f32", "w");
  const { lane, row: item } = teamRow(b, t, grid);
  const live = b.let(item.lt(u32(R * P)), "bool", "live");
  const it = b.let(live.select(item, u32(0)), "u32", "it");
  const row = b.let(it.div(u32(P)), "u32", "row");
  const { want, nTop } = wish(b, PRM, row, N);
  const s0 = b.let(it.mod(u32(P)).mul(u32(SL)), "u32", "s0");
  const s1 = b.let(s0.add(u32(SL)).min(u32(V)), "u32", "s1");
  const base = b.let(row.mul(u32(V)), "u32", "base");
  const vw = Math.min(4, vecWidth(4, V));
  const rec = b.let(it.mul(u32(partWords(N))), "u32", "rec");
  const put = (k: number | Val, v: Val) => b.if(lane.eq(u32(0)).and(live), () => b.store(OUT, rec.add(k), v));
  // A row that wants none is not read (the combine reads no record of it); the team is the whole workgroup,
  // so the exit is uniform there.
  b.if(want.not().or(live.not()), () => b.return());

  // The lane's logits: loads j = 0, 1, ... at s0 + (j·lanes + lane)·vw, each vw consecutive logits (slices
  // start at multiples of 4 and V is a multiple of vw, so a load is wholly inside the slice or wholly past
  // it), in index order. Where they fit (HELD), they are loaded once into registers, all loads issued before
  // any use: every pass below is then arithmetic and shuffles, where re-reading the slice per pass left one
  // warp per SM waiting on L1 for each of the rounds. Else each pass reads the slice again.
  const loads = Math.ceil(SL / (t.lanes * vw));
  const held = loads * vw <= HELD;
  const at = (j: number) => s0.add(lane.mul(vw)).add(j * t.lanes * vw);
  let regs: { i: Val; ok: Val; xs: Val[] }[] = [];
  if (held) {
    regs = Array.from({ length: loads }, (_, j) => {
      const i = b.let(at(j), "u32", "li");
      const ok = b.let(i.lt(s1), "bool", "lok");
      const xs = b.loadv(X, base.add(ok.select(i, s0)), vw).map((x) => b.let(x, "f32", "lx"));
      return { i, ok, xs };
    });
  }
  const overSlice = (f: (i: Val, x: Val, ok: Val | undefined) => void) => {
    if (held) {
      for (const r of regs) r.xs.forEach((x, e) => f(e ? r.i.add(e) : r.i, x, r.ok));
      return;
    }
    b.for(s0.add(lane.mul(vw)), s1, t.lanes * vw, (i) => {
      const xs = vw > 1 ? b.loadv(X, base.add(i), vw) : [b.load(X, base.add(i))];
      xs.forEach((x, e) => f(e ? i.add(e) : i, x, undefined));
    });
  };
  const NEG = f32(-Infinity);
  // The lane's best logit (largest, then lowest index; NaN never) among those `eligible` passes: over registers
  // a tree of pairs (the candidates in index order, so a tie keeps the left one), 5 steps deep rather than a
  // chain through all 32; over memory a running best.
  type Best = { v: Val; i: Val };
  const laneBest = (eligible: (x: Val, fi: Val) => Val): Best => {
    if (!held) {
      const bv = b.let(NEG, "f32", "bx"), bi = b.let(f32(NONE), "f32", "bi");
      overSlice((i, x) => {
        const fi = b.let(i.cast("f32"), "f32", "fi");
        b.if(eligible(x, fi).and(x.eq(x)).and(x.gt(bv).or(bi.eq(f32(NONE)))), () => {
          b.set(bv, x);
          b.set(bi, fi);
        });
      });
      return { v: bv, i: bi };
    }
    let c: Best[] = regs.flatMap((r) =>
      r.xs.map((x, e) => {
        const fi = b.let((e ? r.i.add(e) : r.i).cast("f32"), "f32", "fi");
        const on = b.let(r.ok.and(x.eq(x)).and(eligible(x, fi)), "bool", "con");
        return { v: b.let(on.select(x, NEG), "f32", "cv"), i: b.let(on.select(fi, f32(NONE)), "f32", "ci") };
      })
    );
    while (c.length > 1) {
      const next: Best[] = [];
      for (let k = 0; k + 1 < c.length; k += 2) {
        const l = c[k], r = c[k + 1];
        const left = b.let(l.i.lt(f32(NONE)).and(r.i.eq(f32(NONE)).or(l.v.ge(r.v))), "bool", "tl");
        next.push({ v: b.let(left.select(l.v, r.v), "f32", "tv"), i: b.let(left.select(l.i, r.i), "f32", "ti") });
      }
      if (c.length % 2) next.push(c[c.length - 1]);
      c = next;
    }
    return c[0];
  };
  // max (NaN skipped) and its first index; then Σ exp(x − m) against the team's max m (−∞ adds nothing)
  const { v: mx, i: mi } = laneBest(() => u32(1).eq(u32(1)));
  const m = b.let(teamReduce(b, t, "max", mx), "f32", "m");
  const first = b.let(teamReduce(b, t, "min", mi.lt(f32(NONE)).and(mx.eq(m)).select(mi, f32(NONE))), "f32", "first");
  const sm = b.let(f32(0), "f32", "sm");
  overSlice((_, x, ok) => {
    const on = x.eq(x).and(x.gt(NEG));
    b.if(ok ? on.and(ok) : on, () => b.set(sm, sm.add(x.sub(m).exp())));
  });
  const sum = b.let(teamReduce(b, t, "add", sm), "f32", "sum");
  put(0, m);
  put(1, sum);
  if (N === 0) return b.build();
  put(2, m);
  put(3, first);
  // Rounds 1 .. nTop − 1 (the row's, uniform over the workgroup): "largest after the previous".
  const px = b.let(m, "f32", "px"), pi = b.let(first, "f32", "pi");
  b.for(u32(1), b.let(pi.lt(f32(NONE)).select(nTop, u32(1)), "u32", "nr"), 1, (k) => {
    const { v: bx, i: bi } = laneBest((x, fi) => x.lt(px).or(x.eq(px).and(fi.gt(pi))));
    const M = b.let(teamReduce(b, t, "max", bi.lt(f32(NONE)).select(bx, NEG)), "f32", "M");
    const I = b.let(teamReduce(b, t, "min", bi.lt(f32(NONE)).and(bx.eq(M)).select(bi, f32(NONE))), "f32", "I");
    put(k.mul(u32(2)).add(u32(2)), M);
    put(k.mul(u32(2)).add(u32(3)), I);
    b.set(px, M);
    b.set(pi, I);
  });
  return b.build();
}

/**
 * The row's logprobs from its parts. Bindings: logits f32 [rows, vocab] (r), sample i32 [rows, 2] (r),
 * params u32 [rows, SAMPLER_WORDS] (r), part f32 [rows, parts, 2 + 2n] (r), out f32 [rows, 1 + 2n] (w).
 */
export function logprobsCombine(caps: Caps, s: LogprobsSplitShape): Kernel {
  check(s, "logprobs_combine");
  const { rows: R, vocab: V, n: N } = s;
  const { parts: P } = sampleSplit(V, s.parts);
  const t = team(caps, { rows: 1, maxLanes: 64 });
  const J = Math.ceil(P / t.lanes); // parts per lane
  // (registers: 6 per part; a one-lane target holds them all, as the JS device does in tests that force a split)
  if (J > 16 && t.lanes > 1) throw new KernelError(`logprobs_combine: ${P} parts over ${t.lanes} lanes (at most 16 per lane)`);
  const grid = gridFor(caps, Math.ceil(R / t.rows));
  const b = new KernelBuilder(`logprobs_combine_r${R}_v${V}_n${N}_p${P}`, { workgroup: t.size, grid });
  const X = b.buffer("logits", "f32", "r");
  const S = b.buffer("sample", "i32", "r");
  const PRM = b.buffer("params", "u32", "r");
  const PART = b.buffer("part", "f32", "r");
  const OUT = b.buffer("out", "f32", "w");
  const { lane, row: r0 } = teamRow(b, t, grid);
  const live = b.let(r0.lt(u32(R)), "bool", "live");
  const row = b.let(live.select(r0, u32(0)), "u32", "row");
  const { want, nTop } = wish(b, PRM, row, N);
  const PW = partWords(N), OW = 1 + 2 * N;
  const recOf = (p: Val) => row.mul(u32(P * PW)).add(p.mul(u32(PW)));
  const put = (k: number | Val, v: Val) => b.if(lane.eq(u32(0)).and(live), () => b.store(OUT, row.mul(u32(OW)).add(k), v));

  // The words the rounds below do not write: pairs past the row's top_logprobs ((−1, 0), or all 0 for a row
  // that wants none), spread over the lanes. A row that wants none stops here; the rounds stop at the row's
  // top_logprobs (one row per workgroup: the exit and the trip count are uniform).
  b.for(lane.add(nTop.mul(u32(2))), live.select(u32(2 * N), u32(0)), t.lanes, (w) => {
    b.store(OUT, row.mul(u32(OW)).add(w).add(u32(1)), want.and(w.and(u32(1)).eq(u32(0))).select(f32(-1), f32(0)));
  });
  b.if(want.not(), () => put(0, f32(0)));
  b.if(want.not().or(live.not()), () => b.return());
  // Everything a round needs first is loaded up front, independent loads issued together: each part's (max,
  // Σ) and its first two entries, then the sampled token's logit. A part's next entry is fetched when its head
  // advances, one round before it can be needed.
  const NEG = f32(-Infinity);
  const entry = (rec: Val, h: Val | number) => b.let(rec.add(u32(2)).add(typeof h === "number" ? u32(2 * h) : h.mul(u32(2))), "u32", "ea");
  const parts = Array.from({ length: J }, (_, j) => {
    const p = b.let(lane.add(u32(j * t.lanes)), "u32", "p");
    const has = b.let(p.lt(u32(P)), "bool", "has");
    const rec = b.let(recOf(has.select(p, u32(0))), "u32", "rec");
    const pm = b.let(b.load(PART, rec), "f32", "pm"), ps = b.let(b.load(PART, rec.add(1)), "f32", "ps");
    if (N === 0) return { has, rec, pm, ps, head: u32(0), hv: f32(0), hi: f32(NONE), nv: f32(0), ni: f32(0) };
    const e0 = entry(rec, 0), e1 = entry(rec, Math.min(1, N - 1));
    return {
      has, rec, pm, ps,
      head: b.let(u32(0), "u32", "head"),
      hv: b.let(b.load(PART, e0), "f32", "hv"),
      hi: b.let(has.select(b.load(PART, e0.add(1)), f32(NONE)), "f32", "hi"),
      nv: b.let(b.load(PART, e1), "f32", "nv"),
      ni: b.let(b.load(PART, e1.add(1)), "f32", "ni"),
    };
  });
  // after the records' loads (a load that waits on another, issued first, would hold them back)
  const tok = b.let(b.load(S, row.mul(2)).bitcast("u32").min(u32(V - 1)), "u32", "tok");
  const xt = b.let(b.load(X, row.mul(u32(V)).add(tok)), "f32", "xt");
  const mx = b.let(NEG, "f32", "mx");
  for (const q of parts) b.if(q.has, () => b.set(mx, mx.max(q.pm)));
  const m = b.let(teamReduce(b, t, "max", mx), "f32", "m");
  const acc = b.let(f32(0), "f32", "acc");
  for (const q of parts) b.if(q.has.and(q.pm.gt(NEG)), () => b.set(acc, acc.add(q.ps.mul(q.pm.sub(m).exp()))));
  const ls = b.let(teamReduce(b, t, "add", acc).log(), "f32", "ls");
  const lp = (x: Val): Val => x.sub(m).sub(ls);
  put(0, lp(xt));
  if (N === 0) return b.build();

  b.for(u32(0), nTop, 1, (k) => {
    // this lane's best head: value descending, index ascending; a part's list ends at its first NONE index
    const bx = b.let(NEG, "f32", "bx"), bi = b.let(f32(NONE), "f32", "bi");
    for (const q of parts) {
      b.if(q.hi.lt(f32(NONE)).and(q.hv.gt(bx).or(q.hv.eq(bx).and(q.hi.lt(bi)))), () => {
        b.set(bx, q.hv);
        b.set(bi, q.hi);
      });
    }
    const M = b.let(teamReduce(b, t, "max", bi.lt(f32(NONE)).select(bx, NEG)), "f32", "M");
    const I = b.let(teamReduce(b, t, "min", bi.lt(f32(NONE)).and(bx.eq(M)).select(bi, f32(NONE))), "f32", "I");
    const got = b.let(I.lt(f32(NONE)), "bool", "got");
    put(k.mul(u32(2)).add(u32(1)), got.select(I, f32(-1)));
    put(k.mul(u32(2)).add(u32(2)), got.select(lp(M), f32(0)));
    // the part whose head won advances (indices are unique: one part holds I) and fetches its next entry
    for (const q of parts) {
      b.if(got.and(q.hi.eq(I)), () => {
        b.set(q.head, q.head.add(u32(1)));
        b.set(q.hv, q.nv);
        b.set(q.hi, q.head.lt(u32(N)).select(q.ni, f32(NONE)));
        const e = entry(q.rec, q.head.add(u32(1)).min(u32(N - 1)));
        b.set(q.nv, b.load(PART, e));
        b.set(q.ni, b.load(PART, e.add(1)));
      });
    }
  });
  return b.build();
}
