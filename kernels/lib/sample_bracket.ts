// The bracket path of the `sample` kernel (kernels/lib/sample.ts) for a long row under top-p alone whose kept
// set is larger than the candidate list (a flat row with top-p near 1). The pick kernel runs on one
// workgroup; its usual way through such a row (no cut within `cap` covers the kept set) is the radix search
// and the draw over the whole row in global memory: 8 radix rounds, each a pass over the row.
//
// Instead θp is bracketed: the parts' pivots (sample_split.ts sampleMass: count and Σ w at or above each of
// 15 pivots, summed over the parts) give the highest pivot that covers (Σ w above it >= top_p · Z) as `lo`
// and the pivot after it, which does not cover, as `hi` (+∞ when every pivot covers). θp lies in [lo, hi).
// While [lo, hi) holds more than `cap` logits, a pass over the row counts and sums the logits of [lo, hi)
// at SUB_PIVOTS pivots spread evenly inside it and narrows the bracket the same way (at most REFINE_PASSES
// passes; each divides it by 8 on a smooth row). When it fits, the list holds [lo, hi) only, and the logits
// at or above hi enter the radix search as one mass (`massHi`: they rank above every list entry, so they count
// at every pivot of every round). The draw then reads the row (the kept set is x >= θp). A row whose bracket
// stays too wide takes the row path as before.
//
// Exact as the list path is: θp is the same logit (the masses are the same sums, reassociated), so a token
// differs from the oracle's only at a knife edge of rounding.
import { f32, type KernelBuilder, u32, type Val } from "../ir.ts";

/** Pivots inside the bracket per refining pass (2·SUB_PIVOTS sums per lane). */
export const SUB_PIVOTS = 7;
/** Passes over the row that may narrow a bracket (constant trip count: barriers; unneeded ones read nothing). */
export const REFINE_PASSES = 3;

export interface BracketEnv {
  /** Cross-lane sums over the workgroup (every lane gets them; every lane must call). */
  reduce: (vals: Val[]) => Val[];
  /** A pass over the row (every logit once; `active` false: none). */
  overRow: (active: Val | null, f: (i: Val, x: Val) => void) => void;
  /** w of a logit (exp((x − m) · inv_temp)). */
  wOf: (x: Val) => Val;
  /** The row's max. */
  m: Val;
  /** Candidate list capacity. */
  cap: number;
  /** The row samples under top-p alone (no top-k, no min-p). */
  pOnly: Val;
  /** Runs body where c holds, c alike on every lane (sample.ts); a refining pass the bracket does not need is skipped. */
  when: (c: Val, body: () => void) => void;
}

export interface Bracket {
  /** The row takes the bracket path (top-p alone, no cut within `cap` at the pivots, some pivot covers). */
  on: Val;
  /** The bracket fits the list (set by refine). */
  list: Val;
  /** The bracket [lo, hi) (hi +∞: none above). */
  lo: Val;
  hi: Val;
  /** Σ w of the logits >= hi (their Σ at the pivot, summed over the parts, or refined). */
  massHi: Val;
  /** In the pivot loop, ascending: pivot `pv` covers, with `cnt` logits at or above it. */
  cover(pv: Val, cnt: Val): void;
  /** In the pivot loop, ascending: pivot `pv` does not cover (cnt logits, Σ w `mass` at or above it). */
  above(pv: Val, cnt: Val, mass: Val): void;
  /** After the pivot loop: decides `on`, narrows the bracket (passes over the row), decides `list`. */
  refine(found: Val, zTarget: Val): void;
}

export function bracket(b: KernelBuilder, env: BracketEnv): Bracket {
  const { cap, m } = env;
  const lo = b.let(m, "f32", "bLo"), cntLo = b.let(f32(-1), "f32", "bCl"); // −1: no pivot covers
  const hi = b.let(f32(Infinity), "f32", "bHi"), cntHi = b.let(f32(0), "f32", "bCh"), massHi = b.let(f32(0), "f32", "bMh");
  const on = b.let(u32(0), "u32", "bOn"), list = b.let(u32(0), "u32", "bList");
  const width = () => cntLo.sub(cntHi);
  return {
    on: on.eq(u32(1)),
    list: list.eq(u32(1)),
    lo, hi, massHi,
    cover(pv, cnt) { // ascending: the last that covers is the highest
      b.set(lo, pv);
      b.set(cntLo, cnt);
    },
    above(pv, cnt, mass) { // the first that does not cover sits right above the highest that does
      b.if(hi.eq(f32(Infinity)).and(cntLo.ge(f32(0))), () => {
        b.set(hi, pv);
        b.set(cntHi, cnt);
        b.set(massHi, mass);
      });
    },
    refine(found, zTarget) {
      b.set(on, env.pOnly.and(found.eq(u32(0))).and(cntLo.ge(f32(0))).select(u32(1), u32(0)));
      b.for(u32(0), u32(REFINE_PASSES), 1, () => {
        const go = b.let(on.eq(u32(1)).and(width().gt(f32(cap))), "bool", "bGo");
        env.when(go, () => pass(go));
      });
      b.set(list, on.eq(u32(1)).and(width().le(f32(cap))).and(width().ge(f32(1))).select(u32(1), u32(0)));
      function pass(go: Val): void {
        const top = b.let(hi.lt(f32(Infinity)).select(hi, m), "f32", "bTop");
        const step = b.let(top.sub(lo).mul(f32(1 / (SUB_PIVOTS + 1))), "f32", "bStep");
        const sub = (k: number) => lo.add(step.mul(f32(k + 1)));
        const cnt = Array.from({ length: SUB_PIVOTS }, () => b.let(f32(0), "f32", "bc"));
        const mass = Array.from({ length: SUB_PIVOTS }, () => b.let(f32(0), "f32", "bs"));
        env.overRow(go, (_, x) => {
          b.if(x.ge(lo).and(x.lt(hi)), () => {
            const w = env.wOf(x);
            for (let k = 0; k < SUB_PIVOTS; k++) {
              b.if(x.ge(sub(k)), () => {
                b.set(cnt[k], cnt[k].add(f32(1)));
                b.set(mass[k], mass[k].add(w));
              });
            }
          });
        });
        const C = env.reduce(cnt), S = env.reduce(mass);
        const nlo = b.let(lo, "f32", "bnl"), ncl = b.let(cntLo, "f32", "bncl");
        const nhi = b.let(hi, "f32", "bnh"), nch = b.let(cntHi, "f32", "bnch"), nmh = b.let(massHi, "f32", "bnmh");
        const set = b.let(u32(0), "u32", "bset");
        for (let k = 0; k < SUB_PIVOTS; k++) {
          // clamped into [lo, hi]: a pivot rounded onto an end keeps that end's counts
          const sp = b.let(sub(k).max(lo).min(top), "f32", "bsp");
          const total = b.let(massHi.add(S[k]), "f32", "bmt");
          const covers = b.let(total.ge(zTarget), "bool", "bcov");
          b.if(go.and(covers), () => {
            b.set(nlo, sp);
            b.set(ncl, cntHi.add(C[k]));
          });
          b.if(go.and(covers.not()).and(set.eq(u32(0))).and(sp.lt(hi)), () => {
            b.set(nhi, sp);
            b.set(nch, cntHi.add(C[k]));
            b.set(nmh, total);
            b.set(set, u32(1));
          });
        }
        b.set(lo, nlo);
        b.set(cntLo, ncl);
        b.set(hi, nhi);
        b.set(cntHi, nch);
        b.set(massHi, nmh);
      }
    },
  };
}
