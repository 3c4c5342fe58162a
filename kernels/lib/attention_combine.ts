// The split-K attention combine: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s over an item's partials
// [m, l, acc[hd]], as its own kernel (attentionCombine), inside another kernel (combineAt: the o projection's prep),
// and as the fused attention's tail (fuseCombine: its last team, or its first workgroup from shared memory). Every
// form runs the same operations in the same order on the same values (an empty split's (-inf, 0, 0), read or not),
// so every form gives the same bits.
import { type Buffer, f32, type Kernel, KernelBuilder, KernelError, type Shared, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import type { FusedCount } from "./attention.ts";
import { gridFor, pairwise, wgIndex } from "./common.ts";
import type { QType } from "./dequant.ts";
import { prepWord, runAt, runsPerItem, wordOffset, xqLayout } from "./xq_layout.ts";

/**
 * Split-K phase 2: out[i, :] = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s with M = max_s m_s.
 * Bindings: part f32 [rows * heads, splits, hd + 2] (r); out f32 [rows, heads, hd] (w).
 * One invocation per output element. Every split's (m, l) pair and, 32 splits at a time, its acc element are
 * loaded before any is used (one round trip to L2 for up to 32 splits, where a loop over the splits paid one
 * per split), and reduced as balanced trees in a fixed order.
 */
export function attentionCombine(caps: Caps, s: { rows?: number; heads: number; hd: number; splits: number; name?: string }): Kernel {
  const items = (s.rows ?? 1) * s.heads, { hd, splits } = s, stride = hd + 2;
  if (!(splits >= 1 && splits <= 256)) throw new KernelError(`attention combine: ${splits} splits (1 to 256)`);
  const total = items * hd, wg = Math.min(64, caps.maxWorkgroupSize);
  const grid = gridFor(caps, Math.ceil(total / wg));
  const b = new KernelBuilder(s.name ?? `attention_combine_i${items}_d${hd}_s${splits}`, { workgroup: wg, grid });
  const part = b.buffer("part", "f32", "r");
  const out = b.buffer("out", "f32", "w");
  const idx = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "idx");
  if (grid[0] * grid[1] * grid[2] * wg > total) b.if(idx.ge(total), () => b.return());
  const base = b.let(idx.div(hd).mul(splits * stride), "u32", "base");
  const d = b.let(idx.mod(hd).add(2), "u32", "d");
  const ws = combineWeights(b, loadedFirst(b, partSource(b, part, base, stride), splits, [d]), splits);
  b.store(out, idx, combineDim(b, d, ws, splits));
  return b.build();
}

/**
 * Where a combine reads an item's partials: split sp's (m, l) and its acc element d (d counts from the acc, past m
 * and l). The combine's operations do not depend on it: the same values give the same bits.
 */
interface CombineSource {
  ml(sp: number): Val[];
  acc(sp: number, d: Val): Val;
  /**
   * Splits from this one on are empty (-inf, 0, 0) and not read (a power of two, at most 32; default all are read).
   * The sums over the splits' balanced trees then are the trees of the first `real` plus one +0 (a subtree of
   * zeros is +0, and x + 0 + 0 = x + 0), the max is theirs: the same bits, without the empty splits' work.
   */
  real?: number;
}
/**
 * An item's partials in `part` from word `base` on, `stride` words a split. With `active`, the splits from it on are
 * empty and taken as (-inf, 0, 0), their loads discarded (split 0 never is: every item sees a position).
 */
function partSource(b: KernelBuilder, part: Buffer, base: Val, stride: number, active?: Val): CombineSource {
  const at = (sp: number) => sp === 0 ? base : base.add(sp * stride);
  return {
    // one 8-byte load where the stride keeps pairs aligned (hd even)
    ml: (sp) => {
      const v = stride % 2 === 0 ? b.loadv(part, at(sp), 2) : [b.load(part, at(sp)), b.load(part, at(sp).add(1))];
      if (!active || sp === 0) return v;
      const has = b.let(active.gt(sp), "bool", "has");
      return [b.let(has.select(v[0], f32(-Infinity)), "f32", "mi"), b.let(has.select(v[1], f32(0)), "f32", "li")];
    },
    acc: (sp, d) => {
      const v = b.load(part, at(sp).add(d));
      return active && sp > 0 ? active.gt(sp).select(v, f32(0)) : v;
    },
  };
}
/**
 * `src` with every split's (m, l) and its acc elements `ds` loaded before any is used: one round trip to L2 where
 * loading the acc elements after the weights took two (H200, qwen2.5-0.5b's combine 2.43 -> 2.02 µs). The same
 * values, so the same bits.
 */
