// Tensor-core matmul: y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]) (+ residual[m, n]) on warp MMA tiles
// (kernels/ir_data.ts MmaStmt, m16n8k16, f32 accumulate), for targets with `caps.mma` and bf16/f16 weights, or GGUF
// blocks (`blocks`: each lane decodes its column's chunks into the operands, kernels/lib/mma_blocks.ts blockLanes).
//
// Layout. A warp owns `mt` tiles of 16 rows by `nt` tiles of 8 columns and walks K in chunks of 32. Operands go
// straight from global memory to registers (with `stages`, through a per-lane cp.async pipeline in shared memory,
// each lane reading back only its own copies), never shared between lanes: each lane loads 16 contiguous bytes of a
// W row (8 values) and 8 contiguous f32 of two x rows per chunk. That permutes k inside a chunk (lane t's 8
// values feed the MMA's k slots 2t, 2t+1, 2t+8, 2t+9 of two k16 steps), the same permutation on both sides,
// so the sum is unchanged while every load is one 16-byte vector. `ks` warps of a workgroup split the chunks
// round-robin and meet in shared memory at the end, summed in a fixed order. The lowering passes x `prepared`:
// mmaPrepX turns it into MMA words once, so warps load words instead of rounding x again per column group.
//
// Precision. x is f32 here; the MMA takes 16-bit inputs. With `split` (the default) x goes in as hi + lo, both
// 16-bit (two MMAs per tile), which keeps ~16 bits of x's mantissa: close to the f32 FMA path at twice the
// tensor work, which decode and prefill at these shapes can afford. Without it x is rounded once, as cuBLAS'
// bf16 GEMM sees it.
//
// Batch invariance (issue 14): a row's result depends on its x row, W, and the K schedule (chunk size, `ks`,
// the split), never on how many rows there are. `ks` is a function of (n, k) alone; `mt`/`nt` only choose which
// warp computes a row (and `unroll` only the loop's shape). Rows past m read the last row (clamped) and are not
// written; columns past n likewise.
import { type Buffer, f32, type Kernel, KernelBuilder, KernelError, type Shared, u32, un, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, wgIndex } from "./common.ts";
import { evalEw, type EwExpr, type EwInput } from "./elementwise.ts";
import { QLAYOUT, type QType } from "./dequant.ts";
import { blockLanes } from "./mma_blocks.ts";

/** What every tensor-core matmul takes (this file's and kernels/lib/mma_staged.ts's), before its tiling. */
export interface MmaOperands {
  /** Output features (rows of W). */
  n: number;
  /** Input features. */
  k: number;
  /** Rows of x. */
  batch: number;
  w: "bf16" | "f16";
  bias?: boolean;
  residual?: boolean;
  name?: string;
  /** x as hi + lo 16-bit parts (two MMAs); default true. */
  split?: boolean;
}

export interface MmaMatmulShape extends MmaOperands {
  /** Warps splitting K (default mmaKSplit(n, k)); part of every row's summation order. */
  ks?: number;
  /** 16-row tiles per warp (default by batch). */
  mt?: number;
  /** 8-column tiles per warp (default by batch). */
  nt?: number;
  /**
   * K chunks per main-loop trip (an unroll: more loads in flight per warp); default 1. Over blocks: trips whose
   * loads are all issued before the first one's decode.
   */
  unroll?: number;
  /**
   * Warps of a workgroup along N and along M (default 4 / ks and 1): warps that share columns or rows share
   * their W or x loads through L1, cutting L2 traffic at large batches. Changes no row's summation order.
   */
  nw?: number;
  mw?: number;
  /**
   * x arrives as MMA words made once by mmaPrepX (binding 0 is u32 [parts, batch, k / 2]) instead of f32: the
   * main loop then only loads, where otherwise every warp of a column group rounds and splits x again.
   */
  prepared?: boolean;
  /**
   * (prepared x, caps.staging) Each lane brings its W and x words for the chunk `stages - 1` trips ahead into
   * its own shared-memory slots by cp.async, instead of into registers at the top of the trip: the loads of later
   * chunks fly while the warp multiplies this one, without holding registers. A lane reads back only what it
   * copied, so no barrier is needed. The same words meet the same MMAs in the same order: a row's bits are those
   * of the direct loads. Default 0 (direct loads).
   */
  stages?: number;
  /**
   * W holds GGUF blocks of this type (w must be "bf16"; kernels/lib/mma_blocks.ts blockLanes): each lane decodes one
   * chunk of its column a trip to ggml's exact values, rounded to bf16, and feeds each 8-value run to the MMAs as a
   * bf16 row's 16 bytes; a trip is 4 chunks of k (`ks` warps split the trips as they split chunks). Needs prepared x,
   * no stages.
   */
  blocks?: QType;
}

/**
 * x f32 [m, k] -> MMA operand words u32 [parts, m, k / 2] (part 0: x rounded to `ab` in pairs, low half = the
 * even k; part 1 with split: the rounding's remainder, rounded likewise), for mmaMatmul's `prepared` input.
 * `ew`: x is that elementwise expression (kernels/lib/elementwise.ts, evaluated as its kernel does) of f32 inputs
 * of x's shape, computed here instead of read.
 * `eights` (with split; coop_serving.ts): the parts interleaved by 8-row groups instead, [ceil(m / 8), 2, 8, k / 2]:
 * group g's hi rows, then its lo rows, so that one 16-row matrix holds both parts of 8 rows.
 * Bindings: x f32 [m, k] (r) (ew: its inputs, f32 [m, k] (r) each); xw u32 [parts * m * k / 2] (w; eights: the
 * groups' 16 rows each, the rows past m unwritten). k must be a multiple of 8.
 */
