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
import type { ScalarDType } from "../graph/dtype.ts";

/** Types of values inside a kernel. */
export type CType = "f32" | "f16" | "i32" | "u32" | "bool";
/** Types of buffer elements: graph scalars plus 16-bit integer views (for f16 bits, block scales). */
export type EType = Exclude<ScalarDType, "bool"> | "u16" | "i16";

export const ESIZE: Record<EType, number> = {
  f32: 4, f16: 2, bf16: 2, i32: 4, u32: 4, i8: 1, u8: 1, u16: 2, i16: 2,
};

/** The compute type a load of an element type produces by default. */
export function computeOf(e: EType): CType {
  switch (e) {
    case "f32": case "f16": case "bf16": return "f32";
    case "i32": case "i8": case "i16": return "i32";
    case "u32": case "u8": case "u16": return "u32";
  }
}

export type Builtin =
  | "gid.x" | "gid.y" | "gid.z"     // global invocation id
  | "lid.x" | "lid.y" | "lid.z"     // local invocation id in the workgroup
  | "wgid.x" | "wgid.y" | "wgid.z"  // workgroup id
  | "nwg.x" | "nwg.y" | "nwg.z"     // number of workgroups
  | "lane" | "sgsize" | "sgid";     // subgroup invocation id, subgroup size, subgroup id in the workgroup

export type UnOp =
  | "neg" | "abs" | "exp" | "exp2" | "log" | "log2" | "sqrt" | "rsqrt" | "recip" | "sin" | "cos" | "tanh"
  | "floor" | "ceil" | "not" | "isfinite" | "isnan"
  | "f16bits" | "bf16bits"; // u32 holding 16 bits of an f16 / bf16 -> f32 value (exact)
export type BinOp =
  | "add" | "sub" | "mul" | "div" | "mod" | "max" | "min" | "pow"
  | "and" | "or" | "xor" | "shl" | "shr"
  | "lt" | "le" | "gt" | "ge" | "eq" | "ne"
  // two u32 words as 4 signed bytes each -> i32 Σ a.byte[i]·b.byte[i] (exact: |Σ| < 2^16); PTX dp4a, SPIR-V
  // OpSDot, WGSL dot4I8Packed; decomp/arith.ts expands it for the rest
  | "dot4";
export type ReduceOp = "add" | "max" | "min";
export type AtomicOp = "and" | "or" | "add";

export interface Buffer {
  name: string;
  elem: EType;
  access: "r" | "w" | "rw";
  /** Index of the binding, in declaration order. */
  binding: number;
}
export interface Shared {
  name: string;
  t: CType;
  count: number;
}
export interface Var {
  name: string;
  t: CType;
}

export type Expr =
  | { k: "const"; t: CType; v: number }
  | { k: "var"; t: CType; v: Var }
  | { k: "builtin"; t: "u32"; b: Builtin }
  | { k: "un"; t: CType; op: UnOp; a: Expr }
  | { k: "bin"; t: CType; op: BinOp; a: Expr; b: Expr }
  | { k: "fma"; t: CType; a: Expr; b: Expr; c: Expr }
  | { k: "select"; t: CType; c: Expr; a: Expr; b: Expr } // c ? a : b
  | { k: "cast"; t: CType; a: Expr }                     // numeric conversion (float->int truncates)
  | { k: "bitcast"; t: CType; a: Expr }                  // same 32 bits, other type
  | { k: "load"; t: CType; buf: Buffer; view: EType; index: Expr }
  | { k: "sload"; t: CType; mem: Shared; index: Expr }
  | { k: "subgroup"; t: CType; op: ReduceOp; a: Expr }   // reduce over the subgroup; every lane gets it
  | { k: "shuffle"; t: CType; mode: "xor" | "idx" | "down"; a: Expr; lane: Expr }
  // two f32 rounded (to nearest even) to bf16/f16 in one u32, a in the low half: MMA / cooperative-matrix operands
  | { k: "pack2"; t: "u32"; ab: "bf16" | "f16"; a: Expr; b: Expr };

