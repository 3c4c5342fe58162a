// Kernels written with the builder that together touch every IR feature, each with inputs and a check
// written independently of any renderer (plain JS: Math.fround per f32 op, Float16Array for f16 rounding).
// spirv.test.ts renders them and runs spirv-val; device.test.ts runs them on a Vulkan device.
import { bin, c, f32, fma, i32, type Kernel, KernelBuilder, u32, un } from "../../kernels/ir.ts";
import type { Caps } from "../../kernels/target.ts";
import { F, I, Rng, U, U16, bitsOf, bytes, fr, fromBf16, fromBits, fromHalf, report, sameF, toBf16, toHalf, zeros } from "../vulkan/data.ts";
import { halfCasts, nanCompares } from "./features_ieee.ts";

export interface Feature {
  name: string;
  /** The kernel for these caps, or why the caps cannot run it. */
  make(caps: Caps): Kernel | string;
  /** Initial bytes of every binding (outputs included), in binding order. */
  inputs(): Uint8Array[];
  /**
   * Problems found in the bindings' bytes after one dispatch (empty = pass). `contracts`: the language cannot
   * forbid fusing a*b+c into one rounding (WGSL: wgpu on NVIDIA fuses), so a fused result passes too.
   */
  check(out: Uint8Array[], ins: Uint8Array[], opts?: { contracts?: boolean }): string[];
  /** The dispatch must fault with this code instead. */
  fault?: number;
}

// ---- features ----

const N = 256;

/** f32 arithmetic that must be bit-exact (every op rounded alone, a*b+c never fused), and the looser ones. */
const arith: Feature = {
  name: "f32 arithmetic",
  make: () => {
    const b = new KernelBuilder("arith", { workgroup: 64, grid: N / 64 });
    const A = b.buffer("a", "f32", "r"), B = b.buffer("b", "f32", "r"), C = b.buffer("c", "f32", "r");
    const E = b.buffer("exact", "f32", "w"), L = b.buffer("loose", "f32", "w");
    const i = b.gid.x;
    const x = b.let(b.load(A, i)), y = b.let(b.load(B, i)), z = b.load(C, i);
    const exact = [x.add(y), x.sub(y), x.mul(y), x.mul(y).add(z), x.neg(), x.abs(), x.floor(), un("ceil", x),
      x.max(y), x.min(y), x.lt(y).select(x, z), x.mul(z).sub(y.mul(z))];
    exact.forEach((v, k) => b.store(E, i.add(k * N), v));
    const loose = [x.div(y), x.mod(y), x.abs().add(1).pow(f32(1.5)), fma(x, y, z), x.abs().sqrt(), x.abs().add(1).rsqrt(), y.recip()];
    loose.forEach((v, k) => b.store(L, i.add(k * N), v));
    return b.build();
  },
  inputs: () => {
    const r = new Rng(1);
    const a = Float32Array.from({ length: N }, () => r.float(-100, 100));
    const b = Float32Array.from({ length: N }, () => r.float(-100, 100));
    const cc = Float32Array.from({ length: N }, () => r.float(-1e4, 1e4));
    a[0] = -0, a[1] = 2.5, a[2] = -2.5, b[3] = 0.1, a[3] = 3;
    return [bytes(a), bytes(b), bytes(cc), zeros(12 * N * 4), zeros(7 * N * 4)];
  },
  check(out, ins, opts) {
    const a = F(ins[0]), b = F(ins[1]), cc = F(ins[2]), E = F(out[3]), L = F(out[4]);
    const bad: string[] = [];
    for (let i = 0; i < N; i++) {
      const x = a[i], y = b[i], z = cc[i];
      const want = [fr(x + y), fr(x - y), fr(x * y), fr(fr(x * y) + z), -x, Math.abs(x), Math.floor(x), Math.ceil(x),
        Math.max(x, y), Math.min(x, y), x < y ? x : z, fr(fr(x * z) - fr(y * z))];
      want.forEach((w, k) => {
        const g = E[k * N + i];
        // max/min of +0/-0 may pick either zero; a product fused into the add (one rounding) where the
        // language cannot forbid it (the f32 products are exact in doubles)
        const fused = !opts?.contracts ? [] : k === 3 ? [fr(x * y + z)] : k === 11 ? [fr(x * z - fr(y * z)), fr(fr(x * z) - y * z)] : [];
        if (!(sameF(g, w) || (k >= 8 && k <= 9 && g === w) || fused.some((f) => sameF(g, f)))) report(bad, `exact op ${k} (x=${x}, y=${y}, z=${z})`, i, g, w);
      });
      const lw = [x / y, x % y, Math.pow(Math.abs(x) + 1, 1.5), x * y + z, Math.sqrt(Math.abs(x)), 1 / Math.sqrt(fr(Math.abs(x) + 1)), 1 / y];
      const mag = [Math.abs(x / y), Math.abs(x), lw[2], Math.abs(x * y) + Math.abs(z), lw[4], lw[5], Math.abs(1 / y)];
      const rel = [3, 4, 16, 2, 3, 3, 3]; // ulps of the magnitude: Vulkan's bounds (FRem inherits x - y*trunc(x/y))
      lw.forEach((w, k) => {
        const g = L[k * N + i];
        const tol = rel[k] * 2 ** -23 * mag[k] + 1e-30;
        // float mod: Vulkan defines OpFRem as x - y * trunc(x / y), so a quotient that rounds across an integer
        // gives that result instead of the exact fmod
        const alt = k === 1 ? fr(x - fr(y * Math.trunc(fr(x / y)))) : w;
        if (!(Math.abs(g - w) <= tol || Math.abs(g - alt) <= tol)) report(bad, `loose op ${k} (x=${x}, y=${y})`, i, g, w);
      });
    }
    return bad;
  },
};

