// GGUF block dequantization in the kernel IR: one definition per block type, used by every kernel that reads
// one (the embedding gather, the matmul, the fused decode gemv). A block is cut into `chunks` equal pieces;
// a chunk is what one lane decodes at a time: its packed bytes come in with the widest loads the block's
// alignment allows (16-byte loads for q4_k/q5_k, whose 144/176-byte blocks keep 16-byte alignment; 32-bit
// words for q4_1/q5_1; 16-bit words for the 2-byte-aligned rest), and its scales are decoded once for the
// groups of values that share them.
//
// A chunk's values come as groups: value = q·scale (+ bias), q a small integer held as f32, and for each group
// the values sit at consecutive elements starting at `at + off`. Evaluated in that order (one rounding per
// operation, no fused multiply-add) this is exactly ggml's dequantize_row_* (graph/dtype.ts, the oracle);
// a dot product instead sums q·x per group and applies scale and bias once: scale·Σq·x + bias·Σx.
import { type Buffer, f32, type KernelBuilder, u32, un, type Val } from "../ir.ts";
import { BLOCK, type BlockDType } from "../../graph/dtype.ts";
import { XQ_FLOOR, XQ_RUNS } from "../../graph/ops/qdot.ts";

export type QType = BlockDType;

export interface QGroup {
  scale: Val;
  /** Added after the scale (K-quants: the negated min; q4_1/q5_1: the min). */
  bias?: Val;
  /** Element offset of q[0] from the chunk's `at`. */
  off: number;
  q: Val[];
  /**
   * q[i] holds the integer times 2^p[i]: a value masked in place out of its word (no shift; see `small`).
   * Scaling by a power of two is exact, so a dot sums each power's products apart and scales the sums.
   */
  p?: number[];
}
export interface QChunk {
  /** Element index within the block of offset 0. */
  at: Val;
  groups: QGroup[];
}

export interface QLayout {
  elems: number;
  bytes: number;
  /** Chunks per block (a power of two). */
  chunks: number;
  /** Values per chunk. */
  per: number;
  /** The load view the block is read in (its alignment). */
  view: "u16" | "u32";
  /** Registers of raw words a lane loads per chunk (loadChunk). */
  raw: number;
  /** Its groups carry a bias (a min): a dot needs Σx per group (kernels/lib/gemv.ts). */
  biased?: boolean;
  /**
   * Chunks that cover one contiguous span of the block's elements (a K slice of kernels/lib/tiled_matmul.ts):
   * q4_k/q5_k chunk c holds elements of the 64-element sub-block c >> 1, q6_k chunk c those of the 128-element
   * half c >> 2, the 32-element types' two chunks the whole block.
   */
  span: number;
}

export const QLAYOUT: Record<QType, QLayout> = {
  q8_0: { ...BLOCK.q8_0, chunks: 2, per: 16, view: "u16", raw: 9, span: 2 },
  q4_0: { ...BLOCK.q4_0, chunks: 2, per: 16, view: "u16", raw: 5, span: 2 },
  q4_1: { ...BLOCK.q4_1, chunks: 2, per: 16, view: "u32", raw: 3, biased: true, span: 2 },
  q5_0: { ...BLOCK.q5_0, chunks: 2, per: 16, view: "u16", raw: 6, span: 2 },
  q5_1: { ...BLOCK.q5_1, chunks: 2, per: 16, view: "u32", raw: 4, biased: true, span: 2 },
  q4_k: { ...BLOCK.q4_k, chunks: 8, per: 32, view: "u32", raw: 8, biased: true, span: 2 },
  q5_k: { ...BLOCK.q5_k, chunks: 8, per: 32, view: "u32", raw: 12, biased: true, span: 2 },
  q6_k: { ...BLOCK.q6_k, chunks: 8, per: 32, view: "u16", raw: 17, span: 4 },
};

export function isQType(t: string): t is QType {
  return t in QLAYOUT;
}

/** Words (in the layout's view) per block. */
export function qWords(t: QType): number {
  const l = QLAYOUT[t];
  return l.bytes / (l.view === "u32" ? 4 : 2);
}

/** Byte k (0..) of little-endian words of `bits` bits each, as u32. */
function byteOf(words: Val[], k: number, bits: 16 | 32): Val {
  const per = bits / 8;
  const w = words[Math.floor(k / per)], sh = (k % per) * 8;
  return (sh ? w.shr(sh) : w).and(0xff);
}

