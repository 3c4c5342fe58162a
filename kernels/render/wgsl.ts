// Renders a Kernel (kernels/ir.ts) to WGSL for a WebGPU compute pipeline (Deno's wgpu/Naga). Storage access
// lives in wgsl_storage.ts, the operators in wgsl_ops.ts, the float helpers in wgsl_math.ts.
//
// Storage. WGSL storage only has 32-bit scalars (f16 needs `enable f16`), so every binding is declared as an
// array of u32 words, f32/i32 read and written by bitcast; 8- and 16-bit element accesses arrive as word
// accesses plus bit arithmetic, and a narrow store as an atomic and/or pair (kernels/decomp/narrow.ts, asked
// for through Needs.narrow). A binding that an atomic statement touches is declared array<atomic<u32>>, and
// every other access to it goes through atomicLoad/atomicStore. A binding that a vector access of 8 or 16
// bytes touches is declared as array<vec2<u32>> / array<vec4<u32>>, so such an access is one wide load or
// store; scalar accesses then pick a component. Devices bind every range rounded up to 16 bytes so that no
// element falls off the end.
//
// Control flow. WGSL wants barriers in uniform control flow, and an invocation that has returned must still
// reach the workgroup's later barriers (Naga does not check this, but Vulkan leaves it undefined). A kernel
// without barriers renders `return` and a failed `check` as a plain return. A kernel with barriers keeps a
// per-invocation flag `p_on` instead: return/check clear it, statements after a possible stop run under
// `if (p_on)`, statements holding a barrier stay outside such guards (their own bodies are guarded the same
// way), and barrier-free loops `break` out. Subgroup operations inside a guard reduce over the invocations
// still running, as the IR's masked semantics say. (The IR asks kernels not to return before a barrier; this
// keeps a kernel that does well-defined rather than hung.)
//
// check(cond, code): one extra binding after the kernel's own (array<atomic<u32>>); a failing check does
// atomicOr(&err[0], code) and stops that invocation. The device binds each dispatch its own word.
//
// Numerics (what the JS renderer does too): integer x/0 and x%0 give 0, float->int truncates and saturates
// with NaN -> 0, shift amounts are taken mod 32, a shuffle from a lane outside the subgroup returns the
// caller's own value, float max/min propagate NaN, float compares follow IEEE for NaN (by decompose(),
// kernels/decomp/arith.ts; Naga's own `!=` is ordered), a cast to f16 rounds to nearest even once.
// exp/log/log2/sin/cos/tanh arrive as IR arithmetic (decompose's Needs.math); sqrt, inverseSqrt, exp2, pow, division and
// float % (x - y*trunc(x/y), not C's fmod) are the driver's. What WGSL cannot promise:
// - no contraction: Naga emits no NoContraction; Mesa (lavapipe) fuses some patterns, e.g. a sum of two
//   products, and NVIDIA fuses a*b + c, so such sums may differ from the IR's rounding by an ulp;
// - `fma` need not be fused: lavapipe's is a multiply and an add (NVIDIA's is fused);
// - subnormals: a driver may flush f32 subnormal inputs and results to zero (NVIDIA does, lavapipe does not);
// - division and sqrt are the driver's approximations (NVIDIA's are 1 ulp off at times; WGSL allows 2.5).
// graph/tolerance covers these; capture vs eager on one device stays bit-exact (same shaders).
import type { Buffer, CType, Expr, Kernel, Shared, Stmt, Var } from "../ir.ts";
import { ESIZE, exprKids, KernelError, stmtExprs } from "../ir.ts";
import { wgslMath } from "./wgsl_math.ts";
import { decompose, type Needs } from "../decomp/mod.ts";
import { type BufInfo, WordStorage } from "./wgsl_storage.ts";
import { unrollLoops } from "./unroll.ts";
import { binary, conv, type OpsHost, partialSubgroup, shuffle, unary } from "./wgsl_ops.ts";

