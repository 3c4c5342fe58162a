// The planner's fused units that gather several graph nodes into one kernel around a matmul or a norm: gemv
// units (batch-1 matmuls of one input with their norm before and epilogues after) and norm_rope units (per-head
// norms with their ropes and cache writes), and the scalar add of a norm weight (Gemma's 1 + w) that a norm
// kernel folds in. plan.ts decides where each runs and where its values live.
import { BLOCK, isFloat } from "./dtype.ts";
import { type Graph, type Node, numel, sameShape } from "./ir.ts";
import type { GemvPartPlan, NormRopePartPlan, Unit } from "./plan.ts";

/** Ops whose value is a view of their input's bytes (no kernel, no storage of their own). */
export const VIEW = new Set(["reshape"]);

/** The node whose bytes a value is: itself, or through views (VIEW) their source's. */
export function viewSource(nodes: readonly Node[], id: number): number {
  return VIEW.has(nodes[id].op) ? viewSource(nodes, nodes[id].inputs[0]) : id;
}

// ---- gemv units ------------------------------------------------------------------------------------------

/** Weight types a gemv reads: the float types and every block type (kernels/lib/dequant.ts decodes each). */
const GEMV_WEIGHTS = new Set<string>(["f32", "f16", "bf16", ...Object.keys(BLOCK)]);

/**
 * Finds gemv units: batch-1 matmuls (f32 x of numel K, a float or block const [N, K] weight) grouped by input (an
 * rmsnorm whose every use is such a matmul is folded: the group reads its input), weight dtype and K, each
 * with its epilogue chain. A unit runs where its last node is; it is kept only when nothing outside it reads
 * one of its nodes before that point (else its matmuls are left to the other units and planning repeats).
 */
