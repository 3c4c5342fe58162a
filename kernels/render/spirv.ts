// SPIR-V renderer: kernel IR -> a SPIR-V 1.3 compute module (binary words) for Vulkan 1.1+, no external
// compiler. Descriptor set 0, binding i = kernel buffer i; a kernel with checks gets one more binding after
// them, the error word (see kernels/ir.ts): a failing check atomically ORs its code into word 0 and returns.
//
// Structure: expressions become SSA values (each statement's expression DAG evaluated once, shared
// subtrees included), locals become Function variables, `for` is a structured loop (OpLoopMerge, condition
// in the header, increment in the continue block), `if`/`check` are selections (OpSelectionMerge).
// Float add/sub/mul are NoContraction; 16-bit float conversions are integer arithmetic in spirv/math.ts so
// every driver computes the same bits (but for f16 MMA operands, pack2: OpFConvert, whose rounding is the driver's);
// storage access lives in spirv/memory.ts, the operators and casts in spirv/arith.ts, cooperative matrices
// (caps.coop: the Vulkan memory model) in spirv/coop.ts. NaN-safe float compares and
// max/min, integer div/mod (kernels/decomp/arith.ts) and exp/exp2/log/log2/sin/cos/tanh (decomp/math_f32.ts:
// GLSL.std.450's are only loosely bounded) arrive decomposed. The int8x4 dot (BinOp dot4) is OpSDotKHR where the
// device has integer dot products (caps.dot4Native: the module then declares SPV_KHR_integer_dot_product, which
// Vulkan 1.3 or VK_KHR_shader_integer_dot_product accepts), decomposed into byte products elsewhere.
import type { Builtin, CType, Expr, Kernel, Shared, Stmt, Var } from "../ir.ts";
import { KernelError, walkStmts } from "../ir.ts";
import type { Caps } from "../target.ts";
import { Asm } from "./spirv/asm.ts";
import { Buffers } from "./spirv/memory.ts";
import { CoopMats } from "./spirv/coop.ts";
import { type ArithHost, binary, cast, toF16, unary } from "./spirv/arith.ts";
import { decompose, type Needs } from "../decomp/mod.ts";
import { SpirvModule } from "./spirv/module.ts";
import {
  BuiltIn, Cap, Dec, GLSL, GroupOperationReduce, LoopControl, Op, PackedVectorFormat4x8Bit,
  Scope, Semantics, Storage,
} from "./spirv/spec.ts";
import { unrollLoops } from "./unroll.ts";

export interface SpirvOptions {
  /** Unroll the loops PTX unrolls (render/unroll.ts; default true), not only mark them with the Unroll hint. */
  unroll?: boolean;
  /** Use 16-/8-bit storage access where the caps allow it (default true); false forces the u32-word path. */
  storage16?: boolean;
  storage8?: boolean;
  /** Emit OpName debug names (default true). */
  names?: boolean;
  /**
   * Widen f16 with OpFConvert where the target has f16 arithmetic (default true; exact, and a few integer
   * ops per element cheaper than the bit-manipulation decode used otherwise). f32 -> f16 always rounds
   * with integer ops: Vulkan leaves OpFConvert's rounding mode to the implementation.
   */
  convertF16?: boolean;
  /**
   * Decorate the read-only bindings Restrict (default false): the driver may then read them through a read-only
   * cache and move their loads past other bindings' stores, as PTX does with ld.global.nc. Sound only where no
   * binding a dispatch writes overlaps one it only reads, which a kernel cannot see (its bindings come at record
   * time); opt-in for timing runs (VulkanOptions.restrictReads, bench variant vulkan:restrict) until a recording
   * checks it.
   */
  restrictReads?: boolean;
}

export interface SpirvShader {
  words: Uint32Array;
  /** Entry point name. */
  entry: "main";
  /** Storage-buffer bindings the pipeline layout needs: the kernel's buffers, then the error word if any. */
  bindings: number;
  /** Binding of the error word (== kernel.buffers.length), or undefined when the kernel has no check. */
  errorBinding: number | undefined;
  /**
   * Device features the module relies on (the device enables them and refuses the kernel without them);
   * dotProduct: shaderIntegerDotProduct (Vulkan 1.3 or VK_KHR_shader_integer_dot_product), for OpSDot; coop:
   * cooperative matrices and the Vulkan memory model (caps.coop).
   */
  needs: { float16: boolean; storage16: boolean; storage8: boolean; subgroups: boolean; dotProduct: boolean; coop: boolean };
}

