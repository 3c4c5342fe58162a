// ggml's reference quantizers (quantize_row_*_ref, with make_qkx2_quants / make_qx_quants for the K-quants) for
// every block type the graph reads: q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k. This is what llama-quantize
// runs when no importance matrix is given. Every float operation is rounded to f32 on its own, as ISO C without
// contraction evaluates it (a build of ggml that contracts a*b+c into an fma may differ in the last bit of a
// scale, and then in a quant that sits on a rounding edge).
import { BLOCK, type BlockDType, f32ToF16, f16ToF32 } from "../../graph/dtype.ts";

const fr = Math.fround;

/** ggml's nearest_int: round to nearest, ties to even, of an f32 (|x| <= 4194303). */
function nearestInt(x: number): number {
  return fr(fr(x) + 12582912) - 12582912;
}

/** C's float-to-int conversion (toward zero). */
const trunc = Math.trunc;

function putHalf(out: Uint8Array, at: number, v: number): void {
  const h = f32ToF16(v);
  out[at] = h & 0xff;
  out[at + 1] = h >> 8;
}

/** f32 value of a float rounded through f16 (what a reader of the stored scale sees). */
function viaHalf(v: number): number {
  return f16ToF32(f32ToF16(v));
}

function q8_0(x: Float32Array, out: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const o = i * 34, xi = i * 32;
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[xi + j]));
    const d = fr(amax / 127);
    const id = d ? fr(1 / d) : 0;
    putHalf(out, o, d);
    for (let j = 0; j < 32; j++) {
      const v = fr(x[xi + j] * id);
      out[o + 2 + j] = (v < 0 ? -Math.round(-v) : Math.round(v)) & 0xff; // roundf: halves away from zero
    }
  }
}

/** Element of largest magnitude (the first of equal ones), as q4_0/q5_0 pick it. */
function signedMax(x: Float32Array, at: number): number {
  let amax = 0, max = 0;
  for (let j = 0; j < 32; j++) {
    const v = x[at + j];
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return max;
}

function q4_0(x: Float32Array, out: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const o = i * 18, xi = i * 32;
    const d = fr(signedMax(x, xi) / -8);
    const id = d ? fr(1 / d) : 0;
    putHalf(out, o, d);
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(15, trunc(fr(fr(x[xi + j] * id) + 8.5)));
      const q1 = Math.min(15, trunc(fr(fr(x[xi + 16 + j] * id) + 8.5)));
      out[o + 2 + j] = q0 | (q1 << 4);
    }
  }
}

function minMax(x: Float32Array, at: number, n: number): [number, number] {
  let min = Infinity, max = -Infinity; // ggml starts from ±FLT_MAX; the same for finite input
  for (let j = 0; j < n; j++) {
    const v = x[at + j];
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return [min, max];
}

function q4_1(x: Float32Array, out: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const o = i * 20, xi = i * 32;
    const [min, max] = minMax(x, xi, 32);
    const d = fr(fr(max - min) / 15);
    const id = d ? fr(1 / d) : 0;
    putHalf(out, o, d);
    putHalf(out, o + 2, min);
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(15, trunc(fr(fr(fr(x[xi + j] - min) * id) + 0.5)));
      const q1 = Math.min(15, trunc(fr(fr(fr(x[xi + 16 + j] - min) * id) + 0.5)));
      out[o + 4 + j] = q0 | (q1 << 4);
    }
  }
}

function putU32(out: Uint8Array, at: number, v: number): void {
  out[at] = v & 0xff;
  out[at + 1] = (v >>> 8) & 0xff;
  out[at + 2] = (v >>> 16) & 0xff;
  out[at + 3] = (v >>> 24) & 0xff;
}

function q5_0(x: Float32Array, out: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const o = i * 22, xi = i * 32;
    const d = fr(signedMax(x, xi) / -16);
    const id = d ? fr(1 / d) : 0;
    putHalf(out, o, d);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(31, trunc(fr(fr(x[xi + j] * id) + 16.5)));
      const q1 = Math.min(31, trunc(fr(fr(x[xi + 16 + j] * id) + 16.5)));
      out[o + 6 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    putU32(out, o + 2, qh >>> 0);
  }
}

