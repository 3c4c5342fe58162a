// The oracle of a matmul with quantized x (attrs.xq): what the decode gemv's integer path computes
// (kernels/lib/gemv.ts, dequant.ts), the way llama.cpp's CPU and CUDA backends dot quantized weights: x is
// quantized to int8 per run, each run dotted with the weight's integer quants exactly, and the integers combined
// with the f32 scales. A run is the elements of one chunk of a weight block, the piece one lane of the kernel
// decodes (XQ_RUNS: runs of a block, each its groups' element offsets in order; a group shares one weight
// scale), so a lane quantizes the x it holds with no cross-lane step. Run sizes: 32 for q4_k, q5_k and q6_k
// (two groups of 16 elements for q4_k/q5_k, one per 32-element sub-block; four of 8 for q6_k), 16 for q8_0
// (one group) and for q4_0, q4_1, q5_0, q5_1 (two groups of 8: elements 8c.. and 16 + 8c.. of chunk c, one
// byte's low and high nibble each).
//
// Per run of values v (x of one row at the run's elements):
//   amax = max(max |v_i|, 2^-32), NaN when that is not finite;  is = fl(127 / amax);  dx = fl(amax · fl(1/127))
//   (the floor keeps an all-zero run finite, q = 0 and dx tiny, and the device's division on its fast path; a
//   run holding a NaN or an infinity has dx NaN, so every row it meets is NaN on every device, whatever bits
//   its q take)
//   q_i  = the signed low byte of bits(fl(fl(v_i · is) + 1.5·2^23))   (round half to even, as ggml's nearest_int;
//          |q_i| <= 127 for finite v)
// Per run and weight row, with the weight's integer quants w_i and per group g its integer scale sc_g, offset o
// and min m_g, and per block the f16 scales d and dmin:
//   q8_0: w = qs (int8), sc = 1, o = 0;  q4_0 / q5_0: w = the nibble / 5-bit value, sc = 1, o = 8 / 16;
//   q4_1 / q5_1: w = the nibble / 5-bit value, sc = 1, o = 0, m = 1, dmin = −(the block's min m): the min adds;
//   q4_k / q5_k: w = the nibble / 5-bit value, sc / m the 6-bit scale / min, o = 0;
//   q6_k: w = the unsigned 6-bit value, o = 32, sc the int8 scale.
//   I_g = Σ w_i·q_i,  B_g = Σ q_i  (over group g),  A = Σ_g sc_g·(I_g − o·B_g),  M = Σ_g m_g·B_g   (exact)
//   T = fl(fl(d·dx) · A) − fl(fl(dmin·dx) · M)      (the types with a min have the second term; |A|, |M| < 2^24:
//                                                    exact in f32)
// and the row's result is the sum of its runs' T in order (the device sums them in any order).
//
// Finer runs than ggml's (q8_K quantizes x per 256 for the K-quants, q8_0/q8_1 per 32 for the rest): the result
// is closer to the f32 matmul than llama.cpp's own.
import { BLOCK, type BlockDType, f16ToF32 } from "../dtype.ts";
import { gamma, U } from "./rounding.ts";

const range = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));
/** A 32-element block's two chunks: elements 8c.. (low nibbles of bytes 8c..) and 16 + 8c.. (their high ones). */
const pairs32 = range(2, (c) => [0, 16].map((o) => range(8, (l) => 8 * c + o + l)));
/** A K-quant 4/5-bit block's 8 chunks: 16 elements of sub-block 2j and the 16 beside them in sub-block 2j + 1. */
const sub64 = range(8, (c) => [0, 32].map((o) => range(16, (l) => 64 * (c >> 1) + 16 * (c & 1) + o + l)));
/**
 * Block types with an integer path: per run of a block (kernels/lib/dequant.ts chunk c), its groups' element
 * offsets in the block (dequant.ts chunkGroups: the same groups, at the chunk's `at`).
 */