export function planGemv(
  g: Graph,
  uses: number[][],
  single: (id: number) => boolean,
  inPlaceUpdate: (id: number) => boolean,
  outputNodes: Set<number>,
): { unit: Unit; nodes: number[]; at: number }[] {
  const nodes = g.nodes;
  const excluded = new Set<number>();
  const isCand = (m: number): boolean => {
    const mm = nodes[m];
    if (mm.op !== "matmul" || excluded.has(m) || mm.shape.length < 1) return false;
    const [x, w] = mm.inputs, xn = nodes[x], wn = nodes[w];
    return wn.op === "const" && wn.shape.length === 2 && GEMV_WEIGHTS.has(wn.dtype) && xn.dtype === "f32" &&
      numel(xn.shape) === wn.shape[1] && numel(mm.shape) === wn.shape[0];
  };
  for (;;) {
    // The input a candidate reads, with an rmsnorm folded when all its uses are candidates.
    const sourceOf = (m: number): { x: number; norm?: number } => {
      const x = nodes[m].inputs[0], xn = nodes[x];
      if (xn.op === "rmsnorm" && numel(xn.shape) === xn.shape[xn.shape.length - 1] && !outputNodes.has(x) &&
        uses[x].length > 0 && uses[x].every((u) => isCand(u) && nodes[u].inputs[0] === x)) return { x: xn.inputs[0], norm: x };
      return { x };
    };
    const keyOf = (m: number) => {
      const s = sourceOf(m), w = nodes[nodes[m].inputs[1]];
      return `${s.x}:${s.norm ?? ""}:${w.dtype}:${w.shape[1]}:${nodes[m].attrs.xq ? "xq" : ""}`;
    };
    const groups = new Map<string, { x: number; norm?: number; parts: GemvPartPlan[] }>();
    const taken = new Set<number>();
    const addPart = (m: number, p: GemvPartPlan) => {
      const key = keyOf(m);
      let grp = groups.get(key);
      if (!grp) groups.set(key, grp = { ...sourceOf(m), parts: [] });
      grp.parts.push(p);
    };
    for (const n of nodes) { // silu_mul(a, b) of two candidates of one key: a two-weight part
      if (n.op !== "silu_mul") continue;
      const [a, b] = n.inputs;
      if (a === b || !isCand(a) || !isCand(b) || !single(a) || !single(b) || keyOf(a) !== keyOf(b)) continue;
      if (!sameShape(nodes[a].shape, n.shape) || !sameShape(nodes[b].shape, n.shape) || n.dtype !== "f32") continue;
      taken.add(a).add(b);
      addPart(a, { matmuls: [a, b], act: n.id, out: n.id, nodes: [a, b, n.id] });
    }
    for (const n of nodes) { // mul(gelu(a), b) of two candidates of one key (GeGLU): the same part with gelu
      if (n.op !== "mul" || n.dtype !== "f32" || n.inputs[0] === n.inputs[1]) continue;
      const gi = n.inputs.findIndex((i) => nodes[i].op === "gelu");
      if (gi < 0) continue;
      const gn = nodes[n.inputs[gi]], a = gn.inputs[0], b = n.inputs[1 - gi];
      if (a === b || !single(gn.id) || taken.has(a) || taken.has(b) || !isCand(a) || !isCand(b) || !single(a) || !single(b) || keyOf(a) !== keyOf(b)) continue;
      if (!sameShape(nodes[a].shape, n.shape) || !sameShape(nodes[b].shape, n.shape)) continue;
      taken.add(a).add(b);
      addPart(a, { matmuls: [a, b], act: n.id, gelu: true, out: n.id, nodes: [a, b, gn.id, n.id] });
    }
    for (const n of nodes) if (isCand(n.id) && !taken.has(n.id)) addPart(n.id, gemvChain(g, n.id, uses, single, inPlaceUpdate));

    const out: { unit: Unit; nodes: number[]; at: number }[] = [];
    let failed = false;
    for (const grp of groups.values()) {
      const inside = new Set(grp.parts.flatMap((p) => p.nodes));
      // Everything outside that reads a node of the unit must run after it.
      const readEarly = (at: number) => [...inside].some((id) => uses[id].some((u) => !inside.has(u) && u <= at));
      let at = Math.max(...inside);
      // Else run it as soon as its inputs are ready: at its first own node after the last computed value it
      // reads (a q projection read by a per-head q norm, qwen3 and gemma3, sits before the v cache write).
      if (readEarly(at)) at = earliestAt(nodes, inside, grp.norm);
      const early = readEarly(at);
      if (early) {
        for (const p of grp.parts) for (const m of p.matmuls) excluded.add(m);
        failed = true;
        continue;
      }
      const all = grp.norm === undefined ? [...inside] : [...inside, grp.norm];
      out.push({ unit: { k: "gemv", x: grp.x, norm: grp.norm, parts: grp.parts }, nodes: all, at });
    }
    if (!failed) return out;
  }
}

/** A gemv unit's earliest position: its first node (or folded norm) after every computed value it reads. */
function earliestAt(nodes: readonly Node[], inside: Set<number>, norm: number | undefined): number {
  const own = norm === undefined ? [...inside] : [...inside, norm];
  let ready = -1;
  for (const id of own) {
    for (const i of nodes[id].inputs) {
      if (!inside.has(i) && i !== norm && !LEAVES.has(nodes[i].op)) ready = Math.max(ready, i);
    }
  }
  return Math.min(...own.filter((id) => id >= ready));
}
const LEAVES = new Set(["const", "slot", "state", "literal"]);

