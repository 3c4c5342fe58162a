// Decode attention cases: one kernel, split-K partials and their combine. (tests/kernels/cases.ts lists them; its header says how they are checked.)
import * as lib from "../../../kernels/lib/mod.ts";
import { asF32, bytes, decode, floats, Rng } from "../data.ts";
import { EPS, u32b, i32b, memo, type KernelCase } from "./common.ts";

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
export function attentionPartialCase(c: AttnCfg, splits: number, prefetch = false): KernelCase {
  const full = attentionCase(c);
  const name = `attention_partial rows=${c.rows} heads=${c.heads}/${c.kvHeads} hd=${c.hd} cap=${c.cap} pos=${c.pos} splits=${splits} ${c.kv ?? "f32"}${c.window ? ` window=${c.window}` : ""}${prefetch ? " prefetch" : ""}`;
  const kv = c.kv ?? "f32";
  let cut: lib.Chunking = { trip: 1, step: 1, spread: 1, tail: 1 }; // the kernel's chunking on the caps it was made for
  return {
    name,
    make: (caps) => {
      const shape = { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv, pos: c.pt ?? "u32", splits, window: c.window, prefetch };
      cut = lib.attentionChunking(caps, shape);
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
            // ceil(len / live): as many chunks as hold a whole trip of positions each, or spread at a slot of
            // positions each over up to a workgroup's teams, at most `splits`.
            const end = pos + r + 1, first = c.window ? Math.max(0, end - c.window) : 0, len = end - first;
            const live = lib.liveChunks(len, splits, cut), share = Math.ceil(len / live);
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
export function attentionCombineCase(items: number, hd: number, splits: number): KernelCase {
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