function loadedFirst(b: KernelBuilder, src: CombineSource, splits: number, ds: Val[]): CombineSource {
  const ml = Array.from({ length: splits }, (_, sp) => src.ml(sp));
  const accs = ds.map((d) => Array.from({ length: splits }, (_, sp) => b.let(src.acc(sp, d), "f32", "a")));
  return {
    ml: (sp) => ml[sp],
    acc: (sp, d) => {
      const i = ds.indexOf(d);
      if (i < 0) throw new KernelError("attention combine: an acc element not loaded first");
      return accs[i][sp];
    },
  };
}
interface CombineWeights {
  src: CombineSource;
  /** e^(m_s - M) per split. */
  w: Val[];
  /** sum_s w_s l_s */
  L: Val;
}
/** The splits' weights for one item (the combine's first half): every split's (m, l) loaded before any is used. */
function combineWeights(b: KernelBuilder, src: CombineSource, splits: number): CombineWeights {
  const ml = Array.from({ length: src.real ?? splits }, (_, sp) => src.ml(sp));
  const tree = (xs: Val[], f: (a: Val, c: Val) => Val): Val => {
    while (xs.length > 1) {
      const next: Val[] = [];
      for (let i = 0; i < xs.length; i += 2) next.push(i + 1 < xs.length ? f(xs[i], xs[i + 1]) : xs[i]);
      xs = next;
    }
    return xs[0];
  };
  const M = b.let(tree(ml.map((v) => v[0]), (a, c) => a.max(c)), "f32", "M");
  const w = ml.map((v) => b.let(v[0].sub(M).exp(), "f32", "w")); // exp(-inf) = 0 for empty chunks
  const L = b.let(padded(pairwise(ml.map((v, sp) => w[sp].mul(v[1]))), splits, src.real), "f32", "L");
  return { src, w, L };
}
/** A sum over `splits` splits of which the first `real` were summed: plus +0 where empty ones were left out (CombineSource.real). */
function padded(sum: Val, splits: number, real?: number): Val {
  if (real === undefined || real >= splits) return sum;
  if (!(real >= 1 && real <= 32 && (real & (real - 1)) === 0)) throw new KernelError(`attention combine: ${real} real splits (a power of two up to 32)`);
  return sum.add(f32(0));
}
/**
 * Elements e, e + 1, ... e + n - 1 of attentionCombine's output (one item's: e % hd + n <= hd), from the partials in
 * `part` [items, splits, hd + 2]: the same operations as attentionCombine's, so the same bits.
 */
export function combineAt(b: KernelBuilder, part: Buffer, s: { hd: number; splits: number }, e: Val, n: number): Val[] {
  const stride = s.hd + 2;
  const base = b.let(e.div(s.hd).mul(s.splits * stride), "u32", "base");
  const d = b.let(e.mod(s.hd).add(2), "u32", "d");
  const ds = Array.from({ length: n }, (_, i) => (i ? b.let(d.add(i), "u32", "d") : d));
  const ws = combineWeights(b, loadedFirst(b, partSource(b, part, base, stride), s.splits, ds), s.splits);
  return ds.map((di) => b.let(combineDim(b, di, ws, s.splits), "f32", "o"));
}

/** Output element `d - 2` of the item (d counts from the partial's acc, past m and l). */
function combineDim(b: KernelBuilder, d: Val, { src, w, L }: CombineWeights, splits: number): Val {
  const parts: Val[] = [];
  for (let s0 = 0; s0 < w.length; s0 += 32) {
    const accs = Array.from({ length: Math.min(32, w.length - s0) }, (_, j) => src.acc(s0 + j, d));
    parts.push(b.let(pairwise(accs.map((a, j) => w[s0 + j].mul(a))), "f32", "o"));
  }
  return padded(pairwise(parts), splits, src.real).div(L);
}

