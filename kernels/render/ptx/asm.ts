// PTX text assembly: virtual registers by class, labels, instruction lines, and immediate formatting.
// Registers are never reused; ptxas does the allocation. Every value lives in a register of one of these
// classes: f32 (%f), f16 bits (%h, .b16), 32-bit integers (%r, .b32), predicates (%p), 64-bit addresses
// (%rd) and f64 (%fd, only inside pow).
import type { CType } from "../../ir.ts";

export type RegClass = "f" | "h" | "r" | "p" | "rd" | "fd";

/** The register class, the move and the type suffix of each IR scalar type. */
export const RC: Record<CType, RegClass> = { f32: "f", f16: "h", i32: "r", u32: "r", bool: "p" };
export const MOV: Record<CType, string> = { f32: "mov.f32", f16: "mov.b16", i32: "mov.b32", u32: "mov.b32", bool: "mov.pred" };
export const SUF: Record<CType, string> = { f32: "f32", f16: "f16", i32: "s32", u32: "u32", bool: "pred" };

const DECL: Record<RegClass, string> = { f: ".f32", h: ".b16", r: ".b32", p: ".pred", rd: ".b64", fd: ".f64" };

const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);
const F64 = new Float64Array(1);
const U64 = new BigUint64Array(F64.buffer);

/** An f32 immediate (exact bits: NaN, infinities and -0 survive). */
export function f32imm(x: number): string {
  F32[0] = x;
  return `0f${U32[0].toString(16).toUpperCase().padStart(8, "0")}`;
}
/** An f64 immediate. */
export function f64imm(x: number): string {
  F64[0] = x;
  return `0d${U64[0].toString(16).toUpperCase().padStart(16, "0")}`;
}
/** A 32-bit integer immediate (bit pattern of an i32 or u32 value). */
export function b32imm(x: number): string {
  return `0x${(x >>> 0).toString(16).toUpperCase().padStart(8, "0")}`;
}
export const isReg = (s: string): boolean => s.startsWith("%");

export class Asm {
  readonly lines: string[] = [];
  private readonly count: Record<RegClass, number> = { f: 0, h: 0, r: 0, p: 0, rd: 0, fd: 0 };
  private nlabel = 0;

  reg(rc: RegClass): string {
    return `%${rc}${this.count[rc]++}`;
  }
  /** Emits one instruction (without the trailing semicolon). */
  op(text: string): void {
    this.lines.push(`\t${text};`);
  }
  /** Emits `opcode dst, srcs...` into a fresh register of class rc and returns it. */
  to(rc: RegClass, opcode: string, ...srcs: string[]): string {
    const d = this.reg(rc);
    this.op(`${opcode} ${[d, ...srcs].join(", ")}`);
    return d;
  }
  /** A register holding `x` (an immediate is moved into one; a register is returned as is). */
  inReg(rc: RegClass, x: string): string {
    if (isReg(x)) return x;
    const mov = rc === "p" ? "mov.pred" : rc === "h" ? "mov.b16" : rc === "rd" || rc === "fd" ? "mov.b64" : "mov.b32";
    return this.to(rc, mov, x);
  }
  label(): string {
    return `$L__${this.nlabel++}`;
  }
  place(label: string): void {
    this.lines.push(`${label}:`);
  }
  comment(text: string): void {
    this.lines.push(`\t// ${text}`);
  }
  /** `.reg` declarations for every register handed out. */
  decls(): string[] {
    const out: string[] = [];
    for (const rc of Object.keys(DECL) as RegClass[]) {
      if (this.count[rc] > 0) out.push(`\t.reg ${DECL[rc]} %${rc}<${this.count[rc]}>;`);
    }
    return out;
  }
}
