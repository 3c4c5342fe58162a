// Kernels of the composites around `sample` (graph/logits.ts states their meaning; read that first).
//
// logitsProcess: a grid of (row, chunk) workgroups. Each copies its chunk of the row, banning what the row's
// mask forbids (the mask is read only for a masked row), then, after a barrier (it orders the buffer writes of
// the workgroup), its lanes walk the row's entries and rewrite the ones whose id falls in the chunk. An
// unconstrained row with no entries costs one copy of the row (R·V reads and writes over the whole GPU).
// logprobs (kernels/lib/logprobs_split.ts splits a long row over many teams instead): one workgroup per row: one pass for the max, its first index (the first top entry) and Σ exp
// against a running max, then rounds of "largest after the previous" (one pass, two reductions each) up to the
// row's top_logprobs. A row that wants no logprobs writes its zeros and returns.
import { f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, team, teamReduce, teamRow, wgIndex } from "./common.ts";
import { SAMPLER, SAMPLER_WORDS } from "../../graph/sample.ts";
import { EXTRA, EXTRA_ENTRY, EXTRA_HEAD, maskWords } from "../../graph/logits.ts";

const BANNED_BITS = 0xff7fffff; // -FLT_MAX (graph/logits.ts BANNED)
const NONE = 1 << 24; // an index sentinel above every vocabulary index (indices travel as exact f32)

export interface ProcessShape {
  rows: number;
  vocab: number;
  /** Entries per row of the extra slot. */
  entries: number;
  /** Elements per workgroup (default 1024: a 128k row spreads over ~128 workgroups, a few loads per lane). */
  chunk?: number;
  /** Rows of a counts input u32 [countRows, vocab] after the mask (read by a row whose `dense` word k is in
   * [1, countRows]: its row k − 1); 0 or absent: no counts input. */
  countRows?: number;
}

/**
 * logits_process. Bindings: logits f32 [rows, vocab] (r), extra u32 [rows, 8 + 3·entries] (r; headers, then entries),
 * mask u32 [rows, ceil(vocab/32)] (r), [counts u32 [countRows, vocab] (r),] out f32 [rows, vocab] (w).
 */
