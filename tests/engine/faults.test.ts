// The error model of Engine<D>, proved with a fault-injecting Device around the JS device: a device fault
// poisons the context and every later call is refused as Poisoned without touching the device; a failed
// replayed step marks the entry NeedsReset until resetState; a wait that never ends raises DeviceTimeout from the
// engine's own bound (the fake truly hangs: its promise never settles), within 200-400 ms of a 200 ms limit.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import type { CompiledKernel, Device, DeviceBuffer, DeviceStep, Recording } from "../../backends/device.ts";
import { DeviceLost, DeviceTimeout, KernelFault, NeedsReset, Poisoned } from "../../backends/errors.ts";
import { JsDevice } from "../../backends/js/device.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Tracer } from "../../graph/tracer.ts";

type Fault = "none" | "lost" | "kernel" | "hang";

/** Passes every call to a JsDevice, counting them, and injects the armed fault at the next synchronize. */
class FaultyDevice implements Device {
  readonly inner = new JsDevice({});
  calls = 0;
  armed: Fault = "none";
  hung = false;
  destroyed = false;
  #poisoned: string | undefined;
  get target() {
    return this.inner.target;
  }
  get poisoned(): string | undefined {
    return this.#poisoned;
  }
  private touch(): void {
    this.calls++;
  }
  alloc(bytes: number, usage: "device" | "upload" | "readback"): DeviceBuffer {
    this.touch();
    return this.inner.alloc(bytes, usage);
  }
  free(b: DeviceBuffer): void {
    this.touch();
    this.inner.free(b);
  }
  write(b: DeviceBuffer, off: number, data: Uint8Array): void {
    this.touch();
    this.inner.write(b, off, data);
  }
  read(b: DeviceBuffer, off: number, n: number): Promise<Uint8Array> {
    this.touch();
    return this.inner.read(b, off, n);
  }
  compile(k: Kernel): CompiledKernel {
    this.touch();
    return this.inner.compile(k);
  }
  record(steps: DeviceStep[]): Recording {
    this.touch();
    return this.inner.record(steps);
  }
  replay(r: Recording): void {
    this.touch();
    this.inner.replay(r);
  }
  run(steps: DeviceStep[]): void {
    this.touch();
    this.inner.run(steps);
  }
  async synchronize(timeoutMs: number): Promise<void> {
    this.touch();
    const f = this.armed;
    this.armed = "none";
    if (f === "lost") {
      this.#poisoned = "injected device loss";
      throw new DeviceLost("faulty", "injected device loss");
    }
    if (f === "kernel") {
      await this.inner.synchronize(timeoutMs);
      throw new KernelFault("faulty", "injected_kernel", 0x77);
    }
    if (f === "hang") {
      // A device that never finishes and never notices: only the engine can bound this wait.
      this.hung = true;
      return new Promise<void>(() => {});
    }
    return this.inner.synchronize(timeoutMs);
  }
  releaseRecording(r: Recording): void {
    this.touch();
    this.inner.releaseRecording(r);
  }
  destroy(): Promise<void> {
    this.destroyed = true;
    return this.inner.destroy();
  }
}

/** A step with State: cache[pos] = x; y = sum(cache). */
function stepGraph() {
  const t = new Tracer();
  const x = t.slot("x", { kind: "Input", dtype: "f32", shape: [1, 4] });
  const pos = t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
  const next = t.updateSlice(t.state("cache", "f32", [8, 4]), x, pos, 0);
  t.writeState("cache", next);
  t.output("y", t.sum(t.reshape(next, [32]), 0));
  return t.build();
}
const slots = (pos: number) => ({ x: new Float32Array([1, 2, 3, 4]), pos: new Int32Array([pos]) });

test("a device fault poisons; later calls are Poisoned without touching the device", async () => {
  const dev = new FaultyDevice();
  const eng = new Engine(dev, { compile: compileGraph });
  const id = eng.addEntry("s", stepGraph());
  assert.equal((await eng.step(id, slots(0))).outputs.y[0], 10);
  dev.armed = "lost";
  await assert.rejects(eng.step(id, slots(1)), DeviceLost);
  const before = dev.calls;
  await assert.rejects(eng.step(id, slots(2)), Poisoned);
  assert.throws(() => eng.addEntry("other", stepGraph()), Poisoned);
  assert.throws(() => eng.resetState(), Poisoned);
  await assert.rejects(eng.readState("cache"), Poisoned);
  assert.equal(dev.calls, before, "no device call after poisoning");
  assert.equal(eng.stats().poisoned, "injected device loss");
  await eng.unload(); // frees nothing on a poisoned device, and does not throw
  assert.equal(dev.calls, before);
});