const BUILTINS: Record<Builtin, [number, number]> = {
  "gid.x": [BuiltIn.GlobalInvocationId, 0], "gid.y": [BuiltIn.GlobalInvocationId, 1], "gid.z": [BuiltIn.GlobalInvocationId, 2],
  "lid.x": [BuiltIn.LocalInvocationId, 0], "lid.y": [BuiltIn.LocalInvocationId, 1], "lid.z": [BuiltIn.LocalInvocationId, 2],
  "wgid.x": [BuiltIn.WorkgroupId, 0], "wgid.y": [BuiltIn.WorkgroupId, 1], "wgid.z": [BuiltIn.WorkgroupId, 2],
  "nwg.x": [BuiltIn.NumWorkgroups, 0], "nwg.y": [BuiltIn.NumWorkgroups, 1], "nwg.z": [BuiltIn.NumWorkgroups, 2],
  lane: [BuiltIn.SubgroupLocalInvocationId, -1], sgsize: [BuiltIn.SubgroupSize, -1], sgid: [BuiltIn.SubgroupId, -1],
};

/**
 * What SPIR-V for Vulkan lacks (kernels/decomp): IEEE compares and max/min, integer div/mod, accurate math, and
 * the int8x4 dot where the device has no integer dot product (caps.dot4Native).
 */
const SPIRV_NEEDS: Needs = {
  nanCompare: true, nanMinMax: true, intDivMod: true, math: ["exp", "exp2", "log", "log2", "sin", "cos", "tanh"],
};

/** Renders a kernel for a target with capabilities `caps`. Throws KernelError for what the target lacks. */
export function renderSpirv(kernel: Kernel, caps: Caps, opts: SpirvOptions = {}): SpirvShader {
  const narrow = { bits16: !native16(caps, opts), bits8: !native8(caps, opts) };
  // f16 MMA operands convert with OpFConvert where the device has f16 (its rounding is the driver's: an operand's
  // precision, not a stored value's bits), with integer arithmetic elsewhere and for bf16
  const needs: Needs = { ...SPIRV_NEEDS, dot4: !caps.dot4Native, narrow, pack2: caps.f16 ? "bf16" : "all" };
  return new Emitter(decompose(opts.unroll === false ? kernel : unrollLoops(kernel), needs), caps, opts).render();
}
const native16 = (caps: Caps, opts: SpirvOptions) => (opts.storage16 ?? true) && caps.storage16;
const native8 = (caps: Caps, opts: SpirvOptions) => (opts.storage8 ?? true) && caps.storage8;

const CSIZE: Record<CType, number> = { f32: 4, f16: 2, i32: 4, u32: 4, bool: 4 };

class Emitter {
  private readonly m = new SpirvModule();
  private readonly a = new Asm(this.m);
  private readonly mem: Buffers;
  private readonly locals = new Map<string, { id: number; t: CType }>();
  private readonly fnVars: number[] = [];
  private readonly builtinVars = new Map<number, number>();
  private readonly sharedVars = new Map<string, number>();
  private readonly iface: number[] = [];
  private memo = new Map<Expr, number>();
  private terminated = false;
  private readonly errorBinding: number | undefined;
  private readonly needs = { float16: false, storage16: false, storage8: false, subgroups: false, dotProduct: false, coop: false };
  private readonly coop: CoopMats;
  private readonly names: boolean;
  private readonly arith: ArithHost;

  constructor(private readonly k: Kernel, private readonly caps: Caps, opts: SpirvOptions) {
    this.names = opts.names ?? true;
    if (k.uses.mma) throw new KernelError(`${k.name}: spirv: warp MMA tiles are PTX-only (the library picks its plain kernels here)`);
    if (k.uses.staging) throw new KernelError(`${k.name}: spirv: cp.async/ldmatrix staging is PTX-only (caps.staging)`);
    const n16 = native16(caps, opts), n8 = native8(caps, opts);
    const half = caps.f16 && (opts.convertF16 ?? true) ? () => this.f16() : undefined;
    this.arith = {
      a: this.a, m: this.m, halfFast: half, fail: (msg) => this.fail(msg),
      type: (t) => this.type(t), constant: (t, v) => this.constant(t, v),
    };
    let checks = false, device = false;
    walkStmts(k.body, (s) => {
      if (s.k === "check") checks = true;
      if (s.k === "barrier" && s.device) device = true;
    });
    this.coop = new CoopMats({
      m: this.m, a: this.a, caps, names: this.names, fnVars: this.fnVars, fail: (msg) => this.fail(msg), f16: () => this.f16(),
      at: (mem, index) => this.a.v(Op.AccessChain, this.m.tPtr(Storage.Workgroup, this.type(mem.t)), this.shared(mem), this.index(index)),
      atBuffer: (buf, index) => this.mem.wordPtr(buf, this.index(index)),
    });
    if (k.uses.coop) {
      this.coop.model(k, device);
      this.needs.coop = true;
    }
    this.mem = new Buffers(this.a, k.buffers, n16, n8, (id, from, to) => cast(this.arith, id, from, to), this.names, half, device, opts.restrictReads ?? false);
    this.errorBinding = checks ? k.buffers.length : undefined;
  }

