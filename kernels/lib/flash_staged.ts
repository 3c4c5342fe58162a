// Prefill attention on warp MMA tiles with shared-memory staging (caps.mma and caps.staging: PTX on sm_80+):
// attention()'s contract (causal over positions <= pos + row), for long prefill chunks. Two kernels:
// - flashPrepKV turns the K/V cache's visible positions (0 .. pos + rows, rounded up to a tile) into f16 MMA
//   halves, hi and (with split) lo parts, laid out [part][kv head][position][hd], once per chunk and layer,
//   where flash.ts re-rounds every K/V value in every warp that reads it;
// - flashStaged: a workgroup of `warps` warps owns 16 * warps query rows of one head and walks the positions in
//   tiles of `bkv`: each tile's K and V halves land in shared memory by cp.async (the next tile's copies fly
//   while the warps work on this one), S = Q K^T takes K fragments by ldmatrix, the online softmax runs on S's
//   fragments as in flash.ts, and O += P V takes V's fragments by ldmatrix.trans (V is [position][hd], the MMA
//   wants pairs along positions). A warp skips the tiles wholly past its last row's position.
//
// Precision: as flash.ts (split: hi*hi + hi*lo + lo*hi per product, ~21 bits of each operand; unsplit: f16).
// Rows of 16-byte chunks in shared memory are XOR-swizzled (chunk ^ row & 7), so the eight rows an ldmatrix
// phase reads fall in distinct banks.
import { f32, type Kernel, KernelBuilder, KernelError, type Shared, u32, un, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import type { AttentionShape } from "./attention.ts";
import { gridFor, wgIndex } from "./common.ts";
import { f16Parts, f16Words, mmaSplit, quadRowSums } from "./flash_frag.ts";

export interface FlashStagedShape extends AttentionShape {
  /** Operands as hi + lo f16 parts (three MMAs a product); default true. */
  split?: boolean;
  /** Warps (16 query rows each) per workgroup; default 4. */
  warps?: number;
  /** Positions per staged tile: 32 or 64; default defaultBkv's. */
  bkv?: number;
}

/**
 * Positions per tile: 64, or 32 at hd 128 with split operands, where 64 would take 160 KiB of shared memory (two
 * K/V stages of hi and lo halves, and Q) and leave one 4-warp workgroup an SM; 32 takes 96 KiB, two workgroups.
 * Unsplit, 64 at hd 128 takes 80 KiB (the 8B's 2048-row chunk on the H200: 247.6 µs a layer against 278.6 at 32).
 */
export function defaultBkv(hd: number, split = true): number {
  return hd >= 128 && split ? 32 : 64;
}

/** Whether the staged flash attention takes this shape on this target (hd 64 or 128: 8+ chunks a row). */
export function flashStagedFits(caps: Caps, s: FlashStagedShape): boolean {
  const warps = s.warps ?? 4, bkv = s.bkv ?? defaultBkv(s.hd, s.split ?? true), parts = (s.split ?? true) ? 2 : 1;
  return !!caps.mma && !!caps.staging && caps.subgroups && caps.subgroupSize === 32 && (s.hd === 64 || s.hd === 128) &&
    s.window === undefined && s.softcap === undefined && s.heads % s.kvHeads === 0 && (s.rows ?? 1) >= 1 &&
    (bkv === 32 || bkv === 64) && 32 * warps <= caps.maxWorkgroupSize &&
    (2 * 2 * parts * bkv + warps * parts * 16) * s.hd * 2 <= caps.maxSharedBytes;
}

/** Bytes of one of flashPrepKV's outputs (K or V halves). */
export function flashPrepBytes(s: Pick<FlashStagedShape, "cap" | "kvHeads" | "hd" | "split">): number {
  return ((s.split ?? true) ? 2 : 1) * s.kvHeads * s.cap * s.hd * 2;
}

/**
 * K and V [cap, kvHeads, hd] (f32/f16/bf16) -> f16 halves kw, vw u32 [parts, kvHeads, cap, hd / 2] at positions
 * 0 .. min(cap, round_up(pos + rows, bkv)); positions from pos + rows on (not written yet) become 0.
 * Bindings: k (r); v (r); pos [1] u32|i32 (r); kw (w); vw (w).
 */
export function flashPrepKV(caps: Caps, s: FlashStagedShape): Kernel {
  const rows = s.rows ?? 1, { kvHeads, hd, cap } = s, kv = s.kv ?? "f32", pt = s.pos ?? "u32";
  const split = s.split ?? true, parts = split ? 2 : 1, bkv = s.bkv ?? defaultBkv(hd, split);
  if (hd % 8 !== 0) throw new KernelError(`flash prep: hd ${hd} is not a multiple of 8`);
  if (parts * kvHeads * cap * hd >= 2 ** 32) throw new KernelError("flash prep: indices exceed 32 bits");
  const per = hd / 8; // 8-value items per (position, head)
  const wg = Math.min(256, caps.maxWorkgroupSize);
  const grid = gridFor(caps, Math.min(4096, Math.ceil((cap * kvHeads * per) / wg)));
  const threads = grid[0] * grid[1] * grid[2] * wg;
  const b = new KernelBuilder(`flash_prep_kv_h${kvHeads}_d${hd}_c${cap}_r${rows}_${kv}_${pt}${split ? "" : "_f16"}`, { workgroup: wg, grid });
  const K = b.buffer("k", kv, "r");
  const V = b.buffer("v", kv, "r");
  const P = b.buffer("pos", pt, "r");
  const kw = b.buffer("kw", "u32", "w");
  const vw = b.buffer("vw", "u32", "w");
  const pos0 = b.let(pt === "i32" ? b.load(P, 0).bitcast("u32").min(cap) : b.load(P, 0).min(cap), "u32", "pos");
  const live = b.let(pos0.add(rows).min(cap), "u32", "live"); // positions written so far
  const end = b.let(live.add(bkv - 1).div(bkv).mul(bkv).min(cap), "u32", "end");
  const first = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "i");
  b.for(first, end.mul(kvHeads * per), threads, (i) => {
    const d8 = b.let(i.mod(per), "u32", "d8"), pr = b.let(i.div(per), "u32", "pr");
    const kh = b.let(pr.mod(kvHeads), "u32", "kh"), p = b.let(pr.div(kvHeads), "u32", "p");
    const ok = b.let(p.lt(live), "bool", "ok");
    const src = b.let(pr.mul(hd).add(d8.mul(8)), "u32", "src");
    const dst = b.let(kh.mul(cap).add(p).mul(hd / 2).add(d8.mul(4)), "u32", "dst");
    for (const [from, to] of [[K, kw], [V, vw]] as const) {
      const v = kv === "f32" ? [...b.loadv(from, src, 4), ...b.loadv(from, src.add(4), 4)] : b.loadv(from, src, 8);
      const x = v.map((e) => b.let(ok.select(e, f32(0)), "f32", "x"));
      const hi = [0, 2, 4, 6].map((j) => b.let(b.pack2("f16", x[j], x[j + 1]), "u32", "hw"));
      b.storev(to, dst, hi);
      if (split) {
        const half = (w: Val, upper: boolean) => un("f16bits", upper ? w.shr(16) : w.and(0xffff));
        const lo = [0, 2, 4, 6].map((j, q) => b.pack2("f16", x[j].sub(half(hi[q], false)), x[j + 1].sub(half(hi[q], true))));
        b.storev(to, dst.add(kvHeads * cap * hd / 2), lo);
      }
    }
  });
  return b.build();
}