export function logitsProcess(caps: Caps, s: ProcessShape): Kernel {
  const { rows: R, vocab: V, entries: E } = s;
  const Q = s.countRows ?? 0;
  if (!(Number.isInteger(R) && R >= 1 && Number.isInteger(V) && V >= 1 && Number.isInteger(E) && E >= 0)) {
    throw new KernelError(`logits_process: bad shape ${R}x${V}, ${E} entries`);
  }
  if (!(Number.isInteger(Q) && Q >= 0)) throw new KernelError(`logits_process: bad count rows ${Q}`);
  if (Math.max(R, Q) * V >= 2 ** 32) throw new KernelError(`logits_process: ${R}x${V} logits exceed the kernel's index range`);
  // One lane where subgroups are one lane wide (the JS device): no barrier, no lockstep emulation.
  const W = caps.subgroups && caps.subgroupSize === 1 ? 1 : Math.min(256, caps.maxWorkgroupSize);
  const CH = Math.min(s.chunk ?? 1024, Math.ceil(V / W) * W);
  const chunks = Math.ceil(V / CH), MW = maskWords(V);
  const grid = gridFor(caps, R * chunks);
  const b = new KernelBuilder(`logits_process_r${R}_v${V}_e${E}${Q ? `_c${Q}` : ""}`, { workgroup: W, grid });
  const X = b.buffer("logits", "f32", "r");
  const EX = b.buffer("extra", "u32", "r");
  const M = b.buffer("mask", "u32", "r");
  const C = Q ? b.buffer("counts", "u32", "r") : undefined;
  const OUT = b.buffer("out", "f32", "w");
  const wg = b.let(wgIndex(b, grid), "u32", "wg");
  const inGrid = b.let(wg.lt(u32(R * chunks)), "bool", "ing");
  const row = b.let(inGrid.select(wg.div(u32(chunks)), u32(0)), "u32", "row");
  const c0 = b.let(wg.mod(u32(chunks)).mul(u32(CH)), "u32", "c0");
  const c1 = b.let(inGrid.select(c0.add(u32(CH)).min(u32(V)), c0), "u32", "c1");
  const eo = b.let(row.mul(u32(EXTRA_HEAD)), "u32", "eo"); // the row's header; its entries after all R headers
  const eb = b.let(row.mul(u32(E * EXTRA_ENTRY)).add(u32(R * EXTRA_HEAD)), "u32", "eb");
  const mk = b.let(b.load(EX, eo.add(EXTRA.masked)), "u32", "mk");
  const masked = b.let(mk.ge(u32(1)).and(mk.le(u32(R))), "bool", "masked");
  const mrow = b.let(masked.select(mk.sub(u32(1)), u32(0)), "u32", "mrow"); // the row's mask (packed: graph/logits.ts)
  const base = b.let(row.mul(u32(V)), "u32", "base");
  const lid = b.lid.x;
  // The mask and the counts are read under a branch, not a select (whose operands are both evaluated): a row
  // without a grammar or penalties reads neither (uniform over the workgroup: one row per workgroup).
  const allowed = (i: Val): Val => {
    const word = b.let(u32(0xffffffff), "u32", "mw");
    b.if(masked, () => b.set(word, b.load(M, mrow.mul(u32(MW)).add(i.shr(5)))));
    return b.let(word.shr(i.and(u32(31))).and(u32(1)).eq(u32(1)), "bool", "ok");
  };
  const banned = u32(BANNED_BITS).bitcast("f32");
  const rep = b.let(b.load(EX, eo.add(EXTRA.rep), "f32"), "f32", "rep");
  const freq = b.let(b.load(EX, eo.add(EXTRA.freq), "f32"), "f32", "freq");
  const pres = b.let(b.load(EX, eo.add(EXTRA.pres), "f32"), "f32", "pres");
  const k = b.let(C ? b.load(EX, eo.add(EXTRA.dense)) : u32(0), "u32", "k");
  const dense = b.let(k.ge(u32(1)).and(k.le(u32(Q))), "bool", "dense");
  const cb = b.let(dense.select(k.sub(u32(1)).mul(u32(V)), u32(0)), "u32", "cb"); // the row's counts
  // bias, then repetition, frequency, presence (graph/logits.ts adjust)
  const adjust = (x: Val, bias: Val, seen: Val): Val => {
    const count = b.let(seen.and(u32(0x7fffffff)), "u32", "cnt");
    const v = b.let(x.add(bias), "f32", "v");
    b.if(count.gt(u32(0)).or(seen.shr(31).eq(u32(1))), () => b.set(v, v.gt(f32(0)).select(v.div(rep), v.mul(rep))));
    b.if(count.gt(u32(0)), () => b.set(v, v.sub(freq.mul(count.cast("f32"))).sub(pres)));
    return bias.eq(f32(-Infinity)).select(banned, v.max(banned));
  };
  b.for(c0.add(lid), c1, W, (i) => {
    const x = b.let(b.load(X, base.add(i)), "f32", "x");
    const ok = b.let(allowed(i), "bool", "al");
    const y = b.let(x.isfinite().and(ok.not()).select(banned, x), "f32", "y");
    if (C) {
      const seen = b.let(u32(0), "u32", "seen");
      b.if(dense, () => b.set(seen, b.load(C, cb.add(i))));
      b.if(seen.ne(u32(0)).and(x.isfinite()).and(ok), () => b.set(y, adjust(x, f32(0), seen)));
    }
    b.store(OUT, base.add(i), y);
  });
  if (W > 1) b.barrier();
  const n = b.let(inGrid.select(b.load(EX, eo.add(EXTRA.count)).min(u32(E)), u32(0)), "u32", "n");
  b.for(lid, n, W, (j) => {
    const e = b.let(eb.add(j.mul(u32(EXTRA_ENTRY))), "u32", "e");
    const id = b.let(b.load(EX, e), "u32", "id");
    b.if(id.ge(c0).and(id.lt(c1)), () => {
      const x = b.let(b.load(X, base.add(id)), "f32", "x");
      b.if(x.isfinite().and(allowed(id)), () => {
        const bias = b.let(b.load(EX, e.add(1), "f32"), "f32", "bias");
        const own = b.let(b.load(EX, e.add(2)), "u32", "own");
        const seen = C ? b.let(dense.select(b.load(C, cb.add(id)), own), "u32", "seen") : own;
        b.store(OUT, base.add(id), adjust(x, bias, seen));
      });
    });
  });
  return b.build();
}