export interface WgslOptions {
  /** The device has `shader-f16` enabled (kernels computing in f16 need it). */
  f16: boolean;
  /** The device has `subgroups` enabled (kernels using subgroup ops need it). */
  subgroups: boolean;
  /** WGSL has dot4I8Packed (language feature packed_4x8_integer_dot_product); else dot4 arrives decomposed. */
  dot4?: boolean;
  /** Emit `enable subgroups;` (the WGSL spec wants it; Naga in Deno 2.9 rejects it and needs none). */
  enableSubgroups?: boolean;
  /**
   * Declare these bindings (true: every binding) read_write. WebGPU refuses a dispatch that binds one GPUBuffer
   * both read-only and writable (wgpu tracks usage per buffer, not per range), which happens when a kernel reads
   * and writes different ranges of one arena; the device renders such a dispatch with its arena reads declared
   * read_write, the rest (the weights) still read-only.
   */
  readWrite?: boolean | readonly number[];
  /** Unroll the loops PTX unrolls (render/unroll.ts; default true): WGSL has no unroll hint at all. */
  unroll?: boolean;
}

export interface WgslBinding {
  binding: number;
  /** The kernel buffer's name, or "err" for the fault word. */
  name: string;
  access: "read" | "read_write";
  atomic: boolean;
  /** u32 words per array element of the declaration (1, 2 or 4). */
  words: 1 | 2 | 4;
}

export interface WgslShader {
  code: string;
  entry: string;
  /** Kernel buffers in binding order, then the fault word when the kernel has checks. */
  bindings: WgslBinding[];
  /** Binding index of the fault word, or -1. */
  errorBinding: number;
}

function ident(s: string): string {
  return s.replace(/[^A-Za-z0-9_]/g, "_");
}

// ---- whole-kernel scans ------------------------------------------------------------------------------

function walk(body: Stmt[], fs: (s: Stmt) => void, fe: (e: Expr) => void): void {
  const we = (e: Expr): void => {
    fe(e);
    for (const k of exprKids(e)) we(k);
  };
  for (const s of body) {
    fs(s);
    for (const e of stmtExprs(s)) we(e);
    if (s.k === "for") walk(s.body, fs, fe);
    else if (s.k === "if") {
      walk(s.then, fs, fe);
      walk(s.else, fs, fe);
    }
  }
}
function contains(s: Stmt, pred: (s: Stmt) => boolean): boolean {
  if (pred(s)) return true;
  if (s.k === "for") return s.body.some((x) => contains(x, pred));
  if (s.k === "if") return s.then.some((x) => contains(x, pred)) || s.else.some((x) => contains(x, pred));
  return false;
}
const hasBarrier = (s: Stmt): boolean => contains(s, (x) => x.k === "barrier");
const mayStop = (s: Stmt): boolean => contains(s, (x) => x.k === "return" || x.k === "check");

// ---- the renderer --------------------------------------------------------------------------------------

class Wgsl implements OpsHost {
  private readonly bufs = new Map<number, BufInfo>();
  private readonly helpers = new Set<string>();      // wgsl_math names
  private readonly local = new Map<string, string>(); // generated per-kernel helpers by name
  private readonly vars = new Map<string, CType>();
  private readonly flagMode: boolean;
  private readonly storageBarrier: boolean;
  private readonly errName = "p_err";
  private usesF16 = false;
  private usesSubgroups = false;
  private usesDot4 = false;
  private ind = 1;
  private readonly out: string[] = [];

  private readonly mem: WordStorage;

  constructor(readonly k: Kernel, readonly opts: WgslOptions) {
    if (k.uses.mma) throw new KernelError(`${k.name}: wgsl: warp MMA tiles are PTX-only (the library picks its plain kernels here)`);
    if (k.uses.staging) throw new KernelError(`${k.name}: wgsl: cp.async/ldmatrix staging is PTX-only (caps.staging)`);
    if (k.uses.coop) throw new KernelError(`${k.name}: wgsl: WGSL has no cooperative matrices (caps.coop)`);
    this.analyse();
    this.mem = new WordStorage(k, this.bufs, this);
    this.flagMode = k.body.some(hasBarrier);
    this.storageBarrier = [...this.bufs.values()].some((b) => b.stored);
    if (this.usesSubgroups && !opts.subgroups) throw new KernelError(`${k.name}: needs subgroups, which the target lacks`);
    if (this.usesF16 && !opts.f16) throw new KernelError(`${k.name}: computes in f16, which needs shader-f16`);
  }

