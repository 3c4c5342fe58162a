// Walks over kernel IR used by the PTX lowering: every expression of a body, whether a kernel has checks,
// and whether a loop bound can be evaluated once.
import type { Expr, Kernel, Stmt } from "../../ir.ts";
import { exprKids, stmtExprs, walkStmts } from "../../ir.ts";

export function forEachExprIn(e: Expr, f: (e: Expr) => void): void {
  f(e);
  for (const x of exprKids(e)) forEachExprIn(x, f);
}
/** Visits every expression node of every statement. */
export function forEachExpr(body: Stmt[], f: (e: Expr) => void): void {
  for (const s of body) {
    for (const e of stmtExprs(s)) forEachExprIn(e, f);
    if (s.k === "for") forEachExpr(s.body, f);
    else if (s.k === "if") {
      forEachExpr(s.then, f);
      forEachExpr(s.else, f);
    }
  }
}

export function hasChecks(k: Kernel): boolean {
  let found = false;
  walkStmts(k.body, (s) => {
    if (s.k === "check") found = true;
  });
  return found;
}

/** True when no statement of `body` can change the value of `e` (its vars, buffers or shared arrays). */
export function invariant(e: Expr, body: Stmt[]): boolean {
  const vars = new Set<string>(), bufs = new Set<number>(), mems = new Set<string>();
  let barrier = false, sub = false;
  const scan = (b: Stmt[]): void => {
    for (const s of b) {
      if (s.k === "atomic" && s.dst) vars.add(s.dst.name);
      if (s.k === "let" || s.k === "assign") vars.add(s.v.name);
      else if (s.k === "loadv") s.dst.forEach((d) => vars.add(d.name));
      else if (s.k === "mma") s.d.forEach((d) => vars.add(d.name));
      else if (s.k === "ldmatrix") s.dst.forEach((d) => vars.add(d.name));
      else if (s.k === "wgmma") s.acc.forEach((d) => vars.add(d.name));
      else if (s.k === "cpasync") mems.add(s.mem.name);
      else if (s.k === "store" || s.k === "storev" || s.k === "atomic") bufs.add(s.buf.binding);
      else if (s.k === "sstore") mems.add(s.mem.name);
      else if (s.k === "barrier") barrier = true;
      else if (s.k === "for") {
        vars.add(s.v.name);
        scan(s.body);
      } else if (s.k === "if") {
        scan(s.then);
        scan(s.else);
      }
    }
  };
  scan(body);
  let ok = true;
  forEachExprIn(e, (x) => {
    if (x.k === "var" && vars.has(x.v.name)) ok = false;
    // Another invocation may write a buffer between iterations only across a barrier; our own stores count.
    if (x.k === "load" && (bufs.has(x.buf.binding) || (barrier && x.buf.access !== "r"))) ok = false;
    if (x.k === "sload" && (mems.has(x.mem.name) || barrier)) ok = false;
    if (x.k === "subgroup" || x.k === "shuffle") sub = true;
  });
  return ok && !sub;
}