/** i32/u32 arithmetic, shifts (amounts mod 32), division by zero (0), comparisons, casts and bitcasts. */
const ints: Feature = {
  name: "integer ops and casts",
  make: () => {
    const b = new KernelBuilder("ints", { workgroup: 64, grid: N / 64 });
    const X = b.buffer("x", "i32", "r"), Y = b.buffer("y", "i32", "r"), S = b.buffer("s", "u32", "r"), Fv = b.buffer("f", "f32", "r");
    const OI = b.buffer("oi", "i32", "w"), OU = b.buffer("ou", "u32", "w"), OF = b.buffer("of", "f32", "w");
    const i = b.gid.x;
    const x = b.let(b.load(X, i)), y = b.let(b.load(Y, i)), s = b.load(S, i), f = b.let(b.load(Fv, i));
    const ux = x.bitcast("u32"), uy = y.bitcast("u32");
    const iv = [x.add(y), x.sub(y), x.mul(y), x.div(y), x.mod(y), x.min(y), x.max(y), x.and(y), x.or(y), x.xor(y),
      x.shl(s.bitcast("i32")), x.shr(s.bitcast("i32")), x.neg(), x.abs(), x.not(), f.cast("i32"), x.div(7), x.mod(-5)];
    iv.forEach((v, k) => b.store(OI, i.add(k * N), v));
    const cmp = (pairs: [typeof x, typeof x][]) => {
      let acc = u32(0);
      let bit = 0;
      for (const [p, q] of pairs) {
        for (const op of ["lt", "le", "gt", "ge", "eq", "ne"] as const) acc = acc.or(bin(op, p, q).select(u32(1 << bit), u32(0))), bit++;
      }
      return acc;
    };
    const uv = [ux.add(uy), ux.mul(uy), ux.div(uy), ux.mod(uy), ux.min(uy), ux.max(uy), ux.shr(s), ux.shl(s),
      cmp([[x, y], [ux, uy]]), f.cast("u32"), f.bitcast("u32"), x.ne(0).cast("u32"), f.cast("bool").cast("u32"),
      ux.div(u32(3)), ux.not()];
    uv.forEach((v, k) => b.store(OU, i.add(k * N), v));
    const fv = [x.cast("f32"), ux.cast("f32"), x.bitcast("f32"), x.gt(y).cast("f32"), ux.bitcast("i32").cast("f32")];
    fv.forEach((v, k) => b.store(OF, i.add(k * N), v));
    return b.build();
  },
  inputs: () => {
    const r = new Rng(2);
    const x = Int32Array.from({ length: N }, () => r.u32() | 0);
    const y = Int32Array.from({ length: N }, () => r.int(-50, 50));
    const s = Uint32Array.from({ length: N }, () => r.int(0, 64));
    const f = Float32Array.from({ length: N }, () => r.float(-3e9, 5e9));
    const specials = [NaN, Infinity, -Infinity, 3e9, -3e9, 1e10, -0.5, 2.5, -2.5, 2147483520, 2147483648, -2147483904, 4294967040, 4294967296, 0, -0];
    specials.forEach((v, k) => f[k] = v);
    x[0] = -2147483648, y[0] = 7, x[1] = 5, y[1] = 0, x[2] = -9, y[2] = 0, x[3] = -2147483648, y[3] = 1;
    x[4] = -2147483648, y[4] = -1, x[5] = -19, y[5] = 3, x[6] = 19, y[6] = -3, x[7] = -19, y[7] = -3; // INT_MIN / -1 wraps
    return [bytes(x), bytes(y), bytes(s), bytes(f), zeros(18 * N * 4), zeros(15 * N * 4), zeros(5 * N * 4)];
  },
  check(out, ins) {
    const X = I(ins[0]), Y = I(ins[1]), S = U(ins[2]), Fv = F(ins[3]);
    const OI = I(out[4]), OU = U(out[5]), OF = F(out[6]);
    const bad: string[] = [];
    const toI = (v: number) => Number.isNaN(v) ? 0 : v >= 2147483647 ? 2147483647 : v <= -2147483648 ? -2147483648 : Math.trunc(v) | 0;
    const toU = (v: number) => Number.isNaN(v) ? 0 : v >= 4294967295 ? 4294967295 : v > 0 ? Math.trunc(v) >>> 0 : 0;
    for (let i = 0; i < N; i++) {
      const x = X[i], y = Y[i], s = S[i] & 31, f = Fv[i], ux = x >>> 0, uy = y >>> 0;
      const iw = [(x + y) | 0, (x - y) | 0, Math.imul(x, y), y ? (x / y) | 0 : 0, y ? (x % y) | 0 : 0, Math.min(x, y), Math.max(x, y),
        x & y, x | y, x ^ y, x << s, x >> s, -x | 0, Math.abs(x) | 0, ~x, toI(f), (x / 7) | 0, (x % -5) | 0];
      iw.forEach((w, k) => { if (OI[k * N + i] !== w) report(bad, `i32 op ${k} (x=${x}, y=${y}, s=${s}, f=${f})`, i, OI[k * N + i], w); });
      let cm = 0, bit = 0;
      for (const [p, q] of [[x, y], [ux, uy]]) {
        for (const v of [p < q, p <= q, p > q, p >= q, p === q, p !== q]) cm |= (v ? 1 : 0) << bit++;
      }
      const uw = [(ux + uy) >>> 0, Math.imul(ux, uy) >>> 0, uy ? Math.trunc(ux / uy) >>> 0 : 0, uy ? ux % uy : 0, Math.min(ux, uy),
        Math.max(ux, uy), ux >>> s, (ux << s) >>> 0, cm >>> 0, toU(f), bitsOf(f), x !== 0 ? 1 : 0, f !== 0 ? 1 : 0,
        Math.trunc(ux / 3) >>> 0, ~ux >>> 0];
      uw.forEach((w, k) => {
        const g = OU[k * N + i];
        if (k === 10 && Number.isNaN(f)) return; // NaN bits may be canonicalised on the way in
        if (g !== w) report(bad, `u32 op ${k} (x=${x}, y=${y}, s=${s}, f=${f})`, i, g, w);
      });
      const fw = [fr(x), fr(ux), fromBits(ux), x > y ? 1 : 0, fr(x)];
      fw.forEach((w, k) => { if (!sameF(OF[k * N + i], w)) report(bad, `f32 op ${k} (x=${x})`, i, OF[k * N + i], w); });
    }
    return bad;
  },
};

