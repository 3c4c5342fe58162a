// Lowering of the decode tail that picks tokens: argmax, sample, logits_process (penalties, bias, masks) and
// logprobs. Over a long row (a vocab) each splits the row across many workgroups, then merges per row.
import type { Node } from "../../graph/ir.ts";
import type { Unit } from "../../graph/plan.ts";
import type { Binding } from "../program.ts";
import * as lib from "../lib/mod.ts";
import { argmaxAxis } from "../lib/generic.ts";
import type { LowerContext } from "../lower.ts";
import { around, etype, fusesTails } from "./common.ts";

/** Argmax along an axis: long f32 rows (a vocab) split into chunks and merged; else one kernel. */
export function lowerArgmax(cx: LowerContext, n: Node, u: Unit): void {
  const { nodes, caps, buf, bind, kernel, simpleWork } = cx;
  const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id), work = simpleWork(u, ins);
  const axis = n.attrs.axis!;
  const [outer, len, inner] = around(i0.shape, axis);
  if (inner === 1 && i0.dtype === "f32" && len >= 16384 && caps.subgroups && caps.subgroupSize >= 8) {
    // Long rows (a vocab): chunks in parallel, then a merge.
    if (fusesTails(cx) && !lib.argmaxFusable(caps, { rows: outer, n: len })) {
      // one dispatch, as fused attention (the same switch): its candidates and counters are State
      const bytes = lib.argmaxFusedBytes({ rows: outer, n: len });
      const part: Binding = { buffer: buf("state", `argmax-partials:${bytes}`, bytes), offset: 0, bytes };
      return kernel(lib.argmaxFused(caps, { rows: outer, n: len, out: "i32" }), [bind(ins[0]), part, out], work);
    }
    const bytes = outer * lib.argmaxChunks(len).parts * 8;
    const part: Binding = { buffer: buf("arena", "argmax-partials", bytes), offset: 0, bytes };
    kernel(lib.argmaxPartial(caps, { rows: outer, n: len }), [bind(ins[0]), part], work);
    return kernel(lib.argmaxCombine(caps, { rows: outer, n: len, out: "i32" }), [part, out], { bytes: bytes + 4 * outer, flops: bytes });
  }
  if (inner === 1 && i0.dtype === "f32") return kernel(lib.argmax(caps, { rows: outer, n: len, out: "i32" }), [bind(ins[0]), out], work);
  return kernel(argmaxAxis(caps, { outer, n: len, inner, elem: etype(i0.dtype) }), [bind(ins[0]), out], work);
}

/** A long row: stats, masses (and the candidate list) over many workgroups, then one per row; else one per row. */
export function lowerSample(cx: LowerContext, n: Node): void {
  const { nodes, caps, buf, bind, kernel } = cx;
  const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id);
  const [R, V] = i0.shape;
  const parts = lib.sampleSplit(V, cx.opts.sampleParts ?? lib.sampleParts(caps, V)).parts;
  const shape = { rows: R, vocab: V, parts, bracket: cx.opts.sampleBracket, lean: cx.opts.sampleLean, subgroupList: cx.opts.sampleSubgroupList };
  const k = lib.sample(caps, shape);
  if (parts <= 1) return kernel(k, [bind(ins[0]), bind(ins[1]), out], { bytes: 16 * R * V, flops: 32 * R * V });
  const arena = (name: string, words: number): Binding => {
    const bytes = R * parts * words * 4;
    return { buffer: buf("arena", name, bytes), offset: 0, bytes };
  };
  const stats = arena("sample-stats", lib.STATS_WORDS), mass = arena("sample-mass", lib.MASS_WORDS);
  kernel(lib.sampleStats(caps, { rows: R, vocab: V, parts }), [bind(ins[0]), stats], { bytes: 4 * R * V, flops: 4 * R * V });
  kernel(lib.sampleMass(caps, { rows: R, vocab: V, parts }), [bind(ins[0]), bind(ins[1]), stats, mass], { bytes: 4 * R * V, flops: 4 * R * V });
  if (!lib.sampleListed(caps, shape)) return kernel(k, [bind(ins[0]), bind(ins[1]), stats, mass, out], { bytes: 12 * R * V, flops: 32 * R * V });
  const cap = lib.sampleLayout(caps, shape).cap, bytes = R * lib.listWords(cap) * 4;
  const list: Binding = { buffer: buf("arena", "sample-list", bytes), offset: 0, bytes };
  kernel(lib.sampleList(caps, { rows: R, vocab: V, parts, cap }), [bind(ins[0]), bind(ins[1]), stats, mass, list], { bytes: 4 * R * V, flops: R * V });
  return kernel(k, [bind(ins[0]), bind(ins[1]), stats, mass, list, out], { bytes: 4 * R * V, flops: 8 * R * V });
}

/** (row, chunk) workgroups: a copy with the mask, then the row's sparse entries. */
export function lowerLogitsProcess(cx: LowerContext, n: Node): void {
  const { nodes, caps, bind, kernel } = cx;
  const ins = n.inputs, out = bind(n.id);
  const [R, V] = nodes[ins[0]].shape;
  const entries = (nodes[ins[1]].shape[1] - 8) / 3;
  const countRows = ins.length > 3 ? nodes[ins[3]].shape[0] : 0;
  const k = lib.logitsProcess(caps, { rows: R, vocab: V, entries, countRows });
  return kernel(k, [...ins.map(bind), out], { bytes: (countRows ? 12 : 8) * R * V + 12 * R * entries, flops: R * V });
}

/** A long row: per-part top lists over many teams, then a merge; else one workgroup per row. */
export function lowerLogprobs(cx: LowerContext, n: Node): void {
  const { nodes, caps, buf, bind, kernel } = cx;
  const ins = n.inputs, out = bind(n.id);
  const [R, V] = nodes[ins[0]].shape;
  const N = n.attrs.n!;
  const parts = lib.sampleSplit(V, cx.opts.logprobsParts ?? lib.logprobsParts(caps, V)).parts;
  if (parts <= 1) {
    const k = lib.logprobs(caps, { rows: R, vocab: V, n: N });
    return kernel(k, [bind(ins[0]), bind(ins[1]), bind(ins[2]), out], { bytes: 4 * R * V * (2 + N), flops: 8 * R * V });
  }
  const bytes = R * parts * lib.logprobsPartWords(N) * 4;
  const part: Binding = { buffer: buf("arena", "logprobs-parts", bytes), offset: 0, bytes };
  const shape = { rows: R, vocab: V, n: N, parts };
  kernel(lib.logprobsPart(caps, shape), [bind(ins[0]), bind(ins[2]), part], { bytes: 4 * R * V, flops: 8 * R * V });
  return kernel(lib.logprobsCombine(caps, shape), [bind(ins[0]), bind(ins[1]), bind(ins[2]), part, out], { bytes: 2 * bytes, flops: bytes });
}
