// Prefill attention on cooperative matrices (caps.coop: Vulkan), flash-attention style: the contract of
// attention() in attention.ts (causal over positions <= pos + row), chosen for prefill chunks. A workgroup owns
// BR = 16·W query rows of one head (W subgroups, 16 rows each) and walks the positions in blocks of BC:
// - the block's K rows and its V rows transposed are staged in shared memory as f16 (bf16 where the device has
//   no f16 matrices), V rows past the chunk zeroed (unwritten cache rows may hold NaN, and 0 · NaN is NaN);
// - S = Q K^T per subgroup on 16 x 16 tiles (Q, scaled, staged once and kept as A operands), stored to the
//   subgroup's f32 scratch;
// - each row's online softmax by the sg/16 lanes that share it (max and sum over them by shuffles); P goes
//   back to shared memory as the next product's A operand, over the subgroup's own Q rows;
// - O += P V: a cooperative accumulator cannot be scaled by row, so each pass's product goes through the scratch
//   and the lanes keep O in registers, rescaled by the softmax correction as they add.
// Precision: q·scale, K, V and P are rounded once to the operand type, the products are exact and the sums f32
// in the device's order, as PTX's unsplit flash.ts (an f16 SDPA kernel).
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import type { AttentionShape } from "./attention.ts";
import { eachItem, gridFor, wgIndex } from "./common.ts";

/** Subgroups per workgroup (16 query rows each) and positions per block. */
export interface CoopFlashLayout {
  warps: number;
  bc: number;
}

const SHARED_CAP = 48 * 1024;

const rowWords = (n: number) => n / 2 + 4;
function sharedBytes(hd: number, l: CoopFlashLayout): number {
  const br = 16 * l.warps;
  return 4 * (br * rowWords(hd) + l.bc * rowWords(hd) + hd * rowWords(l.bc) + l.warps * 16 * l.bc);
}

/** Whether a layout runs on the target: P sits in Q's rows (BC <= hd, whole passes), the tiles in its shared memory. */
function layoutFits(caps: Caps, hd: number, l: CoopFlashLayout): boolean {
  return [16, 32, 64].includes(l.bc) && l.warps >= 1 && l.warps <= 8 && l.bc <= hd && hd % l.bc === 0 &&
    l.warps * caps.subgroupSize <= caps.maxWorkgroupSize && sharedBytes(hd, l) <= Math.min(caps.maxSharedBytes, SHARED_CAP);
}

/** The widest block (then the most subgroups) whose tiles fit the target's shared memory. */
function coopFlashLayout(caps: Caps, hd: number): CoopFlashLayout | undefined {
  for (const warps of [4, 2]) {
    for (const bc of [64, 32, 16]) if (layoutFits(caps, hd, { warps, bc })) return { warps, bc };
  }
  return undefined;
}

/** Whether the cooperative-matrix prefill attention takes this shape on this target. */
export function coopFlashFits(caps: Caps, s: AttentionShape): boolean {
  const sg = caps.subgroupSize;
  return !!caps.coop && (caps.coop.f16 || caps.coop.bf16) && caps.subgroups && (sg === 16 || sg === 32 || sg === 64) &&
    s.hd % 16 === 0 && s.hd <= 256 && s.window === undefined && s.softcap === undefined && s.heads % s.kvHeads === 0 &&
    coopFlashLayout(caps, s.hd) !== undefined;
}

/**
 * Bindings, as attention(): q f32 [rows, heads, hd] (r); k [cap, kvHeads, hd] (r); v likewise (r); pos [1] u32|i32
 * (r: position of query row 0); out f32 [rows, heads, hd] (w). Faults FAULT.ATTENTION_POS when pos + rows > cap.
 */
