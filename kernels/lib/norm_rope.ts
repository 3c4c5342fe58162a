// Per-head RMS norms with their rope and K/V cache write, several tensors in one dispatch: the q and k norms of
// Qwen3 and Gemma 3 (norm over each head's head_dim, then rope, then K into the cache) are five kernels
// otherwise (two norms, two ropes, a cache write), each a dependent dispatch. One team per (part, row, head):
// the lanes hold the head's rope pairs in registers, reduce the sum of squares, scale, rotate and store.
// The arithmetic is rows.ts rmsnorm's followed by rope.ts's (the norm's value is never stored or rounded), so
// only the order of the sum of squares can differ from the separate kernels.
import { f32, type Kernel, KernelBuilder, KernelError, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import { type FType, gridFor, type IType, team, teamReduce, teamRow } from "./common.ts";

/** One tensor of a normRope dispatch: x [rows, heads, hd], each head normed by one weight [hd]. */
export interface NormRopePart {
  rows: number;
  heads: number;
  hd: number;
  eps: number;
  /** Storage type of the norm weight. */
  weight: FType;
  /** The weight is (w + weightAdd), added in f32 as it is loaded (Gemma 3's 1 + w). */
  weightAdd?: number;
  /** Rope of the normed heads at the row's position pos[row] (frequencies from a table binding). */
  rope?: { rot?: number; style: "adjacent" | "half" };
  /** Stores row r at row pos[0] + r of a [cap, heads * hd] State (the cache write) instead of y [rows, heads, hd]. */
  cap?: number;
  /** Type of the position binding (rope or cap; default u32). */
  pos?: IType;
  /** Storage type of y (default f32; f16/bf16 round to nearest even on store). */
  out?: FType;
}

export interface NormRopeShape {
  parts: NormRopePart[];
  name?: string;
}

/**
 * y = rope(x * rsqrt(mean_head(x^2) + eps) * w) per (row, head) of every part.
 * Bindings per part, in order: x f32 [rows, heads, hd] (r); w [hd] (r); freqs f32 [rot/2] (r, rope); pos [rows]
 * u32|i32 (r, rope or cap: the row positions; a cache write reads pos[0]); y [rows, heads, hd] (w) or [cap, heads,
 * hd] (rw, cap). Faults FAULT.ROPE_POS on a negative (i32) rope position, FAULT.UPDATE_POS when pos[0] + rows > cap.
 */
export function normRope(caps: Caps, s: NormRopeShape): Kernel {
  if (!s.parts.length) throw new KernelError("norm_rope: no parts");
  let teams = 0;
  const starts: number[] = [];
  for (const p of s.parts) {
    const rot = p.rope?.rot ?? p.hd;
    if (!(p.rows >= 1 && p.heads >= 1 && p.hd >= 2) || p.hd % 2 || rot % 2 || rot > p.hd) throw new KernelError(`norm_rope: bad part ${p.rows}x${p.heads}x${p.hd} (rot ${rot})`);
    // A cache write stores row r at pos[0] + r while rope turns it by pos[r]: one row keeps the two the same.
    if (p.cap !== undefined && (p.rows !== 1 || p.cap * p.heads * p.hd >= 2 ** 32)) throw new KernelError(`norm_rope: a cache write of ${p.rows} rows (one row only) into cap ${p.cap}`);
    starts.push(teams);
    teams += p.rows * p.heads;
  }
  if (teams * Math.max(...s.parts.map((p) => p.hd)) >= 2 ** 32) throw new KernelError("norm_rope: indices exceed 32 bits");
  // Lanes up to half the widest head: every lane holds at least one pair.
  const pairs = Math.max(...s.parts.map((p) => p.hd / 2));
  let maxLanes = 1;
  while (maxLanes * 2 <= pairs) maxLanes *= 2;
  const t = team(caps, { rows: teams, maxLanes });
  const grid = gridFor(caps, Math.ceil(teams / t.rows));
  const tag = s.parts.map((p) =>
    `h${p.rows}x${p.heads}x${p.hd}_${p.weight}${p.weightAdd !== undefined ? `_wa${String(p.weightAdd).replace(/\W/g, "_")}` : ""}${p.rope ? `_${p.rope.style}${(p.rope.rot ?? p.hd) !== p.hd ? p.rope.rot : ""}` : ""}${p.cap ? `_c${p.cap}` : ""}${p.out && p.out !== "f32" ? `_${p.out}` : ""}`
  ).join("_");
  const pt = s.parts.find((p) => p.pos)?.pos ?? "u32";
  const b = new KernelBuilder(s.name ?? `norm_rope_${tag}_${pt}`, { workgroup: t.size, grid });
  const bufs = s.parts.map((p, i) => ({
    x: b.buffer(`x${i}`, "f32", "r"),
    w: b.buffer(`w${i}`, p.weight, "r"),
    freqs: p.rope ? b.buffer(`freqs${i}`, "f32", "r") : undefined,
    pos: p.rope || p.cap ? b.buffer(`pos${i}`, p.pos ?? "u32", "r") : undefined,
    y: b.buffer(`y${i}`, p.out ?? "f32", p.cap ? "rw" : "w"),
  }));
  const { lane, row: trow } = teamRow(b, t, grid);
  if (grid[0] * grid[1] * grid[2] * t.rows > teams) b.if(trow.ge(teams), () => b.return());

  const body = (pi: number) => {
    const p = s.parts[pi], pb = bufs[pi], { hd } = p, half = hd / 2, rot = p.rope?.rot ?? hd;
    const item = b.let(pi ? trow.sub(starts[pi]) : trow, "u32", "item"); // row * heads + head
    const base = b.let(item.mul(hd), "u32", "base");
    // The lane's pairs: (i, i + rot/2) inside a "half" rotation, else (2i, 2i + 1) (as rope.ts pairs them).
    const per = Math.ceil(half / t.lanes);
    const pairOf = (j: number) => {
      const i = b.let(j ? lane.add(j * t.lanes) : lane, "u32", "i");
      const inRot = p.rope && rot !== hd ? b.let(i.lt(rot / 2), "bool", "inrot") : undefined;
      const half2 = p.rope?.style === "half";
      const ia = b.let(half2 ? (inRot ? inRot.select(i, i.mul(2)) : i) : i.mul(2), "u32", "ia");
      const ib = b.let(half2 ? (inRot ? inRot.select(ia.add(rot / 2), ia.add(1)) : ia.add(rot / 2)) : ia.add(1), "u32", "ib");
      const ok = half % t.lanes === 0 ? undefined : b.let(i.lt(half), "bool", "ok");
      const load = (d: Val) => {
        const v = b.load(pb.x, base.add(ok ? d.min(hd - 1) : d));
        return b.let(ok ? ok.select(v, f32(0)) : v, "f32", "xv");
      };
      return { i, inRot, ia, ib, ok, x0: load(ia), x1: load(ib) };
    };
    const ps = Array.from({ length: per }, (_, j) => pairOf(j));
    const ss = ps.reduce<Val>((a, q) => a.add(q.x0.mul(q.x0)).add(q.x1.mul(q.x1)), f32(0));
    const tot = teamReduce(b, t, "add", b.let(ss, "f32", "ss"));
    const r = b.let(tot.div(hd).add(f32(p.eps)).rsqrt(), "f32", "r");
    let p0: Val | undefined, dst: Val | undefined;
    if (pb.pos) {
      const rowIdx = b.let(item.div(p.heads), "u32", "ri");
      const pv = b.load(pb.pos, p.cap ? 0 : rowIdx);
      p0 = b.let(pv, pv.t, "p");
      if (p.cap) {
        const at = b.let(p0.t === "i32" ? p0.bitcast("u32") : p0, "u32", "pos"); // negative -> huge
        b.check(at.le(p.cap - p.rows), FAULT.UPDATE_POS);
        dst = b.let(at.add(rowIdx).mul(p.heads * hd).add(item.mod(p.heads).mul(hd)), "u32", "dst");
      }
    }
    const outBase = dst ?? base;
    for (const q of ps) {
      const store = (y0: Val, y1: Val) => {
        const st = () => {
          b.store(pb.y, outBase.add(q.ia), y0);
          b.store(pb.y, outBase.add(q.ib), y1);
        };
        if (q.ok) b.if(q.ok, st);
        else st();
      };
      const wl = (d: Val) => {
        const v = b.load(pb.w, q.ok ? d.min(hd - 1) : d);
        return p.weightAdd !== undefined ? v.add(f32(p.weightAdd)) : v;
      };
      const w0 = wl(q.ia), w1 = wl(q.ib);
      const y0 = b.let(q.x0.mul(r).mul(w0), "f32", "y0"), y1 = b.let(q.x1.mul(r).mul(w1), "f32", "y1");
      if (!p.rope) {
        store(y0, y1);
        continue;
      }
      const rope = () => {
        const rp = p0!; // pos[row]: a cache-write part has one row, at pos[0]
        if (rp.t === "i32") b.check(rp.ge(0), FAULT.ROPE_POS);
        const ang = b.let(rp.cast("f32").mul(b.load(pb.freqs!, rot === hd ? q.i : q.i.min(rot / 2 - 1))), "f32", "ang");
        const cs = b.let(ang.cos(), "f32", "c"), sn = b.let(ang.sin(), "f32", "s");
        store(y0.mul(cs).sub(y1.mul(sn)), y0.mul(sn).add(y1.mul(cs)));
      };
      if (q.inRot) b.if(q.inRot, rope, () => store(y0, y1));
      else rope();
    }
  };
  const chain = (pi: number): void => {
    if (pi === s.parts.length - 1) return body(pi);
    b.if(trow.lt(starts[pi + 1]), () => body(pi), () => chain(pi + 1));
  };
  chain(0);
  return b.build();
}
