// The `sample` composite split over many workgroups per row (a long vocabulary at small batch: one workgroup
// per row leaves most of a big GPU idle and pays one SM's latency for every pass). Three kernels here, and a
// fourth between the masses and the pick (kernels/lib/sample_list.ts: the parts build a filtered row's list):
//
//  1. sampleStats, (row, part) workgroups: each reduces one slice of the row to (max with NaN as -Inf, first
//     index of that max, non-finite flag, smallest finite logit), the first pass of kernels/lib/sample.ts.
//  2. sampleMass, (row, part) workgroups: each combines the row's stats (every part's, in part order) into
//     the row max m and, for a row that samples with no filter (no top-k, top-p, min-p: what a plain
//     temperature draw and OpenAI's defaults ask), sums w = exp((x − m) · inv_temp) over its slice and notes
//     its last index with w > 0. For a filtered row, counts and Σ w at 15 pivots over [min, max]. Other rows
//     read nothing.
//  3. sample with `parts` (kernels/lib/sample.ts): reads the stats instead of the row for the greedy token
//     and the flag; an unfiltered row takes its total and the slice holding u · total from the masses and
//     walks only that slice (plainFromMasses, below); a filtered row copies in the list the parts made, or
//     where they made none finds its cut from the pivots' sums (kernels/lib/sample_cut.ts).
// The split depends on the vocabulary alone, never on the rows: a row's sums (so its draw at a knife edge)
// do not depend on the batch it sits in.
import { type Buffer, f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, team, teamReduce, teamRow, vecWidth } from "./common.ts";
import { SAMPLER, SAMPLER_WORDS } from "../../graph/sample.ts";
import { type Lanes, NONE } from "./sample_lanes.ts";

/** f32 words per (row, part) of the stats buffer: max, first index of the max, non-finite flag, min. */
export const STATS_WORDS = 4;
/** Pivots per row at which the parts count a filtered row's logits (sample.ts starts its cutoff search there). */
export const PIVOTS = 15;
/**
 * f32 words per (row, part) of the mass buffer: Σ w of the slice and its last index with w > 0 (or −1), for
 * an unfiltered row; for a filtered one Σ w that min-p keeps, the count of logits >= each pivot, their Σ w,
 * then the pivots (the same in every part).
 */
export const MASS_WORDS = 3 + 3 * PIVOTS;
/** Word offsets within a mass record. */
export const MASS = { sum: 0, last: 1, z: 2, count: 3, above: 3 + PIVOTS, pivot: 3 + 2 * PIVOTS } as const;

/** How a row of `vocab` logits is cut into `parts` slices: slice length (a multiple of 4) and slice count. */
export function sampleSplit(vocab: number, parts: number): { parts: number; slice: number } {
  if (!(Number.isInteger(parts) && parts >= 1)) throw new KernelError(`sample: bad part count ${parts}`);
  const slice = Math.ceil(Math.ceil(vocab / parts) / 4) * 4;
  return { parts: Math.ceil(vocab / slice), slice };
}

/**
 * Parts per row for a vocabulary on a target: 1 (the one-workgroup kernel) below 16k logits or on targets
 * without wide subgroups; else slices of about 2k logits, at most 64 (the pick kernel's lanes read every
 * part's record).
 */
export function sampleParts(caps: Caps, vocab: number): number {
  if (!caps.subgroups || caps.subgroupSize < 8 || vocab < 16384) return 1;
  return sampleSplit(vocab, Math.min(64, Math.ceil(vocab / 2048))).parts;
}

interface SplitShape {
  rows: number;
  vocab: number;
  parts: number;
}

/** A split kernel's sizes: rows, vocabulary, parts, slice, team, grid (a workgroup per (row, part)), vector width. */
export function splitSetup(caps: Caps, s: SplitShape, what: string) {
  const { rows: R, vocab: V } = s;
  if (!(Number.isInteger(R) && R >= 1 && Number.isInteger(V) && V >= 1)) throw new KernelError(`${what}: bad shape ${R}x${V}`);
  if (V >= NONE || R * V >= 2 ** 32) throw new KernelError(`${what}: ${R}x${V} logits exceed the kernel's index range`);
  const { parts: P, slice: SL } = sampleSplit(V, s.parts);
  const t = team(caps, { wide: 256, rows: 1, maxLanes: 256 });
  const grid = gridFor(caps, R * P);
  return { R, V, P, SL, t, grid, vw: Math.min(4, vecWidth(4, V)) };
}

