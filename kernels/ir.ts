// The kernel IR: one description of a compute kernel that every renderer (js, spirv, wgsl, ptx, amdgpu)
// lowers. Plain data (expression trees inside a statement tree) built through `KernelBuilder`.
//
// Semantics every renderer must keep (the rest is the renderer's freedom):
// - A kernel is specialized on its shapes: sizes are constants in the code. Anything that changes per step
//   (a position, a slot map) is loaded from a bound buffer, never baked.
// - Compute types are f32, f16, i32, u32, bool. Loads convert the stored element type to its compute type
//   (f16 -> f32 unless the load asks for f16, bf16 -> f32, i8/i16 -> i32 sign-extended, u8/u16 -> u32);
//   stores convert back (float -> f16/bf16 round-to-nearest-even, int -> narrower int keeps the low bits).
// - Buffer indices are element indices in the unit of the load's view type (the buffer's element type unless
//   the load names another view, which reinterprets the same bytes; the index times the view size must be
//   aligned to the view size). Vector loads/stores of n elements move n*size <= 16 bytes and need the index
//   aligned to n.
// - f32 arithmetic is IEEE single precision, add/sub/mul rounded (renderers must not contract a*b+c into an
//   fma unless the kernel says `fma`); div and sqrt may be off by 2 ulp; exp, log, sin, cos, tanh, rsqrt
//   may be off by a few ulp (sin/cos over |x| <= 1e5, after range reduction). graph/tolerance accounts for it.
// - `check(cond, code)`: when cond is false the dispatch faults with `code` (a trap on ptx/amdgpu). spirv and
//   wgsl have no trap: their renderers append one extra storage binding (u32 words, after the kernel's own
//   buffers) and a failing check does atomicOr(word[0], code) and returns; the device binds each dispatch its
//   own error word, so synchronize can name the kernel, and discards that dispatch's results.
// - Subgroup ops need the target's `subgroups` capability; the kernel library picks a shared-memory
//   reduction instead where it is absent. Barriers must be reached by every invocation of the workgroup.
//
// The IR's data (types, expression and statement trees, the Kernel record, walkers) is in kernels/ir_data.ts, its
// values (Val and the checked expression constructors) in kernels/ir_val.ts; this module re-exports both, so the
// rest of the code imports the IR from here.
import type { AtomicOp, Buffer, Builtin, CoopMat, CType, EType, Expr, Kernel, ReduceOp, Shared, Stmt, Var } from "./ir_data.ts";
import { computeOf, ESIZE, KernelError } from "./ir_data.ts";
import { type Like, lift, Val } from "./ir_val.ts";

export * from "./ir_data.ts";
export { bin, c, f32, fma, i32, type Like, u32, un, Val } from "./ir_val.ts";

// ---- the builder -------------------------------------------------------------------------------------

export interface KernelOptions {
  workgroup: [number, number, number] | number;
  grid: [number, number, number] | number;
}

/** Builds a Kernel. Statement-producing methods append to the current block. */
export class KernelBuilder {
  private readonly buffers: Buffer[] = [];
  private readonly sharedMem: Shared[] = [];
  private readonly coopMats: CoopMat[] = [];
  private blocks: Stmt[][] = [[]];
  private nvar = 0;
  private readonly uses = { subgroups: false, f16: false, checks: false, mma: false, staging: false, wgmma: false, coop: false };
  readonly workgroup: [number, number, number];
  readonly grid: [number, number, number];

  constructor(readonly name: string, opts: KernelOptions) {
    const dim = (x: [number, number, number] | number): [number, number, number] =>
      typeof x === "number" ? [x, 1, 1] : x;
    this.workgroup = dim(opts.workgroup);
    this.grid = dim(opts.grid);
    for (const n of [...this.workgroup, ...this.grid]) {
      if (!Number.isInteger(n) || n < 1) throw new KernelError(`${name}: bad workgroup/grid size ${n}`);
    }
  }

