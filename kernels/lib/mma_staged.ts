// Tensor-core matmul with shared-memory staging, for prefill chunks: y[m, n] = sum_k x[m, k] W[n, k] (+ bias[n])
// (+ residual[m, n]) on warp MMA tiles (kernels/ir_data.ts MmaStmt, m16n8k16, f32 accumulate), with operands brought
// to shared memory by cp.async and into fragments by ldmatrix (caps.mma and caps.staging: PTX on sm_80+).
//
// Layout. A workgroup owns a block of bm rows by bn columns and walks K in slices of bk. Each slice of x (as MMA
// words made once by mmaPrepX: hi and, with split, lo bf16/f16 parts) and of W lands in one of `stages` shared
// buffers through 16-byte cp.async copies issued `stages - 1` slices ahead, so the loads of later slices fly
// while the warps multiply the current one. wm x wn warps split the block; each warp holds a (bm / wm) x
// (bn / wn) tile of accumulators and reads its A and B fragments with ldmatrix.x4 (row-major x and W are
// exactly the row.col operands, no transpose). Rows of 16-byte chunks are XOR-swizzled so the eight rows an
// ldmatrix phase reads, and the chunks a cp.async wave writes, fall in distinct banks.
//
// Warpgroup MMA (`wg`, caps.wgmma: Hopper's wgmma.mma_async, kernels/ir_data.ts WgmmaStmt): with 64-element slices a
// staged row is 128 bytes and that swizzle is the hardware's 128-byte one, so the 4 warps of a warpgroup multiply
// a 64 x n tile straight from the stage (no ldmatrix, no fragments in registers) and the MMA runs asynchronously
// beside the next slice's copies; with wgPending 1 a group stays in flight across the barrier, one stage more
// behind the copies. On the H200 it runs the 8B's projections at 600-750 TFLOP/s where warp tiles reach ~420.
//
// Precision: as mma_matmul.ts (split: x as hi + lo, two MMAs per tile, lo first; unsplit: x rounded once).
//
// GGUF blocks (`blocks`, kernels/lib/mma_blocks.ts): W is not copied but loaded into registers a trip of slices
// ahead and dequantized into the stages (rounded once to bf16); the rest of the pipeline is the same.
//
// Summation order: every row's sum runs over k in k16 steps from 0 up, each step one MMA (warp or warpgroup) per
// part (lo, then hi) into the same accumulator. It depends on nothing but k and the split, so a row's bits do not depend on how
// many rows there are or which block or warp computes it (batch invariant within this kernel), but they differ
// from mma_matmul.ts's order: the lowering uses this kernel for prefill chunks only, never the server's entries.
// Rows past m read the last row (clamped) and are not written; columns past n likewise.
import { type Kernel, KernelBuilder, KernelError, type Shared, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, wgIndex } from "./common.ts";
import type { MmaOperands } from "./mma_matmul.ts";
import { type BlockStage, blockStage, blockStageFits, type Issued } from "./mma_blocks.ts";
import type { QType } from "./dequant.ts";

export interface StagedMatmulShape extends MmaOperands {
  /** Block rows and columns (multiples of 16 * wm and 16 * wn); default 128 x 128. */
  bm?: number;
  bn?: number;
  /** K slice per stage: 32 or 64 (k must be a multiple); default 32. */
  bk?: number;
  /** Shared buffers in the cp.async pipeline, 2..6; default 4. */
  stages?: number;
  /**
   * Warps along M and N; default 2 x 4 (64 x 32 warp tiles: ~128 registers, two workgroups an SM). With `wg`,
   * warpgroups (4 warps each) along M and N.
   */
  wm?: number;
  wn?: number;
  /**
   * Warpgroup MMA (caps.wgmma, kernels/ir_data.ts WgmmaStmt) instead of warp tiles: each of wm x wn warpgroups multiplies
   * a (bm / wm) x (bn / wn) tile straight from the staged slices (bk must be 64: one 128-byte swizzled row a slice).
   */
  wg?: boolean;
  /** With `wg`: warpgroup MMA groups left in flight while the next slice's copies are issued (0 or 1; default 0). */
  wgPending?: number;
  /**
   * W holds GGUF blocks of this type (w must be "bf16", bk 64): each slice's chunks are loaded when the slice
   * `ahead` of it is waited for, and dequantized to bf16 into its stage after that trip of slices' MMAs
   * (kernels/lib/mma_blocks.ts).
   */
  blocks?: QType;
  /**
   * Workgroups splitting k (default 1): each walks KT / splitK slices from its own start and stores its raw sums
   * into y as partials [splitK, batch, n] (no bias or residual), which stagedCombine adds in split order. For
   * decode-sized batches, whose n / bn blocks alone would leave most of the GPU idle while each walks every slice.
   */
  splitK?: number;
}

