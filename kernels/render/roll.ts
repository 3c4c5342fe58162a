// Rolls unrolled code back into loops, for the JS renderer. The kernel library unrolls for GPU load
// scheduling (a block per chunk, trip or row, each with its own locals); on the CPU that only makes the generated
// function huge, and V8's optimizing compilers take seconds on a function of a few thousand statements.
// A run of N >= 2 consecutive blocks of P statements becomes `for (r = 0; r < N; r++) block0` when:
// - the blocks are the same code up to the names of the variables each defines (its locals: let, loop
//   variables, loadv/atomic/mma/ldmatrix results): a read of a local defined earlier in the block reads the
//   same statement's same result in every block, and every other variable is the same one in all blocks
//   (reads of a `let v = constant` the let dominates count as that constant: constLets);
// - each constant is the same in all blocks or, for i32/u32, steps by a fixed amount (c0 + r * d): it becomes
//   that expression of the loop variable;
// - no local of any block is read outside the run (the loop's last trip would leave other values behind).
// The statements then run in the same order on the same values, so results are bit-identical. Only the scalar
// code shape uses it (js.ts): there no two invocations' statements interleave.
import { type CType, type Expr, type Kernel, type Stmt, type Var, walkStmts } from "../ir.ts";
import { rewriteExpr } from "../decomp/rewrite.ts";
import { fold } from "../decomp/fold.ts";

/** Statements a run must save (P x (N - 1)) to become a loop: below that the unrolled code is no burden. */
const MIN_SAVED = 12;
/** Kernels shorter than this are left as they are (V8 compiles them quickly; the search is not free). */
const MIN_STATEMENTS = 200;
/** The longest block looked for. */
const MAX_PERIOD = 1024;

/** `kernel` with its repeated blocks rolled into loops (the same object when there is none). */
export function rollLoops(kernel: Kernel): Kernel {
  let n = 0;
  walkStmts(kernel.body, () => n++);
  if (n < MIN_STATEMENTS) return kernel;
  let k = constLets(kernel), rolled = false;
  const names = { n: 0 };
  // One pass rolls what it can; a run refused because an earlier roll in the same pass made its use counts stale
  // (they only ever fall) is taken by the next pass.
  for (let pass = 0; pass < 2; pass++) {
    const uses = new Map<string, number>();
    countUses(k.body, uses);
    const st = { uses, names, changed: false };
    const body = rollList(k.body, st);
    if (!st.changed) break;
    k = { ...k, body };
    rolled = true;
  }
  return rolled ? k : kernel;
}

/**
 * Reads of a variable whose only definition is `let v = constant` replaced by the constant, where the let has
 * surely run: later in its own statement list, or inside a later statement of it. The library keeps a trip's
 * index in such a variable (`gi1 = 1`, `gi2 = 2`, ...), which would make each trip's block read another
 * variable; as constants they step, and the blocks match. Nothing else is folded here (a let's value is):
 * folding `x + 0` in one block and not `x + 1` in the next would make them differ.
 */
function constLets(kernel: Kernel): Kernel {
  const defs = new Map<string, number>();
  const count = (body: Stmt[]): void => {
    for (const s of body) {
      for (const v of defsOf(s)) defs.set(v.name, (defs.get(v.name) ?? 0) + 1);
      if (s.k === "assign") defs.set(s.v.name, (defs.get(s.v.name) ?? 0) + 2);
      for (const b of bodiesOf(s)) count(b);
    }
  };
  count(kernel.body);
  const scoped = (body: Stmt[], outer: Map<string, Expr>): Stmt[] => {
    const known = new Map(outer);
    let changed = false;
    const out = body.map((s) => {
      const memo = new Map<Expr, Expr>();
      const sub = (e: Expr) => known.size ? rewriteExpr(e, (x) => (x.k === "var" ? known.get(x.v.name) : undefined), memo) : e;
      const es = exprsOf(s), nes = es.map(sub);
      const bs = bodiesOf(s), nbs = bs.map((b) => scoped(b, known));
      const r = nes.every((e, i) => e === es[i]) && nbs.every((b, i) => b === bs[i]) ? s : withParts(s, nes, nbs);
      if (r !== s) changed = true;
      if (s.k === "let" && defs.get(s.v.name) === 1) {
        const c = fold(r.k === "let" ? r.e : s.e);
        if (c.k === "const" && c.t === s.v.t) known.set(s.v.name, c);
      }
      return r;
    });
    return changed ? out : body;
  };
  const body = scoped(kernel.body, new Map());
  return body === kernel.body ? kernel : { ...kernel, body };
}

