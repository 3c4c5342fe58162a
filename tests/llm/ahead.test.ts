// The Driver with decode steps in flight (DriverOptions.stepsAhead) on stories260K, on every device present: a
// generation's tokens, text and finish equal those of one step at a time, greedy and seeded sampling alike,
// whether it ends by length, a stop string or the context inside a run of launched steps; the next
// generation after such an early end is unaffected (the extra steps were drained); a grammar or penalties
// run one step at a time; a bad value is a typed error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import type { Device } from "../../backends/device.ts";
import { InvalidArgumentError } from "../../llm/errors.ts";
import type { GenerateOptions, GenerateResult } from "../../llm/options.ts";
import { AheadSteps, type Next, type Steps } from "../../llm/steps.ts";
import type { RowContext } from "../../llm/sampling.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";

const model = loadModel(fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url)));

const JOBS: [string, GenerateOptions][] = [
  ["Once upon a time", { maxTokens: 40 }],
  ["Once upon a time", { maxTokens: 60, stop: ["Lily"] }], // stops on the 9th token: inside a run of 4 or 8
  ["The cat sat on the mat", { maxTokens: 21, sampler: { temperature: 0.9, topK: 20, seed: 3 } }],
  ["Once upon a time", { maxTokens: 300 }], // ends by the context (256): no step launched past it
  ["Once upon a time", { maxTokens: 7 }], // fewer tokens than a run
  ["Tom", { maxTokens: 12, sampler: { repeatPenalty: 1.3 } }], // the full sampler: one step at a time
];

const strip = (r: GenerateResult) => ({ ids: r.generatedIds, text: r.text, finish: r.finish });

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = slowDevice(dev);

  test(`driver on ${backend}: 1, 4 and 8 steps in flight generate the same`, { skip, timeout: 300_000 }, async () => {
    const want: ReturnType<typeof strip>[] = [];
    for (const ahead of [1, 4, 8]) {
      const engine = new Engine(dev as Device, { compile: compileGraph, ownsDevice: false });
      const driver = await Driver.open(model, engine, { ctx: 256, prefill: [16, 4], stepsAhead: ahead });
      try {
        const keys = engine.stats().keys;
        assert.equal(keys.some((k) => k.includes(":rows=1:") && k.includes("sampler+fed")), ahead > 1, keys.join(" "));
        for (const [i, [prompt, o]] of JOBS.entries()) {
          const got = strip(await driver.generate(prompt, o));
          if (ahead === 1) want.push(got);
          else assert.deepEqual(got, want[i], `job ${i} with ${ahead} in flight`);
        }
        assert.deepEqual(want.map((w) => w.finish), ["length", "stop", "length", "context", "length", "length"]);
      } finally {
        await driver.close();
      }
    }
  });
}

test("AheadSteps: once a block's first draw is in, the next block goes out on the other bank; a bank is reused once its last block's draws are read", async () => {
  // a Steps that records each launch and lets the test settle its draws
  const runs: { token: number; pos: number; instance: number; done: (n: Next) => void }[] = [];
  const steps = {
    ahead: 4,
    run: (_id: number, tokens: number[], pos: number, ...rest: unknown[]) =>
      new Promise<Next>((done) => runs.push({ token: tokens[0], pos, instance: (rest[4] as { instance: number }).instance, done })),
  } as unknown as Steps;
  const a = new AheadSteps(steps, 0, {}, {} as RowContext);
  const draw = (i: number) => runs[i].done({ token: 100 + i, nonFinite: false });
  const tick = () => new Promise((r) => setTimeout(r, 0));
  const first = a.next(7, 10, 9); // room for 9 steps: blocks of 4, 4, 1
  assert.deepEqual(runs.map((r) => [r.token, r.pos, r.instance]), [[7, 10, 0], [-1, 11, 1], [-1, 12, 2], [-1, 13, 3]]);
  await tick();
  assert.equal(runs.length, 4, "nothing more before the first draw");
  draw(0);
  assert.equal((await first).token, 100);
  await tick();
  assert.deepEqual(runs.slice(4).map((r) => [r.token, r.pos, r.instance]), [[-1, 14, 4], [-1, 15, 5], [-1, 16, 6], [-1, 17, 7]], "block 2, fed, bank 1");
  // block 2's first draw before block 1's others: bank 0 is not reused until block 1's draws are all in
  draw(4);
  await tick();
  assert.equal(runs.length, 8, "block 3 waits for block 1's outputs to be read");
  for (let i = 1; i < 4; i++) draw(i);
  await tick();
  assert.deepEqual(runs.slice(8).map((r) => [r.token, r.pos, r.instance]), [[-1, 18, 0]], "the last step the room allows, bank 0 again");
  for (let i = 1; i < 5; i++) assert.equal((await a.next(0, 0, 0)).token, 100 + i, "draws in launch order");
  // an early end: drain waits for what is in flight, and nothing launches after it
  const ended = a.drain();
  for (let i = 5; i < runs.length; i++) draw(i);
  await ended;
  await tick();
  assert.equal(runs.length, 9);
});

test("driver: stepsAhead outside 1..64 is an InvalidArgumentError", async () => {
  const { JsDevice } = await import("../../backends/js/device.ts");
  for (const bad of [0, 1.5, 65, -1]) {
    const engine = new Engine(new JsDevice({}), { compile: compileGraph });
    await assert.rejects(Driver.open(model, engine, { ctx: 64, prefill: [4], stepsAhead: bad }), (e: unknown) => e instanceof InvalidArgumentError && /stepsAhead/.test((e as Error).message));
    await engine.unload();
  }
});