/** The block tiling of a staged matmul. */
export type StagedLayout = Pick<StagedMatmulShape, "bm" | "bn" | "bk" | "stages" | "wm" | "wn" | "wg" | "wgPending">;

/**
 * Default tiling for m rows, n columns and a depth k, x split or not, with warpgroup MMA or not (caps.wgmma), from
 * bench/mma.ts on the H200.
 *
 * Warpgroup MMA, x rounded once (session 13): 128 x 256 blocks of two 64 x 256 warpgroup tiles, K slices of 64, 4
 * stages, one MMA group in flight, where those make >= 100 workgroups (2048 x 14336 x 4096: 346 µs, 695 TFLOP/s,
 * against 575 on warp MMA tiles; 2048 x 4096 x 14336: 318 against 568; 512 x 8192 x 2048: 29.3 against 45.3);
 * else 128 x 128 (2048 x 1024 x 4096: 31.7 against 49.0; 512 x 4096 x 4096: 33.3 against 49.2); else one warpgroup
 * of 64 x 64 while those make at most two waves of the H200's 132 SMs (512 x 2048 x 2048: 14.0 against 23.2 on
 * 64-row warp tiles; 512 x 2048 x 8192: 53.2 against 83.8), 64 x 128 past that (512 x 4096 x 4096 in 64 x 64
 * tiles: 55.4 µs, in 64 x 128: 33.4).
 *
 * x rounded once (session 12, the Llama 1B/8B projections at m = 128..2048): 128 x 128 blocks with K slices of 64,
 * 3 stages and 2 x 2 warps (64 x 64 warp tiles) where those make >= 96 workgroups and k allows the slice
 * (2048 x 14336 x 4096: 582 µs, 414 TFLOP/s, against 716 in the split layout below; 2048 x 1024 x 4096: 49 against
 * 100; 512 x 14336 x 4096: 173 against 205); smaller grids keep the split rule's 64-row blocks (512 x 2048 x 8192:
 * 87.7 µs against 92.4).
 *
 * x split (session 6, m = 512 and 2048): 128 x 256 blocks (3 stages, 64 x 64 warp tiles) where they still make >=
 * 128 workgroups (2048 x 14336 x 4096: 1197 µs against 1558 in 128 x 128); else 128 x 128 (2 x 4 warps, 64 x 32
 * warp tiles) where those make >= 96 (512 x 4096 x 4096: 102.6 µs against 160.1 in 64-row blocks); else 64-row
 * blocks (512 x 2048 x 2048: 32.5 µs against 54.1), which fill more of a large GPU's SMs.
 */
export function stagedLayout(m: number, n: number, k = 0, split = true, wgmma = false): StagedLayout {
  const blocks = (bm: number, bn: number) => Math.ceil(m / bm) * Math.ceil(n / bn);
  if (wgmma && !split && k % 64 === 0 && k >= 64) {
    const wg = { bk: 64, stages: 4, wn: 1, wg: true, wgPending: 1 };
    if (blocks(128, 256) >= 100) return { ...wg, bm: 128, bn: 256, wm: 2 };
    if (blocks(128, 128) >= 100) return { ...wg, bm: 128, bn: 128, wm: 2 };
    return blocks(64, 64) <= 264 ? { ...wg, bm: 64, bn: 64, wm: 1 } : { ...wg, bm: 64, bn: 128, wm: 1 };
  }
  if (!split && k % 64 === 0 && k >= 64 && blocks(128, 128) >= 96) return { bm: 128, bn: 128, bk: 64, stages: 3, wm: 2, wn: 2 };
  if (blocks(128, 256) >= 128) return { bm: 128, bn: 256, bk: 32, stages: 3, wm: 2, wn: 4 };
  if (blocks(128, 128) >= 96) return { bm: 128, bn: 128, bk: 32, stages: 4, wm: 2, wn: 4 };
  return { bm: 64, bn: 128, bk: 32, stages: 4, wm: 2, wn: 4 };
}