/** Loads `n` words of `view` at word index `at` (vector loads when aligned to 16 bytes). */
function words(b: KernelBuilder, W: Buffer, view: "u16" | "u32", at: Val, n: number, wide: boolean): Val[] {
  if (wide && view === "u32" && n % 4 === 0) {
    const out: Val[] = [];
    for (let i = 0; i < n; i += 4) out.push(...b.loadv(W, i ? at.add(i) : at, 4, "u32"));
    return out;
  }
  return Array.from({ length: n }, (_, i) => b.let(b.load(W, i ? at.add(i) : at, view), "u32", "qw"));
}

/**
 * `n` (even) 16-bit words from 16-bit word index `at16` of a 4-byte aligned tensor, read as n/2 + 1 u32 words
 * (half the load instructions of 16-bit loads); `pick` then emits the selects that take each from the low or
 * high half of its word (at16 odd or even; the high halves shifted down, the low ones keep the next half above
 * bit 16, which every user masks off). The last word is read only when at16 is odd (else the one before again).
 */
function halves(b: KernelBuilder, W: Buffer, at16: Val, n: number): () => Val[] {
  const m = b.let(at16.and(1), "u32", "mis"), w0 = b.let(at16.shr(1), "u32", "hw");
  const nw = n / 2 + 1;
  const ws = Array.from({ length: nw }, (_, i) => b.let(b.load(W, i === nw - 1 ? w0.add(i - 1).add(m) : i ? w0.add(i) : w0, "u32"), "u32", "qw"));
  return () => {
    const hs = Array.from({ length: n + 1 }, (_, j) => (j & 1 ? b.let(ws[j >> 1].shr(16), "u32", "qhi") : ws[j >> 1]));
    const odd = m.ne(0);
    return Array.from({ length: n }, (_, i) => b.let(odd.select(hs[i + 1], hs[i]), "u32", "q16"));
  };
}

const half = (w: Val, hi: boolean): Val => un("f16bits", hi ? w.shr(16) : w.and(0xffff));

/**
 * v - off as f32 for a small unsigned v (< 2^23): 2^23 + v has v in its mantissa, so OR-ing the exponent in and
 * subtracting 2^23 + off is exact, and costs one logic op and one float add at full rate instead of a
 * quarter-rate integer-to-float conversion.
 */
function small(v: Val, off = 0): Val {
  return v.or(0x4b000000).bitcast("f32").sub(f32(8388608 + off));
}
/** A signed byte held in the low 8 bits of `v` (higher bits zero) as f32, exactly. */
const sbyte = (v: Val): Val => small(v.xor(0x80), 128);

/**
 * The values of 16-bit words (u32 holding 16 bits, or both halves of u32 words when `w32`) masked in place:
 * per byte, `bits` wide fields at bit 0 (and, for 4-bit fields, at bit 4), each as (field - off)·2^p with p its
 * bit position in the 16-bit half; a high half is shifted down once for its two bytes. Returns [low fields,
 * high fields (4-bit only)] in byte order with their p.
 */
function inPlace(b: KernelBuilder, ws: Val[], w32: boolean, bits: 4 | 8, off: number, flip = 0): { v: Val[]; p: number[] }[] {
  const lo = { v: [] as Val[], p: [] as number[] }, hi = { v: [] as Val[], p: [] as number[] };
  const halves = w32 ? ws.flatMap((w) => [w, b.let(w.shr(16), "u32", "qhi")]) : ws;
  for (const h0 of halves) {
    const h = flip ? b.let(h0.xor(flip), "u32", "qx") : h0;
    for (const sh of [0, 8]) {
      const mask = (bits === 8 ? 0xff : 0xf) << sh;
      lo.v.push(small(h.and(mask), off * 2 ** sh));
      lo.p.push(sh);
      if (bits === 4) {
        hi.v.push(small(h.and(mask << 4), off * 2 ** (sh + 4)));
        hi.p.push(sh + 4);
      }
    }
  }
  return bits === 4 ? [lo, hi] : [lo];
}

/**
 * K-quant 6-bit scales and mins of sub-blocks 2j and 2j+1 (j = 0..3, runtime) from the 12 scale bytes in words
 * s[0..2], as [sc0, m0, sc1, m1]. Both sub-blocks' bytes sit side by side in each word (shifted by 16·(j&1)),
 * so each pair is decoded at once: for j < 2 the low 6 bits of bytes 2j.. and 2j+4..; for j >= 2 a nibble of
 * bytes 2j+4.. with the top 2 bits of bytes 2j-4.. and 2j... The selects depend on the lane's chunk only.
 */
