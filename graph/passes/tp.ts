// The tensor-parallel sharding pass: turns a family's step graph into the one graph that each of `tp` ranks runs
// on its shard of the weights (Megatron-LM style), with collectives where ranks must meet.
//
// The plan names which weights are split and how (llm/tp.ts builds it from the config): column-parallel
// matrices (q/k/v, gate/up, the output head) are split along their rows (axis 0), row-parallel ones (o, down)
// along their columns (axis 1), and small tensors that follow a split (q/k/v biases) along axis 0. The pass then
// propagates a split through the graph: each value is either replicated (every rank holds all of it) or split
// `count` ways along one axis (rank r holds part floor(r·count/tp)). A matmul of a replicated x by a
// column-split weight gives a split result; a matmul of a split x by a row-split weight gives a partial sum that
// an all_reduce completes at once. Reshapes, elementwise ops, norms over an unsplit axis, rope, attention over
// split heads and K/V writes keep a split; State (the K/V cache) takes the split of what is written to it, so
// each rank caches only its heads. Any op with no rule for a split input (sampling, argmax over the vocab, the
// graph's outputs) gets the whole value through an all_gather first: the pass is total, and what is not
// recognised costs a gather, never a wrong answer. The vocab-parallel head thus ends in one all_gather of the
// logits ([rows, vocab], 4·vocab bytes a row): the sampler (penalties, grammar masks, top-p over the whole
// distribution) sees whole rows and stays one kernel, at the price of moving the logits once per step.
//
// K/V heads: a count below tp (kv_heads < tp) replicates each K/V head over tp/count ranks, as vLLM does; the
// plan chooses count (llm/tp.ts). A weight consumed whole in one place and split in another (a tied embedding:
// gathered whole, multiplied split) appears as two constants, the split one with role.shard set.
import { type Attrs, type Graph, GraphError, type Node, numel, type Op, type StateDecl } from "../ir.ts";
import { BINARY, COMPARE, inferNode, LEAF, UNARY } from "../ops.ts";
import { isCollective } from "../collective.ts";
import { dce } from "./dce.ts";
import type { Shard, WeightRole } from "../weights.ts";
import type { ShardPlan } from "../shard.ts";
import type { DType } from "../dtype.ts";

/** How each weight role (by role name, any layer) is split; roles not named are replicated. */
export interface TpPlan {
  tp: number;
  roles: ShardPlan;
}

/** A value's split: undefined = replicated on every rank. */
type Split = Shard | undefined;

const same = (a: Split, b: Split) => a === b || (!!a && !!b && a.axis === b.axis && a.count === b.count);

/**
 * Shards `g` for `plan.tp` ranks; see the top of this file. A plan of tp 1 that splits nothing returns `g`
 * unchanged; one that names roles (llm/tp.ts tpPlan with `collectives`) gives the graph of a group of one, with
 * its collectives over one rank (identities), which is how one GPU checks the NCCL path.
 */
export function shardGraph(g: Graph, plan: TpPlan): Graph {
  if (!Number.isInteger(plan.tp) || plan.tp < 1) throw new GraphError("attr", `tp must be a positive integer, got ${plan.tp}`);
  if (plan.tp === 1 && Object.keys(plan.roles).length === 0) return g;
  for (const n of g.nodes) if (isCollective(n.op)) throw new GraphError("attr", "graph is already sharded", n);
  // A State takes the split of what is written to it, found by running the propagation until it is stable.
  const stateSplit = new Map<string, Shard>();
  for (let round = 0; round <= Object.keys(g.states).length; round++) {
    const r = new Sharder(g, plan, stateSplit).run();
    if (!r.wantState) return dce(r.graph); // drops the whole values a split consumer no longer reads
    stateSplit.set(r.wantState.name, r.wantState.split);
  }
  throw new GraphError("attr", "state splits did not settle");
}

class Sharder {
  readonly nodes: Node[] = [];
  /** New id and split of each old node. */
  readonly map: number[] = [];
  readonly split: Split[] = [];
  private memo = new Map<string, number>();
  wantState?: { name: string; split: Shard };

  constructor(readonly g: Graph, readonly plan: TpPlan, readonly stateSplit: Map<string, Shard>) {}

  run(): { graph: Graph; wantState?: { name: string; split: Shard } } {
    for (const n of this.g.nodes) {
      const [id, s] = this.node(n);
      this.map[n.id] = id;
      this.split[id] = s;
      if (this.wantState) return { graph: this.g, wantState: this.wantState };
    }
    const outputs: Record<string, number> = {};
    for (const [k, id] of Object.entries(this.g.outputs)) outputs[k] = this.whole(this.map[id]);
    const states: Record<string, StateDecl> = {};
    for (const [k, s] of Object.entries(this.g.states)) {
      const read = this.map[s.read], write = this.map[s.write];
      if (!same(this.split[read], this.split[write])) {
        throw new GraphError("attr", `state ${k} is split ${fmt(this.split[read])} but written ${fmt(this.split[write])}`, this.nodes[write]);
      }
      states[k] = { ...s, shape: [...this.nodes[read].shape], read, write };
    }
    return { graph: { nodes: this.nodes, outputs, states } };
  }

