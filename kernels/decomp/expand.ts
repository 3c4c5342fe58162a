// The f32 math routines (math_f32.ts) expanded into kernel IR, for a renderer whose language's own exp, log,
// sin, ... are not accurate enough (decompose()'s `needs.math` names the ops). Each call becomes `let`
// statements just before the statement that uses it: every value the routine uses more than once gets a
// variable of its own, the rest stays one expression, so a renderer that writes expressions as text (WGSL)
// repeats nothing and one that writes SSA (SPIR-V) sees the same instructions. f16 arguments go through f32
// (exact) and the result is cast back once.
//
// The routines compute only; moving them before their statement changes nothing, except in a loop's bound,
// which is evaluated again on every trip: math there is refused.
import type { CType, Expr, Kernel, Stmt, UnOp, Var } from "../ir.ts";
import { exprKids, KernelError, stmtExprs } from "../ir.ts";
import { F32_MATH, type F32MathOp, type F32MathOps } from "./math_f32.ts";
import { rewriteExpr } from "./rewrite.ts";

const cst = (t: CType, v: number): Expr => ({ k: "const", t, v: t === "f32" ? Math.fround(v) : v });
const bin = (op: Extract<Expr, { k: "bin" }>["op"], t: CType, a: Expr, b: Expr): Expr => ({ k: "bin", t, op, a, b });
const un = (op: UnOp, t: CType, a: Expr): Expr => ({ k: "un", t, op, a });
const bitcast = (t: CType, a: Expr): Expr => a.t === t ? a : { k: "bitcast", t, a };
const CMP = (op: "lt" | "le" | "eq" | "ne") => (a: Expr, b: Expr) => bin(op, "bool", a, b);

/** The vocabulary as kernel IR: F is an f32 expression, I an i32 one, P a bool one. */
export const IR_MATH: F32MathOps<Expr, Expr, Expr> = {
  f: (x) => cst("f32", x),
  i: (x) => cst("i32", x | 0),
  add: (a, b) => bin("add", "f32", a, b),
  sub: (a, b) => bin("sub", "f32", a, b),
  mul: (a, b) => bin("mul", "f32", a, b),
  fma: (a, b, c) => ({ k: "fma", t: "f32", a, b, c }),
  div: (a, b) => bin("div", "f32", a, b),
  max: (a, b) => bin("max", "f32", a, b),
  min: (a, b) => bin("min", "f32", a, b),
  abs: (a) => un("abs", "f32", a),
  floor: (a) => un("floor", "f32", a),
  // select on x's NaN test, which every renderer computes from the bits: no compiler folds it
  opaque: (v, x) => ({ k: "select", t: "f32", c: un("isnan", "bool", x), a: cst("f32", 0), b: cst("f32", v) }),
  bits: (a) => bitcast("i32", a),
  float: (a) => bitcast("f32", a),
  cvti: (a) => ({ k: "cast", t: "i32", a }),
  cvtf: (a) => ({ k: "cast", t: "f32", a }),
  iadd: (a, b) => bin("add", "i32", a, b),
  isub: (a, b) => bin("sub", "i32", a, b),
  iand: (a, b) => bin("and", "i32", a, b),
  ior: (a, b) => bin("or", "i32", a, b),
  ixor: (a, b) => bin("xor", "i32", a, b),
  ishl: (a, n) => bin("shl", "i32", a, cst("i32", n)),
  ishr: (a, n) => bin("shr", "i32", a, cst("i32", n)),
  flt: CMP("lt"),
  fle: CMP("le"),
  feq: CMP("eq"),
  isnan: (a) => un("isnan", "bool", a),
  ilt: CMP("lt"),
  iltu: (a, b) => bin("lt", "bool", bitcast("u32", a), bitcast("u32", b)),
  ine: CMP("ne"),
  ieq: CMP("eq"),
  pand: (a, b) => bin("and", "bool", a, b),
  por: (a, b) => bin("or", "bool", a, b),
  pnot: (a) => un("not", "bool", a),
  sel: (c, a, b) => ({ k: "select", t: "f32", c, a, b }),
  isel: (c, a, b) => ({ k: "select", t: "i32", c, a, b }),
};

function withKids(e: Expr, kids: Expr[]): Expr {
  switch (e.k) {
    case "un": case "cast": case "bitcast": case "subgroup": return { ...e, a: kids[0] };
    case "bin": return { ...e, a: kids[0], b: kids[1] };
    case "fma": return { ...e, a: kids[0], b: kids[1], c: kids[2] };
    case "select": return { ...e, c: kids[0], a: kids[1], b: kids[2] };
    default: return e; // the routines build nothing else
  }
}