/**
 * Bindings: q f32 [rows, heads, hd] (r); kw, vw u32 (r: flashPrepKV's halves of this step); pos [1] u32|i32
 * (r: position of query row 0); out f32 [rows, heads, hd] (w). Faults FAULT.ATTENTION_POS when pos + rows > cap.
 */
export function flashStaged(caps: Caps, s: FlashStagedShape): Kernel {
  const rows = s.rows ?? 1, { heads, kvHeads, hd, cap } = s, pt = s.pos ?? "u32";
  const split = s.split ?? true, parts = split ? 2 : 1, W = s.warps ?? 4, bkv = s.bkv ?? defaultBkv(hd, split), stages = 2;
  if (!flashStagedFits(caps, s)) {
    throw new KernelError(`flash staged: needs caps.mma and caps.staging, hd 64 or 128, no window or softcap, bkv 32 or 64; got hd=${hd} bkv=${bkv}`);
  }
  if (rows > cap) throw new KernelError(`flash staged: ${rows} rows exceed cap ${cap}`);
  if (parts * kvHeads * cap * hd >= 2 ** 32 || rows * heads * hd >= 2 ** 32) throw new KernelError("flash staged: indices exceed 32 bits");
  const group = heads / kvHeads, scale = s.scale ?? 1 / Math.sqrt(hd);
  const BQ = 16 * W, tiles = Math.ceil(rows / BQ), total = tiles * heads;
  const grid = gridFor(caps, total);
  const rowW = hd / 2, C = hd / 8; // words and 16-byte chunks of a staged row
  const region = bkv * rowW; // words of one (tensor, part) tile
  const stageW = 2 * parts * region;
  const name = s.name ?? `flash_staged_r${rows}_h${heads}_kv${kvHeads}_d${hd}_c${cap}_${pt}_w${W}_t${bkv}${split ? "" : "_f16"}`;
  const b = new KernelBuilder(name, { workgroup: 32 * W, grid });
  const q = b.buffer("q", "f32", "r");
  const kw = b.buffer("kw", "u32", "r");
  const vw = b.buffer("vw", "u32", "r");
  const P = b.buffer("pos", pt, "r");
  const out = b.buffer("out", "f32", "w");
  const sm = b.shared("kv", "u32", stages * stageW + W * parts * 16 * rowW); // K/V stages, then Q

  const pos0 = b.let(pt === "i32" ? b.load(P, 0).bitcast("u32") : b.load(P, 0), "u32", "pos");
  b.check(pos0.le(cap - rows), FAULT.ATTENTION_POS);
  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return());
  const tid = b.let(b.lid.x, "u32", "tid");
  const lane = b.let(b.builtin("lane"), "u32", "lane"), warp = b.let(b.builtin("sgid"), "u32", "warp");
  const g = b.let(lane.shr(2), "u32", "g"), t = b.let(lane.and(3), "u32", "t");
  // The last row tiles see the most positions (causal): they go first, every head of one tile together (heads of
  // a GQA group next to each other share K/V in L2), and the light tiles fill the last wave.
  const rt = b.let(u32(tiles - 1).sub(L.div(heads)), "u32", "rt");
  const h = b.let(L.mod(heads), "u32", "h");
  const kvh = b.let(group === 1 ? h : h.div(group), "u32", "kvh");
  const w0 = b.let(rt.mul(BQ).add(warp.mul(16)), "u32", "w0"); // this warp's first row
  const r0 = b.let(w0.add(g), "u32", "r0"), r1 = b.let(r0.add(8), "u32", "r1");
  const qp = [b.let(pos0.add(r0), "u32", "qp"), b.let(pos0.add(r1), "u32", "qp")];
  // positions the workgroup's rows see, in tiles; and the last position this warp's rows see
  const endWg = b.let(pos0.add(rt.mul(BQ).add(BQ - 1).min(rows - 1)).add(1), "u32", "endw");
  const nT = b.let(endWg.add(bkv - 1).div(bkv), "u32", "nt");
  const lastW = b.let(pos0.add(w0.add(15).min(rows - 1)), "u32", "lastw");

  // Copies of one tile: (tensor, part) regions of bkv rows x C chunks, spread over the workgroup's invocations.
  // Their indices are recomputed at each issue (a few integer ops) rather than held in registers across the loop.
  const threads = 32 * W, chunks = bkv * C;
  const load = (base: Val, kt: Val) => {
    const p0 = b.let(kt.mul(bkv), "u32", "lp");
    for (let it = 0; it * threads < chunks; it++) {
      const issue = () => {
        const id = tid.add(it * threads);
        const row = b.let(id.div(C), "u32", "cr"), ch = b.let(id.mod(C), "u32", "cc");
        const src = b.let(kvh.mul(cap).add(p0.add(row).min(cap - 1)).mul(rowW).add(ch.shl(2)), "u32", "cb");
        const so = b.let(base.add(row.mul(rowW)).add(ch.xor(row.and(7)).shl(2)), "u32", "cs");
        for (const [ti, buf] of [kw, vw].entries()) {
          for (let p = 0; p < parts; p++) b.cpAsync(sm, so.add((ti * parts + p) * region), buf, src.add(p * kvHeads * cap * rowW));
        }
      };
      if ((it + 1) * threads > chunks) b.if(tid.add(it * threads).lt(chunks), issue);
      else issue();
    }
  };


  // Q (scaled) as hi/lo halves in shared memory, this warp's 16 rows x hd per part, rows clamped into the
  // chunk; its A fragments come back by ldmatrix per 16-dim step (registers stay free for S and O).
  const qW = 16 * rowW; // words of one warp's part
  const qBase = b.let(warp.mul(parts * qW).add(stages * stageW), "u32", "qs");
  for (let it = 0; it < (16 * rowW) / 32; it++) {
    const id = lane.add(32 * it); // word (row, pair) of the warp's tile
    const row = b.let(id.div(rowW), "u32", "qr"), wd = b.let(id.mod(rowW), "u32", "qw");
    const at = b.let(w0.add(row).min(rows - 1).mul(heads).add(h).mul(hd).add(wd.shl(1)), "u32", "qa");
    const [x0, x1] = b.loadv(q, at, 2);
    const ws = f16Words(b, split, x0.mul(scale), x1.mul(scale));
    const so = b.let(qBase.add(row.mul(rowW)).add(wd.shr(2).xor(row.and(7)).shl(2)).add(wd.and(3)), "u32", "qo");
    ws.forEach((w, p) => b.sstore(sm, so.add(p * qW), w));
  }
  const aRow = b.let(lane.and(15).mul(rowW), "u32", "arow");
  const aKey = b.let(lane.shr(4).xor(lane.and(7)), "u32", "akey");
  const qa = (st: number): Val[][] =>
    Array.from({ length: parts }, (_, p) => b.ldmatrix(sm, qBase.add(p * qW).add(aRow).add(aKey.xor(2 * st).shl(2)), 4));

  load(u32(0), u32(0));
  b.cpCommit();

  // ldmatrix lanes: K (non-trans, two 8-position n tiles x k16) rows (l & 7) + 8 (l >> 4), chunk half (l >> 3) & 1;
  // V (trans, k16 positions x two 8-dim n tiles) rows (l & 7) + 8 ((l >> 3) & 1), chunk half l >> 4. A row's
  // swizzle key is its low 3 bits: l & 7 for both.
  const key = b.let(lane.and(7), "u32", "key");
  const kRow = b.let(key.add(lane.shr(4).shl(3)).mul(rowW), "u32", "krow");
  const kKey = b.let(lane.shr(3).and(1).xor(key), "u32", "kkey");
  const vRow = b.let(key.add(lane.shr(3).and(1).shl(3)).mul(rowW), "u32", "vrow");
  const vKey = b.let(lane.shr(4).xor(key), "u32", "vkey");

  const m = [b.let(f32(-Infinity), "f32", "m"), b.let(f32(-Infinity), "f32", "m")];
  const l = [b.let(f32(0), "f32", "l"), b.let(f32(0), "f32", "l")];
  const dt = hd / 8;
  const o = Array.from({ length: dt }, () => Array.from({ length: 4 }, () => b.let(f32(0), "f32", "o")));
  const rs = b.let(u32(0), "u32", "rs"); // word base of the stage being read

  b.for(u32(0), nT, 1, (kt) => {
    b.cpWait(0);
    b.barrier(); // the tile landed for everyone; everyone is done with the other stage
    const next = b.let(kt.add(1), "u32", "nx");
    b.if(next.lt(nT), () => load(rs.eq(0).select(u32(stageW), u32(0)), next));
    b.cpCommit();
    const p0 = b.let(kt.mul(bkv), "u32", "p0");
    b.if(p0.le(lastW), () => {
      tileMath({ b, sm, split, parts, region, rowW, hd, bkv, qa, kRow, kKey, vRow, vKey, rs, qp, t, m, l, o }, p0);
    });
    b.set(rs, rs.eq(0).select(u32(stageW), u32(0)));
  });

  // finish: row sums over the quad, O / l, rows inside the chunk
  const lt = quadRowSums(b, l);
  for (let rr = 0; rr < 2; rr++) {
    const r = rr ? r1 : r0;
    b.if(r.lt(rows), () => {
      const ob = b.let(r.mul(heads).add(h).mul(hd).add(t.mul(2)), "u32", "ob");
      for (let dn = 0; dn < dt; dn++) b.storev(out, ob.add(8 * dn), [o[dn][2 * rr].div(lt[rr]), o[dn][2 * rr + 1].div(lt[rr])]);
    });
  }
  return b.build();
}

