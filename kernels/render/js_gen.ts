// The JavaScript code generator behind js.ts: statements and expressions of a kernel body as JS source lines,
// in either code shape (scalar: plain locals; simt: per-lane arrays under the active mask, subgroup ops
// through per-statement temporaries). It records what the body needs (typed-array views, variables,
// factory-level temporaries) for js.ts to declare around it. The semantics (rounding, wrapping, out-of-range
// results) are stated at the top of js.ts.
import type { Buffer, CoopMat, CType, EType, Expr, Kernel, Stmt, Var } from "../ir.ts";
import { KernelError } from "../ir.ts";
import { fold } from "../decomp/fold.ts";

/** The typed-array class a view of an element type is. */
export type ViewClass = "Float32Array" | "Uint16Array" | "Int16Array" | "Int32Array" | "Uint32Array" | "Int8Array" | "Uint8Array";
const CLASS: Record<EType, ViewClass> = {
  f32: "Float32Array", f16: "Uint16Array", bf16: "Uint16Array", u16: "Uint16Array", i16: "Int16Array",
  i32: "Int32Array", u32: "Uint32Array", i8: "Int8Array", u8: "Uint8Array",
};
/** The typed array a per-lane value of a type lives in (simt). */
export const LANE_ARRAY: Record<CType, string> = {
  f32: "Float32Array", f16: "Float32Array", i32: "Int32Array", u32: "Uint32Array", bool: "Uint8Array",
};

// V8 inlines `Math.fround` read from the global; JavaScriptCore optimizes a local alias better.
const FR = "Bun" in globalThis ? "fr" : "Math.fround";

function lit(v: number, t: CType): string {
  if (t === "bool") return v ? "true" : "false";
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "Infinity";
  if (v === -Infinity) return "(-Infinity)";
  if (Object.is(v, -0)) return "(-0)";
  return v < 0 ? `(${v})` : String(v);
}

/** Does a statement list contain a `return` (anywhere inside)? */
function hasReturn(body: Stmt[]): boolean {
  for (const s of body) {
    if (s.k === "return") return true;
    if (s.k === "for" && hasReturn(s.body)) return true;
    if (s.k === "if" && (hasReturn(s.then) || hasReturn(s.else))) return true;
  }
  return false;
}

/** Renders one kernel body: `block` appends its lines to `out`. */
export class Gen {
  readonly out: string[] = [];
  readonly head: string[] = []; // factory-level declarations (lane arrays, masks, temporaries)
  ind = 2;
  private ntmp = 0;
  private readonly views = new Map<string, { binding: number; cls: ViewClass; name: string }>();
  private readonly vars = new Map<string, CType>();
  private pre: string[] = [];
  readonly wgSize: number;

  constructor(readonly k: Kernel, readonly simt: boolean, readonly sg: number, readonly debug: boolean) {
    this.wgSize = k.workgroup[0] * k.workgroup[1] * k.workgroup[2];
  }

  line(s: string): void {
    this.out.push(" ".repeat(this.ind) + s);
  }
  tmp(p = "t"): string {
    return `${p}${this.ntmp++}`;
  }
  view(buf: Buffer, v: EType): string {
    const cls = CLASS[v];
    const key = `${buf.binding}:${cls}`;
    let w = this.views.get(key);
    if (!w) {
      w = { binding: buf.binding, cls, name: `b${buf.binding}_${cls.replace("Array", "").toLowerCase()}` };
      this.views.set(key, w);
    }
    return w.name;
  }
  viewList(): { binding: number; cls: ViewClass; name: string }[] {
    return [...this.views.values()];
  }
  varName(v: Var): string {
    const t = this.vars.get(v.name);
    if (t !== undefined && t !== v.t) throw new KernelError(`${this.k.name}: variable ${v.name} used as ${t} and ${v.t}`);
    this.vars.set(v.name, v.t);
    return `_${v.name}`;
  }
  varDecls(): [string, CType][] {
    return [...this.vars.entries()].map(([n, t]) => [`_${n}`, t]);
  }

