// Lowers one Kernel (kernels/ir.ts) to a PTX module with a single .entry.
//
// Shape of the output: one `.param .u64` per binding (the device passes each binding's address with its byte
// offset applied) plus, when the kernel has checks, one more pointing at a host-mapped u32 word that a failing
// check writes its code to before `trap`. Every expression value gets a fresh virtual register; a `let`
// variable is one register assigned in place. Structured control flow becomes labels and predicated branches.
//
// Semantics kept from the IR (and matched with the JS renderer where the IR leaves room): f32 add/sub/mul/
// fma/div/sqrt/recip are IEEE round-to-nearest (`.rn`, so ptxas never contracts into fma); min/max propagate
// NaN like Math.max; integer x/0 and x%0 give 0; shift amounts are taken mod 32; float->int casts truncate
// and saturate with NaN -> 0; casting to bool is `x != 0` with NaN -> true; a shuffle from a lane outside the
// subgroup (or past the workgroup's end) returns the caller's own value.
//
// Subgroups are warps (32 lanes, formed from the linear invocation index). Subgroup ops must be reached by
// every existing lane of a warp (warp-uniform control flow, as in CUDA); when the workgroup size is not a
// multiple of 32 the last warp is partial and its member mask is computed in the prologue. The subgroup ops
// themselves are warp.ts; global loads and stores memory.ts; operators and casts arith.ts; the math routines math.ts.
import type { Builtin, CType, Expr, Kernel, Shared, Stmt, Var } from "../../ir.ts";
import { KernelError } from "../../ir.ts";
import { f32ToF16 } from "../../../graph/half.ts";
import { forEachExpr, hasChecks, invariant } from "./analysis.ts";
import { GlobalMemory } from "./memory.ts";
import { Asm, b32imm, f32imm, MOV, RC } from "./asm.ts";
import { Warps } from "./warp.ts";
import { PtxMath } from "./math.ts";
import { Arith } from "./arith.ts";
import { decompose } from "../../decomp/mod.ts";

export interface PtxOptions {
  /** SM architecture number: 80 (default), 86, 89, 90 ... */
  sm?: number;
  /** PTX ISA version; default "8.0" (CUDA 12.0+ drivers JIT it; ptxas of CUDA 12/13 accepts it). */
  version?: string;
  /** Comment header lines (e.g. where the kernel came from). */
  comment?: string;
  /**
   * Programmatic dependent launch (sm_90+): the kernel starts with `griddepcontrol.wait` (nothing before it
   * touches global memory, so the previous kernel's results are complete and visible) and then lets the next
   * kernel launch (`griddepcontrol.launch_dependents`), whose blocks get resident while this one runs.
   * "exit": the wait only (the next kernel may launch as this one's blocks exit). Only for launches with the
   * programmatic-stream-serialization attribute; harmless on plain launches. Kernels with staging statements
   * (caps.staging) are rendered without it whatever this says (PtxModule.pdl false: a plain launch).
   */
  pdl?: boolean | "exit";
}

export interface PtxModule {
  readonly kernel: Kernel;
  readonly ptx: string;
  /** The .entry symbol (cuModuleGetFunction). */
  readonly entry: string;
  /** Number of .param entries: the bindings, plus one when faultParam. */
  readonly params: number;
  /** The last param is a u64 address of a u32 word a failing check stores its code to before trapping. */
  readonly faultParam: boolean;
  /** Rendered for programmatic dependent launch (PtxOptions.pdl). */
  readonly pdl: boolean;
  /** Bytes of dynamic shared memory the launch must pass (0 when the arrays fit the 48 KiB static limit). */
  readonly dynamicShared: number;
  /** Total shared memory the kernel uses, static or dynamic. */
  readonly sharedBytes: number;
}

const STATIC_SHARED_LIMIT = 48 * 1024;

const SHARED_SIZE: Record<CType, number> = { f32: 4, f16: 2, i32: 4, u32: 4, bool: 1 };

/** A PTX-safe entry name derived from the kernel's name. */
export function entryName(name: string): string {
  const s = name.replace(/[^A-Za-z0-9_]/g, "_");
  return /^[A-Za-z_]/.test(s) ? s : `k_${s}`;
}

type ForStmt = Extract<Stmt, { k: "for" }>;