export function mmaPrepX(caps: Caps, s: { m: number; k: number; ab: "bf16" | "f16"; split?: boolean; eights?: boolean; ew?: { inputs: EwInput[]; expr: EwExpr } }): Kernel {
  const { m, k, ab } = s, split = s.split ?? true, eights = split && !!s.eights;
  if (!(k % 8 === 0 && m >= 1)) throw new KernelError(`mma prep: k=${k} is not a multiple of 8`);
  if ((eights ? m + 16 : m) * k >= 2 ** 32) throw new KernelError("mma prep: indices exceed 32 bits");
  if (s.ew?.inputs.some((x) => x.type !== "f32" || (x.len ?? m * k) !== m * k)) throw new KernelError("mma prep: an elementwise x reads f32 inputs of x's shape only");
  const items = (m * k) / 8, wg = Math.min(256, caps.maxWorkgroupSize);
  const grid = gridFor(caps, Math.ceil(items / wg));
  const b = new KernelBuilder(`mma_prep_${ab}_m${m}_k${k}${split ? eights ? "_eights" : "" : "_nosplit"}${s.ew ? `_ew${s.ew.inputs.length}` : ""}`, { workgroup: wg, grid });
  const xs = s.ew ? s.ew.inputs.map((_, j) => b.buffer(`in${j}`, "f32", "r")) : [b.buffer("x", "f32", "r")];
  const xw = b.buffer("xw", "u32", "w");
  const i = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "i");
  b.if(i.lt(items), () => {
    const loaded = xs.map((x) => [...b.loadv(x, i.mul(8), 4), ...b.loadv(x, i.mul(8).add(4), 4)]);
    const v = s.ew ? loaded[0].map((_, e) => b.let(evalEw(s.ew!.expr, loaded.map((l) => l[e])), "f32", "xe")) : loaded[0];
    const hi = [0, 2, 4, 6].map((j) => b.let(b.pack2(ab, v[j], v[j + 1]), "u32", "hw"));
    // eights: row r's words go to row (r / 8) * 16 + r % 8 of the groups' rows, its lo words 8 rows further
    const per = k / 8, r = eights ? b.let(i.div(per), "u32", "r") : undefined;
    const at = r ? b.let(r.shr(3).mul(16).add(r.and(7)).mul(k / 2).add(i.sub(r.mul(per)).mul(4)), "u32", "at") : i.mul(4);
    b.storev(xw, at, hi);
    if (split) {
      const half = (w: Val, upper: boolean) => un(ab === "bf16" ? "bf16bits" : "f16bits", upper ? w.shr(16) : w.and(0xffff));
      const lo = [0, 2, 4, 6].map((j, q) => b.pack2(ab, v[j].sub(half(hi[q], false)), v[j + 1].sub(half(hi[q], true))));
      b.storev(xw, at.add(eights ? 4 * k : (m * k) / 2), lo);
    }
  });
  return b.build();
}

/**
 * Warps splitting K: enough (column group, K slice) warps to keep a large GPU's loads in flight for a memory-
 * bound small batch, at least two chunks of 32 per warp. A function of (n, k) only, so of no row count.
 */
export function mmaKSplit(n: number, k: number): number {
  let ks = 1;
  while (ks < 8 && Math.ceil(n / 16) * ks * 2 <= 1024 && Math.floor(k / 32) >= ks * 4) ks *= 2;
  return ks;
}

/**
 * K split for a row count that is small at times (the server's entries, batch 1 included): ~8192 warps for a
 * memory-bound step, up to 16 warps per column group, at least two chunks each. On the H200 a 1-row 8192 x
 * 2048 matmul took 13.9 µs with 16 where mmaKSplit's 2 took 35.9 µs. Also a function of (n, k) only.
 */
export function mmaKSplitWide(n: number, k: number): number {
  let ks = 1;
  while (ks < 16 && Math.ceil(n / 16) * ks < 8192 && Math.floor(k / 32) >= ks * 4) ks *= 2;
  return ks;
}

/** Tiles and unroll of one warp at a range of row counts (MmaMatmulShape's; mt follows the rows). */
export interface MmaWarpTiles {
  nt: number;
  /** 16-row tiles per warp past 16 rows (default 2). */
  mt?: number;
  unroll: number;
  /** Warps along N per workgroup (default max(1, 4 / ks)). */
  nw?: number;
  /** cp.async pipeline stages (MmaMatmulShape.stages; default 0, direct loads). */
  stages?: number;
}

/**
 * How the server's entries lay out their MMA matmuls (kernels/lower/matmul.ts, mma "all"): `ks` a function of (n, k)
 * alone ("auto", the default: 16 warps for outputs up to 4096 wide, 8 past that; "wide": mmaKSplitWide; a
 * number: that split), halved while a warp would get fewer than four chunks; then tiles by the entry's rows:
 * `small` up to 16 rows (one 16-row tile), `big` past that (two). Only ks is part of a row's summation order,
 * so the tiles may differ by rows and by shape (batch invariance holds across them); missing ones are the
 * measured defaults (mmaServingTiles).
 */
export interface MmaServingTune {
  ks?: "auto" | "wide" | number;
  /** Past 16 rows, the default tiles through the cp.async pipeline (default true; false: session 8's direct loads). */
  pipeline?: boolean;
  small?: MmaWarpTiles;
  big?: MmaWarpTiles;
}

