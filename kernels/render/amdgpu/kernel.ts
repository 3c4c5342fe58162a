// Lowers one Kernel (kernels/ir.ts) to LLVM IR text for the amdgcn-amd-amdhsa triple: one amdgpu_kernel
// function that comgr compiles to a code object (compile.ts). No ROCm device library is linked: the math
// library is kernels/decomp/math.ts over LlMath, everything else is plain instructions and llvm.amdgcn.*
// intrinsics. The operators and casts are arith.ts's; this file lowers the rest (builtins, memory, waves, control).
//
// Arguments as on the other targets: one `ptr addrspace(1)` per binding (its address with the binding's byte
// offset applied), plus, when the kernel has checks, one more pointing at a host-visible u32 word that a
// failing check stores its code to (volatile, then a system-scope fence) before `llvm.trap` (s_trap 2).
//
// Variables are stack slots in the entry block (mem2reg at -O3 makes them registers, so no phi is written
// here); expressions are memoized within one statement. Semantics kept from the IR (as the PTX renderer
// keeps them): f32 add/sub/mul never contract (no fast-math flags), div is correctly rounded, f32 denormals
// are IEEE; min/max propagate NaN; integer x/0 = x%0 = 0 and i32 div/mod on magnitudes (decomp intDivMod);
// shifts take the amount mod 32; float->int casts truncate and saturate with NaN -> 0 (fptosi.sat); a
// float cast to bool is x != 0 with NaN true.
//
// Subgroups are waves of the target's size (64 on gfx90a/gfx942, 32 on gfx1100), formed from the linear
// invocation index as the hardware forms them. Reductions and shuffles go through ds_bpermute (every lane
// reads any lane of its wave); a reduction over a full wave is a butterfly (each lane computes the same
// commutative tree, so all lanes agree bit for bit), over the last partial wave a fold into lane 0 and a
// broadcast. A shuffle from a lane outside the wave or past the workgroup's end returns the caller's value.
import type { Buffer, Builtin, CType, EType, Expr, Kernel, Shared, Stmt, Var } from "../../ir.ts";
import { ESIZE, KernelError } from "../../ir.ts";
import { decompose } from "../../decomp/mod.ts";
import { forEachExpr, hasChecks, invariant } from "../ptx/analysis.ts";
import { f16c, f32c, linkModules, Ll, type LlParts, LT } from "./ll.ts";

export type { LlParts };
import { LlMath } from "./math.ts";
import { type ArithHost, binary, cast, isFloat, unary } from "./arith.ts";

export interface AmdgpuOptions {
  /** Lanes per wave: 64 (gfx90a, gfx942) or 32 (gfx1100). */
  wave: 32 | 64;
  /** Comment header lines (e.g. where the kernel came from). */
  comment?: string;
}

export interface AmdgpuModule {
  readonly kernel: Kernel;
  /** LLVM IR text (amdgcn-amd-amdhsa). */
  readonly ll: string;
  /** The kernel function's name; the code object's descriptor symbol is `${entry}.kd`. */
  readonly entry: string;
  readonly wave: 32 | 64;
  /** Kernel arguments: the bindings, plus one when faultParam. */
  readonly params: number;
  readonly faultParam: boolean;
  /** The module's pieces, for linking several kernels into one module (linkModules). */
  readonly parts: LlParts;
  /** LDS bytes the kernel's shared arrays take. */
  readonly sharedBytes: number;
}

const SHARED_SIZE: Record<CType, number> = { f32: 4, f16: 2, i32: 4, u32: 4, bool: 1 };
const G = "ptr addrspace(1)";

/** An LLVM-safe function name derived from the kernel's name. */
export function entryName(name: string): string {
  const s = name.replace(/[^A-Za-z0-9_]/g, "_");
  return /^[A-Za-z_]/.test(s) ? s : `k_${s}`;
}

type ForStmt = Extract<Stmt, { k: "for" }>;

class Lowering implements ArithHost {
  readonly ll = new Ll();
  readonly m = new LlMath(this.ll);
  private readonly vars = new Map<string, { slot: string; t: CType }>();
  private memo = new Map<Expr, string>();
  private readonly builtins = new Map<Builtin, string>();
  private readonly smem = new Map<Shared, number>();
  readonly total: number;
  readonly sharedBytes: number;
  private lin = "";