  private analyse(): void {
    const k = this.k;
    const widest = new Map<number, number>();
    const atomic = new Set<number>();
    const stored = new Set<number>();
    const noteVec = (b: Buffer, bytes: number) => widest.set(b.binding, Math.max(widest.get(b.binding) ?? 4, bytes));
    const f16 = (t: CType) => { if (t === "f16") this.usesF16 = true; };
    for (const s of k.shared) f16(s.t);
    walk(k.body, (s) => {
      if (s.k === "let" || s.k === "for") f16(s.v.t);
      if (s.k === "store" || s.k === "storev") {
        stored.add(s.buf.binding);
        const n = s.k === "store" ? 1 : s.es.length;
        if (n * ESIZE[s.view] < 4) atomic.add(s.buf.binding);
        else noteVec(s.buf, n * ESIZE[s.view]);
      }
      if (s.k === "atomic") {
        stored.add(s.buf.binding);
        atomic.add(s.buf.binding);
      }
      if (s.k === "loadv") noteVec(s.buf, s.dst.length * ESIZE[s.view]);
    }, (e) => {
      f16(e.t);
      if (e.k === "subgroup" || e.k === "shuffle" || e.k === "builtin" && (e.b === "lane" || e.b === "sgsize" || e.b === "sgid")) {
        this.usesSubgroups = true;
      }
    });
    if (k.uses.subgroups) this.usesSubgroups = true;
    for (const b of k.buffers) {
      const at = atomic.has(b.binding);
      const w = widest.get(b.binding) ?? 4;
      this.bufs.set(b.binding, {
        decl: `b${b.binding}_${ident(b.name)}`,
        words: at ? 1 : w >= 16 ? 4 : w >= 8 ? 2 : 1,
        atomic: at,
        stored: stored.has(b.binding),
      });
    }
  }

  need(name: string): string {
    this.helpers.add(name);
    return name;
  }
  fn(name: string, code: () => string): string {
    if (!this.local.has(name)) this.local.set(name, code());
    return name;
  }
  conv(x: string, from: CType, t: CType): string {
    return conv(this, x, from, t);
  }
  useDot4(): void {
    this.usesDot4 = true;
  }

  /** Element index (any integer expression) as u32. */
  idx(e: Expr): string {
    const s = this.ex(e);
    return e.t === "u32" ? s : e.t === "i32" ? `bitcast<u32>(${s})` : `u32(${s})`;
  }

  // ---- expressions -----------------------------------------------------------------------------------

  private lit(v: number, t: CType): string {
    switch (t) {
      case "bool": return v ? "true" : "false";
      case "u32": return `${v >>> 0}u`;
      case "i32": return v === -2147483648 ? "(-2147483647i - 1i)" : v < 0 ? `(${v}i)` : `${v}i`;
      case "f32": case "f16": {
        const f = Math.fround(v);
        if (!Number.isFinite(f) || Object.is(f, -0)) {
          const b = new Uint32Array(new Float32Array([f]).buffer)[0];
          const s = `${this.need("p_fb")}(0x${b.toString(16)}u)`;
          return t === "f16" ? `f16(${s})` : s;
        }
        let str = "";
        for (let p = 1; p <= 9; p++) {
          str = f.toPrecision(p);
          if (Math.fround(Number(str)) === f) break;
        }
        if (!/[.e]/.test(str)) str += ".0";
        const s = `${str}${t === "f16" ? "h" : "f"}`;
        return f < 0 ? `(${s})` : s;
      }
    }
  }

  private varName(v: Var): string {
    const t = this.vars.get(v.name);
    if (t !== undefined && t !== v.t) throw new KernelError(`${this.k.name}: variable ${v.name} used as ${t} and ${v.t}`);
    this.vars.set(v.name, v.t);
    return `v_${ident(v.name)}`;
  }