/** 16- and 8-bit elements: loads (sign/zero extension, f16/bf16 decoding), stores (RNE, low bits), views. */
const narrow: Feature = {
  name: "16/8-bit loads, stores and views",
  make: () => {
    const b = new KernelBuilder("narrow", { workgroup: 64, grid: N / 64 });
    const types = ["f16", "bf16", "i8", "u8", "i16", "u16"] as const;
    const ins = types.map((t) => b.buffer(`in_${t}`, t, "r"));
    const outs = types.map((t) => b.buffer(`out_${t}`, t, "w"));
    const D = b.buffer("decoded", "f32", "w");
    const W = b.buffer("views", "u32", "w");
    const i = b.gid.x;
    types.forEach((t, k) => {
      const v = b.load(ins[k], i);
      b.store(D, i.add(k * N), v.cast("f32"));
      if (t === "f16" || t === "bf16") b.store(outs[k], i, v.mul(3).add(f32(0.1)));
      else b.store(outs[k], i, v.mul(3).add(1));
    });
    b.store(W, i, b.load(ins[0], i, "u16"));                                     // f16 bits through a u16 view
    b.if(i.lt(u32(N / 4)), () => b.store(W, i.add(N), b.load(ins[3], i, "u32"))); // four u8 as one word
    b.store(W, i.add(2 * N), b.load(ins[2], i, "u8"));                            // i8 bytes zero-extended
    return b.build();
  },
  inputs: () => {
    const r = new Rng(3);
    const h = Uint16Array.from({ length: N }, () => r.u32() & 0xffff);
    [0, 0x8000, 0x0001, 0x03ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x3c00, 0x5bff].forEach((v, k) => h[k] = v);
    const bf = Uint16Array.from({ length: N }, () => r.u32() & 0xffff);
    const i8 = Int8Array.from({ length: N }, () => r.u32());
    const u8 = Uint8Array.from({ length: N }, () => r.u32());
    const i16 = Int16Array.from({ length: N }, () => r.u32());
    const u16 = Uint16Array.from({ length: N }, () => r.u32());
    i8[0] = -128, i8[1] = 127, u8[0] = 255, i16[0] = -32768, u16[0] = 65535;
    const ins = [h, bf, i8, u8, i16, u16].map((a) => {
      const out = zeros(a.byteLength);
      out.set(new Uint8Array(a.buffer));
      return out;
    });
    return [...ins, zeros(N * 2), zeros(N * 2), zeros(N), zeros(N), zeros(N * 2), zeros(N * 2), zeros(6 * N * 4), zeros(3 * N * 4)];
  },
  check(out, ins) {
    const bad: string[] = [];
    const h = U16(ins[0]), bf = U16(ins[1]);
    const i8 = new Int8Array(ins[2].buffer, ins[2].byteOffset, N), u8 = ins[3];
    const i16 = new Int16Array(ins[4].buffer, ins[4].byteOffset, N), u16 = U16(ins[5]);
    const D = F(out[12]), W = U(out[13]);
    const dec = [(j: number) => fromHalf(h[j]), (j: number) => fromBf16(bf[j]), (j: number) => i8[j], (j: number) => u8[j],
      (j: number) => i16[j], (j: number) => u16[j]];
    for (let i = 0; i < N; i++) {
      dec.forEach((d, k) => { if (!sameF(D[k * N + i], d(i))) report(bad, `decode ${k} (bits ${h[i].toString(16)})`, i, D[k * N + i], d(i)); });
      const fh = fr(fr(fromHalf(h[i]) * 3) + fr(0.1)), fb = fr(fr(fromBf16(bf[i]) * 3) + fr(0.1));
      const gh = U16(out[6])[i], gb = U16(out[7])[i];
      if (!(Number.isNaN(fh) ? Number.isNaN(fromHalf(gh)) : gh === toHalf(fh))) report(bad, `f16 store (from ${fh})`, i, gh, toHalf(fh));
      if (!(Number.isNaN(fb) ? Number.isNaN(fromBf16(gb)) : gb === toBf16(fb))) report(bad, `bf16 store (from ${fb})`, i, gb, toBf16(fb));
      const ints: [number, number][] = [
        [new Int8Array(out[8].buffer, out[8].byteOffset, N)[i], (i8[i] * 3 + 1) << 24 >> 24],
        [out[9][i], (u8[i] * 3 + 1) & 0xff],
        [new Int16Array(out[10].buffer, out[10].byteOffset, N)[i], (i16[i] * 3 + 1) << 16 >> 16],
        [U16(out[11])[i], (u16[i] * 3 + 1) & 0xffff],
      ];
      ints.forEach(([g, w], k) => { if (g !== w) report(bad, `int store ${k}`, i, g, w); });
      if (W[i] !== h[i]) report(bad, "u16 view", i, W[i], h[i]);
      if (i < N / 4) {
        const w = (u8[4 * i] | (u8[4 * i + 1] << 8) | (u8[4 * i + 2] << 16) | (u8[4 * i + 3] << 24)) >>> 0;
        if (W[N + i] !== w) report(bad, "u32 view of u8", i, W[N + i], w);
      }
      if (W[2 * N + i] !== (i8[i] & 0xff)) report(bad, "u8 view of i8", i, W[2 * N + i], i8[i] & 0xff);
    }
    return bad;
  },
};

