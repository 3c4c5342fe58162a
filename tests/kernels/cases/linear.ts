// Matmul and the fused decode gemv cases. (tests/kernels/cases.ts lists them; its header says how they are checked.)
import * as lib from "../../../kernels/lib/mod.ts";
import { BLOCK, type BlockDType, dequantize } from "../../../graph/dtype.ts";
import { quantizeBlocks } from "../../../llm/formats/ggml-quants.ts";
import { asF32, bytes, floats, matmulWant, q4Rows, q8Rows, Rng } from "../data.ts";
import { EPS, u32b, memo, type KernelCase } from "./common.ts";

// ---- matmul ------------------------------------------------------------------------------------------
/** lib.matmul, or with `tiled` lib.tiledMatmul (the same bindings and reference). */
export function matmulCase(w: lib.WType, n: number, k: number, batch: number, bias = false, residual = false, tiled = false): KernelCase {
  const name = `${tiled ? "tiled " : ""}matmul ${w} n=${n} k=${k} batch=${batch}${bias ? " bias" : ""}${residual ? " residual" : ""}`;
  let wv: Float64Array;
  const inputs = memo(() => {
    const rng = new Rng(name);
    const x = rng.f32(batch * k);
    let wb: Uint8Array;
    if (w === "q8_0" || w === "q4_0") {
      const q = w === "q8_0" ? q8Rows(rng, n, k) : q4Rows(rng, n, k);
      wb = bytes(q.bytes);
      wv = q.values;
    } else {
      const f = floats(rng, w as "f32" | "f16" | "bf16", n * k); // the cases here use float or q8_0/q4_0 weights
      wb = f.bytes;
      wv = f.values;
    }
    const out = [bytes(x), wb];
    if (bias) out.push(bytes(rng.f32(n)));
    if (residual) out.push(bytes(rng.f32(batch * n)));
    out.push(bytes(new Float32Array(batch * n).fill(NaN)));
    return out;
  });
  return {
    name,
    // below the rows the lowering gives it (kernels/lower.ts TILED_MIN_ROWS), at the layout's largest tile
    forced: tiled,
    make: (caps) => tiled ? lib.tiledMatmul(caps, { n, k, batch, w, bias, residual }) : lib.matmul(caps, { n, k, batch, w, bias, residual }),
    inputs,
    expect(ins) {
      const { want, mag } = matmulWant(asF32(ins[0]), wv, { n, k, batch, bias, residual }, ins);
      return [{ binding: ins.length - 1, type: "f32", want, mag, tol: { abs: 1e-6, rel: (k + 4) * 2 * EPS } }];
    },
  };
}

// ---- fused gemv ----------------------------------------------------------------------------------------
/** Random values in [-1, 1) quantized by ggml's reference algorithm; `values` are their exact dequantization. */
function blockRows(rng: Rng, t: BlockDType, n: number): { bytes: Uint8Array; values: Float64Array } {
  const q = quantizeBlocks(t, rng.f32(n, -1, 1));
  return { bytes: bytes(q), values: Float64Array.from(dequantize(t, q, n)) };
}
/**
 * lib.gemv with an rmsnorm folded in and three parts: q-like rope pairs (bias, written at row pos of an f16
 * [cap, n] cache), an odd-width dot with a residual, and silu(gate)·up. A pos at or past cap faults UPDATE_POS.
 */
