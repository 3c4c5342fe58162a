// Prefill attention on warp MMA tiles (flash-attention style, kernels/ir_data.ts MmaStmt), for targets with
// `caps.mma`: the same contract as attention() in attention.ts (causal over positions <= pos + row), chosen for
// prefill chunks only. A warp owns 16 query rows of one head and walks the positions in blocks of 16:
// S = Q K^T on MMA tiles, an online softmax on the S fragments (row max and sum over the 4 lanes of a quad), and
// O += P V with P taken straight from S's accumulator layout as the next MMA's A operand. Four warps of a
// workgroup take four heads of one row tile, so heads of a GQA group share K/V loads through L1.
//
// Precision. Operands enter the MMA as f16. With `split` (default) every f32 operand goes in as hi + lo f16
// parts and the products hi*hi + hi*lo + lo*hi are accumulated in f32, which keeps ~21 bits of each operand:
// the result matches the f32 kernel to ~1e-6 relative at three times the tensor work (cheap here). Without it
// Q, K, P and V are rounded once to f16 (~1e-3 relative), as an f16 SDPA kernel computes.
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import type { AttentionShape } from "./attention.ts";
import { gridFor, wgIndex } from "./common.ts";
import { f16Parts, mmaSplit, quadRowSums } from "./flash_frag.ts";

/** Whether the MMA prefill attention takes this shape on this target. */
export function flashFits(caps: Caps, s: AttentionShape): boolean {
  return !!caps.mma && caps.subgroups && caps.subgroupSize === 32 && s.hd % 16 === 0 && s.hd <= 256 &&
    s.window === undefined && s.softcap === undefined && s.heads % s.kvHeads === 0 && (s.rows ?? 1) >= 1;
}

/**
 * Bindings, as attention(): q f32 [rows, heads, hd] (r); k [cap, kvHeads, hd] (r); v likewise (r); pos [1]
 * u32|i32 (r: position of query row 0); out f32 [rows, heads, hd] (w). Faults FAULT.ATTENTION_POS when
 * pos + rows > cap (or pos < 0).
 * With `splits` > 1 each (row tile, head) has that many warps over consecutive shares of the positions, each
 * writing attentionPartial's layout instead of out: part f32 [rows * heads, splits, hd + 2] ([m, l, acc]; a
 * row with no position in its share writes m = -inf, l = 0, acc = 0), merged by attentionCombine. A warp per
 * (row tile, head) alone is latency-bound when rows x heads / 16 warps do not fill the GPU.
 */