/** The loop over this workgroup's slice, vw logits per load (slices start at multiples of 4). */
function overSlice(b: KernelBuilder, X: ReturnType<KernelBuilder["buffer"]>, lanes: number, lane: Val, base: Val, s0: Val, s1: Val, vw: number, f: (i: Val, x: Val) => void): void {
  b.for(s0.add(lane.mul(vw)), s1, lanes * vw, (i) => {
    const xs = vw > 1 ? b.loadv(X, base.add(i), vw) : [b.load(X, base.add(i))];
    xs.forEach((x, e) => f(e ? i.add(e) : i, x));
  });
}

/** Stats of each (row, part). Bindings: logits f32 [rows, vocab] (r), stats f32 [rows, parts, 4] (w). */
export function sampleStats(caps: Caps, s: SplitShape): Kernel {
  const { R, V, P, SL, t, grid, vw } = splitSetup(caps, s, "sample_stats");
  const b = new KernelBuilder(`sample_stats_r${R}_v${V}_p${P}`, { workgroup: t.size, grid });
  const X = b.buffer("logits", "f32", "r");
  const ST = b.buffer("stats", "f32", "w");
  const { lane, row: wg } = teamRow(b, t, grid);
  if (grid[0] * grid[1] * grid[2] > R * P) b.if(wg.ge(R * P), () => b.return());
  const row = b.let(wg.div(u32(P)), "u32", "row");
  const s0 = b.let(wg.mod(u32(P)).mul(u32(SL)), "u32", "s0");
  const s1 = b.let(s0.add(u32(SL)).min(u32(V)), "u32", "s1");
  const base = b.let(row.mul(u32(V)), "u32", "base");
  const bv = b.let(f32(-Infinity), "f32", "bv"), bi = b.let(u32(NONE), "u32", "bi");
  const nf = b.let(f32(0), "f32", "nf"), lo = b.let(f32(Infinity), "f32", "mn");
  overSlice(b, X, t.lanes, lane, base, s0, s1, vw, (i, x) => statsStep(b, { bv, bi, nf, lo }, i, x));
  const m = b.let(teamReduce(b, t, "max", bv), "f32", "m");
  const first = b.let(teamReduce(b, t, "min", bv.eq(m).select(bi.cast("f32"), f32(NONE))), "f32", "first");
  const nfAll = b.let(teamReduce(b, t, "max", nf), "f32", "nfa");
  const loAll = b.let(teamReduce(b, t, "min", lo), "f32", "loa");
  b.if(lane.eq(u32(0)), () => {
    const o = b.let(wg.mul(u32(STATS_WORDS)), "u32", "o");
    [m, first, nfAll, loAll].forEach((v, k) => b.store(ST, k ? o.add(k) : o, v));
  });
  return b.build();
}

/** Cross-lane maxima of f32 values (reduced together where the target can); every lane must call it. */
export type ReduceMax = (vals: Val[]) => Val[];

/**
 * The row's combined stats from the parts' records: lane l combines parts l, l + lanes, ... (one each on a
 * GPU: the loads run in parallel rather than one after another), then the lanes reduce. Max and min are exact
 * in any order, and the first index of the max is the smallest index among parts holding it: every lane gets
 * the same bits as a sequential pass.
 */
export function rowStats(b: KernelBuilder, ST: ReturnType<KernelBuilder["buffer"]>, row: Val, P: number, lane: Val, lanes: number, reduce: ReduceMax): { m: Val; first: Val; nf: Val; lo: Val } {
  const m = b.let(f32(-Infinity), "f32", "rm"), first = b.let(f32(NONE), "f32", "rfirst");
  const nf = b.let(f32(0), "f32", "rnf"), lo = b.let(f32(Infinity), "f32", "rlo");
  const o = b.let(row.mul(u32(P * STATS_WORDS)), "u32", "ro");
  b.for(lane, u32(P), lanes, (p) => {
    const at = b.let(o.add(p.mul(u32(STATS_WORDS))), "u32", "at");
    const pm = b.let(b.load(ST, at), "f32", "pm");
    // a lane's parts in index order: a later part's max wins only when larger
    b.if(pm.gt(m).or(first.eq(f32(NONE))), () => {
      b.set(m, pm);
      b.set(first, b.load(ST, at.add(1)));
    });
    b.set(nf, nf.max(b.load(ST, at.add(2))));
    b.set(lo, lo.min(b.load(ST, at.add(3))));
  });
  const [M, N, negLo] = reduce([m, nf, lo.neg()]);
  const [negFirst] = reduce([m.eq(M).select(first, f32(NONE)).neg()]);
  return { m: M, first: b.let(negFirst.neg(), "f32", "rF"), nf: N, lo: b.let(negLo.neg(), "f32", "rL") };
}

