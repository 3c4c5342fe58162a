// VulkanDevice on whatever the loader finds (lavapipe in CI): the feature kernels through both storage
// paths, math precision, KernelFault naming kernel and code (and the engine's NeedsReset), capture vs eager
// bit-exact, in-place per-replay data, and a watchdog budget cutting a recording into several command
// buffers with bit-identical results. The wait-bound test lives in timeout.test.ts (it runs in a child).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import type { DeviceBuffer, DeviceStep } from "../../backends/device.ts";
import { DeviceLost, ExecError, KernelFault, NeedsReset, Poisoned, Unsupported } from "../../backends/errors.ts";
import { openVulkanDevice, splitByBudget, VulkanDevice, type VulkanOptions } from "../../backends/vulkan/mod.ts";
import { openContext, queueFamily } from "../../backends/vulkan/context.ts";
import * as vk from "../../ffi/vulkan.ts";
import type { Graph } from "../../graph/ir.ts";
import { type Kernel, KernelBuilder, u32, un, type UnOp } from "../../kernels/ir.ts";
import type { Program } from "../../kernels/program.ts";
import { features, planted } from "../devices/features.ts";

function open(opts: VulkanOptions = {}): VulkanDevice | string {
  try {
    return openVulkanDevice(opts);
  } catch (e) {
    return `no usable Vulkan device: ${(e as Error).message}`;
  }
}
// A 20 ms polling wait, explicitly: the default on a GPU, which lavapipe (a CPU device: no polling by default) would
// otherwise leave untested.
const main = open({ spinMs: 20 });
const skip = typeof main === "string" ? main : false;
const dev = () => main as VulkanDevice;
let words: VulkanDevice | string | undefined;
/** A second device that takes every fallback: 16/8-bit access through u32 words, f16 decoded with integer ops. */
const wordDev = () => (words ??= open({ noStorage16: true, noStorage8: true, noFloat16: true })) as VulkanDevice;

/** Allocates and fills one buffer per input, runs the kernel once (eager) and reads everything back. */
async function runOnce(d: VulkanDevice, k: Kernel, inputs: Uint8Array[]): Promise<Uint8Array[]> {
  const bufs = inputs.map((b) => {
    const x = d.alloc(b.byteLength, "device");
    d.write(x, 0, b);
    return x;
  });
  try {
    d.run([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: bufs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes })) }]);
    await d.synchronize(60_000);
    return await Promise.all(bufs.map((b) => d.read(b, 0, b.bytes)));
  } finally {
    for (const b of bufs) d.free(b);
  }
}

// The native device runs the features in the IR feature suite of every device (tests/devices/features.test.ts).
for (const f of features.filter((x) => x.fault === undefined)) {
  for (const [label, get] of [["fallbacks", wordDev]] as const) {
    // A feature the device lacks is a skip decided here (the renderer test covers the refusal), never a pass.
    const d0 = skip ? undefined : get() as VulkanDevice | string;
    const made = d0 === undefined || typeof d0 === "string" ? d0 : f.make(d0.target.caps);
    const lacks = typeof made === "string" ? `${label} device: ${made}` : false;
    test(`vulkan (${label}): ${f.name}`, { skip: skip || lacks, timeout: 120_000 }, async () => {
      const d = get();
      const k = made as Kernel;
      const ins = f.inputs();
      const bad = f.check(await runOnce(d, k, ins), ins);
      assert.deepEqual(bad, [], `${f.name}:\n  ${bad.join("\n  ")}`);
    });
  }
}