export const XQ_RUNS: Partial<Record<BlockDType, number[][][]>> = {
  q8_0: range(2, (c) => [range(16, (l) => 16 * c + l)]),
  q4_0: pairs32,
  q4_1: pairs32,
  q5_0: pairs32,
  q5_1: pairs32,
  q4_k: sub64,
  q5_k: sub64,
  q6_k: range(8, (c) => [0, 32, 64, 96].map((o) => range(8, (l) => 128 * (c >> 2) + 8 * (c & 3) + o + l))),
};

export function hasXq(t: string): t is BlockDType {
  return t in XQ_RUNS;
}

const fr = Math.fround;
const MAGIC = 12582912; // 1.5 * 2^23
const INV127 = fr(1 / 127);
/** The least amax of a run (see the top of the file). */
export const XQ_FLOOR = 2 ** -32;
const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);

/** The quantization of the values v[idx[i]]: their int8 values written at q[idx[i]]; returns dx. */
export function quantizeRun(v: ArrayLike<number>, idx: readonly number[], q: Int32Array): number {
  let amax = XQ_FLOOR;
  for (const i of idx) {
    const x = Math.abs(v[i]);
    amax = x !== x || amax !== amax ? NaN : Math.max(amax, x);
  }
  if (!(amax < Infinity)) amax = NaN;
  const is = fr(127 / amax);
  for (const i of idx) {
    f32[0] = fr(fr(v[i] * is) + MAGIC);
    q[i] = (u32[0] << 24) >> 24;
  }
  return fr(amax * INV127);
}

/** One weight row decoded: per element its integer quant w and its group's sc and m; per block d and dmin. */
interface RowQuants {
  w: Int32Array;
  sc: Int32Array;
  m: Int32Array;
  d: Float32Array;
  dmin: Float32Array;
  off: number;
  /** The type has a min: T subtracts the dmin term (see the top of the file). */
  min: boolean;
}

const half = (b: Uint8Array, o: number) => f16ToF32(b[o] | (b[o + 1] << 8));
const OFF: Partial<Record<BlockDType, number>> = { q4_0: 8, q5_0: 16, q6_k: 32 };
const MIN = new Set<BlockDType>(["q4_1", "q5_1", "q4_k", "q5_k"]);