  constructor(readonly k: Kernel, readonly wave: 32 | 64) {
    this.total = k.workgroup[0] * k.workgroup[1] * k.workgroup[2];
    let off = 0;
    for (const s of k.shared) {
      if (!Number.isInteger(s.count) || s.count < 1) throw new KernelError(`${k.name}: shared ${s.name} has ${s.count} elements`);
      this.smem.set(s, off);
      off += Math.ceil((s.count * SHARED_SIZE[s.t]) / 16) * 16;
    }
    this.sharedBytes = off;
  }

  // ---- prologue: the builtins the body reads, computed once in the entry block --------------------------

  prologue(): void {
    const used = new Set<Builtin>();
    forEachExpr(this.k.body, (e) => {
      if (e.k === "builtin") used.add(e.b);
    });
    for (const b of used) this.special(b);
  }
  private special(b: Builtin): string {
    const got = this.builtins.get(b);
    if (got) return got;
    const ll = this.ll;
    const [kind, dim] = b.split(".");
    const d = "xyz".indexOf(dim);
    let r: string;
    if (kind === "lid") {
      r = this.k.workgroup[d] === 1 ? "0" : ll.call("i32", `llvm.amdgcn.workitem.id.${dim}`, []);
    } else if (kind === "wgid") {
      r = this.k.grid[d] === 1 ? "0" : ll.call("i32", `llvm.amdgcn.workgroup.id.${dim}`, []);
    } else if (kind === "nwg") r = String(this.k.grid[d]); // kernels are shape-specialized: the grid is known
    else if (kind === "gid") {
      const wg = this.k.workgroup[d];
      r = ll.v(`add i32 ${ll.v(`mul i32 ${this.special(`wgid.${dim}` as Builtin)}, ${wg}`)}, ${this.special(`lid.${dim}` as Builtin)}`);
    } else if (b === "lane") r = ll.v(`and i32 ${this.linear()}, ${this.wave - 1}`);
    else if (b === "sgsize") r = String(this.wave);
    else r = ll.v(`lshr i32 ${this.linear()}, ${Math.log2(this.wave)}`); // sgid
    this.builtins.set(b, r);
    return r;
  }
  /** The linear invocation index in the workgroup (waves are consecutive runs of it). */
  private linear(): string {
    if (this.lin) return this.lin;
    const [wx, wy] = this.k.workgroup;
    const ll = this.ll;
    let lin = this.special("lid.x");
    if (this.k.workgroup[1] > 1 || this.k.workgroup[2] > 1) {
      const yz = ll.v(`add i32 ${ll.v(`mul i32 ${this.special("lid.z")}, ${wy}`)}, ${this.special("lid.y")}`);
      lin = ll.v(`add i32 ${ll.v(`mul i32 ${yz}, ${wx}`)}, ${lin}`);
    }
    return (this.lin = lin);
  }

  // ---- variables ---------------------------------------------------------------------------------------

  private slot(v: Var): string {
    const got = this.vars.get(v.name);
    if (got) {
      if (got.t !== v.t) throw new KernelError(`${this.k.name}: variable ${v.name} used as ${got.t} and ${v.t}`);
      return got.slot;
    }
    const slot = this.ll.alloca(LT[v.t]);
    this.vars.set(v.name, { slot, t: v.t });
    return slot;
  }
  private assign(v: Var, value: string): void {
    this.ll.op(`store ${LT[v.t]} ${value}, ptr addrspace(5) ${this.slot(v)}`);
  }

  // ---- expressions -------------------------------------------------------------------------------------

  ex(e: Expr): string {
    const got = this.memo.get(e);
    if (got !== undefined) return got;
    const r = this.ex1(e);
    this.memo.set(e, r);
    return r;
  }