/** Every f16 and bf16 bit pattern decoded (f16bits/bf16bits), and f32 -> f16/bf16 rounding at and around ties. */
const halves: Feature = {
  name: "f16/bf16 conversions (exhaustive decode, ties)",
  make: () => {
    const b = new KernelBuilder("halves", { workgroup: 256, grid: 256 });
    const X = b.buffer("x", "f32", "r"), HB = b.buffer("h", "f16", "w"), BB = b.buffer("b", "bf16", "w");
    const DH = b.buffer("dh", "f32", "w"), DB = b.buffer("db", "f32", "w");
    const i = b.gid.x;
    b.store(DH, i, un("f16bits", i));
    b.store(DB, i, un("bf16bits", i));
    for (let r = 0; r < 2; r++) {
      const j = i.add(r * 65536);
      const x = b.load(X, j);
      b.store(HB, j, x);
      b.store(BB, j, x);
    }
    return b.build();
  },
  inputs: () => {
    const x = new Float32Array(2 * 65536);
    let n = 0;
    for (let h = 0; h < 0x7c00 && n + 4 <= x.length; h += 1) {
      const v = fromHalf(h), next = fromHalf(h + 1);
      const mid = fr((v + next) / 2);
      x[n++] = v;
      x[n++] = mid;
      x[n++] = fromBits(bitsOf(mid) + 1);
      x[n++] = -fromBits(bitsOf(mid) - 1);
    }
    for (const v of [65504, 65519.99, 65520, 1e6, Infinity, -Infinity, NaN, 2 ** -25, 3 * 2 ** -26, 2 ** -26, 1e-10, -0]) x[n++] = v;
    const r = new Rng(4);
    while (n < x.length) x[n++] = fromBits(r.u32());
    return [bytes(x), zeros(2 * x.length), zeros(2 * x.length), zeros(65536 * 4), zeros(65536 * 4)];
  },
  check(out, ins) {
    const bad: string[] = [];
    const X = F(ins[0]), HB = U16(out[1]), BB = U16(out[2]), DH = F(out[3]), DB = F(out[4]);
    for (let h = 0; h < 65536; h++) {
      if (!sameF(DH[h], fromHalf(h))) report(bad, "f16bits", h, DH[h], fromHalf(h));
      if (!sameF(DB[h], fromBf16(h))) report(bad, "bf16bits", h, DB[h], fromBf16(h));
    }
    for (let i = 0; i < X.length; i++) {
      const x = X[i];
      if (Number.isNaN(x)) {
        if (!Number.isNaN(fromHalf(HB[i])) || !Number.isNaN(fromBf16(BB[i]))) report(bad, "NaN store", i, `${HB[i]}/${BB[i]}`, "NaN");
        continue;
      }
      if (HB[i] !== toHalf(x)) report(bad, `f32->f16 of ${x}`, i, HB[i].toString(16), toHalf(x).toString(16));
      if (BB[i] !== toBf16(x)) report(bad, `f32->bf16 of ${x}`, i, BB[i].toString(16), toBf16(x).toString(16));
    }
    return bad;
  },
};

