// On-device sampling: the `sample` composite (graph/sample.ts states its meaning; read that first). One
// workgroup per row; every threshold is found by counting, never by sorting:
//
//  1. one pass over the row: max, first index of the max (the greedy token), non-finite flag, smallest logit.
//     Greedy rows (temperature 0 or a non-finite row) stop here.
//  2. the candidate list. A row of V <= cap logits is copied whole into shared memory as (order key, w). A
//     longer row is cut at a logit c found by bisection (one counting pass per step) such that at most `cap`
//     logits are >= c and the kept set provably lies above c: c is at or below the k-th largest logit, or
//     w(c) < min_p, or the mass above c already reaches top_p · Z (Z = Σ w of the row min-p keeps, one more
//     pass, needed only when top-k is off). Those logits are compacted, in index order, into shared memory.
//     When no such c exists (a flat row with top-p near 1, no filter at all, ties wider than cap) the steps
//     below run over the row itself in global memory instead: correct, just more passes.
//  3. θk and θp by a radix search over the order keys of the logits (positive and negative floats mapped to
//     u32s that compare like the floats), `bits` bits per round: each round counts (θk) or sums w (θp) at
//     2^bits − 1 pivots at once, so 32/bits rounds of one workgroup reduction each.
//  4. the draw: each lane sums the kept w of a contiguous slice of the list, an exclusive scan gives each
//     slice its running start, u · total picks the slice and then the index inside it.
// Control flow that holds a barrier depends only on values alike on every lane of the workgroup (constant trip
// counts, the row's parameters, reduction results), so each barrier is reached by the whole workgroup or by
// none of it. Work a row does not need is skipped: the cutoff search stops at its cut, θk runs under top-k
// only, θp under top-p only, the draw reads the list or the row, not both. Steps 3-4 over a list of at most
// `subgroupList` candidates run on one subgroup alone (shuffles, no barrier; kernels/lib/sample_pick.ts).
// Cost. A row within `cap` (stories: V = 512): one pass over the row, one copy into shared memory, then steps
// 3-4 over shared memory. A long row (V = 32k..152k): the first pass, one counting pass per cutoff step until
// the cut is found (typically a few), two compaction passes, then steps 3-4 over <= cap candidates. Greedy rows
// cost the first pass only. With `parts` (kernels/lib/sample_split.ts, chosen for long vocabularies on wide
// GPUs) the first pass is spread over many workgroups, and a row that samples with no filter never reads its row here
// beyond the one slice that holds its draw; a filtered row's list is made by the parts too where one of their
// pivots gives the cut (kernels/lib/sample_list.ts), and steps 3-4 run here. A
// row under top-p alone whose kept set exceeds `cap` (a flat row, top-p near 1) brackets θp between the parts'
// pivots instead, narrows the bracket with up to 3 counting passes, and lists only the bracket
// (kernels/lib/sample_bracket.ts): ~6 passes over the row instead of the 8 radix rounds' and the bisection's.
// Files: step 2's cut and compaction for a long row in kernels/lib/sample_cut.ts, steps 3-4 in sample_pick.ts, the
// parts' kernels (and the draw from their masses) in sample_split.ts and sample_list.ts; cross-lane reductions,
// order keys and the RNG hash in sample_lanes.ts.
import { type Buffer, f32, i32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, vecWidth, wgIndex } from "./common.ts";
import { SAMPLER, SAMPLER_WORDS } from "../../graph/sample.ts";
import { plainDraw, plainFromMasses, rowStats, sampleSplit, statsStep } from "./sample_split.ts";
import { bracket } from "./sample_bracket.ts";
import { Lanes, mix32, NONE, orderKey } from "./sample_lanes.ts";
import { pickToken } from "./sample_pick.ts";
import { cutAndCompact, type CutEnv } from "./sample_cut.ts";
import { covers, type Filter, filterOf, LIST, LIST_HEAD, listWords } from "./sample_list.ts";

export interface SampleShape {
  rows: number;
  vocab: number;
  /** Candidate capacity in shared memory (default: what the target's shared memory allows, at most 2048). */
  cap?: number;
  /** Invocations per row, a power of two (default from the vocabulary and the target; 1 on one-lane targets). */
  wg?: number;
  /** Bisection steps of the cutoff search (default 16). */
  cutoffSteps?: number;
  /** Parts per row of the split kernels (kernels/lib/sample_split.ts); 1 or absent: this kernel reads the row. */
  parts?: number;
  /** The top-p bracket path (sample_bracket.ts) where the layout allows it; default true (false: for A/B). */
  bracket?: boolean;
  /**
   * Skip the work a row does not need (default true; false: every step's reductions run, as before session 21,
   * for A/B): passes and reductions sit under branches on values alike on every lane of the workgroup.
   */
  lean?: boolean;
  /** Lists of at most this many candidates are ranked and drawn from by one subgroup (default 512; 0: never; subgroup mode). */
  subgroupList?: number;
  name?: string;
}