  buffer(name: string, elem: EType, access: "r" | "w" | "rw", reads?: Buffer["reads"]): Buffer {
    if (this.buffers.some((b) => b.name === name)) throw new KernelError(`${this.name}: buffer ${name} declared twice`);
    if (reads && access !== "r") throw new KernelError(`${this.name}: buffer ${name}: a read hint on a binding that is written`);
    const b: Buffer = { name, elem, access, binding: this.buffers.length, ...(reads ? { reads } : {}) };
    this.buffers.push(b);
    return b;
  }
  shared(name: string, t: CType, count: number): Shared {
    const s = { name, t, count };
    this.sharedMem.push(s);
    return s;
  }

  builtin(b: Builtin): Val {
    if (b === "lane" || b === "sgsize" || b === "sgid") this.uses.subgroups = true;
    return new Val({ k: "builtin", t: "u32", b });
  }
  get gid(): { x: Val; y: Val; z: Val } {
    return { x: this.builtin("gid.x"), y: this.builtin("gid.y"), z: this.builtin("gid.z") };
  }
  get lid(): { x: Val; y: Val; z: Val } {
    return { x: this.builtin("lid.x"), y: this.builtin("lid.y"), z: this.builtin("lid.z") };
  }
  get wgid(): { x: Val; y: Val; z: Val } {
    return { x: this.builtin("wgid.x"), y: this.builtin("wgid.y"), z: this.builtin("wgid.z") };
  }
  get nwg(): { x: Val; y: Val; z: Val } {
    return { x: this.builtin("nwg.x"), y: this.builtin("nwg.y"), z: this.builtin("nwg.z") };
  }

  private emit(s: Stmt): void {
    this.blocks[this.blocks.length - 1].push(s);
  }
  private block(f: () => void): Stmt[] {
    this.blocks.push([]);
    f();
    return this.blocks.pop()!;
  }

  /** A mutable local initialised to `init`; returns a Val that reads it (assign with `set`). */
  let(init: Like, t?: CType, hint = "v"): Val {
    const x = init instanceof Val ? init : lift(init, t ?? (typeof init === "number" && !Number.isInteger(init) ? "f32" : "i32"));
    // a hint ending in a digit takes a separator: "q16" + 88 must not name what "q" + 1688 names
    const v: Var = { name: /\d$/.test(hint) ? `${hint}_${this.nvar++}` : `${hint}${this.nvar++}`, t: t ?? x.t };
    if (x.t !== v.t) throw new KernelError(`${this.name}: let of ${v.t} from ${x.t}`);
    this.emit({ k: "let", v, e: x.e });
    return new Val({ k: "var", t: v.t, v });
  }
  /** Runs `f`, returning the locals its statements define at this level (lets, vector loads' elements), in order. */
  defines(f: () => void): Val[] {
    const blk = this.blocks[this.blocks.length - 1], from = blk.length;
    f();
    return blk.slice(from).flatMap((s) => (s.k === "let" ? [s.v] : s.k === "loadv" ? s.dst : [])).map((v) => new Val({ k: "var", t: v.t, v }));
  }
  set(target: Val, value: Like): void {
    if (target.e.k !== "var") throw new KernelError(`${this.name}: set needs a variable`);
    const x = lift(value, target.t);
    if (x.t !== target.t) throw new KernelError(`${this.name}: assign ${x.t} to ${target.t} ${target.e.v.name}`);
    this.emit({ k: "assign", v: target.e.v, e: x.e });
  }