/**
 * The K split of a serving matmul: a function of (n, k) and the tune only, never of the rows. Measured on the
 * H200 (bench/mma.ts --serve, 8B shapes, µs at m = 1 / 32 with each split's best tiles): 14336 x 4096 34.0 / 48.9
 * at ks 8 against 36.0 / 58.9 at 16; the 128256 x 4096 head 270 / 390 at 8 against 321 / 516 at mmaKSplitWide's
 * 2; 4096-wide (q/o, down) and 1024-wide (k/v) outputs best at 16.
 */
export function mmaServingKSplit(n: number, k: number, tune: MmaServingTune = {}, blocks?: QType): number {
  const want = tune.ks ?? "auto";
  if (want === "wide" && !blocks) return mmaKSplitWide(n, k);
  // blocks: at most 8 (ptxas spilled q4_k's and q6_k's 16-warp workgroups), at least two trips of 4 chunks a warp
  let ks = want === "auto" || want === "wide" ? (n <= 4096 && !blocks ? 16 : 8) : Math.min(16, 2 ** Math.floor(Math.log2(Math.max(1, want))));
  const per = blocks ? 4 * QLAYOUT[blocks].per : 32, least = blocks ? 2 : 4;
  while (ks > 1 && Math.floor(k / per) < ks * least) ks /= 2;
  return ks;
}

/**
 * The measured tiles of a serving matmul (H200, bench/mma.ts --serve at the 8B shapes): up to 16 rows, two
 * 8-column tiles per warp and two chunks a trip (q/o 15.1 -> 11.3 µs at one row, down 46.8 -> 32.2, gate/up
 * 38.3 -> 34.0 at ks 8). Wider tiles mean fewer workgroups, and below ~128 of them the GPU idles (k/v, 1024
 * wide: one tile at one row 6.5 µs against two 7.3), so the wide tiles start at 2048 outputs.
 *
 * Past 16 rows every warp of a column group reads the same x words, so x's traffic (two parts, 32 rows) is
 * twice W's at two tiles a warp, and wider tiles win while registers last; the cp.async pipeline
 * (MmaMatmulShape.stages) keeps the loads in flight without registers, so they last to eight tiles. Session 9,
 * `bench/mma.ts --serve llama-3-8b,llama-3.2-1b --m 1,32 --ks 0`, µs at 32 rows against the direct loads' best:
 * - ks 8 (outputs past 4096): eight tiles, 3 stages where n·k >= 32M (8B gate/up 45.8 against 48.8; the
 *   heads 321.6 against 387.2 and 177.2 against 200.0); the 1B's gate/up (16M) even (14.9 against 14.5): direct.
 * - ks 16: 2 stages; four tiles where n·k >= 16M (8B q/o 18.8 against 19.7, down 52.0 against 57.2; 1B down
 *   21.6 against 28.7), else two (8B k/v 9.6 against 10.9, 1B q/o 7.9 against 8.4, 1B k/v 5.8 against 6.3).
 * At one row the pipeline lost everywhere (8B gate/up 68.8 against 33.1 µs): fewer warps fit beside its stages.
 * Whole serving entry at 32 rows (`bench/serve_kernels.ts --tune default,direct`, three calls): 8B 9.38 / 9.16 /
 * 9.21 ms against 9.995 / - / 9.825 with the direct loads; 1B 2.44 / 2.45 / 2.46 against 2.74 / - / 2.72.
 */
export function mmaServingTiles(n: number, m: number, k = 0, ks = n <= 4096 ? 16 : 8, pipeline = true): MmaWarpTiles {
  if (m <= 16) return n >= 2048 ? { nt: 2, unroll: 2 } : { nt: 1, unroll: 4 };
  if (!pipeline) return n >= 4096 ? { nt: 4, unroll: 1 } : { nt: 2, unroll: 1 };
  if (ks >= 16) return { nt: n * k >= 2 ** 24 ? 4 : 2, unroll: 1, stages: 2 };
  if (n * k >= 2 ** 25) return { nt: 8, unroll: 1, stages: 3 };
  return n >= 4096 ? { nt: 4, unroll: 1 } : { nt: 2, unroll: 1 };
}

/**
 * The tiles of a serving matmul over GGUF blocks (no pipeline: the blocks' loads are not 16-byte pieces). Past 16
 * rows the x words a lane loads (two row tiles, two parts) outweigh its W chunks, so four column tiles share them.
 * H100, 8B Q4_K_M serving entries (bench/serve_kernels.ts --dtype q4_k_m --tune), ms at 1 / 32 / 160 rows: 2 x 2
 * tiles 5.63 / 13.13 / 64.79, 2 x 4 5.57 / 11.31 / 42.29; four row tiles lost (4 x 2: 13.14 / 71.21, 8 x 2: 26.5
 * / 81.0: 150+ registers). At one row one or two column tiles, unroll 1 or 2 and ks 4 to 16 gave 5.57 - 6.7 ms, four
 * tiles 6.9 - 7.1 (session 40; 1 x 1 and 1 x 2 at ks 8 not measured).
 * The 32-value types past 32 rows keep two: ptxas held q8_0's and q4_0's 2 x 4 tiles to 128 registers and spilled.
 */
export function mmaBlockTiles(n: number, m: number, t: QType): MmaWarpTiles {
  if (m <= 16) return n >= 2048 ? { nt: 2, unroll: 1 } : { nt: 1, unroll: 2 };
  return { nt: m > 32 && QLAYOUT[t].elems === 32 ? 2 : 4, unroll: 1 };
}

