// The candidate list of the `sample` kernel (kernels/lib/sample.ts, step 2), made by the parts of the split
// (kernels/lib/sample_split.ts) in parallel. The pick kernel runs one workgroup per row; compacting a long row
// there is two passes over the row on one SM (on the H200, ~33 of the pick kernel's ~51 µs at V 151936 under
// top-k 40). Here each (row, part) workgroup, after sampleMass:
//  1. combines the parts' mass records as the pick kernel's pivot loop does: the highest pivot that covers the
//     kept set (`covers`: top-k's count, min-p's w, top-p's mass) is the cut when at most `cap` logits lie at or
//     above it; else the row is not listed here, and the pick kernel searches and compacts as before;
//  2. writes the logits of its slice at or above the cut, in index order, from the offset that the parts before
//     it counted at that pivot (their counts are in the mass records: no counting pass), as (index, order key,
//     w) in three arrays of `cap` words.
// Part 0 also writes the row's head: the count (0: not listed), the pivot, and Z (Σ w that min-p keeps: what
// top-p alone normalizes by). Rows that are greedy, non-finite or sample with no filter get a count of 0.
// The count at the pivot is the mass kernel's own (the same stored pivot, the same comparison), so the parts'
// entries fill [0, count) exactly; every workgroup of a row takes the same decision from the same records.
import { f32, type Kernel, KernelBuilder, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { SAMPLER, SAMPLER_WORDS } from "../../graph/sample.ts";
import { MASS, MASS_WORDS, PIVOTS, rowStats, splitSetup } from "./sample_split.ts";
import { Lanes, orderKey } from "./sample_lanes.ts";
import { wgIndex } from "./common.ts";

/** u32 words of a row's head in the list buffer (LIST: what they hold). */
export const LIST_HEAD = 4;
/** Word offsets in the head: the count (0: not listed), the pivot index (f32), Z (f32). */
export const LIST = { count: 0, pivot: 1, z: 2 } as const;
/** u32 words per row of the list buffer: the head, then indices, order keys and w (f32), `cap` of each. */
export function listWords(cap: number): number {
  return LIST_HEAD + 3 * cap;
}

/** The row's filter, as the sample kernels read it from the Sampler slot. */
export interface Filter {
  kOn: Val;
  kF: Val;
  pOn: Val;
  mOn: Val;
  minP: Val;
}

/** The filter flags of a row's parameters (the same IR in every kernel that reads them). */
export function filterOf(b: KernelBuilder, V: number, topK: Val, topP: Val, minP: Val): Filter {
  const kOn = b.let(topK.gt(0).and(topK.lt(V)), "bool", "kOn"), kF = topK.cast("f32");
  const pOn = b.let(topP.lt(f32(1)), "bool", "pOn"), mOn = b.let(minP.gt(f32(0)), "bool", "mOn");
  return { kOn, kF, pOn, mOn, minP };
}

/**
 * Whether every logit the row keeps lies at or above `at`, given `count` logits and Σ w `mass` there: top-k's
 * k-th logit is at or above it, or min-p drops `at` (where min-p decides: no top-k, or top-k without top-p), or
 * top-p alone already keeps that much mass (zTarget = top_p · Z).
 */
export function covers(f: Filter, count: Val, mass: Val, wAt: Val, zTarget: Val): Val {
  const needZ = f.kOn.not().and(f.pOn);
  return f.kOn.and(count.ge(f.kF)).or(f.mOn.and(wAt.lt(f.minP)).and(f.kOn.not().or(f.pOn.not()))).or(needZ.and(mass.ge(zTarget)));
}

export interface ListShape {
  rows: number;
  vocab: number;
  parts: number;
  /** The pick kernel's candidate capacity (sampleLayout's cap). */
  cap: number;
}

/**
 * The parts' list. Bindings: logits f32 [rows, vocab] (r), params u32 [rows, SAMPLER_WORDS] (r), stats f32
 * [rows, parts, 4] (r), mass f32 [rows, parts, MASS_WORDS] (r), list u32 [rows, listWords(cap)] (w).
 */
export function sampleList(caps: Caps, s: ListShape): Kernel {
  const { R, V, P, SL, grid, vw } = splitSetup(caps, s, "sample_list");
  const CAP = s.cap, LW = listWords(CAP);
  const sg = caps.subgroups ? caps.subgroupSize : 0;
  // 256 lanes in subgroups; a shared-memory tree (no subgroups, or narrow ones) on 64, as its scratch holds
  // every lane's 31 sums.
  const wide = Math.min(256, caps.maxWorkgroupSize);
  const mode = sg === 1 ? "one" as const : sg > 1 && wide % sg === 0 && wide <= 32 * sg ? "subgroup" as const : "tree" as const;
  const W = mode === "one" ? 1 : mode === "subgroup" ? wide : Math.min(64, caps.maxWorkgroupSize);
  const NV = 1 + 2 * PIVOTS;
  const b = new KernelBuilder(`sample_list_r${R}_v${V}_p${P}_c${CAP}`, { workgroup: W, grid });
  const X = b.buffer("logits", "f32", "r");
  const PRM = b.buffer("params", "u32", "r");
  const ST = b.buffer("stats", "f32", "r");
  const MS = b.buffer("mass", "f32", "r");
  const LS = b.buffer("list", "u32", "w");
  // The decision is taken by one subgroup where there are subgroups (shuffles only), else by the workgroup.
  const all = new Lanes(b, { lanes: W, mode }, sg, NV);
  const dec = mode === "subgroup" && W > sg ? new Lanes(b, { lanes: sg, mode }, sg, NV) : all;
  const lid = all.lid;
  const wg = b.let(wgIndex(b, grid), "u32", "wg");
  if (grid[0] * grid[1] * grid[2] > R * P) b.if(wg.ge(R * P), () => b.return());
  const row = b.let(wg.div(u32(P)), "u32", "row"), part = b.let(wg.mod(u32(P)), "u32", "part");
  const pw = (k: number) => row.mul(SAMPLER_WORDS).add(k);
  const invT = b.let(b.load(PRM, pw(SAMPLER.invTemp), "f32"), "f32", "invT");
  const topK = b.let(b.load(PRM, pw(SAMPLER.topK), "i32"), "i32", "topK");
  const topP = b.let(b.load(PRM, pw(SAMPLER.topP), "f32"), "f32", "topP");
  const minP = b.let(b.load(PRM, pw(SAMPLER.minP), "f32"), "f32", "minP");
  const f = filterOf(b, V, topK, topP, minP);
  const o0 = b.let(row.mul(u32(P * MASS_WORDS)), "u32", "o0");
  // A greedy row, or one with no filter, is never listed: known from the parameters alone, before any load.
  b.if(invT.gt(f32(0)).and(invT.lt(f32(Infinity))).and(f.kOn.or(f.pOn).or(f.mOn)).not(), () => {
    b.if(part.eq(u32(0)).and(all.lid.eq(u32(0))), () => b.store(LS, row.mul(u32(LW)).add(LIST.count), u32(0)));
    b.return();
  });

  // 1. the decision, into shared memory: found (0/1), pivot, count, offset of this part, m, Z.
  const D = b.shared("dec", "f32", 6);
  const decide = () => {
    const dl = dec.lid, DW = dec === all ? W : sg;
    const st = rowStats(b, ST, row, P, dl, DW, (vs) => dec.reduce("max", vs));
    const m = st.m;
    // the parameters sample with a filter (else the early exit above): only a non-finite row is not listed
    const filtered = b.let(st.nf.gt(f32(0)).not(), "bool", "filt");
    const acc = Array.from({ length: NV }, () => b.let(f32(0), "f32", "acc"));
    b.for(dl, b.let(filtered.select(u32(P), u32(0)), "u32", "np"), DW, (q) => {
      const o = b.let(o0.add(q.mul(u32(MASS_WORDS))), "u32", "o");
      b.set(acc[0], acc[0].add(b.load(MS, o.add(MASS.z))));
      for (let j = 0; j < PIVOTS; j++) {
        b.set(acc[1 + j], acc[1 + j].add(b.load(MS, o.add(MASS.count + j))));
        b.set(acc[1 + PIVOTS + j], acc[1 + PIVOTS + j].add(b.load(MS, o.add(MASS.above + j))));
      }
    });
    const sums = dec.reduce("add", acc);
    const zTarget = b.let(topP.mul(sums[0]), "f32", "zt");
    const jStar = b.let(f32(-1), "f32", "js"), nStar = b.let(f32(0), "f32", "ns");
    for (let j = 0; j < PIVOTS; j++) { // ascending: the last that covers is the highest
      const pv = b.let(b.load(MS, o0.add(MASS.pivot + j)), "f32", "pv");
      const wAt = pv.sub(m).mul(invT).exp();
      b.if(covers(f, sums[1 + j], sums[1 + PIVOTS + j], wAt, zTarget), () => {
        b.set(jStar, f32(j));
        b.set(nStar, sums[1 + j]);
      });
    }
    const found = b.let(filtered.and(jStar.ge(f32(0))).and(nStar.le(f32(CAP))), "bool", "found");
    const js = b.let(jStar.max(f32(0)).cast("u32"), "u32", "jsu");
    const before = b.let(f32(0), "f32", "bef");
    b.for(dl, found.select(part, u32(0)), DW, (q) => b.set(before, before.add(b.load(MS, o0.add(q.mul(u32(MASS_WORDS))).add(u32(MASS.count)).add(js)))));
    const [off] = dec.reduce("add", [before]);
    b.if(dl.eq(u32(0)), () => {
      [found.select(f32(1), f32(0)), jStar, nStar, off, m, sums[0]].forEach((v, k) => b.sstore(D, u32(k), v));
    });
  };
  if (dec === all) decide();
  else b.if(b.builtin("sgid").eq(u32(0)), decide);
  b.barrier();
  const found = b.let(b.sload(D, u32(0)).gt(f32(0)), "bool", "fnd");
  const js = b.let(b.sload(D, u32(1)), "f32", "jf");
  const m = b.let(b.sload(D, u32(4)), "f32", "m");
  b.if(part.eq(u32(0)).and(lid.eq(u32(0))), () => {
    const at = row.mul(u32(LW));
    b.store(LS, at.add(LIST.count), found.select(b.sload(D, u32(2)).cast("u32"), u32(0)));
    b.store(LS, at.add(LIST.pivot), js.bitcast("u32"));
    b.store(LS, at.add(LIST.z), b.sload(D, u32(5)).bitcast("u32"));
  });

  // 2. this part's logits at or above the cut, in index order: a contiguous stretch per lane, a scan for starts.
  b.if(found, () => {
    const cut = b.let(b.load(MS, o0.add(MASS.pivot).add(js.cast("u32"))), "f32", "cut");
    const base = b.let(row.mul(u32(V)), "u32", "base");
    const s0 = b.let(part.mul(u32(SL)), "u32", "s0"), s1 = b.let(s0.add(u32(SL)).min(u32(V)), "u32", "s1");
    const per = Math.ceil(Math.ceil(SL / W) / vw) * vw;
    const t0 = b.let(s0.add(lid.mul(u32(per))).min(s1), "u32", "t0"), t1 = b.let(t0.add(u32(per)).min(s1), "u32", "t1");
    const over = (fn: (i: Val, x: Val) => void) => b.for(t0, t1, vw, (i) => {
      const xs = vw > 1 ? b.loadv(X, base.add(i), vw) : [b.load(X, base.add(i))];
      xs.forEach((x, e) => fn(e ? i.add(e) : i, x));
    });
    const n = b.let(u32(0), "u32", "n");
    over((_, x) => b.if(x.ge(cut), () => b.set(n, n.add(1))));
    const { excl } = all.scan(n.cast("f32"));
    const at = b.let(b.sload(D, u32(3)).add(excl).cast("u32"), "u32", "at");
    const lb = b.let(row.mul(u32(LW)).add(u32(LIST_HEAD)), "u32", "lb");
    over((i, x) => b.if(x.ge(cut).and(at.lt(u32(CAP))), () => {
      b.store(LS, lb.add(at), i);
      b.store(LS, lb.add(at).add(u32(CAP)), orderKey(b, x));
      b.store(LS, lb.add(at).add(u32(2 * CAP)), x.sub(m).mul(invT).exp().bitcast("u32"));
      b.set(at, at.add(1));
    }));
  });
  return b.build();
}