export function flashAttention(caps: Caps, s: AttentionShape & { split?: boolean; splits?: number }): Kernel {
  const rows = s.rows ?? 1, { heads, kvHeads, hd, cap } = s;
  if (!flashFits(caps, s)) throw new KernelError(`flash attention: needs caps.mma, hd a multiple of 16 (<= 256), no window or softcap; got hd=${hd}`);
  if (rows > cap) throw new KernelError(`flash attention: ${rows} rows exceed cap ${cap}`);
  if (cap * kvHeads * hd >= 2 ** 32 || rows * heads * hd >= 2 ** 32) throw new KernelError("flash attention: indices exceed 32 bits");
  const kv = s.kv ?? "f32", pt = s.pos ?? "u32", split = s.split ?? true, S = s.splits ?? 1;
  if (!(Number.isInteger(S) && S >= 1 && S <= 256)) throw new KernelError(`flash attention: ${S} splits`);
  const group = heads / kvHeads, scale = s.scale ?? 1 / Math.sqrt(hd);
  const tiles = Math.ceil(rows / 16);
  const wpg = heads % 4 === 0 ? 4 : heads % 2 === 0 ? 2 : 1; // warps (heads) per workgroup
  const total = tiles * (heads / wpg) * S;
  const grid = gridFor(caps, total);
  const name = s.name ?? `flash_attention_r${rows}_h${heads}_kv${kvHeads}_d${hd}_c${cap}_${kv}_${pt}${split ? "" : "_f16"}${S > 1 ? `_s${S}` : ""}`;
  const b = new KernelBuilder(name, { workgroup: 32 * wpg, grid });
  const q = b.buffer("q", "f32", "r");
  const K = b.buffer("k", kv, "r");
  const V = b.buffer("v", kv, "r");
  const P = b.buffer("pos", pt, "r");
  const out = b.buffer(S > 1 ? "part" : "out", "f32", "w");

  const pos0 = b.let(pt === "i32" ? b.load(P, 0).bitcast("u32") : b.load(P, 0), "u32", "pos");
  b.check(pos0.le(cap - rows), FAULT.ATTENTION_POS);
  const L = wgIndex(b, grid);
  if (grid[0] * grid[1] * grid[2] > total) b.if(L.ge(total), () => b.return());
  const lane = b.let(b.builtin("lane"), "u32", "lane");
  const g = b.let(lane.shr(2), "u32", "g"), t = b.let(lane.and(3), "u32", "t");
  const rt = b.let(L.mod(tiles), "u32", "rt");
  const hs = S > 1 ? b.let(L.div(tiles), "u32", "hs") : L.div(tiles); // head group, then split
  const sp = S > 1 ? b.let(hs.mod(S), "u32", "sp") : u32(0);
  const h = b.let((S > 1 ? hs.div(S) : hs).mul(wpg).add(b.builtin("sgid")), "u32", "h");
  const kvh = b.let(group === 1 ? h : h.div(group), "u32", "kvh");
  const r0 = b.let(rt.mul(16).add(g), "u32", "r0"), r1 = b.let(r0.add(8), "u32", "r1");
  const qp = [b.let(pos0.add(r0), "u32", "qp"), b.let(pos0.add(r1), "u32", "qp")];
  // positions this warp's rows see: up to the last row of the tile (clamped into the chunk)
  const end = b.let(pos0.add(rt.mul(16).add(15).min(rows - 1)).add(1), "u32", "end");
  // this warp's share of the positions, in whole 16-position blocks
  const share = S > 1 ? b.let(end.add(16 * S - 1).div(16 * S).mul(16), "u32", "share") : undefined;
  const first = share ? b.let(sp.mul(share).min(end), "u32", "first") : u32(0);
  const stop = share ? b.let(first.add(share).min(end), "u32", "stop") : end;


  // Q fragments (scaled), rows r0 / r1 clamped into the chunk: per k-step of 16 dims, words (r0, lo k),
  // (r1, lo k), (r0, hi k), (r1, hi k).
  const qrow = [r0, r1].map((r) => b.let(r.min(rows - 1).mul(heads).add(h).mul(hd), "u32", "qb"));
  const ksteps = hd / 16;
  const qa: Val[][][] = [];
  for (let st = 0; st < ksteps; st++) {
    const at = (r: number, o: number) => qrow[r].add(t.mul(2)).add(16 * st + o);
    const pair = (r: number, o: number): [Val, Val] => {
      const [x0, x1] = b.loadv(q, at(r, o), 2);
      return [x0.mul(scale), x1.mul(scale)];
    };
    qa.push(f16Parts(b, split, [pair(0, 0), pair(1, 0), pair(0, 8), pair(1, 8)]));
  }

  const m = [b.let(f32(-Infinity), "f32", "m"), b.let(f32(-Infinity), "f32", "m")];
  const l = [b.let(f32(0), "f32", "l"), b.let(f32(0), "f32", "l")];
  const dt = hd / 8;
  const o = Array.from({ length: dt }, () => Array.from({ length: 4 }, () => b.let(f32(0), "f32", "o")));
  const kvRow = (p: Val) => p.min(cap - 1).mul(kvHeads).add(kvh).mul(hd);

  b.for(first, stop, 16, (p0) => {
    // S for positions p0 + 8j + g (B column g of n tile j)
    const sc: Val[][] = [];
    for (let j = 0; j < 2; j++) {
      const kb = b.let(kvRow(p0.add(8 * j).add(g)), "u32", "kb");
      let acc: Val[] = [f32(0), f32(0), f32(0), f32(0)];
      for (let st = 0; st < ksteps; st++) {
        const at = (o2: number) => kb.add(t.mul(2)).add(16 * st + o2);
        const pair = (o2: number): [Val, Val] => {
          const [x0, x1] = b.loadv(K, at(o2), 2);
          return [x0, x1];
        };
        const kw = kv === "f16" ? [[b.load(K, at(0).shr(1), "u32"), b.load(K, at(8).shr(1), "u32")]] : f16Parts(b, split, [pair(0), pair(8)]);
        acc = mmaSplit(b, qa[st], kw, acc);
      }
      // causal mask: column position p0 + 8j + 2t + c against row position qp[row]
      sc.push(acc.map((v, e) => {
        const pc = p0.add(8 * j + (e & 1)).add(t.mul(2));
        return b.let(pc.le(qp[e >> 1]).select(v, f32(-Infinity)), "f32", "s");
      }));
    }
    // online softmax per row (row g: elements 0, 1; row g + 8: elements 2, 3), reduced over the quad
    const pe: Val[][] = [[], []];
    const corr: Val[] = [];
    for (let rr = 0; rr < 2; rr++) {
      let mx = sc[0][2 * rr].max(sc[0][2 * rr + 1]).max(sc[1][2 * rr]).max(sc[1][2 * rr + 1]);
      mx = b.let(mx, "f32", "mx");
      for (const off of [1, 2]) mx = b.let(mx.max(b.shuffle("xor", mx, off)), "f32", "mx");
      const mn = b.let(m[rr].max(mx), "f32", "mn");
      corr.push(b.let(m[rr].eq(mn).select(f32(1), m[rr].sub(mn).exp()), "f32", "corr"));
      // a row with nothing visible yet (a later split) keeps m = -inf: its p are 0, not exp(-inf - -inf)
      for (let j = 0; j < 2; j++) {
        for (const c of [0, 1]) {
          const v = sc[j][2 * rr + c];
          pe[rr].push(b.let(S > 1 ? v.eq(f32(-Infinity)).select(f32(0), v.sub(mn).exp()) : v.sub(mn).exp(), "f32", "p"));
        }
      }
      b.set(l[rr], l[rr].mul(corr[rr]).add(pairwise4(pe[rr])));
      b.set(m[rr], mn);
    }
    // P as the A operand: (row g, k 2t..) = tile 0, (row g+8, k 2t..), (row g, k 2t+8..) = tile 1, (row g+8, ..)
    const pa = f16Parts(b, split, [[pe[0][0], pe[0][1]], [pe[1][0], pe[1][1]], [pe[0][2], pe[0][3]], [pe[1][2], pe[1][3]]]);
    // V rows past `stop` may be unwritten (maybe NaN): zero them, since 0 * NaN would poison the sum
    const vat = [0, 1, 8, 9].map((d) => b.let(p0.add(t.mul(2)).add(d), "u32", "vp"));
    const vok = vat.map((p) => b.let(p.lt(stop), "bool", "vok"));
    const vrow = vat.map((p) => b.let(kvRow(p), "u32", "vb"));
    for (let dn = 0; dn < dt; dn++) {
      const col = b.let(g.add(8 * dn), "u32", "vc");
      const vv = vrow.map((r, i) => vok[i].select(b.load(V, r.add(col)), f32(0)));
      const vb = f16Parts(b, split, [[vv[0], vv[1]], [vv[2], vv[3]]]);
      const c = o[dn].map((x, e) => x.mul(corr[e >> 1]));
      mmaSplit(b, pa, vb, c).forEach((v, e) => b.set(o[dn][e], v));
    }
  });

  // finish: row sums over the quad, O / l, rows inside the chunk
  const lt = quadRowSums(b, l);
  for (let rr = 0; rr < 2; rr++) {
    const r = rr ? r1 : r0;
    b.if(r.lt(rows), () => {
      if (S === 1) {
        const ob = b.let(r.mul(heads).add(h).mul(hd).add(t.mul(2)), "u32", "ob");
        for (let dn = 0; dn < dt; dn++) b.storev(out, ob.add(8 * dn), [o[dn][2 * rr].div(lt[rr]), o[dn][2 * rr + 1].div(lt[rr])]);
        return;
      }
      // attentionPartial's layout: [m, l, acc[hd]] at ((r * heads + h) * S + sp) * (hd + 2)
      const pb = b.let(r.mul(heads).add(h).mul(S).add(sp).mul(hd + 2), "u32", "pb");
      b.if(t.eq(0), () => {
        b.store(out, pb, m[rr]);
        b.store(out, pb.add(1), lt[rr]);
      });
      for (let dn = 0; dn < dt; dn++) {
        const at = b.let(pb.add(2 + 8 * dn).add(t.mul(2)), "u32", "pa");
        b.store(out, at, o[dn][2 * rr]);
        b.store(out, at.add(1), o[dn][2 * rr + 1]);
      }
    });
  }
  return b.build();
}

function pairwise4(v: Val[]): Val {
  return v[0].add(v[1]).add(v[2].add(v[3]));
}
