// How a decode gemv (gemv.ts) lays out its work: the tuning a shape gets (lanes per team, row units per team, the
// k loop's unroll, loads in flight), measured on the H200 per weight type and path (float weights, x quantized in
// the team, x prepared by xq_prep.ts), and the team and grid that follow from it.
import type { Caps } from "../target.ts";
import { gridFor, type Team, team, vecWidth } from "./common.ts";
import { isQType, QLAYOUT, type QType } from "./dequant.ts";
import type { GemvPart, GemvShape } from "./gemv.ts";

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
export function xqAhead(w: QType, rows: number, trips: number, unrolled: boolean): number {
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
export interface GemvLayout {
  tune: GemvTune;
  /** Row units per team (block weights; 1 for float weights). */
  R: number;
  /** Rows per unit of a float "dot" part (1 or 2). */
  rowsPer: number;
  /** Units per part. */
  units: number[];
  /** Teams per part. */
  counts: number[];
  /** Teams in all. */
  total: number;
  t: Team;
  grid: [number, number, number];
}

/** The layout `s` takes on `caps` (its own tuning over gemvTune's). */
export function layout(caps: Caps, s: GemvShape): GemvLayout {
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
