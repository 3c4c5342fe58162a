// PtxDevice's own logic without a GPU, over FakeCuda (fake_cuda.ts): kernels run through the JS renderer, so
// results must equal the JS device's exactly; the staging ring, readback mapping, capture and replay, fault
// words, poisoning and the bounded wait are PtxDevice's real code paths.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Cuda } from "../../ffi/cuda.ts";
import type { Device } from "../../backends/device.ts";
import { DeviceTimeout, KernelFault, Poisoned } from "../../backends/errors.ts";
import { Engine } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { PtxDevice } from "../../backends/ptx/mod.ts";
import { type Kernel, KernelBuilder } from "../../kernels/ir.ts";
import { entryName } from "../../kernels/render/ptx.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { checkCase, featureCases } from "../devices/feature_kernels.ts";
import { resolveOptions } from "../../backends/ptx/options.ts";
import { FakeCuda } from "./fake_cuda.ts";
import { randomLlama, TINY_LLAMA } from "./model.ts";
import { compareRuns, readAll, runFeature, sameBytesModNaN, stepOf, upload } from "../devices/run.ts";
import { child, expectPhase } from "./child.ts";
import { cases as libraryCases } from "../kernels/cases.ts";

function fake(): { cu: FakeCuda; dev: PtxDevice; reg: (k: Kernel) => Kernel } {
  const cu = new FakeCuda();
  const dev = new PtxDevice(cu as unknown as Cuda, { spinMicros: 1000 });
  const reg = (k: Kernel) => {
    cu.kernels.set(entryName(k.name), k);
    return k;
  };
  return { cu, dev, reg };
}
function guard(name: string, code: number): Kernel {
  const b = new KernelBuilder(name, { workgroup: 64, grid: 4 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "w");
  const v = b.let(b.load(x, b.gid.x), "f32");
  b.check(v.lt(1000), code);
  b.store(y, b.gid.x, v.add(1));
  return b.build();
}

test("fake CUDA: the target comes from device attributes", () => {
  const { dev } = fake();
  assert.equal(dev.target.backend, "ptx");
  assert.equal(dev.target.device, "Fake H200");
  assert.equal(dev.sm, 90);
  assert.equal(dev.target.caps.subgroupSize, 32);
  assert.equal(dev.target.caps.maxSharedBytes, 232448);
  assert.deepEqual(dev.target.caps.maxWorkgroupsPerDim, [2 ** 31 - 1, 65535, 65535]);
  assert.equal(dev.target.watchdogBudget, 0);
});

test("fake CUDA: feature kernels through PtxDevice's bindings equal the JS device", { timeout: 60_000 }, async () => {
  const { dev, reg } = fake();
  const js = new JsDevice({ caps: { subgroupSize: 32, f16: true } });
  const bad: string[] = [];
  for (const c of featureCases().filter((c) => c.name !== "big_shared")) {
    reg(c.kernel);
    const want = await runFeature(js, c), got = await runFeature(dev, c);
    bad.push(...compareRuns(c, want, got, 3));
    // Same code ran on both sides: every byte must agree, not just within the tolerance (a NaN's payload aside).
    assert.equal(sameBytesModNaN(c, want, got), "");
  }
  assert.deepEqual(bad, []);
});

test("fake CUDA: large writes wrap the staging ring, zero writes become memsets, reads return the bytes", { timeout: 60_000 }, async () => {
  const { cu, dev } = fake();
  const big = new Uint8Array(9 * (1 << 20) + 3);
  for (let i = 0; i < big.length; i++) big[i] = (i * 2654435761) >>> 24;
  const a = dev.alloc(big.length, "device");
  dev.write(a, 0, big);
  const copies = cu.calls.filter((c) => c === "memcpyHtoDAsync").length;
  assert.equal(copies, 3); // 4 MiB halves
  assert.ok(cu.calls.includes("eventRecord"), "a half was fenced before reuse");
  dev.write(a, 5, new Uint8Array([9, 9]));
  big.set([9, 9], 5);
  const before = cu.calls.length;
  dev.write(a, 1 << 20, new Uint8Array(1 << 20));
  assert.deepEqual(cu.calls.slice(before), ["memsetD8Async"]);
  big.fill(0, 1 << 20, 2 << 20);
  await dev.synchronize(1000);
  assert.deepEqual(await dev.read(a, 0, big.length), big);
  assert.deepEqual(await dev.read(a, 3, 17), big.subarray(3, 20));
  assert.throws(() => dev.write(a, big.length - 1, new Uint8Array(2)));
  await dev.destroy();
  assert.equal(cu.liveAllocations, 0, "destroy frees buffers, staging and fault words");
});

test("fake CUDA: readback buffers are host memory the kernel writes and read() copies", async () => {
  const { cu, dev, reg } = fake();
  const b = new KernelBuilder("triple", { workgroup: 32, grid: 1 });
  const src = b.buffer("src", "u32", "r"), dst = b.buffer("dst", "u32", "w");
  b.store(dst, b.gid.x, b.load(src, b.gid.x).mul(3));
  const k = reg(b.build());
  const s = dev.alloc(128, "upload"), r = dev.alloc(128, "readback");
  dev.write(s, 0, new Uint8Array(Uint32Array.from({ length: 32 }, (_, i) => i).buffer));
  dev.run([{ k: "kernel", compiled: dev.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: s, offset: 0, bytes: 128 }, { buffer: r, offset: 0, bytes: 128 }] }]);
  await dev.synchronize(1000);
  const n = cu.calls.length;
  const got = new Uint32Array((await dev.read(r, 16, 16)).buffer);
  assert.deepEqual([...got], [12, 15, 18, 21]);
  assert.equal(cu.calls.length, n, "reading a readback buffer makes no driver call");
});