function rowQuants(t: BlockDType, bytes: Uint8Array, r: number, K: number): RowQuants {
  const nb = K / BLOCK[t].elems;
  const out: RowQuants = {
    w: new Int32Array(K), sc: new Int32Array(K), m: new Int32Array(K), d: new Float32Array(nb), dmin: new Float32Array(nb),
    off: OFF[t] ?? 0, min: MIN.has(t),
  };
  for (let i = 0; i < nb; i++) {
    const o = (r * nb + i) * BLOCK[t].bytes, e0 = i * BLOCK[t].elems;
    if (t === "q8_0") {
      out.d[i] = half(bytes, o);
      for (let l = 0; l < 32; l++) out.w[e0 + l] = (bytes[o + 2 + l] << 24) >> 24, out.sc[e0 + l] = 1;
    } else if (t === "q4_0" || t === "q4_1" || t === "q5_0" || t === "q5_1") {
      // d, [m], [qh u32], qs[16]: element j is the low nibble of qs[j], j + 16 its high one; qh bit j / j + 16
      // the fifth bit. The min adds: dmin = −m with m_g = 1.
      const q5 = t === "q5_0" || t === "q5_1", m1 = t === "q4_1" || t === "q5_1";
      out.d[i] = half(bytes, o);
      if (m1) out.dmin[i] = -half(bytes, o + 2);
      const h = o + (m1 ? 4 : 2), qs = h + (q5 ? 4 : 0);
      const qh = q5 ? (bytes[h] | (bytes[h + 1] << 8) | (bytes[h + 2] << 16) | (bytes[h + 3] << 24)) >>> 0 : 0;
      for (let j = 0; j < 16; j++) {
        out.w[e0 + j] = (bytes[qs + j] & 15) | (((qh >>> j) & 1) << 4);
        out.w[e0 + j + 16] = (bytes[qs + j] >> 4) | (((qh >>> (j + 16)) & 1) << 4);
      }
      out.sc.fill(1, e0, e0 + 32);
      if (m1) out.m.fill(1, e0, e0 + 32);
    } else if (t === "q4_k" || t === "q5_k") {
      // d, dmin, scales[12], [qh[32]], qs[128]: 64 elements per 32 qs bytes (low nibbles, then high ones); qh
      // byte l bit 2j / 2j + 1 the fifth bit of element 64j + l / 64j + 32 + l.
      out.d[i] = half(bytes, o), out.dmin[i] = half(bytes, o + 2);
      const s = o + 4, q5 = t === "q5_k", qh = o + 16;
      for (let j = 0; j < 4; j++) {
        const q = o + (q5 ? 48 : 16) + 32 * j;
        for (let l = 0; l < 32; l++) {
          const hb = q5 ? bytes[qh + l] >> (2 * j) : 0;
          out.w[e0 + 64 * j + l] = (bytes[q + l] & 15) | ((hb & 1) << 4);
          out.w[e0 + 64 * j + 32 + l] = (bytes[q + l] >> 4) | ((hb & 2) << 3);
        }
      }
      for (let sb = 0; sb < 8; sb++) {
        const [sc, m] = sb < 4 ? [bytes[s + sb] & 63, bytes[s + sb + 4] & 63]
          : [(bytes[s + sb + 4] & 15) | ((bytes[s + sb - 4] >> 6) << 4), (bytes[s + sb + 4] >> 4) | ((bytes[s + sb] >> 6) << 4)];
        out.sc.fill(sc, e0 + 32 * sb, e0 + 32 * sb + 32);
        out.m.fill(m, e0 + 32 * sb, e0 + 32 * sb + 32);
      }
    } else { // q6_k
      out.d[i] = half(bytes, o + 208);
      for (let n = 0; n < 2; n++) {
        const ql = o + 64 * n, qh = o + 128 + 32 * n, sc = o + 192 + 8 * n;
        for (let l = 0; l < 32; l++) {
          const h = bytes[qh + l], e = e0 + 128 * n + l;
          out.w[e] = (bytes[ql + l] & 15) | ((h & 3) << 4);
          out.w[e + 32] = (bytes[ql + l + 32] & 15) | (((h >> 2) & 3) << 4);
          out.w[e + 64] = (bytes[ql + l] >> 4) | (((h >> 4) & 3) << 4);
          out.w[e + 96] = (bytes[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4);
          for (let g = 0; g < 4; g++) out.sc[e + 32 * g] = (bytes[sc + (l >> 4) + 2 * g] << 24) >> 24;
        }
      }
    }
  }
  return out;
}

/**
 * y[M, N] = x[M, K] · W[N, K]ᵀ with x quantized (see the top of the file); with `ex` (x's bound per element,
 * null: exact), also the tier-2 bound per output. A q is a step function of v: a device whose v (or whose
 * rounding of v·is, or of is: a few u, and x·g before the norm's scale) differs may land a q one step away
 * where v·is sits near a rounding boundary k + 1/2, changing the dot by dx·|w'| (w' the value's dequantized
 * weight). "worst": every q within reach of a boundary (window is·E + 8u·|v·is| + the scale's relative change)
 * counted as such steps, the scale's own change times Σ|T|, and the combination's reassociation 2γ(3·runs)·Σ|T|.
 * "expected": an input error e moves q across a boundary with probability |e|·is, so the steps add e·|w'| on
 * average (the linear term, as an unquantized matmul's) and a variance |e|·dx·w'²; the rounding windows
 * (8u) count as whole steps; terms in quadrature.
 */
export function xqMatmul(
  t: BlockDType, x: ArrayLike<number>, M: number, K: number, bytes: Uint8Array, N: number,
  ex?: ArrayLike<number> | null, worst = true,
): { y: Float32Array; bound?: Float32Array } {
  const per = XQ_RUNS[t]!, be = BLOCK[t].elems, nb = K / be;
  // every run of the row: its groups' absolute element indices (x's, within a row), and its block
  const runs = range(nb * per.length, (r) => per[r % per.length].map((g) => g.map((e) => Math.floor(r / per.length) * be + e)));
  const flat = runs.map((gs) => gs.flat());
  const y = new Float32Array(M * N), bound = ex !== undefined ? new Float32Array(M * N) : undefined;
  const q = new Int32Array(K), dx = new Float32Array(runs.length), rel = new Float32Array(runs.length);
  const near = new Float32Array(K), e = new Float32Array(K), xr = new Float32Array(K);
  const rows = range(N, (r) => rowQuants(t, bytes, r, K));
  for (let mi = 0; mi < M; mi++) {
    for (let k = 0; k < K; k++) xr[k] = x[mi * K + k], e[k] = ex ? ex[mi * K + k] : 0;
    runs.forEach((_, r) => {
      dx[r] = quantizeRun(xr, flat[r], q);
      if (!bound) return;
      let amax = XQ_FLOOR, emax = 0;
      for (const i of flat[r]) amax = Math.max(amax, Math.abs(xr[i])), emax = Math.max(emax, e[i]);
      rel[r] = emax / amax + 8 * U;
      const is = 127 / amax;
      for (const i of flat[r]) {
        const ti = xr[i] * is, d = Math.abs(ti - Math.floor(ti) - 0.5); // distance to the boundary k + 1/2
        const tau = worst ? e[i] * is + Math.abs(ti) * rel[r] : Math.abs(ti) * 8 * U;
        near[i] = d <= tau ? 1 + Math.floor(2 * tau) : 0;
      }
    });
    for (let n = 0; n < N; n++) {
      const w = rows[n];
      let acc = 0, abs = 0, sq = 0, sgn = 0, steps = 0, scaled = 0, lin = 0;
      runs.forEach((gs, r) => {
        const blk = Math.floor(r / per.length);
        let A = 0, Mi = 0;
        for (const g of gs) {
          let I = 0, B = 0;
          for (const i of g) I += w.w[i] * q[i], B += q[i];
          A += w.sc[g[0]] * (I - w.off * B);
          Mi += w.m[g[0]] * B;
        }
        const a = fr(fr(w.d[blk] * dx[r]) * A);
        const b = w.min ? fr(fr(w.dmin[blk] * dx[r]) * Mi) : 0;
        const T = fr(a - b);
        acc = fr(acc + T);
        if (!bound) return;
        abs += Math.abs(a) + Math.abs(b);
        sq += a * a + b * b;
        sgn += T;
        scaled += worst ? rel[r] * (Math.abs(a) + Math.abs(b)) : (rel[r] * T) ** 2;
        for (const i of flat[r]) {
          const wq = Math.abs(w.d[blk] * w.sc[i] * (w.w[i] - w.off)), wm = Math.abs(w.dmin[blk] * w.m[i]);
          const step = near[i] * dx[r] * (wq + wm);
          if (worst) steps += step;
          else {
            steps += step * step;
            const wd = Math.abs(w.d[blk] * w.sc[i] * (w.w[i] - w.off) - w.dmin[blk] * w.m[i]);
            if (e[i]) lin += (e[i] * wd) ** 2 + e[i] * dx[r] * wd * wd;
          }
        }
      });
      y[mi * N + n] = acc;
      if (bound) {
        bound[mi * N + n] = worst
          ? 2 * gamma(3 * runs.length) * abs + steps + scaled + 2 ** -125
          : Math.sqrt(lin + steps + scaled + (U * Math.sqrt(3 * runs.length) * (Math.abs(sgn) + Math.sqrt(sq))) ** 2) + 2 ** -125;
      }
    }
  }
  return { y, bound };
}