function scalesK4(b: KernelBuilder, s: Val[], j: Val): [Val, Val, Val, Val] {
  const hi = j.ge(2), sh = j.and(1).mul(16);
  const A = b.let(s[0].shr(sh), "u32", "ka"), B = b.let(s[1].shr(sh), "u32", "kb"), C = b.let(s[2].shr(sh), "u32", "kc");
  const low = hi.select(u32(0x0f0f), u32(0x3f3f)), top = hi.select(u32(0x3030), u32(0));
  const sc = b.let(hi.select(C, A).and(low).or(A.shr(2).and(top)), "u32", "ksc");
  const m = b.let(hi.select(C.shr(4), B).and(low).or(B.shr(2).and(top)), "u32", "kmn");
  return [sc.and(0xff), m.and(0xff), sc.shr(8), m.shr(8)];
}

/**
 * Decodes chunk `c` (0 .. chunks-1) of the block at word index `base` (in the layout's view) of `W`.
 * `wide`: the tensor starts 16-byte aligned, so 16-byte vector loads are allowed.
 */
export function dequantChunk(b: KernelBuilder, W: Buffer, t: QType, base: Val, c: Val, wide = true): QChunk {
  return loadChunk(b, W, t, base, c, wide).decode();
}

/** A chunk whose loads are issued: `at` as in QChunk; `decode` emits the arithmetic (after other work). */
export interface LoadedChunk {
  at: Val;
  decode(): QChunk;
  /** The chunk's integer quants for the dot4 path (XQ_TYPES only; the same groups as decode's). */
  ints?(): QIntChunk;
}

/**
 * A group's weights as int8x4 words (values off .. off+n-1 of the chunk in order, 4 per u32, each 0..63 or
 * -128..127) with its integer scale `sc` (i32; none: 1), offset `off` (the group's Σ w·q is taken as
 * Σ (w - off)·q) and min `m` (i32; none: 1; counted where the chunk has a dmin, subtracted as dmin·m·Σq): see
 * graph/ops/qdot.ts.
 */
export interface QIntGroup {
  w: Val[];
  sc?: Val;
  m?: Val;
  off?: number;
}
export interface QIntChunk {
  d: Val;
  /** The min's scale (K-quants: dmin; q4_1/q5_1: the negated min, which adds). */
  dmin?: Val;
  groups: QIntGroup[];
}

/** The block types with an integer path (graph/ops/qdot.ts XQ_RUNS: a run is a chunk, its groups chunkGroups'). */
export const XQ_TYPES: readonly QType[] = (Object.keys(XQ_RUNS) as QType[]).filter((t) => {
  const cg = chunkGroups(t);
  for (const run of XQ_RUNS[t]!) {
    const ok = run.length === cg.length && run.every((g, i) => g.length === cg[i].n && g.every((e, l) => e - run[0][0] === cg[i].off + l));
    if (!ok) throw new Error(`dequant.ts: ${t}'s chunk groups are not graph/ops/qdot.ts's runs`);
  }
  return true;
});

/** A quantized x run: per group its int8x4 words and Σq (i32); the run's scale dx. */
export interface XRun {
  words: Val[][];
  sums: Val[];
  dx: Val;
}

/**
 * The x of a chunk (`v[g]`: group g's f32 values, a multiple of 4 each) quantized as one run, as
 * graph/ops/qdot.ts states. The bits of fl(v·is) + 1.5·2^23 hold the rounded value in their low byte.
 */
export function quantizeRun(b: KernelBuilder, v: Val[][]): XRun {
  const { amax, is } = runScale(b, tree(v.flat().map((x) => x.abs()), (a, c) => a.max(c)));
  const words = v.map((g) => Array.from({ length: g.length / 4 }, (_, i) => quantizeWord(b, g.slice(4 * i, 4 * i + 4), is)));
  const sums = words.map((ws) => b.let(tree(ws.map(wordSum), (a, c) => a.add(c)), "i32", "qxs"));
  return { words, sums, dx: runDx(b, amax) };
}