  private builtin(b: string): string {
    switch (b) {
      case "lane": return "p_lane";
      case "sgsize": return "p_sgsize";
      case "sgid": return "(p_lidx / p_sgsize)";
    }
    const [n, c] = b.split(".");
    return `p_${n}.${c}`;
  }

  ex(e: Expr): string {
    switch (e.k) {
      case "const": return this.lit(e.v, e.t);
      case "var": return this.varName(e.v);
      case "builtin": return this.builtin(e.b);
      case "un": return unary(this, e.op, e.t, e.a);
      case "bin": return binary(this, e.op, e.t, e.a, e.b);
      case "fma": return `fma(${this.ex(e.a)}, ${this.ex(e.b)}, ${this.ex(e.c)})`;
      case "select": return `select(${this.ex(e.b)}, ${this.ex(e.a)}, ${this.ex(e.c)})`;
      case "cast": return conv(this, this.ex(e.a), e.a.t, e.t);
      case "bitcast": return e.a.t === e.t ? this.ex(e.a) : `bitcast<${e.t}>(${this.ex(e.a)})`;
      case "load": return this.mem.load(e.buf, e.view, this.idx(e.index), e.t);
      case "sload": {
        const s = `${this.sharedName(e.mem)}[${this.idx(e.index)}]`;
        return e.mem.t === "bool" ? `(${s} != 0u)` : s;
      }
      case "subgroup": {
        if (e.t === "bool") throw new KernelError(`${this.k.name}: subgroup ${e.op} of bool`);
        const f = e.op === "add" ? "subgroupAdd" : e.op === "max" ? "subgroupMax" : "subgroupMin";
        return `${f}(${this.ex(e.a)})`;
      }
      case "shuffle": return shuffle(this, e.mode, e.t, e.a, e.lane);
      case "pack2": throw new KernelError(`${this.k.name}: wgsl: pack2 is an MMA / cooperative-matrix operand (PTX and SPIR-V)`);
    }
  }

  private sharedName(s: Shared): string {
    const i = this.k.shared.indexOf(s);
    const j = i >= 0 ? i : this.k.shared.findIndex((x) => x.name === s.name);
    if (j < 0) throw new KernelError(`${this.k.name}: shared ${s.name} is not declared by the kernel`);
    return `s${j}_${ident(s.name)}`;
  }

  // ---- statements ------------------------------------------------------------------------------------

  private line(s: string): void {
    this.out.push("  ".repeat(this.ind) + s);
  }
  private block(open: string, f: () => void): void {
    this.line(open + " {");
    this.ind++;
    f();
    this.ind--;
    this.line("}");
  }

  /** How a statement that stops the invocation is rendered. */
  private stop(ctx: Ctx): string {
    if (!this.flagMode) return "return;";
    return ctx.loop ? "p_on = false; break;" : "p_on = false;";
  }

  /** Renders statements knowing the invocation is active on entry. */
  private active(body: Stmt[], ctx: Ctx): void {
    for (let i = 0; i < body.length; i++) {
      const s = body[i];
      this.stmt(s, ctx);
      if (s.k === "return") return; // the rest is dead code
      if (this.flagMode && mayStop(s) && i + 1 < body.length) {
        if (ctx.loop) this.line("if (!p_on) { break; }");
        else return this.maybe(body.slice(i + 1), ctx);
      }
    }
  }
  /** Renders statements when the invocation may already have stopped (flag mode only). */
  private maybe(body: Stmt[], ctx: Ctx): void {
    let run: Stmt[] = [];
    const flush = () => {
      if (run.length) this.block("if (p_on)", () => this.active(run, ctx));
      run = [];
    };
    for (const s of body) {
      if (!hasBarrier(s)) {
        run.push(s);
        continue;
      }
      flush();
      if (s.k === "barrier") this.barrier(s.device);
      else if (s.k === "for") this.forLoop(s, () => this.maybe(s.body, { loop: false }));
      else if (s.k === "if") {
        this.block(`if (${this.ex(s.c)})`, () => this.maybe(s.then, ctx));
        if (s.else.length) this.block("else", () => this.maybe(s.else, ctx));
      }
    }
    flush();
  }