/** Whether a row samples with no filter: the rows whose draw the masses serve (sample.ts takes the same test). */
export function plainDraw(V: number, nf: Val, invT: Val, topK: Val, topP: Val, minP: Val): Val {
  const sampling = nf.gt(f32(0)).not().and(invT.gt(f32(0))).and(invT.lt(f32(Infinity)));
  const kOn = topK.gt(0).and(topK.lt(V)), pOn = topP.lt(f32(1)), mOn = minP.gt(f32(0));
  return sampling.and(kOn.or(pOn).or(mOn).not());
}

/**
 * Masses of each (row, part). Bindings: logits f32 [rows, vocab] (r), params u32 [rows, SAMPLER_WORDS] (r),
 * stats f32 [rows, parts, 4] (r), mass f32 [rows, parts, 2] (w).
 */
export function sampleMass(caps: Caps, s: SplitShape): Kernel {
  const { R, V, P, SL, t, grid, vw } = splitSetup(caps, s, "sample_mass");
  const b = new KernelBuilder(`sample_mass_r${R}_v${V}_p${P}`, { workgroup: t.size, grid });
  const X = b.buffer("logits", "f32", "r");
  const PRM = b.buffer("params", "u32", "r");
  const ST = b.buffer("stats", "f32", "r");
  const MS = b.buffer("mass", "f32", "w");
  const { lane, row: wg } = teamRow(b, t, grid);
  if (grid[0] * grid[1] * grid[2] > R * P) b.if(wg.ge(R * P), () => b.return());
  const row = b.let(wg.div(u32(P)), "u32", "row");
  const pw = (k: number) => row.mul(SAMPLER_WORDS).add(k);
  const invT = b.let(b.load(PRM, pw(SAMPLER.invTemp), "f32"), "f32", "invT");
  const { m, nf, lo } = rowStats(b, ST, row, P, lane, t.lanes, (vs) => vs.map((v) => teamReduce(b, t, "max", v)));
  const minP = b.let(b.load(PRM, pw(SAMPLER.minP), "f32"), "f32", "minP");
  const plain = b.let(plainDraw(V, nf, invT, b.load(PRM, pw(SAMPLER.topK), "i32"), b.load(PRM, pw(SAMPLER.topP), "f32"), minP), "bool", "plain");
  const sampling = b.let(nf.gt(f32(0)).not().and(invT.gt(f32(0))).and(invT.lt(f32(Infinity))), "bool", "smp");
  const filtered = b.let(sampling.and(plain.not()), "bool", "filt");
  const s0 = b.let(wg.mod(u32(P)).mul(u32(SL)), "u32", "s0");
  const s1 = b.let(plain.select(s0.add(u32(SL)).min(u32(V)), s0), "u32", "s1");
  const base = b.let(row.mul(u32(V)), "u32", "base");
  const acc = b.let(f32(0), "f32", "acc"), last = b.let(f32(-1), "f32", "last");
  overSlice(b, X, t.lanes, lane, base, s0, s1, vw, (i, x) => {
    const w = b.let(x.sub(m).mul(invT).exp(), "f32", "w");
    b.set(acc, acc.add(w));
    b.if(w.gt(f32(0)), () => b.set(last, last.max(i.cast("f32"))));
  });
  // A filtered row: counts and Σ w (min-p not applied, as the cutoff search sums them) at pivots spread evenly
  // between the row's smallest logit and its max, and Σ w that min-p keeps (top-p's Z without top-k).
  const piv = Array.from({ length: PIVOTS }, (_, j) => b.let(lo.add(m.sub(lo).mul(f32((j + 1) / (PIVOTS + 1)))), "f32", "piv"));
  const za = b.let(f32(0), "f32", "za");
  const cnt = piv.map(() => b.let(f32(0), "f32", "pc")), above = piv.map(() => b.let(f32(0), "f32", "pa"));
  const mOn = minP.gt(f32(0));
  overSlice(b, X, t.lanes, lane, base, s0, b.let(filtered.select(s0.add(u32(SL)).min(u32(V)), s0), "u32", "f1"), vw, (_, x) => {
    const w = b.let(x.sub(m).mul(invT).exp(), "f32", "w");
    b.set(za, za.add(mOn.not().or(w.ge(minP)).select(w, f32(0))));
    piv.forEach((pv, j) => b.if(x.ge(pv), () => {
      b.set(cnt[j], cnt[j].add(f32(1)));
      b.set(above[j], above[j].add(w));
    }));
  });
  const o = b.let(wg.mul(u32(MASS_WORDS)), "u32", "o");
  const sum = b.let(teamReduce(b, t, "add", acc), "f32", "sum");
  const lastAll = b.let(teamReduce(b, t, "max", last), "f32", "lasta");
  b.if(lane.eq(u32(0)), () => {
    b.store(MS, o.add(MASS.sum), sum);
    b.store(MS, o.add(MASS.last), lastAll);
    piv.forEach((pv, j) => b.store(MS, o.add(MASS.pivot + j), pv));
  });
  sumAndStore(b, t, lane, [za, ...cnt, ...above], MS, o.add(MASS.z));
  return b.build();
}

