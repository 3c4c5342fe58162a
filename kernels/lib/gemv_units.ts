// A decode gemv's row units (gemv.ts) and their epilogues: a "dot" part's row (or neighbouring row pair), a
// "rope" part's rotary pair rotated in registers at the slot's position, a "silu_mul" part's gate and up rows;
// each dot scaled by the norm's r, plus its bias, then + residual, rounded to the output type on store, at row
// pos of a [cap, n] State where the part writes the K/V cache.
import { f32, u32, type Val } from "../ir.ts";
import type { Buffer } from "../ir.ts";
import { FAULT } from "./codes.ts";
import { evalEw } from "./elementwise.ts";
import type { GemvBuild, GemvPart, PartBufs } from "./gemv.ts";
import type { DotRow } from "./gemv_dots.ts";

/** A row unit's rows, work that may overlap their first loads, and its epilogue (stores only when `ok`). */
export interface Unit {
  rows: DotRow[];
  between?: () => void;
  /** `between` waits on a load of its own (a rope part's angle, on the position): the weight loads go first. */
  waits?: boolean;
  end: (sums: Val[], ss: Val | undefined, ok?: Val) => void;
}

/** The epilogues after a team's reduction: on a team of several subgroups, the first one alone (it stores). */
export function tail(cx: GemvBuild, f: () => void): void {
  if (cx.qt && cx.t.sgs > 1) cx.b.if(cx.b.builtin("sgid").eq(u32(0)), f);
  else f();
}

/**
 * Each dot's bias, loaded in the unit's `between` (while its first weight loads are in flight) rather than after
 * the team's reduction, where it would add a round trip to the kernel's tail (qwen2's q/k/v).
 */
function biases(cx: GemvBuild, bias: Buffer[], rows: Val[]): Val[] {
  return bias.length ? rows.map((row, d) => cx.b.let(cx.b.load(bias[Math.min(d, bias.length - 1)], row), "f32", "bias")) : [];
}

/** Each dot scaled by the norm's r, plus its bias (`biases`' values). */
function finish(cx: GemvBuild, sums: Val[], ss: Val | undefined, bias: Val[]): Val[] {
  const { b, k, s, x, xl } = cx;
  const r = ss ? b.let(ss.div(k).add(f32(s.norm!.eps)).rsqrt(), "f32", "r")
    : xl?.rAt !== undefined ? b.let(b.load(x, xl.rAt).bitcast("f32"), "f32", "r") : undefined;
  return sums.map((v, d) => {
    const o = r ? v.mul(r) : v;
    return b.let(bias.length ? o.add(bias[d]) : o, "f32", "dot");
  });
}

/** Lane 0 stores (every lane holds the sums). */
function once(cx: GemvBuild, f: () => void): void {
  if (cx.t.lanes === 1) f();
  else cx.b.if(cx.lane.eq(u32(0)), f);
}

const guard = (cx: GemvBuild, ok: Val | undefined, f: () => void) => (ok ? cx.b.if(ok, f) : f());

/** Output index of row `row` (at row pos of a [cap, n] destination when cap). */
const outAt = (p: GemvPart, pos: Val | undefined, row: Val): Val => (p.cap ? pos!.mul(p.n).add(row) : row);

/** The K/V row a cap part writes: the slot's value `v` as u32 (a negative i32 past any cap), faulting UPDATE_POS past cap. */
function capPos(cx: GemvBuild, p: GemvPart, v: Val): Val {
  const pos = cx.b.let(v.t === "i32" ? v.bitcast("u32") : v, "u32", "pos");
  cx.b.check(pos.lt(p.cap!), FAULT.UPDATE_POS);
  return pos;
}

function loadPos(cx: GemvBuild, p: GemvPart, pb: PartBufs): Val | undefined {
  return pb.pos && p.cap ? capPos(cx, p, cx.b.load(pb.pos, 0)) : undefined;
}

/** Unit `tl` of part `pi`. */
export function unit(cx: GemvBuild, pi: number, tl: Val): Unit {
  const p = cx.s.parts[pi], kind = p.kind ?? "dot";
  if (kind === "silu_mul") return siluMul(cx, pi, tl);
  if (kind === "rope") return rope(cx, pi, tl);
  return dot(cx, pi, tl);
}