/** The epilogue chain of candidate matmul m (see GemvPartPlan). */
function gemvChain(
  g: Graph,
  m: number,
  uses: number[][],
  single: (id: number) => boolean,
  inPlaceUpdate: (id: number) => boolean,
): GemvPartPlan {
  const nodes = g.nodes;
  const N = numel(nodes[m].shape);
  const p: GemvPartPlan = { matmuls: [m], out: m, nodes: [m] };
  const next = (id: number): Node | undefined => (single(id) ? nodes[uses[id][0]] : undefined);
  let cur = m;
  const add = next(cur);
  if (add && add.op === "add" && add.dtype === "f32" && add.inputs[0] !== add.inputs[1]) {
    const r = add.inputs[0] === m ? add.inputs[1] : add.inputs[0], rn = nodes[r];
    const src = rn.op === "broadcast" && single(r) ? nodes[rn.inputs[0]] : rn;
    if (src.op === "const" && src.dtype === "f32" && numel(src.shape) === N && sameShape(add.shape, nodes[m].shape)) {
      p.bias = [src.id];
      p.nodes.push(...(src.id === r ? [add.id] : [r, add.id]));
      cur = p.out = add.id;
    } else if (rn.dtype === "f32" && sameShape(rn.shape, add.shape) && sameShape(add.shape, nodes[m].shape)) {
      p.residual = r;
      p.nodes.push(add.id);
      cur = p.out = add.id;
    }
  }
  if (p.residual !== undefined) return p;
  // A reshape to heads, then rope (one row; frequency factors are folded or divided before the unit), a float
  // cast, an in-place update at pos.
  const tail: number[] = [];
  let pos: number | undefined;
  let at = next(cur);
  if (at?.op === "reshape") {
    tail.push(at.id);
    const r = next(at.id);
    if (r?.op === "rope" && r.inputs[0] === at.id && r.shape[0] === 1 && numel(nodes[r.inputs[1]].shape) === 1) {
      p.rope = r.id;
      pos = r.inputs[1];
      p.nodes.push(...tail, r.id);
      tail.length = 0;
      cur = p.out = r.id;
      at = next(cur);
    } else at = r;
  }
  if (at?.op === "cast" && isFloat(at.dtype) && nodes[at.inputs[0]].dtype === "f32") {
    tail.push(at.id);
    at = next(at.id);
    if (at?.op === "reshape") {
      tail.push(at.id);
      at = next(at.id);
    }
  }
  if (at?.op === "dynamic_update_slice" && at.inputs[1] === (tail.length ? tail[tail.length - 1] : cur) && (at.attrs.axis ?? 0) === 0 &&
    inPlaceUpdate(at.id) && nodes[at.inputs[1]].shape[0] === 1 && numel(nodes[at.inputs[1]].shape) === N &&
    (pos === undefined || pos === at.inputs[2])) {
    p.update = at.id;
    const cast = tail.find((id) => nodes[id].op === "cast");
    if (cast !== undefined) p.cast = cast;
    p.nodes.push(...tail, at.id);
    p.out = at.id;
    return p;
  }
  // No update: a cast right after the dot (or rope) is still stored by the kernel.
  const cast = tail.length && nodes[tail[0]].op === "cast" ? tail[0] : undefined;
  if (cast !== undefined) {
    p.cast = cast;
    p.nodes.push(cast);
    p.out = cast;
  }
  return p;
}

/** [w, c] when `id` is add(w, c) of an f32 value w and a scalar f32 literal c (either order): Gemma's 1 + w. */
export function weightAddOf(g: Graph, id: number): [number, number] | undefined {
  const n = g.nodes[id];
  if (n.op !== "add" || n.dtype !== "f32") return undefined;
  for (const [w, c] of [[n.inputs[0], n.inputs[1]], [n.inputs[1], n.inputs[0]]]) {
    const cn = g.nodes[c];
    if (cn.op === "literal" && cn.attrs.data === undefined && cn.attrs.value !== undefined && cn.dtype === "f32" &&
      g.nodes[w].dtype === "f32" && sameShape(g.nodes[w].shape, n.shape)) return [w, cn.attrs.value];
  }
  return undefined;
}

// ---- norm_rope units -------------------------------------------------------------------------------------

/**
 * Finds norm_rope units: per-head rmsnorms (see NormRopePartPlan) grouped by the unit that produces their input
 * (the q/k projections' gemv), kept where they save a dispatch (two parts, or a part with a rope or cache write)
 * and nothing outside reads one of their nodes before the unit runs (at its last node).
 */
