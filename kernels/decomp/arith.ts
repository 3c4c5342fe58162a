// Arithmetic whose native instruction is weaker than the IR's contract on some targets, rewritten into
// operations every target computes exactly. Which rules a renderer needs is a property of its language (the
// same GPU under PTX has IEEE compares, under SPIR-V / WGSL it need not), so each renderer declares them
// (`Needs`) and decompose() applies them; what reaches the renderer is then safe to emit as the plain
// instruction.
//  - NaN: SPIR-V and WGSL let a float instruction that sees a NaN not give a NaN (without
//    SignedZeroInfNanPreserve, which Naga never declares): NVIDIA turns select(a < b, a, b) into a min that
//    drops the NaN, a compiler may fold a == a to true, GLSL's FMax/FMin are undefined for NaN and WGSL's
//    max/min return the other operand. Compares and max/min get explicit NaN tests (isnan, which every
//    renderer tests on the bits, where no such rule sees through).
//  - Integer div/mod: x / 0 = x % 0 = 0 (the IR's value; SPIR-V leaves it undefined, WGSL gives x); i32 on
//    the magnitudes with u32 division and the signs put back, since Vulkan leaves OpSRem/OpSMod undefined for
//    negative operands (NVIDIA computed -19 % 3 = 0) and OpSDiv's INT_MIN / -1 too: the quotient truncates,
//    the remainder takes the dividend's sign, INT_MIN / -1 wraps to INT_MIN (as in JavaScript).
import type { CType, Expr, UnOp } from "../ir.ts";
import type { Rule } from "./rewrite.ts";
import type { NarrowNeeds } from "./narrow.ts";

/**
 * Decompositions a renderer's language needs (decompose() applies exactly these). Each repeats its operands
 * in the tree (isnan(a), a + b, max(a, b)); a renderer that writes text without naming shared subtrees (WGSL)
 * would repeat them in the text too, 3^depth times for a nested max/min or div/mod, so it asks only for the
 * compares (whose bool result never feeds another compare's operands) and keeps helper functions for the rest.
 */
export interface Needs {
  /** IEEE compares on f32/f16 (and a float cast to bool: NaN is true). */
  nanCompare?: boolean;
  /** NaN-propagating max/min on f32/f16. */
  nanMinMax?: boolean;
  /** Integer div/mod with x / 0 = 0, i32 on the magnitudes (the renderer then sees only u32 div/mod). */
  intDivMod?: boolean;
  /**
   * Float functions the language has no accurate-enough instruction for, expanded into IR arithmetic
   * (math_f32.ts through expand.ts: exp, exp2, log, log2, sin, cos, tanh). A target whose own instruction or
   * library is accurate (JS's Math, PTX's math.ts routines over f64) leaves them out.
   */
  math?: readonly UnOp[];
  /** The int8x4 dot product (BinOp "dot4") as byte extractions, multiplies and adds, where the language has none. */
  dot4?: boolean;
  /**
   * pack2 as two integer roundings (narrow.ts's f16/bf16 encoders) where the language has no conversion for them:
   * "all", or "bf16" (the target converts to f16 itself).
   */
  pack2?: "all" | "bf16";
  /** 8- / 16-bit element loads and stores through u32 words (narrow.ts), where the target has none. */
  narrow?: NarrowNeeds;
}

const c = (t: CType, v: number): Expr => ({ k: "const", t, v });
const bin = (op: Extract<Expr, { k: "bin" }>["op"], t: CType, a: Expr, b: Expr): Expr => ({ k: "bin", t, op, a, b });
const sel = (cond: Expr, a: Expr, b: Expr): Expr => ({ k: "select", t: a.t, c: cond, a, b });
const isFloat = (t: CType) => t === "f32" || t === "f16";
const CMP = new Set(["lt", "le", "gt", "ge", "eq", "ne"]);

const unorderedOf = (a: Expr, b: Expr): Expr =>
  bin("or", "bool", { k: "un", t: "bool", op: "isnan", a }, { k: "un", t: "bool", op: "isnan", a: b });

