// Constant folding and identity removal, both bit-exact by construction:
//   * a non-leaf node whose inputs are all literals or iotas, with at most FOLD_LIMIT elements, becomes a literal
//     holding the oracle's own result for it (a splat when every element has the same bits and is not NaN);
//   * movement and casts that change nothing (reshape or broadcast to the same shape, identity permute, full
//     slice, one-input concat, cast to the same dtype) are replaced by their input; reshape of reshape and
//     permute of permute collapse into one; select on a splat condition becomes the chosen branch.
import { bf16ToF32, f16ToF32, type Storage } from "../dtype.ts";
import { evaluate } from "../eval.ts";
import { type Graph, type Node, numel, sameShape } from "../ir.ts";
import { COMPOSITE, LEAF } from "../ops.ts";
import { isCollective } from "../collective.ts";
import { runPrimitive } from "../eval_ops.ts";
import { identity, rewrite } from "./rewrite.ts";

/** Largest result (in elements) folded into a literal. */
export const FOLD_LIMIT = 1 << 16;

function bitsEqual(s: Storage): boolean {
  if (s.length === 0) return true;
  const u = s instanceof Float32Array ? new Uint32Array(s.buffer, s.byteOffset, s.length) : s;
  for (let i = 1; i < u.length; i++) if (u[i] !== u[0]) return false;
  return !(s instanceof Float32Array && s[0] !== s[0]);
}

function literalOf(n: Node, s: Storage): Omit<Node, "id"> {
  const v = s.length === 0 ? 0 : n.dtype === "f16" ? f16ToF32(s[0]) : n.dtype === "bf16" ? bf16ToF32(s[0]) : s[0];
  // A NaN splat would be refilled with the canonical NaN, losing its payload: keep NaNs as data.
  const attrs: Node["attrs"] = bitsEqual(s) && v === v ? { value: v } : { data: s.slice() };
  return { op: "literal", dtype: n.dtype, shape: [...n.shape], inputs: [], attrs, label: n.label };
}


// The oracle's value of `n` given its (literal or iota) inputs: its kernel, or for a composite a one-node graph.
function compute(ins: Node[], n: Node): Storage {
  if (!COMPOSITE.has(n.op)) return runPrimitive(n, ins, ins.map((x) => runPrimitive(x, [], [])));
  const nodes: Node[] = ins.map((x, k) => ({ ...x, id: k, inputs: [] }));
  nodes.push({ ...n, id: nodes.length, inputs: n.inputs.map((_, k) => k) });
  return evaluate({ nodes, outputs: { y: nodes.length - 1 }, states: {} }).output.y;
}

const isConstant = (n: Node) => n.op === "literal" || n.op === "iota";

export function fold(g: Graph): Graph {
  const alias = identity(g.nodes.length);
  const replace = new Map<number, Omit<Node, "id">>();
  const body = (i: number): Node => {
    const r = replace.get(i);
    return r ? { ...r, id: i } : g.nodes[i];
  };
  let changed = false;
  for (const n0 of g.nodes) {
    if (LEAF.has(n0.op) || isCollective(n0.op)) continue; // a collective's value depends on the other ranks
    const n: Node = { ...n0, inputs: n0.inputs.map((i) => resolve(alias, i)) };
    const ins = n.inputs.map(body);
    const same = (i: number) => {
      alias[n.id] = n.inputs[i];
      changed = true;
    };
    const x = ins[0];
    switch (n.op) {
      case "reshape":
        if (sameShape(x.shape, n.shape)) { same(0); continue; }
        if (x.op === "reshape") {
          replace.set(n.id, { ...n, inputs: [x.inputs[0]] });
          changed = true;
          continue;
        }
        break;
      case "broadcast":
        if (sameShape(x.shape, n.shape)) { same(0); continue; }
        break;
      case "permute": {
        const p = n.attrs.perm!;
        if (p.every((v, i) => v === i)) { same(0); continue; }
        if (x.op === "permute") {
          const q = x.attrs.perm!;
          replace.set(n.id, { ...n, inputs: [x.inputs[0]], attrs: { perm: p.map((i) => q[i]) } });
          changed = true;
          continue;
        }
        break;
      }
      case "slice":
        if (sameShape(x.shape, n.shape)) { same(0); continue; }
        break;
      case "concat":
        if (ins.length === 1) { same(0); continue; }
        break;
      case "cast":
        if (x.dtype === n.dtype) { same(0); continue; }
        break;
      case "select":
        if (x.op === "literal" && x.attrs.data === undefined) { same(x.attrs.value ? 1 : 2); continue; }
        break;
    }
    if (ins.every(isConstant) && numel(n.shape) <= FOLD_LIMIT) {
      replace.set(n.id, literalOf(n, compute(ins, n)));
      changed = true;
      continue;
    }
  }
  if (!changed) return g;
  return rewrite(g, alias, undefined, replace);
}

function resolve(alias: Int32Array, i: number): number {
  while (alias[i] !== i) i = alias[i];
  return i;
}
