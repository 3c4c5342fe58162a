// The oracle of a matmul with quantized x (attrs.xq): what the decode gemv's integer path computes
// (kernels/lib/gemv.ts, dequant.ts), the way llama.cpp's CPU and CUDA backends dot quantized weights: x is
// quantized to int8 in runs of XQ_RUN[type] consecutive elements (a run never straddles a weight scale), each
// run dotted with the weight's integer quants exactly, and the integers combined with the f32 scales.
//
// Per run of n values v (x of one row, elements a .. a+n-1):
//   amax = max(max |v_i|, 2^-32) (NaN propagates);  is = fl(127 / amax);  dx = fl(amax · fl(1/127))
//   (the floor keeps an all-zero run finite, q = 0 and dx tiny, and the device's division on its fast path)
//   q_i  = the signed low byte of bits(fl(fl(v_i · is) + 1.5·2^23))   (round half to even, as ggml's nearest_int;
//          |q_i| <= 127 for finite v; 0 for an all-zero run, whose dx is 0)
// Per run and weight row, with the weight's integer quants w_i, its integer run scale sc, offset o and min m
// (q8_0: w = qs, sc = 1; q4_k: w = the nibble, sc/m the 6-bit scale/min; q6_k: w = the unsigned 6-bit value,
// o = 32, sc the int8 scale):
//   I = Σ w_i·q_i,  B = Σ q_i                                    (integers, exact)
//   T = fl(fl(d·dx) · sc·(I − o·B)) − fl(fl(dmin·dx) · m·B)      (q4_k has the second term)
// and the row's result is the sum of its runs' T in element order (the device sums them in any order).
//
// Finer runs than ggml's (q8_K quantizes x per 256, q8_0 per 32): each lane of the kernel quantizes the runs it
// holds, with no cross-lane step; the result is closer to the f32 matmul than llama.cpp's own.
import { BLOCK, type BlockDType, f16ToF32 } from "../dtype.ts";
import { gamma, U } from "./rounding.ts";

/** Block types with an integer path, and the length of their x runs (kernels/lib/dequant.ts chunkGroups). */
export const XQ_RUN: Partial<Record<BlockDType, number>> = { q8_0: 16, q4_k: 16, q6_k: 8 };

export function hasXq(t: string): t is BlockDType {
  return t in XQ_RUN;
}

const fr = Math.fround;
const MAGIC = 12582912; // 1.5 * 2^23
const INV127 = fr(1 / 127);
/** The least amax of a run (see the top of the file). */
export const XQ_FLOOR = 2 ** -32;
const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);

/** The quantization of run v[a..a+n): its int8 values written at q[at..at+n); returns dx. */
export function quantizeRun(v: ArrayLike<number>, a: number, n: number, q: Int32Array, at: number): number {
  let amax = XQ_FLOOR;
  for (let i = 0; i < n; i++) {
    const x = Math.abs(v[a + i]);
    amax = x !== x || amax !== amax ? NaN : Math.max(amax, x);
  }
  const is = fr(127 / amax);
  for (let i = 0; i < n; i++) {
    f32[0] = fr(fr(v[a + i] * is) + MAGIC);
    q[at + i] = (u32[0] << 24) >> 24;
  }
  return fr(amax * INV127);
}

/** One weight row decoded to runs: integer quants w per element, and per run sc, m, d, dmin. */
interface RowRuns {
  w: Int32Array;
  sc: Int32Array;
  m: Int32Array;
  d: Float32Array;
  dmin: Float32Array;
  off: number;
}

const half = (b: Uint8Array, o: number) => f16ToF32(b[o] | (b[o + 1] << 8));