/** SampleShape.subgroupList's default. */
const SUBGROUP_LIST = 512;

/** How a kernel for this shape is laid out (exported for tests and dumps). */
export interface SampleLayout {
  lanes: number;
  mode: "one" | "subgroup" | "tree";
  cap: number;
  /** Bits per radix round (pivots per round = 2^bits − 1). */
  bits: number;
  /** The whole row fits the candidate list (no cutoff search). */
  small: boolean;
  sharedBytes: number;
}

/** The layout `sample` uses for a shape on a target. */
export function sampleLayout(caps: Caps, s: SampleShape): SampleLayout {
  const V = s.vocab;
  const sg = caps.subgroups ? caps.subgroupSize : 0;
  let lanes: number;
  if (s.wg !== undefined) lanes = s.wg;
  else if (sg === 1) lanes = 1;
  else {
    const max = Math.min(caps.maxWorkgroupSize, 1024, sg > 1 ? 32 * sg : 256);
    lanes = 1;
    while (lanes * 2 <= max && lanes * 8 < V) lanes *= 2;
    lanes = Math.max(lanes, Math.min(sg, max), 1);
  }
  if (!(lanes >= 1 && (lanes & (lanes - 1)) === 0 && lanes <= caps.maxWorkgroupSize)) {
    throw new KernelError(`sample: ${lanes} lanes is not a power of two within the workgroup limit`);
  }
  const mode = lanes === 1 ? "one" : sg > 1 && lanes % sg === 0 && lanes <= 32 * sg ? "subgroup" : "tree";
  const bits = mode === "one" ? 1 : mode === "tree" ? 2 : 4;
  const nv = Math.max((1 << bits) - 1, 3); // values reduced at once
  const nsg = mode === "subgroup" ? lanes / sg : 1;
  const scratch = mode === "one" ? 0 : mode === "subgroup" ? 4 * (2 * nv * nsg + nsg) : 4 * (nv * lanes + lanes);
  let cap = s.cap;
  if (cap === undefined) {
    cap = 64;
    while (cap < 2048 && 12 * cap * 2 + scratch <= caps.maxSharedBytes) cap *= 2;
  }
  if (!(Number.isInteger(cap) && cap >= 1)) throw new KernelError(`sample: bad candidate capacity ${cap}`);
  const small = V <= cap;
  const sharedBytes = scratch + (small ? 8 * V : 12 * cap);
  if (sharedBytes > caps.maxSharedBytes) {
    throw new KernelError(`sample: ${sharedBytes} bytes of shared memory exceed the target's ${caps.maxSharedBytes}`);
  }
  return { lanes, mode, cap, bits, small, sharedBytes };
}

/**
 * Whether the pick kernel of this shape reads a list the parts made (sampleList, kernels/lib/sample_list.ts):
 * split, lean, and rows longer than the candidate list.
 */
export function sampleListed(caps: Caps, s: SampleShape): boolean {
  return s.parts !== undefined && s.parts > 1 && s.lean !== false && !sampleLayout(caps, s).small;
}

/**
 * The `sample` op: (token, nonfinite) for each row, as graph/sample.ts defines them.
 * Bindings: logits f32 [rows, vocab] (r); params u32 [rows, SAMPLER_WORDS] (r, the Sampler slot);
 * out i32 [rows, 2] (w). With `parts` > 1, stats f32 [rows, parts, 4] (r) and mass f32 [rows, parts, MASS_WORDS] (r)
 * (from sampleStats and sampleMass) sit between params and out, and where sampleListed, list u32 [rows,
 * listWords(cap)] (r, from sampleList) after them.
 */