/** Float compares false on NaN (ne true, and so is NaN cast to bool). */
export const nanCompare: Rule = (e) => {
  if (e.k === "cast" && e.t === "bool" && isFloat(e.a.t)) {
    return bin("or", "bool", bin("ne", "bool", e.a, c(e.a.t, 0)), { k: "un", t: "bool", op: "isnan", a: e.a });
  }
  if (e.k !== "bin" || !isFloat(e.a.t) || !CMP.has(e.op)) return undefined;
  if (e.op === "ne") return bin("or", "bool", e, unorderedOf(e.a, e.b));
  return bin("and", "bool", e, { k: "un", t: "bool", op: "not", a: unorderedOf(e.a, e.b) });
};

/** Float max/min NaN when either operand is. */
export const nanMinMax: Rule = (e) => {
  if (e.k !== "bin" || !isFloat(e.t) || (e.op !== "max" && e.op !== "min")) return undefined;
  return sel(unorderedOf(e.a, e.b), bin("add", e.t, e.a, e.b), e);
};

/** i32 / u32 div and mod with the IR's results for every operand pair, over u32 division by a non-zero value. */
export const intDivMod: Rule = (e) => {
  if (e.k !== "bin" || (e.op !== "div" && e.op !== "mod") || (e.t !== "i32" && e.t !== "u32")) return undefined;
  const guard = !(e.b.k === "const" && e.b.v !== 0);
  const u0 = c("u32", 0);
  if (e.t === "u32") {
    if (!guard) return undefined;
    const zero = bin("eq", "bool", e.b, u0);
    return sel(zero, u0, bin(e.op, "u32", e.a, sel(zero, c("u32", 1), e.b)));
  }
  const xneg = bin("lt", "bool", e.a, c("i32", 0)), yneg = bin("lt", "bool", e.b, c("i32", 0));
  const magnitude = (v: Expr, neg: Expr): Expr => { // |INT_MIN| = 2^31 as u32
    const bits: Expr = { k: "bitcast", t: "u32", a: v };
    return sel(neg, bin("sub", "u32", u0, bits), bits);
  };
  const ax = magnitude(e.a, xneg), ay = magnitude(e.b, yneg);
  const zero = guard ? bin("eq", "bool", ay, u0) : undefined;
  const r = bin(e.op, "u32", ax, zero ? sel(zero, c("u32", 1), ay) : ay);
  // a constant divisor's sign is known: no `xneg != false` left for the renderer
  const notX: Expr = { k: "un", t: "bool", op: "not", a: xneg };
  const neg = e.op === "mod" ? xneg : e.b.k !== "const" ? bin("ne", "bool", xneg, yneg) : e.b.v < 0 ? notX : xneg;
  const signed = sel(neg, bin("sub", "u32", u0, r), r);
  return { k: "bitcast", t: "i32", a: zero ? sel(zero, u0, signed) : signed };
};

/**
 * dot4(a, b) = Σ sext(a.byte[i])·sext(b.byte[i]): each signed byte by a shift to the top and an arithmetic shift
 * back (i32), four exact products (|p| <= 2^14) summed exactly. The operands are repeated (4 times each): the
 * kernel library passes variables.
 */
export const dot4: Rule = (e) => {
  if (e.k !== "bin" || e.op !== "dot4") return undefined;
  const i = (v: number): Expr => ({ k: "const", t: "i32", v });
  const sbyte = (w: Expr, k: number): Expr => {
    const up: Expr = k === 3 ? w : { k: "bin", t: "u32", op: "shl", a: w, b: { k: "const", t: "u32", v: 24 - 8 * k } };
    return { k: "bin", t: "i32", op: "shr", a: { k: "bitcast", t: "i32", a: up }, b: i(24) };
  };
  let acc: Expr | undefined;
  for (let k = 0; k < 4; k++) {
    const p: Expr = { k: "bin", t: "i32", op: "mul", a: sbyte(e.a, k), b: sbyte(e.b, k) };
    acc = acc ? { k: "bin", t: "i32", op: "add", a: acc, b: p } : p;
  }
  return acc!;
};