interface State {
  uses: Map<string, number>;
  names: { n: number };
  changed: boolean;
}

// ---- var uses ------------------------------------------------------------------------------------------

function exprVars(e: Expr, f: (v: Var) => void): void {
  switch (e.k) {
    case "var": f(e.v); return;
    case "un": case "cast": case "bitcast": case "subgroup": exprVars(e.a, f); return;
    case "bin": case "pack2": exprVars(e.a, f); exprVars(e.b, f); return;
    case "fma": exprVars(e.a, f); exprVars(e.b, f); exprVars(e.c, f); return;
    case "select": exprVars(e.c, f); exprVars(e.a, f); exprVars(e.b, f); return;
    case "load": case "sload": exprVars(e.index, f); return;
    case "shuffle": exprVars(e.a, f); exprVars(e.lane, f); return;
  }
}
/** Variables a statement defines (not counting its bodies'). */
function defsOf(s: Stmt): Var[] {
  switch (s.k) {
    case "let": case "for": return [s.v];
    case "assign": return [];
    case "atomic": return s.dst ? [s.dst] : [];
    case "loadv": case "ldmatrix": return s.dst;
    case "mma": return s.d;
    default: return [];
  }
}
function eachVar(body: Stmt[], f: (v: Var) => void): void {
  for (const s of body) {
    for (const e of exprsOf(s)) exprVars(e, f);
    for (const v of defsOf(s)) f(v);
    if (s.k === "assign") f(s.v);
    if (s.k === "wgmma") s.acc.forEach(f);
    for (const b of bodiesOf(s)) eachVar(b, f);
  }
}
function countUses(body: Stmt[], m: Map<string, number>): void {
  eachVar(body, (v) => m.set(v.name, (m.get(v.name) ?? 0) + 1));
}

// ---- a statement's parts, in one fixed order (the shape and the rebuild walk them alike) --------------

