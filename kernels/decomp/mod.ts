// The decomposition layer every renderer runs first: IR-to-IR passes over a Kernel that leave only what the
// renderer must write itself. Constant folding (fold.ts: exact, keeps the IR's wrap-around and f32 rounding)
// and the rewrites below, each over the shared walker (rewrite.ts). The math library is written once over a
// small vocabulary: math.ts (fused fma and f64; PTX implements the vocabulary) and math_f32.ts (f32 only, no
// fusion assumed), which expand.ts expands into IR for the languages that ask for it (Needs.math). Graph-level decomposition (what no kernel
// computes directly) is graph.ts, run by kernels/lower.ts before planning.
import type { Expr, Kernel } from "../ir.ts";
import { dot4, intDivMod, nanCompare, nanMinMax, type Needs } from "./arith.ts";
import { expandMath } from "./expand.ts";
import { foldKernel } from "./fold.ts";
import { bf16PairBits, f16BitsOf, narrowStorage } from "./narrow.ts";
import { rewriteKernel, type Rule } from "./rewrite.ts";

export type { Needs } from "./arith.ts";
export type { NarrowNeeds } from "./narrow.ts";

/**
 * A subgroup reduction of bool as one of u32 0/1: any (add, max) or all (min), as the JS device computes it.
 * SPIR-V and WGSL have no boolean group arithmetic; PTX's u32 path is the same instructions.
 */
export const boolSubgroup: Rule = (e) => {
  if (e.k !== "subgroup" || e.t !== "bool") return undefined;
  const bits: Expr = { k: "select", t: "u32", c: e.a, a: { k: "const", t: "u32", v: 1 }, b: { k: "const", t: "u32", v: 0 } };
  const r: Expr = { k: "subgroup", t: "u32", op: e.op === "min" ? "min" : "max", a: bits };
  return { k: "bin", t: "bool", op: "ne", a: r, b: { k: "const", t: "u32", v: 0 } };
};

/** pack2 as its two halves' round-to-nearest-even bits (NaN a quiet NaN), the low one first. */
export const pack2Bits = (only?: "bf16"): Rule => (e) => {
  if (e.k !== "pack2" || (only && e.ab !== only)) return undefined;
  if (e.ab === "bf16") return bf16PairBits(e.a, e.b);
  const hi: Expr = { k: "bin", t: "u32", op: "shl", a: f16BitsOf(e.b), b: { k: "const", t: "u32", v: 16 } };
  return { k: "bin", t: "u32", op: "or", a: f16BitsOf(e.a), b: hi };
};

/** The kernel as a renderer whose language `needs` these decompositions sees it. */
export function decompose(k: Kernel, needs: Needs = {}): Kernel {
  const rules: Rule[] = [boolSubgroup];
  if (needs.nanCompare) rules.push(nanCompare);
  if (needs.nanMinMax) rules.push(nanMinMax);
  if (needs.intDivMod) rules.push(intDivMod);
  if (needs.dot4) rules.push(dot4);
  if (needs.pack2) rules.push(pack2Bits(needs.pack2 === "bf16" ? "bf16" : undefined));
  const rule: Rule = rules.length === 1 ? boolSubgroup : (e) => {
    for (const r of rules) {
      const out = r(e);
      if (out) return out;
    }
    return undefined;
  };
  // Math after the arithmetic rules: the routines test NaN on the bits themselves and need none of them.
  let out = rewriteKernel(k, rule);
  if (needs.narrow) out = narrowStorage(out, needs.narrow);
  return foldKernel(expandMath(out, new Set(needs.math ?? [])));
}