function q5_1(x: Float32Array, out: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const o = i * 24, xi = i * 32;
    const [min, max] = minMax(x, xi, 32);
    const d = fr(fr(max - min) / 31);
    const id = d ? fr(1 / d) : 0;
    putHalf(out, o, d);
    putHalf(out, o + 2, min);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = trunc(fr(fr(fr(x[xi + j] - min) * id) + 0.5)) & 0xff; // (uint8_t)
      const q1 = trunc(fr(fr(fr(x[xi + 16 + j] - min) * id) + 0.5)) & 0xff;
      out[o + 8 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    putU32(out, o + 4, qh >>> 0);
  }
}

// ---------------------------------------------------------------- K-quants

/**
 * ggml's make_qkx2_quants: a scale and a (negated) min for n values with weights, searched over nstep + 1
 * candidate scales around nmax / (max - min). Writes the quants to L; returns [scale, -min].
 */
function makeQkx2(
  n: number, nmax: number, x: Float32Array, xa: number, w: Float32Array, L: Uint8Array, la: number,
  rmin: number, rdelta: number, nstep: number,
): [number, number] {
  let min = x[xa], max = x[xa];
  let sumW = w[0];
  let sumX = fr(sumW * x[xa]);
  for (let i = 1; i < n; i++) {
    const v = x[xa + i];
    if (v < min) min = v;
    if (v > max) max = v;
    sumW = fr(sumW + w[i]);
    sumX = fr(sumX + fr(w[i] * v));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0, la, la + n);
    return [0, -min];
  }
  let iscale = fr(nmax / fr(max - min));
  let scale = fr(1 / iscale);
  let best = 0;
  for (let i = 0; i < n; i++) {
    const l = nearestInt(fr(iscale * fr(x[xa + i] - min)));
    L[la + i] = Math.max(0, Math.min(nmax, l));
    const diff = fr(fr(fr(scale * L[la + i]) + min) - x[xa + i]);
    best = fr(best + fr(w[i] * fr(diff * diff)));
  }
  const aux = new Uint8Array(n);
  for (let is = 0; is <= nstep; is++) {
    iscale = fr(fr(fr(rmin + fr(rdelta * is)) + nmax) / fr(max - min));
    let sumL = 0, sumL2 = 0, sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = Math.max(0, Math.min(nmax, nearestInt(fr(iscale * fr(x[xa + i] - min)))));
      aux[i] = l;
      const wl = fr(w[i] * l);
      sumL = fr(sumL + wl);
      sumL2 = fr(sumL2 + fr(wl * l));
      sumXL = fr(sumXL + fr(wl * x[xa + i]));
    }
    const D = fr(fr(sumW * sumL2) - fr(sumL * sumL));
    if (D > 0) {
      let s = fr(fr(fr(sumW * sumXL) - fr(sumX * sumL)) / D);
      let m = fr(fr(fr(sumL2 * sumX) - fr(sumL * sumXL)) / D);
      if (m > 0) {
        m = 0;
        s = fr(sumXL / sumL2);
      }
      let err = 0;
      for (let i = 0; i < n; i++) {
        const diff = fr(fr(fr(s * aux[i]) + m) - x[xa + i]);
        err = fr(err + fr(w[i] * fr(diff * diff)));
      }
      if (err < best) {
        L.set(aux, la);
        best = err;
        scale = s;
        min = m;
      }
    }
  }
  return [scale, -min];
}

const GROUP_MAX_EPS = fr(1e-15);

/** ggml's make_qx_quants with rmse_type 1 and no importance weights: signed quants in [-nmax, nmax) + nmax. */
function makeQx(n: number, nmax: number, x: Float32Array, xa: number, L: Uint8Array, la: number): number {
  let max = 0, amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[xa + i]);
    if (ax > amax) {
      amax = ax;
      max = x[xa + i];
    }
  }
  if (amax < GROUP_MAX_EPS) {
    L.fill(0, la, la + n);
    return 0;
  }
  const sums = (iscale: number, store: boolean): [number, number] => {
    let sumlx = 0, suml2 = 0;
    for (let i = 0; i < n; i++) {
      const v = x[xa + i];
      const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fr(iscale * v))));
      if (store) L[la + i] = l + nmax;
      const w = fr(v * v);
      sumlx = fr(sumlx + fr(fr(w * v) * l));
      suml2 = fr(suml2 + fr(fr(w * l) * l));
    }
    return [sumlx, suml2];
  };
  let iscale = fr(-nmax / max);
  let [sumlx, suml2] = sums(iscale, true);
  let scale = suml2 ? fr(sumlx / suml2) : 0;
  let best = fr(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fr(-fr(nmax + fr(fr(0.1) * is)) / max);
    [sumlx, suml2] = sums(iscale, false);
    if (suml2 > 0 && fr(sumlx * sumlx) > fr(best * suml2)) {
      sums(iscale, true);
      scale = fr(sumlx / suml2);
      best = fr(scale * sumlx);
    }
  }
  return scale;
}

