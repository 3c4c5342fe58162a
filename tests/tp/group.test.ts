// The simulated N-rank group on the JS device (backends/group.ts RankGroup: one JS engine per rank, each with its
// shard of the weights, collectives combined on the host between them): the sharded graphs of llama, qwen2
// (biases, tied head) and gemma2 (soft-capping, post-norms) at tp 2 and 4 equal the unsharded oracle within its
// tier-2 bound on the logits and every K/V State; and through the whole driver (open({tp})), stories260K's
// greedy tokens at tp 2 and 4 equal llama2.c's reference (reference_greedy.json, from run.c), as tp 1's do.
// Bad group sizes and backends are typed errors that leave nothing open.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { readFileSync } from "node:fs";
import { Engine } from "../../backends/executor.ts";
import { KernelFault, NeedsReset, Unsupported } from "../../backends/errors.ts";
import { RankGroup } from "../../backends/group.ts";
import { JsDevice } from "../../backends/js/mod.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { InvalidArgumentError } from "../../llm/errors.ts";
import { open } from "../../llm/open.ts";
import { TpError, tpPlan } from "../../llm/tp.ts";
import { checkGroup, fixture, stepGraph } from "./helpers.ts";

function jsGroup(tp: number, plan: ReturnType<typeof tpPlan>): RankGroup {
  return new RankGroup(Array.from({ length: tp }, () => new Engine(new JsDevice(), { compile: compileGraph })), plan);
}

for (const family of ["llama", "qwen2", "gemma2"]) {
  test(`${family} on a simulated JS group at tp 2 and 4 equals the unsharded oracle within tier 2`, { timeout: 300_000 }, async () => {
    await checkGroup(family, [2, 4], (tp, plan) => Promise.resolve(jsGroup(tp, plan)));
  });
}

const STORIES = fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url));
const REF = JSON.parse(readFileSync(new URL("../../models/stories260K/reference_greedy.json", import.meta.url), "utf8")) as {
  cases: { prompt_ids: number[]; steps: number; generated_ids: number[] }[];
};

// tp 1 equals the same reference in tests/model/stories.test.ts, so equal to it means equal to tp 1's.
test("stories260K through the driver: greedy tokens at tp 2 and 4 (simulated JS group) equal llama2.c's (= tp 1's)", { timeout: 300_000 }, async () => {
  const got = new Map<number, number[][]>();
  for (const tp of [2, 4]) {
    const d = await open({ model: STORIES, backend: "js", tp, ctx: 256 });
    try {
      const outs: number[][] = [];
      // tp 4 on the first case only: the second adds CI time, not coverage (same graphs, longer prompt).
      for (const c of tp === 4 ? REF.cases.slice(0, 1) : REF.cases) {
        const r = await d.generate(c.prompt_ids, { maxTokens: c.steps - c.prompt_ids.length + 1 });
        outs.push(r.generatedIds);
      }
      got.set(tp, outs);
      assert.equal((d.exec as RankGroup).stats().tp, tp);
    } finally {
      await d.close();
    }
  }
  REF.cases.forEach((c, i) => {
    assert.deepEqual(got.get(2)![i], c.generated_ids, `case ${i}: tp 2 vs llama2.c`);
    if (i < got.get(4)!.length) assert.deepEqual(got.get(4)![i], c.generated_ids, `case ${i}: tp 4 vs llama2.c`);
  });
});

test("a group size the model does not split, a backend without tp, or a bad tp are typed errors", async () => {
  // stories260K: 8 heads, 4 K/V heads: tp 3 splits neither.
  await assert.rejects(open({ model: STORIES, backend: "js", tp: 3 }), (e: unknown) => e instanceof TpError && /8 attention heads/.test((e as Error).message));
  await assert.rejects(open({ model: STORIES, backend: "vulkan", tp: 2 }), (e: unknown) => e instanceof Unsupported && /ptx .* or js/.test((e as Error).message));
  await assert.rejects(open({ model: STORIES, backend: "js", tp: 0 }), (e: unknown) => e instanceof InvalidArgumentError && /tp/.test((e as Error).message));
  const m = fixture("llama");
  try {
    assert.throws(() => tpPlan({ ...m.config, kvHeads: 3, heads: 6 }, 2), (e: unknown) => e instanceof TpError && /3 K\/V heads/.test((e as Error).message));
    assert.throws(() => tpPlan({ ...m.config, hidden: 130 }, 4), (e: unknown) => e instanceof TpError && /FFN width 130/.test((e as Error).message));
  } finally {
    m.close();
  }
});

/** A JS device whose next synchronize fails with a kernel fault once armed (a fault on one rank of a group). */
class FaultOnce extends JsDevice {
  armed = false;
  override synchronize(t: number): Promise<void> {
    if (this.armed) {
      this.armed = false;
      return Promise.reject(new KernelFault("js", "injected", 7));
    }
    return super.synchronize(t);
  }
}

test("a fault on one rank fails the group's step with its typed error; the entry needs a reset, after which the group gives the same logits", { timeout: 120_000 }, async () => {
  const m = fixture("llama");
  const plan = tpPlan(m.config, 2);
  const bad = new FaultOnce();
  const group = new RankGroup([new Engine(new JsDevice(), { compile: compileGraph }), new Engine(bad, { compile: compileGraph })], plan);
  try {
    await group.loadWeights(m.store, m.map);
    const id = group.addEntry("decode", stepGraph(m, 1, 16));
    const slots = { token: new Int32Array([7]), pos: new Int32Array([0]) };
    const first = (await group.step(id, slots)).outputs.logits.slice();
    group.resetState();
    bad.armed = true;
    await assert.rejects(group.step(id, slots), (e: unknown) => e instanceof KernelFault && e.kernel === "injected");
    await assert.rejects(group.step(id, slots), NeedsReset);
    group.resetState();
    assert.deepEqual((await group.step(id, slots)).outputs.logits, first);
  } finally {
    await group.unload();
    m.close();
  }
});