test("vulkan: exp/exp2/log/log2/sin/cos/tanh within 4 ulp (sin/cos over |x| <= 1e5)", { skip, timeout: 120_000 }, async () => {
  const ops: [UnOp, (x: number) => number, number, number, boolean][] = [
    // results kept in the normal range: a device may flush f32 denormals
    ["exp", Math.exp, -87, 89, false], ["exp2", (x) => 2 ** x, -126, 128.5, false], ["log", Math.log, -30, 30, true],
    ["log2", Math.log2, -30, 30, true], ["sin", Math.sin, -1e5, 1e5, false], ["cos", Math.cos, -1e5, 1e5, false],
    ["tanh", Math.tanh, -12, 12, false],
  ];
  const n = 4096;
  const b = new KernelBuilder("math", { workgroup: 64, grid: n / 64 });
  const X = b.buffer("x", "f32", "r"), Y = b.buffer("y", "f32", "w");
  const i = b.gid.x;
  ops.forEach(([op], k) => b.store(Y, i.add(k * n), un(op, b.load(X, i.add(k * n)))));
  const xs = new Float32Array(ops.length * n);
  ops.forEach(([, , lo, hi, logScale], k) => {
    for (let j = 0; j < n; j++) {
      const t = j / (n - 1);
      xs[k * n + j] = logScale ? Math.fround(10 ** (lo + (hi - lo) * t)) : Math.fround(lo + (hi - lo) * t);
    }
  });
  // near the zeros of sin and cos at large arguments
  for (let j = 0; j < 512; j++) xs[4 * n + j] = Math.fround(Math.round(j * 121.7) * Math.PI);
  for (let j = 0; j < 512; j++) xs[5 * n + j] = Math.fround((Math.round(j * 121.7) + 0.5) * Math.PI);
  const out = new Float32Array((await runOnce(dev(), b.build(), [new Uint8Array(xs.buffer), new Uint8Array(xs.byteLength)]))[1].buffer);
  const ulp = (r: number) => 2 ** (Math.floor(Math.log2(Math.max(Math.abs(r), 2 ** -126))) - 23);
  const bad: string[] = [];
  ops.forEach(([op, ref], k) => {
    for (let j = 0; j < n; j++) {
      const x = xs[k * n + j], want = ref(x), got = out[k * n + j];
      if (!Number.isFinite(Math.fround(want))) {
        if (!Object.is(got, Math.fround(want)) && !(Number.isNaN(want) && Number.isNaN(got))) bad.push(`${op}(${x}) = ${got}, want ${want}`);
        continue;
      }
      // sin/cos: a few ulp, plus 2^-32 absolute where the result nears zero at a large argument
      const tol = 4 * ulp(want) + (op === "sin" || op === "cos" ? 2 ** -32 : 0);
      if (!(Math.abs(got - want) <= tol) && bad.length < 10) bad.push(`${op}(${x}) = ${got}, want ${want} (${(Math.abs(got - want) / ulp(want)).toFixed(1)} ulp)`);
    }
  });
  assert.deepEqual(bad, [], bad.join("\n"));
});

test("vulkan: a failing check raises KernelFault naming kernel and code; the device stays usable", { skip, timeout: 120_000 }, async () => {
  const d = dev();
  const k = planted.make(d.target.caps) as Kernel;
  const ins = planted.inputs();
  const x = d.alloc(ins[0].byteLength, "upload"), y = d.alloc(ins[1].byteLength, "readback");
  d.write(x, 0, ins[0]);
  const rec = d.record([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 1, flops: 0 }, bindings: [{ buffer: x, offset: 0, bytes: x.bytes }, { buffer: y, offset: 0, bytes: y.bytes }] }]);
  d.replay(rec);
  await assert.rejects(d.synchronize(10_000), (e) => e instanceof KernelFault && e.kernel === "planted" && e.code === 42 && e.backend === "vulkan");
  assert.equal(d.poisoned, undefined);
  // The error word was cleared: a good input replays clean.
  d.write(x, 0, new Uint8Array(new Float32Array(64).fill(2).buffer));
  d.replay(rec);
  await d.synchronize(10_000);
  assert.deepEqual(new Float32Array((await d.read(y, 0, 256)).buffer), new Float32Array(64).fill(3));
  // Both checks failing OR their codes.
  const both = new Float32Array(64).fill(1);
  both[3] = 500;
  both[9] = -500;
  d.write(x, 0, new Uint8Array(both.buffer));
  d.replay(rec);
  await assert.rejects(d.synchronize(10_000), (e) => e instanceof KernelFault && e.code === (42 | 3));
  d.releaseRecording(rec);
  d.free(x);
  d.free(y);
});

