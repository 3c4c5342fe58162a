// Decode gemv with fused prologue and epilogues: one kernel computes every batch-1 matmul that reads the same
// input vector against float weights of one layout and width k (a layer's q/k/v, or its gate/up), each a
// "part" with its own weights and output. Teams (a subgroup, several subgroups, or a workgroup) are numbered
// across the parts and pick their part by range, so one dispatch replaces several.
//
// - norm: the input is rms-normalized on the fly. Every team sees all of x anyway, so it sums x² in the same
//   loop as its dots and scales them by r = rsqrt(mean(x²) + eps) at the end: y = r · Σ (x·g)·W, the
//   rmsnorm's output is never stored.
// - A team computes two dots that share every x load: two neighbouring rows of a "dot" part, the rotary pair
//   (i, i + rot/2 or 2i, 2i+1) of a "rope" part (rotated in registers at the slot's position), or gate and up
//   rows of a "silu_mul" part (stores silu(gate)·up).
// - Epilogues: + bias[n] per weight, + residual[n], rounding to f16/bf16 on store, and storing at row pos of a
//   [cap, n] State (the K/V cache write, faulting FAULT.UPDATE_POS past cap).
// Lanes stride over k with 16-byte loads (a subgroup's loads cover contiguous memory), the loop unrolled so a
// lane keeps several loads in flight; one reduction per dot at the end.
// GGUF block weights (dequant.ts) are read at a few bits per value, so x (f32, and g with a norm) would cost
// several times the weight bytes if every row reloaded it: a team of one or several subgroups (combined
// through shared memory) gives each lane a few of the row's block chunks and walks `rows` row units (a dot
// row, a rope pair, a gate/up pair): per chunk, the lane's x·g is loaded once into registers, then each row's
// chunk is loaded (issued `ahead` rows before it is decoded, so loads stay in flight during the arithmetic),
// decoded and dotted as scale·Σq·x + bias·Σx; the units' sums meet in one shared-memory round at the end.
// On the int path (xq) x·g is quantized per chunk and dotted in integers; with xq "prep" a kernel of its own has
// done that once (kernels/lib/xq_prep.ts) and each lane loads its chunk's int8 words, scale and sums instead.
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Buffer, Shared } from "../ir.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import { evalEw } from "./elementwise.ts";
import { elemOf, type FType, gridFor, type IType, pairwise, type Team, team, teamReduce, vecWidth, wgIndex, type WType } from "./common.ts";
import { chunkDot, chunkDotInt, isQType, type LoadedChunk, loadChunk, QLAYOUT, type QType, quantizeRun, qWords, XQ_TYPES, type XRun } from "./dequant.ts";
import { chunkX, loadRun, xqLayout } from "./xq_prep.ts";


export interface GemvPart {
  /** Output rows (rows of each weight). */
  n: number;
  /** "dot" (default): y = x·W; "silu_mul": two weights, y = silu(x·Wa)·(x·Wb); "rope": y = rope(x·W) by heads of rope.hd. */
  kind?: "dot" | "silu_mul" | "rope";
  /** A "silu_mul" part with the tanh GELU in place of silu: y = gelu(x·Wa)·(x·Wb) (GeGLU). */
  gelu?: boolean;
  /** A bias f32 [n] added to each weight's dot. */
  bias?: boolean;
  /** ("dot") adds residual f32 [n] (may be bound to the same bytes as y). */
  residual?: boolean;
  rope?: { hd: number; rot?: number; style: "adjacent" | "half" };
  /** Storage type of y (default f32; f16/bf16 round to nearest even). */
  out?: FType;
  /** Stores at row pos of y [cap, n] (an in-place State write) instead of y [n]. */
  cap?: number;
  /** Element type of the position binding ("rope" or cap; default u32). */
  pos?: IType;
}

export interface GemvTune {
  /** Lanes per team: the subgroup size, or a multiple of it (several subgroups split k). */
  lanes: number;
  /** Rows per team of a "dot" part (1 or 2); with block weights, row units per team (1 or more). */
  rows: number;
  /** Unroll of the k loop. */
  unroll: number;
  /** Teams per workgroup (subgroup-sized teams only). */
  teams: number;
  /** Block weights: rows whose loads are issued ahead of the row being decoded (default by block size). */
  ahead?: number;
}

export interface GemvShape {
  /** Width of x and of every weight row. */
  k: number;
  /** Weight layout (a block type: k a whole number of blocks). */
  w: WType;
  /** rmsnorm of x folded in: g [k] of this type. */
  norm?: { eps: number; weight: FType };
  parts: GemvPart[];
  name?: string;
  tune?: Partial<GemvTune>;
  /**
   * Block weights of XQ_TYPES (dequant.ts): x (times g) quantized to int8 per chunk and dotted in integers
   * (dot4), as graph/ops/qdot.ts defines; the rmsnorm's r still scales the sums (a run's quantization does not
   * depend on its scale, up to rounding). "prep": the same, with x arriving quantized (kernels/lib/xq_prep.ts:
   * its buffer in place of x and g, and r in it with a norm), bit-identical.
   */
  xq?: boolean | "prep";
}