/** A run's amax (of |x|, before the floor) made safe, and the factor is = 127 / amax its values are scaled by. */
export function runScale(b: KernelBuilder, absMax: Val): { amax: Val; is: Val } {
  const m = b.let(absMax.max(f32(XQ_FLOOR)), "f32", "xmax");
  // A NaN or an infinity makes dx NaN (the q then depend on the device's NaN bits; every T is NaN anyway).
  const amax = b.let(m.isfinite().select(m, f32(NaN)), "f32", "amax");
  return { amax, is: b.let(f32(127).div(amax), "f32", "is") };
}
/** The run's scale dx from its runScale amax. */
export const runDx = (b: KernelBuilder, amax: Val): Val => b.let(amax.mul(f32(1 / 127)), "f32", "dx");
/** Four values of a run as one int8x4 word: the bits of fl(x·is) + 1.5·2^23 hold the rounded value in their low byte. */
export function quantizeWord(b: KernelBuilder, v: Val[], is: Val): Val {
  const [a, c, d, e] = v.map((x) => b.let(x.mul(is).add(f32(12582912)).bitcast("u32"), "u32", "qb"));
  return b.let(a.and(0xff).or(c.and(0xff).shl(8)).or(d.and(0xff).shl(16)).or(e.shl(24)), "u32", "qxw");
}
/** Σ of an int8x4 word's four signed bytes (i32). */
export const wordSum = (w: Val): Val => w.dot4(u32(0x01010101));

/**
 * Σ over a chunk of w·x with x quantized as run `r`: A = Σ_g sc_g·(I_g − off·Σq_g) and M = Σ_g m_g·Σq_g in
 * integers (I_g by dot4), then fl(fl(d·dx)·A) − fl(fl(dmin·dx)·M).
 */
export function chunkDotInt(b: KernelBuilder, ch: QIntChunk, r: XRun): Val {
  const A = tree(ch.groups.map((g, gi) => {
    let I = tree(g.w.map((w, j) => w.dot4(r.words[gi][j])), (a, c) => a.add(c));
    if (g.off) I = I.sub(r.sums[gi].mul(g.off));
    return g.sc ? g.sc.mul(I) : I;
  }), (a, c) => a.add(c));
  let t = ch.d.mul(r.dx).mul(A.cast("f32"));
  if (ch.dmin) {
    const M = tree(ch.groups.map((g, gi) => (g.m ? g.m.mul(r.sums[gi]) : r.sums[gi])), (a, c) => a.add(c));
    t = t.sub(ch.dmin.mul(r.dx).mul(M.cast("f32")));
  }
  return b.let(t, "f32", "qt");
}

/** u32 words of the bytes at 16-bit word `at16` of a 4-byte aligned tensor (`n` words; see halves). */
function words32(b: KernelBuilder, W: Buffer, at16: Val, n: number): () => Val[] {
  const m = b.let(at16.and(1), "u32", "mis"), w0 = b.let(at16.shr(1), "u32", "hw");
  const ws = Array.from({ length: n + 1 }, (_, i) => b.let(b.load(W, i === n ? w0.add(i - 1).add(m) : i ? w0.add(i) : w0, "u32"), "u32", "qw"));
  return () => {
    const odd = m.ne(0);
    return Array.from({ length: n }, (_, i) => b.let(odd.select(ws[i].shr(16).or(ws[i + 1].shl(16)), ws[i]), "u32", "qw4"));
  };
}
/** 16-bit words (low 16 bits meaningful) paired into u32 words. */
const pairUp = (b: KernelBuilder, h: Val[]): Val[] =>
  Array.from({ length: h.length / 2 }, (_, i) => b.let(h[2 * i].and(0xffff).or(h[2 * i + 1].shl(16)), "u32", "qw4"));
/**
 * The two groups of a 32-element block's chunk (q4_0/q4_1/q5_0/q5_1) as int8x4 words: from the 8 quant bytes in
 * u32 words `ws`, the low nibbles (elements 8c..) and the high ones (16 + 8c..), each with its fifth bit from `qh`
 * (shifted to the chunk: bit l for element 8c + l, bit 16 + l for 16 + 8c + l), offset `off`.
 */
function nibbleGroups(b: KernelBuilder, ws: Val[], qh: Val | undefined, off: number): QIntGroup[] {
  // 4 bits of h to bit 4 of each byte: h·(1 + 2^7 + 2^14 + 2^21) puts bit k at bit 8k (no carries: h < 16)
  const fifth = (sh: number) => qh!.shr(sh).and(0xf).mul(0x00204081).and(0x01010101).shl(4);
  const lo = ws.map((w, i) => b.let(qh ? w.and(0x0f0f0f0f).or(fifth(4 * i)) : w.and(0x0f0f0f0f), "u32", "qlo"));
  const hi = ws.map((w, i) => b.let(qh ? w.shr(4).and(0x0f0f0f0f).or(fifth(16 + 4 * i)) : w.shr(4).and(0x0f0f0f0f), "u32", "qhi"));
  return [{ w: lo, off }, { w: hi, off }];
}

