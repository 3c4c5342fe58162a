// The WGSL renderer's operators (wgsl.ts): IR casts, unary and binary ops and shuffles as WGSL with the IR's numerics
// (see wgsl.ts's header: integer x/0 gives 0, saturating float->int, NaN-propagating max/min, f16 rounded once),
// calling wgsl_math.ts helpers and per-kernel helper functions where WGSL's own operator differs.
import type { CType, Expr, Kernel } from "../ir.ts";
import { KernelError } from "../ir.ts";
import type { StorageHost } from "./wgsl_storage.ts";

const ZERO: Record<CType, string> = { f32: "0.0f", f16: "0.0h", i32: "0i", u32: "0u", bool: "false" };
const ONE: Record<CType, string> = { f32: "1.0f", f16: "1.0h", i32: "1i", u32: "1u", bool: "true" };

type Helpers = Pick<StorageHost, "need" | "fn">;
/** What the operators need from the renderer: its kernel and options, helpers, and sub-expressions rendered. */
export interface OpsHost extends Helpers {
  readonly k: Kernel;
  readonly opts: { dot4?: boolean };
  ex(e: Expr): string;
  /** An element index (any integer expression) as u32. */
  idx(e: Expr): string;
  /** The kernel calls dot4I8Packed (its module then requires the language feature). */
  useDot4(): void;
}

/** Converts expression x of type from to type t with the IR's (and the JS renderer's) semantics. */
export function conv(h: Helpers, x: string, from: CType, t: CType): string {
  if (from === t) return x;
  if (t === "bool") return `(${x} != ${ZERO[from]})`; // a float's NaN test: decompose()
  if (from === "bool") return `select(${ZERO[t]}, ${ONE[t]}, ${x})`;
  const fromF = from === "f32" || from === "f16";
  switch (t) {
    case "f32": return `f32(${x})`;
    case "f16": return `${toF16(h)}(${fromF ? x : `f32(${x})`})`; // |int| < 2^24 is exact in f32, larger is inf either way
    case "i32":
      if (fromF) return `${h.need("p_f2i")}(${from === "f16" ? `f32(${x})` : x})`;
      return `bitcast<i32>(${x})`;
    case "u32":
      if (fromF) return `${h.need("p_f2u")}(${from === "f16" ? `f32(${x})` : x})`;
      return `bitcast<u32>(${x})`;
  }
}

/**
 * f32 -> f16 rounded to nearest even in integer ops, then made an f16 exactly. WGSL's own f16(x) rounds
 * once, but NVIDIA's compiler drops a round trip f32(f16(x)) altogether (f16(70000) came back as 70000,
 * 65519 stayed 65519): integer ops are opaque to it.
 */
function toF16(h: Helpers): string {
  const f2h = h.need("p_f2h");
  return h.fn("p_tof16", () => `fn p_tof16(x: f32) -> f16 { return f16(unpack2x16float(${f2h}(x)).x); }`);
}

export function shuffle(h: OpsHost, mode: "xor" | "idx" | "down", t: CType, a: Expr, lane: Expr): string {
  const st = t === "bool" ? "u32" : t;
  const name = `p_shf_${mode}_${st}`;
  h.fn(name, () => {
    const op = mode === "xor" ? "subgroupShuffleXor" : mode === "idx" ? "subgroupShuffle" : "subgroupShuffleDown";
    const src = mode === "xor" ? "(p_lane ^ l)" : mode === "idx" ? "l" : "(p_lane + l)";
    // The last subgroup of a workgroup that is no multiple of the size holds only the invocations left (its
    // other lanes are inactive: reading one is indeterminate, NVIDIA gives 0), so they count as past the end.
    // Subgroup sizes are powers of two up to 128, so a multiple of 128 never has such a subgroup.
    const n = partialSubgroup(h.k) ? "p_sgn" : "p_sgsize";
    return `fn ${name}(x: ${st}, l: u32) -> ${st} { let r = ${op}(x, l); return select(x, r, ${src} < ${n}); }`;
  });
  const x = h.ex(a), l = h.idx(lane);
  return t === "bool" ? `(${name}(select(0u, 1u, ${x}), ${l}) != 0u)` : `${name}(${x}, ${l})`;
}

/** The workgroup's last subgroup may be partial: its size is no multiple of the largest subgroup size, 128. */
export function partialSubgroup(k: Kernel): boolean {
  const [wx, wy, wz] = k.workgroup;
  return (wx * wy * wz) % 128 !== 0;
}