/** The layout of a serving matmul of m rows: the tune's fields, else mmaServingKSplit's and mmaServingTiles'. */
export function mmaServingLayout(n: number, k: number, m: number, tune: MmaServingTune = {}, blocks?: QType): Pick<MmaMatmulShape, "ks" | "mt" | "nt" | "unroll" | "nw" | "stages"> {
  const ks = mmaServingKSplit(n, k, tune, blocks);
  const t = (m <= 16 ? tune.small : tune.big) ?? (blocks ? mmaBlockTiles(n, m, blocks) : mmaServingTiles(n, m, k, ks, tune.pipeline ?? true));
  return {
    ks, mt: m <= 16 ? 1 : t.mt ?? 2, nt: t.nt, unroll: t.unroll, ...(t.nw ? { nw: Math.min(t.nw, Math.max(1, Math.floor(32 / ks))) } : {}),
    ...(t.stages ? { stages: t.stages } : {}),
  };
}

/** Whether the MMA matmul takes this shape on this target (`blocks`: W of that block type, w bf16). */
export function mmaMatmulFits(caps: Caps, w: string, n: number, k: number, blocks?: QType): boolean {
  return !!caps.mma && caps.subgroups && caps.subgroupSize === 32 && (w === "bf16" || (w === "f16" && !blocks)) &&
    k % 8 === 0 && k >= 32 && n >= 8 && (!blocks || k % QLAYOUT[blocks].elems === 0);
}

/** A shape's layout with the defaults filled in, checked; `pieces`: the 16-byte loads of a lane per chunk. */
function mmaLayout(caps: Caps, s: MmaMatmulShape) {
  const { n, k, batch: m } = s;
  const split = s.split ?? true;
  const ks = s.ks ?? mmaKSplit(n, k);
  // measured on the H200 (bench/mma.ts): 2 x 4 tiles per warp beat 1 x 2 .. 8 x 2 from 32 to 256 rows, and
  // beat workgroups of warps along M (nw/mw) by 1.3-4x
  // 1 x 1 at one row (more warps in flight: 5.2 against 6.5 µs for 2048 x 2048 at ks 16)
  // A 16-warp K split keeps 2 x 2 tiles and no unroll: 16 warps of ~128 registers would fill the register file.
  // From 256 rows (the Driver's 512-row prefill chunks) wider warp tiles win (bench/mma.ts on the H200, session
  // 5, m = 512): 4 x 8 at n <= 4096 and k <= 8192 (2048 x 2048: 38.2 against 53.9 µs; 4096 x 4096: 119.5 against
  // 168.3), 2 x 8 past that (14336 x 4096: 421 against 686 µs; 4096 x 14336: 414 against 615); n >= 2048 only
  // (narrower outputs were not measured).
  const wide = m >= 256 && ks < 16 && n >= 2048;
  const mt = s.mt ?? (m <= 16 ? 1 : wide ? (n <= 4096 && k <= 8192 ? 4 : 2) : 2);
  const nt = s.nt ?? (m <= 16 ? 1 : ks >= 16 ? 2 : wide ? 8 : 4);
  // two chunks a trip keep more loads in flight: 25% faster at 32 rows on the H200; unmeasured past 64
  const unroll = s.unroll ?? (m > 16 && m <= 64 && ks < 16 ? 2 : 1);
  const nw = s.nw ?? Math.max(1, Math.floor(4 / ks)); // warps along N in a workgroup
  const mw = s.mw ?? 1; // warps along M
  if (!(Number.isInteger(nw) && Number.isInteger(mw) && nw >= 1 && mw >= 1 && ks * nw * mw <= 32)) {
    throw new KernelError(`mma matmul: ${ks} x ${nw} x ${mw} warps per workgroup`);
  }
  // blocks: a "chunk" here is a trip of 4 chunks of the block type (its last one may be partial)
  const chunks = s.blocks ? Math.ceil(k / (4 * QLAYOUT[s.blocks].per)) : Math.floor(k / 32);
  if (![1, 2, 4, 8, 16].includes(ks) || chunks < ks) throw new KernelError(`mma matmul: K split ${ks} over ${chunks} chunks`);
  if (!(mt >= 1 && mt <= 8 && nt >= 1 && nt <= 8)) throw new KernelError(`mma matmul: tiles ${mt}x${nt}`);
  const stages = s.stages ?? 0;
  if (s.blocks && (stages || !s.prepared)) throw new KernelError("mma matmul: block weights need prepared x and no stages");
  if (stages && !(Number.isInteger(stages) && stages >= 2 && stages <= 6 && s.prepared && caps.staging)) {
    throw new KernelError(`mma matmul: a ${stages}-stage pipeline needs prepared x and caps.staging (2..6 stages)`);
  }
  const bM = Math.ceil(m / (16 * mt * mw)), bN = Math.ceil(n / (8 * nt * nw));
  // `pad[i]`: tile i's rows 8..15 are all past the batch (a single row group, m <= 16i + 8: batch 1..8 in one
  // tile), so their A words are zeros instead of loads of the last row. Those rows are never stored and an MMA
  // row depends only on its own A row, so the stored rows' bits are the same either way.
  const pad = Array.from({ length: mt }, (_, i) => bM === 1 && mw === 1 && 16 * i + 8 >= m);
  const pieces = nt + pad.reduce((a, p) => a + (p ? 1 : 2), 0) * (split ? 2 : 1);
  return { split, ks, mt, nt, unroll, nw, mw, stages, bM, bN, pad, pieces };
}

