// A small LLVM IR text builder for one function: fresh SSA names, basic blocks, exact constants and the
// intrinsic declarations a body calls; and linkModules, which puts one or many kernels' pieces into a module.
// Values are operand strings ("%t3", "0x3FF0000000000000", "true"); the instruction that uses one names its
// type, as LLVM IR text requires.
import type { CType } from "../../ir.ts";
import { f32ToF16 } from "../../../graph/half.ts";

/** LLVM type of each compute type (bool is i1; i32 and u32 are both i32, the instruction picks the sign). */
export const LT: Record<CType, string> = { f32: "float", f16: "half", i32: "i32", u32: "i32", bool: "i1" };

const f64buf = new DataView(new ArrayBuffer(8));
/** An f32 or f64 constant as LLVM's exact hexadecimal double spelling (a float must be exact in f32). */
export function fhex(x: number): string {
  f64buf.setFloat64(0, x);
  return `0x${f64buf.getBigUint64(0).toString(16).toUpperCase().padStart(16, "0")}`;
}
export const f32c = (x: number): string => fhex(Math.fround(x));
export const f16c = (x: number): string => `0xH${f32ToF16(x).toString(16).toUpperCase().padStart(4, "0")}`;

export class Ll {
  readonly lines: string[] = [];
  readonly allocas: string[] = [];
  readonly decls = new Map<string, string>();
  readonly meta: string[] = [];
  private n = 0;
  private nl = 0;

  /** `%tN = <text>`; returns %tN. */
  v(text: string): string {
    const r = `%t${this.n++}`;
    this.lines.push(`  ${r} = ${text}`);
    return r;
  }
  op(text: string): void {
    this.lines.push(`  ${text}`);
  }
  label(hint = "b"): string {
    return `${hint}${this.nl++}`;
  }
  place(label: string): void {
    this.lines.push(`${label}:`);
  }
  /** A stack slot in the entry block (mem2reg makes it a register). */
  alloca(t: string): string {
    const r = `%a${this.n++}`;
    this.allocas.push(`  ${r} = alloca ${t}, align 4, addrspace(5)`);
    return r;
  }
  /** Calls intrinsic `name` (declared once) returning `ret`. */
  call(ret: string, name: string, args: [string, string][], attrs = ""): string {
    this.declare(ret, name, args.map(([t]) => t), attrs);
    const text = `call ${ret} @${name}(${args.map(([t, x]) => `${t} ${x}`).join(", ")})`;
    if (ret === "void") {
      this.op(text);
      return "";
    }
    return this.v(text);
  }
  declare(ret: string, name: string, types: string[], attrs = ""): void {
    if (!this.decls.has(name)) this.decls.set(name, `declare ${ret} @${name}(${types.join(", ")})${attrs ? ` ${attrs}` : ""}`);
  }
  /** A metadata node; returns !N. */
  node(text: string): string {
    this.meta.push(text);
    return `!${this.meta.length - 1}`;
  }
}

/** The pieces of one kernel's module, which linkModules puts together (one kernel or several). */
export interface LlParts {
  head: string[];
  globals: string[];
  fn: string[];
  decls: string[];
  /** Metadata nodes, numbered from 0 in `fn` and in themselves. */
  meta: string[];
}

const INTRINSIC_ATTRS = [
  `attributes #1 = { convergent nounwind readnone willreturn }`,
  `attributes #2 = { convergent nounwind willreturn }`,
  `attributes #3 = { cold noreturn nounwind }`,
];

/**
 * One LLVM module holding the kernels of `parts` (their entry names must differ): globals and functions side by
 * side, declarations once, metadata renumbered. One comgr compile of many kernels costs little more than one.
 */
export function linkModules(parts: LlParts[]): string {
  const out: string[] = [];
  if (parts.length === 1) out.push(...parts[0].head);
  out.push(`target triple = "amdgcn-amd-amdhsa"`, "");
  const decls = new Set<string>(), meta: string[] = [];
  for (const p of parts) {
    const base = meta.length;
    const renumber = (line: string) => base ? line.replace(/!(\d+)\b/g, (_, n) => `!${Number(n) + base}`) : line;
    out.push(...p.globals, ...p.fn.map(renumber), "");
    p.meta.forEach((m) => meta.push(renumber(m)));
    p.decls.forEach((d) => decls.add(d));
  }
  out.push(...decls, "", ...INTRINSIC_ATTRS, "");
  meta.forEach((m, i) => out.push(`!${i} = ${m}`));
  out.push("");
  return out.join("\n");
}