export function sample(caps: Caps, s: SampleShape): Kernel {
  const { rows, vocab: V } = s;
  if (!(Number.isInteger(rows) && rows >= 1 && Number.isInteger(V) && V >= 1)) throw new KernelError(`sample: bad shape ${rows}x${V}`);
  if (V >= NONE || rows * V >= 2 ** 32) throw new KernelError(`sample: ${rows}x${V} logits exceed the kernel's index range`);
  const L = sampleLayout(caps, s);
  const W = L.lanes, CAP = L.cap, NP = (1 << L.bits) - 1;
  // With the parts' pivot counts the search starts within 1/16 of the range: 4 steps fewer reach the same width.
  const steps = s.cutoffSteps ?? (s.parts !== undefined && s.parts > 1 ? 12 : 16);
  const sg = caps.subgroups ? caps.subgroupSize : 1;
  const grid = gridFor(caps, rows);
  const split = s.parts !== undefined && s.parts > 1 ? sampleSplit(V, s.parts) : undefined;
  // the A/B variants named apart from the default kernel
  const variant = `${s.lean === false ? "_full" : ""}${s.subgroupList !== undefined && s.subgroupList !== SUBGROUP_LIST ? `_sg${s.subgroupList}` : ""}`;
  const b = new KernelBuilder(s.name ?? `sample_r${rows}_v${V}_c${CAP}_w${W}${split ? `_p${split.parts}` : ""}${variant}`, { workgroup: W, grid });
  const X = b.buffer("logits", "f32", "r");
  const PRM = b.buffer("params", "u32", "r");
  const ST = split && b.buffer("stats", "f32", "r");
  const MS = split && b.buffer("mass", "f32", "r");
  const LS = split && sampleListed(caps, s) ? b.buffer("list", "u32", "r") : undefined;
  const LW = listWords(CAP);
  const OUT = b.buffer("out", "i32", "w");
  const lanes = new Lanes(b, L, sg, Math.max(NP, 3));
  const lid = lanes.lid;
  // A branch on a value alike on every lane (a row parameter, a reduction's result): a barrier inside is reached
  // by the whole workgroup or by none of it, which PTX and SPIR-V allow and the JS device checks (WGSL's static
  // uniformity rule would not see it; Naga does not apply that rule to barriers). Not lean: the body always
  // runs, its loops running zero iterations where the row does not need them.
  const lean = s.lean !== false;
  const when = (c: Val, body: () => void) => (lean ? b.if(c, body) : body());

  const row = b.let(wgIndex(b, grid), "u32", "row");
  if (grid[0] * grid[1] * grid[2] > rows) b.if(row.ge(rows), () => b.return());
  const base = b.let(row.mul(V), "u32", "base");
  const pw = (k: number) => row.mul(SAMPLER_WORDS).add(k);
  const invT = b.let(b.load(PRM, pw(SAMPLER.invTemp), "f32"), "f32", "invT");
  const topK = b.let(b.load(PRM, pw(SAMPLER.topK), "i32"), "i32", "topK");
  const topP = b.let(b.load(PRM, pw(SAMPLER.topP), "f32"), "f32", "topP");
  const minP = b.let(b.load(PRM, pw(SAMPLER.minP), "f32"), "f32", "minP");
  const seed = b.let(b.load(PRM, pw(SAMPLER.seed)), "u32", "seed");
  const ctr = b.let(b.load(PRM, pw(SAMPLER.counter)), "u32", "ctr");

  // The row, vw elements per load: strided over lanes (coalesced; each lane still sees its elements in
  // index order), or as one contiguous slice per lane (`inOrder`: lanes in lane order cover the row in index
  // order, which the compaction needs). `active` false runs no iteration.
  const vw = Math.min(4, vecWidth(4, V));
  const slice = Math.ceil(Math.ceil(V / W) / vw) * vw;
  const overRow = (active: Val | null, f: (i: Val, x: Val) => void, inOrder = false): void => {
    const body = (i: Val) => {
      const xs = vw > 1 ? b.loadv(X, base.add(i), vw) : [b.load(X, base.add(i))];
      xs.forEach((x, e) => f(e ? i.add(e) : i, x));
    };
    if (!inOrder || W === 1) {
      const en = active ? active.select(u32(V), u32(0)) : u32(V);
      b.for(lid.mul(vw), active ? b.let(en, "u32", "en") : en, W * vw, body);
      return;
    }
    const st = b.let(lid.mul(slice), "u32", "st");
    let en = st.add(slice).min(u32(V));
    if (active) en = active.select(en, st);
    b.for(st, b.let(en, "u32", "en"), vw, body);
  };

  // 1. max, greedy index, non-finite flag, smallest finite logit: one pass, or the parts' stats.
  let m: Val, nfAll: Val, negMin: Val, greedy: Val;
  if (split) {
    const st = rowStats(b, ST!, row, split.parts, lid, W, (vs) => lanes.reduce("max", vs));
    [m, nfAll, negMin] = [st.m, st.nf, b.let(st.lo.neg(), "f32", "nmn")];
    greedy = b.let(st.first.cast("u32"), "u32", "greedy");
  } else {
    const bv = b.let(f32(-Infinity), "f32", "bv"), bi = b.let(u32(NONE), "u32", "bi");
    const nf = b.let(f32(0), "f32", "nf"), lo = b.let(f32(Infinity), "f32", "mn");
    overRow(null, (i, x) => statsStep(b, { bv, bi, nf, lo }, i, x));
    [m, nfAll, negMin] = lanes.reduce("max", [bv, nf, lo.neg()]);
    const [negGreedy] = lanes.reduce("max", [bv.eq(m).select(bi.cast("f32"), f32(NONE)).neg()]);
    greedy = b.let(negGreedy.neg().cast("u32"), "u32", "greedy");
  }
  const write = (tok: Val, flag: Val, first: Val = lid.eq(u32(0))) => {
    const st = () => {
      b.store(OUT, row.mul(2), tok.bitcast("i32"));
      b.store(OUT, row.mul(2).add(1), flag);
    };
    if (W === 1) st();
    else b.if(first, st);
  };
  b.if(nfAll.gt(f32(0)).or(invT.gt(f32(0)).and(invT.lt(f32(Infinity))).not()), () => {
    write(greedy, nfAll.gt(f32(0)).select(i32(1), i32(0)));
    b.return();
  });

  const wOf = (x: Val): Val => b.let(x.sub(m).mul(invT).exp(), "f32", "w");
  const flt = filterOf(b, V, topK, topP, minP);
  const bits = mix32(b, ctr.xor(mix32(b, seed)));
  const u = b.let(bits.shr(8).cast("f32").mul(f32(2 ** -24)), "f32", "u");
  const fallback = (first: Val, near: Val, total: Val) =>
    total.gt(f32(0)).select(first.lt(f32(NONE)).select(first, near.ge(f32(0)).select(near, greedy.cast("f32"))), greedy.cast("f32"));
  // An unfiltered row of a split draws from the parts' masses (sample_split.ts plainFromMasses) and stops here.
  if (split) {
    const plain = b.let(plainDraw(V, nfAll, invT, topK, topP, minP), "bool", "plain");
    when(plain, () => {
      const tok = plainFromMasses({ b, lanes, W, row, X, MS: MS as Buffer, base, V, ...split, m, invT, u, plain, fallback });
      b.if(plain, () => {
        write(tok, i32(0));
        b.return();
      });
    });
  }

  // 2. the candidate list.
  const { sKey, sW, sIdx, nFast, nSlow, nRow, zAll, fast, listed, br } = candidateList({
    b, L, s, lanes, lid, W, sg, NP, X, base, V, vw, CAP, steps, row, split, MS: MS || undefined, LS, LW, m, negMin, flt, topP, wOf, overRow, when,
  });

  // 3-4. θk, θp and the draw (sample_pick.ts): a short list on one subgroup alone, anything else on the workgroup.
  const env = {
    b, lanes, W, mode: L.mode, bits: L.bits, sg, X, base, V, list: { key: sKey, w: sW, idx: sIdx }, nFast, nSlow, nRow, fast,
    listed, zAll, filter: { ...flt, topP }, wOf, u, fallback, br, when,
  };
  const SG_LIST = s.subgroupList ?? SUBGROUP_LIST;
  const short = !lean || L.mode !== "subgroup" || W === sg || SG_LIST < 1 ? false : L.small ? V <= SG_LIST : b.let(fast!.and(nFast.le(u32(SG_LIST))), "bool", "short");
  const onWorkgroup = () => write(pickToken(env), i32(0));
  if (short === false) onWorkgroup();
  else {
    const one = new Lanes(b, { ...L, lanes: sg }, sg, Math.max(NP, 3));
    const lane = b.builtin("lane");
    // the list holds the kept set: the row is not read again
    const onSubgroup = () => b.if(b.builtin("sgid").eq(u32(0)), () => write(pickToken({ ...env, lanes: one, W: sg, nSlow: undefined, nRow: undefined, fast: undefined }), i32(0), lane.eq(u32(0))));
    if (short === true) onSubgroup();
    else b.if(short, onSubgroup, onWorkgroup);
  }
  return b.build();
}