  private ex1(e: Expr): string {
    const ll = this.ll;
    switch (e.k) {
      case "const":
        switch (e.t) {
          case "f32": return f32c(e.v);
          case "f16": return f16c(e.v);
          case "bool": return e.v ? "true" : "false";
          default: return String(e.v | 0);
        }
      case "var": return ll.v(`load ${LT[e.t]}, ptr addrspace(5) ${this.slot(e.v)}`);
      case "builtin": {
        const r = this.builtins.get(e.b);
        if (r === undefined) throw new KernelError(`${this.k.name}: builtin ${e.b} missed by the prologue`);
        return r;
      }
      case "un": return unary(this, e.op, e.t, e.a);
      case "bin": return binary(this, e.op, e.t, e.a, e.b);
      case "fma": {
        const t = LT[e.t];
        return ll.call(t, `llvm.fma.${e.t}`, [[t, this.ex(e.a)], [t, this.ex(e.b)], [t, this.ex(e.c)]]);
      }
      case "select": return ll.v(`select i1 ${this.ex(e.c)}, ${LT[e.t]} ${this.ex(e.a)}, ${LT[e.t]} ${this.ex(e.b)}`);
      case "cast": return cast(this.ll, this.ex(e.a), e.a.t, e.t);
      case "bitcast": {
        const x = this.ex(e.a);
        if (LT[e.a.t] === LT[e.t]) return x; // i32 <-> u32
        return ll.v(`bitcast ${LT[e.a.t]} ${x} to ${LT[e.t]}`);
      }
      case "load": return this.load(e.buf, e.view, e.index, e.t);
      case "sload": {
        const p = this.sharedPtr(e.mem, e.index);
        if (e.mem.t === "bool") return ll.v(`icmp ne i8 ${ll.v(`load i8, ptr addrspace(3) ${p}, align 1`)}, 0`);
        return ll.v(`load ${LT[e.mem.t]}, ptr addrspace(3) ${p}, align ${SHARED_SIZE[e.mem.t]}`);
      }
      case "subgroup": return this.subgroup(e.op, e.t, this.ex(e.a));
      case "shuffle": return this.shuffle(e.mode, e.t, this.ex(e.a), e.lane);
      case "pack2": throw new KernelError(`${this.k.name}: pack2 is an MMA / cooperative-matrix operand; the amdgpu targets have neither`);
    }
  }

  // ---- global memory -----------------------------------------------------------------------------------

