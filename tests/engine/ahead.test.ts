// Steps in flight (Engine StepOptions.instance) with the token fed on the device (StepShape.feed): stories260K's
// greedy tokens with K steps launched back to back, every step after the first reading the token its
// predecessor sampled (token slot -1), equal llama2.c's reference (reference_greedy.json) and the one-at-a-time
// loop's; K launches cost one synchronize; a bad instance is an ExecError. On every device present.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Engine, type Launched, MAX_INSTANCES } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { ExecError } from "../../backends/errors.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { loadModel } from "../../llm/model.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { feedToken } from "../../llm/families/common.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";

const DIR = new URL("../../models/stories260K/", import.meta.url);
const gguf = loadModel(fileURLToPath(new URL("stories260K.gguf", DIR)));
const ref = JSON.parse(readFileSync(new URL("reference_greedy.json", DIR), "utf8")) as {
  cases: { prompt_ids: number[]; steps: number; generated_ids: number[] }[];
};

function fedGraph(cap: number) {
  const { tracer, logits } = traceLlama(gguf.config, { rows: 1, cap, feed: true });
  const token = tracer.argmax(logits, 1);
  tracer.output("token", token);
  feedToken(tracer, token);
  return tracer.build();
}

/** Counts synchronize calls on the way to a device. */
function counting(dev: Device): { dev: Device; syncs: () => number } {
  let n = 0;
  const sync = (ms: number, mark?: number) => {
    n++;
    return dev.synchronize(ms, mark);
  };
  // a Proxy, not a prototype: devices keep #private fields, which need the real object as `this`
  const wrapped = new Proxy(dev, {
    get(t, k) {
      if (k === "synchronize") return sync;
      const v = Reflect.get(t, k, t);
      return typeof v === "function" ? v.bind(t) : v;
    },
  });
  return { dev: wrapped, syncs: () => n };
}

/**
 * Greedy generation of case `c` with `ahead` steps in flight: prompt positions take the prompt's token, the rest
 * -1 (the device's own), except the first step of all; stops at token 1 (llama2.c's BOS ends its runs).
 */
async function generate(eng: Engine<Device>, id: number, c: { prompt_ids: number[]; steps: number }, ahead: number): Promise<number[]> {
  eng.resetState();
  const out: number[] = [];
  for (let pos = 0; pos < c.steps;) {
    const launched: Launched[] = [];
    for (let i = 0; i < ahead && pos + i < c.steps; i++) {
      const p = pos + i, token = p < c.prompt_ids.length ? c.prompt_ids[p] : -1;
      launched.push(eng.launch(id, { token: new Int32Array([token]), pos: new Int32Array([p]) }, { instance: i }));
    }
    let stop = false;
    for (const l of launched) {
      const next = (await eng.finish(l)).outputs.token[0];
      pos++;
      if (stop || pos < c.prompt_ids.length) continue; // a prompt position's draw, or one after the end
      if (next === 1) stop = true; // the steps launched after it still finish (their tokens are dropped)
      else out.push(next);
    }
    if (stop) break;
  }
  return out;
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = slowDevice(dev);

  test(`stories260K on ${backend}: 1, 3 and 8 fed steps in flight give the reference's greedy tokens`, { skip, timeout: 300_000 }, async () => {
    const { dev: d, syncs } = counting(dev as Device);
    const eng = new Engine(d, { compile: compileGraph, timeoutMs: 120_000, ownsDevice: false });
    try {
      await eng.loadWeights(gguf.store, gguf.map);
      const id = eng.addEntry("decode+fed", fedGraph(256));
      for (const c of ref.cases) {
        for (const ahead of [1, 3, 8]) {
          const s0 = syncs();
          const got = await generate(eng, id, c, ahead);
          assert.deepEqual(got, c.generated_ids, `${ahead} in flight`);
          // one wait per block of launches (and at most one more for resetState's fills on some devices); where the
          // device marks its launches (ptx: Device.mark), one per launch, each step waiting for its own
          const waits = (dev as Device).mark ? c.steps : Math.ceil(c.steps / ahead);
          assert.ok(syncs() - s0 <= waits + 1, `${syncs() - s0} synchronizes for ${c.steps} steps, ${ahead} in flight`);
        }
      }
      assert.equal(eng.stats().entries, 1);
    } finally {
      await eng.unload();
    }
  });

  test(`${backend}: an instance outside [0, ${MAX_INSTANCES}) is an ExecError, and the entry still steps`, { skip }, async () => {
    const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: 120_000, ownsDevice: false });
    try {
      await eng.loadWeights(gguf.store, gguf.map);
      const id = eng.addEntry("decode+fed", fedGraph(16));
      const slots = { token: new Int32Array([1]), pos: new Int32Array([0]) };
      for (const bad of [-1, 1.5, MAX_INSTANCES]) assert.throws(() => eng.launch(id, slots, { instance: bad }), ExecError);
      const r = await eng.step(id, slots, { instance: 2 });
      assert.equal(r.outputs.token.length, 1);
    } finally {
      await eng.unload();
    }
  });
}

