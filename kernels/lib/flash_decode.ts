// Decode attention on warp MMA tiles (kernels/ir_data.ts MmaStmt), for targets with `caps.mma` and 16-bit K/V: the
// split-K partials of attentionPartial (a contiguous cache) and pagedAttentionPartial (a paged pool, serving), one
// warp per (row, KV head, chunk) instead of one subgroup per (row, query head, chunk).
//
// Why. A decode row has one query per head, too few for an MMA tile on its own; but the query heads of one KV head
// (a GQA group, 4 to 8 of them in the families served) all read the same K/V rows. Here they are the tile's rows:
// each K/V row is loaded once per KV head, where the subgroup kernel loads it once per query head (through L2), and
// the dot products and the weighted sums run on tensor cores instead of lane shuffles and FMAs.
//
// Layout. A warp walks its chunk 16 positions a trip. S = Q K^T is two m16n8k16 tiles (8 positions each) per 16
// dims; lane (g, t) = (lane >> 2, lane & 3) loads 16 contiguous bytes of position g's K row per 32 dims and feeds them
// to k slots 2t, 2t+1, 2t+8, 2t+9 of two k steps (a permutation of the dims that Q's fragments follow too, so the sum
// is unchanged while every load is one vector). O += P V takes P straight from S's accumulator layout as the A
// operand (k = the trip's 16 positions) and V as B: lane (g, t) loads positions 2t, 2t+1, 2t+8, 2t+9 of the trip,
// hd/8 contiguous values each at dims g * hd/8 .., so n tile j's column c is dim c * hd/8 + j (another permutation,
// undone where the output is written).
//
// Loads (kvTripRows). A trip's K/V words come straight from memory, one trip ahead in registers (`prefetch`), or
// through a per-lane cp.async pipeline in shared memory (`stages`): the same words in each case, so the same bits.
// The lowering (kernels/lower/attention.ts) takes 3 stages for decode and direct loads for serving, as the H200 measured.
//
// Precision. The A operands (Q and P) enter as hi + lo 16-bit parts in the tile's rows g and g + 8 (the GQA group
// fills at most 8 rows), and the two rows' results are added: ~16 bits of Q and P with bf16 K/V (~22 with f16),
// like the serving matmuls' split x. K and V enter exactly. Products are exact and sums f32 in the hardware's order.
//
// Batch invariance. A row's loop, chunking (chunkOf over its own positions, trips of 16) and summation order depend
// on its own position and the table length alone, never on the other rows.
import { type Buffer, f32, type Kernel, KernelBuilder, KernelError, u32, un, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { type AttentionShape, chunkOf, pagedRows, type PagedAttentionShape } from "./attention.ts";
import { FAULT } from "./codes.ts";
import { asIndex, gridFor, wgIndex } from "./common.ts";
import { quadRowSums } from "./flash_frag.ts";

/** Positions per loop trip (two 8-column S tiles). */
const TRIP = 16;

/**
 * The split-K shape, and `stages`: K/V pieces through a per-lane cp.async pipeline in shared memory that many
 * trips deep (caps.staging; 0 = loads into registers, `prefetch` one trip ahead or not). The same words meet the same
 * MMAs: the bits do not change.
 */
export type FlashDecodeShape = AttentionShape & { splits: number; stages?: number };

/** Why the MMA decode attention cannot take this shape on these caps, or "" (it can). */
export function flashDecodeFits(caps: Caps, s: { heads: number; kvHeads: number; hd: number; kv?: string }): string {
  if (!caps.mma || !caps.subgroups || caps.subgroupSize !== 32) return "no 32-lane MMA tiles";
  const kv = s.kv ?? "f32";
  if (kv !== "bf16" && kv !== "f16") return `${kv} K/V (needs bf16 or f16)`;
  if (s.hd % 64 !== 0 || s.hd > 256) return `head_dim ${s.hd} (needs a multiple of 64, at most 256)`;
  if (s.heads % s.kvHeads !== 0 || s.heads / s.kvHeads > 8) return `${s.heads} heads over ${s.kvHeads} KV heads (at most 8 per KV head)`;
  return "";
}
/**
 * attentionPartial on MMA tiles over a contiguous cache: the same bindings (q, k [cap, kvHeads, hd], v, pos [1]: the
 * position of row 0; part f32 [rows * heads, splits, hd + 2] (w)), partials and fault (FAULT.ATTENTION_POS when
 * pos + rows > cap). Chunks are cut in whole trips of 16 positions.
 */
export function flashDecodePartial(caps: Caps, s: FlashDecodeShape): Kernel {
  return flashDecodeKernel(caps, s, s.cap);
}

/**
 * pagedAttentionPartial on MMA tiles: the same bindings (q f32 [rows, heads, hd]; k, v [poolRows, kvHeads, hd];
 * table [rows, maxBlocks]; pos [rows]; part f32 [rows * heads, splits, hd + 2] (w)), the same partials ([m, l, acc]
 * per (row, head, chunk); an empty chunk writes -inf, 0, 0) for attentionCombine, and the same faults
 * (FAULT.ATTENTION_POS, FAULT.PAGED_BLOCK). Chunks are cut in whole trips of 16 positions.
 */
export function pagedFlashPartial(caps: Caps, s: PagedAttentionShape & { splits: number; stages?: number }): Kernel {
  if (s.poolRows % s.block !== 0) throw new KernelError(`paged attention: block ${s.block} does not divide ${s.poolRows} rows`);
  return flashDecodeKernel(caps, { ...s, cap: s.poolRows }, s.maxBlocks * s.block, s);
}

/** T: the positions a row may see (the cache's capacity, or its block table's). */
function flashDecodeKernel(caps: Caps, s: FlashDecodeShape, T: number, paged?: PagedAttentionShape): Kernel {
  const what = paged ? "paged flash attention" : "flash decode attention";
  const why = flashDecodeFits(caps, s);
  if (why) throw new KernelError(`${what}: ${why}`);
  const rows = s.rows ?? 1, { heads, kvHeads, hd, cap, splits: S } = s;
  if (!(Number.isInteger(S) && S >= 1 && S <= T)) throw new KernelError(`${what}: ${S} splits of ${T} positions`);
  if (!paged && rows > cap) throw new KernelError(`${what}: ${rows} rows exceed cap ${cap}`);
  if (T * rows >= 2 ** 32 || cap * kvHeads * hd >= 2 ** 32) throw new KernelError(`${what}: indices exceed 32 bits`);
  const kv = s.kv as "bf16" | "f16", pt = s.pos ?? "u32";
  const group = heads / kvHeads, scale = s.scale ?? 1 / Math.sqrt(hd);
  const teams = rows * kvHeads * S, grid = gridFor(caps, teams);
  const tail = `${s.window ? `_w${s.window}` : ""}${s.softcap ? `_cap${String(s.softcap).replace(/\W/g, "_")}` : ""}_s${S}${s.stages ? `_p${s.stages}` : s.prefetch ? "_pf" : ""}`;
  const name = s.name ?? (paged
    ? `paged_flash_r${rows}_h${heads}_kv${kvHeads}_d${hd}_p${cap}_${kv}_${pt}_b${paged.block}_m${paged.maxBlocks}_${paged.table ?? "i32"}${tail}`
    : `flash_decode_r${rows}_h${heads}_kv${kvHeads}_d${hd}_c${cap}_${kv}_${pt}${tail}`);
  const b = new KernelBuilder(name, { workgroup: 32, grid });
  const q = b.buffer("q", "f32", "r");
  const K = b.buffer("k", kv, "r");
  const V = b.buffer("v", kv, "r");
  const TB = paged ? b.buffer("table", paged.table ?? "i32", "r") : undefined;
  const P = b.buffer("pos", pt, "r");
  const out = b.buffer("part", "f32", "w");

  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > teams) b.if(L.ge(teams), () => b.return());
  const lane = b.let(b.builtin("lane"), "u32", "lane");
  const g = b.let(lane.shr(2), "u32", "g"), t = b.let(lane.and(3), "u32", "t");
  const ci = b.let(L.mod(S), "u32", "ci"), rk = b.let(L.div(S), "u32", "rk");
  const kvh = b.let(rk.mod(kvHeads), "u32", "kvh"), r = b.let(rk.div(kvHeads), "u32", "r");
  // a paged row carries its own position; a contiguous cache's rows follow row 0's
  let pos: Val;
  if (paged) {
    pos = b.let(asIndex(b.load(P, r)), "u32", "pos");
    b.check(pos.lt(T), FAULT.ATTENTION_POS);
  } else {
    const pos0 = b.let(asIndex(b.load(P, 0)), "u32", "pos0");
    b.check(pos0.le(cap - rows), FAULT.ATTENTION_POS);
    pos = rows === 1 ? pos0 : b.let(pos0.add(r), "u32", "pos");
  }
  const end = b.let(pos.add(1), "u32", "end");
  const first = s.window ? b.let(end.max(s.window).sub(s.window), "u32", "first") : undefined;
  const { start, stop } = chunkOf(b, { first, end, chunkIdx: ci, S, trip: TRIP });
  let physRow = (p: Val) => p;
  if (paged && TB) {
    const { block, maxBlocks } = paged, tbase = b.let(r.mul(maxBlocks), "u32", "tb");
    const inLanes = Math.ceil(Math.max(TRIP, Math.ceil(T / S)) / block) + 1 <= 32;
    physRow = pagedRows(b, { TB, tbase, block, maxBlocks, poolBlocks: cap / block, lane: inLanes ? lane : undefined, start, stop });
  }
  const kvBase = (p: Val) => b.let(physRow(p).mul(kvHeads).add(kvh).mul(hd), "u32", "kb");
  // a position past stop reads the chunk's first row (written, finite) and is masked
  const clamp = (p: Val): Val => {
    const ok = b.let(p.lt(stop), "bool", "in");
    return b.let(ok.select(p, start), "u32", "p");
  };

  // Q of head g of the group (zero for the tile's rows past it): per 32 dims, this lane's 8 at 32st + 8t, as the
  // A words of k steps 2st and 2st + 1: [hi (g, 2t..), lo (g+8 ≙ g, 2t..), hi (g, 2t+8..), lo (g, 2t+8..)].
  const real = b.let(g.lt(group), "bool", "real");
  const qb = b.let(r.mul(heads).add(kvh.mul(group)).add(g.min(group - 1)).mul(hd).add(t.mul(8)), "u32", "qb");
  const qa: Val[][] = [];
  for (let st = 0; st < hd / 32; st++) {
    const xs = [...b.loadv(q, qb.add(32 * st), 4), ...b.loadv(q, qb.add(32 * st + 4), 4)].map((x) => b.let(real.select(x, f32(0)), "f32", "qx"));
    for (const o of [0, 4]) {
      const [h0, l0] = parts(b, kv, xs[o], xs[o + 1]), [h1, l1] = parts(b, kv, xs[o + 2], xs[o + 3]);
      qa.push([h0, l0, h1, l1]);
    }
  }

  const m = b.let(f32(-Infinity), "f32", "m"), l = b.let(f32(0), "f32", "l");
  const dt = hd / 8; // n tiles of P V (a lane's V strip: dt values)
  const o = Array.from({ length: dt }, () => Array.from({ length: 4 }, () => b.let(f32(0), "f32", "o")));
  const rowsOf = kvTripRows(b, { caps, what, K, V, hd, g, t, lane, start, stop, kvBase, clamp, stages: s.stages ?? 0, prefetch: !!s.prefetch });
  b.for(start, stop, TRIP, (p0) => {
    const { kw, vv, done } = rowsOf(p0);
    // scores of positions p0 + 8j + 2t + e (rows g and g + 8 hold Q's hi and lo parts)
    const sc = kw.map((words, j) => {
      let acc: Val[] = [f32(0), f32(0), f32(0), f32(0)];
      words.forEach((w, st) => {
        acc = b.mma(kv, qa[2 * st], [w[0], w[1]], acc);
        acc = b.mma(kv, qa[2 * st + 1], [w[2], w[3]], acc);
      });
      return [0, 1].map((e) => {
        let x = b.let(acc[e].add(acc[e + 2]).mul(scale), "f32", "s");
        if (s.softcap) x = b.let(x.div(s.softcap).tanh().mul(s.softcap), "f32", "s");
        const ok = p0.add(8 * j + e).add(t.mul(2)).lt(stop);
        return b.let(ok.select(x, f32(-Infinity)), "f32", "s");
      });
    }).flat();
    // online softmax of head g over the quad's 16 scores (every trip has a position: the max is finite)
    let mx = b.let(sc[0].max(sc[1]).max(sc[2].max(sc[3])), "f32", "mx");
    for (const off of [1, 2]) mx = b.let(mx.max(b.shuffle("xor", mx, off)), "f32", "mx");
    const mn = b.let(m.max(mx), "f32", "mn");
    const corr = b.let(m.eq(mn).select(f32(1), m.sub(mn).exp()), "f32", "corr");
    const pe = sc.map((x) => b.let(x.sub(mn).exp(), "f32", "pe"));
    b.set(l, l.mul(corr).add(pe[0].add(pe[1]).add(pe[2].add(pe[3]))));
    b.set(m, mn);
    // P as A: k 2t, 2t+1 = tile 0's columns, k 2t+8, 2t+9 = tile 1's; rows g / g + 8 = hi / lo
    const [ph0, pl0] = parts(b, kv, pe[0], pe[1]), [ph1, pl1] = parts(b, kv, pe[2], pe[3]);
    const pa = [ph0, pl0, ph1, pl1];
    for (let jn = 0; jn < dt; jn++) {
      // column g of n tile jn is dim g * dt + jn: the jn-th value of each V strip, two positions to a word
      const half = (w: Val[]) => w[jn >> 1];
      const pack = (a: Val[], c: Val[]) => jn & 1 ? half(a).shr(16).or(half(c).and(0xffff0000)) : half(a).and(0xffff).or(half(c).shl(16));
      const vb = [b.let(pack(vv[0], vv[1]), "u32", "vb"), b.let(pack(vv[2], vv[3]), "u32", "vb")];
      b.mma(kv, pa, vb, o[jn].map((x) => x.mul(corr))).forEach((v, e) => b.set(o[jn][e], v));
    }
    done();
  });

  // partials of head g: m, the quad's l, and acc dims (2t + e) * dt + jn = the rows' two parts added
  const [lt] = quadRowSums(b, [l]);
  b.if(real, () => {
    const pb = b.let(r.mul(heads).add(kvh.mul(group)).add(g).mul(S).add(ci).mul(hd + 2), "u32", "pb");
    b.if(t.eq(0), () => {
      b.store(out, pb, m);
      b.store(out, pb.add(1), lt);
    });
    for (const e of [0, 1]) {
      const db = b.let(pb.add(2).add(t.mul(2).add(e).mul(dt)), "u32", "db");
      for (let jn = 0; jn < dt; jn += 2) b.storev(out, db.add(jn), [o[jn][e].add(o[jn][e + 2]), o[jn + 1][e].add(o[jn + 1][e + 2])]);
    }
  });
  return b.build();
}

