// Rotary position embedding. The position comes from the slot buffer (never baked): row r of a step sits at
// pos[0] + r, or at pos[r] for per-row positions (batched decode). Angle of pair i = position * freq_i with
// freq_i = theta^(-2i/rot) computed in f32 (pow), or read from a frequency table (exact across targets).
import { f32, type Kernel, KernelBuilder, KernelError, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import { gridFor, type IType, wgIndex } from "./common.ts";

export interface RopeShape {
  rows: number;
  heads: number;
  hd: number;
  theta: number;
  /** "adjacent": pairs (2i, 2i+1) (GPT-J, llama.cpp LLAMA); "half": pairs (i, i + rot/2) (NeoX, HF Llama). */
  style: "adjacent" | "half";
  /** Rotated dims (partial rotary); the rest pass through. Default hd. */
  rot?: number;
  pos?: IType;
  /** "base": pos[0] + row (default); "rows": pos[row]. */
  positions?: "base" | "rows";
  /** Read freq_i from a table binding instead of computing it. */
  freqs?: boolean;
  /** Heads each thread rotates with one cos/sin (a divisor of heads); default ropeHeadsPer's. */
  headsPer?: number;
  name?: string;
}

/**
 * Heads a thread rotates with one angle: the angle depends on the row and the pair, not the head, and its cos and
 * sin are most of the kernel's work, so a thread takes up to 8 heads while the grid keeps >= 32768 threads (a
 * 2048-row prefill chunk of 32 heads: 8; a decode row: 1). On the H200 the 8B's q rope of a 2048-row chunk took
 * 79.6 µs one head a thread, ~0.84 TB/s of its bytes.
 */
export function ropeHeadsPer(rows: number, heads: number, hd: number): number {
  let best = 1;
  for (let h = 2; h <= Math.min(8, heads); h++) {
    if (heads % h === 0 && (rows * (hd / 2) * heads) / h >= 32768) best = h;
  }
  return best;
}

/**
 * Bindings: x f32 [rows, heads, hd] (r); pos [1] or [rows] u32|i32 (r); freqs f32 [rot/2] (r, when freqs);
 * y f32 [rows, heads, hd] (w; may alias x). Faults FAULT.ROPE_POS on a negative (i32) position. Each thread
 * rotates pair i of `headsPer` heads of one row (default ropeHeadsPer), with the same arithmetic per element.
 */
export function rope(caps: Caps, s: RopeShape): Kernel {
  const { rows, heads, hd, theta } = s;
  const rot = s.rot ?? hd, pt = s.pos ?? "u32", mode = s.positions ?? "base";
  if (hd % 2 || rot % 2 || rot > hd) throw new KernelError(`rope: head_dim ${hd} / rot ${rot} must be even, rot <= hd`);
  const hp = s.headsPer ?? ropeHeadsPer(rows, heads, hd);
  if (!(Number.isInteger(hp) && hp >= 1 && heads % hp === 0)) throw new KernelError(`rope: ${hp} heads a thread does not divide ${heads}`);
  const half = hd / 2, groups = heads / hp, total = rows * groups * half;
  const wg = Math.min(64, caps.maxWorkgroupSize);
  const grid = gridFor(caps, Math.ceil(total / wg));
  const name = s.name ?? `rope_${s.style}_r${rows}_h${heads}_d${hd}${rot !== hd ? `_rot${rot}` : ""}_${pt}${mode === "rows" ? "_rowpos" : ""}${s.freqs ? "_table" : ""}${hp > 1 ? `_hp${hp}` : ""}`;
  const b = new KernelBuilder(name, { workgroup: wg, grid });
  const x = b.buffer("x", "f32", "r");
  const P = b.buffer("pos", pt, "r");
  const F = s.freqs ? b.buffer("freqs", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");

  // thread idx: pair i fastest (neighbouring threads touch neighbouring words), then the head group, then the row
  const idx = b.let(wg === 1 ? wgIndex(b, grid) : wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "idx");
  if (grid[0] * grid[1] * grid[2] * wg > total) b.if(idx.ge(total), () => b.return());
  const i = b.let(idx.mod(half), "u32", "i");
  const rg = b.let(idx.div(half), "u32", "rg"); // row * groups + group
  const r = groups === 1 ? rg : b.let(rg.div(groups), "u32", "row");
  const base = b.let(rg.mul(hp * hd), "u32", "base"); // the group's first head
  const headBases = Array.from({ length: hp }, (_, h) => (h ? b.let(base.add(h * hd), "u32", "hb") : base));
  const rotate = () => {
    let p: Val;
    if (mode === "rows") p = b.load(P, r);
    else p = b.load(P, 0).add(pt === "i32" ? r.bitcast("i32") : r);
    if (pt === "i32") {
      p = b.let(p, "i32", "p");
      b.check(p.ge(0), FAULT.ROPE_POS);
    }
    const freq = F ? b.load(F, i) : f32(theta).pow(i.mul(2).cast("f32").div(f32(rot)).neg());
    const ang = b.let(p.cast("f32").mul(freq), "f32", "ang");
    const cs = b.let(ang.cos(), "f32", "c"), sn = b.let(ang.sin(), "f32", "s");
    // every head's pair loaded before any is stored (y may alias x: a thread writes only what it read)
    const pairs = headBases.map((hb) => {
      const ia = b.let(s.style === "adjacent" ? hb.add(i.mul(2)) : hb.add(i), "u32", "ia");
      const ib = b.let(s.style === "adjacent" ? ia.add(1) : ia.add(rot / 2), "u32", "ib");
      return { ia, ib, x0: b.let(b.load(x, ia), "f32", "x0"), x1: b.let(b.load(x, ib), "f32", "x1") };
    });
    for (const { ia, ib, x0, x1 } of pairs) {
      b.store(y, ia, x0.mul(cs).sub(x1.mul(sn)));
      b.store(y, ib, x0.mul(sn).add(x1.mul(cs)));
    }
  };
  const pass = () => { // dims past rot are copied (pair i covers 2i, 2i+1 in both styles there)
    for (const hb of headBases) {
      const ia = hb.add(i.mul(2));
      b.store(y, ia, b.load(x, ia));
      b.store(y, ia.add(1), b.load(x, ia.add(1)));
    }
  };
  if (rot === hd) rotate();
  else b.if(i.lt(rot / 2), rotate, pass);
  return b.build();
}