/** Vector loads and stores of 2..16 bytes over every element type (and the sub-word scalar fallback). */
const vectors: Feature = {
  name: "vector loads and stores",
  make: () => {
    const b = new KernelBuilder("vectors", { workgroup: 16, grid: 1 });
    const specs = [["f32", 4], ["f16", 8], ["u8", 16], ["i16", 4], ["bf16", 2], ["u8", 2], ["i32", 2], ["i8", 4], ["u16", 1]] as const;
    const bufs = specs.map(([t], k) => [b.buffer(`in${k}`, t, "r"), b.buffer(`out${k}`, t, "w")] as const);
    const i = b.gid.x;
    specs.forEach(([t, n], k) => {
      const vs = b.loadv(bufs[k][0], i.mul(n), n);
      // reversed, and changed so a plain copy would not pass
      const moved = vs.slice().reverse().map((v) => t === "f32" || t === "f16" || t === "bf16" ? v.mul(2) : v.add(i.cast(v.t)));
      b.storev(bufs[k][1], i.mul(n), moved);
    });
    return b.build();
  },
  inputs: () => {
    const r = new Rng(5);
    const specs = [["f32", 4], ["f16", 8], ["u8", 16], ["i16", 4], ["bf16", 2], ["u8", 2], ["i32", 2], ["i8", 4], ["u16", 1]] as const;
    const out: Uint8Array[] = [];
    for (const [t, n] of specs) {
      const size = t === "f32" || t === "i32" ? 4 : t === "u8" || t === "i8" ? 1 : 2;
      const len = 16 * n * size;
      const src = zeros(len);
      if (t === "f32") F(src).set(Float32Array.from({ length: 16 * n }, () => r.float(-10, 10)));
      else if (t === "f16") U16(src).set(Uint16Array.from({ length: 16 * n }, () => toHalf(r.float(-10, 10))));
      else if (t === "bf16") U16(src).set(Uint16Array.from({ length: 16 * n }, () => toBf16(r.float(-10, 10))));
      else for (let j = 0; j < len; j++) src[j] = r.u32() & 0xff;
      out.push(src, zeros(len));
    }
    return out;
  },
  check(out, ins) {
    const bad: string[] = [];
    const specs = [["f32", 4], ["f16", 8], ["u8", 16], ["i16", 4], ["bf16", 2], ["u8", 2], ["i32", 2], ["i8", 4], ["u16", 1]] as const;
    specs.forEach(([t, n], k) => {
      const src = ins[2 * k], dst = out[2 * k + 1];
      for (let i = 0; i < 16; i++) {
        for (let j = 0; j < n; j++) {
          const from = i * n + (n - 1 - j), to = i * n + j;
          let w: number, g: number;
          switch (t) {
            case "f32": w = fr(F(src)[from] * 2); g = F(dst)[to]; break;
            case "f16": w = toHalf(fr(fromHalf(U16(src)[from]) * 2)); g = U16(dst)[to]; break;
            case "bf16": w = toBf16(fr(fromBf16(U16(src)[from]) * 2)); g = U16(dst)[to]; break;
            case "u8": w = (src[from] + i) & 0xff; g = dst[to]; break;
            case "i8": w = ((src[from] << 24 >> 24) + i) << 24 >> 24; g = dst[to] << 24 >> 24; break;
            case "i16": w = (new Int16Array(src.buffer, src.byteOffset)[from] + i) << 16 >> 16; g = new Int16Array(dst.buffer, dst.byteOffset)[to]; break;
            case "u16": w = (U16(src)[from] + i) & 0xffff; g = U16(dst)[to]; break;
            case "i32": w = (I(src)[from] + i) | 0; g = I(dst)[to]; break;
          }
          if (g !== w) report(bad, `${t}x${n}`, to, g, w);
        }
      }
    });
    return bad;
  },
};