export type Stmt =
  | { k: "let"; v: Var; e: Expr }                        // declare a mutable local with an initial value
  | { k: "assign"; v: Var; e: Expr }
  | { k: "store"; buf: Buffer; view: EType; index: Expr; e: Expr }
  | { k: "loadv"; dst: Var[]; buf: Buffer; view: EType; index: Expr } // n = dst.length consecutive elements
  | { k: "storev"; buf: Buffer; view: EType; index: Expr; es: Expr[] }
  | { k: "sstore"; mem: Shared; index: Expr; e: Expr }
  // word[index] = word[index] op e, atomically (u32 words of the buffer, whatever its element type): what a
  // store narrower than a word becomes where the target has no narrow storage (kernels/decomp/narrow.ts).
  // Relaxed, device scope; `dst` (a fresh u32 variable) receives the word's value before the operation.
  | { k: "atomic"; op: AtomicOp; buf: Buffer; index: Expr; e: Expr; dst?: Var }
  | { k: "for"; v: Var; start: Expr; end: Expr; step: number; unroll: number; body: Stmt[] } // v < end
  | { k: "if"; c: Expr; then: Stmt[]; else: Stmt[] }
  // workgroup execution + shared/buffer memory barrier; `device`: its buffer-memory ordering reaches device
  // scope (acquire-release with every workgroup: what orders a workgroup's writes before an atomic another
  // workgroup reads, and that workgroup's reads after it). Like any barrier: the whole workgroup, uniform flow.
  | { k: "barrier"; device?: boolean }
  | { k: "check"; c: Expr; code: number }                // fault with `code` when c is false
  | { k: "return" }
  | MmaStmt
  | CpAsyncStmt
  | { k: "cpcommit" }                                   // closes this invocation's open group of cpasync copies
  | { k: "cpwait"; pending: number }                    // waits until at most `pending` closed groups are in flight
  | LdMatrixStmt
  | WgmmaStmt
  | CoopStmt
  // closes this warpgroup's open group of wgmma statements and waits until at most `pending` groups are in
  // flight (PTX wgmma.commit_group + wait_group); the whole workgroup together, like a barrier
  | { k: "wgwait"; pending: number }
  // orders this invocation's earlier shared-memory writes (stores, and cpasync copies a cpwait has retired)
  // before wgmma reads that follow a barrier after it (PTX fence.proxy.async: wgmma reads through another proxy)
  | { k: "asyncfence" };

/**
 * A warp-level matrix multiply-accumulate, D[16x8] = A[16x16] B[16x8] + C (PTX mma.sync m16n8k16, row.col,
 * f32 accumulate). Every lane of a full subgroup of 32 must reach it together (warp-uniform control flow);
 * lane l holds, with g = l >> 2 and t = l & 3:
 * - a: 4 u32 words of two `ab` values each (low half = the even k; `pack2` makes them from f32):
 *   a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
 * - b: 2 u32 words likewise: b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g];
 * - c and d: 4 f32: [0..1] = C[g][2t, 2t+1], [2..3] = C[g+8][2t, 2t+1].
 * The 16 products are exact; the order and internal precision of their sum with C is the hardware's (fixed for
 * a given device, so a row's result never depends on the other rows). Needs the target's `mma` capability.
 */
export interface MmaStmt {
  k: "mma";
  ab: "bf16" | "f16";
  d: Var[];
  a: Expr[];
  b: Expr[];
  c: Expr[];
}

/**
 * Shared-memory staging, PTX only (caps.staging: cp.async on sm_80+): copies 16 bytes, u32 words
 * [index, index + 4) of `buf`, to words [sindex, sindex + 4) of the u32 shared array `mem`, asynchronously: the
 * words are there only after a `cpwait` that leaves fewer groups in flight than were closed (`cpcommit`) after
 * this copy, and other invocations see them only after a barrier that follows that wait. Both indices must be
 * multiples of 4. `cpcommit` and `cpwait` must be reached by the whole workgroup together (uniform flow, like
 * a barrier; the JS device keeps one queue per workgroup), a copy may sit under any condition.
 */
export interface CpAsyncStmt {
  k: "cpasync";
  mem: Shared;
  sindex: Expr;
  buf: Buffer;
  index: Expr;
}

/**
 * A warp-collective load of `dst.length` (1, 2 or 4) 8x8 matrices of 16-bit values from the u32 shared array
 * `mem` (PTX ldmatrix.m8n8.b16, caps.staging): lanes 8i .. 8i+7 give, in `index`, the word index (a multiple of
 * 4) of rows 0..7 of matrix i, each row 8 values in 4 words. Lane l receives in dst[i] the word (values 2c,
 * 2c+1) of row r = l >> 2 at c = l & 3; with `trans`, the values (row 2c, column r) and (row 2c + 1, column r)
 * instead, low half first. Every lane of a full 32-lane subgroup must reach it together.
 */
export interface LdMatrixStmt {
  k: "ldmatrix";
  dst: Var[];
  mem: Shared;
  index: Expr;
  trans: boolean;
}

