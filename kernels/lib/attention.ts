// Attention over a fixed-capacity KV cache, for decode (rows = 1) and prefill (rows query rows at positions
// pos .. pos+rows-1, causal). The graph defines it over all `cap` positions with a mask (position <= the
// query's position); the kernel reads `pos` from the slot buffer and stops its loop at pos+row+1, so work
// tracks the real context while the grid is constant. Masked terms would contribute exp(-inf) = 0 exactly,
// so this equals the masked full sweep up to float reassociation.
// One team per (query row, head); lanes own contiguous slices of head_dim (vector loads), reduce the dot
// product per position, and keep an online softmax (running max, sum and weighted V) in registers.
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import { type FType, gridFor, type IType, pairwise, team, teamRow, teamReduce, vecWidth } from "./common.ts";

export interface AttentionShape {
  /** Query rows (1 = decode). */
  rows?: number;
  heads: number;
  kvHeads: number;
  /** head_dim */
  hd: number;
  /** KV capacity (positions). */
  cap: number;
  /** Storage type of K and V (default f32). */
  kv?: FType;
  /** Type of the position slot (default u32). */
  pos?: IType;
  /** Score scale, default 1/sqrt(hd). */
  scale?: number;
  name?: string;
}

/**
 * out[r, h, :] = softmax_p(scale * q[r, h, :] . K[p, h / (heads / kvHeads), :] masked to p <= pos + r) @ V.
 * Bindings, in order: q f32 [rows, heads, hd] (r); k [cap, kvHeads, hd] (r); v [cap, kvHeads, hd] (r);
 * pos [1] u32|i32 (r, the slot: position of query row 0); out f32 [rows, heads, hd] (w).
 * Faults FAULT.ATTENTION_POS when pos + rows > cap (or pos < 0).
 */
export function attention(caps: Caps, s: AttentionShape): Kernel {
  const rows = s.rows ?? 1, { heads, kvHeads, hd, cap } = s;
  const kv = s.kv ?? "f32", pt = s.pos ?? "u32";
  if (heads % kvHeads !== 0) throw new KernelError(`attention: ${heads} heads over ${kvHeads} kv heads`);
  if (rows > cap) throw new KernelError(`attention: ${rows} rows exceed cap ${cap}`);
  if (cap * kvHeads * hd >= 2 ** 32) throw new KernelError("attention: KV indices exceed 32 bits");
  const group = heads / kvHeads;
  const scale = s.scale ?? 1 / Math.sqrt(hd);
  const items = rows * heads;
  const t = team(caps, { rows: items });
  const grid = gridFor(caps, Math.ceil(items / t.rows));
  const name = s.name ?? `attention_r${rows}_h${heads}_kv${kvHeads}_d${hd}_c${cap}_${kv}_${pt}`;
  const b = new KernelBuilder(name, { workgroup: t.size, grid });
  const q = b.buffer("q", "f32", "r");
  const K = b.buffer("k", kv, "r");
  const V = b.buffer("v", kv, "r");
  const P = b.buffer("pos", pt, "r");
  const out = b.buffer("out", "f32", "w");

  const { lane, row: item } = teamRow(b, t, grid);
  const posv = b.load(P, 0);
  const pos = b.let(pt === "i32" ? posv.bitcast("u32") : posv, "u32", "pos"); // negative i32 -> huge u32
  b.check(pos.le(cap - rows), FAULT.ATTENTION_POS);
  if (grid[0] * grid[1] * grid[2] * t.rows > items) b.if(item.ge(items), () => b.return());

  const r = item.div(heads), h = item.mod(heads);
  const kvh = b.let(group === 1 ? h : h.div(group), "u32", "kvh");
  const end = b.let(pos.add(r).add(1), "u32", "end");

  // Each lane owns dims [lane*nd, lane*nd + nd) of the head (dims past hd only when hd % lanes != 0).
  const nd = Math.ceil(hd / t.lanes);
  const exact = hd % t.lanes === 0;
  const vq = exact ? vecWidth(4, nd) : 1, vk = exact ? vecWidth(kv === "f32" ? 4 : 2, nd) : 1;
  const d0 = t.lanes === 1 ? u32(0) : b.let(lane.mul(nd), "u32", "d0");
  const valid = (j: number): Val | true => exact ? true : d0.add(j).lt(hd);
  const clampIdx = (j: number): Val => exact ? d0.add(j) : d0.add(j).min(hd - 1);
  const loadRow = (buf: typeof K, base: Val, vw: number): Val[] => {
    const xs: Val[] = [];
    for (let j = 0; j < nd; j += vw) {
      if (vw > 1) xs.push(...b.loadv(buf, base.add(d0).add(j), vw));
      else {
        const v = b.load(buf, base.add(clampIdx(j)));
        const ok = valid(j);
        xs.push(ok === true ? v : b.let(ok.select(v, f32(0)), "f32", "x"));
      }
    }
    return xs;
  };
  const qbase = b.let(item.mul(hd), "u32", "qb");
  const qs = loadRow(q, qbase, vq).map((v) => b.let(v, "f32", "q"));

  const m = b.let(f32(-Infinity), "f32", "m");
  const l = b.let(f32(0), "f32", "l");
  const acc = qs.map(() => b.let(f32(0), "f32", "acc"));
  b.for(u32(0), end, 1, (p) => {
    const kb = b.let(p.mul(kvHeads).add(kvh).mul(hd), "u32", "kb");
    const ks = loadRow(K, kb, vk);
    const part = pairwise(qs.map((qj, j) => qj.mul(ks[j]))); // a tree: short dependency chains
    const sc = b.let(teamReduce(b, t, "add", b.let(part, "f32", "part")).mul(scale), "f32", "s");
    const mn = b.let(m.max(sc), "f32", "mn");
    // exp(0) = 1 exactly: skipping it when the max holds changes nothing (and saves a CPU target an exp)
    const corr = b.let(m.eq(mn).select(f32(1), m.sub(mn).exp()), "f32", "corr");
    const pe = b.let(sc.sub(mn).exp(), "f32", "pe");
    b.set(l, l.mul(corr).add(pe));
    const vs = loadRow(V, kb, vk);
    for (let j = 0; j < nd; j++) b.set(acc[j], acc[j].mul(corr).add(pe.mul(vs[j])));
    b.set(m, mn);
  });
  for (let j = 0; j < nd; j++) {
    const ok = valid(j);
    const st = () => b.store(out, qbase.add(d0).add(j), acc[j].div(l));
    if (ok === true) st();
    else b.if(ok, st);
  }
  return b.build();
}