  load(buf: Buffer, index: Like, view: EType = buf.elem, as?: CType): Val {
    const t = as ?? computeOf(view);
    if (as === "f16") {
      if (view !== "f16") throw new KernelError(`${this.name}: f16 load needs an f16 view`);
      this.uses.f16 = true;
    }
    return new Val({ k: "load", t, buf, view, index: lift(index, "u32").e });
  }
  /** Loads n consecutive elements (n * size <= 16 bytes, index aligned to n) into fresh locals. */
  loadv(buf: Buffer, index: Like, n: number, view: EType = buf.elem): Val[] {
    this.vecCheck(view, n);
    const t = computeOf(view);
    const dst = Array.from({ length: n }, () => ({ name: `v${this.nvar++}`, t }));
    this.emit({ k: "loadv", dst, buf, view, index: lift(index, "u32").e });
    return dst.map((v) => new Val({ k: "var", t, v }));
  }
  store(buf: Buffer, index: Like, value: Like, view: EType = buf.elem): void {
    if (buf.access === "r") throw new KernelError(`${this.name}: store to read-only buffer ${buf.name}`);
    const v = lift(value, computeOf(view));
    this.emit({ k: "store", buf, view, index: lift(index, "u32").e, e: v.e });
  }
  storev(buf: Buffer, index: Like, values: Like[], view: EType = buf.elem): void {
    if (buf.access === "r") throw new KernelError(`${this.name}: store to read-only buffer ${buf.name}`);
    this.vecCheck(view, values.length);
    const es = values.map((x) => lift(x, computeOf(view)).e);
    this.emit({ k: "storev", buf, view, index: lift(index, "u32").e, es });
  }
  private vecCheck(view: EType, n: number): void {
    if (![1, 2, 4, 8, 16].includes(n) || n * ESIZE[view] > 16) {
      throw new KernelError(`${this.name}: vector of ${n} x ${view} (max 16 bytes, power of two)`);
    }
  }
  /** u32 word `index` of buf (in words, whatever its element type) = word op value, atomically. */
  atomic(buf: Buffer, index: Like, op: AtomicOp, value: Like): void {
    if (buf.access === "r") throw new KernelError(`${this.name}: atomic ${op} on read-only buffer ${buf.name}`);
    const v = lift(value, "u32");
    if (v.t !== "u32") throw new KernelError(`${this.name}: atomic ${op} of ${v.t} (u32 words only)`);
    this.emit({ k: "atomic", op, buf, index: lift(index, "u32").e, e: v.e });
  }
  /** atomic() that returns the word's value from before the operation (atomicAdd's old value). */
  atomicFetch(buf: Buffer, index: Like, op: AtomicOp, value: Like): Val {
    if (buf.access === "r") throw new KernelError(`${this.name}: atomic ${op} on read-only buffer ${buf.name}`);
    const v = lift(value, "u32");
    if (v.t !== "u32") throw new KernelError(`${this.name}: atomic ${op} of ${v.t} (u32 words only)`);
    const dst: Var = { name: `v${this.nvar++}`, t: "u32" };
    this.emit({ k: "atomic", op, buf, index: lift(index, "u32").e, e: v.e, dst });
    return new Val({ k: "var", t: "u32", v: dst });
  }
  sload(mem: Shared, index: Like): Val {
    return new Val({ k: "sload", t: mem.t, mem, index: lift(index, "u32").e });
  }
  sstore(mem: Shared, index: Like, value: Like): void {
    this.emit({ k: "sstore", mem, index: lift(index, "u32").e, e: lift(value, mem.t).e });
  }