  // ---- expressions -----------------------------------------------------------------------------------
  private at(name: string): string {
    return this.simt ? `${name}[l]` : name;
  }
  private index(arr: string, idx: string, align = 1): string {
    if (!this.debug) return `${arr}[${idx}]`;
    return `${arr}[ck(${idx}, ${arr}.length, ${JSON.stringify(arr)}, ${align})]`;
  }
  private builtin(b: string): string {
    const [wx, wy] = this.k.workgroup;
    const lin = this.simt ? "LIN[l]" : this.linear();
    switch (b) {
      case "lid.x": return this.simt ? "LX[l]" : "lx";
      case "lid.y": return this.simt ? "LY[l]" : "ly";
      case "lid.z": return this.simt ? "LZ[l]" : "lz";
      case "wgid.x": return "wx";
      case "wgid.y": return "wy";
      case "wgid.z": return "wz";
      case "nwg.x": return "NX";
      case "nwg.y": return "NY";
      case "nwg.z": return "NZ";
      case "gid.x": return this.k.workgroup[0] === 1 ? "wx" : `(wx * ${wx} + ${this.builtin("lid.x")})`;
      case "gid.y": return this.k.workgroup[1] === 1 ? "wy" : `(wy * ${wy} + ${this.builtin("lid.y")})`;
      case "gid.z": return this.k.workgroup[2] === 1 ? "wz" : `(wz * ${this.k.workgroup[2]} + ${this.builtin("lid.z")})`;
      case "lane": return this.sg === 1 ? "0" : `(${lin} % ${this.sg})`;
      case "sgsize": return String(this.sg);
      case "sgid": return this.sg === 1 ? lin : `((${lin} / ${this.sg}) | 0)`;
    }
    throw new KernelError(`${this.k.name}: unknown builtin ${b}`);
  }
  private linear(): string {
    const [wx, wy, wz] = this.k.workgroup;
    const parts = ["lx"];
    if (wy > 1) parts.push(`ly * ${wx}`);
    if (wz > 1) parts.push(`lz * ${wx * wy}`);
    return parts.length === 1 ? "lx" : `(${parts.join(" + ")})`;
  }

  private round(t: CType, s: string): string {
    if (t === "f32") return `${FR}(${s})`;
    if (t === "f16") return `h16(${s})`;
    if (t === "i32") return `((${s}) | 0)`;
    if (t === "u32") return `((${s}) >>> 0)`;
    return s;
  }

  ex(e0: Expr): string {
    const e = fold(e0);
    switch (e.k) {
      case "const": return lit(e.v, e.t);
      case "var": return this.at(this.varName(e.v));
      case "builtin": return this.builtin(e.b);
      case "un": return this.unary(e.op, e.t, e.a);
      case "bin": return this.binary(e.op, e.t, e.a, e.b);
      case "fma": return this.round(e.t, `${this.ex(e.a)} * ${this.ex(e.b)} + ${this.ex(e.c)}`);
      case "select": return `(${this.ex(e.c)} ? ${this.ex(e.a)} : ${this.ex(e.b)})`;
      case "cast": return this.cast(e.a, e.t);
      case "bitcast": return this.bitcast(e.a, e.t);
      case "load": return this.load(e.buf, e.view, this.ex(e.index));
      case "sload": {
        const s = this.index(`S_${e.mem.name}`, this.ex(e.index));
        return e.t === "bool" ? `(${s} !== 0)` : s;
      }
      case "subgroup": return this.subgroup(e.op, e.t, e.a);
      case "pack2": return `pack2(${e.ab === "bf16"}, ${this.ex(e.a)}, ${this.ex(e.b)})`;
      case "shuffle": return this.shuffle(e.mode, e.t, e.a, e.lane);
    }
  }
  load(buf: Buffer, view: EType, idx: string): string {
    const s = this.index(this.view(buf, view), idx);
    if (view === "f16") return `H2F[${s}]`;
    if (view === "bf16") return `BF2F[${s}]`;
    return s;
  }
  storeValue(view: EType, v: string, t: CType): string {
    if (view === "f16") return `f2h(${v})`;
    if (view === "bf16") return `f2bf(${v})`;
    if (t === "bool") return `(${v} ? 1 : 0)`;
    return v;
  }

