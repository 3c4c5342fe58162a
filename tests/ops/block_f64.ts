// A float64 evaluation of the fused decode blocks of tests/ops/cases.ts ("gemv units: ... block"), written
// out by hand from the block's definition rather than through the graph: rmsnorm, projections (+ bias), rope,
// the K/V rows cast to the cache's type and written at pos, causal attention over the cache, the output
// projection and residual, rmsnorm, silu(gate)·up, down projection and residual. The harness holds both the
// oracle and every device to their tier-2 bound around this value: the "expected"-mode bound of a block is an
// estimate, and this is what shows it is not smaller than the f32 oracle's own distance from the exact result.
import { f16ToF32, f32ToF16, type DType, type Storage, storageFromBytes } from "../../graph/dtype.ts";
import { weightF32 } from "../../graph/eval_ops.ts";

export interface BlockSpec {
  w: DType;
  D: number;
  H: number;
  KVH: number;
  hd: number;
  C: number;
  kv: "f16" | "f32";
  style: "half" | "adjacent";
  dims?: number;
  bias: boolean;
  ffn: number;
  normOut?: boolean;
}

export interface BlockStep {
  output: Record<string, Float64Array>;
  state: Record<string, Float64Array>;
}

/**
 * Runs `steps` steps of the block in float64. `weights` in the order the case created them (attn norm; q, k, v
 * each followed by its bias when there is one; o; ffn norm; gate; up; down); `slotsAt(step)` gives in0 and pos.
 */
export function blockF64(
  o: BlockSpec, weights: { dtype: DType; shape: number[]; bytes: Uint8Array }[], steps: number,
  slotsAt: (step: number) => Record<string, Storage>, names: { k: string; v: string },
): BlockStep[] {
  const W = weights.map((w) => {
    const n = w.shape.reduce((a, b) => a * b, 1);
    return Float64Array.from(weightF32(w.dtype, storageFromBytes(w.dtype, w.bytes), n));
  });
  let wi = 0;
  const next = () => W[wi++];
  const normA = next();
  const proj = () => ({ w: next(), b: o.bias ? next() : undefined });
  const pq = proj(), pk = proj(), pv = proj();
  const wo = next(), normF = next(), wg = next(), wu = next(), wd = next();
  const { D, H, KVH, hd, C } = o, G = H / KVH, dims = o.dims ?? hd, half = dims / 2;
  const kc = new Float64Array(C * KVH * hd), vc = new Float64Array(C * KVH * hd);
  const store = (x: number) => o.kv === "f16" ? f16ToF32(f32ToF16(x)) : Math.fround(x);

  const rms = (x: Float64Array, g: Float64Array) => {
    let s = 0;
    for (const v of x) s += v * v;
    const r = 1 / Math.sqrt(s / x.length + 1e-5);
    return x.map((v, i) => g[i] * v * r);
  };
  const mv = (x: Float64Array, w: Float64Array, n: number, b?: Float64Array) => {
    const K = x.length, y = new Float64Array(n);
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += x[k] * w[j * K + k];
      y[j] = s + (b ? b[j] : 0);
    }
    return y;
  };
  const rope = (x: Float64Array, heads: number, pos: number) => {
    const y = x.slice();
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < half; i++) {
        const ang = pos / Math.pow(10000, (2 * i) / dims), c = Math.cos(ang), s = Math.sin(ang);
        const [a, b] = o.style === "half" ? [h * hd + i, h * hd + i + half] : [h * hd + 2 * i, h * hd + 2 * i + 1];
        y[a] = x[a] * c - x[b] * s;
        y[b] = x[a] * s + x[b] * c;
      }
    }
    return y;
  };

  const out: BlockStep[] = [];
  for (let step = 0; step < steps; step++) {
    const sl = slotsAt(step);
    const x = Float64Array.from(sl.in0 as Float32Array), pos = (sl.pos as Int32Array)[0];
    const h = rms(x, normA);
    const q = rope(mv(h, pq.w, H * hd, pq.b), H, pos);
    const k = rope(mv(h, pk.w, KVH * hd, pk.b), KVH, pos);
    const v = mv(h, pv.w, KVH * hd, pv.b);
    for (let i = 0; i < KVH * hd; i++) {
      kc[pos * KVH * hd + i] = store(k[i]);
      vc[pos * KVH * hd + i] = store(v[i]);
    }
    const att = new Float64Array(H * hd);
    for (let hh = 0; hh < H; hh++) {
      const kh = Math.floor(hh / G), sc = new Float64Array(pos + 1);
      let m = -Infinity;
      for (let c = 0; c <= pos; c++) {
        let s = 0;
        for (let d = 0; d < hd; d++) s += q[hh * hd + d] * kc[(c * KVH + kh) * hd + d];
        sc[c] = s / Math.sqrt(hd);
        m = Math.max(m, sc[c]);
      }
      let z = 0;
      for (let c = 0; c <= pos; c++) z += sc[c] = Math.exp(sc[c] - m);
      for (let d = 0; d < hd; d++) {
        let s = 0;
        for (let c = 0; c <= pos; c++) s += (sc[c] / z) * vc[(c * KVH + kh) * hd + d];
        att[hh * hd + d] = s;
      }
    }
    const y = mv(att, wo, D).map((a, i) => a + x[i]);
    const h2 = rms(y, normF);
    const g = mv(h2, wg, o.ffn), u = mv(h2, wu, o.ffn);
    const ff = g.map((a, i) => (a / (1 + Math.exp(-a))) * u[i]);
    const yo = mv(ff, wd, D).map((a, i) => a + y[i]);
    const output: Record<string, Float64Array> = { y: yo, q };
    if (o.normOut) output.h2 = h2;
    out.push({ output, state: { [names.k]: kc.slice(), [names.v]: vc.slice() } });
  }
  return out;
}
