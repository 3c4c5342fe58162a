// Decode gemv with fused prologue and epilogues: one kernel computes every batch-1 matmul that reads the same
// input vector against float weights of one layout and width k (a layer's q/k/v, or its gate/up), each a
// "part" with its own weights and output. Teams (a subgroup, several subgroups, or a workgroup) are numbered
// across the parts and pick their part by range, so one dispatch replaces several.
//
// - norm: the input is rms-normalized on the fly. Every team sees all of x anyway, so it sums x² in the same
//   loop as its dots and scales them by r = rsqrt(mean(x²) + eps) at the end: y = r · Σ (x·g)·W, the
//   rmsnorm's output is never stored.
// - A team computes two dots that share every x load: two neighbouring rows of a "dot" part, the rotary pair
//   (i, i + rot/2 or 2i, 2i+1) of a "rope" part (rotated in registers at the slot's position), or gate and up
//   rows of a "silu_mul" part (stores silu(gate)·up).
// - Epilogues: + bias[n] per weight, + residual[n], rounding to f16/bf16 on store, and storing at row pos of a
//   [cap, n] State (the K/V cache write, faulting FAULT.UPDATE_POS past cap).
// Lanes stride over k with 16-byte loads (a subgroup's loads cover contiguous memory), the loop unrolled so a
// lane keeps several loads in flight; one reduction per dot at the end.
// GGUF block weights (dequant.ts) are read at a few bits per value, so x (f32, and g with a norm) would cost
// several times the weight bytes if every row reloaded it: a team of one or several subgroups (combined
// through shared memory) gives each lane a few of the row's block chunks and walks `rows` row units (a dot
// row, a rope pair, a gate/up pair): per chunk, the lane's x·g is loaded once into registers, then each row's
// chunk is loaded (issued `ahead` rows before it is decoded, so loads stay in flight during the arithmetic),
// decoded and dotted as scale·Σq·x + bias·Σx; the units' sums meet in one shared-memory round at the end.
// On the int path (xq) x·g is quantized per chunk and dotted in integers; with xq "prep" a kernel of its own has
// done that once (kernels/lib/xq_prep.ts) and each lane loads its chunk's int8 words, scale and sums instead.
// The modules: gemv_tune.ts (tuning and layout), gemv_dots.ts (a team's dots), gemv_units.ts (row units and
// epilogues); this one checks the shape, declares the bindings and numbers the teams across the parts.
import { type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Buffer, Shared } from "../ir.ts";
import type { Caps } from "../target.ts";
import { elemOf, type FType, type IType, type Team, vecWidth, wgIndex, type WType } from "./common.ts";
import { isQType, type QType, XQ_TYPES } from "./dequant.ts";
import { type XqLayout, xqLayout } from "./xq_prep.ts";
import { type GemvTune, layout } from "./gemv_tune.ts";
import { dots } from "./gemv_dots.ts";
import { tail, unit } from "./gemv_units.ts";
export { gemvTeam, type GemvTune, gemvTune } from "./gemv_tune.ts";

export interface GemvPart {
  /** Output rows (rows of each weight). */
  n: number;
  /** "dot" (default): y = x·W; "silu_mul": two weights, y = silu(x·Wa)·(x·Wb); "rope": y = rope(x·W) by heads of rope.hd. */
  kind?: "dot" | "silu_mul" | "rope";
  /** A "silu_mul" part with the tanh GELU in place of silu: y = gelu(x·Wa)·(x·Wb) (GeGLU). */
  gelu?: boolean;
  /** A bias f32 [n] added to each weight's dot. */
  bias?: boolean;
  /** ("dot") adds residual f32 [n] (may be bound to the same bytes as y). */
  residual?: boolean;
  rope?: { hd: number; rot?: number; style: "adjacent" | "half" };
  /** Storage type of y (default f32; f16/bf16 round to nearest even). */
  out?: FType;
  /** Stores at row pos of y [cap, n] (an in-place State write) instead of y [n]. */
  cap?: number;
  /** Element type of the position binding ("rope" or cap; default u32). */
  pos?: IType;
}