/** Bytes of shared memory mmaMatmul's kernel for this shape takes (the K split's sums and the pipeline's stages). */
export function mmaSharedBytes(caps: Caps, s: MmaMatmulShape): number {
  const { ks, mt, nt, nw, mw, stages, pieces } = mmaLayout(caps, s);
  const red = ks > 1 ? (ks - 1) * nw * mw * mt * nt * 4 : 0, pipe = ks * nw * mw * stages * pieces * 4;
  return 4 * 32 * (stages ? Math.max(red, pipe) : red);
}

/**
 * Bindings, in order: x f32 [batch, k] (r); W [n, k] bf16/f16 (r); bias f32 [n] (r, when `bias`); residual f32
 * [batch, n] (r, when `residual`; may be y's bytes); y f32 [batch, n] (w).
 */
export function mmaMatmul(caps: Caps, s: MmaMatmulShape): Kernel {
  const { n, k, batch: m, w } = s;
  if (!mmaMatmulFits(caps, w, n, k, s.blocks)) {
    throw new KernelError(`mma matmul: needs caps.mma, 32-lane subgroups, bf16/f16 weights (bf16 over blocks), k a multiple of 8 (>= 32) and of the blocks, n >= 8; got ${w}${s.blocks ? ` (${s.blocks})` : ""} n=${n} k=${k}`);
  }
  if (!(Number.isInteger(m) && m >= 1)) throw new KernelError(`mma matmul: bad batch ${m}`);
  if (n * k >= 2 ** 32 || m * Math.max(n, k) >= 2 ** 32) throw new KernelError("mma matmul: indices exceed 32 bits");
  const { split, ks, mt, nt, unroll, nw, mw, stages, bM, bN, pad, pieces: perChunk } = mmaLayout(caps, s);
  const total = bM * bN;
  const grid = gridFor(caps, total);
  const name = s.name ?? `mma_matmul_${s.blocks ?? w}_n${n}_k${k}_b${m}_ks${ks}_${mt}x${nt}${nw !== Math.max(1, Math.floor(4 / ks)) || mw > 1 ? `_w${nw}x${mw}` : ""}${unroll > 1 ? `_u${unroll}` : ""}${stages ? `_p${stages}` : ""}${s.prepared ? "_xw" : ""}${split ? "" : "_nosplit"}${s.bias ? "_bias" : ""}${s.residual ? "_res" : ""}`;
  const b = new KernelBuilder(name, { workgroup: 32 * ks * nw * mw, grid });
  const prepared = s.prepared ?? false;
  const x = prepared ? b.buffer("xw", "u32", "r") : b.buffer("x", "f32", "r");
  const W = b.buffer("w", s.blocks ? "u8" : w, "r");
  const bias = s.bias ? b.buffer("bias", "f32", "r") : undefined;
  const res = s.residual ? b.buffer("residual", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");
  const E = mt * nt * 4; // accumulators per lane
  const groups = nw * mw; // warps per K slice
  const redWords = ks > 1 ? (ks - 1) * groups * E * 32 : 0;
  let pipe: Shared | undefined; // the cp.async stages (with `stages`), which the K slices' sums reuse

  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return()); // whole workgroups only
  const warp = b.let(b.builtin("sgid"), "u32", "warp");
  const lane = b.let(b.builtin("lane"), "u32", "lane");
  const kk = ks > 1 ? b.let(warp.mod(ks), "u32", "kk") : u32(0);
  const grp = ks > 1 ? b.let(warp.div(ks), "u32", "grp") : warp; // (wm, wn) of this warp
  const wn = mw > 1 ? grp.mod(nw) : grp, wm = mw > 1 ? grp.div(nw) : u32(0);
  const g = b.let(lane.shr(2), "u32", "g"), t = b.let(lane.and(3), "u32", "t");
  const m0 = b.let(L.mod(bM).mul(mw).add(wm).mul(16 * mt), "u32", "m0");
  const n0 = b.let(L.div(bM).mul(nw).add(wn).mul(8 * nt), "u32", "n0");
  // Row starts (element index of x) of this lane's two rows in each m tile, clamped into the batch (pad: mmaLayout).
  const zero = pad.some((p) => p) ? b.let(u32(0), "u32", "xz") : undefined;
  const xr: Val[][] = [];
  for (let i = 0; i < mt; i++) {
    xr.push([0, 8].map((o) => b.let(m0.add(16 * i + o).add(g).min(m - 1).mul(k), "u32", "xr")));
  }
  // W row starts (element index) of this lane's column in each n tile, clamped (blocks: blockLanes locates its chunks)
  const wr = s.blocks ? [] : Array.from({ length: nt }, (_, j) => b.let(n0.add(8 * j).add(g).min(n - 1).mul(k), "u32", "wr"));
  const acc = Array.from({ length: mt }, () => Array.from({ length: nt }, () => Array.from({ length: 4 }, () => b.let(f32(0), "f32", "acc"))));

  /** Packs x pairs into A words (hi and, with split, lo) for one m tile: pairs[r][q] = [x0, x1]. */
  const aWords = (pairs: Val[][][]): { hi: Val[]; lo?: Val[] } => {
    // word order of MmaStmt a: (row g, k lo), (row g+8, k lo), (row g, k hi), (row g+8, k hi)
    const order: [number, number][] = [[0, 0], [1, 0], [0, 1], [1, 1]];
    const hi = order.map(([r, q]) => b.let(b.pack2(w, pairs[r][q][0], pairs[r][q][1]), "u32", "ah"));
    if (!split) return { hi };
    const unpack = (word: Val, upper: boolean): Val => {
      return un(w === "bf16" ? "bf16bits" : "f16bits", upper ? word.shr(16) : word.and(0xffff));
    };
    const lo = order.map(([r, q], j) => b.pack2(w, pairs[r][q][0].sub(unpack(hi[j], false)), pairs[r][q][1].sub(unpack(hi[j], true))));
    return { hi, lo: lo.map((v) => b.let(v, "u32", "al")) };
  };
  const mmaStep = (A: { hi: Val[]; lo?: Val[] }, bw: Val[], i: number, j: number): void => {
    let c = acc[i][j];
    if (A.lo) c = b.mma(w, A.lo, bw, c);
    c = b.mma(w, A.hi, bw, c);
    c.forEach((v, q) => b.set(acc[i][j][q], v));
  };

  // Main loop: chunks of 32, warp kk takes chunks kk, kk + ks, ...
  const chunks = Math.floor(k / 32);
  const main = chunks - (chunks % ks); // every warp the same trip count (the rest go to the tail)
  /** One chunk's MMAs from its W words (ws[j]: 4 words of tile j) and prepared x words (xw(i, p): rows g, g+8). */
  const preparedChunk = (ws: Val[][], xw: (i: number, p: number) => Val[][]) => {
    for (let i = 0; i < mt; i++) {
      // words of rows g and g+8 at this lane's 8 values: w0..w3 = pairs (0,1) (2,3) (4,5) (6,7)
      const hw = xw(i, 0), lw = split ? xw(i, 1) : undefined;
      for (let h = 0; h < 2; h++) {
        const pick = (ws: Val[][]) => [ws[0][2 * h], ws[1][2 * h], ws[0][2 * h + 1], ws[1][2 * h + 1]];
        const A = { hi: pick(hw), lo: lw ? pick(lw) : undefined };
        for (let j = 0; j < nt; j++) mmaStep(A, [ws[j][2 * h], ws[j][2 * h + 1]], i, j);
      }
    }
  };
  const zeros = () => [zero!, zero!, zero!, zero!];
  const xWords = (at: Val) => (i: number, p: number) => xr[i].map((r, half) => half && pad[i] ? zeros() : b.loadv(x, r.add(at).shr(1).add((p * m * k) / 2), 4, "u32"));
  if (s.blocks) {
    // W rows (clamped) of this lane's column in each n tile
    const cols = Array.from({ length: nt }, (_, j) => b.let(n0.add(8 * j).add(g).min(n - 1), "u32", "wc"));
    const bl = blockLanes(b, W, s.blocks, k);
    /** Trips `trs` in order, every tile's loads of all of them issued before the first decode. */
    const trips = (trs: Val[], guard: boolean) => {
      const ch = trs.map((tr) => cols.map((c) => bl.load(c, tr, t, guard)));
      for (const c of ch) {
        const ws = c.map((x) => x.words());
        bl.runs.forEach((off, r) => preparedChunk(ws.map((w) => w[r]), xWords(b.let(c[0].at.add(off), "u32", "xat"))));
      }
    };
    // trips kk, kk + ks, ... of the whole ones, `unroll` at a time (then the odd ones one by one: the same trips in
    // the same order whatever the unroll); the rest (a partial trip where k is not a multiple of the span) on warp
    // kk == 0 after its loop, the same place at every row count
    const whole = Math.floor(k / bl.span), main = whole - (whole % ks), per = main / ks, grouped = per - (per % unroll);
    if (grouped) b.for(kk, u32(grouped * ks), ks * unroll, (tr) => trips(Array.from({ length: unroll }, (_, u) => (u ? tr.add(u * ks) : tr)), false));
    if (grouped < per) b.for(kk.add(grouped * ks), u32(main), ks, (tr) => trips([tr], false));
    if (main < bl.trips) {
      const rest = () => b.for(u32(main), u32(bl.trips), 1, (tr) => trips([tr], true));
      if (ks > 1) b.if(kk.eq(0), rest);
      else rest();
    }
  } else if (stages) {
    // This lane's pieces of a chunk (16 bytes each, word index in its buffer at the lane's k offset `at`): W
    // tiles, then x rows (g, g + 8) of each m tile and part, padded halves left out.
    const pieces: { buf: typeof W; word: (at: Val) => Val }[] = wr.map((r) => ({ buf: W, word: (at: Val) => r.add(at).shr(1) }));
    const xAt: number[][][] = []; // [i][half][p] -> piece index, -1 when padded
    for (let i = 0; i < mt; i++) {
      xAt.push(xr[i].map((r, half) => Array.from({ length: split ? 2 : 1 }, (_, p) => {
        if (half && pad[i]) return -1;
        pieces.push({ buf: x, word: (at: Val) => r.add(at).shr(1).add((p * m * k) / 2) });
        return pieces.length - 1;
      })));
    }
    const P = pieces.length, stride = P * 128, trips = main / ks;
    const bytes = mmaSharedBytes(caps, s);
    if (P !== perChunk) throw new KernelError(`mma matmul: ${P} pieces a chunk, ${perChunk} counted`);
    if (bytes > caps.maxSharedBytes) throw new KernelError(`mma matmul: ${stages} stages take ${bytes} bytes of shared memory (max ${caps.maxSharedBytes})`);
    const mem = pipe = b.shared("mma_pipe", "u32", Math.max(redWords, ks * nw * mw * stages * stride));
    // piece q of a stage sits at q * 128 words past the stage, lanes side by side: 512 contiguous bytes per
    // warp-wide copy or read, no bank conflicts
    const slot = b.let(warp.mul(stages * stride).add(lane.mul(4)), "u32", "slot");
    const issue = (stage: Val, kb: Val) => {
      const at = b.let(kb.add(t.mul(8)), "u32", "pat");
      pieces.forEach((pc, q) => b.cpAsync(mem, slot.add(stage).add(q * 128), pc.buf, pc.word(at)));
    };
    for (let st = 0; st < stages - 1; st++) {
      if (st < trips) issue(u32(st * stride), kk.mul(32).add(st * 32 * ks));
      b.cpCommit();
    }
    const rs = b.let(u32(0), "u32", "rs"); // word offset of the stage read this trip
    b.for(u32(0), u32(trips), 1, (it) => {
      b.cpWait(stages - 2); // this trip's chunk has landed (this lane's copies: all it reads)
      b.if(it.add(stages - 1).lt(trips), () => {
        // into the stage read last trip: this lane's reads of it are done (their values fed last trip's MMAs)
        const ws = b.let(rs.eq(0).select(u32((stages - 1) * stride), rs.sub(stride)), "u32", "ws");
        issue(ws, kk.mul(32).add(it.add(stages - 1).mul(32 * ks)));
      });
      b.cpCommit();
      const read = (q: number) => [0, 1, 2, 3].map((w) => b.let(b.sload(mem, slot.add(rs).add(q * 128 + w)), "u32", "pw"));
      const ws = wr.map((_, j) => read(j));
      preparedChunk(ws, (i, p) => xAt[i].map((q) => (q[p] < 0 ? zeros() : read(q[p]))));
      b.set(rs, rs.eq((stages - 1) * stride).select(u32(0), rs.add(stride)));
    }, { unroll });
  } else {
    b.for(kk.mul(32), u32(main * 32), 32 * ks, (kb) => {
      const at = b.let(kb.add(t.mul(8)), "u32", "kat");
      const ws = wr.map((r) => b.loadv(W, r.add(at).shr(1), 4, "u32"));
      if (prepared) {
        preparedChunk(ws, xWords(at));
        return;
      }
      for (let i = 0; i < mt; i++) {
        const xs = xr[i].map((r) => [...b.loadv(x, r.add(at), 4), ...b.loadv(x, r.add(at).add(4), 4)]);
        for (let h = 0; h < 2; h++) {
          // lane t's values 4h+{0,1} feed k slots (2t, 2t+1), 4h+{2,3} slots (2t+8, 2t+9) of MMA h
          const pairs = xs.map((v) => [[v[4 * h], v[4 * h + 1]], [v[4 * h + 2], v[4 * h + 3]]]);
          const A = aWords(pairs);
          for (let j = 0; j < nt; j++) mmaStep(A, [ws[j][2 * h], ws[j][2 * h + 1]], i, j);
        }
      }
    }, { unroll });
  }

  const cx: MmaBuild = { b, w, n, k, m, x, W, y, bias, res, split, prepared, mt, nt, nw, ks, groups, E, kk, grp, lane, g, t, m0, n0, xr, wr, acc, aWords, mmaStep };
  if (!s.blocks) maskedTail(cx, main * 32);
  if (redWords) sliceSums(cx, pipe ?? b.shared("mma_red", "f32", redWords), !!pipe);
  storeTiles(cx);
  return b.build();
}

