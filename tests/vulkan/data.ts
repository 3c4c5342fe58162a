// Data helpers of the Vulkan feature tests: a seeded generator, byte views, and f16/bf16/f32 bit conversions
// written from their definitions (the platform's Float16Array for f16 rounding), never from a renderer.

/** The tests' one seeded generator (tests/rng.ts). */
export { Rng } from "../rng.ts";
export const bytes = (a: ArrayBufferView): Uint8Array => new Uint8Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
export const pad16 = (n: number): number => Math.ceil(n / 16) * 16;
export const zeros = (n: number): Uint8Array => new Uint8Array(pad16(n));
export const F = (b: Uint8Array) => new Float32Array(b.buffer, b.byteOffset, b.byteLength >> 2);
export const U = (b: Uint8Array) => new Uint32Array(b.buffer, b.byteOffset, b.byteLength >> 2);
export const I = (b: Uint8Array) => new Int32Array(b.buffer, b.byteOffset, b.byteLength >> 2);
export const U16 = (b: Uint8Array) => new Uint16Array(b.buffer, b.byteOffset, b.byteLength >> 1);
export const fr = Math.fround;

const H = new Float16Array(1);
const HU = new Uint16Array(H.buffer);
/** f32 value -> f16 bits, round to nearest even (the platform's conversion). */
export function toHalf(x: number): number {
  H[0] = x;
  return HU[0];
}
export function fromHalf(h: number): number {
  HU[0] = h;
  return H[0];
}
const FB = new Float32Array(1);
const FBU = new Uint32Array(FB.buffer);
export function bitsOf(x: number): number {
  FB[0] = x;
  return FBU[0];
}
export function fromBits(u: number): number {
  FBU[0] = u;
  return FB[0];
}
export function toBf16(x: number): number {
  const b = bitsOf(x);
  if ((b & 0x7fffffff) > 0x7f800000) return (b >>> 16) | 0x40;
  return (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
}
export const fromBf16 = (h: number): number => fromBits(h << 16);

/** Bit-exact f32 comparison (any NaN matches any NaN). */
export function sameF(g: number, w: number): boolean {
  return Number.isNaN(w) ? Number.isNaN(g) : Object.is(g, w) || (g === w && g !== 0);
}
export function report(bad: string[], what: string, i: number, got: unknown, want: unknown): void {
  if (bad.length < 12) bad.push(`${what}[${i}]: got ${got}, want ${want}`);
}
