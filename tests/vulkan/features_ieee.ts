// Feature kernels for what a Vulkan driver may bend when the module does not forbid it: NaN through compares
// and the selects a compiler likes to turn into min/max (NVIDIA did, through Naga's identical SPIR-V).
// Checks in plain JS.
import { KernelBuilder, u32 } from "../../kernels/ir.ts";
import type { Feature } from "./features.ts";
import { bytes, F, fr, report, sameF, U, zeros } from "./data.ts";

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