/** Whether the staged MMA matmul takes this shape on this target in this layout (its shared memory included). */
export function stagedMatmulFits(caps: Caps, w: string, n: number, k: number, l: StagedLayout = {}, split = true, blocks?: QType): boolean {
  const bk = l.bk ?? 32;
  return !!caps.mma && !!caps.staging && caps.subgroups && caps.subgroupSize === 32 && (w === "bf16" || w === "f16") &&
    k % bk === 0 && k >= bk && n >= 8 && stagedSharedBytes(l, split) <= caps.maxSharedBytes &&
    (!l.wg || (!!caps.wgmma && bk === 64)) && (!blocks || (w === "bf16" && blockStageFits(blocks, k, bk)));
}

/**
 * The tiling of a staged matmul over GGUF blocks: stagedLayout's for x rounded once, with 64-element slices (a
 * slice is whole spans of the type, or half of q6_k's) and at most 128 columns a block (a lane holds its chunks'
 * raw words beside its accumulators while the MMAs run).
 */
export function stagedBlockLayout(m: number, n: number, k: number, wgmma: boolean): StagedLayout {
  const l = stagedLayout(m, n, k, false, wgmma);
  // stages enough for 4 slices a trip ahead of the one read (stagedMatmul: the blocks' loads fly for a trip)
  if (l.wg) return { ...l, bn: Math.min(l.bn ?? 128, 128), stages: 6 };
  // warp tiles (one slice a trip): 64-row blocks of 2 x 2 warps (at 2 x 4, ptxas held q5_k's to 80 registers and spilled)
  return l.bm === 64 ? { bm: 64, bn: 64, bk: 64, stages: 3, wm: 2, wn: 2 } : { ...l, bk: 64, stages: 3 };
}

/** Bytes of shared memory of a layout: `stages` slices of x (one or two parts) and W. */
export function stagedSharedBytes(l: StagedLayout, split = true): number {
  const bm = l.bm ?? 128, bn = l.bn ?? 128, bk = l.bk ?? 32;
  return (l.stages ?? 4) * ((split ? 2 : 1) * bm + bn) * bk * 2;
}

/**
 * Bindings, in order: xw u32 [parts, batch, k / 2] (r; mmaPrepX's words); W [n, k] bf16/f16 (r; `blocks`: the
 * blocks' bytes); bias f32 [n] (r, when `bias`); residual f32 [batch, n] (r, when `residual`; may be y's bytes);
 * y f32 [batch, n] (w; with splitK the partials, [splitK, batch, n]).
 */
