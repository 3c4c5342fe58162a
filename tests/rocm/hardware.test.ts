// RocmDevice on a real AMD GPU (skips without libhsa-runtime64 or a ROCm agent, and where this tree's comgr
// cannot build the agent's target): every IR feature kernel against the JS device, the kernel library's
// conformance cases against their references, record + replay against eager bit for bit with slot writes and
// a copy step, staging and readback paths, an Engine decode of a Llama step, and, in child processes (a
// trap leaves the queue unusable), a failing check -> KernelFault naming the kernel, poisoning and refusal,
// and the bounded wait. Never run on hardware yet: no AMD GPU has been lent to this project.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { probeRocm } from "../../backends/rocm/mod.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { cases as libraryCases } from "../kernels/cases.ts";
import { assertCase, runCase } from "../kernels/harness.ts";
import { featureCases } from "../devices/feature_kernels.ts";
import { randomLlama, TINY_LLAMA } from "../ptx/model.ts";
import { compareRuns, readAll, runFeature, stepOf, upload } from "../devices/run.ts";
import { expectPhase } from "../ptx/child.ts";
import { child } from "./child.ts";

const probe = await probeRocm();
const skip = typeof probe === "string" ? probe : false;
const dev = typeof probe === "string" ? undefined : probe;
const T = 60_000;
const opts = { skip, timeout: 600_000 };

test("RocmDevice reports its agent", opts, () => {
  const t = dev!.target;
  assert.equal(t.backend, "rocm");
  assert.ok([32, 64].includes(t.caps.subgroupSize));
  assert.ok(t.caps.maxSharedBytes >= 32 * 1024);
  assert.ok(t.memory.totalBytes > 1e9);
  console.log(`rocm: ${t.device}, ${dev!.agent.isa}, wave${t.caps.subgroupSize}, ${dev!.agent.computeUnits} CUs, ${(t.memory.totalBytes / 2 ** 30).toFixed(1)} GiB, LDS ${t.caps.maxSharedBytes} B, queue ${dev!.ring.size} packets`);
});

const features = featureCases();
test(`IR feature kernels (${features.length}) on ROCm equal the JS device (ulp bounds per output)`, opts, async () => {
  const js = new JsDevice({ caps: { subgroupSize: dev!.target.caps.subgroupSize, f16: true } });
  const bad: string[] = [];
  for (const c of features) {
    const want = await runFeature(js, c);
    try {
      bad.push(...compareRuns(c, want, await runFeature(dev!, c, T)));
    } catch (e) {
      bad.push(`${c.name}: ${(e as Error).message}`);
      if (dev!.poisoned) break;
    }
  }
  assert.deepEqual(bad, []);
});

const libOk = libraryCases.filter((kc) => kc.fault === undefined);
test(`kernel library conformance cases (${libOk.length}) on ROCm match their references`, opts, async () => {
  const bad: string[] = [];
  for (const kc of libOk) {
    try {
      assertCase(kc, await runCase(dev!, kc, T));
    } catch (e) {
      bad.push((e as Error).message.split("\n").slice(0, 4).join(" | "));
      if (dev!.poisoned) break;
    }
  }
  assert.deepEqual(bad, [], `${bad.length} of ${libOk.length} failed`);
});