/** Teams a part needs: one per row pair ("dot" with rows 2, "rope"), one per row otherwise. */
function partTeams(p: GemvPart, rows: number): number {
  const kind = p.kind ?? "dot";
  if (kind === "rope") return p.n / 2;
  if (kind === "silu_mul") return p.n;
  return Math.ceil(p.n / rows);
}

/**
 * The tuning of a block-weight gemv (from an H200 sweep of lanes 64..448 x rows 1..16 at the Llama 3 8B
 * shapes, q4_k_m and q8_0): about two chunks per lane (the lane's second chunk keeps more loads in flight than
 * a wider team would), at most 8 subgroups, and 4 row units per team (2 for q6_k, whose 210-byte blocks cost
 * the most registers; 8 where even that leaves 32768 subgroups: the vocabulary head); then, while the grid
 * has fewer than 4096 subgroups (about 31 per SM, one wave at these kernels' register use), first a chunk
 * per lane, then fewer units.
 */
function qTune(caps: Caps, s: Pick<GemvShape, "k" | "w" | "parts" | "xq">, w: QType): GemvTune {
  const sg = caps.subgroups ? caps.subgroupSize : 1;
  const units = s.parts.reduce((a, p) => a + partTeams(p, 1), 0);
  if (sg === 1) return { lanes: 128, rows: 2, unroll: 2, teams: 4 };
  const chunks = (s.k / QLAYOUT[w].elems) * QLAYOUT[w].chunks;
  const max = Math.max(sg, Math.min(caps.maxWorkgroupSize, 8 * sg));
  const whole = (n: number) => Math.min(max, Math.max(sg, Math.ceil(n / sg) * sg));
  let lanes = whole(chunks / 2);
  const warps = (r: number) => Math.ceil(units / r) * (lanes / sg);
  if (s.xq === "prep") return prepTune(s, w, chunks, whole, sg);
  if (s.xq) return xqTune(s, w, lanes, warps, () => lanes = whole(lanes * 2), Math.min(chunks, max));
  let rows = warps(8) >= 32768 ? 8 : w === "q6_k" ? 2 : 4;
  while (warps(rows) < 4096 && lanes < Math.min(chunks, max)) lanes = whole(lanes * 2);
  while (warps(rows) < 4096 && rows > 1) rows /= 2;
  return { lanes, rows, unroll: 2, teams: 4 };
}

/**
 * The int path's tuning (an H200 sweep of rows 2/4/8 x loads ahead 4/8 at the Llama 3 8B shapes, q4_k_m and
 * q8_0, session 6): the team as wide as qTune's first step makes it for 8 units (its width doubled while the
 * grid has fewer than 2048 subgroups), then 8 row units per team (x's L2 reads and quantization shared by twice
 * the rows of the f32 path), 4 for q8_0 projections of k <= 4096 other than gate/up and the vocabulary head
 * (16.5 vs 17.9 us for q/k/v, 7.7 vs 8.6 for o); halved while the grid has fewer than 1200 subgroups (the 8B's
 * q6_k v projection: 4.2 us at 2 units, 6.2 at 8). Loads in flight: dotsQ's default (xqAhead).
 */
function xqTune(s: Pick<GemvShape, "k" | "parts">, w: QType, lanes0: number, warps: (r: number) => number, widen: () => number, most: number): GemvTune {
  let lanes = lanes0;
  while (warps(8) < 2048 && lanes < most) lanes = widen();
  const silu = s.parts.some((p) => p.kind === "silu_mul"), units = s.parts.reduce((a, p) => a + partTeams(p, 1), 0);
  let rows = w === "q8_0" && s.k <= 4096 && !silu && units < 32768 ? 4 : 8;
  while (warps(rows) < 1200 && rows > 1) rows /= 2;
  return { lanes, rows, unroll: 2, teams: 4 };
}