  private unary(op: string, t: CType, a: Expr): string {
    const x = this.ex(a);
    const isF = t === "f32" || t === "f16";
    switch (op) {
      case "neg": return isF ? `(-${x})` : t === "i32" ? `((-${x}) | 0)` : `((-${x}) >>> 0)`;
      case "abs": return isF ? `Math.abs(${x})` : t === "i32" ? `(Math.abs(${x}) | 0)` : x;
      case "exp": return this.round(t, `Math.exp(${x})`);
      case "exp2": return this.round(t, `Math.pow(2, ${x})`);
      case "log": return this.round(t, `Math.log(${x})`);
      case "log2": return this.round(t, `Math.log2(${x})`);
      case "sqrt": return this.round(t, `Math.sqrt(${x})`);
      case "rsqrt": return this.round(t, `1 / Math.sqrt(${x})`);
      case "recip": return this.round(t, `1 / ${x}`);
      case "sin": return this.round(t, `Math.sin(${x})`);
      case "cos": return this.round(t, `Math.cos(${x})`);
      case "tanh": return this.round(t, `Math.tanh(${x})`);
      case "floor": return `Math.floor(${x})`;
      case "ceil": return `Math.ceil(${x})`;
      case "not": return t === "bool" ? `(!${x})` : t === "i32" ? `(~${x})` : `((~${x}) >>> 0)`;
      case "isfinite": return `Number.isFinite(${x})`;
      case "isnan": return `Number.isNaN(${x})`;
      case "f16bits": return `H2F[(${x}) & 65535]`;
      case "bf16bits": return `BF2F[(${x}) & 65535]`;
    }
    throw new KernelError(`${this.k.name}: unknown unary op ${op}`);
  }

  private binary(op: string, t: CType, ea: Expr, eb: Expr): string {
    const a = this.ex(ea), b = this.ex(eb);
    const at = ea.t;
    switch (op) {
      case "lt": return `(${a} < ${b})`;
      case "le": return `(${a} <= ${b})`;
      case "gt": return `(${a} > ${b})`;
      case "ge": return `(${a} >= ${b})`;
      case "eq": return `(${a} === ${b})`;
      case "ne": return `(${a} !== ${b})`;
      case "max": return `Math.max(${a}, ${b})`;
      case "min": return `Math.min(${a}, ${b})`;
    }
    if (at === "bool") {
      switch (op) {
        case "and": return `(${a} && ${b})`;
        case "or": return `(${a} || ${b})`;
        case "xor": return `(${a} !== ${b})`;
      }
      throw new KernelError(`${this.k.name}: ${op} on bool`);
    }
    if (t === "f32" || t === "f16") {
      switch (op) {
        case "add": return this.round(t, `${a} + ${b}`);
        case "sub": return this.round(t, `${a} - ${b}`);
        case "mul": return this.round(t, `${a} * ${b}`);
        case "div": return this.round(t, `${a} / ${b}`);
        case "mod": return this.round(t, `${a} % ${b}`);
        case "pow": return this.round(t, `Math.pow(${a}, ${b})`);
      }
      throw new KernelError(`${this.k.name}: ${op} on ${t}`);
    }
    const w = t === "i32" ? "| 0" : ">>> 0";
    switch (op) {
      case "add": return `((${a} + ${b}) ${w})`;
      case "sub": return `((${a} - ${b}) ${w})`;
      case "mul": return `(Math.imul(${a}, ${b}) ${w})`;
      case "div": return `((${a} / ${b}) ${w})`;
      case "mod": return `((${a} % ${b}) ${w})`;
      case "and": return `((${a} & ${b}) ${w})`;
      case "or": return `((${a} | ${b}) ${w})`;
      case "xor": return `((${a} ^ ${b}) ${w})`;
      case "shl": return `((${a} << ${b}) ${w})`;
      case "shr": return t === "i32" ? `(${a} >> ${b})` : `(${a} >>> ${b})`;
      case "dot4": return `dot4(${a}, ${b})`;
    }
    throw new KernelError(`${this.k.name}: ${op} on ${t}`);
  }

  private cast(a: Expr, t: CType): string {
    const x = this.ex(a), from = a.t;
    if (from === t) return x;
    if (t === "bool") return from === "bool" ? x : `(${x} !== 0)`;
    if (from === "bool") return `(${x} ? 1 : 0)`;
    const fromF = from === "f32" || from === "f16";
    switch (t) {
      case "f32": return from === "f16" ? x : `${FR}(${x})`;
      case "f16": return `h16(${x})`;
      case "i32": return fromF ? `toI32(${x})` : `(${x} | 0)`;
      case "u32": return fromF ? `toU32(${x})` : `(${x} >>> 0)`;
    }
  }
  private bitcast(a: Expr, t: CType): string {
    const x = this.ex(a), from = a.t;
    if (from === t) return x;
    if (from === "f32") return t === "u32" ? `bitsU(${x})` : `bitsI(${x})`;
    if (t === "f32") return `fromBits(${x})`;
    return t === "u32" ? `(${x} >>> 0)` : `(${x} | 0)`;
  }

