// Constant folding and integer identities on kernel expressions, keeping the IR's exact semantics (integer
// wrap at 32 bits, f32 rounding). Float identities that are not exact for every input (x + 0 with x = -0,
// x * 0 with NaN) are left alone. Any renderer may run it; the JS renderer does, because the library's index
// arithmetic is full of `lane * 0 + 0` once lanes collapse to one.
import type { CType, Expr, Kernel } from "../ir.ts";
import { mapStmts } from "./rewrite.ts";

const memo = new WeakMap<Expr, Expr>();

function num(e: Expr): number | undefined {
  return e.k === "const" ? e.v : undefined;
}
function k(t: CType, v: number): Expr {
  return { k: "const", t, v };
}
function wrap(t: CType, v: number): number {
  return t === "i32" ? v | 0 : t === "u32" ? v >>> 0 : t === "f32" ? Math.fround(v) : v;
}
const isInt = (t: CType) => t === "i32" || t === "u32";

function evalBin(op: string, t: CType, at: CType, a: number, b: number): number | undefined {
  if (isInt(at)) {
    switch (op) {
      case "add": return wrap(t, a + b);
      case "sub": return wrap(t, a - b);
      case "mul": return wrap(t, Math.imul(a, b));
      case "div": return b === 0 ? 0 : wrap(t, Math.trunc(a / b));
      case "mod": return b === 0 ? 0 : wrap(t, a % b);
      case "and": return wrap(t, a & b);
      case "or": return wrap(t, a | b);
      case "xor": return wrap(t, a ^ b);
      case "shl": return wrap(t, a << b);
      case "shr": return at === "i32" ? a >> b : a >>> b;
      case "max": return Math.max(a, b);
      case "min": return Math.min(a, b);
    }
  }
  if (at === "f32") {
    switch (op) {
      case "add": return Math.fround(a + b);
      case "sub": return Math.fround(a - b);
      case "mul": return Math.fround(a * b);
      case "div": return Math.fround(a / b);
    }
  }
  switch (op) {
    case "lt": return a < b ? 1 : 0;
    case "le": return a <= b ? 1 : 0;
    case "gt": return a > b ? 1 : 0;
    case "ge": return a >= b ? 1 : 0;
    case "eq": return a === b ? 1 : 0;
    case "ne": return a !== b ? 1 : 0;
  }
  return undefined;
}

/** Folds constants and integer identities; returns the same object when nothing changes. */
export function fold(e: Expr): Expr {
  const m = memo.get(e);
  if (m) return m;
  const r = foldOnce(e);
  memo.set(e, r);
  return r;
}

function foldOnce(e: Expr): Expr {
  switch (e.k) {
    case "un": {
      const a = fold(e.a);
      const v = num(a);
      if (v !== undefined && a.t !== "bool" && (e.op === "neg" || e.op === "abs")) {
        return k(e.t, wrap(e.t, e.op === "neg" ? -v : Math.abs(v)));
      }
      return a === e.a ? e : { ...e, a };
    }
    case "bin": {
      const a = fold(e.a), b = fold(e.b);
      const x = num(a), y = num(b);
      if (x !== undefined && y !== undefined && a.t !== "bool") {
        const v = evalBin(e.op, e.t, a.t, x, y);
        if (v !== undefined) return k(e.t, v);
      }
      if (isInt(e.t)) {
        if (e.op === "add" || e.op === "or" || e.op === "xor") {
          if (x === 0) return b;
          if (y === 0) return a;
        }
        if ((e.op === "sub" || e.op === "shl" || e.op === "shr") && y === 0) return a;
        if (e.op === "mul") {
          if (x === 1) return b;
          if (y === 1) return a;
          if (x === 0 || y === 0) return k(e.t, 0);
        }
        if (e.op === "div" && y === 1) return a;
        if (e.op === "mod" && y === 1) return k(e.t, 0);
        if (e.op === "and" && (x === 0 || y === 0)) return k(e.t, 0);
      }
      if (e.t === "f32" && e.op === "mul") { // x * 1 is exact for every x
        if (x === 1) return b;
        if (y === 1) return a;
      }
      return a === e.a && b === e.b ? e : { ...e, a, b };
    }
    case "fma": {
      const a = fold(e.a), b = fold(e.b), c = fold(e.c);
      return a === e.a && b === e.b && c === e.c ? e : { ...e, a, b, c };
    }
    case "select": {
      const c = fold(e.c), a = fold(e.a), b = fold(e.b);
      if (c.k === "const") return c.v ? a : b;
      return c === e.c && a === e.a && b === e.b ? e : { ...e, c, a, b };
    }
    case "cast": {
      const a = fold(e.a);
      const v = num(a);
      if (v !== undefined && a.t !== "f16" && e.t !== "f16" && e.t !== "bool" && a.t !== "bool") {
        if (isInt(a.t)) return k(e.t, wrap(e.t, v));
        if (a.t === "f32" && e.t === "f32") return a;
      }
      return a === e.a ? e : { ...e, a };
    }
    case "bitcast": {
      const a = fold(e.a);
      if (a.k === "const" && isInt(a.t) && isInt(e.t)) return k(e.t, wrap(e.t, a.v));
      return a === e.a ? e : { ...e, a };
    }
    case "load": case "sload": {
      const index = fold(e.index);
      return index === e.index ? e : { ...e, index };
    }
    case "subgroup": {
      const a = fold(e.a);
      return a === e.a ? e : { ...e, a };
    }
    case "shuffle": {
      const a = fold(e.a), lane = fold(e.lane);
      return a === e.a && lane === e.lane ? e : { ...e, a, lane };
    }
    default:
      return e;
  }
}

/** The kernel with every expression folded (the same object when nothing folds). */
export function foldKernel(k: Kernel): Kernel {
  const body = mapStmts(k.body, fold);
  return body === k.body ? k : { ...k, body };
}