export function stagedMatmul(caps: Caps, s: StagedMatmulShape): Kernel {
  const { n, k, batch: m, w } = s;
  const wg = s.wg ?? false;
  const bm = s.bm ?? 128, bn = s.bn ?? 128, bk = s.bk ?? (wg ? 64 : 32), stages = s.stages ?? 4;
  const wm = s.wm ?? 2, wn = s.wn ?? (wg ? 1 : 4), pending = wg ? s.wgPending ?? 0 : 0;
  const split = s.split ?? true, parts = split ? 2 : 1;
  if (!stagedMatmulFits(caps, w, n, k, { bk, wg }, split, s.blocks)) {
    throw new KernelError(`staged matmul: needs caps.mma and caps.staging${wg ? ", caps.wgmma and bk 64" : ""}, 32-lane subgroups, bf16/f16 weights, k a multiple of ${bk}, n >= 8${s.blocks ? ", bf16 and bk 64 over whole spans of the blocks" : ""}; got ${w}${s.blocks ? ` (${s.blocks})` : ""} n=${n} k=${k} bk=${bk}`);
  }
  if (!(Number.isInteger(m) && m >= 1)) throw new KernelError(`staged matmul: bad batch ${m}`);
  if (parts * m * k >= 2 ** 32 || n * k >= 2 ** 32 || m * n >= 2 ** 32) throw new KernelError("staged matmul: indices exceed 32 bits");
  if (bk !== 32 && bk !== 64) throw new KernelError(`staged matmul: bk ${bk} (32 or 64)`);
  if (!(Number.isInteger(stages) && stages >= 2 + pending && stages <= 6)) throw new KernelError(`staged matmul: ${stages} stages (${2 + pending}..6)`);
  if (pending !== 0 && pending !== 1) throw new KernelError(`staged matmul: ${pending} warpgroup MMA groups in flight (0 or 1)`);
  const WM = bm / wm, WN = bn / wn; // a warp's (warpgroup's) tile
  if (wg) {
    if (!(Number.isInteger(WM) && Number.isInteger(WN) && WM % 64 === 0 && WN % 16 === 0 && WN <= 256 && (WM / 64) * WN <= 256)) {
      throw new KernelError(`staged matmul: block ${bm}x${bn} over ${wm}x${wn} warpgroups (tiles of 64k x 16j columns, at most 256 columns and 128 accumulators a lane)`);
    }
  } else if (!(Number.isInteger(WM) && Number.isInteger(WN) && WM % 16 === 0 && WN % 16 === 0 && WM >= 16 && WN >= 16 && WM <= 128 && WN <= 128)) {
    throw new KernelError(`staged matmul: block ${bm}x${bn} over ${wm}x${wn} warps (warp tiles must be multiples of 16, at most 128)`);
  }
  if (!wg && (WM / 16) * (WN / 8) > 64) throw new KernelError(`staged matmul: ${WM}x${WN} warp tile holds ${(WM / 16) * (WN / 8) * 4} accumulators per lane (max 256)`);
  const threads = (wg ? 128 : 32) * wm * wn;
  if (threads > caps.maxWorkgroupSize) throw new KernelError(`staged matmul: ${threads} invocations per workgroup`);
  const C = bk / 8; // 16-byte chunks per staged row
  const rowW = bk / 2; // u32 words per staged row
  const aW = bm * rowW, bW = bn * rowW; // words of one part of x, of W, per stage
  const stageW = parts * aW + bW;
  const bytes = stagedSharedBytes({ bm, bn, bk, stages }, split);
  if (bytes > caps.maxSharedBytes) throw new KernelError(`staged matmul: ${bytes} bytes of shared memory (max ${caps.maxSharedBytes})`);
  const KT = k / bk, S = s.splitK ?? 1, KTs = KT / S;
  if (!(Number.isInteger(KTs) && KTs >= 1) || (S > 1 && (s.bias || s.residual))) {
    throw new KernelError(`staged matmul: splitK ${S} must divide k's ${KT} slices, and takes no bias or residual (stagedCombine adds them)`);
  }
  const bM = Math.ceil(m / bm), bN = Math.ceil(n / bn), tiles = bM * bN, total = tiles * S;
  const grid = gridFor(caps, total);
  const name = s.name ??
    `mma_staged_${s.blocks ?? w}_n${n}_k${k}_b${m}_${bm}x${bn}x${bk}_s${stages}_${wg ? `wg${wm}x${wn}${pending ? `_p${pending}` : ""}` : `w${wm}x${wn}`}${split ? "" : "_nosplit"}${S > 1 ? `_sk${S}` : ""}${s.bias ? "_bias" : ""}${s.residual ? "_res" : ""}`;
  const b = new KernelBuilder(name, { workgroup: threads, grid });
  const x = b.buffer("xw", "u32", "r");
  const W = b.buffer("w", s.blocks ? "u8" : w, "r");
  const bias = s.bias ? b.buffer("bias", "f32", "r") : undefined;
  const res = s.residual ? b.buffer("residual", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");
  const sm = b.shared("stage", "u32", stages * stageW);

  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return()); // whole workgroups only
  const tid = b.let(b.lid.x, "u32", "tid");
  const lane = b.let(b.builtin("lane"), "u32", "lane");
  const warp = b.let(b.builtin("sgid"), "u32", "warp");
  // with splitK, workgroup L walks slices sk·KTs .. of tile L mod tiles (its partials at sk·m·n)
  const T = S > 1 ? b.let(L.mod(tiles), "u32", "tile") : L, sk = S > 1 ? b.let(L.div(tiles), "u32", "sk") : undefined;
  const m0 = b.let(T.mod(bM).mul(bm), "u32", "m0"); // blocks along M first: neighbours share W's slice in L2
  const n0 = b.let(T.div(bM).mul(bn), "u32", "n0");
  const kBase = sk ? b.let(sk.mul(KTs), "u32", "kb") : undefined;
  const lift32 = (v: Val | number): Val => (typeof v === "number" ? u32(v) : v);
  /** The global slice of this workgroup's slice kt. */
  const kg = (kt: Val | number): Val | number => (kBase ? kBase.add(kt) : kt);

  /**
   * Word offset of 16-byte chunk c of staged row r, swizzled: chunk c ^ key(r) with key spreading 8 rows over
   * banks. With 64-element slices (C = 8) this is wgmma's 128-byte swizzle (kernels/ir_data.ts WgmmaStmt).
   */
  const swz = (r: Val, c: Val): Val => {
    const key = C === 8 ? r.and(7) : r.shr(1).and(3);
    return r.mul(rowW).add(c.xor(key).shl(2));
  };

  // The copies this invocation issues per slice: the buffer, its word index at slice 0 and the shared word
  // offset inside a stage. Regions: x part 0, (x part 1), W.
  const copies: { buf: typeof x; g: Val; s: Val; guard?: Val }[] = [];
  const region = (buf: typeof x, rows: number, at: number, global: (row: Val) => Val) => {
    const chunks = rows * C;
    for (let it = 0; it * threads < chunks; it++) {
      const id = tid.add(it * threads);
      const row = b.let(id.shr(Math.log2(C)), "u32", "cr"), ch = b.let(id.and(C - 1), "u32", "cc");
      const gi = b.let(global(row).add(ch.shl(2)), "u32", "cg");
      const so = b.let(swz(row, ch).add(at), "u32", "cs");
      copies.push({ buf, g: gi, s: so, guard: (it + 1) * threads > chunks ? id.lt(chunks) : undefined });
    }
  };
  const half = k / 2;
  for (let p = 0; p < parts; p++) region(x, bm, p * aW, (r) => m0.add(r).min(m - 1).mul(half).add((p * m * k) / 2));
  if (!s.blocks) region(W, bn, parts * aW, (r) => n0.add(r).min(n - 1).mul(half));
  // block weights: not copied but loaded into registers, decoded and stored (mma_blocks.ts)
  const wq: BlockStage | undefined = s.blocks && blockStage(b, { W, sm, t: s.blocks, n, k, bn, n0, tid, threads, at: parts * aW, place: swz });
  /** Issues slice kt's copies into the stage at word `base`. */
  const load = (base: Val | number, kt: Val | number) => {
    const kofs = typeof kt === "number" ? u32(kt * rowW) : kt.mul(rowW), at = typeof base === "number" ? u32(base) : base;
    for (const c of copies) {
      const issue = () => b.cpAsync(sm, at.add(c.s), c.buf, c.g.add(kofs));
      if (c.guard) b.if(c.guard, issue);
      else issue();
    }
  };

  // Prologue: slices 0 .. ahead-1 in flight. A slice's stage is written again `stages` slices later, when every
  // warp has read it: the warp MMAs read a stage before the next barrier, the warpgroup MMAs `pending` slices later.
  const ahead = stages - 1 - pending;
  for (let st = 0; st < ahead; st++) {
    if (st < KTs) {
      load(st * stageW, kg(st));
      if (wq) wq.store(st * stageW, wq.issue(lift32(kg(st))));
    }
    b.cpCommit();
  }
  const rs = b.let(u32(0), "u32", "rs"); // word base of the stage being read
  // Block weights: slice kt + ahead's chunks are loaded when slice kt is waited for (clamped to the last slice: a
  // stage past it is never read), and decoded into the stage the copies went to once `unroll` slices' MMAs have run
  // (the loads fly meanwhile). That stage is one slice kt - 1 - pending or later had, which no warp reads any more;
  // the next barrier publishes the stores.
  const pend: { ws: Val; issued: Issued }[] = [];
  /** Waits for slice kt, then issues the copies of slice kt + ahead into the stage slice kt - 1 - pending had. */
  const slice = (kt: Val) => {
    b.cpWait(ahead - 1); // slice kt has landed (this invocation's copies) ...
    if (wg) b.asyncFence(); // ... for the warpgroup MMAs' reads too ...
    b.barrier(); // ... everyone's, and every warp is done with the stage the next load overwrites
    const next = kt.add(ahead), t = rs.add(ahead * stageW);
    const ws = b.let(t.ge(stages * stageW).select(t.sub(stages * stageW), t), "u32", "ws");
    b.if(next.lt(KTs), () => load(ws, kg(next)));
    if (wq) pend.push({ ws, issued: wq.issue(b.let(lift32(kg(next.min(KTs - 1))), "u32", "kq")) });
    b.cpCommit();
  };
  const advance = () => b.set(rs, rs.eq((stages - 1) * stageW).select(u32(0), rs.add(stageW)));
  // Block weights: `unroll` slices a trip (the largest of 4, 2, 1 dividing KTs and at most `ahead`: a trip's stores
  // then miss the stages its last slice, and with a warpgroup MMA group in flight the one before, may still be
  // read in), their decoding after the trip's MMAs.
  // A trip's chunks in flight hold at most ~72 registers on warpgroup tiles (ptxas then assembles every type's
  // layouts without spills: q6_k's 17 raw words a chunk take two slices a trip, q4_k's 8 four). Warp tiles (sm_80)
  // take one slice a trip: ptxas spilled q5_k's and q4_0's 64 x 64 blocks at two.
  const most = wg ? ahead : 1;
  const unroll = wq ? [4, 2, 1].find((u) => KTs % u === 0 && u <= most && (u === 1 || u * wq.regs <= 72))! : 1;
  const kloop = (body: () => void) => {
    b.for(u32(0), u32(KTs), unroll, (k0) => {
      for (let q = 0; q < unroll; q++) {
        slice(q ? b.let(k0.add(q), "u32", "kt") : k0);
        body();
        advance();
      }
      for (const p of pend.splice(0)) wq!.store(p.ws, p.issued);
    });
  };

  /** Stores y[row, col] and y[row, col + 1] (col even) from v[0], v[1], with bias and residual; skips what is outside. */
  const whole = n % 8 === 0, even = n % 2 === 0;
  const storePair = (row: Val, col: Val, vs: Val[]) => {
    const at = b.let(sk ? sk.mul(m * n).add(row.mul(n)).add(col) : row.mul(n).add(col), "u32", "yi");
    const inside = n % bn === 0 ? row.lt(m) : row.lt(m).and(col.lt(n));
    b.if(inside, () => {
      if (even) {
        // both columns inside (n even, col even): one 8-byte store
        const bv = bias ? b.loadv(bias, col, 2) : undefined;
        const rv = res ? b.loadv(res, at, 2) : undefined;
        const out = vs.map((v, c) => {
          let o = v;
          if (bv) o = o.add(bv[c]);
          if (rv) o = o.add(rv[c]);
          return o;
        });
        b.storev(y, at, out);
        return;
      }
      for (const c of [0, 1]) {
        const emit = () => {
          let v = vs[c];
          if (bias) v = v.add(b.load(bias, c ? col.add(1) : col));
          if (res) v = v.add(b.load(res, c ? at.add(1) : at));
          b.store(y, c ? at.add(1) : at, v);
        };
        if (c && !whole) b.if(col.add(1).lt(n), emit);
        else emit();
      }
    });
  };
  const g = b.let(lane.shr(2), "u32", "g"), t = b.let(lane.and(3), "u32", "t");

  const cx: StagedBuild = { b, w, sm, rs, bk, C, rowW, aW, parts, split, wm, WM, WN, pending, warp, lane, g, t, m0, n0, kloop, storePair };
  if (wg) wgmmaTiles(cx);
  else warpTiles(cx);
  return b.build();
}

