// Bottom-up rewriting of a kernel's expressions: the walker every decomposition shares. A rule sees an
// expression whose children are already rewritten and returns a replacement or undefined (keep it). Nothing
// that does not change is copied, so a kernel no rule touches comes back as the same object.
import type { Expr, Kernel, Stmt } from "../ir.ts";

export type Rule = (e: Expr) => Expr | undefined;

/** `e` with `rule` applied bottom-up (memoized per expression object: shared subtrees stay shared). */
export function rewriteExpr(e: Expr, rule: Rule, memo = new Map<Expr, Expr>()): Expr {
  const m = memo.get(e);
  if (m) return m;
  let r: Expr = e;
  switch (e.k) {
    case "un": case "cast": case "bitcast": case "subgroup": {
      const a = rewriteExpr(e.a, rule, memo);
      if (a !== e.a) r = { ...e, a };
      break;
    }
    case "bin": {
      const a = rewriteExpr(e.a, rule, memo), b = rewriteExpr(e.b, rule, memo);
      if (a !== e.a || b !== e.b) r = { ...e, a, b };
      break;
    }
    case "fma": {
      const a = rewriteExpr(e.a, rule, memo), b = rewriteExpr(e.b, rule, memo), c = rewriteExpr(e.c, rule, memo);
      if (a !== e.a || b !== e.b || c !== e.c) r = { ...e, a, b, c };
      break;
    }
    case "select": {
      const c = rewriteExpr(e.c, rule, memo), a = rewriteExpr(e.a, rule, memo), b = rewriteExpr(e.b, rule, memo);
      if (c !== e.c || a !== e.a || b !== e.b) r = { ...e, c, a, b };
      break;
    }
    case "load": case "sload": {
      const index = rewriteExpr(e.index, rule, memo);
      if (index !== e.index) r = { ...e, index };
      break;
    }
    case "shuffle": {
      const a = rewriteExpr(e.a, rule, memo), lane = rewriteExpr(e.lane, rule, memo);
      if (a !== e.a || lane !== e.lane) r = { ...e, a, lane };
      break;
    }
  }
  const out = rule(r) ?? r;
  memo.set(e, out);
  return out;
}

/** Every expression of a statement list rewritten by `f`; the same array when nothing changes. */
export function mapStmts(body: Stmt[], f: (e: Expr) => Expr): Stmt[] {
  let changed = false;
  const out = body.map((s) => {
    const r = mapStmt(s, f);
    if (r !== s) changed = true;
    return r;
  });
  return changed ? out : body;
}

function mapStmt(s: Stmt, f: (e: Expr) => Expr): Stmt {
  switch (s.k) {
    case "let": case "assign": {
      const e = f(s.e);
      return e === s.e ? s : { ...s, e };
    }
    case "store": case "sstore": case "atomic": {
      const index = f(s.index), e = f(s.e);
      return index === s.index && e === s.e ? s : { ...s, index, e };
    }
    case "loadv": {
      const index = f(s.index);
      return index === s.index ? s : { ...s, index };
    }
    case "storev": {
      const index = f(s.index), es = s.es.map(f);
      return index === s.index && es.every((e, i) => e === s.es[i]) ? s : { ...s, index, es };
    }
    case "for": {
      const start = f(s.start), end = f(s.end), body = mapStmts(s.body, f);
      return start === s.start && end === s.end && body === s.body ? s : { ...s, start, end, body };
    }
    case "if": {
      const c = f(s.c), then = mapStmts(s.then, f), els = mapStmts(s.else, f);
      return c === s.c && then === s.then && els === s.else ? s : { ...s, c, then, else: els };
    }
    case "check": {
      const c = f(s.c);
      return c === s.c ? s : { ...s, c };
    }
    case "cpasync": {
      const sindex = f(s.sindex), index = f(s.index);
      return sindex === s.sindex && index === s.index ? s : { ...s, sindex, index };
    }
    case "ldmatrix": {
      const index = f(s.index);
      return index === s.index ? s : { ...s, index };
    }
    case "wgmma": {
      const a = f(s.a), b = f(s.b);
      return a === s.a && b === s.b ? s : { ...s, a, b };
    }
    case "cmload": case "cmstore": {
      const index = f(s.index);
      return index === s.index ? s : { ...s, index };
    }
    default:
      return s;
  }
}

/** The kernel with `rule` applied to every expression (the same object when nothing changes). */
export function rewriteKernel(k: Kernel, rule: Rule): Kernel {
  const memo = new Map<Expr, Expr>();
  const body = mapStmts(k.body, (e) => rewriteExpr(e, rule, memo));
  return body === k.body ? k : { ...k, body };
}