class Lowering {
  readonly a = new Asm();
  readonly m: PtxMath;
  private readonly mem = new GlobalMemory(this);
  private readonly warps = new Warps(this);
  private readonly ar = new Arith(this);
  private readonly vars = new Map<string, { reg: string; t: CType }>();
  private memo = new Map<Expr, string>();
  readonly bases: string[] = [];
  private readonly builtins = new Map<Builtin, string>();
  private readonly smem = new Map<Shared, number>(); // byte offset of each array in the shared block
  private smemBase = "";
  private fault = "";
  readonly total: number;
  readonly sharedBytes: number;

  constructor(readonly k: Kernel, readonly sm = 80) {
    this.m = new PtxMath(this.a);
    this.total = k.workgroup[0] * k.workgroup[1] * k.workgroup[2];
    let off = 0;
    for (const s of k.shared) {
      if (!Number.isInteger(s.count) || s.count < 1) throw new KernelError(`${k.name}: shared ${s.name} has ${s.count} elements`);
      if (k.uses.wgmma) off = Math.ceil(off / 1024) * 1024; // wgmma operands: swizzled from 1024-byte boundaries
      this.smem.set(s, off);
      off += Math.ceil((s.count * SHARED_SIZE[s.t]) / 16) * 16;
    }
    this.sharedBytes = off;
  }

  // ---- prologue --------------------------------------------------------------------------------------

  prologue(entry: string): void {
    const a = this.a;
    this.k.buffers.forEach((b, i) => {
      if (b.binding !== i) throw new KernelError(`${this.k.name}: buffer ${b.name} has binding ${b.binding}, expected ${i}`);
      const p = a.to("rd", "ld.param.u64", `[${entry}_param_${i}]`);
      this.bases.push(a.to("rd", "cvta.to.global.u64", p));
    });
    if (hasChecks(this.k)) {
      this.fault = a.to("rd", "cvta.to.global.u64", a.to("rd", "ld.param.u64", `[${entry}_param_${this.k.buffers.length}]`));
    }
    if (this.sharedBytes > 0) this.smemBase = a.to("r", "mov.u32", "smem");
    const used = new Set<Builtin>();
    let subgroups = false;
    forEachExpr(this.k.body, (e) => {
      if (e.k === "builtin") used.add(e.b);
      if (e.k === "subgroup" || e.k === "shuffle") subgroups = true;
    });
    const [wx, wy] = this.k.workgroup;
    const special = (b: Builtin): string => {
      const got = this.builtins.get(b);
      if (got) return got;
      const [kind, dim] = b.split(".");
      const sreg = { lid: "%tid", wgid: "%ctaid", nwg: "%nctaid" }[kind as "lid"];
      let r: string;
      if (sreg) r = a.to("r", "mov.u32", `${sreg}.${dim}`);
      else if (kind === "gid") {
        const wg = this.k.workgroup["xyz".indexOf(dim)];
        const cta = special(`wgid.${dim}` as Builtin);
        r = wg === 1 ? cta : a.to("r", "mad.lo.u32", cta, String(wg), special(`lid.${dim}` as Builtin));
      } else if (b === "lane") r = a.to("r", "mov.u32", "%laneid");
      else if (b === "sgsize") r = a.to("r", "mov.u32", "32");
      else r = a.to("r", "shr.u32", linear(), "5"); // sgid
      this.builtins.set(b, r);
      return r;
    };
    let lin = "";
    const linear = (): string => {
      if (lin) return lin;
      lin = special("lid.x");
      if (this.k.workgroup[1] > 1 || this.k.workgroup[2] > 1) {
        const yz = a.to("r", "mad.lo.u32", special("lid.z"), String(wy), special("lid.y"));
        lin = a.to("r", "mad.lo.u32", yz, String(wx), lin);
      }
      return lin;
    };
    for (const b of used) special(b);
    if (subgroups && this.total % 32 !== 0) {
      // Lanes of the last, partial warp: n = min(32, total - warp base); mask = (1 << n) - 1 (shl by 32 is 0 in PTX).
      const base = a.to("r", "and.b32", linear(), "-32");
      const n = a.to("r", "min.u32", a.to("r", "sub.s32", String(this.total), base), "32");
      this.warps.mask = a.to("r", "add.s32", a.to("r", "shl.b32", "1", n), "-1");
      this.warps.clamp = a.to("r", "add.s32", n, "-1");
    }
  }

  // ---- variables -------------------------------------------------------------------------------------