/**
 * The tuning of a gemv reading prepared x (an H200 sweep of lanes 32..256 x units 1..8 x loads ahead 4/8 over the
 * Llama 3 8B's q4_k_m and q8_0 gemvs, session 11, `bench/kernels.ts --xq-prep on --sweep`): with x quantized once,
 * a team no longer saves much by sharing it across rows, and the grid's warps are what hide the loads' latency
 * (xqTune's 8 units left the 8B's gemvs at 3.4 warps per scheduler: q/k/v 22.5 -> 6.2 us, gate/up 25.3 -> 19.6,
 * q8_0 gate/up 38.8 -> 30.1). So: 128 lanes or two chunks a lane, whichever is wider (never more lanes than chunks),
 * one row unit per team, two where a lane would load only one chunk (the o projection: 4.6 against 5.4 us), and
 * doubled while the grid would exceed 32768 teams (the vocabulary head: 114-118 us at 4 units, 156 at 1).
 * Session 16 (the same sweep with lanes 128/192/224/256 x units 1/2 x ahead 2/4/8, the 8B at pos 64): a width
 * down to 3/4 of that which splits the chunks evenly (every lane the same trips, the unrolled path): q8_0 down
 * 17.87 -> 16.91 us at 224 lanes; and a q6_k team whose lanes take two chunks does two units where the grid
 * keeps two waves of warps (~8192) even so: the 8B's down 17.53 -> 16.44 us, while the 1B's (k 8192, 4096
 * warps) went 6.30 -> 8.05 and qwen2.5-0.5b's 4.94 -> 6.55.
 */
function prepTune(s: Pick<GemvShape, "parts">, w: QType, chunks: number, whole: (n: number) => number, sg: number): GemvTune {
  let lanes = whole(Math.min(chunks, Math.max(128, chunks / 2)));
  for (let l = lanes; l >= lanes * 0.75; l -= sg) {
    if (chunks % l === 0) {
      lanes = l;
      break;
    }
  }
  const units = s.parts.reduce((a, p) => a + partTeams(p, 1), 0);
  const loads = Math.ceil(chunks / lanes) * Math.max(...s.parts.map((p) => ((p.kind ?? "dot") === "dot" ? 1 : 2)));
  const pairs = w === "q6_k" && loads === 2 && (units / 2) * (lanes / sg) >= 8192;
  let rows = loads < 2 || pairs ? 2 : 1;
  while (units / rows >= 32768) rows *= 2;
  return { lanes, rows, unroll: 2, teams: 4 };
}

/**
 * Chunk loads a lane of the int path keeps in flight (the same sweep): 4, as the rows' registers then leave room
 * for more subgroups per SM (gate/up q4_k 31.1 vs 34.1 us at 8, the vocabulary head q8_0 166 vs 182), except a
 * q4_k team whose lanes take one chunk each (8: o 5.2 vs 6.1 us, q/k 9.6 vs 11.6), and on the loop path a whole
 * slot up to 8 rows (the window cannot cross its trips: q8_0 down 20.8 vs 23.0 us).
 */
function xqAhead(w: QType, rows: number, trips: number, unrolled: boolean): number {
  if (!unrolled) return Math.min(rows, 8);
  return w === "q4_k" && trips === 1 ? 8 : 4;
}

/**
 * The tuning a shape gets (measured on an H200 over lanes 32/64/128, rows 1/2, unroll 2/4/8 at the Llama
 * shapes, bench/kernels.ts --sweep): one row per team of a "dot" part when every part is one (o and down
 * projections) and rows are few, else two (q/k/v, the vocab projection); subgroups per team doubled up to 4 until teams x subgroups reach 16384 warps (two full
 * waves of ~132 SMs x 64), as long as half the lanes get a 16-byte load of each row (a short row is read
 * in one round, the latency floor of the small projections); the k loop unrolled 8 when
 * a team computes two dots, 2 when it computes one.
 */