/** What step 2 (the candidate list) reads of sample()'s setup: what the cut (sample_cut.ts) reads, and its own. */
interface ListBuild extends Pick<CutEnv, "b" | "lanes" | "W" | "sg" | "NP" | "X" | "base" | "V" | "vw" | "CAP" | "steps" | "row" | "MS" | "m" | "wOf" | "overRow" | "when"> {
  L: SampleLayout;
  s: SampleShape;
  lid: Val;
  split: ReturnType<typeof sampleSplit> | undefined;
  LS: Buffer | undefined;
  LW: number;
  negMin: Val;
  flt: Filter;
  topP: Val;
}

/**
 * Step 2: the candidate list in shared memory: a short row whole; a long row's kept set (listed by the parts,
 * or cut and compacted here), or only the top-p bracket; `fast` where it holds the kept set, else the steps
 * after it read the row (nSlow / nRow).
 */
function candidateList(cx: ListBuild) {
  const { b, L, s, lanes, lid, W, sg, NP, X, base, V, vw, CAP, steps, row, split, MS, LS, LW, m, negMin, flt, topP, wOf, overRow, when } = cx;
  const { kOn, pOn, mOn } = flt;
  const sKey = b.shared("ckey", "u32", L.small ? V : CAP);
  const sW = b.shared("cw", "f32", L.small ? V : CAP);
  const sIdx = L.small ? undefined : b.shared("cidx", "u32", CAP);
  let nFast: Val, nSlow: Val | undefined, nRow: Val | undefined, zAll: Val | undefined, fast: Val | undefined, listed: Val | undefined;
  // Rows under top-p alone whose kept set is too large for the list (a flat row, top-p near 1): the list holds
  // only the bracket around θp, narrowed from the parts' pivots (sample_bracket.ts); the logits above it
  // enter the radix search as one mass. Where the split runs in subgroup mode (its draw reads the row).
  const br = split && L.mode === "subgroup" && !L.small && s.bracket !== false
    ? bracket(b, { reduce: (v) => lanes.reduce("add", v), overRow, wOf, m, cap: CAP, pOnly: b.let(kOn.not().and(pOn).and(mOn.not()), "bool", "pOnly"), when })
    : undefined;
  if (L.small) {
    b.for(lid, u32(V), W, (j) => {
      const x = b.let(b.load(X, base.add(j)), "f32", "x");
      b.sstore(sKey, j, orderKey(b, x));
      b.sstore(sW, j, wOf(x));
    });
    b.barrier();
    nFast = u32(V);
  } else {
    const needZ = b.let(kOn.not().and(pOn), "bool", "needZ");
    const cover = (count: Val, mass: Val, at: Val, zTarget: Val): Val => covers(flt, count, mass, wOf(at), zTarget);
    const lo2 = b.let(negMin.neg(), "f32", "clo"), hi = b.let(m, "f32", "chi");
    const found = b.let(u32(0), "u32", "found"), cut = b.let(m, "f32", "cut");
    const total = b.let(f32(0), "f32", "ltot"), z = zAll = b.let(f32(0), "f32", "z");
    // A row the parts listed (sample_list.ts): the list is copied in, and nothing below reads the row.
    const pre = LS && b.let(b.load(LS, row.mul(u32(LW))).gt(u32(0)), "bool", "pre");
    // else the cut (the parts' pivots, then the search) and the list compacted from the row, or neither
    const fromRow = () => cutAndCompact({
      b, lanes, W, mode: L.mode, sg, NP, X, base, V, vw, CAP, steps, row, split, MS, m,
      filter: { ...flt, topP }, needZ, cover, wOf, overRow, when, br,
      list: { key: sKey, w: sW, idx: sIdx! }, found, cut, lo2, hi, z, total,
    });
    if (pre) {
      b.if(pre, () => {
        const at = b.let(row.mul(u32(LW)), "u32", "lat");
        const n = b.let(b.load(LS, at).min(u32(CAP)), "u32", "ln");
        b.set(found, u32(1));
        b.set(total, n.cast("f32"));
        b.set(z, b.load(LS, at.add(LIST.z)).bitcast("f32"));
        b.for(lid, n, W, (j) => {
          const e = b.let(at.add(u32(LIST_HEAD)).add(j), "u32", "le");
          b.sstore(sIdx!, j, b.load(LS, e));
          b.sstore(sKey, j, b.load(LS, e.add(u32(CAP))));
          b.sstore(sW, j, b.load(LS, e.add(u32(2 * CAP))).bitcast("f32"));
        });
      });
      when(pre.not(), fromRow);
    } else fromRow();
    b.barrier();
    const isFast = fast = b.let(found.eq(u32(1)), "bool", "fast");
    listed = br ? b.let(isFast.or(br.list), "bool", "listed") : isFast;
    nFast = b.let(listed.select(total.cast("u32").min(u32(CAP)), u32(0)), "u32", "nFast");
    nSlow = b.let(listed.select(u32(0), u32(V)), "u32", "nSlow");
    nRow = br ? b.let(isFast.select(u32(0), u32(V)), "u32", "nRow") : nSlow;
  }
  return { sKey, sW, sIdx, nFast, nSlow, nRow, zAll, fast, listed, br };
}