test("fake CUDA: record + replay equals run, and each replay sees the slot written before it", async () => {
  const { dev, reg } = fake();
  const c = featureCases().find((x) => x.name === "control")!;
  reg(c.kernel);
  const mk = () => {
    const bufs = upload(dev, c);
    bufs[0] = dev.alloc(16, "upload");
    return bufs;
  };
  const e = mk(), r = mk();
  const rec = dev.record([stepOf(dev, c, r)]);
  assert.equal(rec.steps, 1);
  for (const bounds of [[100, 1000], [20, 300]]) {
    const p = new Uint8Array(Uint32Array.from([...bounds, 0, 0]).buffer);
    dev.write(e[0], 0, p);
    dev.write(r[0], 0, p);
    dev.run([stepOf(dev, c, e)]);
    dev.replay(rec);
    await dev.synchronize(1000);
    const a = await readAll(dev, e), b = await readAll(dev, r);
    a.forEach((x, i) => assert.deepEqual(b[i], x, `bounds ${bounds} binding ${i}`));
    assert.equal(new Uint32Array(b[3].buffer)[1], 77); // g % 3 == 1 below the bound
    // y[5] sums x[5 .. bound) in steps of 7: the replay read this round's bound from the slot.
    const x = new Float32Array(c.inputs[1].buffer);
    let want = 0;
    for (let i = 5; i < bounds[1]; i += 7) want = Math.fround(want + x[i]);
    assert.equal(new Float32Array(b[2].buffer)[5], want);
  }
  dev.releaseRecording(rec);
});

test("fake CUDA: a trap becomes KernelFault naming the kernel, poisons, and later calls are refused", async () => {
  const { dev, reg } = fake();
  const c = checkCase(true);
  reg(c.kernel);
  const bufs = upload(dev, c);
  dev.run([stepOf(dev, c, bufs)]);
  await assert.rejects(dev.synchronize(1000), (e: unknown) => e instanceof KernelFault && e.kernel === "checked" && e.code === 7);
  assert.match(dev.poisoned!, /checked/);
  assert.throws(() => dev.alloc(4, "device"), Poisoned);
  assert.throws(() => dev.write(bufs[0], 0, new Uint8Array(4)), Poisoned);
  assert.throws(() => dev.compile(c.kernel), Poisoned);
  assert.throws(() => dev.run([]), Poisoned);
  await assert.rejects(dev.synchronize(1000), Poisoned);
  await assert.rejects(dev.read(bufs[0], 0, 4), Poisoned);
  dev.free(bufs[0]); // a no-op once poisoned: pending work may still reference it
  await dev.destroy();
});

test("fake CUDA: in a replayed graph the fault names the kernel whose check failed", async () => {
  const { dev, reg } = fake();
  const ks = [reg(guard("guard_a", 8)), reg(guard("guard_b", 9)), reg(guard("guard_c", 10))];
  const y = dev.alloc(1024, "device");
  const xs = [1, 5000, 1].map((v) => {
    const x = dev.alloc(1024, "device");
    const a = new Float32Array(256).fill(1);
    a[100] = v;
    dev.write(x, 0, new Uint8Array(a.buffer));
    return x;
  });
  const rec = dev.record(ks.map((k, i) => ({
    k: "kernel" as const, compiled: dev.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 },
    bindings: [{ buffer: xs[i], offset: 0, bytes: 1024 }, { buffer: y, offset: 0, bytes: 1024 }],
  })));
  await dev.synchronize(1000);
  dev.replay(rec);
  await assert.rejects(dev.synchronize(1000), (e: unknown) => e instanceof KernelFault && e.kernel === "guard_b" && e.code === 9);
  assert.throws(() => dev.replay(rec), Poisoned);
});

