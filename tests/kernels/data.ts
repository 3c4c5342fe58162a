// Test data helpers for kernel cases: a seeded generator, byte packing, and independent decoders/encoders of
// f16, bf16 and GGUF q8_0/q4_0 blocks (written here from the formats, not imported from the code under test).

/** The tests' one seeded generator (tests/rng.ts). */
import { Rng } from "../rng.ts";
export { Rng };

/** The bytes of a typed array, padded with zeros to a multiple of 16 (GPU bindings want 4-byte sizes). */
export function bytes(a: ArrayBufferView): Uint8Array {
  const n = Math.max(16, Math.ceil(a.byteLength / 16) * 16);
  const out = new Uint8Array(n);
  out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  return out;
}
export function zeros(n: number): Uint8Array {
  return new Uint8Array(Math.max(16, Math.ceil(n / 16) * 16));
}
export function asF32(b: Uint8Array): Float32Array {
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength >>> 2);
}
/**
 * The float64 reference of y = x W^T (+ bias) (+ residual) over a matmul case's inputs (x [batch, k] given, W's
 * values [n, k], bias and residual read from `ins` at their bindings) and each element's Σ|terms| (the bound's scale).
 */
export function matmulWant(
  x: ArrayLike<number>, w: Float64Array, s: { n: number; k: number; batch: number; bias?: boolean; residual?: boolean }, ins: Uint8Array[],
): { want: Float64Array; mag: Float64Array } {
  const { n, k, batch } = s;
  const bi = s.bias ? asF32(ins[2]) : undefined, re = s.residual ? asF32(ins[s.bias ? 3 : 2]) : undefined;
  const want = new Float64Array(batch * n), mag = new Float64Array(batch * n);
  for (let b = 0; b < batch; b++) {
    for (let r = 0; r < n; r++) {
      let acc = 0, m = 0;
      for (let i = 0; i < k; i++) {
        const p = x[b * k + i] * w[r * k + i];
        acc += p;
        m += Math.abs(p);
      }
      if (bi) (acc += bi[r], m += Math.abs(bi[r]));
      if (re) (acc += re[b * n + r], m += Math.abs(re[b * n + r]));
      want[b * n + r] = acc;
      mag[b * n + r] = m;
    }
  }
  return { want, mag };
}

export function asU32(b: Uint8Array): Uint32Array {
  return new Uint32Array(b.buffer, b.byteOffset, b.byteLength >>> 2);
}
export function asI32(b: Uint8Array): Int32Array {
  return new Int32Array(b.buffer, b.byteOffset, b.byteLength >>> 2);
}
export function asU16(b: Uint8Array): Uint16Array {
  return new Uint16Array(b.buffer, b.byteOffset, b.byteLength >>> 1);
}

/** f16 bits -> number, from the IEEE binary16 definition. */
export function halfToNum(h: number): number {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
/** bf16 bits -> number. */
export function bf16ToNum(h: number): number {
  const f = new Float32Array(1);
  new Uint32Array(f.buffer)[0] = (h & 0xffff) << 16;
  return f[0];
}
/** number -> f16 bits (round to nearest even), via the platform's Float16Array. */
export function numToHalf(x: number): number {
  const a = new Float16Array(1);
  a[0] = x;
  return new Uint16Array(a.buffer)[0];
}
/** Random f16 values as bits, uniform in [lo, hi) then rounded. */
export function halfs(rng: Rng, n: number, lo = -1, hi = 1): Uint16Array {
  const a = new Uint16Array(n);
  for (let i = 0; i < n; i++) a[i] = numToHalf(rng.uniform(lo, hi));
  return a;
}
/** Random bf16 values as bits (truncated f32s: exact bf16 values). */
export function bf16s(rng: Rng, n: number, lo = -1, hi = 1): Uint16Array {
  const f = rng.f32(n, lo, hi), u = new Uint32Array(f.buffer), a = new Uint16Array(n);
  for (let i = 0; i < n; i++) a[i] = u[i] >>> 16;
  return a;
}

/** Random q8_0 rows [rows, cols]: bytes and the dequantized values (d * q). */
export function q8Rows(rng: Rng, rows: number, cols: number): { bytes: Uint8Array; values: Float64Array } {
  const nb = cols / 32, out = new Uint8Array(rows * nb * 34), dv = new DataView(out.buffer), vals = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let bI = 0; bI < nb; bI++) {
      const off = (r * nb + bI) * 34;
      const d = numToHalf(rng.uniform(0.002, 0.02));
      dv.setUint16(off, d, true);
      for (let e = 0; e < 32; e++) {
        const q = rng.int(255) - 127;
        dv.setInt8(off + 2 + e, q);
        vals[r * cols + bI * 32 + e] = halfToNum(d) * q;
      }
    }
  }
  return { bytes: out, values: vals };
}
/** Random q4_0 rows: value = (nibble - 8) * d; low nibbles are elements 0..15, high nibbles 16..31. */
export function q4Rows(rng: Rng, rows: number, cols: number): { bytes: Uint8Array; values: Float64Array } {
  const nb = cols / 32, out = new Uint8Array(rows * nb * 18), dv = new DataView(out.buffer), vals = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let bI = 0; bI < nb; bI++) {
      const off = (r * nb + bI) * 18;
      const d = numToHalf(rng.uniform(0.01, 0.1));
      dv.setUint16(off, d, true);
      for (let e = 0; e < 16; e++) {
        const lo = rng.int(16), hi = rng.int(16);
        out[off + 2 + e] = lo | (hi << 4);
        vals[r * cols + bI * 32 + e] = halfToNum(d) * (lo - 8);
        vals[r * cols + bI * 32 + e + 16] = halfToNum(d) * (hi - 8);
      }
    }
  }
  return { bytes: out, values: vals };
}

/** Float tensor in storage type t: its bytes and exact values. */
export function floats(rng: Rng, t: "f32" | "f16" | "bf16", n: number, lo = -1, hi = 1): { bytes: Uint8Array; values: Float64Array } {
  if (t === "f32") {
    const a = rng.f32(n, lo, hi);
    return { bytes: bytes(a), values: Float64Array.from(a) };
  }
  const h = t === "f16" ? halfs(rng, n, lo, hi) : bf16s(rng, n, lo, hi);
  const dec = t === "f16" ? halfToNum : bf16ToNum;
  return { bytes: bytes(h), values: Float64Array.from(h, dec) };
}
/** Decodes n floats of storage type t from bytes. */
export function decode(t: "f32" | "f16" | "bf16", b: Uint8Array, n: number): Float64Array {
  if (t === "f32") return Float64Array.from(asF32(b).subarray(0, n));
  return Float64Array.from(asU16(b).subarray(0, n), t === "f16" ? halfToNum : bf16ToNum);
}