/** A signed byte in the low 8 bits of u32 `v` (higher bits zero) as i32. */
const sbyteI = (v: Val): Val => v.shl(24).bitcast("i32").shr(24);

/** Element offsets and counts of a chunk's groups (the same for every chunk of a type). */
export function chunkGroups(t: QType): { off: number; n: number }[] {
  switch (t) {
    case "q8_0": return [{ off: 0, n: 16 }];
    case "q4_0": case "q5_0": case "q4_1": case "q5_1": return [{ off: 0, n: 8 }, { off: 16, n: 8 }];
    case "q4_k": case "q5_k": return [{ off: 0, n: 16 }, { off: 32, n: 16 }];
    case "q6_k": return [0, 32, 64, 96].map((off) => ({ off, n: 8 }));
  }
}

/**
 * `dequantChunk` split in two: the chunk's loads are emitted now, its decoding when `decode` is called, so a
 * caller can issue several rows' loads before decoding the first (loads in flight while it computes).
 * `pairs4`: the tensor starts 4-byte aligned and its rows hold an even number of blocks (q8_0 and q6_k read
 * u32 words).
 */
export function loadChunk(b: KernelBuilder, W: Buffer, t: QType, base: Val, c: Val, wide = true, pairs4 = false, xq = false): LoadedChunk {
  switch (t) {
    case "q8_0": return loadQ8_0(b, W, base, c, pairs4, xq);
    case "q4_0": case "q5_0": return loadQ4_0(b, W, t, base, c, pairs4, xq);
    case "q4_1": case "q5_1": return loadQ4_1(b, W, t, base, c);
    case "q4_k": case "q5_k": return loadQK(b, W, t, base, c, wide);
    case "q6_k": return loadQ6K(b, W, base, c, pairs4, xq);
  }
}

/** loadChunk of q8_0: d, qs[32]: chunk c = qs[16c .. 16c+15] */
function loadQ8_0(b: KernelBuilder, W: Buffer, base: Val, c: Val, pairs4: boolean, xq: boolean): LoadedChunk {
  const qv = (v: Val) => b.let(v, "f32", "q");
  const dw = b.let(b.load(W, base, "u16"), "u32", "dw");
  // pairs4: every other block starts 4-byte aligned, so u32 loads (and selects) read the quants.
  const pick = pairs4 && !xq ? halves(b, W, base.add(c.mul(8)).add(1), 8) : undefined;
  const ws = pick || (xq && pairs4) ? [] : words(b, W, "u16", base.add(c.mul(8)).add(1), 8, false);
  const at = c.mul(16);
  const ints = xq && pairs4 ? words32(b, W, base.add(c.mul(8)).add(1), 4) : undefined;
  return {
    at,
    decode: () => {
      const d = b.let(half(dw, false), "f32", "d");
      const [v] = inPlace(b, pick ? pick() : ws, false, 8, 128, 0x8080);
      return { at, groups: [{ scale: d, off: 0, q: v.v.map(qv), p: v.p }] };
    },
    ints: () => ({ d: b.let(half(dw, false), "f32", "d"), groups: [{ w: ints ? ints() : pairUp(b, ws) }] }),
  };
}

/** loadChunk of q4_0 and q5_0: d, [qh u32], qs[16]: chunk c = qs[8c .. 8c+7] (elements 8c+l and 16+8c+l) */
function loadQ4_0(b: KernelBuilder, W: Buffer, t: QType, base: Val, c: Val, pairs4: boolean, xq: boolean): LoadedChunk {
  const qv = (v: Val) => b.let(v, "f32", "q");
  const dw = b.let(b.load(W, base, "u16"), "u32", "dw");
  const q5 = t === "q5_0";
  const at16 = base.add(c.mul(4)).add(q5 ? 3 : 1);
  // The int path with pairs4: the quants as u32 words (words32), as q8_0's.
  const ints = xq && pairs4 ? words32(b, W, at16, 2) : undefined;
  const ws = ints ? [] : words(b, W, "u16", at16, 4, false);
  const qh = q5 ? b.let(b.load(W, base.add(1), "u16").or(b.load(W, base.add(2), "u16").shl(16)).shr(c.mul(8)), "u32", "qh") : undefined;
  const at = c.mul(8);
  return {
    at,
    ints: () => ({ d: b.let(half(dw, false), "f32", "d"), groups: nibbleGroups(b, ints ? ints() : pairUp(b, ws), qh, q5 ? 16 : 8) }),
    decode: () => {
      const d = b.let(half(dw, false), "f32", "d");
      if (!qh) {
        const [a, h] = inPlace(b, ws, false, 4, 8);
        return { at, groups: [{ scale: d, off: 0, q: a.v.map(qv), p: a.p }, { scale: d, off: 16, q: h.v.map(qv), p: h.p }] };
      }
      const lo: Val[] = [], hi: Val[] = [];
      for (let l = 0; l < 8; l++) {
        const byte = byteOf(ws, l, 16);
        const a = byte.and(15).or(qh.shr(l).and(1).shl(4)), h = byte.shr(4).or(qh.shr(l + 16).and(1).shl(4));
        lo.push(qv(small(a, 16)));
        hi.push(qv(small(h, 16)));
      }
      return { at, groups: [{ scale: d, off: 0, q: lo }, { scale: d, off: 16, q: hi }] };
    },
  };
}