function exprsOf(s: Stmt): Expr[] {
  switch (s.k) {
    case "let": case "assign": return [s.e];
    case "store": case "sstore": case "atomic": return [s.index, s.e];
    case "loadv": case "ldmatrix": return [s.index];
    case "storev": return [s.index, ...s.es];
    case "for": return [s.start, s.end];
    case "if": case "check": return [s.c];
    case "mma": return [...s.a, ...s.b, ...s.c];
    case "cpasync": return [s.sindex, s.index];
    case "wgmma": return [s.a, s.b];
    case "cmload": case "cmstore": return [s.index];
    default: return [];
  }
}
function bodiesOf(s: Stmt): Stmt[][] {
  return s.k === "for" ? [s.body] : s.k === "if" ? [s.then, s.else] : [];
}
/** `s` with its expressions and bodies replaced (same counts and order as exprsOf / bodiesOf). */
function withParts(s: Stmt, es: Expr[], bodies: Stmt[][]): Stmt {
  switch (s.k) {
    case "let": case "assign": return { ...s, e: es[0] };
    case "store": case "sstore": case "atomic": return { ...s, index: es[0], e: es[1] };
    case "loadv": case "ldmatrix": return { ...s, index: es[0] };
    case "storev": return { ...s, index: es[0], es: es.slice(1) };
    case "for": return { ...s, start: es[0], end: es[1], body: bodies[0] };
    case "if": return { ...s, c: es[0], then: bodies[0], else: bodies[1] };
    case "check": return { ...s, c: es[0] };
    case "mma": {
      const na = s.a.length, nb = s.b.length;
      return { ...s, a: es.slice(0, na), b: es.slice(na, na + nb), c: es.slice(na + nb) };
    }
    case "cpasync": return { ...s, sindex: es[0], index: es[1] };
    case "wgmma": return { ...s, a: es[0], b: es[1] };
    case "cmload": case "cmstore": return { ...s, index: es[0] };
    default: return s;
  }
}
/** A statement's own fields that are not expressions, variables or bodies. */
function headOf(s: Stmt): string {
  switch (s.k) {
    case "store": case "loadv": case "storev": return `${s.k}:${s.buf.binding}:${s.view}:${s.k === "loadv" ? s.dst.length : ""}`;
    case "sstore": case "cpasync": return `${s.k}:${s.mem.name}${s.k === "cpasync" ? `:${s.buf.binding}` : ""}`;
    case "atomic": return `atomic:${s.op}:${s.buf.binding}:${s.dst ? 1 : 0}`;
    case "for": return `for:${s.step}:${s.unroll}:${s.body.length}`;
    case "if": return `if:${s.then.length}:${s.else.length}`;
    case "check": return `check:${s.code}`;
    case "mma": return `mma:${s.ab}:${s.a.length}:${s.b.length}:${s.c.length}:${s.d.length}`;
    case "ldmatrix": return `ldmatrix:${s.mem.name}:${s.trans}:${s.dst.length}`;
    case "cpwait": return `cpwait:${s.pending}`;
    case "wgwait": return `wgwait:${s.pending}`;
    case "wgmma": return `wgmma:${s.ab}:${s.n}:${s.mem.name}:${s.acc.map((v) => v.name).join(",")}`;
    case "barrier": return `barrier:${s.device ?? false}`;
    case "cmzero": return `cmzero:${s.acc.name}`;
    case "cmload": return `cmload:${s.dst.name}:${"binding" in s.mem ? `b${s.mem.binding}` : s.mem.name}:${s.stride}`;
    case "cmmad": return `cmmad:${s.acc.name}:${s.a.name}:${s.b.name}`;
    case "cmstore": return `cmstore:${s.acc.name}:${s.mem.name}:${s.stride}`;
    default: return s.k;
  }
}

// ---- a statement described for matching: its code, the variables it reads from outside, its constants ------

interface Desc {
  /** The code with constants' values and outside variables' names left out, interned (equal ids, same code). */
  sk: number;
  /** Outside variables read or assigned, in order. */
  refs: string[];
  consts: { t: CType; v: number }[];
  /** The variables it defines (anywhere inside). */
  defs: string[];
}
function describe(s: Stmt, ids: Map<string, number>): Desc {
  const inside = new Map<string, number>();
  const d: Desc = { sk: 0, refs: [], consts: [], defs: [] };
  const tokens: string[] = [];
  const collect = (body: Stmt[]): void => {
    for (const x of body) {
      for (const v of defsOf(x)) if (!inside.has(v.name)) inside.set(v.name, inside.size);
      for (const b of bodiesOf(x)) collect(b);
    }
  };
  collect([s]);
  d.defs = [...inside.keys()];
  const v = (x: Var): string => {
    const i = inside.get(x.name);
    if (i !== undefined) return `I${i}:${x.t}`;
    d.refs.push(x.name);
    return `V:${x.t}`;
  };
  const expr = (e: Expr): void => {
    switch (e.k) {
      case "const": tokens.push(`c${e.t}`); d.consts.push({ t: e.t, v: e.v }); return;
      case "var": tokens.push(v(e.v)); return;
      case "builtin": tokens.push(`b${e.b}`); return;
      case "un": tokens.push(`u${e.op}:${e.t}`); expr(e.a); return;
      case "cast": case "bitcast": tokens.push(`${e.k}:${e.t}`); expr(e.a); return;
      case "subgroup": tokens.push(`sg${e.op}:${e.t}`); expr(e.a); return;
      case "bin": tokens.push(`${e.op}:${e.t}`); expr(e.a); expr(e.b); return;
      case "pack2": tokens.push(`pack2:${e.ab}`); expr(e.a); expr(e.b); return;
      case "fma": tokens.push(`fma:${e.t}`); expr(e.a); expr(e.b); expr(e.c); return;
      case "select": tokens.push(`sel:${e.t}`); expr(e.c); expr(e.a); expr(e.b); return;
      case "load": tokens.push(`ld${e.buf.binding}:${e.view}:${e.t}`); expr(e.index); return;
      case "sload": tokens.push(`sld${e.mem.name}:${e.t}`); expr(e.index); return;
      case "shuffle": tokens.push(`shfl${e.mode}:${e.t}`); expr(e.a); expr(e.lane); return;
    }
  };
  const stmts = (body: Stmt[]): void => {
    for (const x of body) {
      tokens.push(headOf(x));
      for (const e of exprsOf(x)) expr(e);
      if (x.k === "assign") tokens.push(`=${v(x.v)}`);
      for (const dv of defsOf(x)) tokens.push(`D${v(dv)}`);
      for (const b of bodiesOf(x)) {
        tokens.push("{");
        stmts(b);
        tokens.push("}");
      }
    }
  };
  stmts([s]);
  const key = tokens.join(" ");
  let id = ids.get(key);
  if (id === undefined) ids.set(key, id = ids.size);
  d.sk = id;
  return d;
}

