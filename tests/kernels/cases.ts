// The kernel library's conformance set: every library kernel over several shapes (odd sizes included), each
// with deterministic inputs and a straightforward float64 TypeScript reference. Renderers for other targets
// run the same cases on their devices (see harness.ts: runCase + checkCase) and compare with the reference;
// the JS device runs them in tests/kernels/lib_*.test.ts.
//
// Tolerance (float outputs): |got - want| <= abs + rel * mag[i], where mag[i] is the magnitude the result is
// built from (sum of |terms| for dot products, |want| otherwise) and rel covers f32 rounding of the kernel's
// reassociation (k * 2^-23 for a k-term sum, a few ulps for transcendental ops). NaN or Inf where the
// reference is finite fails at any tolerance. Integer and movement outputs are exact.
import type { Kernel } from "../../kernels/ir.ts";
import type { Caps } from "../../kernels/target.ts";
import * as lib from "../../kernels/lib/mod.ts";
import { BLOCK, type BlockDType, dequantize } from "../../graph/dtype.ts";
import { quantizeBlocks } from "../../llm/formats/ggml-quants.ts";
import {
  asF32, bytes, decode, floats, halfToNum, matmulWant, numToHalf, q4Rows, q8Rows, Rng, zeros,
} from "./data.ts";

export interface Expect {
  /** Which binding to read back. */
  binding: number;
  type: "f32" | "f16" | "bf16" | "u32" | "i32";
  want: ArrayLike<number>;
  /** Absent: exact. */
  tol?: { abs: number; rel: number };
  mag?: ArrayLike<number>;
}
export interface KernelCase {
  /** Unique and descriptive, e.g. "matmul q8_0 n=33 k=64 batch=3". */
  name: string;
  make(caps: Caps): Kernel;
  /** Initial bytes of every binding, in binding order (outputs included), each a multiple of 16 bytes. */
  inputs(): Uint8Array[];
  /** The reference results for these inputs. Empty for fault cases. */
  expect(inputs: Uint8Array[]): Expect[];
  /** A fault case: the dispatch must raise KernelFault with this code. */
  fault?: number;
  /** The kernel takes a tuning the library would not choose for it (a GemvTune given). */
  forced?: boolean;
}

const EPS = 2 ** -24;
const u32b = (v: number[]) => bytes(Uint32Array.from(v));
const i32b = (v: number[]) => bytes(Int32Array.from(v));
/** Caches inputs per case so expect() and the run see the same bytes. */
function memo(f: () => Uint8Array[]): () => Uint8Array[] {
  let v: Uint8Array[] | undefined;
  return () => (v ??= f()).map((b) => b.slice());
}

