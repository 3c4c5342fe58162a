// Subgroup lowering: subgroups are warps (32 lanes, formed from the linear invocation index). On full warps an
// integer reduction is one redux.sync and a float one a butterfly of shfl.sync; a partial last warp (a workgroup
// size not a multiple of 32) folds down into lane 0 under its member mask, then broadcasts. A shuffle is one
// shfl.sync; a lane outside the warp gives the caller's own value. f16 and bool values ride in 32-bit registers.
import type { CType, Expr, Kernel } from "../../ir.ts";
import { KernelError } from "../../ir.ts";
import { type Asm, MOV, RC, SUF } from "./asm.ts";

/** What subgroup lowering needs from the kernel lowering. */
export interface WarpCtx {
  readonly a: Asm;
  readonly k: Kernel;
  /** Invocations per workgroup. */
  readonly total: number;
  ex(e: Expr): string;
  reg(t: CType, x: string): string;
}

/** The subgroup ops of one kernel. */
export class Warps {
  /**
   * Warp member mask and shfl clamp operand: immediates for full warps, registers (set by the prologue) for a
   * partial last warp.
   */
  mask = "0xFFFFFFFF";
  clamp = "31";

  constructor(private readonly c: WarpCtx) {}

  private get fullWarps(): boolean {
    return this.c.total % 32 === 0;
  }
  /** A 32-bit register carrying a value of type t through shfl. */
  private to32(x: string, t: CType): string {
    if (t === "f16") return this.c.a.to("r", "mov.b32", `{${x}, ${x}}`);
    if (t === "bool") return this.c.a.to("r", "selp.u32", "1", "0", x);
    return x;
  }
  private from32(x: string, t: CType): string {
    const a = this.c.a;
    if (t === "f16") {
      const lo = a.reg("h"), hi = a.reg("h");
      a.op(`mov.b32 {${lo}, ${hi}}, ${x}`);
      return lo;
    }
    if (t === "bool") return a.to("p", "setp.ne.u32", x, "0");
    return x;
  }
  private combine(op: string, t: CType, x: string, y: string, pred = ""): string {
    const a = this.c.a;
    const d = a.reg(RC[t]);
    const opc = t === "f32" || t === "f16"
      ? op === "add" ? `add.rn.${t}` : `${op}.NaN.${t}`
      : op === "add" ? "add.s32" : `${op}.${SUF[t]}`;
    if (pred) {
      a.op(`${MOV[t]} ${d}, ${x}`);
      a.op(`@${pred} ${opc} ${d}, ${d}, ${y}`);
    } else a.op(`${opc} ${d}, ${x}, ${y}`);
    return d;
  }

  /** A subgroup reduction of x over the warp (every existing lane must reach it). */
  reduce(op: string, t: CType, x: string): string {
    const a = this.c.a;
    if (t === "bool") throw new KernelError(`${this.c.k.name}: subgroup ${op} of bool (decomp/mod.ts rewrites it to u32)`);
    if (this.fullWarps) {
      if (t === "i32" || t === "u32") {
        const ty = op === "add" ? "u32" : SUF[t];
        return a.to("r", `redux.sync.${op}.${ty}`, x, "-1");
      }
      let acc = x;
      const rc = t === "f32" ? "f" : "r";
      for (const k of [16, 8, 4, 2, 1]) {
        const other = this.from32(a.to(rc, "shfl.sync.bfly.b32", this.to32(acc, t), String(k), "31", "-1"), t);
        acc = this.combine(op, t, acc, other);
      }
      return acc;
    }
    // A partial warp: fold down into lane 0 (a partner past the warp's end contributes nothing), then broadcast.
    let acc = x;
    for (const k of [16, 8, 4, 2, 1]) {
      const got = a.reg(t === "f32" ? "f" : "r"), p = a.reg("p");
      a.op(`shfl.sync.down.b32 ${got}|${p}, ${this.to32(acc, t)}, ${k}, ${this.clamp}, ${this.mask}`);
      acc = this.combine(op, t, acc, this.from32(got, t), p);
    }
    return this.from32(a.to(t === "f32" ? "f" : "r", "shfl.sync.idx.b32", this.to32(acc, t), "0", this.clamp, this.mask), t);
  }

  /** x from another lane of the warp (`lane` by mode: xor, idx, down); the caller's own where there is none. */
  shuffle(mode: string, t: CType, x: string, lane: Expr): string {
    const a = this.c.a;
    if (lane.k === "const" && (lane.v >>> 0) >= 32) return x; // every source lane is outside the warp
    const l = lane.k === "const" ? String(lane.v) : this.c.reg("u32", this.c.ex(lane));
    const m = { xor: "bfly", idx: "idx", down: "down" }[mode as "xor"];
    const got = a.to(t === "f32" ? "f" : "r", `shfl.sync.${m}.b32`, this.to32(x, t), l, this.clamp, this.mask);
    const v = this.from32(got, t);
    if (lane.k === "const") return v;
    // PTX reads only the low 5 bits of the lane operand; a lane argument >= 32 names no lane: own value.
    const inRange = a.to("p", "setp.lt.u32", l, "32");
    if (t === "bool") {
      return a.to("p", "or.pred", a.to("p", "and.pred", inRange, v), a.to("p", "and.pred", a.to("p", "not.pred", inRange), x));
    }
    return a.to(RC[t], `selp.${t === "f32" ? "f32" : t === "f16" ? "b16" : "b32"}`, v, x, inRange);
  }
}