/** Loops (u32 and i32 indices, steps, a bound read from a buffer), if/else, early returns inside both. */
const control: Feature = {
  name: "structured control flow",
  make: () => {
    const b = new KernelBuilder("control", { workgroup: 32, grid: N / 32 });
    const Nb = b.buffer("n", "u32", "r"), O = b.buffer("out", "u32", "w");
    const i = b.gid.x;
    const acc = b.let(u32(0));
    b.for(u32(0), i.mod(7), 2, (j) => b.set(acc, acc.add(j).add(1)));
    b.for(i32(-3), i.mod(4).bitcast("i32").sub(1), 1, (k) => b.set(acc, acc.add(k.mul(k).bitcast("u32"))));
    b.for(u32(0), b.load(Nb, 0), 3, (j) => b.set(acc, acc.add(j)), { unroll: 4 });
    b.if(i.mod(5).eq(0), () => {
      b.store(O, i, acc.add(1000));
      b.return();
    }, () => {
      b.if(i.mod(5).eq(1), () => {
        b.for(u32(0), 100, 1, (j) => {
          b.if(j.eq(i.mod(13)), () => {
            b.store(O, i, j.add(2000));
            b.return();
          });
        });
      });
    });
    b.if(i.mod(3).eq(0), () => b.set(acc, acc.mul(2)), () => b.set(acc, acc.add(7)));
    b.store(O, i, acc);
    return b.build();
  },
  inputs: () => [bytes(new Uint32Array([10, 0, 0, 0])), zeros(N * 4)],
  check(out) {
    const bad: string[] = [];
    const O = U(out[1]);
    for (let i = 0; i < N; i++) {
      let acc = 0;
      for (let j = 0; j < i % 7; j += 2) acc += j + 1;
      for (let k = -3; k < (i % 4) - 1; k++) acc += k * k;
      for (let j = 0; j < 10; j += 3) acc += j;
      let w: number;
      if (i % 5 === 0) w = acc + 1000;
      else if (i % 5 === 1) w = 2000 + (i % 13);
      else w = i % 3 === 0 ? acc * 2 : acc + 7;
      if (O[i] !== w) report(bad, "control", i, O[i], w);
    }
    return bad;
  },
};