/** A Program around the planted kernel: slot x (64 f32), readback out. */
function faultProgram(k: Kernel): Program {
  return {
    buffers: [{ id: 0, kind: "slot", bytes: 256, name: "x" }, { id: 1, kind: "readback", bytes: 256, name: "out" }],
    steps: [{ k: "kernel", kernel: k, grid: k.grid, work: { bytes: 256, flops: 64 }, bindings: [{ buffer: 0, offset: 0, bytes: 256 }, { buffer: 1, offset: 0, bytes: 256 }] }],
    slots: [{ name: "x", buffer: 0, offset: 0, dtype: "f32", shape: [64] }],
    state: [],
    outputs: [{ name: "out", buffer: 1, offset: 0, dtype: "f32", shape: [64] }],
    weights: [],
  };
}

test("vulkan + Engine: a planted fault fails the step, which then refuses until resetState", { skip, timeout: 120_000 }, async () => {
  const k = planted.make(dev().target.caps) as Kernel;
  const engine = new Engine(dev(), { compile: () => faultProgram(k), timeoutMs: 10_000 });
  const id = engine.addEntry("planted", {} as Graph);
  const good = new Float32Array(64).fill(1);
  assert.deepEqual([...(await engine.step(id, { x: good })).outputs.out], new Array(64).fill(2));
  const badX = good.slice();
  badX[5] = 1000;
  await assert.rejects(engine.step(id, { x: badX }), (e) => e instanceof KernelFault && e.kernel === "planted" && e.code === 42);
  await assert.rejects(engine.step(id, { x: good }), NeedsReset);
  engine.resetState(id);
  assert.deepEqual([...(await engine.step(id, { x: good }, { eager: true })).outputs.out], new Array(64).fill(2));
  engine.removeEntry(id);
});

/** A small pipeline: elementwise (sin), copy, a shared-memory reduction, a normalisation stored as f16. */
function pipeline(): Kernel[] {
  const n = 1024;
  const a = new KernelBuilder("scale", { workgroup: 64, grid: n / 64 });
  {
    const X = a.buffer("x", "f32", "r"), Y = a.buffer("y", "f32", "w");
    const x = a.load(X, a.gid.x);
    a.store(Y, a.gid.x, x.sin().mul(3).add(x));
  }
  const r = new KernelBuilder("wgsum", { workgroup: 64, grid: n / 64 });
  {
    const X = r.buffer("y", "f32", "r"), S = r.buffer("s", "f32", "w");
    const sh = r.shared("t", "f32", 64);
    const l = r.lid.x;
    r.sstore(sh, l, r.load(X, r.gid.x));
    r.barrier();
    for (let s = 32; s > 0; s >>= 1) {
      r.if(l.lt(u32(s)), () => r.sstore(sh, l, r.sload(sh, l).add(r.sload(sh, l.add(s)))));
      r.barrier();
    }
    r.if(l.eq(0), () => r.store(S, r.wgid.x, r.sload(sh, 0)));
  }
  const m = new KernelBuilder("norm", { workgroup: 64, grid: n / 64 });
  {
    const Y = m.buffer("y", "f32", "r"), S = m.buffer("s", "f32", "r"), H = m.buffer("h", "f16", "w");
    const g = m.gid.x;
    m.store(H, g, m.load(Y, g).div(m.load(S, m.wgid.x).abs().add(1)).exp());
  }
  return [a.build(), r.build(), m.build()];
}