test("fake CUDA: synchronize gives up at its bound with DeviceTimeout and poisons", async () => {
  const { cu, dev, reg } = fake();
  cu.spinMs = 10_000;
  const b = new KernelBuilder("spin", { workgroup: 1, grid: 1 });
  b.store(b.buffer("y", "u32", "w"), 0, 1);
  const k = reg(b.build());
  const y = dev.alloc(16, "device");
  dev.run([{ k: "kernel", compiled: dev.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: y, offset: 0, bytes: 16 }] }]);
  const t0 = performance.now();
  await assert.rejects(dev.synchronize(150), DeviceTimeout);
  const waited = performance.now() - t0;
  // gave up at its 150 ms bound, not when the 10 s spin ended: half the spin is the margin for a late timer on a
  // loaded machine (2 s was near a stall there)
  assert.ok(waited >= 140 && waited < 5000, `waited ${waited} ms`);
  assert.throws(() => dev.alloc(4, "device"), Poisoned);
});

test("fake CUDA: Engine<PtxDevice> decodes a Llama step, replayed == eager, matching the JS device's kernels", { timeout: 120_000 }, async () => {
  const { cu, dev } = fake();
  // Register every kernel the program will compile (the fake runs them by entry name).
  const { store, map, dtypeOf } = randomLlama(TINY_LLAMA, 3, true);
  const { tracer, logits } = traceLlama(TINY_LLAMA, { rows: 1, cap: 16 }, { dtypeOf });
  tracer.output("token", tracer.argmax(logits, 1));
  tracer.output("logits", logits);
  const graph = tracer.build();
  const compile = (g: typeof graph, t: Parameters<typeof compileGraph>[1]) => {
    const p = compileGraph(g, t);
    for (const s of p.steps) if (s.k === "kernel") cu.kernels.set(entryName(s.kernel.name), s.kernel);
    return p;
  };
  // The engine's own kernels (resetState's zero fill) are compiled by the device directly: register those too.
  const devCompile = dev.compile.bind(dev);
  dev.compile = (k: Kernel) => (cu.kernels.set(entryName(k.name), k), devCompile(k));
  const eng = new Engine(dev as Device, { compile, timeoutMs: 10_000 });
  await eng.loadWeights(store, map);
  const id = eng.addEntry("decode", graph);
  const run = async (eager: boolean) => {
    eng.resetState();
    const out: Float32Array[] = [];
    for (let pos = 0; pos < 4; pos++) out.push((await eng.step(id, { token: new Int32Array([pos + 5]), pos: new Int32Array([pos]) }, { eager })).outputs.logits as Float32Array);
    return out;
  };
  const a = await run(false), b = await run(true);
  a.forEach((l, i) => {
    assert.ok(l.every(Number.isFinite));
    assert.deepEqual(l, b[i], `step ${i}`);
  });
  assert.ok(cu.calls.includes("graphLaunch"));
  await eng.unload();
});

test("fake CUDA: the fault-child protocol of the GPU tests (each phase in its own process)", { timeout: 120_000 }, () => {
  const env = { POOT_PTX_FAKE: "1" };
  for (const phase of ["eager", "graph", "engine", "timeout"] as const) expectPhase[phase](child(phase, env));
  const i = libraryCases.findIndex((kc) => kc.fault !== undefined);
  expectPhase.library(child(`library:${i}`, env));
});