/** Fresh variable names that no variable of the kernel uses. */
function namer(k: Kernel): (t: CType) => Var {
  const used = new Set<string>();
  const see = (e: Expr): void => {
    if (e.k === "var") used.add(e.v.name);
    for (const x of exprKids(e)) see(x);
  };
  const scan = (body: Stmt[]): void => {
    for (const s of body) {
      if (s.k === "let" || s.k === "assign" || s.k === "for") used.add(s.v.name);
      if (s.k === "loadv") s.dst.forEach((v) => used.add(v.name));
      if (s.k === "mma") s.d.forEach((v) => used.add(v.name));
      stmtExprs(s).forEach(see);
      if (s.k === "for") scan(s.body);
      if (s.k === "if") {
        scan(s.then);
        scan(s.else);
      }
    }
  };
  scan(k.body);
  let n = 0;
  return (t) => {
    let name = `dm${n++}`;
    while (used.has(name)) name = `dm${n++}`;
    return { name, t };
  };
}

/**
 * `root` with every non-leaf node that it reaches more than once bound to a variable by a `let` appended to
 * `out` (in dependency order).
 */
function materialize(root: Expr, out: Stmt[], fresh: (t: CType) => Var): Expr {
  const refs = new Map<Expr, number>();
  const count = (e: Expr): void => {
    const n = refs.get(e) ?? 0;
    refs.set(e, n + 1);
    if (n === 0) exprKids(e).forEach(count);
  };
  count(root);
  const done = new Map<Expr, Expr>();
  const emit = (e: Expr): Expr => {
    const d = done.get(e);
    if (d) return d;
    const kids = exprKids(e);
    const built = kids.length ? withKids(e, kids.map(emit)) : e;
    let r = built;
    if (kids.length && refs.get(e)! > 1) {
      const v = fresh(e.t);
      out.push({ k: "let", v, e: built });
      r = { k: "var", t: e.t, v };
    }
    done.set(e, r);
    return r;
  };
  return emit(root);
}

/** The kernel with every unary op in `ops` expanded into IR (the same object when there is none). */
export function expandMath(k: Kernel, ops: ReadonlySet<UnOp>): Kernel {
  if (ops.size === 0) return k;
  const fresh = namer(k);
  const seen = new Map<Expr, boolean>();
  const has = (e: Expr): boolean => {
    let r = seen.get(e);
    if (r === undefined) seen.set(e, r = (e.k === "un" && ops.has(e.op)) || exprKids(e).some(has));
    return r;
  };
  let changed = false;

  const body = (ss: Stmt[]): Stmt[] => {
    const out: Stmt[] = [];
    for (const s of ss) {
      const pre: Stmt[] = [];
      const memo = new Map<Expr, Expr>();
      const f = (e: Expr): Expr => !has(e) ? e : rewriteExpr(e, (x) => {
        if (x.k !== "un" || !ops.has(x.op)) return undefined;
        const routine = F32_MATH[x.op as F32MathOp];
        if (!routine) throw new KernelError(`${k.name}: no f32 routine for ${x.op}`);
        let arg = x.a.t === "f16" ? { k: "cast", t: "f32", a: x.a } as Expr : x.a;
        if (arg.k !== "var" && arg.k !== "const") {
          const v = fresh("f32");
          pre.push({ k: "let", v, e: arg });
          arg = { k: "var", t: "f32", v };
        }
        const r = materialize(routine(IR_MATH, arg), pre, fresh);
        return x.t === "f16" ? { k: "cast", t: "f16", a: r } : r;
      }, memo);
      const r = stmt(s, f); // fills pre
      out.push(...pre, r);
      if (pre.length) changed = true;
    }
    return out;
  };

  const stmt = (s: Stmt, f: (e: Expr) => Expr): Stmt => {
    switch (s.k) {
      case "let": case "assign": return { ...s, e: f(s.e) };
      case "store": case "sstore": return { ...s, index: f(s.index), e: f(s.e) };
      case "loadv": return { ...s, index: f(s.index) };
      case "storev": return { ...s, index: f(s.index), es: s.es.map(f) };
      case "check": return { ...s, c: f(s.c) };
      case "if": return { ...s, c: f(s.c), then: body(s.then), else: body(s.else) };
      case "for":
        if (has(s.end)) throw new KernelError(`${k.name}: ${[...ops].join("/")} in a loop bound`);
        return { ...s, start: f(s.start), body: body(s.body) };
      case "mma":
        if (stmtExprs(s).some(has)) throw new KernelError(`${k.name}: ${[...ops].join("/")} in an mma operand`);
        return s;
      default:
        return s;
    }
  };

  const out = body(k.body);
  return changed ? { ...k, body: out } : k;
}