  /** Pointer to element `index` (in units of `size` bytes) of binding `buf`. */
  private ptr(buf: Buffer, index: Expr, size: number): string {
    const ll = this.ll;
    const base = `%b${buf.binding}`;
    if (index.k === "const" && index.v === 0) return base;
    const i = index.k === "const" ? String(index.t === "i32" ? index.v | 0 : index.v >>> 0) : ll.v(`${index.t === "i32" ? "sext" : "zext"} i32 ${this.ex(index)} to i64`);
    return ll.v(`getelementptr inbounds i8, ${G} ${base}, i64 ${index.k === "const" ? Number(i) * size : ll.v(`mul i64 ${i}, ${size}`)}`);
  }
  /** A stored element's bits (loaded as `raw`) converted to the compute type t. */
  private fromStored(view: EType, raw: string, t: CType): string {
    const ll = this.ll;
    switch (view) {
      case "f32": return raw;
      case "f16": return t === "f16" ? raw : ll.v(`fpext half ${raw} to float`);
      case "bf16": return ll.v(`bitcast i32 ${ll.v(`shl i32 ${ll.v(`zext i16 ${raw} to i32`)}, 16`)} to float`);
      case "i8": return ll.v(`sext i8 ${raw} to i32`);
      case "u8": return ll.v(`zext i8 ${raw} to i32`);
      case "i16": return ll.v(`sext i16 ${raw} to i32`);
      case "u16": return ll.v(`zext i16 ${raw} to i32`);
      case "i32": case "u32": return raw;
    }
  }
  private storedType(view: EType): string {
    return { f32: "float", f16: "half", bf16: "i16", i32: "i32", u32: "i32", i8: "i8", u8: "i8", i16: "i16", u16: "i16" }[view];
  }
  private load(buf: Buffer, view: EType, index: Expr, t: CType): string {
    const st = this.storedType(view);
    const raw = this.ll.v(`load ${st}, ${G} ${this.ptr(buf, index, ESIZE[view])}, align ${ESIZE[view]}`);
    return this.fromStored(view, raw, t);
  }
  /** The bits a store of `view` writes for a computed value e. */
  private storeBits(view: EType, e: Expr): string {
    const ll = this.ll;
    const t = e.t;
    const x = this.ex(e);
    switch (view) {
      case "f32": return cast(this.ll, x, t, "f32");
      case "f16": return t === "f16" ? x : ll.v(`fptrunc float ${cast(this.ll, x, t, "f32")} to half`);
      case "bf16": return this.bf16(cast(this.ll, x, t, "f32"));
      default: {
        const w = isFloat(t) || t === "bool" ? cast(this.ll, x, t, view === "u32" || view === "u8" || view === "u16" ? "u32" : "i32") : x;
        const st = this.storedType(view);
        return st === "i32" ? w : ll.v(`trunc i32 ${w} to ${st}`);
      }
    }
  }
  /** f32 -> bf16 bits, round to nearest even; a NaN stays a (quiet) NaN. */
  private bf16(x: string): string {
    const ll = this.ll;
    const b = ll.v(`bitcast float ${x} to i32`);
    const lsb = ll.v(`and i32 ${ll.v(`lshr i32 ${b}, 16`)}, 1`);
    const r = ll.v(`lshr i32 ${ll.v(`add i32 ${ll.v(`add i32 ${b}, 32767`)}, ${lsb}`)}, 16`);
    const nan = ll.v(`fcmp uno float ${x}, 0.0`);
    const q = ll.v(`or i32 ${ll.v(`lshr i32 ${b}, 16`)}, 64`);
    return ll.v(`trunc i32 ${ll.v(`select i1 ${nan}, i32 ${q}, i32 ${r}`)} to i16`);
  }
  private store(buf: Buffer, view: EType, index: Expr, e: Expr): void {
    const bits = this.storeBits(view, e);
    this.ll.op(`store ${this.storedType(view)} ${bits}, ${G} ${this.ptr(buf, index, ESIZE[view])}, align ${ESIZE[view]}`);
  }
  private loadv(dst: Var[], buf: Buffer, view: EType, index: Expr): void {
    const ll = this.ll;
    const n = dst.length, size = ESIZE[view], st = this.storedType(view);
    const vt = `<${n} x ${st}>`;
    const vec = ll.v(`load ${vt}, ${G} ${this.ptr(buf, index, size)}, align ${n * size}`);
    dst.forEach((v, j) => this.assign(v, this.fromStored(view, ll.v(`extractelement ${vt} ${vec}, i32 ${j}`), v.t)));
  }
  private storev(buf: Buffer, view: EType, index: Expr, es: Expr[]): void {
    const ll = this.ll;
    const n = es.length, size = ESIZE[view], st = this.storedType(view);
    const vt = `<${n} x ${st}>`;
    const bits = es.map((e) => this.storeBits(view, e));
    let vec = "undef";
    bits.forEach((b, j) => (vec = ll.v(`insertelement ${vt} ${vec}, ${st} ${b}, i32 ${j}`)));
    ll.op(`store ${vt} ${vec}, ${G} ${this.ptr(buf, index, size)}, align ${n * size}`);
  }

  // ---- shared memory (LDS) -----------------------------------------------------------------------------

  private sharedPtr(mem: Shared, index: Expr): string {
    const off = this.smem.get(mem);
    if (off === undefined) throw new KernelError(`${this.k.name}: shared ${mem.name} is not declared`);
    const size = SHARED_SIZE[mem.t];
    const ll = this.ll;
    const byte = index.k === "const" ? String(off + index.v * size) : ll.v(`add i32 ${ll.v(`mul i32 ${this.ex(index)}, ${size}`)}, ${off}`);
    return ll.v(`getelementptr inbounds i8, ptr addrspace(3) @smem.${entryName(this.k.name)}, i32 ${byte}`);
  }
  private sstore(mem: Shared, index: Expr, e: Expr): void {
    const p = this.sharedPtr(mem, index);
    const x = this.ex(e);
    if (mem.t === "bool") this.ll.op(`store i8 ${this.ll.v(`zext i1 ${x} to i8`)}, ptr addrspace(3) ${p}, align 1`);
    else this.ll.op(`store ${LT[mem.t]} ${x}, ptr addrspace(3) ${p}, align ${SHARED_SIZE[mem.t]}`);
  }