export function gemvTune(caps: Caps, s: Pick<GemvShape, "k" | "w" | "parts" | "xq">): GemvTune {
  if (isQType(s.w)) return qTune(caps, s, s.w);
  const sg = caps.subgroups ? caps.subgroupSize : 1;
  const plain = s.parts.every((p) => (p.kind ?? "dot") === "dot");
  const rows = !plain || s.parts.reduce((a, p) => a + p.n, 0) >= 32768 ? 2 : 1;
  const teams = s.parts.reduce((a, p) => a + partTeams(p, rows), 0);
  const vec = vecWidth(s.w === "f32" ? 4 : 2, s.k);
  let sgs = 1;
  // Without a dispatch gap (measured on PTX): the q/k/v projection (rope parts: a row pair a team) widens its teams
  // only while the grid stays within about a wave (8192 warps). H200 sweep (session 25), µs: the 8B's at 64 / 128
  // lanes 14.70 / 16.45, the 1B's (6144 warps at 128) 5.81 / 5.50.
  const wave = !caps.dispatchGap && s.parts.some((p) => p.kind === "rope");
  if (sg > 1) while (sgs < 4 && teams * sgs < 16384 && !(wave && teams * sgs * 2 > 8192) && s.k >= sg * sgs * 2 * vec / 2) sgs *= 2;
  const twoDots = rows === 2 || s.parts.some((p) => p.kind === "rope" || p.kind === "silu_mul");
  // Where a dispatch has a fixed cost (Vulkan, WebGPU), a gate/up whose few short rows would take teams of 4
  // subgroups (qwen2.5-0.5b's 4864 x 896) runs as one-subgroup teams, 4 a workgroup: no shared-memory round, a
  // quarter of the workgroups. H200 sweep (bench/kernels.ts --sweep, session 23): Vulkan 11.32 -> 9.59 µs; ptx
  // level at 7.23 / 7.27, so it keeps its rule.
  if (caps.dispatchGap && sgs === 4 && s.parts.some((p) => p.kind === "silu_mul")) return { lanes: sg, rows, unroll: 2, teams: 4 };
  // Without a dispatch gap (measured on PTX): one dot a team over a long row (more than 4 trips of the team's loads:
  // the down projections) keeps 4 loads in flight per lane. H200 sweep (session 25, `bench/kernels.ts --only gemv --sweep`), µs at unroll 2 / 4: the 8B's
  // down 30.72 / 28.37, qwen2.5-0.5b's 4.13 / 3.97, the 1B's 9.33 / 9.31; the 8B's o projection (4 trips) 9.20 /
  // 10.24. Whole steps (`--wall --pos 64`, ms) 8B 4.156 -> 4.099, qwen2.5-0.5b 0.626 -> 0.622, the 1B level; Vulkan
  // measured level to 3% slower (1B 0.942 -> 0.969 and 1.006), so it keeps 2 (as WebGPU).
  const long = !caps.dispatchGap && s.k > 4 * sg * sgs * vec;
  return { lanes: sg * sgs, rows, unroll: twoDots ? 8 : long ? 4 : 2, teams: 4 };
}

/**
 * How a gemv's work is laid out: its tuning, row units per team (R; float weights pair a dot part's rows
 * instead: rowsPer), units and teams per part, the team and the grid.
 */
function layout(caps: Caps, s: GemvShape) {
  const tune: GemvTune = { ...gemvTune(caps, s), ...s.tune };
  const sg = caps.subgroups ? caps.subgroupSize : 1;
  const qt = isQType(s.w);
  const R = qt ? Math.max(1, Math.floor(tune.rows)) : 1;
  const rowsPer = qt ? 1 : tune.rows >= 2 ? 2 : 1;
  const units = s.parts.map((p) => partTeams(p, rowsPer));
  const counts = units.map((u) => Math.ceil(u / R));
  const total = counts.reduce((a, b) => a + b, 0);
  const t = qt && sg > 1 && tune.lanes > sg
    ? wideTeam(caps, tune.lanes)
    : team(caps, { wg: Math.max(1, tune.teams) * sg, rows: total, wide: tune.lanes > sg ? tune.lanes : undefined });
  return { tune, R, rowsPer, units, counts, total, t, grid: gridFor(caps, Math.ceil(total / t.rows)) };
}

/** The team a gemv's teams are (kernels/lib/xq_prep.ts sums x² in its order). */
export function gemvTeam(caps: Caps, s: GemvShape): Team {
  return layout(caps, s).t;
}

/** A team of `lanes` (rounded up to whole subgroups, at most a workgroup): one per workgroup. */
function wideTeam(caps: Caps, lanes: number): Team {
  const sg = caps.subgroupSize;
  const sgs = Math.max(1, Math.min(Math.floor(caps.maxWorkgroupSize / sg), Math.ceil(lanes / sg)));
  return { lanes: sgs * sg, rows: 1, size: sgs * sg, shared: false, sgs };
}

/**
 * Bindings, in order: x f32 [k] (r); g [k] (r, when norm) (xq "prep": the prepared x, u32 [xqLayout(w, k, norm).total]
 * (r), in place of both: kernels/lib/xq_prep.ts); then per part: w [n, k] (r) (a second one for
 * "silu_mul"), bias f32 [n] (r) per weight (when bias), residual f32 [n] (r, when residual), freqs f32
 * [rot/2] (r, "rope": the frequency table), pos [1] (r, "rope" or cap), y [n] or [cap, n] of `out` (w; rw with cap).
 * Faults FAULT.ROPE_POS on a negative (i32) rope position, FAULT.UPDATE_POS when pos >= cap.
 */
