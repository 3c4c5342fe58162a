// Narrow storage through 32-bit words, for a target without 8- or 16-bit loads and stores (WGSL always;
// SPIR-V on a device without storageBuffer8/16BitAccess): each u8/i8/u16/i16/f16/bf16 access becomes an
// access to the u32 word that holds it (a u32 view of the same bytes) plus bit arithmetic.
// - A load extracts the element's bits (sign-extended for i8/i16) and decodes them (f16bits / bf16bits).
// - A store narrower than a word shares that word with elements other invocations may be storing at the
//   same time, so it clears its bits with an atomic and, then sets them with an atomic or (the IR's `atomic`).
//   Two invocations storing the same element race in the IR anyway.
// - A vector access that covers whole words becomes a vector access of words (the elements packed or
//   unpacked in registers); one of 2 bytes is one word and, for a store, the atomic pair.
// f32 -> f16 / bf16 round to nearest even in integer arithmetic (overflow to infinity, NaN stays a quiet NaN
// with its top payload bits), so every target rounds the same way whatever its float modes.
import type { CType, EType, Expr, Kernel, Stmt } from "../ir.ts";
import { ESIZE } from "../ir.ts";
import { type Hoist, hoistKernel, leaf, materialize } from "./hoist.ts";

/** Which element sizes go through words. */
export interface NarrowNeeds {
  bits8: boolean;
  bits16: boolean;
}

const u = (v: number): Expr => ({ k: "const", t: "u32", v: v >>> 0 });
const i = (v: number): Expr => ({ k: "const", t: "i32", v: v | 0 });
const bin = (op: Extract<Expr, { k: "bin" }>["op"], t: CType, a: Expr, b: Expr): Expr => ({ k: "bin", t, op, a, b });
const sel = (c: Expr, a: Expr, b: Expr): Expr => ({ k: "select", t: a.t, c, a, b });
const bits = (a: Expr): Expr => ({ k: "bitcast", t: "u32", a });
const cast = (t: CType, a: Expr): Expr => a.t === t ? a : { k: "cast", t, a };
const shr = (a: Expr, n: Expr) => bin("shr", a.t, a, n);
const shl = (a: Expr, n: Expr) => bin("shl", a.t, a, n);
const and = (a: Expr, b: Expr) => bin("and", a.t, a, b);
const or = (a: Expr, b: Expr) => bin("or", a.t, a, b);
const add = (a: Expr, b: Expr) => bin("add", a.t, a, b);
const sub = (a: Expr, b: Expr) => bin("sub", a.t, a, b);

/** f32 -> f16 bits in a u32, round to nearest even (x an f32 leaf). */
export function f16BitsOf(x: Expr): Expr {
  const b = bits(x);
  const sign = and(shr(b, u(16)), u(0x8000));
  const abs = and(b, u(0x7fffffff));
  // normal halves: rebias the exponent (127 -> 15) and round 13 bits off
  const t = sub(abs, u(0x38000000));
  const normal = shr(add(add(t, u(0xfff)), and(shr(t, u(13)), u(1))), u(13));
  // subnormal halves: the full significand shifted right by s = 126 - exponent (>= 14 there), rounded
  const s = bin("min", "u32", sub(u(126), shr(abs, u(23))), u(31));
  const m = or(and(abs, u(0x7fffff)), u(0x800000));
  const h = shr(m, s);
  const rem = and(m, sub(shl(u(1), s), u(1)));
  const half = shl(u(1), sub(s, u(1)));
  const up = bin("or", "bool", bin("gt", "bool", rem, half),
    bin("and", "bool", bin("eq", "bool", rem, half), bin("eq", "bool", and(h, u(1)), u(1))));
  let r = sel(bin("ge", "bool", abs, u(0x38800000)), normal, add(h, sel(up, u(1), u(0))));
  r = sel(bin("ge", "bool", abs, u(0x477ff000)), u(0x7c00), r);
  r = sel(bin("gt", "bool", abs, u(0x7f800000)), or(u(0x7e00), shr(and(abs, u(0x7fffff)), u(13))), r);
  return or(r, sign);
}

/**
 * f32 x rounded to bf16 in the upper half of a u32, round to nearest even (the carry into the upper half is
 * 0x7fff plus the kept half's lowest bit), a NaN a quiet NaN with its top payload bits; the lower half is junk.
 */
function bf16High(x: Expr): Expr {
  const b = bits(x);
  const nan = bin("gt", "bool", and(b, u(0x7fffffff)), u(0x7f800000));
  return sel(nan, or(b, u(0x400000)), add(add(b, u(0x7fff)), and(shr(b, u(16)), u(1))));
}

/** f32 -> bf16 bits in a u32, round to nearest even; NaN stays a quiet NaN. */
export const bf16BitsOf = (x: Expr): Expr => shr(bf16High(x), u(16));

/** Two f32 as bf16 bits in one u32, `lo` in the low half, each as bf16BitsOf rounds it (no shift for `hi`). */
export const bf16PairBits = (lo: Expr, hi: Expr): Expr => or(bf16BitsOf(lo), and(bf16High(hi), u(0xffff0000)));

