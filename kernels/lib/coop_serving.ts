// The serving entries' matmul on cooperative matrices (caps.coop: Vulkan's VK_KHR_cooperative_matrix): y[m, n] =
// sum_k x[m, k] * W[n, k] (+ bias[n]) (+ residual[m, n]) for every entry size of `poot serve`, batch 1 included,
// over bf16 or GGUF block weights, in one summation order per (n, k, weight type) so that a row's bits do not
// depend on the batch it is in (batch invariance), as PTX's serving entries do on mma_matmul.ts.
//
// A workgroup owns `cols` columns of y for up to 16·`mt` rows; its `ks` subgroups split K: slice j (BK values of
// k: 64 for bf16, one span of a block type) belongs to subgroup j mod ks, so a trip is ks consecutive slices, one
// each. W's slices of a trip are staged together (coop_matmul.ts's stagers: bf16 words as stored, blocks decoded to
// ggml's exact values and rounded to bf16; one set, or two alternating with `stages` 2), the next trip's loads
// issued before this one multiplies (bf16 words stay in flight meanwhile). A trip's block loads are issued after the
// barrier of the trip before and decoded as they arrive, before its multiplies (`ahead` 0); or issued before the
// trip before multiplies and decoded after it (1); or two trips ahead (2, the default from two row tiles: README
// "W's loads ahead").
// x comes as mmaPrepX's words (x rounded to bf16, and with `split` the rounding's remainder, also bf16: x = hi + lo
// to about 16 bits) and is loaded as matrices straight from that buffer: small, reread from cache, no staging. A
// row tile is 16 rows of x, its hi and lo parts two matrices and two multiply-adds a step; or with `eights` (split
// only) 8 rows' hi words above the same rows' lo words (mmaPrepX `eights`), one matrix and one multiply-add, so a
// batch of up to 8 rows takes half the multiplies. The buffer must hold whole tiles: `xWordsBytes`. Each subgroup's
// accumulators sum its slices in order (split: hi then lo each 16 values of k); the epilogue adds the ks partials
// in subgroup order (eights: the hi rows' partials, then the lo rows', then the two), then the bias, then the
// residual. Rows past m compute on whatever the padding holds and are never written (a matrix row's products reach
// only its own accumulator row); columns past n read the last column and are not written.
//
// Summation: y[m, n] = ((Σ_{p < ks} acc_p) + bias) + residual, acc_p over p's slices in order; with eights
// ((Σ_p hi_p + Σ_p lo_p) + bias) + residual; each 16-deep step the device's fixed order: nothing depends on m, on
// the row's place in its tile, on mt or on `ahead` (eights changes the sums: an entry set takes one value).
import { type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { elemOf, gridFor, wgIndex } from "./common.ts";
import { blockStager, coopMatmulFits, type StageCx, wordStager } from "./coop_matmul.ts";
import { isQType } from "./dequant.ts";
import type { MatmulShape } from "./matmul.ts";
import { tiledSlice } from "./tiled_matmul.ts";

/**
 * How a serving matmul is cut: K parts (subgroups a workgroup), columns a workgroup (16 or 32), row tiles a
 * workgroup (16 rows: 1..4; with eights 8 rows, as many as keep 8 accumulators: 1..4, or 1..8 of 16 columns), and
 * W's staged slices: one set (two barriers a trip) or two alternating (`stages` 2: one).
 */
export interface CoopServingLayout {
  ks: number;
  cols: number;
  mt: number;
  stages?: 1 | 2;
  /**
   * Block weights: 0, a trip's loads are issued after the barrier of the trip before and decoded as they arrive,
   * before its multiplies; 1, they are issued before the multiplies of the trip before and decoded after them; 2,
   * issued two trips ahead (where a row takes an even number of trips; else 0).
   */
  ahead?: 0 | 1 | 2;
  /**
   * Split x only: each row tile 8 rows' hi and lo parts in one matrix (one multiply-add a step instead of two). It
   * changes the sums, so unlike mt and ahead it must not follow the rows: the caller asks for it or not, for every
   * entry size alike. Off by default: on an H100's Vulkan it took 14% off the 8B Q4_K_M entry at one row and 6% at
   * 8, and added 4% at 32 and 19% at 64 rows (README, "x's two parts in one matrix").
   */
  eights?: boolean;
}

export interface CoopServingShape extends Omit<MatmulShape, "wide" | "tile"> {
  batch: number;
  /** x as hi + lo words (mmaPrepX split): two multiply-adds a step. */
  split: boolean;
  /** ks and cols: the entry's tuning (the same at every entry size: invariance); mt follows the rows. */
  layout?: Partial<CoopServingLayout>;
}

/** K slice of a weight type: 64 for bf16 (k a multiple of 64, else 32), a block type's span. */
const sliceOf = (w: string, k: number) => (isQType(w) ? tiledSlice(w) : k % 64 === 0 ? 64 : 32);
const rowWords = (bk: number) => bk / 2 + 4;
const sharedBytes = (l: Pick<CoopServingLayout, "ks" | "cols" | "stages">, bk: number) => (l.stages ?? 1) * l.ks * l.cols * rowWords(bk) * 4 + l.ks * 256 * 4;

/**
 * The default cut of (n, k, w), never of the rows (the sums' order): as many K parts as divide the slices evenly and
 * fit (8 at most, at least two trips each), 16 columns a workgroup where 32 would leave fewer than 256 workgroups at
 * one row tile. The row tiles and when W's loads are issued (`ahead`) follow the rows: neither changes a sum.
 */
export function coopServingLayout(
  caps: Caps, n: number, k: number, w: string, batch: number, want: Partial<CoopServingLayout> = {}, split = false,
): CoopServingLayout | undefined {
  const bk = sliceOf(w, k), slices = k / bk, limit = Math.min(caps.maxSharedBytes, 48 * 1024);
  const cols = want.cols ?? (Math.ceil(n / 32) >= 256 ? 32 : 16);
  // a row tile: 16 rows, or with eights 8 (their hi and lo parts in one matrix); at most 8 accumulators
  const eights = coopServingEights(split, want), tileRows = eights ? 8 : 16, most = eights ? 8 / (cols / 16) : 4;
  const mt = Math.max(1, Math.min(most, want.mt ?? Math.ceil(batch / tileRows)));
  // W's loads two trips ahead past 16 rows a workgroup (H100 Vulkan, 8B Q4_K_M entry, two calls: 31.1-31.8 against
  // 33.9 ms at 32 rows, 24.8-27.5 against 23.9-24.1 at one): when loads are issued changes no sum, so it may follow
  // the rows (README, "W's loads ahead")
  const stages = want.stages ?? 1, ahead = want.ahead ?? (mt * tileRows > 16 ? 2 : 0);
  const fits = (ks: number) => slices % ks === 0 && ks * caps.subgroupSize <= caps.maxWorkgroupSize && sharedBytes({ ks, cols, stages }, bk) <= limit;
  const l = (ks: number): CoopServingLayout => {
    const out: CoopServingLayout = stages > 1 ? { ks, cols, mt, stages } : { ks, cols, mt };
    if (eights) out.eights = true;
    // blocks only (bf16 words are in flight either way); two trips ahead where a row takes an even number of trips
    // (the loop goes by pairs), else as they arrive
    if (isQType(w) && (ahead === 1 || (ahead === 2 && (slices / ks) % 2 === 0))) out.ahead = ahead;
    return out;
  };
  if (want.ks) return fits(want.ks) ? l(want.ks) : undefined;
  for (const ks of [8, 4, 2, 1]) if (fits(ks) && (slices >= 2 * ks || ks === 1)) return l(ks);
  return undefined;
}

/** Whether the target runs the serving kernel for this weight: coop_matmul.ts's conditions (k a multiple of 32, whole blocks), and a layout fits. */
export function coopServingFits(caps: Caps, w: string, n: number, k: number): boolean {
  return coopMatmulFits(caps, w, n, k) && !!coopServingLayout(caps, n, k, w, 1);
}

/** Whether x's row tiles are 8 rows' hi and lo parts in one matrix (CoopServingLayout.eights): split x, asked for. */
export const coopServingEights = (split: boolean, want: Partial<CoopServingLayout> = {}): boolean => split && !!want.eights;

/**
 * Bytes the x words binding needs: mmaPrepX's [parts, m, k / 2] words, and the rows up to a whole 16-row tile after
 * the last part; with eights, its `eights` words (16 rows for each 8 rows of x: their hi, then their lo words).
 */
export function xWordsBytes(m: number, k: number, split: boolean, eights = false): number {
  return (eights ? Math.ceil(m / 8) * 16 : (split ? 2 : 1) * m + (Math.ceil(m / 16) * 16 - m)) * k * 2;
}

/**
 * Bindings, in order: x u32 words [parts, m, k / 2] (r; xWordsBytes); W bf16 [n, k] or blocks (r); bias f32 [n] (r,
 * when `bias`); residual f32 [m, n] (r, when `residual`; may be the same bytes as y); y f32 [m, n] (w).
 */
export function coopServing(caps: Caps, s: CoopServingShape): Kernel {
  const { n, k, w, batch: m } = s;
  if (!(n >= 1 && k >= 1 && m >= 1)) throw new KernelError(`coop serving matmul: bad shape n=${n} k=${k} batch=${m}`);
  if ((2 * m + 16) * k >= 2 ** 32 || n * k >= 2 ** 32) throw new KernelError("coop serving matmul: indices exceed 32 bits");
  const l = coopMatmulFits(caps, w, n, k) ? coopServingLayout(caps, n, k, w, m, s.layout, s.split) : undefined;
  if (!l || (l.cols !== 16 && l.cols !== 32)) throw new KernelError(`coop serving matmul ${w} n=${n} k=${k}: no layout fits the target (${JSON.stringify(s.layout ?? {})})`);
  const { ks, cols, mt } = l, stages = l.stages ?? 1, BK = sliceOf(w, k), ROW = rowWords(BK), KW = k / 2, fj = cols / 16;
  const sg = caps.subgroupSize, threads = ks * sg, trips = k / BK / ks;
  // a row tile: 16 rows of x's words (split: hi and lo, two matrices), or 8 rows' hi words then their lo words
  const eights = !!l.eights, R = eights ? 8 : 16, parts = s.split && !eights ? 2 : 1;
  const mTiles = Math.ceil(m / (R * mt)), nTiles = Math.ceil(n / cols), total = mTiles * nTiles;
  const lastTile = Math.ceil(m / R) - 1; // the last row tile the x words hold
  const grid = gridFor(caps, total);
  const name = s.name ?? `coop_serving_${w}_n${n}_k${k}_b${m}_ks${ks}c${cols}m${mt}${stages > 1 ? "s2" : ""}${l.ahead ? `a${l.ahead}` : ""}${s.split ? eights ? "_eights" : "_split" : ""}${s.bias ? "_bias" : ""}${s.residual ? "_res" : ""}`;
  const b = new KernelBuilder(name, { workgroup: threads, grid });
  const x = b.buffer("x", "u32", "r");
  const W = b.buffer("w", elemOf(w), "r");
  const bias = s.bias ? b.buffer("bias", "f32", "r") : undefined;
  const res = s.residual ? b.buffer("residual", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");
  const tile = b.shared("tiles", "u32", stages * ks * cols * ROW);
  const out = b.shared("out", "f32", ks * 256);

  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return()); // whole workgroups
  const mIdx = nTiles > 1 ? L.div(nTiles) : L, nIdx = nTiles > 1 ? L.mod(nTiles) : u32(0);
  const m0 = b.let(mIdx.mul(R * mt), "u32", "m0"), n0 = b.let(nIdx.mul(cols), "u32", "n0");
  const t = b.lid.x, p = b.builtin("sgid");

  const sc: StageCx = { b, t, threads, BK, ROW, tile };
  const ws = isQType(w) ? blockStager(sc, W, w, cols, n0, n, k, 0, ks, (l.ahead ?? 0) > 0) : wordStager(sc, W, cols, n0, n, k, 0, ks);
  // x's row tiles (clamped to the last the words hold): the first word of the tile's 16 rows (split: the hi part's)
  const xRows = Array.from({ length: mt }, (_, i) => b.let(mIdx.mul(mt).add(i).min(lastTile).mul(16 * KW), "u32", "xr"));
  const loWords = m * KW;

  const acc = Array.from({ length: mt * fj }, () => b.coopMat("acc"));
  // x's matrices of the first `hoist` 16-deep steps are loaded before the trip's barrier (in flight while W is
  // stored and the workgroup meets), the later steps' into the same registers after their use
  const steps = BK / 16, hoist = Math.min(steps, Math.max(1, Math.floor(8 / (mt * parts))));
  const A = Array.from({ length: hoist }, () => Array.from({ length: mt * parts }, () => b.coopMat("a", "bf16")));
  const B = Array.from({ length: fj }, () => b.coopMat("b", "bf16"));
  const bRow = b.let(p.mul(cols * ROW), "u32", "br");
  const loadA = (kw: Val, kk: number) => {
    const at = kk ? kw.add(8 * kk) : kw;
    for (let i = 0; i < mt; i++) for (let h = 0; h < parts; h++) b.coopLoad(A[kk % hoist][i * parts + h], x, h ? xRows[i].add(at).add(loWords) : xRows[i].add(at), KW);
  };
  // ahead 0: trip t issues trip t + 1's loads after its barrier, decoded as they arrive (blocks; bf16 words stay in
  // flight), and stores them at the top of trip t + 1. ahead 1 / 2: W's slices of trip 0 (and 1) are loaded first;
  // trip t issues the loads of trip t + ahead (into register set t mod ahead) before its multiplies and decodes and
  // stores trip t + 1's after them.
  const ahead = l.ahead ?? 0, late = ahead > 0, by = Math.max(1, ahead);
  ws.load(u32(0));
  if (late) ws.store();
  for (let a = 1; a < ahead; a++) ws.load(u32(a * ks * BK), a);
  b.for(u32(0), u32(trips), by, (t0) => {
    for (let u = 0; u < by; u++) {
      const trip = u ? b.let(t0.add(u), "u32", "trip") : t0;
      const k0 = b.let(trip.mul(ks * BK), "u32", "k0");
      const kw = b.let(k0.add(p.mul(BK)).shr(1), "u32", "kw"); // this subgroup's slice, in words
      for (let kk = 0; kk < hoist; kk++) loadA(kw, kk);
      // two stages: odd trips' slices go ks·cols rows further down, and the trip before's reads are behind this barrier
      const down = stages > 1 && !late ? b.let(trip.and(1).mul(ks * cols), "u32", "sd") : undefined;
      if (!late) ws.store(down);
      b.barrier();
      if (trips > by) b.if(trip.add(by).lt(trips), () => ws.load(k0.add(by * ks * BK), u));
      const bAt = down ? b.let(bRow.add(down.mul(ROW)), "u32", "ba") : stages > 1 ? b.let(bRow.add(trip.and(1).mul(ks * cols * ROW)), "u32", "ba") : bRow;
      for (let kk = 0; kk < steps; kk++) {
        if (kk >= hoist) loadA(kw, kk);
        B.forEach((bb, j) => b.coopLoad(bb, tile, bAt.add(16 * j * ROW + 8 * kk), ROW));
        // split: hi then lo, x = hi + lo enters each 16-deep step in that order
        for (let i = 0; i < mt; i++) for (let j = 0; j < fj; j++) for (let h = 0; h < parts; h++) b.coopMulAdd(acc[i * fj + j], A[kk % hoist][i * parts + h], B[j]);
      }
      if (!late) {
        if (stages === 1) b.barrier(); // the next trip overwrites the tiles
      } else if (trips > 1) {
        // one stage: every subgroup's reads of it are done before it is overwritten; two: the other stage was read
        // last trip, before this trip's barrier
        if (stages === 1) b.barrier();
        b.if(trip.add(1).lt(trips), () => ws.store(stages > 1 ? b.let(trip.add(1).and(1).mul(ks * cols), "u32", "sd") : undefined, (u + 1) % ahead));
      }
    }
  });

  // epilogue: one accumulator at a time, every part's through its scratch, summed in part order (eights: the hi
  // rows' sums, then the lo rows' sums, then the two added)
  const scratch = b.let(p.mul(256), "u32", "so"), outs = R * 16;
  for (let i = 0; i < mt; i++) {
    for (let j = 0; j < fj; j++) {
      b.coopStore(acc[i * fj + j], out, scratch, 16);
      b.barrier();
      for (let r = 0; r * threads < outs; r++) {
        const e = r ? t.add(r * threads) : t;
        const row = b.let(m0.add(R * i).add(e.shr(4)), "u32", "ym");
        const col = b.let(n0.add(16 * j).add(e.and(15)), "u32", "yn");
        const partSum = (at: Val) => {
          let v = b.sload(out, at);
          for (let q = 1; q < ks; q++) v = v.add(b.sload(out, at.add(q * 256)));
          return v;
        };
        const emit = () => {
          let v = partSum(e);
          if (eights) v = v.add(partSum(e.add(128)));
          if (bias) v = v.add(b.load(bias, col));
          const at = b.let(row.mul(n).add(col), "u32", "yi");
          if (res) v = v.add(b.load(res, at));
          b.store(y, at, v);
        };
        const inCol = n % cols !== 0;
        const cond = (e0: ReturnType<typeof row.lt>) => (inCol ? e0.and(col.lt(n)) : e0);
        b.if(cond(row.lt(m)), () => ((r + 1) * threads > outs ? b.if(e.lt(outs), emit) : emit()));
      }
      b.barrier(); // the next accumulator overwrites the scratch
    }
  }
  return b.build();
}
