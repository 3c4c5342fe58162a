// Elementwise (named and generic expressions) and movement cases (update_slice, scatter, gather). (tests/kernels/cases.ts lists them; its header says how they are checked.)
import type { Kernel } from "../../../kernels/ir.ts";
import type { Caps } from "../../../kernels/target.ts";
import * as lib from "../../../kernels/lib/mod.ts";
import { asF32, bytes, decode, floats, halfToNum, numToHalf, q4Rows, q8Rows, Rng, zeros } from "../data.ts";
import { EPS, u32b, i32b, memo, type KernelCase } from "./common.ts";

// ---- elementwise ---------------------------------------------------------------------------------------
export function erf(x: number): number { // Taylor series; |x| <= 4 keeps the cancellation under 1e-9
  if (Math.abs(x) > 4) return Math.sign(x);
  let term = x, sum = x;
  for (let n = 1; n < 200; n++) {
    term *= -x * x / n;
    sum += term / (2 * n + 1);
  }
  return sum * 2 / Math.sqrt(Math.PI);
}
type Ref = (...a: number[]) => number;
export function ewCase(label: string, make: (caps: Caps) => Kernel, n: number, nIn: number, ref: Ref, opts: { lenB?: number; lo?: number; hi?: number; abs?: number } = {}): KernelCase {
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
export const sig = (x: number) => 1 / (1 + Math.exp(-x));
export function genericCases(): KernelCase[] {
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
export function updateSliceCase(rows: number, width: number, cap: number, pos: number, dst: "f32" | "f16" | "bf16", pt: "u32" | "i32", fault = false): KernelCase {
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
export function scatterCase(rows: number, width: number, cap: number, it: "u32" | "i32", bad = false): KernelCase {
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
export function gatherCase(table: lib.WType, rows: number, width: number, vocab: number, it: "u32" | "i32", bad = false): KernelCase {
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