export function coopFlash(caps: Caps, s: AttentionShape & { layout?: CoopFlashLayout }): Kernel {
  const rows = s.rows ?? 1, { heads, kvHeads, hd, cap } = s;
  if (!coopFlashFits(caps, s)) throw new KernelError(`coop flash: needs caps.coop, subgroups of 16/32/64, hd a multiple of 16 (<= 256), no window or softcap; got hd=${hd}`);
  if (rows > cap) throw new KernelError(`coop flash: ${rows} rows exceed cap ${cap}`);
  if (cap * kvHeads * hd >= 2 ** 32 || rows * heads * hd >= 2 ** 32) throw new KernelError("coop flash: indices exceed 32 bits");
  if (s.layout && !layoutFits(caps, hd, s.layout)) throw new KernelError(`coop flash: layout ${JSON.stringify(s.layout)} does not fit hd=${hd} on this target`);
  const { warps, bc } = s.layout ?? coopFlashLayout(caps, hd)!;
  const kv = s.kv ?? "f32", pt = s.pos ?? "u32", ab = caps.coop!.f16 ? "f16" : "bf16";
  const group = heads / kvHeads, scale = s.scale ?? 1 / Math.sqrt(hd);
  const sg = caps.subgroupSize, LR = sg / 16, threads = warps * sg, br = 16 * warps;
  const RQ = rowWords(hd), RV = rowWords(bc);
  const tiles = Math.ceil(rows / br), total = tiles * heads;
  const grid = gridFor(caps, total);
  const name = s.name ?? `coop_flash_r${rows}_h${heads}_kv${kvHeads}_d${hd}_c${cap}_${kv}_${pt}_${ab}_w${warps}b${bc}`;
  const b = new KernelBuilder(name, { workgroup: threads, grid });
  const q = b.buffer("q", "f32", "r");
  const K = b.buffer("k", kv, "r");
  const V = b.buffer("v", kv, "r");
  const P = b.buffer("pos", pt, "r");
  const out = b.buffer("out", "f32", "w");
  const qp = b.shared("qp", "u32", br * RQ); // Q tile, then each subgroup's P over its own rows
  const kt = b.shared("kt", "u32", bc * RQ); // K block, rows = positions
  const vt = b.shared("vt", "u32", hd * RV); // V block transposed, rows = dims
  const sc = b.shared("sc", "f32", warps * 16 * bc); // each subgroup's S, then its P·V passes

  const pos0 = b.let(pt === "i32" ? b.load(P, 0).bitcast("u32") : b.load(P, 0), "u32", "pos");
  b.check(pos0.le(cap - rows), FAULT.ATTENTION_POS);
  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return());
  const tile = b.let(L.mod(tiles), "u32", "tile"), h = b.let(L.div(tiles), "u32", "h");
  const kvh = b.let(group === 1 ? h : h.div(group), "u32", "kvh");
  const t = b.lid.x, sgid = b.let(b.builtin("sgid"), "u32", "sgid"), lane = b.builtin("lane");
  const r = b.let(LR > 1 ? lane.div(LR) : lane, "u32", "r"), part = b.let(LR > 1 ? lane.mod(LR) : u32(0), "u32", "part");
  const row0 = b.let(tile.mul(br), "u32", "row0");
  // this lane's row; a row past the chunk computes as the last one (never written)
  const rowIn = b.let(row0.add(sgid.mul(16)).add(r), "u32", "row");
  const seen = b.let(pos0.add(rowIn.min(rows - 1)), "u32", "seen"); // the last position the row sees
  const end = b.let(pos0.add(row0.add(br).min(rows)), "u32", "end"); // positions the tile sees: [0, end)

  const each = (count: number, body: (e: Val) => void) => eachItem(b, t, threads, count, body);
  const dq = hd / 4; // 4-value groups of a row

  // Q tile (scaled, rounded), then each subgroup's Q fragments, held for the whole walk
  each(br * dq, (e) => {
    const rr = e.div(dq), d = e.mod(dq).mul(4);
    const src = b.let(row0.add(rr).min(rows - 1).mul(heads).add(h).mul(hd).add(d), "u32", "qa");
    const v = b.loadv(q, src, 4).map((x) => x.mul(scale));
    const at = b.let(rr.mul(RQ).add(d.shr(1)), "u32", "qs");
    b.sstore(qp, at, b.pack2(ab, v[0], v[1]));
    b.sstore(qp, at.add(1), b.pack2(ab, v[2], v[3]));
  });
  b.barrier();
  const mine = b.let(sgid.mul(16 * RQ), "u32", "mine");
  const qa = Array.from({ length: hd / 16 }, (_, st) => {
    const a = b.coopMat("a", ab);
    b.coopLoad(a, qp, mine.add(8 * st), RQ);
    return a;
  });
  b.barrier(); // P overwrites Q's rows

  const per = bc / LR; // scores / output dims of a row a lane takes per block / pass
  const m = b.let(f32(-Infinity), "f32", "m"), l = b.let(f32(0), "f32", "l");
  const o = Array.from({ length: hd / LR }, () => b.let(f32(0), "f32", "o"));
  const kvRow = (p: Val) => p.min(cap - 1).mul(kvHeads).add(kvh).mul(hd);
  const scBase = b.let(sgid.mul(16 * bc), "u32", "scb");
  const scRow = b.let(scBase.add(r.mul(bc)).add(part.mul(per)), "u32", "scr");
  const acc = Array.from({ length: bc / 16 }, () => b.coopMat("acc"));
  const kb = b.coopMat("b", ab), pa = Array.from({ length: bc / 16 }, () => b.coopMat("a", ab));
  const load4 = (buf: typeof K, at: Val) => b.loadv(buf, at, 4, kv); // f32 values whatever the cache's type

  b.for(u32(0), end, bc, (p0) => {
    // stage K (rows = positions) and V transposed (rows = dims: two positions a word), V past `end` zeroed
    each(bc * dq, (e) => {
      const pr = e.div(dq), d = e.mod(dq).mul(4);
      const v = load4(K, kvRow(p0.add(pr)).add(d));
      const at = b.let(pr.mul(RQ).add(d.shr(1)), "u32", "ks");
      b.sstore(kt, at, b.pack2(ab, v[0], v[1]));
      b.sstore(kt, at.add(1), b.pack2(ab, v[2], v[3]));
    });
    each((bc / 2) * dq, (e) => {
      const pr = e.div(dq).mul(2), d = e.mod(dq).mul(4);
      const ok = [0, 1].map((j) => b.let(p0.add(pr).add(j).lt(end), "bool", "vok"));
      const v = [0, 1].map((j) => load4(V, kvRow(p0.add(pr).add(j)).add(d)).map((x) => ok[j].select(x, f32(0))));
      for (let i = 0; i < 4; i++) b.sstore(vt, d.add(i).mul(RV).add(pr.shr(1)), b.pack2(ab, v[0][i], v[1][i]));
    });
    b.barrier();
    // S = Q K^T into the scratch
    acc.forEach((c, j) => {
      b.coopZero(c);
      qa.forEach((a, st) => {
        b.coopLoad(kb, kt, 16 * j * RQ + 8 * st, RQ);
        b.coopMulAdd(c, a, kb);
      });
      b.coopStore(c, sc, scBase.add(16 * j), bc);
    });
    b.barrier();
    // online softmax: the row's max over its sg/16 lanes, the correction, P over the subgroup's Q rows
    const s = Array.from({ length: per }, (_, i) => {
      const pc = p0.add(part.mul(per)).add(i);
      return b.let(pc.le(seen).select(b.sload(sc, scRow.add(i)), f32(-Infinity)), "f32", "s");
    });
    let mx = b.let(s.reduce((x, y) => x.max(y)), "f32", "mx");
    for (let off = 1; off < LR; off *= 2) mx = b.let(mx.max(b.shuffle("xor", mx, off)), "f32", "mx");
    const mn = b.let(m.max(mx), "f32", "mn");
    // a row that sees nothing in this block keeps its state: exp(-inf - -inf) would be NaN
    const corr = b.let(m.eq(mn).select(f32(1), m.sub(mn).exp()), "f32", "corr");
    const p = s.map((x) => b.let(x.eq(f32(-Infinity)).select(f32(0), x.sub(mn).exp()), "f32", "p"));
    b.set(l, l.mul(corr).add(p.reduce((x, y) => x.add(y))));
    b.set(m, mn);
    const pw = b.let(sgid.mul(16).add(r).mul(RQ).add(part.mul(per / 2)), "u32", "pw");
    for (let i = 0; i < per; i += 2) b.sstore(qp, pw.add(i / 2), b.pack2(ab, p[i], p[i + 1]));
    o.forEach((x) => b.set(x, x.mul(corr)));
    b.barrier();
    // O += P V, a pass of bc dims at a time through the scratch
    pa.forEach((a, ks) => b.coopLoad(a, qp, mine.add(8 * ks), RQ));
    for (let ps = 0; ps < hd / bc; ps++) {
      acc.forEach((c, j) => {
        b.coopZero(c);
        pa.forEach((a, ks) => {
          b.coopLoad(kb, vt, (ps * bc + 16 * j) * RV + 8 * ks, RV);
          b.coopMulAdd(c, a, kb);
        });
        b.coopStore(c, sc, scBase.add(16 * j), bc);
      });
      b.barrier();
      for (let i = 0; i < per; i++) b.set(o[ps * per + i], o[ps * per + i].add(b.sload(sc, scRow.add(i))));
      b.barrier(); // the next pass, or the next block's S, overwrites the scratch (and the next block the tiles)
    }
  });

  // finish: the row's sum over its lanes, O / l, rows inside the chunk
  let lt = l;
  for (let off = 1; off < LR; off *= 2) lt = b.let(lt.add(b.shuffle("xor", lt, off)), "f32", "lt");
  b.if(rowIn.lt(rows), () => {
    const ob = b.let(rowIn.mul(heads).add(h).mul(hd).add(part.mul(per)), "u32", "ob");
    for (let ps = 0; ps < hd / bc; ps++) {
      for (let i = 0; i < per; i++) b.store(out, ob.add(ps * bc + i), o[ps * per + i].div(lt));
    }
  });
  return b.build();
}