// ---- finding and rolling runs ---------------------------------------------------------------------------

interface Run { at: number; period: number; count: number; steps: number[] }

/** A statement list prepared for matching: each statement's description, its outside reads as positions. */
interface List {
  body: Stmt[];
  desc: Desc[];
  /** Per statement, each outside read: the position of the statement that defines it, or -1 - a name id. */
  refs: number[][];
  /** ... and which of that statement's definitions it is (a loadv defines several). */
  subs: number[][];
}
function listOf(body: Stmt[]): List {
  const ids = new Map<string, number>();
  const desc = body.map((s) => describe(s, ids));
  const at = new Map<string, number>(), sub = new Map<string, number>();
  desc.forEach((d, q) => d.defs.forEach((n, k) => {
    at.set(n, at.has(n) ? NaN : q); // defined twice: never matches
    sub.set(n, k);
  }));
  const names = new Map<string, number>();
  const pos = (n: string) => at.get(n) ?? -1 - (names.get(n) ?? names.set(n, names.size).size - 1);
  return { body, desc, refs: desc.map((d) => d.refs.map(pos)), subs: desc.map((d) => d.refs.map((n) => sub.get(n) ?? 0)) };
}

/** Does block j of period p from i match block 0 (code, reads, and constants that step as `steps` says)? */
function blockMatches(l: List, i: number, p: number, j: number, steps: number[] | undefined): boolean {
  let ci = 0;
  for (let q = 0; q < p; q++) {
    const a = i + q, b = a + j * p, da = l.desc[a], db = l.desc[b];
    if (da.sk !== db.sk) return false;
    const ra = l.refs[a], rb = l.refs[b], sa = l.subs[a], sb = l.subs[b];
    for (let k = 0; k < ra.length; k++) {
      if (sa[k] !== sb[k]) return false;
      // a read of an earlier statement of block 0 reads the same statement of block j; any other the same variable
      if (ra[k] >= i) {
        if (!(ra[k] < a) || rb[k] !== ra[k] + j * p) return false;
      } else if (rb[k] !== ra[k]) return false;
    }
    for (let k = 0; k < da.consts.length; k++, ci++) {
      const c0 = da.consts[k], c = db.consts[k];
      if (steps === undefined) continue;
      if (j === 1) {
        if (Object.is(c.v, c0.v)) steps[ci] = 0;
        else if ((c0.t === "i32" || c0.t === "u32") && Number.isInteger(c.v - c0.v)) steps[ci] = c.v - c0.v;
        else return false;
      } else if (steps[ci] === 0 ? !Object.is(c.v, c0.v) : c.v !== c0.v + j * steps[ci]) return false;
    }
  }
  return true;
}

/** The longest run of blocks of `p` statements from `i` that rolls (count >= 2), if any. */
function runAt(l: List, i: number, p: number, st: State): Run | undefined {
  const steps: number[] = [];
  let count = 1;
  while (i + (count + 1) * p <= l.body.length && blockMatches(l, i, p, count, steps)) count++;
  // No block's local may be read outside the run: every use of it must be one of the run's first n blocks.
  for (let n = count; n >= 2 && p * (n - 1) >= MIN_SAVED; n--) {
    const inRun = new Map<string, number>();
    eachVar(l.body.slice(i, i + n * p), (v) => inRun.set(v.name, (inRun.get(v.name) ?? 0) + 1));
    let escapes = false;
    for (let q = i; q < i + n * p && !escapes; q++) escapes = l.desc[q].defs.some((name) => inRun.get(name) !== st.uses.get(name));
    if (!escapes) return { at: i, period: p, count: n, steps };
  }
  return undefined;
}