/** What one K/V tile's math reads of flashStaged's setup (its stage in shared memory, Q's fragments, the state). */
interface TileBuild {
  b: KernelBuilder;
  sm: Shared;
  split: boolean;
  parts: number;
  /** Words of one (tensor, part) tile, of a staged row. */
  region: number;
  rowW: number;
  hd: number;
  bkv: number;
  /** Q's A fragments of 16-dim step st, per part. */
  qa: (st: number) => Val[][];
  kRow: Val;
  kKey: Val;
  vRow: Val;
  vKey: Val;
  /** Word base of the stage being read. */
  rs: Val;
  /** Positions of the lane's two rows. */
  qp: Val[];
  t: Val;
  /** The online softmax's running max and sum per row, and O's accumulators (dim tile x fragment). */
  m: Val[];
  l: Val[];
  o: Val[][];
}

/**
 * One K/V tile of positions p0..p0+bkv-1 against the warp's 16 rows: S = Q K^T on MMA tiles, the causal mask, the
 * online softmax's update of m, l and O, then O += P V.
 */
function tileMath(cx: TileBuild, p0: Val): void {
  const { b, sm, split, parts, region, rowW, hd, bkv, qa, kRow, kKey, vRow, vKey, rs, qp, t, m, l, o } = cx;
  const ksteps = hd / 16, dt = hd / 8, nt = bkv / 8;
  // S for positions p0 + 8j + g (B column g of n tile j)
  const sc: Val[][] = Array.from({ length: nt }, () => [f32(0), f32(0), f32(0), f32(0)]);
  for (let st = 0; st < ksteps; st++) {
    const qf = qa(st);
    for (let jj = 0; jj < nt / 2; jj++) {
      const kb = Array.from({ length: parts }, (_, p) =>
        b.ldmatrix(sm, rs.add(p * region + 16 * jj * rowW).add(kRow).add(kKey.xor(2 * st).shl(2)), 4));
      for (const [j, lo] of [[2 * jj, 0], [2 * jj + 1, 2]]) {
        sc[j] = mmaSplit(b, qf, kb.map((w) => [w[lo], w[lo + 1]]), sc[j]);
      }
    }
  }
  // causal mask: column position p0 + 8j + 2t + c against row position qp[row]
  const sm2 = sc.map((acc, j) => acc.map((v, e) => {
    const pc = p0.add(8 * j + (e & 1)).add(t.mul(2));
    return b.let(pc.le(qp[e >> 1]).select(v, f32(-Infinity)), "f32", "s");
  }));
  // online softmax per row (row g: elements 0, 1; row g + 8: elements 2, 3), reduced over the quad; tile 0
  // shows every row position 0, so m is finite from the first tile on
  const pe: Val[][] = [[], []];
  const corr: Val[] = [];
  for (let rr = 0; rr < 2; rr++) {
    let mx = sm2[0][2 * rr];
    for (let j = 0; j < nt; j++) for (const c of [0, 1]) if (j || c) mx = mx.max(sm2[j][2 * rr + c]);
    mx = b.let(mx, "f32", "mx");
    for (const off of [1, 2]) mx = b.let(mx.max(b.shuffle("xor", mx, off)), "f32", "mx");
    const mn = b.let(m[rr].max(mx), "f32", "mn");
    corr.push(b.let(m[rr].eq(mn).select(f32(1), m[rr].sub(mn).exp()), "f32", "corr"));
    for (let j = 0; j < nt; j++) for (const c of [0, 1]) pe[rr].push(b.let(sm2[j][2 * rr + c].sub(mn).exp(), "f32", "p"));
    let sum = pe[rr][0];
    for (let i = 1; i < pe[rr].length; i++) sum = sum.add(pe[rr][i]);
    b.set(l[rr], l[rr].mul(corr[rr]).add(sum));
    b.set(m[rr], mn);
  }
  for (let dn = 0; dn < dt; dn++) o[dn].forEach((x, e) => b.set(x, x.mul(corr[e >> 1])));
  // O += P V per 16 positions: P from S's layout as the A operand, V's B fragments by ldmatrix.trans
  for (let kk = 0; kk < bkv / 16; kk++) {
    const j0 = 2 * kk, j1 = 2 * kk + 1; // n tiles of positions 16kk..+7, +8..+15: pe[row] index 2j + c
    const pa = f16Parts(b, split, [[pe[0][2 * j0], pe[0][2 * j0 + 1]], [pe[1][2 * j0], pe[1][2 * j0 + 1]], [pe[0][2 * j1], pe[0][2 * j1 + 1]], [pe[1][2 * j1], pe[1][2 * j1 + 1]]]);
    for (let dp = 0; dp < dt / 2; dp++) {
      const vb = Array.from({ length: parts }, (_, p) =>
        b.ldmatrix(sm, rs.add((parts + p) * region + 16 * kk * rowW).add(vRow).add(vKey.xor(2 * dp).shl(2)), 4, true));
      for (const [dn, lo] of [[2 * dp, 0], [2 * dp + 1, 2]]) {
        mmaSplit(b, pa, vb.map((w) => [w[lo], w[lo + 1]]), o[dn]).forEach((v, e) => b.set(o[dn][e], v));
      }
    }
  }
}