  // ---- subgroups (waves) -------------------------------------------------------------------------------

  /** A value of type t as the i32 ds_bpermute moves, and back. */
  private to32(x: string, t: CType): string {
    if (t === "f32") return this.ll.v(`bitcast float ${x} to i32`);
    if (t === "f16") return this.ll.v(`zext i16 ${this.ll.v(`bitcast half ${x} to i16`)} to i32`);
    if (t === "bool") return this.ll.v(`zext i1 ${x} to i32`);
    return x;
  }
  private from32(x: string, t: CType): string {
    if (t === "f32") return this.ll.v(`bitcast i32 ${x} to float`);
    if (t === "f16") return this.ll.v(`bitcast i16 ${this.ll.v(`trunc i32 ${x} to i16`)} to half`);
    if (t === "bool") return this.ll.v(`icmp ne i32 ${x}, 0`);
    return x;
  }
  /** The value x of lane `src` (an i32 lane number below the wave size) of this wave. */
  private permute(x: string, t: CType, src: string): string {
    const ll = this.ll;
    const addr = ll.v(`shl i32 ${src}, 2`);
    return this.from32(ll.call("i32", "llvm.amdgcn.ds.bpermute", [["i32", addr], ["i32", this.to32(x, t)]], "#1"), t);
  }
  private combine(op: string, t: CType, x: string, y: string): string {
    const ll = this.ll;
    if (isFloat(t)) return op === "add" ? ll.v(`fadd ${LT[t]} ${x}, ${y}`) : this.m.nanMinMax(op as "max", LT[t], x, y);
    if (op === "add") return ll.v(`add i32 ${x}, ${y}`);
    return ll.call("i32", `llvm.${t === "i32" ? "s" : "u"}${op}.i32`, [["i32", x], ["i32", y]]);
  }
  /** Lanes of this invocation's wave that exist: W for full waves, fewer in the last partial one. */
  private waveLanes(): string {
    if (this.total % this.wave === 0) return String(this.wave);
    const ll = this.ll;
    const base = ll.v(`and i32 ${this.linear()}, ${-this.wave}`);
    return ll.call("i32", "llvm.umin.i32", [["i32", ll.v(`sub i32 ${this.total}, ${base}`)], ["i32", String(this.wave)]]);
  }
  private laneId(): string {
    return this.ll.v(`and i32 ${this.linear()}, ${this.wave - 1}`);
  }
  private subgroup(op: string, t: CType, x: string): string {
    const ll = this.ll;
    if (t === "bool") throw new KernelError(`${this.k.name}: subgroup ${op} of bool (decomp/mod.ts rewrites it to u32)`);
    const lane = this.laneId();
    let acc = x;
    if (this.total % this.wave === 0) {
      for (let k = this.wave / 2; k >= 1; k /= 2) acc = this.combine(op, t, acc, this.permute(acc, t, ll.v(`xor i32 ${lane}, ${k}`)));
      return acc;
    }
    const n = this.waveLanes();
    for (let k = this.wave / 2; k >= 1; k /= 2) {
      const src = ll.v(`add i32 ${lane}, ${k}`);
      const other = this.permute(acc, t, ll.v(`and i32 ${src}, ${this.wave - 1}`));
      const ok = ll.v(`icmp ult i32 ${src}, ${n}`);
      acc = ll.v(`select i1 ${ok}, ${LT[t]} ${this.combine(op, t, acc, other)}, ${LT[t]} ${acc}`);
    }
    return this.permute(acc, t, "0");
  }
  private shuffle(mode: string, t: CType, x: string, laneE: Expr): string {
    const ll = this.ll;
    if (laneE.k === "const" && (laneE.v >>> 0) >= this.wave) return x;
    const l = this.ex(laneE);
    const lane = this.laneId();
    const src = mode === "idx" ? l : ll.v(`${mode === "xor" ? "xor" : "add"} i32 ${lane}, ${l}`);
    const got = this.permute(x, t, ll.v(`and i32 ${src}, ${this.wave - 1}`));
    const ok = ll.v(`icmp ult i32 ${src}, ${this.waveLanes()}`);
    return ll.v(`select i1 ${ok}, ${LT[t]} ${got}, ${LT[t]} ${x}`);
  }