/** What the staged matmul's tile code shares with its setup (stagedMatmul). */
interface StagedBuild {
  b: KernelBuilder;
  w: StagedMatmulShape["w"];
  /** The stages in shared memory, and the word base of the stage being read. */
  sm: Shared;
  rs: Val;
  /** The slice's width, 16-byte chunks a staged row, u32 words a staged row. */
  bk: number;
  C: number;
  rowW: number;
  /** Words of one part of x per stage, and the parts (hi and lo, or one). */
  aW: number;
  parts: number;
  split: boolean;
  /** Warps (warpgroups) along M, the tile a warp (warpgroup) owns, warpgroup MMA groups in flight. */
  wm: number;
  WM: number;
  WN: number;
  pending: number;
  warp: Val;
  lane: Val;
  /** A lane's fragment row group (lane / 4) and column pair (lane % 4). */
  g: Val;
  t: Val;
  /** The block's first row and column. */
  m0: Val;
  n0: Val;
  /** The k loop: each slice waited for (and the copies ahead of it issued), `body` run on it, the read stage moved on. */
  kloop: (body: () => void) => void;
  /** Stores two neighbouring columns of a row with bias and residual, what lies inside y. */
  storePair: (row: Val, col: Val, vs: Val[]) => void;
}

/** The warpgroup MMA (wgmma) tiles of a staged matmul: its k loop over the staged slices, then its stores. */
function wgmmaTiles(cx: StagedBuild): void {
  const { b, w, sm, rs, bk, rowW, aW, parts, wm, WM, WN, pending, warp, g, t, m0, n0, kloop, storePair } = cx;
  // Warpgroup q = warp / 4 owns rows wi * WM .. and columns wj * WN ..; each k16 step of a slice is one wgmma per
  // 64 rows and x part (lo first), reading the stage where it lies: x rows at 32 words a row, 8 words a step.
  const q = b.let(warp.shr(2), "u32", "q");
  const wi = b.let(q.mod(wm), "u32", "wi"), wj = b.let(q.div(wm), "u32", "wj");
  const mt = WM / 64;
  const acc = Array.from({ length: mt }, () => Array.from({ length: WN / 2 }, () => b.let(0, "f32", "acc")));
  const aBase = b.let(wi.mul(WM * rowW), "u32", "ab"), bBase = b.let(wj.mul(WN * rowW).add(parts * aW), "u32", "bb");
  kloop(() => {
    for (let st = 0; st < bk / 16; st++) {
      for (let i = 0; i < mt; i++) {
        for (let p = parts - 1; p >= 0; p--) {
          b.wgmma(w, WN, acc[i], sm, rs.add(aBase).add(p * aW + 64 * i * rowW + 8 * st), rs.add(bBase).add(8 * st));
        }
      }
    }
    b.wgWait(pending);
  });
  if (pending) b.wgWait(0);
  // Lane l of warp r (of its warpgroup) holds columns 8j + 2t, +1 of rows 16r + g and 16r + g + 8 of each 64 rows.
  const r16 = b.let(warp.and(3).mul(16).add(g), "u32", "r16");
  for (let i = 0; i < mt; i++) {
    for (let j = 0; j < WN / 8; j++) {
      const col = b.let(n0.add(wj.mul(WN)).add(8 * j).add(t.mul(2)), "u32", "col");
      for (const h of [0, 1]) {
        const row = b.let(m0.add(wi.mul(WM)).add(64 * i + 8 * h).add(r16), "u32", "row");
        storePair(row, col, [acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1]]);
      }
    }
  }
}