/**
 * A warpgroup matrix multiply-accumulate, PTX on sm_90 only (caps.wgmma: wgmma.mma_async m64nNk16, f32
 * accumulate): the 4 warps of warpgroup g (invocations 128g .. 128g + 127) add A[64 x 16] B[16 x n] to D, with A
 * and B read from the u32 shared array `mem`. `acc` holds D: n / 2 f32 variables per lane, read and updated in
 * place; with w the warp inside the warpgroup and l its lane, acc[4j + 2h + c] = D[16w + (l >> 2) + 8h][8j +
 * 2(l & 3) + c] (the mma.sync m16n8 layout, n / 8 times along N).
 *
 * Operands are K-major with the 128-byte swizzle: element kk (0..15) of operand row r (A: 0..63, B: 0..n-1; B's
 * row is a column of the product, so a row-major W[n, k] is B as it stands) is 16-bit half (kk & 1) of the
 * shared word at byte P(L) / 4, where L = 4 * index + 128 r + 2 kk and P(L) = L ^ (((L >> 7) & 7) << 4) (address
 * bits 4..6 XOR bits 7..9, counted from the array's start, which the renderer aligns to 1024 bytes). So an operand
 * is 128-byte rows, 16-byte chunk c of row r stored at chunk c ^ (r & 7); `index` is the word of row 0 of a
 * 1024-byte-aligned group (a multiple of 256) plus 8 words per k16 step along the row.
 *
 * Asynchronous: the shared words must not change, and `acc` must not be read or written by anything but other
 * wgmma statements of the same n, until a `wgwait` has retired the statement's group. Shared words written
 * before it need a cpwait (for copies), an `asyncfence` and a barrier in between. Every invocation of the
 * warpgroup must reach it together (uniform flow). The 16 products are exact; the order and internal precision
 * of their sum with D are the hardware's.
 */
export interface WgmmaStmt {
  k: "wgmma";
  ab: "bf16" | "f16";
  n: number;
  acc: Var[];
  mem: Shared;
  a: Expr;
  b: Expr;
}

/**
 * A subgroup's 16 x 16 cooperative matrix (CoopStmt): an operand ("a", "b": `ab` values) or an f32 accumulator
 * ("acc"). Opaque, declared on the kernel (Kernel.coop), touched only by coop statements; each subgroup has its own.
 */
export interface CoopMat {
  name: string;
  use: "a" | "b" | "acc";
  ab?: "bf16" | "f16";
}

/**
 * Cooperative matrices (caps.coop; SPIR-V SPV_KHR_cooperative_matrix, 16 x 16 x 16 with f32 accumulation):
 * - cmload: an operand from the u32 shared array `mem`: row r of A (16 values, the even k in a word's low half)
 *   at words index + r·stride .. + 7; column c of B (its 16 k values likewise) the same way, so a row-major
 *   W[n, k] is B as it stands (wgmma's B); strides are multiples of 4 (16-byte rows);
 * - cmzero: acc = 0;  cmmad: acc += A B;
 * - cmstore: the f32 shared array `mem` gets acc[r][c] at index + r·stride + c.
 * Every invocation of a subgroup must reach them together (uniform flow) with the same operands, and the
 * workgroup must be whole subgroups. The products are exact; the order and internal precision of the sums are
 * the implementation's (fixed for a device, so a row's result never depends on the other rows).
 */
export type CoopStmt =
  | { k: "cmzero"; acc: CoopMat }
  | { k: "cmload"; dst: CoopMat; mem: Shared; index: Expr; stride: number }
  | { k: "cmmad"; acc: CoopMat; a: CoopMat; b: CoopMat }
  | { k: "cmstore"; acc: CoopMat; mem: Shared; index: Expr; stride: number };

export interface Kernel {
  name: string;
  /** Invocations per workgroup. */
  workgroup: [number, number, number];
  /** Number of workgroups a dispatch launches (kernels are shape-specialized, so the grid is known). */
  grid: [number, number, number];
  buffers: Buffer[];
  shared: Shared[];
  /** Cooperative matrices (CoopStmt), where the body has any. */
  coop?: CoopMat[];
  body: Stmt[];
  /** Capabilities the body relies on (renderers refuse what the target lacks). */
  uses: { subgroups: boolean; f16: boolean; checks: boolean; mma?: boolean; staging?: boolean; wgmma?: boolean; coop?: boolean };
}

export class KernelError extends Error {
  override name = "KernelError";
}

// ---- values: a thin typed wrapper over Expr so kernel code reads like arithmetic ----------------------

export type Like = Val | number | boolean;