  private fail(msg: string): never {
    throw new KernelError(`${this.k.name}: spirv: ${msg}`);
  }

  render(): SpirvShader {
    const { k, m, a, caps } = this;
    const [wx, wy, wz] = k.workgroup;
    if (wx * wy * wz > caps.maxWorkgroupSize) this.fail(`workgroup ${wx}x${wy}x${wz} exceeds ${caps.maxWorkgroupSize}`);
    const sharedBytes = k.shared.reduce((n, s) => n + s.count * CSIZE[s.t], 0);
    if (sharedBytes > caps.maxSharedBytes) this.fail(`${sharedBytes} bytes of shared memory exceed ${caps.maxSharedBytes}`);
    k.buffers.forEach((b, i) => { if (b.binding !== i) this.fail(`buffer ${b.name} has binding ${b.binding}, expected ${i}`); });
    m.capability(Cap.Shader);
    for (const s of k.shared) this.declareShared(s);
    for (const c of k.coop ?? []) this.coop.declare(c);

    const main = m.id();
    a.s(Op.Function, m.tVoid, main, 0, m.tFn(m.tVoid));
    a.label(m.id());
    const varsAt = m.code.length;
    this.block(k.body);
    if (!this.terminated) a.s(Op.Return);
    a.s(Op.FunctionEnd);
    m.code.splice(varsAt, 0, ...this.fnVars); // OpVariables must open the entry block
    this.mem.finish();
    if (this.names) m.name(main, "main");
    this.needs.storage16 = this.mem.used16;
    this.needs.storage8 = this.mem.used8;
    return {
      words: m.assemble(main, this.iface, k.workgroup),
      entry: "main",
      bindings: k.buffers.length + (this.errorBinding === undefined ? 0 : 1),
      errorBinding: this.errorBinding,
      needs: { ...this.needs },
    };
  }

  // ---- types ----

  private type(t: CType): number {
    switch (t) {
      case "f32": return this.m.tF32;
      case "f16": return this.f16();
      case "i32": return this.m.tI32;
      case "u32": return this.m.tU32;
      case "bool": return this.m.tBool;
    }
  }
  private f16(): number {
    if (!this.caps.f16) this.fail("f16 arithmetic needs the f16 capability");
    this.m.capability(Cap.Float16);
    this.needs.float16 = true;
    return this.m.tFloat(16);
  }
  private constant(t: CType, v: number): number {
    switch (t) {
      case "f32": return this.m.constF32(v);
      case "f16": this.f16(); return this.m.constF16(v);
      case "i32": return this.m.constI32(v);
      case "u32": return this.m.constU32(v);
      case "bool": return this.m.constBool(v !== 0);
    }
  }

  // ---- declarations ----

  private declareShared(s: Shared): void {
    const { m } = this;
    const arr = m.tArray(this.type(s.t), s.count);
    const id = m.id();
    m.global(Op.Variable, [m.tPtr(Storage.Workgroup, arr), id, Storage.Workgroup]);
    if (this.names) m.name(id, s.name);
    this.sharedVars.set(s.name, id);
  }
  private local(v: Var): { id: number; t: CType } {
    let l = this.locals.get(v.name);
    if (!l) {
      const id = this.m.id();
      const ptr = this.m.tPtr(Storage.Function, this.type(v.t));
      this.fnVars.push((4 << 16) | Op.Variable, ptr, id, Storage.Function);
      if (this.names) this.m.name(id, v.name);
      l = { id, t: v.t };
      this.locals.set(v.name, l);
    } else if (l.t !== v.t) {
      this.fail(`variable ${v.name} used as ${l.t} and ${v.t}`);
    }
    return l;
  }
  private builtin(b: Builtin): number {
    const [bi, comp] = BUILTINS[b];
    const { m, a } = this;
    if (comp < 0) {
      if (!this.caps.subgroups) this.fail(`builtin ${b} needs subgroups`);
      this.needs.subgroups = true;
      m.capability(Cap.GroupNonUniform);
    }
    let id = this.builtinVars.get(bi);
    const vt = comp < 0 ? m.tU32 : m.tVec(m.tU32, 3);
    if (id === undefined) {
      id = m.id();
      m.global(Op.Variable, [m.tPtr(Storage.Input, vt), id, Storage.Input]);
      m.decorate(id, Dec.BuiltIn, bi);
      this.builtinVars.set(bi, id);
      this.iface.push(id);
    }
    const v = a.v(Op.Load, vt, id);
    return comp < 0 ? v : a.v(Op.CompositeExtract, m.tU32, v, comp);
  }