/** What mmaMatmul's tail, K-slice sums and stores share with its setup. */
interface MmaBuild {
  b: KernelBuilder;
  w: MmaMatmulShape["w"];
  n: number;
  k: number;
  m: number;
  x: Buffer;
  W: Buffer;
  y: Buffer;
  bias?: Buffer;
  res?: Buffer;
  split: boolean;
  prepared: boolean;
  /** m16 and n8 tiles a warp, warps along n, K slices, warps a K slice, accumulators a lane. */
  mt: number;
  nt: number;
  nw: number;
  ks: number;
  groups: number;
  E: number;
  /** This warp's K slice and its (wm, wn) group; the lane, its row group g and column pair t. */
  kk: Val;
  grp: Val;
  lane: Val;
  g: Val;
  t: Val;
  /** The warp's first row and column; the element index of its lanes' x rows and W rows; the accumulators. */
  m0: Val;
  n0: Val;
  xr: Val[][];
  wr: Val[];
  acc: Val[][][];
  aWords: (pairs: Val[][][]) => { hi: Val[]; lo?: Val[] };
  mmaStep: (A: { hi: Val[]; lo?: Val[] }, bw: Val[], i: number, j: number) => void;
}

/**
 * The tail: the leftover chunks and the last k % 32 columns in masked k16 steps, all on warp kk == 0 after its
 * main loop (the same place at every row count).
 */
