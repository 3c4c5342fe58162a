// Global-memory lowering: element addresses (64-bit, binding base + index * view size), scalar loads and
// stores with the IR's conversions, and vector loads/stores moved as 16/8/4/2-byte accesses then split or
// packed per element. Read-only bindings load through the non-coherent path (ld.global.nc).
import type { AtomicOp, Buffer, CType, EType, Expr, Kernel, Var } from "../../ir.ts";
import { ESIZE, KernelError } from "../../ir.ts";
import type { Asm } from "./asm.ts";

/** What memory lowering needs from the kernel lowering. */
export interface MemCtx {
  readonly a: Asm;
  readonly k: Kernel;
  /** Global base address register of each binding. */
  readonly bases: readonly string[];
  ex(e: Expr): string;
  opnd(e: Expr): string;
  reg(t: CType, x: string): string;
  cast(x: string, from: CType, to: CType): string;
  varReg(v: Var): string;
}

/**
 * Buffer.reads as load qualifiers. "once": not kept in L1 (which then holds the x every team of the SM rereads)
 * and fetched into L2 in 256-byte pieces; "near": evicted from L1 first; "many": evicted last. Whole decode steps
 * 0.5-2.3% faster on an H100 (README, session 38). Not for "near": with L1 bypassed a q8_0 gemv (34-byte blocks
 * read in 2-byte-aligned pieces) took 2.2x as long, q4_k_m's 1.2x; 256-byte fetches alone cost q4_k_m 1-2%.
 */
const READ_HINT: Record<NonNullable<Buffer["reads"]>, string> = { once: ".L1::no_allocate.L2::256B", near: ".L1::evict_first", many: ".L1::evict_last" };

export class GlobalMemory {
  constructor(private readonly c: MemCtx) {}

  /** `[addr]` of element `index` (in units of `size` bytes) of binding `buf`. */
  private addr(buf: Buffer, index: Expr, size: number): string {
    const base = this.c.bases[buf.binding];
    if (index.k === "const") return index.v === 0 ? `[${base}]` : `[${base}+${index.v * size}]`;
    const i = this.c.ex(index);
    const wide = this.c.a.to("rd", `mul.wide.${index.t === "i32" ? "s32" : "u32"}`, i, String(size));
    return `[${this.c.a.to("rd", "add.s64", base, wide)}]`;
  }
  private ld(buf: Buffer): string {
    return buf.access === "r" ? `ld.global.nc${buf.reads ? READ_HINT[buf.reads] : ""}` : "ld.global";
  }

  load(buf: Buffer, view: EType, index: Expr, t: CType): string {
    const a = this.c.a;
    const addr = this.addr(buf, index, ESIZE[view]);
    const ld = this.ld(buf);
    switch (view) {
      case "f32": return a.to("f", `${ld}.f32`, addr);
      case "f16": {
        const h = a.to("h", `${ld}.b16`, addr);
        return t === "f16" ? h : a.to("f", "cvt.f32.f16", h);
      }
      case "bf16": return a.to("f", "mov.b32", a.to("r", "shl.b32", a.to("r", `${ld}.u16`, addr), "16"));
      case "i8": return a.to("r", `${ld}.s8`, addr);
      case "u8": return a.to("r", `${ld}.u8`, addr);
      case "i16": return a.to("r", `${ld}.s16`, addr);
      case "u16": return a.to("r", `${ld}.u16`, addr);
      case "i32": case "u32": return a.to("r", `${ld}.b32`, addr);
    }
  }

  /** Converts a computed value of type t to the bits a store of `view` writes (a register or immediate). */
  private storeBits(view: EType, e: Expr): string {
    const a = this.c.a;
    const t = e.t;
    switch (view) {
      case "f32": return t === "f32" ? this.c.opnd(e) : this.c.cast(this.c.ex(e), t, "f32");
      case "f16": return t === "f16" ? this.c.ex(e) : a.to("h", "cvt.rn.f16.f32", this.c.cast(this.c.ex(e), t, "f32"));
      case "bf16": return a.to("h", "cvt.rn.bf16.f32", this.c.cast(this.c.ex(e), t, "f32"));
      default: {
        const it = view === "u32" || view === "u8" || view === "u16" ? "u32" : "i32";
        if (t === "i32" || t === "u32") return this.c.opnd(e);
        return this.c.cast(this.c.ex(e), t, it);
      }
    }
  }
  store(buf: Buffer, view: EType, index: Expr, e: Expr): void {
    const bits = this.storeBits(view, e);
    const addr = this.addr(buf, index, ESIZE[view]);
    const ty = { f32: "f32", f16: "b16", bf16: "b16", i32: "b32", u32: "b32", i8: "u8", u8: "u8", i16: "u16", u16: "u16" }[view];
    this.c.a.op(`st.global.${ty} ${addr}, ${bits}`);
  }

