import { test } from "node:test";
import assert from "node:assert/strict";
import {
  bf16ToF32, byteSize, decodeHalf, dequantize, encodeHalf, f16ToF32, f32Bits, f32FromBits, f32ToBf16, f32ToF16,
} from "../../graph/dtype.ts";

test("f16 -> f32 -> f16 round-trips every bit pattern (NaNs stay NaN)", () => {
  for (let h = 0; h < 65536; h++) {
    const x = f16ToF32(h);
    const back = f32ToF16(x);
    if (x !== x) assert.ok((back & 0x7c00) === 0x7c00 && (back & 0x3ff) !== 0, `NaN ${h.toString(16)}`);
    else assert.equal(back, h, `f16 ${h.toString(16)} -> ${x} -> ${back.toString(16)}`);
  }
});

test("f16 values: normals, subnormals, signed zero, infinities", () => {
  assert.equal(f16ToF32(0x3c00), 1);
  assert.equal(f16ToF32(0xc000), -2);
  assert.equal(f16ToF32(0x7bff), 65504);
  assert.equal(f16ToF32(0x0400), 2 ** -14); // smallest normal
  assert.equal(f16ToF32(0x0001), 2 ** -24); // smallest subnormal
  assert.equal(f16ToF32(0x03ff), 1023 * 2 ** -24);
  assert.ok(Object.is(f16ToF32(0x8000), -0));
  assert.equal(f16ToF32(0x7c00), Infinity);
  assert.equal(f16ToF32(0xfc00), -Infinity);
  assert.ok(Number.isNaN(f16ToF32(0x7e00)));
});

test("f32 -> f16 rounds to nearest, ties to even, with overflow and underflow right", () => {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even mantissa (1).
  assert.equal(f32ToF16(1 + 2 ** -11), 0x3c00);
  // 1 + 3·2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  assert.equal(f32ToF16(1 + 3 * 2 ** -11), 0x3c02);
  assert.equal(f32ToF16(1 + 2 ** -11 + 2 ** -20), 0x3c01); // above the tie
  assert.equal(f32ToF16(65504), 0x7bff);
  assert.equal(f32ToF16(65519.99), 0x7bff); // below the rounding boundary of the largest finite
  assert.equal(f32ToF16(65520), 0x7c00); // the tie with 65536 rounds to even: infinity
  assert.equal(f32ToF16(1e10), 0x7c00);
  assert.equal(f32ToF16(-1e10), 0xfc00);
  // Subnormals: 2^-25 is the tie between 0 and 2^-24 (rounds to even 0); just above rounds up.
  assert.equal(f32ToF16(2 ** -25), 0x0000);
  assert.equal(f32ToF16(2 ** -25 * (1 + 2 ** -10)), 0x0001);
  assert.equal(f32ToF16(3 * 2 ** -25), 0x0002); // tie between 1 and 2 subnormal units: even (2)
  assert.equal(f32ToF16(5 * 2 ** -25), 0x0002); // tie between 2 and 3: even (2)
  assert.equal(f32ToF16(-(2 ** -24)), 0x8001);
  assert.equal(f32ToF16(2 ** -14 - 2 ** -25), 0x0400); // rounds up out of the subnormals into the smallest normal
  assert.equal(f32ToF16(-0), 0x8000);
  assert.equal(f32ToF16(1e-30), 0x0000);
  assert.equal(f32ToF16(Infinity), 0x7c00);
  const nan = f32ToF16(NaN);
  assert.ok((nan & 0x7c00) === 0x7c00 && (nan & 0x3ff) !== 0);
});

test("f32 -> f16 agrees with exact rounding of the f32 value on a sweep", () => {
  // Reference: for every f16 neighbour pair, the midpoint rounds to the even one; points off it to the nearer.
  for (let h = 0; h < 0x7bff; h += 7) {
    const lo = f16ToF32(h), hi = f16ToF32(h + 1), mid = (lo + hi) / 2;
    assert.equal(f32ToF16(mid), h % 2 === 0 ? h : h + 1);
    const below = f32FromBits(f32Bits(mid) - 1), above = f32FromBits(f32Bits(mid) + 1);
    if (below > lo) assert.equal(f32ToF16(below), h);
    assert.equal(f32ToF16(above), h + 1);
  }
});