/**
 * Sums each value over the team and stores value k at word `at` + k (lane 0, or lane k). Where a team is
 * several subgroups, one barrier for all the values (each subgroup's sums meet in shared memory, lane k adds
 * value k's), not a team reduction (two barriers) per value.
 */
function sumAndStore(b: KernelBuilder, t: ReturnType<typeof team>, lane: Val, vals: Val[], buf: ReturnType<KernelBuilder["buffer"]>, at: Val): void {
  if (t.sgs > 1 && !t.shared && vals.length <= t.size) {
    const NS = t.sgs, sh = b.shared("msum", "f32", vals.length * NS);
    const sl = b.builtin("lane"), sg = b.builtin("sgid");
    const part = vals.map((v) => b.let(b.subgroupReduce("add", v), "f32", "ps"));
    b.if(sl.eq(u32(0)), () => part.forEach((p, k) => b.sstore(sh, sg.add(k * NS), p)));
    b.barrier();
    b.if(lane.lt(u32(vals.length)), () => {
      const acc = b.let(f32(0), "f32", "ms");
      for (let g = 0; g < NS; g++) b.set(acc, acc.add(b.sload(sh, lane.mul(u32(NS)).add(g))));
      b.store(buf, at.add(lane), acc);
    });
    return;
  }
  const sums = vals.map((v) => b.let(teamReduce(b, t, "add", v), "f32", "ms"));
  b.if(lane.eq(u32(0)), () => sums.forEach((v, k) => b.store(buf, k ? at.add(k) : at, v)));
}

/**
 * One logit into a lane's running row statistics (sample.ts's first pass and sampleStats): the non-finite flag
 * `nf`, the smallest finite logit `lo`, the largest logit `bv` (NaN read as −∞) and its first index `bi`.
 */
export function statsStep(b: KernelBuilder, s: { bv: Val; bi: Val; nf: Val; lo: Val }, i: Val, x: Val): void {
  const fin = b.let(x.isfinite(), "bool", "fin");
  b.if(fin.not(), () => b.set(s.nf, f32(1)));
  b.if(fin, () => b.set(s.lo, s.lo.min(x)));
  const v = b.let(x.ne(x).select(f32(-Infinity), x), "f32", "xv");
  b.if(v.gt(s.bv).or(s.bi.eq(u32(NONE))), () => {
    b.set(s.bv, v);
    b.set(s.bi, i);
  });
}

/** What the pick kernel's draw from the masses reads (kernels/lib/sample.ts). */
export interface PlainEnv {
  b: KernelBuilder;
  /** The pick kernel's lanes (W of them). */
  lanes: Lanes;
  W: number;
  row: Val;
  X: Buffer;
  MS: Buffer;
  base: Val;
  V: number;
  parts: number;
  slice: number;
  m: Val;
  invT: Val;
  /** The draw's uniform number, and whether this row is plain (plainDraw): other rows walk nothing. */
  u: Val;
  plain: Val;
  /** The token when the walk found no crossing (sample.ts). */
  fallback: (first: Val, near: Val, total: Val) => Val;
}

