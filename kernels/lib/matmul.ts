// gemv / small-batch matmul: y[b, n] = sum_k x[b, k] * W[n, k] (+ bias[n]) (+ residual[b, n]).
// The decode step is memory-bound on reading W, so the kernel is laid out for bandwidth: one team (a
// subgroup, or a workgroup without subgroups) per output row, lanes striding over k with 16-byte loads so a
// subgroup's loads cover contiguous memory, up to 8 batch rows sharing every weight load, one reduction at
// the end. GGUF blocks are dequantized in registers (dequant.ts): lanes stride over the row's block chunks, so
// neighbouring lanes read neighbouring bytes, and every batch row shares each chunk's decode.
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { elemOf, gridFor, pairwise, team, teamIds, teamReduce, vecWidth, wgIndex, type WType } from "./common.ts";
import { chunkDot, dequantChunk, isQType, QLAYOUT, qWords } from "./dequant.ts";

export interface MatmulShape {
  /** Output features (rows of W). */
  n: number;
  /** Input features (columns of W); a whole number of blocks for block types. */
  k: number;
  /** Rows of x (tokens); default 1 (gemv). */
  batch?: number;
  w: WType;
  bias?: boolean;
  /** Adds a residual [batch, n] (may be bound to the same bytes as y). */
  residual?: boolean;
  name?: string;
  /** Lanes per output row (several subgroups split k, combined in shared memory); default matmulWide(). */
  wide?: number;
  /**
   * Batch rows one pass carries (default MATMUL_BATCH_TILE): W is read ceil(batch / tile) times. A row's sums
   * run in the same order at any tile, so the tile never changes a result.
   */
  tile?: number;
}

/**
 * Lanes per row: one subgroup when there are rows enough to fill a large GPU (n >= 8192), up to 4 subgroups
 * for fewer rows, never more than leaves each lane two 16-byte loads of a row.
 */
export function matmulWide(caps: Caps, n: number, k: number, w: WType): number | undefined {
  const sg = caps.subgroupSize;
  if (!caps.subgroups || sg <= 1) return undefined;
  const perLoad = w === "f32" ? 4 : w === "f16" || w === "bf16" ? 8 : QLAYOUT[w].per; // elements a lane takes per step
  let sgs = 1;
  while (sgs < 4 && n * sgs * 2 <= 8192 && k >= sg * sgs * 2 * perLoad * 2) sgs *= 2;
  return sgs > 1 ? sgs * sg : undefined;
}

/** Batch rows one pass of the kernel carries in registers. */
export const MATMUL_BATCH_TILE = 8;

/**
 * Bindings, in order: x f32 [batch, k] (r); W [n, k] in layout `w` (r; block types as raw GGUF block bytes,
 * declared u8, 16-byte aligned); bias f32 [n] (r, when `bias`); residual f32 [batch, n] (r, when `residual`); y f32 [batch, n] (w).
 */
