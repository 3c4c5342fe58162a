// Row kernels: norms, softmax, argmax and rope. (tests/kernels/cases.ts lists them; its header says how they are checked.)
import * as lib from "../../../kernels/lib/mod.ts";
import { asF32, bytes, floats, Rng, zeros } from "../data.ts";
import { EPS, u32b, i32b, memo, type KernelCase } from "./common.ts";

// ---- norms, softmax, argmax --------------------------------------------------------------------------
export function rmsnormCase(rows: number, n: number, weight: "f32" | "f16" | "bf16" | null): KernelCase {
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
export function layernormCase(rows: number, n: number, bias: boolean): KernelCase {
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
export function softmaxCase(rows: number, n: number): KernelCase {
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
export function argmaxCase(rows: number, n: number, special: "ties" | "nan" | "plain", out: "u32" | "i32" = "u32"): KernelCase {
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
export function ropeCase(c: RopeCfg, fault = false): KernelCase {
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