function maskedTail(cx: MmaBuild, tailStart: number): void {
  const { b, k, m, x, W, split, prepared, mt, nt, ks, kk, t, xr, wr, aWords, mmaStep } = cx;
  if (tailStart < k) {
    const tail = () => {
      b.for(u32(tailStart), u32(k), 16, (kb) => {
        const kAt = [0, 1, 8, 9].map((o) => b.let(kb.add(t.mul(2)).add(o), "u32", "kt"));
        const ok = kAt.map((q) => q.lt(k));
        const xv = (r: Val, q: number) => ok[q].select(b.load(x, r.add(kAt[q].min(k - 1))), f32(0));
        const wv = (r: Val, q: number) => ok[q].select(b.load(W, r.add(kAt[q].min(k - 1)), "u16"), u32(0));
        const bws = wr.map((r) => [wv(r, 0).or(wv(r, 1).shl(16)), wv(r, 2).or(wv(r, 3).shl(16))].map((v) => b.let(v, "u32", "bt")));
        for (let i = 0; i < mt; i++) {
          if (prepared) {
            // k % 8 == 0: a pair is wholly inside or past k; a word past k is zero
            const word = (r: Val, q: number, p: number) =>
              ok[q].select(b.load(x, r.add(kAt[q].min(k - 2)).shr(1).add((p * m * k) / 2)), u32(0));
            const pick = (p: number) => [word(xr[i][0], 0, p), word(xr[i][1], 0, p), word(xr[i][0], 2, p), word(xr[i][1], 2, p)].map((v) => b.let(v, "u32", "aw"));
            const A = { hi: pick(0), lo: split ? pick(1) : undefined };
            for (let j = 0; j < nt; j++) mmaStep(A, bws[j], i, j);
            continue;
          }
          const pairs = xr[i].map((r) => [[xv(r, 0), xv(r, 1)], [xv(r, 2), xv(r, 3)]]);
          const A = aWords(pairs);
          for (let j = 0; j < nt; j++) mmaStep(A, bws[j], i, j);
        }
      });
    };
    if (ks > 1) b.if(kk.eq(0), tail);
    else tail();
  }
}