export interface LogprobsShape {
  rows: number;
  vocab: number;
  /** Top logprobs per row (N of the op). */
  n: number;
}

/**
 * logprobs. Bindings: logits f32 [rows, vocab] (r), sample i32 [rows, 2] (r), params u32 [rows, SAMPLER_WORDS]
 * (r), out f32 [rows, 1 + 2n] (w).
 */
export function logprobs(caps: Caps, s: LogprobsShape): Kernel {
  const { rows: R, vocab: V, n: N } = s;
  if (!(Number.isInteger(R) && R >= 1 && Number.isInteger(V) && V >= 1 && Number.isInteger(N) && N >= 0)) {
    throw new KernelError(`logprobs: bad shape ${R}x${V}, n ${N}`);
  }
  if (V >= NONE || R * V >= 2 ** 32) throw new KernelError(`logprobs: ${R}x${V} logits exceed the kernel's index range`);
  // 256 lanes: this kernel serves rows under 16384 entries (longer ones split, logprobs_split.ts), 64 a lane at
  // most. Lavapipe runs a workgroup as one coroutine per 8 lanes and maps their frames afresh per workgroup:
  // 1024 lanes took 1.4 MiB of them a row and step, 256 under 200 KiB.
  const t = team(caps, { wide: 256, rows: 1, maxLanes: 256 });
  const grid = gridFor(caps, R);
  const b = new KernelBuilder(`logprobs_r${R}_v${V}_n${N}`, { workgroup: t.size, grid });
  const X = b.buffer("logits", "f32", "r");
  const S = b.buffer("sample", "i32", "r");
  const P = b.buffer("params", "u32", "r");
  const OUT = b.buffer("out", "f32", "w");
  const { lane, row } = teamRow(b, t, grid);
  if (grid[0] * grid[1] * grid[2] > R) b.if(row.ge(R), () => b.return());
  const OW = 1 + 2 * N;
  const want = b.let(b.load(P, row.mul(SAMPLER_WORDS).add(SAMPLER.logprobs)).eq(u32(1)), "bool", "want");
  const nTop = b.let(want.select(b.load(P, row.mul(SAMPLER_WORDS).add(SAMPLER.topLogprobs)).min(u32(N)), u32(0)), "u32", "ntop");
  const base = b.let(row.mul(u32(V)), "u32", "base");
  const lead = lane.eq(u32(0));
  const put = (k: number | Val, v: Val) => b.if(lead, () => b.store(OUT, row.mul(u32(OW)).add(k), v));

  // The words the rounds below do not write: pairs past the row's top_logprobs ((−1, 0), or all 0 for a row
  // that wants none), spread over the lanes. A row that wants none stops here, and the rounds stop at the row's
  // top_logprobs: one row per workgroup, so the exit and the trip count are uniform. (Rounds unrolled to N
  // made this kernel's lavapipe coroutine frames 3.5 MiB a workgroup.)
  b.for(lane.add(nTop.mul(u32(2))), u32(2 * N), t.lanes, (w) => {
    b.store(OUT, row.mul(u32(OW)).add(w).add(u32(1)), want.and(w.and(u32(1)).eq(u32(0))).select(f32(-1), f32(0)));
  });
  b.if(want.not(), () => {
    put(0, f32(0));
    b.return();
  });

  // Passes over the row read vw consecutive logits per lane and step: a lane's loads are independent, so a
  // long row is not bound by one load's latency per element.
  const vw = V % 4 === 0 ? 4 : V % 2 === 0 ? 2 : 1;
  const overRow = (f: (i: Val, x: Val) => void) =>
    b.for(lane.mul(vw), u32(V), t.lanes * vw, (i) => {
      const xs = vw > 1 ? b.loadv(X, base.add(i), vw) : [b.load(X, base.add(i))];
      xs.forEach((x, e) => f(e ? i.add(e) : i, x));
    });
  // One pass: each lane's max (with its first index: the best token is the first top entry) and Σ exp(x − max)
  // kept against a running max (rescaled when the max moves), combined across lanes after.
  const NEG = f32(-Infinity);
  const mx = b.let(NEG, "f32", "mx"), mi = b.let(f32(NONE), "f32", "mi"), sm = b.let(f32(0), "f32", "sm");
  overRow((i, x) => maxSumStep(b, { mx, mi, sm }, i, x));
  const m = b.let(teamReduce(b, t, "max", mx), "f32", "m");
  const ls = b.let(teamReduce(b, t, "add", mx.gt(NEG).select(sm.mul(mx.sub(m).exp()), f32(0))).log(), "f32", "ls");
  const first = b.let(teamReduce(b, t, "min", mx.eq(m).select(mi, f32(NONE))), "f32", "first");
  const lp = (x: Val): Val => x.sub(m).sub(ls);
  const tok = b.let(b.load(S, row.mul(2)).bitcast("u32").min(u32(V - 1)), "u32", "tok");
  put(0, lp(b.load(X, base.add(tok))));
  if (N === 0) return b.build();

  // Round k: the largest entry after round k − 1's (value descending, index ascending; NaN never ranks).
  const px = b.let(f32(Infinity), "f32", "px"), pi = b.let(f32(-1), "f32", "pi");
  const emit = (k: Val, got: Val, M: Val, I: Val) => {
    put(k.mul(u32(2)).add(u32(1)), got.select(I, f32(-1)));
    put(k.mul(u32(2)).add(u32(2)), got.select(lp(M), f32(0)));
    b.if(got, () => {
      b.set(px, M);
      b.set(pi, I);
    });
  };
  b.if(nTop.gt(u32(0)), () => emit(u32(0), b.let(first.lt(f32(NONE)), "bool", "got"), m, first));
  b.for(u32(1), nTop, 1, (k) => {
    const bx = b.let(f32(-Infinity), "f32", "bx"), bi = b.let(f32(NONE), "f32", "bi");
    overRow((i, x) => {
      const fi = b.let(i.cast("f32"), "f32", "fi");
      const after = x.lt(px).or(x.eq(px).and(fi.gt(pi)));
      b.if(after.and(x.eq(x)).and(x.gt(bx).or(bi.eq(f32(NONE)))), () => {
        b.set(bx, x);
        b.set(bi, fi);
      });
    });
    const M = b.let(teamReduce(b, t, "max", bi.lt(f32(NONE)).select(bx, f32(-Infinity))), "f32", "M");
    const I = b.let(teamReduce(b, t, "min", bx.eq(M).select(bi, f32(NONE))), "f32", "I");
    emit(k, b.let(I.lt(f32(NONE)), "bool", "got"), M, I);
  });
  return b.build();
}

/**
 * One logit into a lane's running max `mx` (NaN skipped; its first index `mi`) and Σ exp(x − mx) `sm`, rescaled
 * when the max moves (logprobs here and in logprobs_split.ts).
 */
export function maxSumStep(b: KernelBuilder, s: { mx: Val; mi: Val; sm: Val }, i: Val, x: Val): void {
  const NEG = f32(-Infinity);
  const num = b.let(x.eq(x), "bool", "num");
  b.if(num.and(x.gt(s.mx).or(s.mi.eq(f32(NONE)))), () => {
    b.set(s.sm, s.mx.gt(NEG).select(s.sm.mul(s.mx.sub(x).exp()), s.sm));
    b.set(s.mx, x);
    b.set(s.mi, i.cast("f32"));
  });
  b.if(num.and(x.gt(NEG)), () => b.set(s.sm, s.sm.add(x.sub(s.mx).exp())));
}
