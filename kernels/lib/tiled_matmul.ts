// Shared-memory tiled matmul for many rows: y[m, n] = sum_k x[m, k] * W[n, k] (+ bias[n]) (+ residual[m, n]),
// the bindings and epilogues of matmul.ts, for prefill chunks and encoder batches where matmul.ts (one team
// per output row, at most 8 x rows per pass) would read W once per 8 rows.
//
// Layout (classic SGEMM). A workgroup owns a BM x BN tile of y; each invocation a TM x TN register block whose
// rows are ty + i·(BM/TM) and columns tx + j·(BN/TN) (strided, so neighbouring invocations read neighbouring
// shared words and write neighbouring y columns). K is walked in slices of BK: the workgroup stages the x slice
// [BM, BK] and the W slice [BN, BK] in shared memory, k-major (W converted to f32 as it is staged: f16/bf16
// widened, GGUF blocks dequantized with dequant.ts's chunk decoder, ggml's exact values), a barrier, then every
// invocation runs the slice's outer products from shared memory into its registers; the next slice's global
// loads (and block decodes) go into registers before that, so they are in flight during the products. W is read
// once per BM rows, x once per BN columns. Rows past m read the last row (clamped) and columns past n the last
// column; neither is written. The layout (tiledLayout) is chosen from the target's limits and the grid it makes.
// Columns of k past K (float weights only: block rows are whole slices) are staged as zeros.
//
// Summation order (batch invariance, issue 14): every y[m, n] is one fused multiply-add chain over k = 0, 1,
// ..., K-1 in order (acc = fma(x[m, k], W[n, k], acc) from acc = 0), then + bias, then + residual. The tile
// sizes, the slice width and the row's place in the batch only decide which invocation runs the chain and
// when, never its order: a row's bits depend on its x row and W alone, at any M. (matmul.ts reduces in a
// different order, so a row's bits differ between the two kernels: the lowering picks by row count.)
import { f32, fma, type Kernel, KernelBuilder, KernelError, type Shared, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { eachItem, elemOf, gridFor, vecWidth, wgIndex, type WType } from "./common.ts";
import { chunkValues, dequantChunk, isQType, QLAYOUT, type QType, qWords } from "./dequant.ts";
import type { MatmulShape } from "./matmul.ts";

/** Tile shape: BM x BN outputs per workgroup, TM x TN per invocation, K slices of BK. */
export interface TiledLayout {
  bm: number;
  bn: number;
  tm: number;
  tn: number;
  bk: number;
}

export interface TiledMatmulShape extends Omit<MatmulShape, "wide" | "tile"> {
  batch: number;
  /** Overrides the layout tiledLayout picks (tuning runs; must fit the target). */
  layout?: TiledLayout;
}

/** A K slice of a block type: one span of its elements (dequant.ts QLayout.span chunks). */
function spanOf(w: QType): number {
  const q = QLAYOUT[w];
  return (q.elems / q.chunks) * q.span;
}

/** K slice of a weight type: 16 for floats, a block type's span. */
export function tiledSlice(w: WType): number {
  return isQType(w) ? spanOf(w) : 16;
}

/** Shared bytes a layout stages (x and W slices, f32). */
function sharedBytes(l: TiledLayout): number {
  return (l.bm + l.bn) * l.bk * 4;
}

/** Static shared memory every target here accepts without an opt-in (PTX's static limit). */
const SHARED_CAP = 48 * 1024;

/** Whether a layout fits the target: its invocations, its shared memory (within PTX's static 48 KiB). */
export function tiledFits(caps: Caps, l: TiledLayout): boolean {
  return l.bm % l.tm === 0 && l.bn % l.tn === 0 && (l.bm / l.tm) * (l.bn / l.tn) <= caps.maxWorkgroupSize &&
    sharedBytes(l) <= Math.min(caps.maxSharedBytes, SHARED_CAP);
}

/** Workgroups that keep a large GPU busy (the H200 has 132 SMs): below, a smaller tile is worth its extra reads. */
const WANT_TILES = 256;

/**
 * The layout for this target, weight type and shape, or undefined where none fits its limits (a workgroup of
 * (BM/TM)·(BN/TN) invocations, (BM + BN)·BK f32 of shared memory). The largest tile (fewest reads of W and x
 * per output) that still makes WANT_TILES workgroups, else the one with the most workgroups (then the most
 * invocations): 128 x 128 tiles of 8 x 8 (4 products per shared load) for large batches down to 16 x 16 of
 * 1 x 1, of 256 invocations, and
 * 64- or 16-invocation ones for small workgroup limits. Small shared memory (wgpu's 16 KiB, a block type's
 * wide slice) leaves only the small tiles. The layout never changes a row's summation order.
 */
export function tiledLayout(caps: Caps, w: WType, batch: number, n: number): TiledLayout | undefined {
  const bk = tiledSlice(w);
  const cands: [number, number, number, number][] = [
    [128, 128, 8, 8], [128, 64, 8, 4], [64, 64, 4, 4], [64, 32, 4, 2], [32, 32, 2, 2], [16, 32, 1, 2], [16, 16, 1, 1], // 256 invocations
    [32, 32, 4, 4], [16, 16, 2, 2], [16, 16, 4, 4], // 64 and 16, for small workgroup limits
  ];
  const threads = (l: TiledLayout) => (l.bm / l.tm) * (l.bn / l.tn);
  const tiles = (l: TiledLayout) => Math.ceil(batch / l.bm) * Math.ceil(n / l.bn);
  const fits = cands.map(([bm, bn, tm, tn]) => ({ bm, bn, tm, tn, bk }))
    .filter((l) => tiledFits(caps, l));
  if (!fits.length) return undefined;
  return fits.find((l) => tiles(l) >= WANT_TILES) ??
    fits.reduce((a, l) => tiles(l) > tiles(a) || (tiles(l) === tiles(a) && threads(l) > threads(a)) ? l : a);
}

/**
 * Bindings, in order (as matmul.ts): x f32 [batch, k] (r); W [n, k] in layout `w` (r; block types as raw GGUF
 * block bytes, declared u8, 16-byte aligned); bias f32 [n] (r, when `bias`); residual f32 [batch, n] (r, when
 * `residual`; may be the same bytes as y); y f32 [batch, n] (w).
 */
export function tiledMatmul(caps: Caps, s: TiledMatmulShape): Kernel {
  const { n, k, w, batch: m } = s;
  if (!(n >= 1 && k >= 1 && m >= 1)) throw new KernelError(`tiled matmul: bad shape n=${n} k=${k} batch=${m}`);
  const q = isQType(w) ? QLAYOUT[w] : undefined;
  if (isQType(w) && k % q!.elems !== 0) throw new KernelError(`tiled matmul ${w}: k=${k} is not a multiple of ${q!.elems}`);
  if (n * k >= 2 ** 32 || m * Math.max(n, k) >= 2 ** 32) throw new KernelError("tiled matmul: indices exceed 32 bits");
  const l = s.layout ?? tiledLayout(caps, w, m, n);
  if (!l) throw new KernelError(`tiled matmul ${w}: no tile layout fits the target's limits`);
  const { bm, bn, tm, tn, bk } = l;
  if (bm % tm || bn % tn || (isQType(w) && bk !== spanOf(w))) throw new KernelError(`tiled matmul: bad layout ${JSON.stringify(l)}`);
  const tx = bn / tn, ty = bm / tm, threads = tx * ty;
  if (!tiledFits(caps, l)) {
    throw new KernelError(`tiled matmul: layout ${JSON.stringify(l)} exceeds the target's limits`);
  }
  const mTiles = Math.ceil(m / bm), nTiles = Math.ceil(n / bn), total = mTiles * nTiles;
  const grid = gridFor(caps, total);
  const name = s.name ?? `tiled_matmul_${w}_n${n}_k${k}_b${m}_${bm}x${bn}_${tm}x${tn}${s.bias ? "_bias" : ""}${s.residual ? "_res" : ""}`;
  const b = new KernelBuilder(name, { workgroup: threads, grid });
  const x = b.buffer("x", "f32", "r");
  const W = b.buffer("w", elemOf(w), "r");
  const bias = s.bias ? b.buffer("bias", "f32", "r") : undefined;
  const res = s.residual ? b.buffer("residual", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");
  const sx = b.shared("tx", "f32", bm * bk), sw = b.shared("tw", "f32", bn * bk);

  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return()); // whole workgroups: no barrier split
  const mt = nTiles > 1 ? L.div(nTiles) : L, nt = nTiles > 1 ? L.mod(nTiles) : u32(0);
  const m0 = b.let(mt.mul(bm), "u32", "m0"), n0 = b.let(nt.mul(bn), "u32", "n0");
  const t = b.lid.x;
  const cx = b.let(tx > 1 ? t.mod(tx) : u32(0), "u32", "tx"), cy = b.let(tx > 1 ? t.div(tx) : t, "u32", "ty");
  const acc = Array.from({ length: tm * tn }, () => b.let(f32(0), "f32", "acc"));

  // Cooperative staging: `count` items spread over the workgroup's invocations, item e = t + r·threads. A
  // slice is loaded into registers first (`load`) and written to shared memory later (`store`), so the next
  // slice's global loads are in flight while the current one is multiplied.
  const each = (count: number, body: (e: Val, r: number) => void) => eachItem(b, t, threads, count, body);
  interface Stager {
    load(k0: Val): void;
    store(): void;
  }
  // A row-major [rows, K] float matrix's slice [rows, bk] at column k0, k-major in shared memory.
  const floatStager = (buf: typeof x, mem: Shared, rows: number, r0: Val, limit: number, esize: number): Stager => {
    const vw = Math.min(4, vecWidth(esize, k), bk);
    const per = bk / vw, count = rows * per;
    const regs = Array.from({ length: Math.ceil(count / threads) }, () => Array.from({ length: vw }, () => b.let(f32(0), "f32", "sv")));
    const geom = (e: Val) => ({ row: per > 1 ? e.div(per) : e, kq: per > 1 ? e.mod(per).mul(vw) : u32(0) });
    return {
      load: (k0) => each(count, (e, r) => {
        const { row, kq } = geom(e);
        const kk = b.let(k0.add(kq), "u32", "kk");
        const at = b.let(r0.add(row).min(limit - 1).mul(k).add(kk), "u32", "at");
        // k % vw == 0, so a vector starting inside the row ends inside it; past k the slice holds zeros
        b.if(kk.lt(k), () => {
          const got = vw > 1 ? b.loadv(buf, at, vw) : [b.load(buf, at)];
          got.forEach((v, i) => b.set(regs[r][i], v));
        }, () => regs[r].forEach((v) => b.set(v, f32(0))));
      }),
      store: () => each(count, (e, r) => {
        const { row, kq } = geom(e);
        regs[r].forEach((v, i) => b.sstore(mem, kq.add(i).mul(rows).add(row), v));
      }),
    };
  };
  const blockStager = (): Stager => {
    const qt = w as QType, cps = QLAYOUT[qt].span, nb = k / q!.elems, spans = q!.elems / bk, count = bn * cps;
    // declared here, outside the loads' branches: the registers outlive them
    const items = Array.from({ length: Math.ceil(count / threads) }, () => ({
      at: b.let(u32(0), "u32", "qat"),
      vals: Array.from({ length: q!.per }, () => b.let(f32(0), "f32", "qv")),
    }));
    let offs: number[] = []; // each value's element offset from the chunk's start: the same for every chunk
    const geom = (e: Val) => ({ col: cps > 1 ? e.div(cps) : e, ci: cps > 1 ? e.mod(cps) : u32(0) });
    return {
      load: (k0) => {
        const blk = b.let(k0.div(q!.elems), "u32", "blk");
        const c0 = b.let(spans > 1 ? k0.mod(q!.elems).div(bk).mul(cps) : u32(0), "u32", "c0");
        const sb = b.let(spans > 1 ? k0.mod(q!.elems) : u32(0), "u32", "sb");
        each(count, (e, r) => {
          const { col, ci } = geom(e);
          const base = b.let(n0.add(col).min(n - 1).mul(nb).add(blk).mul(qWords(qt)), "u32", "base");
          const ch = dequantChunk(b, W, qt, base, c0.add(ci));
          b.set(items[r].at, ch.at.sub(sb));
          const vals = chunkValues(ch, b);
          if (vals.length !== q!.per) throw new KernelError(`tiled matmul ${w}: a chunk of ${vals.length} values`);
          offs = vals.map((v) => v.off);
          vals.forEach((v, i) => b.set(items[r].vals[i], v.v));
        });
      },
      store: () => each(count, (e, r) => {
        const { col } = geom(e);
        items[r].vals.forEach((v, i) => b.sstore(sw, items[r].at.add(offs[i]).mul(bn).add(col), v));
      }),
    };
  };

  const xs = floatStager(x, sx, bm, m0, m, 4);
  const ws = isQType(w) ? blockStager() : floatStager(W, sw, bn, n0, n, w === "f32" ? 4 : 2);
  xs.load(u32(0));
  ws.load(u32(0));
  b.for(u32(0), u32(k), bk, (k0) => {
    xs.store();
    ws.store();
    b.barrier();
    if (k > bk) {
      b.if(k0.add(bk).lt(k), () => {
        xs.load(k0.add(bk));
        ws.load(k0.add(bk));
      });
    }
    b.for(u32(0), u32(bk), 1, (kk) => {
      const xv = Array.from({ length: tm }, (_, i) => b.let(b.sload(sx, kk.mul(bm).add(cy).add(i * ty)), "f32", "a"));
      const wv = Array.from({ length: tn }, (_, j) => b.let(b.sload(sw, kk.mul(bn).add(cx).add(j * tx)), "f32", "b"));
      for (let i = 0; i < tm; i++) for (let j = 0; j < tn; j++) b.set(acc[i * tn + j], fma(xv[i], wv[j], acc[i * tn + j]));
    }, { unroll: Math.min(bk, 16) });
    b.barrier(); // the next slice overwrites the tiles
  });

  for (let i = 0; i < tm; i++) {
    const row = b.let(m0.add(cy).add(i * ty), "u32", "ym");
    const rowIn = () => {
      for (let j = 0; j < tn; j++) {
        const col = b.let(n0.add(cx).add(j * tx), "u32", "yn");
        const emit = () => {
          let v = acc[i * tn + j];
          if (bias) v = v.add(b.load(bias, col));
          const at = b.let(row.mul(n).add(col), "u32", "yi");
          if (res) v = v.add(b.load(res, at));
          b.store(y, at, v);
        };
        if (n % bn !== 0) b.if(col.lt(n), emit);
        else emit();
      }
    };
    if (m % bm !== 0) b.if(row.lt(m), rowIn);
    else rowIn();
  }
  return b.build();
}