interface Bufs { x: DeviceBuffer; y: DeviceBuffer; y2: DeviceBuffer; s: DeviceBuffer; h: DeviceBuffer }
function pipelineSteps(d: VulkanDevice, ks: Kernel[], b: Bufs): DeviceStep[] {
  const [scale, wgsum, norm] = ks.map((k) => d.compile(k));
  const w = { bytes: 4096, flops: 1024 };
  const bind = (buffer: DeviceBuffer) => ({ buffer, offset: 0, bytes: buffer.bytes });
  return [
    { k: "kernel", compiled: scale, grid: [16, 1, 1], work: w, bindings: [bind(b.x), bind(b.y)] },
    { k: "copy", src: bind(b.y), dst: bind(b.y2), work: w },
    { k: "kernel", compiled: wgsum, grid: [16, 1, 1], work: w, bindings: [bind(b.y2), bind(b.s)] },
    { k: "kernel", compiled: norm, grid: [16, 1, 1], work: w, bindings: [bind(b.y2), bind(b.s), bind(b.h)] },
  ];
}
function pipelineBufs(d: VulkanDevice): Bufs {
  return { x: d.alloc(4096, "upload"), y: d.alloc(4096, "device"), y2: d.alloc(4096, "device"), s: d.alloc(64, "device"), h: d.alloc(2048, "readback") };
}
const xsFor = (seed: number) => new Uint8Array(Float32Array.from({ length: 1024 }, (_, i) => Math.sin(i * 0.37 + seed) * 4).buffer);
async function results(d: VulkanDevice, b: Bufs): Promise<Uint8Array> {
  const parts = [await d.read(b.y, 0, 4096), await d.read(b.s, 0, 64), await d.read(b.h, 0, 2048)];
  const out = new Uint8Array(4096 + 64 + 2048);
  out.set(parts[0]);
  out.set(parts[1], 4096);
  out.set(parts[2], 4160);
  return out;
}

test("vulkan: capture (record + replay) and eager (run) are bit-exact; per-replay data is overwritten in place", { skip, timeout: 120_000 }, async () => {
  const d = dev();
  const ks = pipeline();
  const cap = pipelineBufs(d), eag = pipelineBufs(d);
  const rec = d.record(pipelineSteps(d, ks, cap));
  assert.equal(d.commandBuffers(rec), 1, "no budget: one command buffer");
  const eagerSteps = pipelineSteps(d, ks, eag);
  let prev: Uint8Array | undefined;
  for (const seed of [0, 1, 2]) {
    d.write(cap.x, 0, xsFor(seed)); // the recorded descriptor sets point at the same buffer every replay
    d.replay(rec);
    await d.synchronize(10_000);
    d.write(eag.x, 0, xsFor(seed));
    d.run(eagerSteps);
    await d.synchronize(10_000);
    const a = await results(d, cap), b = await results(d, eag);
    assert.deepEqual(a, b, `seed ${seed}`);
    // The replay read this seed's input, not the last one's: its results changed from the previous replay's.
    if (prev) assert.notDeepEqual(a.subarray(0, 4096), prev.subarray(0, 4096), `seed ${seed}: the replay's output is the previous one's`);
    prev = a;
  }
  d.releaseRecording(rec);
  for (const b of [...Object.values(cap), ...Object.values(eag)]) d.free(b);
});

test("vulkan: barriers only where steps' bytes meet (read after write, write after write, write after read); results exact", { skip, timeout: 120_000 }, async () => {
  const d = dev();
  // y[i] = x[i] + 1 over 64 u32s; the steps below bind windows of one buffer so that some overlap.
  const b = new KernelBuilder("inc64", { workgroup: 64, grid: 1 });
  const x = b.buffer("x", "u32", "r"), y = b.buffer("y", "u32", "w");
  b.store(y, b.gid.x, b.load(x, b.gid.x).add(1));
  const inc = d.compile(b.build());
  const buf = d.alloc(6 * 256, "device"), rb = d.alloc(6 * 256, "readback");
  const win = (i: number) => ({ buffer: buf, offset: i * 256, bytes: 256 });
  const W = { bytes: 0, flops: 0 };
  const step = (from: number, to: number): DeviceStep => ({ k: "kernel", compiled: inc, grid: [1, 1, 1], work: W, bindings: [win(from), win(to)] });
  const cases: [string, DeviceStep[], number][] = [
    ["independent", [step(0, 1), step(2, 3)], 0],
    ["read after write", [step(0, 1), step(1, 2)], 1],
    ["write after read", [step(0, 1), step(2, 0)], 1],
    ["write after write", [step(0, 1), step(2, 1)], 1],
    ["chain of 3 + independent", [step(0, 1), step(4, 5), step(1, 2), step(2, 3)], 2],
  ];
  for (const [what, steps, want] of cases) {
    d.write(buf, 0, new Uint8Array(new Uint32Array(6 * 64).map((_, i) => i * 7).buffer));
    const rec = d.record([...steps, { k: "copy", src: { buffer: buf, offset: 0, bytes: 6 * 256 }, dst: { buffer: rb, offset: 0, bytes: 6 * 256 }, work: W }]);
    assert.equal(d.barriers(rec), want + 1, `${what}: barriers (the copy of everything needs one more)`);
    d.replay(rec);
    await d.synchronize(10_000);
    const got = new Uint32Array((await d.read(rb, 0, 6 * 256)).buffer);
    // The same steps on the host, in order.
    const ref = new Uint32Array(6 * 64).map((_, i) => i * 7);
    for (const s of steps) {
      const [src, dst] = (s as Extract<DeviceStep, { k: "kernel" }>).bindings.map((bd) => bd.offset / 4);
      for (let i = 0; i < 64; i++) ref[dst + i] = ref[src + i] + 1;
    }
    assert.deepEqual([...got], [...ref], what);
    d.releaseRecording(rec);
  }
  const all = open({ allBarriers: true }) as VulkanDevice;
  const k2 = all.compile(b.build()), a2 = all.alloc(4 * 256, "device");
  const rec = all.record([0, 1].map((i): DeviceStep => ({ k: "kernel", compiled: k2, grid: [1, 1, 1], work: W, bindings: [{ buffer: a2, offset: 2 * i * 256, bytes: 256 }, { buffer: a2, offset: (2 * i + 1) * 256, bytes: 256 }] })));
  assert.equal(all.barriers(rec), 1, "allBarriers: one between every two steps, hazard or not");
  all.releaseRecording(rec);
  await all.destroy();
  d.free(buf);
  d.free(rb);
});