/** loadChunk of q4_1 and q5_1: d, m, [qh u32], qs[16] (u32 words): chunk c = qs[8c .. 8c+7] */
function loadQ4_1(b: KernelBuilder, W: Buffer, t: QType, base: Val, c: Val): LoadedChunk {
  const qv = (v: Val) => b.let(v, "f32", "q");
  const dm = b.let(b.load(W, base, "u32"), "u32", "dm");
  const q5 = t === "q5_1";
  const ws = words(b, W, "u32", base.add(c.mul(2)).add(q5 ? 2 : 1), 2, false);
  const qh = q5 ? b.let(b.load(W, base.add(1), "u32").shr(c.mul(8)), "u32", "qh") : undefined;
  const at = c.mul(8);
  return {
    at,
    // the min adds: dmin = −m (graph/ops/qdot.ts)
    ints: () => ({ d: b.let(half(dm, false), "f32", "d"), dmin: b.let(half(dm, true).neg(), "f32", "nm"), groups: nibbleGroups(b, ws, qh, 0) }),
    decode: () => {
      const d = b.let(half(dm, false), "f32", "d"), m = b.let(half(dm, true), "f32", "m");
      const lo: Val[] = [], hi: Val[] = [];
      for (let l = 0; l < 8; l++) {
        const byte = byteOf(ws, l, 32);
        let a = byte.and(15), h = byte.shr(4);
        if (qh) {
          a = a.or(qh.shr(l).and(1).shl(4));
          h = h.or(qh.shr(l + 16).and(1).shl(4));
        }
        lo.push(qv(small(a)));
        hi.push(qv(small(h)));
      }
      return { at, groups: [{ scale: d, bias: m, off: 0, q: lo }, { scale: d, bias: m, off: 16, q: hi }] };
    },
  };
}