test("record + replay equals run bit for bit, with a copy step and a slot written before each replay", opts, async () => {
  const d = dev!;
  const chain = features.filter((c) => ["unary_f32", "binary_f32", "control", "shared_barrier"].includes(c.name));
  const control = chain.find((c) => c.name === "control")!;
  const make = () => chain.map((c) => {
    const bufs = upload(d, c);
    if (c === control) {
      bufs[0] = d.alloc(c.inputs[0].byteLength, "upload");
      d.write(bufs[0], 0, c.inputs[0]);
    }
    return bufs;
  });
  const eagerBufs = make(), replayBufs = make();
  const steps = (bufs: ReturnType<typeof make>) => {
    const list = chain.map((c, i) => stepOf(d, c, bufs[i]));
    const u = chain.findIndex((c) => c.name === "unary_f32"), b = chain.findIndex((c) => c.name === "binary_f32");
    list.splice(b, 0, { k: "copy", src: { buffer: bufs[u][1], offset: 0, bytes: 1024 }, dst: { buffer: bufs[b][0], offset: 0, bytes: 1024 }, work: { bytes: 2048, flops: 0 } });
    return list;
  };
  const rec = d.record(steps(replayBufs));
  const slotOf = (bufs: ReturnType<typeof make>) => bufs[chain.indexOf(control)][0];
  for (const bounds of [[100, 1000], [37, 555], [128, 1024]]) {
    const p = new Uint8Array(Uint32Array.from(bounds).buffer);
    d.write(slotOf(eagerBufs), 0, p);
    d.write(slotOf(replayBufs), 0, p);
    d.run(steps(eagerBufs));
    d.replay(rec);
    await d.synchronize(T);
    const a = await Promise.all(eagerBufs.map((b) => readAll(d, b))), b = await Promise.all(replayBufs.map((x) => readAll(d, x)));
    a.forEach((bufs, i) => bufs.forEach((x, j) => assert.deepEqual(b[i][j], x, `${chain[i].name} binding ${j} with bounds ${bounds}`)));
  }
  d.releaseRecording(rec);
  for (const bufs of [...eagerBufs, ...replayBufs]) for (const b of bufs) d.free(b);
});

test("odd-sized and large writes (through staging), reads of part of a buffer", opts, async () => {
  const d = dev!;
  const big = new Uint8Array(13 * (1 << 20) + 5);
  for (let i = 0; i < big.length; i++) big[i] = (i * 2654435761) >>> 24;
  const a = d.alloc(big.length, "device");
  d.write(a, 0, big);
  d.write(a, 7, new Uint8Array([1, 2, 3]));
  big.set([1, 2, 3], 7);
  await d.synchronize(T);
  assert.deepEqual(await d.read(a, 0, big.length), big);
  assert.deepEqual(await d.read(a, (1 << 20) + 3, 33), big.subarray((1 << 20) + 3, (1 << 20) + 36));
  d.free(a);
});

test("Engine<RocmDevice> decodes a Llama step: replayed == eager bit for bit, close to the JS device; host µs per step", opts, async () => {
  const { store, map, dtypeOf } = randomLlama(TINY_LLAMA, 3, true);
  const { tracer, logits } = traceLlama(TINY_LLAMA, { rows: 1, cap: 64 }, { dtypeOf });
  tracer.output("token", tracer.argmax(logits, 1));
  tracer.output("logits", logits);
  const graph = tracer.build();
  const decode = async (d: Device, owns: boolean) => {
    const eng = new Engine(d, { compile: compileGraph, timeoutMs: T, ownsDevice: owns });
    await eng.loadWeights(store, map);
    const id = eng.addEntry("decode", graph);
    const run = async (eager: boolean) => {
      eng.resetState();
      const out: Float32Array[] = [];
      for (let pos = 0; pos < 32; pos++) out.push((await eng.step(id, { token: new Int32Array([(pos * 7) % 300]), pos: new Int32Array([pos]) }, { eager })).outputs.logits as Float32Array);
      return out;
    };
    const a = await run(false), b = await run(true);
    const stats = eng.stats();
    await eng.unload();
    return { a, b, stats };
  };
  const got = await decode(dev!, false);
  got.a.forEach((l, i) => {
    assert.ok(l.every(Number.isFinite));
    assert.deepEqual(l, got.b[i], `step ${i}`);
  });
  const want = await decode(new JsDevice({ caps: { subgroupSize: dev!.target.caps.subgroupSize, f16: true } }), true);
  got.a.forEach((l, i) => {
    const worst = l.reduce((m, v, j) => Math.max(m, Math.abs(v - want.a[i][j])), 0);
    assert.ok(worst < 1e-2, `step ${i}: worst ${worst}`);
  });
  console.log(`rocm: ${got.stats.hostMicrosPerStep.toFixed(0)} µs per step (${got.stats.waitMicrosPerStep.toFixed(0)} waiting for the device)`);
});

test("a failing check, a replayed fault and a stuck kernel, each in a child process", opts, () => {
  for (const phase of ["eager", "graph", "timeout"] as const) {
    const r = child(phase);
    if (r.skip) continue;
    expectPhase[phase](r);
  }
});

test("destroy releases the device", opts, async () => {
  await dev!.destroy();
  assert.ok(dev!.poisoned);
});