  /** u32 word `index` op= e, atomically: a reduction (red), or atom when `dst` wants the old value. */
  atomic(buf: Buffer, op: AtomicOp, index: Expr, e: Expr, dst?: Var): void {
    const v = this.c.reg("u32", this.c.ex(e));
    const ty = op === "add" ? "u32" : "b32";
    if (dst) this.c.a.op(`atom.global.${op}.${ty} ${this.c.varReg(dst)}, ${this.addr(buf, index, 4)}, ${v}`);
    else this.c.a.op(`red.global.${op}.${ty} ${this.addr(buf, index, 4)}, ${v}`);
  }

  /** cp.async of 16 bytes from u32 word `index` of `buf` to the shared address operand `saddr` ("[r+off]"). */
  cpAsync(buf: Buffer, index: Expr, saddr: string): void {
    this.c.a.op(`cp.async.cg.shared.global ${saddr}, ${this.addr(buf, index, 4)}, 16`);
  }

  /** Vector load: n consecutive elements through the widest aligned accesses, then split per element. */
  loadv(dst: Var[], buf: Buffer, view: EType, index: Expr): void {
    const a = this.c.a;
    const n = dst.length, size = ESIZE[view], bytes = n * size;
    const regs = dst.map((v) => this.c.varReg(v));
    const addr = this.addr(buf, index, size);
    const ld = this.ld(buf);
    const vec = (k: number) => (k === 1 ? "" : `.v${k}`);
    if (size === 4) {
      const ty = view === "f32" ? "f32" : "b32";
      a.op(`${ld}${vec(n)}.${ty} ${n === 1 ? regs[0] : `{${regs.join(", ")}}`}, ${addr}`);
      return;
    }
    // 8/16-bit elements: load whole words (or one halfword for 2 bytes), then extract.
    let words: string[];
    if (bytes >= 4) {
      words = Array.from({ length: bytes / 4 }, () => a.reg("r"));
      a.op(`${ld}${vec(words.length)}.b32 ${words.length === 1 ? words[0] : `{${words.join(", ")}}`}, ${addr}`);
    } else if (bytes === 2) {
      words = [a.to("r", `${ld}.u16`, addr)];
    } else {
      a.op(`${ld}.${view === "i8" ? "s8" : "u8"} ${regs[0]}, ${addr}`);
      return;
    }
    for (let j = 0; j < n; j++) {
      const w = words[Math.floor((j * size) / 4)], bit = ((j * size) % 4) * 8;
      const r = regs[j];
      switch (view) {
        case "f16": {
          const lo = a.reg("h"), hi = a.reg("h");
          a.op(`mov.b32 {${lo}, ${hi}}, ${w}`);
          a.op(`cvt.f32.f16 ${r}, ${bit ? hi : lo}`);
          break;
        }
        case "bf16":
          if (bit) a.op(`and.b32 ${r}, ${w}, -65536`);
          else a.op(`shl.b32 ${r}, ${w}, 16`);
          break;
        case "u16": case "u8": a.op(`bfe.u32 ${r}, ${w}, ${bit}, ${size * 8}`); break;
        case "i16": case "i8": a.op(`bfe.s32 ${r}, ${w}, ${bit}, ${size * 8}`); break;
        default: throw new KernelError(`${this.c.k.name}: vector of ${view}`);
      }
    }
  }

  storev(buf: Buffer, view: EType, index: Expr, es: Expr[]): void {
    const a = this.c.a;
    const n = es.length, size = ESIZE[view], bytes = n * size;
    const vec = (k: number) => (k === 1 ? "" : `.v${k}`);
    if (size === 4) {
      const vals = es.map((e) => this.c.reg(view === "f32" ? "f32" : "u32", this.storeBits(view, e)));
      const addr = this.addr(buf, index, size);
      const ty = view === "f32" ? "f32" : "b32";
      a.op(`st.global${vec(n)}.${ty} ${addr}, ${n === 1 ? vals[0] : `{${vals.join(", ")}}`}`);
      return;
    }
    if (n === 1) return this.store(buf, view, index, es[0]);
    let words: string[];
    if (size === 2) {
      const halves = es.map((e) => {
        const b = this.storeBits(view, e);
        if (view === "f16" || view === "bf16") return b; // .b16 registers
        return a.to("h", "cvt.u16.u32", this.c.reg("u32", b));
      });
      words = [];
      for (let j = 0; j < n; j += 2) words.push(a.to("r", "mov.b32", `{${halves[j]}, ${halves[j + 1]}}`));
    } else {
      const b = es.map((e) => this.c.reg("u32", this.storeBits(view, e)));
      words = [];
      for (let j = 0; j < n; j += 4) {
        if (n - j === 2) {
          words.push(a.to("r", "prmt.b32", b[j], b[j + 1], "0x0040"));
          continue;
        }
        const lo = a.to("r", "prmt.b32", b[j], b[j + 1], "0x0040");
        const hi = a.to("r", "prmt.b32", b[j + 2], b[j + 3], "0x0040");
        words.push(a.to("r", "prmt.b32", lo, hi, "0x5410"));
      }
    }
    const addr = this.addr(buf, index, size);
    if (bytes === 2) {
      a.op(`st.global.u16 ${addr}, ${words[0]}`);
      return;
    }
    a.op(`st.global${vec(words.length)}.b32 ${addr}, ${words.length === 1 ? words[0] : `{${words.join(", ")}}`}`);
  }
}