test("vulkan: a watchdog budget cuts the recording into several command buffers, results bit-identical", { skip, timeout: 120_000 }, async () => {
  assert.deepEqual(splitByBudget([4, 4, 4, 4], 8), [2, 2]);
  assert.deepEqual(splitByBudget([4, 4, 4, 4], 0), [4]);
  assert.deepEqual(splitByBudget([10, 1, 1], 4), [1, 2]);
  assert.deepEqual(splitByBudget([], 4), []);
  const budgeted = open({ watchdogBudget: 8192 }) as VulkanDevice;
  assert.equal(budgeted.target.watchdogBudget, 8192);
  const d = dev();
  const ks = pipeline();
  const one = pipelineBufs(d), many = pipelineBufs(budgeted);
  const recOne = d.record(pipelineSteps(d, ks, one));
  const recMany = budgeted.record(pipelineSteps(budgeted, ks, many));
  assert.equal(d.commandBuffers(recOne), 1);
  assert.equal(budgeted.commandBuffers(recMany), 2, "4 steps of 4096 under a budget of 8192");
  for (const seed of [3, 4]) {
    d.write(one.x, 0, xsFor(seed));
    budgeted.write(many.x, 0, xsFor(seed));
    const before = budgeted.submissions;
    d.replay(recOne);
    budgeted.replay(recMany);
    await d.synchronize(10_000);
    await budgeted.synchronize(10_000);
    assert.equal(budgeted.submissions - before, 2, "one submission per command buffer");
    assert.deepEqual(await results(budgeted, many), await results(d, one));
  }
  // A fault in the first command buffer stops the replay there: the second is never submitted.
  const k = planted.make(budgeted.target.caps) as Kernel;
  const x = budgeted.alloc(256, "upload"), y = budgeted.alloc(256, "readback");
  const badX = new Float32Array(64).fill(1);
  badX[0] = 1e9;
  budgeted.write(x, 0, new Uint8Array(badX.buffer));
  const pk = budgeted.compile(k);
  const step: DeviceStep = { k: "kernel", compiled: pk, grid: k.grid, work: { bytes: 8192, flops: 0 }, bindings: [{ buffer: x, offset: 0, bytes: 256 }, { buffer: y, offset: 0, bytes: 256 }] };
  const rec = budgeted.record([step, step, step]);
  assert.equal(budgeted.commandBuffers(rec), 3);
  const before = budgeted.submissions;
  budgeted.replay(rec);
  await assert.rejects(budgeted.synchronize(10_000), KernelFault);
  assert.equal(budgeted.submissions - before, 1);
  await budgeted.destroy();
});