test("fake CUDA: a mark's wait covers the work enqueued before it and not the work behind it; the slot shadows it covered take writes at once", { timeout: 30_000 }, async () => {
  const { cu, dev, reg } = fake();
  const b = new KernelBuilder("add_slots", { workgroup: 32, grid: 1 });
  const x = b.buffer("x", "u32", "r"), out = b.buffer("out", "u32", "w");
  b.store(out, b.gid.x, b.load(x, b.gid.x).add(1));
  const k = reg(b.build());
  const sb = new KernelBuilder("spin", { workgroup: 1, grid: 1 });
  const z = sb.buffer("z", "u32", "w");
  sb.if(sb.lid.x.eq(1000), () => sb.store(z, 0, 1));
  const spinK = reg(sb.build());
  const sx = dev.alloc(128, "upload"), r = dev.alloc(128, "readback"), scratch = dev.alloc(16, "device");
  const rec = dev.record([{ k: "kernel", compiled: dev.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: sx, offset: 0, bytes: 128 }, { buffer: r, offset: 0, bytes: 128 }] }]);
  const spin = () => dev.run([{ k: "kernel", compiled: dev.compile(spinK), grid: spinK.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: scratch, offset: 0, bytes: 16 }] }]);
  const u32 = (v: number) => new Uint8Array(new Uint32Array(32).fill(v).buffer);
  const result = async () => new Uint32Array((await dev.read(r, 0, 128)).slice().buffer)[5];
  // 1 s of spin: the checks that the stream is still busy must not see a window a descheduled process slept through
  cu.spinMs = 1000;
  dev.write(sx, 0, u32(41));
  dev.replay(rec);
  const m1 = dev.mark();
  spin();
  const m2 = dev.mark();
  await dev.synchronize(5000, m1);
  assert.ok(cu.busyEnd > performance.now(), "the wait for the first mark returned while the work behind it still ran");
  assert.equal(await result(), 42);
  dev.write(sx, 0, u32(7));
  assert.equal(dev.stats.slotWaits, 0, "the replay's slot copy was covered by its mark: a write to its slot does not wait for the stream");
  assert.ok(cu.busyEnd > performance.now(), "still busy");
  await dev.synchronize(5000, m2);
  assert.ok(performance.now() >= cu.busyEnd, "the second mark's wait lasted until the work before it was done");
  const n = cu.calls.length;
  await dev.synchronize(5000, m1);
  await dev.synchronize(5000, m2);
  assert.equal(cu.calls.length, n, "a mark known complete is not asked again");
  // Stream order: a mark after a replay that waits behind a spin is complete only when the spin is.
  spin();
  dev.replay(rec);
  const m3 = dev.mark();
  assert.ok(m3 > m2);
  await dev.synchronize(5000, m3);
  assert.ok(performance.now() >= cu.busyEnd, "a mark covers everything enqueued before it");
  assert.equal(await result(), 8);
  // A fault: the mark after it (its record, or the wait for it) raises the kernel's fault.
  const g = reg(guard("guard_m", 21));
  const gx = dev.alloc(4 * 256, "device"), gy = dev.alloc(4 * 256, "device");
  dev.write(gx, 0, new Uint8Array(new Float32Array(256).fill(5000).buffer));
  dev.run([{ k: "kernel", compiled: dev.compile(g), grid: g.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: gx, offset: 0, bytes: 1024 }, { buffer: gy, offset: 0, bytes: 1024 }] }]);
  await assert.rejects(async () => await dev.synchronize(5000, dev.mark()), (e: unknown) => e instanceof KernelFault && e.kernel === "guard_m" && e.code === 21);
  assert.throws(() => dev.mark(), Poisoned);
});

