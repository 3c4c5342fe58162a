// A decode gemv team's dots (gemv.ts): the rows of a team's units against x over all of k, summed across the
// team. Float weights: lanes stride over k with 16-byte loads, in groups whose loads are all issued before any
// is used. Block weights: each lane takes chunks of the rows' blocks, loads x (times g) for a chunk once and
// shares it with every row, keeping a window of chunk loads in flight across rows and chunks; on the int path x
// is quantized per chunk (or arrives so, prepared) and dotted in integers.
import { f32, u32, type Val } from "../ir.ts";
import type { Buffer } from "../ir.ts";
import { pairwise, teamReduce } from "./common.ts";
import { chunkDot, chunkDotInt, type LoadedChunk, loadChunk, QLAYOUT, quantizeRun, qWords, type XRun } from "./dequant.ts";
import { chunkX, loadRun } from "./xq_prep.ts";
import type { GemvBuild } from "./gemv.ts";
import { xqAhead } from "./gemv_tune.ts";

/** A weight row a team dots with x. */
export interface DotRow {
  buf: Buffer;
  row: Val;
}

/**
 * Dots of rows `rows` over all of k; `between` runs once the first group's weight loads are issued (work that
 * overlaps them; under one trip of the team, before them unless it `waits` on a load of its own); returns the
 * team-wide sums (and Σx² with a norm).
 */
export function dots(cx: GemvBuild, rows: DotRow[], between?: () => void, waits = false): { sums: Val[]; ss?: Val } {
  if (cx.qt) return dotsBlock(cx, rows, between);
  const { b, k, x, g, t, vec, xv, gv, chains, lane } = cx;
  const acc = rows.map(() => Array.from({ length: chains }, () => b.let(f32(0), "f32", "acc")));
  const ssAcc = g ? Array.from({ length: chains }, () => b.let(f32(0), "f32", "ss")) : [];
  const bases = rows.map((r) => b.let(r.row.mul(k), "u32", "wrow"));
  const loadW = (d: number, i: Val): Val[] => (vec > 1 ? b.loadv(rows[d].buf, bases[d].add(i), vec) : [b.load(rows[d].buf, bases[d].add(i))]);
  const loadX = (i: Val): { xs: Val[]; gs: Val[] } => {
    const xs: Val[] = [], gs: Val[] = [];
    for (let o = 0; o < vec; o += xv) xs.push(...(xv > 1 ? b.loadv(x, i.add(o), xv) : [b.load(x, i.add(o))]));
    if (g) for (let o = 0; o < vec; o += gv) gs.push(...(gv > 1 ? b.loadv(g, i.add(o), gv) : [b.load(g, i.add(o))]));
    return { xs, gs };
  };
  // has: whether the lane's chunk is real (a clamped one's sums leave the accumulators as they were)
  const consume = (i: Val, ws: Val[][], has?: Val, loaded = loadX(i)): void => {
    const keep = (a: Val, v: Val) => b.set(a, has ? has.select(v, a) : v);
    let { xs } = loaded;
    const { gs } = loaded;
    if (g) {
      const sq = ssAcc.map((a) => a);
      xs.forEach((v, e) => (sq[e % chains] = sq[e % chains].add(v.mul(v))));
      sq.forEach((v, c) => keep(ssAcc[c], v));
      xs = xs.map((v, e) => b.let(v.mul(gs[e]), "f32", "xg"));
    }
    ws.forEach((wd, d) => {
      const next = acc[d].map((a) => a);
      wd.forEach((wv, e) => (next[e % chains] = next[e % chains].add(wv.mul(xs[e]))));
      next.forEach((v, c) => keep(acc[d][c], v));
    });
  };
  // Every lane has at least `common` trips of `step`; they run in groups of `u` whose weight loads are all
  // issued before any is used (u x rows 16-byte loads in flight per lane), then a tail loop takes the rest.
  const step = t.lanes * vec, common = Math.floor(k / step);
  const u = Math.max(1, Math.min(cx.tune.unroll, common));
  const groups = Math.floor(common / u);
  const start = b.let(lane.mul(vec), "u32", "k0");
  const group = (at: Val, issued?: Val[][][]) => {
    const idx = Array.from({ length: u }, (_, j) => (j === 0 ? at : at.add(j * step)));
    const ws = issued ?? idx.map((i) => rows.map((_, d) => loadW(d, i)));
    idx.forEach((i, j) => consume(i, ws[j]));
  };
  if (groups > 0) { // group 0 peeled: its loads first
    const idx0 = Array.from({ length: u }, (_, j) => (j === 0 ? start : start.add(j * step)));
    const ws0 = idx0.map((i) => rows.map((_, d) => loadW(d, i)));
    between?.();
    group(start, ws0);
    if (groups > 1) {
      b.for(u32(1), u32(groups), 1, (grp) => group(b.let(start.add(grp.mul(u * step)), "u32", "kg")), { unroll: groups <= 4 ? groups - 1 : 1 });
    }
  } else if (between && waits && k < step) {
    // Under one trip of the team (k < lanes x vec): a lane's one chunk (and its x), clamped into the row for the
    // lanes past it, is loaded before `between` (a rope part's angle waits on the position's load: first, it held the
    // weight loads back by that round trip) and added only where the lane has one. The same adds (bit-identical).
    const has = b.let(start.lt(k), "bool", "has"), at = b.let(start.min(k - vec), "u32", "kc");
    const ws = rows.map((_, d) => loadW(d, at)), xg = loadX(at);
    between();
    consume(at, ws, has, xg);
    return reduced();
  } else between?.();
  if (groups * u * step < k) b.for(start.add(groups * u * step), u32(k), step, (i) => consume(i, rows.map((_, d) => loadW(d, i))));
  return reduced();
  function reduced(): { sums: Val[]; ss?: Val } {
    const red = reduceAll(cx, [...acc.map((a) => pairwise(a)), ...(g ? [pairwise(ssAcc)] : [])]);
    return { sums: red.slice(0, acc.length), ss: g ? red[acc.length] : undefined };
  }
}

