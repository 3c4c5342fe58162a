// Tiled matmul on cooperative matrices (caps.coop: Vulkan's VK_KHR_cooperative_matrix, a GPU's matrix units behind
// it): y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]) (+ residual[m, n]), the bindings and epilogues of
// tiled_matmul.ts, for prefill chunks of bf16 or GGUF block weights.
//
// A workgroup owns a BM x BN tile of y, each subgroup a WM x WN part of it as (WM/16) x (WN/16) 16 x 16 f32
// accumulators. K is walked in slices of BK (32 or 64): the workgroup stages x's slice [BM, BK] (bf16 words made
// once by mmaPrepX, or f32 rounded to bf16 here, as the PTX prefill path and llama.cpp round a bf16 matmul's
// activations) and W's slice [BN, BK] (bf16 as stored; GGUF blocks dequantized to bf16 as they are staged, BK one
// span of the type) in one u32 shared array, rows of BK/2 words padded by 4
// (16 bytes off a multiple of 128 apart, so the 8 rows of a 16-byte-per-row read fall in distinct 16-byte bank
// groups); the next slice's global loads go into registers before the
// current slice's multiplies, so they are in flight meanwhile. Each 16-deep step loads the subgroup's A and B
// fragments once and runs every accumulator's multiply-add. The epilogue stores one accumulator at a time into
// the subgroup's 16 x 16 f32 scratch, from which each lane adds bias / residual and writes its elements of y.
// Rows past m read the last row (clamped), columns past n the last column; neither is written.
//
// Summation: every y[m, n] sums its k in slices of 16 in order, each slice's order and internal precision the
// device's (fixed for a device), from 0, then + bias, then + residual: a row's bits depend on its x row and W
// alone, at any M and whichever layout the row count picks.
import { type Buffer, type Kernel, KernelBuilder, KernelError, type Shared, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { eachItem, elemOf, gridFor, wgIndex } from "./common.ts";
import { chunkGroups, chunkValues, isQType, type LoadedChunk, loadChunk, type QChunk, QLAYOUT, type QType, qWords } from "./dequant.ts";
import type { MatmulShape } from "./matmul.ts";
import { tiledSlice } from "./tiled_matmul.ts";

/** Workgroup tile BM x BN, subgroup tile WM x WN (multiples of 16), K slices of BK (bf16: 32 or 64, default 32; blocks: their span). */
export interface CoopLayout {
  bm: number;
  bn: number;
  wm: number;
  wn: number;
  bk?: number;
}

export interface CoopMatmulShape extends Omit<MatmulShape, "wide" | "tile"> {
  batch: number;
  layout?: CoopLayout;
  /**
   * x arrives as bf16 words made once by mma_matmul.ts mmaPrepX (binding 0 is u32 [batch, k / 2], unsplit)
   * instead of f32: the workgroups stage both operands with 16-byte loads and no conversion.
   */
  prepared?: boolean;
}

/** u32 words per staged row: BK / 2 of values, 4 of padding (rows 16 bytes off a 128-byte multiple apart). */
const rowWords = (bk: number) => bk / 2 + 4;

const subgroups = (l: CoopLayout) => (l.bm / l.wm) * (l.bn / l.wn);
const sharedBytes = (l: CoopLayout) => (l.bm + l.bn) * rowWords(l.bk ?? 32) * 4 + subgroups(l) * 256 * 4;

/** Whether a block type's chunks pair up into bf16 words: every group of consecutive values starts even and has an even length. */
const pairsUp = (w: QType): boolean => chunkGroups(w).every((g) => g.off % 2 === 0 && g.n % 2 === 0);

/**
 * Whether the target runs this kernel: bf16 cooperative matrices, whole subgroups, bf16 weights or GGUF blocks
 * (dequantized to bf16 as they are staged, K slices of one span of the type: tiled_matmul.ts tiledSlice), the
 * layout within its limits.
 */
export function coopMatmulFits(caps: Caps, w: string, n: number, k: number, l?: CoopLayout): boolean {
  const block = isQType(w);
  if (!caps.coop?.bf16 || !(w === "bf16" || (block && pairsUp(w))) || !caps.subgroups || caps.subgroupSize < 1 || n < 16) return false;
  if (k % 32 !== 0 || (block && k % QLAYOUT[w].elems !== 0)) return false;
  if (!l) return true;
  const BK = l.bk ?? 32;
  if (block ? BK !== tiledSlice(w) : BK !== 32 && BK !== 64) return false;
  return k % BK === 0 && l.bm % l.wm === 0 && l.bn % l.wn === 0 && l.wm % 16 === 0 && l.wn % 16 === 0 &&
    subgroups(l) * caps.subgroupSize <= caps.maxWorkgroupSize && sharedBytes(l) <= Math.min(caps.maxSharedBytes, 48 * 1024);
}

/** Workgroups that keep a large GPU busy: below, a smaller tile is worth its extra reads (tiled_matmul.ts's rule). */
const WANT_TILES = 256;

/**
 * The largest layout that still makes WANT_TILES workgroups, else the one with the most; K slices of 64 where k
 * allows. On the H200's Vulkan (bench/mma.ts --backend vulkan, x prepared): 512 x 8192 x 2048 in 80.9 µs with
 * 64-deep slices against 111.7 with 32 (212 / 154 TFLOP/s), 2048 x 14336 x 4096 in 1069 against 1491, 512 x 2048 x
 * 2048 in 26.6 against 37.3; a 4-subgroup 128 x 128 tile of 64 x 64 was faster at 512 x 8192 x 2048 (58.5 µs)
 * but slower at every other shape measured.
 */
export function coopLayout(caps: Caps, batch: number, n: number, k: number, w = "bf16"): CoopLayout | undefined {
  const bk = isQType(w) ? tiledSlice(w) : k % 64 === 0 ? 64 : 32;
  const cands: CoopLayout[] = [
    { bm: 128, bn: 128, wm: 64, wn: 32, bk }, { bm: 64, bn: 128, wm: 32, wn: 32, bk }, { bm: 64, bn: 64, wm: 32, wn: 32, bk },
    { bm: 32, bn: 64, wm: 16, wn: 32, bk },
  ].filter((l) => coopMatmulFits(caps, w, n, k, l));
  if (!cands.length) return undefined;
  const tiles = (l: CoopLayout) => Math.ceil(batch / l.bm) * Math.ceil(n / l.bn);
  return cands.find((l) => tiles(l) >= WANT_TILES) ?? cands.reduce((a, l) => (tiles(l) > tiles(a) ? l : a));
}

/**
 * Bindings, in order (as tiled_matmul.ts): x f32 [batch, k] (r; `prepared`: u32 bf16 words [batch, k / 2]); W bf16 [n, k] (r); bias f32 [n] (r, when
 * `bias`); residual f32 [batch, n] (r, when `residual`; may be the same bytes as y); y f32 [batch, n] (w).
 */
export function coopMatmul(caps: Caps, s: CoopMatmulShape): Kernel {
  const { n, k, w, batch: m } = s;
  if (!(n >= 1 && k >= 1 && m >= 1)) throw new KernelError(`coop matmul: bad shape n=${n} k=${k} batch=${m}`);
  if (m * Math.max(n, k) >= 2 ** 32 || n * k >= 2 ** 32) throw new KernelError("coop matmul: indices exceed 32 bits");
  const l = s.layout ?? coopLayout(caps, m, n, k, w);
  if (!l || !coopMatmulFits(caps, w, n, k, l)) throw new KernelError(`coop matmul ${w} n=${n} k=${k}: no layout fits the target (${JSON.stringify(l)})`);
  const { bm, bn, wm, wn } = l, BK = l.bk ?? 32, ROW = rowWords(BK);
  const sg = caps.subgroupSize, warps = subgroups(l), threads = warps * sg, across = bn / wn;
  const mTiles = Math.ceil(m / bm), nTiles = Math.ceil(n / bn), total = mTiles * nTiles;
  const grid = gridFor(caps, total);
  const name = s.name ?? `coop_matmul_${w}_n${n}_k${k}_b${m}_${bm}x${bn}x${BK}_${wm}x${wn}${s.prepared ? "_xw" : ""}${s.bias ? "_bias" : ""}${s.residual ? "_res" : ""}`;
  const b = new KernelBuilder(name, { workgroup: threads, grid });
  const x = b.buffer("x", s.prepared ? "u32" : "f32", "r");
  const W = b.buffer("w", elemOf(w), "r");
  const bias = s.bias ? b.buffer("bias", "f32", "r") : undefined;
  const res = s.residual ? b.buffer("residual", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");
  const tile = b.shared("tiles", "u32", (bm + bn) * ROW);
  const out = b.shared("out", "f32", warps * 256);

  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return()); // whole workgroups
  const mt = nTiles > 1 ? L.div(nTiles) : L, nt = nTiles > 1 ? L.mod(nTiles) : u32(0);
  const m0 = b.let(mt.mul(bm), "u32", "m0"), n0 = b.let(nt.mul(bn), "u32", "n0");
  const t = b.lid.x, sgid = b.builtin("sgid");
  const wr = b.let(across > 1 ? sgid.div(across) : sgid, "u32", "wr"), wc = b.let(across > 1 ? sgid.mod(across) : u32(0), "u32", "wc");

  const sc: StageCx = { b, t, threads, BK, ROW, tile };
  const xs = s.prepared ? wordStager(sc, x, bm, m0, m, k, 0) : floatStager(sc, x, bm, m0, m, k);
  const ws = isQType(w) ? blockStager(sc, W, w, bn, n0, n, k, bm) : wordStager(sc, W, bn, n0, n, k, bm);
  const loads = (k0: Val) => (xs.load(k0), ws.load(k0));
  const stores = () => (xs.store(), ws.store());

  const fi = wm / 16, fj = wn / 16;
  const acc = Array.from({ length: fi * fj }, () => b.coopMat("acc"));
  const A = Array.from({ length: fi }, () => b.coopMat("a", "bf16"));
  const B = Array.from({ length: fj }, () => b.coopMat("b", "bf16"));
  const aRow = b.let(wr.mul(wm * ROW), "u32", "ar"), bRow = b.let(wc.mul(wn).add(bm).mul(ROW), "u32", "br");
  loads(u32(0));
  b.for(u32(0), u32(k), BK, (k0) => {
    stores();
    b.barrier();
    if (k > BK) b.if(k0.add(BK).lt(k), () => loads(k0.add(BK)));
    for (let kk = 0; kk < BK / 16; kk++) {
      A.forEach((a, i) => b.coopLoad(a, tile, aRow.add(16 * i * ROW + 8 * kk), ROW));
      B.forEach((bb, j) => b.coopLoad(bb, tile, bRow.add(16 * j * ROW + 8 * kk), ROW));
      for (let i = 0; i < fi; i++) for (let j = 0; j < fj; j++) b.coopMulAdd(acc[i * fj + j], A[i], B[j]);
    }
    b.barrier(); // the next slice overwrites the tiles
  });

  // epilogue: one accumulator at a time through the subgroup's scratch
  const lane = b.builtin("lane"), scratch = b.let(sgid.mul(256), "u32", "so");
  for (let i = 0; i < fi; i++) {
    for (let j = 0; j < fj; j++) {
      b.coopStore(acc[i * fj + j], out, scratch, 16);
      b.barrier();
      for (let r = 0; r < 256 / sg; r++) {
        const e = r ? lane.add(r * sg) : lane;
        const row = b.let(m0.add(wr.mul(wm)).add(16 * i).add(e.shr(4)), "u32", "ym");
        const col = b.let(n0.add(wc.mul(wn)).add(16 * j).add(e.and(15)), "u32", "yn");
        const emit = () => {
          let v = b.sload(out, scratch.add(e));
          if (bias) v = v.add(b.load(bias, col));
          const at = b.let(row.mul(n).add(col), "u32", "yi");
          if (res) v = v.add(b.load(res, at));
          b.store(y, at, v);
        };
        const inRow = m % bm !== 0, inCol = n % bn !== 0;
        if (inRow || inCol) b.if(inRow && inCol ? row.lt(m).and(col.lt(n)) : inRow ? row.lt(m) : col.lt(n), emit);
        else emit();
      }
      b.barrier(); // the next accumulator overwrites the scratch
    }
  }
  return b.build();
}

// Staging: a slice is loaded into registers (`load`) and written to shared memory later (`store`), so the next
// slice's global loads are in flight during this one's multiplies. An item is 16 bytes of a staged row (4 of
// its words: 8 bf16), or, for x as f32, 4 values that become 2 words.
export interface Stager {
  /** `set`: which of the stager's register sets takes the slice (blocks loaded `late` hold several). */
  load(k0: Val, set?: number): void;
  /** Into the staged rows, `rows` further down with it (a second stage). */
  store(rows?: Val, set?: number): void;
}

/** What the stagers share: the workgroup's invocations, the slice width BK and the tiles' rows of ROW words. */
export interface StageCx {
  b: KernelBuilder;
  t: Val;
  threads: number;
  BK: number;
  ROW: number;
  tile: Shared;
}

// registers for the rounds of `count` items over the workgroup (common.ts eachItem)
const slots = (c: StageCx, count: number) => Math.ceil(count / c.threads);
const spread = (c: StageCx, count: number, body: (e: Val, i: number) => void) => eachItem(c.b, c.t, c.threads, count, body);

/**
 * A bf16 [rows, k] matrix as u32 words, rows from r0 (clamped below `limit`), staged at shared row `at0`; with
 * `parts` > 1, part p's slice is the one BK·p further along k, staged `rows` shared rows further down.
 */
export function wordStager(c: StageCx, buf: Buffer, rows: number, r0: Val, limit: number, k: number, at0: number, parts = 1): Stager {
  const { b, BK, ROW, tile } = c, QW = BK / 8, per = rows * QW, count = parts * per;
  const regs = Array.from({ length: slots(c, count) }, () => Array.from({ length: 4 }, () => b.let(u32(0), "u32", "wv")));
  return {
    load: (k0) => spread(c, count, (e, i) => {
      const p = parts > 1 ? e.div(per) : undefined, r = p ? e.mod(per) : e;
      const row = r.div(QW), q = r.mod(QW), kp = p ? k0.add(p.mul(BK)) : k0;
      const at = b.let(r0.add(row).min(limit - 1).mul(k / 2).add(kp.shr(1)).add(q.mul(4)), "u32", "wa");
      b.loadv(buf, at, 4, "u32").forEach((v, j) => b.set(regs[i][j], v));
    }),
    store: (down) => spread(c, count, (e, i) => {
      // part p's rows follow part p - 1's: e / QW counts rows across the parts
      const row = e.div(QW).add(at0);
      const at = b.let((down ? row.add(down) : row).mul(ROW).add(e.mod(QW).mul(4)), "u32", "ws");
      regs[i].forEach((v, j) => b.sstore(tile, at.add(j), v));
    }),
  };
}

/** x f32 [m, k], rows from m0: 4 values a load, rounded to bf16 as they are staged. */
function floatStager(c: StageCx, x: Buffer, bm: number, m0: Val, m: number, k: number): Stager {
  const { b, BK, ROW, tile } = c, QF = BK / 4, count = bm * BK / 4;
  const regs = Array.from({ length: slots(c, count) }, () => Array.from({ length: 4 }, () => b.let(0, "f32", "xv")));
  return {
    load: (k0) => spread(c, count, (e, i) => {
      const row = e.div(QF), q = e.mod(QF);
      const at = b.let(m0.add(row).min(m - 1).mul(k).add(k0).add(q.mul(4)), "u32", "xa");
      b.loadv(x, at, 4).forEach((v, j) => b.set(regs[i][j], v));
    }),
    store: () => spread(c, count, (e, i) => {
      const at = b.let(e.div(QF).mul(ROW).add(e.mod(QF).mul(2)), "u32", "xs");
      for (let h = 0; h < 2; h++) b.sstore(tile, at.add(h), b.pack2("bf16", regs[i][2 * h], regs[i][2 * h + 1]));
    }),
  };
}

/**
 * GGUF blocks W [n, k] of `qt`, rows from n0, staged at shared row `at0`: a slice is one span of the type
 * (dequant.ts: cps chunks of `per` values each); a chunk is decoded (ggml's exact values) as it is loaded, rounded
 * to bf16 pairs, and its words land at its values' places. With `parts` > 1, part p's slice is the one BK·p
 * further along k, staged `bn` shared rows further down. `late`: `load` only issues the chunks' loads (their raw
 * words held), `store` decodes them: work between the two runs while the loads are in flight.
 */
export function blockStager(c: StageCx, W: Buffer, qt: QType, bn: number, n0: Val, n: number, k: number, at0: number, parts = 1, late = false): Stager {
  const { b, BK, ROW, tile } = c;
  const q = QLAYOUT[qt], cps = BK / (q.elems / q.chunks), nb = k / q.elems, spans = q.elems / BK, per = bn * cps, count = parts * per;
  const items = Array.from({ length: slots(c, count) }, () => ({
    at: b.let(u32(0), "u32", "qat"),
    words: Array.from({ length: q.per / 2 }, () => b.let(u32(0), "u32", "qw")),
  }));
  let offs: number[] = []; // each pair's element offset from the chunk's start: the same for every chunk
  const issued: { ch: LoadedChunk; at: Val; defs: Val[] }[][] = []; // late: each set's chunks (first loaded), their first values' places
  /** The slice at k0: its block, first chunk and element offset in the block. */
  const slice = (k0: Val) => ({
    blk: b.let(k0.div(q.elems), "u32", "blk"),
    c0: b.let(spans > 1 ? k0.mod(q.elems).div(BK).mul(cps) : u32(0), "u32", "c0"),
    sb: b.let(spans > 1 ? k0.mod(q.elems) : u32(0), "u32", "sb"),
  });
  /** The chunk's values as bf16 pairs in the item's words. */
  const pack = (ch: QChunk, i: number) => {
    const vals = chunkValues(ch, b);
    if (vals.length !== q.per || vals.some((v, j) => j % 2 === 1 && v.off !== vals[j - 1].off + 1 || j % 2 === 0 && v.off % 2 !== 0)) {
      throw new KernelError(`coop matmul ${qt}: a chunk's values do not pair up`);
    }
    offs = vals.filter((_, j) => j % 2 === 0).map((v) => v.off);
    items[i].words.forEach((wd, j) => b.set(wd, b.pack2("bf16", vals[2 * j].v, vals[2 * j + 1].v)));
  };
  return {
    load: (k0, set = 0) => {
      // late: every local a chunk's decoding may read is defined per item (see `home` below)
      const one = parts > 1 || late ? undefined : slice(k0);
      spread(c, count, (e, i) => {
        const p = parts > 1 ? e.div(per) : undefined, r = p ? e.mod(per) : e;
        const it = items[i], col = cps > 1 ? r.div(cps) : r, ci = cps > 1 ? r.mod(cps) : u32(0);
        let ch!: LoadedChunk, sb!: Val;
        const defs = b.defines(() => {
          const sl = one ?? slice(parts > 1 ? k0.add(p!.mul(BK)) : k0);
          const base = b.let(n0.add(col).min(n - 1).mul(nb).add(sl.blk).mul(qWords(qt)), "u32", "base");
          ch = loadChunk(b, W, qt, base, sl.c0.add(ci));
          sb = sl.sb;
        });
        if (late) {
          // a set's chunks are decoded from the locals of its first load: a later load of the set copies into them
          const home = (issued[set] ??= [])[i];
          if (!home) issued[set][i] = { ch, at: b.let(ch.at.sub(sb), "u32", "qat"), defs };
          else {
            if (home.defs.length !== defs.length) throw new KernelError(`coop matmul ${qt}: a chunk's loads define ${defs.length} locals, its first ${home.defs.length}`);
            defs.forEach((d, j) => b.set(home.defs[j], d));
            b.set(home.at, ch.at.sub(sb));
          }
          return;
        }
        const now = ch.decode();
        b.set(it.at, ch.at.sub(sb));
        pack(now, i);
      });
    },
    store: (down, set = 0) => spread(c, count, (e, i) => {
      if (late) pack(issued[set][i].ch.decode(), i);
      const at = late ? issued[set][i].at : items[i].at;
      // part p's rows follow part p - 1's: e / cps counts columns across the parts
      const col = (cps > 1 ? e.div(cps) : e).add(at0);
      const row = b.let((down ? col.add(down) : col).mul(ROW), "u32", "qr");
      items[i].words.forEach((wd, j) => b.sstore(tile, row.add(at.add(offs[j]).shr(1)), wd));
    }),
  };
}