/**
 * A JS device that logs its replays ("R") and waits ("S", then the mark waited for), and with `marks` has Device.mark
 * ("M"). The JS device runs its queue at synchronize whatever the mark: the order and the marks are what is checked.
 */
async function logged(marks: boolean): Promise<{ dev: Device; order: string[]; marks: () => number }> {
  const { JsDevice } = await import("../../backends/js/device.ts");
  const order: string[] = [];
  let n = 0;
  const dev = new Proxy(new JsDevice({}), {
    get(t, k) {
      if (k === "mark") return marks ? () => (order.push("M"), ++n) : undefined;
      const v = Reflect.get(t, k, t);
      const log = (name: (a: unknown[]) => string) => (...a: unknown[]) => (order.push(name(a)), (v as (...x: unknown[]) => unknown).apply(t, a));
      if (k === "replay") return log(() => "R");
      if (k === "synchronize") return log((a) => `S${a[1] ?? ""}`);
      return typeof v === "function" ? v.bind(t) : v;
    },
  }) as unknown as Device;
  return { dev, order, marks: () => n };
}

test("Engine.step with `queued`: steps started in one synchronous loop are all launched before the first wait (without it, the first waits before the second launches); the same tokens", async () => {
  const { dev, order } = await logged(false);
  const eng = new Engine(dev, { compile: compileGraph, timeoutMs: 120_000 });
  try {
    await eng.loadWeights(gguf.store, gguf.map);
    const id = eng.addEntry("decode+fed", fedGraph(16));
    const run = async (queued: boolean) => {
      eng.resetState();
      for (let i = 0; i < 3; i++) await eng.step(id, { token: new Int32Array([i ? -1 : 1]), pos: new Int32Array([i]) }, { instance: i }); // records each instance
      eng.resetState();
      order.length = 0;
      const steps = [0, 1, 2].map((i) => eng.step(id, { token: new Int32Array([i ? -1 : 1]), pos: new Int32Array([i]) }, { instance: i, queued }));
      const tokens = (await Promise.all(steps)).map((r) => r.outputs.token[0]);
      return { order: order.filter((x) => x === "R" || x === "S").join(""), tokens };
    };
    const plain = await run(false), queued = await run(true);
    assert.equal(plain.order.slice(0, 3), "RSR", "without it the first step's wait comes before the second launch");
    assert.equal(queued.order.slice(0, 4), "RRRS", "with it every launch comes before the first wait");
    assert.deepEqual(queued.tokens, plain.tokens);
  } finally {
    await eng.unload();
  }
});

test("Engine.step on a device with marks: each launch takes a mark and its step waits for that mark only (a step in flight does not wait for the ones behind it); the same tokens", async () => {
  const { dev, order, marks } = await logged(true);
  const eng = new Engine(dev, { compile: compileGraph, timeoutMs: 120_000 });
  try {
    await eng.loadWeights(gguf.store, gguf.map);
    const id = eng.addEntry("decode+fed", fedGraph(16));
    const first = async (queued: boolean) => {
      eng.resetState();
      order.length = 0; // (the reset's own replay)
      const steps = [0, 1, 2].map((i) => eng.step(id, { token: new Int32Array([i ? -1 : 1]), pos: new Int32Array([i]) }, { instance: i, queued }));
      return (await Promise.all(steps)).map((r) => r.outputs.token[0]);
    };
    const want = await first(true); // records each instance
    const m0 = marks();
    const got = await first(true);
    const syncs = order.filter((x) => x.startsWith("S"));
    assert.equal(order.filter((x) => x === "R" || x === "M").join(""), "RMRMRM", "a mark after each launch");
    assert.deepEqual(syncs, [`S${m0 + 1}`, `S${m0 + 2}`, `S${m0 + 3}`], `each step waits for its own mark, in order: ${order.join(" ")}`);
    assert.deepEqual(got, want);
  } finally {
    await eng.unload();
  }
});