test("bf16 <-> f32: exact widening, round to nearest even narrowing", () => {
  for (let h = 0; h < 65536; h += 3) {
    const x = bf16ToF32(h);
    if (x === x) assert.equal(f32ToBf16(x), h);
  }
  assert.equal(f32ToBf16(1), 0x3f80);
  assert.equal(f32ToBf16(f32FromBits(0x3f808000)), 0x3f80); // tie, even stays
  assert.equal(f32ToBf16(f32FromBits(0x3f818000)), 0x3f82); // tie, odd rounds up to even
  assert.equal(f32ToBf16(f32FromBits(0x3f808001)), 0x3f81);
  assert.equal(f32ToBf16(f32FromBits(0x7f7fffff)), 0x7f80); // max f32 rounds to infinity
  assert.equal(f32ToBf16(f32FromBits(0x00008000)), 0x0000); // subnormal tie to even zero
  assert.equal(f32ToBf16(f32FromBits(0x00018000)), 0x0002);
  assert.ok(Number.isNaN(bf16ToF32(f32ToBf16(NaN))));
  assert.equal(f32ToBf16(f32FromBits(0x7f800001)) & 0x7fc0, 0x7fc0); // signalling NaN comes back quiet
  assert.ok(Object.is(bf16ToF32(f32ToBf16(-0)), -0));
});

test("bulk half conversion matches the scalar functions", () => {
  const xs = Float32Array.from([0, -0, 1.5, -3.25, 65504, 1e-7, 3.1416, 1e9, -Infinity]);
  for (const d of ["f16", "bf16"] as const) {
    const h = encodeHalf(d, xs);
    const back = decodeHalf(d, h);
    for (let i = 0; i < xs.length; i++) {
      assert.equal(h[i], d === "f16" ? f32ToF16(xs[i]) : f32ToBf16(xs[i]));
      assert.ok(Object.is(back[i], d === "f16" ? f16ToF32(h[i]) : bf16ToF32(h[i])));
    }
  }
});

// ------------------------------------------------------------------- GGUF blocks built by hand

function f16le(x: number): [number, number] {
  const h = f32ToF16(x);
  return [h & 0xff, h >> 8];
}

test("q8_0: d · q for signed 8-bit q", () => {
  const qs = Array.from({ length: 32 }, (_, i) => i * 8 - 128); // -128 .. 120
  const b = Uint8Array.from([...f16le(0.5), ...qs.map((q) => q & 0xff)]);
  assert.equal(byteSize("q8_0", 32), b.length);
  const y = dequantize("q8_0", b, 32);
  assert.deepEqual(Array.from(y), qs.map((q) => q * 0.5));
});

test("q4_0: low nibbles are elements 0..15, high nibbles 16..31, each (q - 8)·d", () => {
  const qs = Array.from({ length: 16 }, (_, j) => (j & 0xf) | ((15 - j) << 4));
  const b = Uint8Array.from([...f16le(-0.25), ...qs]);
  const y = dequantize("q4_0", b, 32);
  const want = [
    ...Array.from({ length: 16 }, (_, j) => (j - 8) * -0.25),
    ...Array.from({ length: 16 }, (_, j) => (15 - j - 8) * -0.25),
  ];
  assert.deepEqual(Array.from(y), want);
  // Two blocks: the second starts 18 bytes in.
  const two = new Uint8Array(36);
  two.set(b, 0);
  two.set(Uint8Array.from([...f16le(2), ...qs]), 18);
  const y2 = dequantize("q4_0", two, 64);
  assert.deepEqual(Array.from(y2.subarray(32)), want.map((v) => (v / -0.25) * 2));
});