  // ---- statements --------------------------------------------------------------------------------------

  block(body: Stmt[]): void {
    for (const s of body) this.stmt(s);
  }
  private fresh(): void {
    this.memo = new Map();
  }
  /** Ends the current block with `term` and opens `next` (a block without predecessors is legal). */
  private endBlock(term: string, next: string): void {
    this.ll.op(term);
    this.ll.place(next);
  }

  stmt(s: Stmt): void {
    const ll = this.ll;
    this.fresh();
    switch (s.k) {
      case "let": case "assign": {
        if (s.e.t !== s.v.t) throw new KernelError(`${this.k.name}: ${s.k} of ${s.v.t} ${s.v.name} from ${s.e.t}`);
        this.assign(s.v, this.ex(s.e));
        return;
      }
      case "store": return this.store(s.buf, s.view, s.index, s.e);
      case "loadv": return this.loadv(s.dst, s.buf, s.view, s.index);
      case "storev": return this.storev(s.buf, s.view, s.index, s.es);
      case "sstore": return this.sstore(s.mem, s.index, s.e);
      // Word-granular read-modify-write (decomp's narrow stores use and/or on u32 words): device scope, relaxed,
      // like PTX's red.global.
      case "atomic": {
        const rmw = `atomicrmw ${s.op} ${G} ${this.ptr(s.buf, s.index, 4)}, i32 ${this.ex(s.e)} syncscope("agent") monotonic, align 4`;
        if (s.dst) this.assign(s.dst, ll.v(rmw));
        else ll.op(rmw);
        return;
      }
      case "barrier": { // a device barrier's fences reach the agent (every workgroup of the dispatch)
        const scope = s.device ? "agent" : "workgroup";
        ll.op(`fence syncscope("${scope}") release`);
        ll.call("void", "llvm.amdgcn.s.barrier", [], "#2");
        ll.op(`fence syncscope("${scope}") acquire`);
        return;
      }
      case "return": return this.endBlock("ret void", ll.label("dead"));
      case "check": {
        const ok = ll.label("ok"), fail = ll.label("fault");
        this.endBlock(`br i1 ${this.ex(s.c)}, label %${ok}, label %${fail}`, fail);
        // The code where the host reads it after the queue error (host-visible memory), then the trap.
        ll.op(`store volatile i32 ${s.code}, ${G} %fault, align 4`);
        ll.op("fence release");
        ll.call("void", "llvm.trap", [], "#3");
        this.endBlock("unreachable", ok);
        return;
      }
      case "if": {
        const then = ll.label("then"), els = ll.label("else"), end = ll.label("endif");
        this.endBlock(`br i1 ${this.ex(s.c)}, label %${then}, label %${s.else.length ? els : end}`, then);
        this.block(s.then);
        if (s.else.length) {
          this.endBlock(`br label %${end}`, els);
          this.block(s.else);
        }
        this.endBlock(`br label %${end}`, end);
        return;
      }
      case "for": return this.loop(s);
      case "mma": throw new KernelError(`${this.k.name}: mma needs the mma capability, which the amdgpu targets lack`);
    }
  }

  private loop(s: ForStmt): void {
    const ll = this.ll;
    const t = s.v.t;
    if (t !== "i32" && t !== "u32") throw new KernelError(`${this.k.name}: loop variable ${s.v.name} is ${t}`);
    const lt = t === "i32" ? "slt" : "ult";
    this.assign(s.v, this.ex(s.start));
    const hoist = invariant(s.end, s.body);
    this.fresh();
    const endOnce = hoist ? this.ex(s.end) : "";
    const head = ll.label("for"), body = ll.label("body"), done = ll.label("done");
    this.endBlock(`br label %${head}`, head);
    this.fresh();
    const v = ll.v(`load i32, ptr addrspace(5) ${this.slot(s.v)}`);
    const bound = hoist ? endOnce : this.ex(s.end);
    this.endBlock(`br i1 ${ll.v(`icmp ${lt} i32 ${v}, ${bound}`)}, label %${body}, label %${done}`, body);
    this.block(s.body);
    this.fresh();
    const cur = ll.v(`load i32, ptr addrspace(5) ${this.slot(s.v)}`);
    this.assign(s.v, ll.v(`add i32 ${cur}, ${s.step}`));
    const u = Math.max(1, Math.floor(s.unroll));
    const md = u > 1 ? `, !llvm.loop ${this.loopMeta(u)}` : "";
    this.endBlock(`br label %${head}${md}`, done);
  }
  private loopMeta(u: number): string {
    const count = this.ll.node(`!{!"llvm.loop.unroll.count", i32 ${u}}`);
    const id = `!${this.ll.meta.length}`;
    this.ll.node(`distinct !{${id}, ${count}}`);
    return id;
  }
}

