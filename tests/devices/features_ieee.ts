// Feature kernels for what a Vulkan driver may bend when the module does not forbid it: NaN through compares
// and the selects a compiler likes to turn into min/max (NVIDIA did, through Naga's identical SPIR-V), and
// casts to f16, whose round trip f32 -> f16 -> f32 NVIDIA's compiler dropped. Checks in plain JS.
import { KernelBuilder, u32 } from "../../kernels/ir.ts";
import type { Feature } from "./features.ts";
import { bytes, F, fr, I, report, sameF, U, zeros } from "../vulkan/data.ts";

const N = 256;
const SPECIAL = [NaN, Infinity, -Infinity, 0, -0, 1, -1, 2.5, 1e-30, 3.4e38, -7, 0.5];

/** IEEE compares with NaN and the min/max-shaped selects over them; float -> bool (NaN is true). */
export const nanCompares: Feature = {
  name: "NaN through compares, min/max-shaped selects, float -> bool",
  make: () => {
    const b = new KernelBuilder("nan_cmp", { workgroup: 64, grid: N / 64 });
    const A = b.buffer("a", "f32", "r"), B = b.buffer("b", "f32", "r");
    const OU = b.buffer("flags", "u32", "w"), OF = b.buffer("sel", "f32", "w");
    const i = b.gid.x;
    const x = b.let(b.load(A, i)), y = b.let(b.load(B, i));
    const flags = [x.lt(y), x.le(y), x.gt(y), x.ge(y), x.eq(y), x.ne(y), x.eq(x), x.ne(x), x.cast("bool")];
    const acc = b.let(0, "u32");
    flags.forEach((f, k) => b.set(acc, acc.or(f.select(u32(1 << k), u32(0)))));
    b.store(OU, i, acc);
    const sels = [x.lt(y).select(x, y), x.gt(y).select(x, y), x.le(y).select(x, y), y.ge(x).select(y, x)];
    sels.forEach((v, k) => b.store(OF, i.add(k * N), v));
    return b.build();
  },
  inputs: () => {
    const a = new Float32Array(N), c = new Float32Array(N);
    let n = 0;
    for (const p of SPECIAL) for (const q of SPECIAL) a[n] = p, c[n++] = q;
    for (; n < N; n++) a[n] = fr(Math.sin(n) * 50), c[n] = fr(Math.cos(n) * 50);
    return [bytes(a), bytes(c), zeros(N * 4), zeros(4 * N * 4)];
  },
  check(out, ins) {
    const A = F(ins[0]), B = F(ins[1]), OU = U(out[2]), OF = F(out[3]);
    const bad: string[] = [];
    for (let i = 0; i < N; i++) {
      const x = A[i], y = B[i];
      const flags = [x < y, x <= y, x > y, x >= y, x === y, x !== y, x === x, x !== x, x !== 0];
      const want = flags.reduce((m, f, k) => m | (f ? 1 << k : 0), 0);
      if (OU[i] !== want) report(bad, `flags (x=${x}, y=${y})`, i, OU[i].toString(2), want.toString(2));
      const sels = [x < y ? x : y, x > y ? x : y, x <= y ? x : y, y >= x ? y : x];
      sels.forEach((w, k) => {
        const g = OF[k * N + i];
        // the sign of a zero is the driver's without SignedZeroInfNanPreserve (a min of 0 and -0 may give either)
        if (!(sameF(g, w) || (g === 0 && w === 0))) report(bad, `select ${k} (x=${x}, y=${y})`, i, g, w);
      });
    }
    return bad;
  },
};

const F16_SPECIAL = [65504, 65519, 65519.99, 65520, 70000, -70000, 1 + 2 ** -11, 1 + 3 * 2 ** -11, -(1 + 2 ** -11), 2 ** -24,
  2 ** -25, 3 * 2 ** -26, 2 ** -26, 1e-10, NaN, Infinity, -Infinity, -0, 0.1, 1 / 3, 2049, 3e9];
const I16_SPECIAL = [65519, 65520, 70000, -70000, 2049, 2051, -2051, 4097, 2 ** 24 + 1, 2147483647, -2147483648, 0, -1, 65504];

/** f32, i32 and u32 -> f16 round to nearest even once (ties, overflow to inf, subnormals), read back widened. */
export const halfCasts: Feature = {
  name: "f32/i32/u32 -> f16 value casts (ties, overflow, subnormals)",
  make: (caps) => {
    if (!caps.f16) return "no f16 arithmetic";
    const b = new KernelBuilder("half_casts", { workgroup: 64, grid: N / 64 });
    const X = b.buffer("x", "f32", "r"), Nn = b.buffer("n", "i32", "r");
    const OF = b.buffer("of", "f32", "w"), OI = b.buffer("oi", "i32", "w");
    const i = b.gid.x;
    const x = b.let(b.load(X, i)), n = b.let(b.load(Nn, i));
    [x.cast("f16").cast("f32"), n.cast("f16").cast("f32"), n.bitcast("u32").cast("f16").cast("f32")]
      .forEach((v, k) => b.store(OF, i.add(k * N), v));
    b.store(OI, i, x.cast("f16").cast("i32"));
    return b.build();
  },
  inputs: () => {
    const x = new Float32Array(N), n = new Int32Array(N);
    F16_SPECIAL.forEach((v, k) => x[k] = v);
    I16_SPECIAL.forEach((v, k) => n[k] = v);
    for (let k = F16_SPECIAL.length; k < N; k++) x[k] = fr(Math.sin(k) * 2 ** ((k % 40) - 26));
    for (let k = I16_SPECIAL.length; k < N; k++) n[k] = Math.round(Math.cos(k) * 2 ** (k % 20));
    return [bytes(x), bytes(n), zeros(3 * N * 4), zeros(N * 4)];
  },
  check(out, ins) {
    const X = F(ins[0]), Nn = I(ins[1]), OF = F(out[2]), OI = I(out[3]);
    const bad: string[] = [];
    const h = Math.f16round;
    const toI = (v: number) => Number.isNaN(v) ? 0 : v >= 2147483647 ? 2147483647 : v <= -2147483648 ? -2147483648 : Math.trunc(v);
    for (let i = 0; i < N; i++) {
      const x = X[i], n = Nn[i];
      [h(x), h(n), h(n >>> 0)].forEach((w, k) => {
        if (!sameF(OF[k * N + i], w)) report(bad, `f16 cast ${k} of ${k ? n : x}`, i, OF[k * N + i], w);
      });
      if (OI[i] !== toI(h(x))) report(bad, `i32(f16(${x}))`, i, OI[i], toI(h(x)));
    }
    return bad;
  },
};
