// The unary elementwise ops, one record each: what the type rule accepts, the oracle's function, and the
// device error graph/tolerance.ts allows. graph/ops/elementwise.ts (their op records: type rule, docs, oracle) and
// graph/tolerance.ts (bounds) read their unary facts from here, so a new unary op is its record here (graph/ir.ts
// UnaryOp is these names) and its IR op in kernels/lib/elementwise.ts.

/** A device's own error per elementwise op, beyond what its inputs carry (graph/tolerance.ts ownError). */
export interface Allowance {
  /** times u·|result| */
  rel: number;
  /** times u (absolute) */
  abs?: number;
  /** times u·|argument| (·|result| for exp and pow, absolute for sin and cos) */
  arg?: number;
}

export interface UnaryRecord {
  /** What it computes (graph/ops.ts OP_DOC). */
  doc: string;
  /** The input it takes: bool (not), a float type, or any number type (bool refused). */
  input: "bool" | "float" | "number";
  /** The oracle: the function in double, which the oracle stores in the node's dtype (rounding once). */
  f: (x: number) => number;
  /** The device's own error; absent: exact. */
  allow?: Allowance;
  /** A pole or domain edge at 0: an input interval reaching it gives an unbounded result. */
  poleAtZero?: true;
}

const RECORDS = {
  neg: { doc: "-x", input: "number", f: (x: number): number => -x },
  abs: { doc: "|x|", input: "number", f: Math.abs },
  exp: { doc: "e^x", input: "float", f: Math.exp, allow: { rel: 4, arg: 2 } },
  log: { doc: "ln x", input: "float", f: Math.log, allow: { rel: 4, abs: 4 }, poleAtZero: true },
  sqrt: { doc: "√x", input: "float", f: Math.sqrt, allow: { rel: 4 }, poleAtZero: true },
  rsqrt: { doc: "1/√x (one rounding)", input: "float", f: (x: number): number => 1 / Math.sqrt(x), allow: { rel: 4 }, poleAtZero: true },
  recip: { doc: "1/x", input: "float", f: (x: number): number => 1 / x, allow: { rel: 4 }, poleAtZero: true },
  sin: { doc: "sin x", input: "float", f: Math.sin, allow: { rel: 0, abs: 4, arg: 2 } },
  cos: { doc: "cos x", input: "float", f: Math.cos, allow: { rel: 0, abs: 4, arg: 2 } },
  tanh: { doc: "tanh x", input: "float", f: Math.tanh, allow: { rel: 4, abs: 4 } },
  floor: { doc: "⌊x⌋", input: "float", f: Math.floor },
  not: { doc: "!x (bool)", input: "bool", f: (x: number): number => (x ? 0 : 1) },
} satisfies Record<string, UnaryRecord>;

export const UNARY_OPS: Record<keyof typeof RECORDS, UnaryRecord> = RECORDS;
