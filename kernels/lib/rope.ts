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
  name?: string;
}

/**
 * Bindings: x f32 [rows, heads, hd] (r); pos [1] or [rows] u32|i32 (r); freqs f32 [rot/2] (r, when freqs);
 * y f32 [rows, heads, hd] (w; may alias x). Faults FAULT.ROPE_POS on a negative (i32) position.
 */
export function rope(caps: Caps, s: RopeShape): Kernel {
  const { rows, heads, hd, theta } = s;
  const rot = s.rot ?? hd, pt = s.pos ?? "u32", mode = s.positions ?? "base";
  if (hd % 2 || rot % 2 || rot > hd) throw new KernelError(`rope: head_dim ${hd} / rot ${rot} must be even, rot <= hd`);
  const half = hd / 2, total = rows * heads * half;
  const wg = Math.min(64, caps.maxWorkgroupSize);
  const grid = gridFor(caps, Math.ceil(total / wg));
  const name = s.name ?? `rope_${s.style}_r${rows}_h${heads}_d${hd}${rot !== hd ? `_rot${rot}` : ""}_${pt}${mode === "rows" ? "_rowpos" : ""}${s.freqs ? "_table" : ""}`;
  const b = new KernelBuilder(name, { workgroup: wg, grid });
  const x = b.buffer("x", "f32", "r");
  const P = b.buffer("pos", pt, "r");
  const F = s.freqs ? b.buffer("freqs", "f32", "r") : undefined;
  const y = b.buffer("y", "f32", "w");

  const idx = b.let(wg === 1 ? wgIndex(b, grid) : wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "idx");
  if (grid[0] * grid[1] * grid[2] * wg > total) b.if(idx.ge(total), () => b.return());
  const i = b.let(idx.mod(half), "u32", "i");
  const rh = b.let(idx.div(half), "u32", "rh");
  const base = b.let(rh.mul(hd), "u32", "base");
  const rotate = () => {
    const r = heads === 1 ? rh : rh.div(heads);
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
    const ia = b.let(s.style === "adjacent" ? base.add(i.mul(2)) : base.add(i), "u32", "ia");
    const ib = b.let(s.style === "adjacent" ? ia.add(1) : ia.add(rot / 2), "u32", "ib");
    const x0 = b.let(b.load(x, ia), "f32", "x0"), x1 = b.let(b.load(x, ib), "f32", "x1");
    b.store(y, ia, x0.mul(cs).sub(x1.mul(sn)));
    b.store(y, ib, x0.mul(sn).add(x1.mul(cs)));
  };
  const pass = () => { // dims past rot are copied (pair i covers 2i, 2i+1 in both styles there)
    const ia = base.add(i.mul(2));
    b.store(y, ia, b.load(x, ia));
    b.store(y, ia.add(1), b.load(x, ia.add(1)));
  };
  if (rot === hd) rotate();
  else b.if(i.lt(rot / 2), rotate, pass);
  return b.build();
}