test("vulkan: bad bindings and foreign objects are refused with typed errors", { skip, timeout: 120_000 }, () => {
  const d = dev();
  const [scale] = pipeline();
  const c = d.compile(scale);
  const a = d.alloc(4096, "device"), small = d.alloc(64, "device");
  const bind = (buffer: DeviceBuffer, offset = 0, bytes = buffer.bytes) => ({ buffer, offset, bytes });
  const step = (bs: ReturnType<typeof bind>[]): DeviceStep => ({ k: "kernel", compiled: c, grid: [16, 1, 1], work: { bytes: 0, flops: 0 }, bindings: bs });
  assert.throws(() => d.record([step([bind(a)])]), Unsupported);                       // too few bindings
  assert.throws(() => d.record([step([bind(a, 4, 64), bind(a)])]), Unsupported);        // misaligned offset
  assert.throws(() => d.record([step([bind(a), bind(small, 0, 4096)])]), Unsupported);  // outside the buffer
  assert.throws(() => d.write(small, 60, new Uint8Array(8)), ExecError);
  const rec = d.record([step([bind(a), bind(a)])]);
  d.releaseRecording(rec);
  assert.throws(() => d.replay(rec), ExecError);
  d.free(a);
  d.free(small);
});

test("vulkan: device-only memory goes through staging (upload, zero fill, readback)", { skip, timeout: 120_000 }, async () => {
  const d = open({ stageDeviceMemory: true }) as VulkanDevice;
  for (const usage of ["device", "upload", "readback"] as const) {
    const b = d.alloc(100_003, usage);
    const data = Uint8Array.from({ length: 100_003 }, (_, i) => (i * 7) & 0xff);
    d.write(b, 0, data);
    d.write(b, 40, new Uint8Array(1000)); // zeros: a fill when the memory is not mapped
    data.fill(0, 40, 1040);
    assert.deepEqual(await d.read(b, 0, 100_003), data, usage);
    assert.deepEqual(await d.read(b, 99_000, 3), data.subarray(99_000, 99_003));
    d.free(b);
  }
  // and kernels over staged buffers give the same bits as over mapped ones
  const ks = pipeline();
  const staged = pipelineBufs(d), mapped = pipelineBufs(dev());
  for (const [dd, b] of [[d, staged], [dev(), mapped]] as const) {
    dd.write(b.x, 0, xsFor(7));
    dd.run(pipelineSteps(dd, ks, b));
    await dd.synchronize(10_000);
  }
  assert.deepEqual(await results(d, staged), await results(dev(), mapped));
  for (const b of Object.values(mapped)) dev().free(b);
  await d.destroy();
});

test("vulkan: memoryReport names heaps and types and counts this device's live buffers where they landed", { skip, timeout: 120_000 }, () => {
  const d = dev();
  const base = d.memoryReport();
  assert.ok(base.heaps.length >= 1 && base.types.length >= 1);
  assert.ok(base.heaps.every((h) => h.bytes > 0 && (h.budget === undefined || h.budget >= 0)));
  assert.ok(base.types.every((t) => t.heap < base.heaps.length && /^(-|(DL|HV|HC|CA)(\|(HV|HC|CA))*)$/.test(t.flags)));
  const a = d.alloc(3 << 20, "device"), b = d.alloc(100, "readback");
  const r = d.memoryReport();
  const added = (i: number) => r.types[i].bytes - base.types[i].bytes;
  assert.equal(r.types.reduce((n, _t, i) => n + added(i), 0), (3 << 20) + 112, "sizes rounded to 16 bytes");
  assert.deepEqual(r.large.slice(0, 1).map((x) => [x.bytes, x.usage]), [[3 << 20, "device"]]);
  assert.ok(r.types[r.large[0].type].bytes >= 3 << 20);
  assert.ok(r.types[r.large[0].type].flags.includes("DL") || !r.types.some((t) => t.flags.includes("DL")), "device memory where there is some");
  d.free(a);
  d.free(b);
  assert.deepEqual(d.memoryReport().types.map((t) => t.bytes), base.types.map((t) => t.bytes));
});

