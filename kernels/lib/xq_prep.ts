// x quantized once per gemv (CompileOptions.xqPrep): a small kernel writes x (times the norm weight g when an
// rmsnorm is fused) as int8 runs into a buffer, with each run's scale and per group Σq, and, with a norm, its r;
// the int path of the decode gemv (kernels/lib/gemv.ts, xq "prep") then reads 1 byte of x per value instead of
// loading x (and g) as f32 and quantizing it in every team, as llama.cpp's quantize_row_q8_1 + mmvq do.
//
// The runs, scales and rounding are the in-kernel ones (dequant.ts quantizeRun over the chunk's groups, as
// graph/ops/qdot.ts defines), so a gemv's results are bit-identical either way. r = rsqrt(Σx²/k + eps) too: a team
// shaped as the consuming gemv's (its lanes, subgroups or shared-memory tree) takes the chunks lane, lane + lanes,
// ... in order and sums each chunk's squares as the gemv's do (chunkX), then reduces as its teams do (teamReduce):
// the same Σx², so the same r. Two shapes, the same bits: where subgroups hold a run's words, an invocation per
// int8x4 word over a grid (wordPrep; with a norm every workgroup is such a team and repeats the Σx²); else an
// invocation per run, over a grid without a norm and one team with it. A third takes x from split-K attention
// partials, combining them as attentionCombine does (combinePrep: an invocation per value; the o projection's prep
// in place of the combine kernel, CompileOptions.combinePrep).
//
// The buffer's layout: xq_layout.ts.
import { f32, fma, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Buffer } from "../ir.ts";
import type { Caps } from "../target.ts";
import { type FType, gridFor, pairwise, type Team, teamReduce, vecWidth, wgIndex } from "./common.ts";
import { chunkGroups, QLAYOUT, type QType, quantizeRun, runDx, runScale, wordSum, type XRun, XQ_TYPES } from "./dequant.ts";
import { combineAt } from "./attention_combine.ts";
import { prepWord, runAt, storeMeta, wordOffset, type XqLayout, xqLayout } from "./xq_layout.ts";

export { type XqLayout, xqLayout } from "./xq_layout.ts";

/**
 * The x of a chunk at element `xat` as chunkGroups(w)'s groups of f32 values (times g when `g`), 4-wide loads
 * (g's `gv` wide); with `ss`, its squares are added to that variable in the gemv's order: per group, four fma
 * chains (values i ≡ c mod 4) summed pairwise on the int path (`xq`), the squares summed pairwise on the f32 one.
 */
export function chunkX(b: KernelBuilder, w: QType, x: Buffer, xat: Val, g?: { buf: Buffer; gv: number; ss: Val }, xq = true): Val[][] {
  return chunkGroups(w).map((grp) => {
    const at = grp.off ? xat.add(grp.off) : xat, n = grp.n;
    const v: Val[] = [];
    for (let o = 0; o < n; o += 4) v.push(...b.loadv(x, o ? at.add(o) : at, 4));
    if (!g) return v;
    const { buf, gv, ss } = g;
    const gs: Val[] = [];
    for (let o = 0; o < n; o += gv) gs.push(...(gv > 1 ? b.loadv(buf, at.add(o), gv) : [b.load(buf, at.add(o))]));
    // Σx²: the int path's x work is per team, not per row: four fma chains (half the instructions)
    if (xq) b.set(ss, ss.add(pairwise([0, 1, 2, 3].map((c) => v.filter((_, i) => i % 4 === c).reduce((a: Val | undefined, e) => (a ? fma(e, e, a) : e.mul(e)), undefined)!))));
    else b.set(ss, ss.add(pairwise(v.map((e) => e.mul(e)))));
    return v.map((e, i) => b.let(e.mul(gs[i]), "f32", "xg"));
  });
}

/** Run `gi` of a prepared x (the buffer `q`, laid out as `l`) as quantizeRun made it. */
export function loadRun(b: KernelBuilder, w: QType, q: Buffer, l: XqLayout, gi: Val): XRun {
  const flat: Val[] = [];
  const base = b.let(gi.mul(l.words), "u32", "xw");
  for (let o = 0; o < l.words; o += 4) flat.push(...b.loadv(q, o ? base.add(o) : base, 4));
  const mAt = b.let(gi.mul(l.meta).add(l.metaAt), "u32", "xm");
  const meta = l.meta === 1 ? [b.load(q, mAt)] : b.loadv(q, mAt, l.meta);
  const groups = chunkGroups(w);
  const words: Val[][] = [];
  let at = 0;
  for (const g of groups) {
    words.push(flat.slice(at, at + g.n / 4));
    at += g.n / 4;
  }
  // q8_0 needs no sums (no offset, no min): its meta is dx alone
  const sums = l.meta === 1 ? [] : groups.map((_, i) => {
    const h = meta[1 + (i >> 1)];
    return b.let(i & 1 ? h.bitcast("i32").shr(16) : h.shl(16).bitcast("i32").shr(16), "i32", "qxs");
  });
  return { words, sums, dx: b.let(meta[0].bitcast("f32"), "f32", "dx") };
}

