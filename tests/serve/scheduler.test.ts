// The scheduler and the batched step on stories260K, on every device present: greedy tokens equal llama2.c's
// reference; a request's tokens are bit-identical alone and in a batch of 16 (mixed prompt lengths, prefill
// chunks interleaved with decode); a pool too small for everyone preempts and recomputes without changing any
// request's tokens (penalized requests included: their token counts live in device State per slot, rewritten
// from the sequence's tokens when it is readmitted); penalized greedy requests give the Driver's tokens (its
// counts live in State too, marked and counted by its step) with count writes spread over several steps;
// a shared prompt prefix is reused from the cache with the same tokens; cancelling frees every block.
// The tests of a device share its serving engines by the options that shape the compiled step (compiling one is
// most of a test's time on lavapipe): each test takes a fresh scheduler, pool and zeroed State over one (rigOver).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { Device } from "../../backends/device.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";
import { Engine } from "../../backends/executor.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Driver } from "../../llm/driver.ts";
import { collect, model, prompt, type Rig, rig, rigOver } from "./setup.ts";
import { sharingKernels } from "../devices/kernel_cache.ts";

const ref = JSON.parse(readFileSync(new URL("../../models/stories260K/reference_greedy.json", import.meta.url), "utf8")) as {
  cases: { prompt_ids: number[]; generated_ids: number[] }[];
};
const GREEDY = { temperature: 0 };

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  // The batch-of-16 and prefix cases run for a minute on a software fallback adapter: skipped there, said.
  const heavy = skip || slowDevice(dev);
  const engines = new Map<string, Promise<Rig>>();
  /** A scheduler over this device's engine compiled for `shape` (compiled on first use). */
  const shared = async (shape: Parameters<typeof rig>[1] & object, o: { prefixCache?: boolean } = {}): Promise<Rig> => {
    const key = JSON.stringify(shape);
    if (!engines.has(key)) engines.set(key, rig(dev as Device, shape));
    return rigOver((await engines.get(key)!).runner, o);
  };
  const done = async (r: Rig) => await r.sched.shutdown(0);

  test(`serve scheduler on ${backend}: greedy tokens equal the llama2.c reference`, { skip }, async () => {
    const r = await shared({});
    try {
      for (const c of ref.cases) {
        const n = Math.min(48, c.generated_ids.length);
        const got = await collect(r.sched.submit({ promptIds: c.prompt_ids, maxTokens: n, sampler: GREEDY }));
        assert.deepEqual(got.ids, c.generated_ids.slice(0, n));
      }
    } finally {
      await done(r);
    }
  });

  test(`serve scheduler on ${backend}: tokens alone == tokens in a batch of 16; preemption recomputes the same`, { skip: heavy }, async () => {
    const r = await shared({}, { prefixCache: false }); // every prompt row computed, in every batch
    const reqs = Array.from({ length: 16 }, (_, i) => ({
      promptIds: model.tokenizer.encode(prompt(i)),
      maxTokens: 12 + (i % 4) * 6,
      sampler: i % 3 === 2
        ? { temperature: 0.8, topK: 20, seed: i, ...(i % 2 ? { frequencyPenalty: 0.7 } : {}) }
        : i % 3 === 1 ? { ...GREEDY, repeatPenalty: 1.3, frequencyPenalty: 0.5, presencePenalty: 0.4 } : GREEDY,
    }));
    try {
      const alone = [];
      for (const q of reqs) alone.push(await collect(r.sched.submit(q)));
      const together = await Promise.all(reqs.map((q) => collect(r.sched.submit(q))));
      for (let i = 0; i < reqs.length; i++) assert.deepEqual(together[i].ids, alone[i].ids, `request ${i}: batch changed its tokens`);
      assert.ok(alone.some((a) => a.ids.length >= 12));
      assert.equal(r.pool.used, 0, "every block is free again");
    } finally {
      await done(r);
    }
    // A pool of one context plus a block: sequences must be preempted and recomputed, with the same tokens.
    const small = await shared({ ctx: 64, blocks: 64 / 16 + 2 }, { prefixCache: false });
    try {
      const want = [];
      for (const q of reqs.slice(0, 6)) want.push(await collect(small.sched.submit({ ...q, maxTokens: 20 })));
      const got = await Promise.all(reqs.slice(0, 6).map((q) => collect(small.sched.submit({ ...q, maxTokens: 20 }))));
      for (let i = 0; i < want.length; i++) assert.deepEqual(got[i].ids, want[i].ids, `request ${i}: preemption changed its tokens`);
      assert.ok(small.metrics.preemptions > 0, "the small pool preempted");
      assert.equal(small.pool.used, 0);
    } finally {
      await done(small);
    }
  });

  test(`serve scheduler on ${backend}: penalized greedy requests give the Driver's tokens`, { skip: heavy }, async () => {
    const PEN = [
      { temperature: 0, repeatPenalty: 1.5 },
      { temperature: 0, frequencyPenalty: 1.2, presencePenalty: 0.6 },
      { temperature: 0, repeatPenalty: 1.2, frequencyPenalty: -0.4, presencePenalty: 1.5 },
    ];
    const reqs = [0, 4, 9].flatMap((p, i) => PEN.map((sampler) => ({ promptIds: model.tokenizer.encode(prompt(p)), maxTokens: 24 + 4 * i, sampler })));
    const want: number[][] = [];
    const de = new Engine(dev as Device, { compile: sharingKernels(compileGraph), timeoutMs: 120_000, ownsDevice: false });
    try {
      const d = await Driver.open(model, de, { ctx: 128, prefill: [8] });
      for (const q of reqs) want.push((await d.generate(q.promptIds, { maxTokens: q.maxTokens, sampler: q.sampler })).generatedIds);
      await d.close();
    } finally {
      await de.unload();
    }
    // 8 count writes a step: a prompt's marks take several steps, and its first draw waits for them
    const r = await shared({ countWrites: 8 });
    try {
      const got = await Promise.all(reqs.map((q) => collect(r.sched.submit(q))));
      for (let i = 0; i < reqs.length; i++) assert.deepEqual(got[i].ids, want[i], `request ${i}: the batch's penalties differ from the Driver's`);
      let changed = 0;
      for (let i = 0; i < reqs.length; i++) {
        const plain = await collect(r.sched.submit({ ...reqs[i], sampler: GREEDY }));
        if (plain.ids.join() !== got[i].ids.join()) changed++;
      }
      assert.ok(changed >= 5, `the penalties change most continuations (${changed} of ${reqs.length})`);
      assert.equal(r.runner.counts.used, 0, "every counts row is free again");
    } finally {
      await done(r);
    }
  });

  test(`serve scheduler on ${backend}: a shared prompt prefix comes from the cache and gives the same tokens`, { skip: heavy }, async () => {
    const system = model.tokenizer.encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog.");
    const ask = (tail: string) => ({ promptIds: [...system, ...model.tokenizer.encode(tail, { addBos: false })], maxTokens: 16, sampler: GREEDY });
    // One engine for both: the cold scheduler's work ends before the warm one starts over zeroed State.
    const cold = await shared({ block: 8, blocks: 40 }, { prefixCache: false });
    const want = [];
    try {
      for (const t of [" One day", " The dog", " One day"]) want.push(await collect(cold.sched.submit(ask(t))));
      assert.equal(cold.pool.used, 0);
    } finally {
      await done(cold);
    }
    const warm = await shared({ block: 8, blocks: 40 });
    try {
      const full = Math.floor((system.length + 1) / 8); // blocks wholly inside the shared prefix
      assert.ok(full >= 2);
      const first = await collect(warm.sched.submit(ask(" One day")));
      assert.equal(warm.metrics.prefixHits, 0);
      const rest = await Promise.all([" The dog", " One day"].map((t) => collect(warm.sched.submit(ask(t)))));
      assert.deepEqual([first, ...rest].map((x) => x.ids), want.map((x) => x.ids));
      assert.ok(warm.metrics.prefixHits >= 2 * full, `prefix hits ${warm.metrics.prefixHits}`);
      assert.equal(warm.pool.used, 0);
      assert.ok(warm.pool.cached > 0);
      // Filling the pool with other prompts evicts idle cached blocks instead of failing.
      await Promise.all(Array.from({ length: 6 }, (_, i) => collect(warm.sched.submit({ promptIds: model.tokenizer.encode(prompt(i + 20)), maxTokens: 24, sampler: GREEDY }))));
      assert.deepEqual((await collect(warm.sched.submit(ask(" The dog")))).ids, want[1].ids);
    } finally {
      await done(warm);
    }
  });

  test(`serve scheduler on ${backend}: a cancelled sequence is dropped and frees its blocks`, { skip }, async () => {
    const r = await shared({});
    try {
      const h = r.sched.submit({ promptIds: model.tokenizer.encode(prompt(4)), maxTokens: 200, sampler: GREEDY });
      const other = r.sched.submit({ promptIds: model.tokenizer.encode(prompt(1)), maxTokens: 30, sampler: GREEDY });
      let n = 0;
      for await (const e of h) {
        if (e.type === "token" && ++n === 3) break; // leaving the loop cancels
      }
      const o = await collect(other);
      assert.equal(o.ids.length > 0, true);
      // up to 10 s for the step in flight to end (0.5 s was a few lavapipe steps on a loaded machine)
      for (const until = performance.now() + 10_000; performance.now() < until && r.pool.used > 0;) await new Promise((res) => setTimeout(res, 10));
      assert.equal(r.pool.used, 0);
      assert.equal(r.sched.runningCount, 0);
    } finally {
      await done(r);
    }
  });

  test(`serve scheduler on ${backend}: the shared engines unload`, { skip }, async () => {
    for (const e of engines.values()) await (await e).engine.unload();
  });
}