/**
 * `dots` over block weights: each lane takes the chunks lane, lane + lanes, ... of the rows' blocks; per
 * chunk, x (times g, its Σx² and, for blocks with a min, its Σx per group) is loaded once and shared by
 * every row, whose chunk is then loaded, decoded and dotted.
 */
function dotsBlock(cx: GemvBuild, rows: DotRow[], between?: () => void): { sums: Val[]; ss?: Val } {
  const { b, k, x, g, xl, t, gv, lane, xq, prep } = cx, qt = cx.qt!;
  const q = QLAYOUT[qt], nb = k / q.elems, total = nb * q.chunks, cs = Math.log2(q.chunks);
  const acc = rows.map(() => b.let(f32(0), "f32", "acc"));
  const ssAcc = g ? b.let(f32(0), "f32", "ss") : undefined;
  const bases = rows.map((r) => b.let(r.row.mul(nb), "u32", "rblk"));
  between?.();
  // About 32 registers of raw block words in flight per lane (64 on the int path, whose x takes fewer).
  const trips = Math.ceil(total / t.lanes), unrolled = total % t.lanes === 0 && trips <= 4;
  const ahead = Math.max(1, cx.tune.ahead ?? Math.min(rows.length * 2, xq ? xqAhead(qt, rows.length, trips, unrolled) : Math.floor(32 / q.raw)));
  /**
   * The chunks `gis` of every row, in order (slot by slot, row by row), with one window of `ahead` chunk loads
   * in flight across slot boundaries (a slot's x is loaded and quantized when its first row is next).
   */
  const slots = (gis: Val[]) => {
    const geo = gis.map(() => undefined as { blk: Val; c: Val } | undefined);
    const at = (j: number) => (geo[j] ??= { blk: b.let(gis[j].shr(cs), "u32", "blk"), c: b.let(gis[j].and(q.chunks - 1), "u32", "c") });
    const load = (j: number, d: number) => {
      const { blk, c } = at(j);
      return loadChunk(b, rows[d].buf, qt, b.let(bases[d].add(blk).mul(qWords(qt)), "u32", "base"), c, true, nb % 2 === 0, xq);
    };
    const inflight: LoadedChunk[] = [];
    let next = 0;
    const jobs = gis.length * rows.length;
    const issue = () => {
      while (next < jobs && inflight.length < ahead) inflight.push(load(Math.floor(next / rows.length), next++ % rows.length));
    };
    gis.forEach((gi, j) => {
      issue();
      let run: XRun | undefined, xs: Val[][] = [];
      if (prep) run = loadRun(b, qt, x, xl!, gi); // the run as the prep quantized it (run gi is chunk gi)
      else {
        const xat = b.let(at(j).blk.mul(q.elems).add(inflight[0].at), "u32", "xat");
        xs = chunkX(b, qt, x, xat, g && { buf: g, gv, ss: ssAcc! }, xq);
        if (xq) run = quantizeRun(b, xs);
      }
      const sx = !xq && QLAYOUT[qt].biased && rows.length > 1 ? xs.map((v) => b.let(pairwise(v), "f32", "sx")) : undefined;
      // Row d is decoded once the loads `ahead` chunks later are issued.
      rows.forEach((_, d) => {
        const lc = inflight.shift()!;
        issue();
        b.set(acc[d], acc[d].add(run ? chunkDotInt(b, lc.ints!(), run) : chunkDot(lc.decode(), xs, sx)));
      });
    });
  };
  if (unrolled) {
    const gis = Array.from({ length: trips }, (_, j) => (j ? b.let(lane.add(j * t.lanes), "u32", "gi") : lane));
    // The f32 path keeps its measured per-slot window; the int path's window runs on across slots.
    if (xq) slots(gis);
    else gis.forEach((gi) => slots([gi]));
  } else b.for(lane, u32(total), t.lanes, (gi) => slots([gi]), { unroll: Math.max(1, Math.min(cx.tune.unroll, trips)) });
  const red = reduceAll(cx, ssAcc ? [...acc, ssAcc] : acc);
  return { sums: red.slice(0, acc.length), ss: ssAcc ? red[acc.length] : undefined };
}

/**
 * Team sums of several values: one shared-memory round for all of them on a team of several subgroups (a
 * barrier per value would serialize the units' reductions; the rows and Σx² of a float gemv's team likewise).
 * The same order of adds as teamReduce's, so the same bits.
 */
function reduceAll(cx: GemvBuild, vals: Val[]): Val[] {
  const { b, t } = cx;
  if (t.sgs <= 1 || vals.length === 1) return vals.map((v) => teamReduce(b, t, "add", v));
  // One scratch for every part, sized for the most values a team reduces (2 rows per unit, and Σx²).
  const sh = cx.qsum ??= b.shared("qsum", "f32", (2 * cx.R + 1) * t.sgs);
  const rs = vals.map((v) => b.let(b.subgroupReduce("add", v), "f32", "red"));
  const sgid = b.builtin("sgid");
  b.if(b.builtin("lane").eq(u32(0)), () => rs.forEach((r, i) => b.sstore(sh, i ? sgid.add(i * t.sgs) : sgid, r)));
  b.barrier();
  // Expressions, not values: only the first subgroup reads them (gemv_units.ts `tail`).
  return vals.map((_, i) => {
    let a = b.sload(sh, i * t.sgs);
    for (let j = 1; j < t.sgs; j++) a = a.add(b.sload(sh, i * t.sgs + j));
    return a;
  });
}