/** What a trip of flashDecodeKernel reads: this lane's K and V words, and a hook for the end of the trip. */
interface TripWords {
  /** kw[j][st]: the 4 words of K row p0 + 8j + g at dims 32st + 8t. */
  kw: Val[][][];
  /** vv[i]: the V strip (dims g * hd/8 ..) of position p0 + 2t + [0, 1, 8, 9][i], two values a word. */
  vv: Val[][];
  done(): void;
}

/**
 * How the K/V words of a trip reach registers: loaded at its top; with `prefetch`, loaded one trip early and carried
 * in registers (trip 0's before the loop; a past-the-end trip reads the chunk's first rows, masked: never used);
 * with `stages`, copied `stages - 1` trips early by each lane into its own shared-memory slots (cp.async) and read
 * back only by it (no barrier), piece u of a stage at u * 128 words past it, lanes side by side. The same words in
 * every case: the same bits. Emits what comes before the loop; returns the rows of the trip at p0.
 */
function kvTripRows(
  b: KernelBuilder,
  o: {
    caps: Caps; what: string; K: Buffer; V: Buffer; hd: number; g: Val; t: Val; lane: Val; start: Val; stop: Val;
    kvBase: (p: Val) => Val; clamp: (p: Val) => Val; stages: number; prefetch: boolean;
  },
): (p0: Val) => TripWords {
  const { caps, what, K, V, hd, g, t, lane, start, stop, kvBase, clamp, stages } = o;
  const dt = hd / 8, vw = dt / 2; // a lane's V strip: dt values, vw words
  // this lane's 16-byte pieces of a trip (word index in K or V): K tiles, then V positions
  const UK = 2 * (hd / 32), UV = 4 * (vw / 4);
  const pieces = (p0: Val): { buf: Buffer; at: Val }[] => [
    ...[0, 1].flatMap((j) => {
      const kb = kvBase(clamp(p0.add(8 * j).add(g)));
      return Array.from({ length: hd / 32 }, (_, st) => ({ buf: K, at: kb.add(32 * st).add(t.mul(8)).shr(1) }));
    }),
    ...[0, 1, 8, 9].flatMap((d) => {
      const vb = b.let(kvBase(clamp(p0.add(t.mul(2)).add(d))).add(g.mul(dt)).shr(1), "u32", "vb");
      return Array.from({ length: vw / 4 }, (_, i) => ({ buf: V, at: vb.add(4 * i) }));
    }),
  ];
  const fromPieces = (ws: Val[][]) => ({
    kw: [0, 1].map((j) => ws.slice(j * (hd / 32), (j + 1) * (hd / 32))),
    vv: [0, 1, 2, 3].map((i) => ws.slice(UK + i * (vw / 4), UK + (i + 1) * (vw / 4)).flat()),
  });
  type Rows = ReturnType<typeof fromPieces>;
  const rowsAt = (p0: Val): Rows => fromPieces(pieces(p0).map((pc) => b.loadv(pc.buf, pc.at, 4, "u32")));
  if (stages && !(Number.isInteger(stages) && stages >= 2 && stages <= 6 && caps.staging)) {
    throw new KernelError(`${what}: a ${stages}-stage pipeline needs caps.staging (2..6 stages)`);
  }
  const carried = o.prefetch && !stages
    ? { kw: [0, 1].map(() => Array.from({ length: hd / 32 }, () => Array.from({ length: 4 }, () => b.let(u32(0), "u32", "kc")))),
      vv: Array.from({ length: 4 }, () => Array.from({ length: vw }, () => b.let(u32(0), "u32", "vc"))) }
    : undefined;
  const hand = (from: Rows, to: Rows) => {
    from.kw.forEach((tile, j) => tile.forEach((w, st) => w.forEach((x, e) => b.set(to.kw[j][st][e], x))));
    from.vv.forEach((strip, i) => strip.forEach((x, e) => b.set(to.vv[i][e], x)));
  };
  if (carried) {
    b.if(start.lt(stop), () => hand(rowsAt(start), carried));
    return (p0) => {
      const rows = { kw: carried.kw.map((tile) => tile.map((w) => w.map((x) => b.let(x, "u32", "kw")))), vv: carried.vv.map((st) => st.map((x) => b.let(x, "u32", "vw"))) };
      const next = rowsAt(p0.add(TRIP));
      return { ...rows, done: () => hand(next, carried) };
    };
  }
  if (!stages) return (p0) => ({ ...rowsAt(p0), done: () => {} });
  const stride = (UK + UV) * 128;
  if (4 * stages * stride > caps.maxSharedBytes) throw new KernelError(`${what}: ${stages} stages take ${4 * stages * stride} bytes of shared memory`);
  const mem = b.shared("flash_pipe", "u32", stages * stride), slot = b.let(lane.mul(4), "u32", "slot");
  const issue = (stage: Val, p0: Val) => pieces(p0).forEach((pc, u) => b.cpAsync(mem, slot.add(stage).add(u * 128), pc.buf, pc.at));
  for (let st = 0; st < stages - 1; st++) {
    const p = b.let(start.add(st * TRIP), "u32", "pp");
    b.if(p.lt(stop), () => issue(u32(st * stride), p));
    b.cpCommit();
  }
  const rs = b.let(u32(0), "u32", "rs"); // word offset of the stage this trip reads
  return (p0) => {
    b.cpWait(stages - 2); // this trip's pieces have landed (this lane's copies: all it reads)
    const ahead = b.let(p0.add((stages - 1) * TRIP), "u32", "pa");
    // into the stage read last trip: this lane's reads of it fed last trip's MMAs
    b.if(ahead.lt(stop), () => issue(b.let(rs.eq(0).select(u32((stages - 1) * stride), rs.sub(stride)), "u32", "ws"), ahead));
    b.cpCommit();
    const rows = fromPieces(Array.from({ length: UK + UV }, (_, u) => [0, 1, 2, 3].map((w) => b.let(b.sload(mem, slot.add(rs).add(u * 128 + w)), "u32", "pw"))));
    b.set(rs, rs.eq((stages - 1) * stride).select(u32(0), rs.add(stride)));
    return { ...rows, done: () => {} };
  };
}

/** An f32 pair as hi and lo 16-bit MMA words: hi rounds the pair, lo rounds what hi lost. */
function parts(b: KernelBuilder, ab: "bf16" | "f16", x0: Val, x1: Val): [Val, Val] {
  const bits = ab === "bf16" ? "bf16bits" : "f16bits";
  const hi = b.let(b.pack2(ab, x0, x1), "u32", "hw");
  const lo = b.let(b.pack2(ab, x0.sub(un(bits, hi.and(0xffff))), x1.sub(un(bits, hi.shr(16)))), "u32", "lw");
  return [hi, lo];
}