/** Block 0 of `run` with its stepping constants as expressions of the loop variable `r`. */
function rolledBody(body: Stmt[], run: Run, r: Var): Stmt[] {
  // constants in describe()'s order: a statement's expressions (each node before its operands), then its bodies
  let i = 0;
  const rv: Expr = { k: "var", t: "u32", v: r };
  const expr = (e: Expr): Expr => {
    switch (e.k) {
      case "const": {
        const d = run.steps[i++] ?? 0;
        if (d === 0) return e;
        const t = e.t, j: Expr = t === "u32" ? rv : { k: "cast", t, a: rv };
        const scaled: Expr = Math.abs(d) === 1 ? j : { k: "bin", t, op: "mul", a: j, b: { k: "const", t, v: t === "u32" ? Math.abs(d) : d } };
        // u32 constants cannot be negative: a falling sequence subtracts
        return { k: "bin", t, op: t === "u32" && d < 0 || t === "i32" && d === -1 ? "sub" : "add", a: e, b: scaled };
      }
      case "var": case "builtin": return e;
      case "un": case "cast": case "bitcast": case "subgroup": return { ...e, a: expr(e.a) };
      case "bin": case "pack2": {
        const a = expr(e.a);
        return { ...e, a, b: expr(e.b) };
      }
      case "fma": {
        const a = expr(e.a), b = expr(e.b);
        return { ...e, a, b, c: expr(e.c) };
      }
      case "select": {
        const c = expr(e.c), a = expr(e.a);
        return { ...e, c, a, b: expr(e.b) };
      }
      case "load": case "sload": return { ...e, index: expr(e.index) };
      case "shuffle": {
        const a = expr(e.a);
        return { ...e, a, lane: expr(e.lane) };
      }
    }
  };
  const stmts = (b: Stmt[]): Stmt[] => b.map((s) => {
    const es = exprsOf(s).map(expr);
    return withParts(s, es, bodiesOf(s).map(stmts));
  });
  return stmts(body.slice(run.at, run.at + run.period));
}

function rollList(body: Stmt[], st: State): Stmt[] {
  // bodies first: a run's blocks then hold their own rolled loops, alike in every block
  let inner = body.map((s) => {
    const bs = bodiesOf(s);
    if (!bs.length) return s;
    const nb = bs.map((b) => rollList(b, st));
    return nb.every((b, i) => b === bs[i]) ? s : withParts(s, exprsOf(s), nb);
  });
  if (inner.every((s, i) => s === body[i])) inner = body;
  if (inner.length < 4) return inner;
  const l = listOf(inner);
  const sk = l.desc.map((d) => d.sk);
  const out: Stmt[] = [];
  let i = 0, rolled = false;
  while (i < inner.length) {
    let best: Run | undefined;
    for (let p = 1; p <= MAX_PERIOD && i + 2 * p <= inner.length; p++) {
      if (sk[i + p] !== sk[i] || (best && p * (Math.floor((inner.length - i) / p) - 1) <= best.period * (best.count - 1))) continue;
      if (!blockMatches(l, i, p, 1, undefined)) continue; // cheap test before the one with constants
      const run = runAt(l, i, p, st);
      if (run && (!best || run.period * (run.count - 1) > best.period * (best.count - 1))) best = run;
    }
    if (!best) {
      out.push(inner[i++]);
      continue;
    }
    const r: Var = { name: `$roll${st.names.n++}`, t: "u32" };
    const loopBody = rollList(rolledBody(inner, best, r), st);
    out.push({ k: "for", v: r, start: { k: "const", t: "u32", v: 0 }, end: { k: "const", t: "u32", v: best.count }, step: 1, unroll: 1, body: loopBody });
    st.changed = true;
    rolled = true;
    i += best.period * best.count;
  }
  return rolled ? out : inner;
}