/** The warp MMA (mma.sync) tiles of a staged matmul, fed by ldmatrix: its k loop, then its stores. */
function warpTiles(cx: StagedBuild): void {
  const { b, w, sm, rs, bk, C, rowW, aW, parts, split, wm, WM, WN, warp, lane, g, t, m0, n0, kloop, storePair } = cx;
  // This warp's tile and its lanes' ldmatrix row offsets (the swizzle key of a fragment row depends on the
  // lane only: tile rows start at multiples of 16).
  const mt = WM / 16, nt = WN / 8; // m16 tiles and n8 tiles per warp
  const wi = b.let(warp.mod(wm), "u32", "wi"), wj = b.let(warp.div(wm), "u32", "wj");
  const aRow = b.let(wi.mul(WM).add(lane.and(15)), "u32", "ar"); // + 16 i
  const aKey = b.let(lane.shr(4).xor(C === 8 ? aRow.and(7) : aRow.shr(1).and(3)), "u32", "ak");
  const bRow = b.let(wj.mul(WN).add(lane.and(7)).add(lane.shr(4).shl(3)), "u32", "br"); // + 16 jj
  const bKey = b.let(lane.shr(3).and(1).xor(C === 8 ? bRow.and(7) : bRow.shr(1).and(3)), "u32", "bk");
  const acc = Array.from({ length: mt }, () => Array.from({ length: nt }, () => Array.from({ length: 4 }, () => b.let(0, "f32", "acc"))));

  kloop(() => {
    for (let st = 0; st < bk / 16; st++) {
      const af: Val[][][] = []; // [part][i] -> 4 words
      for (let p = 0; p < parts; p++) {
        af.push(Array.from({ length: mt }, (_, i) =>
          b.ldmatrix(sm, rs.add(p * aW + 16 * i * rowW).add(aRow.mul(rowW)).add(aKey.xor(2 * st).shl(2)), 4)));
      }
      const bf: Val[][] = []; // [j] -> 2 words
      for (let jj = 0; jj < nt / 2; jj++) {
        const q = b.ldmatrix(sm, rs.add(parts * aW + 16 * jj * rowW).add(bRow.mul(rowW)).add(bKey.xor(2 * st).shl(2)), 4);
        bf.push([q[0], q[1]], [q[2], q[3]]);
      }
      for (let i = 0; i < mt; i++) {
        for (let j = 0; j < nt; j++) {
          let c = acc[i][j];
          if (split) c = b.mma(w, af[1][i], bf[j], c);
          c = b.mma(w, af[0][i], bf[j], c);
          c.forEach((v, q) => b.set(acc[i][j][q], v));
        }
      }
    }
  });

  // Write: lane holds columns 2t, 2t+1 of rows g and g+8 of each tile.
  for (let i = 0; i < mt; i++) {
    for (let j = 0; j < nt; j++) {
      const col = b.let(n0.add(wj.mul(WN)).add(8 * j).add(t.mul(2)), "u32", "col");
      for (const h of [0, 1]) {
        const row = b.let(m0.add(wi.mul(WM)).add(16 * i + 8 * h).add(g), "u32", "row");
        storePair(row, col, [acc[i][j][2 * h], acc[i][j][2 * h + 1]]);
      }
    }
  }
}