export function gemvCase(w: "f32" | "f16" | "bf16" | BlockDType, k: number, o: { hd: number; heads: number; rot: number; style: "half" | "adjacent"; n: number; ffn: number; cap: number; pos: number; tune?: Partial<lib.GemvTune>; gelu?: boolean }): KernelCase {
  const name = `gemv ${w} k=${k} norm, rope ${o.style} ${o.heads}x${o.hd}/${o.rot} f16 at pos ${o.pos} of ${o.cap}, dot n=${o.n} residual, ${o.gelu ? "gelu" : "silu"}_mul n=${o.ffn}${o.tune ? ` ${JSON.stringify(o.tune)}` : ""}`;
  const nr = o.heads * o.hd;
  const freqs = Float32Array.from({ length: o.rot / 2 }, (_, i) => Math.fround(Math.pow(10000, -(2 * i) / o.rot)));
  const vals: Float64Array[] = [];
  const inputs = memo(() => {
    const rng = new Rng(name);
    const x = rng.f32(k, -2, 2), g = rng.f32(k, 0.5, 1.5);
    const mats = [nr, o.n, o.ffn, o.ffn].map((n) => (w in BLOCK ? blockRows(rng, w as BlockDType, n * k) : floats(rng, w as "f32" | "f16" | "bf16", n * k)));
    vals.push(...mats.map((m) => m.values));
    return [
      bytes(x), bytes(g),
      mats[0].bytes, bytes(rng.f32(nr)), bytes(freqs), u32b([o.pos]), bytes(new Uint16Array(o.cap * nr).fill(0x7e00)),
      mats[1].bytes, bytes(rng.f32(o.n)), bytes(new Float32Array(o.n).fill(NaN)),
      mats[2].bytes, mats[3].bytes, bytes(new Float32Array(o.ffn).fill(NaN)),
    ];
  });
  const fault = o.pos >= o.cap;
  return {
    name: fault ? `${name} (fault)` : name,
    forced: o.tune !== undefined,
    fault: fault ? lib.FAULT.UPDATE_POS : undefined,
    make: (caps) => lib.gemv(caps, {
      k, w, norm: { eps: 1e-5, weight: "f32" }, tune: o.tune,
      parts: [
        { n: nr, kind: "rope", bias: true, rope: { hd: o.hd, rot: o.rot, style: o.style }, out: "f16", cap: o.cap },
        { n: o.n, residual: true },
        { n: o.ffn, kind: "silu_mul", gelu: o.gelu },
      ],
    }),
    inputs,
    expect(ins) {
      if (fault) return [];
      const x = asF32(ins[0]), g = asF32(ins[1]), bias = asF32(ins[3]), res = asF32(ins[8]);
      let ss = 0;
      for (let j = 0; j < k; j++) ss += x[j] * x[j];
      const r = 1 / Math.sqrt(ss / k + 1e-5);
      const dot = (m: number, row: number): [number, number] => {
        let s = 0, a = 0;
        for (let j = 0; j < k; j++) {
          const t = x[j] * g[j] * vals[m][row * k + j];
          s += t;
          a += Math.abs(t);
        }
        return [s * r, a * r];
      };
      const tol = { abs: 1e-5, rel: (k + 16) * 4 * EPS };
      // rope part (f16 cache row at pos; the other rows keep their NaN fill)
      const cache = new Float64Array(o.cap * nr).fill(NaN), cmag = new Float64Array(o.cap * nr);
      const at = o.pos * nr;
      for (let h = 0; h < o.heads; h++) {
        for (let i = 0; i < o.hd / 2; i++) {
          const base = h * o.hd;
          const rotd = i < o.rot / 2;
          const ia = base + (o.style === "half" && rotd ? i : 2 * i), ib = o.style === "half" && rotd ? ia + o.rot / 2 : ia + 1;
          const [d0, m0] = dot(0, ia), [d1, m1] = dot(0, ib);
          const x0 = d0 + bias[ia], x1 = d1 + bias[ib];
          const ang = Math.fround(o.pos * freqs[i]);
          const [c, sn] = rotd ? [Math.cos(ang), Math.sin(ang)] : [1, 0];
          cache[at + ia] = x0 * c - x1 * sn;
          cache[at + ib] = x0 * sn + x1 * c;
          cmag[at + ia] = cmag[at + ib] = m0 + m1 + Math.abs(bias[ia]) + Math.abs(bias[ib]) + 2048 * (Math.abs(x0) + Math.abs(x1)) * EPS;
        }
      }
      const dw = new Float64Array(o.n), dm = new Float64Array(o.n);
      for (let i = 0; i < o.n; i++) {
        const [d, m] = dot(1, i);
        dw[i] = d + res[i];
        dm[i] = m + Math.abs(res[i]);
      }
      const sw = new Float64Array(o.ffn), sm = new Float64Array(o.ffn);
      for (let i = 0; i < o.ffn; i++) {
        const [a, ma] = dot(2, i), [b, mb] = dot(3, i);
        // silu(a) = a·sigmoid(a); GeGLU's tanh GELU = a·(1 + tanh(√(2/π)(a + 0.044715a³)))/2. Both slopes stay below 1.2.
        const sg = o.gelu ? (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (a + 0.044715 * a * a * a))) / 2 : 1 / (1 + Math.exp(-a));
        sw[i] = a * sg * b;
        sm[i] = (1.2 * ma * Math.abs(b) + mb * Math.abs(a * sg)) * 2 + Math.abs(sw[i]) * 16 * EPS;
      }
      return [
        { binding: 6, type: "f16", want: cache, mag: cmag, tol: { abs: 1e-5, rel: tol.rel + 2 ** -11 } },
        { binding: 9, type: "f32", want: dw, mag: dm, tol },
        { binding: 12, type: "f32", want: sw, mag: sm, tol },
      ];
    },
  };
}