/** Workgroup memory (f32, u32, bool) with barriers: a tree reduction and a reversal across the workgroup. */
const shared: Feature = {
  name: "shared memory and barriers",
  make: () => {
    const b = new KernelBuilder("shared", { workgroup: 64, grid: 4 });
    const X = b.buffer("x", "f32", "r"), S = b.buffer("sums", "f32", "w"), R = b.buffer("rev", "u32", "w");
    const sh = b.shared("acc", "f32", 64), us = b.shared("ids", "u32", 64), bs = b.shared("pos", "bool", 64);
    const l = b.lid.x, g = b.gid.x;
    b.sstore(sh, l, b.load(X, g));
    b.sstore(us, l, g);
    b.sstore(bs, l, b.load(X, g).gt(0));
    b.barrier();
    for (let s = 32; s > 0; s >>= 1) {
      b.if(l.lt(u32(s)), () => b.sstore(sh, l, b.sload(sh, l).add(b.sload(sh, l.add(s)))));
      b.barrier();
    }
    b.if(l.eq(0), () => b.store(S, b.wgid.x, b.sload(sh, 0)));
    b.store(R, g, b.sload(us, u32(63).sub(l)).add(b.sload(bs, u32(63).sub(l)).select(u32(1 << 20), u32(0))));
    return b.build();
  },
  inputs: () => {
    const r = new Rng(6);
    return [bytes(Float32Array.from({ length: 256 }, () => r.int(-100, 100))), zeros(16), zeros(256 * 4)];
  },
  check(out, ins) {
    const bad: string[] = [];
    const X = F(ins[0]), S = F(out[1]), R = U(out[2]);
    for (let w = 0; w < 4; w++) {
      let s = 0;
      for (let j = 0; j < 64; j++) s += X[w * 64 + j];
      if (S[w] !== s) report(bad, "sum", w, S[w], s);
      for (let l = 0; l < 64; l++) {
        const src = w * 64 + 63 - l;
        const want = src + (X[src] > 0 ? 1 << 20 : 0);
        if (R[w * 64 + l] !== want) report(bad, "reverse", w * 64 + l, R[w * 64 + l], want);
      }
    }
    return bad;
  },
};

/** Subgroup reductions (f32/i32/u32 add/max/min) and shuffles (xor, idx, down with out-of-range lanes). */
const subgroups: Feature = {
  name: "subgroup reductions and shuffles",
  make: (caps) => {
    if (!caps.subgroups) return "no subgroups";
    const b = new KernelBuilder("subgroups", { workgroup: 64, grid: 2 });
    const X = b.buffer("x", "f32", "r"), O = b.buffer("out", "u32", "w");
    const g = b.gid.x;
    const x = b.let(b.load(X, g)), xi = x.cast("i32"), lane = b.builtin("lane"), size = b.builtin("sgsize");
    const vals = [b.subgroupReduce("add", x).bitcast("u32"), b.subgroupReduce("max", x).bitcast("u32"), b.subgroupReduce("min", x).bitcast("u32"),
      b.subgroupReduce("add", xi).bitcast("u32"), b.subgroupReduce("max", xi).bitcast("u32"), b.subgroupReduce("min", xi).bitcast("u32"),
      b.subgroupReduce("add", g), b.subgroupReduce("max", g), b.subgroupReduce("min", g),
      b.shuffle("xor", x, 1).bitcast("u32"), b.shuffle("idx", g, lane.add(3).mod(size)), b.shuffle("down", g, 1),
      b.shuffle("down", xi, 5).bitcast("u32"), b.shuffle("xor", g, size), lane, size, b.builtin("sgid")];
    vals.forEach((v, k) => b.store(O, g.mul(vals.length).add(k), v));
    return b.build();
  },
  inputs: () => {
    const r = new Rng(7);
    return [bytes(Float32Array.from({ length: 128 }, () => r.int(-1000, 1000))), zeros(128 * 17 * 4)];
  },
  check(out, ins) {
    const bad: string[] = [];
    const X = F(ins[0]), O = U(out[1]), K = 17;
    const at = (g: number, k: number) => O[g * K + k];
    // Group invocations by (workgroup, subgroup id) as the device reported them; index by reported lane.
    const groups = new Map<string, number[]>();
    for (let g = 0; g < 128; g++) {
      const key = `${g >> 6}:${at(g, 16)}`;
      const list = groups.get(key) ?? [];
      list[at(g, 14)] = g;
      groups.set(key, list);
    }
    for (const members of groups.values()) {
      const size = at(members.find((m) => m !== undefined)!, 15);
      const xs = members.map((m) => X[m]);
      for (let lane = 0; lane < members.length; lane++) {
        const g = members[lane];
        if (g === undefined) continue;
        const own = (src: number, _k: number, v: (m: number) => number) => src < size && members[src] !== undefined ? v(members[src]) : v(g);
        const want = [bitsOf(xs.reduce((a, b) => a + b, 0)), bitsOf(Math.max(...xs)), bitsOf(Math.min(...xs)),
          xs.reduce((a, b) => a + b, 0) >>> 0, Math.max(...xs) >>> 0, Math.min(...xs) >>> 0,
          members.reduce((a, b) => a + b, 0), Math.max(...members), Math.min(...members),
          own(lane ^ 1, 9, (m) => bitsOf(X[m])), own((lane + 3) % size, 10, (m) => m), own(lane + 1, 11, (m) => m),
          own(lane + 5, 12, (m) => X[m] >>> 0), own(lane ^ size, 13, (m) => m)];
        want.forEach((w, k) => { if (at(g, k) !== w) report(bad, `op ${k} lane ${lane} of ${size}`, g, at(g, k), w); });
      }
    }
    return bad;
  },
};