  // Subgroup ops. Scalar code only runs them with one lane per subgroup, where they are identities (a
  // shuffle from another lane reads out of range and, as documented, returns the caller's own value).
  private subgroup(op: string, t: CType, a: Expr): string {
    if (!this.simt) return this.ex(a);
    const m = this.mask;
    const src = this.tmp("tv"), dst = this.tmp("tv");
    this.head.push(`const ${src} = new ${LANE_ARRAY[t]}(N), ${dst} = new ${LANE_ARRAY[t]}(N);`);
    const x = this.ex(a);
    this.pre.push(`for (let l = 0; l < N; l++) ${src}[l] = ${m}[l] ? ${x} : 0;`);
    const comb = op === "max" ? `Math.max(acc, ${src}[l])` : op === "min" ? `Math.min(acc, ${src}[l])`
      : this.round(t, `acc + ${src}[l]`);
    this.pre.push(
      `for (let s = 0; s < N; s += ${this.sg}) { const e = Math.min(s + ${this.sg}, N); let acc = 0, has = false; ` +
        `for (let l = s; l < e; l++) if (${m}[l]) { acc = has ? ${comb} : ${src}[l]; has = true; } ` +
        `for (let l = s; l < e; l++) ${dst}[l] = acc; }`,
    );
    return t === "bool" ? `(${dst}[l] !== 0)` : `${dst}[l]`;
  }
  private shuffle(mode: string, t: CType, a: Expr, lane: Expr): string {
    if (!this.simt) return this.ex(a);
    const m = this.mask;
    const va = this.tmp("tv"), vl = this.tmp("tv"), dst = this.tmp("tv");
    this.head.push(`const ${va} = new ${LANE_ARRAY[t]}(N), ${vl} = new Uint32Array(N), ${dst} = new ${LANE_ARRAY[t]}(N);`);
    const x = this.ex(a), y = this.ex(lane);
    this.pre.push(`for (let l = 0; l < N; l++) if (${m}[l]) { ${va}[l] = ${x}; ${vl}[l] = ${y}; } else ${va}[l] = 0;`);
    const src = mode === "xor" ? `(LANE[l] ^ ${vl}[l])` : mode === "idx" ? `${vl}[l]` : `(LANE[l] + ${vl}[l])`;
    this.pre.push(
      `for (let l = 0; l < N; l++) if (${m}[l]) { const s = ${src}, b = l - LANE[l]; ` +
        `${dst}[l] = s < ${this.sg} && b + s < N ? ${va}[b + s] : ${va}[l]; }`,
    );
    return t === "bool" ? `(${dst}[l] !== 0)` : `${dst}[l]`;
  }

  // ---- statements ------------------------------------------------------------------------------------
  mask = "M0";

  /** Evaluates expressions for a statement, emitting any subgroup pre-phases first. */
  private exprs(es: Expr[]): string[] {
    this.pre = [];
    const r = es.map((e) => this.ex(e));
    for (const p of this.pre) this.line(p);
    this.pre = [];
    return r;
  }
  /** Emits `code` once per active lane (simt) or once (scalar). */
  private perLane(code: string): void {
    if (this.simt) this.line(`for (let l = 0; l < N; l++) if (${this.mask}[l]) { ${code} }`);
    else this.line(code);
  }

  block(body: Stmt[]): void {
    for (const s of body) this.stmt(s);
  }

