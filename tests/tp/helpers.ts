// Shared pieces of the tensor-parallel tests: the transformers fixtures' models, one decode sequence of steps
// (a prefill then single-token decodes) run by the unsharded oracle with tier-2 bounds, and joining the ranks'
// parts of a split State back into the whole one.
import assert from "node:assert/strict";
import { combine } from "../../graph/collective.ts";
import type { Storage } from "../../graph/dtype.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import type { Graph } from "../../graph/ir.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { partOf } from "../../graph/shard.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";
import { loadModel, type ModelHandle } from "../../llm/model.ts";
import { FIXTURES } from "../families/fixtures.ts";

export function fixture(family: string): ModelHandle {
  return loadModel(`${FIXTURES}${family}`);
}

/** The family's step graph for `rows` rows over KV capacity `cap`, with output `logits`. */
export function stepGraph(m: ModelHandle, rows: number, cap: number): Graph {
  const { tracer, logits } = m.family.trace(m.config, { rows, cap }, { dtypeOf: dtypesFromStore(m.store, m.map) });
  tracer.output("logits", logits);
  return tracer.build();
}

/** The steps every check runs: a 5-row prefill at 0, then decodes at 5, 6, 7. */
export const STEPS: { rows: number; tokens: number[]; pos: number }[] = [
  { rows: 5, tokens: [1, 17, 42, 99, 7], pos: 0 },
  { rows: 1, tokens: [123], pos: 5 },
  { rows: 1, tokens: [5], pos: 6 },
  { rows: 1, tokens: [300], pos: 7 },
];

export interface Reference {
  logits: Float32Array;
  bound: Float32Array;
  state: Record<string, Storage>;
  stateBound: Record<string, Float32Array>;
}

/** The unsharded oracle over STEPS, with tier-2 ("expected") bounds carried across steps. */
export function reference(m: ModelHandle, graphs: Graph[]): Reference[] {
  const consts = constsFromStore(m.store, m.map);
  let state: Record<string, Storage> | undefined, sb: Record<string, Float32Array> | undefined;
  return STEPS.map((s, i) => {
    const e = evaluate(graphs[i], { consts, slots: { token: Int32Array.from(s.tokens), pos: new Int32Array([s.pos]) }, state, stateBounds: sb }, { bounds: true });
    state = e.state;
    sb = e.bounds!.state;
    return { logits: e.output.logits as Float32Array, bound: e.bounds!.output.logits, state: e.state, stateBound: e.bounds!.state };
  });
}

/**
 * The whole State from each rank's part: parts split `count` ways along `axis` over tp ranks. Replicas (count <
 * tp) must hold the same bits; the distinct parts are concatenated in order.
 */
export function joinState(name: string, parts: Storage[], shape: readonly number[], axis: number, count: number): Storage {
  const tp = parts.length;
  const distinct: Storage[] = [];
  for (let r = 0; r < tp; r++) {
    const p = partOf(r, tp, count);
    if (distinct[p] === undefined) distinct[p] = parts[r];
    else assert.deepEqual(parts[r], distinct[p], `${name}: rank ${r} holds a replica of part ${p} that differs`);
  }
  return combine("all_gather", "f32", shape, { axis, ranks: count }, distinct);
}

/** Every element of a rank-group result within the unsharded oracle's tier-2 bound. */
export function assertStep(what: string, logits: Storage, states: Record<string, Storage>, ref: Reference): void {
  assertClose(`${what}: logits`, "f32", logits, ref.logits, ref.bound);
  for (const [name, v] of Object.entries(ref.state)) {
    assert.ok(states[name], `${what}: state ${name} missing`);
    assertClose(`${what}: state ${name}`, "f32", states[name], v, ref.stateBound[name]);
  }
}