export class Val {
  constructor(readonly e: Expr) {}
  get t(): CType {
    return this.e.t;
  }
  add(b: Like): Val { return bin("add", this, b); }
  sub(b: Like): Val { return bin("sub", this, b); }
  mul(b: Like): Val { return bin("mul", this, b); }
  div(b: Like): Val { return bin("div", this, b); }
  mod(b: Like): Val { return bin("mod", this, b); }
  max(b: Like): Val { return bin("max", this, b); }
  min(b: Like): Val { return bin("min", this, b); }
  pow(b: Like): Val { return bin("pow", this, b); }
  and(b: Like): Val { return bin("and", this, b); }
  or(b: Like): Val { return bin("or", this, b); }
  xor(b: Like): Val { return bin("xor", this, b); }
  shl(b: Like): Val { return bin("shl", this, b); }
  shr(b: Like): Val { return bin("shr", this, b); }
  lt(b: Like): Val { return bin("lt", this, b); }
  le(b: Like): Val { return bin("le", this, b); }
  gt(b: Like): Val { return bin("gt", this, b); }
  ge(b: Like): Val { return bin("ge", this, b); }
  eq(b: Like): Val { return bin("eq", this, b); }
  ne(b: Like): Val { return bin("ne", this, b); }
  /** The signed int8x4 dot product of two u32 words (i32); see BinOp "dot4". */
  dot4(b: Like): Val { return bin("dot4", this, b); }
  neg(): Val { return un("neg", this); }
  abs(): Val { return un("abs", this); }
  exp(): Val { return un("exp", this); }
  log(): Val { return un("log", this); }
  sqrt(): Val { return un("sqrt", this); }
  rsqrt(): Val { return un("rsqrt", this); }
  recip(): Val { return un("recip", this); }
  sin(): Val { return un("sin", this); }
  cos(): Val { return un("cos", this); }
  tanh(): Val { return un("tanh", this); }
  floor(): Val { return un("floor", this); }
  not(): Val { return un("not", this); }
  isfinite(): Val { return un("isfinite", this); }
  cast(t: CType): Val { return this.t === t ? this : new Val({ k: "cast", t, a: this.e }); }
  bitcast(t: CType): Val {
    if (this.t === "bool" || t === "bool" || this.t === "f16" || t === "f16") {
      throw new KernelError(`bitcast ${this.t} -> ${t}: only between 32-bit types`);
    }
    return new Val({ k: "bitcast", t, a: this.e });
  }
  select(a: Like, b: Like): Val { // this ? a : b
    if (this.t !== "bool") throw new KernelError(`select condition must be bool, got ${this.t}`);
    const [x, y] = unify(a, b);
    return new Val({ k: "select", t: x.t, c: this.e, a: x.e, b: y.e });
  }
}

export function c(v: number | boolean, t?: CType): Val {
  if (typeof v === "boolean") return new Val({ k: "const", t: "bool", v: v ? 1 : 0 });
  const ty = t ?? (Number.isInteger(v) ? "i32" : "f32");
  if ((ty === "i32" || ty === "u32") && !Number.isInteger(v)) throw new KernelError(`${v} is not an integer ${ty}`);
  if (ty === "u32" && (v < 0 || v > 0xffffffff)) throw new KernelError(`${v} out of u32 range`);
  if (ty === "i32" && (v < -0x80000000 || v > 0x7fffffff)) throw new KernelError(`${v} out of i32 range`);
  return new Val({ k: "const", t: ty, v: ty === "f32" ? Math.fround(v) : v });
}
export const f32 = (v: number): Val => c(v, "f32");
export const u32 = (v: number): Val => c(v, "u32");
export const i32 = (v: number): Val => c(v, "i32");