  varReg(v: Var): string {
    const got = this.vars.get(v.name);
    if (got) {
      if (got.t !== v.t) throw new KernelError(`${this.k.name}: variable ${v.name} used as ${got.t} and ${v.t}`);
      return got.reg;
    }
    const reg = this.a.reg(RC[v.t]);
    this.vars.set(v.name, { reg, t: v.t });
    return reg;
  }
  private assign(v: Var, value: string): void {
    const r = this.varReg(v);
    if (r !== value) this.a.op(`${MOV[v.t]} ${r}, ${value}`);
  }

  // ---- expressions -----------------------------------------------------------------------------------

  /** The value of e in a register of its class (or, for ints and f32, possibly an immediate via `opnd`). */
  ex(e: Expr): string {
    const got = this.memo.get(e);
    if (got !== undefined) return got;
    const r = this.ex1(e);
    this.memo.set(e, r);
    return r;
  }
  /** An operand: immediates for f32 / integer constants (PTX accepts them as sources), else a register. */
  opnd(e: Expr): string {
    if (e.k === "const") {
      if (e.t === "f32") return f32imm(e.v);
      if (e.t === "i32") return String(e.v | 0);
      if (e.t === "u32") return String(e.v >>> 0);
    }
    return this.ex(e);
  }
  reg(t: CType, x: string): string {
    return this.a.inReg(RC[t], x);
  }

  private ex1(e: Expr): string {
    const a = this.a;
    switch (e.k) {
      case "const":
        switch (e.t) {
          case "f32": return a.to("f", "mov.f32", f32imm(e.v));
          case "f16": return a.to("h", "mov.b16", `0x${f32ToF16(e.v).toString(16).padStart(4, "0")}`);
          case "bool": return a.to("p", "mov.pred", e.v ? "1" : "0");
          default: return a.to("r", "mov.b32", b32imm(e.v));
        }
      case "var": return this.varReg(e.v);
      case "builtin": {
        const r = this.builtins.get(e.b);
        if (!r) throw new KernelError(`${this.k.name}: builtin ${e.b} missed by the prologue`);
        return r;
      }
      case "un": return this.ar.unary(e.op, e.t, e.a);
      case "bin": return this.ar.binary(e.op, e.t, e.a, e.b);
      case "fma":
        if (e.t === "f16") return a.to("h", "fma.rn.f16", this.ex(e.a), this.ex(e.b), this.ex(e.c));
        return a.to("f", "fma.rn.f32", this.ex(e.a), this.opnd(e.b), this.opnd(e.c));
      case "select": return this.ar.select(e.t, this.ex(e.c), e.a, e.b);
      case "cast": return this.cast(this.ex(e.a), e.a.t, e.t);
      case "bitcast": {
        const x = this.ex(e.a);
        if (e.a.t === e.t) return x;
        if (e.a.t === "f32" || e.t === "f32") return a.to(RC[e.t], "mov.b32", x);
        return x; // i32 <-> u32: same register
      }
      case "load": return this.mem.load(e.buf, e.view, e.index, e.t);
      case "sload": {
        const addr = this.sharedAddr(e.mem, e.index);
        switch (e.mem.t) {
          case "f32": return a.to("f", "ld.shared.f32", addr);
          case "f16": return a.to("h", "ld.shared.b16", addr);
          case "bool": return a.to("p", "setp.ne.u32", a.to("r", "ld.shared.u8", addr), "0");
          default: return a.to("r", "ld.shared.b32", addr);
        }
      }
      case "subgroup": return this.warps.reduce(e.op, e.t, this.ex(e.a));
      case "shuffle": return this.warps.shuffle(e.mode, e.t, this.ex(e.a), e.lane);
      case "pack2": // the first source lands in the upper half
        return a.to("r", `cvt.rn.${e.ab}x2.f32`, this.reg("f32", this.ex(e.b)), this.reg("f32", this.ex(e.a)));
    }
  }

  /** Numeric conversion of register x from type `from` to `to` (arith.ts). */
  cast(x: string, from: CType, to: CType): string {
    return this.ar.cast(x, from, to);
  }

  // ---- memory: global loads/stores live in memory.ts; shared memory here ---------------------------

  private sharedAddr(mem: Shared, index: Expr): string {
    const off = this.smem.get(mem);
    if (off === undefined) throw new KernelError(`${this.k.name}: shared ${mem.name} is not declared`);
    const size = SHARED_SIZE[mem.t];
    if (index.k === "const") return `[${this.smemBase}+${off + index.v * size}]`;
    const r = this.a.to("r", "mad.lo.u32", this.reg("u32", this.ex(index)), String(size), this.smemBase);
    return off ? `[${r}+${off}]` : `[${r}]`;
  }
  private sstore(mem: Shared, index: Expr, e: Expr): void {
    const addr = this.sharedAddr(mem, index);
    const x = this.ex(e);
    switch (mem.t) {
      case "f32": return this.a.op(`st.shared.f32 ${addr}, ${x}`);
      case "f16": return this.a.op(`st.shared.b16 ${addr}, ${x}`);
      case "bool": return this.a.op(`st.shared.u8 ${addr}, ${this.a.to("r", "selp.u32", "1", "0", x)}`);
      default: return this.a.op(`st.shared.b32 ${addr}, ${x}`);
    }
  }

