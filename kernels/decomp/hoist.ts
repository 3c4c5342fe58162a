// Rewrites that turn one expression or statement into several statements: the walker, fresh variables and
// common-subexpression binding that expand.ts (math) and narrow.ts (narrow storage) share. A rewrite may put
// `let`s before the statement it is rewriting (`pre`); since expressions compute only, evaluating part of a
// statement just before it changes nothing, except in a loop's bound, which runs again on every trip: there
// the walker hands the rewrite no `pre` (it must stay inline or refuse).
import type { CType, Expr, Kernel, Stmt, Var } from "../ir.ts";
import { exprKids, stmtExprs } from "../ir.ts";
import { rewriteExpr } from "./rewrite.ts";

export interface Hoist {
  /** Statements to run before the current one (undefined inside a loop bound). */
  pre: Stmt[] | undefined;
  /** A variable no other part of the kernel uses. */
  fresh(t: CType): Var;
}

/** Fresh variable names that no variable of the kernel uses. */
function namer(k: Kernel, prefix: string): (t: CType) => Var {
  const used = new Set<string>();
  const seen = new Set<Expr>(); // expressions are DAGs: each shared subtree once
  const see = (e: Expr): void => {
    if (seen.has(e)) return;
    seen.add(e);
    if (e.k === "var") used.add(e.v.name);
    for (const x of exprKids(e)) see(x);
  };
  const scan = (body: Stmt[]): void => {
    for (const s of body) {
      if (s.k === "let" || s.k === "assign" || s.k === "for") used.add(s.v.name);
      if (s.k === "loadv") s.dst.forEach((v) => used.add(v.name));
      if (s.k === "atomic" && s.dst) used.add(s.dst.name);
      if (s.k === "mma" || s.k === "ldmatrix") (s.k === "mma" ? s.d : s.dst).forEach((v) => used.add(v.name));
      if (s.k === "wgmma") s.acc.forEach((v) => used.add(v.name));
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
    let name = `${prefix}${n++}`;
    while (used.has(name)) name = `${prefix}${n++}`;
    return { name, t };
  };
}

/** `e` as a leaf: itself when it is a variable or constant, else a fresh variable bound by a `let` in h.pre. */
export function leaf(e: Expr, h: Hoist): Expr {
  if (e.k === "var" || e.k === "const" || !h.pre) return e;
  const v = h.fresh(e.t);
  h.pre.push({ k: "let", v, e });
  return { k: "var", t: e.t, v };
}

function withKids(e: Expr, kids: Expr[]): Expr {
  switch (e.k) {
    case "un": case "cast": case "bitcast": case "subgroup": return { ...e, a: kids[0] };
    case "bin": return { ...e, a: kids[0], b: kids[1] };
    case "fma": return { ...e, a: kids[0], b: kids[1], c: kids[2] };
    case "select": return { ...e, c: kids[0], a: kids[1], b: kids[2] };
    case "load": case "sload": return { ...e, index: kids[0] };
    case "shuffle": return { ...e, a: kids[0], lane: kids[1] };
    case "pack2": return { ...e, a: kids[0], b: kids[1] };
    default: return e;
  }
}

/**
 * `root` with every non-leaf node it reaches more than once bound to a variable by a `let` in h.pre (in
 * dependency order), so that a renderer writing expressions as text repeats nothing. Inside a loop bound
 * (no pre) the tree stays as it is.
 */
export function materialize(root: Expr, h: Hoist): Expr {
  const pre = h.pre;
  if (!pre) return root;
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
      const v = h.fresh(e.t);
      pre.push({ k: "let", v, e: built });
      r = { k: "var", t: e.t, v };
    }
    done.set(e, r);
    return r;
  };
  return emit(root);
}

export interface HoistRules {
  /** An expression's replacement (its children already rewritten), or undefined to keep it. */
  expr?(e: Expr, h: Hoist): Expr | undefined;
  /** A statement's replacement (its expressions already rewritten, nested bodies not yet), or undefined. */
  stmt?(s: Stmt, h: Hoist): Stmt[] | undefined;
  /** Whether an expression is one `expr` rewrites (the walker skips subtrees without one). */
  wants?(e: Expr): boolean;
}

/** The kernel with the rules applied to every statement and expression (the same object when none fires). */
export function hoistKernel(k: Kernel, rules: HoistRules, prefix: string): Kernel {
  const fresh = namer(k, prefix);
  const seen = new Map<Expr, boolean>();
  const wants = rules.wants ?? (() => true);
  const has = (e: Expr): boolean => {
    let r = seen.get(e);
    if (r === undefined) seen.set(e, r = wants(e) || exprKids(e).some(has));
    return r;
  };
  let changed = false;

  const body = (ss: Stmt[]): Stmt[] => {
    const out: Stmt[] = [];
    for (const s of ss) {
      const h: Hoist = { pre: [], fresh };
      const memo = new Map<Expr, Expr>();
      const rule = rules.expr;
      const f = (e: Expr): Expr => !rule || !has(e) ? e : rewriteExpr(e, (x) => rule(x, h), memo);
      const r = stmt(s, f, (e) => {
        if (!rule || !has(e)) return e;
        const inner: Hoist = { pre: undefined, fresh };
        return rewriteExpr(e, (x) => rule(x, inner));
      });
      if (r !== s) changed = true;
      const more = rules.stmt?.(r, h);
      const pre = h.pre!;
      if (pre.length) changed = true;
      if (more) {
        changed = true;
        out.push(...pre, ...more);
      } else {
        out.push(...pre, r);
      }
    }
    return out;
  };

  const stmt = (s: Stmt, f: (e: Expr) => Expr, bound: (e: Expr) => Expr): Stmt => {
    const same = <T extends Stmt>(x: T, y: T): T => stmtExprs(x).every((e, i) => e === stmtExprs(y)[i]) ? x : y;
    switch (s.k) {
      case "let": case "assign": return same(s, { ...s, e: f(s.e) });
      case "store": case "sstore": case "atomic": return same(s, { ...s, index: f(s.index), e: f(s.e) });
      case "loadv": return same(s, { ...s, index: f(s.index) });
      case "storev": return same(s, { ...s, index: f(s.index), es: s.es.map(f) });
      case "check": return same(s, { ...s, c: f(s.c) });
      case "if": {
        const c = f(s.c), then = body(s.then), els = body(s.else);
        return c === s.c && then.every((x, i) => x === s.then[i]) && then.length === s.then.length &&
            els.every((x, i) => x === s.else[i]) && els.length === s.else.length
          ? s
          : { ...s, c, then, else: els };
      }
      case "for": {
        const start = f(s.start), end = bound(s.end), b = body(s.body);
        return start === s.start && end === s.end && b.length === s.body.length && b.every((x, i) => x === s.body[i])
          ? s
          : { ...s, start, end, body: b };
      }
      case "mma": {
        const a = s.a.map(f), b = s.b.map(f), c = s.c.map(f);
        return same(s, { ...s, a, b, c });
      }
      case "cpasync": return same(s, { ...s, sindex: f(s.sindex), index: f(s.index) });
      case "ldmatrix": return same(s, { ...s, index: f(s.index) });
      case "wgmma": return same(s, { ...s, a: f(s.a), b: f(s.b) });
      case "cmload": case "cmstore": return same(s, { ...s, index: f(s.index) });
      default:
        return s;
    }
  };

  const out = body(k.body);
  return changed ? { ...k, body: out } : k;
}