function lift(x: Like, t: CType): Val {
  if (x instanceof Val) return x;
  if (typeof x === "boolean") return c(x);
  return c(x, t === "bool" ? undefined : t);
}
function unify(a: Like, b: Like): [Val, Val] {
  const t = a instanceof Val ? a.t : b instanceof Val ? b.t : (Number.isInteger(a) && Number.isInteger(b) ? "i32" : "f32");
  const x = lift(a, t), y = lift(b, t);
  if (x.t !== y.t) throw new KernelError(`type mismatch: ${x.t} vs ${y.t}`);
  return [x, y];
}
const CMP = new Set<BinOp>(["lt", "le", "gt", "ge", "eq", "ne"]);
const INT_ONLY = new Set<BinOp>(["and", "or", "xor", "shl", "shr"]);
export function bin(op: BinOp, a: Like, b: Like): Val {
  const [x, y] = unify(a, b);
  if (INT_ONLY.has(op) && x.t !== "i32" && x.t !== "u32" && !(x.t === "bool" && op !== "shl" && op !== "shr")) {
    throw new KernelError(`${op} needs integers, got ${x.t}`);
  }
  if (op === "pow" && x.t !== "f32" && x.t !== "f16") throw new KernelError(`pow needs floats, got ${x.t}`);
  if (op === "dot4" && x.t !== "u32") throw new KernelError(`dot4 needs u32 words, got ${x.t}`);
  return new Val({ k: "bin", t: CMP.has(op) ? "bool" : op === "dot4" ? "i32" : x.t, op, a: x.e, b: y.e });
}
const FLOAT_UN = new Set<UnOp>(["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "recip", "sin", "cos", "tanh", "floor", "ceil", "isfinite", "isnan"]);
export function un(op: UnOp, a: Val): Val {
  if (FLOAT_UN.has(op) && a.t !== "f32" && a.t !== "f16") throw new KernelError(`${op} needs a float, got ${a.t}`);
  if ((op === "f16bits" || op === "bf16bits") && a.t !== "u32") throw new KernelError(`${op} needs u32 bits`);
  if (op === "not" && a.t !== "bool" && a.t !== "u32" && a.t !== "i32") throw new KernelError(`not needs bool or int`);
  const t: CType = op === "isfinite" || op === "isnan" ? "bool" : op === "f16bits" || op === "bf16bits" ? "f32" : a.t;
  return new Val({ k: "un", t, op, a: a.e });
}
export function fma(a: Val, b: Like, cc: Like): Val {
  const y = lift(b, a.t), z = lift(cc, a.t);
  if (a.t !== "f32" && a.t !== "f16" || y.t !== a.t || z.t !== a.t) throw new KernelError("fma needs three floats");
  return new Val({ k: "fma", t: a.t, a: a.e, b: y.e, c: z.e });
}

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

  buffer(name: string, elem: EType, access: "r" | "w" | "rw"): Buffer {
    if (this.buffers.some((b) => b.name === name)) throw new KernelError(`${this.name}: buffer ${name} declared twice`);
    const b: Buffer = { name, elem, access, binding: this.buffers.length };
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
    const v: Var = { name: `${hint}${this.nvar++}`, t: t ?? x.t };
    if (x.t !== v.t) throw new KernelError(`${this.name}: let of ${v.t} from ${x.t}`);
    this.emit({ k: "let", v, e: x.e });
    return new Val({ k: "var", t: v.t, v });
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
  /** An operand from u32 shared words (CoopStmt cmload). */
  coopLoad(dst: CoopMat, mem: Shared, index: Like, stride: number): void {
    if (dst.use === "acc") throw new KernelError(`${this.name}: cmload of accumulator ${dst.name}`);
    this.coopUse(dst, dst.use);
    if (mem.t !== "u32") throw new KernelError(`${this.name}: cooperative matrices from ${mem.t} shared ${mem.name} (u32 words only)`);
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

/** The direct sub-expressions of an expression. */
export function exprKids(e: Expr): Expr[] {
  switch (e.k) {
    case "un": case "cast": case "bitcast": case "subgroup": return [e.a];
    case "bin": return [e.a, e.b];
    case "fma": return [e.a, e.b, e.c];
    case "select": return [e.c, e.a, e.b];
    case "load": case "sload": return [e.index];
    case "shuffle": return [e.a, e.lane];
    case "pack2": return [e.a, e.b];
    default: return [];
  }
}

/** The expressions a statement evaluates itself (a loop's bounds, an if's condition; not nested bodies). */
export function stmtExprs(s: Stmt): Expr[] {
  switch (s.k) {
    case "let": case "assign": return [s.e];
    case "store": case "sstore": case "atomic": return [s.index, s.e];
    case "loadv": return [s.index];
    case "storev": return [s.index, ...s.es];
    case "for": return [s.start, s.end];
    case "if": case "check": return [s.c];
    case "mma": return [...s.a, ...s.b, ...s.c];
    case "cpasync": return [s.sindex, s.index];
    case "ldmatrix": return [s.index];
    case "wgmma": return [s.a, s.b]; // and its accumulators, read and written in place (s.acc)
    case "cmload": case "cmstore": return [s.index];
    default: return [];
  }
}

/** Visits every statement (depth first, bodies after their head). */
export function walkStmts(body: Stmt[], f: (s: Stmt) => void): void {
  for (const s of body) {
    f(s);
    if (s.k === "for") walkStmts(s.body, f);
    else if (s.k === "if") {
      walkStmts(s.then, f);
      walkStmts(s.else, f);
    }
  }
}