  // ---- statements ------------------------------------------------------------------------------------

  block(body: Stmt[]): void {
    for (const s of body) this.stmt(s);
  }
  /** Expressions are memoized within one evaluation point only (vars and memory may change between them). */
  private fresh(): void {
    this.memo = new Map();
  }

  stmt(s: Stmt): void {
    const a = this.a;
    this.fresh();
    // wgmma.fence orders the threads' register accesses (the accumulators') before the wgmmas that follow; a run
    // of wgmmas with no other statement between them needs it once, before its first
    const afterWgmma = this.afterWgmma;
    this.afterWgmma = s.k === "wgmma";
    switch (s.k) {
      case "let": case "assign": {
        if (s.e.t !== s.v.t) throw new KernelError(`${this.k.name}: ${s.k} of ${s.v.t} ${s.v.name} from ${s.e.t}`);
        this.assign(s.v, this.ex(s.e));
        return;
      }
      case "store": return this.mem.store(s.buf, s.view, s.index, s.e);
      case "loadv": return this.mem.loadv(s.dst, s.buf, s.view, s.index);
      case "storev": return this.mem.storev(s.buf, s.view, s.index, s.es);
      case "atomic": return this.mem.atomic(s.buf, s.op, s.index, s.e, s.dst);
      case "sstore": return this.sstore(s.mem, s.index, s.e);
      case "barrier":
        if (!s.device) return a.op("bar.sync 0");
        // release this invocation's writes at gpu scope, meet, then acquire everyone else's
        a.op("membar.gl");
        a.op("bar.sync 0");
        return a.op("membar.gl");
      case "return": return a.op("ret");
      case "check": {
        const ok = a.label();
        a.op(`@${this.ex(s.c)} bra ${ok}`);
        // Leave the code where the host can read it after the context is lost (host-mapped memory).
        a.op(`st.volatile.global.u32 [${this.fault}], ${s.code}`);
        a.op("membar.sys");
        a.op("trap");
        a.place(ok);
        return;
      }
      case "if": {
        const els = a.label(), end = a.label();
        a.op(`@!${this.ex(s.c)} bra ${s.else.length ? els : end}`);
        this.block(s.then);
        if (s.else.length) {
          a.op(`bra.uni ${end}`);
          a.place(els);
          this.block(s.else);
        }
        a.place(end);
        return;
      }
      case "for": return this.loop(s);
      case "mma": return this.mma(s);
      case "cpasync": return this.staging("cp.async", () => this.mem.cpAsync(s.buf, s.index, this.sharedAddr(s.mem, s.sindex)));
      case "cpcommit": return this.staging("cp.async", () => a.op("cp.async.commit_group"));
      case "cpwait": return this.staging("cp.async", () => a.op(`cp.async.wait_group ${s.pending}`));
      case "ldmatrix": return this.staging("ldmatrix", () => this.ldmatrix(s));
      case "wgmma": return this.wgmma(s, afterWgmma);
      // (renderPtx refuses wgmma kernels for anything but sm_90)
      case "wgwait":
        a.op("wgmma.commit_group.sync.aligned");
        return a.op(`wgmma.wait_group.sync.aligned ${s.pending}`);
      case "asyncfence":
        return a.op("fence.proxy.async.shared::cta");
    }
  }
  private afterWgmma = false;