/** Global/local/workgroup ids and workgroup counts over a 3-D grid. */
const builtins: Feature = {
  name: "builtins over a 3-D grid",
  make: () => {
    const b = new KernelBuilder("builtins", { workgroup: [4, 2, 2], grid: [3, 2, 2] });
    const O = b.buffer("out", "u32", "w");
    const { x, y, z } = b.gid;
    const flat = x.add(y.mul(12)).add(z.mul(48));
    const vals = [x, y, z, b.lid.x, b.lid.y, b.lid.z, b.wgid.x, b.wgid.y, b.wgid.z, b.nwg.x, b.nwg.y, b.nwg.z];
    vals.forEach((v, k) => b.store(O, flat.mul(12).add(k), v));
    return b.build();
  },
  inputs: () => [zeros(192 * 12 * 4)],
  check(out) {
    const bad: string[] = [];
    const O = U(out[0]);
    for (let z = 0; z < 4; z++) {
      for (let y = 0; y < 4; y++) {
        for (let x = 0; x < 12; x++) {
          const f = x + y * 12 + z * 48;
          const want = [x, y, z, x % 4, y % 2, z % 2, x >> 2, y >> 1, z >> 1, 3, 2, 2];
          want.forEach((w, k) => { if (O[f * 12 + k] !== w) report(bad, `builtin ${k}`, f, O[f * 12 + k], w); });
        }
      }
    }
    return bad;
  },
};

/** f16 arithmetic in the kernel (a load as f16, f16 ops each rounded to f16, stores of f16 values). */
const halfMath: Feature = {
  name: "f16 arithmetic",
  make: (caps) => {
    if (!caps.f16) return "no f16 arithmetic";
    const b = new KernelBuilder("halfmath", { workgroup: 64, grid: N / 64 });
    const Hb = b.buffer("h", "f16", "r"), O = b.buffer("out", "f16", "w"), OF = b.buffer("wide", "f32", "w");
    const i = b.gid.x;
    const h = b.load(Hb, i, "f16", "f16");
    const y = b.let(h.mul(h).add(c(0.5, "f16")).sub(h.mul(c(3, "f16"))));
    b.store(O, i, y);
    b.store(OF, i, y.max(c(-2, "f16")).cast("f32"));
    b.store(OF, i.add(N), h.cast("i32").cast("f32"));
    return b.build();
  },
  inputs: () => {
    const r = new Rng(8);
    return [bytes(Uint16Array.from({ length: N }, () => toHalf(r.float(-20, 20)))), zeros(N * 2), zeros(N * 8)];
  },
  check(out, ins, opts) {
    const bad: string[] = [];
    const h16 = Math.f16round;
    const Hb = U16(ins[0]), O = U16(out[1]), OF = F(out[2]);
    for (let i = 0; i < N; i++) {
      const h = fromHalf(Hb[i]);
      const y = h16(h16(h16(h * h) + 0.5) - h16(h * 3));
      // where the language may fuse a product into the add (see Feature.check), each of the two products
      // may be rounded once with its add instead of alone (f16 products are exact in doubles)
      const ok = opts?.contracts
        ? [h16(h16(h * h) + 0.5), h16(h * h + 0.5)].flatMap((a) => [h16(a - h16(h * 3)), h16(a - h * 3)])
        : [y];
      const got = fromHalf(O[i]);
      if (!ok.includes(got)) report(bad, "f16 ops", i, got, y);
      if (!ok.map((v) => Math.max(v, -2)).includes(OF[i])) report(bad, "f16 max widened", i, OF[i], Math.max(y, -2));
      if (OF[N + i] !== Math.trunc(h)) report(bad, "f16 -> i32", i, OF[N + i], Math.trunc(h));
    }
    return bad;
  },
};

/** A planted failing check: the dispatch faults with the first failing check's code. */
export const planted: Feature = {
  name: "planted failing check",
  make: () => {
    const b = new KernelBuilder("planted", { workgroup: 64, grid: 1 });
    const X = b.buffer("x", "f32", "r"), O = b.buffer("out", "f32", "w");
    const i = b.gid.x;
    const x = b.load(X, i);
    b.check(x.lt(100), 42);
    b.check(x.gt(-100), 3);
    b.store(O, i, x.add(1));
    return b.build();
  },
  inputs: () => {
    const x = new Float32Array(64).fill(1);
    x[17] = 500;
    return [bytes(x), zeros(256)];
  },
  check: () => [],
  fault: 42,
};

export const features: Feature[] = [arith, ints, narrow, halves, vectors, control, shared, subgroups, builtins, halfMath, nanCompares, halfCasts, planted];
