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
import type { RankGroup } from "../../backends/group.ts";
import { storageFromBytes } from "../../graph/dtype.ts";
import type { TpPlan } from "../../graph/passes/tp.ts";
import { tpPlan } from "../../llm/tp.ts";
import { openCuda } from "../../ffi/cuda.ts";
import { selectedBackends } from "../devices/index.ts";

/** CUDA GPUs on this machine, or why none can be used (ptx not selected by POOT_BACKENDS, no libcuda). */
export function gpuCount(): number | string {
  if (!selectedBackends().includes("ptx")) return "ptx not selected (POOT_BACKENDS)";
  try {
    const cu = openCuda();
    try {
      cu.init();
      return cu.deviceCount();
    } finally {
      cu.close();
    }
  } catch (e) {
    return `no CUDA: ${(e as Error).message.split("\n")[0]}`;
  }
}

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

/**
 * A family's fixture on groups of each size in `tps` (made by `group`): over STEPS, the logits and every K/V
 * State (the ranks' parts joined) within the unsharded oracle's tier-2 bound; a position never makes an entry.
 * `collectives` plans tp 1 as a group of one (its collectives over one rank) rather than an unsplit graph.
 */
export async function checkGroup(
  family: string, tps: number[], group: (tp: number, plan: TpPlan) => Promise<RankGroup>, opts: { collectives?: boolean } = {},
): Promise<void> {
  const m = fixture(family);
  try {
    const graphs = STEPS.map((s) => stepGraph(m, s.rows, 16));
    const ref = reference(m, graphs);
    for (const tp of tps) {
      const g = await group(tp, tpPlan(m.config, tp, { collectives: opts.collectives }));
      try {
        await g.loadWeights(m.store, m.map);
        const ids = new Map<number, number>();
        for (let i = 0; i < STEPS.length; i++) {
          const s = STEPS[i];
          if (!ids.has(s.rows)) ids.set(s.rows, g.addEntry(`step${s.rows}`, graphs[i]));
          const r = await g.step(ids.get(s.rows)!, { token: Int32Array.from(s.tokens), pos: new Int32Array([s.pos]) });
          const joined: Record<string, Storage> = {};
          for (const [name, decl] of Object.entries(graphs[i].states)) {
            const parts = (await g.readState(name)).map((b) => storageFromBytes("f32", b));
            // [cap, kv_heads, head_dim], each rank holding some of the K/V heads (axis 1).
            const local = [decl.shape[0], parts[0].length / (decl.shape[0] * decl.shape[2]), decl.shape[2]];
            joined[name] = joinState(name, parts, local, 1, decl.shape[1] / local[1]);
          }
          assertStep(`${family} ${g.targetSet().backend} tp ${tp} step ${i}`, r.outputs.logits, joined, ref[i]);
        }
        assert.equal(g.stats().entries, 2, "a position never makes a new entry");
        // The host path replays a stage per collective boundary; the device path one recording per rank.
        if (g.path === "host") assert.ok(g.stats().stagesPerStep > 2 * m.config.layers, "stages: one per collective boundary");
        else assert.equal(g.stats().stagesPerStep, 1, "device path: one replay per rank per step");
      } finally {
        await g.unload();
      }
    }
  } finally {
    m.close();
  }
}