/** Renders `k` as LLVM IR for an AMDGPU of wave size `opts.wave`. Throws KernelError for what it cannot express. */
export function renderAmdgpu(k: Kernel, opts: AmdgpuOptions): AmdgpuModule {
  const wave = opts.wave;
  const total = k.workgroup[0] * k.workgroup[1] * k.workgroup[2];
  if (total > 1024) throw new KernelError(`${k.name}: workgroup of ${total} invocations (AMDGPU allows 1024)`);
  if (k.uses.mma) throw new KernelError(`${k.name}: mma kernels need the mma capability, which the amdgpu targets lack`);
  if (k.uses.staging) throw new KernelError(`${k.name}: cp.async/ldmatrix staging is PTX-only (caps.staging), which the amdgpu targets lack`);
  if (k.uses.coop) throw new KernelError(`${k.name}: cooperative matrices (caps.coop) are not rendered for amdgpu`);
  const entry = entryName(k.name);
  const dk = decompose(k, { intDivMod: true, dot4: true });
  const L = new Lowering(dk, wave);
  L.prologue();
  L.block(dk.body);
  L.ll.op("ret void");

  const faultParam = hasChecks(k);
  const nparams = k.buffers.length + (faultParam ? 1 : 0);
  k.buffers.forEach((b, i) => {
    if (b.binding !== i) throw new KernelError(`${k.name}: buffer ${b.name} has binding ${b.binding}, expected ${i}`);
  });
  const params = k.buffers.map((b) => `${G} ${b.access === "r" ? "readonly " : ""}align ${ESIZE[b.elem]} %b${b.binding}`);
  if (faultParam) params.push(`${G} align 4 %fault`);
  const head: string[] = [];
  head.push(`; poot LLVM IR (amdgcn-amd-amdhsa, wave${wave}) for kernel ${k.name}${opts.comment ? `: ${opts.comment}` : ""}`);
  for (const b of k.buffers) head.push(`; arg ${b.binding}: ${b.name} (${b.elem}, ${b.access})`);
  if (faultParam) head.push(`; arg ${k.buffers.length}: fault word (u32, host-visible)`);
  const globals = L.sharedBytes > 0 ? [`@smem.${entry} = internal addrspace(3) global [${L.sharedBytes} x i8] undef, align 16`] : [];
  const wg = L.ll.node(`!{i32 ${k.workgroup[0]}, i32 ${k.workgroup[1]}, i32 ${k.workgroup[2]}}`);
  // Function attributes inline (no attribute group), so several kernels can share one module (linkModules).
  const attrs = `nounwind "amdgpu-flat-work-group-size"="${total},${total}" "uniform-work-group-size"="true" ` +
    `"denormal-fp-math-f32"="ieee,ieee" "denormal-fp-math"="ieee,ieee" "amdgpu-implicitarg-num-bytes"="0"`;
  const fn = [`define amdgpu_kernel void @${entry}(${params.join(", ")}) ${attrs} !reqd_work_group_size ${wg} {`,
    "entry:", ...L.ll.allocas, ...L.ll.lines, "}"];
  const parts: LlParts = { head, globals, fn, decls: [...L.ll.decls.values()], meta: L.ll.meta };
  return { kernel: k, ll: linkModules([parts]), parts, entry, wave, params: nparams, faultParam, sharedBytes: L.sharedBytes };
}

