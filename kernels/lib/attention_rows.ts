// The K/V rows of an attention team's loop trips (attention.ts): which rows a trip reads, and how they reach
// registers. A team's lanes form G position groups of lpp lanes; group gi takes positions p0 + gi + j·G of the
// trip at p0 (j < U), each lane dims d0 .. d0 + nd of the row. Every lane runs the same trips (shuffles need the
// whole subgroup), so a position past the chunk's end reads a row of the chunk and is masked (`inRange`).
//
// Loads go out at the top of their own trip, or, with `prefetch` (AttentionShape.prefetch), one trip early: trip
// 0's before the loop (an empty chunk loads nothing), each trip's successor's at its top, carried across the trip
// in registers (16-bit K/V as their raw words: half the registers, and the conversion to f32 is exact either
// way). The same rows feed the same operations, so the two give the same bits. Off by default: on the H200
// (session 9) the 8B serving entry took 9.45 against 9.16 ms at 32 rows (5.63 against 5.79 at one), the 1B 2.56
// against 2.45 (`bench/serve_kernels.ts --tune default,pf`); the decode step at pos 1024 (`bench/kernels.ts --wall`)
// 1B ptx 0.924 against 0.920 ms, qwen2.5-0.5b ptx 0.725 against 0.683, Vulkan 0.940 against 0.959 (1B even). The
// carried registers cost occupancy (75 against 56 at the 8B's 32-row partial).
import { type Buffer, f32, type KernelBuilder, u32, un, type Val } from "../ir.ts";
import type { FType } from "./common.ts";

/** Loads a row slice of this lane (nd values at d0, vw a vector at a time; masked past hd when not exact). */
export type RowLoad = (buf: Buffer, at: Val, vw: number) => Val[];

export function rowLoader(b: KernelBuilder, o: { nd: number; d0: Val; hd: number; exact: boolean }): RowLoad {
  const { nd, d0, hd, exact } = o;
  return (buf, at, vw) => {
    const xs: Val[] = [];
    for (let j = 0; j < nd; j += vw) {
      if (vw > 1) xs.push(...b.loadv(buf, at.add(d0).add(j), vw));
      else {
        const v = b.load(buf, at.add(exact ? d0.add(j) : d0.add(j).min(hd - 1)));
        xs.push(exact ? v : b.let(d0.add(j).lt(hd).select(v, f32(0)), "f32", "x"));
      }
    }
    return xs;
  };
}

export interface TripRows {
  /** Per position j of the trip: whether it lies before the chunk's end (undefined: always). */
  subs: { inRange?: Val }[];
  /** K and V values of each position (nd f32 each). */
  ks: Val[][];
  vs: Val[][];
  /** Call at the end of the trip's body (hands the prefetched rows over). */
  done(): void;
}

export interface KvTripShape {
  K: Buffer;
  V: Buffer;
  kv: FType;
  load: RowLoad;
  /** Pool row of a logical position (the identity, or through the block table). */
  physRow: (p: Val) => Val;
  kvHeads: number;
  kvh: Val;
  hd: number;
  G: number;
  U: number;
  gi: Val;
  nd: number;
  d0: Val;
  vk: number;
  exact: boolean;
  start: Val;
  stop: Val;
  prefetch: boolean;
}

/**
 * Emits what comes before the loop (the prefetch's first loads) and returns the rows of the trip at p0: its first
 * `slots` positions of each group (default U; a tail trip's fewer, not with prefetch, whose carried rows are U).
 */
export function kvTrips(b: KernelBuilder, o: KvTripShape): (p0: Val, slots?: number) => TripRows {
  const { K, V, kv, load, physRow, kvHeads, kvh, hd, G, U, gi, nd, d0, vk, start, stop } = o;
  const posOf = (p0: Val, j: number) => (G > 1 ? p0.add(gi).add(j * G) : j ? p0.add(j) : p0);
  // the rows of a trip at p0; a position past stop reads `fallback` (the trip's first, or the chunk's first)
  const rowsAt = (p0: Val, fallback: Val, slots = U) => Array.from({ length: slots }, (_, j) => {
    const pj = posOf(p0, j);
    const inRange = G > 1 || j > 0 || fallback !== p0 ? b.let(pj.lt(stop), "bool", "in") : undefined;
    const p = inRange ? b.let(inRange.select(pj, fallback), "u32", "p") : p0;
    return { inRange, kb: b.let(physRow(p).mul(kvHeads).add(kvh).mul(hd), "u32", "kb") };
  });
  if (!o.prefetch) {
    return (p0, slots) => {
      const subs = rowsAt(p0, p0, slots);
      return { subs, ks: subs.map((x) => load(K, x.kb, vk)), vs: subs.map((x) => load(V, x.kb, vk)), done: () => {} };
    };
  }
  const raw = kv !== "f32" && o.exact && vk >= 2;
  const fetch = (buf: Buffer, at: Val): Val[] => {
    if (!raw) return load(buf, at, vk);
    const words: Val[] = [];
    for (let j = 0; j < nd; j += vk) words.push(...b.loadv(buf, at.add(d0).add(j).shr(1), vk / 2, "u32"));
    return words;
  };
  const widen = (words: Val[]): Val[] => {
    if (!raw) return words;
    const bits = kv === "bf16" ? "bf16bits" : "f16bits";
    return words.flatMap((w) => [un(bits, w.and(0xffff)), un(bits, w.shr(16))]);
  };
  const carried = [K, V].map(() =>
    Array.from({ length: U }, () => Array.from({ length: raw ? nd / 2 : nd }, () => (raw ? b.let(u32(0), "u32", "kvw") : b.let(f32(0), "f32", "kv"))))
  );
  const fill = (rows: { kb: Val }[]) => [K, V].map((buf) => rows.map((x) => fetch(buf, x.kb)));
  b.if(start.lt(stop), () => fill(rowsAt(start, start)).forEach((r, i) => r.forEach((row, j) => row.forEach((v, e) => b.set(carried[i][j][e], v)))));
  return (p0) => {
    const subs = Array.from({ length: U }, (_, j) => ({ inRange: G > 1 || j > 0 ? b.let(posOf(p0, j).lt(stop), "bool", "in") : undefined }));
    // this trip's rows out of the carried registers, the next trip's loads issued; they take the carried
    // registers at the end of the trip
    const [ks, vs] = carried.map((rows, i) => rows.map((r) => widen(r).map((v) => b.let(v, "f32", i ? "vc" : "kc"))));
    const next = fill(rowsAt(p0.add(G * U), start));
    return { subs, ks, vs, done: () => next.forEach((r, i) => r.forEach((row, j) => row.forEach((v, e) => b.set(carried[i][j][e], v)))) };
  };
}
