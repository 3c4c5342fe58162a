// The device path of a tensor-parallel group without GPUs: PtxDevices over fake CUDA (tests/ptx/fake_cuda.ts:
// kernels run by the JS renderer) joined by a fake NCCL (tests/ptx/fake_nccl.ts: collectives that block each
// rank's fake stream until every rank's input is in). What runs is the real code: the planner's collective
// steps, PtxDevice's lockstep capture of every rank's graph with each collective as one group call, one graph
// launch per rank per step, and the teardown order. Checked: llama and qwen2 at tp 1, 2 and 4 within the
// unsharded oracle's tier-2 bound (logits and K/V State), the NCCL call order, eager steps, the collectives
// timed alone, the abort when a rank fails, and the typed errors and fallbacks around the path (no
// collectives on a device: the host path, or an error when the device path is demanded). The serving step on
// this path is in serving.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Cuda } from "../../ffi/cuda.ts";
import { Engine } from "../../backends/executor.ts";
import { DeviceLost, KernelFault, Poisoned, Unsupported } from "../../backends/errors.ts";
import { openRankGroup, RankGroup } from "../../backends/group.ts";
import { JsDevice } from "../../backends/js/mod.ts";
import { PtxDevice } from "../../backends/ptx/mod.ts";
import { compileGraph } from "../../kernels/lower.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { GraphError, type Graph } from "../../graph/ir.ts";
import { shardGraph } from "../../graph/passes/tp.ts";
import { tpPlan } from "../../llm/tp.ts";
import { FakeCuda } from "../ptx/fake_cuda.ts";
import { fakeGroup } from "../ptx/fake_nccl.ts";
import { checkGroup, fixture, stepGraph } from "./helpers.ts";

for (const [family, tps] of [["llama", [1, 2, 4]], ["qwen2", [2]]] as const) {
  test(`${family} on fake GPUs with a fake NCCL (the device path) at tp ${tps.join(", ")} equals the unsharded oracle within tier 2`, { timeout: 300_000 }, async () => {
    await checkGroup(family, [...tps], (tp, plan) => {
      const { group } = fakeGroup(tp, plan);
      assert.equal(group.path, "device");
      return Promise.resolve(group);
    }, { collectives: true });
  });
}

test("the device path's NCCL calls: each collective one group call over the ranks during capture, one launch per rank per step, communicators destroyed after the graphs", { timeout: 120_000 }, async () => {
  const m = fixture("llama");
  const { group, nccl, cus } = fakeGroup(2, tpPlan(m.config, 2));
  try {
    await group.loadWeights(m.store, m.map);
    const graph = stepGraph(m, 1, 16);
    const collectives = shardGraph(graph, tpPlan(m.config, 2)).nodes.filter((n) => n.op === "all_reduce" || n.op === "all_gather").length;
    assert.equal(collectives, 2 * m.config.layers + 1, "an all_reduce after o and after down per layer, one all_gather of the logits");
    assert.deepEqual(nccl.calls, ["commInitAll 0,1"]);
    const id = group.addEntry("decode", graph);
    // Warm-up (each distinct collective once, eagerly) then the capture: every call inside a group of both ranks.
    const calls = nccl.calls.slice(1);
    assert.equal(calls.length % 4, 0);
    for (let i = 0; i < calls.length; i += 4) {
      assert.deepEqual(calls.slice(i, i + 4).map((c) => c.replace(/^all(Reduce|Gather)/, "coll")), ["groupStart", "coll 0", "coll 1", "groupEnd"]);
    }
    const distinct = new Set(calls.filter((c) => c.endsWith(" 0"))).size; // allReduce 0 / allGather 0
    assert.equal(calls.length / 4, collectives + 2, `${collectives} captured, ${distinct} warm-up kinds (one all_reduce size, one all_gather)`);
    const launches = () => cus.map((cu) => cu.calls.filter((c) => c === "graphLaunch").length);
    const before = launches();
    for (let pos = 0; pos < 3; pos++) await group.step(id, { token: new Int32Array([pos + 3]), pos: new Int32Array([pos]) });
    assert.deepEqual(launches().map((n, r) => n - before[r]), [3, 3], "one graph launch per rank per step");
    assert.equal(nccl.calls.length, 1 + calls.length, "no NCCL call per step: the collectives are inside the graphs");
    const s = group.stats();
    assert.equal(s.collectives, "device");
    assert.equal(s.collectiveMicrosPerStep, 0);
    assert.equal(s.stagesPerStep, 1);
    // The collectives timed alone: captured apart in lockstep (one more group call each), replayed, released;
    // the entry's own steps are unchanged after it.
    const last = (await group.step(id, { token: new Int32Array([4]), pos: new Int32Array([3]) })).outputs.logits.slice();
    const n = nccl.calls.length;
    assert.ok(await group.collectiveMicros(id, 2) > 0);
    assert.equal(nccl.calls.length - n, 4 * collectives, "the collectives-only graphs: one group call per collective");
    group.resetState();
    for (let pos = 0; pos < 3; pos++) await group.step(id, { token: new Int32Array([pos + 3]), pos: new Int32Array([pos]) });
    assert.deepEqual((await group.step(id, { token: new Int32Array([4]), pos: new Int32Array([3]) })).outputs.logits, last);
  } finally {
    await group.unload();
    m.close();
  }
  assert.deepEqual(nccl.calls.slice(-4), ["groupStart", "commDestroy 0", "commDestroy 1", "groupEnd"]);
  for (const cu of cus) assert.ok(cu.calls.includes("primaryCtxRelease"), "the contexts go after the communicators");
});