export function matmul(caps: Caps, s: MatmulShape): Kernel {
  const { n, k, w } = s;
  const batch = s.batch ?? 1;
  if (!(n >= 1 && k >= 1 && batch >= 1)) throw new KernelError(`matmul: bad shape n=${n} k=${k} batch=${batch}`);
  if (isQType(w) && k % QLAYOUT[w].elems !== 0) throw new KernelError(`matmul ${w}: k=${k} is not a multiple of ${QLAYOUT[w].elems}`);
  if (n * k >= 2 ** 32 || batch * Math.max(n, k) >= 2 ** 32) throw new KernelError("matmul: indices exceed 32 bits");
  const tile = s.tile ?? MATMUL_BATCH_TILE;
  if (!(Number.isInteger(tile) && tile >= 1 && tile <= 64)) throw new KernelError(`matmul: batch tile ${tile} is not in 1..64`);
  const bt = Math.min(batch, tile);
  const chunks = Math.ceil(batch / bt);
  const t = team(caps, { rows: n, wide: s.wide ?? matmulWide(caps, n, k, w) });
  const rowWgs = Math.ceil(n / t.rows);
  const total = rowWgs * chunks;
  const grid = gridFor(caps, total);
  const name = s.name ?? `matmul_${w}_n${n}_k${k}_b${batch}${bt !== Math.min(batch, MATMUL_BATCH_TILE) ? `_t${bt}` : ""}${s.bias ? "_bias" : ""}${s.residual ? "_res" : ""}`;
  const b = new KernelBuilder(name, { workgroup: t.size, grid });
  const x = b.buffer("x", "f32", "r");
  const W = b.buffer("w", elemOf(w), "r");
  const bias = s.bias ? b.buffer("bias", "f32", "r") : undefined;
  const res = s.residual ? b.buffer("residual", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");

  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return());
  const chunk = chunks > 1 ? b.let(L.div(rowWgs), "u32", "chunk") : u32(0);
  const rw = chunks > 1 ? L.mod(rowWgs) : L;
  const { lane, local } = teamIds(b, t);
  const row = b.let(t.rows === 1 ? rw : rw.mul(t.rows).add(local), "u32", "row");
  if (rowWgs * t.rows > n) b.if(row.ge(n), () => b.return());

  // x rows this pass reads; past the batch they repeat the last row (no divergence) and are not written.
  const xrow: Val[] = [];
  for (let j = 0; j < bt; j++) {
    xrow.push(chunks > 1 ? b.let(chunk.mul(bt).add(j).min(batch - 1), "u32", "xr").mul(k) : u32(j * k));
  }
  // A one-lane team (a CPU) is latency-bound on the rounded add chain: give it independent chains, one
  // per vector element, summed pairwise at the end. Wider teams are memory-bound: one chain per lane.
  const vecF = w === "f32" || w === "f16" || w === "bf16" ? vecWidth(w === "f32" ? 4 : 2, k) : 1;
  const chains = t.lanes === 1 ? vecF : 1;
  const acc = Array.from({ length: bt }, () => Array.from({ length: chains }, () => b.let(f32(0), "f32", "acc")));
  const dot = (j: number, ws: Val[], xs: Val[]): void => {
    const next = acc[j].map((a) => a);
    for (let e = 0; e < ws.length; e++) next[e % chains] = next[e % chains].add(ws[e].mul(xs[e]));
    next.forEach((v, c) => b.set(acc[j][c], v));
  };
  const loadX = (j: number, at: Val, count: number): Val[] => {
    const xv = Math.min(4, vecWidth(4, k), count);
    const out: Val[] = [];
    for (let o = 0; o < count; o += xv) out.push(...(xv > 1 ? b.loadv(x, xrow[j].add(at).add(o), xv) : [b.load(x, xrow[j].add(at).add(o))]));
    return out;
  };

  if (w === "f32" || w === "f16" || w === "bf16") {
    const vec = vecF;
    const base = b.let(row.mul(k), "u32", "wrow");
    const trips = Math.ceil(k / (t.lanes * vec));
    b.for(lane.mul(vec), u32(k), t.lanes * vec, (i) => {
      const ws = vec > 1 ? b.loadv(W, base.add(i), vec) : [b.load(W, base.add(i))];
      for (let j = 0; j < bt; j++) dot(j, ws, loadX(j, i, vec));
    }, { unroll: Math.min(4, trips) }); // unrolled, a GPU keeps several 16-byte loads in flight per lane
  } else {
    // Lanes stride over the row's chunks (block-major): chunk g is block g / chunks, piece g % chunks.
    const q = QLAYOUT[w], nb = k / q.elems, total = nb * q.chunks, cs = Math.log2(q.chunks);
    const rowBase = b.let(row.mul(nb), "u32", "rblk");
    b.for(lane, u32(total), t.lanes, (gi) => {
      const blk = b.let(gi.shr(cs), "u32", "blk");
      const ch = dequantChunk(b, W, w, b.let(rowBase.add(blk).mul(qWords(w)), "u32", "base"), gi.and(q.chunks - 1));
      const xat = b.let(blk.mul(q.elems).add(ch.at), "u32", "xat");
      for (let j = 0; j < bt; j++) {
        const xs = ch.groups.map((g) => loadX(j, g.off ? xat.add(g.off) : xat, g.q.length));
        b.set(acc[j][0], acc[j][0].add(chunkDot(ch, xs)));
      }
    }, { unroll: Math.min(2, Math.ceil(total / t.lanes)) });
  }

  const r = acc.map((a) => teamReduce(b, t, "add", pairwise(a)));
  const write = () => {
    for (let j = 0; j < bt; j++) {
      const bj = chunks > 1 ? chunk.mul(bt).add(j) : u32(j);
      const emit = () => {
        let v = r[j];
        if (bias) v = v.add(b.load(bias, row));
        const at = b.let(bj.mul(n).add(row), "u32", "yi");
        if (res) v = v.add(b.load(res, at));
        b.store(y, at, v);
      };
      if (chunks > 1 && batch % bt !== 0 && j >= batch % bt) b.if(bj.lt(batch), emit);
      else emit();
    }
  };
  if (t.lanes === 1) write();
  else b.if(lane.eq(u32(0)), write);
  return b.build();
}