test("vulkan: work goes to a compute family without graphics where there is one (VulkanOptions.queue)", () => {
  const { VK_QUEUE_GRAPHICS_BIT: G, VK_QUEUE_COMPUTE_BIT: C, VK_QUEUE_TRANSFER_BIT: T } = vk;
  const nvidia = [{ queueFlags: G | C | T }, { queueFlags: T }, { queueFlags: C | T }, { queueFlags: T }];
  assert.equal(queueFamily(nvidia, "compute"), 2, "the asynchronous compute family");
  assert.equal(queueFamily(nvidia, "any"), 0, "the first with compute");
  assert.equal(queueFamily([{ queueFlags: G | C | T }], "compute"), 0, "lavapipe: its one family");
  assert.equal(queueFamily([{ queueFlags: T }, { queueFlags: G | C }], "compute"), 1);
  assert.equal(queueFamily([{ queueFlags: T }], "compute"), -1, "none");
});

test("vulkan: a device without robustBufferAccess is refused with Unsupported (fake loader)", () => {
  let closed = 0;
  const fake = {
    instanceVersion: () => vk.VK_API_VERSION_1_3,
    createInstance: () => 1n,
    destroyInstance: () => closed++,
    close: () => closed++,
    physicalDevices: () => [7n],
    physicalDeviceProperties: () => ({ apiVersion: vk.VK_API_VERSION_1_3, deviceName: "Fake GPU", deviceType: vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU }),
    queueFamilies: () => [{ queueFlags: vk.VK_QUEUE_COMPUTE_BIT }],
    deviceExtensions: () => [],
    physicalDeviceFeatures2: () => [{ features: { robustBufferAccess: 0 } }, {}, {}, {}, {}],
  } as unknown as vk.Vulkan;
  assert.throws(() => openContext({}, fake), (e) => e instanceof Unsupported && /Fake GPU lacks robustBufferAccess/.test(e.message));
  assert.equal(closed, 2, "the instance and the loader are released");
  assert.throws(() => openContext({ deviceIndex: 3 }, fake), (e) => e instanceof Unsupported && /no usable device 3/.test(e.message));
});

test("vulkan: a failed submit or fence wait (device lost) poisons, raises DeviceLost, and later calls are refused", { skip, timeout: 120_000 }, async () => {
  for (const fn of ["queueSubmit", "waitForFences"] as const) {
    const ctx = openContext();
    let fail = false;
    // The real driver, except that `fn` reports VK_ERROR_DEVICE_LOST once `fail` is set (a fence wait polls
    // vkGetFenceStatus before it blocks: that one fails too).
    const api = new Proxy(ctx.api, {
      get(target, key) {
        const hit = key === fn || (fn === "waitForFences" && key === "fenceSignaled");
        if (hit && fail) return () => { throw new vk.VkError(`vk${fn[0].toUpperCase()}${fn.slice(1)}`, vk.VK_ERROR_DEVICE_LOST); };
        const v = Reflect.get(target, key, target);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    const d = new VulkanDevice({ ...ctx, api }, {});
    const k = planted.make(d.target.caps) as Kernel;
    const x = d.alloc(256, "upload"), y = d.alloc(256, "readback");
    d.write(x, 0, new Uint8Array(new Float32Array(64).fill(1).buffer));
    const rec = d.record([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: x, offset: 0, bytes: 256 }, { buffer: y, offset: 0, bytes: 256 }] }]);
    d.replay(rec);
    await d.synchronize(10_000); // healthy so far
    fail = true;
    const lost = (e: unknown) => e instanceof DeviceLost && e.detail.includes("VK_ERROR_DEVICE_LOST");
    if (fn === "queueSubmit") assert.throws(() => d.replay(rec), lost);
    else {
      d.replay(rec);
      await assert.rejects(d.synchronize(10_000), lost);
    }
    assert.match(d.poisoned ?? "", /VK_ERROR_DEVICE_LOST/);
    assert.throws(() => d.alloc(16, "device"), Poisoned);
    assert.throws(() => d.replay(rec), Poisoned);
    await assert.rejects(d.synchronize(10), Poisoned);
    await assert.rejects(d.read(y, 0, 4), Poisoned);
    d.free(x); // leaked, quietly
    d.releaseRecording(rec);
    await d.destroy();
  }
});