/** loadChunk of q4_k and q5_k. */
function loadQK(b: KernelBuilder, W: Buffer, t: QType, base: Val, c: Val, wide: boolean): LoadedChunk {
  const f = (v: Val) => small(v);
  const qv = (v: Val) => b.let(v, "f32", "q");
  // d, dmin, scales[12], [qh[32]], qs[128] in u32 words; chunk c: j = c>>1 (64 elements), h = c&1 (half of
  // its 32 quant bytes): low nibbles are elements 64j+16h+l (sub-block 2j), high ones +32 (sub-block 2j+1).
  const hdr = words(b, W, "u32", base, 4, wide);
  const j = b.let(c.shr(1), "u32", "j"), h = c.and(1);
  const q5 = t === "q5_k";
  const qs = words(b, W, "u32", base.add(q5 ? 12 : 4).add(j.mul(8)).add(h.mul(4)), 4, wide);
  const qh = q5 ? words(b, W, "u32", base.add(4).add(h.mul(4)), 4, wide) : undefined;
  const at = b.let(j.mul(64).add(h.mul(16)), "u32", "at");
  return {
    at,
    decode: () => {
      const d = b.let(half(hdr[0], false), "f32", "d"), dmin = b.let(half(hdr[0], true), "f32", "dmin");
      const [sc0, m0, sc1, m1] = scalesK4(b, hdr.slice(1), j);
      const g = (sc: Val, m: Val, off: number, q: Val[], p?: number[]): QGroup => ({
        scale: b.let(d.mul(f(sc)), "f32", "ds"),
        bias: b.let(dmin.mul(f(m)).neg(), "f32", "dm"),
        off,
        q,
        p,
      });
      if (!qh) {
        const [a, e] = inPlace(b, qs, true, 4, 0);
        return { at, groups: [g(sc0, m0, 0, a.v.map(qv), a.p), g(sc1, m1, 32, e.v.map(qv), e.p)] };
      }
      const sh = b.let(j.mul(2), "u32", "hs");
      const lo: Val[] = [], hi: Val[] = [];
      for (let l = 0; l < 16; l++) {
        const byte = byteOf(qs, l, 32);
        const hb = byteOf(qh, l, 32).shr(sh);
        lo.push(qv(small(byte.and(15).or(hb.and(1).shl(4)))));
        hi.push(qv(small(byte.shr(4).or(hb.and(2).shl(3)))));
      }
      return { at, groups: [g(sc0, m0, 0, lo), g(sc1, m1, 32, hi)] };
    },
    ints: () => {
      const d = b.let(half(hdr[0], false), "f32", "d"), dmin = b.let(half(hdr[0], true), "f32", "dmin");
      const [sc0, m0, sc1, m1] = scalesK4(b, hdr.slice(1), j).map((v) => b.let(v.bitcast("i32"), "i32", "ksi"));
      // q5_k: qh byte l's bits 2j and 2j + 1 are the fifth bits of the low and the high nibble of qs byte l
      const hb = qh?.map((w) => b.let(w.shr(j.mul(2)), "u32", "q5h"));
      const lo = qs.map((w, i) => b.let(hb ? w.and(0x0f0f0f0f).or(hb[i].and(0x01010101).shl(4)) : w.and(0x0f0f0f0f), "u32", "qlo"));
      const hi = qs.map((w, i) => b.let(hb ? w.shr(4).and(0x0f0f0f0f).or(hb[i].and(0x02020202).shl(3)) : w.shr(4).and(0x0f0f0f0f), "u32", "qhi"));
      return { d, dmin, groups: [{ w: lo, sc: sc0, m: m0 }, { w: hi, sc: sc1, m: m1 }] };
    },
  };
}

/** loadChunk of q6_k. */
function loadQ6K(b: KernelBuilder, W: Buffer, base: Val, c: Val, pairs4: boolean, xq: boolean): LoadedChunk {
  const qv = (v: Val) => b.let(v, "f32", "q");
  // ql[128], qh[64], scales[16] (i8), d (u16 words); chunk c: n = c>>2 (128 elements), r = c&3 (8 of its 32
  // columns l): element 128n + 8r + l + 32g (g = 0..3) has scale scales[8n + (r>>1) + 2g].
  const n = b.let(c.shr(2), "u32", "n"), r = b.let(c.and(3), "u32", "r");
  const dw = b.let(b.load(W, base.add(104), "u16"), "u32", "dw");
  // pairs4: 4 x 4 16-bit words as 4 x 3 u32 loads (see halves); the int path takes them as 2 u32 words each
  // (words32), 16-bit words otherwise.
  const w32 = xq && pairs4;
  const piece = (at16: Val): () => Val[] => {
    if (w32) return words32(b, W, at16, 2);
    if (pairs4) return halves(b, W, at16, 4);
    const ws = words(b, W, "u16", at16, 4, false);
    return () => ws;
  };
  const pA = piece(base.add(n.mul(32)).add(r.mul(4))), pB = piece(base.add(n.mul(32)).add(16).add(r.mul(4)));
  const pH = piece(base.add(64).add(n.mul(16)).add(r.mul(4))), pS = piece(base.add(96).add(n.mul(4)));
  const at = b.let(n.mul(128).add(r.mul(8)), "u32", "at");
  return {
    at,
    decode: () => {
      const d = b.let(half(dw, false), "f32", "d");
      const qlA = pA(), qlB = pB(), qhW = pH(), scW = pS();
      const odd = r.shr(1).mul(8); // scales[is + 2g] is byte (is) of word g
      // In place (see inPlace): value l of group g is ql's nibble at bit sh (+4 for g >= 2) of its 16-bit
      // word, with qh's 2 bits (2g, 2g+1 of byte l) moved just above it by one shift per qh word (4 - 2(g&1)).
      const up = [4, 2].map((k) => qhW.map((w) => b.let(w.shl(k), "u32", "qhs")));
      const groups: QGroup[] = [];
      for (let g = 0; g < 4; g++) {
        const sc = scW[g].shr(odd).and(0xff);
        const q: Val[] = [], p: number[] = [];
        for (let l = 0; l < 8; l++) {
          const wi = l >> 1, sh = (l & 1) * 8 + (g < 2 ? 0 : 4);
          const ql = (g & 1 ? qlB : qlA)[wi], qh = up[g & 1][wi];
          q.push(qv(small(ql.and(0xf << sh).or(qh.and(0x30 << sh)), 32 * 2 ** sh)));
          p.push(sh);
        }
        groups.push({ scale: b.let(d.mul(sbyte(sc)), "f32", "ds"), off: 32 * g, q, p });
      }
      return { at, groups };
    },
    ints: () => {
      const d = b.let(half(dw, false), "f32", "d");
      const word = (p: () => Val[]) => (w32 ? p() : pairUp(b, p()));
      const A = word(pA), B = word(pB), H = word(pH), S = word(pS);
      const odd = r.shr(1).mul(8); // scale byte 2g + (r>>1): byte (r>>1) of 16-bit word g
      const groups: QIntGroup[] = [];
      for (let g = 0; g < 4; g++) {
        const w = [0, 1].map((j) => {
          const ql = (g & 1 ? B : A)[j], nib = (g < 2 ? ql : ql.shr(4)).and(0x0f0f0f0f);
          const hb = (g ? H[j].shr(2 * g) : H[j]).and(0x03030303).shl(4);
          return b.let(nib.or(hb), "u32", "q6w");
        });
        const sw = g & 1 ? S[g >> 1].shr(16) : S[g >> 1];
        groups.push({ w, sc: b.let(sbyteI(sw.shr(odd).and(0xff)), "i32", "q6s"), off: 32 });
      }
      return { d, groups };
    },
  };
}