test("fake CUDA: slots live in slab shadows: a write makes no driver call, each replay copies them in one go, a write while a copy may be pending waits for the stream", async () => {
  const { cu, dev, reg } = fake();
  const b = new KernelBuilder("add_slots", { workgroup: 32, grid: 1 });
  const x = b.buffer("x", "u32", "r"), y = b.buffer("y", "u32", "r"), out = b.buffer("out", "u32", "w");
  b.store(out, b.gid.x, b.load(x, b.gid.x).add(b.load(y, b.gid.x)));
  const k = reg(b.build());
  const sx = dev.alloc(128, "upload"), sy = dev.alloc(128, "upload"), r = dev.alloc(128, "readback");
  const bind = (buffer: typeof sx) => ({ buffer, offset: 0, bytes: 128 });
  const step = { k: "kernel" as const, compiled: dev.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(sx), bind(sy), bind(r)] };
  const rec = dev.record([step]);
  assert.equal(rec.steps, 1);
  const u32 = (f: (i: number) => number) => new Uint8Array(Uint32Array.from({ length: 32 }, (_, i) => f(i)).buffer);
  const result = async () => [...new Uint32Array((await dev.read(r, 0, 128)).buffer)];
  for (const m of [1, 7]) {
    const n = cu.calls.length;
    dev.write(sx, 0, u32((i) => i * m));
    dev.write(sy, 0, u32(() => m));
    assert.equal(cu.calls.length, n, "slot writes make no driver call");
    dev.replay(rec);
    assert.deepEqual(cu.calls.slice(n), ["graphLaunch"]);
    await dev.synchronize(1000);
    assert.deepEqual(await result(), Array.from({ length: 32 }, (_, i) => i * m + m));
  }
  // Eager: one copy covers both slots of the slab.
  dev.write(sy, 0, u32(() => 100));
  let n = cu.calls.length;
  dev.run([step]);
  assert.deepEqual(cu.calls.slice(n), ["memcpyHtoDAsync", "launchKernel"]);
  await dev.synchronize(1000);
  assert.deepEqual(await result(), Array.from({ length: 32 }, (_, i) => i * 7 + 100));
  assert.deepEqual(await dev.read(sy, 4, 8), u32(() => 100).subarray(4, 12), "a slot reads back what was written");
  // While the stream is busy after a replay, a slot write waits for it (the pending copy reads the shadow).
  // 1 s busy: the check that the stream is still busy before the write must not see a window a descheduled test
  // process (a loaded machine) slept through; 200 ms was near that
  cu.spinMs = 1000;
  const sb = new KernelBuilder("spin", { workgroup: 1, grid: 1 });
  const z = sb.buffer("z", "u32", "w");
  sb.if(sb.lid.x.eq(1000), () => sb.store(z, 0, 1));
  const spin = reg(sb.build());
  dev.run([{ k: "kernel", compiled: dev.compile(spin), grid: spin.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(sx)] }]);
  // Returned no earlier than the busy window's end (not "waited >= N ms": a descheduled test process may
  // resume with most of the window already gone).
  const end = cu.busyEnd;
  assert.ok(end > performance.now(), "the stream is busy before the write");
  assert.equal(dev.stats.slotWaits, 0, "no write has waited yet");
  dev.write(sx, 0, u32(() => 5));
  assert.ok(performance.now() >= end, `the write returned ${(end - performance.now()).toFixed(0)} ms before the busy stream was idle`);
  assert.equal(dev.stats.slotWaits, 1, "the write that waited is counted");
  assert.ok(dev.stats.slotWaitMicros > 0 && dev.stats.launchMicros > 0, JSON.stringify(dev.stats));
  n = cu.calls.length;
  dev.write(sx, 0, u32(() => 6));
  assert.equal(cu.calls.length, n, "idle again: no wait, no call");
  dev.replay(rec);
  await dev.synchronize(1000);
  assert.deepEqual(await result(), Array.from({ length: 32 }, () => 106));
  assert.equal(dev.stats.slotWaits, 1, "a write after the idle stream does not wait");
  // More slots than a slab holds: several slabs, each freed when its last slot goes.
  const many = Array.from({ length: 200 }, () => dev.alloc(1000, "upload"));
  many.forEach((s, i) => dev.write(s, 0, new Uint8Array(1000).fill(i & 255)));
  for (const [i, s] of many.entries()) assert.equal((await dev.read(s, 999, 1))[0], i & 255);
  const before = cu.liveAllocations;
  for (const s of many) dev.free(s);
  assert.ok(cu.liveAllocations < before, "emptied slabs are freed");
  dev.releaseRecording(rec);
  await dev.destroy();
  assert.equal(cu.liveAllocations, 0, "destroy frees the slabs");
});

test("PtxDevice's tuning: its options, else POOT_PTX_PDL / POOT_PTX_CARVEOUT / POOT_PTX_SLOTS, else the defaults; a bad carveout is a RangeError", () => {
  assert.deepEqual(resolveOptions({}, {}), { pdl: true, carveout: undefined, slotSlabs: true });
  assert.deepEqual(resolveOptions({}, { POOT_PTX_PDL: "off", POOT_PTX_CARVEOUT: "25", POOT_PTX_SLOTS: "0" }), { pdl: false, carveout: 25, slotSlabs: false });
  assert.deepEqual(resolveOptions({}, { POOT_PTX_PDL: "exit", POOT_PTX_CARVEOUT: "" }), { pdl: "exit", carveout: undefined, slotSlabs: true });
  assert.deepEqual(resolveOptions({ pdl: true, carveout: 0, slotSlabs: true }, { POOT_PTX_PDL: "0", POOT_PTX_CARVEOUT: "50", POOT_PTX_SLOTS: "0" }), { pdl: true, carveout: 0, slotSlabs: true });
  for (const bad of ["101", "-1", "12.5", "lots"]) assert.throws(() => resolveOptions({}, { POOT_PTX_CARVEOUT: bad }), RangeError, bad);
  assert.throws(() => resolveOptions({ carveout: 200 }, {}), /carveout 200 is not a percentage/);
});