  /**
   * wgmma.mma_async m64nNk16 (kernels/ir_data.ts WgmmaStmt) on the accumulators' own registers. The shared-memory
   * descriptors: start address >> 4 in bits 0..13, leading byte offset 1 (unused by K-major swizzled operands),
   * stride byte offset 1024 >> 4 (8-row groups of 128-byte rows) in bits 32..45, and the 128-byte swizzle (1) in
   * bits 62..63.
   */
  private wgmma(s: Extract<Stmt, { k: "wgmma" }>, afterWgmma: boolean): void {
    const a = this.a;
    const hi = a.to("r", "mov.b32", b32imm((1 << 30) | (1024 >> 4)));
    const desc = (index: Expr): string => {
      const off = this.smem.get(s.mem);
      if (off === undefined) throw new KernelError(`${this.k.name}: shared ${s.mem.name} is not declared`);
      let addr = a.to("r", "mad.lo.u32", this.reg("u32", this.ex(index)), "4", this.smemBase);
      if (off) addr = a.to("r", "add.u32", addr, String(off));
      const lo = a.to("r", "or.b32", a.to("r", "bfe.u32", addr, "4", "14"), "65536");
      return a.to("rd", "mov.b64", `{${lo}, ${hi}}`);
    };
    const da = desc(s.a), db = desc(s.b);
    const ds = s.acc.map((v) => this.varReg(v));
    const p = a.to("p", "mov.pred", "1");
    if (!afterWgmma) a.op("wgmma.fence.sync.aligned");
    a.op(`wgmma.mma_async.sync.aligned.m64n${s.n}k16.f32.${s.ab}.${s.ab} {${ds.join(", ")}}, ${da}, ${db}, ${p}, 1, 1, 0, 0`);
  }

  private staging(what: string, f: () => void): void {
    if (this.sm < 80) throw new KernelError(`${this.k.name}: ${what} needs sm_80 or newer`);
    f();
  }

  /** ldmatrix.m8n8 (kernels/ir_data.ts LdMatrixStmt) straight into the destination variables' registers. */
  private ldmatrix(s: Extract<Stmt, { k: "ldmatrix" }>): void {
    const addr = this.sharedAddr(s.mem, s.index);
    const rs = s.dst.map((v) => this.varReg(v));
    this.a.op(`ldmatrix.sync.aligned.m8n8.x${rs.length}${s.trans ? ".trans" : ""}.shared.b16 {${rs.join(", ")}}, ${addr}`);
  }

  /** mma.sync m16n8k16 (kernels/ir_data.ts MmaStmt), f32 accumulate. */
  private mma(s: Extract<Stmt, { k: "mma" }>): void {
    const a = this.a;
    if (this.sm < 80) throw new KernelError(`${this.k.name}: mma needs sm_80 or newer`);
    const pk = s.a.map((e) => this.reg("u32", this.ex(e)));
    const bs = s.b.map((e) => this.reg("u32", this.ex(e)));
    const cs = s.c.map((e) => this.reg("f32", this.ex(e)));
    // fresh result registers: a c value may be the var a d overwrites
    const ds = s.d.map(() => a.reg("f"));
    a.op(`mma.sync.aligned.m16n8k16.row.col.f32.${s.ab}.${s.ab}.f32 {${ds.join(", ")}}, {${pk.join(", ")}}, {${bs.join(", ")}}, {${cs.join(", ")}}`);
    s.d.forEach((v, j) => this.assign(v, ds[j]));
  }

  private loop(s: ForStmt): void {
    const a = this.a;
    const t = s.v.t;
    if (t !== "i32" && t !== "u32") throw new KernelError(`${this.k.name}: loop variable ${s.v.name} is ${t}`);
    const lt = t === "i32" ? "setp.lt.s32" : "setp.lt.u32";
    const v = this.varReg(s.v);
    const u = Math.max(1, Math.floor(s.unroll));
    // Constant bounds: a known trip count, fully unrolled when the hint covers it.
    if (s.start.k === "const" && s.end.k === "const") {
      const trips = Math.max(0, Math.ceil((s.end.v - s.start.v) / s.step));
      if (trips === 0) return;
      if (u >= trips && trips <= 256) {
        for (let j = 0; j < trips; j++) {
          a.op(`mov.b32 ${v}, ${b32imm(s.start.v + j * s.step)}`);
          this.block(s.body);
        }
        return;
      }
    }
    this.assign(s.v, this.ex(s.start));
    // The bound is evaluated once when the body cannot change it, else before every iteration (as the IR says).
    const hoist = invariant(s.end, s.body);
    this.fresh();
    const endOnce = hoist ? this.reg(t, this.opnd(s.end)) : "";
    const bound = (): string => {
      if (hoist) return endOnce;
      this.fresh();
      return this.opnd(s.end);
    };
    const done = a.label();
    if (u > 1) {
      // Main loop takes u iterations at a time while all u are in range; the tail loop finishes.
      const top = a.label(), tail = a.label();
      a.place(top);
      const last = a.to("r", "add.s32", v, String((u - 1) * s.step));
      // v + (u-1)*step must not wrap for the test to mean "all u in range".
      const wraps = a.to("p", t === "i32" ? "setp.lt.s32" : "setp.lt.u32", last, v);
      const inRange = a.to("p", lt, last, bound());
      a.op(`@${wraps} bra ${tail}`);
      a.op(`@!${inRange} bra ${tail}`);
      for (let j = 0; j < u; j++) {
        this.block(s.body);
        a.op(`add.s32 ${v}, ${v}, ${s.step}`);
      }
      a.op(`bra.uni ${top}`);
      a.place(tail);
    }
    const head = a.label();
    a.place(head);
    a.op(`@!${a.to("p", lt, v, bound())} bra ${done}`);
    this.block(s.body);
    a.op(`add.s32 ${v}, ${v}, ${s.step}`);
    a.op(`bra.uni ${head}`);
    a.place(done);
  }
}