/**
 * The pick kernel's draw for an unfiltered row, from the masses: the total and the part holding u · total come
 * from the mass records (every lane sums them in part order), then only that part's slice is walked, in index
 * order (contiguous sub-slices per lane, a scan for their starts). Returns the token (u32).
 */
export function plainFromMasses(e: PlainEnv): Val {
  const { b, lanes, W, row, X, MS, base, V, m, invT, u, plain, fallback } = e;
  const P = e.parts, SL = e.slice, lid = lanes.lid;
  // Each lane takes a contiguous block of parts (one part per lane on a GPU); a scan gives each block its
  // start, then the part holding u · total is the last one starting at or below it with mass > 0.
  const o = b.let(row.mul(u32(P * MASS_WORDS)), "u32", "mo");
  const pPer = Math.ceil(P / W);
  const b0 = b.let(lid.mul(u32(pPer)).min(u32(P)), "u32", "pb0");
  const b1 = b.let(b0.add(u32(pPer)).min(u32(P)), "u32", "pb1");
  const mine = b.let(f32(0), "f32", "pmine"), lastMine = b.let(f32(-1), "f32", "plm");
  b.for(b0, b1, 1, (p) => {
    b.set(mine, mine.add(b.load(MS!, o.add(p.mul(u32(MASS_WORDS))))));
    b.set(lastMine, lastMine.max(b.load(MS!, o.add(p.mul(u32(MASS_WORDS))).add(1))));
  });
  const blk = lanes.scan(mine);
  const total = blk.total;
  const target = b.let(u.mul(total), "f32", "ptgt");
  const claim = b.let(f32(-1), "f32", "pclaim"), myStart = b.let(f32(0), "f32", "pms"), run = b.let(blk.excl, "f32", "prun");
  b.for(b0, b1, 1, (p) => {
    const w = b.let(b.load(MS!, o.add(p.mul(u32(MASS_WORDS)))), "f32", "pw");
    b.if(run.le(target).and(w.gt(f32(0))), () => {
      b.set(claim, p.cast("f32"));
      b.set(myStart, run);
    });
    b.set(run, run.add(w));
  });
  const [qf, lastAll] = lanes.reduce("max", [claim, lastMine]);
  const [start0] = lanes.reduce("max", [claim.eq(qf).and(qf.ge(f32(0))).select(myStart, f32(-Infinity))]);
  const q = b.let(qf.max(f32(0)).cast("u32"), "u32", "pq");
  const start = b.let(start0.max(f32(0)), "f32", "pst");
  const s0 = b.let(q.mul(u32(SL)), "u32", "ps0");
  const len = b.let(plain.select(s0.add(u32(SL)).min(u32(V)).sub(s0), u32(0)), "u32", "plen");
  const per = b.let(len.add(W - 1).div(W), "u32", "pper");
  const t0 = b.let(s0.add(lid.mul(per).min(len)), "u32", "pt0");
  const t1 = b.let(s0.add(lid.mul(per).add(per).min(len)), "u32", "pt1");
  const wAt = (j: Val) => b.let(b.load(X, base.add(j)).sub(m).mul(invT).exp(), "f32", "pw");
  const my = b.let(f32(0), "f32", "pmy");
  b.for(t0, t1, 1, (j) => b.set(my, my.add(wAt(j))));
  const { excl } = lanes.scan(my);
  const cum = b.let(start.add(excl), "f32", "pcum");
  const pick = b.let(f32(NONE), "f32", "ppick"), last = b.let(f32(-1), "f32", "plst");
  b.for(t0, t1, 1, (j) => {
    const w = wAt(j);
    b.set(cum, cum.add(w));
    b.if(pick.eq(f32(NONE)).and(cum.gt(target)), () => b.set(pick, j.cast("f32")));
    b.if(w.gt(f32(0)), () => b.set(last, j.cast("f32")));
  });
  const [negPick, near] = lanes.reduce("max", [pick.neg(), last]);
  const tok = b.let(fallback(negPick.neg(), near.ge(f32(0)).select(near, lastAll), total).cast("u32"), "u32", "ptok");
  return tok;
}
