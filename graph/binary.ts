// The binary elementwise ops, one record each: what the type rule accepts, the oracle's function (and its
// integer variant where integers differ), and the device error graph/tolerance.ts allows. graph/ops/elementwise.ts
// (their op records: type rule, docs, oracle) and graph/tolerance.ts (own error) read their binary facts from here;
// how an input's error propagates through each op stays in tolerance.ts, next to the other propagation rules.
import type { Allowance } from "./unary.ts";

export interface BinaryRecord {
  /** What it computes (graph/ops.ts OP_DOC). */
  doc: string;
  /** The operands it takes (both the same dtype): a float type, bool or integers, or any number type. */
  input: "float" | "logical" | "number";
  /** The oracle on float operands (in double, stored in the node's dtype), and on integer or bool ones. */
  f: (a: number, b: number) => number;
  /** The integer version, where it differs (wrapping, truncating, x / 0 = 0). */
  int?: (a: number, b: number) => number;
  /** The device's own error on floats; absent: exact. */
  allow?: Allowance;
}

const RECORDS = {
  add: { doc: "a+b", input: "number", f: (a: number, b: number): number => a + b, allow: { rel: 2 } },
  sub: { doc: "a-b", input: "number", f: (a: number, b: number): number => a - b, allow: { rel: 2 } },
  mul: { doc: "a*b", input: "number", f: (a: number, b: number): number => a * b, int: Math.imul, allow: { rel: 2 } },
  div: {
    doc: "a/b (ints: truncating, x/0 = 0)", input: "number", f: (a: number, b: number): number => a / b,
    int: (a: number, b: number): number => (b === 0 ? 0 : Math.trunc(a / b)), allow: { rel: 4 },
  },
  mod: { doc: "a%b, sign of a (ints: x%0 = 0)", input: "number", f: (a: number, b: number): number => a % b, int: (a: number, b: number): number => (b === 0 ? 0 : a % b) },
  max: { doc: "max (NaN wins; +0 > -0)", input: "number", f: Math.max },
  min: { doc: "min (NaN wins; -0 < +0)", input: "number", f: Math.min },
  pow: { doc: "a^b", input: "float", f: Math.pow, allow: { rel: 8, arg: 2 } },
  and: { doc: "a&b (bool, ints)", input: "logical", f: (a: number, b: number): number => a & b },
  or: { doc: "a|b (bool, ints)", input: "logical", f: (a: number, b: number): number => a | b },
} satisfies Record<string, BinaryRecord>;

export const BINARY_OPS: Record<keyof typeof RECORDS, BinaryRecord> = RECORDS;
