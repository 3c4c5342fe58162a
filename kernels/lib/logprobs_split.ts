// The `logprobs` composite (graph/logits.ts states its meaning) split over many teams per row, for a long
// vocabulary at small batch, where kernels/lib/logits.ts `logprobs` (one workgroup per row, one pass over
// the row per top entry) leaves the GPU idle and pays one SM's latency for every pass. Two kernels:
//
//  1. logprobsPart, one team (a subgroup where there are subgroups) per (row, part): over its slice of the
//     row, the max and Σ exp(x − max) (against a running max per lane), then the slice's top entries in
//     order (value descending, index ascending; NaN never ranks), as many as the row asks for: rounds of
//     "largest after the previous" over the slice, which stays in L1. Rows that want no logprobs read nothing.
//  2. logprobsCombine, one team per row: m and log Σ from the parts' (max, sum), then the row's top entries
//     by merging the parts' sorted lists: each lane keeps a head into a few parts' lists, each round takes
//     the best head over the team and advances it.
// A team is a whole workgroup (one (row, part) or one row each), so a row that wants no logprobs returns at
// once and rounds past the row's top_logprobs are not run: those exits are uniform over the workgroup.
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, team, teamReduce, teamRow, vecWidth } from "./common.ts";
import { SAMPLER, SAMPLER_WORDS } from "../../graph/sample.ts";
import { sampleSplit } from "./sample_split.ts";
import { maxSumStep } from "./logits.ts";

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
  const overSlice = (on: Val, f: (i: Val, x: Val) => void) =>
    b.for(s0.add(lane.mul(vw)), b.let(on.and(live).select(s1, s0), "u32", "en"), t.lanes * vw, (i) => {
      const xs = vw > 1 ? b.loadv(X, base.add(i), vw) : [b.load(X, base.add(i))];
      xs.forEach((x, e) => f(e ? i.add(e) : i, x));
    });
  const rec = b.let(it.mul(u32(partWords(N))), "u32", "rec");
  const put = (k: number, v: Val) => b.if(lane.eq(u32(0)).and(live), () => b.store(OUT, k ? rec.add(k) : rec, v));
  // A row that wants none is not read (the combine reads no record of it); the team is the whole workgroup,
  // so the exit is uniform there.
  b.if(want.not().or(live.not()), () => b.return());

  const NEG = f32(-Infinity);
  const mx = b.let(NEG, "f32", "mx"), mi = b.let(f32(NONE), "f32", "mi"), sm = b.let(f32(0), "f32", "sm");
  overSlice(want, (i, x) => maxSumStep(b, { mx, mi, sm }, i, x));
  const m = b.let(teamReduce(b, t, "max", mx), "f32", "m");
  const sum = b.let(teamReduce(b, t, "add", mx.gt(NEG).select(sm.mul(mx.sub(m).exp()), f32(0))), "f32", "sum");
  const first = b.let(teamReduce(b, t, "min", mx.eq(m).select(mi, f32(NONE))), "f32", "first");
  put(0, m);
  put(1, sum);
  const px = b.let(m, "f32", "px"), pi = b.let(first, "f32", "pi");
  if (N > 0) {
    put(2, m);
    put(3, first);
  }
  for (let k = 1; k < N; k++) {
    b.if(nTop.le(u32(k)), () => b.return()); // entries past the row's top_logprobs are never read
    const bx = b.let(NEG, "f32", "bx"), bi = b.let(f32(NONE), "f32", "bi");
    overSlice(pi.lt(f32(NONE)), (i, x) => {
      const fi = b.let(i.cast("f32"), "f32", "fi");
      const after = x.lt(px).or(x.eq(px).and(fi.gt(pi)));
      b.if(after.and(x.eq(x)).and(x.gt(bx).or(bi.eq(f32(NONE)))), () => {
        b.set(bx, x);
        b.set(bi, fi);
      });
    });
    const M = b.let(teamReduce(b, t, "max", bi.lt(f32(NONE)).select(bx, NEG)), "f32", "M");
    const I = b.let(teamReduce(b, t, "min", bx.eq(M).select(bi, f32(NONE))), "f32", "I");
    put(2 + 2 * k, M);
    put(3 + 2 * k, I);
    b.set(px, M);
    b.set(pi, I);
  }
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
  if (J > 16) throw new KernelError(`logprobs_combine: ${P} parts over ${t.lanes} lanes (at most 16 per lane)`);
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

  // Every pair's default ((−1, 0) for a row that wants logprobs, else (0, 0)); a row that wants none stops
  // here, and the rounds stop past the row's top_logprobs (one row per workgroup: the exits are uniform).
  b.if(want.not(), () => put(0, f32(0)));
  for (let k = 0; k < N; k++) {
    put(1 + 2 * k, want.select(f32(-1), f32(0)));
    put(2 + 2 * k, f32(0));
  }
  b.if(want.not().or(live.not()), () => b.return());
  // the lanes' parts: p = lane + j · lanes (absent past P)
  const NEG = f32(-Infinity);
  const parts = Array.from({ length: J }, (_, j) => {
    const p = b.let(lane.add(u32(j * t.lanes)), "u32", "p");
    const has = b.let(p.lt(u32(P)).and(want), "bool", "has");
    const rec = b.let(recOf(has.select(p, u32(0))), "u32", "rec");
    return { has, rec, head: b.let(u32(0), "u32", "head") };
  });
  const mx = b.let(NEG, "f32", "mx");
  for (const q of parts) b.if(q.has, () => b.set(mx, mx.max(b.load(PART, q.rec))));
  const m = b.let(teamReduce(b, t, "max", mx), "f32", "m");
  const acc = b.let(f32(0), "f32", "acc");
  for (const q of parts) {
    b.if(q.has, () => {
      const pm = b.let(b.load(PART, q.rec), "f32", "pm");
      b.if(pm.gt(NEG), () => b.set(acc, acc.add(b.load(PART, q.rec.add(1)).mul(pm.sub(m).exp()))));
    });
  }
  const ls = b.let(teamReduce(b, t, "add", acc).log(), "f32", "ls");
  const lp = (x: Val): Val => x.sub(m).sub(ls);
  const tok = b.let(b.load(S, row.mul(2)).bitcast("u32").min(u32(V - 1)), "u32", "tok");
  put(0, want.select(lp(b.load(X, row.mul(u32(V)).add(tok))), f32(0)));

  for (let k = 0; k < N; k++) {
    b.if(nTop.le(u32(k)), () => b.return());
    const on = b.let(nTop.gt(u32(k)), "bool", "on");
    // this lane's best head: value descending, index ascending; a part's list ends at its first NONE index
    const bx = b.let(NEG, "f32", "bx"), bi = b.let(f32(NONE), "f32", "bi");
    for (const q of parts) {
      b.if(on.and(q.has).and(q.head.lt(u32(N))), () => {
        const at = b.let(q.rec.add(u32(2)).add(q.head.mul(u32(2))), "u32", "at");
        const v = b.let(b.load(PART, at), "f32", "v"), i = b.let(b.load(PART, at.add(1)), "f32", "i");
        b.if(i.lt(f32(NONE)).and(v.gt(bx).or(v.eq(bx).and(i.lt(bi)))), () => {
          b.set(bx, v);
          b.set(bi, i);
        });
      });
    }
    const M = b.let(teamReduce(b, t, "max", bi.lt(f32(NONE)).select(bx, NEG)), "f32", "M");
    const I = b.let(teamReduce(b, t, "min", bx.eq(M).select(bi, f32(NONE))), "f32", "I");
    const got = b.let(on.and(I.lt(f32(NONE))), "bool", "got");
    put(1 + 2 * k, want.select(got.select(I, f32(-1)), f32(0)));
    put(2 + 2 * k, want.and(got).select(lp(M), f32(0)));
    // the part whose head won advances (indices are unique: one part holds I)
    for (const q of parts) {
      b.if(got.and(q.has).and(q.head.lt(u32(N))), () => {
        const at = b.let(q.rec.add(u32(3)).add(q.head.mul(u32(2))), "u32", "at");
        b.if(b.load(PART, at).eq(I), () => b.set(q.head, q.head.add(u32(1))));
      });
    }
  }
  return b.build();
}