/**
 * The K slices meet: warps kk > 0 park their sums in `red`, warp kk == 0 adds them in order kk = 1, 2, ... (the
 * others return). `inPipe`: red is the pipeline's stages, which every warp must be done reading first.
 */
function sliceSums(cx: MmaBuild, red: Shared, inPipe: boolean): void {
  const { b, ks, groups, E, kk, grp, lane, acc } = cx;
  const flat = acc.flat(2);
  // K slices meet: warps kk > 0 park their sums, warp kk == 0 adds them in order kk = 1, 2, ... In the
  // pipeline's words when there is one (every copy has landed; the barrier first lets every warp finish
  // reading its last stage), else in words of their own.
  const slot = (kq: Val | number, e: number): Val => u32(0).add(kq).sub(1).mul(groups).add(grp).mul(E * 32).add(e * 32).add(lane);
  if (inPipe) b.barrier();
  const park = (i: Val, v: Val) => (red.t === "f32" ? b.sstore(red, i, v) : b.sstore(red, i, v.bitcast("u32")));
  const fetch = (i: Val) => (red.t === "f32" ? b.sload(red, i) : b.sload(red, i).bitcast("f32"));
  b.if(kk.ne(0), () => flat.forEach((v, e) => park(slot(kk, e), v)));
  b.barrier();
  b.if(kk.ne(0), () => b.return());
  for (let q = 1; q < ks; q++) flat.forEach((v, e) => b.set(v, v.add(fetch(slot(q, e)))));
}

/** The epilogue: bias and residual, then the stores of the rows and columns inside y. */
function storeTiles(cx: MmaBuild): void {
  const { b, n, m, y, bias, res, mt, nt, nw, g, t, m0, n0, acc } = cx;
  // Write: lane holds columns 2t, 2t+1 of rows g and g+8 of each tile. The epilogue's loads (bias, residual)
  // all go out before the first store, from addresses clamped into range: a load placed after a store to a
  // binding that may alias it (the residual is often y's own bytes) waits for that store, and the 2 x mt x nt x
  // 2 round trips in a row cost the H200 ~10 µs (q/o) to ~37 µs (down) a matmul at 32 rows
  // (bench/serve_kernels.ts, 8B: down 94 µs with its residual, 57 without). Same sums, same order as before.
  const outs: { row: Val; col: Val; c: number; v: Val }[] = [];
  for (let i = 0; i < mt; i++) {
    for (let j = 0; j < nt; j++) {
      const col = b.let(n0.add(8 * j).add(t.mul(2)), "u32", "col");
      for (const half of [0, 1]) {
        const row = b.let(m0.add(16 * i + 8 * half).add(g), "u32", "row");
        for (const c of [0, 1]) {
          let v: Val = acc[i][j][2 * half + c];
          const cc = (c ? col.add(1) : col).min(n - 1);
          if (bias) v = v.add(b.load(bias, cc));
          if (res) v = v.add(b.load(res, row.min(m - 1).mul(n).add(cc)));
          outs.push({ row, col, c, v: bias || res ? b.let(v, "f32", "out") : v });
        }
      }
    }
  }
  // n % 8 == 0: a tile is wholly inside or past n; else each column is checked
  const whole = n % 8 === 0;
  for (let o = 0; o < outs.length; o += 2) {
    const { row, col } = outs[o];
    const inside = n % (8 * nt * nw) === 0 ? row.lt(m) : row.lt(m).and(whole ? col.lt(n) : u32(0).lt(1));
    b.if(inside, () => {
      for (const { c, v } of [outs[o], outs[o + 1]]) {
        const cc = c ? col.add(1) : col;
        const emit = () => b.store(y, b.let(row.mul(n).add(cc), "u32", "yi"), v);
        if (whole) emit();
        else b.if(cc.lt(n), emit);
      }
    });
  }
}