  /** device: ordering with other workgroups, which needs storageBarrier (Naga gives its memory semantics device scope). */
  private barrier(device = false): void {
    this.line(this.storageBarrier || device ? "storageBarrier(); workgroupBarrier();" : "workgroupBarrier();");
  }

  private forLoop(s: Stmt & { k: "for" }, body: () => void): void {
    const v = this.varName(s.v);
    const step = s.v.t === "i32" ? `${s.step}i` : `${s.step}u`;
    this.block(`for (${v} = ${this.ex(s.start)}; ${v} < ${this.ex(s.end)}; ${v} = ${v} + ${step})`, body);
  }

  private stmt(s: Stmt, ctx: Ctx): void {
    switch (s.k) {
      case "let": case "assign":
        this.line(`${this.varName(s.v)} = ${this.ex(s.e)};`);
        return;
      case "store": {
        if (this.k.buffers[s.buf.binding]?.access === "r") throw new KernelError(`${this.k.name}: store to read-only ${s.buf.name}`);
        const q = this.idx(s.index), v = this.ex(s.e);
        // narrower views arrive as word accesses and atomics (kernels/decomp/narrow.ts)
        this.line(this.mem.setWord(s.buf, q, this.mem.encode(s.view, v, s.e.t)));
        return;
      }
      case "loadv": {
        const dst = s.dst.map((d) => this.varName(d));
        const q = this.idx(s.index);
        this.block("", () => {
          this.line(`let q = ${q};`);
          for (const l of this.mem.loadRun(s.buf, s.view, "q", dst)) this.line(l);
        });
        return;
      }
      case "atomic": {
        const decl = this.mem.info(s.buf).decl;
        const call = `atomic${s.op === "and" ? "And" : s.op === "or" ? "Or" : "Add"}(&${decl}[${this.idx(s.index)}], ${this.ex(s.e)})`;
        this.line(s.dst ? `${this.varName(s.dst)} = ${call};` : `${call};`);
        return;
      }
      case "storev": {
        if (this.k.buffers[s.buf.binding]?.access === "r") throw new KernelError(`${this.k.name}: store to read-only ${s.buf.name}`);
        const q = this.idx(s.index);
        const vals = s.es.map((e) => this.ex(e));
        this.block("", () => {
          this.line(`let q = ${q};`);
          vals.forEach((v, j) => this.line(`let x${j} = ${v};`));
          for (const l of this.mem.storeRun(s.buf, s.view, "q", vals.map((_, j) => `x${j}`), s.es.map((e) => e.t))) this.line(l);
        });
        return;
      }
      case "sstore": {
        const v = this.ex(s.e);
        this.line(`${this.sharedName(s.mem)}[${this.idx(s.index)}] = ${s.mem.t === "bool" ? `select(0u, 1u, ${v})` : v};`);
        return;
      }
      case "for": {
        if (!this.flagMode) this.forLoop(s, () => this.active(s.body, ctx));
        else if (!hasBarrier(s)) this.forLoop(s, () => this.active(s.body, { loop: true }));
        // a barrier loop keeps iterating for stopped invocations; a later iteration may start stopped
        else this.forLoop(s, () => mayStop(s) ? this.maybe(s.body, { loop: false }) : this.active(s.body, { loop: false }));
        return;
      }
      case "if":
        this.block(`if (${this.ex(s.c)})`, () => this.active(s.then, ctx));
        if (s.else.length) this.block("else", () => this.active(s.else, ctx));
        return;
      case "barrier":
        this.barrier(s.device);
        return;
      case "check":
        this.line(`if (!(${this.ex(s.c)})) { atomicOr(&${this.errName}[0], ${s.code >>> 0}u); ${this.stop(ctx)} }`);
        return;
      case "return":
        this.line(this.stop(ctx));
        return;
    }
  }

  // ---- the module ------------------------------------------------------------------------------------