  // ---- expressions ----

  /** Starts a statement: values computed for the previous one may be stale (stores, assignments). */
  private fresh(): void {
    if (this.memo.size) this.memo = new Map();
  }

  private expr(e: Expr): number {
    let id = this.memo.get(e);
    if (id === undefined) {
      id = this.lower(e);
      this.memo.set(e, id);
    }
    return id;
  }

  private lower(e: Expr): number {
    const { a, m } = this;
    switch (e.k) {
      case "const": return this.constant(e.t, e.v);
      case "var": {
        const l = this.local(e.v);
        return a.v(Op.Load, this.type(l.t), l.id);
      }
      case "builtin": return this.builtin(e.b);
      case "un": return unary(this.arith, e.op, this.expr(e.a), e.a.t);
      case "bin":
        if (e.op === "dot4") return this.dot4(this.expr(e.a), this.expr(e.b));
        return binary(this.arith, e.op, this.expr(e.a), this.expr(e.b), e.a.t);
      case "fma": {
        if (e.t !== "f32" && e.t !== "f16") this.fail("fma needs floats");
        return a.glsl(this.type(e.t), GLSL.Fma, this.expr(e.a), this.expr(e.b), this.expr(e.c));
      }
      case "select": return a.sel(this.type(e.t), this.expr(e.c), this.expr(e.a), this.expr(e.b));
      case "cast": return cast(this.arith, this.expr(e.a), e.a.t, e.t);
      case "bitcast": {
        if (e.t === e.a.t) return this.expr(e.a);
        if (e.t === "bool" || e.a.t === "bool" || e.t === "f16" || e.a.t === "f16") this.fail(`bitcast ${e.a.t} -> ${e.t}`);
        return a.v(Op.Bitcast, this.type(e.t), this.expr(e.a));
      }
      case "load": return this.mem.load(e.buf, e.view, this.index(e.index), e.t);
      case "sload": {
        const ptr = a.v(Op.AccessChain, m.tPtr(Storage.Workgroup, this.type(e.t)), this.shared(e.mem), this.index(e.index));
        return a.v(Op.Load, this.type(e.t), ptr);
      }
      case "subgroup": return this.reduce(e.op, this.expr(e.a), e.a.t);
      case "shuffle":
        return this.shuffle(e.mode, this.expr(e.a), e.a.t, this.index(e.lane), e.lane.k === "const" ? e.lane.v : undefined);
      case "pack2": { // f16 only: bf16 arrives decomposed (decomp/mod.ts pack2Bits)
        const h = this.f16();
        const lo = a.v(Op.FConvert, h, this.expr(e.a)), hi = a.v(Op.FConvert, h, this.expr(e.b));
        return a.v(Op.Bitcast, m.tU32, a.v(Op.CompositeConstruct, m.tVec(h, 2), lo, hi));
      }
    }
  }

  private shared(s: Shared): number {
    const id = this.sharedVars.get(s.name);
    if (id === undefined) this.fail(`shared ${s.name} is not declared`);
    return id;
  }
  /** An index expression as a u32 id. */
  private index(e: Expr): number {
    const id = this.expr(e);
    if (e.t === "u32") return id;
    if (e.t === "i32") return this.a.v(Op.Bitcast, this.m.tU32, id);
    this.fail(`index of type ${e.t}`);
  }

