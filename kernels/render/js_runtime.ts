// Helpers the generated JavaScript kernels call: 16-bit float conversions, saturating casts, bit casts and the
// typed errors a kernel raises. Kept apart from the code generator so they are plain, testable functions.
import { bf16Lut, f16Lut, f32ToBf16 as f2bf, f32ToF16 as f2h } from "../../graph/half.ts";

/** A kernel's `check` failed (code >= 1), or, in debug mode, it touched memory outside a binding (code 0). */
export class JsKernelFault extends Error {
  override name = "JsKernelFault";
  constructor(readonly kernel: string, readonly code: number, readonly detail = "") {
    super(`kernel ${kernel} faulted with code ${code}${detail ? `: ${detail}` : ""}`);
  }
}
/** Fault code the JS renderer's debug mode reports for an out-of-bounds or misaligned access. */
export const OOB_CODE = 0;

const F32S = new Float32Array(1);
const U32S = new Uint32Array(F32S.buffer);
const I32S = new Int32Array(F32S.buffer);

/** f16 bits -> f32 value, for every 16-bit pattern (loads are one table lookup). */
export const H2F: Float32Array = f16Lut();
/** bf16 bits -> f32 value (the high half of the f32 bits). */
export const BF2F: Float32Array = bf16Lut();
/** f32 -> f16 / bf16 bits, round to nearest even (graph/half.ts; kernels pass values that are already f32). */
export { f2bf, f2h };
/** Rounds to the nearest f16 value (ties to even). */
export const h16: (x: number) => number = (Math as unknown as { f16round?: (x: number) => number }).f16round ??
  ((x: number) => H2F[f2h(Math.fround(x))]);

/** float -> i32: truncates toward zero, saturates, NaN -> 0 (what PTX cvt.rzi.sat and SPIR-V robust code agree on). */
export function toI32(x: number): number {
  return x >= 2147483647 ? 2147483647 : x <= -2147483648 ? -2147483648 : x | 0;
}
/** float -> u32: truncates toward zero, saturates, NaN -> 0. */
export function toU32(x: number): number {
  return x >= 4294967295 ? 4294967295 : x > 0 ? x >>> 0 : 0;
}
export function bitsU(x: number): number {
  F32S[0] = x;
  return U32S[0];
}
export function bitsI(x: number): number {
  F32S[0] = x;
  return I32S[0];
}
export function fromBits(x: number): number {
  U32S[0] = x >>> 0;
  return F32S[0];
}

/**
 * One warp's m16n8k16 MMA (kernels/ir_data.ts MmaStmt) over lane-major operands: F holds, for each of 32 lanes from
 * `lane0`, 10 numbers (a[4] and b[2] u32 words of two halves, c[4] f32); D gets 4 f32 per lane. The 16 exact
 * products and C are summed in double and rounded once to f32 (the hardware's order is its own).
 */
export function mma16816(F: Float64Array, lane0: number, bf16: boolean, D: Float64Array): void {
  const A = new Float64Array(256), B = new Float64Array(128); // A[r * 16 + k], B[k * 8 + n]
  const half = (bits: number) => bf16 ? BF2F[bits & 0xffff] : H2F[bits & 0xffff];
  for (let l = 0; l < 32; l++) {
    const f = (lane0 + l) * 10, g = l >> 2, t = l & 3;
    for (let j = 0; j < 4; j++) {
      const w = F[f + j] >>> 0, r = g + (j & 1) * 8, k = 2 * t + (j >> 1) * 8;
      A[r * 16 + k] = half(w);
      A[r * 16 + k + 1] = half(w >>> 16);
    }
    for (let j = 0; j < 2; j++) {
      const w = F[f + 4 + j] >>> 0, k = 2 * t + j * 8;
      B[k * 8 + g] = half(w);
      B[(k + 1) * 8 + g] = half(w >>> 16);
    }
  }
  for (let l = 0; l < 32; l++) {
    const f = (lane0 + l) * 10, g = l >> 2, t = l & 3;
    for (let j = 0; j < 4; j++) {
      const r = g + (j >> 1) * 8, n = 2 * t + (j & 1);
      let s = F[f + 6 + j];
      for (let k = 0; k < 16; k++) s += A[r * 16 + k] * B[k * 8 + n];
      D[(lane0 + l) * 4 + j] = Math.fround(s);
    }
  }
}