  /** for (i = start; i < end; i += step) body(i); `unroll` is a hint (1 = none). */
  for(start: Like, end: Like, step: number, body: (i: Val) => void, opts: { unroll?: number; t?: "u32" | "i32" } = {}): void {
    const t = opts.t ?? (start instanceof Val ? (start.t as "u32" | "i32") : end instanceof Val ? (end.t as "u32" | "i32") : "u32");
    const v: Var = { name: `i${this.nvar++}`, t };
    const s = lift(start, t), e = lift(end, t);
    if (s.t !== t || e.t !== t) throw new KernelError(`${this.name}: loop bounds ${s.t}/${e.t}, index ${t}`);
    if (!Number.isInteger(step) || step < 1) throw new KernelError(`${this.name}: loop step ${step}`);
    const iv = new Val({ k: "var", t, v });
    const b = this.block(() => body(iv));
    this.emit({ k: "for", v, start: s.e, end: e.e, step, unroll: opts.unroll ?? 1, body: b });
  }
  if(cond: Val, then: () => void, otherwise?: () => void): void {
    if (cond.t !== "bool") throw new KernelError(`${this.name}: if condition is ${cond.t}`);
    const a = this.block(then);
    const b = otherwise ? this.block(otherwise) : [];
    this.emit({ k: "if", c: cond.e, then: a, else: b });
  }
  /** A workgroup barrier; "device": one whose buffer-memory ordering reaches every workgroup (see Stmt). */
  barrier(scope?: "device"): void {
    this.emit(scope === "device" ? { k: "barrier", device: true } : { k: "barrier" });
  }
  /** Faults the dispatch with `code` (a positive integer below 2^16) when cond is false. */
  check(cond: Val, code: number): void {
    if (cond.t !== "bool") throw new KernelError(`${this.name}: check condition is ${cond.t}`);
    if (!Number.isInteger(code) || code < 1 || code > 0xffff) throw new KernelError(`${this.name}: check code ${code}`);
    this.uses.checks = true;
    this.emit({ k: "check", c: cond.e, code });
  }
  return(): void {
    this.emit({ k: "return" });
  }

  subgroupReduce(op: ReduceOp, a: Val): Val {
    this.uses.subgroups = true;
    return new Val({ k: "subgroup", t: a.t, op, a: a.e });
  }
  shuffle(mode: "xor" | "idx" | "down", a: Val, lane: Like): Val {
    this.uses.subgroups = true;
    return new Val({ k: "shuffle", t: a.t, mode, a: a.e, lane: lift(lane, "u32").e });
  }

  /**
   * Two f32 rounded to `ab` and packed in a u32 (lo in the low half): an MMA or cooperative-matrix operand word
   * (PTX converts both at once; SPIR-V rounds in integer arithmetic, decomp/mod.ts pack2Bits).
   */
  pack2(ab: "bf16" | "f16", lo: Val, hi: Val): Val {
    if (lo.t !== "f32" || hi.t !== "f32") throw new KernelError(`${this.name}: pack2 takes two f32`);
    return new Val({ k: "pack2", t: "u32", ab, a: lo.e, b: hi.e });
  }
  /** A warp MMA tile (see MmaStmt): returns the 4 accumulator values of this lane as fresh f32 locals. */
  mma(ab: "bf16" | "f16", a: Val[], bw: Val[], cc: Val[]): Val[] {
    const bad = (xs: Val[], n: number, t: CType) => xs.length !== n || xs.some((x) => x.t !== t);
    if (bad(a, 4, "u32") || bad(bw, 2, "u32") || bad(cc, 4, "f32")) {
      throw new KernelError(`${this.name}: mma takes 4 u32 a words, 2 u32 b words and 4 f32 c values`);
    }
    this.uses.mma = true;
    this.uses.subgroups = true;
    const d = Array.from({ length: 4 }, () => ({ name: `mm${this.nvar++}`, t: "f32" as CType }));
    this.emit({ k: "mma", ab, d, a: a.map((x) => x.e), b: bw.map((x) => x.e), c: cc.map((x) => x.e) });
    return d.map((v) => new Val({ k: "var", t: "f32", v }));
  }