export interface GemvShape {
  /** Width of x and of every weight row. */
  k: number;
  /** Weight layout (a block type: k a whole number of blocks). */
  w: WType;
  /** rmsnorm of x folded in: g [k] of this type. */
  norm?: { eps: number; weight: FType };
  parts: GemvPart[];
  name?: string;
  tune?: Partial<GemvTune>;
  /**
   * Block weights of XQ_TYPES (dequant.ts): x (times g) quantized to int8 per chunk and dotted in integers
   * (dot4), as graph/ops/qdot.ts defines; the rmsnorm's r still scales the sums (a run's quantization does not
   * depend on its scale, up to rounding). "prep": the same, with x arriving quantized (kernels/lib/xq_prep.ts:
   * its buffer in place of x and g, and r in it with a norm), bit-identical.
   */
  xq?: boolean | "prep";
  /**
   * Cache hints (Buffer.reads; default on): the weights "once" (float) or "near" (block types), x (and g) "many";
   * "weights": the weights' alone.
   */
  hints?: boolean | "weights";
}

/** A part's bindings. */
export interface PartBufs {
  ws: Buffer[];
  bias: Buffer[];
  res?: Buffer;
  freqs?: Buffer;
  pos?: Buffer;
  y: Buffer;
}

/** What the parts of a gemv kernel being built share (gemv_dots.ts, gemv_units.ts). */
export interface GemvBuild {
  b: KernelBuilder;
  s: GemvShape;
  k: number;
  /** The block type of the weights (undefined: float weights). */
  qt?: QType;
  /** The int path (x quantized per chunk), and x arriving prepared. */
  xq: boolean;
  prep: boolean;
  /** x (or the prepared x), and the norm's g. */
  x: Buffer;
  g?: Buffer;
  /** The prepared x's layout. */
  xl?: XqLayout;
  bufs: PartBufs[];
  t: Team;
  tune: GemvTune;
  R: number;
  rowsPer: number;
  lane: Val;
  /** Values per weight load (4 for block weights), per x load and per g load (float weights); add chains per dot. */
  vec: number;
  xv: number;
  gv: number;
  chains: number;
  /** The team reduction's shared scratch, made by the first reduction that needs it. */
  qsum?: Shared;
}

/**
 * Bindings, in order: x f32 [k] (r); g [k] (r, when norm) (xq "prep": the prepared x, u32 [xqLayout(w, k, norm).total]
 * (r), in place of both: kernels/lib/xq_prep.ts); then per part: w [n, k] (r) (a second one for
 * "silu_mul"), bias f32 [n] (r) per weight (when bias), residual f32 [n] (r, when residual), freqs f32
 * [rot/2] (r, "rope": the frequency table), pos [1] (r, "rope" or cap), y [n] or [cap, n] of `out` (w; rw with cap).
 * Faults FAULT.ROPE_POS on a negative (i32) rope position, FAULT.UPDATE_POS when pos >= cap.
 */