/** The prep's builder and bindings (x, g with a norm, q), and g's load width. */
function prepKernel(s: XqPrepShape, wg: number, grid: [number, number, number]) {
  const name = s.name ?? `xq_prep_${s.w}_k${s.k}${s.norm ? `_norm_l${s.team!.lanes}` : ""}${s.combine ? `_combine_d${s.combine.hd}_s${s.combine.splits}` : ""}`;
  const b = new KernelBuilder(name, { workgroup: wg, grid });
  const x = b.buffer(s.combine ? "part" : "x", "f32", "r");
  const g = s.norm ? b.buffer("g", s.norm.weight, "r") : undefined;
  const out = b.buffer("q", "u32", "w");
  const gv = g ? Math.min(vecWidth(s.norm!.weight === "f32" ? 4 : 2, s.k), 4) : 1;
  return { b, x, g, out, gv };
}

export interface XqPrepShape {
  /** Width of x. */
  k: number;
  /** The consuming gemv's weight type (its runs: graph/ops/qdot.ts XQ_RUNS). */
  w: QType;
  /** The gemv's fused rmsnorm: x·g quantized, r stored. */
  norm?: { eps: number; weight: FType };
  /** With a norm: the consuming gemv's team (kernels/lib/gemv.ts gemvTeam), whose order Σx² follows. */
  team?: Team;
  name?: string;
  /** An invocation per int8x4 word where the caps allow (wordPrep; default), else per run: the same bits. */
  perWord?: boolean;
  /**
   * x is a split-K attention's output, combined here from its partials (attention.ts attentionCombine's, the same
   * bits) instead of loaded: the combine and the prep in one kernel. Per word only, no norm (xqPrepCombines).
   */
  combine?: { hd: number; splits: number };
}

/**
 * Bindings: x f32 [k] (r) (with combine: the partials f32 [k / hd, splits, hd + 2]); g [k] (r, when norm); q u32
 * [xqLayout(w, k, norm).total] (w).
 */
export function xqPrep(caps: Caps, s: XqPrepShape): Kernel {
  const { k, w } = s;
  if (!XQ_TYPES.includes(w)) throw new KernelError(`xq_prep: no integer path for ${w} (${XQ_TYPES.join(", ")})`);
  if (!(k >= 1) || k % QLAYOUT[w].elems) throw new KernelError(`xq_prep: k=${k} is not a whole number of ${w} blocks`);
  if (s.norm && !s.team) throw new KernelError("xq_prep: a norm needs the consuming gemv's team");
  if (s.combine) {
    if (!xqPrepCombines(caps, s)) throw new KernelError(`xq_prep: no combine into ${w} x of k=${k} here`);
    return combinePrep(caps, s as XqPrepShape & { combine: { hd: number; splits: number } });
  }
  if ((s.perWord ?? true) && wordFits(caps, s)) return wordPrep(caps, s);
  const l = xqLayout(w, k, !!s.norm);
  const t = s.team;
  const wg = t ? t.lanes : Math.min(128, caps.maxWorkgroupSize);
  const grid = t ? [1, 1, 1] as [number, number, number] : gridFor(caps, Math.ceil(l.runs / wg));
  const { b, x, g, out, gv } = prepKernel(s, wg, grid);

  const one = (gi: Val, ss?: Val) => {
    const xat = runAt(b, w, gi);
    const run = quantizeRun(b, chunkX(b, w, x, xat, g && ss ? { buf: g, gv, ss } : undefined));
    const ws = run.words.flat(), base = b.let(gi.mul(l.words), "u32", "xw");
    for (let o = 0; o < l.words; o += 4) b.storev(out, o ? base.add(o) : base, ws.slice(o, o + 4));
    const meta: Val[] = [run.dx.bitcast("u32")];
    if (l.meta > 1) {
      for (let i = 0; i < run.sums.length; i += 2) {
        const lo = run.sums[i].bitcast("u32").and(0xffff);
        meta.push(i + 1 < run.sums.length ? lo.or(run.sums[i + 1].bitcast("u32").shl(16)) : lo);
      }
      while (meta.length < l.meta) meta.push(u32(0));
    }
    const mAt = b.let(gi.mul(l.meta).add(l.metaAt), "u32", "xm");
    if (l.meta === 1) b.store(out, mAt, meta[0]);
    else b.storev(out, mAt, meta);
  };

  if (!t) {
    const gi = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "gi");
    if (grid[0] * grid[1] * grid[2] * wg > l.runs) b.if(gi.ge(l.runs), () => b.return());
    one(gi);
    return b.build();
  }
  // One team as the gemv's: lane i takes runs i, i + lanes, ... and sums their squares in that order.
  const lane = t.lanes === 1 ? u32(0) : b.lid.x;
  const ss = b.let(f32(0), "f32", "ss");
  b.for(lane, u32(l.runs), t.lanes, (gi) => one(gi, ss));
  const tot = teamReduce(b, { ...t, rows: 1, size: t.lanes }, "add", ss);
  const r = b.let(tot.div(k).add(f32(s.norm!.eps)).rsqrt(), "f32", "r");
  b.if(lane.eq(u32(0)), () => b.store(out, l.rAt!, r.bitcast("u32")));
  return b.build();
}