// A q4_K block from 8 sub-block (scale, min) pairs of 6 bits and 256 4-bit quants, packed as ggml does.
function q4kBlock(d: number, dmin: number, sc: number[], mn: number[], q: number[]): Uint8Array {
  const s = new Uint8Array(12);
  for (let j = 0; j < 4; j++) {
    s[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
    s[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
    s[j + 8] = (sc[j + 4] & 0xf) | ((mn[j + 4] & 0xf) << 4);
  }
  const qs = new Uint8Array(128);
  for (let c = 0; c < 4; c++) {
    for (let l = 0; l < 32; l++) qs[c * 32 + l] = q[c * 64 + l] | (q[c * 64 + 32 + l] << 4);
  }
  return Uint8Array.from([...f16le(d), ...f16le(dmin), ...s, ...qs]);
}

test("q4_k: 8 sub-blocks of 32 with 6-bit scales and mins: d·sc·q − dmin·m", () => {
  const sc = [1, 2, 3, 63, 17, 33, 48, 62], mn = [0, 5, 9, 63, 21, 40, 1, 59];
  const q = Array.from({ length: 256 }, (_, i) => (i * 7 + 3) % 16);
  const d = 0.125, dmin = 0.0625;
  const b = q4kBlock(d, dmin, sc, mn, q);
  assert.equal(b.length, 144);
  const y = dequantize("q4_k", b, 256);
  for (let i = 0; i < 256; i++) {
    const s = i >> 5;
    const want = Math.fround(Math.fround(d * sc[s]) * q[i]) - Math.fround(dmin * mn[s]);
    assert.equal(y[i], Math.fround(want), `element ${i}`);
  }
  // A value computed by hand: element 37 is in sub-block 1 (scale 2, min 5), q = (37·7+3) % 16 = 6.
  assert.equal(y[37], 0.125 * 2 * 6 - 0.0625 * 5);
});

// A q6_K block: 16 signed 8-bit scales, 6-bit quants split into ql (low 4) and qh (high 2), ggml's layout.
function q6kBlock(d: number, sc: number[], q: number[]): Uint8Array {
  const ql = new Uint8Array(128), qh = new Uint8Array(64);
  for (let h = 0; h < 2; h++) {
    for (let l = 0; l < 32; l++) {
      const at = (k: number) => q[h * 128 + k * 32 + l];
      ql[h * 64 + l] = (at(0) & 0xf) | ((at(2) & 0xf) << 4);
      ql[h * 64 + l + 32] = (at(1) & 0xf) | ((at(3) & 0xf) << 4);
      qh[h * 32 + l] = (at(0) >> 4) | ((at(1) >> 4) << 2) | ((at(2) >> 4) << 4) | ((at(3) >> 4) << 6);
    }
  }
  return Uint8Array.from([...ql, ...qh, ...sc.map((s) => s & 0xff), ...f16le(d)]);
}

test("q6_k: 16 sub-blocks of 16 with signed scales: d·sc·(q − 32)", () => {
  const sc = [1, -1, 2, -128, 127, 5, -7, 9, 11, -13, 0, 3, 64, -64, 100, -100];
  const q = Array.from({ length: 256 }, (_, i) => (i * 13 + 5) % 64);
  const d = 0.5;
  const b = q6kBlock(d, sc, q);
  assert.equal(b.length, 210);
  const y = dequantize("q6_k", b, 256);
  for (let i = 0; i < 256; i++) {
    const want = Math.fround(Math.fround(d * sc[i >> 4]) * (q[i] - 32));
    assert.equal(y[i], want, `element ${i}`);
  }
  // By hand: element 200 is in sub-block 12 (scale 64), q = (200·13+5) % 64 = 45 → 0.5·64·13.
  assert.equal(y[200], 416);
});

test("dequantize refuses too few bytes and partial blocks", () => {
  assert.throws(() => dequantize("q8_0", new Uint8Array(33), 32), RangeError);
  assert.throws(() => byteSize("q4_k", 100), RangeError);
});