export function gemv(caps: Caps, s: GemvShape): Kernel {
  const { k, w } = s;
  if (!(k >= 1) || s.parts.length === 0) throw new KernelError(`gemv: bad shape k=${k}, ${s.parts.length} parts`);
  for (const p of s.parts) {
    const kind = p.kind ?? "dot";
    if (!(p.n >= 1) || p.n * k >= 2 ** 32 || (p.cap ?? 1) * p.n >= 2 ** 32) throw new KernelError(`gemv: bad part n=${p.n} k=${k}`);
    if (kind === "rope") {
      const r = p.rope;
      if (!r || r.hd % 2 || (r.rot ?? r.hd) % 2 || (r.rot ?? r.hd) > r.hd || p.n % r.hd) throw new KernelError(`gemv: rope part n=${p.n} needs whole heads of even hd`);
    }
    if (p.residual && kind !== "dot") throw new KernelError("gemv: a residual only on a dot part");
  }
  const qt = isQType(w) ? w : undefined;
  if (s.xq && !(qt && XQ_TYPES.includes(qt))) throw new KernelError(`gemv: quantized x needs a weight of ${XQ_TYPES.join(", ")}, got ${w}`);
  const xq = !!s.xq, prep = s.xq === "prep";
  const { tune, R, rowsPer, units, counts, total, t, grid } = layout(caps, s);
  const tag = s.parts.map((p) => `${p.kind === "silu_mul" ? (p.gelu ? "gm" : "sm") : p.kind === "rope" ? "rope" : "n"}${p.n}${p.bias ? "b" : ""}${p.residual ? "r" : ""}${p.out && p.out !== "f32" ? p.out : ""}${p.cap ? "c" : ""}`).join("_");
  const name = s.name ?? `gemv_${w}${prep ? "x8p" : xq ? "x8" : ""}_k${k}${s.norm ? "_norm" : ""}_${tag}_l${t.lanes}r${qt ? R : rowsPer}u${tune.unroll}t${t.rows}`;
  const b = new KernelBuilder(name, { workgroup: t.size, grid });

  // prep: x arrives quantized (xq_prep.ts), with r in it when the norm is fused
  const x = prep ? b.buffer("xq", "u32", "r") : b.buffer("x", "f32", "r");
  const g = s.norm && !prep ? b.buffer("g", s.norm.weight, "r") : undefined;
  const xl = prep ? xqLayout(qt!, k, !!s.norm) : undefined;
  interface PartBufs { ws: Buffer[]; bias: Buffer[]; res?: Buffer; freqs?: Buffer; pos?: Buffer; y: Buffer }
  const bufs: PartBufs[] = s.parts.map((p, i) => {
    const kind = p.kind ?? "dot";
    const nw = kind === "silu_mul" ? 2 : 1;
    const ws = Array.from({ length: nw }, (_, j) => b.buffer(`w${i}_${j}`, elemOf(w), "r"));
    const bias = p.bias ? Array.from({ length: nw }, (_, j) => b.buffer(`bias${i}_${j}`, "f32", "r")) : [];
    const res = p.residual ? b.buffer(`res${i}`, "f32", "r") : undefined;
    const freqs = kind === "rope" ? b.buffer(`freqs${i}`, "f32", "r") : undefined;
    const pos = kind === "rope" || p.cap ? b.buffer(`pos${i}`, p.pos ?? "u32", "r") : undefined;
    const y = b.buffer(`y${i}`, p.out ?? "f32", p.cap ? "rw" : "w");
    return { ws, bias, res, freqs, pos, y };
  });

  // Team index: workgroup * teams per workgroup + subgroup (a wide or shared team is a whole workgroup).
  const single = t.shared || t.sgs > 1 || t.rows === 1;
  const lane = t.lanes === 1 ? u32(0) : single ? b.lid.x : b.builtin("lane");
  const wgi = wgIndex(b, grid);
  const T = b.let(t.rows === 1 ? wgi : wgi.mul(t.rows).add(t.lanes === 1 ? b.lid.x : b.builtin("sgid")), "u32", "team");
  if (grid[0] * grid[1] * grid[2] * t.rows > total) b.if(T.ge(total), () => b.return());

  const vec = qt ? 4 : vecWidth(w === "f32" ? 4 : 2, k);
  const xv = Math.min(4, vec);
  const gv = g ? Math.min(vecWidth(s.norm!.weight === "f32" ? 4 : 2, k), vec) : 1;
  // A one-lane team (a CPU) is latency-bound on the rounded add chain: one chain per vector element.
  const chains = t.lanes === 1 ? vec : 1;

  /** Dots of rows `rows` (weight buffer, row index) over all of k; returns their team-wide sums (and Σx²). */
  /**
   * Dots of rows `rows` (weight buffer, row index) over all of k; `between` runs once the first group's
   * weight loads are issued (work that overlaps them); returns the team-wide sums (and Σx²).
   */
  const dots = (rows: { buf: Buffer; row: Val }[], between?: () => void): { sums: Val[]; ss?: Val } => {
    if (qt) return dotsQ(rows, between);
    const acc = rows.map(() => Array.from({ length: chains }, () => b.let(f32(0), "f32", "acc")));
    const ssAcc = g ? Array.from({ length: chains }, () => b.let(f32(0), "f32", "ss")) : [];
    const bases = rows.map((r) => b.let(r.row.mul(k), "u32", "wrow"));
    const loadW = (d: number, i: Val): Val[] => (vec > 1 ? b.loadv(rows[d].buf, bases[d].add(i), vec) : [b.load(rows[d].buf, bases[d].add(i))]);
    const consume = (i: Val, ws: Val[][]): void => {
      let xs: Val[] = [];
      for (let o = 0; o < vec; o += xv) xs.push(...(xv > 1 ? b.loadv(x, i.add(o), xv) : [b.load(x, i.add(o))]));
      if (g) {
        const gs: Val[] = [];
        for (let o = 0; o < vec; o += gv) gs.push(...(gv > 1 ? b.loadv(g, i.add(o), gv) : [b.load(g, i.add(o))]));
        const sq = ssAcc.map((a) => a);
        xs.forEach((v, e) => (sq[e % chains] = sq[e % chains].add(v.mul(v))));
        sq.forEach((v, c) => b.set(ssAcc[c], v));
        xs = xs.map((v, e) => b.let(v.mul(gs[e]), "f32", "xg"));
      }
      ws.forEach((wd, d) => {
        const next = acc[d].map((a) => a);
        wd.forEach((wv, e) => (next[e % chains] = next[e % chains].add(wv.mul(xs[e]))));
        next.forEach((v, c) => b.set(acc[d][c], v));
      });
    };
    // Every lane has at least `common` trips of `step`; they run in groups of `u` whose weight loads are all
    // issued before any is used (u x rows 16-byte loads in flight per lane), then a tail loop takes the rest.
    const step = t.lanes * vec, common = Math.floor(k / step);
    const u = Math.max(1, Math.min(tune.unroll, common));
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
    } else between?.();
    if (groups * u * step < k) b.for(start.add(groups * u * step), u32(k), step, (i) => consume(i, rows.map((_, d) => loadW(d, i))));
    const sums = acc.map((a) => teamReduce(b, t, "add", pairwise(a)));
    const ss = g ? teamReduce(b, t, "add", pairwise(ssAcc)) : undefined;
    return { sums, ss };
  };
  /**
   * `dots` over block weights: each lane takes the chunks lane, lane + lanes, ... of the rows' blocks; per
   * chunk, x (times g, its Σx² and, for blocks with a min, its Σx per group) is loaded once and shared by
   * every row, whose chunk is then loaded, decoded and dotted.
   */
  const dotsQ = (rows: { buf: Buffer; row: Val }[], between?: () => void): { sums: Val[]; ss?: Val } => {
    const q = QLAYOUT[qt!], nb = k / q.elems, total = nb * q.chunks, cs = Math.log2(q.chunks);
    const acc = rows.map(() => b.let(f32(0), "f32", "acc"));
    const ssAcc = g ? b.let(f32(0), "f32", "ss") : undefined;
    const bases = rows.map((r) => b.let(r.row.mul(nb), "u32", "rblk"));
    between?.();
    // About 32 registers of raw block words in flight per lane (64 on the int path, whose x takes fewer).
    const trips = Math.ceil(total / t.lanes), unrolled = total % t.lanes === 0 && trips <= 4;
    const ahead = Math.max(1, tune.ahead ?? Math.min(rows.length * 2, xq ? xqAhead(qt!, rows.length, trips, unrolled) : Math.floor(32 / q.raw)));
    /**
     * The chunks `gis` of every row, in order (slot by slot, row by row), with one window of `ahead` chunk loads
     * in flight across slot boundaries (a slot's x is loaded and quantized when its first row is next).
     */
    const slots = (gis: Val[]) => {
      const geo = gis.map(() => undefined as { blk: Val; c: Val } | undefined);
      const at = (j: number) => (geo[j] ??= { blk: b.let(gis[j].shr(cs), "u32", "blk"), c: b.let(gis[j].and(q.chunks - 1), "u32", "c") });
      const load = (j: number, d: number) => {
        const { blk, c } = at(j);
        return loadChunk(b, rows[d].buf, qt!, b.let(bases[d].add(blk).mul(qWords(qt!)), "u32", "base"), c, true, nb % 2 === 0, xq);
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
        if (prep) run = loadRun(b, qt!, x, xl!, gi); // the run as the prep quantized it (run gi is chunk gi)
        else {
          const xat = b.let(at(j).blk.mul(q.elems).add(inflight[0].at), "u32", "xat");
          xs = chunkX(b, qt!, x, xat, g && { buf: g, gv, ss: ssAcc! }, xq);
          if (xq) run = quantizeRun(b, xs);
        }
        const sx = !xq && QLAYOUT[qt!].biased && rows.length > 1 ? xs.map((v) => b.let(pairwise(v), "f32", "sx")) : undefined;
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
    } else b.for(lane, u32(total), t.lanes, (gi) => slots([gi]), { unroll: Math.max(1, Math.min(tune.unroll, trips)) });
    const red = reduceAll(ssAcc ? [...acc, ssAcc] : acc);
    return { sums: red.slice(0, acc.length), ss: ssAcc ? red[acc.length] : undefined };
  };
  /**
   * Team sums of several values: one shared-memory round for all of them on a team of several subgroups (a
   * barrier per value would serialize the units' reductions).
   */
  let qsum: Shared | undefined;
  const reduceAll = (vals: Val[]): Val[] => {
    if (t.sgs <= 1 || vals.length === 1) return vals.map((v) => teamReduce(b, t, "add", v));
    // One scratch for every part, sized for the most values a team reduces (2 rows per unit, and Σx²).
    qsum ??= b.shared("qsum", "f32", (2 * R + 1) * t.sgs);
    const sh = qsum;
    const rs = vals.map((v) => b.let(b.subgroupReduce("add", v), "f32", "red"));
    const sgid = b.builtin("sgid");
    b.if(b.builtin("lane").eq(u32(0)), () => rs.forEach((r, i) => b.sstore(sh, i ? sgid.add(i * t.sgs) : sgid, r)));
    b.barrier();
    // Expressions, not values: only the first subgroup reads them (see `tail`).
    return vals.map((_, i) => {
      let a = b.sload(sh, i * t.sgs);
      for (let j = 1; j < t.sgs; j++) a = a.add(b.sload(sh, i * t.sgs + j));
      return a;
    });
  };
  /** The epilogues after a team's reduction: on a team of several subgroups, the first one alone (it stores). */
  const tail = (f: () => void) => (qt && t.sgs > 1 ? b.if(b.builtin("sgid").eq(u32(0)), f) : f());
  /** Each dot scaled by the norm's r, plus its bias. */
  const finish = (sums: Val[], ss: Val | undefined, bias: Buffer[], rows: Val[]): Val[] => {
    const r = ss ? b.let(ss.div(k).add(f32(s.norm!.eps)).rsqrt(), "f32", "r")
      : xl?.rAt !== undefined ? b.let(b.load(x, xl.rAt).bitcast("f32"), "f32", "r") : undefined;
    return sums.map((v, d) => {
      let o = r ? v.mul(r) : v;
      if (bias.length) o = o.add(b.load(bias[Math.min(d, bias.length - 1)], rows[d]));
      return b.let(o, "f32", "dot");
    });
  };
  /** Lane 0 stores (every lane holds the sums). */
  const once = (f: () => void) => (t.lanes === 1 ? f() : b.if(lane.eq(u32(0)), f));
  /** Output index of row `row` (at row pos of a [cap, n] destination when cap). */
  const outAt = (p: GemvPart, pos: Val | undefined, row: Val): Val => (p.cap ? pos!.mul(p.n).add(row) : row);
  const loadPos = (p: GemvPart, pb: PartBufs): Val | undefined => {
    if (!pb.pos || !p.cap) return undefined;
    const v = b.load(pb.pos, 0);
    const pos = b.let(v.t === "i32" ? v.bitcast("u32") : v, "u32", "pos");
    b.check(pos.lt(p.cap), FAULT.UPDATE_POS);
    return pos;
  };

  /** A row unit's rows, work that may overlap their first loads, and its epilogue (stores only when `ok`). */
  interface Unit { rows: { buf: Buffer; row: Val }[]; between?: () => void; end: (sums: Val[], ss: Val | undefined, ok?: Val) => void }
  const guard = (ok: Val | undefined, f: () => void) => (ok ? b.if(ok, f) : f());
  const unit = (pi: number, tl: Val): Unit => {
    const p = s.parts[pi], pb = bufs[pi], kind = p.kind ?? "dot";
    if (kind === "silu_mul") {
      const row = tl;
      return {
        rows: [{ buf: pb.ws[0], row }, { buf: pb.ws[1], row }],
        end: (sums, ss, ok) => {
          const [gt, up] = finish(sums, ss, pb.bias, [row, row]);
          once(() => guard(ok, () => b.store(pb.y, outAt(p, loadPos(p, pb), row), evalEw({ op: "mul", args: [{ op: p.gelu ? "gelu" : "silu", args: [{ in: 0 }] }, { in: 1 }] }, [gt, up]))));
        },
      };
    }
    if (kind === "rope") {
      const { hd, style } = p.rope!, rot = p.rope!.rot ?? hd, half = hd / 2;
      const i = b.let(tl.mod(half), "u32", "i");
      const base = b.let(tl.div(half).mul(hd), "u32", "hbase");
      // Rotated pairs are (i, i + rot/2) or (2i, 2i + 1); dims past rot pass through as (2i, 2i + 1).
      const inRot = i.lt(rot / 2);
      const ia = b.let(style === "half" && rot === hd ? base.add(i) : style === "half" ? inRot.select(base.add(i), base.add(i.mul(2))) : base.add(i.mul(2)), "u32", "ia");
      const ib = b.let(style === "half" && rot === hd ? ia.add(rot / 2) : style === "half" ? inRot.select(ia.add(rot / 2), ia.add(1)) : ia.add(1), "u32", "ib");
      // The angle's cos and sin right after the first weight loads: they do not depend on the dots, so they
      // overlap those loads.
      let p0!: Val, cs!: Val, sn!: Val;
      const angle = () => {
        const pv = b.load(pb.pos!, 0);
        p0 = pv.t === "i32" ? b.let(pv, "i32", "p") : b.let(pv, "u32", "p");
        const ang = b.let(p0.cast("f32").mul(b.load(pb.freqs!, rot === hd ? i : i.min(rot / 2 - 1))), "f32", "ang");
        cs = b.let(ang.cos(), "f32", "c");
        sn = b.let(ang.sin(), "f32", "s");
      };
      return {
        rows: [{ buf: pb.ws[0], row: ia }, { buf: pb.ws[0], row: ib }],
        between: angle,
        end: (sums, ss, ok) => {
          const [x0, x1] = finish(sums, ss, pb.bias, [ia, ib]);
          once(() => guard(ok, () => {
            if (p0.t === "i32") b.check(p0.ge(0), FAULT.ROPE_POS);
            const pos = loadPos(p, pb);
            const store = (y0: Val, y1: Val) => {
              b.store(pb.y, outAt(p, pos, ia), y0);
              b.store(pb.y, outAt(p, pos, ib), y1);
            };
            const rotate = () => store(x0.mul(cs).sub(x1.mul(sn)), x0.mul(sn).add(x1.mul(cs)));
            if (rot === hd) rotate();
            else b.if(inRot, rotate, () => store(x0, x1));
          }));
        },
      };
    }
    // dot: rows r0 and (when two per team) r1 = r0 + 1, clamped to the last row (computed twice, stored once).
    const r0 = b.let(rowsPer === 2 ? tl.mul(2) : tl, "u32", "r0");
    const r1 = rowsPer === 2 ? b.let(p.n % 2 ? r0.add(1).min(p.n - 1) : r0.add(1), "u32", "r1") : undefined;
    const rows = r1 ? [r0, r1] : [r0];
    return {
      rows: rows.map((row) => ({ buf: pb.ws[0], row })),
      end: (sums, ss, ok) => {
        const vals = finish(sums, ss, pb.bias, rows);
        once(() => guard(ok, () => {
          const pos = loadPos(p, pb);
          rows.forEach((row, d) => {
            const emit = () => {
              const at = b.let(outAt(p, pos, row), "u32", "yi");
              b.store(pb.y, at, pb.res ? vals[d].add(b.load(pb.res, row)) : vals[d]);
            };
            if (d === 1 && p.n % 2) b.if(r0.add(1).lt(p.n), emit);
            else emit();
          });
        }));
      },
    };
  };
  /**
   * Team tl of part pi: units tl·R .. tl·R + R - 1 in one pass over x (the last team's units past the part's
   * end repeat its last unit and store nothing: a residual bound to y must be added once).
   */
  const body = (pi: number, tl: Val): void => {
    if (R === 1) {
      const u = unit(pi, tl);
      const { sums, ss } = dots(u.rows, u.between);
      tail(() => u.end(sums, ss));
      return;
    }
    const first = b.let(tl.mul(R), "u32", "u0");
    const us = Array.from({ length: R }, (_, j) => {
      const raw = j ? first.add(j) : first;
      const ok = units[pi] % R ? raw.lt(units[pi]) : undefined;
      return { ...unit(pi, ok ? b.let(raw.min(units[pi] - 1), "u32", "unit") : j ? b.let(raw, "u32", "unit") : first), ok };
    });
    const { sums, ss } = dots(us.flatMap((u) => u.rows), () => us.forEach((u) => u.between?.()));
    tail(() => {
      let at = 0;
      for (const u of us) {
        u.end(sums.slice(at, at + u.rows.length), ss, u.ok);
        at += u.rows.length;
      }
    });
  };

  // Parts by team range: if T < end0 { part 0 } else if T < end1 { part 1 } ...
  const chain = (pi: number, start: number): void => {
    const end = start + counts[pi];
    const run = () => body(pi, start === 0 ? T : b.let(T.sub(start), "u32", "tl"));
    if (pi === s.parts.length - 1) run();
    else b.if(T.lt(end), run, () => chain(pi + 1, end));
  };
  chain(0, 0);
  return b.build();
}