  /**
   * The signed int8x4 dot of two u32 words, native: OpSDotKHR in this SPIR-V 1.3 module (SPV_KHR_integer_dot_product;
   * OpSDot of SPIR-V 1.6 is the same instruction). decompose() left it only where caps.dot4Native says so.
   */
  private dot4(x: number, y: number): number {
    if (!this.caps.dot4Native) this.fail("dot4 reached the renderer without caps.dot4Native");
    const { m, a } = this;
    m.capability(Cap.DotProduct);
    m.capability(Cap.DotProductInput4x8BitPacked);
    m.extension("SPV_KHR_integer_dot_product");
    this.needs.dotProduct = true;
    return a.v(Op.SDot, m.tI32, x, y, PackedVectorFormat4x8Bit);
  }

  private subgroups(cap: number): void {
    if (!this.caps.subgroups) this.fail("subgroup operations need the subgroups capability");
    this.needs.subgroups = true;
    this.m.capability(Cap.GroupNonUniform);
    this.m.capability(cap);
  }

  private reduce(op: "add" | "max" | "min", x: number, t: CType): number {
    const { a } = this;
    this.subgroups(Cap.GroupNonUniformArithmetic);
    if (t === "bool") this.fail("subgroup reduce of bool");
    if (t === "f16") return toF16(this.arith, this.reduce(op, a.v(Op.FConvert, a.f, x), "f32")); // an f32 sum, rounded once
    const table = {
      f32: { add: Op.GroupNonUniformFAdd, max: Op.GroupNonUniformFMax, min: Op.GroupNonUniformFMin },
      i32: { add: Op.GroupNonUniformIAdd, max: Op.GroupNonUniformSMax, min: Op.GroupNonUniformSMin },
      u32: { add: Op.GroupNonUniformIAdd, max: Op.GroupNonUniformUMax, min: Op.GroupNonUniformUMin },
    } as const;
    return a.v(table[t][op], this.type(t), a.cu(Scope.Subgroup), GroupOperationReduce, x);
  }

  private shuffle(mode: "xor" | "idx" | "down", x: number, t: CType, lane: number, laneConst?: number): number {
    const { a } = this;
    this.subgroups(mode === "down" ? Cap.GroupNonUniformShuffleRelative : Cap.GroupNonUniformShuffle);
    if (t === "f16") {
      const wide = this.shuffle(mode, a.v(Op.FConvert, a.f, x), "f32", lane, laneConst);
      return a.v(Op.FConvert, this.type("f16"), wide);
    }
    const op = mode === "xor" ? Op.GroupNonUniformShuffleXor
      : mode === "idx" ? Op.GroupNonUniformShuffle : Op.GroupNonUniformShuffleDown;
    const got = a.v(op, this.type(t), a.cu(Scope.Subgroup), x, lane);
    const [wx, wy, wz] = this.k.workgroup, wg = wx * wy * wz, sgs = this.caps.subgroupSize;
    const whole = sgs > 0 && wg % sgs === 0; // no partial subgroup at the workgroup's end
    if (whole && mode === "xor" && laneConst !== undefined && laneConst < sgs) return got;
    // A source lane outside the subgroup yields the caller's own value (SPIR-V leaves it undefined; the
    // other renderers define it so). The last subgroup of a workgroup that is no multiple of the size has
    // only wg - sgid*size invocations: its other lanes are inactive, and reading one is undefined too
    // (NVIDIA gives 0), so the bound is that count there (subgroups laid out by linear index, as the IR says).
    let size = this.builtin("sgsize");
    if (!whole) {
      const left = a.isub(a.u, a.cu(wg), a.v(Op.IMul, a.u, this.builtin("sgid"), size));
      size = a.sel(a.u, a.ult(left, size), left, size);
    }
    const src = mode === "idx" ? lane
      : mode === "down" ? a.iadd(a.u, this.builtin("lane"), lane)
      : a.xor(a.u, this.builtin("lane"), lane);
    return a.sel(this.type(t), a.ult(src, size), got, x);
  }

  // ---- statements ----

  private block(list: Stmt[]): void {
    for (const s of list) {
      if (this.terminated) return; // the rest of the block is unreachable
      this.fresh();
      this.stmt(s);
    }
  }