/** Scales and mins of 8 sub-blocks as 6-bit values packed into 12 bytes (ggml's q4_K/q5_K layout). */
function packScalesK4(out: Uint8Array, s: number, ls: number[], lm: number[]): void {
  out.fill(0, s, s + 12);
  for (let j = 0; j < 8; j++) {
    if (j < 4) {
      out[s + j] = ls[j];
      out[s + j + 4] = lm[j];
    } else {
      out[s + j + 4] = (ls[j] & 0xf) | ((lm[j] & 0xf) << 4);
      out[s + j - 4] |= (ls[j] >> 4) << 6;
      out[s + j] |= (lm[j] >> 4) << 6;
    }
  }
}

function scaleMinK4(b: Uint8Array, s: number, j: number): [number, number] {
  if (j < 4) return [b[s + j] & 63, b[s + j + 4] & 63];
  return [(b[s + j + 4] & 0x0f) | ((b[s + j - 4] >> 6) << 4), (b[s + j + 4] >> 4) | ((b[s + j] >> 6) << 4)];
}

/**
 * q4_K and q5_K: 8 sub-blocks of 32, each quantized by make_qkx2_quants with weights av_x + |x|, their scales
 * and mins requantized to 6 bits against the block's largest, then every value requantized to those.
 */
function kQuant(x: Float32Array, out: Uint8Array, nb: number, bits: 4 | 5): void {
  const nmax = (1 << bits) - 1, size = bits === 4 ? 144 : 176;
  const L = new Uint8Array(256), w = new Float32Array(32);
  const scales = new Float32Array(8), mins = new Float32Array(8);
  for (let i = 0; i < nb; i++) {
    const o = i * size, xb = i * 256;
    let maxScale = 0, maxMin = 0;
    for (let j = 0; j < 8; j++) {
      let sumX2 = 0;
      for (let l = 0; l < 32; l++) sumX2 = fr(sumX2 + fr(x[xb + 32 * j + l] * x[xb + 32 * j + l]));
      const avX = fr(Math.sqrt(fr(sumX2 / 32)));
      for (let l = 0; l < 32; l++) w[l] = fr(avX + Math.abs(x[xb + 32 * j + l]));
      const [sc, mn] = bits === 4
        ? makeQkx2(32, nmax, x, xb + 32 * j, w, L, 32 * j, -1, fr(0.1), 20)
        : makeQkx2(32, nmax, x, xb + 32 * j, w, L, 32 * j, -0.5, fr(0.1), 15);
      scales[j] = sc;
      mins[j] = mn;
      if (sc > maxScale) maxScale = sc;
      if (mn > maxMin) maxMin = mn;
    }
    const invScale = maxScale > 0 ? fr(63 / maxScale) : 0;
    const invMin = maxMin > 0 ? fr(63 / maxMin) : 0;
    const ls: number[] = [], lm: number[] = [];
    for (let j = 0; j < 8; j++) {
      ls.push(Math.min(63, nearestInt(fr(invScale * scales[j])) & 0xff));
      lm.push(Math.min(63, nearestInt(fr(invMin * mins[j])) & 0xff));
    }
    packScalesK4(out, o + 4, ls, lm);
    putHalf(out, o, fr(maxScale / 63));
    putHalf(out, o + 2, fr(maxMin / 63));
    const dAll = viaHalf(fr(maxScale / 63)), mAll = viaHalf(fr(maxMin / 63));
    for (let j = 0; j < 8; j++) {
      const [sc, m] = scaleMinK4(out, o + 4, j);
      const d = fr(dAll * sc);
      if (!d) continue;
      const dm = fr(mAll * m);
      for (let ii = 0; ii < 32; ii++) {
        const l = nearestInt(fr(fr(x[xb + 32 * j + ii] + dm) / d));
        L[32 * j + ii] = Math.max(0, Math.min(nmax, l));
      }
    }
    if (bits === 4) {
      for (let j = 0, q = o + 16; j < 256; j += 64, q += 32) {
        for (let l = 0; l < 32; l++) out[q + l] = L[j + l] | (L[j + l + 32] << 4);
      }
    } else {
      const qh = o + 16;
      out.fill(0, qh, qh + 32);
      let m1 = 1, m2 = 2;
      for (let n = 0, ql = o + 48; n < 256; n += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
        for (let j = 0; j < 32; j++) {
          let l1 = L[n + j], l2 = L[n + j + 32];
          if (l1 > 15) {
            l1 -= 16;
            out[qh + j] |= m1;
          }
          if (l2 > 15) {
            l2 -= 16;
            out[qh + j] |= m2;
          }
          out[ql + j] = l1 | (l2 << 4);
        }
      }
    }
  }
}