/** silu(x·Wa)·(x·Wb) (or gelu) of row tl. */
function siluMul(cx: GemvBuild, pi: number, row: Val): Unit {
  const { b } = cx, p = cx.s.parts[pi], pb = cx.bufs[pi];
  let bias: Val[] = [];
  return {
    rows: [{ buf: pb.ws[0], row }, { buf: pb.ws[1], row }],
    between: () => {
      bias = biases(cx, pb.bias, [row, row]);
    },
    end: (sums, ss, ok) => {
      const [gt, up] = finish(cx, sums, ss, bias);
      once(cx, () => guard(cx, ok, () => b.store(pb.y, outAt(p, loadPos(cx, p, pb), row), evalEw({ op: "mul", args: [{ op: p.gelu ? "gelu" : "silu", args: [{ in: 0 }] }, { in: 1 }] }, [gt, up]))));
    },
  };
}

/** Rotary pair tl (its head, its i), rotated at the slot's position. */
function rope(cx: GemvBuild, pi: number, tl: Val): Unit {
  const { b } = cx, p = cx.s.parts[pi], pb = cx.bufs[pi];
  const { hd, style } = p.rope!, rot = p.rope!.rot ?? hd, half = hd / 2;
  const i = b.let(tl.mod(half), "u32", "i");
  const base = b.let(tl.div(half).mul(hd), "u32", "hbase");
  // Rotated pairs are (i, i + rot/2) or (2i, 2i + 1); dims past rot pass through as (2i, 2i + 1).
  const inRot = i.lt(rot / 2);
  const ia = b.let(style === "half" && rot === hd ? base.add(i) : style === "half" ? inRot.select(base.add(i), base.add(i.mul(2))) : base.add(i.mul(2)), "u32", "ia");
  const ib = b.let(style === "half" && rot === hd ? ia.add(rot / 2) : style === "half" ? inRot.select(ia.add(rot / 2), ia.add(1)) : ia.add(1), "u32", "ib");
  // The angle's cos and sin right after the first weight loads: they do not depend on the dots, so they
  // overlap those loads.
  let p0!: Val, cs!: Val, sn!: Val, bias: Val[] = [];
  const angle = () => {
    const pv = b.load(pb.pos!, 0);
    p0 = pv.t === "i32" ? b.let(pv, "i32", "p") : b.let(pv, "u32", "p");
    const ang = b.let(p0.cast("f32").mul(b.load(pb.freqs!, rot === hd ? i : i.min(rot / 2 - 1))), "f32", "ang");
    cs = b.let(ang.cos(), "f32", "c");
    sn = b.let(ang.sin(), "f32", "s");
    bias = biases(cx, pb.bias, [ia, ib]);
  };
  return {
    rows: [{ buf: pb.ws[0], row: ia }, { buf: pb.ws[0], row: ib }],
    between: angle,
    waits: true,
    end: (sums, ss, ok) => {
      const [x0, x1] = finish(cx, sums, ss, bias);
      once(cx, () => guard(cx, ok, () => {
        if (p0.t === "i32") b.check(p0.ge(0), FAULT.ROPE_POS);
        // the K/V row's position is the angle's (the same slot), not loaded again
        const pos = p.cap ? capPos(cx, p, p0) : undefined;
        const store = (y0: Val, y1: Val) => {
          b.store(pb.y, outAt(p, pos, ia), y0);
          b.store(pb.y, outAt(p, pos, ib), y1);
        };
        const rotate = () => store(x0.mul(cs).sub(x1.mul(sn)), x0.mul(sn).add(x1.mul(cs)));
        if (rot === hd) rotate();
        else b.if(inRot, rotate, () => store(x0, x1));
      }));
    },
  };
}

/** A dot part's rows r0 and (when two per team) r1 = r0 + 1, clamped to the last row (computed twice, stored once). */
function dot(cx: GemvBuild, pi: number, tl: Val): Unit {
  const { b, s } = cx, p = s.parts[pi], pb = cx.bufs[pi];
  const r0 = b.let(cx.rowsPer === 2 ? tl.mul(2) : tl, "u32", "r0");
  const r1 = cx.rowsPer === 2 ? b.let(p.n % 2 ? r0.add(1).min(p.n - 1) : r0.add(1), "u32", "r1") : undefined;
  const rows = r1 ? [r0, r1] : [r0];
  let bias: Val[] = [];
  return {
    rows: rows.map((row) => ({ buf: pb.ws[0], row })),
    between: () => {
      bias = biases(cx, pb.bias, rows);
    },
    end: (sums, ss, ok) => {
      const vals = finish(cx, sums, ss, bias);
      once(cx, () => guard(cx, ok, () => {
        const pos = loadPos(cx, p, pb);
        rows.forEach((row, d) => {
          const emit = () => {
            const at = b.let(outAt(p, pos, row), "u32", "yi");
            b.store(pb.y, at, pb.res ? vals[d].add(b.load(pb.res, row)) : vals[d]);
          };
          if (d === 1 && p.n % 2) b.if(r0.add(1).lt(p.n), emit);
          else emit();
        });
      }));
    },
  };
}