/** The element bits (low bits of a u32, upper bits clear) of value e stored as `view`. */
function encode(view: EType, e: Expr, h: Hoist): Expr {
  const mask = u(ESIZE[view] === 1 ? 0xff : 0xffff);
  switch (view) {
    case "f16": return materialize(f16BitsOf(leaf(cast("f32", e), h)), h);
    case "bf16": return materialize(bf16BitsOf(leaf(cast("f32", e), h)), h);
    case "u8": case "u16": return and(cast("u32", e), mask);
    default: return and(bits(cast("i32", e)), mask); // i8, i16
  }
}

/** The value of a `view` element `sh` bits up in u32 word w, as compute type t. */
function decode(view: EType, w: Expr, sh: Expr, t: CType): Expr {
  const width = ESIZE[view] * 8;
  const at = sh.k === "const" && sh.v === 0 ? w : shr(w, sh);
  let v: Expr;
  switch (view) {
    case "f16": v = { k: "un", t: "f32", op: "f16bits", a: at }; break; // reads the low 16 bits
    case "bf16": v = { k: "un", t: "f32", op: "bf16bits", a: at }; break;
    case "u8": case "u16": v = and(at, u(2 ** width - 1)); break;
    default: { // i8, i16: up to the top, then an arithmetic shift down
      const up = sh.k === "const" ? u(32 - width - sh.v) : sub(u(32 - width), sh);
      v = shr({ k: "bitcast", t: "i32", a: shl(w, up) }, i(32 - width));
    }
  }
  return t === v.t ? v : cast(t, v); // an f16 load of an f16 view: exact
}

/** The word-index shift and in-word bit position of element q of a `size`-byte view. */
function place(q: Expr, size: number): { word: Expr; sh: Expr } {
  const lg = size === 1 ? 2 : 1;
  const sh = q.k === "const" ? u((q.v & ((1 << lg) - 1)) * size * 8) : shl(and(q, u((1 << lg) - 1)), u(size === 1 ? 3 : 4));
  return { word: shr(q, u(lg)), sh };
}

/** The kernel with every narrow access the target lacks going through words (the same object when none). */
export function narrowStorage(k: Kernel, needs: NarrowNeeds): Kernel {
  if (!needs.bits8 && !needs.bits16) return k;
  const narrow = (view: EType) => (ESIZE[view] === 1 && needs.bits8) || (ESIZE[view] === 2 && needs.bits16);
  return hoistKernel(k, {
    wants: (e) => e.k === "load" && narrow(e.view),
    expr: (e, h) => {
      if (e.k !== "load" || !narrow(e.view)) return undefined;
      const q = leaf(e.index, h);
      const { word, sh } = place(q, ESIZE[e.view]);
      const w: Expr = { k: "load", t: "u32", buf: e.buf, view: "u32", index: word };
      return decode(e.view, w, sh, e.t);
    },
    stmt: (s, h) => {
      if ((s.k !== "store" && s.k !== "loadv" && s.k !== "storev") || !narrow(s.view)) return undefined;
      const size = ESIZE[s.view];
      const q = leaf(s.index, h);
      if (s.k === "loadv") {
        const n = s.dst.length, bytes = n * size;
        if (bytes < 4) { // two bytes of one word
          const { word, sh } = place(q, size);
          const w = leaf({ k: "load", t: "u32", buf: s.buf, view: "u32", index: word }, h);
          return s.dst.map((d, j): Stmt => ({
            k: "let", v: d, e: decode(s.view, w, j ? add(sh, u(j * size * 8)) : sh, d.t),
          }));
        }
        const words = Array.from({ length: bytes / 4 }, () => h.fresh("u32"));
        const out: Stmt[] = [{ k: "loadv", dst: words, buf: s.buf, view: "u32", index: shr(q, u(size === 1 ? 2 : 1)) }];
        s.dst.forEach((d, j) => {
          const w: Expr = { k: "var", t: "u32", v: words[(j * size) >> 2] };
          out.push({ k: "let", v: d, e: decode(s.view, w, u(((j * size) & 3) * 8), d.t) });
        });
        return out;
      }
      const es = s.k === "store" ? [s.e] : s.es;
      const parts = es.map((e) => leaf(encode(s.view, e, h), h));
      const pack = (from: number, count: number): Expr =>
        parts.slice(from, from + count).reduce((acc, p, j) => j === 0 ? p : or(acc, shl(p, u(j * size * 8))));
      const bytes = es.length * size;
      if (bytes < 4) {
        const { word, sh } = place(q, size);
        const wi = leaf(word, h), at = leaf(sh, h);
        const mask = bytes === 1 ? 0xff : 0xffff;
        return [
          { k: "atomic", op: "and", buf: s.buf, index: wi, e: { k: "un", t: "u32", op: "not", a: shl(u(mask), at) } },
          { k: "atomic", op: "or", buf: s.buf, index: wi, e: shl(pack(0, es.length), at) },
        ];
      }
      const per = 4 / size;
      const words = Array.from({ length: bytes / 4 }, (_, w) => pack(w * per, per));
      return [{ k: "storev", buf: s.buf, view: "u32", index: shr(q, u(size === 1 ? 2 : 1)), es: words }];
    },
  }, "nw");
}