/**
 * One warpgroup's wgmma m64nNk16 (kernels/ir_data.ts WgmmaStmt) from shared words S: A and B hold each lane's operand
 * word indices (from `lane0`; the same in all 128 lanes), D each lane's n / 2 accumulators (read and written).
 * Each accumulator's 16 exact products and its old value are summed in double and rounded once to f32. Returns an
 * error message for a bad operand, else "".
 */
export function wgmma(S: Uint32Array, A: Uint32Array, B: Uint32Array, lane0: number, n: number, bf16: boolean, D: Float64Array): string {
  const a0 = A[lane0], b0 = B[lane0];
  for (let l = lane0; l < lane0 + 128; l++) {
    if (A[l] !== a0 || B[l] !== b0) return `wgmma operands at words ${A[l]}, ${B[l]} in lane ${l - lane0}, ${a0}, ${b0} in lane 0`;
  }
  const half = (bits: number) => bf16 ? BF2F[bits] : H2F[bits];
  let bad = "";
  // row r, element kk of the operand at word `index`: byte L = 4 index + 128 r + 2 kk, swizzled bits 4..6 ^= 7..9
  const read = (index: number, rows: number, out: Float64Array) => {
    for (let r = 0; r < rows; r++) {
      for (let kk = 0; kk < 16; kk++) {
        const L = 4 * index + 128 * r + 2 * kk, P = L ^ (((L >>> 7) & 7) << 4), w = P >>> 2;
        if (w >= S.length) bad ||= `wgmma operand row ${r} at byte ${P}, past the shared array's ${4 * S.length}`;
        out[r * 16 + kk] = half((S[w] >>> (16 * ((P >>> 1) & 1))) & 0xffff);
      }
    }
  };
  const Af = new Float64Array(64 * 16), Bf = new Float64Array(n * 16);
  read(a0, 64, Af);
  read(b0, n, Bf);
  if (bad) return bad;
  const per = n / 2;
  for (let l = 0; l < 128; l++) {
    const w = l >> 5, g = (l & 31) >> 2, t = l & 3;
    for (let i = 0; i < per; i++) {
      const j = i >> 2, h = (i >> 1) & 1, c = i & 1;
      const row = 16 * w + g + 8 * h, col = 8 * j + 2 * t + c;
      let s = D[(lane0 + l) * per + i];
      for (let kk = 0; kk < 16; kk++) s += Af[row * 16 + kk] * Bf[col * 16 + kk];
      D[(lane0 + l) * per + i] = Math.fround(s);
    }
  }
  return "";
}

/**
 * Cooperative matrices (kernels/ir_data.ts CoopStmt) of the subgroup at lanes lane0 .. lane0 + sg - 1, held as 256
 * doubles at an offset of their array: an operand row-major by its 16-value rows (A's rows, B's columns), an
 * accumulator row-major. Each lane's index in I must agree. Return an error message for a bad operand, else "".
 */