/** q6_K: 16 sub-blocks of 16 by make_qx_quants, their scales to signed 8 bits, values requantized to them. */
function q6_k(x: Float32Array, out: Uint8Array, nb: number): void {
  const L = new Uint8Array(256), scales = new Float32Array(16);
  for (let i = 0; i < nb; i++) {
    const o = i * 210, xb = i * 256;
    let maxScale = 0, maxAbs = 0;
    for (let ib = 0; ib < 16; ib++) {
      const s = makeQx(16, 32, x, xb + 16 * ib, L, 16 * ib);
      scales[ib] = s;
      if (Math.abs(s) > maxAbs) {
        maxAbs = Math.abs(s);
        maxScale = s;
      }
    }
    out.fill(0, o, o + 210);
    if (maxAbs < GROUP_MAX_EPS) continue; // an all-zero block: every byte 0, d = +0
    const iscale = fr(-128 / maxScale);
    putHalf(out, o + 208, fr(1 / iscale));
    const dAll = viaHalf(fr(1 / iscale));
    for (let ib = 0; ib < 16; ib++) out[o + 192 + ib] = Math.min(127, nearestInt(fr(iscale * scales[ib]))) & 0xff;
    for (let j = 0; j < 16; j++) {
      const d = fr(dAll * ((out[o + 192 + j] << 24) >> 24));
      if (!d) continue;
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fr(x[xb + 16 * j + ii] / d));
        L[16 * j + ii] = Math.max(-32, Math.min(31, l)) + 32;
      }
    }
    for (let j = 0, ql = o, qh = o + 128; j < 256; j += 128, ql += 64, qh += 32) {
      for (let l = 0; l < 32; l++) {
        const a = L[j + l], b2 = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
        out[ql + l] = (a & 0xf) | ((c & 0xf) << 4);
        out[ql + l + 32] = (b2 & 0xf) | ((e & 0xf) << 4);
        out[qh + l] = (a >> 4) | ((b2 >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
      }
    }
  }
}

const QUANTIZE: Record<BlockDType, (x: Float32Array, out: Uint8Array, nb: number) => void> = {
  q8_0, q4_0, q4_1, q5_0, q5_1,
  q4_k: (x, out, nb) => kQuant(x, out, nb, 4),
  q5_k: (x, out, nb) => kQuant(x, out, nb, 5),
  q6_k,
};

/** Quantizes f32 values (a whole number of blocks) to block type `d` with ggml's reference algorithm. */
export function quantizeBlocks(d: BlockDType, x: ArrayLike<number>): Uint8Array {
  const b = BLOCK[d];
  if (x.length % b.elems !== 0) throw new RangeError(`${d} needs a multiple of ${b.elems} values, got ${x.length}`);
  const xs = x instanceof Float32Array ? x : Float32Array.from(x);
  const nb = xs.length / b.elems;
  const out = new Uint8Array(nb * b.bytes);
  QUANTIZE[d](xs, out, nb);
  return out;
}