/** attentionFused's tail: count the item's finished teams; its last one combines (see attentionFused). */
export function fuseCombine(
  b: KernelBuilder, part: Buffer, out: Buffer,
  s: {
    item: Val; lane: Val; lanes: number; items: number; splits: number; hd: number; count: FusedCount; active?: Val; filled?: Val;
    /**
     * Fused.local: whether it holds (uniform in a workgroup), the partials in shared memory (`per` of the item's
     * there from slot `slot0`), whether this team is in the item's first workgroup, and its invocations in the item's.
     */
    local?: { local: Val; mem: Shared; per: number; slot0: Val; first: Val; lid: Val; size: number };
    /** The output as the o projection's prepared x (kernels/lib/xq_layout.ts's layout for weight type w, k = items · hd), not f32. */
    prep?: { w: QType; k: number };
  },
): void {
  const { item, lane, lanes, items, splits, hd, active, filled, local, prep } = s, stride = hd + 2;
  const store = prep ? storePrepared(prep.w, prep.k) : storeCombined;
  const counter = b.let(item.add(items * splits * stride), "u32", "ctr");
  /** Every team counts its finish (release, count, acquire); the item's last one combines its partials from memory. */
  const counted = () => {
    b.barrier("device"); // release: every lane's partial before any lane's count
    // Teams that count: all of them, or (skipEmpty) those with positions, `active` per item.
    const teams = active ?? u32(splits);
    let lastCount: Val;
    if (s.count === "team" || filled) {
      // team: lane 0 counts for its team (the barrier above made every lane's partial available at device
      // scope); skipEmpty: only the teams whose chunk has positions count. `seen` is the count this one made.
      const seen = b.let(u32(0), "u32", "seen");
      const who = s.count === "team" ? lane.eq(u32(0)) : undefined;
      b.if(who && filled ? who.and(filled) : who ?? filled!, () => b.set(seen, b.atomicFetch(part, counter, "add", 1).add(1)));
      lastCount = seen.eq(s.count === "team" ? teams : teams.mul(lanes)).select(u32(1), u32(0));
    } else {
      const seen = b.atomicFetch(part, counter, "add", 1);
      lastCount = seen.eq(splits * lanes - 1).select(u32(1), u32(0));
    }
    b.barrier("device"); // acquire: the last count's lane (and with it its workgroup) sees every partial
    const last = b.let(b.subgroupReduce("max", lastCount), "u32", "last");
    b.if(last.eq(u32(1)), () => {
      const base = b.let(item.mul(splits * stride), "u32", "base");
      store(b, out, item, hd, splits, combineWeights(b, partSource(b, part, base, stride, active), splits), lane, lanes);
      b.if(lane.eq(u32(0)), () => b.atomic(part, counter, "and", 0));
    });
  };
  if (!local) return counted();
  // Fused.local follows the position alone, so a workgroup takes one branch as a whole (a barrier inside is met by
  // all of it, as kernels/lib/sample.ts's are; Naga does not apply WGSL's static uniformity rule to barriers): the
  // first workgroup of an item meets at a plain barrier and combines its teams' partials from shared memory, an
  // invocation a dim, the chunks past it empty; the device barriers, which cost the H100 ~1.7 µs a layer at short
  // context, are left to the counting path.
  const { mem, per, slot0, first, lid, size } = local;
  b.if(local.local, () => {
    b.barrier();
    const sb = b.let(slot0.mul(stride), "u32", "lb");
    const src: CombineSource = {
      ml: (sp) => [b.sload(mem, sb.add(sp * stride)), b.sload(mem, sb.add(sp * stride + 1))],
      acc: (sp, d) => b.sload(mem, sb.add(d).add(sp * stride)),
      real: per,
    };
    b.if(first, () => store(b, out, item, hd, splits, combineWeights(b, src, splits), lid, size));
  }, counted);
}

/**
 * An item's combined output quantized as xqPrep would quantize it (its runs are the item's alone: runsPerItem),
 * invocation `lane` of `lanes` taking words lane, lane + lanes, ... of the item: 4 values each, combined as
 * storeCombined's, then xq_layout.ts prepWord (a run's words on neighbouring lanes). The same f32 values, the same
 * quantization: the bits of storeCombined then xqPrep.
 */
function storePrepared(w: QType, k: number) {
  return (b: KernelBuilder, out: Buffer, item: Val, hd: number, splits: number, ws: CombineWeights, lane: Val, lanes: number): void => {
    const l = xqLayout(w, k, false), W = l.words, R = runsPerItem(w, hd), words = R * W;
    if (!R || lanes % W) throw new KernelError(`attention: no ${w} prep of hd ${hd} over ${lanes} lanes`);
    const run0 = b.let(item.mul(R), "u32", "run0"), x0 = b.let(item.mul(hd), "u32", "x0");
    b.for(0, Math.ceil(words / lanes), 1, (it) => {
      // word t of the item (clamped past the last: every lane of a run reaches the shuffles; j unclamped keeps
      // lane - j on the run's first lane)
      const t0 = b.let(it.mul(lanes).add(lane), "u32", "t");
      const live = words % lanes ? b.let(t0.lt(words), "bool", "live") : undefined;
      const t = live ? b.let(t0.min(words - 1), "u32", "tc") : t0;
      const gi = b.let(run0.add(t.div(W)), "u32", "gi"), j = b.let(t0.mod(W), "u32", "j");
      const d = b.let(runAt(b, w, gi).add(wordOffset(w, j)).sub(x0).add(2), "u32", "d");
      const v = [0, 1, 2, 3].map((e) => b.let(combineDim(b, e ? d.add(e) : d, ws, splits), "f32", "o"));
      prepWord(b, w, l, out, { v, gi, j, wi: b.let(gi.mul(W).add(j), "u32", "wi"), live });
    });
  };
}

/** An item's combined output, invocation `lane` of `lanes` taking dims lane, lane + lanes, ... */
function storeCombined(b: KernelBuilder, out: Buffer, item: Val, hd: number, splits: number, ws: CombineWeights, lane: Val, lanes: number): void {
  // a loop, not unrolled: the weights are the bulk of the code (lavapipe's JIT time grows fast with it)
  const st = (d: Val) => b.store(out, item.mul(hd).add(d), combineDim(b, d.add(2), ws, splits));
  if (hd <= lanes) b.if(lane.lt(hd), () => st(lane));
  else {
    b.for(0, Math.ceil(hd / lanes), 1, (j) => {
      const d = b.let(j.mul(lanes).add(lane), "u32", "d");
      if (hd % lanes === 0) st(d);
      else b.if(d.lt(hd), () => st(d));
    });
  }
}