  private add(op: Op, inputs: number[], attrs: Attrs, label?: string, leaf?: { dtype: DType; shape: number[] }): number {
    const id = this.nodes.length;
    const inf = inferNode(op, inputs.map((i) => this.nodes[i]), attrs, { id, op, label }, leaf);
    this.nodes.push({ id, op, dtype: inf.dtype, shape: inf.shape, inputs, attrs: inf.attrs, ...(label ? { label } : {}) });
    return id;
  }

  /** The whole value of new node `id` on every rank: itself, or an all_gather of its parts. */
  private whole(id: number): number {
    const s = this.split[id];
    if (!s) return id;
    const key = `g${id}`;
    const known = this.memo.get(key);
    if (known !== undefined) return known;
    if (s.count !== this.plan.tp) {
      throw new GraphError("attr", `cannot gather a value split ${s.count} ways over ${this.plan.tp} ranks (a replicated K/V head)`, this.nodes[id]);
    }
    const g = this.add("all_gather", [id], { axis: s.axis, ranks: this.plan.tp }, this.nodes[id].label);
    this.split[g] = undefined;
    this.memo.set(key, g);
    return g;
  }

  /** Rank's part of replicated node `id` split along `axis` in `count`, when it can be had without the others. */
  private part(id: number, axis: number, count: number): number | undefined {
    const key = `p${id}:${axis}:${count}`;
    const known = this.memo.get(key);
    if (known !== undefined) return known;
    const n = this.nodes[id];
    if (n.shape[axis] % count !== 0) return undefined;
    const shape = n.shape.map((d, i) => (i === axis ? d / count : d));
    let r: number | undefined;
    if (n.op === "const") {
      const spec = this.plan.roles[n.attrs.role!.role];
      if (spec && spec.axis === axis && spec.count === count) {
        const role: WeightRole = { ...n.attrs.role!, shard: { axis, count } };
        r = this.add("const", [], { ...n.attrs, role }, n.label, { dtype: n.dtype, shape });
      }
    } else if (n.op === "literal" && n.attrs.data === undefined) {
      r = this.add("literal", [], n.attrs, n.label, { dtype: n.dtype, shape });
    } else if (n.op === "broadcast") {
      const x = this.nodes[n.inputs[0]], ax = axis - (n.shape.length - x.shape.length);
      const src = ax < 0 || x.shape[ax] === 1 ? n.inputs[0] : this.part(n.inputs[0], ax, count);
      if (src !== undefined) r = this.add("broadcast", [src], { ...n.attrs, shape }, n.label);
    } else if (UNARY.has(n.op) || n.op === "cast") {
      const x = this.part(n.inputs[0], axis, count);
      if (x !== undefined) r = this.add(n.op, [x], n.attrs, n.label);
    }
    if (r !== undefined) {
      this.split[r] = { axis, count };
      this.memo.set(key, r);
    }
    return r;
  }

  /** Adds `n` with its inputs whole: the fallback of every op without a rule for a split. */
  private replicated(n: Node, ins: number[]): [number, Split] {
    return [this.add(n.op, ins.map((i) => this.whole(i)), n.attrs, n.label, leafOf(n)), undefined];
  }

  /** Adds `n` with output split `s` and the given inputs, and attrs updated to the local shape. */
  private keep(n: Node, ins: number[], s: Split, attrs: Attrs = n.attrs): [number, Split] {
    return [this.add(n.op, ins, attrs, n.label), s];
  }