export function planNormRope(
  g: Graph,
  uses: number[][],
  single: (id: number) => boolean,
  inPlaceUpdate: (id: number) => boolean,
  covered: Set<number>,
  gemvs: { unit: Unit; nodes: number[]; at: number }[],
): { unit: Unit; nodes: number[]; at: number }[] {
  const nodes = g.nodes;
  const gemvOf = new Map<number, number>(); // node -> index into gemvs
  gemvs.forEach((gu, i) => {
    for (const m of gu.nodes) gemvOf.set(m, i);
  });
  const source = (id: number) => viewSource(nodes, id);
  const groups = new Map<string, NormRopePartPlan[]>();
  for (const n of nodes) {
    if (covered.has(n.id)) continue;
    const p = normRopeChain(g, n, uses, single, inPlaceUpdate);
    if (!p || p.nodes.some((m) => covered.has(m))) continue;
    const src = source(p.x), gi = gemvOf.get(src);
    const key = gi === undefined ? `n${src}` : `g${gi}`;
    groups.set(key, [...(groups.get(key) ?? []), p]);
  }
  const out: { unit: Unit; nodes: number[]; at: number }[] = [];
  for (const [key, parts] of groups) {
    if (parts.length < 2 && parts[0].rope === undefined && parts[0].update === undefined) continue;
    const inside = new Set(parts.flatMap((p) => p.nodes));
    const at = Math.max(...inside);
    if ([...inside].some((id) => uses[id].some((u) => !inside.has(u) && u <= at))) continue;
    if (key.startsWith("g") && gemvs[Number(key.slice(1))].at >= at) continue;
    out.push({ unit: { k: "norm_rope", parts }, nodes: [...inside], at });
  }
  return out;
}

/** The chain of a per-head rmsnorm `n` (see NormRopePartPlan), or undefined when `n` is not one. */
function normRopeChain(
  g: Graph,
  n: Node,
  uses: number[][],
  single: (id: number) => boolean,
  inPlaceUpdate: (id: number) => boolean,
): NormRopePartPlan | undefined {
  const nodes = g.nodes;
  if (n.op !== "rmsnorm" || n.dtype !== "f32" || n.shape.length !== 3) return undefined;
  const [x, w] = n.inputs;
  if (nodes[x].dtype !== "f32" || numel(nodes[w].shape) !== n.shape[2] || !isFloat(nodes[w].dtype)) return undefined;
  const p: NormRopePartPlan = { x, norm: n.id, weight: w, out: n.id, nodes: [n.id] };
  const wa = weightAddOf(g, w);
  if (wa && single(w) && !(g.groups ?? []).some((grp) => grp.nodes.includes(w) && grp.nodes.length > 1)) {
    [p.weight, p.weightAdd] = wa;
    p.nodes.unshift(w);
  }
  const next = (id: number): Node | undefined => (single(id) ? nodes[uses[id][0]] : undefined);
  let cur = n.id;
  let pos: number | undefined;
  const r = next(cur);
  if (r?.op === "rope" && r.inputs[0] === cur && numel(nodes[r.inputs[1]].shape) === n.shape[0]) {
    p.rope = r.id;
    pos = r.inputs[1];
    p.nodes.push(r.id);
    cur = p.out = r.id;
  }
  // A float cast and a reshape, then an in-place cache write of the one row at the rope's position.
  const tail: number[] = [];
  let at = next(cur);
  if (at?.op === "cast" && isFloat(at.dtype)) {
    tail.push(at.id);
    at = next(at.id);
  }
  if (at?.op === "reshape") {
    tail.push(at.id);
    at = next(at.id);
  }
  const row = tail.length ? tail[tail.length - 1] : cur;
  if (at?.op === "dynamic_update_slice" && at.inputs[1] === row && (at.attrs.axis ?? 0) === 0 && inPlaceUpdate(at.id) &&
    n.shape[0] === 1 && numel(nodes[row].shape) === numel(n.shape) && (pos === undefined || pos === at.inputs[2])) {
    const t = nodes[at.inputs[0]];
    if (numel(t.shape) / t.shape[0] === numel(n.shape)) {
      const cast = tail.find((id) => nodes[id].op === "cast");
      if (cast !== undefined) p.cast = cast;
      p.update = at.id;
      p.nodes.push(...tail, at.id);
      p.out = at.id;
    }
  }
  return p;
}