function agreed(I: Uint32Array, lane0: number, sg: number, what: string): number | string {
  const i0 = I[lane0];
  for (let l = lane0; l < lane0 + sg; l++) if (I[l] !== i0) return `${what} at ${I[l]} in lane ${l - lane0}, ${i0} in lane 0`;
  return i0;
}
/** cmload: 16 rows of 16 `bf16`/f16 values at words index + r·stride of S (shared words or a buffer's). */
export function coopLoad(S: Uint32Array, I: Uint32Array, lane0: number, sg: number, stride: number, bf16: boolean, D: Float64Array, d0: number): string {
  const base = agreed(I, lane0, sg, "cooperative matrix load");
  if (typeof base === "string") return base;
  for (let r = 0; r < 16; r++) {
    for (let kk = 0; kk < 16; kk++) {
      const w = base + r * stride + (kk >> 1);
      if (w >= S.length) return `cooperative matrix row ${r} at word ${w}, past the array's ${S.length} words`;
      const bits = (S[w] >>> (16 * (kk & 1))) & 0xffff;
      D[d0 + r * 16 + kk] = bf16 ? BF2F[bits] : H2F[bits];
    }
  }
  return "";
}
/** cmmad: each element's 16 exact products and its old value summed in double, rounded once to f32. */
export function coopMad(C: Float64Array, c0: number, A: Float64Array, a0: number, B: Float64Array, b0: number): void {
  for (let r = 0; r < 16; r++) {
    for (let c = 0; c < 16; c++) {
      let s = C[c0 + r * 16 + c];
      for (let kk = 0; kk < 16; kk++) s += A[a0 + r * 16 + kk] * B[b0 + c * 16 + kk];
      C[c0 + r * 16 + c] = Math.fround(s);
    }
  }
}
/** cmstore: the accumulator into f32 shared S at index + r·stride + c. */
export function coopStore(C: Float64Array, c0: number, S: Float32Array, I: Uint32Array, lane0: number, sg: number, stride: number): string {
  const i0 = agreed(I, lane0, sg, "cooperative matrix store");
  if (typeof i0 === "string") return i0;
  for (let r = 0; r < 16; r++) {
    for (let c = 0; c < 16; c++) {
      const at = i0 + r * stride + c;
      if (at >= S.length) return `cooperative matrix store at ${at}, past the shared array's ${S.length}`;
      S[at] = C[c0 + r * 16 + c];
    }
  }
  return "";
}

/**
 * A workgroup's cp.async copies (kernels/ir_data.ts CpAsyncStmt) on the JS device: a copy reads its 16 bytes when
 * issued and lands in shared memory only when a wait retires its group, so a kernel that reads a stage before
 * waiting for it sees the stale words here too.
 */
export interface CpQueue {
  open: (Uint32Array | number)[];
  closed: (Uint32Array | number)[][];
}
export function cpWait(q: CpQueue, pending: number): void {
  while (q.closed.length > pending) {
    const g = q.closed.shift()!;
    for (let i = 0; i < g.length; i += 6) {
      const S = g[i] as Uint32Array, at = g[i + 1] as number;
      for (let j = 0; j < 4; j++) S[at + j] = g[i + 2 + j] as number;
    }
  }
}

/**
 * One warp's ldmatrix (kernels/ir_data.ts LdMatrixStmt) of n matrices: A holds each lane's row word index (from
 * `lane0`), D gets n words per lane (4 slots each). Returns an error message for a bad address, else "".
 */
export function ldsm(S: Uint32Array, A: Uint32Array, lane0: number, n: number, trans: boolean, D: Uint32Array): string {
  for (let r = 0; r < 8 * n; r++) {
    const at = A[lane0 + r];
    if (at % 4 !== 0 || at + 4 > S.length) return `ldmatrix row address ${at} (lane ${r}) is not a multiple of 4 inside 0..${S.length - 4}`;
  }
  const el = (i: number, r: number, c: number) => (S[A[lane0 + 8 * i + r] + (c >> 1)] >>> (16 * (c & 1))) & 0xffff;
  for (let l = 0; l < 32; l++) {
    const r = l >> 2, c = l & 3;
    for (let i = 0; i < n; i++) {
      D[(lane0 + l) * 4 + i] = trans
        ? (el(i, 2 * c, r) | (el(i, 2 * c + 1, r) << 16)) >>> 0
        : S[A[lane0 + 8 * i + r] + c];
    }
  }
  return "";
}

/** Two numbers rounded to bf16 (or f16) and packed into a u32, lo in the low half (kernels/ir.ts pack2). */
export function pack2(bf16: boolean, lo: number, hi: number): number {
  return bf16 ? ((f2bf(hi) << 16) | f2bf(lo)) >>> 0 : ((f2h(hi) << 16) | f2h(lo)) >>> 0;
}

/** The signed int8x4 dot product of two u32 words (kernels/ir.ts BinOp dot4). */
export function dot4(a: number, b: number): number {
  return ((a << 24 >> 24) * (b << 24 >> 24) + (a << 16 >> 24) * (b << 16 >> 24) + (a << 8 >> 24) * (b << 8 >> 24) + (a >> 24) * (b >> 24)) | 0;
}
