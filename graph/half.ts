// The host's f32 <-> f16 / bf16 conversions, written once: round to nearest even, overflow to ±Inf, f16
// subnormals kept, NaN stays NaN (quiet, top payload bits kept). graph/dtype (the oracle's storage),
// llm/formats (GGUF writers, ggml's reference quantizers), the renderers' constants (spirv, ptx) and the JS
// runtime's loads and stores all use these, so a value rounds the same wherever the host rounds it.
// (Tests keep their own conversions from the platform's Float16Array, as an independent reference.)

const f32Box = new Float32Array(1);
const u32Box = new Uint32Array(f32Box.buffer);

/** Bits of the f32 nearest to `x` (x is first rounded to f32). */
export function f32Bits(x: number): number {
  f32Box[0] = x;
  return u32Box[0];
}

/** The f32 value with the given bits. */
export function f32FromBits(bits: number): number {
  u32Box[0] = bits;
  return f32Box[0];
}

/**
 * f16 bits of an f32 value, rounded to nearest, ties to even. `x` is rounded to f32 first, so a JS double is
 * converted exactly as its f32 would be. Overflow gives ±Inf, tiny values become f16 subnormals or ±0, NaN
 * stays NaN (quiet, top payload bits kept).
 */
export function f32ToF16(x: number): number {
  f32Box[0] = x;
  const b = u32Box[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  const mant = b & 0x7fffff;
  if (exp === 0xff) return mant ? sign | 0x7e00 | (mant >>> 13) : sign | 0x7c00;
  const e = exp - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // f16 subnormal (or zero): value / 2^-24 = (mant | implicit) >> (14 - e)
    const shift = 14 - e;
    if (shift > 24) return sign;
    const m = mant | 0x800000;
    const half = 1 << (shift - 1);
    const rem = m & ((1 << shift) - 1);
    let r = m >>> shift;
    if (rem > half || (rem === half && (r & 1))) r++;
    return sign | r; // r may carry into the smallest normal: still the right encoding
  }
  let r = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (r & 1))) r++; // a carry into the exponent is right, up to Inf
  return sign | r;
}

/** The f32 value of f16 bits (exact: every f16 is an f32). */
export function f16ToF32(h: number): number {
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  const s = h & 0x8000 ? -1 : 1;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 0x1f) return m ? NaN : s * Infinity;
  return s * (1024 + m) * 2 ** (e - 25);
}

/** bf16 bits of an f32 value, rounded to nearest, ties to even; NaN stays NaN (quieted). */
export function f32ToBf16(x: number): number {
  f32Box[0] = x;
  const b = u32Box[0];
  if ((b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff)) return (b >>> 16) | 0x40;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

/** The f32 value of bf16 bits (exact). */
export function bf16ToF32(h: number): number {
  u32Box[0] = (h & 0xffff) << 16;
  return f32Box[0];
}

let f16Table: Float32Array | undefined;
/** All 65536 f16 values as f32, built on first use (decoding by table is what makes f16 reads cheap). */
export function f16Lut(): Float32Array {
  if (!f16Table) {
    f16Table = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) f16Table[h] = f16ToF32(h);
  }
  return f16Table;
}

let bf16Table: Float32Array | undefined;
/** All 65536 bf16 values as f32 (the high half of the f32 bits), built on first use. */
export function bf16Lut(): Float32Array {
  if (!bf16Table) {
    bf16Table = new Float32Array(65536);
    const u = new Uint32Array(bf16Table.buffer);
    for (let h = 0; h < 65536; h++) u[h] = h << 16;
  }
  return bf16Table;
}