  render(): WgslShader {
    const k = this.k;
    this.active(k.body, { loop: false });
    const body = this.out.splice(0);

    const head: string[] = [];
    if (this.usesF16) head.push("enable f16;");
    if (this.usesSubgroups && this.opts.enableSubgroups) head.push("enable subgroups;");
    if (this.usesDot4) head.push("requires packed_4x8_integer_dot_product;");
    head.push(`// kernel ${k.name}: workgroup ${k.workgroup.join("x")}, grid ${k.grid.join("x")}`);
    const bindings: WgslBinding[] = [];
    for (const b of k.buffers) {
      const x = this.mem.info(b);
      const rw = this.opts.readWrite === true || (Array.isArray(this.opts.readWrite) && this.opts.readWrite.includes(b.binding)) ||
        b.access !== "r" || x.atomic;
      const elem = x.atomic ? "atomic<u32>" : x.words === 1 ? "u32" : `vec${x.words}<u32>`;
      head.push(`@group(0) @binding(${b.binding}) var<storage, ${rw ? "read_write" : "read"}> ${x.decl}: array<${elem}>;`);
      bindings.push({ binding: b.binding, name: b.name, access: rw ? "read_write" : "read", atomic: x.atomic, words: x.words });
    }
    let errorBinding = -1;
    if (k.uses.checks || k.body.some((s) => contains(s, (x) => x.k === "check"))) {
      errorBinding = k.buffers.length;
      head.push(`@group(0) @binding(${errorBinding}) var<storage, read_write> ${this.errName}: array<atomic<u32>>;`);
      bindings.push({ binding: errorBinding, name: "err", access: "read_write", atomic: true, words: 1 });
    }
    k.shared.forEach((s) => {
      head.push(`var<workgroup> ${this.sharedName(s)}: array<${s.t === "bool" ? "u32" : s.t}, ${s.count}>;`);
    });
    const sg = this.usesSubgroups;
    if (sg) head.push("var<private> p_lane: u32;", "var<private> p_sgsize: u32;");
    const sgn = sg && partialSubgroup(this.k) && [...this.local.keys()].some((n) => n.startsWith("p_shf_"));
    if (sgn) head.push("var<private> p_sgn: u32; // invocations in this one's subgroup");
    head.push(...wgslMath(this.helpers), ...this.local.values());

    const params = [
      "@builtin(global_invocation_id) p_gid: vec3<u32>",
      "@builtin(local_invocation_id) p_lid: vec3<u32>",
      "@builtin(workgroup_id) p_wgid: vec3<u32>",
      "@builtin(num_workgroups) p_nwg: vec3<u32>",
      "@builtin(local_invocation_index) p_lidx: u32",
    ];
    if (sg) params.push("@builtin(subgroup_invocation_id) p_sgl: u32", "@builtin(subgroup_size) p_sgs: u32");
    const main = [`@compute @workgroup_size(${k.workgroup.join(", ")})`, `fn main(${params.join(", ")}) {`];
    if (sg) main.push("  p_lane = p_sgl;", "  p_sgsize = p_sgs;");
    if (sgn) main.push(`  p_sgn = min(p_sgs, ${k.workgroup[0] * k.workgroup[1] * k.workgroup[2]}u - (p_lidx / p_sgs) * p_sgs);`);
    if (this.flagMode) main.push("  var p_on = true;");
    for (const [n, t] of this.vars) main.push(`  var v_${ident(n)}: ${t};`);
    main.push(...body, "}");
    return { code: [...head, "", ...main, ""].join("\n"), entry: "main", bindings, errorBinding };
  }
}

interface Ctx {
  /** Inside a barrier-free loop of a flag-mode kernel: stopping also breaks out. */
  loop: boolean;
}

/** What WGSL lacks (kernels/decomp): IEEE compares, accurate float functions (exp2 stays the driver's). */
const WGSL_NEEDS: Needs = {
  nanCompare: true, math: ["exp", "log", "log2", "sin", "cos", "tanh"], narrow: { bits8: true, bits16: true },
};

/** WGSL source of a kernel, with the binding layout the device must build. Throws KernelError. */
export function renderWgsl(kernel: Kernel, opts: WgslOptions): WgslShader {
  const needs = { ...WGSL_NEEDS, dot4: !opts.dot4 }; // the int8x4 dot where the language has no dot4I8Packed
  return new Wgsl(decompose(opts.unroll === false ? kernel : unrollLoops(kernel), needs), opts).render();
}