  /** Copies 16 bytes (u32 words index..index+3 of buf) to shared words sindex.. asynchronously (CpAsyncStmt). */
  cpAsync(mem: Shared, sindex: Like, buf: Buffer, index: Like): void {
    if (mem.t !== "u32") throw new KernelError(`${this.name}: cpasync into ${mem.t} shared ${mem.name} (u32 words only)`);
    this.uses.staging = true;
    this.emit({ k: "cpasync", mem, sindex: lift(sindex, "u32").e, buf, index: lift(index, "u32").e });
  }
  /** Closes the open group of cpasync copies (the whole workgroup together). */
  cpCommit(): void {
    this.uses.staging = true;
    this.emit({ k: "cpcommit" });
  }
  /** Waits until at most `pending` closed copy groups are still in flight (the whole workgroup together). */
  cpWait(pending: number): void {
    if (!Number.isInteger(pending) || pending < 0 || pending > 7) throw new KernelError(`${this.name}: cpwait ${pending} (0..7)`);
    this.uses.staging = true;
    this.emit({ k: "cpwait", pending });
  }
  /** A warp's ldmatrix of n 8x8 16-bit matrices from u32 shared words (LdMatrixStmt): n u32 words per lane. */
  ldmatrix(mem: Shared, index: Like, n: 1 | 2 | 4, trans = false): Val[] {
    if (mem.t !== "u32") throw new KernelError(`${this.name}: ldmatrix from ${mem.t} shared ${mem.name} (u32 words only)`);
    if (![1, 2, 4].includes(n)) throw new KernelError(`${this.name}: ldmatrix of ${n} matrices (1, 2 or 4)`);
    this.uses.staging = true;
    this.uses.subgroups = true;
    const dst = Array.from({ length: n }, () => ({ name: `lm${this.nvar++}`, t: "u32" as CType }));
    this.emit({ k: "ldmatrix", dst, mem, index: lift(index, "u32").e, trans });
    return dst.map((v) => new Val({ k: "var", t: "u32", v }));
  }

  /**
   * A warpgroup MMA (WgmmaStmt) adding A[64 x 16] B[16 x n] into `acc` (n / 2 f32 variables of this lane, made by
   * `let`), A and B at word indices `a` and `b` of the u32 shared array `mem`.
   */
  wgmma(ab: "bf16" | "f16", n: number, acc: Val[], mem: Shared, a: Like, bIndex: Like): void {
    if (mem.t !== "u32") throw new KernelError(`${this.name}: wgmma from ${mem.t} shared ${mem.name} (u32 words only)`);
    if (!(Number.isInteger(n) && n >= 8 && n <= 256 && n % 8 === 0)) throw new KernelError(`${this.name}: wgmma n ${n} (8..256, a multiple of 8)`);
    if (acc.length !== n / 2 || acc.some((v) => v.e.k !== "var" || v.t !== "f32")) {
      throw new KernelError(`${this.name}: wgmma n=${n} takes ${n / 2} f32 accumulator variables`);
    }
    const total = this.workgroup[0] * this.workgroup[1] * this.workgroup[2];
    if (total % 128 !== 0) throw new KernelError(`${this.name}: wgmma needs whole warpgroups (workgroup of ${total})`);
    this.uses.wgmma = this.uses.mma = this.uses.staging = this.uses.subgroups = true;
    const vars = acc.map((v) => (v.e as Extract<Expr, { k: "var" }>).v);
    this.emit({ k: "wgmma", ab, n, acc: vars, mem, a: lift(a, "u32").e, b: lift(bIndex, "u32").e });
  }
  /** Closes this warpgroup's wgmma group and waits until at most `pending` groups are in flight. */
  wgWait(pending: number): void {
    if (!Number.isInteger(pending) || pending < 0 || pending > 7) throw new KernelError(`${this.name}: wgwait ${pending} (0..7)`);
    this.uses.wgmma = true;
    this.emit({ k: "wgwait", pending });
  }
  /** Orders this invocation's shared-memory writes before wgmma reads after the next barrier (asyncfence). */
  asyncFence(): void {
    this.uses.wgmma = true;
    this.emit({ k: "asyncfence" });
  }

