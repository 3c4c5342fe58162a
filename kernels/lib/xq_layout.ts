// The prepared x's layout (xq_prep.ts writes it, the int path of the decode gemv reads it) and the quantization of
// one int8x4 word of a run by the run's neighbouring lanes: shared by xq_prep.ts's kernels and the fused decode
// attention that writes the o projection's x in this form (attention_combine.ts).
//
// Layout of the buffer (u32 words; run i is chunk i of a weight row, blocks in order; xqLayout):
//   [0, runs·W)             run i's int8x4 words at i·W: its groups' words in chunkGroups order (W = values / 4)
//   [metaAt, + runs·M)      run i's M words at metaAt + i·M: dx (f32 bits), then Σq of its groups as i16 pairs
//                           (group 2j in the low half; |Σq| <= 127·16), padded to 4 words for q6_k's four
//                           groups; q8_0 (no offset, no min) has dx alone
//   rAt                     r (f32 bits), with a norm
import { type Buffer, type KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import { chunkGroups, QLAYOUT, type QType, quantizeWord, runDx, runScale, tree, wordSum, XQ_TYPES } from "./dequant.ts";
import { XQ_RUNS } from "../../graph/ops/qdot.ts";

export interface XqLayout {
  /** Runs of x: chunks of a weight row. */
  runs: number;
  /** int8x4 words per run. */
  words: number;
  /** Words of a run's dx and group sums. */
  meta: number;
  metaAt: number;
  /** r's word, with a norm. */
  rAt?: number;
  /** Words in all. */
  total: number;
}

export function xqLayout(w: QType, k: number, norm: boolean): XqLayout {
  const q = QLAYOUT[w], runs = (k / q.elems) * q.chunks, groups = chunkGroups(w).length;
  const words = q.per / 4, meta = w === "q8_0" ? 1 : groups <= 2 ? 2 : 4;
  const metaAt = runs * words, end = metaAt + runs * meta;
  return { runs, words, meta, metaAt, rAt: norm ? end : undefined, total: end + (norm ? 1 : 0) };
}

/** Where chunk c of a block starts: (c >> shift)·a + (c & (2^shift − 1))·b (dequant.ts loadChunk's `at`). */
const START: Record<QType, [number, number, number]> = {
  q8_0: [0, 16, 0], q4_0: [0, 8, 0], q4_1: [0, 8, 0], q5_0: [0, 8, 0], q5_1: [0, 8, 0],
  q4_k: [1, 64, 16], q5_k: [1, 64, 16], q6_k: [2, 128, 8],
};
for (const t of XQ_TYPES) {
  const [sh, a, bb] = START[t];
  XQ_RUNS[t]!.forEach((run, c) => {
    if (run[0][0] !== (c >> sh) * a + (c & ((1 << sh) - 1)) * bb) throw new Error(`xq_layout.ts: chunk ${c} of ${t} does not start where graph/ops/qdot.ts's run does`);
  });
}

/** Element index of run `gi`'s first value: its block's, plus its chunk's start (START). */
export function runAt(b: KernelBuilder, w: QType, gi: Val): Val {
  const q = QLAYOUT[w], [sh, sa, sb] = START[w];
  const blk = gi.shr(Math.log2(q.chunks)), c = gi.and(q.chunks - 1);
  const start = sh ? c.shr(sh).mul(sa).add(c.and((1 << sh) - 1).mul(sb)) : c.mul(sa);
  return b.let(blk.mul(q.elems).add(start), "u32", "xat");
}

/** Where word j (a Val, 0 .. W − 1) of a run starts, from the run's first value: its group's offset plus 4 a word before it there. */
export function wordOffset(w: QType, j: Val): Val {
  const groups = chunkGroups(w), W = QLAYOUT[w].per / 4, wpg = W / groups.length;
  if (groups.some((g, i) => g.n !== 4 * wpg || g.off !== i * (groups.length > 1 ? groups[1].off : 0))) throw new KernelError(`xq_prep: ${w}'s groups are not evenly spaced`);
  return groups.length > 1 ? j.div(wpg).mul(groups[1].off).add(j.mod(wpg).mul(4)) : j.mul(4);
}

/** A run's meta words: dx (f32 bits), then its groups' Σq as i16 pairs, padded to l.meta words. */
export function storeMeta(b: KernelBuilder, out: Buffer, l: XqLayout, gi: Val, dx: Val, sums: Val[]): void {
  const meta: Val[] = [dx.bitcast("u32")];
  if (l.meta > 1) {
    for (let i = 0; i < sums.length; i += 2) {
      const lo = sums[i].bitcast("u32").and(0xffff);
      meta.push(i + 1 < sums.length ? lo.or(sums[i + 1].bitcast("u32").shl(16)) : lo);
    }
    while (meta.length < l.meta) meta.push(u32(0));
  }
  const mAt = b.let(gi.mul(l.meta).add(l.metaAt), "u32", "xm");
  if (l.meta === 1) b.store(out, mAt, meta[0]);
  else b.storev(out, mAt, meta);
}

/**
 * Word j of run gi (its 4 values `v`, x·g where a norm is fused) into the prep's layout at word `wi`: the run's W
 * words are the W neighbouring lanes from a lane that is a multiple of W, which meet by shuffles for the run's amax
 * and each group's Σq (a max and integer sums do not depend on their order: quantizeRun's words, scale and sums);
 * the run's first lane stores the meta. Every lane of the run must reach it (the shuffles); `live`: whether this
 * one stores.
 */
export function prepWord(b: KernelBuilder, w: QType, l: XqLayout, out: Buffer, o: { v: Val[]; gi: Val; j: Val; wi: Val; live?: Val }): void {
  const { v, gi, j, wi, live } = o, groups = chunkGroups(w), W = l.words, wpg = W / groups.length;
  let m = b.let(tree(v.map((e) => e.abs()), (a, c) => a.max(c)), "f32", "am");
  for (let s = W / 2; s >= 1; s /= 2) m = b.let(m.max(b.shuffle("xor", m, s)), "f32", "am");
  const { amax, is } = runScale(b, m);
  const word = quantizeWord(b, v, is);
  let sum = b.let(wordSum(word), "i32", "qxs");
  for (let s = wpg / 2; s >= 1; s /= 2) sum = b.let(sum.add(b.shuffle("xor", sum, s)), "i32", "qxs");
  // the run's first lane gathers each group's Σq
  const base = b.let(b.builtin("lane").sub(j), "u32", "rl");
  const sums = groups.map((_, g) => (g ? b.let(b.shuffle("idx", sum, base.add(g * wpg)), "i32", "qxs") : sum));
  const store = () => {
    b.store(out, wi, word);
    b.if(j.eq(u32(0)), () => storeMeta(b, out, l, gi, runDx(b, amax), sums));
  };
  if (live) b.if(live, store);
  else store();
}

/**
 * The runs of x holding one attention item's hd values (x = [heads, hd], an item a head): R such that runs
 * i·R .. i·R + R − 1 are exactly item i's values for every item, or 0 where runs straddle items (q6_k's runs span
 * 128 values: not at hd 64). For lib.attentionFused's prep.
 */
export function runsPerItem(w: QType, hd: number): number {
  const q = QLAYOUT[w], groups = chunkGroups(w), per = groups.reduce((a, g) => a + g.n, 0);
  if (hd % per || hd % 4) return 0;
  const R = hd / per, [sh, sa, sb] = START[w];
  const period = (hd * q.elems) / gcd(hd, q.elems);
  for (let gi = 0; gi < (period / q.elems) * q.chunks; gi++) {
    const c = gi % q.chunks, start = Math.floor(gi / q.chunks) * q.elems + (sh ? (c >> sh) * sa + (c & ((1 << sh) - 1)) * sb : c * sa);
    const item = Math.floor(gi / R);
    if (groups.some((g) => Math.floor((start + g.off) / hd) !== item || Math.floor((start + g.off + g.n - 1) / hd) !== item)) return 0;
  }
  return R;
}
const gcd = (a: number, b: number): number => (b ? gcd(b, a % b) : a);