export function gemv(caps: Caps, s: GemvShape): Kernel {
  const { k, w } = s;
  if (!(k >= 1) || s.parts.length === 0) throw new KernelError(`gemv: bad shape k=${k}, ${s.parts.length} parts`);
  for (const p of s.parts) {
    const kind = p.kind ?? "dot";
    if (!(p.n >= 1) || p.n * k >= 2 ** 32 || (p.cap ?? 1) * p.n >= 2 ** 32) throw new KernelError(`gemv: bad part n=${p.n} k=${k}`);
    if (kind === "rope") {
      const r = p.rope;
      if (!r || r.hd % 2 || (r.rot ?? r.hd) % 2 || (r.rot ?? r.hd) > r.hd || p.n % r.hd) throw new KernelError(`gemv: rope part n=${p.n} needs whole heads of even hd`);
    }
    if (p.residual && kind !== "dot") throw new KernelError("gemv: a residual only on a dot part");
  }
  const qt = isQType(w) ? w : undefined;
  if (s.xq && !(qt && XQ_TYPES.includes(qt))) throw new KernelError(`gemv: quantized x needs a weight of ${XQ_TYPES.join(", ")}, got ${w}`);
  const xq = !!s.xq, prep = s.xq === "prep";
  const { tune, R, rowsPer, units, counts, total, t, grid } = layout(caps, s);
  const tag = s.parts.map((p) => `${p.kind === "silu_mul" ? (p.gelu ? "gm" : "sm") : p.kind === "rope" ? "rope" : "n"}${p.n}${p.bias ? "b" : ""}${p.residual ? "r" : ""}${p.out && p.out !== "f32" ? p.out : ""}${p.cap ? "c" : ""}`).join("_");
  const hints = s.hints !== false, xHint = s.hints === "weights" ? undefined : hints ? "many" as const : undefined;
  const name = s.name ?? `gemv_${w}${prep ? "x8p" : xq ? "x8" : ""}_k${k}${s.norm ? "_norm" : ""}_${tag}_l${t.lanes}r${qt ? R : rowsPer}u${tune.unroll}t${t.rows}${hints ? (xHint ? "" : "_wh") : "_nh"}`;
  const b = new KernelBuilder(name, { workgroup: t.size, grid });

  // prep: x arrives quantized (xq_prep.ts), with r in it when the norm is fused
  const x = prep ? b.buffer("xq", "u32", "r", xHint) : b.buffer("x", "f32", "r", xHint);
  const g = s.norm && !prep ? b.buffer("g", s.norm.weight, "r", xHint) : undefined;
  const xl = prep ? xqLayout(qt!, k, !!s.norm) : undefined;
  const bufs: PartBufs[] = s.parts.map((p, i) => {
    const kind = p.kind ?? "dot";
    const nw = kind === "silu_mul" ? 2 : 1;
    const ws = Array.from({ length: nw }, (_, j) => b.buffer(`w${i}_${j}`, elemOf(w), "r", hints ? (qt ? "near" : "once") : undefined));
    const bias = p.bias ? Array.from({ length: nw }, (_, j) => b.buffer(`bias${i}_${j}`, "f32", "r")) : [];
    const res = p.residual ? b.buffer(`res${i}`, "f32", "r") : undefined;
    const freqs = kind === "rope" ? b.buffer(`freqs${i}`, "f32", "r") : undefined;
    const pos = kind === "rope" || p.cap ? b.buffer(`pos${i}`, p.pos ?? "u32", "r") : undefined;
    const y = b.buffer(`y${i}`, p.out ?? "f32", p.cap ? "rw" : "w");
    return { ws, bias, res, freqs, pos, y };
  });

  // Team index: workgroup * teams per workgroup + subgroup (a wide or shared team is a whole workgroup).
  const single = t.shared || t.sgs > 1 || t.rows === 1;
  const lane = t.lanes === 1 ? u32(0) : single ? b.lid.x : b.builtin("lane");
  const wgi = wgIndex(b, grid);
  const T = b.let(t.rows === 1 ? wgi : wgi.mul(t.rows).add(t.lanes === 1 ? b.lid.x : b.builtin("sgid")), "u32", "team");
  if (grid[0] * grid[1] * grid[2] * t.rows > total) b.if(T.ge(total), () => b.return());

  const vec = qt ? 4 : vecWidth(w === "f32" ? 4 : 2, k);
  const gv = g ? Math.min(vecWidth(s.norm!.weight === "f32" ? 4 : 2, k), vec) : 1;
  // A one-lane team (a CPU) is latency-bound on the rounded add chain: one chain per vector element.
  const cx: GemvBuild = { b, s, k, qt, xq, prep, x, g, xl, bufs, t, tune, R, rowsPer, lane, vec, xv: Math.min(4, vec), gv, chains: t.lanes === 1 ? vec : 1 };

  /**
   * Team tl of part pi: units tl·R .. tl·R + R - 1 in one pass over x (the last team's units past the part's
   * end repeat its last unit and store nothing: a residual bound to y must be added once).
   */
  const body = (pi: number, tl: Val): void => {
    if (R === 1) {
      const u = unit(cx, pi, tl);
      const { sums, ss } = dots(cx, u.rows, u.between, u.waits);
      tail(cx, () => u.end(sums, ss));
      return;
    }
    const first = b.let(tl.mul(R), "u32", "u0");
    const us = Array.from({ length: R }, (_, j) => {
      const raw = j ? first.add(j) : first;
      const ok = units[pi] % R ? raw.lt(units[pi]) : undefined;
      return { ...unit(cx, pi, ok ? b.let(raw.min(units[pi] - 1), "u32", "unit") : j ? b.let(raw, "u32", "unit") : first), ok };
    });
    const { sums, ss } = dots(cx, us.flatMap((u) => u.rows), () => us.forEach((u) => u.between?.()), us.some((u) => u.waits));
    tail(cx, () => {
      let at = 0;
      for (const u of us) {
        u.end(sums.slice(at, at + u.rows.length), ss, u.ok);
        at += u.rows.length;
      }
    });
  };

  // Parts by team range: if T < end0 { part 0 } else if T < end1 { part 1 } ...
  const chain = (pi: number, start: number): void => {
    const end = start + counts[pi];
    const run = () => body(pi, start === 0 ? T : b.let(T.sub(start), "u32", "tl"));
    if (pi === s.parts.length - 1) run();
    else b.if(T.lt(end), run, () => chain(pi + 1, end));
  };
  chain(0, 0);
  return b.build();
}
