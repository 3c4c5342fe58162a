// The library surface a user meets first: open() with defaults, close() and asyncDispose free the device,
// calls on one driver are queued (Promise.all gives what sequential calls give), an AbortSignal stops within
// one token, the streamed text equals the returned text (stop strings, held-back text, the decoder's flush),
// and bad arguments are InvalidArgumentError naming the argument. stories260K on the JS device.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  AbortError, ContextLengthError, ContextOverflowError, DEFAULT_MAX_TOKENS, type Driver, DriverClosedError, InvalidArgumentError, type LoadProgress, open,
} from "../../mod.ts";
import { type Engine, loadModel } from "../../engine.ts";
import type { JsDevice } from "../../backends/js/device.ts";

const PATH = fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url));
const model = loadModel(PATH);
const PROMPT = "Once upon a time";

const allocated = (d: Driver) => ((d.exec as Engine<JsDevice>).device as JsDevice).allocated;

async function collect(s: AsyncIterable<{ text: string }>): Promise<string> {
  let out = "";
  for await (const e of s) out += e.text;
  return out;
}

test("kvDtype: auto keeps f32 for stories260K's f32 matrices; f16 halves the K/V cache and generates; another value is InvalidArgumentError", async () => {
  const c = model.config, ctx = 64;
  const a = await open({ model: PATH, backend: "js", ctx, kvDtype: "auto" });
  const b = await open({ model: PATH, backend: "js", ctx, kvDtype: "f16" });
  try {
    assert.equal(a.kvDtype, "f32");
    assert.equal(b.kvDtype, "f16");
    // K and V of every layer: 4 bytes an element against 2
    assert.equal(allocated(a) - allocated(b), 2 * c.layers * ctx * c.kvHeads * c.headDim * 2);
    const r = await b.generate(PROMPT, { maxTokens: 8 });
    assert.equal(r.generatedIds.length, 8);
  } finally {
    await a.close();
    await b.close();
  }
  await assert.rejects(open({ model: PATH, backend: "js", ctx, kvDtype: "bf16" as "f16" }), (e) => e instanceof InvalidArgumentError && e.argument === "kvDtype");
});

test("open(): a path and a backend give a ready driver; progress is reported; close() frees the device", async () => {
  const seen: LoadProgress[] = [];
  const d = await open({ model: PATH, backend: "js", ctx: 64, onProgress: (p) => seen.push(p) });
  assert.ok(allocated(d) > 0);
  const load = seen.filter((p) => p.phase === "load");
  const compile = seen.filter((p) => p.phase === "compile");
  assert.equal(load.length, model.map.size, "one load event per tensor");
  const lastLoad = load.at(-1)!;
  assert.ok(lastLoad.phase === "load" && lastLoad.bytes === lastLoad.totalBytes && lastLoad.bytes > 0);
  assert.ok(compile.length >= 1 && compile.at(-1)!.phase === "compile");
  const r = await d.generate(PROMPT, { maxTokens: 8 });
  assert.equal(r.generatedIds.length, 8);
  await d.close();
  assert.equal(allocated(d), 0, "every device buffer freed");
  await d.close(); // idempotent
  await assert.rejects(d.generate(PROMPT), DriverClosedError);
  assert.throws(() => d.stream(PROMPT), DriverClosedError);
});

test("open(): `await using` closes the driver at the end of the scope", async () => {
  let d: Driver | undefined;
  {
    await using llm = await open({ model, backend: "js", ctx: 32 });
    d = llm;
    assert.ok(allocated(d) > 0);
  }
  assert.equal(allocated(d!), 0);
});

test("open(): bad options are typed errors naming the option, and nothing stays on the device", async () => {
  await assert.rejects(open({ model: 42 as unknown as string }), (e) => e instanceof InvalidArgumentError && e.argument === "model");
  await assert.rejects(open({ model, backend: "cuda" as "js" }), (e) => e instanceof InvalidArgumentError && e.argument === "backend");
  await assert.rejects(open({ model, backend: "js", ctx: 16.5 }), (e) => e instanceof InvalidArgumentError && e.argument === "ctx");
  await assert.rejects(open({ model, backend: "js", ctx: 1_000_000 }), (e) => e instanceof ContextLengthError && /trained for/.test(e.message));
  assert.throws(() => loadModel(7 as unknown as string), (e) => e instanceof InvalidArgumentError && e.argument === "path");
});

test("driver: concurrent calls are queued in call order and give the sequential texts", async () => {
  await using d = await open({ model, backend: "js", ctx: 128 });
  const opts = [{ maxTokens: 20 }, { maxTokens: 12, sampler: { temperature: 0.9, topK: 20, seed: 3 } }, { maxTokens: 16, stop: ["Lily"] }];
  const prompts = [PROMPT, "The cat sat on the mat", "Lily"];
  const sequential = [];
  for (let i = 0; i < 3; i++) sequential.push((await d.generate(prompts[i], opts[i])).text);
  const order: number[] = [];
  const together = await Promise.all(prompts.map((p, i) => d.generate(p, opts[i]).then((r) => (order.push(i), r.text))));
  assert.deepEqual(together, sequential);
  assert.deepEqual(order, [0, 1, 2], "finished in call order");
  // A stream and a generate issued together: the stream's text is its own, not interleaved.
  const s = d.stream(PROMPT, { maxTokens: 20 });
  const g = d.generate(prompts[1], opts[1]);
  assert.equal(await collect(s), sequential[0]);
  assert.equal((await g).text, sequential[1]);
});

