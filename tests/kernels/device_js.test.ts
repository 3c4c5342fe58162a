// JsDevice: buffers, record/replay vs eager, copies, arena windows, staged kernel faults, poisoning.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import type { DeviceBuffer, DeviceStep } from "../../backends/device.ts";
import { KernelFault, Poisoned } from "../../backends/errors.ts";
import { f32, KernelBuilder } from "../../kernels/ir.ts";
import * as lib from "../../kernels/lib/mod.ts";
import { open } from "../devices/js.ts";

const work = { bytes: 0, flops: 0 };
const f32s = (b: Uint8Array) => [...new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4)];
const bytesOf = (a: number[]) => new Uint8Array(Float32Array.from(a).buffer);

test("tests/devices/js.ts opens a JS device", async () => {
  const d = await open();
  assert.ok(typeof d !== "string");
  assert.equal(d.target.backend, "js");
  assert.equal(d.target.caps.subgroupSize, 1);
});

test("write, read and free", async () => {
  const dev = new JsDevice();
  const b = dev.alloc(32, "device");
  dev.write(b, 8, new Uint8Array([1, 2, 3]));
  assert.deepEqual([...await dev.read(b, 7, 5)], [0, 1, 2, 3, 0]);
  assert.equal(dev.allocated, 32);
  dev.free(b);
  assert.equal(dev.allocated, 0);
  assert.throws(() => dev.write(b, 0, new Uint8Array(1)));
  assert.throws(() => dev.write(dev.alloc(4, "device"), 2, new Uint8Array(4)));
});

test("a recording replays the same work as eager runs, reading slots rewritten between replays", async () => {
  const dev = new JsDevice({ debug: true });
  const caps = dev.target.caps;
  // one arena holds x and y; the slot buffer holds the position; the state buffer is the cache
  const arena = dev.alloc(64, "device"), slot = dev.alloc(4, "upload"), cache = dev.alloc(4 * 4 * 4, "device");
  const out = dev.alloc(16, "readback");
  const scale = lib.elementwise(caps, { n: 4, inputs: [{ type: "f32" }], out: "f32", expr: { op: "mul", args: [{ in: 0 }, 2] } });
  const upd = lib.updateSlice(caps, { rows: 1, width: 4, cap: 4 });
  const win = (buffer: DeviceBuffer, offset: number, bytes: number) => ({ buffer, offset, bytes });
  const steps: DeviceStep[] = [
    { k: "kernel", compiled: dev.compile(scale), grid: scale.grid, work, bindings: [win(arena, 0, 16), win(arena, 32, 16)] },
    { k: "kernel", compiled: dev.compile(upd), grid: upd.grid, work, bindings: [win(arena, 32, 16), win(slot, 0, 4), win(cache, 0, 64)] },
    { k: "copy", src: win(arena, 32, 16), dst: win(out, 0, 16), work },
  ];
  assert.equal(dev.compile(scale), dev.compile(scale), "compiled kernels are cached");
  const rec = dev.record(steps);
  assert.equal(rec.steps, 3);
  for (let pos = 0; pos < 4; pos++) {
    dev.write(arena, 0, bytesOf([pos, 1, 2, 3]));
    dev.write(slot, 0, new Uint8Array(Uint32Array.from([pos]).buffer));
    dev.replay(rec);
    await dev.synchronize(1000);
    assert.deepEqual(f32s(await dev.read(out, 0, 16)), [2 * pos, 2, 4, 6]);
  }
  assert.deepEqual(f32s(await dev.read(cache, 0, 64)), [0, 2, 4, 6, 2, 2, 4, 6, 4, 2, 4, 6, 6, 2, 4, 6]);
  // eager: the same steps, issued one by one, give the same bytes
  const before = await dev.read(cache, 0, 64);
  dev.write(cache, 0, new Uint8Array(64));
  for (let pos = 0; pos < 4; pos++) {
    dev.write(arena, 0, bytesOf([pos, 1, 2, 3]));
    dev.write(slot, 0, new Uint8Array(Uint32Array.from([pos]).buffer));
    for (const s of steps) dev.run([s]);
    await dev.synchronize(1000);
  }
  assert.deepEqual(await dev.read(cache, 0, 64), before);
  dev.releaseRecording(rec);
  assert.throws(() => dev.replay(rec));
});

test("a failed check surfaces at synchronize as KernelFault(kernel, code); later work in the submission is skipped", async () => {
  const dev = new JsDevice();
  const caps = dev.target.caps;
  const g = lib.gather(caps, { rows: 1, width: 4, vocab: 3, table: "f32" });
  const table = dev.alloc(48, "device"), ids = dev.alloc(4, "upload"), out = dev.alloc(16, "device"), flag = dev.alloc(4, "device");
  const b = new KernelBuilder("mark", { workgroup: 1, grid: 1 });
  b.store(b.buffer("flag", "f32", "w"), 0, f32(1));
  const mark = b.build();
  const rec = dev.record([
    { k: "kernel", compiled: dev.compile(g), grid: g.grid, work, bindings: [table, ids, out].map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes })) },
    { k: "kernel", compiled: dev.compile(mark), grid: mark.grid, work, bindings: [{ buffer: flag, offset: 0, bytes: 4 }] },
  ]);
  dev.write(ids, 0, new Uint8Array(Uint32Array.from([3]).buffer));
  dev.replay(rec);
  dev.replay(rec); // still staged: nothing runs until the fault is reported
  await assert.rejects(dev.synchronize(1000), (e: unknown) =>
    e instanceof KernelFault && e.kernel === g.name && e.code === lib.FAULT.GATHER_ID && e.backend === "js");
  assert.deepEqual(f32s(await dev.read(flag, 0, 4)), [0]);
  assert.equal(dev.poisoned, undefined, "a kernel check does not poison the JS device");
  dev.write(ids, 0, new Uint8Array(Uint32Array.from([2]).buffer));
  dev.replay(rec);
  await dev.synchronize(1000);
  assert.deepEqual(f32s(await dev.read(flag, 0, 4)), [1]);
});

test("a destroyed device refuses work as Poisoned", async () => {
  const dev = new JsDevice();
  await dev.destroy();
  assert.throws(() => dev.alloc(4, "device"), Poisoned);
  await assert.rejects(dev.synchronize(10), Poisoned);
});
