// The kernel IR's data (kernels/ir.ts states what it means and builds it): value and element types, expression
// and statement trees, the statements of staging, MMA and cooperative matrices, the Kernel record, and walkers
// over the trees. Plain data only: renderers, decompositions and passes read these.
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
  /**
   * How a read-only binding's bytes are read, a cache hint for targets that take one (PTX; SPIR-V marks "once"
   * Nontemporal): "once", each byte by one load and never again in the kernel, so it need not stay in L1 (a decode
   * gemv's 16-bit or f32 weights); "near", again only by neighbouring loads soon after, so it leaves L1 first
   * (block weights: a block's header and its unaligned pieces); "many", by many loads of the kernel's workgroups,
   * so it stays in L1 longest (a gemv's x). Never changes what a load returns.
   */
  reads?: "once" | "near" | "many";
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
 * - cmload: an operand from the u32 shared array or readable u32 buffer `mem`: row r of A (16 values, the even k in a word's low half)
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
  | { k: "cmload"; dst: CoopMat; mem: Shared | Buffer; index: Expr; stride: number }
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