test("driver: the streamed text equals the result's text (held-back stop prefixes and the flush are streamed)", async () => {
  await using d = await open({ model, backend: "js", ctx: 128 });
  for (const o of [
    { maxTokens: 10, stop: ["Lily!", "little boy"] }, // ends holding "Lily" as a possible prefix of "Lily!"
    { maxTokens: 40, stop: ["Lily"] },                // ends at a stop string
    { maxTokens: 30 },
    { maxTokens: 1 },
  ]) {
    const s = d.stream(PROMPT, o);
    const streamed = await collect(s);
    const r = await s.result;
    assert.equal(streamed, r.text, JSON.stringify(o));
  }
  const held = await d.generate(PROMPT, { maxTokens: 10, stop: ["Lily!", "little boy"] });
  assert.match(held.text, /named Lily$/);
  assert.equal(held.finish, "length");
  // The older AsyncGenerator shape still works: next() ends with the result as its value.
  const it = d.stream(PROMPT, { maxTokens: 5 });
  let n = await it.next();
  let text = "";
  while (!n.done) {
    text += n.value.text;
    n = await it.next();
  }
  assert.equal(text, n.value.text);
  assert.equal(n.value.generatedIds.length, 5);
});

test("driver: an AbortSignal stops within one token; leaving a for-await loop aborts; the driver stays usable", async () => {
  await using d = await open({ model, backend: "js", ctx: 128 });
  const full = await d.generate(PROMPT, { maxTokens: 40 });
  const ac = new AbortController();
  const s = d.stream(PROMPT, { maxTokens: 40, signal: ac.signal });
  let seen = 0, text = "";
  await assert.rejects(
    (async () => {
      for await (const e of s) {
        seen++;
        text += e.text;
        if (seen === 3) ac.abort();
      }
    })(),
    AbortError,
  );
  const err = await s.result.catch((e) => e);
  assert.ok(err instanceof AbortError && err.partial, "the partial result comes with the error");
  assert.ok(err.partial.generatedIds.length <= seen + 1, `stopped within one token (${err.partial.generatedIds.length} after ${seen} seen)`);
  assert.deepEqual(err.partial.generatedIds, full.generatedIds.slice(0, err.partial.generatedIds.length));
  assert.ok(full.text.startsWith(text));

  // A timer's signal fires although the JS device's steps never wait on I/O (the driver yields to timers).
  // Timed from the call to its return: opening (compiling the model on the JS device, slow under Bun on a loaded
  // machine) and closing are outside the bound. A loop that never yielded to timers runs all 2000 tokens.
  const long = await open({ model, backend: "js", ctx: 2048 });
  const t0 = performance.now();
  const timed = await long.generate(PROMPT, { maxTokens: 2000, signal: AbortSignal.timeout(100) }).catch((e) => e);
  const took = performance.now() - t0;
  await long.close();
  assert.ok(timed instanceof AbortError && timed.partial!.generatedIds.length < 2000, "AbortSignal.timeout stopped it");
  assert.ok(took < 5000, `soon after the timeout (${took.toFixed(0)} ms)`);

  // Already aborted: never runs.
  await assert.rejects(d.generate(PROMPT, { signal: AbortSignal.abort() }), (e) => e instanceof AbortError && e.partial === undefined);

  // break out of the loop: the generation is aborted, result rejects, the next call runs normally.
  const b = d.stream(PROMPT, { maxTokens: 40 });
  for await (const _ of b) break;
  await assert.rejects(b.result, AbortError);
  assert.equal((await d.generate(PROMPT, { maxTokens: 40 })).text, full.text);
});

test("driver: close() aborts the running call and refuses the queued ones", async () => {
  const d = await open({ model, backend: "js", ctx: 128 });
  const a = d.stream(PROMPT, { maxTokens: 100 });
  const b = d.generate(PROMPT, { maxTokens: 100 });
  await a.next(); // the first call is running
  await d.close();
  await assert.rejects(a.result, (e) => e instanceof AbortError && e.partial!.generatedIds.length < 100);
  await assert.rejects(b, DriverClosedError);
  assert.equal(allocated(d), 0);
});

test("driver: bad arguments are InvalidArgumentError naming the argument, checked before anything runs", async () => {
  await using d = await open({ model, backend: "js", ctx: 32 });
  const arg = (name: string) => (e: unknown) => e instanceof InvalidArgumentError && e.argument === name;
  await assert.rejects(d.encode([1, 99999]), arg("ids[1]"));
  await assert.rejects(d.encode([]), arg("ids"));
  await assert.rejects(d.encode([1.5]), arg("ids[0]"));
  await assert.rejects(d.encode("abc" as unknown as number[]), arg("ids"));
  await assert.rejects(d.encode(new Array(40).fill(1)), ContextOverflowError);
  await assert.rejects(d.generate(123 as unknown as string), arg("prompt"));
  await assert.rejects(d.generate({} as unknown as string), arg("prompt"));
  await assert.rejects(d.generate([1, -1]), arg("prompt[1]"));
  await assert.rejects(d.generate([]), arg("prompt"));
  await assert.rejects(d.generate(PROMPT, { maxTokens: NaN }), arg("maxTokens"));
  await assert.rejects(d.generate(PROMPT, { maxTokens: -1 }), arg("maxTokens"));
  await assert.rejects(d.generate(PROMPT, { maxTokens: 2.5 }), arg("maxTokens"));
  await assert.rejects(d.generate(PROMPT, { sampler: { topP: 2 } }), arg("sampler"));
  await assert.rejects(d.generate(PROMPT, { stop: "x" as unknown as string[] }), arg("stop"));
  const zero = await d.generate(PROMPT, { maxTokens: 0 });
  assert.deepEqual([zero.generatedIds, zero.text, zero.finish], [[], "", "length"]);
  assert.ok(DEFAULT_MAX_TOKENS > 0);
});