/** Whether xqPrep can combine attention partials into its x (XqPrepShape.combine): per word, no norm, whole items of 4-value words. */
export function xqPrepCombines(caps: Caps, s: Pick<XqPrepShape, "k" | "w" | "norm"> & { combine?: { hd: number } }): boolean {
  if (s.norm || !s.combine || s.combine.hd % 4 || s.k % s.combine.hd || !XQ_TYPES.includes(s.w) || s.k % QLAYOUT[s.w].elems) return false;
  const per = 4 * xqLayout(s.w, s.k, false).words, sg = caps.subgroupSize;
  return caps.subgroups && sg >= per && sg % per === 0 && s.k % Math.max(sg, 64) === 0;
}

/**
 * xqPrep with x combined from split-K attention partials: an invocation per value, as attentionCombine has (its
 * loads are the latency: a round for the splits' (m, l), one for their acc), then a run's 4·W lanes meet by
 * shuffles for the amax, each word's four bytes (an or over its four lanes) and each group's Σq. A max, an or and
 * integer sums do not depend on their order: the words, scales and sums are quantizeRun's of attentionCombine's
 * values.
 */
function combinePrep(caps: Caps, s: XqPrepShape & { combine: { hd: number; splits: number } }): Kernel {
  const { k, w } = s;
  const l = xqLayout(w, k, false), groups = chunkGroups(w);
  const W = l.words, wpg = W / groups.length;
  const wg = Math.max(caps.subgroupSize, 64), grid = gridFor(caps, k / wg);
  const { b, x: part, out } = prepKernel(s, wg, grid);
  const vi = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "vi");
  // value vi is byte e of word wi: word j of run gi
  const wi = b.let(vi.shr(2), "u32", "wi"), e = b.let(vi.and(3), "u32", "e");
  const gi = b.let(wi.div(W), "u32", "gi"), j = b.let(wi.mod(W), "u32", "j");
  const [v] = combineAt(b, part, s.combine, b.let(runAt(b, w, gi).add(wordOffset(w, j)).add(e), "u32", "at"), 1);
  let m = b.let(v.abs(), "f32", "am");
  for (let o = 2 * W; o >= 1; o /= 2) m = b.let(m.max(b.shuffle("xor", m, o)), "f32", "am");
  const { amax, is } = runScale(b, m);
  // quantizeWord's bytes: fl(x·is) + 1.5·2^23 holds the rounded value in its low byte
  const qb = b.let(v.mul(is).add(f32(12582912)).bitcast("u32"), "u32", "qb");
  let word = b.let(e.eq(u32(3)).select(qb.shl(24), qb.and(0xff).shl(e.mul(8))), "u32", "qxw");
  for (const o of [1, 2]) word = b.let(word.or(b.shuffle("xor", word, o)), "u32", "qxw");
  // each group's Σq: its words' sums, one lane of each word (a word's four lanes hold the same word)
  let sum = b.let(wordSum(word), "i32", "qxs");
  for (let o = 2 * wpg; o >= 4; o /= 2) sum = b.let(sum.add(b.shuffle("xor", sum, o)), "i32", "qxs");
  const lane = b.builtin("lane"), base = b.let(lane.sub(j.mul(4).add(e)), "u32", "rl");
  const sums = groups.map((_, g) => (g ? b.let(b.shuffle("idx", sum, base.add(g * 4 * wpg)), "i32", "qxs") : sum));
  b.if(e.eq(u32(0)), () => b.store(out, wi, word));
  b.if(j.eq(u32(0)).and(e.eq(u32(0))), () => storeMeta(b, out, l, gi, runDx(b, amax), sums));
  return b.build();
}

