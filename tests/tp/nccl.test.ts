// The device path of a tensor-parallel group (backends/group.ts, backends/ptx/nccl.ts): each rank's collectives
// recorded as NCCL calls inside its CUDA graph, one cuGraphLaunch per GPU per token. On one GPU a group of one
// runs it for real (comm init, NCCL calls captured in a graph, replay, teardown; its all-reduce is a copy): the
// fixtures within the unsharded oracle's tier-2 bound and a synthetic Llama's greedy tokens equal to the plain
// engine's, and its eager steps (NCCL called per step) bit for bit its replays. With 2 (4) GPUs the same at tp 2
// (4) against tp 1. Skips, saying why, without ptx selected, libcuda,
// enough GPUs or a libnccl (POOT_NCCL_LIBRARY may name one).
import { test } from "node:test";
import assert from "node:assert/strict";
import { openRankGroup, type RankGroup } from "../../backends/group.ts";
import { ncclLibraryNames } from "../../backends/ptx/nccl.ts";
import { openNccl } from "../../ffi/nccl.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { runTpBench } from "../../bench/tp.ts";
import { tpPlan } from "../../llm/tp.ts";
import { checkGroup, fixture, gpuCount, stepGraph } from "./helpers.ts";

function ncclMissing(): string | false {
  try {
    openNccl(ncclLibraryNames()).close();
    return false;
  } catch (e) {
    return `no libnccl: ${(e as Error).message.split("\n")[0]}`;
  }
}
const gpus = gpuCount();
const skipFor = (tp: number): string | false => {
  if (typeof gpus === "string") return gpus;
  if (gpus < tp) return `tp ${tp} needs ${tp} GPUs, this machine has ${gpus}`;
  return ncclMissing();
};

/** A group on the device path (an error, not the host path, where it cannot be). */
async function deviceGroup(tp: number, plan: Parameters<typeof openRankGroup>[1]): Promise<RankGroup> {
  const g = await openRankGroup("ptx", plan, { compile: compileGraph, collectives: "device" });
  assert.equal(g.path, "device");
  assert.ok(g.targetSet().caps.collectives, `tp ${tp}: the ranks record collectives`);
  return g;
}

for (const tp of [1, 2, 4]) {
  for (const family of ["llama", "qwen2"]) {
    test(`${family} at tp ${tp} on the NCCL device path (ptx) equals the unsharded oracle within tier 2`, { skip: skipFor(tp), timeout: 300_000 }, async () => {
      await checkGroup(family, [tp], deviceGroup, { collectives: true });
    });
  }
  test(`a synthetic Llama at tp ${tp} on the NCCL device path: greedy tokens equal one plain engine's`, { skip: skipFor(tp), timeout: 300_000 }, async () => {
    const rows = await runTpBench({
      backend: "ptx", tps: tp === 1 ? [1] : [1, tp], shapes: ["stories260K"], tokens: 24, cap: 64, big: false,
      collectives: "device", groupOfOne: tp === 1,
    });
    for (const r of rows) assert.equal(r.error, undefined, `tp ${r.tp} ${r.path}: ${r.error}`);
    const g = rows[rows.length - 1];
    assert.equal(g.path, "device");
    assert.ok(g.collectiveMicros > 0, "the collectives replayed alone take device time");
    assert.equal(g.stages, 1);
    assert.deepEqual(g.tokens, rows[0].tokens, "greedy tokens equal the plain engine's");
    assert.ok(new Set(rows[0].tokens).size > 1, "the synthetic model's tokens vary (the check can fail)");
  });
}

test("a one-rank NCCL group on ptx: eager steps (each collective an NCCL call) equal the replayed graph bit for bit", { skip: skipFor(1), timeout: 300_000 }, async () => {
  const m = fixture("llama");
  const g = await deviceGroup(1, tpPlan(m.config, 1, { collectives: true }));
  try {
    await g.loadWeights(m.store, m.map);
    const id = g.addEntry("decode", stepGraph(m, 1, 16));
    const run = async (eager: boolean) => {
      g.resetState();
      const out: Float32Array[] = [];
      for (let pos = 0; pos < 4; pos++) out.push((await g.step(id, { token: new Int32Array([pos + 9]), pos: new Int32Array([pos]) }, { eager })).outputs.logits as Float32Array);
      return out;
    };
    const replayed = await run(false);
    assert.ok(replayed.every((l) => l.every(Number.isFinite)));
    assert.deepEqual(await run(true), replayed);
  } finally {
    await g.unload();
    m.close();
  }
});