  stmt(s: Stmt): void {
    switch (s.k) {
      case "let": case "assign": {
        const [e] = this.exprs([s.e]);
        this.perLane(`${this.at(this.varName(s.v))} = ${e};`);
        return;
      }
      case "store": {
        const [i, e] = this.exprs([s.index, s.e]);
        this.perLane(`${this.index(this.view(s.buf, s.view), i)} = ${this.storeValue(s.view, e, s.e.t)};`);
        return;
      }
      case "atomic": { // invocations run one at a time here: a plain read-modify-write is atomic
        const [i, e] = this.exprs([s.index, s.e]);
        const arr = this.view(s.buf, "u32"), op = s.op === "and" ? "&" : s.op === "or" ? "|" : "+";
        if (!s.dst) this.perLane(`${this.index(arr, i)} ${op}= ${e};`);
        else this.perLane(`{ const q = ${i}; ${this.at(this.varName(s.dst))} = ${this.index(arr, "q")}; ${this.index(arr, "q")} ${op}= ${e}; }`);
        return;
      }
      case "loadv": {
        const [i] = this.exprs([s.index]);
        const n = s.dst.length, arr = this.view(s.buf, s.view);
        const parts = [`const q = ${i};`];
        if (this.debug) parts.push(`ck(q, ${arr}.length - ${n - 1}, ${JSON.stringify(arr)}, ${n});`);
        s.dst.forEach((d, j) => parts.push(`${this.at(this.varName(d))} = ${this.load1(s.view, arr, `q + ${j}`)};`));
        this.perLane(`{ ${parts.join(" ")} }`);
        return;
      }
      case "storev": {
        const [i, ...es] = this.exprs([s.index, ...s.es]);
        const n = es.length, arr = this.view(s.buf, s.view);
        const parts = [`const q = ${i};`];
        if (this.debug) parts.push(`ck(q, ${arr}.length - ${n - 1}, ${JSON.stringify(arr)}, ${n});`);
        es.forEach((e, j) => parts.push(`${arr}[q + ${j}] = ${this.storeValue(s.view, e, s.es[j].t)};`));
        this.perLane(`{ ${parts.join(" ")} }`);
        return;
      }
      case "sstore": {
        const [i, e] = this.exprs([s.index, s.e]);
        this.perLane(`${this.index(`S_${s.mem.name}`, i)} = ${s.mem.t === "bool" ? `(${e} ? 1 : 0)` : e};`);
        return;
      }
      case "check": {
        const [c] = this.exprs([s.c]);
        this.perLane(`if (!${c}) fail(${s.code});`);
        return;
      }
      case "mma": {
        if (!this.simt || this.sg !== 32 || this.wgSize % 32 !== 0) {
          throw new KernelError(`${this.k.name}: mma needs whole 32-lane subgroups run in lockstep`);
        }
        const vals = this.exprs([...s.a, ...s.b, ...s.c]);
        const F = this.tmp("mf"), D = this.tmp("md");
        this.head.push(`const ${F} = new Float64Array(N * 10), ${D} = new Float64Array(N * 4);`);
        this.perLane(vals.map((v, j) => `${F}[l * 10 + ${j}] = ${v};`).join(" "));
        // the whole warp must take part (the IR's rule); a partial warp is a kernel bug, not a result
        this.line(`for (let w = 0; w < N; w += 32) { let n = 0; for (let l = w; l < w + 32; l++) n += ${this.mask}[l]; ` +
          `if (n === 0) continue; if (n !== 32) throw new Fault(K, 0, "mma reached by " + n + " of 32 lanes"); ` +
          `mma16816(${F}, w, ${s.ab === "bf16"}, ${D}); }`);
        this.perLane(s.d.map((d, j) => `${this.at(this.varName(d))} = ${D}[l * 4 + ${j}];`).join(" "));
        return;
      }
      case "cpasync": {
        const [si, i] = this.exprs([s.sindex, s.index]);
        const arr = this.view(s.buf, "u32"), S = `S_${s.mem.name}`;
        const parts = [`const q = ${i}, p = ${si};`];
        if (this.debug) parts.push(`ck(q, ${arr}.length - 3, ${JSON.stringify(arr)}, 4); ck(p, ${S}.length - 3, ${JSON.stringify(S)}, 4);`);
        parts.push(`CPQ.open.push(${S}, p, ${arr}[q], ${arr}[q + 1], ${arr}[q + 2], ${arr}[q + 3]);`);
        this.perLane(`{ ${parts.join(" ")} }`);
        return;
      }
      case "cpcommit":
        this.line(`CPQ.closed.push(CPQ.open); CPQ.open = [];`);
        return;
      case "cpwait":
        this.line(`cpWait(CPQ, ${s.pending});`);
        return;
      case "ldmatrix": {
        if (!this.simt || this.sg !== 32 || this.wgSize % 32 !== 0) {
          throw new KernelError(`${this.k.name}: ldmatrix needs whole 32-lane subgroups run in lockstep`);
        }
        const [i] = this.exprs([s.index]);
        const A = this.tmp("la"), D = this.tmp("ld");
        this.head.push(`const ${A} = new Uint32Array(N), ${D} = new Uint32Array(N * 4);`);
        this.perLane(`${A}[l] = ${i};`);
        this.line(`for (let w = 0; w < N; w += 32) { let n = 0; for (let l = w; l < w + 32; l++) n += ${this.mask}[l]; ` +
          `if (n === 0) continue; if (n !== 32) throw new Fault(K, 0, "ldmatrix reached by " + n + " of 32 lanes"); ` +
          `const e = ldsm(S_${s.mem.name}, ${A}, w, ${s.dst.length}, ${s.trans}, ${D}); if (e) throw new Fault(K, 0, e); }`);
        this.perLane(s.dst.map((d, j) => `${this.at(this.varName(d))} = ${D}[l * 4 + ${j}];`).join(" "));
        return;
      }
      case "wgmma": {
        if (!this.simt || this.sg !== 32 || this.wgSize % 128 !== 0) {
          throw new KernelError(`${this.k.name}: wgmma needs whole 128-invocation warpgroups of 32-lane subgroups in lockstep`);
        }
        const [ia, ib] = this.exprs([s.a, s.b]);
        const A = this.tmp("wa"), B = this.tmp("wb"), D = this.tmp("wd"), per = s.n / 2;
        this.head.push(`const ${A} = new Uint32Array(N), ${B} = new Uint32Array(N), ${D} = new Float64Array(N * ${per});`);
        this.perLane(`${A}[l] = ${ia}; ${B}[l] = ${ib}; ` + s.acc.map((v, j) => `${D}[l * ${per} + ${j}] = ${this.at(this.varName(v))};`).join(" "));
        this.line(`for (let w = 0; w < N; w += 128) { let n = 0; for (let l = w; l < w + 128; l++) n += ${this.mask}[l]; ` +
          `if (n === 0) continue; if (n !== 128) throw new Fault(K, 0, "wgmma reached by " + n + " of 128 invocations"); ` +
          `const e = wgmma(S_${s.mem.name}, ${A}, ${B}, w, ${s.n}, ${s.ab === "bf16"}, ${D}); if (e) throw new Fault(K, 0, e); }`);
        this.perLane(s.acc.map((v, j) => `${this.at(this.varName(v))} = ${D}[l * ${per} + ${j}];`).join(" "));
        return;
      }
      case "cmzero": case "cmload": case "cmmad": case "cmstore":
        return this.coop(s);
      // the JS device runs a wgmma when it is reached, so nothing is ever in flight or behind another proxy
      case "wgwait": case "asyncfence":
        return;
      case "barrier":
        if (this.simt && this.debug) this.line(`bar(${this.mask});`);
        return;
      case "return":
        if (this.simt) this.line(`for (let l = 0; l < N; l++) if (${this.mask}[l]) { R[l] = 1; ${this.mask}[l] = 0; }`);
        else this.line("return;");
        return;
      case "if":
        return this.simt ? this.ifSimt(s) : this.ifScalar(s);
      case "for":
        return this.simt ? this.forSimt(s) : this.forScalar(s);
    }
  }
  /** A cooperative-matrix statement: once per subgroup, which must be whole and all active (CoopStmt). */
  private coop(s: Extract<Stmt, { k: "cmzero" | "cmload" | "cmmad" | "cmstore" }>): void {
    const sg = this.sg;
    if (!this.simt || this.wgSize % sg !== 0) throw new KernelError(`${this.k.name}: cooperative matrices need whole subgroups run in lockstep`);
    const arr = (m: CoopMat) => {
      const C = `CM_${m.name}`;
      if (!this.coopDeclared.has(C)) {
        this.coopDeclared.add(C);
        this.head.push(`const ${C} = new Float64Array(${(this.wgSize / sg) * 256});`);
      }
      return C;
    };
    const at = `(w / ${sg}) * 256`;
    let I = "";
    if (s.k === "cmload" || s.k === "cmstore") {
      const [idx] = this.exprs([s.index]);
      I = this.tmp("ci");
      this.head.push(`const ${I} = new Uint32Array(N);`);
      this.perLane(`${I}[l] = ${idx};`);
    }
    const op = s.k === "cmzero" ? `${arr(s.acc)}.fill(0, ${at}, ${at} + 256); const e = "";`
      : s.k === "cmload" ? `const e = coopLoad(${"binding" in s.mem ? this.view(s.mem, "u32") : `S_${s.mem.name}`}, ${I}, w, ${sg}, ${s.stride}, ${s.dst.ab === "bf16"}, ${arr(s.dst)}, ${at});`
      : s.k === "cmmad" ? `coopMad(${arr(s.acc)}, ${at}, ${arr(s.a)}, ${at}, ${arr(s.b)}, ${at}); const e = "";`
      : `const e = coopStore(${arr(s.acc)}, ${at}, S_${s.mem.name}, ${I}, w, ${sg}, ${s.stride});`;
    this.line(`for (let w = 0; w < N; w += ${sg}) { let n = 0; for (let l = w; l < w + ${sg}; l++) n += ${this.mask}[l]; ` +
      `if (n === 0) continue; if (n !== ${sg}) throw new Fault(K, 0, "${s.k} reached by " + n + " of ${sg} lanes"); ${op} if (e) throw new Fault(K, 0, e); }`);
  }
  private readonly coopDeclared = new Set<string>();