// ---- matmul ------------------------------------------------------------------------------------------
/** lib.matmul, or with `tiled` lib.tiledMatmul (the same bindings and reference). */
function matmulCase(w: lib.WType, n: number, k: number, batch: number, bias = false, residual = false, tiled = false): KernelCase {
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
function gemvCase(w: "f32" | "f16" | "bf16" | BlockDType, k: number, o: { hd: number; heads: number; rot: number; style: "half" | "adjacent"; n: number; ffn: number; cap: number; pos: number; tune?: Partial<lib.GemvTune>; gelu?: boolean }): KernelCase {
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

// ---- attention ---------------------------------------------------------------------------------------
export interface AttnCfg { rows: number; heads: number; kvHeads: number; hd: number; cap: number; pos: number; kv?: "f32" | "f16" | "bf16"; pt?: "u32" | "i32"; window?: number; softcap?: number }
export function attentionCase(c: AttnCfg, fault = false): KernelCase {
  const kv = c.kv ?? "f32", pt = c.pt ?? "u32";
  const name = `attention rows=${c.rows} heads=${c.heads}/${c.kvHeads} hd=${c.hd} cap=${c.cap} pos=${c.pos} ${kv} ${pt}${c.window ? ` window=${c.window}` : ""}${c.softcap ? ` softcap=${c.softcap}` : ""}${fault ? " (fault)" : ""}`;
  let kvals: Float64Array, vvals: Float64Array;
  const inputs = memo(() => {
    const rng = new Rng(name);
    const q = rng.f32(c.rows * c.heads * c.hd, -2, 2);
    const K = floats(rng, kv, c.cap * c.kvHeads * c.hd, -2, 2), V = floats(rng, kv, c.cap * c.kvHeads * c.hd);
    kvals = K.values;
    vvals = V.values;
    return [bytes(q), K.bytes, V.bytes, pt === "u32" ? u32b([c.pos]) : i32b([c.pos]), bytes(new Float32Array(c.rows * c.heads * c.hd).fill(NaN))];
  });
  return {
    name,
    fault: fault ? lib.FAULT.ATTENTION_POS : undefined,
    make: (caps) => lib.attention(caps, { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv, pos: pt, window: c.window, softcap: c.softcap }),
    inputs,
    expect(ins) {
      if (fault) return [];
      const q = asF32(ins[0]);
      const { rows, heads, kvHeads, hd, cap, pos } = c;
      const scale = Math.fround(1 / Math.sqrt(hd));
      const want = new Float64Array(rows * heads * hd), mag = new Float64Array(rows * heads * hd);
      const sc = new Float64Array(cap);
      for (let r = 0; r < rows; r++) {
        for (let h = 0; h < heads; h++) {
          const g = Math.floor(h / (heads / kvHeads)), qo = (r * heads + h) * hd;
          let mx = -Infinity;
          for (let p = 0; p < cap; p++) { // the whole [cap] sweep with the mask, as the graph defines it
            let s = 0;
            for (let d = 0; d < hd; d++) s += q[qo + d] * kvals[(p * kvHeads + g) * hd + d];
            const capped = c.softcap ? c.softcap * Math.tanh((s * scale) / c.softcap) : s * scale;
            sc[p] = p <= pos + r && !(c.window && p <= pos + r - c.window) ? capped : -Infinity;
            mx = Math.max(mx, sc[p]);
          }
          let sum = 0;
          for (let p = 0; p < cap; p++) sum += (sc[p] = Math.exp(sc[p] - mx));
          for (let d = 0; d < hd; d++) {
            let o = 0, m = 0;
            for (let p = 0; p < cap; p++) {
              const v = vvals[(p * kvHeads + g) * hd + d];
              o += sc[p] * v;
              m += sc[p] * Math.abs(v);
            }
            want[qo + d] = o / sum;
            mag[qo + d] = m / sum;
          }
        }
      }
      return [{ binding: 4, type: "f32", want, mag, tol: { abs: 1e-6, rel: 3e-5 + (hd + c.cap) * 4 * EPS } }];
    },
  };
}

/** Split-K phase 1: the partial [m, l, acc] of each chunk, against the same masked scores. */
function attentionPartialCase(c: AttnCfg, splits: number, prefetch = false): KernelCase {
  const full = attentionCase(c);
  const name = `attention_partial rows=${c.rows} heads=${c.heads}/${c.kvHeads} hd=${c.hd} cap=${c.cap} pos=${c.pos} splits=${splits} ${c.kv ?? "f32"}${c.window ? ` window=${c.window}` : ""}${prefetch ? " prefetch" : ""}`;
  const kv = c.kv ?? "f32";
  let trip = 1; // the kernel's positions per loop trip on the caps it was made for (the chunking follows it)
  return {
    name,
    make: (caps) => {
      const shape = { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv, pos: c.pt ?? "u32", splits, window: c.window, prefetch };
      trip = lib.attentionTrip(caps, shape);
      return lib.attentionPartial(caps, shape);
    },
    inputs: () => {
      const ins = full.inputs();
      ins[4] = bytes(new Float32Array(c.rows * c.heads * splits * (c.hd + 2)).fill(NaN));
      return ins;
    },
    expect(ins) {
      const { rows, heads, kvHeads, hd, cap, pos } = c;
      const q = asF32(ins[0]), K = decode(kv, ins[1], cap * kvHeads * hd), V = decode(kv, ins[2], cap * kvHeads * hd);
      const scale = Math.fround(1 / Math.sqrt(hd)), st = hd + 2;
      const want = new Float64Array(rows * heads * splits * st), mag = new Float64Array(want.length);
      for (let r = 0; r < rows; r++) {
        for (let h = 0; h < heads; h++) {
          const g = Math.floor(h / (heads / kvHeads)), qo = (r * heads + h) * hd;
          for (let sp = 0; sp < splits; sp++) {
            const o = ((r * heads + h) * splits + sp) * st;
            // Row r sees positions 0 .. pos + r (with a window from end - window), in `live` shares of
            // ceil(len / live): as many chunks as hold a whole trip of positions each, at most `splits`.
            const end = pos + r + 1, first = c.window ? Math.max(0, end - c.window) : 0, len = end - first;
            const live = Math.min(splits, Math.max(1, Math.ceil(len / trip))), share = Math.ceil(len / live);
            const lo = Math.min(end, first + sp * share), hi = Math.min(end, lo + share);
            const sc: number[] = [], sm: number[] = [];
            for (let p = lo; p < hi; p++) {
              let d = 0, a = 0;
              for (let j = 0; j < hd; j++) {
                d += q[qo + j] * K[(p * kvHeads + g) * hd + j];
                a += Math.abs(q[qo + j] * K[(p * kvHeads + g) * hd + j]);
              }
              sc.push(d * scale);
              sm.push(a * scale);
            }
            const m = sc.length ? Math.max(...sc) : -Infinity;
            want[o] = m;
            mag[o] = sc.length ? sm[sc.indexOf(m)] : 0;
            let l = 0;
            for (let i = 0; i < sc.length; i++) l += Math.exp(sc[i] - m);
            want[o + 1] = l;
            mag[o + 1] = l * (1 + Math.max(0, ...sm));
            for (let j = 0; j < hd; j++) {
              let a = 0, am = 0;
              for (let i = 0; i < sc.length; i++) {
                const v = V[((lo + i) * kvHeads + g) * hd + j];
                a += Math.exp(sc[i] - m) * v;
                am += Math.exp(sc[i] - m) * Math.abs(v);
              }
              want[o + 2 + j] = a;
              mag[o + 2 + j] = am * (1 + Math.max(0, ...sm));
            }
          }
        }
      }
      return [{ binding: 4, type: "f32", want, mag, tol: { abs: 1e-6, rel: 2e-5 + (hd + Math.ceil(cap / splits)) * 4 * EPS } }];
    },
  };
}
/** Split-K phase 2 on given partials, empty chunks (m = -inf) included. */
function attentionCombineCase(items: number, hd: number, splits: number): KernelCase {
  const name = `attention_combine items=${items} hd=${hd} splits=${splits}`;
  const st = hd + 2;
  const inputs = memo(() => {
    const rng = new Rng(name);
    const part = new Float32Array(items * splits * st);
    for (let i = 0; i < items; i++) {
      const used = 1 + rng.int(splits); // chunks past the context are empty
      for (let sp = 0; sp < splits; sp++) {
        const o = (i * splits + sp) * st;
        if (sp >= used) {
          part[o] = -Infinity;
          continue;
        }
        part[o] = rng.uniform(-5, 5);
        part[o + 1] = rng.uniform(1, 30);
        for (let j = 0; j < hd; j++) part[o + 2 + j] = rng.uniform(-10, 10);
      }
    }
    return [bytes(part), bytes(new Float32Array(items * hd).fill(NaN))];
  });
  return {
    name,
    make: (caps) => lib.attentionCombine(caps, { heads: items, hd, splits }),
    inputs,
    expect(ins) {
      const p = asF32(ins[0]);
      const want = new Float64Array(items * hd), mag = new Float64Array(items * hd);
      for (let i = 0; i < items; i++) {
        let M = -Infinity;
        for (let sp = 0; sp < splits; sp++) M = Math.max(M, p[(i * splits + sp) * st]);
        let L = 0;
        for (let sp = 0; sp < splits; sp++) L += Math.exp(p[(i * splits + sp) * st] - M) * p[(i * splits + sp) * st + 1];
        for (let j = 0; j < hd; j++) {
          let o = 0, m = 0;
          for (let sp = 0; sp < splits; sp++) {
            const w = Math.exp(p[(i * splits + sp) * st] - M), a = p[(i * splits + sp) * st + 2 + j];
            o += w * a;
            m += w * Math.abs(a);
          }
          want[i * hd + j] = o / L;
          mag[i * hd + j] = m / L;
        }
      }
      return [{ binding: 1, type: "f32", want, mag, tol: { abs: 1e-6, rel: 1e-5 + splits * 4 * EPS } }];
    },
  };
}

// ---- norms, softmax, argmax --------------------------------------------------------------------------
function rmsnormCase(rows: number, n: number, weight: "f32" | "f16" | "bf16" | null): KernelCase {
  const name = `rmsnorm rows=${rows} n=${n} weight=${weight}`;
  const eps = 1e-5;
  let wv: Float64Array | undefined;
  const inputs = memo(() => {
    const rng = new Rng(name);
    const out = [bytes(rng.f32(rows * n, -3, 3))];
    if (weight) {
      const f = floats(rng, weight, n, 0.5, 1.5);
      wv = f.values;
      out.push(f.bytes);
    }
    out.push(zeros(rows * n * 4));
    return out;
  });
  return {
    name,
    make: (caps) => lib.rmsnorm(caps, { rows, n, eps, weight }),
    inputs,
    expect(ins) {
      const x = asF32(ins[0]);
      const want = new Float64Array(rows * n);
      for (let r = 0; r < rows; r++) {
        let ss = 0;
        for (let i = 0; i < n; i++) ss += x[r * n + i] ** 2;
        const inv = 1 / Math.sqrt(ss / n + Math.fround(eps));
        for (let i = 0; i < n; i++) want[r * n + i] = x[r * n + i] * inv * (wv ? wv[i] : 1);
      }
      return [{ binding: ins.length - 1, type: "f32", want, tol: { abs: 1e-6, rel: 1e-5 + n * 2 * EPS } }];
    },
  };
}
function layernormCase(rows: number, n: number, bias: boolean): KernelCase {
  const name = `layernorm rows=${rows} n=${n}${bias ? " bias" : ""}`;
  const eps = 1e-5;
  const inputs = memo(() => {
    const rng = new Rng(name);
    const out = [bytes(rng.f32(rows * n, -2, 4)), bytes(rng.f32(n, 0.5, 1.5))];
    if (bias) out.push(bytes(rng.f32(n)));
    out.push(zeros(rows * n * 4));
    return out;
  });
  return {
    name,
    make: (caps) => lib.layernorm(caps, { rows, n, eps, weight: "f32", bias }),
    inputs,
    expect(ins) {
      const x = asF32(ins[0]), w = asF32(ins[1]), bb = bias ? asF32(ins[2]) : undefined;
      const want = new Float64Array(rows * n), mag = new Float64Array(rows * n);
      for (let r = 0; r < rows; r++) {
        let s = 0;
        for (let i = 0; i < n; i++) s += x[r * n + i];
        const mean = s / n;
        let v = 0;
        for (let i = 0; i < n; i++) v += (x[r * n + i] - mean) ** 2;
        const inv = 1 / Math.sqrt(v / n + Math.fround(eps));
        for (let i = 0; i < n; i++) {
          want[r * n + i] = (x[r * n + i] - mean) * inv * w[i] + (bb ? bb[i] : 0);
          mag[r * n + i] = (Math.abs(x[r * n + i]) + Math.abs(mean)) * inv * w[i] + (bb ? Math.abs(bb[i]) : 0);
        }
      }
      return [{ binding: ins.length - 1, type: "f32", want, mag, tol: { abs: 1e-6, rel: 1e-5 + n * 4 * EPS } }];
    },
  };
}
function softmaxCase(rows: number, n: number): KernelCase {
  const name = `softmax rows=${rows} n=${n}`;
  const inputs = memo(() => [bytes(new Rng(name).f32(rows * n, -8, 8)), zeros(rows * n * 4)]);
  return {
    name,
    make: (caps) => lib.softmax(caps, { rows, n }),
    inputs,
    expect(ins) {
      const x = asF32(ins[0]);
      const want = new Float64Array(rows * n);
      for (let r = 0; r < rows; r++) {
        let m = -Infinity, s = 0;
        for (let i = 0; i < n; i++) m = Math.max(m, x[r * n + i]);
        for (let i = 0; i < n; i++) s += Math.exp(x[r * n + i] - m);
        for (let i = 0; i < n; i++) want[r * n + i] = Math.exp(x[r * n + i] - m) / s;
      }
      return [{ binding: 1, type: "f32", want, tol: { abs: 1e-9, rel: 2e-5 + n * 2 * EPS } }];
    },
  };
}
function argmaxCase(rows: number, n: number, special: "ties" | "nan" | "plain", out: "u32" | "i32" = "u32"): KernelCase {
  const name = `argmax rows=${rows} n=${n} ${special} ${out}`;
  const inputs = memo(() => {
    const rng = new Rng(name);
    const x = rng.f32(rows * n, -4, 4);
    if (special === "ties") {
      for (let r = 0; r < rows; r++) { // the max appears several times, late copies must lose
        const a = rng.int(n), b2 = rng.int(n), c = rng.int(n);
        x[r * n + a] = x[r * n + b2] = x[r * n + c] = 7;
        if (r % 2) x.fill(-Infinity, r * n, r * n + n);
      }
    }
    if (special === "nan") {
      for (let r = 0; r < rows; r++) {
        x[r * n + rng.int(n)] = 9;
        if (r % 2 === 0) x[r * n + rng.int(n)] = NaN;
      }
    }
    return [bytes(x), zeros(rows * 4)];
  });
  return {
    name,
    make: (caps) => lib.argmax(caps, { rows, n, out }),
    inputs,
    expect(ins) {
      const x = asF32(ins[0]);
      const want: number[] = [];
      for (let r = 0; r < rows; r++) {
        let bi = -1;
        for (let i = 0; i < n; i++) {
          const v = x[r * n + i];
          if (Number.isNaN(v)) {
            bi = i;
            break;
          }
          if (bi < 0 || v > x[r * n + bi]) bi = i;
        }
        want.push(bi);
      }
      return [{ binding: 1, type: out, want }];
    },
  };
}

// ---- rope ----------------------------------------------------------------------------------------------
interface RopeCfg { rows: number; heads: number; hd: number; style: "adjacent" | "half"; pos: number; rot?: number; table?: boolean; rowPos?: boolean; pt?: "u32" | "i32"; headsPer?: number }
function ropeCase(c: RopeCfg, fault = false): KernelCase {
  const theta = 10000, rot = c.rot ?? c.hd, pt = c.pt ?? "u32";
  const name = `rope ${c.style} rows=${c.rows} heads=${c.heads} hd=${c.hd} rot=${rot} pos=${c.pos}${c.table ? " table" : ""}${c.rowPos ? " per-row" : ""}${c.headsPer ? ` ${c.headsPer} heads a thread` : ""} ${pt}${fault ? " (fault)" : ""}`;
  const positions = Array.from({ length: c.rows }, (_, r) => c.rowPos ? c.pos + 3 * r + (r % 2) : c.pos + r);
  const freqs = Float32Array.from({ length: rot / 2 }, (_, i) => Math.fround(Math.pow(Math.fround(theta), Math.fround(-Math.fround(2 * i) / rot))));
  const inputs = memo(() => {
    const rng = new Rng(name);
    const x = rng.f32(c.rows * c.heads * c.hd, -2, 2);
    const pv = c.rowPos ? positions : [c.pos];
    const out = [bytes(x), pt === "u32" ? u32b(pv) : i32b(pv)];
    if (c.table) out.push(bytes(freqs));
    out.push(zeros(x.byteLength));
    return out;
  });
  return {
    name,
    fault: fault ? lib.FAULT.ROPE_POS : undefined,
    make: (caps) => lib.rope(caps, { rows: c.rows, heads: c.heads, hd: c.hd, theta, style: c.style, rot, pos: pt, positions: c.rowPos ? "rows" : "base", freqs: c.table, headsPer: c.headsPer }),
    inputs,
    expect(ins) {
      if (fault) return [];
      const x = asF32(ins[0]);
      const want = Float64Array.from(x), mag = Float64Array.from(x, Math.abs);
      for (let r = 0; r < c.rows; r++) {
        for (let h = 0; h < c.heads; h++) {
          const base = (r * c.heads + h) * c.hd;
          for (let i = 0; i < rot / 2; i++) {
            const a = base + (c.style === "adjacent" ? 2 * i : i), b = c.style === "adjacent" ? a + 1 : a + rot / 2;
            const ang = Math.fround(positions[r] * freqs[i]);
            const co = Math.cos(ang), si = Math.sin(ang);
            want[a] = x[a] * co - x[b] * si;
            want[b] = x[a] * si + x[b] * co;
            mag[a] = mag[b] = Math.abs(x[a]) + Math.abs(x[b]);
          }
        }
      }
      return [{ binding: ins.length - 1, type: "f32", want, mag, tol: { abs: 1e-6, rel: 2e-6 * Math.max(1, c.pos + 3 * c.rows) + 8 * EPS } }];
    },
  };
}

// ---- elementwise ---------------------------------------------------------------------------------------
function erf(x: number): number { // Taylor series; |x| <= 4 keeps the cancellation under 1e-9
  if (Math.abs(x) > 4) return Math.sign(x);
  let term = x, sum = x;
  for (let n = 1; n < 200; n++) {
    term *= -x * x / n;
    sum += term / (2 * n + 1);
  }
  return sum * 2 / Math.sqrt(Math.PI);
}
type Ref = (...a: number[]) => number;
function ewCase(label: string, make: (caps: Caps) => Kernel, n: number, nIn: number, ref: Ref, opts: { lenB?: number; lo?: number; hi?: number; abs?: number } = {}): KernelCase {
  const name = `${label} n=${n}${opts.lenB ? ` broadcast=${opts.lenB}` : ""}`;
  const inputs = memo(() => {
    const rng = new Rng(name);
    const ins = Array.from({ length: nIn }, (_, i) => bytes(rng.f32(i === 1 && opts.lenB ? opts.lenB : n, opts.lo ?? -4, opts.hi ?? 4)));
    return [...ins, zeros(n * 4)];
  });
  return {
    name,
    make,
    inputs,
    expect(ins) {
      const xs = ins.slice(0, nIn).map(asF32);
      const want = new Float64Array(n);
      for (let i = 0; i < n; i++) want[i] = ref(...xs.map((x) => x[i % (x === xs[1] && opts.lenB ? opts.lenB : n)]));
      return [{ binding: nIn, type: "f32", want, tol: { abs: opts.abs ?? 1e-7, rel: 1e-5 } }];
    },
  };
}
const sig = (x: number) => 1 / (1 + Math.exp(-x));
function genericCases(): KernelCase[] {
  const n = 37;
  const fl: lib.EwExpr = { op: "add", args: [{ op: "select", args: [{ op: "gt", args: [{ in: 0 }, { in: 1 }] }, { op: "mul", args: [{ in: 0 }, { in: 1 }] }, { op: "sub", args: [{ in: 0 }, { op: "sqrt", args: [{ op: "abs", args: [{ in: 1 }] }] }] }] }, 0.5] };
  const floatCase = ewCase("elementwise select/sqrt", (caps) => lib.elementwise(caps, { n, inputs: [{ type: "f32" }, { type: "f32" }], out: "f32", expr: fl, name: "ew_generic_f32" }), n, 2,
    (a, b) => (a > b ? a * b : a - Math.sqrt(Math.abs(b))) + 0.5);
  // integers: (a * 3 + b) ^ 5 with an f16 input cast in, out i32; mixed storage types and a broadcast scalar
  const name = "elementwise int/f16 mix n=40";
  const inputs = memo(() => {
    const rng = new Rng(name);
    const a = Int32Array.from({ length: 40 }, () => rng.int(2000) - 1000);
    const h = Uint16Array.from({ length: 40 }, () => numToHalf(rng.uniform(-50, 50)));
    return [bytes(a), bytes(h), i32b([7]), zeros(160)];
  });
  const ie: lib.EwExpr = { op: "xor", args: [{ op: "add", args: [{ op: "mul", args: [{ in: 0 }, { c: 3, t: "i32" }] }, { cast: "i32", a: { in: 1 } }] }, { in: 2 }] };
  const intCase: KernelCase = {
    name,
    make: (caps) => lib.elementwise(caps, { n: 40, inputs: [{ type: "i32" }, { type: "f16" }, { type: "i32", len: 1 }], out: "i32", expr: ie, name: "ew_generic_int" }),
    inputs,
    expect(ins) {
      const a = new Int32Array(ins[0].buffer), h = new Uint16Array(ins[1].buffer);
      return [{ binding: 3, type: "i32", want: Array.from({ length: 40 }, (_, i) => ((a[i] * 3 + Math.trunc(halfToNum(h[i]))) ^ 7)) }];
    },
  };
  return [floatCase, intCase];
}

// ---- movement --------------------------------------------------------------------------------------
function updateSliceCase(rows: number, width: number, cap: number, pos: number, dst: "f32" | "f16" | "bf16", pt: "u32" | "i32", fault = false): KernelCase {
  const name = `update_slice rows=${rows} width=${width} cap=${cap} pos=${pos} dst=${dst} ${pt}${fault ? " (fault)" : ""}`;
  const src = dst === "f32" ? "f32" : dst; // same storage: the cache write copies what the step computed
  const inputs = memo(() => {
    const rng = new Rng(name);
    const s = floats(rng, src, rows * width), d = floats(rng, dst, cap * width);
    return [s.bytes, pt === "u32" ? u32b([pos]) : i32b([pos]), d.bytes];
  });
  return {
    name,
    fault: fault ? lib.FAULT.UPDATE_POS : undefined,
    make: (caps) => lib.updateSlice(caps, { rows, width, cap, src, dst, pos: pt }),
    inputs,
    expect(ins) {
      if (fault) return [];
      const want = decode(dst, ins[2], cap * width);
      want.set(decode(src, ins[0], rows * width), pos * width);
      return [{ binding: 2, type: dst, want }];
    },
  };
}
function scatterCase(rows: number, width: number, cap: number, it: "u32" | "i32", bad = false): KernelCase {
  const name = `scatter rows=${rows} width=${width} cap=${cap} ${it}${bad ? " (fault)" : ""}`;
  let idx: number[] = [];
  const inputs = memo(() => {
    const rng = new Rng(name);
    const perm = Array.from({ length: cap }, (_, i) => i);
    for (let i = cap - 1; i > 0; i--) {
      const j = rng.int(i + 1);
      [perm[i], perm[j]] = [perm[j], perm[i]];
    }
    idx = perm.slice(0, rows);
    if (bad) idx[rows - 1] = it === "i32" ? -1 : cap;
    return [bytes(rng.f32(rows * width)), it === "u32" ? u32b(idx) : i32b(idx), bytes(rng.f32(cap * width))];
  });
  return {
    name,
    fault: bad ? lib.FAULT.SCATTER_INDEX : undefined,
    make: (caps) => lib.scatter(caps, { rows, width, cap, index: it }),
    inputs,
    expect(ins) {
      if (bad) return [];
      const src = asF32(ins[0]), want = Float64Array.from(asF32(ins[2]).subarray(0, cap * width));
      idx.forEach((to, r) => want.set(src.subarray(r * width, r * width + width), to * width));
      return [{ binding: 2, type: "f32", want }];
    },
  };
}
function gatherCase(table: lib.WType, rows: number, width: number, vocab: number, it: "u32" | "i32", bad = false): KernelCase {
  const name = `gather ${table} rows=${rows} width=${width} vocab=${vocab} ${it}${bad ? " (fault)" : ""}`;
  let tv: Float64Array, ids: number[] = [];
  const inputs = memo(() => {
    const rng = new Rng(name);
    let tb: Uint8Array;
    if (table === "q8_0" || table === "q4_0") {
      const q = table === "q8_0" ? q8Rows(rng, vocab, width) : q4Rows(rng, vocab, width);
      tb = bytes(q.bytes);
      tv = q.values;
    } else {
      const f = floats(rng, table as "f32" | "f16" | "bf16", vocab * width);
      tb = f.bytes;
      tv = f.values;
    }
    ids = Array.from({ length: rows }, (_, r) => r === 0 ? vocab - 1 : rng.int(vocab));
    if (bad) ids[rows - 1] = it === "i32" ? -5 : vocab;
    return [tb, it === "u32" ? u32b(ids) : i32b(ids), zeros(rows * width * 4)];
  });
  return {
    name,
    fault: bad ? lib.FAULT.GATHER_ID : undefined,
    make: (caps) => lib.gather(caps, { rows, width, vocab, table, ids: it }),
    inputs,
    expect() {
      if (bad) return [];
      const want = new Float64Array(rows * width);
      ids.forEach((id, r) => want.set(tv.subarray(id * width, id * width + width), r * width));
      // q types: d * q is one f32 rounding away from the exact product
      return [{ binding: 2, type: "f32", want, tol: table.startsWith("q") ? { abs: 0, rel: EPS } : undefined }];
    },
  };
}

/** Every case, in a stable order. */
export const cases: KernelCase[] = [
  ...(["f32", "f16", "bf16"] as const).flatMap((w) => [
    matmulCase(w, 1, 8, 1),
    matmulCase(w, 7, 13, 2),
    matmulCase(w, 33, 64, 3, true),
    matmulCase(w, 20, 100, 1, false, true),
    matmulCase(w, 9, 48, 11, true, true),
  ]),
  // long k with few rows: several subgroups per row on GPU-like targets (matmulWide)
  matmulCase("f32", 6, 1024, 2, true),
  matmulCase("f16", 5, 512, 1, false, true),
  matmulCase("q8_0", 3, 1024, 1),
  matmulCase("q4_0", 2, 2048, 3),
  ...(["q8_0", "q4_0"] as const).flatMap((w) => [
    matmulCase(w, 1, 32, 1),
    matmulCase(w, 33, 64, 3, true),
    matmulCase(w, 17, 160, 1, false, true),
    matmulCase(w, 12, 96, 10, true, true),
  ]),
  // the shared-memory tiled matmul (kernels/lib/tiled_matmul.ts): partial tiles in m, n and k, every weight kind
  matmulCase("f32", 67, 131, 70, true, true, true),
  matmulCase("f16", 33, 96, 64, false, false, true),
  matmulCase("bf16", 20, 64, 130, true, false, true),
  matmulCase("q8_0", 17, 96, 65, false, true, true),
  matmulCase("q4_0", 9, 64, 3, true, false, true),
  attentionCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 8, pos: 3 }),
  attentionCase({ rows: 1, heads: 2, kvHeads: 2, hd: 64, cap: 24, pos: 23 }),
  attentionCase({ rows: 1, heads: 3, kvHeads: 1, hd: 12, cap: 10, pos: 0, kv: "f16" }),
  attentionCase({ rows: 1, heads: 6, kvHeads: 3, hd: 40, cap: 17, pos: 9, kv: "bf16", pt: "i32" }),
  attentionCase({ rows: 5, heads: 4, kvHeads: 1, hd: 8, cap: 16, pos: 2 }),
  attentionCase({ rows: 3, heads: 2, kvHeads: 2, hd: 33, cap: 9, pos: 6, pt: "i32" }),
  attentionCase({ rows: 2, heads: 2, kvHeads: 1, hd: 8, cap: 8, pos: 7 }, true),
  // Sliding windows (Mistral, Gemma): a window shorter than the history, one longer, prefill rows across it.
  attentionCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 24, pos: 20, window: 5 }),
  attentionCase({ rows: 1, heads: 2, kvHeads: 1, hd: 8, cap: 16, pos: 3, window: 8 }),
  attentionCase({ rows: 6, heads: 4, kvHeads: 2, hd: 16, cap: 24, pos: 9, window: 4, kv: "f16", pt: "i32" }),
  // Soft-capped scores (Gemma 2), with and without a window.
  attentionCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 20, pos: 13, softcap: 2.5 }),
  attentionCase({ rows: 4, heads: 2, kvHeads: 1, hd: 8, cap: 16, pos: 6, softcap: 1, window: 5 }),
  attentionCase({ rows: 1, heads: 2, kvHeads: 1, hd: 8, cap: 8, pos: -1, pt: "i32" }, true),
  attentionPartialCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 40, pos: 25 }, 4),
  attentionPartialCase({ rows: 3, heads: 2, kvHeads: 1, hd: 12, cap: 24, pos: 4, kv: "f16" }, 5),
  attentionPartialCase({ rows: 2, heads: 4, kvHeads: 2, hd: 16, cap: 40, pos: 30, window: 7 }, 3),
  // each trip's successor's K/V loaded ahead (AttentionShape.prefetch): chunks of one trip, of several, a window
  attentionPartialCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 40, pos: 25 }, 4, true),
  attentionPartialCase({ rows: 3, heads: 2, kvHeads: 1, hd: 12, cap: 24, pos: 4, kv: "f16" }, 5, true),
  attentionPartialCase({ rows: 2, heads: 4, kvHeads: 2, hd: 16, cap: 90, pos: 70, window: 41, kv: "f16" }, 2, true),
  attentionCombineCase(5, 16, 4),
  attentionCombineCase(3, 9, 7),
  rmsnormCase(1, 64, "f32"),
  rmsnormCase(3, 33, "f32"),
  rmsnormCase(2, 260, "f16"),
  rmsnormCase(2, 7, "bf16"),
  rmsnormCase(2, 40, null),
  layernormCase(2, 50, true),
  layernormCase(3, 16, false),
  softmaxCase(1, 7),
  softmaxCase(3, 100),
  softmaxCase(2, 513),
  argmaxCase(1, 512, "plain"),
  argmaxCase(4, 37, "ties"),
  argmaxCase(4, 70, "nan", "i32"),
  argmaxCase(3, 1, "plain"),
  ropeCase({ rows: 1, heads: 4, hd: 16, style: "adjacent", pos: 7 }),
  ropeCase({ rows: 3, heads: 2, hd: 8, style: "half", pos: 40 }),
  ropeCase({ rows: 2, heads: 3, hd: 12, style: "half", pos: 5, rot: 8 }),
  ropeCase({ rows: 2, heads: 2, hd: 10, style: "adjacent", pos: 11, rot: 6, table: true }),
  ropeCase({ rows: 4, heads: 1, hd: 8, style: "half", pos: 2, rowPos: true, pt: "i32" }),
  ropeCase({ rows: 1, heads: 2, hd: 8, style: "adjacent", pos: -3, pt: "i32" }, true),
  // several heads a thread (prefill chunks: kernels/lib/rope.ts ropeHeadsPer), partial rotation and per-row positions
  ropeCase({ rows: 5, heads: 12, hd: 16, style: "half", pos: 30, headsPer: 4, table: true, rowPos: true }),
  ropeCase({ rows: 3, heads: 6, hd: 12, style: "adjacent", pos: 9, rot: 8, headsPer: 3 }),
  ropeCase({ rows: 2, heads: 8, hd: 64, style: "half", pos: 1500, headsPer: 8, pt: "i32" }),
  ewCase("silu", (caps) => lib.silu(caps, 64), 64, 1, (x) => x * sig(x)),
  ewCase("silu", (caps) => lib.silu(caps, 31), 31, 1, (x) => x * sig(x)),
  ewCase("gelu tanh", (caps) => lib.gelu(caps, 45), 45, 1,
    (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)))),
  ewCase("gelu erf", (caps) => lib.gelu(caps, 44, true), 44, 1, (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)), { abs: 4e-7 }),
  ewCase("silu_mul", (caps) => lib.siluMul(caps, 100), 100, 2, (g, u) => g * sig(g) * u),
  ewCase("add", (caps) => lib.add(caps, 19), 19, 2, (a, b) => a + b),
  ewCase("add", (caps) => lib.add(caps, 24, 6), 24, 2, (a, b) => a + b, { lenB: 6 }),
  ewCase("mul", (caps) => lib.mul(caps, 21, 7), 21, 2, (a, b) => a * b, { lenB: 7 }),
  ...genericCases(),
  gemvCase("bf16", 64, { hd: 16, heads: 2, rot: 16, style: "half", n: 7, ffn: 12, cap: 5, pos: 3 }),
  gemvCase("f16", 200, { hd: 12, heads: 2, rot: 8, style: "adjacent", n: 33, ffn: 5, cap: 4, pos: 0, tune: { rows: 1, unroll: 2 } }),
  gemvCase("f32", 300, { hd: 8, heads: 1, rot: 6, style: "half", n: 9, ffn: 3, cap: 3, pos: 2, tune: { lanes: 64 } }),
  gemvCase("bf16", 64, { hd: 16, heads: 2, rot: 16, style: "half", n: 7, ffn: 12, cap: 5, pos: 3, gelu: true }),
  gemvCase("bf16", 64, { hd: 16, heads: 2, rot: 16, style: "half", n: 7, ffn: 12, cap: 5, pos: 5 }),
  // Block weights: several row units per team (3: the last team repeats a unit and must not add the residual
  // twice), teams of several subgroups, and the defaults.
  gemvCase("q4_k", 512, { hd: 16, heads: 3, rot: 12, style: "half", n: 7, ffn: 5, cap: 3, pos: 1, tune: { rows: 3, lanes: 64 } }),
  gemvCase("q6_k", 256, { hd: 8, heads: 2, rot: 8, style: "adjacent", n: 9, ffn: 4, cap: 2, pos: 0, tune: { rows: 4, lanes: 32 } }),
  gemvCase("q6_k", 512, { hd: 8, heads: 1, rot: 8, style: "half", n: 5, ffn: 3, cap: 2, pos: 1 }),
  gemvCase("q8_0", 96, { hd: 8, heads: 1, rot: 8, style: "half", n: 5, ffn: 3, cap: 2, pos: 1 }),
  gemvCase("q8_0", 192, { hd: 8, heads: 2, rot: 8, style: "adjacent", n: 7, ffn: 4, cap: 2, pos: 1, tune: { rows: 3, lanes: 32 } }),
  gemvCase("q5_k", 256, { hd: 8, heads: 2, rot: 8, style: "half", n: 6, ffn: 3, cap: 2, pos: 1, tune: { rows: 2 } }),
  gemvCase("q4_0", 64, { hd: 8, heads: 1, rot: 8, style: "adjacent", n: 3, ffn: 3, cap: 2, pos: 0, tune: { rows: 5, lanes: 16 } }),
  gemvCase("f16", 200, { hd: 12, heads: 2, rot: 8, style: "adjacent", n: 33, ffn: 5, cap: 4, pos: 0, tune: { rows: 1, unroll: 2 }, gelu: true }),
  updateSliceCase(1, 32, 16, 5, "f32", "u32"),
  updateSliceCase(3, 12, 8, 5, "f16", "i32"),
  updateSliceCase(2, 7, 9, 0, "bf16", "u32"),
  updateSliceCase(2, 8, 8, 7, "f32", "u32", true),
  updateSliceCase(1, 8, 8, -1, "f32", "i32", true),
  scatterCase(3, 16, 8, "u32"),
  scatterCase(4, 5, 6, "i32"),
  scatterCase(2, 4, 4, "u32", true),
  scatterCase(2, 4, 4, "i32", true),
  ...(["f32", "f16", "bf16", "q8_0", "q4_0"] as const).map((t) => gatherCase(t, 3, t.startsWith("q") ? 64 : 20, 11, "u32")),
  gatherCase("f32", 2, 9, 5, "i32"),
  gatherCase("f16", 2, 8, 5, "u32", true),
  gatherCase("q8_0", 2, 32, 5, "i32", true),
];