test("a failed replayed step marks NeedsReset until resetState", async () => {
  const dev = new FaultyDevice();
  const eng = new Engine(dev, { compile: compileGraph });
  const id = eng.addEntry("s", stepGraph());
  await eng.step(id, slots(0));
  dev.armed = "kernel";
  await assert.rejects(eng.step(id, slots(1)), (e: unknown) => e instanceof KernelFault && e.kernel === "injected_kernel" && e.code === 0x77);
  await assert.rejects(eng.step(id, slots(2)), NeedsReset);
  await assert.rejects(eng.step(id, slots(2)), NeedsReset);
  eng.resetState(id);
  // State was cleared: only the new row counts.
  assert.equal((await eng.step(id, slots(0))).outputs.y[0], 10);
  assert.equal(eng.stats().poisoned, undefined, "the engine does not count a kernel fault as poisoning");
  await eng.unload();
});

test("a wait that never ends: the engine raises DeviceTimeout within its bound and poisons", async () => {
  const dev = new FaultyDevice();
  const eng = new Engine(dev, { compile: compileGraph, timeoutMs: 200 });
  const id = eng.addEntry("s", stepGraph());
  assert.equal((await eng.step(id, slots(0))).outputs.y[0], 10);
  dev.armed = "hang";
  const t0 = performance.now();
  await assert.rejects(eng.step(id, slots(1)), (e: unknown) => e instanceof DeviceTimeout && e.ms === 200);
  const waited = performance.now() - t0;
  assert.ok(dev.hung, "the fake hung");
  // The upper slack is wide: on a loaded 2-core CI machine the timer callback itself can come late.
  assert.ok(waited >= 190 && waited <= 2000, `raised after ${waited.toFixed(0)} ms; the bound is 200 ms (allowed 190-2000)`);
  assert.equal(dev.poisoned, undefined, "the device itself never noticed");
  const before = dev.calls;
  await assert.rejects(eng.step(id, slots(2)), Poisoned);
  await assert.rejects(eng.readState("cache"), Poisoned);
  assert.throws(() => eng.addEntry("other", stepGraph()), Poisoned);
  assert.match(eng.stats().poisoned ?? "", /synchronize did not finish within 200 ms/);
  await eng.unload(); // frees nothing and does not destroy a device with a wait outstanding
  assert.equal(dev.calls, before, "no device call after the engine gave up on it");
  assert.equal(dev.destroyed, false);
});

test("bad slot input is a typed error, not a crash, and does not poison", async () => {
  const dev = new FaultyDevice();
  const eng = new Engine(dev, { compile: compileGraph });
  const id = eng.addEntry("s", stepGraph());
  await assert.rejects(eng.step(id, { x: new Float32Array(3), pos: new Int32Array([0]) }), /slot x needs 16 bytes/);
  await assert.rejects(eng.step(id, { x: new Float32Array(4) }), /slot pos has no value/);
  // A position past the capacity faults inside the kernel (its check), marking NeedsReset.
  await assert.rejects(eng.step(id, slots(8)), KernelFault);
  await assert.rejects(eng.step(id, slots(0)), NeedsReset);
  assert.equal(eng.stats().poisoned, undefined, "a kernel's failed check does not poison the engine");
  eng.resetState();
  assert.equal((await eng.step(id, slots(0))).outputs.y[0], 10);
  assert.equal(eng.stats().entries, 1);
  assert.ok(eng.stats().hostMicrosPerStep > 0);
  await eng.unload();
});

test("a fault in the wait for several launches in flight fails each of them, then NeedsReset; a launch after the reset steps", async () => {
  const dev = new FaultyDevice();
  const eng = new Engine(dev, { compile: compileGraph });
  const id = eng.addEntry("s", stepGraph());
  await eng.step(id, slots(0));
  const launched = [1, 2, 3].map((p, i) => eng.launch(id, slots(p), { instance: i }));
  dev.armed = "kernel";
  // finished concurrently (as Driver steps in flight are) and in turn: none returns the void outputs
  const done = await Promise.allSettled(launched.slice(0, 2).map((l) => eng.finish(l)));
  for (const d of done) assert.ok(d.status === "rejected" && d.reason instanceof KernelFault, `a launch in flight got ${d.status}`);
  await assert.rejects(eng.finish(launched[2]), KernelFault);
  assert.throws(() => eng.launch(id, slots(4)), NeedsReset);
  eng.resetState(id);
  assert.equal((await eng.step(id, slots(0), { instance: 1 })).outputs.y[0], 10);
  await eng.unload();
});