/** Weight row `r` of `K` elements (blocks of t from `bytes`) as runs of XQ_RUN[t]. */
function rowRuns(t: BlockDType, bytes: Uint8Array, r: number, K: number): RowRuns {
  const run = XQ_RUN[t]!, nb = K / BLOCK[t].elems, runs = K / run;
  const out: RowRuns = { w: new Int32Array(K), sc: new Int32Array(runs), m: new Int32Array(runs), d: new Float32Array(runs), dmin: new Float32Array(runs), off: t === "q6_k" ? 32 : 0 };
  for (let i = 0; i < nb; i++) {
    const o = (r * nb + i) * BLOCK[t].bytes, e0 = i * BLOCK[t].elems, r0 = e0 / run;
    if (t === "q8_0") {
      const d = half(bytes, o);
      for (let l = 0; l < 32; l++) out.w[e0 + l] = (bytes[o + 2 + l] << 24) >> 24;
      for (let g = 0; g < 2; g++) out.sc[r0 + g] = 1, out.d[r0 + g] = d;
    } else if (t === "q4_k") {
      const d = half(bytes, o), dmin = half(bytes, o + 2), s = o + 4;
      for (let j = 0; j < 4; j++) {
        const q = o + 16 + 32 * j;
        for (let l = 0; l < 32; l++) {
          out.w[e0 + 64 * j + l] = bytes[q + l] & 15;
          out.w[e0 + 64 * j + 32 + l] = bytes[q + l] >> 4;
        }
      }
      for (let sb = 0; sb < 8; sb++) {
        const [sc, m] = sb < 4 ? [bytes[s + sb] & 63, bytes[s + sb + 4] & 63]
          : [(bytes[s + sb + 4] & 15) | ((bytes[s + sb - 4] >> 6) << 4), (bytes[s + sb + 4] >> 4) | ((bytes[s + sb] >> 6) << 4)];
        for (let g = 0; g < 2; g++) {
          const ri = r0 + 2 * sb + g;
          out.sc[ri] = sc, out.m[ri] = m, out.d[ri] = d, out.dmin[ri] = dmin;
        }
      }
    } else { // q6_k
      const d = half(bytes, o + 208);
      for (let n = 0; n < 2; n++) {
        const ql = o + 64 * n, qh = o + 128 + 32 * n, sc = o + 192 + 8 * n;
        for (let l = 0; l < 32; l++) {
          const h = bytes[qh + l], e = e0 + 128 * n + l;
          out.w[e] = (bytes[ql + l] & 15) | ((h & 3) << 4);
          out.w[e + 32] = (bytes[ql + l + 32] & 15) | (((h >> 2) & 3) << 4);
          out.w[e + 64] = (bytes[ql + l] >> 4) | (((h >> 4) & 3) << 4);
          out.w[e + 96] = (bytes[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4);
        }
        for (let g = 0; g < 4; g++) {
          for (let l = 0; l < 32; l += run) {
            const ri = (e0 + 128 * n + 32 * g + l) / run;
            out.sc[ri] = (bytes[sc + (l >> 4) + 2 * g] << 24) >> 24;
            out.d[ri] = d;
          }
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
  const run = XQ_RUN[t]!, runs = K / run;
  const y = new Float32Array(M * N), bound = ex !== undefined ? new Float32Array(M * N) : undefined;
  const q = new Int32Array(K), dx = new Float32Array(runs), B = new Int32Array(runs);
  const near = new Float32Array(K), rel = new Float32Array(runs), e = new Float32Array(K);
  const rows = Array.from({ length: N }, (_, r) => rowRuns(t, bytes, r, K));
  for (let mi = 0; mi < M; mi++) {
    const xo = mi * K;
    for (let g = 0; g < runs; g++) {
      dx[g] = quantizeRun(x, xo + g * run, run, q, g * run);
      let s = 0;
      for (let i = g * run; i < (g + 1) * run; i++) s += q[i];
      B[g] = s;
      if (!bound) continue;
      let amax = XQ_FLOOR, emax = 0;
      for (let i = g * run; i < (g + 1) * run; i++) {
        e[i] = ex ? ex[xo + i] : 0;
        amax = Math.max(amax, Math.abs(x[xo + i]));
        emax = Math.max(emax, e[i]);
      }
      rel[g] = emax / amax + 8 * U;
      const is = 127 / amax;
      for (let i = g * run; i < (g + 1) * run; i++) {
        const ti = x[xo + i] * is, d = Math.abs(ti - Math.floor(ti) - 0.5); // distance to the boundary k + 1/2
        const tau = worst ? e[i] * is + Math.abs(ti) * rel[g] : Math.abs(ti) * 8 * U;
        near[i] = d <= tau ? 1 + Math.floor(2 * tau) : 0;
      }
    }
    for (let n = 0; n < N; n++) {
      const w = rows[n];
      let acc = 0, abs = 0, sq = 0, sgn = 0, steps = 0, scaled = 0, lin = 0;
      for (let g = 0; g < runs; g++) {
        let I = 0;
        for (let i = g * run; i < (g + 1) * run; i++) I += w.w[i] * q[i];
        const a = fr(fr(w.d[g] * dx[g]) * (w.sc[g] * (I - w.off * B[g])));
        const b = w.m[g] ? fr(fr(w.dmin[g] * dx[g]) * (w.m[g] * B[g])) : 0;
        const T = fr(a - b);
        acc = fr(acc + T);
        if (!bound) continue;
        abs += Math.abs(a) + Math.abs(b);
        sq += a * a + b * b;
        sgn += T;
        scaled += worst ? rel[g] * (Math.abs(a) + Math.abs(b)) : (rel[g] * T) ** 2;
        for (let i = g * run; i < (g + 1) * run; i++) {
          const wd = Math.abs(w.d[g] * w.sc[g] * (w.w[i] - w.off) - w.dmin[g] * w.m[g]);
          const step = near[i] * dx[g] * (Math.abs(w.d[g] * w.sc[g] * (w.w[i] - w.off)) + Math.abs(w.dmin[g] * w.m[g]));
          if (worst) steps += step;
          else {
            steps += step * step;
            if (e[i]) lin += (e[i] * wd) ** 2 + e[i] * dx[g] * wd * wd;
          }
        }
      }
      y[mi * N + n] = acc;
      if (bound) {
        bound[mi * N + n] = worst
          ? 2 * gamma(3 * runs) * abs + steps + scaled + 2 ** -125
          : Math.sqrt(lin + steps + scaled + (U * Math.sqrt(3 * runs) * (Math.abs(sgn) + Math.sqrt(sq))) ** 2) + 2 ** -125;
      }
    }
  }
  return { y, bound };
}