  private node(n: Node): [number, Split] {
    const ins = n.inputs.map((i) => this.map[i]);
    const sp = ins.map((i) => this.split[i]);
    if (n.op === "state") {
      const s = this.stateSplit.get(n.attrs.name!);
      const shape = s ? n.shape.map((d, i) => (i === s.axis ? d / s.count : d)) : n.shape;
      return [this.add("state", [], n.attrs, n.label, { dtype: n.dtype, shape }), s];
    }
    if (LEAF.has(n.op)) return [this.add(n.op, [], n.attrs, n.label, leafOf(n)), undefined];
    if (sp.every((s) => !s) && n.op !== "matmul") return [this.add(n.op, ins, n.attrs, n.label), undefined];
    const s0 = sp.find((s) => s)!;
    if (UNARY.has(n.op) || n.op === "cast" || n.op === "silu" || n.op === "gelu") return this.keep(n, ins, s0);
    if (BINARY.has(n.op) || COMPARE.has(n.op) || n.op === "select" || n.op === "silu_mul") {
      const parts = ins.map((i, k) => (same(sp[k], s0) ? i : sp[k] ? undefined : this.part(i, s0!.axis, s0!.count)));
      if (parts.every((p) => p !== undefined)) return this.keep(n, parts as number[], s0);
      return this.replicated(n, ins);
    }
    switch (n.op) {
      case "matmul": return this.matmul(n, ins, sp);
      case "reshape": {
        const to = reshapeSplit(this.nodes[ins[0]].shape, n.attrs.shape!, s0!);
        return to ? this.keep(n, ins, to.split, { ...n.attrs, shape: to.shape }) : this.replicated(n, ins);
      }
      case "broadcast": {
        const x = this.nodes[ins[0]], ax = s0!.axis + (n.shape.length - x.shape.length);
        if (x.shape[s0!.axis] * s0!.count !== n.shape[ax]) return this.replicated(n, ins);
        return this.keep(n, ins, { ...s0!, axis: ax }, { ...n.attrs, shape: local(n.shape, ax, s0!.count) });
      }
      case "permute": return this.keep(n, ins, { ...s0!, axis: n.attrs.perm!.indexOf(s0!.axis) });
      case "slice": {
        const a = s0!.axis, full = this.nodes[ins[0]].shape[a];
        if (n.attrs.start![a] !== 0 || n.attrs.end![a] !== full * s0!.count) return this.replicated(n, ins);
        return this.keep(n, ins, s0, { ...n.attrs, end: n.attrs.end!.map((e, i) => (i === a ? full : e)) });
      }
      case "reduce":
      case "argmax":
      case "softmax":
        return sp[0] && n.attrs.axis !== s0!.axis ? this.keep(n, ins, s0) : this.replicated(n, ins);
      case "rmsnorm":
      case "layernorm":
        return sp[0] && s0!.axis !== n.shape.length - 1 && sp.slice(1).every((s) => !s) ? this.keep(n, ins, s0) : this.replicated(n, ins);
      case "rope":
        return sp[0]?.axis === 1 && sp.slice(1).every((s) => !s) ? this.keep(n, ins, s0) : this.replicated(n, ins);
      case "gather": {
        const t = sp[0];
        if (t && !sp[1] && t.axis >= 1) return this.keep(n, ins, { ...t, axis: this.nodes[ins[1]].shape.length + t.axis - 1 });
        return this.replicated(n, ins);
      }
      case "attention":
      case "paged_attention": {
        const [q, k, v] = sp;
        const heads = q && k && v && q.axis === 1 && k.axis === 1 && v.axis === 1 && q.count === this.plan.tp;
        return heads && sp.slice(3).every((s) => !s) ? this.keep(n, ins, q) : this.replicated(n, ins);
      }
      case "dynamic_update_slice":
      case "scatter_update": {
        const [t, u] = sp;
        const axis = n.op === "scatter_update" ? 0 : n.attrs.axis!;
        if (u && !t && this.nodes[ins[0]].op === "state" && u.axis !== axis) {
          this.wantState = { name: this.nodes[ins[0]].attrs.name!, split: u };
          return [ins[0], undefined];
        }
        if (same(t, u) && t!.axis !== axis && !sp[2]) return this.keep(n, ins, t);
        return this.replicated(n, ins);
      }
    }
    return this.replicated(n, ins);
  }

  private matmul(n: Node, ins: number[], sp: Split[]): [number, Split] {
    const [x, w] = ins;
    const wn = this.nodes[w];
    const spec = wn.op === "const" && wn.shape.length === 2 ? this.plan.roles[wn.attrs.role!.role] : undefined;
    const last = this.nodes[x].shape.length - 1;
    if (!sp[0] && !sp[1] && spec?.axis === 0) {
      const wp = this.part(w, 0, spec.count);
      if (wp !== undefined) return this.keep(n, [x, wp], { axis: last, count: spec.count });
    }
    const xs = sp[0];
    if (xs && !sp[1] && xs.axis === last && spec?.axis === 1 && spec.count === xs.count && xs.count === this.plan.tp) {
      const wp = this.part(w, 1, spec.count);
      if (wp !== undefined) {
        const partial = this.add("matmul", [x, wp], n.attrs, n.label);
        return [this.add("all_reduce", [partial], { ranks: this.plan.tp }, n.label), undefined];
      }
    }
    if (xs && !sp[1] && xs.axis !== last) return this.keep(n, ins, xs);
    return this.replicated(n, ins);
  }
}

function leafOf(n: Node): { dtype: DType; shape: number[] } | undefined {
  return LEAF.has(n.op) ? { dtype: n.dtype, shape: n.shape } : undefined;
}

function local(shape: readonly number[], axis: number, count: number): number[] {
  return shape.map((d, i) => (i === axis ? d / count : d));
}

function fmt(s: Split): string {
  return s ? `${s.count} ways on axis ${s.axis}` : "not at all";
}

/**
 * Where a split of `from` (rank-local shape) lands after a reshape to the whole shape `to`: the output axis j
 * whose outer extent equals the split axis's (so each rank's contiguous block stays one block) and whose size
 * the count divides. Returns the local target shape too, or undefined when the split does not survive.
 */
function reshapeSplit(from: readonly number[], to: readonly number[], s: Shard): { shape: number[]; split: Shard } | undefined {
  const outer = numel(from.slice(0, s.axis));
  let acc = 1;
  for (let j = 0; j < to.length; j++) {
    if (acc === outer && to[j] > 1 && to[j] % s.count === 0) {
      return { shape: local(to, j, s.count), split: { axis: j, count: s.count } };
    }
    acc *= to[j];
    if (acc > outer) return undefined;
  }
  return undefined;
}