/**
 * The sum of a split-K staged matmul's partials (StagedMatmulShape.splitK): y = ((p0 + p1) + ...) + bias +
 * residual, in split order, an invocation per value. Bindings: part f32 [splits, batch, n] (r); bias f32 [n] (r,
 * when `bias`); residual f32 [batch, n] (r, when `residual`; may be y's bytes); y f32 [batch, n] (w).
 */
export function stagedCombine(caps: Caps, s: { n: number; batch: number; splits: number; bias?: boolean; residual?: boolean }): Kernel {
  const { n, batch: m, splits } = s, count = m * n, wg = 256;
  if (!(splits >= 2) || splits * count >= 2 ** 32) throw new KernelError(`staged combine: ${splits} splits of ${m} x ${n}`);
  const grid = gridFor(caps, Math.ceil(count / wg));
  const b = new KernelBuilder(`mma_staged_combine_n${n}_b${m}_sk${splits}${s.bias ? "_bias" : ""}${s.residual ? "_res" : ""}`, { workgroup: wg, grid });
  const part = b.buffer("part", "f32", "r");
  const bias = s.bias ? b.buffer("bias", "f32", "r") : undefined;
  const res = s.residual ? b.buffer("residual", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");
  const i = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "i");
  if (grid[0] * grid[1] * grid[2] * wg > count) b.if(i.ge(count), () => b.return());
  const v = b.let(b.load(part, i), "f32", "v");
  for (let p = 1; p < splits; p++) b.set(v, v.add(b.load(part, i.add(p * count))));
  if (bias) b.set(v, v.add(b.load(bias, i.mod(n))));
  if (res) b.set(v, v.add(b.load(res, i)));
  b.store(y, i, v);
  return b.build();
}