export function unary(h: OpsHost, op: string, t: CType, a: Expr): string {
  const x = h.ex(a);
  const at = a.t;
  switch (op) {
    case "neg": return t === "u32" ? `(0u - ${x})` : `(-${x})`;
    // abs of a u32 is the value itself; saying so keeps it off backends that translate abs(u32) as signed (wgpu GL).
    case "abs": return t === "u32" ? x : `abs(${x})`;
    case "exp2": return `exp2(${x})`;
    case "sqrt": return `sqrt(${x})`;
    case "rsqrt": return `inverseSqrt(${x})`;
    case "recip": return `(${ONE[t]} / ${x})`;
    case "floor": return `floor(${x})`;
    case "ceil": return `ceil(${x})`;
    case "not": return t === "bool" ? `(!${x})` : `(~${x})`;
    case "isfinite": return `${h.need("p_isfinite")}(${at === "f16" ? `f32(${x})` : x})`;
    case "isnan": return `${h.need("p_isnan")}(${at === "f16" ? `f32(${x})` : x})`;
    case "f16bits": return `unpack2x16float(${x}).x`;
    case "bf16bits": return `bitcast<f32>(${x} << 16u)`;
  }
  throw new KernelError(`${h.k.name}: unknown unary op ${op}`);
}

export function binary(h: OpsHost, op: string, t: CType, ea: Expr, eb: Expr): string {
  let a = h.ex(ea), b = h.ex(eb);
  const at = ea.t;
  const CMP: Record<string, string> = { lt: "<", le: "<=", gt: ">", ge: ">=", eq: "==", ne: "!=" };
  if (op in CMP) {
    if (at === "bool" && op !== "eq" && op !== "ne") {
      a = conv(h, a, "bool", "u32");
      b = conv(h, b, "bool", "u32");
    }
    return `(${a} ${CMP[op]} ${b})`;
  }
  if (at === "bool") {
    switch (op) {
      case "and": case "min": return `(${a} && ${b})`;
      case "or": case "max": return `(${a} || ${b})`;
      case "xor": return `(${a} != ${b})`;
    }
    throw new KernelError(`${h.k.name}: ${op} on bool`);
  }
  switch (op) {
    case "dot4":
      if (!h.opts.dot4) throw new KernelError(`${h.k.name}: dot4 reached the renderer without dot4I8Packed`);
      h.useDot4();
      return `dot4I8Packed(${a}, ${b})`;
    case "add": return `(${a} + ${b})`;
    case "sub": return `(${a} - ${b})`;
    case "mul": return `(${a} * ${b})`;
    case "max": case "min":
      if (t === "f32" || t === "f16") return `${fmax(h, op, t)}(${a}, ${b})`;
      return `${op}(${a}, ${b})`;
    case "pow": return `pow(${a}, ${b})`;
    case "and": return `(${a} & ${b})`;
    case "or": return `(${a} | ${b})`;
    case "xor": return `(${a} ^ ${b})`;
    case "div": case "mod": {
      const sym = op === "div" ? "/" : "%";
      if (t === "f32" || t === "f16") return `(${a} ${sym} ${b})`;
      if (t === "u32" && eb.k === "const" && eb.v !== 0) return `(${a} ${sym} ${b})`;
      return `${h.need(`p_${op}${t === "i32" ? "i" : "u"}`)}(${a}, ${b})`;
    }
    case "shl": case "shr": {
      const sym = op === "shl" ? "<<" : ">>";
      if (eb.k === "const") return `(${a} ${sym} ${(eb.v & 31) >>> 0}u)`;
      return `(${a} ${sym} (${eb.t === "u32" ? b : `bitcast<u32>(${b})`} & 31u))`;
    }
  }
  throw new KernelError(`${h.k.name}: ${op} on ${t}`);
}

/**
 * NaN-propagating float max/min (WGSL's return the other operand, JS's Math.max returns NaN), as a helper
 * function: decomp/arith.ts's nanMinMax would repeat nested operands in the text (see its Needs).
 */
function fmax(h: Helpers, op: "max" | "min", t: CType): string {
  // NaN tests on the bits: Mesa's NIR may fold a float `a == a` to true (it treats WGSL float ops as inexact).
  const nan = h.need("p_isnan");
  const arg = (v: string) => t === "f16" ? `f32(${v})` : v;
  return h.fn(`p_${op}${t}`, () =>
    `fn p_${op}${t}(a: ${t}, b: ${t}) -> ${t} { return select(${op}(a, b), a + b, ${nan}(${arg("a")}) || ${nan}(${arg("b")})); }`);
}
