// Per-step device time (Device.stepTimes): Vulkan timestamp queries and WebGPU timestamp-query around every
// dispatch of a replay. A heavy kernel must time longer than a light one, copies between them keep the order,
// timing changes no result, nothing is reported before a replay finished or on a device opened without it;
// and stepTimesOf's tick arithmetic (wrap-around past the valid bits, the last step's interval).
import { test } from "node:test";
import assert from "node:assert/strict";
import { type Device, type DeviceStep, stepTimesOf } from "../../backends/device.ts";
import { KernelBuilder, u32 } from "../../kernels/ir.ts";
import { probeBackend } from "../../backends/open.ts";

test("stepTimesOf: intervals start to start, busy start to end, ticks wrap at the valid bits", () => {
  const t = stepTimesOf(new BigUint64Array([10n, 20n, 30n, 35n, 40n, 46n]), 2);
  assert.deepEqual(t, [{ interval: 0.04, busy: 0.02 }, { interval: 0.02, busy: 0.01 }, { interval: 0.012, busy: 0.012 }]);
  // 8 valid bits: 250 -> 4 (wrapped) is 10 ticks
  const w = stepTimesOf([0xff00n + 250n, 0xff00n + 260n], 1000, 8);
  assert.deepEqual(w, [{ interval: 10, busy: 10 }]);
});

/**
 * A kernel whose every invocation steps a linear congruential generator `iters` times: y[i] = lcg^iters(0) with
 * i added at each step. A multiply-add chain, so its time grows with iters (a plain sum has a closed form the
 * shader compiler may use). At most 65535: lavapipe's loops stop there.
 */
function loop(iters: number) {
  const b = new KernelBuilder(`lcg_${iters}`, { workgroup: 64, grid: 4 });
  const y = b.buffer("y", "u32", "w");
  const acc = b.let(u32(0), "u32", "acc");
  b.for(u32(0), u32(iters), 1, () => b.set(acc, acc.mul(u32(1664525)).add(u32(1013904223)).add(b.gid.x)));
  b.store(y, b.gid.x, acc);
  return b.build();
}
function lcg(iters: number, i: number): number {
  let x = 0;
  for (let k = 0; k < iters; k++) x = (Math.imul(x, 1664525) + 1013904223 + i) >>> 0;
  return x;
}

for (const backend of ["vulkan", "wgpu"] as const) {
  const dev = await probeBackend(backend, { vulkan: { timestamps: true }, wgpu: { timestamps: true } });
  const timed = typeof dev !== "string" && dev.stepTimes !== undefined;
  let skip: string | false = typeof dev === "string" ? dev : false;
  if (!skip && !(backend === "vulkan" || (dev as Device & { features: { timestamps: boolean } }).features.timestamps)) {
    skip = `${(dev as Device).target.device} offers no timestamp-query`;
  }
  if (!skip && !timed) skip = "the device has no stepTimes";
  test(`${backend}: stepTimes around every dispatch of a replay: a heavy kernel times longer than a light one`, { skip, timeout: 120_000 }, async () => {
    const d = dev as Device;
    const HEAVY = 60000, heavy = loop(HEAVY), light = loop(1);
    const a = d.alloc(1024, "device"), b = d.alloc(1024, "device"), c = d.alloc(1024, "readback");
    const W = { bytes: 0, flops: 0 };
    const bind = (buffer: typeof a) => [{ buffer, offset: 0, bytes: 1024 }];
    const steps: DeviceStep[] = [
      { k: "kernel", compiled: d.compile(heavy), grid: heavy.grid, work: W, bindings: bind(a) },
      { k: "copy", src: bind(a)[0], dst: bind(c)[0], work: W },
      // the light kernel writes the heavy one's buffer too (after the copy read it), so the barriers order the
      // three steps and the light one's interval cannot overlap the heavy one's (lavapipe under load did)
      { k: "kernel", compiled: d.compile(light), grid: light.grid, work: W, bindings: bind(a) },
    ];
    const rec = d.record(steps);
    assert.equal(d.stepTimes!(rec), undefined, "nothing before a replay finished");
    const busy: [number[], number[]] = [[], []];
    const fastest = () => busy.map((b) => Math.min(...b));
    // at least 5 replays, more (up to 20) while the fastest times do not yet separate: see below
    for (let r = 0; r < 20 && (r < 5 || fastest()[0] <= 4 * fastest()[1]); r++) {
      d.replay(rec);
      await d.synchronize(60_000);
      const t = d.stepTimes!(rec)!;
      assert.equal(t.length, 3);
      for (const i of [0, 2]) {
        assert.ok(Number.isFinite(t[i].busy) && t[i].busy >= 0 && t[i].interval >= t[i].busy - 1e-3, `replay ${r} step ${i}: ${JSON.stringify(t[i])}`);
      }
      if (backend === "vulkan") assert.ok(Number.isFinite(t[1].busy) && t[1].busy >= 0, "vulkan times copies too");
      else assert.ok(Number.isNaN(t[1].busy), "wgpu does not time copies");
      busy[0].push(t[0].busy), busy[1].push(t[2].busy);
    }
    // Each kernel's fastest replay: load on the machine (lavapipe's threads descheduled mid-kernel, which once
    // made one light replay time longer than a heavy one, and in a fresh-clone .ci/run under Bun every one of 5
    // light replays take >= 6.9 ms) only lengthens a time, so the fastest is nearest its own cost, and more replays
    // get nearer. The heavy kernel does 60000x the light one's work: 4x is far inside that.
    const [h, l] = fastest();
    assert.ok(h > 4 * l, `fastest heavy ${h.toFixed(1)} µs vs fastest light ${l.toFixed(1)} µs (all: ${busy.map((b) => b.map((x) => x.toFixed(0)).join(",")).join(" / ")})`);
    const y = new Uint32Array((await d.read(c, 0, 1024)).buffer);
    assert.deepEqual([y[0], y[1], y[255]], [lcg(HEAVY, 0), lcg(HEAVY, 1), lcg(HEAVY, 255)], "timing changes no result");
    d.releaseRecording(rec);
    for (const x of [a, b, c]) d.free(x);
  });
  test(`${backend}: a device opened without timestamps reports none`, { skip: typeof dev === "string" ? dev : false, timeout: 120_000 }, async () => {
    const plain = await probeBackend(backend);
    assert.ok(typeof plain !== "string", String(plain));
    const k = loop(1), a = plain.alloc(1024, "device");
    const rec = plain.record([{ k: "kernel", compiled: plain.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: a, offset: 0, bytes: 1024 }] }]);
    plain.replay(rec);
    await plain.synchronize(60_000);
    assert.equal(plain.stepTimes?.(rec), undefined);
    plain.releaseRecording(rec);
    await plain.destroy();
  });
  if (typeof dev !== "string") test(`${backend}: close`, async () => await dev.destroy());
}