  /** A cooperative matrix of each subgroup (CoopMat): an operand of `ab` values, or an f32 accumulator zeroed here. */
  coopMat(use: "a" | "b", ab: "bf16" | "f16"): CoopMat;
  coopMat(use: "acc"): CoopMat;
  coopMat(use: CoopMat["use"], ab?: "bf16" | "f16"): CoopMat {
    const m: CoopMat = use === "acc" ? { name: `cacc${this.nvar++}`, use } : { name: `c${use}${this.nvar++}`, use, ab };
    this.coopMats.push(m);
    if (use === "acc") this.coopZero(m);
    else this.uses.coop = this.uses.subgroups = true;
    return m;
  }
  private coopUse(m: CoopMat, use: CoopMat["use"]): void {
    if (!this.coopMats.includes(m)) throw new KernelError(`${this.name}: cooperative matrix ${m.name} is not this kernel's`);
    if (m.use !== use) throw new KernelError(`${this.name}: cooperative matrix ${m.name} is an ${m.use}, used as ${use}`);
    this.uses.coop = this.uses.subgroups = true;
  }
  /** acc = 0 (CoopStmt cmzero). */
  coopZero(acc: CoopMat): void {
    this.coopUse(acc, "acc");
    this.emit({ k: "cmzero", acc });
  }
  /** An operand from u32 words of shared memory or of a readable buffer (CoopStmt cmload). */
  coopLoad(dst: CoopMat, mem: Shared | Buffer, index: Like, stride: number): void {
    if (dst.use === "acc") throw new KernelError(`${this.name}: cmload of accumulator ${dst.name}`);
    this.coopUse(dst, dst.use);
    if ("binding" in mem) {
      if (mem.elem !== "u32" || mem.access === "w") throw new KernelError(`${this.name}: cooperative matrices from ${mem.elem} buffer ${mem.name} (${mem.access}; readable u32 words only)`);
    } else if (mem.t !== "u32") throw new KernelError(`${this.name}: cooperative matrices from ${mem.t} shared ${mem.name} (u32 words only)`);
    if (!(Number.isInteger(stride) && stride >= 8 && stride % 4 === 0)) throw new KernelError(`${this.name}: cooperative matrix stride ${stride} (a multiple of 4, >= 8)`);
    this.emit({ k: "cmload", dst, mem, index: lift(index, "u32").e, stride });
  }
  /** acc += A B (CoopStmt cmmad). */
  coopMulAdd(acc: CoopMat, a: CoopMat, bm: CoopMat): void {
    this.coopUse(acc, "acc");
    this.coopUse(a, "a");
    this.coopUse(bm, "b");
    if (a.ab !== bm.ab) throw new KernelError(`${this.name}: cmmad of ${a.ab} and ${bm.ab} operands`);
    this.emit({ k: "cmmad", acc, a, b: bm });
  }
  /** f32 shared mem[index + r·stride + c] = acc[r][c] (CoopStmt cmstore). */
  coopStore(acc: CoopMat, mem: Shared, index: Like, stride: number): void {
    this.coopUse(acc, "acc");
    if (mem.t !== "f32") throw new KernelError(`${this.name}: cooperative matrix store into ${mem.t} shared ${mem.name} (f32 only)`);
    if (!(Number.isInteger(stride) && stride >= 16 && stride % 4 === 0)) throw new KernelError(`${this.name}: cooperative matrix store stride ${stride}`);
    this.emit({ k: "cmstore", acc, mem, index: lift(index, "u32").e, stride });
  }

  build(): Kernel {
    if (this.blocks.length !== 1) throw new KernelError(`${this.name}: build inside a block`);
    return {
      name: this.name,
      workgroup: this.workgroup,
      grid: this.grid,
      buffers: this.buffers,
      shared: this.sharedMem,
      ...(this.coopMats.length ? { coop: this.coopMats } : {}),
      body: this.blocks[0],
      uses: { ...this.uses },
    };
  }
}
