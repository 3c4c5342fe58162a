// Common-subexpression elimination: a node with the same op, type, attributes and inputs as an earlier node is
// replaced by it. Every op is a pure function of its inputs (State reads are one node per buffer), so the
// oracle's results are unchanged bit for bit. Inputs of commutative ops are compared as a set.
import type { Graph, Node } from "../ir.ts";
import { COMMUTATIVE } from "../ops.ts";
import { identity, rewrite } from "./rewrite.ts";

// Numbers keyed by their exact value: -0 and NaN stay distinct from 0 and null.
function num(x: number): string {
  return Object.is(x, -0) ? "-0" : String(x);
}

/** A string equal for equal attribute values (typed arrays by their elements' bits). */
export function attrKey(v: unknown): string {
  if (v === undefined) return "u";
  if (typeof v === "number") return num(v);
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "boolean" || v === null) return String(v);
  if (ArrayBuffer.isView(v)) {
    const b = new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
    let s = `${v.constructor.name}:`;
    for (let i = 0; i < b.length; i++) s += b[i].toString(16).padStart(2, "0");
    return s;
  }
  if (Array.isArray(v)) return `[${v.map(attrKey).join(",")}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o).filter((k) => o[k] !== undefined).sort().map((k) => `${k}:${attrKey(o[k])}`).join(",")}}`;
}

function nodeKey(n: Node, inputs: number[]): string {
  const ins = COMMUTATIVE.has(n.op) ? [...inputs].sort((a, b) => a - b) : inputs;
  return `${n.op}|${n.dtype}|${n.shape.join(",")}|${ins.join(",")}|${attrKey(n.attrs)}`;
}

export function cse(g: Graph): Graph {
  const alias = identity(g.nodes.length);
  const seen = new Map<string, number>();
  let changed = false;
  for (const n of g.nodes) {
    const key = nodeKey(n, n.inputs.map((i) => alias[i]));
    const prev = seen.get(key);
    if (prev === undefined) seen.set(key, n.id);
    else {
      alias[n.id] = prev;
      changed = true;
    }
  }
  return changed ? rewrite(g, alias) : g;
}