test("a collective lowers to a step only where the target records collectives; a gather along an inner axis lands through a scratch", () => {
  const m = fixture("llama");
  try {
    const plan = tpPlan(m.config, 2);
    const sharded: Graph = shardGraph(stepGraph(m, 3, 16), plan);
    const base: TargetSet = { backend: "ptx", device: "fake", caps: new PtxCapsProbe().caps, memory: { totalBytes: 1 << 30 }, watchdogBudget: 0 };
    assert.throws(() => compileGraph(sharded, base), (e: unknown) => e instanceof GraphError && /tp group/.test((e as Error).message));
    const p = compileGraph(sharded, { ...base, caps: { ...base.caps, collectives: true } });
    const steps = p.steps.filter((s) => s.k === "collective");
    assert.equal(steps.length, 2 * m.config.layers + 1);
    const gather = steps.find((s) => s.op === "all_gather")!;
    assert.equal(gather.count, 3 * (m.config.vocab / 2), "3 rows of half the vocab from each rank");
    assert.equal(gather.ranks, 2);
    assert.equal(p.buffers[gather.dst.buffer].name, "all-gather-scratch");
    const at = p.steps.indexOf(gather);
    const copies = p.steps.slice(at + 1, at + 7);
    assert.ok(copies.every((s) => s.k === "copy"), "one copy per (row, rank) block");
    const block = (m.config.vocab / 2) * 4;
    assert.deepEqual(copies.map((s) => s.k === "copy" && [s.src.offset, s.dst.offset - copies[0].dst.offset]), [
      [0, 0], [3 * block, block], [block, 2 * block], [4 * block, 3 * block], [2 * block, 4 * block], [5 * block, 5 * block],
    ]);
    for (const s of steps) assert.equal(s.k === "collective" && s.op === "all_reduce" ? s.dtype : "f32", "f32");
  } finally {
    m.close();
  }
});

test("where the ranks cannot record collectives the group takes the host path and says why; demanding the device path is a typed error", async () => {
  const m = fixture("llama");
  try {
    const g = await openRankGroup("js", tpPlan(m.config, 2), { compile: compileGraph });
    try {
      assert.equal(g.path, "host");
      assert.match(g.stats().hostReason ?? "", /do not record collectives/);
    } finally {
      await g.unload();
    }
    await assert.rejects(openRankGroup("js", tpPlan(m.config, 2), { compile: compileGraph, collectives: "device" }), (e: unknown) => e instanceof Unsupported && /device path/.test((e as Error).message));
    const { group } = fakeGroup(2, tpPlan(m.config, 2));
    await group.unload();
    const ranks = [new FakeCuda(), new FakeCuda()].map((cu, r) => new Engine(new PtxDevice(cu as unknown as Cuda, { ordinal: r }), { compile: compileGraph }));
    const host = new RankGroup(ranks, tpPlan(m.config, 2), { path: "host" });
    assert.equal(host.path, "host");
    await host.unload();
  } finally {
    m.close();
  }
});