  private stmt(s: Stmt): void {
    const { a, m } = this;
    switch (s.k) {
      case "let": case "assign": {
        const l = this.local(s.v);
        const v = this.expr(s.e);
        if (s.e.t !== l.t) this.fail(`assign ${s.e.t} to ${l.t} ${s.v.name}`);
        a.s(Op.Store, l.id, v);
        return;
      }
      case "store":
        return this.mem.store(s.buf, s.view, this.index(s.index), this.expr(s.e), s.e.t);
      case "storev":
        return this.mem.storev(s.buf, s.view, this.index(s.index), s.es.map((e) => this.expr(e)), s.es.map((e) => e.t));
      case "atomic": {
        const old = this.mem.atomic(s.buf, s.op, this.index(s.index), this.expr(s.e));
        if (s.dst) a.s(Op.Store, this.local(s.dst).id, old);
        return;
      }
      case "loadv": {
        const vals = this.mem.loadv(s.buf, s.view, this.index(s.index), s.dst.length);
        s.dst.forEach((d, j) => a.s(Op.Store, this.local(d).id, vals[j]));
        return;
      }
      case "sstore": {
        const ptr = a.v(Op.AccessChain, m.tPtr(Storage.Workgroup, this.type(s.mem.t)), this.shared(s.mem), this.index(s.index));
        if (s.e.t !== s.mem.t) this.fail(`sstore of ${s.e.t} into ${s.mem.t} ${s.mem.name}`);
        a.s(Op.Store, ptr, this.expr(s.e));
        return;
      }
      case "if": return this.ifStmt(s.c, s.then, s.else);
      case "for": return this.forStmt(s);
      case "barrier": {
        const sem = Semantics.AcquireRelease | Semantics.WorkgroupMemory | Semantics.UniformMemory;
        a.s(Op.ControlBarrier, a.cu(Scope.Workgroup), a.cu(s.device ? Scope.Device : Scope.Workgroup), a.cu(sem));
        return;
      }
      case "check": return this.check(s.c, s.code);
      case "cmzero": case "cmload": case "cmmad": case "cmstore": return this.coop.stmt(s);
      case "return":
        a.s(Op.Return);
        this.terminated = true;
        return;
    }
  }

  private ifStmt(c: Expr, then: Stmt[], otherwise: Stmt[]): void {
    const { a, m } = this;
    const cond = this.expr(c);
    const tl = m.id(), merge = m.id(), el = otherwise.length ? m.id() : merge;
    a.s(Op.SelectionMerge, merge, 0);
    a.s(Op.BranchConditional, cond, tl, el);
    a.label(tl);
    this.block(then);
    const thenDone = this.terminated;
    if (!thenDone) a.s(Op.Branch, merge);
    this.terminated = false;
    let elseDone = false;
    if (otherwise.length) {
      a.label(el);
      this.block(otherwise);
      elseDone = this.terminated;
      if (!elseDone) a.s(Op.Branch, merge);
      this.terminated = false;
    }
    a.label(merge);
    if (thenDone && elseDone) {
      a.s(Op.Unreachable);
      this.terminated = true;
    }
  }

  private forStmt(s: Extract<Stmt, { k: "for" }>): void {
    const { a, m } = this;
    if (s.v.t !== "u32" && s.v.t !== "i32") this.fail(`loop index of type ${s.v.t}`);
    const iv = this.local(s.v);
    const T = this.type(s.v.t);
    a.s(Op.Store, iv.id, this.expr(s.start));
    const header = m.id(), body = m.id(), cont = m.id(), merge = m.id();
    a.s(Op.Branch, header);
    a.label(header);
    this.fresh();
    const i = a.v(Op.Load, T, iv.id);
    const end = this.expr(s.end);
    const lt = a.v(s.v.t === "i32" ? Op.SLessThan : Op.ULessThan, a.b, i, end);
    a.s(Op.LoopMerge, merge, cont, s.unroll > 1 ? LoopControl.Unroll : LoopControl.None);
    a.s(Op.BranchConditional, lt, body, merge);
    a.label(body);
    this.block(s.body);
    if (!this.terminated) a.s(Op.Branch, cont);
    this.terminated = false;
    a.label(cont);
    const i2 = a.v(Op.Load, T, iv.id);
    a.s(Op.Store, iv.id, a.v(Op.IAdd, T, i2, this.constant(s.v.t, s.step)));
    a.s(Op.Branch, header);
    a.label(merge);
  }

  private check(c: Expr, code: number): void {
    const { a, m } = this;
    const cond = this.expr(c);
    const fail = m.id(), merge = m.id();
    a.s(Op.SelectionMerge, merge, 0);
    a.s(Op.BranchConditional, cond, merge, fail);
    a.label(fail);
    const word = this.mem.errorWord(this.errorBinding!);
    a.v(Op.AtomicOr, a.u, word, a.cu(Scope.Device), a.cu(Semantics.Relaxed), a.cu(code));
    a.s(Op.Return);
    a.label(merge);
  }
}