/** Whether wordPrep serves the shape: subgroups a run's words fit in, and a norm's team of whole subgroups. */
function wordFits(caps: Caps, s: Pick<XqPrepShape, "k" | "w" | "norm" | "team">): boolean {
  const W = xqLayout(s.w, s.k, false).words, sg = caps.subgroupSize;
  if (!caps.subgroups || sg < W || sg % W !== 0) return false;
  const t = s.team;
  return !s.norm || (!!t && !t.shared && t.lanes % sg === 0 && t.lanes <= caps.maxWorkgroupSize);
}

/**
 * xqPrep with an invocation per int8x4 word (4 values) instead of per run, over a grid: a run's W words are W
 * neighbouring lanes, which meet by shuffles for the run's amax and each group's Σq, so an invocation's chain is a
 * few loads and ~40 operations instead of a whole run's (the prep is latency-bound: ~2 µs a launch with a norm on
 * the H200, one team of one or two runs a lane). The words, scales and sums are quantizeRun's (a max and integer
 * sums do not depend on their order). With a norm, every workgroup is shaped as the gemv's team and also sums Σx²
 * as the per-run prep does (lane i: runs i, i + lanes, ... through chunkX, then teamReduce), reading all of x from
 * L2: the same r in each, which workgroup 0 stores.
 */
function wordPrep(caps: Caps, s: XqPrepShape): Kernel {
  const { k, w } = s;
  const l = xqLayout(w, k, !!s.norm);
  const W = l.words, words = l.runs * W, sg = caps.subgroupSize;
  const t = s.team;
  const wg = s.norm ? t!.lanes : Math.min(Math.ceil(words / sg) * sg, Math.max(sg, 128));
  const grid = gridFor(caps, Math.ceil(words / wg));
  const { b, x, g, out, gv } = prepKernel(s, wg, grid);
  const tid = b.lid.x;
  const wgi = b.let(wgIndex(b, grid), "u32", "wgi");

  // This invocation's word; past the last (a partial workgroup) it takes the last run's and stores nothing.
  const wi0 = b.let(wgi.mul(wg).add(tid), "u32", "wi");
  const live = grid[0] * grid[1] * grid[2] * wg > words ? b.let(wi0.lt(words), "bool", "live") : undefined;
  const wi = live ? b.let(wi0.min(words - 1), "u32", "wc") : wi0;
  // j from the unclamped index: lane - j is then the first lane of the invocation's block of W in every lane
  const gi = b.let(wi.div(W), "u32", "gi"), j = b.let(wi0.mod(W), "u32", "j");
  const at = b.let(runAt(b, w, gi).add(wordOffset(w, j)), "u32", "at");
  let v = b.loadv(x, at, 4);
  if (g) {
    const gs: Val[] = [];
    for (let o = 0; o < 4; o += gv) gs.push(...(gv > 1 ? b.loadv(g, o ? at.add(o) : at, gv) : [b.load(g, o ? at.add(o) : at)]));
    v = v.map((e, i) => b.let(e.mul(gs[i]), "f32", "xg"));
  }
  prepWord(b, w, l, out, { v, gi, j, wi, live });
  if (!s.norm) return b.build();

  // Σx² as the gemv's team sums it (the per-run prep's order), its runs unrolled so their loads issue together
  const ss = b.let(f32(0), "f32", "ss");
  for (let r0 = 0; r0 < l.runs; r0 += wg) {
    const r = b.let(tid.add(r0), "u32", "sr");
    const one = () => void chunkX(b, w, x, runAt(b, w, r), { buf: g!, gv, ss });
    if (r0 + wg > l.runs) b.if(r.lt(l.runs), one);
    else one();
  }
  const tot = teamReduce(b, { ...t!, rows: 1, size: t!.lanes }, "add", ss);
  const rr = b.let(tot.div(k).add(f32(s.norm!.eps)).rsqrt(), "f32", "r");
  b.if(wgi.eq(u32(0)).and(tid.eq(u32(0))), () => b.store(out, l.rAt!, rr.bitcast("u32")));
  return b.build();
}