  private load1(view: EType, arr: string, idx: string): string {
    if (view === "f16") return `H2F[${arr}[${idx}]]`;
    if (view === "bf16") return `BF2F[${arr}[${idx}]]`;
    return `${arr}[${idx}]`;
  }

  private ifScalar(s: Extract<Stmt, { k: "if" }>): void {
    const [c] = this.exprs([s.c]);
    this.line(`if (${c}) {`);
    this.ind += 2;
    this.block(s.then);
    this.ind -= 2;
    if (s.else.length) {
      this.line("} else {");
      this.ind += 2;
      this.block(s.else);
      this.ind -= 2;
    }
    this.line("}");
  }
  private forScalar(s: Extract<Stmt, { k: "for" }>): void {
    const [a] = this.exprs([s.start]);
    this.pre = [];
    const b = this.ex(s.end);
    const v = this.varName(s.v);
    this.line(`for (${v} = ${a}; ${v} < ${b}; ${v} += ${s.step}) {`);
    this.ind += 2;
    this.block(s.body);
    this.ind -= 2;
    this.line("}");
  }

  private newMask(): string {
    const m = this.tmp("mk");
    this.head.push(`const ${m} = new Uint8Array(N);`);
    return m;
  }
  private refresh(body: Stmt[][]): void {
    if (body.some(hasReturn)) this.line(`for (let l = 0; l < N; l++) if (R[l]) ${this.mask}[l] = 0;`);
  }
  private ifSimt(s: Extract<Stmt, { k: "if" }>): void {
    const [c] = this.exprs([s.c]);
    const m = this.mask, mt = this.newMask(), me = s.else.length ? this.newMask() : "";
    this.line("{");
    this.ind += 2;
    this.line("let nt = 0, ne = 0;");
    this.line(
      `for (let l = 0; l < N; l++) { if (${m}[l]) { if (${c}) { ${mt}[l] = 1; nt++; ${me ? `${me}[l] = 0; ` : ""}} ` +
        `else { ${mt}[l] = 0; ${me ? `${me}[l] = 1; ` : ""}ne++; } } else { ${mt}[l] = 0; ${me ? `${me}[l] = 0; ` : ""}} }`,
    );
    this.sub(mt, "nt", s.then);
    if (me) this.sub(me, "ne", s.else);
    this.ind -= 2;
    this.line("}");
    this.refresh([s.then, s.else]);
  }
  private sub(mask: string, count: string, body: Stmt[]): void {
    const outer = this.mask;
    this.line(`if (${count}) {`);
    this.ind += 2;
    this.mask = mask;
    this.block(body);
    this.mask = outer;
    this.ind -= 2;
    this.line("}");
  }
  private forSimt(s: Extract<Stmt, { k: "for" }>): void {
    const m = this.mask, ml = this.newMask();
    const v = this.varName(s.v);
    const [a] = this.exprs([s.start]);
    this.line(`for (let l = 0; l < N; l++) if (${m}[l]) { ${v}[l] = ${a}; ${ml}[l] = 1; } else ${ml}[l] = 0;`);
    this.line("for (;;) {");
    this.ind += 2;
    this.mask = ml;
    const [b] = this.exprs([s.end]);
    this.line(`let any = 0;`);
    this.line(`for (let l = 0; l < N; l++) if (${ml}[l]) { if (${v}[l] < ${b}) any = 1; else ${ml}[l] = 0; }`);
    this.line("if (!any) break;");
    this.block(s.body);
    this.refresh([s.body]);
    this.line(`for (let l = 0; l < N; l++) if (${ml}[l]) ${v}[l] += ${s.step};`);
    this.mask = m;
    this.ind -= 2;
    this.line("}");
    this.refresh([s.body]);
  }
}