/**
 * The exact dequantized values of a chunk (ggml's order of operations), each with its element offset. With `b`, a
 * value held times 2^p takes its group's scale times 2^-p, made once per group and p: one multiply a value instead
 * of two, the same bits (scaling by a power of two is exact, and no scale comes near f32's subnormals).
 */
export function chunkValues(ch: QChunk, b?: KernelBuilder): { off: number; v: Val }[] {
  const out: { off: number; v: Val }[] = [];
  for (const g of ch.groups) {
    const scaled = new Map<number, Val>();
    const scale = (p: number) => {
      if (!p) return g.scale;
      if (!b) return undefined;
      if (!scaled.has(p)) scaled.set(p, b.let(g.scale.mul(2 ** -p), "f32", "dsp"));
      return scaled.get(p)!;
    };
    g.q.forEach((q, i) => {
      const p = g.p?.[i] ?? 0, sp = scale(p);
      const y = sp ? q.mul(sp) : q.mul(2 ** -p).mul(g.scale);
      out.push({ off: g.off + i, v: g.bias ? y.add(g.bias) : y });
    });
  }
  return out;
}

/**
 * Σ over the chunk of value·x, as scale·Σq·x + bias·Σx per group; `xs[g]` holds the x values of group g
 * (loaded once; the caller may share them across rows), `sx[g]` their sum when the caller computed it once.
 */
export function chunkDot(ch: QChunk, xs: Val[][], sx?: Val[]): Val {
  let acc: Val | undefined;
  ch.groups.forEach((g, gi) => {
    const x = xs[gi];
    const prods = g.q.map((q, i) => q.mul(x[i]));
    let s = (g.p ? byPower(prods, g.p) : tree(prods)).mul(g.scale);
    if (g.bias) s = s.add((sx?.[gi] ?? tree(x)).mul(g.bias));
    acc = acc ? acc.add(s) : s;
  });
  return acc ?? f32(0);
}

/** Σ v[i]·2^-p[i]: each power's terms summed apart, then scaled (exact) and added. */
function byPower(v: Val[], p: number[]): Val {
  const ps = [...new Set(p)].sort((a, b) => a - b);
  return tree(ps.map((e) => {
    const s = tree(v.filter((_, i) => p[i] === e));
    return e ? s.mul(2 ** -e) : s;
  }));
}

/** A balanced tree of `op` over the values (a sum by default): short dependency chains, a fixed order. */
export function tree(v: Val[], op: (a: Val, b: Val) => Val = (a, b) => a.add(b)): Val {
  let xs = v;
  while (xs.length > 1) {
    const next: Val[] = [];
    for (let i = 0; i < xs.length; i += 2) next.push(i + 1 < xs.length ? op(xs[i], xs[i + 1]) : xs[i]);
    xs = next;
  }
  return xs[0];
}