/** PTX-like caps for lowering checks (no device needed). */
class PtxCapsProbe {
  readonly caps = new PtxDevice(new FakeCuda() as unknown as Cuda).target.caps;
}

test("the device path's eager steps: a group of one runs its collectives eagerly, bit for bit the replay's; a larger group refuses with a typed error and no reset needed", { timeout: 120_000 }, async () => {
  const m = fixture("llama");
  try {
    for (const tp of [1, 2]) {
      const { group } = fakeGroup(tp, tpPlan(m.config, tp, { collectives: true }));
      try {
        await group.loadWeights(m.store, m.map);
        const id = group.addEntry("decode", stepGraph(m, 1, 16));
        const run = async (eager: boolean) => {
          group.resetState();
          const out: Float32Array[] = [];
          for (let pos = 0; pos < 3; pos++) {
            out.push((await group.step(id, { token: new Int32Array([pos + 9]), pos: new Int32Array([pos]) }, { eager })).outputs.logits as Float32Array);
          }
          return out;
        };
        const replayed = await run(false);
        if (tp === 1) assert.deepEqual(await run(true), replayed);
        else {
          await assert.rejects(run(true), (e: unknown) => e instanceof Unsupported && /eager/.test((e as Error).message));
          assert.deepEqual(await run(false), replayed, "the refused eager step left the entry usable");
        }
      } finally {
        await group.unload();
      }
    }
  } finally {
    m.close();
  }
});

test("a rank that fails on the device path aborts the group's communicators: the step throws its typed error at once (no rank waits out its timeout), later steps are Poisoned, unload completes", { timeout: 120_000 }, async () => {
  const m = fixture("llama");
  const { group, nccl, cus } = fakeGroup(2, tpPlan(m.config, 2));
  try {
    await group.loadWeights(m.store, m.map);
    const id = group.addEntry("decode", stepGraph(m, 1, 16));
    const slots = { token: new Int32Array([3]), pos: new Int32Array([0]) };
    await group.step(id, slots);
    // Rank 1's context dies (a sticky launch failure, as a trap leaves): rank 0 has launched and waits for it
    // in its first all-reduce.
    cus[1].sticky = 719;
    const t0 = performance.now();
    await assert.rejects(group.step(id, slots), (e: unknown) => e instanceof DeviceLost || e instanceof KernelFault);
    assert.ok(performance.now() - t0 < 10_000, "failed well inside the 20 s wait bound");
    assert.deepEqual(nccl.calls.filter((c) => c.startsWith("commAbort")), ["commAbort 0", "commAbort 1"]);
    await assert.rejects(group.step(id, slots), (e: unknown) => e instanceof Poisoned && /aborted/.test((e as Error).message));
    assert.match(group.stats().poisoned ?? "", /rank 1 failed/);
  } finally {
    await group.unload();
    m.close();
  }
  assert.ok(!nccl.calls.some((c) => c.startsWith("commDestroy")), "aborted communicators are not destroyed again");
});

test("a group of one holds each weight once: its one-way splits share the whole tensor's buffer (tied embedding included)", async () => {
  let tied = 0;
  for (const family of ["llama", "qwen2"]) {
    const m = fixture(family);
    const one = new Engine(new JsDevice(), { compile: compileGraph });
    const g = await openRankGroup("js", tpPlan(m.config, 1, { collectives: true }), { compile: compileGraph });
    try {
      await one.loadWeights(m.store, m.map);
      await g.loadWeights(m.store, m.map);
      assert.equal(g.stats().bytes.weights, one.stats().bytes.weights, `${family} (tied: ${m.config.tiedEmbeddings})`);
      if (m.config.tiedEmbeddings) tied++;
    } finally {
      await one.unload();
      await g.unload();
      m.close();
    }
  }
  assert.ok(tied > 0, "a fixture with tied embeddings (kept whole and split) is among them");
});