/** Renders `k` as a PTX module. Throws KernelError for what PTX cannot express. */
export function renderPtx(k: Kernel, opts: PtxOptions = {}): PtxModule {
  const sm = opts.sm ?? 80;
  if (sm < 80) throw new KernelError(`${k.name}: PTX renderer targets sm_80 and newer, not sm_${sm}`);
  const total = k.workgroup[0] * k.workgroup[1] * k.workgroup[2];
  if (total > 1024) throw new KernelError(`${k.name}: workgroup of ${total} invocations (CUDA allows 1024)`);
  if (k.workgroup[2] > 64) throw new KernelError(`${k.name}: workgroup z of ${k.workgroup[2]} (CUDA allows 64)`);
  const entry = entryName(k.name);
  const dk = decompose(k);
  const L = new Lowering(dk, sm);
  // A staged kernel (cp.async tiles: ~100 KiB of shared memory and most of the registers per workgroup) is
  // rendered without programmatic dependent launch, so it launches plainly: resident early, its blocks took the
  // room of the previous kernel's later waves (and the next kernel's early blocks took its own). On the H200 the
  // 1B's 512-token prefill on staged kernels took 13.8 ms with PDL, 9.5 ms without (session 6).
  const pdl = (opts.pdl ?? false) !== false && sm >= 90 && !k.uses.staging;
  if (k.uses.coop) throw new KernelError(`${k.name}: cooperative matrices are a SPIR-V kernel's (caps.coop); PTX has its own MMA kernels`);
  if (k.uses.wgmma && sm !== 90) throw new KernelError(`${k.name}: wgmma needs sm_90 (sm_90a), not sm_${sm}`);
  // wgmma's 128-byte swizzle is a function of the absolute shared address: the block starts 1024-aligned
  const align = k.uses.wgmma ? 1024 : 16;
  L.prologue(entry);
  if (pdl) L.a.op("griddepcontrol.wait");
  if (pdl && opts.pdl !== "exit") L.a.op("griddepcontrol.launch_dependents");
  L.block(dk.body);
  L.a.op("ret");

  const faultParam = hasChecks(k);
  const nparams = k.buffers.length + (faultParam ? 1 : 0);
  const dynamic = L.sharedBytes > STATIC_SHARED_LIMIT;
  const head: string[] = [];
  head.push(`// poot PTX for kernel ${k.name}${opts.comment ? `: ${opts.comment}` : ""}`);
  for (const b of k.buffers) head.push(`// param ${b.binding}: ${b.name} (${b.elem}, ${b.access})`);
  if (faultParam) head.push(`// param ${k.buffers.length}: fault word (u32, host-mapped)`);
  head.push(`.version ${opts.version ?? "8.0"}`, `.target sm_${sm}${k.uses.wgmma ? "a" : ""}`, ".address_size 64", "");
  if (dynamic) head.push(`.extern .shared .align ${align} .b8 smem[];`, "");
  const params = Array.from({ length: nparams }, (_, i) => `\t.param .u64 ${entry}_param_${i}`);
  head.push(`.visible .entry ${entry}(`, params.join(",\n"), ")");
  head.push(`.reqntid ${k.workgroup.join(", ")}`, "{");
  head.push(...L.a.decls());
  if (L.sharedBytes > 0 && !dynamic) head.push(`\t.shared .align ${align} .b8 smem[${L.sharedBytes}];`);
  head.push("");
  const ptx = [...head, ...L.a.lines, "}", ""].join("\n");
  return {
    kernel: k,
    ptx,
    entry,
    params: nparams,
    faultParam,
    pdl,
    dynamicShared: dynamic ? L.sharedBytes : 0,
    sharedBytes: L.sharedBytes,
  };
}
